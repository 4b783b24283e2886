"""`plansweep rank`: evaluate a strategy space (default: search.default_space) in one process
and print the best."""

from __future__ import annotations

import numpy as np

from cli import COMMAND_HELP
from cli._cmd_evaluate import add_failure_args, add_spec_args, failure_from_args
from cli._cmd_search_hetero import SWEEP_HETERO_DEFAULTS, hetero_space_from_args
from cli._cmd_show import format_priced
from cli._space_args import add_space_args, space_from_args
from cli._specs import load_cluster, load_model
from costmodel import REASONS, HeteroCluster, InputError, evaluate, plan_goodput
from search._refine import refine


def register(sub) -> None:
    p = sub.add_parser("rank", help=COMMAND_HELP["rank"])
    add_spec_args(p)
    p.add_argument("--top", type=int, default=10)
    add_space_args(p)
    add_objective_args(p)
    p.set_defaults(func=run)


OBJECTIVES = ("tokens_per_s", "goodput")


def add_objective_args(p) -> None:
    """--objective and the failure model's flags (rank, sweep, search)."""
    p.add_argument("--objective", choices=OBJECTIVES, default="tokens_per_s",
                   help="rank by raw throughput (default) or by goodput: throughput x the share of time "
                   "training usefully under failures (checkpoints, restarts, rework, waiting for a node; "
                   "costmodel.plan_goodput and the failure flags)")
    add_failure_args(p)


def check_objective(objective: str, cluster) -> None:
    if objective != "tokens_per_s" and isinstance(cluster, HeteroCluster):
        raise InputError("--objective", "tokens_per_s on a heterogeneous cluster (goodput is priced on "
                         "homogeneous clusters only)", objective)


def goodput_lines(g: dict) -> str:
    """Per printed row: goodput, its share, the checkpoint and failure terms (costmodel.plan_goodput's
    columns ``g``)."""
    out = ["goodput under failures (throughput x useful share; job MTBF from the nodes used; idle nodes are "
           "hot spares):",
           f"{'#':>3} {'goodput /s':>14} {'useful':>7} {'nodes':>6} {'spares':>6} {'MTBF h':>7} "
           f"{'ckpt write s':>12} {'every min':>9} {'load s':>7} {'wait s':>7}"]
    for i in range(len(g["goodput_ratio"])):
        out.append(f"{i + 1:>3} {g['goodput_tokens_per_s'][i]:14,.0f} {100 * g['goodput_ratio'][i]:6.2f}% "
                   f"{g['nodes_used'][i]:6.0f} {g['spare_nodes'][i]:6.0f} {g['job_mtbf_s'][i] / 3600:7.2f} "
                   f"{g['checkpoint_write_s'][i]:12.1f} {g['checkpoint_interval_s'][i] / 60:9.1f} "
                   f"{g['checkpoint_load_s'][i]:7.1f} {g['spare_wait_s'][i]:7.0f}")
    return "\n".join(out)


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
    model = load_model(args.model)
    cluster = load_cluster(args.cluster, args.hardware)
    failure = failure_from_args(args)
    check_objective(args.objective, cluster)
    space = (hetero_space_from_args(args, model, cluster, SWEEP_HETERO_DEFAULTS) if isinstance(cluster, HeteroCluster)
             else space_from_args(args, model, cluster))
    tables = [space.rows(lo, lo + RANK_CHUNK)[1] for lo in range(0, int(space.size), RANK_CHUNK)]
    table = type(tables[0]).concat(tables)
    metrics = evaluate(model, cluster, table, framework=args.framework)
    feasible = int(metrics["feasible"].sum())
    counts = np.bincount(metrics["reason"], minlength=len(REASONS))
    why = ", ".join(f"{REASONS[k]} {n:,}" for k, n in enumerate(counts) if k and n)
    print(f"{model.name} on {cluster.name} ({args.framework}): {len(table):,} strategies, {feasible:,} feasible "
          f"(infeasible: {why})")
    idx, exact = refine(model, cluster, table, metrics, framework=args.framework, objective=args.objective,
                        failure=failure)
    keep = exact["feasible"]
    best_t, best_m = table.take(idx[keep][:args.top]), exact.take(np.flatnonzero(keep)[:args.top])
    print(format_priced(space, best_t, best_m))
    print(idle_note(best_t, cluster))
    if not isinstance(cluster, HeteroCluster):
        print(goodput_lines(plan_goodput(best_m, best_t, cluster, failure, model=model)))
    by = "goodput" if args.objective == "goodput" else "step time"
    print(f"(top {len(idx)} by closed forms re-priced with the exact pipeline simulator, ranked by {by})")
    return 0
