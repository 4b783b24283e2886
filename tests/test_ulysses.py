"""Context parallelism under the DeepSpeed profiles is DeepSpeed-Ulysses, as Megatron-DeepSpeed runs it
(--ds-sequence-parallel-size): an all-to-all of Q, K, V and the output each way, only at tp 1 and pp 1, on attention
with as many K, V heads as query heads. Against hand calculations and the framework's own asserts."""

import dataclasses
import subprocess
import sys

import numpy as np
import pytest

from costmodel import REASONS, StrategyTable, cluster_preset, evaluate, framework_preset, model_preset
from costmodel._reference import evaluate_row

DS = framework_preset("deepspeed-flash2")  # FlashAttention-2: no s x s scores at 32k tokens
MHA = dataclasses.replace(model_preset("megatron-22b"), seq_len=32768)  # 48 layers, 6,144 wide, 64 heads of 96


def _row(**c):
    cols = {"dp": 16, "tp": 1, "pp": 1, "cp": 4, "micro_batch": 1, "global_batch": 64, "zero_stage": 3,
            "recompute": "full", "sequence_parallel": False, "schedule": "1f1b", "vpp": 1, **c}
    return StrategyTable.from_columns(**cols)


def test_the_exchange_is_four_all_to_alls_each_way_by_hand():
    """cp 4 inside one 8-GPU H100 node: a rank holds 32,768 / 4 = 8,192 tokens; its Q, K, V and output are 4 x 8,192 x
    6,144 elements, 2 bytes each, of which 3/4 leave the GPU each way over NVLink at 450 GB/s x 0.8 (the preset's
    link efficiency), with 4 latencies of 5 us: 3/4 x 402,653,184 / 360e9 + 20e-6 = 858.86 us a layer forward, as
    much backward, and again in the forward full recompute runs before it. 48 layers, 64 / 16 = 4 micro-batches:
    48 x 4 x 3 x 858.86 us = 0.49470 s exposed."""
    cl = cluster_preset("h100x64")
    assert cl.scaleup_Bps == 450e9 and cl.gpu.link_eff == 0.8 and cl.scaleup_latency_s == 5e-6
    out = evaluate(MHA, cl, _row(), framework=DS)
    one = 0.75 * 4 * 8192 * 6144 * 2 / 360e9 + 4 * 5e-6
    assert out["cp_comm_s"][0] == pytest.approx(48 * 4 * 3 * one, rel=1e-9)
    assert np.isfinite(out["step_time_s"][0])


@pytest.mark.parametrize("c,model", [(dict(tp=2, dp=8), MHA),
                                     (dict(pp=2, dp=8, zero_stage=1), MHA),
                                     (dict(), dataclasses.replace(model_preset("llama3-8b"), seq_len=32768)),
                                     (dict(cp=64, dp=1), dataclasses.replace(model_preset("gpt3-175b"),
                                                                             seq_len=32768))],
                         ids=["tp2", "pp2", "grouped-kv-heads", "heads-not-divisible"])
def test_what_megatron_deepspeed_asserts_against_is_refused(c, model):
    """parallel_state.initialize_model_parallel asserts tp and pp 1; ParallelAttention asserts as many K, V heads as
    query heads (Llama 3 8B has 8 for 32) and the heads divisible by cp (GPT-3's 96 by 64 is not)."""
    cl = cluster_preset("h100x64")
    for fw in (DS, framework_preset("deepspeed")):
        out = evaluate(model, cl, _row(**c), framework=fw)
        assert REASONS[int(out["reason"][0])] == "framework_unsupported", fw.name
        ref = evaluate_row(model, cl, _row(**c).row(0), framework=fw)
        assert not np.isfinite(ref["step_time_s"]), fw.name
    # Megatron-Core's ring runs each of them (memory aside)
    mc = evaluate(model, cl, _row(**c), framework="megatron-core")
    assert REASONS[int(mc["reason"][0])] in ("ok", "out_of_memory")


def test_without_context_parallelism_the_same_layouts_run():
    cl = cluster_preset("h100x64")
    out = evaluate(MHA, cl, _row(cp=1, tp=2, pp=2, dp=16, zero_stage=1), framework=DS)
    assert REASONS[int(out["reason"][0])] in ("ok", "out_of_memory")


def test_the_scalar_reference_prices_it_alike():
    cl = cluster_preset("h100x64")
    table = _row(recompute="full")
    vec = evaluate(MHA, cl, table, framework=DS)
    ref = evaluate_row(MHA, cl, table.row(0), framework=DS)
    for k in ("step_time_s", "cp_comm_s", "compute_s", "recompute_s", "mem_total_bytes"):
        assert vec[k][0] == pytest.approx(ref[k], rel=1e-9), k


def test_evaluate_names_the_rule_in_one_line():
    out = subprocess.run([sys.executable, "-m", "cli", "evaluate", "--framework", "deepspeed", "--model", "llama3-8b",
                          "--cluster", "h100x64", "--dp", "32", "--cp", "2", "--global-batch", "64"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "cp: expected 1 for a model with grouped K, V heads under framework deepspeed" in out.stderr
    out = subprocess.run([sys.executable, "-m", "cli", "evaluate", "--framework", "deepspeed", "--model", "gpt3-175b",
                          "--cluster", "h100x64", "--dp", "16", "--tp", "2", "--cp", "2", "--global-batch", "64",
                          "--seq-len", "8192"], capture_output=True, text=True)
    assert out.returncode == 2 and "cp: expected 1 with tp=2, pp=1 under framework deepspeed" in out.stderr


def test_ulysses_needs_cp_to_divide_the_sequence_not_twice_cp():
    """Ulysses gives each rank a contiguous 1 / cp of the sequence (seq_length // ds_sequence_parallel_size): 2,050
    tokens run at cp 2 (1,025 a rank), where a load-balanced ring needs 2 cp = 4 to divide them; cp 4 divides
    neither."""
    model = dataclasses.replace(MHA, seq_len=2050)
    cl = cluster_preset("h100x64")
    for cp, ulysses_ok in ((2, True), (4, False)):
        table = _row(cp=cp, dp=64 // cp, global_batch=64)
        ds = REASONS[int(evaluate(model, cl, table, framework=DS)["reason"][0])]
        assert (ds != "cp_not_divide_seq") == ulysses_ok
        ref = evaluate_row(model, cl, table.row(0), framework=DS)
        assert REASONS[int(ref["reason"])] == ds
        assert REASONS[int(evaluate(model, cl, table, framework="megatron-core")["reason"][0])] == "cp_not_divide_seq"
