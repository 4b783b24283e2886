"""Keep policies: which evaluated rows of a unit go into its Parquet part."""

from __future__ import annotations

import dataclasses

import numpy as np

from costmodel import InputError, Metrics


@dataclasses.dataclass(frozen=True, kw_only=True)
class Keep:
    """``all`` rows, the ``feasible`` ones, or the ``best`` k feasible rows by tokens/s."""

    kind: str = "feasible"
    k: int = 0

    @classmethod
    def parse(cls, text: str) -> Keep:
        word = str(text).strip().lower()
        if word in ("all", "feasible"):
            return cls(kind=word)
        if word.startswith("best:"):
            try:
                k = int(word[5:])
            except ValueError:
                k = 0
            if k >= 1:
                return cls(kind="best", k=k)
        raise InputError("--keep", "all, feasible or best:K with K >= 1", text)

    def __str__(self) -> str:
        return f"best:{self.k}" if self.kind == "best" else self.kind

    def select(self, metrics: Metrics, groups: np.ndarray | None = None) -> np.ndarray:
        """Row indices to keep, in grid order: (K,) int64. ``best:K`` keeps the K best of each group of
        ``groups`` ((N,) integer codes: a unit's frameworks, each a problem of its own; None: one group), so the
        union of a problem's units holds that problem's K best whatever the other problems' speeds."""
        n = len(metrics["feasible"])
        if self.kind == "all":
            return np.arange(n, dtype=np.int64)
        feasible = np.flatnonzero(metrics["feasible"])  # (F,)
        if self.kind == "feasible" or len(feasible) <= self.k:
            return feasible.astype(np.int64)
        tps = metrics["tokens_per_s"][feasible]  # (F,)
        g = np.zeros(len(feasible), np.int64) if groups is None else np.asarray(groups, np.int64)[feasible]
        # Sorted by group, then throughput down, then grid order (ties keep the earlier row); a row's rank in its
        # group is its position less its group's first position.
        order = np.lexsort((feasible, -tps, g))  # (F,)
        gs = g[order]
        first = np.flatnonzero(np.r_[True, gs[1:] != gs[:-1]])  # (G,) where each group starts
        rank = np.arange(len(order)) - np.repeat(first, np.diff(np.r_[first, len(order)]))
        return np.sort(feasible[order[rank < self.k]]).astype(np.int64)
