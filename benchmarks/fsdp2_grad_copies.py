"""FSDP2's copies beside its collectives on the computation stream, on the torchtitan rows: what they would move.

    PYTHONPATH=. python3 benchmarks/fsdp2_grad_copies.py

Analysis only: nothing here changes the shipped model. torch's FSDP2 (torch/distributed/fsdp/_fully_shard/
_fsdp_collectives.py, read at 8fc2039; the copy-in on the current stream since pytorch's "Ran reduce-scatter copy-in
in default stream", 2024-06, before the torchtitan rows' torch 1963fc8) runs two copies of a unit's whole unsharded
parameters or gradients on the current (computation) stream, neither priced by the fsdp2 profiles:

- foreach_reduce's copy-in, torch._chunk_cat of the unit's gradients into the reduce-scatter input in the reduce dtype,
  before reduce_scatter_stream.wait_stream(current_stream): bf16 read 2, fp32 written 4 (torchtitan's
  mixed_precision_reduce float32): 6 bytes an element, every reduce-scatter (every micro-batch at pp 1; once a step,
  after the last backward, with a pipeline);
- foreach_all_gather_copy_out, torch.split_with_sizes_copy of the all-gather output into each parameter's unsharded
  tensor, after current_stream().wait_event(all_gather_event): read 2, write 2: 4 bytes an element, every all-gather
  (at pp 1 and ZeRO-3 each unit's forward and again in its backward but for the units kept gathered, torchtitan's last
  block and the root: zero3_kept; with a pipeline the weights stay gathered, once a step).

FSDP1 (the llm-foundry profiles) all-gathers into the flat parameter itself (no copy-out); its copy before the
reduce-scatter, autograd's join of the views' gradients, is priced (Framework.pre_reduce_copy_bytes). This adds the
two FSDP2 copies after the fact, at the GPU's HBM rate times its hbm_eff, in series with the step, to the rows priced
under an fsdp2 profile (torchtitan's and Trainy's), and prints the shipping rule's figures: the overall and per-regime
mean |error| before and after, and the rows taken past 15%.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from costmodel._hardware import gpu_preset
from costmodel._validate import predict, read_runs

try:  # run as a script from the repository root (PYTHONPATH=.)
    from benchmarks.validation_by_source import REGIMES, regime_of
except ImportError:  # run from benchmarks/
    from validation_by_source import REGIMES, regime_of

CSV = Path(__file__).resolve().parents[1] / "tests" / "data" / "validation" / "published_runs.csv"
COPY_IN_BYTES = 2 + 4  # _chunk_cat: bf16 gradient read, fp32 reduce-scatter input written
COPY_OUT_BYTES = 2 + 2  # split_with_sizes_copy: bf16 all-gather output read, unsharded parameter written


def copies_s(run, meta: dict) -> float:
    """The two copies' seconds a step of an fsdp2 row: its GPU holds (L / pp layers + the embedding and the head) / tp
    parameters unsharded in turn; pp 1: m micro-batches, each one copy-in of all of them, and copy-outs of all of them
    forward and of all but the last block and the root backward; pp > 1: one copy-in and one copy-out a step."""
    model, f = run.model, run.fixed
    tp, pp = f["tp"], f["pp"]
    gpu = gpu_preset(meta["gpu"])
    m = int(meta["global_batch"]) // (int(meta["dp"]) * int(meta["micro_batch"]))
    layer, edges = model.layer_params(), model.embedding_params() + model.head_params()
    if pp > 1:
        per_step = (COPY_IN_BYTES + COPY_OUT_BYTES) * (model.layers / pp * layer + max(
            model.embedding_params(), model.head_params())) / tp
    else:
        whole = model.layers * layer + edges
        per_step = m * (COPY_IN_BYTES * whole + COPY_OUT_BYTES * (2 * whole - layer - edges)) / tp
    return per_step / (gpu.hbm_Bps * gpu.hbm_eff)


def main() -> None:
    meta = {r["name"]: r for r in csv.DictReader(CSV.open())}
    rows = []
    for run in read_runs(CSV):
        p = predict(run)
        e = p["error_pct"]
        add = copies_s(run, meta[run.name]) if run.framework.startswith("fsdp2") else 0.0
        e2 = 100 * ((p["predicted_iteration_time_s"] + add) / p["measured_iteration_time_s"] - 1) if add else e
        rows.append((run.name, regime_of(run), run.fixed.get("precision") == "fp8", e, e2, add))
    print("| row | shipped | + FSDP2 copies | copies a step |")
    print("| --- | ---: | ---: | ---: |")
    for name, _, _, e, e2, add in rows:
        if add:
            print(f"| {name} | {e:+.1f}% | {e2:+.1f}% | {1e3 * add:.0f} ms |")
    e, e2 = (np.array([r[i] for r in rows]) for i in (3, 4))
    print(f"all {len(rows)} rows: mean |error| {np.abs(e).mean():.2f}% -> {np.abs(e2).mean():.2f}%")
    for regime in (*REGIMES, "fp8 (any layout)"):
        sel = np.array([(r[2] if regime.startswith("fp8") else r[1] == regime) for r in rows])
        print(f"{regime}: {np.abs(e[sel]).mean():.2f}% -> {np.abs(e2[sel]).mean():.2f}%")
    tt = np.array([r[5] > 0 for r in rows])
    print(f"fsdp2 rows ({tt.sum()}): {np.abs(e[tt]).mean():.2f}% -> {np.abs(e2[tt]).mean():.2f}%; rows taken past 15%: "
          f"{[r[0] for r in rows if abs(r[3]) <= 15 < abs(r[4])]}")


if __name__ == "__main__":
    main()
