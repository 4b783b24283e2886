"""Search quality on several problems: MCMC, TPE, the gradient search and random search against
each problem's grid optimum, at budgets that are fractions of the problem's valid points.

    PYTHONPATH=. python benchmarks/bench_search_problems.py [--problems all|name,name]
        [--fractions 0.02,0.1] [--seeds 10] [--seeds-at 0.1=5] [--searchers mcmc,tpe,random]
    PYTHONPATH=. python benchmarks/bench_search_problems.py --draw 30 --draw-seed 2
        [--fractions 0.01,0.02,0.05] [--searchers mcmc,tpe,gradient,random] [--pick 3,7] [--json out.json]
    PYTHONPATH=. python benchmarks/bench_search_problems.py --problem '{"kind": "exact", ...}'

Named problems (PROBLEMS) or drawn ones (``--draw N --draw-seed S``: benchmarks/search_draw.py draws
problems from the presets, keeps N whose grid lists at most ``--max-valid`` valid points with at least
``--min-feasible`` feasible, and the mostly-infeasible ones met on the way, under 1% feasible; each
problem's header line holds its spec, which ``--problem`` takes back). Grid figures of drawn problems
are cached in ``--cache`` (default benchmarks/out/draw_grid.json, not committed).

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
from search import GradientSearcher, MCMCSearcher, RandomSearcher, Space, TPESearcher

WITHIN = 0.01
BATCH = {"mcmc": 4096, "tpe": 16, "gradient": 16, "random": 64}

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
    if name == "gradient":
        return GradientSearcher(space, seed=seed, budget=budget)
    return RandomSearcher(space, seed)


def run(searcher, space, budget: int, batch: int) -> float:
    """Best feasible tokens/s found within ``budget`` evaluations (0 if none)."""
    used, best = 0, 0.0
    while used < budget:
        t = searcher.ask(min(batch, budget - used))
        if len(t) == 0:
            break
        m = evaluate(space.model, space.cluster, t, framework=getattr(space, "framework", None))
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


def seed_gaps(s_name: str, space, optimum: float, budget: int, seeds, label: str) -> tuple[np.ndarray, float]:
    """(gaps to the optimum per seed, seconds per seed) of one searcher at one budget."""
    gaps, t0 = [], time.perf_counter()
    for seed in seeds:
        found = run(make(s_name, space, seed, budget), space, budget, BATCH[s_name])
        gaps.append(1 - found / optimum)
        print(f"  {label} {s_name} seed {seed}: gap {100 * gaps[-1]:.2f}%", file=sys.stderr, flush=True)
    return np.array(gaps), (time.perf_counter() - t0) / max(len(gaps), 1)


def named_main(args) -> None:
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
                gaps, per_seed = seed_gaps(s_name, space, optimum, budget, range(nseeds), f"{name} {frac:.0%}")
                print(f"| {name} | {frac:.0%} = {budget:,} | {s_name} | {100 * np.median(gaps):.2f}% "
                      f"| {int((gaps <= WITHIN).sum())}/{nseeds} | {int((gaps < 1).sum())}/{nseeds} "
                      f"| {per_seed:.1f} |", flush=True)


def drawn_main(args) -> None:
    """Drawn problems (--draw / --problem): one header per problem (its spec as JSON), one markdown
    row per (budget, searcher), then the summary per (budget, searcher); --json writes every gap."""
    import json

    from search_draw import draw_problems, grid_of, price_grid, spec_line, spec_space

    if args.problem:
        spec = json.loads(args.problem)
        space = spec_space(spec)
        table, why = grid_of(space, args.max_valid)
        if table is None:
            raise SystemExit(f"--problem: a grid of at most --max-valid={args.max_valid:,} valid points, got {why}")
        problems, rare = [(spec, price_grid(space, table))], []
    else:
        problems, rare = draw_problems(args.draw, args.draw_seed, max_valid=args.max_valid,
                                       min_feasible=args.min_feasible, infeasible_max=args.infeasible,
                                       cache_path=args.cache or None, log=lambda m: print(m, flush=True),
                                       kinds=args.kinds.split(",") if args.kinds else None)
    listed = [("main", i, sp, fig) for i, (sp, fig) in enumerate(problems)]
    listed += [("mostly-infeasible", i, sp, fig) for i, (sp, fig) in enumerate(rare)]
    picks = {int(x) for x in args.pick.split(",")} if args.pick else None
    fractions = [float(x) for x in args.fractions.split(",")]
    names = args.searchers.split(",")
    out = []
    print("| problem | budget | searcher | median gap | seeds within 1% | seeds feasible | s per seed |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
    for group, i, spec, fig in listed:
        if args.mostly_infeasible != (group != "main") or (picks is not None and i not in picks):
            continue
        label = f"{'P' if group == 'main' else 'X'}{i}"
        print(f"<!-- {label} ({group}): {spec_line(spec)}; {fig['valid']:,} valid, {fig['feasible']:,} feasible, "
              f"optimum {fig['optimum']:,.0f} tokens/s, {fig['within_1pct']} points within 1%; "
              f"--problem '{json.dumps(spec)}' -->", flush=True)
        space = spec_space(spec)
        rec = {"label": label, "group": group, "spec": spec, **fig, "runs": []}
        for frac in fractions:
            budget = max(int(frac * fig["valid"]), 1)
            for s_name in names:
                gaps, per_seed = seed_gaps(s_name, space, fig["optimum"], budget,
                                           range(args.first_seed, args.first_seed + args.seeds), f"{label} {frac:.0%}")
                rec["runs"].append({"fraction": frac, "budget": budget, "searcher": s_name,
                                    "gaps": gaps.tolist(), "s_per_seed": per_seed})
                print(f"| {label} | {frac:.0%} = {budget:,} | {s_name} | {100 * np.median(gaps):.2f}% "
                      f"| {int((gaps <= WITHIN).sum())}/{len(gaps)} | {int((gaps < 1).sum())}/{len(gaps)} "
                      f"| {per_seed:.1f} |", flush=True)
        out.append(rec)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"draw": args.draw, "draw_seed": args.draw_seed, "problems": out}, f, indent=1)
    summarise(out, fractions, names)


def summarise(out: list[dict], fractions: list[float], names: list[str]) -> None:
    """Per budget and searcher: problems with median gap <= 1%, with >= 8 of 10 seeds within 1%,
    where it beats random search (median gap below random's, or both at the optimum); on the
    mostly-infeasible problems, runs where some seed found no feasible plan."""
    print("\n| group | budget | searcher | median gap <= 1% | >= 80% of seeds within 1% | beats random | "
          "runs with a seed finding nothing |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
    for group in ("main", "mostly-infeasible"):
        recs = [r for r in out if r["group"] == group]
        if not recs:
            continue
        for frac in fractions:
            runs = [{x["searcher"]: np.array(x["gaps"]) for x in r["runs"] if x["fraction"] == frac} for r in recs]
            for s_name in names:
                med = [np.median(r[s_name]) for r in runs if s_name in r]
                good = sum(m <= WITHIN for m in med)
                most = sum((r[s_name] <= WITHIN).mean() >= 0.8 for r in runs if s_name in r)
                beats = sum(np.median(r[s_name]) < np.median(r["random"]) or np.median(r[s_name]) <= 0
                            for r in runs if s_name in r and "random" in r)
                none = sum((r[s_name] >= 1).any() for r in runs if s_name in r)
                print(f"| {group} | {frac:.0%} | {s_name} | {good}/{len(med)} | {most}/{len(med)} | "
                      f"{beats}/{len(med)} | {none}/{len(med)} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", default="all")
    ap.add_argument("--fractions", default=None, help="budgets as fractions of the valid points "
                    "(default 0.02,0.1 for named problems, 0.01,0.02,0.05 for drawn ones)")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--seeds-at", default="", help="fewer seeds at a fraction, e.g. 0.1=5")
    ap.add_argument("--searchers", default=None,
                    help="default mcmc,tpe,random (named), mcmc,tpe,gradient,random (drawn)")
    ap.add_argument("--draw", type=int, default=0, help="draw this many problems with enough feasible points")
    ap.add_argument("--draw-seed", type=int, default=1)
    ap.add_argument("--kinds", default="", help="draw only problems of these kinds (search_draw.KINDS, e.g. "
                    "placement,partition; max_tries bounds the candidates looked at)")
    ap.add_argument("--problem", default="", help="one drawn problem's spec (JSON, as its header line prints it)")
    ap.add_argument("--pick", default="", help="run only these problems of the draw (indices, e.g. 3,7)")
    ap.add_argument("--mostly-infeasible", action="store_true",
                    help="run the draw's mostly-infeasible problems (under 1%% feasible) instead of the main ones")
    ap.add_argument("--max-valid", type=int, default=200_000)
    ap.add_argument("--min-feasible", type=int, default=1000)
    ap.add_argument("--infeasible", type=int, default=8, help="mostly-infeasible problems kept at most")
    ap.add_argument("--cache", default="benchmarks/out/draw_grid.json")
    ap.add_argument("--json", default="", help="write every seed's gap here (drawn problems)")
    args = ap.parse_args()
    drawn = bool(args.draw or args.problem)
    args.fractions = args.fractions or ("0.01,0.02,0.05" if drawn else "0.02,0.1")
    args.searchers = args.searchers or ("mcmc,tpe,gradient,random" if drawn else "mcmc,tpe,random")
    if drawn:
        drawn_main(args)
    else:
        named_main(args)


if __name__ == "__main__":
    main()
