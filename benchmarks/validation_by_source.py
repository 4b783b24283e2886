"""The wide validation set's error per source, under each row's framework profile.

    PYTHONPATH=. python benchmarks/validation_by_source.py [--framework NAME]

Rows are grouped by the first words of their `source` cell (tests/data/validation/README.md);
error is (predicted - measured) / measured iteration time, as `plansweep validate` reports it.
--framework prices every row under one profile instead of its own (e.g. generic: the model
before profiles).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
from pathlib import Path

import numpy as np

from costmodel._validate import predict, read_runs

CSV = Path(__file__).resolve().parents[1] / "tests/data/validation/published_runs.csv"
GROUPS = (("NVIDIA Megatron-LM README", "Megatron-LM README (Megatron-Core, H100)"),
          ("pytorch/torchtitan", "torchtitan (FSDP2/TP/PP/CP, H100 96GB)"),
          ("Trainy", "Trainy (torchtitan, H200)"),
          ("mosaicml/llm-foundry", "LLM Foundry (FSDP, A100/H100)"),
          ("NVIDIA-NeMo/Megatron-Bridge", "Megatron-Bridge (Megatron-Core, H100, FP8)"),
          ("BigScience", "BLOOM-176B (Megatron-DeepSpeed, A100)"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--framework", help="price every row under this profile instead of its own")
    args = ap.parse_args()
    sources = [r["source"] for r in csv.DictReader(CSV.open())]
    runs = read_runs(CSV)
    if args.framework:
        runs = [dataclasses.replace(r, framework=args.framework) for r in runs]
    res = [predict(r) for r in runs]
    print("| source | runs | priced | mean abs error | max | mean signed | predicted out of memory |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    rows = []
    for prefix, label in GROUPS:
        idx = [i for i, s in enumerate(sources) if s.startswith(prefix)]
        e = np.array([res[i]["error_pct"] for i in idx])
        ok = np.isfinite(e)
        oom = sum(1 for i in idx if res[i]["memory_fits"] is False)
        rows.append(e[ok])
        print(f"| {label} | {len(idx)} | {ok.sum()} | {np.abs(e[ok]).mean():.1f}% | {np.abs(e[ok]).max():.1f}% | "
              f"{e[ok].mean():+.1f}% | {oom} |")
    e = np.concatenate(rows)
    mem = [abs(r["memory_error_pct"]) for r in res if "memory_error_pct" in r]
    print(f"| all | {len(res)} | {e.size} | {np.abs(e).mean():.1f}% | {np.abs(e).max():.1f}% | {e.mean():+.1f}% | "
          f"{sum(1 for r in res if r['memory_fits'] is False)} |")
    print(f"memory: {len(mem)} runs publish it, mean |error| {np.mean(mem):.1f}%")


if __name__ == "__main__":
    main()
