"""Space (mixed-radix grid), GridSearcher and RandomSearcher."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from costmodel import InputError, Transformer, cluster_preset, evaluate, make_cluster, model_preset
from search import GridSearcher, RandomSearcher, Space, default_space, exact_space, partition_space
from search._moves import proposer
from tests.searcher_contract import SearcherContract, columns_equal, placement_space

GPT3 = model_preset("gpt3-175b")
H100 = cluster_preset("h100x1024")
# A small model: 12 layers, 8 heads (4 K/V heads), on 16 GPUs in nodes of 4.
SMALL = Transformer(name="small", layers=12, hidden=512, heads=8, kv_heads=4, seq_len=1024, vocab=1000)
C16 = make_cluster("h100", 16, gpus_per_node=4)


def small_space(**kw):
    """A small space under the generic profile (every schedule; ZeRO 2-3 with pp 1 only): plain_valid's rules."""
    opts = dict(dp=[1, 2, 4, 8, 16], tp=[1, 2, 3, 4, 8], pp=[1, 2, 3, 4, 5], micro_batch=[1, 2, 3, 4],
                schedule=["gpipe", "1f1b", "interleaved", "zb-h1"], vpp=[1, 2, 3], sequence_parallel=[False, True],
                zero_stage=[0, 1, 2, 3], recompute=["none", "full"], framework="generic")
    opts.update(kw)
    return Space.from_options(SMALL, C16, global_batch=48, base="fixed", **opts)


def plain_valid(dp, tp, pp, mb, sched, vpp, sp, zero, *, G=16, B=48, L=12, heads=8, kv=4, all_gpus=True):
    """The constraints written out plainly, for one point."""
    if (dp * tp * pp != G) if all_gpus else (dp * tp * pp > G):
        return False
    if heads % tp or kv % tp or L % pp or B % (dp * mb):
        return False
    if sched == "interleaved":
        if not (vpp >= 2 and pp >= 2 and (L // pp) % vpp == 0):
            return False
    elif vpp != 1:
        return False
    if sp and tp == 1:
        return False
    if pp == 1 and sched in ("zb-h1", "zb-h2"):  # 1F1B is a choice here: one stage, the same strategy
        return False
    return not (zero >= 2 and pp > 1)


@pytest.mark.parametrize("all_gpus", [True, False])
def test_grid_equals_filtered_product(all_gpus):
    space = small_space() if all_gpus else Space.from_options(
        SMALL, C16, global_batch=48, base="fixed", all_gpus=False, framework="generic", dp=[1, 2, 4, 8, 16],
        tp=[1, 2, 3, 4, 8],
        pp=[1, 2, 3, 4, 5], micro_batch=[1, 2, 3, 4], schedule=["gpipe", "1f1b", "interleaved", "zb-h1"],
        vpp=[1, 2, 3], sequence_parallel=[False, True], zero_stage=[0, 1, 2, 3], recompute=["none", "full"])
    names = ("dp", "tp", "pp", "micro_batch", "schedule", "vpp", "sequence_parallel", "zero_stage", "recompute")
    choices = [space.choices_of(n) for n in names]
    expected = sorted(
        p for p in itertools.product(*choices) if plain_valid(*p[:8], all_gpus=all_gpus)
    )
    idx, t = space.rows(0, space.size)
    r = t.readable()
    got = sorted(zip(*(r[n].tolist() for n in names), strict=True))
    assert got == [tuple(x) for x in expected]
    assert len(expected) > 50
    assert np.all(np.diff(idx) > 0)
    assert space.valid_count() == len(expected)


def test_digits_index_round_trip():
    space = small_space()
    idx = np.arange(space.size)
    d = space.digits_of(idx)
    assert d.shape == (space.size, len(space.dims))
    assert np.all(d < space.radices) and np.all(d >= 0)
    np.testing.assert_array_equal(space.index_of(d), idx)
    # mixed radix, last dimension fastest: index 1 is digit 1 of the last dimension
    assert list(d[1]) == [0] * (len(space.dims) - 1) + [1]


def test_rows_over_split_ranges_concatenate():
    space = default_space(GPT3, H100, 1536)
    whole, t = space.rows(0, space.size)
    cuts = [0, 1, 7, 1000, 1001, 20_000, 37_999, space.size]
    parts = [space.rows(a, b) for a, b in itertools.pairwise(cuts)]
    np.testing.assert_array_equal(np.concatenate([p[0] for p in parts]), whole)
    from costmodel import StrategyTable
    assert columns_equal(StrategyTable.concat([p[1] for p in parts]), t)
    # lookup-table path equals the direct check of every candidate
    direct = np.flatnonzero(space.valid_direct(space.digits_of(np.arange(space.size))))
    np.testing.assert_array_equal(direct, whole)
    assert columns_equal(space.table(space.digits_of(whole)), t)


def test_default_space_matches_rank_choices():
    space = default_space(GPT3, H100, 1536)
    assert space.choices_of("tp") == (1, 2, 3, 4, 6, 8)  # divisors of 96 up to a node of 8
    # pp <= 96 / 2: divisors of 96 (1 2 3 4 6 8 12 16 24 32 48), of 98 (7 14), of 100 (5 10 20 25)
    assert space.choices_of("pp") == (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 25, 32, 48)
    assert space.choices_of("zero_stage") == (0, 1, 2, 3) and space.choices_of("light_ends") == (0, 1, 2)
    idx, t = space.rows(0, space.size)
    assert np.all(t.num_gpus <= 1024) and np.all(96 % t["tp"] == 0)
    # every row's stages hold the 96 layers; pp not dividing 96 only with uneven stages
    assert np.all(t.stage_layers.sum(axis=1) == 96)
    assert np.any(96 % t["pp"] != 0)


def test_microbatches_dimension():
    mlp, c = model_preset("seed000-mlp"), cluster_preset("seed000-16")
    space = Space.from_options(mlp, c, global_batch=8192, base="fixed", dp=[1, 2, 4, 8, 16], tp=[1, 2, 4, 8, 16],
                               pp=[1, 2, 4, 8, 16], microbatches=[1, 2, 4, 8, 16, 32])
    idx, t = space.rows(0, space.size)
    m = 8192 // (t["dp"] * t["micro_batch"])
    assert np.all(t["dp"] * t["micro_batch"] * m == 8192)
    assert np.all(t.num_gpus == 16)
    # 15 (dp, tp, pp) triples with product 16 (pp | 64 always), times 6 counts m
    assert len(t) == 15 * 6


def test_exact_space_has_10k_feasible():
    # under generic, which runs every schedule of the exact space (megatron-core, the default, runs fewer of them)
    space = exact_space(GPT3, H100, 1536, framework="generic")
    idx, t = space.rows(0, space.size)
    m = evaluate(GPT3, H100, t)
    assert int(m["feasible"].sum()) >= 10_000


def test_partition_space():
    space = partition_space(GPT3, H100, 1536)
    # tp 4, pp 6, cp 4, micro-batch 8, schedule 5, vpp 5, SP 2, ZeRO 4; 31 boundaries of 9
    # shifts, 32 stages of 3 recompute choices
    assert space.size == 4 * 6 * 4 * 8 * 5 * 5 * 2 * 4 * 9 ** 31 * 3 ** 32
    assert space.size > 2 ** 63 and isinstance(space.size, int)
    rng = np.random.default_rng(0)
    d = space.random_digits(rng, 300)
    assert np.all(space.valid(d))
    t = space.table(d)
    active = np.arange(t.stage_layers.shape[1])[None, :] < t["pp"][:, None]
    assert np.all(t.stage_layers.sum(axis=1) == 96)
    assert np.all((t.stage_layers >= 1) | ~active) and np.all((t.stage_layers == 0) | active)
    # pp = 32 over 96 layers with zero shifts is 3 layers a stage; uneven rows exist
    assert np.any(np.ptp(np.where(active, t.stage_layers, t.stage_layers.max()), axis=1) > 0)
    m = evaluate(GPT3, H100, t)
    assert np.all(m["reason"] != 3)  # the cost core accepts every partition (pp_not_divide_layers)


def test_partition_shift_positions():
    # pp = 4 over 10 layers: uniform boundaries round(2.5)=3 (halves up), 5, round(7.5)=8
    m = Transformer(name="t10", layers=10, hidden=256, heads=4, seq_len=128, vocab=100)
    c = make_cluster("h100", 4, gpus_per_node=4)
    space = Space.from_options(m, c, global_batch=8, base="fixed", pp=[1, 2, 4], stage_shift=[-1, 0, 1])
    digits = space.canonical_digits(1)
    digits[0, space.dims.index(next(d for d in space.dims if d.name == "pp"))] = 2  # pp = 4
    t = space.table(digits)
    assert t.stage_layers[0].tolist() == [3, 2, 3, 2]
    k = [d.name for d in space.dims].index("stage_shift.1")
    digits[0, k] = 2  # boundary 1 moves from 5 to 6
    assert space.table(digits).stage_layers[0].tolist() == [3, 3, 2, 2]
    digits[0, k] = 1
    k3 = [d.name for d in space.dims].index("stage_shift.2")
    digits[0, k3] = 0  # boundary 2 from 8 to 7
    assert space.table(digits).stage_layers[0].tolist() == [3, 2, 2, 3]
    # a shift past the row's last boundary is not canonical: invalid (one index per strategy)
    d2 = space.canonical_digits(1)
    d2[0, [d.name for d in space.dims].index("pp")] = 1  # pp = 2, only boundary 0 is used
    assert space.valid(d2)[0]
    d2[0, k3] = 2
    assert not space.valid(d2)[0]


@pytest.mark.parametrize("which, framework", [("exact", None), ("partition", "generic"),
                                              ("partition", "megatron-core")])
def test_propose_moves_one_dimension(which, framework):
    space = (exact_space(GPT3, H100, 1536) if which == "exact"
             else partition_space(GPT3, H100, 1536, framework=framework))
    rng = np.random.default_rng(1)
    d = space.random_digits(rng, 500)
    p = proposer(space)(d, rng)
    assert np.all((p >= 0) & (p < space.radices))
    changed = p != d
    names = [x.name for x in space.dims]
    pp_col = names.index("pp")
    stage = np.array([x.base.startswith("stage_") for x in space.dims])
    n_changed = changed.sum(axis=1)
    pp_moved = changed[:, pp_col]
    # exactly one dimension moves, except that a pp move also resets per-stage digits
    assert np.all(n_changed[~pp_moved] == 1)
    assert np.all((changed & ~stage)[pp_moved].sum(axis=1) == 1)
    ordinal = np.array([x.ordinal for x in space.dims])
    if which == "partition":
        t0, t1 = space.table(d), space.table(p)
        shift = (changed & ordinal[None, :]).any(axis=1) & ~pp_moved
        assert shift.sum() > 50
        # one layer leaves one stage for its neighbour; under a chunked schedule (vpp > 1: here interleaving), where
        # the generic profile wants whole equal chunks, vpp layers (Megatron-Core takes any count of at least vpp: one)
        assert np.all((t0["vpp"] == 1) | (t0["schedule"] == 2))
        v = np.where(framework == "generic", t0["vpp"], 1)[shift]
        assert framework == "megatron-core" or np.any(v > 1)
        step = (p - d)[shift][(changed & ordinal[None, :])[shift]]
        assert np.all(np.abs(step) == v)
        diff = t1.stage_layers[shift] - t0.stage_layers[shift]
        assert np.all(np.abs(diff).sum(axis=1) == 2 * v)
        assert np.all((diff != 0).sum(axis=1) == 2)


def test_random_digits_uniform_over_valid_points():
    space = small_space(recompute=["none"])
    rng = np.random.default_rng(7)
    valid = space.valid_indices(0, space.size)
    draws = space.index_of(space.random_digits(rng, 400 * valid.size))
    assert np.all(np.isin(draws, valid))
    counts = np.bincount(np.searchsorted(valid, draws), minlength=valid.size)
    # 400 expected per point, binomial sd 20: every count within 6 sd
    assert counts.min() > 400 - 120 and counts.max() < 400 + 120


def test_start_points():
    space = exact_space(GPT3, H100, 1536)
    sp = space.start_points()
    dp = space.table(sp["data_parallel"]).row(0)
    # dp = 1024 cannot split 1536 sequences; 512 is the largest that does, tp=2 fills the GPUs
    assert dp["dp"] == 512 and dp["pp"] == 1 and dp["tp"] * dp["cp"] == 2
    mg = space.table(sp["megatron"]).row(0)
    assert (mg["tp"], mg["recompute"], mg["sequence_parallel"], mg["zero_stage"], mg["micro_batch"]) == (
        8, "selective", True, 1, 1)
    assert mg["schedule"] == "1f1b"
    for v in sp.values():
        assert space.valid(v)[0]
    m = evaluate(GPT3, H100, space.table(sp["megatron"]))
    assert m["feasible"][0]
    # the smallest pp that fits: one pp smaller runs out of memory
    smaller = Space.from_options(GPT3, H100, global_batch=1536, base="fixed", tp=[8], pp=[mg["pp"] // 2],
                                 recompute=["selective"], sequence_parallel=[True], zero_stage=[1])
    assert not evaluate(GPT3, H100, smaller.rows(0, smaller.size)[1])["feasible"][0]
    part = partition_space(GPT3, H100, 1536)
    psp = part.start_points()
    assert {"data_parallel", "megatron"} <= set(psp)
    assert np.all(part.valid(np.stack(list(psp.values()))))
    pm = part.table(psp["megatron"]).row(0)
    # uniform stages (pp divides 96), selective recompute on every stage in use
    assert pm["stage_layers"] == [96 // pm["pp"]] * pm["pp"]
    assert pm["stage_recompute"] == ["selective"] * pm["pp"]


def test_fsdp_start_is_the_fully_sharded_plan_with_the_fewest_micro_batches_that_fits():
    """Among the points that fit (the searchers' screen), "fsdp" is pp 1 and ZeRO-3 with no recompute where any
    such point fits, the fewest micro-batches a step of those, then the smallest tp: checked against every
    point of the space priced by evaluate."""
    from search._screen import screened

    space = Space.from_options(GPT3, cluster_preset("a100x1024"), global_batch=2048, base="fixed",
                               framework="megatron-core", tp=[2, 4, 8], pp=[1, 8], micro_batch=[1, 2, 4, 8],
                               recompute=["none", "full"], sequence_parallel=[True], zero_stage=[1, 3])
    _, members = screened(space)
    got = space.table(space.start_points(within=members)["fsdp"]).row(0)
    idx, table = space.rows(0, space.size)
    m = evaluate(GPT3, space.cluster, table, framework="megatron-core")
    ok = m["feasible"] & (table["pp"] == 1) & (table["zero_stage"] == 3) & (table["recompute"] == 0)
    assert ok.any()
    micro = table["global_batch"] // (table["dp"] * table["micro_batch"])
    fewest = micro[ok].min()
    tp = table["tp"][ok & (micro == fewest)].min()
    assert (got["pp"], got["zero_stage"], got["recompute"], got["tp"]) == (1, 3, "none", tp)
    assert got["global_batch"] // (got["dp"] * got["micro_batch"]) == fewest


def test_fsdp_tp_start_is_the_2d_plan_with_node_sized_tp_and_the_fewest_micro_batches_that_fits():
    """torchtitan's 2D recipe, FSDP with tensor parallelism inside a node: among the points that fit, pp 1, ZeRO-3,
    the largest tp up to a node's 8 GPUs, sequence parallelism, the fewest micro-batches a step, then the least
    recompute: checked against every point of the space priced by evaluate."""
    from search._screen import screened

    space = Space.from_options(GPT3, cluster_preset("a100x1024"), global_batch=2048, base="fixed",
                               framework="megatron-core", tp=[2, 4, 8], pp=[1, 8], micro_batch=[1, 2, 4, 8],
                               recompute=["none", "selective", "full"], sequence_parallel=[False, True],
                               zero_stage=[1, 3])
    _, members = screened(space)
    got = space.table(space.start_points(within=members)["fsdp_tp"]).row(0)
    idx, table = space.rows(0, space.size)
    m = evaluate(GPT3, space.cluster, table, framework="megatron-core")
    ok = m["feasible"] & (table["pp"] == 1) & (table["zero_stage"] == 3) & (table["tp"] == 8) \
        & (table["sequence_parallel"] == 1)
    assert ok.any()
    micro = table["global_batch"] // (table["dp"] * table["micro_batch"])
    fewest = micro[ok].min()
    least = table["recompute"][ok & (micro == fewest)].min()
    assert (got["pp"], got["zero_stage"], got["tp"], got["sequence_parallel"]) == (1, 3, 8, True)
    assert got["global_batch"] // (got["dp"] * got["micro_batch"]) == fewest
    assert got["recompute"] == ("none", "selective", "full")[least]


def test_fsdp_starts_shard_the_activations_by_cp_and_by_tp():
    """Llama 3 8B on 512 H200s at a batch of 256: dp is at most 256, so every GPU is used only with tp x cp = 2.
    FSDP's recipe takes the smaller tp (tp 1, cp 2), its fsdp_cp1 twin cp 1 first (tp 2, cp 1); both pp 1, ZeRO-3,
    one micro-batch a step and no recompute (24.5-24.8 GB of 143)."""
    from search._screen import screened

    space = Space.from_options(model_preset("llama3-8b"), cluster_preset("h200x512"), global_batch=256, base="fixed",
                               framework="hai-llm", tp=[1, 2], cp=[1, 2], micro_batch=[1, 2],
                               recompute=["none", "full"], sequence_parallel=[False, True], zero_stage=[1, 3])
    _, members = screened(space)
    starts = space.start_points(within=members)
    got = {k: space.table(starts[k]).row(0) for k in ("fsdp", "fsdp_cp1")}
    for k, (tp, cp) in {"fsdp": (1, 2), "fsdp_cp1": (2, 1)}.items():
        r = got[k]
        assert (r["dp"], r["tp"], r["cp"], r["pp"], r["zero_stage"], r["micro_batch"], r["recompute"]) == \
            (256, tp, cp, 1, 3, 1, "none"), k


def test_fsdp_pp_start_is_the_sharded_pipeline_with_the_least_recompute_smallest_tp_and_fewest_stages():
    """FSDP with a pipeline (torchtitan's 3D recipe, Llama 3's): among the points that fit, pp > 1 with the weights or
    gradients sharded (ZeRO 2-3), on the most GPUs, the least recompute, the smallest tp, the fewest stages, then the
    fewest micro-batches a step: checked against every point of the space priced by evaluate. GPT-3 175B on 512
    H100s under llama3-fsdp (ZeRO-2 with pipelines)."""
    from search._screen import screened

    space = Space.from_options(GPT3, cluster_preset("h100x512"), global_batch=512, base="fixed",
                               framework="llama3-fsdp", tp=[1, 2, 4, 8], pp=[1, 4, 8, 16], micro_batch=[1, 2],
                               recompute=["none", "full"], sequence_parallel=[True], zero_stage=[0, 2, 3])
    _, members = screened(space)
    got = space.table(space.start_points(within=members)["fsdp_pp"]).row(0)
    idx, table = space.rows(0, space.size)
    m = evaluate(GPT3, space.cluster, table, framework="llama3-fsdp")
    ok = m["feasible"] & (table["pp"] > 1) & (table["zero_stage"] >= 2)
    ok &= table.num_gpus == table.num_gpus[ok].max()
    ok &= table["recompute"] == table["recompute"][ok].min()
    ok &= table["tp"] == table["tp"][ok].min()
    ok &= table["pp"] == table["pp"][ok].min()
    micro = table["global_batch"] // (table["dp"] * table["micro_batch"])
    ok &= micro == micro[ok].min()
    assert ok.any()
    assert got["zero_stage"] >= 2 and got["pp"] > 1
    assert (got["tp"], got["pp"], got["recompute"], got["micro_batch"]) == \
        (table["tp"][ok][0], table["pp"][ok][0], ("none", "selective", "full")[table["recompute"][ok][0]],
         table["micro_batch"][ok][0])


def test_megatron_start_uses_every_gpu_before_uniform_stages():
    """Megatron-LM runs tp x pp x cp x dp = every GPU of the job. Llama 3 70B (80 layers) on 1,024 H100s, batch
    1024, tp 8, idle GPUs allowed: pp 5 and pp 10 divide the layers but leave dp at the largest that divides the
    batch, 16 of 25.6 and 8 of 12.8 (640 GPUs each); pp 8 (10 layers a stage) has dp 16 on all 1,024. The recipe
    takes pp 8, not the smallest pp dividing the layers."""
    space = Space.from_options(model_preset("llama3-70b"), H100, global_batch=1024, base="default",
                               framework="megatron-core", tp=[8], pp=[5, 8, 10], micro_batch=[1],
                               recompute=["selective"], sequence_parallel=[True], zero_stage=[1])
    got = space.table(space.start_points()["megatron"]).row(0)
    assert (got["pp"], got["dp"], got["tp"] * got["pp"] * got["cp"] * got["dp"]) == (8, 16, 1024)


def test_digits_from_table_inverts_table():
    for space in (exact_space(GPT3, H100, 1536), partition_space(GPT3, H100, 1536)):
        d = space.random_digits(np.random.default_rng(3), 500)
        np.testing.assert_array_equal(space.digits_from_table(space.table(d)), d)
    space = exact_space(GPT3, H100, 1536)
    from costmodel import StrategyTable
    outside = StrategyTable.from_columns(dp=[128, 64, 128], tp=[8, 8, 8], pp=[1, 2, 1], micro_batch=[1, 1, 5],
                                         global_batch=1536, recompute="full")
    # rows 0 and 1 are points (128 * 8 * 1 = 64 * 8 * 2 = 1024 GPUs); row 2 has micro_batch 5,
    # not a choice
    got = space.digits_from_table(outside)
    assert space.valid(got).tolist() == [True, True, False]
    wrong_dp = StrategyTable.from_columns(dp=[32], tp=[8], pp=[1], global_batch=1536)
    assert not space.valid(space.digits_from_table(wrong_dp))[0]


def test_json_and_pickle_round_trip():
    import json
    import pickle

    for space in (exact_space(GPT3, H100, 1536), partition_space(GPT3, H100, 1536)):
        again = Space.from_json(json.loads(json.dumps(space.to_json())), GPT3, H100)
        assert again == space and again.size == space.size
        assert [d.name for d in again.dims] == [d.name for d in space.dims]
        unpickled = pickle.loads(pickle.dumps(space))
        assert unpickled == space
        d = space.random_digits(np.random.default_rng(0), 50)
        assert columns_equal(unpickled.table(d), space.table(d))


def test_bad_options():
    with pytest.raises(InputError, match="tp"):
        Space.from_options(GPT3, H100, global_batch=1536, tp=["x"])
    with pytest.raises(InputError, match="schedule"):
        Space.from_options(GPT3, H100, global_batch=1536, schedule=["2f2b"])
    with pytest.raises(InputError, match="global_batch"):
        Space.from_options(GPT3, H100, global_batch=0)


class TestGridContract(SearcherContract):
    @pytest.fixture
    def space(self):
        return exact_space(GPT3, H100, 1536)

    @pytest.fixture
    def make_searcher(self, space):
        return lambda seed: GridSearcher(space, start=1000 * seed, chunk=4096)


class TestGridPlacementContract(SearcherContract):
    @pytest.fixture(scope="class")
    def space(self):
        return placement_space(grid=True)

    @pytest.fixture
    def make_searcher(self, space):
        return lambda seed: GridSearcher(space, start=100 * seed, chunk=512)


class TestRandomPlacementContract(SearcherContract):
    @pytest.fixture(scope="class")
    def space(self):
        return placement_space()

    @pytest.fixture
    def make_searcher(self, space):
        return lambda seed: RandomSearcher(space, seed)


class TestRandomContract(SearcherContract):
    @pytest.fixture
    def space(self):
        return exact_space(GPT3, H100, 1536)

    @pytest.fixture
    def make_searcher(self, space):
        return lambda seed: RandomSearcher(space, seed)


class TestRandomPartitionContract(SearcherContract):
    @pytest.fixture
    def space(self):
        return partition_space(GPT3, H100, 1536)

    @pytest.fixture
    def make_searcher(self, space):
        return lambda seed: RandomSearcher(space, seed)


def test_grid_covers_range_in_chunks():
    space = default_space(GPT3, H100, 1536)
    g = GridSearcher(space, start=100, stop=30_000, chunk=999)
    seen = []
    while True:
        t = g.ask(77)
        if len(t) == 0:
            break
        seen.append(g.last_indices)
        g.tell(t, evaluate(GPT3, H100, t))
    np.testing.assert_array_equal(np.concatenate(seen), space.rows(100, 30_000)[0])
    assert g.done


def test_rows_without_lookup_table(monkeypatch):
    import search._space as sp

    space = small_space()
    expected = space.rows(0, space.size)
    monkeypatch.setattr(sp, "LOOKUP_MAX_ENTRIES", 10)
    monkeypatch.setattr(sp, "SCAN_CHUNK", 1000)
    plain = small_space()
    assert plain._lookup_table() is None
    idx, t = plain.rows(0, plain.size)
    np.testing.assert_array_equal(idx, expected[0])
    assert columns_equal(t, expected[1])
    d = plain.random_digits(np.random.default_rng(0), 200)
    assert np.all(plain.valid(d)) and np.all(space.valid(d))


def test_pp1_zero_bubble_schedules_are_one_strategy_with_1f1b():
    # With one stage there is nothing to overlap: ZB-H1 and ZB-H2 price and hold exactly as
    # 1F1B, so a space that offers 1F1B lists pp = 1 once, and one without 1F1B keeps them.
    from costmodel import METRIC_COLUMNS, StrategyTable

    rows = StrategyTable.from_columns(dp=128, tp=8, pp=1, micro_batch=6, global_batch=1536, zero_stage=3,
                                      recompute="selective", sequence_parallel=True,
                                      schedule=["1f1b", "zb-h1", "zb-h2"])
    m = evaluate(GPT3, H100, rows, framework="generic")  # (megatron-core runs neither ZB schedule)
    for k in METRIC_COLUMNS:
        assert m[k][1] == m[k][0] and m[k][2] == m[k][0], k
    with_1f1b = small_space(schedule=["1f1b", "zb-h1"])
    _, tab = with_1f1b.rows(0, with_1f1b.size)
    r = tab.readable()
    assert not np.any((r["pp"] == 1) & (r["schedule"] != "1f1b"))
    assert np.any((r["pp"] == 1) & (r["schedule"] == "1f1b"))
    only_zb = small_space(schedule=["zb-h1"], vpp=[1])
    _, tab = only_zb.rows(0, only_zb.size)
    assert np.any(tab["pp"] == 1)


def _partitions(L, p, lo, shifts, multiple=1):
    """Every split of L layers over p stages, stage j holding at least lo[j] layers (a multiple of ``multiple``),
    each boundary within ``shifts`` of the uniform one (round half up of (j + 1) L / p): written out plainly."""
    uniform = [((j + 1) * L * 2 + p) // (2 * p) for j in range(p - 1)]
    out = set()
    for sizes in itertools.product(range(L + 1), repeat=p - 1):
        last = L - sum(sizes)
        stages = (*sizes, last)
        bounds = list(itertools.accumulate(sizes))
        if (all(s >= m and s % multiple == 0 for s, m in zip(stages, lo))
                and all(abs(b - u) <= shifts for b, u in zip(bounds, uniform))):
            out.add(stages)
    return out


def test_random_partitions_follow_the_frameworks_chunk_rules(monkeypatch):
    # Boundary by boundary, as in spaces too large for a lookup table (forced here: no table). 16 layers over 4
    # stages, boundary shifts -4..4. Megatron-Core splits chunks unevenly: under interleaving with 3 chunks a stage
    # holds at least 3 layers, the first and the last at least 2 (their embedding / loss chunk), any count: 84
    # splits, every one drawn. The generic profile wants whole chunks of equal size: with 2 chunks every stage an
    # even count of at least 2.
    m = Transformer(name="t16", layers=16, hidden=256, heads=4, seq_len=128, vocab=100)
    c = make_cluster("h100", 4, gpus_per_node=4)
    monkeypatch.setattr("search._space.LOOKUP_MAX_ENTRIES", 0)
    for fw, v, lo, multiple in (("megatron-core", 3, (2, 3, 3, 2), 1), ("generic", 2, (2, 2, 2, 2), 2)):
        space = Space.from_options(m, c, global_batch=8, base="fixed", framework=fw, pp=[4],
                                   schedule=["interleaved"], vpp=[v], stage_shift=list(range(-4, 5)))
        d = space.random_digits(np.random.default_rng(0), 2000)
        assert space.valid(d).all()
        drawn = {tuple(x) for x in space.table(d).stage_layers.tolist()}
        want = _partitions(16, 4, lo, 4, multiple)
        assert drawn == want, fw
    assert len(_partitions(16, 4, (2, 3, 3, 2), 4)) == 84


def test_megatron_start_spreads_the_experts():
    # an MoE model: the recipe's tp is the node's, then the largest expert parallelism the space holds at it
    # (Mixtral 8x7B on 64 H200s: ep up to 8 = its experts, within tp 8 x dp 8's ranks)
    model, cluster = model_preset("mixtral-8x7b"), cluster_preset("h200x64")
    space = Space.from_options(model, cluster, global_batch=512, framework="llm-foundry", ep=[1, 2, 4, 8],
                               tp=[1, 2, 4, 8], pp=[1, 2, 4], cp=[1, 2], micro_batch=[2, 8], schedule=["1f1b"],
                               recompute=["selective", "full"], sequence_parallel=[False, True], zero_stage=[0, 2, 3])
    mg = space.table(space.start_points()["megatron"]).row(0)
    assert mg["tp"] == 8 and mg["ep"] == 8
