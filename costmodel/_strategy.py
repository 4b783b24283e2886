"""StrategyTable: N strategies, one numpy column per dimension; strings become codes here.

A row describes its pipeline stages: row columns (N,) hold what is one value per row, and
optional per-stage columns (N, S), S >= max pp, padded past pp (STAGE_PAD), hold what differs
between stages; an absent per-stage column means every stage takes the row's value. A
homogeneous cluster is one pool (pool 0).

Row columns (shape (N,)):
    dp, tp, pp, cp            data, tensor, pipeline and context parallel degrees
    ep                        expert parallel degree (1 for a dense model): the experts of an MoE
                              layer are split over ep ranks folded into the dp x cp x tp ranks of
                              a pipeline stage (costmodel._experts)
    etp                       expert tensor parallel degree (1 for a dense model): each expert's
                              ffn split over etp ranks; etp x ep divides dp x cp x tp
    micro_batch               sequences per micro-batch (b)
    global_batch              sequences per iteration (B); micro-batches m = B / (dp * b)
    vpp                       virtual pipeline stages (chunks) per device; 1 = no interleaving
    schedule                  code into SCHEDULES
    recompute                 code into RECOMPUTE
    sequence_parallel         bool
    zero_stage                0..3
    precision                 code into PRECISIONS
    overlap_dp                bool: overlap the data-parallel gradient exchange with backward
    framework                 (optional, with or without placements) code into FRAMEWORK_NAMES: the framework
                              profile the row is priced under; absent: evaluate()'s ``framework`` for every row
    recompute_modules         (optional) bit set over RECOMPUTE_MODULES (costmodel._codes): the modules a
                              "selective" recompute checkpoints, as Megatron-Core's --recompute-modules names them;
                              0 (and absent): the framework's own selective policy. Read where a stage's
                              recompute is "selective"; only profiles with Framework.recompute_modules take it
Per-stage columns (``stages``, keys without the ``stage_`` of from_columns' arguments):
    stage_layers              layers per stage (zero past pp); absent: layers / pp on every
                              stage. Row sums must equal the model's layers.
    stage_recompute           recompute code per stage; absent: ``recompute`` on every stage

Placements (``placed``: a table with ``microbatches``). Stages may run on different pools with
their own degrees; the row columns are then pp, microbatches (m, the same for every stage),
global_batch, cp, vpp, zero_stage, ep, etp and the coded and boolean columns (no dp, tp or
micro_batch: they are per stage); stage_layers and global_batch must be given, and every one
of these per-stage columns is present (those not given take the row's dp / tp, or pool 0,
tp-inner and no split):
    stage_pool                index into HeteroCluster.pools
    stage_dp, stage_tp        the stage's own data- and tensor-parallel degrees
    stage_order               rank order inside the stage's GPUs: 0 = Megatron's (tp innermost,
                              then cp, then dp: tp inside a node); 1 = dp innermost, then tp, then
                              cp (tp strided across nodes: a tp group of size <= nodes has one
                              rank per node)
    stage_pool2, stage_dp2    a stage split across two pools (HetPipe's virtual workers, a data-
                              parallel group spanning pools): dp2 of the stage's dp replicas run on
                              pool2, the other dp - dp2 on pool (0 <= dp2 < dp; dp2 = 0, or pool2 =
                              pool, is no split). Every replica holds the same micro-batch share
                              b_i, so synchronous data parallelism waits for the slower pool's
                              replica, and the stage's gradient all-reduce crosses the inter-pool
                              link (costmodel._block).
An MoE model's layers fold each stage's tp x cp x dp ranks into etp x ep x edp (Megatron-Core's
parallel folding, per stage: ep x etp must divide each stage's tp cp dp).

How micro-batches flow when dp differs between stages (HetPipe / Metis style): every stage
runs the same m micro-batches per iteration, and every stage sees the whole global batch,
so micro-batch j is B/m sequences everywhere, split over the stage's dp replicas: stage i's
replicas each hold b_i = B / (dp_i * m) sequences (B must be a multiple of dp_i * m). At a
boundary the activations of micro-batch j are re-sharded from dp_i x tp_i senders to
dp_{i+1} x tp_{i+1} receivers: each sender sends its 1/(dp_i tp_i) share and each receiver
takes its 1/(dp_{i+1} tp_{i+1}) share, so the hand-off costs the larger share over the link
between the two stages (costmodel._block). With equal degrees this is Megatron's
scatter/gather hand-off of T h / t bytes per GPU. A table without placements gives b and
derives m = B / (dp b); one with them gives m and derives each stage's b_i.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

import costmodel._codes as _codes
from costmodel._errors import InputError
from costmodel._frameworks import FRAMEWORKS, framework_preset
from costmodel._hardware import PRECISIONS

SCHEDULES = _codes.SCHEDULES  # names of the schedule codes (costmodel._codes: append only)
RECOMPUTE = _codes.RECOMPUTE
RECOMPUTE_MODULES = _codes.RECOMPUTE_MODULES
MODULES = "recompute_modules"  # the optional column of module bit sets (module docstring)

INT_COLUMNS = ("dp", "tp", "pp", "cp", "ep", "etp", "micro_batch", "global_batch", "vpp", "zero_stage")
CODE_COLUMNS = {"schedule": SCHEDULES, "recompute": RECOMPUTE, "precision": PRECISIONS}
BOOL_COLUMNS = ("sequence_parallel", "overlap_dp")
COLUMNS = INT_COLUMNS + tuple(CODE_COLUMNS) + BOOL_COLUMNS
# The framework column, optional: int8 codes into FRAMEWORK_NAMES (the profiles of costmodel._frameworks, in its
# table's order), one per row, so that one table holds rows priced under several frameworks (costmodel._evaluate
# prices each framework's rows with its profile). A table without it is priced under evaluate()'s ``framework``.
FRAMEWORK = "framework"
FRAMEWORK_NAMES = tuple(FRAMEWORKS)
NAMES_OF_CODES = {**CODE_COLUMNS, FRAMEWORK: FRAMEWORK_NAMES}  # every coded column, the optional one included
# The row columns of a table with placements, and its per-stage columns (in this order).
PLACED_INT = ("pp", "microbatches", "global_batch", "cp", "vpp", "zero_stage", "ep", "etp")
PLACED_COLUMNS = PLACED_INT + tuple(CODE_COLUMNS) + BOOL_COLUMNS
STAGE_COLUMNS = ("pool", "dp", "tp", "layers", "order", "pool2", "dp2")
PLACEMENT_COLUMNS = ("pool", "dp", "tp", "order", "pool2", "dp2")  # given with ``microbatches``
ORDERS = ("tp-inner", "tp-across")
STAGE_PAD = {"pool": 0, "dp": 1, "tp": 1, "layers": 0, "order": 0, "pool2": 0, "dp2": 0, "recompute": 0}

# GPT-3 175B's global batch in sequences (Brown et al. 2020, Table 2.1): the global batch of a
# space or a strategy where none is given.
DEFAULT_GLOBAL_BATCH = 1536

# Integer strategy columns above this are refused: no cluster, batch or pipeline comes near it, and
# products of a few such values stay inside int64.
INT_COLUMN_MAX = 2**31 - 1
# Sequences a step the command line takes, at most: 2^20 (a billion tokens a step at 1k tokens a sequence, a hundred
# times the largest published); the pipeline simulator's time and memory grow with the micro-batches a step.
GLOBAL_BATCH_MAX = 2**20

# The values of every strategy dimension, one table for the strategy table, the spaces and the
# command line's flags: (lowest, highest) whole numbers (None: no bound), the names of a coded
# column (read in any case), or bool (also read from the words of BOOL_WORDS). A per-stage
# dimension base.J takes the values of its base.
DIMENSION_VALUES: dict[str, tuple | type] = {
    **{name: (1, None) for name in ("dp", "tp", "pp", "cp", "ep", "etp", "micro_batch", "microbatches", "global_batch",
                                    "vpp")},
    "zero_stage": (0, 3), "stage_shift": (None, None), "light_ends": (0, None),
    **CODE_COLUMNS, "stage_recompute": RECOMPUTE, FRAMEWORK: FRAMEWORK_NAMES,
    **{name: bool for name in BOOL_COLUMNS},
}
BOOL_WORDS = {"true": True, "1": True, "false": False, "0": False}


def dimension_values(name: str, values) -> np.ndarray:
    """Values of the strategy dimension ``name`` (DIMENSION_VALUES) as the strategy table's
    numbers: int64, int8 codes or bool; InputError naming ``name`` for a value outside it."""
    kind = DIMENSION_VALUES[name.split(".")[0]]
    values = list(values)
    if kind is bool:
        words = [BOOL_WORDS.get(v.lower()) if isinstance(v, str) else bool(v) if isinstance(v, (bool, np.bool_))
                 else None for v in values]
        if None in words:
            raise InputError(name, "true or false", values[words.index(None)])
        return np.asarray(words, dtype=bool)
    if all(isinstance(x, str) for x in kind):
        codes = [kind.index(str(v).lower()) if str(v).lower() in kind else -1 for v in values]
        if -1 in codes:
            raise InputError(name, "one of " + ", ".join(kind), values[codes.index(-1)])
        return np.asarray(codes, dtype=np.int8)
    for v in values:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise InputError(name, "integers", v)
    lo, hi = kind
    top = INT_COLUMN_MAX if hi is None else hi  # (as the table's own columns: products of a few stay in int64)
    for v in values:
        if (lo is not None and v < lo) or abs(v) > top:
            what = (f"integers in [{lo}, {hi}]" if hi is not None else f"integers >= {lo}, at most {top:,}"
                    if lo is not None else f"integers of at most {top:,} in size")
            raise InputError(name, what, int(v))
    return np.asarray(values, dtype=np.int64)


DEFAULTS: dict[str, object] = {
    "dp": 1, "tp": 1, "pp": 1, "cp": 1, "ep": 1, "etp": 1, "micro_batch": 1, "global_batch": 1, "vpp": 1,
    "zero_stage": 0, "schedule": "1f1b", "recompute": "none", "precision": "bf16",
    "sequence_parallel": False, "overlap_dp": True,
}
PLACED_DEFAULTS: dict[str, object] = {
    **{k: v for k, v in DEFAULTS.items() if k in PLACED_COLUMNS and k not in ("pp", "global_batch")}, "microbatches": 1,
}


def encode(column: str, values, argument: str | None = None) -> np.ndarray:
    """Strings (or codes) of a coded column -> int8 codes; raises InputError naming ``argument`` (default the
    column) on unknowns (and on values that are neither names nor whole-number codes)."""
    names = CODE_COLUMNS[column]
    column = argument or column
    arr = _array(column, values, "one of " + ", ".join(names))
    if arr.dtype.kind in "US":
        lookup = {n: i for i, n in enumerate(names)}
        flat = [lookup.get(str(x).lower(), -1) for x in np.atleast_1d(arr).ravel()]
        out = np.asarray(flat, dtype=np.int8).reshape(arr.shape)
    elif arr.dtype.kind in "iuf" and arr.size and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
        out = np.where((arr >= 0) & (arr < len(names)), arr, -1).astype(np.int8)
    elif arr.dtype.kind == "b" or (arr.dtype.kind in "iuf" and not arr.size):
        out = arr.astype(np.int8)
    else:
        raise InputError(column, "one of " + ", ".join(names), _first(arr))
    bad = (out < 0) | (out >= len(names))
    if np.any(bad):
        got = np.atleast_1d(arr)[np.atleast_1d(bad)][0]
        raise InputError(column, "one of " + ", ".join(names), got.item() if hasattr(got, "item") else got)
    return out


def _first(arr: np.ndarray):
    """The first value of ``arr`` as a plain Python value (for an error message), or its list if empty."""
    if not arr.size:
        return arr.tolist()
    return arr.flat[0].item() if hasattr(arr.flat[0], "item") else arr.flat[0]


def _array(name: str, value, expected: str) -> np.ndarray:
    """np.asarray(value), an object array of plain values as their own dtype; InputError naming
    ``name`` (expected: ``expected``) for nested lists of uneven lengths, which numpy refuses."""
    try:
        arr = np.asarray(value)
        return np.array(arr.tolist()) if arr.dtype.kind == "O" and arr.size else arr
    except (ValueError, TypeError):
        raise InputError(name, expected, value) from None




def decode_modules(codes) -> np.ndarray:
    """recompute_modules bit sets -> their names, comma-separated ("" for 0: the framework's own policy)."""
    codes = np.asarray(codes)
    uniq, inverse = np.unique(codes, return_inverse=True)
    return np.asarray([_codes.module_names(x) for x in uniq], dtype=object)[inverse.reshape(codes.shape)]


def decode(column: str, codes) -> np.ndarray:
    return np.asarray(NAMES_OF_CODES[column], dtype=object)[np.asarray(codes)]


def framework_codes(value, n: int | None = None, argument: str = FRAMEWORK) -> np.ndarray:
    """Framework profiles (names, aliases of costmodel._frameworks.FRAMEWORK_ALIASES, Framework rows) or their
    codes -> int8 codes into FRAMEWORK_NAMES, broadcast to (n,) where ``n`` is given; InputError naming
    ``argument`` for an unknown name or a code outside the table."""
    expected = "one of " + ", ".join(FRAMEWORK_NAMES)
    if not isinstance(value, (str, bytes)) and hasattr(value, "name") and hasattr(value, "schedules"):
        value = value.name  # one Framework row
    arr = _array(argument, value, expected)
    if arr.dtype.kind in "USO":
        names, inverse = np.unique(arr.astype(str), return_inverse=True)  # a handful of names, however many rows
        if "" in names:  # (framework_preset reads no name as the default: a column names every row's)
            raise InputError(argument, expected, "")
        lookup = np.array([FRAMEWORK_NAMES.index(framework_preset(str(x), argument).name) for x in names],
                          dtype=np.int8)
        out = lookup[inverse.reshape(arr.shape)] if names.size else np.zeros(arr.shape, dtype=np.int8)
    elif arr.dtype.kind in "iu" or (arr.dtype.kind == "f" and not arr.size):
        bad = (arr < 0) | (arr >= len(FRAMEWORK_NAMES))
        if np.any(bad):
            raise InputError(argument, f"{expected} (or codes 0 to {len(FRAMEWORK_NAMES) - 1})", _first(arr[bad]))
        out = arr.astype(np.int8)
    else:
        raise InputError(argument, expected, _first(arr))
    return out if n is None else np.ascontiguousarray(_n_rows(argument, out, n, "names"))


def module_codes(value, n: int, argument: str = MODULES) -> np.ndarray:
    """(n,) int64 recompute_modules bit sets from names (comma- or space-separated, as costmodel._codes.module_code
    reads them; "" is 0) or integers; InputError naming ``argument`` for a name that is no module."""
    expected = "Megatron-Core recompute modules among " + ", ".join(RECOMPUTE_MODULES) + " (comma-separated)"
    arr = _array(argument, value, expected)
    if arr.dtype.kind in "iu":
        codes = arr.astype(np.int64)
        bad = (codes < 0) | (codes >= 1 << len(RECOMPUTE_MODULES))
        if np.any(bad):
            raise InputError(argument, expected + " or their bit set", _first(codes[bad]))
    elif arr.dtype.kind in "USO":
        names, inverse = np.unique(arr.astype(str), return_inverse=True)
        lookup = [_codes.module_code(x) for x in names]
        if None in lookup:
            raise InputError(argument, expected, str(names[lookup.index(None)]))
        codes = np.asarray(lookup, dtype=np.int64)[inverse.reshape(arr.shape)] if names.size else arr.astype(np.int64)
    else:
        raise InputError(argument, expected, _first(arr))
    return np.ascontiguousarray(_n_rows(argument, codes, n, "names"))


def int_column(name: str, value, n: int) -> np.ndarray:
    """(n,) int64 column of an integer strategy dimension, checked: whole numbers, >= 1 (ZeRO
    stage: 0 to 3) and at most INT_COLUMN_MAX; InputError naming the column otherwise."""
    arr = _n_rows(name, _array(name, value, "integers"), n, "integers")
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)) and np.all(
                np.abs(arr) <= INT_COLUMN_MAX):
            arr = arr.astype(np.int64)
        else:
            raise InputError(name, "integers", _first(arr))
    lo, hi = DIMENSION_VALUES.get(name, (1, None))
    hi_ = INT_COLUMN_MAX if hi is None else hi
    bad = (arr < lo) | (arr > hi_)
    if np.any(bad):
        rng = f"integers in [{lo}, {hi_}]" if hi is not None else f"integers >= {lo} (at most {INT_COLUMN_MAX:,})"
        raise InputError(name, rng, int(arr[bad][0]))
    return np.ascontiguousarray(arr, dtype=np.int64)


def _n_rows(name: str, arr: np.ndarray, n: int, expected: str) -> np.ndarray:
    """``arr`` broadcast to (n,); InputError naming ``name`` where its shape does not allow it."""
    try:
        return np.broadcast_to(arr, (n,))
    except ValueError:
        raise InputError(name, f"{expected}, one per row", arr.tolist()) from None


def bool_column(name: str, value, n: int) -> np.ndarray:
    """(n,) bool column; booleans, 0 and 1, and the strings true/false/1/0 (any case) accepted,
    others an InputError."""
    arr = _array(name, value, "true or false")
    if arr.dtype.kind in "US":
        low = np.char.lower(arr.astype(str))
        if not np.all(np.isin(low, list(BOOL_WORDS))):
            raise InputError(name, "true or false", _first(arr))
        arr = np.isin(low, [w for w, v in BOOL_WORDS.items() if v])
    elif arr.dtype.kind != "b" and not (arr.dtype.kind in "iuf" and np.all((arr == 0) | (arr == 1))):
        raise InputError(name, "true or false", _first(arr))
    return np.ascontiguousarray(_n_rows(name, arr.astype(bool), n, "true or false"))


def typed_columns(merged: Mapping, n: int, *, ints, codes, bools) -> dict[str, np.ndarray]:
    """(n,) checked columns of ``merged``: integers (int_column), strings encoded to codes, and
    booleans (bool_column)."""
    out = {name: int_column(name, merged[name], n) for name in ints}
    for name in codes:
        out[name] = np.ascontiguousarray(_n_rows(name, encode(name, merged[name]), n, "names"))
    for name in bools:
        out[name] = bool_column(name, merged[name], n)
    return out


class StageColumns(Mapping):
    """A table's per-stage columns: read as (N, S) arrays (int64; recompute int8 codes, read-only,
    made on first read), stored stage-major (S, N) in int8 or int16 where the values fit (pools,
    degrees, layers), so that taking a block's rows and its stage-major view (costmodel._stages)
    move an eighth or a quarter of the bytes. ``major(k, S)``: the first S stage rows as a C-ordered (S, N) array."""

    def __init__(self, stages: Mapping[str, np.ndarray | None] = (), major: dict | None = None):
        self._major = major if major is not None else {k: _compact(k, v) for k, v in dict(stages).items()
                                                        if v is not None}
        self._wide: dict[str, np.ndarray] = {}

    def __getitem__(self, k: str) -> np.ndarray:
        if k not in self._wide:
            a = self._major[k]
            self._wide[k] = w = np.ascontiguousarray(a.T, dtype=np.int8 if k == "recompute" else np.int64)
            w.flags.writeable = False
        return self._wide[k]

    def __iter__(self):
        return iter(self._major)

    def __contains__(self, k) -> bool:
        return k in self._major

    def __len__(self) -> int:
        return len(self._major)

    @property
    def width(self) -> int | None:
        return max((a.shape[0] for a in self._major.values()), default=None)

    def major(self, k: str, S: int | None = None) -> np.ndarray:
        return np.ascontiguousarray(self._major[k][:S], dtype=np.int8 if k == "recompute" else np.int64)

    def raw(self, k: str) -> np.ndarray:
        """(S, N) as stored (int8, int16 or int64)."""
        return self._major[k]

    def take(self, rows, by_number: bool, width: int | None = None) -> StageColumns:
        pick = (lambda v: np.take(v[:width], rows, axis=1)) if by_number else (lambda v: v[:width, rows])  # noqa: E731
        return StageColumns(major={k: pick(v) for k, v in self._major.items()})

    def without(self, *keys: str) -> StageColumns:
        return StageColumns(major={k: v for k, v in self._major.items() if k not in keys})


def _compact(name: str, value) -> np.ndarray:
    """(S, N) stage-major copy of an (N, S) per-stage column, int8 or int16 where its values fit."""
    a = np.asarray(value)
    lo, hi = (int(a.min()), int(a.max())) if a.size else (0, 0)
    fits = [t for t in (np.int8, np.int16) if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max]
    return np.array(a.T, dtype=np.int8 if name == "recompute" else (fits or [np.int64])[0], order="C")


@dataclasses.dataclass(frozen=True)
class StrategyTable:
    """N strategies as columns (module docstring). Build with :meth:`from_columns` (or
    :func:`hetero_from_mapping`); do not mutate the arrays."""

    columns: Mapping[str, np.ndarray]  # row columns, (N,)
    stages: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)  # per stage, (N, S); None: absent

    def __post_init__(self):
        if not isinstance(self.stages, StageColumns):
            object.__setattr__(self, "stages", StageColumns(self.stages))

    @classmethod
    def from_columns(cls, stage_layers=None, stage_recompute=None, **cols) -> StrategyTable:
        """Broadcast scalars and lists to N rows (per-stage columns to (N, S)), encode strings,
        check types and ranges. A table with ``microbatches`` or any placement column gets
        every placement column (absent ones from the row's dp, tp or their defaults)."""
        per_stage = {k: cols.pop("stage_" + k) for k in PLACEMENT_COLUMNS if cols.get("stage_" + k) is not None}
        framework = cols.pop(FRAMEWORK, None)  # optional (None: absent, the evaluate call's framework)
        modules = cols.pop(MODULES, None)  # optional (None: absent, the framework's own selective policy)
        cols = {k: v for k, v in cols.items() if not (k.startswith("stage_") and v is None)}
        placed = bool(per_stage) or "microbatches" in cols
        allowed = PLACED_COLUMNS + ("dp", "tp") if placed else COLUMNS
        unknown = set(cols) - set(allowed)
        if unknown:
            raise InputError("strategy", "columns among " + ", ".join(allowed), sorted(unknown, key=str)[0])
        if stage_layers is not None:
            per_stage["layers"] = stage_layers
        elif placed:
            raise InputError("stage_layers", "layers per stage (a table with placements lists them)", None)
        arrs = {k: _stage_array(k, v) for k, v in per_stage.items()}
        if stage_recompute is not None:
            sr = encode("recompute", stage_recompute, "stage_recompute")
            arrs["recompute"] = sr[None, :] if sr.ndim == 1 else sr
        shapes = {a.shape for a in arrs.values()}
        if any(len(s) != 2 for s in shapes) or (placed and len({s[1] for s in shapes}) > 1):
            raise InputError("strategy", "per-stage columns of one shape (N, S)", sorted(shapes))
        merged = {**(PLACED_DEFAULTS if placed else DEFAULTS), **cols}
        sized = {k: _array(k, v, "a value, or one value per row") for k, v in merged.items()}  # (ragged lists refused)
        lengths = {a.size for a in sized.values() if a.ndim > 0} | ({s[0] for s in shapes} - {1})
        for opt in (framework, modules):
            if opt is not None and np.ndim(opt) > 0:
                lengths.add(np.size(opt))
        if len(lengths) > 1:
            raise InputError("strategy", "columns of one length", sorted(lengths))
        n = lengths.pop() if lengths else 1
        stages = {k: np.broadcast_to(a, (n, a.shape[1])) for k, a in arrs.items()}  # (StageColumns copies them)
        if placed:
            S = stages["layers"].shape[1]
            for k in PLACEMENT_COLUMNS:
                if k not in stages:
                    value = int_column(k, merged.pop(k, 1), n)[:, None] if k in ("dp", "tp") else 0
                    stages[k] = np.broadcast_to(np.asarray(value, dtype=np.int64), (n, S))
            if "pp" not in merged:
                merged["pp"] = (stages["layers"] > 0).sum(axis=1)
            if "global_batch" not in merged:
                raise InputError("global_batch", "the global batch in sequences", None)
        out = typed_columns(merged, n, ints=PLACED_INT if placed else INT_COLUMNS, codes=CODE_COLUMNS,
                            bools=BOOL_COLUMNS)
        if framework is not None:
            out[FRAMEWORK] = framework_codes(framework, n)
        if modules is not None:
            out[MODULES] = module_codes(modules, n)
        pp = int(out["pp"].max()) if n else 0
        for k, a in stages.items():
            if a.shape[1] < pp:
                raise InputError("stage_" + k, f"at least pp={pp} stage columns", a.shape[1])
        if placed:
            d2 = stages["dp2"]
            for k, bad, what in (("layers", stages["layers"] < 0, "layer counts >= 0"),
                                 *((k, stages[k] < 1, "degrees >= 1 on every stage") for k in ("dp", "tp")),
                                 *((k, stages[k] < 0, "pool indices >= 0") for k in ("pool", "pool2")),
                                 ("dp2", (d2 < 0) | ((d2 >= stages["dp"]) & (d2 > 0)),
                                  "0 <= dp2 < the stage's dp (replicas on the second pool)"),
                                 ("order", (stages["order"] < 0) | (stages["order"] >= len(ORDERS)),
                                  "0 (tp-inner) or 1 (tp-across)")):
                if np.any(bad):
                    raise InputError("stage_" + k, what, int(stages[k][bad][0]))
        elif "layers" in stages and np.any(stages["layers"] < 0):
            raise InputError("stage_layers", "layer counts >= 0", int(stages["layers"].min()))
        return cls(columns=out, stages=stages)

    def as_placements(self, layers: int) -> StrategyTable:
        """The same strategies with their placements (every stage on pool 0, the row's dp and
        tp, Megatron's order) and micro-batches per iteration m = B // (dp b), at least 1."""
        if self.placed:
            return self
        c, p = self.columns, self.columns["pp"]
        S = int(p.max())
        active = np.arange(S)[None, :] < p[:, None]
        sl = self.stage_layers[:, :S] if self.stage_layers is not None else np.where(active, (layers // p)[:, None], 0)
        m = np.maximum(c["global_batch"] // (c["dp"] * c["micro_batch"]), 1)
        return StrategyTable.from_columns(
            stage_pool=np.zeros((len(self), S), dtype=np.int64), stage_dp=np.where(active, c["dp"][:, None], 1),
            stage_tp=np.where(active, c["tp"][:, None], 1), stage_layers=sl,
            stage_recompute=None if self.stage_recompute is None else self.stage_recompute[:, :S], microbatches=m,
            **{k: c[k] for k in (*PLACED_COLUMNS, FRAMEWORK, MODULES) if k in c})

    def __len__(self) -> int:
        return len(self.columns["pp"])

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name] if name in self.columns else self.stages[name]

    def __getattr__(self, name: str) -> np.ndarray:
        cols = self.__dict__.get("columns")
        if cols is not None and name in cols:
            return cols[name]
        raise AttributeError(name)

    @property
    def placed(self) -> bool:
        """Rows with placements: per-stage pools and degrees, ``microbatches`` per iteration."""
        return "microbatches" in self.columns

    @property
    def stage_layers(self) -> np.ndarray | None:
        return self.stages["layers"] if "layers" in self.stages else None

    @property
    def stage_recompute(self) -> np.ndarray | None:
        return self.stages["recompute"] if "recompute" in self.stages else None

    @property
    def num_stages(self) -> int:
        """Stage columns S of the per-stage arrays (the deepest pipeline where there are none)."""
        width = self.stages.width
        return int(self["pp"].max(initial=0)) if width is None else width

    @property
    def num_gpus(self) -> np.ndarray:
        """(N,) GPUs of each row: dp tp pp cp, or with placements dp tp cp summed over its stages."""
        if not self.placed:
            return self["dp"] * self["tp"] * self["pp"] * self["cp"]
        on = np.arange(self.num_stages)[None, :] < self["pp"][:, None]
        return np.sum(self.stages["dp"] * self.stages["tp"] * on, axis=1) * self["cp"]

    def take(self, idx, width: int | None = None) -> StrategyTable:
        """Rows ``idx`` (numbers, a mask or a slice); ``width``: their first stage columns only (stages past
        every taken row's pp and holding no layers, which the evaluator does not read)."""
        num = isinstance(idx, np.ndarray) and idx.dtype.kind in "iu"  # rows by number: np.take
        rows = (lambda v: np.take(v, idx, axis=0)) if num else (lambda v: v[idx])  # noqa: E731
        return StrategyTable({k: rows(v) for k, v in self.columns.items()}, self.stages.take(idx, num, width))

    def readable(self) -> dict[str, np.ndarray]:
        """Row columns with names instead of codes (for people and for Parquet)."""
        return {k: decode(k, v) if k in NAMES_OF_CODES else decode_modules(v) if k == MODULES else v
                for k, v in self.columns.items()}

    def row(self, i: int, pool_names: list[str] | None = None) -> dict[str, object]:
        """Row i as plain Python values (strings for coded columns) with stage_layers /
        stage_recompute lists where given; a placed row's stages as a ``stages`` list of dicts
        (pool names from ``pool_names``), the format of hetero_from_mapping."""
        r = {k: v[i].item() if hasattr(v[i], "item") else v[i] for k, v in self.readable().items()}
        pp, st = int(self.columns["pp"][i]), {k: self.stages.raw(k)[:, i] for k in self.stages}
        if not self.placed:
            if "layers" in st:
                r["stage_layers"] = [int(x) for x in st["layers"][:pp]]
            if "recompute" in st:
                r["stage_recompute"] = [RECOMPUTE[x] for x in st["recompute"][:pp]]
            return r
        name = lambda p: pool_names[p] if pool_names and p < len(pool_names) else p  # noqa: E731
        stages = []
        for j in range(pp):
            s = {"pool": name(int(st["pool"][j])), "dp": int(st["dp"][j]), "tp": int(st["tp"][j]),
                 "layers": int(st["layers"][j]), "order": ORDERS[int(st["order"][j])]}
            if st["dp2"][j] > 0 and st["pool2"][j] != st["pool"][j]:
                s.update(pool2=name(int(st["pool2"][j])), dp2=int(st["dp2"][j]))
            if "recompute" in st:
                s["recompute"] = RECOMPUTE[int(st["recompute"][j])]
            stages.append(s)
        r["stages"] = stages
        return r

    @staticmethod
    def concat(tables: list[StrategyTable]) -> StrategyTable:
        """Rows of ``tables`` in turn; per-stage columns padded to the widest (STAGE_PAD). A
        stage_recompute some tables lack is their row's recompute on every stage."""
        S = max(t.num_stages for t in tables)
        if len({FRAMEWORK in t.columns for t in tables}) > 1:
            raise ValueError("concat: a framework column in some tables only")
        keys = dict.fromkeys(k for t in tables for k in t.columns)  # (recompute_modules absent: 0, the default)
        cols = {k: np.concatenate([t.columns[k] if k in t.columns else np.zeros(len(t), dtype=np.int64)
                                   for t in tables]) for k in keys}
        stages = {}
        for k in dict.fromkeys(k for t in tables for k in t.stages):
            parts = [t.stages.get(k) for t in tables]
            if k == "recompute":
                parts = [np.broadcast_to(t["recompute"][:, None], (len(t), t.num_stages)) if x is None else x
                         for t, x in zip(tables, parts, strict=True)]
            elif any(x is None for x in parts):
                raise ValueError(f"concat: stage_{k} present in some tables only")
            stages[k] = np.concatenate([np.pad(x, ((0, 0), (0, S - x.shape[1])), constant_values=STAGE_PAD[k])
                                        for x in parts])
        return StrategyTable(cols, stages)


def _holds_bool(value) -> bool:
    """Whether a value or the lists it nests hold a bool (true / false where a count belongs)."""
    if isinstance(value, (bool, np.bool_)):
        return True
    return isinstance(value, (list, tuple)) and any(_holds_bool(x) for x in value)


def _stage_array(name: str, value) -> np.ndarray:
    """(N, S) or (1, S) int64 array of a per-stage column; InputError unless whole numbers."""
    if _holds_bool(value):  # (numpy reads [true, 31] as [1, 31])
        raise InputError("stage_" + name, "integers per stage", value)
    a = _array("stage_" + name, value, "one value per stage, (N, S)")
    a = a[None, :] if a.ndim == 1 else a
    if a.ndim != 2:
        raise InputError("stage_" + name, "one value per stage, (N, S)", np.shape(value))
    if a.dtype.kind not in "iu" and not (a.dtype.kind == "f" and np.all(np.isfinite(a)) and np.all(a == np.round(a))):
        raise InputError("stage_" + name, "integers per stage", a.ravel()[:4].tolist())
    if a.size and np.abs(a).max() > INT_COLUMN_MAX:
        raise InputError("stage_" + name, f"integers per stage of at most {INT_COLUMN_MAX:,}", a.ravel()[:4].tolist())
    return a.astype(np.int64, copy=False)


def hetero_from_mapping(data: Mapping, pool_names: list[str], argument: str = "--strategy") -> StrategyTable:
    """One strategy from a file: global keys plus ``stages``: [{pool, dp, tp, layers[, order,
    recompute, pool2, dp2]}, ...]; pools by name (or index); dp2 of the stage's dp replicas run
    on pool2."""
    stages = data.get("stages")
    if not isinstance(stages, list) or not stages:
        raise InputError(f"{argument} stages", "a non-empty list of {pool, dp, tp, layers}", stages)
    allowed = {"pool", "dp", "tp", "layers", "order", "recompute", "pool2", "dp2"}
    cols = {k: [] for k in ("pool", "dp", "tp", "layers", "order", "recompute", "pool2", "dp2")}
    for j, st in enumerate(stages):
        where = f"{argument} stages[{j}]"
        if not isinstance(st, Mapping):
            raise InputError(where, "a mapping with pool, dp, tp, layers", st)
        bad = set(st) - allowed
        if bad:
            raise InputError(where, "keys among " + ", ".join(sorted(allowed)), sorted(bad, key=str)[0])
        for req in ("pool", "layers"):
            if req not in st:
                raise InputError(f"{where}.{req}", "a value", None)
        for key in ("pool", "pool2"):
            pool = st.get(key, st["pool"])
            if isinstance(pool, str):
                if pool not in pool_names:
                    raise InputError(f"{where}.{key}", "one of " + ", ".join(pool_names), pool)
                pool = pool_names.index(pool)
            elif isinstance(pool, bool) or not isinstance(pool, int) or not 0 <= pool < len(pool_names):
                raise InputError(f"{where}.{key}", f"a pool name or index below {len(pool_names)}", pool)
            cols[key].append(pool)
        for k in ("dp", "tp", "layers", "dp2"):
            v = st.get(k, 0 if k == "dp2" else 1)
            low = 0 if k in ("layers", "dp2") else 1
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise InputError(f"{where}.{k}", f"an integer >= {low}", v)
            cols[k].append(v)
        if cols["dp2"][-1] >= cols["dp"][-1] and cols["dp2"][-1] > 0:
            raise InputError(f"{where}.dp2", f"fewer than the stage's dp={cols['dp'][-1]} replicas", cols["dp2"][-1])
        if ("pool2" in st) != ("dp2" in st):
            raise InputError(where, "pool2 and dp2 together (dp2 of the dp replicas on pool2)", sorted(st))
        o = st.get("order", "tp-inner")
        if o not in ORDERS:
            raise InputError(f"{where}.order", "tp-inner or tp-across", o)
        cols["order"].append(ORDERS.index(o))
        if "recompute" in st and not isinstance(st["recompute"], str):
            raise InputError(f"{where}.recompute", "one of " + ", ".join(RECOMPUTE), st["recompute"])
        cols["recompute"].append(st.get("recompute", data.get("recompute", "none")))
    glob = {k: v for k, v in data.items() if k != "stages"}
    unknown = set(glob) - set(PLACED_COLUMNS)
    if unknown:
        raise InputError(argument, "global keys among " + ", ".join(PLACED_COLUMNS) + " and stages",
                         sorted(unknown, key=str)[0])
    for k in sorted(set(glob) & set(CODE_COLUMNS)):  # names, as a file writes them: the codes are the table's own
        if not isinstance(glob[k], str):
            raise InputError(f"{argument} {k}", "one of " + ", ".join(CODE_COLUMNS[k]), glob[k])
    if "pp" in glob and (isinstance(glob["pp"], bool) or glob["pp"] != len(stages)):
        raise InputError(f"{argument} pp", f"the number of stages listed, {len(stages)} (or no pp)", glob["pp"])
    glob["pp"] = len(stages)
    sr = cols["recompute"] if any("recompute" in st for st in stages) else None
    return StrategyTable.from_columns(stage_layers=[cols["layers"]], stage_recompute=None if sr is None else [sr],
                                      **{f"stage_{k}": [cols[k]] for k in PLACEMENT_COLUMNS},
                                      **{k: [v] for k, v in glob.items()})
