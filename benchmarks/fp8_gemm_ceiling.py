"""The fp8 GEMM ceiling the H100 sweep implies, and what pricing fp8 GEMMs at it does to the validation set.

    PYTHONPATH=. python3 benchmarks/fp8_gemm_ceiling.py
    PYTHONPATH=. python3 benchmarks/fp8_gemm_ceiling.py --accum-sweep <files>/gemm_fp8_accum.csv

``--accum-sweep``: a GPU run's fp8 sweep with and without fast accumulation (benchmarks/gpu_gemm_sweep.py --fast-accum
both, run by benchmarks/run_on_gpu.sh): each mode's ceiling is fitted apart, and the set is priced at the mix the
frameworks run, the forward GEMM fast and the two backward GEMMs in full (FAST_SHARE of the GEMM work fast), its
ceiling over the bf16 sweep's.

The cost model prices an fp8 GEMM as a bf16 one at the fp8 peak: the same fraction of the peak (gemm_eff_max, the
bf16 MAMF fraction) and the same shape constant (gemm_half_dim). tests/data/h100_gemm_fp8_measured.csv (torch's
_scaled_mm, per-tensor scales, use_fast_accum off) and tests/data/h100_gemm_measured.csv (bf16) time the 96 GEMMs of a
GPT-3 175B and a Llama 3 70B layer on one H100. Fitted at the model's half-dimension (least squares in log time, the
burst clock, as tests/test_gemm_calibration.py compares them), each dtype's ceiling is printed, then their ratio, then
the validation set priced as `plansweep validate` prices it, with the Hopper GPUs' fp8 peak scaled by that ratio
(which is what a separate fp8 ceiling does to the GEMMs; the utilisation columns keep the nominal peak): the mean
|error|, the rows past 10% and 15%, and every row that moves.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import statistics
import sys
from pathlib import Path

import numpy as np

import costmodel._hardware as hardware
from costmodel._layer_compute import gemm_s
from costmodel._validate import predict, read_runs

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "tests/data/validation/published_runs.csv"
SWEEPS = {"bf16": (ROOT / "tests/data/h100_gemm_measured.csv", 0),
          "fp8": (ROOT / "tests/data/h100_gemm_fp8_measured.csv", 2)}
FAST_SHARE = 1.0 / 3.0  # forward GEMM fast; dgrad and wgrad in full (Transformer Engine, torchao)


def ceiling(path: Path, precision: int, fast: int | None = None) -> tuple[float, float, float]:
    """(fraction of the peak, mean |error|, max |error|) of the layer GEMMs at the model's half-dimension (``fast``:
    only the rows whose fast_accum column is that)."""
    with open(path) as fh:
        rows = [r for r in csv.DictReader(x for x in fh if not x.startswith("#"))
                if r["label"].startswith(("gpt3", "llama70")) and (fast is None or int(r["fast_accum"]) == fast)]
    M, N, K = (np.array([float(r[k]) for r in rows]) for k in "MNK")
    measured = np.array([float(r["time_s"]) for r in rows])
    h100 = hardware.gpu_preset("h100")
    best = None
    for frac in np.arange(0.55, 0.90, 0.0025):
        burst = dataclasses.replace(h100, gemm_eff_max=float(frac), hbm_eff=h100.hbm_eff / hardware.SUSTAINED_CLOCK)
        log_err = np.log(gemm_s(M, N, K, h100.peak_flops[precision], burst) / measured)
        score = float(np.mean(log_err ** 2))
        if best is None or score < best[0]:
            err = np.exp(log_err) - 1.0
            best = (score, float(frac), float(np.mean(np.abs(err))), float(np.max(np.abs(err))))
    return best[1:]


def errors(scale: float) -> dict[str, float]:
    """Every run's error (%) with the Hopper GPUs' fp8 peak times ``scale``."""
    original = hardware.gpu_preset

    def scaled(name, efficiency=None):
        gpu = original(name, efficiency)
        if gpu.name in hardware._HOPPER:
            gpu = dataclasses.replace(gpu, peak_flops=(*gpu.peak_flops[:2], gpu.peak_flops[2] * scale))
        return gpu

    held = [m for m in list(sys.modules.values()) if m is not None and getattr(m, "gpu_preset", None) is original]
    for m in held:
        m.gpu_preset = scaled
    try:
        return {run.name: predict(run)["error_pct"] for run in read_runs(CSV)}
    finally:
        for m in held:
            m.gpu_preset = original


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--accum-sweep", type=Path, help="a GPU run's gemm_fp8_accum.csv (fast_accum 0 and 1)")
    args = ap.parse_args()
    sweeps = dict(SWEEPS)
    if args.accum_sweep:
        sweeps = {"bf16": SWEEPS["bf16"], "fp8 full": (args.accum_sweep, 2, 0), "fp8 fast": (args.accum_sweep, 2, 1)}
    fits = {}
    for dtype, (path, precision, *fast) in sweeps.items():
        frac, mean, worst = ceiling(path, precision, *fast)
        fits[dtype] = frac
        print(f"{dtype}: ceiling {frac:.4f} of the peak at half-dim {hardware.GEMM_HALF_DIM['H100-SXM5-80GB']:.0f} "
              f"(burst), mean |error| {100 * mean:.1f}%, max {100 * worst:.1f}%")
    if args.accum_sweep:  # time-weighted: FAST_SHARE of the work at the fast ceiling
        fits["fp8"] = 1.0 / (FAST_SHARE / fits["fp8 fast"] + (1.0 - FAST_SHARE) / fits["fp8 full"])
        print(f"fp8 as the frameworks run it (forward fast): ceiling {fits['fp8']:.4f}")
    ratio = fits["fp8"] / fits["bf16"]
    print(f"fp8 / bf16 ceiling: {ratio:.3f}\n")
    base, fp8 = errors(1.0), errors(ratio)
    for label, e in (("as shipped", base), (f"fp8 peak x {ratio:.3f}", fp8)):
        v = list(e.values())
        print(f"{label:22s} mean |error| {statistics.mean(abs(x) for x in v):.2f}%, past 10%: "
              f"{sum(abs(x) > 10 for x in v)}, past 15%: {sum(abs(x) > 15 for x in v)} ({len(v)} runs)")
    print("\nrows that move:")
    for name in base:
        if abs(fp8[name] - base[name]) > 0.05:
            print(f"  {name:55s} {base[name]:+6.1f}% -> {fp8[name]:+6.1f}%")


if __name__ == "__main__":
    main()
