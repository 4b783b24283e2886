"""``plansweep schedule``: simulate one pipeline schedule, draw it, export a Chrome trace.

plansweep schedule --schedule 1f1b --devices 4 --microbatches 8 --tf 1 --tb 2 --tc 0.1          (ms)
plansweep schedule --schedule zb-v --devices 4 --microbatches 8 --tf 1 --tb 1 --tw 1 --json
plansweep schedule --schedule 1f1b --devices 4 --microbatches 8 --tf 0.02 --tb 0.04 --unit s --trace t.json

Times are read in --unit (ms by default) and printed in it; the trace's ts and dur are microseconds, as the
Trace Event Format defines them.
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np

from cli import COMMAND_HELP, print_json
from cli._specs import number_list
from costmodel import SCHEDULES, InputError, simulate, text_timeline
from costmodel._files import check_file_path, replaced_for

# Chunks when --chunks is not given: one wave for hanayo, the V's two chunks for zb-v.
_DEFAULT_CHUNKS = {"interleaved": 2, "hanayo": 2, "zb-v": 2}
# Seconds per unit of the times given (--unit).
SECONDS_PER_UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
# Bounds far above any real pipeline: the simulation's time and memory grow with devices x micro-batches x chunks
# (about 10 s and 1 GB at the most passes).
MAX_DEVICES = 1024
MAX_MICROBATCHES = 65536
MAX_PASSES = 1 << 20


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("schedule", help=COMMAND_HELP["schedule"],
                              description="Simulate one pipeline schedule: total time, bubble ratio, busy time and "
                              "peak activations per device, a text timeline, optionally a Chrome trace.")
    p.add_argument("--schedule", required=True, choices=SCHEDULES)
    p.add_argument("--devices", required=True, type=int, help="pipeline depth D")
    p.add_argument("--microbatches", required=True, type=int, help="micro-batches m")
    p.add_argument("--chunks", type=int, default=None,
                   help="chunks per device v (interleaved: default 2; hanayo: 2 x waves; zb-v: 2)")
    for flag, what, required in (("--tf", "forward", True), ("--tb", "backward (activation gradient)", True),
                                 ("--tw", "weight-gradient", False)):
        p.add_argument(flag, required=required, default="0",
                       help=f"{what} time per stage: one number or one per device, comma-separated")
    p.add_argument("--tc", type=float, default=0.0, help="time of one device-to-device hand-off")
    p.add_argument("--unit", choices=tuple(SECONDS_PER_UNIT), default="ms",
                   help="the unit of --tf, --tb, --tw and --tc, and of the times printed (default ms)")
    p.add_argument("--json", action="store_true", help="print one JSON object (times in --unit)")
    p.add_argument("--trace", metavar="FILE",
                   help="write a Chrome/Perfetto trace JSON to FILE (ts and dur in microseconds, from --unit)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    chunks = args.chunks if args.chunks is not None else _DEFAULT_CHUNKS.get(args.schedule, 1)
    if args.trace is not None:
        check_file_path("--trace", args.trace)
    if args.tc < 0 or not np.isfinite(args.tc):
        raise InputError("--tc", "a finite time >= 0", args.tc)
    _check_size(args.devices, args.microbatches, chunks)
    times = {k: number_list(getattr(args, k), f"--{k}", float, "a number or comma-separated numbers")
             for k in ("tf", "tb", "tw")}
    for key, values in times.items():
        if len(values) not in (1, args.devices):
            raise InputError(f"--{key}", f"1 value or {args.devices} (one per device)", len(values))
        if not all(math.isfinite(x) and x >= 0 for x in values):
            raise InputError(f"--{key}", "finite times >= 0", getattr(args, key))
    res = simulate(args.schedule, args.devices, args.microbatches, chunks, tf=times["tf"], tb=times["tb"],
                   tw=times["tw"], tc=args.tc, timeline=True)
    total = float(res.total_time[0])
    if not math.isfinite(total * SECONDS_PER_UNIT[args.unit] * 1e6):  # the trace's microseconds included
        raise InputError("--tf, --tb, --tw, --tc", "times whose schedule takes a finite time in microseconds",
                         f"a total of {total:.6g} {args.unit}")
    if args.trace is not None:
        _write_trace(args, res, chunks)
    if args.json:
        print_json({"total_time": float(res.total_time[0]), "bubble_ratio": float(res.bubble_ratio[0]),
                    "busy_time": [float(x) for x in res.busy_time[0]],
                    "peak_activations": [float(x) for x in res.peak_activations]})
        return 0
    print(text_timeline(res.timeline))
    print(f"{args.schedule}: D={args.devices} m={args.microbatches} v={chunks}  "
          f"total_time={res.total_time[0]:.6g} {args.unit}  bubble_ratio={res.bubble_ratio[0]:.4f}")
    print(f"busy_time ({args.unit}):   " + " ".join(f"{x:.6g}" for x in res.busy_time[0]))
    print("peak_activations: " + " ".join(f"{x:.4g}" for x in res.peak_activations))
    return 0


def _check_size(devices: int, microbatches: int, chunks: int) -> None:
    """InputError naming the flag where the pipeline is larger than any real one (MAX_DEVICES, MAX_MICROBATCHES,
    MAX_PASSES): its simulation would take minutes and gigabytes. Counts below 1 are the simulator's to refuse."""
    for flag, value, most in (("--devices", devices, MAX_DEVICES), ("--microbatches", microbatches, MAX_MICROBATCHES)):
        if value > most:
            raise InputError(flag, f"at most {most:,}", value)
    if min(devices, microbatches, chunks) >= 1 and devices * microbatches * chunks > MAX_PASSES:
        raise InputError("--devices x --microbatches x --chunks", f"at most {MAX_PASSES:,} forward passes",
                         devices * microbatches * chunks)


def _write_trace(args: argparse.Namespace, res, chunks: int) -> None:
    """The simulated schedule as a Chrome trace at args.trace: passes and hand-offs, times from --unit to
    microseconds (costmodel._pipeline_render.schedule_trace)."""
    from costmodel._pipeline import compile_schedule
    from costmodel._pipeline_render import schedule_trace

    g = compile_schedule(args.schedule, args.devices, args.microbatches, chunks)
    meta = {"schedule": args.schedule, "devices": args.devices, "microbatches": args.microbatches, "chunks": chunks,
            "input_unit": args.unit, "time_unit": "ts and dur in microseconds",
            "total_time_s": float(res.total_time[0]) * SECONDS_PER_UNIT[args.unit],
            "bubble_ratio": float(res.bubble_ratio[0])}
    trace = schedule_trace(res.timeline, dep=g.dep, cross=g.cross, link=g.link,
                           handoff=np.full(args.devices, args.tc), s_per_unit=SECONDS_PER_UNIT[args.unit], meta=meta)
    with replaced_for("--trace", args.trace) as tmp, open(tmp, "w") as fh:
        json.dump(trace, fh)
