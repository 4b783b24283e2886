"""The evaluator of two checkouts side by side: one resident process each, evaluations taken in turn.

    python3 benchmarks/bench_side_by_side.py BASE TREE [--model M] [--framework F] [--rows N] [--rounds R]

Each checkout's process (PYTHONPATH set to it) builds `plansweep bench`'s rows (costmodel._bench_rows.bench_table),
evaluates them once to warm up, then one evaluation each time it is told to; the two take turns R times (the order
flipped every round), so that load from other jobs hits both alike. Prints each one's best and median CPU time of an
evaluation (the process's, not wall time) and the ratios BASE / TREE.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

WORKER = r"""
import sys, time
from costmodel import cluster_preset, evaluate, model_preset
from costmodel._bench_rows import bench_table
model, cluster = model_preset(sys.argv[1]), cluster_preset("h100x1024")
table = bench_table(int(sys.argv[3]), experts=model.experts)
evaluate(model, cluster, table, framework=sys.argv[2])
print("ready", flush=True)
for _ in sys.stdin:
    t0 = time.process_time()
    evaluate(model, cluster, table, framework=sys.argv[2])
    print(time.process_time() - t0, flush=True)
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("tree")
    ap.add_argument("--model", default="gpt3-175b")
    ap.add_argument("--framework", default="megatron-core")
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=16)
    args = ap.parse_args()
    trees = {"base": os.path.abspath(args.base), "tree": os.path.abspath(args.tree)}
    procs = {k: subprocess.Popen([sys.executable, "-c", WORKER, args.model, args.framework, str(args.rows)], cwd=path,
                                 env={**os.environ, "PYTHONPATH": path}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True) for k, path in trees.items()}
    for p in procs.values():
        assert p.stdout.readline().strip() == "ready"
    cpu = {k: [] for k in procs}
    for r in range(args.rounds):
        for k in (("base", "tree") if r % 2 == 0 else ("tree", "base")):
            procs[k].stdin.write("go\n")
            procs[k].stdin.flush()
            cpu[k].append(float(procs[k].stdout.readline()))
    for p in procs.values():
        p.stdin.close()
        p.wait()
    best, med = ({k: f(v) for k, v in cpu.items()} for f in (min, statistics.median))
    print(f"{args.model} {args.framework}, {args.rows:,} rows, {args.rounds} rounds: "
          + "; ".join(f"{k} best {best[k] * 1e3:.1f} ms ({args.rows / best[k] / 1e6:.2f}M/s), median "
                      f"{med[k] * 1e3:.1f} ms" for k in procs)
          + f"; base / tree: best {best['base'] / best['tree']:.2f}x, median {med['base'] / med['tree']:.2f}x")


if __name__ == "__main__":
    main()
