"""A table's rows by framework profile: the rows of each framework priced with its profile, results back in row order.

A StrategyTable may carry a ``framework`` column (costmodel._strategy: int8 codes into FRAMEWORK_NAMES). The
functions that price rows under one profile (the block evaluator, the feasibility checks, the memory screen) run
once per framework present, each on that framework's rows as one vectorised call, and their per-row outputs are
scattered back to the table's row order. A table without the column, or whose rows all carry one framework, is
one call on the table itself: no copy, no sort.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from costmodel._errors import InputError
from costmodel._frameworks import Framework, framework_preset
from costmodel._strategy import FRAMEWORK, FRAMEWORK_NAMES, StrategyTable


def framework_groups(table: StrategyTable, framework=None) -> list[tuple[np.ndarray | None, Framework]]:
    """[(rows, profile)] of ``table``: rows (ascending row numbers) of each framework present, or None for every row.

    Without a framework column every row is ``framework``'s (None: costmodel._frameworks.DEFAULT_FRAMEWORK). With
    one, each row is its own framework's; a ``framework`` given as well must be every row's (InputError naming
    ``framework`` otherwise: a call cannot price a row under another framework than the one it carries)."""
    codes = table.columns.get(FRAMEWORK)
    if codes is None or not len(codes):
        return [(None, framework_preset(framework))]
    if codes.min() < 0 or codes.max() >= len(FRAMEWORK_NAMES):  # (a table built from damaged numbers)
        bad = codes[(codes < 0) | (codes >= len(FRAMEWORK_NAMES))][0]
        raise InputError("framework", f"codes 0 to {len(FRAMEWORK_NAMES) - 1} (FRAMEWORK_NAMES)", int(bad))
    counts = np.bincount(codes, minlength=len(FRAMEWORK_NAMES))  # (F,) rows per framework
    present = np.flatnonzero(counts)
    if framework is not None:
        want = framework_preset(framework).name
        other = [FRAMEWORK_NAMES[c] for c in present if FRAMEWORK_NAMES[c] != want]
        if other:
            raise InputError("framework", f"{want} for every row, or none (the table's rows carry their own "
                             "framework)", other[0])
    if present.size == 1:
        return [(None, framework_preset(FRAMEWORK_NAMES[present[0]]))]
    order = np.argsort(codes, kind="stable")  # (N,) rows grouped by code, each group ascending
    ends = np.cumsum(counts[present])
    return [(order[e - k:e], framework_preset(FRAMEWORK_NAMES[c])) for c, k, e in zip(present, counts[present], ends,
                                                                                      strict=True)]


def by_framework(table: StrategyTable, framework, price: Callable[[StrategyTable, Framework], object]):
    """``price(rows, profile)`` once per framework of ``table`` (framework_groups), its outputs in the table's row
    order: an (N, ...) array, a tuple of them or a mapping of them (Metrics), as ``price`` returns them. Arrays of
    (N, S) whose groups differ in S are padded with zeros to the widest."""
    groups = framework_groups(table, framework)
    if len(groups) == 1 and groups[0][0] is None:
        return price(table, groups[0][1])
    parts = [(rows, price(table.take(rows), fw)) for rows, fw in groups]
    return _scatter(parts, len(table))


def _scatter(parts: list[tuple[np.ndarray, object]], n: int):
    """The groups' outputs ``parts`` [(rows, output)] as one output of ``n`` rows."""
    first = parts[0][1]
    if isinstance(first, tuple):
        return tuple(_scatter([(rows, out[i]) for rows, out in parts], n) for i in range(len(first)))
    if isinstance(first, dict):
        return type(first)({k: _scatter([(rows, out[k]) for rows, out in parts], n) for k in first})
    arrays = [np.asarray(out) for _, out in parts]
    width = max(a.shape[1:] for a in arrays)
    whole = np.zeros((n, *width), dtype=np.result_type(*arrays))
    for (rows, _), a in zip(parts, arrays, strict=True):
        whole[(rows, *(slice(0, w) for w in a.shape[1:]))] = a
    return whole
