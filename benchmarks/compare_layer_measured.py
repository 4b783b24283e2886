"""The cost model's one-layer terms against one layer measured on an H100
(tests/data/h100_layer_measured.csv, written by benchmarks/gpu_layer_sweep.py).

    PYTHONPATH=. python benchmarks/compare_layer_measured.py

Per row: forward and forward + backward compute of one tensor-parallel rank (no communication:
costmodel._layer_compute.layer_costs' GEMM, attention, element-wise and overhead terms), and the
activation bytes one layer keeps per micro-batch (costmodel._memory_terms.layer_activation_bytes: with
its attention-score term, and without it), against the measurement plus the layer's input
(the measurement leaves out the input, allocated before the layer ran; the model counts it).
"""

from __future__ import annotations

import csv
import dataclasses
import pathlib

import numpy as np

from costmodel import cluster_preset, model_preset
from costmodel._layer_compute import ELEM_BWD_FACTOR, layer_costs
from costmodel._memory_terms import layer_activation_bytes

DATA = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data" / "h100_layer_measured.csv"


def main() -> None:
    cluster = cluster_preset("h100x8")
    peak = cluster.gpu.peak_flops[0]
    with open(DATA) as fh:
        rows = list(csv.DictReader(line for line in fh if not line.startswith("#")))
    print(f"{'layer':22s} {'fwd ms':>14s} {'fwd+bwd ms':>15s} {'model/meas':>10s} | "
          f"{'act MiB meas':>12s} {'model':>8s} {'no scores':>9s}")
    for r in rows:
        model = model_preset(r["label"].rsplit("-t", 1)[0])  # "megatron-22b-t8-b1-unfused" -> megatron-22b
        s = int(r["seq"])
        model = dataclasses.replace(model, seq_len=s) if model.seq_len != s else model
        b, t = np.array([int(r["micro_batch"])]), np.array([int(r["tp"])])
        one, no_sp = np.array([1]), np.array([False])
        lc = layer_costs(model, cluster, b, t, one, no_sp, peak)
        fwd = lc["gemm"] + lc["attn"] + lc["elem"] + lc["overhead"]
        bwd = lc["gemm"] + 2.0 * lc["attn"] + ELEM_BWD_FACTOR * (lc["elem"] + lc["overhead"]) + lc["gemm"]
        act, score = layer_activation_bytes(model, b, t, one, no_sp)
        measured_act = float(r["act_bytes"]) + 2.0 * b[0] * s * model.hidden
        fb, mfb = float(r["fwd_bwd_s"]), float((fwd + bwd)[0])
        print(f"{r['label']:22s} {1e3 * float(r['fwd_s']):6.2f} {1e3 * fwd[0]:7.2f} {1e3 * fb:7.2f} {1e3 * mfb:7.2f} "
              f"{mfb / fb:10.3f} | {measured_act / 2**20:12.1f} {act[0] / 2**20:8.1f} {(act - score)[0] / 2**20:9.1f}")


if __name__ == "__main__":
    main()
