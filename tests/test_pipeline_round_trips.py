"""1F1B whose sends do not block (Framework.blocking_p2p off: the generic, hai-llm, internevo, llama3-fsdp and
llm-foundry profiles): the steady state's round trips, by hand, against the simulator, the closed form and the scalar
reference.

Megatron-LM d98e8a6 megatron/core/pipeline_parallel/schedules.py forward_backward_pipelining_without_interleaving gives
the op order: stage i runs min(p - i - 1, m) warm-up forwards, then one forward and one backward per remaining
micro-batch, then the cool-down backwards. A forward waits on the previous stage's forward of the same micro-batch and
a hand-off h, a backward on the next stage's backward and h; a send never holds its sender.
"""

from __future__ import annotations

import numpy as np
import pytest

from costmodel import StrategyTable, cluster_preset, evaluate, model_preset, simulate
from costmodel._pipeline_terms import SCHED, pipeline_step, round_trip_handoffs_s
from costmodel._reference import evaluate_row

P, M, F, B, H = 4, 8, 1.0, 2.0, 0.1


def hand_step() -> float:
    """p = 4, m = 8, forward f = 1, backward b = 2, hand-off h = 0.1, along the critical path.

    Stage 0's order: F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7; stage 1's: F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7
    B5 B6 B7. The chain: micro-batch 0 down the four stages and back up (F0 on 0..3, B0 on 3..0: 4f + 4b, 6h); stage 0's
    next op, F4, down and back up to stage 1 (F4 on 0..3, B4 on 3..1: 4f + 3b, 5h); stage 1's next op, F7, down and back
    up to stage 0 (F7 on 1..3, B7 on 3..0: 3f + 4b, 5h). Each round trip ends where its stage's next forward starts, so
    no stage waits elsewhere on the chain:

        (4f + 4b + 6h) + (4f + 3b + 5h) + (3f + 4b + 5h) = 11 (f + b) + 16 h = 33 + 1.6 = 34.6

    The closed form without the round trips, (m + p - 1)(f + b) + 2 (p - 1) h, is 33.6: 10 h short, which
    2 ((m - 2) - floor((m - 2) / p)) h = 2 (6 - 1) h carries.
    """
    return 11 * (F + B) + 16 * H


def op_order_step(p: int, m: int, f: float, b: float, h: float) -> float:
    """The step from the op order and the dependencies in the module docstring, event by event (no simulator)."""
    order = []
    for i in range(p):
        w = min(p - i - 1, m)
        ops = [("F", j) for j in range(w)]
        for k in range(m - w):
            ops += [("F", w + k), ("B", k)]
        order.append(ops + [("B", j) for j in range(m - w, m)])
    end, pos, free = {}, [0] * p, [0.0] * p
    while any(pos[i] < len(order[i]) for i in range(p)):
        for i in range(p):
            if pos[i] == len(order[i]):
                continue
            kind, j = order[i][pos[i]]
            dep = (i - 1, "F", j) if kind == "F" else (i + 1, "B", j) if i < p - 1 else (i, "F", j)
            if kind == "F" and i == 0:
                ready = 0.0
            elif dep not in end:
                continue
            else:
                ready = end[dep] + (h if dep[0] != i else 0.0)
            end[(i, kind, j)] = free[i] = max(free[i], ready) + (f if kind == "F" else b)
            pos[i] += 1
    return max(end.values())


def closed_form(p, m, f, b, w, h, blocking=None):
    one = lambda x: np.array([x])  # noqa: E731
    pipe, _, pp_comm, _, _ = pipeline_step(
        sched=one(SCHED["1f1b"]), p=one(p), m=one(m), v=one(1), X_sum=one(p * (f + b + w)), X_max=one(f + b + w),
        F_b=one(f), B_b=one(b), W_b=one(w), pp_comm=one(2 * (p - 1) * h), reason=one(0), pipeline="closed_form",
        simulate_now=False, stage_inputs=None, blocking=blocking)
    return pipe[0], pp_comm[0]


def test_hand_calculation_equals_the_op_order_the_simulator_and_the_closed_form():
    want = hand_step()
    assert want == pytest.approx(34.6)
    assert op_order_step(P, M, F, B, H) == pytest.approx(want, rel=1e-12)
    assert simulate("1f1b", P, M, 1, tf=F, tb=B, tc=H).total_time[0] == pytest.approx(want, rel=1e-12)
    pipe, pp_comm = closed_form(P, M, F, B, 0.0, H)
    assert pipe == pytest.approx(want, rel=1e-12)
    assert pp_comm == pytest.approx(16 * H, rel=1e-12)  # every hand-off on the chain is reported as one
    # the round trips alone: 10 h past the fill's and drain's 6 h
    got = round_trip_handoffs_s(np.array([SCHED["1f1b"]]), np.array([P]), np.array([M]), np.array([6 * H]))
    assert got[0] == pytest.approx(10 * H, rel=1e-12)


@pytest.mark.parametrize("p", [2, 3, 4, 5, 8, 16])
def test_closed_form_equals_the_simulator_on_uniform_stages(p):
    # every m from 1 to 3p + 2, a weight-gradient pass and hand-offs from a hundredth of a forward to three forwards
    for m in range(1, 3 * p + 3):
        for h in (0.01, 0.3, 3.0):
            sim = simulate("1f1b", p, m, 1, tf=1.0, tb=1.5, tw=0.5, tc=h).total_time[0]
            assert closed_form(p, m, 1.0, 1.5, 0.5, h)[0] == pytest.approx(sim, rel=1e-12), (p, m, h)
            if p <= 5 and m <= 12:
                assert op_order_step(p, m, 1.0, 2.0, h) == pytest.approx(
                    simulate("1f1b", p, m, 1, tf=1.0, tb=2.0, tc=h).total_time[0], rel=1e-12), (p, m, h)


def test_only_non_blocking_one_f_one_b_rows_take_the_round_trips():
    sched = np.array([SCHED[s] for s in ("1f1b", "1f1b", "interleaved", "gpipe", "zb-h1", "1f1b")])
    got = round_trip_handoffs_s(sched, np.array([4, 4, 4, 4, 4, 1]), np.full(6, 8), np.full(6, 0.6),
                                blocking=np.array([False, True, False, False, False, False]))
    np.testing.assert_allclose(got, [1.0, 0.0, 0.0, 0.0, 0.0, 0.0], rtol=1e-12)  # 0.6 / 6 x 10


@pytest.mark.parametrize("pipeline", ["closed_form", "simulate"])
def test_generic_profile_prices_the_round_trips_as_the_reference_does(pipeline):
    # gpt3-175b on 128 H100s, pp 4, dp 4, 16 micro-batches, the generic profile (sends do not block): the closed
    # form's hand-offs are 2 (p - 1) + 2 (14 - 3) = 28 T_C, as many as the simulator's critical path carries
    model, cl = model_preset("gpt3-175b"), cluster_preset("h100x128")
    table = StrategyTable.from_columns(dp=4, tp=8, pp=4, micro_batch=1, global_batch=64, schedule="1f1b",
                                       recompute="selective", sequence_parallel=True, zero_stage=1)
    on = evaluate(model, cl, table, framework="generic", pipeline=pipeline)
    ref = evaluate_row(model, cl, table.row(0), framework="generic", pipeline=pipeline)
    assert on["step_time_s"][0] == pytest.approx(ref["step_time_s"], rel=1e-9)
    assert on["pp_comm_s"][0] == pytest.approx(ref["pp_comm_s"], rel=1e-9)
    if pipeline == "closed_form":  # megatron-core's blocking hand-offs on the same link: 2 (p - 1) + 2m - 3 = 35 T_C
        blocked = evaluate(model, cl, table, framework="megatron-core", pipeline=pipeline)
        assert on["pp_comm_s"][0] / blocked["pp_comm_s"][0] == pytest.approx(28 / 35, rel=1e-9)
