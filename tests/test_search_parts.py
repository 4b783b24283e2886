"""A search's rows written a part at a time, each part with its checkpoint (--part-rows): parts of
at least that many rows, whole batches; kill -9 in the middle of a part, or between a part and its
checkpoint, then resume: the same parts and rows as the run that was not killed."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.kill_points import KILLED, run_killed
from tests.run_damage import SMALL, main, parts, truncate

QUIET = ["--in-process", "--no-progress"]
# At most one batch (MCMC: a call of checkpoint_every steps x chains) more than a part's rows, per part.
BATCH = {"mcmc": 4 * 3, "tpe": 8, "gradient": 8}
PART_ROWS = {"mcmc": 30, "tpe": 16, "gradient": 16}
BUDGET = {"mcmc": 120, "tpe": 48, "gradient": 48}
RUNS = {
    "mcmc": ["search", "mcmc", *SMALL, "--seed", "3", "--chains", "4", "--checkpoint-every", "3", "--screen", "0"],
    "tpe": ["search", "tpe", *SMALL, "--seed", "5", "--batch", "8", "--screen", "0"],
    "gradient": ["search", "gradient", *SMALL, "--seed", "2", "--samples", "8", "--screen", "0", "--polish", "0"],
}
KINDS = tuple(RUNS)


def argv(kind: str, out: str) -> list[str]:
    return [*RUNS[kind], "--budget", str(BUDGET[kind]), "--part-rows", str(PART_ROWS[kind]), "--out", out, *QUIET,
            "--top", "0"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("parts")
    out = {}
    for kind in KINDS:
        out[kind] = str(root / kind)
        r = main(*argv(kind, out[kind]))
        assert r.code == 0, r.err
    return out


def part_tables(run: str, kind: str) -> list:
    """Each part's rows (run_id aside: each run has its own), in part order."""
    return [pq.read_table(p).drop_columns(["run_id"]) for p in parts(run, kind)]


def same_parts(run: str, reference: str, kind: str) -> bool:
    """The same part files holding the same rows, in the same order."""
    a, b = part_tables(run, kind), part_tables(reference, kind)
    return [os.path.basename(p) for p in parts(run, kind)] == [os.path.basename(p) for p in parts(reference, kind)] \
        and len(a) == len(b) and all(x.equals(y) for x, y in zip(a, b, strict=True))


def progress(run: str, kind: str) -> dict:
    """The search's state as written: parts, evaluations and (TPE, gradient) batches in them."""
    state = os.path.join(run, "state")
    if kind == "tpe":
        with open(os.path.join(state, "tpe-00.json")) as f:
            marker = json.load(f)
        return {"parts": marker["batches"], "evaluations": marker["evaluations"], "asks": marker["asks"]}
    with np.load(os.path.join(state, f"{kind}-00.npz")) as z:
        return {"parts": int(z["e.checkpoints" if kind == "mcmc" else "e.steps"]),
                "evaluations": int(z["e.evaluations"]), **({"asks": int(z["e.asks"])} if kind != "mcmc" else {})}


@pytest.mark.parametrize("kind", KINDS)
def test_parts_hold_at_least_part_rows_of_whole_batches(reference, kind):
    tables = part_tables(reference[kind], kind)
    sizes = [t.num_rows for t in tables]
    done = progress(reference[kind], kind)
    assert done["parts"] == len(tables) >= 3 and done["evaluations"] == sum(sizes), (done, sizes)
    assert BUDGET[kind] - BATCH[kind] < sum(sizes) <= BUDGET[kind]
    # Every part but the last: at least --part-rows rows, and less than one batch more.
    assert all(PART_ROWS[kind] <= n < PART_ROWS[kind] + BATCH[kind] for n in sizes[:-1]), sizes
    # Whole batches: each part's iterations (steps, batches) follow the previous part's, none split.
    its = [np.unique(t.column("iteration").to_numpy()) for t in tables]
    assert all(a.max() < b.min() for a, b in zip(its, its[1:], strict=False)), its
    assert all(len(i) > 1 for i in its[:-1])  # parts of several batches
    if kind != "mcmc":  # the batches asked, numbered from 0
        assert np.array_equal(np.concatenate(its), np.arange(done["asks"]))
    records = os.listdir(os.path.join(reference[kind], "state", "asked", kind))
    assert sorted(records) == [os.path.basename(p).replace(".parquet", ".npz") for p in parts(reference[kind], kind)]


# Two kills -9 per searcher, each resumed: between a part and its checkpoint, and in the middle of
# a part's batches (its rows pending: lost, and evaluated again on resume).
KILLS = {
    "mcmc": [("search-state", 2), ("search-part", 2)],
    "tpe": [("tpe-state", 2), ("journal-half-line", 100)],
    "gradient": [("search-state", 2), ("search-part", 2)],
}


@pytest.mark.parametrize("kind", KINDS)
def test_killed_in_a_part_or_before_its_checkpoint_resumes_as_uninterrupted(reference, tmp_path, kind):
    out = str(tmp_path / "run")
    (point, n), (point2, n2) = KILLS[kind]
    assert run_killed(point, n, *argv(kind, out)) == KILLED
    assert run_killed(point2, n2, "resume", out, *QUIET) == KILLED
    assert len(parts(out, kind)) < len(parts(reference[kind], kind))
    r = main("resume", out, *QUIET, "--top", "0")
    assert r.code == 0, r.err
    assert same_parts(out, reference[kind], kind)


def test_a_damaged_part_of_several_steps_is_rebuilt_from_its_record(reference, tmp_path):
    run = str(tmp_path / "mcmc")
    shutil.copytree(reference["mcmc"], run)
    victim = parts(run, "mcmc")[1]
    truncate(victim)
    r = main("resume", run, *QUIET, "--top", "0")
    assert r.code == 0, r.err
    assert os.path.exists(os.path.join(run, "quarantine", os.path.relpath(victim, run)))
    assert same_parts(run, reference["mcmc"], "mcmc")


def test_pending_rows_are_written_once_they_are_old_enough(reference, tmp_path, monkeypatch):
    # Rows pending for PART_FLUSH_S are written whatever their number: with no wait, a part per
    # step, each holding the rows of the run that waited for --part-rows.
    import sweep._search_engine as engine

    monkeypatch.setattr(engine, "PART_FLUSH_S", 0.0)
    out = str(tmp_path / "run")
    assert main(*argv("gradient", out)).code == 0
    tables = part_tables(out, "gradient")
    assert len(tables) == progress(reference["gradient"], "gradient")["asks"]
    assert [t.column("iteration").unique().to_pylist() for t in tables] == [[k] for k in range(len(tables))]
    merged = part_tables(reference["gradient"], "gradient")
    assert pa.concat_tables(tables).equals(pa.concat_tables(merged))


def test_part_rows_in_run_json_is_checked(reference, tmp_path):
    run = str(tmp_path / "run")
    shutil.copytree(reference["gradient"], run)
    path = os.path.join(run, "run.json")
    info = json.load(open(path))
    info["options"]["part_rows"] = 0
    json.dump(info, open(path, "w"))
    r = main("resume", run, *QUIET)
    assert r.code == 2 and len(r.lines) == 1 and path in r.err and "part_rows" in r.err, r.err


@pytest.mark.slow
def test_mcmc_of_100k_evaluations_writes_at_most_20_parts(tmp_path):
    # About 15 s of CPU in this process. 4,096 chains, a step per call (at most 4,096 rows), parts of
    # at least 10,000 rows (the default): three calls a part.
    out = str(tmp_path / "run")
    r = main("search", "mcmc", "--space", "partition", "--chains", "4096", "--checkpoint-every", "1", "--budget",
             "100000", "--seed", "1", "--out", out, *QUIET, "--top", "0")
    assert r.code == 0, r.err
    sizes = [pq.read_metadata(p).num_rows for p in parts(out, "mcmc")]
    assert sum(sizes) == 100_000 and len(sizes) <= 20, sizes
    assert all(10_000 <= n < 10_000 + 4096 for n in sizes[:-1]), sizes
