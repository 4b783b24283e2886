"""DeepSpeed's pipeline engine sends a tp-shard of each hand-off and the receiver all-gathers it (Framework.
handoff_gathers, DEEPSPEED_HANDOFF_GATHER_SOURCE): DeepSpeed 735406e deepspeed/runtime/pipe/engine.py
_exec_forward_pass gathers its received input on every stage but the first, _exec_backward_pass its own output and the
received gradient on every stage but the last; runtime/utils.py PartitionedTensor.full: torch.zeros, dist.all_gather
over the tp group into a list (torch's flat buffer, then a copy out), .clone().

BLOOM-176B's row (tp 4, pp 12, dp 8, micro-batch 2 of 2048 tokens, h 14336; A100 80GB, NVLink 300 GB/s a direction)
by hand: one gather moves (t - 1) / t of the 16-bit b s h tensor over the tp ring, with t - 1 latencies, and copies 10
bytes an element of it at the HBM rate.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from costmodel import StrategyTable, evaluate
from costmodel._evaluate import stage_breakdown
from costmodel._reference import evaluate_row
from costmodel._validate import _candidates, read_runs

RUNS = Path(__file__).parent / "data" / "validation" / "published_runs.csv"


def bloom():
    """The row as `plansweep validate` prices it: its candidates with memory unbounded (costmodel._validate.predict)."""
    (run,) = [r for r in read_runs(RUNS) if r.name == "bloom-176b"]
    gpu = dataclasses.replace(run.cluster.gpu, hbm_bytes=math.inf)
    return dataclasses.replace(run, cluster=dataclasses.replace(run.cluster, gpu=gpu))


def one_row(run, **change) -> StrategyTable:
    """The row's candidate without interleaving (DeepSpeed runs 1F1B only), with ``change`` applied."""
    row = {**_candidates(run).row(0), **change}
    assert row["vpp"] == 1
    layers = row.pop("stage_layers")
    layers = np.array([layers]) if row["pp"] == 12 else None
    return StrategyTable.from_columns(stage_layers=layers, **{k: np.array([v]) for k, v in row.items()})


def hand_gather_s(cluster) -> float:
    """One all-gather of BLOOM's hand-off: T = 2 x 2048 tokens, h = 14336, 2 bytes an element, over tp 4 inside a node
    (NVLink at the cluster's rate x link_eff, 3 latencies), and 2 (zeros) + 4 (torch's copy out) + 4 (clone) = 10
    bytes an element at the HBM rate x hbm_eff: 0.367 + 0.015 + 0.376 = 0.758 ms on the row's A100 80GB."""
    gpu, elems, t = cluster.gpu, 2 * 2048 * 14336, 4
    collective = (t - 1) / t * 2 * elems / (cluster.scaleup_Bps * gpu.link_eff) + (t - 1) * cluster.scaleup_latency_s
    copies = 10 * elems / (gpu.hbm_Bps * gpu.hbm_eff)
    return collective + copies


def without_gathers(fw):
    return dataclasses.replace(fw, name=fw.name + "-whole-handoffs", handoff_gathers=(0.0, 0.0),
                               handoff_gather_copy_bytes=0.0)


def test_bloom_gathers_by_stage_equal_the_hand_calculation():
    run = bloom()
    table = one_row(run)
    assert table.row(0)["tp"] == 4 and table.row(0)["pp"] == 12
    fw = run.profile()
    assert fw.handoff_gathers == (1.0, 2.0)
    on = stage_breakdown(run.model, run.cluster, table, framework=fw)
    off = stage_breakdown(run.model, run.cluster, table, framework=without_gathers(fw))
    g = hand_gather_s(run.cluster)
    assert g == pytest.approx(0.758e-3, rel=2e-3)
    # forward: every stage but the first gathers its input; backward: every stage but the last its output and the
    # gradient; the weight gradient and the hand-offs themselves unchanged
    want_f = np.array([0.0] + [g] * 11)
    want_b = np.array([2 * g] * 11 + [0.0])
    for i in range(len(table)):
        np.testing.assert_allclose(on["forward_s"][i] - off["forward_s"][i], want_f, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(on["backward_s"][i] - off["backward_s"][i], want_b, rtol=1e-9, atol=1e-12)
        np.testing.assert_array_equal(on["weight_grad_s"][i], off["weight_grad_s"][i])
        np.testing.assert_array_equal(on["handoff_s"][i], off["handoff_s"][i])


def test_bloom_step_grows_by_the_closed_form_of_the_gathers():
    # 1F1B's closed form m X_max + (X_sum - X_max) + hand-offs with every stage's X grown by the hand deltas (2g on
    # the first stage, 3g on the ten middle ones, g on the last); the hand-offs alike
    run = bloom()
    table = one_row(run)
    fw = run.profile()
    off_fw = without_gathers(fw)
    on = evaluate(run.model, run.cluster, table, framework=fw)
    off = evaluate(run.model, run.cluster, table, framework=off_fw)
    stages = stage_breakdown(run.model, run.cluster, table, framework=off_fw)
    g, m = hand_gather_s(run.cluster), 2048 // (8 * 2)
    d = np.array([2 * g] + [3 * g] * 10 + [g])
    for i in range(len(table)):
        x = stages["forward_s"][i] + stages["backward_s"][i] + stages["weight_grad_s"][i]
        grow = (x + d).max() - x.max()
        want = m * grow + (d.sum() - grow)
        assert on["step_time_s"][i] - off["step_time_s"][i] == pytest.approx(want, rel=1e-6)
        assert on["pp_comm_s"][i] == off["pp_comm_s"][i]
        # the gathers in the tp column, their copies in the computation: the bottleneck's, m times
        assert on["tp_comm_s"][i] > off["tp_comm_s"][i] and on["compute_s"][i] > off["compute_s"][i]
    # the middle stages (3 gathers, 6 layers) set the pace: 128 x 3g + 30g, about 0.31 s of a 103 s step
    assert want == pytest.approx(m * 3 * g + 30 * g, rel=1e-9)


@pytest.mark.parametrize("pipeline", ["closed_form", "simulate"])
def test_the_scalar_reference_prices_the_gathers_alike(pipeline):
    run = bloom()
    table = one_row(run)
    fw = run.profile()
    for framework in (fw, without_gathers(fw)):
        vec = evaluate(run.model, run.cluster, table, framework=framework, pipeline=pipeline)
        for i in range(len(table)):
            ref = evaluate_row(run.model, run.cluster, table.row(i), framework=framework, pipeline=pipeline)
            for key in ("step_time_s", "tp_comm_s", "compute_s", "pp_comm_s"):
                assert vec[key][i] == pytest.approx(ref[key], rel=1e-9), (framework.name, i, key)


def test_no_gathers_without_tensor_or_pipeline_parallelism():
    # tp 1: nothing is partitioned (is_model_parallel False); pp 1: nothing is handed off
    run = bloom()
    fw = run.profile()
    for tp, pp, dp, batch in ((1, 12, 32, 2048), (4, 1, 96, 1536)):  # (384 GPUs; m whole)
        table = one_row(run, tp=tp, pp=pp, dp=dp, global_batch=batch)
        on = evaluate(run.model, run.cluster, table, framework=fw)
        off = evaluate(run.model, run.cluster, table, framework=without_gathers(fw))
        assert np.isfinite(on["step_time_s"][0])
        np.testing.assert_array_equal(on["step_time_s"], off["step_time_s"])
        ref = evaluate_row(run.model, run.cluster, table.row(0), framework=fw)
        assert on["step_time_s"][0] == pytest.approx(ref["step_time_s"], rel=1e-9)


def test_under_sequence_parallelism_a_rank_gathers_its_sequence_shard():
    # With sequence parallelism a stage's activation on a tp rank is already its T / t rows: PartitionedTensor
    # partitions that shard and full() rebuilds it, so each gather and its copies move a quarter of the bytes at tp 4
    # (the collective's bytes and copies / 4, its 3 latencies as before); the evaluator and the reference alike.
    run = bloom()
    fw = run.profile()
    table = one_row(run, sequence_parallel=True)
    on = stage_breakdown(run.model, run.cluster, table, framework=fw)
    off = stage_breakdown(run.model, run.cluster, table, framework=without_gathers(fw))
    gpu, elems, t = run.cluster.gpu, 2 * 2048 * 14336 / 4, 4
    g = ((t - 1) / t * 2 * elems / (run.cluster.scaleup_Bps * gpu.link_eff) + (t - 1) * run.cluster.scaleup_latency_s
         + 10 * elems / (gpu.hbm_Bps * gpu.hbm_eff))
    assert g < 0.3 * hand_gather_s(run.cluster)
    np.testing.assert_allclose(on["forward_s"][0] - off["forward_s"][0], [0.0] + [g] * 11, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(on["backward_s"][0] - off["backward_s"][0], [2 * g] * 11 + [0.0], rtol=1e-9, atol=1e-12)
    vec = evaluate(run.model, run.cluster, table, framework=fw)
    ref = evaluate_row(run.model, run.cluster, table.row(0), framework=fw)
    assert vec["step_time_s"][0] == pytest.approx(ref["step_time_s"], rel=1e-9)
