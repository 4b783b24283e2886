"""Checks of what a run directory holds, before anything in it is used.

    run.json            check_run_info (the engine's reading: every field it uses, types and
                        ranges) or check_view_info (show and plot: the versions, the fields they use
                        where present)
    results/ parts      check_parts: every Parquet part's footer and schema (no data page is read),
                        against the run's result_schema; the damaged ones are named, not read
    state/*.npz         load_npz: a zip of plain arrays whose digest matches its content;
                        check_state against a fresh searcher's state_dict, check_progress
    state/tpe-*.json    load_marker

Every failure is costmodel.InputError(file, what was expected, what arrived): the command line
prints it as one line and exits 2.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from costmodel import InputError

SEARCHERS = ("grid", "mcmc", "tpe", "gradient")
OBJECTIVES = ("tokens_per_s", "goodput")
DIGEST = "digest"  # the npz entry holding the SHA-256 of the others (save_npz)
SHOWN_CHARS = 120  # what arrived, as printed: at most this many characters
PART_RE = re.compile(r"^part-(\d+)-(\d+)\.parquet$")
PARALLEL_FROM = 16  # parts from which they are read by a pool of threads (I/O bound)


class Shown(str):
    """Text printed as it is in an InputError's "got" (not quoted as a repr)."""

    def __repr__(self) -> str:
        return str(self)


def shown(value: object) -> object:
    """``value`` for an InputError's "got": itself, or a one-line, shortened repr."""
    text = " ".join(repr(value).split())
    return value if len(text) <= SHOWN_CHARS and "\n" not in repr(value) else Shown(text[:SHOWN_CHARS] + "...")


def said(exc: BaseException) -> Shown:
    """An exception as one short line: its type and first words."""
    text = " ".join(str(exc).split()) or "(no message)"
    return Shown(f"{type(exc).__name__}: {text[:SHOWN_CHARS]}")


# ---- JSON files ------------------------------------------------------------------------------
def read_json(path: str, expected: str, *, fs: pafs.FileSystem | None = None) -> object:
    """The JSON document in ``path`` (``fs``: a pyarrow filesystem, else local)."""
    try:
        if fs is None:
            with open(path, "rb") as f:
                data = f.read()
        else:
            with fs.open_input_stream(path) as f:
                data = f.read()
    except OSError as exc:
        raise InputError(path, expected, Shown(f"an unreadable file ({exc.strerror or said(exc)})")) from None
    try:
        return json.loads(data)
    except UnicodeDecodeError:
        raise InputError(path, expected, Shown(f"binary bytes ({len(data):,} bytes that are not UTF-8 text)")) from None
    except (ValueError, RecursionError) as exc:
        raise InputError(path, expected, Shown(f"text that is not JSON ({said(exc)})")) from None


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


KINDS = {str: "a string", dict: "an object", list: "a list", bool: "true or false", int: "an integer",
         float: "a number", type(None): "null"}


def _typed(value, kinds: tuple[type, ...]) -> bool:
    return any(_is_int(value) if k is int else isinstance(value, k) for k in kinds)


def need(d: Mapping, key: str, kinds: tuple[type, ...], path: str, where: str = "", *, optional: bool = False):
    """``d[key]`` if it is one of ``kinds`` (int excludes bool), else InputError naming ``path`` and the key."""
    name = f"{where}{key}"
    if key not in d:
        if optional:
            return None
        raise InputError(path, f"an entry {name!r}", Shown("none"))
    value = d[key]
    if not _typed(value, kinds):
        raise InputError(path, f"{name} as " + " or ".join(KINDS[k] for k in kinds), shown(value))
    return value


def need_int(d: Mapping, key: str, path: str, where: str = "", *, low: int = 0, high: int | None = None) -> int:
    value = need(d, key, (int,), path, where)
    if value < low or (high is not None and value > high):
        span = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise InputError(path, f"{where}{key} as an integer {span}", value)
    return value


def _rewrapped(exc: InputError, path: str, where: str) -> InputError:
    return InputError(path, f"{where}{exc.argument}: {exc.expected}", shown(exc.got))


def check_run_info(info: object, path: str) -> dict:
    """run.json as the engine reads it (resume): every field it uses, with its type and range.
    The studies' specs and spaces are parsed later (RunDir.studies), named by the same file."""
    from sweep._units import UNIT_ROWS_MAX, UNIT_ROWS_MIN

    if not isinstance(info, dict):
        raise InputError(path, "a JSON object", Shown(f"a JSON {type(info).__name__}"))
    need(info, "run_id", (str,), path)
    command = need(info, "command", (str,), path)
    searcher = need(info, "searcher", (str,), path)
    if searcher not in SEARCHERS:
        raise InputError(path, "searcher as one of " + ", ".join(SEARCHERS), shown(searcher))
    wanted = "sweep" if searcher == "grid" else f"search {searcher}"
    if command != wanted:
        raise InputError(path, f"command as {wanted!r} (the command that runs searcher {searcher!r})", shown(command))
    need(info, "seed", (type(None),) if searcher == "grid" else (int,), path)
    need(info, "created", (str,), path, optional=True)
    argv = need(info, "argv", (list,), path, optional=True)
    if argv is not None and not all(isinstance(a, str) for a in argv):
        raise InputError(path, "argv as a list of strings", shown(argv))
    versions = need(info, "versions", (dict,), path)
    need(versions, "plansweep", (str,), path, "versions.")
    need(versions, "cost_model", (str, int), path, "versions.")
    need(versions, "run_format", (int,), path, "versions.")
    studies = need(info, "studies", (list,), path)
    if not studies:
        raise InputError(path, "studies as a list of at least one study", shown(studies))
    for i, s in enumerate(studies):
        if not isinstance(s, dict):
            raise InputError(path, f"studies[{i}] as an object", shown(s))
        for key in ("model", "cluster", "space"):
            need(s, key, (dict,), path, f"studies[{i}].")
    _check_costing(info, path)
    kinds = {s["space"].get("kind") for s in studies}
    if len(kinds) > 1:
        raise InputError(path, "studies all on one kind of space", shown(sorted(map(str, kinds))))
    opts = need(info, "options", (dict,), path)
    if searcher == "grid":
        need_int(opts, "unit_rows", path, "options.", low=UNIT_ROWS_MIN, high=UNIT_ROWS_MAX)
        from sweep._keep import Keep

        try:
            Keep.parse(need(opts, "keep", (str,), path, "options."))
        except InputError as exc:
            raise InputError(path, f"options.keep as {exc.expected}", shown(exc.got)) from None
    else:
        from search._base import MAX_BUDGET

        need_int(opts, "budget", path, "options.", low=1, high=MAX_BUDGET)
        need_int(opts, "checkpoint_every" if searcher == "mcmc" else "batch", path, "options.", low=1)
        if "part_rows" in opts:  # recorded since a part holds several checkpoints' rows; a part per checkpoint before
            need_int(opts, "part_rows", path, "options.", low=1)
        from search._options import GradientOptions, MCMCOptions, TPEOptions

        cls = {"mcmc": MCMCOptions, "tpe": TPEOptions, "gradient": GradientOptions}[searcher]
        try:
            cls.from_json(opts)
        except InputError as exc:
            raise _rewrapped(exc, path, "options.") from None
    _check_objective(opts, path)
    return info


def _check_costing(info: Mapping, path: str) -> None:
    """run.json's costing where it has one (a sweep's: the training tokens, the prices given as
    --gpu-hour-usd's words or null), checked as the flags are."""
    from costmodel._training_cost import gpu_prices, train_tokens

    costing = need(info, "costing", (dict,), path, optional=True)
    if costing is None:
        return
    tokens = need(costing, "train_tokens", (int, float), path, "costing.", optional=True)
    prices = need(costing, "gpu_hour_usd", (str, type(None)), path, "costing.", optional=True)
    for key, check, value in (("train_tokens", train_tokens, tokens), ("gpu_hour_usd", gpu_prices, prices)):
        try:
            check(value)
        except InputError as exc:
            raise InputError(path, f"costing.{key} as {exc.expected}", shown(exc.got)) from None


def _check_objective(opts: Mapping, path: str) -> None:
    objective = need(opts, "objective", (str,), path, "options.", optional=True)
    if objective is None:
        return
    if objective not in OBJECTIVES:
        raise InputError(path, "options.objective as one of " + ", ".join(OBJECTIVES), shown(objective))
    if objective == "goodput":
        from costmodel import FailureModel

        failure = need(opts, "failure", (dict,), path, "options.")
        try:
            FailureModel(**failure)
        except InputError as exc:
            raise _rewrapped(exc, path, "options.") from None
        except TypeError as exc:  # a key FailureModel does not have
            raise InputError(path, "options.failure with FailureModel's fields", said(exc)) from None


def check_view_info(info: object, path: str) -> dict:
    """run.json as show and plot read it: an object with its versions (what tells the run format),
    the other fields they use of their types where present (a run written by other tools may hold
    less)."""
    if not isinstance(info, dict):
        raise InputError(path, "a JSON object", Shown(f"a JSON {type(info).__name__}"))
    versions = need(info, "versions", (dict,), path)
    need(versions, "run_format", (int,), path, "versions.")
    for key in ("options", "model", "cluster"):
        need(info, key, (dict,), path, optional=True)
    _check_costing(info, path)
    studies = need(info, "studies", (list,), path, optional=True) or []
    for i, s in enumerate(studies):
        if not isinstance(s, dict):
            raise InputError(path, f"studies[{i}] as an object", shown(s))
        for key in ("model", "cluster", "space"):
            need(s, key, (dict,), path, f"studies[{i}].", optional=True)
    opts = info.get("options") or {}
    need(opts, "keep", (str,), path, "options.", optional=True)
    _check_objective(opts, path)
    return info


# ---- Parquet parts ---------------------------------------------------------------------------
def _schema_difference(got: pa.Schema, want: pa.Schema) -> str | None:
    """None where ``got`` has ``want``'s columns and types (metadata aside), else the first difference."""
    if got.remove_metadata().equals(want.remove_metadata()):
        return None
    for i, f in enumerate(want):
        if i >= len(got) or got.field(i).name != f.name:
            return f"no column {f.name!r} where the run's schema has it (position {i})"
        if not got.field(i).type.equals(f.type):
            return f"column {f.name!r} of type {got.field(i).type} (the run's schema: {f.type})"
    return f"{len(got) - len(want)} columns more than the run's schema"


def part_problem(path: str, expected: tuple[pa.Schema, ...], fs: pafs.FileSystem) -> tuple[int, str | None]:
    """(rows, None) for a part whose footer reads and whose schema is one of ``expected``,
    else (0, why it is damaged). Reads the footer only."""
    try:
        if fs.get_file_info(path).size == 0:
            return 0, "an empty file"
        with fs.open_input_file(path) as f:
            meta = pq.read_metadata(f)
            schema = meta.schema.to_arrow_schema()
            rows = meta.num_rows
    except (pa.ArrowException, OSError, ValueError, IndexError, KeyError) as exc:
        text = " ".join(str(exc).split())
        if "magic bytes" in text or "file size" in text.lower():
            return 0, "no Parquet footer: cut short, or not Parquet"
        return 0, f"an unreadable footer ({said(exc)})"
    diffs = [_schema_difference(schema, want) for want in expected]
    if all(diffs):
        return 0, f"a schema that is not the run's: {diffs[0]}"
    return int(rows), None


def list_parts(fs: pafs.FileSystem, results: str) -> list[str]:
    """Every file under ``results`` a dataset reads (names and folders not starting with '.' or '_'), sorted."""
    try:
        infos = fs.get_file_info(pafs.FileSelector(results, recursive=True, allow_not_found=True))
    except OSError:
        return []
    out = []
    for info in infos:
        rel = info.path[len(results):].lstrip("/")
        if info.type == pafs.FileType.File and not any(w[:1] in (".", "_") for w in rel.split("/")):
            out.append(info.path)
    return sorted(out)


def check_parts(fs: pafs.FileSystem, results: str, expected: tuple[pa.Schema, ...]
                ) -> tuple[dict[str, int], dict[str, str]]:
    """({path: rows} of the sound parts, {path: why} of the damaged ones) under ``results``."""
    paths = list_parts(fs, results)
    if len(paths) >= PARALLEL_FROM:
        with ThreadPoolExecutor(max_workers=8) as pool:
            found = list(pool.map(lambda p: part_problem(p, expected, fs), paths))
    else:
        found = [part_problem(p, expected, fs) for p in paths]
    sound = {p: rows for p, (rows, why) in zip(paths, found, strict=True) if why is None}
    damaged = {p: why for p, (_, why) in zip(paths, found, strict=True) if why is not None}
    return sound, damaged


def unreadable_parts(fs: pafs.FileSystem, paths: Iterable[str]) -> dict[str, str]:
    """{path: why} of the parts among ``paths`` whose pages do not read (every column decoded).
    Reads them whole: for when a read has failed and the part at fault must be found."""
    def why(path: str) -> str | None:
        try:
            with fs.open_input_file(path) as f:
                for _ in pq.ParquetFile(f).iter_batches(batch_size=65_536):
                    pass
        except (pa.ArrowException, OSError, ValueError, IndexError, KeyError) as exc:
            return f"pages that do not read ({said(exc)})"
        return None

    paths = list(paths)
    if len(paths) >= PARALLEL_FROM:
        with ThreadPoolExecutor(max_workers=8) as pool:
            found = list(pool.map(why, paths))
    else:
        found = [why(p) for p in paths]
    return {p: w for p, w in zip(paths, found, strict=True) if w is not None}


def skipped_line(damaged: Mapping[str, str], run_dir: str, base: str, *, shown_parts: int = 3) -> str:
    """One line naming the damaged parts show / plot left out, and what heals them."""
    names = [f"{p[len(base):].lstrip('/') if p.startswith(base) else p} ({why})" for p, why in sorted(damaged.items())]
    more = f" and {len(names) - shown_parts} more" if len(names) > shown_parts else ""
    n = len(damaged)
    them = "them" if n != 1 else "it"
    return (f"skipped {n} damaged Parquet part{'s' if n != 1 else ''}: " + "; ".join(names[:shown_parts]) + more
            + f" (`plansweep resume {run_dir}` moves {them} to quarantine/ and recomputes the rows)")


# ---- npz checkpoints and records -------------------------------------------------------------
def digest(arrays: Mapping[str, np.ndarray]) -> str:
    """SHA-256 over every entry but DIGEST: its name, dtype, shape and bytes, in name order."""
    h = hashlib.sha256()
    for k in sorted(arrays):
        if k == DIGEST:
            continue
        a = np.ascontiguousarray(arrays[k])
        h.update(f"{k}\0{a.dtype.str}\0{a.shape}\0".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def save_npz(path: str, arrays: Mapping[str, np.ndarray]) -> None:
    """Plain arrays and their digest, whole or not at all (no pickles: object arrays are refused)."""
    from costmodel._files import replaced_atomically

    arrays = {k: np.asarray(v) for k, v in arrays.items()}
    for k, v in arrays.items():
        if v.dtype == object:
            raise TypeError(f"npz entry {k!r} is not a plain array ({v.dtype})")
    arrays[DIGEST] = np.asarray(digest(arrays))
    with replaced_atomically(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)


def read_npz(path: str, expected: str) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    """(the arrays of the npz ``path`` but DIGEST, read whole; its DIGEST entry or None)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except AttributeError:  # np.load gave a single .npy array, not a zip of them (no context manager)
        raise InputError(path, expected, Shown("a single .npy array, not an npz of named arrays")) from None
    except OSError as exc:
        raise InputError(path, expected, Shown(f"an unreadable file ({exc.strerror or said(exc)})")) from None
    except Exception as exc:  # noqa: BLE001  a damaged zip or .npy header raises what its parser meets
        text = "pickled or foreign bytes" if "pickle" in str(exc) else said(exc)
        raise InputError(path, expected, Shown(f"a damaged file ({text})")) from None
    return arrays, arrays.pop(DIGEST, None)


def check_digest(path: str, expected: str, arrays: Mapping[str, np.ndarray], recorded: np.ndarray | None, *,
                 require: bool = False) -> None:
    """``recorded`` (read_npz) is the digest of ``arrays``; files written before digests were
    recorded have none (refused with ``require``)."""
    if recorded is None:
        if require:
            raise InputError(path, expected + " with its digest", Shown("none"))
        return
    if recorded.dtype.kind != "U" or recorded.ndim != 0 or str(recorded) != digest(arrays):
        raise InputError(path, expected + " whose content matches its digest",
                         Shown("content changed since it was written (digest mismatch)"))


def load_npz(path: str, expected: str) -> dict[str, np.ndarray]:
    """The arrays of an npz that must carry its digest (read_npz, check_digest)."""
    arrays, recorded = read_npz(path, expected)
    check_digest(path, expected, arrays, recorded, require=True)
    return arrays


KIND_NAMES = {"i": "integers", "f": "floats", "b": "bools", "U": "text"}


def _kind(a: np.ndarray) -> str:
    return {"u": "i"}.get(a.dtype.kind, a.dtype.kind)


def check_state(path: str, state: Mapping[str, np.ndarray], reference: Mapping[str, object]) -> None:
    """A searcher's state as read from ``path`` against ``reference`` (a fresh searcher's
    state_dict): no unknown entries; each entry of the same kind (integers, floats, bools, text)
    and the same shape (entries that start empty, memos: any number of rows)."""
    unknown = sorted(set(state) - set(reference), key=str)
    if unknown:
        raise InputError(path, "searcher entries among " + ", ".join(sorted(reference)), Shown(unknown[0]))
    for k in sorted(state):
        a, r = np.asarray(state[k]), np.asarray(reference[k])
        grows = r.ndim > 0 and r.shape[0] == 0  # a memo: rows of any number and width (its keys' form)
        if _kind(a) != _kind(r) or (a.ndim < 1 if grows else a.shape != r.shape):
            shape = "(N, ...)" if grows else r.shape
            raise InputError(path, f"entry {k!r} as {KIND_NAMES.get(_kind(r), r.dtype.kind)} of shape {shape}",
                             Shown(f"{a.dtype} of shape {a.shape}"))


COUNTER_MAX = 2**31  # a searcher's counters (steps, restarts, points seen) stay far below this


def check_counters(path: str, state: Mapping[str, np.ndarray]) -> None:
    """A checkpoint without a digest (older files): its integer scalars are counters in [0, COUNTER_MAX)."""
    for k in sorted(state):
        a = np.asarray(state[k])
        if a.ndim == 0 and _kind(a) == "i" and not 0 <= int(a) < COUNTER_MAX:
            raise InputError(path, f"entry {k!r} as a count in [0, {COUNTER_MAX:,})", Shown(str(int(a))))


def check_progress(path: str, engine: Mapping[str, np.ndarray], key: str, budget: int) -> dict:
    """The engine entries of a checkpoint: ``key`` (parts written) >= 0, evaluations in [0, budget], done;
    asks (the batches in those parts, >= the parts) where the checkpoint has it (written since parts hold
    several batches)."""
    plain = {}
    for k, kinds in ((key, "i"), ("evaluations", "i"), ("done", "b"), ("asks", "i")):
        if k == "asks" and k not in engine:
            continue
        if k not in engine:
            raise InputError(path, f"an engine entry {k!r}", Shown("none"))
        a = np.asarray(engine[k])
        if a.ndim != 0 or _kind(a) != kinds:
            raise InputError(path, f"{k} as one {'integer' if kinds == 'i' else 'bool'}",
                             Shown(f"{a.dtype} array of shape {a.shape}"))
        plain[k] = a.item()
    if plain[key] < 0 or not 0 <= plain["evaluations"] <= budget:
        raise InputError(path, f"{key} >= 0 and evaluations in [0, {budget}]",
                         Shown(f"{key} {plain[key]}, evaluations {plain['evaluations']}"))
    out = {key: int(plain[key]), "evaluations": int(plain["evaluations"]), "done": bool(plain["done"])}
    if "asks" in plain:
        if not plain[key] <= plain["asks"] < COUNTER_MAX:
            raise InputError(path, f"asks (the batches in its parts) in [{key} {plain[key]}, {COUNTER_MAX:,})",
                             Shown(f"asks {plain['asks']}"))
        out["asks"] = int(plain["asks"])
    return out


def load_marker(path: str, budget: int) -> dict | None:
    """TPE's progress marker (batches told, evaluations, done), or None where there is none yet.
    Other entries are kept as they are."""
    if not os.path.exists(path):
        return None
    expected = "a TPE progress marker (a JSON object: batches, evaluations, done)"
    marker = read_json(path, expected)
    if not isinstance(marker, dict):
        raise InputError(path, expected, Shown(f"a JSON {type(marker).__name__}"))
    need_int(marker, "batches", path)
    need_int(marker, "evaluations", path, high=budget)
    need(marker, "done", (bool,), path)
    if "journal_bytes" in marker:  # written since resume rewinds the journal; older markers have none
        need_int(marker, "journal_bytes", path)
    if "asks" in marker:  # written since a part holds several batches; older markers have a batch per part
        need_int(marker, "asks", path, low=marker["batches"], high=COUNTER_MAX - 1)
    return marker


JOURNAL = "an Optuna journal as this run wrote it (one JSON record per line)"


def check_journal(path: str, told: int | None = None, why: str = "") -> None:
    """Optuna's journal file, before Optuna replays it (and appends to it): every line a whole
    JSON object with an integer op_code, the last one ended. Where there is none yet, nothing.
    ``told``: the journal's size after the last told batch (TPE's marker, ``why`` says which):
    only those bytes are checked (what follows is the batch a kill interrupted, cut on resume by
    search._tpe.rewind_journal), and the journal must hold them, ending a line there."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        data = b""
        if not told:
            return
    except OSError as exc:
        raise InputError(path, JOURNAL, Shown(f"an unreadable file ({exc.strerror or said(exc)})")) from None
    if told is not None:
        if len(data) < told or (told and data[told - 1:told] != b"\n"):
            raise InputError(path, f"an Optuna journal of at least {told:,} bytes with a line ending at byte "
                             f"{told:,} ({why})", Shown(f"{len(data):,} bytes" + (
                                 "" if len(data) < told else ", no line ending there")))
        data = data[:told]
    if data and not data.endswith(b"\n"):
        raise InputError(path, JOURNAL, Shown(f"a file cut short ({len(data):,} bytes, its last record unended)"))
    for number, line in enumerate(data.splitlines(), start=1):
        try:
            record = json.loads(line)
        except UnicodeDecodeError:
            raise InputError(path, JOURNAL, Shown(f"binary bytes on line {number}")) from None
        except (ValueError, RecursionError) as exc:
            raise InputError(path, JOURNAL, Shown(f"line {number} not JSON ({said(exc)})")) from None
        if not isinstance(record, dict) or not _is_int(record.get("op_code")):
            raise InputError(path, JOURNAL, Shown(f"line {number} without an integer op_code"))


def fsync_dirs(paths: Iterable[str]) -> None:
    """fsync each directory (a rename in it reaches the disk); where the platform refuses, nothing."""
    from costmodel._files import fsync_directory

    for d in dict.fromkeys(paths):
        fsync_directory(d)
