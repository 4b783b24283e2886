"""The wide validation set (tests/data/validation/published_runs.csv): the rows are coherent,
their published quantities agree with each other, and it covers what issue 13 asks."""

import csv
from pathlib import Path

import pytest

from costmodel import gpu_preset
from costmodel._validate import flops_per_iteration, read_runs

DATA = Path(__file__).parent / "data" / "validation" / "published_runs.csv"
ROWS = list(csv.DictReader(open(DATA)))
HELD_APART = ("Table 5", "Table 2", "MT-NLG", "Megatron-Turing", "Table 4")


def _i(r, k):
    return int(r[k]) if r[k] else None


def test_the_set_covers_what_was_asked():
    assert len(ROWS) >= 40
    assert len({r["source"] for r in ROWS}) >= 6
    assert sum(1 for r in ROWS if r["measured_memory_gb"]) >= 5
    assert {r["framework"].split("-")[0] for r in ROWS} >= {"megatron", "fsdp2", "deepspeed", "llm"}
    assert {gpu_preset(r["gpu"]).name.split("-")[0] for r in ROWS} >= {"A100", "H100"}
    assert {int(r["pp"]) > 1 for r in ROWS} == {True, False}
    assert {int(r["zero_stage"]) for r in ROWS if r["zero_stage"]} >= {1, 2, 3}
    assert any(r["activation"] == "swiglu" and int(r["kv_heads"]) < int(r["heads"]) for r in ROWS)
    sizes = [int(r["layers"]) * 12 * int(r["hidden"]) ** 2 for r in ROWS]
    assert min(sizes) < 2e9 and max(sizes) > 4e11


def test_no_held_apart_figures():
    for r in ROWS:
        text = r["source"] + " " + r["page"]
        if "Narayanan" in text or "Korthikanti" in text or "Llama 3 Herd" in text or "Dubey" in text:
            assert not any(h in text for h in HELD_APART), r["name"]
        assert "MT-NLG" not in text and "Megatron-Turing" not in text, r["name"]


@pytest.mark.parametrize("r", ROWS, ids=[r["name"] for r in ROWS])
def test_each_row_is_coherent(r):
    n, tp, pp, dp, cp = (_i(r, k) for k in ("num_gpus", "tp", "pp", "dp", "cp"))
    assert tp * pp * dp * cp == n
    assert n % int(r["gpus_per_node"]) == 0 or n < int(r["gpus_per_node"])
    heads, kv, h = int(r["heads"]), int(r["kv_heads"]), int(r["hidden"])
    assert h % heads == 0 and heads % kv == 0 and heads % tp == 0
    b = _i(r, "micro_batch")
    if b:
        assert int(r["global_batch"]) % (dp * b) == 0
    assert r["source"] and r["page"]
    gpu_preset(r["gpu"])  # a known preset


def test_published_quantities_agree_with_each_other():
    # Where a source gives two of tokens/s, TFLOP/s and MFU, they must agree under the row's
    # counting convention: a check on the transcription (and on the convention named).
    runs = {run.name: run for run in read_runs(DATA)}
    checked = 0
    for r in ROWS:
        run = runs[r["name"]]
        B, s = int(r["global_batch"]), int(r["seq_len"])
        peak = run.cluster.gpu.peak_flops[0]
        tok, tf, mfu = (float(r[k]) if r[k] else None for k in
                        ("measured_tokens_per_s_per_gpu", "measured_tflops_per_gpu", "measured_mfu"))
        if tf and mfu:  # MFU is TFLOP/s over the dense bf16 peak
            assert tf * 1e12 / peak == pytest.approx(mfu, abs=0.006), r["name"]
            checked += 1
        if tok and tf:  # TFLOP/s = tokens/s x FLOPs per token of the row's convention
            per_token = flops_per_iteration(run.model, B, r["tflops_convention"]) / (B * s)
            assert tok * per_token / 1e12 == pytest.approx(tf, rel=0.025), r["name"]
            checked += 1
        if tok and mfu:  # LLM Foundry's MFU: (6 N + 12 L h s) per token (its README's formula)
            m = run.model
            per_token = 6 * m.num_params() + 12 * m.layers * m.hidden * s
            assert tok * per_token / peak == pytest.approx(mfu, rel=0.005), r["name"]
            checked += 1
    assert checked >= 25


def test_the_llm_foundry_calibration_rows_are_apart_from_the_validation_rows():
    # The A100 Triton attention rate is chosen on these rows (benchmarks/llm_foundry_calibration.py); none is a
    # validation row (same MPT size, GPU, GPU count and sequence length), every one is LLM Foundry's A100 table's.
    cal = list(csv.DictReader(open(DATA.parent / "llm_foundry_calibration.csv")))
    key = lambda r: (int(r["layers"]), int(r["hidden"]), gpu_preset(r["gpu"]).name, r["num_gpus"], r["seq_len"])  # noqa: E731
    assert len(cal) == 74 and not {key(r) for r in cal} & {key(r) for r in ROWS}
    assert {gpu_preset(r["gpu"]).name for r in cal} == {"A100-SXM4-80GB", "A100-SXM4-40GB"}
    assert all(r["source"].startswith("mosaicml/llm-foundry") and r["framework"].startswith("llm-foundry-triton")
               for r in cal)
    for run, r in zip(read_runs(DATA.parent / "llm_foundry_calibration.csv"), cal, strict=True):
        assert run.model.layers == int(r["layers"]) and run.cluster.num_gpus == int(r["num_gpus"])
