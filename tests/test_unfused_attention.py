"""Unfused attention's s x s scores through HBM (costmodel._layer_terms.unfused_score_s), against a hand calculation.

Megatron-LM's attention of 2021-2022 (megatron/model/transformer.py: baddbmm into the b a s s scores, the fused causal
softmax, attention dropout, bmm with V) moves every score element through HBM outside its two batched products: the
softmax kernel reads the lower triangle and writes the row (1 + 2 bytes forward, 1 + 1 + 2 backward), the dropout reads
2 and writes 2 and a one-byte mask (forward), reads 2 and the mask and writes 2 (backward): 8 bytes forward, 9
backward, a score element.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from costmodel import StrategyTable, evaluate, framework_preset, make_cluster
from costmodel._hardware import SUSTAINED_CLOCK
from costmodel._reference import evaluate_row
from costmodel._workloads import Transformer

# Narayanan et al. 2021 Table 1's 1.7B GPT: 24 layers, hidden 2304, 24 heads, sequence 2048, vocabulary 51200.
GPT_1_7B = Transformer(name="gpt-1.7B", layers=24, hidden=2304, heads=24, ffn_hidden=9216, seq_len=2048, vocab=51200)
# A100 80 GB: 2.039 TB/s at the element-wise rate's 0.9 streaming x the 0.85 sustained clock = 1.559835 TB/s.
HBM_BPS = 2.039e12 * 0.9 * SUSTAINED_CLOCK


def _step(fw, recompute, b):
    # Data parallel 32 (4 DGX A100 nodes), micro-batch b, one micro-batch a step (global batch 32 b).
    cols = dict(dp=32, tp=1, pp=1, micro_batch=b, global_batch=32 * b, recompute=recompute, zero_stage=0,
                sequence_parallel=False, schedule="1f1b")
    table, cl = StrategyTable.from_columns(**cols), make_cluster("a100", 32)
    step = float(evaluate(GPT_1_7B, cl, table, framework=fw)["step_time_s"][0])
    # the scalar reference prices the same bytes
    assert evaluate_row(GPT_1_7B, cl, table.row(0), framework=fw)["step_time_s"] == pytest.approx(step, rel=1e-9)
    return step


@pytest.mark.parametrize(("recompute", "b", "bytes_per_score"), [("full", 16, 8 + 9 + 8), ("full", 1, 8 + 9 + 8),
                                                                  ("selective", 1, 8 + 9 + 8), ("none", 1, 8 + 9)])
def test_unfused_scores_priced_at_hbm_rate_per_layer(recompute, b, bytes_per_score):
    generic = framework_preset("generic")
    assert not generic.fused_attention
    fused = dataclasses.replace(generic, name="generic-fused", fused_attention=True)
    # Score elements a layer and micro-batch: b x heads x s x s = 16 x 24 x 2048^2 = 1.61061e9 on one GPU (tp 1).
    scores = 16 * 24 * 2048 * 2048
    assert scores == pytest.approx(1.61061e9, rel=1e-5)
    # Full recompute: forward, its rerun and the backward, 25 bytes each: 40.27 GB a layer, 25.8 ms at 1.56 TB/s,
    # x 24 layers = 0.6195 s of the 1.7B row's 3.53 s measured step. Selective recompute reruns the attention core,
    # softmax and dropout with it: the same 25 bytes. No recompute: 17 bytes, 0.4213 s. Micro-batch 1 (the stored
    # scores of selective and no recompute fit at b = 1 only): a sixteenth.
    expected = {25: 0.61953, 17: 0.42128}[bytes_per_score] * b / 16
    assert 24 * bytes_per_score * scores * b / 16 / HBM_BPS == pytest.approx(expected, rel=1e-4)
    got = _step(generic, recompute, b) - _step(fused, recompute, b)
    assert got == pytest.approx(expected, rel=1e-3)


def test_fused_profiles_and_tensor_parallel_split_the_scores():
    # tp 4 keeps 6 of the 24 heads on a rank: a quarter of the score traffic (0.61953 / 4 s at full recompute);
    # a fused kernel (megatron-core) moves none.
    generic = framework_preset("generic")
    fused = dataclasses.replace(generic, name="generic-fused", fused_attention=True)
    cols = dict(dp=8, tp=4, pp=1, micro_batch=16, global_batch=128, recompute="full", zero_stage=0,
                sequence_parallel=False, schedule="1f1b")
    table = StrategyTable.from_columns(**cols)
    cl = make_cluster("a100", 32)
    step = [float(evaluate(GPT_1_7B, cl, table, framework=f)["step_time_s"][0]) for f in (generic, fused)]
    assert step[0] - step[1] == pytest.approx(0.61953 / 4, rel=1e-3)
    assert np.isfinite(step).all()
