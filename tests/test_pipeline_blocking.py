"""1F1B whose hand-offs block (Framework.blocking_p2p, Megatron-Core's pipeline without interleaving): a hand
calculation of the step against the simulator, the closed form and the scalar reference.

Megatron-LM d98e8a6 megatron/core/pipeline_parallel/schedules.py forward_backward_pipelining_without_interleaving:
stage i runs min(p - i - 1, m) warm-up forwards (recv_forward, forward, send_forward), then per remaining micro-batch
forward -> send_forward_recv_backward -> backward -> send_backward_recv_forward, then the cool-down backwards
(recv_backward, backward, send_backward); p2p_communication.py _communicate waits on each batched isend / irecv and
then calls torch.cuda.synchronize(). An exchange therefore ends h after both stages have reached it.
"""

from __future__ import annotations

import numpy as np
import pytest

from costmodel import StrategyTable, cluster_preset, evaluate, model_preset, simulate
from costmodel._block import steady_handoffs_s
from costmodel._reference import evaluate_row

P, M, F, B, H = 4, 8, 1.0, 2.0, 0.1


def hand_step() -> float:
    """p = 4, m = 8, forward f = 1, backward b = 2, hand-off h = 0.1, along the critical path.

    Micro-batch 0's forward crosses three boundaries: stage 3 starts it at 3 (f + h) = 3.3 and runs its backward at
    once (the last stage sends nothing forward): B0 ends at 3.3 + f + b = 6.3. Stage 3's next forward waits for the
    exchange with stage 2 (B0's gradient up, micro-batch 1's input down): B1 ends h + f + b later, 9.4. From then on
    stage 2's period, f + b + 2h = 3.2 (its forward, the exchange with stage 3, its backward, the exchange with stage
    1), sets the pace: B2 .. B7 on stage 3 end 6 x 3.2 later, 28.6. B7's gradient then climbs three stages, h + b
    each: stage 0 ends at 28.6 + 6.3 = 34.9. In all:

        3 (f + h) + (f + b) + (h + f + b) + 6 (f + b + 2h) + 3 (h + b) = 11 (f + b) + 19 h
        = (m + p - 1)(f + b) + (2 (p - 1) + 2m - 3) h = 33 + 1.9 = 34.9
    """
    return (M + P - 1) * (F + B) + (2 * (P - 1) + 2 * M - 3) * H


def test_hand_calculation_equals_the_simulator():
    want = hand_step()
    assert want == pytest.approx(34.9)
    got = simulate("1f1b", P, M, 1, tf=F, tb=B, tc=H, blocking=True).total_time[0]
    assert got == pytest.approx(want, rel=1e-12)
    # where the sender never waits, the round trip of 2 (p - 1) h is shared by the p micro-batches in flight: a period
    # of f + b + 2 (p - 1) h / p, less than the blocking f + b + 2h
    free = simulate("1f1b", P, M, 1, tf=F, tb=B, tc=H).total_time[0]
    assert free < got - H


def test_closed_form_steady_hand_offs_equal_the_hand_calculation():
    # steady_handoffs_s on one uniform link: (2m - 3) h for p >= 3, (m - 1) h for p = 2 (one exchange a period), none
    # for one micro-batch
    c = np.array([[H, H, H, H]])
    got = steady_handoffs_s(c, np.array([4, 2, 4, 3]), np.array([8, 8, 1, 2]))
    np.testing.assert_allclose(got, [13 * H, 7 * H, 0.0, 1 * H], rtol=1e-12)
    assert 2 * (P - 1) * H + got[0] + (M + P - 1) * (F + B) == pytest.approx(hand_step(), rel=1e-12)
    # per-stage links (k, N) with the representatives' layout: the same where every link is alike
    links = np.array([[H], [H], [H], [0.0]])  # p = 4: three inner links, the last stage's none
    assert steady_handoffs_s(links, np.array([4]), np.array([8]), np.array([False]))[0] == pytest.approx(13 * H)


@pytest.mark.parametrize("p,m", [(2, 1), (2, 5), (3, 3), (4, 8), (5, 4), (8, 16), (8, 3)])
def test_closed_form_equals_the_simulator_on_uniform_stages(p, m):
    c = 0.03
    sim = simulate("1f1b", p, m, 1, tf=1.0, tb=2.0, tc=c, blocking=True).total_time[0]
    closed = (m + p - 1) * 3.0 + 2 * (p - 1) * c + steady_handoffs_s(np.array([[c]]), np.array([p]), np.array([m]))[0]
    assert closed == pytest.approx(sim, rel=1e-12)


def _one_f_one_b(pp: int, zero: int = 1) -> StrategyTable:
    return StrategyTable.from_columns(dp=4, tp=8, pp=pp, micro_batch=1, global_batch=64, schedule="1f1b",
                                      recompute="selective", sequence_parallel=True, zero_stage=zero)


def hand_t_c(cluster) -> float:
    """T_C, one hand-off of gpt3-175b's rows on 128 H100s (tp 8, dp 4, micro-batch 1) by hand: 2 bytes (16-bit
    activations) x T (1 x 2048 tokens) x h (12288) / t (8) = 6,291,456 bytes. A stage's t x d = 32 GPUs are four whole
    nodes, so the hand-off crosses the network: 50 GB/s x link_eff 0.8 = 40 GB/s, 157.29 us, plus its 10 us latency:
    167.29 us."""
    nbytes = 2 * (1 * 2048) * 12288 / 8
    return nbytes / (cluster.scaleout_Bps * cluster.gpu.link_eff) + cluster.scaleout_latency_s


def test_hand_t_c_is_the_hand_figure():
    assert hand_t_c(cluster_preset("h100x128")) == pytest.approx(167.29e-6, rel=1e-4)


@pytest.mark.parametrize("pipeline", ["closed_form", "simulate"])
def test_megatron_core_prices_the_steady_hand_offs(pipeline):
    # gpt3-175b on 128 H100s, pp 4, dp 4, 16 micro-batches: megatron-core's closed form carries (2 x 16 - 3) T_C more
    # than the same profile with blocking_p2p off, the simulator more too; the vectorised evaluator and the scalar
    # reference alike
    import dataclasses

    import costmodel._frameworks as fws

    model, cl = model_preset("gpt3-175b"), cluster_preset("h100x128")
    table = _one_f_one_b(4)
    on = evaluate(model, cl, table, framework="megatron-core", pipeline=pipeline)
    ref = evaluate_row(model, cl, table.row(0), framework="megatron-core", pipeline=pipeline)
    assert on["step_time_s"][0] == pytest.approx(ref["step_time_s"], rel=1e-9)
    off_fw = dataclasses.replace(fws.FRAMEWORKS["megatron-core"], name="megatron-core-async-p2p", blocking_p2p=False)
    fws.FRAMEWORKS[off_fw.name] = off_fw
    try:
        off = evaluate(model, cl, table, framework=off_fw.name, pipeline=pipeline)
    finally:
        del fws.FRAMEWORKS[off_fw.name]
    t_c = hand_t_c(cl)
    m = 64 // 4
    if pipeline == "closed_form":
        assert off["pp_comm_s"][0] == pytest.approx(2 * (4 - 1) * t_c, rel=1e-9)  # the fill's and drain's alone
        assert on["step_time_s"][0] - off["step_time_s"][0] == pytest.approx((2 * m - 3) * t_c, rel=1e-6)
    else:  # the simulator's non-blocking 1F1B already waits 2 (p - 1) / p of it (test_hand_calculation_...)
        assert on["step_time_s"][0] > off["step_time_s"][0] + t_c


def _torch_1f1b_program(i: int, p: int, m: int) -> list:
    """Rank i's stream under torch.distributed.pipelining's Schedule1F1B (pytorch 1fd7abc schedules.py
    Schedule1F1B._step_microbatches): min(m, p - i) warm-up forwards, each after its receive is waited on, its send
    fired and waited on after the next forward (the last one's held back); then backward after the batched (forward
    send, backward receive) is waited on, forward after the batched (backward send, forward receive) is waited on; then
    the cool-down backwards. Items: ("C", seconds-key) a pass, ("X", ops, waited) a batch, ("W", index) a wait on batch."""
    def ops(direction, kind, k, peer_ok, stage):
        return [(direction, (kind, k, stage))] if peer_ok else []
    recv_f = lambda k: ops("recv", "F", k, i > 0, i - 1)  # noqa: E731
    send_f = lambda k: ops("send", "F", k, i < p - 1, i)  # noqa: E731
    recv_b = lambda k: ops("recv", "B", k, i < p - 1, i + 1)  # noqa: E731
    send_b = lambda k: ops("send", "B", k, i > 0, i)  # noqa: E731
    prog, warm, sent, f, b = [], min(m, p - i), None, 0, 0
    for _ in range(warm):
        prog += [("X", recv_f(f), True), ("C", "F")]
        if sent is not None:
            prog.append(("W", sent))
        fs = send_f(f)
        if f != warm - 1:
            sent = len(prog)
            prog.append(("X", fs, False))
        f += 1
    while True:
        prog += [("X", fs + recv_b(b), True), ("C", "B")]
        bs, b = send_b(b), b + 1
        if f == m:
            break
        prog += [("X", bs + recv_f(f), True), ("C", "F")]
        fs, f = send_f(f), f + 1
    sent = len(prog)
    prog.append(("X", bs, False))
    while b < m:
        prog += [("X", recv_b(b), True), ("C", "B"), ("W", sent)]
        sent = len(prog)
        prog.append(("X", send_b(b), False))
        b += 1
    return prog + [("W", sent)]


def _rendezvous_time(progs: list, dur: dict, h: float) -> float:
    """Step time of per-rank programs where a send and its receive complete h after both sides have posted them (NCCL
    point-to-point), a pass runs on the stream after what is before it, a waited batch holds the stream until it
    completes; found as the least fixed point of the posting times (they only grow)."""
    posted: dict = {}
    for _ in range(1000):
        changed, ends = False, []
        for prog in progs:
            t, batch_end = 0.0, {}
            for idx, item in enumerate(prog):
                if item[0] == "C":
                    t += dur[item[1]]
                elif item[0] == "W":
                    t = max(t, batch_end[item[1]])
                else:
                    end = t
                    for direction, key in item[1]:
                        sides = posted.setdefault(key, {})
                        changed |= sides.get(direction) != t
                        sides[direction] = t
                        other = sides.get("recv" if direction == "send" else "send", np.inf)
                        end = max(end, max(t, other) + h)
                    batch_end[idx] = end
                    if item[2]:
                        t = end
            ends.append(t)
        if not changed:
            return max(ends)
    raise AssertionError("no fixed point")


def test_torch_schedule_1f1b_is_the_blocking_simulation():
    # torch's program, each hand-off completing h after both ranks post it, gives the hand calculation at p 4, m 8 and
    # the simulator's blocking 1F1B elsewhere; without blocking the simulator is faster (the fsdp2 profiles' flag)
    dur = {"F": F, "B": B}
    assert _rendezvous_time([_torch_1f1b_program(i, P, M) for i in range(P)], dur, H) == pytest.approx(hand_step())
    for p, m, h in [(2, 2, 0.1), (3, 3, 0.03), (5, 4, 0.1), (8, 8, 0.03), (8, 16, 0.1)]:
        got = _rendezvous_time([_torch_1f1b_program(i, p, m) for i in range(p)], dur, h)
        assert got == pytest.approx(simulate("1f1b", p, m, 1, tf=F, tb=B, tc=h, blocking=True).total_time[0])
        assert got > simulate("1f1b", p, m, 1, tf=F, tb=B, tc=h).total_time[0] + h / 2


def _variant(framework: str, suffix: str = "-async-p2p", **changes):
    """The profile with ``changes`` (default: blocking_p2p off), registered under a new name (the caller deletes it)."""
    import dataclasses

    import costmodel._frameworks as fws

    fw = dataclasses.replace(fws.FRAMEWORKS[framework], name=framework + suffix, **(changes or {"blocking_p2p": False}))
    fws.FRAMEWORKS[fw.name] = fw
    return fw.name


@pytest.mark.parametrize("framework", ["fsdp2", "fsdp2-async-tp", "megatron-core"])
def test_torch_pipelines_price_the_steady_hand_offs(framework):
    # torch.distributed.pipelining's Schedule1F1B (test above) waits on its steady-state hand-offs as Megatron-Core
    # does, each exchange one batched call: the closed form carries (2m - 3) T_C more than the same profile with
    # blocking_p2p off (gpt3-175b on 128 H100s, pp 4, dp 4, 16 micro-batches), and the scalar reference the same
    import costmodel._frameworks as fws

    model, cl = model_preset("gpt3-175b"), cluster_preset("h100x128")
    table = _one_f_one_b(4, zero=1 if framework == "megatron-core" else 2)  # (FSDP: no ZeRO-1; ZeRO-2 priced alike)
    on = evaluate(model, cl, table, framework=framework, pipeline="closed_form")
    ref = evaluate_row(model, cl, table.row(0), framework=framework, pipeline="closed_form")
    assert on["step_time_s"][0] == pytest.approx(ref["step_time_s"], rel=1e-9)
    off_name = _variant(framework)
    try:
        off = evaluate(model, cl, table, framework=off_name, pipeline="closed_form")
    finally:
        del fws.FRAMEWORKS[off_name]
    t_c = hand_t_c(cl)
    assert off["pp_comm_s"][0] == pytest.approx(2 * (4 - 1) * t_c, rel=1e-9)  # the fill's and drain's alone
    assert on["step_time_s"][0] - off["step_time_s"][0] == pytest.approx((2 * 16 - 3) * t_c, rel=1e-6)


# ---- DeepSpeed's TrainSchedule: each steady-state exchange two calls, one after the other ---------------------------

def _deepspeed_step(step: int, i: int, p: int) -> tuple[int, bool]:
    """DeepSpeed 735406e deepspeed/runtime/pipe/schedule.py TrainSchedule._step_to_micro_batch: the micro-batch stage
    i works on at ``step`` and whether it is a forward step (even stages forward on even steps, odd on odd)."""
    if step % 2 == i % 2:
        return (step - i % 2) // 2 - i // 2, True
    if step % 2 == 0:  # an odd stage's backward step
        return step // 2 - p + (i + 1) // 2, False
    return (step - 1) // 2 - p + 1 + i // 2, False


def _deepspeed_program(i: int, p: int, m: int, later: bool = False) -> list:
    """Rank i's stream under DeepSpeed's TrainSchedule (735406e; ``later``: 38327e0, each step's two calls in the
    other order): 2 (m + p - 1) steps, each its exchange with one neighbour, then its pass. A forward step receives
    its micro-batch's activation (RecvActivation) and sends the previous step's gradient (SendGrad) to stage i - 1; a
    backward step sends the previous step's activation (SendActivation) and receives its micro-batch's gradient
    (RecvGrad) from stage i + 1. Each call is p2p.py's dist.send / dist.recv, waited on before the next (async_op
    refused): items as _torch_1f1b_program's, every batch one transfer and waited."""
    valid = lambda k: 0 <= k < m  # noqa: E731
    prog, prev = [], -1
    for step in range(2 * (m + p - 1)):
        k, forward = _deepspeed_step(step, i, p)
        if forward:
            ops = ([("recv", ("F", k, i - 1))] if valid(k) and i > 0 else []) + \
                  ([("send", ("B", prev, i))] if valid(prev) and i > 0 else [])
        else:
            ops = ([("send", ("F", prev, i))] if valid(prev) and i < p - 1 else []) + \
                  ([("recv", ("B", k, i + 1))] if valid(k) and i < p - 1 else [])
        prog += [("X", [op], True) for op in (ops[::-1] if later else ops)]
        if valid(k):
            prog.append(("C", "F" if forward else "B"))
        prev = k
    return prog


def deepspeed_hand_step() -> float:
    """p = 4, m = 8, f = 1, b = 2, h = 0.1 under DeepSpeed's TrainSchedule, along the critical path.

    Micro-batch 0's forward crosses three boundaries, one receive each: stage 3 starts it at 3 (f + h) = 3.3 and its
    backward B0 ends at 6.3. Stage 3's next forward step receives micro-batch 1's activation, then sends B0's
    gradient: two calls with stage 2, one after the other, 2h; B1 ends 2h + f + b later, 9.5. From then on stage 2's
    period sets the pace: its forward, a backward step's send and receive with stage 3 (2h), its backward, a forward
    step's receive and send with stage 1 (2h): f + b + 4h = 3.4, six times, B7 on stage 3 at 29.9. B7's gradient then
    climbs three stages, one receive each, h + b: stage 0 ends at 29.9 + 6.3 = 36.2. In all:

        3 (f + h) + (f + b) + (2h + f + b) + 6 (f + b + 4h) + 3 (h + b) = 11 (f + b) + 32 h
        = (m + p - 1)(f + b) + (2 (p - 1) + 2 (2m - 3)) h = 33 + 3.2 = 36.2

    the fill and drain's 2 (p - 1) h as a batched exchange's, the steady state's 2m - 3 exchanges twice each.
    """
    return (M + P - 1) * (F + B) + (2 * (P - 1) + 2 * (2 * M - 3)) * H


def test_deepspeed_hand_calculation_equals_its_op_order():
    dur = {"F": F, "B": B}
    want = deepspeed_hand_step()
    assert want == pytest.approx(36.2)
    for later in (False, True):
        got = _rendezvous_time([_deepspeed_program(i, P, M, later) for i in range(P)], dur, H)
        assert got == pytest.approx(want, rel=1e-12)
    # a batched exchange (Megatron-Core's, the blocking simulator) waits 2m - 3 hand-offs fewer
    assert simulate("1f1b", P, M, 1, tf=F, tb=B, tc=H, blocking=True).total_time[0] == \
        pytest.approx(want - (2 * M - 3) * H)


@pytest.mark.parametrize("p,m", [(2, 1), (2, 5), (3, 2), (3, 3), (4, 3), (5, 4), (8, 8), (8, 16), (12, 32)])
def test_deepspeed_closed_form_equals_its_op_order_on_uniform_stages(p, m):
    # (m + p - 1)(f + b) + 2 (p - 1) h + 2 steady_handoffs_s, for hand-offs no longer than a forward
    f, b = 1.0, 2.5
    for h in (0.03, 0.4):
        sim = _rendezvous_time([_deepspeed_program(i, p, m) for i in range(p)], {"F": f, "B": b}, h)
        steady = steady_handoffs_s(np.array([[h]]), np.array([p]), np.array([m]))[0]
        assert (m + p - 1) * (f + b) + 2 * (p - 1) * h + 2 * steady == pytest.approx(sim, rel=1e-12)


@pytest.mark.parametrize("framework", ["deepspeed", "deepspeed-flash2"])
@pytest.mark.parametrize("pipeline", ["closed_form", "simulate"])
def test_deepspeed_prices_each_steady_exchange_twice(framework, pipeline):
    # DeepSpeed's profiles (Framework.exchange_calls 2) carry (2m - 3) T_C more than the same profile with one call an
    # exchange, as Megatron-Core's batched exchange (gpt3-175b on 128 H100s, pp 4, dp 4, 16 micro-batches; the
    # simulator's batched exchanges plus the second call of each), and 2 (2m - 3) T_C more than with blocking_p2p off
    # in the closed form; the scalar reference the same
    import costmodel._frameworks as fws

    assert fws.FRAMEWORKS[framework].exchange_calls == 2
    model, cl = model_preset("gpt3-175b"), cluster_preset("h100x128")
    table = _one_f_one_b(4)
    on = evaluate(model, cl, table, framework=framework, pipeline=pipeline)
    ref = evaluate_row(model, cl, table.row(0), framework=framework, pipeline=pipeline)
    assert on["step_time_s"][0] == pytest.approx(ref["step_time_s"], rel=1e-9)
    assert on["pp_comm_s"][0] == pytest.approx(ref["pp_comm_s"], rel=1e-9)
    off_name, one_name = _variant(framework), _variant(framework, "-one-call", exchange_calls=1)
    try:
        off = evaluate(model, cl, table, framework=off_name, pipeline="closed_form")
        one = evaluate(model, cl, table, framework=one_name, pipeline=pipeline)
        one_ref = evaluate_row(model, cl, table.row(0), framework=one_name, pipeline=pipeline)
    finally:
        del fws.FRAMEWORKS[off_name], fws.FRAMEWORKS[one_name]
    t_c = hand_t_c(cl)
    m = 64 // 4
    assert on["step_time_s"][0] - one["step_time_s"][0] == pytest.approx((2 * m - 3) * t_c, rel=1e-6)
    assert ref["step_time_s"] - one_ref["step_time_s"] == pytest.approx((2 * m - 3) * t_c, rel=1e-6)
    if pipeline == "closed_form":
        assert on["step_time_s"][0] - off["step_time_s"][0] == pytest.approx(2 * (2 * m - 3) * t_c, rel=1e-6)


def test_trainschedule_walk_is_deepspeeds_op_order():
    # costmodel._pipeline.simulate_trainschedule: the hand calculation at p 4, m 8 (36.2), and the port of DeepSpeed's
    # programs (either call order) on uniform and uneven stages and links; calls 1 waits the steady state's 2m - 3
    # exchanges once each (the hand calculation less (2m - 3) h on uniform stages)
    from costmodel._pipeline import simulate_trainschedule

    assert simulate_trainschedule(P, M, tf=F, tb=B, tc=H)[0] == pytest.approx(deepspeed_hand_step(), rel=1e-12)
    assert simulate_trainschedule(P, M, tf=F, tb=B, tc=H, calls=1)[0] == \
        pytest.approx(deepspeed_hand_step() - (2 * M - 3) * H, rel=1e-12)
    rng = np.random.default_rng(7)
    for p, m in [(2, 1), (2, 5), (3, 2), (3, 3), (4, 3), (5, 4), (8, 16), (6, 13)]:
        tf, tb, h = rng.uniform(0.5, 1.5, p), rng.uniform(1.0, 3.0, p), rng.choice([0.03, 0.2, 0.6])
        dur = {**{("F", i): tf[i] for i in range(p)}, **{("B", i): tb[i] for i in range(p)}}
        for later in (False, True):
            progs = [[("C", (it[1], i)) if it[0] == "C" else it for it in _deepspeed_program(i, p, m, later)]
                     for i in range(p)]
            want = _rendezvous_time(progs, dur, h)
            assert simulate_trainschedule(p, m, tf=tf, tb=tb, tc=h)[0] == pytest.approx(want, rel=1e-12)
        # per-link hand-offs, two parameter sets at once
        links = np.array([rng.uniform(0.01, 0.5, p), rng.uniform(0.01, 0.5, p)])
        got = simulate_trainschedule(p, m, tf=tf, tb=tb, tc=links)
        for s in range(2):
            want = _rendezvous_linked(p, m, tf, tb, links[s])
            assert got[s] == pytest.approx(want, rel=1e-12)


def _rendezvous_linked(p, m, tf, tb, links):
    """_rendezvous_time with link i's transfers (stages i, i + 1) ``links[i]`` long: each transfer's stages known from
    its key ((kind, micro-batch, sending stage): an activation to the next stage, a gradient to the previous)."""
    progs = [[("C", (it[1], i)) if it[0] == "C" else it for it in _deepspeed_program(i, p, m)] for i in range(p)]
    dur = {**{("F", i): tf[i] for i in range(p)}, **{("B", i): tb[i] for i in range(p)}}
    posted: dict = {}
    for _ in range(1000):
        changed, ends = False, []
        for prog in progs:
            t = 0.0
            for item in prog:
                if item[0] == "C":
                    t += dur[item[1]]
                    continue
                (direction, key), = item[1]
                kind, _, stage = key
                h = links[stage if kind == "F" else stage - 1]
                sides = posted.setdefault(key, {})
                changed |= sides.get(direction) != t
                sides[direction] = t
                t = max(t, sides.get("recv" if direction == "send" else "send", np.inf)) + h
            ends.append(t)
        if not changed:
            return max(ends)
    raise AssertionError("no fixed point")
