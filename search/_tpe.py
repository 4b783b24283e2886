"""Optuna's TPE sampler over a Space, through ask and tell, with the study in a journal file.

Parameters. Where the combinations of the non-stage dimensions can be listed (at most
CONDITIONAL_MAX_POINTS), every trial is mapped to a valid point, dimension by dimension: the
parameter (named as the dimension, over all its digits) is sampled, and the digit used is the
allowed digit nearest to it, allowed meaning that some valid point agrees with it and with the
digits fixed so far (no parameter when one digit is allowed). The order of the walk is the
prior: a choice made early gets an equal share of the sampler's prior, one made late shares
what the earlier choices left it.

Two walks, two studies (``walks`` "both", the default from a budget of SINGLE_WALK_BUDGET, or
without a budget; below it "auto" runs the "roots" study alone). No one order suits every problem, so
two studies take turns, batch by batch (the one that has asked fewer points asks next):
    "digits"  the space's digit order (tp, pp, cp, micro-batch, schedule, vpp, SP, ZeRO,
              recompute on the exact space), study ``study_name``;
    "roots"   the roots of the space's conditional tree first (walk_order: the dimensions
              whose choices settle the most others), study ``study_name:roots``.
On the exact GPT-3 space the roots walk starts with the ZeRO stage: ZeRO-2 and -3, which exist
only without pipelining, get a quarter of the prior each instead of about 1/24 as the
last-but-one choice under pp 1. Each walk finds optima the other misses (BENCHMARKS.md, "TPE
with two walk orders"). The studies share the memo of evaluated points: neither asks a point the
other has evaluated, and a study that draws one is told its result like any known point, but
neither study is given the other's trials. Each study records its order (ORDER_ATTR); a study
without one keeps the digit order. ``walks`` "digits" or "roots" runs one study.
The map is fixed, so TPE learns the objective as a function of its own parameters. Per-stage
dimensions (partition spaces) follow: one parameter each, over all its digits, for the stages
the chosen pp uses. Where the non-stage combinations are too many to list: one parameter per
dimension over all its digits, and combinations outside the space are told as constraint
violations (below). Distributions: an IntDistribution over the digit for dimensions whose
choices are increasing numbers (tp, pp, micro-batch, vpp, ZeRO stage, boundary shifts: the
Parzen kernels use their order), a CategoricalDistribution over the digits otherwise (schedule, recompute, booleans).

Objective: maximise tokens_per_s. Constraints (Optuna 5: Trial.set_constraint; a trial is
feasible when every value is <= 0, and TPE ranks infeasible trials by their total violation,
Optuna's c-TPE handling):
    "memory"  mem_total / HBM - 1   (> 0 exactly for out-of-memory rows)
    "model"   1 for rows the cost model rejects for any other reason, else 0
    "space"   1 for digit combinations outside the Space (Space.valid false), else 0
Soft memory walls (``memory_penalty`` lambda > 0, the default 0.1): an out-of-memory row is
told as feasible instead, with the throughput it would have if memory were unlimited (the
time proxy of search._memo.row_time_proxy) divided by (1 + lambda * (mem_total / HBM - 1)), so
TPE learns how fast a region is and how far it is from fitting (the searchers' results still
come from the rows' own metrics, where it is out of memory; BENCHMARKS.md, "Search quality").
lambda 0 gives c-TPE's constraints above.
Combinations outside the space (only where parameters are not mapped, above) are not
evaluated: the trial is told at once with value 0 and "space" = 1, so TPE learns to avoid them.
Points already evaluated are told from a memo, not asked again; after SATURATED_DRAWS draws
in a row that bring nothing new (TPE has converged on evaluated points), the next trial is a
random valid point not evaluated yet, enqueued (Study.enqueue_trial) so that TPE records it
like any other trial.

Budget (known where the driver passes it). A batch asks at most budget / MIN_BATCHES points,
so that TPE learns between batches whatever the driver's batch. Three phases, on a screened walk
(search._local, shared with MCMC and the gradient search):
    start sample  the first ``start_sample`` share of the budget (20%): the space's recipes (data
              parallelism, Megatron-LM's, among the points that fit) and uniformly random points that
              fit (search._local.start_sample), queued as the studies' first trials (Study.enqueue_trial,
              so TPE records and learns from them, and a resumed study replays them): uniform over
              the points that fit, where TPE's own start-up draws follow the walk's conditional prior.
    TPE       its own draws, until the late phase.
    late      the last ``local_share`` of the budget (70%; at least search._local.LATE_POINTS up to
              LATE_MAX_SHARE of it): each batch is at most LOCAL_BATCH unevaluated neighbours of the
              peaks among the feasible points told (search._local.polish_batch: their valid single
              changes, then for each invalid single change the points of the walk that make it with the
              fewest other changes: pp 2 to 1 from interleaved with vpp 6 also takes 1F1B and vpp 1),
              queued as trials. Where a peak's neighbourhood is spent (a local optimum) the phase goes
              on at the next peak, in another basin; the neighbours of the two best peaks with any left
              are tried in the order of an additive model of the points told, their costs clipped at
              the median told (LOCAL_CLIP: a plan slower than the median counts as the median one, so
              that a few very slow plans do not decide the order among the good ones).
TPE's own draws fill the batch where the start sample runs out, and every batch once every peak
is spent. Shares chosen on draw seed 1 (BENCHMARKS.md, "Search quality on drawn problems").

Determinism and resume: the sampler of each batch is seeded from (seed, trials in the study
when the batch starts, the walk), and a batch is the stream of trials until n distinct new
valid points are found (or MAX_DRAWS_PER_POINT * n draws), so ask(n) is a function of the
studies' history. Resume: a TPESearcher on the same journal file (``storage``) continues the
studies; trials left running by an interrupted run are the pending batch, asked again. Without a
storage file, a fresh searcher told the recorded batches in order rebuilds the same study.

Exact resume after a kill. A batch writes many journal lines (per trial: its creation, one line
per parameter, the sampler's system attributes, user attributes, constraints, the final state),
so a process killed at any instant leaves a journal that ends mid-batch: trials created with
some parameters drawn, a batch partly told, half a line. Continuing from that is not the run
that was not killed (a half-drawn trial is failed and the batch is drawn again after it, from a
study whose trial count, and so whose sampler seed, has moved). The exact resume is a rewind: the
journal is an append-only log, so its first B bytes are the studies as they were when those bytes
were written. The driver records B after each batch is told (journal_size), and a resumed run
cuts the journal back to it (rewind_journal) before opening the studies: the batch the kill
interrupted is then drawn again from the same history with the same seed, the same points in
the same order. The journal's lock (FlockJournalLock) is fcntl.flock on the journal itself,
which the kernel releases when its holder dies, so a killed run leaves no lock to wait for
(Optuna's own locks are lock files, forced only after a 30 s grace period).
"""

from __future__ import annotations

import fcntl
import os
import warnings

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState

from costmodel import InputError, Metrics, StrategyTable
from search._base import Searcher, SearchSpace, check_int
from search._local import polish_batch, sample_left, single_changes, walk_digits
from search._local import start_sample as draw_start_sample
from search._memo import Memo, hbm_of, point_keys, row_costs, stage_width, told_values
from search._screen import points_to_walk, screen_searcher
from search._tpe_defaults import (
    DEFAULT_LOCAL_SHARE,
    DEFAULT_MEMORY_PENALTY,
    DEFAULT_N_STARTUP_TRIALS,
    DEFAULT_START_SAMPLE,
)

# ``n_startup_trials`` None: auto_startup_trials.
MIN_STARTUP_TRIALS = 4
STARTUP_SHARE = 10
# Study user attributes of an enumeration (search._screen): points told, feasible among them.
ENUM_ATTR = "plansweep_enumerated"
ENUM_FEASIBLE_ATTR = "plansweep_enumerated_feasible"
# Optuna's default number of candidates per sample (TPESampler n_ei_candidates=24).
DEFAULT_N_EI_CANDIDATES = 24
DEFAULT_STUDY_NAME = "plansweep-tpe"
# Draws allowed per asked point (invalid or already-known draws are not asked).
MAX_DRAWS_PER_POINT = 50
# Spaces with at most this many valid points use conditional parameters (module docstring).
CONDITIONAL_MAX_POINTS = 2_000_000
SEED_MODULUS = 2**32
# Draws in a row that bring no new point before the next trial is a random new valid point.
SATURATED_DRAWS = 4
_CONSTRAINTS = ("memory", "model", "space")
# Study user attribute naming the conditional walk's dimension order (walk_order).
ORDER_ATTR = "plansweep_walk_order"
# Trial user attribute marking a trial whose point its study asked (and was evaluated).
ASKED_ATTR = "asked"
# The studies by ``walks``, one per order of the conditional walk (module docstring).
WALKS = {"both": ("digits", "roots"), "digits": ("digits",), "roots": ("roots",)}
DEFAULT_WALKS = "auto"
# walks "auto": "roots" alone below this budget, where two studies would halve each one's trials
# (BENCHMARKS.md, "Search quality on more problems": at 2% budgets "roots" alone does as well).
SINGLE_WALK_BUDGET = 256
# Seed streams of the random points after SATURATED_DRAWS and of the late local phase.
EXPLORE_STREAM = 7
LOCAL_STREAM = 11
SAMPLE_STREAM = 13
# Points of one batch of the late local phase at most (search._gradient's POLISH_BATCH): a climb re-ranks
# the neighbours of the peaks told after every few points.
LOCAL_BATCH = 8
# The climb ranks the peaks' neighbours by an additive model of the points told with their costs clipped
# at this quantile (search._local.additive_model: a plan slower than the median told counts as the median
# one). Chosen on draw seed 1's eight problems that TPE missed most (budgets 27-144), 20 seeds each: within
# 1% in 121 of 160 runs unclipped, 137, 138 and 134 clipped at 0.4, 0.5 and 0.65
# (benchmarks/bench_search_tune.py --draw-seed 1 --pick 0,1,17,18,20,21,27,28 --seeds 20).
LOCAL_CLIP = 0.5
# Where the studies cannot name some of a climb batch's points (placement spaces), the climb's next
# points are drawn from this many batches' worth and the nameable ones kept.
UNREACHABLE_WIDEN = 8
# A batch asks at most budget / MIN_BATCHES points (module docstring, "Budget"): a budget of 15
# asked in one batch of 16 is random search.
MIN_BATCHES = 8


def _batch_seed(seed: int, trials: int, walk: int = 0) -> int:
    """Seed of the sampler of walk ``walk``'s study for the batch starting after ``trials`` of
    its trials."""
    key = [seed, trials] if walk == 0 else [seed, trials, walk]
    return int(np.random.default_rng(key).integers(SEED_MODULUS))


class TPESearcher(Searcher):
    """Tree-structured Parzen estimator search (Bergstra et al. 2011; Optuna's TPESampler,
    multivariate, Falkner et al. 2018) over a Space; see the module docstring.

    Every TPESampler argument is set explicitly (Optuna 5.0 defaults noted): n_startup_trials,
    n_ei_candidates (24), seed, multivariate (None: True for one objective; set True), group
    (False), constant_liar (True: running trials of a batch count as bad so the batch spreads
    out). Arguments deprecated in Optuna 4.x-5.0 (consider_prior, prior_weight, consider_magic_clip,
    consider_endpoints, gamma, weights, warn_independent_sampling, constraints_func) are left at
    None, which means their documented defaults (True, 1.0, True, False, default gamma, default weights, False, none);
    constraints go through Trial.set_constraint, the Optuna 5 replacement of constraints_func.
    ``walks`` ("auto", "both", "digits" or "roots"), ``local_share``, ``min_batches``: module docstring.
    """

    def __init__(self, space: SearchSpace, *, seed: int, storage: str | os.PathLike | None = None,
                 study_name: str = DEFAULT_STUDY_NAME, n_startup_trials: int | None = None,
                 n_ei_candidates: int = DEFAULT_N_EI_CANDIDATES, multivariate: bool = True,
                 group: bool = False, constant_liar: bool = True,
                 memory_penalty: float = DEFAULT_MEMORY_PENALTY, walks: str = DEFAULT_WALKS,
                 budget: int | None = None, screen: bool = True,
                 local_share: float = DEFAULT_LOCAL_SHARE, min_batches: int = MIN_BATCHES,
                 start_sample: float = DEFAULT_START_SAMPLE) -> None:
        if budget is not None and (not isinstance(budget, (int, np.integer)) or budget < 1):
            raise InputError("budget", "an integer >= 1 (evaluations) or None", budget)
        if n_startup_trials is None:
            n_startup_trials = auto_startup_trials(budget)
        check_int("n_startup_trials", n_startup_trials, 0)
        check_int("n_ei_candidates", n_ei_candidates, 1)
        if walks not in (*WALKS, "auto"):
            raise InputError("walks", "one of auto, " + ", ".join(WALKS), walks)
        if walks == "auto":
            walks = "roots" if budget is not None and budget < SINGLE_WALK_BUDGET else "both"
        self.walks = walks
        if not np.isfinite(memory_penalty) or memory_penalty < 0:
            raise InputError("memory_penalty", "a number >= 0 (0: out-of-memory rows violate a constraint)",
                             memory_penalty)
        self.memory_penalty = float(memory_penalty)
        if not np.isfinite(local_share) or not 0 <= local_share <= 1:
            raise InputError("local_share", "a number in [0, 1] (share of the budget spent on local moves)",
                             local_share)
        self.local_share = float(local_share)
        if not np.isfinite(start_sample) or not 0 <= start_sample <= 1:
            raise InputError("start_sample", "a number in [0, 1] (share of the budget spent first on random plans)",
                             start_sample)
        self.start_sample = float(start_sample)
        self.min_batches = check_int("min_batches", min_batches, 1)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.space = space = screen_searcher(self, space, screen=screen, budget=budget)
        self.seed = int(seed)
        self.study_name = study_name
        self.storage = None if storage is None else os.fspath(storage)
        self._sampler_args = dict(n_startup_trials=int(n_startup_trials), n_ei_candidates=int(n_ei_candidates),
                                  multivariate=bool(multivariate), group=bool(group), constant_liar=bool(constant_liar))
        self._hbm_bytes = hbm_of(space.cluster)
        self._width = stage_width(space)
        self._names = [d.name for d in space.dims]
        self._dists = {d.name: _distribution(d.choices) for d in space.dims}
        # Conditional parameters over the valid combinations of the non-stage dimensions where
        # they can be listed (module docstring); per-stage dimensions come after them.
        # (the space's stage_bound dimensions, valid or not by the stages' digits, go with the stages)
        self._core = [k for k, d in enumerate(space.dims) if "." not in d.name and d.name not in space.stage_bound]
        self._stage_dims = [k for k, d in enumerate(space.dims) if "." in d.name or d.name in space.stage_bound]
        self._canonical = space.canonical_digits(1)[0]
        self._valid = _core_valid(space, self._core, self._canonical)
        if self.storage is None:
            backend = optuna.storages.InMemoryStorage()
        else:
            from optuna.storages.journal import JournalFileBackend, JournalStorage

            if os.path.dirname(self.storage) and not os.path.isdir(os.path.dirname(self.storage)):
                raise InputError("storage", "a file in an existing directory", self.storage)
            backend = JournalStorage(JournalFileBackend(self.storage, lock_obj=FlockJournalLock(self.storage)))
        # One study per walk order (module docstring); one study where nothing is walked.
        kinds = WALKS[walks] if self._valid is not None else WALKS[walks][:1]
        self._studies, self._orders = [], []
        for i, kind in enumerate(kinds):
            study = optuna.create_study(storage=backend, study_name=study_name if i == 0 else f"{study_name}:{kind}",
                                        direction="maximize", sampler=self._sampler(0, i), load_if_exists=True)
            self._studies.append(study)
            self._orders.append(self._walk_order_of(study, kind))
        self._asked = [0] * len(kinds)  # points each study has asked (evaluated), its turn order
        self._memo = Memo(width=3)  # (cost, excess, time proxy) per point, shared by the studies
        self._pending: list = []  # trials asked and not told, in order
        self._pending_keys = np.zeros(0, dtype=np.int64)
        self._fit: np.ndarray | None = None  # digits of the screened walk's points (_fit_digits)
        self._sample: np.ndarray | None = None  # (K, D) the start sample (_queued_points), drawn when first used
        # (K,) every single change of a dimension with a choice (the late phase's neighbours, as MCMC's)
        self._changes = single_changes(space, [k for k, d in enumerate(space.dims) if len(d.choices) > 1])
        self._rebuild_from_studies()
        if self.points_fit and self._enumeration is None and not self.trials:
            # Feasibility first: a new study over the points that fit tries the space's recipes
            # first (data parallelism and Megatron-LM's, chosen among the points that fit), in
            # the first study only.
            self.enqueue(list(space.start_points().values()))

    # -- the contract ------------------------------------------------------------------------
    def ask(self, n: int) -> StrategyTable:
        n = check_int("n", n, 0)
        if self._enumeration is not None:  # the budget covers every point that fits: all of them
            told = int(self._studies[0].user_attrs.get(ENUM_ATTR, 0))
            return self.space.table(self.space.digits_of(self._enumeration[told: told + int(n)]))
        total = points_to_walk(self)
        if not self._pending and total is not None and len(self._memo) >= total:
            # a walk that has told every point it walks (those that fit, or every valid point where
            # none fits) has nothing new to ask (drawing on would spend its whole draw limit per
            # ask and find nothing)
            return self.space.table(np.zeros((0, len(self.space.dims)), dtype=np.int64))
        if not self._pending and n > 0:
            self._use(self._next_walk())
            self._new_batch(self._batch_size(int(n)))
        digits = self._pending_digits()[: int(n)]
        return self.space.table(digits)

    @property
    def feasible_seen(self) -> int:
        """Distinct feasible points told so far."""
        if self._enumeration is not None:
            return int(self._studies[0].user_attrs.get(ENUM_FEASIBLE_ATTR, 0))
        _, vals = self._memo.arrays()
        return int(np.isfinite(vals[:, 0]).sum()) if len(vals) else 0

    def tell(self, table: StrategyTable, metrics: Metrics) -> None:
        if self._enumeration is not None:  # the next points of the list, in order (state in the study)
            study = self._studies[0]
            cost, _ = row_costs(metrics, self._hbm_bytes)
            study.set_user_attr(ENUM_ATTR, int(study.user_attrs.get(ENUM_ATTR, 0)) + len(table))
            study.set_user_attr(ENUM_FEASIBLE_ATTR, int(study.user_attrs.get(ENUM_FEASIBLE_ATTR, 0))
                                + int(np.isfinite(cost).sum()))
            return
        if not self._pending and len(table):
            # Replay on a fresh searcher: draw the batch this table came from.
            self._use(self._next_walk())
            self._new_batch(self._batch_size(len(table)))
        if not self._pending:
            return
        pos, vals = told_values(self.space, self._width, self._hbm_bytes, table, metrics,
                                self.space.table(self._pending_digits()))
        hit = pos >= 0
        # pos indexes the distinct pending points (the asked rows), not the trials: a batch may
        # hold the same point drawn twice.
        _, first = np.unique(self._pending_keys, return_index=True)
        keys = self._pending_keys[np.sort(first)][pos[hit]]
        self._memo.add(keys, vals[hit])
        self._asked[self._cur] += len(keys)
        for trial, key in zip(self._pending, self._pending_keys, strict=True):
            found, v = self._memo.lookup(np.asarray([key], dtype=self._pending_keys.dtype))
            if found[0]:
                trial.set_user_attr(ASKED_ATTR, True)
                self._tell_known(trial, v[0])
            else:  # asked but not told: this point was not evaluated
                self.study.tell(trial, state=TrialState.FAIL)
        self._pending = []
        self._pending_keys = self._pending_keys[:0]
        self._use(self._next_walk())

    # -- walks -------------------------------------------------------------------------------
    def _use(self, walk: int) -> None:
        """Make walk ``walk``'s study and order the ones the methods below draw from."""
        self._cur = walk
        self.study = self._studies[walk]
        self._core = self._orders[walk]

    def _next_walk(self) -> int:
        """The study that asks next: the one with the pending batch, else the one that has asked
        the fewest distinct points (the first on a tie), so the studies take turns batch by
        batch."""
        if self._pending:
            return self._cur
        return int(np.argmin(self._asked))

    # -- batches -----------------------------------------------------------------------------
    def _sampler(self, trials: int, walk: int) -> optuna.samplers.TPESampler:
        with warnings.catch_warnings():
            # group=True is experimental in Optuna 5 and says so once per sampler.
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(seed=_batch_seed(self.seed, trials, walk), **self._sampler_args)

    def _batch_size(self, n: int) -> int:
        """Points one batch asks when the driver asks n: at most budget / min_batches with a budget,
        and at most the points of the walk not told yet where they can be counted (a batch
        draws until it has its points, so asking more than are left would spend its whole draw
        limit)."""
        size = n if self.budget is None else min(n, max(self.budget // self.min_batches, 1))
        total = points_to_walk(self)
        return size if total is None else min(size, max(total - len(self._memo), 0))

    def _fit_digits(self) -> np.ndarray | None:
        """(M, D) digits of every point of the walk (the local phase's repairs), where
        there are at most search._local.REPAIR_MAX_POINTS; else None (repairs by one more change)."""
        if self._fit is None:
            self._fit = walk_digits(self.space, points_to_walk(self))
        return self._fit

    def _queued_points(self, n: int) -> np.ndarray:
        """(<= n, D) digits the next batch queues as trials before TPE draws: the start sample's points
        not told yet (search._local.start_sample: ``start_sample`` x budget uniformly random points that
        fit), then, in the late local phase (the last ``local_share`` of the budget, at least
        search._local.LATE_POINTS up to LATE_MAX_SHARE of it), the unevaluated neighbours of the peaks
        among the feasible points told (search._local.polish_batch, the late phase MCMC and the gradient
        search share: single changes, then the fewest-change repairs of invalid ones, those of the two
        best peaks with any left ranked together by the additive model of the points told, clipped at
        their median cost, LOCAL_CLIP; a climbed peak whose neighbours are all told hands the phase to
        the next peak, in another basin). Empty
        without a budget or a screened walk, on per-stage spaces, and between the two phases."""
        none = np.zeros((0, len(self._names)), dtype=np.int64)
        if self.budget is None or self.space.strides is None:
            return none
        if self._sample is None:  # the recipes (queued already in a new study: asked once) and random points
            starts = np.array(list(self.space.start_points().values()), dtype=np.int64)
            sample = draw_start_sample(self.space, self.budget, self.start_sample, seed=self.seed,
                                       stream=SAMPLE_STREAM, starts=starts)
            self._sample = None if sample is None else sample[self._reachable(sample)]
        left = sample_left(self.space, self._sample, self._memo)
        if left is not None:
            return left[:n]
        batch = min(n, LOCAL_BATCH)
        for wide in (1, UNREACHABLE_WIDEN):  # wider where some of the climb's points cannot be named
            pts = polish_batch(self.space, self._memo, budget=self.budget, share=self.local_share,
                               batch=wide * batch, seed=self.seed, stream=LOCAL_STREAM, changes=self._changes,
                               fit=self._fit_digits(), clip=LOCAL_CLIP)
            if pts is None:
                return none
            ok = self._reachable(pts)
            if ok.all():
                return pts[:batch]
        return pts[ok][:batch]

    def _reachable(self, digits: np.ndarray) -> np.ndarray:
        """(N,) bool: the points of ``digits`` (N, D) that the studies' parameters can name (the walk maps
        their parameters back to the same digits). On placement spaces the walk names a part of the
        valid points only; a point it cannot name would never be asked (and a start sample waiting for
        it would never end)."""
        return np.array([bool((self._digits(self._params_of(d)) == d).all()) for d in digits], dtype=bool)

    def _sample_done(self) -> bool:
        """The start sample (if any) is all told: queued points are the late local phase's."""
        return self._sample is None or sample_left(self.space, self._sample, self._memo) is None

    def _new_batch(self, n: int) -> None:
        """Draw trials until n distinct valid points not evaluated yet are pending (or the draw
        limit is reached: a replayed batch then ends at its last asked point, so a batch cut
        short by the limit replays with fewer trials)."""
        self.study.sampler = self._sampler(len(self.study.get_trials(deepcopy=False)), self._cur)
        queued = self._queued_points(n)
        if len(queued):  # the start sample, or the late local phase: the batch is these points, as trials
            self.enqueue(queued)
            if self._sample_done():  # a climb's batch is its points alone (at most LOCAL_BATCH)
                n = min(n, len(queued))
        pending, keys_seen = [], []
        known_run = 0  # draws in a row that brought nothing new
        stream = [EXPLORE_STREAM] if self._cur == 0 else [EXPLORE_STREAM, self._cur]
        rng = np.random.default_rng([self.seed, len(self.study.get_trials(deepcopy=False)), *stream])
        distinct: set[bytes] = set()
        for _ in range(MAX_DRAWS_PER_POINT * n):
            if len(distinct) >= n:
                break
            if known_run >= SATURATED_DRAWS:
                # TPE keeps proposing points already evaluated: the next trial is a random valid
                # point not evaluated yet (enqueued, so TPE records and learns from it).
                self._enqueue_random(rng)
                known_run = 0
            if self._valid is not None:
                trial = self.study.ask()
                digits = self._walk(trial.suggest_int, trial.suggest_categorical)[None, :]
            else:
                trial = self.study.ask(self._dists)
                digits = np.array([[trial.params[name] for name in self._names]], dtype=np.int64)
            if not self.space.valid(digits)[0]:
                for name in _CONSTRAINTS:
                    trial.set_constraint(name, 1.0 if name == "space" else 0.0)
                self.study.tell(trial, 0.0)
                known_run += 1
                continue
            key = point_keys(self.space, digits)
            found, v = self._memo.lookup(key)
            if found[0]:
                self._tell_known(trial, v[0])
                known_run += 1
                continue
            known_run = 0
            # A point drawn twice in one batch is asked once; both trials get its result.
            distinct.add(key[:1].tobytes())
            pending.append(trial)
            keys_seen.append(key[0])
        self._pending = pending
        self._pending_keys = np.asarray(keys_seen) if keys_seen else np.zeros(0, dtype=np.int64)

    def _enqueue_random(self, rng: np.random.Generator) -> None:
        """Enqueue a uniformly random valid point that has not been evaluated (if one is found
        in a few draws)."""
        for _ in range(8):
            digits = self.space.random_digits(rng, 16)
            found, _ = self._memo.lookup(point_keys(self.space, digits))
            fresh = np.flatnonzero(~found)
            if fresh.size:
                self.study.enqueue_trial(self._params_of(digits[fresh[0]]), skip_if_exists=False)
                return

    def enqueue(self, points) -> int:
        """Queue points (rows of digits of this searcher's space) as the next trials of its
        current study, in the study's own parametrisation (stored in the study, so a resumed
        study has them); a point the walk does not reach is skipped. Returns how many were queued."""
        queued = 0
        for digits in np.atleast_2d(np.asarray(points, dtype=np.int64)):
            params = self._params_of(digits)
            if (self._digits(params) == digits).all():
                self.study.enqueue_trial(params)
                queued += 1
        return queued

    def _params_of(self, digits: np.ndarray) -> dict:
        """The trial parameters that make _walk return ``digits``."""
        if self._valid is None:
            return {name: int(digits[k]) for k, name in enumerate(self._names)}
        params: dict = {}

        def record(pname, *_):
            params[pname] = int(digits[self._names.index(pname)])
            return params[pname]

        self._walk(record, record)
        return params

    def _pending_digits(self) -> np.ndarray:
        """Digits of the distinct pending points, in the order they were drawn."""
        if not self._pending:
            return np.zeros((0, len(self._names)), dtype=np.int64)
        _, first = np.unique(self._pending_keys, return_index=True)
        first = np.sort(first)
        return np.stack([self._digits(self._pending[i].params) for i in first])

    def _tell_known(self, trial, value: np.ndarray) -> None:
        cost, excess, proxy = float(value[0]), float(value[1]), float(value[2])
        feasible = np.isfinite(cost)
        # The row's own terms, so that a resumed study rebuilds the memo exactly (_value_of).
        trial.set_user_attr("cost", cost)
        trial.set_user_attr("excess", excess)
        trial.set_user_attr("proxy", proxy)
        if self.memory_penalty > 0 and not feasible and np.isfinite(excess) and np.isfinite(proxy):
            # Soft memory wall (module docstring): feasible, at the proxy's throughput over (1 + lambda * overflow).
            for name in _CONSTRAINTS:
                trial.set_constraint(name, -1.0 if name == "memory" else 0.0)
            self.study.tell(trial, 1.0 / (proxy * (1.0 + self.memory_penalty * (excess - 1.0))))
            return
        trial.set_constraint("memory", (excess - 1.0) if (not feasible and np.isfinite(excess)) else -1.0)
        trial.set_constraint("model", 0.0 if feasible or np.isfinite(excess) else 1.0)
        trial.set_constraint("space", 0.0)
        self.study.tell(trial, 1.0 / cost if feasible else 0.0)

    def _rebuild_from_studies(self) -> None:
        """Memo from every study's finished trials, each study's count of asked points; the
        running trials of a study become the pending batch (of the first such study: the
        others' are closed as failed, which only an outside writer could leave)."""
        pending_walk = 0
        for walk in range(len(self._studies)):
            self._use(walk)
            trials = self.study.get_trials(deepcopy=False)
            done = [t for t in trials if t.state == TrialState.COMPLETE and t.constraints.get("space", 0.0) <= 0
                    and (self._valid is not None or t.params.keys() == self._dists.keys())]
            if done:
                digits = np.stack([self._digits(t.params) for t in done])
                vals = np.array([_value_of(t) for t in done])
                keys = point_keys(self.space, digits)
                self._memo.add(keys, vals)
                asked = np.array([bool(t.user_attrs.get(ASKED_ATTR)) for t in done])
                self._asked[walk] = len(np.unique(keys[asked], axis=0))
            # Running trials become the pending batch; one whose parameters were not all drawn
            # (the process died between study.ask() and its last suggestion) never named a point
            # and is closed as failed.
            running, digits = [], []
            for t in trials:
                if t.state != TrialState.RUNNING:
                    continue
                try:
                    point = None if self._pending else self._digits(t.params)
                except KeyError:
                    point = None
                if point is None:
                    self.study.tell(t.number, state=TrialState.FAIL)
                    continue
                digits.append(point)
                running.append(t)
            if running:
                self._pending = [optuna.trial.Trial(self.study, t._trial_id) for t in running]
                self._pending_keys = point_keys(self.space, np.stack(digits))
                pending_walk = walk
        self._use(pending_walk if self._pending else self._next_walk())

    def _walk_order_of(self, study, kind: str) -> list[int]:
        """The order of ``study``'s conditional walk: the one the study records (its user
        attribute ORDER_ATTR); the space's digit order for a study begun before the order was
        recorded (trials but no attribute: their parameters name points in that order); else
        the order of ``kind`` ("digits": the space's order; "roots": walk_order()), recorded in
        the study."""
        if self._valid is None:
            return self._core
        recorded = study.user_attrs.get(ORDER_ATTR)
        if recorded is not None:
            if sorted(recorded) != sorted(self._names[k] for k in self._core):
                raise InputError("storage", f"a study over the dimensions {[self._names[k] for k in self._core]}",
                                 f"a study walking {recorded}")
            return [self._names.index(name) for name in recorded]
        if study.get_trials(deepcopy=False):
            return list(self._core)
        order = list(self._core) if kind == "digits" else walk_order(self._valid, self._core)
        study.set_user_attr(ORDER_ATTR, [self._names[k] for k in order])
        return order

    def _walk(self, suggest_int, suggest_categorical) -> np.ndarray:
        """Digits chosen dimension by dimension (in the walk order, self._core) among the valid
        points agreeing with the digits chosen so far: dimension k's parameter is named as the
        dimension, over all its digits (its distribution never changes under one name), and is
        skipped when one digit is allowed. Per-stage
        dimensions follow, one parameter each for the stages the chosen pp uses (the others
        keep their canonical digit)."""
        def suggest(name: str) -> int:
            dist = self._dists[name]
            if isinstance(dist, IntDistribution):
                return int(suggest_int(name, dist.low, dist.high))
            return int(suggest_categorical(name, list(dist.choices)))

        rows = self._valid
        out = self._canonical.copy()
        for k in self._core:
            allowed = np.unique(rows[:, k])
            if allowed.size == 1:
                digit = int(allowed[0])
            else:
                want = suggest(self._names[k])
                # The nearest allowed digit (the lower one on a tie): a fixed map from the
                # sampled parameter to a valid point.
                digit = int(allowed[np.argmin(np.abs(allowed - want))])
            out[k] = digit
            rows = rows[rows[:, k] == digit]
        if self._stage_dims:
            pp = int(self.space.table(out[None, :])["pp"][0])
            for k in self._stage_dims:
                d = self.space.dims[k]
                if d.stage < (pp - 1 if d.base == "stage_shift" else pp):
                    out[k] = suggest(d.name)
        return out

    def _digits(self, params: dict) -> np.ndarray:
        """(D,) digits of a trial's parameters (either parametrisation)."""
        if self._valid is None:
            return np.array([params[name] for name in self._names], dtype=np.int64)
        return self._walk(lambda n, *_: params[n], lambda n, *_: params[n])

    # -- reading -----------------------------------------------------------------------------
    @property
    def trials(self) -> int:
        """Trials in the studies (including those outside the space, told without evaluation)."""
        return sum(len(study.get_trials(deepcopy=False)) for study in self._studies)


class FlockJournalLock:
    """The lock of an Optuna journal file (JournalFileBackend's lock_obj, with the two methods of
    Optuna's lock classes, whose base class is not public): fcntl.flock on the journal file
    itself, through an open file of its own. The kernel releases it when the holder closes it or
    dies (kill -9 included), so it never waits on a dead holder and leaves no file behind
    (Optuna's JournalFileSymlinkLock and JournalFileOpenLock are lock files that a killed process
    leaves, forced only after their grace period, 30 s). Processes sharing a journal must all use
    this lock: it does not see Optuna's lock files, nor they it."""

    def __init__(self, path: str | os.PathLike) -> None:
        self._path = os.fspath(path)
        self._fd = -1

    def acquire(self) -> bool:
        fd = os.open(self._path, os.O_RDONLY | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # waits only while a live process holds it
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return True

    def release(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)  # closing the file releases the lock


def journal_size(path: str | os.PathLike) -> int:
    """Bytes in the journal ``path`` now: with every write fsynced and each line one whole
    operation, the first journal_size(path) bytes are the studies as they are now."""
    return os.path.getsize(path)


def rewind_journal(path: str | os.PathLike, size: int, *, why: str) -> None:
    """Cut the journal ``path`` back to its first ``size`` bytes (a size journal_size returned):
    the studies as they were then (module docstring, "Exact resume"). Refused in one line
    (InputError naming the file) where the journal is shorter or ``size`` is not the end of one of
    its lines: not the journal whose size was recorded (``why`` says where it was)."""
    path = os.fspath(path)
    have = os.path.getsize(path) if os.path.exists(path) else 0
    last = b"\n"
    if 0 < size <= have:
        with open(path, "rb") as f:
            f.seek(size - 1)
            last = f.read(1)
    if size > have or last != b"\n":
        raise InputError(path, f"an Optuna journal of at least {size:,} bytes with a line ending at byte {size:,} "
                         f"({why})", f"{have:,} bytes" + ("" if size > have else ", no line ending there"))
    if have > size:
        os.truncate(path, size)


def auto_startup_trials(budget: int | None) -> int:
    """Start-up (random) trials per study for ``n_startup_trials=None``: DEFAULT_N_STARTUP_TRIALS
    without a budget; with one, budget / STARTUP_SHARE between MIN_STARTUP_TRIALS and
    DEFAULT_N_STARTUP_TRIALS (a budget of 42: 4 per study; 200 or more: 20)."""
    if budget is None:
        return DEFAULT_N_STARTUP_TRIALS
    return int(min(max(budget // STARTUP_SHARE, MIN_STARTUP_TRIALS), DEFAULT_N_STARTUP_TRIALS))


def _core_valid(space, core: list[int], canonical: np.ndarray) -> np.ndarray | None:
    """(V, D) valid digits over the non-stage dimensions (per-stage digits canonical), or None
    when their combinations number more than CONDITIONAL_MAX_POINTS."""
    radices = space.radices[core]
    total = int(np.prod(radices, dtype=object))
    if total > CONDITIONAL_MAX_POINTS or not core:
        return None
    idx = np.arange(total, dtype=np.int64)
    digits = np.broadcast_to(canonical, (total, len(canonical))).copy()
    for j in range(len(core) - 1, -1, -1):
        idx, digits[:, core[j]] = np.divmod(idx, radices[j])
    valid = digits[space.valid(digits)]
    return valid if len(valid) else None


def walk_order(valid: np.ndarray, core: list[int]) -> list[int]:
    """The dimensions ``core`` (columns of the valid digits ``valid``) in the order the conditional
    walk samples them: roots of the space's conditional tree first. A dimension's rank is the
    largest number of other dimensions that one of its choices settles (leaves one allowed digit
    where the valid points have several); ties keep the given order. On the exact space the ZeRO
    stage comes first (ZeRO-2 and -3 exist only with pp 1 and vpp 1, so they settle two others),
    then tp, pp, schedule and vpp (one each), then cp, micro-batch, SP and recompute."""
    several = [k for k in core if np.unique(valid[:, k]).size > 1]
    settles = {}
    for k in core:
        best = 0
        for digit in np.unique(valid[:, k]):
            rows = valid[valid[:, k] == digit]
            best = max(best, sum(np.unique(rows[:, j]).size == 1 for j in several if j != k))
        settles[k] = best
    return sorted(core, key=lambda k: -settles[k])


def _value_of(trial) -> tuple[float, float, float]:
    """(cost, excess, time proxy) of a finished trial: its user attributes where recorded, else
    from its value and constraints (row_costs' terms; proxy unknown, inf, for infeasible rows)."""
    attrs = trial.user_attrs
    if "cost" in attrs:
        return float(attrs["cost"]), float(attrs["excess"]), float(attrs["proxy"])
    if trial.value and trial.value > 0:
        return 1.0 / trial.value, 0.0, 1.0 / trial.value
    mem = trial.constraints.get("memory", 0.0)
    if trial.constraints.get("model", 0.0) > 0:
        return np.inf, np.inf, np.inf
    return np.inf, mem + 1.0, np.inf


def _distribution(choices: tuple):
    """IntDistribution over the digit of increasing numeric choices, else categorical digits."""
    numeric = all(isinstance(c, (int, np.integer)) and not isinstance(c, (bool, np.bool_)) for c in choices)
    if numeric and len(choices) > 1 and all(a < b for a, b in zip(choices, choices[1:], strict=False)):
        return IntDistribution(0, len(choices) - 1)
    return CategoricalDistribution(tuple(range(len(choices))))
