"""One Parquet schema for every kind of run: parts of different runs read together, with no
options, by pandas, pyarrow, polars and duckdb; runs written before the placement lists were in
every part still open and resume."""

from __future__ import annotations

import glob
import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import cli
from sweep._results import DEVICE_COLUMNS, HETERO_STAGE_COLUMNS, LEGACY_SCHEMA, PRE_DEVICE_SCHEMA, result_schema
from tests.run_damage import main

QUIET = ["--in-process", "--no-progress", "--top", "0"]
# Small runs of every kind that writes parts (a second or two each in this process).
SMALL = ["--model", "gpt3-175b", "--cluster", "h100x1024", "--space", "fixed", "--tp", "1,2,4,8", "--pp",
         "1,2,4,8,16", "--micro-batch", "1,2,4", "--recompute", "none,selective,full", "--zero-stage", "0,1"]
# The mixed-cluster grid: pp 4 on two 64-GPU pools, tp 8, dp 2 or 4 per stage, each stage on either
# pool: (2 pools x 2 dp)^4 = 256 placements, of which those with at most 64 GPUs a pool are listed.
MIXED = ["sweep", "--model", "gpt3-175b", "--cluster", "a100x64+h100x64", "--pp", "4", "--dp", "2,4",
         "--microbatches", "32", "--recompute", "full", "--zero-stage", "1", "--keep", "all"]
RUNS = {
    "grid": ["sweep", *SMALL, "--keep", "all"],
    "mixed": MIXED,
    "mcmc-mixed": ["search", "mcmc", "--model", "gpt3-175b", "--cluster", "a100x64+h100x64", "--pp", "4,8",
                   "--budget", "48", "--chains", "8", "--seed", "1"],
    "tpe": ["search", "tpe", *SMALL, "--seed", "5", "--budget", "16", "--batch", "8", "--screen", "0"],
    "gradient": ["search", "gradient", *SMALL, "--seed", "2", "--budget", "32", "--samples", "8"],
    "moe": ["sweep", "--model", "mixtral-8x7b", "--cluster", "h100x64", "--tp", "1,2,4", "--pp", "1,2", "--ep", "1,2,8",
            "--microbatches", "8", "--global-batch", "256", "--recompute", "full", "--zero-stage", "1", "--keep",
            "all"],
    "mlp": ["sweep", "--model", "mlp-64x8192", "--cluster", "a100x16-flat", "--dp", "1,2,4", "--tp", "1,2,4", "--pp",
            "1,2", "--microbatches", "1,4", "--global-batch", "8192", "--schedule", "gpipe", "--recompute", "none",
            "--sequence-parallel", "false", "--zero-stage", "0", "--partial-gpus", "--keep", "all", "--framework",
            "generic"],
    "problems": ["sweep", *SMALL, "--cluster", "h100x1024,h100x64", "--framework", "megatron-core,deepspeed",
                 "--keep", "all"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("kinds")
    out = {}
    for kind, argv in RUNS.items():
        out[kind] = str(root / kind)
        assert cli.main([*argv, "--out", out[kind], *QUIET]) == 0, kind
    return out


def part_files(run: str) -> list[str]:
    return sorted(glob.glob(os.path.join(run, "results", "*", "*.parquet")))


def footer_rows(run: str) -> int:
    """The run's rows as its parts' footers count them."""
    return sum(pq.read_metadata(p).num_rows for p in part_files(run))


def test_every_kind_of_run_writes_parts_of_one_schema(runs):
    want = result_schema()
    for kind, run in runs.items():
        assert part_files(run), kind
        for p in part_files(run):
            got = pq.read_schema(p).remove_metadata()
            assert got.equals(want), (kind, p, [f for f in got if want.field(f.name).type != f.type])
    # The placement lists hold values in the mixed-cluster runs only, and there on every row.
    for kind, run in runs.items():
        t = pa.concat_tables([pq.read_table(p) for p in part_files(run)])
        listed = [t.column(c).null_count for c in HETERO_STAGE_COLUMNS]
        assert listed == ([0] * 6 if "mixed" in kind else [t.num_rows] * 6), kind


def globs(*runs: str) -> list[str]:
    return [os.path.join(r, "results", "**", "*.parquet") for r in runs]


PAIRS = [("grid", "mixed"), ("tpe", "mixed"), ("grid", "mcmc-mixed"), ("moe", "mlp"), ("problems", "gradient")]


def run_id(run: str) -> str:
    with open(os.path.join(run, "run.json")) as f:
        return json.load(f)["run_id"]


def check_pair(runs, a: str, b: str, ids: list, stage_pool: list, pp: list) -> None:
    """The rows read from runs ``a`` and ``b`` together (each row's run_id, stage_pool list and pp):
    every row of each (as its parts' footers count them); one pool name per stage on every row of
    a mixed-cluster run, null on every row of the others."""
    assert len(ids) == footer_rows(runs[a]) + footer_rows(runs[b])
    for kind in (a, b):
        mine = [(p, k) for i, p, k in zip(ids, stage_pool, pp, strict=True) if i == run_id(runs[kind])]
        assert len(mine) == footer_rows(runs[kind]) > 0, kind
        if "mixed" in kind:
            assert all(p is not None and len(p) == k and set(p) <= {"a100", "h100"} for p, k in mine), kind
        else:
            assert all(p is None for p, _ in mine), kind


def columns(table, names=("run_id", "stage_pool", "pp")) -> list[list]:
    return [[None if v is None else (list(v) if not isinstance(v, (str, int, np.integer)) else v)
             for v in table[c]] for c in names]


@pytest.mark.parametrize(("a", "b"), PAIRS)
def test_pandas_reads_two_runs_of_different_kinds(runs, a, b):
    import pandas as pd

    df = pd.concat([pd.read_parquet(os.path.join(runs[k], "results")) for k in (a, b)], ignore_index=True)
    check_pair(runs, a, b, *columns(df))
    searchers = {"mcmc-mixed": "mcmc", "tpe": "tpe", "gradient": "gradient"}
    assert set(df["searcher"].astype(str)) == {searchers.get(k, "grid") for k in (a, b)}


@pytest.mark.parametrize(("a", "b"), PAIRS)
def test_pyarrow_dataset_reads_two_runs_of_different_kinds(runs, a, b):
    union = ds.dataset([ds.dataset(os.path.join(runs[k], "results"), partitioning="hive") for k in (a, b)])
    t = union.to_table()
    assert t.schema.field("stage_dp").type == pa.list_(pa.int64())
    check_pair(runs, a, b, *(t.column(c).to_pylist() for c in ("run_id", "stage_pool", "pp")))


@pytest.mark.parametrize(("a", "b"), PAIRS)
def test_polars_scans_two_runs_of_different_kinds(runs, a, b):
    pl = pytest.importorskip("polars")
    df = pl.scan_parquet(globs(runs[a], runs[b])).collect()
    assert df.schema["stage_pool"] == pl.List(pl.String) and df.schema["stage_dp"] == pl.List(pl.Int64)
    check_pair(runs, a, b, *(df[c].to_list() for c in ("run_id", "stage_pool", "pp")))


@pytest.mark.parametrize(("a", "b"), PAIRS)
def test_duckdb_reads_two_runs_of_different_kinds(runs, a, b):
    duckdb = pytest.importorskip("duckdb")
    files = ", ".join(f"'{g}'" for g in globs(runs[a], runs[b]))
    rel = duckdb.sql(f"select * from read_parquet([{files}])")
    assert set(HETERO_STAGE_COLUMNS) <= set(rel.columns)
    rows = rel.select("run_id, stage_pool, pp").fetchall()
    check_pair(runs, a, b, *([r[j] for r in rows] for j in range(3)))


# ---- runs written before every part had the placement lists ---------------------------------------
def make_legacy(run: str, drop: tuple = (*HETERO_STAGE_COLUMNS, *DEVICE_COLUMNS)) -> None:
    """RUN as a plansweep of the previous layout wrote it: parts of a run on one pool without the six
    placement lists and the worst stage's device memory (LEGACY_SCHEMA, metadata kept; ``drop`` the device
    memory alone: PRE_DEVICE_SCHEMA), run.json without options.part_rows (a part per checkpoint or batch),
    TPE's marker without asks (a batch per part)."""
    for p in part_files(run):
        t = pq.read_table(p).drop_columns(list(drop))
        old = LEGACY_SCHEMA if HETERO_STAGE_COLUMNS[0] in drop else PRE_DEVICE_SCHEMA
        assert t.schema.remove_metadata().equals(old)
        pq.write_table(t, p, compression="zstd")
    path = os.path.join(run, "run.json")
    with open(path) as f:
        info = json.load(f)
    info["options"].pop("part_rows", None)
    with open(path, "w") as f:
        json.dump(info, f)
    marker = os.path.join(run, "state", "tpe-00.json")
    if os.path.exists(marker):
        with open(marker) as f:
            m = json.load(f)
        assert m.pop("asks") == m["batches"]
        with open(marker, "w") as f:
            json.dump(m, f)


def view_rows(run: str):
    """Every row as show and resume read the run (sweep's view), run_id and the device memory (null in the
    previous layout's parts) aside, in a fixed order."""
    from sweep._runview import open_run

    df = open_run(run).scan().to_pandas().drop(columns=["run_id", *DEVICE_COLUMNS])
    keys = ["iteration", "grid_index", "tp", "pp", "dp", "micro_batch", "schedule", "recompute", "zero_stage"]
    return df.sort_values(keys).reset_index(drop=True)


GRID = ["sweep", *SMALL, "--micro-batch", "1,2,3,4,6,8", "--zero-stage", "0,1,2,3", "--schedule",
        "gpipe,1f1b,interleaved", "--cp", "1,2,4", "--unit-rows", "10000", "--keep", "all"]  # 12,960 grid rows: 2 units


@pytest.mark.parametrize("drop", [(*HETERO_STAGE_COLUMNS, *DEVICE_COLUMNS), DEVICE_COLUMNS],
                         ids=["before-placements", "before-device-memory"])
def test_a_grid_run_of_the_previous_layout_shows_and_resumes(tmp_path, drop):
    ref, run = str(tmp_path / "reference"), str(tmp_path / "run")
    assert cli.main([*GRID, "--out", ref, *QUIET]) == 0
    shutil.copytree(ref, run)
    make_legacy(run, drop)
    first, second = part_files(run)
    os.unlink(second)  # killed before its second unit
    shown = main("show", run, "--top", "1")
    assert shown.code == 0 and shown.err == "", shown.err
    assert f"{pq.read_metadata(first).num_rows:,} rows" in shown.out, shown.out
    r = main("resume", run, *QUIET)
    assert r.code == 0, r.err
    old = LEGACY_SCHEMA if HETERO_STAGE_COLUMNS[0] in drop else PRE_DEVICE_SCHEMA
    assert pq.read_schema(first).remove_metadata().equals(old)  # left as it was
    assert pq.read_schema(second).remove_metadata().equals(result_schema())
    rows = view_rows(run)
    assert len(rows) == footer_rows(ref) and rows["stage_pool"].isna().all() and rows["stage_dp"].isna().all()
    assert rows.equals(view_rows(ref))
    assert main("show", run, "--top", "3").out == main("show", ref, "--top", "3").out


@pytest.mark.parametrize("kind", ["mcmc", "tpe"])
def test_a_search_run_of_the_previous_layout_resumes_a_part_per_checkpoint(tmp_path, monkeypatch, kind):
    # Stopped at its third checkpoint (MCMC) or second marker (TPE) with a part per checkpoint or
    # batch, rewritten as the previous layout wrote it, resumed: the rows of the run not stopped,
    # still a part per checkpoint or batch.
    import sweep._search_engine as engine
    from tests.run_damage import RUNS as DAMAGE_RUNS

    ref, run = str(tmp_path / "reference"), str(tmp_path / "run")
    args = DAMAGE_RUNS[kind]  # with --part-rows 1
    assert main(*args, "--out", ref, *QUIET, "--top", "0").code == 0
    name = "save_state" if kind == "mcmc" else "write_json_atomic"
    real, calls = getattr(engine, name), []

    def stop(*a):
        calls.append(a)
        if len(calls) == (3 if kind == "mcmc" else 2):
            raise KeyboardInterrupt
        real(*a)

    monkeypatch.setattr(engine, name, stop)
    assert main(*args, "--out", run, *QUIET).code == 130
    monkeypatch.setattr(engine, name, real)
    make_legacy(run)
    r = main("resume", run, *QUIET, "--top", "0")
    assert r.code == 0, r.err
    assert view_rows(run).equals(view_rows(ref))
    assert [os.path.basename(p) for p in part_files(run)] == [os.path.basename(p) for p in part_files(ref)]
