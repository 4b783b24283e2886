"""A sorted memo: keys (int64 or fixed-width void rows) with a row of numbers each, searched with
np.searchsorted, so looking up or adding N keys is a few whole-array operations, no Python loop
over keys. The searchers remember evaluated points in one (search._memo); the cost core
remembers pipeline simulations in one (costmodel._pipeline_terms)."""

from __future__ import annotations

import numpy as np


class Memo:
    """Costs of points already evaluated: sorted keys, searched in O(log M) per lookup; each
    key holds ``width`` numbers (cost and excess, then whatever the searcher keeps).

    New entries go to a small sorted buffer that is merged into the main array when it grows
    past a quarter of it, so that adding B rows costs O(B log M) amortised."""

    def __init__(self, keys=None, values=None, *, width: int = 2) -> None:
        self._keys = keys if keys is not None else np.zeros(0, dtype=np.int64)
        self._vals = values if values is not None else np.zeros((0, width))
        self.width = self._vals.shape[1]
        self._buf_keys = self._keys[:0]
        self._buf_vals = self._vals[:0]
        if len(self._keys):
            self._keys, self._vals = _sorted_unique(self._keys, self._vals)

    def __len__(self) -> int:
        return len(self._keys) + len(self._buf_keys)

    def lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(found (N,) bool, values (N, width)) for (N,) keys; values are NaN where not found."""
        found = np.zeros(len(keys), dtype=bool)
        vals = np.full((len(keys), self.width), np.nan)
        for k, v in ((self._keys, self._vals), (self._buf_keys, self._buf_vals)):
            if len(k) == 0:
                continue
            pos = np.minimum(np.searchsorted(k, keys), len(k) - 1)
            hit = k[pos] == keys
            vals = np.where(hit[:, None], v[pos], vals)
            found |= hit
        return found, vals

    def add(self, keys: np.ndarray, values: np.ndarray) -> None:
        """Add (N,) keys with (N, width) values; keys already present keep their first value."""
        if len(keys) == 0:
            return
        if len(self._keys) == 0 and len(self._buf_keys) == 0:
            self._keys, self._vals = keys[:0], values[:0]
            self._buf_keys, self._buf_vals = keys[:0], values[:0]
        found, _ = self.lookup(keys)
        keys, values = keys[~found], values[~found]
        bk = np.concatenate([self._buf_keys, keys])
        bv = np.concatenate([self._buf_vals, values])
        self._buf_keys, self._buf_vals = _sorted_unique(bk, bv)
        if len(self._buf_keys) * 4 > len(self._keys):
            self._keys, self._vals = _sorted_unique(np.concatenate([self._keys, self._buf_keys]),
                                                    np.concatenate([self._vals, self._buf_vals]))
            self._buf_keys, self._buf_vals = self._keys[:0], self._vals[:0]

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return _sorted_unique(np.concatenate([self._keys, self._buf_keys]),
                              np.concatenate([self._vals, self._buf_vals]))


def _sorted_unique(keys: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(keys, kind="stable")
    keys, vals = keys[order], vals[order]
    first = np.ones(len(keys), dtype=bool)
    first[1:] = keys[1:] != keys[:-1]
    return keys[first], vals[first]


__all__ = ["Memo"]
