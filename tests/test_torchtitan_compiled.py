"""Compiled torchtitan's RoPE left to eager ATen and DTensor's copies around sequence-parallel collectives (the fsdp2
profile's eager_elem_bytes and sp_copy_bytes), each against a hand calculation."""

import dataclasses

import pytest

from costmodel import FRAMEWORKS, StrategyTable, cluster_preset, evaluate, framework_preset, model_preset
from costmodel._hardware import SUSTAINED_CLOCK

GPT3 = model_preset("gpt3-175b")  # 96 layers, hidden 12288 = q = hk (no GQA copies), seq 2048
H100 = cluster_preset("h100x1024")
RATE = 3.35e12 * 0.9 * SUSTAINED_CLOCK  # the H100's element-wise HBM rate, B/s


def _one(framework, **cols):
    cols = {"dp": 128, "tp": 8, "pp": 1, "micro_batch": 1, "global_batch": 1536, "sequence_parallel": "true",
            "zero_stage": 3, **cols}
    return evaluate(GPT3, H100, StrategyTable.from_columns(**cols), framework=framework)


def test_compiled_rope_moves_its_complex_products_bytes():
    # benchmarks/inductor_block_bytes.py: per element of Q and of K, 20 bytes forward (xq.float() 2 + 4, the eager
    # complex product 4 + 4, type_as 4 + 2), 20 backward, 20 again when recomputed: priced as eager code's 15 an
    # element (forward 15, backward 30, recompute 15). GPT-3 175B, tp 8: T = 2048 tokens a micro-batch, q + hk =
    # 24576 over 8 ranks: 15 x 2048 x 3072 = 94,371,840 bytes a layer forward; 12 micro-batches (1536 / dp 128) of
    # 96 layers; recompute none: 1 + 2 = 3 times, 0.0350 s a step more at 3.35 TB/s x 0.9 x SUSTAINED_CLOCK; full
    # recompute: 4 times.
    assert FRAMEWORKS["fsdp2"].eager_elem_bytes == (0.0, 15.0, 0.0)
    fused = dataclasses.replace(FRAMEWORKS["fsdp2"], name="fsdp2-fused-rope", eager_elem_bytes=(0.0, 0.0, 0.0))
    per_layer = 15 * 2048 * 24576 / 8
    for recompute, passes in (("none", 3), ("full", 4)):
        a, b = _one(fused, recompute=recompute), _one("fsdp2", recompute=recompute)
        got = (b["compute_s"][0] + b["recompute_s"][0]) - (a["compute_s"][0] + a["recompute_s"][0])
        assert got == pytest.approx(12 * 96 * passes * per_layer / RATE, rel=1e-9)
    assert framework_preset("llama3-fsdp").eager_elem_bytes == (0.0, 0.0, 0.0)  # Meta's own stack: not torchtitan's


def test_sequence_parallel_copies_around_dtensor_collectives():
    # Each of a layer's 2 all-gathers and 2 reduce-scatters forward copies the rank's b s h activation (read 2,
    # write 2 bytes an element): 4 x 4 x 2048 x 12288 = 402,653,184 bytes a layer, as many backward and again in full
    # recompute: 12 micro-batches x 96 layers x 3 passes = 0.4481 s of tp time a step (0.2987 s without recompute).
    # fp8 (torchao's float8 TP gathers fp8):
    # the all-gathers' copies move 2 bytes an element, 2 x 2 + 2 x 4 = 12 an element, 3 / 4 of that. Without
    # sequence parallelism (all-reduces of the replicated activation) or at tp 1: none.
    vanilla, fused = FRAMEWORKS["fsdp2"], FRAMEWORKS["fsdp2-async-tp"]
    assert vanilla.sp_copy_bytes == 4.0 and fused.sp_copy_bytes == 0.0
    assert dataclasses.replace(fused, name="fsdp2", what="", sources=(), sp_copy_bytes=4.0) == \
        dataclasses.replace(vanilla, what="", sources=())
    assert framework_preset("torchtitan-async-tp") is fused
    per_layer = 4 * 4 * 2048 * 12288
    for precision, share in (("bf16", 1.0), ("fp8", 0.75)):
        for recompute, passes in (("none", 2), ("full", 3)):
            a, b = _one(fused, recompute=recompute, precision=precision), _one(vanilla, recompute=recompute,
                                                                               precision=precision)
            want = 12 * 96 * passes * share * per_layer / RATE
            assert b["tp_comm_s"][0] - a["tp_comm_s"][0] == pytest.approx(want, rel=1e-9)
    for cols in (dict(sequence_parallel="false"), dict(tp=1, dp=1024)):
        a, b = _one(fused, recompute="full", **cols), _one(vanilla, recompute="full", **cols)
        assert b["step_time_s"][0] == a["step_time_s"][0]


def test_the_reference_evaluator_prices_both_terms_alike():
    # costmodel._reference mirrors both terms: Llama 3 8B and 70B rows under fsdp2 and fsdp2-async-tp, tp 1 / 8,
    # with and without sequence parallelism, bf16 and fp8, selective and full recompute.
    from costmodel._reference import evaluate_row

    cl = cluster_preset("h100x64")
    for name in ("llama3-8b", "llama3-70b"):
        model = model_preset(name)
        table = StrategyTable.from_columns(
            dp=[8, 8, 8, 64, 8, 8], tp=[8, 8, 8, 1, 8, 8], pp=1, micro_batch=[2, 2, 1, 1, 2, 1], global_batch=64,
            sequence_parallel=["true", "false", "true", "false", "true", "true"], zero_stage=3,
            recompute=["selective", "full", "full", "selective", "full", "selective"],
            precision=["bf16", "bf16", "fp8", "fp8", "bf16", "fp8"])
        for fw in ("fsdp2", "fsdp2-async-tp"):
            vec = evaluate(model, cl, table, framework=fw)
            for i in range(len(table)):
                ref = evaluate_row(model, cl, table.row(i), framework=fw)
                for k in ("step_time_s", "compute_s", "recompute_s", "tp_comm_s"):
                    assert vec[k][i] == pytest.approx(ref[k], rel=1e-9), (name, fw, i, k)
