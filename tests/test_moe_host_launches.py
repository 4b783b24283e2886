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


def test_a_layer_and_micro_batch_of_one_sequence_is_the_host_launching_its_kernels():
    """A layer and micro-batch of b sequences takes 4096 b / (tokens/s x 48) seconds: b = 1: 4096 / (9691 x 48) =
    8.805 ms; b = 4: 16384 / (26695 x 48) = 12.786 ms. A pass is the larger of the GPU's work and the host's launches:
    b = 4 is the GPU's (a sequence's share of it, 12.786 / 4 = 3.197 ms, is under b = 1's whole 8.805 ms, so at b = 1
    the GPU's work is not what sets the time), b = 1 the host's alone. Qwen3-30B-A3B at EP 8 holds 128 / 8 = 16 experts
    a GPU; under fp8 a layer's forward launches 6 (attention) + 28 (router, dispatcher, permutation) + 16 x 2 GEMMs x 2
    (each with its quantization) = 98 kernels, the backward twice as many: 294 at 30 us = 8.82 ms, within 0.2% of
    b = 1's 8.805 ms (8.805 / 294 = 29.95 us)."""
    t = {b: SEQ * b / (TOKENS_PER_S[b] * LAYERS) for b in (1, 4)}
    assert t[1] == pytest.approx(8.805e-3, rel=1e-3) and t[4] == pytest.approx(12.786e-3, rel=1e-3)
    assert t[4] / 4 < t[1]  # the GPU's work of one sequence is not b = 1's time
    units = moe_launch_units(np.array([16.0]), np.array([True]), shared=False)  # Qwen3-MoE has no shared expert
    kernels_fwd = float(units[0]) * KERNELS_PER_SUBLAYER
    assert kernels_fwd == pytest.approx(98.0, rel=1e-12)
    host = (1.0 + ELEM_BWD_FACTOR) * kernels_fwd * HOST_S_PER_KERNEL
    assert host == pytest.approx(8.82e-3, rel=1e-9)
    assert host == pytest.approx(t[1], rel=0.002)


def test_expert_phase_excess_is_its_launches_less_the_dispatch_and_its_gpu_time():
    """DeepSeek-V3 at EP 8 under fp8: 256 / 8 = 32 local experts, one shared expert; after the host's wait the expert
    phase launches 4 (all-to-alls, sort, activation) + 3 (shared expert) + 32 x 2 GEMMs x 2 (each with its
    quantization) = 135 kernels: 135 x 30 us = 4.05 ms of host time. With a 0.4 ms dispatch and 1.5 ms of the phase's
    GPU time the GPU idles 4.05 - 0.4 - 1.5 = 2.15 ms; with 4.0 ms of GPU time it never waits: 0."""
    from costmodel._experts import EXPERT_PHASE_FIXED_KERNELS, SHARED_EXPERT_KERNELS, expert_launch_excess

    kernels = EXPERT_PHASE_FIXED_KERNELS + SHARED_EXPERT_KERNELS + 32 * 2 * 2
    assert kernels == 135
    out = expert_launch_excess(np.array([kernels, kernels]), np.array([0.4e-3, 0.4e-3]), np.array([1.5e-3, 4.0e-3]))
    np.testing.assert_allclose(out, [2.15e-3, 0.0], rtol=1e-12, atol=1e-15)


def test_a_forward_pays_each_expert_launch_the_gpu_does_not_cover_before_the_rest_of_the_layer():
    """Qwen3-30B-A3B at 10240 tokens on B200, EP 8: 16 local experts. Counting each expert GEMM's quantization (fp8,
    at a vanishing byte count so that the GPU's time barely moves) adds 16 x 2 = 32 kernels to the expert phase, 32 x
    30 us = 0.96 ms of host launches. The layer is GPU-bound as a whole (its forward's GPU time is above the host's 98
    kernels, 2.94 ms) but its expert phase is host-bound in both cases: the attention, router and permutation behind
    the phase start only once the host has launched it, so the forward grows by the full 0.96 ms (the GPU's own share
    of those launches is inside it). Taking the larger of the two totals instead, it would grow only by the GPU's
    launch time of 32 kernels (without the host wait: the difference with moe_host_sync off)."""
    from costmodel import cluster_preset, model_preset
    from costmodel._experts import moe_layer_costs
    from costmodel._layer_compute import layer_costs
    from costmodel._layer_terms import layer_terms

    model = dataclasses.replace(model_preset("qwen3-30b-a3b"), seq_len=10240)
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
    assert host[True, 1e-12]["host_f"][0] == pytest.approx(98 * 30e-6, rel=1e-12)
    assert fwd[False, 1e-12] > 98 * 30e-6  # GPU-bound as a whole
    assert host[True, 0.0]["host_x"][0] > 0.0 and host[True, 1e-12]["host_x"][0] > 0.0  # expert phase host-bound
    assert fwd[True, 1e-12] - fwd[True, 0.0] == pytest.approx(32 * 30e-6, rel=1e-9)
    gpu_share = fwd[False, 1e-12] - fwd[False, 0.0]  # the GPU's launch time of the 32 kernels
    assert 0.0 < gpu_share < 0.2 * 32 * 30e-6


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


def _layer(host_f):
    """One MoE layer's terms in ms (layer_terms' inputs): GEMMs 1.0, attention 0.2, element-wise 0.1, launches 0.05;
    tensor-parallel exchange 0.3 and exposed all-to-all 0.4 each way; no casts, recompute or backward stretch."""
    ms = 1e-3
    lc = {k: np.array([v * ms]) for k, v in dict(
        gemm=1.0, attn=0.2, elem=0.1, overhead=0.05, cast_f=0.0, cast_b=0.0, tp_fwd=0.3, tp_bwd=0.3, cp_fwd=0.0,
        cp_bwd=0.0, sel_re=0.0, sel_tp=0.0, ep_fwd=0.4, ep_bwd=0.4, ep_x=0.0, host_f=host_f, host_x=0.0, xb_q=0.0,
        xb_a=0.0, xb_on=0.0).items()}
    from costmodel._layer_terms import layer_terms

    return layer_terms(lc, np.array([False]), np.array([False]))


def test_a_pass_is_the_larger_of_the_gpus_work_with_its_exchanges_and_the_hosts_launches():
    """Forward on the GPU: 1.0 + 0.2 + 0.1 + 0.05 = 1.35 ms and its exchanges 0.3 + 0.4 = 0.7 ms: 2.05 ms; backward and
    weight gradients: 1.0 + 2 x 0.2 + 2 x (0.1 + 0.05) + 1.0 = 2.7 ms and 0.7 ms of exchanges: 3.4 ms. Host-bound at
    3.0 ms of forward launches (6.0 ms backward): the exchanges run in the host's gaps, F = max(2.05, 3.0) = 3.0 ms and
    B + W = max(3.4, 6.0) = 6.0 ms (with the exchanges after the launches, 3.7 and 6.7). GPU-bound at 1.0 ms of launches:
    2.05 and 3.4 ms."""
    host = _layer(3.0)
    assert host["F"][0] == pytest.approx(3.0e-3, rel=1e-12)
    assert host["B"][0] + host["W"][0] == pytest.approx(6.0e-3, rel=1e-12)
    gpu = _layer(1.0)
    assert gpu["F"][0] == pytest.approx(2.05e-3, rel=1e-12)
    assert gpu["B"][0] + gpu["W"][0] == pytest.approx(3.4e-3, rel=1e-12)
    # the parts reported: the exchanges as priced, compute the rest
    assert host["tp"][0] == pytest.approx(0.6e-3, rel=1e-12) and host["ep"][0] == pytest.approx(0.8e-3, rel=1e-12)
    assert host["compute"][0] == pytest.approx(9.0e-3 - 1.4e-3, rel=1e-12)


@pytest.mark.parametrize("framework", ["megatron-core-a2a-overlap", "megatron-core-deepep-a2a-overlap", "hai-llm"])
def test_a_faster_gpu_never_makes_a_host_bound_moe_plan_slower(framework):
    """Qwen3-30B-A3B plans whose MoE layers are host-bound on B200 (EP 8-32, micro-batch 1): with the GPU's peak
    x1.1 to x2 the step only shortens or stays (the all-to-all the faster computation no longer covers runs in the
    host's gaps)."""
    from costmodel import StrategyTable, cluster_preset, evaluate, model_preset
    from costmodel._knobs import moved_cluster

    model, cl = model_preset("qwen3-30b-a3b"), cluster_preset("b200x256")
    # (Megatron-Core's EP A2A overlap takes virtual stages wherever there is a pipeline: its pp 2 row interleaves)
    v2 = 2 if "a2a-overlap" in framework else 1
    table = StrategyTable.from_columns(dp=[8, 16, 64], tp=[4, 1, 1], pp=[1, 2, 4], cp=[1, 4, 1], ep=[32, 64, 8],
                                       micro_batch=1, global_batch=768, vpp=[1, v2, 2],
                                       schedule=["1f1b", "interleaved" if v2 > 1 else "1f1b", "interleaved"],
                                       zero_stage=1, recompute="selective", precision="fp8",
                                       sequence_parallel=[True, False, False])
    steps = [evaluate(model, moved_cluster(cl, (("compute", f),)), table, framework=framework)
             for f in (1.0, 1.1, 1.25, 1.5, 2.0)]
    assert all(s["feasible"].all() for s in steps)
    t = np.array([s["step_time_s"] for s in steps])  # (5, 3)
    assert np.all(t[1:] <= t[:-1] * (1 + 1e-12))
