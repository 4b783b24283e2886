"""A clone stands on its own: no test reads outside the repository, and the tracked tree, copied
where nothing is beside it, runs every test that reads the repository's data (found from the test
sources, not listed by hand) and the commands the README names with repository data."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A test reads the repository's data where its code names one of these: the test data folder,
# a "data" path part (tests/data, costmodel/data), the examples and docs folders, README.md,
# BENCHMARKS.md and cluster.yaml, a notebook, the published measurement sets shipped in the
# package (by name or through the functions that list them), Piper's inputs, or a "shared" folder.
DATA_MARKER = re.compile(
    r"""tests/data|['"/]data['"/]|['"/]examples['"/]|['"/]docs['"/]|README|BENCHMARKS|cluster\.yaml|\.ipynb"""
    r"""|narayanan2021|measured_sets|measured_path|piper-inputs|['"/]shared['"/]""")


def _used(node: ast.AST) -> set[str]:
    """Names, attribute names and parameter names (fixtures) ``node`` uses."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)} | {
        n.arg for n in ast.walk(node) if isinstance(n, ast.arg)}


def _defined(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return {node.name}
    return set()


def data_names(lines: list[str], tree: ast.Module, imported: dict[str, set[str]]) -> set[str]:
    """Module-level names (constants, helpers, fixtures) of a test module whose code reads data:
    it names a DATA_MARKER, or uses such a name (to a fixed point), or is imported as one from a
    helper module under tests/ (``imported``: helper module -> its data names)."""
    data = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests."):
            mine = imported.get(node.module.split(".", 1)[1], set())
            data |= {a.asname or a.name for a in node.names if a.name in mine}
    defs = [(_defined(n), _reads(lines, n), _used(n)) for n in tree.body
            if _defined(n) and not (isinstance(n, ast.ClassDef) and n.name.startswith("Test"))]
    grown = True
    while grown:
        grown = False
        for names, marked, used in defs:
            if not names <= data and (marked or used & data):
                data |= names
                grown = True
    return data


def _reads(lines: list[str], node: ast.AST) -> bool:
    """``node``'s own code (``lines``: its module's) names a DATA_MARKER."""
    return any(DATA_MARKER.search(line) for line in lines[node.lineno - 1: node.end_lineno])


def data_reading_tests(root: Path) -> list[str]:
    """pytest node ids (tests/test_x.py::test_f, tests/test_x.py::TestC) of the tests under
    ``root``/tests whose code reads the repository's data (data_names), this module's excepted."""
    tests = root / "tests"
    imported: dict[str, set[str]] = {}
    helpers = {p.stem: p.read_text() for p in sorted(tests.glob("*.py")) if not p.name.startswith("test_")}
    parsed = {stem: (src.splitlines(), ast.parse(src)) for stem, src in helpers.items()}
    for _ in helpers:  # helpers importing helpers: enough rounds for any chain
        for stem, (lines, tree) in parsed.items():
            imported[stem] = data_names(lines, tree, imported)
    out = []
    for p in sorted(tests.glob("test_*.py")):
        if p.name == Path(__file__).name:
            continue
        src = p.read_text()
        tree, lines = ast.parse(src), src.splitlines()
        data = data_names(lines, tree, imported) | imported.get("conftest", set())
        for node in tree.body:
            is_test = (isinstance(node, ast.FunctionDef) and node.name.startswith("test")) or (
                isinstance(node, ast.ClassDef) and node.name.startswith("Test"))
            if is_test and (_reads(lines, node) or _used(node) & data):
                out.append(f"tests/{p.name}::{node.name}")
    return out


def _test_names(path: Path) -> set[str]:
    return {n.name for n in ast.parse(path.read_text()).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


def test_the_finder_finds_the_tests_that_read_data():
    found = set(data_reading_tests(ROOT))
    reads = [  # read by hand: each opens a file of the repository (or a measurement set shipped in the package)
        "tests/test_model_files.py::test_calculon_model_file_is_megatron_22b",  # tests/data/models
        "tests/test_search_options.py::test_grid_and_piper_options_reach_what_they_build",  # piper-inputs
        "tests/test_piper.py::test_bert_plan_is_feasible_has_its_time_and_beats_uniform_plans",  # piper-inputs
        "tests/test_validate.py::test_validate_narayanan_table1_within_published_bounds",  # costmodel/data/measured
        "tests/test_notebook.py::test_readme_polars_line_reads_the_run",  # README.md
        "tests/test_notebook.py::test_every_cell_runs_in_a_kernel_without_error",  # examples/ (through a fixture)
        "tests/test_cluster_yaml.py::test_ray_validates_cluster_yaml",  # cluster.yaml (through a fixture)
        "tests/test_sweep_rundir.py::test_the_schema_page_names_every_column_a_part_has",  # docs/run-directories.md
    ]
    reads_nothing = [  # tables built in memory
        "tests/test_pipeline.py::test_zb_h1_hand_worked_two_stages",
        "tests/test_piper.py::test_hand_made_chain_worked_by_hand",
        "tests/test_searcher_contract.py::test_every_check_has_a_mutant",
    ]
    for node in reads + reads_nothing:
        module, name = node.split("::")
        assert name in _test_names(ROOT / module), node  # (the names above are real tests)
    assert [n for n in reads if n not in found] == []
    assert [n for n in reads_nothing if n in found] == []


PATH_TRAVERSAL = (
    re.compile(r"\.\./shared|\.\./\.\./"),  # a relative path climbing out of tests/ and the repository
    re.compile(r"""['"]\.\.['"]\s*,\s*['"](\.\.|shared)['"]"""),  # two parent parts in a join, or a parent and shared
    re.compile(r"parents\[[2-9]\]|\.parent\.parent\.parent"),  # three levels up from a file under tests/
)


def test_no_test_reads_outside_the_repository():
    """Every file under tests/ (sources, data, notes), line by line: no path that climbs out of
    the repository, so the suite passes on a clone with nothing beside it."""
    bad = []
    for path in sorted(p for p in (ROOT / "tests").rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        try:
            lines = path.read_text().splitlines()
        except UnicodeDecodeError:  # a binary file holds no path a test reads
            continue
        for i, line in enumerate(lines, start=1):
            if any(p.search(line) for p in PATH_TRAVERSAL):
                bad.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not bad, "paths out of the repository:\n" + "\n".join(bad)


def _tracked(root: Path) -> set[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    return {root / name for name in filter(None, out.decode().split("\0"))}


def data_paths() -> dict[str, Path]:
    """The path-valued module constants among the test modules' data names (DATA, BERT, NOTEBOOK,
    ...), imported: {"tests/test_x.py::NAME": its path}."""
    import importlib

    out = {}
    for p in sorted((ROOT / "tests").glob("*.py")):
        src = p.read_text()
        tree = ast.parse(src)
        names = data_names(src.splitlines(), tree, {})
        consts = set().union(*(_defined(n) for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))))
        wanted = sorted(names & consts)
        if not wanted:
            continue
        module = importlib.import_module(f"tests.{p.stem}")
        for name in wanted:
            value = getattr(module, name)
            if isinstance(value, Path) or (isinstance(value, str) and os.sep in value):
                out[f"tests/{p.name}::{name}"] = Path(value)
    return out


def test_data_the_tests_name_is_tracked_in_the_repository():
    """Every path a test module names as its data (slow tests included, which the copy below does
    not run) is a tracked file, or a folder holding tracked files, of this repository."""
    tracked = _tracked(ROOT)
    folders = {parent for f in tracked for parent in f.parents}
    paths = data_paths()
    expected = {"tests/test_piper.py::RESNET", "tests/test_notebook.py::NOTEBOOK", "tests/test_model_files.py::DATA"}
    assert expected <= set(paths)
    bad = {k: str(v) for k, v in paths.items() if not (v.resolve().is_relative_to(ROOT) and (
        v.resolve() in tracked or v.resolve() in folders))}
    assert not bad, bad


def once_each(collected: str) -> list[str]:
    """From ``pytest --collect-only -q`` output, the first node of each test (its first
    parametrization; the others read the same files, through the same module constants)."""
    seen, out = set(), []
    for line in collected.splitlines():
        if "::" in line and not line.startswith(" "):
            key = line.split("[", 1)[0]
            if key not in seen:
                seen.add(key)
                out.append(line.strip())
    return out


@pytest.mark.slow
def test_tracked_tree_runs_without_shared(tmp_path):
    """The tracked tree copied where nothing is beside it: every data-reading test that is not
    marked slow (the slow ones are compute-bound; the paths they name are checked above), each
    once, passes there; and the README's validate and Piper commands run."""
    copy = tmp_path / "alone" / "plansweep"
    for src in _tracked(ROOT):
        if src.is_file():
            (copy / src.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, copy / src.relative_to(ROOT))
    assert list(copy.parent.iterdir()) == [copy]  # nothing beside it
    env = {**os.environ, "PYTHONPATH": str(copy)}

    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *argv], cwd=copy, env=env, capture_output=True, text=True, timeout=1200)

    found = data_reading_tests(copy)
    assert len(found) >= 40, found
    listed = run("-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-n", "0", "-m", "not slow", *found)
    assert listed.returncode == 0, listed.stdout[-3000:] + listed.stderr[-3000:]
    nodes = once_each(listed.stdout)
    assert len(nodes) >= 35, nodes
    tests = run("-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *nodes)  # one process: this test is one worker's
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-3000:]
    assert f"{len(nodes)} passed" in tests.stdout and "skipped" not in tests.stdout, tests.stdout[-3000:]
    val = run("-m", "cli", "validate", "narayanan2021-table1")
    assert val.returncode == 0, val.stderr
    assert "mean |error|" in val.stdout
    piper = run("-m", "cli", "search", "piper", "tests/data/piper-inputs/bert32a100.json", "--devices", "64",
                "--memory", "8589934592", "--microbatches", "1920", "--bandwidth", "26843545600", "--json")
    assert piper.returncode == 0, piper.stderr
    assert '"time_per_sample"' in piper.stdout
