"""A Metropolis-Hastings placement search over any Space (written for HeteroSpace).

FlexFlow's rule (Jia et al. 2019, Sec. 5): from the current state propose one local move
(space.propose), accept it if it is faster, or else with probability
exp(-beta * (t_new - t_cur) / t_cur); an ensemble of chains in one numpy array, started
from the space's start points and random valid points, each chain restarted from the best
state found every ``reset_every`` steps. Infeasible states score above every feasible one,
ordered by memory (so chains walk out of out-of-memory regions).

It follows the Searcher contract (ask(n) -> table, tell(table, metrics); ask is a pure
function of the seed and the told batches, so resume = replay the tells). It stands in
until MCMCSearcher (helper "mcmc") lands; that one takes the same space unchanged.
"""

from __future__ import annotations

import numpy as np

from costmodel import Metrics

INFEASIBLE_BASE_S = 1e12  # infeasible scores start here, plus their memory in GB


def score(metrics: Metrics) -> np.ndarray:
    """Lower is better: step time where feasible, else a large constant plus memory."""
    return np.where(metrics["feasible"], metrics["step_time_s"],
                    INFEASIBLE_BASE_S + metrics["mem_total_bytes"] / 1e9)


class PlacementMCMC:
    def __init__(self, space, seed: int = 0, *, chains: int = 32, beta: float = 20.0, reset_every: int = 50):
        self.space, self.seed, self.chains, self.beta, self.reset_every = space, seed, chains, beta, reset_every
        self._k = 0  # asks so far
        self._cur: np.ndarray | None = None
        self._cur_score: np.ndarray | None = None
        self._pending: np.ndarray | None = None
        self.best_digits: np.ndarray | None = None
        self.best_score = np.inf

    def _init(self) -> np.ndarray:
        rng = np.random.default_rng([self.seed, 0])
        starts = list(self.space.start_points().values())
        n_rand = max(self.chains - len(starts), 0)
        parts = [np.stack(starts)] if starts else []
        if n_rand:
            parts.append(self.space.random_digits(rng, n_rand))
        return np.concatenate(parts)[: self.chains]

    def ask(self, n: int | None = None):
        rng = np.random.default_rng([self.seed, self._k + 1])
        if self._cur is None:
            d = self._init()
        else:
            cur = self._cur
            if self.reset_every and self._k % self.reset_every == 0 and self.best_digits is not None:
                cur = np.where((np.arange(len(cur)) % 2 == 0)[:, None], self.best_digits[None, :], cur)
            d = self.space.propose(cur, rng)
            ok = self.space.valid(d)
            d = np.where(ok[:, None], d, cur)  # an invalid move is a rejected move
        self._pending = d
        self._k += 1
        return self.space.table(d)

    def tell(self, table, metrics: Metrics) -> None:
        d, s = self._pending, score(metrics)
        if self._cur is None:
            self._cur, self._cur_score = d, s
        else:
            rng = np.random.default_rng([self.seed, self._k, 1])
            with np.errstate(over="ignore", invalid="ignore"):
                p = np.exp(-self.beta * (s - self._cur_score) / self._cur_score)
            acc = (s <= self._cur_score) | (rng.random(len(s)) < p)
            self._cur = np.where(acc[:, None], d, self._cur)
            self._cur_score = np.where(acc, s, self._cur_score)
        i = int(np.argmin(s))
        if s[i] < self.best_score:
            self.best_score, self.best_digits = float(s[i]), d[i].copy()

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


def run_search(space, evaluate_fn, *, steps: int, seed: int = 0, chains: int = 32, beta: float = 20.0):
    """Drive PlacementMCMC for ``steps`` batches; returns (best digits, best score, history of
    the best score per step)."""
    s = PlacementMCMC(space, seed, chains=chains, beta=beta)
    hist = []
    for _ in range(steps):
        t = s.ask(chains)
        s.tell(t, evaluate_fn(t))
        hist.append(s.best_score)
    return s.best_digits, s.best_score, hist


class PlacementTPE:
    """Optuna's TPE over a Space's digits (ordinal dims as integers, the rest categorical),
    through ask/tell in batches; the space's start points are enqueued as the first trials.
    Stands in until TPESearcher (helper "mcmc") lands."""

    def __init__(self, space, seed: int = 0, *, n_startup_trials: int = 32):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.space = space
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup_trials, multivariate=True)
        self.study = optuna.create_study(direction="minimize", sampler=sampler)
        for d in space.start_points().values():
            self.study.enqueue_trial({dim.name: int(d[k]) for k, dim in enumerate(space.dims)})
        self._trials: list = []
        self.best_digits: np.ndarray | None = None
        self.best_score = np.inf

    def ask(self, n: int):
        self._trials = [self.study.ask() for _ in range(n)]
        rows = []
        for tr in self._trials:
            row = []
            for k, dim in enumerate(self.space.dims):
                r = len(dim.choices)
                if dim.ordinal:
                    row.append(tr.suggest_int(dim.name, 0, r - 1))
                else:
                    row.append(tr.suggest_categorical(dim.name, list(range(r))))
            rows.append(row)
        self._digits = np.array(rows, dtype=np.int64)
        return self.space.table(self._digits)

    def tell(self, table, metrics: Metrics) -> None:
        s = score(metrics)
        s = np.where(self.space.valid(self._digits), s, 2 * INFEASIBLE_BASE_S)
        for tr, v in zip(self._trials, s, strict=True):
            self.study.tell(tr, float(v))
        i = int(np.argmin(s))
        if s[i] < self.best_score:
            self.best_score, self.best_digits = float(s[i]), self._digits[i].copy()

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass
