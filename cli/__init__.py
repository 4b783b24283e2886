"""The ``plansweep`` command line: one entry point, one module per subcommand.

The packages below (sweep, search, costmodel) never import this one. Each subcommand lives in
``cli/_cmd_<name>.py`` and exposes ``register(subparsers)``,
which adds its parser and sets ``func`` (a callable taking the parsed args and returning an
exit code). Bad input raises :class:`costmodel.InputError`; this module prints it as one
line and exits with code 2, without a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from costmodel import InputError

# Every command: its name, the module that registers it, and its line in --help (the module's
# parser takes it from here), in --help's order. `plansweep --help` lists these without importing
# any command module (tests/test_cli_startup.py holds that listing equal to the full parser's).
COMMANDS = (
    ("evaluate", "cli._cmd_evaluate", "time and memory of one strategy, broken down"),
    ("export", "cli._cmd_export",
     "a plan as Megatron-LM arguments, a torchtitan TOML, a DeepSpeed config or a Megatron-DeepSpeed launch"),
    ("rank", "cli._cmd_rank", "rank a default strategy space in one process"),
    ("validate", "cli._cmd_validate", "predicted vs measured speed (and memory) of real runs, each held to its "
     "error band"),
    ("calibrate", "cli._cmd_validate", "fit a GPU type's efficiency constants to measured runs, or its links' "
     "to nccl-tests logs"),
    ("bench", "cli._cmd_bench", "strategies per second: vectorised core vs scalar reference"),
    ("schedule", "cli._cmd_schedule", "simulate and draw one pipeline schedule"),
    ("schedule-experiments", "cli._cmd_schedule_experiments",
     "compare GPipe, 1F1B, interleaved 1F1B, Hanayo and ZB-H1 on synthetic stage times (Parquet + PNG)"),
    ("search", "cli._cmd_search", "search for the best plan with one searcher"),
    ("sweep", "cli._cmd_sweep", "grid sweep of a strategy space on Ray, into a run directory"),
    ("resume", "cli._cmd_sweep", "continue a sweep or search from its run directory"),
    ("show", "cli._cmd_show", "print the best strategies of a run directory"),
    ("plot", "cli._cmd_plot", "draw PNG figures of a run directory"),
    ("replan", "cli._cmd_replan", "the best plan on the nodes left after failures, per policy"),
)
# Subcommand modules, in the order they appear in --help.
COMMAND_MODULES = tuple(dict.fromkeys(module for _, module, _ in COMMANDS))
# Which module registers each command: a command line naming one imports that module only
# (tests/test_cli_startup.py checks this table against the parsers the modules register).
COMMAND_OF = {name: module for name, module, _ in COMMANDS}
COMMAND_HELP = {name: line for name, _, line in COMMANDS}


def print_json(value) -> None:
    """One JSON document on stdout for every ``--json``: standard JSON (a strict parser reads it),
    so what cannot be priced is null, never Infinity or NaN (costmodel._validate.strict_json)."""
    from costmodel._validate import strict_json

    print(json.dumps(strict_json(value), allow_nan=False))


class _Parser(argparse.ArgumentParser):
    """argparse with bad usage reported as one line (and exit code 2), like InputError."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _top_parser() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    parser = _Parser(prog="plansweep",
                     description="Find the fastest way to split training of a large model over a GPU cluster.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    return parser, sub


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with ``command`` (a name in COMMAND_OF) only the module that
    registers it is imported (the others' commands are then absent from this parser)."""
    parser, sub = _top_parser()
    for name in COMMAND_MODULES if command is None else (COMMAND_OF[command],):
        importlib.import_module(name).register(sub)
    return parser


def commands_parser() -> argparse.ArgumentParser:
    """The command level only (each command's name and help line, none of its arguments), built
    without importing any command module: what `plansweep --help` and a command line naming no
    command need. Its --help and errors are the full parser's."""
    parser, sub = _top_parser()
    for name, _, line in COMMANDS:
        sub.add_parser(name, help=line)
    return parser


def run_request(words: list[str]) -> dict:
    """What the `plansweep sweep` command line ``words`` (its flags, after "sweep") asks: the
    identity of its run (run.json's request), parsed and checked as the command does, without
    running it; for benchmarks that time a run of their own. InputError for bad flags."""
    from cli._cmd_sweep import grid_request

    return grid_request(build_parser("sweep").parse_args(["sweep", *words]))


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    if words and words[0] in COMMAND_OF:
        parser = build_parser(words[0])
    else:  # --help, no command or an unknown one: the command level answers (and exits)
        commands_parser().parse_args(words)
        parser = build_parser()  # reached only by odd lines such as `-- evaluate ...`
    args = parser.parse_args(words)
    try:
        code = args.func(args)
    except InputError as exc:
        print(f"plansweep {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `plansweep rank | head`
        return 0
    except KeyboardInterrupt:  # Ctrl-C: what is written is whole (parts and state are renamed into place)
        print(f"plansweep {args.command}: interrupted", file=sys.stderr)
        return 130
    return int(code or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
