"""MoE rows against dense rows: `plansweep bench`'s rows priced in one process, CPU time.

    PYTHONPATH=. taskset -c 0 python3 benchmarks/bench_moe_ratio.py [--rows N] [--repeats R]

The same 1M bench rows (costmodel._bench_rows.bench_table, with an ep column for the MoE models) for
gpt3-175b and three MoE presets on h100x1024, each evaluated R times, alternating, best CPU time
(time.process_time: time waiting for the core does not count) per model; printed: dense
strategies/s and each MoE model's rate as a multiple of it (target: at least 0.7x).
"""

from __future__ import annotations

import argparse
import time

from costmodel import cluster_preset, evaluate, model_preset
from costmodel._bench_rows import bench_table

MODELS = (("gpt3-175b", 1), ("deepseek-v3", 256), ("mixtral-8x7b", 8), ("qwen3-30b-a3b", 128))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=4)
    args = ap.parse_args()
    cluster = cluster_preset("h100x1024")
    cases = {name: (model_preset(name), bench_table(args.rows, experts=e)) for name, e in MODELS}
    for model, table in cases.values():
        evaluate(model, cluster, table)  # warm-up
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(args.repeats):
        for name, (model, table) in cases.items():
            t0 = time.process_time()
            evaluate(model, cluster, table)
            best[name] = min(best[name], time.process_time() - t0)
    dense = args.rows / best["gpt3-175b"]
    print(f"dense {dense:,.0f} strategies/s; " + "; ".join(
        f"{name} {args.rows / b:,.0f}/s = {args.rows / b / dense:.2f}x" for name, b in best.items()
        if name != "gpt3-175b"))


if __name__ == "__main__":
    main()
