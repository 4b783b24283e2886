"""Mixture-of-experts pricing (issue 18, slice 2): expert parallelism as a strategy column, the
vectorised evaluator against the scalar reference on MoE rows, and hand-worked volumes and bytes."""

import dataclasses

import numpy as np
import pytest

from costmodel import (
    REASONS,
    StrategyTable,
    Transformer,
    cluster_preset,
    evaluate,
    framework_preset,
    model_preset,
)
from costmodel._collectives import all_to_all_s
from costmodel._dtypes import ACT_BYTES
from costmodel._errors import InputError
from costmodel._experts import routed_copies
from costmodel._memory import memory_screen
from tests.test_reference import assert_rows_equal_reference, random_table

# A small MoE model with every MoE feature: a dense first layer, MoE every second layer after it
# (so that uniform stages of an odd number of layers differ: evaluated as explicit stages),
# a shared expert of its own width, top-2 of 8, a capacity factor above 1.
TINY = Transformer(name="tiny-moe", layers=24, hidden=1024, heads=16, kv_heads=4, ffn_hidden=4096, seq_len=2048,
                   vocab=32000, activation="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False,
                   learned_positions=False, experts=8, experts_per_token=2, shared_experts=1, expert_ffn_hidden=512,
                   shared_expert_ffn_hidden=1024, dense_layers=1, moe_layer_freq=2, capacity_factor=1.25)


def with_ep(table: StrategyTable, rng, experts: int) -> StrategyTable:
    """``table`` with an ep column: half the rows a divisor of the experts and of tp cp dp, the rest
    any power of two (some infeasible)."""
    n = len(table)
    ranks = table["dp"] * table["cp"] * table["tp"]
    good = [e for e in (1, 2, 4, 8, 16, 32, 64) if experts % e == 0]
    pick = np.array(good)[rng.integers(0, len(good), n)]
    fitting = np.gcd(pick, ranks)
    ep = np.where(rng.random(n) < 0.6, fitting, rng.choice([1, 2, 4, 8, 16, 64], n))
    # expert tensor parallelism on a third of the rows, mostly fitting the ranks left beside ep
    etp = np.where(rng.random(n) < 0.33, np.gcd(rng.choice([2, 4, 8], n), np.maximum(ranks // ep, 1)), 1)
    etp = np.where(rng.random(n) < 0.1, rng.choice([2, 3, 4], n), etp)
    return dataclasses.replace(table, columns={**table.columns, "ep": ep.astype(np.int64), "etp": etp.astype(np.int64)})


OVERLAP = dataclasses.replace(framework_preset("megatron-core"), name="mcore-a2a-overlap", overlap_ep=True)
CASES = [
    ("mixtral-8x7b", "h100x64", False, None, 500),
    ("mixtral-8x7b", "h100x1024", True, "megatron-core", 400),
    ("deepseek-v3", "h100x1024", True, None, 300),
    ("tiny", "h100x64", False, "fsdp2", 400),
    ("tiny", "h100x64", True, "fsdp2-eager", 300),  # torchtitan's eager experts' saved bytes
    ("tiny", "dgx-a100-1024", True, OVERLAP, 400),
    ("tiny", "h100x64", True, "megatron-2021", 300),
    ("mixtral-8x7b", "h100x1024", True, "megatron-core-deepep", 300),
    ("tiny", "h100x64", False, "megatron-core-deepep-a2a-overlap", 300),
    ("qwen3-30b-a3b", "h100x64", True, "megatron-core-deepep", 300),  # head_dim 128 on 32 heads of 2048
    # group-limited routing (4 groups of 2 experts, 2 per token) and fp8 dispatch: nodes holding whole
    # groups, groups spanning nodes, and (etp 3) neither
    ("tiny-groups", "h100x64", False, "hai-llm", 300),
    ("deepseek-v3", "h800x2048", True, "hai-llm", 200),
    # every layer an MoE layer on uniform stages (three representatives where stages are alike) under the EP A2A
    # overlap of the steady state only: interleaved, each stage j runs its own share of passes unpaired
    ("mixtral-8x7b", "h100x64", False, "megatron-core-a2a-overlap", 300),
    ("qwen3-30b-a3b", "h100x1024", False, "megatron-core-deepep-a2a-overlap", 300),
]


def _model(name):
    if name == "tiny-groups":
        return dataclasses.replace(TINY, router_groups=4, router_group_topk=2)
    return TINY if name == "tiny" else model_preset(name)


@pytest.mark.parametrize("name,cluster,uneven,framework,rows", CASES)
def test_moe_rows_equal_scalar_reference(name, cluster, uneven, framework, rows):
    rng = np.random.default_rng(len(name) * 11 + uneven)
    model, cl = _model(name), cluster_preset(cluster)
    if model.seq_len > 4096:
        model = dataclasses.replace(model, seq_len=4096)
    table = with_ep(random_table(model, rng, rows, uneven), rng, model.experts)
    vec = evaluate(model, cl, table, framework=framework)
    reasons = {int(x) for x in vec["reason"]}
    assert REASONS.index("ep_invalid") in reasons, [REASONS[r] for r in reasons]
    if name != "deepseek-v3" and framework != "megatron-2021":  # 671B on 80 GB rarely fits; 2021: no ep
        assert 0 in reasons
        # all-to-alls priced (and, where the framework overlaps them, hidden in part or whole: what is hidden still
        # costs the SMs NCCL's channels hold, costmodel._experts.a2a_channels)
        assert np.any(vec["ep_comm_s"][vec["feasible"]] > 0)
        if framework is OVERLAP:
            over = vec["ep_comm_s"][vec["feasible"]]
            plain = evaluate(model, cl, table, framework="megatron-core")["ep_comm_s"][vec["feasible"]]
            assert np.all(over <= plain) and np.any(over < plain)
    mem, reason = memory_screen(model, cl, table, framework=framework)
    np.testing.assert_array_equal(reason, vec["reason"])
    np.testing.assert_allclose(mem, vec["mem_total_bytes"], rtol=1e-12)
    assert_rows_equal_reference(model, cl, table, vec, framework)


def test_dense_models_take_ep_1_only():
    model, cl = model_preset("llama3-8b"), cluster_preset("h100x64")
    out = evaluate(model, cl, StrategyTable.from_columns(dp=8, tp=1, ep=[1, 2, 8], micro_batch=1, global_batch=64,
                                                         recompute="full", zero_stage=3))
    assert [REASONS[r] for r in out["reason"]] == ["ok", "ep_invalid", "ep_invalid"]
    assert np.all(out["ep_comm_s"] == 0.0)


def test_ep_rule_divides_experts_and_the_stage_ranks():
    model, cl = dataclasses.replace(model_preset("mixtral-8x7b"), seq_len=4096), cluster_preset("h100x64")
    # tp cp dp = 2 x 1 x 4 = 8 ranks a stage: ep 8 folds into them (tp included, etp = 1); ep 16 does
    # not fit 8 ranks; ep 3 divides neither E = 8 nor 8; 8 x 2 = 16 ranks do not take ep 16 (E = 8).
    t = StrategyTable.from_columns(dp=[4, 4, 4, 8], tp=2, pp=4, ep=[8, 16, 3, 16], micro_batch=1, global_batch=64,
                                   recompute="full")
    assert [REASONS[r] for r in evaluate(model, cl, t)["reason"]][:3] == ["ok", "ep_invalid", "ep_invalid"]
    assert REASONS[evaluate(model, cl, t)["reason"][3]] == "ep_invalid"
    # a framework without expert parallelism runs ep = 1 only
    one = StrategyTable.from_columns(dp=8, tp=1, pp=8, ep=[1, 8], micro_batch=1, global_batch=64)
    got = [REASONS[r] for r in evaluate(model, cl, one, framework="megatron-2021")["reason"]]
    assert got[0] != "framework_unsupported" and got[1] == "framework_unsupported"


# ---- hand-worked all-to-all volumes -------------------------------------------------------------
def test_all_to_all_volume_per_token_top_k_over_ep():
    """Top-k routing over ep ranks: each token's k copies of h 2-byte values go out, 1/ep of them
    stay on the rank; dispatch and combine move that twice forward and twice backward."""
    cl = cluster_preset("h100x64")  # 8 GPUs a node
    h, k = 4096, 2
    model = dataclasses.replace(TINY, hidden=h, heads=32, kv_heads=8, experts=8, experts_per_token=k,
                                capacity_factor=1.0)
    T = 4096.0  # tokens on one rank, tp = 1
    copies = routed_copies(model, T, 1)
    assert copies == k * T
    nbytes = ACT_BYTES * copies * h  # 2 x 8192 x 4096 = 64 MiB sent per dispatch
    assert nbytes == 2 * 2 * 4096 * 4096
    bw = cl.scaleup_Bps * cl.gpu.link_eff
    # ep = 8 inside a node: 7/8 of the copies leave the GPU over NVLink.
    want8 = 7 / 8 * 2 * 2 * 4096 * 4096 / bw + cl.scaleup_latency_s
    assert all_to_all_s(nbytes, np.array([8]), cl, cl.gpu)[0] == pytest.approx(want8, rel=1e-12)
    # ep = 1: nothing moves.
    assert all_to_all_s(nbytes, np.array([1]), cl, cl.gpu)[0] == 0.0
    # ep = 32 over 4 nodes: 7/32 of the copies to the node's other GPUs, 24/32 over the network at
    # the same time; the network share sets the time.
    net = cl.scaleout_Bps * cl.gpu.link_eff
    want32 = max(7 / 32 * nbytes / bw, 24 / 32 * nbytes / net) + cl.scaleout_latency_s
    assert all_to_all_s(nbytes, np.array([32]), cl, cl.gpu)[0] == pytest.approx(want32, rel=1e-12)
    # Per layer and micro-batch the evaluator exposes 2 (dispatch, combine) forward + 2 backward.
    mix = dataclasses.replace(model_preset("mixtral-8x7b"), seq_len=4096)
    t = StrategyTable.from_columns(dp=8, tp=1, pp=4, ep=8, micro_batch=1, global_batch=64)
    out = evaluate(mix, cl, t)
    per_layer = 4 * (7 / 8 * ACT_BYTES * 2 * 4096 * mix.hidden / bw + cl.scaleup_latency_s)
    m, layers = 64 // 8, 32 // 4
    assert out["ep_comm_s"][0] == pytest.approx(m * layers * per_layer, rel=1e-12)


def test_per_node_dispatch_sends_each_token_once_per_other_node():
    """A per-node dispatcher (DeepEP, HybridEP): 16 experts, top-2, ep = 16 over 2 nodes of 8 GPUs.
    A token's 2 experts (drawn without repeats) both miss the other node with probability
    (8/16)(7/15) = 7/30, so it crosses the network 1 - 7/30 = 23/30 times; the alltoall
    dispatcher sends 2 copies x 8/16 = 1 copy's worth over the network. DeepEP's kernels move the network's bytes at
    0.87 of the NIC (its README's EP 32 and 64 figures on the wire: 42.8-44.6 of 50 GB/s), NCCL's at link_eff."""
    from costmodel._experts import remote_nodes_per_token

    cl = cluster_preset("h100x64")
    model = dataclasses.replace(TINY, experts=16, experts_per_token=2, capacity_factor=1.0)
    assert remote_nodes_per_token(model, np.array([16]), cl)[0] == pytest.approx(23 / 30, rel=1e-12)
    assert remote_nodes_per_token(model, np.array([8]), cl)[0] == 0.0  # one node
    T, h = 4096.0, model.hidden
    copies = 2 * T
    bw, net = cl.scaleup_Bps * cl.gpu.link_eff, cl.scaleout_Bps * cl.gpu.link_eff
    deepep_net = cl.scaleout_Bps * 0.87
    per_node = max(15 / 16 * 2 * copies * h / bw, 2 * T * h * 23 / 30 / deepep_net) + cl.scaleout_latency_s
    alltoall = max(7 / 16 * 2 * copies * h / bw, 8 / 16 * 2 * copies * h / net) + cl.scaleout_latency_s
    assert all_to_all_s(2 * copies * h, np.array([16]), cl, cl.gpu, 2 * T * h * 23 / 30)[0] == pytest.approx(
        per_node, rel=1e-12)
    assert all_to_all_s(2 * copies * h, np.array([16]), cl, cl.gpu)[0] == pytest.approx(alltoall, rel=1e-12)
    assert per_node < alltoall


def test_node_limited_routing_remote_nodes_by_hand():
    """Group-limited routing, worked by hand (each picked group gives k / M of the k experts). 16
    experts in 4 groups of 4, top-4 from 2 groups, ep 16 over 2 nodes (2 groups a node): the other
    node misses the token only when neither of its groups is picked, 1 of the C(4, 2) = 6 pairs:
    remote 5/6, against 1 - (8 7 6 5) / (16 15 14 13) = 25/26 unlimited. 16 experts in 2 groups of
    8, top-2 from 1 group, ep 16 x etp 2 over 4 nodes of 4 experts (a group spans 2 nodes): a node
    is in the picked group with probability 1/2 and then misses both experts with (4/8)(3/7):
    miss = 1/2 + 3/28 = 17/28, remote 3 x 11/28 = 33/28. DeepSeek-V3 on 8 nodes (one group a node,
    4 of 8 groups, 2 experts each): a node misses with probability 1/2, remote 7/2 against 4.63
    unlimited."""
    from costmodel._experts import remote_nodes_per_token
    from costmodel._reference import _remote_nodes

    cl = cluster_preset("h100x64")  # 8 GPUs a node
    base = dataclasses.replace(TINY, experts=16, experts_per_token=4, capacity_factor=1.0)
    whole = dataclasses.replace(base, router_groups=4, router_group_topk=2)
    assert remote_nodes_per_token(whole, np.array([16]), cl)[0] == pytest.approx(5 / 6, rel=1e-12)
    assert _remote_nodes(whole, 2) == pytest.approx(5 / 6, rel=1e-12)
    assert remote_nodes_per_token(base, np.array([16]), cl)[0] == pytest.approx(25 / 26, rel=1e-12)
    spans = dataclasses.replace(base, experts_per_token=2, router_groups=2, router_group_topk=1)
    assert remote_nodes_per_token(spans, np.array([16]), cl, 2)[0] == pytest.approx(33 / 28, rel=1e-12)
    assert _remote_nodes(spans, 4) == pytest.approx(33 / 28, rel=1e-12)
    dsv3 = model_preset("deepseek-v3")
    assert (dsv3.router_groups, dsv3.router_group_topk) == (8, 4)
    h800 = cluster_preset("h800x2048")
    assert remote_nodes_per_token(dsv3, np.array([64]), h800)[0] == pytest.approx(3.5, rel=1e-12)
    p_free = np.prod([(224 - i) / (256 - i) for i in range(8)])
    free = dataclasses.replace(dsv3, router_groups=1, router_group_topk=1)
    assert remote_nodes_per_token(free, np.array([64]), h800)[0] == pytest.approx(7 * (1 - p_free), rel=1e-12)
    assert 7 * (1 - p_free) == pytest.approx(4.633, abs=0.001)
    # a bad limit names its field
    with pytest.raises(InputError, match="router_group_topk"):
        dataclasses.replace(dsv3, router_group_topk=3)  # does not divide top-8
    with pytest.raises(InputError, match="router_groups"):
        dataclasses.replace(dsv3, router_groups=7)


def test_fp8_dispatch_bytes_by_hand():
    """fp8 dispatch (DeepSeek-V3 Sec. 3.3.3, DeepEP): the dispatch moves 1 byte an element plus one
    fp32 scale per 128 (1 + 4/128 = 1.03125 bytes), the combine 2 bytes, forward and backward alike.
    Mixtral 8x7B, ep 8 in one node, top-2 of T = 4096 tokens: per layer and micro-batch
    2 x [7/8 x 1.03125 x 2 T h / bw + lat + 7/8 x 2 x 2 T h / bw + lat]; in bf16 the same with 2 bytes
    both ways; without fp8_dispatch fp8 rows price 2 bytes."""
    from costmodel._experts import FP8_DISPATCH_BYTES

    assert FP8_DISPATCH_BYTES == 1.03125
    cl = cluster_preset("h100x64")
    fw = dataclasses.replace(framework_preset("megatron-core-deepep"), name="deepep-fp8-dispatch", fp8_dispatch=True)
    mix = dataclasses.replace(model_preset("mixtral-8x7b"), seq_len=4096)
    bw, lat, h = cl.scaleup_Bps * cl.gpu.link_eff, cl.scaleup_latency_s, mix.hidden
    copies = 2 * 4096
    m, layers = 64 // 8, 32 // 4

    def ep_comm(precision, framework):
        t = StrategyTable.from_columns(dp=8, tp=1, pp=4, ep=8, micro_batch=1, global_batch=64, precision=precision)
        return evaluate(mix, cl, t, framework=framework)["ep_comm_s"][0]

    fp8_layer = 2 * ((7 / 8 * 1.03125 * copies * h / bw + lat) + (7 / 8 * 2 * copies * h / bw + lat))
    bf16_layer = 2 * 2 * (7 / 8 * 2 * copies * h / bw + lat)
    assert ep_comm("fp8", fw) == pytest.approx(m * layers * fp8_layer, rel=1e-12)
    assert ep_comm("bf16", fw) == pytest.approx(m * layers * bf16_layer, rel=1e-12)
    assert ep_comm("fp8", "megatron-core-deepep") == pytest.approx(m * layers * bf16_layer, rel=1e-12)


# ---- hand-worked expert memory -----------------------------------------------------------------
def _state(model, cl, **cols):
    t = StrategyTable.from_columns(micro_batch=1, global_batch=256, recompute="full", **cols)
    out = evaluate(model, cl, t)
    return out["mem_weights_bytes"][0], out["mem_grads_bytes"][0], out["mem_optimizer_bytes"][0]


def test_expert_memory_split_by_ep_and_sharded_over_expert_dp():
    """Mixtral 8x7B, pp = 8 (4 MoE layers a stage), an interior stage: per MoE layer 8 experts of
    3 x 4096 x 14336 = 176,160,768 parameters; attention 4096 x (4096 + 2 x 1024) + 4096 x 4096 =
    41,943,040, router 4096 x 8 = 32,768, two RMSNorms 8,192: 41,984,000 outside the experts."""
    model, cl = dataclasses.replace(model_preset("mixtral-8x7b"), seq_len=4096), cluster_preset("h100x64")
    expert = 3 * 4096 * 14336
    dense = 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 4096 * 8 + 2 * 4096
    assert model.expert_params() == expert and model.moe_layer_dense_params() == dense
    layers = 4
    # Stage memory reported is the worst stage; the first stage adds the embedding (32000 x 4096),
    # the last the head: compare a pipeline of 8 with uneven stages that make an interior stage the
    # largest? Simpler: pp = 1 would hold all 32 layers; use the formula on the first stage instead.
    emb = 32000 * 4096
    for dp, tp, ep, etp, zero in ((8, 1, 8, 1, 0), (8, 1, 4, 1, 0), (8, 1, 8, 1, 1), (8, 1, 2, 1, 1), (4, 2, 8, 1, 1),
                                  (4, 2, 2, 1, 1), (8, 1, 4, 2, 1), (8, 1, 2, 4, 0), (4, 2, 2, 2, 1)):
        w, g, o = _state(model, cl, dp=dp, tp=tp, pp=8, ep=ep, etp=etp, zero_stage=zero)
        dense_gpu = (layers * dense + emb) / tp  # first stage: 4 MoE layers and the embedding
        expert_gpu = layers * (8 / ep) * expert / etp  # E / ep experts a layer, each split etp ways
        edp = dp * tp // (ep * etp)  # expert-data-parallel ranks
        assert w == pytest.approx(2 * (dense_gpu + expert_gpu), rel=1e-12), (dp, tp, ep, zero)
        assert g == pytest.approx(4 * (dense_gpu + expert_gpu), rel=1e-12)
        if zero == 0:
            assert o == pytest.approx(12 * (dense_gpu + expert_gpu), rel=1e-12)
        else:  # ZeRO-1: optimizer state of dense parameters over dp, of experts over edp
            assert o == pytest.approx(12 * (dense_gpu / dp + expert_gpu / edp), rel=1e-12)
    # ZeRO-3 (pp = 1, 32 layers, embedding and head): everything sharded, experts over edp.
    head = 32000 * 4096 + 4096  # untied head and the final norm
    for dp, ep in ((64, 8), (64, 2), (8, 8)):
        w, g, o = _state(model, cl, dp=dp, tp=1, pp=1, ep=ep, zero_stage=3)
        dense_gpu = 32 * dense + emb + head
        expert_gpu = 32 * (8 / ep) * expert
        edp = dp // ep
        assert w == pytest.approx(2 * (dense_gpu / dp + expert_gpu / edp), rel=1e-12), (dp, ep)
        assert g == pytest.approx(4 * (dense_gpu / dp + expert_gpu / edp), rel=1e-12)
        assert o == pytest.approx(12 * (dense_gpu / dp + expert_gpu / edp), rel=1e-12)


def test_expert_tensor_parallelism_rule_and_its_gather():
    """etp splits each expert's ffn: etp must divide expert_ffn_hidden and ep x etp the tp cp dp
    ranks; megatron-core runs it, fsdp2 (priced with etp 1) does not. Its all-gather and
    reduce-scatter of the copies are part of ep_comm_s."""
    model, cl = dataclasses.replace(model_preset("mixtral-8x7b"), seq_len=4096), cluster_preset("h100x64")
    t = StrategyTable.from_columns(dp=8, tp=1, pp=8, ep=[4, 4, 8, 4], etp=[1, 2, 2, 3], micro_batch=1,
                                   global_batch=64, recompute="full", zero_stage=1)
    out = evaluate(model, cl, t, framework="megatron-core")
    assert [REASONS[r] for r in out["reason"]][2:] == ["ep_invalid", "ep_invalid"]  # 16 > 8 ranks; 3 / 14336
    assert out["ep_comm_s"][1] > out["ep_comm_s"][0]  # the same a2a plus the etp gather
    assert REASONS[evaluate(model, cl, t.take([1]), framework="fsdp2")["reason"][0]] == "framework_unsupported"


def test_more_ep_less_expert_memory_and_active_mfu():
    model, cl = dataclasses.replace(model_preset("mixtral-8x7b"), seq_len=4096), cluster_preset("h100x64")
    t = StrategyTable.from_columns(dp=8, tp=1, pp=8, ep=[1, 2, 4, 8], micro_batch=1, global_batch=256,
                                   recompute="full", zero_stage=1)
    out = evaluate(model, cl, t)
    assert np.all(np.diff(out["mem_weights_bytes"]) < 0)
    # MFU counts active parameters: 6 x active FLOPs per token (plus attention) over the step.
    assert model.model_flops_per_sample() < 6 * model.num_params() * model.seq_len / 2
    ok = out["feasible"]
    flops = model.model_flops_per_sample() * 256
    np.testing.assert_allclose(out["mfu"][ok], flops / (out["step_time_s"][ok] * 64 * cl.gpu.peak_flops[0]))


def test_space_gets_ep_for_moe_models_only_and_parquet_has_the_columns():
    from search import default_space, exact_space
    from sweep._results import to_arrow

    cl = cluster_preset("h100x64")
    moe = dataclasses.replace(model_preset("mixtral-8x7b"), seq_len=4096)
    space = default_space(moe, cl, 256)
    assert space.choices_of("ep") == (1, 2, 4, 8)
    assert exact_space(moe, cl, 256).choices_of("ep") == (1, 2, 4, 8)
    dense = default_space(model_preset("llama3-8b"), cl, 256)
    assert "ep" not in [d.name for d in dense.dims] and dense.choices_of("ep") == (1,)
    table = space.table(space.random_digits(np.random.default_rng(0), 2000))
    assert len(set(table["ep"].tolist())) > 1
    metrics = evaluate(moe, cl, table)
    assert np.all(metrics["reason"] != REASONS.index("ep_invalid"))  # the space holds only ep that fit
    arrow = to_arrow(table, metrics, run_id="r", model=moe.name, cluster=cl.name, iteration=0, grid_index=None)
    assert {"ep", "ep_comm_s"} <= set(arrow.column_names)
    assert set(arrow.column("ep").to_pylist()) <= {1, 2, 4, 8}


def test_an_moe_layers_tensor_parallel_exchange_is_the_attentions_and_the_shared_experts():
    """Under tp with SP an MoE layer runs the attention's all-gather and reduce-scatter (T h 2-byte values each) and,
    where it has shared experts, theirs as a tensor-parallel MLP; the routed experts exchange over the expert-tensor-
    parallel group only (Megatron-Core's token dispatcher: tp_group = expt_tp), none at etp 1. Mixtral 8x7B at tp 2 on
    one node, 4 stages of 8 MoE layers, 8 micro-batches of 4,096 tokens; with a shared expert added the step's
    exposed tp exchange grows by the MLP's pair of collectives in each of the 8 layers' forward and backward, once a
    micro-batch."""
    cl = cluster_preset("h100x64")
    mix = dataclasses.replace(model_preset("mixtral-8x7b"), seq_len=4096)
    shared = dataclasses.replace(mix, name="mixtral-shared", shared_experts=1, shared_expert_ffn_hidden=1024)
    t = StrategyTable.from_columns(dp=8, tp=2, pp=4, ep=8, micro_batch=1, global_batch=64, sequence_parallel=True)
    base, more = evaluate(mix, cl, t)["tp_comm_s"][0], evaluate(shared, cl, t)["tp_comm_s"][0]
    bw, lat = cl.scaleup_Bps * cl.gpu.link_eff, cl.scaleup_latency_s
    T, h, tp, m, layers = 4096, mix.hidden, 2, 64 // 8, 32 // 4
    # an all-gather and a reduce-scatter of the T x h activation over 2 ranks: (tp - 1) / tp of its bytes, one step
    pair = 2 * ((tp - 1) / tp * ACT_BYTES * T * h / bw + (tp - 1) * lat)
    assert more - base == pytest.approx(m * layers * 2 * pair, rel=1e-9)
    # and the MoE layers' share without shared experts is that one pair a pass: the attention's, where the same
    # model as a dense one (its backward's collectives exposed, as an MoE layer's are) runs two
    fw = dataclasses.replace(framework_preset("megatron-core"), name="mcore-bare-tp-backward", tp_backward_async=False)
    dense = dataclasses.replace(mix, name="mixtral-as-dense", experts=1, experts_per_token=1)
    t1 = StrategyTable.from_columns(dp=8, tp=2, pp=4, micro_batch=1, global_batch=64, sequence_parallel=True)
    assert evaluate(dense, cl, t1, framework=fw)["tp_comm_s"][0] - evaluate(mix, cl, t, framework=fw)["tp_comm_s"][
        0] == pytest.approx(m * layers * 2 * pair, rel=1e-9)
