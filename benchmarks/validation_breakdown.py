"""Each published run's predicted time parts next to its published figure.

    PYTHONPATH=. python3 benchmarks/validation_breakdown.py [SOURCE_PREFIX]   # default: pytorch/torchtitan
    PYTHONPATH=. python3 benchmarks/validation_breakdown.py --worse-than 10   # every row worse than 10%

For every row of tests/data/validation/published_runs.csv whose source starts with SOURCE_PREFIX (or whose error is
worse than the given percentage): the iteration time the published figure implies, the predicted one, the error (as
`plansweep validate`), the predicted parts of the step (seconds: compute, recompute, tp / cp / ep / pp / dp
communication exposed, pipeline bubble, optimizer) of the setting `validate` chose, the predicted memory per GPU (GB,
"!" past the GPU's), and the measured MFU (model FLOPs, against the GPU preset's bf16 peak).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
from pathlib import Path

import numpy as np

from costmodel import evaluate
from costmodel._validate import MeasuredRun, _candidates, predict, read_runs

CSV = Path(__file__).resolve().parents[1] / "tests/data/validation/published_runs.csv"
PARTS = ("compute_s", "recompute_s", "tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s", "dp_comm_s", "bubble_s",
         "optimizer_s")


def parts(run: MeasuredRun) -> tuple[dict, dict]:
    """predict's result for the run, and the predicted parts (PARTS, mem_total_bytes) of the setting it chose."""
    res = predict(run)
    unbounded = dataclasses.replace(run.cluster.gpu, hbm_bytes=math.inf)
    met = evaluate(run.model, dataclasses.replace(run.cluster, gpu=unbounded), _candidates(run),
                   framework=run.profile())
    fits = met["mem_total_bytes"] <= run.cluster.gpu.hbm_bytes
    t = res["predicted_iteration_time_s"]
    # the candidate predict chose: its step time, among those that fit when any does (predict's own rule)
    pool = fits if res["memory_fits"] else np.ones_like(fits)
    i = int(np.argmin(np.where(pool, np.abs(met["step_time_s"] - t), np.inf)))
    return res, {k: float(met[k][i]) for k in (*PARTS, "mem_total_bytes")}


def line(run: MeasuredRun, res: dict, p: dict) -> str:
    meas = res["measured_iteration_time_s"]
    mfu = run.model.model_flops_per_sample() * run.fixed["global_batch"] / (
        meas * run.cluster.gpu.peak_flops[0] * run.cluster.num_gpus)
    mem = f"{p['mem_total_bytes'] / 1e9:6.1f}" + ("!" if res["memory_fits"] is False else " ")
    return (f"{run.name:44s} {meas:8.3f} {res['predicted_iteration_time_s']:8.3f} {res['error_pct']:+7.1f} "
            + " ".join(f"{p[k]:8.3f}" for k in PARTS) + f" {mem} {mfu:6.3f}  {res['chosen']}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("prefix", nargs="?", default="pytorch/torchtitan", help="rows whose source starts so")
    ap.add_argument("--worse-than", type=float, metavar="PCT", help="every row whose |error| is over PCT instead")
    args = ap.parse_args()
    sources = [r["source"] for r in csv.DictReader(CSV.open())]
    print(f"{'run':44s} {'meas':>8s} {'pred':>8s} {'err%':>7s} " + " ".join(f"{k[:-2][:8]:>8s}" for k in PARTS)
          + f" {'mem GB':>7s} {'mfu':>6s}  chosen")
    for source, run in zip(sources, read_runs(CSV), strict=True):
        if args.worse_than is None and not source.startswith(args.prefix):
            continue
        res, p = parts(run)
        if args.worse_than is not None and not abs(res["error_pct"]) > args.worse_than:
            continue
        print(line(run, res, p))


if __name__ == "__main__":
    main()
