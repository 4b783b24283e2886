"""Test fixtures: small run directories written in the INTERFACES.md Parquet schema.

This writer lives in tests/ on purpose: the package's writer belongs to the sweep engine.
It evaluates a StrategyTable with costmodel.evaluate and writes RUN_DIR/run.json and
RUN_DIR/results/searcher=<name>/part-00000.parquet (zstd), column for column as agreed:
readable strategy columns, the metric columns, run_id / iteration / grid_index, and the
model, cluster and versions as JSON in the schema metadata.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import costmodel
from costmodel import METRIC_COLUMNS, REASONS, RECOMPUTE, StrategyTable, evaluate

INT64 = ("dp", "tp", "pp", "cp", "micro_batch", "global_batch", "vpp", "zero_stage")
STRINGS = ("schedule", "recompute", "precision")
BOOLS = ("sequence_parallel", "overlap_dp")


def table_to_arrow(table: StrategyTable, metrics, *, run_id: str, model_name: str, cluster_name: str, iteration: int,
                   grid_index: np.ndarray | None) -> pa.Table:
    """One Arrow table in the agreed schema (the searcher column comes from the partition)."""
    readable = table.readable()
    n = len(table)
    cols: dict[str, pa.Array] = {}
    for k in INT64:
        cols[k] = pa.array(readable[k], type=pa.int64())
    for k in STRINGS:
        cols[k] = pa.array(readable[k].astype(str), type=pa.string())
    for k in BOOLS:
        cols[k] = pa.array(readable[k], type=pa.bool_())
    pp = table["pp"]
    if table.stage_layers is None:
        cols["stage_layers"] = pa.nulls(n, type=pa.list_(pa.int64()))
    else:
        cols["stage_layers"] = pa.array([list(map(int, r[:p])) for r, p in zip(table.stage_layers, pp)],
                                        type=pa.list_(pa.int64()))
    if table.stage_recompute is None:
        cols["stage_recompute"] = pa.nulls(n, type=pa.list_(pa.string()))
    else:
        cols["stage_recompute"] = pa.array(
            [[RECOMPUTE[c] for c in r[:p]] for r, p in zip(table.stage_recompute, pp)],
            type=pa.list_(pa.string()))
    for k in METRIC_COLUMNS:
        v = np.asarray(metrics[k])
        if k == "microbatches":
            cols[k] = pa.array(v, type=pa.int64())
        elif k == "feasible":
            cols[k] = pa.array(v, type=pa.bool_())
        elif k == "reason":
            cols[k] = pa.array(np.asarray(REASONS, dtype=object)[v].astype(str), type=pa.string())
        else:
            cols[k] = pa.array(v, type=pa.float64())
    cols["run_id"] = pa.array([run_id] * n, type=pa.string())
    cols["model"] = pa.array([model_name] * n, type=pa.string())
    cols["cluster"] = pa.array([cluster_name] * n, type=pa.string())
    cols["iteration"] = pa.array(np.full(n, iteration, dtype=np.int64))
    cols["grid_index"] = (pa.nulls(n, type=pa.int64()) if grid_index is None
                          else pa.array(np.asarray(grid_index, dtype=np.int64)))
    return pa.table(cols)


def _metadata(model, cluster) -> dict[bytes, bytes]:
    versions = {"plansweep": "0.1.0", "cost_model": costmodel.COST_MODEL_VERSION}
    return {
        b"plansweep.model": json.dumps(dataclasses.asdict(model)).encode(),
        b"plansweep.cluster": json.dumps(dataclasses.asdict(cluster)).encode(),
        b"plansweep.versions": json.dumps(versions).encode(),
    }


def write_fixture_run(run_dir, model, cluster, table: StrategyTable, *, searcher: str = "grid",
                      run_id: str = "fixture", parts: int = 1,
                      more_studies: tuple = ()) -> pathlib.Path:
    """Evaluate ``table`` and write a run directory; returns its path. ``more_studies`` holds
    further (model, cluster, table) studies written side by side (the engine's several studies)."""
    run_dir = pathlib.Path(run_dir)
    out = run_dir / "results" / f"searcher={searcher}"
    out.mkdir(parents=True, exist_ok=True)
    (run_dir / "state").mkdir(exist_ok=True)
    studies = [(model, cluster, table), *more_studies]
    for k, (mod, clu, tab) in enumerate(studies):
        metrics = evaluate(mod, clu, tab)
        bounds = np.linspace(0, len(tab), parts + 1).astype(int)
        for p, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
            idx = np.arange(lo, hi)
            t = table_to_arrow(tab.take(idx), metrics.take(idx), run_id=run_id, model_name=mod.name,
                               cluster_name=clu.name, iteration=p, grid_index=idx if searcher == "grid" else None)
            t = t.replace_schema_metadata(_metadata(mod, clu))
            pq.write_table(t, out / f"part-{k:02d}-{p:06d}.parquet", compression="zstd")
    info = {"run_id": run_id, "command": "fixture", "searcher": searcher, "options": {"keep": "all"},
            "studies": [{"model": dataclasses.asdict(m), "cluster": dataclasses.asdict(c)} for m, c, _ in studies],
            "versions": {"plansweep": "0.1.0", "cost_model": costmodel.COST_MODEL_VERSION}}
    (run_dir / "run.json").write_text(json.dumps(info, indent=1))
    return run_dir


def seed000_table(num_gpus: int = 16, layers: int = 64, batch: int = 8192) -> StrategyTable:
    """Seed 000's grid: every (d, h, p) power-of-two factorisation of the GPUs with p | layers;
    micro-batch counts 2**k, k = 1 .. floor(log2(B/d)/2) - 1 for p > 1, and 1 for p = 1."""
    rows = []
    d = 1
    while d <= num_gpus:
        h = 1
        while d * h <= num_gpus:
            p = num_gpus // (d * h)
            if layers % p == 0:
                if p == 1:
                    ms = [1]
                else:
                    ms = [2 ** k for k in range(1, int(np.floor(np.log2(batch // d) / 2)))]
                rows += [(d, h, p, m) for m in ms]
            h *= 2
        d *= 2
    a = np.array(rows, dtype=np.int64)
    return StrategyTable.from_columns(dp=a[:, 0], tp=a[:, 1], pp=a[:, 2],
                                      micro_batch=batch // (a[:, 0] * a[:, 3]), global_batch=batch,
                                      schedule="gpipe")


def seed000_isolated_table(num_gpus: int = 16, batch: int = 8192, microbatches: int = 8) -> StrategyTable:
    """Seed 000's isolated scaling: one degree 1..num_gpus (powers of two), the others 1
    (pipeline with 8 micro-batches as in the seed, the others with 1)."""
    deg = 2 ** np.arange(int(np.log2(num_gpus)) + 1)
    one = np.ones_like(deg)
    dp = np.concatenate([deg, one, one])
    tp = np.concatenate([one, deg, one])
    pp = np.concatenate([one, one, deg])
    m = np.concatenate([one, one, np.full_like(deg, microbatches)])
    return StrategyTable.from_columns(dp=dp, tp=tp, pp=pp, micro_batch=batch // (dp * m),
                                      global_batch=batch, schedule="gpipe")
