"""``plansweep plot RUN_DIR``: PNG figures of a run (throughput against the degrees, and
seed 000's grid-search and isolated-scaling figures for MLP runs)."""

from __future__ import annotations

import argparse
import os

from cli import COMMAND_HELP
from costmodel import InputError

PLOTS_DIR = "plots"  # default output folder inside a local run directory


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plot", help=COMMAND_HELP["plot"],
                       description="Throughput against the data / tensor / pipeline degrees (best over "
                       "the other dimensions); for an MLP run also the grid-search figure: throughput against "
                       "the horizontal degree, a line per micro-batch count, a panel per data-parallel "
                       "degree, and the isolated data / horizontal / pipeline scaling figures. A run of several "
                       "problems (cluster sizes, GPU types, frameworks) also gets scaling.png (best tokens/s and MFU "
                       "against GPUs) and cost_time.png (dollars against days to train, the Pareto front marked).",
                       epilog="exit status: 0 figures written, 1 nothing to draw (no feasible row), 2 bad input")
    p.add_argument("run_dir", metavar="RUN_DIR", help="run directory (a path or a URI such as s3://bucket/run)")
    p.add_argument("--out", metavar="DIR", help=f"folder for the PNGs (default RUN_DIR/{PLOTS_DIR})")
    p.add_argument("--mlp-figures", dest="mlp_figures", choices=("auto", "yes", "no"), default="auto",
                   help="draw the grid-search and isolated-scaling figures: auto = for MLP runs (default)")
    # The flag's old name, still accepted, not shown.
    p.add_argument("--seed000", dest="mlp_figures", choices=("auto", "yes", "no"), help=argparse.SUPPRESS)
    from cli._costing import add_costing_args

    add_costing_args(p, override=True)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from cli._cmd_show import read_run
    from cli._costing import check_costing_args
    from sweep._rundir import check_outside_run

    check_costing_args(args)
    if args.out is not None and not args.out:
        raise InputError("--out", "a folder for the PNGs", args.out)
    check_outside_run(args.out, "--out", args.run_dir)  # (the default, RUN_DIR/plots, is outside them)
    return read_run(args.run_dir, "plot", lambda view: _plot(args, view))


def _is_study(view) -> bool:
    """A run of more than one problem (model, cluster, framework, batch, sequence length) on homogeneous clusters."""
    from sweep._problems import problem_keys

    studies = view.info.get("studies") if isinstance(view.info.get("studies"), list) else []
    if not studies or not all(isinstance(s.get(k), dict) for s in studies for k in ("model", "cluster", "space")):
        return False  # (a run.json another tool wrote: the per-run figures only)
    if any("pools" in s["cluster"] for s in studies):
        return False
    return len(problem_keys(view.info)) > 1


# Clusters a study title names one by one; more are named by GPU type and size range.
TITLE_CLUSTERS = 4


def study_title(entries: list[dict]) -> str:
    """The study in a few words: its models, its clusters (by name, or by GPU types and size range where there are
    more than TITLE_CLUSTERS), frameworks."""
    def join(key):
        return ", ".join(dict.fromkeys(str(e[key]).split("-")[0] if key == "gpu" else str(e[key]) for e in entries))

    sizes = sorted({e["num_gpus"] for e in entries})
    span = f"{sizes[0]}-{sizes[-1]} GPUs" if len(sizes) > 1 else f"{sizes[0]} GPUs"
    where = (join("cluster") if len({e["cluster"] for e in entries}) <= TITLE_CLUSTERS
             else f"{join('gpu')} clusters ({span})")
    return f"{join('model')} on {where}, {join('framework')}"


def _plot(args: argparse.Namespace, view) -> int:
    out = args.out
    if out is None:
        if "://" in args.run_dir:
            raise InputError("--out", "a local folder for the PNGs when RUN_DIR is a URI", None)
        out = os.path.join(args.run_dir, PLOTS_DIR)
    if os.path.exists(out) and not os.path.isdir(out):
        raise InputError("--out", "a folder", f"{out} (a file)")
    entries = None
    if _is_study(view):  # several problems: scaling.png and cost_time.png, priced (and checked) before any drawing
        from cli._cmd_show import study_problems

        entries, _ = study_problems(args, view)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as exc:
        raise InputError("--out", "a folder that can be made", f"{out} ({exc.strerror or exc})") from None
    from sweep._plots import plot_run  # matplotlib only when plotting

    written, notes = plot_run(view, out, seed000={"auto": None, "yes": True, "no": False}[args.mlp_figures])
    if entries is not None:
        from sweep._study_plots import plot_study

        w, n = plot_study(entries, study_title(entries), out)
        written, notes = written + w, notes + n
    for path in written:
        print(f"wrote {path}")
    for note in notes:
        print(f"not drawn: {note}")
    return 0 if written else 1
