"""Searches (MCMC, TPE, gradient) through the sweep machinery: run directory, Parquet parts, checkpoints.

Parts and checkpoints. A search's rows are kept in memory (Pending) until they fill a part of
at least ``part_rows`` rows (run.json's options; --part-rows, default 10,000), the search ends,
or PART_FLUSH_S seconds have passed since the first of them; then, per study: the part's
record (state/asked/, sweep._heal), the part, then the searcher's checkpoint. A checkpoint is
only ever written with the part that holds every row evaluated before it, so a kill loses the
pending rows and nothing else: resume starts from the last checkpoint, and the searcher (a
function of its state and seed) evaluates those rows again, exactly. Runs recorded without
part_rows (written before) keep a part per checkpoint or batch (part_rows 1).

MCMC: each study's ensemble of chains runs in one Ray actor (studies side by side, one actor
each), ``checkpoint_every`` steps per call. The driver keeps each call's rows and state_dict
pending; a part is written as ``results/searcher=mcmc/part-<study>-<checkpoint>.parquet`` and then
the state as ``state/mcmc-<study>.npz`` (both through a temporary name and a rename). Resume loads
the state (a fresh searcher + load_state_dict) and goes on from there; a part written after the
last state is written again, identically, under the same name. A dead actor is replaced by a new
one built from the last state, its pending rows dropped (the new actor evaluates them again).

TPE: ask/tell on the driver (its study lives in the Optuna journal ``state/tpe-<study>.journal``),
each batch evaluated by a Ray task, the studies' batches in flight together. With each part,
``state/tpe-<study>.json`` records the parts written, the batches told (asks) and the journal's
size then (journal_bytes). Resume first cuts the journal back to that size (search._tpe, "Exact
resume"), so the batches told since are drawn again exactly; a journal without a marker holds no
written batch and is started again.

Every search part is preceded by its record, ``state/asked/<searcher>/part-<study>-<index>.npz``
(the strategies asked and each row's iteration, sweep._heal): on resume a part moved to
quarantine/ (sweep._rundir) is rebuilt from it before the search goes on (plan_search_heal, rebuild_parts).
Checkpoints carry a digest of their arrays and are checked (sweep._checks) before they are loaded.

Gradient: ask/tell on the driver, each study's step (its batch of samples) evaluated by a Ray
task, the studies' steps in flight together. Per part: the rows of its steps, then the state
``state/gradient-<study>.npz`` (the searcher's state_dict, the parts written and the steps done).
After a kill between the part and the state, the resumed searcher asks the same steps again (ask is
a function of the state), and the part is written again, identically, under the same name.
"""

from __future__ import annotations

import dataclasses
import os
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from costmodel import FailureModel, InputError, Metrics, StrategyTable, evaluate, plan_goodput
from search._base import OBJECTIVE_COLUMN
from search._options import GradientOptions, MCMCOptions, TPEOptions
from sweep._checks import (
    JOURNAL,
    check_counters,
    check_digest,
    check_journal,
    check_progress,
    check_state,
    load_marker,
    read_npz,
    said,
    save_npz,
    shown,
)
from sweep._grid import Progress
from sweep._heal import plan_search_heal, rebuild_parts, record_arrays, record_path, write_record
from sweep._results import HETERO_STRATEGY_COLUMNS, part_name, pool_names, to_arrow, write_json_atomic, write_part
from sweep._rundir import RunDir, Study
from sweep._runview import run_failure_model

STATE_KEY = "s."  # searcher state entries in the npz
ENGINE_KEY = "e."  # engine entries (checkpoints done)
SearcherOptions = MCMCOptions | TPEOptions | GradientOptions
# Pending rows older than this are written (with the checkpoint) whatever their number, so that a
# slow search (TPE's asks grow with its trials) loses at most about this much work to a kill; long
# enough that a search of 10^5 evaluations taking up to 100 minutes still writes <= 20 parts.
PART_FLUSH_S = 300.0


def part_rows(info: dict) -> int:
    """Rows per part of a search run (run.json's options.part_rows); 1 for a run recorded without it
    (written before: a part per checkpoint or batch, which its resume keeps)."""
    return int(info["options"].get("part_rows", 1))


@dataclasses.dataclass
class Pending:
    """A study's rows since its last part, in memory until they are written with a checkpoint:
    the Arrow rows, the strategies asked and each row's iteration (the part's record), the
    evaluations and batches they hold, and what the last batch left (MCMC: the searcher's state,
    done)."""

    arrows: list[pa.Table] = dataclasses.field(default_factory=list)
    tables: list[StrategyTable] = dataclasses.field(default_factory=list)
    iterations: list[np.ndarray] = dataclasses.field(default_factory=list)
    rows: int = 0
    since: float | None = None  # time.monotonic() when the first pending batch came
    state: dict | None = None
    done: bool = False

    def add(self, arrow: pa.Table, table: StrategyTable, iteration) -> None:
        if self.since is None:
            self.since = time.monotonic()
        self.arrows.append(arrow)
        self.tables.append(table)
        self.iterations.append(np.broadcast_to(np.asarray(iteration, dtype=np.int64), (len(table),)))
        self.rows += len(table)

    @property
    def batches(self) -> int:
        return len(self.tables)

    def due(self, rows: int) -> bool:
        """Enough rows for a part of ``rows``, or pending for PART_FLUSH_S."""
        return self.rows >= rows or (self.since is not None and time.monotonic() - self.since >= PART_FLUSH_S)

    def part(self) -> tuple[pa.Table, dict[str, np.ndarray]]:
        """(the part's rows, its record: sweep._heal.record_arrays) of everything pending."""
        table = StrategyTable.concat(self.tables)
        return pa.concat_tables(self.arrows), record_arrays(table, np.concatenate(self.iterations))


def study_seed(seed: int, study: int) -> int:
    """Each study's own seed: the run's seed for the first, then seed + study index."""
    return int(seed) + int(study)


# ---- checkpoints: state_dict <-> npz (plain arrays and their digest, no pickles) ------------
CHECKPOINT = "a search checkpoint as plansweep writes it (npz of plain arrays)"


def save_state(path: str, state: dict, engine: dict) -> None:
    arrays = {STATE_KEY + k: np.asarray(v) for k, v in state.items()}
    arrays.update({ENGINE_KEY + k: np.asarray(v) for k, v in engine.items()})
    save_npz(path, arrays)


def _plain(a: np.ndarray):
    return a.item() if a.ndim == 0 else a


def load_checkpoint(path: str, key: str, budget: int, searcher) -> tuple[dict | None, dict]:
    """(searcher state or None, progress) of a study's npz checkpoint, loaded into ``searcher``:
    its parts written (``key``), evaluations and done flag, as save_state's engine entries; a
    fresh start without one. Checked before use, in one line naming the file: the entries' names,
    kinds and shapes against a fresh ``searcher``'s state_dict, the engine entries' ranges, then
    the digest (its content as written), then what the searcher's load_state_dict refuses."""
    if not os.path.exists(path):
        return None, {key: 0, "evaluations": 0, "done": False}
    arrays, recorded = read_npz(path, CHECKPOINT)
    other = sorted(k for k in arrays if not k.startswith((STATE_KEY, ENGINE_KEY)))
    if other:
        raise InputError(path, f"entries named {STATE_KEY}* or {ENGINE_KEY}*", shown(other[0]))
    state = {k[len(STATE_KEY):]: _plain(v) for k, v in arrays.items() if k.startswith(STATE_KEY)}
    engine = {k[len(ENGINE_KEY):]: v for k, v in arrays.items() if k.startswith(ENGINE_KEY)}
    progress = check_progress(path, engine, key, budget)
    check_state(path, state, searcher.state_dict())
    check_digest(path, CHECKPOINT, arrays, recorded)
    if recorded is None:  # written before checkpoints carried a digest: its values are unverified
        check_counters(path, state)
    try:
        searcher.load_state_dict(state)
    except InputError as exc:
        raise InputError(path, f"{exc.argument}: {exc.expected}", shown(exc.got)) from None
    except (KeyError, ValueError, TypeError, IndexError) as exc:
        raise InputError(path, "a checkpoint this searcher can load", said(exc)) from None
    if recorded is None and not progress["done"]:
        _try_ask(searcher, path)
    return state, progress


def _try_ask(searcher, path: str) -> None:
    """One ask of a copy of ``searcher``, loaded from an unverified checkpoint: what it raises is
    the checkpoint's values (the searcher itself is exercised by every run), named in one line."""
    import copy

    try:
        copy.deepcopy(searcher).ask(1)
    except Exception as exc:  # noqa: BLE001  any failure here comes from the values loaded
        raise InputError(path, "a checkpoint whose values this searcher can go on from", said(exc)) from None


# ---- the searchers ---------------------------------------------------------------------------
def make_searcher(space, options: SearcherOptions, *, seed: int, storage: str | None = None, budget: int | None = None):
    """The searcher of a run (``budget``: the run's evaluations per study, which the searchers'
    automatic settings scale with). On a placement space (search.HeteroSpace) MCMC chains also
    start from its named placements and a new TPE study tries them first (random placements are
    almost all infeasible). ``storage``: TPE's journal (the others keep no file of their own)."""
    if isinstance(options, GradientOptions):
        return options.searcher(space, seed=seed, budget=budget)
    placement = pool_names(space) is not None
    if isinstance(options, MCMCOptions):
        return options.searcher(space, seed=seed, budget=budget)  # a placement space's chains start at its recipes
    searcher = open_tpe(options, space, seed=seed, storage=storage, budget=budget)
    if placement and not searcher.study.get_trials(deepcopy=False):
        searcher.enqueue(list(space.start_points().values()))  # in the journal: a resumed study has them
    return searcher


def open_tpe(options: TPEOptions, space, *, seed: int, storage: str | None, budget: int | None):
    """options.searcher over the journal ``storage``; a journal Optuna cannot replay (junk, cut
    short) is refused in one line naming it."""
    if storage is None:
        return options.searcher(space, seed=seed, budget=budget)
    check_journal(storage)
    try:
        return options.searcher(space, seed=seed, storage=storage, budget=budget)
    except InputError:
        raise
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, AssertionError) as exc:
        # records of another shape: what Optuna's replay met (an assert of its own among them)
        raise InputError(storage, JOURNAL, said(exc)) from None


class ChainRunner:
    """One study's MCMC ensemble; a Ray actor (or a plain object in-process)."""

    def __init__(self, space, *, seed: int, options: MCMCOptions, state: dict | None = None,
                 budget: int | None = None, failure: FailureModel | None = None) -> None:
        self.space = space
        self.failure = failure
        self.searcher = make_searcher(space, options, seed=seed, budget=budget)
        if state:
            self.searcher.load_state_dict(state)  # checked by run_mcmc (load_checkpoint) first

    def advance(self, n_steps: int, evaluations_left: int, *, run_id: str, metadata: dict):
        """Up to ``n_steps`` steps or ``evaluations_left`` evaluations: returns (arrow rows with
        iteration = the step, state_dict, evaluations, done: no budget left or the searcher
        has nothing new to ask, the strategies evaluated, (N,) each row's step)."""
        tables, metrics, steps = [], [], []
        chains, used, done = self.searcher.chains, 0, False
        for _ in range(n_steps):  # a loop over steps; the chains are columns
            table = self.searcher.ask(min(chains, evaluations_left - used))
            if len(table) == 0:
                done = True
                break
            m = evaluate_table(self.space, table, self.failure)
            step = self.searcher.step
            self.searcher.tell(table, m)
            tables.append(table)
            metrics.append(m)
            steps.append(np.full(len(table), step, dtype=np.int64))
            used += len(table)
            if used >= evaluations_left:
                done = True
                break
        if tables:
            table = StrategyTable.concat(tables)
            m = Metrics({k: np.concatenate([x[k] for x in metrics]) for k in metrics[0]})
            iteration = np.concatenate(steps)
        else:
            table = self.space.table(np.zeros((0, len(self.space.dims)), dtype=np.int64))
            m = evaluate(self.space.model, self.space.cluster, table, framework=self.space.framework)
            iteration = np.zeros(0, dtype=np.int64)
        arrow = to_arrow(table, m, run_id=run_id, model=self.space.model.name, cluster=self.space.cluster.name,
                         framework=self.space.framework,
                         iteration=iteration, grid_index=None, metadata=metadata, pool_names=pool_names(self.space),
                         seq_len=self.space.model.seq_len)
        return arrow, self.searcher.state_dict(), used, done, table, iteration


def evaluate_table(space, table: StrategyTable, failure: FailureModel | None = None) -> Metrics:
    """A Ray task body: one batch of a driver-side searcher; with ``failure`` (a run by goodput) the
    metrics carry the goodput as the objective column the searchers maximise (search._base)."""
    m = evaluate(space.model, space.cluster, table, framework=space.framework)
    if failure is not None:
        m[OBJECTIVE_COLUMN] = plan_goodput(m, table, space.cluster, failure, model=space.model)["goodput_tokens_per_s"]
    return m


def _tick(bar: Progress, n: int, arrow) -> None:
    """``n`` evaluations more on ``bar``, with the best feasible tokens/s and the feasible rows of ``arrow``."""
    import pyarrow.compute as pc

    tps = pc.filter(arrow["tokens_per_s"], arrow["feasible"])
    bar.update(n, n, float(pc.max(tps).as_py() or 0.0) if len(tps) else 0.0,
               int(pc.sum(arrow["feasible"]).as_py() or 0) if len(arrow) else 0)


# ---- MCMC ------------------------------------------------------------------------------------
def run_mcmc(rd: RunDir, *, in_process: bool, progress: bool) -> None:
    info = rd.info
    opts = MCMCOptions.from_json(info["options"])
    budget, every, rows = int(info["options"]["budget"]), int(info["options"]["checkpoint_every"]), part_rows(info)
    studies = rd.studies()
    parts = rd.partition("mcmc")
    state_path = {s.index: os.path.join(rd.state, f"mcmc-{s.index:02d}.npz") for s in studies}
    # Per study: searcher state, checkpoints (parts) written, evaluations in them, finished.
    progress_of: dict[int, dict] = {}
    seeds = {s.index: study_seed(info["seed"], s.index) for s in studies}
    for s in studies:  # a checkpoint this searcher cannot load is refused here, in one line, not in an actor
        found = os.path.exists(state_path[s.index])  # (no searcher built to check a checkpoint there is not)
        state, p = load_checkpoint(state_path[s.index], "checkpoints", budget,
                                   make_searcher(s.space, opts, seed=seeds[s.index], budget=budget) if found else None)
        progress_of[s.index] = {"state": state, **p}
    failure = run_failure_model(rd)
    rebuilds = plan_search_heal(rd, studies, progress_of, key="checkpoints", state_file=state_path)
    rd.set_damaged_parts_aside()
    rebuild_parts(rd, rebuilds, evaluate=lambda space, table: evaluate_table(space, table, failure))
    rd.ready()
    bar = Progress(budget * len(studies), sum(p["evaluations"] for p in progress_of.values()), desc="mcmc",
                   unit="eval", enabled=progress, models=[s.model for s in studies])
    pending = {s.index: Pending() for s in studies}

    def left(i: int) -> int:
        """Evaluations study i may still ask (its budget less those written and those pending)."""
        return budget - progress_of[i]["evaluations"] - pending[i].rows

    def finish(s: Study, arrow, state: dict, used: int, done: bool, table, iteration) -> None:
        """One call's rows pending; written with its state once they fill a part or the study ends."""
        q = pending[s.index]
        q.add(arrow, table, iteration)
        q.state, q.done = state, done
        _tick(bar, used, arrow)
        if done or left(s.index) <= 0 or q.due(rows):
            write(s)

    def write(s: Study) -> None:
        p, q = progress_of[s.index], pending[s.index]
        c = p["checkpoints"]
        arrow, record = q.part()
        write_record(record_path(rd.state, "mcmc", s.index, c), record)  # what was asked, the rows, then the state
        write_part(arrow, os.path.join(parts, part_name(s.index, c)))
        p.update(state=q.state, checkpoints=c + 1, evaluations=p["evaluations"] + q.rows, done=q.done)
        save_state(state_path[s.index], q.state,
                   {"checkpoints": c + 1, "evaluations": p["evaluations"], "done": q.done})
        pending[s.index] = Pending()

    def drop(i: int) -> None:
        """Study i's actor died: its pending rows are gone (the new actor evaluates them again)."""
        bar.bar.update(-pending[i].rows)
        pending[i] = Pending()

    try:
        if in_process:
            for s in studies:
                p = progress_of[s.index]
                if p["done"] or p["evaluations"] >= budget:
                    continue  # finished: no chains to rebuild
                runner = ChainRunner(s.space, seed=seeds[s.index], options=opts, state=p["state"], budget=budget,
                                     failure=failure)
                while not p["done"] and p["evaluations"] < budget:
                    finish(s, *runner.advance(every, left(s.index), run_id=rd.run_id, metadata=rd.metadata(s)))
            return
        _run_mcmc_ray(rd, studies, seeds, progress_of, left, budget, every, finish, drop)
    finally:
        bar.close()


def _run_mcmc_ray(rd, studies, seeds, progress_of, left, budget, every, finish, drop) -> None:
    import ray

    from sweep._ray import DRIVER_RESUBMITS, get_unless_lost, register_pickling

    register_pickling()
    actor_cls = ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(ChainRunner)
    opts = MCMCOptions.from_json(rd.info["options"])
    by_index = {s.index: s for s in studies}
    space_refs = {s.index: ray.put(s.space) for s in studies}
    actors: dict[int, object] = {}
    in_flight: dict[object, int] = {}
    restarts = {s.index: 0 for s in studies}

    def launch(i: int) -> None:
        p = progress_of[i]
        if p["done"] or p["evaluations"] >= budget:
            return
        if i not in actors:  # a new actor starts from the last checkpoint
            actors[i] = actor_cls.remote(space_refs[i], seed=seeds[i], options=opts, state=p["state"], budget=budget,
                                         failure=run_failure_model(rd))
        ref = actors[i].advance.remote(every, left(i), run_id=rd.run_id, metadata=rd.metadata(by_index[i]))
        in_flight[ref] = i

    for s in studies:
        launch(s.index)
    try:
        while in_flight:
            ready, _ = ray.wait(list(in_flight), num_returns=1)
            ref = ready[0]
            i = in_flight.pop(ref)
            out = get_unless_lost(ref, may_resend=restarts[i] < DRIVER_RESUBMITS)
            if out is None:
                restarts[i] += 1  # the actor died: a new one from the last checkpoint, its pending rows again
                actors.pop(i, None)
                drop(i)
                launch(i)
                continue
            finish(by_index[i], *out)
            launch(i)
    finally:
        for a in actors.values():
            ray.kill(a)


# ---- TPE -------------------------------------------------------------------------------------
def run_tpe(rd: RunDir, *, in_process: bool, progress: bool) -> None:
    """Batches of ``batch`` asks per study until ``budget`` evaluations, written a part at a time.

    Order per batch: ask, evaluate, tell (the journal); per part: its record, the part, then the
    marker with the parts written, the batches told (asks) and the journal's size. On resume the
    journal is cut back to the size in the marker (module docstring), so the batches told since are
    drawn again exactly and a part written after the marker is written again under its name. (A
    marker of an earlier plansweep without the size, whose parts were written before their batch
    was told: the journal is taken as it is and the first ask tells where the kill fell: the study
    re-asks the trials of batch b it had not been told, or draws batch b+1; _told_before.)"""
    from search._tpe import journal_size, rewind_journal

    info = rd.info
    opts = TPEOptions.from_json(info["options"])
    budget = int(info["options"]["budget"])
    studies = rd.studies()
    marker = {s.index: os.path.join(rd.state, f"tpe-{s.index:02d}.json") for s in studies}
    journal = {s.index: os.path.join(rd.state, f"tpe-{s.index:02d}.journal") for s in studies}
    prog: dict[int, dict] = {}
    told: dict[int, int | None] = {}  # the journal's size after the last written batch (None: a marker without it)
    for s in studies:
        i = s.index
        prog[i] = load_marker(marker[i], budget) or {"batches": 0, "evaluations": 0, "done": False}
        told[i] = prog[i].pop("journal_bytes", None)
        if os.path.exists(marker[i]):  # before anything is moved or written (Optuna appends to it)
            check_journal(journal[i], told=told[i], why=f"the size {marker[i]} records")
    failure = run_failure_model(rd)
    legacy = {s.index for s in studies if told[s.index] is None and os.path.exists(marker[s.index])}
    rebuilds = plan_search_heal(rd, studies, prog, key="batches", state_file=marker, lead_needs_part=bool(legacy))
    rd.set_damaged_parts_aside()
    for s in studies:  # the files pass their checks: now the journal is set back to the last told batch
        i = s.index
        if os.path.lexists(journal[i] + ".lock"):  # Optuna's own lock file, left by an earlier plansweep killed
            os.unlink(journal[i] + ".lock")  # the run directory's lock is ours: no other process uses this journal
        if told[i] is not None:
            rewind_journal(journal[i], int(told[i]), why=f"the size {marker[i]} records")
        elif not os.path.exists(marker[i]) and os.path.exists(journal[i]):
            os.unlink(journal[i])  # no batch written (a kill before the first marker): start it again
    rebuild_parts(rd, rebuilds, evaluate=lambda space, table: evaluate_table(space, table, failure))
    searchers = {s.index: make_searcher(s.space, opts, seed=study_seed(info["seed"], s.index),
                                        storage=journal[s.index], budget=budget) for s in studies}

    def save(i: int) -> None:
        write_json_atomic({**prog[i], "journal_bytes": journal_size(journal[i])}, marker[i])

    _ask_tell(rd, studies, searchers, prog, key="batches", in_process=in_process, progress=progress,
              save=save, legacy=legacy)


def _asks(p: dict, key: str) -> int:
    """Batches told and written of a study's progress ``p`` (a state written before it counted
    them wrote a part per batch: its parts)."""
    return int(p.get("asks", p[key]))


def _ask_tell(rd: RunDir, studies, searchers: dict, prog: dict, *, key: str, in_process: bool, progress: bool,
              save, legacy: set[int] = frozenset()) -> None:
    """The ask / evaluate / tell loop of the batch searchers (TPE, gradient), every study's batch
    evaluated together, until each study has spent its budget or has nothing new to ask. A batch's
    rows are pending (Pending) until they fill a part; ``prog[study]`` counts the parts written
    (under ``key``), the evaluations and the batches (asks) in them; ``save(study)`` records it
    after each part (the rows first, then the state). ``legacy``: studies whose state may lag a
    part written before its batch was told (run_tpe), checked at their first batch."""
    info = rd.info
    budget, n, size = int(info["options"]["budget"]), int(info["options"]["batch"]), part_rows(info)
    parts = rd.partition(info["searcher"])
    check_first = set(legacy)
    pending = {s.index: Pending() for s in studies}

    def rows(s, table, m, iteration: int):
        return to_arrow(table, m, run_id=rd.run_id, model=s.model.name, cluster=s.cluster.name,
                        framework=s.space.framework, iteration=iteration, grid_index=None, metadata=rd.metadata(s),
                        pool_names=pool_names(s.space), seq_len=s.model.seq_len)

    def left(i: int) -> int:
        return budget - prog[i]["evaluations"] - pending[i].rows

    def write(i: int) -> None:
        """Study i's pending rows as its next part (with their record first), then its state."""
        p, q = prog[i], pending[i]
        if q.batches:
            arrow, record = q.part()
            write_record(record_path(rd.state, info["searcher"], i, p[key]), record)
            write_part(arrow, os.path.join(parts, part_name(i, p[key])))
            p.update({"asks": _asks(p, key) + q.batches, key: p[key] + 1, "evaluations": p["evaluations"] + q.rows})
        pending[i] = Pending()
        save(i)

    rd.ready()
    bar = Progress(budget * len(studies), sum(p["evaluations"] for p in prog.values()), desc=info["searcher"],
                   unit="eval", enabled=progress, models=[s.model for s in studies])
    evaluate_batch = _batch_evaluator(in_process, run_failure_model(rd))
    try:
        while True:
            active = [s for s in studies if not prog[s.index]["done"] and left(s.index) > 0]
            if not active:
                break
            asked = {s.index: searchers[s.index].ask(min(n, left(s.index))) for s in active}
            for s in active:
                if len(asked[s.index]) == 0:  # nothing new left to ask: every valid point evaluated
                    prog[s.index]["done"] = True
                    write(s.index)
            active = [s for s in active if len(asked[s.index])]
            results = evaluate_batch([(s.space, asked[s.index]) for s in active])
            for s, m in zip(active, results, strict=True):
                i, table = s.index, asked[s.index]
                if i in check_first:
                    check_first.discard(i)
                    path = os.path.join(parts, part_name(i, prog[i][key]))
                    if os.path.exists(path) and _told_before(pq.read_table(path), rows(s, table, m, 0), prog[i], key):
                        searchers[i].tell(table, m)  # the rows of part b, untold (or partly told) when it was killed
                        save(i)
                        _tick(bar, len(table), rows(s, table, m, 0))
                        continue
                searchers[i].tell(table, m)
                arrow = rows(s, table, m, _asks(prog[i], key) + pending[i].batches)
                pending[i].add(arrow, table, _asks(prog[i], key) + pending[i].batches)
                _tick(bar, len(table), arrow)
                if left(i) <= 0 or pending[i].due(size):
                    write(i)
    finally:
        bar.close()


def _told_before(old, new, p: dict, key: str) -> bool:
    """A TPE study resumed from a marker of an earlier plansweep (parts written before their batch
    was told), whose part b (``old``, index = the parts the marker counts) is on disk, at its first
    batch (``new``): True where that batch is part b's (its trials untold, or partly), which ``p``
    then counts; False where part b was told and the batch is b+1, which ``p`` then follows."""
    common = [c for c in HETERO_STRATEGY_COLUMNS if c in old.column_names]
    old_keys, new_keys = _strategy_keys(old, common), _strategy_keys(new, common)
    if new_keys & old_keys and not new_keys <= old_keys:
        raise RuntimeError(f"part {p[key]}: the study's pending batch overlaps this part only in part")
    p[key] += 1  # part b counted (one batch per part then: its asks are its parts)
    p["evaluations"] += old.num_rows
    return new_keys <= old_keys


def _strategy_keys(arrow, columns: list[str]) -> set[tuple]:
    """The strategies of an Arrow table of results (its ``columns``), as hashable rows (a few rows: one batch)."""
    rows = arrow.select(columns).to_pylist()
    return {tuple(tuple(v) if isinstance(v, list) else v for v in r.values()) for r in rows}


def _batch_evaluator(in_process: bool, failure: FailureModel | None = None):
    if in_process:
        return lambda jobs: [evaluate_table(space, table, failure) for space, table in jobs]
    import ray

    from sweep._ray import TASK_MAX_RETRIES, register_pickling

    register_pickling()
    remote = ray.remote(num_cpus=1, max_retries=TASK_MAX_RETRIES)(evaluate_table)
    space_refs: dict[int, object] = {}

    def run(jobs):
        refs = []
        for space, table in jobs:
            key = id(space)
            if key not in space_refs:
                space_refs[key] = ray.put(space)
            refs.append(remote.remote(space_refs[key], table, failure))
        return ray.get(refs)

    return run


# ---- gradient ----------------------------------------------------------------------------------
def run_gradient(rd: RunDir, *, in_process: bool, progress: bool) -> None:
    """Steps of up to ``batch`` asks per study until ``budget`` evaluations, written a part at a time.

    Order per step: ask, evaluate (a Ray task per study, the studies' steps together), tell; per
    part: its record, the part, then the state with the parts written and the steps in them (asks;
    module docstring)."""
    info = rd.info
    opts = GradientOptions.from_json(info["options"])
    studies = rd.studies()
    path = {s.index: os.path.join(rd.state, f"gradient-{s.index:02d}.npz") for s in studies}
    searchers, prog = {}, {}
    for s in studies:
        searchers[s.index] = make_searcher(s.space, opts, seed=study_seed(info["seed"], s.index),
                                           budget=int(info["options"]["budget"]))
        _, prog[s.index] = load_checkpoint(path[s.index], "steps", int(info["options"]["budget"]),
                                           searchers[s.index])
    failure = run_failure_model(rd)
    rebuilds = plan_search_heal(rd, studies, prog, key="steps", state_file=path)
    rd.set_damaged_parts_aside()
    rebuild_parts(rd, rebuilds, evaluate=lambda space, table: evaluate_table(space, table, failure))
    _ask_tell(rd, studies, searchers, prog, key="steps", in_process=in_process, progress=progress,
              save=lambda i: save_state(path[i], searchers[i].state_dict(), prog[i]))


def run_search(rd: RunDir, *, in_process: bool, progress: bool) -> None:
    run = {"mcmc": run_mcmc, "tpe": run_tpe, "gradient": run_gradient}.get(rd.info["searcher"])
    if run is None:
        raise ValueError(f"run.json names an unknown searcher {rd.info['searcher']!r}")
    run(rd, in_process=in_process, progress=progress)
