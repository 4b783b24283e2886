"""The cost terms both evaluators share (costmodel._layer_compute, _memory_terms, _pipeline_terms, _data_parallel,
...), against hand calculations.

Each expected value below is worked out from the formula in the docstring or the paper it
cites, not read back from the code.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from costmodel import cluster_preset, framework_preset, model_preset
from costmodel._collectives import tier
from costmodel._data_parallel import dp_exchange_s, exposed_dp_s
from costmodel._dtypes import GRAD_COMM_BYTES, WEIGHT_BYTES
from costmodel._feasibility import reason_codes
from costmodel._layer_compute import recompute_flops_per_token
from costmodel._layer_terms import framework_terms
from costmodel._memory_terms import stage_params, state_bytes, state_bytes_per_param
from costmodel._pipeline_terms import SCHED, pipeline_bubble_s


def test_pipeline_bubble_per_schedule():
    # p = 4 stages of X = F + B + W = 1 + 2 + 0.5 = 3.5 s each: sum - max = 3 x 3.5 = 10.5.
    sched = np.array([SCHED[k] for k in ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2")])
    p, v = np.full(5, 4), np.array([1, 1, 3, 1, 1])
    fill = pipeline_bubble_s(sched, p, v, np.full(5, 14.0), np.full(5, 3.5), 1.0, 2.0, 0.5)
    # GPipe and 1F1B: 10.5; interleaved v = 3: 3.5; ZB-H1: 3 x (1 + 2 - 0.5) = 7.5;
    # ZB-H2: 3 x (1 + 2 - 1) = 6 (Qi et al. 2023, the bubble of each schedule).
    np.testing.assert_allclose(fill, [10.5, 10.5, 3.5, 7.5, 6.0])


def test_dp_exchange_ring_all_reduce_and_zero3_gathers():
    # 1e9 parameters per GPU over g = 8 ranks at 100 GB/s, 10 us latency (one link: the ranks of one node). Messages
    # this large run NCCL's ring under Simple, which adds its base latency, 8.4 us a call (tuning.cc baseLatencies).
    params, g, bw, lat, base = np.array([1e9, 1e9]), np.array([8, 8]), 100e9, 10e-6, 8.4e-6
    # a step of 10 us inside a node: NVLink's ring LL hop measured at 1.98 us on a 5 us step, Simple's NCCL's 3.4 / 0.6
    # of it: 10 x 1.98 / 5 x 3.4 / 0.6 = 22.44 us a Simple hop
    hop = 22.44e-6
    grad = GRAD_COMM_BYTES * 1e9
    ring = 2 * 7 / 8 * grad / bw + 2 * 7 * hop + base  # ZeRO 0-2: one ring all-reduce
    gather_w, gather_g = 7 / 8 * WEIGHT_BYTES * 1e9 / bw + 7 * hop + base, 7 / 8 * grad / bw + 7 * hop + base
    m = np.array([4, 4])
    # ZeRO 1: a reduce-scatter and an all-gather, the all-reduce's bytes and steps in two calls; ZeRO-3: per
    # micro-batch, two weight all-gathers and one gradient reduce-scatter.
    got = dp_exchange_s(np.array([1, 3]), m, params, g, bw, lat)
    np.testing.assert_allclose(got, [ring + base, 4 * (2 * gather_w + gather_g)])
    # A block without ZeRO-3 takes the short path: the all-reduce, and ZeRO 2's two calls, one value per row.
    got = dp_exchange_s(np.array([0, 2]), m, params, g, bw, lat)
    np.testing.assert_allclose(got, [ring, ring + base])
    assert dp_exchange_s(np.array([0]), np.array([1]), np.array([1e9]), np.array([1]), bw, lat)[0] == 0.0
    # Gradients reduced in fp32 (4 bytes an element, Framework.grad_reduce_bytes), the weights still gathered in
    # bf16: ZeRO 0 all-reduces 2 x 7/8 x 4e9 bytes (70 ms); ZeRO 1-2 reduce-scatter 7/8 x 4e9 and all-gather
    # 7/8 x 2e9 (52.5 ms); ZeRO-3 per micro-batch 7/8 x (2 + 2 + 4) e9 (70 ms, x 4); each plus its ring steps.
    got = dp_exchange_s(np.array([0, 1, 2, 3]), np.full(4, 4), np.full(4, 1e9), np.full(4, 8), bw, lat, grad_bytes=4)
    np.testing.assert_allclose(got, [0.070 + 14 * hop + base, 0.0525 + 14 * hop + 2 * base,
                                     0.0525 + 14 * hop + 2 * base, 4 * (0.070 + 21 * hop + 3 * base)])
    # per row, as the evaluator passes it (the row's precision): 2 bytes is the default's all-reduce
    got = dp_exchange_s(np.array([0, 0]), np.array([1, 1]), params, g, bw, lat, grad_bytes=np.array([4.0, 2.0]))
    np.testing.assert_allclose(got, [0.070 + 14 * hop + base, ring])
    # as the evaluator passes it: the framework and the row's precision, its bytes from the profile (Megatron-Core
    # reduces bf16 gradients in fp32, fp16 ones in fp16: the same 70 ms and the 2-byte ring)
    got = dp_exchange_s(np.array([0, 0]), np.array([1, 1]), params, g, bw, lat, fw=framework_preset("megatron-core"),
                        prec=np.array([0, 1]))
    np.testing.assert_allclose(got, [0.070 + 14 * hop + base, ring])


def test_dp_exchange_fp8_weight_gathers_and_bf16_optimizer():
    # 1e9 parameters per GPU over 8 ranks at 100 GB/s, 10 us a ring step, ZeRO 0-3, 4 micro-batches; each call NCCL's
    # ring under Simple, 8.4 us of base latency (tuning.cc baseLatencies).
    zero, m, params, g, bw, lat = np.array([0, 1, 2, 3]), np.full(4, 4), np.full(4, 1e9), np.full(4, 8), 100e9, 10e-6
    base = 8.4e-6
    hop = 22.44e-6  # Simple's hop on a 10 us step: 10 x 1.98 / 5 x 3.4 / 0.6 us (as above)
    # Megatron-Bridge under fp8 gathers fp8 weights (1 byte), reduces bf16 gradients (2): ZeRO 0 all-reduces
    # 7/8 x 2 x 2e9 bytes (35 ms); ZeRO 1-2 reduce-scatter 7/8 x 2e9 and gather 7/8 x 1e9 (26.25 ms); ZeRO-3 per
    # micro-batch gathers 1 + 1 and reduce-scatters 2 bytes an element (35 ms, x 4).
    got = dp_exchange_s(zero, m, params, g, bw, lat, grad_bytes=2, fw=framework_preset("megatron-bridge"), prec=2)
    np.testing.assert_allclose(got, [0.035 + 14 * hop + base, 0.02625 + 14 * hop + 2 * base,
                                     0.02625 + 14 * hop + 2 * base, 4 * (0.035 + 21 * hop + 3 * base)])
    # DeepSpeed's BF16_Optimizer (bf16, ZeRO 0-1) all-reduces the 2-byte gradients and all-gathers the 2-byte weights:
    # 7/8 x (4 + 2) e9 (52.5 ms) and three ring passes; ZeRO-3 as before; ZeRO-2 reduce-scatters after each of the
    # 4 micro-batches (stage 2's backward hooks): 4 x (7/8 x 2e9 = 17.5 ms + 7 steps) and one all-gather (17.5 ms):
    # 87.5 ms and 5 rings; fp16 rows (prec 1) as the default but that ZeRO-2.
    ds = framework_preset("deepspeed")
    got = dp_exchange_s(zero, m, params, g, bw, lat, grad_bytes=2, fw=ds, prec=0)
    np.testing.assert_allclose(got, [0.0525 + 21 * hop + 2 * base, 0.0525 + 21 * hop + 2 * base,
                                     0.0875 + 35 * hop + 5 * base, 4 * (0.0525 + 21 * hop + 3 * base)])
    got = dp_exchange_s(zero, m, params, g, bw, lat, grad_bytes=2, fw=ds, prec=1)
    want = dp_exchange_s(zero, m, params, g, bw, lat, grad_bytes=2)
    np.testing.assert_allclose(got, [*want[:2], 0.0875 + 35 * hop + 5 * base, want[3]])


def test_exposed_dp_weight_all_gather_behind_the_next_forward():
    # Exchange 0.9 s, the bottleneck stage's last backward B + W = 0.3 + 0.1 s, its forward F = 0.2 s, X = 0.7 s,
    # m = 4; ZeRO 0-3, overlap on.
    zero, m, X, B, W, F = np.array([0, 1, 2, 3]), 4, 0.7, 0.3, 0.1, 0.2
    dp = np.full(4, 0.9)
    # No overlap_param_gather (generic): the whole exchange behind B + W (ZeRO-3: behind m X = 2.8 s).
    np.testing.assert_allclose(exposed_dp_s(zero, True, m, X, B, W, dp, F_b=F, fw=framework_preset("generic")),
                               [0.5, 0.5, 0.5, 0.0])
    # Megatron-Core, bf16: reduce-scatter 4 bytes, all-gather 2: the gather is 2 / 6 of it (0.3 s) and waits in the
    # next forward: ZeRO 1-2 expose max(0.6 - 0.4, 0) + max(0.3 - 0.2, 0) = 0.3; ZeRO 0 and 3 as before.
    mc = framework_preset("megatron-core")
    np.testing.assert_allclose(exposed_dp_s(zero, True, m, X, B, W, dp, F_b=F, fw=mc, prec=0), [0.5, 0.3, 0.3, 0.0])
    # Megatron-Bridge, bf16 (2 + 2): the gather is half (0.45 s): 0.05 + 0.25; fp8 (2 + 1): a third again.
    br = framework_preset("megatron-bridge")
    np.testing.assert_allclose(exposed_dp_s(zero, True, m, X, B, W, dp, F_b=F, fw=br, prec=0), [0.5, 0.3, 0.3, 0.0])
    np.testing.assert_allclose(exposed_dp_s(zero, True, m, X, B, W, np.full(4, 1.2), F_b=F, fw=br, prec=0),
                               [0.8, 0.2 + 0.4, 0.2 + 0.4, 0.0])
    np.testing.assert_allclose(exposed_dp_s(zero, True, m, X, B, W, dp, F_b=F, fw=br, prec=2), [0.5, 0.3, 0.3, 0.0])
    # All-reduce then gather at ZeRO 1 (2 x 2 + 2 bytes): a third, 0.3 s again; ZeRO 2 reduce-scatters (half).
    both = dataclasses.replace(br, name="both", all_reduce_then_gather=(True,) * 3)
    np.testing.assert_allclose(exposed_dp_s(zero, True, m, X, B, W, dp, F_b=F, fw=both, prec=0), [0.5, 0.3, 0.3, 0.0])
    np.testing.assert_allclose(exposed_dp_s(zero, True, m, X, B, W, np.full(4, 1.2), F_b=F, fw=both, prec=0),
                               [0.8, (0.8 - 0.4) + (0.4 - 0.2), 0.6, 0.0])
    # overlap off: everything exposed
    np.testing.assert_allclose(exposed_dp_s(zero, False, m, X, B, W, dp, F_b=F, fw=mc, prec=0), dp)


def test_exposed_dp_fsdp1_root_and_first_block_collectives():
    # Llama 3 8B: 8,030,261,248 parameters, a layer 218,112,000 (4096^2 x 2 + 4096 x 1024 x 2 + 3 x 4096 x 14336 + 2 x
    # 4096), 32 layers: the root unit (embedding, untied head, final norm) and block 0 hold 8,030,261,248 - 31 x
    # 218,112,000 = 1,268,789,248, e = 0.15800. LLM Foundry bf16: reduce-scatter 4 bytes, all-gather 2. ZeRO-2 and 3,
    # m = 1, X = 0.5 s, B + W = 0.6 s, F = 0.3 s.
    model, lf = model_preset("llama3-8b"), framework_preset("llm-foundry")
    e = 1268789248 / 8030261248
    zero, X, B, W, F = np.array([2, 3]), 0.5, 0.5, 0.1, 0.3
    # ZeRO-2, exchange 0.6 s (gather 0.2, reduce-scatter 0.4): the rest hidden (0.17 < F, 0.34 < B + W), e x 0.6
    # exposed where generic exposes max(0.6 - 0.6, 0) = 0; ZeRO-3, 0.8 s (two gathers 0.2 each, 0.4): e x (0.2 + 0.4)
    # and max(0.8 - e x 0.6 - 0.5, 0) = 0.2052 (0.3 in all, as generic's 0.8 - 0.5)
    dp = np.array([0.6, 0.8])
    got = exposed_dp_s(zero, True, 1, X, B, W, dp, F_b=F, fw=lf, prec=0, model=model, pp=1)
    np.testing.assert_allclose(got, [e * 0.6, 0.3], rtol=1e-12)
    assert e * 0.6 == pytest.approx(0.094800, abs=1e-6)
    # a longer forward window kept: ZeRO-3 behind m X = 1.0 s exposes only the edges
    np.testing.assert_allclose(exposed_dp_s(zero, True, 1, 1.0, B, W, dp, F_b=F, fw=lf, model=model), [e * 0.6] * 2,
                               rtol=1e-12)
    # pp 2, overlap off, or without the field: as before
    np.testing.assert_allclose(exposed_dp_s(zero, True, 1, X, B, W, dp, F_b=F, fw=lf, model=model, pp=np.array(2)),
                               [0.0, 0.3], atol=1e-15)
    np.testing.assert_allclose(exposed_dp_s(zero, False, 1, X, B, W, dp, F_b=F, fw=lf, model=model), dp)
    assert framework_preset("fsdp2").fsdp_unit_edges and framework_preset("llm-foundry-triton").fsdp_unit_edges
    assert not framework_preset("megatron-core").fsdp_unit_edges and not framework_preset("deepspeed").fsdp_unit_edges


def test_state_bytes_shard_by_zero_stage():
    # 2 + 4 + 12 bytes per parameter (bf16 weight, fp32 gradient, fp32 master + Adam moments),
    # sharded over g = 4 from the ZeRO stage that shards them (Rajbhandari et al. 2020).
    zero, params, g = np.array([0, 1, 2, 3]), 1e9, 4
    w, gr, o = state_bytes(params, zero, g)
    np.testing.assert_allclose(w, [2e9, 2e9, 2e9, 0.5e9])
    np.testing.assert_allclose(gr, [4e9, 4e9, 1e9, 1e9])
    np.testing.assert_allclose(o, [12e9, 3e9, 3e9, 3e9])


def test_stage_params_embedding_head_and_tied_copy():
    gpt = model_preset("gpt3-175b")  # tied embeddings: the last stage keeps a copy when pp > 1
    layer, emb, head = gpt.layer_params(), gpt.embedding_params(), gpt.head_params()
    n = np.array([96, 12, 12, 12])
    first = np.array([True, True, False, False])
    last = np.array([True, False, False, True])
    got = stage_params(gpt, n, first, last, np.array([8, 8, 8, 8]))
    expect = [(96 * layer + emb + head) / 8, (12 * layer + emb) / 8, 12 * layer / 8,
              (12 * layer + head + gpt.vocab * gpt.hidden) / 8]
    np.testing.assert_allclose(got, expect)


def test_recompute_flops_per_token():
    gpt = model_preset("gpt3-175b")
    rc = np.array([0, 1, 2])  # none, selective, full
    got = recompute_flops_per_token(gpt, rc == 2, rc == 1, framework_preset("megatron-core"))
    # Selective recomputes the attention scores and their product with V: 2 x 2 s h FLOPs per
    # token (Korthikanti et al. 2022); full recomputes the layer's whole forward.
    np.testing.assert_allclose(got, [0.0, 4.0 * 2048 * 12288, gpt.layer_fwd_flops_per_token()])
    # torchtitan's per-op policy (fsdp2) recomputes the 2nd, 4th and 6th products of the block:
    # wk (h x h for GPT-3's MHA), wo (h x h) and fc2 (4h x h), 2 FLOPs a multiply-add.
    llama = model_preset("llama3-8b")  # h 4096, 8 K/V heads of 128: 1024, SwiGLU f 14336
    got = recompute_flops_per_token(gpt, rc == 2, rc == 1, framework_preset("fsdp2"))
    h = 12288
    np.testing.assert_allclose(got[1], 2.0 * (h * h + h * h + 4 * h * h))
    got = recompute_flops_per_token(llama, rc == 2, rc == 1, framework_preset("fsdp2"))
    np.testing.assert_allclose(got[1], 2.0 * (4096 * 1024 + 4096 * 4096 + 4096 * 14336))  # wk, wo, w3


@pytest.mark.parametrize("bad, reason", [
    ({"gpus_ok": False, "tp_ok": False}, "gpus_exceed_cluster"),  # the first failing check wins
    ({"tp_ok": False}, "tp_not_divide_heads"),
    ({"cp": 3}, "cp_not_divide_seq"),  # 2048 is not a multiple of 2 x 3
    ({"zero": 2, "pp": 2}, "zero_incompatible_pp"),
    # Megatron-LM 2021 had no distributed optimizer (Narayanan et al. 2021 shard nothing)
    ({"zero": 1, "framework": "megatron-2021"}, "framework_unsupported"),
    ({"zero": 2, "pp": 2, "framework": "megatron-2021"}, "zero_incompatible_pp"),  # before the framework check
    ({}, None),
])
def test_reason_codes(bad, reason):
    from costmodel import REASONS
    from costmodel._strategy import SCHEDULES

    args = dict(gpus_ok=True, tp_ok=True, pp_ok=True, batch_ok=True, sched_ok=True, cp=1, pp=1, seq_len=2048,
                zero=0, schedule=SCHEDULES.index("1f1b"), sequence_parallel=False, precision=0) | bad
    framework = args.pop("framework", "generic")
    got = reason_codes(framework=framework, **{k: np.array([v]) for k, v in args.items()})
    assert got[0] == (0 if reason is None else REASONS.index(reason))


def test_a_group_is_inside_a_node_only_if_its_span_divides_the_node():
    # h100x1024: 8 GPUs a node, NVLink 450 GB/s, network 50 GB/s per GPU, 0.8 of either reached.
    # Groups of `span` consecutive ranks laid from rank 0: spans 1, 2, 4, 8 tile a node; 3 and 6 put
    # a group across two nodes (ranks 6-8 for tp 3), so every group's collective waits on the network;
    # 16 spans two nodes. A whole job (one group) of 6 GPUs fits one node.
    cluster = cluster_preset("h100x1024")
    span = np.array([1, 2, 3, 4, 6, 8, 16])
    bw, lat = tier(span, cluster, cluster.gpu)
    nvlink, net = 450e9 * 0.8, 50e9 * 0.8
    np.testing.assert_allclose(bw, [nvlink, nvlink, net, nvlink, net, nvlink, net])
    np.testing.assert_allclose(lat, [5e-6, 5e-6, 10e-6, 5e-6, 10e-6, 5e-6, 10e-6])
    bw, _ = tier(np.array([6, 8, 12]), cluster, cluster.gpu, one_group=True)
    np.testing.assert_allclose(bw, [nvlink, nvlink, net])


def _one_layer(**kw):
    """layer_costs of Llama 3 8B's layer at tp 1, one sequence of 8192 tokens, on one H100."""
    from costmodel._layer_compute import layer_costs

    model, cluster = model_preset("llama3-8b"), cluster_preset("h100x8")
    one = np.array([1])
    return model, cluster, layer_costs(model, cluster, one, one, one, np.array([False]), **kw)


def test_attention_core_runs_in_16_bits_under_fp8():
    # FP8_IN_16_BIT: the attention core at the 16-bit peak whatever peak the linear layers take
    # (DeepSeek-V3 report Sec. 3.3.1); standard formula: 4 s^2 q FLOPs at gemm_eff_max x
    # sat(s)^2 x sat(128) = 0.5 of the tile edge.
    model, cluster, lc = _one_layer(peak=1978.9e12, peak16=989.4e12)
    gpu, s, q = cluster.gpu, 8192.0, 4096.0
    util = gpu.gemm_eff_max * (s / (s + 128)) ** 2 * 0.5
    np.testing.assert_allclose(lc["attn"], 4 * s * s * q / (989.4e12 * util), rtol=1e-12)
    _, _, lc16 = _one_layer(peak=989.4e12)
    np.testing.assert_allclose(lc["attn"], lc16["attn"], rtol=1e-12)
    assert lc["gemm"][0] < 0.75 * lc16["gemm"][0]  # the linear layers do take the fp8 peak


def test_attention_kernel_rates_are_the_causal_rates_measured_on_the_h100():
    # The tables of costmodel._hardware against the H100 timings they come from, by hand: a causal forward does
    # 2 b s^2 heads dh FLOPs (half of QK^T and AV), its backward 2.5x that. FlashAttention-2: SDPA alone
    # (h100_small_attention_measured.csv; backward = forward + backward less forward); cuDNN: its kernels inside one
    # layer (h100_small_layer_kernels.csv; fprop kernels forward, the other SDPA / cuDNN kernels backward); batches of
    # >= 16k tokens, means per length. 512, 1k and 16k: Shah et al. 2024's figures there (FlashAttention-2 191 / 214,
    # 260 / 260, 335 / 322; cuDNN 315 / 305, 410 / 408, 539 / 516) x the measured / published ratio at 2k or 8k (2k:
    # FA2 298 / 291, cuDNN 484 / 465; 8k: FA2 333 / 318, cuDNN 529 / 518).
    import csv
    from collections import defaultdict
    from pathlib import Path

    from costmodel._hardware import _ATTN_TFLOPS_H100

    data = Path(__file__).parent / "data"
    read = lambda name: list(csv.DictReader(r for r in open(data / name) if not r.startswith("#")))  # noqa: E731
    rates = defaultdict(list)  # (kernel, length) -> [(fwd, bwd) TFLOP/s]
    for r in read("h100_small_attention_measured.csv"):
        b, s, n, dh = (int(r[k]) for k in ("batch", "seq", "heads", "head_dim"))
        flops, fwd, both = 2 * b * s * s * n * dh, float(r["fwd_s"]), float(r["fwd_bwd_s"])
        if r["backend"] == "flash" and b * s >= 16384:
            rates["flash2", s].append((flops / fwd / 1e12, 2.5 * flops / (both - fwd) / 1e12))
    layers = {r["label"]: r for r in read("h100_small_layer_measured.csv")}
    split = defaultdict(lambda: [0.0, 0.0])
    for r in read("h100_small_layer_kernels.csv"):
        k = r["kernel"].lower()
        if "sdpa" in k or "cudnn" in k:
            split[r["label"]]["fprop" not in k] += float(r["device_s"])
    for label, (fwd, bwd) in split.items():
        m = layers[label]
        b, s, n, t = (int(m[k]) for k in ("micro_batch", "seq", "heads_local", "tp"))
        flops = 2 * b * s * s * n * (int(m["hidden"]) // (n * t))
        if b * s >= 16384:
            rates["cudnn", s].append((flops / fwd / 1e12, 2.5 * flops / bwd / 1e12))
    paper = {"flash2": np.array([(191, 260, 298, 333, 335), (214, 260, 291, 318, 322)]).T,  # (length, fwd / bwd)
             "cudnn": np.array([(315, 410, 484, 529, 539), (305, 408, 465, 518, 516)]).T}
    for kernel in ("flash2", "cudnn"):
        mean = {s: np.mean(rates[kernel, s], axis=0) for s in (2048, 4096, 8192)}  # (fwd, bwd) each
        pub = paper[kernel]  # at 512, 1k, 2k, 8k, 16k
        want = [pub[0] * mean[2048] / pub[2], pub[1] * mean[2048] / pub[2], mean[2048], mean[4096], mean[8192],
                pub[4] * mean[8192] / pub[3]]
        np.testing.assert_allclose(np.array(_ATTN_TFLOPS_H100[kernel]).T, want, atol=0.5 + 1e-9)
    # the reason for the change: the published backward (unmasked) overstated the causal one at short lengths
    assert np.mean(rates["flash2", 2048], axis=0)[1] < 0.7 * 291
    assert np.mean(rates["cudnn", 2048], axis=0)[1] < 0.8 * 465


def test_a_measured_attention_kernel_prices_the_causal_half_at_its_rate_at_the_length():
    from costmodel._hardware import SUSTAINED_CLOCK, attention_kernel_eff
    from costmodel._layer_compute import attention_eff_at, layer_costs

    # Measured on an H100 (tests/data/h100_small_*.csv; costmodel._hardware notes): FlashAttention-2 causal forward /
    # backward 302 / 285 TFLOP/s at 16k, 276 / 187 at 2k, 286 / 231 at 4k, 300 / 281 at 8k; one forward + backward
    # (2.5 x the FLOPs) at 3 / (1/fwd + 2.5/bwd): 248.28 at 16k, 176.55 at 2k, times the sustained clock, as a
    # fraction of 989.4.
    f = lambda fwd, bwd: 3 / (1 / fwd + 2.5 / bwd) / 989.4 * SUSTAINED_CLOCK  # noqa: E731
    fa2 = attention_kernel_eff("H100-SXM5-80GB", "flash2")
    assert fa2[5] == pytest.approx(f(302, 285), rel=1e-12) and fa2[2] == pytest.approx(f(276, 187), rel=1e-12)
    assert f(276, 187) / f(302, 285) == pytest.approx(176.55 / 248.28, rel=1e-4)
    assert attention_kernel_eff("H100-SXM5-80GB", "cudnn")[0] == pytest.approx(f(307, 234), rel=1e-12)
    # Not measured: the standard formula (zeros), on another GPU or for the standard kernel.
    assert attention_kernel_eff("A100-SXM4-80GB", "flash2") == (0.0,) * 6
    assert attention_kernel_eff("H100-SXM5-80GB", "standard") == (0.0,) * 6
    # log2-linear between the points (2k * sqrt 2: halfway from 2k to 4k), clamped outside 512 .. 16k
    tab = np.array([fa2])
    np.testing.assert_allclose(attention_eff_at(tab, np.array([2048 * 2 ** 0.5])), (f(276, 187) + f(286, 231)) / 2,
                               rtol=1e-12)
    np.testing.assert_allclose(attention_eff_at(tab, np.array([256.0, 65536.0])), [fa2[0], fa2[5]], rtol=1e-12)
    model, cluster, lc = _one_layer(peak=989.4e12, attn_eff=tab)
    s, q = 8192.0, 4096.0
    causal = 2 * s * s * q  # half of QK^T and AV's 4 s^2 q
    np.testing.assert_allclose(lc["attn"], causal / (989.4e12 * f(300, 281)), rtol=1e-12)
    # about 245.3 TFLOP/s x 0.85 (the sustained clock) = 208.5 on the causal FLOPs, against the standard formula's
    # 989.4 x 0.68 x 0.97 x 0.5 = 326 on the whole square (163 on the causal half)
    _, _, std = _one_layer(peak=989.4e12)
    assert 1.2 < std["attn"][0] / lc["attn"][0] < 1.35
    # Under context parallelism (cp 2) the kernel runs on the rank's 4096-token chunk: half the causal FLOPs, 4k's rate
    one = np.array([1])
    cp2 = layer_costs(model, cluster, one, one, np.array([2]), np.array([False]), 989.4e12, attn_eff=tab)
    np.testing.assert_allclose(cp2["attn"], causal / 2 / (989.4e12 * f(286, 231)), rtol=1e-12)


def test_profiles_name_their_attention_kernels():
    assert framework_preset("megatron-core").attention_kernel == "cudnn"
    assert framework_preset("fsdp2").attention_kernel == "flash2"
    for name in ("generic", "megatron-2021", "deepspeed", "hai-llm"):
        assert framework_preset(name).attention_kernel == "standard"


def test_torchao_casts_move_the_bytes_of_its_roofline():
    from costmodel._layer_compute import fp8_cast_s

    # torchao's tensorwise roofline without fusion: 6 bytes per input / output-gradient element
    # (max read 2, read 2, two fp8 writes 1 + 1), a weight 5 forward (max 2, cast 2 + 1) and 3
    # backward. Llama 3 8B layer, tp 1, 8192 tokens: inputs h + q + h + f = 26,624 per token,
    # output gradients (q + 2 hk) + h + 2 f + h = 6,144 + 4,096 + 28,672 + 4,096 = 43,008, weights
    # 4096 x 6144 + 4096 x 4096 + 3 x 4096 x 14336 = 218,103,808.
    model, cluster = model_preset("llama3-8b"), cluster_preset("h100x8")
    gpu, T = cluster.gpu, np.array([8192.0])
    assert framework_preset("fsdp2").fp8_cast_bytes == (6.0, 5.0, 6.0, 3.0)
    fwd, bwd = fp8_cast_s(model, T, np.array([1]), gpu, (6.0, 5.0, 6.0, 3.0))
    rate = gpu.hbm_Bps * gpu.hbm_eff
    np.testing.assert_allclose(fwd, (6 * 8192 * 26624 + 5 * 218103808) / rate, rtol=1e-12)
    np.testing.assert_allclose(bwd, (6 * 8192 * 43008 + 3 * 218103808) / rate, rtol=1e-12)
    # Transformer Engine's casts are priced from its code: tests/test_te_mechanisms.py.
    assert framework_preset("megatron-core").fp8_cast_bytes == (4.0, 0.0, 4.0, 0.0)


def test_multi_head_latent_attention_terms_by_hand():
    from costmodel._dtypes import ACT_BYTES
    from costmodel._layer_compute import attention_gemm_s, gemm_s, layer_costs
    from costmodel._layer_terms import framework_terms, shape_terms
    from costmodel._memory_terms import layer_activation_bytes

    # DeepSeek-V3's attention (config.json): 128 heads, Q and K 128 + 64 wide a head, V 128;
    # Q through a 1536 latent, K/V through 512 (+ 64 rope dims); tp 2 with sequence parallelism,
    # one sequence of 4096 tokens on an H100.
    model, cluster = model_preset("deepseek-v3"), cluster_preset("h100x8")
    gpu, peak, s, t, h = cluster.gpu, 989.4e12, 4096.0, 2, 7168
    one, two, sp = np.array([1]), np.array([t]), np.array([True])
    # down-projections whole, over the rank's 2048 tokens; up-projections and output split by t
    by_hand = (gemm_s(s / t, 1536, h, peak, gpu) + gemm_s(s, 128 * 192 / t, 1536, peak, gpu)
               + gemm_s(s / t, 512 + 64, h, peak, gpu) + gemm_s(s, 128 * 256 / t, 512, peak, gpu)
               + gemm_s(s, h, 128 * 128 / t, peak, gpu))
    np.testing.assert_allclose(attention_gemm_s(model, s, t, peak, gpu, two), by_hand, rtol=1e-12)
    # The core: QK^T over 192 and AV over 128 a head, 2 s^2 a (192 + 128) FLOPs, twice what the
    # mean width 160 gives with 4 s^2; cuDNN's measured rate on the causal half
    eff = 0.5
    lc = layer_costs(model, cluster, one, two, one, sp, peak, attn_eff=np.array([eff]))
    np.testing.assert_allclose(lc["attn"], 0.5 * 2 * s * s * 128 * 320 / t / (peak * eff), rtol=1e-12)
    # Activations a layer keeps (bytes): Korthikanti's 10 h split by t under SP, Q and K (2 x
    # 24576) V and the output (2 x 16384) at 2 bytes split by t, the dense MLP's 6 f split by t,
    # the two latents (1536 + 512 + 64) before and after their norms at 2 bytes over s / t, and
    # the scores 5 a s^2 / t (taken out by the fused kernel below)
    act, score = layer_activation_bytes(model, one, two, one, sp)
    want_score = 5 * 128 * s * s / t
    want = (10 * s * h / t + 2 * s * (2 * 24576 + 2 * 16384) / t + 6 * s * 18432 / t + 4 * s * 2112 / t
            + want_score)
    np.testing.assert_allclose((act[0], score[0]), (want, want_score), rtol=1e-12)
    # Selective recompute (Megatron-Core's "mla_up_proj"): Q, K, V not kept, the up-projections
    # run again (not the attention core)
    sh = shape_terms(model, cluster, one, two, one, sp, peak, gpu=gpu)
    ft = framework_terms(framework_preset("megatron-core"), model, sh, two, sp, np.array([0]))
    up = gemm_s(s, 128 * 192 / t, 1536, peak, gpu) + gemm_s(s, 128 * 256 / t, 512, peak, gpu)
    np.testing.assert_allclose(ft["sel_re"], up, rtol=1e-12)
    np.testing.assert_allclose(ft["act_L"] - ft["sel_kept"], ACT_BYTES * s * (24576 + 24576 + 16384) / t,
                               rtol=1e-12)
    # and the recomputed FLOPs a token count the up-projections' weights
    sel = recompute_flops_per_token(model, False, True, framework_preset("megatron-core"))
    assert sel == pytest.approx(2 * (1536 * 24576 + 512 * 32768), rel=1e-12)


def test_mla_down_projections_are_whole_on_every_tensor_parallel_rank():
    from costmodel import Transformer

    # DeepSeek-V3: Q down 7168 x 1536, K/V down 7168 x (512 + 64), the two latent norms 1536 + 512
    dsv3 = model_preset("deepseek-v3")
    assert dsv3.tp_replicated_params() == 7168 * 1536 + 7168 * 576 + 1536 + 512
    # a 2-layer interior stage at tp 2: the split parameters halved, the replicated ones whole
    m = Transformer(name="x", layers=4, hidden=64, heads=4, vocab=10, kv_lora_rank=16, q_lora_rank=32,
                    qk_rope_head_dim=8, v_head_dim=16)
    R = 64 * 32 + 64 * (16 + 8) + 32 + 16
    assert m.tp_replicated_params() == R
    no = np.array([[False]])
    got = stage_params(m, np.array([[2]]), no, no, np.array([[2.0]]))
    assert got[0, 0] == pytest.approx(2 * (m.layer_params() - R) / 2 + 2 * R, rel=1e-12)
    # without MLA nothing is replicated: the same formula as before
    std = model_preset("llama3-8b")
    assert std.tp_replicated_params() == 0
    assert stage_params(std, np.array([[2]]), no, no, np.array([[2.0]]))[0, 0] == 2 * std.layer_params() / 2


def test_the_500_w_h100_runs_at_the_middle_of_the_sxm_and_nvl_peaks():
    # torchtitan's benchmark (benchmarks/llama3_h100_202412_torchtitan.md, footnote 2): the 500 W
    # H100 96GB's peak lies between the H100 SXM's and the H100 NVL's. NVIDIA's datasheet, dense =
    # half of the sparse figures: SXM BF16 1979 / 2 = 989.4, FP8 3958 / 2 = 1978.9; NVL BF16
    # 1671 / 2 = 835.5, FP8 3341 / 2 = 1670.5. The middle: 912.45 and 1824.7 TFLOP/s.
    from costmodel._hardware import attention_kernel_eff, gpu_preset
    from costmodel._layer_compute import gemm_s

    g, sxm = gpu_preset("h100-96gb"), gpu_preset("h100")
    assert g.peak_flops[0] == pytest.approx((989.4 + 835.5) / 2 * 1e12, rel=1e-12)
    assert g.peak_flops[2] == pytest.approx((1978.9 + 1670.5) / 2 * 1e12, rel=1e-12)
    # The same die, so the same fraction of its peak (a lower clock scales every compute-bound
    # term): a large GEMM and the attention kernel take 989.4 / 912.45 = 1.0843x the SXM's time.
    assert g.gemm_eff_max == sxm.gemm_eff_max and g.gemm_half_dim == sxm.gemm_half_dim
    assert attention_kernel_eff(g.name, "flash2") == attention_kernel_eff(sxm.name, "flash2")
    n = 16384.0
    t96, t80 = gemm_s(n, n, n, g.peak_flops[0], g), gemm_s(n, n, n, sxm.peak_flops[0], sxm)
    assert t96 / t80 == pytest.approx(989.4 / 912.45, rel=1e-12)
    # HBM is not clocked down: 2.4 TB/s as the benchmark publishes it.
    assert g.hbm_Bps == 2.4e12


def test_pytorch_ring_attention_copies_and_collectives_by_hand():
    # Llama 3 8B (h = q = 4096, hk = 1024, f = 14336, SwiGLU), tp 1, cp 4: the rank's Q has E = 2048 x 4096 =
    # 8,388,608 elements, K and V as many after repeat_kv. The element-wise terms chosen at 1e-12 s a byte: elem =
    # 2 (11 T h + 3 T f) bytes x 1e-12. fsdp2 (Framework.ring_attention_bytes 20, 46, 84, 60): forward (20 + 46 x 3)
    # E = 158 E bytes, backward (84 + 60 x 3) E = 264 E; its GQA copies (kv_repeat_bytes 4) add 4 T (q + hk) each way.
    # Link 100 GB/s, 10 us: K and V all-gathered in bf16 over 3 steps, 3 (4 E / 1e11 + 1e-5) = 1.03663296 ms, behind
    # step 0's attention (2 ms / 4) forward and its backward (2 x 2 ms / 4) backward; fp32 dK, dV a step 8 E / 1e11 +
    # 1e-5 = 0.68108864 ms, hidden behind 1 ms but the last. cp 1: the generic terms pass through.
    model, E, T = model_preset("llama3-8b"), 2048 * 4096, 2048.0
    z = np.zeros(2)
    terms = dict(T=np.full(2, T), elem=np.full(2, 2 * (11 * T * 4096 + 3 * T * 14336) * 1e-12), attn=np.full(2, 2e-3),
                 c=np.array([4, 1]), cp_bw=np.full(2, 1e11), cp_lat=np.full(2, 1e-5), cp_fwd=np.array([7.0, 7.0]),
                 cp_bwd=np.array([9.0, 9.0]), cast_f=z, cast_b=z, act_L=z, score_L=z, gemm=z, overhead=z, tp_fwd=z,
                 tp_bwd=z)
    kv = 4 * T * (4096 + 1024) * 1e-12
    out = framework_terms(framework_preset("fsdp2"), model, terms, np.ones(2), np.zeros(2, bool), np.zeros(2, int))
    np.testing.assert_allclose(out["cast_f"], [158 * E * 1e-12 + kv, kv], rtol=1e-12)
    np.testing.assert_allclose(out["cast_b"], [264 * E * 1e-12 + kv, kv], rtol=1e-12)
    np.testing.assert_allclose(out["cp_fwd"], [1.03663296e-3 - 0.5e-3, 7.0], rtol=1e-12)
    np.testing.assert_allclose(out["cp_bwd"], [1.03663296e-3 - 1e-3 + 0.68108864e-3, 9.0], rtol=1e-12)
    # LLM Foundry has no context parallelism of its own: the generic ring's terms stay
    out = framework_terms(framework_preset("llm-foundry"), model, terms, np.ones(2), np.zeros(2, bool), np.zeros(2))
    np.testing.assert_allclose(out["cp_fwd"], [7.0, 7.0])
    np.testing.assert_allclose(out["cast_f"], [0.0, 0.0])


def test_gradient_buffer_bytes_by_profile_and_precision():
    # 1e9 parameters a GPU over g = 8 replicas: weights 2 bytes, optimizer 12 / 8 under ZeRO 1-2, gradients the
    # profile's buffer bytes, / 8 from ZeRO-2. Megatron-Core keeps its gradients in the dtype it reduces them in
    # (fp32 under --bf16, the 16-bit dtype under --fp16); Megatron-Bridge's recipes set grad_reduce_in_fp32 False
    # (2 bytes); generic keeps 4.
    core, bridge = framework_preset("megatron-core"), framework_preset("megatron-bridge")
    assert core.grad_memory_bytes() == (4.0, 2.0, 4.0) and bridge.grad_memory_bytes() == 2.0
    assert framework_preset("generic").grad_memory_bytes() == 4.0 == framework_preset("fsdp2").grad_memory_bytes()
    zero, g, prec = np.array([1, 1, 1, 2]), np.full(4, 8), np.array([0, 1, 2, 0])  # bf16, fp16, fp8, bf16
    w, gr, o = state_bytes(np.full(4, 1e9), zero, g, grad_bytes=core.grad_memory_bytes(), prec=prec)
    np.testing.assert_allclose(gr, [4e9, 2e9, 4e9, 0.5e9])
    np.testing.assert_allclose(w + o, [3.5e9] * 4)
    per = state_bytes_per_param(zero, g, grad_bytes=core.grad_memory_bytes(), prec=prec)
    np.testing.assert_allclose(per, [7.5, 5.5, 7.5, 4.0])
    # the lookup table of long integer columns gives the same sums
    big = np.resize(np.arange(4), 5000)
    np.testing.assert_allclose(state_bytes_per_param(zero[big], g[big], grad_bytes=core.grad_memory_bytes(),
                                                     prec=prec[big]), per[big])
    np.testing.assert_allclose(state_bytes_per_param(zero[big], g[big], grad_bytes=2.0),
                               np.array([5.5, 5.5, 5.5, 3.75])[big])


def test_gradient_buffer_halves_under_megatron_bridge():
    # Llama 3 405B, tp 8 pp 8, ZeRO-1 (the distributed optimizer keeps the whole gradient buffer): the worst stage's
    # gradient bytes are its parameters a GPU times 4 under megatron-core's bf16, times 2 under megatron-bridge.
    from costmodel import StrategyTable, evaluate
    model, cl = model_preset("llama3-405b"), cluster_preset("h100x1024")
    t = StrategyTable.from_columns(dp=np.array([16]), tp=np.array([8]), pp=np.array([8]), cp=np.array([1]),
                                   micro_batch=np.array([1]), global_batch=np.array([512]), vpp=np.array([1]),
                                   schedule=np.array([SCHED["1f1b"]]), recompute=np.array([2]),
                                   sequence_parallel=np.array([True]), zero_stage=np.array([1]),
                                   overlap_dp=np.array([True]), precision=np.array([0]))
    core = evaluate(model, cl, t, framework="megatron-core")
    bridge = evaluate(model, cl, t, framework="megatron-bridge")
    params = core["mem_weights_bytes"][0] / 2  # (weights: 2 bytes a parameter, unsharded under ZeRO-1)
    assert core["mem_grads_bytes"][0] == pytest.approx(4 * params)
    assert bridge["mem_grads_bytes"][0] == pytest.approx(2 * params)
    assert core["mem_total_bytes"][0] - bridge["mem_total_bytes"][0] == pytest.approx(2 * params)
