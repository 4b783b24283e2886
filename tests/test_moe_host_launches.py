"""The host's launch time of a dropless MoE layer against a published pair of runs that differ only in micro-batch."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel._experts import HOST_S_PER_KERNEL, moe_launch_units
from costmodel._layer_compute import ELEM_BWD_FACTOR, KERNELS_PER_SUBLAYER

# Megatron-Bridge docs/performance-summary-archive.md (repo commit 067f987d), Qwen3_30B_a3B on one DGX-B200 (8 GPUs,
# MXFP8, GBS 512, seq 4096, TP 1, PP 1, EP 8): 9691 tokens/s/GPU at micro-batch 1 (26.02 container), 26695 at
# micro-batch 4 (26.02.01 container).
TOKENS_PER_S = {1: 9691.0, 4: 26695.0}
SEQ, LAYERS = 4096, 48


def test_fixed_time_of_a_layer_and_micro_batch_is_the_host_launching_its_kernels():
    """A layer and micro-batch of b sequences takes 4096 b / (tokens/s x 48) seconds: b = 1: 4096 / (9691 x 48) =
    8.805 ms; b = 4: 16384 / (26695 x 48) = 12.786 ms. The line through the two, a + c b, has c = (12.786 - 8.805) / 3
    = 1.327 ms a sequence and a = 8.805 - 1.327 = 7.478 ms that does not grow with the tokens. Qwen3-30B-A3B at EP 8
    holds 128 / 8 = 16 experts a GPU; under fp8 a layer's forward launches 6 (attention) + 28 (router, dispatcher,
    permutation) + 16 x 2 GEMMs x 2 (each with its quantization) = 98 kernels, the backward twice as many: 294 at 25 us
    = 7.35 ms, within 2% of a."""
    t = {b: SEQ * b / (TOKENS_PER_S[b] * LAYERS) for b in (1, 4)}
    per_seq = (t[4] - t[1]) / 3.0
    fixed = t[1] - per_seq
    assert fixed == pytest.approx(7.478e-3, rel=1e-3)  # the hand calculation above
    units = moe_launch_units(np.array([16.0]), np.array([True]), shared=False)  # Qwen3-MoE has no shared expert
    kernels_fwd = float(units[0]) * KERNELS_PER_SUBLAYER
    assert kernels_fwd == pytest.approx(98.0, rel=1e-12)
    host = (1.0 + ELEM_BWD_FACTOR) * kernels_fwd * HOST_S_PER_KERNEL
    assert host == pytest.approx(7.35e-3, rel=1e-9)
    assert host == pytest.approx(fixed, rel=0.02)
