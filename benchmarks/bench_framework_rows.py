"""The default framework's speed against generic's, and what a framework column costs, side by side in one run.

    PYTHONPATH=. taskset -c 0 python3 benchmarks/bench_framework_rows.py [--rows N] [--repeats K]

Rows: `plansweep bench`'s table (costmodel._bench_rows.bench_table), GPT-3 175B on h100x1024, priced five ways: under
the default (megatron-core, named by no argument), under generic, with every row carrying megatron-core's code in a
framework column, and half megatron-core and half generic rows in one table (one vectorised call per framework, the
results put back in row order). Each is timed by the process's CPU time, best of K evaluations taken in turn (so load
from other jobs hits every line alike).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from costmodel import StrategyTable, cluster_preset, evaluate, model_preset
from costmodel._bench_rows import bench_table
from costmodel._strategy import FRAMEWORK_NAMES


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    model, cluster = model_preset("gpt3-175b"), cluster_preset("h100x1024")
    table = bench_table(args.rows)
    mcore, generic = FRAMEWORK_NAMES.index("megatron-core"), FRAMEWORK_NAMES.index("generic")
    half = np.where(np.random.default_rng(0).random(args.rows) < 0.5, mcore, generic).astype(np.int8)
    lines = {
        "default (megatron-core)": (table, None),
        "generic": (table, "generic"),
        "megatron-core as a column": (StrategyTable({**table.columns, "framework": np.full(args.rows, mcore,
                                                                                         dtype=np.int8)}), None),
        "half megatron-core, half generic": (StrategyTable({**table.columns, "framework": half}), None),
    }
    for t, fw in lines.values():
        evaluate(model, cluster, t.take(slice(0, 2000)), framework=fw)  # warm-up
    best = dict.fromkeys(lines, float("inf"))
    for _ in range(args.repeats):
        for name, (t, fw) in lines.items():
            t0 = time.process_time()
            evaluate(model, cluster, t, framework=fw)
            best[name] = min(best[name], time.process_time() - t0)
    base = best["generic"]
    print(f"rows {args.rows:,}, best of {args.repeats} (CPU time)")
    print("| rows priced | strategies/s | vs generic |")
    print("| --- | ---: | ---: |")
    for name, t in best.items():
        print(f"| {name} | {args.rows / t:,.0f} | {base / t:.2f}x |")


if __name__ == "__main__":
    main()
