"""Edges every searcher handles, in-process and through the command line: a budget larger than the
space (each point asked once, the search then ends, ``evaluations`` counts distinct points) and a
space where under 1% of the valid points fit (every seed finds the plan that fits). Spaces of one
and two points and spaces where nothing fits: tests/test_edge_inputs.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cli import main
from costmodel import cluster_preset, evaluate, model_preset
from search import GradientSearcher, GridSearcher, MCMCSearcher, RandomSearcher, Space, TPESearcher

MODEL = "gpt3-175b"
# The spaces are priced under the generic profile (the counts below are its).
# 108 valid points (tp 2-8 x pp 4-16 x recompute x ZeRO 0-1 x micro-batch 1-2 on 1024 H100s, dp
# derived), 33 of them fit (counted by costmodel.evaluate in test_the_spaces_are_what_they_say).
SMALL = dict(tp=[2, 4, 8], pp=[4, 8, 16], recompute=["none", "selective", "full"], zero_stage=[0, 1],
             micro_batch=[1, 2])
SMALL_FLAGS = ["--tp", "2,4,8", "--pp", "4,8,16", "--recompute", "none,selective,full", "--zero-stage", "0,1",
               "--micro-batch", "1,2", "--framework", "generic"]
# 912 valid points on 64 H100s without recompute, two of which fit (0.22%): dp 4, tp 8, pp 1, cp 2,
# ZeRO-3, micro-batch 1, 1F1B, with and without sequence parallelism (weights, gradients and Adam
# state sharded over all 64 GPUs, the activations of half a sequence split 8 ways: 69.5 and 80.1 GB).
RARE = dict(tp=[1, 2, 4, 8], pp=[1, 2, 4, 8, 16], cp=[1, 2], recompute=["none"], zero_stage=[0, 1, 2, 3],
            micro_batch=[1, 2, 4], sequence_parallel=[False, True], schedule=["1f1b", "gpipe"])


def small_space() -> Space:
    return Space.from_options(model_preset(MODEL), cluster_preset("h100x1024"), global_batch=1536, base="fixed",
                              framework="generic", **SMALL)


def rare_space() -> Space:
    return Space.from_options(model_preset(MODEL), cluster_preset("h100x64"), global_batch=512, base="fixed",
                              framework="generic", **RARE)


def make(kind: str, space, seed: int, budget: int):
    return {"mcmc": lambda: MCMCSearcher(space, seed=seed, budget=budget),
            "tpe": lambda: TPESearcher(space, seed=seed, budget=budget),
            "gradient": lambda: GradientSearcher(space, seed=seed, budget=budget),
            "random": lambda: RandomSearcher(space, seed),
            "grid": lambda: GridSearcher(space, chunk=16)}[kind]()


def drive(searcher, space, budget: int, batch: int = 16) -> tuple[np.ndarray, int]:
    """(grid indices asked, in order; feasible rows) within ``budget`` evaluations."""
    seen, feasible, used = [], 0, 0
    while used < budget:
        t = searcher.ask(min(batch, budget - used))
        if len(t) == 0:
            break
        m = evaluate(space.model, space.cluster, t)
        searcher.tell(t, m)
        seen.append(space.index_of(space.digits_from_table(t)))
        feasible += int(m["feasible"].sum())
        used += len(t)
    return (np.concatenate(seen) if seen else np.zeros(0, dtype=np.int64)), feasible


def test_the_spaces_are_what_they_say():
    for space, valid, fit in ((small_space(), 108, 33), (rare_space(), 912, 2)):
        idx, table = space.rows(0, space.size)
        m = evaluate(space.model, space.cluster, table)
        assert (len(idx), int(m["feasible"].sum())) == (valid, fit)
    idx, table = rare_space().rows(0, rare_space().size)
    best = table.row(int(np.flatnonzero(evaluate(rare_space().model, rare_space().cluster, table)["feasible"])[0]))
    degrees = (best["dp"], best["tp"], best["pp"], best["cp"], best["zero_stage"], best["micro_batch"])
    assert degrees == (4, 8, 1, 2, 3, 1)


@pytest.mark.parametrize("kind", ["mcmc", "tpe", "gradient", "random", "grid"])
def test_a_budget_larger_than_the_space_asks_each_point_once(kind):
    """Budget 1,000 on 108 valid points: every point the searcher walks is asked once, then it
    stops. MCMC, TPE and the gradient search walk the 33 that fit (the memory screen); random and
    grid search every valid point."""
    space = small_space()
    asked, feasible = drive(make(kind, space, 3, 1000), space, 1000)
    assert len(asked) == len(np.unique(asked))
    assert feasible == 33
    walked = 33 if kind in ("mcmc", "tpe", "gradient") else 108
    assert len(asked) == walked
    if walked == 108:
        np.testing.assert_array_equal(np.sort(asked), space.valid_indices(0, space.size))


@pytest.mark.parametrize("kind", ["mcmc", "tpe", "gradient"])
def test_a_budget_larger_than_the_space_through_the_command_line(kind, capsys):
    code = main(["search", kind, "--model", MODEL, "--cluster", "h100x1024", "--space", "fixed", *SMALL_FLAGS,
                 "--budget", "1000", "--seed", "3", "--json"])
    out = capsys.readouterr()
    assert code == 0 and out.err == ""
    doc = json.loads(out.out)
    assert (doc["evaluations"], doc["feasible"]) == (33, 33)


@pytest.mark.parametrize("kind", ["mcmc", "tpe", "gradient"])
def test_under_one_percent_feasible_every_seed_finds_the_plan_that_fits(kind):
    """2% of 912 valid points (18 evaluations), two points fit (one plan, with and without sequence
    parallelism): each of seeds 0-4 finds one (random search over the valid points would in 18 draws
    with probability 4%)."""
    space = rare_space()
    for seed in range(5):
        _, feasible = drive(make(kind, space, seed, 18), space, 18)
        assert feasible >= 1, f"{kind} seed {seed}"
