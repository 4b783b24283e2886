"""The two contracts of search/: the space a searcher walks (SearchSpace) and the searcher
(Searcher: ask(n) -> the space's table, tell(table, metrics), optional state hooks).

Objective (every searcher): maximise ``metrics["objective"]`` where the driver adds that column
(goodput: ``--objective goodput``), else ``metrics["tokens_per_s"]``, over rows with
``metrics["feasible"]``; infeasible rows (feasible False, step time inf) are accepted by tell and
count as the worst. ask() is a pure function of the constructor arguments (seed included) and the
sequence of told batches, so a run resumes by building a fresh searcher with the same arguments
and telling it every recorded batch again, in order, with no evaluation.
"""

from __future__ import annotations

import abc
import math

import numpy as np

from costmodel import InputError, Metrics, StrategyTable

INT64_LIMIT = 1 << 63
# Evaluations one search may be given at most: beyond any run (twelve days at a million a second),
# and small enough for every count derived from it to stay an int64.
MAX_BUDGET = 10**12


class SearchSpace(abc.ABC):
    """The strategy space every searcher and the driver work over, as a mixed-radix number.

    A point is a (D,) int64 digit row: digit k picks ``dims[k].choices[digit]``. Its grid index
    is ``sum_k digit_k * strides_k`` with the last dimension fastest (C order), so a shard of
    the grid is a range of integers. Methods take (N, D) digits and answer for all rows at once.

    Implemented by search.Space (one GPU type; rows are costmodel.StrategyTable) and
    search.HeteroSpace (stages placed on the pools of a mixed cluster; rows are
    costmodel.StrategyTable with placements). The grid, random and TPE searchers use only what is declared here;
    MCMC's moves (search._moves) also read each kind's own layout of stages.

    Attributes:
        model       the costmodel.Transformer the rows train
        cluster     the cluster they run on (a costmodel Cluster or HeteroCluster)
        fixed       readable values held fixed (at least ``global_batch``)
        dims        tuple of dimensions, each with ``name``, ``choices`` (readable values in
                    digit order), ``ordinal`` (choices ordered, neighbours one step apart),
                    ``base`` (the family, "tp" of "tp.3") and ``stage`` (J of "x.J", else -1)
    """

    __slots__ = ()
    model: object
    cluster: object
    fixed: dict
    dims: tuple

    @property
    def stage_bound(self) -> tuple[str, ...]:
        """Names of non-stage dimensions whose valid choices depend on the per-stage digits
        (a searcher that walks the non-stage dimensions first, with the stages canonical, samples
        these with the stages instead); none by default."""
        return ()

    @property
    def radices(self) -> np.ndarray:
        """(D,) int64: choices per dimension."""
        return np.array([len(d.choices) for d in self.dims], dtype=np.int64)

    @property
    def size(self) -> int:
        """Points in the grid, valid or not (a Python int: it may pass 2**63)."""
        return math.prod(len(d.choices) for d in self.dims)

    @property
    def strides(self) -> np.ndarray | None:
        """(D,) int64 place value of each digit, None where the grid has 2**63 points or more."""
        if self.size >= INT64_LIMIT:
            return None
        r, out = self.radices, np.ones(len(self.dims), dtype=np.int64)
        out[:-1] = np.cumprod(r[:0:-1])[::-1]
        return out

    def _need_int64(self, what: str) -> None:
        if self.strides is None:
            raise ValueError(f"{what} needs a space of fewer than 2**63 points; this one has {self.size:.3e}")

    def digits_of(self, idx) -> np.ndarray:
        """(N,) grid indices -> (N, D) int64 digits."""
        self._need_int64("digits_of")
        idx = np.asarray(idx, dtype=np.int64).copy()
        out = np.empty((idx.size, len(self.dims)), dtype=np.int64)
        for k in range(len(self.dims) - 1, -1, -1):
            idx, out[:, k] = np.divmod(idx, self.radices[k])
        return out

    def index_of(self, digits) -> np.ndarray:
        """(N, D) digits -> (N,) int64 grid indices."""
        self._need_int64("index_of")
        return np.asarray(digits, dtype=np.int64) @ self.strides

    def canonical_digits(self, n: int = 1) -> np.ndarray:
        """(n, D) zeros with every stage boundary shift ("stage_shift.J") at its zero offset: the
        digits a dimension holds where a row does not use it (stages past its pp)."""
        out = np.zeros((n, len(self.dims)), dtype=np.int64)
        for k, d in enumerate(self.dims):
            if d.base == "stage_shift":
                out[:, k] = d.choices.index(0)
        return out

    def rows(self, start: int, stop: int):
        """Grid indices (ascending) of the valid points in [start, stop) and their table."""
        idx = self.valid_indices(start, stop)
        return idx, self.table(self.digits_of(idx))

    @abc.abstractmethod
    def valid_indices(self, start: int, stop: int) -> np.ndarray:
        """Grid indices (int64, ascending) of the valid points in [start, stop)."""

    @abc.abstractmethod
    def valid(self, digits) -> np.ndarray:
        """(N,) bool: digits in range and every constraint of the space holds but memory (the
        cost model prices memory; an out-of-memory point is valid and infeasible)."""

    @abc.abstractmethod
    def table(self, digits):
        """The rows of (N, D) digits, as the table the cost model evaluates (meaningful for
        valid digits); costmodel.evaluate takes either kind."""

    @abc.abstractmethod
    def random_digits(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """(n, D) valid digits drawn with ``rng`` (a pure function of its state)."""

    @abc.abstractmethod
    def start_points(self) -> dict[str, np.ndarray]:
        """Named valid (D,) digits where a search may start (an expert's recipe, data
        parallelism); a name is left out where the space holds no such point."""

    @abc.abstractmethod
    def to_json(self) -> dict:
        """Plain JSON of the space; ``from_json(to_json(), model, cluster)`` rebuilds it."""

    @classmethod
    @abc.abstractmethod
    def from_json(cls, d: dict, model, cluster) -> SearchSpace:
        """The space of :meth:`to_json`'s output, on ``model`` and ``cluster``."""


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


def check_int(name: str, value, low: int, expected: str | None = None) -> int:
    """``value`` as an int; InputError naming ``name`` (expected: ``expected``, or "an integer >=
    ``low``") unless it is an integer >= ``low``."""
    if not isinstance(value, (int, np.integer)) or value < low:
        raise InputError(name, expected or f"an integer >= {low}", value)
    return int(value)


# The optional metrics column a driver adds when it ranks by something other than raw throughput
# (tokens per second scaled down: goodput_tokens_per_s); searchers read it through objective_values.
OBJECTIVE_COLUMN = "objective"


def objective_values(metrics: Metrics) -> np.ndarray:
    """(N,) the value to maximise, in tokens per second: metrics["objective"] where the driver added
    it, else tokens_per_s; infeasible rows as the metrics have them."""
    return np.asarray(metrics.get(OBJECTIVE_COLUMN, metrics["tokens_per_s"]), dtype=np.float64)


def objective(metrics: Metrics) -> np.ndarray:
    """(N,) objective_values with infeasible rows at -inf: larger is better."""
    return np.where(np.asarray(metrics["feasible"], dtype=bool), objective_values(metrics), -np.inf)


def soft_cost(cost: np.ndarray, excess: np.ndarray, proxy: np.ndarray, penalty: float) -> np.ndarray:
    """(N,) cost with soft memory walls: the cost where feasible; out of memory with ``penalty``
    lambda > 0, the time proxy x (1 + lambda x (mem / HBM - 1)); inf otherwise (and where unknown)."""
    with np.errstate(invalid="ignore"):
        penalised = proxy * (1.0 + penalty * (excess - 1.0))
    return np.where(np.isfinite(cost), cost, np.where(np.isfinite(penalised) & (penalty > 0), penalised, np.inf))
