"""1F1B whose sends do not block (Framework.blocking_p2p off: the generic, hai-llm, internevo, llama3-fsdp and
llm-foundry profiles): the steady state's round trips, by hand and from the op order, against the simulator, the
closed form and the scalar reference; rows whose hand-offs block and torch's interleaved grid do not take them.

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
from tests.test_pipeline_blocking import hand_t_c

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


def op_order_step(p: int, m: int, f, b, h: float) -> float:
    """The step from the op order and the dependencies in the module docstring, event by event (no simulator); ``f``,
    ``b``: one pass time for every stage or a list, stage by stage."""
    f, b = (np.broadcast_to(np.asarray(x, dtype=float), (p,)) for x in (f, b))
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
            end[(i, kind, j)] = free[i] = max(free[i], ready) + (f[i] if kind == "F" else b[i])
            pos[i] += 1
    return max(end.values())


def round_trips(p: int, m: int, f: float, b: float, h: float) -> float:
    """The closed form with one round trip every p micro-batches (benchmarks/closed_form_handoff_gap.py)."""
    return (m + p - 1) * (f + b) + 2 * (p - 1) * h + 2 * ((m - 2) - (m - 2) // p) * h


def closed_form(f, b, w, h, m):
    """costmodel's closed form on stages with forward ``f``, backward ``b`` and weight-gradient ``w`` (lists, stage by
    stage) and hand-off h on every link: pipeline_step with the fill's and drain's 2 (p - 1) h and the round trips
    (round_trip_handoffs_s, as costmodel._block.pipeline_time adds them). Returns the step and the round trips."""
    X = np.add(np.add(f, b), w)
    p = X.size
    one = lambda x: np.array([x])  # noqa: E731
    c = np.where(np.arange(p) < p - 1, h, 0.0)[:, None]  # (p, 1): each stage's link to the next, none after the last
    trips = round_trip_handoffs_s(X[:, None], c, np.ones((p, 1)), one(p), one(m), one(X.max()))[0]
    pipe, _, _, _, _ = pipeline_step(
        sched=one(SCHED["1f1b"]), p=one(p), m=one(m), v=one(1), X_sum=one(X.sum()), X_max=one(X.max()),
        F_b=one(f[int(np.argmax(X))]), B_b=one(b[int(np.argmax(X))]), W_b=one(w[int(np.argmax(X))]),
        pp_comm=one(2 * (p - 1) * h + trips), reason=one(0), pipeline="closed_form", simulate_now=False,
        stage_inputs=None)
    return pipe[0], trips


def test_hand_calculation_equals_the_op_order_the_simulator_and_the_closed_form():
    want = hand_step()
    assert want == pytest.approx(34.6)
    assert op_order_step(P, M, F, B, H) == pytest.approx(want, rel=1e-12)
    assert simulate("1f1b", P, M, 1, tf=F, tb=B, tc=H).total_time[0] == pytest.approx(want, rel=1e-12)
    assert round_trips(P, M, F, B, H) == pytest.approx(want, rel=1e-12)
    pipe, trips = closed_form([F] * P, [B] * P, [0.0] * P, H, M)
    assert pipe == pytest.approx(want, rel=1e-12)
    assert trips == pytest.approx(10 * H, rel=1e-12)  # 10 h past the fill's and drain's 6 h


@pytest.mark.parametrize("p", [2, 3, 4, 5, 8, 16])
def test_the_simulator_takes_a_round_trip_every_p_micro_batches(p):
    # every m from 1 to 3p + 2, hand-offs from a hundredth of a forward to three forwards; the op order walked
    # event by event where it is small
    for m in range(1, 3 * p + 3):
        for h in (0.01, 0.3, 3.0):
            sim = simulate("1f1b", p, m, 1, tf=1.0, tb=2.0, tc=h).total_time[0]
            assert round_trips(p, m, 1.0, 2.0, h) == pytest.approx(sim, rel=1e-12), (p, m, h)
            if p <= 5 and m <= 12:
                assert op_order_step(p, m, 1.0, 2.0, h) == pytest.approx(sim, rel=1e-12), (p, m, h)


@pytest.mark.parametrize("p", [2, 3, 4, 5, 8, 16])
def test_closed_form_equals_the_simulator_on_uniform_stages(p):
    # every m from 1 to 3p + 2, a weight-gradient pass and hand-offs from a hundredth of a forward to three forwards
    for m in range(1, 3 * p + 3):
        for h in (0.01, 0.3, 3.0):
            sim = simulate("1f1b", p, m, 1, tf=1.0, tb=1.5, tw=0.5, tc=h).total_time[0]
            assert closed_form([1.0] * p, [1.5] * p, [0.5] * p, h, m)[0] == pytest.approx(sim, rel=1e-12), (p, m, h)


def test_a_lighter_first_stage_by_hand():
    # p = 4, m = 8, h = 0.1; stage 0 does two thirds of the others' work (f 2/3, b 4/3: X = 2, 3, 3, 3). The whole
    # pipeline's loop (4 stages, 6 h) fits in the slack: 11 + 0.6 < 4 x 3. Stages 1-3's loop does not: 9 + 0.4 against
    # 3 x 3, its 4 h exposed (6 - floor(6 / 3)) / 2 = 2 times, 0.8; stages 1-2's or 2-3's, 2 h exposed (6 - 3) / 1 = 3
    # times, 0.6. The worst, 0.8 = 8 h: m X_max + (X_sum - X_max) + 6 h + 8 h = 24 + 8 + 1.4 = 33.4
    f, b = [2 / 3, 1.0, 1.0, 1.0], [4 / 3, 2.0, 2.0, 2.0]
    pipe, trips = closed_form(f, b, [0.0] * 4, H, M)
    assert trips == pytest.approx(8 * H, rel=1e-12)
    assert pipe == pytest.approx(33.4, rel=1e-12)
    assert op_order_step(4, M, f, b, H) == pytest.approx(33.4, rel=1e-12)
    assert simulate("1f1b", 4, M, 1, tf=f, tb=b, tc=H).total_time[0] == pytest.approx(33.4, rel=1e-12)
    # the whole pipeline's loop alone (stage 0's, as a uniform pipeline's) would carry 10 h, none of it exposed here
    assert round_trips(4, M, 1.0, 2.0, H) - (M + 3) * 3.0 - 6 * H == pytest.approx(10 * H)


@pytest.mark.parametrize("p", [3, 4, 6, 8, 16])
def test_closed_form_equals_the_simulator_with_a_lighter_first_stage(p):
    # interior stages alike, the first one lighter (an embedding stage holding fewer layers): the closed form is the
    # simulator where the first stage's slack hides the whole pipeline's loop (half the work: to 1e-12), and within
    # 0.3% where it hides part of it (the simulator's transients: 0.9 and 0.99 of the work, hand-offs to a fifth of a
    # forward; the worst p 3, m 12, light 0.9, h 0.2: 0.22% under)
    for m in (p, 2 * p + 1, 4 * p):
        for light in (0.5, 0.9, 0.99):
            for h in (0.002, 0.02, 0.2):
                f, b = [light] + [1.0] * (p - 1), [2 * light] + [2.0] * (p - 1)
                sim = simulate("1f1b", p, m, 1, tf=f, tb=b, tc=h).total_time[0]
                rel = 1e-12 if light == 0.5 else 3e-3
                assert closed_form(f, b, [0.0] * p, h, m)[0] == pytest.approx(sim, rel=rel), (p, m, light, h)


def _table(**kw) -> StrategyTable:
    cols = dict(dp=4, tp=8, pp=4, micro_batch=1, global_batch=64, schedule="1f1b", recompute="selective",
                sequence_parallel=True, zero_stage=1)
    return StrategyTable.from_columns(**(cols | kw))


# gpt3-175b's 96 layers on four stages as 24, 25, 25, 22: stages 1 and 2 the slowest, alike, so their loop (2 stages,
# 2 T_C) has no slack: exposed (14 - floor(14 / 2)) / 1 = 7 times, 14 T_C; every longer loop holds a lighter stage
# (stage 0: a layer fewer, its embedding; stage 3: three fewer, its head), whose slack is more than its hand-offs.
UNEVEN = np.array([[24, 25, 25, 22]])


def _t_c(model, cl) -> float:
    """T_C by hand (test_pipeline_blocking.hand_t_c: micro-batch 1, tp 8, a stage's 32 GPUs on four nodes, 167.29 us);
    GPipe's closed-form hand-offs on the same links are the fill's and drain's alone, 2 (p - 1) T_C."""
    t_c = hand_t_c(cl)
    gpipe = evaluate(model, cl, _table(schedule="gpipe"), framework="generic", pipeline="closed_form")["pp_comm_s"][0]
    assert gpipe == pytest.approx(2 * (4 - 1) * t_c, rel=1e-9)
    return t_c


@pytest.mark.parametrize("framework", ["generic", "hai-llm", "internevo"])
@pytest.mark.parametrize("pipeline", ["closed_form", "simulate"])
def test_non_blocking_profiles_price_the_round_trips_as_the_reference_does(framework, pipeline):
    # gpt3-175b on 128 H100s, pp 4, dp 4, 16 micro-batches, a profile whose sends do not block: the vectorised
    # evaluator and the scalar reference alike, and the closed form's hand-offs 6 + 14 = 20 T_C
    model, cl = model_preset("gpt3-175b"), cluster_preset("h100x128")
    table = _table(stage_layers=UNEVEN)
    on = evaluate(model, cl, table, framework=framework, pipeline=pipeline)
    ref = evaluate_row(model, cl, table.row(0), framework=framework, pipeline=pipeline)
    assert on["step_time_s"][0] == pytest.approx(ref["step_time_s"], rel=1e-9)
    assert on["pp_comm_s"][0] == pytest.approx(ref["pp_comm_s"], rel=1e-9)
    if pipeline == "closed_form":
        assert on["pp_comm_s"][0] == pytest.approx(20 * _t_c(model, cl), rel=1e-9)


@pytest.mark.parametrize("framework,schedule,vpp,layers,want", [
    ("generic", "1f1b", 1, UNEVEN, 2 * 3 + 14),  # the round trips (above)
    ("generic", "1f1b", 1, None, 2 * 3),  # 24 layers a stage: the head's stage the slowest, every loop in its slack
    ("megatron-core", "1f1b", 1, UNEVEN, 2 * 3 + (2 * 16 - 3)),  # blocking: its steady state's 2m - 3, no round trips
    ("deepspeed", "1f1b", 1, UNEVEN, 2 * 3 + 2 * (2 * 16 - 3)),  # blocking, two calls an exchange
    ("fsdp2", "interleaved", 2, None, 2 * 3 + (2 * 2 * 16 - 2)),  # torch's interleaved grid: 2vm - 2
    ("generic", "interleaved", 2, None, 2 * 3),  # interleaved, asynchronous: the fill's and drain's alone
])
def test_each_schedule_keeps_its_own_hand_offs(framework, schedule, vpp, layers, want):
    # gpt3-175b on 128 H100s, pp 4, 16 micro-batches: each row's closed-form hand-offs in T_C, the reference's alike
    model, cl = model_preset("gpt3-175b"), cluster_preset("h100x128")
    t_c = _t_c(model, cl)
    table = _table(schedule=schedule, vpp=vpp, stage_layers=layers)
    got = evaluate(model, cl, table, framework=framework, pipeline="closed_form")
    ref = evaluate_row(model, cl, table.row(0), framework=framework, pipeline="closed_form")
    assert got["pp_comm_s"][0] == pytest.approx(want * t_c, rel=1e-9)
    assert ref["pp_comm_s"] == pytest.approx(want * t_c, rel=1e-9)
