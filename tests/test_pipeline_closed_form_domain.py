"""Interleaved pipelines with micro-batches not a multiple of pp: priced by the closed forms, their micro-batches in
flight counted with Megatron-LM's group size, and refused by the profiles whose framework cannot run them.

Sources (costmodel._frameworks.INTERLEAVED_MICROBATCHES): Megatron-LM d98e8a6 megatron/core/pipeline_parallel/
schedules.py lines 1160-1180 (the group size N = microbatch_group_size_per_vp_stage must lie in [p, m], the last group
m % N be 0 or at least p) and get_pp_rank_microbatches lines 956-978 ((p - i - 1) * 2 + (v - 1) * N warm-up chunks);
Megatron-LM d750965 megatron/training.py line 366 (m a multiple of p); pytorch 1fd7abc torch/distributed/pipelining/
schedules.py ScheduleInterleaved1F1B (max(1, m // p) rounds, which must divide m).
"""

from __future__ import annotations

import numpy as np
import pytest

from costmodel import REASONS, StrategyTable, cluster_preset, evaluate, model_preset, simulate
from costmodel._evaluate import stage_breakdown
from costmodel._pipeline import interleave_group_size, schedule_peaks
from costmodel._pipeline_terms import SCHED, in_flight, interleave_groups, pipeline_step
from costmodel._reference import _in_flight, evaluate_row

LLAMA8B = model_preset("llama3-8b")  # 32 layers: pp 4, vpp 2 gives chunks of 4 layers
H100x64 = cluster_preset("h100x64")


def _row(m: int, pp: int = 4, vpp: int = 2, schedule: str = "interleaved", **extra) -> StrategyTable:
    """Llama 3 8B, dp 2 tp 8 on 64 H100s, one sequence a micro-batch, m micro-batches a step."""
    return StrategyTable.from_columns(dp=[2], tp=[8], pp=[pp], micro_batch=[1], global_batch=[2 * m], vpp=[vpp],
                                      schedule=[SCHED[schedule]], recompute=[2], sequence_parallel=[True],
                                      zero_stage=[0], **extra)


def test_megatron_group_size_by_hand():
    # p = 4: m = 8 -> N = p = 4; m = 10 -> N = 4 leaves 2 < 4, N = 5 divides: 5; m = 9 -> N = 4 leaves 1, N = 5
    # leaves 4 >= 4: 5; m = 6 -> 4 leaves 2, 5 leaves 1, 6 divides: 6; m = 3 < p: one group of 3.
    assert [interleave_group_size(4, m) for m in (8, 10, 9, 6, 3)] == [4, 5, 5, 6, 3]
    sched = np.full(5, SCHED["interleaved"])
    np.testing.assert_array_equal(interleave_groups(sched, np.full(5, 4), np.array([8, 10, 9, 6, 3])), [4, 5, 5, 6, 3])


def test_closed_form_prices_interleaved_m_not_multiple_of_pp_by_hand():
    # p = 4, v = 2, m = 6 micro-batches, stage times X = 1.0, 1.2, 1.0, 0.8 s (F = X / 3, B = 2X / 3, W = 0), fill and
    # drain hand-offs 2 (p - 1) T_C = 6 x 0.01 = 0.06 s:
    #   m X_max + (sum X - X_max) / v + 2 (p - 1) T_C = 6 x 1.2 + (4.0 - 1.2) / 2 + 0.06 = 7.2 + 1.4 + 0.06 = 8.66 s
    # and no row is left to the simulator.
    X = np.array([1.0, 1.2, 1.0, 0.8])
    one = lambda x: np.array([x])  # noqa: E731
    pipe, fill, pp_comm, left, sim = pipeline_step(
        sched=one(SCHED["interleaved"]), p=one(4), m=one(6), v=one(2), X_sum=one(X.sum()), X_max=one(1.2),
        F_b=one(0.4), B_b=one(0.8), W_b=one(0.0), pp_comm=one(0.06), reason=one(0), pipeline="closed_form",
        simulate_now=True, stage_inputs=None)
    assert pipe[0] == pytest.approx(8.66, rel=1e-12)
    assert fill[0] == pytest.approx(1.4, rel=1e-12) and pp_comm[0] == pytest.approx(0.06, rel=1e-12)
    assert sim is None and not left[0]
    # m = 3 < p stays with the simulator (one group of 3: the fill is not (p - 1) / v of a stage)
    *_, left, _ = pipeline_step(
        sched=one(SCHED["interleaved"]), p=one(4), m=one(3), v=one(2), X_sum=one(X.sum()), X_max=one(1.2),
        F_b=one(0.4), B_b=one(0.8), W_b=one(0.0), pp_comm=one(0.06), reason=one(0), pipeline="closed_form",
        simulate_now=False, stage_inputs=None)
    assert left[0]


def test_uniform_stages_closed_form_is_exact_for_any_m_at_least_pp():
    # Uniform stages, X = 1 (F 1/3, B 2/3), no hand-off: Megatron-LM's order with group size N takes (m + (p - 1)/v) X
    # whatever m % p, as for m a multiple of p (Narayanan et al. 2021 Sec. 2.2).
    for p in range(2, 8):
        for v in (2, 3, 4):
            for m in range(p, 2 * p + 2):
                got = simulate("interleaved", p, m, v, tf=1 / 3, tb=2 / 3).total_time[0]
                assert got == pytest.approx(m + (p - 1) / v, rel=1e-12), (p, v, m)


def test_closed_form_in_flight_is_the_op_orders_peak_for_every_m():
    # in_flight (Megatron-LM's warm-up with group size N, one steady-state forward, at most m v chunks) against the
    # schedule's op order, m < p included.
    for p in range(2, 9):
        for v in (2, 3, 4):
            for m in range(1, 3 * p + 1):
                want = schedule_peaks("interleaved", p, m, v)
                got = in_flight(np.array([SCHED["interleaved"]]), np.array([p]), np.array([m]), np.array([v]),
                                np.arange(p))
                np.testing.assert_array_equal(got, want, err_msg=f"p={p} v={v} m={m}")


def test_in_flight_with_group_size_by_hand():
    # p = 4, v = 2, m = 10: N = 5 (10 % 4 = 2 < 4; 10 % 5 = 0). Megatron-Core's warm-up on stage i:
    # (4 - i - 1) * 2 + (2 - 1) * 5 = 11, 9, 7, 5 chunks of the 20, one more forward in the steady state: 12, 10, 8, 6
    # chunks = 6.0, 5.0, 4.0, 3.0 stage micro-batches (N = p would say 11, 9, 7, 5 chunks: 5.5, 4.5, 3.5, 2.5).
    # PyTorch's ScheduleInterleaved1F1B: 2 rounds of 5, (2 - 1) * 5 + 2 (3 - i) warm-up: the same.
    want = [6.0, 5.0, 4.0, 3.0]
    one = lambda x: np.array([x])  # noqa: E731
    np.testing.assert_array_equal(in_flight(one(SCHED["interleaved"]), one(4), one(10), one(2), np.arange(4)), want)
    assert [_in_flight("interleaved", 4, 10, 2, i) for i in range(4)] == want
    np.testing.assert_array_equal(schedule_peaks("interleaved", 4, 10, 2), want)
    # p = 4, v = 2, m = 9: N = 5 (9 % 5 = 4 >= 4), stage 0: 3 * 2 + 5 = 11 warm-up chunks + 1 = 12 of 18: 6.0
    assert _in_flight("interleaved", 4, 9, 2, 0) == 6.0
    # the evaluator's stage column, under megatron-core, and its closed-form step: no simulator peak needed
    got = stage_breakdown(LLAMA8B, H100x64, _row(10), framework="megatron-core")["in_flight"][0]
    np.testing.assert_array_equal(got, want)


def test_evaluator_prices_m_not_multiple_of_pp_by_the_closed_form():
    # Llama 3 8B, pp 4 vpp 2, m = 10 under megatron-core, stages of 7, 9, 8, 8 layers: the bubble is (sum X - max X) / v
    # of the stage times the stage breakdown reports (X = F + B + W per micro-batch), not the simulator's idle time.
    t = _row(10, stage_layers=[[7, 9, 8, 8]])
    closed = evaluate(LLAMA8B, H100x64, t, framework="megatron-core")
    st = stage_breakdown(LLAMA8B, H100x64, t, framework="megatron-core")
    X = (st["forward_s"] + st["backward_s"] + st["weight_grad_s"])[0]
    assert REASONS[closed["reason"][0]] == "ok"
    assert closed["bubble_s"][0] == pytest.approx((X.sum() - X.max()) / 2, rel=1e-9)
    sim = evaluate(LLAMA8B, H100x64, t, framework="megatron-core", pipeline="simulate")  # the schedule's own order
    assert abs(sim["step_time_s"][0] / closed["step_time_s"][0] - 1) < 0.05


@pytest.mark.parametrize("framework,m,refused", [
    # Megatron-Core (and the profiles built on it): interleaving needs m >= pp; m % pp != 0 runs with a larger N
    ("megatron-core", 3, True), ("megatron-core", 6, False), ("megatron-core", 9, False),
    ("megatron-bridge", 3, True), ("megatron-core-deepep", 3, True), ("megatron-core-a2a-overlap", 3, True),
    # Megatron-LM 2021: m a multiple of pp
    ("megatron-2021", 6, True), ("megatron-2021", 3, True), ("megatron-2021", 8, False),
    # PyTorch: max(1, m // 4) rounds must divide m: 3 (1 round), 6 (1), 10 (2) run, 9 (2 rounds of 4.5) does not
    ("fsdp2", 3, False), ("fsdp2", 6, False), ("fsdp2", 10, False), ("fsdp2", 9, True),
    # plansweep's own model prices them all
    ("generic", 3, False), ("generic", 6, False), ("generic", 9, False),
])
def test_profiles_refuse_interleaved_micro_batches_their_framework_cannot_run(framework, m, refused):
    t = _row(m)
    reason = REASONS[evaluate(LLAMA8B, H100x64, t, framework=framework)["reason"][0]]
    ref = REASONS[evaluate_row(LLAMA8B, H100x64, t.row(0), framework=framework)["reason"]]
    if refused:
        assert reason == ref == "framework_unsupported"
    else:
        assert reason in ("ok", "out_of_memory") and ref == reason
    # 1F1B with the same m is never refused for its micro-batches
    one = evaluate(LLAMA8B, H100x64, _row(m, vpp=1, schedule="1f1b"), framework=framework)["reason"][0]
    assert REASONS[one] != "framework_unsupported"
