"""Reading a run's results back: row counts and the best rows per study."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds


def open_results(results_dir: str) -> ds.Dataset | None:
    """The Parquet dataset under results/ (hive partition searcher=...), or None when empty."""
    if not os.path.isdir(results_dir):
        return None
    dataset = ds.dataset(results_dir, format="parquet", partitioning="hive")
    return dataset if dataset.files else None


def count_rows(results_dir: str) -> tuple[int, int]:
    dataset = open_results(results_dir)
    if dataset is None:
        return 0, 0
    return dataset.count_rows(), len(dataset.files)


def best_rows(results_dir: str, k: int, *, searcher: str | None = None) -> dict[tuple[str, str], pa.Table]:
    """The k feasible rows with the highest tokens/s of each (model, cluster) study."""
    dataset = open_results(results_dir)
    if dataset is None:
        return {}
    cond = pc.field("feasible")
    if searcher is not None:
        cond = cond & (pc.field("searcher") == searcher)
    keys = dataset.to_table(columns=["model", "cluster", "tokens_per_s"], filter=cond)
    out: dict[tuple[str, str], pa.Table] = {}
    if keys.num_rows == 0:
        return out
    studies = keys.group_by(["model", "cluster"]).aggregate([]).to_pylist()
    for s in studies:
        mask = pc.and_(pc.equal(keys["model"], s["model"]), pc.equal(keys["cluster"], s["cluster"]))
        tps = np.sort(pc.filter(keys["tokens_per_s"], mask).to_numpy())  # ascending
        threshold = float(tps[-min(k, len(tps))])  # the study's k-th largest: read rows at or above it
        rows = dataset.to_table(filter=cond & (pc.field("model") == s["model"]) & (pc.field("cluster") == s["cluster"])
                                & (pc.field("tokens_per_s") >= threshold))
        rows = rows.sort_by([("tokens_per_s", "descending")]).slice(0, k)
        out[(s["model"], s["cluster"])] = rows
    return out
