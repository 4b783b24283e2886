"""The searcher contract: ask(n) -> StrategyTable, tell(table, metrics), optional state hooks.

Objective (every searcher): maximise ``metrics["tokens_per_s"]`` over rows with
``metrics["feasible"]``; infeasible rows (feasible False, step time inf) are accepted by tell and
count as the worst. ask() is a pure function of the constructor arguments (seed included) and the
sequence of told batches, so a run resumes by building a fresh searcher with the same arguments
and telling it every recorded batch again, in order, with no evaluation.
"""

from __future__ import annotations

import abc

import numpy as np

from costmodel import Metrics, StrategyTable


class Searcher(abc.ABC):
    """One small contract per role (compare optuna/samplers/_base.py)."""

    @abc.abstractmethod
    def ask(self, n: int) -> StrategyTable:
        """Up to n strategies to evaluate next (fewer, or none, when the searcher is done)."""

    @abc.abstractmethod
    def tell(self, table: StrategyTable, metrics: Metrics) -> None:
        """The metrics of a table this searcher asked for (infeasible rows included)."""

    def state_dict(self) -> dict:
        """Plain numbers, lists and numpy arrays (no pickles); empty by default."""
        return {}

    def load_state_dict(self, state: dict) -> None:  # noqa: B027  (optional hook, no-op default)
        """Restore from :meth:`state_dict`'s output; replaying tells is the other way."""


def objective(metrics: Metrics) -> np.ndarray:
    """(N,) tokens per second with infeasible rows at -inf: larger is better."""
    return np.where(np.asarray(metrics["feasible"], dtype=bool), np.asarray(metrics["tokens_per_s"], dtype=np.float64),
                    -np.inf)
