"""``plansweep schedule-experiments --out DIR``: every experiment of seed 003 in one command.

Writes DIR/<experiment>.parquet (one row per simulated configuration) and
DIR/<experiment>.png (one figure per experiment: a subplot per panel value across and per row
value down, one line per schedule, labelled axes and legends).
"""

from __future__ import annotations

import argparse
import os
import time

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
    import matplotlib.pyplot as plt

    from cli._schedule_experiments import experiment_figure

    fig = experiment_figure(exp, columns)
    with replaced_atomically(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
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
