"""Edge inputs: every searcher on spaces of one and two points and on spaces where nothing fits,
a Calculon system file with a zero-size network, and a reversed --lost range. All in-process
(cli.main), each asserting what a user would see: the exit code, the count of evaluations, the
plan found (or the line saying none fits), one line on stderr for bad input."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from cli import main
from costmodel import cluster_preset, evaluate, model_preset
from search import RandomSearcher, Space

DATA = Path(__file__).resolve().parent / "data"
SEARCHERS = ("grid", "random", "mcmc", "tpe", "gradient")
# GPT-3 175B on 1024 H100s with only the flags' choices varying (dp derived: 1024 / (tp pp)), priced under generic
# (the memory figures in the comments below are its).
BASE = ["--model", "gpt3-175b", "--cluster", "h100x1024", "--space", "fixed", "--budget", "50", "--framework", "generic"]
# The spaces, by the flags that make them; each point's feasibility is what `evaluate` says of it
# (test_space_points_are_what_the_cases_say checks it), the counts are by construction.
ONE_FITS = ["--tp", "8", "--pp", "16", "--recompute", "selective"]  # dp 8: 61 GB of 85.5 (81,559 MiB)
ONE_OOM = ["--tp", "8", "--pp", "8"]  # dp 16, no recompute: out of memory
TWO_FIT = ["--tp", "8", "--pp", "16", "--recompute", "selective,full"]
TWO_ONE_FITS = ["--tp", "8", "--pp", "4,16", "--recompute", "selective"]  # pp 4 (dp 32) does not fit
# 8 points, none fits: 175B parameters on 8 GPUs (at least 2 x 175e9 / 8 = 44 GB of bf16 weights
# per GPU before gradients and Adam's 12 bytes per parameter, sharded or not: > 85.5 GB)
NONE_FITS = ["--cluster", "h100x8", "--tp", "1,2,4,8", "--pp", "1,2"]


def _cli(argv, capsys) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def _search(searcher, flags, capsys, *more) -> dict:
    code, out, err = _cli(["search", searcher, *BASE, *flags, "--json", *more], capsys)
    assert code == 0 and err == "", err
    return json.loads(out)


def _evaluate(flags, capsys) -> dict:
    """evaluate's metrics of one strategy given as space flags of one value each."""
    words = [w for f in zip(flags[::2], flags[1::2], strict=True) for w in f]
    code, out, _ = _cli(["evaluate", "--model", "gpt3-175b", "--cluster", "h100x1024", "--framework", "generic", *words, "--json"],
                          capsys)
    assert code == 0
    return json.loads(out)["metrics"]


def test_space_points_are_what_the_cases_say(capsys):
    assert _evaluate(ONE_FITS, capsys)["feasible"] is True
    assert _evaluate(ONE_OOM, capsys)["reason"] == "out_of_memory"
    assert _evaluate(["--tp", "8", "--pp", "16", "--recompute", "full"], capsys)["feasible"] is True
    assert _evaluate(["--tp", "8", "--pp", "4", "--recompute", "selective"], capsys)["reason"] == "out_of_memory"
    model, cluster = model_preset("gpt3-175b"), cluster_preset("h100x8")
    space = Space.from_options(model, cluster, global_batch=1536, base="fixed", tp=[1, 2, 4, 8], pp=[1, 2])
    idx, table = space.rows(0, space.size)
    assert len(idx) > 0 and not evaluate(model, cluster, table)["feasible"].any()


@pytest.mark.parametrize("searcher", SEARCHERS)
def test_one_point_that_fits(searcher, capsys):
    doc = _search(searcher, ONE_FITS, capsys)
    assert doc["space_size"] == 1 and doc["evaluations"] == 1 and doc["feasible"] == 1
    (best,) = doc["best"]
    assert (best["dp"], best["tp"], best["pp"], best["recompute"]) == (8, 8, 16, "selective")
    assert best["tokens_per_s"] == pytest.approx(_evaluate(ONE_FITS, capsys)["tokens_per_s"])


@pytest.mark.parametrize("searcher", SEARCHERS)
def test_one_point_that_does_not_fit(searcher, capsys):
    doc = _search(searcher, ONE_OOM, capsys)
    assert (doc["space_size"], doc["evaluations"], doc["feasible"], doc["best"]) == (1, 1, 0, [])
    code, out, err = _cli(["search", searcher, *BASE, *ONE_OOM], capsys)
    assert code == 0 and err == ""
    assert out.splitlines()[-1] == "no feasible strategy found"


@pytest.mark.parametrize("searcher", SEARCHERS)
def test_two_points_that_fit(searcher, capsys):
    doc = _search(searcher, TWO_FIT, capsys)
    assert (doc["space_size"], doc["evaluations"], doc["feasible"]) == (2, 2, 2)
    assert sorted(r["recompute"] for r in doc["best"]) == ["full", "selective"]
    # selective recompute re-runs only attention's core, full re-runs the whole layer: faster
    assert doc["best"][0]["recompute"] == "selective"


@pytest.mark.parametrize("searcher", SEARCHERS)
def test_two_points_one_fits(searcher, capsys):
    doc = _search(searcher, TWO_ONE_FITS, capsys)
    # MCMC, TPE and the gradient search screen memory first (search._screen) and evaluate the one point that fits
    assert doc["space_size"] == 2 and doc["feasible"] == 1
    assert doc["evaluations"] == (1 if searcher in ("mcmc", "tpe", "gradient") else 2)
    assert [(r["pp"], r["dp"]) for r in doc["best"]] == [(16, 8)]


@pytest.mark.parametrize("searcher", SEARCHERS)
def test_nothing_fits(searcher, capsys):
    doc = _search(searcher, NONE_FITS, capsys)
    assert doc["feasible"] == 0 and doc["best"] == [] and 1 <= doc["evaluations"] <= 8
    code, out, err = _cli(["search", searcher, *BASE, *NONE_FITS], capsys)
    assert code == 0 and err == "" and out.splitlines()[-1] == "no feasible strategy found"


@pytest.mark.parametrize("searcher", SEARCHERS)
def test_placement_space_with_no_valid_point_is_refused(searcher, capsys):
    # 16 x 8 GPUs per stage on 64-GPU pools, micro-batches 7 dividing no batch: no placement is valid
    code, out, err = _cli(["search", searcher, "--model", "gpt3-175b", "--cluster", "a100x64+h100x64", "--pp", "2",
                           "--dp", "16", "--tp", "8", "--microbatches", "7", "--budget", "40"], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "space options: expected choices with at least one valid placement" in err


@pytest.mark.parametrize("searcher", ("grid", "random", "gradient"))
def test_small_placement_space(searcher, capsys):
    # pp 1, dp 8, tp 8: the one stage on either pool (grid: tp inside nodes only; the others also
    # the tp-across order: 4 points), 175B on 64 GPUs with full recompute and ZeRO 1 does not fit
    code, out, err = _cli(["search", searcher, "--model", "gpt3-175b", "--cluster", "a100x64+h100x64", "--pp", "1",
                           "--dp", "8", "--tp", "8", "--microbatches", "64", "--recompute", "full", "--zero-stage",
                           "1", "--budget", "40", "--json"], capsys)
    assert code == 0 and err == ""
    doc = json.loads(out)
    assert doc["evaluations"] == (2 if searcher == "grid" else 4) and doc["best"] == []


def test_random_search_asks_each_point_once():
    model, cluster = model_preset("gpt3-175b"), cluster_preset("h100x1024")
    space = Space.from_options(model, cluster, global_batch=1536, base="fixed", tp=[4, 8], pp=[8, 16],
                               recompute=["selective", "full"], zero_stage=[0, 1])
    count = space.valid_count()
    s, seen = RandomSearcher(space, seed=1), []
    while True:
        t = s.ask(5)
        if len(t) == 0:
            break
        seen.append(space.index_of(space.digits_from_table(t)))
        s.tell(t, evaluate(model, cluster, t))
    seen = np.concatenate(seen)
    assert len(seen) == count == len(np.unique(seen))  # all of them, each once, then done
    np.testing.assert_array_equal(np.sort(seen), space.valid_indices(0, space.size))


def test_pipeline_on_tiny_layer_graphs(tmp_path, capsys):
    """Piper's planner on one and two layers, fitting and not (exit 1: no plan fits, its documented code)."""
    def graph(n, devices, memory_bytes):
        def tmpc(i):
            return {"id": "vanilla", "timePerSample": 0.01, "parameterSize": 1e8, "memoryUsageA": 1e6,
                    "memoryUsageB": 1e9, "syncTimeFw": {str(i - 1): 0.0} if i else {},
                    "syncTimeBw": {str(i + 1): 0.0} if i < n - 1 else {}}
        return {"maxDevices": devices, "maxMemoryPerDevice": memory_bytes, "bandwidth": 25e9, "mbsInBatch": 8,
                "nodes": [{"id": i, "name": f"n{i}", "TMPCs": {"1": [tmpc(i)]}} for i in range(n)],
                "edges": [{"sourceId": i, "destId": i + 1, "communicationCost": 1e6} for i in range(n - 1)]}

    for n in (1, 2):
        path = tmp_path / f"g{n}.json"
        path.write_text(json.dumps(graph(n, n, 8e10)))
        code, out, err = _cli(["search", "piper", str(path), "--json"], capsys)
        assert code == 0 and err == ""
        doc = json.loads(out)
        # one layer per device (n devices, n layers, each 0.01 s per sample, t = d = 1)
        assert [s["nodes"] for s in doc["stages"]] == [[i] for i in range(n)]
        assert doc["time_per_sample"] >= 0.01
        path.write_text(json.dumps(graph(n, n, 1e6)))  # 1 MB per device: nothing fits
        code, out, err = _cli(["search", "piper", str(path)], capsys)
        assert code == 1 and out.strip() == "no plan fits the devices and memory" and err == ""


# ---- a Calculon system file with a network of size 0 (or other non-positive figures) ----------
@pytest.mark.parametrize("field,value,named", [
    (("networks", 0, "size"), 0, "networks[0].size: expected an integer in (0, 2,147,483,647], got 0"),
    (("networks", 0, "size"), 8.5, "networks[0].size: expected an integer, got 8.5"),
    (("networks", 0, "bandwidth"), 0, "networks[0].bandwidth: expected a number in (0, 1e+06], got 0"),
    (("networks", 1, "bandwidth"), -25, "networks[1].bandwidth: expected a number in (0, 1e+06], got -25"),
    (("networks", 1, "latency"), -1, "networks[1].latency: expected a number in [0, 1], got -1"),
    (("mem1", "GBps"), 0, "mem1.GBps: expected a number in (0, 1e+06], got 0"),
    (("mem1", "GiB"), "80", "mem1.GiB: expected a number, got '80'"),
    (("matrix", "float16", "tflops"), None, "matrix.float16.tflops: expected a number, got None"),
])
def test_calculon_system_fields_are_checked(tmp_path, capsys, field, value, named):
    data = json.loads((DATA / "models" / "a100_80g.calculon-system.json").read_text())
    bad = copy.deepcopy(data)
    where = bad
    for k in field[:-1]:
        where = where[k]
    where[field[-1]] = value
    path = tmp_path / "sys.json"
    path.write_text(json.dumps(bad))
    code, out, err = _cli(["evaluate", "--model", "gpt3-175b", "--cluster", f"{path}@1024", "--tp", "8", "--pp", "8"],
                          capsys)
    assert code == 2 and out == ""
    assert err == f"plansweep evaluate: error: --cluster {path} {named}\n"


def test_calculon_system_without_networks_or_with_a_bad_count(tmp_path, capsys):
    data = json.loads((DATA / "models" / "a100_80g.calculon-system.json").read_text())
    path = tmp_path / "sys.json"
    path.write_text(json.dumps({**data, "networks": []}))
    code, _, err = _cli(["evaluate", "--cluster", f"{path}@64", "--tp", "8", "--pp", "8"], capsys)
    assert code == 2 and f"--cluster {path} networks: expected a list of one or two networks" in err
    path.write_text(json.dumps({**data, "num_gpus": "many"}))
    code, _, err = _cli(["evaluate", "--cluster", str(path), "--tp", "8", "--pp", "8"], capsys)
    assert code == 2
    assert err == (f"plansweep evaluate: error: --cluster {path} GPUs (num_gpus, or FILE@GPUS): expected an integer "
                   "in [1, 2,147,483,647], got 'many'\n")


# ---- replan --lost ------------------------------------------------------------------------------
@pytest.mark.parametrize("lost,expected", [
    ("5-2", "a range A-B with A <= B, or comma-separated node counts, got '5-2'"),
    ("", "a range A-B with A <= B, or comma-separated node counts, got ''"),
    ("1,,2", "a range A-B with A <= B, or comma-separated node counts, got '1,,2'"),
    ("128", "node counts below the cluster's 128 nodes, got 128"),
    ("100-200", "node counts below the cluster's 128 nodes, got 200"),
])
def test_replan_lost_range_is_checked(tmp_path, capsys, lost, expected):
    out_dir = tmp_path / "rp"
    code, out, err = _cli(["replan", "--tp", "8", "--pp", "8", "--recompute", "full", f"--lost={lost}",
                           "--out", str(out_dir)], capsys)
    assert code == 2 and out == "" and not out_dir.exists()
    assert err == f"plansweep replan: error: --lost: expected {expected}\n"


def test_replan_one_node_range(capsys):
    code, out, err = _cli(["replan", "--tp", "8", "--pp", "8", "--recompute", "full", "--lost", "2-2",
                           "--policies", "shrink-dp"], capsys)
    assert code == 0 and err == ""
    rows = [line.split() for line in out.splitlines()[2:]]
    # 2 of 128 nodes lost: 1008 GPUs; shrink-dp keeps tp 8 pp 8, dp <= 1008 / 64 = 15 and dividing
    # the batch of 1536 sequences: 12
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [("2", "1008", "shrink-dp", "768")]


@pytest.mark.parametrize("word", ["mi300x1024", "mi300xx1024", "MI300X1024"])
def test_a_gpu_whose_name_ends_in_x_takes_a_count(word):
    """mi300x is the GPU's name: mi300x1024 is 1,024 of them (as h100x1024 is of H100s)."""
    c = cluster_preset(word)
    assert c.gpu.name == "MI300X-OAM-192GB" and c.num_gpus == 1024


def test_a_range_of_a_gpu_whose_name_ends_in_x():
    from cli._specs import cluster_words

    words = cluster_words("mi300x64..256,h100x64")
    assert [(cluster_preset(w).gpu.name, cluster_preset(w).num_gpus) for w in words] == [
        ("MI300X-OAM-192GB", 64), ("MI300X-OAM-192GB", 128), ("MI300X-OAM-192GB", 256), ("H100-SXM5-80GB", 64)]


@pytest.mark.parametrize("argv,line", [
    (["bench", "--rows", "0"], "plansweep bench: error: --rows: expected an integer >= 1, got 0"),
    (["bench", "--rows", "-1"], "plansweep bench: error: --rows: expected an integer >= 1, got -1"),
    (["bench", "--rows", "2.5"], "plansweep bench: error: --rows: expected an integer, got '2.5'"),
    (["search", "mcmc", "--space", "exact", "--budget", "10", "--seed", "-1"],
     "plansweep search: error: --seed: expected an integer >= 0, got -1"),
    (["search", "tpe", "--space", "exact", "--budget", "10", "--seed", "-3", "--out", "{tmp}/run"],
     "plansweep search: error: --seed: expected an integer >= 0, got -3"),
])
def test_counts_and_seeds_below_their_range_are_refused(tmp_path, capsys, argv, line):
    """A row count under 1 (bench) and a negative seed (numpy's generators take none), also for a search into a run
    directory, are one line naming the flag, exit 2, nothing written: before, `bench --rows 0` divided by zero and a
    negative seed reached numpy's seeding."""
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == line
    assert not (tmp_path / "run").exists()


HUGE = "99999999999999999999"
OUT_FLAGS = ["--out", "{tmp}/run", "--in-process", "--no-progress"]


OUT_OF_RANGE = [  # (searcher, flags, the line after "plansweep search: error: ")
    *[(s, ["--budget", HUGE], f"--budget: expected an integer from 1 to 1,000,000,000,000, got {HUGE}")
      for s in SEARCHERS],
    ("gradient", ["--samples", "99999999999"], "--samples: expected an integer from 2 to 10,000, got 99999999999"),
    ("mcmc", ["--chains", "99999999999"], "--chains: expected an integer from 1 to 10,000, got 99999999999"),
    ("mcmc", ["--screen", "2"], "--screen: expected 0 or 1, got 2"),
    ("tpe", ["--screen", "2"], "--screen: expected 0 or 1, got 2"),
    ("gradient", ["--restart", "2"], "--restart: expected 0 or 1, got 2"),
    ("gradient", ["--lr", "1e308"], "--lr: expected a finite number from 0.0 to 1,000,000, got 1e+308"),
    ("gradient", ["--entropy", "1e308"], "--entropy: expected a finite number from 0.0 to 1,000,000, got 1e+308"),
    ("gradient", ["--memory-penalty", "1e308"],
     "--memory-penalty: expected a finite number from 0.0 to 1,000,000, got 1e+308"),
    ("mcmc", ["--checkpoint-every", "0"], "--checkpoint-every: expected an integer >= 1, got 0"),
    ("tpe", ["--part-rows", "0"], "--part-rows: expected an integer >= 1, got 0"),
    ("mcmc", ["--batch", "0"], "--batch: expected an integer >= 1, got 0"),
    ("gradient", ["--gpu-mtbf-h", "-1"], "--gpu-mtbf-h: expected a number in [0.001, 1e+09], got -1.0"),
]


@pytest.mark.parametrize("searcher,flags,line,out", [
    *[(*case, False) for case in OUT_OF_RANGE],
    *[(*case, True) for case in OUT_OF_RANGE if case[0] not in ("grid", "random")],  # the searchers with --out
])
def test_search_flags_out_of_range_are_refused_before_anything_is_written(tmp_path, capsys, searcher, flags, line, out):
    """A budget, a draw or chain count, a step size or weight beyond any use, a 0/1 flag given 2, and the flags of a
    run into a directory are one line naming the flag, exit 2, with or without --out, and no run directory: before,
    such budgets and counts crashed in the searchers (after --out had made the directory), hung, or were checked
    only with --out."""
    more = [a.replace("{tmp}", str(tmp_path)) for a in OUT_FLAGS] if out else []
    code, _, err = _cli(["search", searcher, *BASE, *TWO_FIT, *flags, *more], capsys)
    assert code == 2 and err.splitlines() == [f"plansweep search: error: {line}"], err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("searcher", ("mcmc", "tpe", "gradient"))
def test_the_largest_budget_runs(searcher, capsys):
    """The largest --budget allowed, on a space walked whole (--screen 0): the start sample, a share of the budget,
    is drawn at most SAMPLE_MAX_POINTS points (before, 2 x 10^11 of them were asked of numpy)."""
    doc = _search(searcher, TWO_FIT, capsys, "--budget", "1000000000000", "--screen", "0")
    assert (doc["space_size"], doc["evaluations"], doc["feasible"]) == (2, 2, 2)


def test_a_sweep_checks_the_failure_flags_by_raw_throughput_too(tmp_path, capsys):
    """As rank and a search without --out do: before, a sweep ranked by raw throughput ignored them and ran."""
    code, _, err = _cli(["sweep", "--model", "llama3-8b", "--cluster", "h100x8", "--space", "fixed", "--gpu-mtbf-h",
                         "-1", "--out", str(tmp_path / "run"), "--in-process", "--no-progress"], capsys)
    assert code == 2 and err.splitlines() == ["plansweep sweep: error: --gpu-mtbf-h: expected a number in [0.001, "
                                              "1e+09], got -1.0"], err
    assert not (tmp_path / "run").exists()


def test_a_grid_too_large_to_sweep_leaves_no_run_directory(tmp_path, capsys):
    code, _, err = _cli(["sweep", "--model", "gpt3-175b", "--cluster", "h100x1024", "--space", "partition", "--out",
                         str(tmp_path / "run"), "--in-process", "--no-progress"], capsys)
    assert code == 2 and len(err.splitlines()) == 1 and "grid rows for a sweep" in err, err
    assert not (tmp_path / "run").exists()
