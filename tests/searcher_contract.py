"""The contract every searcher passes (compare optuna/testing/pytest_samplers.py).

Subclass :class:`SearcherContract` in a test module and provide two fixtures:
    space                      -> the search.Space the searcher works over
    make_searcher(seed) -> searcher   (a factory fixture: returns a fresh searcher)
Optionally override ``batch`` (rows per ask) and ``rounds`` (ask/tell rounds per test).
"""

from __future__ import annotations

import numpy as np

from costmodel import METRIC_COLUMNS, Metrics, StrategyTable, evaluate
from costmodel._strategy import COLUMNS, RECOMPUTE


def _stage_view(t: StrategyTable, attr: str):
    """Per-stage array restricted to the stages each row uses (zeros past pp)."""
    x = getattr(t, attr)
    if x is None:
        return None
    S = int(t["pp"].max()) if len(t) else 0
    x = np.pad(x, ((0, 0), (0, max(0, S - x.shape[1]))))[:, :S]
    return np.where(np.arange(S)[None, :] < t["pp"][:, None], x, 0)


def columns_equal(a: StrategyTable, b: StrategyTable) -> bool:
    """Same rows in the same order (per-stage arrays compared on the stages in use)."""
    if len(a) != len(b) or not all(np.array_equal(a[c], b[c]) for c in COLUMNS):
        return False
    for attr in ("stage_layers", "stage_recompute"):
        x, y = _stage_view(a, attr), _stage_view(b, attr)
        if (x is None) != (y is None) or (x is not None and not np.array_equal(x, y)):
            return False
    return True


def within_space(space, table: StrategyTable) -> np.ndarray:
    """(N,) bool: each row is a point of the space, checked plainly column by column against
    the dimensions' choices and fixed values, then the space's own constraints."""
    n = len(table)
    ok = np.ones(n, dtype=bool)
    readable = table.readable()
    for d in space.dims:
        if d.base == "microbatches":
            m = table["global_batch"] // (table["dp"] * table["micro_batch"])
            ok &= np.isin(m, list(d.choices)) & (table["global_batch"] % (table["dp"] * table["micro_batch"]) == 0)
        elif d.base == "stage_shift":
            continue
        elif d.base == "stage_recompute":
            j = d.stage
            used = table["pp"] > j
            vals = np.asarray(RECOMPUTE, dtype=object)[table.stage_recompute[:, j]]
            ok &= ~used | np.isin(vals.astype(str), [str(c) for c in d.choices])
        else:
            col = readable[d.name]
            ok &= np.isin(np.asarray(col).astype(str), [str(c) for c in d.choices])
    for k, v in space.fixed.items():
        if k == "microbatches":
            ok &= table["global_batch"] == table["dp"] * table["micro_batch"] * v
        else:
            ok &= np.asarray(readable[k]).astype(str) == str(v)
    ok &= table.num_gpus <= space.cluster.num_gpus
    if table.stage_layers is not None:
        active = np.arange(table.stage_layers.shape[1])[None, :] < table["pp"][:, None]
        ok &= table.stage_layers.sum(axis=1, where=active) == space.model.layers
        ok &= np.all(~active | (table.stage_layers >= 1), axis=1)
    return ok


def infeasible_metrics(table: StrategyTable) -> Metrics:
    """Metrics saying every row is infeasible (out of memory), with infinite time."""
    n = len(table)
    out = {k: np.zeros(n) for k in METRIC_COLUMNS}
    out["step_time_s"] = np.full(n, np.inf)
    out["feasible"] = np.zeros(n, dtype=bool)
    out["reason"] = np.full(n, 8, dtype=np.int8)
    out["microbatches"] = np.ones(n, dtype=np.int64)
    return Metrics(out)


class SearcherContract:
    batch = 16
    rounds = 4

    def _run(self, searcher, space, rounds, infeasible_every: int = 0):
        asked = []
        for r in range(rounds):
            t = searcher.ask(self.batch)
            asked.append(t)
            if len(t) == 0:
                break
            m = evaluate(space.model, space.cluster, t)
            if infeasible_every and r % infeasible_every == 0:
                m = infeasible_metrics(t)
            searcher.tell(t, m)
        return asked

    def test_reproducible_for_a_seed(self, space, make_searcher):
        a = self._run(make_searcher(1), space, self.rounds)
        b = self._run(make_searcher(1), space, self.rounds)
        assert len(a) == len(b)
        assert all(columns_equal(x, y) for x, y in zip(a, b, strict=True))

    def test_asks_at_most_n_rows(self, space, make_searcher):
        s = make_searcher(0)
        t = s.ask(5)
        assert 0 < len(t) <= 5

    def test_never_outside_the_space(self, space, make_searcher):
        for t in self._run(make_searcher(2), space, self.rounds):
            assert np.all(within_space(space, t))
            digits = space.digits_from_table(t)
            assert np.all(space.valid(digits))
            assert columns_equal(space.table(digits), t)
            # feasible() of the cost core agrees that these are structurally valid
            from costmodel._evaluate import feasibility
            assert np.all(feasibility(space.model, space.cluster, t) == 0)

    def test_accepts_infeasible_rows(self, space, make_searcher):
        s = make_searcher(3)
        for _ in range(self.rounds):
            t = s.ask(self.batch)
            s.tell(t, infeasible_metrics(t))
        assert np.all(within_space(space, s.ask(self.batch)))

    def test_resume_by_replaying_tells(self, space, make_searcher):
        first = make_searcher(4)
        history = []
        for r in range(self.rounds):
            t = first.ask(self.batch)
            m = evaluate(space.model, space.cluster, t) if r % 2 else infeasible_metrics(t)
            first.tell(t, m)
            history.append((t, m))
        again = make_searcher(4)
        for t, m in history:
            again.tell(t, m)
        assert columns_equal(first.ask(self.batch), again.ask(self.batch))

    def test_state_dict_round_trip(self, space, make_searcher):
        s = make_searcher(5)
        for _ in range(2):
            t = s.ask(self.batch)
            s.tell(t, evaluate(space.model, space.cluster, t))
        state = s.state_dict()
        assert isinstance(state, dict)
        if state:
            fresh = make_searcher(5)
            fresh.load_state_dict(state)
            assert columns_equal(s.ask(self.batch), fresh.ask(self.batch))
