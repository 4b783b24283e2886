"""Search quality on the exact space (issue 4, point 3): MCMC, TPE and random search against
the grid's optimum at a budget of 2% of the grid's evaluations.

    PYTHONPATH=. python benchmarks/bench_search_quality.py [--seeds 10] [--fraction 0.02]
        [--searchers mcmc,tpe,random] [--mcmc beta=20,memory_penalty=0.5] [--tpe n_startup_trials=20]
        [--space exact|default] [--first-seed 0] [--model gpt3-175b] [--cluster h100x1024]
        [--global-batch 1536]

Evaluations are the rows a searcher asks (every asked row is a valid point of the space; the
searchers do not ask a point twice except RandomSearcher, whose repeats count). Prints one
row per searcher: budget, median gap to the optimum's tokens/s over the seeds, the fraction of
seeds within 1%, and the median evaluations to reach 1% (">budget" when most seeds do not).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from costmodel import cluster_preset, evaluate, model_preset
from search import MCMCSearcher, RandomSearcher, TPESearcher, default_space, exact_space

WITHIN = 0.01


def make(name: str, space, seed: int, options: dict | None = None):
    """A searcher with its defaults, or with ``options`` (keyword arguments) where given."""
    options = options or {}
    if name == "mcmc":
        return MCMCSearcher(space, seed=seed, **options)
    if name == "tpe":
        return TPESearcher(space, seed=seed, **options)
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


BATCH = {"mcmc": 4096, "tpe": 16, "random": 64}


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
    ap.add_argument("--space", default="exact", choices=("exact", "default"),
                    help="default: rank's default space for the same model and cluster")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--model", default="gpt3-175b", help="model preset (the exact space is meant for the default)")
    ap.add_argument("--cluster", default="h100x1024", help="cluster preset")
    ap.add_argument("--global-batch", type=int, default=1536)
    ap.add_argument("--mcmc", default="", help="MCMCSearcher options other than the defaults, e.g. beta=20,chains=8")
    ap.add_argument("--tpe", default="", help="TPESearcher options other than the defaults, e.g. n_startup_trials=50,walks=digits")
    args = ap.parse_args()
    model, cluster = model_preset(args.model), cluster_preset(args.cluster)
    space = (exact_space if args.space == "exact" else default_space)(model, cluster, args.global_batch)
    _, table = space.rows(0, space.size)
    m = evaluate(model, cluster, table)
    optimum = float(m["tokens_per_s"].max())
    budget = int(args.fraction * len(table))
    print(f"{args.space} space ({args.model} on {args.cluster}, global batch {args.global_batch}): {len(table):,} valid points (grid evaluations), {int(m['feasible'].sum()):,} feasible, "
          f"optimum {optimum:,.0f} tokens/s, {int((m['tokens_per_s'] >= (1 - WITHIN) * optimum).sum())} points "
          f"within 1%; budget {budget:,} evaluations ({args.fraction:.0%})")
    print("| searcher | budget | median gap to optimum | seeds within 1% | median evaluations to 1% | s per seed |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name in args.searchers.split(","):
        gaps, reaches, t0 = [], [], time.perf_counter()
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            options = parse_options(getattr(args, name, "") or "")
            best, reach = run(make(name, space, seed, options), space, budget, BATCH[name], optimum)
            gaps.append(1 - best / optimum)
            print(f"  {name} seed {seed}: gap {100 * gaps[-1]:.2f}%, reached 1% after {reach} evaluations, "
                  f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
            reaches.append(np.inf if reach is None else reach)
        med = float(np.median(reaches))
        print(f"| {name} | {budget:,} | {100 * np.median(gaps):.2f}% | {sum(g <= WITHIN for g in gaps)}/{args.seeds} "
              f"| {'>' + str(budget) if not np.isfinite(med) else int(med)} "
              f"| {(time.perf_counter() - t0) / args.seeds:.1f} |", flush=True)


if __name__ == "__main__":
    main()
