"""Capacity-planning studies: problem ranges in one sweep, best:K per problem, time and cost to train, the
per-problem view and its figures, resume after kill -9 (in-process engine: fast)."""

from __future__ import annotations

import json
import math
import os
import shutil

import numpy as np
import pytest

from cli import main
from cli._specs import cluster_words
from costmodel._training_cost import gpu_prices, prices_table, training_cost
from sweep._keep import Keep
from sweep._study_plots import pareto_front
from tests.in_process import cli, one_error_line, refuse_renames_onto
from tests.kill_points import KILLED, run_killed

# 2 models x 2 GPU types x 5 sizes x 2 frameworks = 40 problems, 20 studies of tp x pp x sequence parallelism at
# ZeRO-0, which both frameworks run (FSDP has no ZeRO-1): 14 grid rows under megatron-core (sequence parallelism
# only with tp > 1), 8 under fsdp2 (its tp always sequence-parallel).
STUDY = ["--model", "llama3-8b,llama3-70b", "--cluster", "h100x64..1024,b200x64..1024",
         "--framework", "megatron-core,fsdp2", "--space", "fixed", "--tp", "1,2,4,8", "--pp", "1,2",
         "--zero-stage", "0", "--sequence-parallel", "true,false", "--unit-rows", "10000", "--in-process",
         "--no-progress", "--top", "0"]


def test_cluster_ranges_expand_as_written():
    assert cluster_words("h100x64..4096") == [f"h100x{2 ** k}" for k in range(6, 13)]
    assert cluster_words("h100x64..4096:x4") == ["h100x64", "h100x256", "h100x1024", "h100x4096"]
    assert cluster_words("h100x64,128,512") == ["h100x64", "h100x128", "h100x512"]
    assert cluster_words("h100x64..128,b200x64..128") == ["h100x64", "h100x128", "b200x64", "b200x128"]
    assert cluster_words("h100x64,h100x64..128") == ["h100x64", "h100x128"]  # each once
    assert cluster_words("dgx-h100-1024,a100x64+h100x64") == ["dgx-h100-1024", "a100x64+h100x64"]


@pytest.mark.parametrize("word, got", [("h100x64..1000", "1000 is not 64 x 2^k"), ("h100x64..32", "h100x64..32"),
                                       ("64..128", "64..128"), ("h100x64..4096:x1", "h100x64..4096:x1"),
                                       ("128", "128"), ("h100x64,,128", "h100x64,,128")])
def test_bad_cluster_range_is_one_line_naming_cluster(word, got, capsys, tmp_path):
    assert main(["sweep", "--cluster", word, "--out", str(tmp_path / "r"), "--in-process"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("plansweep sweep: error: --cluster: expected ") and got in err and "\n" not in err
    assert not (tmp_path / "r").exists()  # nothing written


def test_best_k_is_per_framework_within_a_unit():
    # Rows 0-2 framework 0, rows 3-6 framework 1 (row 4 infeasible, the fastest): by hand, the 2 best of each.
    m = {"feasible": np.array([1, 1, 1, 1, 0, 1, 1], bool), "tokens_per_s": np.array([5, 9, 1, 7, 100, 3, 9.0])}
    k = Keep.parse("best:2")
    assert k.select(m).tolist() == [1, 6]  # one group: the two 9s
    assert k.select(m, np.array([0, 0, 0, 1, 1, 1, 1])).tolist() == [0, 1, 3, 6]


def test_training_cost_by_hand():
    # 1e12 tokens at 1e6 tokens/s: 1e6 s = 11.574 days; 1,024 GPUs x 1e6 s = 284,444.4 GPU-hours; x $2.99.
    c = training_cost([1e6, 0.0], [1024, 8], [2.99, 2.0], 1e12)
    assert c["days_to_train"][0] == pytest.approx(1e6 / 86400)
    assert c["gpu_hours"][0] == pytest.approx(284_444.444, rel=1e-6)
    assert c["usd"][0] == pytest.approx(850_488.89, rel=1e-6)
    assert all(math.isnan(c[k][1]) for k in c)  # no feasible plan: no time, no cost


def test_price_table_cites_sources_and_dates():
    for gpu, row in prices_table().items():
        assert row["usd_per_gpu_hour"] > 0 and row["source"].startswith("https://"), gpu
        assert len(row["date"]) == 10 and row["date"][4] == "-" and row["provider"], gpu
    assert gpu_prices("h100=2.5")["H100-SXM5-80GB"] == 2.5


def test_pareto_front_by_hand():
    days = np.array([1.0, 2.0, 3.0, 2.5, 4.0])
    usd = np.array([9.0, 5.0, 4.0, 6.0, 4.0])  # (2.5, 6) beaten by (2, 5); (4, 4) by (3, 4)
    assert pareto_front(days, usd).tolist() == [0, 1, 2]


def _strict(text: str) -> dict:
    def refuse(word):
        raise ValueError(f"not strict JSON: {word}")

    return json.loads(text, parse_constant=refuse)


def _problems(run: str, capsys, *extra: str) -> dict:
    assert main(["show", run, "--by", "problem", "--json", *extra]) == 0
    return _strict(capsys.readouterr().out)


@pytest.fixture(scope="module")
def full_run(tmp_path_factory) -> str:
    """The study with every feasible row kept (no kill): the reference for each problem's best."""
    run = str(tmp_path_factory.mktemp("study") / "full")
    assert main(["sweep", *STUDY, "--keep", "feasible", "--out", run]) == 0
    return run


def test_study_of_40_problems_killed_and_resumed_keeps_each_problems_best(full_run, tmp_path, capsys):
    run = str(tmp_path / "best")
    args = ["sweep", *STUDY, "--keep", "best:2", "--out", run, "--train-tokens", "15e12"]
    assert run_killed("grid-part", 7, *args) == KILLED  # killed as the 7th of 20 parts is written
    assert main(args) == 0  # the same command resumes it
    capsys.readouterr()
    ref, got = _problems(full_run, capsys, "--train-tokens", "15e12"), _problems(run, capsys)
    assert len(got["problems"]) == 40 and got["train_tokens"] == 15e12
    keys = ("model", "cluster", "gpu", "num_gpus", "framework", "global_batch", "seq_len")
    assert {tuple(p[k] for k in keys) for p in got["problems"]} == {
        (m, f"{g}x{n}", gpu, n, fw, 1536, 8192) for m in ("llama3-8b", "llama3-70b")
        for g, gpu in (("h100", "H100-SXM5-80GB"), ("b200", "B200-HGX-180GB")) for n in (64, 128, 256, 512, 1024)
        for fw in ("megatron-core", "fsdp2")}
    for a, b in zip(ref["problems"], got["problems"], strict=True):
        # the best plan of every rows kept = the best plan of the 2 kept per problem per unit, after the kill
        assert (a["best"], a["tokens_per_s"], a["usd"]) == (b["best"], b["tokens_per_s"], b["usd"])
        assert (a["rows"], a["feasible"], a["infeasible_reasons"]) == (b["rows"], b["feasible"],
                                                                       b["infeasible_reasons"])
        # 14 or 8 rows (above), less tp 1 x pp 1 on 1,024 GPUs: dp = 1,024 does not divide the batch of 1,536
        rows = (14 if a["framework"] == "megatron-core" else 8) - (a["num_gpus"] == 1024)
        assert a["rows"] == rows and a["feasible"] + sum(a["infeasible_reasons"].values()) == rows
    # the stored rows stay at most K per problem (one unit per study here)
    import pyarrow.dataset as ds

    t = ds.dataset(f"{run}/results", format="parquet", partitioning="hive").to_table(
        columns=["model", "cluster", "framework"]).group_by(["model", "cluster", "framework"]).aggregate(
        [("model", "count")])
    assert max(t.column("model_count").to_pylist()) <= 2
    # a feasible problem: days and dollars by hand from its tokens/s, the GPUs and the shipped H100 price
    p = next(p for p in got["problems"] if p["cluster"] == "h100x256" and p["model"] == "llama3-8b")
    assert p["days_to_train"] == pytest.approx(15e12 / p["tokens_per_s"] / 86400, rel=1e-12)
    assert p["usd"] == pytest.approx(256 * 15e12 / p["tokens_per_s"] / 3600 * 2.99, rel=1e-12)
    assert got["prices"]["H100-SXM5-80GB"]["date"] == prices_table()["H100-SXM5-80GB"]["date"]


def test_show_by_problem_text_and_both_figures(full_run, capsys, tmp_path):
    assert main(["show", full_run, "--by", "problem", "--gpu-hour-usd", "b200=5"]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0].startswith("40 problems; time and cost to train 1e+12 tokens")
    assert sum(" h100x" in ln or " b200x" in ln for ln in lines) == 40
    assert "B200-HGX-180GB $5.0 (--gpu-hour-usd)" in text
    out = tmp_path / "plots"
    assert main(["plot", full_run, "--out", str(out)]) == 0
    for name in ("scaling.png", "cost_time.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> str:
    """Llama 3 8B on 8 and 16 H100s: two problems, a run of a second."""
    run = str(tmp_path_factory.mktemp("small") / "run")
    assert main(["sweep", "--model", "llama3-8b", "--cluster", "h100x8,16", "--in-process", "--no-progress",
                 "--top", "0", "--out", run]) == 0
    return run


@pytest.mark.parametrize("flags", [["--train-tokens", "-1"], ["--train-tokens", "0"], ["--train-tokens", "nan"],
                                   ["--gpu-hour-usd", "zzz=1"], ["--gpu-hour-usd", "x=1"]])
def test_costing_flags_are_checked_before_a_figure_is_drawn(small_run, tmp_path, flags):
    for argv in (["plot", small_run, "--out", str(tmp_path / "p"), *flags], ["show", small_run, *flags],
                 ["show", small_run, "--by", "problem", *flags]):
        one_error_line(cli(*argv), f"plansweep {argv[0]}: error: {flags[0]}: expected ")
    assert list(tmp_path.iterdir()) == []


def test_run_json_costing_is_named_where_it_is_wrong(small_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    info = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**info, "costing": {**info["costing"], "train_tokens": -5}}))
    needle = f"{run / 'run.json'}: expected costing.train_tokens as a number of tokens > 0 (e.g. 1e12), got -5"
    one_error_line(cli("show", str(run), "--by", "problem"), needle)
    one_error_line(cli("plot", str(run), "--out", str(tmp_path / "p")), needle)
    assert not (tmp_path / "p").exists()  # nothing drawn
    # a damaged run.json is named whatever the flags say (resume refuses it too)
    one_error_line(cli("show", str(run), "--by", "problem", "--train-tokens", "1e12"), needle)


def test_plot_out_that_cannot_be_written_names_out(small_run, tmp_path, monkeypatch):
    (tmp_path / "file").write_text("old")
    one_error_line(cli("plot", small_run, "--out", ""), "plansweep plot: error: --out: expected a folder for the PNGs")
    one_error_line(cli("plot", small_run, "--out", str(tmp_path / "file" / "p")),
                   "plansweep plot: error: --out: expected a folder that can be made")
    out = tmp_path / "p"
    out.mkdir()
    figure = out / "throughput_vs_degrees-llama3-8b-h100x8.png"
    figure.write_text("old")
    refuse_renames_onto(monkeypatch, figure)
    one_error_line(cli("plot", small_run, "--out", str(out)),
                   f"plansweep plot: error: --out: expected a writable file path, got '{figure} (Operation not")
    assert figure.read_text() == "old" and not any(p.name.startswith(".") for p in out.iterdir())


def test_seq_len_and_batch_lists_make_one_study_each(tmp_path, capsys):
    run = str(tmp_path / "r")
    assert main(["sweep", "--model", "llama3-8b", "--cluster", "h100x64", "--seq-len", "4096,8192",
                 "--global-batch", "512,1024", "--space", "fixed", "--tp", "1,2", "--zero-stage", "1", "--in-process",
                 "--no-progress", "--top", "0", "--keep", "best:1", "--out", run]) == 0
    capsys.readouterr()
    got = _problems(run, capsys)["problems"]
    assert [(p["model"], p["seq_len"], p["global_batch"]) for p in got] == [
        ("llama3-8b-s4096", 4096, 512), ("llama3-8b-s4096", 4096, 1024),
        ("llama3-8b-s8192", 8192, 512), ("llama3-8b-s8192", 8192, 1024)]
    assert all(p["best"] is not None for p in got)


# Two studies (GPT-3 175B on 512 and 1,024 H100s) x 2 frameworks at cp 1: 48 units of 10^4 grid rows in all.
RAY_STUDY = ["--model", "gpt3-175b", "--cluster", "h100x512,1024", "--framework", "megatron-core,fsdp2",
             "--space", "exact", "--cp", "1", "--unit-rows", "1e4", "--keep", "best:2", "--top", "0"]


@pytest.mark.slow
def test_study_on_two_raylets_with_a_worker_node_removed_mid_run(tmp_path, monkeypatch, capsys):
    import time

    import pyarrow.dataset as ds

    from tests.sweep_helpers import parts, start, workers_import_this_checkout

    workers_import_this_checkout(monkeypatch)
    from ray.cluster_utils import Cluster

    ref = str(tmp_path / "ref")
    assert main(["sweep", *RAY_STUDY, "--in-process", "--no-progress", "--out", ref]) == 0
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        worker = cluster.add_node(num_cpus=1)  # the head's CPU finishes what this node's held
        cluster.wait_for_nodes()
        run = str(tmp_path / "run")
        proc = start("sweep", *RAY_STUDY, "--address", cluster.address, "--no-progress", "--out", run)
        where = os.path.join(run, "results", "searcher=grid")
        t0 = time.monotonic()
        while len(parts(where)) < 10:  # a tenth of the units written: take a worker node away
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() - t0 < 300, "no parts in time"
            time.sleep(0.05)
        cluster.remove_node(worker, allow_graceful=False)
        assert proc.wait(timeout=600) == 0, proc.stderr.read().decode()[-2000:]
    finally:
        cluster.shutdown()
    capsys.readouterr()
    a, b = _problems(ref, capsys)["problems"], _problems(run, capsys)["problems"]
    assert len(b) == 4 and all(p["best"] is not None for p in b)
    assert [(p["best"], p["tokens_per_s"], p["rows"]) for p in a] == [(p["best"], p["tokens_per_s"], p["rows"])
                                                                      for p in b]
    t = ds.dataset(os.path.join(run, "results"), format="parquet", partitioning="hive").to_table(
        columns=["cluster", "framework", "grid_index"])
    keys = list(zip(*(t.column(c).to_pylist() for c in ("cluster", "framework", "grid_index")), strict=True))
    assert len(keys) == len(set(keys))  # no row written twice


def test_goodput_study_prices_time_and_cost_at_goodput(tmp_path, capsys):
    run = str(tmp_path / "g")
    assert main(["sweep", "--model", "llama3-8b", "--cluster", "h100x64,128", "--space", "fixed", "--tp", "1,2",
                 "--zero-stage", "1", "--objective", "goodput", "--in-process", "--no-progress", "--top", "0",
                 "--out", run]) == 0
    capsys.readouterr()
    got = _problems(run, capsys, "--train-tokens", "2e12", "--gpu-hour-usd", "h100=2")
    assert got["objective"] == "goodput"
    for p in got["problems"]:
        g = p["goodput_tokens_per_s"]
        assert 0 < g < p["tokens_per_s"]  # failures cost time
        assert p["days_to_train"] == pytest.approx(2e12 / g / 86400, rel=1e-12)
        assert p["usd"] == pytest.approx(p["num_gpus"] * 2e12 / g / 3600 * 2.0, rel=1e-12)
