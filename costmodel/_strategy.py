"""StrategyTable: N strategies, one numpy column per dimension; strings become codes here.

Columns (all shape (N,)):
    dp, tp, pp, cp            data, tensor, pipeline and context parallel degrees
    ep                        expert parallel degree (1 for a dense model): the experts of an MoE
                              layer are split over ep ranks folded into the dp x cp x tp ranks of
                              a pipeline stage (costmodel._evaluate, "Expert parallelism")
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
Optional (per pipeline stage, shape (N, S) with S >= max pp, padded past pp):
    stage_layers              layers per pipeline stage (zero past pp); absent means uniform
                              (layers / pp per stage). Row sums must equal the model's layers.
    stage_recompute           recompute code per stage (overrides ``recompute`` where given)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from costmodel._errors import InputError
from costmodel._hardware import PRECISIONS

SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "hanayo")
RECOMPUTE = ("none", "selective", "full")

INT_COLUMNS = ("dp", "tp", "pp", "cp", "ep", "etp", "micro_batch", "global_batch", "vpp", "zero_stage")
CODE_COLUMNS = {"schedule": SCHEDULES, "recompute": RECOMPUTE, "precision": PRECISIONS}
BOOL_COLUMNS = ("sequence_parallel", "overlap_dp")
COLUMNS = INT_COLUMNS + tuple(CODE_COLUMNS) + BOOL_COLUMNS

# GPT-3 175B's global batch in sequences (Brown et al. 2020, Table 2.1): the global batch of a
# space or a strategy where none is given.
DEFAULT_GLOBAL_BATCH = 1536

# The values of every strategy dimension, one table for the strategy table, the spaces and the
# command line's flags: (lowest, highest) whole numbers (None: no bound), the names of a coded
# column (read in any case), or bool (also read from the words of BOOL_WORDS). A per-stage
# dimension base.J takes the values of its base.
DIMENSION_VALUES: dict[str, tuple | type] = {
    **{name: (1, None) for name in ("dp", "tp", "pp", "cp", "ep", "etp", "micro_batch", "microbatches", "global_batch", "vpp")},
    "zero_stage": (0, 3), "stage_shift": (None, None), "light_ends": (0, None),
    **CODE_COLUMNS, "stage_recompute": RECOMPUTE,
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
    arr = np.asarray(values, dtype=np.int64)
    lo, hi = kind
    bad = ((arr < lo) if lo is not None else False) | ((arr > hi) if hi is not None else False)
    if np.any(bad):
        raise InputError(name, f"integers in [{lo}, {hi}]" if hi is not None else f"integers >= {lo}",
                         int(arr[bad][0]))
    return arr


DEFAULTS: dict[str, object] = {
    "dp": 1, "tp": 1, "pp": 1, "cp": 1, "ep": 1, "etp": 1, "micro_batch": 1, "global_batch": 1, "vpp": 1,
    "zero_stage": 0, "schedule": "1f1b", "recompute": "none", "precision": "bf16",
    "sequence_parallel": False, "overlap_dp": True,
}


def encode(column: str, values) -> np.ndarray:
    """Strings (or codes) of a coded column -> int8 codes; raises InputError on unknowns."""
    names = CODE_COLUMNS[column]
    arr = np.asarray(values)
    if arr.dtype.kind in "US":
        lookup = {n: i for i, n in enumerate(names)}
        flat = [lookup.get(str(x).lower(), -1) for x in np.atleast_1d(arr).ravel()]
        out = np.asarray(flat, dtype=np.int8).reshape(arr.shape)
    else:
        out = arr.astype(np.int8)
    bad = (out < 0) | (out >= len(names))
    if np.any(bad):
        got = np.atleast_1d(arr)[np.atleast_1d(bad)][0]
        raise InputError(column, "one of " + ", ".join(names), got.item() if hasattr(got, "item") else got)
    return out


def decode(column: str, codes) -> np.ndarray:
    return np.asarray(CODE_COLUMNS[column], dtype=object)[np.asarray(codes)]


def int_column(name: str, value, n: int) -> np.ndarray:
    """(n,) int64 column of an integer strategy dimension, checked: whole numbers, >= 1 (ZeRO
    stage: 0 to 3); InputError naming the column otherwise."""
    arr = np.broadcast_to(np.asarray(value), (n,))
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise InputError(name, "integers", arr.flat[0] if n else arr)
    lo, hi = DIMENSION_VALUES.get(name, (1, None))
    bad = (arr < lo) | ((arr > hi) if hi is not None else False)
    if np.any(bad):
        rng = f"integers in [{lo}, {hi}]" if hi is not None else f"integers >= {lo}"
        raise InputError(name, rng, int(arr[bad][0]))
    return np.ascontiguousarray(arr, dtype=np.int64)


def bool_column(name: str, value, n: int) -> np.ndarray:
    """(n,) bool column; strings true/false/1/0 (any case) accepted, others an InputError."""
    arr = np.asarray(value)
    if arr.dtype.kind in "US":
        low = np.char.lower(arr.astype(str))
        if not np.all(np.isin(low, list(BOOL_WORDS))):
            raise InputError(name, "true or false", arr.flat[0])
        arr = np.isin(low, [w for w, v in BOOL_WORDS.items() if v])
    return np.ascontiguousarray(np.broadcast_to(arr.astype(bool), (n,)))


def typed_columns(merged: Mapping, n: int, *, ints, codes, bools) -> dict[str, np.ndarray]:
    """(n,) checked columns of ``merged``: integers (int_column), strings encoded to codes, and
    booleans (bool_column); the one conversion StrategyTable and HeteroTable share."""
    out = {name: int_column(name, merged[name], n) for name in ints}
    for name in codes:
        out[name] = np.ascontiguousarray(np.broadcast_to(encode(name, merged[name]), (n,)))
    for name in bools:
        out[name] = bool_column(name, merged[name], n)
    return out


@dataclasses.dataclass(frozen=True)
class StrategyTable:
    """N strategies as columns. Build with :meth:`from_columns`; do not mutate the arrays."""

    columns: Mapping[str, np.ndarray]
    stage_layers: np.ndarray | None = None
    stage_recompute: np.ndarray | None = None

    @classmethod
    def from_columns(cls, stage_layers=None, stage_recompute=None, **cols) -> StrategyTable:
        """Broadcast scalars and lists to N rows, encode strings, check types and ranges."""
        unknown = set(cols) - set(COLUMNS)
        if unknown:
            raise InputError("strategy", "columns among " + ", ".join(COLUMNS), sorted(unknown)[0])
        merged = {**DEFAULTS, **cols}
        lengths = {np.size(v) for v in merged.values() if np.ndim(v) > 0}
        if stage_layers is not None:
            lengths.add(np.shape(stage_layers)[0])
        if len(lengths) > 1:
            raise InputError("strategy", "columns of one length", sorted(lengths))
        n = lengths.pop() if lengths else 1
        out = typed_columns(merged, n, ints=INT_COLUMNS, codes=CODE_COLUMNS, bools=BOOL_COLUMNS)
        sl = sr = None
        if stage_layers is not None:
            sl = np.asarray(stage_layers, dtype=np.int64)
            if sl.ndim == 1:
                sl = np.broadcast_to(sl, (n, sl.size))
            if sl.ndim != 2 or sl.shape[0] != n or np.any(sl < 0):
                raise InputError("stage_layers", f"an ({n}, S) array of layer counts >= 0", np.shape(stage_layers))
            if sl.shape[1] < out["pp"].max():
                raise InputError("stage_layers", f"at least pp={out['pp'].max()} stage columns", sl.shape[1])
            sl = np.ascontiguousarray(sl)
        if stage_recompute is not None:
            sr = encode("recompute", stage_recompute)
            if sr.ndim == 1:
                sr = np.broadcast_to(sr, (n, sr.size))
            if sr.ndim != 2 or sr.shape[0] != n or sr.shape[1] < out["pp"].max():
                raise InputError("stage_recompute", f"an ({n}, S>=pp) array", np.shape(stage_recompute))
            sr = np.ascontiguousarray(sr)
        return cls(columns=out, stage_layers=sl, stage_recompute=sr)

    def __len__(self) -> int:
        return len(self.columns["dp"])

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def __getattr__(self, name: str) -> np.ndarray:
        cols = self.__dict__.get("columns")
        if cols is not None and name in cols:
            return cols[name]
        raise AttributeError(name)

    @property
    def num_gpus(self) -> np.ndarray:
        return self["dp"] * self["tp"] * self["pp"] * self["cp"]

    def take(self, idx) -> StrategyTable:
        sl = None if self.stage_layers is None else self.stage_layers[idx]
        sr = None if self.stage_recompute is None else self.stage_recompute[idx]
        return StrategyTable({k: v[idx] for k, v in self.columns.items()}, sl, sr)

    def readable(self) -> dict[str, np.ndarray]:
        """Columns with names instead of codes (for people and for Parquet)."""
        return {k: decode(k, v) if k in CODE_COLUMNS else v for k, v in self.columns.items()}

    def row(self, i: int) -> dict[str, object]:
        """Row i as plain Python values (strings for coded columns)."""
        r = {k: v[i].item() if hasattr(v[i], "item") else v[i] for k, v in self.readable().items()}
        pp = int(self.columns["pp"][i])
        if self.stage_layers is not None:
            r["stage_layers"] = [int(x) for x in self.stage_layers[i, :pp]]
        if self.stage_recompute is not None:
            r["stage_recompute"] = [RECOMPUTE[x] for x in self.stage_recompute[i, :pp]]
        return r

    @staticmethod
    def concat(tables: list[StrategyTable]) -> StrategyTable:
        cols = {k: np.concatenate([t.columns[k] for t in tables]) for k in COLUMNS}
        extras = []
        for attr in ("stage_layers", "stage_recompute"):
            parts = [getattr(t, attr) for t in tables]
            if all(x is None for x in parts):
                extras.append(None)
                continue
            if any(x is None for x in parts):
                raise ValueError(f"concat: {attr} present in some tables only")
            width = max(x.shape[1] for x in parts)
            extras.append(np.concatenate([np.pad(x, ((0, 0), (0, width - x.shape[1]))) for x in parts]))
        return StrategyTable(cols, *extras)
