"""`plansweep rank`: evaluate a strategy space (default: search.default_space) in one process
and print the best."""

from __future__ import annotations

import numpy as np

from cli import COMMAND_HELP, print_json
from cli._cmd_evaluate import (
    STATE_DTYPE_FLAGS,
    add_failure_args,
    add_spec_args,
    add_state_dtype_args,
    failure_from_args,
    state_dtypes_of,
)
from cli._cmd_search_hetero import SWEEP_HETERO_DEFAULTS, hetero_space_from_args
from cli._cmd_show import (
    format_by_framework,
    format_placement,
    format_plan,
    format_priced,
    priced_arrow,
    rows_as_dicts,
)
from cli._space_args import add_space_args, space_from_args
from cli._specs import load_cluster, load_model
from cli._tight import memory_entry
from costmodel import REASONS, HeteroCluster, InputError, Metrics, evaluate, plan_goodput
from costmodel._frameworks import state_optim_bytes
from costmodel._knobs import KNOBS
from search._refine import refine
from search._sensitivity import DEFAULT_CASES, parse_cases, sensitivity


def register(sub) -> None:
    p = sub.add_parser("rank", help=COMMAND_HELP["rank"])
    add_spec_args(p)
    p.add_argument("--top", type=int, default=10)
    p.add_argument("--json", action="store_true",
                   help="print one JSON object: the counts, the best rows (as show --json gives a run's), their "
                   "goodput, the best row of each framework and the sensitivity cases where asked")
    add_space_args(p)
    add_objective_args(p)
    add_state_dtype_args(p, what="every framework of the space, one pool")
    p.add_argument("--sensitivity", nargs="?", const="default", default=None, metavar="CASES",
                   help="re-rank the space with the cluster's constants moved, one case at a time, and say whether "
                   "#1 stays best and how far behind the best then it falls: cases knob=factor[+knob=factor],... "
                   "with knobs among " + ", ".join(KNOBS) + " (default, the flag alone: "
                   + ",".join(DEFAULT_CASES) + ")")
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
# The largest grid rank enumerates and prices in one process (every point; a million take about a second and a few
# hundred MB): past it, sweep (chunked over workers, into Parquet) or search.
RANK_MAX_POINTS = 20_000_000


def run(args) -> int:
    """A homogeneous cluster ranks the space flags' space, a heterogeneous one the placement space
    of a sweep (cli._cmd_search_hetero.SWEEP_HETERO_DEFAULTS and the flags). With several frameworks
    (--framework A,B or all: a framework dimension) the best plan of each is printed too, and the winner."""
    if args.top < 1:
        raise InputError("--top", "an integer >= 1", args.top)
    cases = None if args.sensitivity is None else parse_cases(args.sensitivity)
    model = load_model(args.model, args.seq_len)
    cluster = load_cluster(args.cluster, args.hardware)
    failure = failure_from_args(args)
    check_objective(args.objective, cluster)
    space = (hetero_space_from_args(args, model, cluster, SWEEP_HETERO_DEFAULTS) if isinstance(cluster, HeteroCluster)
             else space_from_args(args, model, cluster))
    if space.size > RANK_MAX_POINTS:
        shifts = any(d.base == "stage_shift" for d in space.dims)
        raise InputError("--stage-shift" if shifts else "--space", f"a space of at most {RANK_MAX_POINTS:,} grid "
                         "points, which rank enumerates and prices every one of"
                         + (" (each stage boundary's shifts multiply it)" if shifts else "")
                         + "; narrow the space flags, or sweep it (plansweep sweep) or search it (plansweep search)",
                         f"{float(space.size):.3g} points")
    tables = [space.rows(lo, lo + RANK_CHUNK)[1] for lo in range(0, int(space.size), RANK_CHUNK)]
    table = type(tables[0]).concat(tables)
    dtypes = state_dtypes_of(args)
    if dtypes and isinstance(cluster, HeteroCluster):
        raise InputError(STATE_DTYPE_FLAGS[next(iter(dtypes))], "a one-pool cluster", cluster.name)
    # (each row under its framework: the table's framework column; with the dtypes named, each profile run so)
    metrics = evaluate(model, cluster, table, state_dtypes=dtypes)
    feasible = int(metrics["feasible"].sum())
    idx, exact = refine(model, cluster, table, metrics, objective=args.objective, failure=failure,
                        state_dtypes=dtypes)
    keep = exact["feasible"]
    best_t, best_m = table.take(idx[keep][:args.top]), exact.take(np.flatnonzero(keep)[:args.top])
    goodput = None
    if not isinstance(cluster, HeteroCluster):
        kw = {"optim_bytes": state_optim_bytes(dtypes)} if dtypes else {}
        goodput = plan_goodput(best_m, best_t, cluster, failure, model=model, **kw)
    found = None
    if cases and keep.any():
        found = sensitivity(model, cluster, table, int(idx[keep][0]), cases, objective=args.objective,
                            failure=failure, state_dtypes=dtypes)
    by_framework = (framework_bests_of(space, table, metrics, args.objective, failure)
                    if len(space.frameworks) > 1 else None)
    if args.json:
        print_json(rank_json(space, table, metrics, idx[keep], best_t, best_m, goodput, found, by_framework,
                             args.objective, dtypes))
        return 0
    kept = "; gradients and optimizer state: " + ", ".join(f"{k} {v}" for k, v in dtypes.items()) if dtypes else ""
    print(f"{model.name} on {cluster.name} ({', '.join(space.frameworks)}{kept}): {len(table):,} strategies, "
          f"{feasible:,} feasible (infeasible: {why_infeasible(metrics)})")
    print(format_priced(space, best_t, best_m))
    print(idle_note(best_t, cluster))
    if goodput is not None:
        print(goodput_lines(goodput))
    by = "goodput" if args.objective == "goodput" else "step time"
    print(f"(top {len(idx)} by closed forms re-priced with the exact pipeline simulator, ranked by {by})")
    if found is not None:
        first = rows_as_dicts(priced_arrow(space, best_t, best_m))[0]
        print(format_sensitivity(space, table, idx[keep], found, first, args.objective))
    if by_framework is not None:
        print(format_by_framework(*by_framework))
    return 0


GOODPUT_JSON = ("goodput_tokens_per_s", "goodput_ratio", "nodes_used", "spare_nodes", "job_mtbf_s",
                "checkpoint_write_s", "checkpoint_interval_s", "checkpoint_load_s", "spare_wait_s")


def rank_json(space, table, metrics, ranked, best_t, best_m, goodput, found, by_framework, objective: str,
              dtypes: dict) -> dict:
    """rank's JSON object: the space's counts, the best rows as result rows (show --json's), each with its goodput
    columns (plan_goodput's, homogeneous clusters) and its memory against its GPU (cli._tight.memory_entry), the
    sensitivity cases (each case's best as its place among ``ranked``, #1 first, or null outside them) and the best
    row of each framework with the winner."""
    rows = rows_as_dicts(priced_arrow(space, best_t, best_m))
    for i, r in enumerate(rows):
        if goodput is not None:
            r.update({k: float(goodput[k][i]) for k in GOODPUT_JSON})
        r["memory"] = memory_entry(r)
    out = {"model": space.model.name, "cluster": space.cluster.name, "frameworks": list(space.frameworks),
           "objective": objective, "state_dtypes": dict(dtypes), "num_strategies": len(table),
           "num_feasible": int(metrics["feasible"].sum()),
           "infeasible_reasons": infeasible_counts(metrics), "rows": rows}
    if found is not None:
        place = {int(i): k for k, i in enumerate(ranked, start=1)}
        out["sensitivity"] = [{"case": f["case"], "best_rank": place.get(f["best"]) if f["best"] is not None else None,
                               "best_fits": f["best"] is not None, "first_behind": f["shortfall"]} for f in found]
    if by_framework is not None:
        _, _, best, missing, _ = by_framework
        out.update(best_per_framework=best, frameworks_without_plan=missing,
                   winner=best[0].get("framework") if best else None)
    return out


def infeasible_counts(metrics) -> dict[str, int]:
    """The infeasible rows' reasons -> how many rows each holds (the reasons no row holds left out)."""
    counts = np.bincount(metrics["reason"], minlength=len(REASONS))
    return {REASONS[k]: int(n) for k, n in enumerate(counts) if k and n}


def why_infeasible(metrics) -> str:
    """The infeasible rows' reasons with their counts, one phrase."""
    return ", ".join(f"{reason} {n:,}" for reason, n in infeasible_counts(metrics).items()) or "none"


def framework_bests_of(space, table, metrics, objective: str = "tokens_per_s", failure=None) -> tuple:
    """The best plan of each framework of ``space`` among ``table``'s rows priced as ``metrics`` (each framework's
    rows refined on their own: its best need not be among the best of all), best first, as format_by_framework's
    arguments: (columns, throughput column, rows, frameworks without a feasible plan -> why, score column)."""
    from costmodel._strategy import FRAMEWORK_NAMES
    from search._refine import objective_score

    model, cluster = space.model, space.cluster
    thr = "samples_per_s" if model.kind == "mlp" else "tokens_per_s"
    bests, missing = [], {}
    for name in space.frameworks:
        rows = np.flatnonzero(table["framework"] == FRAMEWORK_NAMES.index(name))
        sub_t, sub_m = table.take(rows), metrics.take(rows)
        idx, exact = refine(model, cluster, sub_t, sub_m, objective=objective, failure=failure)
        ok = np.flatnonzero(exact["feasible"])
        if not ok.size:
            missing[name] = f"{len(rows):,} strategies; infeasible: {why_infeasible(sub_m)}"
            continue
        bests.append((sub_t.take(idx[ok[:1]]), exact.take(ok[:1])))
    if not bests:
        return (), thr, [], missing, None
    best_t = type(bests[0][0]).concat([t for t, _ in bests])
    best_m = Metrics({k: np.concatenate([m[k] for _, m in bests]) for k in bests[0][1]})
    score = objective_score(best_m, best_t, cluster, objective, failure)
    order = np.argsort(-score, kind="stable")
    best_t, best_m = best_t.take(order), best_m.take(order)
    arrow = priced_arrow(space, best_t, best_m)
    rows = rows_as_dicts(arrow)
    if objective == "goodput":
        for r, g in zip(rows, score[order], strict=True):
            r["goodput_tokens_per_s"] = float(g)
    return arrow.column_names, thr, rows, missing, "goodput_tokens_per_s" if objective == "goodput" else None


def format_sensitivity(space, table, ranked, found: list[dict], first: dict, objective: str = "tokens_per_s") -> str:
    """sensitivity()'s cases (``found``) as lines: per case the best plan then, as its place in ``ranked`` (the exact
    ranking's row indices, #1 first) or a letter for one outside it (described below the cases), and how far behind
    it #1 falls by ``objective``; then a summary beside #1's error band (``first``: #1's printed row)."""
    place = {int(i): k for k, i in enumerate(ranked, start=1)}
    letters: dict[int, str] = {}
    score = "goodput" if objective == "goodput" else "throughput"
    out = ["sensitivity: #1 re-checked with the cluster's constants moved (the space re-ranked in each case):",
           f"  {'moved':<28} {'best then':>10} {'#1 behind by':>13}"]
    for f in found:
        if f["best"] is None:
            out.append(f"  {f['case']:<28} {'none fits':>10} {'-':>13}")
            continue
        b = f["best"]
        name = f"#{place[b]}" if b in place else letters.setdefault(b, chr(ord("A") + len(letters)))
        behind = "-" if f["shortfall"] == 0 else f"{100 * f['shortfall']:.1f}%"
        out.append(f"  {f['case']:<28} {name:>10} {behind:>13}")
    for b, letter in letters.items():
        one = table.take(np.array([b]))
        row = rows_as_dicts(priced_arrow(space, one, evaluate(space.model, space.cluster, one)))[0]
        words = (format_placement(row) + f" m{row.get('microbatches')}" if row.get("stage_pool") else format_plan(row))
        fw = f" {row['framework']}" if len(space.frameworks) > 1 and row.get("framework") else ""
        out.append(f"  {letter}: {words}{fw} (not among the {len(ranked)} best on the cluster as given)")
    held = sum(f["best"] is not None and f["shortfall"] == 0 for f in found)
    worst = max((f["shortfall"] for f in found if f["best"] is not None), default=0.0)
    line = f"#1 stays best in {held} of {len(found)} cases"
    if held < len(found) and worst > 0:
        line += f"; elsewhere it is at most {100 * worst:.1f}% behind the best then ({score})"
    t, lo, hi = first.get("tokens_per_s"), first.get("tokens_per_s_low"), first.get("tokens_per_s_high")
    if t and lo is not None and hi is not None:
        line += f"; the model's error band on #1: ±{50 * (hi - lo) / t:.1f}%"
    out.append(line)
    return "\n".join(out)