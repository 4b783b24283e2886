"""FSDP2's copies beside its collectives (Framework.ag_copy_out_bytes, rs_copy_in_bytes): after each all-gather the
current stream copies the gathered bf16 weights out into the parameters (split_with_sizes_copy: read 2, write 2), and
before each reduce-scatter it copies the unsharded gradients into the fp32 reduce-scatter input (torch._chunk_cat:
bf16 read 2, fp32 written 4; a pipeline's fp32 accumulation read 4, written 4), as many times as the exchange counts
the collectives, in series with the step (with the exposed exchange, dp_comm_s); against hand calculations on Llama
3.1 8B.

Llama 3.1 8B: 8,030,261,248 parameters, a layer 218,112,000, 32 layers; the embedding 128,256 x 4,096 = 525,336,576,
the output and final norm 525,340,672. torchtitan keeps the last block and the root (embedding, final norm, output)
gathered from forward to backward (zero3_kept): 218,112,000 + 1,050,677,248 = 1,268,789,248 parameters not gathered
again. The H100 of the torchtitan rows (96 GB, HBM2e): 2.4e12 B/s x hbm_eff 0.765 = 1.836e12 B/s.
"""

import dataclasses

import pytest

from costmodel import FRAMEWORKS, REASONS, StrategyTable, evaluate, make_cluster, model_preset
from costmodel._reference import evaluate_row

MODEL = model_preset("llama3-8b")
P, LAYER, KEPT = 8_030_261_248, 218_112_000, 218_112_000 + 1_050_677_248
RATE = 2.4e12 * 0.765  # B/s: the H100 96 GB's HBM x hbm_eff
FSDP2 = FRAMEWORKS["fsdp2"]
NO_COPY = dataclasses.replace(FSDP2, name="fsdp2-no-copies", ag_copy_out_bytes=0.0, rs_copy_in_bytes=(0.0, 0.0))

# pp 1, ZeRO-3, a micro-batch: the copy-in of every gradient (6 bytes), the copy-out of every weight forward and of
# all but the kept ones backward (4 bytes each): 6 x 8,030,261,248 + 4 x (2 x 8,030,261,248 - 1,268,789,248)
# = 48,181,567,488 + 59,166,932,992 = 107,348,500,480 bytes, / 1.836e12 B/s = 58.4687 ms a micro-batch
MICROBATCH_S = (6 * P + 4 * (2 * P - KEPT)) / RATE


def _table(**c):
    cols = {"dp": 8, "tp": 1, "pp": 1, "micro_batch": 2, "global_batch": 16, "zero_stage": 3,
            "recompute": "selective", "sequence_parallel": False, **c}
    return StrategyTable.from_columns(**cols)


def _cluster(gpus=8):
    return make_cluster("h100-96gb", gpus)


def _pair(table, gpus=8):
    return tuple(evaluate(MODEL, _cluster(gpus), table, framework=fw) for fw in (FSDP2, NO_COPY))


def test_the_hand_counts_are_the_models():
    assert (MODEL.num_params(), MODEL.layer_params(), MODEL.layers) == (P, LAYER, 32)
    assert MODEL.embedding_params() + MODEL.head_params() == 1_050_677_248
    assert MICROBATCH_S == pytest.approx(0.0584687, rel=1e-5)


@pytest.mark.parametrize("global_batch", [16, 32])
def test_zero3_copies_every_microbatch_in_series(global_batch):
    # tt-llama3.1-8b-8gpu-fsdp2-bf16's layout: dp 8, micro-batches of 2, pp 1, ZeRO-3; m = 16 / 16 = 1 and 32 / 16 = 2
    # micro-batches: parameters x (6 m + 4 (2 m - kept)) bytes, m x 58.4687 ms more step, with the exposed exchange
    m = global_batch // 16
    a, b = _pair(_table(global_batch=global_batch))
    assert a["step_time_s"][0] - b["step_time_s"][0] == pytest.approx(m * MICROBATCH_S, rel=1e-9)
    assert a["dp_comm_s"][0] - b["dp_comm_s"][0] == pytest.approx(m * MICROBATCH_S, rel=1e-9)
    for k in ("compute_s", "recompute_s", "bubble_s", "optimizer_s"):  # the computation itself as it was
        assert a[k][0] == b[k][0], k


def test_with_a_pipeline_each_copy_runs_once_a_step():
    # pp 2 on 16 GPUs (dp 8), 4 micro-batches: fsdp2 keeps the weights gathered over the step and reduce-scatters after
    # the last backward (ZeRO-3 priced as ZeRO-1): one copy-out (4 bytes) and one copy-in of the fp32 accumulation
    # (read 4, write 4) a step, of the larger stage's parameters: the last, 16 x 218,112,000 + 525,340,672 =
    # 4,015,132,672; 12 x 4,015,132,672 = 48,181,592,064 bytes / 1.836e12 B/s = 26.2427 ms, in series after the
    # pipeline (dp_comm_s), whatever m
    once = 12 * (16 * LAYER + 525_340_672) / RATE
    assert once == pytest.approx(0.0262427, rel=1e-5)
    a, b = _pair(_table(pp=2, global_batch=64, schedule="1f1b"), gpus=16)
    assert a["microbatches"][0] == 4
    assert a["dp_comm_s"][0] - b["dp_comm_s"][0] == pytest.approx(once, rel=1e-9)
    assert a["step_time_s"][0] - b["step_time_s"][0] == pytest.approx(once, rel=1e-9)
    assert a["compute_s"][0] == b["compute_s"][0]


def test_zero_stages_0_to_2_follow_the_exchange_counts():
    # pp 1, m = 2 (global 16, micro-batches of 1, full recompute): ZeRO 0 (no sharding) none; ZeRO-2 (fsdp2
    # reduce-scatters every micro-batch, gathers once a step) (2 x 6 + 4) x 8,030,261,248 / 1.836e12 = 69.9805 ms;
    # ZeRO-1 FSDP does not run (framework_unsupported)
    assert 16 * P / RATE == pytest.approx(0.0699805, rel=1e-5)
    c = dict(global_batch=16, micro_batch=1, recompute="full")
    a, b = _pair(_table(zero_stage=0, **c))
    assert a["dp_comm_s"][0] == b["dp_comm_s"][0]  # (out of memory: 16 bytes a parameter unsharded, 128 GB)
    assert REASONS[_pair(_table(zero_stage=1, **c))[0]["reason"][0]] == "framework_unsupported"
    for zero, copies in ((2, 16 * P / RATE),):
        a, b = _pair(_table(zero_stage=zero, **c))
        assert a["feasible"][0] and a["microbatches"][0] == 2
        assert a["dp_comm_s"][0] - b["dp_comm_s"][0] == pytest.approx(copies, rel=1e-9), zero
        assert a["step_time_s"][0] - b["step_time_s"][0] == pytest.approx(copies, rel=1e-9), zero


def test_only_fsdp2s_profiles_price_them():
    for name, fw in FRAMEWORKS.items():
        # (fsdp2-compile: an alias of fsdp2; fsdp2-compiled-loss: torchtitan's FSDP2 with its loss compiled)
        on = name in ("fsdp2", "fsdp2-eager", "fsdp2-async-tp", "fsdp2-compiled-loss")
        assert (fw.ag_copy_out_bytes, fw.rs_copy_in_bytes) == ((4.0, (6.0, 8.0)) if on else (0.0, (0.0, 0.0))), name
    moe = model_preset("mixtral-8x7b")  # dense models only
    t = StrategyTable.from_columns(dp=8, tp=1, pp=1, ep=8, micro_batch=1, global_batch=64, zero_stage=3)
    cl = make_cluster("h100", 64)
    assert (evaluate(moe, cl, t, framework=FSDP2)["step_time_s"][0]
            == evaluate(moe, cl, t, framework=NO_COPY)["step_time_s"][0])


@pytest.mark.parametrize("c", [dict(zero_stage=z, global_batch=32) for z in (0, 2, 3)]
                         + [dict(tp=2, dp=4, pp=2, global_batch=64, schedule="1f1b", zero_stage=z) for z in (2, 3)]
                         + [dict(tp=2, dp=4, global_batch=32, sequence_parallel=True)],
                         ids=["z0", "z2", "z3", "pp2-z2", "pp2-z3", "tp2"])
def test_the_scalar_reference_prices_them_alike(c):
    gpus = c.get("dp", 8) * c.get("tp", 1) * c.get("pp", 1)
    ref = evaluate_row(MODEL, _cluster(gpus), _table(**c).row(0), framework=FSDP2)
    vec = evaluate(MODEL, _cluster(gpus), _table(**c), framework=FSDP2)
    for k in ("step_time_s", "compute_s", "dp_comm_s", "recompute_s", "bubble_s"):
        assert vec[k][0] == pytest.approx(ref[k], rel=1e-9), k


def test_zero2_every_microbatch_with_a_pipeline_copies_the_16_bit_gradients():
    # A profile that keeps ZeRO-2 with a pipeline and reduce-scatters every micro-batch (as Meta's stack does): each of
    # the m reduce-scatters copies in that micro-batch's bf16 gradients (6 bytes), not the fp32 accumulation (8, read
    # only where one reduce-scatter ends the step), and the weights are gathered once: 4 micro-batches on pp 2, the
    # last stage's 4,015,132,672 parameters x (4 x 6 + 4) = 112,423,714,816 bytes / 1.836e12 B/s = 61.2330 ms
    every = dict(shard_with_pp_once=False, max_zero_with_pp=3, zero2_scatter_every_microbatch=True)
    fw, bare = (dataclasses.replace(f, name=f.name + "-z2pp", **every) for f in (FSDP2, NO_COPY))
    table = _table(dp=8, pp=2, micro_batch=1, global_batch=32, zero_stage=2)
    a, b = (evaluate(MODEL, _cluster(16), table, framework=f) for f in (fw, bare))
    assert a["dp_comm_s"][0] - b["dp_comm_s"][0] == pytest.approx((4 * 6 + 4) * 4_015_132_672 / RATE, rel=1e-9)
    ref = evaluate_row(MODEL, _cluster(16), table.row(0), framework=fw)
    assert a["dp_comm_s"][0] == pytest.approx(ref["dp_comm_s"], rel=1e-9)
