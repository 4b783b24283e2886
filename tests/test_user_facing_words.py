"""The text users read speaks of the product, not of how it was built.

README.md, docs/, BENCHMARKS.md, CONTRIBUTING.md, the example notebook and files, and every
argparse help string name no issue number, no development session and no internal planning
document ("seed 003"); an old preset or flag name may appear only on a line that says it is an
alias or an old name. The files the documents point users to exist, and the example strategy
files they tell users to run do run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
from pathlib import Path

import pytest

import cli

ROOT = Path(__file__).resolve().parents[1]

# Development-history wording: issue numbers, sessions, the planning documents' names.
FORBIDDEN = re.compile(
    r"issue \d+|\(issue|session \d+|this session|seed ?00\d|seed notebook|seed document",
    re.IGNORECASE,
)
# A line may name an old name if it says that is what it is.
ALIAS_WORDS = re.compile(r"\balias|old name", re.IGNORECASE)


def offending(lines: list[str]) -> list[str]:
    """The lines that use development-history wording and do not call it an alias."""
    return [ln for ln in lines if FORBIDDEN.search(ln) and not ALIAS_WORDS.search(ln)]


def user_documents() -> list[Path]:
    docs = [ROOT / "README.md", ROOT / "BENCHMARKS.md", ROOT / "CONTRIBUTING.md"]
    docs += sorted((ROOT / "docs").glob("*.md"))
    docs += sorted(p for p in (ROOT / "examples").iterdir() if p.suffix in (".yaml", ".yml", ".json", ".csv"))
    return docs


def notebook_lines(path: Path) -> list[str]:
    """Every line of every cell (markdown and code) of a notebook."""
    nb = json.loads(path.read_text())
    return [ln for cell in nb["cells"] for ln in "".join(cell["source"]).splitlines()]


def help_strings(parser: argparse.ArgumentParser, path: tuple[str, ...] = ("plansweep",)):
    """(where, text) for the description, epilog, group descriptions and every argument's and
    subcommand's help of ``parser`` and of every parser below it."""
    for where, text in ((path, parser.description), (path, parser.epilog)):
        if text:
            yield " ".join(where), text
    for group in parser._action_groups:
        if group.description:
            yield " ".join(path), group.description
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if choice.help:
                    yield " ".join((*path, choice.dest)), choice.help
            for name, sub in action.choices.items():
                yield from help_strings(sub, (*path, name))
        elif action.help and action.help is not argparse.SUPPRESS:
            yield " ".join((*path, *(action.option_strings or (action.dest,)))), str(action.help)


def test_the_check_catches_history_words_and_allows_aliases():
    # Hand-written lines: what the check must flag and what it must let through.
    flagged = ["Mixture-of-experts models (issue 18): presets", "as seed 003 does", "seed000-16 is the cluster",
               "rows seen in this session", "(session 27)", "the seed notebook's simulator"]
    allowed = ["its old name `seed000-mlp` still works", "`seed000-16` (an alias of a100x16-flat)",
               "random seed (default 0)", "seeds 0-9 within 1%", "a GitHub issue tracker"]
    assert offending(flagged) == flagged
    assert offending(allowed) == []


@pytest.mark.parametrize("path", user_documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_documents_use_words_a_user_knows(path):
    assert offending(path.read_text().splitlines()) == []


def test_the_notebook_uses_words_a_user_knows():
    assert offending(notebook_lines(ROOT / "examples" / "explore_run.ipynb")) == []


def test_help_strings_use_words_a_user_knows():
    texts = list(help_strings(cli.build_parser()))
    assert len(texts) > 300  # every command's and searcher's arguments, not just the top level
    bad = [(where, text) for where, text in texts if offending(text.splitlines())]
    assert bad == []


def test_help_points_to_pages_that_exist():
    # Help that sends the reader to a document names a page that is there (docs/<page>.md).
    for where, text in help_strings(cli.build_parser()):
        for page in re.findall(r"docs/[\w.-]+\.md", text):
            assert (ROOT / page).is_file(), f"{where}: {page}"
        assert "README, Frameworks" not in text and "README.md, Validation" not in text, where


# Paths a document tells the user to open or pass: examples/..., tests/data/..., docs/..., and
# the benchmark scripts. Placeholders (my_runs.csv, RUN_DIR) are not repository paths.
REPO_PATH = re.compile(r"(?<![\w/.-])((?:examples|tests/data|docs|benchmarks)/[\w./-]*\w)")


# Markdown links to files of the repository: [text](relative/path#anchor).
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_files_the_documents_name_exist():
    missing = []
    for doc in user_documents():
        if doc.suffix != ".md":
            continue
        text = doc.read_text()
        for rel in REPO_PATH.findall(text):
            if "<" in rel or rel.endswith("/"):
                continue
            if not (ROOT / rel).exists() and not (doc.parent / rel).exists():
                missing.append(f"{doc.relative_to(ROOT)}: {rel}")
        for target in LINK.findall(text):
            if not re.match(r"[a-z]+:", target) and not (doc.parent / target).exists():
                missing.append(f"{doc.relative_to(ROOT)}: link {target}")
    assert missing == []


@pytest.mark.parametrize(("model", "layers", "strategy"), [("gpt3-175b", 96, "examples/plan.yaml"),
                                                           ("qwen3-30b-a3b", 48, "examples/plan-moe.yaml")])
@pytest.mark.parametrize("cluster", ["a100x64+h100x64", "examples/mixed-cluster.yaml"])
def test_the_example_placements_evaluate_and_fit(model, layers, strategy, cluster):
    # The shipped examples the documents tell users to run: feasible, every stage on the pool the
    # file names, every layer of the model placed once, each stage within its pool's HBM.
    import yaml

    plan = yaml.safe_load((ROOT / strategy).read_text())
    if cluster.endswith(".yaml"):
        cluster = str(ROOT / cluster)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(["evaluate", "--model", model, "--cluster", cluster, "--strategy", str(ROOT / strategy),
                         "--json"])
    assert code == 0
    report = json.loads(out.getvalue())
    assert report["metrics"]["feasible"] is True and report["metrics"]["tokens_per_s"] > 0
    assert [s["pool"] for s in report["stages"]] == [s["pool"] for s in plan["stages"]]
    assert sum(s["layers"] for s in report["stages"]) == layers
    assert all(s["mem_bytes"] <= s["hbm_bytes"] for s in report["stages"])
