"""Searcher settings side by side on the exact space (the tuning behind BENCHMARKS.md, "Search
quality"): for each configuration, the seeds whose best is within 1% of the grid's optimum at a
budget of 2% of the grid's evaluations, and the median and mean gap.

    PYTHONPATH=. taskset -c 1 python benchmarks/bench_search_ablation.py --first-seed 10 --seeds 30 \
        --config mcmc:memory_penalty=0.1 --config mcmc:memory_penalty=0,restart_novel=false [--jobs 1]

A configuration is SEARCHER:OPTIONS with OPTIONS as in bench_search_quality.py's --mcmc / --tpe
(keyword arguments over the searcher's defaults; "mcmc:" alone is the defaults). Tuning seeds
are kept apart from the seeds 0-9 of the reported table.
"""

from __future__ import annotations

import argparse
import time
from multiprocessing import Pool

import numpy as np

from benchmarks.bench_search_quality import BATCH, WITHIN, make, parse_options, run
from costmodel import cluster_preset, evaluate, model_preset
from search import exact_space

_MODEL, _CLUSTER = model_preset("gpt3-175b"), cluster_preset("h100x1024")
_SPACE = exact_space(_MODEL, _CLUSTER, 1536)
_, _TABLE = _SPACE.rows(0, _SPACE.size)
OPTIMUM = float(evaluate(_MODEL, _CLUSTER, _TABLE)["tokens_per_s"].max())
BUDGET_FRACTION = 0.02
BUDGET = int(BUDGET_FRACTION * len(_TABLE))


def _job(args: tuple[str, str, int]) -> tuple[str, float, float]:
    config, _, seed = args
    name, _, opts = config.partition(":")
    t0 = time.perf_counter()
    best, _ = run(make(name, _SPACE, seed, parse_options(opts)), _SPACE, BUDGET, BATCH[name], OPTIMUM)
    return config, 1 - best / OPTIMUM, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", action="append", required=True, help="SEARCHER:OPTIONS (repeat)")
    ap.add_argument("--first-seed", type=int, default=10)
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args()
    jobs = [(c, "", s) for c in args.config for s in range(args.first_seed, args.first_seed + args.seeds)]
    out: dict[str, list[tuple[float, float]]] = {c: [] for c in args.config}
    if args.jobs > 1:
        with Pool(args.jobs) as pool:
            results = list(pool.imap_unordered(_job, jobs))
    else:
        results = [_job(j) for j in jobs]
    for config, gap, dt in results:
        out[config].append((gap, dt))
    print(f"budget {BUDGET} evaluations, seeds {args.first_seed}-{args.first_seed + args.seeds - 1}")
    print("| configuration | seeds within 1% | median gap | mean gap | s per seed |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for config, v in out.items():
        g = np.array([x[0] for x in v])
        print(f"| {config} | {int((g <= WITHIN).sum())}/{len(g)} | {100 * np.median(g):.2f}% | {100 * g.mean():.2f}% "
              f"| {np.mean([x[1] for x in v]):.1f} |", flush=True)


if __name__ == "__main__":
    main()
