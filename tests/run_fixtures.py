"""Test fixtures: small run directories in the results schema, without Ray or a Space.

It evaluates StrategyTables with costmodel.evaluate (any rows, e.g. seed 000's exact grid, or
uneven stages) and writes RUN_DIR/run.json and RUN_DIR/results/searcher=<name>/part-SS-UUUUUU.parquet
(zstd) with the engine's row encoder (sweep._results.to_arrow): readable strategy columns, the
metric columns, run_id / model / cluster / iteration / grid_index, and the model, cluster and
versions as JSON in the schema metadata. Real runs of the engine are tested in
tests/test_seed000_sweep.py.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from costmodel import StrategyTable, evaluate
from sweep._rundir import versions


def table_to_arrow(table: StrategyTable, metrics, *, run_id: str, model_name: str, cluster_name: str, iteration: int,
                   grid_index: np.ndarray | None, framework: str | None = None) -> pa.Table:
    """One Arrow table in the agreed schema, by the engine's own writer (sweep._results), so
    fixtures cannot drift from real runs (the searcher column comes from the partition)."""
    from sweep._results import to_arrow

    return to_arrow(table, metrics, run_id=run_id, model=model_name, cluster=cluster_name, iteration=iteration,
                    grid_index=grid_index, framework=framework)


def _metadata(model, cluster) -> dict[bytes, bytes]:
    return {
        b"plansweep.model": json.dumps(dataclasses.asdict(model)).encode(),
        b"plansweep.cluster": json.dumps(dataclasses.asdict(cluster)).encode(),
        b"plansweep.versions": json.dumps(versions()).encode(),
    }


def write_fixture_run(run_dir, model, cluster, table: StrategyTable, *, searcher: str = "grid",
                      run_id: str = "fixture", parts: int = 1,
                      more_studies: tuple = (), framework: str = "generic") -> pathlib.Path:
    """Evaluate ``table`` under ``framework`` and write a run directory; returns its path. ``more_studies`` holds
    further (model, cluster, table) studies written side by side (the engine's several studies). The default,
    generic, is the profile that runs seed 000's GPipe grid (Megatron-Core has no GPipe schedule)."""
    run_dir = pathlib.Path(run_dir)
    out = run_dir / "results" / f"searcher={searcher}"
    out.mkdir(parents=True, exist_ok=True)
    (run_dir / "state").mkdir(exist_ok=True)
    studies = [(model, cluster, table), *more_studies]
    for k, (mod, clu, tab) in enumerate(studies):
        metrics = evaluate(mod, clu, tab, framework=framework)
        bounds = np.linspace(0, len(tab), parts + 1).astype(int)
        for p, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
            idx = np.arange(lo, hi)
            t = table_to_arrow(tab.take(idx), metrics.take(idx), run_id=run_id, model_name=mod.name,
                               cluster_name=clu.name, iteration=p, grid_index=idx if searcher == "grid" else None, framework=framework)
            t = t.replace_schema_metadata(_metadata(mod, clu))
            pq.write_table(t, out / f"part-{k:02d}-{p:06d}.parquet", compression="zstd")
    info = {"run_id": run_id, "command": "fixture", "searcher": searcher, "options": {"keep": "all"},
            "studies": [{"model": dataclasses.asdict(m), "cluster": dataclasses.asdict(c)} for m, c, _ in studies],
            "versions": versions()}
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
