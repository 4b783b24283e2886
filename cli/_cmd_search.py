"""``plansweep search``: searchers as sub-subcommands (grid, random, piper; mcmc, tpe, gradient).

Each searcher has its own registrar in SEARCHERS: a function that adds its parser to the
``search`` sub-subparsers and sets ``func`` (_space_searcher builds those of the searchers over
a strategy space). Adding one is one entry.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np

from cli import COMMAND_HELP, print_json
from cli._cmd_evaluate import add_spec_args, failure_from_args
from cli._cmd_rank import add_objective_args, check_objective, goodput_lines
from cli._cmd_show import format_priced
from cli._cmd_sweep import add_search_run_args, run_dir_options, run_search_in_dir
from cli._space_args import add_space_args, space_from_args
from cli._specs import add_options, load_cluster, load_model, number, options_from_args
from costmodel import (
    REASONS,
    HeteroCluster,
    InputError,
    Metrics,
    StrategyTable,
    evaluate,
    format_stage_rows,
    plan_goodput,
    stage_rows,
)
from search import PiperPlan, RandomSearcher, Searcher, load_piper_graph, objective, solve_piper
from search._base import MAX_BUDGET, OBJECTIVE_COLUMN
from search._options import GradientOptions, GridOptions, MCMCOptions, PiperOptions, TPEOptions
from search._refine import objective_score

EXIT_NO_PLAN = 1  # the input is fine but no plan fits the devices and memory


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("search", help=COMMAND_HELP["search"])
    searchers = parser.add_subparsers(dest="searcher", metavar="SEARCHER")
    searchers.required = True
    for add in SEARCHERS.values():
        add(searchers)


def _register_piper(searchers: argparse._SubParsersAction) -> None:
    p = searchers.add_parser(
        "piper", help="Piper's dynamic-programming planner over a layer graph in Piper's JSON format",
        description="Lowest time per sample over stage splits, tensor/data degrees and activation recomputation "
        "(Tarnawski et al., NeurIPS 2021). Flags override the file's values.",
        epilog="exit status: 0 a plan was found, 1 no plan fits the devices and memory, 2 bad input")
    p.add_argument("file", metavar="FILE.json", help="layer graph in Piper's JSON format")
    add_options(p, PiperOptions)
    p.add_argument("--json", action="store_true",
                   help='print {"time_per_sample", "stages": [{"nodes", "t", "d", "recompute"}]}')
    p.set_defaults(func=_run_piper)


def _run_piper(args: argparse.Namespace) -> int:
    plan = solve_piper(options_from_args(PiperOptions, args).apply(load_piper_graph(args.file)))
    if args.json:
        print_json((plan.to_json()))
    else:
        print(_format_plan(plan))
    return 0 if plan.feasible else EXIT_NO_PLAN


def _format_plan(plan: PiperPlan) -> str:
    if not plan.feasible:
        return "no plan fits the devices and memory"
    lines = [f"time per sample: {plan.time_per_sample_s:.6g} s, {len(plan.stages)} stages, "
             f"{sum(s.t * s.d for s in plan.stages)} devices"]
    lines.append(f"{'stage':>5} {'t':>3} {'d':>5} {'time/sample s':>14} {'mem GiB':>8} {'recomp':>6}  nodes")
    for i, s in enumerate(plan.stages):
        lines.append(f"{i:>5} {s.t:>3} {s.d:>5} {s.time_per_sample_s:>14.6g} {s.memory_bytes / 2**30:>8.2f} "
                     f"{sum(s.recompute):>6}  {' '.join(map(str, s.nodes))}")
    return "\n".join(lines)


# ---- searchers over a strategy Space (grid, random; mcmc and tpe reuse these helpers) --------
DEFAULT_BUDGET = 10_000  # evaluations
ASK_BATCH = 4096  # rows per ask: large enough for the vectorised core, small enough to stop on budget


def add_search_args(p: argparse.ArgumentParser, *, batch: int = ASK_BATCH) -> None:
    """--model/--cluster/--hardware, the space options, --budget, --seed, --batch, --top, --json."""
    add_spec_args(p)
    p.add_argument("--budget", metavar="N", default=str(DEFAULT_BUDGET),
                   help=f"evaluations at most (default {DEFAULT_BUDGET:,}; up to {MAX_BUDGET:,})")
    p.add_argument("--seed", metavar="S", default="0", help="random seed (default 0)")
    p.add_argument("--batch", metavar="N", default=str(batch), help=f"rows per ask (default {batch})")
    p.add_argument("--top", metavar="K", default="10", help="best strategies to print (default 10)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--dp2", metavar="V,..", default=None, help="heterogeneous clusters: replicas a stage may put on a "
                   "second pool, e.g. 0,1,2,4 (default 0: every stage in one pool)")
    add_space_args(p)
    add_objective_args(p)


def run_searcher(searcher: Searcher, model, cluster, *, budget: int, batch: int, top: int, framework=None,
                 objective_name: str = "tokens_per_s", failure=None):
    """The driver loop: ask, evaluate, tell until ``budget`` evaluations or the searcher is done.
    With ``objective_name`` "goodput" the driver adds the goodput column (costmodel.plan_goodput under
    ``failure``) as the metrics' objective column, which every searcher maximises.

    Returns (evaluations, feasible rows, best table, its metrics), best first (at most ``top``
    feasible rows by the objective; repeated strategies counted once among the best)."""
    evaluations = feasible = 0
    best_t: StrategyTable | None = None
    best_m: Metrics | None = None
    while evaluations < budget:
        t = searcher.ask(min(batch, budget - evaluations))
        if len(t) == 0:
            break
        m = evaluate(model, cluster, t, framework=framework)
        if objective_name != "tokens_per_s":
            m[OBJECTIVE_COLUMN] = objective_score(m, t, cluster, objective_name, failure, model)
        searcher.tell(t, m)
        evaluations += len(t)
        feasible += int(np.sum(m["feasible"]))
        keep = np.flatnonzero(m["feasible"])
        if keep.size:
            t, m = t.take(keep), m.take(keep)
            if best_t is not None:
                t = type(t).concat([best_t, t])
                m = Metrics({k: np.concatenate([best_m[k], m[k]]) for k in best_m})
            order = _distinct_best(t, objective(m), top)
            best_t, best_m = t.take(order), m.take(order)
    return evaluations, feasible, best_t, best_m


def _distinct_best(t: StrategyTable, score: np.ndarray, top: int) -> np.ndarray:
    """Indices of the ``top`` best rows, best first, each strategy once."""
    order = np.argsort(-score, kind="stable")
    seen, out = set(), []
    for i in order:  # over at most top + batch candidates, once per batch
        key = repr(t.row(int(i)))
        if key not in seen:
            seen.add(key)
            out.append(int(i))
            if len(out) == top:
                break
    return np.asarray(out, dtype=np.int64)


def report(args: argparse.Namespace, name: str, space, evaluations: int, feasible: int, best_t, best_m,
           failure=None) -> None:
    """Print the best strategies found and the evaluations used (text or --json); a placement's
    stages per row, and the first one's per-stage breakdown."""
    from sweep._results import pool_names  # pyarrow only when reporting

    n_best = 0 if best_t is None else len(best_t)
    pools = pool_names(space)
    if args.json:
        rows = []
        for i in range(n_best):
            r = best_t.row(i, pools) if pools else best_t.row(i)
            r.update({k: (v[i].item() if hasattr(v[i], "item") else v[i]) for k, v in best_m.items()})
            r["reason"] = REASONS[int(r["reason"])]  # the Parquet rows' vocabulary ("ok", ...)
            if OBJECTIVE_COLUMN in r:
                r["goodput_tokens_per_s"] = r.pop(OBJECTIVE_COLUMN)
            rows.append(r)
        print_json(({"searcher": name, "space_size": int(space.size), "evaluations": evaluations,
                          "feasible": feasible, "best": rows}))
        return
    size = f"{space.size:,}" if space.size < 10**12 else f"{space.size:.3e}"
    print(f"{name} search on {space.model.name} / {space.cluster.name}: space of {size} points, "
          f"{evaluations:,} evaluations, {feasible:,} feasible")
    if not n_best:
        print("no feasible strategy found")
        return
    print(format_priced(space, best_t, best_m))
    if getattr(args, "objective", "tokens_per_s") != "tokens_per_s":
        print(goodput_lines(plan_goodput(best_m, best_t, space.cluster, failure, model=space.model)))
        print(f"(ranked by {args.objective})")
    if pools:
        print("best, per stage (exact pipeline):")
        print(format_stage_rows(stage_rows(space.model, space.cluster, best_t, 0, framework=space.framework)))


def _make(args, options, space, seed: int, budget: int | None = None):
    """The searcher of a run without --out (``budget``: the run's evaluations)."""
    from sweep._search_engine import make_searcher

    if options is None:
        return RandomSearcher(space, seed)
    if isinstance(options, GridOptions):
        if int(space.size) >= 2**63:
            raise InputError("--space", "a space of fewer than 2**63 points for grid search", f"{space.size:.3e}")
        return options.searcher(space)
    return make_searcher(space, options, seed=seed, storage=args.storage if args.searcher == "tpe" else None,
                         budget=budget)


def _run_space_searcher(args: argparse.Namespace) -> int:
    if getattr(args, "out", None) is not None:  # a resumable run on Ray (cli/_cmd_sweep.py)
        return run_search_in_dir(args, args.searcher)
    if hasattr(args, "part_rows"):  # the flags of a run into a directory: checked without one too
        run_dir_options(args, args.searcher)
    options = None if args.options is None else options_from_args(args.options, args)
    model = load_model(args.model, args.seq_len)
    cluster = load_cluster(args.cluster, args.hardware)
    budget = number(args.budget, "--budget", int, 1, MAX_BUDGET)
    batch = number(args.batch, "--batch", int, 1)
    top = number(args.top, "--top", int, 1)
    seed = number(args.seed, "--seed", int, low=0)
    if isinstance(cluster, HeteroCluster):  # placement search: search.HeteroSpace
        from cli._cmd_search_hetero import HETERO_DEFAULTS, SWEEP_HETERO_DEFAULTS, hetero_space_from_args

        space = hetero_space_from_args(args, model, cluster,
                                       SWEEP_HETERO_DEFAULTS if args.searcher == "grid" else HETERO_DEFAULTS)
    elif getattr(args, "dp2", None) is not None:
        raise InputError("--dp2", "a heterogeneous cluster (a preset such as a100x64+h100x64 or a file with pools)",
                         args.cluster)
    else:
        space = space_from_args(args, model, cluster)  # refuses a space with no valid strategy
    check_objective(args.objective, cluster)
    failure = failure_from_args(args)
    found = run_searcher(_make(args, options, space, seed, budget), model, cluster, budget=budget, batch=batch, top=top,
                         framework=space.framework, objective_name=args.objective, failure=failure)
    report(args, args.searcher, space, *found, failure=failure)
    return 0


def _space_searcher(name: str, options, *, run_dir: bool = True, batch: int = ASK_BATCH, storage: bool = False,
                    **parser_kw) -> Callable[[argparse._SubParsersAction], None]:
    """The registrar of a searcher over a strategy space: the search arguments (add_search_args),
    TPE's --storage, the flags of its options dataclass (search._options; None: no options) and,
    with ``run_dir``, --out RUN_DIR and how to run it (add_search_run_args)."""

    def register(searchers: argparse._SubParsersAction) -> None:
        p = searchers.add_parser(name, **parser_kw)
        add_search_args(p, batch=batch)
        if storage:
            p.add_argument("--storage", metavar="FILE", default=None, help="Optuna journal file (default: in memory)")
        if options is not None:
            add_options(p, options)
        if run_dir:
            add_search_run_args(p)
        p.set_defaults(func=_run_space_searcher, options=options)

    return register


TPE_ASK_BATCH = 16  # Optuna asks one trial at a time; small batches keep TPE's model fresh

# Searcher name -> registrar.
SEARCHERS: dict[str, Callable[[argparse._SubParsersAction], None]] = {
    "grid": _space_searcher(
        "grid", GridOptions, run_dir=False, help="exhaustive search over a strategy space (or a range of its grid)",
        description="Every valid strategy of the space in grid order, evaluated in batches, until --budget "
        "evaluations."),
    "random": _space_searcher("random", None, run_dir=False,
                              help="uniform random search over the valid strategies of a space"),
    "mcmc": _space_searcher(
        "mcmc", MCMCOptions, help="FlexFlow-style Metropolis-Hastings over a strategy space (an ensemble of chains)",
        description="Chains start from data parallelism, Megatron-LM's recipe and random strategies, propose "
        "one change at a time and accept a worse strategy with probability exp(-beta * relative slow-down) "
        "(Jia et al., SysML 2019). An out-of-memory point costs its time x (1 + --memory-penalty x the HBM "
        "it lacks) so chains can cross memory walls; a chain on the same point as another restarts at a "
        "rarely visited one; --reset-every K > 0 jumps every chain to the best every K steps instead."),
    "tpe": _space_searcher(
        "tpe", TPEOptions, batch=TPE_ASK_BATCH, storage=True,
        help="Optuna's TPE sampler over a strategy space (ask/tell in batches)",
        description="Tree-structured Parzen estimator (Optuna TPESampler, multivariate, constant liar): two "
        "studies with different orders of the space's dimensions take turns; out-of-memory strategies "
        "are told behind soft memory walls (--memory-penalty). With --storage the studies live in an "
        "Optuna journal file and a later run on the same file continues them."),
    "gradient": _space_searcher(
        "gradient", GradientOptions,
        help="differentiable search: a softmax per dimension, trained by score-function gradients",
        description="One softmax distribution per dimension of the space (per stage for boundary shifts and "
        "per-stage recompute), drawn dimension by dimension among the choices some valid strategy allows. "
        "Each step draws --samples strategies, evaluates the new ones in one batch, and moves the logits "
        "along the REINFORCE estimate of the gradient of a rank-shaped utility (the best draws up, the "
        "worst down); out-of-memory strategies cost their time x (1 + --memory-penalty x the HBM they "
        "lack). --cooling < 1 anneals the temperature, --entropy > 0 keeps the distributions wide; a "
        "distribution that has collapsed on evaluated strategies starts again from uniform (--restart 1). "
        "A placement space (heterogeneous cluster) is searched too, but most of its draws fall outside the "
        "space and are filled with random placements."),
    "piper": _register_piper,
}
