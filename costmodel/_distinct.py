"""Distinct combinations of integer columns, without a sort where the key range allows.

The block evaluator prices each distinct stage configuration once (a few dozen to a few thousand per
block of 32,768 rows) and gathers the results back to every stage: ``first`` picks one entry of each
combination, ``inv`` maps every entry to its combination.
"""

from __future__ import annotations

import math

import numpy as np


def distinct_rows(*cols):
    """(first, inv): for columns of small non-negative integers (or bools), broadcast against each other, the flat
    index of one entry per distinct combination, and each entry's combination number (the broadcast shape), so that
    ``f(x.ravel()[first])[inv] == f(x)`` for any entry-wise f. Dense mixed-radix keys (no sort) when the key range
    is small, else the combinations of each half of the columns first, then those pairs; np.unique for two columns
    of a large range (every entry its own combination if the key would overflow int64)."""
    # (bool and integer columns as they are, cast inside the key's first operations: no int64 copy of each)
    cols = [a if (a := np.asarray(x)).dtype.kind in "bui" else a.astype(np.int64) for x in cols]
    shape = np.broadcast_shapes(*(x.shape for x in cols))
    n = math.prod(shape)
    radix = [2 if x.dtype == bool else int(x.max()) + 1 if x.size else 1 for x in cols]  # (a bool's: no pass)
    K = math.prod(radix)
    if K >= 2**62:
        return np.arange(n), np.arange(n).reshape(shape)
    if K > max(4 * n, 1 << 16) and len(cols) > 2:
        return distinct_rows(distinct_rows(*cols[:(h := len(cols) // 2)])[1], distinct_rows(*cols[h:])[1])
    # the mixed-radix key (np.ravel_multi_index's, in place after the first product: 3x faster), at the broadcast
    # shape from the first sum on (columns alike on a row's stages are not spread first)
    key = (np.add(np.multiply(cols[0], radix[1], dtype=np.int64), cols[1]) if len(cols) > 1
           else cols[0].astype(np.int64, copy=False))
    for x, r in zip(cols[2:], radix[2:], strict=True):
        key = np.add(np.multiply(key, r, out=key), x, out=key) if key.shape == shape else key * r + x
    key = np.broadcast_to(key, shape).reshape(-1)
    if K > max(4 * n, 1 << 16):
        _, first, inv = np.unique(key, return_index=True, return_inverse=True)
        return first, inv.reshape(shape)
    first, inv = distinct_keys(key, K)
    return first, inv.reshape(shape)


def distinct_keys(key, K: int):
    """distinct_rows of one column of integer keys in [0, K), K not much more than the keys (no sort): ``first``
    the last entry holding each key."""
    (at := np.full(K, -1))[key] = np.arange(len(key))  # (a scatter: the last write wins)
    keys = np.flatnonzero(at >= 0)  # the combinations in key order (not a cumsum over the K keys)
    np.put(pos := np.empty(K, dtype=np.int64), keys, np.arange(len(keys)))
    return at[keys], np.take(pos, key)


def unique_rows(a, lead: int = 0):
    """np.unique(a, axis=0, return_inverse=True) of a (R, C) array of numbers (no NaN) as one np.lexsort of its
    columns (9x faster than np.unique's sort of the rows as structured values, 1,824 rows of 17 float64 columns):
    (the distinct rows in lexicographic order, each row's (R,)). ``lead`` > 0: also the distinct rows of the first
    ``lead`` columns and each distinct row's among them, as np.unique(uniq[:, :lead], axis=0, return_inverse=True)
    gives them: the runs of the sorted rows' leading columns."""
    order = np.lexsort(a.T[::-1])  # (the last key primary: column 0 first)
    s = np.take(a, order, axis=0)
    new = np.ones(len(s), dtype=bool)
    np.any(s[1:] != s[:-1], axis=1, out=new[1:])
    uniq = s[new]
    back = np.empty(len(a), dtype=np.intp)
    back[order] = np.cumsum(new) - 1
    if not lead:
        return uniq, back
    run = np.ones(len(uniq), dtype=bool)
    np.any(uniq[1:, :lead] != uniq[:-1, :lead], axis=1, out=run[1:])
    return uniq, back, uniq[run, :lead], np.cumsum(run) - 1


class BlockMemo:
    """Values per distinct combination of integer columns, kept from one block to the next of one evaluation: a block
    of 40,000 bench rows prices its data-parallel exchange for ~4,600 distinct combinations, nearly all of them the
    previous block's too. One per evaluate() call (costmodel._evaluate), so that every evaluation prices what it reads.
    Each ``name`` keys its combinations by a mixed-radix int64 over radices fixed by its first block (4 x (its largest
    value + 1), so that later blocks' fit); a block with a value past them, or whose key would overflow, is priced
    without the memo. The values come back bit for bit as ``compute`` gave them."""

    def __init__(self) -> None:
        self._radix: dict[str, tuple | None] = {}
        self._memo: dict = {}

    def get(self, name: str, cols, compute) -> list:
        """(U,) float64 arrays, one per value, for the U entries of ``cols`` (integer or bool columns (U,)):
        ``compute(sel)`` gives them (arrays or scalars) for the entries ``sel``; called only for the entries no
        earlier block of this evaluation computed (all of them for the first)."""
        from costmodel._sorted_memo import Memo

        n = len(cols[0])
        if name not in self._radix:
            radix = tuple(4 * (int(c.max(initial=0)) + 1) for c in cols)
            self._radix[name] = radix if all(c.min(initial=0) >= 0 for c in cols) and math.prod(radix) < 2**62 else None
        radix = self._radix[name]
        if radix is None or any(int(c.max(initial=0)) >= r or c.min(initial=0) < 0 for c, r in zip(cols, radix,
                                                                                                    strict=True)):
            return [np.broadcast_to(x, (n,)) for x in compute(np.arange(n))]
        key = np.zeros(n, dtype=np.int64)
        for c, r in zip(cols, radix, strict=True):
            key = key * r + c
        memo = self._memo.get(name)
        if memo is None:
            vals = np.stack([np.broadcast_to(np.asarray(x, dtype=np.float64), (n,)) for x in compute(np.arange(n))],
                            axis=1)  # (U, width)
            self._memo[name] = Memo(keys=key, values=vals)
            return list(vals.T)
        found, vals = memo.lookup(key)
        if (miss := np.flatnonzero(~found)).size:
            got = compute(miss)
            vals[miss] = np.stack([np.broadcast_to(np.asarray(x, dtype=np.float64), (miss.size,)) for x in got],
                                  axis=1)
            memo.add(key[miss], vals[miss])
        return list(vals.T)
