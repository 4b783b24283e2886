"""`plansweep rank`: evaluate a strategy space (default: search.default_space) in one process
and print the best."""

from __future__ import annotations

import numpy as np

from cli._cmd_evaluate import add_spec_args
from cli._cmd_search_hetero import SWEEP_HETERO_DEFAULTS, hetero_space_from_args
from cli._cmd_show import format_rows, rows_as_dicts
from cli._space_args import add_space_args, space_from_args
from cli._specs import load_cluster, load_model
from costmodel import REASONS, HeteroCluster, StrategyTable, evaluate_any
from search import default_space as search_default_space


def default_space(model, cluster, global_batch: int) -> StrategyTable:
    """The valid rows of search.default_space (one definition of the default space, derived from
    the model and the cluster: search.default_choices)."""
    space = search_default_space(model, cluster, global_batch)
    return space.rows(0, space.size)[1]


def register(sub) -> None:
    p = sub.add_parser("rank", help="rank a default strategy space in one process")
    add_spec_args(p)
    p.add_argument("--top", type=int, default=10)
    add_space_args(p)
    p.set_defaults(func=run)


# Candidates re-priced with the exact pipeline simulator before the final ranking: the
# closed forms screen within a few percent (BENCHMARKS.md), so the top few hundred hold the
# exact best.
REFINE_TOP = 256


def refine(model, cluster, table: StrategyTable, metrics, top: int = REFINE_TOP, framework=None):
    """Indices and exact metrics of the best ``top`` rows by the closed forms, re-priced with
    the simulator and sorted by exact step time."""
    cand = np.argsort(metrics["step_time_s"], kind="stable")[:top]
    cand = cand[metrics["feasible"][cand]]
    exact = evaluate_any(model, cluster, table.take(cand), pipeline="simulate", framework=framework)
    order = np.argsort(exact["step_time_s"], kind="stable")
    return cand[order], exact.take(order)


def idle_note(table, cluster) -> str:
    """One line on the GPUs the printed rows leave idle (dp x tp x pp x cp below the cluster's)."""
    if isinstance(cluster, HeteroCluster) or not len(table):
        return "GPUs used: every row uses all of them" if len(table) else ""
    idle = cluster.num_gpus - np.asarray(table.num_gpus)
    rows = [f"#{i + 1} {int(n):,}" for i, n in enumerate(idle) if n > 0]
    if not rows:
        return f"GPUs used: every row uses all {cluster.num_gpus:,}"
    return f"idle GPUs (of {cluster.num_gpus:,}; dp is the largest that fits beside tp x pp x cp): " + ", ".join(rows)


RANK_CHUNK = 1_000_000  # grid rows enumerated at once (a placement grid is mostly invalid rows)


def run(args) -> int:
    """A homogeneous cluster ranks the space flags' space, a heterogeneous one the placement space
    of a sweep (cli._cmd_search_hetero.SWEEP_HETERO_DEFAULTS and the flags)."""
    from sweep._results import pool_names, to_arrow  # pyarrow only when ranking

    model = load_model(args.model)
    cluster = load_cluster(args.cluster, args.hardware)
    if isinstance(cluster, HeteroCluster):
        space = hetero_space_from_args(args, model, cluster, SWEEP_HETERO_DEFAULTS)
    else:
        space = space_from_args(args, model, cluster)
    tables = [space.rows(lo, lo + RANK_CHUNK)[1] for lo in range(0, int(space.size), RANK_CHUNK)]
    table = type(tables[0]).concat(tables)
    metrics = evaluate_any(model, cluster, table, framework=args.framework)
    feasible = int(metrics["feasible"].sum())
    counts = np.bincount(metrics["reason"], minlength=len(REASONS))
    why = ", ".join(f"{REASONS[k]} {n:,}" for k, n in enumerate(counts) if k and n)
    print(f"{model.name} on {cluster.name} ({args.framework}): {len(table):,} strategies, {feasible:,} feasible "
          f"(infeasible: {why})")
    idx, exact = refine(model, cluster, table, metrics, framework=args.framework)
    keep = exact["feasible"]
    top = min(args.top, int(keep.sum()))
    arrow = to_arrow(table.take(idx[keep][:top]), exact.take(np.flatnonzero(keep)[:top]), run_id="", model=model.name,
                     cluster=cluster.name, framework=space.framework, iteration=0, grid_index=None,
                     pool_names=pool_names(space))
    print(format_rows(arrow.column_names, "samples_per_s" if model.kind == "mlp" else "tokens_per_s",
                      rows_as_dicts(arrow)))
    print(idle_note(table.take(idx[keep][:top]), cluster))
    print(f"(top {len(idx)} by closed forms re-priced with the exact pipeline simulator)")
    return 0
