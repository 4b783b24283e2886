"""Piper's layer graphs as a search space the samplers walk, and its exact DP.

A point cuts the nodes of a Piper graph, in topological order, into ``pp`` contiguous stages
and picks per stage a tensor degree t, a data degree d (a divisor of the micro-batches N) and
one TMPC slot for all its nodes (slot 0 or 1 of each node's TMPCs for t; a node with one TMPC
uses it in both). A prefix of a topological order is closed under predecessors, so every such
cut is a plan of Piper's (search._piper), priced by Piper's formulas (``evaluate_piper_plan``):

    time_J = (sum p + cut bytes / B) / d + 4 (d - 1) w / (d N B)      mem_J = a y_J + b

with y_J = ceil(sum of d over stage J and later / d), the plan's time the largest time_J, and
the constraints sum t d <= K, mem_J <= M, every node of a stage offering t. This is a subset of
Piper's space (Piper also cuts a DAG at any successor-closed set and picks the TMPC per node):
``solve_piper``'s optimum is a lower bound for it.

Dimensions (digit rows, search._base.SearchSpace): ``pp``; ``stage_shift.J`` (J < pp - 1), the
J-th cut's offset in nodes from the uniform cut ``uniform_cut(n, pp, J)``, ordinal, in
[-max_shift, max_shift]; ``tp.J``, ``dp.J``, ``tmpc.J`` (J < pp). Stages a point does not use
hold their canonical digit (offset 0, first choice), so each plan has one digit row and
distinct points are distinct plans.

``PiperSpace.evaluate`` prices a table of N points with whole arrays: per (start, end, t,
slot) sums over the nodes come from prefix sums, the cut-edge bytes from a 2-D difference
array over (start, end), both built once; a batch is a gather over (N, stages) and no loop over
rows. Metrics: step_time_s is the time per sample, tokens_per_s (what the samplers maximise)
its inverse, samples per second; compute_s, pp_comm_s and dp_comm_s the three parts of the
slowest stage, also where memory does not fit (the samplers' time proxy); mem_total_bytes the
most memory any stage needs per device.

``solve_space_dp`` is the exact optimum of a PiperSpace: for each pp, the stages are solved
last to first over the cut windows; Piper's min-max is found as the smallest stage-time
threshold tau at which the fewest devices (a table over (stage start, sum of d from there))
fit in K, by bisection over the finite set of stage times, as in search._piper.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from costmodel import METRIC_COLUMNS, REASONS, InputError, Metrics
from search._base import SearchSpace
from search._piper import CUT_EDGE_CROSSINGS, RESYNC_BYTES_PER_PARAM_BYTE, PiperStage, largest_y
from search._piper_input import PiperGraph, degree_arrays
from search._space import DimName

SHIFT = "stage_shift"
PER_STAGE = ("tp", "dp", "tmpc")
# Random draws per point asked of random_digits before it gives up on a space whose valid points
# are too rare to draw (rejection on the device count).
DRAW_ROUNDS = 200
_OK, _OOM = REASONS.index("ok"), REASONS.index("out_of_memory")
_NO_DEVICES = np.iinfo(np.int64).max // 4


@dataclasses.dataclass(frozen=True)
class PiperDim(DimName):
    """One dimension of a PiperSpace: ``pp``, or ``FAMILY.J`` for stage J."""

    name: str
    choices: tuple
    ordinal: bool = False


@dataclasses.dataclass(frozen=True)
class PiperWorkload:
    """The ``model`` of a PiperSpace: the graph; a node counts as a layer and a sample as one
    token (so tokens_per_s reads samples per second)."""

    graph: PiperGraph
    name: str = "piper-graph"
    seq_len: int = 1

    @property
    def layers(self) -> int:
        return len(self.graph.nodes)


@dataclasses.dataclass(frozen=True)
class PiperDevice:
    hbm_bytes: float  # M: memory per device


@dataclasses.dataclass(frozen=True)
class PiperDevices:
    """The ``cluster`` of a PiperSpace: K devices of M bytes each."""

    num_gpus: int
    gpu: PiperDevice
    name: str = "piper-devices"


@dataclasses.dataclass(frozen=True, eq=False)
class PiperTable:
    """N points of a PiperSpace: their digits and the plan they stand for, (N, S) per stage
    (stages past a row's pp hold zeros)."""

    digits: np.ndarray  # (N, D)
    pp: np.ndarray  # (N,)
    bounds: np.ndarray  # (N, S + 1) first node of each stage; bounds[r, pp[r]:] = n
    t: np.ndarray  # (N, S) tensor degree
    d: np.ndarray  # (N, S) data degree
    slot: np.ndarray  # (N, S) TMPC slot

    placed = False

    def __len__(self) -> int:
        return len(self.pp)

    def __getitem__(self, name: str) -> np.ndarray:
        if name == "pp":
            return self.pp
        if name == "global_batch":  # one sample per row: the samplers' time proxy is per sample
            return np.ones(len(self.pp), dtype=np.int64)
        raise KeyError(name)

    def row_keys(self) -> np.ndarray:
        """(N,) void keys of the rows (one digit row per plan)."""
        mat = np.ascontiguousarray(self.digits.astype(np.int64))
        return mat.view(np.dtype((np.void, mat.shape[1] * 8))).reshape(len(mat))

    def same_rows(self, other) -> bool:
        return isinstance(other, PiperTable) and np.array_equal(self.digits, other.digits)

    def stages(self, graph: PiperGraph, row: int) -> tuple[PiperStage, ...]:
        """Row ``row`` as the stages evaluate_piper_plan takes (time and memory left at 0)."""
        out = []
        for j in range(int(self.pp[row])):
            lo, hi, t = int(self.bounds[row, j]), int(self.bounds[row, j + 1]), int(self.t[row, j])
            opts = [graph.nodes[v].options(t) for v in range(lo, hi)]
            chosen = [o[min(int(self.slot[row, j]), len(o) - 1)] for o in opts]
            out.append(PiperStage(nodes=tuple(graph.nodes[v].id for v in range(lo, hi)), t=t, d=int(self.d[row, j]),
                                  tmpcs=tuple(c.name for c in chosen), recompute=tuple(c.recompute for c in chosen),
                                  time_per_sample_s=0.0, memory_bytes=0.0))
        return tuple(out)


def uniform_cut(n: int, pp, j):
    """First node of stage j + 1 when n nodes are cut into pp even stages: round(n (j + 1) / pp),
    halves up, in integers."""
    return (2 * n * (np.asarray(j) + 1) + np.asarray(pp)) // (2 * np.asarray(pp))


@dataclasses.dataclass(frozen=True)
class _Sums:
    """Per (t index, slot, start i, end j) sums over the nodes i..j-1, i < j <= n (0 elsewhere)."""

    x_s: np.ndarray  # (T, 2, n+1, n+1) sum p + cut-edge bytes / B: the part divided by d
    p_s: np.ndarray  # (T, 2, n+1, n+1) sum p
    w: np.ndarray  # (T, 2, n+1, n+1) sum w
    a: np.ndarray  # (T, 2, n+1, n+1) sum a
    b: np.ndarray  # (T, 2, n+1, n+1) sum b
    avail: np.ndarray  # (T, n+1, n+1) every node of i..j-1 offers t (and i < j)


def _range_sums(graph: PiperGraph, degrees: tuple[int, ...]) -> _Sums:
    n = len(graph.nodes)
    src, dst = np.asarray(graph.edge_src, dtype=np.int64), np.asarray(graph.edge_dst, dtype=np.int64)
    c = np.asarray(graph.edge_bytes, dtype=np.float64)
    i_, j_ = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    proper = i_ < j_
    fields, avail = [], []
    for t in degrees:
        arr = degree_arrays(graph, t)
        per = np.stack([arr.time_s, arr.param_bytes, arr.mem_a_bytes, arr.mem_b_bytes])  # (4, n, 2)
        cum = np.concatenate([np.zeros((4, 1, 2)), np.cumsum(per, axis=1)], axis=1)  # (4, n+1, 2)
        sums = cum[:, None, :, :] - cum[:, :, None, :]  # (4, i, j, 2): nodes i..j-1
        sums = np.where(proper[None, :, :, None], sums, 0.0).transpose(0, 3, 1, 2)  # (4, 2, i, j)
        edge = np.zeros((2, n + 2, n + 2))
        for slot in range(2):
            # cut in (u -> v, v in the stage, u before it): i in (u, v], j in (v, n]
            _rectangles(edge[slot], src + 1, dst, dst + 1, np.full_like(dst, n),
                        CUT_EDGE_CROSSINGS * (c + arr.sync_in_bytes[:, slot]))
            # cut out (u in the stage, v after it): i in [0, u], j in (u, v]
            _rectangles(edge[slot], np.zeros_like(src), src, src + 1, dst,
                        CUT_EDGE_CROSSINGS * (c + arr.sync_out_bytes[:, slot]))
        edge = np.cumsum(np.cumsum(edge, axis=1), axis=2)[:, : n + 1, : n + 1]
        fields.append(np.concatenate([(sums[0] + np.where(proper, edge, 0.0) / graph.bandwidth_Bps)[None], sums]))
        missing = np.concatenate([[0], np.cumsum(~arr.available)])  # (n+1,)
        avail.append(proper & (missing[None, :] - missing[:, None] == 0))
    f = np.stack(fields, axis=1)  # (5, T, 2, n+1, n+1)
    return _Sums(x_s=f[0], p_s=f[1], w=f[2], a=f[3], b=f[4], avail=np.stack(avail))


def _rectangles(grid: np.ndarray, i0, i1, j0, j1, value) -> None:
    """Add value[e] to grid[i0..i1, j0..j1] (inclusive) for every e, as a 2-D difference array."""
    ok = (i0 <= i1) & (j0 <= j1)
    i0, i1, j0, j1, value = (x[ok] for x in (i0, i1, j0, j1, value))
    np.add.at(grid, (i0, j0), value)
    np.add.at(grid, (i0, j1 + 1), -value)
    np.add.at(grid, (i1 + 1, j0), -value)
    np.add.at(grid, (i1 + 1, j1 + 1), value)


class PiperSpace(SearchSpace):
    """Stage cuts of a Piper graph with per-stage (t, d, TMPC slot): module docstring."""

    __slots__ = ("model", "cluster", "fixed", "dims", "max_shift", "_sums", "_degrees", "_ds", "_index",
                 "_shift_zero", "_cols", "_canon", "_radices")

    def __init__(self, graph: PiperGraph, *, max_stages: int | None = None, max_shift: int | None = None) -> None:
        n, k = len(graph.nodes), graph.max_devices
        top = min(n, k)
        if max_stages is None:
            max_stages = top
        if isinstance(max_stages, bool) or not isinstance(max_stages, (int, np.integer)) or max_stages < 1:
            raise InputError("max_stages", "an integer >= 1", max_stages)
        max_stages = min(int(max_stages), top)
        if max_shift is None:
            max_shift = n
        if isinstance(max_shift, bool) or not isinstance(max_shift, (int, np.integer)) or max_shift < 0:
            raise InputError("max_shift", "an integer >= 0", max_shift)
        max_shift = min(int(max_shift), max(n - 2, 0))
        degrees = graph.degrees
        ds = tuple(d for d in range(1, min(graph.microbatches, k) + 1) if graph.microbatches % d == 0)
        two = any(len(node.options(t)) > 1 for node in graph.nodes for t in degrees)
        dims = [PiperDim("pp", tuple(range(1, max_stages + 1)))]
        dims += [PiperDim(f"{SHIFT}.{j}", tuple(range(-max_shift, max_shift + 1)), ordinal=True)
                 for j in range(max_stages - 1)]
        for j in range(max_stages):
            dims += [PiperDim(f"tp.{j}", degrees), PiperDim(f"dp.{j}", ds),
                     PiperDim(f"tmpc.{j}", (0, 1) if two else (0,))]
        setattr_ = object.__setattr__
        setattr_(self, "model", PiperWorkload(graph))
        setattr_(self, "cluster", PiperDevices(k, PiperDevice(graph.max_memory_bytes)))
        setattr_(self, "fixed", {"global_batch": 1})
        setattr_(self, "dims", tuple(dims))
        setattr_(self, "max_shift", max_shift)
        setattr_(self, "_degrees", np.asarray(degrees, dtype=np.int64))
        setattr_(self, "_ds", np.asarray(ds, dtype=np.int64))
        setattr_(self, "_index", {d.name: i for i, d in enumerate(dims)})
        setattr_(self, "_shift_zero", max_shift)
        setattr_(self, "_sums", _range_sums(graph, degrees))
        setattr_(self, "_cols", {f: np.array([self._index[f"{f}.{j}"] for j in range(max_stages)], dtype=np.int64)
                                 for f in PER_STAGE})
        setattr_(self, "_canon", SearchSpace.canonical_digits(self, 1))  # (1, D)
        setattr_(self, "_radices", np.array([len(d.choices) for d in dims], dtype=np.int64))

    def __setattr__(self, name, value):
        raise AttributeError("PiperSpace is immutable")

    def __repr__(self) -> str:
        g = self.graph
        return (f"PiperSpace({len(g.nodes)} nodes, K={g.max_devices}, pp <= {self.max_stages}, "
                f"shift <= {self.max_shift}, {self.size:.3e} points)")

    # ---- layout ------------------------------------------------------------------------------
    @property
    def graph(self) -> PiperGraph:
        return self.model.graph

    @property
    def max_stages(self) -> int:
        return len(self.dims[0].choices)

    @property
    def partitioned(self) -> bool:
        return True

    def column(self, digits, name: str) -> np.ndarray:
        """(N,) numeric values of a non-stage dimension (pp); 0 for a column the space has not
        (MCMC's moves ask for the schedule)."""
        digits = np.atleast_2d(np.asarray(digits, dtype=np.int64))
        if name == "pp":
            return digits[:, 0] + 1
        return np.zeros(len(digits), dtype=np.int64)

    @property
    def radices(self) -> np.ndarray:
        return self._radices

    def canonical_digits(self, n: int = 1) -> np.ndarray:
        return np.repeat(self._canon, n, axis=0)

    def _stage_cols(self, family: str) -> np.ndarray:
        return self._cols[family]

    def _layout(self, digits: np.ndarray):
        """(pp (N,), bounds (N, S+1), ti (N, S), d (N, S), slot (N, S), used (N, S)) of digits in range."""
        n, S = len(self.graph.nodes), self.max_stages
        pp = digits[:, 0] + 1
        j = np.arange(S - 1)[None, :]
        cut = uniform_cut(n, pp[:, None], j) + digits[:, 1:S] - self._shift_zero  # (N, S-1)
        used = np.arange(S)[None, :] < pp[:, None]  # (N, S)
        bounds = np.full((len(digits), S + 1), n, dtype=np.int64)
        bounds[:, 0] = 0
        bounds[:, 1:S] = np.where(used[:, 1:], cut, n)
        ti = digits[:, self._stage_cols("tp")]
        d = self._ds[digits[:, self._stage_cols("dp")]]
        slot = digits[:, self._stage_cols("tmpc")]
        return pp, bounds, ti, d, slot, used

    # ---- SearchSpace -------------------------------------------------------------------------
    def valid(self, digits) -> np.ndarray:
        digits = np.atleast_2d(np.asarray(digits, dtype=np.int64))
        if digits.shape[1] != len(self.dims):
            return np.zeros(len(digits), dtype=bool)
        ok = np.all((digits >= 0) & (digits < self.radices[None, :]), axis=1)
        x = np.where(ok[:, None], digits, self._canon)
        pp, bounds, ti, d, _, used = self._layout(x)
        canon = self._canon[0]
        S, n = self.max_stages, len(self.graph.nodes)
        shift_used = np.arange(S - 1)[None, :] < (pp - 1)[:, None]
        ok &= np.all(shift_used | (x[:, 1:S] == canon[1:S]), axis=1)
        for family in PER_STAGE:
            ok &= np.all(used | (x[:, self._stage_cols(family)] == 0), axis=1)
        lo, hi = np.clip(bounds[:, :-1], 0, n), np.clip(bounds[:, 1:], 0, n)
        ok &= np.all(~used | (bounds[:, :-1] < bounds[:, 1:]), axis=1)  # 0 < cut_0 < ... < n
        ok &= np.all(~used | self._sums.avail[ti, np.minimum(lo, hi), hi], axis=1)
        ok &= np.sum(np.where(used, self._degrees[ti] * d, 0), axis=1) <= self.graph.max_devices
        return ok

    def table(self, digits) -> PiperTable:
        digits = np.asarray(digits, dtype=np.int64).reshape(-1, len(self.dims))
        pp, bounds, ti, d, slot, used = self._layout(digits)
        return PiperTable(digits=digits.copy(), pp=pp, bounds=bounds, t=np.where(used, self._degrees[ti], 0),
                          d=np.where(used, d, 0), slot=np.where(used, slot, 0))

    def digits_from_table(self, table: PiperTable) -> np.ndarray:
        return table.digits.copy()

    def valid_indices(self, start: int, stop: int) -> np.ndarray:
        self._need_int64("valid_indices")
        start, stop = max(int(start), 0), min(int(stop), self.size)
        idx = np.arange(start, max(start, stop), dtype=np.int64)
        return idx[self.valid(self.digits_of(idx))] if idx.size else idx

    def random_digits(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """(n, D) valid digits: pp uniform, then the shifts, t among the degrees every node of the
        stage offers, d and the slot uniform; rows over the device count drawn again."""
        out = np.zeros((0, len(self.dims)), dtype=np.int64)
        for _ in range(DRAW_ROUNDS):
            if len(out) >= n:
                break
            cand = self._draw(rng, max(4 * (n - len(out)), 8))
            out = np.concatenate([out, cand[self.valid(cand)]])
        if len(out) == 0 and n > 0:
            raise InputError("graph", "a Piper graph with some plan in the space (every stage's nodes offering a "
                             "common t, within the devices)", f"none found in {DRAW_ROUNDS} rounds of draws")
        while 0 < len(out) < n:  # valid points too rare to draw: repeat those found
            out = np.concatenate([out, out[: n - len(out)]])
        return out[:n]

    def _draw(self, rng: np.random.Generator, m: int) -> np.ndarray:
        S, D = self.max_stages, len(self.dims)
        x = np.tile(self.canonical_digits(1), (m, 1))
        pp = rng.integers(1, S + 1, size=m)
        x[:, 0] = pp - 1
        shift_used = np.arange(S - 1)[None, :] < (pp - 1)[:, None]
        x[:, 1:S] = np.where(shift_used, rng.integers(0, 2 * self.max_shift + 1, size=(m, S - 1)), x[:, 1:S])
        _, bounds, _, _, _, used = self._layout(x)
        n = len(self.graph.nodes)
        lo, hi = np.clip(bounds[:, :-1], 0, n), np.clip(bounds[:, 1:], 0, n)
        ok = self._sums.avail[:, np.minimum(lo, hi), hi]  # (T, m, S)
        score = np.where(ok, rng.random(ok.shape), -1.0)
        x[:, self._stage_cols("tp")] = np.where(used, np.argmax(score, axis=0), 0)
        for family in ("dp", "tmpc"):
            cols = self._stage_cols(family)
            x[:, cols] = np.where(used, rng.integers(0, self.radices[cols][None, :], size=(m, S)), 0)
        assert x.shape == (m, D)
        return x

    def start_points(self) -> dict[str, np.ndarray]:
        """"data_parallel": one stage, the smallest t every node offers, the largest d that fits in
        K devices, slot 0 (left out where no t is offered by every node)."""
        x = self.canonical_digits(1)
        whole = self._sums.avail[:, 0, len(self.graph.nodes)]
        if not whole.any():
            return {}
        ti = int(np.argmax(whole))
        fits = np.flatnonzero(self._ds * self._degrees[ti] <= self.graph.max_devices)
        x[0, self._index["tp.0"]] = ti
        x[0, self._index["dp.0"]] = int(fits[-1]) if fits.size else 0
        return {"data_parallel": x[0]} if self.valid(x)[0] else {}

    def to_json(self) -> dict:
        return {"kind": "piper", "max_stages": self.max_stages, "max_shift": self.max_shift}

    @classmethod
    def from_json(cls, d: dict, model, cluster) -> PiperSpace:
        return cls(model.graph, max_stages=int(d["max_stages"]), max_shift=int(d["max_shift"]))

    # ---- pricing -----------------------------------------------------------------------------
    def evaluate(self, table: PiperTable) -> Metrics:
        """Metrics of every row (module docstring), whole arrays over (N, stages)."""
        g, s = self.graph, self._sums
        pp, bounds, ti, d, slot, used = self._layout(table.digits)
        n = len(g.nodes)
        lo, hi = np.clip(bounds[:, :-1], 0, n), np.clip(bounds[:, 1:], 0, n)
        idx = (ti, slot, lo, np.maximum(hi, lo))
        x_s, p_s, w, a, b = s.x_s[idx], s.p_s[idx], s.w[idx], s.a[idx], s.b[idx]  # (N, S)
        resync_s = RESYNC_BYTES_PER_PARAM_BYTE * (d - 1) * w / (d * g.microbatches) / g.bandwidth_Bps
        time_s = np.where(used, x_s / d + resync_s, -np.inf)  # (N, S)
        suffix = np.cumsum(np.where(used, d, 0)[:, ::-1], axis=1)[:, ::-1]  # (N, S) sum of d, this stage on
        y = -(-suffix // d)
        mem = np.where(used, a * y + b, 0.0)  # (N, S) bytes per device
        slowest = np.argmax(time_s, axis=1)
        rows = np.arange(len(pp))
        worst = time_s[rows, slowest]
        fits = np.all(mem <= g.max_memory_bytes, axis=1)
        step = np.where(fits, worst, np.inf)
        with np.errstate(divide="ignore"):
            rate = np.where(fits, 1.0 / worst, 0.0)
        n_rows = len(pp)
        out = {k: np.zeros(n_rows) for k in METRIC_COLUMNS}
        dd = d[rows, slowest]
        out.update(step_time_s=step, tokens_per_s=rate, samples_per_s=rate, feasible=fits,
                   reason=np.where(fits, _OK, _OOM).astype(np.int8), mem_total_bytes=mem.max(axis=1, initial=0.0),
                   mem_device_bytes=np.full(n_rows, float(g.max_memory_bytes)),
                   compute_s=p_s[rows, slowest] / dd, pp_comm_s=(x_s - p_s)[rows, slowest] / dd,
                   dp_comm_s=resync_s[rows, slowest], microbatches=np.full(n_rows, g.microbatches, dtype=np.int64))
        return Metrics(out)

    def time_per_sample(self, digits) -> np.ndarray:
        """(N,) seconds per sample of valid digits (inf where memory does not fit)."""
        return self.evaluate(self.table(digits))["step_time_s"]


# --- the exact DP over a PiperSpace ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SpaceOptimum:
    time_per_sample_s: float  # inf where no point of the space fits
    digits: np.ndarray | None  # (D,) the optimum's digits, None where none fits
    thresholds_tried: int  # bisection steps (each one device-count DP over every pp)


def solve_space_dp(space: PiperSpace) -> SpaceOptimum:
    """The point of ``space`` with the lowest time per sample (ties: the first found), exactly."""
    stages = _StageTable.build(space)
    taus = stages.candidate_times()
    lo, hi, found = 0, taus.size, None
    tried = 0
    while lo < hi:
        mid = (lo + hi) // 2
        tried += 1
        plan = stages.plan_within(float(taus[mid]))
        if plan is not None:
            hi, found = mid, plan
        else:
            lo = mid + 1
    if found is None:
        return SpaceOptimum(math.inf, None, tried)
    time_s = float(space.time_per_sample(found[None, :])[0])
    return SpaceOptimum(time_s, found, tried)


@dataclasses.dataclass(frozen=True)
class _StageTable:
    """Every stage a point of the space can hold: (pp, J, start i, end j, t index, slot, d), with
    its time per sample and the largest y at which it fits (0: never)."""

    space: PiperSpace
    time_s: np.ndarray  # (T, 2, n+1, n+1, D) per start, end, t, slot, d
    ymax: np.ndarray  # (T, 2, n+1, n+1) largest y that fits in M

    @classmethod
    def build(cls, space: PiperSpace) -> _StageTable:
        g, s = space.graph, space._sums
        d = space._ds.astype(np.float64)
        resync_s = RESYNC_BYTES_PER_PARAM_BYTE * (d - 1) * s.w[..., None] / (d * g.microbatches) / g.bandwidth_Bps
        time_s = np.where(s.avail[:, None, :, :, None], s.x_s[..., None] / d + resync_s, np.inf)
        y_cap = int(g.max_devices)  # y = ceil(suffix / d) <= K
        ymax = largest_y(s.a, s.b, g.max_memory_bytes, y_cap)
        return cls(space, time_s, np.where(s.avail[:, None], ymax, 0))

    def windows(self, pp: int) -> list[np.ndarray]:
        """Possible first nodes of stages 0..pp (stage pp: the end, n)."""
        n, h = len(self.space.graph.nodes), self.space.max_shift
        out = [np.array([0])]
        for j in range(pp - 1):
            c = int(uniform_cut(n, pp, j))
            out.append(np.arange(max(c - h, 1), min(c + h, n - 1) + 1))
        out.append(np.array([n]))
        return out

    def candidate_times(self) -> np.ndarray:
        """Sorted distinct finite times of every stage some point can hold and that fits at y = 1."""
        times = []
        fits = self.ymax >= 1  # (T, 2, n+1, n+1)
        for pp in self.space.dims[0].choices:
            w = self.windows(pp)
            for j in range(pp):
                sub = self.time_s[:, :, w[j][:, None], w[j + 1][None, :]]  # (T, 2, Wi, Wj, D)
                ok = fits[:, :, w[j][:, None], w[j + 1][None, :]][..., None] & np.isfinite(sub)
                times.append(sub[ok])
        return np.unique(np.concatenate(times)) if times else np.zeros(0)

    def _stage_cost(self, tau: float, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """(Wi, Wj, D, K+1) fewest devices (t d) for a stage lo -> hi with data degree d at suffix
        sum s, its time <= tau and a ceil(s / d) + b <= M; _NO_DEVICES where none."""
        sp, k = self.space, self.space.graph.max_devices
        t_ok = self.time_s[:, :, lo[:, None], hi[None, :]] <= tau  # (T, 2, Wi, Wj, D)
        ymax = np.where(t_ok, self.ymax[:, :, lo[:, None], hi[None, :]][..., None], 0).max(axis=1)  # (T, Wi, Wj, D)
        s = np.arange(k + 1)
        ds = sp._ds
        fits = (s[None, None, None, None, :] <= ds[None, None, None, :, None] * ymax[..., None]) & (
            s >= ds[:, None])[None, None, None]  # (T, Wi, Wj, D, K+1)
        cost = (sp._degrees[:, None] * ds[None, :])[:, None, None, :, None]  # (T, 1, 1, D, 1)
        return np.where(fits, cost, _NO_DEVICES).min(axis=0)

    def plan_within(self, tau: float) -> np.ndarray | None:
        """Digits of a point whose every stage takes <= tau within K devices, None if none."""
        sp = self.space
        k, n_d = sp.graph.max_devices, sp._ds.size
        for pp in sp.dims[0].choices:
            w = self.windows(pp)
            f = [None] * (pp + 1)  # f[J]: (W_J, K+1) fewest devices for stages J.. at suffix sum s
            f[pp] = np.full((1, k + 1), _NO_DEVICES, dtype=np.int64)
            f[pp][0, 0] = 0
            costs = [None] * pp
            for j in range(pp - 1, -1, -1):
                cost = self._stage_cost(tau, w[j], w[j + 1])  # (Wi, Wj, D, K+1)
                later = np.full((len(w[j + 1]), n_d, k + 1), _NO_DEVICES, dtype=np.int64)  # f[J+1][., s - d]
                for di, d in enumerate(sp._ds):
                    later[:, di, d:] = f[j + 1][:, : k + 1 - d]
                costs[j] = (cost, later)
                valid_cut = w[j][:, None] < w[j + 1][None, :]  # (Wi, Wj)
                total = np.where(valid_cut[..., None, None], np.minimum(cost + later[None], _NO_DEVICES), _NO_DEVICES)
                f[j] = total.min(axis=(1, 2))
            if f[0][0].min() <= k:
                return self._digits(tau, pp, w, f, costs)
        return None

    def _digits(self, tau, pp, w, f, costs) -> np.ndarray:
        """Walk the tables forward from the first stage: the first (end, d) in order that
        achieves each table entry, then the cheapest t and the slot that gives it."""
        sp = self.space
        x = sp.canonical_digits(1)[0]
        x[0] = pp - 1
        s = int(np.argmin(f[0][0]))
        i_pos = 0
        n = len(sp.graph.nodes)
        for j in range(pp):
            cost, later = costs[j]
            valid_cut = w[j][:, None] < w[j + 1][None, :]
            total = np.where(valid_cut[..., None, None], cost + later[None], _NO_DEVICES)[i_pos, :, :, s]  # (Wj, D)
            end_pos, di = np.unravel_index(int(np.argmin(total)), total.shape)
            lo, hi, d = int(w[j][i_pos]), int(w[j + 1][end_pos]), int(sp._ds[di])
            t_dev = int(cost[i_pos, end_pos, di, s]) // d
            ti = int(np.flatnonzero(sp._degrees == t_dev)[0])
            y = -(-s // d)
            ok = (self.ymax[ti, :, lo, hi] >= y) & (self.time_s[ti, :, lo, hi, di] <= tau)  # (2,) slots
            assert ok.any(), "DP table entry without a stage behind it"
            slot = int(np.argmax(ok))
            x[sp._index[f"tp.{j}"]] = ti
            x[sp._index[f"dp.{j}"]] = di
            x[sp._index[f"tmpc.{j}"]] = slot
            if j < pp - 1:
                x[sp._index[f"{SHIFT}.{j}"]] = hi - int(uniform_cut(n, pp, j)) + sp._shift_zero
            i_pos, s = end_pos, s - d
        return x
