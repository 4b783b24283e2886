"""The validation set (tests/data/validation/published_runs.csv): the rows are coherent, their published quantities
agree with each other, it covers the regimes where a plan is chosen, and it holds none of the sets kept apart."""

import csv
import dataclasses
import importlib.util
from pathlib import Path

import pytest

from costmodel import gpu_preset, model_preset
from costmodel._frameworks import framework_preset
from costmodel._validate import flops_per_iteration, read_runs, repeated_figures

DATA = Path(__file__).parent / "data" / "validation" / "published_runs.csv"
ROWS = list(csv.DictReader(open(DATA)))
RUNS = {run.name: run for run in read_runs(DATA)}
_spec = importlib.util.spec_from_file_location(
    "validation_by_source", Path(__file__).parents[1] / "benchmarks" / "validation_by_source.py")
BY_SOURCE = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(BY_SOURCE)
_spec = importlib.util.spec_from_file_location(
    "moe_dropless_imbalance", Path(__file__).parents[1] / "benchmarks" / "moe_dropless_imbalance.py")
DROPLESS = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(DROPLESS)
# Kept apart from development, never a row (README.md): their arXiv ids, and the one table of each that is kept apart
# where only a table is (None: the whole paper's throughput figures).
HELD_APART = {"2205.05198": "Table 5",  # Korthikanti et al. 2022
              "2104.04473": "Table 2",  # Narayanan et al. 2021
              "2201.11990": None,  # Smith et al. 2022, MT-NLG
              "2407.21783": "Table 4"}  # Dubey et al. 2024, the Llama 3 paper
# Rows that cite one of those papers for another table, with the reason (README.md says the same). None today.
CITES_HELD_APART_PAPER: dict[str, str] = {}


def _i(r, k):
    return int(r[k]) if r[k] else None


def test_the_set_covers_what_was_asked():
    assert len(ROWS) >= 95
    groups = {BY_SOURCE.group_of(r["source"]) for r in ROWS}  # every source has its GROUPS entry
    assert len(groups) >= 10 and groups == {label for _, label in BY_SOURCE.GROUPS}
    assert sum(1 for r in ROWS if r["measured_memory_gb"]) >= 5
    assert {r["framework"].split("-")[0] for r in ROWS} >= {"megatron", "fsdp2", "deepspeed", "llm", "hai"}
    assert {gpu_preset(r["gpu"]).name.split("-")[0] for r in ROWS} >= {"A100", "A800", "H100", "H800", "H200", "B200"}
    assert {int(r["zero_stage"]) for r in ROWS if r["zero_stage"]} >= {1, 2, 3}
    assert any(r["activation"] == "swiglu" and int(r["kv_heads"]) < int(r["heads"]) for r in ROWS if r["kv_heads"])
    regimes = [BY_SOURCE.regime_of(run) for run in RUNS.values()]
    assert all(regimes.count(g) >= 3 for g in BY_SOURCE.REGIMES)
    runs = list(RUNS.values())
    n = lambda run: run.cluster.num_gpus  # noqa: E731
    asked = {  # the regimes where an answer is chosen, each with enough rows to say something
        "full sharding at >= 256 GPUs": [r for r in runs if r.fixed.get("zero_stage") == 3 and n(r) >= 256],
        "models >= 400B": [r for r in runs if r.model.num_params() >= 400e9],
        "pp >= 8 without recompute": [r for r in runs if r.fixed["pp"] >= 8 and r.fixed.get("recompute") == "none"],
        "cp >= 8 at >= 64k tokens": [r for r in runs if r.fixed.get("cp", 1) >= 8 and r.model.seq_len >= 65536],
        "MoE at >= 256 GPUs": [r for r in runs if r.model.is_moe and n(r) >= 256],
    }
    assert {k: len(v) >= 3 for k, v in asked.items()} == dict.fromkeys(asked, True)


def test_no_held_apart_figures():
    for r in ROWS:
        text = r["source"] + " " + r["page"]
        for arxiv, table in HELD_APART.items():
            if arxiv in text:
                assert r["name"] in CITES_HELD_APART_PAPER and table is not None and table not in text, r["name"]
        if "Narayanan" in text or "Korthikanti" in text or "Llama 3 Herd" in text or "Dubey" in text:
            assert not any(t in text for t in ("Table 5", "Table 2", "Table 4")), r["name"]
        assert "MT-NLG" not in text and "Megatron-Turing" not in text and "Smith et al. 2022" not in text, r["name"]


def test_no_shipped_or_test_set_holds_held_apart_figures():
    # Every CSV of measurements plansweep ships or tests with (costmodel/data/measured, tests/data): no row's source
    # or page cites a kept-apart table; Korthikanti et al. 2022 not at all, whatever republished its end-to-end
    # figures (the same MFUs and iteration times as its Table 5); Narayanan et al. 2021 from its Table 1 only.
    root = Path(__file__).parents[1]
    files = sorted((root / "costmodel" / "data" / "measured").glob("*.csv")) + sorted((root / "tests" / "data").rglob(
        "*.csv"))
    cited = 0
    for f in files:
        for r in csv.DictReader(line for line in open(f) if not line.startswith("#")):
            text = f"{r.get('source') or ''} {r.get('page') or ''}"
            where = (f.name, r.get("name") or r.get("label"))
            assert "2205.05198" not in text and "Korthikanti" not in text, where
            assert "2201.11990" not in text and "MT-NLG" not in text, where
            assert not ("2407.21783" in text and "Table 4" in text), where
            if "2104.04473" in text:
                cited += 1
                assert "Table 1" in text and "Table 2" not in text, where
    assert cited >= 10  # the shipped Narayanan et al. 2021 Table 1 set is among the files read


@pytest.mark.parametrize("r", ROWS, ids=[r["name"] for r in ROWS])
def test_each_row_is_coherent(r):
    run = RUNS[r["name"]]
    m, f = run.model, run.fixed
    n, tp, pp, dp, cp = run.cluster.num_gpus, f["tp"], f["pp"], f["dp"], f.get("cp", 1)
    assert tp * pp * dp * cp == n == int(r["num_gpus"])
    assert n % int(r["gpus_per_node"]) == 0 or n < int(r["gpus_per_node"])
    assert m.heads % tp == 0 and m.kv_heads % tp == 0 and m.heads % m.kv_heads == 0
    b = f.get("micro_batch")
    if b:
        assert f["global_batch"] % (dp * b) == 0
    if run.stage_layers:
        assert len(run.stage_layers) == pp and sum(run.stage_layers) == m.layers
    ep, etp = f.get("ep", 1), f.get("etp", 1)
    assert (ep, etp) == (1, 1) or m.is_moe
    if m.is_moe:  # Megatron-Core's MoE folding: etp x ep x edp = tp x cp x dp ranks of a stage; ep splits the experts
        assert m.experts % ep == 0 and (tp * cp * dp) % (ep * etp) == 0
    assert r["source"] and r["page"] and r["note"]
    gpu_preset(r["gpu"]), framework_preset(r["framework"])  # known names


def _hand_per_token(run, convention) -> float:
    """FLOPs a token under the row's convention, plus DeepSeek-V3's MTP layer where Megatron-Bridge counts it."""
    m = run.model
    per_token = flops_per_iteration(m, 1, convention) / m.seq_len
    if "MTP layer (tokens" in run_notes[run.name]:  # one more MoE layer (its attention over the causal half), the
        h, s = m.hidden, m.seq_len  # 2h x h projection and the head again, forward and backward
        per_token += 3 * (m.moe_layer_fwd_flops_per_token() - 2 * s * m.core_hidden + 2 * 2 * h * h
                          + m.head_fwd_flops_per_token())
    return per_token


run_notes = {r["name"]: r["note"] for r in ROWS}


def test_published_quantities_agree_with_each_other():
    # Where a source gives two of time, tokens/s, TFLOP/s and MFU, they must agree under the row's counting
    # convention: a check on the transcription (and on the convention named).
    checked = 0
    for r in ROWS:
        run = RUNS[r["name"]]
        B, s, n = run.fixed["global_batch"], run.model.seq_len, run.cluster.num_gpus
        peak = run.cluster.gpu.peak_flops[0]
        t, tok, tf, mfu = (float(r[k]) if r[k] else None for k in (
            "measured_iteration_time_s", "measured_tokens_per_s_per_gpu", "measured_tflops_per_gpu", "measured_mfu"))
        if tf and mfu:  # MFU is TFLOP/s over the dense bf16 peak
            assert tf * 1e12 / peak == pytest.approx(mfu, abs=0.006), r["name"]
            checked += 1
        if tok and tf:  # TFLOP/s = tokens/s x FLOPs per token of the row's convention
            assert tok * _hand_per_token(run, r["tflops_convention"]) / 1e12 == pytest.approx(tf, rel=0.025), r["name"]
            checked += 1
        if t and tf:  # TFLOP/s = FLOPs of the iteration / (time x GPUs)
            assert B * s * _hand_per_token(run, r["tflops_convention"]) / (t * n * 1e12) == pytest.approx(
                tf, rel=0.01), r["name"]
            checked += 1
        if tok and mfu:  # LLM Foundry's MFU: (6 N + 12 L h s) per token (its README's formula)
            m = run.model
            per_token = 6 * m.num_params() + 12 * m.layers * m.hidden * s
            assert tok * per_token / peak == pytest.approx(mfu, rel=0.005), r["name"]
            checked += 1
    assert checked >= 45


# Published parameter counts (total, active) of the MoE models the set holds, and the tolerance of the active count:
# Mixtral 8x7B: Jiang et al. 2024 (arXiv:2401.04088) Sec. 2, 46.7B / 12.9B (the figure's last digit: 1%). Qwen3:
# the model cards (huggingface.co/Qwen/Qwen3-235B-A22B, Qwen3-30B-A3B), "235B in total and 22B activated", "30.5B in
# total and 3.3B activated". DeepSeek-V3: deepseek-ai/DeepSeek-V3 README_WEIGHTS.md, main model 671B, 36.7B activated
# (0.9B embedding and 0.9B head included). The count from the configs' shapes (the presets; tests/test_moe_workloads.py
# holds them to the configs) is 3.35B for Qwen3-30B-A3B (the card's 3.3B cut, not rounded, at one decimal: 1.6% under)
# and 37.55B for DeepSeek-V3 (2.3% over the README's 36.7B; 61 layers of 187.0M MLA + 9 x 44.0M experts or the
# 396.4M dense FFN, routers, 1.85B embedding and head: the gap is not in the published structure): 2.5% for these two.
MOE_PUBLISHED = {"mixtral-8x7b": (46.7e9, 12.9e9, 0.01), "qwen3-235b-a22b": (235e9, 22e9, 0.01),
                 "qwen3-30b-a3b": (30.5e9, 3.3e9, 0.025), "deepseek-v3": (671e9, 36.7e9, 0.025),
                 # gpt-oss-120b's model card (arXiv:2508.10925 Table 1): 116.83B, 5.13B active without the embedding
                 "gpt-oss-120b": (116.83e9, 5.13e9 + 201088 * 2880, 0.002)}


def test_moe_rows_have_the_published_parameter_counts():
    seen = set()
    for r in ROWS:
        run = RUNS[r["name"]]
        if not run.model.is_moe:
            continue
        assert r["model"] in MOE_PUBLISHED, r["name"]  # every MoE row names a preset whose counts are published
        total, active, tol = MOE_PUBLISHED[r["model"]]
        assert run.model.num_params() == pytest.approx(total, rel=0.002), r["name"]
        assert run.model.active_params() == pytest.approx(active, rel=tol), r["name"]
        seen.add(r["model"])
    assert seen == set(MOE_PUBLISHED)
    # the hand count behind the 2.5% above: DeepSeek-V3 from its config's shapes
    h, q_lora, kv_lora, heads, nope, rope, v = 7168, 1536, 512, 128, 128, 64, 128
    mla = (h * q_lora + q_lora * heads * (nope + rope) + h * (kv_lora + rope) + kv_lora * heads * (nope + v)
           + heads * v * h)
    expert, dense_ffn = 3 * h * 2048, 3 * h * 18432
    norms = 2 * h + q_lora + kv_lora
    hand = (3 * (mla + dense_ffn + norms) + 58 * (mla + 9 * expert + h * 256 + norms)
            + 2 * 129280 * h + h)
    assert model_preset("deepseek-v3").active_params() == pytest.approx(hand, rel=1e-3)


def test_no_two_layouts_of_one_model_and_cluster_publish_the_same_figure():
    # README.md "Left out after judging them": two different layouts of one model on the same GPUs whose step time or
    # throughput agree in every printed digit are taken as a copied cell, not two runs.
    assert repeated_figures(list(RUNS.values())) == []


def test_the_check_for_repeated_figures_finds_a_copied_row():
    # one run copied under another layout (tp doubled, dp halved, its figure kept), and the same run repeated as is
    # (read_runs names each run's model after the run, as here)
    r = RUNS["zoo-qwen3-235b-h100-256gpu-deepep-ep32-1f1b-overlap"]
    copy = dataclasses.replace(r, name="copy", model=dataclasses.replace(r.model, name="copy"),
                               fixed={**r.fixed, "tp": 2 * r.fixed["tp"], "dp": r.fixed["dp"] // 2})
    assert repeated_figures([*RUNS.values(), copy]) == [(r.name, "copy")]
    assert repeated_figures([*RUNS.values(), dataclasses.replace(r, name="again")]) == []
    # the set's Megatron FSDP row as it was (another framework, tp, pp, dp, ZeRO and routing; 17.6 s): caught
    fsdp = dataclasses.replace(r, name="fsdp", model=dataclasses.replace(r.model, name="fsdp", capacity_factor=1.55),
                               framework="megatron-core-deepep", fixed={**r.fixed, "pp": 1, "dp": 128, "zero_stage": 3})
    assert repeated_figures([*RUNS.values(), fsdp]) == [(r.name, "fsdp")]
    # the figure one digit off is another run
    other = dataclasses.replace(copy, measured=r.measured * 1.001)
    assert repeated_figures([*RUNS.values(), other]) == []


def test_a_rows_routing_share_is_what_its_published_forced_dropless_pairs_imply():
    # README.md "Routing": only rows that routed by their router's own choice carry capacity_factor, each the busiest
    # rank's share a published forced / dropless pair of its model family implies through the model (the step-time
    # ratio is the TFLOP/s ratio: the two runs of a pair do the same FLOPs). Removing a cell, or moving a pair's
    # figures, fails here.
    cells = {r["name"]: float(r["capacity_factor"]) for r in ROWS if r["capacity_factor"]}
    assert cells == {"mcore-moe-mixtral-8x7b-h100-64gpu": 1.07}
    # Megatron-MoE-ModelZoo best_practice/Mixtral/run_mixtral_8x22B.sh at b09773a: forced around 465, dropless 445
    mixtral = DROPLESS.implied_share(DROPLESS.mixtral_8x22b_forced_run(), 465 / 445)
    assert round(mixtral, 2) == 1.07
    # best_practice/qwen3/readme.md at e865051, Long Context: forced / dropless at 16k, 32k, 64k, 128k tokens
    published = ((295, 237), (335, 277), (368, 320), (389, 357))
    qwen3 = [DROPLESS.implied_share(run, f / d) for run, (f, d) in zip(DROPLESS.pair_runs(), published, strict=True)]
    assert round(sum(qwen3) / len(qwen3), 2) == 1.54


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
