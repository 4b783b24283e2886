"""docs/architecture.md names real code: every function its tables name is defined in the module the row names."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"


def defined(path: Path) -> set[str]:
    """Names a module defines: functions, classes, methods and module-level assignments."""
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    return out


def named_in_tables(text: str) -> list[tuple[str, str]]:
    """(module path, name) for every `name` in a table row whose first `*.py` is a module of costmodel/ (written
    whole, or as `_x.py` in the costmodel tables); `m.name` names a function of costmodel/_m.py."""
    out = []
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        ticks = re.findall(r"`([^`]+)`", line)
        files = [t for t in ticks if t.endswith(".py")]
        if not files or "/" in files[0] and not files[0].startswith("costmodel/"):
            continue
        module = files[0] if files[0].startswith("costmodel/") else "costmodel/" + files[0]
        for t in ticks:
            if t.endswith(".py") or not re.fullmatch(r"[A-Za-z_][\w.]*", t):
                continue
            if "." in t:
                mod, name = t.split(".")
                out.append((f"costmodel/{mod}.py", name))
            else:
                out.append((module, t))
    return out


def test_the_architecture_tables_name_functions_where_they_are():
    names = named_in_tables(DOC.read_text())
    assert len(names) >= 40
    missing = [f"{m}: {n}" for m, n in names if n not in defined(ROOT / m)]
    assert missing == []


def test_a_reader_finds_activation_memory_the_bubble_and_the_zero3_all_gather():
    text = DOC.read_text()
    for cost, module, name in (("activation memory", "_memory_terms.py", "layer_activation_bytes"),
                               ("bubble", "_pipeline_terms.py", "pipeline_bubble_s"),
                               ("ZeRO-3 all-gather", "_data_parallel.py", "zero3_gather_scatter_bytes")):
        row = next(line for line in text.splitlines() if line.startswith("|") and cost in line)
        assert module in row and f"`{name}`" in row, row
        assert name in defined(ROOT / "costmodel" / module)


def test_the_check_finds_a_name_that_is_not_there(tmp_path):
    names = named_in_tables("| bubble | `costmodel/_pipeline_terms.py` | `no_such_function` |\n"
                            "| `_experts.py` | `moe_layer_costs` (`_collectives.all_to_all_s`) |\n")
    assert names == [("costmodel/_pipeline_terms.py", "no_such_function"), ("costmodel/_experts.py", "moe_layer_costs"),
                     ("costmodel/_collectives.py", "all_to_all_s")]
    assert "no_such_function" not in defined(ROOT / "costmodel" / "_pipeline_terms.py")
