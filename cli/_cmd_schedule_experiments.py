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
from costmodel._files import replaced_together


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("schedule-experiments", help=COMMAND_HELP["schedule-experiments"])
    p.add_argument("--out", required=True, help="folder for the Parquet files and figures")
    p.add_argument("--only", default=None, help=f"comma-separated subset of: {', '.join(EXPERIMENTS)}")
    p.set_defaults(func=run)


def _write(exp: Experiment, columns: dict[str, list], out: str, name: str) -> None:
    """out/<name>.parquet and out/<name>.png (experiment_figure), both or neither; InputError naming --out where
    they cannot be written."""
    import matplotlib.pyplot as plt
    import pyarrow as pa  # only when writing
    import pyarrow.parquet as pq

    from cli._schedule_experiments import experiment_figure

    fig = experiment_figure(exp, columns)
    try:
        paths = [os.path.join(out, f"{name}.parquet"), os.path.join(out, f"{name}.png")]
        with replaced_together("--out", paths) as (parquet, png):
            pq.write_table(pa.table(columns), parquet)
            fig.savefig(png, dpi=100, format="png")
    finally:
        plt.close(fig)


def _names(only: str | None) -> list[str]:
    """The experiments --only names (all without it); InputError for an empty list or an unknown name."""
    if only is None:
        return list(EXPERIMENTS)
    names = [n.strip() for n in only.split(",")]
    unknown = [n for n in names if n not in EXPERIMENTS]
    if unknown:
        raise InputError("--only", f"names among {', '.join(EXPERIMENTS)}", unknown)
    return names


def _out_dir(out: str) -> None:
    """--out as an existing or new folder; InputError naming it where it is a file or cannot be made."""
    if not out or (os.path.exists(out) and not os.path.isdir(out)):
        raise InputError("--out", "a folder", f"{out} (a file)" if out else out)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as exc:
        raise InputError("--out", "a folder that can be made", f"{out} ({exc.strerror or exc})") from None


def run(args: argparse.Namespace) -> int:
    names = _names(args.only)
    _out_dir(args.out)
    for name in names:
        t0 = time.perf_counter()
        exp = EXPERIMENTS[name]
        columns = exp.columns()
        _write(exp, columns, args.out, name)
        print(f"{name}: {len(columns['schedule'])} rows in {time.perf_counter() - t0:.1f} s", flush=True)
    return 0
