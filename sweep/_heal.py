"""Healing a run directory on resume: damaged parts aside, their rows recomputed.

    RUN_DIR/quarantine/...              a damaged part, moved here under its path in RUN_DIR
                                        (never deleted, never overwritten: a taken name gets .1, .2 ...)
    RUN_DIR/state/asked/<searcher>/part-SS-KKKKKK.npz
                                        a search part's record: the strategies asked (the
                                        StrategyTable's columns) and each row's iteration,
                                        written before the part (sweep._checks.save_npz)

A grid unit whose part is absent is evaluated again (sweep._grid.plan_units). A search part's
rows are a pure function of the strategies asked (costmodel.evaluate, plus the goodput objective
where the run ranks by it), so a part moved aside is rebuilt from its record: the same rows the
search wrote. A part missing with no record is reported in one line naming both.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

import numpy as np
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from costmodel import InputError, Metrics, StrategyTable
from costmodel._strategy import StageColumns
from sweep._checks import PART_RE, Shown, fsync_dirs, load_npz, save_npz, unreadable_parts
from sweep._results import part_name, pool_names, to_arrow, write_part

QUARANTINE = "quarantine"
ASKED = "asked"
COLUMN_KEY, STAGE_KEY, ITERATION = "c.", "s.", "iteration"
RECORD = "a record of a search part's strategies (npz of plain arrays)"


def quarantine(run_dir: str, path: str) -> str:
    """Move ``path`` (inside ``run_dir``) to RUN_DIR/quarantine/<its relative path>; a name already
    taken there gets a suffix .1, .2 ... Returns where it went."""
    rel = os.path.relpath(path, run_dir)
    dest = os.path.join(run_dir, QUARANTINE, rel)
    try:
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        base, k = dest, 0
        while os.path.lexists(dest):  # the run's lock keeps other writers of this run out
            k += 1
            dest = f"{base}.{k}"
        os.rename(path, dest)
    except OSError as exc:
        raise InputError(path, f"a damaged part that can be moved to {QUARANTINE}/", Shown(
            f"{exc.strerror or exc} (the run directory must be writable to resume)")) from None
    fsync_dirs([os.path.dirname(dest), os.path.dirname(path)])
    return dest


def record_path(state_dir: str, searcher: str, study: int, index: int) -> str:
    return os.path.join(state_dir, ASKED, searcher, part_name(study, index).replace(".parquet", ".npz"))


def record_arrays(table: StrategyTable, iteration: np.ndarray) -> dict[str, np.ndarray]:
    """A part's strategies as plain arrays: row columns (N,), per-stage columns as stored (S, N),
    and each row's iteration (N,)."""
    out = {COLUMN_KEY + k: np.asarray(v) for k, v in table.columns.items()}
    out.update({STAGE_KEY + k: np.asarray(table.stages.raw(k)) for k in table.stages})
    out[ITERATION] = np.broadcast_to(np.asarray(iteration, dtype=np.int64), (len(table),)).copy()
    return out


def write_record(path: str, arrays: Mapping[str, np.ndarray]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    save_npz(path, arrays)


def read_record(path: str) -> tuple[StrategyTable, np.ndarray]:
    """(the strategies, (N,) iterations) of a record; InputError naming it where it is damaged."""
    arrays = load_npz(path, RECORD)
    cols = {k[len(COLUMN_KEY):]: v for k, v in arrays.items() if k.startswith(COLUMN_KEY)}
    stages = {k[len(STAGE_KEY):]: v for k, v in arrays.items() if k.startswith(STAGE_KEY)}
    iteration = arrays.get(ITERATION)
    if iteration is None or "pp" not in cols or iteration.ndim != 1:
        raise InputError(path, RECORD, Shown("no pp column or no iterations"))
    n = len(iteration)
    if any(v.ndim != 1 or len(v) != n for v in cols.values()) or any(v.ndim != 2 or v.shape[1] != n
                                                                      for v in stages.values()):
        raise InputError(path, RECORD + f" of {n} rows in every column", Shown("columns of other lengths"))
    return StrategyTable(cols, StageColumns(major=stages)), iteration


def rebuild_part(record: str, part: str, *, study, run_id: str, metadata: dict,
                 evaluate: Callable[[object, StrategyTable], Metrics]) -> int:
    """Part ``part`` again from its record: each iteration's strategies evaluated as the search
    evaluated them (one call per step), the rows in the record's order. Returns its rows."""
    table, iteration = read_record(record)
    n = len(iteration)
    bounds = np.r_[np.flatnonzero(np.r_[True, iteration[1:] != iteration[:-1]]) if n else [], n].astype(np.int64)
    blocks = [evaluate(study.space, table.take(np.arange(lo, hi)))  # one block per step, as asked
              for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]
    if blocks:
        metrics = Metrics({k: np.concatenate([b[k] for b in blocks]) for k in blocks[0]})
    else:
        metrics = evaluate(study.space, table)
    arrow = to_arrow(table, metrics, run_id=run_id, model=study.model.name, cluster=study.cluster.name,
                     framework=study.space.framework, iteration=iteration, grid_index=None, metadata=metadata,
                     pool_names=pool_names(study.space), seq_len=study.model.seq_len)
    write_part(arrow, part)
    return len(table)


def quarantined(run_dir: str, part: str) -> list[str]:
    """The copies of ``part`` in RUN_DIR/quarantine (its name, and the name with a suffix)."""
    dest = os.path.join(run_dir, QUARANTINE, os.path.relpath(part, run_dir))
    d, name = os.path.split(dest)
    if not os.path.isdir(d):
        return []
    return sorted(os.path.join(d, n) for n in os.listdir(d) if n == name or n.startswith(name + "."))


def plan_search_heal(rd, studies, progress: Mapping[int, Mapping], *, key: str, state_file: Mapping[int, str],
                     lead_needs_part: bool = False) -> list[tuple[object, str, str]]:
    """Before a search continues, with nothing moved or written yet (a resume refused leaves the
    directory as it was): every part read whole (one whose pages do not read joins ``rd.damaged``,
    to be moved to quarantine/); every part the state counts (``progress[study][key]``, with its
    ``evaluations``) sound, or its record readable to rebuild it from; the part the state may lag by
    (index = the count, written before a kill) rebuilt where its record is. ``lead_needs_part`` (TPE):
    that part decides whether its batch was told, so a lead part damaged or moved aside with no record
    is refused. Refused in one line: a part missing with no record (or a damaged record), a part past
    the state, evaluations that are not the parts' rows. Returns the parts to rebuild once the damaged
    ones are aside (rebuild_parts): (study, record, part)."""
    searcher = rd.info["searcher"]
    directory = os.path.join(rd.results, f"searcher={searcher}")
    # A search's parts hold its evaluations (the budget's rows, not a grid's millions): each is read
    # whole, so that a part whose footer reads but whose pages do not is rebuilt like any other.
    fs = pafs.LocalFileSystem()
    damaged = {os.path.normpath(p): why for p, why in rd.damaged.items()}
    names = sorted(n for n in (os.listdir(directory) if os.path.isdir(directory) else []) if PART_RE.match(n))
    readable = [p for p in (os.path.join(directory, n) for n in names) if os.path.normpath(p) not in damaged]
    rd.damaged = {**rd.damaged, **unreadable_parts(fs, readable)}
    damaged = {os.path.normpath(p) for p in rd.damaged}
    present = {(int(m.group(1)), int(m.group(2))) for m in map(PART_RE.match, names)
               if os.path.normpath(os.path.join(directory, m.group(0))) not in damaged}
    rebuilds = []
    for s in studies:
        i, count, evals = s.index, int(progress[s.index][key]), int(progress[s.index]["evaluations"])
        rows = 0
        for k in range(count + 1):
            part = os.path.join(directory, part_name(i, k))
            record = record_path(rd.state, searcher, i, k)
            if (i, k) in present:
                n = pq.read_metadata(part).num_rows if k < count else 0
            elif os.path.exists(record):
                n = len(read_record(record)[1])  # a damaged record is refused here, before anything moves
                rebuilds.append((s, record, part))
            elif k < count or (lead_needs_part and (os.path.normpath(part) in damaged or quarantined(rd.path, part))):
                why = next((w for p, w in rd.damaged.items() if os.path.normpath(p) == os.path.normpath(part)), None)
                raise InputError(part, "a part of this run, or its record to recompute it from", Shown(
                    f"neither: the part is {'absent' if why is None else 'damaged (' + why + ')'} and {record} "
                    "is absent"))
            else:
                n = 0
            rows += n if k < count else 0
        beyond = sorted(k for j, k in present if j == i and k > count)
        if beyond:
            raise InputError(state_file[i], f"{key} counting the parts written (at least {beyond[-1]}: part "
                             f"{beyond[-1]} of study {i} is in {directory})", Shown(f"{key} {count}"))
        if rows != evals:
            raise InputError(state_file[i], f"evaluations as the rows of its {count} parts ({rows:,})",
                             Shown(f"{evals:,}"))
    return rebuilds


def rebuild_parts(rd, rebuilds: list[tuple[object, str, str]], *,
                  evaluate: Callable[[object, StrategyTable], Metrics]) -> None:
    """The parts plan_search_heal found missing, rebuilt from their records (the damaged ones now aside)."""
    if rebuilds:
        rd.partition(rd.info["searcher"])
    for study, record, part in rebuilds:
        rebuild_part(record, part, study=study, run_id=rd.run_id, metadata=rd.metadata(study), evaluate=evaluate)
