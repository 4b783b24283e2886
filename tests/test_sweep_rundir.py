"""Run directories (lock, versions, identity), keep policies and the Parquet part format."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

from costmodel import InputError, StrategyTable, cluster_preset, evaluate, model_preset
from sweep._keep import Keep
from sweep._results import DEVICE_COLUMNS, HETERO_STAGE_COLUMNS, LEGACY_SCHEMA, result_schema, to_arrow, write_part
from sweep._rundir import RunDir, cluster_from_dict, cluster_to_dict, model_from_dict, model_to_dict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
def _study() -> dict:
    """One study of a small space, as run.json records it."""
    from search import Space
    from sweep._rundir import study_request

    model, cluster = model_preset("llama3-8b"), cluster_preset("h100x8")
    return study_request(model, cluster, Space.from_options(model, cluster, global_batch=64, base="fixed", tp=[1, 2]))


REQUEST = {"command": "sweep", "searcher": "grid", "seed": None, "options": {"unit_rows": 10_000, "keep": "all"},
           "studies": [_study()]}


def test_specs_round_trip_through_plain_dicts():
    model, cluster = model_preset("llama3-70b"), cluster_preset("dgx-a100-1024")
    m2 = model_from_dict(json.loads(json.dumps(model_to_dict(model))))
    c2 = cluster_from_dict(json.loads(json.dumps(cluster_to_dict(cluster))))
    assert m2 == model and c2 == cluster


def test_second_process_is_refused_while_a_run_holds_the_directory(tmp_path):
    out = str(tmp_path / "run")
    rd, resumed = RunDir.create_or_resume(out, REQUEST)
    assert not resumed
    with rd:
        with pytest.raises(InputError, match=f"in use by process {os.getpid()}"):
            RunDir.open(out)
        env = dict(os.environ, PYTHONPATH=ROOT)
        proc = subprocess.run([sys.executable, "-m", "cli", "resume", out], capture_output=True, text=True,
                              env=env, timeout=60)
        assert proc.returncode == 2
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and f"in use by process {os.getpid()}" in lines[0], proc.stderr
    # Released at close: the same directory opens again and is the same run.
    with RunDir.open(out) as again:
        assert again.run_id == rd.run_id


@pytest.mark.parametrize(("key", "value", "why"), [
    ("cost_model", "0-old", "cost model version '0-old'"),
    ("run_format", 0, "run format 0"),
    ("plansweep", "9.0.0", "plansweep '9.0.0'"),
])
def test_incompatible_versions_are_refused_not_misread(tmp_path, key, value, why):
    out = str(tmp_path / "run")
    RunDir.create_or_resume(out, REQUEST)[0].close()
    path = os.path.join(out, "run.json")
    info = json.load(open(path))
    info["versions"][key] = value
    json.dump(info, open(path, "w"))
    with pytest.raises(InputError, match=why):
        RunDir.open(out)


def test_a_different_run_or_a_foreign_directory_is_refused(tmp_path):
    out = str(tmp_path / "run")
    RunDir.create_or_resume(out, REQUEST)[0].close()
    other = {**REQUEST, "options": {"unit_rows": 20_000, "keep": "all"}}
    with pytest.raises(InputError, match="holds a different run"):
        RunDir.create_or_resume(out, other)
    rd, resumed = RunDir.create_or_resume(out, dict(REQUEST))
    assert resumed
    rd.close()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="not empty and holds no run.json"):
        RunDir.create_or_resume(str(foreign), REQUEST)
    assert os.listdir(foreign) == ["notes.txt"]  # nothing written there


def test_keep_policies_by_hand():
    metrics = {"feasible": np.array([True, False, True, True, False]),
               "tokens_per_s": np.array([5.0, 0.0, 9.0, 7.0, 0.0])}
    assert Keep.parse("all").select(metrics).tolist() == [0, 1, 2, 3, 4]
    assert Keep.parse("feasible").select(metrics).tolist() == [0, 2, 3]
    assert Keep.parse("best:2").select(metrics).tolist() == [2, 3]  # 9 and 7, in grid order
    assert Keep.parse("best:9").select(metrics).tolist() == [0, 2, 3]
    for bad in ("best:0", "best:x", "some"):
        with pytest.raises(InputError, match="--keep"):
            Keep.parse(bad)


def test_part_holds_readable_strategy_and_metric_columns(tmp_path):
    model, cluster = model_preset("gpt3-175b"), cluster_preset("h100x1024")
    table = StrategyTable.from_columns(
        dp=[8, 8], tp=8, pp=[16, 2], global_batch=1536, schedule=["interleaved", "zb-h1"], vpp=[2, 1],
        stage_layers=np.array([[6] * 16, [40, 56] + [0] * 14]),
        stage_recompute=np.array([["full"] * 16, ["full", "none"] + ["none"] * 14]))
    metrics = evaluate(model, cluster, table)
    meta = {b"plansweep.model": b"{}", b"plansweep.cluster": b"{}", b"plansweep.versions": b"{}"}
    arrow = to_arrow(table, metrics, run_id="r1", model=model.name, cluster=cluster.name, iteration=7,
                     grid_index=np.array([11, 12]), metadata=meta)
    path = str(tmp_path / "searcher=grid" / "part-00-000007.parquet")
    write_part(arrow, path)
    write_part(arrow, path)  # twice: still one file, no temporaries left
    assert os.listdir(tmp_path / "searcher=grid") == ["part-00-000007.parquet"]
    back = pq.read_table(path)
    want = result_schema(meta)
    assert back.schema.names == want.names and back.schema.metadata == want.metadata
    assert [str(f.type).replace("element", "item") for f in back.schema] == [str(f.type) for f in want]
    rows = back.to_pylist()
    assert rows[0]["schedule"] == "interleaved" and rows[1]["schedule"] == "zb-h1"
    # Uniform stages read as null (and the uniform recompute choice lands in `recompute`).
    assert rows[0]["stage_layers"] is None and rows[0]["stage_recompute"] is None
    assert rows[0]["recompute"] == "full"
    assert rows[1]["stage_layers"] == [40, 56] and rows[1]["stage_recompute"] == ["full", "none"]
    assert [r["grid_index"] for r in rows] == [11, 12] and {r["iteration"] for r in rows} == {7}
    assert [r["reason"] for r in rows] == [("ok" if f else r["reason"]) for f, r in
                                           zip(metrics["feasible"], rows, strict=True)]
    assert rows[0]["microbatches"] == 1536 // 8  # m = B / (dp * b)


def test_the_schema_page_names_every_column_a_part_has():
    """docs/run-directories.md's "Results (Parquet schema)" names every column of a part, and its
    tables list no column that no part has; the parts of one-pool runs written before the
    placement lists were in every part lack just those and the device memory, which came later."""
    import re

    with open(os.path.join(ROOT, "docs", "run-directories.md")) as f:
        text = f.read()
    section = text[text.index("## Results (Parquet schema)"):]
    section = section[:section.index("\n## ")]
    named = set(re.findall(r"`([a-z][a-z0-9_]*)`", section))
    tabled = {n for line in section.splitlines() if line.startswith("| `")
              for n in re.findall(r"`([a-z][a-z0-9_]*)`", line.split("|")[1])}
    every, legacy = set(result_schema().names), set(LEGACY_SCHEMA.names)
    assert every - named == set()
    assert tabled and tabled <= every | {"searcher"}
    assert every - legacy == {*HETERO_STAGE_COLUMNS, *DEVICE_COLUMNS}
