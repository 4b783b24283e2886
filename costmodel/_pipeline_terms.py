"""The pipeline: its bubble, the bottleneck stage, micro-batches in flight, and the simulator's rows.

Closed forms for stage times X_i = F_i + B_i + W_i + recompute, m micro-batches, p stages, v
chunks, T_C the hand-off between stages:
    GPipe / 1F1B:  m * max_i X_i + (sum_i X_i - max_i X_i)       + 2 (p - 1) T_C
    interleaved:   m * max_i X_i + (sum_i X_i - max_i X_i) / v   + 2 (p - 1) T_C
    ZB-H1:         m * max_i X_i + (p - 1) max(F + B - W, 0)     + 2 (p - 1) T_C
    ZB-H2:         m * max_i X_i + (p - 1) max(F + B - 2W, 0)    + 2 (p - 1) T_C
which for uniform stages give (m + p - 1) X and (m + (p - 1)/v) X (Narayanan et al. 2021
Sec. 2.2) and the Zero Bubble paper's (Qi et al. 2023) bubble sizes. A framework whose 1F1B
waits on each hand-off (Framework.blocking_p2p: Megatron-Core's, torch.distributed.pipelining's
Schedule1F1B and DeepSpeed's TrainSchedule, all without interleaving) adds the steady state's,
max((m - 1) pair - (pair - T_C), 0) with pair the slowest stage's two links (2 T_C; T_C at p = 2):
costmodel._block.steady_handoffs_s, twice where an exchange's two transfers run one after the other
(Framework.exchange_calls: DeepSpeed's). A 1F1B whose sends do not block adds the round trips its steady state
waits on, 2 ((m - 2) - floor((m - 2) / p)) T_C on uniform stages, less what a slower stage's slack hides:
round_trip_handoffs_s, added by costmodel._block.pipeline_time. A framework whose interleaving is
torch.distributed.pipelining's grid of waited time steps (Framework.lockstep_interleaved; m a multiple of p) adds
(2vm - 2) T_C (costmodel._block.lockstep_handoffs_s) and one chunk's forward, F / v, to the fill; its simulator is
costmodel._pipeline.simulate_lockstep. pipeline_bubble_s is the second term (the fill and drain);
pipeline_step adds the rest and sends the rows outside the closed forms' domain (outside_closed_form;
ZB-V and Hanayo always) to the schedule simulator (costmodel._pipeline, through simulate_pipelines and
its per-process cache). in_flight counts the micro-batches each stage holds at its peak (the
activation memory's multiplier).

Interleaving with m >= p is inside the domain whatever m % p: the schedule then runs groups of
N >= p micro-batches chunk by chunk (interleave_groups), which on uniform stages takes exactly
(m + (p - 1)/v) X, as for m a multiple of p (the simulator's op order, every p 2-12, v 2-4,
m p..5p; tests/test_pipeline_closed_form_domain.py keeps p 2-7 and m up to 2p + 1). On uneven
stages (benchmarks/interleaved_closed_form.py: 600 random cases, p 2-16, v 2-4, m p..5p) the
closed form is within 2.1% of the simulator on average (8.3% at worst) for m % p != 0, against
2.8% (19.9%) for m % p == 0, which it has always priced.
"""

from __future__ import annotations

import functools

import numpy as np

from costmodel._distinct import distinct_rows, unique_rows
from costmodel._sorted_memo import Memo
from costmodel._strategy import SCHEDULES

SCHED = {name: i for i, name in enumerate(SCHEDULES)}
# Schedules the closed forms above price; ZB-V and Hanayo have none and are always priced by
# the pipeline simulator (costmodel._pipeline).
CLOSED_FORM_SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2")
SIMULATED_SCHEDULES = ("zb-v", "hanayo")
PIPELINE_MODES = ("closed_form", "simulate")


# The zero-bubble schedules' fills: (p - 1) x max(F + B - k W, 0) per stage boundary, k by schedule code.
ZB_FILL_W = ((SCHED["zb-h1"], 1.0), (SCHED["zb-h2"], 2.0))


def pipeline_bubble_s(sched, p, v, X_sum, X_max, F_b, B_b, W_b):
    """Pipeline fill and drain time of the closed forms (module docstring): (sum - max of the
    stage times) / v for GPipe, 1F1B and interleaving; ZB-H1 and ZB-H2 fill with the
    bottleneck's F + B - W and F + B - 2W per stage boundary (ZB_FILL_W)."""
    vv = 1 + (v - 1) * (sched == SCHED["interleaved"])  # (np.where(interleaved, v, 1): 5x the time)
    fill = (X_sum - X_max) / vv
    if np.ndim(fill) == 1 and all(np.shape(x) == fill.shape for x in (sched, p, F_b, B_b, W_b)):
        # a block's rows: the zero-bubble rows' fills written at their rows (a select over all rows costs several
        # times as much: np.where's random branches), the same values entry by entry
        for code, k in ZB_FILL_W:
            if (q := np.flatnonzero(sched == code)).size:
                fill[q] = (p[q] - 1) * np.maximum(F_b[q] + B_b[q] - k * W_b[q], 0.0)
        return fill
    for code, k in ZB_FILL_W:
        fill = np.where(sched == code, (p - 1) * np.maximum(F_b + B_b - k * W_b, 0.0), fill)
    return fill


def interleave_groups(sched, p, m):
    """(N,) micro-batches an interleaved row runs chunk by chunk (costmodel._pipeline.interleave_group_size: p where
    p divides m, m where m < p, else the smallest group size Megatron-LM accepts); p on the other rows (unread)."""
    p, m = np.broadcast_arrays(p, m)
    odd = (sched == SCHED["interleaved"]) & (m % p != 0)
    if not odd.any():
        return p
    from costmodel._pipeline import interleave_group_size

    q = np.flatnonzero(odd.ravel())
    pq, mq = p.ravel()[q].astype(np.int64), m.ravel()[q].astype(np.int64)
    keys, inv = np.unique(pq << 32 | mq, return_inverse=True)  # one int per (p, m) pair: a 1-D unique
    out = p.copy().ravel()
    out[q] = np.array([interleave_group_size(int(k >> 32), int(k & 0xFFFFFFFF)) for k in keys], dtype=out.dtype)[inv]
    return out.reshape(p.shape)


def in_flight(sched, p, m, v, stage, rows=None, extra=0, stage_of_pp=False):
    """Micro-batch activations held at the peak on pipeline stage ``stage`` (any array of
    stage indices), counted in whole-stage micro-batches (an interleaved chunk counts 1/v).
    Equal to the simulator's peak where the closed forms apply (tests/test_pipeline_in_core),
    and to the warm-up counts of the schedules' code (tests/test_pipeline_sources.py).

    GPipe holds all m; 1F1B holds p - i on stage i: p - i - 1 warm-up forwards and the steady
    state's next forward before its first backward (Megatron-LM megatron/core/pipeline_parallel/
    schedules.py, forward_backward_pipelining_without_interleaving; torch.distributed.pipelining
    Schedule1F1B: min(m, p - i) warm-up forwards, then one backward, one forward); interleaved:
    Megatron-LM's warm-up, (p - i - 1) * 2 + (v - 1) * N chunks on stage i (get_pp_rank_microbatches,
    N = microbatch_group_size_per_vp_stage: p where p divides m, else the smallest group size it accepts,
    interleave_groups; PyTorch's ScheduleInterleaved1F1B the same with N micro-batches a round), plus the
    steady state's one forward, ``extra`` more where the framework runs one more warm-up forward
    (Megatron-Core's EP A2A overlap), at most all m v chunks; ZB-H1 holds p on every stage, ZB-H2 about 2p - 1
    (Qi et al. 2023). ``rows``: the schedule columns are per row and ``stage`` holds stages of rows ``rows``
    (flat stages). ``stage_of_pp``: ``stage`` (k, N) holds each row's stages as a function of its pp (a block's
    StageView.j), so that rows alike in (schedule, pp, m, vpp) hold alike stages: their counts once each."""
    # Each schedule's count is min((a + c * i) / q, m) with integers a, c, q per row, so one
    # expression over (N, k) serves all schedules (ZB-V and Hanayo, always simulated, take
    # the 1F1B form here): a and c from per-schedule coefficients (_IN_FLIGHT), a gather each where a
    # select over the schedules costs several times as much; in float64 (exact on these small integers, and
    # int64 / int64 divides as float64: the same quotients)
    sched, p, m, v = np.broadcast_arrays(sched, p, m, v)
    if rows is None and sched.ndim == 1 and sched.size >= DISTINCT_SHAPES_FROM:
        # a block's rows: a few hundred distinct (schedule, pp, m, vpp), their coefficients once each, gathered back
        first, inv = distinct_shapes(sched, p, m, v)
        coef = _in_flight_coef(sched[first], p[first], m[first], v[first], extra)
        if stage_of_pp and np.ndim(stage) == 2 and np.shape(stage)[1] == sched.size:  # (k, U) counts, (k, N) back
            a, c, q, cap = coef
            return np.take(np.minimum(a + c * np.take(stage, first, axis=1), cap) / q, inv, axis=1)
        a, c, q, cap = (np.take(x, inv) for x in coef)
    else:
        a, c, q, cap = _in_flight_coef(sched, p, m, v, extra)
        if rows is not None:
            a, c, q, cap = a[rows], c[rows], q[rows], cap[rows]
    return np.minimum(a + c * stage, cap) / q


def _in_flight_coef(sched, p, m, v, extra):
    """in_flight's (a, c, q, cap) of rows (schedule, pp, m, vpp): the count min((a + c i) / q, m) = min(a + c i, cap)
    / q on stage i."""
    code = sched.astype(np.intp)  # (an int8 index: np.take converts it on every call, ten times slower)
    a_m, a_p, a_1, c = (np.take(x, code) for x in _IN_FLIGHT)
    a = a_m * m + a_p * p + a_1  # (float64: the coefficients')
    is_i = sched == SCHED["interleaved"]
    if is_i.any():
        a += ((v - 1) * interleave_groups(sched, p, m) + extra) * is_i  # (integers times the mask: np.where's values)
    q = 1.0 + (v - 1) * is_i  # (np.where(is_i, v, 1.0))
    return a, c, q, m * q


# Rows from which in_flight prices each distinct (schedule, pp, m, vpp) once (fewer: row by row, as cheap).
DISTINCT_SHAPES_FROM = 4096


def distinct_shapes(sched, p, m, v):
    """distinct_rows of (N,) schedule, pp, micro-batches and vpp columns, m by the code of its value among the
    block's (a few dozen values up to the global batch: a dense key where m's own range would not be)."""
    seen = np.zeros(int(m.max()) + 2, dtype=np.int32)
    seen[m] = 1
    m_code = np.take(np.cumsum(seen, dtype=np.int32), m)  # (1 .. the distinct values of m)
    return distinct_rows(sched, v, p, m_code)


# in_flight's count min((a + c i) / q, m) per schedule: a = a_m m + a_p p + a_1 (interleaved: + (v - 1) N + extra)
# and c, as (a_m, a_p, a_1, c) columns over the schedule codes (SCHEDULES' order)
_IN_FLIGHT = np.array([
    (1.0, 0.0, 0.0, 0.0),  # gpipe: m
    (0.0, 1.0, 0.0, -1.0),  # 1f1b: p - i
    (0.0, 2.0, -1.0, -2.0),  # interleaved: 2 (p - 1) - 2 i + 1 (+ (v - 1) N + extra), in chunks (q = v)
    (0.0, 1.0, 0.0, 0.0),  # zb-h1: p
    (0.0, 2.0, -1.0, 0.0),  # zb-h2: 2 p - 1
    (0.0, 1.0, 0.0, -1.0),  # zb-v (always simulated): the 1F1B form
    (0.0, 1.0, 0.0, -1.0),  # hanayo (always simulated): the 1F1B form
]).T.copy()


def extra_warmup_chunks(fw, model) -> int:
    """Warm-up forwards an interleaved schedule runs beyond Megatron-LM's count: one where the framework overlaps the
    MoE all-to-alls with another micro-batch's compute (Framework.overlap_ep) on an MoE model; Megatron-LM
    megatron/core/pipeline_parallel/schedules.py get_pp_rank_microbatches (d98e8a6, lines 966-970): 'we schedule one
    extra micro-batch forward step before the 1f1b stages' under overlap_moe_expert_parallel_comm."""
    return int(bool(fw.overlap_ep) and model.is_moe)


def with_extra_chunk(k, sched, m, v, extra: int):
    """Micro-batches in flight ``k`` (the simulator's peaks, (k, N)) with ``extra`` more interleaved chunks (1/v of a
    stage's micro-batch each), at most m."""
    if not extra:
        return k
    return np.where(sched == SCHED["interleaved"], np.minimum(k + extra / v, m), k)


def outside_closed_form(sched, p, m, F_b, B_b, W_b):
    """Rows the closed forms do not price and the simulator always does: ZB-V and Hanayo;
    interleaving with fewer micro-batches than pp (one group of m: the fill is not (p - 1)/v of
    a stage's time); zero-bubble schedules outside the Zero Bubble paper's regime (m >= p and
    T_W <= min(T_F, T_B) on the bottleneck stage). Interleaving with m >= p, a multiple of pp or
    not, is inside (module docstring)."""
    zb = (sched == SCHED["zb-h1"]) | (sched == SCHED["zb-h2"])
    return (
        functools.reduce(np.logical_or, [sched == SCHED[x] for x in SIMULATED_SCHEDULES])  # (np.isin: 10x the time)
        | ((sched == SCHED["interleaved"]) & (m < p))
        | (zb & ((m < p) | (W_b > np.minimum(F_b, B_b))))
    )


def bottleneck_terms_of(n, first, last, lt, emb_c, emb_tp, head_gemm, head_elem, head_tp) -> dict[str, np.ndarray]:
    """Compute, recompute, tp and cp (and, where ``lt`` has it, ep) time per micro-batch of the bottleneck stage
    (n layers, first / last: it holds the embedding / the head), from its layer_terms ``lt``; times the row's
    micro-batches, its time per iteration (one value per distinct (configuration, pp) of a block, before that)."""
    out = {"compute": n * lt["compute"] + first * emb_c + last * (3.0 * head_gemm + head_elem),
           "recompute": n * lt["recompute"], "tp_comm": n * lt["tp"] + first * emb_tp + last * head_tp,
           "cp_comm": n * lt["cp"]}
    if "ep" in lt:
        out["ep_comm"] = n * lt["ep"]
    return out


def round_trip_handoffs_s(X, c, w, p, m, X_max):
    """Hand-off time (R,) the steady state of a 1F1B whose sends do not block carries beyond the closed forms'
    2 (p - 1) T_C (the fill's and drain's); the caller picks the rows (costmodel._block.round_trip_rows: theirs block
    otherwise, costmodel._block.steady_handoffs_s; torch's interleaved grid is not 1F1B).

    Stage i's forward of micro-batch x goes down to stage j, whose next pass is the backward of micro-batch
    x - (p - 1 - j), which comes back up to stage i, whose next pass is the forward of x + (j - i + 1): a loop of
    L = j - i + 1 stages' passes S and 2 (L - 1) hand-offs H every L micro-batches, while each stage's own L passes at
    the bottleneck's pace take L X_max. Each loop leaves e = min(max(S + H - L X_max, 0), H) exposed,
    ((m - 2) - floor((m - 2) / L)) / (L - 1) times; the step waits on the worst. On uniform stages that is the whole
    pipeline's, 2 ((m - 2) - floor((m - 2) / p)) T_C, equal to the schedule simulator's op order whatever T_C
    (tests/test_pipeline_round_trips.py follows the chain for p = 4, m = 8 by hand: 16 hand-offs, 10 past the fill's
    and drain's); a slower stage's slack hides as much (a lighter first or last stage: the simulator's round trips
    to rounding; tests/test_pipeline_round_trips.py, benchmarks/closed_form_handoff_gap.py).

    ``X`` (k, R): each column's stage time; ``c`` (k, R): its link to the next stage (0 past the last inner one);
    ``w`` (k, R): the stages each column stands for, in order (three representatives, runs of alike stages, padding
    at 0); ``p``, ``m``, ``X_max`` (R,)."""
    # A loop is hidden where its stages' slack, the sum of X_max - X, covers its hand-offs 2 sum c; if every two
    # neighbours' slack covers 4 c of their link, every loop's does (the pairs' sum counts each stage at most twice).
    # Neighbours on the columns: two stages of one column (weight 2 or more), or the last of one and the next column's
    # (a weight-0 column between two: counted as a pair not covered)
    d = X_max - X  # (k, R) each column's slack
    rest = np.cumsum(w[::-1], axis=0)[::-1]  # (k, R) the stages from this column on
    bare = (d < 2.0 * c) & (w >= 2)
    nxt = (w[:-1] > 0) & (rest[1:] > 0)
    bare[:-1] |= nxt & ((w[1:] == 0) | (d[:-1] + d[1:] < 4.0 * c[:-1]))
    q = np.flatnonzero(np.any(bare, axis=0))
    worst = np.zeros(p.size)
    if q.size:
        worst[q] = _worst_loop(X[:, q], c[:, q], w[:, q], p[q], m[q], X_max[q])
    return worst


def _worst_loop(X, c, w, p, m, X_max):
    """round_trip_handoffs_s's worst loop over every run of stages, the columns expanded stage by stage (P, R)."""
    P = int(p.max())
    s = np.arange(P)[:, None]  # (P, 1) a stage
    col = np.minimum(np.sum(np.cumsum(w, axis=0)[None] <= s[:, :, None], axis=1), len(w) - 1)  # (P, R) its column
    on = s < p
    Xs = np.where(on, np.take_along_axis(X, col, axis=0), 0.0)
    Hs = np.where(on, 2.0 * np.take_along_axis(c, col, axis=0), 0.0)  # a link there and back
    zero = np.zeros((1, p.size))
    C, D = np.concatenate([zero, np.cumsum(Xs, axis=0)]), np.concatenate([zero, np.cumsum(Hs, axis=0)])  # (P + 1, R)
    n, worst = m - 2, np.zeros(p.size)
    for L in range(2, P + 1):  # the loop's stages i .. i + L - 1, every i at once
        S, H = C[L:] - C[:-L], D[L - 1:-1] - D[:-L]  # (P + 1 - L, R)
        exposed = np.where(s[:P + 1 - L] + L <= p, np.clip(S + H - L * X_max, 0.0, H), 0.0).max(axis=0)
        worst = np.maximum(worst, exposed * (n - np.floor_divide(n, L)) / (L - 1))
    return worst


def pipeline_step(*, sched, p, m, v, X_sum, X_max, F_b, B_b, W_b, pp_comm, reason, pipeline, simulate_now,
                  stage_inputs, blocking=None, serial=None, lockstep=None):
    """Pipeline time (N,): the closed forms with the hand-offs ``pp_comm`` (fill and drain; a blocking row's
    steady state too: ``blocking`` (N,) or None, costmodel._block.steady_handoffs_s; a non-blocking 1F1B row's
    round trips, round_trip_handoffs_s, the caller's; ``serial`` (N,) or None: what a
    simulated row's batched exchanges leave out where each exchange's transfers run one after the other; a row of
    torch's interleaved grid, ``lockstep`` (N,) or None, its steps' hand-offs, costmodel._block.lockstep_handoffs_s,
    and one chunk's forward more in its fill: the grid starts the last virtual stage's first forward a step after its
    input comes), then, if ``simulate_now``, the simulator for feasible rows outside their domain (all with pipeline=
    "simulate"), whose inputs ``stage_inputs(rows)`` gives as simulate_pipelines takes them.
    Returns pipe, fill, pp_comm, rows still to simulate, None or (rows, shape index, peaks)."""
    fill = pipeline_bubble_s(sched, p, v, X_sum, X_max, F_b, B_b, W_b)
    if lockstep is not None:  # (on the grid's rows alone; elsewhere fill + 0.0, as the whole column's sum)
        i = np.flatnonzero(lockstep)
        fill = fill + 0.0
        fill[i] += np.take(F_b, i) / np.take(v, i)
    pipe = m * X_max + fill + pp_comm
    simulated = (pipeline == "simulate") | outside_closed_form(sched, p, m, F_b, B_b, W_b)
    needs = simulated & (reason == 0)
    if not (simulate_now and np.any(needs)):
        return pipe, fill, pp_comm, needs & ~np.bool_(simulate_now), None
    q = np.flatnonzero(needs)
    code = None  # the simulator's hand-off rule per row: 1 blocking (1F1B), 2 torch's interleaved grid, 0 neither
    if blocking is not None or lockstep is not None:
        code = np.zeros(q.size, dtype=np.int64)
        for flags, k in ((blocking, 1), (lockstep, 2)):
            if flags is not None:
                code[flags[q]] = k
    total, row_shape, peaks = simulate_pipelines(np.stack([sched[q], p[q], m[q], v[q]], axis=1), *stage_inputs(q),
                                                 blocking=code)
    # The simulator's total includes every hand-off; report as pp comm the fill/drain hand-offs
    # where they are exposed, the rest of the idle time as bubble.
    if serial is not None:  # (the simulator waits on each steady exchange once, as a batched one)
        total = total + serial[q]
    busy = m[q] * (F_b[q] + B_b[q] + W_b[q])  # (the simulator's stages: F, B, W)
    total = np.maximum(total, busy)  # the bottleneck is busy that long: a shortfall is the last bit of two sums
    pipe[q] = total  # pipe, fill and pp_comm: the caller's fresh arrays, written in place
    pp_comm[q] = np.minimum(pp_comm[q], np.maximum(total - busy, 0.0))
    fill[q] = total - busy - pp_comm[q]
    return pipe, fill, pp_comm, np.zeros_like(needs), (q, row_shape, peaks)


def simulate_pipelines(shape, comp, F, Bk, W, tc, blocking=None):
    """Exact pipeline time (R,) of R rows and the peak micro-batches in flight (row_shape (R,),
    peaks (G, D_max)): stage j of row i holds ``peaks[row_shape[i], j]``. ``shape`` (R, 4):
    schedule, pp, micro-batches, vpp; ``F``, ``Bk``, ``W``, ``tc`` (R, k): the stage times and
    the hand-off on the link after each stage column, the stages 0 .. pp - 1 (zero past pp) or,
    where ``comp`` is set, three representatives (first, interior, last) of stages alike; ``blocking``
    (R,) or None: the rows whose hand-offs block, 1 (costmodel._pipeline.simulate's blocking), or that run torch's
    interleaved grid, 2 (costmodel._pipeline.simulate_lockstep); 0 or False: neither.

    Each distinct input is simulated once, or taken from a per-process cache; shapes with many
    distinct inputs get one simulate() call each, the rest one total_times_mixed walk."""
    k = F.shape[1]
    cols = [shape.astype(np.float64), comp[:, None].astype(np.float64), F, Bk, W, tc]
    if blocking is not None:  # (a last column: the flag, part of the key)
        cols.append(blocking[:, None].astype(np.float64))
    inputs = np.concatenate(cols, axis=1)
    uniq, back, shapes, gid = unique_rows(inputs, lead=4)  # (np.unique's, axis=0: the rows, then their shapes)
    shapes = shapes.astype(np.int64)
    dev = np.arange(int(uniq[:, 1].max()))[None, :]
    u_keys = np.ascontiguousarray(uniq).view(np.dtype((np.void, uniq.shape[1] * 8))).ravel()
    cache = _simulation_cache(uniq.shape[1])
    known, cached = cache.lookup(u_keys)
    u_total = cached[:, 0].copy()
    if (new := np.flatnonzero(~known)).size:  # (the inputs the cache does not hold: their devices' times, simulated)
        u_total[new] = _simulate_sets(uniq[new], gid[new], shapes, dev, k, blocking is not None)
        cache.add(u_keys[new], u_total[new, None])
    peaks = np.zeros((len(shapes), dev.shape[1]))
    for g, (code, pg, mg, vg) in enumerate(shapes):
        peaks[g, :pg] = _peaks(SCHEDULES[int(code)], int(pg), int(mg), int(vg))
    return u_total[back], gid[back], peaks


def _peaks(schedule, p, m, v):
    """schedule_peaks of (schedule, p, m, v); a long step's from its periodic proxy where it and the proxy a period
    longer agree (the micro-batches in flight stop growing once every stage's warm-up is past), else from its whole
    order."""
    from costmodel._pipeline import periodic_proxy, schedule_peaks

    proxy = periodic_proxy(schedule, p, m, v)
    if proxy is not None:
        m_x, period = proxy
        short = schedule_peaks(schedule, p, m_x, v)
        if np.array_equal(short, schedule_peaks(schedule, p, m_x + period, v)):
            return short
    return schedule_peaks(schedule, p, m, v)


def _device_times(uniq, dev, k):
    """(tf, tb, tw, tc), each (S, D_max): the stage times of each device of the distinct inputs ``uniq`` (as
    simulate_pipelines lays them out: a stage column per device, or the three representatives), zero past pp."""
    u_p = uniq[:, 1].astype(np.int64)[:, None]
    rep = np.where(dev == 0, 0, np.where(dev == u_p - 1, 2, 1))
    col = np.where(uniq[:, 4:5] > 0, rep, np.minimum(dev, k - 1))  # device -> stage column
    return tuple(np.where(dev < u_p, np.take_along_axis(uniq[:, 5 + i * k:5 + (i + 1) * k], col, axis=1), 0.0)
                 for i in range(4))


def _simulate_sets(uniq, gid, shapes, dev, k, flagged=False):
    """simulate_pipelines' pipeline times (S,) of S distinct inputs ``uniq`` (rows as it lays them out) of shapes
    ``gid`` (into ``shapes``): a long step's from a shorter run of its schedule where its times are periodic
    (_extend_periodic), the rest by simulating their whole graphs (_simulate_graphs). ``flagged``: the last column
    says which block their hand-offs (1) or run torch's interleaved grid (2)."""
    times = _device_times(uniq, dev, k)  # (tf, tb, tw, tc) per device, once for both walks
    total = np.empty(len(uniq))
    left = _extend_periodic(uniq, gid, shapes, times, k, flagged, total)
    if left.size == len(uniq):  # (no long step extended: the usual case, no copies)
        return _simulate_graphs(uniq, gid, shapes, times, k, flagged)
    if left.size:
        total[left] = _simulate_graphs(uniq[left], gid[left], shapes, [x[left] for x in times], k, flagged)
    return total


def _extend_periodic(uniq, gid, shapes, times, k, flagged, total):
    """Price the inputs of long steps from a shorter run of their schedules (costmodel._pipeline.periodic_proxy: m_x
    and the period P) where it has settled (_from_proxy), trying the proxy lengths _PROXY_SCALES in turn, and write
    their times into ``total``. Returns the indices of the inputs left to simulate whole: those of short steps, of
    GPipe and torch's interleaved grid, and those that settled in none of the proxies. ``times``: _device_times'."""
    from costmodel._pipeline import periodic_proxy, steady_window

    rule = uniq[:, 5 + 4 * k] if flagged else np.zeros(len(uniq))  # (2: torch's grid, not an op graph)
    done = np.zeros(len(uniq), dtype=bool)
    for g, (code, p, m, v) in enumerate(shapes.astype(np.int64).tolist()):
        name = SCHEDULES[code]
        for scale in _PROXY_SCALES:  # a longer proxy for the sets whose times have not settled in the shorter one
            if not np.any((gid == g) & (rule != 2) & ~done):
                break
            proxy = periodic_proxy(name, p, m, v, scale)
            window = None if proxy is None else steady_window(name, p, proxy[0], v, proxy[1])
            if window is None:
                break
            for blocks in (False, True):
                rows = np.flatnonzero((gid == g) & (rule == (1 if blocks else 0)) & ~done)
                if rows.size:
                    t, ok = _from_proxy(name, p, m, v, proxy, window, [x[rows, :p] for x in times], blocks)
                    total[rows[ok]] = t[ok]
                    done[rows[ok]] = True
    return np.flatnonzero(~done)


def _from_proxy(name, p, m, v, proxy, window, times, blocks):
    """(T (S,), settled (S,)): the pipeline times at m micro-batches of S sets (``times``: tf, tb, tw, tc, each (S, p))
    from their run at the proxy's m_x, and whether it had settled: every op of the steady ``window`` (ids, the same ops
    P micro-batches later; costmodel._pipeline.steady_window) ends the same Delta later, to 1e-12 of T(m_x); then
    T(m) = T(m_x) + (m - m_x) / P Delta. Sets are simulated in blocks of _TIMELINE_VALUES values of timelines."""
    from costmodel._pipeline import compile_schedule, simulate

    (m_x, period), (ids, later) = proxy, window
    step = max(1, _TIMELINE_VALUES // (2 * len(compile_schedule(name, p, m_x, v).kind)))
    total, settled = np.empty(len(times[0])), np.zeros(len(times[0]), dtype=bool)
    for lo in range(0, len(total), step):
        tf, tb, tw, tc = (x[lo:lo + step] for x in times)
        res = simulate(name, p, m_x, v, tf=tf, tb=tb, tw=tw, tc=tc, timeline=True, blocking=blocks)
        shift = res.timeline.end[:, later] - res.timeline.end[:, ids]  # (sets, window ops)
        delta = shift[:, 0]
        settled[lo:lo + step] = np.all(np.abs(shift - delta[:, None]) <= 1e-12 * res.total_time[:, None], axis=1)
        total[lo:lo + step] = res.total_time + (m - m_x) / period * delta
    return total, settled


# Proxy lengths tried in turn, as multiples of periodic_proxy's shortest.
_PROXY_SCALES = (1, 4, 16, 64)
# Op end times held at once while long steps are extended (_from_proxy): sets are simulated in blocks of this many
# values' worth of timelines (starts and ends).
_TIMELINE_VALUES = 1 << 22


def _simulate_graphs(uniq, gid, shapes, times, k, flagged=False):
    """_simulate_sets' times of inputs simulated over their schedules' whole graphs (``times``: their _device_times):
    shapes of more than _MIXED_MAX_SETS inputs one simulate() call each, the rest one total_times_mixed walk."""
    from costmodel._pipeline import simulate, simulate_lockstep, total_times_mixed

    u_tf, u_tb, u_tw, u_tc = times
    total = np.empty(len(uniq))
    rule = uniq[:, 5 + 4 * k] if flagged else np.zeros(len(uniq))  # (simulate_pipelines' blocking: 1 or 2)
    blocking = rule == 1
    if np.any(lock := rule == 2):  # torch's interleaved grid: its own walk, one per shape
        for g in np.unique(gid[lock]):
            _, pg, mg, vg = (int(x) for x in shapes[g])
            r = np.flatnonzero(lock & (gid == g))
            total[r] = simulate_lockstep(pg, mg, vg, tf=u_tf[r, :pg], tb=u_tb[r, :pg], tw=u_tw[r, :pg],
                                         tc=u_tc[r, :pg])
        if lock.all():
            return total
    big = np.bincount(gid[~lock], minlength=len(shapes)) > _MIXED_MAX_SETS
    for g in np.flatnonzero(big):  # a sweep's many rows of one shape: simulate()'s 2-D walk
        code, pg, mg, vg = (int(x) for x in shapes[g])
        for blocks in (False, True):
            r = np.flatnonzero((gid == g) & (blocking == blocks) & ~lock)
            if r.size:
                total[r] = simulate(SCHEDULES[code], pg, mg, vg, tf=u_tf[r, :pg], tb=u_tb[r, :pg], tw=u_tw[r, :pg],
                                    tc=u_tc[r, :pg], blocking=blocks).total_time
    small = ~big[gid] & ~lock
    if np.any(small):
        keep = np.flatnonzero(~big & (np.bincount(gid[small], minlength=len(shapes)) > 0))  # to the mixed walk, 0..
        renum = np.full(len(shapes), -1)
        renum[keep] = np.arange(len(keep))
        mixed_keys = [(SCHEDULES[int(c)], int(pg), int(mg), int(vg)) for c, pg, mg, vg in shapes[keep]]
        r = np.flatnonzero(small)
        total[r] = total_times_mixed(mixed_keys, renum[gid[r]], u_tf[r], u_tb[r], u_tw[r], u_tc[r],
                                     blocking[r] if flagged else None)
    return total


# Distinct parameter sets of one pipeline shape above which it is simulated on its own
# (simulate()'s (ops, sets) walk); at or below, with the other small shapes in one flat walk.
_MIXED_MAX_SETS = 64
# Simulated pipeline times kept per process: key = (schedule, pp, m, vpp, stage times, T_C) as
# raw float64 bytes, value = the time. A cache of a pure function: it changes no result, only
# skips work. Bounded by bytes of keys (a full cache is emptied and starts again).
_CACHE_MAX_BYTES = 32 << 20
_CACHES: dict[int, Memo] = {}


def _simulation_cache(columns: int) -> Memo:
    """The cache for keys of ``columns`` float64 values (one per key width)."""
    cache = _CACHES.get(columns)
    if cache is None or len(cache) * columns * 8 > _CACHE_MAX_BYTES:
        cache = _CACHES[columns] = Memo(width=1)
    return cache


# MoE rows: stage times within this relative distance of the slowest count as tied (the first is
# the bottleneck), so that round-off does not pick another stage than the scalar reference does.
# Dense rows keep the plain argmax (their results are unchanged by the MoE work, bit for bit).
TIE_REL = 1e-12


def first_max_stage(a, tol: bool = False):
    """(N,) index of the first stage row holding its column's maximum of ``a`` (k, N) (``tol``:
    within TIE_REL of it; 0 where none does, NaN): np.argmax over the stages, from the largest k - i over the rows i
    that hold it, in int8 (an argmax over axis 0 costs several times as much)."""
    top = a.max(axis=0)
    hit = a >= top * (1.0 - TIE_REL) if tol else a == top
    k = a.shape[0]
    if k == 3:  # (three representative stages: the first hit from the three rows' masks, 0 where none; no modulo)
        h0, h1, h2 = hit
        return (~h0 * (1 + ~h1) * (h0 | h1 | h2)).astype(np.int64, copy=False)
    return (k - np.max(hit * np.arange(k, 0, -1, dtype=np.int8 if k < 128 else np.int64)[:, None], axis=0).astype(
        np.int64)) % k
