"""Reading a run directory: run.json, the Parquet dataset under results/, its metadata.

The reading side of the results schema in README.md ("Results (Parquet schema)"); the
engine writes it. A run directory is a local path or a URI that pyarrow's filesystems
understand (``s3://bucket/run``, ``gs://...``). Only the columns a caller asks for are read,
and the best rows are found by a filter on the throughput column, so a show or a plot of a
large run never holds every column of every row at once.

Every part's footer and schema are checked first (sweep._checks.check_parts); damaged parts are
left out of the dataset and named in ``RunView.skipped`` (nothing is moved: a view is read-only,
and may be a URI; `plansweep resume` moves them to quarantine/ and recomputes their rows).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from costmodel import InputError
from sweep._checks import Shown, check_parts, check_view_info, read_json, said, skipped_line, unreadable_parts
from sweep._results import META_CLUSTER, META_MODEL, META_VERSIONS, dataset_schema, part_schemas
from sweep._rundir import RESULTS as RESULTS_DIR
from sweep._rundir import RUN_FORMAT, RUN_JSON

# The degree columns, in Megatron's rank order (tp innermost).
DEGREES = ("dp", "tp", "pp", "cp")
# Columns every results dataset must have for show and plot to read it.
REQUIRED_COLUMNS = ("dp", "tp", "pp", "feasible", "reason", "tokens_per_s", "samples_per_s", "step_time_s")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunView:
    """An opened run directory (read-only)."""

    run_dir: str
    info: Mapping[str, object]        # run.json ({} where the engine wrote none)
    dataset: ds.Dataset               # results/ with the hive partition (searcher=<name>)
    model: Mapping[str, object]       # the study's model spec (run.json or schema metadata; {} if absent)
    cluster: Mapping[str, object]
    versions: Mapping[str, object]
    where: pc.Expression | None = None  # the rows of one study (None: every row)
    skipped: Mapping[str, str] = dataclasses.field(default_factory=dict)  # damaged part -> why, left out

    def skipped_line(self) -> str | None:
        """One line naming the damaged parts left out of this view, or None."""
        return skipped_line(self.skipped, self.run_dir, _filesystem(self.run_dir)[1]) if self.skipped else None

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(self.dataset.schema.names)

    @property
    def placed(self) -> bool:
        """A run on a cluster with pools: its rows list the per-stage placement (stage_pool, stage_dp,
        ...; null in every other run) and leave dp, tp and micro_batch null."""
        studies = self.info.get("studies") if isinstance(self.info.get("studies"), list) else []
        return "pools" in self.cluster or any(isinstance(s, dict) and (s.get("space") or {}).get("kind") == "hetero"
                                              for s in studies)

    @property
    def is_mlp(self) -> bool:
        """A multi-layer perceptron (seed 000's workload), whose throughput is samples/s."""
        return self.model.get("kind") == "mlp"

    @property
    def throughput_column(self) -> str:
        """samples/s for an MLP (a sample is one row of the batch), tokens/s otherwise."""
        return "samples_per_s" if self.is_mlp else "tokens_per_s"

    @property
    def keep(self) -> str | None:
        """The engine's keep policy (all, feasible, best:K), where run.json records it."""
        opts = self.info.get("options")
        return opts.get("keep") if isinstance(opts, dict) else None

    def scan(self, columns: Sequence[str] | None = None, flt: pc.Expression | None = None) -> pa.Table:
        """Rows of this view (one study), optionally projected and filtered."""
        cond = self.where if flt is None else (flt if self.where is None else self.where & flt)
        return self.dataset.to_table(columns=None if columns is None else list(columns), filter=cond)

    def studies(self) -> list[RunView]:
        """One view per (model, cluster) study of the run (the engine runs several side by side
        and writes their names in the ``model`` and ``cluster`` columns)."""
        if "model" not in self.columns or "cluster" not in self.columns or self.where is not None:
            return [self]  # (a view already of one study, or of some of its frameworks)
        pairs = self.dataset.to_table(columns=["model", "cluster"]).group_by(["model", "cluster"]).aggregate([])
        pairs = sorted(zip(pairs.column("model").to_pylist(), pairs.column("cluster").to_pylist(), strict=True))
        if not pairs:
            return [self]
        specs = self.info.get("studies") if isinstance(self.info.get("studies"), list) else []
        out = []
        for model, cluster in pairs:
            m = next((s["model"] for s in specs if _name(s, "model") == model), None)
            c = next((s["cluster"] for s in specs if _name(s, "cluster") == cluster), None)
            m = m or (self.model if self.model.get("name") == model else {"name": model})
            c = c or (self.cluster if self.cluster.get("name") == cluster else {"name": cluster})
            out.append(dataclasses.replace(self, model=m, cluster=c,
                                           where=(pc.field("model") == model) & (pc.field("cluster") == cluster)))
        return out

    @property
    def name(self) -> str:
        return f"{self.model.get('name', '?')} on {self.cluster.get('name', '?')}"

    def frameworks(self) -> list[str]:
        """The framework profiles of this view's rows (a run over a framework dimension holds several), in the order
        of costmodel's profile table; [] where the results have no framework column."""
        if "framework" not in self.columns:
            return []
        from costmodel._strategy import FRAMEWORK_NAMES

        names = set(pc.unique(self.scan(["framework"]).column("framework")).to_pylist()) - {None}
        return sorted(names, key=lambda n: (FRAMEWORK_NAMES.index(n) if n in FRAMEWORK_NAMES else len(FRAMEWORK_NAMES),
                                            n))

    def of_frameworks(self, names: Sequence[str]) -> RunView:
        """This view restricted to the rows of the frameworks ``names``."""
        cond = pc.field("framework").isin(list(names))
        return dataclasses.replace(self, where=cond if self.where is None else self.where & cond)

    def read(self, columns: Sequence[str], *, feasible_only: bool = False) -> dict[str, np.ndarray]:
        """Whole columns as numpy arrays (strings as object arrays; a per-stage list column as each
        row's largest stage value), optionally feasible rows only."""
        missing = [c for c in columns if c not in self.columns]
        if missing:
            raise InputError("RUN_DIR", f"results with a {missing[0]!r} column", self.run_dir)
        table = self.scan(columns, pc.field("feasible") if feasible_only else None)
        return {c: _to_numpy(table.column(c)) for c in columns}


def _to_numpy(col: pa.ChunkedArray) -> np.ndarray:
    if pa.types.is_list(col.type):  # one value per stage: the row's largest (rows list >= 1 stage)
        lists = col.combine_chunks()
        return np.maximum.reduceat(lists.flatten().to_numpy(), lists.offsets.to_numpy()[:-1]) if len(lists) else (
            np.zeros(0, np.int64))
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        return np.asarray(col.to_pylist(), dtype=object)
    return col.to_numpy()


def _filesystem(run_dir: str) -> tuple[pafs.FileSystem, str]:
    if "://" in run_dir:
        try:
            return pafs.FileSystem.from_uri(run_dir)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
            raise InputError("RUN_DIR", "a path or a URI pyarrow.fs understands", f"{run_dir} ({exc})") from exc
    return pafs.LocalFileSystem(), os.path.abspath(run_dir)


def _json_meta(meta: Mapping[bytes, bytes] | None, key: bytes, run_dir: str) -> dict:
    if not meta or key not in meta:
        return {}
    try:
        value = json.loads(meta[key])
    except ValueError as exc:
        raise InputError("RUN_DIR", f"JSON in the {key.decode()} schema metadata", run_dir) from exc
    return value if isinstance(value, dict) else {}


def open_run(run_dir: str | os.PathLike, *, skip: Mapping[str, str] | None = None) -> RunView:
    """Open RUN_DIR (path or URI); raises InputError, naming what is missing, for anything
    that is not a readable run directory with results. ``skip``: parts to leave out too (path ->
    why: pages found not to read, read_view), named with the damaged ones in ``skipped``."""
    run_dir = os.fspath(run_dir)
    fs, base = _filesystem(run_dir)
    expected = "a run directory holding run.json and results/ (a Parquet dataset)"
    try:
        kind = fs.get_file_info(base).type
        res_kind = fs.get_file_info(f"{base}/{RESULTS_DIR}").type
    except OSError as exc:
        raise InputError("RUN_DIR", expected, f"{run_dir} ({exc})") from exc
    if kind != pafs.FileType.Directory:
        raise InputError("RUN_DIR", expected, f"{run_dir} (no such directory)")
    if res_kind != pafs.FileType.Directory:
        raise InputError("RUN_DIR", expected, f"{run_dir} (no results/ in it)")
    info: dict = {}
    run_json = f"{base}/{RUN_JSON}"
    if fs.get_file_info(run_json).type == pafs.FileType.File:
        info = check_view_info(read_json(run_json, f"{RUN_JSON} holding a JSON object", fs=fs), run_json)
    _check_format(info, run_dir)
    results = f"{base}/{RESULTS_DIR}"
    sound, damaged = check_parts(fs, results, _expected_schemas(info))
    damaged.update({p: why for p, why in (skip or {}).items() if sound.pop(p, None) is not None})
    if not sound:
        why = "none yet" if not damaged else skipped_line(damaged, run_dir, base)
        raise InputError("RUN_DIR", "results/ holding at least one readable Parquet part", Shown(f"{run_dir} ({why})"))
    try:
        dataset = ds.dataset(sorted(sound), filesystem=fs, format="parquet",
                             partitioning=ds.partitioning(flavor="hive"), partition_base_dir=results)
        schema = dataset.schema
        if "searcher" in schema.names and not schema.remove_metadata().equals(dataset_schema()):
            # parts written before every part had the placement lists: read as one schema, those lists null
            schema = dataset_schema(schema.metadata)
            dataset = ds.dataset(sorted(sound), schema=schema, filesystem=fs, format="parquet",
                                 partitioning=ds.partitioning(pa.schema([schema.field("searcher")]), flavor="hive"),
                                 partition_base_dir=results)
    except (pa.ArrowException, OSError) as exc:
        raise InputError("RUN_DIR", "results/ holding Parquet files", Shown(f"{run_dir} ({said(exc)})")) from None
    missing = [c for c in REQUIRED_COLUMNS if c not in schema.names]
    if missing:
        raise InputError("RUN_DIR", "results in plansweep's schema", f"{run_dir} (no {missing[0]!r} column)")
    # The unified dataset schema carries the first part's metadata; fall back to run.json.
    meta = schema.metadata
    model = _json_meta(meta, META_MODEL, run_dir) or _dict(info.get("model"))
    cluster = _json_meta(meta, META_CLUSTER, run_dir) or _dict(info.get("cluster"))
    versions = _json_meta(meta, META_VERSIONS, run_dir) or _dict(info.get("versions"))
    return RunView(run_dir=run_dir, info=info, dataset=dataset, model=model, cluster=cluster, versions=versions,
                   skipped=damaged)


def _expected_schemas(info: Mapping[str, object]) -> tuple[pa.Schema, ...]:
    """The part schemas of the run run.json describes (sweep._results.part_schemas): over placement
    spaces or not; either where run.json does not say (a run written by other tools)."""
    kinds = {(s.get("space") or {}).get("kind") for s in info.get("studies") or []}
    return part_schemas(hetero=("hetero" in kinds) if kinds else None)


def _check_format(info: Mapping[str, object], run_dir: str) -> None:
    """Refuse a run directory laid out in another run format than the one this plansweep
    writes (its columns could mean something else), rather than misread it."""
    versions = info.get("versions")
    recorded = versions.get("run_format") if isinstance(versions, dict) else None
    if recorded is not None and recorded != RUN_FORMAT:
        raise InputError("RUN_DIR", f"a run directory in run format {RUN_FORMAT} (this plansweep's)",
                         f"{run_dir} (run format {recorded!r}, from plansweep {versions.get('plansweep')!r})")


def _name(study: object, key: str) -> object:
    spec = study.get(key) if isinstance(study, dict) else None
    return spec.get("name") if isinstance(spec, dict) else None


def _dict(x) -> dict:
    return x if isinstance(x, dict) else {}


def summary(view: RunView) -> dict[str, object]:
    """Row count, feasible count and infeasible rows per reason (most frequent first)."""
    t = view.scan(["feasible", "reason"])
    feasible = int(pc.sum(t.column("feasible")).as_py() or 0)
    infeasible = t.filter(pc.invert(t.column("feasible")))
    counts = infeasible.group_by("reason").aggregate([("reason", "count")]).to_pydict()
    reasons = dict(sorted(zip(counts["reason"], counts["reason_count"], strict=True), key=lambda kv: -kv[1]))
    return {"num_rows": t.num_rows, "num_feasible": feasible, "infeasible_reasons": reasons}


# The columns that name a strategy (the engine's strategy columns); rows equal on these are the
# same strategy, which a search (MCMC, TPE) may evaluate many times.
STRATEGY_KEYS = ("model", "cluster", "framework", "dp", "tp", "pp", "cp", "ep", "etp", "micro_batch", "global_batch",
                 "vpp", "zero_stage", "schedule", "recompute", "precision", "sequence_parallel", "overlap_dp", "stage_layers",
                 "stage_recompute", "microbatches", "stage_pool", "stage_dp", "stage_tp", "stage_order", "stage_pool2",
                 "stage_dp2")


GOODPUT_KEYS = ("dp", "tp", "pp", "cp", "ep", "etp", "zero_stage", "tokens_per_s", "mem_weights_bytes",
                "mem_optimizer_bytes")


def run_failure_model(view):
    """The costmodel.FailureModel of a run that ranks by goodput (run.json's options, ``view.info``
    of a RunView or a sweep._rundir.RunDir), else None."""
    from costmodel import FailureModel

    opts = view.info.get("options") if isinstance(view.info.get("options"), Mapping) else {}
    if opts.get("objective", "tokens_per_s") != "goodput":
        return None
    return FailureModel(**opts["failure"])


def goodput_columns(rows: pa.Table, cluster, failure, model=None) -> dict[str, np.ndarray]:
    """costmodel.plan_goodput of result rows (their strategy and memory columns) of ``model`` on
    ``cluster``."""
    from costmodel import plan_goodput

    cols = {k: rows.column(k).to_numpy() for k in GOODPUT_KEYS if k in rows.column_names}
    return plan_goodput(cols, cols, cluster, failure, model=model)


def best_rows_by_goodput(view: RunView, k: int, failure) -> tuple[pa.Table, dict[str, np.ndarray]]:
    """The ``k`` distinct feasible strategies of highest goodput under ``failure`` (a homogeneous
    study: its cluster from run.json), best first, and their goodput columns."""
    from sweep._rundir import cluster_from_dict, model_from_dict

    cluster, model = cluster_from_dict(dict(view.cluster)), model_from_dict(dict(view.model))
    rows, _ = best_rows_by(view, k, lambda r: goodput_columns(r, cluster, failure, model)["goodput_tokens_per_s"])
    return rows, goodput_columns(rows, cluster, failure, model)


def best_rows_by(view: RunView, k: int, score) -> tuple[pa.Table, np.ndarray]:
    """The ``k`` distinct feasible strategies of highest ``score(rows)`` ((N,) from a pyarrow table of
    the feasible rows, every column), best first, and their scores."""
    rows = view.scan(None, pc.field("feasible"))
    if rows.num_rows == 0:
        return rows, np.zeros(0)
    val = np.asarray(score(rows), dtype=np.float64)
    order = np.argsort(-val, kind="stable")
    rows = rows.append_column("__score", pa.array(val)).take(pa.array(order, type=pa.int64()))
    top = _distinct(rows).slice(0, k)
    return top.drop(["__score"]), top.column("__score").to_numpy()


def _distinct(table: pa.Table) -> pa.Table:
    """First row of each strategy (``table`` holds the few best rows, sorted)."""
    keys = [c for c in STRATEGY_KEYS if c in table.column_names]
    cols = [table.column(c).to_pylist() for c in keys]
    seen: set = set()
    keep = []
    for i, key in enumerate(zip(*cols, strict=True)):
        key = tuple(tuple(v) if isinstance(v, list) else v for v in key)
        if key not in seen:
            seen.add(key)
            keep.append(i)
    return table.take(pa.array(keep, type=pa.int64()))


def best_rows(view: RunView, k: int, *, include_infeasible: bool = False) -> pa.Table:
    """The ``k`` distinct strategies of highest throughput, best first, every column (a
    strategy a search evaluated several times is listed once); with ``include_infeasible`` the
    infeasible rows fill up to k after the feasible ones (least memory first), so a run without
    one feasible row still shows what came close."""
    thr = view.throughput_column
    feas = view.scan([thr], pc.field("feasible")).column(thr).to_numpy()
    want = k
    while True:
        # The want-th best throughput is a threshold: read only rows at or above it.
        kth = np.partition(feas, feas.size - want)[feas.size - want] if feas.size > want else -np.inf
        top = view.scan(None, pc.field("feasible") & (pc.field(thr) >= float(kth)))
        top = _distinct(top.take(pc.sort_indices(top, sort_keys=[(thr, "descending"), ("step_time_s", "ascending")])))
        if top.num_rows >= k or feas.size <= want:
            break
        want *= 4  # repeats of the same strategies filled the threshold: read further down
    top = top.slice(0, k)
    if include_infeasible and top.num_rows < k:
        rest = view.scan(None, ~pc.field("feasible"))
        if "mem_total_bytes" in rest.column_names:
            rest = rest.take(pc.sort_indices(rest, sort_keys=[("mem_total_bytes", "ascending")]))
        rest = _distinct(rest).slice(0, k - top.num_rows)
        top = pa.concat_tables([top, rest.cast(top.schema)])
    return top


def read_view(run_dir: str, body, *, on_skip=None):
    """``body(view)`` over open_run(run_dir); where a part's footer reads but its pages do not (a
    read fails), the parts at fault are found (each read whole), ``on_skip(them)`` is told, and
    ``body`` runs once more without them. Reads that still fail: InputError, one line."""
    view = open_run(run_dir)
    try:
        return body(view)
    except (pa.ArrowException, OSError) as exc:
        bad = unreadable_parts(_filesystem(run_dir)[0], view.dataset.files)
        if not bad:
            raise InputError("RUN_DIR", "Parquet parts whose pages read", said(exc)) from None
    if on_skip is not None:
        on_skip(bad)
    view = open_run(run_dir, skip={**view.skipped, **bad})
    try:
        return body(view)
    except (pa.ArrowException, OSError) as exc:
        raise InputError("RUN_DIR", "Parquet parts whose pages read", said(exc)) from None
