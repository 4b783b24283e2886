"""Seed 003's pipeline experiments, recomputed with the vectorised simulator.

Each experiment is a function returning columns (a dict of equal-length lists) with one row
per (schedule, D, m, v, swept parameter, T_C). Parameter sets that share (schedule, D, m, v)
are simulated in one vectorised call. Settings are seed 003's:

- stage times T_F = 400 / D and T_B = 800 / D (the whole model takes 400 forward, 800
  backward), m = 2D unless swept, T_C in {0, 4, 16};
- the six compared schedules: GPipe, 1F1B, interleaved 1F1B with v = 2, Hanayo with 1 and 2
  waves (v = 2, 4), and ZB-H1 with the backward split evenly, T_B = T_W = 800 / (2D).

Unlike seed 003's code, a chunk's times are its stage's times divided by v. Hanayo repeats its
m = D schedule m / D times, as seed 003 does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from costmodel import simulate

DEVICES = (2, 4, 8, 16, 32)
T_C_PANELS = (0.0, 4.0, 16.0)
# Whole-model forward and backward times of seed 003 (arbitrary time units).
MODEL_TF, MODEL_TB = 400.0, 800.0

# (label, schedule, chunks, splits the backward): seed 003's comparison set.
COMPARED = (("GPipe", "gpipe", 1, False), ("1F1B", "1f1b", 1, False), ("1F1B vpp=2", "interleaved", 2, False),
            ("Hanayo wave=1", "hanayo", 2, False), ("Hanayo wave=2", "hanayo", 4, False), ("ZB-H1", "zb-h1", 1, True))


def _rows(out: dict[str, list], label: str, schedule: str, d: int, m: int, v: int, tf: np.ndarray, tb: np.ndarray,
          tw: np.ndarray, tc: np.ndarray, extra: dict[str, np.ndarray]) -> None:
    """Simulate (S, D) stage times tf, tb, tw and (S,) tc; append the rows, with the swept
    ``extra`` values (each (S,))."""
    res = simulate(schedule, d, m, v, tf=tf, tb=tb, tw=tw, tc=tc)
    n = len(tc)
    out["schedule"] += [label] * n
    out["devices"] += [d] * n
    out["microbatches"] += [m] * n
    out["chunks"] += [v] * n
    out["t_c"] += tc.tolist()
    for key, values in extra.items():
        out.setdefault(key, []).extend(np.asarray(values).tolist())
    out["total_time"] += res.total_time.tolist()
    out["bubble_ratio"] += res.bubble_ratio.tolist()
    out["peak_activations_max"] += [float(res.peak_activations.max())] * n


def _empty() -> dict[str, list]:
    keys = ("schedule", "devices", "microbatches", "chunks", "t_c", "total_time", "bubble_ratio",
            "peak_activations_max")
    return {k: [] for k in keys}


def _compared(out: dict[str, list], d: int, m: int, tf: np.ndarray, tb_whole: np.ndarray, tc: np.ndarray,
              extra: dict[str, np.ndarray], zb_split: tuple[np.ndarray, np.ndarray] | None = None,
              schedules: Iterable[tuple[str, str, int, bool]] = COMPARED) -> None:
    """The comparison set at stage times tf, tb_whole ((S, D) each); ZB-H1 gets zb_split
    (T_B, T_W), by default half of the backward each."""
    zero = np.zeros_like(tf)
    for label, schedule, v, split in schedules:
        if split:
            tb, tw = zb_split if zb_split is not None else (tb_whole / 2, tb_whole / 2)
        else:
            tb, tw = tb_whole, zero
        _rows(out, label, schedule, d, m, v, tf, tb, tw, tc, extra)


def _uniform(d: int, n: int, value: float | np.ndarray) -> np.ndarray:
    """(n, d) stage times, the same on every device; value scalar or (n,)."""
    return np.broadcast_to(np.asarray(value, dtype=float).reshape(-1, 1), (n, d)).copy()


def _even_split(out: dict[str, list], d: int, m: int, tc: np.ndarray, extra: dict[str, np.ndarray],
                schedules: Iterable[tuple[str, str, int, bool]] = COMPARED) -> None:
    """The comparison set with the model split evenly over d stages: T_F = 400 / D, T_B = 800 / D."""
    n = len(tc)
    _compared(out, d, m, _uniform(d, n, MODEL_TF / d), _uniform(d, n, MODEL_TB / d), tc, extra, schedules=schedules)


def _scaling(microbatches) -> dict[str, list]:
    """Every schedule over D = 2..32 with T_F = 400 / D, T_B = 800 / D; m = microbatches(D)."""
    out = _empty()
    for d in DEVICES:
        _even_split(out, d, microbatches(d), np.array(T_C_PANELS), {})
    return out


def weak_scaling() -> dict[str, list]:
    return _scaling(lambda d: 2 * d)


def strong_scaling() -> dict[str, list]:
    return _scaling(lambda d: 32)


def recompute() -> dict[str, list]:
    """Recompute ratio r in [0, 1]: T_B = (2 + r) T_F; ZB-H1 has T_B = (1 + r) T_F, T_W = T_F."""
    out = _empty()
    ratios = np.round(np.arange(0.0, 1.01, 0.2), 2)
    r, tc = (a.ravel() for a in np.meshgrid(ratios, T_C_PANELS, indexing="ij"))
    for d in DEVICES:
        n = len(r)
        f = MODEL_TF / d
        tf = _uniform(d, n, f)
        split = (_uniform(d, n, f * (1 + r)), _uniform(d, n, f))
        _compared(out, d, 2 * d, tf, _uniform(d, n, f * (2 + r)), tc, {"recompute": r}, split)
    return out


def microbatches_per_device() -> dict[str, list]:
    out = _empty()
    tc = np.array(T_C_PANELS)
    for d in (2, 4, 8, 16):
        for per in (1, 2, 4, 8):
            _even_split(out, d, per * d, tc, {"microbatches_per_device": np.full(len(tc), per)})
    return out


def chunks() -> dict[str, list]:
    """Interleaved with v = chunks, Hanayo with chunks / 2 waves."""
    out = _empty()
    for d in DEVICES:
        for v in (2, 4, 6, 8):
            pair = (("Interleaved 1F1B", "interleaved", v, False), ("Hanayo", "hanayo", v, False))
            _even_split(out, d, 2 * d, np.array(T_C_PANELS), {}, schedules=pair)
    return out


def backward_split() -> dict[str, list]:
    """ZB-H1 as the share T_B / (T_B + T_W) of a fixed backward 800 / D varies."""
    out = _empty()
    shares = np.array([0.2, 0.4, 0.5, 0.6, 0.8])
    share, tc = (a.ravel() for a in np.meshgrid(shares, T_C_PANELS, indexing="ij"))
    for per in (1, 2, 4, 8):
        for d in DEVICES:
            n = len(share)
            tb_all = MODEL_TB / d
            _rows(out, "ZB-H1", "zb-h1", d, per * d, 1, _uniform(d, n, MODEL_TF / d), _uniform(d, n, tb_all * share),
                  _uniform(d, n, tb_all * (1 - share)), tc,
                  {"tb_share": share, "microbatches_per_device": np.full(n, per)})
    return out


def tc_sensitivity() -> dict[str, list]:
    out = _empty()
    tc = np.array([0.0, 2.0, 4.0, 8.0, 16.0, 32.0])
    for d in DEVICES:
        for per in (1, 2, 4):
            _even_split(out, d, per * d, tc, {"microbatches_per_device": np.full(len(tc), per)})
    return out


def imbalanced() -> dict[str, list]:
    """First and last stages get T_ext = x T_F more forward and 2 T_ext more backward.

    Seed 003 uses T_F = 400 and T_B = 800 per stage here (not divided by D); ZB-H1 puts the
    extra backward in T_B: T_B = 400 (1 + 2x) at the ends, T_W = 400.
    """
    out = _empty()
    ratios = np.round(np.arange(0.0, 0.41, 0.1), 2)
    x, tc = (a.ravel() for a in np.meshgrid(ratios, T_C_PANELS, indexing="ij"))
    for d in DEVICES:
        n = len(x)
        ends = np.zeros(d)
        ends[[0, -1]] = 1.0
        bump = x[:, None] * ends[None, :]  # (S, D): x on the end stages, else 0
        tf = 400.0 * (1 + bump)
        tb = 800.0 * (1 + bump)
        split = (400.0 * (1 + 2 * bump), np.full((n, d), 400.0))
        _compared(out, d, 2 * d, tf, tb, tc, {"t_ext_ratio": x}, split)
    return out


@dataclass(frozen=True, kw_only=True)
class Experiment:
    """How to compute one experiment and how to draw it."""

    columns: Callable[[], dict[str, list]]
    x: str  # x axis column
    title: str
    y: str | tuple[str, ...] = "bubble_ratio"  # y axis column(s); several give one subplot row each
    panel: str = "t_c"  # one subplot per value, across
    row: str | None = "devices"  # one subplot row per value, down
    line: str = "schedule"  # one line per value


EXPERIMENTS = {
    "weak_scaling": Experiment(columns=weak_scaling, x="devices", y=("total_time", "bubble_ratio"), row=None,
                               title="Weak scaling, m = 2D, T_F = 400 / D, T_B = 800 / D"),
    "strong_scaling": Experiment(columns=strong_scaling, x="devices", y=("total_time", "bubble_ratio"), row=None,
                                 title="Strong scaling, m = 32, T_F = 400 / D, T_B = 800 / D"),
    "recompute": Experiment(columns=recompute, x="recompute", title="Recompute ratio"),
    "microbatches_per_device": Experiment(columns=microbatches_per_device, x="microbatches_per_device",
                                          title="Micro-batches per device"),
    "chunks": Experiment(columns=chunks, x="chunks", title="Chunks, m = 2D"),
    "backward_split": Experiment(columns=backward_split, x="tb_share", row="microbatches_per_device", line="devices",
                                 title="ZB-H1: T_B / (T_B + T_W) at fixed T_B + T_W"),
    "tc_sensitivity": Experiment(columns=tc_sensitivity, x="t_c", panel="microbatches_per_device",
                                 title="T_C sensitivity"),
    "imbalanced": Experiment(columns=imbalanced, x="t_ext_ratio", title="Imbalanced first and last stages, m = 2D"),
}


# ---- figures ------------------------------------------------------------------------------------------------------
# Axis labels with their units (seed 003's times are in arbitrary units: a whole model's forward takes 400).
AXIS_LABELS = {
    "devices": "pipeline devices D (stages)", "recompute": "recompute ratio r (share of a forward redone)",
    "microbatches_per_device": "micro-batches per device, m / D (count)", "chunks": "chunks per device v (count)",
    "tb_share": "T_B / (T_B + T_W) (share of the backward)", "t_c": "hand-off time T_C (time units)",
    "t_ext_ratio": "extra time on the end stages (share of T_F)", "total_time": "iteration time (time units)",
    "bubble_ratio": "bubble (% of the devices' time)", "peak_activations_max": "peak activations (stage micro-batches)",
}
# How a panel's title names its quantity, and the unit after the value.
PANEL_NAMES = {"t_c": ("T_C", " time units"), "devices": ("D", " devices"),
               "microbatches_per_device": ("m / D", " micro-batches per device")}
# A distinct line style and marker per compared schedule: GPipe and 1F1B take the same time wherever their stages
# are alike and T_C = 0, so GPipe is drawn dashed with larger hollow squares, visible around 1F1B's solid line.
SCHEDULE_STYLES = {
    "GPipe": {"linestyle": "--", "marker": "s", "markersize": 7, "markerfacecolor": "none", "color": "C0"},
    "1F1B": {"linestyle": "-", "marker": "o", "markersize": 3.5, "color": "C1"},
    "1F1B vpp=2": {"linestyle": "-.", "marker": "^", "markersize": 4, "color": "C2"},
    "Interleaved 1F1B": {"linestyle": "-.", "marker": "^", "markersize": 4, "color": "C2"},
    "Hanayo wave=1": {"linestyle": ":", "marker": "D", "markersize": 4, "color": "C3"},
    "Hanayo": {"linestyle": ":", "marker": "D", "markersize": 4, "color": "C3"},
    "Hanayo wave=2": {"linestyle": (0, (5, 1, 1, 1)), "marker": "v", "markersize": 4, "color": "C4"},
    "ZB-H1": {"linestyle": (0, (1, 1)), "marker": "P", "markersize": 5, "color": "C5"},
}
_OTHER_STYLES = tuple({"linestyle": ls, "marker": mk, "markersize": 4, "color": f"C{i}"}
                      for i, (ls, mk) in enumerate(zip(("-", "--", "-.", ":", "-", "--"), "osD^vP", strict=True)))
TIME_NOTE = "synthetic stage times in arbitrary time units (a whole model: T_F = 400, T_B = 800), no model or cluster"


def line_style(line_key: str, value, index: int) -> dict:
    """The style of one line: the schedule's own (SCHEDULE_STYLES), else by its place among the lines."""
    if line_key == "schedule" and str(value) in SCHEDULE_STYLES:
        return SCHEDULE_STYLES[str(value)]
    return _OTHER_STYLES[index % len(_OTHER_STYLES)]


def _panel_title(key: str, value) -> str:
    name, unit = PANEL_NAMES.get(key, (key.replace("_", " "), ""))
    return f"{name} = {value:g}{unit}"


def experiment_figure(exp: Experiment, columns: dict[str, list]):
    """One experiment's figure: a subplot per panel value across (and per row value and quantity down), a line per
    schedule in its own style, axes labelled with units, one legend outside the subplots, the title naming the
    experiment and that its times are synthetic."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = {k: np.asarray(v) for k, v in columns.items()}
    panels = sorted(set(cols[exp.panel].tolist()))
    ys = (exp.y,) if isinstance(exp.y, str) else exp.y
    row_values = sorted(set(cols[exp.row].tolist())) if exp.row else [None]
    rows = [(r, y) for r in row_values for y in ys]
    lines = list(dict.fromkeys(cols[exp.line].tolist()))
    fig, axes = plt.subplots(len(rows), len(panels), figsize=(4.2 * len(panels) + 1.8, 3.2 * len(rows)),
                             squeeze=False, layout="constrained")
    for i, (row_value, y) in enumerate(rows):
        for j, panel_value in enumerate(panels):
            ax = axes[i][j]
            mask = cols[exp.panel] == panel_value
            if exp.row:
                mask &= cols[exp.row] == row_value
            for k, line in enumerate(lines):
                sel = mask & (cols[exp.line] == line)
                if not sel.any():
                    continue
                order = np.argsort(cols[exp.x][sel], kind="stable")
                scale = 100.0 if y == "bubble_ratio" else 1.0
                ax.plot(cols[exp.x][sel][order], scale * cols[y][sel][order], **line_style(exp.line, line, k),
                        label=f"{exp.line.replace('_', ' ')} = {line}" if exp.line != "schedule" else str(line))
            title = _panel_title(exp.panel, panel_value)
            if exp.row:
                title = f"{_panel_title(exp.row, row_value)}, {title}"
            ax.set_title(title, fontsize=9)
            ax.set(xlabel=AXIS_LABELS.get(exp.x, exp.x), ylabel=AXIS_LABELS.get(y, y))
            if y == "total_time":
                ax.set_yscale("log")
            ax.grid(True, alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right upper", fontsize=8, frameon=False,
               title=exp.line.replace("_", " "))
    fig.suptitle(f"{exp.title}\n{TIME_NOTE}", fontsize=10)
    return fig
