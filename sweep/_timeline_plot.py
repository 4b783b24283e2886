"""A priced plan's timeline as a PNG: a band per pipeline stage, its passes, collectives, hand-offs and the
data-parallel exchange, drawn from the same slices as its Chrome trace (costmodel._pipeline_render.plan_slices).

Each stage's band holds its lanes top to bottom: the compute lane (forward, backward, weight-gradient passes and
the optimizer step, on a grey ground: grey left showing is idle time, the bubble), the exposed tp / cp / ep
collectives inside those passes, the data-parallel exchange, and the pipeline hand-offs it receives. Time runs
along x in milliseconds (seconds for steps of 10 s or more).
"""

from __future__ import annotations

import os
import textwrap

import matplotlib

matplotlib.use("Agg")  # files only; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from costmodel._pipeline_render import COMPUTE_LANE, STEP_LANE, STEP_PROCESS, Slice, lane_name  # noqa: E402

# Colour of each slice category (colour-blind-safe Okabe-Ito hues for the passes).
COLORS = {"forward": "#0072B2", "backward": "#E69F00", "weight gradient": "#009E73", "optimizer": "#000000",
          "tp collective": "#D55E00", "cp collective": "#CC79A7", "ep collective": "#F0E442",
          "pp hand-off": "#56B4E9", "data-parallel exchange": "#8B4513", "pipeline": "#999999", "step": "#666666"}
IDLE_COLOR = "#E8E8E8"
# Passes per stage up to which each pass is labelled with its micro-batch (F3, B3.1).
LABEL_MAX_PASSES = 48
# Bars narrower than this fraction of the time axis (about a pixel at the figure's width) are drawn at a line's width.
THIN_FRACTION = 600


def time_unit(step_s: float) -> tuple[str, float]:
    """(unit, scale from seconds) of the x axis: ms below 10 s, else s."""
    return ("ms", 1e3) if step_s < 10 else ("s", 1.0)


def timeline_figure(slices: list[Slice], process_names: dict[int, str], title: str, *, pipeline_s: float):
    """The figure: a row per (process, lane) holding slices, stages top to bottom (the iteration's lanes first),
    the compute lanes on an idle-grey ground over the pipeline's span ``pipeline_s``, the legend outside the axes."""
    step_s = max(s.start_s + s.dur_s for s in slices)
    slices = [s for s in slices if (s.process, s.lane) != (STEP_PROCESS, STEP_LANE)]  # (its parts are drawn)
    rows = sorted({(s.process, s.lane) for s in slices})
    y_of = {key: len(rows) - 1 - i for i, key in enumerate(rows)}  # the first row on top
    unit, scale = time_unit(step_s)
    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.32 * len(rows)))
    for (pid, lane), y in y_of.items():
        if pid != STEP_PROCESS and lane == COMPUTE_LANE:
            ax.broken_barh([(0.0, pipeline_s * scale)], (y - 0.45, 0.9), facecolors=IDLE_COLOR, zorder=1)
    groups: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for s in slices:
        groups.setdefault((y_of[s.process, s.lane], s.cat), []).append((s.start_s * scale, s.dur_s * scale))
    for (y, cat), bars in groups.items():
        color = COLORS.get(cat, "#777777")
        # bars narrower than a pixel or so (a 600th of the axis) edged in their own colour: none drawn thinner
        # than a line; wider ones edged in white, so that neighbours stay apart
        thin = sorted(w for _, w in bars)[len(bars) // 2] < step_s * scale / THIN_FRACTION
        ax.broken_barh(bars, (y - 0.4, 0.8), facecolors=color, edgecolors=color if thin else "white",
                       linewidth=0.4 if thin else 0.3, zorder=2)
    passes = [s for s in slices if s.lane == COMPUTE_LANE and s.process != STEP_PROCESS and s.cat != "optimizer"]
    per_stage = len(passes) / max(len({s.process for s in passes}), 1)
    if per_stage <= LABEL_MAX_PASSES:
        for s in passes:
            ax.text((s.start_s + s.dur_s / 2) * scale, y_of[s.process, s.lane], s.name, ha="center", va="center",
                    fontsize=6, color="white", zorder=3, clip_on=True)
    ax.set_yticks(list(y_of.values()))
    ax.set_yticklabels([process_names.get(pid, str(pid)) if lane == min(ln for p, ln in rows if p == pid)
                        else lane_name(pid, lane) for pid, lane in y_of], fontsize=7)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlim(0, step_s * scale * 1.005)
    ax.set_xlabel(f"time since the step's start ({unit})")
    ax.set_ylabel("pipeline stage and lane")
    ax.grid(True, axis="x", alpha=0.3)
    cats = [c for c in COLORS if any(s.cat == c for s in slices)]
    handles = [Patch(facecolor=COLORS[c], label=c) for c in cats] + [Patch(facecolor=IDLE_COLOR, label="idle (bubble)")]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.set_title("\n".join(textwrap.fill(line, 160) for line in title.splitlines()), fontsize=9)
    fig.tight_layout()
    return fig


def write_timeline(fig, path: str) -> str:
    """Save ``fig`` to ``path`` as a PNG, whole or not at all; close it."""
    from costmodel._files import replaced_atomically

    if os.path.dirname(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    with replaced_atomically(path) as tmp:
        fig.savefig(tmp, dpi=130, bbox_inches="tight", format="png")
    plt.close(fig)
    return path
