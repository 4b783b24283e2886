"""MCMCSearcher: the searcher contract, the Metropolis rule, resets, the memo, state."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel import InputError, cluster_preset, evaluate, model_preset
from search import MCMCSearcher, exact_space, partition_space
from tests.searcher_contract import SearcherContract, columns_equal, infeasible_metrics, placement_space

GPT3 = model_preset("gpt3-175b")
H100 = cluster_preset("h100x1024")


@pytest.fixture(scope="module")
def exact():
    return exact_space(GPT3, H100, 1536)


class TestMCMCContract(SearcherContract):
    @pytest.fixture
    def space(self, exact):
        return exact

    @pytest.fixture
    def make_searcher(self, space):
        return lambda seed: MCMCSearcher(space, seed=seed, chains=16)


class TestMCMCPartitionContract(SearcherContract):
    @pytest.fixture
    def space(self):
        return partition_space(GPT3, H100, 1536)

    @pytest.fixture
    def make_searcher(self, space):
        return lambda seed: MCMCSearcher(space, seed=seed, chains=16)


class TestMCMCPlacementContract(SearcherContract):
    @pytest.fixture(scope="class")
    def space(self):
        return placement_space()

    @pytest.fixture
    def make_searcher(self, space):
        # as the driver builds it: chains from the placement start points, then random ones
        return lambda seed: MCMCSearcher(space, seed=seed, chains=16, starts=(*space.start_points(), "random"))


def _drive(s, space, steps, n=None):
    told = []
    for _ in range(steps):
        t = s.ask(n or s.chains)
        m = evaluate(space.model, space.cluster, t)
        s.tell(t, m)
        told.append((t, m))
    return told


def test_greedy_chains_never_get_worse(exact):
    # beta huge: exp(-beta * rel) = 0 for any increase, so with hard memory walls and no
    # restarts each chain's cost is non-increasing.
    s = MCMCSearcher(exact, seed=7, chains=8, beta=1e12, reset_every=0, screen=False, memory_penalty=0.0,
                     restart_duplicates=False)
    _drive(s, exact, 1)
    prev = s.state_dict()["cost"]
    for _ in range(15):
        _drive(s, exact, 1)
        cost = s.state_dict()["cost"]
        both = np.isfinite(prev)
        assert np.all(cost[both] <= prev[both])
        prev = cost


def test_greedy_chains_never_get_worse_on_the_soft_cost(exact):
    # Soft memory walls: the chain's cost may become infinite (an out-of-memory point), but its
    # soft cost, time proxy x (1 + lambda x (mem / HBM - 1)) there, never rises.
    lam = 0.3
    s = MCMCSearcher(exact, seed=7, chains=8, beta=1e12, reset_every=0, screen=False, memory_penalty=lam,
                     restart_duplicates=False)

    def soft():
        st = s.state_dict()
        return np.where(np.isfinite(st["cost"]), st["cost"], st["proxy"] * (1 + lam * (st["excess"] - 1)))

    _drive(s, exact, 1)
    prev, moved_into_oom = soft(), False
    for _ in range(15):
        _drive(s, exact, 1)
        cur = soft()
        both = np.isfinite(prev)
        assert np.all(cur[both] <= prev[both] * (1 + 1e-12))
        moved_into_oom |= bool(np.any(np.isinf(s.state_dict()["cost"]) & both))
        prev = cur
    assert moved_into_oom  # the walls were crossed at least once (else the test shows nothing)


def test_beta_zero_accepts_every_known_proposal(exact):
    # beta = 0: exp(0) = 1 > u, so a chain moves to every feasible proposal it is told about.
    s = MCMCSearcher(exact, seed=3, chains=8, beta=0.0, reset_every=0, starts=("random",))
    _drive(s, exact, 3)
    st = s._draw()
    t = exact.table(st.proposal[st.ask_rows])
    m = evaluate(exact.model, exact.cluster, t)
    s.tell(t, m)
    x = s.state_dict()["x"]
    feas_rows = st.ask_rows[np.asarray(m["feasible"])]
    assert np.array_equal(x[feas_rows], st.proposal[feas_rows])


def test_reset_moves_every_chain_to_the_best(exact):
    s = MCMCSearcher(exact, seed=1, chains=8, reset_every=5)
    told = _drive(s, exact, 5)
    tps = np.concatenate([m["tokens_per_s"] for _, m in told])
    x = s.state_dict()["x"]
    assert np.all(x == x[0])
    _, best_tps = s.best()
    assert best_tps == pytest.approx(tps.max())


def test_never_asks_a_point_twice(exact):
    s = MCMCSearcher(exact, seed=2, chains=16)
    seen = []
    for t, _ in _drive(s, exact, 20):
        seen.append(exact.index_of(exact.digits_from_table(t)))
    allidx = np.concatenate(seen)
    assert len(np.unique(allidx)) == len(allidx)


def test_ask_fewer_than_chains_and_partial_tell(exact):
    s = MCMCSearcher(exact, seed=4, chains=16)
    t = s.ask(5)
    assert len(t) == 5
    assert columns_equal(t, s.ask(5))  # ask is pure until tell
    s.tell(t.take(np.arange(3)), evaluate(GPT3, H100, t.take(np.arange(3))))
    assert s.step >= 1
    t2 = s.ask(16)
    idx2 = exact.index_of(exact.digits_from_table(t2))
    assert not np.isin(exact.index_of(exact.digits_from_table(t.take(np.arange(3)))), idx2).any()


def test_infeasible_start_walks_to_feasible(exact):
    # Data parallelism does not fit GPT-3 175B; a chain started there reaches a feasible point
    # (unscreened: a screened walk starts at the most data-parallel point that fits).
    s = MCMCSearcher(exact, seed=0, chains=4, starts=("data_parallel",), screen=False)
    first = _drive(s, exact, 1)
    assert not first[0][1]["feasible"].any()
    _drive(s, exact, 60)
    assert s.best()[1] > 0


def test_bad_arguments(exact):
    with pytest.raises(InputError, match="chains"):
        MCMCSearcher(exact, seed=0, chains=0)
    with pytest.raises(InputError, match="beta"):
        MCMCSearcher(exact, seed=0, beta=-1.0)
    with pytest.raises(InputError, match="starts"):
        MCMCSearcher(exact, seed=0, starts=("zero_bubble_magic",))
    s = MCMCSearcher(exact, seed=0)
    with pytest.raises(InputError, match="n"):
        s.ask(-1)
    state = s.state_dict()
    with pytest.raises(InputError, match="state"):
        MCMCSearcher(exact, seed=0, chains=4).load_state_dict(state)


def test_infeasible_tells_keep_state_plain(exact):
    s = MCMCSearcher(exact, seed=5, chains=8)
    t = s.ask(8)
    s.tell(t, infeasible_metrics(t))
    state = s.state_dict()
    for v in state.values():
        assert isinstance(v, (int, float, np.ndarray))


def test_partition_mcmc_beats_best_uniform_partition():
    # Llama-3 70B (80 layers, 128k vocabulary) on 64 H100, tp 8, pp 8, 1F1B, micro-batch 1:
    # uniform stages of 10 layers fit only with full recompute everywhere (stage 0 holds 8
    # micro-batches in flight plus the embedding). Uneven stages (fewer layers where more
    # micro-batches are in flight) with per-stage recompute fit with selective recompute.
    from cli._cmd_search import run_searcher
    from costmodel import make_cluster
    from search import Space

    model, cluster = model_preset("llama3-70b"), make_cluster("h100", 64, gpus_per_node=8)
    common = dict(global_batch=256, base="fixed", tp=[8], pp=[8], micro_batch=[1], schedule=["1f1b"])
    uniform = Space.from_options(model, cluster, recompute=["none", "selective", "full"], **common)
    _, t = uniform.rows(0, uniform.size)
    best_uniform = float(evaluate(model, cluster, t)["tokens_per_s"].max())
    assert best_uniform > 0
    part = Space.from_options(model, cluster, stage_shift=list(range(-4, 5)),
                              stage_recompute=["none", "selective", "full"], **common)
    s = MCMCSearcher(part, seed=0, chains=8, beta=100.0)
    _, _, bt, bm = run_searcher(s, model, cluster, budget=3000, batch=8, top=1)
    assert bm["tokens_per_s"][0] > 1.05 * best_uniform
    row = bt.row(0)
    assert len(set(row["stage_layers"])) > 1 and sum(row["stage_layers"]) == 80


def test_stale_chains_restart(exact):
    # restart_after = 3: no chain goes 3 steps without improving its own best.
    s = MCMCSearcher(exact, seed=8, chains=8, beta=1e12, reset_every=0, restart_after=3)
    for _ in range(12):
        _drive(s, exact, 1)
        assert np.all(s.state_dict()["stale"] < 3)
    with pytest.raises(InputError, match="jump"):
        MCMCSearcher(exact, seed=0, jump=2.0)
    with pytest.raises(InputError, match="double"):
        MCMCSearcher(exact, seed=0, double=-0.5)


def test_cli_mcmc_and_tpe(tmp_path):
    import json

    from costmodel import StrategyTable
    from tests.in_process import cli  # `plansweep search ...` in this process: no interpreter start-up each

    base = ["search"]
    common = ["--model", "gpt3-175b", "--cluster", "h100x1024", "--space", "exact", "--seed", "1", "--json",
              "--top", "2"]
    for argv, budget in ((["mcmc", "--chains", "8", "--beta", "20"], 200),
                         (["tpe", "--storage", str(tmp_path / "t.journal")], 32)):
        out = cli(*base, *argv, *common, "--budget", str(budget))
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        assert 0 < doc["evaluations"] <= budget and doc["best"]
        row = doc["best"][0]
        cols = {k: row[k] for k in ("dp", "tp", "pp", "cp", "micro_batch", "global_batch", "vpp", "zero_stage",
                                    "schedule", "recompute", "precision", "sequence_parallel", "overlap_dp")}
        m = evaluate(GPT3, H100, StrategyTable.from_columns(**cols))
        assert bool(m["feasible"][0]) and row["tokens_per_s"] == pytest.approx(float(m["tokens_per_s"][0]))
    bad = cli(*base, "mcmc", "--beta", "-1", *common)
    assert bad.returncode == 2 and "--beta" in bad.stderr and "Traceback" not in bad.stderr


def test_every_named_start_is_priced_first_even_with_fewer_chains_than_starts(exact):
    """A budget of 64 runs 2 chains (auto_chains: one per 32 evaluations, at least 2), fewer than the four default
    starts (data-parallel, Megatron, FSDP, random): the first sample, round(0.2 x 64) = 13 evaluations, still holds
    every named start the space has, the FSDP recipe among them, not only the two the chains start at."""
    from search._mcmc import DEFAULT_STARTS

    s = MCMCSearcher(exact, seed=0, budget=64)
    assert s.chains == 2 < len(DEFAULT_STARTS)
    named = s.space.start_points()  # (the space screened for memory, as the chains walk it)
    assert {"data_parallel", "megatron", "fsdp"} <= set(named)
    asked = []
    while len(asked) < 13:
        t = s.ask(13 - len(asked))
        s.tell(t, evaluate(GPT3, H100, t))
        asked.extend(map(tuple, exact.digits_from_table(t)))
    assert {tuple(int(v) for v in named[n]) for n in ("data_parallel", "megatron", "fsdp")} <= set(asked)
