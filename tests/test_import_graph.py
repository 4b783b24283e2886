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


def _face_names(root: Path, package: str) -> dict[str, str]:
    """Public name -> the private module that defines it, from the ``from x import ...`` lines of a package's
    __init__.py (a face: it hands names on, lazily at run time)."""
    tree = ast.parse((root / package / "__init__.py").read_text())
    return {a.asname or a.name: node.module for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(package + ".")
            for a in node.names}


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of the tree it imports (at module level or inside a function). A name imported from a
    package's face is an arrow to the module that defines it; the faces themselves are no nodes."""
    modules = {_module_name(p, root): p for package in LAYERS for p in (root / package).rglob("*.py")}
    faces = {package: _face_names(root, package) for package in LAYERS}
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        out = graph.setdefault(module, set())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in faces and not node.level:
                for a in node.names:
                    target = f"{node.module}.{a.name}"
                    out.add(target if target in modules else faces[node.module].get(a.name, node.module))
        for _, target in _imported(tree, module, False):
            if target in modules and target not in faces:
                out.add(target)
        out.discard(module)
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


def test_no_import_circle():
    """No modules of the tree import each other, directly or round a loop (function-level imports count)."""
    graph = import_graph(ROOT)
    assert "search._moves" in graph and "costmodel._evaluate" in graph["search._space"]
    assert import_circles(graph) == []


def test_the_check_finds_an_import_circle(tmp_path):
    """A copy of the tree where a costmodel module imports, inside a function, a name that the face hands on from a
    module which imports it back: the two are reported as one circle."""
    for package in LAYERS:
        for path in (ROOT / package).rglob("*.py"):
            dest = tmp_path / path.relative_to(ROOT)
            os.makedirs(dest.parent, exist_ok=True)
            dest.write_text(path.read_text())
    hw = tmp_path / "costmodel" / "_hardware.py"
    hw.write_text(hw.read_text() + "\n\ndef _late():\n    from costmodel import evaluate\n")
    circles = import_circles(import_graph(tmp_path))
    assert any("costmodel._hardware" in c and "costmodel._evaluate" in c for c in circles), circles
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# What benchmarks/ may import of the command line: its parsers (the flags a benchmark replays, and cli.run_request:
# the run a sweep command line asks for, which bench_sweep.py times) and the launch formats' writers and readers
# (cli._export: what consistency_sweep.py's round trip replays; export's command is cli._cmd_export). Everything else
# they share with the commands lives below cli/.
BENCHMARK_CLI_IMPORTS = {"cli": "build_parser, run_request", "cli._space_args": "the space flags' parser",
                         "cli._export": "the launch formats' writers and readers"}


def benchmark_cli_imports(root: Path) -> list[str]:
    """Imports of cli modules in benchmarks/*.py beyond BENCHMARK_CLI_IMPORTS, as "file:line: module"; an import
    inside an ``except ImportError`` handler (the same name from an older checkout, for A/B scripts) is allowed."""
    bad = []
    for path in sorted((root / "benchmarks").glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        fallback = {id(n) for h in ast.walk(tree) if isinstance(h, ast.ExceptHandler)
                    and getattr(h.type, "id", None) == "ImportError" for n in ast.walk(h)}
        for node in ast.walk(tree):
            if id(node) in fallback or not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                if name.split(".")[0] == "cli" and name not in BENCHMARK_CLI_IMPORTS:
                    bad.append(f"{path.name}:{node.lineno}: {name}")
    return bad


def test_benchmarks_import_no_command_module(tmp_path):
    assert benchmark_cli_imports(ROOT) == []
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "x.py").write_text(
        "try:\n    from costmodel._bench_rows import bench_table\nexcept ImportError:\n"
        "    from cli._cmd_bench import bench_table\nfrom cli._cmd_rank import refine\n")
    assert benchmark_cli_imports(tmp_path) == ["x.py:5: cli._cmd_rank"]
