"""`plansweep rank`: evaluate a default strategy space in one process and print the best."""

from __future__ import annotations

import numpy as np

from costmodel import REASONS, StrategyTable, evaluate
from sweep._cmd_evaluate import add_spec_args
from sweep._specs import load_cluster, load_model

TOP_COLUMNS = ("dp", "tp", "pp", "cp", "micro_batch", "schedule", "vpp", "recompute",
               "sequence_parallel", "zero_stage")


def divisors(n: int, limit: int) -> list[int]:
    return [k for k in range(1, min(n, limit) + 1) if n % k == 0]


def default_space(model, cluster, global_batch: int) -> StrategyTable:
    """Every GPU used: tp | heads (<= a node), pp | layers, cp in {1, 2}, dp the rest; micro-batch
    1-8; 1F1B, interleaved (v = 2, 3, 4), ZB-H1; recompute, SP, ZeRO 0-1, DP overlap on."""
    heads = model.heads if model.kind != "mlp" else model.hidden
    opts = {
        "tp": divisors(heads, cluster.gpus_per_node),
        "pp": divisors(model.layers, 64),
        "cp": [1, 2] if model.seq_len >= 4096 else [1],
        "micro_batch": [1, 2, 4, 8],
        "sched": [0, 1, 2, 3, 4],  # index into SCHED_VPP
        "recompute": [0, 1, 2],
        "sequence_parallel": [False, True],
        "zero_stage": [0, 1],
    }
    sched_vpp = np.array(
        [("1f1b", 1), ("interleaved", 2), ("interleaved", 3), ("interleaved", 4), ("zb-h1", 1)], dtype=object
    )
    grids = np.meshgrid(*[np.asarray(v) for v in opts.values()], indexing="ij")
    cols = {k: g.ravel() for k, g in zip(opts, grids, strict=True)}
    per = cols["tp"] * cols["pp"] * cols["cp"]
    keep = (cluster.num_gpus % per == 0) & ~((cols["tp"] == 1) & cols["sequence_parallel"])
    cols = {k: v[keep] for k, v in cols.items()}
    sv = sched_vpp[cols.pop("sched")]
    return StrategyTable.from_columns(
        dp=cluster.num_gpus // (cols["tp"] * cols["pp"] * cols["cp"]), global_batch=global_batch,
        schedule=sv[:, 0].astype(str), vpp=sv[:, 1].astype(np.int64), **cols,
    )


def register(sub) -> None:
    p = sub.add_parser("rank", help="rank a default strategy space in one process")
    add_spec_args(p)
    p.add_argument("--global-batch", type=int, default=1536)
    p.add_argument("--top", type=int, default=10)
    p.set_defaults(func=run)


def format_table(table: StrategyTable, metrics, idx) -> str:
    rows = [table.row(int(i)) for i in idx]
    head = (f"{'#':>3} " + " ".join(f"{c[:9]:>9}" for c in TOP_COLUMNS)
            + f" {'step s':>9} {'tokens/s':>11} {'MFU':>6} {'mem GB':>7}")
    out = [head]
    for rank, (i, r) in enumerate(zip(idx, rows, strict=True), start=1):
        out.append(f"{rank:>3} " + " ".join(f"{str(r[c])[:9]:>9}" for c in TOP_COLUMNS)
                   + f" {metrics['step_time_s'][i]:9.3f} {metrics['tokens_per_s'][i]:11,.0f}"
                   f" {100 * metrics['mfu'][i]:5.1f}% {metrics['mem_total_bytes'][i] / 1e9:7.1f}")
    return "\n".join(out)


# Candidates re-priced with the exact pipeline simulator before the final ranking: the
# closed forms screen within a few percent (BENCHMARKS.md), so the top few hundred hold the
# exact best.
REFINE_TOP = 256


def refine(model, cluster, table: StrategyTable, metrics, top: int = REFINE_TOP):
    """Indices and exact metrics of the best ``top`` rows by the closed forms, re-priced with
    the simulator and sorted by exact step time."""
    cand = np.argsort(metrics["step_time_s"], kind="stable")[:top]
    cand = cand[metrics["feasible"][cand]]
    exact = evaluate(model, cluster, table.take(cand), pipeline="simulate")
    order = np.argsort(exact["step_time_s"], kind="stable")
    return cand[order], exact.take(order)


def run(args) -> int:
    model = load_model(args.model)
    cluster = load_cluster(args.cluster, args.hardware)
    table = default_space(model, cluster, args.global_batch)
    metrics = evaluate(model, cluster, table)
    feasible = int(metrics["feasible"].sum())
    counts = np.bincount(metrics["reason"], minlength=len(REASONS))
    why = ", ".join(f"{REASONS[k]} {n:,}" for k, n in enumerate(counts) if k and n)
    print(f"{model.name} on {cluster.name}: {len(table):,} strategies, {feasible:,} feasible (infeasible: {why})")
    idx, exact = refine(model, cluster, table, metrics)
    keep = exact["feasible"]
    top = min(args.top, int(keep.sum()))
    print(format_table(table.take(idx[keep][:top]), exact.take(np.flatnonzero(keep)[:top]), np.arange(top)))
    print(f"(top {len(idx)} by closed forms re-priced with the exact pipeline simulator)")
    return 0
