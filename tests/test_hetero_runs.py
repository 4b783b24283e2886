"""Heterogeneous clusters through run directories: `search mcmc|tpe --out`, `sweep`, `show`,
`plot`, `resume` after kill -9."""

from __future__ import annotations

import json
import os

import pytest

from costmodel import hetero_preset, model_preset, stage_rows
from costmodel._strategy import hetero_from_mapping as strategy_from_mapping
from sweep._results import hetero_row_strategy
from tests.sweep_helpers import cli, kill_when, parts, rows, start

HETERO = ["--cluster", "a100x64+h100x64", "--pp", "4,8"]
# Parts of about four calls of 2 steps x 16 chains (--part-rows 100): a kill finds several written.
MCMC = ["--seed", "1", "--budget", "800", "--chains", "16", "--checkpoint-every", "2", "--part-rows", "100"]
STAGES = ["stage_pool", "stage_dp", "stage_tp", "stage_order", "stage_layers", "stage_pool2", "stage_dp2"]
KEY = ["iteration", "pp", "microbatches", "recompute", "zero_stage", *STAGES]


@pytest.fixture(scope="module")
def mcmc_run(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("hetero") / "run")
    cli("search", "mcmc", *HETERO, *MCMC, "--out", out, "--in-process", "--no-progress", "--top", "1")
    return out


def _sorted(df):
    df = df.copy()
    for c in STAGES:
        df[c] = df[c].map(lambda v: "uniform" if v is None else ",".join(map(str, v)))
    return df[KEY + ["step_time_s", "tokens_per_s", "feasible"]].sort_values(KEY).reset_index(drop=True)


def test_mcmc_out_writes_placements_and_show_prints_stages(mcmc_run):
    """Every evaluation is a row with its stages' pools, degrees and layers (96 in all); `show`
    prints the top row's per-stage breakdown, and its JSON holds the same stages re-priced: the
    busiest stage's iteration time is the step's pipeline part, no more than the step time."""
    df = rows(mcmc_run)
    assert len(df) == 800 and df["dp"].isna().all()
    listed = df["stage_layers"].notna()  # null: uniform stages, 96 / pp layers each
    assert listed.any() and df["stage_layers"][listed].map(sum).eq(96).all()
    assert df["stage_layers"][listed].map(lambda v: len(set(v)) > 1).all()
    assert df["stage_pool"].map(lambda p: set(p) <= {"a100", "h100"}).all()
    text = cli("show", mcmc_run, "--top", "3").stdout
    assert "per stage (top row" in text and "hand-off ms" in text and "h100" in text
    out = json.loads(cli("show", mcmc_run, "--top", "1", "--json").stdout)
    study = out["studies"][0]
    top, stages = study["rows"][0], study["top_stages"]
    assert [s["pool"] for s in stages] == top["stage_pool"]
    assert [s["layers"] for s in stages] == (top["stage_layers"] or [96 // top["pp"]] * top["pp"])
    assert [s["dp"] for s in stages] == top["stage_dp"] and [s["tp"] for s in stages] == top["stage_tp"]
    assert all(0 < s["mem_bytes"] <= s["hbm_bytes"] for s in stages)
    assert 0 < max(s["time_s"] for s in stages) <= top["step_time_s"]
    # the row read back is the strategy that was priced: the same stages from the run's model and cluster
    hc = hetero_preset("a100x64+h100x64")
    again = stage_rows(model_preset("gpt3-175b"), hc,
                       strategy_from_mapping(hetero_row_strategy(top, 96), [p.name for p in hc.pools]))
    assert again == stages


def test_resume_after_kill_equals_uninterrupted(mcmc_run, tmp_path):
    """kill -9 during the run (in this process, no Ray), then `resume`: the same rows as the
    uninterrupted run."""
    out = str(tmp_path / "run")
    proc = start("search", "mcmc", *HETERO, *MCMC, "--out", out, "--in-process", "--no-progress")
    total = len(parts(os.path.join(mcmc_run, "results", "searcher=mcmc")))
    n = kill_when(proc, os.path.join(out, "results", "searcher=mcmc"), at_least=3)
    assert n < total, f"killed after all {total} checkpoints"
    res = cli("resume", out, "--in-process", "--no-progress", "--top", "1")
    assert "placement" in res.stdout
    assert _sorted(rows(out)).equals(_sorted(rows(mcmc_run)))


def test_tpe_out_on_hetero_cluster_and_resume_of_a_finished_run(tmp_path):
    out = str(tmp_path / "run")
    cli("search", "tpe", *HETERO, "--budget", "32", "--batch", "16", "--out", out, "--in-process", "--no-progress")
    df = rows(out)
    assert len(df) == 32 and df["feasible"].any()  # the named placements come first
    cli("resume", out, "--in-process", "--no-progress")
    assert len(rows(out)) == 32
    assert "per stage (top row" in cli("show", out).stdout


# A small placement grid: 2 pp x (2 pools x 2 dp)^8 stage slots x 2 micro-batch counts = 262,144 grid rows.
SWEEP = ["--model", "gpt3-175b", "--cluster", "a100x64+h100x64", "--pp", "4,8", "--dp", "2,4", "--microbatches",
         "32,64", "--recompute", "full", "--zero-stage", "1", "--unit-rows", "1e5", "--keep", "all"]


def _placement_keys(df) -> set[tuple]:
    return {(r.pp, r.microbatches, tuple(r.stage_pool), tuple(r.stage_dp), tuple(r.stage_tp))
            for r in df.itertuples()}


def test_sweep_on_a_mixed_cluster_lists_every_placement_once(tmp_path):
    """Every placement of the grid is one row: for pp stages on two 64-GPU pools with tp 8 and
    dp 2 or 4 per stage, the placements that fit are the pool/dp choices whose GPUs per pool
    are at most 64 (counted here by hand), each with 2 micro-batch counts; show and plot read it,
    and rank and `search grid` go over the same placements."""
    import itertools

    out = str(tmp_path / "run")
    cli("sweep", *SWEEP, "--out", out, "--in-process", "--no-progress")
    df = rows(out)
    assert df["grid_index"].is_unique and df["dp"].isna().all()
    expected = set()
    for pp in (4, 8):
        for stages in itertools.product(itertools.product(("a100", "h100"), (2, 4)), repeat=pp):
            if all(sum(dp * 8 for pool, dp in stages if pool == name) <= 64 for name in ("a100", "h100")):
                for m in (32, 64):
                    expected.add((pp, m, tuple(p for p, _ in stages), tuple(d for _, d in stages), (8,) * pp))
    assert _placement_keys(df) == expected
    assert df["stage_layers"].isna().all()  # no boundary shifts: uniform stages, null
    assert "placement" in cli("show", out, "--top", "3").stdout
    ranked = cli("rank", *SWEEP[:-4], "--top", "1").stdout  # the same grid, in one process
    assert f"{len(expected):,} strategies" in ranked and "placement (pool:dp x tp per stage" in ranked
    grid = json.loads(cli("search", "grid", *SWEEP[:-4], "--budget", "100000", "--json").stdout)
    assert grid["evaluations"] == len(expected) and grid["best"][0]["stages"]
    plot = cli("plot", out).stdout
    assert "throughput_vs_degrees.png" in plot and os.path.getsize(os.path.join(out, "plots",
                                                                              "throughput_vs_degrees.png")) > 0


def test_one_run_holds_homogeneous_or_heterogeneous_clusters(tmp_path):
    out = tmp_path / "run"
    mixed = cli("search", "mcmc", "--cluster", "h100x1024,a100x64+h100x64", "--budget", "16", "--out", str(out),
                "--in-process", check=False)
    assert mixed.returncode == 2 and "--cluster" in mixed.stderr and not out.exists()
    mixed = cli("sweep", "--cluster", "h100x1024,a100x64+h100x64", "--out", str(out), "--in-process", check=False)
    assert mixed.returncode == 2 and "--cluster" in mixed.stderr and not out.exists()


@pytest.fixture(scope="module")
def ray_cluster():
    """A Ray cluster of two CPUs on this machine, started once for the module's Ray tests (each
    command joins it with --address, none stops it): a start-up of about 10 s each, saved. The
    embedded Ray's own kill -9 (gone with the command's process group) is tests.kill_points's."""
    from tests.sweep_helpers import local_ray_cluster

    for cluster in local_ray_cluster((2,)):
        yield cluster.address


@pytest.mark.slow
def test_mixed_cluster_sweep_killed_then_resumed_on_ray(ray_cluster, tmp_path):
    """`plansweep sweep --cluster a100x64+h100x64 --model gpt3-175b` on a Ray cluster, kill -9
    after a few units, `resume` on it: every part once, and the rows are exactly the feasible
    valid grid rows of every unit (recomputed here, unit by unit), none twice. Six stages, each on
    either pool at dp 2, 4 or 8: 6^6 placements x 2 micro-batch counts x 2 recomputes, 19 units
    of 10,000 rows."""
    import numpy as np

    from costmodel import evaluate
    from sweep._keep import Keep
    from sweep._rundir import RunDir

    out = str(tmp_path / "run")
    proc = start("sweep", "--cluster", "a100x64+h100x64", "--model", "gpt3-175b", "--pp", "6", "--zero-stage", "1",
                 "--unit-rows", "10000", "--out", out, "--address", ray_cluster, "--no-progress")
    directory = os.path.join(out, "results", "searcher=grid")
    n = kill_when(proc, directory, at_least=3)
    assert "Ray cluster at" in cli("resume", out, "--address", ray_cluster, "--no-progress", "--top", "1").stderr
    with RunDir.open(out) as rd:
        space, unit_rows = rd.studies()[0].space, int(rd.info["options"]["unit_rows"])
    units = -(-int(space.size) // unit_rows)
    assert n < units, f"killed after all {units} units"
    assert len(parts(directory)) == units
    df = rows(out)
    assert df["grid_index"].is_unique
    keep, want = Keep.parse("feasible"), []
    for u in range(units):
        idx, table = space.rows(u * unit_rows, (u + 1) * unit_rows)
        want.append(idx[keep.select(evaluate(space.model, space.cluster, table))])
    assert sorted(df["grid_index"]) == sorted(np.concatenate(want).tolist())


@pytest.mark.slow
def test_mcmc_out_on_ray_with_a_hetero_cluster(ray_cluster, tmp_path):
    """The placement space travels to a Ray actor and back (a short budget)."""
    out = str(tmp_path / "run")
    proc = cli("search", "mcmc", *HETERO, "--budget", "96", "--chains", "16", "--checkpoint-every", "2", "--out",
               out, "--address", ray_cluster, "--no-progress")
    assert "Ray cluster at" in proc.stderr
    df = rows(out)
    assert len(df) == 96 and df["feasible"].any() and df["stage_pool"].notna().all()


def test_dp2_flag_puts_split_stages_in_a_run(tmp_path):
    """--dp2 adds the split dims: the run's rows include stages split across the pools, written
    with their second pool (null where a stage is not split), and show prints them as pool+pool2;
    --dp2 on a homogeneous cluster is one line, exit 2."""
    out = str(tmp_path / "run")
    cli("search", "mcmc", *HETERO, "--dp2", "0,1,2,4", "--budget", "480", "--chains", "16", "--out", out,
        "--in-process", "--no-progress")
    df = rows(out)
    split = df["stage_dp2"].map(lambda v: [int(x) > 0 for x in v])
    assert split.map(any).any()
    for flags, pools2, pools, dp, dp2 in zip(split, df["stage_pool2"], df["stage_pool"], df["stage_dp"],
                                             df["stage_dp2"], strict=True):
        for f, q2, q, d, d2 in zip(flags, pools2, pools, dp, dp2, strict=True):
            assert (q2 is not None and q2 != q and 0 < d2 < d) if f else (q2 is None and d2 == 0)
    bad = cli("search", "mcmc", "--cluster", "h100x1024", "--dp2", "0,1", "--budget", "16", check=False)
    assert bad.returncode == 2 and "--dp2" in bad.stderr and "Traceback" not in bad.stderr


def test_plot_draws_a_placement_search(mcmc_run, tmp_path):
    """A placement run's figure: throughput against pp and its widest stage's dp and tp."""
    res = cli("plot", mcmc_run, "--out", str(tmp_path / "png"))
    assert res.returncode == 0 and os.path.getsize(tmp_path / "png" / "throughput_vs_degrees.png") > 0


def test_moe_placement_run_records_ep(tmp_path):
    """An MoE model's placement search as a run: its rows carry the priced ep (not 1 throughout),
    and the top row read back (hetero_row_strategy) is the strategy that was priced."""
    out = str(tmp_path / "moe")
    cli("search", "mcmc", "--model", "mixtral-8x7b", "--framework", "megatron-core", *HETERO, "--seed", "1",
        "--budget", "320", "--chains", "8", "--out", out, "--in-process", "--no-progress", "--top", "1")
    df = rows(out)
    assert len(df) == 320 and df["ep"].nunique() > 1 and df["feasible"].any()
    top = json.loads(df[df["feasible"]].sort_values("tokens_per_s").iloc[-1:].to_json(orient="records"))[0]
    strategy = hetero_row_strategy(top, 32)
    assert strategy["ep"] == top["ep"]
    hc = hetero_preset("a100x64+h100x64")
    from costmodel import evaluate

    again = evaluate(model_preset("mixtral-8x7b"), hc,
                            strategy_from_mapping(strategy, [p.name for p in hc.pools]), framework="megatron-core")
    assert again["tokens_per_s"][0] == pytest.approx(top["tokens_per_s"], rel=1e-9)


def test_show_reprices_stages_under_the_runs_framework(tmp_path):
    """A placement run under fsdp2: `show`'s per-stage view prices the top row under fsdp2, as the search did, not
    under the default profile, whose stages' memory differs (its layers' saved tensors, its exchange's buffers)."""
    out = str(tmp_path / "run")
    cli("search", "mcmc", *HETERO, "--framework", "fsdp2", "--seed", "1", "--budget", "64", "--chains", "4",
        "--out", out, "--in-process", "--no-progress", "--top", "1")
    study = json.loads(cli("show", out, "--top", "1", "--json").stdout)["studies"][0]
    top, stages = study["rows"][0], study["top_stages"]
    assert top["framework"] == "fsdp2"
    hc = hetero_preset("a100x64+h100x64")
    table = strategy_from_mapping(hetero_row_strategy(top, 96), [p.name for p in hc.pools])
    model = model_preset("gpt3-175b")
    assert stages == stage_rows(model, hc, table, framework="fsdp2")
    default = stage_rows(model, hc, table)
    assert [d["mem_bytes"] for d in default] != [x["mem_bytes"] for x in stages]
