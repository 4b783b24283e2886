"""A fast command line: building the parser, --help and one evaluate import no heavy library.

The contract is the import set, not the clock (a loaded machine makes clocks flaky): pandas,
pyarrow, ray, optuna, matplotlib (and scipy) belong to the commands that use them only; --help
imports neither numpy nor any command module; evaluate imports the cost core it prices with and
nothing of search or sweep. Each case runs in a fresh interpreter, so nothing imported by other
tests hides an import.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("pandas", "pyarrow", "ray", "optuna", "matplotlib", "scipy")

REPORT = """
import json, sys
print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))
"""

CASES = {
    "import costmodel": "import costmodel",
    "import search": "import search",
    "import sweep": "import sweep",
    "build the parser": "from cli import build_parser; build_parser()",
    "--help": "from cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass",
    "evaluate --help": "from cli import main\ntry:\n    main(['evaluate', '--help'])\nexcept SystemExit:\n    pass",
    "evaluate one strategy": "from cli import main\n"
                             "main(['evaluate', '--model', 'gpt3-175b', '--cluster', 'h100x1024', '--tp', '8', "
                             "'--pp', '8', '--recompute', 'selective', '--sequence-parallel', '--zero-stage', '1'])",
    "export one strategy": "from cli import main\n"
                           "main(['export', '--framework', 'megatron', '--model', 'llama3-8b', '--cluster', 'h100x64', "
                           "'--tp', '2', '--pp', '2'])",
}


def _heavy_after(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code + "\n" + REPORT.format(heavy=HEAVY)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", list(CASES))
def test_starting_imports_no_heavy_library(case):
    assert _heavy_after(CASES[case]) == []


def test_the_check_sees_a_heavy_import():
    # Reading a run needs pyarrow: the same probe must report it, or the test above proves nothing.
    assert "pyarrow" in _heavy_after("import sweep; sweep.open_run")
    assert "optuna" in _heavy_after("import search; search.TPESearcher")


def test_evaluate_imports_only_its_own_command():
    # `plansweep evaluate` builds the parser of its own module only: no searcher, no run reader.
    code = CASES["evaluate one strategy"] + "\nimport json, sys\nprint(json.dumps(sorted(m for m in sys.modules " \
        "if m.split('.')[0] in ('search', 'sweep') or m.startswith('cli._cmd_'))))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == ["cli._cmd_evaluate"]


def test_command_table_names_every_command_and_its_module():
    from cli import COMMAND_OF, build_parser

    def commands(parser):
        action = next(a for a in parser._actions if a.dest == "command")
        return set(action.choices)

    assert commands(build_parser()) == set(COMMAND_OF)
    for name in COMMAND_OF:
        assert name in commands(build_parser(name)), name


def _modules_after(code: str, prefixes: tuple[str, ...]) -> list[str]:
    """Modules whose top-level package is in prefixes, imported after running code."""
    probe = (code + "\nimport json, sys\nprint(json.dumps(sorted(m for m in sys.modules "
             f"if m.split('.')[0] in {prefixes!r})))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", ["--help", "build the parser"])
def test_help_imports_no_numpy_and_no_command_module(case):
    imported = _modules_after(CASES[case], ("numpy", "cli", "costmodel", "search", "sweep"))
    if case == "--help":  # the command level is listed from cli.COMMANDS, no module imported
        assert imported == ["cli", "costmodel", "costmodel._errors", "costmodel._lazy"]
    else:  # the full parser imports every command module: the probe sees what --help avoids
        assert "numpy" in imported and "cli._cmd_search" in imported


def test_importing_the_packages_imports_nothing_heavy_until_a_name_is_used():
    for package in ("costmodel", "search", "sweep"):
        assert _modules_after(f"import {package}", ("numpy",)) == [], package
    assert _modules_after("from costmodel import InputError", ("numpy",)) == []
    assert "numpy" in _modules_after("from costmodel import evaluate", ("numpy",))  # the probe sees it


def test_evaluate_imports_only_the_cost_core_it_prices_with():
    imported = _modules_after(CASES["evaluate one strategy"], ("costmodel", "search", "sweep"))
    # The validation reader, the memory screen, the linear device model and the schedule renderer
    # are other commands' (or other flags') business.
    for unused in ("costmodel._validate", "costmodel._pipeline_render",
                   "costmodel._memory", "costmodel._linear"):
        assert unused not in imported, unused
    assert "costmodel._evaluate" in imported


def test_command_level_help_and_errors_equal_the_full_parser():
    """`plansweep --help` is answered by cli.commands_parser (no command module imported): its
    text and its errors must be the full parser's, word for word."""
    from cli import build_parser, commands_parser

    full, light = build_parser(), commands_parser()
    assert light.format_help() == full.format_help()
    assert light.format_usage() == full.format_usage()
    for words in ([], ["bogus"]):
        messages = []
        for parser in (full, light):
            try:
                parser.parse_args(words)
            except SystemExit as exc:
                messages.append(exc.code)
        assert len(messages) == 2 and messages[0] == messages[1] == 2


def test_command_level_errors_print_the_same_line(capsys):
    from cli import build_parser, commands_parser

    lines = []
    for parser in (build_parser(), commands_parser()):
        with pytest.raises(SystemExit):
            parser.parse_args(["bogus"])
        lines.append(capsys.readouterr().err)
    assert lines[0] == lines[1] and "invalid choice: 'bogus'" in lines[0]


@pytest.mark.parametrize("package", ["costmodel", "search"])
def test_lazy_package_table_equals_its_type_checking_imports(package):
    """Each package imports its names on first use (PEP 562): the table that does it (_EXPORTS)
    must name what the TYPE_CHECKING imports name, and every public name must resolve."""
    import importlib

    tree = ast.parse((ROOT / package / "__init__.py").read_text())
    guarded = next(node for node in tree.body if isinstance(node, ast.If)
                   and getattr(node.test, "id", None) == "TYPE_CHECKING")
    declared = {(node.module, alias.asname or alias.name) for node in guarded.body
                if isinstance(node, ast.ImportFrom) for alias in node.names}
    module = importlib.import_module(package)
    table = {(mod, name) for mod, names in module._EXPORTS.items() for name in names}
    assert table == declared
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    with pytest.raises(AttributeError):
        module.no_such_name  # noqa: B018 (the attribute access is the test)
