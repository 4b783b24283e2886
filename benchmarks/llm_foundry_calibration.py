"""LLM Foundry's A100 rows that are not in the validation set, as measured runs (the calibration set of its Triton
attention kernel's A100 rate, costmodel._hardware's _ATTN_EFF), and the rate that fits them.

    python3 benchmarks/llm_foundry_calibration.py --readme README.md --write      # rebuild the CSV from the README
    PYTHONPATH=. python3 benchmarks/llm_foundry_calibration.py                    # mean |error| per rate

README.md: mosaicml/llm-foundry scripts/train/benchmarking/README.md at 8c8dd48 (`git show 8c8dd48:scripts/train/
benchmarking/README.md`). Rows: the tables 'A100 80GB ...' and 'A100 40GB ...', 8 or more GPUs, the MPT sizes the
validation set has (1b, 3b, 7b, 13b, 30b, 70b: their shapes from its rows), every row the validation set does not
hold (tests/data/validation/published_runs.csv, matched on size, GPU, GPUs and sequence length). Transcribed as the
validation rows are: DEFAULT -> llm-foundry-triton, PURE -> llm-foundry-triton-pure (the A100 tables' attn_impl
triton), FULL_SHARD -> ZeRO 3, SHARD_GRAD_OP -> ZeRO 2, activation checkpointing -> full recompute, tokens/s/GPU.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "validation"
OUT = DATA / "llm_foundry_calibration.csv"
SOURCE = ("mosaicml/llm-foundry scripts/train/benchmarking/README.md (MPT on MosaicML platform; repo commit 8c8dd48)")
SHAPES = {"1b": "mpt-1b-a100-8gpu-s2048", "3b": "mpt-3b-h100-256gpu-s2048", "7b": "mpt-7b-a100-8gpu-s2048",
          "13b": "mpt-13b-a100-8gpu-s8192", "30b": "mpt-30b-a100-8gpu-s2048", "70b": "mpt-70b-a100-64gpu-s2048"}
SHAPE_COLS = ("layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab", "activation")


def write(readme: Path) -> None:
    published = list(csv.DictReader((DATA / "published_runs.csv").open()))
    by_name = {r["name"]: r for r in published}
    held = {(r["name"].split("-")[1], r["gpu"], r["num_gpus"], r["seq_len"]) for r in published
            if r["source"].startswith("mosaicml")}
    rows, table = [], None
    for line in readme.read_text().splitlines():
        if line.startswith("## "):
            table = line[3:].strip() if line.startswith("## A100") else None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if table is None or len(cells) < 20 or cells[0] not in SHAPES:
            continue
        size, seq, gpus, gpu = cells[0], cells[1], cells[2], "a100" if "80" in cells[3] else "a100-40gb"
        if (size, gpu, gpus, seq) in held:
            continue
        base = by_name[SHAPES[size]]
        mp, shard, ckpt = cells[15], cells[16], cells[17] == "True"
        rows.append({**dict.fromkeys(published[0]), **{k: base[k] for k in SHAPE_COLS}, "name":
                     f"lf-{size}-{gpu}-{gpus}gpu-s{seq}", "source": SOURCE,
                     "page": f"table '{table}', row {size} / seq {seq} / {gpus} GPUs",
                     "framework": "llm-foundry-triton-pure" if mp == "PURE" else "llm-foundry-triton", "gpu": gpu,
                     "num_gpus": gpus, "gpus_per_node": 8, "seq_len": seq, "tp": 1, "pp": 1, "dp": gpus, "cp": 1,
                     "vpp": "", "global_batch": cells[9], "micro_batch": cells[7],
                     "recompute": "full" if ckpt else "none", "sequence_parallel": "false",
                     "zero_stage": 3 if shard == "FULL_SHARD" else 2, "distributed_optimizer": "",
                     "precision": "bf16", "measured_iteration_time_s": "", "measured_tokens_per_s_per_gpu": cells[12],
                     "measured_mfu": f"{float(cells[4]) / 100:.4f}", "measured_hfu": f"{float(cells[5]) / 100:.4f}",
                     "note": f"{mp}; {shard}; gradient accumulation {cells[8]}; activation checkpointing {cells[17]}; "
                             f"shape as {SHAPES[size]}"})
    with OUT.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(published[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"{len(rows)} rows -> {OUT}")


def errors(rate: float | None, csv_path: Path = OUT) -> np.ndarray:
    """Per-row error (%) of the runs in ``csv_path`` with the Triton kernel's A100 rate (a fraction of the 16-bit
    peak, every length) at ``rate`` (None: as costmodel._hardware has it)."""
    import costmodel._hardware as hw
    import costmodel._stages as st
    from costmodel._validate import predict, read_runs

    saved = dict(hw._ATTN_EFF)
    if rate is not None:
        hw._ATTN_EFF.update({k: rate for k in saved if k[0] == "triton"})
    st._pool_arrays.cache_clear()
    try:
        return np.array([predict(run)["error_pct"] for run in read_runs(csv_path)])
    finally:
        hw._ATTN_EFF.update(saved)
        st._pool_arrays.cache_clear()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--readme", type=Path)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    if args.write:
        write(args.readme)
        return
    for rate in (None, *np.round(np.arange(0.24, 0.3801, 0.01), 2)):
        e = errors(rate)
        print(f"rate {'table' if rate is None else f'{rate:.2f}':>5s}: rows {len(e)}, mean |error| "
              f"{np.mean(np.abs(e)):5.2f}%, mean {np.mean(e):+6.2f}%, max |error| {np.max(np.abs(e)):5.1f}%")


if __name__ == "__main__":
    main()
