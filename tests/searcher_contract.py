"""The contract every searcher passes (compare optuna/testing/pytest_samplers.py).

Subclass :class:`SearcherContract` in a test module and provide two fixtures:
    space                      -> the search.SearchSpace the searcher works over (a Space or a
                                  HeteroSpace: every check holds for both)
    make_searcher(seed) -> searcher   (a factory fixture: returns a fresh searcher)
Optionally override ``batch`` (rows per ask), ``rounds`` (ask/tell rounds per test) and
:meth:`SearcherContract.resumed` (how the driver resumes this searcher). Every check fails
against a searcher that breaks it (tests/test_searcher_contract.py).
"""

from __future__ import annotations

import numpy as np

from costmodel import METRIC_COLUMNS, REASONS, Metrics, StrategyTable, evaluate, hetero_preset, model_preset
from costmodel._strategy import COLUMNS, FRAMEWORK_NAMES, RECOMPUTE, SCHEDULES
from search import HeteroSpace, PiperSpace, PiperTable, Space
from search._memo import row_keys


def placement_space(*, grid: bool = False) -> HeteroSpace:
    """GPT-3 175B placed on a100x64+h100x64 with few choices (fast evaluations). ``grid``: two
    stages and no boundary shifts, 2,304 points (528 valid, from index 0 on)."""
    model, cluster = model_preset("gpt3-175b"), hetero_preset("a100x64+h100x64")
    if grid:
        return HeteroSpace.from_options(model, cluster, global_batch=1536, pp=(2,), dp=(4, 8, 16), tp=(4, 8),
                                        max_shift=0, microbatches=(64, 128), recompute=("selective", "full"),
                                        zero_stage=(1,))
    return HeteroSpace.from_options(model, cluster, global_batch=1536, pp=(2, 4), dp=(2, 4, 8), tp=(4, 8),
                                    microbatches=(64, 128), recompute=("selective", "full"), zero_stage=(1,))


def _stage_view(t: StrategyTable, attr: str):
    """Per-stage array restricted to the stages each row uses (zeros past pp)."""
    x = getattr(t, attr)
    if x is None:
        return None
    S = int(t["pp"].max()) if len(t) else 0
    x = np.pad(x, ((0, 0), (0, max(0, S - x.shape[1]))))[:, :S]
    return np.where(np.arange(S)[None, :] < t["pp"][:, None], x, 0)


def price(space, table) -> Metrics:
    """The metrics of a table of ``space``'s: costmodel.evaluate, or a PiperSpace's own pricing
    (Piper's formulas)."""
    if isinstance(space, PiperSpace):
        return space.evaluate(table)
    return evaluate(space.model, space.cluster, table)


def columns_equal(a, b) -> bool:
    """Same rows in the same order (per-stage arrays compared on the stages in use), of the same frameworks."""
    if isinstance(a, PiperTable) or isinstance(b, PiperTable):
        return isinstance(a, PiperTable) and a.same_rows(b)
    if ("framework" in a.columns) != ("framework" in b.columns) or (
            "framework" in a.columns and not np.array_equal(a["framework"], b["framework"])):
        return False
    if a.placed or b.placed:
        if a.placed != b.placed or len(a) != len(b):
            return False
        width = max(int(a["pp"].max(initial=0)), int(b["pp"].max(initial=0)))
        return np.array_equal(row_keys(a, 0, width), row_keys(b, 0, width))
    if len(a) != len(b) or not all(np.array_equal(a[c], b[c]) for c in COLUMNS):
        return False
    for attr in ("stage_layers", "stage_recompute"):
        x, y = _stage_view(a, attr), _stage_view(b, attr)
        if (x is None) != (y is None) or (x is not None and not np.array_equal(x, y)):
            return False
    return True


def within_space(space, table) -> np.ndarray:
    """(N,) bool: each row is a point of the space, checked plainly column by column against
    the dimensions' choices and fixed values, then the space's own constraints."""
    if isinstance(space, HeteroSpace):
        return _within_placements(space, table)
    if isinstance(space, PiperSpace):
        return _within_piper(space, table)
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


def _within_placements(space: HeteroSpace, t: StrategyTable) -> np.ndarray:
    """within_space for a placement space: stage by stage against the choices of pool.J, dp.J,
    tp.J, order.J (and the split dims), layers >= 1 adding up to the model's, every boundary
    at its uniform cut round(L (J + 1) / pp) plus a shift choice times shift_layers, the global
    choices and the fixed global batch."""
    dims = {d.name: d for d in space.dims}
    choices = {name: [str(c) for c in d.choices] for name, d in dims.items()}
    pp, L = t["pp"], space.model.layers
    ok = np.isin(pp.astype(str), choices["pp"]) & (t["global_batch"] == space.fixed["global_batch"])
    names = {"schedule": SCHEDULES, "recompute": RECOMPUTE, "framework": FRAMEWORK_NAMES}
    choices.setdefault("framework", [str(x) for x in space.frameworks])
    for name in ("microbatches", "schedule", "recompute", "zero_stage", "sequence_parallel", "vpp", "framework"):
        col = t[name]
        readable = np.asarray(names[name], dtype=object)[col] if name in names else col
        ok &= np.isin(np.asarray(readable).astype(str), choices.get(name, ["1"]))
    pools = np.asarray([p.name for p in space.cluster.pools], dtype=object)
    cuts = np.cumsum(t["layers"], axis=1)
    for j in range(t.num_stages):
        used = j < pp
        stage = {"pool": pools[t["pool"][:, j]], "dp": t["dp"][:, j], "tp": t["tp"][:, j],
                 "order": np.asarray(["tp-inner", "tp-across"], dtype=object)[t["order"][:, j]]}
        if space.has_split:
            split = t["dp2"][:, j] > 0
            stage["dp2"] = t["dp2"][:, j]
            ok &= ~used | ~split | ((t["dp2"][:, j] < t["dp"][:, j]) & np.isin(
                pools[t["pool2"][:, j]].astype(str), choices[f"pool2.{j}"]))
        for k, v in stage.items():
            ok &= ~used | np.isin(np.asarray(v).astype(str), choices[f"{k}.{j}"])
        ok &= ~used | (t["layers"][:, j] >= 1)
        inner = j < pp - 1
        shift = cuts[:, j] - np.rint(L * (j + 1) / pp).astype(np.int64)
        if j < space.num_slots - 1:
            allowed = np.asarray(dims[f"stage_shift.{j}"].choices) * space.shift_layers
            ok &= ~inner | np.isin(shift, allowed)
    return ok & (cuts[:, -1] == L)


def _within_piper(space: PiperSpace, t: PiperTable) -> np.ndarray:
    """within_space for a Piper space, row by row from the graph: pp among its choices, stages
    of consecutive nodes in topological order covering all of them, each cut within max_shift
    of round(n (J + 1) / pp), every node of a stage offering its t, d dividing the
    micro-batches, the TMPC slot 0 or 1, sum of t d at most the devices."""
    g = space.graph
    n, pp_max = len(g.nodes), space.max_stages
    ok = np.zeros(len(t), dtype=bool)
    for r in range(len(t)):
        pp = int(t.pp[r])
        cuts = [int(c) for c in t.bounds[r, : pp + 1]]
        good = 1 <= pp <= pp_max and cuts[0] == 0 and cuts[-1] == n
        good &= all(a < b for a, b in zip(cuts, cuts[1:], strict=False))
        good &= all(abs(cuts[j + 1] - int(n * (j + 1) / pp + 0.5)) <= space.max_shift for j in range(pp - 1))
        for j in range(pp):
            tj, dj = int(t.t[r, j]), int(t.d[r, j])
            good &= all(g.nodes[v].options(tj) for v in range(cuts[j], cuts[j + 1]))
            good &= dj >= 1 and g.microbatches % dj == 0 and int(t.slot[r, j]) in (0, 1)
        good &= sum(int(t.t[r, j]) * int(t.d[r, j]) for j in range(pp)) <= g.max_devices
        ok[r] = good
    return ok


def structural_reasons(space, table) -> np.ndarray:
    """(N,) the cost model's reason codes for everything but memory (0: a strategy it prices)."""
    if isinstance(space, PiperSpace):  # Piper's formulas reject nothing but memory
        reason = np.asarray(price(space, table)["reason"])
        return np.where(reason == REASONS.index("out_of_memory"), 0, reason)
    from costmodel._feasibility import feasibility  # one feasibility for every cluster and table

    return feasibility(space.model, space.cluster, table)


def infeasible_metrics(table: StrategyTable) -> Metrics:
    """Metrics saying every row is infeasible (out of memory), with infinite time."""
    n = len(table)
    out = {k: np.zeros(n) for k in METRIC_COLUMNS}
    out["step_time_s"] = np.full(n, np.inf)
    out["feasible"] = np.zeros(n, dtype=bool)
    out["reason"] = np.full(n, REASONS.index("out_of_memory"), dtype=np.int8)
    out["microbatches"] = np.ones(n, dtype=np.int64)
    return Metrics(out)


class SearcherContract:
    batch = 16
    rounds = 4

    def resumed(self, searcher, make_searcher, seed: int):
        """A searcher resumed the way the driver resumes this kind: a fresh one (same seed)
        given ``searcher.state_dict()``. A searcher whose state lives elsewhere (TPE: its
        journal) overrides this."""
        fresh = make_searcher(seed)
        fresh.load_state_dict(searcher.state_dict())
        return fresh

    def _run(self, searcher, space, rounds, infeasible_every: int = 0):
        asked = []
        for r in range(rounds):
            t = searcher.ask(self.batch)
            asked.append(t)
            if len(t) == 0:
                break
            m = price(space, t)
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
            # the cost core agrees that these are structurally valid
            assert np.all(structural_reasons(space, t) == 0)
            if isinstance(space, (Space, PiperSpace)):  # and they are the space's own tables of valid digits
                digits = space.digits_from_table(t)
                assert np.all(space.valid(digits))
                assert columns_equal(space.table(digits), t)

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
            m = price(space, t) if r % 2 else infeasible_metrics(t)
            first.tell(t, m)
            history.append((t, m))
        again = make_searcher(4)
        for t, m in history:
            again.tell(t, m)
        nxt = first.ask(self.batch)
        assert len(nxt) > 0 and columns_equal(nxt, again.ask(self.batch))

    def test_resume_from_state(self, space, make_searcher):
        s = make_searcher(5)
        for _ in range(2):
            t = s.ask(self.batch)
            s.tell(t, price(space, t))
        again = self.resumed(s, make_searcher, 5)
        nxt = s.ask(self.batch)
        assert len(nxt) > 0 and columns_equal(nxt, again.ask(self.batch))
