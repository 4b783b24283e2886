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

    def select(self, metrics: Metrics) -> np.ndarray:
        """Row indices to keep, in grid order: (K,) int64."""
        n = len(metrics["feasible"])
        if self.kind == "all":
            return np.arange(n, dtype=np.int64)
        feasible = np.flatnonzero(metrics["feasible"])
        if self.kind == "feasible" or len(feasible) <= self.k:
            return feasible.astype(np.int64)
        tps = metrics["tokens_per_s"][feasible]
        # The k largest (ties by grid order: a stable sort of -tps), reported in grid order.
        top = np.argsort(-tps, kind="stable")[: self.k]
        return np.sort(feasible[top]).astype(np.int64)
