"""The package split: cli -> sweep -> search -> costmodel, imports only downwards.

Every import statement of every module (at module level or inside a function) and every
importlib.import_module("...") with a literal name is read from the source's syntax tree."""

from __future__ import annotations

import ast
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("costmodel", "search", "sweep", "cli")  # lowest first


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, absolute module name) of everything ``module`` imports."""
    package = module if is_package else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: climb level - 1 packages from this module's package
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            out.append((node.lineno, base))
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
              and isinstance(node.args[0].value, str)):
            out.append((node.lineno, node.args[0].value))
    return out


def upward_imports(root: Path) -> list[str]:
    """Each import of a package above the importer's own in LAYERS, as "file:line: a imports b"."""
    bad = []
    for layer, package in enumerate(LAYERS):
        for path in sorted((root / package).rglob("*.py")):
            module = _module_name(path, root)
            tree = ast.parse(path.read_text(), filename=str(path))
            for line, target in _imported(tree, module, path.name == "__init__.py"):
                top = target.split(".")[0]
                if top in LAYERS and LAYERS.index(top) > layer:
                    bad.append(f"{path.relative_to(root)}:{line}: {module} imports {target}")
    return bad


def test_packages_import_only_downwards():
    for package in LAYERS:
        assert (ROOT / package / "__init__.py").is_file(), package
    assert upward_imports(ROOT) == []


def test_the_check_finds_an_upward_import(tmp_path):
    """A copy of the tree with one lazy import of a command module added to a sweep library
    module, and a module-level import of search in costmodel: both are reported."""
    for package in LAYERS:
        for path in (ROOT / package).rglob("*.py"):
            dest = tmp_path / path.relative_to(ROOT)
            os.makedirs(dest.parent, exist_ok=True)
            dest.write_text(path.read_text())
    grid = tmp_path / "sweep" / "_grid.py"
    grid.write_text(grid.read_text() + "\n\ndef _late():\n    from cli._cmd_show import format_placement\n")
    init = tmp_path / "costmodel" / "__init__.py"
    init.write_text(init.read_text() + "\nimport search._grid\n")
    bad = upward_imports(tmp_path)
    assert len(bad) == 2
    assert any(b.startswith("sweep/_grid.py:") and b.endswith("sweep._grid imports cli._cmd_show") for b in bad)
    assert any(b.endswith("costmodel imports search._grid") for b in bad)
