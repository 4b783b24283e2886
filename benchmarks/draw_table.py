"""The tables of BENCHMARKS.md "Search quality on drawn problems" from bench_search_problems.py's
--json files (several runs of one draw, e.g. one per searcher, merged by problem).

    PYTHONPATH=. python3 benchmarks/draw_table.py benchmarks/out/d2_mgr.json benchmarks/out/d2_tpe.json
        [--fraction 0.02] [--searchers mcmc,tpe,gradient,random] [--specs]

Prints the per-problem table (problem, valid and feasible points, optimum, each searcher's median gap
and seeds within 1%), the summary of the bars (problems with median gap <= 1%, with >= 8 of 10 seeds
within 1%, where the searcher beats random search; on mostly-infeasible problems, problems where some
seed found no feasible plan) and, with --specs, each problem's spec as --problem takes it back.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from search_draw import spec_line  # noqa: E402

WITHIN = 0.01


def merged(paths: list[str]) -> list[dict]:
    """Problems in draw order, each with every run of every file."""
    out: dict[str, dict] = {}
    for path in paths:
        with open(path) as f:
            for rec in json.load(f)["problems"]:
                have = out.setdefault(rec["label"], {**rec, "runs": []})
                have["runs"] += rec["runs"]
    return sorted(out.values(), key=lambda r: (r["group"] != "main", int(r["label"][1:])))


def cell(gaps) -> str:
    g = np.asarray(gaps)
    return f"{100 * np.median(g):.2f}%, {int((g <= WITHIN).sum())}/{len(g)}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--fraction", type=float, default=0.02)
    ap.add_argument("--searchers", default="mcmc,tpe,gradient,random")
    ap.add_argument("--specs", action="store_true")
    args = ap.parse_args()
    names = args.searchers.split(",")
    recs = merged(args.files)
    print("| problem | valid | feasible | optimum (tokens/s) | budget | " + " | ".join(names) + " |")
    print("| --- | ---: | ---: | ---: | ---: |" + " --- |" * len(names))
    runs = []
    for r in recs:
        by = {x["searcher"]: x for x in r["runs"] if abs(x["fraction"] - args.fraction) < 1e-9}
        if not by:
            continue
        runs.append((r, by))
        budget = next(iter(by.values()))["budget"]
        cells = [cell(by[n]["gaps"]) if n in by else "" for n in names]
        print(f"| {r['label']} {spec_line(r['spec'])} | {r['valid']:,} | {r['feasible']:,} | {r['optimum']:,.0f} "
              f"| {budget:,} | " + " | ".join(cells) + " |")
    print("\n| problems | searcher | median gap <= 1% | >= 8/10 seeds within 1% | beats random | "
          "some seed found no feasible plan |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for group in ("main", "mostly-infeasible"):
        sel = [(r, by) for r, by in runs if r["group"] == group]
        for n in names:
            have = [by for _, by in sel if n in by]
            if not have:
                continue
            g = [np.asarray(by[n]["gaps"]) for by in have]
            med = sum(np.median(x) <= WITHIN for x in g)
            most = sum((x <= WITHIN).mean() >= 0.8 for x in g)
            beats = [np.median(by[n]["gaps"]) < np.median(by["random"]["gaps"]) or np.median(by[n]["gaps"]) <= 0
                     for by in have if "random" in by]
            none = sum((x >= 1).any() for x in g)
            print(f"| {group} ({len(have)}) | {n} | {med}/{len(have)} | {most}/{len(have)} | "
                  f"{sum(beats)}/{len(beats)} | {none}/{len(have)} |")
    if args.specs:
        print()
        for r, _ in runs:
            print(f"{r['label']}: --problem '{json.dumps(r['spec'])}'")


if __name__ == "__main__":
    main()
