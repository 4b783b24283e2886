"""Helpers for the damaged-run tests: small runs of every searcher built in this process, the
command line called in-process, and what a run directory holds, byte for byte."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os

import pandas as pd

# A 360-point space where every point is valid; small budgets, so a run takes a second or two.
SMALL = ["--model", "gpt3-175b", "--cluster", "h100x1024", "--space", "fixed", "--tp", "1,2,4,8", "--pp",
         "1,2,4,8,16", "--micro-batch", "1,2,4", "--recompute", "none,selective,full", "--zero-stage", "0,1"]
# 12,960 grid rows: two units of 10^4.
GRID = ["sweep", "--model", "gpt3-175b", "--cluster", "h100x1024", "--space", "fixed", "--tp", "1,2,4,8", "--pp",
        "1,2,4,8,16", "--micro-batch", "1,2,3,4,6,8", "--recompute", "none,selective,full", "--zero-stage", "0,1,2,3",
        "--schedule", "gpipe,1f1b,interleaved", "--cp", "1,2,4", "--unit-rows", "10000", "--keep", "all"]
# --part-rows 1: a part per checkpoint or batch (the tests damage parts by their index).
MCMC = ["search", "mcmc", *SMALL, "--seed", "3", "--budget", "48", "--chains", "4", "--checkpoint-every", "3",
        "--part-rows", "1"]
TPE = ["search", "tpe", *SMALL, "--seed", "5", "--budget", "24", "--batch", "8", "--screen", "0", "--part-rows", "1"]
# The gradient search in steps of 8 over the whole space (screened, its budget would cover the 47
# points that fit, listed in one ask).
GRADIENT = ["search", "gradient", *SMALL, "--seed", "2", "--budget", "48", "--samples", "8", "--screen", "0",
            "--polish", "0", "--part-rows", "1"]
RUNS = {"grid": GRID, "mcmc": MCMC, "tpe": TPE, "gradient": GRADIENT}
QUIET = ["--in-process", "--no-progress"]


@dataclasses.dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return self.err.strip().splitlines()


def main(*argv: str) -> Result:
    """plansweep ``argv`` in this process: its exit code, stdout and stderr (argparse's exits too)."""
    import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return Result(int(code), out.getvalue(), err.getvalue())


def build(kind: str, out: str) -> str:
    """The run ``kind`` (grid, mcmc, tpe, gradient) written uninterrupted into ``out``."""
    r = main(*RUNS[kind], "--out", out, *QUIET, "--top", "0")
    assert r.code == 0, r.err
    return out


def part_dir(run_dir: str, kind: str) -> str:
    return os.path.join(run_dir, "results", f"searcher={kind}")


def parts(run_dir: str, kind: str) -> list[str]:
    d = part_dir(run_dir, kind)
    return sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(".parquet") and not n.startswith("."))


def files(run_dir: str, under: str = "") -> dict[str, bytes]:
    """Every file under RUN_DIR/``under`` (relative path -> bytes)."""
    out = {}
    for root, _, names in os.walk(os.path.join(run_dir, under)):
        for n in names:
            p = os.path.join(root, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, run_dir)] = f.read()
    return out


def rows(run_dir: str) -> pd.DataFrame:
    """Every row of a run, every column, in a fixed order (so that two runs compare with equals)."""
    df = pd.read_parquet(os.path.join(run_dir, "results"))
    df["searcher"] = df["searcher"].astype(str)
    keys = ["model", "cluster", "iteration", "grid_index", "tp", "pp", "dp", "cp", "micro_batch", "schedule",
            "recompute", "zero_stage", "vpp", "sequence_parallel"]
    return df.sort_values(keys).reset_index(drop=True)


def same_rows_as(run_dir: str, reference: str) -> bool:
    """The rows of two runs of the same arguments are equal, column for column (run_id aside: each run has its own)."""
    return rows(run_dir).drop(columns="run_id").equals(rows(reference).drop(columns="run_id"))


def truncate(path: str) -> bytes:
    """Cut ``path`` to half its size (a disk that filled, a copy cut short); returns what is left."""
    os.truncate(path, os.path.getsize(path) // 2)
    with open(path, "rb") as f:
        return f.read()
