"""Searchers that adapt to the budget they are given: the gradient search's schedule from its budget,
the start sample and the late local phase that MCMC, TPE and the gradient search share (search._local),
each replayed exactly, and the placement move that puts one stage on another pool."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel import cluster_preset, evaluate, make_hetero, make_pool, model_preset
from search import GradientSearcher, HeteroSpace, MCMCSearcher, Space, TPESearcher, exact_space
from search._gradient import DEFAULT_COOLING, DEFAULT_SAMPLES, auto_schedule
from search._local import additive_model, late_evaluations, neighbours, peak_neighbours, single_changes, start_sample
from search._memo import point_keys
from search._moves import proposer
from search._screen import screened
from tests.searcher_contract import columns_equal


def trap_space() -> Space:
    """96 points, 50 valid (ZeRO-3 needs pp 1), 39 fit, priced under megatron-core: Llama 3 8B on 1024 H100s,
    batch 2048. Its grid (test_trap_space_is_what_it_says): the optimum is tp 1, pp 1, micro-batch 1,
    no SP, ZeRO-3, no recompute; tp 1, pp 2, ZeRO-1 (the rest the same) is a local optimum two changes
    from it (pp 2 -> 1 alone does not fit at ZeRO-1, ZeRO 1 -> 3 alone is not valid at pp 2)."""
    return Space.from_options(model_preset("llama3-8b"), cluster_preset("h100x1024"), global_batch=2048,
                              base="fixed", framework="megatron-core", tp=[1, 4], pp=[1, 2], micro_batch=[1, 2, 4],
                              schedule=["1f1b"], zero_stage=[1, 3], recompute=["none", "selective"],
                              sequence_parallel=[False, True])


OPTIMUM = [0, 0, 0, 0, 1, 0]  # tp 1, pp 1, micro-batch 1, SP off, ZeRO-3, no recompute
TRAP = [0, 1, 0, 0, 0, 0]  # tp 1, pp 2, ZeRO-1


def grid(space):
    idx, table = space.rows(0, space.size)
    m = evaluate(space.model, space.cluster, table, framework=space.framework)
    return space.digits_of(idx), np.where(m["feasible"], m["tokens_per_s"], 0.0)


def drive(searcher, space, budget: int, batch: int = 16):
    """(grid indices asked in order, best feasible tokens/s) within ``budget`` evaluations."""
    asked, best, used = [], 0.0, 0
    while used < budget:
        t = searcher.ask(min(batch, budget - used))
        if len(t) == 0:
            break
        m = evaluate(space.model, space.cluster, t, framework=space.framework)
        searcher.tell(t, m)
        asked.append(space.index_of(space.digits_from_table(t)))
        best = max(best, float(np.where(m["feasible"], m["tokens_per_s"], 0.0).max()))
        used += len(t)
    return np.concatenate(asked), best


def test_trap_space_is_what_it_says():
    space = trap_space()
    digits, tps = grid(space)
    assert [d.name for d in space.dims] == ["tp", "pp", "micro_batch", "sequence_parallel", "zero_stage", "recompute"]
    assert (len(digits), int((tps > 0).sum())) == (50, 39)
    assert digits[np.argmax(tps)].tolist() == OPTIMUM
    trap = int(np.flatnonzero((digits == TRAP).all(axis=1))[0])
    one = (digits != digits[trap]).sum(axis=1) == 1
    assert tps[trap] > 0 and tps[one].max() < tps[trap]  # every feasible single change is worse
    assert (np.array(OPTIMUM) != np.array(TRAP)).sum() == 2


def test_local_phase_from_the_trap_reaches_the_optimum_in_one_repair():
    """Told: the trap and its feasible single changes (all worse). The peaks' neighbours begin with the
    trap's unevaluated ones, and the optimum (pp 1 with ZeRO-3: the repair of pp 2 -> 1) is among them."""
    space = trap_space()
    digits, tps = grid(space)
    trap = np.flatnonzero((digits == TRAP).all(axis=1))[0]
    told = np.flatnonzero(((digits != digits[trap]).sum(axis=1) <= 1) & (tps > 0))
    fit = digits[tps > 0]
    ks, vs = single_changes(space, range(len(space.dims)))
    known_keys = space.index_of(digits[told])
    cost = 1.0 / tps[told]
    out = peak_neighbours(space, digits[told], cost, lambda k: np.isin(k, known_keys), 8,
                          np.random.default_rng(0), ks, vs, fit)
    assert len(out) and not np.isin(space.index_of(out), known_keys).any()
    assert OPTIMUM in out.tolist()
    single, repaired = neighbours(space, digits[trap], ks, vs, fit)
    assert OPTIMUM not in single.tolist() and OPTIMUM in repaired.tolist()


@pytest.mark.parametrize("cls", [MCMCSearcher, GradientSearcher, TPESearcher])
def test_finds_the_optimum_two_changes_from_a_local_optimum_for_every_seed(cls):
    """Budget 8 of the 38 points that fit: every seed of 0-9 ends at the optimum."""
    space = trap_space()
    digits, tps = grid(space)
    for seed in range(10):
        asked, best = drive(cls(space, seed=seed, budget=8), space, 8)
        assert len(asked) == 8 == len(np.unique(asked)), seed  # distinct points, within the budget
        assert best == tps.max(), f"{cls.__name__} seed {seed}: {best / tps.max():.4f} of the optimum"


def test_auto_schedule_by_hand():
    # budget 34, polish 0.5: the late phase has max(17, min(64, 0.8 x 34 = 27)) = 27 evaluations, the
    # gradient 7: round(sqrt(7)) = 3, at least 4 draws a step, 7 / 4 = 1.75 steps, cooling
    # 0.1 ** (1 / 1.75) (the temperature 1.0 -> 0.1 at the end)
    assert late_evaluations(34, 0.5) == 27
    samples, cooling = auto_schedule(34, 0.5, 1.0, 0.1)
    assert samples == 4 and cooling == pytest.approx(0.1 ** (1 / 1.75))
    assert cooling ** 1.75 == pytest.approx(0.1)
    # budget 330: the late phase is half (165 > 64); the gradient's 165: round(sqrt(165)) = 13 a step
    assert late_evaluations(330, 0.5) == 165 and auto_schedule(330, 0.5, 1.0, 0.1)[0] == 13
    assert late_evaluations(100, 0.5) == 64  # 50 < 64 <= 80
    assert auto_schedule(2000, 0.5, 1.0, 0.1)[0] == 16  # sqrt(1000) = 32, at most 16
    assert auto_schedule(None, 0.5, 1.0, 0.1) == (DEFAULT_SAMPLES, DEFAULT_COOLING)
    assert late_evaluations(34, 0.0) == 0


def test_gradient_takes_its_budget():
    space = trap_space()
    s = GradientSearcher(space, seed=0, budget=34, start_sample=0.0)
    assert (s.samples, s.budget) == (4, 34) and s.cooling == pytest.approx(0.1 ** (1 / 1.75))
    # with the start sample (0.2 x 34 = 7 evaluations) the gradient's share is 34 - 27 - 7 = 0, one step
    # at least: 4 draws, the temperature at 0.1 after it
    s = GradientSearcher(space, seed=0, budget=34)
    assert (s.samples, s.budget) == (4, 34) and s.cooling == pytest.approx(0.1)
    explicit = GradientSearcher(space, seed=0, budget=34, samples=16, cooling=0.97)
    assert (explicit.samples, explicit.cooling) == (16, 0.97)
    # a budget covering every point that fits (39): each asked once, then nothing more
    asked, _ = drive(GradientSearcher(space, seed=0, budget=100), space, 100)
    assert len(asked) == 39 == len(np.unique(asked))


@pytest.mark.parametrize("cls, budget", [(MCMCSearcher, 120), (GradientSearcher, 120)])
def test_budget_phases_replay_exactly(cls, budget):
    """A fresh searcher told the recorded batches (first sample, chains or gradient steps, local
    phase) asks what the first one asks next; state_dict carries the same."""
    space = exact_space(model_preset("gpt3-175b"), cluster_preset("h100x1024"), 1536, framework="generic")
    a = cls(space, seed=4, budget=budget)
    told = []
    for _ in range(40):
        t = a.ask(8)
        if not len(t) or sum(len(x) for x, _ in told) >= budget - 8:
            break
        m = evaluate(space.model, space.cluster, t, framework=space.framework)
        a.tell(t, m)
        told.append((t, m))
    assert sum(len(x) for x, _ in told) >= 0.6 * budget  # into the local phase (the last half)
    b = cls(space, seed=4, budget=budget)
    for t, m in told:
        b.tell(space.table(space.digits_from_table(t)), m)  # rows rebuilt, not the asked objects
    c = cls(space, seed=4, budget=budget)
    c.load_state_dict(a.state_dict())
    nxt = a.ask(8)
    assert columns_equal(b.ask(8), nxt) and columns_equal(c.ask(8), nxt)


def test_start_sample_by_hand():
    """0.2 of a budget of 40 over the trap space's 39 points that fit: 8 distinct points that fit, the
    starts given first; the same call draws the same points; none without a budget or where the sample
    is not larger than ``more_than``."""
    space, members = screened(trap_space())
    assert members.size == 39
    starts = space.digits_of(members[[5, 9]])
    pts = start_sample(space, 40, 0.2, seed=3, stream=6, starts=starts)
    assert pts.shape == (8, 6) and len(np.unique(space.index_of(pts))) == 8
    assert np.isin(space.index_of(pts), members).all()  # every point fits
    assert (pts[:2] == starts).all()
    assert (start_sample(space, 40, 0.2, seed=3, stream=6, starts=starts) == pts).all()
    assert not (start_sample(space, 40, 0.2, seed=4, stream=6) == pts).all()
    assert start_sample(space, None, 0.2, seed=3, stream=6) is None
    assert start_sample(space, 40, 0.2, seed=3, stream=6, more_than=8) is None
    assert len(start_sample(space, 40, 0.2, seed=3, stream=6, more_than=7)) == 8


@pytest.mark.parametrize("cls", [MCMCSearcher, GradientSearcher, TPESearcher])
def test_start_sample_is_asked_first_and_counted(cls):
    """Budget 120 on the exact space: the first round(0.2 x 120) = 24 points asked are the start sample
    (the space's recipes among them), and the whole run asks 120 distinct points, sample included."""
    space = exact_space(model_preset("gpt3-175b"), cluster_preset("h100x1024"), 1536, framework="generic")
    s = cls(space, seed=2, budget=120)
    asked, _ = drive(s, space, 120, batch=8)
    assert len(asked) == 120 == len(np.unique(asked))
    sample = s._sample
    assert sample.shape[0] == 24
    assert set(asked[:24].tolist()) == set(space.index_of(sample).tolist())
    recipes = space.index_of(np.stack(list(s.space.start_points().values())))
    assert np.isin(recipes, asked[:24]).all()


def test_additive_model_recovers_an_additive_cost():
    """log cost = 1 + w_tp + w_pp exactly: with a small ridge the model ranks every point as the truth."""
    space = trap_space()
    rng = np.random.default_rng(0)
    digits = space.digits_of(space.valid_indices(0, space.size))
    w = [rng.normal(size=len(d.choices)) for d in space.dims]
    log_cost = 1.0 + sum(w[k][digits[:, k]] for k in range(len(w)))
    predict = additive_model(space, digits, np.exp(log_cost), ridge=1e-6)
    assert np.allclose(predict(digits), log_cost, atol=1e-4)
    assert additive_model(space, digits[:1], np.exp(log_cost[:1])) is None  # one point: no model


def test_clipped_additive_model_is_not_led_by_one_slow_plan():
    """Four plans told, differing in micro-batch and recompute only (tp 1, pp 1, no SP, ZeRO-1):
        A  mb 1, no recompute   cost 1.00 (the best)
        B  mb 2, selective      1.05
        C  mb 1, selective      1.04 (A with selective: recompute costs 4%)
        D  mb 4, no recompute   1000 (micro-batch 4 is slow)
    Which recompute should mb 2 take? A against C says none. Unclipped, D's log cost (6.9 against 0.05
    for the others) sits half on "no recompute" (mb 4 and none are each seen once beside it), so
    the model ranks mb 2 with no recompute far below mb 2 with selective. Clipped at the median (1.045),
    D counts as 1.045: "none" is told at 1.00 and 1.045, "selective" at 1.04 and 1.05, and none ranks
    first."""
    space = trap_space()

    def plan(mb: int, rec: int) -> list[int]:
        return [0, 0, mb, 0, 0, rec]

    told = np.array([plan(0, 0), plan(1, 1), plan(0, 1), plan(2, 0)])
    cost = np.array([1.00, 1.05, 1.04, 1000.0])
    ask = np.array([plan(1, 0), plan(1, 1)])  # mb 2 with no recompute, mb 2 with selective
    raw = additive_model(space, told, cost)(ask)
    clipped = additive_model(space, told, cost, clip=0.5)(ask)
    assert raw[0] > raw[1] + 1.0  # led by D: "none" looks slow
    assert clipped[0] < clipped[1]
    # the clip leaves the points at or below the median as they are: an additive cost with no point
    # above it is fitted the same
    same = np.array([1.00, 1.04, 1.04, 1.00])
    assert np.allclose(additive_model(space, told, same, clip=1.0)(ask), additive_model(space, told, same)(ask))


def test_placement_move_puts_one_stage_on_another_pool():
    """Two stages on the A100 pool: swapping pools never leaves it; the stage-pool move puts one stage
    (and only its pool) on the H100s."""
    model = model_preset("llama3-8b")
    hc = make_hetero([make_pool("a100", "a100", nodes=8), make_pool("h100", "h100", nodes=8)])
    space = HeteroSpace.from_options(model, hc, global_batch=1536, pp=(2,), dp=(4, 8), tp=(4, 8),
                                     microbatches=(32,), recompute=("full",), zero_stage=(1,))
    pools = [k for k, d in enumerate(space.dims) if d.base == "pool"]
    x = space.random_digits(np.random.default_rng(0), 1)[0]
    x[pools] = 0  # both stages on the A100s
    many = np.repeat(x[None, :], 2000, axis=0)
    prop = proposer(space)(many, np.random.default_rng(1))
    changed = prop != many
    pool_moves = changed[:, pools].any(axis=1)
    assert pool_moves.mean() > 0.1  # about one move in five
    assert (changed[pool_moves].sum(axis=1) == 1).all()  # the pool of one stage, nothing else
    assert (prop[pool_moves][:, pools].max(axis=1) == 1).all()  # onto the H100s


def test_tpe_samples_and_climbs_a_placement_space():
    """A placement space (not screened: no memory screen of placements), where TPE's conditional walk
    names a part of the valid points only: its start sample and its climb keep the points its studies
    can name (queued as trials; a point they cannot name would never be asked, and a sample waiting for
    it would never end). The first points asked are the sample (the recipes among them), the run asks 60
    distinct points, and from the late phase on (max(0.7 x 60, min(64, 0.8 x 60)) = 48 evaluations) the
    batches hold the climb's nameable points."""
    model = model_preset("llama3-8b")
    hc = make_hetero([make_pool("a100", "a100", nodes=8), make_pool("h100", "h100", nodes=8)])
    space = HeteroSpace.from_options(model, hc, global_batch=1536, pp=(2, 4), dp=(2, 4, 8), tp=(2, 4, 8),
                                     microbatches=(16, 32), recompute=("none", "full"), zero_stage=(1,))
    s = TPESearcher(space, seed=3, budget=60)
    assert s.points_fit is None and late_evaluations(60, s.local_share) == 48
    told, used, climbed = [], 0, 0
    while used < 60:
        t = s.ask(min(16, 60 - used))
        if not len(t):
            break
        keys = point_keys(space, s._pending_digits())
        if used >= 12:
            climb = point_keys(space, s._queued_points(7))  # a function of the points told: this batch's queue
            climbed += int(np.isin(keys, climb).sum())
        told.append(keys)
        s.tell(t, evaluate(model, hc, t))
        used += len(t)
    asked = np.concatenate(told)
    assert used == 60 == len(np.unique(asked))
    k = len(s._sample)
    assert 2 <= k <= 12 and s._reachable(s._sample).all()
    assert set(asked[:k].tolist()) == set(point_keys(space, s._sample).tolist())
    recipes = point_keys(space, np.stack(list(space.start_points().values())))
    assert np.isin(recipes, asked[:k]).all()
    # the climb runs (on this space TPE's walk names few of a peak's neighbours; TPE's own draws fill the
    # batches where none of them can be named)
    assert climbed > 0


def test_an_equal_point_one_change_away_does_not_hide_a_peak():
    # two told points A and B one change apart with the same cost, B one change from an untold C that is two from A:
    # B is a peak of its own (a plateau), so C is among the neighbours; only a strictly better point makes a slope
    space = trap_space()
    digits, tps = grid(space)
    ks, vs = single_changes(space, range(len(space.dims)))
    ok = np.flatnonzero(tps > 0)
    pairs = [(a, b, c) for a in ok for b in ok for c in ok
             if (digits[a] != digits[b]).sum() == 1 and (digits[b] != digits[c]).sum() == 1
             and (digits[a] != digits[c]).sum() == 2]
    a, b, c = pairs[0]
    told = np.stack([digits[a], digits[b]])
    known_keys = space.index_of(told)
    known = lambda k: np.isin(k, known_keys)  # noqa: E731
    out = peak_neighbours(space, told, np.array([1.0, 1.0]), known, 1000, np.random.default_rng(0), ks, vs,
                          guided=False)
    assert digits[c].tolist() in out.tolist()
    # with A strictly better, B is on A's slope: only A's neighbours, and C is not one of them
    out = peak_neighbours(space, told, np.array([1.0, 1.5]), known, 1000, np.random.default_rng(0), ks, vs,
                          guided=False)
    assert digits[c].tolist() not in out.tolist()


def test_refactorings_move_gpus_between_degrees_and_data_parallelism_keeping_the_micro_batches():
    from search._local import refactorings

    # Llama 3 8B on 256 H100s, batch 256: x = tp 1, pp 4, cp 4, micro-batch 4, so dp = 256 / 16 = 16 and a step
    # has 256 / (16 x 4) = 4 micro-batches. By hand, the changes of one or two of tp, pp, cp with a new micro-batch
    # that keep dp x micro-batch = 64: cp 4 -> 1 (dp 64, micro-batch 1) and pp 4 -> 2 (dp 32, micro-batch 2); tp 4
    # alone needs micro-batch 16, tp 4 with cp 1 keeps micro-batch 4 (no change of it), pp 2 with cp 1 needs 0.5.
    space = Space.from_options(model_preset("llama3-8b"), cluster_preset("h100x256"), global_batch=256, base="fixed",
                               framework="megatron-core", tp=[1, 4], pp=[2, 4], cp=[1, 4], micro_batch=[1, 2, 4],
                               schedule=["1f1b"], recompute=["selective"], zero_stage=[1])
    names = [d.name for d in space.dims]
    x = np.zeros(len(names), dtype=np.int64)
    for name, value in {"tp": 1, "pp": 4, "cp": 4, "micro_batch": 4}.items():
        x[names.index(name)] = space.dims[names.index(name)].choices.index(value)
    got = space.table(refactorings(space, x))
    assert sorted(zip(got["tp"].tolist(), got["pp"].tolist(), got["cp"].tolist(), got["dp"].tolist(),
                      got["micro_batch"].tolist())) == [(1, 2, 4, 32, 2), (1, 4, 1, 64, 1)]
    single, repaired = neighbours(space, x, *single_changes(space, range(len(names))))
    assert not any((r == x).all() for r in repaired)
    assert {tuple(r) for r in refactorings(space, x)} <= {tuple(r) for r in repaired}
