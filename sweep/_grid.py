"""Grid sweeps: a space cut into units (integer ranges of its rows), fanned out over Ray.

A unit is ``space.rows(lo, hi)`` -> ``costmodel.evaluate`` -> the keep policy -> one Parquet
part with a fixed name (``results/searcher=grid/part-<study>-<unit>.parquet``), written
through a temporary file and a rename, so a unit run twice leaves one file. The driver keeps
a bounded number of units in flight and handles them in completion order (ray.wait); a unit
whose worker or node died is sent again. On resume the units whose part exists are skipped:
the files on disk are the truth.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator

import numpy as np

from costmodel import DEFAULT_FRAMEWORK, REASONS, InputError, evaluate
from costmodel._strategy import FRAMEWORK, FRAMEWORK_NAMES
from sweep._keep import Keep
from sweep._results import META_COUNTS, part_name, pool_names, to_arrow, write_part
from sweep._rundir import RunDir, Study
from sweep._units import UNIT_ROWS_DEFAULT, UNIT_ROWS_MAX, UNIT_ROWS_MIN  # noqa: F401 (re-exported)

SEARCHER = "grid"
# Beyond this many grid rows a sweep would take days on a small cluster: use a search.
GRID_ROWS_MAX = 10**11
PART_RE = re.compile(r"^part-(\d+)-(\d+)\.parquet$")


@dataclasses.dataclass(frozen=True, kw_only=True)
class UnitSummary:
    study: int
    unit: int
    rows: int  # valid grid rows evaluated
    kept: int  # rows written
    feasible: int
    best_tokens_per_s: float  # 0.0 when nothing feasible


def evaluate_unit(space, lo: int, hi: int, keep: Keep, *, study: int, unit: int, path: str, run_id: str,
                  metadata: dict) -> UnitSummary:
    """Evaluate grid rows [lo, hi) of ``space`` and write the kept rows to ``path``. Pure apart
    from the file, and safe to run twice (the same rows, the same file)."""
    idx, table = space.rows(lo, hi)  # (N,) int64 grid indices of the valid rows, their table
    metrics = evaluate(space.model, space.cluster, table, framework=space.framework)
    codes = table.columns.get(FRAMEWORK)  # (N,) int8 framework codes where the space has a framework dimension
    sel = keep.select(metrics, codes)  # (K,)
    counts = unit_counts(metrics, codes, space.framework)
    arrow = to_arrow(table.take(sel), metrics.take(sel), run_id=run_id, model=space.model.name,
                     cluster=space.cluster.name, framework=space.framework, iteration=unit, grid_index=idx[sel],
                     metadata={**metadata, META_COUNTS: json.dumps(counts).encode()}, pool_names=pool_names(space),
                     seq_len=space.model.seq_len)
    write_part(arrow, path)
    feasible = metrics["feasible"]
    best = float(metrics["tokens_per_s"][feasible].max()) if feasible.any() else 0.0
    return UnitSummary(study=study, unit=unit, rows=len(idx), kept=len(sel), feasible=int(feasible.sum()),
                       best_tokens_per_s=best)


def unit_counts(metrics, codes: np.ndarray | None, framework: str | None) -> dict[str, dict]:
    """Per framework of a unit's rows: {"rows", "feasible", "reasons": {reason: infeasible rows}} (written in its
    part's metadata, META_COUNTS, so the counts of a problem outlive the rows a ``best:K`` keep drops)."""
    feasible = np.asarray(metrics["feasible"], bool)  # (N,)
    reason = np.asarray(metrics["reason"])  # (N,) int codes into REASONS
    names = [framework or DEFAULT_FRAMEWORK] if codes is None else list(FRAMEWORK_NAMES)
    codes = np.zeros(len(feasible), np.int64) if codes is None else np.asarray(codes, np.int64)
    out = {}
    for c in np.unique(codes):
        mine = codes == c
        bad, n = np.unique(reason[mine & ~feasible], return_counts=True)
        out[names[int(c)]] = {
            "rows": int(mine.sum()), "feasible": int((mine & feasible).sum()),
            "reasons": {REASONS[int(r)]: int(k) for r, k in zip(bad, n, strict=True)}}
    return out


def check_unit_rows(unit_rows: int) -> int:
    if not (UNIT_ROWS_MIN <= unit_rows <= UNIT_ROWS_MAX):
        raise InputError("--unit-rows", f"an integer in [{UNIT_ROWS_MIN:.0e}, {UNIT_ROWS_MAX:.0e}]", unit_rows)
    return int(unit_rows)


def check_grid_size(space, label: str) -> None:
    """InputError unless the grid of ``space`` (the study ``label``) is small enough to sweep."""
    if int(space.size) > GRID_ROWS_MAX:
        raise InputError("space", f"at most {GRID_ROWS_MAX:.0e} grid rows for a sweep (use `plansweep search "
                         "mcmc` or `tpe` beyond)", f"{int(space.size):.3e} rows for {label}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Unit:
    study: int
    unit: int
    lo: int
    hi: int
    path: str


def plan_units(rd: RunDir, studies: list[Study], unit_rows: int) -> tuple[list[Unit], int]:
    """All units of all studies, and how many are already done (their part exists)."""
    directory = rd.partition(SEARCHER)
    done = {(int(m.group(1)), int(m.group(2))) for m in map(PART_RE.match, os.listdir(directory)) if m}
    todo: list[Unit] = []
    n_done = 0
    for s in studies:
        size = int(s.space.size)
        for u in range(-(-size // unit_rows)):
            if (s.index, u) in done:
                n_done += 1
                continue
            lo, hi = u * unit_rows, min((u + 1) * unit_rows, size)
            todo.append(Unit(study=s.index, unit=u, lo=lo, hi=hi, path=os.path.join(directory, part_name(s.index, u))))
    return todo, n_done


def terminal_shape(fp) -> tuple[int | None, int | None]:
    """(columns, rows) of the terminal ``fp`` writes to, None for a size it cannot tell or reports
    as 0 (as under `script`, in CI and in some IDEs). tqdm reads a 0 x 0 terminal as -1 columns and
    -1 rows and then draws nothing; with None it draws an unbounded line and assumes 20 rows."""
    try:
        cols, rows = os.get_terminal_size(fp.fileno())
    except (AttributeError, OSError, ValueError):
        return None, None
    return (cols - 1 if cols > 1 else None), (rows if rows > 0 else None)


class Progress:
    """tqdm on stderr: rows/s, the feasible points seen (searches), the best tokens/s so far, time left."""

    def __init__(self, total: int, done: int, *, desc: str, unit: str, best: float = 0.0, enabled: bool = True,
                 models=()) -> None:
        from tqdm import tqdm

        # the best throughput's unit: samples/s when every study's model is an MLP
        self.rate_unit = "samples/s" if models and all(m.kind == "mlp" for m in models) else "tokens/s"
        self.bar = tqdm(total=total, initial=done, unit=unit, file=sys.stderr, disable=not enabled,
                        dynamic_ncols=True, mininterval=0.5, desc=desc)
        if enabled:  # the terminal's size as terminal_shape tells it, re-read at every refresh
            self.bar.dynamic_ncols = terminal_shape
            self.bar.ncols, self.bar.nrows = terminal_shape(sys.stderr)
            self.bar.refresh()
        self.rows = 0
        self.feasible: int | None = None
        self.best = best
        self.t0 = time.perf_counter()
        self.problems: tuple[int, int] | None = None  # (done, total) where the run counts its problems

    def set_problems(self, done: int, total: int) -> None:
        """The problems (study x framework) whose every unit is done, of ``total`` (shown beside the units)."""
        self.problems = (done, total)

    def update(self, units: int, rows: int, best: float, feasible: int | None = None) -> None:
        """``units`` more on the bar, ``rows`` more evaluations, the best tokens/s among them;
        ``feasible`` (a search's batch) of them feasible: the searchers ask distinct points, so
        the sum is the feasible points seen."""
        self.rows += rows
        self.best = max(self.best, best)
        seen = ""
        if feasible is not None:
            self.feasible = (self.feasible or 0) + feasible
            seen = f"{self.feasible:,} feasible seen, "
        rate = self.rows / max(time.perf_counter() - self.t0, 1e-9)
        probs = f"{self.problems[0]:,}/{self.problems[1]:,} problems done, " if self.problems else ""
        self.bar.set_postfix_str(f"{probs}{rate:,.0f} rows/s, {seen}best {self.best:,.0f} {self.rate_unit}", refresh=False)
        self.bar.update(units)

    def close(self) -> None:
        self.bar.close()


def _run_local(units: list[Unit], spaces: dict[int, object], keep: Keep, rd: RunDir,
               metadata: dict[int, dict]) -> Iterator[UnitSummary]:
    for u in units:
        yield evaluate_unit(spaces[u.study], u.lo, u.hi, keep, study=u.study, unit=u.unit, path=u.path,
                            run_id=rd.run_id, metadata=metadata[u.study])


def _warm_worker(*spaces) -> None:
    for space in spaces:
        space.rows(0, 1)


def _run_ray(units: list[Unit], spaces: dict[int, object], keep: Keep, rd: RunDir, metadata: dict[int, dict],
             max_in_flight: int) -> Iterator[UnitSummary]:
    import ray

    from sweep._ray import DRIVER_RESUBMITS, TASK_MAX_RETRIES, get_unless_lost, register_pickling, stops_with_driver

    register_pickling()

    remote = ray.remote(num_cpus=1, max_retries=TASK_MAX_RETRIES)(evaluate_unit)
    space_refs = {k: ray.put(v) for k, v in spaces.items()}  # each space (model, cluster) shipped once
    keep_ref = ray.put(keep)
    # Warm the workers first: one task per CPU imports the cost model and builds each space's
    # lookup table (about a second per worker for a 10^7-point grid), all at once, so that
    # the first units do not each pay it in turn.
    warm = ray.remote(num_cpus=1)(_warm_worker)
    ray.get([warm.remote(*space_refs.values()) for _ in range(min(max_in_flight, len(units)))])
    pending = list(reversed(units))  # pop() from the end: units go out in order
    in_flight: dict[ray.ObjectRef, tuple[Unit, int]] = {}

    def submit(u: Unit, attempt: int) -> None:
        ref = remote.remote(space_refs[u.study], u.lo, u.hi, keep_ref, study=u.study, unit=u.unit, path=u.path,
                            run_id=rd.run_id, metadata=metadata[u.study])
        in_flight[ref] = (u, attempt)

    try:
        while pending or in_flight:
            while pending and len(in_flight) < max_in_flight:
                submit(pending.pop(), 0)
            ready, _ = ray.wait(list(in_flight), num_returns=1)
            for ref in ready:
                u, attempt = in_flight.pop(ref)
                summary = get_unless_lost(ref, may_resend=attempt < DRIVER_RESUBMITS)
                if summary is None:
                    submit(u, attempt + 1)  # safe: the part has a fixed name
                    continue
                yield summary
    finally:
        if not stops_with_driver():  # on a cluster: the units in flight are ours to stop
            for ref in in_flight:
                ray.cancel(ref, force=True)


def run_grid(rd: RunDir, *, in_process: bool, max_in_flight: int | None, progress: bool = True,
             on_unit: Callable[[UnitSummary], None] | None = None) -> int:
    """Run (or continue) the grid sweep described by ``rd``'s run.json. Returns the number of
    units evaluated now."""
    opts = rd.info["options"]
    keep = Keep.parse(opts["keep"])
    unit_rows = check_unit_rows(int(opts["unit_rows"]))
    studies = rd.studies()
    for s in studies:
        check_grid_size(s.space, s.label)
    rd.set_damaged_parts_aside()  # their units are then planned again
    units, n_done = plan_units(rd, studies, unit_rows)
    spaces = {s.index: s.space for s in studies}
    metadata = {s.index: rd.metadata(s) for s in studies}
    best0 = 0.0
    if n_done:
        import pyarrow as pa
        import pyarrow.compute as pc

        from sweep._runview import open_run

        try:
            done = open_run(rd.path).scan(["tokens_per_s"], pc.field("feasible") & (pc.field("searcher") == SEARCHER))
            best0 = float(pc.max(done["tokens_per_s"]).as_py() or 0.0)
        except (pa.ArrowException, OSError):  # a part whose pages do not read: found by the summary (execute)
            best0 = 0.0
    rd.ready()
    bar = Progress(n_done + len(units), n_done, desc="sweep", unit="unit", best=best0, enabled=progress,
                   models=[s.model for s in studies])
    # A study's problems (its frameworks) are done when its last unit is: units left per study.
    left = {s.index: 0 for s in studies}
    for u in units:
        left[u.study] += 1
    per = {s.index: len(getattr(s.space, "frameworks", ())) or 1 for s in studies}
    total = sum(per.values())
    bar.set_problems(sum(per[i] for i, n in left.items() if n == 0), total)
    try:
        if in_process:
            stream = _run_local(units, spaces, keep, rd, metadata)
        else:
            from sweep._ray import cluster_cpus

            limit = max_in_flight or 2 * cluster_cpus()
            stream = _run_ray(units, spaces, keep, rd, metadata, limit)
        n = 0
        for summary in stream:
            left[summary.study] -= 1
            if left[summary.study] == 0:
                bar.set_problems(bar.problems[0] + per[summary.study], total)
            bar.update(1, summary.rows, summary.best_tokens_per_s)
            n += 1
            if on_unit is not None:
                on_unit(summary)
    finally:
        bar.close()
    missing = [u for u in units if not os.path.exists(u.path)]
    assert not missing, f"units reported done without their part: {missing[:3]}"
    return n

