"""The attention core each context-parallel run's published step implies, against the model's.

    PYTHONPATH=. python3 benchmarks/cp_implied_attention.py

For every row of tests/data/validation/published_runs.csv with cp > 1, and the cp 1 rows of the same published series
(torchtitan's Table 2 and Table 6), the step is priced twice as `plansweep validate` prices it: as it is, and with the
attention core (costmodel._layer_compute.layer_costs's ``attn`` term: the fused kernel's FLOPs at its measured rate,
its ring's non-causal share included) priced at zero, everything else kept (the ring's merges and copies, its
exchange, the GEMMs, recompute, the data-parallel exchange, the pipeline). The difference is the model's attention
core over the step; the measured step less the second price is what the published figure leaves for it. Their ratio
says how much faster or slower the attention core would have to run for the row to agree, were everything else
priced right. For the torchtitan series the published steps hold the tokens a GPU constant (32,768: local batch x
sequence / cp), so the attention core's work a GPU grows as cp and ``per unit`` (implied / cp) compares the degrees.
"""

from __future__ import annotations

import sys
from pathlib import Path

import costmodel._layer_compute as layer_compute
from costmodel._validate import predict, read_runs

CSV = Path(__file__).resolve().parents[1] / "tests/data/validation/published_runs.csv"
SERIES_CP1 = ("tt-llama3.1-8b-cp1-", "tt-llama3.1-405b-cp1-")  # the cp 1 rows of the published CP tables


def _without_attention_core():
    """Every module's layer_costs replaced by one whose ``attn`` is zero (undone by the returned function)."""
    orig = layer_compute.layer_costs

    def no_core(*args, **kwargs):
        terms = dict(orig(*args, **kwargs))
        terms["attn"] = terms["attn"] * 0.0
        return terms

    held = [m for m in list(sys.modules.values()) if m is not None and getattr(m, "layer_costs", None) is orig]
    for m in held:
        m.layer_costs = no_core

    def undo():
        for m in held:
            m.layer_costs = orig
    return undo


def main() -> None:
    runs = [r for r in read_runs(CSV) if (r.fixed.get("cp") or 1) > 1 or r.name.startswith(SERIES_CP1)]
    full = [predict(r) for r in runs]
    undo = _without_attention_core()
    try:
        rest = [predict(r)["predicted_iteration_time_s"] for r in runs]
    finally:
        undo()
    print(f"{'run':44s} {'cp':>3s} {'meas s':>8s} {'pred s':>8s} {'rest s':>8s} {'model attn':>10s} "
          f"{'implied':>8s} {'ratio':>6s} {'per unit':>8s}")
    for r, res, other in zip(runs, full, rest, strict=True):
        c = int(r.fixed.get("cp") or 1)
        meas, pred = res["measured_iteration_time_s"], res["predicted_iteration_time_s"]
        model_attn, implied = pred - other, meas - other
        print(f"{r.name:44s} {c:3d} {meas:8.2f} {pred:8.2f} {other:8.2f} {model_attn:10.2f} {implied:8.2f} "
              f"{implied / model_attn:6.2f} {implied / c:8.2f}")


if __name__ == "__main__":
    main()
