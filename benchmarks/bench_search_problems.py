"""Search quality on several problems (issue 16, item 3): MCMC, TPE and random search against
each problem's grid optimum, at budgets of 2% and 10% of the problem's valid points.

    PYTHONPATH=. python benchmarks/bench_search_problems.py [--problems all|name,name]
        [--fractions 0.02,0.1] [--seeds 10] [--seeds-at 0.1=5] [--searchers mcmc,tpe,random]

A problem is a model, a cluster, a global batch and a space: plansweep rank's default space
(search.default_choices: derived from the model and the cluster, idle GPUs allowed, balanced and
lighter-ends stages, ZeRO 0-3) with some dimensions narrowed (PROBLEMS). The grid optimum is the
best tokens/s of costmodel.evaluate over every valid point (closed forms, as the searchers see
it). Evaluations are the rows a searcher asks (MCMC and TPE never ask a point twice; random
search draws with replacement and its repeats count). MCMC and TPE get the budget (their
automatic chains / start-up trials scale with it, and they screen the space for memory first,
search._screen); random search is the plain uniform baseline over the valid points.

Prints per problem a header line and one markdown row per (fraction, searcher): budget, median
gap to the optimum over the seeds, seeds within 1%, seeds that found a feasible plan, seconds
per seed.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from costmodel import cluster_preset, evaluate, model_preset
from search import MCMCSearcher, RandomSearcher, Space, TPESearcher

WITHIN = 0.01
BATCH = {"mcmc": 4096, "tpe": 16, "random": 64}

# name -> (model, cluster, global batch, narrowed dimensions of the default space)
PROBLEMS: dict[str, tuple[str, str, int, dict]] = {
    # mostly out of memory (the two examples, narrowed to a few thousand points)
    "530b-selene": ("megatron-530b", "selene-3072", 1536,
                    dict(schedule=["1f1b", "interleaved"], recompute=["selective", "full"], micro_batch=[1, 2])),
    "405b-h100x2048": ("llama3-405b", "h100x2048", 2048,
                       dict(schedule=["1f1b", "zb-h1"], recompute=["selective", "full"], micro_batch=[1],
                            sequence_parallel=[True])),
    # uneven (lighter-ends) stages among the best
    "530b-selene-zb": ("megatron-530b", "selene-3072", 1536,
                       dict(schedule=["1f1b", "zb-h1"], recompute=["selective"], sequence_parallel=[True],
                            micro_batch=[1, 2], cp=[1])),
    "1t-selene": ("megatron-1t", "selene-3072", 3072,
                  dict(schedule=["1f1b", "zb-h1"], recompute=["selective", "full"], sequence_parallel=[True],
                       micro_batch=[1, 2])),
    # more points fit
    "175b-h100x1024": ("gpt3-175b", "h100x1024", 1536,
                       dict(schedule=["1f1b", "interleaved"], recompute=["selective", "full"], micro_batch=[1, 2, 4],
                            sequence_parallel=[True], light_ends=[0, 1])),
    "70b-dgx-h100": ("llama3-70b", "dgx-h100-1024", 1024,
                     dict(schedule=["1f1b", "zb-h1"], recompute=["none", "selective", "full"], micro_batch=[1, 2],
                          sequence_parallel=[True])),
    "22b-dgx-a100": ("megatron-22b", "dgx-a100-1024", 1024,
                     dict(schedule=["1f1b", "interleaved"], recompute=["none", "selective"], micro_batch=[1, 2, 4],
                          light_ends=[0])),
    "8b-seed16": ("llama3-8b", "seed000-16", 512,
                  dict(schedule=["1f1b", "interleaved", "zb-h1"], micro_batch=[1, 2, 4])),
}


def problem_space(name: str) -> Space:
    model, cluster, batch, narrowed = PROBLEMS[name]
    return Space.from_options(model_preset(model), cluster_preset(cluster), global_batch=batch, **narrowed)


def make(name: str, space, seed: int, budget: int):
    if name == "mcmc":
        return MCMCSearcher(space, seed=seed, budget=budget)
    if name == "tpe":
        return TPESearcher(space, seed=seed, budget=budget)
    return RandomSearcher(space, seed)


def run(searcher, space, budget: int, batch: int) -> float:
    """Best feasible tokens/s found within ``budget`` evaluations (0 if none)."""
    used, best = 0, 0.0
    while used < budget:
        t = searcher.ask(min(batch, budget - used))
        if len(t) == 0:
            break
        m = evaluate(space.model, space.cluster, t)
        searcher.tell(t, m)
        best = max(best, float(np.where(m["feasible"], m["tokens_per_s"], 0.0).max()))
        used += len(t)
    return best


def describe(table, i: int) -> str:
    r = table.row(i)
    layers = r.get("stage_layers") or []
    uneven = len(set(layers)) > 1
    return (f"dp {r['dp']} tp {r['tp']} pp {r['pp']} cp {r['cp']} b {r['micro_batch']} {r['schedule']}"
            f"{' v' + str(r['vpp']) if r['vpp'] > 1 else ''} {r['recompute']} ZeRO {r['zero_stage']}"
            + (f", stages {layers[0]}/{layers[1]}../{layers[-1]}" if uneven else ""))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", default="all")
    ap.add_argument("--fractions", default="0.02,0.1")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--seeds-at", default="", help="fewer seeds at a fraction, e.g. 0.1=5")
    ap.add_argument("--searchers", default="mcmc,tpe,random")
    args = ap.parse_args()
    names = list(PROBLEMS) if args.problems == "all" else args.problems.split(",")
    seeds_at = {float(k): int(v) for k, v in (x.split("=") for x in filter(None, args.seeds_at.split(",")))}
    print("| problem | budget | searcher | median gap | seeds within 1% | seeds feasible | s per seed |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
    for name in names:
        space = problem_space(name)
        _, table = space.rows(0, space.size)
        m = evaluate(space.model, space.cluster, table)
        feas = m["feasible"]
        tps = np.where(feas, m["tokens_per_s"], 0.0)
        best = int(np.argmax(tps))
        optimum = float(tps[best])
        order = np.argsort(-tps)[:5]
        uneven_top = sum(len(set(table.row(int(i))["stage_layers"])) > 1 for i in order)
        print(f"<!-- {name}: {len(table):,} valid, {int(feas.sum()):,} feasible, optimum {optimum:,.0f} tokens/s "
              f"({describe(table, best)}); {uneven_top}/5 of the best 5 have uneven stages; "
              f"{int((tps >= (1 - WITHIN) * optimum).sum())} points within 1% -->", flush=True)
        for frac in (float(x) for x in args.fractions.split(",")):
            budget = max(int(frac * len(table)), 1)
            nseeds = seeds_at.get(frac, args.seeds)
            for s_name in args.searchers.split(","):
                gaps, t0 = [], time.perf_counter()
                for seed in range(nseeds):
                    found = run(make(s_name, space, seed, budget), space, budget, BATCH[s_name])
                    gaps.append(1 - found / optimum)
                    print(f"  {name} {frac:.0%} {s_name} seed {seed}: gap {100 * gaps[-1]:.2f}%", file=sys.stderr,
                          flush=True)
                gaps = np.array(gaps)
                print(f"| {name} | {frac:.0%} = {budget:,} | {s_name} | {100 * np.median(gaps):.2f}% "
                      f"| {int((gaps <= WITHIN).sum())}/{nseeds} | {int((gaps < 1).sum())}/{nseeds} "
                      f"| {(time.perf_counter() - t0) / nseeds:.1f} |", flush=True)


if __name__ == "__main__":
    main()
