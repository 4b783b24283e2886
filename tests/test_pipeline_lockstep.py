"""torch.distributed.pipelining's interleaved 1F1B (Framework.lockstep_interleaved): a grid of time steps, each a pass
then one batched exchange with the neighbours that the next step waits on. A hand calculation of the step against the
grid's simulation, torch's program run as NCCL rendezvous, the closed form and the evaluators.

torch 2.6.0 (git 2236df1) torch/distributed/pipelining/schedules.py: ScheduleInterleaved1F1B builds, per rank r, r
idle steps, (v - 1) N + 2 (p - 1 - r) warm-up forwards (N = m // max(1, m // p) micro-batches a round), idle steps up
to step p v + 2 (p - 1 - r), then (forward, backward) pairs, then (idle, backward) pairs; PipelineScheduleMulti.
_step_microbatches runs a step's pass, then ``_batch_p2p(ops).wait()`` on its sends and the receives its neighbours'
passes of the same step imply.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from costmodel import StrategyTable, cluster_preset, evaluate, model_preset, simulate
from costmodel._block import lockstep_handoffs_s
from costmodel._pipeline import simulate_lockstep
from costmodel._reference import evaluate_row
from tests.test_pipeline_blocking import _rendezvous_time, hand_t_c

P, M, V, F, B, H = 4, 8, 2, 1.0, 2.0, 0.1


def hand_step() -> float:
    """p = 4, m = 8, v = 2: a chunk's forward f = F / v = 0.5, backward b = B / v = 1, hand-off h = 0.1.

    Steps 0-7 are forwards whose exchanges chain every rank to its neighbours: 8 (f + h) = 4.8. Step 8 is the last
    rank's first forward of the last virtual stage (the grid puts it a step after its input came: post_warmup_ops 1),
    nothing to send: f, 5.3. Step 9 its backward, whose gradient goes to rank 2: b + h, 6.4. Steps 10-13 are two
    (forward, backward) pairs as the backwards reach ranks 2 and 1, each step ending in an exchange: 2 (f + b + 2h),
    9.8. Steps 14-29 are the steady state, every rank on a forward, then every rank on a backward: 8 (f + b + 2h), 23.4.
    Step 30 is the last rank's last forward (of the last virtual stage, nothing to send): f, 23.9; step 31 its
    backward, which rank 0, sending its own backward's gradient to it, waits for: b + h, 25.0. Then the cool-down,
    a backward every other step: six with a gradient to send (b + h each), 31.6, and the first virtual stage's last
    backward, nothing to send: b, 32.6. In all

        20 f + 19 b + 36 h = 19 (f + b) + f + 36 h = (m + (p - 1) / v)(F + B) + F / v + (2 (p - 1) + 2vm - 2) h
        = 28.5 + 0.5 + 3.6 = 32.6
    """
    f, b = F / V, B / V
    path = 8 * (f + H) + f + (b + H) + 2 * (f + b + 2 * H) + 8 * (f + b + 2 * H) + f + (b + H) + 6 * (b + H) + b
    assert path == pytest.approx((M + (P - 1) / V) * (F + B) + F / V + (2 * (P - 1) + 2 * V * M - 2) * H)
    return path


def test_hand_calculation_equals_the_grid_simulation():
    want = hand_step()
    assert want == pytest.approx(32.6)
    assert simulate_lockstep(P, M, V, tf=F, tb=B, tc=H)[0] == pytest.approx(want, rel=1e-12)
    # the dependency-driven simulator with blocking hand-offs (Megatron-Core's 1F1B rule: a pass whose input comes
    # from another device starts h after both ends) on the same pass order waits less: torch's grid also holds a
    # sender until the receiver has finished its own step, and every step waits, needed or not
    blocking = simulate("interleaved", P, M, V, tf=F, tb=B, tc=H, blocking=True).total_time[0]
    free = simulate("interleaved", P, M, V, tf=F, tb=B, tc=H).total_time[0]
    assert free < blocking < want - 0.5


def _torch_grid(p: int, m: int, v: int) -> list[list]:
    """Each rank's actions from torch's rules (module docstring): (kind, virtual stage, micro-batch) or None."""
    rounds = max(1, m // p)
    n = m // rounds
    grid = []
    for r in range(p):
        warm = min((v - 1) * n + 2 * (p - 1 - r), v * m)
        seen_f, seen_b = [0] * v, [0] * v

        def forward(k, r=r, seen_f=seen_f):
            c = (k // n) % v
            seen_f[c] += 1
            return ("F", c * p + r, seen_f[c] - 1)

        def backward(k, r=r, warm=warm, seen_b=seen_b):
            c = v - 1 - ((k - warm) // n) % v
            seen_b[c] += 1
            return ("B", c * p + r, seen_b[c] - 1)

        acts = [None] * r
        for k in range(v * m + warm):  # warm-up forwards, (forward, backward) pairs, cool-down backwards
            if k < warm:
                acts.append(forward(k))
                if k == warm - 1:
                    acts += [None] * (v * p + 2 * (p - 1 - r) - (warm + r))
            elif k < v * m:
                acts += [forward(k), backward(k)]
            else:
                acts += [None, backward(k)]
        grid.append(acts)
    return grid


def _program(grid: list, r: int, p: int, v: int) -> list:
    """Rank r's stream: per step its pass, then one waited batch of its sends and the receives its neighbours' passes
    of the step imply (the items _rendezvous_time reads: ("C", kind), ("X", ops, True))."""
    last = v * p - 1
    prog = []
    for t, act in enumerate(grid[r]):
        ops = []
        if act is not None:
            prog.append(("C", act[0]))
            kind, s, j = act
            if kind == "F" and s < last:
                ops.append(("send", ("F", j, s)))
            if kind == "B" and s > 0:
                ops.append(("send", ("B", j, s)))
        for q in {(r - 1) % p, (r + 1) % p} - {r} if p > 1 else ():
            other = grid[q][t] if t < len(grid[q]) else None
            if other is None:
                continue
            kind, s, j = other
            if kind == "F" and s < last and (s + 1) % p == r:
                ops.append(("recv", ("F", j, s)))
            if kind == "B" and s > 0 and (s - 1) % p == r:
                ops.append(("recv", ("B", j, s)))
        if ops:
            prog.append(("X", ops, True))
    return prog


@pytest.mark.parametrize("p,m,v,h", [(4, 8, 2, 0.1), (2, 4, 2, 0.03), (3, 6, 3, 0.2), (4, 6, 2, 0.1), (4, 10, 2, 0.05),
                                     (8, 16, 4, 0.02)])
def test_grid_simulation_is_torchs_program_under_rendezvous(p, m, v, h):
    # torch's program (each exchange completing h after both ranks post it, a pass after the stream's previous work)
    # gives the grid's simulation, m a multiple of p or not (where the grid is a valid order: every input and gradient
    # received at a step before the one that uses it)
    assert not _torch_grid_invalid(p, m, v)
    grid = _torch_grid(p, m, v)
    want = _rendezvous_time([_program(grid, r, p, v) for r in range(p)], {"F": F / v, "B": B / v}, h)
    assert simulate_lockstep(p, m, v, tf=F, tb=B, tc=h)[0] == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("p,m,v", [(2, 2, 2), (2, 6, 4), (3, 9, 3), (4, 8, 2), (4, 16, 4), (8, 8, 2), (8, 24, 3)])
def test_closed_form_equals_the_grid_on_uniform_stages(p, m, v):
    # (m + (p - 1) / v)(F + B) + F / v + 2 (p - 1) c + (2vm - 2) c, where p divides m and c is at most a tenth of a
    # chunk's forward
    for b, c in ((2.0, 0.0), (2.0, 0.1 / v), (3.5, 0.05 / v), (1.5, 0.02 / v)):
        sim = simulate_lockstep(p, m, v, tf=1.0, tb=b, tc=c)[0]
        closed = ((m + (p - 1) / v) * (1.0 + b) + 1.0 / v + 2 * (p - 1) * c
                  + lockstep_handoffs_s(np.array([c]), np.array([v]), np.array([m]))[0])
        assert closed == pytest.approx(sim, rel=1e-12)


def _interleaved(m: int, zero: int = 1) -> StrategyTable:
    """(ZeRO-2 under the torch profiles: FSDP has no ZeRO-1, and with a pipeline prices ZeRO-2 as ZeRO-1)"""
    return StrategyTable.from_columns(dp=4, tp=8, pp=4, micro_batch=1, global_batch=4 * m, schedule="interleaved",
                                      vpp=2, recompute="selective", sequence_parallel=True, zero_stage=zero)


def _without_lockstep(framework: str):
    import costmodel._frameworks as fws

    off = dataclasses.replace(fws.FRAMEWORKS[framework], name=framework + "-async-grid", lockstep_interleaved=False)
    fws.FRAMEWORKS[off.name] = off
    return off.name


@pytest.mark.parametrize("framework", ["fsdp2", "fsdp2-async-tp"])
@pytest.mark.parametrize("pipeline", ["closed_form", "simulate"])
def test_torch_profiles_price_the_grid(framework, pipeline):
    # gpt3-175b on 128 H100s, pp 4, vpp 2, 8 micro-batches: the closed form carries (2 v m - 2) T_C more hand-off time
    # than the same profile with lockstep_interleaved off, and the bottleneck's chunk forward more bubble; the grid
    # simulated is slower too; the vectorised evaluator and the scalar reference alike
    import costmodel._frameworks as fws

    model, cl, m = model_preset("gpt3-175b"), cluster_preset("h100x128"), 8
    table = _interleaved(m, zero=2)
    on = evaluate(model, cl, table, framework=framework, pipeline=pipeline)
    ref = evaluate_row(model, cl, table.row(0), framework=framework, pipeline=pipeline)
    assert on["step_time_s"][0] == pytest.approx(ref["step_time_s"], rel=1e-9)
    name = _without_lockstep(framework)
    try:
        off = evaluate(model, cl, table, framework=name, pipeline=pipeline)
    finally:
        del fws.FRAMEWORKS[name]
    t_c = hand_t_c(cl)  # micro-batch 1, tp 8, a stage's 32 GPUs on four nodes: 167.29 us
    if pipeline == "closed_form":
        assert off["pp_comm_s"][0] == pytest.approx(2 * (4 - 1) * t_c, rel=1e-9)  # the fill's and drain's alone
        assert on["pp_comm_s"][0] - off["pp_comm_s"][0] == pytest.approx((2 * 2 * m - 2) * t_c, rel=1e-6)
        assert on["bubble_s"][0] > off["bubble_s"][0]
    assert on["step_time_s"][0] > off["step_time_s"][0] + (2 * 2 * m - 2) * t_c


def test_megatron_core_interleaving_is_not_the_grid():
    # Megatron-Core overlaps its interleaved hand-offs (overlap_p2p_comm): not priced as torch's grid
    import costmodel._frameworks as fws

    assert not fws.FRAMEWORKS["megatron-core"].lockstep_interleaved
    model, cl = model_preset("gpt3-175b"), cluster_preset("h100x128")
    table = _interleaved(8)
    mc = evaluate(model, cl, table, framework="megatron-core", pipeline="closed_form")
    name = _without_lockstep("fsdp2")
    try:  # the same hand-off bytes on the same links: the closed form's fill and drain only, 2 (p - 1) T_C
        off = evaluate(model, cl, _interleaved(8, zero=2), framework=name, pipeline="closed_form")
    finally:
        del fws.FRAMEWORKS[name]
    assert mc["pp_comm_s"][0] == pytest.approx(off["pp_comm_s"][0], rel=1e-12)
    assert mc["pp_comm_s"][0] == pytest.approx(2 * (4 - 1) * hand_t_c(cl), rel=1e-9)


def test_grid_rows_whose_grid_is_not_an_order_keep_asynchronous_hand_offs():
    # where pp does not divide m torch's grid is not always an order the passes' inputs allow (m < pp never: a pass
    # falls on the step its input is sent), so those rows are priced as the profile without the grid: m = 6 and 3 on
    # pp 4, both modes, and the scalar reference the same
    import costmodel._frameworks as fws

    assert _torch_grid_invalid(4, 3, 2) and all(_torch_grid_invalid(p, m, 2) for p in (2, 4, 8) for m in range(1, p))
    assert not any(_torch_grid_invalid(p, k * p, v) for p in (2, 4, 8) for k in (1, 2, 3) for v in (2, 3, 4))
    model, cl = model_preset("gpt3-175b"), cluster_preset("h100x128")
    name = _without_lockstep("fsdp2")
    try:
        for m in (6, 3):
            table = _interleaved(m, zero=2)
            for pipeline in ("closed_form", "simulate"):
                on = evaluate(model, cl, table, framework="fsdp2", pipeline=pipeline)
                off = evaluate(model, cl, table, framework=name, pipeline=pipeline)
                ref = evaluate_row(model, cl, table.row(0), framework="fsdp2", pipeline=pipeline)
                assert on["step_time_s"][0] == off["step_time_s"][0]
                assert on["step_time_s"][0] == pytest.approx(ref["step_time_s"], rel=1e-9)
    finally:
        del fws.FRAMEWORKS[name]


def _torch_grid_invalid(p: int, m: int, v: int) -> bool:
    """Whether some pass of torch's grid falls on or before the step its input is sent."""
    grid = _torch_grid(p, m, v)
    step_of = {act: t for acts in grid for t, act in enumerate(acts) if act is not None}
    return any(step_of[_producer(act, v * p)] >= t for act, t in step_of.items() if _producer(act, v * p) is not None)


def _producer(act, stages):
    kind, s, j = act
    if kind == "F":
        return ("F", s - 1, j) if s > 0 else None
    return ("B", s + 1, j) if s < stages - 1 else ("F", s, j)
