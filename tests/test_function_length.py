"""No function or method in costmodel/, search/, sweep/ or cli/ runs over MAX_LINES lines (read from the syntax tree:
from its ``def`` line, decorators excluded, to its last line, docstring and comments included)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("costmodel", "search", "sweep", "cli")
MAX_LINES = 150


def long_functions(root: Path, limit: int = MAX_LINES) -> list[str]:
    """"path:line name (lines)" of every function longer than ``limit`` lines, nested ones included."""
    out = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > limit:
                        out.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    return out


def test_no_function_over_150_lines():
    assert long_functions(ROOT) == []


def test_the_check_counts_lines_of_nested_functions_and_methods(tmp_path):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(149))  # a def line and 149 more: 150 lines, allowed
    (tmp_path / "search" / "a.py").write_text(f"def ok():\n{body}\n")
    inner = "\n".join(f"            y{i} = {i}" for i in range(150))  # a nested def of 151 lines
    (tmp_path / "cli" / "b.py").write_text(f"class C:\n    def m(self):\n        def inner():\n{inner}\n")
    assert long_functions(tmp_path) == ["cli/b.py:2 m (152 lines)", "cli/b.py:3 inner (151 lines)"]
