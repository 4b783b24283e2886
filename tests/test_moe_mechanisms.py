"""What Megatron-Core's MoE layer adds to a dense one, each mechanism against a hand calculation: the HBM bytes of its
router, permutation and sort kernels, the fp8 quantization of its expert GEMMs, its kernel launches, and the EP A2A
overlap's pairing of a forward with a backward on one communication stream (costmodel._experts)."""

import dataclasses

import numpy as np
import pytest

from costmodel import REASONS, StrategyTable, cluster_preset, evaluate, framework_preset, model_preset
from costmodel._experts import comm_sm_fraction, moe_layer_costs, overlapped_a2a_s
from costmodel._layer_compute import layer_costs
from costmodel._sms import streaming_multiprocessors


def _layer(name, cluster, ep, *, seq=4096, fp8_cast=0.0, overlap=False, per_node=False, sm_frac=0.0, t=1):
    """moe_layer_costs of one micro-batch of ``seq`` tokens (b = 1, cp = 1), and the GPU."""
    model = dataclasses.replace(model_preset(name), seq_len=seq)
    cl = cluster_preset(cluster)
    one = np.array([1])
    lc = layer_costs(model, cl, one, one * t, one, np.array([t > 1]), cl.gpu.peak_flops[0])
    out = moe_layer_costs(model, cl, lc, one * t, np.array([t > 1]), np.array([ep]), cl.gpu.peak_flops[0], overlap,
                          per_node, np.array([1]), fp8_cast=np.array([fp8_cast]), sm_frac=sm_frac)
    return model, cl.gpu, lc, out


def test_permute_and_unpermute_bytes_of_a_mixtral_layer_by_hand():
    """Mixtral 8x7B, 4096 tokens on one GPU, top-2, hidden 4096, expert ffn 14336, ep 8 (one local expert: no sort).
    Permute reads each of the 8192 copies' token and writes the copy: 2 x 8192 x 4096 x 2 B = 134,217,728 B; unpermute
    reads every copy and writes every token: (8192 + 4096) x 4096 x 2 B = 100,663,296 B; 234,881,024 B in all. With
    the router's 34 bytes a token and expert (4096 x 8 x 34 = 1,114,112), the dense layer's norms and residual adds
    (11 x 4096 x 4096 x 2 B) and SwiGLU over the copies (3 x 8192 x 14336 x 2 B), the layer's element-wise time is
    their sum at the HBM rate. At ep 4 each GPU holds 2 experts and sorts the received copies by expert and back:
    4 x 8192 x 4096 x 2 B = 268,435,456 B more."""
    model, gpu, _, out = _layer("mixtral-8x7b", "h100x64", 8)
    permutation = 2 * 8192 * 4096 * 2 + (8192 + 4096) * 4096 * 2
    assert permutation == 234_881_024
    router = 4096 * 8 * 34
    dense = 11 * 4096 * 4096 * 2
    swiglu = 3 * 8192 * 14336 * 2
    rate = gpu.hbm_Bps * gpu.hbm_eff
    assert out["elem"][0] == pytest.approx((permutation + router + dense + swiglu) / rate, rel=1e-12)
    _, _, _, ep4 = _layer("mixtral-8x7b", "h100x64", 4)
    assert ep4["elem"][0] - out["elem"][0] == pytest.approx(4 * 8192 * 4096 * 2 / rate, rel=1e-9)


def test_expert_fp8_quantization_bytes_by_hand():
    """Qwen3-30B-A3B (hidden 2048, 128 experts of ffn 768, top-8), 4096 tokens, ep 8: the busiest GPU's experts take
    8 x 4096 = 32,768 copies. Under fp8 Transformer Engine quantizes each GEMM's input forward (FC1: 32,768 x 2048,
    FC2: 32,768 x 768) and its output gradient backward (FC1: 32,768 x 1536, FC2: 32,768 x 2048), reading 2 bytes and
    writing a row-wise and a column-wise fp8 copy: 4 bytes an element. megatron-core prices it on fp8 rows only."""
    _, gpu, _, out = _layer("qwen3-30b-a3b", "h100x64", 8, fp8_cast=4.0)
    rate = gpu.hbm_Bps * gpu.hbm_eff
    assert out["xcast_f"][0] == pytest.approx(4 * 32768 * (2048 + 768) / rate, rel=1e-12)
    assert out["xcast_b"][0] == pytest.approx(4 * 32768 * (1536 + 2048) / rate, rel=1e-12)
    assert framework_preset("megatron-core").expert_fp8_cast_bytes == 4.0
    assert framework_preset("fsdp2").expert_fp8_cast_bytes == 0.0
    model, cl = dataclasses.replace(model_preset("qwen3-30b-a3b"), seq_len=4096), cluster_preset("h100x64")

    def step(precision):
        t = StrategyTable.from_columns(dp=8, tp=1, pp=1, ep=8, micro_batch=4, global_batch=32, precision=precision,
                                       recompute="none", zero_stage=1)
        return evaluate(model, cl, t, framework="megatron-core")["compute_s"][0]

    bf16 = _layer("qwen3-30b-a3b", "h100x64", 8)[3]
    # fp8 GEMMs still win where the GPU, not the host's launches, sets the pace (micro-batch 4: 16,384 tokens; at
    # micro-batch 1 the layer is host-bound and fp8's quantization launches cost more than its GEMMs save)
    assert bf16["xcast_f"][0] == 0.0 and step("fp8") < step("bf16")


def test_kernel_launches_by_hand():
    """Per MoE layer forward: the attention sub-layer's unit and 28 fixed kernels (norm and residual add 2, router 6,
    dispatcher preprocess 11, permutation, all-to-alls, sort, activation, unsort, unpermute 9), 2 GEMMs per local
    expert, 2 more quantizations per local expert under fp8, at kernel_overhead_s per 6 kernels. Qwen3-30B-A3B at ep
    8 (16 local experts): 1 + (28 + 32) / 6 = 11 units in bf16, 1 + (28 + 64) / 6 under fp8; at ep 128 (one local
    expert) 1 + 30 / 6 = 6. DeepSeek-V3 (a shared expert: 3 more) at ep 8 (32 local): 1 + (28 + 3 + 64) / 6."""
    for ep, cast, units in ((8, 0.0, 11.0), (8, 4.0, 1 + 92 / 6), (128, 0.0, 6.0)):
        _, gpu, lc, out = _layer("qwen3-30b-a3b", "h100x64", ep, fp8_cast=cast)
        assert lc["overhead"][0] == 2 * gpu.kernel_overhead_s
        assert out["overhead"][0] == pytest.approx(units * gpu.kernel_overhead_s, rel=1e-12), (ep, cast)
    _, gpu, _, out = _layer("deepseek-v3", "h100x64", 8)
    assert out["overhead"][0] == pytest.approx((1 + 95 / 6) * gpu.kernel_overhead_s, rel=1e-12)


def test_overlap_pair_by_hand():
    """One forward and one backward through a layer: communication stream combine-bwd (a_d), dispatch-fwd (a_d),
    dispatch-bwd (a_c), combine-fwd (a_c); computation stream Af, Mb, Mw, Mf, Ab.
    Covered: Af 1, Mb 2, Mw 1, Mf 2, Ab 3, all-to-alls 0.5: dispatch-fwd 1-1.5, dispatch-bwd 3-3.5, Mf 4-6,
    combine-fwd 6-6.5, Ab 6-9: the pair takes 9 = its computation, nothing exposed; holding 15% of the SMs the
    all-to-alls slow it by 0.15 x 2.
    Bound by communication: Af 1, Mb 1, Mw 0.5, Mf 1, Ab 2, all-to-alls 3: combine-bwd 0-3, dispatch-fwd 3-6,
    dispatch-bwd 6-9 (after Mb 3-4), Mf 6-7, combine-fwd 9-12, Ab 9-11: 12 - 5.5 = 6.5 exposed (12 without overlap).
    Held by order, though the all-to-alls (4) are shorter than the computation (8.2): Af 0.1, Mb 4, Mw 0, Mf 0.1, Ab 4,
    all-to-alls 1: Mb 1-5, dispatch-bwd 5-6, Ab 6-10: 10 - 8.2 = 1.8 exposed."""
    assert overlapped_a2a_s(1.0, 2.0, 2.0, 1.0, 3.0, 0.5, 0.5, 0.0) == pytest.approx(0.0, abs=1e-15)
    assert overlapped_a2a_s(1.0, 2.0, 2.0, 1.0, 3.0, 0.5, 0.5, 0.15) == pytest.approx(0.3, rel=1e-12)
    assert overlapped_a2a_s(1.0, 1.0, 1.0, 0.5, 2.0, 3.0, 3.0, 0.0) == pytest.approx(6.5, rel=1e-12)
    assert overlapped_a2a_s(0.1, 0.1, 4.0, 0.0, 4.0, 1.0, 1.0, 0.0) == pytest.approx(1.8, rel=1e-12)
    # vectorised over rows
    got = overlapped_a2a_s(np.array([1.0, 1.0]), 2.0, 2.0, 1.0, 3.0, np.array([0.5, 3.0]), np.array([0.5, 3.0]), 0.0)
    assert got[0] == pytest.approx(0.0, abs=1e-15) and got[1] > 0


def test_overlap_splits_the_pair_over_forward_and_backward_and_deepep_holds_sms():
    """moe_layer_costs under the overlap: ep_fwd = ep_bwd = half the pair's exposed time; without it each direction
    exposes a dispatch and a combine. DeepEP holds 20 SMs: 20 / 132 of an H100's, 20 / 148 of a B200's whatever NCCL's
    channels would be; NCCL's all-to-all its CTAs (16 here: 16 / 132; tests/test_a2a_sms.py derives them)."""
    assert streaming_multiprocessors("H100-SXM5-80GB") == 132 and streaming_multiprocessors("B200-HGX-180GB") == 148
    assert comm_sm_fraction(True, 132, 16) == pytest.approx(20 / 132)
    assert comm_sm_fraction(True, 148, 32) == pytest.approx(20 / 148)
    assert comm_sm_fraction(False, 132, 16) == pytest.approx(16 / 132)
    _, _, _, plain = _layer("qwen3-235b-a22b", "h100x1024", 32, per_node=True)
    _, _, _, over = _layer("qwen3-235b-a22b", "h100x1024", 32, per_node=True, overlap=True, sm_frac=20 / 132)
    assert over["ep_fwd"][0] == over["ep_bwd"][0] < plain["ep_fwd"][0]
    assert over["ep_fwd"][0] > 0  # the SMs DeepEP holds while hidden


def test_expert_gemms_priced_at_each_local_experts_rows_by_hand():
    """Qwen3-30B-A3B (hidden 2048, 128 experts of ffn 768, top-8, SwiGLU), 4096 tokens, ep 8 on H100: 16 local
    experts share the 8 x 4096 = 32,768 copies the GPU receives, 2,048 rows each. Each expert's FC1 is a
    2048 x 2048 @ 2048 x 1536 product and its FC2 2048 x 768 @ 768 x 2048, at the roofline's utilisation of their own
    sides: gemm_eff_max x s(2048) s(1536) s(2048) with s(x) = x / (x + 240) (the H100's gemm_half_dim), not of the
    layer's 32,768 rows. Router: 4096 x 2048 @ 2048 x 128. All compute-bound here (FC2: 2 x 2048 x 2048 x 768 FLOPs
    against (2048 x 768 + 768 x 2048 + 2048 x 2048) x 2 bytes)."""
    _, gpu, lc, out = _layer("qwen3-30b-a3b", "h100x64", 8)
    peak, e = gpu.peak_flops[0], gpu.gemm_eff_max

    def s(x):
        return x / (x + 240.0)

    fc1 = 2 * 2048 * 1536 * 2048 / (peak * e * s(2048) * s(1536) * s(2048))
    fc2 = 2 * 2048 * 2048 * 768 / (peak * e * s(2048) * s(2048) * s(768))
    router = 2 * 4096 * 128 * 2048 / (peak * e * s(4096) * s(128) * s(2048))
    assert gpu.gemm_half_dim == 240.0
    assert out["gemm"][0] - lc["attn_gemm"][0] == pytest.approx(16 * (fc1 + fc2) + router, rel=1e-12)
    # the layer's 32,768 rows in one product would run faster: s(32768) = 0.993 against s(2048) = 0.895
    whole = 2 * 32768 * 1536 * 2048 / (peak * e * s(32768) * s(1536) * s(2048))
    assert 16 * fc1 > 1.1 * whole


def test_unpaired_share_by_hand():
    """Megatron-Core's EP A2A overlap pairs passes only in the combined 1F1B steady state. Without a pipeline the first
    forward and the last backward run alone: 1 of m = 8. Interleaved, p 8, v 4, m 128 (512 chunk passes a stage):
    stage 0 runs (8 - 0 - 1) x 2 + 3 x 8 + 1 = 39 warm-up forwards alone, stage 7 0 + 24 + 1 = 25. p 4, v 2, m 4:
    stage 0's 6 + 4 + 1 = 11 exceed its 8 passes: all alone. A pipeline without interleaving is not overlapped."""
    from costmodel._experts import unpaired_share
    assert unpaired_share(False, 1, 8, 1, 0) == pytest.approx(1 / 8, rel=1e-15)
    got = unpaired_share(True, 8, 128, 4, np.array([0, 7]))
    assert got[0] == pytest.approx(39 / 512, rel=1e-15) and got[1] == pytest.approx(25 / 512, rel=1e-15)
    assert unpaired_share(True, 4, 4, 2, 0) == 1.0
    assert unpaired_share(False, 4, 64, 1, np.array([0, 3])).tolist() == [1.0, 1.0]


def _moe_row(framework, **kw):
    model = dataclasses.replace(model_preset("qwen3-30b-a3b"), seq_len=4096)
    cols = dict(dp=8, tp=1, pp=2, ep=8, micro_batch=1, global_batch=64, precision="bf16", recompute="none",
                zero_stage=1, schedule="1f1b", vpp=1) | kw
    return evaluate(model, cluster_preset("h100x64"), StrategyTable.from_columns(**cols), framework=framework)


def test_a_pipeline_without_interleaving_is_refused_and_an_interleaved_one_overlapped():
    """transformer_config.py (core_v0.15.0 and core_v0.16.0) refuses the EP A2A overlap at pp > 1 without virtual
    stages: a pp 2 1F1B row under megatron-core-a2a-overlap is framework_unsupported (megatron-core runs it).
    Interleaved (pp 2, vpp 2, 8 micro-batches of 16 chunk passes a stage), it hides some of its all-to-alls."""
    plain, over = (_moe_row(f) for f in ("megatron-core", "megatron-core-a2a-overlap"))
    assert plain["feasible"][0] and REASONS[int(over["reason"][0])] == "framework_unsupported"
    plain, over = (_moe_row(f, schedule="interleaved", vpp=2) for f in ("megatron-core", "megatron-core-a2a-overlap"))
    assert over["ep_comm_s"][0] < plain["ep_comm_s"][0]


def test_unpaired_passes_expose_their_all_to_alls_by_hand():
    """pp 1, 8 micro-batches, 48 MoE layers under megatron-core-a2a-overlap: per layer and micro-batch a paired
    forward and backward expose e each way; the first forward and last backward expose the whole dispatch + combine
    (d + c) each: ep_comm_s = 8 x 48 x 2 e + 48 x 2 (d + c - e), with e, d + c from the layer's costs
    (ep_fwd under the overlap, NCCL's all-to-all over 8 ranks of one H100 node holding 32 of its 132 SMs
    (tests/test_a2a_sms.py); ep_fwd without it)."""
    model = dataclasses.replace(model_preset("qwen3-30b-a3b"), seq_len=4096)
    cl = cluster_preset("h100x64")
    one = np.array([1])
    lc = layer_costs(model, cl, one, one, one, np.array([False]), cl.gpu.peak_flops[0])
    args = (model, cl, lc, one, np.array([False]), np.array([8]), cl.gpu.peak_flops[0])
    e = moe_layer_costs(*args, True, False, np.array([1]), sm_frac=32 / 132)["ep_fwd"][0]
    dc = moe_layer_costs(*args, False, False, np.array([1]))["ep_fwd"][0]
    got = _moe_row("megatron-core-a2a-overlap", pp=1, global_batch=64)["ep_comm_s"][0]
    assert got == pytest.approx(8 * 48 * 2 * e + 48 * 2 * (dc - e), rel=1e-9)
