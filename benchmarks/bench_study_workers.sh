#!/usr/bin/env bash
# Parallel efficiency of a capacity-planning study at 1, 2, 4, 8 and 16 workers on one 16-core machine, against the
# same study in-process (no Ray, one core). Under 8 minutes on 16 cores: the 559,872-strategy study of
# bench_study_scale.py (--scale 5e5: 6 units of 10^5; ~11 s in-process at ~5x10^4 rows/s on one core),
# then the 10^7 study at 16 workers only (driver peak memory at scale). Prints one JSON line per run and the
# efficiencies T_in-process / (workers x T_workers) with the load average around each run.
#
#     bash benchmarks/bench_study_workers.sh            (from the repository root)
#     bash benchmarks/bench_study_workers.sh 1e8 16,8,4 300   (a study, the worker counts in order, seconds in all:
#                                                             the in-process base, then each count while time is left;
#                                                             no 10^7 run after)
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD" RAY_USAGE_STATS_ENABLED=0
nproc; uptime
SCALE="${1:-5e5}" WORKERS="${2:-1,2,4,8,16}" BUDGET_S="${3:-450}" python3 - <<'PY'
import json, os, sys, time
sys.path.insert(0, "benchmarks")
from bench_study_scale import run_one

scale, budget = os.environ["SCALE"], float(os.environ["BUDGET_S"])
deadline = time.monotonic() + budget
base = run_one(scale, None, True)
print(json.dumps(base), flush=True)
for w in (int(x) for x in os.environ["WORKERS"].split(",")):
    if time.monotonic() > deadline - 60:
        print(json.dumps({"skipped_workers": w, "why": "time"}), flush=True)
        break
    r = run_one(scale, w, False)
    r["parallel_efficiency"] = base["sweep_s"] / (w * r["sweep_s"])
    print(json.dumps(r), flush=True)
if scale == "5e5" and time.monotonic() < deadline - 200:
    print(json.dumps(run_one("1e7", 16, False)), flush=True)
PY
