"""examples/explore_run.ipynb runs top to bottom in a Jupyter kernel on a fixture run, and what
its cells print, compute and draw is checked; the results dataset opens with nothing but its
path in pandas and pyarrow, and through the README's polars and duckdb one-liners."""

from __future__ import annotations

import json
import os
import pathlib

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
    # plus two rows infeasible for other reasons (tp 3 does not divide 8192, pp 3 not 64 layers),
    # so that the reasons cell has more than one reason to count
    odd = StrategyTable.from_columns(dp=1, tp=[3, 1], pp=[1, 3], micro_batch=8192, global_batch=8192,
                                     schedule="gpipe")
    table = StrategyTable.concat([seed000_table(), seed000_isolated_table(), odd])
    path = write_fixture_run(tmp_path_factory.mktemp("nb") / "seed000", MODEL, CLUSTER, table, parts=2)
    return path, table, evaluate(MODEL, CLUSTER, table, framework="generic")  # as write_fixture_run prices it


def test_notebook_is_nbformat_4():
    nb = json.loads(NOTEBOOK.read_text())
    assert nb["nbformat"] == 4 and nb["metadata"]["kernelspec"]["name"] == "python3"
    for cell in nb["cells"]:
        assert cell["cell_type"] in ("markdown", "code") and isinstance(cell["source"], list)
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and "execution_count" in cell


# What the test reads back from the kernel after the notebook's own cells ran: the objects
# its cells built, as JSON on stdout of one extra cell appended at the end.
PROBE = """
import json as _json
print("PROBE" + _json.dumps({
    "RUN_DIR": RUN_DIR, "rows": len(df), "THROUGHPUT": THROUGHPUT,
    "best": best[THROUGHPUT].tolist(), "best_dp": best["dp"].tolist(),
    "per_degree": {d: {str(k): float(v) for k, v in s.items()} for d, s in per_degree.items()},
    "reasons": {str(k): int(v) for k, v in reasons.items()},
    "figures": len(plt.get_fignums()),
}))
"""


@pytest.fixture(scope="module")
def executed(run, tmp_path_factory):
    """The notebook run top to bottom in a real Jupyter kernel (nbclient), PLANSWEEP_RUN
    pointing at the fixture run, plus the probe cell; (notebook with outputs, probe dict)."""
    import nbclient
    import nbformat

    path, _, _ = run
    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    old = os.environ.get("PLANSWEEP_RUN")
    os.environ["PLANSWEEP_RUN"] = str(path)  # the kernel inherits the environment
    try:
        nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                resources={"metadata": {"path": str(tmp_path_factory.mktemp("kernel"))}}).execute()
    finally:
        if old is None:
            os.environ.pop("PLANSWEEP_RUN", None)
        else:
            os.environ["PLANSWEEP_RUN"] = old
    text = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.output_type == "stream")
    assert text.startswith("PROBE"), text
    return nb, json.loads(text[len("PROBE"):])


def _stdout(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream" and o.name == "stdout")


def test_every_cell_runs_in_a_kernel_without_error(executed):
    nb, _ = executed
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code)
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]


def test_notebook_cells_report_the_run(executed, run):
    nb, probe = executed
    path, table, m = run
    assert probe["RUN_DIR"] == str(path)
    assert probe["rows"] == len(table)
    assert probe["THROUGHPUT"] == "samples_per_s"  # an MLP: samples/s (seed 000's unit)
    code = [c for c in nb.cells if c.cell_type == "code"]
    n, f = len(table), int(m["feasible"].sum())
    # the load cell prints the row and feasible counts; the study cell names the study
    assert _stdout(code[1]).startswith(f"{n:,} rows, {f:,} feasible; versions ")
    assert _stdout(code[2]).strip() == f"mlp-64x8192 on a100x16-flat: {n:,} rows, {f:,} feasible"
    # why rows are infeasible: the counts per reason of the evaluated metrics
    codes, counts = np.unique(m["reason"][~m["feasible"]], return_counts=True)
    want = {costmodel.REASONS[r]: int(c) for r, c in zip(codes, counts, strict=True)}
    assert len(want) >= 3 and probe["reasons"] == want
    # the ten best: the ten largest throughputs of the evaluated metrics, in order
    thr = np.where(m["feasible"], m["samples_per_s"], -np.inf)
    np.testing.assert_allclose(probe["best"], np.sort(thr)[::-1][:10], rtol=1e-12)
    # best per degree value = the max over the rows with that value
    for d, per in probe["per_degree"].items():
        for value, v in per.items():
            assert v == pytest.approx(thr[table[d] == int(value)].max(), rel=1e-12)
    assert set(probe["per_degree"]) == {"dp", "tp", "pp"}  # cp is 1 everywhere: not plotted


def test_notebook_draws_its_three_figures(executed):
    nb, probe = executed
    pngs = [o["data"]["image/png"] for c in nb.cells if c.cell_type == "code" for o in c.outputs
            if o.output_type == "display_data" and "image/png" in o.get("data", {})]
    assert len(pngs) == 3  # time parts, throughput against the degrees, seed 000's panels
    import base64

    for png in pngs:
        raw = base64.b64decode(png)
        assert raw[:8] == b"\x89PNG\r\n\x1a\n" and len(raw) > 10_000


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
    assert json.loads(dset.schema.metadata[b"plansweep.model"])["name"] == "mlp-64x8192"
    assert dset.to_table(filter=ds.field("feasible")).num_rows == int(m["feasible"].sum())


def _readme_line(prefix: str) -> str:
    """The README's one-liner that starts with ``prefix`` (section "Results (Parquet schema)")."""
    readme = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
    lines = [ln.strip() for ln in readme.splitlines() if ln.strip().startswith(prefix)]
    assert len(lines) == 1, lines
    return lines[0]


def _same_rows(frame, run):
    """The frame holds the run's rows with pandas' values (sorted by grid_index)."""
    import pandas as pd

    path, table, _ = run
    want = pd.read_parquet(str(path / "results")).sort_values("grid_index").reset_index(drop=True)
    got = frame.sort_values("grid_index").reset_index(drop=True)
    assert len(got) == len(want) == len(table)
    for col in ("dp", "tp", "pp", "microbatches", "schedule", "step_time_s", "samples_per_s", "mem_total_bytes",
                "feasible", "reason", "searcher"):
        np.testing.assert_array_equal(got[col].astype(str).to_numpy(), want[col].astype(str).to_numpy(), err_msg=col)


def test_readme_polars_line_reads_the_run(run):
    import polars

    path, _, _ = run
    line = _readme_line("polars.read_parquet(").replace("RUN_DIR", str(path))
    frame = eval(line, {"polars": polars})
    _same_rows(frame.to_pandas(), run)


def test_readme_duckdb_line_reads_the_run(run):
    import duckdb

    path, _, _ = run
    line = _readme_line("duckdb.sql(").replace("RUN_DIR", str(path))
    frame = eval(line, {"duckdb": duckdb}).df()
    _same_rows(frame, run)


def test_notebook_validates_against_the_nbformat_schema():
    import nbformat

    nbformat.validate(nbformat.read(str(NOTEBOOK), as_version=4))
