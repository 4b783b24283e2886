"""MCMC ensemble throughput: proposals per second per core.

    PYTHONPATH=. taskset -c 0 python benchmarks/bench_mcmc_throughput.py [--chains 4096] [--steps 30]
        [--space exact|default] [--mcmc beta=20,reset_every=50]

One step = every chain proposes (search._moves, valid double moves, redraws), the new points are
evaluated with one costmodel.evaluate call, and every chain's Metropolis test runs in one numpy
expression. Proposals per second = chains * steps / wall time (evaluated rows reported beside it:
points already evaluated are answered from the memo, not evaluated again).
"""

from __future__ import annotations

import argparse
import time

from costmodel import cluster_preset, evaluate, model_preset
from search import EXACT_CHOICES, MCMCSearcher, Space, default_space, exact_space


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chains", type=int, default=4096)
    ap.add_argument("--mcmc", default="", help="MCMCSearcher options other than the defaults (bench_search_quality)")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--space", default="exact", choices=("exact", "default", "exact-1f1b"),
                    help="exact-1f1b: the exact space with 1F1B and GPipe only (closed forms, no simulator)")
    args = ap.parse_args()
    model, cluster = model_preset("gpt3-175b"), cluster_preset("h100x1024")
    if args.space == "exact-1f1b":
        opts = {**EXACT_CHOICES, "schedule": ["gpipe", "1f1b"], "vpp": [1]}
        space = Space.from_options(model, cluster, global_batch=1536, base="fixed", **opts)
    else:
        space = (exact_space if args.space == "exact" else default_space)(model, cluster, 1536)
    from benchmarks.bench_search_quality import parse_options

    s = MCMCSearcher(space, seed=0, chains=args.chains, **parse_options(args.mcmc))
    t = s.ask(args.chains)  # warm-up: the start points
    s.tell(t, evaluate(model, cluster, t))
    evaluated, step0, t0 = 0, s.step, time.perf_counter()
    while s.step - step0 < args.steps:
        t = s.ask(args.chains)
        s.tell(t, evaluate(model, cluster, t))
        evaluated += len(t)
    dt = time.perf_counter() - t0
    steps = s.step - step0  # steps taken, including those whose proposals were all known
    print(f"{args.space} space ({space.size:,} points), {args.chains} chains, {steps} steps: "
          f"{args.chains * steps / dt:,.0f} proposals/s, {evaluated / dt:,.0f} evaluated rows/s, "
          f"{evaluated / (args.chains * steps):.0%} of proposals new")


if __name__ == "__main__":
    main()
