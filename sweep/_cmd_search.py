"""``plansweep search``: searchers as sub-subcommands (``piper`` now; grid, mcmc, tpe later).

Each searcher has its own registrar in SEARCHERS: a function that adds its parser to the
``search`` sub-subparsers and sets ``func``. Adding one is a new function and one entry.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TypeVar

from costmodel import InputError
from search import PiperPlan, load_piper_graph, solve_piper, with_overrides

_Number = TypeVar("_Number", int, float)

EXIT_NO_PLAN = 1  # the input is fine but no plan fits the devices and memory


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("search", help="search for the best plan with one searcher")
    searchers = parser.add_subparsers(dest="searcher", metavar="SEARCHER")
    searchers.required = True
    for add in SEARCHERS.values():
        add(searchers)


def _register_piper(searchers: argparse._SubParsersAction) -> None:
    p = searchers.add_parser(
        "piper",
        help="Piper's dynamic-programming planner over a layer graph in Piper's JSON format",
        description="Lowest time per sample over stage splits, tensor/data degrees and "
        "activation recomputation (Tarnawski et al., NeurIPS 2021). Flags override the "
        "file's values.",
        epilog="exit status: 0 a plan was found, 1 no plan fits the devices and memory, "
        "2 bad input",
    )
    p.add_argument("file", metavar="FILE.json", help="layer graph in Piper's JSON format")
    # Values are parsed in _run_piper so that bad ones raise InputError (exit 2, one line).
    p.add_argument("--devices", metavar="K", help="number of devices, overrides maxDevices")
    p.add_argument("--memory", metavar="BYTES",
                   help="memory per device, overrides maxMemoryPerDevice")
    p.add_argument("--microbatches", metavar="N",
                   help="micro-batches per batch, overrides mbsInBatch")
    p.add_argument("--bandwidth", metavar="BYTES_PER_S",
                   help="bandwidth per device, overrides bandwidth")
    p.add_argument("--json", action="store_true",
                   help='print {"time_per_sample", "stages": [{"nodes", "t", "d", "recompute"}]}')
    p.set_defaults(func=_run_piper)


def _run_piper(args: argparse.Namespace) -> int:
    graph = with_overrides(
        load_piper_graph(args.file),
        devices=_parse(args.devices, "--devices", int),
        memory_bytes=_parse(args.memory, "--memory", float),
        microbatches=_parse(args.microbatches, "--microbatches", int),
        bandwidth_Bps=_parse(args.bandwidth, "--bandwidth", float),
    )
    plan = solve_piper(graph)
    if args.json:
        print(json.dumps(plan.to_json()))
    else:
        print(_format_plan(plan))
    return 0 if plan.feasible else EXIT_NO_PLAN


def _format_plan(plan: PiperPlan) -> str:
    if not plan.feasible:
        return "no plan fits the devices and memory"
    lines = [f"time per sample: {plan.time_per_sample_s:.6g} s, {len(plan.stages)} stages, "
             f"{sum(s.t * s.d for s in plan.stages)} devices"]
    lines.append(f"{'stage':>5} {'t':>3} {'d':>5} {'time/sample s':>14} {'mem GiB':>8} "
                 f"{'recomp':>6}  nodes")
    for i, s in enumerate(plan.stages):
        lines.append(f"{i:>5} {s.t:>3} {s.d:>5} {s.time_per_sample_s:>14.6g} "
                     f"{s.memory_bytes / 2**30:>8.2f} {sum(s.recompute):>6}  "
                     f"{' '.join(map(str, s.nodes))}")
    return "\n".join(lines)


def _parse(text: str | None, flag: str, kind: type[_Number]) -> _Number | None:
    if text is None:
        return None
    try:
        return kind(text)
    except ValueError:
        raise InputError(flag, "an integer" if kind is int else "a number", text) from None


# Searcher name -> registrar. grid, mcmc and tpe add their own function here.
def _register_placement(searchers: argparse._SubParsersAction) -> None:
    from sweep._cmd_search_hetero import register_placement

    register_placement(searchers)


SEARCHERS: dict[str, Callable[[argparse._SubParsersAction], None]] = {
    "piper": _register_piper,
    "placement": _register_placement,
}
