"""Stages split across pools: a data-parallel group spanning two pools (HetPipe's virtual workers).

Hand-worked: the split stage's gradient all-reduce is a ring over the whole group priced on the
slowest link it crosses (the inter-pool link), its compute is the slower pool's replica, and
whether a split pays depends on the inter-pool link."""

import dataclasses

import numpy as np
import pytest

import costmodel._block
from costmodel import (
    REASONS,
    InputError,
    StrategyTable,
    Transformer,
    evaluate,
    gpu_preset,
    hetero_from_mapping,
    hetero_preset,
    make_cluster,
    make_hetero,
    make_pool,
    model_preset,
    stage_breakdown,
    stage_rows,
)
from costmodel._strategy import hetero_from_mapping as strategy_from_file
from search._hetero_space import HeteroSpace
from search._moves import proposer

GRAD_BYTES_ON_WIRE = 2  # bf16 gradients reduced in the training dtype (costmodel GRAD_COMM_BYTES)


def _mlp(layers=8, hidden=8192):
    # no embedding or head: every parameter is one of the layers' h x h weights
    return Transformer(name="mlp", layers=layers, hidden=hidden, kind="mlp", activation="relu", norm="none",
                       bias=False)


def _a100_h100(link_GBps=25, latency_us=12):
    return hetero_from_mapping({"pools": [{"name": "a", "gpu": "a100", "nodes": 1},
                                          {"name": "h", "gpu": "h100", "nodes": 1}],
                                "links": [{"between": ["a", "h"], "GBps": link_GBps, "latency_us": latency_us}]})


def _one_stage(pool, dp, tp, pool2=None, dp2=0, **kw):
    return StrategyTable.from_columns(stage_pool=[[pool]], stage_dp=[[dp]], stage_tp=[[tp]], stage_layers=[[8]],
                                    stage_pool2=None if pool2 is None else [[pool2]], stage_dp2=[[dp2]],
                                    microbatches=4, global_batch=64, overlap_dp=False, **kw)


def _split_ring_s(nbytes, n=4, per_node=2, nodes=2, link_GBps=25, eff=0.8, nvlink_us=11.22, link_us=12):
    """The ring all-reduce of the split stage below, worked by hand: NCCL's ring crosses the inter-pool link as it
    crosses any node boundary, with a channel per rank of the node, so the link carries per_node x 25 GB/s x 0.8
    = 40 GB/s (each node's NVLink, 300 GB/s x 0.8 x 2 / (2 - 1), is faster); its 2 (n - 1) = 6 steps are
    2 x ((n - nodes) = 2 steps inside a node at 11.22 us + (nodes - 1) = 1 across the link at 12 us) = 68.88 us (an
    NVLink hop under Simple: the measured ring LL hop, 1.98 us on the presets' 5 us step, x NCCL's 3.4 / 0.6; the
    link's 12 us is Simple's hop). At these sizes NCCL runs the ring under Simple (LL128's 0.92 of the bandwidth loses
    more than its shorter hops save), whose all-reduce across nodes pays its base latency, 8.4 us, and x 1.4 on the
    whole (tuning.cc): 1.4 x 77.28 = 108.192 us."""
    bw = per_node * link_GBps * 1e9 * eff
    return 2 * (n - 1) / n * nbytes / bw + 1.4 * (8.4 + 2 * ((n - nodes) * nvlink_us + (nodes - 1) * link_us)) * 1e-6


def test_split_stage_all_reduce_on_the_inter_pool_link_by_hand():
    """One stage, dp 4 x tp 2 (tp-inner): 2 replicas on the A100 node, 2 on the H100 node, joined at
    25 GB/s per GPU and 12 us. Each GPU holds 8 h^2 / 2 weights; the ring all-reduce over the 4
    replicas moves 2 (n - 1) / n x 2 bytes x params through each rank. The group has 2 ranks on each
    node, so NCCL runs 2 channels, each leaving a node through one of its ranks' NICs: the crossing
    moves 2 x 25 GB/s x link efficiency 0.8 = 40 GB/s (the NVLinks inside either node are faster); of
    the 6 steps 4 stay inside a node (NVLink's Simple hop, 11.22 us), 2 cross the link (12 us) (_split_ring_s):
    1.5 x 536,870,912 B / 40 GB/s = 20.1327 ms + 1.4 x (8.4 + 68.88) us = 20.2409 ms (NCCL's ring
    Simple; its tree, 2 / 0.92 x the bytes, is slower at this size).
    The same group inside the A100 node (span 4 x 2 = 8 GPUs) is priced on NVLink: 300 GB/s x 0.8, 11.22 us a hop."""
    model, hc = _mlp(), _a100_h100()
    h, n = 8192, 4
    nbytes = GRAD_BYTES_ON_WIRE * 8 * h * h / 2
    assert nbytes == 536_870_912
    eff = gpu_preset("a100").link_eff
    assert eff == gpu_preset("h100").link_eff == 0.8
    split = stage_rows(model, hc, _one_stage(0, 4, 2, pool2=1, dp2=2), framework="generic")[0]
    assert split["pool"] == "a" and split["pool2"] == "h" and split["dp2"] == 2
    expect = _split_ring_s(nbytes)
    assert expect == pytest.approx(0.0202408512, rel=1e-9)
    assert split["dp_comm_s"] == pytest.approx(expect, rel=1e-12)
    inside = stage_rows(model, hc, _one_stage(0, 4, 2), framework="generic")[0]
    # (one node: no x 1.4, Simple's 8.4 us base)
    want = 2 * (n - 1) / n * nbytes / (300e9 * eff) + 8.4e-6 + 2 * (n - 1) * 11.22e-6
    assert inside["dp_comm_s"] == pytest.approx(want, rel=1e-12)
    # overlap_dp off: the exchange is all exposed, on top of the pipeline and the optimizer
    m = evaluate(model, hc, _one_stage(0, 4, 2, pool2=1, dp2=2), framework="generic")
    assert m["dp_comm_s"][0] == pytest.approx(expect, rel=1e-12)
    # tp-outer (dp-inner): each pool's 2 replicas are adjacent ranks, still 2 per node: the same ring
    outer = stage_rows(model, hc, _one_stage(0, 4, 2, pool2=1, dp2=2, stage_order=[[1]]), framework="generic")[0]
    assert outer["dp_comm_s"] == pytest.approx(expect, rel=1e-12)


def test_split_stage_one_rank_per_node_crosses_at_one_nic():
    """dp 2 x tp 8: one replica (a whole node) on each pool, so the dp group has one rank per node:
    one channel a node, the crossing at one GPU's 25 GB/s x 0.8 = 20 GB/s, 2 steps both across the
    link (12 us; with one rank per node the tree's network hop, Simple's alike). 8 h^2 / 8 weights x 2 bytes =
    134,217,728 B: 2 x 1/2 x that / 20 GB/s = 6.7109 ms + 1.4 x (8.4 + 24) us = 45.36 us, ring Simple (NCCL's tree
    over 2 nodes, 2 / 0.92 of the bytes, is slower at this size, LL128 at 0.92 of the bandwidth too)."""
    model, hc = _mlp(), _a100_h100()
    nbytes = GRAD_BYTES_ON_WIRE * 8 * 8192 * 8192 / 8
    split = stage_rows(model, hc, _one_stage(0, 2, 8, pool2=1, dp2=1), framework="generic")[0]
    expect = _split_ring_s(nbytes, n=2, per_node=1, nodes=2)
    assert expect == pytest.approx(134_217_728 / 20e9 + 1.4 * 32.4e-6, rel=1e-12)
    assert split["dp_comm_s"] == pytest.approx(expect, rel=1e-12)


def test_split_stage_reduces_in_the_frameworks_dtype():
    """The hand-worked split all-reduce above under megatron-core, whose bf16 rows all-reduce fp32 gradients (4
    bytes an element) and fp16 rows fp16 ones (2); one block, a row of each, so each row reads its own precision."""
    model, hc = _mlp(), _a100_h100()
    params = 8 * 8192 * 8192 / 2
    table = StrategyTable.from_columns(stage_pool=[[0], [0]], stage_dp=[[4], [4]], stage_tp=[[2], [2]],
                                       stage_layers=[[8], [8]], stage_pool2=[[1], [1]], stage_dp2=[[2], [2]],
                                       microbatches=4, global_batch=64, overlap_dp=False, precision=["bf16", "fp16"])
    got = evaluate(model, hc, table, framework="megatron-core")["dp_comm_s"]
    np.testing.assert_allclose(got, [_split_ring_s(4 * params), _split_ring_s(2 * params)], rtol=1e-12)


def test_split_stage_runs_at_the_slower_pools_replica():
    """Every replica holds the same micro-batch share (64 / (4 x 4) = 4 sequences), so the split
    stage's forward/backward per micro-batch is the A100 replica's (the H100's is shorter),
    whichever pool is named first; its GPUs count against each pool."""
    model, hc = _mlp(), _a100_h100()
    on_a = stage_rows(model, hc, _one_stage(0, 4, 2))[0]
    on_h = stage_rows(model, hc, _one_stage(1, 4, 2))[0]
    assert on_h["forward_s"] < 0.8 * on_a["forward_s"]
    for pool, pool2 in ((0, 1), (1, 0)):
        st = stage_rows(model, hc, _one_stage(pool, 4, 2, pool2=pool2, dp2=2))[0]
        assert st["micro_batch"] == on_a["micro_batch"] == 4.0
        for k in ("forward_s", "backward_s", "weight_grad_s", "time_s"):
            assert st[k] == on_a[k], (pool, k)
    # dp 8 x tp 2 = 16 GPUs: 6 + 2 replicas put 12 GPUs on an 8-GPU node; 4 + 4 fit
    over = evaluate(model, hc, _one_stage(0, 8, 2, pool2=1, dp2=2))
    fits = evaluate(model, hc, _one_stage(0, 8, 2, pool2=1, dp2=4))
    assert REASONS[over["reason"][0]] == "gpus_exceed_cluster" and fits["feasible"][0]
    with pytest.raises(InputError) as e:
        _one_stage(0, 4, 2, pool2=1, dp2=4)  # every replica on the second pool is not a split
    assert e.value.argument == "stage_dp2"



def test_split_stage_slower_pool_decided_stage_by_stage():
    """A GPU with an H100's FLOP/s and 10% of an A100's HBM bandwidth: its matrix products are
    faster than the A100's, its memory-bound work (the head's loss over 128k logits) slower, so
    which replica of a split last stage is slower depends on how many layers the stage holds.
    The split stage's forward, backward and weight-gradient times are, stage by stage, those of
    whichever pool alone takes longer."""
    model, L = model_preset("llama3-8b"), model_preset("llama3-8b").layers
    slow_hbm = dataclasses.replace(gpu_preset("h100"), name="slow-hbm", hbm_Bps=0.1 * gpu_preset("a100").hbm_Bps)
    hc = make_hetero([make_pool("a", "a100", nodes=1), make_pool("x", slow_hbm, nodes=1)])
    k = np.arange(1, L)

    def last_stage(pool, pool2, dp2):  # stage 0 on the A100s, the last stage (k layers) on pool / pool2
        n = len(k)
        t = StrategyTable.from_columns(
            stage_pool=np.tile([0, pool], (n, 1)), stage_dp=np.full((n, 2), 2), stage_tp=np.ones((n, 2), int),
            stage_pool2=np.tile([0, pool2], (n, 1)), stage_dp2=np.tile([0, dp2], (n, 1)),
            stage_layers=np.stack([L - k, k], 1), pp=2, microbatches=8, global_batch=64, recompute="none")
        sb = stage_breakdown(model, hc, t, "megatron-core")  # fused attention: a layer's work mostly matrix products
        return {x: sb[x][:, 1] for x in ("forward_s", "backward_s", "weight_grad_s", "time_s")}

    on_a, on_x, split = last_stage(0, 0, 0), last_stage(1, 1, 0), last_stage(0, 1, 1)
    x_slower = on_x["time_s"] > on_a["time_s"]
    assert 0 < x_slower.sum() < len(k)  # the slower pool changes with the stage's layers
    for part in on_a:
        np.testing.assert_array_equal(split[part], np.where(x_slower, on_x[part], on_a[part]), err_msg=part)


def test_replicas_on_their_own_pool_are_no_split():
    """dp2 replicas "on a second pool" that is the stage's own pool split nothing: 20,000 such rows
    (more than a block, so priced in blocks of placements with dp2 set) price as the same rows
    without dp2, every metric equal."""
    model, hc, n = model_preset("gpt3-175b"), hetero_preset("a100x64+h100x64"), 20000
    kw = dict(stage_pool=np.tile([0, 1, 1, 0], (n, 1)), stage_dp=np.full((n, 4), 4), stage_tp=np.full((n, 4), 8),
              stage_layers=np.full((n, 4), 24), pp=4, microbatches=16, recompute="full", zero_stage=1,
              global_batch=np.where(np.arange(n) % 2, 1536, 768), sequence_parallel=True)
    same = evaluate(model, hc, StrategyTable.from_columns(stage_pool2=kw["stage_pool"], stage_dp2=np.full((n, 4), 2),
                                                          **kw))
    plain = evaluate(model, hc, StrategyTable.from_columns(**kw))
    assert plain["feasible"].any()
    for k in plain:
        np.testing.assert_array_equal(same[k], plain[k], err_msg=k)

def test_split_over_two_identical_nodes_equals_one_two_node_cluster(monkeypatch):
    """Two pools of one 8-GPU A100 node joined by the A100's own network (25 GB/s, 10 us): a
    stage whose dp replicas are split half and half is the homogeneous 16-GPU cluster's stage,
    its dp group crossing the nodes, so every metric is the homogeneous one (ZeRO 0/1/3, both
    rank orders, every tp). Tp-inner, the exchange itself is the same ring (8 / tp ranks a node,
    the crossing at 8 / tp NICs); tp-outer with tp > 1 the homogeneous dp group sits in one node
    (dp-inner) where the split's must cross, so only the rows' metrics (exchange hidden or row
    refused) are compared there. (A hidden exchange slows the computation beside it by its kernels' share of the SMs
    times its length, which differs there by construction: that slowdown, test_comm_interference's, is left out.)"""
    monkeypatch.setattr(costmodel._block, "dp_sm_share", lambda rows: 0.0)
    model = model_preset("megatron-22b")
    hc = make_hetero([make_pool("x", "a100", nodes=1), make_pool("y", "a100", nodes=1)])
    cl = make_cluster("a100", 16)
    rows = np.array([(tp, 16 // tp, o, z) for tp in (1, 2, 4, 8) for o in (0, 1) for z in (0, 1, 3)])
    n = len(rows)
    kw = dict(stage_layers=np.full((n, 1), 48), microbatches=8, global_batch=256, zero_stage=rows[:, 3],
              recompute="full", sequence_parallel=True, stage_pool=np.zeros((n, 1), int), stage_dp=rows[:, 1:2],
              stage_tp=rows[:, :1], stage_order=rows[:, 2:3])
    split = evaluate(model, hc, StrategyTable.from_columns(stage_pool2=np.ones((n, 1), int),
                                                          stage_dp2=rows[:, 1:2] // 2,
                                                                **kw))
    homo = evaluate(model, cl, StrategyTable.from_columns(**kw))
    assert homo["feasible"].sum() >= 8
    for k in homo:
        a, b = np.asarray(split[k]), np.asarray(homo[k])
        assert ((a == b) | np.isclose(a, b, rtol=1e-12, atol=0)).all(), k
    inner = np.flatnonzero((rows[:, 2] == 0) | (rows[:, 0] == 1))
    exch = [[stage_rows(model, c, StrategyTable.from_columns(**w).take(np.array([i])))[0]["dp_comm_s"]
             for c, w in ((hc, dict(kw, stage_pool2=np.ones((n, 1), int), stage_dp2=rows[:, 1:2] // 2)), (cl, kw))]
            for i in inner]
    np.testing.assert_allclose(*np.array(exch).T, rtol=1e-12)


def _plans(model, hc):
    """Plans on two 8-GPU pools, tp 1-8: (i) one stage on pool 0 (dp 8 / tp); (ii) one stage
    over both pools, dp 16 / tp split half and half; (iii) two stages, one per pool."""
    rows = []
    for tp in (1, 2, 4, 8):
        d = 8 // tp
        rows += [("one pool", 1, [0, 0], [d, 1], [tp, 1], [0, 0], [0, 0]),
                 ("split", 1, [0, 0], [2 * d, 1], [tp, 1], [1, 0], [d, 0]),
                 ("two stages", 2, [0, 1], [d, d], [tp, tp], [0, 0], [0, 0])]
    kind = [r[0] for r in rows]
    pp = np.array([r[1] for r in rows])
    layers = np.where(pp[:, None] == 1, [model.layers, 0], model.layers // 2)
    t = StrategyTable.from_columns(stage_pool=[r[2] for r in rows], stage_dp=[r[3] for r in rows], stage_tp=[r[4] for r in rows],
                                 stage_pool2=[r[5] for r in rows], stage_dp2=[r[6] for r in rows], stage_layers=layers, pp=pp,
                                 microbatches=16, global_batch=256, zero_stage=1, recompute="full",
                                 sequence_parallel=True)
    m = evaluate(model, hc, t, pipeline="simulate")
    assert m["feasible"].sum() >= 6
    return kind, m


def test_fast_inter_pool_link_makes_the_split_worthwhile_slow_link_not():
    """Llama-3 8B on two 8-GPU H100 nodes in separate pools. With a 50 GB/s link between them
    (the H100's own 400 Gb/s NIC) the best plan splits one stage over both pools: 16 replicas,
    no pipeline bubble, the gradient ring on the link, hidden behind the last backward. At
    0.5 GB/s (a 4 Gb/s WAN per GPU) the ring moves 2 x 15/16 x 2 bytes x 8e9 / tp parameters at
    0.4 GB/s, about 75 s / tp, and the best plan keeps every data-parallel group inside a pool
    (two stages, one per pool, passing only activations over the link)."""
    model = model_preset("llama3-8b")
    for link_GBps, want in ((50, "split"), (0.5, "two stages")):
        hc = make_hetero([make_pool("p", "h100", nodes=1), make_pool("q", "h100", nodes=1)],
                         {("p", "q"): (link_GBps * 1e9, 10e-6)})
        kind, m = _plans(model, hc)
        assert kind[int(np.argmin(m["step_time_s"]))] == want, link_GBps


def test_space_split_dims_moves_and_validity():
    """Asked for (dp2), the placement space on two pools has pool2.J / dp2.J per stage (none on one pool); a
    "split" move changes one of them by one step; dp2 >= dp is invalid; split rows evaluate."""
    model = model_preset("gpt3-175b")
    hc = make_hetero([make_pool("a100", "a100", nodes=8), make_pool("h100", "h100", nodes=8)])
    space = HeteroSpace.from_options(model, hc, global_batch=1536, pp=(4, 8), microbatches=(64, 128),
                                     recompute=("full",), zero_stage=(1,), dp2=None)
    assert space.has_split and space.dims[space._col("dp2.0")].choices == (0, 1, 2, 4, 8, 16)
    one = HeteroSpace.from_options(model, make_hetero([make_pool("a", "a100", nodes=8)]), global_batch=1536,
                                   pp=(4,), dp2=(0, 1, 2))
    default = HeteroSpace.from_options(model, hc, global_batch=1536, pp=(4,))  # splits are opt-in
    for s in (one, default):
        assert not s.has_split and not any(d.base in ("pool2", "dp2") for d in s.dims)
    start = np.stack(list(space.start_points().values()))
    rng = np.random.default_rng(1)
    many = np.repeat(start, 400, axis=0)
    prop = proposer(space)(many, rng)
    split_cols = np.array([d.base in ("pool2", "dp2") for d in space.dims])
    touched = ((prop != many) & split_cols[None, :]).any(axis=1)
    assert touched.mean() > 0.05  # about SPLIT_MOVE_SHARE = 1/10 of the moves
    assert ((prop != many)[touched].sum(axis=1) == 1).all()
    dp2_cols = [space._col(f"dp2.{j}") for j in range(space.num_slots)]
    assert (np.abs(prop[touched][:, dp2_cols] - many[touched][:, dp2_cols]) <= 1).all()
    # a stage of dp 2 putting 2 replicas on its second pool is not a strategy
    bad = start[:1].copy()
    bad[0, space._col("dp.0")] = space.dims[space._col("dp.0")].choices.index(2)
    bad[0, space._col("dp2.0")] = space.dims[space._col("dp2.0")].choices.index(2)
    assert not space.valid(bad)[0]
    # one of its 2 replicas on the H100s (stage 3 there down to dp 2 to make room): valid
    ok = bad.copy()
    ok[0, space._col("dp2.0")] = space.dims[space._col("dp2.0")].choices.index(1)
    ok[0, space._col("pool2.0")] = 1 - ok[0, space._col("pool.0")]
    ok[0, space._col("dp.3")] = space.dims[space._col("dp.3")].choices.index(2)
    t = space.table(ok)
    assert space.valid(ok)[0]
    assert t["dp2"][0, 0] == 1 and t["pool2"][0, 0] != t["pool"][0, 0]
    assert REASONS[evaluate(model, hc, t)["reason"][0]] in ("ok", "out_of_memory")


def test_strategy_file_with_a_split_stage():
    names = ["a", "h"]
    t = strategy_from_file({"global_batch": 64, "microbatches": 4,
                            "stages": [{"pool": "a", "dp": 4, "tp": 2, "layers": 8, "pool2": "h", "dp2": 2}]}, names)
    assert t.row(0, names)["stages"][0] == {"pool": "a", "dp": 4, "tp": 2, "layers": 8, "order": "tp-inner",
                                           "pool2": "h", "dp2": 2}
    for stage, field in (({"pool": "a", "dp": 4, "layers": 8, "pool2": "h", "dp2": 4}, "dp2"),
                         ({"pool": "a", "dp": 4, "layers": 8, "dp2": 1}, ""),
                         ({"pool": "a", "dp": 4, "layers": 8, "pool2": "z", "dp2": 1}, "pool2")):
        with pytest.raises(InputError) as e:
            strategy_from_file({"global_batch": 64, "microbatches": 4, "stages": [stage]}, names)
        assert e.value.argument == "--strategy stages[0]" + (f".{field}" if field else "")


def test_space_interleaving_vpp():
    """With --vpp 1,2 and the interleaved schedule the placement space holds a vpp dimension:
    interleaved rows are valid only with vpp 2 and every stage's layers even, 1F1B only with vpp
    1; the interleaved fill is the 1F1B fill over vpp (Narayanan et al. 2021, eq. for the
    interleaved bubble: (p - 1) / v of the stage time), here per-stage: (sum X - max X) / v."""
    model = model_preset("gpt3-175b")
    hc = make_hetero([make_pool("a100", "a100", nodes=8), make_pool("h100", "h100", nodes=8)])
    space = HeteroSpace.from_options(model, hc, global_batch=1536, pp=(4, 8), microbatches=(64, 128),
                                     recompute=("full",), zero_stage=(1,), schedule=("1f1b", "interleaved"),
                                     vpp=(1, 2), framework="generic")  # (Megatron-Core splits odd layer counts)
    assert space.dims[space._col("vpp")].choices == (1, 2)
    d = space.random_digits(np.random.default_rng(0), 400)
    t = space.table(d)
    inter = t["schedule"] == t["schedule"].max()
    assert inter.any() and (~inter).any()
    assert (t["vpp"][inter] == 2).all() and (t["vpp"][~inter] == 1).all()
    assert (t["layers"][inter] % 2 == 0).all()
    # the same placements under both schedules: the fill halves
    rows = np.flatnonzero(inter)[:20]
    sub = t.take(rows)
    one = StrategyTable.from_columns(stage_pool=sub["pool"], stage_dp=sub["dp"], stage_tp=sub["tp"], stage_layers=sub["layers"],
                                   stage_order=sub["order"], stage_pool2=sub["pool2"], stage_dp2=sub["dp2"], pp=sub["pp"],
                                   microbatches=sub["microbatches"], global_batch=1536, recompute="full",
                                   zero_stage=1, sequence_parallel=True, schedule="1f1b", vpp=1)
    a, b = evaluate(model, hc, sub), evaluate(model, hc, one, framework="generic")  # (sub: the space's generic rows)
    assert np.allclose(a["bubble_s"], b["bubble_s"] / 2, rtol=1e-12)
    plain = HeteroSpace.from_options(model, hc, global_batch=1536, pp=(4,))
    assert all(dim.name != "vpp" for dim in plain.dims)


@pytest.mark.parametrize("framework, chunk", [("generic", 3), ("megatron-core", 1)])
def test_boundary_moves_follow_the_frameworks_chunk_rule(framework, chunk):
    """A boundary move on an interleaved row steps to the next whole chunk where the framework wants equal chunks
    (generic: every stage a multiple of vpp = 3 layers; costmodel._feasibility) and one layer where it splits them
    unevenly (Megatron-Core): 96 layers over 4 stages start at 24 each, so a generic move gives two stages 21 and 27
    layers (a change of 3 each), a Megatron-Core move 23 and 25 (1 each)."""
    model = model_preset("gpt3-175b")
    hc = make_hetero([make_pool("a100", "a100", nodes=8), make_pool("h100", "h100", nodes=8)])
    space = HeteroSpace.from_options(model, hc, global_batch=1536, pp=(4,), microbatches=(64,), recompute=("full",),
                                     zero_stage=(1,), schedule=("interleaved",), vpp=(3,), framework=framework)
    start = space.random_digits(np.random.default_rng(0), 50)
    shift = np.array([d.base == "stage_shift" for d in space.dims])
    start[:, shift] = space.dims[int(np.flatnonzero(shift)[0])].choices.index(0)  # uniform stages, 24 layers each
    assert space.valid(start).all()
    many = np.repeat(start, 40, axis=0)
    prop = proposer(space)(many, np.random.default_rng(1))
    moved = ((prop != many) & shift[None, :]).any(axis=1)
    assert moved.sum() > 100
    before, after = space.table(many[moved])["layers"], space.table(prop[moved])["layers"]
    change = np.abs(after - before)
    assert (np.sort(change, axis=1)[:, -2:] == chunk).all() and (change.sum(axis=1) == 2 * chunk).all()
    assert space.valid(prop[moved]).all()


def test_boundary_step_snaps_to_the_next_chunk():
    """From a cut that is not a whole chunk: 96 layers over 5 stages cut first at round(19.2) = 19; with 3-layer
    chunks one step up reaches 21 (a shift of +2) and one down 18 (-1); with shift_layers 2 a step down goes at least
    to 18, that is to 17 (-1 shift of 2 layers)."""
    from search._placement_moves import boundary_step

    model = model_preset("gpt3-175b")
    hc = make_hetero([make_pool("a100", "a100", nodes=8), make_pool("h100", "h100", nodes=8)])
    for sl, up_shift, down_shift in ((1, 2, -1), (2, 1, -1)):
        space = HeteroSpace.from_options(model, hc, global_batch=1536, pp=(5,), shift_layers=sl)
        zero = space.dims[space._col("stage_shift.0")].choices.index(0)
        got = boundary_step(space, np.array([zero, zero]), np.array([0, 0]), np.array([5, 5]), np.array([3, 3]),
                            np.array([True, False]))
        assert list(got - zero) == [up_shift, down_shift]
