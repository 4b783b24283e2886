"""Pipeline schedules, simulated over a dependency graph, vectorised over parameter sets.

A schedule is compiled once per (schedule, D, m, v) into a static op graph: every device runs
its ops (F, B or W of one micro-batch on one chunk) in a fixed order, and an op starts when

    start = max(end of the previous op on its device,
                end of its producer + T_C if the producer ran on another device)

(asynchronous point-to-point: the sender never waits; a hand-off within a device is free). With
``blocking`` (a framework that waits on each hand-off before its next pass: Megatron-Core's 1F1B
without interleaving) an op whose producer ran on another device starts T_C after both end:

    start = max(end of the previous op on its device, end of its producer) + T_C

the exchange both devices wait on (the producer's device sends in the same batched call in the
steady state, its next pass waiting with it).
torch.distributed.pipelining's interleaved schedule is not an op graph but a grid of time steps
each waited on; :func:`simulate_lockstep` walks it (its comment block below).
The producer of F(mb, s) is F(mb, s - 1); of B(mb, s) is B(mb, s + 1), or F(mb, S - 1) on the
last virtual stage; of W(mb, s) is B(mb, s). Virtual stages s = 0 .. S - 1, S = D * v.

The graph is simulated for S parameter sets at once: one numpy row of shape (S,) per op,
walked in a topological order, ops grouped into independent "waves" so each step is one
numpy operation over (k, S). No Python loop runs over parameter sets.

Time unit: whatever unit T_F, T_B, T_W, T_C are given in. A chunk's times are its stage's
times divided by v (seed 003's text; its code forgets the division).

Sources for the op orders:
- GPipe: Huang et al. 2019, all forwards then all backwards.
- 1F1B: PipeDream-Flush (Narayanan et al. 2021); warm-up p - i - 1 forwards on stage i.
- interleaved: Megatron-LM ``megatron/core/pipeline_parallel/schedules.py``
  (``get_schedule_table``, ``get_pp_rank_microbatches`` and the group-size check of
  ``forward_backward_pipelining_with_interleaving``): groups of N micro-batches run chunk by
  chunk; warm-up (p - rank - 1) * 2 + (v - 1) * N virtual micro-batches, capped at m * v;
  N = p when p divides m, else the smallest group size Megatron-LM accepts (``interleave_group_size``).
- Hanayo: Liu et al., SC'23, "Hanayo: Harnessing Wave-like Pipeline Parallelism": chunks laid
  out as waves (chunk c runs down the devices for even c and up for odd c); the paper's order
  for m = D, repeated m / D times as seed 003 does (see ``_hanayo``).
- ZB-H1, ZB-H2, ZB-V: Qi et al. 2023, "Zero Bubble Pipeline Parallelism" (arXiv:2401.10241)
  Section 2 and Section 6; ZB-V's order follows the authors' handcrafted generator
  (sail-sg/zero-bubble-pipeline-parallelism, ``handcrafted_zb_v``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from costmodel._errors import InputError

SCHEDULES = ("gpipe", "1f1b", "interleaved", "hanayo", "zb-h1", "zb-h2", "zb-v")

# Op kinds, encoded once.
F, B, W = 0, 1, 2
KIND_NAMES = ("F", "B", "W")

# Schedules that split the backward into B (activation gradient) and W (weight gradient).
_SPLIT_BACKWARD = frozenset({"zb-h1", "zb-h2", "zb-v"})

# Rows of parameter sets simulated per block: keeps the (ops, block) array cache-sized.
_BLOCK = 2048


# --------------------------------------------------------------------------- op orders
# Each builder returns, per device, the ops in execution order as (kind, micro-batch, chunk).


def _gpipe(p: int, m: int, v: int) -> list[list[tuple[int, int, int]]]:
    return [[(F, j, 0) for j in range(m)] + [(B, j, 0) for j in range(m)] for _ in range(p)]


def _one_f_one_b(p: int, m: int, v: int) -> list[list[tuple[int, int, int]]]:
    orders = []
    for i in range(p):
        warm = min(p - i - 1, m)
        ops = [(F, j, 0) for j in range(warm)]
        for k in range(m - warm):
            ops += [(F, warm + k, 0), (B, k, 0)]
        ops += [(B, j, 0) for j in range(m - warm, m)]
        orders.append(ops)
    return orders


def _megatron_table(m: int, v: int, group: int) -> list[tuple[int, int]]:
    """(micro-batch, chunk) per virtual micro-batch, as Megatron-LM's get_schedule_table."""
    table = []
    for lo in range(0, m, group):
        hi = m if lo + group >= m else lo + group
        table += [(j, c) for c in range(v) for j in range(lo, hi)]
    return table


def _table_1f1b(table: list[tuple[int, int]], v: int, warm: int) -> list[tuple[int, int, int]]:
    """Warm-up forwards, then (forward, backward) pairs, then cool-down backwards."""
    total = len(table)
    warm = min(warm, total)
    fwd = [(F, j, c) for j, c in table]
    bwd = [(B, j, v - 1 - c) for j, c in table]
    ops = fwd[:warm]
    for k in range(total - warm):
        ops += [fwd[warm + k], bwd[k]]
    return ops + bwd[total - warm :]


@functools.lru_cache(maxsize=4096)
def interleave_group_size(p: int, m: int) -> int:
    """Micro-batches N an interleaved schedule runs chunk by chunk before the next chunk (Megatron-LM's
    ``microbatch_group_size_per_vp_stage``, PyTorch's micro-batches a round) for m micro-batches on p stages.

    Megatron-LM d98e8a6 megatron/core/pipeline_parallel/schedules.py, forward_backward_pipelining_with_interleaving
    (lines 1160-1180): N must lie in [p, m], and the last group, m % N, be 0 or at least p (a shorter last group
    "introduces dependency bubbles"; with the warm-up rule it would deadlock); N is a setting
    (--microbatch-group-size-per-virtual-pipeline-stage, p by default: model_parallel_config.py lines 567-568), so
    m not a multiple of p needs another N. Here N = p when p divides m, else the smallest valid N (the least
    warm-up, hence the least activation memory), m itself (one group) when m < p (which Megatron-Core refuses and
    PyTorch runs as one round). PyTorch (pytorch 1fd7abc torch/distributed/pipelining/schedules.py,
    ScheduleInterleaved1F1B) runs m // max(1, m // p) micro-batches a round where its rounds divide m: that is
    the same N (for m >= p, an N in [p, m / r) with r = m // p leaves m - r N <= m % p < p, so the smallest valid
    N is m / r when r divides m).
    """
    for n in range(p, m + 1):
        if m % n == 0 or m % n >= p:
            return n
    return m


def _interleaved(p: int, m: int, v: int) -> list[list[tuple[int, int, int]]]:
    group = interleave_group_size(p, m)
    table = _megatron_table(m, v, group)
    return [_table_1f1b(table, v, (p - r - 1) * 2 + (v - 1) * group) for r in range(p)]


def _hanayo(p: int, m: int, v: int) -> list[list[tuple[int, int, int]]]:
    """Hanayo's wave order (Liu et al., SC'23), as seed 003 defines it for m a multiple of D.

    The paper draws the schedule for m = D micro-batches; seed 003 runs that schedule m / D
    times in a row ("we iterate the Hanayo scheme MBS/D times"). Its order comes from a
    timetable of unit slots per device at nominal T_F = 1 slot, T_B = 2 slots, T_C = 0:

    - a micro-batch's path: forward down the devices on chunk 2w, up on chunk 2w + 1 for each
      wave w; then backward through the same stages in reverse;
    - each op of the path takes the first free slot(s) on its device after the slot where the
      path's previous op ended;
    - per group of D micro-batches, the first one is placed from where the previous group's
      first micro-batch finished its last backward on device 0 (slot -1 for the first group);
      then the paper's restricted zones are closed: on device d the D - d - 1 free slots
      before that micro-batch's forward on chunk 1, and the d free slots before its
      backward on the last chunk; then the group's other micro-batches are placed from the
      group's start slot;
    - each device runs its ops in slot order.
    For m not a multiple of D the last group holds the remaining m mod D micro-batches and is
    placed by the same rule (the source defines only whole groups). Slot times only fix the
    order; the simulator then times that order with the real T_F, T_B, T_W and T_C.
    """
    path = []  # (device, kind, chunk) of one micro-batch, in dependency order
    for w in range(v // 2):
        path += [(d, F, 2 * w) for d in range(p)] + [(d, F, 2 * w + 1) for d in reversed(range(p))]
    for w in reversed(range(v // 2)):
        path += [(d, B, 2 * w + 1) for d in range(p)] + [(d, B, 2 * w) for d in reversed(range(p))]
    busy: list[set[int]] = [set() for _ in range(p)]  # slots taken (by an op or a restricted zone)
    placed: list[dict[int, tuple[int, int, int]]] = [{} for _ in range(p)]  # slot -> op starting there

    def place(j: int, after: int) -> dict[tuple[int, int, int], int]:
        """Put micro-batch j's path into the first free slots after ``after``; its slots."""
        where = {}
        for d, k, c in path:
            width = 1 if k == F else 2
            at = after + 1
            while any(at + i in busy[d] for i in range(width)):
                at += 1
            busy[d].update(range(at, at + width))
            placed[d][at] = (k, j, c)
            where[(d, k, c)] = at
            after = at + width - 1
        return where

    group_start = -1
    for lo in range(0, m, p):
        first = place(lo, group_start)
        for d in range(p):  # the paper's restricted zones
            for i in range(1, p - d):
                busy[d].add(first[(d, F, 1)] - i)
            for i in range(1, d + 1):
                busy[d].add(first[(d, B, v - 1)] - i)
        for j in range(lo + 1, min(lo + p, m)):
            place(j, group_start)
        group_start = first[(0, B, 0)] + 1
    return [[ops[slot] for slot in sorted(ops)] for ops in placed]


def _zb_h1(p: int, m: int, v: int) -> list[list[tuple[int, int, int]]]:
    """1F1B's F/B order; on stage i, W(k) runs right after B(k + i) (Qi et al. Fig. 3 top).

    Every stage then holds p micro-batches before its first W, as many as 1F1B's first stage.
    """
    return [_with_lagged_w(_one_f_one_b(p, m, 1)[i], m, lag=i) for i in range(p)]


def _with_lagged_w(ops: list[tuple[int, int, int]], m: int, lag: int) -> list[tuple[int, int, int]]:
    out = []
    for op in ops:
        out.append(op)
        if op[0] == B and op[1] - lag >= 0:
            out.append((W, op[1] - lag, 0))
    return out + [(W, j, 0) for j in range(max(m - lag, 0), m)]


def _zb_h2(p: int, m: int, v: int) -> list[list[tuple[int, int, int]]]:
    """Stage i runs 2(p - i) - 1 warm-up forwards (Qi et al. Sec. 2.2: up to 2p - 1
    micro-batches in flight), then B, F pairs; W(k) runs after B(k + 2i) so the tail is a
    parallelogram of B passes followed by deferred W passes."""
    orders = []
    for i in range(p):
        warm = min(2 * (p - i) - 1, m)
        ops = [(F, j, 0) for j in range(warm)]
        for k in range(m - warm):
            ops += [(B, k, 0), (F, warm + k, 0)]
        ops += [(B, j, 0) for j in range(m - warm, m)]
        orders.append(_with_lagged_w(ops, m, lag=2 * i))
    return orders


def _zb_v(p: int, m: int, v: int) -> list[list[tuple[int, int, int]]]:
    """ZB-V (Qi et al. Sec. 6): two chunks in a V, the authors' handcrafted order.

    Built for n = max(m, 2p - 1) micro-batches; ops of micro-batches >= m are dropped.
    """
    n = max(m, 2 * p - 1)
    orders = []
    for r in range(p):
        ops: list[tuple[int, int, int]] = []
        f0 = f1 = b0 = b1 = 0
        for _ in range(2 * (p - r) - 1):
            ops.append((F, f0, 0))
            f0 += 1
        for _ in range(r):
            ops += [(F, f1, 1), (F, f0, 0)]
            f1 += 1
            f0 += 1
        for _ in range(p - r):
            ops += [(F, f1, 1), (B, b1, 1), (W, b1, 1)]
            f1 += 1
            b1 += 1
        while f1 < f0 or f0 < n:
            if f0 < n:
                ops.append((F, f0, 0))
                f0 += 1
            ops += [(B, b0, 0), (W, b0, 0), (F, f1, 1), (B, b1, 1), (W, b1, 1)]
            b0 += 1
            f1 += 1
            b1 += 1
        w0, w1 = b0, b1
        for _ in range(r):
            ops += [(B, b0, 0), (B, b1, 1)]
            b0 += 1
            b1 += 1
        for _ in range(p - r):
            ops += [(B, b0, 0), (W, w0, 0)]
            b0 += 1
            w0 += 1
        ops += [(W, j, 1) for j in range(w1, b1)]
        ops += [(W, j, 0) for j in range(w0, b0)]
        orders.append([op for op in ops if op[1] < m])
    return orders


_BUILDERS = {"gpipe": _gpipe, "1f1b": _one_f_one_b, "interleaved": _interleaved, "hanayo": _hanayo, "zb-h1": _zb_h1,
             "zb-h2": _zb_h2, "zb-v": _zb_v}


def _wave_back(schedule: str) -> bool:
    """Whether odd chunks run back up the devices (waves, V shapes)."""
    return schedule in ("hanayo", "zb-v")


# --------------------------------------------------------------------------- compiled graph


@dataclass(frozen=True)
class _Graph:
    """A schedule's op graph; arrays indexed by op id, ops numbered in a topological order."""

    devices: int
    chunks: int
    kind: np.ndarray  # (n,) int: F, B or W
    micro: np.ndarray  # (n,) int
    chunk: np.ndarray  # (n,) int
    device: np.ndarray  # (n,) int
    prev: np.ndarray  # (n,) int: previous op on the device, or -1
    dep: np.ndarray  # (n,) int: producer op, or -1
    cross: np.ndarray  # (n,) bool: producer ran on another device (pay T_C)
    # per wave: (first id, end id, cross-device ops at its head, prev ids, dep ids, dur rows)
    wave_slices: tuple[tuple[int, int, int, np.ndarray, np.ndarray, np.ndarray], ...]
    widest: int  # most ops in one wave
    last: np.ndarray  # (D,) op id of each device's last op
    peak_activations: np.ndarray  # (D,) float, stage micro-batches
    level_bounds: np.ndarray  # (L + 1,) int: wave l holds op ids level_bounds[l] .. level_bounds[l + 1] - 1

    @functools.cached_property
    def flat_layout(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(n,) each op's wave, its place in the wave, and the wave's width (total_times_mixed)."""
        width = np.diff(self.level_bounds)
        lvl = np.repeat(np.arange(len(width)), width)
        return lvl, np.arange(len(lvl)) - self.level_bounds[lvl], width[lvl]

    @functools.cached_property
    def link(self) -> np.ndarray:
        """(n,) the link of a cross-device op's hand-off (link d: devices d, d + 1; D - 1: wrap)."""
        src = self.device[np.maximum(self.dep, 0)]
        return np.where(np.abs(src - self.device) == 1, np.minimum(src, self.device), self.devices - 1)


def _validate_shape(schedule: str, p: int, m: int, v: int) -> None:
    if schedule not in SCHEDULES:
        raise InputError("schedule", f"one of {', '.join(SCHEDULES)}", schedule)
    for name, value in (("devices", p), ("microbatches", m), ("chunks", v)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise InputError(name, "an integer >= 1", value)
    if schedule in ("gpipe", "1f1b", "zb-h1", "zb-h2") and v != 1:
        raise InputError("chunks", f"1 for {schedule}", v)
    if schedule == "zb-v" and v != 2:
        raise InputError("chunks", "2 for zb-v", v)
    if schedule == "hanayo" and v % 2 != 0:
        raise InputError("chunks", "an even number (2 x waves) for hanayo", v)


@functools.lru_cache(maxsize=256)
def compile_schedule(schedule: str, devices: int, microbatches: int, chunks: int = 1) -> _Graph:
    """Build and cache the op graph of one (schedule, D, m, v)."""
    _validate_shape(schedule, devices, microbatches, chunks)
    p, m, v = devices, microbatches, chunks
    orders = _BUILDERS[schedule](p, m, v)
    split = schedule in _SPLIT_BACKWARD
    n_stages = p * v

    # Flat op list in device order; (kind, micro, stage) -> flat index through a dense table.
    ops = np.array([(k, j, c, d) for d, dev_ops in enumerate(orders) for (k, j, c) in dev_ops], dtype=np.int64)
    kind, micro, chunk, device = ops.T.copy()
    n = len(kind)
    stage = chunk * p + np.where(_wave_back(schedule) & (chunk % 2 == 1), p - 1 - device, device)
    slot = (kind * m + micro) * n_stages + stage  # one slot per (kind, micro, stage)
    table = np.full(3 * m * n_stages, -1, dtype=np.int64)
    table[slot] = np.arange(n)
    expected = m * n_stages * (3 if split else 2)
    assert n == expected and np.count_nonzero(table >= 0) == n, (schedule, p, m, v, n, expected)

    def at(k: np.ndarray, j: np.ndarray, st: np.ndarray) -> np.ndarray:
        return table[(k * m + j) * n_stages + st]

    prev = np.where(np.r_[False, device[1:] == device[:-1]], np.arange(n) - 1, -1)
    last_stage = stage == n_stages - 1
    f_kind, b_kind = np.full(n, F), np.full(n, B)
    dep = np.select(  # the producers of the module docstring
        [(kind == F) & (stage > 0), (kind == B) & ~last_stage, (kind == B) & last_stage, kind == W],
        [at(f_kind, micro, np.maximum(stage - 1, 0)), at(b_kind, micro, np.minimum(stage + 1, n_stages - 1)),
         at(f_kind, micro, stage), at(b_kind, micro, stage)],
        default=-1,
    )
    cross = (dep >= 0) & (device[np.maximum(dep, 0)] != device)

    level = _levels(prev, dep, schedule, p, m, v)
    # Topological order by wave; within a wave, cross-device ops first.
    order = np.lexsort((~cross, level))
    # Renumber ops so ids follow the topological order (row i of the simulation is op i).
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)

    def renumber(a: np.ndarray) -> np.ndarray:
        return np.where(a >= 0, rank[np.maximum(a, 0)], -1)[order]

    prev_r, dep_r = renumber(prev), renumber(dep)
    device_flat = device
    kind, micro, chunk, device = kind[order], micro[order], chunk[order], device[order]
    cross = cross[order]
    lvl = level[order]
    bounds = [0, *(np.flatnonzero(np.diff(lvl)) + 1).tolist(), n]
    prev_s = np.where(prev_r >= 0, prev_r, n)  # n: the zero sentinel row
    dep_s = np.where(dep_r >= 0, dep_r, n)
    dur_row = kind * p + device  # row of the (3D, s) duration table
    waves = tuple(
        (a, b, int(cross[a:b].sum()), prev_s[a:b], dep_s[a:b], dur_row[a:b])
        for a, b in zip(bounds[:-1], bounds[1:], strict=True)
    )
    widest = max(b - a for a, b in zip(bounds[:-1], bounds[1:], strict=True))
    last = np.array([rank[np.flatnonzero(device_flat == d)[-1]] for d in range(p)])
    peak = schedule_peaks(schedule, p, m, v).copy()
    return _Graph(p, v, kind, micro, chunk, device, prev_r, dep_r, cross, waves, widest, last, peak,
                  np.asarray(bounds, dtype=np.int64))


def _levels(prev: np.ndarray, dep: np.ndarray, schedule: str, p: int, m: int, v: int) -> np.ndarray:
    """Longest-path depth of each op (Kahn's algorithm); a cycle means the order deadlocks."""
    n = len(prev)
    prev_l, dep_l = prev.tolist(), dep.tolist()
    indeg = [(a >= 0) + (b >= 0) for a, b in zip(prev_l, dep_l, strict=True)]
    children: list[list[int]] = [[] for _ in range(n)]
    for i, (a, b) in enumerate(zip(prev_l, dep_l, strict=True)):
        if a >= 0:
            children[a].append(i)
        if b >= 0:
            children[b].append(i)
    level = [0] * n
    ready = [i for i in range(n) if indeg[i] == 0]
    seen = 0
    while ready:
        i = ready.pop()
        seen += 1
        nxt = level[i] + 1
        for c in children[i]:
            if level[c] < nxt:
                level[c] = nxt
            indeg[c] -= 1
            if indeg[c] == 0:
                ready.append(c)
    if seen != n:
        raise InputError("microbatches", f"a count {schedule} can schedule on D={p}, v={v} without deadlock", m)
    return np.array(level, dtype=np.int64)


@functools.lru_cache(maxsize=4096)
def schedule_peaks(schedule: str, devices: int, microbatches: int, chunks: int = 1) -> np.ndarray:
    """(D,) read-only: the most stage micro-batch activations each device holds at once, from the
    schedule's op order alone (no op graph: what the memory terms need, cheap enough to cache many)."""
    _validate_shape(schedule, devices, microbatches, chunks)
    out = _peak_activations(_BUILDERS[schedule](devices, microbatches, chunks), chunks, schedule in _SPLIT_BACKWARD)
    out.setflags(write=False)
    return out


def _peak_activations(orders: list[list[tuple[int, int, int]]], v: int, split: bool) -> np.ndarray:
    """Peak stage micro-batch activations held per device: a chunk's forward adds 1/v,
    its last backward op (W when split, else B) frees it."""
    free_kind = W if split else B
    peaks = []
    for ops in orders:
        held = peak = 0
        for k, _, _ in ops:
            if k == F:
                held += 1
                peak = max(peak, held)
            elif k == free_kind:
                held -= 1
        peaks.append(peak / v)
    return np.array(peaks, dtype=np.float64)


# --------------------------------------------------------------------------- simulation


@dataclass(frozen=True)
class Timeline:
    """Every op of the schedule with its start and end for each parameter set."""

    kind: np.ndarray  # (n,) int: 0 F, 1 B, 2 W
    micro: np.ndarray  # (n,) int
    chunk: np.ndarray  # (n,) int
    device: np.ndarray  # (n,) int
    start: np.ndarray  # (S, n)
    end: np.ndarray  # (S, n)


@dataclass(frozen=True)
class PipelineResult:
    """Outputs of :func:`simulate` for S parameter sets.

    total_time: (S,) first start to last end on any device.
    bubble_ratio: (S,) 1 - sum_d m (T_F + T_B + T_W)(d) / (D * total_time), seed 003's
        definition.
    busy_time: (S, D) compute time per device, m (T_F + T_B + T_W)(d).
    peak_activations: (D,) the most micro-batch activations a device holds at once, in units
        of one stage micro-batch (a chunk's activation counts 1/v); held from a forward until
        its last backward op ends (W for zero-bubble schedules). The same for every set.
    timeline: every op's start and end, when asked for.
    """

    total_time: np.ndarray
    bubble_ratio: np.ndarray
    busy_time: np.ndarray
    peak_activations: np.ndarray
    timeline: Timeline | None = None


def _per_device(name: str, value: object, p: int) -> np.ndarray:
    """Times as (S or 1, D or 1); rejects negative, non-finite or wrong-length input."""
    try:
        a = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(name, "a number or one number per device", value) from None
    if a.ndim == 0:
        a = a.reshape(1, 1)
    elif a.ndim == 1:
        a = a.reshape(1, -1)
    if a.ndim != 2 or a.shape[1] not in (1, p):
        got = f"{a.shape[-1]} values" if a.ndim == 2 else f"shape {np.shape(value)}"
        raise InputError(name, f"one value or one per device (D={p})", got)
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise InputError(name, "finite times >= 0", value if np.size(value) < 20 else "array")
    return a


def simulate(schedule: str, devices: int, microbatches: int, chunks: int = 1, *, tf: object, tb: object,
             tw: object = 0.0, tc: object = 0.0, timeline: bool = False, blocking: bool = False) -> PipelineResult:
    """Simulate one schedule for a batch of parameter sets sharing (schedule, D, m, v).

    tf, tb, tw: per-stage forward, activation-backward and weight-backward times; anything
        broadcastable to (S, D): a scalar, a (D,) per-device list, an (S, 1) column or (S, D).
        Schedules that do not split the backward run B + W as one backward op.
    tc: point-to-point time of one hand-off between devices, broadcastable to (S,); or an
        (S, D) array, one time per link: link d joins devices d and d + 1, link D - 1 joins
        the last device and the first (the wrap of interleaved chunks).
    chunks: v; 1 for gpipe, 1f1b, zb-h1, zb-h2; 2 for zb-v; 2 x waves for hanayo.
    blocking: each hand-off is an exchange both devices wait on (module docstring).
    """
    g = compile_schedule(schedule, devices, microbatches, chunks)
    p, v, m = devices, chunks, microbatches
    tf2, tb2, tw2 = (_per_device(n, x, p) for n, x in (("tf", tf), ("tb", tb), ("tw", tw)))
    tc1 = np.asarray(tc, dtype=np.float64)
    per_link = tc1.ndim == 2
    if (tc1.ndim > 2 or (per_link and tc1.shape[1] != p) or not np.all(np.isfinite(tc1))
            or np.any(tc1 < 0)):
        raise InputError("tc", "a finite time >= 0, one per parameter set, or (S, D) per link", tc)
    try:
        tc_shape = (tc1.shape[0] if per_link else (tc1.size if tc1.ndim else 1), 1)
        n_sets = np.broadcast_shapes(tf2.shape, tb2.shape, tw2.shape, tc_shape)[0]
    except ValueError:
        shapes = [tf2.shape, tb2.shape, tw2.shape, tc1.shape]
        raise InputError("tf/tb/tw/tc", "shapes broadcastable to (S, D)", shapes) from None

    split = schedule in _SPLIT_BACKWARD
    shape = (n_sets, p)
    tf_s = np.broadcast_to(tf2, shape)
    tb_s = np.broadcast_to(tb2 if split else tb2 + tw2, shape)
    tw_s = np.broadcast_to(tw2 if split else np.zeros((1, 1)), shape)
    if per_link:
        # (D, S): link d joins devices d and d + 1; link D - 1 joins the last device and the
        # first (interleaved chunks wrap around). A cross-device op pays its link's time.
        tc_s = np.ascontiguousarray(np.broadcast_to(tc1, (n_sets, p)).T)
        link = g.link
    else:
        tc_s = np.broadcast_to(tc1.reshape(-1) if tc1.ndim else tc1.reshape(1), (n_sets,))
        link = None

    # Duration table (3 * D, S): row kind * D + device, a chunk's share of the stage time.
    dur = np.concatenate([tf_s.T, tb_s.T, tw_s.T]) / v  # (3D, S)
    dur_row = g.kind * p + g.device  # (n,) row of the duration table for each op

    total = np.empty(n_sets)
    starts = ends = None
    if timeline:
        starts = np.empty((n_sets, len(g.kind)))
        ends = np.empty((n_sets, len(g.kind)))
    for lo in range(0, n_sets, _BLOCK):
        hi = min(lo + _BLOCK, n_sets)
        tc_blk = tc_s[:, lo:hi] if per_link else tc_s[lo:hi]
        end = _run_block(g, np.ascontiguousarray(dur[:, lo:hi]), tc_blk, link, blocking)  # (n, s)
        total[lo:hi] = end[g.last].max(axis=0)
        if timeline:
            ends[lo:hi] = end.T
            starts[lo:hi] = (end - dur[dur_row, lo:hi]).T

    busy = m * (tf_s + tb_s + tw_s)  # (S, D)
    with np.errstate(divide="ignore", invalid="ignore"):
        bubble = np.where(total > 0, 1.0 - busy.sum(axis=1) / (p * total), 0.0)
    tl = None
    if timeline:
        tl = Timeline(g.kind, g.micro, g.chunk, g.device, starts, ends)
    return PipelineResult(total, bubble, np.array(busy), g.peak_activations.copy(), tl)


def _run_block(g: _Graph, dur_table: np.ndarray, tc: np.ndarray, link: np.ndarray | None = None,
               blocking: bool = False) -> np.ndarray:
    """End time of every op, (n, s), given per-(kind, device) durations (3D, s) and hand-off
    times (s,); ``blocking``: a cross-device op's previous op on its device pays the hand-off too.

    Ops are numbered in topological order and each wave is a contiguous range of ids with
    its cross-device ops first, so a wave is two gathers, one add of T_C on a prefix, a max,
    and a gathered add of durations written into a slice.
    """
    n = len(g.kind)
    s = dur_table.shape[1]
    end = np.zeros((n + 1, s))  # row n stays 0: the "no predecessor" sentinel
    buf_dep = np.empty((g.widest, s))
    buf_prev = np.empty((g.widest, s))
    buf_dur = np.empty((g.widest, s))
    for a, b, n_cross, prev_ids, dep_ids, dur_rows in g.wave_slices:
        k = b - a
        ready, other, dur = buf_dep[:k], buf_prev[:k], buf_dur[:k]
        np.take(end, dep_ids, axis=0, out=ready)
        np.take(end, prev_ids, axis=0, out=other)
        if n_cross:
            hand = tc if link is None else tc[link[a:a + n_cross]]
            ready[:n_cross] += hand
            if blocking:
                other[:n_cross] += hand
        np.maximum(ready, other, out=ready)
        np.take(dur_table, dur_rows, axis=0, out=dur)
        np.add(ready, dur, out=end[a:b])
    return end[:n]


# --------------------------------------------------------------------------- torch's interleaved grid

# torch.distributed.pipelining's ScheduleInterleaved1F1B (torch 2.6.0, git 2236df1, the release nearest the torchtitan
# rows' torch 1963fc8 of 2024-12-23; schedules.py) is a PipelineScheduleMulti: every
# rank walks one grid of time steps (pipeline_order), each step one pass or none, and after each step one batched
# isend / irecv of that step's sends (its pass's output to the next rank, its backward's gradient to the previous)
# and of the receives its neighbours' passes of the same step imply, waited on (``_batch_p2p(ops).wait()``) before
# the next step's pass. A rank's pass order is Megatron-LM's interleaved order with N = m // max(1, m // p)
# micro-batches a round (warm-up (v - 1) N + 2 (p - 1 - r) forwards; forward, backward pairs; cool-down
# backwards: _interleaved above); the grid adds r idle steps before the first forward, p v + 2 (p - 1 - r) -
# (warm-up + r) after the warm-up (_get_1f1b_rank_ops' post_warmup_ops) and one before each cool-down backward
# (costmodel._frameworks.TORCH_LOCKSTEP_SOURCE; Framework.lockstep_interleaved).


@functools.lru_cache(maxsize=256)
def lockstep_grid(p: int, m: int, v: int) -> tuple[np.ndarray, np.ndarray]:
    """torch's interleaved 1F1B grid (comment above) for p ranks, m micro-batches, v chunks: ``kind`` (T, p), the pass
    rank r runs at step t (F, B, or -1: none), and ``link`` (T, p), whether link r (ranks r and r + 1, the last rank's
    to the first) carries an exchange at step t: a forward's output to the next virtual stage (not the last one's) or a
    backward's gradient to the previous (not the first one's). Each rank's passes in _interleaved's order, torch's
    idle steps between them; m one that torch runs (m < p, or m a multiple of its m // p rounds: interleaving_runs'
    "pytorch_rounds"), where interleave_group_size is torch's m // max(1, m // p) micro-batches a round."""
    n = interleave_group_size(p, m)  # micro-batches a round
    rows = []
    for r, order in enumerate(_interleaved(p, m, v)):  # rank r's passes (kind, micro-batch, chunk) in order
        warm = min((v - 1) * n + 2 * (p - 1 - r), v * m)
        ops = [(k, c * p + r) for k, _, c in order]  # (kind, virtual stage)
        cool = len(ops) - warm  # warm-up forwards, v m - warm (forward, backward) pairs, warm cool-down backwards
        ops = ([None] * r + ops[:warm] + [None] * (v * p + 2 * (p - 1 - r) - warm - r) + ops[warm:cool]
               + [x for op in ops[cool:] for x in (None, op)])
        rows.append(ops)
    steps = max(len(ops) for ops in rows)
    kind = np.full((steps, p), -1, dtype=np.int64)
    link = np.zeros((steps, p), dtype=bool)
    for r, ops in enumerate(rows):
        for t, op in enumerate(ops):
            if op is not None:
                kind[t, r], s = op
                if op[0] == F and s < v * p - 1:
                    link[t, r] = True
                elif op[0] == B and s > 0:
                    link[t, (r - 1) % p] = True
    return kind, link


def simulate_lockstep(devices: int, microbatches: int, chunks: int, *, tf: object, tb: object, tw: object = 0.0,
                      tc: object = 0.0) -> np.ndarray:
    """Pipeline time (S,) of torch's interleaved 1F1B (lockstep_grid), its steps waited on as torch's code does: an
    exchange is a NCCL point-to-point send / receive, which completes ``tc`` after both ranks have posted it, each
    after its step's pass, so rank r's next step starts at

        max(end of its pass, max over its step's partners q of max(end of its pass, end of q's pass) + T_C)

    (no exchange: at the end of its pass; an idle step's pass ends where it starts). tf, tb, tw, tc as
    :func:`simulate` takes them (the backward is B + W, one pass; a chunk's time its stage's / v; tc (S, D): link d
    joins devices d and d + 1, link D - 1 the last and the first)."""
    p, m, v = devices, microbatches, chunks
    _validate_shape("interleaved", p, m, v)
    tf2, tb2, tw2 = (_per_device(n, x, p) for n, x in (("tf", tf), ("tb", tb), ("tw", tw)))
    tc1 = np.asarray(tc, dtype=np.float64)
    n_sets = np.broadcast_shapes(tf2.shape, tb2.shape, tw2.shape, (tc1.shape[0] if tc1.ndim else 1, 1))[0]
    c = np.broadcast_to(tc1.T if tc1.ndim == 2 else tc1, (p, n_sets))  # (D, S): link d's hand-off
    dur = np.stack([np.broadcast_to(x, (n_sets, p)).T / v for x in (tf2, tb2 + tw2)] + [np.zeros((p, n_sets))])
    kind, link = lockstep_grid(p, m, v)
    dev = np.arange(p)
    ready = np.zeros((p, n_sets))  # (D, S): when each device's next step starts
    for t in range(kind.shape[0]):
        end = ready + dur[kind[t], dev]  # (D, S)  (kind -1: the zeros)
        pair = np.where(link[t][:, None], np.maximum(end, np.roll(end, -1, axis=0)) + c, -np.inf)  # link d's end
        ready = np.maximum(np.maximum(end, pair), np.roll(pair, 1, axis=0))
    return ready.max(axis=0)


# --------------------------------------------------------------------------- DeepSpeed's TrainSchedule

# DeepSpeed 735406e (and 38327e0) deepspeed/runtime/pipe/schedule.py TrainSchedule: 2 (m + p - 1) steps; at each,
# stage i works on the micro-batch _step_to_micro_batch gives (a forward on even stages at even steps and odd at odd,
# a backward otherwise; none where the number is outside 0 .. m - 1), after the step's exchange with one neighbour: a
# forward step's RecvActivation of its micro-batch and SendGrad of the previous step's backward to stage i - 1, a
# backward step's SendActivation of the previous step's forward and RecvGrad of its micro-batch from stage i + 1.
# Stage i's forward step and stage i - 1's backward step fall on the same step, so the exchanges of a step are those of
# links (i - 1, i) with i's forward step, each one to two transfers; p2p.py's dist.send / dist.recv are waited on one
# after the other (DEEPSPEED_BLOCKING_P2P_SOURCE in costmodel._frameworks).


@functools.lru_cache(maxsize=256)
def trainschedule_grid(p: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """DeepSpeed's TrainSchedule (comment above) for p stages and m micro-batches: ``kind`` (T, p), the pass stage i
    runs at step t (F, B, or -1: none), and ``transfers`` (T, p), the transfers on link i (stages i and i + 1; the
    last column 0) at step t: 0, 1 (an activation or a gradient alone) or 2 (both: a steady-state exchange)."""
    t = np.arange(2 * (m + p - 1))[:, None]  # (T, 1)
    i = np.arange(p)[None, :]  # (1, p)
    forward = t % 2 == i % 2
    micro = np.where(forward, (t - i % 2) // 2 - i // 2,  # _even/_odd_step_forward_id
                     np.where(t % 2 == 0, t // 2 - p + (i + 1) // 2,  # _even_step_backward_id (odd stages)
                              (t - 1) // 2 - p + 1 + i // 2))  # _odd_step_backward_id (even stages)
    valid = (micro >= 0) & (micro < m)
    kind = np.where(valid, np.where(forward, F, B), -1)
    transfers = np.zeros(kind.shape, dtype=np.int64)
    # link i at a step where stage i + 1 forwards: its RecvActivation (stage i + 1's micro-batch) and stage i's
    # RecvGrad (stage i's backward micro-batch), each matched by the neighbour's send of its previous step's output
    transfers[:, :-1] = forward[:, 1:] * (valid[:, 1:].astype(np.int64) + valid[:, :-1])
    return kind, transfers


def simulate_trainschedule(devices: int, microbatches: int, *, tf: object, tb: object, tw: object = 0.0,
                           tc: object = 0.0, calls: int = 2) -> np.ndarray:
    """Pipeline time (S,) of DeepSpeed's TrainSchedule (trainschedule_grid), each transfer a point-to-point send /
    receive that completes ``tc`` after both stages have posted it: at each step, the two stages of an exchanging link
    start their passes at

        max(ready of stage i, ready of stage i + 1) + T_C x (1, or ``calls`` where the exchange has both transfers)

    (``calls`` 2: DeepSpeed's transfers one after the other; 1: as if batched), the others at once. tf, tb, tw, tc as
    :func:`simulate` takes them (the backward is B + W, one pass; tc (S, D): link d joins stages d and d + 1)."""
    p, m = devices, microbatches
    _validate_shape("1f1b", p, m, 1)
    if isinstance(calls, bool) or not isinstance(calls, (int, np.integer)) or calls < 1:
        raise InputError("calls", "an integer >= 1", calls)
    tf2, tb2, tw2 = (_per_device(n, x, p) for n, x in (("tf", tf), ("tb", tb), ("tw", tw)))
    tc1 = np.asarray(tc, dtype=np.float64)
    n_sets = np.broadcast_shapes(tf2.shape, tb2.shape, tw2.shape, (tc1.shape[0] if tc1.ndim else 1, 1))[0]
    c = np.broadcast_to(tc1.T if tc1.ndim == 2 else tc1, (p, n_sets))  # (D, S): link d's hand-off
    dur = np.stack([np.broadcast_to(x, (n_sets, p)).T for x in (tf2, tb2 + tw2)] + [np.zeros((p, n_sets))])
    kind, transfers = trainschedule_grid(p, m)
    wait = np.where(transfers == 2, float(calls), np.minimum(transfers, 1).astype(np.float64))  # (T, p) hand-offs
    dev = np.arange(p)
    ready = np.zeros((p, n_sets))  # (D, S): when each stage's next step starts
    for step in range(kind.shape[0]):
        on = wait[step] > 0  # (p,) the links exchanging
        if on.any():
            pair = np.maximum(ready, np.roll(ready, -1, axis=0)) + wait[step][:, None] * c  # (D, S) link d's end
            ready = np.where(on[:, None], pair, ready)
            ready = np.where(np.roll(on, 1)[:, None], np.roll(pair, 1, axis=0), ready)
        ready = ready + dur[kind[step], dev]  # (kind -1: the zeros)
    return ready.max(axis=0)


# --------------------------------------------------------------------------- long steps

# Micro-batches a step from which a pipeline is priced from a shorter run of its schedule (periodic_proxy): below
# it the whole op graph is simulated.
PERIODIC_MIN_MICROBATCHES = 256


def periodic_proxy(schedule: str, p: int, m: int, v: int, scale: int = 1) -> tuple[int, int] | None:
    """(m_x, P): a shorter micro-batch count m_x congruent to m modulo the schedule's period P, from which a long
    step's pipeline time is extended (steady_window), or None where m is too short for that to pay.

    Past its warm-up a schedule's op order repeats every P micro-batches: P = 1 for 1F1B and the zero bubble
    schedules, the group N for interleaving (interleave_group_size; the proxy must share m's N, else None), D for
    Hanayo (its wave order repeated m / D times); P = p is taken for all but interleaving, a multiple of each; an
    interleaved m_x is congruent to m modulo every group size from p to N, so that its group size is N too. m_x is
    ``scale`` x (4 p v + 6 P) or a little more: every stage's warm-up, the cool-down and a window of the steady state
    between (a larger scale for a run whose times take longer to settle). GPipe has none: its forwards and backwards
    are two stretches, each with its own step."""
    if schedule == "gpipe":
        return None
    period = interleave_group_size(p, m) if schedule == "interleaved" else p
    # (interleaving: m_x keeps m's remainder by every group size from p to N, so that N is m_x's group size too)
    step = math.lcm(*range(p, period + 1)) if schedule == "interleaved" else period
    low = scale * (4 * p * v + 6 * period)
    m_x = low + (m - low) % step
    if m < max(PERIODIC_MIN_MICROBATCHES, 2 * m_x):
        return None
    if schedule == "interleaved" and interleave_group_size(p, m_x) != period:
        return None
    return m_x, period


@functools.lru_cache(maxsize=64)
def steady_window(schedule: str, p: int, m: int, v: int, period: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(ids, later): op ids of compile_schedule(schedule, p, m, v) in a window of its steady state and the ids of the
    same ops (kind, chunk, device) ``period`` micro-batches later, or None where the graph has no such window.

    With fixed pass and hand-off times an op graph is a max-plus linear system (Baccelli et al. 1992, "Synchronization
    and Linearity", ch. 3): where the ops of a stretch of micro-batches keep their previous op and producer when all
    are shifted by ``period`` (the steady state), and the ends of a window of them, as long as the longest reach of an
    op back to an earlier micro-batch's, move by the same Delta when shifted, every later shifted op of the stretch
    moves by Delta too (each end is a max of earlier ends plus a duration), and a run with k periods more has every
    op after the window k Delta later: T(m + k P) = T(m) + k Delta. The window is the last one of the stretch."""
    g = compile_schedule(schedule, p, m, v)
    n = len(g.kind)
    key = ((g.kind * v + g.chunk) * p + g.device) * m + g.micro
    id_of = np.full(3 * v * p * m, -1, dtype=np.int64)
    id_of[key] = np.arange(n)

    def later(ids):  # the op ``period`` micro-batches after each of ``ids`` (-1: none, or ids -1)
        j = g.micro[ids] + period
        return np.where((ids >= 0) & (j < m), id_of[np.where(j < m, key[ids] + period, 0)], -1)

    ids = np.arange(n)
    nxt = later(ids)
    has = nxt >= 0
    at = np.maximum(nxt, 0)
    periodic = has & (g.cross == g.cross[at])
    for src in (g.prev, g.dep):  # the shifted op's previous op and producer: the shifted ones (or none for none)
        periodic &= np.where(src >= 0, later(np.maximum(src, 0)) == src[at], src[at] < 0)
    good = np.ones(m, dtype=bool)
    np.logical_and.at(good, g.micro, periodic)
    good[max(m - period, 0):] = False
    if not good.any():
        return None
    hi = int(np.flatnonzero(good)[-1]) + 1  # the stretch of good micro-batches ending at hi - 1
    bad_before = np.flatnonzero(~good[:hi])
    lo = int(bad_before[-1]) + 1 if bad_before.size else 0
    in_run = (g.micro >= lo) & (g.micro < hi)
    reach = max(int(np.max(np.where(in_run & (src >= 0), g.micro - g.micro[np.maximum(src, 0)], 0)))
                for src in (g.prev, g.dep))
    start = hi - max(reach, 0) - period
    if start < lo:
        return None
    window = np.flatnonzero((g.micro >= start) & (g.micro < hi - period))
    return window, nxt[window]


# --------------------------------------------------------------------------- mixed groups

# Ops simulated per batch by :func:`total_times_mixed`: keeps its flat arrays cache-friendly
# and bounded (a few 10 MB) whatever the batch.
_FLAT_NODES = 1 << 21


def total_times_mixed(keys: list[tuple[str, int, int, int]], group: np.ndarray, tf: np.ndarray, tb: np.ndarray,
                      tw: np.ndarray, tc: np.ndarray, blocking: np.ndarray | None = None) -> np.ndarray:
    """Pipeline time of S parameter sets that need not share (schedule, D, m, v).

    ``keys``: the distinct (schedule, D, m, v); ``group`` (S,): each set's index into ``keys``;
    ``tf``, ``tb``, ``tw`` (S, D_max): per-device stage times, columns past a set's D unused;
    ``tc`` (S,): hand-off time, or (S, D_max) one per link as in :func:`simulate`; ``blocking`` (S,)
    bool, None for none: the set's hand-offs block as :func:`simulate`'s. Equal to
    ``simulate(*keys[group[i]], tf=..., ...).total_time`` set by set (tests/test_pipeline.py).

    :func:`simulate` walks one graph's waves over an (ops, S) array: ideal for many sets of one
    shape, but a search step brings a few sets each of dozens of shapes, and then the Python
    walk per shape dominates. Here the graphs of all sets are laid side by side in one flat
    array ordered by wave, then by set, so one walk over the deepest graph's waves prices all
    of them: op (set i, op j) of wave l sits at level_start[l] + (offset of i's group in
    wave l) + (i's rank in its group) * (group's wave width) + (j's place in the wave).
    """
    group = np.asarray(group, dtype=np.int64)
    S = len(group)
    total = np.zeros(S)
    if S == 0:
        return total
    graphs = [compile_schedule(*k) for k in keys]
    split = np.array([k[0] in _SPLIT_BACKWARD for k in keys])
    # Duration per (set, kind, device): F, B (+ W when the backward is one op), W.
    tb_all = np.where(split[group][:, None], tb, tb + tw)
    v = np.array([k[3] for k in keys], dtype=np.float64)[group]
    # divided, as simulate() divides: x / 3 and x * (1 / 3) can differ in the last bit, and a row must price the
    # same whichever of the two walks its distinct inputs go to
    dur3 = np.stack([tf, tb_all, tw], axis=1) / v[:, None, None]  # (S, 3, D_max)
    tc = np.asarray(tc, dtype=np.float64)
    if tc.ndim < 2:
        tc = np.broadcast_to(tc, (S,))

    # Pieces (group, its sets) of at most _FLAT_NODES ops, packed into batches.
    order = np.argsort(group, kind="stable")
    cuts = np.flatnonzero(np.diff(group[order])) + 1
    pieces: list[tuple[int, np.ndarray]] = []
    for sets in np.split(order, cuts):
        g = int(group[sets[0]])
        per = max(1, _FLAT_NODES // len(graphs[g].kind))
        pieces += [(g, sets[i:i + per]) for i in range(0, len(sets), per)]
    batch: list[tuple[int, np.ndarray]] = []
    nodes = 0
    for g, sets in pieces:
        n = len(sets) * len(graphs[g].kind)
        if batch and nodes + n > _FLAT_NODES:
            _flat_batch(graphs, batch, dur3, tc, total, blocking)
            batch, nodes = [], 0
        batch.append((g, sets))
        nodes += n
    _flat_batch(graphs, batch, dur3, tc, total, blocking)
    return total


def _flat_batch(graphs: list[_Graph], batch: list[tuple[int, np.ndarray]], dur3: np.ndarray,
                tc: np.ndarray, total: np.ndarray, blocking: np.ndarray | None = None) -> None:
    """Simulate the sets of ``batch`` [(graph index, set indices)] in one flat wave walk and
    write their pipeline times into ``total`` (``blocking`` (S,): the sets whose cross-device ops' previous ops pay
    the hand-off too, None for none)."""
    gs = [graphs[g] for g, _ in batch]
    width = [np.diff(gr.level_bounds) for gr in gs]  # (L_g,) ops per wave
    depth = max(len(w) for w in width)
    cnt = np.zeros((len(batch), depth), dtype=np.int64)  # ops of each piece in each wave
    for i, ((_, sets), w) in enumerate(zip(batch, width, strict=True)):
        cnt[i, :len(w)] = len(sets) * w
    level_start = np.zeros(depth + 1, dtype=np.int64)
    np.cumsum(cnt.sum(axis=0), out=level_start[1:])
    offset = level_start[:-1] + np.cumsum(cnt, axis=0) - cnt  # (pieces, depth) first id of piece in wave
    n_all = int(level_start[-1])
    prev = np.empty(n_all, dtype=np.int64)
    dep = np.empty(n_all, dtype=np.int64)
    dur = np.empty(n_all)
    hand = np.empty(n_all)
    blocks = blocking is not None and any(blocking[sets].any() for _, sets in batch)
    hand_prev = np.zeros(n_all) if blocks else None  # (a blocking set's cross-device op: after its previous op too)
    ids = []
    for i, ((_, sets), gr) in enumerate(zip(batch, gs, strict=True)):
        lvl, rel, wid = gr.flat_layout
        new = (offset[i, lvl] + rel)[None, :] + np.arange(len(sets))[:, None] * wid[None, :]  # (s, n) flat id
        with_sentinel = np.concatenate([new, np.full((len(sets), 1), n_all)], axis=1)  # column -1: none
        prev[new] = with_sentinel[:, gr.prev]
        dep[new] = with_sentinel[:, gr.dep]
        dur[new] = dur3[sets[:, None], gr.kind[None, :], gr.device[None, :]]
        hand[new] = (tc[sets][:, None] if tc.ndim == 1 else tc[sets][:, gr.link]) * gr.cross[None, :]
        if blocks:
            hand_prev[new] = hand[new] * blocking[sets][:, None]
        ids.append(new[:, gr.last])
    end = np.zeros(n_all + 1)  # entry n_all stays 0: "no predecessor"
    widest = int(np.diff(level_start).max())
    a_buf, b_buf = np.empty(widest), np.empty(widest)
    take = end.take
    for lo, hi in zip(level_start[:-1].tolist(), level_start[1:].tolist(), strict=True):
        k = hi - lo
        ready, other = a_buf[:k], b_buf[:k]
        take(dep[lo:hi], out=ready)
        ready += hand[lo:hi]
        take(prev[lo:hi], out=other)
        if blocks:
            other += hand_prev[lo:hi]
        np.maximum(ready, other, out=ready)
        np.add(ready, dur[lo:hi], out=end[lo:hi])
    for (_, sets), last in zip(batch, ids, strict=True):
        total[sets] = end[last].max(axis=1)
