"""Weak-scaling series of the published runs: the same run on more GPUs, its error by GPU count, and what of the
growth of the measured step the model leaves out.

    PYTHONPATH=. python3 benchmarks/scaling_series.py [FILE.csv]

A series is the rows of one source that agree on every column but the name, the page, the GPU count, the
data-parallel degree, the global batch, the published figures and the notes, at one batch per data-parallel rank
(weak scaling). For each row:
the measured and predicted step (`plansweep validate`'s), the error, and, of the setting validate chose, the first
stage's data-parallel exchange (its raw seconds before any overlap, costmodel.stage_rows' dp_comm_s: a micro-batch's
under ZeRO-3, the step's otherwise) against its forward and its backward + weight-gradient time (F, B + W a
micro-batch). Under ZeRO-3 the exchange is split as the cost model splits it (the forward's gather w / (2 w + g) of
it, w and g a weight's and a gradient's bytes on the wire), so that each pass's collectives stand against their own
pass ("fwd x", "bwd x": how many times longer the pass's computation is). Between consecutive GPU counts: the growth
of the measured step the prediction does not have, per doubling of the GPUs, in ms, in ms per billion parameters
and in % of the measured step.
"""

from __future__ import annotations

import argparse
import csv
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
from validation_breakdown import CSV

from costmodel import evaluate, stage_rows
from costmodel._validate import MeasuredRun, _candidates, predict, read_runs

VARYING = {"name", "page", "num_gpus", "dp", "global_batch", "note", "memory_note"}


def _key(row: dict) -> tuple:
    """The columns a series shares, with the batch a data-parallel rank runs (global batch / dp: weak scaling)."""
    fixed = tuple((k, v) for k, v in row.items() if k not in VARYING and not k.startswith("measured_"))
    return (*fixed, ("per_rank", float(row["global_batch"]) / float(row["dp"] or 1)))


def _row_parts(run: MeasuredRun) -> dict:
    """predict's figures and the chosen setting's first-stage exchange and passes (per micro-batch)."""
    res = predict(run)
    cand, fw = _candidates(run), run.profile()
    met = evaluate(run.model, run.cluster, cand, framework=fw)
    i = int(np.argmin(np.abs(met["step_time_s"] - res["predicted_iteration_time_s"])))
    st = stage_rows(run.model, run.cluster, cand, i, framework=fw)[0]
    m = float(met["microbatches"][i])
    raw = st["dp_comm_s"] / m if int(cand.zero_stage[i]) == 3 else st["dp_comm_s"]
    fwd, bwd = st["forward_s"], st["backward_s"] + st["weight_grad_s"]
    w, g = fw.weight_gather_bytes[0], fw.grad_reduce_bytes[0]
    share = w / (2 * w + g) if int(cand.zero_stage[i]) == 3 else 0.0
    return dict(meas=res["measured_iteration_time_s"], pred=res["predicted_iteration_time_s"], err=res["error_pct"],
                raw=raw, fwd_x=fwd / (share * raw) if share * raw > 0 else math.inf,
                bwd_x=bwd / ((1 - share) * raw) if raw > 0 else math.inf, zero=int(cand.zero_stage[i]),
                params=run.model.num_params())


def _x(ratio: float) -> str:
    return f"{ratio:6.1f}" if math.isfinite(ratio) else f"{'-':>6s}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv", nargs="?", default=str(CSV))
    args = ap.parse_args()
    path = Path(args.csv)
    rows = list(csv.DictReader(path.open()))
    runs = read_runs(path)
    series = defaultdict(list)
    for row, run in zip(rows, runs, strict=True):
        series[_key(row)].append((int(row["num_gpus"]), run))
    print(f"{'run':44s} {'GPUs':>5s} {'meas s':>8s} {'pred s':>8s} {'err%':>6s} {'ZeRO':>4s} {'dp s':>8s} "
          f"{'fwd x':>6s} {'bwd x':>6s} | unpriced growth a doubling: ms, ms/B params, % of step")
    for members in series.values():
        if len({n for n, _ in members}) < 2:
            continue
        members.sort(key=lambda x: x[0])
        prev = None
        for n, run in members:
            p = _row_parts(run)
            tail = ""
            if prev is not None and n > prev[0]:
                d = math.log2(n / prev[0])
                miss = ((p["meas"] - prev[1]["meas"]) - (p["pred"] - prev[1]["pred"])) / d
                tail = f"{1e3 * miss:7.0f} {1e3 * miss / (p['params'] / 1e9):7.1f} {100 * miss / p['meas']:+6.1f}%"
            print(f"{run.name:44s} {n:5d} {p['meas']:8.3f} {p['pred']:8.3f} {p['err']:+6.1f} {p['zero']:4d} "
                  f"{p['raw']:8.3f} {_x(p['fwd_x'])} {_x(p['bwd_x'])} | {tail}")
            prev = (n, p)
        print()


if __name__ == "__main__":
    main()
