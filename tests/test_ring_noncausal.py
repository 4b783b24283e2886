"""A context-parallel ring's off-diagonal steps run non-causal kernels (costmodel._hardware._NONCAUSAL_GAIN), each
against a hand calculation from the measured rates, in the vectorised layer cost (the scalar reference's copy is
checked against it on random rows by test_reference.py)."""

import numpy as np

from costmodel import cluster_preset, model_preset
from costmodel._hardware import (
    ATTENTION_KERNELS,
    SUSTAINED_CLOCK,
    attention_kernel_eff,
    attention_noncausal_gain,
)
from costmodel._layer_compute import layer_costs


def test_noncausal_gain_from_the_measured_csv():
    """The cuDNN gains are the medians of tests/data/h100_attention_measured.csv's 2 t_causal / t_full (forward +
    backward): at 2048 tokens the 12 rows' gains sorted ... 1.419, 1.510 ... give (1.419 + 1.510) / 2 = 1.46; at 8192
    the 4 rows' 1.108, 1.146, 1.182, 1.297 give (1.146 + 1.182) / 2 = 1.16."""
    import csv
    from pathlib import Path

    path = Path(__file__).parent / "data" / "h100_attention_measured.csv"
    rows = list(csv.DictReader(line for line in path.open() if not line.startswith("#")))
    t = {(r["label"], r["causal"]): float(r["fwd_bwd_s"]) for r in rows}
    for seq, want in ((2048, 1.46), (8192, 1.16)):
        gains = [2 * t[lab, "True"] / t[lab, "False"] for lab in {r["label"] for r in rows if int(r["seq"]) == seq}]
        assert abs(float(np.median(gains)) - want) < 0.006
    g = attention_noncausal_gain("H100-SXM5-80GB", "cudnn")
    assert g[2] == 1.46 and g[4] == 1.16 and g[5] == 1.0
    assert attention_noncausal_gain("A100-SXM4-80GB", "cudnn") == (1.0,) * 6
    assert attention_noncausal_gain("H100-SXM5-80GB", "flash2") == (1.0,) * 6


def test_ring_attention_time_by_hand():
    """Llama 3 8B (q 4096, 32 heads of 128), seq 8192, b 1, tp 1, cuDNN on an H100 SXM. At cp 2 a rank holds sc =
    4096 tokens: its causal share of the square is 2 b sc s q = 2 x 4096 x 8192 x 4096 = 2.749e11 FLOPs forward, and
    cuDNN's rate at 4k is 3 / (1 / 523 + 2.5 / 427) TFLOP/s x 0.85 (the table's pass rate, SUSTAINED_CLOCK). Half of it
    (1 / cp) in the causal diagonal kernel at that rate, half in non-causal kernels at 1.31 x it (the gain at 4k):
    attention = F / rate x (1/2 + 1/2 / 1.31) = F / rate x 0.88168. At cp 1 (sc = 8192, F = 2 x 8192 x 8192 x 4096,
    rate 3 / (1 / 597 + 2.5 / 493) x 0.85) no ring: F / rate."""
    model, cl = model_preset("llama3-8b"), cluster_preset("h100x8")
    peak16 = cl.gpu.peak_flops[0]
    k = ATTENTION_KERNELS.index("cudnn")
    eff = np.array([attention_kernel_eff(cl.gpu.name, kk) for kk in ATTENTION_KERNELS])[k][None, :]
    nc = np.array([attention_noncausal_gain(cl.gpu.name, kk) for kk in ATTENTION_KERNELS])[k][None, :]
    one = np.array([1.0])
    for c, sc, (f, b), ring in ((2, 4096, (523, 427), 0.5 + 0.5 / 1.31), (1, 8192, (597, 493), 1.0)):
        lc = layer_costs(model, cl, one, one, np.array([float(c)]), np.array([False]), peak16, attn_eff=eff,
                         attn_nc=nc)
        rate = 3.0 / (1.0 / f + 2.5 / b) * 1e12 * SUSTAINED_CLOCK
        want = 2.0 * sc * 8192 * 4096 / rate * ring
        np.testing.assert_allclose(lc["attn"], want, rtol=1e-9)
