"""Results as Parquet: StrategyTable + Metrics -> one Arrow table -> one part file.

Schema (docs/run-directories.md, "Results (Parquet schema)"): one schema for every run (grid,
every searcher, one pool or several, dense, MoE or MLP, one problem or many), so that parts of
different runs read together with no options. The strategy columns with readable values (the
schedule as its name); the per-stage lists stage_layers / stage_recompute, null when the row's
stages are uniform; the per-stage placement lists stage_pool, stage_dp, stage_tp, stage_order,
stage_pool2, stage_dp2, listed on every row of a run on a cluster with pools and null on every
row of one on one pool; the metric columns of costmodel.METRIC_COLUMNS (units in their names;
reason as its REASONS name), the error band of tokens_per_s (BAND_COLUMNS,
costmodel._bands.error_bands), then run_id, model, cluster, framework (the costmodel._frameworks
profile the row was priced under: the table's framework column where it has one, one per row),
iteration and grid_index. A column's type is the same in every part, whether or not a value
is null (list<int64>, never list<null>). The column ``searcher`` comes from the hive partition
directory ``searcher=<name>``. The model, cluster and versions are in the schema metadata under
b"plansweep.model", b"plansweep.cluster", b"plansweep.versions" (JSON).

Parts written before mem_device_bytes lack it (PRE_DEVICE_SCHEMA); parts written by one-pool runs
before the placement lists were in every part lack those six columns too (LEGACY_SCHEMA): they are
read as they are, the missing columns null (dataset_schema).

Parts are written to a hidden temporary name in the same directory (ignored by readers:
pyarrow skips names starting with ".") and renamed into place, so a part is either whole
or absent, and writing the same part twice leaves one file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from costmodel import DEFAULT_FRAMEWORK, METRIC_COLUMNS, REASONS, RECOMPUTE, Metrics, StrategyTable
from costmodel._bands import error_bands
from costmodel._files import replaced_atomically
from costmodel._strategy import BOOL_COLUMNS, CODE_COLUMNS, FRAMEWORK, FRAMEWORK_NAMES, INT_COLUMNS, ORDERS

COMPRESSION = "zstd"


def part_name(study: int, index: int) -> str:
    """A study's part file: grid unit or searcher checkpoint / batch ``index``."""
    return f"part-{study:02d}-{index:06d}.parquet"

STRATEGY_COLUMNS = INT_COLUMNS + tuple(CODE_COLUMNS) + BOOL_COLUMNS + ("stage_layers", "stage_recompute")
# Each stage's pool (name), dp, tp, rank order, and second pool / replicas there (a stage split
# across two pools; null pool and 0 where not split): listed on every row of a run over
# search.HeteroSpace (a cluster with pools), whose dp, tp and micro_batch are null (they differ per
# stage); null on every row of a run on one pool. stage_layers and stage_recompute are null where
# uniform, on every cluster.
HETERO_STAGE_COLUMNS = ("stage_pool", "stage_dp", "stage_tp", "stage_order", "stage_pool2", "stage_dp2")
HETERO_STRATEGY_COLUMNS = STRATEGY_COLUMNS + HETERO_STAGE_COLUMNS
BAND_COLUMNS = ("tokens_per_s_low", "tokens_per_s_high")  # tokens_per_s's error band (costmodel._bands)
STAGE_NAMED = ("stage_recompute", "stage_pool", "stage_order", "stage_pool2")  # lists of names; the others int64
SEARCHER_FIELD = pa.field("searcher", pa.string())  # the hive partition folder searcher=<name>


def _metric_type(name: str) -> pa.DataType:
    if name == "feasible":
        return pa.bool_()
    if name == "reason":
        return pa.string()
    if name == "microbatches":
        return pa.int64()
    return pa.float64()


def _stage_type(name: str) -> pa.DataType:
    return pa.list_(pa.string() if name in STAGE_NAMED else pa.int64())


def result_schema(metadata: Mapping[bytes, bytes] | None = None) -> pa.Schema:
    """The one schema every part of every run has (so parts of empty and full units, of a grid
    and of a search, of one pool and of several read as one dataset): the columns in order, each
    with the type it has in every part."""
    fields = [pa.field(c, pa.int64()) for c in INT_COLUMNS]
    fields += [pa.field(c, pa.string()) for c in CODE_COLUMNS]
    fields += [pa.field(c, pa.bool_()) for c in BOOL_COLUMNS]
    fields += [pa.field(c, _stage_type(c)) for c in ("stage_layers", "stage_recompute", *HETERO_STAGE_COLUMNS)]
    fields += [pa.field(c, _metric_type(c)) for c in METRIC_COLUMNS]
    fields += [pa.field(c, pa.float64()) for c in BAND_COLUMNS]
    fields += [pa.field(c, pa.string()) for c in ("run_id", "model", "cluster", "framework")]
    fields += [pa.field("iteration", pa.int64()), pa.field("grid_index", pa.int64())]
    return pa.schema(fields, metadata=dict(metadata or {}))


# Columns later than the first parts: mem_device_bytes (the worst stage's GPU memory), and before it the placement
# lists of one-pool runs. A part written before a column is read with that column null (dataset_schema).
DEVICE_COLUMNS = ("mem_device_bytes",)
# Parts written before mem_device_bytes: the schema less it.
PRE_DEVICE_SCHEMA = pa.schema([f for f in result_schema() if f.name not in DEVICE_COLUMNS])
# Parts of one-pool runs written before every part had the placement lists: the schema less them (and less
# mem_device_bytes, which came later).
LEGACY_SCHEMA = pa.schema([f for f in PRE_DEVICE_SCHEMA if f.name not in HETERO_STAGE_COLUMNS])


def part_schemas(*, hetero: bool | None = None) -> tuple[pa.Schema, ...]:
    """The schemas a part of a run may have: result_schema and PRE_DEVICE_SCHEMA, and for a run on one pool
    (``hetero`` False) or of unknown kind (None) also LEGACY_SCHEMA."""
    return (result_schema(), PRE_DEVICE_SCHEMA) if hetero else (result_schema(), PRE_DEVICE_SCHEMA, LEGACY_SCHEMA)


def dataset_schema(metadata: Mapping[bytes, bytes] | None = None) -> pa.Schema:
    """The schema to read a run's parts as one dataset (an earlier part's missing columns read
    as null): result_schema with ``metadata`` and the partition column ``searcher``."""
    return result_schema(metadata).append(SEARCHER_FIELD)


# Schema metadata keys (JSON bytes) written with every Parquet part.
META_MODEL, META_CLUSTER, META_VERSIONS = b"plansweep.model", b"plansweep.cluster", b"plansweep.versions"
# A grid part's rows, feasible rows and infeasible rows per reason, per framework, of every row its unit evaluated
# (kept or not: sweep._grid.unit_counts), JSON.
META_COUNTS = b"plansweep.counts"


def schema_metadata(model_dict: dict, cluster_dict: dict, versions: dict) -> dict[bytes, bytes]:
    return {key: json.dumps(value, sort_keys=True).encode()
            for key, value in ((META_MODEL, model_dict), (META_CLUSTER, cluster_dict), (META_VERSIONS, versions))}


def _stage_list(per_stage: np.ndarray | None, pp: np.ndarray, names=None, *, uniform_null: bool = True,
                absent: np.ndarray | None = None) -> pa.Array:
    """(N, S) per-stage values -> list array of each row's first pp entries; with
    ``uniform_null``, null where the row's stages are all equal (a uniform row). ``names``
    decodes integer codes to strings, ``absent`` (N, S) marks null entries."""
    n = len(pp)
    if per_stage is None or n == 0:
        return pa.nulls(n, pa.list_(pa.int64() if names is None else pa.string()))
    active = np.arange(per_stage.shape[1])[None, :] < pp[:, None]  # (N, S)
    uniform = np.all((per_stage == per_stage[:, :1]) | ~active, axis=1) & uniform_null  # (N,)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.where(uniform, 0, pp), out=offsets[1:])
    listed = active & ~uniform[:, None]
    flat = per_stage[listed]  # row-major: each row's stages in order
    if names is None:
        values = pa.array(flat.astype(np.int64), type=pa.int64())
    else:
        idx = pa.array(flat.astype(np.int32), mask=None if absent is None else absent[listed])
        values = pa.DictionaryArray.from_arrays(idx, pa.array(list(names), type=pa.string())).cast(pa.string())
    return pa.ListArray.from_arrays(pa.array(offsets), values, mask=pa.array(uniform) if uniform_null else None)


def pool_names(space) -> list[str] | None:
    """The pools of a placement space's cluster (the names in stage_pool), else None."""
    return [p.name for p in space.cluster.pools] if hasattr(space.cluster, "pools") else None


def _decode(codes: np.ndarray, names) -> pa.Array:
    """Integer codes as their names: dictionary-decoded (a handful of names, no Python loop over rows)."""
    return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), pa.array(list(names))).cast(pa.string())


def to_arrow(table: StrategyTable, metrics: Metrics, *, run_id: str, model: str, cluster: str,
             iteration: np.ndarray | int, framework: str | None = None, grid_index: np.ndarray | None,
             metadata: Mapping[bytes, bytes] | None = None, pool_names: list[str] | None = None,
             seq_len: int = 0) -> pa.Table:
    """One Arrow table of readable strategy columns, metrics and bookkeeping (whole columns).
    A table with placements needs ``pool_names`` (the cluster's pools, in order): its dp, tp and
    micro_batch are null and the per-stage lists of HETERO_STAGE_COLUMNS hold its placement (null without
    placements). The framework column: each row's from the table's framework column, else ``framework`` (None:
    DEFAULT_FRAMEWORK) for every row. ``seq_len``: the model's sequence length, for the error bands' regime (long
    context or not). The columns and types are result_schema's, whatever the table."""
    hetero = table.placed
    if hetero and pool_names is None:
        raise ValueError("to_arrow of a table with placements needs pool_names")
    n, pp = len(table), table["pp"]
    cols: dict[str, pa.Array] = {}
    for c in INT_COLUMNS:  # ep and etp: row columns with placements too (1 for a dense model)
        per_stage = hetero and c in ("dp", "tp", "micro_batch")
        cols[c] = pa.nulls(n, pa.int64()) if per_stage else pa.array(table[c], type=pa.int64())
    recompute_codes = table["recompute"]
    if not hetero and table.stage_recompute is not None and n:
        # A row whose stages all recompute alike reports that choice in ``recompute``.
        sr = table.stage_recompute
        active = np.arange(sr.shape[1])[None, :] < pp[:, None]
        uniform = np.all((sr == sr[:, :1]) | ~active, axis=1)
        recompute_codes = np.where(uniform, sr[:, 0], recompute_codes)
    for c, names in CODE_COLUMNS.items():
        cols[c] = _decode(recompute_codes if c == "recompute" else table[c], names)
    for c in BOOL_COLUMNS:
        cols[c] = pa.array(table[c], type=pa.bool_())
    cols["stage_layers"] = _stage_list(table.stage_layers, pp)
    cols["stage_recompute"] = _stage_list(table.stage_recompute, pp, RECOMPUTE)
    if not hetero:
        cols.update({c: pa.nulls(n, _stage_type(c)) for c in HETERO_STAGE_COLUMNS})
    else:
        st = table.stages
        split = (st["dp2"] > 0) & (st["pool2"] != st["pool"])
        cols["stage_pool"] = _stage_list(st["pool"], pp, pool_names, uniform_null=False)
        cols["stage_dp"] = _stage_list(st["dp"], pp, uniform_null=False)
        cols["stage_tp"] = _stage_list(st["tp"], pp, uniform_null=False)
        cols["stage_order"] = _stage_list(st["order"], pp, ORDERS, uniform_null=False)
        cols["stage_pool2"] = _stage_list(np.where(split, st["pool2"], 0), pp, pool_names, uniform_null=False,
                                          absent=~split)
        cols["stage_dp2"] = _stage_list(np.where(split, st["dp2"], 0), pp, uniform_null=False)
    for c in METRIC_COLUMNS:
        cols[c] = _decode(metrics[c], REASONS) if c == "reason" else pa.array(metrics[c], type=_metric_type(c))
    band = error_bands(metrics["tokens_per_s"], table,
                       table[FRAMEWORK] if FRAMEWORK in table.columns else framework or DEFAULT_FRAMEWORK, seq_len)
    cols["tokens_per_s_low"], cols["tokens_per_s_high"] = (pa.array(band[k], pa.float64()) for k in ("low", "high"))
    for c, value in (("run_id", run_id), ("model", model), ("cluster", cluster), ("framework", framework or DEFAULT_FRAMEWORK)):
        cols[c] = pa.array(np.full(n, value, dtype=object), type=pa.string())
    if FRAMEWORK in table.columns:
        cols["framework"] = _decode(table[FRAMEWORK], FRAMEWORK_NAMES)
    cols["iteration"] = pa.array(np.broadcast_to(np.asarray(iteration, dtype=np.int64), (n,)), type=pa.int64())
    cols["grid_index"] = (
        pa.nulls(n, pa.int64()) if grid_index is None else pa.array(np.asarray(grid_index, dtype=np.int64))
    )
    schema = result_schema(metadata)
    return pa.Table.from_arrays([cols[f.name] for f in schema], schema=schema)


def write_part(arrow: pa.Table, path: str) -> None:
    """Write ``arrow`` to ``path`` whole or not at all (replaced_atomically)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with replaced_atomically(path) as tmp:
        pq.write_table(arrow, tmp, compression=COMPRESSION)


def write_json_atomic(obj: object, path: str) -> None:
    """JSON file written through a temporary name and a rename (never half a file)."""
    with replaced_atomically(path) as tmp, open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")


def hetero_row_strategy(row: Mapping, layers: int) -> dict:
    """A heterogeneous result row (a dict of one row's columns) of a model of ``layers`` layers
    as a strategy file's mapping (costmodel._strategy.hetero_from_mapping reads it back:
    global keys and stages)."""
    glob = ("global_batch", "microbatches", "cp", "vpp", "zero_stage", "schedule", "recompute", "precision",
            "sequence_parallel", "overlap_dp")
    out: dict = {k: row[k] for k in glob}
    out.update({k: row.get(k) or 1 for k in ("ep", "etp")})  # an MoE model's; 1 in a dense run
    stages = []
    recompute = row.get("stage_recompute")
    stage_layers = row.get("stage_layers") or [layers // row["pp"]] * row["pp"]  # null: uniform stages
    for j, pool in enumerate(row["stage_pool"]):
        st = {"pool": pool, "dp": row["stage_dp"][j], "tp": row["stage_tp"][j], "layers": stage_layers[j],
              "order": row["stage_order"][j]}
        if row["stage_dp2"][j]:
            st.update(pool2=row["stage_pool2"][j], dp2=row["stage_dp2"][j])
        if recompute:
            st["recompute"] = recompute[j]
        stages.append(st)
    out["stages"] = stages
    return out
