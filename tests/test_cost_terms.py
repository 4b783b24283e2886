"""The cost terms both evaluators share (costmodel._evaluate), against hand calculations.

Each expected value below is worked out from the formula in the docstring or the paper it
cites, not read back from the code.
"""

from __future__ import annotations

import numpy as np
import pytest

from costmodel import cluster_preset, framework_preset, model_preset
from costmodel._evaluate import (
    GRAD_COMM_BYTES,
    SCHED,
    WEIGHT_BYTES,
    dp_exchange_s,
    pipeline_fill,
    reason_codes,
    recompute_flops_per_token,
    stage_params,
    state_bytes,
    tier,
)


def test_pipeline_fill_per_schedule():
    # p = 4 stages of X = F + B + W = 1 + 2 + 0.5 = 3.5 s each: sum - max = 3 x 3.5 = 10.5.
    sched = np.array([SCHED[k] for k in ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2")])
    p, v = np.full(5, 4), np.array([1, 1, 3, 1, 1])
    fill = pipeline_fill(sched, p, v, np.full(5, 14.0), np.full(5, 3.5), 1.0, 2.0, 0.5)
    # GPipe and 1F1B: 10.5; interleaved v = 3: 3.5; ZB-H1: 3 x (1 + 2 - 0.5) = 7.5;
    # ZB-H2: 3 x (1 + 2 - 1) = 6 (Qi et al. 2023, the bubble of each schedule).
    np.testing.assert_allclose(fill, [10.5, 10.5, 3.5, 7.5, 6.0])


def test_dp_exchange_ring_all_reduce_and_zero3_gathers():
    # 1e9 parameters per GPU over g = 8 ranks at 100 GB/s, 10 us latency.
    params, g, bw, lat = np.array([1e9, 1e9]), np.array([8, 8]), 100e9, 10e-6
    grad = GRAD_COMM_BYTES * 1e9
    ring = 2 * 7 / 8 * grad / bw + 2 * 7 * lat  # ZeRO 0-2: one ring all-reduce
    gather_w, gather_g = 7 / 8 * WEIGHT_BYTES * 1e9 / bw + 7 * lat, 7 / 8 * grad / bw + 7 * lat
    m = np.array([4, 4])
    # ZeRO-3: per micro-batch, two weight all-gathers and one gradient reduce-scatter.
    got = dp_exchange_s(np.array([1, 3]), m, params, g, bw, lat)
    np.testing.assert_allclose(got, [ring, 4 * (2 * gather_w + gather_g)])
    # A block without ZeRO-3 takes the short path: the same all-reduce, one value per row.
    got = dp_exchange_s(np.array([0, 2]), m, params, g, bw, lat)
    np.testing.assert_allclose(got, [ring, ring])
    assert dp_exchange_s(np.array([0]), np.array([1]), np.array([1e9]), np.array([1]), bw, lat)[0] == 0.0


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
