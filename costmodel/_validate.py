"""Predicted vs measured iteration time for published (or a user's own) training runs, and
fitting a GPU type's efficiency constants to such runs.

The measured-runs schema is ../shared/data/README.md's (one row per run). An empty cell means
the source did not say: the authors tuned it, so we take the value the cost model finds
best among the candidates below, and report which. Settings the schema has no column for
take Megatron-LM's defaults: no overlap of the data-parallel gradient exchange
(``--overlap-grad-reduce`` is opt-in), bf16.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path

import numpy as np

from costmodel._errors import InputError
from costmodel._evaluate import REASONS, evaluate
from costmodel._hardware import EFFICIENCY, Cluster, Efficiency, gpu_preset, make_cluster
from costmodel._strategy import StrategyTable
from costmodel._workloads import Transformer

REQUIRED = (
    "name", "gpu", "num_gpus", "gpus_per_node", "layers", "hidden", "ffn_hidden", "heads",
    "kv_heads", "seq_len", "vocab", "activation", "tp", "pp", "dp", "cp", "vpp", "global_batch",
    "micro_batch", "recompute", "sequence_parallel", "zero_stage", "measured_iteration_time_s",
)
# Candidates for cells the source left empty.
MICRO_BATCH_CANDIDATES = (1, 2, 4, 8, 16)
VPP_CANDIDATES = (1, 2, 3, 4, 5, 6, 8)
TUNABLE = ("vpp", "micro_batch", "recompute", "sequence_parallel", "zero_stage", "cp")


@dataclasses.dataclass(frozen=True)
class MeasuredRun:
    name: str
    model: Transformer
    cluster: Cluster
    fixed: dict  # strategy columns the source gave
    measured_s: float


def _int(row: dict, key: str, line: int) -> int | None:
    v = (row.get(key) or "").strip()
    if v == "":
        return None
    try:
        f = float(v)
    except ValueError:
        raise InputError(f"line {line}: {key}", "an integer", v) from None
    if f != int(f) or f < 0:
        raise InputError(f"line {line}: {key}", "a non-negative integer", v)
    return int(f)


def read_runs(path: str | Path, efficiency: dict[str, Efficiency] | None = None) -> list[MeasuredRun]:
    """Parse and validate a measured-runs CSV; raises InputError naming the line and column."""
    p = Path(path)
    if not p.is_file():
        raise InputError("FILE", "a readable CSV file", str(path))
    with p.open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(str(path), "the measured-runs columns of shared/data/README.md", f"missing {missing}")
        rows = list(reader)
    if not rows:
        raise InputError(str(path), "at least one run", "no rows")
    runs = []
    for line, row in enumerate(rows, start=2):
        need = {k: _int(row, k, line) for k in (
            "num_gpus", "gpus_per_node", "layers", "hidden", "ffn_hidden", "heads", "kv_heads",
            "seq_len", "vocab", "tp", "pp", "dp", "global_batch")}
        for k, v in need.items():
            if v is None:
                raise InputError(f"line {line}: {k}", "a value (this column may not be empty)", "")
        try:
            measured = float(row["measured_iteration_time_s"])
        except ValueError:
            raise InputError(
                f"line {line}: measured_iteration_time_s", "seconds", row["measured_iteration_time_s"]
            ) from None
        if not measured > 0:
            raise InputError(f"line {line}: measured_iteration_time_s", "a positive time", measured)
        gpu = gpu_preset(row["gpu"].strip(), efficiency=(efficiency or {}).get(gpu_preset(row["gpu"].strip()).name))
        model = Transformer(
            name=row["name"], layers=need["layers"], hidden=need["hidden"],
            ffn_hidden=need["ffn_hidden"], heads=need["heads"], kv_heads=need["kv_heads"],
            seq_len=need["seq_len"], vocab=need["vocab"], activation=row["activation"].strip().lower(),
            **({"norm": "rmsnorm", "bias": False, "tied_embeddings": False, "learned_positions": False}
               if row["activation"].strip().lower() == "swiglu" else {}),
        )
        cluster = make_cluster(gpu, need["num_gpus"], gpus_per_node=need["gpus_per_node"])
        fixed: dict[str, object] = {k: need[k] for k in ("tp", "pp", "dp", "global_batch")}
        for k in ("cp", "vpp", "micro_batch", "zero_stage"):
            v = _int(row, k, line)
            if v is not None:
                fixed[k] = v
        for k in ("recompute", "sequence_parallel"):
            v = (row.get(k) or "").strip().lower()
            if v:
                fixed[k] = v
        if fixed["tp"] * fixed["pp"] * fixed["dp"] * fixed.get("cp", 1) != need["num_gpus"]:
            raise InputError(f"line {line}: tp*pp*dp*cp", f"num_gpus={need['num_gpus']}",
                             fixed["tp"] * fixed["pp"] * fixed["dp"] * fixed.get("cp", 1))
        runs.append(MeasuredRun(row["name"], model, cluster, fixed, measured))
    return runs


def _candidates(run: MeasuredRun) -> StrategyTable:
    """Every combination of the unknown settings, the known ones fixed: one table."""
    f = run.fixed
    options: dict[str, tuple] = {
        "micro_batch": (f["micro_batch"],) if "micro_batch" in f else MICRO_BATCH_CANDIDATES,
        "vpp": (f["vpp"],) if "vpp" in f else VPP_CANDIDATES,
        "recompute": (f["recompute"],) if "recompute" in f else ("none", "selective", "full"),
        "sequence_parallel": (f["sequence_parallel"],) if "sequence_parallel" in f else ("false", "true"),
        "zero_stage": (f["zero_stage"],) if "zero_stage" in f else (0, 1),
        "cp": (f.get("cp", 1),),
    }
    grids = np.meshgrid(*[np.arange(len(o)) for o in options.values()], indexing="ij")
    cols = {k: np.asarray(o, dtype=object)[g.ravel()] for (k, o), g in zip(options.items(), grids, strict=True)}
    vpp = cols["vpp"].astype(np.int64)
    cols = {k: (np.asarray(v.tolist()) if k in ("recompute", "sequence_parallel") else v.astype(np.int64))
            for k, v in cols.items()}
    return StrategyTable.from_columns(
        dp=f["dp"], tp=f["tp"], pp=f["pp"], global_batch=f["global_batch"],
        schedule=np.where(vpp > 1, "interleaved", "1f1b"), overlap_dp=False, precision="bf16",
        **cols,
    )


def predict(run: MeasuredRun) -> dict:
    """The best prediction over the unknown settings, and which values it took."""
    table = _candidates(run)
    metrics = evaluate(run.model, run.cluster, table)
    i = int(np.argmin(metrics["step_time_s"]))
    t = float(metrics["step_time_s"][i])
    row = table.row(i)
    chosen = {k: row[k] for k in TUNABLE if k not in run.fixed}
    if "vpp" not in run.fixed:
        chosen["schedule"] = row["schedule"]
    result = {
        "name": run.name,
        "predicted_iteration_time_s": t,
        "measured_iteration_time_s": run.measured_s,
        "error_pct": 100.0 * (t - run.measured_s) / run.measured_s if math.isfinite(t) else math.inf,
        "chosen": chosen,
    }
    if not math.isfinite(t):
        result["reason"] = REASONS[int(np.bincount(metrics["reason"]).argmax())]
    return result


def validate(runs: list[MeasuredRun]) -> dict:
    rows = [predict(r) for r in runs]
    errs = np.array([abs(r["error_pct"]) for r in rows])
    return {
        "rows": rows,
        "mean_abs_error_pct": float(errs.mean()),
        "max_abs_error_pct": float(errs.max()),
    }


# ---- calibration ---------------------------------------------------------------------------
CALIBRATED = ("gemm_eff_max", "hbm_eff", "link_eff")


def _with_eff(run: MeasuredRun, eff: Efficiency) -> MeasuredRun:
    gpu = dataclasses.replace(run.cluster.gpu, **dataclasses.asdict(eff))
    return dataclasses.replace(run, cluster=dataclasses.replace(run.cluster, gpu=gpu))


def _loss(runs: list[MeasuredRun], eff: Efficiency) -> float:
    """Mean absolute percentage error of predicted vs measured time (what validate reports)."""
    errs = [abs(predict(_with_eff(r, eff))["error_pct"]) for r in runs]
    return float(np.mean(errs)) if all(map(math.isfinite, errs)) else math.inf


def calibrate(runs: list[MeasuredRun]) -> dict[str, Efficiency]:
    """Fit gemm_eff_max, hbm_eff and link_eff per GPU type by coordinate descent over
    multiplicative steps (each constant kept in (0, 1]), starting from the sourced defaults
    and accepting only steps that lower the mean absolute error: never worse than the start."""
    by_gpu: dict[str, list[MeasuredRun]] = {}
    for r in runs:
        by_gpu.setdefault(r.cluster.gpu.name, []).append(r)
    out = {}
    for name, group in by_gpu.items():
        g = group[0].cluster.gpu
        eff = Efficiency(**{f.name: getattr(g, f.name) for f in dataclasses.fields(Efficiency)})
        best = _loss(group, eff)
        for _sweep in range(3):
            for field in CALIBRATED:
                cur = getattr(eff, field)
                for factor in (0.6, 0.75, 0.85, 0.92, 0.97, 0.99, 1.01, 1.03, 1.08, 1.15, 1.3):
                    cand = dataclasses.replace(eff, **{field: min(cur * factor, 1.0)})
                    loss = _loss(group, cand)
                    if loss < best - 1e-12:
                        best, eff = loss, cand
        out[name] = eff
    return out


def write_hardware(path: str | Path, fitted: dict[str, Efficiency]) -> None:
    """Write fitted constants as JSON {gpu name: {constant: value}} (tmp file + rename)."""
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps({k: dataclasses.asdict(v) for k, v in fitted.items()}, indent=2) + "\n")
    tmp.replace(p)


def read_hardware(path: str | Path) -> dict[str, Efficiency]:
    """Read a --hardware file written by ``plansweep calibrate``."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise InputError("--hardware", "an existing JSON file", str(path)) from None
    except json.JSONDecodeError as exc:
        raise InputError("--hardware", "JSON written by plansweep calibrate", f"{path}: {exc.msg}") from None
    if not isinstance(data, dict):
        raise InputError("--hardware", "a JSON object {gpu: {constant: value}}", type(data).__name__)
    out = {}
    for name, consts in data.items():
        base = EFFICIENCY.get(gpu_preset(name).name)
        if not isinstance(consts, dict):
            raise InputError(f"--hardware {name}", "an object of constants", consts)
        unknown = set(consts) - {f.name for f in dataclasses.fields(Efficiency)}
        if unknown:
            names = ", ".join(f.name for f in dataclasses.fields(Efficiency))
            raise InputError(f"--hardware {name}", "constants among " + names, sorted(unknown)[0])
        out[gpu_preset(name).name] = dataclasses.replace(base, **{k: float(v) for k, v in consts.items()})
    return out
