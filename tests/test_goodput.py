"""Goodput under failures: Daly's interval and the useful share, by hand."""

import math

import numpy as np
import pytest

from costmodel import InputError, StrategyTable, cluster_preset, evaluate, model_preset
from costmodel._goodput import (
    LLAMA3_GPU_MTBF_H,
    FailureModel,
    checkpoint_bytes_per_writer,
    daly_interval_s,
    goodput,
    plan_goodput,
)


def test_daly_interval_by_hand():
    # delta = 50 s, M = 10,000 s: sqrt(2 * 50 * 1e4) = 1000; delta / 2M = 0.0025;
    # 1000 * (1 + 0.05 / 3 + 0.0025 / 9) - 50 = 966.944...
    assert daly_interval_s(50.0, 10_000.0) == pytest.approx(1000 * (1 + 0.05 / 3 + 0.0025 / 9) - 50, rel=1e-12)
    assert daly_interval_s(50.0, 10_000.0) == pytest.approx(966.9444, abs=1e-4)
    # a checkpoint longer than two MTBFs: checkpoint every MTBF (Daly's second case)
    assert daly_interval_s(30_000.0, 10_000.0) == 10_000.0
    # Young's leading term when delta << M
    assert daly_interval_s(1.0, 1e8) == pytest.approx(math.sqrt(2e8), rel=1e-3)


def test_goodput_by_hand():
    # 1000 GPUs failing every 10,000 h each: the job fails every 10,000 s (M).
    f = FailureModel(gpu_mtbf_h=10_000 * 1000 / 3600, restart_s=290.0, write_Bps_per_gpu=1e9, read_Bps_per_gpu=5e9)
    out = goodput([1e6], [1000], [50e9], f)  # 50 GB per writer: delta 50 s, reload 10 s, R = 300 s
    tau = 1000 * (1 + 0.05 / 3 + 0.0025 / 9) - 50
    overhead = 50 / (tau + 50)
    rework = (tau + 50) / 2 / 10_000
    ratio = (1 - overhead) * (1 - rework - 300 / 10_000)
    assert out["checkpoint_interval_s"][0] == pytest.approx(tau, rel=1e-12)
    assert out["checkpoint_write_s"][0] == pytest.approx(50.0)
    assert out["job_mtbf_s"][0] == pytest.approx(10_000.0)
    assert out["goodput_ratio"][0] == pytest.approx(ratio, rel=1e-12)
    assert out["goodput_ratio"][0] == pytest.approx(0.87396, abs=1e-5)
    assert out["goodput_tokens_per_s"][0] == pytest.approx(1e6 * ratio, rel=1e-12)


def test_llama3_defaults_give_about_the_published_effective_training_time():
    # Dubey et al. 2024 report "higher than 90% effective training time" on 16,384 GPUs (the
    # restart default was chosen with this in view: costmodel._goodput.RESTART_S). A 405B plan
    # with a sharded optimizer writes 405e9 x 14 B / 16,384 GPUs per GPU.
    assert LLAMA3_GPU_MTBF_H == pytest.approx(50_677, rel=1e-3)
    out = goodput([1.0], [16384], [405e9 * 14 / 16384])
    assert 0.90 < out["goodput_ratio"][0] < 0.95
    # the job fails about every 3.1 hours, as the paper's 419 interruptions in 54 days say
    assert out["job_mtbf_s"][0] / 3600 == pytest.approx(54 * 24 / 419, rel=1e-9)


def test_checkpoint_bytes_per_writer_by_zero_stage():
    # weights 2 GB, optimizer 12 GB per GPU unsharded; dp x cp = 8
    assert checkpoint_bytes_per_writer(2e9, 12e9, 0, 8) == pytest.approx(14e9)
    assert checkpoint_bytes_per_writer(2e9, 12e9 / 8, 1, 8) == pytest.approx(2e9 / 8 + 12e9 / 8)
    assert checkpoint_bytes_per_writer(2e9 / 8, 12e9 / 8, 3, 8) == pytest.approx(14e9 / 8)


def test_a_zero_plan_checkpoints_dp_times_faster():
    model, cluster = model_preset("gpt3-175b"), cluster_preset("h100x1024")
    table = StrategyTable.from_columns(dp=16, tp=8, pp=8, global_batch=1536, zero_stage=[0, 1],
                                       recompute="selective", sequence_parallel=True)
    m = evaluate(model, cluster, table)
    out = plan_goodput(m, table)
    assert out["checkpoint_write_s"][0] / out["checkpoint_write_s"][1] == pytest.approx(16.0, rel=1e-12)
    assert out["goodput_ratio"][1] > out["goodput_ratio"][0]
    np.testing.assert_array_less(out["goodput_tokens_per_s"], m["tokens_per_s"])


def test_infeasible_rows_have_no_goodput_and_bad_models_are_refused():
    assert goodput([0.0], [8], [1e9])["goodput_tokens_per_s"][0] == 0.0
    with pytest.raises(InputError, match="failure.gpu_mtbf_h: expected a positive number"):
        FailureModel(gpu_mtbf_h=0)
