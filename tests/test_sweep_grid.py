"""Grid sweeps into a run directory: the dataset, kill -9 and resume, a killed worker, two nodes."""

from __future__ import annotations

import json
import os
import signal

import numpy as np
import pyarrow.dataset as ds
import pytest

from search import Space
from sweep._rundir import cluster_from_dict, model_from_dict
from tests.kill_points import KILLED, kill_group_when, run_killed
from tests.sweep_helpers import (
    SMALL_SPACE,
    cli,
    local_ray_cluster,
    own_ray_processes,
    parts,
    rows,
    start,
    workers_import_this_checkout,
)

UNITS = 24  # SMALL_SPACE: 230,400 grid rows in units of 10^4 rows (the last one 400)
COMPARED = ["grid_index", "dp", "tp", "pp", "cp", "micro_batch", "schedule", "vpp", "recompute",
            "sequence_parallel", "zero_stage", "step_time_s", "tokens_per_s", "mem_total_bytes", "feasible",
            "reason", "iteration"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted sweep of SMALL_SPACE, in one process (no Ray), every row kept."""
    out = str(tmp_path_factory.mktemp("ref") / "run")
    cli("sweep", *SMALL_SPACE, "--out", out, "--unit-rows", "1e4", "--keep", "all", "--in-process", "--no-progress")
    return out


def _sorted(df):
    return df[COMPARED].sort_values("grid_index").reset_index(drop=True)


def assert_same_rows(run_dir: str, reference: str) -> None:
    got, want = rows(run_dir), rows(reference)
    assert got["grid_index"].is_unique, "duplicated rows"
    assert len(got) == len(want)
    assert np.array_equal(np.sort(got["grid_index"].to_numpy()), np.sort(want["grid_index"].to_numpy()))
    a, b = _sorted(got), _sorted(want)
    assert a.equals(b)


def test_dataset_opens_with_nothing_but_the_path(reference):
    info = json.load(open(os.path.join(reference, "run.json")))
    study = info["studies"][0]
    model, cluster = model_from_dict(study["model"]), cluster_from_dict(study["cluster"])
    space = Space.from_json(study["space"], model, cluster)
    n_valid = sum(len(space.rows(lo, min(lo + 10**5, space.size))[0]) for lo in range(0, space.size, 10**5))
    df = rows(reference)  # pandas.read_parquet(RUN_DIR/results)
    assert len(df) == n_valid and set(df["searcher"].astype(str)) == {"grid"}
    assert df["schedule"].isin(["gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2"]).all()
    assert (df["dp"] * df["tp"] * df["pp"] * df["cp"] == 1024).all()  # every GPU used
    # Infeasible rows are kept with a reason and infinite step time; feasible ones fit in HBM.
    assert (np.isinf(df.loc[~df["feasible"], "step_time_s"])).all()
    assert (df.loc[df["feasible"], "mem_total_bytes"] <= cluster.gpu.hbm_bytes).all()
    assert (df.loc[df["feasible"], "reason"] == "ok").all()
    dataset = ds.dataset(os.path.join(reference, "results"))  # pyarrow, nothing but the path
    assert dataset.count_rows() == n_valid
    meta = dataset.schema.metadata
    assert json.loads(meta[b"plansweep.model"])["name"] == "gpt3-175b"
    assert json.loads(meta[b"plansweep.cluster"])["name"] == "h100x1024"
    assert json.loads(meta[b"plansweep.versions"])["cost_model"] == info["versions"]["cost_model"]
    assert len(parts(os.path.join(reference, "results", "searcher=grid"))) == UNITS


def test_keep_best_k_keeps_each_units_best(reference, tmp_path):
    out = str(tmp_path / "best")
    cli("sweep", *SMALL_SPACE, "--out", out, "--unit-rows", "1e4", "--keep", "best:3", "--in-process",
        "--no-progress")
    got = rows(out)
    full = rows(reference)
    want = (full[full["feasible"]].sort_values(["iteration", "tokens_per_s", "grid_index"],
                                                ascending=[True, False, True]).groupby("iteration").head(3))
    assert sorted(got["grid_index"]) == sorted(want["grid_index"])


def test_bad_input_is_one_line_exit_2(tmp_path):
    for args, flag in ((["--unit-rows", "5"], "--unit-rows"), (["--keep", "most"], "--keep")):
        proc = cli("sweep", *SMALL_SPACE, "--out", str(tmp_path / "x"), *args, "--in-process", check=False)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and flag in proc.stderr
        assert not os.path.exists(tmp_path / "x")  # nothing written
    proc = cli("resume", str(tmp_path / "nothing"), check=False)
    assert proc.returncode == 2 and "run.json" in proc.stderr
    # A global batch of 7 on all 1024 GPUs: dp x micro-batch must divide 7, so dp = 1, and tp x pp
    # cannot reach 1024 (tp <= 8, pp <= 96 layers): no valid strategy, refused before writing.
    proc = cli("sweep", "--model", "gpt3-175b", "--cluster", "h100x1024", "--global-batch", "7", "--all-gpus",
               "--out", str(tmp_path / "y"), "--in-process", check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "space options" in proc.stderr
    assert "global batch 7" in proc.stderr and not os.path.exists(tmp_path / "y")


def test_a_run_json_this_version_cannot_read_is_refused(reference, tmp_path):
    info = json.load(open(os.path.join(reference, "run.json")))
    info["studies"][0]["space"]["dims"][0]["name"] = "warp_factor"  # a dimension from some other version
    os.makedirs(tmp_path / "run")
    json.dump(info, open(tmp_path / "run" / "run.json", "w"))
    proc = cli("resume", str(tmp_path / "run"), "--in-process", check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "a run.json whose studies this plansweep can read" in proc.stderr
    assert sorted(os.listdir(tmp_path / "run")) == ["run.json", "state"]  # no results written


@pytest.mark.slow
def test_three_kills_then_resume(reference, tmp_path):
    # Killed on Ray (its process group SIGKILLed, its embedded Ray gone within a second) once 6
    # of the 24 units are written, then twice more in one process, before its 7th part (about 1/2
    # and 3/4 of the units); each resume computes only the units whose part is missing.
    out = str(tmp_path / "run")
    directory = os.path.join(out, "results", "searcher=grid")
    proc = start("sweep", *SMALL_SPACE, "--out", out, "--unit-rows", "1e4", "--keep", "all", "--workers", "1",
                 "--max-in-flight", "1", "--no-progress")
    written = [kill_group_when(proc, directory, at_least=6)]
    for _ in range(2):
        assert run_killed("grid-part", 7, "resume", out, "--in-process", "--no-progress") == KILLED
        written.append(len(parts(directory)))
    assert 6 <= written[0] and written[1] == written[0] + 6 and written[2] == written[1] + 6 < UNITS, written
    cli("resume", out, "--in-process", "--no-progress")
    assert_same_rows(out, reference)
    # Resuming a finished run changes nothing.
    cli("resume", out, "--in-process", "--no-progress")
    assert_same_rows(out, reference)


@pytest.fixture(scope="module")
def two_nodes():
    """One Ray cluster of two raylets (a CPU each) on this machine, started once for the module's
    tests that neither stop its head nor leave anything on it: a killed worker's and the two-node
    sweep's (a start-up of about 10 s each, saved)."""
    yield from local_ray_cluster((1, 1))


@pytest.mark.slow
def test_a_killed_worker_loses_nothing(reference, two_nodes, tmp_path, monkeypatch):
    workers_import_this_checkout(monkeypatch)
    from cli import build_parser
    from cli._cmd_sweep import grid_request
    from sweep._grid import run_grid
    from sweep._ray import init_ray, shutdown_ray
    from sweep._rundir import RunDir

    killed = []

    def kill_one(_summary) -> None:  # after a unit completes, SIGKILL a worker busy with another
        if not killed:
            busy = own_ray_processes("ray::evaluate_unit")
            if busy:
                os.kill(busy[0], signal.SIGKILL)
                killed.append(busy[0])

    out = str(tmp_path / "run")
    args = build_parser().parse_args(["sweep", *SMALL_SPACE, "--out", out, "--unit-rows", "1e4", "--keep", "all"])
    rd, _ = RunDir.create_or_resume(out, grid_request(args))
    saved = dict(os.environ)  # ray.init sets variables (RAY_AUTH_MODE...) that would leak into later tests
    init_ray(workers=None, address=two_nodes.address)  # two workers, one a raylet: a worker of either may die
    try:
        with rd:
            run_grid(rd, in_process=False, max_in_flight=4, progress=False, on_unit=kill_one)
    finally:
        shutdown_ray()
        os.environ.clear()
        os.environ.update(saved)
    assert killed, "no busy worker was found to kill"
    assert_same_rows(out, reference)


@pytest.mark.slow
def test_two_node_cluster_on_one_machine(reference, two_nodes, tmp_path):
    out = str(tmp_path / "run")
    proc = cli("sweep", *SMALL_SPACE, "--out", out, "--unit-rows", "1e4", "--keep", "all",
               "--address", two_nodes.address, "--no-progress")
    assert f"Ray cluster at {two_nodes.address} (2 CPUs)" in proc.stderr
    assert_same_rows(out, reference)


def test_two_studies_one_run_progress_and_summary(tmp_path):
    out = str(tmp_path / "run")
    proc = cli("sweep", "--model", "gpt3-175b,llama3-70b", "--cluster", "h100x1024", "--pp", "8,16",
               "--unit-rows", "1e4", "--out", out, "--in-process", "--top", "3")  # 5 or 6 units a study
    df = rows(out)
    names = parts(os.path.join(out, "results", "searcher=grid"))
    info = json.load(open(os.path.join(out, "run.json")))
    for i, study in enumerate(info["studies"]):
        model, cluster = model_from_dict(study["model"]), cluster_from_dict(study["cluster"])
        space = Space.from_json(study["space"], model, cluster)
        units = -(-space.size // 10_000)
        assert [n for n in names if n.startswith(f"part-{i:02d}-")] == [f"part-{i:02d}-{u:06d}.parquet"
                                                                        for u in range(units)]
        mine = df[df["model"] == model.name]
        assert mine["feasible"].all() and len(mine) > 0  # --keep feasible (the default)
        # The printed best is the study's best row.
        assert f"best strategies for {model.name} on h100x1024" in proc.stdout
        assert f"{mine['tokens_per_s'].max():,.0f}" in proc.stdout
    # The progress bar (stderr): units done of all, rows/s and the best so far.
    total = sum(n.startswith("part-") for n in names)
    assert f"{total}/{total}" in proc.stderr and "rows/s" in proc.stderr and "best" in proc.stderr
    assert f"results: {os.path.join(out, 'results')}" in proc.stdout
