"""FSDP2's copies beside its collectives on the computation stream, on the rows priced under an fsdp2 profile.

    PYTHONPATH=. python3 benchmarks/fsdp2_grad_copies.py

Prints the shipped state and what it moved. torch's FSDP2 (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py,
read at 8fc2039; the copy-in on the current stream since pytorch's "Ran reduce-scatter copy-in in default stream",
2024-06, before the torchtitan rows' torch 1963fc8) runs two copies of a unit's whole unsharded parameters or gradients
on the current (computation) stream, priced by the fsdp2 profiles (Framework.ag_copy_out_bytes, rs_copy_in_bytes;
costmodel._data_parallel.fsdp_copy_bytes):

- foreach_reduce's copy-in, torch._chunk_cat of the unit's gradients into the reduce-scatter input in the reduce dtype,
  before reduce_scatter_stream.wait_stream(current_stream): bf16 read 2, fp32 written 4 (torchtitan's
  mixed_precision_reduce float32): 6 bytes an element, every reduce-scatter (every micro-batch at pp 1); with a
  pipeline once a step, after the last backward, from the unsharded fp32 accumulation (read 4, written 4: 8);
- foreach_all_gather_copy_out, torch.split_with_sizes_copy of the all-gather output into each parameter's unsharded
  tensor, after current_stream().wait_event(all_gather_event): read 2, write 2: 4 bytes an element, every all-gather
  (at pp 1 and ZeRO-3 each unit's forward and again in its backward but for the units kept gathered, torchtitan's last
  block and the root: zero3_kept; with a pipeline the weights stay gathered, once a step).

Both at the GPU's HBM rate times its hbm_eff, over the slowest stage's parameters per GPU, in series with the step
(reported with the exposed exchange, dp_comm_s). FSDP1 (the llm-foundry profiles) all-gathers into the flat parameter
itself (no copy-out); its copy before the reduce-scatter, autograd's join of the views' gradients, is
Framework.pre_reduce_copy_bytes (benchmarks/fsdp1_grad_copies.py).

Printed: per fsdp2 row its error without the copies (its profile with both fields at zero) and shipped, and the
copies' seconds a step; the overall and per-regime mean |error| without and with them, and the rows they take past
15%.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

import numpy as np

from costmodel._frameworks import FRAMEWORKS
from costmodel._validate import predict, read_runs

try:  # run as a script from the repository root (PYTHONPATH=.)
    from benchmarks.validation_by_source import REGIMES, regime_of
except ImportError:  # run from benchmarks/
    from validation_by_source import REGIMES, regime_of

CSV = Path(__file__).resolve().parents[1] / "tests" / "data" / "validation" / "published_runs.csv"
COPIES = {name for name, fw in FRAMEWORKS.items() if fw.ag_copy_out_bytes or any(fw.rs_copy_in_bytes)}


@contextlib.contextmanager
def without_copies():
    """The profiles that price FSDP2's copies, for the duration, with both fields at zero."""
    saved = {name: FRAMEWORKS[name] for name in COPIES}
    try:
        for name, fw in saved.items():
            FRAMEWORKS[name] = dataclasses.replace(fw, ag_copy_out_bytes=0.0, rs_copy_in_bytes=(0.0, 0.0))
        yield
    finally:
        FRAMEWORKS.update(saved)


def main() -> None:
    runs = read_runs(CSV)
    shipped = [predict(run) for run in runs]
    with without_copies():
        bare = [predict(run) for run in runs]
    on = np.array([run.profile().name in COPIES for run in runs])
    e0, e1 = (np.array([p["error_pct"] for p in ps]) for ps in (bare, shipped))
    add = np.array([b["predicted_iteration_time_s"] - a["predicted_iteration_time_s"] for a, b in zip(bare, shipped)])
    print("| row | without the copies | shipped | copies a step |")
    print("| --- | ---: | ---: | ---: |")
    for run, a, b, s in zip(runs, e0, e1, add, strict=True):
        if run.profile().name in COPIES:
            print(f"| {run.name} | {a:+.1f}% | {b:+.1f}% | {1e3 * s:.0f} ms |")
    print(f"all {len(runs)} rows: mean |error| {np.abs(e0).mean():.2f}% -> {np.abs(e1).mean():.2f}%")
    regimes = [regime_of(run) for run in runs]
    fp8 = np.array([run.fixed.get("precision") == "fp8" for run in runs])
    for regime in (*REGIMES, "fp8 (any layout)"):
        sel = fp8 if regime.startswith("fp8") else np.array([r == regime for r in regimes])
        print(f"{regime}: {np.abs(e0[sel]).mean():.2f}% -> {np.abs(e1[sel]).mean():.2f}%")
    past = [run.name for run, a, b in zip(runs, e0, e1, strict=True) if abs(a) <= 15 < abs(b)]
    print(f"fsdp2 rows ({on.sum()}): {np.abs(e0[on]).mean():.2f}% -> {np.abs(e1[on]).mean():.2f}%; rows taken past "
          f"15%: {past}")


if __name__ == "__main__":
    main()
