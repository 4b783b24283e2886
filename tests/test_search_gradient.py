"""GradientSearcher: the score-function estimator against an analytic gradient, the rank
utilities by hand, concentration on a known optimum, no point asked twice, bad options."""

from __future__ import annotations

import math
import os
import types

import numpy as np
import pytest

import cli
from costmodel import METRIC_COLUMNS, InputError, Metrics, cluster_preset, evaluate, model_preset
from search import GradientSearcher, SearchSpace, Space, exact_space
from search._gradient import entropy_gradient, rank_utilities, score_function_gradient, softmax
from search._memo import point_keys
from search._options import GradientOptions

GPT3 = model_preset("gpt3-175b")
H100 = cluster_preset("h100x1024")


class TwoDims(SearchSpace):
    """A hand-made space: a in {0, 1}, b in {0, 1, 2}, the point (a 1, b 2) outside it. Only
    what the searcher's sampling reads (no table: nothing here is evaluated)."""

    def __init__(self) -> None:
        self.model = types.SimpleNamespace(layers=1, seq_len=1)
        self.cluster = types.SimpleNamespace(gpu=types.SimpleNamespace(hbm_bytes=1.0))
        self.fixed = {"global_batch": 1}
        self.dims = (types.SimpleNamespace(name="a", choices=(0, 1), base="a", stage=-1),
                     types.SimpleNamespace(name="b", choices=(0, 1, 2), base="b", stage=-1))

    def valid(self, digits):
        d = np.asarray(digits)
        return (d >= 0).all(axis=1) & (d < self.radices).all(axis=1) & ~((d[:, 0] == 1) & (d[:, 1] == 2))

    def valid_indices(self, start, stop):
        idx = np.arange(start, stop)
        return idx[self.valid(self.digits_of(idx))]

    def table(self, digits):
        raise AssertionError("not evaluated")

    def random_digits(self, rng, n):
        return self.digits_of(self.valid_indices(0, self.size)[rng.integers(0, 5, n)])

    def start_points(self):
        return {}

    def to_json(self):
        return {}

    @classmethod
    def from_json(cls, d, model, cluster):
        return cls()


def _expected_f(theta: np.ndarray, tau: float, f: np.ndarray) -> float:
    """E[f] under the walk, by hand: b is drawn first (it settles a: b 2 allows only a 0) from
    softmax(theta_b / tau) over its 3 choices, then a from softmax(theta_a / tau) over the a's
    that b allows."""
    e = lambda z: np.exp(np.asarray(z) / tau)  # noqa: E731
    pb = e(theta[1, :3]) / e(theta[1, :3]).sum()
    total = 0.0
    for b in range(3):
        allowed = [0, 1] if b < 2 else [0]
        pa = e(theta[0, allowed]) / e(theta[0, allowed]).sum()
        total += pb[b] * sum(pa[i] * f[a, b] for i, a in enumerate(allowed))
    return total


def test_score_function_gradient_matches_the_analytic_gradient():
    # f(a, b) by hand; (1, 2) is outside the space and never drawn.
    f = np.array([[1.0, 0.0, 3.0], [2.0, 0.5, np.nan]])
    theta = np.array([[0.3, -0.2, 0.0], [0.1, 0.4, -0.5]])
    tau = 0.7
    s = GradientSearcher(TwoDims(), seed=0)
    assert s._walk is not None and s._walk.order == [1, 0]  # b settles a, so b is drawn first
    digits, score = s.sample(theta, tau, np.random.default_rng(0), 400_000)
    assert not ((digits[:, 0] == 1) & (digits[:, 1] == 2)).any()
    fx = f[digits[:, 0], digits[:, 1]]
    est = score_function_gradient(score, fx - fx.mean()) / tau  # (D, C)
    # Central differences of the closed-form expectation.
    h, exact = 1e-5, np.zeros_like(theta)
    for k in range(2):
        for c in range(len(TwoDims().dims[k].choices)):
            up, down = theta.copy(), theta.copy()
            up[k, c] += h
            down[k, c] -= h
            exact[k, c] = (_expected_f(up, tau, f) - _expected_f(down, tau, f)) / (2 * h)
    assert np.abs(exact).max() > 0.1
    np.testing.assert_allclose(est, exact, atol=0.01)
    # The unmasked softmax's score (ignoring that b 2 leaves a no choice) is measurably wrong.
    q_a = softmax(theta[0, :2] / tau)
    wrong = score.copy()
    wrong[:, 0, :2] = np.eye(2)[digits[:, 0]] - q_a
    bad = score_function_gradient(wrong, fx - fx.mean()) / tau
    assert np.abs(bad[0, :2] - exact[0, :2]).max() > 0.05


def test_rank_utilities_by_hand():
    # N = 4: raw weights max(0, log 3 - log i) = log 3, log 1.5, 0, 0; times 4 / their sum, minus 1.
    s = math.log(3) + math.log(1.5)
    w1, w2 = 4 * math.log(3) / s - 1, 4 * math.log(1.5) / s - 1
    np.testing.assert_allclose(rank_utilities(np.array([3.0, 1.0, 2.0, np.inf])), [-1.0, w1, w2, -1.0])
    # ties share: the two best split w1 + w2, the two worst -1 each
    np.testing.assert_allclose(rank_utilities(np.array([5.0, 1.0, 5.0, 1.0])), [-1, (w1 + w2) / 2, -1, (w1 + w2) / 2])
    assert rank_utilities(np.array([2.0, 7.0, 1.0, 4.0, 3.0])).sum() == pytest.approx(0.0, abs=1e-12)


def test_entropy_gradient_by_hand():
    # H(softmax(theta)) for two choices, theta = (t, 0): dH/dt = -p (1 - p) t with p = sigmoid(t).
    t = 0.8
    p = 1 / (1 + math.exp(-t))
    g = entropy_gradient(np.array([[t, 0.0, 0.0]]), np.array([[True, True, False]]), 1.0)
    assert g[0, 0] == pytest.approx(-p * (1 - p) * t) and g[0, 1] == pytest.approx(p * (1 - p) * t)
    assert g[0, 2] == 0.0


def _fake_metrics(tokens_per_s: np.ndarray) -> Metrics:
    n = len(tokens_per_s)
    out = {k: np.zeros(n) for k in METRIC_COLUMNS}
    out["feasible"] = np.ones(n, dtype=bool)
    out["tokens_per_s"] = np.asarray(tokens_per_s, dtype=np.float64)
    out["step_time_s"] = 1.0 / out["tokens_per_s"]
    out["reason"] = np.zeros(n, dtype=np.int8)
    out["microbatches"] = np.ones(n, dtype=np.int64)
    return Metrics(out)


def test_distribution_concentrates_on_a_known_optimum():
    # Throughput = 2 ** -(digits away from a target point), every row feasible: the target is the
    # unique optimum, each dimension's best choice is the target's whatever the others are.
    space = Space.from_options(GPT3, H100, global_batch=1536, base="fixed", tp=[1, 2, 4, 8], pp=[1, 2, 4, 8, 16],
                               micro_batch=[1, 2, 4], recompute=["none", "selective", "full"], zero_stage=[0, 1])
    target = space.random_digits(np.random.default_rng(7), 1)[0]
    s = GradientSearcher(space, seed=1, samples=16, restart=0)
    for _ in range(40):
        t = s.ask(16)
        d = space.digits_from_table(t)
        s.tell(t, _fake_metrics(2.0 ** -(d != target).sum(axis=1)))
    p = s.probabilities()
    for k, dim in enumerate(space.dims):
        if len(dim.choices) > 1:
            assert p[k, target[k]] > 0.9, (dim.name, p[k])


def test_never_asks_a_point_twice_and_restarts_when_collapsed():
    space = exact_space(GPT3, H100, 1536)
    s = GradientSearcher(space, seed=3, samples=16, lr=3.0)
    seen: list[np.ndarray] = []
    for _ in range(60):
        t = s.ask(16)
        assert 0 < len(t) <= 16
        seen.append(point_keys(space, space.digits_from_table(t)))
        s.tell(t, evaluate(space.model, space.cluster, t))
    keys = np.concatenate(seen)
    assert len(np.unique(keys)) == len(keys) == 960
    assert s.restarts >= 1  # lr 3 collapses the distribution within 60 steps, and it starts again


@pytest.mark.parametrize("field,value", [("samples", 1), ("lr", 0.0), ("temperature", -1.0), ("cooling", 1.5),
                                         ("cooling", 0.0), ("entropy", -0.1), ("memory_penalty", -1.0),
                                         ("restart", 2), ("min_temperature", 5.0)])
def test_bad_option_names_it(field, value):
    with pytest.raises(InputError) as err:
        GradientOptions(**{field: value})
    assert err.value.argument == field and err.value.got == value
    with pytest.raises(InputError) as err:
        GradientSearcher(exact_space(GPT3, H100, 1536), seed=0, **{field: value})
    assert err.value.argument == field


def test_cli_bad_option_one_line_exit_2_nothing_written(tmp_path, capsys):
    out = str(tmp_path / "run")
    argv = ["search", "gradient", "--space", "exact", "--budget", "50", "--cooling", "1.5", "--out", out,
            "--in-process", "--no-progress"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["plansweep search: error: --cooling: expected a number in (0, 1] (1: no annealing), got 1.5"]
    assert not os.path.exists(out)


def test_cli_search_gradient_finds_feasible_strategies(capsys):
    assert cli.main(["search", "gradient", "--space", "exact", "--budget", "200", "--samples", "16", "--top", "1",
                     "--json"]) == 0
    import json

    got = json.loads(capsys.readouterr().out)
    assert got["searcher"] == "gradient" and got["evaluations"] == 200 and got["feasible"] > 0
    assert got["best"][0]["tokens_per_s"] > 0 and got["best"][0]["reason"] == "ok"


def test_start_sample_scores_its_points_as_uniform_draws_and_leans_toward_the_best():
    """The start sample's points scored under zero logits (``sample(..., given=...)``): the digits are
    the given ones, and onehot - q with q uniform over the digits the walk allows after the digits before
    (counted here from the points that fit, in the walk's order). After the sample is told, the logits
    are one rank-weighted step over it: the best point of the sample is more likely than under the
    uniform distribution, the worst less."""
    from tests.test_search_budget import drive, trap_space

    space = trap_space()
    s = GradientSearcher(space, seed=1, budget=30)
    fit = s.space.digits_of(s.space.valid_indices(0, space.size))  # (38, D) the points that fit
    digits, score = s.sample(np.zeros_like(s._theta), 1.0, np.random.default_rng(0), len(fit), given=fit)
    assert (digits == fit).all()
    order = s._walk.order
    for i, x in enumerate(fit):
        for j, k in enumerate(order):
            same = (fit[:, order[:j]] == x[order[:j]]).all(axis=1)
            allowed = np.unique(fit[same, k])
            want = np.zeros(s._mask.shape[1])
            want[allowed] = -1.0 / len(allowed)
            want[x[k]] += 1.0
            assert np.allclose(score[i, k], want), (i, k)
    assert s._sample is not None and len(s._sample) == 6  # 0.2 x 30, more than the 4 draws a step
    drive(s, space, 6)  # the sample, told
    found, vals = s._memo.lookup(point_keys(s.space, s._sample))
    assert found.all() and s._theta.any()
    best, worst = s._sample[np.argmin(vals[:, 0])], s._sample[np.argmax(vals[:, 0])]

    def logp(theta, x):
        _, sc = s.sample(theta, 1.0, np.random.default_rng(0), 1, given=x[None, :])
        q = sc[0] - np.eye(sc.shape[2])[x]  # -q at every dimension (onehot taken off)
        return float(np.log(np.where(s._mask[np.arange(len(x)), x], -q[np.arange(len(x)), x], 1.0)).sum())

    zero = np.zeros_like(s._theta)
    assert logp(s._theta, best) > logp(zero, best)
    assert logp(s._theta, worst) < logp(zero, worst)


def test_on_a_space_too_large_for_grid_keys_the_recipes_are_asked_first():
    """A placement space of about 1e58 points has no grid keys and so no random start sample; the gradient search
    still asks the space's recipes first, so its best is never below theirs (the mixed-cluster plan the
    speed-weighted recipe gives, which the softmax's draws alone rarely reach: under 1 in 1,000 of them fit)."""
    from costmodel import hetero_preset
    from search import HeteroSpace

    model, hc = model_preset("gpt3-175b"), hetero_preset("a100x64+h100x64")
    space = HeteroSpace.from_options(model, hc, global_batch=1536, pp=(4, 6, 8, 12, 16), dp=(1, 2, 4, 8, 16),
                                     tp=(1, 2, 4, 8), microbatches=(16, 24, 32, 48, 64, 96, 128, 192),
                                     recompute=("selective", "full"), zero_stage=(0, 1))
    assert space.strides is None
    starts = np.array(list(space.start_points().values()), dtype=np.int64)
    s = GradientSearcher(space, seed=0, budget=2000)
    first = s.ask(64)
    assert len(first) == len(starts)
    told = evaluate(model, hc, first)
    recipes = evaluate(model, hc, space.table(starts))
    assert sorted(np.round(told["tokens_per_s"])) == sorted(np.round(recipes["tokens_per_s"]))
