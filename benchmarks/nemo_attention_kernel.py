"""NeMo's long-sequence Llama 2 7B runs priced with cuDNN's fused attention and with FlashAttention-2.

    PYTHONPATH=. python3 benchmarks/nemo_attention_kernel.py

The runs of NVIDIA/NeMo docs/source/performance/performance_long_sequence.md (table 'LLAMA2-7B (FP8) - H100',
container NeMo 24.03.01) are in the validation set at 256k-1M tokens (cp 8-32); the same table gives the layouts and
TFLOP/s of its runs at 4k-128k (LONG_SEQUENCE_H100, not in the set). The launcher of that release exported
NVTE_FUSED_ATTN=0 to every job (NVIDIA/NeMo-Framework-Launcher launcher_scripts/conf/config.yaml env_vars, tag
24.03.01 5c7e280: "Disable cudnn FA until we've tested it more"; added 562dcb45, 2024-02-13, removed 04b8d098,
2024-08-29, still in tag 24.07), and Transformer Engine's DotProductAttention then runs FlashAttention (the flash-attn
package) where it would have chosen cuDNN on Hopper, under context parallelism too (attention.py, tags v1.3-v1.6).

Every row is priced as `plansweep validate` prices it, under its megatron-core profile (attention_kernel "cudnn")
and under the same profile with attention_kernel "flash2" (costmodel._hardware's FlashAttention-2 Hopper rates).
``core x`` is the factor on the attention core (layer_costs's ``attn`` term, the ring's exchange still overlapped
with it as priced) at which the predicted step equals the published one. The last table is the validation set's
mean |error| with the flash2 profile on three reaches of the launcher's setting: the long-sequence rows, those and
the NeMo 24.07 Nemotron-4 340B row (the 24.07 launcher's setting, no override in its recipe), and every NeMo row
(the 24.07 GPT-3 175B rows too: the launcher's 175B example set NVTE_FUSED_ATTN=1 only after the 24.07 tag,
95c77b59).
"""

from __future__ import annotations

import csv
import dataclasses
import sys
import tempfile
from pathlib import Path

import costmodel._layer_compute as layer_compute
from costmodel._validate import MeasuredRun, predict, read_runs
from validation_by_source import FP8, regime_of

CSV = Path(__file__).resolve().parents[1] / "tests/data/validation/published_runs.csv"
BASE_ROW = "nemo-llama2-7b-h100-256gpu-cp8-s256k"
# performance_long_sequence.md (NeMo 8cfedd7203), 'LLAMA2-7B (FP8) - H100', 'With CP' columns:
# (SeqLen K, GPUs, batch, TFLOP/s a GPU, TP, PP, DP, CP)
LONG_SEQUENCE_H100 = ((4, 4, 1024, 768, 1, 1, 4, 1), (8, 8, 512, 730, 1, 2, 4, 1), (16, 16, 256, 660, 2, 1, 8, 1),
                      (32, 32, 128, 610, 2, 1, 8, 2), (64, 64, 64, 574, 4, 1, 8, 2), (128, 128, 32, 555, 4, 1, 8, 4),
                      (256, 256, 16, 549, 4, 1, 8, 8), (512, 512, 8, 549, 8, 1, 4, 16),
                      (1024, 1024, 4, 536, 8, 1, 4, 32))
REACHES = (("the long-sequence rows", lambda name: name.startswith("nemo-llama2")),
           ("+ NeMo 24.07 Nemotron-4 340B", lambda name: name.startswith("nemo-llama2") or "nemotron4" in name),
           ("every NeMo row", lambda name: name.startswith("nemo-")))


@dataclasses.dataclass(frozen=True)
class Flash2Run(MeasuredRun):
    """A run priced under its profile with FlashAttention-2's rates in place of its attention kernel's."""

    def profile(self):
        return dataclasses.replace(super().profile(), attention_kernel="flash2")


def flash2(run: MeasuredRun) -> Flash2Run:
    return Flash2Run(**{f.name: getattr(run, f.name) for f in dataclasses.fields(MeasuredRun)})


def page_runs() -> list[MeasuredRun]:
    """LONG_SEQUENCE_H100's rows as measured runs: the set's 256k row with the table's length, layout and figure."""
    rows = list(csv.DictReader(CSV.open()))
    base = next(r for r in rows if r["name"] == BASE_ROW)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "long_sequence.csv"
        with path.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(base))
            w.writeheader()
            for k, n, batch, tflops, tp, pp, dp, cp in LONG_SEQUENCE_H100:
                w.writerow(dict(base, name=f"llama2-7b-{k}k-{n}gpu-cp{cp}", num_gpus=n, seq_len=k * 1024,
                                global_batch=batch, measured_tflops_per_gpu=tflops, tp=tp, pp=pp, dp=dp, cp=cp))
        return read_runs(path)


def core_factor(run: MeasuredRun) -> float:
    """The factor on layer_costs's ``attn`` term at which the predicted step equals the measured one (bisection)."""
    orig = layer_compute.layer_costs
    held = [m for m in list(sys.modules.values()) if m is not None and getattr(m, "layer_costs", None) is orig]
    lo, hi = 0.25, 4.0
    try:
        for _ in range(30):
            k = 0.5 * (lo + hi)

            def scaled(*args, _k=k, **kwargs):
                terms = dict(orig(*args, **kwargs))
                terms["attn"] = terms["attn"] * _k
                return terms
            for m in held:
                m.layer_costs = scaled
            res = predict(run)
            lo, hi = (k, hi) if res["predicted_iteration_time_s"] < res["measured_iteration_time_s"] else (lo, k)
    finally:
        for m in held:
            m.layer_costs = orig
    return 0.5 * (lo + hi)


def main() -> None:
    print(f"{'run':32s} {'meas s':>8s} | {'cudnn s':>8s} {'error':>7s} {'core x':>6s} | "
          f"{'flash2 s':>8s} {'error':>7s} {'core x':>6s}")
    for run in page_runs():
        a, b = predict(run), predict(flash2(run))
        print(f"{run.name:32s} {a['measured_iteration_time_s']:8.2f} | {a['predicted_iteration_time_s']:8.2f} "
              f"{a['error_pct']:+6.1f}% {core_factor(run):6.2f} | {b['predicted_iteration_time_s']:8.2f} "
              f"{b['error_pct']:+6.1f}% {core_factor(flash2(run)):6.2f}")
    runs = read_runs(CSV)
    heads = {"context parallel (cp > 1)": "cp", "tensor / pipeline parallel (tp or pp > 1)": "tp/pp",
             "deep pipeline (pp >= 16)": "deep-pp", "data parallel only (ZeRO 0-3, FSDP)": "dp-only",
             "MoE with expert parallelism": "MoE", FP8: "fp8"}
    print(f"\n{'flash2 on':30s} {'mean':>6s} " + " ".join(f"{h:>7s}" for h in heads.values()) + "  >10%  >15%")
    for label, reach in (("no row", lambda name: False), *REACHES):
        errs = [abs(predict(flash2(r) if reach(r.name) else r)["error_pct"]) for r in runs]
        means = []
        for regime in heads:
            sel = [e for r, e in zip(runs, errs, strict=True)
                   if (r.fixed.get("precision") == "fp8" if regime == FP8 else regime_of(r) == regime)]
            means.append(sum(sel) / len(sel))
        print(f"{label:30s} {sum(errs) / len(errs):5.2f}% " + " ".join(f"{m:6.2f}%" for m in means)
              + f"  {sum(e > 10 for e in errs):4d}  {sum(e > 15 for e in errs):4d}")

if __name__ == "__main__":
    main()
