"""The computation beside a hidden collective runs on the SMs NCCL's kernel leaves it (costmodel._data_parallel.
compute_slowdown_s, costmodel._nccl.ring_channels), worked by hand.

A collective of X seconds beside C seconds of computation whose kernel holds f of the SMs: the computation advances at
1 - f while the collective runs, so the window takes max(X, C + f X) where it took max(X, C); the step gains f X when
the collective is hidden (X <= C), max(f X - (X - C), 0) when it is not, nothing when no computation is beside it.
"""

import numpy as np
import pytest

import costmodel._block as block
from costmodel import StrategyTable, Transformer, evaluate, make_cluster
from costmodel._data_parallel import compute_slowdown_s, exposed_dp_s
from costmodel._frameworks import framework_preset
from costmodel._nccl import ring_channel_table, ring_channels

H100_SHARE = 16 / 132  # a dp group with 8 ranks on each of several H100 nodes: 16 channels of 132 SMs


def _window(X, C, f):
    """The timeline itself: the collective and the computation start together, the computation at 1 - f while the
    collective runs, at full rate after."""
    done_beside = (1 - f) * X  # computation done while the collective runs
    end = C / (1 - f) if C <= done_beside else X + (C - done_beside)
    return max(end, X) - max(X, C)


def test_slowdown_hidden_partly_hidden_and_exposed():
    f = H100_SHARE
    # hidden: X = 0.5 s under C = 0.8 s: 16/132 x 0.5 = 0.0606061 s
    assert compute_slowdown_s(f, 0.5, 0.0) == pytest.approx(0.0606061, abs=1e-7)
    assert _window(0.5, 0.8, f) == pytest.approx(0.0606061, abs=1e-7)
    # partly: X = 1.0 s, C = 0.95 s, e = 0.05 s: 0.1212121 - 0.05 = 0.0712121 s
    assert compute_slowdown_s(f, 1.0, 0.05) == pytest.approx(0.0712121, abs=1e-7)
    assert _window(1.0, 0.95, f) == pytest.approx(0.0712121, abs=1e-7)
    # mostly exposed: X = 1.0 s, C = 0.4 s, e = 0.6 s > f X: the computation ends inside the collective, no gain
    assert compute_slowdown_s(f, 1.0, 0.6) == 0.0
    assert _window(1.0, 0.4, f) == 0.0
    # whole columns, and no share no gain
    np.testing.assert_allclose(compute_slowdown_s(np.array([f, 0.0]), np.array([0.5, 0.5]), 0.0), [0.5 * f, 0.0])
    assert compute_slowdown_s(0.0, 0.5, 0.0) == 0.0


def test_ring_channels_follow_nccls_search_for_the_reference_nodes():
    # NVIDIA/nccl 5067397 search.cc / connect.cc, one NIC per GPU:
    #   H100 one node: 18 NVLinks x 20.6 GB/s = 370.8 GB/s at 60 GB/s a channel -> 6, duplicated twice -> 24
    #   H100 across nodes: a channel per NIC at 48 GB/s; 8 NICs: 8 (> 4 channels under 50 GB/s: not duplicated by
    #     ncclTopoDupChannels), x 2 in ncclTopoPostset -> 16; 1 NIC: 1 -> 2 -> 4; 2: 2 -> 4 -> 8; 4: 4 -> 8 -> 16
    #   A100 across nodes: a channel per 200 Gb/s NIC at 24 GB/s (< 25: not duplicated), x 2 -> 2 a rank on a node
    #   B200 one node: 18 x 40.1 GB/s = 721.8 GB/s at 90 GB/s -> 8, twice duplicated -> 32
    h100, a100, b200 = (ring_channel_table(n) for n in ("H100-SXM5-80GB", "A100-SXM4-80GB", "B200-HGX-180GB"))
    assert ring_channels(False, 8, *h100) == 24
    np.testing.assert_array_equal(ring_channels(True, np.array([1, 2, 4, 8]), *h100), [4, 8, 16, 16])
    np.testing.assert_array_equal(ring_channels(True, np.array([1, 8]), *a100), [2, 16])
    assert ring_channels(False, 4, *a100) == 24
    assert ring_channels(False, 8, *b200) == 32


def test_exposed_exchange_grows_by_the_share_of_its_hidden_part_only():
    # generic, ZeRO 0-3, overlap on: exchange 0.3 s, B + W = 0.4 s, m X = 4 x 0.7 s: all hidden, each gains
    # 16/132 x 0.3 = 0.0363636 s
    zero, f = np.array([0, 1, 2, 3]), H100_SHARE
    got = exposed_dp_s(zero, True, 4, 0.7, 0.3, 0.1, np.full(4, 0.3), fw=framework_preset("generic"), sm_share=f)
    np.testing.assert_allclose(got, [0.0363636] * 4, atol=1e-7)
    # overlap off: the exchange runs beside no computation: exposed whole, no growth
    got = exposed_dp_s(zero, False, 4, 0.7, 0.3, 0.1, np.full(4, 0.3), fw=framework_preset("generic"), sm_share=f)
    np.testing.assert_array_equal(got, [0.3] * 4)
    # 0.9 s behind B + W = 0.4 s (ZeRO 0-2): 0.5 s exposed, f x 0.9 = 0.109 < 0.5: no growth; ZeRO-3 behind 2.8 s:
    # 16/132 x 0.9 = 0.1090909 s
    got = exposed_dp_s(zero, True, 4, 0.7, 0.3, 0.1, np.full(4, 0.9), fw=framework_preset("generic"), sm_share=f)
    np.testing.assert_allclose(got, [0.5, 0.5, 0.5, 0.1090909], atol=1e-7)


def _mlp():
    return Transformer(name="mlp", layers=8, hidden=8192, kind="mlp", activation="relu", norm="none", bias=False)


def _step_and_comm(tp, dp, overlap, monkeypatch=None):
    t = StrategyTable.from_columns(dp=dp, tp=tp, pp=1, zero_stage=3, overlap_dp=overlap, global_batch=dp * 8192,
                                   micro_batch=8192, sequence_parallel=False)
    m = evaluate(_mlp(), make_cluster("h100", dp * tp), t, framework="generic")
    assert m["feasible"][0]
    return m["step_time_s"][0], m["dp_comm_s"][0]


def test_an_fsdp_row_gains_the_share_of_its_hidden_exchange(monkeypatch):
    # ZeRO-3 MLP (536,870,912 parameters, 8192 rows a micro-batch: about 0.2 s of backward, far longer than the
    # exchange) on 16 H100s in two nodes of 8, dp 16: the gathers and reduce-scatters hide under the computation, so
    # the model without the term prices 0 s of exposed exchange; with it the step grows by 16/132 x the exchange X
    # (costmodel._block.dp_sm_share), X priced as before. tp 8 x dp 2 on the same nodes: one rank of the dp group a
    # node, 4 channels, 4/132 x X.
    step, comm = _step_and_comm(1, 16, True)
    step_t, comm_t = _step_and_comm(8, 2, True)
    monkeypatch.setattr(block, "dp_sm_share", lambda rows: 0.0)
    step0, comm0 = _step_and_comm(1, 16, True)
    step0_t, comm0_t = _step_and_comm(8, 2, True)
    assert comm0 == 0.0 and comm0_t == 0.0  # all hidden
    # the exchange itself, overlap off (exposed whole, priced as before)
    x, x_t = _step_and_comm(1, 16, False)[1], _step_and_comm(8, 2, False)[1]
    assert comm == pytest.approx(16 / 132 * x, rel=1e-12)
    assert step - step0 == pytest.approx(16 / 132 * x, rel=1e-9)
    assert comm_t == pytest.approx(4 / 132 * x_t, rel=1e-12)
    assert step_t - step0_t == pytest.approx(4 / 132 * x_t, rel=1e-9)


def test_a_fully_exposed_exchange_does_not_move(monkeypatch):
    # overlap off: the exchange runs between the computations, beside none: step and dp_comm as without the term
    step, comm = _step_and_comm(1, 16, False)
    monkeypatch.setattr(block, "dp_sm_share", lambda rows: 0.0)
    assert (step, comm) == _step_and_comm(1, 16, False)
