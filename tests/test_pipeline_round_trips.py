"""1F1B whose sends do not block (Framework.blocking_p2p off: the generic, hai-llm, internevo, llama3-fsdp and
llm-foundry profiles): the steady state's round trips, by hand and from the op order, against the simulator. The
closed forms leave them out (benchmarks/closed_form_handoff_gap.py: priced, they would move a validation set past
its bound).

Megatron-LM d98e8a6 megatron/core/pipeline_parallel/schedules.py forward_backward_pipelining_without_interleaving gives
the op order: stage i runs min(p - i - 1, m) warm-up forwards, then one forward and one backward per remaining
micro-batch, then the cool-down backwards. A forward waits on the previous stage's forward of the same micro-batch and
a hand-off h, a backward on the next stage's backward and h; a send never holds its sender.
"""

from __future__ import annotations

import pytest

from costmodel import simulate

P, M, F, B, H = 4, 8, 1.0, 2.0, 0.1


def hand_step() -> float:
    """p = 4, m = 8, forward f = 1, backward b = 2, hand-off h = 0.1, along the critical path.

    Stage 0's order: F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7; stage 1's: F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7
    B5 B6 B7. The chain: micro-batch 0 down the four stages and back up (F0 on 0..3, B0 on 3..0: 4f + 4b, 6h); stage 0's
    next op, F4, down and back up to stage 1 (F4 on 0..3, B4 on 3..1: 4f + 3b, 5h); stage 1's next op, F7, down and back
    up to stage 0 (F7 on 1..3, B7 on 3..0: 3f + 4b, 5h). Each round trip ends where its stage's next forward starts, so
    no stage waits elsewhere on the chain:

        (4f + 4b + 6h) + (4f + 3b + 5h) + (3f + 4b + 5h) = 11 (f + b) + 16 h = 33 + 1.6 = 34.6

    The closed form, (m + p - 1)(f + b) + 2 (p - 1) h, is 33.6: 10 h short, the round trips'
    2 ((m - 2) - floor((m - 2) / p)) h = 2 (6 - 1) h.
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


def round_trips(p: int, m: int, f: float, b: float, h: float) -> float:
    """The closed form with one round trip every p micro-batches (benchmarks/closed_form_handoff_gap.py)."""
    return (m + p - 1) * (f + b) + 2 * (p - 1) * h + 2 * ((m - 2) - (m - 2) // p) * h


def test_hand_calculation_equals_the_op_order_and_the_simulator():
    want = hand_step()
    assert want == pytest.approx(34.6)
    assert op_order_step(P, M, F, B, H) == pytest.approx(want, rel=1e-12)
    assert simulate("1f1b", P, M, 1, tf=F, tb=B, tc=H).total_time[0] == pytest.approx(want, rel=1e-12)
    assert round_trips(P, M, F, B, H) == pytest.approx(want, rel=1e-12)
    assert (M + P - 1) * (F + B) + 2 * (P - 1) * H == pytest.approx(want - 10 * H, rel=1e-12)  # the closed form's


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
