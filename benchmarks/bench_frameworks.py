"""Evaluator speed per framework profile, side by side in one run, against the default profile
(DEFAULT_FRAMEWORK, megatron-core: any profile within 0.8x of its strategies/s).

    PYTHONPATH=. python benchmarks/bench_frameworks.py [--rows N] [--repeats K]

Rows: `plansweep bench`'s table (costmodel._bench_rows.bench_table), GPT-3 175B on h100x1024. Each
profile is timed with the process's CPU time, best of K runs taken in turn (so load from other
jobs hits every profile alike).
"""

from __future__ import annotations

import argparse
import time

from costmodel import FRAMEWORKS, cluster_preset, evaluate, model_preset
from costmodel._frameworks import DEFAULT_FRAMEWORK
from costmodel._bench_rows import bench_table


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    model, cluster = model_preset("gpt3-175b"), cluster_preset("h100x1024")
    table = bench_table(args.rows)
    for fw in FRAMEWORKS:
        evaluate(model, cluster, table.take(slice(0, 2000)), framework=fw)  # warm-up
    best = dict.fromkeys(FRAMEWORKS, float("inf"))
    for _ in range(args.repeats):
        for fw in FRAMEWORKS:
            t0 = time.process_time()
            evaluate(model, cluster, table, framework=fw)
            best[fw] = min(best[fw], time.process_time() - t0)
    base = best[DEFAULT_FRAMEWORK]
    print(f"rows {args.rows:,}, best of {args.repeats} (CPU time)")
    print(f"| framework | strategies/s | vs {DEFAULT_FRAMEWORK} |")
    print("| --- | ---: | ---: |")
    for fw, t in best.items():
        print(f"| {fw} | {args.rows / t:,.0f} | {base / t:.2f}x |")


if __name__ == "__main__":
    main()
