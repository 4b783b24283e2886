#!/usr/bin/env bash
# Start-up time of the command line, before vs after, measured side by side in one run.
#
#   benchmarks/bench_startup.sh BEFORE_COMMIT [RUNS] [cached|uncached]
#
# cached (default): Python's bytecode cache on (PYTHONDONTWRITEBYTECODE unset, the cache under a
# temporary PYTHONPYCACHEPREFIX, written by one untimed warm-up run): what an installed plansweep
# sees from its second run on. uncached: every module compiled from source on every run
# (PYTHONDONTWRITEBYTECODE=1, as on the machine these figures come from).
#
# BEFORE_COMMIT's tree is exported (git archive) to a temporary folder; the working tree is
# "after". Each of RUNS rounds runs, alternating before and after, `python3 -m cli --help` and
# one `python3 -m cli evaluate ...`, timed from a Python parent (wall by perf_counter, user+sys
# CPU seconds of the child by getrusage; to the millisecond, where /usr/bin/time gives 10 ms).
# Prints the median of each, `python3 -c pass` for the interpreter's own start-up and
# `python3 -c 'import numpy'` for numpy's (evaluate needs numpy), and the load average before and
# after (the machine may be shared).
set -euo pipefail
before=${1:?usage: $0 BEFORE_COMMIT [RUNS]}
runs=${2:-15}
mode=${3:-cached}
if [ "$mode" = cached ]; then
    unset PYTHONDONTWRITEBYTECODE
    export PYTHONPYCACHEPREFIX=$(mktemp -d)
else
    export PYTHONDONTWRITEBYTECODE=1
fi
here=$(cd "$(dirname "$0")/.." && pwd)
old=$(mktemp -d)
git -C "$here" archive "$before" | tar -x -C "$old"
EVAL=(evaluate --model gpt3-175b --cluster h100x1024 --tp 8 --pp 8 --recompute selective --sequence-parallel
      --zero-stage 1)
out=$(mktemp)
one() {  # label dir args...: wall and CPU seconds of the command, to the millisecond
    local label=$1 dir=$2; shift 2
    (cd "$dir" && python3 - "$label" "$@" >>"$out" <<'PY'
import resource, subprocess, sys, time
r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL, check=True)
t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
print(sys.argv[1], f"{t1 - t0:.4f}", f"{r1.ru_utime - r0.ru_utime:.4f}", f"{r1.ru_stime - r0.ru_stime:.4f}")
PY
    )
}
for dir in "$old" "$here"; do  # warm-up (writes the bytecode cache when cached)
    (cd "$dir" && python3 -m cli --help >/dev/null && python3 -m cli "${EVAL[@]}" >/dev/null)
done
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for _ in $(seq "$runs"); do
    one "python-pass" "$here" python3 -c pass
    one "python-numpy" "$here" python3 -c "import numpy"
    for side in before after; do
        dir=$here; [ "$side" = before ] && dir=$old
        one "$side-help" "$dir" python3 -m cli --help
        one "$side-evaluate" "$dir" python3 -m cli "${EVAL[@]}"
    done
done
echo "load average before: $load_before, after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" "$runs" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    label, wall, user, sys_ = line.split()
    rows.setdefault(label, []).append((float(wall), float(user) + float(sys_)))
print(f"| command | median wall s | median CPU s (user+sys) | runs |")
print("| --- | ---: | ---: | ---: |")
for label in ("python-pass", "python-numpy", "before-help", "after-help", "before-evaluate", "after-evaluate"):
    r = rows[label]
    print(f"| {label} | {statistics.median(w for w, _ in r):.3f} | {statistics.median(c for _, c in r):.3f} | {len(r)} |")
PY
rm -rf "$old" "$out" ${PYTHONPYCACHEPREFIX:+"$PYTHONPYCACHEPREFIX"}
