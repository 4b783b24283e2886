"""A clone stands on its own: the tracked tree, copied where no ../shared is beside it, runs
the tests that read data and the commands the README and docs name with repository data."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_tracked_tree_runs_without_shared(tmp_path):
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    copy = tmp_path / "alone" / "plansweep"
    for name in filter(None, files.decode().split("\0")):
        src = ROOT / name
        if src.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, copy / name)
    assert not (copy.parent / "shared").exists()
    env = {**os.environ, "PYTHONPATH": str(copy)}

    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *argv], cwd=copy, env=env, capture_output=True, text=True, timeout=600)

    tests = run("-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_costmodel.py", "tests/test_validate.py",
                "tests/test_model_files.py", "-k", "not bench")
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-3000:]
    assert " passed" in tests.stdout and "skipped" not in tests.stdout
    val = run("-m", "cli", "validate", "narayanan2021-table1")
    assert val.returncode == 0, val.stderr
    assert "mean |error|" in val.stdout
    piper = run("-m", "cli", "search", "piper", "tests/data/piper-inputs/bert32a100.json", "--devices", "64",
                "--memory", "8589934592", "--microbatches", "1920", "--bandwidth", "26843545600", "--json")
    assert piper.returncode == 0, piper.stderr
    assert '"time_per_sample"' in piper.stdout
