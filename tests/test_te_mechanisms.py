"""Transformer Engine's work outside its kernels, each against a hand calculation: the fp8 casts around its GEMMs (per
scaling recipe, costmodel._frameworks.TE_FP8_CAST_BYTES) and its P2P ring attention's exchange, merges and launches
(costmodel._layer_compute.te_ring_terms)."""

import dataclasses

import numpy as np
import pytest

from costmodel import StrategyTable, cluster_preset, evaluate, framework_preset, model_preset
from costmodel._layer_compute import fp8_cast_columns, fp8_cast_parts_s
from costmodel._layer_terms import framework_terms, moe_layer_inputs, shape_terms
from costmodel._workloads import Transformer


def test_te_fp8_casts_by_hand_delayed_and_current_scaling():
    """Llama 3 8B layer, tp 1, 8192 tokens (h 4096, q 4096, hk 1024, f 14336). Delayed scaling (megatron-core): a
    cast-transpose reads 2 bytes and writes two fp8 copies (4) for the projection's input (4096 a token), FC2's (14336)
    and every output gradient (QKV 6144, projection 4096, FC1 and gate 28672, FC2 4096: 43,008 a token); a norm writes
    QKV's and FC1's inputs in fp8 itself, the transposed copy one more pass (read 1, write 1) less the byte its 16-bit
    write saves: 1. Forward 1 x 4096 + 4 x 4096 + 1 x 4096 + 4 x 14336 = 81,920 bytes a token, backward 4 x 43,008 =
    172,032; the attention's part forward 1 x 4096 + 4 x 4096 = 20,480, backward 4 x (6144 + 4096) = 40,960. Current
    scaling (megatron-bridge) takes the amax in a pass of its own (read 2 more): 6 for the cast-transposed tensors, 4
    after a norm (whose 16-bit write is counted as before): forward 4 x 4096 + 6 x 4096 + 4 x 4096 + 6 x 14336 =
    143,360, backward 6 x 43,008 = 258,048. Weights are cast once a step: 0 a micro-batch."""
    model, gpu = model_preset("llama3-8b"), cluster_preset("h100x8").gpu
    T, t, rate = np.array([8192.0]), np.array([1]), gpu.hbm_Bps * gpu.hbm_eff
    fp8 = np.array([True])
    mc = fp8_cast_columns(framework_preset("megatron-core"), fp8)
    af, ab, mf, mb = fp8_cast_parts_s(model, T, t, gpu, mc)
    np.testing.assert_allclose(af + mf, 8192 * 81920 / rate, rtol=1e-12)
    np.testing.assert_allclose(ab + mb, 8192 * 172032 / rate, rtol=1e-12)
    np.testing.assert_allclose(af, 8192 * 20480 / rate, rtol=1e-12)
    np.testing.assert_allclose(ab, 8192 * 40960 / rate, rtol=1e-12)
    br = fp8_cast_columns(framework_preset("megatron-bridge"), fp8)
    af, ab, mf, mb = fp8_cast_parts_s(model, T, t, gpu, br)
    np.testing.assert_allclose(af + mf, 8192 * 143360 / rate, rtol=1e-12)
    np.testing.assert_allclose(ab + mb, 8192 * 258048 / rate, rtol=1e-12)
    # bf16 rows cast nothing; a profile without casts has no columns
    assert all(np.all(x == 0) for x in fp8_cast_columns(framework_preset("megatron-core"), np.array([False])))
    assert fp8_cast_columns(framework_preset("hai-llm"), fp8) is None


def test_te_fp8_casts_at_tensor_parallel_4_split_what_is_split():
    """The same layer at tp 4, 8192 tokens a rank gathered: inputs a norm wrote stay h wide (4096 at 1 byte), the
    projection's and FC2's are split (1024, 3584 at 4), the output gradients QKV 1536, FC1 7168 split and the
    projection's and FC2's h wide (4096, 4096): forward 4096 + 4 x 1024 + 4096 + 4 x 3584 = 26,624 bytes a token,
    backward 4 x (1536 + 4096 + 7168 + 4096) = 67,584."""
    model, gpu = model_preset("llama3-8b"), cluster_preset("h100x8").gpu
    rate = gpu.hbm_Bps * gpu.hbm_eff
    cols = fp8_cast_columns(framework_preset("megatron-core"), np.array([True]))
    af, ab, mf, mb = fp8_cast_parts_s(model, np.array([8192.0]), np.array([4]), gpu, cols)
    np.testing.assert_allclose(af + mf, 8192 * 26624 / rate, rtol=1e-12)
    np.testing.assert_allclose(ab + mb, 8192 * 67584 / rate, rtol=1e-12)


SHARED = Transformer(name="tiny-shared", layers=4, hidden=1024, heads=16, kv_heads=4, ffn_hidden=4096, seq_len=2048,
                     vocab=32000, activation="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False,
                     learned_positions=False, experts=8, experts_per_token=2, shared_experts=1, expert_ffn_hidden=512,
                     shared_expert_ffn_hidden=1024, dense_layers=0, moe_layer_freq=1)


def test_an_moe_layer_casts_its_attention_shared_and_routed_experts_not_a_dense_mlp():
    """An MoE layer (h 1024, q 1024, hk 256, 8 experts of ffn 512 top-2, one shared expert of ffn 1024), tp 1, ep 1,
    2048 tokens, megatron-core fp8 (delayed: 4, 1 after a norm). Attention: forward 1 x 1024 + 4 x 1024 = 5,120
    bytes a token, backward 4 x (1536 + 1024) = 10,240. Shared expert (its input the separate pre-MLP norm's 16-bit
    output: 4): forward 4 x (1024 + 1024) = 8,192, backward 4 x (2048 + 1024) = 12,288. Routed experts (2 x 2048 =
    4,096 copies, expert_fp8_cast_bytes 4): forward 4 x 4096 x (1024 + 512), backward 4 x 4096 x (1024 + 1024). The
    dense MLP of ffn 4096, which the layer does not run, is not cast."""
    model, cl = SHARED, cluster_preset("h100x8")
    gpu, one, fw = cl.gpu, np.array([1]), framework_preset("megatron-core")
    rate = gpu.hbm_Bps * gpu.hbm_eff
    prec = np.array([2])  # fp8
    casts = fp8_cast_columns(fw, prec == 2)
    sh = shape_terms(model, cl, one, one, one, np.array([False]), gpu.peak_flops[2], casts=casts,
                     moe=(one, one, fw, prec), peak16=gpu.peak_flops[0])
    lt = moe_layer_inputs(framework_terms(fw, model, sh, one, np.array([False]), prec), model)
    T = 2048
    fwd = T * (5120 + 8192) + 4 * 4096 * (1024 + 512)
    bwd = T * (10240 + 12288) + 4 * 4096 * (1024 + 1024)
    np.testing.assert_allclose(lt["cast_f"], fwd / rate, rtol=1e-12)
    np.testing.assert_allclose(lt["cast_b"], bwd / rate, rtol=1e-12)


def _llama_ring(cp, seq, t=8, b=1, bw=40e9, lat=10e-6):
    """One Llama 3 405B layer's shape terms under megatron-core at context parallelism ``cp`` on a given ring link."""
    model = dataclasses.replace(model_preset("llama3-405b"), seq_len=seq)
    cl = cluster_preset("h100x1024")
    gpu, n = cl.gpu, np.array([1])
    c = np.array([cp])
    link = (np.array([bw]), np.array([lat]))
    sh = shape_terms(model, cl, n * b, n * t, c, np.array([True]), gpu.peak_flops[0], cp_link=link,
                     peak16=gpu.peak_flops[0])
    return model, gpu, sh, framework_terms(framework_preset("megatron-core"), model, sh, n * t, np.array([True]),
                                           np.array([0]))


def test_te_ring_merges_and_launches_by_hand():
    """Llama 3 405B (q 16384, hk 1024), tp 8, cp 4 at 32,768 tokens: 8,192 a rank, E_q = 8192 x 2048 = 16,777,216
    elements of Q, E_kv = 2 x 8192 x 128 = 2,097,152 of K and V. Forward: the K, V cat 4 E_kv, the first output's copy
    4 E_q, three later steps' corrections 4.5 E_q each: 4 x 2,097,152 + 4 x 16,777,216 + 13.5 x 16,777,216 =
    301,989,888 bytes; backward: the buffer copy 4 E_kv, the first step's dQ, dK, dV 4 (E_q + E_kv), the later steps'
    accumulations 3 x 4.5 (E_q + E_kv): 8,388,608 + 75,497,472 + 254,803,968 = 338,690,048 bytes. Kernels at 20 us /
    6 each: forward 2 + 3 x 3 = 11, backward 4 + 3 x 4 = 16."""
    _, gpu, sh, ring = _llama_ring(4, 32768)
    rate, k = gpu.hbm_Bps * gpu.hbm_eff, gpu.kernel_overhead_s / 6
    np.testing.assert_allclose(ring["cast_f"] - sh["cast_f"], 301_989_888 / rate + 11 * k, rtol=1e-12)
    np.testing.assert_allclose(ring["cast_b"] - sh["cast_b"], 338_690_048 / rate + 16 * k, rtol=1e-12)
    # without context parallelism nothing changes
    _, _, sh1, ring1 = _llama_ring(1, 8192)
    for key in ("cast_f", "cast_b", "cp_fwd", "cp_bwd"):
        np.testing.assert_array_equal(ring1[key], sh1[key])


def test_te_ring_exchange_is_exposed_step_by_step():
    """The same layer at cp 4 on a slow ring (1 GB/s, 10 us): K, V of a rank, 2,097,152 elements x 2 bytes = 4,194,304
    bytes, take 4.194 ms + 10 us a send; with dK, dV 8.389 ms + 10 us. Each step's attention is a quarter of the
    layer's (attn / 4 forward, 2 attn / 4 backward). Forward: 3 sends, each exposed past its step's attention; backward:
    step 0 sends K, V, steps 1 and 2 K, V with dK, dV, step 3 dK, dV alone."""
    _, _, sh, ring = _llama_ring(4, 32768, bw=1e9)
    a = float(sh["attn"][0])
    one, two = 4_194_304 / 1e9 + 10e-6, 8_388_608 / 1e9 + 10e-6
    assert one > a / 4 and one > a / 2  # a slow link: every send outlasts its step
    np.testing.assert_allclose(ring["cp_fwd"], 3 * (one - a / 4), rtol=1e-12)
    np.testing.assert_allclose(ring["cp_bwd"], 2 * (one - a / 2) + 2 * (two - a / 2), rtol=1e-12)
    # on NVLink-class bandwidth every send hides behind its step
    _, _, _, fast = _llama_ring(4, 32768, bw=400e9)
    assert fast["cp_fwd"][0] == 0.0 and fast["cp_bwd"][0] == 0.0


def test_megatron_profiles_price_te_and_others_do_not():
    assert framework_preset("megatron-core").te_ring_attention
    assert framework_preset("megatron-bridge").te_ring_attention
    assert not framework_preset("fsdp2").te_ring_attention and not framework_preset("generic").te_ring_attention
    assert framework_preset("megatron-core").fp8_cast_bytes == (4.0, 0.0, 4.0, 0.0)
    assert framework_preset("megatron-bridge").fp8_cast_bytes == (6.0, 0.0, 6.0, 0.0)


def test_fp8_casts_slow_an_fp8_step_and_leave_bf16_alone():
    """Whole rows: the same fp8 Llama 3 8B step with the casts priced is longer than without them by the casts' time
    times the layers and micro-batches (recompute none, no pipeline); a bf16 row is unchanged."""
    model, cl = model_preset("llama3-8b"), cluster_preset("h100x8")
    t = StrategyTable.from_columns(dp=8, tp=1, pp=1, micro_batch=1, global_batch=8, precision=["fp8", "bf16"],
                                   recompute="none", zero_stage=1)
    fw = framework_preset("megatron-core")
    bare = dataclasses.replace(fw, name="mc-no-casts", fp8_cast_bytes=(0.0,) * 4, fp8_norm_cast_bytes=0.0)
    with_c, without = evaluate(model, cl, t, framework=fw), evaluate(model, cl, t, framework=bare)
    rate = cl.gpu.hbm_Bps * cl.gpu.hbm_eff
    per_layer = 8192 * (81920 + 172032) / rate  # test_te_fp8_casts_by_hand_delayed_and_current_scaling
    assert with_c["compute_s"][0] - without["compute_s"][0] == pytest.approx(32 * per_layer, rel=1e-9)
    assert with_c["step_time_s"][1] == without["step_time_s"][1]


def test_dropless_moe_layer_runs_no_faster_than_the_host_launches_it():
    """Qwen3-30B-A3B (128 experts, top-8, hidden 2048, expert ffn 768), 2048 tokens, ep 8: 16 local experts. Under fp8
    the forward
    launches the attention sub-layer's 6 kernels, the MoE part's 28 fixed ones and per local expert two GEMMs and two
    quantizations: 6 + 28 + 16 x 2 x 2 = 98 kernels, at 30 us each on the host: 2.94 ms; the backward twice that.
    With the host wait (megatron-core: dropless routing) a layer's forward takes at least 2.94 ms and its backward with
    the weight gradients at least 5.88 ms, the exchanges it exposes (tensor parallel, all-to-all) inside that time as
    its kernels are; without it (moe_host_sync off) the GPU's own times with the exchanges after them."""
    from costmodel._experts import HOST_S_PER_KERNEL, moe_layer_costs
    from costmodel._layer_compute import layer_costs
    from costmodel._layer_terms import layer_terms

    assert HOST_S_PER_KERNEL == 30e-6
    model = dataclasses.replace(model_preset("qwen3-30b-a3b"), seq_len=2048)
    cl = cluster_preset("h100x64")
    one, peak = np.array([1]), cl.gpu.peak_flops[2]
    lc = layer_costs(model, cl, one, one, one, np.array([False]), peak, peak16=cl.gpu.peak_flops[0])
    lc.update(cast_f=0.0 * one, cast_b=0.0 * one, sel_re=0.0 * one, sel_tp=0.0 * one, tp_bwd=lc["tp_fwd"])
    out = {}
    for sync in (False, True):
        m = moe_layer_costs(model, cl, lc, one, np.array([False]), np.array([8]), peak, False, fp8_cast=np.array([4.0]),
                            host_sync=np.array([sync]))
        out[sync] = (m, layer_terms({**m, "cast_f": m["xcast_f"], "cast_b": m["xcast_b"]}, np.array([False]),
                                    np.array([False])))
    m, lt = out[True]
    np.testing.assert_allclose(m["host_f"], 98 * 30e-6, rtol=1e-12)
    assert out[False][0]["host_f"][0] == 0.0
    gpu_f = out[False][1]["F"]  # the forward's GPU work, its exposed exchanges with it
    gpu_bw = out[False][1]["B"] + out[False][1]["W"]
    assert m["ep_fwd"][0] > 0 and gpu_f[0] < 98 * 30e-6 and gpu_bw[0] < 2 * 98 * 30e-6  # host-bound both ways
    np.testing.assert_allclose(lt["F"], 98 * 30e-6, rtol=1e-9)
    np.testing.assert_allclose(lt["B"] + lt["W"], 2 * 98 * 30e-6, rtol=1e-9)
    # at 8192 tokens the GPU's time passes the host's: nothing added
    model = dataclasses.replace(model, seq_len=8192)
    lc = layer_costs(model, cl, one, one, one, np.array([False]), peak, peak16=cl.gpu.peak_flops[0])
    lc.update(cast_f=0.0 * one, cast_b=0.0 * one, sel_re=0.0 * one, sel_tp=0.0 * one, tp_bwd=lc["tp_fwd"])
    big = [layer_terms({**m, "cast_f": m["xcast_f"], "cast_b": m["xcast_b"]}, np.array([False]), np.array([False]))
           for m in (moe_layer_costs(model, cl, lc, one, np.array([False]), np.array([8]), peak, False,
                                     fp8_cast=np.array([4.0]), host_sync=np.array([s])) for s in (False, True))]
    assert big[0]["F"][0] == big[1]["F"][0] and big[0]["B"][0] == big[1]["B"][0]
    assert framework_preset("megatron-core").moe_host_sync and not framework_preset("fsdp2").moe_host_sync
