"""A strategy space as a mixed-radix number: row i of the grid is the digits of i.

A :class:`Space` holds dimensions (:class:`Dim`), each a tuple of readable choices; digit k of
a dimension means ``choices[k]``. The grid index of digits (d_0, ..., d_{D-1}) is
``sum_k d_k * stride_k`` with the last dimension varying fastest (C order, as
``np.ravel_multi_index``), so a shard of the grid is a range of integers and enumerating a range
is ``divmod`` over an ``arange``.

Constraints (``Space.valid``) are the structural ones, everything but memory:
    * degrees multiply to the GPU count (``all_gpus=True``, default) or at most it; without a
      ``dp`` dimension dp is derived as GPUs / (tp * pp * cp) and must be whole;
    * tp divides heads and kv_heads (an MLP: its hidden size); cp: 2 cp divides the sequence;
    * pp divides layers, unless the space has per-stage dimensions (then stage sizes >= 1 that
      sum to the layers, computed from the boundary shifts);
    * micro-batch size divides the per-replica batch (or, with a ``microbatches`` dimension, the
      count m divides it: micro_batch = global_batch / (dp * m));
    * schedule limits as costmodel's feasibility(): interleaved needs vpp >= 2, pp >= 2 and vpp
      dividing every stage's layers; ZB-V vpp = 2; Hanayo even vpp; the others vpp = 1;
    * sequence parallelism only with tp > 1; ZeRO 2/3 only with pp = 1;
    * at pp = 1, ZB-H1 and ZB-H2 only where 1F1B is not a choice (one stage runs, prices and
      holds them exactly as 1F1B: the same strategy under three names);
    * per-stage digits past the row's pp hold their canonical digit (zero shift, the first
      recompute choice), so that each strategy has exactly one index.
The checks reuse ``costmodel._feasibility.feasibility`` (all its reasons but out-of-memory) and add
the ones it does not make.

Per-stage dimensions (the uneven-partition space):
    ``stage_shift.J`` (J = 0 .. maxpp - 2): boundary J (between stage J and J + 1) sits at
        round((J + 1) * L / pp) + shift layers; choices are integer offsets (ordinal).
    ``stage_recompute.J`` (J = 0 .. maxpp - 1): the recompute choice of stage J.

Speed: when the dimensions that take part in a constraint (all but recompute, precision and
overlap_dp, which come last in the digit order) span at most ``LOOKUP_MAX_ENTRIES`` combinations,
their validity is computed once into a lookup table; ``rows(start, stop)`` then expands the valid
entries of that table into grid indices without touching an invalid candidate.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np

from costmodel import Cluster, InputError, StrategyTable, Transformer
from costmodel._feasibility import REASON, feasibility
from costmodel._frameworks import DEFAULT_FRAMEWORK, framework_preset
from costmodel._strategy import (
    CODE_COLUMNS,
    COLUMNS,
    DEFAULT_GLOBAL_BATCH,
    DEFAULTS,
    FRAMEWORK,
    FRAMEWORK_NAMES,
    INT_COLUMNS,
    RECOMPUTE,
    SCHEDULES,
)
from costmodel._strategy import dimension_values as _numeric  # readable choices -> the table's numbers
from search._base import SearchSpace, check_int

# Dimensions no structural constraint reads; they come last in the digit order so that the
# constrained ones form the high-order block of the index (one lookup per block).
FREE_DIMS = ("recompute", "precision", "overlap_dp")
# Digit order of the named dimensions (stage dimensions go between zero_stage and recompute).
DIM_ORDER = ("framework", "dp", "tp", "pp", "light_ends", "cp", "ep", "etp", "micro_batch", "microbatches", "schedule", "vpp",
             "sequence_parallel", "zero_stage")
# Space-only dimensions (not StrategyTable columns): the micro-batch count m (micro_batch = B /
# (dp m)) and the layers the first and last pipeline stages give up (balanced_stages).
LIGHT_ENDS = "light_ends"
SHIFT = "stage_shift"
STAGE_RECOMPUTE = "stage_recompute"
DIM_NAMES = set(COLUMNS) - {"global_batch"} | {"microbatches", LIGHT_ENDS, FRAMEWORK}
# The framework of a space written before spaces recorded theirs (run.json's of cost model version 3 and
# earlier): every such space was priced under generic, then the only profile a command named by default.
LEGACY_FRAMEWORK = "generic"
# Per framework code (FRAMEWORK_NAMES): does the profile split a stage's chunks unevenly (Framework.uneven_chunks)?
UNEVEN_CHUNKS = np.array([framework_preset(name).uneven_chunks for name in FRAMEWORK_NAMES])
# Largest lookup table of the constrained block (bools): 2**22 entries = 4 MiB, built in about
# a second (Space.valid_direct at ~5M candidates/s, BENCHMARKS.md "Grid enumeration").
LOOKUP_MAX_ENTRIES = 1 << 22
# Rows per chunk when a space's whole core is scanned (start points, lookup tables).
SCAN_CHUNK = 1 << 20


class DimName:
    """The naming rule a space's dimensions share: ``FAMILY`` or ``FAMILY.J`` for stage J (a mixin of Dim and
    search._piper_space.PiperDim, whose ``name`` fields carry it)."""

    name: str

    @property
    def base(self) -> str:
        """The column or per-stage family: "tp", "stage_shift", ..."""
        return self.name.split(".")[0]

    @property
    def stage(self) -> int:
        """J of a per-stage dimension (-1 otherwise)."""
        return int(self.name.split(".")[1]) if "." in self.name else -1


@dataclasses.dataclass(frozen=True, kw_only=True)
class Dim(DimName):
    """One dimension: a StrategyTable column (or "microbatches", or a per-stage dimension
    "stage_shift.J" / "stage_recompute.J") and its readable choices, in digit order."""

    name: str
    choices: tuple
    ordinal: bool = False

    def __post_init__(self) -> None:
        base = self.name.split(".")[0]
        if base in (SHIFT, STAGE_RECOMPUTE):
            if not self.name[len(base) + 1:].isdigit():
                raise InputError("dim", f"{base}.J with J a stage index", self.name)
        elif self.name not in DIM_NAMES:
            raise InputError("dim", "a name among " + ", ".join(sorted(DIM_NAMES)), self.name)
        if not isinstance(self.choices, tuple) or not self.choices:
            raise InputError(self.name, "a non-empty tuple of choices", self.choices)
        if len(set(self.choices)) != len(self.choices):
            raise InputError(self.name, "distinct choices", list(self.choices))


def _readable(name: str, value):
    """A readable value in canonical Python form (str lower-case, bool, int)."""
    base = name.split(".")[0]
    if base == FRAMEWORK:
        return framework_preset(value, FRAMEWORK).name
    if base in CODE_COLUMNS or base == STAGE_RECOMPUTE:
        return str(value).lower()
    if base in ("sequence_parallel", "overlap_dp"):
        return bool(_numeric(name, (value,))[0])
    if isinstance(value, (np.integer,)):
        return int(value)
    return value


def _order_key(dim: Dim) -> tuple:
    if dim.base in DIM_ORDER:
        return (0, DIM_ORDER.index(dim.base), 0)
    if dim.base == SHIFT:
        return (1, 0, dim.stage)
    if dim.base == STAGE_RECOMPUTE:
        return (1, 1, dim.stage)
    return (2, FREE_DIMS.index(dim.base), 0)


def balanced_stages(layers: int, pp, light, width: int | None = None) -> np.ndarray:
    """(N, W) layers per pipeline stage (zero past pp; W = ``width`` or the largest pp) of the
    balanced split with the first and the last stage ``light`` layers lighter, the layout of
    Megatron-Core's uneven pipelines (--decoder-first/last-pipeline-num-layers) and of Llama 3
    405B's 16 stages (the embedding and the output head make the end stages heavier per layer):
    L + 2e layers split as evenly as possible over pp stages, the q + 1-layer stages (r of them,
    q, r = divmod(L + 2e, pp)) taken from the last interior stage backwards, then the last and the
    first stage, and e taken off the first and the last. pp dividing L and e = 0 gives L / pp
    everywhere; L = 126, pp = 16, e = 0: 7, 8 x 14, 7; L = 105, pp = 35: 3 each. A stage may come
    out with fewer than one layer (Space.valid rejects it)."""
    pp = np.asarray(pp, dtype=np.int64)
    light = np.broadcast_to(np.asarray(light, dtype=np.int64), pp.shape)
    W = int(pp.max(initial=1)) if width is None else int(width)
    p, e = pp[:, None], light[:, None]
    j = np.arange(W)[None, :]
    q, r = np.divmod(layers + 2 * e, np.maximum(p, 1))
    rank = np.where(j == 0, p - 1, np.where(j == p - 1, p - 2, p - 2 - j))  # order of taking an extra layer
    out = q + (rank < r) - e * (j == 0) - e * (j == p - 1)
    return np.where(j < p, out, 0)


def node_tp(tps: np.ndarray, node: int) -> int:
    """The recipes' tensor-parallel degree among ``tps``: the largest up to a node's ``node`` GPUs (tp rides NVLink),
    else the smallest there is."""
    inside = tps[tps <= node]
    return int(inside.max() if inside.size else tps.min())


def divisors(n: int, limit: int | None = None) -> list[int]:
    """Divisors of n, at most ``limit``."""
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]  # each pairs with n // k: O(sqrt n)
    every = sorted(set(small) | {n // k for k in small})
    return every if limit is None else [k for k in every if k <= limit]


class Space(SearchSpace):
    """The SearchSpace of one GPU type: dimensions are StrategyTable columns (module docstring).

    Frozen: build with :meth:`from_options`, :func:`default_space`, :func:`exact_space` or
    :func:`partition_space` (or the keyword-only constructor with ready Dims)."""

    __slots__ = ("model", "cluster", "fixed", "dims", "all_gpus", "radices", "size", "strides", "_values",
                 "_fixed_num", "_index", "_block_dims", "_block_size", "_free_size", "_lookup", "_valid_blocks",
                 "_stage", "_pp1_duplicates", "uneven", "_batch_divisors",
                 "_balanced_cache", "framework")

    def __init__(self, *, model: Transformer, cluster: Cluster, fixed: Mapping[str, object], dims, all_gpus=True,
                 uneven: bool = False, framework=None):
        fixed, dims = _with_framework(dict(fixed), tuple(dims), framework)
        dims = tuple(sorted(dims, key=_order_key))
        names = [d.name for d in dims]
        if len(set(names)) != len(names):
            raise InputError("dims", "distinct dimension names", names)
        fixed = {k: _readable(k, v) for k, v in fixed.items()}
        if "global_batch" not in fixed:
            raise InputError("global_batch", "a fixed global batch (sequences per iteration)", None)
        for k in fixed:
            if k not in COLUMNS and k not in ("microbatches", LIGHT_ENDS, FRAMEWORK):
                raise InputError("fixed", "columns among " + ", ".join(COLUMNS), k)
            if k in names:
                raise InputError(k, "either a dimension or a fixed value, not both", fixed[k])
        has = set(names) | set(fixed)
        if "micro_batch" in has and "microbatches" in has:
            raise InputError("microbatches", "either micro_batch or microbatches, not both", "both")
        if any(d.base == STAGE_RECOMPUTE for d in dims) and "recompute" in names:
            raise InputError("recompute", "no recompute dimension beside stage_recompute.J", "both")
        sets = object.__setattr__
        sets(self, "model", model)
        sets(self, "cluster", cluster)
        sets(self, "fixed", dict(fixed))
        sets(self, "dims", dims)
        sets(self, "all_gpus", bool(all_gpus))
        # what evaluate prices it under: the one framework of its rows, None where framework is a dimension
        sets(self, "framework", fixed.get(FRAMEWORK))
        if LIGHT_ENDS in has and any(d.base == SHIFT for d in dims):
            raise InputError(LIGHT_ENDS, "no light_ends beside stage_shift.J (both set the stage sizes)", "both")
        sets(self, "uneven", bool(uneven) or LIGHT_ENDS in has)
        sets(self, "_batch_divisors", np.array(divisors(int(fixed["global_batch"])), dtype=np.int64))
        sets(self, "_balanced_cache", None)
        radices = np.array([len(d.choices) for d in dims], dtype=np.int64)
        sets(self, "radices", radices)
        size = math.prod(int(r) for r in radices)
        sets(self, "size", size)
        sets(self, "strides", SearchSpace.strides.fget(self))  # cached: index_of is on MCMC's hot path
        sets(self, "_values", tuple(_numeric(d.name, d.choices) for d in dims))
        plain = ("global_batch", "microbatches", LIGHT_ENDS)
        sets(self, "_fixed_num", {k: int(v) if k in plain else _numeric(k, (v,))[0] for k, v in fixed.items()})
        sets(self, "_index", {d.name: k for k, d in enumerate(dims)})
        nblock = len(dims)
        while nblock and dims[nblock - 1].base in FREE_DIMS:
            nblock -= 1
        sets(self, "_block_dims", nblock)
        sets(self, "_block_size", math.prod(int(r) for r in radices[:nblock]))
        sets(self, "_free_size", math.prod(int(r) for r in radices[nblock:]))
        sets(self, "_lookup", None)
        sets(self, "_valid_blocks", None)
        # Schedules that duplicate 1F1B at pp 1 (dropped there when 1F1B is a choice).
        sched = next((d.choices for d in dims if d.name == "schedule"), ())
        dup = [SCHEDULES.index(x) for x in ("zb-h1", "zb-h2") if x in sched] if "1f1b" in sched else []
        sets(self, "_pp1_duplicates", np.array(dup, dtype=np.int64))
        self._check_stage_dims()
        sets(self, "_stage", self._stage_layout())

    def __setattr__(self, name, value):
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __reduce__(self):
        # Pickled (e.g. to Ray workers) as its JSON form; the lookup table is rebuilt on use.
        return (Space.from_json, (self.to_json(), self.model, self.cluster))

    def __repr__(self) -> str:
        dims = ", ".join(f"{d.name}[{len(d.choices)}]" for d in self.dims)
        return f"Space({self.model.name} on {self.cluster.name}, size={self.size:,}, dims={dims})"

    # ---- construction ----------------------------------------------------------------------
    @classmethod
    def from_options(cls, model: Transformer, cluster: Cluster, *, global_batch: int, base: str = "default",
                     all_gpus: bool | None = None, uneven: bool | None = None, framework=None,
                     **choices) -> Space:
        """A space from lists of readable values per dimension.

        ``base="default"``: dimensions not given take :func:`default_space`'s choices;
        ``base="fixed"``: they are held at the StrategyTable defaults (dp derived from the GPUs).
        A dimension given one value is held fixed. ``stage_shift=[-4, ..., 4]`` and/or
        ``stage_recompute=["none", "selective", "full"]`` add the per-stage dimensions for
        every stage up to the largest pp; ``microbatches`` replaces ``micro_batch``.
        ``all_gpus`` / ``uneven`` (None: the base's, :data:`DEFAULT_SPACE_FLAGS` for "default",
        True / False for "fixed"): every GPU used, or dp the largest that fits (idle GPUs
        allowed); pp dividing the layers, or balanced stages (:func:`balanced_stages`). ``framework``: a
        profile's name, or a list of them (a framework dimension; :func:`_with_framework`)."""
        check_int("global_batch", global_batch, 1)
        if base not in ("default", "fixed"):
            raise InputError("base", "default or fixed", base)
        unknown = set(choices) - DIM_NAMES - {SHIFT, STAGE_RECOMPUTE}
        if unknown:
            raise InputError("space option", "names among " + ", ".join(sorted(DIM_NAMES)), sorted(unknown, key=str)[0])
        opts: dict[str, list] = {}
        if base == "default":
            opts.update(default_choices(model, cluster))
        for k, v in choices.items():
            if v is None:
                continue
            vals = list(v) if isinstance(v, (list, tuple, range, np.ndarray)) else [v]
            if not vals:
                raise InputError(k, "at least one value", vals)
            opts[k] = [_readable(k, x) for x in vals]
        if "microbatches" in opts:
            opts.pop("micro_batch", None)
        if STAGE_RECOMPUTE in opts:
            opts.pop("recompute", None)
        fixed: dict[str, object] = {"global_batch": int(global_batch)}
        dims = []
        shift = opts.pop(SHIFT, None)
        stage_rc = opts.pop(STAGE_RECOMPUTE, None)
        if (shift is not None or stage_rc is not None) and "pp" in opts:
            # a dimension per stage: a pp past the layers, whose stages could not all hold one, is no plan's
            opts["pp"] = [p for p in opts["pp"] if int(p) <= model.layers]
            if not opts["pp"]:
                raise InputError("pp", f"at most layers={model.layers} with per-stage shifts or recompute",
                                 choices.get("pp"))
        for name, vals in opts.items():
            if len(vals) == 1:
                fixed[name] = vals[0]
            else:
                dims.append(Dim(name=name, choices=tuple(vals)))
        if shift is not None or stage_rc is not None:
            pps = opts.get("pp", [DEFAULTS["pp"]])
            maxpp = max(int(p) for p in pps)
            if shift is not None:
                shift = sorted(int(x) for x in shift)
                if 0 not in shift:
                    raise InputError("stage_shift", "offsets including 0", shift)
                dims += [Dim(name=f"{SHIFT}.{j}", choices=tuple(shift), ordinal=True) for j in range(maxpp - 1)]
            if stage_rc is not None:
                dims += [Dim(name=f"{STAGE_RECOMPUTE}.{j}", choices=tuple(stage_rc)) for j in range(maxpp)]
        flags = DEFAULT_SPACE_FLAGS if base == "default" else {"all_gpus": True, "uneven": False}
        return cls(model=model, cluster=cluster, fixed=fixed, dims=dims,
                   all_gpus=flags["all_gpus"] if all_gpus is None else all_gpus,
                   uneven=flags["uneven"] if uneven is None else uneven, framework=framework)

    def _stage_layout(self):
        """Per-stage dimensions: their digit columns (contiguous, J ascending), their values as
        one (cols, choices) matrix, and per-pp tables of the uniform boundary positions
        round((J + 1) L / pp) (halves up), of the boundaries in use and of the stages in use."""
        shift = [k for k, d in enumerate(self.dims) if d.base == SHIFT]
        rc = [k for k, d in enumerate(self.dims) if d.base == STAGE_RECOMPUTE]
        if not shift and not rc:
            return None
        S, L = self.max_stages, self.model.layers

        def values(cols, dtype):
            width = max(len(self.dims[k].choices) for k in cols)
            out = np.zeros((len(cols), width), dtype=dtype)
            for i, k in enumerate(cols):
                out[i, : len(self._values[k])] = self._values[k]
            return out

        p = np.arange(S + 1)[:, None]  # (S+1, 1) pp values 0..S (0 unused)
        J = np.arange(S)[None, :]
        uniform = ((J[:, :-1] + 1) * L * 2 + p) // np.maximum(2 * p, 1)  # (S+1, S-1)
        return {
            "shift": np.array(shift, dtype=np.int64), "recompute": np.array(rc, dtype=np.int64),
            "shift_values": values(shift, np.int32) if shift else None,
            "shift_shared": bool(shift) and len({self.dims[k].choices for k in shift}) == 1,
            "rc_shared": bool(rc) and len({self.dims[k].choices for k in rc}) == 1,
            "shift_zero": np.array([self.dims[k].choices.index(0) for k in shift], dtype=np.int64),
            "rc_values": values(rc, np.int8) if rc else None,
            "uniform": uniform.astype(np.int32), "inner": J[:, :-1] < p - 1, "active": J < p,
        }

    def _check_stage_dims(self) -> None:
        if not any(d.base in (SHIFT, STAGE_RECOMPUTE) for d in self.dims):
            return
        maxpp = self.max_stages
        for fam, want in ((SHIFT, maxpp - 1), (STAGE_RECOMPUTE, maxpp)):
            got = sorted(d.stage for d in self.dims if d.base == fam)
            if got and got != list(range(want)):
                raise InputError(fam, f"{fam}.J for J = 0..{want - 1} (max pp = {maxpp})", got)
        for d in self.dims:
            if d.base == SHIFT and 0 not in d.choices:
                raise InputError(d.name, "offsets including 0", list(d.choices))

    @property
    def partitioned(self) -> bool:
        """True when rows carry explicit per-stage layers (stage_layers / stage_recompute)."""
        return self._stage is not None

    @property
    def max_stages(self) -> int:
        return int(max(self.choices_of("pp")))

    def choices_of(self, name: str) -> tuple:
        """A dimension's choices, or (value,) for a fixed column, or the StrategyTable default."""
        if name in self._index:
            return self.dims[self._index[name]].choices
        if name in self.fixed:
            return (self.fixed[name],)
        if name == LIGHT_ENDS:
            return (0,)
        return (DEFAULTS.get(name),)

    # ---- columns ---------------------------------------------------------------------------
    def _columns(self, digits: np.ndarray):
        """(N, D) digits -> (numeric StrategyTable columns, stage_layers, stage_recompute, extra ok).

        Tolerant of invalid digits (guards against division by zero); ``ok`` holds the checks
        feasibility() does not make."""
        n = len(digits)
        if self._stage is not None and len(self.dims) and int(self.radices.max()) <= 127:
            # wide per-stage digit rows: one int8 copy keeps the column gathers in cache
            digits = digits.astype(np.int8)
        cols: dict[str, np.ndarray] = {}
        for k, d in enumerate(self.dims):
            if d.base in (SHIFT, STAGE_RECOMPUTE):
                continue
            cols[d.name] = self._values[k][digits[:, k]]
        for name, v in self._fixed_num.items():
            cols[name] = np.full(n, v)
        for name in COLUMNS:
            if name not in cols and name != "dp":
                cols[name] = np.full(n, _numeric(name, (DEFAULTS[name],))[0])
        G = self.cluster.num_gpus
        tp, pp, cp = cols["tp"], cols["pp"], cols["cp"]
        per = tp * pp * cp
        ok = np.ones(n, dtype=bool)
        B = cols["global_batch"]
        if "dp" not in cols:
            cap = G // per
            if self.all_gpus:
                dp = cap
                ok &= (dp >= 1) & (G % per == 0)
            else:
                # The largest dp that fits beside tp pp cp and divides the batch into whole
                # micro-batches (dp b | B, or dp m | B): more replicas never slow a step at a fixed
                # global batch, so the smaller ones would only repeat a slower plan.
                unit = cols["microbatches"] if "microbatches" in cols else cols["micro_batch"]
                D = self._batch_divisors[None, :]  # (1, K) divisors of B, ascending
                fits = (D <= cap[:, None]) & (B[:, None] % (D * unit[:, None]) == 0)  # (N, K)
                last = D.shape[1] - 1 - np.argmax(fits[:, ::-1], axis=1)
                dp = np.where(fits.any(axis=1), self._batch_divisors[last], 0)
                ok &= dp >= 1
            cols["dp"] = np.maximum(dp, 1)
        elif self.all_gpus:
            ok &= cols["dp"] * per == G
        light = cols.pop(LIGHT_ENDS, None)
        if "microbatches" in cols:
            m = cols.pop("microbatches")
            rep = cols["dp"] * m
            ok &= B % rep == 0
            cols["micro_batch"] = np.maximum(B // rep, 1)
        ok &= ~cols["sequence_parallel"] | (tp > 1)
        if self._pp1_duplicates.size:
            # One stage: ZB-H1 and ZB-H2 run, price and hold exactly as 1F1B; keep 1F1B only.
            ok &= (pp > 1) | ~np.isin(cols["schedule"], self._pp1_duplicates)
        for name in INT_COLUMNS:
            cols[name] = cols[name].astype(np.int64, copy=False)
        sl = sr = None
        if self._stage is not None:
            sl, sr, stage_ok = self._stage_columns(digits, pp, cols["recompute"])
            ok &= stage_ok
        elif self.uneven:
            light = np.zeros(n, dtype=np.int64) if light is None else light.astype(np.int64)
            stages, split_ok = self._balanced_table()
            P, E = split_ok.shape
            inside = (pp >= 0) & (pp < P) & (light >= 0) & (light < E)
            p_i, e_i = np.where(inside, pp, 0), np.where(inside, light, 0)
            ok &= inside & split_ok[p_i, e_i]
            W = max(int(p_i.max(initial=1)), 1) if n else 1
            sl = stages[:, :, :W][p_i, e_i]  # (N, W) gathered, not recomputed per row
        return cols, sl, sr, ok

    def _balanced_table(self):
        """Balanced stages of every (pp, e) of the space, as one (maxpp + 1, maxe + 1, maxpp) table
        of layers and a (maxpp + 1, maxe + 1) bool: the split has every stage >= 1 layer and no
        smaller e gives the same stages (one index per partition: any e at pp <= 2 is e = 0)."""
        cached = getattr(self, "_balanced_cache", None)
        if cached is not None:
            return cached
        # (a pp above the layers leaves a stage empty, a light end of every layer leaves none: such rows are invalid,
        # outside the table, so that it stays at most layers^2 x layers whatever the flags ask)
        L = self.model.layers
        pps = sorted({int(x) for x in self.choices_of("pp") if int(x) <= L}) or [1]
        es = sorted({int(x) for x in self.choices_of(LIGHT_ENDS) if int(x) <= L}) or [0]
        P, E = max(pps) + 1, max(es) + 1
        stages = np.zeros((P, E, max(pps)), dtype=np.int64)
        split_ok = np.zeros((P, E), dtype=bool)
        for p in pps:
            seen = []
            for e in es:
                sl = balanced_stages(self.model.layers, np.array([p]), np.array([e]), width=max(pps))[0]
                stages[p, e] = sl
                split_ok[p, e] = bool(np.all(sl[:p] >= 1)) and not any(np.array_equal(sl, x) for x in seen)
                seen.append(sl)
        object.__setattr__(self, "_balanced_cache", (stages, split_ok))
        return stages, split_ok

    def _stage_columns(self, digits, pp, recompute):
        """Stage layers (N, S) and recompute codes (N, S) from the per-stage digits."""
        n, S, L = len(digits), self.max_stages, self.model.layers
        st = self._stage
        ok = np.ones(n, dtype=bool)
        p = np.clip(pp, 0, S)
        active = st["active"][p]  # (N, S)
        if st["shift"].size:
            dg = digits[:, st["shift"][0]: st["shift"][-1] + 1]  # (N, S-1), contiguous columns
            vals = st["shift_values"]
            off = vals[0][dg] if st["shift_shared"] else np.take_along_axis(vals[None], dg[:, :, None], axis=2)[..., 0]
            inner = st["inner"][p]  # (N, S-1) boundaries in use
            ok &= np.all(inner | (dg == st["shift_zero"][None, :]), axis=1)  # canonical past the last one
            edges = np.empty((n, S + 1), dtype=np.int32)  # layer positions (int32: cache)
            edges[:, 0] = 0
            edges[:, S] = L
            edges[:, 1:S] = np.where(inner, st["uniform"][p] + off, L)
            layers = edges[:, 1:] - edges[:, :-1]  # (N, S): zero past pp
            ok &= np.all((layers >= 1) | ~active, axis=1)
            np.maximum(layers, 0, out=layers)
        else:
            ok &= L % np.maximum(pp, 1) == 0
            layers = np.where(active, (L // np.maximum(pp, 1))[:, None], 0)
        if st["recompute"].size:
            dg = digits[:, st["recompute"][0]: st["recompute"][-1] + 1]  # (N, S)
            vals = st["rc_values"]
            rc = vals[0][dg] if st["rc_shared"] else np.take_along_axis(vals[None], dg[:, :, None], axis=2)[..., 0]
            ok &= np.all(active | (dg == 0), axis=1)  # unused stages hold their first choice
            recompute[:] = rc[:, 0]
        else:
            rc = np.broadcast_to(recompute[:, None], (n, S))
        return np.ascontiguousarray(layers, dtype=np.int64), np.ascontiguousarray(rc, dtype=np.int8), ok

    def table(self, digits) -> StrategyTable:
        """The StrategyTable of (N, D) digits (meaningful for valid digits)."""
        digits = self._digits_arg(digits)
        cols, sl, sr, _ = self._columns(digits)
        return StrategyTable({name: cols[name] for name in (*COLUMNS, FRAMEWORK)}, {"layers": sl, "recompute": sr})

    @property
    def frameworks(self) -> tuple[str, ...]:
        """The framework profiles of the space's rows (one, or the choices of its framework dimension)."""
        return tuple(self.choices_of(FRAMEWORK))

    def digits_from_table(self, table: StrategyTable) -> np.ndarray:
        """The inverse of :meth:`table`: (N, D) digits of a table's rows; a row that is no point
        of the space (a value outside the choices, a fixed column or derived dp that differs,
        stage layers no boundary shifts give) is all -1, which valid() rejects."""
        n, D = len(table), len(self.dims)
        digits = np.zeros((n, D), dtype=np.int64)
        ok = np.ones(n, dtype=bool)
        B, dp, b = table["global_batch"], table["dp"], table["micro_batch"]
        pp = table["pp"]
        S, L = (self.max_stages, self.model.layers) if self._stage is not None else (0, 0)
        for k, d in enumerate(self.dims):
            if d.base == SHIFT:
                if table.stage_layers is None:
                    ok &= False
                    continue
                j = d.stage
                pos = np.cumsum(table.stage_layers[:, : j + 1], axis=1)[:, -1] if j < table.stage_layers.shape[1] \
                    else np.full(n, L)
                uniform = ((j + 1) * L * 2 + pp) // (2 * pp)
                value = np.where(j < pp - 1, pos - uniform, 0)
            elif d.base == STAGE_RECOMPUTE:
                j = d.stage
                src = table.stage_recompute if table.stage_recompute is not None else table["recompute"][:, None]
                col = src[:, min(j, src.shape[1] - 1)] if table.stage_recompute is not None else src[:, 0]
                value = np.where(j < pp, col, self._values[k][0])
            elif d.base == "microbatches":
                value = B // np.maximum(dp * b, 1)
            elif d.base == LIGHT_ENDS:
                have = _layers_of(table, self.model.layers)
                value = np.full(n, -1)
                for e in reversed(d.choices):  # the smallest e giving the row's stages
                    split = balanced_stages(self.model.layers, pp, np.full(n, int(e)), width=have.shape[1])
                    value = np.where(np.all(split == have, axis=1), int(e), value)
            elif d.base == FRAMEWORK:
                value = _framework_column(table)
            else:
                value = table[d.name]
            vals = self._values[k]
            match = np.asarray(value)[:, None] == vals[None, :]  # (N, C)
            ok &= match.any(axis=1)
            digits[:, k] = np.argmax(match, axis=1)
        again = self.table(digits)
        for name in COLUMNS:
            ok &= again[name] == table[name]
        ok &= again[FRAMEWORK] == _framework_column(table)
        if self._stage is None:  # stage layers: the space's (uniform or balanced) and the table's
            mine, theirs = _layers_of(again, self.model.layers), _layers_of(table, self.model.layers)
            w = max(mine.shape[1], theirs.shape[1])
            pad = [np.pad(x, ((0, 0), (0, w - x.shape[1]))) for x in (mine, theirs)]
            ok &= np.all(pad[0] == pad[1], axis=1)
        if self._stage is not None:
            active = np.arange(S)[None, :] < pp[:, None]
            for attr in ("stage_layers", "stage_recompute"):
                mine, theirs = getattr(again, attr), getattr(table, attr)
                if theirs is None:
                    theirs = (np.where(active, (L // pp)[:, None], 0) if attr == "stage_layers"
                              else np.broadcast_to(table["recompute"][:, None], (n, S)))
                w = min(S, theirs.shape[1])
                ok &= np.all(~active[:, :w] | (mine[:, :w] == theirs[:, :w]), axis=1)
                ok &= np.all(active[:, w:] == 0, axis=1) if w < S else True
        digits[~ok] = -1
        return digits

    def _digits_arg(self, digits) -> np.ndarray:
        digits = np.asarray(digits, dtype=np.int64)
        if digits.ndim == 1:
            digits = digits[None, :]
        if digits.ndim != 2 or digits.shape[1] != len(self.dims):
            raise ValueError(f"digits must be (N, {len(self.dims)}), got {digits.shape}")
        return digits

    # ---- constraints -----------------------------------------------------------------------
    def valid(self, digits) -> np.ndarray:
        """(N,) bool: digits in range and every structural constraint holds (not memory).

        Spaces with a lookup table (see the module docstring) answer from it; the others, and
        the table itself, come from :meth:`valid_direct`."""
        digits = self._digits_arg(digits)
        lut = self._lookup_table()
        if lut is None:
            return self.valid_direct(digits)
        nb = self._block_dims
        weights = self.strides[:nb] // self._free_size
        if digits.size == 0 or (digits.min() >= 0 and bool((digits < self.radices).all())):
            return lut[digits[:, :nb] @ weights]  # the usual case (proposals), a third of the time
        inrange = np.all((digits >= 0) & (digits < self.radices[None, :]), axis=1)
        block = np.where(inrange[:, None], digits[:, :nb], 0) @ weights
        return inrange & lut[block]

    def valid_direct(self, digits) -> np.ndarray:
        """(N,) bool: :meth:`valid` computed from the constraints (no lookup table)."""
        digits = self._digits_arg(digits)
        inrange = np.all((digits >= 0) & (digits < self.radices[None, :]), axis=1)
        safe = digits if inrange.all() else np.where(inrange[:, None], digits, 0)
        cols, sl, sr, ok = self._columns(safe)
        table = StrategyTable({name: cols[name] for name in (*COLUMNS, FRAMEWORK)}, {"layers": sl, "recompute": sr})
        reason = feasibility(self.model, self.cluster, table)  # (each row under its framework column)
        return inrange & ok & (reason == REASON["ok"])

    def _lookup_table(self) -> np.ndarray | None:
        """Validity of every combination of the constrained block (free digits 0), or None."""
        if self._lookup is None and self._block_size <= LOOKUP_MAX_ENTRIES and self.strides is not None:
            nb, D = self._block_dims, len(self.dims)
            parts = []
            for lo in range(0, self._block_size, SCAN_CHUNK):
                blk = np.arange(lo, min(lo + SCAN_CHUNK, self._block_size), dtype=np.int64)
                digits = np.zeros((blk.size, D), dtype=np.int64)
                for k in range(nb - 1, -1, -1):
                    blk, digits[:, k] = np.divmod(blk, self.radices[k])
                parts.append(self.valid_direct(digits))
            lut = np.concatenate(parts)
            object.__setattr__(self, "_lookup", lut)
            object.__setattr__(self, "_valid_blocks", np.flatnonzero(lut))
        return self._lookup

    def valid_count(self) -> int | None:
        """Number of valid points (None when the space is too large to count by table)."""
        lut = self._lookup_table()
        return None if lut is None else int(lut.sum()) * self._free_size

    # ---- enumeration -----------------------------------------------------------------------
    def valid_indices(self, start: int, stop: int) -> np.ndarray:
        """Grid indices (int64, ascending) of the valid rows in [start, stop)."""
        self._need_int64("rows")
        start, stop = max(int(start), 0), min(int(stop), self.size)
        if stop <= start:
            return np.empty(0, dtype=np.int64)
        lut = self._lookup_table()
        if lut is None:
            parts = []
            for lo in range(start, stop, SCAN_CHUNK):
                idx = np.arange(lo, min(lo + SCAN_CHUNK, stop), dtype=np.int64)
                parts.append(idx[self.valid_direct(self.digits_of(idx))])
            return np.concatenate(parts)
        F = self._free_size
        b0, b1 = start // F, (stop - 1) // F + 1
        blocks = np.flatnonzero(lut[b0:b1]) + b0  # valid blocks touching the range
        idx = (blocks[:, None] * F + np.arange(F, dtype=np.int64)[None, :]).ravel()
        if blocks.size and (blocks[0] == b0 or blocks[-1] == b1 - 1):
            idx = idx[(idx >= start) & (idx < stop)]
        return idx

    # ---- sampling ----------------------------------------------------------------
    def _nonstage(self) -> np.ndarray:
        return np.array([k for k, d in enumerate(self.dims) if d.base not in (SHIFT, STAGE_RECOMPUTE)], dtype=np.int64)

    def random_digits(self, rng: np.random.Generator, n: int, *, max_rounds: int = 1000) -> np.ndarray:
        """(n, D) valid digits drawn at random.

        Spaces without per-stage dimensions: uniform over the valid points (from the lookup
        table's valid blocks, else by rejection).
        Per-stage spaces: the other dimensions uniform over their valid combinations (with
        canonical stage digits), then the per-stage recompute digits uniform and the boundary
        shifts drawn boundary by boundary, each uniform among the offsets that give the stage
        before it what the row's framework accepts (at least one layer; under a chunked schedule v
        chunks: a multiple of vpp layers, or, where the framework splits chunks unevenly, at least
        vpp layers and vpp - 1 on the first and the last stage under interleaving) and leave room
        for the stages after it; rows that still fail keep the uniform partition."""
        if self._lookup_table() is not None:
            if not self._valid_blocks.size:
                raise ValueError("random_digits: the space has no valid point")
            blocks = self._valid_blocks[rng.integers(0, self._valid_blocks.size, size=n)]
            return self.digits_of(blocks * self._free_size + rng.integers(0, self._free_size, size=n))
        out = np.empty((0, len(self.dims)), dtype=np.int64)
        ns = self._nonstage()
        for _ in range(max_rounds):
            want = n - len(out)
            if want <= 0:
                break
            draw = max(2 * want, 64)
            digits = self.canonical_digits(draw)
            digits[:, ns] = rng.integers(0, self.radices[ns][None, :], size=(draw, ns.size))
            digits = digits[self.valid(digits)]
            out = np.concatenate([out, digits[:want]])
        if len(out) < n:
            raise ValueError(f"random_digits: found {len(out)} of {n} valid points in {max_rounds} rounds")
        if self._stage is not None:
            out = self._random_stages(rng, out)
        return out

    def _random_stages(self, rng, digits):
        n, L = len(digits), self.model.layers
        cols, _, _, _ = self._columns(digits)
        p, v = cols["pp"], cols["vpp"]  # chunks per device (1 but under the chunked schedules)
        # Per row, as costmodel._feasibility.stage_feasibility: where the framework splits chunks unevenly every stage
        # needs v layers and no multiple of v, the first and the last v - 1 under interleaving (the embedding's and the
        # loss's chunks); elsewhere every stage a multiple of v.
        uneven = UNEVEN_CHUNKS[cols[FRAMEWORK]]
        end = (uneven & (cols["schedule"] == SCHEDULES.index("interleaved"))).astype(np.int64)
        st = self._stage
        out = digits.copy()
        for k in st["recompute"]:
            draw = rng.integers(0, self.radices[k], size=n)
            out[:, k] = np.where(self.dims[k].stage < p, draw, 0)
        if not st["shift"].size:
            return out
        prev = np.zeros(n, dtype=np.int64)  # position of the previous boundary
        for j, k in enumerate(st["shift"]):
            vals = self._values[k]  # (C,) offsets
            active = j < p - 1
            uniform = ((j + 1) * L * 2 + p) // (2 * p)
            pos = uniform[:, None] + vals[None, :]  # (N, C) candidate boundary positions
            size = pos - prev[:, None]
            room = L - pos  # layers left for stages j+1 .. p-1 (p - 1 - j of them), the last one end lighter
            least = v - end * (j == 0)  # (N,) the fewest layers stage j may hold
            allowed = ((size >= least[:, None]) & ((size % v[:, None] == 0) | uneven[:, None])
                       & (room >= ((p - 1 - j) * v - end)[:, None]))
            cnt = allowed.sum(axis=1)
            pick = np.floor(rng.random(n) * np.maximum(cnt, 1)).astype(np.int64)
            choice = np.argmax(np.cumsum(allowed, axis=1) > pick[:, None], axis=1)
            zero = self.dims[k].choices.index(0)
            digit = np.where(active & (cnt > 0), choice, zero)
            out[:, k] = digit
            prev = np.where(active, uniform + vals[digit], prev)
        bad = ~self.valid(out)
        out[bad] = digits[bad]
        return out

    def column(self, digits, name: str) -> np.ndarray:
        """(N,) numeric values of one dimension or fixed column for (N, D) digits (codes for
        coded columns); cheaper than table() when one column is needed."""
        digits = self._digits_arg(digits)
        if name in self._index:
            k = self._index[name]
            return self._values[k][digits[:, k]]
        if name in self._fixed_num:
            return np.full(len(digits), self._fixed_num[name])
        if name == "dp":
            return self.table(digits)["dp"]
        return np.full(len(digits), _numeric(name, (DEFAULTS[name],))[0])

    # ---- start points ----------------------------------------------------------------------
    def _core_valid(self, extra: dict[str, object] | None = None):
        """Valid digits of the space with per-stage digits canonical (per-stage recompute set
        from ``extra['stage_recompute']`` for the stages in use): (M, D) digits and their table."""
        ns = self._nonstage()
        rad = self.radices[ns]
        total = math.prod(int(r) for r in rad)
        if total > LOOKUP_MAX_ENTRIES * 4:
            raise ValueError(f"start points: the non-stage core has {total:,} points, too many to scan")
        found = []
        for lo in range(0, total, SCAN_CHUNK):
            i = np.arange(lo, min(lo + SCAN_CHUNK, total), dtype=np.int64)
            digits = self.canonical_digits(i.size)
            for j in range(ns.size - 1, -1, -1):
                i, digits[:, ns[j]] = np.divmod(i, rad[j])
            if self._stage is not None and extra and "stage_recompute" in extra:
                pp = self.table(digits)["pp"]
                for k in self._stage["recompute"]:
                    ch = self.dims[k].choices
                    want = extra["stage_recompute"]
                    if want in ch:
                        digits[:, k] = np.where(self.dims[k].stage < pp, ch.index(want), 0)
            found.append(digits[self.valid(digits)])
        digits = np.concatenate(found)
        return digits, self.table(digits)

    def start_points(self, within: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Named valid (D,) digits: "data_parallel" (the largest dp, then tp = pp = cp = 1 where
        possible, no recompute, ZeRO 0), "fsdp" (FSDP's recipe: pp 1 and ZeRO-3, the most GPUs, the least
        recompute, the fewest micro-batches a step, then the smallest tp, cp 1, SP, 1F1B, among those that
        fit in memory by costmodel.evaluate; where it is not the data-parallel point), "fsdp_cp1" (FSDP's with cp 1
        before the smallest tp; where it is no point above), "fsdp_tp" (the 2D recipe,
        torchtitan's FSDP + TP: FSDP's with the largest tp up to a node's GPUs, sequence parallelism, the fewest
        micro-batches a step, then the least recompute; where tp > 1 and it is no point above), "fsdp_pp" (FSDP with
        a pipeline, torchtitan's 3D recipe and Llama 3's: pp > 1 with ZeRO 2-3 where the framework shards beside
        pipeline stages, on the most GPUs, the least recompute, then the smallest tp, the fewest stages and the
        fewest micro-batches a step, among those that fit; where it is no point above) and "megatron"
        (Megatron-LM's recipe, Narayanan et al. 2021 /
        Korthikanti et al. 2022: tp = GPUs per node or the largest valid tp below it, for an MoE model
        the largest expert parallelism at that tp (Megatron-Core's MoE recipes spread the experts), on every GPU
        the space lets it use (its world size is tp x pp x cp x dp), the smallest pp that fits in memory by
        costmodel.evaluate, one dividing the layers first, 1F1B (else interleaved), selective recompute,
        sequence parallelism, ZeRO-1 (distributed optimizer), micro-batch 1). A name is omitted
        when the space holds no such point. ``within``: sorted grid indices the points are chosen
        among (search._screen: the points that fit in memory), None for every valid point."""
        from costmodel import evaluate

        out: dict[str, np.ndarray] = {}

        def among(found):
            digits, t = found
            if within is None or not len(digits):
                return digits, t
            keep = np.isin(self.index_of(digits), within)
            return digits[keep], t.take(np.flatnonzero(keep))

        digits, t = among(self._core_valid())
        if len(digits):
            rc = t["recompute"] if self._stage is None else t.stage_recompute.max(axis=1)
            keys = (t["micro_batch"], t["overlap_dp"] == 0, t["zero_stage"], rc, t["sequence_parallel"],
                    t["vpp"], t["schedule"] != SCHEDULES.index("1f1b"), t["cp"], t["tp"], t["pp"], -t["dp"])
            out["data_parallel"] = digits[np.lexsort(keys)[0]]
            # FSDP's recipe: no pipeline, every weight sharded, on every GPU the space lets it use, no recompute
            # where it fits, and the fewest micro-batches a step (each one gathers the weights again), at the
            # smallest tp that allows them
            full = (t["pp"] == 1) & (t["zero_stage"] == 3)
            if within is None and full.any():  # not screened: those that fit in memory by costmodel.evaluate
                cand = np.flatnonzero(full)
                priced = evaluate(self.model, self.cluster, t.take(cand))  # (each row under its framework column)
                full[cand[priced["reason"] == REASON["out_of_memory"]]] = False
            if full.any():
                micro = t["global_batch"] // (t["dp"] * t["micro_batch"])  # micro-batches a step
                keys = (t["overlap_dp"] == 0, ~t["sequence_parallel"], t["schedule"] != SCHEDULES.index("1f1b"),
                        t["vpp"], t["cp"], t["tp"], micro, rc, -t.num_gpus, ~full)
                fsdp = digits[np.lexsort(keys)[0]]
                if not np.array_equal(fsdp, out["data_parallel"]):
                    out["fsdp"] = fsdp
                # the same with tensor parallelism before context parallelism where one of them must shard the
                # activations: neither is the better in general (at 8k tokens context parallelism won for
                # Llama 3 8B on 512 GPUs, tensor parallelism for 70B on 128), and each is a few changes from the other
                keys = (t["overlap_dp"] == 0, ~t["sequence_parallel"], t["schedule"] != SCHEDULES.index("1f1b"),
                        t["vpp"], t["tp"], t["cp"], micro, rc, -t.num_gpus, ~full)
                fsdp_cp1 = digits[np.lexsort(keys)[0]]
                if not any(np.array_equal(fsdp_cp1, v) for v in out.values()):
                    out["fsdp_cp1"] = fsdp_cp1
                # the 2D recipe (torchtitan's FSDP + TP): FSDP's, with tensor parallelism inside a node (the largest
                # valid tp up to its GPUs) and sequence parallelism, the fewest micro-batches a step before the
                # least recompute (each micro-batch gathers the weights again)
                tp_want = node_tp(t["tp"][full], self.cluster.gpus_per_node)
                if tp_want > 1:
                    keys = (t["overlap_dp"] == 0, t["schedule"] != SCHEDULES.index("1f1b"), t["vpp"], t["cp"],
                            ~t["sequence_parallel"], rc, micro, -t.num_gpus, t["tp"] != tp_want, ~full)
                    two_d = digits[np.lexsort(keys)[0]]
                    if not any(np.array_equal(two_d, v) for v in out.values()):
                        out["fsdp_tp"] = two_d
            # FSDP with a pipeline (torchtitan's 3D recipe, Llama 3's: the weights or gradients sharded beside pipeline
            # stages, where the framework shards with pp > 1): the least recompute where it fits, the smallest tp,
            # then the fewest stages, then the fewest micro-batches a step
            sharded = (t["pp"] > 1) & (t["zero_stage"] >= 2)
            if within is None and sharded.any():
                cand = np.flatnonzero(sharded)
                priced = evaluate(self.model, self.cluster, t.take(cand))
                sharded[cand[priced["reason"] == REASON["out_of_memory"]]] = False
            if sharded.any():
                micro = t["global_batch"] // (t["dp"] * t["micro_batch"])
                keys = (t["overlap_dp"] == 0, ~t["sequence_parallel"], t["schedule"] != SCHEDULES.index("1f1b"),
                        t["vpp"], t["cp"], micro, t["pp"], t["tp"], rc, -t.num_gpus, ~sharded)
                fsdp_pp = digits[np.lexsort(keys)[0]]
                if not any(np.array_equal(fsdp_pp, v) for v in out.values()):
                    out["fsdp_pp"] = fsdp_pp
        digits, t = among(self._core_valid({"stage_recompute": "selective"}))
        if len(digits):
            tps = t["tp"]
            tp_want = node_tp(tps, self.cluster.gpus_per_node)
            rc = t["recompute"] if self._stage is None else t.stage_recompute[:, 0]
            sched_rank = np.where(t["schedule"] == SCHEDULES.index("1f1b"), 0,
                                  np.where(t["schedule"] == SCHEDULES.index("interleaved"), 1, 2))
            score = np.stack([
                tps != tp_want, -t["ep"], rc != RECOMPUTE.index("selective"), ~t["sequence_parallel"],
                t["zero_stage"] != 1, t["micro_batch"] != t["micro_batch"].min(), sched_rank,
                t["vpp"], t["cp"] != 1, t["overlap_dp"] == 0,
                t["precision"] != _numeric("precision", ("bf16",))[0],
            ], axis=1).astype(np.int64)
            best = np.all(score == score[np.lexsort(score.T[::-1])[0]][None, :], axis=1)
            cand = np.flatnonzero(best)
            # every GPU first (Megatron-LM's world size is tp x pp x cp x dp), then pp dividing the layers (its
            # uniform stages), then the smallest
            cand = cand[np.lexsort((t["pp"][cand], self.model.layers % t["pp"][cand] != 0, -t.num_gpus[cand]))]
            m = evaluate(self.model, self.cluster, t.take(cand))  # (each row under its framework column)
            fits = np.flatnonzero(m["reason"] != REASON["out_of_memory"])
            out["megatron"] = digits[cand[fits[0]] if fits.size else cand[-1]]
        return out

    # ---- persistence -----------------------------------------------------------------------
    def to_json(self) -> dict:
        return {
            "model": self.model.name, "cluster": self.cluster.name, "all_gpus": self.all_gpus, "uneven": self.uneven,
            "fixed": dict(self.fixed),
            "dims": [{"name": d.name, "choices": list(d.choices), "ordinal": d.ordinal} for d in self.dims],
        }  # (the framework always: in fixed, or a dimension; never left to a default that may change)

    @classmethod
    def from_json(cls, d: dict, model: Transformer, cluster: Cluster) -> Space:
        dims = [Dim(name=x["name"], choices=tuple(x["choices"]), ordinal=bool(x.get("ordinal", False)))
                for x in d["dims"]]
        recorded = FRAMEWORK in d["fixed"] or any(x.name == FRAMEWORK for x in dims)
        return cls(model=model, cluster=cluster, fixed=d["fixed"], dims=dims, all_gpus=d.get("all_gpus", True),
                   uneven=d.get("uneven", False),
                   framework=None if recorded else d.get("framework", LEGACY_FRAMEWORK))

    def __eq__(self, other) -> bool:
        return (isinstance(other, Space) and self.model == other.model and self.cluster == other.cluster
                and self.to_json() == other.to_json())

    def __hash__(self) -> int:
        return hash((self.model.name, self.cluster.name, self.size))


def _with_framework(fixed: dict, dims: tuple, framework) -> tuple[dict, tuple]:
    """``fixed`` and ``dims`` with the space's framework: ``framework`` (a profile's name, a Framework row, or a list
    of them) held fixed where it is one profile, else a framework dimension of its distinct profiles in the order
    given; None: the framework ``fixed`` or ``dims`` hold, else DEFAULT_FRAMEWORK. InputError naming ``framework``
    for an unknown name, or a framework given both ways."""
    has = FRAMEWORK in fixed or any(d.name == FRAMEWORK for d in dims)
    if framework is None:
        return (fixed, dims) if has else ({**fixed, FRAMEWORK: DEFAULT_FRAMEWORK}, dims)
    if has:
        raise InputError(FRAMEWORK, "the framework as an argument or in the space's choices, not both", framework)
    many = framework if isinstance(framework, (list, tuple)) else [framework]
    names = tuple(dict.fromkeys(framework_preset(x, FRAMEWORK).name for x in many))
    if not names:
        raise InputError(FRAMEWORK, "at least one framework", list(many))
    if len(names) == 1:
        return {**fixed, FRAMEWORK: names[0]}, dims
    return fixed, (*dims, Dim(name=FRAMEWORK, choices=names))


def _framework_column(table: StrategyTable) -> np.ndarray:
    """(N,) framework codes of ``table``'s rows; a table without a framework column is DEFAULT_FRAMEWORK's (what
    costmodel.evaluate prices it under when no framework is named)."""
    codes = table.columns.get(FRAMEWORK)
    return np.full(len(table), FRAMEWORK_NAMES.index(DEFAULT_FRAMEWORK), dtype=np.int8) if codes is None else codes


def _layers_of(table: StrategyTable, layers: int) -> np.ndarray:
    """(N, W) layers per stage of a table's rows (uniform where it has no stage_layers)."""
    if table.stage_layers is not None:
        return table.stage_layers
    pp = table["pp"]
    W = int(pp.max(initial=1))
    return np.where(np.arange(W)[None, :] < pp[:, None], (layers // pp)[:, None], 0)


# ---- named spaces -------------------------------------------------------------------------
# The default space's flags (Space.from_options with base="default"): degrees may leave GPUs idle
# (dp the largest that fits) and pipelines may split the layers unevenly (balanced_stages).
DEFAULT_SPACE_FLAGS = {"all_gpus": False, "uneven": True}
# Deepest pipeline of the default space, and the lighter-ends choices (layers the first and the
# last stage give up for the embedding and the head: Megatron-Core's uneven first / last stage).
DEFAULT_MAX_PP = 64
DEFAULT_LIGHT_ENDS = (0, 1, 2)


def pipeline_degrees(layers: int, limit: int = DEFAULT_MAX_PP, light_ends=DEFAULT_LIGHT_ENDS) -> list[int]:
    """Pipeline degrees of a model of ``layers`` layers, at most ``limit`` and L / 2 (two layers a
    stage on average, one on a lighter end): those that split L + 2e layers evenly for a
    lighter-ends choice e (so every stage but the lighter ends holds the same layers: pp | L,
    pp | L + 2, pp | L + 4), and the powers of two (balanced stages one layer apart where they do
    not divide). 105 layers: 1-5, 7, 8, 15, 16, 21, 32, 35; 126 layers: 1-10, 13, 14, 16, 18,
    21, 26, 32, 42, 63."""
    top = max(min(limit, layers // 2), 1)
    even = {p for p in range(1, top + 1) if any((layers + 2 * e) % p == 0 for e in light_ends)}
    return sorted(even | {1 << k for k in range(top.bit_length()) if 1 << k <= top})


def tensor_degrees(model: Transformer, cluster: Cluster) -> list[int]:
    """Tensor-parallel degrees the hardware and the model allow: at most a node (tp spans NVLink),
    dividing the heads and the K/V heads (an MLP: its hidden width)."""
    if model.kind == "mlp":
        return divisors(model.hidden, cluster.gpus_per_node)
    return [t for t in divisors(model.heads, cluster.gpus_per_node) if model.kv_heads % t == 0]


def context_degrees(model: Transformer) -> list[int]:
    """Context-parallel degrees: 1, and 2 for sequences of 4096 tokens or more (cp splits the
    sequence into 2 cp chunks of at least 1024 tokens; longer cp is for long-context phases)."""
    return [c for c in (1, 2) if c == 1 or (model.seq_len >= 4096 and model.seq_len % (2 * c) == 0)]


def expert_degrees(model: Transformer, cluster: Cluster) -> list[int]:
    """Expert-parallel degrees: the divisors of the experts up to the GPUs (an MoE model); [1] for
    a dense model. Which fit a row's tp cp dp is feasibility's check (costmodel._feasibility.ep_fits)."""
    return divisors(model.experts, cluster.num_gpus) if model.is_moe else [1]


def default_choices(model: Transformer, cluster: Cluster) -> dict[str, list]:
    """The default space's choices (``plansweep rank``, derived from the model and the cluster):
    tp from tensor_degrees, pp from pipeline_degrees (at most 64) with the first and last stage
    0-2 layers lighter (light_ends, balanced_stages), cp from context_degrees, dp the largest that
    fits beside them (GPUs may stay idle, DEFAULT_SPACE_FLAGS), micro-batch 1-8, 1F1B /
    interleaved (vpp 2-4) / ZB-H1, recompute, SP, ZeRO 0-3 (ZeRO-2/3 where the cost model prices
    them: today pp 1; ZeRO-1, the distributed optimizer, with any pp); an MoE model adds ep
    (expert_degrees), a dense one holds ep = 1."""
    moe = {"ep": expert_degrees(model, cluster)} if model.is_moe else {}
    return {**moe, "tp": tensor_degrees(model, cluster), "pp": pipeline_degrees(model.layers),
            "light_ends": list(DEFAULT_LIGHT_ENDS), "cp": context_degrees(model), "micro_batch": [1, 2, 4, 8],
            "schedule": ["1f1b", "interleaved", "zb-h1"], "vpp": [1, 2, 3, 4], "recompute": list(RECOMPUTE),
            "sequence_parallel": [False, True], "zero_stage": [0, 1, 2, 3]}


def default_space(model: Transformer, cluster: Cluster, global_batch: int, framework=None) -> Space:
    """See :func:`default_choices`; dp derived (the largest that fits); ``framework`` as Space.from_options's."""
    return Space.from_options(model, cluster, global_batch=global_batch, framework=framework)


def default_table(model: Transformer, cluster: Cluster, global_batch: int, framework=None) -> StrategyTable:
    """Every valid row of :func:`default_space` as one StrategyTable (what `plansweep rank` prices by default)."""
    space = default_space(model, cluster, global_batch, framework)
    return space.rows(0, space.size)[1]


# The exact space (the search-quality problem): GPT-3 175B on 1024 H100, global batch 1536.
EXACT_CHOICES: dict[str, list] = {
    "tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8, 16, 32], "cp": [1, 2, 4, 8], "micro_batch": [1, 2, 3, 4, 6, 8, 12, 16],
    "schedule": ["gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2"], "vpp": [1, 2, 3, 4, 6],
    "recompute": list(RECOMPUTE), "sequence_parallel": [False, True], "zero_stage": [0, 1, 2, 3],
}


def exact_space(model: Transformer, cluster: Cluster, global_batch: int = DEFAULT_GLOBAL_BATCH,
                framework=None) -> Space:
    """Global degrees (tp, pp, cp; dp = GPUs / (tp pp cp)), micro-batch, schedule (+ vpp),
    recompute, SP and ZeRO stage: small enough to evaluate whole (EXACT_CHOICES), meant for
    GPT-3 175B on h100x1024 with global batch 1536 (460,800 points; under megatron-core, which
    runs 1F1B and interleaved only, 27,432 valid and 9,306 feasible by costmodel.evaluate's closed
    forms against the GPUs' memory as nvidia-smi reports it; under generic 49,014 and 11,436). A power-of-two pp
    that does not divide another model's layers splits them into balanced stages
    (balanced_stages with e = 0: Llama 3 405B's pp 16 is 7, 8 x 14, 7). ``framework`` as
    Space.from_options's."""
    pps = [p for p in EXACT_CHOICES["pp"] if p <= model.layers]
    moe = {"ep": expert_degrees(model, cluster)} if model.is_moe else {}  # an MoE model: ep too
    return Space.from_options(model, cluster, global_batch=global_batch, base="fixed", uneven=True,
                              framework=framework, **{**EXACT_CHOICES, "pp": pps, **moe})


# Boundary offsets of the partition space: up to 4 layers either way of the uniform position.
PARTITION_SHIFTS = list(range(-4, 5))


def partition_space(model: Transformer, cluster: Cluster, global_batch: int, framework=None) -> Space:
    """Uneven pipeline partitions and per-stage recompute over the exact space's degrees:
    stage_shift.J in -4..4 layers, stage_recompute.J in none/selective/full; pp need not
    divide the layers. Far beyond exhaustive search (a Python int size)."""
    pps = [p for p in (1, 2, 4, 8, 16, 32) if p <= model.layers]
    opts = {k: v for k, v in EXACT_CHOICES.items() if k not in ("recompute",)}
    opts["pp"] = pps
    return Space.from_options(model, cluster, global_batch=global_batch, base="fixed", framework=framework,
                              stage_shift=PARTITION_SHIFTS, stage_recompute=list(RECOMPUTE), **opts)
