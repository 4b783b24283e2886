"""MCMC and TPE searches as runs: checkpoints, kill -9 and resume, a killed actor, several studies."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import numpy as np
import pytest

from tests.sweep_helpers import cli, kill_when, own_ray_processes, parts, rows, search_run, start

EXACT = ["--model", "gpt3-175b", "--cluster", "h100x1024", "--space", "exact"]
MCMC = {"budget": 1200, "chains": 16, "beta": 20.0, "reset_every": 50, "checkpoint_every": 5}
# A 360-point space where every point is valid (TPE spends no trials outside it).
SMALL = ["--model", "gpt3-175b", "--cluster", "h100x1024", "--space", "fixed", "--tp", "1,2,4,8", "--pp",
         "1,2,4,8,16", "--micro-batch", "1,2,4", "--recompute", "none,selective,full", "--zero-stage", "0,1"]
TPE = {"budget": 64, "batch": 8}
KEY = ["model", "iteration", "dp", "tp", "pp", "cp", "micro_batch", "schedule", "vpp", "recompute",
       "sequence_parallel", "zero_stage"]


def _sorted(df):
    cols = KEY + ["step_time_s", "tokens_per_s", "feasible", "reason"]
    return df[cols].sort_values(KEY).reset_index(drop=True)


def assert_same_run(a: str, b: str) -> None:
    x, y = rows(a), rows(b)
    assert not x.duplicated(KEY).any(), "duplicated rows"
    assert len(x) == len(y)
    assert _sorted(x).equals(_sorted(y))


def best(run_dir: str) -> tuple:
    df = rows(run_dir)
    top = df[df["feasible"]].sort_values(["tokens_per_s"] + KEY, ascending=[False] + [True] * len(KEY)).iloc[0]
    return tuple(top[KEY + ["tokens_per_s"]])


@pytest.fixture(scope="module")
def mcmc_reference(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("mcmc") / "run")
    search_run(out, "mcmc", EXACT, seed=3, **MCMC)
    cli("resume", out, "--in-process", "--no-progress")
    return out


def test_mcmc_run_checkpoints_and_budget(mcmc_reference):
    df = rows(mcmc_reference)
    assert len(df) == MCMC["budget"]  # every evaluation kept, none twice (the memo asks new points only)
    assert set(df["searcher"].astype(str)) == {"mcmc"} and df["grid_index"].isna().all()
    n_parts = len(parts(os.path.join(mcmc_reference, "results", "searcher=mcmc")))
    steps = df["iteration"].nunique()
    assert n_parts == -(-steps // MCMC["checkpoint_every"])  # a part per checkpoint of 5 steps
    assert os.path.exists(os.path.join(mcmc_reference, "state", "mcmc-00.npz"))
    # The reported best is the dataset's best, and resuming a finished run adds nothing.
    out = cli("resume", mcmc_reference, "--in-process", "--no-progress", "--top", "1").stdout
    assert f"{best(mcmc_reference)[-1]:,.0f}" in out
    assert len(rows(mcmc_reference)) == MCMC["budget"]


@pytest.mark.slow
def test_mcmc_kill_9_then_resume_equals_uninterrupted(mcmc_reference, tmp_path):
    out = str(tmp_path / "run")
    search_run(out, "mcmc", EXACT, seed=3, **MCMC)
    proc = start("resume", out, "--workers", "1", "--no-progress")
    total = len(parts(os.path.join(mcmc_reference, "results", "searcher=mcmc")))
    n = kill_when(proc, os.path.join(out, "results", "searcher=mcmc"), at_least=3)
    assert n < total, f"killed after all {total} checkpoints"
    cli("resume", out, "--workers", "1", "--no-progress")
    assert_same_run(out, mcmc_reference)
    assert best(out) == best(mcmc_reference)


@pytest.mark.slow
def test_mcmc_killed_actor_is_replaced_from_its_checkpoint(mcmc_reference, tmp_path):
    out = str(tmp_path / "run")
    search_run(out, "mcmc", EXACT, seed=3, **MCMC)
    killed = []
    directory = os.path.join(out, "results", "searcher=mcmc")

    def killer() -> None:  # once two checkpoints are written, SIGKILL the chain actor
        t0 = time.monotonic()
        while time.monotonic() - t0 < 120 and not killed:
            actors = own_ray_processes("ray::ChainRunner")
            if actors and len(parts(directory)) >= 2:
                os.kill(actors[0], signal.SIGKILL)
                killed.append(actors[0])
            time.sleep(0.02)

    from sweep._ray import init_ray, shutdown_ray
    from sweep._rundir import RunDir
    from sweep._search_engine import run_search

    saved = dict(os.environ)
    init_ray(workers=1, address=None)
    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        with RunDir.open(out) as rd:
            run_search(rd, in_process=False, progress=False)
    finally:
        shutdown_ray()
        os.environ.clear()
        os.environ.update(saved)
    thread.join(timeout=5)
    assert killed, "the actor was not found"
    assert_same_run(out, mcmc_reference)


@pytest.fixture(scope="module")
def tpe_reference(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("tpe") / "run")
    search_run(out, "tpe", SMALL, seed=5, **TPE)
    cli("resume", out, "--in-process", "--no-progress")
    return out


def _trials(run_dir: str) -> dict[str, int]:
    import optuna

    from search._tpe import DEFAULT_STUDY_NAME

    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(os.path.join(run_dir, "state", "tpe-00.journal")))
    study = optuna.load_study(study_name=DEFAULT_STUDY_NAME, storage=storage)
    states = [t.state.name for t in study.get_trials(deepcopy=False)]
    return {s: states.count(s) for s in set(states)}


@pytest.mark.slow
def test_tpe_kill_9_then_resume_trials_add_up(tpe_reference, tmp_path):
    out = str(tmp_path / "run")
    search_run(out, "tpe", SMALL, seed=5, **TPE)
    proc = start("resume", out, "--workers", "1", "--no-progress")
    n = kill_when(proc, os.path.join(out, "results", "searcher=tpe"), at_least=3)
    assert n < TPE["budget"] // TPE["batch"]
    cli("resume", out, "--workers", "1", "--no-progress")
    df = rows(out)
    assert len(df) == TPE["budget"] and not df.duplicated(KEY).any()
    batches = df["iteration"].nunique()  # a batch may hold fewer than 8 new points
    assert sorted(df["iteration"].unique()) == list(range(batches))
    # The study continued: every evaluated row is one finished trial, none left running, and the
    # run is the uninterrupted one (batches are seeded by (seed, trials so far)).
    trials = _trials(out)
    assert trials.get("RUNNING", 0) == 0 and trials["COMPLETE"] >= TPE["budget"]
    assert trials == _trials(tpe_reference)
    assert_same_run(out, tpe_reference)
    marker = json.load(open(os.path.join(out, "state", "tpe-00.json")))
    assert marker["batches"] == batches and marker["evaluations"] == TPE["budget"]


def test_several_studies_side_by_side(tmp_path):
    out = str(tmp_path / "run")
    two = ["--model", "gpt3-175b,llama3-70b", "--cluster", "h100x1024", "--space", "exact"]
    search_run(out, "mcmc", two, seed=3, **{**MCMC, "budget": 200})
    proc = cli("resume", out, "--in-process", "--no-progress", "--top", "2")
    df = rows(out)
    counts = df.groupby("model").size().to_dict()
    assert counts == {"gpt3-175b": 200, "llama3-70b": 200}
    assert "best strategies for gpt3-175b on h100x1024" in proc.stdout
    assert "best strategies for llama3-70b on h100x1024" in proc.stdout
    info = json.load(open(os.path.join(out, "run.json")))
    assert [s["model"]["name"] for s in info["studies"]] == ["gpt3-175b", "llama3-70b"]
    assert np.all(df.groupby("model")["cluster"].nunique() == 1)
