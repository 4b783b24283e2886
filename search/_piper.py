"""Piper's planner (Tarnawski et al., NeurIPS 2021) for layer graphs in Piper's JSON format.

The objective and constraints are those of ``shared/data/README.md``. A plan cuts the DAG
into contiguous stages; stage i has node set S_i, tensor degree t_i, data degree d_i and one
TMPC per node. With B = bandwidth and N = micro-batches per batch, its time per sample is

    time_i = sum(p)/d + [ (1/d) * sum_{edges cut at its borders} 2*(c + c_sync)
                          + sum_{nodes} 4*(d-1)*w/(d*N) ] / B

and the plan's time per sample is max_i time_i (the slowest stage sets the pace). It must use
sum_i t_i*d_i <= K devices, have d_i | N, and fit sum_{S_i}(a*y_i + b) <= M on each device,
where y_i = ceil(s_i/d_i) and s_i = sum of d over stage i and all later stages (the number of
micro-batches in flight in a 1F1B-like schedule).

How it is solved (the recurrence of Piper's algo.cpp, reorganised for numpy):

- Stages are differences of *tails*, the successor-closed node sets (Piper calls them ideals or
  downsets): the stages after a cut always form a tail. Each pair (tail, proper sub-tail) is a
  candidate stage.
- For each stage and t, the TMPC choice is a knapsack: minimise time subject to memory at y.
  Nodes whose two TMPCs differ in memory by the same (da, db, dw) are interchangeable except
  for their time, so only *how many* of them switch matters and the cheapest ones switch; the
  product of these counts is enumerated exactly (up to MAX_EXACT_CANDIDATES; past it, greedy
  prefixes, a heuristic like Piper's own knapsack), which turns the knapsack, for every d and
  y at once, into a staircase of (time, largest y that fits).
- Piper's DP is min over plans of the max stage time. Here it is solved as "smallest tau for
  which a plan with every stage <= tau fits in K devices", by bisection over the finite set of
  staircase times; for a given tau, f[tail][s] = fewest devices to run the tail with suffix
  sum of d equal to s, and a stage (t, d) is allowed where s <= d * ymax_tau(t, d). This has
  one table dimension fewer than Piper's dp[ideal][k][s] and is vectorised over s.
- Whole arrays throughout: the staircases of every stage candidate are built together, one t
  at a time (_all_staircases; stage_candidates, one stage at a time, is the reference the tests
  hold it to and what rebuilds the chosen stages), and the device-count DP handles every
  (move, s) cell of a threshold at once where moves cover few s (_Problem.device_table).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from costmodel import InputError
from search._piper_input import DegreeArrays, PiperGraph, degree_arrays

# Piper models the data-parallel weight resync as a parameter-server all-reduce: each replica
# sends and receives its weights twice per batch (algo.cpp, getDataParallelResyncCost).
RESYNC_BYTES_PER_PARAM_BYTE = 4.0
# Each cut edge is crossed forward (activations) and backward (gradients): 2 * (c + c_sync).
CUT_EDGE_CROSSINGS = 2.0
# Beyond this many tails the DP (quadratic in tails) is impractical in Python; Piper's own
# limit is 40,000 (algo.cpp, IDEALS_LIMIT) for C++.
MAX_TAILS = 4_000
# Per stage and t, at most this many TMPC combinations are enumerated exactly; beyond it the
# knapsack falls back to greedy prefixes (cheapest time per byte saved first, at sampled y).
MAX_EXACT_CANDIDATES = 4_096
# y values sampled by the greedy fallback: all y up to this, then a geometric ladder.
GREEDY_ALL_Y_UP_TO = 16
GREEDY_Y_RATIO = 1.25
# Relative slack when comparing a recomputed stage time to the bisection threshold.
TIME_RTOL = 1e-9
# The device-count DP either builds every (move, s) cell as one array (cost per cell) or
# works on one slice per move (cost per move, in Python); below this many cells per move the
# first is cheaper (measured on bert32a100, K = 8 .. 2048).
CELLS_PER_RANGE = 100
_NO_DEVICES = np.iinfo(np.int64).max // 4  # "no plan" in the device-count table


@dataclass(frozen=True)
class PiperStage:
    nodes: tuple[int, ...]  # node ids as in the input file, topological order
    t: int  # tensor-parallel degree
    d: int  # data-parallel degree
    tmpcs: tuple[str, ...]  # chosen TMPC id per node
    recompute: tuple[bool, ...]  # per node: the chosen TMPC recomputes activations
    time_per_sample_s: float
    memory_bytes: float  # per device, at this stage's y


@dataclass(frozen=True)
class PiperPlan:
    time_per_sample_s: float  # inf when no plan fits
    stages: tuple[PiperStage, ...]  # pipeline order, first stage first

    @property
    def feasible(self) -> bool:
        return bool(self.stages)

    def to_json(self) -> dict:
        """The CLI's contract: {"time_per_sample", "stages": [{"nodes","t","d","recompute"}]}."""
        return {"time_per_sample": self.time_per_sample_s if self.feasible else None,
                "stages": [{"nodes": list(s.nodes), "t": s.t, "d": s.d, "recompute": list(s.recompute)}
                           for s in self.stages]}


def solve_piper(graph: PiperGraph, *, max_sum_d: int | None = None) -> PiperPlan:
    """The plan with the lowest time per sample (Piper's objective); infeasible -> no stages.

    max_sum_d caps the sum of d over all stages. None applies only the constraints of
    shared/data/README.md (the sum is then at most K, as every replica takes a device);
    Piper's algo.cpp also caps it at N (boundOnS = min(N, K)): pass graph.microbatches to
    compare with it.
    """
    s_max = graph.max_devices if max_sum_d is None else min(graph.max_devices, max_sum_d)
    if s_max < 1:
        raise InputError("max_sum_d", "an integer >= 1", max_sum_d)
    problem = _Problem.build(graph, s_max)
    taus = problem.candidate_times()
    if taus.size == 0:
        return PiperPlan(math.inf, ())
    lo, hi, table = 0, taus.size, None  # taus[hi] fits (device table `table`); hi = size: none
    while lo < hi:
        mid = (lo + hi) // 2
        trial = problem.device_table(taus[mid])
        if problem.fits(trial):
            hi, table = mid, trial
        else:
            lo = mid + 1
    if table is None:
        return PiperPlan(math.inf, ())
    stages = problem.reconstruct(taus[hi], table)
    plan_time = max(s.time_per_sample_s for s in stages)
    assert plan_time <= taus[hi] * (1 + TIME_RTOL), (plan_time, taus[hi])
    return PiperPlan(plan_time, stages)


def evaluate_piper_plan(graph: PiperGraph, stages: tuple[PiperStage, ...]) -> float:
    """Time per sample of a plan given as stages (nodes, t, d, tmpcs); inf if it does not fit."""
    index = {node.id: v for v, node in enumerate(graph.nodes)}
    listed = [i for s in stages for i in s.nodes]
    if sorted(listed) != sorted(index) or any(s.t < 1 or s.d < 1 for s in stages):
        return math.inf  # every node exactly once, degrees >= 1
    if any(len(s.tmpcs) != len(s.nodes) or not _offers(graph, s, index) for s in stages):
        return math.inf
    stage_of = {index[i]: k for k, s in enumerate(stages) for i in s.nodes}
    if sum(s.t * s.d for s in stages) > graph.max_devices:
        return math.inf
    suffix = sum(s.d for s in stages)
    worst = 0.0
    for k, s in enumerate(stages):
        if graph.microbatches % s.d:
            return math.inf
        time_s, mem = _stage_cost(graph, s, k, stage_of, index, suffix)
        suffix -= s.d
        if mem > graph.max_memory_bytes:
            return math.inf
        worst = max(worst, time_s)
    if any(stage_of[a] > stage_of[b] for a, b in zip(graph.edge_src, graph.edge_dst, strict=True)):
        return math.inf
    return worst


def _offers(graph: PiperGraph, stage: PiperStage, index: dict[int, int]) -> bool:
    """Every node of the stage has the named TMPC for the stage's t."""
    return all(any(o.name == name for o in graph.nodes[index[i]].options(stage.t))
               for i, name in zip(stage.nodes, stage.tmpcs, strict=True))


def _stage_cost(graph, stage, k, stage_of, index, suffix_d) -> tuple[float, float]:
    """(time per sample, memory per device) of one stage, straight from the formula."""
    d, n_mb, bw = stage.d, graph.microbatches, graph.bandwidth_Bps
    y = -(-suffix_d // d)
    compute = edge_bytes = resync_bytes = mem = 0.0
    for node_id, name in zip(stage.nodes, stage.tmpcs, strict=True):
        v = index[node_id]
        tm = next(o for o in graph.nodes[v].options(stage.t) if o.name == name)
        compute += tm.time_per_sample_s
        for j, e in enumerate(graph.in_edges[v]):
            if stage_of[graph.edge_src[e]] != k:
                edge_bytes += CUT_EDGE_CROSSINGS * (graph.edge_bytes[e] + tm.sync_fw_bytes[j])
        for j, e in enumerate(graph.out_edges[v]):
            if stage_of[graph.edge_dst[e]] != k:
                edge_bytes += CUT_EDGE_CROSSINGS * (graph.edge_bytes[e] + tm.sync_bw_bytes[j])
        resync_bytes += RESYNC_BYTES_PER_PARAM_BYTE * (d - 1) * tm.parameter_bytes / (d * n_mb)
        mem += tm.memory_a_bytes * y + tm.memory_b_bytes
    return compute / d + (edge_bytes / d + resync_bytes) / bw, mem


# --- tails (successor-closed sets) -----------------------------------------------------------


def tails(graph: PiperGraph) -> list[int]:
    """All successor-closed node sets as bitmasks over topological positions, by size."""
    n = len(graph.nodes)
    succ = [0] * n
    for s, d in zip(graph.edge_src, graph.edge_dst, strict=True):
        succ[s] |= 1 << d
    seen = {0}
    stack = [0]
    while stack:
        mask = stack.pop()
        for v in range(n):
            bit = 1 << v
            if not mask & bit and succ[v] & ~mask == 0 and mask | bit not in seen:
                if len(seen) >= MAX_TAILS:
                    raise InputError("nodes/edges", f"a graph with at most {MAX_TAILS} successor-closed node sets "
                                     "(Piper's DP is quadratic in them)", f"more than {MAX_TAILS}")
                seen.add(mask | bit)
                stack.append(mask | bit)
    return sorted(seen, key=lambda m: (m.bit_count(), m))


# --- per-stage knapsack: TMPC choices as candidates --------------------------------------------


@dataclass(frozen=True)
class _Candidates:
    x_s: np.ndarray  # (C,) sum of p + cut-edge bytes / B: the part of time divided by d
    w_bytes: np.ndarray  # (C,) sum of w
    a_bytes: np.ndarray  # (C,) sum of a
    b_bytes: np.ndarray  # (C,) sum of b
    choice: np.ndarray | None  # (C, |S|) option index per stage node, when asked for


def stage_candidates(arr: DegreeArrays, graph: PiperGraph, in_stage: np.ndarray,
                     *, with_choice: bool = False) -> _Candidates:
    """TMPC combinations for one stage and t that can be optimal for some d and y."""
    src, dst = np.asarray(graph.edge_src, int), np.asarray(graph.edge_dst, int)
    c = np.asarray(graph.edge_bytes, float)
    n = len(graph.nodes)
    cut_in = in_stage[dst] & ~in_stage[src]  # (E,)
    cut_out = in_stage[src] & ~in_stage[dst]
    edge = np.zeros((n, 2))
    for slot in range(2):
        edge[:, slot] = (
            np.bincount(dst[cut_in], CUT_EDGE_CROSSINGS * (c + arr.sync_in_bytes[:, slot])[cut_in], minlength=n)
            + np.bincount(src[cut_out], CUT_EDGE_CROSSINGS * (c + arr.sync_out_bytes[:, slot])[cut_out], minlength=n))
    nodes = np.flatnonzero(in_stage)
    x = arr.time_s[nodes] + edge[nodes] / graph.bandwidth_Bps  # (|S|, 2)
    w, a, b = arr.param_bytes[nodes], arr.mem_a_bytes[nodes], arr.mem_b_bytes[nodes]
    return _enumerate_choices(x, w, a, b, graph, with_choice)


def _enumerate_choices(x, w, a, b, graph, with_choice) -> _Candidates:
    q = np.stack([x, w, a, b])  # (4, |S|, 2): per node and option, X, w, a, b
    delta = q[:, :, 1] - q[:, :, 0]  # (4, |S|)
    option0_no_worse = (delta >= 0).all(axis=0)
    option1_no_worse = (delta <= 0).all(axis=0)
    free = ~(option0_no_worse | option1_no_worse)  # a real time/memory trade-off
    # Fixed nodes take the option that is no worse; free ones start at their faster option.
    start = np.where(free, delta[0] < 0, ~option0_no_worse).astype(int)  # (|S|,)
    totals = q[:, np.arange(start.size), start].sum(axis=1)  # (4,)
    f = np.flatnonzero(free)
    step = delta[:, f] * np.where(start[f] == 1, -1.0, 1.0)  # (4, F): change when switching
    if f.size == 0:
        switch = np.zeros((1, 0), dtype=bool)
    else:
        _, group = np.unique(step[1:].T, axis=0, return_inverse=True)
        group = group.ravel()
        sizes = np.bincount(group)
        if np.prod(sizes + 1.0) > MAX_EXACT_CANDIDATES:
            orders = _greedy_orders(step, graph.max_devices)
            sums = totals[:, None] + _prefix_sums(step, orders)
            prefixes = _prefix_switches(f.size, orders) if with_choice else None
            return _candidates(sums, start, f, prefixes)
        switch = _exact_switch_sets(group, sizes, step[0])
    sums = totals[:, None] + step @ switch.T.astype(float)  # (4, C)
    return _candidates(sums, start, f, switch if with_choice else None)


def _candidates(sums, start, free_idx, switch) -> _Candidates:
    choice = None
    if switch is not None:
        choice = np.repeat(start[None, :], switch.shape[0], axis=0)
        choice[:, free_idx] ^= switch.astype(int)
    return _Candidates(sums[0], sums[1], sums[2], sums[3], choice)


def _exact_switch_sets(group, sizes, added_time) -> np.ndarray:
    """Every count per group, switching that group's cheapest nodes: nodes of one group
    change w, a and b by the same amounts, so only how many switch matters for memory."""
    grids = np.meshgrid(*[np.arange(size + 1) for size in sizes], indexing="ij")
    counts = np.stack([g.ravel() for g in grids], axis=1)  # (C, G)
    switch = np.zeros((counts.shape[0], group.size), dtype=bool)  # (C, F)
    for g in range(sizes.size):
        members = np.flatnonzero(group == g)
        cheapest_first = members[np.argsort(added_time[members], kind="stable")]
        for rank, member in enumerate(cheapest_first):
            switch[:, member] = rank < counts[:, g]
    return switch


def _greedy_orders(step, y_limit: int) -> list[np.ndarray]:
    """Heuristic when exact enumeration is too large: at sampled y, the order in which to
    switch nodes, by time added per byte saved (Piper's own knapsack heuristic). Every
    prefix of every order is a candidate."""
    added_time = step[0]
    orders = []
    for y in _sampled_y(y_limit):
        saved = -(step[2] * y + step[3])  # bytes saved by switching, at this y
        useful = np.flatnonzero(saved > 0)
        orders.append(useful[np.argsort(added_time[useful] / saved[useful], kind="stable")])
    return orders


def _prefix_sums(step, orders) -> np.ndarray:
    """(4, C) changes of (X, w, a, b): none switched, then every prefix of every order."""
    parts = [np.zeros((4, 1))] + [np.cumsum(step[:, o], axis=1) for o in orders]
    return np.concatenate(parts, axis=1)


def _prefix_switches(n_free: int, orders) -> np.ndarray:
    """(C, F) the switch sets of _prefix_sums, same row order."""
    rows = [np.zeros((1, n_free), dtype=bool)]
    for o in orders:
        rank = np.full(n_free, n_free + 1)
        rank[o] = np.arange(o.size)
        rows.append(rank[None, :] <= np.arange(o.size)[:, None])  # row k: first k+1 switched
    return np.concatenate(rows)


def _sampled_y(limit: int) -> list[int]:
    ys, y = list(range(1, min(limit, GREEDY_ALL_Y_UP_TO) + 1)), float(GREEDY_ALL_Y_UP_TO)
    while y < limit:
        y *= GREEDY_Y_RATIO
        ys.append(min(limit, int(math.ceil(y))))
    return ys


def largest_y(a_bytes: np.ndarray, b_bytes: np.ndarray, memory_bytes: float, y_cap: int) -> np.ndarray:
    """Largest integer y in [0, y_cap] with a*y + b <= M (0 when even y = 1 does not fit)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.floor((memory_bytes - b_bytes) / a_bytes)
    y = np.where(a_bytes > 0, y, np.where(b_bytes <= memory_bytes, y_cap, 0))
    y = np.clip(np.nan_to_num(y, nan=0.0, posinf=y_cap, neginf=0.0), 0, y_cap).astype(np.int64)
    over = a_bytes * y + b_bytes > memory_bytes  # floor() on rounded division: correct by one
    y = np.where(over & (y > 0), y - 1, y)
    under = (y < y_cap) & (a_bytes * (y + 1) + b_bytes <= memory_bytes)
    return np.where(under, y + 1, y)


def stage_time_s(x_s, w_bytes, d, graph: PiperGraph):
    """sum(p)/d + [cut bytes/d + sum 4(d-1)w/(dN)]/B, with x = sum(p) + cut bytes/B."""
    resync = RESYNC_BYTES_PER_PARAM_BYTE * (d - 1) * w_bytes / (d * graph.microbatches)
    return x_s / d + resync / graph.bandwidth_Bps


# --- the DP ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Moves:
    """Every step of the device-count DP: tail i is run as stage pair p (its sub-tail j left
    for later stages) with degrees (t, d), t*d <= K and d <= s_max. Moves are grouped by tail,
    in (pair, t, d) order within a tail."""

    pair: np.ndarray  # (M,)
    sub_tail: np.ndarray  # (M,)
    t: np.ndarray  # (M,)
    d: np.ndarray  # (M,)
    cost: np.ndarray  # (M,) t * d devices
    segment: np.ndarray  # (M,) index of (pair, t, d) in the flat (P*T*D,) bounds
    tail_start: np.ndarray  # (tails + 1,) moves of tail i: tail_start[i] .. tail_start[i+1]
    pair_sub_tail: np.ndarray  # (P,) sub-tail of each pair
    pair_first: np.ndarray  # (tails + 1,) pairs of tail i: pair_first[i] .. pair_first[i+1]

    @classmethod
    def build(cls, pairs: np.ndarray, n_tails: int, degrees: tuple[int, ...],
              ds: tuple[int, ...], k_max: int, s_max: int) -> _Moves:
        t, d = np.asarray(degrees), np.asarray(ds)
        p, ti, di = (g.ravel() for g in np.meshgrid(np.arange(pairs.shape[0]), np.arange(t.size),
                                                    np.arange(d.size), indexing="ij"))
        keep = (t[ti] * d[di] <= k_max) & (d[di] <= s_max)
        p, ti, di = p[keep], ti[keep], di[keep]
        tail_start = np.searchsorted(pairs[p, 0], np.arange(n_tails + 1)) if p.size else \
            np.zeros(n_tails + 1, np.int64)
        pair_first = np.searchsorted(pairs[:, 0], np.arange(n_tails + 1))
        return cls(p, pairs[p, 1], t[ti], d[di], t[ti] * d[di], (p * t.size + ti) * d.size + di,
                   tail_start, pairs[:, 1], pair_first)


@dataclass(frozen=True)
class _Problem:
    """Everything the bisection needs, built once: tails, stage candidates (pairs) and, for
    every (pair, t, d), the staircase of its TMPC knapsack."""

    graph: PiperGraph
    tails: list[int]
    pairs: list[tuple[int, int]]  # (tail index, sub-tail index)
    pairs_of: list[list[tuple[int, int]]]  # per tail: (pair index, sub-tail index)
    degrees: tuple[int, ...]  # t values
    ds: tuple[int, ...]  # d values: divisors of N that are <= K
    s_max: int  # largest sum of d over a tail: at most K, as every replica takes a device
    arrays: dict[int, DegreeArrays]
    seg_time: np.ndarray  # staircase points, all (pair, t, d) segments concatenated
    seg_y: np.ndarray
    seg_start: np.ndarray  # (P*T*D,) start of each segment
    moves: _Moves

    @classmethod
    def build(cls, graph: PiperGraph, s_max: int) -> _Problem:
        ts = tails(graph)
        pairs: list[tuple[int, int]] = []
        pairs_of: list[list[tuple[int, int]]] = [[] for _ in ts]
        for i, m in enumerate(ts):
            for j in range(i):
                if ts[j] & ~m == 0:
                    pairs_of[i].append((len(pairs), j))
                    pairs.append((i, j))
        k, n_mb = graph.max_devices, graph.microbatches
        ds = tuple(d for d in range(1, min(k, n_mb) + 1) if n_mb % d == 0)
        arrays = {t: degree_arrays(graph, t) for t in graph.degrees}
        inside = _membership(ts, len(graph.nodes))  # (tails, n)
        ij = np.array(pairs, dtype=np.int64).reshape(-1, 2)
        members = inside[ij[:, 0]] & ~inside[ij[:, 1]]  # (P, n) each stage's nodes
        # A stage with nodes before it (tail i not everything) or after it (sub-tail j not
        # empty) leaves devices to at least one more stage on each such side.
        others = (ij[:, 0] != len(ts) - 1).astype(int) + (ij[:, 1] != 0)  # (P,)
        seg_time, seg_y, seg_start = _all_staircases(graph, members, others, arrays, ds, s_max)
        moves = _Moves.build(ij, len(ts), graph.degrees, ds, k, s_max)
        return cls(graph, ts, pairs, pairs_of, graph.degrees, ds, s_max, arrays, seg_time, seg_y, seg_start, moves)

    def candidate_times(self) -> np.ndarray:
        finite = np.sort(self.seg_time[np.isfinite(self.seg_time) & (self.seg_y > 0)])
        distinct = np.ones(finite.size, dtype=bool)
        distinct[1:] = finite[1:] != finite[:-1]
        return finite[distinct]  # np.unique, without its first-call cost

    def _bounds(self, tau: float) -> np.ndarray:
        """(P, T, D) largest allowed suffix sum s for each stage choice at threshold tau."""
        allowed_y = np.where(self.seg_time <= tau, self.seg_y, 0)
        y = np.maximum.reduceat(allowed_y, self.seg_start)
        shape = (len(self.pairs), len(self.degrees), len(self.ds))
        return np.minimum(y.reshape(shape) * np.asarray(self.ds), self.s_max)

    def device_table(self, tau: float) -> np.ndarray:
        """f[tail, s]: fewest devices running the tail with all stages <= tau, suffix sum s;
        any value above K means "not within K devices" (_NO_DEVICES, or a sum built on it)."""
        bounds = self._bounds(tau).ravel()  # (P*T*D,)
        f = np.full((len(self.tails), self.s_max + 1), _NO_DEVICES, dtype=np.int64)
        f[0, 0] = 0
        top = bounds.reshape(len(self.pairs), len(self.degrees), -1)  # (P, T, D)
        # Per (pair, d), degree t serves the suffix sums s above those a smaller (cheaper) t
        # serves, up to top[p, t, d]: that range is the move's (cells).
        d = np.asarray(self.ds)
        below = np.maximum(top, d - 1)  # (P, T, D), then the running max over t
        for k in range(1, below.shape[1]):
            np.maximum(below[:, k - 1], below[:, k], out=below[:, k])
        covered = np.concatenate([np.broadcast_to(d - 1, (top.shape[0], 1, d.size)),
                                  below[:, :-1]], axis=1)  # s served by a smaller t
        length = np.maximum(top - covered, 0)  # (P, T, D)
        if length.sum() <= CELLS_PER_RANGE * np.count_nonzero(length):
            self._ranged_table(f, covered, length)
        else:
            self._sliced_table(f, bounds.reshape(len(self.pairs), -1).tolist())
        return f

    def _ranged_table(self, f: np.ndarray, covered: np.ndarray, length: np.ndarray) -> None:
        """Every (move, s) cell at once, then tail by tail a scatter-min into f."""
        d = np.asarray(self.ds)  # (D,)
        t = np.asarray(self.degrees)  # (T,)
        p, ti, di = np.nonzero(length)  # (E,) in (pair, t, d) order, so grouped by tail
        n = length[p, ti, di]
        first = np.cumsum(n) - n  # (E,) first cell of each move
        s_cell = np.arange(first[-1] + n[-1] if n.size else 0) + np.repeat(
            covered[p, ti, di] + 1 - first, n)  # (L,) suffix sum s of each cell
        source = s_cell + np.repeat(self.moves.pair_sub_tail[p] * (self.s_max + 1) - d[di], n)
        devices = np.repeat(t[ti] * d[di], n)  # (L,)
        tail_first = np.searchsorted(p, self.moves.pair_first)  # (tails + 1,) by move
        cell_first = np.append(first, s_cell.size)[tail_first]  # (tails + 1,) by cell
        flat = f.reshape(-1)  # f[j, s - d] is flat[j * (S+1) + s - d]
        for i in range(1, len(self.tails)):
            lo, hi = cell_first[i], cell_first[i + 1]
            if lo < hi:
                np.minimum.at(f[i], s_cell[lo:hi], flat[source[lo:hi]] + devices[lo:hi])

    def _sliced_table(self, f: np.ndarray, bounds: list[list[int]]) -> None:
        """Large tables: per (pair, d), each t over the range of s it is the cheapest for."""
        k_max, n_d = self.graph.max_devices, len(self.ds)
        f_min = [0] + [_NO_DEVICES] * (len(self.tails) - 1)
        for i in range(1, len(self.tails)):
            best = f[i]
            for p, j in self.pairs_of[i]:
                base = f_min[j]
                if base >= k_max:
                    continue
                fj = f[j]
                bp = bounds[p]
                for di, d in enumerate(self.ds):
                    prev = d - 1  # s covered so far for this (pair, d)
                    for ti, t in enumerate(self.degrees):
                        top = bp[ti * n_d + di]
                        if top <= prev:
                            continue
                        cost = t * d
                        if base + cost > k_max:
                            break
                        np.minimum(best[prev + 1: top + 1], fj[prev + 1 - d: top + 1 - d] + cost,
                                   out=best[prev + 1: top + 1])
                        prev = top
            f_min[i] = int(best.min())

    def fits(self, table: np.ndarray) -> bool:
        return int(table[-1].min()) <= self.graph.max_devices

    def reconstruct(self, tau: float, f: np.ndarray) -> tuple[PiperStage, ...]:
        """The plan behind device_table(tau) = f, first stage first."""
        bounds = self._bounds(tau).ravel()
        mv, k_max = self.moves, self.graph.max_devices
        i = len(self.tails) - 1
        s = int(np.argmin(f[i]))
        assert f[i, s] <= k_max
        stages = []
        while i != 0:
            lo, hi = mv.tail_start[i], mv.tail_start[i + 1]
            d = mv.d[lo:hi]
            prior = f[mv.sub_tail[lo:hi], np.maximum(s - d, 0)] + mv.cost[lo:hi]  # (M_i,)
            ok = (d <= s) & (s <= bounds[mv.segment[lo:hi]]) & (prior == f[i, s])
            assert ok.any(), "DP table has no predecessor"
            m = lo + int(np.argmax(ok))  # the first in (pair, t, d) order
            p, j, t, d_m = (int(mv.pair[m]), int(mv.sub_tail[m]), int(mv.t[m]), int(mv.d[m]))
            stages.append(self._make_stage(p, t, d_m, s, tau))
            i, s = j, s - d_m
        assert s == 0
        return tuple(stages)

    def _make_stage(self, p: int, t: int, d: int, s: int, tau: float) -> PiperStage:
        g = self.graph
        in_stage = _stage_mask(self.tails, self.pairs[p], len(g.nodes))
        cand = stage_candidates(self.arrays[t], g, in_stage, with_choice=True)
        y = -(-s // d)
        time_s = stage_time_s(cand.x_s, cand.w_bytes, d, g)
        mem = cand.a_bytes * y + cand.b_bytes
        time_s = np.where(mem <= g.max_memory_bytes, time_s, np.inf)
        c = int(np.argmin(time_s))
        assert time_s[c] <= tau * (1 + TIME_RTOL), (time_s[c], tau)
        nodes = np.flatnonzero(in_stage)
        assert cand.choice is not None
        opts = [g.nodes[v].options(t)[min(int(k), len(g.nodes[v].options(t)) - 1)]
                for v, k in zip(nodes, cand.choice[c], strict=True)]
        return PiperStage(nodes=tuple(g.nodes[v].id for v in nodes), t=t, d=d, tmpcs=tuple(o.name for o in opts),
                          recompute=tuple(o.recompute for o in opts), time_per_sample_s=float(time_s[c]),
                          memory_bytes=float(mem[c]))


def _stage_mask(tail_masks: list[int], pair: tuple[int, int], n: int) -> np.ndarray:
    """(n,) bool: the nodes of tail pair[0] that are not in its sub-tail pair[1]."""
    bits = tail_masks[pair[0]] & ~tail_masks[pair[1]]
    return np.array([(bits >> v) & 1 for v in range(n)], dtype=bool)


def _membership(tail_masks: list[int], n: int) -> np.ndarray:
    """(tails, n) bool: node v (topological position) is in tail i."""
    bits = np.array([[(m >> v) & 1 for v in range(n)] for m in tail_masks], dtype=bool)
    return bits.reshape(len(tail_masks), n)


def _all_staircases(graph: PiperGraph, members: np.ndarray, others: np.ndarray,
                    arrays: dict[int, DegreeArrays], ds_tuple: tuple[int, ...], s_max: int):
    """Staircase points of every (pair, t, d) segment, segments in that nesting order, and the
    start of each segment; within a segment the points are in no particular order. A segment
    that cannot run has one point (inf, y=0). members is (P, n): each stage's nodes; others
    (P,): how many other stages a plan with it has at least (each takes a device).

    Every stage candidate is handled at once per t (whole arrays, no loop over stages)."""
    ds = np.asarray(ds_tuple)
    n_pairs, n_t, n_d = members.shape[0], len(arrays), ds.size
    y_cap = -(-s_max // ds)  # (D,) y never exceeds ceil(s_max / d)
    segs, times, ys = [], [], []
    for ti, (t, arr) in enumerate(sorted(arrays.items())):
        usable = ds[None, :] * t <= graph.max_devices - others[:, None]  # (P, D)
        runs = ~(members & ~arr.available).any(axis=1) & usable.any(axis=1)  # (P,)
        rows = np.flatnonzero(runs)
        seg_base = (rows * n_t + ti) * n_d  # (R,) first segment of each running stage
        cand_row, x, w, a, b = _batch_candidates(arr, graph, members[rows])
        seg, time_s, y = _batch_staircases(cand_row, x, w, a, b, seg_base, ds, usable[rows], y_cap, graph)
        idle = ((np.flatnonzero(~runs) * n_t + ti) * n_d)[:, None] + np.arange(n_d)  # (I, D)
        segs += [seg, idle.ravel()]
        times += [time_s, np.full(idle.size, np.inf)]
        ys += [y, np.zeros(idle.size, np.int64)]
    seg = np.concatenate(segs)
    order = np.argsort(seg, kind="stable")
    counts = np.bincount(seg, minlength=n_pairs * n_t * n_d)
    seg_start = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    return np.concatenate(times)[order], np.concatenate(ys)[order], seg_start


def _batch_candidates(arr: DegreeArrays, graph: PiperGraph, members: np.ndarray):
    """stage_candidates for R stages at once: flat (C,) arrays row, X, w, a, b, rows in
    ascending order. Stages past MAX_EXACT_CANDIDATES take stage_candidates's greedy fallback, all at once
    (_batch_greedy)."""
    n_rows, n = members.shape
    src, dst = np.asarray(graph.edge_src, int), np.asarray(graph.edge_dst, int)
    c = np.asarray(graph.edge_bytes, float)
    # Cut-edge bytes per (stage, node, option): the stage's crossing edges summed at the node
    # inside it, in edge order (np.bincount over flat (row, node, option) indices).
    cells = []
    for cut, end, sync in ((members[:, dst] & ~members[:, src], dst, arr.sync_in_bytes),
                           (members[:, src] & ~members[:, dst], src, arr.sync_out_bytes)):
        r, e = np.nonzero(cut)  # cut edges of every stage
        cells.append(((r * n + end[e]) * 2)[:, None] + np.arange(2))
        cells.append(CUT_EDGE_CROSSINGS * (c[e, None] + sync[e]))
    edge = np.bincount(np.concatenate(cells[0::2]).ravel(), np.concatenate(cells[1::2]).ravel(),
                       minlength=n_rows * n * 2).reshape(n_rows, n, 2)
    x = arr.time_s[None] + edge / graph.bandwidth_Bps  # (R, n, 2) X per node and option
    wab = np.stack([arr.param_bytes, arr.mem_a_bytes, arr.mem_b_bytes])  # (3, n, 2) w, a, b
    dx = x[..., 1] - x[..., 0]  # (R, n)
    dwab = wab[..., 1] - wab[..., 0]  # (3, n)
    option0_no_worse = (dx >= 0) & (dwab >= 0).all(axis=0)
    option1_no_worse = (dx <= 0) & (dwab <= 0).all(axis=0)
    free = ~(option0_no_worse | option1_no_worse) & members  # (R, n)
    start = np.where(free, dx < 0, ~option0_no_worse)  # (R, n) bool: option 1
    totals = np.concatenate([
        np.where(members, np.where(start, x[..., 1], x[..., 0]), 0.0).sum(axis=1)[None],
        (members @ wab[..., 0].T + (members & start) @ dwab.T).T,
    ])  # (4, R) X, w, a, b with every node at its start option
    fr, fv = np.nonzero(free)  # (F,) free (row, node), row-major
    fstart = start[fr, fv]
    sign = np.where(fstart, -1.0, 1.0)
    # Groups: free nodes of one stage with the same (w, a, b) change, as in _enumerate_choices.
    # That change is one of 2n vectors (node, start option): number them in (w, a, b) order.
    change = [tuple(dwab[:, v] * sgn) for v in range(n) for sgn in (1.0, -1.0)]
    distinct = sorted(set(change))
    class_id = {key: k for k, key in enumerate(distinct)}
    change_class = np.array([class_id[key] for key in change]).reshape(n, 2)  # (n, start)
    key = fr * len(distinct) + change_class[fv, fstart.astype(int)]  # (F,) (row, class)
    used = np.zeros(n_rows * len(distinct), dtype=bool)
    used[key] = True
    group = (np.cumsum(used) - 1)[key]  # (F,) group ids in (row, w, a, b) order
    g_key = np.flatnonzero(used)  # (G,)
    g_row = g_key // len(distinct)
    g_change = np.array(distinct).reshape(-1, 3)[g_key % len(distinct)].T  # (3, G) w, a, b
    g_time = dx[fr, fv] * sign  # (F,) time added by switching
    sizes = np.bincount(group, minlength=g_row.size)
    log_count = np.bincount(g_row, np.log(sizes + 1.0), minlength=n_rows)  # (R,)
    exact = log_count <= math.log(MAX_EXACT_CANDIDATES) + 1e-9
    # Per group, the time added by switching its k cheapest members, k = 0 .. size.
    by_time = np.lexsort((fv, g_time, group))
    rank = np.arange(group.size) - np.concatenate([[0], np.cumsum(sizes)[:-1]])[group[by_time]]
    prefix = np.zeros((g_row.size, int(sizes.max(initial=0)) + 1))  # (G, 1 + largest group)
    prefix[group[by_time], rank + 1] = g_time[by_time]
    prefix = np.cumsum(prefix, axis=1)
    # Enumerate every count per group (the last group of a stage varying fastest).
    g_exact = np.flatnonzero(exact[g_row])
    row = np.flatnonzero(exact)  # (C,) start: one candidate per exact stage, nothing switched
    sums = totals[:, row]  # (4, C)
    g_first = np.searchsorted(g_row[g_exact], row)  # each candidate's next group to expand
    g_end = np.searchsorted(g_row[g_exact], row, side="right")
    while True:
        expand = g_first < g_end
        if not expand.any():
            break
        g = g_exact[np.minimum(g_first, g_exact.size - 1)]  # (C,)
        reps = np.where(expand, sizes[g] + 1, 1)
        row, g_first, g_end, g, expand = (np.repeat(v, reps) for v in (row, g_first, g_end, g, expand))
        sums = np.repeat(sums, reps, axis=1)
        count = np.arange(row.size) - np.repeat(np.cumsum(reps) - reps, reps)  # (C,)
        count = np.where(expand, count, 0)
        gi = np.where(expand, g, 0)
        sums[0] += prefix[gi, count]  # count is 0 (and so is the change) where not expanding
        sums[1:] += np.take(g_change, gi, axis=1) * count
        g_first = g_first + expand
    if exact.all():
        return row, *sums
    greedy = ~exact[fr]  # (F,) free nodes of the stages past MAX_EXACT_CANDIDATES
    step = np.concatenate([g_time[None], dwab[:, fv] * sign], axis=0)[:, greedy]  # (4, F2) as _enumerate_choices's
    g_rows, g_sums = _batch_greedy(fr[greedy], step, totals, np.flatnonzero(~exact), graph.max_devices)
    row = np.concatenate([row, g_rows])
    sums = np.concatenate([sums, g_sums], axis=1)
    order = np.argsort(row, kind="stable")
    return row[order], *sums[:, order]


def _batch_greedy(fr, step, totals, rows, y_limit: int):
    """_greedy_orders and _prefix_sums for many stages at once. ``fr`` (F,): each free node's stage row, ascending
    (row-major, as np.nonzero gives them); ``step`` (4, F): its change of X, w, a, b when switched; ``totals`` (4, R):
    every stage's sums with each node at its start option; ``rows``: the stages to expand, ascending. Returns (row,
    (4, C) sums): each stage's start, then at each sampled y the prefixes of its useful nodes in order of time added
    per byte saved (ties in node order: a stable sort, as the per-stage argsort), less the prefixes the previous y's
    order already gave (the same nodes switched in the same order: the same sums, which change no staircase). Each
    stage's prefixes are one row of a zero-padded cumsum, summed left to right as the per-stage cumsum sums them: the
    same floating-point numbers."""
    out_rows, out_sums = [rows], [totals[:, rows]]
    stage_of = np.searchsorted(rows, fr)  # (F,) index into rows
    width = int(np.bincount(stage_of, minlength=rows.size).max(initial=0))
    previous = np.full((rows.size, width), -1)  # (R2, width) the previous y's order per stage, -1 past its end
    for y in _sampled_y(y_limit):
        saved = -(step[2] * y + step[3])  # (F,) bytes saved by switching, at this y
        useful = np.flatnonzero(saved > 0)
        order = useful[np.lexsort((step[0, useful] / saved[useful], fr[useful]))]  # by stage, then ratio
        st = stage_of[order]  # (U,)
        new_stage = np.ones(st.size, dtype=bool)
        new_stage[1:] = st[1:] != st[:-1]
        first = np.flatnonzero(new_stage)
        pos = np.arange(st.size) - np.repeat(first, np.diff(np.append(first, st.size)))  # (U,) rank in its stage
        current = np.full_like(previous, -1)
        current[st, pos] = order
        differs = current != previous
        common = np.where(differs.any(axis=1), differs.argmax(axis=1), width)  # (R2,) prefix shared with the last y
        previous = current
        new = pos >= common[st]  # (U,) prefixes not listed at the previous y
        seg = np.cumsum(new_stage) - 1  # (U,) stage number among this y's
        padded = np.zeros((4, first.size, int(pos.max(initial=-1)) + 1))  # (4, stages, longest order)
        padded[:, seg, pos] = step[:, order]
        np.cumsum(padded, axis=2, out=padded)  # add.accumulate: left to right, as each stage's own cumsum
        out_rows.append(rows[st[new]])
        out_sums.append(totals[:, rows[st[new]]] + padded[:, seg[new], pos[new]])
    return np.concatenate(out_rows), np.concatenate(out_sums, axis=1)


def _batch_staircases(row, x, w, a, b, seg_base, ds, usable, y_cap, graph):
    """Per stage (row) and data degree d, the Pareto points (time ascending, largest fitting
    y strictly ascending) of its TMPC candidates; the first point of each d is always kept
    (with y = 0 where nothing fits). Returns flat (segment, time, y)."""
    n_d = ds.size
    y = largest_y(a, b, graph.max_memory_bytes, int(y_cap.max()))  # (C,)
    y_span = int(y_cap.max()) + 1
    # Where w is the same for all of a stage's candidates, time(d) = X/d + resync(w, d) orders
    # them alike for every d: one sort by X serves all d.
    lo = np.full(seg_base.size, np.inf)
    hi = np.full(seg_base.size, -np.inf)
    np.minimum.at(lo, row, w)
    np.maximum.at(hi, row, w)
    one_order = (lo == hi)[row]  # (C,)
    out = []
    r1 = row[one_order]
    x1, w1, y1 = x[one_order], w[one_order], y[one_order]
    # Sort each stage's candidates by X (ties: whichever y first, the staircase is the same).
    # Stages with one group of switchable nodes come sorted already: sort only the others.
    order = np.arange(r1.size)
    unsorted = np.zeros(seg_base.size, dtype=bool)
    unsorted[r1[1:][(r1[1:] == r1[:-1]) & (x1[1:] < x1[:-1])]] = True
    redo = np.flatnonzero(unsorted[r1])  # whole stages, in row order
    order[redo] = redo[np.lexsort((x1[redo], r1[redo]))]
    r1, x1, w1, y1 = r1[order], x1[order], w1[order], y1[order]
    keep = _pareto(r1, y1, y_span)
    r1, x1, w1, y1 = r1[keep], x1[keep], w1[keep], y1[keep]
    first = np.ones(r1.size, dtype=bool)  # (K,) first point of its stage
    first[1:] = r1[1:] != r1[:-1]
    y_prev = np.zeros_like(y1)
    y_prev[1:] = y1[:-1]
    # Capping y at y_cap[d] keeps the prefix up to the first point that reaches the cap.
    keep_d = first[:, None] | (usable[r1] & (y_prev[:, None] < y_cap[None, :]))  # (K, D)
    time_d = stage_time_s(x1[:, None], w1[:, None], ds[None, :], graph)  # (K, D)
    y_d = np.minimum(y1[:, None], y_cap[None, :]) * usable[r1]
    seg_d = seg_base[r1][:, None] + np.arange(n_d)[None, :]
    out.append((seg_d[keep_d], time_d[keep_d], y_d[keep_d]))
    if not one_order.all():
        many = ~one_order
        r2 = row[many]
        time_d = stage_time_s(x[many][:, None], w[many][:, None], ds[None, :], graph)  # (C2, D)
        y_d = np.minimum(y[many][:, None], y_cap[None, :]) * usable[r2]
        seg_d = seg_base[r2][:, None] + np.arange(n_d)[None, :]
        seg_d, time_d, y_d = seg_d.ravel(), time_d.ravel(), y_d.ravel()
        order = np.lexsort((-y_d, time_d, seg_d))
        seg_d, time_d, y_d = seg_d[order], time_d[order], y_d[order]
        keep = _pareto(seg_d, y_d, y_span)
        out.append((seg_d[keep], time_d[keep], y_d[keep]))
    return tuple(np.concatenate([o[k] for o in out]) for k in range(3))


def _pareto(seg: np.ndarray, y: np.ndarray, y_span: int) -> np.ndarray:
    """(Q,) keep mask over points sorted by segment then time: the first point of each segment
    and every point whose y beats all earlier ones of its segment (0 <= y < y_span)."""
    key = seg.astype(np.int64) * y_span + y  # ascending across segments
    before = np.full_like(key, -1)  # best key before each point
    before[1:] = np.maximum.accumulate(key)[:-1]
    return key > before
