"""bench_hetero.py --speed's four tables priced by two source trees, alternating, one process per tree and round.

    MALLOC_TRIM_THRESHOLD_=268435456 MALLOC_MMAP_THRESHOLD_=33554432 PYTHONPATH=. taskset -c 0 \\
        python3 benchmarks/bench_hetero_ab.py BASE_TREE . [--rows 100000] [--rounds 3] [--repeats 3]

A tree is a directory holding costmodel/ and search/ (e.g. `git archive <commit> | tar -x -C DIR`). Each
round runs one process per tree in turn (so that the machine's load hits both alike); a process builds the
tables with its tree's code and prices each `--repeats` times (CPU time). Prints the best strategies/s per
table and each line's time per row against the same tree's homogeneous rows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np


def one(rows: int, repeats: int) -> dict:
    """Best CPU seconds per table under the tree on sys.path."""
    import costmodel
    import search
    try:  # (the bench rows, drawn by the tree on sys.path)
        from costmodel._bench_rows import bench_table
    except ImportError:  # a checkout from before the bench rows moved below the command line
        from cli._cmd_bench import bench_table

    model, hc = costmodel.model_preset("gpt3-175b"), costmodel.hetero_preset("a100x64+h100x64")
    cluster = costmodel.cluster_preset("h100x1024")

    def placements(**split):
        space = search.HeteroSpace.from_options(model, hc, global_batch=1536, pp=(4, 8), dp=(1, 2, 4, 8, 16),
                                                tp=(1, 2, 4, 8), microbatches=(16, 32, 64, 128),
                                                recompute=("none", "selective", "full"), **split)
        return space.table(np.random.default_rng(0).integers(0, space.radices, size=(rows, len(space.dims))))

    homo = bench_table(rows)
    tables = {"homogeneous": (cluster, homo), "one pool": (cluster, homo.as_placements(model.layers)),
              "with splits": (hc, placements(dp2=None)), "without splits": (hc, placements())}
    best = dict.fromkeys(tables, np.inf)
    for _ in range(repeats):
        for k, (c, t) in tables.items():
            t0 = time.process_time()
            costmodel.evaluate(model, c, t)
            best[k] = min(best[k], time.process_time() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trees", nargs="*")
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--one", action="store_true", help="(internal) time the tree on PYTHONPATH, print JSON")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.rows, args.repeats)))
        return
    best = {t: {} for t in args.trees}
    for _ in range(args.rounds):
        for tree in args.trees:
            env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
            out = subprocess.run([sys.executable, __file__, "--one", "--rows", str(args.rows), "--repeats",
                                  str(args.repeats)], env=env, capture_output=True, text=True, check=True).stdout
            for k, v in json.loads(out.splitlines()[-1]).items():
                best[tree][k] = min(best[tree].get(k, np.inf), v)
    for tree, b in best.items():
        lines = (f"{k} {args.rows / v:,.0f}/s ({v / b['homogeneous']:.2f}x)" for k, v in b.items())
        print(tree + ": " + ", ".join(lines))


if __name__ == "__main__":
    main()
