"""ZeRO-2 with the gradients reduce-scattered after every micro-batch's backward (Framework.
zero2_scatter_every_microbatch): m reduce-scatters a step and one weight all-gather, the accumulated gradient held as
a shard; with pipelines under llama3-fsdp (Meta's Llama 3 stack), at pp 1 under FSDP and DeepSpeed's stage 2."""

import dataclasses

import numpy as np
import pytest

from costmodel import (
    FRAMEWORKS,
    StrategyTable,
    cluster_preset,
    evaluate,
    framework_preset,
    hetero_preset,
    model_preset,
)
from costmodel._data_parallel import ExchangeCoef, dp_exchange_s, exposed_dp_s, per_step_exchange
from costmodel._evaluate import stage_rows
from costmodel._feasibility import REASONS
from costmodel._reference import evaluate_row

# Llama 3 405B as the Llama 3 paper (Sec. 3.3.2, text) lays it out: tp 8, pp 16, 126 layers cut 7 / 8 x 14 / 7,
# dp = 16384 / (8 x 16) = 128, global batch 2048 sequences of 8k, micro-batch 1: m = 2048 / 128 = 16, no recompute.
LAYOUT = dict(dp=128, tp=8, pp=16, micro_batch=1, global_batch=2048, zero_stage=2, sequence_parallel=True,
              recompute=0, schedule=1, stage_layers=np.array([[7] + [8] * 14 + [7]]))

# A stage of 8 layers at tp 8, per GPU. One Llama 3 405B layer (h 16384, 128 query heads and 8 KV heads of 128,
# SwiGLU f 53248): Wq and Wo 2 x 16384^2 = 536,870,912; Wk, Wv 2 x 16384 x 1024 = 33,554,432; the MLP 3 x 16384 x
# 53248 = 2,617,245,696; two norms 2 x 16384 = 32,768: 3,187,703,808 parameters; 8 layers / tp 8: 3,187,703,808 a GPU.
STAGE_PARAMS = 3 * 16384 * 53248 + 2 * 16384 * 16384 + 2 * 16384 * 1024 + 2 * 16384
assert STAGE_PARAMS == 3_187_703_808


def _table(**changes):
    return StrategyTable.from_columns(**{**LAYOUT, **changes})


def test_llama3_405b_layout_fits_an_h100_under_llama3_fsdp():
    model, cluster = model_preset("llama3-405b"), cluster_preset("h100x16384")
    got = evaluate(model, cluster, _table(), framework="llama3-fsdp")
    # fp32 gradients sharded over dp 128: 3,187,703,808 x 4 B / 128 = 99,615,744 B (0.1 GB) on a middle stage
    assert got["mem_grads_bytes"][0] == pytest.approx(STAGE_PARAMS * 4 / 128, rel=1e-12)
    assert got["mem_grads_bytes"][0] == pytest.approx(99_615_744, rel=1e-12)
    assert bool(got["feasible"][0]) and got["mem_total_bytes"][0] < 80e9  # the H100 preset's 80 GB
    # fsdp2 (torchtitan's PipelineStage syncs FSDP gradients on the last micro-batch) keeps the whole fp32 gradient:
    # 3,187,703,808 x 4 = 12,750,815,232 B, 12,651,199,488 B more than the shard, everything else the same
    ref = evaluate(model, cluster, _table(), framework="fsdp2")
    assert ref["mem_grads_bytes"][0] == pytest.approx(STAGE_PARAMS * 4, rel=1e-12)
    assert ref["mem_total_bytes"][0] - got["mem_total_bytes"][0] == pytest.approx(12_651_199_488, rel=1e-9)
    assert ref["mem_activations_bytes"][0] == got["mem_activations_bytes"][0]
    assert REASONS[int(ref["reason"][0])] == "out_of_memory"


def test_llama3_405b_exchange_is_m_reduce_scatters_and_one_all_gather():
    # Bytes a parameter through the dp group in a step: 16 reduce-scatters of fp32 gradients and one bf16 all-gather,
    # 16 x 4 + 2 = 66, against ZeRO-1's 4 + 2 = 6: 11 times (x 3,187,703,808 parameters: 210.4 GB against 19.1 GB,
    # each on the wire at 127 / 128 of it). Each collective moves over 0.8 GB (one layer's per GPU: 398M elements), so
    # latency is negligible; NCCL's choice per message size leaves the per-byte rate within about 1% of each other.
    model, cluster = model_preset("llama3-405b"), cluster_preset("h100x16384")
    two = evaluate(model, cluster, _table(), framework="llama3-fsdp")
    assert int(two["microbatches"][0]) == 16
    two_st = stage_rows(model, cluster, _table(), framework="llama3-fsdp")  # a stage's raw exchange, per stage
    one_st = stage_rows(model, cluster, _table(zero_stage=1), framework="llama3-fsdp")
    assert two_st[1]["dp_comm_s"] / one_st[1]["dp_comm_s"] == pytest.approx(66 / 6, rel=0.02)
    # the scalar reference prices the row the same way (exchange and exposure)
    ref = evaluate_row(model, cluster, _table().row(0), framework="llama3-fsdp")
    for key in ("step_time_s", "dp_comm_s", "mem_total_bytes"):
        assert two[key][0] == pytest.approx(ref[key], rel=1e-9), key


def test_exchange_closed_form_on_one_flat_ring():
    # 3,187,703,808 parameters a GPU over g = 128 ranks at 50 GB/s, a 10 us step (one link tier, its hops NVLink's:
    # the measured ring LL hop, 1.98 us on a 5 us step, x NCCL's 3.4 / 0.6 under Simple: 10 x 1.98 / 5 x 3.4 / 0.6 =
    # 22.44 us a hop); NCCL's ring under Simple adds its base latency, 8.4 us a call (tuning.cc baseLatencies). A
    # reduce-scatter of fp32 gradients: 127/128 x 4 x 3,187,703,808 / 50e9 + 127 x 22.44 us + 8.4 us = 0.25588 s; the
    # bf16 all-gather 0.12937 s.
    P, g, bw, lat, base = 3_187_703_808.0, 128, 50e9, 10e-6, 8.4e-6
    hop = 22.44e-6
    rs = 127 / 128 * 4 * P / bw + 127 * hop + base
    ag = 127 / 128 * 2 * P / bw + 127 * hop + base
    assert rs == pytest.approx(0.255882, abs=1e-6) and ag == pytest.approx(0.129370, abs=1e-6)
    zero, m = np.array([0, 1, 2, 2]), np.array([16, 16, 16, 1])
    fw = framework_preset("llama3-fsdp")
    got = dp_exchange_s(zero, m, np.full(4, P), np.full(4, g), bw, lat, fw=fw, prec=0)
    ar = 2 * 127 / 128 * 4 * P / bw + 2 * 127 * hop + base  # ZeRO 0: one ring all-reduce (fp32)
    # ZeRO-2, m = 16: 16 x 0.25588 + 0.12937 = 4.22349 s; ZeRO-1 and ZeRO-2 at m = 1: 0.38525 s
    np.testing.assert_allclose(got, [ar, rs + ag, 16 * rs + ag, rs + ag], rtol=1e-12)
    assert 16 * rs + ag == pytest.approx(4.223487, abs=1e-6)
    # a profile without the field: one reduce-scatter a step whatever m (megatron-core reduces in fp32 too)
    mc = dp_exchange_s(zero, m, np.full(4, P), np.full(4, g), bw, lat, fw=framework_preset("megatron-core"), prec=0)
    np.testing.assert_allclose(mc, [ar, rs + ag, rs + ag, rs + ag], rtol=1e-12)
    off = dataclasses.replace(fw, zero2_scatter_every_microbatch=False)
    np.testing.assert_allclose(dp_exchange_s(zero, m, np.full(4, P), np.full(4, g), bw, lat, fw=off, prec=0),
                               [ar, rs + ag, rs + ag, rs + ag], rtol=1e-12)


def test_exposure_the_earlier_reduce_scatters_under_the_later_passes():
    # m = 4, fp32 reduce-scatters of 0.4 s each, a bf16 all-gather of 0.2 s: the exchange 4 x 0.4 + 0.2 = 1.8 s, the
    # three before the last 3 x 4 / (4 x 4 + 2) of it = 1.2 s. The last (0.4) and the gather (0.2) against the last
    # backward B + W: ZeRO 0-2 as a step's one exchange.
    fw, zero, m = framework_preset("llama3-fsdp"), np.array([2, 2]), 4
    dp = np.full(2, 1.8)
    # F 0.2, B 0.3, W 0.1 (X 0.6 >= 0.4: each earlier one hidden): max(0.6 - 0.4, 0) = 0.2 exposed
    np.testing.assert_allclose(exposed_dp_s(zero, True, m, 0.6, 0.3, 0.1, dp, F_b=0.2, fw=fw), [0.2, 0.2])
    # F 0.05, B 0.2, W 0.05 (X 0.3 < 0.4): the last 0.6 - 0.25 = 0.35, and each earlier one 0.1 beyond the passes
    # of its micro-batch: 3 x 0.1 = 0.3; 0.65 in all
    np.testing.assert_allclose(exposed_dp_s(zero, True, m, 0.3, 0.2, 0.05, dp, F_b=0.05, fw=fw), [0.65, 0.65])
    # overlap off: all of it; m = 1: no earlier reduce-scatter, the whole 0.6 s exchange against B + W
    np.testing.assert_allclose(exposed_dp_s(zero, False, m, 0.6, 0.3, 0.1, dp, F_b=0.2, fw=fw), dp)
    np.testing.assert_allclose(exposed_dp_s(zero, True, 1, 0.6, 0.3, 0.1, np.full(2, 0.6), F_b=0.2, fw=fw),
                               [0.2, 0.2])


def test_megatron_core_still_refuses_zero2_with_pipelines_and_fsdp2_prices_it_as_zero1():
    model, cluster = model_preset("llama3-405b"), cluster_preset("h100x16384")
    mc = evaluate(model, cluster, _table(), framework="megatron-core")
    assert REASONS[int(mc["reason"][0])] == "zero_incompatible_pp"
    ds = evaluate(model, cluster, _table(), framework="deepspeed")
    assert REASONS[int(ds["reason"][0])] == "zero_incompatible_pp"
    # llama3-fsdp: ZeRO-3 with pipelines is not what the paper describes (weights kept gathered): refused
    z3 = evaluate(model, cluster, _table(zero_stage=3), framework="llama3-fsdp")
    assert REASONS[int(z3["reason"][0])] == "zero_incompatible_pp"
    # fsdp2 at pp 16: the exchange of ZeRO-1 (one reduce-scatter), whatever the field says at pp 1
    a = stage_rows(model, cluster, _table(), framework="fsdp2")
    b = stage_rows(model, cluster, _table(zero_stage=1), framework="fsdp2")
    assert [x["dp_comm_s"] for x in a] == [x["dp_comm_s"] for x in b]


def test_which_profiles_reduce_scatter_every_micro_batch():
    # From their code (Framework sources): FSDP2 and FSDP1 under Composer without no_sync, DeepSpeed's stage 2 hooks,
    # Meta's stack; Megatron-Core's distributed optimizer and InternEvo reduce once a step.
    every = {name for name, fw in FRAMEWORKS.items() if fw.zero2_scatter_every_microbatch}
    assert every == {"fsdp2", "fsdp2-eager", "fsdp2-async-tp", "fsdp2-compiled-loss", "llm-foundry",
                     "llm-foundry-triton", "llm-foundry-triton-pure", "deepspeed", "deepspeed-flash2",
                     "deepspeed-bigscience", "llama3-fsdp"}
    fw = framework_preset("llama3-fsdp")
    assert fw.max_zero_with_pp == 2 and not fw.shard_with_pp_once and fw.grad_reduce_bytes == (4.0, 4.0, 4.0)


def test_pp1_zero2_fsdp2_reduces_every_micro_batch_in_the_evaluator():
    # Llama 3 8B on 64 H100s, FSDP ZeRO-2 at pp 1, dp 64, micro-batch 1: m = 1 and m = 4 (global batch 64, 256).
    # The exchange grows by 3 reduce-scatters of the fp32 gradients: (4 x 4 + 2) / (4 + 2) = 3 times the bytes, and
    # its calls (one a unit: 32 blocks and the root) from 2 to 5 a unit. By hand: 8.03e9 parameters, 63/64 of
    # (4 + 2) bytes each at 8 NICs x 50 GB/s x 0.8 = 320 GB/s: 148.2 ms at m = 1, 444.6 ms at m = 4; a call over 8
    # nodes under LL128, 14 + 56 x 6.27 + 7 x 4 / 14 x 10 = 385.1 us (66 calls 25.4 ms, 165 calls 63.5 ms): the
    # ratio (444.6 + 63.5) / (148.2 + 25.4) = 2.927, between the calls' 2.5 and the bytes' 3.
    model, cluster = model_preset("llama3-8b"), cluster_preset("h100x64")
    rows = StrategyTable.from_columns(dp=64, tp=1, pp=1, micro_batch=1, global_batch=np.array([64, 256]),
                                      zero_stage=2, recompute=2)
    got = evaluate(model, cluster, rows, framework="fsdp2")
    st = [stage_rows(model, cluster, rows, i, framework="fsdp2")[0]["dp_comm_s"] for i in range(2)]
    assert 2.5 < st[1] / st[0] < 3.0
    assert st[1] / st[0] == pytest.approx(2.927, rel=0.005)
    mc = [stage_rows(model, cluster, rows, i, framework="megatron-core")[0]["dp_comm_s"] for i in range(2)]
    assert mc[1] == mc[0]
    for i in range(2):
        ref = evaluate_row(model, cluster, rows.row(i), framework="fsdp2")
        assert got["step_time_s"][i] == pytest.approx(ref["step_time_s"], rel=1e-9)


def test_placement_and_heterogeneous_paths_price_it_too():
    # The 405B layout written as a placement on one pool (dp and tp per stage: the configurations' path) prices as
    # the row-degree table does.
    model, cluster = model_preset("llama3-405b"), cluster_preset("h100x16384")
    plc = StrategyTable.from_columns(stage_pool=np.zeros((1, 16), dtype=np.int64), stage_dp=np.full((1, 16), 128),
                                     stage_tp=np.full((1, 16), 8), stage_layers=LAYOUT["stage_layers"], pp=16,
                                     microbatches=16, global_batch=2048, zero_stage=2, sequence_parallel=True,
                                     recompute=0, schedule=1)
    a, b = evaluate(model, cluster, _table(), framework="llama3-fsdp"), evaluate(model, cluster, plc,
                                                                                  framework="llama3-fsdp")
    for key in ("step_time_s", "dp_comm_s", "mem_grads_bytes", "mem_total_bytes"):
        assert a[key][0] == pytest.approx(b[key][0], rel=1e-12), key
    # Llama 3 8B on A100 + H100 pools, one stage on each (dp 32, tp 2): m = 4 against m = 1 adds three fp32
    # reduce-scatters to each stage's exchange, (4 x 4 + 2) / (4 + 2) = 3 times the bytes; megatron-core's does not move
    model, hc = model_preset("llama3-8b"), hetero_preset("a100x64+h100x64")

    def placed(m):
        return StrategyTable.from_columns(stage_pool=np.array([[0, 1]]), stage_dp=np.array([[32, 32]]),
                                          stage_tp=np.array([[2, 2]]), stage_layers=np.array([[16, 16]]), pp=2,
                                          microbatches=m, global_batch=32 * m, zero_stage=2, recompute=2, schedule=1)

    for fw, ratio in (("llama3-fsdp", 18 / 6), ("megatron-core", 1.0)):
        one, four = (stage_rows(model, hc, placed(m), framework=fw) for m in (1, 4))
        for s1, s4 in zip(one, four, strict=True):
            assert s4["dp_comm_s"] / s1["dp_comm_s"] == pytest.approx(ratio, rel=0.02), fw


def test_per_step_exchange_adds_the_further_scatters_at_zero2_only_on_both_branches():
    """Each stage's step exchange from its combination's coefficients at m = 1: a ZeRO-2 stage adds (m - 1) mb_a,
    any other nothing, whatever its combination's mb_a says; the row-subset branch ((1, N) stages) and the
    full-column one ((k, N)) alike. Two combinations, a = 1 and 10, mb_a = 0.5 and 4 (non-zero on both, so that a
    branch reading mb_a off ZeRO-2 shows); stages at ZeRO 2, 1, 3, 2 on combinations 0, 1, 1, 0, m = 3, 3, 2, 5:
    by hand 1 + 2 x 0.5 = 2; 10 (ZeRO-1: one exchange); 10 x 2 = 20 (ZeRO-3: m of them, no further scatter);
    1 + 4 x 0.5 = 3."""
    fw = FRAMEWORKS["fsdp2"]
    assert fw.zero2_scatter_every_microbatch
    coef = ExchangeCoef(a=np.array([1.0, 10.0]), b=np.zeros(2), step_a=0.0, step_b=0.0,
                        mb_a=np.array([0.5, 4.0]), mb_b=np.zeros(2))
    inv, zero, m = np.array([[0, 1, 1, 0]]), np.array([2, 1, 3, 2]), np.array([3, 3, 2, 5])
    by_hand = [2.0, 10.0, 20.0, 3.0]
    subset = per_step_exchange(fw, coef, (2,), inv, zero, m)
    full = per_step_exchange(fw, coef, (2,), np.repeat(inv, 2, axis=0), np.repeat(zero[None], 2, axis=0), m)
    assert subset.a.tolist() == [by_hand]
    assert full.a.tolist() == [by_hand, by_hand]
