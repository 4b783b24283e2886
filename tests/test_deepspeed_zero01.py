"""DeepSpeed at ZeRO 0-1 as its releases of 2021-2023 ran it. The gradient exchange runs after the backward pass,
whatever overlap the row asks (Framework.overlap_dp_min_zero): engine.backward calls allreduce_gradients once the
backward is done, and _configure_zero_optimizer forced overlap_comm off at stage 1 (6ae756c03 to af033831f). The bf16
optimizer's fp32 gradient accumulation is priced at ZeRO 0 and, at ZeRO-1, only with a pipeline
(Framework.hp_grad_zero1_needs_pp: engine.py get_data_types, pipe/engine.py)."""

import numpy as np
import pytest

from costmodel import FRAMEWORKS, StrategyTable, cluster_preset, evaluate, framework_preset, model_preset
from costmodel._data_parallel import exposed_dp_s, framework_columns
from costmodel._reference import evaluate_row


def test_which_profiles_overlap_only_from_zero2():
    assert framework_preset("deepspeed").overlap_dp_min_zero == 2
    assert framework_preset("deepspeed-flash2").overlap_dp_min_zero == 2  # derived from deepspeed
    others = {n for n, fw in FRAMEWORKS.items() if fw.overlap_dp_min_zero}
    assert others == {"deepspeed", "deepspeed-flash2", "deepspeed-bigscience"}


def test_framework_columns_turn_overlap_off_below_zero2():
    zero, asked = np.array([0, 1, 2, 3]), np.array([True, True, True, True])
    _, got = framework_columns(framework_preset("deepspeed"), np.ones(4), zero, asked)
    assert got.tolist() == [False, False, True, True]
    _, got = framework_columns(framework_preset("deepspeed"), np.ones(4), zero, ~asked)
    assert got.tolist() == [False] * 4  # never turned on
    _, got = framework_columns(framework_preset("megatron-core"), np.ones(4), zero, asked)
    assert got.tolist() == [True] * 4


def test_exposure_hand_calculation():
    # A ZeRO-1 exchange of 0.9 s under DeepSpeed (all-reduce, then the weight all-gather inside the optimizer step,
    # 0.3 s of it), the bottleneck stage's last backward B + W = 0.3 + 0.1 s, m = 1. Were the overlap honoured, the
    # all-reduce (0.6 s) would hide under B + W but for 0.2 s, the gather exposed: 0.3 + 0.2 = 0.5 s. As DeepSpeed runs
    # stage 1 the row's overlap is off (framework_columns), and the whole 0.9 s is exposed.
    ds = framework_preset("deepspeed")
    dp, step = np.full(2, 0.9), np.full(2, 0.3)
    honoured = exposed_dp_s(np.array([1, 1]), np.array([True, True]), 1, 0.7, 0.3, 0.1, dp, fw=ds, step_s=step)
    np.testing.assert_allclose(honoured, [0.5, 0.5])
    _, overlap = framework_columns(ds, np.ones(2), np.array([1, 2]), np.array([True, True]))
    got = exposed_dp_s(np.array([1, 2]), overlap, 1, 0.7, 0.3, 0.1, dp, fw=ds, step_s=step)
    assert got[0] == pytest.approx(0.9, rel=1e-12)
    assert got[1] == pytest.approx(0.5, rel=1e-12)  # ZeRO-2 keeps its overlap: the honoured 0.3 + 0.2 s


def _table(overlap: bool) -> StrategyTable:
    # Llama 3 8B, pure data parallel over 64 A100s (8 nodes), micro-batch 1, 2 micro-batches a step, ZeRO 0-3
    return StrategyTable.from_columns(dp=64, tp=1, pp=1, micro_batch=1, global_batch=128, zero_stage=[0, 1, 2, 3],
                                      overlap_dp=overlap, recompute="full", schedule="1f1b", precision="bf16")


def test_evaluator_and_reference_price_zero01_without_overlap():
    model, cluster = model_preset("llama3-8b"), cluster_preset("a100x64")
    on, off = (evaluate(model, cluster, _table(o), framework="deepspeed") for o in (True, False))
    # ZeRO 0-1: the same exposed exchange and step with overlap asked or not
    np.testing.assert_array_equal(on["dp_comm_s"][:2], off["dp_comm_s"][:2])
    np.testing.assert_array_equal(on["step_time_s"][:2], off["step_time_s"][:2])
    # ZeRO 2-3 still overlap when asked
    assert (on["dp_comm_s"][2:] < off["dp_comm_s"][2:]).all()
    # Megatron-Core overlaps its ZeRO-1 (distributed optimizer) exchange when asked
    mc_on, mc_off = (evaluate(model, cluster, _table(o), framework="megatron-core") for o in (True, False))
    assert mc_on["dp_comm_s"][1] < mc_off["dp_comm_s"][1]
    # the scalar reference prices the rows the same way
    t = _table(True)
    for i in range(4):
        ref = evaluate_row(model, cluster, t.row(i), framework="deepspeed")
        for key in ("step_time_s", "dp_comm_s"):
            assert on[key][i] == pytest.approx(ref[key], rel=1e-9), (i, key)


def test_bf16_optimizer_fp32_accumulation_at_zero1_only_with_a_pipeline():
    # Llama 3 8B on 64 A100s, bf16, micro-batch 1, global batch 128. DeepSpeed's bf16 optimizer adds each
    # micro-batch's bf16 gradients into fp32 ones, hp_grad_bytes = 18 HBM bytes a parameter in each layer's backward:
    # a layer's 218,112,000 parameters (4096^2 x 2 + 4096 x 1024 x 2 + 3 x 4096 x 14336 + 2 x 4096) x 18 =
    # 3,926,016,000 bytes at the A100's 2.039 TB/s x hbm_eff. ZeRO 0 (BF16_Optimizer) pays it; ZeRO-1 without a
    # pipeline runs DeepSpeed's ZeRO optimizer with bf16 accumulation and does not; ZeRO-1 with pp 2 (the pipeline
    # engine reads the bf16 optimizer's fp32 gradients) does.
    model, cluster = model_preset("llama3-8b"), cluster_preset("a100x64")
    assert model.layer_params() == 218_112_000
    gpu = cluster.gpu
    per_layer_s = 218_112_000 * 18 / (gpu.hbm_Bps * gpu.hbm_eff)

    def compute(pp, zero, precision="bf16"):
        t = StrategyTable.from_columns(dp=64 // pp, tp=1, pp=pp, micro_batch=1, global_batch=128, zero_stage=zero,
                                       recompute="full", schedule="1f1b", precision=precision)
        return evaluate(model, cluster, t, framework="deepspeed")["compute_s"][0]

    # pp 1: dp 64, m = 2 micro-batches, 32 layers a stage: 2 x 32 x per_layer_s more at ZeRO 0 than at ZeRO-1
    assert compute(1, 0) - compute(1, 1) == pytest.approx(2 * 32 * per_layer_s, rel=1e-9)
    # pp 2: dp 32, m = 4, 16 layers a stage: ZeRO 0 and ZeRO-1 pay it alike
    assert compute(2, 0) == pytest.approx(compute(2, 1), rel=1e-12)
    # fp16 runs the fp16 optimizer: no fp32 accumulation at any stage
    assert compute(1, 0, "fp16") == pytest.approx(compute(1, 1, "fp16"), rel=1e-12)
    # the scalar reference agrees
    for pp, zero in ((1, 0), (1, 1), (2, 1)):
        t = StrategyTable.from_columns(dp=64 // pp, tp=1, pp=pp, micro_batch=1, global_batch=128, zero_stage=zero,
                                       recompute="full", schedule="1f1b", precision="bf16")
        ref = evaluate_row(model, cluster, t.row(0), framework="deepspeed")
        assert compute(pp, zero) == pytest.approx(ref["compute_s"], rel=1e-9)
