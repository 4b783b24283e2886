"""The contract itself: both spaces declare SearchSpace, the searchers use only what it declares,
and every check of SearcherContract fails against a searcher that breaks it."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel import cluster_preset, evaluate, model_preset
from search import (
    GradientSearcher,
    GridSearcher,
    HeteroSpace,
    RandomSearcher,
    SearchSpace,
    Space,
    TPESearcher,
    exact_space,
    partition_space,
)
from tests.searcher_contract import (
    SearcherContract,
    columns_equal,
    placement_space,
    structural_reasons,
    within_space,
)

DECLARED = {n for n in dir(SearchSpace) if not n.startswith("_")} | set(SearchSpace.__annotations__)


@pytest.fixture(scope="module", params=["exact", "placement"])
def space(request):
    if request.param == "exact":
        return exact_space(model_preset("gpt3-175b"), cluster_preset("h100x1024"), 1536)
    return placement_space()


class OnlyDeclared:
    """A space seen through SearchSpace's members alone: anything else is an AttributeError."""

    def __init__(self, space):
        self._space = space

    def __getattr__(self, name):
        if name not in DECLARED:
            raise AttributeError(f"{name!r} is not a member of SearchSpace")
        return getattr(self._space, name)


class Partial(SearchSpace):
    """valid() alone: table, random_digits, ... are missing."""

    def valid(self, digits):
        return np.ones(len(digits), dtype=bool)


def test_both_spaces_declare_the_protocol(space):
    assert isinstance(space, SearchSpace) and issubclass(Space, SearchSpace) and issubclass(HeteroSpace, SearchSpace)
    assert {"valid", "table", "random_digits", "start_points", "digits_of", "dims", "model"} <= DECLARED
    # the mixed-radix members, by hand: stride k is the product of the radices after k
    r = [len(d.choices) for d in space.dims]
    assert space.size == int(np.prod(r, dtype=object)) and list(space.radices) == r
    if space.strides is not None:
        assert list(space.strides) == [int(np.prod(r[k + 1:], dtype=object)) for k in range(len(r))]
        d = space.random_digits(np.random.default_rng(0), 50)
        np.testing.assert_array_equal(space.digits_of(space.index_of(d)), d)
    with pytest.raises(TypeError, match="abstract"):
        Partial()


def test_plain_placement_check_agrees_with_the_space():
    """The contract's own check of a placement row (within_space, then the cost model's
    structural reasons), written apart from HeteroSpace.valid, accepts exactly the digits that
    valid() accepts, on 20,000 uniform draws (about a third valid)."""
    space = placement_space()
    d = np.random.default_rng(0).integers(0, space.radices, size=(20_000, len(space.dims)))
    t = space.table(d)
    ok = within_space(space, t) & (structural_reasons(space, t) == 0)
    valid = space.valid(d)
    assert 0.2 < valid.mean() < 0.5
    np.testing.assert_array_equal(ok, valid)


@pytest.mark.parametrize("kind", ["grid", "random", "tpe", "gradient"])
def test_searchers_use_only_declared_members(space, kind, tmp_path):
    """A searcher driven through OnlyDeclared asks what it asks on the space itself (MCMC's moves
    read the structure of each kind of space, so they are not part of this check; nor is the
    memory screen, search._screen, which lists a search.Space through its lookup table: TPE runs
    unscreened here, and so does the gradient search)."""
    if kind == "grid" and space.strides is None:
        pytest.skip("no grid over 2**63 points")
    make = {"grid": lambda s: GridSearcher(s, chunk=4096), "random": lambda s: RandomSearcher(s, seed=3),
            "tpe": lambda s: TPESearcher(s, seed=3, n_startup_trials=4, screen=False),
            "gradient": lambda s: GradientSearcher(s, seed=3, samples=8, screen=0)}[kind]
    plain, proxied = make(space), make(OnlyDeclared(space))
    for _ in range(2):
        a, b = plain.ask(6), proxied.ask(6)
        assert len(a) > 0 and columns_equal(a, b)
        m = evaluate(space.model, space.cluster, a)
        plain.tell(a, m)
        proxied.tell(b, m)


# ---- the gradient searcher passes the contract on every kind of space -------------------------
class TestGradientContract(SearcherContract):
    """On the exact and the placement space (the module's ``space``)."""

    @pytest.fixture
    def make_searcher(self, space):
        return lambda seed: GradientSearcher(space, seed=seed, samples=16)


class TestGradientPartitionContract(SearcherContract):
    """Per-stage distributions: boundary shifts and recompute of each stage."""

    @pytest.fixture(scope="class")
    def space(self):
        return partition_space(model_preset("gpt3-175b"), cluster_preset("h100x1024"), 1536)

    @pytest.fixture
    def make_searcher(self, space):
        return lambda seed: GradientSearcher(space, seed=seed, samples=16)


# ---- mutants: RandomSearcher broken in one way each ----------------------------------------
class Unseeded(RandomSearcher):
    def ask(self, n):
        self._asks += 1
        return self.space.table(self.space.random_digits(np.random.default_rng(), int(n)))


class TooMany(RandomSearcher):
    def ask(self, n):
        return super().ask(n + 1)


class Outside(RandomSearcher):
    def ask(self, n):
        rng = np.random.default_rng([self.seed, self._asks])
        self._asks += 1
        d = rng.integers(0, self.space.radices, size=(64 * int(n), len(self.space.dims)))
        return self.space.table(d[~self.space.valid(d)][: int(n)])


class RejectsInfeasible(RandomSearcher):
    def tell(self, table, metrics):
        if not np.asarray(metrics["feasible"]).any():
            raise ValueError("no feasible row told")
        super().tell(table, metrics)


class ForgetsReplays(RandomSearcher):
    def tell(self, table, metrics):
        pass


class NoState(RandomSearcher):
    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


MUTANTS = [
    ("test_reproducible_for_a_seed", Unseeded, AssertionError),
    ("test_asks_at_most_n_rows", TooMany, AssertionError),
    ("test_never_outside_the_space", Outside, AssertionError),
    ("test_accepts_infeasible_rows", RejectsInfeasible, ValueError),
    ("test_resume_by_replaying_tells", ForgetsReplays, AssertionError),
    ("test_resume_from_state", NoState, AssertionError),
]


@pytest.mark.parametrize("check,mutant,error", MUTANTS)
def test_each_check_fails_on_a_searcher_that_breaks_it(space, check, mutant, error):
    contract = SearcherContract()
    getattr(contract, check)(space, lambda seed: RandomSearcher(space, seed))  # the intact searcher passes
    with pytest.raises(error):
        getattr(contract, check)(space, lambda seed: mutant(space, seed))


def test_every_check_has_a_mutant():
    checks = {n for n in dir(SearcherContract) if n.startswith("test_")}
    assert checks == {check for check, _, _ in MUTANTS}


def test_a_placement_grid_lists_each_placement_once():
    # Slots past a row's pp do not change its strategy; the grid keeps only their canonical
    # digit, so no two listed rows are the same placement, and none is lost: every valid
    # point's placement is listed.
    import numpy as np

    space = placement_space(grid=True)
    idx, table = space.rows(0, space.size)
    p = table["pp"]

    def key(t, i):
        glob = tuple(t[k][i].item() for k in ("pp", "microbatches", "schedule", "recompute", "zero_stage",
                                               "sequence_parallel", "vpp"))
        return glob + tuple(tuple(t.stages[k][i, :t["pp"][i]].tolist()) for k in sorted(t.stages))

    keys = [key(table, i) for i in range(len(idx))]
    assert len(set(keys)) == len(keys) > 0
    every = np.arange(space.size)
    valid = every[space.valid(space.digits_of(every))]
    full = space.table(space.digits_of(valid))
    assert {key(full, i) for i in range(len(valid))} == set(keys)
    assert len(valid) > len(keys) or int(p.max()) == int(p.min())
