"""Goodput under failures: Daly's interval and the useful share, by hand."""

import math

import numpy as np
import pytest

from costmodel import InputError, Metrics, StrategyTable, cluster_preset, evaluate, make_cluster, model_preset
from costmodel._goodput import (
    LLAMA3_GPU_MTBF_H,
    FailureModel,
    checkpoint_bytes_per_writer,
    checkpoint_io_s,
    daly_interval_s,
    expert_state_per_gpu,
    goodput,
    plan_goodput,
    poisson_at_least,
    spare_wait_s,
)


def test_daly_interval_by_hand():
    # delta = 50 s, M = 10,000 s: sqrt(2 * 50 * 1e4) = 1000; delta / 2M = 0.0025;
    # 1000 * (1 + 0.05 / 3 + 0.0025 / 9) - 50 = 966.944...
    assert daly_interval_s(50.0, 10_000.0) == pytest.approx(1000 * (1 + 0.05 / 3 + 0.0025 / 9) - 50, rel=1e-12)
    assert daly_interval_s(50.0, 10_000.0) == pytest.approx(966.9444, abs=1e-4)
    # a checkpoint longer than two MTBFs: checkpoint every MTBF (Daly's second case)
    assert daly_interval_s(30_000.0, 10_000.0) == 10_000.0
    # Young's leading term when delta << M
    assert daly_interval_s(1.0, 1e8) == pytest.approx(math.sqrt(2e8), rel=1e-3)


def test_goodput_by_hand():
    # 1000 GPUs failing every 10,000 h each: the job fails every 10,000 s (M).
    f = FailureModel(gpu_mtbf_h=10_000 * 1000 / 3600, restart_s=290.0, write_Bps_per_gpu=1e9, read_Bps_per_gpu=5e9)
    out = goodput([1e6], [1000], [50e9], f)  # 50 GB per writer: delta 50 s, reload 10 s, R = 300 s
    tau = 1000 * (1 + 0.05 / 3 + 0.0025 / 9) - 50
    overhead = 50 / (tau + 50)
    rework = (tau + 50) / 2 / 10_000
    ratio = (1 - overhead) * (1 - rework - 300 / 10_000)
    assert out["checkpoint_interval_s"][0] == pytest.approx(tau, rel=1e-12)
    assert out["checkpoint_write_s"][0] == pytest.approx(50.0)
    assert out["job_mtbf_s"][0] == pytest.approx(10_000.0)
    assert out["goodput_ratio"][0] == pytest.approx(ratio, rel=1e-12)
    assert out["goodput_ratio"][0] == pytest.approx(0.87396, abs=1e-5)
    assert out["goodput_tokens_per_s"][0] == pytest.approx(1e6 * ratio, rel=1e-12)


def test_llama3_defaults_give_about_the_published_effective_training_time():
    # Dubey et al. 2024 report "higher than 90% effective training time" on 16,384 GPUs (the
    # restart default was chosen with this in view: costmodel._goodput.RESTART_S). A 405B plan
    # with a sharded optimizer writes 405e9 x 14 B / 16,384 GPUs per GPU.
    assert LLAMA3_GPU_MTBF_H == pytest.approx(50_677, rel=1e-3)
    out = goodput([1.0], [16384], [405e9 * 14 / 16384])
    assert 0.90 < out["goodput_ratio"][0] < 0.95
    # the job fails about every 3.1 hours, as the paper's 419 interruptions in 54 days say
    assert out["job_mtbf_s"][0] / 3600 == pytest.approx(54 * 24 / 419, rel=1e-9)


def test_checkpoint_bytes_per_writer_by_zero_stage():
    # weights 2 GB, optimizer 12 GB per GPU unsharded; dp x cp = 8
    # ZeRO-0, spread over the 8 replicas (torch.distributed.checkpoint): 14 GB / 8;
    # written by dp rank 0 alone (legacy torch.save): all 14 GB
    assert checkpoint_bytes_per_writer(2e9, 12e9, 0, 8) == pytest.approx(14e9 / 8)
    assert checkpoint_bytes_per_writer(2e9, 12e9, 0, 8, spread=False) == pytest.approx(14e9)
    # ZeRO-1: its own optimizer shard 12/8 GB, plus the replicated weights: 2/8 GB spread, 2 GB by rank 0
    assert checkpoint_bytes_per_writer(2e9, 12e9 / 8, 1, 8) == pytest.approx(2e9 / 8 + 12e9 / 8)
    assert checkpoint_bytes_per_writer(2e9, 12e9 / 8, 1, 8, spread=False) == pytest.approx(2e9 + 12e9 / 8)
    # ZeRO-3: nothing replicated, its shards of both either way
    assert checkpoint_bytes_per_writer(2e9 / 8, 12e9 / 8, 3, 8) == pytest.approx(14e9 / 8)
    assert checkpoint_bytes_per_writer(2e9 / 8, 12e9 / 8, 3, 8, spread=False) == pytest.approx(14e9 / 8)


def test_checkpoint_io_by_hand():
    # dp 4, tp 2 on 16 GPUs of 4 per node; 2 GB weights + 12 GB optimizer per GPU unsharded.
    # Node NIC 10 GB/s; filesystem 1 GB/s write, 2 GB/s read per cluster GPU: 16 and 32 GB/s.
    f = FailureModel(node_storage_Bps=10e9, write_Bps_per_gpu=1e9, read_Bps_per_gpu=2e9)
    deg = (4, 2, 1, 1)
    # ZeRO-0 spread: each GPU writes 14/4 = 3.5 GB, a node 4 x 3.5 = 14 GB -> 1.4 s on its NIC;
    # the state once is tp x 14 GB = 28 GB -> 28 / 16 = 1.75 s on the filesystem: 1.75 s.
    io = checkpoint_io_s(2e9, 12e9, 0, deg, 4, 16, f)
    assert io["checkpoint_bytes"] == pytest.approx(28e9)
    assert io["checkpoint_write_s"] == pytest.approx(1.75)
    # reload: every GPU reads its 14 GB: a node 56 GB -> 5.6 s; all 8 GPUs 112 GB / 32 = 3.5 s: 5.6 s
    assert io["checkpoint_load_s"] == pytest.approx(5.6)
    # dp rank 0 writes alone: 14 GB a GPU, 56 GB its node -> 5.6 s on the NIC (the filesystem idles)
    io0 = checkpoint_io_s(2e9, 12e9, 0, deg, 4, 16, FailureModel(node_storage_Bps=10e9, write_Bps_per_gpu=1e9,
                                                                  read_Bps_per_gpu=2e9, ckpt_spread=False))
    assert io0["checkpoint_write_s"] == pytest.approx(5.6)
    # ZeRO-1 holds 12/4 = 3 GB of optimizer a GPU: the state once is still 2 x (3 x 4 + 2) = 28 GB
    io1 = checkpoint_io_s(2e9, 3e9, 1, deg, 4, 16, f)
    assert io1["checkpoint_bytes"] == pytest.approx(28e9)
    assert io1["checkpoint_write_s"] == pytest.approx(1.75)


# Mixtral 8x7B by hand: 32 layers of hidden 4096, 8 experts of SwiGLU ffn 14336, 32 heads and 8 KV
# heads of 128, vocabulary 32000, untied head, RMSNorm.
MIXTRAL_EXPERTS = 32 * 8 * 3 * 4096 * 14336                       # 45,097,156,608 routed-expert parameters
MIXTRAL_REST = (32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 8 + 2 * 4096)  # attention, router, norms
                + 2 * 32000 * 4096 + 4096)                        # embedding, head, final norm: 1,605,636,096
MIXTRAL_STATE = 14 * (MIXTRAL_EXPERTS + MIXTRAL_REST)             # 2 B weights + 12 B optimizer: 653.84 GB


@pytest.mark.parametrize("dp, tp, ep, etp, zero", [
    (64, 1, 8, 1, 1),   # ep 8: each GPU holds one expert of every layer, 8 expert-data-parallel replicas
    (32, 2, 1, 1, 1),   # ep 1 with tp 2: every expert whole on each GPU, 64 replicas of them
    (32, 2, 4, 2, 1),   # ep 4 x etp 2: an expert's halves on 2 ranks, 32 x 2 / 8 = 8 replicas
    (64, 1, 8, 1, 3),   # ZeRO-3: the weights sharded over those replicas too
])
def test_moe_checkpoint_is_the_whole_model_shared_over_the_ranks_that_hold_it(dp, tp, ep, etp, zero):
    # The checkpoint holds the whole model once at every ep and etp: 14 bytes x 46,702,792,704
    # parameters. Spread over the replicas, every one of the 64 GPUs writes 1/64 of it (the dense
    # part over dp x tp, the experts over their ep x etp holders x edp replicas).
    assert MIXTRAL_EXPERTS + MIXTRAL_REST == 46_702_792_704
    model, cluster = model_preset("mixtral-8x7b"), cluster_preset("h100x64")
    table = StrategyTable.from_columns(dp=dp, tp=tp, pp=1, ep=ep, etp=etp, micro_batch=1, global_batch=512,
                                       zero_stage=zero, recompute="full")
    m = evaluate(model, cluster, table, framework="megatron-core")
    f = FailureModel()
    out = plan_goodput(m, table, cluster, f, model=model)
    assert out["checkpoint_bytes"][0] == pytest.approx(MIXTRAL_STATE, rel=1e-9)
    io = checkpoint_io_s(m["mem_weights_bytes"], m["mem_optimizer_bytes"], table["zero_stage"],
                         (table["dp"], table["tp"], table["pp"], table["cp"]), 8, 64, f,
                         expert_state_per_gpu(model, table))
    assert io["checkpoint_writer_bytes"][0] == pytest.approx(MIXTRAL_STATE / 64, rel=1e-9)
    # the file system's share: 653.84 GB at 2e12 / 16384 B/s per GPU x 64 GPUs
    assert out["checkpoint_write_s"][0] >= MIXTRAL_STATE / (64 * 2e12 / 16384) * (1 - 1e-9)


def test_moe_plan_without_its_model_is_refused():
    model, cluster = model_preset("mixtral-8x7b"), cluster_preset("h100x64")
    table = StrategyTable.from_columns(dp=64, tp=1, pp=1, ep=8, micro_batch=1, global_batch=512, zero_stage=1)
    m = evaluate(model, cluster, table, framework="megatron-core")
    with pytest.raises(InputError, match="model"):
        plan_goodput(m, table, cluster)


def test_poisson_tail_and_spare_wait_by_hand():
    # P(Poisson(0.5) >= 0) = 1, >= 1: 1 - e^-0.5 = 0.393469, >= 2: 1 - e^-0.5 (1 + 0.5) = 0.090204
    np.testing.assert_allclose(poisson_at_least(0.5, [0, 1, 2]), [1.0, 0.3934693, 0.0902040], atol=1e-7)
    # job MTBF 10,000 s, half the failures need a node, repair 1 h: lam = 0.5 x 3600 / 10,000 = 0.18.
    # No spare: every such failure waits the repair, 0.5 x 3600 = 1800 s on average per failure.
    # One spare: 1800 (1 - e^-0.18) = 296.51 s; two: 1800 (1 - e^-0.18 x 1.18) = 25.886 s.
    f = FailureModel(hardware_fraction=0.5, repair_h=1.0)
    np.testing.assert_allclose(spare_wait_s(10_000.0, [0, 1, 2], f), [1800.0, 296.514, 25.886], atol=1e-3)
    assert spare_wait_s(10_000.0, 0, FailureModel(repair_h=0.0)) == 0.0


def test_plan_goodput_by_hand():
    # dp 3 x tp 4 = 12 GPUs on 4 nodes of 8 (32 GPUs): the job holds 2 whole nodes (16 GPUs) and
    # leaves 2 idle as spares. Each GPU fails every 16 x 10,000 / 3600 h: the job every 10,000 s.
    cluster = make_cluster("h100", 32, gpus_per_node=8)
    f = FailureModel(gpu_mtbf_h=16 * 10_000 / 3600, restart_s=100.0, node_storage_Bps=10e9,
                     write_Bps_per_gpu=0.5e9, read_Bps_per_gpu=1e9, hardware_fraction=0.5, repair_h=1.0)
    table = StrategyTable.from_columns(dp=3, tp=4, pp=1, global_batch=48, zero_stage=0)
    m = Metrics(tokens_per_s=np.array([1e6]), mem_weights_bytes=np.array([1e9]),
                mem_optimizer_bytes=np.array([6e9]))
    out = plan_goodput(m, table, cluster, f)
    # ZeRO-0 spread over dp 3: 7/3 GB a GPU, 8 GPUs on the busiest node: 18.67 GB / 10 GB/s = 1.8667 s;
    # the filesystem: 4 x 7 = 28 GB / (0.5 x 32 = 16 GB/s) = 1.75 s -> delta = 1.8667 s (the NIC).
    delta = 8 * 7e9 / 3 / 10e9
    # reload: 8 x 7 GB / 10 GB/s = 5.6 s on the node, 12 x 7 GB / 32 GB/s = 2.625 s: 5.6 s.
    # spares 2: wait 25.886 s (test above); R = 100 + 5.6 + 25.886 = 131.486 s.
    R = 100 + 5.6 + 1800 * (1 - math.exp(-0.18) * 1.18)
    tau = math.sqrt(2 * delta * 1e4) * (1 + math.sqrt(delta / 2e4) / 3 + delta / 2e4 / 9) - delta  # 191.976 s
    ratio = tau / (tau + delta) * (1 - (R + (tau + delta) / 2) / 1e4)
    assert out["nodes_used"][0] == 2 and out["spare_nodes"][0] == 2
    assert out["job_mtbf_s"][0] == pytest.approx(10_000.0)
    assert out["checkpoint_write_s"][0] == pytest.approx(delta)
    assert out["checkpoint_load_s"][0] == pytest.approx(5.6)
    assert out["spare_wait_s"][0] == pytest.approx(25.886, abs=1e-3)
    assert out["checkpoint_interval_s"][0] == pytest.approx(191.976, abs=1e-3)
    assert out["goodput_ratio"][0] == pytest.approx(ratio, rel=1e-12)
    assert out["goodput_ratio"][0] == pytest.approx(0.96775, abs=1e-5)
    # the same plan on exactly its 2 nodes: no spare, each hardware failure waits 1800 s
    small = plan_goodput(m, table, make_cluster("h100", 16, gpus_per_node=8), f)
    assert small["spare_nodes"][0] == 0
    assert small["spare_wait_s"][0] == pytest.approx(1800.0)
    assert small["goodput_ratio"][0] < out["goodput_ratio"][0]


def test_job_mtbf_counts_the_nodes_a_plan_holds():
    # GPT-3 175B on h100x1024: tp 3 pp 14 dp 24 uses 1008 GPUs, i.e. 126 whole nodes, and fails
    # 1024 / 1008 times less often than a plan on all 128 nodes; the 2 idle nodes are spares.
    model, cluster = model_preset("gpt3-175b"), cluster_preset("h100x1024")
    table = StrategyTable.from_columns(dp=[24, 16], tp=[3, 8], pp=[14, 8], global_batch=1536, zero_stage=1,
                                       recompute="selective", sequence_parallel=True)
    out = plan_goodput(evaluate(model, cluster, table), table, cluster)
    np.testing.assert_array_equal(out["nodes_used"], [126, 128])
    np.testing.assert_array_equal(out["spare_nodes"], [2, 0])
    assert out["job_mtbf_s"][0] / out["job_mtbf_s"][1] == pytest.approx(1024 / 1008, rel=1e-12)
    # no spare: 78% of failures wait the 2.2 h repair: 0.78 x 7920 s = 6177.6 s per failure
    assert out["spare_wait_s"][1] == pytest.approx(0.78 * 2.2 * 3600)
    assert out["spare_wait_s"][0] < 10.0


def test_dp_rank0_checkpoints_slower_than_spread_on_a_plan():
    # Legacy torch.save (dp rank 0 writes the replicated state) vs torch.distributed.checkpoint's
    # spread, ZeRO-0, GPT-3 175B tp 8 pp 8 dp 16, with 10x Llama 3's filesystem (1024 x 1.22 GB/s
    # = 1.25 TB/s). Spread, the 64 model-parallel positions' state S = 64 s (s a GPU's bytes) goes
    # at the filesystem's pace, 64 s / 1.25e12 (each node writes only 8 s / 16 through its NIC);
    # rank 0's 8 nodes each write 8 s through a 50 GB/s NIC: 8 s / 50e9. Ratio
    # (8 / 50e9) / (64 / 1.25e12) = 3.125 (GPT-3: s ~ 38 GB, ~6 s against ~2 s).
    model, cluster = model_preset("gpt3-175b"), cluster_preset("h100x1024")
    table = StrategyTable.from_columns(dp=16, tp=8, pp=8, global_batch=1536, zero_stage=[0, 1],
                                       recompute="selective", sequence_parallel=True)
    m = evaluate(model, cluster, table)
    fast_fs = dict(write_Bps_per_gpu=10 * 2e12 / 16384)
    spread = plan_goodput(m, table, cluster, FailureModel(**fast_fs))
    rank0 = plan_goodput(m, table, cluster, FailureModel(ckpt_spread=False, **fast_fs))
    assert rank0["checkpoint_write_s"][0] == pytest.approx(3.125 * spread["checkpoint_write_s"][0], rel=1e-9)
    assert rank0["goodput_ratio"][0] < spread["goodput_ratio"][0]
    np.testing.assert_array_less(spread["goodput_tokens_per_s"], m["tokens_per_s"])


def test_infeasible_rows_have_no_goodput_and_bad_models_are_refused():
    assert goodput([0.0], [8], [1e9])["goodput_tokens_per_s"][0] == 0.0
    with pytest.raises(InputError, match=r"failure.gpu_mtbf_h: expected a number in \[0.001, 1e\+09\]"):
        FailureModel(gpu_mtbf_h=0)


def test_searchers_maximise_the_objective_column_where_the_driver_adds_it():
    # search._base.objective and the searchers' row costs (search._memo.row_costs) read the
    # objective column (goodput) when present, tokens_per_s otherwise; infeasible rows stay worst
    from search import objective
    from search._memo import row_costs

    m = Metrics(feasible=np.array([True, True, False]), tokens_per_s=np.array([400.0, 390.0, 0.0]),
                reason=np.array([0, 0, 1]), mem_total_bytes=np.array([1.0, 1.0, 2.0]))
    np.testing.assert_array_equal(objective(m), [400.0, 390.0, -np.inf])
    m["objective"] = np.array([300.0, 380.0, 0.0])  # the faster row loses more to failures
    np.testing.assert_array_equal(objective(m), [300.0, 380.0, -np.inf])
    cost, _ = row_costs(m, 1.0)
    np.testing.assert_allclose(cost, [1 / 300.0, 1 / 380.0, np.inf])
