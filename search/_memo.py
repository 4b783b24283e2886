"""Bookkeeping shared by the MCMC and TPE searchers: point keys, a sorted memo of costs, the
cost of a told row, and matching told rows back to the points that were asked.

A *key* names one point of a Space: its grid index (int64) where the space has fewer than
2**63 points, else its digits as raw bytes (a numpy void scalar per row). Both sort, so a memo
is two sorted arrays searched with np.searchsorted: no Python dict, no loop over rows.
"""

from __future__ import annotations

import numpy as np

from costmodel import REASONS, Metrics, StrategyTable
from costmodel._sorted_memo import Memo
from search._base import objective_values

_OOM = REASONS.index("out_of_memory")
_COLUMN_ORDER = ("dp", "tp", "pp", "cp", "ep", "etp", "micro_batch", "global_batch", "vpp", "zero_stage", "schedule",
                 "recompute", "precision", "sequence_parallel", "overlap_dp")


def point_keys(space, digits: np.ndarray) -> np.ndarray:
    """(N, D) digits -> (N,) keys: int64 grid indices, or void rows where the space is too large."""
    digits = np.asarray(digits, dtype=np.int64)
    if space.size < 2**63:
        return np.asarray(space.index_of(digits), dtype=np.int64)
    narrow = np.uint8 if int(np.max(space.radices, initial=1)) <= 256 else np.int64
    raw = np.ascontiguousarray(digits.astype(narrow))
    return raw.view(np.dtype((np.void, raw.shape[1] * raw.itemsize))).ravel()


def keys_to_plain(keys: np.ndarray) -> np.ndarray:
    """Keys as a plain integer array for state_dict: int64 (N,) or uint8 (N, bytes)."""
    if keys.dtype.kind == "V":
        return np.frombuffer(keys.tobytes(), dtype=np.uint8).reshape(len(keys), keys.dtype.itemsize).copy()
    return np.asarray(keys, dtype=np.int64).copy()


def keys_from_plain(arr) -> np.ndarray:
    arr = np.asarray(arr)
    if arr.ndim == 2:
        raw = np.ascontiguousarray(arr.astype(np.uint8))
        return raw.view(np.dtype((np.void, raw.shape[1]))).ravel()
    return arr.astype(np.int64)


def row_keys(table: StrategyTable, num_layers: int, width: int) -> np.ndarray:
    """(N,) void keys naming each row's strategy by its column values, so that a table rebuilt
    elsewhere (another process, Parquet) matches the table that was asked. Per-stage columns
    are expanded to ``width`` stages (uniform layers / the row's recompute where absent); the framework column
    is part of the key (-1 where the table has none): a strategy under two frameworks is two points."""
    if hasattr(table, "row_keys"):  # a table that names its own rows (search.PiperSpace's)
        return table.row_keys()
    if table.placed:  # its row and placement columns
        return _placed_row_keys(table, width)
    n = len(table)
    pp = table["pp"]
    cols = [np.asarray(table[c]).astype(np.int64) for c in _COLUMN_ORDER] + [_framework_key(table)]
    stage = np.arange(width)[None, :] < pp[:, None]  # (N, W)
    layers = (np.where(stage, (num_layers // pp)[:, None], 0) if table.stage_layers is None
              else _stage_cols(table.stage_layers, stage, width))
    rec = (np.where(stage, table["recompute"][:, None].astype(np.int64), 0) if table.stage_recompute is None
           else _stage_cols(table.stage_recompute, stage, width))
    mat = np.ascontiguousarray(np.concatenate([np.stack(cols, axis=1), layers, rec], axis=1).astype(np.int64))
    return mat.view(np.dtype((np.void, mat.shape[1] * 8))).reshape(n)


def _framework_key(table: StrategyTable) -> np.ndarray:
    """(N,) int64 framework codes of the rows, -1 where the table carries none."""
    codes = table.columns.get("framework")
    return np.full(len(table), -1, dtype=np.int64) if codes is None else codes.astype(np.int64)


def _stage_cols(a: np.ndarray, stage: np.ndarray, width: int) -> np.ndarray:
    """(N, width) int64 per-stage values, cut or zero-padded to ``width``, zero where ``stage`` is not."""
    a = a[:, :width].astype(np.int64)
    return np.where(stage, np.pad(a, ((0, 0), (0, width - a.shape[1]))), 0)


def _placed_row_keys(table: StrategyTable, width: int) -> np.ndarray:
    from costmodel._strategy import PLACED_COLUMNS, STAGE_COLUMNS

    n = len(table)
    stage = np.arange(width)[None, :] < table["pp"][:, None]
    cols = [np.asarray(table[c]).astype(np.int64)[:, None] for c in PLACED_COLUMNS] + [_framework_key(table)[:, None]]
    cols += [_stage_cols(table.stages[c], stage, width) for c in STAGE_COLUMNS]
    if table.stage_recompute is not None:
        cols.append(_stage_cols(table.stage_recompute, stage, width))
    mat = np.ascontiguousarray(np.concatenate(cols, axis=1))
    return mat.view(np.dtype((np.void, mat.shape[1] * 8))).reshape(n)


def hbm_of(cluster) -> float:
    """HBM bytes per GPU to measure an out-of-memory row's excess against: the cluster's GPU,
    or for a costmodel.HeteroCluster the smallest HBM among its pools."""
    if hasattr(cluster, "pools"):
        return float(min(p.gpu.hbm_bytes for p in cluster.pools))
    return float(cluster.gpu.hbm_bytes)


def match_rows(told: np.ndarray, asked: np.ndarray) -> np.ndarray:
    """Position in ``asked`` of each key in ``told`` (-1 where absent). ``asked`` distinct."""
    if len(asked) == 0 or len(told) == 0:
        return np.full(len(told), -1, dtype=np.int64)
    order = np.argsort(asked, kind="stable")
    pos = np.minimum(np.searchsorted(asked[order], told), len(asked) - 1)
    hit = asked[order][pos] == told
    return np.where(hit, order[pos], -1)


def row_costs(metrics: Metrics, hbm_bytes: float) -> tuple[np.ndarray, np.ndarray]:
    """(cost, excess), both (N,): cost = seconds per token (1 / tokens_per_s, or 1 / the objective
    column search._base.objective_values reads: seconds per useful token for goodput), inf where
    infeasible; excess = how far an infeasible row is from feasible: the memory ratio
    mem_total / HBM (> 1) for out-of-memory rows, inf for rows the cost model rejects for any
    other reason, 0 for feasible rows."""
    feasible = np.asarray(metrics["feasible"], dtype=bool)
    tps = objective_values(metrics)
    with np.errstate(divide="ignore"):
        cost = np.where(feasible & (tps > 0), 1.0 / np.where(tps > 0, tps, 1.0), np.inf)
    oom = np.asarray(metrics["reason"]) == _OOM
    ratio = np.asarray(metrics["mem_total_bytes"], dtype=np.float64) / hbm_bytes
    excess = np.where(np.isfinite(cost), 0.0, np.where(oom & np.isfinite(ratio), ratio, np.inf))
    return cost, excess


# The parts of a step that costmodel.evaluate adds into step_time_s (Metrics; the sum equals
# step_time_s on every feasible row of the exact space), kept for out-of-memory rows as well.
_STEP_PARTS = ("compute_s", "recompute_s", "tp_comm_s", "cp_comm_s", "pp_comm_s", "dp_comm_s", "bubble_s",
               "optimizer_s")


def row_time_proxy(table: StrategyTable, metrics: Metrics, seq_len: int) -> np.ndarray:
    """(N,) seconds per token each row would take if memory were unlimited: 1 / tokens_per_s
    where feasible; for out-of-memory rows the sum of the step's parts that the cost model
    still reports (compute, communication, bubble, optimizer) over the tokens of a step
    (global_batch * seq_len); inf where that is not a positive finite number (other reasons,
    metrics without the parts). With a goodput objective column the out-of-memory rows stay in raw
    seconds per token (goodput is priced on feasible rows only): a screening proxy, a few percent apart."""
    cost, _ = row_costs(metrics, 1.0)
    n = len(cost)
    if not all(p in metrics for p in _STEP_PARTS):
        return cost
    parts = np.zeros(n)
    for p in _STEP_PARTS:
        parts = parts + np.asarray(metrics[p], dtype=np.float64)
    tokens = np.asarray(table["global_batch"], dtype=np.float64) * float(seq_len)
    oom = np.asarray(metrics["reason"]) == _OOM
    with np.errstate(divide="ignore", invalid="ignore"):
        proxy = np.where(oom & np.isfinite(parts) & (parts > 0) & (tokens > 0), parts / tokens, np.inf)
    return np.where(np.isfinite(cost), cost, proxy)


def told_values(space, width: int, hbm_bytes: float, table: StrategyTable, metrics: Metrics,
                asked=None) -> tuple[np.ndarray, np.ndarray]:
    """(pos, vals) of told rows: each row's position among the rows of the ``asked`` table (-1
    where absent; ``asked`` None: the told table is the one ask() returned, row for row), matched
    by row_keys over ``width`` stages; and the (N, 3) memo values cost, excess (row_costs) and
    time proxy (row_time_proxy) of every told row."""
    cost, excess = row_costs(metrics, hbm_bytes)
    vals = np.stack([cost, excess, row_time_proxy(table, metrics, space.model.seq_len)], axis=1)
    if asked is None:
        return np.arange(len(table)), vals
    layers = space.model.layers
    return match_rows(row_keys(table, layers, width), row_keys(asked, layers, width)), vals


def stage_width(space) -> int:
    """Widest pipeline the space can hold (stage columns for row_keys)."""
    for dim in space.dims:
        if dim.name == "pp":
            return int(max(dim.choices))
    return int(space.fixed.get("pp", 1))


__all__ = ["Memo", "hbm_of", "keys_from_plain", "keys_to_plain", "match_rows", "point_keys", "row_costs",
           "row_keys", "row_time_proxy", "stage_width", "told_values"]
