"""examples/explore_run.ipynb on every kind of run the engine writes: a grid sweep, MCMC, TPE and
gradient searches, a mixed cluster (plans placed stage by stage), an MoE model, an MLP and a
search over two studies. Each run is small and made in this process (no Ray); the notebook's
code cells run in this process too, as Jupyter runs them (the last expression of a cell is what
it shows), with matplotlib's Agg backend. tests/test_notebook.py runs it in a real kernel.

Checked on each: every cell runs; the tables it shows exist and the best ten are the run's ten
best rows (read here with pyarrow); three figures, each titled with the model and the cluster,
at most one legend each; no label, tick or legend text reads "nan"; the time-parts plans have
distinct names; the grid view gives a micro-batch count one colour in every panel (the one its
legend shows), and a mixed cluster's placement view one colour per pool.
"""

from __future__ import annotations

import ast
import os
import pathlib
import re

import matplotlib
import numpy as np
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

import cli

NOTEBOOK = pathlib.Path(__file__).resolve().parents[1] / "examples" / "explore_run.ipynb"
RUNS = {
    "grid": ["sweep", "--model", "llama3-8b", "--cluster", "h100x64", "--tp", "1,2,4,8", "--pp", "1,2,4",
             "--microbatches", "1,4,16", "--global-batch", "256", "--recompute", "none,full", "--zero-stage", "0,1",
             "--keep", "all"],
    "mcmc": ["search", "mcmc", "--model", "llama3-8b", "--cluster", "h100x64", "--budget", "200", "--chains", "4",
             "--seed", "1"],
    "tpe": ["search", "tpe", "--model", "llama3-8b", "--cluster", "h100x64", "--budget", "24", "--batch", "8",
            "--seed", "1"],
    "gradient": ["search", "gradient", "--model", "llama3-8b", "--cluster", "h100x64", "--budget", "200", "--seed",
                 "1"],
    "mixed": ["search", "mcmc", "--model", "gpt3-175b", "--cluster", "a100x64+h100x64", "--pp", "4,8", "--budget",
              "400", "--chains", "8", "--seed", "1"],
    "moe": ["sweep", "--model", "mixtral-8x7b", "--cluster", "h100x64", "--tp", "1,2,4,8", "--pp", "1,2,4", "--ep",
            "1,2,4,8", "--microbatches", "8,32", "--global-batch", "256", "--recompute", "full,selective",
            "--zero-stage", "1,2", "--keep", "all"],
    "mlp": ["sweep", "--model", "mlp-64x8192", "--cluster", "a100x16-flat", "--dp", "1,2,4,8,16", "--tp",
            "1,2,4,8,16", "--pp", "1,2,4", "--microbatches", "1,4,16", "--global-batch", "8192", "--schedule", "gpipe",
            "--recompute", "none", "--sequence-parallel", "false", "--zero-stage", "0,1", "--partial-gpus", "--keep",
            "all", "--framework", "generic"],  # GPipe: generic runs it
    "study": ["sweep", "--model", "llama3-8b", "--cluster", "h100x64..256", "--framework", "megatron-core,fsdp2",
              "--global-batch", "256", "--tp", "1,2,4,8", "--pp", "1,2,4", "--microbatches", "4,16", "--keep", "best:3"],
    "two-studies": ["search", "mcmc", "--model", "gpt3-175b,llama3-70b", "--cluster", "h100x1024", "--space", "exact",
                    "--budget", "64", "--chains", "4", "--seed", "3"],
}
STUDY_KINDS = ("study", "two-studies")  # the runs of several problems
NAN = re.compile(r"\bnan\b", re.IGNORECASE)


class Runs:
    """The run of each kind, written the first time a test asks for it (``runs / kind``): a
    worker that draws only some of the kinds builds only those."""

    def __init__(self, root: pathlib.Path):
        self.root = root

    def __truediv__(self, kind: str) -> pathlib.Path:
        out = self.root / kind
        if not out.exists():
            argv = [*RUNS[kind], "--out", str(out), "--in-process", "--no-progress", "--top", "1"]
            assert cli.main(argv) == 0, kind
        return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return Runs(tmp_path_factory.mktemp("kinds"))


def run_notebook(run_dir: pathlib.Path):
    """The notebook's code cells in order in one namespace, PLANSWEEP_RUN set; (namespace, what
    each cell shows: its last expression's value, unless None or the cell ends with ';'; figures)."""
    import nbformat

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.close("all")
    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    ns: dict = {"__name__": "__main__"}
    shown = []
    old = os.environ.get("PLANSWEEP_RUN")
    os.environ["PLANSWEEP_RUN"] = str(run_dir)
    try:
        for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
            tree = ast.parse(cell.source)
            last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
            body = tree.body[:-1] if last is not None else tree.body
            exec(compile(ast.Module(body=body, type_ignores=[]), f"<cell {i}>", "exec"), ns)
            if last is not None:
                value = eval(compile(ast.Expression(last.value), f"<cell {i}>", "eval"), ns)
                if value is not None and not cell.source.rstrip().endswith(";"):  # as Jupyter shows it
                    shown.append(value)
    finally:
        if old is None:
            os.environ.pop("PLANSWEEP_RUN", None)
        else:
            os.environ["PLANSWEEP_RUN"] = old
    return ns, shown, [plt.figure(n) for n in plt.get_fignums()]


def _texts(fig) -> list[str]:
    """Every text a reader sees on the figure: titles, axis labels, ticks, legends, annotations."""
    out = [t.get_text() for t in fig.texts]
    for lg in fig.legends:
        out += [t.get_text() for t in lg.get_texts()]
    for ax in fig.axes:
        out += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
        out += [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels() + ax.texts]
        if ax.get_legend() is not None:
            out += [t.get_text() for t in ax.get_legend().get_texts()]
    return out


def _legends(fig) -> list:
    return list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]


def _best_of_run(run_dir: pathlib.Path, model: str, cluster: str, column: str) -> np.ndarray:
    """The ten largest throughputs of the study's feasible rows, read with pyarrow."""
    t = ds.dataset(str(run_dir / "results"), partitioning="hive").to_table(columns=["model", "cluster", "feasible",
                                                                                    column])
    mask = pc.and_(pc.and_(pc.equal(t["model"], model), pc.equal(t["cluster"], cluster)), t["feasible"])
    return np.sort(t.filter(mask)[column].to_numpy())[::-1][:10]


@pytest.mark.parametrize("kind", list(RUNS))
def test_notebook_on_every_kind_of_run(runs, kind):
    import pandas as pd

    ns, shown, figs = run_notebook(runs / kind)
    model, cluster = ns["model"]["name"], ns["cluster"]["name"]
    # the tables: the studies, the reasons (or that every row is feasible), the best ten
    studies, reasons, best = shown[0], shown[1], shown[2]
    assert isinstance(studies, pd.Series) and len(studies) == {"two-studies": 2, "study": 3}.get(kind, 1)
    assert (model, cluster) == tuple(studies.index[0])
    assert (isinstance(reasons, pd.Series) and len(reasons)) or reasons == "every row is feasible"
    assert isinstance(best, pd.DataFrame) and 1 <= len(best) <= 10
    throughput = "samples_per_s" if kind == "mlp" else "tokens_per_s"
    assert ns["THROUGHPUT"] == throughput
    np.testing.assert_allclose(best[throughput].to_numpy(), _best_of_run(runs / kind, model, cluster, throughput),
                               rtol=1e-12)
    assert not [c for c in best.columns if best[c].isna().any()], "a column of the best ten holds NaN"
    assert ("stage_pool" in best) == (kind == "mixed") and ("ep" in best) == (kind == "moe")

    # time parts, throughput per degree value, grid view or placement view; a run of several problems
    # adds its scaling and cost-time figures (tested below)
    assert len(figs) == (5 if kind in STUDY_KINDS else 3)
    figs = figs[:3]
    for fig in figs:
        texts = _texts(fig)
        assert not [t for t in texts if NAN.search(t)], [t for t in texts if NAN.search(t)]
        assert any(model in t and cluster in t for t in texts), "no title names the model and the cluster"
        assert len(_legends(fig)) <= 1
    parts, _, view = figs
    names = [t.get_text() for t in parts.axes[0].get_yticklabels()]
    assert len(names) == min(5, len(best)) and len(set(names)) == len(names), names
    assert len(_legends(parts)) == len(_legends(view)) == 1
    legend = _legends(view)[0]
    colour = {t.get_text(): tuple(h.get_color() if hasattr(h, "get_color") else h.get_facecolor())
              for t, h in zip(legend.get_texts(), legend.legend_handles, strict=True)}
    assert len(set(colour.values())) == len(colour)  # one colour per value
    if kind == "mixed":  # the placement view: a bar per stage, coloured by its pool
        assert set(colour) == {"pool a100", "pool h100"}
        bars = [p for p in view.axes[0].patches]
        assert bars and {tuple(p.get_facecolor()) for p in bars} <= set(colour.values())
    else:  # the grid view: every line of a micro-batch count in the colour its legend entry shows
        lines = [ln for ax in view.axes for ln in ax.get_lines()]
        assert lines
        for ln in lines:
            assert matplotlib.colors.to_rgba(ln.get_color()) == matplotlib.colors.to_rgba(colour[ln.get_label()])


@pytest.mark.parametrize("kind", STUDY_KINDS)
def test_notebook_study_view(runs, kind):
    """A run of several problems: one table line per (model, cluster, framework) with the best
    throughput the results hold for it (read here with pyarrow), a scaling figure with a line per
    model x GPU x framework over the GPU counts, and a cost-time figure whose dashed front holds
    exactly the problems no other problem beats on both days and dollars."""
    import pandas as pd

    ns, shown, figs = run_notebook(runs / kind)
    table = shown[-1]
    assert isinstance(table, pd.DataFrame)
    t = ds.dataset(str(runs / kind / "results"), partitioning="hive").to_table(
        columns=["model", "cluster", "framework", "feasible", "tokens_per_s"]).to_pandas()
    best = t[t["feasible"]].groupby(["model", "cluster", "framework"])["tokens_per_s"].max()
    assert len(table) == len(best) == {"study": 6, "two-studies": 2}[kind]
    for _, row in table.iterrows():
        assert row["tokens_per_s"] == pytest.approx(best[(row["model"], row["cluster"], row["framework"])], rel=1e-12)
    scaling, cost = figs[3], figs[4]
    lines = {ln.get_label(): ln for ln in scaling.axes[0].get_lines()}
    expect_lines = {f"{m} H100-SXM5-80GB {fw}" for m, _, fw in best.index}
    assert set(lines) == expect_lines
    if kind == "study":  # each line: the three GPU counts, in order, at the best throughput of each
        for label, ln in lines.items():
            fw = label.rsplit(" ", 1)[1]
            assert list(ln.get_xdata()) == [64, 128, 256]
            want = [best[("llama3-8b", f"h100x{n}", fw)] / 1e6 for n in (64, 128, 256)]
            np.testing.assert_allclose(ln.get_ydata(), want, rtol=1e-12)
    for fig in (scaling, cost):
        texts = _texts(fig)
        assert not [x for x in texts if NAN.search(x)]
        assert any(x.startswith(("Scaling: ", "Cost and time")) and "H100-SXM5-80GB" in x for x in texts)
        assert all(ax.get_xlabel() and ax.get_ylabel() for ax in fig.axes)
    # the Pareto front, worked out here from the table: a problem is on it when no other is at
    # most as long and as costly, and strictly better in one
    pts = table[["days_to_train", "usd"]].to_numpy()
    on_front = [not any((q[0] <= p[0] and q[1] <= p[1] and (q[0] < p[0] or q[1] < p[1])) for q in pts) for p in pts]
    front = next(ln for ln in cost.axes[0].get_lines() if ln.get_label() == "Pareto front")
    got = sorted(zip(front.get_xdata(), np.asarray(front.get_ydata()) * 1e6))
    want = sorted((p[0], p[1]) for p, keep in zip(pts, on_front) if keep)
    np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-9)
