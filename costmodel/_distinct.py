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
    radix = [int(x.max()) + 1 if x.size else 1 for x in cols]
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
