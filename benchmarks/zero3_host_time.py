"""Full sharding's host work per module against the GPU time it runs beside: where it could bind (analysis only).

    PYTHONPATH=. python3 benchmarks/zero3_host_time.py

DeepSpeed ZeRO-3 and FSDP run Python around every hooked module (DeepSpeed v0.12.0, 09834bb: a forward pre-hook and
a forward hook on every module, `parameter_offload.py` _register_hooks_recursively, each calling
`partitioned_param_coordinator.py` fetch_sub_module / release_sub_module, and two autograd Functions per module for the
backward's pre- and post-hooks; FSDP: one unit per transformer block plus the root). The host does not wait for the
GPU inside a pass: fetch_sub_module makes the compute stream wait for the gather (wait_stream), and blocks the host only
on the gather stream's events, past 2 in flight; stage3.py blocks it on the reduce-scatters' events past 2 buckets in
flight, and at the end of each micro-batch's backward (independent_gradient_partition_epilogue: the reduce stream
synchronized; engine.py's throughput timer synchronizes the device again at each forward's start where the engine was
given no data loader, utils/timer.py ThroughputTimer.start). So a pass runs at the slower of the GPU and the host, and the host binds only where its time for a
hooked call exceeds the GPU's time for it.

For every validation-set ZeRO-2/3 row without a pipeline of a framework with per-module hooks, this prints the hooked calls a
micro-batch (DeepSpeed: 10 a Megatron-DeepSpeed LLaMA layer, from microsoft/Megatron-DeepSpeed a7b7cb7
megatron/model/transformer.py: the layer, input_layernorm, self_attention, query_key_value, core_attention_flash, dense,
post_attention_layernorm, mlp, dense_h_to_4h, dense_4h_to_h; plus 8 outside the layers; FSDP: one a block plus the
root), the model's GPU time a call forward and backward (compute a micro-batch, forward a third of it, backward the
rest with any recompute), and, where the model is fast, the host time a call would need to close the gap if host and GPU
ran in series (an upper bound: they do not). No published measurement of DeepSpeed ZeRO-3's host time a call was found;
the only per-module figure found is FSDP2's pre-forward at about 1 ms a call (pytorch/pytorch issue 173680, torch 2.10),
below every row's forward GPU time a call here, so nothing is priced.
"""

from __future__ import annotations

import csv

from benchmarks.validation_breakdown import CSV, parts
from costmodel._validate import read_runs

# Hooked module calls a transformer layer and outside the layers, a pass, by profile family (module docstring).
CALLS = {"deepspeed": (10, 8), "fsdp2": (1, 1), "llm-foundry": (1, 1)}


def family(framework: str) -> str | None:
    """The CALLS key of a profile name (its derived profiles share it), None for frameworks not in CALLS."""
    return next((k for k in CALLS if framework == k or framework.startswith(k + "-")), None)


def per_call_s(compute_s: float, recompute_s: float, m: float, calls: float) -> tuple[float, float]:
    """GPU seconds a hooked call forward and backward: a micro-batch's compute (compute_s / m), a third forward, the
    rest and recompute_s / m backward, each over ``calls`` calls."""
    c = compute_s / m
    return c / 3 / calls, (2 * c / 3 + recompute_s / m) / calls


def main() -> None:
    sources = [r["source"] for r in csv.DictReader(CSV.open())]
    print(f"{'run':44s} {'err%':>6s} {'calls':>6s} {'fwd ms':>7s} {'bwd ms':>7s} {'series ms':>9s}")
    for source, run in zip(sources, read_runs(CSV), strict=True):
        fam, f = family(run.framework), run.fixed
        if fam is None or (f.get("zero_stage") or 0) < 2 or f.get("pp", 1) != 1:
            continue
        res, p = parts(run)
        per_layer, outside = CALLS[fam]
        calls = per_layer * run.model.layers + outside  # a pass
        m = f["global_batch"] / (f["micro_batch"] * f["dp"])
        fwd, bwd = per_call_s(p["compute_s"], p["recompute_s"], m, calls)
        gap = res["measured_iteration_time_s"] - res["predicted_iteration_time_s"]
        series = f"{gap / m / (2 * calls) * 1e3:9.2f}" if gap > 0 else f"{'-':>9s}"
        print(f"{run.name:44s} {res['error_pct']:+6.1f} {calls:6d} {fwd * 1e3:7.2f} {bwd * 1e3:7.2f} {series}")


if __name__ == "__main__":
    main()
