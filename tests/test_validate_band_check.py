"""`plansweep validate` holds each run against the error band plansweep gives a plan of its regime."""

import csv
import json
import math

import pytest

from cli import main
from costmodel._bands import BANDS_PATH
from costmodel._validate import MEASURED

NARAYANAN = MEASURED / "narayanan2021_table1.csv"
DELTA = 0.01  # how far past or short of the band's edge each run is put, in log space


def shipped_half_width(regime: str) -> float:
    """The half-width the shipped band table gives ``regime`` ("family x parallelism"), read from its JSON."""
    family, parallelism = regime.split(" x ")
    doc = json.loads(BANDS_PATH.read_text())
    return next(r["half_width"] for r in doc["regimes"] if (r["family"], r["parallelism"]) == (family, parallelism))


def hand_regime(row: dict) -> str:
    """The regime of a dense bf16 row without cp or ep, by the bands' rule: pp >= 16 a deep pipeline, tp > 1 or
    pp > 1 tensor / pipeline parallel, else data parallel; Narayanan et al.'s rows name the generic profile."""
    tp, pp = int(row["tp"]), int(row["pp"])
    return "generic x " + ("deep-pp" if pp >= 16 else "tp-pp" if tp > 1 or pp > 1 else "data-parallel")


def write_runs(path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def test_validate_says_whether_each_run_falls_inside_its_band(tmp_path, capsys):
    rows = list(csv.DictReader(open(NARAYANAN)))[1:4]  # tensor parallel 2, 4 and 8
    assert main(["validate", str(NARAYANAN), "--json"]) == 0
    predicted = [r["predicted_iteration_time_s"] for r in json.loads(capsys.readouterr().out)["rows"][1:4]]
    regime = hand_regime(rows[0])
    assert {hand_regime(r) for r in rows} == {regime}
    h = shipped_half_width(regime)
    # measured throughput / predicted = 1 + e (e the time error): just inside the band's slow edge, just past it,
    # just past its fast edge
    ratios = (math.exp(h - DELTA), math.exp(h + DELTA), math.exp(-h - DELTA))
    for r, p, k in zip(rows, predicted, ratios, strict=True):
        r["measured_iteration_time_s"] = repr(p / k)
        r["measured_tflops_per_gpu"] = r["measured_mfu"] = ""
    f = tmp_path / "runs.csv"
    write_runs(f, rows)
    assert main(["validate", str(f), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert [r["inside_band"] for r in res["rows"]] == [True, False, False]
    for r in res["rows"]:
        assert r["regime"] == regime
        assert r["band_low_pct"] == pytest.approx(100 * (math.exp(-h) - 1))
        assert r["band_high_pct"] == pytest.approx(100 * (math.exp(h) - 1))
    assert (res["band_checked_runs"], res["inside_band_runs"]) == (3, 1)
    [summary] = res["regimes"]
    assert summary["regime"] == regime and summary["runs"] == 3 and summary["inside_band"] == 1
    assert summary["mean_abs_error_pct"] == pytest.approx(100 * sum(abs(k - 1) for k in ratios) / 3, rel=1e-6)
    assert main(["validate", str(f)]) == 0
    out = capsys.readouterr().out
    assert "inside plansweep's error bands: 1 of 3 priced run(s) (33%)" in out
    assert [line.split()[4] for line in out.splitlines()[1:4]] == ["in", "out", "out"]


def test_a_run_the_model_cannot_price_is_not_held_to_a_band(tmp_path, capsys):
    rows = list(csv.DictReader(open(NARAYANAN)))[:2]
    assert rows[1]["pp"] == "1"
    rows[1]["vpp"] = "4"  # virtual stages without a pipeline: no schedule runs it, so the model prices nothing
    f = tmp_path / "runs.csv"
    write_runs(f, rows)
    assert main(["validate", str(f), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["rows"][1]["error_pct"] is None and res["rows"][1]["inside_band"] is None
    assert res["band_checked_runs"] == 1 and [g["runs"] for g in res["regimes"]] == [1]


def test_validate_notes_a_figure_repeated_across_layouts(tmp_path, capsys):
    # Two of Narayanan et al.'s rows of one model and GPU count, the second given the first's step time under its
    # own layout: validate says so (text and JSON), and says nothing of the file as published.
    rows = list(csv.DictReader(open(NARAYANAN)))[:1] * 2
    rows = [dict(rows[0], name="a"), dict(rows[0], name="b", tp=str(int(rows[0]["tp"]) * 2),
                                                  dp=str(max(int(rows[0]["dp"]) // 2, 1)))]
    f = tmp_path / "runs.csv"
    write_runs(f, rows)
    assert main(["validate", str(f), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["repeated_figures"] == [["a", "b"]]
    assert main(["validate", str(f)]) == 0
    assert "note: b publishes the same figure as a, another layout" in capsys.readouterr().out
    assert main(["validate", str(NARAYANAN), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["repeated_figures"] == []
