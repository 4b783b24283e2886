"""The run directory: everything a run needs to be understood, continued and read.

    RUN_DIR/run.json        what was asked (command, searcher, seed, options, one study per
                            (model, cluster) with its space), the model and cluster specs,
                            the plansweep / cost-model / run-format versions
    RUN_DIR/results/        the Parquet dataset, hive-partitioned only by searcher=<name>
    RUN_DIR/state/lock      held (fcntl.flock) by the one process running the run
    RUN_DIR/state/...       chain checkpoints, the Optuna journal, state/asked/ (what each search
                            part asked: sweep._heal)
    RUN_DIR/quarantine/     damaged parts moved aside on resume (sweep._heal)

The files on disk are the truth: a grid unit is done when its part file exists; a search
continues from its last checkpoint. Opening a run for resume checks run.json (sweep._checks),
that the directory can be written, and every part's footer and schema; a damaged part is moved
to quarantine/ and its rows recomputed. Nothing already written is deleted, only hidden
temporary files left by a killed writer.
"""

from __future__ import annotations

import dataclasses
import datetime
import fcntl
import json
import os
import uuid
from collections.abc import Callable
from typing import Any

import costmodel
from costmodel import GPU, Cluster, HeteroCluster, InputError, Transformer, hetero_from_mapping, hetero_to_mapping
from costmodel._files import TMP_PREFIX, TMP_SUFFIX
from costmodel._workloads import FIELDS_SINCE_MOE
from sweep._checks import Shown, check_parts, check_run_info, read_json, said, shown
from sweep._results import part_schemas, schema_metadata, write_json_atomic

# Bumped whenever the layout of a run directory or of its Parquet parts changes.
RUN_FORMAT = 3  # 2: a framework column in every part; 3: tokens_per_s_low / _high (the error band)
RUN_JSON = "run.json"
RESULTS = "results"
STATE = "state"
LOCK = "lock"


def versions() -> dict[str, object]:
    return {"plansweep": costmodel.__version__, "cost_model": costmodel.COST_MODEL_VERSION, "run_format": RUN_FORMAT}


def _major_minor(version: str) -> tuple[str, ...]:
    return tuple(str(version).split(".")[:2])


def incompatibility(recorded: dict) -> str | None:
    """Why results written under ``recorded`` versions must not be mixed with ours, or None."""
    now = versions()
    if recorded.get("run_format") != now["run_format"]:
        return f"run format {recorded.get('run_format')!r}, this plansweep reads format {now['run_format']}"
    if str(recorded.get("cost_model")) != str(now["cost_model"]):
        return (f"cost model version {recorded.get('cost_model')!r}, this plansweep has {now['cost_model']!r} "
                "(its numbers would differ)")
    if _major_minor(str(recorded.get("plansweep"))) != _major_minor(str(now["plansweep"])):
        return f"plansweep {recorded.get('plansweep')!r}, this is plansweep {now['plansweep']!r}"
    return None


# ---- specs <-> plain dicts (for run.json and the Parquet schema metadata) ------------------
def model_to_dict(model: Transformer) -> dict:
    """The model's fields, less those added with MoE models where they hold their dense value
    (a dense model's run.json, its identity on resume and Parquet metadata read as before)."""
    return {k: v for k, v in dataclasses.asdict(model).items()
            if not (k in FIELDS_SINCE_MOE and v == FIELDS_SINCE_MOE[k])}


def cluster_to_dict(cluster: Cluster | HeteroCluster) -> dict:
    """A cluster's fields; a heterogeneous cluster in its file form (name, pools, links)."""
    if isinstance(cluster, HeteroCluster):
        return hetero_to_mapping(cluster)
    return dataclasses.asdict(cluster)


def model_from_dict(d: dict) -> Transformer:
    return Transformer(**d)


def cluster_from_dict(d: dict) -> Cluster | HeteroCluster:
    if "pools" in d:
        return hetero_from_mapping(d)
    d = dict(d)
    gpu = dict(d.pop("gpu"))
    gpu["peak_flops"] = tuple(gpu["peak_flops"])
    return Cluster(gpu=GPU(**gpu), **d)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Study:
    """One (model, cluster) pair and its space: an independent sweep or search in the run."""

    index: int
    model: Transformer
    cluster: Cluster | HeteroCluster
    space: Any  # search.Space, or search.HeteroSpace on a heterogeneous cluster

    @property
    def label(self) -> str:
        return f"{self.model.name} on {self.cluster.name}"


class RunDir:
    """An open run directory, locked for this process (use as a context manager)."""

    def __init__(self, path: str, info: dict, lock_fd: int) -> None:
        self.path = path
        self.info = info
        self._lock_fd = lock_fd
        self._studies: list[Study] | None = None
        self.damaged: dict[str, str] = {}  # part -> why it is damaged (found when opened)
        self.quarantined: dict[str, tuple[str, str]] = {}  # part -> (where it went, why it was damaged)
        self.on_ready: Callable[[], None] | None = None  # called once the run's checks pass (ready)

    # -- opening -----------------------------------------------------------------------------
    @classmethod
    def create_or_resume(cls, path: str, request: dict) -> tuple[RunDir, bool]:
        """Open ``path`` for ``request`` (the identity of a run: command, searcher, seed,
        options, studies). A new or empty directory gets a new run; a directory holding the
        same run is resumed (returns resumed=True); anything else is refused."""
        path = os.path.abspath(path)
        run_json = os.path.join(path, RUN_JSON)
        if os.path.isfile(run_json):
            rd = cls.open(path)
            if _identity(rd.info) != _identity(request):
                rd.close()
                raise InputError("--out", "a new or empty directory, or one holding this same run (resume it with "
                                 "`plansweep resume`)", f"{path}: holds a different run ({_describe(rd.info)})")
            return rd, True
        if os.path.lexists(run_json) or (os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path))):
            raise InputError("--out", "a new or empty directory", f"{path}: not empty and holds no run.json")
        if "studies" in request:  # what resume will read back, read now: nothing is written for a run it would refuse
            _build_studies(json.loads(json.dumps(request["studies"])), run_json)
        try:
            os.makedirs(os.path.join(path, STATE), exist_ok=True)
            os.makedirs(os.path.join(path, RESULTS), exist_ok=True)
        except OSError as exc:
            raise _unwritable(path, exc) from None
        fd = _lock(path)
        info = {**request, "run_id": uuid.uuid4().hex[:12],
                "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "versions": versions()}
        try:
            write_json_atomic(info, run_json)
        except OSError as exc:
            _unlock(fd)
            raise _unwritable(path, exc) from None
        return cls(path, info, fd), False

    @classmethod
    def open(cls, path: str) -> RunDir:
        """Open an existing run for resuming: checks run.json, the versions and the lock."""
        path = os.path.abspath(path)
        run_json = os.path.join(path, RUN_JSON)
        if not os.path.isfile(run_json):
            raise InputError("RUN_DIR", "a run directory holding run.json", path)
        info = check_run_info(read_json(run_json, "run.json as plansweep writes it (a JSON object)"), run_json)
        why = incompatibility(info["versions"])
        if why:
            raise InputError("RUN_DIR", "a run written by a compatible plansweep", f"{path}: written with {why}")
        _check_folders(path, info["searcher"])
        try:
            os.makedirs(os.path.join(path, STATE), exist_ok=True)
        except OSError as exc:
            raise _unwritable(path, exc) from None
        fd = _lock(path)
        rd = cls(path, info, fd)
        try:
            _check_writable(path)
            rd.remove_temporaries()
            rd.check_parts()
        except BaseException:
            rd.close()
            raise
        return rd

    def close(self) -> None:
        if self._lock_fd >= 0:
            _unlock(self._lock_fd)
            self._lock_fd = -1

    def __enter__(self) -> RunDir:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- layout ------------------------------------------------------------------------------
    @property
    def run_id(self) -> str:
        return self.info["run_id"]

    @property
    def results(self) -> str:
        return os.path.join(self.path, RESULTS)

    @property
    def state(self) -> str:
        return os.path.join(self.path, STATE)

    def partition(self, searcher: str) -> str:
        d = os.path.join(self.results, f"searcher={searcher}")
        os.makedirs(d, exist_ok=True)
        return d

    def studies(self) -> list[Study]:
        """run.json's studies, built once (their specs and spaces checked as they are built)."""
        if self._studies is None:
            self._studies = _build_studies(self.info["studies"], os.path.join(self.path, RUN_JSON))
        return self._studies

    @property
    def hetero(self) -> bool:
        """A run over placement spaces (its parts list the per-stage placement columns)."""
        return any(s["space"].get("kind") == "hetero" for s in self.info["studies"])

    def check_parts(self) -> None:
        """Every part's footer and schema checked (the damaged ones in ``damaged``): the one result
        schema, or a one-pool run's parts as written before the placement lists (sweep._results)."""
        import pyarrow.fs as pafs

        _, self.damaged = check_parts(pafs.LocalFileSystem(), self.results, part_schemas(hetero=self.hetero))

    def set_damaged_parts_aside(self) -> None:
        """The damaged parts moved to quarantine/, once the run's own files are checked (their rows
        are recomputed by the run: a grid unit without its part, a search part from its record)."""
        from sweep._heal import quarantine

        for part, why in self.damaged.items():
            self.quarantined[part] = (quarantine(self.path, part), why)
        self.damaged = {}

    def ready(self) -> None:
        """The run's files are checked and healed and it is about to evaluate: ``on_ready``, once."""
        hook, self.on_ready = self.on_ready, None
        if hook is not None:
            hook()

    def set_costing(self, costing: dict) -> None:
        """run.json's costing (training tokens, prices: not part of the run's identity) replaced, atomically."""
        self.info = {**self.info, "costing": costing}
        write_json_atomic(self.info, os.path.join(self.path, RUN_JSON))

    def metadata(self, study: Study) -> dict[bytes, bytes]:
        return schema_metadata(model_to_dict(study.model), cluster_to_dict(study.cluster), self.info["versions"])

    def remove_temporaries(self) -> None:
        """Hidden temporary files of a killed writer (never a finished part)."""
        for root, _dirs, files in os.walk(self.path):
            for name in files:
                if name.startswith(TMP_PREFIX) and name.endswith(TMP_SUFFIX):
                    try:
                        os.unlink(os.path.join(root, name))
                    except FileNotFoundError:
                        pass
                    except OSError as exc:
                        raise _unwritable(self.path, exc) from None


def _build_studies(studies: list[dict], run_json: str) -> list[Study]:
    from search import HeteroSpace, Space  # search/ knows nothing of run directories; we rebuild here

    out = []
    for i, s in enumerate(studies):
        try:
            model = model_from_dict(s["model"])
            cluster = cluster_from_dict(s["cluster"])
            kind = HeteroSpace if s["space"].get("kind") == "hetero" else Space
            space = kind.from_json(s["space"], model, cluster)
        except InputError as exc:
            raise InputError(run_json, f"a run.json whose studies this plansweep can read (studies[{i}]: "
                             f"{exc.argument}: {exc.expected})", shown(exc.got)) from None
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, ArithmeticError) as exc:
            # a spec or space of the wrong shape: what its constructor met, named by the file
            raise InputError(run_json, f"a run.json whose studies this plansweep can read (studies[{i}])",
                             said(exc)) from None
        out.append(Study(index=i, model=model, cluster=cluster, space=space))
    return out


def study_request(model: Transformer, cluster: Cluster | HeteroCluster, space) -> dict:
    return {"model": model_to_dict(model), "cluster": cluster_to_dict(cluster), "space": space.to_json()}


def _identity(info: dict) -> str:
    keys = ("command", "searcher", "seed", "options", "studies")
    return json.dumps({k: info.get(k) for k in keys}, sort_keys=True, default=str)


def _describe(info: dict) -> str:
    studies = ", ".join(f"{s['model'].get('name')} on {s['cluster'].get('name')}" for s in info.get("studies", []))
    return f"{info.get('command')} of {studies}, seed {info.get('seed')}"


def check_outside_run(path: str | None, flag: str, run_dir: str) -> None:
    """InputError naming ``flag`` where the output ``path`` is the run's run.json or lies under its
    results/, state/ or quarantine/ (symlinks and relative paths resolved): a command reading
    ``run_dir`` never writes over it. A run given as a URI other than file:// is not checked."""
    from sweep._heal import QUARANTINE

    if path is None or ("://" in run_dir and not run_dir.startswith("file://")):
        return
    base = os.path.realpath(run_dir.removeprefix("file://"))
    target = os.path.realpath(path)
    for name in (RUN_JSON, RESULTS, STATE, QUARANTINE):
        own = os.path.join(base, name)
        if target == own or target.startswith(own + os.sep):
            raise InputError(flag, f"a path outside the run's {RUN_JSON}, {RESULTS}/, {STATE}/ and {QUARANTINE}/ "
                             "(the run being read)", Shown(f"{path} ({own if name == RUN_JSON else own + '/'})"))


def _check_folders(path: str, searcher: str) -> None:
    """The folders a resume writes in (results/, state/, their searcher's folders, quarantine/) are
    folders where they exist (absent, each is made again): a file in their place is refused before
    anything is read or written."""
    from sweep._heal import ASKED, QUARANTINE

    for name in (RESULTS, STATE, os.path.join(RESULTS, f"searcher={searcher}"), os.path.join(STATE, ASKED),
                 os.path.join(STATE, ASKED, searcher), QUARANTINE):
        folder = os.path.join(path, name)
        if os.path.lexists(folder) and not os.path.isdir(folder):
            raise InputError("RUN_DIR", f"a run directory whose {name}/ is a folder", Shown(f"{folder}: a file"))


def _unwritable(path: str, exc: OSError) -> InputError:
    where = getattr(exc, "filename", None) or path
    return InputError("RUN_DIR", "a run directory this user can write", Shown(
        f"{path}: {exc.strerror or said(exc)} ({where})"))


def _check_writable(path: str) -> None:
    """Create and remove a hidden temporary file in RUN_DIR and in each folder of results/ and
    state/, so that a directory the user cannot write is refused before anything is run."""
    folders = [path] + [root for sub in (RESULTS, STATE) for root, _, _ in os.walk(os.path.join(path, sub))]
    for d in folders:
        probe = os.path.join(d, f"{TMP_PREFIX}probe.{uuid.uuid4().hex}{TMP_SUFFIX}")
        try:
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            os.unlink(probe)
        except OSError as exc:
            raise _unwritable(path, exc) from None


def _unlock(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def _lock(path: str) -> int:
    """Take RUN_DIR/state/lock for this process, or refuse in one line naming the holder."""
    lock_path = os.path.join(path, STATE, LOCK)
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise _unwritable(path, exc) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            holder = " ".join(os.pread(fd, 64, 0).decode(errors="replace").split()) or "?"
        finally:
            os.close(fd)
        raise InputError("RUN_DIR", "a run directory no other process is using",
                         f"{path}: in use by process {holder} (wait for it to finish or stop it)") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd
