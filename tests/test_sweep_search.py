"""MCMC, TPE and gradient searches as runs: checkpoints, kill -9 and resume, a killed actor, several
studies."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time

import numpy as np
import pytest

from tests.kill_points import KILLED, kill_group_when, run_killed
from tests.sweep_helpers import cli, own_ray_processes, parts, rows, start, workers_import_this_checkout

EXACT = ["--model", "gpt3-175b", "--cluster", "h100x1024", "--space", "exact"]
# --part-rows 1: a part per checkpoint (or TPE batch, or gradient step), as these tests count them.
MCMC = ["--seed", "3", "--budget", "800", "--chains", "16", "--checkpoint-every", "5", "--part-rows", "1"]
MCMC_BUDGET = 800
# A 360-point space where every point is valid (TPE spends no trials outside it).
SMALL = ["--model", "gpt3-175b", "--cluster", "h100x1024", "--space", "fixed", "--tp", "1,2,4,8", "--pp",
         "1,2,4,8,16", "--micro-batch", "1,2,4", "--recompute", "none,selective,full", "--zero-stage", "0,1"]
# screen 0: walk the whole budget (38 points fit)
TPE = ["--seed", "5", "--budget", "64", "--batch", "8", "--screen", "0", "--part-rows", "1"]
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


def three_kills(out: str, searcher: str, args: list[str], total: int, first: int,
                later: list[tuple[str, int]]) -> list[int]:
    """Kill -9 the search ``args`` three times, each kill at a later point, then resume it to the
    end: first on Ray (--workers 1), its process group SIGKILLed once ``first`` parts are written
    (its embedded Ray gone within a second), then two resumes in one process, each SIGKILLed at a
    chosen call (``later``: tests.kill_points POINT, N). Returns the parts written at each kill."""
    directory = os.path.join(out, "results", f"searcher={searcher}")
    proc = start("search", searcher, *args, "--out", out, "--workers", "1", "--no-progress")
    written = [kill_group_when(proc, directory, at_least=first)]
    for point, n in later:
        assert run_killed(point, n, "resume", out, "--in-process", "--no-progress") == KILLED, f"{point} {n}: no kill"
        written.append(len(parts(directory)))
    assert written == sorted(written) and written[-1] < total, f"parts at the kills {written} of {total}"
    cli("resume", out, "--in-process", "--no-progress")
    return written


@pytest.mark.slow
def test_mcmc_three_kills_then_resume_equals_uninterrupted(mcmc_reference, tmp_path):
    # 11 parts of 5 steps: killed on Ray at 3 parts, then at the 3rd state of a resumed run
    # (its part written, its state not) and before the 3rd part of the next.
    out = str(tmp_path / "run")
    total = len(parts(os.path.join(mcmc_reference, "results", "searcher=mcmc")))
    written = three_kills(out, "mcmc", [*EXACT, *MCMC], total, first=3,
                          later=[("search-state", 3), ("search-part", 3)])
    assert written[0] >= 3 and written[1] >= written[0] + 2 and written[2] >= written[1] + 1, written
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

    # Parts of two or more calls (80 rows each): the actor may die with a call's rows pending,
    # which the new actor evaluates again.
    args = build_parser().parse_args(["search", "mcmc", *EXACT, *MCMC, "--part-rows", "100", "--out", out])
    RunDir.create_or_resume(out, search_request(args, "mcmc"))[0].close()
    saved = dict(os.environ)
    init_ray(workers=1, address=None)
    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        with RunDir.open(out) as rd:
            run_search(rd, in_process=False, progress=False)
        # The embedded Ray's workers die with their raylet, which dies with this driver (the hook of
        # sweep._ray.end_with_raylet); the hook is named in the raylet's environment, not this one's.
        import ray
        from ray._private import ray_constants

        from tests.kill_points import death_signal

        assert ray.get(ray.remote(death_signal).remote()) == signal.SIGKILL
        assert ray_constants.WORKER_PROCESS_SETUP_HOOK_ENV_VAR not in os.environ
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


def _journal_trials(run_dir: str) -> dict[str, list[tuple]]:
    """Every study in RUN_DIR/state/tpe-00.journal: its trials' numbers, states, parameters,
    values, user and system attributes (the sampler's and the constraints), in order."""
    import optuna

    from search._tpe import FlockJournalLock

    path = os.path.join(run_dir, "state", "tpe-00.journal")
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(path, lock_obj=FlockJournalLock(path)))
    return {name: [(t.number, t.state.name, t.params, t.values, t.user_attrs, t.system_attrs)
                   for t in optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)]
            for name in optuna.get_all_study_names(storage)}


@pytest.mark.slow
def test_tpe_three_kills_then_resume_equals_uninterrupted(tpe_reference, tmp_path):
    # 8 batches: killed on Ray at 2 parts, then half-way through a journal line (the 350th line a
    # resumed run writes: about two batches on, in the middle of one) and at the 2nd state of the
    # next resume (its part written and told, its state not). Each resume cuts the journal back to
    # the last batch its state records and draws the batch the kill cut short again.
    out = str(tmp_path / "run")
    marker, journal = (os.path.join(out, "state", f"tpe-00.{ext}") for ext in ("json", "journal"))
    written = three_kills(out, "tpe", [*SMALL, *TPE], TPE_BUDGET // 8, first=2,
                          later=[("journal-half-line", 350), ("tpe-state", 2)])
    assert written[1] > written[0] and written[2] > written[1], written
    assert_same_run(out, tpe_reference)
    df = rows(out)
    # batches of at most 8 (a climb's batch is the peaks' neighbours left, maybe fewer), numbered from 0
    iterations = sorted(df["iteration"].unique())
    assert len(df) == TPE_BUDGET and iterations == list(range(len(iterations))) and len(iterations) >= TPE_BUDGET // 8
    assert df.groupby("iteration").size().max() <= 8
    # The studies themselves are the uninterrupted run's: the same trials, parameters, values, states.
    trials, want = _journal_trials(out), _journal_trials(tpe_reference)
    assert list(trials) == list(want) and trials == want
    assert not any(t[1] == "RUNNING" for ts in trials.values() for t in ts)
    info = json.load(open(marker))
    assert info["batches"] == len(iterations) and info["evaluations"] == TPE_BUDGET
    assert info["journal_bytes"] == os.path.getsize(journal)


def test_tpe_a_journal_lock_left_by_a_kill_is_taken_at_once(tpe_reference, tmp_path, monkeypatch):
    # A run killed while it holds the journal's lock (a line written, the lock not released), with
    # a lock file of Optuna's own lying beside the journal as well: the resumed run waits for no
    # lock (Optuna's file locks wait 30 s for a lock file a killed holder left) and ends as the
    # uninterrupted run.
    import optuna.storages.journal._file as journal_file

    import cli as plansweep

    out = str(tmp_path / "run")
    args = ["search", "tpe", *SMALL, *TPE, "--out", out, "--in-process", "--no-progress"]
    assert run_killed("journal-lock-held", 600, *args) == KILLED
    journal = os.path.join(out, "state", "tpe-00.journal")
    os.symlink(journal, journal + ".lock")  # what JournalFileSymlinkLock leaves when its holder is killed
    waited = []
    real = journal_file.get_lock_file

    @contextlib.contextmanager
    def timed(lock):
        t0 = time.monotonic()
        with real(lock):
            waited.append(time.monotonic() - t0)
            yield

    monkeypatch.setattr(journal_file, "get_lock_file", timed)
    assert plansweep.main(["resume", out, "--in-process", "--no-progress"]) == 0
    assert len(waited) > 100 and sum(waited) < 1.0, f"{len(waited)} locks taken in {sum(waited):.2f} s"
    assert not os.path.lexists(journal + ".lock")
    assert_same_run(out, tpe_reference)


GRADIENT = ["--seed", "2", "--budget", "160", "--samples", "16", "--polish", "0.5", "--part-rows", "1"]
GRADIENT_BUDGET = 160
# The start sample first (0.2 x 160 = 32 points, one ask), then the rest of the first half in gradient
# steps of 16 new points (48 / 16 = 3), the last half in the local phase's batches of 8
# (search._gradient.POLISH_BATCH: 80 / 8 = 10): a part per step.
GRADIENT_STEPS = 1 + 48 // 16 + 80 // 8


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
    assert steps == GRADIENT_STEPS
    assert len(parts(os.path.join(gradient_reference, "results", "searcher=gradient"))) == steps  # a part per step
    with np.load(os.path.join(gradient_reference, "state", "gradient-00.npz"), allow_pickle=False) as z:
        assert int(z["e.steps"]) == steps == int(z["s.step"]) and int(z["e.evaluations"]) == GRADIENT_BUDGET
    out = cli("resume", gradient_reference, "--in-process", "--no-progress", "--top", "1").stdout
    assert f"{best(gradient_reference)[-1]:,.0f}" in out
    assert len(rows(gradient_reference)) == GRADIENT_BUDGET


def test_gradient_interrupted_between_part_and_state_resumes_as_uninterrupted(gradient_reference, tmp_path,
                                                                              monkeypatch):
    # The run stops after writing part 3 (the start sample's 32 points, then three steps of 16) and before
    # its state: the resumed run asks step 3 again and writes part 3 again under the same name; the rows
    # equal the uninterrupted run's.
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
    assert len(parts(os.path.join(out, "results", "searcher=gradient"))) == 4 and len(rows(out)) == 32 + 3 * 16
    monkeypatch.setattr(engine, "save_state", real)
    assert plansweep.main(["resume", out, "--in-process", "--no-progress"]) == 0
    assert_same_run(out, gradient_reference)


@pytest.mark.slow
def test_gradient_three_kills_then_resume_equals_uninterrupted(gradient_reference, tmp_path):
    # 15 steps: killed on Ray at 3 parts, then at the 3rd state of a resumed run (its part written,
    # its state not: the next resume asks that step again) and before the 3rd part of the next.
    out = str(tmp_path / "run")
    written = three_kills(out, "gradient", [*EXACT, *GRADIENT], GRADIENT_STEPS, first=3,
                          later=[("search-state", 3), ("search-part", 3)])
    assert written[1] >= written[0] + 2 and written[2] >= written[1] + 1, written
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
