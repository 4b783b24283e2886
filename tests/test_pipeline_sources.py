"""Micro-batches in flight per pipeline stage, held to the warm-up counts in the schedules' own code.

Each expected count below is the schedule code's formula worked by hand for the case, then divided by v (an interleaved
chunk is 1/v of a stage's micro-batch); the code and commits:

- Megatron-LM megatron/core/pipeline_parallel/schedules.py (d98e8a6): forward_backward_pipelining_without_interleaving
  runs min(p - i - 1, m) warm-up forwards (lines 2277-2278), then in the steady state one forward before each
  backward, so stage i holds min(p - i, m); get_pp_rank_microbatches (lines 956-978) gives the interleaved schedule
  (p - i - 1) * 2 + (v - 1) * N warm-up chunks of the m v, N = microbatch_group_size_per_vp_stage (p by default,
  megatron/core/model_parallel_config.py lines 567-568), one more with overlap_moe_expert_parallel_comm (966-970); the
  steady state adds one forward before each backward.
- PyTorch torch/distributed/pipelining/schedules.py (00722e6): Schedule1F1B warms up min(m, p - i) forwards, then a
  backward before each forward; ScheduleInterleaved1F1B (_get_warmup_ops, multiply_factor 2) warms up
  min((v - 1) R + 2 (p - 1 - i), m v) chunks with R = m // max(1, m // p) micro-batches a round, then
  (_get_1f1b_rank_ops) a forward before each backward; ScheduleZBVZeroBubble (two chunks a rank in a V) runs
  2 (p - i) - 1 chunk-0 forwards, i pairs of chunk-1 and chunk-0 forwards, then chunk-1 forward, input and weight
  backward p - i times: 2p chunks at the peak on every rank (for m >= 2p - 1); ScheduleGPipe every forward before any
  backward: m.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from costmodel import StrategyTable, cluster_preset, framework_preset, model_preset, simulate
from costmodel._evaluate import stage_breakdown
from costmodel._pipeline_terms import SCHED, extra_warmup_chunks, in_flight, with_extra_chunk
from costmodel._reference import _in_flight


def closed(sched: str, p: int, m: int, v: int, extra: int = 0) -> np.ndarray:
    return in_flight(np.array([SCHED[sched]]), np.array([p]), np.array([m]), np.array([v]), np.arange(p), extra=extra)


def test_1f1b_pp16_with_8_micro_batches():
    # Megatron-LM: stage i warms up min(15 - i, 8) forwards; stages 0-7 run all 8 in the warm-up, stage 8 warms up 7
    # and its steady state's first forward makes 8, stage 9: 6 + 1 = 7, ..., stage 15: 0 + 1 = 1.
    # PyTorch's Schedule1F1B: min(8, 16 - i) warm-up forwards, the same counts.
    want = [8] * 9 + [7, 6, 5, 4, 3, 2, 1]
    np.testing.assert_array_equal(closed("1f1b", 16, 8, 1), want)
    np.testing.assert_array_equal(simulate("1f1b", 16, 8, 1, tf=1.0, tb=2.0).peak_activations, want)
    assert [_in_flight("1f1b", 16, 8, 1, i) for i in range(16)] == want


def test_interleaved_pp4_vpp2_with_8_micro_batches():
    # Megatron-LM, N = p = 4: warm-up (4 - i - 1) * 2 + (2 - 1) * 4 = 10, 8, 6, 4 chunks of the 16, each stage one more
    # in the steady state: 11, 9, 7, 5 chunks, 5.5, 4.5, 3.5, 2.5 stage micro-batches. PyTorch (R = 8 // 2 = 4): the
    # same.
    want = [5.5, 4.5, 3.5, 2.5]
    np.testing.assert_array_equal(closed("interleaved", 4, 8, 2), want)
    np.testing.assert_array_equal(simulate("interleaved", 4, 8, 2, tf=1.0, tb=2.0).peak_activations, want)
    assert [_in_flight("interleaved", 4, 8, 2, i) for i in range(4)] == want


@pytest.mark.parametrize("m,want", [
    # m < p: one round, R = m = 3: warm-up 3 + 2 (3 - i) = 9, 7, 5, 3 capped at 6 chunks; ranks 2 and 3 add the steady
    # state's forward: 6, 6, 6, 4 chunks.
    (3, [3.0, 3.0, 3.0, 2.0]),
    # m = 6: one round, R = 6: 12, 10, 8, 6 warm-up chunks (the first all 12), then one more: 12, 11, 9, 7.
    (6, [6.0, 5.5, 4.5, 3.5]),
    # m = 10: two rounds, R = 5: 11, 9, 7, 5 warm-up, then one more: 12, 10, 8, 6.
    (10, [6.0, 5.0, 4.0, 3.0]),
    # m = 12: three rounds, R = 4: as Megatron-LM's N = p.
    (12, [5.5, 4.5, 3.5, 2.5]),
])
def test_interleaved_micro_batches_a_round_as_pytorch_counts_them(m, want):
    # torchtitan runs ScheduleInterleaved1F1B, which also takes m not a multiple of p (its rounds of R micro-batches);
    # the simulator's group of micro-batches and the closed form's (Megatron-LM's smallest valid group size) are the
    # same R for these m.
    np.testing.assert_array_equal(simulate("interleaved", 4, m, 2, tf=1.0, tb=2.0).peak_activations, want)
    np.testing.assert_array_equal(closed("interleaved", 4, m, 2), want)


def test_gpipe_holds_every_micro_batch_and_zbv_2p_chunks():
    np.testing.assert_array_equal(closed("gpipe", 4, 6, 1), [6] * 4)
    # ZB-V, p = 4, m = 8 >= 2p - 1: rank i holds 2 (4 - i) - 1 + i chunk-0 and i chunk-1 forwards after its warm-up's
    # first two loops, then a chunk-1 forward: 8 chunks = 2p, 4 stage micro-batches, on every rank.
    np.testing.assert_array_equal(simulate("zb-v", 4, 8, 2, tf=1.0, tb=1.0, tw=1.0).peak_activations, [4.0] * 4)


def test_megatron_ep_a2a_overlap_runs_one_more_warmup_chunk():
    # overlap_moe_expert_parallel_comm: (4 - i - 1) * 2 + 4 + 1 warm-up chunks, 12, 10, 8, 6 with the steady state's.
    np.testing.assert_array_equal(closed("interleaved", 4, 8, 2, extra=1), [6.0, 5.0, 4.0, 3.0])
    assert [_in_flight("interleaved", 4, 8, 2, i, 1) for i in range(4)] == [6.0, 5.0, 4.0, 3.0]
    # capped at all m v chunks: m = 4, 12 - 2i chunks (with the steady state's) against the 8: 8, 8, 8, 6
    np.testing.assert_array_equal(closed("interleaved", 4, 4, 2, extra=1), [4.0, 4.0, 4.0, 3.0])
    # the simulator's peaks (rows outside the closed forms) take the same chunk, at most m; 1F1B is untouched
    sched = np.array([SCHED["interleaved"], SCHED["1f1b"]])[:, None]
    got = with_extra_chunk(np.array([[3.5, 4.0], [2.0, 2.0]]), sched, np.array([[4], [2]]), np.array([[2], [1]]), 1)
    np.testing.assert_array_equal(got, [[4.0, 4.0], [2.0, 2.0]])
    # only Megatron-Core's EP overlap on an MoE model: dense models and the other profiles run Megatron-LM's count
    moe, dense = model_preset("mixtral-8x7b"), model_preset("llama3-8b")
    assert extra_warmup_chunks(framework_preset("megatron-core-a2a-overlap"), moe) == 1
    assert extra_warmup_chunks(framework_preset("megatron-core-a2a-overlap"), dense) == 0
    assert extra_warmup_chunks(framework_preset("megatron-core"), moe) == 0


def test_evaluator_stage_columns_hold_the_extra_chunk():
    # Mixtral 8x7B, pp 4 vpp 2, 8 micro-batches, ep 8: the stage breakdown (the simulator's peaks) under the EP-overlap
    # profile holds one more chunk on every stage than under megatron-core.
    model, cl = model_preset("mixtral-8x7b"), cluster_preset("h100x64")
    t = StrategyTable.from_columns(dp=np.array([8]), tp=np.array([2]), pp=np.array([4]), cp=np.array([1]),
                                   micro_batch=np.array([1]), global_batch=np.array([64]), vpp=np.array([2]),
                                   schedule=np.array([SCHED["interleaved"]]), recompute=np.array([1]),
                                   sequence_parallel=np.array([True]), zero_stage=np.array([1]),
                                   overlap_dp=np.array([True]), precision=np.array([0]), ep=np.array([8]))
    base = stage_breakdown(model, cl, t, framework="megatron-core")["in_flight"][0]
    over = stage_breakdown(model, cl, t, framework="megatron-core-a2a-overlap")["in_flight"][0]
    np.testing.assert_array_equal(base, [5.5, 4.5, 3.5, 2.5])
    np.testing.assert_array_equal(over, [6.0, 5.0, 4.0, 3.0])
    fw = dataclasses.replace(framework_preset("megatron-core"), name="x", overlap_ep=True)
    assert extra_warmup_chunks(fw, model) == 1
