"""The MoE rows of the validation set under each of the MoE layer's priced mechanisms, one at a time and together.

    PYTHONPATH=. python3 benchmarks/moe_mechanisms.py

Mechanisms (costmodel._experts): "bytes", the HBM bytes of the router, permutation and sort kernels and the fp8
quantization before the expert GEMMs; "launches", the MoE layer's kernel launches (one GEMM per local expert);
"overlap", the EP A2A overlap as a pair of a forward and a backward on one communication stream, with the SMs DeepEP
holds; "unpaired", the overlap's warm-up and cool-down passes (and pipelines without interleaving) run alone, their
all-to-alls exposed (unpaired_share); "host", dropless routing's host wait (a pass no faster than the host launches its
kernels, HOST_S_PER_KERNEL); "experts", the routed experts' element-wise work outside their fused kernels (a clamped
activation's clamps and cat, Megatron-Core's FC2 bias loop: expert_extra_terms; gpt-oss's rows only). "none" prices each
off as the model did before them: permutation traffic 4 elements of h a copy and no router, sort or quantization bytes;
2 kernel-overhead units on top of the dense layer's; under the overlap each direction's all-to-alls hidden behind its
layer half's computation (max(dispatch + combine - (Af + Mf), 0) a direction, close to the earlier rule, which took the
GEMMs and the attention core as the window), every pass paired. Printed: each MoE row's error (predicted - measured, %
of measured, as `plansweep validate`) under none, each alone, all; then the mean |error|.
"""

from __future__ import annotations

import contextlib

import numpy as np

import costmodel._block as block
import costmodel._experts as experts
from costmodel._validate import predict, read_runs

try:
    from benchmarks.validation_by_source import CSV
except ImportError:  # run as a script from benchmarks/
    from validation_by_source import CSV

MECHANISMS = ("bytes", "launches", "overlap", "unpaired", "host", "experts")


def _old_permutation(copies, T, t, u, local):
    return 4.0 * u * copies, 0.0 * copies


def _no_cast(model, quant, copies, u, gpu):
    zero = 0.0 * copies
    return zero, zero


def _old_units(local, fp8_quant, shared, extra=0.0):
    return 4.0 + 0.0 * local


def _no_extra(model, copies, u, local, bias_loop):
    zero = 0.0 * copies
    return zero, zero, 0.0, zero


def _old_overlap(Af, Mf, Mb, Mw, Ab, a_d, a_c, sm_frac):
    return 2.0 * np.maximum(a_d + a_c - (Af + Mf), 0.0)


def _all_paired(rows):
    return None


@contextlib.contextmanager
def mechanisms_on(on: set[str]):
    """The cost model with only the mechanisms in ``on`` priced (the others as before them)."""
    saved = {k: getattr(experts, k) for k in ("permutation_elems", "expert_cast_s", "moe_launch_units",
                                              "overlapped_a2a_s", "ROUTING_BYTES_PER_SCORE", "HOST_S_PER_KERNEL",
                                              "expert_extra_terms")}
    saved_pairs = block.unpaired_layers
    try:
        if "bytes" not in on:
            experts.permutation_elems, experts.expert_cast_s = _old_permutation, _no_cast
            experts.ROUTING_BYTES_PER_SCORE = 0
        if "launches" not in on:
            experts.moe_launch_units = _old_units
        if "overlap" not in on:
            experts.overlapped_a2a_s = _old_overlap
        if "unpaired" not in on:
            block.unpaired_layers = _all_paired
        if "host" not in on:
            experts.HOST_S_PER_KERNEL = 0.0
        if "experts" not in on:
            experts.expert_extra_terms = _no_extra
        yield
    finally:
        block.unpaired_layers = saved_pairs
        for k, v in saved.items():
            setattr(experts, k, v)


def main() -> None:
    runs = [r for r in read_runs(CSV) if r.model.is_moe]
    variants = [("none", set()), *((m, {m}) for m in MECHANISMS), ("all", set(MECHANISMS))]
    errs = {}
    for name, on in variants:
        with mechanisms_on(on):
            errs[name] = np.array([predict(r)["error_pct"] for r in runs])
    print(f"{'run':52s}" + "".join(f"{n:>10s}" for n, _ in variants))
    for i, r in enumerate(runs):
        print(f"{r.name:52s}" + "".join(f"{errs[n][i]:+9.1f}%" for n, _ in variants))
    print(f"{'mean |error| (' + str(len(runs)) + ' MoE rows)':52s}"
          + "".join(f"{np.abs(errs[n]).mean():9.1f}%" for n, _ in variants))


if __name__ == "__main__":
    main()
