"""The cost model's GEMM and one-layer terms against small models' layers measured on an H100
(tests/data/h100_small_*.csv, written by benchmarks/gpu_small_model_sweep.py).

    PYTHONPATH=. python benchmarks/compare_small_measured.py

Both tables compare at burst clock, as tests/test_gemm_calibration.py does: the measurement is a
burst at full clock, so the model's gemm_eff_max and hbm_eff are taken without the sustained-clock
derating (SUSTAINED_CLOCK). Ratios are model / measured: below 1, the model is fast.

GEMMs: gemm_s against each product's median time. Layers: one tensor-parallel rank's forward +
backward (costmodel._layer_compute.layer_costs: 3 x gemm, 3 x attention, (1 + ELEM_BWD_FACTOR) x
element-wise and kernel overhead, as benchmarks/compare_layer_measured.py adds them) against the
profiled kernels summed by kind (GEMM: nvjet / cutlass / gemm kernels; attention: the SDPA
kernels and their cuDNN helpers; the rest element-wise) and the layer's fwd+bwd wall time; "gap"
is wall time less the kernels' (launch and idle time, which kernel_overhead_s stands for). "cudnn": the
attention term at the cuDNN kernel's rates (costmodel._hardware.attention_kernel_eff, what Megatron-Core's profile
prices) instead of the standard formula; "w/ cudnn": the layer's total so.
"""

from __future__ import annotations

import csv
import dataclasses
import pathlib
from collections import defaultdict

import numpy as np

from costmodel import Transformer, cluster_preset
from costmodel._hardware import SUSTAINED_CLOCK, attention_kernel_eff
from costmodel._layer_compute import ELEM_BWD_FACTOR, gemm_s, layer_costs

DATA = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data"


def read(name):
    with open(DATA / name) as fh:
        return list(csv.DictReader(line for line in fh if not line.startswith("#")))


def kind(kernel: str) -> str:
    k = kernel.lower()
    if k.startswith("nvjet") or "gemm" in k or "cutlass" in k or "xmma" in k:
        return "gemm"
    if "sdpa" in k or "flash" in k or "fmha" in k or "cudnn" in k or "attention" in k:
        return "attn"
    return "other" if k.startswith("activity buffer") else "elem"


def main() -> None:
    cluster = cluster_preset("h100x8")
    g = cluster.gpu
    burst = dataclasses.replace(g, gemm_eff_max=g.gemm_eff_max / SUSTAINED_CLOCK, hbm_eff=g.hbm_eff / SUSTAINED_CLOCK)
    peak = g.peak_flops
    print("GEMMs (model / measured at burst clock)")
    by_model = defaultdict(list)
    for r in read("h100_small_gemm_measured.csv"):
        M, N, K = (float(r[k]) for k in "MNK")
        p = peak[2] if r["dtype"] == "fp8" else peak[0]
        ratio = float(gemm_s(M, N, K, p, burst)) / float(r["time_s"])
        by_model[(r["label"].split("-")[0], r["dtype"])].append(ratio)
        print(f"  {r['label']:26s} {r['dtype']} {int(M):6d} {int(N):6d} {int(K):6d} "
              f"{float(r['tflops']):7.1f} TF/s  model/meas {ratio:6.3f}")
    for (m, d), v in by_model.items():
        print(f"  {m:8s} {d}: mean model/meas {np.mean(v):.3f} (min {min(v):.3f}, max {max(v):.3f})")
    kern = defaultdict(lambda: defaultdict(float))
    for r in read("h100_small_layer_kernels.csv"):
        if r["kernel"] == "wall (events)":
            continue
        kern[r["label"]][kind(r["kernel"])] += float(r["device_s"])
    cudnn = np.array([attention_kernel_eff(g.name, "cudnn")]) / SUSTAINED_CLOCK
    print("\nOne layer fwd+bwd, ms: measured kernels by kind (wall, gap) | model at burst clock | model / measured")
    print(f"{'layer':22s} {'gemm':>6s} {'attn':>6s} {'elem':>6s} {'gap':>5s} {'wall':>6s} | {'gemm':>6s} "
          f"{'attn':>6s} {'cudnn':>6s} {'elem':>6s} {'ovh':>5s} {'total':>6s} | {'gemm':>5s} {'attn':>5s} "
          f"{'cudnn':>5s} {'elem':>5s} {'e+ovh':>5s} {'total':>5s} {'w/ cudnn':>8s}")
    for r in read("h100_small_layer_measured.csv"):
        h, s, t, b = int(r["hidden"]), int(r["seq"]), int(r["tp"]), int(r["micro_batch"])
        llama = r["llama"] == "True"
        a, kv = int(r["heads_local"]) * t, int(r["kv_heads_local"]) * t
        model = Transformer(name=r["label"], layers=1, hidden=h, heads=a, kv_heads=kv,
                            ffn_hidden=int(r["ffn_local"]) * t, seq_len=s, vocab=32000,
                            activation="swiglu" if llama else "gelu")
        arr = lambda v: np.array([v])  # noqa: E731
        lc = layer_costs(model, cluster, arr(b), arr(t), arr(1), arr(False), peak[0], gpu=burst)
        lc_cudnn = layer_costs(model, cluster, arr(b), arr(t), arr(1), arr(False), peak[0], gpu=burst, attn_eff=cudnn)
        mg, ma, mc = 3 * lc["gemm"][0], 3 * lc["attn"][0], 3 * lc_cudnn["attn"][0]
        me, mo = (1 + ELEM_BWD_FACTOR) * lc["elem"][0], (1 + ELEM_BWD_FACTOR) * float(lc["overhead"][0])
        k = kern[r["label"]]
        wall = float(r["fwd_bwd_s"])
        gap = wall - k["gemm"] - k["attn"] - k["elem"]
        mt = mg + ma + me + mo
        print(f"{r['label']:22s} {1e3 * k['gemm']:6.2f} {1e3 * k['attn']:6.2f} {1e3 * k['elem']:6.2f} {1e3 * gap:5.2f} "
              f"{1e3 * wall:6.2f} | {1e3 * mg:6.2f} {1e3 * ma:6.2f} {1e3 * mc:6.2f} {1e3 * me:6.2f} {1e3 * mo:5.2f} "
              f"{1e3 * mt:6.2f} | {mg / k['gemm']:5.2f} {ma / k['attn']:5.2f} {mc / k['attn']:5.2f} "
              f"{me / k['elem']:5.2f} {(me + mo) / (k['elem'] + gap):5.2f} {mt / wall:5.2f} "
              f"{(mt - ma + mc) / wall:8.2f}")


if __name__ == "__main__":
    main()
