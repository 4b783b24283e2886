"""Quick search-quality runs for choosing defaults: drawn problems whose grid is priced once and
looked up after (no evaluation per ask), so many seeds and option sets run in minutes.

    PYTHONPATH=. python3 benchmarks/bench_search_tune.py --draw-seed 1 [--pick 0,3,7] [--seeds 10]
        [--searchers mcmc,gradient] [--fraction 0.02] [--set mcmc:chains=2] [--mostly-infeasible]

Each problem of ``--draw 30 --draw-seed S`` (benchmarks/search_draw.py, its cache) is priced once over
its whole grid with costmodel.evaluate (closed forms, what the searchers see), and every searcher's
asks are answered from that table, matched row by row on the rows' strategy columns (a row not in
the grid stops the run: a searcher asked a point outside the space). Answers equal evaluate's on the
same rows (evaluate prices each row on its own). Also checks, per run, that the searcher never asks
more than its budget and never asks a point twice (``evaluations`` counts distinct points).

Prints per problem and searcher: median gap to the optimum, seeds within 1%, seeds feasible, the
distinct points asked per seed (median), seconds per seed (the searcher's own time: asks answered from
the priced grid); and a summary over the problems run. ``--json`` writes the gaps as
bench_search_problems.py does, for benchmarks/draw_table.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from search_draw import draw_problems, grid_of, spec_line, spec_space  # noqa: E402

from costmodel import evaluate  # noqa: E402
from search import GradientSearcher, MCMCSearcher, RandomSearcher, TPESearcher  # noqa: E402
from search._memo import match_rows, row_keys, stage_width  # noqa: E402

WITHIN = 0.01
BATCH = {"mcmc": 4096, "tpe": 16, "gradient": 4096, "random": 64}


class Lookup:
    """The grid of ``space`` priced once; ``__call__(table)`` its metrics from the grid."""

    def __init__(self, space, table) -> None:
        self.metrics = evaluate(space.model, space.cluster, table, framework=space.framework)
        self.width, self.layers = stage_width(space), space.model.layers
        keys = row_keys(table, self.layers, self.width)
        self.order = np.argsort(keys, kind="stable")
        self.keys = keys
        tps = np.where(self.metrics["feasible"], self.metrics["tokens_per_s"], 0.0)
        self.optimum = float(tps.max())
        self.valid, self.feasible = len(table), int(self.metrics["feasible"].sum())

    def __call__(self, table):
        pos = match_rows(row_keys(table, self.layers, self.width), self.keys)
        if np.any(pos < 0):
            raise SystemExit(f"a searcher asked {int(np.sum(pos < 0))} rows outside the grid")
        return self.metrics.take(pos), pos


def make(name: str, space, seed: int, budget: int, opts: dict):
    o = opts.get(name, {})
    if name == "mcmc":
        return MCMCSearcher(space, seed=seed, budget=budget, **o)
    if name == "tpe":
        return TPESearcher(space, seed=seed, budget=budget, **o)
    if name == "gradient":
        return GradientSearcher(space, seed=seed, budget=budget, **o)
    return RandomSearcher(space, seed)


def run(searcher, lookup: Lookup, budget: int, batch: int, distinct: bool) -> tuple[float, int]:
    """(best feasible tokens/s within ``budget`` evaluations, distinct points asked)."""
    used, best, seen = 0, 0.0, []
    while used < budget:
        t = searcher.ask(min(batch, budget - used))
        if len(t) == 0:
            break
        m, pos = lookup(t)
        seen.append(pos)
        searcher.tell(t, m)
        best = max(best, float(np.where(m["feasible"], m["tokens_per_s"], 0.0).max()))
        used += len(t)
    pts = np.concatenate(seen) if seen else np.zeros(0, dtype=np.int64)
    if distinct and len(np.unique(pts)) != len(pts):
        raise SystemExit(f"{type(searcher).__name__} asked {len(pts) - len(np.unique(pts))} points twice")
    if used > budget:
        raise SystemExit(f"{type(searcher).__name__} asked {used} points, budget {budget}")
    return best, len(np.unique(pts))


def specs_of(path: str) -> tuple[list, list]:
    """(main, mostly-infeasible) problems of a specs file, each (spec, None), by their label's index."""
    out: dict[str, dict] = {"P": {}, "X": {}}
    with open(path) as f:
        for line in f:
            if line[:1] in out and ": --problem '" in line:
                label, _, rest = line.partition(": --problem '")
                out[label[0]][int(label[1:])] = json.loads(rest.strip().rstrip("'"))
    return ([(out["P"][i], None) for i in sorted(out["P"])], [(out["X"][i], None) for i in sorted(out["X"])])


def parse_sets(items: list[str]) -> dict:
    out: dict = {}
    for item in items:
        name, _, kv = item.partition(":")
        for pair in filter(None, kv.split(",")):
            k, _, v = pair.partition("=")
            val = {"true": True, "false": False}.get(v.lower()) if v.lower() in ("true", "false") else None
            if val is None:
                val = float(v) if any(c in v for c in ".e") else int(v)
            out.setdefault(name, {})[k] = val
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draw", type=int, default=30)
    ap.add_argument("--draw-seed", type=int, default=1)
    ap.add_argument("--max-valid", type=int, default=20_000)
    ap.add_argument("--pick", default="")
    ap.add_argument("--mostly-infeasible", action="store_true")
    ap.add_argument("--searchers", default="mcmc,gradient")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--fraction", type=float, default=0.02)
    ap.add_argument("--set", action="append", default=[], help="searcher:key=value,... (constructor options)")
    ap.add_argument("--cache", default="benchmarks/out/draw_grid.json")
    ap.add_argument("--specs", default="", help="run the problems of this file instead of a draw: lines "
                    "'P<i>: --problem '<spec>'' (X<i> for mostly-infeasible ones), as benchmarks/draw_table.py "
                    "--specs prints them")
    ap.add_argument("--json", default="", help="write every seed's gap here, as bench_search_problems.py --json "
                    "does (benchmarks/draw_table.py reads it)")
    args = ap.parse_args()
    opts = parse_sets(args.set)
    if args.specs:
        main_list, rare = specs_of(args.specs)
    else:
        main_list, rare = draw_problems(args.draw, args.draw_seed, max_valid=args.max_valid, min_feasible=1000,
                                        infeasible_max=8, cache_path=args.cache or None, log=lambda m: None)
    listed = rare if args.mostly_infeasible else main_list
    picks = [int(x) for x in args.pick.split(",")] if args.pick else range(len(listed))
    names = args.searchers.split(",")
    summary = {n: [] for n in names}
    records = []
    for i in picks:
        spec, _ = listed[i]
        space = spec_space(spec)
        table, _ = grid_of(space, args.max_valid)
        lookup = Lookup(space, table)
        budget = max(int(args.fraction * lookup.valid), 1)
        label = f"{'X' if args.mostly_infeasible else 'P'}{i}"
        tps = np.where(lookup.metrics["feasible"], lookup.metrics["tokens_per_s"], 0.0)
        rec = {"label": label, "group": "mostly-infeasible" if args.mostly_infeasible else "main", "spec": spec,
               "valid": lookup.valid, "feasible": lookup.feasible, "optimum": lookup.optimum,
               "within_1pct": int((tps >= (1 - WITHIN) * lookup.optimum).sum()), "runs": []}
        records.append(rec)
        print(f"{label} {spec_line(spec)}: {lookup.valid:,} valid, {lookup.feasible:,} feasible, budget {budget}",
              flush=True)
        for n in names:
            gaps, asked, t0 = [], [], time.perf_counter()
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                found, k = run(make(n, space, seed, budget, opts), lookup, budget, BATCH[n], n != "random")
                gaps.append(1 - found / lookup.optimum)
                asked.append(k)
            g = np.array(gaps)
            summary[n].append(g)
            rec["runs"].append({"fraction": args.fraction, "budget": budget, "searcher": n, "gaps": g.tolist(),
                                "s_per_seed": (time.perf_counter() - t0) / len(g)})
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({"draw": args.draw, "draw_seed": args.draw_seed, "problems": records}, f, indent=1)
            print(f"  {n:8s} median {100 * np.median(g):6.2f}%  within 1% {int((g <= WITHIN).sum()):2d}/{len(g)}  "
                  f"feasible {int((g < 1).sum())}/{len(g)}  asked {int(np.median(asked))}  "
                  f"{(time.perf_counter() - t0) / len(g):.1f} s/seed  gaps "
                  + " ".join(f"{100 * x:.1f}" for x in g), flush=True)
    print()
    for n in names:
        gs = summary[n]
        print(f"{n:8s} median<=1%: {sum(np.median(g) <= WITHIN for g in gs)}/{len(gs)}  "
              f">=8/10: {sum((g <= WITHIN).mean() >= 0.8 for g in gs)}/{len(gs)}  "
              f"seeds within 1%: {sum(int((g <= WITHIN).sum()) for g in gs)}/{sum(len(g) for g in gs)}")


if __name__ == "__main__":
    main()
