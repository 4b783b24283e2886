"""The failure-aware commands: evaluate's goodput breakdown and `plansweep replan`."""

import json

import pyarrow.parquet as pq
import pytest

from cli import main
from tests.in_process import cli, one_error_line, refuse_renames_onto

PLAN = ["--tp", "8", "--pp", "8", "--recompute", "selective", "--sequence-parallel", "--zero-stage", "1"]


def test_evaluate_reports_goodput_with_the_failure_flags(capsys):
    assert main(["evaluate", *PLAN, "--json"]) == 0
    g = json.loads(capsys.readouterr().out)["goodput"]
    assert 0 < g["goodput_ratio"] < 1
    # 1,024 GPUs at the default 50,677 GPU-hours each: the job fails every 49.5 hours
    assert g["job_mtbf_s"] / 3600 == pytest.approx(16384 * 54 * 24 / 419 / 1024, rel=1e-9)
    assert main(["evaluate", *PLAN, "--json", "--gpu-mtbf-h", "1024"]) == 0  # the job fails every hour
    g1 = json.loads(capsys.readouterr().out)["goodput"]
    assert g1["job_mtbf_s"] == pytest.approx(3600.0) and g1["goodput_ratio"] < g["goodput_ratio"]
    assert main(["evaluate", *PLAN, "--gpu-mtbf-h", "0"]) == 2
    assert "--gpu-mtbf-h: expected a number in [0.001, 1e+09], got 0.0" in capsys.readouterr().err


def test_replan_table_parquet_and_png(tmp_path, capsys):
    out = tmp_path / "rp"
    assert main(["replan", *PLAN, "--lost", "1,2", "--policies", "shrink-dp,keep-tp-pp", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "1016 shrink-dp         768" in text  # dp 16 -> 12 on 1,016 GPUs (tests/test_replan.py by hand)
    assert text.splitlines()[0].startswith("gpt3-175b on h100x1024: ")
    assert text.splitlines()[1].split()[:4] == ["nodes", "lost", "GPUs", "left"]  # the unit of every count
    t = pq.read_table(out / "replan.parquet").to_pydict()
    assert set(t["model"]) == {"gpt3-175b"} and set(t["cluster"]) == {"h100x1024"}
    assert t["nodes_lost"] == [1, 1, 2, 2] and t["policy"] == ["shrink-dp", "keep-tp-pp"] * 2
    assert t["dp"][0] == 12 and t["tp"][1] == 8
    assert (out / "replan.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from cli._cmd_replan import replan_figure

    records = [{"policy": "shrink-dp", "gpus_left": 1016, "tokens_per_s": 1.0, "goodput_tokens_per_s": 0.9}]
    fig = replan_figure(records, "tokens_per_s", "gpt3-175b", "h100x1024")
    assert fig.axes[0].get_title().startswith("gpt3-175b on h100x1024: ")
    assert main(["replan", *PLAN, "--lost", "two"]) == 2
    err = capsys.readouterr().err
    assert "--lost: expected a range A-B with A <= B, or comma-separated node counts, got 'two'" in err


@pytest.mark.parametrize("flag, value, needle", [
    # (not -1e9 B/s)
    ("--ckpt-write-GBps", "-1", "--ckpt-write-GBps: expected a number in [1e-06, 1e+06] (GB/s), got -1.0"),
    ("--ckpt-read-GBps", "0", "--ckpt-read-GBps: expected a number in [1e-06, 1e+06] (GB/s), got 0.0"),
    ("--node-storage-GBps", "-2.5", "--node-storage-GBps: expected a number in [1e-06, 1e+06] (GB/s), got -2.5"),
    ("--restart-s", "-1", "--restart-s: expected a number >= 0 and at most 1e+07, got -1.0"),  # 0: an instant restart
    # past the ranges goodput's arithmetic overflowed (nan / inf goodput on a feasible plan)
    ("--gpu-mtbf-h", "1e308", "--gpu-mtbf-h: expected a number in [0.001, 1e+09], got 1e+308"),
    ("--ckpt-write-GBps", "5e-324", "--ckpt-write-GBps: expected a number in [1e-06, 1e+06] (GB/s), got 5e-324"),
    ("--repair-h", "1e308", "--repair-h: expected a number >= 0 and at most 1e+06, got 1e+308"),
    ("--repair-h", "-1", "--repair-h: expected a number >= 0 and at most 1e+06, got -1.0"),
    ("--hardware-fraction", "-1", "--hardware-fraction: expected a share between 0 and 1, got -1.0"),
])
def test_failure_flags_say_what_they_take_and_name_the_value_typed(flag, value, needle):
    one_error_line(cli("evaluate", "--model", "llama3-8b", "--cluster", "h100x8", "--tp", "8", f"{flag}={value}"),
                   f"plansweep evaluate: error: {needle}")


def test_zero_restart_repair_and_hardware_share_are_taken():
    got = cli("evaluate", "--model", "llama3-8b", "--cluster", "h100x8", "--tp", "8", "--restart-s", "0",
              "--repair-h", "0", "--hardware-fraction", "0", "--json")
    assert got.returncode == 0 and got.stderr == "", got.stderr


REPLAN_SMALL = ["replan", "--model", "llama3-8b", "--cluster", "h100x16", "--tp", "8", "--lost", "1",
                "--policies", "shrink-dp"]


def test_replan_writes_its_parquet_and_figure_both_or_neither(tmp_path, monkeypatch):
    out = tmp_path / "rp"
    assert cli(*REPLAN_SMALL, "--out", str(out)).returncode == 0
    (out / "replan.parquet").write_text("old parquet")
    (out / "replan.png").write_text("old png")
    refuse_renames_onto(monkeypatch, out / "replan.png")  # as an immutable replan.png left by an earlier run
    got = cli(*REPLAN_SMALL, "--out", str(out))
    one_error_line(got, f"plansweep replan: error: --out: expected a writable file path, got '{out / 'replan.png'} (")
    assert {p.name: p.read_text() for p in out.iterdir()} == {"replan.parquet": "old parquet", "replan.png": "old png"}


def test_replan_out_and_lost_that_cannot_be_taken(tmp_path):
    (tmp_path / "file").write_text("old")
    one_error_line(cli(*REPLAN_SMALL, "--out", ""), "--out: expected a directory, got ''")
    one_error_line(cli(*REPLAN_SMALL, "--out", str(tmp_path / "file" / "rp")),
                   f"--out: expected a directory that can be made, got '{tmp_path / 'file' / 'rp'} (")
    # ranges checked before they are expanded (a list of 10^11 counts would not fit in memory)
    one_error_line(cli(*REPLAN_SMALL, "--lost", "1-99999999999"),
                   "--lost: expected node counts below the cluster's 2 nodes, got 99999999999")
    one_error_line(cli(*REPLAN_SMALL, "--lost=-99999999999-1"),
                   "--lost: expected a range of at most 4,096 node counts (each is re-planned), got '-99999999999-1'")
    assert [p.name for p in tmp_path.iterdir()] == ["file"] and (tmp_path / "file").read_text() == "old"


# A small space of GPT-3 175B on h100x1024 (batch 1536) with plans on all 128 nodes (tp 4, pp 16, dp 16:
# the fastest) and on 120 nodes (tp 4, pp 20 with lighter ends, dp 12: 960 GPUs, 8 idle nodes, about 4%
# slower). Kokolis et al. 2024's 1,024-GPU job MTTF, 7.9 h: 8,090 GPU-hours.
SMALL_SPACE = ["--space", "fixed", "--tp", "4", "--pp", "16,20", "--light-ends", "0,1", "--micro-batch", "1,2",
               "--schedule", "zb-h1,interleaved", "--vpp", "1,2", "--recompute", "selective",
               "--sequence-parallel", "true", "--zero-stage", "1", "--partial-gpus", "--global-batch", "1536",
               "--gpu-mtbf-h", "8090"]


def _first_row(out: str) -> list[str]:
    lines = out.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("#   dp"))
    return lines[head + 1].split()


def test_rank_by_goodput_prefers_the_plan_that_keeps_spare_nodes(capsys):
    # by throughput the 128-node plan wins; without a spare, 78% of its failures wait the 2.2 h
    # repair (0.78 x 7920 = 6178 s per failure, every 7.9 h: ~22% of the time), so by goodput the
    # 120-node plan wins (its eight idle nodes are spares)
    assert main(["rank", *SMALL_SPACE, "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert _first_row(out)[1:4] == ["16", "4", "16"]
    assert "6178" in out  # the goodput table is printed by either objective
    assert main(["rank", *SMALL_SPACE, "--top", "2", "--objective", "goodput"]) == 0
    out = capsys.readouterr().out
    assert _first_row(out)[1:4] == ["12", "4", "20"]
    assert "ranked by goodput" in out
    # with repairs instant the spares are worth nothing and raw throughput wins again
    assert main(["rank", *SMALL_SPACE, "--top", "2", "--objective", "goodput", "--repair-h", "0"]) == 0
    assert _first_row(capsys.readouterr().out)[1:4] == ["16", "4", "16"]


def test_search_and_sweep_rank_by_goodput(capsys, tmp_path):
    assert main(["search", "grid", *SMALL_SPACE, "--top", "1", "--objective", "goodput", "--json"]) == 0
    best = json.loads(capsys.readouterr().out)["best"][0]
    assert (best["dp"], best["tp"], best["pp"]) == (12, 4, 20)
    assert 0 < best["goodput_tokens_per_s"] < best["tokens_per_s"]
    # a resumable search (--out) records the objective and failure model, its searcher walks by goodput
    assert main(["search", "mcmc", *SMALL_SPACE, "--budget", "64", "--objective", "goodput", "--out",
                 str(tmp_path / "r"), "--in-process", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "by goodput" in out and _first_row(out)[1:4] == ["12", "4", "20"]
    info = json.loads((tmp_path / "r" / "run.json").read_text())
    assert info["options"]["objective"] == "goodput" and info["options"]["failure"]["gpu_mtbf_h"] == 8090
    run = tmp_path / "sweep"
    assert main(["sweep", *SMALL_SPACE, "--out", str(run), "--in-process", "--no-progress", "--top", "1",
                 "--objective", "goodput"]) == 0
    out = capsys.readouterr().out
    assert "by goodput" in out and _first_row(out)[1:4] == ["12", "4", "20"]
    assert json.loads((run / "run.json").read_text())["options"]["objective"] == "goodput"
    assert main(["show", str(run), "--top", "1"]) == 0  # show ranks the run by its recorded objective
    out = capsys.readouterr().out
    assert "ranked by goodput" in out and _first_row(out)[1:4] == ["12", "4", "20"]
    assert main(["sweep", *SMALL_SPACE, "--out", str(tmp_path / "k"), "--in-process", "--keep", "best:1",
                 "--objective", "goodput"]) == 2
    assert "--keep: expected feasible or all" in capsys.readouterr().err


def test_evaluate_shows_spares_and_the_new_flags(capsys):
    plan = ["--dp", "24", "--tp", "3", "--stage-layers", "6," + "7," * 12 + "6", "--micro-batch", "1",
            "--schedule", "zb-h1", "--recompute", "selective", "--sequence-parallel", "--zero-stage", "1",
            "--global-batch", "1536", "--framework", "generic"]  # (ZB-H1: a schedule generic runs, megatron-core not)
    assert main(["evaluate", *plan]) == 0
    out = capsys.readouterr().out
    assert "the job holds 126 nodes" in out and "(2 idle nodes as spares)" in out
    assert main(["evaluate", *plan, "--json", "--repair-h", "0", "--ckpt-rank0"]) == 0
    g = json.loads(capsys.readouterr().out)["goodput"]
    assert g["spare_nodes"] == 2 and g["spare_wait_s"] == 0.0
    assert main(["evaluate", *plan, "--hardware-fraction", "1.5"]) == 2
    assert "--hardware-fraction: expected a share between 0 and 1, got 1.5" in capsys.readouterr().err
