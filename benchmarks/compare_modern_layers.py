"""The cost model's per-layer activation bytes against one block measured on a GPU (the CSV that
benchmarks/gpu_modern_layers.py writes), flagging every row more than 5% apart.

    PYTHONPATH=. python3 benchmarks/compare_modern_layers.py DIR/layers_measured.csv

The measured blocks copy torchtitan's layer code run eagerly, so each row is priced under the fsdp2-eager profile
(Framework.layer_saves "torchtitan"): what one layer keeps per micro-batch is costmodel._layer_terms.framework_terms'
act_L (the dense block: costmodel._memory_terms.torchtitan_saved_bytes) or moe_act_L (the MoE block: the dense
block's norm and attention terms plus moe_layer_activation_bytes' expert part), under the row's recompute choice
through costmodel._memory_terms.activation_bytes: none keeps act_L, full the block's input, selective the profile's
policy's sel_kept (torchtitan's per-op policy: costmodel._layer_compute.op_checkpoint_products for a dense layer,
op_checkpoint_moe_products for an MoE layer, whose all-to-alls' saved results (moe_a2a_L, ep > 1) are left out: the
one-GPU block runs none). One tensor-parallel rank without sequence parallelism (sp off), no context parallelism,
expert tensor parallelism 1, the row's expert-parallel degree.

The measurement (act_bytes) counts what the forward allocated and still holds, less the output; the block's input
was allocated before it. Without recompute no op of the block saves that input (the first norm saves its fp32 copy,
the residual add nothing), and the model does not count it; a checkpoint (full or selective) keeps it, and the
model counts it there, so input_bytes is added to the measurement for those rows.

Timed rows are also set beside the model's compute time of one layer (layer_terms' forward, and forward +
backward + weight gradients + recompute, no communication) on the GPU the file's first line names (H200, else H100),
each row's attention at its kernel's rate (flash: FlashAttention-2's, the profile's; cudnn: cuDNN's): printed for
reading, without a tolerance.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import statistics
import sys

import numpy as np

from costmodel import InputError, cluster_preset, model_preset
from costmodel._frameworks import FRAMEWORKS
from costmodel._hardware import ATTENTION_KERNELS, PRECISIONS, attention_kernel_eff
from costmodel._layer_compute import fp8_cast_columns
from costmodel._layer_terms import LAYER_INPUTS, framework_terms, layer_terms, moe_layer_inputs, shape_terms
from costmodel._memory_terms import activation_bytes

PROFILE = "fsdp2-eager"  # the profile whose layer code the measured blocks copy
TOLERANCE = 0.05  # |model / measured - 1| above this is flagged
NEEDED = ("label", "block", "model", "tp", "ep", "micro_batch", "seq", "recompute", "attention", "precision",
          "input_bytes", "act_bytes")
RECOMPUTE = ("none", "selective", "full")


def read_rows(path: str) -> list[dict]:
    """The CSV's rows (lines starting with # skipped); InputError naming the file where it cannot be read or lacks a
    column the comparison needs."""
    try:
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(line for line in fh if not line.startswith("#")))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError("FILE", "a readable CSV written by benchmarks/gpu_modern_layers.py",
                         f"{path}: {exc}") from None
    if not rows:
        raise InputError("FILE", "a CSV with a header and at least one row", f"{path}: no rows")
    missing = [c for c in NEEDED if c not in rows[0]]
    if missing:
        raise InputError("FILE", "the columns " + ", ".join(NEEDED), f"{path}: no column " + ", ".join(missing))
    return rows


def as_int(row: dict, col: str, path: str, line: int) -> int:
    try:
        return int(float(row[col]))
    except (TypeError, ValueError):
        raise InputError(f"{path} line {line} column {col}", "a number", row[col]) from None


def model_row(row: dict, path: str, line: int, cluster_name: str = "h100x8", profile: str = PROFILE) -> dict:
    """The cost model's terms for the row: the model, the recompute masks and framework_terms' columns (one row),
    on ``cluster_name``'s GPU (its bf16 rate; the activation bytes do not depend on it), under ``profile``."""
    try:
        model = model_preset(row["model"])
    except Exception:  # noqa: BLE001 -- any unknown name is the file's fault: say which
        raise InputError(f"{path} line {line} column model", "a model preset name", row["model"]) from None
    if row["recompute"] not in RECOMPUTE:
        raise InputError(f"{path} line {line} column recompute", " or ".join(RECOMPUTE), row["recompute"])
    if row["precision"] not in PRECISIONS:
        raise InputError(f"{path} line {line} column precision", " or ".join(PRECISIONS), row["precision"])
    s, b, t, ep = (as_int(row, c, path, line) for c in ("seq", "micro_batch", "tp", "ep"))
    model = dataclasses.replace(model, seq_len=s)
    fw, cluster = FRAMEWORKS[profile], cluster_preset(cluster_name)
    if row["attention"] in ATTENTION_KERNELS and row["attention"] != fw.attention_kernel:  # the row's own kernel's rate
        fw = dataclasses.replace(fw, attention_kernel=row["attention"])
    B, T, C, SP = np.array([b]), np.array([t]), np.array([1]), np.array([False])  # (1,) columns: one row
    prec = np.array([PRECISIONS.index(row["precision"])])
    moe = (np.array([ep]), np.array([1]), fw, prec) if model.is_moe else None
    fp8 = prec == PRECISIONS.index("fp8")
    attn_eff = np.array([attention_kernel_eff(cluster.gpu.name, fw.attention_kernel)])  # (1, 6), as the evaluator
    sh = shape_terms(model, cluster, B, T, C, SP, np.asarray(cluster.gpu.peak_flops)[prec], moe=moe,
                     casts=fp8_cast_columns(fw, fp8), peak16=cluster.gpu.peak_flops[0], attn_eff=attn_eff)
    return {"model": model, "ft": framework_terms(fw, model, sh, T, SP, prec),
            "full": np.array([row["recompute"] == "full"]), "sel": np.array([row["recompute"] == "selective"])}


def model_kept_bytes(row: dict, path: str, line: int, profile: str = PROFILE) -> float:
    """What the cost model says one layer keeps per micro-batch for the row (bytes), under ``profile``."""
    m = model_row(row, path, line, profile=profile)
    ft, pre = m["ft"], "moe_" if m["model"].is_moe else ""
    kept, _ = activation_bytes(m["full"], m["sel"], ft[pre + "act_L"], ft[pre + "sel_kept"], ft[pre + "sel_work"],
                               ft["T"], m["model"].hidden, np.array([1]))
    if pre and m["sel"][0] and FRAMEWORKS[profile].selective == "op":  # the one-GPU block runs no all-to-all:
        return float(kept[0] - ft["moe_a2a_L"][0])  # the results per-op checkpointing saves of them left out
    return float(kept[0])


def model_times_s(row: dict, path: str, line: int, cluster_name: str) -> tuple[float, float]:
    """The cost model's (forward, forward + backward) compute seconds of one layer for the row on ``cluster_name``'s
    GPU: layer_terms' compute (forward, backward, weight gradients) and recompute, no communication (the measured
    block runs none)."""
    m = model_row(row, path, line, cluster_name)
    ft = m["ft"]
    lc = moe_layer_inputs(ft, m["model"]) if m["model"].is_moe else {k: ft[k] for k in LAYER_INPUTS}
    lt = layer_terms(lc, m["full"], m["sel"])
    fwd = lt["F"] - lc["tp_fwd"] - lc["cp_fwd"] - lc.get("ep_fwd", 0.0)
    return float(fwd[0]), float((lt["compute"] + lt["recompute"])[0])


def compare(rows: list[dict], path: str) -> list[dict]:
    """One result a measured row: label, model and measured bytes, their ratio, flagged; rows without a memory
    reading (an error, the CPU dry run, the deadline) are returned with ratio None."""
    out = []
    for line, row in enumerate(rows, start=2):
        if row.get("error") or row["act_bytes"] in ("", None):
            out.append({"label": row["label"], "ratio": None, "why": row.get("error") or "no memory reading"})
            continue
        measured = as_int(row, "act_bytes", path, line)
        if row["recompute"] != "none":  # the checkpoint keeps the block's input
            measured += as_int(row, "input_bytes", path, line)
        model = model_kept_bytes(row, path, line)
        ratio = model / measured if measured > 0 else float("inf")
        out.append({"label": row["label"], "block": row["block"], "recompute": row["recompute"],
                    "attention": row["attention"], "precision": row["precision"], "model_bytes": model,
                    "measured_bytes": measured, "ratio": ratio, "flag": abs(ratio - 1.0) > TOLERANCE})
    return out


def compare_times(rows: list[dict], path: str, cluster_name: str) -> list[tuple[str, float, float]]:
    """(label, model / measured forward, model / measured forward + backward) of the timed rows (fp8 rows with the
    profile's casts to fp8)."""
    out = []
    for line, row in enumerate(rows, start=2):
        if row.get("error") or row.get("fwd_s") in ("", None):
            continue
        fwd, fb = model_times_s(row, path, line, cluster_name)
        out.append((row["label"], fwd / float(row["fwd_s"]), fb / float(row["fwd_bwd_s"])))
    return out


def report(results: list[dict]) -> None:
    print(f"{'row':52s} {'model MiB':>10s} {'measured':>10s} {'model/meas':>10s}")
    for r in results:
        if r["ratio"] is None:
            print(f"{r['label']:52s} {'':>10s} {'':>10s} {'':>10s}  not compared: {r['why']}")
            continue
        print(f"{r['label']:52s} {r['model_bytes'] / 2**20:10.1f} {r['measured_bytes'] / 2**20:10.1f} "
              f"{r['ratio']:10.3f}" + ("  > 5%" if r["flag"] else ""))
    done = [r for r in results if r["ratio"] is not None]
    groups = sorted({(r["block"], r["recompute"], r["attention"], r["precision"]) for r in done})
    print(f"\n{'block':6s} {'recompute':10s} {'attention':9s} {'precision':9s} {'rows':>5s} {'within 5%':>9s} "
          f"{'worst model/meas':>16s}")
    for g in groups:
        sub = [r for r in done if (r["block"], r["recompute"], r["attention"], r["precision"]) == g]
        worst = max(sub, key=lambda r: abs(r["ratio"] - 1.0))["ratio"]
        print(f"{g[0]:6s} {g[1]:10s} {g[2]:9s} {g[3]:9s} {len(sub):5d} {sum(not r['flag'] for r in sub):9d} "
              f"{worst:16.3f}")
    flagged = sum(r["flag"] for r in done)
    print(f"\n{len(done)} rows compared, {flagged} more than {TOLERANCE:.0%} apart, "
          f"{len(results) - len(done)} not compared")


def report_times(times: list[tuple[str, float, float]], cluster_name: str) -> None:
    if not times:
        return
    print(f"\ntimes, model on {cluster_name} / measured (no tolerance: for reading)")
    for label, f, fb in times:
        print(f"{label:52s} fwd {f:6.3f}  fwd+bwd {fb:6.3f}")
    for prec in PRECISIONS:
        sub = [t for t in times if t[0].endswith("-" + prec)]
        if sub:
            print(f"median {prec}: fwd {statistics.median(t[1] for t in sub):.3f}, "
                  f"fwd+bwd {statistics.median(t[2] for t in sub):.3f} over {len(sub)} rows")


def gpu_cluster(path: str) -> str:
    """The cluster preset whose GPU the file's first comment line names (H200 or else H100)."""
    with open(path) as fh:
        first = fh.readline()
    return "h200x8" if "H200" in first else "h100x8"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="The cost model's per-layer activation bytes (profile fsdp2-eager) "
                                             "against a CSV written by benchmarks/gpu_modern_layers.py.")
    ap.add_argument("csv", metavar="FILE", help="layers_measured.csv")
    args = ap.parse_args(argv)
    try:
        rows = read_rows(args.csv)
        report(compare(rows, args.csv))
        cluster_name = gpu_cluster(args.csv)
        report_times(compare_times(rows, args.csv, cluster_name), cluster_name)
    except InputError as exc:
        print(f"compare_modern_layers: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
