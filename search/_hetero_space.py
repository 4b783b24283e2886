"""HeteroSpace: stage placement on a heterogeneous cluster, a search.SearchSpace whose table()
is a costmodel.StrategyTable with placements, so the grid, MCMC and TPE searchers drive it as they drive a Space;
the driver evaluates it with costmodel.evaluate.

Dimensions, for S = max(pp) stage slots:
    pp                      number of pipeline stages
    pool.J, dp.J, tp.J      stage J's pool and degrees
    order.J                 stage J's rank order ("tp-inner" or "tp-across", see StrategyTable)
    pool2.J, dp2.J          (only where dp2 choices are given, on two or more pools) stage J
                            split across pools: dp2 of its dp replicas on pool2 (dp2 = 0: not
                            split; dp2 < dp), its gradient all-reduce over the inter-pool link
                            (HetPipe's virtual workers)
    stage_shift.J           (ordinal) boundary J moved by shift x ``shift_layers`` layers from
                            the uniform cut round(L (J + 1) / pp), J < S - 1
    microbatches, schedule, recompute, zero_stage, sequence_parallel   global choices
    framework               (only where several are given) the framework profile a row is priced under
    vpp                     (only where given other than 1) chunks per device, for "interleaved"
    ep                      (an MoE model) the expert-parallel degree, a row column folded into
                            every stage's tp x cp x dp ranks (StrategyTable; ep_invalid where it
                            does not divide a stage's); etp stays 1
Slots J >= pp are ignored (canonically digit 0).
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from costmodel import HeteroCluster, InputError, StrategyTable, Transformer, as_hetero
from costmodel._feasibility import feasibility
from costmodel._frameworks import DEFAULT_FRAMEWORK, framework_preset
from costmodel._strategy import FRAMEWORK, ORDERS, dimension_values
from search._base import SearchSpace
from search._placement_moves import SPLIT_MOVE_SHARE, placement_moves
from search._space import LEGACY_FRAMEWORK, divisors
from search._space import Dim as _SpaceDim


@dataclasses.dataclass(frozen=True, kw_only=True)
class Dim(_SpaceDim):
    """One placement dimension: search._space.Dim's fields, families (``base``: "pool", "dp",
    "tp", "order", "stage_shift" or the global name) and ``stage``, with per-stage names such as
    "pool.J" that a homogeneous Space does not know."""

    def __post_init__(self) -> None:
        if not isinstance(self.choices, tuple) or not self.choices:
            raise InputError(self.name, "a non-empty tuple of choices", self.choices)


# Schedules a HeteroSpace may use: one chunk per device, or Megatron's interleaved 1F1B with
# vpp chunks per device (the stages' layers as the framework's chunk rule wants: costmodel._feasibility).
HETERO_SCHEDULES = ("gpipe", "1f1b", "zb-h1", "zb-h2", "interleaved")
GLOBAL_DIMS = ("microbatches", "schedule", "recompute", "zero_stage", "sequence_parallel", "vpp", "ep", FRAMEWORK)


@dataclasses.dataclass(frozen=True, kw_only=True)
class HeteroSpace(SearchSpace):
    """The SearchSpace of stage placements on a costmodel.HeteroCluster (module docstring)."""

    model: Transformer
    cluster: HeteroCluster
    fixed: dict
    dims: tuple[Dim, ...]
    shift_layers: int = 1
    framework: str | None = DEFAULT_FRAMEWORK  # the costmodel._frameworks profile of every row; None: a dimension

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def from_options(cls, model: Transformer, cluster, *, global_batch: int, pp=(2, 4, 8),
                     dp=(1, 2, 4, 8, 16, 32), tp=(1, 2, 4, 8), order=ORDERS, max_shift: int | None = None,
                     shift_layers: int = 1, microbatches=(8, 16, 32, 64, 128), schedule=("1f1b",),
                     recompute=("none", "selective", "full"), zero_stage=(0, 1),
                     sequence_parallel=(True,), dp2=(0,), vpp=(1,), ep=None,
                     framework=None) -> HeteroSpace:
        """``dp2``: replicas a stage may put on a second pool, holding 0 (no split); default (0,):
        no split dims; None: 0 and every dp choice below the largest. Ignored on one pool.
        ``ep``: expert-parallel degrees; None: an MoE model's divisors of its experts up to the
        largest pool's GPUs (an ep group lives inside one stage on one pool), (1,) for a dense one.
        An MoE model's stages are not split (dp2 choices refused: costmodel.evaluate does not price
        expert groups across pools). ``framework``: a profile's name, or a list of them (a framework dimension
        where they are several); None: DEFAULT_FRAMEWORK."""
        hc = as_hetero(cluster)
        if ep is None:
            ep = tuple(divisors(model.experts, max(p.num_gpus for p in hc.pools))) if model.is_moe else (1,)
        if not ep or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in ep):
            raise InputError("ep", "a non-empty list of integers >= 1", list(ep))
        if not model.is_moe and tuple(ep) != (1,):
            raise InputError("ep", "1 for a dense model (experts=1)", list(ep))
        if isinstance(global_batch, bool) or not isinstance(global_batch, int) or global_batch < 1:
            raise InputError("global_batch", "an integer >= 1", global_batch)
        if dp2 is None:
            dp2 = (0, *(x for x in sorted(dp) if x < max(dp)))
        if len(hc.pools) == 1:
            dp2 = (0,)
        if not dp2 or 0 not in dp2 or any(isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in dp2):
            raise InputError("dp2", "a list of integers >= 0 holding 0 (no split)", list(dp2))
        if model.is_moe and tuple(dp2) != (0,):
            raise InputError("dp2", "0 for an MoE model (stages split across pools are not priced with experts)",
                             list(dp2))
        for name, vals in (("pp", pp), ("dp", dp), ("tp", tp), ("microbatches", microbatches), ("vpp", vpp),
                           ("recompute", recompute), ("zero_stage", zero_stage), ("sequence_parallel", sequence_parallel)):
            if not len(vals):
                raise InputError(name, "a non-empty list of choices", list(vals))
            dimension_values(name, vals)  # the one table of each dimension's values (DIMENSION_VALUES)
        if max(pp) > model.layers:
            raise InputError("pp", f"at most layers={model.layers}", max(pp))
        for name, vals, allowed in (("schedule", schedule, HETERO_SCHEDULES), ("order", order, ORDERS)):
            for v in vals:
                if v not in allowed:
                    raise InputError(name, "among " + ", ".join(allowed), v)
        S = max(pp)
        if max_shift is None:  # a boundary may move one uniform stage of the shallowest pipeline
            max_shift = max(1, model.layers // (min(pp) * shift_layers))
        pools = tuple(p.name for p in hc.pools)
        dims: list[Dim] = [Dim(name="pp", choices=tuple(sorted(pp)), ordinal=True)]
        for j in range(S):
            dims += [Dim(name=f"pool.{j}", choices=pools), Dim(name=f"dp.{j}", choices=tuple(sorted(dp)), ordinal=True),
                     Dim(name=f"tp.{j}", choices=tuple(sorted(tp)), ordinal=True),
                     Dim(name=f"order.{j}", choices=tuple(order))]
            if len(dp2) > 1:
                dims += [Dim(name=f"pool2.{j}", choices=pools),
                         Dim(name=f"dp2.{j}", choices=tuple(sorted(dp2)), ordinal=True)]
        for j in range(S - 1):
            dims.append(Dim(name=f"stage_shift.{j}", choices=tuple(range(-max_shift, max_shift + 1)), ordinal=True))
        dims += [Dim(name="microbatches", choices=tuple(sorted(microbatches)), ordinal=True),
                 Dim(name="schedule", choices=tuple(schedule)), Dim(name="recompute", choices=tuple(recompute)),
                 Dim(name="zero_stage", choices=tuple(zero_stage)),
                 Dim(name="sequence_parallel", choices=tuple(bool(x) for x in sequence_parallel))]
        if tuple(vpp) != (1,):
            dims.append(Dim(name="vpp", choices=tuple(sorted(vpp)), ordinal=True))
        if tuple(ep) != (1,):
            dims.append(Dim(name="ep", choices=tuple(sorted(ep)), ordinal=True))
        many = [DEFAULT_FRAMEWORK] if framework is None else framework if isinstance(framework, (list, tuple)) else [
            framework]
        names = tuple(dict.fromkeys(framework_preset(x, FRAMEWORK).name for x in many))
        if not names:
            raise InputError(FRAMEWORK, "at least one framework", list(many))
        if len(names) > 1:
            dims.append(Dim(name=FRAMEWORK, choices=names))
        return cls(model=model, cluster=hc, fixed={"global_batch": global_batch}, dims=tuple(dims),
                   shift_layers=shift_layers, framework=names[0] if len(names) == 1 else None)

    @property
    def frameworks(self) -> tuple[str, ...]:
        """The framework profiles of the space's rows (one, or the choices of its framework dimension)."""
        return (self.framework,) if self.framework is not None else self.dims[self._col(FRAMEWORK)].choices

    # ---- mixed radix --------------------------------------------------------------------
    @property
    def num_slots(self) -> int:
        return max(self.dims[0].choices)

    @property
    def global_dims(self) -> tuple[str, ...]:
        """The global dimensions this space has (vpp only where it was given)."""
        names = {d.name for d in self.dims}
        return tuple(n for n in GLOBAL_DIMS if n in names)

    @property
    def stage_bound(self) -> tuple[str, ...]:
        """ep: valid where it divides every stage's tp x cp x dp (StrategyTable), so it depends on
        the stages' degrees."""
        return ("ep",) if any(d.name == "ep" for d in self.dims) else ()

    @functools.cached_property
    def _index(self) -> dict[str, int]:
        """Dimension name -> its column (built once: MCMC's draws look columns up by name often)."""
        return {d.name: i for i, d in enumerate(self.dims)}

    def _col(self, name: str) -> int:
        return self._index[name]

    @property
    def has_split(self) -> bool:
        """Whether stages may split their replicas across two pools (dims pool2.J, dp2.J)."""
        return "dp2.0" in self._index

    # ---- digits -> table ------------------------------------------------------------------
    def _values(self, digits, name: str) -> np.ndarray:
        k = self._col(name)
        return np.asarray(self.dims[k].choices, dtype=object if name == "schedule" or name == "recompute"
                          else None)[digits[:, k]]

    def _layers(self, digits, p) -> np.ndarray:
        """(N, S) layers per stage from pp and the boundary shifts."""
        L, S = self.model.layers, self.num_slots
        n = digits.shape[0]
        j = np.arange(S - 1)[:, None]  # (stage-major, handed back as an (N, S) view)
        base = np.rint(L * (j + 1) / p[None, :]).astype(np.int64)
        cols = [self._col(f"stage_shift.{i}") for i in range(S - 1)]
        shifts = (np.stack([np.take(np.asarray(self.dims[k].choices), digits[:, k]) for k in cols]) if S > 1
                  else np.zeros((0, n), dtype=np.int64))
        cuts = np.where(j < (p - 1)[None, :], base + shifts * self.shift_layers, L)
        edges = np.concatenate([np.zeros((1, n), dtype=np.int64), cuts, np.full((1, n), L)])
        layers = np.diff(edges, axis=0)  # (S, N); zero past pp, negative where cuts cross
        return np.where(np.arange(S)[:, None] < p[None, :], layers, 0).T

    def table(self, digits) -> StrategyTable:
        digits = np.atleast_2d(np.asarray(digits, dtype=np.int64))
        S, by_dim = self.num_slots, np.ascontiguousarray(digits.T)  # (a digit column at a time)
        p = np.asarray(self.dims[0].choices)[digits[:, 0]]
        active = np.arange(S)[:, None] < p[None, :]
        per = {}  # stage-major (S, N), handed over as (N, S) views: the table stores them stage-major
        for k in ("pool", "dp", "tp", "order") + (("pool2", "dp2") if self.has_split else ()):
            cols = []
            for j in range(S):
                c = self._col(f"{k}.{j}")
                ch = self.dims[c].choices
                cols.append(by_dim[c] if k in ("pool", "pool2") else np.take(
                    np.array([ORDERS.index(o) for o in ch]) if k == "order" else np.asarray(ch), by_dim[c]))
            per[k] = np.where(active, np.stack(cols), 0 if k in ("pool", "order", "pool2", "dp2") else 1).T
        if self.has_split:  # dp2 >= dp is not a strategy (valid() rejects it): no split in its table row
            per["dp2"] = np.where((per["dp2"] < per["dp"]) & (per["pool2"] != per["pool"]), per["dp2"], 0)
            per["pool2"] = np.where(per["dp2"] > 0, per["pool2"], per["pool"])  # one row per strategy
        layers = self._layers(digits, p)
        glob = {name: self._values(digits, name) for name in self.global_dims}
        for name in ("schedule", "recompute"):  # readable choices -> the table's codes
            glob[name] = dimension_values(name, self.dims[self._col(name)].choices)[digits[:, self._col(name)]]
        glob["sequence_parallel"] = glob["sequence_parallel"].astype(bool)
        glob[FRAMEWORK] = glob[FRAMEWORK].astype(str) if FRAMEWORK in glob else self.framework  # (names: encoded once)
        return StrategyTable.from_columns(stage_layers=np.maximum(layers, 0), pp=p, global_batch=self.fixed["global_batch"],
                                          **{f"stage_{k}": v for k, v in per.items()}, **glob)

    def valid(self, digits) -> np.ndarray:
        """The space's constraints (everything but memory): stages of >= 1 layer, pools not
        over-subscribed, batch divisible, tp dividing the heads, schedule and ZeRO rules."""
        digits = np.atleast_2d(np.asarray(digits, dtype=np.int64))
        p = np.asarray(self.dims[0].choices)[digits[:, 0]]
        layers = self._layers(digits, p)
        ok_layers = np.all((layers >= 1) | (np.arange(self.num_slots)[None, :] >= p[:, None]), axis=1)
        reason = feasibility(self.model, self.cluster, self.table(digits))  # (each row under its framework)
        ok = ok_layers & (reason == 0)
        if self.has_split:  # a split keeps at least one replica on the stage's own pool
            S = self.num_slots
            dp, d2 = (np.stack([self._values(digits, f"{k}.{j}") for j in range(S)], axis=1) for k in ("dp", "dp2"))
            ok &= np.all((d2 < dp) | (np.arange(S)[None, :] >= p[:, None]), axis=1)
        return ok

    def valid_indices(self, start: int, stop: int) -> np.ndarray:
        """Valid grid indices in [start, stop) whose unused stage slots (J >= pp; boundary
        shifts J >= pp - 1) hold their canonical digit, so that a grid lists each placement
        once. valid() itself does not ask this: MCMC's moves may leave other digits there."""
        idx = np.arange(max(int(start), 0), min(int(stop), self.size), dtype=np.int64)
        digits = self.digits_of(idx)
        p = np.asarray(self.dims[0].choices)[digits[:, 0]]
        canon = self.canonical_digits(1)[0]
        used_up_to = np.array([d.stage + (1 if d.base == "stage_shift" else 0) if d.stage >= 0 else -1
                               for d in self.dims])  # a slot's dimension is unused where it reaches pp
        unused = (used_up_to[None, :] >= p[:, None]) & (used_up_to[None, :] >= 0)
        canonical = np.all(~unused | (digits == canon[None, :]), axis=1)
        return idx[canonical & self.valid(digits)]

    # ---- sampling ------------------------------------------------------------
    def random_digits(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """n valid digit rows: uniform draws, then random walks from the start points for
        whatever rejection did not fill (placements that fit are a small part of the grid)."""
        found: list[np.ndarray] = []
        have = 0
        for _ in range(20):
            d = rng.integers(0, self.radices, size=(max(4 * n, 1024), len(self.dims)))
            if self.has_split:  # most stages unsplit: a split stage is drawn at SPLIT_MOVE_SHARE
                dp2 = np.array([d_.base == "dp2" for d_ in self.dims])
                d[:, dp2] *= rng.random((len(d), int(dp2.sum()))) < SPLIT_MOVE_SHARE
            d = d[self.valid(d)]
            found.append(d)
            have += len(d)
            if have >= n:
                break
        if have < n:
            move = placement_moves(self)  # a random walk of MCMC's moves
            starts = np.stack(list(self.start_points().values()) or [np.full(len(self.dims), -1)])
            cur = starts[rng.integers(0, len(starts), max(n, 256))]
            for _ in range(200 if starts.min() >= 0 else 0):  # no start point: no walk
                prop = move(cur, rng)
                ok = self.valid(prop)
                cur = np.where(ok[:, None], prop, cur)
                if _ >= 20:
                    found.append(cur[ok])
                    have += int(ok.sum())
                if have >= n:
                    break
        out = np.concatenate(found)[:n] if found else np.zeros((0, len(self.dims)), dtype=np.int64)
        if len(out) < n:
            raise InputError("space", f"at least {n} valid placements", len(out))
        return out

    def _digit(self, name: str, value) -> int:
        return self.dims[self._col(name)].choices.index(value)

    def start_points(self) -> dict[str, np.ndarray]:
        """Named valid digits: "megatron" (tp 8 inside nodes, stages spread over the pools in
        proportion to their GPUs, uniform layers, the most data parallelism that fits) and
        "speed_weighted" (stages at each tp that fits in a node, any number of them per pool, the most data
        parallelism that fits, layers in proportion to each stage's GPUs x peak FLOP/s, in pool order, or the
        pools put in one of the BALANCED_ORDERS orders whose cuts balance the stages best: each stage's
        layers, the last one's LM head too, over its speed, within the boundary shifts the space allows;
        balanced_placement). Over pp, those layouts, micro-batches, recompute and ZeRO choices, the one with
        the highest throughput (costmodel.evaluate, closed forms), else the least memory."""
        from costmodel import evaluate

        out = {}
        for name, weighted in (("megatron", False), ("speed_weighted", True)):
            cands = [d for pp in self.dims[0].choices for d in self._start(pp, weighted)]
            if not cands:
                continue
            base = np.stack(cands)
            variants = [base]
            for dim in ("microbatches", "recompute", "zero_stage") + (("ep",) if "ep" in self.global_dims else ()):
                c = self._col(dim)
                grown = []
                for v in variants:
                    for k in range(self.radices[c]):
                        w = v.copy()
                        w[:, c] = k
                        grown.append(w)
                variants = grown
            allc = np.concatenate(variants)
            allc = allc[self.valid(allc)]
            if not len(allc):
                continue
            met = evaluate(self.model, self.cluster, self.table(allc))
            score = np.where(met["feasible"], met["tokens_per_s"], -met["mem_total_bytes"] / 1e18)
            out[name] = allc[int(np.argmax(score))]
        return out

    def _start(self, pp: int, weighted: bool) -> list[np.ndarray]:
        """A recipe's digits at ``pp`` stages (start_points): [] where it does not apply. megatron: one row, the
        stages over the pools in proportion to their GPUs, uniform layers. speed_weighted: for that spread and every
        other number of stages per pool (stage_shares), the pools in order with layers in proportion to the stages'
        speed, then the orders of the pools whose balanced cuts leave the slowest stage fastest (balanced_placement,
        BALANCED_ORDERS of them), for start_points to price; with each tp that fits in a node (the node's first)."""
        P = len(self.cluster.pools)
        tp_ch = self.dims[self._col("tp.0")].choices
        tps = [x for x in tp_ch if self.model.heads % x == 0 and self.model.kv_heads % x == 0]
        if not tps:
            return []
        tp = min(max(tps), min(p.gpus_per_node for p in self.cluster.pools))
        tp = max(x for x in tps if x <= tp) if any(x <= tp for x in tps) else min(tps)
        gpus = np.array([p.num_gpus for p in self.cluster.pools], dtype=float)
        share = np.floor(pp * gpus / gpus.sum()).astype(int)  # stages over the pools in proportion to their GPUs
        while share.sum() < pp:
            share[np.argmax(pp * gpus / gpus.sum() - share)] += 1
        if not weighted:
            d = self._placed(pp, share, tp)
            return [] if d is None else [d]
        out = []
        node = min(p.gpus_per_node for p in self.cluster.pools)
        for t in [tp] + [x for x in tps if x != tp and x <= node]:  # the node's tp first, then the others inside one
            for sh in [share] + [np.array(x) for x in stage_shares(pp, P) if tuple(x) != tuple(share)]:
                d = self._placed(pp, sh, t)
                if d is not None:
                    out += [d] if pp == 1 else self._weighted(d, pp, np.repeat(np.arange(P), sh))
        return out

    def _placed(self, pp: int, share, tp: int) -> np.ndarray | None:
        """Digits of ``pp`` stages, share[k] of them on pool k in pool order, tp ``tp``, the largest dp a pool's
        GPUs hold for its stages, uniform layers; None where a pool's stages cannot get a dp."""
        S = self.num_slots
        d = np.zeros(len(self.dims), dtype=np.int64)
        d[0] = self._digit("pp", pp)
        tp_ch, dp_ch = self.dims[self._col("tp.0")].choices, self.dims[self._col("dp.0")].choices
        pools = np.repeat(np.arange(len(share)), share)
        for j in range(S):
            pj = int(pools[j]) if j < pp else 0
            cap = self.cluster.pools[pj].num_gpus // max(int(share[pj]), 1)
            dps = [x for x in dp_ch if x * tp <= cap] if j < pp else [dp_ch[0]]
            if not dps:
                return None
            d[self._col(f"pool.{j}")] = pj
            d[self._col(f"tp.{j}")] = tp_ch.index(tp) if j < pp else 0
            d[self._col(f"dp.{j}")] = dp_ch.index(max(dps))
        for j in range(S - 1):
            d[self._col(f"stage_shift.{j}")] = self.dims[self._col(f"stage_shift.{j}")].choices.index(0)
        return d

    def _weighted(self, d: np.ndarray, pp: int, pools: np.ndarray) -> list[np.ndarray]:
        """``d`` (pools in order) with layers in proportion to each stage's GPUs x peak FLOP/s, then the
        BALANCED_ORDERS orders of its pools that balance best, each with its balanced cuts."""
        P = len(self.cluster.pools)
        dp_ch = self.dims[self._col("dp.0")].choices
        shift_ch = [self.dims[self._col(f"stage_shift.{j}")].choices for j in range(pp - 1)]
        dps = np.array([dp_ch[d[self._col(f"dp.{j}")]] for j in range(pp)])
        speed = np.array([self.cluster.pools[int(pools[j])].gpu.peak_flops[0] * dps[j] for j in range(pp)])
        cuts = np.rint(self.model.layers * np.cumsum(speed)[:-1] / speed.sum())
        base = np.rint(self.model.layers * np.arange(1, pp) / pp)
        shift = np.rint((cuts - base) / self.shift_layers).astype(int)
        d = d.copy()
        for j in range(pp - 1):
            d[self._col(f"stage_shift.{j}")] = shift_ch[j].index(int(np.clip(shift[j], shift_ch[j][0],
                                                                              shift_ch[j][-1])))
        out = [d]
        on_pool = {int(k): speed[j] for j, k in enumerate(pools)}  # a stage's speed on pool k
        per_pool = np.array([on_pool.get(k, 1.0) for k in range(P)])
        for order, cut_shifts in balanced_placement(pools, per_pool, self.model.layers, head_layers(self.model),
                                                    shift_ch, self.shift_layers, best=BALANCED_ORDERS):
            e = d.copy()
            for j in range(pp):  # a stage's dp and tp follow its pool (every stage on a pool has the same)
                src = int(np.flatnonzero(pools == order[j])[0])
                for fam in ("pool", "dp", "tp"):
                    e[self._col(f"{fam}.{j}")] = d[self._col(f"{fam}.{src}")]
            for j in range(pp - 1):
                e[self._col(f"stage_shift.{j}")] = shift_ch[j].index(int(cut_shifts[j]))
            out.append(e)
        return out

    # ---- persistence --------------------------------------------------------------------
    def to_json(self) -> dict:
        from costmodel import hetero_to_mapping

        return {"kind": "hetero", "fixed": dict(self.fixed), "shift_layers": self.shift_layers,
                "dims": [{"name": d.name, "choices": list(d.choices), "ordinal": d.ordinal} for d in self.dims],
                "cluster": hetero_to_mapping(self.cluster),
                **({} if self.framework is None else {"framework": self.framework})}  # (always: a dimension or here)

    @classmethod
    def from_json(cls, d: dict, model: Transformer, cluster) -> HeteroSpace:
        dims = tuple(Dim(name=x["name"], choices=tuple(framework_preset(c, FRAMEWORK).name for c in x["choices"])
                         if x["name"] == FRAMEWORK else tuple(x["choices"]), ordinal=x["ordinal"]) for x in d["dims"])
        several = any(x.name == FRAMEWORK for x in dims)
        return cls(model=model, cluster=as_hetero(cluster), fixed=dict(d["fixed"]), dims=dims,
                   shift_layers=int(d.get("shift_layers", 1)),
                   framework=None if several else framework_preset(d.get("framework", LEGACY_FRAMEWORK)).name)


# Distinct orders of the pools over the stages that balanced_placement compares (screened in one vectorised pass); past
# this many it compares the given order, its reverse and the pools taken in turn.
MAX_ARRANGEMENTS = 5000
# Numbers of stages per pool the speed_weighted recipe tries beside the spread in proportion to the pools' GPUs: every
# one where there are at most this many (a plan that leaves GPUs idle may put every stage on the fastest pool).
MAX_SHARES = 64
# Orders of the pools the speed_weighted recipe tries beside the pool order (the best balanced ones): balance by
# FLOP/s alone knows neither memory nor the hand-offs between pools, so start_points prices them.
BALANCED_ORDERS = 3


def head_layers(model) -> float:
    """The LM head's forward FLOPs a token in layers' (Transformer.head_fwd_flops_per_token over a layer's, the MoE
    layer's where every layer is MoE): the load the last stage carries beyond its layers; 0 for an MLP."""
    if not isinstance(model, Transformer):
        return 0.0
    moe = model.moe_layers == model.layers
    layer = model.moe_layer_fwd_flops_per_token() if moe else model.layer_fwd_flops_per_token()
    return model.head_fwd_flops_per_token() / layer


def balanced_cuts(speed, layers: int, head: float, shifts, shift_layers: int):
    """The boundary shifts (one per boundary, each among ``shifts[j]``) that minimise the slowest stage's load over its
    speed: stage j's load its layers (the last stage's plus ``head``), over ``speed[j]``; every stage at least one
    layer. A DP over the boundaries (each cut round(L (j + 1) / p) + shift x shift_layers), one array operation a
    boundary. Returns (shifts, the slowest stage's load / speed); (None, inf) where no cuts give every stage a layer."""
    p = len(speed)
    prev, worst, back = np.zeros(1), np.zeros(1), []
    for j in range(p - 1):
        s = np.asarray(shifts[j], dtype=np.float64)
        cut = np.rint(layers * (j + 1) / p) + s * shift_layers
        width = cut[:, None] - prev[None, :]
        w = np.where(width >= 1, np.maximum(worst[None, :], width / speed[j]), np.inf)
        k = np.argmin(w, axis=1)
        back.append(k)
        prev, worst = cut, w[np.arange(len(cut)), k]
    last = layers - prev
    total = np.where(last >= 1, np.maximum(worst, (last + head) / speed[-1]), np.inf)
    i = int(np.argmin(total))
    slowest = float(total[i])
    if not np.isfinite(slowest):
        return None, np.inf
    path = []
    for j in range(p - 2, -1, -1):  # back from the last cut
        path.append(shifts[j][i])
        i = int(back[j][i])
    return tuple(path[::-1]), slowest


def balanced_placement(pools, speed, layers: int, head: float, shifts, shift_layers: int, best: int = 1):
    """The ``best`` distinct orders of ``pools`` (a stage's pool each) whose balanced_cuts leave the slowest stage
    fastest, fastest first (ties in lexicographic order of the pools): [(order, shifts), ...], without the orders no
    cuts fit. ``speed``: per pool, a stage's GPUs x peak FLOP/s there. The orders: every distinct one where there are
    at most MAX_ARRANGEMENTS, else the pool order, its reverse and the pools taken in turn; screened by cutting each
    in proportion to its stages' speeds (rounded, clipped to ``shifts``), the 2 x ``best`` most balanced cut exactly."""
    import math

    pools = np.asarray(pools)
    counts = np.bincount(pools)
    n = math.factorial(len(pools)) // math.prod(math.factorial(int(c)) for c in counts)
    if n <= MAX_ARRANGEMENTS:
        orders = np.array(list(_arrangements(counts.tolist())), dtype=np.int64)
    else:
        rank = np.array([int((pools[:j] == pools[j]).sum()) for j in range(len(pools))])  # j's place on its pool
        turns = np.lexsort((pools, rank))  # the pools taken in turn: each pool's first stage, then its second, ...
        orders = np.unique(np.stack([pools, pools[::-1], pools[turns]]), axis=0)
    p = len(pools)
    sp = np.asarray(speed, dtype=np.float64)[orders]  # (n, p)
    lo = np.array([min(c) for c in shifts]) if p > 1 else np.zeros(0)
    hi = np.array([max(c) for c in shifts]) if p > 1 else np.zeros(0)
    base = np.rint(layers * np.arange(1, p) / p)
    ideal = (layers + head) * np.cumsum(sp, axis=1)[:, :-1] / sp.sum(axis=1, keepdims=True)
    cuts = base + np.clip(np.rint((ideal - base) / shift_layers), lo, hi) * shift_layers
    edges = np.concatenate([np.zeros((len(orders), 1)), cuts, np.full((len(orders), 1), layers)], axis=1)
    load = np.diff(edges, axis=1)
    load[:, -1] += head
    proxy = np.where((np.diff(edges, axis=1) >= 1).all(axis=1), (load / sp).max(axis=1), np.inf)
    screened = np.argsort(proxy, kind="stable")[: 2 * best]
    scored = [(balanced_cuts(sp[k], layers, head, shifts, shift_layers), k) for k in screened]
    scored = sorted(((w, k, c) for (c, w), k in scored if c is not None), key=lambda x: (x[0], x[1]))[:best]
    return [(orders[k], np.asarray(c)) for _, k, c in scored]


def stage_shares(pp: int, pools: int) -> list[tuple[int, ...]]:
    """The ways to put ``pp`` stages on ``pools`` pools, stages per pool (compositions of pp, some 0), most on the
    first pool first; [] where there are more than MAX_SHARES."""
    import math

    if math.comb(pp + pools - 1, pools - 1) > MAX_SHARES:
        return []

    def parts(n: int, k: int):
        if k == 1:
            yield (n,)
            return
        for first in range(n, -1, -1):
            for rest in parts(n - first, k - 1):
                yield (first, *rest)

    return list(parts(pp, pools))


def _arrangements(counts: list[int], prefix: tuple = ()):
    """The distinct sequences holding ``counts[k]`` of each k, in lexicographic order."""
    if not any(counts):
        yield prefix
        return
    for k, c in enumerate(counts):
        if c:
            counts[k] -= 1
            yield from _arrangements(counts, (*prefix, k))
            counts[k] += 1
