"""Exhaustive grid search over a Space (or a range of it) and uniform random search.

Both follow the searcher contract (search/_base.py): what they ask next depends only on their
constructor arguments and on how much they have been told, so a resumed run replays its tells.
"""

from __future__ import annotations

import numpy as np

from costmodel import Metrics, StrategyTable
from search._base import Searcher
from search._space import Space

# Candidate grid indices scanned per step of an ask (the lookup-table path skips invalid
# blocks without touching them, so a large chunk costs only its valid rows).
GRID_CHUNK = 1 << 20


class GridSearcher(Searcher):
    """Every valid row of ``space`` in grid order, over [start, stop) (stop None: the end).

    ask(n) returns the next up to n valid rows (empty when the range is exhausted); their grid
    indices are in :attr:`last_indices`. Position = the number of valid rows handed out; tell()
    of rows this searcher did not ask (a replay) moves the position past them."""

    def __init__(self, space: Space, start: int = 0, stop: int | None = None, *, chunk: int = GRID_CHUNK):
        if int(space.size) >= 2**63:
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
    """Points drawn at random over the valid digits (Space.random_digits), with replacement.

    The k-th ask draws from ``np.random.default_rng([seed, k])``; tells count batches so that
    a replay of k tells makes the next ask the (k+1)-th."""

    def __init__(self, space: Space, seed: int = 0):
        self.space = space
        self.seed = int(seed)
        self._asks = 0
        self._tells = 0

    def ask(self, n: int) -> StrategyTable:
        rng = np.random.default_rng([self.seed, self._asks])
        self._asks += 1
        return self.space.table(self.space.random_digits(rng, int(n)))

    def tell(self, table: StrategyTable, metrics: Metrics) -> None:
        self._tells += 1
        self._asks = max(self._asks, self._tells)

    def state_dict(self) -> dict:
        return {"asks": self._asks, "tells": self._tells}

    def load_state_dict(self, state: dict) -> None:
        self._asks = int(state["asks"])
        self._tells = int(state["tells"])
