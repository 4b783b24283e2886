"""Reading a run's results back: the best rows per study, and a short table for people."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

SHOWN = ("dp", "tp", "pp", "cp", "micro_batch", "schedule", "vpp", "recompute", "sequence_parallel",
         "zero_stage", "stage_layers")
HEADS = {"micro_batch": "mb", "sequence_parallel": "sp", "zero_stage": "zero", "stage_layers": "stages"}


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


def format_rows(rows: pa.Table) -> str:
    """A short fixed-width table of strategies and their headline metrics."""
    data = rows.to_pylist()
    placed = "stage_pool" in rows.column_names  # a heterogeneous run: degrees per stage, in "placement"
    cols = [c for c in SHOWN if (c != "stage_layers" or any(r.get(c) for r in data))
            and not (placed and c in ("dp", "tp", "micro_batch"))]
    width = {c: max(len(HEADS.get(c, c)), *(len(_cell(r.get(c))) for r in data)) for c in cols}
    head = f"{'#':>3} " + " ".join(f"{HEADS.get(c, c):>{width[c]}}" for c in cols)
    head += f" {'step s':>8} {'tokens/s':>11} {'MFU':>6} {'mem GB':>7}" + ("  placement" if placed else "")
    lines = [head]
    for i, r in enumerate(data, start=1):
        line = f"{i:>3} " + " ".join(f"{_cell(r.get(c)):>{width[c]}}" for c in cols)
        line += (f" {r['step_time_s']:8.3f} {r['tokens_per_s']:11,.0f} {100 * r['mfu']:5.1f}%"
                 f" {r['mem_total_bytes'] / 1e9:7.1f}")
        if placed:
            from sweep._cmd_show import format_placement

            line += "  " + format_placement(r)
        lines.append(line)
    return "\n".join(lines)


def _cell(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, list):
        return ",".join(map(str, v))
    return str(v)
