"""A dense model prices exactly as before expert parallelism, row by row.

Evaluates the same rows with this tree and with a base tree (a checkout of the commit before the
change: ``git archive <commit> | tar -x -C /tmp/base``) in two processes, and compares every metric
column of the base (1e-12 relative; infinities and booleans exactly). Row sets:
    bench         plansweep bench's rows (costmodel._bench_rows.bench_table), GPT-3 175B on h100x1024
    exact         every valid row of the exact space of GPT-3 175B on h100x1024 (search.exact_space)
    exact-sim     the same rows under pipeline="simulate", megatron-core profile
    llama3-70b    seeded random rows (tests/test_reference.random_table), dgx-a100-1024, uneven stages
    megatron-22b  the same on h100x64 under fsdp2, and the MLP (seed 000) on seed000-16
    screen        costmodel.memory_screen over the exact space (mem_total_bytes, reason)
With ``--moe`` the MoE rows instead (the base must price ep): the bench rows of DeepSeek-V3,
Mixtral 8x7B and Qwen3-30B-A3B (costmodel._bench_rows.bench_table with their ep column), and random
rows with ep / etp (tests/test_reference.random_table, tests/test_moe_pricing.with_ep), uniform and
uneven stages, closed forms and the simulator, as StrategyTables and as placements
(StrategyTable.as_placements), and memory_screen on DeepSeek-V3's.

    python3 benchmarks/check_dense_identity.py --base /tmp/base [--bench-rows 1000000] [--moe]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def row_sets(bench_rows: int):
    """(name, model, cluster, table builder, framework, pipeline) of every set; tables are built
    inside each tree by its own code (the base tree has no ep column)."""
    return [
        ("bench", "gpt3-175b", "h100x1024", ("bench", bench_rows), None, "closed_form"),
        ("exact", "gpt3-175b", "h100x1024", ("exact",), None, "closed_form"),
        ("exact-sim", "gpt3-175b", "h100x1024", ("exact",), "megatron-core", "simulate"),
        ("llama3-70b", "llama3-70b", "dgx-a100-1024", ("random", 4000, True), "megatron-core", "closed_form"),
        ("megatron-22b", "megatron-22b", "h100x64", ("random", 4000, True), "fsdp2", "closed_form"),
        ("mlp", "seed000-mlp", "seed000-16", ("random", 2000, False), None, "closed_form"),
    ]


def moe_row_sets(bench_rows: int):
    """row_sets of MoE models: bench rows, random rows with ep / etp (``+ep``), placements (``het``)."""
    rows = min(bench_rows, 200_000)  # past a block, so that unlike DeepSeek-V3 rows get blocks of their own
    return [
        *((f"bench-{m}", m, "h100x1024", ("bench", rows), None, "closed_form")
          for m in ("deepseek-v3", "mixtral-8x7b", "qwen3-30b-a3b")),
        *((f"{m}-{u}-{pipe}", m, "h100x1024", ("random+ep", 3000, u == "uneven"), fw, pipe)
          for m, fw in (("deepseek-v3", "megatron-core-deepep"), ("mixtral-8x7b", None), ("qwen3-30b-a3b", "fsdp2"))
          for u in ("uniform", "uneven") for pipe in ("closed_form", "simulate")),
        ("deepseek-v3-het", "deepseek-v3", "h100x1024", ("random+ep-het", 6000, False), "megatron-core",
         "closed_form"),
        # 32 layers: 16 stages of 2 unlike (dense, dense + MoE, MoE), some feasible; past a block
        *((f"deepseek-v3-32-{pipe}", "deepseek-v3-32", "h100x1024", ("random+ep", 40000, False), None, pipe)
          for pipe in ("closed_form", "simulate")),
    ]


def preset(name: str):
    from costmodel import model_preset

    if name == "deepseek-v3-32":
        import dataclasses

        return dataclasses.replace(model_preset("deepseek-v3"), name=name, layers=32)
    return model_preset(name)


def build(kind, model, cluster):
    if kind[0] == "bench":
        try:
            from costmodel._bench_rows import bench_table
        except ImportError:  # a checkout from before the bench rows moved below the command line
            from cli._cmd_bench import bench_table

        return bench_table(kind[1], experts=model.experts)
    if kind[0] == "exact":
        from search._space import exact_space

        space = exact_space(model, cluster)
        idx = space.valid_indices(0, space.size)
        return space.table(space.digits_of(idx))
    # the test helpers of the tree being dumped (the working directory): they import its own modules
    sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
    from test_reference import random_table

    rng = np.random.default_rng(7)
    table = random_table(model, rng, kind[1], kind[2])
    if not kind[0].startswith("random+ep"):
        return table
    from test_moe_pricing import with_ep

    table = with_ep(table, rng, model.experts)
    if kind[0].endswith("-het"):
        sys.path.insert(0, os.path.join(HERE, "benchmarks"))
        from check_one_evaluator import as_placements

        return as_placements(table, model.layers)
    return table


def dump(out_dir: str, bench_rows: int, moe: bool = False) -> None:
    """Evaluate every set with the costmodel on sys.path; one .npz per set."""
    from costmodel import cluster_preset, evaluate, memory_screen

    for name, m, c, kind, fw, pipeline in (moe_row_sets if moe else row_sets)(bench_rows):
        model, cluster = preset(m), cluster_preset(c)
        table = build(kind, model, cluster)
        metrics = evaluate(model, cluster, table, framework=fw, pipeline=pipeline)
        cols = {f"m_{k}": np.asarray(v) for k, v in metrics.items()}
        cols.update({f"s_{k}": np.asarray(v) for k, v in table.columns.items()})
        np.savez(os.path.join(out_dir, f"{name}.npz"), **cols)
        if name in ("exact", "deepseek-v3-uneven-closed_form", "deepseek-v3-uniform-closed_form"):
            mem, reason = memory_screen(model, cluster, table)
            np.savez(os.path.join(out_dir, "screen.npz" if name == "exact" else f"screen-{name}.npz"),
                     m_mem_total_bytes=mem, m_reason=reason)


def compare(base_dir: str, new_dir: str) -> list[dict]:
    out = []
    for f in sorted(os.listdir(base_dir)):
        a, b = np.load(os.path.join(base_dir, f)), np.load(os.path.join(new_dir, f))
        worst, worst_col, rows = 0.0, "", 0
        for k in a.files:  # every column of the base: metrics and strategy columns
            x, y = a[k], b[k]
            rows = len(x)
            assert x.shape == y.shape, (f, k, x.shape, y.shape)
            if x.dtype.kind == "f":
                same_inf = np.array_equal(np.isinf(x), np.isinf(y)) and np.array_equal(x[np.isinf(x)], y[np.isinf(y)])
                fin = np.isfinite(x)
                rel = np.abs(x[fin] - y[fin]) / np.maximum(np.abs(x[fin]), 1e-300)
                d = float(rel.max()) if rel.size else 0.0
                if not same_inf:
                    d = np.inf
            else:
                d = 0.0 if np.array_equal(x, y) else np.inf
            if d > worst or not worst_col:
                worst, worst_col = d, k
        extra = sorted(set(b.files) - set(a.files))
        new_zero = all(np.all(b[k] == (1 if k.startswith("s_") else 0)) for k in extra)  # ep, etp 1; metrics 0
        out.append({"set": f[:-4], "rows": rows, "columns": len(a.files), "max_rel_diff": worst,
                    "worst_column": worst_col, "new_columns": extra, "new_columns_dense_value": new_zero})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", help="a checkout of the base commit")
    ap.add_argument("--bench-rows", type=int, default=1_000_000)
    ap.add_argument("--moe", action="store_true", help="the MoE row sets (moe_row_sets)")
    ap.add_argument("--dump", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.dump:
        dump(args.dump, args.bench_rows, args.moe)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        dirs = {}
        for label, root in (("base", os.path.abspath(args.base)), ("this", HERE)):
            dirs[label] = os.path.join(tmp, label)
            os.makedirs(dirs[label])
            env = {**os.environ, "PYTHONPATH": root}
            subprocess.run([sys.executable, os.path.abspath(__file__), "--dump", dirs[label], "--bench-rows",
                            str(args.bench_rows), *(["--moe"] if args.moe else [])], check=True, env=env, cwd=root)
        res = compare(dirs["base"], dirs["this"])
    ok = True
    for r in res:
        good = r["max_rel_diff"] <= 1e-12 and r["new_columns_dense_value"]
        ok &= good
        print(f"{r['set']:13s} {r['rows']:>9,} rows x {r['columns']} columns: largest relative difference "
              f"{r['max_rel_diff']:.3g} ({r['worst_column']}); new columns {r['new_columns']} at their dense value: "
              f"{r['new_columns_dense_value']}  {'OK' if good else 'DIFFERENT'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
