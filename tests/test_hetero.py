"""Heterogeneous clusters: single-pool equivalence, hand-worked placements, files, the space."""

import dataclasses
import itertools
import json

import numpy as np
import pytest

from costmodel import (
    REASONS,
    InputError,
    StrategyTable,
    Transformer,
    cluster_preset,
    evaluate,
    gpu_preset,
    hetero_from_mapping,
    hetero_preset,
    hetero_to_mapping,
    make_hetero,
    make_pool,
    model_preset,
    simulate,
    stage_rows,
)
from costmodel._strategy import hetero_from_mapping as strategy_from_file
from search._hetero_space import HeteroSpace
from search._moves import proposer
from tests.test_reference import random_table

CASES = [("gpt3-175b", "h100x1024"), ("llama3-70b", "dgx-a100-1024"), ("seed000-mlp", "seed000-16"),
         ("megatron-22b", "h100x64")]


def _assert_same(a, b, what):
    for k in a:
        x, y = np.asarray(a[k]), np.asarray(b[k])
        if x.dtype.kind == "f":
            same = (x == y) | np.isclose(x, y, rtol=1e-9, atol=0.0)
        else:
            same = x == y
        assert same.all(), (what, k, int((~same).sum()), x[~same][:3], y[~same][:3])


@pytest.mark.parametrize("name,cluster", CASES)
@pytest.mark.parametrize("uneven", [False, True])
def test_single_pool_equals_homogeneous(name, cluster, uneven):
    """Must-hold 1: a homogeneous cluster as one pool gives the homogeneous numbers row by row."""
    model, cl = model_preset(name), cluster_preset(cluster)
    table = random_table(model, np.random.default_rng(11 + len(name) + uneven), 900, uneven)
    # micro-batch counts are an integer column with placements: keep rows where B / (dp b) is one
    table = table.take(np.flatnonzero(table["global_batch"] % (table["dp"] * table["micro_batch"]) == 0))
    het = table.as_placements(model.layers)
    modes = ("closed_form", "simulate") if name == "megatron-22b" else ("closed_form",)
    for mode in modes:
        _assert_same(evaluate(model, cl, table, pipeline=mode), evaluate(model, cl, het, pipeline=mode),
                     (name, uneven, mode))


# MoE rows: mixtral (every layer MoE), qwen3 (its own head size), DeepSeek-V3 shortened
# to 17 layers (3 dense, 14 MoE: stages of unlike layer kinds), the tiny model of test_moe_pricing
# (MoE every second layer, a shared expert, capacity factor), under several framework profiles.
MOE_CASES = [("mixtral-8x7b", "h100x64", False, None), ("mixtral-8x7b", "h100x1024", True, "megatron-core"),
             ("qwen3-30b-a3b", "h100x64", True, "megatron-core-deepep"),
             ("deepseek-v3-17", "h100x1024", True, "megatron-core-deepep-a2a-overlap"),
             ("deepseek-v3-17", "h100x1024", False, "hai-llm"),  # node-limited routing, fp8 dispatch
             ("tiny", "dgx-a100-1024", False, "fsdp2"), ("tiny", "h100x64", True, "megatron-core")]


def _moe_model(name):
    from tests.test_moe_pricing import TINY

    if name == "deepseek-v3-17":
        return dataclasses.replace(model_preset("deepseek-v3"), name=name, layers=17)
    return TINY if name == "tiny" else model_preset(name)


@pytest.mark.parametrize("name,cluster,uneven,framework", MOE_CASES)
def test_single_pool_moe_equals_homogeneous(name, cluster, uneven, framework):
    """Must-hold 1 for MoE rows: random rows with ep and etp on one pool give the homogeneous
    numbers row by row (every metric, feasible or not), and price all-to-alls somewhere."""
    from tests.test_moe_pricing import with_ep

    model, cl = _moe_model(name), cluster_preset(cluster)
    rng = np.random.default_rng(23 + len(name) + uneven)
    table = with_ep(random_table(model, rng, 700, uneven), rng, model.experts)
    table = table.take(np.flatnonzero(table["global_batch"] % (table["dp"] * table["micro_batch"]) == 0))
    het = table.as_placements(model.layers)
    modes = ("closed_form", "simulate") if name == "tiny" else ("closed_form",)
    for mode in modes:
        ref = evaluate(model, cl, table, pipeline=mode, framework=framework)
        _assert_same(ref, evaluate(model, cl, het, pipeline=mode, framework=framework),
                     (name, uneven, mode))
        assert ref["feasible"].any() or name == "deepseek-v3-17"
        assert np.any(ref["reason"] == REASONS.index("ep_invalid"))


def test_moe_on_two_pools_prices_experts_per_stage():
    """A MoE placement over a100x64+h100x64: ep and etp are row columns checked per stage (ep x
    etp must divide each stage's tp x cp x dp), all-to-alls on each stage's pool, a split stage
    refused as ep_invalid, a dense model ep = 1 only."""
    model, hc = model_preset("mixtral-8x7b"), hetero_preset("a100x64+h100x64")

    def rows(**kw):
        cols = dict(stage_pool=[[0, 1]], stage_dp=[[8, 8]], stage_tp=[[8, 8]], stage_layers=[[12, 20]], microbatches=16, global_batch=256,
                    zero_stage=1, recompute="full", sequence_parallel=True)
        cols.update(kw)
        return StrategyTable.from_columns(**cols)

    out = evaluate(model, hc, StrategyTable.concat([rows(ep=1), rows(ep=8), rows(ep=8, etp=2)]),
                          framework="megatron-core")
    assert [REASONS[r] for r in out["reason"]] == ["out_of_memory", "ok", "ok"]  # every expert on every GPU
    assert out["ep_comm_s"][0] == 0.0 and np.all(out["ep_comm_s"][1:] > 0)
    # experts split 8 ways: less expert state per GPU than ep = 1
    assert out["mem_weights_bytes"][1] < out["mem_weights_bytes"][0]
    bad = [rows(ep=8, stage_dp=[[8, 4]], stage_tp=[[8, 1]], global_batch=[64]),  # 8 does not divide stage 1's 4 ranks
           rows(ep=3),  # 3 does not divide the 8 experts
           rows(ep=8, stage_dp=[[4, 8]], stage_pool2=[[0, 0]], stage_dp2=[[0, 2]])]  # stage 1 split over both pools
    got = evaluate(model, hc, StrategyTable.concat(bad), framework="megatron-core")
    assert [REASONS[r] for r in got["reason"]] == ["ep_invalid"] * 3
    dense = evaluate(model_preset("llama3-8b"), hc, StrategyTable.concat([rows(ep=1, stage_layers=[[12, 20]]),
                                                                             rows(ep=2, stage_layers=[[12, 20]])]))
    assert REASONS[dense["reason"][1]] == "ep_invalid" and REASONS[dense["reason"][0]] != "ep_invalid"
    rows_out = stage_rows(model, hc, rows(ep=8), framework="megatron-core")
    assert [r["pool"] for r in rows_out] == ["a100", "h100"] and rows_out[0]["mem_bytes"] > 0


def test_simulator_per_link_handoffs():
    """GPipe, 3 devices, 1 micro-batch: the forward crosses links 0 and 1, the backward comes
    back over 1 and 0, so total = F0+F1+F2 + B2+B1+B0 + 2 (tc0 + tc1); equal links give the
    scalar result."""
    tf, tb, tc = [1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [0.5, 0.25, 9.0]
    res = simulate("gpipe", 3, 1, tf=tf, tb=tb, tc=np.array([tc]))
    assert res.total_time[0] == pytest.approx(sum(tf) + sum(tb) + 2 * (0.5 + 0.25))
    same = simulate("1f1b", 4, 8, tf=[1, 2, 1, 3], tb=[2, 2, 2, 2], tc=np.full((1, 4), 0.7))
    scal = simulate("1f1b", 4, 8, tf=[1, 2, 1, 3], tb=[2, 2, 2, 2], tc=0.7)
    assert same.total_time[0] == scal.total_time[0]


def _double_speed(gpu):
    return dataclasses.replace(gpu, name=gpu.name + "-x2", peak_flops=tuple(2 * x for x in gpu.peak_flops),
                               hbm_Bps=2 * gpu.hbm_Bps, kernel_overhead_s=gpu.kernel_overhead_s / 2)


def test_twice_as_fast_pool_gets_twice_the_layers():
    """Must-hold 2a. Two pools of 8 GPUs, one GPU type twice as fast in everything it computes
    (peak FLOP/s, HBM B/s, launch overhead): every per-layer time halves. 48 MLP layers (no
    embedding or head), pp=2 (slow stage then fast stage), dp=8 each, 64 micro-batches: the
    pipeline is m * max(n_slow x, n_fast x / 2) + fill, least when n_slow x = n_fast x / 2,
    i.e. n_slow = 16, n_fast = 32: twice the layers per GPU on the fast pool."""
    slow = gpu_preset("a100")
    hc = make_hetero([make_pool("slow", slow, nodes=1), make_pool("fast", _double_speed(slow), nodes=1)])
    model = Transformer(name="mlp48", layers=48, hidden=8192, kind="mlp", activation="relu", norm="none",
                        bias=False)
    n0 = np.arange(1, 48)
    t = StrategyTable.from_columns(stage_pool=[[0, 1]] * len(n0), stage_dp=[[8, 8]] * len(n0), stage_tp=[[1, 1]] * len(n0),
                                 stage_layers=np.stack([n0, 48 - n0], 1), microbatches=64, global_batch=8192,
                                 zero_stage=1)
    for mode in ("closed_form", "simulate"):
        m = evaluate(model, hc, t, pipeline=mode)
        assert m["feasible"].all()
        best = int(np.argmin(m["step_time_s"]))
        assert (n0[best], 48 - n0[best]) == (16, 32), mode


def _grid(model, hc, S=8):
    rows = [(pp, tp, order, m, rc, 64 // (tp * pp))
            for pp, tp, order, m, rc in itertools.product((1, 2, 4, 8), (1, 2, 4, 8), (0, 1), (16, 32, 64), (0, 1, 2))
            if tp * pp <= 64 and model.layers % pp == 0]
    a = np.array(rows)
    act = np.arange(S)[None, :] < a[:, :1]
    t = StrategyTable.from_columns(
        stage_pool=np.zeros((len(a), S), int), stage_dp=np.where(act, a[:, 5:6], 1), stage_tp=np.where(act, a[:, 1:2], 1),
        stage_order=np.where(act, a[:, 2:3], 0), stage_layers=np.where(act, (model.layers // a[:, 0])[:, None], 0),
        pp=a[:, 0], microbatches=a[:, 3], recompute=a[:, 4], global_batch=1536, zero_stage=1,
        sequence_parallel=True)
    return a, evaluate(model, hc, t)


def test_fast_network_puts_tensor_parallelism_across_nodes():
    """Must-hold 2b. 8 PCIe nodes (12 GB/s inside a node) on a 400 Gb/s network (50 GB/s per
    GPU): the best Megatron-22B plan on 64 GPUs uses tp > 1 strided across nodes (one tp rank
    per node, on the network); on NVLink nodes (300 GB/s) with the same network the best plan
    keeps tp inside the node. Columns of a: pp, tp, order, m, recompute, dp."""
    model = model_preset("megatron-22b")
    a, m = _grid(model, hetero_preset("pcie-a100x64-fastnet"))
    best = a[int(np.argmin(m["step_time_s"]))]
    assert best[1] > 1 and best[2] == 1 and best[5] % 8 == 0
    # tensor parallelism inside the PCIe node is slower by far (without tp at all, pp 8 is within 2%)
    inner = np.min(np.where((a[:, 2] == 0) & (a[:, 1] > 1), m["step_time_s"], np.inf))
    assert m["step_time_s"].min() < 0.95 * inner
    a2, m2 = _grid(model, make_hetero([make_pool("nv", "a100", nodes=8, inter_GBps=50)]))
    best2 = a2[int(np.argmin(m2["step_time_s"]))]
    assert best2[1] == 1 or best2[2] == 0


def test_tp_across_nodes_priced_on_the_network_by_hand():
    """MLP, pp=1, tp=2, dp=32 on the PCIe preset: each layer pair does one all-reduce of
    T h 2 bytes forward (Megatron's pairs) and one backward; per micro-batch and layer
    0.5 x 2 x ring all-reduce = 2 (n-1)/n bytes / (bw x link_eff) + 2 (n-1) lat with n = 2.
    tp-inner: the PCIe link (12 GB/s, 15 us); tp-across (dp innermost, stride 32 = 4 nodes):
    the network (50 GB/s, 10 us)."""
    model = Transformer(name="mlp", layers=8, hidden=8192, kind="mlp", activation="relu", norm="none", bias=False)
    hc = hetero_preset("pcie-a100x64-fastnet")
    t = StrategyTable.from_columns(stage_pool=[[0]] * 2, stage_dp=[[32]] * 2, stage_tp=[[2]] * 2, stage_layers=[[8]] * 2, stage_order=[[0], [1]],
                                 microbatches=4, global_batch=4096)
    m = evaluate(model, hc, t)
    T, h, L, mb = 4096 / (32 * 4), 8192, 8, 4
    eff = gpu_preset("a100").link_eff
    for i, (bw, lat) in enumerate([(12e9, 15e-6), (50e9, 10e-6)]):
        ar = 2 * 0.5 * 2 * T * h / (bw * eff) + 2 * lat
        # forward 0.5 ar per layer, backward the same: tp_comm = m * L * 2 * 0.5 * ar
        assert m["tp_comm_s"][i] == pytest.approx(mb * L * ar, rel=1e-12)


def test_unequal_dp_resharding_handoff_by_hand():
    """Stage 0: 8 H100 as dp=4 x tp=2; stage 1: 8 A100 as dp=2 x tp=4, in another pool. With
    m = 8 and B = 64: b0 = 64 / (4 x 8) = 2, b1 = 4 sequences; each stage-0 GPU sends
    2 s h / 2 x 2 bytes, each stage-1 GPU receives 4 s h / 4 x 2 bytes: the same 2 s h bytes,
    over the inter-pool link (25 GB/s x 0.8, 12 us given in the file)."""
    hc = hetero_from_mapping({"pools": [{"name": "h", "gpu": "h100", "nodes": 1},
                                        {"name": "a", "gpu": "a100", "nodes": 1}],
                              "links": [{"between": ["h", "a"], "GBps": 25, "latency_us": 12}]})
    model = model_preset("megatron-22b")
    t = strategy_from_file({"global_batch": 64, "microbatches": 8, "recompute": "full", "zero_stage": 1,
                            "stages": [{"pool": "h", "dp": 4, "tp": 2, "layers": 24},
                                       {"pool": "a", "dp": 2, "tp": 4, "layers": 24}]}, ["h", "a"])
    rows = stage_rows(model, hc, t)
    assert [r["micro_batch"] for r in rows] == [2.0, 4.0]
    s, h = model.seq_len, model.hidden
    expect = 2 * 2 * s * h / 2 / (25e9 * 0.8) + 12e-6
    assert rows[0]["handoff_s"] == pytest.approx(expect, rel=1e-12)
    assert rows[0]["pool"] == "h" and rows[1]["gpu"].startswith("A100")


def test_cluster_file_round_trip_and_errors():
    hc = hetero_preset("h100x64-400g+a100x64-100g")
    again = hetero_from_mapping(json.loads(json.dumps(hetero_to_mapping(hc))))
    assert again == hc
    assert hc.link_Bps[0][1] == 12.5e9  # the older nodes' 100 Gb/s NICs bound the pools' link
    pcie = hetero_preset("pcie-a100x64-fastnet").pools[0]
    assert pcie.inter_Bps > pcie.intra_Bps
    bad = [({"pools": [{"gpu": "a100", "nodes": 0}]}, "cluster.pools[0].nodes"),
           ({"pools": [{"gpu": "a100", "nodes": 1, "inter_GBps": -1}]}, "cluster.pools[0].inter_GBps"),
           ({"pools": [{"gpu": "a100", "nodes": 1, "nics": 2}]}, "cluster.pools[0]"),
           ({"pools": [{"gpu": "a100", "nodes": 1}], "links": [{"between": ["a100", "x"], "GBps": 1}]},
            "cluster.links.between"),
           ({"pools": []}, "cluster.pools"),
           ({"pools": [{"gpu": "z100", "nodes": 1}]}, "gpu")]
    for data, field in bad:
        with pytest.raises(InputError) as e:
            hetero_from_mapping(data)
        assert e.value.argument == field, (data, e.value.argument)


def test_pools_joined_by_plus():
    """a100x32+h100x64: a pool per part, 4 and 8 DGX nodes, the A100 side's 200 Gb/s NICs (25 GB/s
    per GPU) bounding the link between them; the named preset is the same cluster; a bad part is
    one line naming --cluster, exit 2."""
    hc = hetero_preset("a100x32+h100x64")
    assert [(p.name, p.nodes, p.gpus_per_node) for p in hc.pools] == [("a100", 4, 8), ("h100", 8, 8)]
    assert hc.link_Bps[0][1] == 25e9
    assert [p.name for p in hetero_preset("h100x8+h100x16").pools] == ["h100", "h100-2"]
    assert hetero_to_mapping(hetero_preset("A100x64+h100x64")) == hetero_to_mapping(hetero_preset("a100x64+h100x64"))
    with pytest.raises(InputError) as e:
        hetero_preset("a100x32+z100x8")
    assert e.value.argument == "cluster" and e.value.got == "z100x8"
    out = _cli("rank", "--model", "gpt3-175b", "--cluster", "a100x32+z100x8")
    assert out.returncode == 2 and "--cluster" in out.stderr and "z100x8" in out.stderr


def test_pool_oversubscribed_and_memory_per_pool():
    """Two stages of 64 GPUs on a 64-GPU pool is refused; a stage that fits an H200's 141 GB
    but not an H100's 80 GB is out of memory only on the H100 pool."""
    hc = make_hetero([make_pool("h100", "h100", nodes=8), make_pool("h200", "h200", nodes=8)])
    model = model_preset("gpt3-175b")
    over = StrategyTable.from_columns(stage_pool=[[0, 0]], stage_dp=[[8, 8]], stage_tp=[[8, 8]], stage_layers=[[48, 48]], microbatches=24,
                                    global_batch=1536, zero_stage=1, recompute="full")
    assert REASONS[evaluate(model, hc, over)["reason"][0]] == "gpus_exceed_cluster"
    # 60 + 36 layers, dp 8 x tp 8 per stage, ZeRO-1: the 60-layer stage needs 80-141 GB
    t = StrategyTable.from_columns(stage_pool=[[1, 0], [0, 1]], stage_dp=[[8, 8]] * 2, stage_tp=[[8, 8]] * 2, stage_layers=[[60, 36]] * 2,
                                 microbatches=192, global_batch=1536, zero_stage=1, recompute="full")
    st = stage_rows(model, hc, t, 0)
    assert 80e9 < st[0]["mem_bytes"] < 141e9 and st[1]["mem_bytes"] < 80e9
    m = evaluate(model, hc, t)
    assert [REASONS[r] for r in m["reason"]] == ["ok", "out_of_memory"]
    assert m["mem_total_bytes"][1] == pytest.approx(st[0]["mem_bytes"])  # the stage over its HBM


def test_hetero_space_moves_and_start_points():
    model, hc = model_preset("gpt3-175b"), hetero_preset("a100x64+h100x64")
    space = HeteroSpace.from_options(model, hc, global_batch=1536, pp=(4, 8), microbatches=(32, 64, 128),
                                     recompute=("selective", "full"), zero_stage=(1,))
    starts = space.start_points()
    assert {"megatron", "speed_weighted"} <= set(starts)
    d = np.stack(list(starts.values()))
    assert space.valid(d).all()
    m = evaluate(model, hc, space.table(d))
    assert m["feasible"].all()
    # speed-weighted gives the H100 stages more layers than the A100 ones
    tw = space.table(starts["speed_weighted"][None])
    layers, pools = tw["layers"][0, : tw["pp"][0]], tw["pool"][0, : tw["pp"][0]]
    assert layers[pools == 1].mean() > 2 * layers[pools == 0].mean()
    rng = np.random.default_rng(0)
    many = np.repeat(d, 500, axis=0)
    prop = proposer(space)(many, rng)
    changed = (prop != many).sum(axis=1)
    assert changed.max() <= 2  # one move: one digit, or two for a swap or a tp/dp trade
    # boundary moves change two stages' layers by one each and keep the total
    t0, t1 = space.table(many), space.table(prop)
    diff = np.abs(t1["layers"] - t0["layers"]).sum(axis=1)
    shift = np.array([space.dims[k].name.startswith("stage_shift") for k in range(len(space.dims))])
    moved = ((prop != many) & shift[None, :]).any(axis=1) & space.valid(prop)
    assert moved.any() and (diff[moved] == 2).all()
    assert (t1["layers"].sum(axis=1)[space.valid(prop)] == model.layers).all()
    again = HeteroSpace.from_json(json.loads(json.dumps(space.to_json())), model, hc)
    assert again.dims == space.dims and (again.radices == space.radices).all()
    r = space.random_digits(rng, 50)
    assert r.shape == (50, len(space.dims)) and space.valid(r).all()


def _cli(*argv):
    """plansweep ``argv`` in this process, from the repository root (tests.in_process.cli)."""
    import contextlib
    from pathlib import Path

    from tests.in_process import cli

    with contextlib.chdir(Path(__file__).resolve().parents[1]):
        return cli(*argv)


def test_cli_evaluate_hetero_strategy(tmp_path):
    """`plansweep evaluate --cluster PRESET --strategy FILE` prints one row per stage with its
    pool, degrees and layers; a bad stage field is one line naming it, exit code 2."""
    strat = {"global_batch": 1536, "microbatches": 192, "recompute": "selective", "zero_stage": 1,
             "sequence_parallel": True,
             "stages": [{"pool": "a100", "dp": 4, "tp": 4, "layers": n} for n in (6, 7, 7, 7)]
             + [{"pool": "h100", "dp": 2, "tp": 8, "layers": n} for n in (17, 17, 18, 17)]}
    f = tmp_path / "s.json"
    f.write_text(json.dumps(strat))
    res = _cli("evaluate", "--cluster", "a100x64+h100x64", "--strategy", str(f), "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert [(s["pool"], s["dp"], s["tp"], s["layers"]) for s in out["stages"]] == [
        (s["pool"], s["dp"], s["tp"], s["layers"]) for s in strat["stages"]]
    assert out["metrics"]["feasible"]
    text = _cli("evaluate", "--cluster", "a100x64+h100x64", "--strategy", str(f))
    assert text.returncode == 0 and "h100" in text.stdout and "hand-off" in text.stdout
    strat["stages"][0]["pool"] = "v100"
    f.write_text(json.dumps(strat))
    bad = _cli("evaluate", "--cluster", "a100x64+h100x64", "--strategy", str(f))
    assert bad.returncode == 2
    assert f"--strategy {f} stages[0].pool: expected one of a100, h100, got 'v100'" in bad.stderr
    assert "Traceback" not in bad.stderr
    cl = tmp_path / "c.yaml"
    cl.write_text("pools:\n  - {name: a, gpu: a100, nodes: 0}\n")
    bad = _cli("evaluate", "--cluster", str(cl), "--strategy", str(f))
    assert bad.returncode == 2 and f"--cluster {cl} pools[0].nodes: expected an integer" in bad.stderr


def test_cli_evaluate_moe_on_mixed_cluster(tmp_path):
    """`plansweep evaluate --model mixtral-8x7b --cluster a100x64+h100x64 --strategy FILE --ep 8`
    prices the experts (ep comm in the report, ep in the strategy); an ep that does not fold into a
    stage is one line naming ep, exit code 2."""
    strat = {"global_batch": 256, "microbatches": 16, "recompute": "full", "zero_stage": 1, "sequence_parallel": True,
             "stages": [{"pool": "a100", "dp": 8, "tp": 8, "layers": 12}, {"pool": "h100", "dp": 8, "tp": 8, "layers": 20}]}
    f = tmp_path / "s.json"
    f.write_text(json.dumps(strat))
    args = ("evaluate", "--model", "mixtral-8x7b", "--cluster", "a100x64+h100x64", "--strategy", str(f),
            "--framework", "megatron-core")
    res = _cli(*args, "--ep", "8", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["strategy"]["ep"] == 8 and out["metrics"]["feasible"] and out["metrics"]["ep_comm_s"] > 0
    text = _cli(*args, "--ep", "8")
    assert text.returncode == 0 and "ep comm (exposed)" in text.stdout
    bad = _cli(*args, "--ep", "3")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "ep: expected" in bad.stderr


def test_placement_space_gets_ep_for_moe_models():
    """HeteroSpace: an MoE model's space has a global ep dimension (the divisors of its experts),
    a dense model's none; MoE stages are not split; start points and random draws price the
    experts (ep > 1 where ep = 1 does not fit)."""
    hc = hetero_preset("a100x64+h100x64")
    moe = HeteroSpace.from_options(model_preset("mixtral-8x7b"), hc, global_batch=1536, pp=(4, 8),
                                   framework="megatron-core")
    assert moe.dims[moe._col("ep")].choices == (1, 2, 4, 8)
    dense = HeteroSpace.from_options(model_preset("llama3-70b"), hc, global_batch=1536)
    assert "ep" not in {d.name for d in dense.dims}
    with pytest.raises(InputError):
        HeteroSpace.from_options(model_preset("mixtral-8x7b"), hc, global_batch=1536, dp2=(0, 2))
    with pytest.raises(InputError):
        HeteroSpace.from_options(model_preset("llama3-70b"), hc, global_batch=1536, ep=(1, 2))
    starts = moe.start_points()
    met = evaluate(moe.model, hc, moe.table(np.stack(list(starts.values()))), framework="megatron-core")
    assert met["feasible"].any()
    draws = moe.table(moe.random_digits(np.random.default_rng(0), 64))
    assert len(set(draws["ep"].tolist())) > 1


def test_tpe_samples_ep_with_the_stages():
    """ep is valid by the stages' degrees (stage_bound), so TPE samples it with the stages, not in
    its walk over the global dimensions (where the canonical stages, dp = tp = 1, allow ep = 1
    only): its trials price every expert degree, each folding into its stages."""
    from search import TPESearcher

    space = HeteroSpace.from_options(model_preset("mixtral-8x7b"), hetero_preset("a100x64+h100x64"),
                                     global_batch=1536, pp=(4, 8), framework="megatron-core")
    assert space.stage_bound == ("ep",)
    assert HeteroSpace.from_options(model_preset("llama3-70b"), space.cluster, global_batch=1536).stage_bound == ()
    tpe = TPESearcher(space, seed=0, budget=128)
    eps = set()
    for _ in range(2):
        table = tpe.ask(64)
        met = evaluate(space.model, space.cluster, table, framework="megatron-core")
        tpe.tell(table, met)
        eps |= set(table["ep"].tolist())
        assert not np.any(met["reason"] == REASONS.index("ep_invalid"))
    assert eps == {1, 2, 4, 8}


def test_cli_search_mcmc_on_hetero_cluster():
    res = _cli("search", "mcmc", "--cluster", "a100x64+h100x64", "--budget", "640", "--batch", "64", "--json",
               "--top", "1", "--pp", "4,8")
    assert res.returncode == 0, res.stderr
    best = json.loads(res.stdout)["best"][0]
    assert best["feasible"] and {s["pool"] for s in best["stages"]} <= {"a100", "h100"}
    assert sum(s["layers"] for s in best["stages"]) == 96


def test_uniform_rows_compressed_equal_every_stage():
    """Uniform rows are priced on 3 representative stages; pricing every stage (the same rows with
    their layers listed per stage) gives the same numbers, closed forms and simulator."""
    model, cluster = model_preset("gpt3-175b"), cluster_preset("h100x1024")
    rng = np.random.default_rng(3)
    n = 400
    p = rng.choice([4, 8, 16], n)
    cols = dict(dp=rng.choice([1, 2, 4], n), tp=rng.choice([4, 8], n), pp=p, micro_batch=rng.choice([1, 2], n),
                global_batch=1536, recompute=rng.integers(0, 3, n), schedule=rng.choice([1, 3, 4], n), zero_stage=1,
                sequence_parallel=True)
    layers = np.where(np.arange(16)[None, :] < p[:, None], (96 // p)[:, None], 0)
    for mode in ("closed_form", "simulate"):
        # generic: it runs every schedule drawn (1F1B, ZB-H1, ZB-H2; Megatron-Core has no zero-bubble schedule)
        a = evaluate(model, cluster, StrategyTable.from_columns(**cols), pipeline=mode, framework="generic")
        b = evaluate(model, cluster, StrategyTable.from_columns(stage_layers=layers, **cols), pipeline=mode,
                     framework="generic")
        assert a["feasible"].sum() > n // 4
        _assert_same(a, b, mode)


def test_cli_search_tpe_on_hetero_cluster_starts_from_named_placements():
    """TPE's first trials are the placement space's named start points (random placements are
    almost all infeasible), so even 16 evaluations find a feasible placement."""
    res = _cli("search", "tpe", "--cluster", "a100x64+h100x64", "--budget", "16", "--json", "--top", "1",
               "--pp", "4,8")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["feasible"] >= 1 and out["best"][0]["feasible"]


@pytest.mark.parametrize("pp", [4, 8])
def test_a_placement_of_stages_alike_lists_every_stage(pp):
    """pp alike stages on one pool are priced through three representatives (first, interior, last); the per-stage
    view (evaluate's and show's table) still lists pp stages: the interior ones equal, the first and last longer
    by the embedding and the head, the layers summing to the model's, each busy m x (F + B + W)."""
    from costmodel._evaluate import stage_rows

    model, cluster = model_preset("llama3-8b"), hetero_preset("a100x16+h100x16")
    plan = {"global_batch": 32, "microbatches": 8, "recompute": "full", "zero_stage": 1,
            "stages": [{"pool": "h100", "dp": 1, "tp": 2, "layers": 32 // pp}] * pp}
    rows = stage_rows(model, cluster, strategy_from_file(plan, [p.name for p in cluster.pools]))
    assert [r["stage"] for r in rows] == list(range(pp))
    assert {r["pool"] for r in rows} == {"h100"} and sum(r["layers"] for r in rows) == model.layers
    inner = [r["forward_s"] for r in rows[1:-1]]
    assert max(inner) == min(inner) and rows[0]["forward_s"] > inner[0] and rows[-1]["forward_s"] > inner[0]
    for r in rows:
        assert r["time_s"] == pytest.approx(8 * (r["forward_s"] + r["backward_s"] + r["weight_grad_s"]), rel=1e-12)


def test_the_worst_stage_is_the_one_closest_to_its_own_gpus_memory():
    """Llama 3 8B in two stages of 16 layers, dp 2 x tp 8 each, the first on H200 (143,771 MiB), the second on 40 GB
    A100 (40,960 MiB): 1F1B keeps two micro-batches in flight on the first stage and one on the second, so the first
    holds more bytes, yet the second is closer to its GPU's memory: mem_total_bytes is the A100 stage's and
    mem_device_bytes the A100's; with the pools swapped, the first stage's bytes on the A100."""
    hc, model = hetero_preset("a100-40gbx16+h200x16"), model_preset("llama3-8b")
    names = [p.name for p in hc.pools]
    for pools in (("h200", "a100-40gb"), ("a100-40gb", "h200")):
        plan = {"global_batch": 64, "microbatches": 32, "schedule": "1f1b", "recompute": "none", "zero_stage": 1,
                "stages": [{"pool": p, "dp": 2, "tp": 8, "layers": 16} for p in pools]}
        t = strategy_from_file(plan, names, "plan")
        m = evaluate(model, hc, t, framework="megatron-core")
        stages = stage_rows(model, hc, t, framework="megatron-core")
        assert stages[0]["mem_bytes"] > stages[1]["mem_bytes"]  # two micro-batches in flight against one
        assert [s["hbm_bytes"] for s in stages] == [{"h200": 143771, "a100-40gb": 40960}[p] * 2**20 for p in pools]
        on_a100 = pools.index("a100-40gb")
        assert m["mem_device_bytes"][0] == 40960 * 2**20
        assert m["mem_total_bytes"][0] == stages[on_a100]["mem_bytes"]
