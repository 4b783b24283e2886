"""Draw one parameter set of a simulated pipeline: a text timeline and a Chrome trace.

The Chrome trace is the JSON object format of the Trace Event Format ("X" complete events
with ts and dur in microseconds), which chrome://tracing and https://ui.perfetto.dev open.
"""

from __future__ import annotations

import math

import numpy as np

from costmodel._pipeline import KIND_NAMES, Timeline

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
        columns = min(_MAX_COLUMNS, max(1, math.ceil(3 * total / shortest)))
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
