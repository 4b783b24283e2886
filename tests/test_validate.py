"""Validation against published runs, calibration, and the CLI's contracts."""

import csv
import json
import re

import pytest

from cli import main
from costmodel._validate import MEASURED
from tests.in_process import UNWRITABLE, cli, one_error_line, unwritable_path

NARAYANAN = MEASURED / "narayanan2021_table1.csv"


def test_validate_narayanan_table1_within_published_bounds(capsys):
    assert main(["validate", "narayanan2021-table1", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert set(res) >= {"rows", "mean_abs_error_pct", "max_abs_error_pct"}
    assert len(res["rows"]) == 10
    for row in res["rows"]:
        assert set(row) >= {"name", "predicted_iteration_time_s", "measured_iteration_time_s", "error_pct", "chosen"}
        assert abs(row["error_pct"]) <= 10.0, row
        # micro_batch and vpp are empty in the file: the validator must say what it took.
        assert "micro_batch" in row["chosen"] and "vpp" in row["chosen"]
    assert res["mean_abs_error_pct"] <= 5.0
    errs = [abs(r["error_pct"]) for r in res["rows"]]
    assert res["max_abs_error_pct"] == pytest.approx(max(errs))


def test_calibrate_recovers_a_slower_gpu(tmp_path, capsys):
    # Runs that took 25% longer than published: the fitted constants must bring the error
    # from about 20% (1 - 1/1.25) down, and validate must accept the written file. Four of the
    # table's runs (tp, pp and dp all vary among them): each fit prices every run about 100 times.
    rows = list(csv.DictReader(open(NARAYANAN)))[:4]
    for r in rows:
        r["measured_iteration_time_s"] = str(float(r["measured_iteration_time_s"]) * 1.25)
    slow = tmp_path / "slow.csv"
    with open(slow, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    main(["validate", str(slow), "--json"])
    before = json.loads(capsys.readouterr().out)["mean_abs_error_pct"]
    assert before > 15
    hw = tmp_path / "hw.json"
    assert main(["calibrate", str(slow), "--out", str(hw)]) == 0
    capsys.readouterr()
    assert main(["validate", str(slow), "--hardware", str(hw), "--json"]) == 0
    after = json.loads(capsys.readouterr().out)["mean_abs_error_pct"]
    assert after < before / 3


def test_evaluate_json_contract(capsys):
    assert main(["evaluate", "--model", "gpt3-175b", "--cluster", "h100x1024", "--tp", "8", "--pp", "8",
                 "--recompute", "selective", "--sequence-parallel", "--zero-stage", "1", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["strategy"]["dp"] == 16  # 1024 / (8 * 8)
    assert rep["metrics"]["feasible"] is True
    assert rep["metrics"]["microbatches"] == 1536 // 16


@pytest.mark.parametrize("argv,needle", [
    (["evaluate", "--model", "gpt-9"], "model: expected one of"),
    (["evaluate", "--cluster", "h100x"], "cluster: expected one of"),
    (["evaluate", "--tp", "7", "--dp", "1"], "tp: expected a divisor of heads=96"),
    (["evaluate", "--pp", "5", "--dp", "1"], "pp: expected a divisor of layers=96"),
    (["evaluate", "--global-batch", "100"], "global_batch: expected a multiple of dp*micro_batch"),
    (["evaluate", "--schedule", "bogus"], "schedule: expected one of"),
    (["evaluate", "--tp", "0"], "tp: expected integers >= 1"),
    (["validate", "/nonexistent.csv"], "FILE: expected a readable CSV file"),
])
def test_bad_input_is_one_line_and_exit_2(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err
    assert len(err.splitlines()) == 1
    assert "Traceback" not in err


def test_malformed_strategy_file_is_refused(tmp_path, capsys):
    bad = tmp_path / "s.json"
    bad.write_text("{ not json")
    assert main(["evaluate", "--strategy", str(bad)]) == 2
    assert "--strategy: expected a well-formed JSON or YAML file" in capsys.readouterr().err


def test_malformed_measured_file_names_line_and_column(tmp_path, capsys):
    rows = list(csv.DictReader(open(NARAYANAN)))
    rows[1]["tp"] = "two"
    f = tmp_path / "bad.csv"
    with open(f, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    assert main(["validate", str(f)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{f}, row gpt-3.6B, line 3: tp: expected an integer, got 'two'" in err and len(err.splitlines()) == 1


def _one_run(tmp_path, *more: dict, **cells) -> str:
    """A CSV of Narayanan et al.'s first run with ``cells`` changed (and the rows ``more`` after it)."""
    row = {**next(csv.DictReader(open(NARAYANAN))), **cells}
    f = tmp_path / "one.csv"
    with open(f, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(row))
        w.writeheader()
        w.writerows([row, *more])
    return str(f)


# Narayanan et al.'s first run on 8 GPUs with a batch of 63: dp 8 divides no batch of 63 (batch_not_divide)
UNPRICED = {"dp": "8", "num_gpus": "8", "global_batch": "63"}


def test_runs_the_model_cannot_price_are_refused_not_averaged_as_inf(tmp_path):
    csv_file = _one_run(tmp_path, **UNPRICED)
    needle = f"{csv_file}: expected at least one run the model can price, got '1 run(s), none priced (gpt-1.7B: "
    one_error_line(cli("calibrate", csv_file, "--out", str(tmp_path / "hw.json")), needle)
    one_error_line(cli("validate", csv_file), needle)
    one_error_line(cli("validate", csv_file, "--json"), needle)
    two = _one_run(tmp_path, {**next(csv.DictReader(open(csv_file))), "name": "again"}, **UNPRICED)
    one_error_line(cli("validate", two, "--write-bands", str(tmp_path / "b.json")), "2 run(s), none priced")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.csv"]  # nothing written, no warning printed


def test_calibrate_fits_the_runs_it_can_price_beside_one_it_cannot(tmp_path):
    # Narayanan et al.'s first run 25% slower than published, and a run the model cannot price: the fit uses the
    # first (before, an unpriced run made every candidate's error inf: the defaults were written unchanged)
    row = next(csv.DictReader(open(NARAYANAN)))
    slow = str(float(row["measured_iteration_time_s"]) * 1.25)
    csv_file = _one_run(tmp_path, {**row, **UNPRICED, "name": "unpriced"}, measured_iteration_time_s=slow)
    got = cli("calibrate", csv_file, "--out", str(tmp_path / "hw.json"))
    assert got.returncode == 0, got.stderr
    before, after = (float(x) for x in re.findall(r"([0-9.]+)% (?:before|after)", got.stdout))
    assert before > 15 and after < before / 3


def test_zero_sequence_length_says_what_is_expected(tmp_path):
    csv_file = _one_run(tmp_path, seq_len="0")
    one_error_line(cli("validate", csv_file), "seq_len: expected an integer >= 1 (this column may not be empty), "
                   "got '0'")


@pytest.mark.parametrize("where", UNWRITABLE)
def test_calibrate_and_write_bands_to_a_path_that_cannot_be_written(tmp_path, monkeypatch, where):
    csv_file = _one_run(tmp_path)
    old, out = unwritable_path(tmp_path, monkeypatch, where, "old.json")
    for argv in (["calibrate", csv_file, "--out", out], ["validate", "narayanan2021-table1", "--write-bands", out]):
        flag = argv[2]
        one_error_line(cli(*argv), f"plansweep {argv[0]}: error: {flag}: expected a writable file path, got '{out}")
        assert old.read_text() == "old\n"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["dir", "old.json", "one.csv"]
        assert list((tmp_path / "dir").iterdir()) == []


def test_bench_json_keys(capsys):
    assert main(["bench", "--rows", "20000", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert set(res) == {"strategies_per_s", "scalar_strategies_per_s", "ratio", "framework"}
    assert res["framework"] == "megatron-core"  # the default profile
    assert res["ratio"] == pytest.approx(res["strategies_per_s"] / res["scalar_strategies_per_s"])


def test_bench_with_fewer_rows_than_its_scalar_sample(capsys):
    # the scalar reference prices at most the rows evaluated (2,000 by default): 500 rows work
    assert main(["bench", "--rows", "500", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["strategies_per_s"] > 0


def test_calibrate_replaces_an_out_file_that_holds_no_constants_and_keeps_one_that_does(tmp_path):
    csv_file = _one_run(tmp_path)
    out = tmp_path / "hw.json"
    out.write_text("my notes\n")
    assert cli("calibrate", csv_file, "--out", str(out)).returncode == 0
    assert "my notes" not in out.read_text()
    out.write_text(json.dumps({"a100": {"kernel_overhead_s": 7e-5}}))
    assert cli("calibrate", csv_file, "--out", str(out)).returncode == 0
    assert json.loads(out.read_text())["A100-SXM4-80GB"]["kernel_overhead_s"] == 7e-5
