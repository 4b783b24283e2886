"""A differentiable strategy search: one softmax distribution per dimension, trained by the
score-function (REINFORCE) gradient of a rank-shaped objective, numpy only.

The idea (DARTS, Liu et al., ICLR 2019: relax a discrete choice to a softmax over its options
and follow the gradient) applied to a strategy space whose objective is a black box: the cost
model is not differentiable in a choice (a table row holds one tp, one schedule), so the
gradient of the expected objective is estimated from samples (Williams 1992):

    J(theta) = E_{x ~ p_theta}[u(x)]       grad J = E[u(x) grad log p_theta(x)]
             ~ (1/N) sum_i (u_i - b) grad log p_theta(x_i)

with the baseline b (the batch's mean utility) keeping the estimate unbiased and its variance
down. Gumbel-softmax / straight-through estimators are not offered: they need the cost as a
differentiable function of a relaxed (mixed) choice, and costmodel.evaluate prices whole rows.

The distribution. Dimension k holds logits theta_k (one per choice) and temperature tau:
p_k = softmax(theta_k / tau). A point is drawn dimension by dimension, like TPE's conditional
walk (search._tpe): the non-stage dimensions in the order of search._tpe.walk_order (the
roots of the space's conditional tree first), each among the digits that some valid point
agrees with given the digits drawn so far, with probability softmax over those digits only
(the masked softmax q_k). Every draw is a valid point, and

    grad_{theta_k} log p(x) = (onehot(x_k) - q_k) / tau

(zero where one digit is allowed). Per-stage dimensions (partition spaces: boundary shifts
and recompute per stage) have a distribution of their own per stage, drawn independently for
the stages the point's pp uses (the others keep their canonical digit). Where the non-stage
combinations are too many to list (search._tpe.CONDITIONAL_MAX_POINTS) every dimension is
drawn independently; a draw outside the space (Space.valid false; also possible on per-stage
and placement spaces) is not evaluated and counts as the worst sample of its step.

Utility. A sample's cost is its seconds per token where feasible; out of memory, with
``memory_penalty`` lambda > 0, its time proxy (search._memo.row_time_proxy) times
(1 + lambda * (mem / HBM - 1)) (the soft memory walls of MCMC and TPE); otherwise infinite.
Utilities are the rank weights of natural evolution strategies (Wierstra et al., JMLR 2014,
Sec. 3.1, "fitness shaping"): the i-th best of N samples weighs max(0, log(N/2 + 1) - log i),
normalised to mean 1, minus 1 (the baseline); ties share their weights. Ranks make the step
size independent of the throughput's scale and of how bad an out-of-memory point is.

The step. ``samples`` S draws per step, in rounds of S until S distinct points not evaluated
yet are drawn (at most MAX_ROUNDS rounds; draws after the S-th new point are discarded); the
step's gradient uses every kept draw, points evaluated before priced from the memo (so the
budget pays only for new points). ``entropy`` beta adds beta * grad H(p_k) per dimension
(H the entropy of the unmasked softmax) against an early collapse. Update:
theta += lr * grad; temperature tau = max(min_temperature, temperature * cooling^t), t the
steps since the last restart. A step whose rounds find fewer than S / 4 new points (the
distribution has collapsed on evaluated points) restarts, with ``restart`` 1: the logits go
back to zero (uniform) and the step is drawn again; the memo stays, so the restarted search
asks only new points. Points still missing are filled with uniformly random valid points not
evaluated yet (asked, not part of the gradient).

Feasibility first (``screen`` 1, the default; search._screen): where the space can be listed and
some point fits in memory, the distributions range over the points that fit (the walk's allowed
digits and the fill come from them), so every draw is a feasible plan, and a space where under 1%
fits is searched among those few; elsewhere the space as given.

A known budget B (``budget``, the driver passes it), three phases (the first and last shared with
MCMC, search._local):
    start sample  the first ``start_sample`` share (20%): the space's recipes (Space.start_points: data
              parallelism and Megatron-LM's, among the points that fit) and uniformly random points of
              the walk (search._local.start_sample). The logits then start at one gradient step (lr, rank
              utilities) over the sample, its points scored as draws of the uniform distribution, so the
              first draws lean toward the digits of its best plans. Used where the sample holds more
              points than a step's draws; on a space too large for grid keys, the recipes alone.
    gradient  the evaluations left before the late phase, about sqrt of that many draws a step
              (``samples`` None; 4 to 16) with a cooling that brings the temperature to
              ``min_temperature`` at their last step (``cooling`` None; auto_schedule), so that a small
              budget still ends on a concentrated distribution.
    late      the last ``polish`` share (50%, and at least 64 evaluations up to 80% of B:
              search._local.late_evaluations): POLISH_BATCH unevaluated neighbours of the peaks among the
              plans told at a time (search._local.polish_batch).
Shares chosen on draw seed 1 (BENCHMARKS.md, "Search quality on drawn problems"). A budget covering
every point that fits evaluates each once. Without a budget: 16 draws a step and cooling 0.97, as
tuned on the exact space.

Determinism and resume (search._base.Searcher): step k draws from
np.random.default_rng([seed, STEP_STREAM, k]) and the state after k tells is a function of the
told batches; state_dict() holds it as plain arrays (logits, step, memo).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from costmodel import InputError, Metrics, StrategyTable
from search._base import Searcher, SearchSpace, check_int, soft_cost
from search._local import late_evaluations, polish_batch, sample_left, sample_size, single_changes, walk_digits
from search._local import start_sample as draw_start_sample
from search._memo import Memo, hbm_of, keys_from_plain, keys_to_plain, match_rows, point_keys, stage_width, told_values
from search._screen import listed_or_done, points_to_walk, screen_searcher

# Defaults chosen on tuning seeds 100-119 (exact space, batch 512, Llama 3 70B) and 100-104 (the
# partition problem), kept apart from the reported seeds 0-9 (BENCHMARKS.md, "Gradient search").
DEFAULT_SAMPLES = 16
DEFAULT_LR = 2.0
DEFAULT_TEMPERATURE = 1.0
# tau = max(0.1, 0.97^t): 0.1 after 76 steps (1,216 draws) since the last restart.
DEFAULT_COOLING = 0.97
# With a budget (``samples`` and ``cooling`` None, auto): the gradient phase of G evaluations draws
# about sqrt(G) points a step, between MIN_SAMPLES and DEFAULT_SAMPLES, and cools so that the
# temperature reaches min_temperature at its last step (auto_schedule).
MIN_SAMPLES = 4
# Share of a known budget spent last on the unevaluated neighbours of the best points told (the
# peaks, search._local; at least 64 evaluations up to 80%: late_evaluations), POLISH_BATCH points a
# batch, instead of gradient steps. Chosen on draw seed 1 (0.5, 0.7, 0.8 and this rule tried).
DEFAULT_POLISH = 0.5
POLISH_BATCH = 8
# Share of a known budget spent first on the recipes and uniformly random points of the walk
# (search._local.start_sample, as MCMC's); the logits start at one gradient step over them, so the
# gradient steps begin biased toward the sample's best plans. Used where the sample holds more points
# than a step's draws. Chosen on draw seed 1 (BENCHMARKS.md, "Search quality on drawn problems").
DEFAULT_START_SAMPLE = 0.2
DEFAULT_MIN_TEMPERATURE = 0.1
DEFAULT_ENTROPY = 0.0
DEFAULT_MEMORY_PENALTY = 0.1
DEFAULT_RESTART = 1
# 1: walk only the points that fit in memory where the space can be screened (search._screen).
DEFAULT_SCREEN = 1
# Rounds of S draws per step looking for S new points.
MAX_ROUNDS = 8
# A step that finds fewer than S / SATURATED new points restarts (``restart`` 1).
SATURATED = 4
# Random valid candidates per missing point when filling a step.
FILL_CANDIDATES = 16
STEP_STREAM = 2
FILL_STREAM = 3
POLISH_STREAM = 5
SAMPLE_STREAM = 6
STATE_VERSION = 1


def softmax(logits: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Softmax over the last axis, over the entries where ``mask`` holds (0 elsewhere)."""
    z = np.where(mask, logits, -np.inf) if mask is not None else logits
    z = z - np.max(z, axis=-1, keepdims=True)
    e = np.exp(z)
    return e / np.sum(e, axis=-1, keepdims=True)


def rank_utilities(cost: np.ndarray) -> np.ndarray:
    """(N,) NES fitness shaping (Wierstra et al. 2014, Sec. 3.1) of costs (lower is better):
    the i-th best weighs N max(0, log(N/2 + 1) - log i) / sum_j max(0, log(N/2 + 1) - log j),
    minus 1 (the baseline: the mean weight); tied costs share the mean of their weights. Sums
    to zero; times N the NES weights, so that the (1/N) mean of score_function_gradient is
    NES's sum and the step size does not depend on N."""
    n = len(cost)
    if n == 0:
        return np.zeros(0)
    raw = np.maximum(0.0, np.log(n / 2 + 1) - np.log(np.arange(1, n + 1)))
    w = n * raw / raw.sum() - 1.0  # (N,) by rank, best first
    order = np.argsort(cost, kind="stable")
    sorted_cost = cost[order]
    # Ties: the mean weight over each run of equal costs (inf included).
    _, start, count = np.unique(sorted_cost, return_index=True, return_counts=True)
    group_mean = np.add.reduceat(w, start) / count
    out = np.empty(n)
    out[order] = np.repeat(group_mean, count)
    return out


def score_function_gradient(score: np.ndarray, utility: np.ndarray) -> np.ndarray:
    """The REINFORCE estimate (1/N) sum_i u_i grad log p(x_i) from the (N, ...) gradients of
    the samples' log-probabilities ``score`` and their (N,) utilities (baseline already taken
    off)."""
    return np.tensordot(utility, score, axes=(0, 0)) / max(len(utility), 1)


def entropy_gradient(logits: np.ndarray, mask: np.ndarray, tau: float) -> np.ndarray:
    """(D, C) gradient of sum_k H(softmax(theta_k / tau)) with respect to theta (entries outside
    ``mask`` zero): dH/dtheta_j = -p_j (log p_j + H) / tau."""
    p = softmax(logits / tau, mask)
    with np.errstate(divide="ignore", invalid="ignore"):
        logp = np.where(mask & (p > 0), np.log(np.where(p > 0, p, 1.0)), 0.0)
    h = -np.sum(p * logp, axis=1, keepdims=True)
    return np.where(mask, -p * (logp + h) / tau, 0.0)


@dataclasses.dataclass(frozen=True)
class _Step:
    """Everything random about one step, a pure function of (seed, step, state before it)."""

    digits: np.ndarray  # (N, D) the kept draws
    score: np.ndarray  # (N, D, C) grad of log p(x_i) times tau (onehot - q)
    keys: np.ndarray  # (N,) their keys
    valid: np.ndarray  # (N,) bool: in the space (else never asked, worst utility)
    ask_digits: np.ndarray  # (U, D) distinct new points to evaluate: new draws, then fill
    ask_keys: np.ndarray  # (U,)
    restart: bool  # the logits were reset to zero before this step's draws


class GradientSearcher(Searcher):
    """Score-function gradient search over softmax distributions (module docstring).

    ask(n) returns at most n of the step's new points (the first n; the rest, untold, stay
    unknown and their draws leave the gradient); tell(table, metrics) records the told rows,
    applies the step's gradient and advances the step.
    """

    def __init__(self, space: SearchSpace, *, seed: int, samples: int | None = None, lr: float = DEFAULT_LR,
                 temperature: float = DEFAULT_TEMPERATURE, cooling: float | None = None,
                 min_temperature: float = DEFAULT_MIN_TEMPERATURE, entropy: float = DEFAULT_ENTROPY,
                 memory_penalty: float = DEFAULT_MEMORY_PENALTY, restart: int = DEFAULT_RESTART,
                 screen: int = DEFAULT_SCREEN, budget: int | None = None, polish: float = DEFAULT_POLISH,
                 start_sample: float = DEFAULT_START_SAMPLE) -> None:
        self.check_options(samples=samples, lr=lr, temperature=temperature, cooling=cooling,
                           min_temperature=min_temperature, entropy=entropy, memory_penalty=memory_penalty,
                           restart=restart, screen=screen, polish=polish, start_sample=start_sample)
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, np.integer))
                                   or budget < 1):
            raise InputError("budget", "an integer >= 1 (evaluations) or None", budget)
        # Feasibility first (search._screen), as MCMC and TPE: where the space can be screened and
        # some point fits, the distributions range over the points that fit only; a budget that
        # covers them all evaluates each once.
        self.space = space = screen_searcher(self, space, screen=bool(screen), budget=budget)
        self._enum_told = 0
        self.seed = int(seed)
        self.polish = float(polish)
        self.start_sample = float(start_sample)
        auto_samples, auto_cooling = auto_schedule(budget, polish, temperature, min_temperature, start_sample)
        self.samples = int(auto_samples if samples is None else samples)
        self.lr = float(lr)
        self.temperature = float(temperature)
        self.cooling = float(auto_cooling if cooling is None else cooling)
        self.min_temperature = float(min_temperature)
        self.entropy = float(entropy)
        self.memory_penalty = float(memory_penalty)
        self.restart = int(restart)
        self._hbm_bytes = hbm_of(space.cluster)
        self._width = stage_width(space)
        radices = space.radices
        # (D, C) choices that exist (a space of one point has no dimension: D = 0)
        self._mask = np.arange(int(radices.max(initial=1)))[None, :] < radices[:, None]
        self._theta = np.zeros(self._mask.shape)  # (D, C) logits
        self._step = 0
        self._epoch = 0  # step of the last restart (the temperature schedule starts there)
        self.restarts = 0
        self._memo = Memo(width=3)  # (cost, excess, time proxy) per point
        self._canonical = space.canonical_digits(1)[0]
        core = [k for k, d in enumerate(space.dims) if "." not in d.name]
        self._stage_dims = [k for k, d in enumerate(space.dims) if "." in d.name]
        from search._tpe import _core_valid, walk_order  # here: search._tpe imports optuna

        valid = _core_valid(space, core, self._canonical)
        self._walk = _Walk(valid, walk_order(valid, core)) if valid is not None else None
        self._free = [] if valid is not None else core  # drawn independently (no walk)
        self._pp_dim = next((k for k, d in enumerate(space.dims) if d.name == "pp"), None)
        self._fixed_pp = int(space.fixed.get("pp", 1))
        self._cached: tuple[int, _Step] | None = None
        self._last_ask: tuple[int, StrategyTable | None] = (-1, None)
        self._polish_changes = single_changes(space, [k for k, d in enumerate(space.dims) if len(d.choices) > 1])
        self._fit: np.ndarray | None = None
        # (K, D) the start sample, or None (no budget, or not more points than a step's draws)
        self._sample = self._first_sample() if self._enumeration is None else None

    @staticmethod
    def check_options(*, samples, lr, temperature, cooling, min_temperature, entropy, memory_penalty, restart,
                      screen=DEFAULT_SCREEN, polish=DEFAULT_POLISH, start_sample=DEFAULT_START_SAMPLE) -> None:
        """InputError naming the first bad option (``samples`` and ``cooling`` None: automatic)."""
        if samples is not None and (isinstance(samples, bool) or not isinstance(samples, (int, np.integer))
                                    or samples < 2):
            raise InputError("samples", "an integer >= 2", samples)
        for name, value in (("lr", lr), ("temperature", temperature), ("min_temperature", min_temperature)):
            if not np.isfinite(value) or value <= 0:
                raise InputError(name, "a number > 0", value)
        if cooling is not None and (not np.isfinite(cooling) or not 0 < cooling <= 1):
            raise InputError("cooling", "a number in (0, 1] (1: no annealing)", cooling)
        if not np.isfinite(polish) or not 0 <= polish <= 1:
            raise InputError("polish", "a share of the budget in [0, 1]", polish)
        if not np.isfinite(start_sample) or not 0 <= start_sample <= 1:
            raise InputError("start_sample", "a share of the budget in [0, 1]", start_sample)
        if min_temperature > temperature:
            raise InputError("min_temperature", f"a number <= temperature={temperature}", min_temperature)
        if not np.isfinite(entropy) or entropy < 0:
            raise InputError("entropy", "a number >= 0", entropy)
        if not np.isfinite(memory_penalty) or memory_penalty < 0:
            raise InputError("memory_penalty", "a number >= 0 (0: out-of-memory points are the worst)", memory_penalty)
        if restart not in (0, 1) or isinstance(restart, bool):
            raise InputError("restart", "0 or 1", restart)
        if screen not in (0, 1) or isinstance(screen, bool):
            raise InputError("screen", "0 or 1", screen)

    # -- the contract ------------------------------------------------------------------------
    def ask(self, n: int) -> StrategyTable:
        n = check_int("n", n, 0)
        if (listed := listed_or_done(self, n)) is not None:
            return listed
        pts = sample_left(self.space, self._sample, self._memo)
        pts = self._polish_points() if pts is None else pts
        if pts is not None:  # the start sample, or the late local phase: the peaks' neighbours
            table = self.space.table(pts[: int(n)])
            self._last_ask = (-1 - len(self._memo), table)
            return table
        st = self._draw()
        table = self.space.table(st.ask_digits[: int(n)])
        self._last_ask = (self._step, table)
        return table

    def tell(self, table: StrategyTable, metrics: Metrics) -> None:
        if self._enumeration is not None:  # the next points of the list, in order
            self._enum_told += len(self._enumeration[self._enum_told: self._enum_told + len(table)])
            self._step += 1
            return
        left = sample_left(self.space, self._sample, self._memo)
        if left is not None:
            self._tell_polish(left, table, metrics)
            if sample_left(self.space, self._sample, self._memo) is None:
                self._start_from_sample()
            return
        pts = self._polish_points()
        if pts is not None:
            self._tell_polish(pts, table, metrics)
            return
        st = self._draw()
        if len(table) and len(st.ask_keys):
            same = self._last_ask[0] == self._step and self._last_ask[1] is table
            # else rows rebuilt elsewhere (another process, Parquet), in any order
            pos, vals = told_values(self.space, self._width, self._hbm_bytes, table, metrics,
                                    None if same else self.space.table(st.ask_digits))
            hit = pos >= 0
            self._memo.add(st.ask_keys[pos[hit]], vals[hit])
        self._advance(st)

    def _polish_points(self) -> np.ndarray | None:
        """(P, D) the late local phase's batch (search._local.polish_batch: the unevaluated neighbours
        of the peaks told, POLISH_BATCH at a time), a function of the points told; None before the
        last ``polish`` share of the budget, without a budget, or where no peak has an unevaluated
        neighbour left (the gradient steps on)."""
        if self.budget is None or self.polish <= 0:
            return None
        if self._fit is None:
            self._fit = walk_digits(self.space, points_to_walk(self))
        return polish_batch(self.space, self._memo, budget=self.budget, share=self.polish,
                            batch=min(self.samples, POLISH_BATCH), seed=self.seed, stream=POLISH_STREAM,
                            changes=self._polish_changes, fit=self._fit)

    def _tell_polish(self, pts: np.ndarray, table: StrategyTable, metrics: Metrics) -> None:
        """Told rows of a polish batch ``pts``: recorded in the memo; the distribution stays."""
        same = self._last_ask[0] == -1 - len(self._memo) and self._last_ask[1] is table
        pos, vals = told_values(self.space, self._width, self._hbm_bytes, table, metrics,
                                None if same else self.space.table(pts))
        hit = pos >= 0
        self._memo.add(point_keys(self.space, pts[pos[hit]]), vals[hit])
        self._step += 1  # one driver iteration; the distribution stays
        self._epoch += 1  # (and so does its temperature)
        self._cached = None

    def _first_sample(self) -> np.ndarray | None:
        """(K, D) distinct points evaluated first, K = ``start_sample`` x budget: the space's recipes
        (Space.start_points: data parallelism, Megatron-LM's, among the points that fit), then uniformly
        random points of the walk (search._local.start_sample, as MCMC's); None without a budget or grid
        keys, or where K is not more than a step's draws."""
        named = self.space.start_points() if hasattr(self.space, "start_points") else {}
        starts = np.array(list(named.values()), dtype=np.int64).reshape(len(named), len(self.space.dims))
        sample = draw_start_sample(self.space, self.budget, self.start_sample, seed=self.seed, stream=SAMPLE_STREAM,
                                   starts=starts, more_than=self.samples)
        if sample is None and self.space.strides is None and len(starts) and self.budget and self.start_sample > 0:
            # a space too large for grid keys (placements, per-stage partitions) draws no random sample: its recipes
            # are still priced first, as MCMC's chains and TPE's queued trials start from them
            _, first = np.unique(point_keys(self.space, starts), return_index=True)
            sample = starts[np.sort(first)]
        return sample

    def _start_from_sample(self) -> None:
        """Logits after the start sample: one step of the gradient (lr, rank utilities) over the sample's
        points, scored as draws of the uniform distribution, so the first gradient step draws more
        often the digits of the sample's best plans."""
        found, vals = self._memo.lookup(point_keys(self.space, self._sample))
        if found.sum() < 2:
            return
        digits = self._sample[found]
        _, score = self.sample(np.zeros_like(self._theta), self.temperature, np.random.default_rng(0), len(digits),
                               given=digits)
        cost = soft_cost(vals[found, 0], vals[found, 1], vals[found, 2], self.memory_penalty)
        grad = score_function_gradient(score, rank_utilities(cost)) / self.temperature
        self._theta = np.where(self._mask, self.lr * grad, 0.0)
        self._epoch = self._step  # the temperature schedule starts with the gradient steps

    def state_dict(self) -> dict:
        keys, vals = self._memo.arrays()
        return {"version": STATE_VERSION, "seed": self.seed, "samples": self.samples, "step": self._step,
                "enum_told": self._enum_told,
                "epoch": self._epoch, "restarts": self.restarts, "theta": self._theta.copy(),
                "memo_keys": keys_to_plain(keys), "memo_values": vals.copy()}

    def load_state_dict(self, state: dict) -> None:
        if (int(state["version"]) != STATE_VERSION or int(state["seed"]) != self.seed
                or int(state["samples"]) != self.samples):
            raise InputError("state", f"a gradient-search state of version {STATE_VERSION}, seed {self.seed}, "
                             f"{self.samples} samples",
                             f"version {state['version']}, seed {state['seed']}, {state['samples']} samples")
        theta = np.asarray(state["theta"], dtype=np.float64)
        if theta.shape != self._theta.shape:
            raise InputError("state", f"logits of shape {self._theta.shape}", theta.shape)
        self._theta = theta.copy()
        self._step, self._epoch, self.restarts = int(state["step"]), int(state["epoch"]), int(state["restarts"])
        self._enum_told = int(state.get("enum_told", 0))
        self._memo = Memo(keys_from_plain(state["memo_keys"]),
                          np.asarray(state["memo_values"], dtype=np.float64).reshape(-1, 3))
        self._cached = None

    # -- reading the state -------------------------------------------------------------------
    @property
    def step(self) -> int:
        return self._step

    def tau(self, steps_since_restart: int | None = None) -> float:
        """Temperature after ``steps_since_restart`` steps (default: now)."""
        t = self._step - self._epoch if steps_since_restart is None else steps_since_restart
        return max(self.min_temperature, self.temperature * self.cooling ** t)

    def probabilities(self) -> np.ndarray:
        """(D, C) each dimension's unmasked softmax at the current temperature (0 past its choices)."""
        return softmax(self._theta / self.tau(), self._mask)

    # -- sampling ----------------------------------------------------------------------------
    def sample(self, theta: np.ndarray, tau: float, rng: np.random.Generator, n: int,
               given: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(n, D) digits drawn from the distribution with logits ``theta`` at temperature ``tau``
        and (n, D, C) onehot(x_k) - q_k, the masked softmax q_k each digit was drawn from (so
        the gradient of log p(x) with respect to theta_k is that over tau). With ``given`` ((n, D)
        valid digits) those digits, not drawn, and their onehot - q."""
        D, C = self._mask.shape
        digits = np.broadcast_to(self._canonical, (n, D)).copy()
        score = np.zeros((n, D, C))
        rows = np.arange(n)

        def draw(k: int, allowed: np.ndarray, use: np.ndarray) -> None:
            q = softmax(np.broadcast_to(theta[k] / tau, allowed.shape), allowed)  # (n, C)
            u = rng.random(n)
            cdf = np.cumsum(q, axis=1)
            cdf[:, -1] = np.inf
            d = np.argmax(cdf > u[:, None], axis=1)
            d = np.where(allowed[rows, d], d, np.argmax(q, axis=1))  # rounding at the top of the cdf
            if given is not None:
                d = given[:, k]
            one = np.zeros_like(q)
            one[rows, d] = 1.0
            score[:, k] = np.where(use[:, None], one - q, 0.0)
            digits[:, k] = np.where(use, d, digits[:, k])

        everyone = np.ones(n, dtype=bool)
        if self._walk is not None:
            group = np.zeros(n, dtype=np.int64)
            for j, k in enumerate(self._walk.order):
                allowed, lo = self._walk.allowed(j, group, C)
                draw(k, allowed, everyone)
                group = self._walk.groups[j][lo[rows, digits[:, k]]]
        for k in self._free:
            draw(k, np.broadcast_to(self._mask[k], (n, C)), everyone)
        if self._stage_dims:
            if self._pp_dim is None:
                pp = np.full(n, self._fixed_pp)
            else:
                pp = np.asarray(self.space.dims[self._pp_dim].choices)[digits[:, self._pp_dim]]
            for k in self._stage_dims:
                d = self.space.dims[k]
                used = d.stage < (pp - 1 if d.base == "stage_shift" else pp)
                draw(k, np.broadcast_to(self._mask[k], (n, C)), used)
        return digits, score

    # -- the step ----------------------------------------------------------------------------
    def _draw(self) -> _Step:
        if self._cached is not None and self._cached[0] == self._step:
            return self._cached[1]
        rng = np.random.default_rng([self.seed, STEP_STREAM, self._step])
        st = self._rounds(self._theta, self.tau(), rng, restart=False)
        if self.restart and len(st.ask_keys) * SATURATED < self.samples:
            # Collapsed on evaluated points: start again from the uniform distribution.
            st = self._rounds(np.zeros_like(self._theta), self.temperature, rng, restart=True)
        st = self._fill(st)
        self._cached = (self._step, st)
        return st

    def _rounds(self, theta: np.ndarray, tau: float, rng: np.random.Generator, *, restart: bool) -> _Step:
        """Rounds of S draws until S distinct new points (draws after the S-th new one dropped)."""
        S = self.samples
        parts_d, parts_s = [], []
        for _ in range(MAX_ROUNDS):
            d, s = self.sample(theta, tau, rng, S)
            parts_d.append(d)
            parts_s.append(s)
            digits = np.concatenate(parts_d)
            keys = point_keys(self.space, digits)
            valid = self.space.valid(digits)
            found, _ = self._memo.lookup(keys)
            cand = np.flatnonzero(valid & ~found)
            _, first = np.unique(keys[cand], return_index=True)
            new = cand[np.sort(first)]
            if len(new) >= S:
                cut = int(new[S - 1]) + 1
                digits, keys, valid, new = digits[:cut], keys[:cut], valid[:cut], new[:S]
                parts_s = [np.concatenate(parts_s)[:cut]]
                break
        return _Step(digits=digits, score=np.concatenate(parts_s), keys=keys, valid=valid,
                     ask_digits=digits[new], ask_keys=keys[new], restart=restart)

    def _fill(self, st: _Step) -> _Step:
        """Top the step's new points up to S with uniformly random valid points not evaluated yet."""
        missing = self.samples - len(st.ask_keys)
        if missing <= 0:
            return st
        rng = np.random.default_rng([self.seed, FILL_STREAM, self._step])
        cand = self.space.random_digits(rng, FILL_CANDIDATES * missing)
        keys = point_keys(self.space, cand)
        found, _ = self._memo.lookup(keys)
        fresh = ~found & (match_rows(keys, st.ask_keys) < 0) if len(st.ask_keys) else ~found
        idx = np.flatnonzero(fresh)
        _, first = np.unique(keys[idx], return_index=True)
        idx = idx[np.sort(first)][:missing]
        return dataclasses.replace(st, ask_digits=np.concatenate([st.ask_digits, cand[idx]]),
                                   ask_keys=np.concatenate([st.ask_keys, keys[idx]]))

    def _advance(self, st: _Step) -> None:
        """The step's gradient from every draw whose cost is known; the update; the next step."""
        found, vals = self._memo.lookup(st.keys)
        cost = soft_cost(vals[:, 0], vals[:, 1], vals[:, 2], self.memory_penalty)
        cost = np.where(st.valid, cost, np.inf)  # outside the space: the worst
        known = found | ~st.valid
        if st.restart:
            self._theta = np.zeros_like(self._theta)
            self._epoch = self._step
            self.restarts += 1
        tau = self.tau()
        if known.sum() >= 2:
            u = rank_utilities(cost[known])
            grad = score_function_gradient(st.score[known], u) / tau
            if self.entropy > 0:
                grad = grad + self.entropy * entropy_gradient(self._theta, self._mask, tau)
            self._theta = np.where(self._mask, self._theta + self.lr * grad, 0.0)
        self._step += 1
        self._cached = None


def auto_schedule(budget: int | None, polish: float, temperature: float, min_temperature: float,
                  start_share: float = 0.0) -> tuple[int, float]:
    """(samples, cooling) for ``samples`` and ``cooling`` None: DEFAULT_SAMPLES and DEFAULT_COOLING
    without a budget; with one, the gradient phase's G = budget - search._local.late_evaluations(budget,
    polish) - sample_size(budget, start_share) evaluations (the late phase's and the start sample's taken off)
    are about sqrt(G) draws a step (between MIN_SAMPLES and DEFAULT_SAMPLES; with no start sample a
    budget of 34, G 7, runs 2 steps of 4; one of 330, G 165, 13 steps of 13; with 0.2 of 330, G 99, 10 of
    10), and the temperature falls from ``temperature`` to ``min_temperature`` over those G / samples
    steps. (Where the sample is not drawn, K = sample_size(budget, start_share) <= samples, the steps take
    those K evaluations too.)"""
    if budget is None:
        return DEFAULT_SAMPLES, DEFAULT_COOLING
    g = max(budget - late_evaluations(budget, polish) - sample_size(budget, start_share), 1)
    samples = int(min(max(round(np.sqrt(g)), MIN_SAMPLES), DEFAULT_SAMPLES))
    steps = max(g / samples, 1.0)
    return samples, float(min(1.0, (min_temperature / temperature) ** (1.0 / steps)))


class _Walk:
    """The valid combinations of the non-stage dimensions, sorted in walk order, so that the
    points agreeing with a prefix of digits are one contiguous range (a group) and the digits
    allowed next are found by np.searchsorted for a whole batch of draws at once."""

    def __init__(self, valid: np.ndarray, order: list[int]) -> None:
        self.order = list(order)
        rows = valid[np.lexsort(valid[:, self.order[::-1]].T)]
        self.radix = [int(valid[:, k].max()) + 1 for k in self.order]
        self.codes, self.groups = [], []
        group = np.zeros(len(rows), dtype=np.int64)
        for j, k in enumerate(self.order):
            code = group * self.radix[j] + rows[:, k]  # nondecreasing: rows are sorted
            self.codes.append(code)
            group = np.concatenate([[0], np.cumsum(code[1:] != code[:-1])]).astype(np.int64)
            self.groups.append(group)

    def allowed(self, j: int, group: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
        """(n, width) bool digits allowed at walk position j for draws in ``group`` (n,), and
        (n, width) the first row of each (group, digit)."""
        r = self.radix[j]
        target = group[:, None] * r + np.arange(width)[None, :]  # (n, width)
        lo = np.searchsorted(self.codes[j], target, side="left")
        hi = np.searchsorted(self.codes[j], target, side="right")
        ok = (hi > lo) & (np.arange(width)[None, :] < r)
        return ok, np.minimum(lo, len(self.codes[j]) - 1)
