"""The data-parallel exchange's collectives as NCCL prices them (costmodel._collectives.collective_link,
collective_s) and as many as each framework launches (costmodel._data_parallel.exchange_plan), each against a
hand calculation from NCCL's tuning model (src/graph/tuning.cc) and the frameworks' code rules."""

import math

import numpy as np
import pytest

from costmodel import FRAMEWORKS, StrategyTable, evaluate, make_cluster
from costmodel._collectives import collective_link, collective_s
from costmodel._data_parallel import dp_exchange_coef, exchange_plan
from costmodel._workloads import Transformer

US = 1e-6
# 16 nodes of 8 GPUs, NVLink 450 GB/s, 25 GB/s of network per GPU, links at 0.8 of nominal, a step 5 us inside a
# node and 10 us across nodes
UP, OUT, UP_L, OUT_L, EFF = 450e9, 25e9, 5 * US, 10 * US, 0.8


def _link(stride, size):
    return collective_link(np.array(stride), np.array(size), 8, UP, OUT, UP_L, OUT_L, EFF)


def _time(kind, nbytes, size, link):
    per_byte, per_call = collective_s(kind, nbytes, size, link)
    return float(per_byte * nbytes + per_call)


def test_all_reduce_over_16_nodes_tp1_moves_each_nodes_bytes_over_its_8_nics():
    # dp 128, tp 1: 8 ranks of the group on each node, so NCCL's channels use the node's 8 NICs: 8 x 25 GB/s (under
    # 8/7 x 450 of NVLink), x 0.8. Ring: 2 x 127/128 of 1 GB at 160 GB/s, 2 x (112 NVLink steps + 15 network steps);
    # tree: 2 x 1 GB at 0.92 x 160 GB/s, 2 x (7 chain steps + log2 16 = 4 network steps). The tree is faster.
    link = _link(1, 128)
    assert float(link.bw) == pytest.approx(160e9) and int(link.nodes) == 16 and int(link.per_node) == 8
    ring = 2 * 127 / 128 * 1e9 / 160e9 + 2 * (112 * UP_L + 15 * OUT_L)
    tree = 2 * 1e9 / (0.92 * 160e9) + 2 * (7 * UP_L + 4 * OUT_L)
    assert tree < ring
    assert _time("all_reduce", 1e9, 128, link) == pytest.approx(tree, rel=1e-12)
    # one GPU's share of the network, as the exchange was priced before: 99 ms, over 7x the tree's 13.7 ms
    per_gpu = 2 * 127 / 128 * 1e9 / (25e9 * 0.8)
    assert per_gpu > 7 * _time("all_reduce", 1e9, 128, link)


def test_all_reduce_over_16_nodes_tp8_one_rank_per_node_shares_the_nics_with_7_other_groups():
    # tp 8: the dp group's ranks are 8 apart, one per node; the 8 dp groups side by side share the node's NICs,
    # each its one GPU's 25 GB/s. 1 GB: ring 2 x 15/16 at 20 GB/s + 30 network steps beats the tree (2 x 1 GB at
    # 0.92 x 20 GB/s); 1 MB: the tree's 2 x log2 16 steps win.
    link = _link(8, 16)
    assert float(link.bw) == pytest.approx(20e9) and int(link.nodes) == 16 and int(link.per_node) == 1
    ring = lambda n: 2 * 15 / 16 * n / 20e9 + 2 * 15 * OUT_L  # noqa: E731
    tree = lambda n: 2 * n / (0.92 * 20e9) + 2 * 4 * OUT_L  # noqa: E731
    assert ring(1e9) < tree(1e9) and tree(1e6) < ring(1e6)
    assert _time("all_reduce", 1e9, 16, link) == pytest.approx(ring(1e9), rel=1e-12)
    assert _time("all_reduce", 1e6, 16, link) == pytest.approx(tree(1e6), rel=1e-12)


def test_tp2_groups_take_four_nics_and_pat_serves_one_rank_per_node():
    # tp 2: 4 of the group's ranks on a node, 4 NICs: 100 GB/s x 0.8; NVLink's 4/3 x 450 does not bind.
    link = _link(2, 64)
    assert float(link.bw) == pytest.approx(80e9) and int(link.per_node) == 4 and int(link.nodes) == 16
    ring = 63 / 64 * 1e6 / 80e9 + (48 * UP_L + 15 * OUT_L)
    assert _time("gather", 1e6, 64, link) == pytest.approx(ring, rel=1e-12)  # no PAT with 4 ranks a node
    # one rank per node, 1 MB all-gather: PAT (NCCL >= 2.23) at 0.75 of the bandwidth, log2(16) x 10 us / 3.5 +
    # 16 x 2 us (a fifth of the 10 us step, as NCCL's 2.8 us is of its 14 us) against the ring's 15 network steps
    one = _link(8, 16)
    pat = 15 / 16 * 1e6 / (0.75 * 20e9) + 4 * OUT_L / 3.5 + 16 * 0.2 * OUT_L
    ring1 = 15 / 16 * 1e6 / 20e9 + 15 * OUT_L
    assert pat < ring1 and _time("gather", 1e6, 16, one) == pytest.approx(pat, rel=1e-12)


def test_evaluated_zero0_exchange_is_the_hand_all_reduce():
    # The generic profile launches one all-reduce of the stage's gradients (2 bytes each), no overlap: the
    # evaluator's dp_comm_s is that all-reduce, on the links above (tp 1: 8 NICs; tp 8: one).
    model = Transformer(name="two-layer", layers=2, hidden=4096, heads=32, seq_len=2048, vocab=32000)
    cluster = make_cluster("h100", 128, scaleout_Bps=OUT)
    eff, up_l, out_l = cluster.gpu.link_eff, cluster.scaleup_latency_s, cluster.scaleout_latency_s
    up = cluster.scaleup_Bps
    for tp, dp in ((1, 128), (8, 16)):
        cols = StrategyTable.from_columns(dp=dp, tp=tp, pp=1, micro_batch=1, global_batch=256, zero_stage=0,
                                          overlap_dp=False, recompute="none")
        got = evaluate(model, cluster, cols, framework="generic")["dp_comm_s"][0]
        nbytes = 2 * model.num_params() / tp
        if tp == 1:
            bw = min(8 * OUT, 8 / 7 * up) * eff
            ring = 2 * 127 / 128 * nbytes / bw + 2 * (112 * up_l + 15 * out_l)
            tree = 2 * nbytes / (0.92 * bw) + 2 * (7 * up_l + 4 * out_l)
        else:
            bw = OUT * eff
            ring = 2 * 15 / 16 * nbytes / bw + 2 * 15 * out_l
            tree = 2 * nbytes / (0.92 * bw) + 2 * 4 * out_l
        assert got == pytest.approx(min(ring, tree), rel=1e-9)


def _two_layers(h):
    return Transformer(name=f"two-layer-{h}", layers=2, hidden=h, heads=h // 128, seq_len=2048, vocab=32000)


def test_deepspeed_zero3_collectives_per_micro_batch_by_the_codes_rules():
    # DeepSpeed ZeRO-3 (partitioned_param_coordinator.fetch_sub_module): one all-gather per module, Megatron-DeepSpeed's
    # layer has 4 (query_key_value, dense, dense_h_to_4h, dense_4h_to_h), plus the embedding and the head: 2 x 4 + 2 =
    # 10 per forward. Backward gathers again what forward released: parameters whose next use lies beyond
    # stage3_max_reuse_distance (1e9 elements) of traversal; the forward's last modules are used first in backward,
    # twice their size apart: 5e8 parameters stay, at 4 modules a layer that is 5e8 / (layer / 4) calls fewer.
    # Reduce-scatters: one per reduce_bucket_size (5e8 elements), the last partly filled.
    ds = FRAMEWORKS["deepspeed"]
    small = _two_layers(1024)  # 27 M parameters: all of it within the reuse distance, nothing gathered again
    plan = exchange_plan(ds, small, 1, 8, True)
    assert float(plan.gathers_fwd) == 10 and float(plan.gathers_bwd) == 0 and float(plan.kept) == 1
    assert float(plan.bucket) == 5e8 and math.isnan(float(plan.scatters))
    h = 8192
    big = _two_layers(h)
    layer = 12 * h * h + 13 * h  # QKV, projection, two MLP matrices and their biases, two layer norms
    assert big.layer_params() == layer
    P = big.num_params()
    plan = exchange_plan(ds, big, 1, 8, True)
    assert float(plan.gathers_bwd) == pytest.approx(10 - 5e8 / (layer / 4), rel=1e-12)  # 7.52
    assert float(plan.kept) == pytest.approx(5e8 / P, rel=1e-12)
    # the exchange of m = 4 micro-batches over the node's 8 GPUs (one ring inside the node, 7 steps of 5 us each):
    # per micro-batch the weights gathered (2 - kept) times and the gradients reduce-scattered once, 2 bytes each
    link = _link(1, 8)
    bw = 450e9 * 0.8
    a, b = dp_exchange_coef(np.array(3), 4, 8, link, fw=ds, plan=plan)[:2]
    want = 4 * ((2 - 5e8 / P) * 2 * P * 7 / 8 / bw + (10 + plan.gathers_bwd) * 7 * UP_L
                + 2 * P * 7 / 8 / bw + (P / 5e8 + 1) * 7 * UP_L)
    assert float(a * P + b) == pytest.approx(float(want), rel=1e-12)


def test_bucket_and_unit_counts_of_megatron_core_and_fsdp2():
    # Megatron-Core DDP: bucket_size = max(40e6, 1e6 x dp) elements with --overlap-grad-reduce, else one bucket;
    # torchtitan: one FSDP unit per TransformerBlock plus the root (embedding, norm, output): L + 1 all-gathers in
    # forward, L - 1 in backward (the last block and the root not resharded after forward), L + 1 reduce-scatters.
    m = _two_layers(4096)
    mc = FRAMEWORKS["megatron-core"]
    assert float(exchange_plan(mc, m, 1, 128, True).bucket) == 128e6
    assert float(exchange_plan(mc, m, 1, 16, True).bucket) == 40e6
    assert float(exchange_plan(mc, m, 1, 128, False).bucket) == math.inf
    plan = exchange_plan(FRAMEWORKS["fsdp2"], m, 1, 64, True)
    assert (float(plan.gathers_fwd), float(plan.gathers_bwd), float(plan.scatters)) == (3, 1, 3)


def test_evaluated_moe_exchange_is_the_dense_and_the_expert_all_reduce():
    # An MoE model under the generic profile, ZeRO 0, no overlap, dp 128 tp 1 ep 8 on 16 nodes of 8: the dense
    # parameters (all but the routed experts) all-reduced over the 128 replicas (8 of them a node: 8 NICs, as in
    # test_evaluated_zero0_exchange_is_the_hand_all_reduce), then each GPU's routed experts (8 / ep = 1 expert a layer)
    # over the expert-data-parallel group: 128 / 8 = 16 ranks 8 apart, one a node, sharing its NICs with the 7 other
    # groups: one GPU's network. Each all-reduce by the faster of ring and tree for its bytes (2 a gradient).
    model = Transformer(name="two-layer-moe", layers=2, hidden=1024, heads=8, seq_len=2048, vocab=32000, experts=8,
                        experts_per_token=2, expert_ffn_hidden=2048)
    cluster = make_cluster("h100", 128, scaleout_Bps=OUT)
    eff, up_l, out_l = cluster.gpu.link_eff, cluster.scaleup_latency_s, cluster.scaleout_latency_s
    up = cluster.scaleup_Bps
    cols = StrategyTable.from_columns(dp=128, tp=1, pp=1, ep=8, micro_batch=1, global_batch=256, zero_stage=0,
                                      overlap_dp=False, recompute="none")
    got = evaluate(model, cluster, cols, framework="generic")["dp_comm_s"][0]
    expert = 2 * 1024 * 2048 + 2048 + 1024  # two matrices and their biases
    assert model.expert_params() == expert
    dense_bytes = 2 * (model.num_params() - 2 * 8 * expert)
    expert_bytes = 2 * 2 * (8 // 8) * expert  # two layers, one expert each on a GPU
    bw = min(8 * OUT, 8 / 7 * up) * eff
    dense = min(2 * 127 / 128 * dense_bytes / bw + 2 * (112 * up_l + 15 * out_l),
                2 * dense_bytes / (0.92 * bw) + 2 * (7 * up_l + 4 * out_l))
    bw1 = OUT * eff
    experts = min(2 * 15 / 16 * expert_bytes / bw1 + 2 * 15 * out_l,
                  2 * expert_bytes / (0.92 * bw1) + 2 * 4 * out_l)
    assert got == pytest.approx(dense + experts, rel=1e-9)
