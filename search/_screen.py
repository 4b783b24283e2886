"""Feasibility first: the points of a space that fit in memory, found before any time is priced.

``screen(space)`` lists the valid points of a search.Space (through its lookup table) and runs
costmodel.memory_screen over them: bytes per GPU and the structural reasons, no step times
(about 10x cheaper per row than costmodel.evaluate; on the spaces of BENCHMARKS.md "Search
quality" a few milliseconds to a second for the whole space). The points that fit are the
feasible points exactly (memory_screen's reason equals evaluate's, row by row:
tests/test_search_screen.py), so a searcher that walks only them never spends an evaluation on a
point that cannot run, and its first evaluation is a feasible plan.

``ScreenedSpace`` is that walk: the same dimensions, grid and tables as the space it screens,
with ``valid`` true only where a point fits, ``random_digits`` uniform over the points that fit
and the named start points kept where they fit. MCMC and TPE build one when the space can be
listed (at most SCREEN_MAX_POINTS valid points, no per-stage dimensions) and some point fits;
otherwise they walk the space as given (and nothing guarantees a feasible plan).

Budget. With the evaluation budget known and at least the number of points that fit, the
searchers evaluate all of them in grid order (``enumeration``): the optimum for the budget.
"""

from __future__ import annotations

import numpy as np

from costmodel import REASONS, memory_screen
from search._base import SearchSpace

# Valid points screened at most (memory_screen runs at about 1-2 M rows/s on these machines).
SCREEN_MAX_POINTS = 2_000_000
_OK = REASONS.index("ok")
# Screens kept per process (the last ones): searchers built again on the same space (a resume, one
# searcher per seed) reuse its screen. A space with pipeline schedules to compile for the memory
# peak can take tens of seconds to screen.
SCREENS_KEPT = 8
_screens: dict = {}


def fitting_indices(space) -> np.ndarray | None:
    """Grid indices (int64, ascending) of the valid points of ``space`` that fit in memory, or
    None where the space cannot be listed (not a one-GPU-type Space, per-stage dimensions, more
    than SCREEN_MAX_POINTS valid points)."""
    from search._space import Space

    if not isinstance(space, Space) or space.partitioned or space.strides is None:
        return None
    for known, members in _screens.items():
        if known == space:  # Space equality: the same model, cluster and dimensions
            return members
    members = _screen(space)
    if members is not None:
        if len(_screens) >= SCREENS_KEPT:
            _screens.pop(next(iter(_screens)))
        members.setflags(write=False)
        _screens[space] = members
    return members


def _screen(space) -> np.ndarray | None:
    count = space.valid_count()
    if count is None or count > SCREEN_MAX_POINTS:
        return None
    idx, table = space.rows(0, space.size)
    _, reason = memory_screen(space.model, space.cluster, table, space.framework)
    return idx[reason == _OK]


class ScreenedSpace(SearchSpace):
    """``base`` restricted to the grid indices ``members`` (sorted): the points that fit."""

    __slots__ = ("base", "members")

    def __init__(self, base, members: np.ndarray) -> None:
        object.__setattr__(self, "base", base)
        object.__setattr__(self, "members", np.asarray(members, dtype=np.int64))

    def __getattr__(self, name):  # dimensions, tables, columns: the base space's
        return getattr(object.__getattribute__(self, "base"), name)

    def __reduce__(self):
        return (ScreenedSpace, (self.base, self.members))

    def __repr__(self) -> str:
        return f"ScreenedSpace({self.base!r}, {self.members.size:,} points fit)"

    @property
    def radices(self) -> np.ndarray:
        return self.base.radices

    @property
    def size(self) -> int:
        return self.base.size

    @property
    def strides(self):
        return self.base.strides

    @property
    def stage_bound(self) -> tuple[str, ...]:
        return self.base.stage_bound

    def _member(self, idx: np.ndarray) -> np.ndarray:
        if not self.members.size:
            return np.zeros(np.shape(idx), dtype=bool)
        pos = np.minimum(np.searchsorted(self.members, idx), self.members.size - 1)
        return self.members[pos] == idx

    def valid(self, digits) -> np.ndarray:
        digits = np.atleast_2d(np.asarray(digits, dtype=np.int64))
        ok = self.base.valid(digits)
        idx = np.where(ok, self.base.index_of(np.where(ok[:, None], digits, 0)), -1)
        return ok & self._member(idx)

    def valid_indices(self, start: int, stop: int) -> np.ndarray:
        lo, hi = np.searchsorted(self.members, [int(start), int(stop)])
        return self.members[lo:hi]

    def valid_count(self) -> int:
        return int(self.members.size)

    def table(self, digits):
        return self.base.table(digits)

    def random_digits(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if not self.members.size:
            raise ValueError("random_digits: no point of the space fits in memory")
        return self.base.digits_of(self.members[rng.integers(0, self.members.size, size=int(n))])

    def start_points(self) -> dict[str, np.ndarray]:
        """The base space's recipes (data parallelism, Megatron-LM's) chosen among the points that
        fit: the data-parallel start is the most data-parallel point that fits (ZeRO-3 at pp 1
        where nothing less fits), not an out-of-memory one."""
        return self.base.start_points(within=self.members)

    def to_json(self) -> dict:
        return self.base.to_json()

    @classmethod
    def from_json(cls, d: dict, model, cluster):
        from search._space import Space

        space = Space.from_json(d, model, cluster)
        members = fitting_indices(space)
        return cls(space, members if members is not None else np.zeros(0, dtype=np.int64))


def screen_searcher(searcher, space, *, screen: bool, budget: int | None):
    """Feasibility first for a searcher (MCMC, TPE): sets ``base_space``, ``screen``, ``points_fit``
    (points that fit, or None where the space cannot be screened), ``budget`` and ``_enumeration``
    (the grid indices of every point that fits, where the budget covers them all, else None), and
    returns the space to walk (screened(space))."""
    searcher.base_space = space
    searcher.screen = bool(screen)
    space, members = screened(space, enabled=screen)
    searcher.points_fit = None if members is None else int(members.size)
    searcher.budget = None if budget is None else int(budget)
    searcher._enumeration = members if (budget is not None and members is not None
                                        and 0 < members.size <= budget) else None
    return space


def points_to_walk(searcher) -> int | None:
    """The valid points a searcher set up by screen_searcher walks: those that fit where some do,
    else every valid point of the space as given; None where they cannot be counted (a placement
    space, a space too large for its lookup table). A walk that has told them all is done."""
    if searcher.points_fit:
        return searcher.points_fit
    count = getattr(searcher.base_space, "valid_count", None)
    return count() if callable(count) else None


def listed_or_done(searcher, n: int):
    """What ask(n) of a searcher set up by screen_searcher returns before any step of its own, else
    None: the next n of the points that fit where its budget covers them all (they are listed, not
    searched), or an empty table once every point of its walk is told."""
    if searcher._enumeration is not None:
        idx = searcher._enumeration[searcher._enum_told: searcher._enum_told + int(n)]
        return searcher.space.table(searcher.space.digits_of(idx))
    total = points_to_walk(searcher)
    if total is not None and len(searcher._memo) >= total:
        return searcher.space.table(np.zeros((0, len(searcher.space.dims)), dtype=np.int64))
    return None


def screened(space, *, enabled: bool = True):
    """(the space to walk, the grid indices of the points that fit or None): a ScreenedSpace
    where ``space`` can be screened and some point fits, else ``space`` itself."""
    if not enabled:
        return space, None
    members = fitting_indices(space)
    if members is None or members.size == 0:
        return space, members
    return ScreenedSpace(space, members), members
