"""Transformer Engine's fp8 sequence-parallel all-gathers (Framework.te_fp8_gather: Megatron-Core's and
Megatron-Bridge's linear layers): one Llama 3 70B layer at tp 4 by hand, each gather's bytes and time written out,
forward and backward, under delayed and current scaling; the evaluator against the profile without it and against the
scalar reference; the rows and profiles it leaves alone."""

import dataclasses

import numpy as np
import pytest

from costmodel import FRAMEWORKS, StrategyTable, cluster_preset, evaluate, framework_preset, model_preset
from costmodel._layer_compute import async_tp_backward_s, fp8_tp_collectives_s
from tests.test_reference import assert_rows_equal_reference, random_table

US = 1e-6
LLAMA70 = model_preset("llama3-70b")  # 80 layers, h 8192, ffn 28672, 64 heads, 8 KV heads, seq 8192
# Llama 3 70B, tp 4 inside one H100 node (NVLink 450 GB/s x link efficiency 0.8 = 360 GB/s, 5 us a ring step),
# sequence parallelism, one micro-batch of 8192 tokens: each gathered activation is E = T h = 8192 x 8192 =
# 67,108,864 elements.
E, T, t = 8192 * 8192, 8192.0, 4
BW, LAT = 450e9 * 0.8, 5e-6
# A 16-bit all-gather or reduce-scatter over 4 ranks: 3/4 x 2 E = 100,663,296 B / 360 GB/s = 279.620 us + 3 x 5 us
X16 = 3 / 4 * 2 * E / BW + 3 * LAT  # 294.620 us
# the same gather of fp8 data, 1 byte an element: 50,331,648 B / 360 GB/s = 139.810 us + 15 us
X8 = 3 / 4 * 1 * E / BW + 3 * LAT  # 154.810 us
# one fp32 amax all-reduced over the 4 ranks: 2 x 3/4 x 4 B / 360 GB/s + 2 x 3 x 5 us
AMAX = 2 * 3 / 4 * 4 / BW + 6 * LAT  # 30.000 us


def test_the_gathers_by_hand():
    # the ring step by step, apart from the (t - 1) / t form above: 3 steps, each moving one rank's shard of E / 4 =
    # 16,777,216 elements: in 16 bits 33,554,432 B / 360 GB/s = 93.207 us + 5 us = 98.207 us a step, 3 x 98.207 =
    # 294.620 us; in fp8 16,777,216 B / 360 GB/s = 46.603 us + 5 us = 51.603 us a step, 154.810 us. The amax's ring
    # all-reduce: 6 steps (3 reduce-scatter, 3 all-gather) of a 1-byte quarter of the 4-byte amax, 1 B / 360 GB/s =
    # 0.003 ns + 5 us each: 30.000 us
    assert X16 == pytest.approx(3 * 98.207 * US, rel=1e-5)
    assert X8 == pytest.approx(3 * 51.603 * US, rel=1e-5)
    assert AMAX == pytest.approx(6 * 5.000 * US, rel=1e-5)
    # forward: QKV's and FC1's inputs gathered in fp8, the projection's and FC2's outputs reduce-scattered in 16 bits:
    # 2 x 154.810 + 2 x 294.620 = 898.861 us, against 4 x 294.620 = 1178.481 us in 16 bits (279.620 us less);
    # current scaling adds an amax all-reduce before each gather: 958.861 us
    fwd = 2 * X8 + 2 * X16
    assert fwd == pytest.approx(898.861 * US, rel=1e-5) and 4 * X16 - fwd == pytest.approx(279.620 * US, rel=1e-5)
    for amax, want in ((0.0, fwd), (1.0, fwd + 2 * AMAX)):
        got = fp8_tp_collectives_s(np.array([E * 1.0]), np.array([t]), BW, LAT, amax=np.array([amax]))
        assert got[0] == pytest.approx(want, rel=1e-12)
    assert fwd + 2 * AMAX == pytest.approx(958.861 * US, rel=1e-5)


def _gemm_by_hand(M, N, K, gpu):
    """Roofline time of (M x K) @ (K x N): 2 M N K FLOPs at the 16-bit peak times the measured ceiling and each side's
    x / (x + 240), against 2 (M K + K N + M N) bytes at the HBM rate times its efficiency."""
    side = lambda x: x / (x + gpu.gemm_half_dim)  # noqa: E731
    flop_s = 2 * M * N * K / (gpu.peak_flops[0] * gpu.gemm_eff_max * side(M) * side(N) * side(K))
    return max(flop_s, 2 * (M * K + K * N + M * N) / (gpu.hbm_Bps * gpu.hbm_eff))


def test_the_backward_by_hand():
    gpu = cluster_preset("h100x8").gpu
    # QKV: 8192 x 8192 @ 8192 x 2560 ((8192 + 2 x 1024) / 4), FC1: 8192 x 14336 (2 x 28672 / 4), at the 16-bit peak:
    # both outlast every collective beside them, so each hidden collective costs its SMs' share f X (f = 24 / 132
    # here, a ring's 24 channels of the H100's 132 SMs)
    qkv, fc1 = _gemm_by_hand(T, 2560, 8192, gpu), _gemm_by_hand(T, 14336, 8192, gpu)
    assert min(qkv, fc1) > X16 > X8
    f = 24 / 132
    # 16 bits: the projection's and FC2's output gradients gathered bare (2 X16), QKV's and FC1's inputs re-gathered
    # beside their dgrad GEMMs and their dgrads reduce-scattered beside their wgrad GEMMs (4 f X16): 803.5 us
    bf16 = 2 * X16 + 4 * f * X16
    # fp8, delayed scaling: the output gradients cast on the shard and gathered in fp8 (2 X8), the saved fp8 inputs
    # re-gathered in fp8 (2 f X8), the dgrads reduce-scattered in 16 bits (2 f X16): 473.05 us;
    # current scaling: each output gradient's amax all-reduced before its gather (the saved inputs need none): + 60 us
    delayed = 2 * X8 + 2 * f * X8 + 2 * f * X16
    assert bf16 == pytest.approx(803.51 * US, rel=1e-4) and delayed == pytest.approx(473.05 * US, rel=1e-4)
    args = (LLAMA70, np.array([T]), np.array([t]), np.array([True]), gpu.peak_flops[0], gpu, BW, LAT, np.array([f]))
    assert async_tp_backward_s(*args)[0] == pytest.approx(bf16, rel=1e-12)
    on = np.array([True])
    assert async_tp_backward_s(*args, fp8_gather=on)[0] == pytest.approx(delayed, rel=1e-12)
    assert async_tp_backward_s(*args, fp8_gather=on, amax=1.0)[0] == pytest.approx(delayed + 2 * AMAX, rel=1e-12)
    assert async_tp_backward_s(*args, fp8_gather=np.array([False]), amax=1.0)[0] == pytest.approx(bf16, rel=1e-12)


def _stage_row(**cols):
    # 64 H100, tp 4 pp 8 dp 2 (the Megatron-Bridge Llama 3 70B layout without vpp): 10 layers a stage, one
    # micro-batch of 8192 tokens
    base = dict(dp=2, tp=4, pp=8, cp=1, vpp=1, ep=1, micro_batch=1, global_batch=2, schedule="1f1b",
                recompute="none", zero_stage=1, overlap_dp=True, sequence_parallel=True, precision="fp8")
    return StrategyTable.from_columns(**{k: [v] for k, v in {**base, **cols}.items()})


@pytest.mark.parametrize(("framework", "amax"), [("megatron-core", 0.0), ("megatron-bridge", 1.0)])
def test_evaluator_stage(framework, amax):
    # With the backward mirroring the forward (tp_backward_async off), each of the stage's 10 layers saves the
    # forward's 279.620 us twice, less 4 amax all-reduces under current scaling (Megatron-Bridge's FP8-CS):
    # 10 x 2 x (279.620 - 60.000 amax) us
    cl, table = cluster_preset("h100x64"), _stage_row()
    fw = dataclasses.replace(FRAMEWORKS[framework], tp_backward_async=False)
    assert fw.te_fp8_gather == ("current" if amax else "delayed")
    on = evaluate(LLAMA70, cl, table, framework=fw)
    off = evaluate(LLAMA70, cl, table, framework=dataclasses.replace(fw, te_fp8_gather=""))
    assert np.isfinite(on["step_time_s"][0])
    want = 10 * 2 * (2 * (X16 - X8) - amax * 2 * AMAX)
    assert off["tp_comm_s"][0] - on["tp_comm_s"][0] == pytest.approx(want, rel=1e-9)
    assert on["step_time_s"][0] < off["step_time_s"][0]
    assert_rows_equal_reference(LLAMA70, cl, table, on, fw)


def test_only_fp8_dense_rows_with_sequence_parallel_gather_fp8():
    # bf16, tp 1, no sequence parallelism: the same as without the mechanism; an MoE model keeps its 16-bit exchange
    cl, fw = cluster_preset("h100x64"), FRAMEWORKS["megatron-bridge"]
    off = dataclasses.replace(fw, te_fp8_gather="")
    for cols in (dict(precision="bf16"), dict(tp=1, dp=8), dict(sequence_parallel=False)):
        table = _stage_row(**cols)
        a, b = evaluate(LLAMA70, cl, table, framework=fw), evaluate(LLAMA70, cl, table, framework=off)
        assert a["step_time_s"][0] == b["step_time_s"][0], cols
    moe = model_preset("mixtral-8x7b")
    table = random_table(moe, np.random.default_rng(5), 200, False)
    assert ((table["tp"] > 1) & (table["precision"] == 2)).any()
    assert np.array_equal(evaluate(moe, cl, table, framework=fw)["tp_comm_s"],
                          evaluate(moe, cl, table, framework=off)["tp_comm_s"])


# the profiles whose linears are Transformer Engine's and their scaling (Megatron-Core: delayed; Megatron-Bridge's
# FP8-CS: current); every other profile's layers exchange 16 bits or are priced by torchao's float8 (fp8_tp_gather)
TE_SCALING = {"megatron-core": "delayed", "megatron-core-a2a-overlap": "delayed", "megatron-core-deepep": "delayed",
              "megatron-core-deepep-a2a-overlap": "delayed", "megatron-bridge": "current"}


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_profiles(framework):
    # The Llama 3 70B stage row of test_evaluator_stage (fp8, SP, tp 4; the backward mirroring the forward): each
    # profile prices it 10 x 2 x (2 (X16 - X8) - 2 AMAX under current scaling) below its 16-bit exchange if its
    # linears are Transformer Engine's, and exactly at it if not; where its layers' exchange is the 16-bit one,
    # turning delayed fp8 gathers on saves 10 x 2 x 2 (X16 - X8), so that "exactly at it" is a row the field moves
    cl, table = cluster_preset("h100x64"), _stage_row()
    fw = dataclasses.replace(framework_preset(framework), tp_backward_async=False)
    as_is = evaluate(LLAMA70, cl, table, framework=fw)
    off = evaluate(LLAMA70, cl, table, framework=dataclasses.replace(fw, te_fp8_gather=""))
    scaling = TE_SCALING.get(framework, "")
    saved = {"": 0.0, "delayed": 10 * 2 * 2 * (X16 - X8), "current": 10 * 2 * (2 * (X16 - X8) - 2 * AMAX)}
    assert off["tp_comm_s"][0] - as_is["tp_comm_s"][0] == pytest.approx(saved[scaling], rel=1e-9, abs=1e-15)
    if not scaling:
        assert as_is["step_time_s"][0] == off["step_time_s"][0]
        if not fw.fp8_tp_gather:
            on = evaluate(LLAMA70, cl, table, framework=dataclasses.replace(fw, te_fp8_gather="delayed"))
            assert off["tp_comm_s"][0] - on["tp_comm_s"][0] == pytest.approx(saved["delayed"], rel=1e-9)


@pytest.mark.parametrize(("framework", "name"), [("megatron-core", "llama3-70b"), ("megatron-core", "gpt3-175b"),
                                                 ("megatron-bridge", "llama3-8b")])
def test_evaluator_equals_reference(framework, name):
    fw = FRAMEWORKS[framework]
    model, cl = model_preset(name), cluster_preset("h100x64")
    table = random_table(model, np.random.default_rng(17), 400, False)
    vec = evaluate(model, cl, table, framework=fw)
    assert_rows_equal_reference(model, cl, table, vec, fw)
    base = evaluate(model, cl, table, framework=dataclasses.replace(fw, te_fp8_gather=""))
    delayed = evaluate(model, cl, table, framework=dataclasses.replace(fw, te_fp8_gather="delayed"))
    moved = (table["tp"] > 1) & (table["precision"] == 2) & np.asarray(table["sequence_parallel"], bool)
    # delayed scaling only halves bytes: less on every moved row; current scaling's amax all-reduces (2 (t - 1) ring
    # steps each) can outweigh the bytes saved on short micro-batches (tp 4, cp 4: 2048 tokens of Llama 3 8B save
    # 17.5 us a gather, its amax costs 30 us)
    assert moved.any() and np.all(delayed["tp_comm_s"][moved] < base["tp_comm_s"][moved])
    assert np.all(vec["tp_comm_s"][moved] != base["tp_comm_s"][moved])
    assert np.array_equal(vec["step_time_s"][~moved], base["step_time_s"][~moved])
