"""Draw one parameter set of a simulated pipeline, or one priced plan: a text timeline and Chrome traces.

The Chrome trace is the JSON object format of the Trace Event Format ("X" complete events
with ts and dur in microseconds, "M" metadata events naming processes and threads, otherData
for the rest), which chrome://tracing and https://ui.perfetto.dev open. A plan's trace and its
PNG (sweep._timeline_plot) are drawn from one list of Slices (plan_slices).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from costmodel._pipeline import KIND_NAMES, Timeline

if TYPE_CHECKING:
    from costmodel._plan_timeline import PlanTimeline

# Widest text timeline, in characters of time.
_MAX_COLUMNS = 160


def _label(tl: Timeline, k: int) -> str:
    """F3, B3, W3; a chunk above 0 is shown as F3.1."""
    name = f"{KIND_NAMES[tl.kind[k]]}{tl.micro[k]}"
    return name if tl.chunk[k] == 0 else f"{name}.{tl.chunk[k]}"


def text_timeline(tl: Timeline, index: int = 0, columns: int | None = None) -> str:
    """One row per device; each op fills its share of the columns with its label, idle is '.'.

    columns: characters for the whole run; by default enough for the shortest op to get
    three characters, capped at 160.
    """
    start, end = tl.start[index], tl.end[index]  # (n,)
    total = float(end.max()) if end.size else 0.0
    if columns is None:
        durations = end - start
        shortest = float(durations[durations > 0].min()) if np.any(durations > 0) else 1.0
        wanted = 3 * total / shortest  # inf where the shortest op is a tiny share of the run: the cap then
        columns = _MAX_COLUMNS if not wanted <= _MAX_COLUMNS else max(1, math.ceil(wanted))
    scale = columns / total if total > 0 else 0.0
    rows = []
    n_dev = int(tl.device.max()) + 1 if tl.device.size else 0
    for d in range(n_dev):
        cells = ["."] * columns
        for k in np.flatnonzero(tl.device == d):
            a = min(columns - 1, int(round(start[k] * scale)))
            b = max(a + 1, min(columns, int(round(end[k] * scale))))
            text = _label(tl, k)
            width = b - a
            text = (text + "-" * width)[:width] if width > 1 else text[0]
            cells[a:b] = list(text)
        rows.append(f"dev{d:<3}|{''.join(cells)}|")
    return "\n".join(rows)


def chrome_trace(tl: Timeline, index: int = 0, us_per_unit: float = 1.0) -> dict:
    """Trace Event Format object: one thread per device, one complete event per op.

    us_per_unit: microseconds per time unit of the simulation (1 if times are in us).
    """
    start, end = tl.start[index], tl.end[index]
    n_dev = int(tl.device.max()) + 1 if tl.device.size else 0
    events = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": d, "args": {"name": f"device {d}"}}
              for d in range(n_dev)]
    for k in np.argsort(start, kind="stable"):
        events.append({"name": _label(tl, k), "cat": KIND_NAMES[tl.kind[k]], "ph": "X",
                       "ts": float(start[k]) * us_per_unit, "dur": float(end[k] - start[k]) * us_per_unit,
                       "pid": 0, "tid": int(tl.device[k]),
                       "args": {"microbatch": int(tl.micro[k]), "chunk": int(tl.chunk[k])}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


# --------------------------------------------------------------------------- slices of a timeline
# A drawing's unit: one bar on one lane of one process, in seconds. Chrome traces (plan_trace, schedule_trace)
# and the PNG timeline (sweep._timeline_plot) are both drawn from the same list.

# Lanes (trace threads) of a stage, in display order; hand-offs take HANDOFF_LANE and, where two arrive at once
# (two senders, or a hand-off slower than a pass), the lanes after it.
COMPUTE_LANE, COLLECTIVE_LANE, DP_LANE, HANDOFF_LANE = 0, 1, 2, 3
LANE_NAMES = {COMPUTE_LANE: "compute (F, B, W passes)", COLLECTIVE_LANE: "tp / cp / ep collectives (exposed)",
              DP_LANE: "data-parallel exchange", HANDOFF_LANE: "pp hand-offs received"}
# The iteration's own process (pid 0) and its lanes; stage d is process d + 1.
STEP_PROCESS, STEP_LANE, PARTS_LANE = 0, 0, 1
PASS_CATEGORY = ("forward", "backward", "weight gradient")


@dataclass(frozen=True)
class Slice:
    """One bar: ``process`` (0 the iteration, d + 1 stage d), ``lane`` (the lanes above), start and duration in
    seconds, a category (its colour) and arguments shown with it."""

    process: int
    lane: int
    name: str
    cat: str
    start_s: float
    dur_s: float
    args: dict = field(default_factory=dict)


def pass_slices(tl: Timeline, *, dep: np.ndarray, cross: np.ndarray, link: np.ndarray, handoff: np.ndarray,
                s_per_unit: float = 1.0, index: int = 0) -> list[Slice]:
    """Every pass of a simulated schedule on its stage's compute lane, and each hand-off a pass waited for (its
    producer ran on another stage: ``dep``, ``cross``, the ``link`` it crossed and that link's time ``handoff``
    (D,)) on the receiving stage's hand-off lanes, from the producer's end. Times x ``s_per_unit`` seconds."""
    start, end = tl.start[index] * s_per_unit, tl.end[index] * s_per_unit  # (n,)
    out = []
    for k in np.argsort(start, kind="stable"):
        out.append(Slice(int(tl.device[k]) + 1, COMPUTE_LANE, _label(tl, k), PASS_CATEGORY[tl.kind[k]],
                         float(start[k]), float(end[k] - start[k]),
                         {"microbatch": int(tl.micro[k]), "chunk": int(tl.chunk[k])}))
    hand = np.asarray(handoff, dtype=np.float64) * s_per_unit
    arrivals = [(float(end[dep[k]]), int(k)) for k in np.flatnonzero(cross) if hand[link[k]] > 0]
    busy_until: dict[int, list[float]] = {}  # stage -> end of the last hand-off on each of its lanes
    for t0, k in sorted(arrivals):
        d, src = int(tl.device[k]), int(tl.device[dep[k]])
        lanes = busy_until.setdefault(d, [])
        free = next((i for i, e in enumerate(lanes) if e <= t0), len(lanes))
        lanes[free:free + 1] = [t0 + hand[link[k]]]
        out.append(Slice(d + 1, HANDOFF_LANE + free, f"{_label(tl, k)} in from stage {src}", "pp hand-off", t0,
                         float(hand[link[k]]), {"from stage": src, "link": int(link[k])}))
    return out


def chrome_events(slices: list[Slice], process_names: dict[int, str], us_per_s: float = 1e6) -> list[dict]:
    """Trace Event Format events of ``slices``: a process per stage (named, in order), a thread per lane (named),
    one complete ("X") event per slice with ts and dur in microseconds, to the nanosecond."""
    events = []
    lanes = sorted({(s.process, s.lane) for s in slices})
    for pid, name in process_names.items():
        events += [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}},
                   {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}}]
    for pid, tid in lanes:
        events += [{"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": lane_name(pid, tid)}},
                   {"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}}]
    for s in sorted(slices, key=lambda s: (s.start_s, s.process, s.lane)):
        # both ends on whole nanoseconds (viewers count time in integer ns): a pass that starts where the last one
        # ended, but for the float additions behind them, then shares that instant instead of overlapping it
        ts, end = round(s.start_s * us_per_s, 3), round((s.start_s + s.dur_s) * us_per_s, 3)
        events.append({"name": s.name, "cat": s.cat, "ph": "X", "ts": ts, "dur": round(end - ts, 3),
                       "pid": s.process, "tid": s.lane, "args": s.args})
    return events


def lane_name(process: int, lane: int) -> str:
    """A lane's name: the iteration's two, a stage's LANE_NAMES (hand-off lanes past the first numbered)."""
    if process == STEP_PROCESS:
        return "step" if lane == STEP_LANE else "step parts"
    if lane >= HANDOFF_LANE:
        return LANE_NAMES[HANDOFF_LANE] + ("" if lane == HANDOFF_LANE else f" ({lane - HANDOFF_LANE + 1})")
    return LANE_NAMES[lane]


def schedule_trace(tl: Timeline, *, dep, cross, link, handoff, s_per_unit: float, meta: dict) -> dict:
    """A simulated schedule (`plansweep schedule`) as a Chrome trace: its passes and hand-offs, times given in
    units of ``s_per_unit`` seconds written in microseconds; ``meta`` as the trace's otherData."""
    slices = pass_slices(tl, dep=dep, cross=cross, link=link, handoff=handoff, s_per_unit=s_per_unit)
    n_dev = int(tl.device.max()) + 1 if tl.device.size else 0
    names = {d + 1: f"stage {d}" for d in range(n_dev)}
    return {"traceEvents": chrome_events(slices, names), "displayTimeUnit": "ms", "otherData": meta}


def plan_slices(pt: PlanTimeline) -> list[Slice]:
    """Every bar of a priced plan (costmodel._plan_timeline.PlanTimeline): its passes and hand-offs (pass_slices),
    the exposed tp / cp / ep collectives inside each pass (drawn at the pass's end: the model adds them to the pass,
    not at a place inside it), then the exposed data-parallel exchange and the optimizer step after the pipeline on
    every stage, and the iteration's own lanes: the step and its three parts."""
    out = pass_slices(pt.ops, dep=pt.dep, cross=pt.cross, link=pt.link, handoff=pt.handoff_s)
    for s in [s for s in out if s.lane == COMPUTE_LANE and s.cat in ("forward", "backward")]:
        d, which = s.process - 1, int(s.cat == "backward")
        shares = [(kind, float(c[which, d]) / pt.vpp) for kind, c in pt.collectives.items() if c[which, d] > 0]
        t = s.start_s + s.dur_s - sum(x for _, x in shares)
        for kind, x in shares:
            out.append(Slice(s.process, COLLECTIVE_LANE, f"{kind} in {s.name}", f"{kind} collective", t, x,
                             {"pass": s.name}))
            t += x
    pipe, dp, opt = pt.pipeline_s, pt.dp_exposed_s, pt.optimizer_s
    for d in range(pt.pp):
        if dp > 0:
            out.append(Slice(d + 1, DP_LANE, "data-parallel exchange (exposed)", "data-parallel exchange", pipe, dp,
                             {"this stage's whole exchange, s": float(pt.dp_stage_s[d]),
                              "exposed (the slowest stage's, in the step), s": dp}))
        if opt > 0:
            out.append(Slice(d + 1, COMPUTE_LANE, "optimizer step", "optimizer", pipe + dp, opt, {}))
    parts = (("pipeline", "pipeline", 0.0, pipe), ("data-parallel exchange (exposed)", "data-parallel exchange",
                                                    pipe, dp), ("optimizer step", "optimizer", pipe + dp, opt))
    out.append(Slice(STEP_PROCESS, STEP_LANE, "step", "step", 0.0, pt.step_s,
                     {"step_time_s": pt.step_s, "pipeline_s": pipe, "dp_exchange_exposed_s": dp, "optimizer_s": opt}))
    out += [Slice(STEP_PROCESS, PARTS_LANE, name, cat, t0, x, {"seconds": x}) for name, cat, t0, x in parts if x > 0]
    return out


def plan_process_names(pt: PlanTimeline) -> dict[int, str]:
    """Process names: the iteration, then each stage with its pool and layers."""
    names = {STEP_PROCESS: f"iteration ({pt.schedule}, pp {pt.pp}, {pt.microbatches} micro-batches"
                           + (f", vpp {pt.vpp})" if pt.vpp > 1 else ")")}
    for d in range(pt.pp):
        names[d + 1] = f"stage {d} ({pt.stage_pools[d]}, {pt.stage_layers[d]} layers)"
    return names


def plan_trace(pt: PlanTimeline, meta: dict) -> dict:
    """A priced plan as a Chrome / Perfetto trace: plan_slices with ts and dur in microseconds (the model's
    seconds x 1e6); ``meta`` (model, cluster, framework, plan, ...) with the priced step and its parts as
    otherData."""
    other = {**meta, "time_unit": "ts and dur in microseconds", "step_time_s": pt.step_s,
             "pipeline_s": pt.pipeline_s, "dp_exchange_exposed_s": pt.dp_exposed_s, "optimizer_s": pt.optimizer_s,
             "schedule": pt.schedule, "pp": pt.pp, "microbatches": pt.microbatches, "vpp": pt.vpp}
    return {"traceEvents": chrome_events(plan_slices(pt), plan_process_names(pt)), "displayTimeUnit": "ms",
            "otherData": other}
