"""Searcher settings side by side on the exact space (the tuning behind BENCHMARKS.md, "Search
quality"): for each configuration, the seeds whose best is within 1% of the grid's optimum at a
budget of 2% of the grid's evaluations, and the median and mean gap.

    PYTHONPATH=. taskset -c 1 python benchmarks/bench_search_ablation.py --first-seed 10 --seeds 30 \
        --config mcmc:memory_penalty=0.1 --config mcmc:memory_penalty=0,restart_novel=false [--jobs 1] \
        [--framework generic]

A configuration is SEARCHER:OPTIONS with OPTIONS as in bench_search_quality.py's --mcmc / --tpe
(keyword arguments over the searcher's defaults; "mcmc:" alone is the defaults). Tuning seeds
are kept apart from the seeds 0-9 of the reported table.
"""

from __future__ import annotations

import argparse
import functools
import time
from multiprocessing import Pool

import numpy as np

from benchmarks.bench_search_quality import BATCH, WITHIN, make, parse_options, run
from costmodel import cluster_preset, evaluate, model_preset
from search import exact_space

BUDGET_FRACTION = 0.02


@functools.cache
def problem(framework: str | None):
    """(space, optimum tokens/s, budget) of GPT-3 175B's exact space on h100x1024, batch 1536, under
    ``framework`` (None: the default)."""
    model, cluster = model_preset("gpt3-175b"), cluster_preset("h100x1024")
    space = exact_space(model, cluster, 1536, framework=framework)
    _, table = space.rows(0, space.size)
    optimum = float(evaluate(model, cluster, table, framework=framework)["tokens_per_s"].max())
    return space, optimum, int(BUDGET_FRACTION * len(table))


def _job(args: tuple[str, str | None, int]) -> tuple[str, float, float]:
    config, framework, seed = args
    name, _, opts = config.partition(":")
    space, optimum, budget = problem(framework)
    t0 = time.perf_counter()
    best, _ = run(make(name, space, seed, parse_options(opts)), space, budget, BATCH[name], optimum)
    return config, 1 - best / optimum, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", action="append", required=True, help="SEARCHER:OPTIONS (repeat)")
    ap.add_argument("--first-seed", type=int, default=10)
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--framework", default=None, help="the profile the space is priced under (default: the default)")
    args = ap.parse_args()
    jobs = [(c, args.framework, s) for c in args.config for s in range(args.first_seed, args.first_seed + args.seeds)]
    out: dict[str, list[tuple[float, float]]] = {c: [] for c in args.config}
    if args.jobs > 1:
        with Pool(args.jobs) as pool:
            results = list(pool.imap_unordered(_job, jobs))
    else:
        results = [_job(j) for j in jobs]
    for config, gap, dt in results:
        out[config].append((gap, dt))
    _, optimum, budget = problem(args.framework)
    print(f"framework {args.framework or 'default'}, optimum {optimum:,.0f} tokens/s, budget {budget} evaluations, "
          f"seeds {args.first_seed}-{args.first_seed + args.seeds - 1}")
    print("| configuration | seeds within 1% | median gap | mean gap | s per seed |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for config, v in out.items():
        g = np.array([x[0] for x in v])
        print(f"| {config} | {int((g <= WITHIN).sum())}/{len(g)} | {100 * np.median(g):.2f}% | {100 * g.mean():.2f}% "
              f"| {np.mean([x[1] for x in v]):.1f} |", flush=True)


if __name__ == "__main__":
    main()
