"""plansweep show / plot on fixture runs written in the agreed Parquet schema."""

from __future__ import annotations

import json

import matplotlib.image as mpimg
import numpy as np
import pytest

import costmodel
from costmodel import REASONS, StrategyTable, evaluate
from sweep._plots import best_by
from sweep._runview import best_rows, open_run, summary
from tests.in_process import cli  # show and plot in this process: no interpreter start-up each
from tests.run_fixtures import seed000_isolated_table, seed000_table, write_fixture_run

MODEL = costmodel.model_preset("seed000-mlp")
CLUSTER = costmodel.cluster_preset("seed000-16")


@pytest.fixture(scope="module")
def seed_run(tmp_path_factory):
    table = StrategyTable.concat([seed000_table(), seed000_isolated_table()])
    run = write_fixture_run(tmp_path_factory.mktemp("runs") / "seed000", MODEL, CLUSTER, table, parts=3)
    return run, table, evaluate(MODEL, CLUSTER, table, framework="generic")


def test_seed000_grid_matches_the_seed():
    # Seed 000 on 16 GPUs, 64 layers, batch 8192: the (d, h, p) power-of-two factorisations of 16
    # are the 15 triples with d*h*p = 16; p = 1 gets one run (m = 1); for p > 1 the micro-batch
    # counts are 2**k, k = 1 .. floor(log2(8192/d)/2) - 1: d=1 -> 2..32 (5), d=2 -> 2..32 (5,
    # log2 4096 = 12 -> 6 - 1), d=4 -> 2..16 (4), d=8 -> 2..16 (4, log2 1024 = 10 -> 5 - 1).
    # Triples with p > 1: d=1: (1,1,16)(1,2,8)(1,4,4)(1,8,2) -> 4*5; d=2: 3 triples * 5;
    # d=4: 2 * 4; d=8: 1 * 4; p = 1: 5 triples (d*h = 16). Total 20 + 15 + 8 + 4 + 5 = 52.
    t = seed000_table()
    assert len(t) == 52
    assert np.all(t["dp"] * t["tp"] * t["pp"] == 16)
    m = 8192 // (t["dp"] * t["micro_batch"])
    assert sorted(set(m[(t["dp"] == 1) & (t["pp"] > 1)].tolist())) == [2, 4, 8, 16, 32]
    assert sorted(set(m[(t["dp"] == 8) & (t["pp"] > 1)].tolist())) == [2, 4, 8, 16]
    assert np.all(m[t["pp"] == 1] == 1)


def test_summary_counts(seed_run):
    run, table, m = seed_run
    s = summary(open_run(run))
    assert s["num_rows"] == len(table)
    assert s["num_feasible"] == int(m["feasible"].sum())
    codes, counts = np.unique(m["reason"][~m["feasible"]], return_counts=True)
    reasons = {REASONS[k]: int(n) for k, n in zip(codes, counts, strict=True)}
    assert s["infeasible_reasons"] == reasons


def test_best_rows_are_the_top_k_by_samples_per_s(seed_run):
    run, table, m = seed_run
    view = open_run(run)
    assert view.throughput_column == "samples_per_s"  # an MLP: samples/s, seed 000's unit
    top = best_rows(view, 7).to_pylist()
    thr = np.where(m["feasible"], m["samples_per_s"], -np.inf)
    expect = np.sort(thr)[::-1][:7]
    np.testing.assert_allclose([r["samples_per_s"] for r in top], expect)
    i = int(np.argmax(thr))
    assert (top[0]["dp"], top[0]["tp"], top[0]["pp"], top[0]["microbatches"]) == (
        table["dp"][i], table["tp"][i], table["pp"][i], m["microbatches"][i])
    assert all(r["feasible"] for r in top)


def test_show_table_and_json(seed_run):
    run, table, m = seed_run
    out = cli("show", str(run), "--top", "3")
    assert out.returncode == 0, out.stderr
    n, f = len(table), int(m["feasible"].sum())
    assert f"{n:,} rows, {f:,} feasible" in out.stdout
    assert "out_of_memory" in out.stdout
    lines = out.stdout.splitlines()
    assert lines[1].split()[:6] == ["#", "dp", "tp", "pp", "cp", "m"]
    assert len(lines) == 2 + 3
    js = cli("show", str(run), "--top", "4", "--json")
    doc = json.loads(js.stdout)
    assert doc["num_rows"] == n and doc["num_feasible"] == f and len(doc["studies"]) == 1
    rows = doc["studies"][0]["rows"]
    assert len(rows) == 4 and doc["studies"][0]["model"] == "mlp-64x8192"
    thr = [r["samples_per_s"] for r in rows]
    assert thr == sorted(thr, reverse=True)


def test_show_all_lists_infeasible_rows_with_null_times(seed_run):
    run, table, m = seed_run
    k = len(table) + 10  # more than the run holds: every plan listed (a plan in both tables once)
    doc = json.loads(cli("show", str(run), "--top", str(k), "--all", "--json").stdout)
    rows = doc["studies"][0]["rows"]
    feasible = [r["feasible"] for r in rows]
    n = sum(feasible)
    assert 0 < n < len(rows) - 1 and feasible == [True] * n + [False] * (len(rows) - n)  # the feasible first
    plain = json.loads(cli("show", str(run), "--top", str(k), "--json").stdout)["studies"][0]["rows"]
    assert len(plain) == n  # without --all, the feasible ones only
    assert rows[-1]["step_time_s"] is None and rows[-1]["reason"] == "out_of_memory"


def test_show_bad_run_dirs_exit_2(tmp_path, seed_run):
    missing = cli("show", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "RUN_DIR" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1 and "Traceback" not in missing.stderr
    (tmp_path / "empty").mkdir()
    assert cli("show", str(tmp_path / "empty")).returncode == 2  # no results/
    bad = tmp_path / "bad"
    (bad / "results").mkdir(parents=True)
    (bad / "results" / "part-00000.parquet").write_text("not parquet")
    out = cli("show", str(bad))
    assert out.returncode == 2 and "Traceback" not in out.stderr and "RUN_DIR" in out.stderr
    badjson = tmp_path / "badjson"
    (badjson / "results").mkdir(parents=True)
    (badjson / "run.json").write_text("{oops")
    assert cli("show", str(badjson)).returncode == 2
    top0 = cli("show", str(seed_run[0]), "--top", "0")
    assert top0.returncode == 2 and "--top" in top0.stderr


def test_open_run_by_uri(seed_run):
    run, table, _ = seed_run
    view = open_run("file://" + str(run))  # what pyarrow.fs understands, like s3://bucket/run
    assert summary(view)["num_rows"] == len(table)


def test_show_prints_stages_of_the_top_row(tmp_path):
    # Two uneven 4-stage partitions of the 64 layers; the first has per-stage recompute.
    parts = [[10, 22, 22, 10], [17, 15, 15, 17]]
    table = StrategyTable.from_columns(
        dp=1, tp=[4, 4], pp=4, micro_batch=256, global_batch=8192, schedule="1f1b",
        stage_layers=parts, stage_recompute=[["none", "full", "full", "none"], ["none", "none", "none", "full"]])
    run = write_fixture_run(tmp_path / "stages", MODEL, CLUSTER, table)
    m = evaluate(MODEL, CLUSTER, table, framework="generic")
    best = int(np.argmax(m["samples_per_s"]))
    out = cli("show", str(run), "--top", "2")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "per stage (top row):" in text
    assert "stage layers" in text.splitlines()[1]  # every listed row's partition in the table
    assert "10,22,22,10" in text and "17,15,15,17" in text and "nffn" in text and "nnnf" in text
    stage_lines = text.split("per stage (top row):")[1].strip().splitlines()[1:]
    assert [int(s.split()[1]) for s in stage_lines] == parts[best]
    assert [s.split()[2] for s in stage_lines] == [["none", "full", "full", "none"],
                                                   ["none", "none", "none", "full"]][best]
    assert len(stage_lines) == 4


def test_uniform_top_row_prints_no_stage_lines(tmp_path):
    # Uniform stages are stored as null (the engine's encoding): nothing per stage to print.
    table = StrategyTable.from_columns(dp=1, tp=4, pp=4, micro_batch=256, global_batch=8192,
                                       stage_layers=[[16, 16, 16, 16]])
    run = write_fixture_run(tmp_path / "uniform", MODEL, CLUSTER, table)
    out = cli("show", str(run))
    assert out.returncode == 0 and "per stage" not in out.stdout


def test_best_by_is_a_group_maximum():
    dp = np.array([1, 1, 2, 2, 2, 4])
    tp = np.array([1, 2, 1, 1, 2, 1])
    v = np.array([5.0, 7.0, 1.0, 3.0, 2.0, 9.0])
    keys, best = best_by([dp], v)
    assert keys[:, 0].tolist() == [1, 2, 4] and best.tolist() == [7.0, 3.0, 9.0]
    keys, best = best_by([dp, tp], v)
    assert keys.tolist() == [[1, 1], [1, 2], [2, 1], [2, 2], [4, 1]]
    assert best.tolist() == [5.0, 7.0, 3.0, 2.0, 9.0]


def _nontrivial_png(path) -> None:
    img = mpimg.imread(path)
    assert img.shape[0] > 300 and img.shape[1] > 500
    rgb = img[..., :3]
    # More than a blank canvas: many distinct colours (lines, markers, text).
    assert np.unique((rgb.reshape(-1, 3) * 255).astype(np.uint8), axis=0).shape[0] > 50


def test_plot_writes_seed000_figures(seed_run, tmp_path):
    run, _, _ = seed_run
    out = cli("plot", str(run), "--out", str(tmp_path / "fig"))
    assert out.returncode == 0, out.stderr
    for name in ("throughput_vs_degrees", "grid_search", "horizontal_parallelism", "pipeline_parallelism"):
        path = tmp_path / "fig" / f"{name}.png"
        assert f"wrote {path}" in out.stdout
        _nontrivial_png(path)
    # On 80 GiB GPUs pure data parallelism fits (18 bytes per parameter of 4.3e9 parameters, 72 GiB,
    # and a micro-batch of 512 at most): drawn.
    assert f"wrote {tmp_path / 'fig' / 'data_parallelism.png'}" in out.stdout


def test_plot_reports_a_family_that_does_not_fit(tmp_path):
    # On 40 GB A100s pure data parallelism does not fit (72 GiB of weights, gradients and Adam state a
    # GPU, no ZeRO in this fixture): the figure is reported as not drawn rather than drawn empty.
    small = costmodel.cluster_preset("a100-40gbx16")
    run = write_fixture_run(tmp_path / "small", MODEL, small, StrategyTable.concat([seed000_table(),
                                                                                      seed000_isolated_table()]))
    out = cli("plot", str(run), "--out", str(tmp_path / "fig"))
    assert out.returncode == 0, out.stderr
    assert "not drawn: data_parallelism" in out.stdout
    assert not (tmp_path / "fig" / "data_parallelism.png").exists()


def test_plot_out_must_be_a_folder(seed_run, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    out = cli("plot", str(seed_run[0]), "--out", str(f))
    assert out.returncode == 2 and "--out" in out.stderr


def test_several_studies_are_shown_and_plotted_apart(tmp_path):
    # The engine runs one study per (model, cluster) side by side in one run directory.
    other = costmodel.cluster_preset("a100x16")  # 2 nodes of 8 A100s on NVLink + network
    table = seed000_table()
    run = write_fixture_run(tmp_path / "two", MODEL, CLUSTER, table, more_studies=((MODEL, other, table),))
    doc = json.loads(cli("show", str(run), "--top", "1", "--json").stdout)
    assert doc["num_rows"] == 2 * len(table)
    by = {s["cluster"]: s for s in doc["studies"]}
    assert set(by) == {"a100x16-flat", "a100x16"}
    for name, clu in (("a100x16-flat", CLUSTER), ("a100x16", other)):
        m = evaluate(MODEL, clu, table, framework="generic")
        assert by[name]["num_rows"] == len(table)
        assert by[name]["rows"][0]["samples_per_s"] == pytest.approx(m["samples_per_s"][m["feasible"]].max())
    # NVLink inside a node makes the best strategy faster than on seed 000's 25 GB/s links.
    assert by["a100x16"]["rows"][0]["samples_per_s"] > by["a100x16-flat"]["rows"][0]["samples_per_s"]
    out = cli("plot", str(run), "--out", str(tmp_path / "fig"))
    assert out.returncode == 0, out.stderr
    for suffix in ("mlp-64x8192-a100x16-flat", "mlp-64x8192-a100x16"):
        assert (tmp_path / "fig" / f"grid_search-{suffix}.png").is_file()


def test_a_search_revisiting_strategies_shows_each_once(tmp_path):
    # An MCMC chain visits the same strategies again and again: listed once each.
    base = seed000_table()
    table = base.take(np.tile(np.arange(len(base)), 5))  # every strategy 5 times
    run = write_fixture_run(tmp_path / "mcmc", MODEL, CLUSTER, table, searcher="mcmc")
    doc = json.loads(cli("show", str(run), "--top", "4", "--json").stdout)
    rows = doc["studies"][0]["rows"]
    m = evaluate(MODEL, CLUSTER, base, framework="generic")
    expect = np.sort(m["samples_per_s"][m["feasible"]])[::-1][:4]
    np.testing.assert_allclose([r["samples_per_s"] for r in rows], expect)
    assert len({(r["dp"], r["tp"], r["pp"], r["micro_batch"]) for r in rows}) == 4
    assert {r["searcher"] for r in rows} == {"mcmc"} and doc["num_rows"] == 5 * len(base)


def test_show_refuses_another_run_format(tmp_path):
    table = seed000_table()
    run = write_fixture_run(tmp_path / "old", MODEL, CLUSTER, table)
    info = json.loads((run / "run.json").read_text())
    info["versions"]["run_format"] = 999
    (run / "run.json").write_text(json.dumps(info))
    out = cli("show", str(run))
    assert out.returncode == 2 and "run format 999" in out.stderr and "Traceback" not in out.stderr


def test_a_run_without_feasible_rows(tmp_path):
    # One GPU cannot hold the 4.3e9-parameter MLP with Adam and a micro-batch of 8192 (18 B/param = 72 GiB,
    # 8 GiB of 16-bit layer inputs and the 2 GB kept outside the model, over the A100's 80 GiB).
    table = StrategyTable.from_columns(dp=1, tp=1, pp=1, micro_batch=8192, global_batch=[8192, 16384])
    run = write_fixture_run(tmp_path / "none", MODEL, CLUSTER, table)
    show = cli("show", str(run))
    assert show.returncode == 0
    assert "2 rows, 0 feasible (infeasible: out_of_memory 2)" in show.stdout and "no feasible row" in show.stdout
    rows = json.loads(cli("show", str(run), "--all", "--json").stdout)["studies"][0]["rows"]
    assert [r["reason"] for r in rows] == ["out_of_memory"] * 2
    plot = cli("plot", str(run), "--out", str(tmp_path / "fig"))
    assert plot.returncode == 1 and "nothing to plot" in plot.stdout


def test_plans_within_a_tenth_of_the_gpu_memory_are_marked_tight():
    """A row is tight where its bytes x 1.1 pass its GPU's (the allocator's reserved peaks ran 10% above the model's
    bytes): on h100x1024 (81,559 MiB = 85.52e9 bytes) 78 GB is tight (85.8e9), 77 GB not (84.7e9); a cluster that is
    no preset gets no mark."""
    from cli._cmd_show import format_rows

    base = {"dp": 8, "tp": 8, "pp": 16, "cp": 1, "step_time_s": 1.0, "tokens_per_s": 1e5, "mfu": 0.4,
            "feasible": True}
    rows = [dict(base, cluster="h100x1024", mem_total_bytes=78e9),
            dict(base, cluster="h100x1024", mem_total_bytes=77e9),
            dict(base, cluster="my-own-file", mem_total_bytes=99e9)]
    out = format_rows(("dp", "tp", "pp", "cp"), "tokens_per_s", rows).splitlines()
    assert out[1].endswith("78.0!") and out[2].endswith("77.0") and out[3].endswith("99.0")
    assert out[-1].startswith("! within a tenth of its GPU's memory")
    assert "!" not in format_rows(("dp", "tp", "pp", "cp"), "tokens_per_s", rows[1:2])


def test_a_row_is_held_to_its_worst_stages_gpu_on_a_mixed_cluster():
    """Where a row carries mem_device_bytes (the GPU of its worst stage's pool), that is its memory, whatever the
    cluster: 40 GB on a 40 GB A100 (40,960 MiB = 42.95e9 bytes; x 1.1 = 44e9) is tight, the same 40 GB on an H200
    (143,771 MiB = 150.8e9) is not, on a mixed cluster that is no one-GPU preset."""
    from cli._cmd_show import format_rows

    base = {"dp": 8, "tp": 8, "pp": 4, "cp": 1, "step_time_s": 1.0, "tokens_per_s": 1e5, "mfu": 0.4, "feasible": True,
            "cluster": "a100-40gbx32+h200x32", "mem_total_bytes": 40e9}
    rows = [dict(base, mem_device_bytes=40960 * 2**20), dict(base, mem_device_bytes=143771 * 2**20),
            dict(base, mem_device_bytes=None)]  # a part written before the column: no preset GPU to hold it to
    out = format_rows(("dp", "tp", "pp", "cp"), "tokens_per_s", rows).splitlines()
    assert out[1].endswith("40.0!") and out[2].endswith("40.0") and out[3].endswith("40.0")
    assert out[-1].startswith("! within a tenth of its GPU's memory")


def test_evaluate_on_a_mixed_cluster_holds_the_plan_to_its_worst_stages_gpu(tmp_path):
    """Llama 3 70B in four stages of 20 layers, two on H200 and two on 40 GB A100 (dp 2, tp 8 each): 1F1B keeps the
    most micro-batches in flight on the first stages, which sit on the H200s (141 GB), so the stage closest to its
    GPU's memory is the first A100 stage (about 40 GB of 42.95e9 bytes: tight, as 40e9 x 1.1 = 44e9 passes it).
    evaluate's text and --json hold it to the A100's 40,960 MiB, not to the H200's, and name it tight."""
    plan = {"global_batch": 64, "microbatches": 32, "schedule": "1f1b", "recompute": "selective",
            "sequence_parallel": True, "zero_stage": 1,
            "stages": [{"pool": p, "dp": 2, "tp": 8, "layers": 20} for p in ("h200", "h200", "a100-40gb", "a100-40gb")]}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    args = ("evaluate", "--model", "llama3-70b", "--cluster", "a100-40gbx32+h200x32", "--strategy", str(path))
    doc = json.loads(cli(*args, "--json").stdout)
    mem = doc["metrics"]["mem_total_bytes"]
    assert doc["memory"]["device_bytes"] == 40960 * 2**20 == doc["metrics"]["mem_device_bytes"]
    a100 = [s["mem_bytes"] for s in doc["stages"] if s["pool"] == "a100-40gb"]
    assert mem == max(a100) < max(s["mem_bytes"] for s in doc["stages"])  # not the largest stage: the closest
    assert 40960 * 2**20 / 1.1 < mem <= 40960 * 2**20 and doc["memory"]["tight"] is True
    text = cli(*args).stdout
    assert f"{mem / 1e9:.1f} GB of 42.9 GB, tight" in text
    both = cli(*args, "--framework", "megatron-core,generic").stdout
    assert "fits in its GPUs" in both and "150.8 GB" not in both


def test_evaluate_json_says_whether_the_plan_is_tight():
    """evaluate --json's memory: the GPU's bytes (81,559 MiB for an H100) and whether the plan's bytes x 1.1 pass
    them; GPT-3 175B at tp 8, pp 16 with selective recompute holds about 61 GB (x 1.1 = 67 GB: not tight)."""
    doc = json.loads(cli("evaluate", "--model", "gpt3-175b", "--cluster", "h100x1024", "--framework", "generic",
                         "--tp", "8", "--pp", "16", "--recompute", "selective", "--json").stdout)
    mem = doc["metrics"]["mem_total_bytes"]
    assert doc["memory"]["device_bytes"] == 81559 * 2**20 and 55e9 < mem < 70e9
    assert mem * 1.1 < 81559 * 2**20 and doc["memory"]["tight"] is False


def test_table_cells_are_never_cut_and_stay_under_their_headers():
    """131,072 micro-batches a step and a step of 108,272.8102 s (a day and more) print whole, every cell's right edge
    under its header's, as a row of ordinary sizes does."""
    from cli._cmd_show import format_rows

    base = {"dp": 8, "tp": 1, "pp": 1, "cp": 1, "tokens_per_s": 79336.0, "mfu": 0.58, "feasible": True,
            "mem_total_bytes": 77e9}
    rows = [dict(base, microbatches=131072, step_time_s=108272.8102), dict(base, microbatches=24, step_time_s=6.7883)]
    out = format_rows(("dp", "tp", "pp", "cp", "microbatches"), "tokens_per_s", rows).splitlines()
    head = out[0]
    assert "131072" in out[1].split() and "108272.8102" in out[1].split() and "6.7883" in out[2].split()
    for name, cell_1, cell_2 in (("m", "131072", "24"), ("step s", "108272.8102", "6.7883")):
        right = head.index(name) + len(name)
        assert out[1].index(cell_1) + len(cell_1) == right and out[2].rindex(cell_2) + len(cell_2) == right


def test_a_one_stage_plan_has_no_bubble_not_a_negative_one():
    # One pipeline stage idles never: its bubble is 0 s, exactly, also where the simulator's step and the stage's
    # busy time are sums taken in different orders (an MoE layer's; they printed "-0.0000 s  -0.0%" before)
    r = cli("evaluate", "--model", "mixtral-8x7b", "--cluster", "h100x64", "--json")
    m = json.loads(r.stdout)["metrics"]
    assert (m["bubble_s"], m["bubble_ratio"]) == (0.0, 0.0)
    text = cli("evaluate", "--model", "mixtral-8x7b", "--cluster", "h100x64").stdout
    assert "-0.0" not in text and "bubble ratio 0.0%" in text


def test_evaluate_names_the_nodes_a_cluster_was_laid_out_in():
    # 256 GB200s are 64 trays of 4; Megatron-Bridge's launcher's segment is the most of a rack's 18 trays dividing 64:
    # 16, so 4 NVLink domains of 64 GPUs; 1,024 H100s are 128 boards of 8
    for cluster, nodes, per in (("gb200x256", 4, 64), ("h100x1024", 128, 8)):
        r = cli("evaluate", "--model", "llama3-70b", "--cluster", cluster, "--tp", "8", "--pp", "2", "--json")
        rep = json.loads(r.stdout)
        assert (rep["nodes"], rep["gpus_per_node"]) == (nodes, per)
        text = cli("evaluate", "--model", "llama3-70b", "--cluster", cluster, "--tp", "8", "--pp", "2").stdout
        assert f", {nodes} nodes of {per}), framework megatron-core" in text.splitlines()[0]
