"""torchao's float8 tensor parallelism as torchtitan runs it (Framework.fp8_tp_gather): the sequence-parallel
all-gathers in fp8 after an amax all-reduce, the reduce-scatters in 16 bits, the casts of the gathered tensors on the
shard; each against a hand calculation."""

import dataclasses

import pytest

from costmodel import FRAMEWORKS, StrategyTable, cluster_preset, evaluate, framework_preset, model_preset
from costmodel._hardware import SUSTAINED_CLOCK
from costmodel._reference import evaluate_row

GPT3 = model_preset("gpt3-175b")  # 96 layers, hidden 12288, seq 2048
H100 = cluster_preset("h100x1024")
RATE = 3.35e12 * 0.9 * SUSTAINED_CLOCK  # the H100's element-wise HBM rate, B/s
TP_BW, TP_LAT = 450e9 * 0.8, 5e-6  # NVLink inside the node: 450 GB/s x link efficiency 0.8, 5 us a ring step
OFF = dataclasses.replace(FRAMEWORKS["fsdp2"], name="fsdp2-bf16-tp", fp8_tp_gather=False)


def _one(framework, **cols):
    cols = {"dp": 128, "tp": 8, "pp": 1, "micro_batch": 1, "global_batch": 1536, "sequence_parallel": "true",
            "zero_stage": 3, "recompute": "full", "precision": "fp8", **cols}
    return evaluate(GPT3, H100, StrategyTable.from_columns(**cols), framework=framework)


def test_all_gathers_move_fp8_after_an_amax_all_reduce():
    # A layer pass's two all-gathers of E = b x 2048 x 12288 elements move 1 byte an element instead of 2: the ring
    # saves 7/8 x E bytes each, 2 x 7/8 x E / 360 GB/s; each waits for an all-reduce of one fp32 amax over the 8
    # ranks: 2 x 7/8 x 4 B / 360 GB/s + 14 steps x 5 us = 70.00002 us. DTensor's copy around each gather (chunk, cat:
    # Framework.sp_copy_bytes, 4 bytes an element of 16-bit data) moves fp8, 2 bytes an element: 2 x 2 x E bytes
    # fewer at the element-wise HBM rate. b = 4: E = 100,663,296, saving 489.3 us - 140.0 us + 157.1 us = 506.5 us a
    # pass; b = 1: 122.3 us - 140.0 us + 39.3 us = 21.6 us. Full recompute: 3 passes a layer (forward, backward's
    # mirrors, recompute), 96 layers, 1536 / 128 / b micro-batches: b = 4: 3 x 96 x 3 x 506.5 us = 0.4376 s a step;
    # b = 1: 12 x 96 x 3 x 21.6 us = 0.0747 s.
    for b, want in ((4, 0.4375754344), (1, 0.0746953336)):
        E = b * 2048 * 12288
        save = 2 * 7 / 8 * E / TP_BW - 2 * (2 * 7 / 8 * 4 / TP_BW + 14 * TP_LAT) + 2 * 2 * E / RATE
        assert (1536 // 128 // b) * 96 * 3 * save == pytest.approx(want, rel=1e-9)
        a, c = _one(OFF, micro_batch=b), _one("fsdp2", micro_batch=b)
        assert a["tp_comm_s"][0] - c["tp_comm_s"][0] == pytest.approx(want, rel=1e-9)


def test_the_gathered_tensors_are_cast_on_the_shard():
    # The fsdp2 profile's per-linear cast moves 6 bytes an element of a norm-written input and of a row-parallel
    # product's output gradient (read 2 for the max, read 2, write 1 + 1 fp8 copies). Under float8 TP the cast runs on
    # the rank's shard, 5 bytes an element of T h / 8, and the gathered fp8 tensor is copied transposed once (1 + 1):
    # 5 / 8 + 2 = 2.625 bytes an element of T h, 3.375 fewer. Forward: QKV's and FC1's inputs; backward: the
    # projection's and FC2's output gradients; recompute: the forward's again. T h = 2048 x 12288 = 25,165,824;
    # 2 x 3.375 x T h = 169,869,312 bytes a layer and pass; 12 micro-batches x 96 layers: 0.0764 s a pass at the
    # element-wise rate, compute (forward + backward) 0.1527 s, recompute 0.0764 s.
    per_pass = 12 * 96 * 2 * 3.375 * 2048 * 12288 / RATE
    assert per_pass == pytest.approx(0.0764, abs=1e-4)
    a, c = _one(OFF), _one("fsdp2")
    assert a["compute_s"][0] - c["compute_s"][0] == pytest.approx(2 * per_pass, rel=1e-9)
    assert a["recompute_s"][0] - c["recompute_s"][0] == pytest.approx(per_pass, rel=1e-9)


def test_only_fp8_rows_with_sequence_parallel_tp_gather_fp8():
    # bf16, tp 1, no sequence parallelism: the same as without the mechanism; profiles not running torchao's float8 TP
    # do not have it.
    for cols in (dict(precision="bf16"), dict(tp=1, dp=1024), dict(sequence_parallel="false")):
        a, c = _one(OFF, **cols), _one("fsdp2", **cols)
        assert a["step_time_s"][0] == c["step_time_s"][0]
    assert FRAMEWORKS["fsdp2"].fp8_tp_gather and framework_preset("fsdp2-async-tp").fp8_tp_gather
    for name in ("llm-foundry", "llama3-fsdp", "megatron-core", "generic", "deepspeed"):
        assert not framework_preset(name).fp8_tp_gather, name


def test_the_reference_evaluator_prices_it_alike():
    cl = cluster_preset("h100x64")
    model = model_preset("llama3-70b")
    table = StrategyTable.from_columns(
        dp=8, tp=[8, 8, 8, 4], pp=[1, 1, 1, 2], micro_batch=[2, 1, 1, 1], global_batch=64,
        sequence_parallel=["true", "true", "false", "true"], zero_stage=3, recompute=["full", "selective", "full", "full"],
        precision=["fp8", "fp8", "fp8", "fp8"])
    for fw in ("fsdp2", "fsdp2-async-tp", "fsdp2-eager"):
        vec = evaluate(model, cl, table, framework=fw)
        for i in range(len(table)):
            ref = evaluate_row(model, cl, table.row(i), framework=fw)
            for k in ("step_time_s", "compute_s", "recompute_s", "tp_comm_s"):
                assert vec[k][i] == pytest.approx(ref[k], rel=1e-9), (fw, i, k)
