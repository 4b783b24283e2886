"""`plansweep rank`: evaluate a strategy space (default: search.default_space) in one process
and print the best."""

from __future__ import annotations

import numpy as np

from cli._cmd_evaluate import add_spec_args
from cli._space_args import add_space_args, space_from_args
from cli._specs import load_cluster, load_model
from costmodel import REASONS, StrategyTable, evaluate
from search import default_space as search_default_space

TOP_COLUMNS = ("dp", "tp", "pp", "cp", "micro_batch", "schedule", "vpp", "recompute",
               "sequence_parallel", "zero_stage")


def default_space(model, cluster, global_batch: int) -> StrategyTable:
    """The valid rows of search.default_space (one definition of the default space): every GPU
    used, tp | heads (<= a node), pp | layers (<= 64), cp in {1, 2} for long sequences, micro-batch
    1-8, 1F1B / interleaved (v = 2, 3, 4) / ZB-H1, recompute, SP, ZeRO 0-1, DP overlap on."""
    space = search_default_space(model, cluster, global_batch)
    return space.rows(0, space.size)[1]


def register(sub) -> None:
    p = sub.add_parser("rank", help="rank a default strategy space in one process")
    add_spec_args(p)
    p.add_argument("--top", type=int, default=10)
    add_space_args(p)
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
    space = space_from_args(args, model, cluster)
    table = space.rows(0, space.size)[1]
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
