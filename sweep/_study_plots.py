"""Figures of a study (sweep._problems' entries, one per problem): how the best plan scales with the GPUs, and what
each problem costs against how long it takes.

    scaling.png     best tokens/s (top) and MFU (bottom) against the cluster's GPUs on a log2 axis, a line per
                    model x GPU type x framework (x global batch x sequence length where the study varies them)
    cost_time.png   dollars against days to train, a point per problem with a feasible plan and a price, the
                    Pareto front (no other problem both faster and cheaper) joined and ringed
"""

from __future__ import annotations

import numpy as np

from sweep._plots import DPI, MARKERS, _log2_axis, _save, plt  # noqa: F401 (Agg backend set there)

LINE_KEYS = ("model", "gpu", "framework", "global_batch", "seq_len")


def pareto_front(days: np.ndarray, usd: np.ndarray) -> np.ndarray:
    """(F,) indices of the points no other point beats on both (fewer days and fewer dollars), fastest first."""
    order = np.lexsort((usd, days))  # by days, then dollars
    front, cheapest = [], np.inf
    for i in order:
        if usd[i] < cheapest:
            front.append(int(i))
            cheapest = usd[i]
    return np.asarray(front, dtype=np.int64)


def _lines(entries: list[dict]) -> dict[tuple, list[dict]]:
    """Entries with a feasible plan grouped per line (LINE_KEYS), each sorted by GPUs."""
    out: dict[tuple, list[dict]] = {}
    for e in entries:
        if e.get("tokens_per_s"):
            out.setdefault(tuple(e.get(k) for k in LINE_KEYS), []).append(e)
    return {k: sorted(v, key=lambda e: e["num_gpus"]) for k, v in out.items()}


def _label(key: tuple, varying: set[int]) -> str:
    model, gpu, fw, batch, seq = key
    words = [str(model), str(gpu).split("-")[0], str(fw)]
    if 3 in varying:
        words.append(f"batch {batch}")
    if 4 in varying:
        words.append(f"seq {seq}")
    return ", ".join(words)


def plot_scaling(entries: list[dict], title: str, out_dir: str, goodput: bool = False) -> str | None:
    lines = _lines(entries)
    if not lines:
        return None
    varying = {j for j in (3, 4) if len({k[j] for k in lines}) > 1}
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7.5), sharex=True)
    thr = "goodput_tokens_per_s" if goodput else "tokens_per_s"
    for j, (key, es) in enumerate(sorted(lines.items(), key=lambda kv: tuple(map(str, kv[0])))):
        x = [e["num_gpus"] for e in es]
        style = {"marker": MARKERS[j % len(MARKERS)], "label": _label(key, varying)}
        top.plot(x, [e[thr] / 1e6 for e in es], **style)
        bottom.plot(x, [100 * e["mfu"] for e in es], **style)
    ticks = sorted({e["num_gpus"] for es in lines.values() for e in es})
    _log2_axis(bottom, ticks)
    top.set_ylabel(("best goodput" if goodput else "best throughput") + " (million tokens/s)")
    bottom.set_ylabel("MFU of the best plan (%)")
    bottom.set_xlabel("cluster size (GPUs, log2 scale)")
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
    top.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, title="model, GPU, framework")
    top.set_title(f"{title}\nbest plan per problem")
    return _save(fig, out_dir, "scaling")


def plot_cost_time(entries: list[dict], title: str, out_dir: str) -> str | None:
    pts = [e for e in entries if e.get("usd") is not None and e.get("days_to_train") is not None]
    if not pts:
        return None
    days = np.array([e["days_to_train"] for e in pts])
    usd = np.array([e["usd"] for e in pts])
    groups = sorted({(e["model"], str(e["gpu"]).split("-")[0], e["framework"]) for e in pts})
    fig, ax = plt.subplots(figsize=(9, 6))
    for j, g in enumerate(groups):
        mine = [i for i, e in enumerate(pts) if (e["model"], str(e["gpu"]).split("-")[0], e["framework"]) == g]
        ax.scatter(days[mine], usd[mine] / 1e6, marker=MARKERS[j % len(MARKERS)], label=", ".join(g), zorder=3)
    # One front per model (a model's problems are the alternatives for training it: GPU type, size, framework).
    models = np.array([f"{e['model']}|{e['global_batch']}|{e['seq_len']}" for e in pts])
    for j, m in enumerate(dict.fromkeys(models)):
        mine = np.flatnonzero(models == m)
        front = mine[pareto_front(days[mine], usd[mine])]
        ax.plot(days[front], usd[front] / 1e6, "k--", lw=1, zorder=2,
                label="Pareto front per model (none both faster and cheaper)" if j == 0 else None)
        ax.scatter(days[front], usd[front] / 1e6, s=160, facecolors="none", edgecolors="k", zorder=4)
        for i in front:
            ax.annotate(f"{pts[i]['num_gpus']}", (days[i], usd[i] / 1e6), textcoords="offset points",
                        xytext=(6, 4), fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("time to train (days)")
    ax.set_ylabel("cost to train (million USD)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, title="model, GPU, framework")
    tokens = pts[0].get("train_tokens") or 0
    ax.set_title(f"{title}\ncost against time to train {tokens:.3g} tokens (fronts ringed, labelled with GPUs)")
    return _save(fig, out_dir, "cost_time")


def plot_study(entries: list[dict], title: str, out_dir: str) -> tuple[list[str], list[str]]:
    """scaling.png and cost_time.png of a study's problems; (written, notes on what was not drawn)."""
    import os

    os.makedirs(out_dir, exist_ok=True)
    goodput = any("goodput_tokens_per_s" in e for e in entries)
    written, notes = [], []
    for name, path in (("scaling", plot_scaling(entries, title, out_dir, goodput)),
                       ("cost_time", plot_cost_time(entries, title, out_dir))):
        if path:
            written.append(path)
        else:
            notes.append(f"{name} (no problem with a feasible plan" + (" and a price)" if name == "cost_time" else ")"))
    return written, notes
