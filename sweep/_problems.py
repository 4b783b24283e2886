"""A study's problems: one entry per (model, cluster, framework, global batch, sequence length) of a run.

A run's studies (run.json: one per model, sequence length, cluster and global batch) times each study's frameworks
(its space's framework dimension, or its one framework) are its problems. For each problem: its best feasible plan
among the rows stored (by throughput, or by goodput in a run by goodput), the counts of every row its units
evaluated (each grid part's metadata, sweep._results.META_COUNTS, so a best:K run keeps them), and its time and cost
to train (costmodel._training_cost). Whole columns: one scan of the feasible rows, a per-problem arg-max in numpy.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping

import numpy as np
import pyarrow.compute as pc

from costmodel import DEFAULT_FRAMEWORK, InputError
from costmodel._training_cost import prices_table, training_cost
from sweep._results import META_COUNTS
from sweep._runview import GOODPUT_KEYS, RunView, goodput_columns, run_failure_model

PART_RE = re.compile(r"^part-(\d+)-(\d+)\.parquet$")
# A plan's strategy, as the entry's "best" object names it.
PLAN_COLUMNS = ("dp", "tp", "pp", "cp", "ep", "etp", "micro_batch", "microbatches", "schedule", "vpp", "recompute",
                "sequence_parallel", "zero_stage", "precision", "overlap_dp", "stage_layers", "stage_recompute")
METRICS = ("tokens_per_s", "tokens_per_s_low", "tokens_per_s_high", "mfu", "step_time_s", "mem_total_bytes")
KEYS = ("model", "cluster", "global_batch", "framework")


def _frameworks(space: Mapping) -> list[str]:
    for d in space.get("dims") or []:
        if d.get("name") == "framework":
            return list(d["choices"])
    return [(space.get("fixed") or {}).get("framework") or space.get("framework") or DEFAULT_FRAMEWORK]


def problem_keys(info: Mapping) -> list[dict]:
    """The run's problems in run.json's order (study, then framework): study index, model, cluster, gpu, num_gpus,
    framework, global_batch, seq_len."""
    studies = info.get("studies") if isinstance(info.get("studies"), list) else []
    if not studies:
        raise InputError("RUN_DIR", "a run whose run.json lists its studies (a sweep's or a search's)",
                         "no studies in run.json")
    out = []
    for i, s in enumerate(studies):
        model, cluster, space = (s.get(k) for k in ("model", "cluster", "space"))
        if not all(isinstance(x, dict) for x in (model, cluster, space)):
            raise InputError("RUN_DIR", "run.json studies with their model, cluster and space (as plansweep writes "
                             "them)", f"studies[{i}] without them")
        if "pools" in cluster:
            raise InputError("RUN_DIR", "a run on homogeneous clusters for --by problem", cluster.get("name"))
        batch = (space.get("fixed") or {}).get("global_batch")
        for fw in _frameworks(space):
            out.append({"study": i, "model": model.get("name"), "cluster": cluster.get("name"),
                        "gpu": (cluster.get("gpu") or {}).get("name"),
                        "num_gpus": int(cluster.get("nodes", 0)) * int(cluster.get("gpus_per_node", 0)),
                        "framework": fw, "global_batch": batch, "seq_len": model.get("seq_len")})
    return out


def problem_counts(view: RunView) -> dict[tuple[int, str], dict]:
    """(study index, framework) -> {rows, feasible, infeasible_reasons} summed over the grid parts' metadata (every
    row a unit evaluated, kept or not); {} for a run whose parts carry none (a search's)."""
    out: dict[tuple[int, str], dict] = {}
    for frag in view.dataset.get_fragments():
        m = PART_RE.match(os.path.basename(frag.path))
        meta = frag.physical_schema.metadata or {}
        if not m or META_COUNTS not in meta:
            continue
        for fw, c in json.loads(meta[META_COUNTS]).items():
            acc = out.setdefault((int(m.group(1)), fw), {"rows": 0, "feasible": 0, "infeasible_reasons": {}})
            acc["rows"] += c["rows"]
            acc["feasible"] += c["feasible"]
            for reason, n in c["reasons"].items():
                acc["infeasible_reasons"][reason] = acc["infeasible_reasons"].get(reason, 0) + n
    for acc in out.values():  # most frequent first
        acc["infeasible_reasons"] = dict(sorted(acc["infeasible_reasons"].items(), key=lambda kv: -kv[1]))
    return out


def _best_index(keys: list[np.ndarray], score: np.ndarray, tiebreak: np.ndarray) -> dict[tuple, int]:
    """Key tuple -> the row of highest ``score`` among the rows of that key (ties: the shorter step)."""
    if not len(score):
        return {}
    order = np.lexsort((tiebreak, -score))  # best first
    best: dict[tuple, int] = {}
    for i in order:
        k = tuple(col[i] for col in keys)
        if k not in best:
            best[k] = int(i)
    return best


def _plain(v):
    if isinstance(v, (np.floating, float)):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, np.ndarray):
        return [_plain(x) for x in v]
    return v


def problems(view: RunView, *, train_tokens: float, prices: Mapping[str, float]) -> list[dict]:
    """One entry per problem of the run (problem_keys' order): the keys, the counts, the best plan and its metrics,
    days_to_train, gpu_hours and usd (None where no plan is feasible or the GPU has no price; goodput-based in a run
    by goodput), the price per GPU-hour used."""
    from sweep._rundir import cluster_from_dict

    keys = problem_keys(view.info)
    counts = problem_counts(view)
    cols = [c for c in (*KEYS, *PLAN_COLUMNS, *METRICS, *GOODPUT_KEYS) if c in view.columns]
    rows = view.scan(list(dict.fromkeys(cols)), pc.field("feasible"))
    failure = run_failure_model(view)
    score = rows.column("tokens_per_s").to_numpy()  # (R,)
    extra: dict[str, np.ndarray] = {}
    if failure is not None and rows.num_rows:  # goodput per row, under its study's cluster
        good = np.zeros(rows.num_rows)
        ratio = np.zeros(rows.num_rows)
        cl = np.asarray(rows.column("cluster").to_pylist(), dtype=object)
        for s in view.info["studies"]:
            mine = np.flatnonzero(cl == s["cluster"]["name"])
            if len(mine):
                g = goodput_columns(rows.take(mine), cluster_from_dict(s["cluster"]), failure)
                good[mine], ratio[mine] = g["goodput_tokens_per_s"], g["goodput_ratio"]
        score, extra = good, {"goodput_tokens_per_s": good, "goodput_ratio": ratio}
    key_cols = [np.asarray(rows.column(k).to_pylist(), dtype=object) for k in KEYS]
    best = _best_index(key_cols, score, rows.column("step_time_s").to_numpy())
    data = {c: rows.column(c).to_numpy(zero_copy_only=False) for c in cols if c not in KEYS}
    out = []
    for p in keys:
        i = best.get((p["model"], p["cluster"], p["global_batch"], p["framework"]))
        c = counts.get((p["study"], p["framework"]))
        entry = {**p, **(c or {"rows": None, "feasible": None, "infeasible_reasons": {}})}
        entry["best"] = None if i is None else {k: _plain(data[k][i]) for k in PLAN_COLUMNS if k in data}
        for k in (*METRICS, *extra):
            src = extra if k in extra else data
            entry[k] = None if i is None or k not in src else _plain(src[k][i])
        out.append(entry)
    thr = np.array([e.get("goodput_tokens_per_s" if failure else "tokens_per_s") or np.nan for e in out])
    price = np.array([prices.get(e["gpu"], np.nan) for e in out])
    cost = training_cost(thr, [e["num_gpus"] for e in out], price, train_tokens)
    for j, e in enumerate(out):
        e.update(train_tokens=train_tokens, usd_per_gpu_hour=_plain(price[j]),
                 **{k: _plain(v[j]) for k, v in cost.items()})
    return out


def price_sources(entries: list[dict], prices: Mapping[str, float]) -> dict[str, dict]:
    """The price used for each GPU of ``entries``: {gpu: {usd_per_gpu_hour, provider, source, date}} (the shipped
    table's), or {"usd_per_gpu_hour", "source": "--gpu-hour-usd"} where the command line gave it."""
    table = prices_table()
    out = {}
    for gpu in dict.fromkeys(e["gpu"] for e in entries):
        if gpu not in prices:
            continue
        row = table.get(gpu)
        out[gpu] = dict(row) if row and row["usd_per_gpu_hour"] == prices[gpu] else {
            "usd_per_gpu_hour": prices[gpu], "source": "--gpu-hour-usd"}
    return out
