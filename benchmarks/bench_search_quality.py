"""Search quality on the exact space: MCMC, TPE, the gradient
search and random search against the grid's optimum at a budget of 2% of the grid's evaluations.

    PYTHONPATH=. python benchmarks/bench_search_quality.py [--seeds 10] [--fraction 0.02]
        [--searchers mcmc,tpe,gradient,random] [--mcmc beta=20,memory_penalty=0.5]
        [--tpe n_startup_trials=20] [--gradient lr=0.5,entropy=0.01]
        [--space exact|default|partition] [--first-seed 0] [--model gpt3-175b]
        [--cluster h100x1024] [--global-batch 1536] [--budget N] [--reference TOKENS_PER_S] [--no-budget]

``--space partition``: the partition problem of tests/test_search_mcmc.py (Llama 3 70B on 64
H100, global batch 256, tp 8, pp 8, 1F1B, micro-batch 1, boundary shifts -4..4 and recompute
per stage: 3.1e10 points, no grid). Its optimum is unknown: gaps are measured against
``--reference`` (the best tokens/s any run has found; default: the best of this run), the
budget is ``--budget`` (default 3,000, the test's).

Each searcher is told the budget, as ``plansweep search --budget`` tells it (its start sample and late
local phase scale with it); ``--no-budget`` leaves it open-ended (MCMC's 8 chains, TPE without its local
phase), as a searcher driven without one runs.

Evaluations are the rows a searcher asks (every asked row is a valid point of the space; no
searcher asks a point twice, random search included: it draws without replacement). Prints one
row per searcher: budget, median gap to the optimum's tokens/s over the seeds, the fraction of
seeds within 1%, and the median evaluations to reach 1% (">budget" when most seeds do not).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from costmodel import cluster_preset, evaluate, model_preset
from search import GradientSearcher, MCMCSearcher, RandomSearcher, Space, TPESearcher, default_space, exact_space

WITHIN = 0.01


def make(name: str, space, seed: int, options: dict | None = None):
    """A searcher with its defaults, or with ``options`` (keyword arguments) where given."""
    options = options or {}
    if name == "mcmc":
        return MCMCSearcher(space, seed=seed, **options)
    if name == "tpe":
        return TPESearcher(space, seed=seed, **options)
    if name == "gradient":
        return GradientSearcher(space, seed=seed, **options)
    return RandomSearcher(space, seed)


def parse_options(text: str) -> dict:
    """"beta=20,memory_penalty=0.5,walks=digits" -> {"beta": 20, "memory_penalty": 0.5, "walks":
    "digits"} (ints stay ints, true/false are booleans, other words stay strings)."""
    out: dict = {}
    for item in filter(None, text.split(",")):
        key, value = item.split("=")
        if value.lstrip("-").isdigit():
            out[key] = int(value)
        elif value in ("true", "false"):
            out[key] = value == "true"
        else:
            try:
                out[key] = float(value)
            except ValueError:
                out[key] = value
    return out


BATCH = {"mcmc": 4096, "tpe": 16, "gradient": 4096, "random": 64}


def partition_problem():
    """The partition problem of tests/test_search_mcmc.py (module docstring)."""
    from costmodel import make_cluster

    model, cluster = model_preset("llama3-70b"), make_cluster("h100", 64, gpus_per_node=8)
    return Space.from_options(model, cluster, global_batch=256, base="fixed", tp=[8], pp=[8], micro_batch=[1],
                              schedule=["1f1b"], stage_shift=list(range(-4, 5)),
                              stage_recompute=["none", "selective", "full"])


def run(searcher, space, budget: int, batch: int, optimum: float) -> tuple[float, int | None]:
    """Best tokens/s found within ``budget`` evaluations and the evaluations to reach 1%."""
    used, best, reach = 0, 0.0, None
    while used < budget:
        t = searcher.ask(min(batch, budget - used))
        if len(t) == 0:
            break
        m = evaluate(space.model, space.cluster, t)
        searcher.tell(t, m)
        tps = np.where(m["feasible"], m["tokens_per_s"], 0.0)
        hit = np.flatnonzero(np.maximum.accumulate(np.maximum(tps, best)) >= (1 - WITHIN) * optimum)
        if reach is None and hit.size:
            reach = used + int(hit[0]) + 1
        best = max(best, float(tps.max()))
        used += len(t)
    return best, reach


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--fraction", type=float, default=0.02)
    ap.add_argument("--searchers", default="mcmc,tpe,random")
    ap.add_argument("--space", default="exact", choices=("exact", "default", "partition"),
                    help="default: rank's default space for the same model and cluster; partition: the "
                    "partition problem (module docstring)")
    ap.add_argument("--budget", type=int, default=None, help="evaluations (partition space; default 3000)")
    ap.add_argument("--reference", type=float, default=None,
                    help="partition space: tokens/s to measure gaps against (default: this run's best)")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--no-budget", action="store_true", help="do not tell the searchers the budget")
    ap.add_argument("--model", default="gpt3-175b", help="model preset (the exact space is meant for the default)")
    ap.add_argument("--cluster", default="h100x1024", help="cluster preset")
    ap.add_argument("--global-batch", type=int, default=1536)
    ap.add_argument("--mcmc", default="", help="MCMCSearcher options other than the defaults, e.g. beta=20,chains=8")
    ap.add_argument("--tpe", default="", help="TPESearcher options other than the defaults, e.g. n_startup_trials=50,walks=digits")
    ap.add_argument("--gradient", default="", help="GradientSearcher options other than the defaults, e.g. lr=0.5")
    args = ap.parse_args()
    if args.space == "partition":
        partition(args)
        return
    model, cluster = model_preset(args.model), cluster_preset(args.cluster)
    space = (exact_space if args.space == "exact" else default_space)(model, cluster, args.global_batch)
    _, table = space.rows(0, space.size)
    m = evaluate(model, cluster, table)
    optimum = float(m["tokens_per_s"].max())
    budget = int(args.fraction * len(table)) if args.budget is None else args.budget
    print(f"{args.space} space ({args.model} on {args.cluster}, global batch {args.global_batch}): {len(table):,} valid points (grid evaluations), {int(m['feasible'].sum()):,} feasible, "
          f"optimum {optimum:,.0f} tokens/s, {int((m['tokens_per_s'] >= (1 - WITHIN) * optimum).sum())} points "
          f"within 1%; budget {budget:,} evaluations ({args.fraction:.0%})")
    print("| searcher | budget | median gap to optimum | seeds within 1% | median evaluations to 1% | s per seed |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name in args.searchers.split(","):
        gaps, reaches, t0 = [], [], time.perf_counter()
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            options = parse_options(getattr(args, name, "") or "")
            if name != "random" and not args.no_budget:
                options.setdefault("budget", budget)
            best, reach = run(make(name, space, seed, options), space, budget, BATCH[name], optimum)
            gaps.append(1 - best / optimum)
            print(f"  {name} seed {seed}: gap {100 * gaps[-1]:.2f}%, reached 1% after {reach} evaluations, "
                  f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
            reaches.append(np.inf if reach is None else reach)
        med = float(np.median(reaches))
        print(f"| {name} | {budget:,} | {100 * np.median(gaps):.2f}% | {sum(g <= WITHIN for g in gaps)}/{args.seeds} "
              f"| {'>' + str(budget) if not np.isfinite(med) else int(med)} "
              f"| {(time.perf_counter() - t0) / args.seeds:.1f} |", flush=True)


def partition(args) -> None:
    """The partition problem: every searcher's best per seed, gaps to the reference."""
    space = partition_problem()
    budget = 3000 if args.budget is None else args.budget
    found: dict[str, list[tuple[float, float]]] = {}
    for name in args.searchers.split(","):
        t0, found[name] = time.perf_counter(), []
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            options = parse_options(getattr(args, name, "") or "")
            if name != "random" and not args.no_budget:
                options.setdefault("budget", budget)
            best, _ = run(make(name, space, seed, options), space, budget, BATCH[name], np.inf)
            found[name].append((best, time.perf_counter() - t0))
            print(f"  {name} seed {seed}: best {best:,.1f} tokens/s, {found[name][-1][1]:.0f} s", file=sys.stderr,
                  flush=True)
    best_seen = max(b for runs in found.values() for b, _ in runs)
    reference = best_seen if args.reference is None else args.reference
    print(f"partition space (Llama 3 70B on 64 H100, batch 256, tp 8, pp 8, 1F1B): {float(space.size):.3e} points; "
          f"budget {budget:,} evaluations; reference {reference:,.1f} tokens/s (best of this run "
          f"{best_seen:,.1f})")
    print("| searcher | budget | median gap to reference | seeds within 1% | best tokens/s (median) | s per seed |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, runs in found.items():
        gaps = [1 - b / reference for b, _ in runs]
        print(f"| {name} | {budget:,} | {100 * np.median(gaps):.2f}% | {sum(g <= WITHIN for g in gaps)}/{len(runs)} "
              f"| {np.median([b for b, _ in runs]):,.0f} | {runs[-1][1] / len(runs):.1f} |", flush=True)


if __name__ == "__main__":
    main()
