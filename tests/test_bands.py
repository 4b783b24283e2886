"""Error bands (costmodel._bands): regimes of plans, conformal bands worked out by hand, the fallback of sparse regimes,
leave-one-source-out coverage, the shipped table against what `plansweep validate --write-bands` computes, and the band
in evaluate, rank / show and the Parquet rows."""

import json
import math
import warnings

import numpy as np
import pytest

from cli import main
from costmodel import FRAMEWORKS, InputError, StrategyTable, framework_names
from costmodel import _bands as bands
from costmodel._bands import (
    BANDS_PATH,
    FAMILIES,
    FAMILY_OF_PROFILE,
    PARALLELISMS,
    bands_from_json,
    choose_level,
    conformal_half_width,
    error_bands,
    family_codes,
    leave_one_source_out,
    min_runs,
    parallelism_codes,
    resolve_bands,
    source_group,
)
from tests.conftest import ROOT

PUBLISHED = ROOT / "tests" / "data" / "validation" / "published_runs.csv"
F = {name: i for i, name in enumerate(FAMILIES)}
P = {name: i for i, name in enumerate(PARALLELISMS)}


def test_a_row_takes_the_first_parallelism_family_it_is():
    table = StrategyTable.from_columns(
        tp=[1, 8, 1, 8, 4, 1, 2, 8, 1, 8, 1],
        pp=[1, 1, 1, 16, 8, 1, 1, 16, 2, 15, 1],
        dp=[8, 4, 4, 1, 1, 2, 1, 1, 4, 1, 4],
        cp=[1, 1, 2, 1, 1, 4, 1, 2, 1, 1, 2],
        ep=[1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 1],
        precision=["bf16", "bf16", "fp8", "fp8", "fp8", "bf16", "fp8", "bf16", "bf16", "bf16", "bf16"],
        global_batch=64)
    # sequences of 131,072 tokens on rows 3, 6, 7 and 8 (one a row), 8,192 elsewhere: long context takes every long
    # row but an MoE one, whatever its cp; cp 2 at 8k is a model-parallel layout (fp8 first where it is fp8)
    seq = [8192, 8192, 8192, 8192, 8192, 131072, 131072, 131072, 131072, 8192, 8192]
    expected = ["data-parallel", "tp-pp", "fp8", "deep-pp", "fp8", "long-context", "moe", "long-context",
                "long-context", "tp-pp", "tp-pp"]
    assert [PARALLELISMS[c] for c in parallelism_codes(table, seq)] == expected
    assert [PARALLELISMS[c] for c in parallelism_codes(table, 65536)][:3] == ["long-context"] * 3  # one length
    assert [PARALLELISMS[c] for c in parallelism_codes(table, 65535)][:3] == ["data-parallel", "tp-pp", "fp8"]


def test_a_placed_row_is_model_parallel_when_any_stage_has_tp():
    table = StrategyTable.from_columns(stage_tp=[[4], [1]], stage_dp=[[2], [8]], stage_layers=[[32], [32]],
                                       microbatches=4, global_batch=64)
    assert [PARALLELISMS[c] for c in parallelism_codes(table, 2048)] == ["tp-pp", "data-parallel"]


def test_every_profile_has_a_family_and_aliases_resolve():
    assert set(FRAMEWORKS) <= set(FAMILY_OF_PROFILE)
    assert set(FAMILY_OF_PROFILE.values()) <= set(FAMILIES)
    names = ["megatron-core", "torchtitan", "megatron-deepspeed", "llm-foundry-triton-pure", "generic", "hai-llm"]
    want = [F["megatron"], F["fsdp"], F["deepspeed"], F["fsdp"], F["generic"], F["megatron"]]
    assert family_codes(np.array(names), 6).tolist() == want
    codes = np.array([framework_names().index(bands.framework_preset(n).name) for n in names])
    assert family_codes(codes, 6).tolist() == want
    assert family_codes("megatron-bridge", 3).tolist() == [F["megatron"]] * 3
    with pytest.raises(InputError, match="framework"):
        family_codes(np.array(["fsdp2", "fsdp2"]), 3)


def test_conformal_bound_is_the_ceil_level_n_plus_1_th_residual():
    # k = ceil(0.8 * 5) = 4 of 4; ceil(0.8 * 10) = 8 of 9; ceil(0.8 * 4) = 4 > 3 runs: none
    assert conformal_half_width(np.array([0.04, 0.01, 0.03, 0.02]), 0.8) == 0.04
    assert conformal_half_width(np.arange(1, 10) / 100, 0.8) == 0.08
    assert conformal_half_width(np.array([0.01, 0.02, 0.03]), 0.8) == math.inf
    assert (min_runs(0.8), min_runs(0.85), min_runs(0.9)) == (4, 6, 9)


def _tiny():
    """Four megatron x tp-pp runs, five fsdp x data-parallel, one fsdp x tp-pp (residuals by hand)."""
    r = np.array([0.01, -0.02, 0.03, -0.05, 0.10, -0.04, 0.02, 0.06, -0.08, 0.20])
    fam = np.array([F["megatron"]] * 4 + [F["fsdp"]] * 6)
    par = np.array([P["tp-pp"]] * 4 + [P["data-parallel"]] * 5 + [P["tp-pp"]])
    return r, fam, par


def test_sparse_regimes_borrow_their_parallelism_band_then_the_widest():
    b = resolve_bands(*_tiny(), 0.8)
    h = lambda f, p: b.half_width[F[f], P[p]]  # noqa: E731
    assert h("megatron", "tp-pp") == 0.05  # 4 runs: the 4th of |.01 .02 .03 .05|
    assert h("fsdp", "data-parallel") == 0.10  # 5 runs: k = ceil(4.8) = 5
    # 1 run: too few; the tp-pp band over both families, |.01 .02 .03 .05 .20|, k = 5
    assert h("fsdp", "tp-pp") == 0.20
    assert b.label[F["fsdp"], P["tp-pp"]] == "fsdp x tp-pp (1 run: too few; the tp-pp band of 5 runs)"
    assert h("megatron", "data-parallel") == 0.10 and b.runs[F["megatron"], P["data-parallel"]] == 0
    # no long-context run anywhere: the widest band of any regime with 4+ runs (tp-pp's 0.20; all runs: k = 9 of 10,
    # 0.10)
    assert h("deepspeed", "long-context") == 0.20
    assert b.label[F["deepspeed"], P["long-context"]].endswith(
        "long-context 0 runs: too few; the widest band, tp-pp's)")


def test_a_sparse_deep_pipeline_borrows_the_pipeline_band_not_the_widest():
    # 4 megatron x tp-pp runs |.01 .02 .03 .05|, 5 fsdp x data-parallel up to .30, one megatron x deep-pp run
    r = np.array([0.01, -0.02, 0.03, -0.05, 0.10, -0.04, 0.02, 0.06, -0.30, 0.02])
    fam = np.array([F["megatron"]] * 4 + [F["fsdp"]] * 5 + [F["megatron"]])
    par = np.array([P["tp-pp"]] * 4 + [P["data-parallel"]] * 5 + [P["deep-pp"]])
    b = resolve_bands(r, fam, par, 0.8)
    assert b.half_width[F["megatron"], P["deep-pp"]] == 0.05  # tp-pp's 4 runs, k = 4: not data-parallel's 0.30
    assert b.label[F["megatron"], P["deep-pp"]] == "megatron x deep-pp (1 run: too few; the tp-pp band of 4 runs)"
    assert b.half_width[F["megatron"], P["long-context"]] == 0.30  # no long-context run, no parent: the widest


def test_a_borrowing_regime_holds_its_own_runs_on_the_side_they_fall():
    # _tiny's regimes and two deepspeed x data-parallel runs at -0.90 and +0.05 (too few for a band of their own)
    r, fam, par = _tiny()
    r, fam, par = (np.r_[r, -0.90, 0.05], np.r_[fam, F["deepspeed"], F["deepspeed"]],
                   np.r_[par, P["data-parallel"], P["data-parallel"]])
    b = resolve_bands(r, fam, par, 0.8)
    at = F["deepspeed"], P["data-parallel"]
    # the data-parallel family's 7 runs |.02 .04 .05 .06 .08 .10 .90|: k = ceil(0.8 x 8) = 7, the largest, 0.90
    assert b.half_width[at] == 0.90 and b.half_low[at] == 0.90 and b.half_high[at] == 0.90
    # with the family's band narrower than the regime's own run: two fsdp runs more at .01 make k = 8 of 9 = .10
    r2, fam2, par2 = (np.r_[r, 0.01, 0.01], np.r_[fam, F["fsdp"], F["fsdp"]],
                      np.r_[par, P["data-parallel"], P["data-parallel"]])
    b = resolve_bands(r2, fam2, par2, 0.8)
    assert b.half_width[at] == 0.10  # borrowed: k = 8 of the family's 9, |.01 .01 .02 .04 .05 .06 .08 .10 .90|
    assert b.half_low[at] == 0.90 and b.half_high[at] == 0.10  # the -0.90 run held; +0.05 is inside already
    assert b.label[at] == ("deepspeed x data-parallel (2 runs: too few; the data-parallel band of 9 runs, the low "
                           f"side to {100 * math.expm1(-0.90):+.1f}% to hold its own runs)")
    assert b.inside(np.array([-0.90, -0.91, 0.10, 0.11]), np.full(4, at[0]), np.full(4, at[1])).tolist() == [
        True, False, True, False]
    # a regime with a conformal band of its own keeps it symmetric: fsdp x data-parallel's 7, .01 .01 .02 .04 .06
    # .08 .10, k = 7
    own = F["fsdp"], P["data-parallel"]
    assert b.half_low[own] == b.half_high[own] == b.half_width[own] == 0.10
    table = StrategyTable.from_columns(tp=1, pp=1, dp=8, global_batch=64)
    out = error_bands(np.array([1000.0]), table, "deepspeed", 4096, b)
    assert out["low"][0] == pytest.approx(1000 * math.exp(-0.90)) and out["high"][0] == pytest.approx(
        1000 * math.exp(0.10))


def test_a_band_is_the_prediction_times_exp_minus_and_plus_h():
    b = resolve_bands(*_tiny(), 0.8)
    table = StrategyTable.from_columns(tp=[1, 8], pp=[1, 2], dp=[8, 4], global_batch=64)
    out = error_bands(np.array([1000.0, 2000.0]), table, np.array(["llm-foundry", "megatron-core"]), 4096, b)
    assert out["low"] == pytest.approx([1000 * math.exp(-0.10), 2000 * math.exp(-0.05)])
    assert out["high"] == pytest.approx([1000 * math.exp(0.10), 2000 * math.exp(0.05)])
    assert out["regime"].tolist() == ["fsdp x data-parallel", "megatron x tp-pp"]
    assert out["runs"].tolist() == [5, 4]


def test_too_few_runs_for_any_band_is_one_clear_error():
    with pytest.raises(InputError, match="at least 4 priced runs"):
        resolve_bands(np.array([0.1, 0.2, 0.3]), np.zeros(3, dtype=int), np.zeros(3, dtype=int), 0.8)


def test_leave_one_source_out_by_hand():
    # one regime; without A: |.03 .04 .05 .30| -> .30; without B: .30; without C: |.01 .02 .03 .04| -> .04
    r = np.array([0.01, 0.02, 0.03, -0.04, 0.05, -0.30])
    src = np.array(["A", "A", "B", "B", "C", "C"])
    z = np.zeros(6, dtype=int)
    inside, half = leave_one_source_out(r, z, z, src, 0.8)
    assert inside.tolist() == [True, True, True, True, False, False]
    assert half.tolist() == [0.30, 0.30, 0.30, 0.30, 0.04, 0.04]


def test_the_level_is_the_least_whose_coverage_reaches_the_target(monkeypatch):
    # 20 runs, source i holds |r| = i/100 and (i + 10)/100. At 0.5 (k = 10 of 18): without source 1 the bound is
    # .12 (both in), without source i >= 2 it is .11 and (i + 10)/100 is out: 11/20. At 0.8 (k = 16 of 18): the bound
    # is .18 for i <= 7 (both in), .17 for i >= 8 ((i + 10)/100 out): 17/20.
    i = np.arange(1, 11)
    r = np.concatenate([i, i + 10]) / 100
    src = np.concatenate([i, i]).astype(str)
    z = np.zeros(20, dtype=int)
    monkeypatch.setattr(bands, "LEVELS", (0.5, 0.8))
    assert leave_one_source_out(r, z, z, src, 0.5)[0].mean() == pytest.approx(11 / 20)
    level, cover = choose_level(r, z, z, src)
    assert level == 0.8 and cover == pytest.approx(17 / 20)


def test_a_source_is_its_first_word_else_the_run():
    assert source_group("pytorch/torchtitan benchmarks/asyncTP_llama3.md (June 2025)", "x") == "pytorch/torchtitan"
    assert source_group("NVIDIA Megatron-LM README, Performance", "x") == "NVIDIA"
    assert source_group("Jiang et al. 2024, MegaScale", "x") == "Jiang"
    assert source_group("", "mpt-7b") == "run mpt-7b"


def test_the_shipped_table_is_what_validate_computes_from_the_shipped_runs():
    """costmodel/data/error_bands.json must be regenerated when the model or the published runs change:
    plansweep validate tests/data/validation/published_runs.csv --write-bands costmodel/data/error_bands.json"""
    import hashlib

    from costmodel._validate import band_table_of, read_runs, validate

    shipped = json.loads(BANDS_PATH.read_text())
    assert shipped["origin"]["file"] == "tests/data/validation/published_runs.csv"
    assert shipped["origin"]["sha256"] == hashlib.sha256(PUBLISHED.read_bytes()).hexdigest(), "CSV changed: regenerate"
    runs = read_runs(PUBLISHED)
    fresh = band_table_of(PUBLISHED, runs, validate(runs))
    assert shipped["origin"]["rows"] == fresh["origin"]["rows"] == len(runs)
    for key in ("format", "level", "min_runs", "families", "parallelisms", "priced_runs"):
        assert shipped[key] == fresh[key], key
    assert shipped["loso_coverage"] == pytest.approx(fresh["loso_coverage"], abs=1e-4)
    for old, new in zip(shipped["regimes"], fresh["regimes"], strict=True):
        assert (old["regime"], old["runs"], old["sources"]) == (new["regime"], new["runs"], new["sources"])
        for side in ("half_width", "half_low", "half_high"):
            assert old[side] == pytest.approx(new[side], abs=2e-6), (old["regime"], side)
    for old, new in zip(shipped["runs"], fresh["runs"], strict=True):
        assert old["name"] == new["name"] and old["error_pct"] == pytest.approx(new["error_pct"], abs=1e-3)
    for old, new in zip(shipped["gpus"], fresh["gpus"], strict=True):
        assert (old["gpu"], old["runs"]) == (new["gpu"], new["runs"])
        assert old["mean_abs_error_pct"] == pytest.approx(new["mean_abs_error_pct"], abs=1e-3)
    assert shipped["loso_coverage"] >= 0.8  # calibrated: the brief's leave-one-source-out target


def test_a_damaged_band_table_is_refused_in_one_line(tmp_path):
    doc = json.loads(BANDS_PATH.read_text())
    with pytest.raises(InputError, match="format"):
        bands_from_json({**doc, "parallelisms": ["tp-pp"]}, "t.json")
    with pytest.raises(InputError, match="half-widths"):
        bands_from_json({**doc, "regimes": [{**c, "half_width": -1.0} for c in doc["regimes"]]}, "t.json")
    with pytest.raises(InputError, match="each side at least the half-width"):
        bands_from_json({**doc, "regimes": [{**c, "half_low": 0.5 * c["half_width"]} for c in doc["regimes"]]},
                        "t.json")
    # a table written before the two sides: each side the half-width
    old = bands_from_json({**doc, "regimes": [{k: v for k, v in c.items() if k not in ("half_low", "half_high")}
                                              for c in doc["regimes"]]}, "t.json")
    assert np.array_equal(old.half_low, old.half_width) and np.array_equal(old.half_high, old.half_width)
    bad = tmp_path / "b.json"
    bad.write_text("{")
    with pytest.raises(InputError, match=str(bad)):
        bands.shipped_bands(str(bad))


def test_validate_writes_the_band_table_and_refuses_a_directory(tmp_path, capsys):
    out = tmp_path / "bands.json"
    assert main(["validate", "narayanan2021-table1", "--write-bands", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["origin"]["file"] == "narayanan2021-table1" and doc["origin"]["rows"] == 10
    # Table 1: tp 1 pp 1 once; tp 2-8 with pp 1-8 six times; pp 16, 35, 64
    # the set's framework cells name generic, the profile its figures were computed under
    cells = {c["parallelism"]: c["runs"] for c in doc["regimes"] if c["family"] == "generic"}
    assert (cells["data-parallel"], cells["tp-pp"], cells["deep-pp"]) == (1, 6, 3)
    assert doc["loso_coverage"] == 0.0  # one source: no band without it
    assert "error bands at conformal level" in capsys.readouterr().out
    assert main(["validate", "narayanan2021-table1", "--write-bands", str(tmp_path)]) == 2
    assert "--write-bands: expected a writable file path" in capsys.readouterr().err


def test_a_band_table_of_no_priced_run_is_one_error_and_no_warning():
    # two runs the model could not price (error inf): fewer than the 4 a band needs, said before any mean of nothing
    codes = np.zeros(2, dtype=int)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InputError, match="expected at least 4 priced runs to compute error bands, got 0"):
            bands.band_table([math.inf, math.inf], codes, codes, ["a", "b"], ["x", "y"], {})


def test_write_bands_holds_the_runs_to_the_table_it_writes(tmp_path, capsys, monkeypatch):
    """--write-bands prices, writes the table, then holds each run to it: a shipped table it cannot read (an older
    layout of the regimes) does not stop it, and the check's band is the one written (Narayanan et al.'s ten runs,
    one source: every regime's band is the widest of the table's own runs)."""
    def unreadable(*_):
        raise InputError("costmodel/data/error_bands.json", "a band table of the current layout", "an older one")

    monkeypatch.setattr(bands, "shipped_bands", unreadable)
    assert main(["validate", "narayanan2021-table1"]) == 2  # without --write-bands the shipped table is needed
    capsys.readouterr()
    out = tmp_path / "bands.json"
    assert main(["validate", "narayanan2021-table1", "--write-bands", str(out), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    doc = json.loads(out.read_text())
    half = {(c["family"], c["parallelism"]): c["half_width"] for c in doc["regimes"]}
    for row in res["rows"]:
        fam, par = row["regime"].split(" x ")
        assert row["band_high_pct"] == pytest.approx(100 * math.expm1(half[fam, par]))


def test_evaluate_json_carries_its_band(capsys):
    assert main(["evaluate", "--tp", "8", "--pp", "8", "--framework", "megatron-core", "--recompute", "selective",
                 "--sequence-parallel", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    band, t = doc["error_band"], doc["metrics"]["tokens_per_s"]
    assert set(band) == {"low", "high", "regime", "runs"}
    assert band["regime"] == "megatron x tp-pp" and band["runs"] >= 4
    assert band["low"] < t < band["high"]
    assert band["low"] * band["high"] == pytest.approx(t * t)  # T e^-h T e^h


def test_rank_and_show_print_the_half_width_and_mark_ties():
    from cli._cmd_show import format_rows

    rows = [{"tokens_per_s": 100.0, "tokens_per_s_low": 90.0, "tokens_per_s_high": 110.0},
            {"tokens_per_s": 95.0, "tokens_per_s_low": 85.0, "tokens_per_s_high": 105.0},  # 105 >= 90: tied
            {"tokens_per_s": 70.0, "tokens_per_s_low": 63.0, "tokens_per_s_high": 77.0}]  # 77 < 90
    text = format_rows(["tokens_per_s", "tokens_per_s_low", "tokens_per_s_high"], "tokens_per_s", rows)
    lines = text.splitlines()
    assert "±%" in lines[0]
    assert " 10.0 " in lines[1] and " 10.5~" in lines[2] and " 10.0 " in lines[3] and "~" not in lines[3]
    assert lines[-1].startswith("~ tied with #1 within the model's error")


def test_parquet_rows_carry_the_band():
    from costmodel import cluster_preset, evaluate, model_preset
    from sweep._results import to_arrow

    model, cluster = model_preset("gpt3-175b"), cluster_preset("h100x1024")
    table = StrategyTable.from_columns(dp=[16, 8, 128], tp=8, pp=[8, 16, 1], global_batch=1536,
                                       recompute="selective", sequence_parallel=True)
    metrics = evaluate(model, cluster, table, framework="megatron-core")
    arrow = to_arrow(table, metrics, run_id="r", model=model.name, cluster=cluster.name, framework="megatron-core",
                     iteration=0, grid_index=None)
    t = np.asarray(metrics["tokens_per_s"])
    lo, hi = arrow["tokens_per_s_low"].to_numpy(), arrow["tokens_per_s_high"].to_numpy()
    assert np.all(lo <= t) and np.all(t <= hi) and np.all((lo < hi) | (t == 0))
    shipped = bands.shipped_bands()
    cells = (F["megatron"], [P["tp-pp"], P["deep-pp"], P["tp-pp"]])  # pp 16: the deep-pipeline regime
    assert np.log(hi[t > 0] / t[t > 0]) == pytest.approx(shipped.half_high[cells][t > 0])
    assert np.log(t[t > 0] / lo[t > 0]) == pytest.approx(shipped.half_low[cells][t > 0])


def test_a_placed_plan_carries_its_band_too(capsys):
    assert main(["evaluate", "--model", "gpt3-175b", "--cluster", "a100x64+h100x64", "--strategy",
                 str(ROOT / "examples" / "plan.yaml"), "--framework", "megatron-core", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    band, t = doc["error_band"], doc["metrics"]["tokens_per_s"]
    assert band["regime"] == "megatron x tp-pp"  # tp 4 and 8, 8 stages, bf16
    assert band["low"] < t < band["high"]


def test_evaluate_names_the_record_of_the_plans_gpu_type(capsys):
    import csv as _csv

    from cli import main
    from costmodel import gpu_preset
    from costmodel._bands import gpu_record

    # the shipped table's GB200 runs: the published set's rows on GB200, counted from the file's gpu column
    rows = list(_csv.DictReader(PUBLISHED.open()))
    gb200 = gpu_preset("gb200").name
    record = gpu_record(gb200)
    assert record["runs"] == sum(1 for r in rows if gpu_preset(r["gpu"]).name == gb200) > 0
    assert gpu_record(gpu_preset("mi300x").name) is None  # no published MI300X run
    args = ["evaluate", "--model", "llama3-70b", "--dp", "8", "--tp", "4", "--pp", "2", "--micro-batch", "1",
            "--global-batch", "256", "--sequence-parallel", "--recompute", "full"]
    assert main([*args, "--cluster", "gb200x64"]) == 0
    assert f"on {gb200}: {record['runs']} published run(s)" in capsys.readouterr().out
    assert main([*args, "--cluster", "mi300xx64"]) == 0
    assert "no published run in the validation set" in capsys.readouterr().out
    assert main([*args, "--cluster", "gb200x64", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["gpu_record"] == record
