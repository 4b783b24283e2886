"""Figures of a run: throughput against the parallel degrees, and seed 000's figures.

Every figure is drawn from whole columns of the results (feasible rows only): "best over the
other dimensions" is a group-by maximum (numpy, no loop over rows). Matplotlib runs with the
Agg backend, so no display is needed.

Seed 000 (a DistIR notebook, ../shared/seeds/000_*.txt) draws, for an MLP of 64 layers of
8192 x 8192 on 16 GPUs linked all-to-all at 200 Gb/s and batch 8192:
  - grid_search: throughput (samples/s) against the horizontal (tensor) degree on a log
    axis, one line per micro-batch count ("No pipeline parallelism" for the runs without
    pipeline stages), one panel per data-parallel degree, every configuration using all GPUs;
  - data_parallelism / horizontal_parallelism / pipeline_parallelism: one degree varied with
    the other two at 1 (the pipeline one with 8 micro-batches), throughput against degree, one
    line per batch size (the seed's lines; here per global batch and micro-batch count found).
"""

from __future__ import annotations

import dataclasses
import os

import matplotlib

matplotlib.use("Agg")  # files only; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullLocator  # noqa: E402

from sweep._runview import DEGREES, RunView  # noqa: E402

DPI = 150
MARKERS = ("o", "D", "v", "s", "<", "x", "^", ">", "P", "*")
# Each degree's axis label with its unit: what one step of the degree counts.
DEGREE_LABELS = {"dp": "Data-parallel degree (model replicas)",
                 "tp": "Horizontal (tensor) parallel degree (GPUs per layer)",
                 "pp": "Pipeline-parallel degree (stages)", "cp": "Context-parallel degree (GPUs per sequence)"}
# The same as seed 000's isolated-scaling figures word them ("# ... partitions"), with the unit.
PARTITION_LABELS = {"dp": "# Data parallel partitions (model replicas", "tp": "# Horizontal parallel partitions "
                    "(GPUs per layer", "pp": "# Pipeline parallel partitions (stages"}
# Seed 000's isolated-scaling figures: the varied degree and the file name the seed saves.
ISOLATED = (("dp", "data_parallelism"), ("tp", "horizontal_parallelism"), ("pp", "pipeline_parallelism"))
MAX_GRID_PANELS = 8  # panels of the grid figure (largest data-parallel degrees dropped beyond)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Columns:
    """The feasible rows of a run, the columns the figures need (shape (N,) each)."""

    degrees: dict[str, np.ndarray]   # dp, tp, pp, cp
    microbatches: np.ndarray
    global_batch: np.ndarray
    throughput: np.ndarray           # samples/s or tokens/s (see label)
    label: str                       # axis label of the throughput
    num_gpus: int                    # the cluster's GPUs (or the most any row uses)
    widest: bool = False             # a placement run: dp and tp are each row's widest stage's


def load_columns(view: RunView) -> Columns:
    """The feasible rows' columns; a placement run's dp and tp are its widest stage's
    (stage_dp, stage_tp: each row's largest)."""
    thr = view.throughput_column
    placed = {"dp": "stage_dp", "tp": "stage_tp"} if view.placed else {}
    want = [placed.get(c, c) for c in (*DEGREES, "microbatches", "global_batch") if c in view.columns] + [thr]
    cols = view.read(want, feasible_only=True)
    cols.update({d: cols.pop(c) for d, c in placed.items()})
    n = cols[thr].size
    degrees = {d: cols[d].astype(np.int64) if d in cols else np.ones(n, np.int64) for d in DEGREES}
    used = degrees["dp"] * degrees["tp"] * degrees["pp"] * degrees["cp"]
    nodes, per = view.cluster.get("nodes"), view.cluster.get("gpus_per_node")
    num_gpus = int(nodes) * int(per) if isinstance(nodes, int) and isinstance(per, int) else int(used.max(initial=1))
    unit = "samples/second" if thr == "samples_per_s" else "tokens/second"
    return Columns(
        degrees=degrees,
        microbatches=cols["microbatches"].astype(np.int64) if "microbatches" in cols else np.ones(n, np.int64),
        global_batch=cols["global_batch"].astype(np.int64) if "global_batch" in cols else np.zeros(n, np.int64),
        throughput=cols[thr].astype(np.float64), label=f"Throughput ({unit})", num_gpus=num_gpus, widest=bool(placed))


def best_by(keys: list[np.ndarray], values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group rows by the key columns; (G, K) distinct keys (sorted) and (G,) max value."""
    if values.size == 0:
        return np.zeros((0, len(keys)), np.int64), np.zeros(0)
    uniq, inv = np.unique(np.stack(keys, axis=1), axis=0, return_inverse=True)
    best = np.full(len(uniq), -np.inf)
    np.maximum.at(best, inv.ravel(), values)
    return uniq, best


def _log2_axis(ax, ticks) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))


def _thousands(ax) -> None:
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y / 1e3:g}k" if y >= 1e3 else f"{y:g}"))
    ax.grid(True, alpha=0.3)


def _save(fig, out_dir: str, name: str) -> str:
    """``fig`` as out_dir/name.png, whole or absent; InputError naming --out (`plansweep plot`'s folder) where it
    cannot be written. The figure is closed."""
    from costmodel._files import replaced_for

    path = os.path.join(out_dir, f"{name}.png")
    try:
        with replaced_for("--out", path) as tmp:
            fig.savefig(tmp, dpi=DPI, bbox_inches="tight", format="png")
    finally:
        plt.close(fig)
    return path


def plot_degrees(c: Columns, title: str, out_dir: str, suffix: str = "") -> str | None:
    """Best throughput against each degree that takes more than one value (best over the rest)."""
    varied = [d for d in DEGREES if np.unique(c.degrees[d]).size > 1]
    if not varied or c.throughput.size == 0:
        return None
    fig, axes = plt.subplots(1, len(varied), figsize=(4.2 * len(varied), 3.6), sharey=True, squeeze=False)
    for ax, d in zip(axes[0], varied, strict=True):
        keys, best = best_by([c.degrees[d]], c.throughput)
        x = keys[:, 0]
        ax.plot(x, best, marker="o", color="C0")
        _log2_axis(ax, x)
        ax.set_xlabel(DEGREE_LABELS[d] + (", widest stage" if c.widest and d in ("dp", "tp") else ""))
        _thousands(ax)
    axes[0][0].set_ylabel(c.label)
    fig.suptitle(f"{title}: best feasible throughput per degree\n(each point the best over the other dimensions)",
                 fontsize=11)
    fig.tight_layout()
    return _save(fig, out_dir, "throughput_vs_degrees" + suffix)


NO_PIPELINE = 0  # line key of the strategies without pipeline stages in the grid figure


def _mb_label(key: int) -> str:
    if key == NO_PIPELINE:
        return "No pipeline parallelism"  # seed 000's label (its p = 1 runs use m = 1)
    return f"{key} microbatch" + ("es" if key != 1 else "")


def plot_grid_search(c: Columns, title: str, out_dir: str, suffix: str = "") -> str | None:
    """Seed 000's grid-search figure: a panel per data-parallel degree, throughput against the
    horizontal degree, configurations that use every GPU. As in the seed, the strategies without
    pipeline stages (p = 1) form one line, "No pipeline parallelism" (best over their micro-batch
    counts: without stages, micro-batches are only gradient accumulation), and the pipelined ones
    one line per micro-batch count."""
    d = c.degrees
    full = d["dp"] * d["tp"] * d["pp"] * d["cp"] == c.num_gpus
    if not np.any(full):
        return None
    line = np.where(d["pp"][full] == 1, NO_PIPELINE, c.microbatches[full])  # (F,)
    keys, best = best_by([d["dp"][full], line, d["tp"][full]], c.throughput[full])
    dps = np.unique(keys[:, 0])[:MAX_GRID_PANELS]
    lines = np.unique(keys[:, 1])
    tps = np.unique(keys[:, 2])
    fig, axes = plt.subplots(1, len(dps), figsize=(3.3 * len(dps) + 0.6, 3.4), sharex=True, sharey=True, squeeze=False)
    handles: dict[int, object] = {}
    for ax, dp in zip(axes[0], dps, strict=True):
        for j, key in enumerate(lines):
            sel = (keys[:, 0] == dp) & (keys[:, 1] == key)
            if not np.any(sel):
                continue
            (h,) = ax.plot(keys[sel, 2], best[sel], marker=MARKERS[j % len(MARKERS)], color=f"C{j % 10}",
                           label=_mb_label(int(key)))
            handles.setdefault(int(key), h)
        ax.set_title("No data parallelism" if dp == 1 else f"{dp} data parallel partitions", fontsize=11)
        _log2_axis(ax, tps)
        _thousands(ax)
        ax.set_xlabel("# Horizontal parallel partitions (GPUs per layer)")
    axes[0][0].set_ylabel(c.label)
    order = sorted(handles)
    fig.legend([handles[k] for k in order], [handles[k].get_label() for k in order], loc="lower center",
               ncol=min(len(order), 7), frameon=False, bbox_to_anchor=(0.5, -0.02))
    fig.suptitle(f"{title}: grid search on {c.num_gpus} GPUs (best over the rest; missing points do not fit)",
                 fontsize=11)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return _save(fig, out_dir, "grid_search" + suffix)


def plot_isolated(c: Columns, title: str, out_dir: str, suffix: str = "") -> list[str]:
    """Seed 000's isolated scaling: one degree varied, the other degrees at 1, one line per
    (global batch, micro-batch count); a figure per degree with at least two points."""
    written = []
    d = c.degrees
    for deg, name in ISOLATED:
        others = [o for o in DEGREES if o != deg]
        sel = np.all([d[o] == 1 for o in others], axis=0)
        if np.unique(d[deg][sel]).size < 2:
            continue
        keys, best = best_by([c.global_batch[sel], c.microbatches[sel], d[deg][sel]], c.throughput[sel])
        lines = np.unique(keys[:, :2], axis=0)
        fig, ax = plt.subplots(figsize=(7.6, 3.6))
        for j, (B, m) in enumerate(lines):
            s = (keys[:, 0] == B) & (keys[:, 1] == m)
            if s.sum() < 2 and len(lines) > 1:
                continue  # a lone point (degree 1 only) is not a scaling line
            ax.plot(keys[s, 2], best[s], marker=MARKERS[j % len(MARKERS)], color=f"C{j % 10}",
                    linestyle=("-", "--", "-.", ":")[j % 4],
                    label=f"Batch size {B}, {m} microbatch" + ("es" if m != 1 else ""))
        _log2_axis(ax, np.unique(keys[:, 2]))
        _thousands(ax)
        ax.set_xlabel(PARTITION_LABELS[deg] + "; the other degrees 1)")
        ax.set_ylabel(c.label)
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
        ax.set_title(f"{title}: isolated {DEGREE_LABELS[deg].lower()}", fontsize=10)
        fig.tight_layout()
        written.append(_save(fig, out_dir, name + suffix))
    return written


PLACEMENT_TOP = 8  # plans drawn in the placement figure


def plan_stages(row: dict, layers: int) -> list[dict]:
    """A placement row's stages (result columns stage_*) as [{pool, pool2, dp, dp2, tp, layers}] (null stage_layers:
    uniform stages, layers / pp each)."""
    per = row.get("stage_layers") or [layers // row["pp"]] * row["pp"]
    return [{"pool": row["stage_pool"][j], "pool2": (row.get("stage_pool2") or [None] * row["pp"])[j],
             "dp": row["stage_dp"][j], "dp2": (row.get("stage_dp2") or [0] * row["pp"])[j],
             "tp": row["stage_tp"][j], "layers": per[j]} for j in range(row["pp"])]


def plot_placements(view: RunView, title: str, out_dir: str, suffix: str = "", top: int = PLACEMENT_TOP) -> str | None:
    """A mixed-cluster run's best plans, one bar each, best on top: its stages left to right as wide as their
    layers, coloured by the pool that holds them (a stage split over two pools: both colours, hatched), labelled
    dp x tp; the pools' legend outside the axes. None where the run has no placements or no feasible row."""
    if "stage_pool" not in view.columns:
        return None
    from sweep._runview import best_rows

    rows = best_rows(view, top).to_pylist()
    layers = int(view.model.get("layers") or 0)
    if not rows or not layers:
        return None
    pools = list(dict.fromkeys(p for r in rows for p in (*r["stage_pool"], *(r.get("stage_pool2") or [])) if p))
    color = {p: f"C{i % 10}" for i, p in enumerate(pools)}
    thr = view.throughput_column
    fig, ax = plt.subplots(figsize=(10, 1.0 + 0.55 * len(rows)))
    for i, row in enumerate(rows):
        y, x0 = len(rows) - 1 - i, 0
        for st in plan_stages(row, layers):
            split = bool(st["dp2"])
            ax.barh(y, st["layers"], left=x0, height=0.7, color=color[st["pool"]], edgecolor="white",
                    hatch="//" if split else None)
            if split:  # the second pool's replicas: the lower part of the bar, in its colour
                ax.barh(y - 0.175, st["layers"], left=x0, height=0.35, color=color[st["pool2"]], edgecolor="white",
                        hatch="//")
            text = f"{st['dp'] - st['dp2']}+{st['dp2']}x{st['tp']}" if split else f"{st['dp']}x{st['tp']}"
            ax.text(x0 + st["layers"] / 2, y, text, ha="center", va="center", fontsize=7, color="white")
            x0 += st["layers"]
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"#{len(rows) - k}: {rows[len(rows) - 1 - k][thr]:,.0f} "
                        f"{'samples/s' if thr == 'samples_per_s' else 'tokens/s'}" for k in range(len(rows))],
                       fontsize=8)
    ax.set_xlim(0, layers)
    ax.set_xlabel(f"layers held, stage by stage from the first (of the model's {layers} layers)")
    ax.set_ylabel("plan (rank: throughput)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=color[p]) for p in pools]
    ax.legend(handles, pools, title="pool (labels: dp x tp)", loc="upper left", bbox_to_anchor=(1.01, 1.0),
              fontsize=8, frameon=False)
    ax.set_title(f"{title}: which pool holds each pipeline stage, best {len(rows)} plans", fontsize=10)
    fig.tight_layout()
    return _save(fig, out_dir, "placement" + suffix)


def plot_run(view: RunView, out_dir: str, *, seed000: bool | None = None) -> tuple[list[str], list[str]]:
    """Draw the figures of every study of a run into out_dir; (files written, notes on figures
    not drawn). Seed 000's figures are drawn for MLP studies (or when ``seed000`` is True).
    A run of several (model, cluster) studies gets one set of files per study, named
    ``<figure>-<model>-<cluster>.png``."""
    os.makedirs(out_dir, exist_ok=True)
    studies = view.studies()
    written, notes = [], []
    for study in studies:
        suffix = "" if len(studies) == 1 else "-" + _slug(f"{study.model.get('name')}-{study.cluster.get('name')}")
        w, n = _plot_study(study, out_dir, suffix, seed000)
        written += w
        notes += [f"{study.name}: {x}" if suffix else x for x in n]
    return written, notes


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)


def _plot_study(view: RunView, out_dir: str, suffix: str, seed000: bool | None) -> tuple[list[str], list[str]]:
    c = load_columns(view)
    title = view.name
    written, notes = [], []
    if c.throughput.size == 0:
        return [], ["no feasible rows: nothing to plot"]
    p = plot_degrees(c, title, out_dir, suffix)
    (written.append(p) if p else notes.append("throughput_vs_degrees: no degree takes two values"))
    if c.widest:  # a mixed-cluster run: where its best plans put their stages
        p = plot_placements(view, title, out_dir, suffix)
        (written.append(p) if p else notes.append("placement: the run.json names no model layers"))
    if seed000 if seed000 is not None else view.is_mlp:
        p = plot_grid_search(c, title, out_dir, suffix)
        (written.append(p) if p else notes.append(f"grid_search: no feasible row uses all {c.num_gpus} GPUs"))
        iso = plot_isolated(c, title, out_dir, suffix)
        written += iso
        drawn = {os.path.basename(f).removesuffix(suffix + ".png") for f in iso}
        notes += [f"{n}: fewer than two {deg} degrees with the others at 1 among the feasible rows"
                  for deg, n in ISOLATED if n not in drawn]
    return written, notes
