"""FSDP2 under torch.distributed.pipelining (Framework.pp_grad_accum_bytes): with gradient sync off until the last
micro-batch, every micro-batch's backward adds its bf16 weight gradients into the unsharded fp32 accumulator (10
bytes a parameter); against a hand calculation."""

import dataclasses

import pytest

from costmodel import FRAMEWORKS, StrategyTable, cluster_preset, evaluate, framework_preset, model_preset
from costmodel._reference import evaluate_row

LLAMA70 = model_preset("llama3-70b")
CLUSTER = cluster_preset("h100x1024")
FSDP2 = FRAMEWORKS["fsdp2"]
NO_ACCUM = dataclasses.replace(FSDP2, name="fsdp2-no-accum", pp_grad_accum_bytes=0.0)


def _cols(**c):
    return {"dp": 16, "tp": 8, "pp": 8, "micro_batch": 1, "global_batch": 256, "sequence_parallel": "true",
            "zero_stage": 3, "recompute": "full", "schedule": "1f1b", **c}


def _one(fw, **c):
    return evaluate(LLAMA70, CLUSTER, StrategyTable.from_columns(**_cols(**c)), framework=fw)


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_each_microbatch_backward_adds_the_fp32_accumulation(precision):
    # Llama 3 70B: a layer's parameters 8192 (8192 + 2 x 1024) + 8192^2 + 3 x 8192 x 28672 + 2 x 8192 = 855,654,400;
    # tp 8: 106,956,800 a GPU; 10 bytes each (fp32 += bf16: read 4 + 2, write 4) = 1.069568e9 bytes a layer and
    # micro-batch, at the H100's 3.35e12 B/s x hbm_eff 0.765 = 2.56275e12 B/s: 0.41735 ms. pp 8: 10 layers a stage,
    # 4.1735 ms more in every micro-batch's backward on every stage; m = 256 / 16 = 16 micro-batches. 1F1B with
    # alike stages runs m + p - 1 = 23 micro-batch slots on the critical path: the step 23 x 4.1735 = 95.99 ms
    # longer, of it m x 4.1735 = 66.78 ms in the stage's compute and 7 x 4.1735 = 29.21 ms in the bubble. The weight
    # gradients are bf16 under fp8 too (torchao's GEMMs output the high precision): the same. Once a step, after the
    # pipeline, FSDP2's reduce-scatter copy-in then reads the fp32 accumulation (Framework.rs_copy_in_bytes 8, not the
    # 6 of a micro-batch's bf16 gradients): 2 bytes more a parameter of the slowest stage, the last (10 layers, the
    # head 128,256 x 8192 / 8 = 131,334,144, the final norm 8,192: 1,200,910,336): 0.93720 ms.
    a, b = _one(FSDP2, precision=precision), _one(NO_ACCUM, precision=precision)
    copy_in = 2 * 1_200_910_336 / 2.56275e12
    assert a["step_time_s"][0] - b["step_time_s"][0] == pytest.approx(0.09599 + copy_in, rel=1e-3)
    assert a["compute_s"][0] - b["compute_s"][0] == pytest.approx(0.06678, rel=1e-3)
    assert a["bubble_s"][0] - b["bubble_s"][0] == pytest.approx(0.02921, rel=1e-3)


def test_only_pipelined_sharded_rows_pay_it():
    # pp 1: FSDP2 reduce-scatters every micro-batch (no unsharded accumulator); ZeRO 0 with a pipeline is DDP's
    # no_sync (bf16 gradients summed by autograd), not FSDP's fp32 accumulator
    for c in (dict(pp=1, dp=128), dict(zero_stage=0)):
        assert _one(FSDP2, **c)["step_time_s"][0] == _one(NO_ACCUM, **c)["step_time_s"][0], c
    for name in ("fsdp2-async-tp", "fsdp2-eager"):
        assert framework_preset(name).pp_grad_accum_bytes == 10.0, name
    for name in ("llama3-fsdp", "llm-foundry", "megatron-core", "deepspeed"):
        assert framework_preset(name).pp_grad_accum_bytes == 0.0, name


@pytest.mark.parametrize("fw", [FSDP2, NO_ACCUM], ids=lambda f: f.name)
def test_the_scalar_reference_prices_it_alike(fw):
    for precision in ("bf16", "fp8"):
        ref = evaluate_row(LLAMA70, CLUSTER, StrategyTable.from_columns(**_cols(precision=precision)).row(0),
                           framework=fw)
        vec = _one(fw, precision=precision)
        for k in ("step_time_s", "compute_s", "bubble_s"):
            assert vec[k][0] == pytest.approx(ref[k], rel=1e-9), (fw.name, precision, k)
