"""A transformer layer's activation bytes, term by term, from the code that runs it, by hand.

Per token on a rank (a micro-batch of T = b s / cp tokens: times T), tp t, sequence parallelism dividing the norms'
terms by t. The terms and the code they come from are in costmodel._memory_terms.te_saved_bytes (Megatron-Core with
Transformer Engine) and torchtitan_saved_bytes (torchtitan's Llama block, eager autograd); every expected value below is
worked out from the model's shape by hand.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from costmodel import StrategyTable, cluster_preset, evaluate, framework_preset, model_preset
from costmodel._layer_terms import framework_terms, shape_terms
from costmodel._memory_terms import (
    layer_activation_bytes,
    te_saved_bytes,
    torchtitan_expert_extra_bytes,
    torchtitan_saved_bytes,
)
from costmodel._pipeline_terms import SCHED
from costmodel._reference import evaluate_row

ONE, SP = np.array([1]), np.array([True])


def per_token(d: dict, T: float) -> dict:
    return {k: float(np.asarray(v).reshape(-1)[0]) / T for k, v in d.items()}


def test_llama3_8b_under_megatron_core_te_by_hand():
    # h 4096, Q 32 x 128 = 4096, K and V 8 x 128 = 1024 each, ffn 14336, RMSNorm, tp 1, bf16, 8192 tokens.
    # norms' inputs 2 x 2 x 4096 = 16384; LayerNormLinear outputs 16384; rsigma 2 x 4 = 8; Q, K, V 2 x (4096 + 2048)
    # = 12288; the kernel's output (the projection's input) 2 x 4096 = 8192; cuDNN's fp32 stats 4 x 32 = 128;
    # fc1's output (SwiGLU's input, 2 x 14336 elements) 4 x 14336 and fc2's input 2 x 14336 = 86016; no dropout.
    m, T = model_preset("llama3-8b"), 8192.0
    got = per_token(te_saved_bytes(m, T, 1, False), T)
    want = dict(norm_in=16384, ln_out=16384, stats=8, qkv=12288, out=8192, softmax=128, scores=0, mlp=86016, masks=0)
    for k, v in want.items():
        assert got[k] == v, k
    assert got["total"] == 139400  # 1.14 GB a layer at 8192 tokens


def test_llama3_70b_tp8_sp_under_te_by_hand():
    # h 8192, Q 8192, K, V 1024, ffn 28672, 64 heads; tp 8 with sequence parallelism: norms' inputs 4 x 8192 / 8 = 4096,
    # outputs 4096, rsigma 8 / 8 = 1, Q K V 2 x 10240 / 8 = 2560, output 2 x 8192 / 8 = 2048, stats 4 x 64 / 8 = 32,
    # MLP 6 x 28672 / 8 = 21504: 34337 bytes a token.
    m, T = model_preset("llama3-70b"), 8192.0
    assert per_token(te_saved_bytes(m, T, 8, True), T)["total"] == 34337


def test_llama3_405b_tp8_sp_against_the_korthikanti_count():
    # h 16384, Q 16384, K, V 1024, ffn 53248, 128 heads, tp 8, SP, 8192 tokens, b 1, no recompute.
    # bf16: 8192 + 8192 + 1 + 2 x 18432 / 8 (4608) + 2 x 16384 / 8 (4096) + 4 x 128 / 8 (64) + 6 x 53248 / 8 (39936)
    #   = 65089 bytes a token, 533.2 MB a layer; Korthikanti's count with the scores taken out: 10 h / 8 + (2 (q + o)
    #   + 4 hk + 6 f) / 8 = 20480 + 48640 = 69120 bytes a token, 566.2 MB (the dropout masks, 2 h / 8 = 4096, the
    #   difference less the norms' and the kernel's statistics).
    # fp8 (delayed / current scaling): the LayerNormLinear outputs 1 byte (4096), the projection's fp8 copy beside the
    #   kernel's 16-bit output (3 x 16384 / 8 = 6144), fc2's input 1 byte (5 x 53248 / 8 = 33280): 56385 bytes a token.
    m, T = model_preset("llama3-405b"), 8192.0
    bf16 = te_saved_bytes(m, T, 8, True)
    assert per_token(bf16, T)["total"] == 65089
    assert float(bf16["total"]) == 533_209_088
    old, score = layer_activation_bytes(m, 1, 8, 1, True)
    assert float(old - score) == 69120 * T
    fp8 = per_token(te_saved_bytes(m, T, 8, True, fp8=True), T)
    assert (fp8["ln_out"], fp8["out"], fp8["mlp"], fp8["total"]) == (4096, 6144, 33280, 56385)


def test_gpt3_175b_layer_under_te_is_korthikantis_34_sbh_with_dropout_and_layernorm():
    # GPT-3 175B (h 12288, 96 heads, ffn 4h, LayerNorm, learned positions), unfused attention with dropout, tp 8 SP,
    # s 2048, b 1: Korthikanti et al. 2022 Sec. 4.1, 34 s b h / t + 5 a s^2 b / t, plus the norms' fp32 mean and
    # rstd (2 x 8 bytes a token / t), which their count leaves out.
    m, s, t = model_preset("gpt3-175b"), 2048.0, 8
    got = te_saved_bytes(m, s, t, True, dropout=True, fused=False)
    h, a = 12288, 96
    assert float(got["total"]) == pytest.approx(34 * s * h / t + 5 * a * s * s / t + 16 * s / t, rel=1e-15)
    assert float(got["scores"]) == 5 * a * s * s / t
    # without dropout an unfused kernel keeps only the softmax output (2 bytes a score), and no masks
    nod = te_saved_bytes(m, s, t, True, dropout=False, fused=False)
    assert float(nod["total"]) == pytest.approx(32 * s * h / t + 2 * a * s * s / t + 16 * s / t, rel=1e-15)
    # the profiles before layer counts keep Korthikanti's count exactly
    old, score = layer_activation_bytes(m, 1, t, 1, True)
    assert float(old) == 34 * s * h / t + 5 * a * s * s / t


def test_llama3_8b_under_torchtitan_eager_by_hand():
    # tp 1, 8192 tokens: per RMSNorm its fp32 input copy 4 x 4096, its 16-bit normalised output 2 x 4096 and rsqrt 4:
    # 2 x (16384 + 8192 + 4) = 49160; each norm's weighted output as wq/wk/wv and w1/w3 take it, 2 x 2 x 4096 = 16384;
    # SDPA's Q and repeat_kv's K and V (8 K/V heads on the rank: copies as wide as Q) 3 x 2 x 4096 = 24576; its output,
    # which is wo's input (contiguous() of the kernel's (b, s, heads, d) output copies nothing) 2 x 4096 = 8192;
    # logsumexp 4 x 32 = 128; SwiGLU's w1, silu, w3 outputs and their product 4 x 2 x 14336 = 114688.
    m, T = model_preset("llama3-8b"), 8192.0
    got = per_token(torchtitan_saved_bytes(m, T, 1, False), T)
    assert got["norm_in"] + got["ln_out"] + got["stats"] == 49160
    assert (got["gathered"], got["qkv"], got["out"], got["softmax"], got["mlp"]) == (16384, 24576, 8192, 128, 114688)
    assert got["total"] == 213128
    # tp 8 with sequence parallelism: the norms' terms on the sequence shard, the gathered inputs whole; one K/V head a
    # rank, so repeat_kv's reshape is a view of the 128-wide K and V: Q 2 x 512 + K, V 2 x 2 x 128 = 1536
    got8 = per_token(torchtitan_saved_bytes(m, T, 8, True), T)
    assert got8["gathered"] == 16384 and got8["norm_in"] == 2 * 4 * 4096 / 8 and got8["qkv"] == 1536
    # tp 4: two K/V heads a rank, copied as wide as the rank's 8 Q heads: 3 x 2 x 1024 = 6144
    assert per_token(torchtitan_saved_bytes(m, T, 4, True), T)["qkv"] == 6144


def _terms(fw: str, model, t=8, sp=True, precision=0, b=1):
    cl = cluster_preset("h100x1024")
    tt, spp = np.array([t]), np.array([sp])
    sh = shape_terms(model, cl, np.array([b]), tt, ONE, spp, 989e12, gpu=cl.gpu)
    return framework_terms(framework_preset(fw), model, sh, tt, spp, np.array([precision]))


def test_profiles_take_their_layer_code():
    m, T = model_preset("llama3-405b"), 8192.0
    assert float(_terms("megatron-core", m)["act_L"][0]) == 65089 * T
    assert float(_terms("megatron-bridge", m, precision=2)["act_L"][0]) == 56385 * T
    assert float(_terms("fsdp2-eager", m)["act_L"][0]) == float(torchtitan_saved_bytes(m, T, 8, True)["total"])
    # generic and the compiled fsdp2 profile keep Korthikanti's count (fused attention: the scores out)
    old, score = layer_activation_bytes(m, 1, 8, 1, True)
    assert float(_terms("fsdp2", m)["act_L"][0]) == float(old - score)
    assert float(_terms("generic", m)["act_L"][0]) == float(old)


def test_selective_recompute_of_the_core_attention_under_te():
    # Megatron-Core's checkpointed core attention saves its inputs: Q and K after RoPE, and V, a view of the QKV GEMM's
    # output, which keeps that whole buffer (the pre-RoPE Q and K beside V): 2 x (16384 + 1024) / 8 = 4352 bytes a token
    # more; it frees the kernel's fp32 statistics (64). 405B, tp 8 SP: 65089 - 64 + 4352 = 69377.
    m, T = model_preset("llama3-405b"), 8192.0
    ft = _terms("megatron-core", m)
    assert float(ft["sel_kept"][0]) == 69377 * T
    # with learned positions (GPT) Q, K and V are all views of that buffer: only the statistics go
    g = model_preset("gpt3-175b")
    ft = _terms("megatron-core", g)
    assert float(ft["act_L"][0] - ft["sel_kept"][0]) == 4 * 96 * 2048 / 8


def test_dropout_masks_where_the_profile_runs_dropout():
    # a Megatron-Core profile with hidden dropout on: two one-byte masks of h a token on the sequence shard
    m = model_preset("llama3-405b")
    fw = dataclasses.replace(framework_preset("megatron-core"), name="mcore-dropout", dropout=True)
    cl = cluster_preset("h100x1024")
    sh = shape_terms(m, cl, ONE, np.array([8]), ONE, SP, 989e12, gpu=cl.gpu)
    on = framework_terms(fw, m, sh, np.array([8]), SP, np.array([0]))
    off = framework_terms(framework_preset("megatron-core"), m, sh, np.array([8]), SP, np.array([0]))
    assert float(on["act_L"][0] - off["act_L"][0]) == 2 * 16384 / 8 * 8192


def test_llama3_405b_stage_activations_in_the_evaluator():
    # tp 8 SP, pp 16 of 126 layers cut as Meta ran it (7, 8 x 14, 7), 1F1B, 16 micro-batches of one 8192-token
    # sequence, no recompute, megatron-core bf16: stage 1 holds 15 micro-batches of 8 layers at 65089 bytes a token,
    # and the evaluator agrees with the scalar reference on the stage's memory.
    m, cl = model_preset("llama3-405b"), cluster_preset("h100x1024")
    layers = np.array([[7] + [8] * 14 + [7]])
    t = StrategyTable.from_columns(dp=np.array([8]), tp=np.array([8]), pp=np.array([16]), cp=np.array([1]),
                                   micro_batch=np.array([1]), global_batch=np.array([128]), vpp=np.array([1]),
                                   schedule=np.array([SCHED["1f1b"]]), recompute=np.array([0]),
                                   sequence_parallel=np.array([True]), zero_stage=np.array([1]),
                                   overlap_dp=np.array([True]), precision=np.array([0]), stage_layers=layers)
    from costmodel._evaluate import stage_breakdown
    st = stage_breakdown(m, cl, t, framework="megatron-core")
    assert st["in_flight"][0, 1] == 15
    out = evaluate(m, cl, t, framework="megatron-core")
    ref = evaluate_row(m, cl, t.row(0), framework="megatron-core")
    assert out["mem_total_bytes"][0] == pytest.approx(ref["mem_total_bytes"], rel=1e-12)
    # the worst stage is stage 1: 15 x 8 x 533.2 MB = 63.99 GB of activations (no recompute: no working set)
    assert out["mem_activations_bytes"][0] == pytest.approx(15 * 8 * 65089 * 8192.0, rel=1e-12)


def test_torchtitan_eager_experts_keep_a_fourth_product_and_an_fp32_output_by_hand():
    # Mixtral 8x7B (h 4096, expert width 14336, top 2, capacity factor 1), 4096 tokens on one rank: 8192 routed copies,
    # each a fourth 16-bit SwiGLU product 2 x 14336 = 28672 bytes and its fp32 output 4 x 4096 = 16384: 45056 a copy,
    # 369,098,752 bytes in all (torchtitan models/common/moe.py, token_dispatcher.py combine)
    m = model_preset("mixtral-8x7b")
    assert float(torchtitan_expert_extra_bytes(m, 4096.0, 1)) == 8192 * 45056 == 369098752
    # tp 2: each rank's experts take half the copies
    assert float(torchtitan_expert_extra_bytes(m, 4096.0, 2)) == 4096 * 45056
