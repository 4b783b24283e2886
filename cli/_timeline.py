"""--timeline FILE.png and --trace FILE.json of `plansweep evaluate` and `plansweep show --rank K`: the plan as priced
(costmodel._plan_timeline), drawn as a PNG (sweep._timeline_plot) and a Chrome / Perfetto trace
(costmodel._pipeline_render.plan_trace), from the same slices."""

from __future__ import annotations

import contextlib
import json
import os
import sys

from costmodel import InputError


def add_timeline_args(p) -> None:
    p.add_argument("--timeline", metavar="FILE.png",
                   help="draw the plan's iteration as priced into a PNG: per pipeline stage its forward, backward "
                   "and weight-gradient passes, the exposed collectives, hand-offs, data-parallel exchange and "
                   "optimizer step, the bubble as idle time")
    p.add_argument("--trace", metavar="FILE.json",
                   help="the same as a Chrome / Perfetto trace (ui.perfetto.dev): a process per stage, a thread "
                   "per lane, times in microseconds")


def wanted(args) -> bool:
    """Whether --timeline or --trace was given."""
    return bool(getattr(args, "timeline", None) or getattr(args, "trace", None))


def check_paths(args) -> None:
    """--timeline and --trace name files in existing folders (not folders themselves): checked before any
    pricing."""
    for flag in ("timeline", "trace"):
        path = getattr(args, flag, None)
        if path is None:
            continue
        if os.path.isdir(path) or not os.path.basename(path):
            raise InputError(f"--{flag}", "a file name", path)
        if not os.path.isdir(os.path.dirname(path) or "."):
            raise InputError(f"--{flag}", "a file in an existing folder", path)


# Passes (a stage's forward, backward or weight gradient of one micro-batch on one chunk) a timeline draws at most:
# 16,384 micro-batches on 8 stages are 262,144 passes, a 77 MB trace drawn in about 10 s on one core; a step of many
# more is priced from a shorter run (costmodel._pipeline.periodic_proxy) but would be drawn whole.
DRAWN_PASSES_MAX = 1 << 18


def check_drawable(args, model, cluster, table, framework) -> None:
    """--timeline / --trace refused, before anything is priced whole or written, for a plan of more than
    DRAWN_PASSES_MAX passes (micro-batches x stages x chunks x the kinds of pass its schedule runs)."""
    from costmodel import evaluate
    from costmodel._pipeline import _SPLIT_BACKWARD
    from costmodel._strategy import SCHEDULES

    m = evaluate(model, cluster, table.take(slice(0, 1)), framework=framework)  # (closed forms: the counts alone)
    micro, pp = int(m["microbatches"][0]), int(table["pp"][0])
    split = SCHEDULES[int(table["schedule"][0])] in _SPLIT_BACKWARD
    passes = micro * pp * int(table["vpp"][0]) * (3 if split else 2)
    if passes > DRAWN_PASSES_MAX:
        flag = "--trace" if getattr(args, "trace", None) else "--timeline"
        raise InputError(flag, f"a plan of at most {DRAWN_PASSES_MAX:,} passes to draw (micro-batches x stages x "
                         "chunks x passes a micro-batch)", f"{micro:,} micro-batches a step on {pp} stages: "
                         f"{passes:,} passes")


def plan_words(row: dict, pool_names: list[str] | None = None) -> str:
    """The plan in a line: degrees, micro-batching, schedule, recompute, ZeRO (a placement: its stages)."""
    rc = row.get("recompute", "none")
    sched = row["schedule"] + (f" vpp {row['vpp']}" if (row.get("vpp") or 1) > 1 else "")
    tail = f"{sched}, recompute {rc}, ZeRO {row.get('zero_stage', 0)}"
    if "stages" in row:
        stages = " ".join(f"{st['pool']}:{st['dp']}x{st['tp']}" for st in row["stages"])
        return f"pp {len(row['stages'])} [{stages}] cp {row.get('cp', 1)}, {row['microbatches']} micro-batches, {tail}"
    ep = f" ep {row['ep']}" if (row.get("ep") or 1) > 1 else ""
    return (f"dp {row['dp']} tp {row['tp']} pp {row['pp']} cp {row['cp']}{ep}, micro-batch {row['micro_batch']} "
            f"of {row['global_batch']}, {tail}")


def write_plan_outputs(args, model, cluster, table, framework: str, *, note: str = "", profile=None) -> list[str]:
    """Price row 0 of ``table`` as evaluate does and write --timeline / --trace; the files written. ``note``: a
    line for the figure's title and the trace's metadata (where the plan comes from); ``profile``: the Framework it is
    priced under where it is not ``framework``'s own (other gradient and optimizer dtypes)."""
    from costmodel._hetero_cluster import HeteroCluster
    from costmodel._pipeline_render import plan_process_names, plan_slices, plan_trace
    from costmodel._plan_timeline import plan_timeline

    check_drawable(args, model, cluster, table, framework if profile is None else profile)
    pt = plan_timeline(model, cluster, table, framework if profile is None else profile)
    names = [p.name for p in cluster.pools] if isinstance(cluster, HeteroCluster) else None
    row = table.row(0, names) if names else table.row(0)
    where = cluster.describe() if isinstance(cluster, HeteroCluster) else cluster.gpu.name
    m = pt.metrics
    thr = "samples_per_s" if model.kind == "mlp" else "tokens_per_s"
    meta = {"model": model.name, "cluster": cluster.name, "cluster_detail": where, "framework": framework,
            "plan": row, thr: float(m[thr][0]) if pt.fits else None, "fits_in_memory": pt.fits,
            "bubble_ratio": float(m["bubble_ratio"][0])}
    if note:
        meta["source"] = note
    written = []
    if args.trace:
        from costmodel._files import replaced_atomically

        with _writing("--trace", args.trace), replaced_atomically(args.trace) as tmp, open(tmp, "w") as fh:
            json.dump(plan_trace(pt, meta), fh)
        written.append(args.trace)
    if args.timeline:
        from sweep._timeline_plot import timeline_figure, write_timeline

        fig = timeline_figure(plan_slices(pt), plan_process_names(pt), timeline_title(pt, meta, note),
                              pipeline_s=pt.pipeline_s)
        with _writing("--timeline", args.timeline):
            written.append(write_timeline(fig, args.timeline))
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    return written


@contextlib.contextmanager
def _writing(flag: str, path: str):
    """An OSError while writing ``path`` as InputError naming ``flag`` (the file is whole or absent)."""
    try:
        yield
    except OSError as exc:
        raise InputError(flag, "a file that can be written", f"{path} ({exc.strerror or exc})") from None


def timeline_title(pt, meta: dict, note: str = "") -> str:
    """Model, cluster, framework and plan; the step and its parts; the throughput and the bubble."""
    thr = next((k for k in ("tokens_per_s", "samples_per_s") if k in meta), "tokens_per_s")
    rate = (f"{meta[thr]:,.0f} {thr.replace('_per_s', '/s')}" if meta.get(thr) is not None
            else "does not fit in memory")
    lines = [f"{meta['model']} on {meta['cluster']} ({meta['cluster_detail']}), framework {meta['framework']}",
             plan_words(meta["plan"]),
             f"step {pt.step_s:.4g} s = pipeline {pt.pipeline_s:.4g} s + exposed data-parallel exchange "
             f"{pt.dp_exposed_s:.3g} s + optimizer {pt.optimizer_s:.3g} s; {rate}; "
             f"bubble {100 * meta['bubble_ratio']:.1f}% of the pipeline"]
    return "\n".join(lines + ([note] if note else []))
