"""MCMC across memory walls (soft memory penalty) and its restarts (duplicates, novelty), on a
tiny hand-made space whose answers are worked out by hand.

The objective here is synthetic (a table of seconds per token and memory ratios per point, told
as Metrics), so that which points are walls is set by the test, not by the cost model."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel import METRIC_COLUMNS, REASONS, Metrics, cluster_preset, evaluate, model_preset
from search import MCMCSearcher, Space, exact_space
from search._memo import row_time_proxy

GPT3 = model_preset("gpt3-175b")
H100 = cluster_preset("h100x1024")
HBM = float(H100.gpu.hbm_bytes)
OOM = REASONS.index("out_of_memory")

# A 2 x 2 space: micro-batch {1, 2} x ZeRO {0, 1} (tp 8, so dp 128 and 12 samples per replica).
# Synthetic objective, seconds per token and memory / HBM per (micro_batch, zero_stage):
#   start (1, 0): 4e-6 s/token, fits          -> 250,000 tokens/s
#   (2, 0) and (1, 1): 2e-6 s/token, 1.5 x HBM -> out of memory (overflow 0.5)
#   best (2, 1): 2.5e-6 s/token, fits          -> 400,000 tokens/s
# Every single change from the start lands on an out-of-memory point: a hard wall.
WALL = {(1, 0): (4e-6, 0.5), (2, 0): (2e-6, 1.5), (1, 1): (2e-6, 1.5), (2, 1): (2.5e-6, 0.5)}
START_TPS, BEST_TPS = 250_000.0, 400_000.0


@pytest.fixture(scope="module")
def wall_space():
    return Space.from_options(GPT3, H100, global_batch=1536, base="fixed", tp=[8], micro_batch=[1, 2],
                              zero_stage=[0, 1])


def synthetic_metrics(table, objective) -> Metrics:
    """Metrics for ``objective`` {(micro_batch, zero_stage): (s per token, memory / HBM)}: the
    time goes into compute_s, rows above HBM are out of memory with infinite step time."""
    n = len(table)
    out = {k: np.zeros(n) for k in METRIC_COLUMNS}
    pairs = zip(table["micro_batch"].tolist(), table["zero_stage"].tolist(), strict=True)
    spt, ratio = np.array([objective[p] for p in pairs]).reshape(n, 2).T
    fits = ratio <= 1.0
    tokens = table["global_batch"] * GPT3.seq_len
    out["compute_s"] = spt * tokens
    out["step_time_s"] = np.where(fits, spt * tokens, np.inf)
    out["tokens_per_s"] = np.where(fits, 1.0 / spt, 0.0)
    out["mem_total_bytes"] = ratio * HBM
    out["feasible"] = fits
    out["reason"] = np.where(fits, 0, OOM).astype(np.int8)
    out["microbatches"] = np.ones(n, dtype=np.int64)
    return Metrics(out)


def _start_at(s, digits):
    """Put every chain of ``s`` at ``digits``, not evaluated yet (through the state hooks)."""
    st = s.state_dict()
    st["x"] = np.broadcast_to(np.asarray(digits, dtype=np.int64), st["x"].shape).copy()
    for k in ("cost", "excess", "proxy"):
        st[k] = np.full(s.chains, np.nan)
    s.load_state_dict(st)


def _run(s, space, objective, steps=40):
    """Drive ``s``; (best tokens/s after each tell, every asked point as (micro_batch, zero))."""
    bests, asked = [], []
    for _ in range(steps):
        t = s.ask(s.chains)
        if len(t) == 0:
            break
        asked += list(zip(t["micro_batch"].tolist(), t["zero_stage"].tolist(), strict=True))
        s.tell(t, synthetic_metrics(t, objective))
        bests.append(s.best()[1])
    return bests, asked


def _greedy(space, memory_penalty=0.0, **kw):
    # beta 1e12: only moves that do not raise the (soft) cost are ever taken, so the outcome is
    # the same for every draw of the proposals.
    s = MCMCSearcher(space, seed=0, chains=1, beta=1e12, reset_every=0, memory_penalty=memory_penalty, screen=False,
                     starts=("random",), **kw)
    _start_at(s, [0, 0])  # (micro_batch 1, ZeRO 0)
    return s


def test_hard_wall_traps_the_chain(wall_space):
    bests, asked = _run(_greedy(wall_space), wall_space, WALL)
    # Both neighbours are out of memory and a feasible chain never accepts one: the start stays best.
    assert bests[-1] == pytest.approx(START_TPS)
    assert (2, 1) not in asked


def test_soft_penalty_crosses_the_wall_and_never_reports_oom_as_best(wall_space):
    # lambda 1: an out-of-memory neighbour costs 2e-6 * (1 + 1 * 0.5) = 3e-6 < 4e-6, so it is
    # taken; from there the best point (2.5e-6 < 3e-6) is taken too.
    bests, asked = _run(_greedy(wall_space, memory_penalty=1.0), wall_space, WALL)
    assert (2, 1) in asked
    assert bests[-1] == pytest.approx(BEST_TPS)
    # While the chain sat on the out-of-memory point, the best stayed the feasible start.
    assert all(b == pytest.approx(START_TPS) or b == pytest.approx(BEST_TPS) for b in bests)
    assert bests[0] == pytest.approx(START_TPS)


def test_a_heavy_penalty_keeps_the_wall(wall_space):
    # lambda 10: 2e-6 * (1 + 10 * 0.5) = 1.2e-5 > 4e-6, a 200% increase, refused at beta 1e12.
    bests, asked = _run(_greedy(wall_space, memory_penalty=10.0), wall_space, WALL)
    assert bests[-1] == pytest.approx(START_TPS)
    assert (2, 1) not in asked


def test_time_proxy_is_the_step_time_where_feasible_and_the_parts_where_not():
    space = exact_space(GPT3, H100, 1536)
    t = space.table(space.random_digits(np.random.default_rng(0), 3000))
    m = evaluate(GPT3, H100, t)
    proxy = row_time_proxy(t, m, GPT3.seq_len)
    f = m["feasible"]
    assert f.any() and (~f).any()
    np.testing.assert_allclose(proxy[f], 1.0 / m["tokens_per_s"][f], rtol=1e-12)
    parts = sum(m[k] for k in ("compute_s", "recompute_s", "tp_comm_s", "cp_comm_s", "pp_comm_s", "dp_comm_s",
                               "bubble_s", "optimizer_s"))
    # step time = the sum of its parts (costmodel.evaluate), so feasible rows agree both ways
    np.testing.assert_allclose(parts[f] / (1536 * GPT3.seq_len), proxy[f], rtol=1e-9)
    oom = ~f & (m["reason"] == OOM)
    np.testing.assert_allclose(proxy[oom], parts[oom] / (1536 * GPT3.seq_len), rtol=1e-12)
    assert np.all(np.isfinite(proxy[oom]))


def test_soft_penalty_resume_from_told_history(wall_space):
    opts = dict(memory_penalty=0.5, restart_after=2, restart_novel=True, restart_duplicates=True,
                starts=("random",))
    a = MCMCSearcher(wall_space, seed=3, chains=2, screen=False, **opts)
    told = []
    # Steps 0 and 1 evaluate all four points; steps 2 and 3 find nothing new: each ask is empty
    # after search._mcmc.MAX_SKIPPED_STEPS steps taken at once, with a restart every
    # EXHAUSTED_STEPS (step 3 leaves the chains elsewhere than step 2: seed 3, chains at
    # [[1, 0], [0, 1]] then [[1, 1], [1, 0]]). A further exhausted step (about a second, in
    # each searcher) would repeat that case.
    for _ in range(4):
        t = a.ask(2)
        m = synthetic_metrics(t, WALL)
        a.tell(t, m)
        told.append((t, m))
    b = MCMCSearcher(wall_space, seed=3, chains=2, screen=False, **opts)
    for t, m in told:
        b.ask(2)
        b.tell(t, m)
    sa, sb = a.state_dict(), b.state_dict()
    for k in ("x", "cost", "excess", "proxy", "visits", "memo_values"):
        np.testing.assert_array_equal(np.asarray(sa[k]), np.asarray(sb[k]))


@pytest.mark.parametrize("seed", range(8))
def test_novel_restart_goes_where_nothing_was_evaluated(wall_space, seed):
    # Hard walls, restart after 1 step without improvement. Step 0 evaluates the start (1, 0),
    # step 1 one neighbour, turned down; the chain restarts. Visits then: one digit of one
    # dimension seen twice, its other digit never (say ZeRO 0 twice, ZeRO 1 never). Novelty
    # (sum of 1 / sqrt(1 + visits)) is 1/sqrt(2) + 1/sqrt(3) = 1.28 for the two visited points
    # and 1/sqrt(2) + 1 = 1.71 for the two unvisited ones, so the restart (the most novel of 64
    # uniform draws over 4 points) lands on a point not evaluated yet. A uniform restart would
    # do so for half the seeds.
    s = MCMCSearcher(wall_space, seed=seed, chains=1, beta=1e12, reset_every=0, restart_after=1, screen=False,
                     memory_penalty=0.0, restart_novel=True, starts=("random",))
    _start_at(s, [0, 0])
    _, asked = _run(s, wall_space, WALL, steps=3)
    assert asked[0] == (1, 0) and asked[1] in ((2, 0), (1, 1))
    assert asked[2] not in asked[:2]


def test_duplicate_chains_restart(wall_space):
    # Two chains on the start, told: the second duplicates the first and restarts at the most
    # novel point (visits: (1, 0) once, so the most novel is (2, 1), the one differing in both
    # dimensions: 1 + 1 = 2 against 1 + 1/sqrt(2) for the two others).
    s = MCMCSearcher(wall_space, seed=0, chains=2, beta=1e12, reset_every=0, restart_duplicates=True, screen=False,
                     memory_penalty=0.0, restart_novel=True, starts=("random",))
    _start_at(s, [0, 0])
    t = s.ask(2)
    assert len(t) == 1  # one distinct point asked for both chains
    s.tell(t, synthetic_metrics(t, WALL))
    x = s.state_dict()["x"]
    assert x[0].tolist() == [0, 0] and x[1].tolist() == [1, 1]
