"""Transformer Engine's userbuffers (tensor-parallel communication overlap): one layer's exposed exchange by hand,
with and without the overlap, and the evaluator against the scalar reference with it on."""

import types

import numpy as np
import pytest

from costmodel import FRAMEWORKS, cluster_preset, evaluate, model_preset
from costmodel._frameworks import with_tp_comm_overlap
from costmodel._layer_compute import UB_CONFIGS, layer_costs, ub_exchange_s, ub_layer_tp_s
from costmodel._workloads import Transformer
from tests.test_reference import assert_rows_equal_reference, random_table

MS = 1e-3


def test_each_method_by_hand():
    # x = 3 ms of exchange over t = 4 ranks beside a GEMM of G = 2 ms, 132 SMs
    # ring: 3 sends of 1 ms, each beside a 0.5 ms GEMM chunk: 3 x 0.5 = 1.5 ms
    assert ub_exchange_s(("ring", 1, 0, False), 3 * MS, 2 * MS, 4, 132) == pytest.approx(1.5 * MS)
    # ring with set_sm_margin: the GEMM on 131 SMs, 2 x 132 / 131 ms; chunks 0.50382 ms; plus the 0.01527 ms taken
    g = 2 * MS * 132 / 131
    assert ub_exchange_s(("ring", 1, 0, True), 3 * MS, 2 * MS, 4, 132) == pytest.approx(
        3 * (1 * MS - g / 4) + (g - 2 * MS))
    # pipeline, 4 splits, 16 SMs without margin: held = min(3, 2) x 16 / 116 ms = 0.27586 ms; the last chunk's
    # 0.75 ms bare, 3 x (0.75 - 2.27586 / 4) = 0.54310 ms more
    held = 2 * MS * 16 / 116
    assert ub_exchange_s(("pipeline", 16, 4, False), 3 * MS, 2 * MS, 4, 132) == pytest.approx(
        0.75 * MS + 3 * (0.75 * MS - (2 * MS + held) / 4) + held)
    # bulk, 16 SMs: 3 - 2.27586 = 0.72414 ms bare, plus the 0.27586 ms the SMs take: 1.0 ms
    assert ub_exchange_s(("bulk", 16, 0, False), 3 * MS, 2 * MS, 4, 132) == pytest.approx(1.0 * MS)
    # a GEMM longer than the exchange hides a ring's sends entirely
    assert ub_exchange_s(("ring", 1, 0, False), 1 * MS, 8 * MS, 4, 132) == 0.0


def test_one_layer_by_hand():
    # A flop-bound GPU (utilisation 1 at every shape, unbounded HBM): each GEMM 2 M N K / peak.
    gpu = types.SimpleNamespace(gemm_eff_max=1.0, gemm_half_dim=0.0, hbm_Bps=1e30, hbm_eff=1.0,
                                kernel_overhead_s=0.0)
    model = Transformer(name="hand", layers=1, hidden=1024, ffn_hidden=4096, heads=8, seq_len=4096, vocab=32000,
                        activation="gelu")
    T, t, peak, bw, lat = 4096.0, 4, 1e15, 50e9, 0.0
    # one all-gather or reduce-scatter of the rank's T h bf16 activation: 3/4 x 2 x 4096 x 1024 B / 50 GB/s
    x = 0.75 * 2 * 4096 * 1024 / 50e9  # 125.8 us
    # without the overlap: two all-reduces' bytes a layer's forward (Megatron's f and g), four such collectives
    plain = layer_costs(model, None, 1, np.array([t]), np.array([1]), np.array([True]), peak, gpu=gpu,
                        tp_link=(bw, lat), cp_link=(bw, lat))["tp_fwd"]
    assert plain[0] == pytest.approx(4 * x)
    G = {"qkv": 2 * T * 3 * 1024 / t * 1024 / peak, "proj": 2 * T * 1024 * 1024 / t / peak,
         "fc1": 2 * T * 4096 / t * 1024 / peak, "fc2": 2 * T * 1024 * 4096 / t / peak}

    def ring(Gk):  # 3 sends of x / 3, each beside a quarter of the GEMM
        return 3 * max(x / 3 - Gk / 4, 0.0)

    def bulk(Gk, m):  # the collective beside the whole GEMM, its m SMs of 132 taken while it runs
        held = min(x, Gk) * m / (132 - m)
        return max(x - Gk - held, 0.0) + held

    # Megatron-Bridge's fp8 configuration: every split exchange a ring (proj and fc2 forward leave 1 SM: margin)
    held_p, held_2 = G["proj"] / 131, G["fc2"] / 131
    fwd = ring(G["qkv"]) + ring(G["fc1"]) + 3 * max(x / 3 - (G["proj"] + held_p) / 4, 0.0) + held_p + 3 * max(
        x / 3 - (G["fc2"] + held_2) / 4, 0.0) + held_2
    bwd = ring(G["proj"]) + ring(G["fc2"]) + bulk(G["qkv"], 4) + bulk(G["fc1"], 2) + bulk(G["qkv"], 24) + bulk(
        G["fc1"], 4)
    f, b = ub_layer_tp_s(model, T, t, peak, gpu, bw, lat, 132, UB_CONFIGS["bridge-fp8"])
    assert f == pytest.approx(fwd, rel=1e-12) and b == pytest.approx(bwd, rel=1e-12)
    assert fwd < 4 * x  # the GEMM chunks (6-26 us against 126 us of exchange) hide a little of each


@pytest.mark.parametrize("framework", ["megatron-core", "megatron-bridge", "fsdp2"])  # fsdp2: DTensor's sp copies too
def test_evaluator_equals_reference_with_overlap(framework):
    fw = with_tp_comm_overlap(FRAMEWORKS[framework], True)
    assert all(fw.tp_comm_overlap)
    model, cl = model_preset("llama3-8b"), cluster_preset("h100x64")
    table = random_table(model, np.random.default_rng(5), 600, False)
    vec = evaluate(model, cl, table, framework=fw)
    assert_rows_equal_reference(model, cl, table, vec, fw)
    base = evaluate(model, cl, table, framework=with_tp_comm_overlap(fw, False))
    ok = np.isfinite(vec["step_time_s"]) & np.isfinite(base["step_time_s"])
    on = ok & (table["tp"] > 1) & (table["sequence_parallel"] > 0)
    assert on.any() and np.all(vec["tp_comm_s"][on] < base["tp_comm_s"][on])
    off = ok & ~on
    assert np.array_equal(vec["step_time_s"][off], base["step_time_s"][off])
