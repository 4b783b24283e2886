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

# Subcommand modules, in the order they appear in --help.
COMMAND_MODULES = (
    "cli._cmd_evaluate",
    "cli._cmd_export",
    "cli._cmd_rank",
    "cli._cmd_validate",
    "cli._cmd_bench",
    "cli._cmd_schedule",
    "cli._cmd_schedule_experiments",
    "cli._cmd_search",
    "cli._cmd_sweep",
    "cli._cmd_show",
    "cli._cmd_plot",
    "cli._cmd_replan",
)
# Which module registers each command: a command line naming one imports that module only
# (tests/test_cli_startup.py checks this table against the parsers the modules register).
COMMAND_OF = {
    "evaluate": "cli._cmd_evaluate", "export": "cli._cmd_export", "rank": "cli._cmd_rank",
    "validate": "cli._cmd_validate", "calibrate": "cli._cmd_validate", "bench": "cli._cmd_bench",
    "schedule": "cli._cmd_schedule", "schedule-experiments": "cli._cmd_schedule_experiments",
    "search": "cli._cmd_search", "sweep": "cli._cmd_sweep", "resume": "cli._cmd_sweep", "show": "cli._cmd_show",
    "plot": "cli._cmd_plot", "replan": "cli._cmd_replan",
}


def print_json(value) -> None:
    """One JSON document on stdout for every ``--json``: standard JSON (a strict parser reads it),
    so what cannot be priced is null, never Infinity or NaN (costmodel._validate.strict_json)."""
    from costmodel._validate import strict_json

    print(json.dumps(strict_json(value), allow_nan=False))


class _Parser(argparse.ArgumentParser):
    """argparse with bad usage reported as one line (and exit code 2), like InputError."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with ``command`` (a name in COMMAND_OF) only the module that
    registers it is imported (the others' commands are then absent from this parser)."""
    parser = _Parser(
        prog="plansweep",
        description="Find the fastest way to split training of a large model over a GPU cluster.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES if command is None else (COMMAND_OF[command],):
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    parser = build_parser(words[0] if words and words[0] in COMMAND_OF else None)
    args = parser.parse_args(words)
    try:
        code = args.func(args)
    except InputError as exc:
        print(f"plansweep {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `plansweep rank | head`
        return 0
    return int(code or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
