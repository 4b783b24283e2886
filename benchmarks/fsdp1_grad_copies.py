"""FSDP1's gradient copies around each reduce-scatter on the LLM Foundry rows: the join shipped, the rest a what-if.

    PYTHONPATH=. python3 benchmarks/fsdp1_grad_copies.py

Analysis only: nothing here changes the shipped model. It prices the LLM Foundry rows of the validation set
(tests/data/validation/published_runs.csv, source mosaicml/) and of the A100 calibration set
(tests/data/validation/llm_foundry_calibration.csv) as `plansweep validate` does (costmodel._validate.predict), and
considers the memory-bound kernels torch's FSDP1 runs on every unit's unsharded gradient each time it reduce-scatters
it (pytorch 3ade90a torch/distributed/fsdp/_runtime_utils.py _post_backward_hook and _default_comm_hooks.py
reduce_scatter_hook), per element of the unit's parameters:

- the flat gradient itself: the unit's parameters are views of its FlatParameter (split, then view), so autograd's
  backward of the split concatenates the views' gradients into one flat tensor (read 2, write 2 bytes in bf16), on
  the computation stream: priced in the shipped model (Framework.pre_reduce_copy_bytes, the llm-foundry profiles);
- the cast to the reduce dtype, ``flat_param.grad.to(handle._reduce_dtype)``: Composer's DEFAULT mixed precision
  reduces in fp32 (read 2, write 4), PURE in bf16 (no cast);
- the pre-divide, ``grad.div_(gradient_predivide_factor)`` (a factor above 1 at every world size above 2:
  _get_gradient_predivide_factor), in place on the reduce dtype (read and write 4, or 2 under PURE).

That is 4 + 6 + 8 = 18 bytes an element under DEFAULT and 4 + 4 = 8 under PURE, at the GPU's HBM rate times its
hbm_eff, once per reduce-scatter: every micro-batch (Composer reduce-scatters each micro-batch's backward under FSDP,
the profile's zero2_scatter_every_microbatch), so m times a step. The cast and the pre-divide run on FSDP1's
post-backward stream, beside the next unit's backward; an element-wise kernel that fills the GPU holds its SMs for
as long as it runs alone, so the what-if adds the cast and the pre-divide (14 bytes an element under DEFAULT, 4
under PURE) after the fact, in series with the computation, on top of the shipped concatenation. The optimizer step
and the root unit's exchange are priced already.

Printed: per validation row the error without the concatenation (the shipped prediction less it), shipped, with the
cast and pre-divide too, and with those and torch's checkpoint early stop (benchmarks/llm_foundry_recompute.py's
what-if, which the H100 table's torch 2.1 runs); per set the mean |error|. Shipping needs every row within 15% that
was within it to stay so.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

import costmodel._block as blk
import costmodel._stages as st
from costmodel._hardware import gpu_preset
from costmodel._validate import predict, read_runs

try:  # run as a script from the repository root (PYTHONPATH=.)
    from benchmarks.llm_foundry_recompute import _early_stop
except ImportError:  # run from benchmarks/
    from llm_foundry_recompute import _early_stop

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "validation"
SETS = {"validation": DATA / "published_runs.csv", "calibration": DATA / "llm_foundry_calibration.csv"}
CAT_BYTES = 2 + 2            # autograd's concatenation of the views' gradients into the flat gradient (bf16)
CAST_BYTES = 2 + 4           # flat_param.grad.to(fp32): read bf16, write fp32 (DEFAULT mixed precision only)
PREDIVIDE_BYTES = {4: 4 + 4, 2: 2 + 2}  # grad.div_ in place, by the reduce dtype's bytes


def copy_bytes(reduce_bytes: int) -> int:
    """HBM bytes FSDP1 moves an element of a unit's parameters around one reduce-scatter of its gradient."""
    return CAT_BYTES + (CAST_BYTES if reduce_bytes == 4 else 0) + PREDIVIDE_BYTES[reduce_bytes]


def mpt_params(r: dict) -> int:
    """An MPT model's parameters: per block 4 h^2 attention + 2 h f MLP + 2 h norm weights (no biases), the tied
    embedding V h and the final norm h."""
    h, f, layers, vocab = (int(r[k]) for k in ("hidden", "ffn_hidden", "layers", "vocab"))
    return layers * (4 * h * h + 2 * h * f + 2 * h) + vocab * h + h


def copies_s(r: dict, cat_only: bool = False) -> float:
    """Seconds a step of row ``r`` (one GPU holds every unit's unsharded gradient in turn: pp = tp = 1) of the cast
    and the pre-divide (not priced); ``cat_only``: of the concatenation on the computation stream alone (priced)."""
    gpu = gpu_preset(r["gpu"])
    m = int(r["global_batch"]) // (int(r["dp"]) * int(r["micro_batch"]))
    reduce_bytes = 2 if r["framework"].endswith("-pure") else 4
    nbytes = CAT_BYTES if cat_only else copy_bytes(reduce_bytes) - CAT_BYTES
    return m * mpt_params(r) * nbytes / (gpu.hbm_Bps * gpu.hbm_eff)


def errors() -> dict:
    """{set: [(name, shipped %, with the cast and pre-divide %, those + early stop %, without the concatenation %)]}
    for every LLM Foundry row of both sets."""
    out: dict = {}
    shipped = blk.layer_terms
    for name, path in SETS.items():
        meta = {r["name"]: r for r in csv.DictReader(path.open()) if r["source"].startswith("mosaicml")}
        runs = [run for run in read_runs(path) if run.name in meta]
        rows = []
        for run in runs:
            p = predict(run)
            blk.layer_terms = _early_stop(shipped)
            st._pool_arrays.cache_clear()
            try:
                q = predict(run)
            finally:
                blk.layer_terms = shipped
                st._pool_arrays.cache_clear()
            add, meas = copies_s(meta[run.name]), p["measured_iteration_time_s"]
            cat = copies_s(meta[run.name], cat_only=True)
            rows.append((run.name, p["error_pct"], 100 * ((p["predicted_iteration_time_s"] + add) / meas - 1),
                         100 * ((q["predicted_iteration_time_s"] + add) / meas - 1),
                         100 * ((p["predicted_iteration_time_s"] - cat) / meas - 1)))
        out[name] = rows
    return out


def main() -> None:
    res = errors()
    print("| row | without the concatenation | shipped | + cast and pre-divide | + those + early stop |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, a, b, c, d in res["validation"]:
        print(f"| {name} | {d:+.1f}% | {a:+.1f}% | {b:+.1f}% | {c:+.1f}% |")
    for name, rows in res.items():
        e = np.array([x[1:] for x in rows])
        moved = sum(1 for x in rows if abs(x[1]) <= 15 < abs(x[2]))
        print(f"{name}: {len(rows)} rows, mean |error| without the concatenation {np.abs(e[:, 3]).mean():.2f}%, "
              f"shipped {np.abs(e[:, 0]).mean():.2f}%, with the cast and pre-divide {np.abs(e[:, 1]).mean():.2f}%, "
              f"with those and early stop {np.abs(e[:, 2]).mean():.2f}%; "
              f"rows the cast and pre-divide take past 15%: {moved}")


if __name__ == "__main__":
    main()
