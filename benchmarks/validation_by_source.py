"""The validation set's error per source and per regime, each row under its own framework's profile.

    PYTHONPATH=. python3 benchmarks/validation_by_source.py [--framework NAME] [--rows]

Rows are grouped by the first words of their `source` cell (GROUPS; tests/data/validation/README.md lists the
sources); error is (predicted - measured) / measured iteration time, as `plansweep validate` reports it. The second
table groups the same rows by regime (REGIMES: a row's parallel layout, then fp8 as an overlay, then the
context-parallel rows split at the error bands' long-context length, costmodel._bands.LONG_CONTEXT). --framework prices
every row under one profile instead of its own (e.g. generic: the model before profiles); --rows also lists every row
worse than 10% and the rows whose empty cells the model chose.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
from pathlib import Path

import numpy as np

from costmodel._bands import LONG_CONTEXT
from costmodel._validate import MeasuredRun, predict, read_runs

CSV = Path(__file__).resolve().parents[1] / "tests/data/validation/published_runs.csv"
GROUPS = (("NVIDIA Megatron-LM README", "Megatron-LM README (Megatron-Core, H100)"),
          ("pytorch/torchtitan", "torchtitan (FSDP2/TP/PP/CP, H100 96GB)"),
          ("Trainy", "Trainy (torchtitan, H200)"),
          ("mosaicml/llm-foundry", "LLM Foundry (FSDP, A100/H100)"),
          ("NVIDIA-NeMo/Megatron-Bridge", "Megatron-Bridge (Megatron-Core, H100/B200/GB200, FP8, dense and MoE)"),
          ("BigScience", "BLOOM-176B (Megatron-DeepSpeed, A100)"),
          ("Jiang et al. 2024, MegaScale", "MegaScale's Megatron-LM runs (A100, 175B/530B, pp 8-35)"),
          ("InternLM/InternEvo", "InternEvo (data parallel ZeRO-1, A100, RoCE)"),
          ("Chen et al. 2024, AMSP", "AMSP's DeepSpeed runs (ZeRO-1/3, A800)"),
          ("NVIDIA/NeMo", "NeMo performance pages (H100, FP8, 175B/340B, CP 8-32)"),
          ("yanring/Megatron-MoE-ModelZoo", "Megatron-MoE-ModelZoo (Qwen3-235B, H100)"),
          ("NVIDIA/Megatron-LM megatron/core/transformer/moe", "Megatron-LM MoE README (Mixtral 8x7B, H100)"),
          ("DeepSeek-AI 2024", "DeepSeek-V3 report (H800, fp8)"),
          ("mlcommons/training_results", "MLPerf Training v3.1 (NeMo, GPT-3 175B, H100, 512-10,752 GPUs)"))
# A row's layout regime, the first that holds (a partition of the set), and fp8 as an overlay on top of it.
REGIMES = ("MoE with expert parallelism", "context parallel (cp > 1)", "deep pipeline (pp >= 16)",
           "tensor / pipeline parallel (tp or pp > 1)", "data parallel only (ZeRO 0-3, FSDP)")
FP8 = "fp8 (any layout)"


def group_of(source: str) -> str:
    """The GROUPS label of a row's source cell (ValueError for a source no prefix names)."""
    for prefix, label in GROUPS:
        if source.startswith(prefix):
            return label
    raise ValueError(f"no GROUPS entry for source {source[:60]!r}")


def regime_of(run: MeasuredRun) -> str:
    """The row's layout regime (REGIMES), from its model and the degrees its source published."""
    f = run.fixed
    if run.model.is_moe:
        return REGIMES[0]
    if f.get("cp", 1) > 1:
        return REGIMES[1]
    if f["pp"] >= 16:
        return REGIMES[2]
    if f["tp"] > 1 or f["pp"] > 1:
        return REGIMES[3]
    return REGIMES[4]


def _line(label: str, e: np.ndarray, oom: int) -> str:
    ok = np.isfinite(e)
    a = np.abs(e[ok])
    return (f"| {label} | {e.size} | {ok.sum()} | {a.mean():.1f}% | {a.max():.1f}% | {e[ok].mean():+.1f}% | "
            f"{int((a > 10).sum())} | {oom} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--framework", help="price every row under this profile instead of its own")
    ap.add_argument("--rows", action="store_true", help="list the rows worse than 10%% and the chosen cells")
    args = ap.parse_args()
    groups = [group_of(r["source"]) for r in csv.DictReader(CSV.open())]
    runs = read_runs(CSV)
    if args.framework:
        runs = [dataclasses.replace(r, framework=args.framework) for r in runs]
    res = [predict(r) for r in runs]
    err = np.array([r["error_pct"] for r in res])
    oom = np.array([r["memory_fits"] is False for r in res])
    head = ("| {} | runs | priced | mean abs error | max | mean signed | worse than 10% | predicted out of memory |\n"
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    print(head.format("source"))
    for _, label in GROUPS:
        idx = [i for i, g in enumerate(groups) if g == label]
        print(_line(label, err[idx], int(oom[idx].sum())))
    print(_line(f"all ({len(GROUPS)} sources)", err, int(oom.sum())))
    print()
    print(head.format("regime"))
    regime = [regime_of(r) for r in runs]
    for label in REGIMES:
        idx = [i for i, g in enumerate(regime) if g == label]
        print(_line(label, err[idx], int(oom[idx].sum())))
    idx = [i for i, r in enumerate(runs) if r.fixed.get("precision") == "fp8"]
    print(_line(FP8, err[idx], int(oom[idx].sum())))
    # the context-parallel layout's rows by their sequence: the error bands' long-context cut (costmodel._bands)
    for label, long in (("context parallel, sequences >= 64k tokens", True), ("context parallel, shorter", False)):
        idx = [i for i, r in enumerate(runs) if regime[i] == REGIMES[1] and (r.model.seq_len >= LONG_CONTEXT) == long]
        print(_line(label, err[idx], int(oom[idx].sum())))
    mem = [r for r in res if "memory_error_pct" in r]
    alloc = [abs(r["memory_error_pct"]) for r in mem if r.get("memory_measure") != "reserved"]
    above = [100.0 * (r["measured_memory_gb"] / r["predicted_memory_gb"] - 1.0) for r in mem
             if r.get("memory_measure") == "reserved"]  # (a reserved peak bounds the live tensors from above)
    print(f"\nmemory: {len(mem)} runs publish it, mean |error| {np.mean([abs(r['memory_error_pct']) for r in mem]):.1f}%"
          f"; {len(alloc)} allocated peak(s), mean |error| {np.mean(alloc) if alloc else float('nan'):.1f}%; "
          f"{len(above)} reserved peak(s), {np.mean(above) if above else float('nan'):.1f}% above the prediction on "
          f"average, {sum(a < 0 for a in above)} below")
    if args.rows:
        print("\nrows worse than 10%:")
        for i in np.argsort(-np.abs(np.nan_to_num(err, posinf=1e9))):
            if abs(err[i]) > 10:
                flag = "  (predicted out of memory)" if oom[i] else ""
                print(f"  {runs[i].name:48s} {err[i]:+8.1f}%  {regime[i]}{flag}")
        print("\nrows with cells the model chose (the source does not publish them):")
        for run, r in zip(runs, res, strict=True):
            moot = ({"vpp", "schedule"} if run.fixed["pp"] == 1 else set()) | (
                {"sequence_parallel"} if run.fixed["tp"] == 1 else set())  # a cell without effect on this layout
            chosen = {k: v for k, v in r["chosen"].items() if k not in moot}
            if chosen:
                print(f"  {run.name:48s} " + ", ".join(f"{k}={v}" for k, v in chosen.items()))


if __name__ == "__main__":
    main()
