"""FSDP2's first and last units: the root's and block 0's all-gathers open the step with no forward before them, their
reduce-scatters close it with no backward after them (costmodel._data_parallel.last_exchange_parts under the fsdp2
profile's fsdp_unit_edges; pytorch 005da46 torch/distributed/_composable/fsdp/_fsdp_state.py: _root_pre_forward,
_root_post_backward_final_callback), worked by hand.

Llama 3 8B: 8,030,261,248 parameters, a layer 218,112,000, 32 layers; the root (embedding, untied output, final norm)
and block 0 hold 8,030,261,248 - 31 x 218,112,000 = 1,268,789,248, e = 0.1580010. fsdp2 gathers bf16 weights (2 bytes)
and reduce-scatters fp32 gradients (4): of a ZeRO-3 exchange X, the forward's gather and the reduce-scatter are
(2 + 4) / (2 x 2 + 4) = 0.75 X, so e x 0.75 X is exposed whatever the computation. The rest, hidden, slows the
computation beside it by the SM share f of its NCCL kernels (16 channels of an H100's 132 SMs across nodes).
"""

import dataclasses

import numpy as np
import pytest

from costmodel import StrategyTable, evaluate, make_cluster, model_preset
from costmodel._data_parallel import exposed_dp_s
from costmodel._frameworks import framework_preset

E = 1268789248 / 8030261248  # 0.1580010
F_H100 = 16 / 132


def test_exposed_edges_by_hand():
    model, fw = model_preset("llama3-8b"), framework_preset("fsdp2")
    assert E == pytest.approx(0.1580010, abs=1e-7)
    # ZeRO-3, m = 1, X = 0.8 s under m X_max = 1.0 s: gather 0.2 s, reduce-scatter 0.4 s, e x 0.6 = 0.0948006 s
    # exposed; the other 0.7051994 s hidden
    got = exposed_dp_s(np.array([3]), True, 1, 1.0, 0.6, 0.1, np.array([0.8]), F_b=0.3, fw=fw, prec=0, model=model,
                       pp=1)
    assert got[0] == pytest.approx(0.0948006, abs=1e-7)
    # with the SM share: + 16/132 x 0.7051994 = 0.0854787 s, 0.1802793 s in all
    got = exposed_dp_s(np.array([3]), True, 1, 1.0, 0.6, 0.1, np.array([0.8]), F_b=0.3, fw=fw, prec=0, model=model,
                       pp=1, sm_share=F_H100)
    assert got[0] == pytest.approx(0.1802793, abs=1e-7)
    # pp 2 (the weights kept gathered over the step): no edge; torch.distributed.pipelining reduce-scatters after the
    # stage's last backward (Framework.pp_grad_sync_after_backward): the reduce-scatter's 0.4 s exposed, the gather's
    # 0.2 s behind the first forward's 0.3 s
    got = exposed_dp_s(np.array([3]), True, 1, 1.0, 0.6, 0.1, np.array([0.8]), F_b=0.3, fw=fw, prec=0, model=model,
                       pp=np.array([2]))
    assert got[0] == pytest.approx(0.4)
    behind = dataclasses.replace(fw, pp_grad_sync_after_backward=False)  # the exchange hidden behind B + W: 0 s
    got = exposed_dp_s(np.array([3]), True, 1, 1.0, 0.6, 0.1, np.array([0.8]), F_b=0.3, fw=behind, prec=0,
                       model=model, pp=np.array([2]))
    assert got[0] == 0.0


def _dp_comm(fw, model):
    """dp_comm_s of Llama 3 8B at ZeRO-3, dp 16 (two H100 nodes of 8), tp 1, pp 1, one micro-batch of 1 sequence."""
    t = StrategyTable.from_columns(dp=16, tp=1, pp=1, zero_stage=3, global_batch=16, micro_batch=1,
                                   recompute="selective", sequence_parallel=False)
    m = evaluate(model, make_cluster("h100", 16), t, framework=fw)
    assert m["feasible"][0]
    return float(m["dp_comm_s"][0]), float(m["compute_s"][0])


def test_an_fsdp2_step_exposes_its_edges_on_top_of_the_sm_share():
    # X: the exchange itself (the same profile with the overlap off: exposed whole). Edges on, the exchange hidden
    # under the step's computation: e x 0.75 X + f x (X - e x 0.75 X) = (0.75 e (1 - f) + f) X = 0.2253492 X; edges
    # off: f X = 0.1212121 X.
    # (the exchange alone: FSDP2's copies beside it, in series with dp_comm_s, are tests/test_fsdp2_copies.py's)
    model = model_preset("llama3-8b")
    fw = dataclasses.replace(framework_preset("fsdp2"), ag_copy_out_bytes=0.0, rs_copy_in_bytes=(0.0, 0.0))
    x, compute = _dp_comm(dataclasses.replace(fw, overlap_dp=(False,)), model)
    assert 0 < x < compute  # hidden under the computation when overlapped
    on, _ = _dp_comm(fw, model)
    off, _ = _dp_comm(dataclasses.replace(fw, fsdp_unit_edges=False), model)
    assert 0.75 * E * (1 - F_H100) + F_H100 == pytest.approx(0.2253492, abs=1e-7)
    assert on == pytest.approx(0.2253492 * x, rel=1e-6)
    assert off == pytest.approx(F_H100 * x, rel=1e-9)
