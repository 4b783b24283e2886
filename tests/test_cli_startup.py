"""A fast command line: building the parser, --help and one evaluate import no heavy library.

The contract is the import set, not the clock (a loaded machine makes clocks flaky): pandas,
pyarrow, ray, optuna, matplotlib (and scipy) belong to the commands that use them only.
Each case runs in a fresh interpreter, so nothing imported by other tests hides an import.
"""

from __future__ import annotations

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
