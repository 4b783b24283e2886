"""What-if for the validation set's BLOOM-176B row: DeepSpeed's BF16_Optimizer gradient accumulation, priced by hand.

    PYTHONPATH=. python benchmarks/bloom_whatif.py

Analysis only: nothing here changes the shipped model. DeepSpeed's pipeline engine calls
``optimizer.update_hp_grads`` after every micro-batch's backward pass when it runs bf16
(deepspeed/runtime/pipe/engine.py, ``_exec_backward_pass``); BF16_Optimizer (bf16 with ZeRO <= 1,
BLOOM's setting) then runs ``hp_grad.data.add_(lp.grad.data.to(hp_grad.dtype))`` on every local
parameter (deepspeed/runtime/bf16_optimizer.py): 18 bytes per parameter (the cast reads 2 and writes
4, the add reads 8 and writes 4). This script adds that time, at the GPU's HBM rate, to each layer's
backward pass (the shape term ``cast_b``, which the pipeline simulation charges per micro-batch) for
rows of the ``deepspeed`` profile in bf16, and prices the BLOOM row as `plansweep validate` does.
The embedding's and head's parameters (first and last stages) are left out. Not in the model: the
ZeRO stage it depends on is not among the per-layer shape terms' keys (BENCHMARKS.md, "Validation").
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

import costmodel._block as ev  # (the block evaluator calls framework_terms from there)
from costmodel._hardware import PRECISIONS
from costmodel._validate import predict, read_runs

CSV = Path(__file__).resolve().parents[1] / "tests/data/validation/published_runs.csv"
HP_GRAD_BYTES = 18.0
_orig = ev.framework_terms
_gpu = {}


def _with_hp_grads(fw, model, terms, t, sp, precision):
    out = _orig(fw, model, terms, t, sp, precision)
    if fw.name == "deepspeed":
        gpu = _gpu["gpu"]
        extra = HP_GRAD_BYTES * model.layer_params() / np.asarray(t, dtype=np.float64) / (gpu.hbm_Bps * gpu.hbm_eff)
        out = {**out, "cast_b": out["cast_b"] + np.where(precision == PRECISIONS.index("bf16"), extra, 0.0)}
    return out


def main() -> None:
    sources = [r["source"] for r in csv.DictReader(CSV.open())]
    for s, run in zip(sources, read_runs(CSV), strict=True):
        if not s.startswith("BigScience"):
            continue
        base = predict(run)
        _gpu["gpu"] = run.cluster.gpu
        ev.framework_terms = _with_hp_grads
        try:
            res = predict(run)
        finally:
            ev.framework_terms = _orig
        meas, t0, t1 = (base["measured_iteration_time_s"], base["predicted_iteration_time_s"],
                        res["predicted_iteration_time_s"])
        print(f"{run.name}: measured {meas:.1f} s; predicted {t0:.1f} s ({base['error_pct']:+.1f}%) -> "
              f"with BF16_Optimizer's accumulation {t1:.1f} s ({res['error_pct']:+.1f}%)")


if __name__ == "__main__":
    main()
