"""Each published run's predicted time parts next to its published figure (issue 13's torchtitan analysis).

    PYTHONPATH=. python benchmarks/validation_breakdown.py [SOURCE_PREFIX]   # default: pytorch/torchtitan

For every row of tests/data/validation/published_runs.csv whose source starts with SOURCE_PREFIX: the
iteration time the published figure implies, the predicted one, the error (as `plansweep validate`), the
predicted parts of the step (seconds: compute, recompute, tp / cp / pp / dp communication exposed, pipeline
bubble, optimizer) of the setting `validate` chose, and the measured MFU (model FLOPs, against the GPU
preset's bf16 peak).
"""

from __future__ import annotations

import csv
import dataclasses
import math
import sys
from pathlib import Path

import numpy as np

from costmodel import evaluate
from costmodel._validate import _candidates, predict, read_runs

CSV = Path(__file__).resolve().parents[1] / "tests/data/validation/published_runs.csv"
PARTS = ("compute_s", "recompute_s", "tp_comm_s", "cp_comm_s", "pp_comm_s", "dp_comm_s", "bubble_s", "optimizer_s")


def main() -> None:
    prefix = sys.argv[1] if len(sys.argv) > 1 else "pytorch/torchtitan"
    sources = [r["source"] for r in csv.DictReader(CSV.open())]
    print(f"{'run':42s} {'meas':>8s} {'pred':>8s} {'err%':>6s} " + " ".join(f"{p[:-2][:9]:>9s}" for p in PARTS)
          + "  mfu_meas  chosen")
    for source, run in zip(sources, read_runs(CSV), strict=True):
        if not source.startswith(prefix):
            continue
        res = predict(run)
        unbounded = dataclasses.replace(run.cluster.gpu, hbm_bytes=math.inf)
        met = evaluate(run.model, dataclasses.replace(run.cluster, gpu=unbounded), _candidates(run),
                       framework=run.framework)
        t, meas = res["predicted_iteration_time_s"], res["measured_iteration_time_s"]
        i = int(np.argmin(np.abs(met["step_time_s"] - t)))  # the candidate predict chose
        mfu = run.model.model_flops_per_sample() * run.fixed["global_batch"] / (
            meas * run.cluster.gpu.peak_flops[0] * run.cluster.num_gpus)
        print(f"{run.name:42s} {meas:8.3f} {t:8.3f} {res['error_pct']:+6.1f} "
              + " ".join(f"{met[p][i]:9.3f}" for p in PARTS) + f"  {mfu:8.3f}  {res['chosen']}")


if __name__ == "__main__":
    main()
