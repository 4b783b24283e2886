"""The host's launch time of a dropless MoE layer: against a published pair of runs that differ only in micro-batch,
and the expert phase's launches between the host's waits."""

from __future__ import annotations

import dataclasses

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


def test_expert_phase_excess_is_its_launches_less_the_dispatch_and_its_gpu_time():
    """DeepSeek-V3 at EP 8 under fp8: 256 / 8 = 32 local experts, one shared expert; after the host's wait the expert
    phase launches 4 (all-to-alls, sort, activation) + 3 (shared expert) + 32 x 2 GEMMs x 2 (each with its
    quantization) = 135 kernels: 135 x 25 us = 3.375 ms of host time. With a 0.4 ms dispatch and 1.5 ms of the phase's
    GPU time the GPU idles 3.375 - 0.4 - 1.5 = 1.475 ms; with 3.0 ms of GPU time it never waits: 0."""
    from costmodel._experts import EXPERT_PHASE_FIXED_KERNELS, SHARED_EXPERT_KERNELS, expert_launch_excess

    kernels = EXPERT_PHASE_FIXED_KERNELS + SHARED_EXPERT_KERNELS + 32 * 2 * 2
    assert kernels == 135
    out = expert_launch_excess(np.array([kernels, kernels]), np.array([0.4e-3, 0.4e-3]), np.array([1.5e-3, 3.0e-3]))
    np.testing.assert_allclose(out, [1.475e-3, 0.0], rtol=1e-12, atol=1e-15)


def test_a_forward_pays_each_expert_launch_the_gpu_does_not_cover_before_the_rest_of_the_layer():
    """Qwen3-30B-A3B at 8192 tokens on B200, EP 8: 16 local experts. Counting each expert GEMM's quantization (fp8,
    at a vanishing byte count so that the GPU's time barely moves) adds 16 x 2 = 32 kernels to the expert phase, 32 x
    25 us = 0.8 ms of host launches. The layer is GPU-bound as a whole (its forward's GPU time is above the host's 98
    kernels, 2.45 ms) but its expert phase is host-bound in both cases: the attention, router and permutation behind
    the phase start only once the host has launched it, so the forward grows by the full 0.8 ms (the GPU's own share
    of those launches is inside it). Taking the larger of the two totals instead, it would grow only by the GPU's
    launch time of 32 kernels (without the host wait: the difference with moe_host_sync off)."""
    from costmodel import cluster_preset, model_preset
    from costmodel._experts import moe_layer_costs
    from costmodel._layer_compute import layer_costs
    from costmodel._layer_terms import layer_terms

    model = dataclasses.replace(model_preset("qwen3-30b-a3b"), seq_len=8192)
    cl = cluster_preset("b200x8")
    one, peak = np.array([1]), cl.gpu.peak_flops[2]
    lc = layer_costs(model, cl, one, one, one, np.array([False]), peak, peak16=cl.gpu.peak_flops[0])
    lc.update(cast_f=0.0 * one, cast_b=0.0 * one, sel_re=0.0 * one, sel_tp=0.0 * one, tp_bwd=lc["tp_fwd"])
    fwd, host = {}, {}
    for sync in (False, True):
        for cast in (0.0, 1e-12):
            m = moe_layer_costs(model, cl, lc, one, np.array([False]), np.array([8]), peak, False,
                                fp8_cast=np.array([cast]), host_sync=np.array([sync]))
            lt = layer_terms({**m, "cast_f": m["xcast_f"], "cast_b": m["xcast_b"]}, np.array([False]),
                             np.array([False]))
            fwd[sync, cast], host[sync, cast] = lt["F"][0] - m["ep_fwd"][0], m
    assert host[True, 1e-12]["host_f"][0] == pytest.approx(98 * 25e-6, rel=1e-12)
    assert fwd[False, 1e-12] > 98 * 25e-6  # GPU-bound as a whole
    assert host[True, 0.0]["host_x"][0] > 0.0 and host[True, 1e-12]["host_x"][0] > 0.0  # expert phase host-bound
    assert fwd[True, 1e-12] - fwd[True, 0.0] == pytest.approx(32 * 25e-6, rel=1e-9)
    gpu_share = fwd[False, 1e-12] - fwd[False, 0.0]  # the GPU's launch time of the 32 kernels
    assert 0.0 < gpu_share < 0.2 * 32 * 25e-6


def test_backward_chunk_excess_by_hand():
    """A backward stretch of n MoE layers (GPU G, host H a layer) that opens with an expert phase the host needs e
    longer to launch than the GPU to run (after the combine's gradient all-to-all), and ends with an attention whose
    GPU time outlasts its launches by t: max(n G + e, n H + t), where the layer terms price n max(G, H).
    GPU-bound layers, DeepSeek-V3-like: G = 9.9 ms, H = 8.25 ms (d = 1.65 ms), e = 2.1 ms, t = 4.4 ms, n = 4:
    max(4 x 9.9 + 2.1, 4 x 8.25 + 4.4) = max(41.7, 37.4) = 41.7 ms against 4 x 9.9 = 39.6: 2.1 ms (e, once a chunk).
    Host-bound layers: G = 4.5, H = 4.9 (d = -0.4), e = 1.3, t = 1.2, n = 11: max(49.5 + 1.3, 53.9 + 1.2) - 53.9 =
    1.2 ms (the last attention's tail, once). Four interleaved chunks of the 4 GPU-bound layers (one each): 4 x
    max(9.9 + 2.1, 8.25 + 4.4) - 4 x 9.9 = 4 x 12.65 - 39.6 = 11.0 ms. Host-bound with n = 1: max(4.1 + 1.3 ... ):
    max(-0.4 + 1.3, 1.2) = 1.2 ms. Not priced (d = e = t = 0): 0."""
    from costmodel._experts import backward_chunk_excess

    n = np.array([4.0, 11.0, 4.0, 1.0, 4.0])
    chunks = np.array([1.0, 1.0, 4.0, 1.0, 1.0])
    d = np.array([1.65e-3, -0.4e-3, 1.65e-3, -0.4e-3, 0.0])
    e = np.array([2.1e-3, 1.3e-3, 2.1e-3, 1.3e-3, 0.0])
    t = np.array([4.4e-3, 1.2e-3, 4.4e-3, 1.2e-3, 0.0])
    np.testing.assert_allclose(backward_chunk_excess(n, chunks, d, e, t), [2.1e-3, 1.2e-3, 11.0e-3, 1.2e-3, 0.0],
                               rtol=1e-9, atol=1e-15)


def test_backward_chunks_follow_the_schedule_and_the_recompute():
    """One backward stretch a stage and micro-batch without interleaving (Megatron's synchronized batched p2p), v of
    them interleaved, one per MoE layer where the MoE block is recomputed (full, or the selective "moe" module; not
    "moe_act"); none where the wait is not priced (the EP A2A overlap, or a framework without the host wait)."""
    import types

    from costmodel._codes import MODULE_BIT, RECOMPUTE
    from costmodel._experts import backward_chunks
    from costmodel._frameworks import framework_preset
    from costmodel._pipeline_terms import SCHED

    sel, full, none = (RECOMPUTE.index(x) for x in ("selective", "full", "none"))
    rows = types.SimpleNamespace(
        fw=framework_preset("megatron-core"), moe=True, n_m=np.array([[12.0] * 5, [11.0] * 5]),
        sched=np.array([SCHED["1f1b"], SCHED["interleaved"], SCHED["1f1b"], SCHED["interleaved"], SCHED["1f1b"]]),
        v=np.array([1, 3, 1, 3, 1]), rc=np.array([[none, none, full, sel, sel]]),
        rcm=np.array([0, 0, 0, MODULE_BIT["moe"], MODULE_BIT["moe_act"]]))
    got = np.broadcast_to(backward_chunks(rows), (2, 5))
    np.testing.assert_array_equal(got, [[1.0, 3.0, 12.0, 12.0, 1.0], [1.0, 3.0, 11.0, 11.0, 1.0]])
    assert framework_preset("megatron-core-a2a-overlap").moe_host_sync
    assert backward_chunks(types.SimpleNamespace(**{**vars(rows), "fw": framework_preset("megatron-core-a2a-overlap")
                                                    })) is None
    assert backward_chunks(types.SimpleNamespace(**{**vars(rows), "fw": dataclasses.replace(
        rows.fw, moe_host_sync=False)})) is None
