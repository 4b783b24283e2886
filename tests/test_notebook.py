"""examples/explore_run.ipynb runs top to bottom on a fixture run; the results dataset opens
with nothing but its path in pandas and pyarrow (and polars / duckdb where installed)."""

from __future__ import annotations

import json
import os
import pathlib

import matplotlib
import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import costmodel
from costmodel import StrategyTable, evaluate
from tests.run_fixtures import seed000_isolated_table, seed000_table, write_fixture_run

NOTEBOOK = pathlib.Path(__file__).resolve().parents[1] / "examples" / "explore_run.ipynb"
MODEL = costmodel.model_preset("seed000-mlp")
CLUSTER = costmodel.cluster_preset("seed000-16")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    table = StrategyTable.concat([seed000_table(), seed000_isolated_table()])
    path = write_fixture_run(tmp_path_factory.mktemp("nb") / "seed000", MODEL, CLUSTER, table, parts=2)
    return path, table, evaluate(MODEL, CLUSTER, table)


def test_notebook_is_nbformat_4():
    nb = json.loads(NOTEBOOK.read_text())
    assert nb["nbformat"] == 4 and nb["metadata"]["kernelspec"]["name"] == "python3"
    for cell in nb["cells"]:
        assert cell["cell_type"] in ("markdown", "code") and isinstance(cell["source"], list)
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and "execution_count" in cell


def test_notebook_runs_on_a_fixture_run(run, monkeypatch):
    path, table, m = run
    matplotlib.use("Agg")
    monkeypatch.setenv("PLANSWEEP_RUN", str(path))
    nb = json.loads(NOTEBOOK.read_text())
    ns: dict = {"__name__": "__notebook__"}
    for i, cell in enumerate(c for c in nb["cells"] if c["cell_type"] == "code"):
        exec(compile("".join(cell["source"]), f"{NOTEBOOK.name}[code cell {i}]", "exec"), ns)
    import matplotlib.pyplot as plt

    plt.close("all")
    assert ns["RUN_DIR"] == str(path)
    assert len(ns["df"]) == len(table)
    assert ns["THROUGHPUT"] == "samples_per_s"
    # The best rows, by numpy on the evaluated metrics.
    thr = np.where(m["feasible"], m["samples_per_s"], -np.inf)
    np.testing.assert_allclose(ns["best"]["samples_per_s"].to_numpy(), np.sort(thr)[::-1][:10])
    # Best throughput per pipeline degree = the max over rows of that degree.
    for p, v in ns["per_degree"]["pp"].items():
        assert v == pytest.approx(thr[table["pp"] == p].max())
    assert int(ns["reasons"].sum()) == int((~m["feasible"]).sum())


def test_pandas_and_pyarrow_open_the_dataset_by_path(run):
    import pandas as pd

    path, table, m = run
    results = str(path / "results")
    df = pd.read_parquet(results)
    assert len(df) == len(table)
    assert set(df["searcher"].astype(str)) == {"grid"}  # from the hive partition folder
    assert df["schedule"].iloc[0] == "gpipe" and df["dp"].dtype == np.int64
    t = pq.read_table(results)
    assert t.num_rows == len(table)
    assert t.schema.field("stage_layers").type == pa.list_(pa.int64())
    dset = ds.dataset(results, partitioning="hive")
    assert json.loads(dset.schema.metadata[b"plansweep.model"])["name"] == "seed000-mlp"
    assert dset.to_table(filter=ds.field("feasible")).num_rows == int(m["feasible"].sum())


def test_polars_opens_the_dataset_by_path(run):
    pl = pytest.importorskip("polars")
    path, table, _ = run
    assert pl.read_parquet(str(path / "results" / "**" / "*.parquet"), hive_partitioning=True).height == len(table)


def test_duckdb_opens_the_dataset_by_path(run):
    duckdb = pytest.importorskip("duckdb")
    path, table, _ = run
    glob = os.path.join(path, "results", "**", "*.parquet")
    n = duckdb.sql(f"select count(*) from read_parquet('{glob}', hive_partitioning = true)").fetchall()[0][0]
    assert n == len(table)


def test_notebook_validates_against_the_nbformat_schema():
    nbformat = pytest.importorskip("nbformat")
    nbformat.validate(nbformat.read(str(NOTEBOOK), as_version=4))
