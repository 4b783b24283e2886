"""Figures fit for a slide, read back as matplotlib objects (not pixels): every axis label carries a unit in
parentheses, legends sit outside the data area, titles name the model and the cluster (synthetic experiments say
they have neither), replan draws the plan before the loss, a mixed-cluster run shows which pool holds which stage,
and GPipe is not hidden under 1F1B."""

from __future__ import annotations

import re

import pytest

from cli import main
from costmodel import StrategyTable, cluster_preset, evaluate, model_preset

# Units an axis label may give in parentheses.
UNITS = ("GPUs", "stages", "replicas", "tokens/s", "tokens/second", "samples/second", "%", "days", "USD",
         "time units", "count", "share", "layers", "ms")


def has_unit(label: str) -> bool:
    return any(u in group for group in re.findall(r"\(([^()]*)\)", label) for u in UNITS)


def legends_outside(fig) -> bool:
    """Every legend of ``fig`` (on an axes or the figure) overlaps no axes' data area."""
    fig.canvas.draw()
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend()] + list(fig.legends)
    areas = [ax.get_window_extent() for ax in fig.axes]
    return bool(legends) and all(not leg.get_window_extent().overlaps(a) for leg in legends for a in areas)


def labelled_axes(fig) -> list:
    return [ax for ax in fig.axes if ax.get_xlabel() or ax.get_ylabel()]


@pytest.fixture
def saved(monkeypatch):
    """The figures sweep._plots and sweep._study_plots save, by file name (kept open to read back)."""
    import sweep._plots as plots
    import sweep._study_plots as study_plots

    figs: dict[str, object] = {}

    def keep(fig, out_dir, name):
        figs[name] = fig
        fig.savefig(f"{out_dir}/{name}.png", dpi=40)
        return f"{out_dir}/{name}.png"

    monkeypatch.setattr(plots, "_save", keep)
    monkeypatch.setattr(study_plots, "_save", keep)
    return figs


# ---- replan ---------------------------------------------------------------------------------------------------------
def test_replan_draws_the_plan_before_the_loss_as_a_reference_line():
    from cli._cmd_replan import original_score, replan_figure

    records = [{"policy": "shrink-dp", "gpus_left": 1016, "tokens_per_s": 300.0, "goodput_tokens_per_s": 270.0,
                "kept": 0.75},
               {"policy": "shrink-dp", "gpus_left": 1008, "tokens_per_s": 280.0, "goodput_tokens_per_s": 250.0,
                "kept": 0.70},
               {"policy": "keep-tp-pp", "gpus_left": 1016, "tokens_per_s": 0.0, "goodput_tokens_per_s": 0.0,
                "kept": 0.0}]
    assert original_score(records, "tokens_per_s") == pytest.approx(400.0)  # 300 / 0.75 (= 280 / 0.70)
    fig = replan_figure(records, "tokens_per_s", "gpt3-175b", "h100x1024", original=400.0)
    ax = fig.axes[0]
    ref = [ln for ln in ax.get_lines() if ln.get_label().startswith("the plan before the loss")]
    assert len(ref) == 1 and set(ref[0].get_ydata()) == {400.0} and ref[0].get_linestyle() == "--"
    assert "400 tokens/s" in ref[0].get_label()
    assert "gpt3-175b" in ax.get_title() and "h100x1024" in ax.get_title()
    assert has_unit(ax.get_xlabel()) and has_unit(ax.get_ylabel())
    assert legends_outside(fig)


def test_replans_reference_is_the_plan_evaluate_prices_on_the_whole_cluster(tmp_path, capsys):
    """The dashed line of `plansweep replan --out`: the original plan's tokens/s on all 1,024 GPUs, as evaluate
    prices it (replan's closed-form pipeline)."""
    import matplotlib.pyplot as plt

    import cli._cmd_replan as cmd

    plan = ["--tp", "8", "--pp", "8", "--recompute", "selective", "--sequence-parallel", "--zero-stage", "1"]
    shown = {}
    real = cmd.replan_figure
    cmd.replan_figure = lambda *a, **k: shown.setdefault("fig", real(*a, **k))
    try:
        assert main(["replan", *plan, "--lost", "1,2", "--policies", "shrink-dp", "--out", str(tmp_path)]) == 0
    finally:
        cmd.replan_figure = real
    capsys.readouterr()
    model, cluster = model_preset("gpt3-175b"), cluster_preset("h100x1024")
    table = StrategyTable.from_columns(dp=16, tp=8, pp=8, recompute="selective", sequence_parallel=True,
                                       zero_stage=1, global_batch=1536)
    want = float(evaluate(model, cluster, table)["tokens_per_s"][0])
    (ref,) = [ln for ln in shown["fig"].axes[0].get_lines() if ln.get_label().startswith("the plan before")]
    assert ref.get_ydata()[0] == pytest.approx(want, rel=1e-9)
    plt.close(shown["fig"])


# ---- schedule experiments -------------------------------------------------------------------------------------------
def test_schedule_experiment_axes_have_units_and_gpipe_is_not_hidden_under_1f1b():
    from cli._schedule_experiments import EXPERIMENTS, experiment_figure

    exp = EXPERIMENTS["weak_scaling"]
    fig = experiment_figure(exp, exp.columns())
    for ax in labelled_axes(fig):
        assert has_unit(ax.get_xlabel()) and has_unit(ax.get_ylabel()), (ax.get_xlabel(), ax.get_ylabel())
        lines = {ln.get_label(): ln for ln in ax.get_lines()}
        g, o = lines["GPipe"], lines["1F1B"]
        assert g.get_linestyle() != o.get_linestyle() and g.get_marker() != o.get_marker()
        assert g.get_markersize() > o.get_markersize() and g.get_markerfacecolor() == "none"
    # with T_C = 0 and even stages the two take the same time: both lines drawn, GPipe's hollow markers around 1F1B's
    t0 = fig.axes[0]
    lines = {ln.get_label(): ln for ln in t0.get_lines()}
    assert list(lines["GPipe"].get_ydata()) == pytest.approx(list(lines["1F1B"].get_ydata()))
    assert "no model or cluster" in fig.get_suptitle() and exp.title in fig.get_suptitle()
    assert legends_outside(fig)


# ---- a run's figures ------------------------------------------------------------------------------------------------
def test_a_runs_figures_have_units_outside_legends_and_model_and_cluster_titles(tmp_path, saved):
    """Seed 000's MLP grid as a run: every figure `plot` draws."""
    from sweep._plots import plot_run
    from sweep._runview import open_run
    from tests.run_fixtures import seed000_isolated_table, seed000_table, write_fixture_run

    model, cluster = model_preset("mlp-64x8192"), cluster_preset("a100x16-flat")
    table = StrategyTable.concat([seed000_table(), seed000_isolated_table()])
    run = write_fixture_run(tmp_path / "run", model, cluster, table)
    written, _ = plot_run(open_run(str(run)), str(tmp_path / "png"))
    assert {"throughput_vs_degrees", "grid_search", "horizontal_parallelism"} <= set(saved)
    for name, fig in saved.items():
        title = " ".join([fig.get_suptitle()] + [ax.get_title() for ax in fig.axes])
        assert model.name in title and cluster.name in title, name
        for ax in labelled_axes(fig):
            assert has_unit(ax.get_xlabel()), (name, ax.get_xlabel())
        assert any(has_unit(ax.get_ylabel()) for ax in fig.axes), name
        if fig.legends or any(ax.get_legend() for ax in fig.axes):
            assert legends_outside(fig), name


def test_a_mixed_cluster_runs_placement_figure_shows_which_pool_holds_which_stage(tmp_path, saved, capsys):
    out = str(tmp_path / "run")
    assert main(["search", "mcmc", "--model", "llama3-8b", "--cluster", "a100x16+h100x16", "--pp", "2,4",
                 "--global-batch", "64", "--seed", "1", "--budget", "96", "--chains", "8", "--out", out,
                 "--in-process", "--no-progress"]) == 0
    assert main(["plot", out, "--out", str(tmp_path / "png")]) == 0
    assert "placement.png" in capsys.readouterr().out
    from sweep._runview import best_rows, open_run

    fig = saved["placement"]
    ax = fig.axes[0]
    assert "llama3-8b" in ax.get_title() and "a100x16+h100x16" in ax.get_title()
    assert has_unit(ax.get_xlabel()) and legends_outside(fig)
    legend = ax.get_legend()
    color = {t.get_text(): h.get_facecolor() for t, h in zip(legend.get_texts(), legend.legend_handles, strict=True)}
    assert set(color) <= {"a100", "h100"}
    top = best_rows(open_run(out), 1).to_pylist()[0]
    n = len(ax.get_yticks())
    bars = sorted((b for b in ax.patches if abs(b.get_y() + b.get_height() / 2 - (n - 1)) < 1e-9 and b.get_height()
                   > 0.5), key=lambda b: b.get_x())  # plan #1's stages, left to right (the top row)
    assert [color_name(b.get_facecolor(), color) for b in bars] == top["stage_pool"]
    layers = top["stage_layers"] or [32 // top["pp"]] * top["pp"]
    assert [b.get_width() for b in bars] == layers


def color_name(rgba, color: dict) -> str:
    return next(name for name, c in color.items() if tuple(c) == tuple(rgba))


# ---- a study's figures ----------------------------------------------------------------------------------------------
def test_a_studys_figures_name_its_clusters_and_have_units(tmp_path, saved):
    from cli._cmd_plot import study_title
    from sweep._study_plots import plot_study

    entries = [{"model": "llama3-70b", "cluster": f"h100x{n}", "gpu": "H100-SXM5-80GB", "framework": "megatron-core",
                "global_batch": 1024, "seq_len": 8192, "num_gpus": n, "tokens_per_s": 1e3 * n, "mfu": 0.4,
                "usd": 1e6 / n ** 0.5, "days_to_train": 1e3 / n, "train_tokens": 1e12} for n in (64, 128, 256)]
    title = study_title(entries)
    assert title == "llama3-70b on h100x64, h100x128, h100x256, megatron-core"
    written, _ = plot_study(entries, title, str(tmp_path))
    assert set(saved) == {"scaling", "cost_time"}
    for name, fig in saved.items():
        assert "llama3-70b" in fig.axes[0].get_title() and "h100x128" in fig.axes[0].get_title()
        for ax in labelled_axes(fig):
            assert has_unit(ax.get_ylabel()), (name, ax.get_ylabel())
        assert has_unit(fig.axes[-1].get_xlabel()) and legends_outside(fig)
    many = [{**entries[0], "cluster": f"h100x{n}", "num_gpus": n} for n in (8, 16, 32, 64, 128)]
    assert study_title(many) == "llama3-70b on H100 clusters (8-128 GPUs), megatron-core"
