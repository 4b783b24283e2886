"""``plansweep show RUN_DIR``: the best feasible rows of a run as a table (or JSON)."""

from __future__ import annotations

import argparse
import math
import sys
from typing import TYPE_CHECKING

from cli import COMMAND_HELP, print_json
from cli._specs import number
from cli._tight import TIGHT_NOTE, is_tight, row_device_bytes
from costmodel import InputError

if TYPE_CHECKING:
    import pyarrow as pa

    from sweep._runview import RunView

GB = 1e9  # bytes per GB in the memory column (decimal, as GPU datasheets quote HBM)

# (column, header, width, format) for the table; absent columns are left out.
TABLE_COLUMNS = (
    ("framework", "framework", 16, "s"),
    ("dp", "dp", 4, "d"), ("tp", "tp", 4, "d"), ("pp", "pp", 4, "d"), ("cp", "cp", 3, "d"), ("ep", "ep", 3, "d"),
    ("etp", "etp", 3, "d"), ("microbatches", "m", 5, "d"), ("micro_batch", "b", 5, "d"),
    ("schedule", "schedule", 11, "s"), ("vpp", "vpp", 3, "d"), ("recompute", "recompute", 9, "s"),
    ("sequence_parallel", "SP", 3, "b"), ("zero_stage", "ZeRO", 4, "d"))
# Columns of one value per pipeline stage (list columns); printed per stage for the top row.
STAGE_COLUMN_HINT = "stage_"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("show", help=COMMAND_HELP["show"], description="Read RUN_DIR/results (Parquet) and run.json; "
                       "print the best feasible rows, the row and feasible counts and why the rest are infeasible.")
    p.add_argument("run_dir", metavar="RUN_DIR", help="run directory (a path or a URI such as s3://bucket/run)")
    p.add_argument("--top", default="10", metavar="K", help="rows to print (default 10)")
    p.add_argument("--all", action="store_true", dest="include_infeasible",
                   help="fill up to K with infeasible rows too (after the feasible ones, with their reason)")
    p.add_argument("--json", action="store_true", help="print one JSON object: counts and the rows")
    p.add_argument("--by", choices=("study", "problem"), default="study",
                   help="study: the best rows of each (model, cluster) study (default); problem: one line per "
                   "(model, cluster, framework, global batch, sequence length) with its best plan, tokens/s, MFU, "
                   "days to train, GPU-hours and dollars")
    p.add_argument("--rank", default=None, metavar="K",
                   help="with --timeline or --trace: draw the K-th best plan of each study (default 1), priced again "
                   "as `plansweep evaluate` prices one plan (the exact pipeline simulator)")
    from cli._timeline import add_timeline_args

    add_timeline_args(p)
    from cli._costing import add_costing_args

    add_costing_args(p, override=True)
    p.set_defaults(func=run)


def _plain(v):
    """Arrow values -> JSON: non-finite floats become null."""
    return None if isinstance(v, float) and not math.isfinite(v) else v


def rows_as_dicts(table: pa.Table) -> list[dict]:
    """Arrow rows as dicts for JSON and format_rows (non-finite floats as None)."""
    return [{k: _plain(v) if not isinstance(v, list) else [_plain(x) for x in v] for k, v in r.items()}
            for r in table.to_pylist()]


def priced_arrow(space, table, metrics) -> pa.Table:
    """``table``'s rows priced as ``metrics`` on ``space``'s model and cluster as result rows (sweep._results)."""
    from sweep._results import pool_names, to_arrow  # pyarrow only when printing

    return to_arrow(table, metrics, run_id="", model=space.model.name, cluster=space.cluster.name,
                    framework=space.framework, iteration=0, grid_index=None, pool_names=pool_names(space),
                    seq_len=space.model.seq_len)


def format_priced(space, table, metrics) -> str:
    """``table``'s rows priced as ``metrics`` on ``space``'s model and cluster, as format_rows
    prints a run's rows (rank, search); with the framework column where the space has several."""
    arrow = priced_arrow(space, table, metrics)
    return format_rows(arrow.column_names, "samples_per_s" if space.model.kind == "mlp" else "tokens_per_s",
                       rows_as_dicts(arrow), with_framework=len(space.frameworks) > 1)


def _cell(v, fmt: str) -> str:
    if v is None:
        return "-"
    if fmt == "b":
        return "yes" if v else "no"
    return format(v, fmt)


def format_rows(columns, thr: str, rows: list[dict], *, with_reason: bool = False,
                with_framework: bool = False) -> str:
    """The rows (dicts of result columns, as rows_as_dicts gives) as a fixed-width table of
    the strategy columns among ``columns``, throughput ``thr`` and the headline metrics; the framework where the
    rows hold several, or ``with_framework``."""
    # ep / etp only where a row has them above 1 (an MoE model's run): dense tables print as before; the framework
    # where the rows hold several (a run over a framework dimension)
    shown = {k for k in ("ep", "etp") if any((r.get(k) or 1) > 1 for r in rows)}
    if with_framework or len({r.get("framework") for r in rows}) > 1:
        shown.add("framework")
    cols = [c for c in TABLE_COLUMNS if c[0] in columns and (c[0] not in ("ep", "etp", "framework") or c[0] in shown)]
    # each column as wide as its widest cell: a framework's name whole (profiles share long prefixes:
    # megatron-core-deepep-...), 131,072 micro-batches a step not cut to 13107
    cols = [(k, h, max(w, *(len(_cell(r.get(k), f)) for r in rows)) if rows else w, f) for k, h, w, f in cols]
    unit = "samples/s" if thr == "samples_per_s" else "tokens/s"
    band = thr == "tokens_per_s" and "tokens_per_s_low" in columns  # the error band (costmodel._bands)
    steps = [r.get("step_time_s") for r in rows]
    sw = max([9] + [len(f"{x if x is not None else math.inf:.4f}") for x in steps])  # (a day's step: 108272.8102)
    head = (f"{'#':>3} " + " ".join(f"{h:>{w}}" for _, h, w, _ in cols)
            + f" {'step s':>{sw}} {unit:>12}" + (f" {'±%':>6}" if band else "") + f" {'MFU':>6} {'mem GB':>7}"
            + ("  reason" if with_reason else ""))
    # Uneven partitions (null = uniform stages): layers per stage and recompute initials per stage.
    with_layers = any(r.get("stage_layers") for r in rows)
    with_rc = any(r.get("stage_recompute") for r in rows)
    if with_layers:
        head += "  stage layers"
    if with_rc:
        head += "  stage recompute"
    if any(r.get("stage_pool") for r in rows):
        head += "  placement (pool:dp x tp per stage; tp* = tp across nodes)"
    out, tight = [head], False
    for rank, r in enumerate(rows, start=1):
        step, mfu, mem = r.get("step_time_s"), r.get("mfu"), r.get("mem_total_bytes")
        mark = "!" if r.get("feasible", True) and is_tight(mem, row_device_bytes(r, r.get("cluster"))) else ""
        tight = tight or bool(mark)
        line = (f"{rank:>3} " + " ".join(f"{_cell(r.get(c), f):>{w}}" for c, _, w, f in cols)
                + f" {step if step is not None else math.inf:{sw}.4f} {r.get(thr) or 0.0:12,.0f}"
                + (band_cell(r, rows[0]) if band else "") + f" {100 * (mfu or 0.0):5.1f}% {(mem or 0.0) / GB:7.1f}"
                + mark)
        if with_reason:
            line += f"  {r.get('reason', '')}"
        if with_layers:
            line += f"  {','.join(map(str, r.get('stage_layers') or [])) or 'uniform':<12}"
        if with_rc:
            line += "  " + ("".join(x[0] for x in r.get("stage_recompute") or []) or "uniform")
        if r.get("stage_pool"):
            line += "  " + format_placement(r)
        out.append(line)
    if band and any(band_cell(r, rows[0]).endswith("~") for r in rows[1:]):
        out.append("~ tied with #1 within the model's error (their bands overlap): measure these")
    if tight:
        out.append(TIGHT_NOTE)
    return "\n".join(out)


def band_cell(row: dict, best: dict) -> str:
    """A row's error band as a half-width in percent of its throughput, ``~`` where it reaches the band of ``best``
    (the first row; tokens_per_s_low / _high)."""
    t, lo, hi = row.get("tokens_per_s") or 0.0, row.get("tokens_per_s_low"), row.get("tokens_per_s_high")
    if not t or lo is None or hi is None:
        return f" {'-':>6}"
    tied = row is not best and best.get("tokens_per_s_low") is not None and hi >= best["tokens_per_s_low"]
    return f" {50 * (hi - lo) / t:5.1f}" + ("~" if tied else " ")


# The parts a step is the sum of (costmodel's Metrics: compute through the optimizer step), as why_faster names them.
STEP_PARTS = (("compute_s", "compute"), ("recompute_s", "recompute"), ("tp_comm_s", "tensor-parallel exchange"),
              ("cp_comm_s", "context-parallel exchange"), ("ep_comm_s", "expert all-to-alls"),
              ("pp_comm_s", "pipeline hand-offs"), ("dp_comm_s", "data-parallel exchange"),
              ("bubble_s", "pipeline bubble"), ("optimizer_s", "optimizer step"))


def why_faster(a: dict, b: dict, share: float = 0.01, most: int = 4) -> str | None:
    """Where plan ``a``'s step differs from plan ``b``'s: the parts of the step (STEP_PARTS, which sum to it) whose
    difference is at least ``share`` of b's step, the largest first, at most ``most`` of them ("why: a step of A s
    against B s: compute -0.52 s, ..."); None where a row lacks a part or a step."""
    if any(not isinstance(r.get(k), (int, float)) or not math.isfinite(r[k])
           for r in (a, b) for k in ("step_time_s", *(key for key, _ in STEP_PARTS))):
        return None
    diffs = sorted(((a[key] - b[key], name) for key, name in STEP_PARTS), key=lambda x: -abs(x[0]))
    shown = [f"{name} {d:+.3g} s" for d, name in diffs if abs(d) >= share * b["step_time_s"]][:most]
    line = f"why: a step of {a['step_time_s']:.4g} s against {b['step_time_s']:.4g} s"
    return line + (": " + ", ".join(shown) if shown else " (no part differs by 1% of the step)")


def format_by_framework(columns, thr: str, best: list[dict], missing: dict[str, str], score: str | None = None) -> str:
    """The best plan of each framework, best first (``best``: one row each, as rows_as_dicts gives, ordered by the
    ranking), the frameworks without a feasible plan (``missing``: framework -> why), and the winner named with how
    far ahead of the next framework it is by ``score`` (a column of the rows; None: throughput ``thr``)."""
    key = score or thr
    out = ["best plan per framework:"]
    if best:
        out.append(format_rows((*columns, "framework"), thr, best, with_framework=True))
    out += [f"  {name}: no feasible plan ({why})" for name, why in missing.items()]
    if not best:
        out.append("winner: none (no framework has a feasible plan)")
        return "\n".join(out)
    line = f"winner: {best[0].get('framework')}"
    if len(best) > 1 and best[1].get(key):
        what = "goodput" if score else thr.replace("_per_s", "/s")
        line += (f", {best[0][key] / best[1][key]:.3f}x the {what} of {best[1].get('framework')} "
                 "(the next best framework)")
    out.append(line)
    if len(best) > 1 and (why := why_faster(best[0], best[1])):
        out.append(why)
    return "\n".join(out)


def format_placement(row: dict) -> str:
    """A heterogeneous row's stages in one line: pool:dp x tp (a split stage pool:dp+pool2:dp2
    x tp), tp* for tp strided across nodes."""
    out = []
    for j, pool in enumerate(row["stage_pool"]):
        dp, d2, tp = row["stage_dp"][j], row["stage_dp2"][j], row["stage_tp"][j]
        where = f"{pool}:{dp - d2}+{row['stage_pool2'][j]}:{d2}" if d2 else f"{pool}:{dp}"
        out.append(f"{where}x{tp}{'*' if row['stage_order'][j] == 'tp-across' else ''}")
    return " ".join(out)


def format_stages(view: RunView, row: dict) -> str | None:
    """The top row's per-stage columns (stage_layers, stage_recompute, per-stage pools or
    degrees of heterogeneous runs: any list column), one line per stage; None if it has none."""
    stage_cols = [c for c in view.columns if isinstance(row.get(c), list)]
    if not stage_cols:
        return None
    n = max(len(row[c]) for c in stage_cols)
    names = [c.removeprefix(STAGE_COLUMN_HINT) for c in stage_cols]
    widths = [max(len(h), 9) for h in names]
    out = ["per stage (top row):", f"{'stage':>5} " + " ".join(f"{h:>{w}}" for h, w in zip(names, widths, strict=True))]
    for s in range(n):
        cells = [str(row[c][s]) if s < len(row[c]) else "-" for c in stage_cols]
        out.append(f"{s:>5} " + " ".join(f"{x:>{w}}" for x, w in zip(cells, widths, strict=True)))
    return "\n".join(out)


def stage_breakdown(view: RunView, row: dict) -> list[dict] | None:
    """Per stage of a heterogeneous run's row (pool, degrees, layers, micro-batch, F/B/W, busy
    time, hand-off, data-parallel exchange, memory against the pool's HBM), re-priced from the
    run's model and cluster under the row's framework with the exact pipeline simulator
    (costmodel.stage_rows); None for a homogeneous run."""
    if not row.get("stage_pool") or "pools" not in view.cluster or not view.model:
        return None
    from costmodel import hetero_from_mapping, stage_rows
    from costmodel._strategy import hetero_from_mapping as strategy_from_mapping
    from sweep._results import hetero_row_strategy
    from sweep._rundir import model_from_dict

    cluster = hetero_from_mapping(dict(view.cluster))
    model = model_from_dict(dict(view.model))
    table = strategy_from_mapping(hetero_row_strategy(row, model.layers), [p.name for p in cluster.pools],
                                  argument="RUN_DIR")
    return stage_rows(model, cluster, table, framework=row.get("framework") or None)


def _study_report(study: RunView, k: int, include_infeasible: bool) -> tuple[dict, list[dict]]:
    """Counts and the best ``k`` rows: by goodput in a run that ranks by it (run.json's objective;
    each row then carries its goodput_tokens_per_s and goodput_ratio), else by throughput."""
    from sweep._runview import best_rows, best_rows_by_goodput, run_failure_model, summary

    counts = summary(study)
    failure = run_failure_model(study)
    if failure is None or "pools" in study.cluster:
        return counts, rows_as_dicts(best_rows(study, k, include_infeasible=include_infeasible))
    top, g = best_rows_by_goodput(study, k, failure)
    rows = rows_as_dicts(top)
    for i, r in enumerate(rows):
        r.update(goodput_tokens_per_s=float(g["goodput_tokens_per_s"][i]), goodput_ratio=float(g["goodput_ratio"][i]))
    return counts, rows


def framework_bests(study: RunView) -> tuple[list[dict], dict[str, str]] | None:
    """The best row of each framework of a study whose rows hold several (ranked as the study's rows are: by goodput
    in a run by goodput), best first, and the frameworks without a feasible row (-> why); None for one framework."""
    names = study.frameworks()
    if len(names) < 2:
        return None
    best, missing = [], {}
    for name in names:
        sub = study.of_frameworks([name])
        counts, rows = _study_report(sub, 1, False)
        if rows:
            best.append(rows[0])
        else:
            why = ", ".join(f"{reason} {n:,}" for reason, n in counts["infeasible_reasons"].items())
            missing[name] = f"{counts['num_rows']:,} rows" + (f"; infeasible: {why}" if why else "")
    key = "goodput_tokens_per_s" if best and "goodput_tokens_per_s" in best[0] else study.throughput_column
    best.sort(key=lambda r: -(r.get(key) or 0.0))
    return best, missing


def format_framework_bests(study: RunView, found) -> str:
    """framework_bests' rows as format_by_framework prints them."""
    best, missing = found
    score = "goodput_tokens_per_s" if best and "goodput_tokens_per_s" in best[0] else None
    return format_by_framework(study.columns, study.throughput_column, best, missing, score)


def read_run(run_dir: str, command: str, body) -> int:
    """``body(view)`` over the run (sweep._runview.read_view: parts whose pages fail to read are
    found and left out), its stdout held until it succeeds; the parts left out named in one line
    on stderr."""
    import contextlib
    import io

    from sweep._runview import read_view

    def held(view):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            code = body(view)
        return code, buf.getvalue(), view

    code, text, view = read_view(run_dir, held)
    line = view.skipped_line()
    if line:
        print(f"plansweep {command}: {line}", file=sys.stderr)
    print(text, end="")
    return code


def run(args: argparse.Namespace) -> int:
    from cli import _timeline
    from cli._costing import check_costing_args

    check_costing_args(args)
    k = number(args.top, "--top", int, 1)
    if _timeline.wanted(args):
        _timeline.check_paths(args)
        from sweep._rundir import check_outside_run

        for flag in ("timeline", "trace"):
            check_outside_run(getattr(args, flag), f"--{flag}", args.run_dir)
        rank = 1 if args.rank is None else number(args.rank, "--rank", int, 1)
        return read_run(args.run_dir, "show", lambda view: _draw_ranked(args, rank, view))
    if args.rank is not None:
        raise InputError("--rank", "only with --timeline or --trace (the plan to draw)", args.rank)
    if args.by == "problem":
        return read_run(args.run_dir, "show", lambda view: _show_problems(args, view))
    return read_run(args.run_dir, "show", lambda view: _show(args, k, view))


def study_problems(args: argparse.Namespace, view: RunView) -> tuple[list[dict], dict]:
    """sweep._problems.problems of the run under the costing given (--train-tokens, --gpu-hour-usd) or else the
    run's (run.json's costing), and the price of each GPU with its source."""
    from cli._costing import run_costing
    from sweep._problems import price_sources, problems

    tokens, prices = run_costing(args, view.info, view.run_dir)
    entries = problems(view, train_tokens=tokens, prices=prices)
    return entries, price_sources(entries, prices)


# (key, header, width, format) of show --by problem's table.
PROBLEM_COLUMNS = (("model", "model", 16, "s"), ("cluster", "cluster", 10, "s"), ("num_gpus", "GPUs", 5, "d"),
                   ("framework", "framework", 13, "s"), ("global_batch", "batch", 5, "d"), ("seq_len", "seq", 6, "d"))


def format_plan(best: dict | None) -> str:
    """A plan in one short word: dp.tp.pp.cp, micro-batch, schedule (vpp), recompute, ZeRO."""
    if not best:
        return "-"
    sched = best["schedule"] + (f"x{best['vpp']}" if (best.get("vpp") or 1) > 1 else "")
    rc = best.get("recompute")
    rc = {"none": "", "selective": " rc=sel", "full": " rc=full"}.get(rc, f" rc={rc}")
    return (f"{best['dp']}.{best['tp']}.{best['pp']}.{best['cp']} b{best['micro_batch']} {sched}{rc} "
            f"z{best['zero_stage']}")


def format_problems(entries: list[dict], goodput: bool) -> str:
    """show --by problem's table: one line per problem."""
    thr = "goodput/s" if goodput else "tokens/s"
    head = (" ".join(f"{h:<{w}}" if f == "s" else f"{h:>{w}}" for _, h, w, f in PROBLEM_COLUMNS)
            + f" {'plan (dp.tp.pp.cp)':<30} {thr:>11} {'MFU':>6} {'days':>7} {'GPU-hours':>10} {'USD':>12}")
    out = [head]
    for e in entries:
        cells = " ".join(f"{_cell(e.get(k), f)[:w]:<{w}}" if f == "s" else f"{_cell(e.get(k), f):>{w}}"
                         for k, _, w, f in PROBLEM_COLUMNS)
        t = e.get("goodput_tokens_per_s") if goodput else e.get("tokens_per_s")
        if e["best"] is None:
            why = ", ".join(f"{r} {n:,}" for r, n in (e.get("infeasible_reasons") or {}).items()) or "no rows"
            out.append(f"{cells} no feasible plan ({why})")
            continue
        usd = f"{e['usd']:>12,.0f}" if e.get("usd") is not None else f"{'no price':>12}"
        out.append(f"{cells} {format_plan(e['best']):<30} {t:>11,.0f} {100 * (e.get('mfu') or 0):5.1f}% "
                   f"{e['days_to_train']:>7.1f} {e['gpu_hours']:>10,.0f} {usd}")
    return "\n".join(out)


def _show_problems(args: argparse.Namespace, view: RunView) -> int:
    entries, sources = study_problems(args, view)
    goodput = any("goodput_tokens_per_s" in e for e in entries)
    if args.json:
        print_json({"run_dir": view.run_dir, "keep": view.keep, "objective": "goodput" if goodput else "tokens_per_s",
                    "train_tokens": entries[0]["train_tokens"] if entries else None, "prices": sources,
                    "problems": entries})
        return 0
    tokens = entries[0]["train_tokens"] if entries else 0
    print(f"{len(entries)} problems; time and cost to train {tokens:.3g} tokens"
          + (" at goodput (run.json's failure model)" if goodput else "") + "; the cluster's GPUs are paid for")
    print(format_problems(entries, goodput))
    if sources:
        print("prices per GPU-hour: " + "; ".join(
            f"{g} ${r['usd_per_gpu_hour']}" + (f" ({r['provider']}, {r['source']}, {r['date']})" if "date" in r
                                               else " (--gpu-hour-usd)") for g, r in sources.items()))
    return 0


def _show(args: argparse.Namespace, k: int, view: RunView) -> int:
    from sweep._runview import summary

    studies = view.studies()
    reports = [(s, *_study_report(s, k, args.include_infeasible)) for s in studies]
    if args.json:
        total = summary(view)
        print_json({"run_dir": view.run_dir, "keep": view.keep, **total,
                    "studies": [{"model": s.model.get("name"), "cluster": s.cluster.get("name"),
                                 "throughput_column": s.throughput_column, **counts, "rows": rows,
                                 **({"top_stages": st} if rows and (st := stage_breakdown(s, rows[0])) else {}),
                                 **({"best_per_framework": fb[0], "frameworks_without_plan": fb[1]}
                                    if (fb := framework_bests(s)) else {})}
                                for s, counts, rows in reports]})
        return 0
    if view.keep not in (None, "all"):
        print(f"(this run stored {view.keep} rows only: the counts below are of the stored rows)")
    for i, (study, counts, rows) in enumerate(reports):
        if i:
            print()
        why = ", ".join(f"{reason} {n:,}" for reason, n in counts["infeasible_reasons"].items()) or "none"
        print(f"{study.name}: {counts['num_rows']:,} rows, {counts['num_feasible']:,} feasible (infeasible: {why})")
        if not rows:
            print("no feasible row" + ("" if args.include_infeasible else " (--all lists infeasible rows)"))
            continue
        print(format_rows(study.columns, study.throughput_column, rows, with_reason=args.include_infeasible,
                          with_framework=len(study.frameworks()) > 1))
        if "goodput_tokens_per_s" in rows[0]:
            print("ranked by goodput (run.json's failure model): " + ", ".join(
                f"#{i + 1} {r['goodput_tokens_per_s']:,.0f} ({100 * r['goodput_ratio']:.2f}%)"
                for i, r in enumerate(rows)))
        breakdown = stage_breakdown(study, rows[0])
        if breakdown:
            from costmodel import format_stage_rows

            print(f"per stage (top row: {format_placement(rows[0])}; exact pipeline):")
            print(format_stage_rows(breakdown))
        else:
            stages = format_stages(study, rows[0])
            if stages:
                print(stages)
        found = framework_bests(study)
        if found:
            print(format_framework_bests(study, found))
    return 0


# ---- show --rank K --timeline / --trace: a run's K-th best plan drawn as priced ---------------------------------
def ranked_plan(study: RunView, row: dict):
    """(model, cluster, one-row StrategyTable, framework or None) of a result row of ``study``: the run's model and
    cluster (run.json), the row's strategy (a placement's stages where it has them), its framework column."""
    from cli._specs import strategy_from_mapping
    from costmodel import hetero_from_mapping
    from costmodel._strategy import hetero_from_mapping as placement_from_mapping
    from sweep._results import STRATEGY_COLUMNS, hetero_row_strategy
    from sweep._rundir import cluster_from_dict, model_from_dict

    model = model_from_dict(dict(study.model))
    if row.get("stage_pool"):
        cluster = hetero_from_mapping(dict(study.cluster))
        table = placement_from_mapping(hetero_row_strategy(row, model.layers), [p.name for p in cluster.pools],
                                       argument="RUN_DIR")
    else:
        cluster = cluster_from_dict(dict(study.cluster))
        table = strategy_from_mapping({k: row[k] for k in STRATEGY_COLUMNS if row.get(k) is not None}, "RUN_DIR")
    return model, cluster, table, row.get("framework") or None


def _study_path(path: str | None, study: RunView, several: bool) -> str | None:
    """``path``, or with ``several`` studies ``stem-<model>-<cluster>.ext`` (as `plansweep plot` names its files)."""
    if path is None or not several:
        return path
    import os

    stem, ext = os.path.splitext(path)
    name = f"{study.model.get('name')}-{study.cluster.get('name')}"
    return stem + "-" + "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name) + ext


def _draw_ranked(args: argparse.Namespace, rank: int, view: RunView) -> int:
    """--timeline / --trace of each study's ``rank``-th best plan (ranked as show ranks: by goodput in a run that
    ranks by it), re-priced with the exact pipeline; one line per study naming the plan and both step times."""
    from cli._timeline import plan_words, write_plan_outputs
    from costmodel import DEFAULT_FRAMEWORK

    studies = view.studies()
    drawn = 0
    for study in studies:
        _, rows = _study_report(study, rank, False)
        if len(rows) < rank:
            if len(studies) == 1 or (drawn == 0 and study is studies[-1]):
                raise InputError("--rank", f"at most the {len(rows)} distinct feasible plans of {study.name}", rank)
            print(f"plansweep show: {study.name} has {len(rows)} distinct feasible plans: no #{rank} drawn",
                  file=sys.stderr)
            continue
        drawn += 1
        row = rows[rank - 1]
        model, cluster, table, framework = ranked_plan(study, row)
        thr = study.throughput_column
        unit = thr.replace("_per_s", "/s")
        note = (f"the #{rank} plan of the run {view.run_dir}, which priced it at {row.get(thr) or 0:,.0f} {unit}, "
                f"step {row['step_time_s']:.4g} s")
        paths = argparse.Namespace(timeline=_study_path(args.timeline, study, len(studies) > 1),
                                   trace=_study_path(args.trace, study, len(studies) > 1))
        fw = framework or DEFAULT_FRAMEWORK
        write_plan_outputs(paths, model, cluster, table, fw, note=note)
        pools = [p.name for p in cluster.pools] if row.get("stage_pool") else None
        print(f"{study.name}: #{rank} {plan_words(table.row(0, pools) if pools else table.row(0))}, {fw}; "
              f"the run's step {row['step_time_s']:.4g} s, {row.get(thr) or 0:,.0f} {unit}")
    return 0
