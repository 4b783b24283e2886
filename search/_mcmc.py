"""FlexFlow's Markov chain Monte Carlo search, run as an ensemble of chains in numpy arrays.

Jia, Zaharia, Aiken, "Beyond Data and Model Parallelism for Deep Neural Networks" (SysML
2019), Sec. 5.2: from the current strategy S propose S* by changing one dimension at random
(the proposal is symmetric), accept it with the Metropolis-Hastings probability

    alpha(S -> S*) = min(1, exp(-beta * (cost(S*) - cost(S)) / cost(S)))

(the paper uses the absolute difference; here the increase is relative, so one beta serves
models whose step times differ by orders of magnitude), start from data parallelism, an
expert strategy and random strategies, and restart from the best strategy found.

The ensemble: C chains as a (C, D) digits array ``x`` with their costs (C,). One step = one
proposal per chain (search._moves, masked with space.valid; invalid proposals are drawn again
up to MAX_REDRAWS times, then the chain proposes its own point), one batch of evaluations for
all chains, one vectorised acceptance. Cost = seconds per token (1 / tokens_per_s), infinite
where infeasible. An invalid single move becomes a valid double move where one exists (see
_draw_one).

Memory walls. With ``memory_penalty`` lambda > 0 (the default, 0.1) an out-of-memory point is
priced in the acceptance test as its time proxy (search._memo.row_time_proxy: the step's
parts that the cost model still reports, per token) times (1 + lambda * overflow), overflow =
mem_total / HBM - 1, so a chain can step through a point that does not fit to one that does
(at pp 1 on GPT-3 175B only ZeRO-3 fits; a feasible point next to it is reached through a
ZeRO-1 or ZeRO-2 point that does not). With lambda = 0 a feasible chain never accepts an
infeasible point (exp(-inf) = 0). Points the cost model rejects for other reasons, or without
a time proxy, stay walls; among them a chain walks on memory excess (mem_total / HBM), so
random starts that do not fit drift towards ones that do. The best point is only ever a
feasible one (or, before any is found, the one nearest to fitting).

Restarts. ``restart_duplicates`` (default on; ignored with ``reset_every``): a chain on the same
point as a chain before it does that chain's work twice and restarts. ``restart_after`` K (off
by default) restarts a chain that has not improved its own best for K steps. A restart goes to
a uniformly random valid point, or with ``restart_novel`` (default on) to the most novel of
NOVELTY_CANDIDATES random valid points: the largest sum over dimensions of
1 / sqrt(1 + evaluated points with that digit), so restarts go where the ensemble has not
looked (at pp 1, say, when the chains have settled on pipelines). Every ``reset_every`` steps
(0, off, by default) every chain jumps to the ensemble's best point; ``jump`` p (off) makes a
chain's proposal a uniformly random valid point with probability p (an independence move).

Points already evaluated are remembered (a sorted memo of their costs): ask() returns only
distinct points the searcher has not been told about, so the evaluation budget is spent on
new points; chains whose proposal is known move at tell() without an evaluation.

A known budget B (the driver passes it) shapes the run, with no per-problem setting: the chains
scale with it (auto_chains); the first ``start_sample`` share of B (20%) is a sample of the walk
(every named start, then uniformly random points that fit), and the chains start at its best
points, not at recipes that may sit in a poor basin; the last ``polish`` share (70%) is the late
local phase of search._local: batches of ``chains`` unevaluated neighbours of the peaks among the
plans told (single changes, then the fewest-change repairs of the invalid ones), the neighbours of
the two best peaks ranked together by an additive model of the plans told, where the chains would
spend the same evaluations on random single changes (at least 64 evaluations, up to 80% of B:
search._local.late_evaluations). A budget that covers every point that fits
evaluates each once (search._screen). Defaults chosen on draw seed 1's problems (BENCHMARKS.md,
"Search quality on drawn problems").

Determinism and resume (the contract of search._base.Searcher): everything random in step k is drawn from
np.random.default_rng([seed, STEP_STREAM, k]) and the state after k tells is a function of
the told batches, so replaying the tells on a fresh searcher restores it; state_dict() holds
the same state as plain arrays.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from costmodel import InputError, Metrics, StrategyTable
from search._base import Searcher, SearchSpace, check_int, soft_cost
from search._local import polish_batch, sample_left, single_changes, walk_digits
from search._local import start_sample as draw_start_sample
from search._memo import Memo, hbm_of, keys_from_plain, keys_to_plain, point_keys, row_costs, stage_width, told_values
from search._moves import proposer
from search._screen import listed_or_done, points_to_walk, screen_searcher

# Defaults tuned on the exact GPT-3 175B space (BENCHMARKS.md, "Search quality"), the same for
# every seed. ``chains`` None: auto_chains.
DEFAULT_CHAINS = 8
MIN_CHAINS = 2
STEPS_PER_CHAIN = 32
# Steps without a new point (every proposal's cost known) after which every chain restarts at a
# novel point: the chains have exhausted their neighbourhoods (small screened spaces; only where
# the walk is screened, search._screen).
EXHAUSTED_STEPS = 20
# A 1% slower proposal is accepted with probability exp(-1.6) = 0.2, a 5% slower one with
# exp(-8) = 3e-4: the chains climb almost greedily and leave a local optimum through the soft
# memory walls and the restarts below rather than by going downhill.
DEFAULT_BETA = 160.0
DEFAULT_RESET_EVERY = 0
DEFAULT_JUMP = 0.0
DEFAULT_DOUBLE = 0.0
DEFAULT_RESTART_AFTER = 0
# Soft memory walls: an out-of-memory point costs its time proxy x (1 + 0.1 x overflow).
DEFAULT_MEMORY_PENALTY = 0.1
DEFAULT_RESTART_NOVEL = True
DEFAULT_RESTART_DUPLICATES = True
# Random valid candidates per restarting chain, of which the most novel is taken (restart_novel),
# and at most this many in one step over all restarting chains (large ensembles restart many
# chains at once; fewer candidates each keeps a step's cost near one evaluation batch).
NOVELTY_CANDIDATES = 64
NOVELTY_CANDIDATES_PER_STEP = 4096
DEFAULT_STARTS = ("data_parallel", "megatron", "fsdp", "fsdp_tp", "fsdp_cp1", "fsdp_pp", "random")
# Share of a known budget spent last on the unevaluated neighbours of the best points told (the
# peaks, search._local; at least 64 evaluations up to 80%: late_evaluations), a batch of ``chains``
# points at a time, instead of chain steps. Chosen on draw seed 1 (0.3, 0.5, 0.65 and 0.7 tried).
DEFAULT_POLISH = 0.7
# Share of a known budget spent first on a sample of the walk (the named starts, then uniformly random
# points); the chains then start at the best points of the sample. Used where the sample holds more
# points than there are chains.
DEFAULT_START_SAMPLE = 0.2
# Attempts to draw a valid proposal for a chain before it proposes its own point.
MAX_REDRAWS = 8
# Steps taken in a row without an evaluation (every proposal known) before ask() gives up.
MAX_SKIPPED_STEPS = 1000
# Stream tags for np.random.default_rng([seed, tag, ...]).
START_STREAM = 1
STEP_STREAM = 2
RESTART_STREAM = 3
EXHAUSTED_STREAM = 4
POLISH_STREAM = 5
SAMPLE_STREAM = 6
STATE_VERSION = 2


@dataclasses.dataclass(frozen=True)
class _Step:
    """Everything random about step k, a pure function of (seed, k, state before the step)."""

    proposal: np.ndarray  # (C, D) digits proposed by each chain
    keys: np.ndarray  # (C,) keys of the proposals
    u: np.ndarray  # (C,) uniforms for the acceptance test
    ask_keys: np.ndarray  # (U,) distinct unknown proposal keys, in asking order
    ask_rows: np.ndarray  # (U,) a chain proposing each of them


class MCMCSearcher(Searcher):
    """Ensemble Metropolis-Hastings over a Space (module docstring).

    ask(n) returns at most min(n, chains) rows: the distinct proposals of this step whose cost
    is not known yet, in an order drawn for the step (so that with n < chains every chain gets
    its turn). tell(table, metrics) matches the told rows to this step's proposals by their
    strategy columns, records their costs, moves every chain whose proposal now has a known
    cost and advances the step; proposals left untold stay unknown and their chains stay put.
    """

    def __init__(self, space: SearchSpace, *, seed: int, chains: int | None = None, beta: float = DEFAULT_BETA,
                 reset_every: int = DEFAULT_RESET_EVERY, restart_after: int = DEFAULT_RESTART_AFTER,
                 jump: float = DEFAULT_JUMP, double: float = DEFAULT_DOUBLE,
                 memory_penalty: float = DEFAULT_MEMORY_PENALTY, restart_novel: bool = DEFAULT_RESTART_NOVEL,
                 restart_duplicates: bool = DEFAULT_RESTART_DUPLICATES,
                 starts: Sequence[str] | None = None, budget: int | None = None, screen: bool = True,
                 polish: float = DEFAULT_POLISH, start_sample: float = DEFAULT_START_SAMPLE) -> None:
        if budget is not None and (not isinstance(budget, (int, np.integer)) or budget < 1):
            raise InputError("budget", "an integer >= 1 (evaluations) or None", budget)
        space = screen_searcher(self, space, screen=screen, budget=budget)
        self._enum_told = 0
        self.feasible_seen = 0  # distinct feasible points told
        chains = check_int("chains", auto_chains(self.budget) if chains is None else chains, 1)
        if not np.isfinite(beta) or beta < 0:
            raise InputError("beta", "a number >= 0", beta)
        check_int("reset_every", reset_every, 0, "an integer >= 0 (0: never reset)")
        named = space.start_points()
        if starts is None:  # DEFAULT_STARTS, or a space's own named starts where it has others (placements)
            starts = DEFAULT_STARTS if set(named) <= set(DEFAULT_STARTS) else (*named, "random")
        known_starts = ("random", *named)
        for s in starts:
            if s not in ("random", *DEFAULT_STARTS, *named):
                raise InputError("starts", "names among " + ", ".join(known_starts), s)
        if len(starts) == 0:
            raise InputError("starts", "at least one start", "none")
        self.space = space
        self.seed = int(seed)
        self.chains = int(chains)
        self.beta = float(beta)
        self.reset_every = int(reset_every)
        if not 0.0 <= jump <= 1.0:
            raise InputError("jump", "a probability in [0, 1]", jump)
        self.jump = float(jump)
        if not 0.0 <= double <= 1.0:
            raise InputError("double", "a probability in [0, 1]", double)
        self.double = float(double)
        self.restart_after = check_int("restart_after", restart_after, 0, "an integer >= 0 (0: never restart)")
        if not np.isfinite(memory_penalty) or memory_penalty < 0:
            raise InputError("memory_penalty", "a number >= 0 (0: out-of-memory points are walls)", memory_penalty)
        self.memory_penalty = float(memory_penalty)
        self.restart_novel = bool(restart_novel)
        if not np.isfinite(polish) or not 0.0 <= polish <= 1.0:
            raise InputError("polish", "a share of the budget in [0, 1]", polish)
        self.polish = float(polish)
        self.restart_duplicates = bool(restart_duplicates)
        self.starts = tuple(starts)
        self._hbm_bytes = hbm_of(space.cluster)
        self._propose = proposer(space)  # MCMC's local moves
        self._width = stage_width(space)
        C, D = self.chains, len(space.dims)
        # Chain j starts at starts[j % len(starts)]; a named start the space cannot hold
        # (Space.start_points omits it) is replaced by a random point.
        which = [self.starts[j % len(self.starts)] for j in range(C)]
        rng = np.random.default_rng([self.seed, START_STREAM])
        x = space.random_digits(rng, C).astype(np.int64).reshape(C, D)
        for j, name in enumerate(which):
            if name in named:
                x[j] = named[name]
        self._x = x  # (C, D)
        if not np.isfinite(start_sample) or not 0.0 <= start_sample <= 1.0:
            raise InputError("start_sample", "a share of the budget in [0, 1]", start_sample)
        self.start_sample = float(start_sample)
        # The first sample holds every named start, also those no chain starts at (fewer chains than starts)
        rest = [named[n] for n in dict.fromkeys(self.starts) if n in named and n not in which]
        self._sample = self._first_sample(np.concatenate([x, np.asarray(rest, dtype=np.int64).reshape(len(rest), D)]))
        self._cost = np.full(C, np.nan)  # (C,) seconds per token; NaN = not evaluated yet
        self._excess = np.full(C, np.nan)  # (C,) memory ratio where infeasible
        self._proxy = np.full(C, np.nan)  # (C,) seconds per token ignoring memory (row_time_proxy)
        self._best_x = x[0].copy()
        self._best = np.array([np.inf, np.inf])  # (cost, excess) of the best point
        self._chain_best = np.full((C, 2), np.inf)  # (C, 2) each chain's best (cost, excess)
        self._stale = np.zeros(C, dtype=np.int64)  # (C,) steps since the chain last improved it
        # Evaluated points per (dimension, digit) (D, max radix), for novel restarts (a space of one
        # point has no dimension: D = 0).
        self._visits = np.zeros((D, int(np.max(space.radices, initial=1))), dtype=np.int64)
        self._step = 0
        self._memo = Memo(width=3)  # (cost, excess, time proxy) per point
        # Every single change of a non-stage dimension, as (dimension, digit) pairs (K,).
        nonstage = [k for k, d in enumerate(space.dims) if "." not in d.name and len(d.choices) > 1]
        self._moves = (np.array([k for k in nonstage for _ in space.dims[k].choices], dtype=np.int64),
                       np.array([v for k in nonstage for v in range(len(space.dims[k].choices))], dtype=np.int64))
        self._cached: tuple[int, _Step] | None = None
        self._last_ask: tuple[int, StrategyTable | None] = (-1, None)  # (step, table) of the last ask()
        self._polish_dims = single_changes(space, [k for k, d in enumerate(space.dims) if len(d.choices) > 1])
        self._fit: np.ndarray | None = None
        self.accepted = 0  # bookkeeping for reports: accepted moves so far

    # -- the contract ------------------------------------------------------------------------
    def ask(self, n: int) -> StrategyTable:
        n = check_int("n", n, 0)
        if (listed := listed_or_done(self, n)) is not None:
            return listed
        pts = self._sample_left()
        pts = self._polish_points() if pts is None else pts
        if pts is not None:  # the first sample, or the late local phase: the peaks' neighbours
            table = self.space.table(pts[: int(n)])
            self._last_ask = (-1 - len(self._memo), table)
            return table
        st = self._draw()
        rows = st.ask_rows[: int(n)]
        table = self.space.table(st.proposal[rows])
        self._last_ask = (self._step, table)
        return table

    def tell(self, table: StrategyTable, metrics: Metrics) -> None:
        if self._enumeration is not None:
            self._tell_enumerated(table, metrics)
            return
        left = self._sample_left()
        if left is not None:
            self._tell_sample(left, table, metrics)
            return
        pts = self._polish_points()
        if pts is not None:
            self._tell_polish(pts, table, metrics)
            return
        st = self._draw()
        if len(table) and len(st.ask_rows):
            same = self._last_ask[0] == self._step and self._last_ask[1] is table
            # else rows rebuilt elsewhere (another process, Parquet), in any order
            pos, vals = told_values(self.space, self._width, self._hbm_bytes, table, metrics,
                                    None if same else self.space.table(st.proposal[st.ask_rows]))
            hit = pos >= 0
            known, _ = self._memo.lookup(st.ask_keys[pos[hit]])
            self.feasible_seen += int(np.sum(np.isfinite(vals[hit, 0]) & ~known))
            self._memo.add(st.ask_keys[pos[hit]], vals[hit])
            told = st.proposal[st.ask_rows[pos[hit]]]  # (H, D) digits of the evaluated points
            np.add.at(self._visits, (np.broadcast_to(np.arange(told.shape[1]), told.shape), told), 1)
        self._advance(st)

    def _tell_enumerated(self, table: StrategyTable, metrics: Metrics) -> None:
        """Enumeration: the told rows are the next points of the list, in order."""
        idx = self._enumeration[self._enum_told: self._enum_told + len(table)]
        cost, excess = row_costs(metrics, self._hbm_bytes)
        self._enum_told += len(idx)
        self.feasible_seen += int(np.isfinite(cost[: len(idx)]).sum())
        if len(idx):
            i = int(np.lexsort((excess[: len(idx)], cost[: len(idx)]))[0])
            if (cost[i], excess[i]) < tuple(self._best):
                self._best = np.array([cost[i], excess[i]])
                self._best_x = self.space.digits_of(idx[i: i + 1])[0]
        self._step += 1

    def _first_sample(self, starts: np.ndarray) -> np.ndarray | None:
        """(K, D) distinct points evaluated before the chains step: ``starts`` (the chains' starts, then the
        named starts no chain starts at), then uniformly random points of the walk, K = ``start_sample`` x
        budget (search._local.start_sample); None where K is not more than the chains (the chains start where
        ``starts`` says)."""
        return draw_start_sample(self.space, self.budget, self.start_sample, seed=self.seed, stream=SAMPLE_STREAM,
                            starts=starts, more_than=self.chains)

    def _sample_left(self) -> np.ndarray | None:
        """(U, D) the points of the first sample not told yet; None once all are (or without one)."""
        return sample_left(self.space, self._sample, self._memo)

    def _tell_sample(self, left: np.ndarray, table: StrategyTable, metrics: Metrics) -> None:
        """Told rows of the first sample; once it is all told, the chains start at its best points."""
        self._tell_polish(left, table, metrics)
        if self._sample_left() is not None:
            return
        _, vals = self._memo.lookup(point_keys(self.space, self._sample))
        best = np.lexsort((vals[:, 1], vals[:, 0]))[: self.chains]  # (C,) best first
        pick = best[np.arange(self.chains) % len(best)]
        self._x = self._sample[pick].copy()
        self._cost, self._excess, self._proxy = (vals[pick, j].copy() for j in range(3))
        self._chain_best = np.stack([self._cost, self._excess], axis=1)
        self._stale[:] = 0

    def _polish_points(self) -> np.ndarray | None:
        """(P, D) the late local phase's batch (at most ``chains`` points: the unevaluated neighbours
        of the peaks told, search._local.polish_batch), a function of the points told; None before
        the last ``polish`` share of the budget, without a budget or grid keys, or where no peak has
        an unevaluated neighbour (the chains step on)."""
        if self.budget is None or self.polish <= 0:
            return None
        if self._fit is None:
            self._fit = walk_digits(self.space, points_to_walk(self))
        return polish_batch(self.space, self._memo, budget=self.budget, share=self.polish, batch=self.chains,
                            seed=self.seed, stream=POLISH_STREAM, changes=self._polish_dims, fit=self._fit)

    def _tell_polish(self, pts: np.ndarray, table: StrategyTable, metrics: Metrics) -> None:
        """Told rows of a batch ``pts`` asked outside the chains' steps (the first sample, the late
        local phase): recorded in the memo, the best updated; the chains stay where they are."""
        same = self._last_ask[0] == -1 - len(self._memo) and self._last_ask[1] is table
        pos, vals = told_values(self.space, self._width, self._hbm_bytes, table, metrics,
                                None if same else self.space.table(pts))
        hit = pos >= 0
        self._step += 1  # one driver iteration (the chains' random streams are by step: still a function of the history)
        self._cached = None
        if not hit.any():
            return
        told = pts[pos[hit]]  # (H, D)
        keys = point_keys(self.space, told)
        known, _ = self._memo.lookup(keys)
        self.feasible_seen += int(np.sum(np.isfinite(vals[hit, 0]) & ~known))
        self._memo.add(keys, vals[hit])
        np.add.at(self._visits, (np.broadcast_to(np.arange(told.shape[1]), told.shape), told), 1)
        self._note_best(told, vals[hit, 0], vals[hit, 1])

    def _note_best(self, digits: np.ndarray, cost: np.ndarray, excess: np.ndarray) -> None:
        """The best point (lowest cost, then lowest excess) among (N, D) ``digits`` and the best so far."""
        if len(digits):
            i = int(np.lexsort((excess, cost))[0])
            if (cost[i], excess[i]) < tuple(self._best):
                self._best = np.array([cost[i], excess[i]])
                self._best_x = np.asarray(digits[i]).copy()

    def state_dict(self) -> dict:
        keys, vals = self._memo.arrays()
        return {
            "enum_told": self._enum_told, "feasible_seen": self.feasible_seen,
            "version": STATE_VERSION, "seed": self.seed, "chains": self.chains, "step": self._step,
            "x": self._x.copy(), "cost": self._cost.copy(), "excess": self._excess.copy(), "proxy": self._proxy.copy(),
            "best_x": self._best_x.copy(), "best": self._best.copy(), "accepted": self.accepted,
            "chain_best": self._chain_best.copy(), "stale": self._stale.copy(), "visits": self._visits.copy(),
            "memo_keys": keys_to_plain(keys), "memo_values": vals.copy(),
        }

    def load_state_dict(self, state: dict) -> None:
        C, D = self.chains, len(self.space.dims)
        if int(state["version"]) != STATE_VERSION or int(state["chains"]) != C or int(state["seed"]) != self.seed:
            raise InputError("state", f"an MCMC state of version {STATE_VERSION}, {C} chains, seed {self.seed}",
                             f"version {state['version']}, {state['chains']} chains, seed {state['seed']}")
        x = np.asarray(state["x"], dtype=np.int64)
        if x.shape != (C, D):
            raise InputError("state", f"chains of shape {(C, D)}", x.shape)
        self._x = x.copy()
        self._cost = np.asarray(state["cost"], dtype=np.float64).copy()
        self._excess = np.asarray(state["excess"], dtype=np.float64).copy()
        self._proxy = np.asarray(state["proxy"], dtype=np.float64).copy()
        self._best_x = np.asarray(state["best_x"], dtype=np.int64).copy()
        self._best = np.asarray(state["best"], dtype=np.float64).copy()
        self._step = int(state["step"])
        self.accepted = int(state["accepted"])
        self._chain_best = np.asarray(state["chain_best"], dtype=np.float64).reshape(C, 2).copy()
        self._stale = np.asarray(state["stale"], dtype=np.int64).copy()
        self._visits = np.asarray(state["visits"], dtype=np.int64).reshape(self._visits.shape).copy()
        self._memo = Memo(keys_from_plain(state["memo_keys"]),
                          np.asarray(state["memo_values"], dtype=np.float64).reshape(-1, 3))
        self._enum_told = int(state.get("enum_told", 0))
        self.feasible_seen = int(state.get("feasible_seen", 0))
        self._cached = None

    # -- reading the state -------------------------------------------------------------------
    @property
    def step(self) -> int:
        return self._step

    def best(self) -> tuple[StrategyTable, float]:
        """The best point told so far and its tokens per second (0 if none is feasible)."""
        tps = 1.0 / self._best[0] if np.isfinite(self._best[0]) else 0.0
        return self.space.table(self._best_x[None, :]), tps

    # -- the step ----------------------------------------------------------------------------
    def _draw(self) -> _Step:
        """The next step with something to evaluate (cached until tell).

        A step whose proposals all have known costs needs no evaluation: it is taken here at
        once (a pure function of the told history, so ask stays reproducible), up to
        MAX_SKIPPED_STEPS in a row; after that the step is returned with nothing to ask (the
        chains have exhausted what they can reach) and ask() returns an empty table."""
        for skipped in range(MAX_SKIPPED_STEPS):
            st = self._draw_one()
            if len(st.ask_rows):
                return st
            self._advance(st)
            if self.points_fit and skipped % EXHAUSTED_STEPS == EXHAUSTED_STEPS - 1:
                # Nothing new for EXHAUSTED_STEPS steps: every chain starts again at a novel point.
                self._restart(np.arange(self.chains), EXHAUSTED_STREAM)
        return self._draw_one()

    def _draw_one(self) -> _Step:
        if self._cached is not None and self._cached[0] == self._step:
            return self._cached[1]
        C = self.chains
        rng = np.random.default_rng([self.seed, STEP_STREAM, self._step])
        u = rng.random(C)
        order = rng.permutation(C)
        unknown_here = np.isnan(self._cost)  # chains whose own point is not evaluated yet
        prop = self._propose(self._x, rng).astype(np.int64)
        if self.double > 0:
            # Double moves: a second change on top of the first for a fraction of the chains
            # (crosses memory walls that no single change crosses, e.g. cp 2 -> 1 with ZeRO 2 -> 3).
            two = rng.random(C) < self.double
            prop = np.where(two[:, None], self._propose(prop, rng).astype(np.int64), prop)
        ok = self.space.valid(prop) & ~unknown_here
        # An invalid single move becomes a valid double move where one exists: change one
        # more (non-stage) dimension of the invalid proposal, uniformly among the changes
        # that make it valid (zero_stage 1 -> 3 under pp = 16 is invalid, with pp = 1 too it
        # is not; interleaving needs vpp >= 2). Without this the chains could not cross
        # such coupled constraints.
        bad = np.flatnonzero(~ok & ~unknown_here)
        if bad.size:
            fixed, fixed_ok = self._repair(prop[bad], rng)
            prop[bad] = np.where(fixed_ok[:, None], fixed, prop[bad])
            ok[bad] = fixed_ok
        for _ in range(MAX_REDRAWS):
            bad = np.flatnonzero(~ok & ~unknown_here)
            if bad.size == 0:
                break
            again = self._propose(self._x[bad], rng).astype(np.int64)
            prop[bad] = again
            ok[bad] = self.space.valid(again)
        prop = np.where(ok[:, None], prop, self._x)  # unknown or never valid: the chain's own point
        if self.jump > 0:
            # Independence proposals: a uniformly random valid point for a few chains.
            leap = np.flatnonzero((rng.random(C) < self.jump) & ~unknown_here)
            if leap.size:
                prop[leap] = self.space.random_digits(rng, leap.size)
        keys = point_keys(self.space, prop)
        found, _ = self._memo.lookup(keys)
        # Distinct unknown proposals, first occurrence in the drawn chain order.
        cand = order[~found[order]]
        _, first = np.unique(keys[cand], return_index=True)
        ask_rows = cand[np.sort(first)]
        st = _Step(proposal=prop, keys=keys, u=u, ask_keys=keys[ask_rows], ask_rows=ask_rows)
        self._cached = (self._step, st)
        return st

    def _repair(self, bad: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(B, D) invalid digits -> (B, D) digits one more non-stage change away, valid where
        possible (ok (B,)), drawn uniformly among the valid changes."""
        ks, vs = self._moves  # (K,) dimension and new digit of every single change
        B, K = len(bad), len(ks)
        if K == 0:
            return bad, np.zeros(B, dtype=bool)
        cand = np.repeat(bad[:, None, :], K, axis=1)  # (B, K, D)
        cand[:, np.arange(K), ks] = vs[None, :]
        good = self.space.valid(cand.reshape(B * K, -1)).reshape(B, K) & (bad[:, ks] != vs[None, :])
        cnt = good.sum(axis=1)
        pick = np.floor(rng.random(B) * np.maximum(cnt, 1)).astype(np.int64)
        col = np.argmax(np.cumsum(good, axis=1) > pick[:, None], axis=1)
        return cand[np.arange(B), col], cnt > 0

    def _advance(self, st: _Step) -> None:
        """Metropolis acceptance for every chain whose proposal has a known cost; best; reset."""
        found, vals = self._memo.lookup(st.keys)
        new_c, new_e, new_p = vals[:, 0], vals[:, 1], vals[:, 2]  # (C,)
        old_c, old_e, old_p = self._cost, self._excess, self._proxy
        fresh = np.isnan(old_c)  # the chain's own point, evaluated now
        f_old, f_new = np.isfinite(old_c), np.isfinite(new_c)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            rel = np.select([f_old & f_new, f_old, f_new, old_e == new_e, np.isinf(old_e)],
                            [(new_c - old_c) / old_c, np.inf, -np.inf, 0.0, -np.inf], (new_e - old_e) / old_e)
            if self.memory_penalty > 0:
                lam = self.memory_penalty
                s_old, s_new = soft_cost(old_c, old_e, old_p, lam), soft_cost(new_c, new_e, new_p, lam)
                soft = np.isfinite(s_old) & np.isfinite(s_new) & ~(f_old & f_new)
                rel = np.where(soft, (s_new - s_old) / s_old, rel)
            accept = found & (fresh | (rel <= 0) | (st.u < np.exp(-self.beta * rel)))
        moved = accept & ~fresh & np.any(st.proposal != self._x, axis=1)
        self.accepted += int(moved.sum())
        self._x = np.where(accept[:, None], st.proposal, self._x)
        self._cost = np.where(accept, new_c, old_c)
        self._excess = np.where(accept, new_e, old_e)
        self._proxy = np.where(accept, new_p, old_p)
        # Best: lowest cost, then lowest excess, over the chains' evaluated points and this
        # step's evaluated proposals (with soft memory walls a chain may turn down a feasible
        # proposal that beats its penalised out-of-memory point).
        pts = np.concatenate([self._x, st.proposal])  # (2C, D)
        pc = np.concatenate([self._cost, np.where(found, new_c, np.nan)])
        pe = np.concatenate([self._excess, np.where(found, new_e, np.nan)])
        known = ~np.isnan(pc)
        if np.any(known):
            cand = np.flatnonzero(known)
            i = cand[np.lexsort((pe[cand], pc[cand]))[0]]
            if (pc[i], pe[i]) < tuple(self._best):
                self._best = np.array([pc[i], pe[i]])
                self._best_x = pts[i].copy()
        # Chains that have not improved on their own best for restart_after steps start again
        # from a random point (FlexFlow restarts a search that stopped improving).
        better = (self._cost < self._chain_best[:, 0]) | (
            np.isinf(self._cost) & np.isinf(self._chain_best[:, 0]) & (self._excess < self._chain_best[:, 1]))
        self._chain_best = np.where(better[:, None], np.stack([self._cost, self._excess], axis=1), self._chain_best)
        self._stale = np.where(better | fresh, 0, self._stale + 1)
        self._step += 1
        self._cached = None
        stale = np.flatnonzero(self._stale >= self.restart_after) if self.restart_after else np.zeros(0, int)
        if self.restart_duplicates and not self.reset_every:
            # Chains on the same evaluated point as a chain before them duplicate its work: restart
            # them (not with resets, which put every chain on one point on purpose).
            keys = point_keys(self.space, self._x)
            _, first = np.unique(keys, return_index=True)
            dup = np.ones(self.chains, dtype=bool)
            dup[first] = False
            stale = np.union1d(stale, np.flatnonzero(dup & ~np.isnan(self._cost)))
        if stale.size:
            self._restart(stale)
        if self.reset_every and self._step % self.reset_every == 0 and np.isfinite(self._best[0]):
            self._x = np.broadcast_to(self._best_x, self._x.shape).copy()
            self._cost = np.full(self.chains, self._best[0])
            self._excess = np.full(self.chains, self._best[1])
            self._proxy = np.full(self.chains, self._best[0])

    def _restart(self, stale: np.ndarray, stream: int = RESTART_STREAM) -> None:
        """Chains ``stale`` start again at novel (restart_novel) or random valid points."""
        rng = np.random.default_rng([self.seed, stream, self._step])
        if self.restart_novel:
            # The most novel of NOVELTY_CANDIDATES random valid points: the largest sum over
            # dimensions of 1 / sqrt(1 + points evaluated with that digit) (count-based
            # exploration bonus, as in Strehl & Littman 2008's MBIE-EB).
            R = max(1, min(NOVELTY_CANDIDATES, NOVELTY_CANDIDATES_PER_STEP // stale.size))
            D = self._x.shape[1]
            cand = self.space.random_digits(rng, stale.size * R).reshape(stale.size, R, D)
            bonus = (1.0 / np.sqrt(1.0 + self._visits[np.arange(D)[None, None, :], cand])).sum(axis=2)
            self._x[stale] = cand[np.arange(stale.size), np.argmax(bonus, axis=1)]
        else:
            self._x[stale] = self.space.random_digits(rng, stale.size)
        self._cost[stale] = self._excess[stale] = self._proxy[stale] = np.nan
        self._chain_best[stale] = np.inf
        self._stale[stale] = 0
        self._cached = None


def auto_chains(budget: int | None) -> int:
    """Chains for ``chains=None``: DEFAULT_CHAINS without a budget; with one, one chain per
    STEPS_PER_CHAIN evaluations, between MIN_CHAINS and DEFAULT_CHAINS (a budget of 42 runs 2
    chains of about 21 steps, one of 980 the 8 chains the defaults were tuned with)."""
    if budget is None:
        return DEFAULT_CHAINS
    return int(min(max(budget // STEPS_PER_CHAIN, MIN_CHAINS), DEFAULT_CHAINS))
