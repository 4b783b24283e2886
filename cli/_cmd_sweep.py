"""``plansweep sweep`` (a grid sweep on Ray into a run directory) and ``plansweep resume``."""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
from typing import TYPE_CHECKING

from cli import COMMAND_HELP
from cli._cmd_evaluate import add_spec_args
from cli._cmd_show import format_framework_bests, format_rows, framework_bests, rows_as_dicts
from cli._costing import add_costing_args, costing_request
from cli._specs import load_cluster, load_model, number, options_from_args
from costmodel import InputError
from sweep._keep import Keep
from sweep._units import PART_ROWS_DEFAULT, UNIT_ROWS_DEFAULT

if TYPE_CHECKING:
    from sweep._rundir import RunDir

# sweep._grid, sweep._rundir and sweep._runview (pyarrow) are imported by the functions that
# run or read a sweep, not when the parser is built.
GRID = "grid"  # sweep._grid.SEARCHER

BEST_SHOWN = 10
CHECKPOINT_EVERY = 20  # MCMC steps per call to the chains (a checkpoint comes at the end of one)


def register(sub: argparse._SubParsersAction) -> None:
    from cli._space_args import add_space_args

    p = sub.add_parser(
        "sweep", help=COMMAND_HELP["sweep"], description="Evaluate every strategy of a space on an embedded local Ray "
        "(or the cluster at --address / $RAY_ADDRESS), writing Parquet parts under OUT/results. Run it again with the "
        "same arguments, or `plansweep resume OUT`, to continue after a stop.",
        epilog="--model, --seq-len, --cluster and --global-batch take comma-separated lists: one study per "
        "(model, sequence length, cluster, global batch), and with --framework's list one problem per study and "
        "framework. --cluster takes GPU-count ranges: h100x64..4096 (powers of two), h100x64..4096:x4, "
        "h100x64,128,512, h100x64..1024,b200x64..1024. `plansweep show RUN --by problem` gives each problem's best "
        "plan with its time and cost to train.")
    add_spec_args(p)
    add_space_args(p)
    p.add_argument("--out", required=True, metavar="RUN_DIR", help="run directory (new, empty, or this same run)")
    p.add_argument("--unit-rows", type=float, default=UNIT_ROWS_DEFAULT, metavar="N",
                   help=f"grid rows per unit of work, 1e4..1e6 (default {UNIT_ROWS_DEFAULT:.0e})")
    p.add_argument("--keep", default="feasible", metavar="POLICY",
                   help="rows written: all, feasible (default) or best:K (the K best of each problem in each unit: "
                   "a study's size no longer sets its results' size; every unit's row and infeasible-reason counts "
                   "are kept in its part)")
    add_costing_args(p)
    add_runtime_args(p)
    from cli._cmd_rank import add_objective_args

    add_objective_args(p)
    p.set_defaults(func=run_sweep)

    r = sub.add_parser("resume", help=COMMAND_HELP["resume"],
                       description="Continue the run in RUN_DIR from what is on disk (run.json, results, state).")
    r.add_argument("run_dir", metavar="RUN_DIR")
    add_runtime_args(r)
    r.set_defaults(func=run_resume)


def add_runtime_args(p: argparse.ArgumentParser, *, top: bool = True) -> None:
    """How to run (not what): never part of a run's identity, free to change on resume."""
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="CPUs of the embedded local Ray (default: the machine's cores)")
    p.add_argument("--address", default=None, metavar="ADDR",
                   help="join the Ray cluster at ADDR (default $RAY_ADDRESS; none: embedded local Ray)")
    p.add_argument("--max-in-flight", type=int, default=None, metavar="K",
                   help="units submitted at once (default 2 per cluster CPU)")
    p.add_argument("--in-process", action="store_true",
                   help="no Ray: evaluate the same units one after another in this process")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    if top:
        p.add_argument("--top", type=int, default=BEST_SHOWN, metavar="K", help="best strategies printed at the end")


def _words(text: str, flag: str) -> list[str]:
    words = [w.strip() for w in str(text).split(",") if w.strip()]
    if not words:
        raise InputError(flag, "one or more comma-separated names", text)
    return words


def build_studies(args: argparse.Namespace, *, search: bool = False) -> list[dict]:
    """One study per (model, sequence length, cluster, global batch) of the comma-separated --model, --seq-len,
    --cluster (ranges expanded: cli._specs.cluster_words) and --global-batch; with the space's framework dimension
    (--framework's list) each (study, framework) is one problem. Where --seq-len lists several lengths each model's
    name carries its length (llama3-70b-s8192), so that the results name the study they belong to.

    A heterogeneous cluster (preset or file with pools) gets the placement space
    (search.HeteroSpace) with the defaults of a search, or of a sweep (SWEEP_HETERO_DEFAULTS: a
    grid multiplies every stage's choices). One run holds homogeneous or heterogeneous clusters,
    not both (their results have different columns)."""
    from cli._cmd_search_hetero import HETERO_DEFAULTS, SWEEP_HETERO_DEFAULTS, hetero_space_from_args
    from cli._space_args import space_from_args
    from cli._specs import cluster_words, int_list
    from costmodel import HeteroCluster
    from sweep._grid import check_grid_size
    from sweep._rundir import study_request

    words = cluster_words(args.cluster)
    seq_text = getattr(args, "seq_len", None)
    seqs = [None] if seq_text is None else int_list(seq_text, "--seq-len")
    batch_text = getattr(args, "global_batch", None)
    batches = [batch_text] if batch_text is None else int_list(batch_text, "--global-batch")
    clusters = {c: load_cluster(c, getattr(args, "hardware", None)) for c in words}
    kinds = {isinstance(c, HeteroCluster) for c in clusters.values()}
    if len(kinds) > 1:
        raise InputError("--cluster", "all homogeneous or all heterogeneous clusters in one run", ",".join(words))
    studies = []
    for m in dict.fromkeys(_words(args.model, "--model")):
        for seq in seqs:
            model = load_model(m, seq)
            if len(seqs) > 1:
                model = dataclasses.replace(model, name=f"{model.name}-s{seq}")
            for c, cluster in clusters.items():
                hetero = isinstance(cluster, HeteroCluster)
                if not hetero and getattr(args, "dp2", None) is not None:
                    raise InputError("--dp2", "heterogeneous clusters only (a preset such as a100x64+h100x64 or a "
                                     "file with pools)", c)
                for batch in batches:
                    one = argparse.Namespace(**{**vars(args), "global_batch": batch})
                    space = (hetero_space_from_args(one, model, cluster,
                                                    HETERO_DEFAULTS if search else SWEEP_HETERO_DEFAULTS)
                             if hetero else space_from_args(one, model, cluster))
                    if not search:  # a grid too large to sweep is refused before its run directory is made
                        check_grid_size(space, f"{model.name} on {cluster.name}")
                    studies.append(study_request(model, cluster, space))
    return studies


def add_search_run_args(p: argparse.ArgumentParser) -> None:
    """For `plansweep search mcmc|tpe|gradient`: --out RUN_DIR runs the search through the sweep machinery
    (Ray, Parquet parts, checkpoints, resume), plus how to run it."""
    p.add_argument("--out", default=None, metavar="RUN_DIR",
                   help="run on Ray into this run directory (results, checkpoints; `plansweep resume` continues)")
    p.add_argument("--checkpoint-every", type=int, default=CHECKPOINT_EVERY, metavar="STEPS",
                   help=f"MCMC steps per call to the chains with --out; a checkpoint is taken at the end of one "
                   f"(default {CHECKPOINT_EVERY})")
    p.add_argument("--part-rows", default=str(PART_ROWS_DEFAULT), metavar="N",
                   help="with --out, rows per Parquet part: the search's state is checkpointed with each part, a "
                   "kill loses only the rows since (resume evaluates them again, the same), and a part is written "
                   f"at least every five minutes (default {PART_ROWS_DEFAULT:,})")
    add_runtime_args(p, top=False)


def run_search_in_dir(args: argparse.Namespace, kind: str) -> int:
    """`plansweep search mcmc|tpe|gradient ... --out RUN_DIR`: the search as a resumable run."""
    from sweep._rundir import RunDir

    check_runtime(args)
    rd, resumed = RunDir.create_or_resume(args.out, search_request(args, kind))
    with rd:
        return execute(rd, args, resumed=resumed)


def search_request(args: argparse.Namespace, kind: str) -> dict:
    """What a `plansweep search mcmc|tpe|gradient --out` asks: the identity of its run (run.json), with the
    searcher's options (search._options) recorded whole beside the run's budget."""
    from search._base import MAX_BUDGET

    options: dict[str, object] = {"budget": number(args.budget, "--budget", int, 1, MAX_BUDGET),
                                  **run_dir_options(args, kind)}
    batch = number(args.batch, "--batch", int, 1)  # checked for every searcher, recorded where it is used
    if kind != "mcmc":
        if getattr(args, "storage", None):
            raise InputError("--storage", "no --storage with --out (the journal lives in RUN_DIR/state)", args.storage)
        options["batch"] = batch
    options.update(options_from_args(args.options, args).to_json())
    studies = build_studies(args, search=True)
    options.update(objective_options(args))
    return {"command": f"search {kind}", "searcher": kind, "seed": number(args.seed, "--seed", int, low=0),
            "argv": sys.argv[1:], "options": options, "studies": studies}


def run_dir_options(args: argparse.Namespace, kind: str) -> dict:
    """The flags of a run into a directory, checked with or without --out: --part-rows and, for MCMC,
    --checkpoint-every (run.json's options of that name)."""
    options: dict[str, object] = {"part_rows": number(args.part_rows, "--part-rows", int, 1)}
    if kind == "mcmc":
        options["checkpoint_every"] = number(args.checkpoint_every, "--checkpoint-every", int, 1)
    return options


def objective_options(args: argparse.Namespace) -> dict:
    """run.json's objective and failure model for a run by goodput; nothing for one by raw throughput
    (so such runs keep the run.json they always had). The failure flags are checked either way, as
    rank and a search without --out check them."""
    from cli._cmd_evaluate import failure_from_args

    failure = failure_from_args(args)
    if args.objective == "tokens_per_s":
        return {}
    import dataclasses

    from cli._cmd_rank import check_objective
    from cli._specs import cluster_words

    for c in cluster_words(args.cluster):
        check_objective(args.objective, load_cluster(c, getattr(args, "hardware", None)))
    return {"objective": args.objective, "failure": dataclasses.asdict(failure)}


def check_runtime(args: argparse.Namespace) -> None:
    for name, flag in (("workers", "--workers"), ("max_in_flight", "--max-in-flight")):
        if getattr(args, name) is not None:
            number(getattr(args, name), flag, int, 1)
    args.top = number(getattr(args, "top", BEST_SHOWN), "--top", int, 0)
    if not getattr(args, "in_process", True):
        from sweep._ray import cluster_address, probe_address

        flag, address = cluster_address(args.address)
        if address:  # an address that does not answer is told before a run directory is made
            probe_address(address, flag)


def grid_request(args: argparse.Namespace) -> dict:
    """What a `plansweep sweep` asks: the identity of its run (run.json)."""
    from sweep._grid import check_unit_rows

    if not math.isfinite(args.unit_rows) or args.unit_rows != int(args.unit_rows):
        raise InputError("--unit-rows", "an integer", args.unit_rows)
    unit_rows = check_unit_rows(int(args.unit_rows))
    keep = Keep.parse(args.keep)
    options: dict[str, object] = {"unit_rows": unit_rows, "keep": str(keep)}
    studies = build_studies(args)
    if args.objective != "tokens_per_s" and str(keep) not in ("feasible", "all"):
        raise InputError("--keep", "feasible or all with --objective goodput (best:K keeps rows by raw "
                         "throughput)", args.keep)
    options.update(objective_options(args))
    return {"command": "sweep", "searcher": GRID, "seed": None, "argv": sys.argv[1:], "options": options,
            "studies": studies, "costing": costing_request(args)}


def run_sweep(args: argparse.Namespace) -> int:
    from sweep._rundir import RunDir

    check_runtime(args)
    request = grid_request(args)
    rd, resumed = RunDir.create_or_resume(args.out, request)
    with rd:
        if resumed and rd.info.get("costing") != request["costing"]:  # the prices given last are the run's
            rd.set_costing(request["costing"])
        return execute(rd, args, resumed=resumed)


def run_resume(args: argparse.Namespace) -> int:
    from sweep._rundir import RunDir

    check_runtime(args)
    with RunDir.open(args.run_dir) as rd:
        return execute(rd, args, resumed=True)


def execute(rd: RunDir, args: argparse.Namespace, *, resumed: bool) -> int:
    """Run (or continue) whatever rd's run.json asks, then print where results are and the best.
    Parts whose footer reads but whose pages do not are found when the summary reads them: they
    are moved to quarantine/ and the run goes on once more to recompute them."""
    from sweep._ray import init_ray, shutdown_ray

    searcher = rd.info["searcher"]
    how = "in this process (no Ray)"
    started = interrupted = False
    try:
        if not args.in_process:
            how = init_ray(workers=args.workers, address=args.address)
            started = True
        verb = "resuming" if resumed else "starting"
        labels = "; ".join(s.label for s in rd.studies())
        told: list[str] = []  # the start line, then each part moved aside, once

        def announce() -> None:  # once the run's files are checked (a refusal is then its one line)
            if not told:
                told.append("start")
                print(f"{verb} {rd.info['command']} ({searcher}) of {labels} in {rd.path} on {how}", file=sys.stderr)
            for part, (dest, why) in rd.quarantined.items():
                if part not in told:
                    told.append(part)
                    print(f"moved damaged part {os.path.relpath(part, rd.path)} ({why}) to "
                          f"{os.path.relpath(dest, rd.path)}; recomputing its rows", file=sys.stderr)

        for again in (False, True):
            rd.on_ready = announce
            try:
                _run_engine(rd, args)
            except KeyboardInterrupt:
                interrupted = True  # its line comes last, once Ray has stopped (see finally)
                return 130
            bad = _summary_or_unreadable(rd, args.top, last=again)
            if not bad:
                return 0
            rd.damaged = bad  # moved aside by the engine's next pass, which recomputes them
    finally:
        if started:
            shutdown_ray(quiet=interrupted)
        if interrupted:  # a worker stopped mid-write leaves its hidden temporary: its writer is gone now
            rd.remove_temporaries()
            print(f"\ninterrupted: what is written stays; continue with `plansweep resume {rd.path}`",
                  file=sys.stderr)
    return 0


def _run_engine(rd: RunDir, args: argparse.Namespace) -> None:
    if rd.info["searcher"] == GRID:
        from sweep._grid import run_grid

        run_grid(rd, in_process=args.in_process, max_in_flight=args.max_in_flight, progress=not args.no_progress)
    else:
        from sweep._search_engine import run_search

        run_search(rd, in_process=args.in_process, progress=not args.no_progress)


def _summary_or_unreadable(rd: RunDir, top: int, *, last: bool) -> dict[str, str]:
    """print_summary, its output held until it succeeds; {} then. Where a part's pages fail to
    read: the parts at fault ({path: why}), or with ``last`` InputError in one line."""
    import contextlib
    import io

    import pyarrow as pa
    import pyarrow.fs as pafs

    from sweep._checks import list_parts, said, unreadable_parts

    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            print_summary(rd, top)
    except (pa.ArrowException, OSError) as exc:
        bad = {} if last else unreadable_parts(pafs.LocalFileSystem(), list_parts(pafs.LocalFileSystem(), rd.results))
        if not bad:
            raise InputError("RUN_DIR", "Parquet parts whose pages read", said(exc)) from None
        return bad
    print(buf.getvalue(), end="")
    return {}


def _goodput_summary(view, top: int, failure) -> None:
    """print_summary's best strategies by goodput (run.json's objective and failure model), per study:
    costmodel.plan_goodput over the study's feasible rows as written."""
    from cli._cmd_rank import goodput_lines
    from sweep._runview import best_rows_by_goodput

    for study in view.studies():
        rows, g = best_rows_by_goodput(study, top, failure)
        print(f"\nbest strategies for {study.name} by goodput (closed-form pipeline prices):")
        if not rows.num_rows:
            print("no feasible strategy found")
            continue
        print(format_rows(study.columns, study.throughput_column, rows_as_dicts(rows),
                          with_framework=len(study.frameworks()) > 1))
        print(goodput_lines(g))


def print_summary(rd: RunDir, top: int) -> None:
    """Where the results are, and the best ``top`` strategies of each study (show's table)."""
    from sweep._runview import best_rows, open_run, run_failure_model

    if not any(files for _, _, files in os.walk(rd.results)):
        print(f"results: {rd.results} (no rows)")
        return
    view = open_run(rd.path)
    if view.skipped:
        print(f"plansweep: {view.skipped_line()}", file=sys.stderr)
    print(f"results: {rd.results} ({view.dataset.count_rows():,} rows in {len(view.dataset.files)} Parquet parts; "
          f"open with pandas.read_parquet({rd.results!r}))")
    failure = run_failure_model(view)
    if top and failure is not None:
        _goodput_summary(view, top, failure)
        return
    for study in view.studies() if top else []:
        rows = rows_as_dicts(best_rows(study, top))
        unit = study.throughput_column.replace("_per_s", "/s")  # samples/s for an MLP
        print(f"\nbest strategies for {study.name} ({unit}, closed-form pipeline prices):")
        print(format_rows(study.columns, study.throughput_column, rows, with_framework=len(study.frameworks()) > 1)
              if rows else "no feasible strategy found")
        found = framework_bests(study)
        if found:
            print(format_framework_bests(study, found))
