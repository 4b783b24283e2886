"""Feasibility first: the memory-only screen equals the evaluator's verdict,
searchers walk only the points that fit, enumerate them when the budget covers them, never end
without a feasible plan when one exists and the budget is 2% of the space, and scale their
start-up with the budget."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel import REASONS, cluster_preset, evaluate, model_preset
from costmodel._memory import memory_screen
from search import MCMCSearcher, RandomSearcher, Space, TPESearcher, default_space, exact_space
from search._mcmc import auto_chains
from search._screen import ScreenedSpace, fitting_indices
from search._tpe import auto_startup_trials

OOM = REASONS.index("out_of_memory")


def _mostly_oom():
    """Megatron 530B on 3072 A100 at global batch 1536, two schedules, two recompute choices,
    micro-batch 1-2: most points do not fit."""
    model, cluster = model_preset("megatron-530b"), cluster_preset("selene-3072")
    return Space.from_options(model, cluster, global_batch=1536, schedule=["1f1b", "interleaved"],
                              recompute=["selective", "full"], micro_batch=[1, 2])


@pytest.fixture(scope="module")
def small():
    space = _mostly_oom()
    idx, t = space.rows(0, space.size)
    m = evaluate(space.model, space.cluster, t)
    return space, idx, t, m


@pytest.mark.parametrize("which", ["exact", "default-70b", "default-530b"])
def test_memory_screen_equals_evaluate_row_by_row(which):
    if which == "exact":
        model, cluster = model_preset("gpt3-175b"), cluster_preset("h100x1024")
        space = exact_space(model, cluster, 1536)
    elif which == "default-70b":
        model, cluster = model_preset("llama3-70b"), cluster_preset("dgx-h100-1024")
        space = default_space(model, cluster, 1024)
    else:
        model, cluster = model_preset("megatron-530b"), cluster_preset("selene-3072")
        space = default_space(model, cluster, 1536)
    _, t = space.rows(0, space.size)
    if len(t) > 20_000:  # a random 12,000 (the closed forms are row-wise; a sample keeps the test short)
        t = t.take(np.sort(np.random.default_rng(0).choice(len(t), 12_000, replace=False)))
    m = evaluate(model, cluster, t)
    mem, reason = memory_screen(model, cluster, t)
    np.testing.assert_array_equal(reason, m["reason"])
    priced = (m["reason"] == 0) | (m["reason"] == OOM)
    np.testing.assert_array_equal(mem[priced], m["mem_total_bytes"][priced])
    assert np.any(reason == OOM) and np.any(reason == 0)  # both verdicts occur


def test_screened_space_holds_exactly_the_feasible_points(small):
    space, idx, t, m = small
    members = fitting_indices(space)
    np.testing.assert_array_equal(members, idx[m["feasible"]])
    assert 0 < members.size < len(idx) / 2  # mostly out of memory
    walk = ScreenedSpace(space, members)
    np.testing.assert_array_equal(walk.valid(space.digits_of(idx)), m["feasible"])
    draws = walk.random_digits(np.random.default_rng(0), 500)
    assert np.all(np.isin(space.index_of(draws), members))


def _run(searcher, space, budget, batch):
    used, best, first_batch_feasible = 0, 0.0, None
    asked = []
    while used < budget:
        t = searcher.ask(min(batch, budget - used))
        if len(t) == 0:
            break
        m = evaluate(space.model, space.cluster, t)
        searcher.tell(t, m)
        if first_batch_feasible is None:
            first_batch_feasible = int(m["feasible"].sum())
        asked.append(space.index_of(space.digits_from_table(t)))
        best = max(best, float(np.where(m["feasible"], m["tokens_per_s"], 0.0).max()))
        used += len(t)
    return best, used, first_batch_feasible, np.concatenate(asked) if asked else np.zeros(0, np.int64)


@pytest.mark.parametrize("kind", ["mcmc", "tpe"])
def test_feasible_plan_at_two_percent(small, kind):
    space, idx, _, m = small
    budget = int(0.02 * len(idx))  # 2% of the valid points
    for seed in range(3):
        s = (MCMCSearcher(space, seed=seed, budget=budget) if kind == "mcmc"
             else TPESearcher(space, seed=seed, budget=budget))
        best, used, first, _ = _run(s, space, budget, 16)
        assert used == budget and best > 0 and first >= 1
        assert s.feasible_seen == used  # every evaluated point fits: the walk is the screened space


@pytest.mark.parametrize("kind", ["mcmc", "tpe"])
def test_budget_covering_the_points_that_fit_enumerates_them(small, kind):
    space, idx, _, m = small
    feasible = idx[m["feasible"]]
    optimum = float(m["tokens_per_s"][m["feasible"]].max())
    budget = feasible.size + 7
    s = (MCMCSearcher(space, seed=0, budget=budget) if kind == "mcmc" else TPESearcher(space, seed=0, budget=budget))
    best, used, _, asked = _run(s, space, budget, 64)
    assert used == feasible.size  # all of them, each once, then nothing more to ask
    np.testing.assert_array_equal(np.sort(asked), feasible)
    assert best == optimum and s.feasible_seen == feasible.size


def test_random_search_is_not_screened(small):
    """The baseline stays uniform over the valid points (out-of-memory ones included)."""
    space, idx, _, m = small
    best, used, _, asked = _run(RandomSearcher(space, 0), space, 400, 400)
    assert not np.all(np.isin(asked, idx[m["feasible"]]))


def test_start_up_scales_with_the_budget():
    # budget // 32 chains within [2, 8]; budget // 10 TPE start-up trials within [4, 20]
    assert [auto_chains(b) for b in (None, 10, 42, 128, 256, 980, 10**6)] == [8, 2, 2, 4, 8, 8, 8]
    assert [auto_startup_trials(b) for b in (None, 10, 42, 128, 980)] == [20, 4, 4, 12, 20]
    space = _mostly_oom()
    assert MCMCSearcher(space, seed=0, budget=42, screen=False).chains == 2
    assert TPESearcher(space, seed=0, budget=42, screen=False)._sampler_args["n_startup_trials"] == 4
