"""What-ifs for the validation set's LLM Foundry A100 rows: how far each candidate explanation would move them.

    PYTHONPATH=. python benchmarks/llm_foundry_whatif.py

Analysis only: nothing here changes the shipped model. Each what-if patches one input in this
process and prices the A100 rows of tests/data/validation/published_runs.csv (source mosaicml/)
as `plansweep validate` does (costmodel._validate.predict):

- shipped:   the model as it is: the rows name llm-foundry-triton(-pure), whose "triton" kernel runs the
             causal half at its A100 rate calibrated apart from these rows (costmodel._hardware, BENCHMARKS.md), so the two kernel what-ifs below, which replace the "flash2" kernel's A100 rate, do
             not move them.
- fa2-a100:  causal attention at FlashAttention-2 rates on A100 (forward 197, backward 186 TFLOP/s,
             head dim 128, 16k tokens), times SUSTAINED_CLOCK as the Hopper rates are. The figures
             are a third party's reading of Dao 2023 (arXiv:2307.08691) Figs. 5-6, not checked
             against the paper's plots; and the A100 rows did not run FlashAttention-2 (below).
- triton:    the kernel the rows ran: llm-foundry's attn_impl default 'triton' (Tri Dao's
             flash_attn_triton.py) when the A100 tables were written (submit_benchmarks.py at
             b2a43a147, sweep.sh passes no --attn_impl). Dao 2023 Sec. 4.1: FlashAttention-2 is
             "around 1.3-1.5x faster than FlashAttention in Triton in the forward pass and around
             2x faster in the backward pass": fa2-a100's rates / 1.4 and / 2.
- clock-hpl: the A100's GEMM constant at the HPL sustained clock (0.93, costmodel._hardware's
             notes) instead of SUSTAINED_CLOCK (0.85), standard attention.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import costmodel._hardware as hw
import costmodel._reference as ref
import costmodel._stages as st
from costmodel._validate import predict, read_runs

CSV = Path(__file__).resolve().parents[1] / "tests/data/validation/published_runs.csv"
A100_PEAK = 312.0
_orig_kernel = hw.attention_kernel_eff


def _kernel(fwd: float, bwd: float):
    def eff(gpu_name: str, kernel: str) -> tuple[float, ...]:  # (one rate at every length of ATTN_SEQ_POINTS)
        if gpu_name.startswith("A100") and kernel == "flash2":
            return (3.0 / (1.0 / fwd + 2.5 / bwd) / A100_PEAK * hw.SUSTAINED_CLOCK,) * len(hw.ATTN_SEQ_POINTS)
        return _orig_kernel(gpu_name, kernel)
    return eff


def _rows() -> list:
    sources = [r["source"] for r in csv.DictReader(CSV.open())]
    return [run for s, run in zip(sources, read_runs(CSV), strict=True)
            if s.startswith("mosaicml") and run.cluster.gpu.name.startswith("A100")]


def _errors(kernel=None, clock=None) -> list[float]:
    st.attention_kernel_eff = ref.attention_kernel_eff = kernel or _orig_kernel
    out = []
    for run in _rows():
        if clock is not None:
            gpu = run.cluster.gpu
            gpu = dataclasses.replace(gpu, gemm_eff_max=gpu.gemm_eff_max * clock / hw.SUSTAINED_CLOCK)
            run = dataclasses.replace(run, cluster=dataclasses.replace(run.cluster, gpu=gpu))
        out.append(predict(run)["error_pct"])
    st.attention_kernel_eff = ref.attention_kernel_eff = _orig_kernel
    return out


CASES = {"shipped": {}, "fa2-a100": {"kernel": (197.0, 186.0)}, "triton": {"kernel": (197.0 / 1.4, 186.0 / 2.0)},
         "clock-hpl": {"clock": 0.93}}


def main() -> None:
    if len(sys.argv) > 1:  # one case (the pools' kernel rates are cached per process: one process a case)
        case = CASES[sys.argv[1]]
        kernel = _kernel(*case["kernel"]) if "kernel" in case else None
        print(json.dumps(_errors(kernel, case.get("clock"))))
        return
    cases = {name: json.loads(subprocess.run([sys.executable, __file__, name], capture_output=True, text=True,
                                             check=True).stdout) for name in CASES}
    print(f"{'run':34s} " + " ".join(f"{c:>10s}" for c in cases))
    for i, run in enumerate(_rows()):
        print(f"{run.name:34s} " + " ".join(f"{v[i]:+10.1f}" for v in cases.values()))
    print(f"{'mean |error|':34s} " + " ".join(f"{sum(abs(x) for x in v) / len(v):10.1f}" for v in cases.values()))


if __name__ == "__main__":
    main()
