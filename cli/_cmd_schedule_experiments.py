"""``plansweep schedule-experiments --out DIR``: every experiment of seed 003 in one command.

Writes DIR/<experiment>.parquet (one row per simulated configuration) and
DIR/<experiment>.png (one figure per experiment: a subplot per panel value across and per row
value down, one line per schedule, labelled axes and legends).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from cli import COMMAND_HELP
from cli._schedule_experiments import EXPERIMENTS, Experiment
from costmodel import InputError
from costmodel._files import replaced_atomically


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("schedule-experiments", help=COMMAND_HELP["schedule-experiments"])
    p.add_argument("--out", required=True, help="folder for the Parquet files and figures")
    p.add_argument("--only", default=None, help=f"comma-separated subset of: {', '.join(EXPERIMENTS)}")
    p.set_defaults(func=run)


def _write_parquet(columns: dict[str, list], path: str) -> None:
    import pyarrow as pa  # only when writing
    import pyarrow.parquet as pq

    with replaced_atomically(path) as tmp:
        pq.write_table(pa.table(columns), tmp)


def _plot(exp: Experiment, columns: dict[str, list], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = {k: np.asarray(v) for k, v in columns.items()}
    panels = sorted(set(cols[exp.panel].tolist()))
    ys = (exp.y,) if isinstance(exp.y, str) else exp.y
    row_values = sorted(set(cols[exp.row].tolist())) if exp.row else [None]
    rows = [(r, y) for r in row_values for y in ys]
    lines = list(dict.fromkeys(cols[exp.line].tolist()))
    fig, axes = plt.subplots(len(rows), len(panels), figsize=(4.2 * len(panels), 3.4 * len(rows)), squeeze=False,
                             layout="constrained")
    for i, (row_value, y) in enumerate(rows):
        for j, panel_value in enumerate(panels):
            ax = axes[i][j]
            mask = cols[exp.panel] == panel_value
            if exp.row:
                mask &= cols[exp.row] == row_value
            for line in lines:
                sel = mask & (cols[exp.line] == line)
                if not sel.any():
                    continue
                order = np.argsort(cols[exp.x][sel], kind="stable")
                ax.plot(cols[exp.x][sel][order], cols[y][sel][order], marker="o", markersize=3,
                        label=f"{exp.line}={line}" if exp.line != "schedule" else str(line))
            title = f"{exp.panel}={panel_value:g}"
            if exp.row:
                title = f"{exp.row}={row_value:g}, {title}"
            ax.set_title(title, fontsize=9)
            ax.set(xlabel=exp.x, ylabel=y)
            if y == "total_time":
                ax.set_yscale("log")
            ax.legend(fontsize=7)
    fig.suptitle(exp.title)
    with replaced_atomically(path) as tmp:
        fig.savefig(tmp, dpi=80, format="png")
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    names = list(EXPERIMENTS)
    if args.only:
        names = [n.strip() for n in args.only.split(",")]
        unknown = [n for n in names if n not in EXPERIMENTS]
        if unknown:
            raise InputError("--only", f"names among {', '.join(EXPERIMENTS)}", unknown)
    os.makedirs(args.out, exist_ok=True)
    for name in names:
        t0 = time.perf_counter()
        exp = EXPERIMENTS[name]
        columns = exp.columns()
        _write_parquet(columns, os.path.join(args.out, f"{name}.parquet"))
        _plot(exp, columns, os.path.join(args.out, f"{name}.png"))
        print(f"{name}: {len(columns['schedule'])} rows in {time.perf_counter() - t0:.1f} s", flush=True)
    return 0
