"""A head below 128 slows the measured fused attention kernels by the ratio Shah et al. 2024 publish between heads of
64 and 128 (costmodel._hardware._HEAD64_RATIO), checked against a hand calculation from those figures and through
costmodel.evaluate (the scalar reference's copy is checked against it on random rows by test_reference.py)."""

import dataclasses

import numpy as np
import pytest

from costmodel import StrategyTable, cluster_preset, evaluate, model_preset
from costmodel._hardware import ATTENTION_KERNELS, attention_head_dim_factor, attention_kernel_eff
from costmodel._layer_compute import layer_costs

H100 = "H100-SXM5-80GB"


def test_head_64_rate_by_hand_from_the_published_figures():
    """cuDNN at 4k tokens: forward 408 / 609 and backward 417 / 499 TFLOP/s at heads of 64 / 128 (Shah et al. 2024
    Figs. 4-5; ratios 0.670 and 0.836 to three places) on the table's causal rates at 4k, 523 forward and 427 backward:
    a pass's time per FLOP (1 / f + 2.5 / b) goes from 1/523 + 2.5/427 = 0.0077668 to 1/(523 x 0.670) + 2.5/(427 x
    0.836) = 0.0098572, a rate of 0.78794; FlashAttention-2 at 16k: 324 / 370 and 291 / 322 (0.876, 0.904) on 302 and
    285: 0.89615. At 91 (log2(128/91) = 0.4923 of the way to 64) the rate is 0.78794 ** 0.4923; at 128 and above, and
    off Hopper, unchanged."""
    assert attention_head_dim_factor(H100, "cudnn", 64)[3] == pytest.approx(0.78794, abs=1e-4)
    assert attention_head_dim_factor(H100, "flash2", 64)[5] == pytest.approx(0.89615, abs=1e-4)
    assert attention_head_dim_factor(H100, "cudnn", 91)[3] == pytest.approx(0.78794 ** 0.4923, abs=1e-4)
    assert attention_head_dim_factor(H100, "cudnn", 32) == attention_head_dim_factor(H100, "cudnn", 64)
    for args in ((H100, "cudnn", 128), (H100, "cudnn", 192), ("A100-SXM4-80GB", "cudnn", 64), (H100, "triton", 64)):
        assert attention_head_dim_factor(*args) == (1.0,) * 6


def test_evaluate_prices_heads_of_64_slower_by_that_rate():
    """Llama 3 8B against the same model with 64 heads of 64 (16 K/V heads: Q, K, V and every GEMM the same size):
    at its 8192 tokens, b 1, tp 1, no recompute, one layer's forward attention on cuDNN takes A seconds at heads of 128
    (layer_costs), A / r at 64, r at 8k from the published ratios 412 / 600 = 0.687 and 432 / 518 = 0.834 on the table's
    597 and 493: (1/597 + 2.5/493) / (1/(597 x 0.687) + 2.5/(493 x 0.834)) = 0.79192. A step of m = 8 micro-batches over
    32 layers runs it forward and twice backward: the step's compute is longer by 8 x 32 x 3 x A x (1 / r - 1), nothing
    else moving."""
    base = model_preset("llama3-8b")
    small = dataclasses.replace(base, name="llama3-8b-h64", heads=64, kv_heads=16, head_dim=64)
    assert small.core_hidden == base.core_hidden and small.kv_hidden == base.kv_hidden
    cl = cluster_preset("h100x8")
    table = StrategyTable.from_columns(dp=8, tp=1, pp=1, micro_batch=1, global_batch=64, recompute="none",
                                       zero_stage=1)
    k = ATTENTION_KERNELS.index("cudnn")
    eff = np.array([attention_kernel_eff(cl.gpu.name, kk) for kk in ATTENTION_KERNELS])[k][None, :]
    one = np.array([1.0])
    attn = layer_costs(base, cl, one, one, one, np.array([False]), cl.gpu.peak_flops[0], attn_eff=eff)["attn"][0]
    t128, t64 = (evaluate(m, cl, table, framework="megatron-core")["compute_s"][0] for m in (base, small))
    assert t64 - t128 == pytest.approx(8 * 32 * 3 * attn * (1 / 0.79192 - 1), rel=1e-4)
