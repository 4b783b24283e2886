"""The backward's tensor-parallel collectives beside its GEMMs (Framework.tp_backward_async: Megatron-Core's and
Transformer Engine's column-parallel linears): one layer of GPT-3 175B by hand, the evaluator's tp time against the
profile without it, the scalar reference, and the layers that keep the forward's exchange."""

import dataclasses

import numpy as np
import pytest

from costmodel import FRAMEWORKS, StrategyTable, cluster_preset, evaluate, model_preset
from costmodel._layer_compute import async_tp_backward_s
from tests.test_reference import assert_rows_equal_reference, random_table

US = 1e-6


def _gemm_by_hand(M, N, K, gpu):
    """Roofline time of (M x K) @ (K x N) written out: 2 M N K FLOPs at the peak times the measured ceiling and each
    side's x / (x + 240), against 2 (M K + K N + M N) bytes at the HBM rate times its efficiency."""
    side = lambda x: x / (x + gpu.gemm_half_dim)  # noqa: E731
    flop_s = 2 * M * N * K / (gpu.peak_flops[0] * gpu.gemm_eff_max * side(M) * side(N) * side(K))
    return max(flop_s, 2 * (M * K + K * N + M * N) / (gpu.hbm_Bps * gpu.hbm_eff))


def test_gpt3_175b_layer_by_hand():
    # GPT-3 175B (h 12288, ffn 49152, 96 heads, MHA), tp 8 on one H100 node, sequence parallelism, one micro-batch of
    # 2048 tokens, bf16.
    model, cl = model_preset("gpt3-175b"), cluster_preset("h100x8")
    gpu, T, t, h = cl.gpu, 2048.0, 8, 12288
    assert (gpu.gemm_half_dim, gpu.hbm_Bps, cl.scaleup_Bps, gpu.link_eff, cl.scaleup_latency_s) == (
        240.0, 3.35e12, 450e9, 0.8, 5e-6)
    # one all-gather or reduce-scatter of the T h bf16 activation over 8 ranks on NVLink at 450 x 0.8 = 360 GB/s:
    # 7/8 x 2 x 2048 x 12288 B / 360 GB/s + 7 x 5 us = 122.33 + 35 = 157.33 us; an all-reduce twice that
    x = 7 / 8 * 2 * 2048 * 12288 / 360e9 + 7 * 5e-6
    assert x == pytest.approx(157.334 * US, rel=1e-5)
    # QKV: 2048 x 12288 @ 12288 x 4608 (3 h / 8): 2.319e11 FLOPs at 989.4 TFLOP/s x 0.6805 x 0.8951 x 0.9505 x 0.9808
    # = 0.5626 of the peak: 412.8 us (HBM 71 us); FC1: 12288 x 6144 (4 h / 8): 543.6 us
    qkv, fc1 = _gemm_by_hand(T, 3 * h / t, h, gpu), _gemm_by_hand(T, 4 * h / t, h, gpu)
    assert qkv == pytest.approx(412.79 * US, rel=1e-4) and fc1 == pytest.approx(543.58 * US, rel=1e-4)
    # each hidden collective's NCCL kernel holds 24 ring channels (one CTA each) of the H100's 132 SMs: the GEMM beside
    # it loses 24 / 132 x 157.33 = 28.61 us; both GEMMs outlast the collective, so each costs that
    f = 24 / 132
    hidden = max(x - qkv, f * x)
    assert hidden == pytest.approx(28.606 * US, rel=1e-4) and max(x - fc1, f * x) == hidden
    # backward: the projection's and FC2's output gradients gathered bare (2 x 157.33), QKV's and FC1's inputs gathered
    # beside their dgrad GEMMs and their dgrads reduce-scattered beside their wgrad GEMMs (4 x 28.61): 429.09 us,
    # against the forward's 4 x 157.33 = 629.34 us that the backward was priced at before
    bwd = 2 * x + 4 * hidden
    assert bwd == pytest.approx(429.09 * US, rel=1e-4)
    got = async_tp_backward_s(model, np.array([T]), np.array([t]), np.array([True]), gpu.peak_flops[0], gpu,
                              cl.scaleup_Bps * gpu.link_eff, cl.scaleup_latency_s, np.array([f]))
    assert got[0] == pytest.approx(bwd, rel=1e-12)
    # without sequence parallelism: QKV's and FC1's dgrad all-reduces (314.67 us) beside their wgrad GEMMs, each
    # costing its SMs' share, 57.21 us; nothing for the row-parallel ones: 114.42 us against the forward's 629.34
    nosp = async_tp_backward_s(model, np.array([T]), np.array([t]), np.array([False]), gpu.peak_flops[0], gpu,
                               cl.scaleup_Bps * gpu.link_eff, cl.scaleup_latency_s, np.array([f]))
    assert nosp[0] == pytest.approx(2 * f * 2 * x, rel=1e-12) and nosp[0] == pytest.approx(114.42 * US, rel=1e-4)
    # a collective longer than its GEMM leaves its excess bare: a 2 ms collective beside QKV's 412.8 us
    slow = async_tp_backward_s(model, np.array([T]), np.array([t]), np.array([False]), gpu.peak_flops[0], gpu,
                               2 * (7 / 8) * 2 * 2048 * 12288 / 2e-3, 0.0, np.array([f]))
    assert slow[0] == pytest.approx(2e-3 - qkv + 2e-3 - fc1, rel=1e-9)
    # under SP with 1 ms all-gathers: 2 x 1 bare + 2 (1 ms - 412.8 us) + 2 (1 ms - 543.6 us) = 4.087 ms, more than the
    # forward's 4 ms: the inputs' all-gathers run again, six collectives against four
    slow = async_tp_backward_s(model, np.array([T]), np.array([t]), np.array([True]), gpu.peak_flops[0], gpu,
                               (7 / 8) * 2 * 2048 * 12288 / 1e-3, 0.0, np.array([f]))
    assert slow[0] == pytest.approx(2e-3 + 2 * (1e-3 - qkv) + 2 * (1e-3 - fc1), rel=1e-9) and slow[0] > 4e-3


def _one_row(**cols):
    base = dict(dp=1, tp=8, pp=12, cp=1, vpp=1, ep=1, micro_batch=1, global_batch=1, schedule="1f1b",
                recompute="none", zero_stage=1, overlap_dp=True, sequence_parallel=True, precision="bf16")
    return StrategyTable.from_columns(**{k: [v] for k, v in {**base, **cols}.items()})


@pytest.mark.parametrize("sp", [True, False])
def test_evaluator_gpt3_175b_stage(sp):
    # The same layer on 96 H100 (tp 8, pp 12: 8 layers a stage), one micro-batch: the bottleneck stage's tp time
    # falls by 8 layers x (the forward's 629.34 us - the backward by hand), whatever else the stage holds.
    model, cl = model_preset("gpt3-175b"), cluster_preset("h100x96")
    x = 7 / 8 * 2 * 2048 * 12288 / 360e9 + 7 * 5e-6
    f = 24 / 132
    bwd = 2 * x + 4 * f * x if sp else 2 * f * 2 * x  # both GEMMs outlast each collective (above)
    fw = FRAMEWORKS["megatron-core"]
    assert fw.tp_backward_async
    table = _one_row(sequence_parallel=sp)
    on = evaluate(model, cl, table, framework=fw)
    off = evaluate(model, cl, table, framework=dataclasses.replace(fw, tp_backward_async=False))
    assert np.isfinite(on["step_time_s"][0])
    assert off["tp_comm_s"][0] - on["tp_comm_s"][0] == pytest.approx(8 * (4 * x - bwd), rel=1e-9)
    assert on["step_time_s"][0] < off["step_time_s"][0]
    assert_rows_equal_reference(model, cl, table, on, fw)


@pytest.mark.parametrize(("framework", "name"), [("megatron-core", "llama3-8b"), ("megatron-core", "gpt3-175b"),
                                                 ("internevo", "llama3-8b"), ("megatron-bridge", "llama3-70b")])
def test_evaluator_equals_reference(framework, name):
    fw = FRAMEWORKS[framework]
    assert fw.tp_backward_async
    model, cl = model_preset(name), cluster_preset("h100x64")
    table = random_table(model, np.random.default_rng(11), 500, False)
    vec = evaluate(model, cl, table, framework=fw)
    assert_rows_equal_reference(model, cl, table, vec, fw)
    base = evaluate(model, cl, table, framework=dataclasses.replace(fw, tp_backward_async=False))
    tp = table["tp"] > 1
    # less where the GEMMs hide the collectives; more where they do not (under SP the inputs' all-gathers run again:
    # six collectives a backward, four a forward), e.g. tp 16 across nodes
    assert np.any(vec["tp_comm_s"][tp] < base["tp_comm_s"][tp])
    assert np.all(vec["tp_comm_s"][tp] != base["tp_comm_s"][tp])
    assert np.array_equal(vec["step_time_s"][~tp], base["step_time_s"][~tp])


@pytest.mark.parametrize("name", ["mixtral-8x7b", "deepseek-v3"])
def test_moe_and_mla_layers_keep_the_forward_exchange(name):
    # An MoE layer (its attention's collectives as the dense layer's, but its token exchange over tp too) and an MLA
    # layer keep the backward priced as the forward's: the field moves none of their rows.
    fw = FRAMEWORKS["megatron-core"]
    model, cl = model_preset(name), cluster_preset("h100x64")
    table = random_table(model, np.random.default_rng(3), 200, False)
    a = evaluate(model, cl, table, framework=fw)
    b = evaluate(model, cl, table, framework=dataclasses.replace(fw, tp_backward_async=False))
    assert (table["tp"] > 1).any()
    assert np.array_equal(a["tp_comm_s"], b["tp_comm_s"])


# the profiles whose column-parallel linears run the backward's collectives beside their GEMMs: Megatron-Core's and
# Transformer Engine's (Megatron-Core, its derived profiles, Megatron-Bridge, InternEvo priced with Megatron-Core's
# layers). Megatron-LM 2021 and Megatron-DeepSpeed all-reduce after the linear's backward; DTensor's redistributions
# are each waited on before the GEMM that reads them; HAI-LLM's layer code is not published.
ASYNC = {"megatron-core", "megatron-core-a2a-overlap", "megatron-core-deepep", "megatron-core-deepep-a2a-overlap",
         "megatron-bridge", "internevo"}


@pytest.mark.parametrize("sp", [True, False])
@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_profiles_price_the_backward_as_their_layers_run_it(framework, sp):
    # The GPT-3 175B stage row of test_evaluator_gpt3_175b_stage: every profile prices its tp time 8 x (4 x - the
    # backward by hand) below the mirrored forward if its linears overlap the backward's collectives, exactly at it
    # if not; the field turned on moves the row by that amount in every profile, so "exactly at it" is a row it
    # would move; a tp 1 row it leaves alone
    model, cl = model_preset("gpt3-175b"), cluster_preset("h100x96")
    x = 7 / 8 * 2 * 2048 * 12288 / 360e9 + 7 * 5e-6
    f = 24 / 132
    saved = 8 * (4 * x - (2 * x + 4 * f * x if sp else 2 * f * 2 * x))
    fw, table = FRAMEWORKS[framework], _one_row(sequence_parallel=sp)
    as_is = evaluate(model, cl, table, framework=fw)
    on = evaluate(model, cl, table, framework=dataclasses.replace(fw, tp_backward_async=True))
    off = evaluate(model, cl, table, framework=dataclasses.replace(fw, tp_backward_async=False))
    assert off["tp_comm_s"][0] - on["tp_comm_s"][0] == pytest.approx(saved, rel=1e-9)
    assert off["tp_comm_s"][0] - as_is["tp_comm_s"][0] == pytest.approx(saved if framework in ASYNC else 0.0,
                                                                         rel=1e-9, abs=1e-15)
    one = _one_row(tp=1, sequence_parallel=False)
    assert evaluate(model, cl, one, framework=dataclasses.replace(fw, tp_backward_async=True))["step_time_s"][0] == \
        evaluate(model, cl, one, framework=dataclasses.replace(fw, tp_backward_async=False))["step_time_s"][0]
