"""Exhaustive grid search over a SearchSpace (or a range of it) and uniform random search.

Both follow the searcher contract (search/_base.py): what they ask next depends only on their
constructor arguments and on how much they have been told, so a resumed run replays its tells.
"""

from __future__ import annotations

import numpy as np

from costmodel import Metrics, StrategyTable
from search._base import Searcher, SearchSpace
from search._memo import Memo, keys_from_plain, keys_to_plain, match_rows, point_keys, row_keys, stage_width

# Candidate grid indices scanned per step of an ask (the lookup-table path skips invalid
# blocks without touching them, so a large chunk costs only its valid rows).
GRID_CHUNK = 1 << 20
# Random search: rounds of n more draws per ask for the points already told (or drawn twice), then,
# where the space's valid points number at most ENUMERATE_MAX, the rest listed.
REDRAW_ROUNDS = 8
ENUMERATE_MAX = 1 << 22


class GridSearcher(Searcher):
    """Every valid row of ``space`` in grid order, over [start, stop) (stop None: the end).

    ask(n) returns the next up to n valid rows (empty when the range is exhausted); their grid
    indices are in :attr:`last_indices`. Position = the number of valid rows handed out; tell()
    of rows this searcher did not ask (a replay) moves the position past them."""

    def __init__(self, space: SearchSpace, start: int = 0, stop: int | None = None, *, chunk: int = GRID_CHUNK):
        if space.strides is None:
            raise ValueError(f"grid search needs a space of fewer than 2**63 points, got {space.size:.3e}")
        self.space = space
        self.start = max(int(start), 0)
        self.stop = space.size if stop is None else min(int(stop), space.size)
        self.chunk = int(chunk)
        self._cursor = self.start  # grid index where the next scan begins
        self._asked = 0  # valid rows handed out (or skipped by a replay)
        self._told = 0
        self.last_indices = np.empty(0, dtype=np.int64)

    @property
    def done(self) -> bool:
        return self._cursor >= self.stop

    def _take(self, n: int) -> np.ndarray:
        """Grid indices of the next n valid rows from the cursor; advances the cursor."""
        parts, got = [], 0
        while got < n and self._cursor < self.stop:
            hi = min(self._cursor + max(self.chunk, 1), self.stop)
            idx = self.space.valid_indices(self._cursor, hi)
            if got + idx.size > n:
                idx = idx[: n - got]
                hi = int(idx[-1]) + 1
            parts.append(idx)
            got += idx.size
            self._cursor = hi
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    def ask(self, n: int) -> StrategyTable:
        idx = self._take(int(n))
        self._asked += idx.size
        self.last_indices = idx
        return self.space.table(self.space.digits_of(idx))

    def tell(self, table: StrategyTable, metrics: Metrics) -> None:
        self._told += len(table)
        if self._told > self._asked:  # replay: rows told that this instance never handed out
            self._take(self._told - self._asked)
            self._asked = self._told

    def state_dict(self) -> dict:
        return {"cursor": int(self._cursor), "asked": int(self._asked), "told": int(self._told)}

    def load_state_dict(self, state: dict) -> None:
        self._cursor = int(state["cursor"])
        self._asked = int(state["asked"])
        self._told = int(state["told"])


class RandomSearcher(Searcher):
    """Points drawn uniformly at random over the valid digits (space.random_digits), each point
    once: a draw already told, or drawn twice in one ask, is replaced by further draws.

    The k-th ask draws from ``np.random.default_rng([seed, k])``: first n points (the draws of
    a search with replacement), then up to REDRAW_ROUNDS more rounds of n for the repeats among
    them; where that still leaves the ask short and the space's valid points can be listed (at
    most ENUMERATE_MAX), the rest come from the valid points not told yet, in a random order.
    Once every valid point is told, ask() returns an empty table (the search is done). Tells
    count batches, so a replay of k tells makes the next ask the (k+1)-th, and record the told
    points (a told table that is not the last ask's object, as in a replay, is matched by its
    strategy columns to the ask the searcher would have made at that point)."""

    def __init__(self, space: SearchSpace, seed: int = 0):
        self.space = space
        self.seed = int(seed)
        self._asks = 0
        self._tells = 0
        self._told = Memo(width=0)  # keys (search._memo.point_keys) of the points told so far
        self._width = stage_width(space)
        self._last: tuple[StrategyTable | None, np.ndarray] = (None, np.zeros(0, dtype=np.int64))

    def ask(self, n: int) -> StrategyTable:
        digits, keys = self._draw(self._asks, int(n))
        self._asks += 1
        table = self.space.table(digits)
        self._last = (table, keys)
        return table

    def tell(self, table: StrategyTable, metrics: Metrics) -> None:
        asked, keys = self._last
        if table is not asked and len(table):  # a replay, or rows rebuilt elsewhere: match by strategy
            digits, keys = self._draw(self._tells, len(table))
            layers = self.space.model.layers
            pos = match_rows(row_keys(table, layers, self._width),
                             row_keys(self.space.table(digits), layers, self._width))
            keys = keys[pos[pos >= 0]]
        self._told.add(keys, np.zeros((len(keys), 0)))
        self._last = (None, keys[:0])
        self._tells += 1
        self._asks = max(self._asks, self._tells)

    def _draw(self, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(m, D) digits and (m,) keys of the k-th ask, m <= n distinct points not told yet."""
        D = len(self.space.dims)
        if n <= 0 or self._exhausted():
            return np.zeros((0, D), dtype=np.int64), np.zeros(0, dtype=np.int64)
        rng = np.random.default_rng([self.seed, k])
        parts: list[np.ndarray] = []
        for _ in range(1 + REDRAW_ROUNDS):
            parts.append(self.space.random_digits(rng, n))
            digits, keys = self._new_points(np.concatenate(parts))
            if len(keys) >= n:
                return digits[:n], keys[:n]
        listed = self._unlisted_rest(rng, keys)  # short: the space may be nearly exhausted
        if listed is not None:
            digits = np.concatenate([digits, self.space.digits_of(listed[: n - len(keys)])])
            keys = np.concatenate([keys, point_keys(self.space, digits[len(keys):])])
        return digits, keys

    def _new_points(self, digits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rows of (N, D) ``digits`` not told yet, each once, in draw order, and their keys."""
        keys = point_keys(self.space, digits)
        told, _ = self._told.lookup(keys)
        fresh = np.flatnonzero(~told)
        _, first = np.unique(keys[fresh], return_index=True)
        keep = fresh[np.sort(first)]
        return digits[keep], keys[keep]

    def _valid_count(self) -> int | None:
        count = getattr(self.space, "valid_count", None)
        return count() if callable(count) else None

    def _exhausted(self) -> bool:
        count = self._valid_count()
        return count is not None and len(self._told) >= count

    def _unlisted_rest(self, rng: np.random.Generator, drawn: np.ndarray) -> np.ndarray | None:
        """Grid indices of the valid points neither told nor in ``drawn`` (keys), in a random
        order; None where the space's valid points cannot be listed."""
        count = self._valid_count()
        if count is None or count > ENUMERATE_MAX or self.space.strides is None:
            return None
        idx = self.space.valid_indices(0, self.space.size)  # grid indices are the keys here
        told, _ = self._told.lookup(idx)
        rest = idx[~told & ~np.isin(idx, drawn)]
        return rest[rng.permutation(len(rest))]

    def state_dict(self) -> dict:
        keys, _ = self._told.arrays()
        return {"asks": self._asks, "tells": self._tells, "told_keys": keys_to_plain(keys)}

    def load_state_dict(self, state: dict) -> None:
        self._asks = int(state["asks"])
        self._tells = int(state["tells"])
        keys = keys_from_plain(state.get("told_keys", np.zeros(0, dtype=np.int64)))
        self._told = Memo(keys, np.zeros((len(keys), 0)))
        self._last = (None, keys[:0])
