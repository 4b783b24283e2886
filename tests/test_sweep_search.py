"""MCMC, TPE and gradient searches as runs: checkpoints, kill -9 and resume, a killed actor, several
studies."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import numpy as np
import pytest

from tests.sweep_helpers import cli, kill_when, own_ray_processes, parts, rows, start, workers_import_this_checkout

EXACT = ["--model", "gpt3-175b", "--cluster", "h100x1024", "--space", "exact"]
MCMC = ["--seed", "3", "--budget", "1200", "--chains", "16", "--checkpoint-every", "5"]
MCMC_BUDGET = 1200
# A 360-point space where every point is valid (TPE spends no trials outside it).
SMALL = ["--model", "gpt3-175b", "--cluster", "h100x1024", "--space", "fixed", "--tp", "1,2,4,8", "--pp",
         "1,2,4,8,16", "--micro-batch", "1,2,4", "--recompute", "none,selective,full", "--zero-stage", "0,1"]
TPE = ["--seed", "5", "--budget", "64", "--batch", "8", "--screen", "0"]  # screen 0: walk the whole budget (38 points fit)
TPE_BUDGET = 64
STRATEGY = ["model", "dp", "tp", "pp", "cp", "micro_batch", "schedule", "vpp", "recompute",
       "sequence_parallel", "zero_stage"]
KEY = ["iteration", *STRATEGY]


def _sorted(df):
    cols = KEY + ["step_time_s", "tokens_per_s", "feasible", "reason"]
    return df[cols].sort_values(KEY).reset_index(drop=True)


def assert_same_run(a: str, b: str) -> None:
    x, y = rows(a), rows(b)
    assert not x.duplicated(STRATEGY).any(), "a strategy evaluated twice"
    assert len(x) == len(y)
    assert _sorted(x).equals(_sorted(y))


def best(run_dir: str) -> tuple:
    df = rows(run_dir)
    top = df[df["feasible"]].sort_values(["tokens_per_s"] + KEY, ascending=[False] + [True] * len(KEY)).iloc[0]
    return tuple(top[KEY + ["tokens_per_s"]])


@pytest.fixture(scope="module")
def mcmc_reference(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("mcmc") / "run")
    cli("search", "mcmc", *EXACT, *MCMC, "--out", out, "--in-process", "--no-progress")
    return out


def test_mcmc_run_checkpoints_and_budget(mcmc_reference):
    df = rows(mcmc_reference)
    assert len(df) == MCMC_BUDGET  # every evaluation kept, none twice (the memo asks new points only)
    assert set(df["searcher"].astype(str)) == {"mcmc"} and df["grid_index"].isna().all()
    n_parts = len(parts(os.path.join(mcmc_reference, "results", "searcher=mcmc")))
    steps = df["iteration"].nunique()
    assert n_parts == -(-steps // 5)  # a part per checkpoint of 5 steps
    assert os.path.exists(os.path.join(mcmc_reference, "state", "mcmc-00.npz"))
    # The reported best is the dataset's best, and resuming a finished run adds nothing.
    out = cli("resume", mcmc_reference, "--in-process", "--no-progress", "--top", "1").stdout
    assert f"{best(mcmc_reference)[-1]:,.0f}" in out
    assert len(rows(mcmc_reference)) == MCMC_BUDGET


@pytest.mark.slow
def test_mcmc_kill_9_then_resume_equals_uninterrupted(mcmc_reference, tmp_path):
    out = str(tmp_path / "run")
    proc = start("search", "mcmc", *EXACT, *MCMC, "--out", out, "--workers", "1", "--no-progress")
    total = len(parts(os.path.join(mcmc_reference, "results", "searcher=mcmc")))
    n = kill_when(proc, os.path.join(out, "results", "searcher=mcmc"), at_least=3)
    assert n < total, f"killed after all {total} checkpoints"
    cli("resume", out, "--workers", "1", "--no-progress")
    assert_same_run(out, mcmc_reference)
    assert best(out) == best(mcmc_reference)


@pytest.mark.slow
def test_mcmc_killed_actor_is_replaced_from_its_checkpoint(mcmc_reference, tmp_path, monkeypatch):
    workers_import_this_checkout(monkeypatch)
    out = str(tmp_path / "run")
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

    from cli import build_parser
    from cli._cmd_sweep import search_request
    from sweep._ray import init_ray, shutdown_ray
    from sweep._rundir import RunDir
    from sweep._search_engine import run_search

    args = build_parser().parse_args(["search", "mcmc", *EXACT, *MCMC, "--out", out])
    RunDir.create_or_resume(out, search_request(args, "mcmc"))[0].close()
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
    cli("search", "tpe", *SMALL, *TPE, "--out", out, "--in-process", "--no-progress")
    return out


def _trial_states(run_dir: str) -> dict[str, int]:
    """Trials of the run's Optuna studies (in one journal in RUN_DIR/state) by state: one study, the
    "roots" walk, at this budget (walks "auto" below SINGLE_WALK_BUDGET), else TPESearcher's two."""
    import optuna

    from search._tpe import DEFAULT_STUDY_NAME, SINGLE_WALK_BUDGET

    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(os.path.join(run_dir, "state", "tpe-00.journal")))
    names = optuna.get_all_study_names(storage)
    assert sorted(names) == ([DEFAULT_STUDY_NAME] if TPE_BUDGET < SINGLE_WALK_BUDGET
                             else [DEFAULT_STUDY_NAME, f"{DEFAULT_STUDY_NAME}:roots"])
    states = [t.state.name for name in names
              for t in optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)]
    return {s: states.count(s) for s in set(states)}


@pytest.mark.slow
def test_tpe_kill_9_then_resume_trials_add_up(tpe_reference, tmp_path):
    out = str(tmp_path / "run")
    proc = start("search", "tpe", *SMALL, *TPE, "--out", out, "--workers", "1", "--no-progress")
    n = kill_when(proc, os.path.join(out, "results", "searcher=tpe"), at_least=3)
    assert n < TPE_BUDGET // 8
    before = rows(out)
    # = resume; in this process (the run killed was on Ray: the state on disk is the same)
    cli("search", "tpe", *SMALL, *TPE, "--out", out, "--in-process", "--no-progress")
    df = rows(out)
    assert len(df) == TPE_BUDGET and not df.duplicated(KEY).any()
    batches = df["iteration"].nunique()  # a batch may hold fewer than 8 new points
    assert sorted(df["iteration"].unique()) == list(range(batches))
    # No batch was written twice: no part's strategies are all in an earlier part. (A strategy may
    # still appear in two batches where the searcher asks it twice; the uninterrupted run shows
    # whether it does.)
    sets = [set(map(tuple, g[STRATEGY].to_numpy().tolist())) for _, g in df.groupby("iteration")]
    assert not any(sets[j] <= sets[i] for j in range(batches) for i in range(j))
    # The study continued (not restarted): batches told before the kill are still there, as the
    # uninterrupted run has them; nothing is left running; trials add up to the evaluations.
    told = before[before["iteration"] < n - 1]
    ref = rows(tpe_reference)
    assert _sorted(told).equals(_sorted(ref[ref["iteration"] < n - 1]))
    assert _sorted(df[df["iteration"] < n - 1]).equals(_sorted(told))
    states = _trial_states(out)
    assert states.get("RUNNING", 0) == 0 and states["COMPLETE"] >= TPE_BUDGET
    marker = json.load(open(os.path.join(out, "state", "tpe-00.json")))
    assert marker["batches"] == batches and marker["evaluations"] == TPE_BUDGET


GRADIENT = ["--seed", "2", "--budget", "160", "--samples", "16"]
GRADIENT_BUDGET = 160


@pytest.fixture(scope="module")
def gradient_reference(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("gradient") / "run")
    cli("search", "gradient", *EXACT, *GRADIENT, "--out", out, "--in-process", "--no-progress")
    return out


def test_gradient_run_parts_state_and_budget(gradient_reference):
    df = rows(gradient_reference)
    assert len(df) == GRADIENT_BUDGET and not df.duplicated(STRATEGY).any()  # the memo asks new points only
    assert set(df["searcher"].astype(str)) == {"gradient"}
    steps = df["iteration"].nunique()
    assert steps == GRADIENT_BUDGET // 16  # 16 new points per step
    assert len(parts(os.path.join(gradient_reference, "results", "searcher=gradient"))) == steps  # a part per step
    with np.load(os.path.join(gradient_reference, "state", "gradient-00.npz"), allow_pickle=False) as z:
        assert int(z["e.steps"]) == steps == int(z["s.step"]) and int(z["e.evaluations"]) == GRADIENT_BUDGET
    out = cli("resume", gradient_reference, "--in-process", "--no-progress", "--top", "1").stdout
    assert f"{best(gradient_reference)[-1]:,.0f}" in out
    assert len(rows(gradient_reference)) == GRADIENT_BUDGET


def test_gradient_interrupted_between_part_and_state_resumes_as_uninterrupted(gradient_reference, tmp_path,
                                                                              monkeypatch):
    # The run stops after writing part 3 and before its state: the resumed run asks step 3 again and
    # writes part 3 again under the same name; the rows equal the uninterrupted run's.
    import cli as plansweep
    import sweep._search_engine as engine

    out = str(tmp_path / "run")
    real, calls = engine.save_state, []

    def stop_at_fourth(path, state, eng):
        calls.append(path)
        if len(calls) == 4:
            raise KeyboardInterrupt
        real(path, state, eng)

    monkeypatch.setattr(engine, "save_state", stop_at_fourth)
    argv = ["search", "gradient", *EXACT, *GRADIENT, "--out", out, "--in-process", "--no-progress"]
    assert plansweep.main(argv) == 130
    assert len(parts(os.path.join(out, "results", "searcher=gradient"))) == 4 and len(rows(out)) == 64
    monkeypatch.setattr(engine, "save_state", real)
    assert plansweep.main(["resume", out, "--in-process", "--no-progress"]) == 0
    assert_same_run(out, gradient_reference)


@pytest.mark.slow
def test_gradient_kill_9_then_resume_equals_uninterrupted(gradient_reference, tmp_path):
    out = str(tmp_path / "run")
    proc = start("search", "gradient", *EXACT, *GRADIENT, "--out", out, "--workers", "1", "--no-progress")
    n = kill_when(proc, os.path.join(out, "results", "searcher=gradient"), at_least=3)
    assert n < GRADIENT_BUDGET // 16, "killed after the last step"
    cli("resume", out, "--in-process", "--no-progress")  # the killed run was on Ray; the state is the same
    assert_same_run(out, gradient_reference)
    assert best(out) == best(gradient_reference)


def test_several_studies_side_by_side(tmp_path):
    out = str(tmp_path / "run")
    two = ["--model", "gpt3-175b,llama3-70b", "--cluster", "h100x1024", "--space", "exact"]
    proc = cli("search", "mcmc", *two, *MCMC, "--budget", "200", "--out", out, "--in-process", "--no-progress",
               "--top", "2")
    df = rows(out)
    counts = df.groupby("model").size().to_dict()
    assert counts == {"gpt3-175b": 200, "llama3-70b": 200}
    assert "best strategies for gpt3-175b on h100x1024" in proc.stdout
    assert "best strategies for llama3-70b on h100x1024" in proc.stdout
    info = json.load(open(os.path.join(out, "run.json")))
    assert [s["model"]["name"] for s in info["studies"]] == ["gpt3-175b", "llama3-70b"]
    assert np.all(df.groupby("model")["cluster"].nunique() == 1)
