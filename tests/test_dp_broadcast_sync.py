"""ZeRO-1 whose weights are synced by one broadcast per shard owner (the internevo profile: InternEvo's
HybridZeroOptimizer at fa7337b), worked by hand.

An 8-layer MLP of 8192 x 8192 weights (8 x 8192^2 = 536,870,912 parameters, no bias) on 16 A100s in two
nodes of 8, dp 16, tp 1, bf16. The dp group has 8 ranks a node: NCCL's rings leave each node on its 8
ranks' NICs, min(8 x 25, 8 / 7 x 300) GB/s x link efficiency 0.8 = 160 GB/s; a ring step is 5 us inside a
node and 10 us across (the a100 presets), a ring pass over 16 ranks (16 - 2) x 5 + 1 x 10 = 80 us.
    gradients: one all-reduce of 2 bytes x 536,870,912 = 1,073,741,824 B in bf16 (one 512 Mi-element bucket;
        the model counts params / bucket + 1 = 2 calls): 2 x 15/16 x 1,073,741,824 / 160e9 = 12.582912 ms
        + 2 calls x 2 passes x 80 us = 320 us: 12.902912 ms (ring: NCCL's tree, 2 / 0.92 of the bytes, is slower)
    weights: 16 broadcasts, one from each rank of its 1/16 shard: together the all-gather's bytes,
        15/16 x 1,073,741,824 / 160e9 = 6.291456 ms, and 16 ring passes, 16 x 80 us = 1.28 ms: 7.571456 ms
"""

import dataclasses

import numpy as np
import pytest

from costmodel import FRAMEWORKS, StrategyTable, Transformer, evaluate, make_cluster

ALL_REDUCE_S = 2 * 15 / 16 * 1_073_741_824 / 160e9 + 2 * 2 * 80e-6
BROADCASTS_S = 15 / 16 * 1_073_741_824 / 160e9 + 16 * 80e-6


def _mlp():
    return Transformer(name="mlp", layers=8, hidden=8192, kind="mlp", activation="relu", norm="none", bias=False)


def _dp_comm(fw, zero, overlap):
    # 8192 rows a micro-batch: the backward (about 0.1 s) is far longer than the all-reduce
    t = StrategyTable.from_columns(dp=16, tp=1, pp=1, zero_stage=zero, overlap_dp=overlap, global_batch=16 * 8192,
                                   micro_batch=8192)
    m = evaluate(_mlp(), make_cluster("a100", 16), t, framework=fw)
    assert m["feasible"][0]
    return m["dp_comm_s"][0]


def test_hand_worked_figures():
    assert _mlp().num_params() == 536_870_912
    assert ALL_REDUCE_S == pytest.approx(12.902912e-3, rel=1e-12)
    assert BROADCASTS_S == pytest.approx(7.571456e-3, rel=1e-12)


def test_zero1_all_reduces_then_broadcasts_each_shard():
    # overlap off: everything exposed. ZeRO 0: the all-reduce alone (every rank updates the whole model, nothing to
    # sync); ZeRO 1: the all-reduce and the 16 broadcasts.
    assert _dp_comm("internevo", 0, False) == pytest.approx(ALL_REDUCE_S, rel=1e-12)
    assert _dp_comm("internevo", 1, False) == pytest.approx(ALL_REDUCE_S + BROADCASTS_S, rel=1e-12)


def test_broadcasts_pay_a_ring_pass_each_where_one_all_gather_pays_one():
    # The same exchange with the weights synced by one all-gather after the step (as DeepSpeed's): the same bytes,
    # 15 ring passes (15 x 80 us = 1.2 ms) fewer.
    one = dataclasses.replace(FRAMEWORKS["internevo"], name="internevo-one-gather", weight_sync_broadcasts=False)
    assert _dp_comm("internevo", 1, False) - _dp_comm(one, 1, False) == pytest.approx(15 * 80e-6, rel=1e-9)


def test_the_broadcasts_are_exposed_the_all_reduce_hidden():
    # overlap on: the all-reduce (12.9 ms) hides behind the last backward; the broadcasts run after the optimizer
    # step, every handle waited (fa7337b: broadcast_params(overlap=False)), so all 7.571456 ms are exposed; ZeRO 0
    # exposes nothing.
    assert _dp_comm("internevo", 1, True) == pytest.approx(BROADCASTS_S, rel=1e-12)
    assert _dp_comm("internevo", 0, True) == 0.0


def test_broadcast_latency_grows_with_the_square_of_the_group():
    # n broadcasts each of n - 1 ring steps: from 256 to 1,024 A100s (8 a node) the fixed part goes from
    # 256 x (224 x 5 + 31 x 10) us = 0.36608 s to 1024 x (896 x 5 + 127 x 10) us = 5.888 s, while the bytes' part
    # stays (n - 1) / n of the 1,073,741,824 B of weights at the node's 160 GB/s (6.69 ms).
    def exposed(n):
        t = StrategyTable.from_columns(dp=n, tp=1, pp=1, zero_stage=1, overlap_dp=True, global_batch=n * 8192,
                                       micro_batch=8192)
        return evaluate(_mlp(), make_cluster("a100", n), t, framework="internevo")["dp_comm_s"][0]

    for n, lat in ((256, 256 * (224 * 5 + 31 * 10) * 1e-6), (1024, 1024 * (896 * 5 + 127 * 10) * 1e-6)):
        assert exposed(n) == pytest.approx((n - 1) / n * 1_073_741_824 / 160e9 + lat, rel=1e-9), n
    np.testing.assert_allclose([256 * (224 * 5 + 31 * 10) * 1e-6, 1024 * (896 * 5 + 127 * 10) * 1e-6],
                               [0.36608, 5.888], rtol=1e-12)
