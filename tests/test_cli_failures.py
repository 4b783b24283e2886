"""The failure-aware commands: evaluate's goodput breakdown and `plansweep replan`."""

import json

import pyarrow.parquet as pq
import pytest

from cli import main

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
    assert "--gpu-mtbf-h: expected a positive number, got 0.0" in capsys.readouterr().err


def test_replan_table_parquet_and_png(tmp_path, capsys):
    out = tmp_path / "rp"
    assert main(["replan", *PLAN, "--lost", "1,2", "--policies", "shrink-dp,keep-tp-pp", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "1016 shrink-dp     768" in text  # dp 16 -> 12 on 1,016 GPUs (tests/test_replan.py by hand)
    t = pq.read_table(out / "replan.parquet").to_pydict()
    assert t["nodes_lost"] == [1, 1, 2, 2] and t["policy"] == ["shrink-dp", "keep-tp-pp"] * 2
    assert t["dp"][0] == 12 and t["tp"][1] == 8
    assert (out / "replan.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["replan", *PLAN, "--lost", "two"]) == 2
    assert "--lost: expected a range A-B or comma-separated node counts, got 'two'" in capsys.readouterr().err
