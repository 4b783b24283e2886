"""validate takes what sources publish: time, tokens/s, TFLOP/s, MFU or HFU; out-of-memory
runs keep a predicted time; --json is strict JSON."""

import csv
import json
from pathlib import Path

import pytest

from cli import main
from costmodel import InputError, model_preset
from costmodel._validate import flops_per_iteration, read_runs, validate

# GPT runs in the schema of the shipped sets, for the validator's mechanics, not its accuracy: the GPT configurations
# of Korthikanti et al. 2022 Table 3 (tp 8, micro-batch 1, seq 2048, vocab 51200, selective recompute with SP) and
# made-up measurements, every run at MFU 0.5 (156 TFLOP/s of the A100's 312), its time Eq. 7 FLOPs / (MFU x GPUs x
# 312e12) to 3 decimals.
_CONFIGS = (("gpt-22B", 8, 48, 6144, 64, 1, 4), ("gpt-175B", 64, 96, 12288, 96, 8, 64),
            ("gpt-530B", 280, 105, 20480, 128, 35, 280), ("gpt-1T", 512, 128, 25600, 160, 64, 512))
MFU, TFLOPS = 0.5, 156.0


def _eq7(B, L, h, s=2048, V=51200):
    return 72 * B * s * L * h**2 * (1 + s / (6 * h) + V / (12 * L * h))


def _strict(text: str):
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def _write(tmp_path, rows, name="runs.csv") -> Path:
    path = tmp_path / name
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def _rows():
    return [dict(name=name, source="synthetic", framework="generic", gpu="A100-SXM4-80GB", num_gpus=str(n),
                 gpus_per_node="8", layers=str(L), hidden=str(h), ffn_hidden=str(4 * h), heads=str(a), kv_heads=str(a),
                 seq_len="2048", vocab="51200", activation="gelu", tp="8", pp=str(pp), dp="1", cp="1", vpp="",
                 global_batch=str(B), micro_batch="1", recompute="selective", sequence_parallel="true", zero_stage="0",
                 measured_iteration_time_s=f"{_eq7(B, L, h) / (MFU * n * 312e12):.3f}", measured_tflops_per_gpu=str(TFLOPS),
                 tflops_convention="model_flops", measured_mfu=str(MFU))
            for name, n, L, h, a, pp, B in _CONFIGS]


def test_flop_conventions_by_hand():
    m = model_preset("gpt3-175b")  # l 96, h 12288, s 2048, V 51200
    B, s, L, h, V = 1536, 2048, 96, 12288, 51200
    assert flops_per_iteration(m, B, "narayanan_eq3") == pytest.approx(
        96 * B * s * L * h**2 * (1 + s / (6 * h) + V / (16 * L * h)), rel=1e-12)
    # The model's own count for a GPT shape is Korthikanti et al. 2022 Eq. 7 (no recompute).
    assert flops_per_iteration(m, B, "model_flops") == pytest.approx(
        72 * B * s * L * h**2 * (1 + s / (6 * h) + V / (12 * L * h)), rel=1e-9)
    assert flops_per_iteration(m, B, "causal_model_flops") == pytest.approx(
        72 * B * s * L * h**2 * (1 + s / (12 * h) + V / (12 * L * h)), rel=1e-9)
    assert flops_per_iteration(m, B, "6nd") == pytest.approx(6 * m.num_params() * B * s, rel=1e-12)
    n = m.num_params() - m.embedding_params()
    assert flops_per_iteration(m, B, "palm") == pytest.approx((6 * n + 12 * L * h * s) * B * s, rel=1e-12)


def test_a_row_with_only_mfu_is_compared_on_mfu(tmp_path):
    # The file's times were derived from its MFU by Eq. 7 FLOPs / (MFU x GPUs x 312e12), which
    # is the model's own FLOP count: with the time cell emptied the row is judged on MFU and
    # the error must be the same as on time, up to the file's rounding (3 decimals of s).
    rows = _rows()
    with_time = validate(read_runs(_write(tmp_path, rows, "with_time.csv")))["rows"]
    for r in rows:
        r["measured_iteration_time_s"] = r["measured_tflops_per_gpu"] = ""
    mfu_only = validate(read_runs(_write(tmp_path, rows)))["rows"]
    for a, b in zip(with_time, mfu_only, strict=True):
        assert b["compared_on"] == "mfu"
        assert b["measured_value"] == float(next(r for r in rows if r["name"] == b["name"])["measured_mfu"])
        assert b["error_pct"] == pytest.approx(a["error_pct"], abs=0.2)
        # the predicted MFU is the measured MFU scaled by measured / predicted time
        assert b["predicted_value"] == pytest.approx(
            b["measured_value"] * b["measured_iteration_time_s"] / b["predicted_iteration_time_s"], rel=1e-9)


def test_a_row_with_only_tflops_uses_its_convention(tmp_path, capsys):
    rows = _rows()
    for r in rows:
        r["measured_iteration_time_s"] = ""
        r["measured_mfu"] = ""
    path = _write(tmp_path, rows)
    res = validate(read_runs(path))
    for r in res["rows"]:
        assert r["compared_on"] == "tflops_per_gpu"
    # model_flops at 156 TFLOP/s: the 22B run's implied time, by hand (Eq. 7 over 8 GPUs)
    B, s, L, h, V = 4, 2048, 48, 6144, 51200
    eq7 = 72 * B * s * L * h**2 * (1 + s / (6 * h) + V / (12 * L * h))
    assert res["rows"][0]["measured_iteration_time_s"] == pytest.approx(eq7 / (156e12 * 8), rel=1e-9)
    rows[0]["tflops_convention"] = "furlongs"
    assert main(["validate", str(_write(tmp_path, rows, "bad.csv"))]) == 2
    err = capsys.readouterr().err.strip()
    assert ("bad.csv, row gpt-22B, line 2: tflops_convention: expected one of narayanan_eq3, model_flops, "
            "causal_model_flops, 6nd, palm") in err
    assert len(err.splitlines()) == 1


def test_a_row_with_nothing_measured_is_refused(tmp_path, capsys):
    rows = _rows()[:1]
    for k in ("measured_iteration_time_s", "measured_tflops_per_gpu", "measured_mfu"):
        rows[0][k] = ""
    assert main(["validate", str(_write(tmp_path, rows))]) == 2
    err = capsys.readouterr().err
    assert "runs.csv, row gpt-22B, line 2: measured_*: expected one of measured_iteration_time_s" in err


def test_out_of_memory_run_keeps_its_time_and_json_is_strict(tmp_path, capsys):
    # 22B on 8 A100-80GB with data parallelism only and no ZeRO: 18 bytes per parameter is
    # about 400 GB per GPU, so no setting fits; the time is still predicted, with the flag.
    rows = _rows()[:1]
    rows[0].update(name="22B-dp8", tp="1", pp="1", dp="8", global_batch="64", micro_batch="1",
                   sequence_parallel="false", measured_iteration_time_s="10.0")
    path = _write(tmp_path, rows)
    assert main(["validate", str(path), "--json"]) == 0
    res = _strict(capsys.readouterr().out)
    row = res["rows"][0]
    assert row["memory_fits"] is False
    assert row["predicted_memory_gb"] > 80 * 1.074  # over the 80 GiB of an A100-80GB
    assert row["predicted_iteration_time_s"] > 0 and row["error_pct"] is not None
    assert res["out_of_memory_runs"] == 1
    assert {"rows", "mean_abs_error_pct", "max_abs_error_pct"} <= set(res)


def test_an_impossible_run_is_null_with_its_reason_in_json(tmp_path, capsys):
    rows = _rows()[:2]
    rows[0].update(name="22B-tp6", tp="6", pp="1", dp="1", num_gpus="6", gpus_per_node="6")  # 64 heads
    assert main(["validate", str(_write(tmp_path, rows)), "--json"]) == 0
    res = _strict(capsys.readouterr().out)
    row = res["rows"][0]
    assert row["predicted_iteration_time_s"] is None and row["error_pct"] is None
    assert row["reason"] == "tp_not_divide_heads"
    assert res["unpriced_runs"] == 1 and res["mean_abs_error_pct"] == pytest.approx(abs(res["rows"][1]["error_pct"]))
    # alone, it leaves nothing to average: the file is refused
    assert main(["validate", str(_write(tmp_path, rows[:1], "alone.csv")), "--json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "expected at least one run the model can price, got '1 run(s), none priced " \
        "(22B-tp6: tp_not_divide_heads)'" in err


def test_measured_memory_is_compared(tmp_path):
    rows = _rows()[:2]
    base = validate(read_runs(_write(tmp_path, rows)))["rows"]
    rows[0]["measured_memory_gb"] = f"{base[0]['predicted_memory_gb'] / 1.25:.6f}"  # the model 25% high
    rows[1]["measured_memory_gb"] = ""
    res = validate(read_runs(_write(tmp_path, rows, "mem.csv")))
    assert res["rows"][0]["memory_error_pct"] == pytest.approx(25.0, abs=1e-3)
    assert "memory_error_pct" not in res["rows"][1]
    assert res["memory_mean_abs_error_pct"] == pytest.approx(25.0, abs=1e-3)
    assert res["memory_runs"] == 1  # the row without a figure not counted


def test_reserved_memory_is_a_bound_not_an_error(tmp_path):
    """A row whose memory_measure is "reserved" (the caching allocator's peak: torchtitan's logged memory) is kept out
    of the memory error and reported as the share it lies above the predicted live tensors."""
    rows = _rows()[:2]
    base = validate(read_runs(_write(tmp_path, rows)))["rows"]
    rows[0]["measured_memory_gb"] = f"{base[0]['predicted_memory_gb'] * 1.25:.6f}"  # reserved 25% over the prediction
    rows[0]["memory_measure"] = "reserved"
    rows[1]["measured_memory_gb"] = f"{base[1]['predicted_memory_gb'] / 1.25:.6f}"  # allocated, the model 25% high
    rows[1]["memory_measure"] = "allocated"
    res = validate(read_runs(_write(tmp_path, rows, "mem.csv")))
    assert res["memory_mean_abs_error_pct"] == pytest.approx(25.0, abs=1e-3)  # the allocated row only
    assert res["memory_runs"] == 1
    assert res["reserved_memory_runs"] == 1 and res["reserved_memory_below_prediction"] == 0
    assert res["reserved_memory_mean_above_pct"] == pytest.approx(25.0, abs=1e-3)  # 25% over the prediction
    rows[0]["memory_measure"] = "nvidia-smi"
    with pytest.raises(InputError, match="memory_measure"):
        read_runs(_write(tmp_path, rows, "bad.csv"))
