"""Heterogeneous placement: searched plan vs the homogeneous baselines, and evaluator speed.

    PYTHONPATH=. python benchmarks/bench_hetero.py            # margins on a100x64+h100x64
    PYTHONPATH=. python benchmarks/bench_hetero.py --speed    # strategies/s, hetero vs homogeneous

Margins (GPT-3 175B, global batch 1536, 64 A100 + 64 H100):
  (a) "all A100": the best plan of `plansweep rank`'s default space on 128 A100 (every GPU
      treated as the slower type; the A100 pool's links);
  (b) "H100 only": the best plan of the same space on the 64 H100 alone;
  (c) the placement search (search.MCMCSearcher over search.HeteroSpace, evaluate).
Every final plan is re-priced with the exact pipeline simulator.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from costmodel import (
    StrategyTable,
    evaluate,
    format_stage_rows,
    hetero_preset,
    make_cluster,
    model_preset,
    stage_rows,
)
from costmodel._bench_rows import bench_table
from search import HeteroSpace, MCMCSearcher, default_table


def best_homogeneous(model, cluster, batch):
    table = default_table(model, cluster, batch)
    fast = evaluate(model, cluster, table)
    top = np.argsort(fast["step_time_s"])[:20]
    exact = evaluate(model, cluster, table.take(top), pipeline="simulate")
    i = int(np.argmin(exact["step_time_s"]))
    return table.take(top[i:i + 1]), exact.take(slice(i, i + 1))


def search_hetero(model, hc, batch, budget, chains, seed, vpp=(1,), dp2=(0,)):
    """MCMCSearcher (helper "mcmc") over the placement space, started from the space's named
    placements and random points; the best distinct placements re-priced exactly."""
    space = HeteroSpace.from_options(model, hc, global_batch=batch, pp=(4, 6, 8, 12, 16), dp=(1, 2, 4, 8, 16),
                                     tp=(1, 2, 4, 8), microbatches=(16, 24, 32, 48, 64, 96, 128, 192),
                                     schedule=("1f1b",) + (("interleaved",) if max(vpp) > 1 else ()),
                                     recompute=("selective", "full"), zero_stage=(0, 1), vpp=vpp, dp2=dp2)
    s = MCMCSearcher(space, seed=seed, chains=chains, starts=(*space.start_points(), "random"))
    seen, tables, scores = 0, [], []
    while seen < budget:
        t = s.ask(64)
        if len(t) == 0:
            break
        m = evaluate(model, hc, t)
        s.tell(t, m)
        seen += len(t)
        keep = np.argsort(-m["tokens_per_s"])[:4]
        tables.append(t.take(keep))
        scores.append(m["tokens_per_s"][keep])
    cand = StrategyTable.concat(tables)
    top = np.argsort(-np.concatenate(scores))[:40]
    cand = cand.take(top)
    exact = evaluate(model, hc, cand, pipeline="simulate")
    i = int(np.argmax(exact["tokens_per_s"]))
    return space, cand.take(slice(i, i + 1)), exact.take(slice(i, i + 1)), seen


def margins(budget: int, chains: int, seed: int, vpp=(1,), dp2=(0,)) -> None:
    model, batch = model_preset("gpt3-175b"), 1536
    hc = hetero_preset("a100x64+h100x64")
    t0 = time.perf_counter()
    ta, ma = best_homogeneous(model, make_cluster("a100", 128), batch)
    tb, mb = best_homogeneous(model, make_cluster("h100", 64), batch)
    t1 = time.perf_counter()
    space, tc, mc, seen = search_hetero(model, hc, batch, budget, chains, seed, vpp, dp2)
    t2 = time.perf_counter()
    a, b, c = (float(m["tokens_per_s"][0]) for m in (ma, mb, mc))
    print(f"GPT-3 175B, global batch {batch}, cluster {hc.name}: {hc.describe()}")
    print(f"(a) all 128 GPUs as A100 (best of rank's default space): {a:,.0f} tokens/s  {ta.row(0)}")
    print(f"(b) the 64 H100 only (best of rank's default space):     {b:,.0f} tokens/s  {tb.row(0)}")
    print(f"(c) placement search (MCMCSearcher, {seen:,} evaluations, {chains} chains, seed {seed}): "
          f"{c:,.0f} tokens/s, "
          f"MFU {100 * float(mc['mfu'][0]):.1f}% of the pools' summed peak")
    print(f"margin over (a): {100 * (c / a - 1):+.1f}%   margin over (b): {100 * (c / b - 1):+.1f}%")
    print(f"baselines {t1 - t0:.1f} s, search {t2 - t1:.1f} s")
    print(format_stage_rows(stage_rows(model, hc, tc)))
    r = tc.row(0, [p.name for p in hc.pools])
    print("plan:", {k: v for k, v in r.items() if k != "stages"})


def speed(rows: int, repeats: int = 5, clock=time.perf_counter) -> None:
    """Strategies/s in one run: the homogeneous bench rows (`plansweep bench`'s space), the
    same rows as single-pool placements, and uniformly random digits of a placement space on
    a100x64+h100x64, with its split dims (about a quarter of the stages split) and without
    them (a search's default: --dp2 is opt-in)."""
    model = model_preset("gpt3-175b")
    from costmodel import cluster_preset

    cluster = cluster_preset("h100x1024")
    table = bench_table(rows)
    same = table.as_placements(model.layers)
    hc = hetero_preset("a100x64+h100x64")

    def random_placements(**split):
        space = HeteroSpace.from_options(model, hc, global_batch=1536, pp=(4, 8), dp=(1, 2, 4, 8, 16),
                                         tp=(1, 2, 4, 8), microbatches=(16, 32, 64, 128),
                                         recompute=("none", "selective", "full"), **split)
        d = np.random.default_rng(0).integers(0, space.radices, size=(rows, len(space.dims)))
        return space.table(d)

    placed = random_placements(dp2=None)  # with stages split across the pools
    plain = random_placements()

    evaluate(model, cluster, table.take(slice(0, 1000)))
    evaluate(model, cluster, same.take(slice(0, 1000)))
    runs = {"homo": lambda: evaluate(model, cluster, table), "same": lambda: evaluate(model, cluster, same),
            "placed": lambda: evaluate(model, hc, placed), "plain": lambda: evaluate(model, hc, plain)}
    best = dict.fromkeys(runs, np.inf)
    for _ in range(repeats):  # interleaved, so load from other jobs hits every run alike
        for k, fn in runs.items():
            t0 = clock()
            fn()
            best[k] = min(best[k], clock() - t0)
    t_h, t_s, t_p, t_n = best["homo"], best["same"], best["placed"], best["plain"]
    print(f"rows {rows:,}, best of {repeats}")
    print(f"homogeneous evaluate, bench space:               {rows / t_h:12,.0f} strategies/s")
    print(f"evaluate, the same rows as one pool:      {rows / t_s:12,.0f} strategies/s "
          f"({t_s / t_h:.2f}x the time; S = {same.num_stages} stage columns)")
    active = placed["layers"] > 0
    split = (placed["dp2"] > 0) & (placed["pool2"] != placed["pool"]) & active
    print(f"evaluate, placements on a100x64+h100x64:  {rows / t_p:12,.0f} strategies/s "
          f"({t_p / t_h:.2f}x the time; pp 4/8, S = {placed.num_stages}; {100 * split.sum() / active.sum():.0f}% of "
          f"stages split across the pools, {100 * split.any(axis=1).mean():.0f}% of rows with a split)")
    print(f"evaluate, the same without splits:        {rows / t_n:12,.0f} strategies/s "
          f"({t_n / t_h:.2f}x the time)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--speed", action="store_true")
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=5, help="--speed: best of this many interleaved runs")
    ap.add_argument("--cpu-time", action="store_true",
                    help="--speed: time with the process's CPU time (time.process_time), less sensitive to other jobs")
    ap.add_argument("--budget", type=int, default=20_000, help="evaluations for the placement search")
    ap.add_argument("--chains", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vpp", default="1", help="interleaving choices of the placement space, e.g. 1,2 (default 1)")
    ap.add_argument("--dp2", default="0",
                    help="replicas a stage may put on a second pool, e.g. 0,1,2,4,8 (default 0: no splits)")
    args = ap.parse_args()
    if args.speed:
        speed(args.rows, args.repeats, time.process_time if args.cpu_time else time.perf_counter)
    else:
        ints = lambda text: tuple(int(x) for x in text.split(","))  # noqa: E731
        margins(args.budget, args.chains, args.seed, ints(args.vpp), ints(args.dp2))


if __name__ == "__main__":
    main()
