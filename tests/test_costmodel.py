"""Closed forms and monotonic sanity of the cost core."""

import csv
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from costmodel import (
    H100_SXM5_SEED001,
    REASONS,
    InputError,
    StrategyTable,
    Transformer,
    cluster_preset,
    evaluate,
    gpu_preset,
    linear_end_of_batch_s,
    linear_fwd_bwd_s,
    make_cluster,
    model_preset,
)
from costmodel._collectives import tier
from costmodel._hardware import SUSTAINED_CLOCK
from costmodel._layer_compute import gemm_s


def test_seed001_linear_layer_worked_example():
    # Seed 001: H100 SXM5 (1979e12 8-bit FLOP/s, 3352e9 B/s, 900e9 B/s, base_util 0.8).
    kw = dict(d_in=16384, d_out=5 * 16384, tp_in=8, tp_out=40, dp=32, bytewidth=2)
    fwd_bwd = linear_fwd_bwd_s(H100_SXM5_SEED001, b=2048**2 / 128, **kw)
    end = linear_end_of_batch_s(H100_SXM5_SEED001, **kw)
    assert fwd_bwd == pytest.approx(3.2554072481051035e-05, rel=1e-12)
    assert end == pytest.approx(2.7088213333333335e-05, rel=1e-12)


def test_seed001_linear_layer_hand_calculation_small_case():
    # d_in = d_out = 4, no parallelism, b = 2 tokens, 1 byte words, every rate 1 (base_util 1):
    # flop = 3 * 2*16*2 = 192; global io = 16 + 8 + 32 + 16 = 72; net io 0 -> 192 s.
    dev = dataclasses.replace(H100_SXM5_SEED001, flop_per_s_8bit=1.0, global_Bps=1.0, net_Bps=1.0, base_util=1.0)
    t = linear_fwd_bwd_s(dev, d_in=4, d_out=4, tp_in=1, tp_out=1, dp=1, bytewidth=1, b=2)
    assert t == 192.0
    # dp = 2 all-reduce of 16 words: 3 * 1 * 16 / 2 = 24 words.
    assert linear_end_of_batch_s(dev, d_in=4, d_out=4, tp_in=1, tp_out=1, dp=2, bytewidth=1) == 24.0


def _eq7(B, L, s, h, V):
    """Korthikanti et al. 2022, Eq. 7: model FLOPs per iteration."""
    return 72 * B * L * s * h**2 * (1 + s / (6 * h) + V / (12 * h * L))


@pytest.mark.parametrize("name", ["gpt3-175b", "megatron-22b", "megatron-530b", "megatron-1t"])
def test_model_flops_equal_korthikanti_eq7(name):
    m = model_preset(name)
    B = 1536
    assert m.model_flops_per_sample() * B == pytest.approx(_eq7(B, m.layers, m.seq_len, m.hidden, m.vocab), rel=1e-12)


def test_parameter_counts_equal_narayanan_eq2_for_table1():
    rows = list(csv.DictReader(open(Path(__file__).parent / "data" / "megatron_table1.csv")))
    assert len(rows) == 10
    for r in rows:
        L, h, a = int(r["layers"]), int(r["hidden"]), int(r["attention_heads"])
        s, V = int(r["seq_len"]), int(r["vocab"])
        m = Transformer(name="t", layers=L, hidden=h, heads=a, seq_len=s, vocab=V)
        eq2 = 12 * L * h**2 * (1 + 13 / (12 * h) + (V + s) / (12 * L * h))
        final_layernorm = 2 * h  # Eq. 2 leaves out the final layernorm's weight and bias
        assert m.num_params() - final_layernorm == pytest.approx(eq2, rel=1e-12)
        # and the published size, rounded to 0.1 B
        assert round(m.num_params() / 1e9, 1) == pytest.approx(float(r["params_B"]), abs=0.051)


def test_llama3_parameter_counts_match_published_sizes():
    # Meta's model cards: 8.03 B, 70.6 B, 405.9 B parameters.
    for name, billions in [("llama3-8b", 8.03), ("llama3-70b", 70.6), ("llama3-405b", 405.9)]:
        assert model_preset(name).num_params() / 1e9 == pytest.approx(billions, rel=0.005)


BASE = dict(dp=8, tp=4, pp=4, micro_batch=1, global_batch=512, recompute="selective", zero_stage=1,
            sequence_parallel=True, schedule="1f1b")


def _eval(model="gpt3-175b", cluster="h100x1024", framework=None, **kw):
    cols = {**BASE, **kw}
    return evaluate(model_preset(model), cluster_preset(cluster), StrategyTable.from_columns(**cols),
                    framework=framework)


def test_more_tp_or_pp_never_raises_weight_memory():
    tp = np.array([1, 2, 4, 8, 1, 1, 1, 1, 2, 8])
    pp = np.array([1, 1, 1, 1, 2, 4, 8, 16, 16, 16])
    m = _eval(tp=tp, pp=pp, dp=1, sequence_parallel=False)
    w = m["mem_weights_bytes"]
    for i in range(len(tp)):
        for j in range(len(tp)):
            if tp[j] >= tp[i] and pp[j] >= pp[i]:
                assert w[j] <= w[i] * (1 + 1e-12), (tp[i], pp[i], tp[j], pp[j])


def test_higher_zero_stage_never_uses_more_memory():
    for pp in (1, 4):
        stages = [0, 1, 2, 3] if pp == 1 else [0, 1]
        m = _eval(zero_stage=np.array(stages), pp=pp)
        assert np.all(np.diff(m["mem_total_bytes"]) <= 0)
        assert np.all(np.diff(m["mem_optimizer_bytes"]) <= 0)


@pytest.mark.parametrize("sp", [False, True])
@pytest.mark.parametrize("schedule,vpp", [("1f1b", 1), ("gpipe", 1), ("interleaved", 2), ("zb-h1", 1)])
def test_recompute_orders_activation_memory(sp, schedule, vpp):
    m = _eval(recompute=["none", "selective", "full"], sequence_parallel=sp, schedule=schedule, vpp=vpp,
              model="megatron-22b", pp=4, tp=4)
    act = m["mem_activations_bytes"]
    assert act[2] <= act[1] <= act[0]
    assert act[2] < act[0]


def test_memory_infeasible_rows_are_flagged_not_dropped():
    # GPT-3 175B on 8 GPUs without sharding: 175e9 * 18 B / 8 GPUs = 394 GB per GPU > 80 GB.
    m = _eval(dp=1, tp=8, pp=1, global_batch=8, zero_stage=0, cluster="h100x8")
    assert len(m["feasible"]) == 1
    assert not m["feasible"][0]
    assert REASONS[m["reason"][0]] == "out_of_memory"
    assert m["mem_total_bytes"][0] > 175e9 * 18 / 8
    assert np.isinf(m["step_time_s"][0])


@pytest.mark.parametrize("cols,reason", [
    (dict(dp=64, tp=8, pp=8), "gpus_exceed_cluster"),
    (dict(tp=7, dp=1), "tp_not_divide_heads"),
    (dict(pp=5, dp=1), "pp_not_divide_layers"),
    (dict(cp=3, dp=1), "cp_not_divide_seq"),
    (dict(global_batch=100), "batch_not_divide"),
    (dict(schedule="interleaved", vpp=5), "schedule_invalid"),  # 96/4 = 24 layers, 5 does not divide
    (dict(schedule="1f1b", vpp=2), "schedule_invalid"),
    (dict(zero_stage=3), "zero_incompatible_pp"),
])
def test_reason_codes(cols, reason):
    m = _eval(**cols, framework="generic")  # (Megatron-Core splits 24 layers into 5 uneven chunks)
    assert REASONS[m["reason"][0]] == reason
    assert not m["feasible"][0]


def test_step_time_is_the_sum_of_its_parts_and_mfu_closes():
    rng = np.random.default_rng(3)
    n = 1000
    cols = {**BASE, "dp": rng.choice([1, 2, 4, 8], n), "tp": rng.choice([1, 2, 4, 8], n),
            "pp": rng.choice([1, 2, 4, 8], n), "micro_batch": rng.choice([1, 2], n),
            "recompute": rng.integers(0, 3, n), "zero_stage": rng.integers(0, 2, n), "global_batch": 1536}
    table = StrategyTable.from_columns(**cols)
    model = model_preset("gpt3-175b")
    m = evaluate(model, cluster_preset("h100x1024"), table)
    ok = m["feasible"]
    assert ok.sum() > 20
    parts = sum(m[k] for k in ("compute_s", "recompute_s", "tp_comm_s", "cp_comm_s", "pp_comm_s",
                               "dp_comm_s", "bubble_s", "optimizer_s"))
    np.testing.assert_allclose(parts[ok], m["step_time_s"][ok], rtol=1e-12)
    mem = sum(m[k] for k in ("mem_weights_bytes", "mem_grads_bytes", "mem_optimizer_bytes",
                             "mem_activations_bytes", "mem_buffers_bytes"))
    np.testing.assert_allclose(mem, m["mem_total_bytes"], rtol=1e-12)
    # MFU = Eq. 7 FLOPs / (time * GPUs * dense bf16 peak); throughput = B s / time.
    flops = _eq7(1536, model.layers, model.seq_len, model.hidden, model.vocab)
    gpus = table.num_gpus[ok]
    np.testing.assert_allclose(m["mfu"][ok], flops / (m["step_time_s"][ok] * gpus * 989.4e12), rtol=1e-12)
    np.testing.assert_allclose(m["tokens_per_s"][ok], 1536 * 2048 / m["step_time_s"][ok], rtol=1e-12)
    # selective recompute re-runs attention's 4 s h FLOPs per token per layer; full the whole forward.
    assert np.all(m["hfu"][ok] >= m["mfu"][ok])


def test_tp_group_inside_a_node_is_cheaper_than_across_nodes():
    # tp=8 fits a DGX node (8 GPUs); on 4-GPU nodes the same group spans two nodes and pays
    # the network's 50 GB/s instead of NVLink's 450 GB/s.
    model = model_preset("gpt3-175b")
    table = StrategyTable.from_columns(**{**BASE, "tp": 8})
    dgx = evaluate(model, make_cluster("h100", 1024, gpus_per_node=8), table)
    four = evaluate(model, make_cluster("h100", 1024, gpus_per_node=4), table)
    ratio = four["tp_comm_s"][0] / dgx["tp_comm_s"][0]
    assert ratio > 5  # bandwidth ratio 9x, latency terms alike


def test_gpu_presets_are_dense_figures():
    # The data README warns that vendor pages quote sparse FLOP/s (1979 for H100 BF16).
    assert gpu_preset("h100").peak_flops[0] == pytest.approx(989.4e12)
    assert gpu_preset("a100").peak_flops[0] == pytest.approx(312e12)


@pytest.mark.parametrize("name, mamf_tflops", [
    # S. Bekman, Machine Learning Engineering, compute/accelerator, the MAMF table: A100 SXM, H100 SXM and GH200 (the
    # H200's chip) as first published; B200 SXM, B300 SXM, GB200 and MI300X from its version 744d01e (2026-08),
    # GB300 none (GB200's figure, at the same 2,500 TFLOP/s peak)
    ("a100", 267.9), ("h100", 792.1), ("h200", 821.0), ("b200", 1745.0), ("b300", 1769.0), ("gb200", 1822.0),
    ("gb300", 1822.0), ("mi300x", 668.4)])
def test_largest_products_run_at_the_published_matmul_ceiling(name, mamf_tflops):
    # a product large enough that every shape term is within 0.1% of one, at burst clock (MAMF is a burst)
    gpu = gpu_preset(name)
    burst = dataclasses.replace(gpu, gemm_eff_max=gpu.gemm_eff_max / SUSTAINED_CLOCK)
    n = 2.0**20
    tflops = 2 * n**3 / gemm_s(n, n, n, gpu.peak_flops[0], burst) / 1e12
    assert tflops == pytest.approx(mamf_tflops, rel=2e-3)


@pytest.mark.parametrize("typed, preset", [
    ("A100-SXM4-80GB", "A100-SXM4-80GB"), ("a100-sxm4-80gb", "A100-SXM4-80GB"), ("a100_80gb", "A100-SXM4-80GB"),
    ("A100 40GB", "A100-SXM4-40GB"), ("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB"), ("H100 SXM", "H100-SXM5-80GB"),
    ("NVIDIA H100 80GB HBM3", "H100-SXM5-80GB"), ("H100-SXM5-80GB", "H100-SXM5-80GB"),
    ("H100 96GB", "H100-SXM5-96GB-500W"),
    ("h200 sxm 141gb", "H200-SXM-141GB"), ("AMD Instinct MI300X", "MI300X-OAM-192GB"), ("B200", "B200-HGX-180GB"),
    ("NVIDIA B300 SXM6 AC", "B300-HGX-288GB"), ("b300", "B300-HGX-288GB"),
])
def test_gpu_names_as_users_write_them(typed, preset):
    assert gpu_preset(typed).name == preset


@pytest.mark.parametrize("typed", ["A100-PCIE-40GB", "H100 PCIe", "V100", "H100 80GB 500W", "A100 80GB 40GB",
                                   "H100 64GB"])
def test_a_gpu_name_that_fits_no_preset_or_another_product_is_refused(typed):
    # a PCIe card is not the NVLink board part every preset is; a memory no preset has matches none
    with pytest.raises(InputError, match="gpu"):
        gpu_preset(typed)


def test_nvl72_presets_are_a_rack_of_72_on_nvlink():
    """GB200 NVL72: the GB200 variant of B200 (1,200 W) at 2,500 dense BF16 and 5,000 dense FP8 TFLOP/s; the rack's
    13.4 TB of HBM3e and 576 TB/s over 72 GPUs (186 GB, 8 TB/s a GPU; nvidia-smi shows 189,471 MiB a GPU);
    NVLink5's 1.8 TB/s both ways (900 GB/s each); one 400 Gb/s InfiniBand port a GPU (50 GB/s). GB300: 279 GB
    (284,208 MiB on nvidia-smi) and one 800 Gb/s ConnectX-8 a GPU (100 GB/s). A cluster of them is racks of 72 on
    NVLink unless a file says otherwise; a count that is no whole number of racks takes the segments Megatron-Bridge's
    launcher asks for (jobs often take 16 of a rack's 18 trays)."""
    g = gpu_preset("gb200")
    assert g.peak_flops == pytest.approx((2500e12, 2500e12, 5000e12))
    assert (g.hbm_bytes, g.hbm_Bps, g.scaleup_Bps, g.scaleout_Bps) == pytest.approx(
        (189471 * 2**20, 8e12, 900e9, 50e9))
    g3 = gpu_preset("gb300")
    assert g3.peak_flops == pytest.approx((2500e12, 2500e12, 5000e12))
    assert (g3.hbm_bytes, g3.scaleout_Bps) == pytest.approx((284208 * 2**20, 100e9))
    two = cluster_preset("gb200x144")
    assert (two.nodes, two.gpus_per_node) == (2, 72)
    assert (cluster_preset("h100x16").nodes, cluster_preset("b200x64").gpus_per_node) == (2, 8)  # boards of 8 stay
    # a count of GPUs that is no whole number of racks: the NVLink domains Megatron-Bridge's launcher asks Slurm for,
    # whole trays of 4, the most of a rack's 18 that divide the job's trays: 256 GPUs are 64 trays, 16 a domain; 100
    # are 25 trays, 5 a domain (25 has no divisor from 6 to 18); 98 GPUs are no whole tray; up to a rack, one domain
    for name, racks in (("gb200x256", (4, 64)), ("gb300x1024", (16, 64)), ("gb200x100", (5, 20)),
                        ("gb200x40", (1, 40)), ("gb200x2", (1, 2)), ("gb200x144", (2, 72))):
        c = cluster_preset(name)
        assert (c.nodes, c.gpus_per_node) == racks, name
    with pytest.raises(InputError, match="a multiple of 4"):
        cluster_preset("gb200x98")
    racks_of_64 = make_cluster("gb200", 256, gpus_per_node=64)
    assert (racks_of_64.nodes, racks_of_64.gpus_per_node) == (4, 64)
    # a tp 8 group inside a rack rides NVLink; dp over the 72 GPUs of one rack too; tp 16 groups laid from rank 0
    # straddle the racks' boundary at ranks 64-79 (72 is no multiple of 16), so they wait on the network
    bw = lambda span, c: tier(span, c, c.gpu)[0]  # noqa: E731
    assert bw(8, two) == pytest.approx(900e9 * g.link_eff) and bw(72, two) == pytest.approx(900e9 * g.link_eff)
    assert bw(16, two) == pytest.approx(50e9 * g.link_eff)
    assert bw(16, racks_of_64) == pytest.approx(900e9 * g.link_eff)


@pytest.mark.parametrize("name, mib", [("a100-40gb", 40960), ("a100", 81920), ("a800", 81920), ("h100", 81559),
                                       ("h800", 81559), ("h200", 143771), ("b200", 183359), ("gb200", 189471)])
def test_gpu_memory_is_what_the_device_reports(name, mib):
    """A plan fits against the device's memory as nvidia-smi reports it (MiB), not the product's round figure:
    an "80 GB" H100 holds 81,559 MiB, 85.5e9 bytes, about 7% more than 80e9."""
    assert gpu_preset(name).hbm_bytes == mib * 2**20
    assert gpu_preset("mi300x").hbm_bytes == 205_822_885_888  # rocm-smi's VRAM total, bytes


def test_a_plan_fits_against_the_device_memory():
    """GPT-3 175B at tp 8, pp 16, dp 8 with selective recompute on H100s: 60.8 GB a GPU fits 81,559 MiB; on
    a GPU of the same figures with 60e9 bytes it does not (the same plan, the same bytes)."""
    import dataclasses

    from costmodel import StrategyTable, cluster_preset, evaluate, model_preset
    model, cluster = model_preset("gpt3-175b"), cluster_preset("h100x1024")
    t = StrategyTable.from_columns(dp=8, tp=8, pp=16, micro_batch=1, global_batch=1536, recompute="selective")
    m = evaluate(model, cluster, t, framework="generic")
    assert bool(m["feasible"][0]) and 60e9 < m["mem_total_bytes"][0] < 81559 * 2**20
    small = dataclasses.replace(cluster, gpu=dataclasses.replace(cluster.gpu, hbm_bytes=60e9))
    m2 = evaluate(model, small, t, framework="generic")
    assert not bool(m2["feasible"][0]) and m2["mem_total_bytes"][0] == m["mem_total_bytes"][0]
