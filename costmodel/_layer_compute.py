"""Compute time of one transformer layer for one micro-batch on one GPU, and of the embedding and head.

Symbols (numpy columns that broadcast: (N,) rows, (N, k) stages or (U,) configurations):
    b micro-batch, s sequence, sc = s / cp tokens of a sequence on one rank, T = b * sc,
    h hidden, f ffn hidden, hk K/V width, a heads, t tp, c cp.

Time of one micro-batch through one layer, per GPU of the tensor-parallel group (layer_costs):
    forward F  = GEMMs (roofline, shape-dependent utilisation: gemm_s) + attention core
                 + element-wise (HBM-bound: hbm_s) + kernel overhead + exposed tp and cp comm
    backward B = activation-gradient GEMMs (same FLOPs as forward) + 2x attention core
                 + 2x element-wise + exposed tp / cp comm
    weight   W = weight-gradient GEMMs (same FLOPs as forward)
    recompute  = full: the whole forward again; selective: the attention core again; with
                 multi-head latent attention instead its up-projections, whose outputs Q, K and
                 V are not kept (Megatron-Core's recompute module "mla_up_proj", which
                 Megatron-Bridge's DeepSeek-V3 recipes select without "core_attn", and the
                 DeepSeek-V3 report's Sec. 3.2.3): recompute_flops_per_token.
The tensor-parallel all-reduces are Megatron's f and g operators (Shoeybi et al. 2019); under
sequence parallelism the same bytes as all-gathers and reduce-scatters (Korthikanti et al. 2022).
Sliding-window layers (Transformer.windowed_layers) run the fused attention kernel over the key tiles
that meet their band at the causal kernel's per-tile rate (Transformer.attention_time_share), their
FLOPs over the window's pairs (Transformer.attention_span).
The ring attention over cp overlaps its K/V passes with the attention core. The first stage adds
the embedding, the last the final norm, the LM head and the loss (edge_terms). The GPU's fitted
efficiency constants (gemm_eff_max, gemm_half_dim, hbm_eff, kernel_overhead_s) and measured
attention kernels come from costmodel._hardware; fp8 casts outside the GEMMs from a framework
profile (costmodel._frameworks.fp8_cast_bytes).
"""

from __future__ import annotations

import numpy as np

from costmodel._codes import MODULE_BIT
from costmodel._collectives import all_reduce_s, gather_s, tier
from costmodel._dtypes import ACT_BYTES
from costmodel._frameworks import Framework
from costmodel._hardware import ATTN_SEQ_POINTS, Cluster
from costmodel._workloads import Transformer

# Element-wise traffic of one transformer layer forward, in elements of T*h (norms read +
# write 2 x 2; two fused bias-dropout-add: read x and residual, write out, 1-byte mask,
# 2 x 3.5) and of T*f / t (bias-GeLU read + write 2; SwiGLU and GeGLU read 2, write 1: 3).
ELEM_TH_PER_LAYER = 4 + 7
ELEM_TF_PER_LAYER = {"gelu": 2, "relu": 2, "swiglu": 3, "geglu": 3}
# Backward element-wise traffic relative to forward (read the saved input and the incoming
# gradient, write the outgoing gradient).
ELEM_BWD_FACTOR = 2.0
# Cross-entropy over the vocabulary: fp32 logits written, read twice (max, sum), gradient
# written in 16 bits: bytes per logit, forward and backward together.
XENT_BYTES_PER_LOGIT = 4 + 8 + 2
# The loss's memory peak, bytes a logit live at once (the head's activation, held beside the last stage's activations
# at the end of a micro-batch's forward and the start of its backward): the fp32 logits of one micro-batch, a fused
# loss's count; a framework's own loss code sets its count (Framework.xent_peak_bytes).
XENT_PEAK_BYTES_PER_LOGIT = 4
# Unfused attention (Megatron-LM 2021-2022, megatron/model/transformer.py ParallelAttention: baddbmm into the b a s s
# scores, FusedScaleMaskSoftmax, attention dropout, bmm with V): HBM bytes per score element beyond the two batched
# products, (forward, backward). The causal softmax kernel (fused_kernels/scaled_upper_triang_masked_softmax.h) reads
# only the lower triangle and writes the whole row: forward read 2 x 1/2 + write 2 = 3, backward reads the gradient and
# its output over the triangle, writes the row: 1 + 1 + 2 = 4. Dropout (PyTorch's fused dropout): read 2, write 2 and a
# one-byte mask = 5; backward read 2 and the mask, write 2 = 5. Forward 3 + 5, backward 4 + 5.
UNFUSED_SCORE_BYTES = (8.0, 9.0)
# Flash attention's utilisation uses the 128-wide tile edge of its kernels as the half-size
# of each side. Measured on an H100 (benchmarks/gpu_attention_sweep.py, BENCHMARKS.md "GEMM
# calibration"): PyTorch's fused attention at head dim 128 reaches 360-490 TFLOP/s forward +
# backward without a mask and 420-880 with a causal one (FLOPs counted over the full s x s
# square) once b x heads >= 24, less below (107 at 12 heads, b = 1); this term gives about
# 350-380 whatever b x heads: conservative for causal masks, optimistic for tiny ones.
ATTN_HALF_DIM = 128.0


def sat(x, half):
    """Utilisation along one matrix side: x / (x + half)."""
    return x / (x + half)


def gemm_s(M, N, K, peak, gpu):
    """Roofline time of (M x K) @ (K x N): FLOPs at shape utilisation vs HBM traffic."""
    util = gpu.gemm_eff_max * sat(M, gpu.gemm_half_dim) * sat(N, gpu.gemm_half_dim) * sat(K, gpu.gemm_half_dim)
    flop_s = 2.0 * M * N * K / (peak * util)
    mem_s = ACT_BYTES * (M * K + K * N + M * N) / (gpu.hbm_Bps * gpu.hbm_eff)
    return np.maximum(flop_s, mem_s)


def hbm_s(nbytes, gpu):
    return nbytes / (gpu.hbm_Bps * gpu.hbm_eff)


def layer_costs(model: Transformer, cluster: Cluster | None, b, t, c, sp, peak, *, gpu=None,
                tp_link=None, cp_link=None, peak16=None, attn_eff=None, attn_nc=None, fp8_tp=None, cp_a2a=False):
    """Per-micro-batch times of one layer on one GPU: a dict of (N,) arrays (attn_gemm: the attention
    projections' part of gemm).

    ``peak``: the FLOP/s of the row's precision, for the linear layers; ``peak16`` (default
    ``peak``): the 16-bit FLOP/s the attention core runs at, also under fp8 (FP8_IN_16_BIT).
    ``attn_eff``: (N, 6) the framework's attention kernel's fractions of ``peak16`` at ATTN_SEQ_POINTS where
    measured, zeros (or None) for the standard formula (attention_eff_at; costmodel._hardware.ATTENTION_KERNELS);
    ``attn_nc``: (N, 6) its non-causal kernels' gain over that rate at the same points, for a cp ring's off-diagonal
    steps (costmodel._hardware.attention_noncausal_gain; None: ones).
    The evaluator block passes ``gpu`` (an object whose efficiency and peak fields are arrays,
    one GPU type per configuration) and the (bandwidth, latency) of the tp and cp groups' links.
    ``fp8_tp`` (bool (N,), or None): the rows whose sequence-parallel all-gathers move fp8 data (torchao's float8
    tensor parallelism: fp8_tp_collectives_s). ``cp_a2a``: context parallelism by all-to-all (te_a2a_terms): the
    attention kernel runs the whole sequence on heads / (t c) heads, at its rate at s, with no ring steps."""
    gpu = cluster.gpu if gpu is None else gpu
    peak16 = peak if peak16 is None else peak16
    h, f, hk, a, s = model.hidden, model.ffn_hidden, model.kv_hidden, model.heads, model.seq_len
    sc = s / c
    T = b * sc  # tokens on this rank
    tp_bw, tp_lat = tier(t, cluster, gpu) if tp_link is None else tp_link
    cp_bw, cp_lat = tier(t * c, cluster, gpu) if cp_link is None else cp_link
    split = np.where(sp, t, 1)  # element-wise work is split across tp only under SP
    if model.kind == "mlp":
        gemm = gemm_s(T, h / t, h, peak, gpu)
        attn = attn_gemm = np.zeros_like(gemm)
        elem = hbm_s(ACT_BYTES * 2.0 * T * h / t, gpu)
        # Megatron-style pairs (column- then row-parallel): one all-reduce per two layers.
        tp_fwd = 0.5 * all_reduce_s(ACT_BYTES * T * h, t, tp_bw, tp_lat)
        cp_fwd = cp_bwd = np.zeros_like(gemm)
        overhead = gpu.kernel_overhead_s * 0.5
    else:
        q = model.core_hidden  # width of Q and of the attention output (h unless head_dim is set; MLA: their mean)
        dh = q / a  # a head's size (MLA: the mean of its query and value sizes)
        mats = model.mlp_matrices
        attn_gemm = attention_gemm_s(model, T, t, peak, gpu, split)
        gemm = (
            attn_gemm
            + gemm_s(T, (mats - 1) * f / t, h, peak, gpu)  # MLP up (and gate)
            + gemm_s(T, h, f / t, peak, gpu)  # MLP down
        )
        # Attention core, fused (flash) kernel: QK^T and AV, 4 b sc s q / t FLOPs, no s^2
        # HBM traffic; utilisation of a (sc x dh) @ (dh x s) product at the kernel's tile
        # edge (ATTN_HALF_DIM), not the GPU's fitted GEMM constant.
        rows = s if cp_a2a else sc  # the kernel's query rows: the rank's sc, or under all-to-all the whole sequence
        tiles = sat(rows, ATTN_HALF_DIM) * sat(s, ATTN_HALF_DIM)
        attn = 4.0 * b * sc * s * q / t / (peak16 * gpu.gemm_eff_max * tiles * sat(dh, ATTN_HALF_DIM))
        windowed = model.windowed_layers / model.layers  # sliding-window layers: their band's tiles (module notes)
        if windowed:
            attn = attn * model.attention_time_share
        if attn_eff is not None and np.any(attn_eff > 0):  # a measured kernel: the causal half at its rate at sc
            eff = attention_eff_at(attn_eff, rows)
            # under a cp ring 1 / c of it in the causal diagonal kernel, the rest in non-causal kernels at the
            # measured gain over the causal rate (costmodel._hardware._NONCAUSAL_GAIN; 1 / c + (1 - 1 / c) / gain)
            ring = 1.0 if attn_nc is None or cp_a2a else 1.0 / c + (1.0 - 1.0 / c) / attention_eff_at(attn_nc, sc)
            if windowed:  # full layers as above, windowed ones their band's tiles in masked kernels at the causal rate
                ring = (1.0 - windowed) * ring + (model.attention_time_share - (1.0 - windowed))
            attn = np.where(eff > 0, 2.0 * b * sc * s * q / t / (peak16 * np.where(eff > 0, eff, 1.0)) * ring, attn)
        elem_elems = ELEM_TH_PER_LAYER * T * h / split + ELEM_TF_PER_LAYER[model.activation] * T * f / t
        elem = hbm_s(ACT_BYTES * elem_elems, gpu)
        # Two all-reduces of T*h per layer forward (or 2 all-gathers + 2 reduce-scatters
        # under SP: the same bytes), Megatron's f and g operators.
        tp_fwd = 2.0 * all_reduce_s(ACT_BYTES * T * h, t, tp_bw, tp_lat)
        if fp8_tp is not None:  # torchao's float8 tensor parallelism: the all-gathers in fp8
            tp_fwd = np.where(fp8_tp, fp8_tp_collectives_s(T * h, t, tp_bw, tp_lat), tp_fwd)
        # Ring attention over cp: each rank receives the other c-1 K/V blocks (forward) and
        # sends their gradients back (backward), overlapped with the attention core.
        kv_block = ACT_BYTES * 2.0 * b * sc * hk / t
        cp_raw = np.where(c > 1, (c - 1) * (kv_block / cp_bw + cp_lat), 0.0)
        cp_fwd = np.maximum(cp_raw - attn, 0.0)
        cp_bwd = np.maximum(2.0 * cp_raw - 2.0 * attn, 0.0)
        overhead = gpu.kernel_overhead_s * 2.0
    return {
        "gemm": gemm,
        "attn": attn,
        "attn_gemm": attn_gemm,
        "elem": elem,
        "overhead": overhead + np.zeros_like(gemm),
        "tp_fwd": tp_fwd,
        "cp_fwd": cp_fwd,
        "cp_bwd": cp_bwd,
        "tp_bw": tp_bw,
        "tp_lat": tp_lat,
        "cp_bw": cp_bw, "cp_lat": cp_lat,
        "T": T,
    }


def all_gather_cp_terms(model: Transformer, terms: dict, t) -> dict:
    """Context parallelism by all-gathered K and V (Framework.cp_all_gather) on one layer's shape terms ``terms`` (T, c,
    cp_bw, cp_lat, cp_fwd, cp_bwd; rows with c = 1 kept): the forward all-gathers the group's K and V (the rank's 2 T
    hk / t elements in 16 bits, c times over: (c - 1) of them and c - 1 steps' latency on the cp link) before the
    attention, exposed (cp_fwd); the backward gathers them again and reduce-scatters their gradients, as many bytes,
    exposed (cp_bwd, twice cp_fwd). The attention core is the layer's as priced: the rank's queries against the keys
    before them, the same FLOPs as a ring's steps."""
    c, T = terms["c"], terms["T"]
    kv = ACT_BYTES * 2.0 * T * model.kv_hidden / t  # bytes of the rank's K and V
    one = gather_s(c * kv, c, terms["cp_bw"], terms["cp_lat"])
    on = c > 1
    return {**terms, "cp_fwd": np.where(on, one, terms["cp_fwd"]), "cp_bwd": np.where(on, 2.0 * one, terms["cp_bwd"])}


# Transformer Engine's context parallelism by all-to-all (Megatron-Core's cp_comm_type "a2a", DeepSpeed-Ulysses' scheme;
# TransformerEngine pytorch/attention/dot_product_attention/context_parallel.py AttnFuncWithCPAndQKVOA2A and
# flash_attn_a2a_communicate): the forward exchanges Q, K and V (the rank's sc tokens of every head of its tp share)
# into the whole sequence of heads / (t c) heads, one all_to_all_single each, runs the attention kernel on that, and
# exchanges the output back; the backward does the same with dO, then dQ, dK and dV: as many bytes again. Around each
# exchange the tensor is laid out for it and, after it, moved and its sequence chunks reordered (movedim().contiguous()
# and index_select): A2A_COPY_BYTES an element, read and write in 16 bits, three copies. The exchanges are waited for
# before the attention (forward) and after it: exposed. The only exchange Transformer Engine runs sliding-window
# attention over (costmodel._feasibility's note), so the profiles whose exchange is its P2P ring take it for a model
# with windowed layers; it needs heads and kv_heads / t divisible by c.
A2A_COPY_BYTES = 3 * 4.0
A2A_EXCHANGES = 4  # Q, K, V and the output forward; dO, dQ, dK, dV backward


def cp_by_all_to_all(fw: Framework, model: Transformer) -> bool:
    """Whether the framework runs the model's context parallelism by an all-to-all of the heads (te_a2a_terms): a
    profile whose exchange is DeepSpeed-Ulysses (Framework.cp_ulysses), or Transformer Engine's P2P ring
    (Framework.te_ring_attention) on a model with sliding-window layers."""
    if model.kind == "mlp" or model.mla:
        return False
    return bool(fw.cp_ulysses or (fw.te_ring_attention and model.windowed_layers))


def cp_refused_for_window(fw: Framework, model: Transformer) -> bool:
    """Whether the framework runs no context parallelism (cp > 1) for the model: a model with windowed or chunked
    layers under a framework whose context parallelism runs only SDPA (Framework.cp_sdpa_only)."""
    return bool(fw.cp_sdpa_only and model.windowed_layers)


def a2a_heads_fit(model: Transformer, t, c):
    """(bool, broadcast of t and c): the all-to-all exchange splits the tp share of the heads and of the K, V heads over
    the c ranks (TransformerEngine's flash_attn_a2a_communicate asserts it): heads / t and kv_heads / t divisible by c
    (c = 1 always fits)."""
    t, c = np.maximum(np.asarray(t), 1), np.asarray(c)
    return (c == 1) | (((model.heads // t) % c == 0) & ((model.kv_heads // t) % c == 0))


def te_a2a_terms(model: Transformer, terms: dict, t, byte_s) -> dict:
    """Transformer Engine's all-to-all context parallelism (A2A_COPY_BYTES' note) on one layer's shape terms ``terms``
    (T, c, cp_bw, cp_lat, cast_f, cast_b, cp_fwd, cp_bwd; rows with c = 1 kept): each way (c - 1) / c of Q, K, V and
    the output leave the rank at the cp group's link, A2A_EXCHANGES latencies, exposed (cp_fwd; cp_bwd the same
    bytes), and their copies at ``byte_s`` seconds a byte added to the forward (cast_f) and backward (cast_b)."""
    c, T, bw, lat = terms["c"], terms["T"], terms["cp_bw"], terms["cp_lat"]
    on = c > 1
    elems = T * (2.0 * model.q_hidden + 2.0 * model.kv_hidden) / t  # Q, K, V and the output of the rank
    one = (c - 1.0) / c * ACT_BYTES * elems / bw + A2A_EXCHANGES * lat
    copies = byte_s * A2A_COPY_BYTES * elems
    return {**terms, "cp_fwd": np.where(on, one, terms["cp_fwd"]), "cp_bwd": np.where(on, one, terms["cp_bwd"]),
            "cast_f": terms["cast_f"] + np.where(on, copies, 0.0),
            "cast_b": terms["cast_b"] + np.where(on, copies, 0.0)}


# Transformer Engine's P2P ring attention (Megatron-Core's cp_comm_type "p2p", its default; TransformerEngine d0067d0
# pytorch/attention/dot_product_attention/context_parallel.py AttnFuncWithCPAndKVP2P, causal, bshd / sbhd, 16-bit):
# each sequence is split into 2 c chunks, rank r holding chunks r and 2 c - 1 - r, and a rank runs c steps: step 0 the
# causal block of its own chunks (sc x sc), step i <= r its queries against the first half of the K, V it received (sc
# x sc / 2), step i > r the second half of its queries against all of them (sc / 2 x sc), each a kernel of its own and
# each the same FLOPs (a quarter of an sc x 2 sc square). Forward, step i sends the K, V it holds on to the next rank
# while it computes (flash_attn_p2p_communicate, batch_isend_irecv), waited for before step i + 1; backward, steps past
# the first send K, V with the dK, dV accumulated so far in one buffer of twice the size (p2p_comm_buffers of shape (2,
# *kv.shape), the kv dtype), step 0 K, V alone and the last dK, dV alone, each waited for at the end of its step. HBM
# bytes outside the kernels, per element of the rank's Q (E_q = b sc q / t) and of its K and V together (E_kv = 2 b sc
# hk / t), each kernel's output 16 bits:
#   forward: the K, V cat into the send buffer (read 2, write 2: 4 E_kv); the first step's output copied into the merged
#     output (flash_attn_fwd_out_correction_init, read 2, write 2: 4 E_q); each later step's correction (flash_attn_fwd_
#     out_correction or its second-half form: read the output and the step's, write the output: 6) over the step's
#     query rows, all of them at i <= r and half past it, 3 / 4 on average over the ranks: 4.5 E_q a step;
#   backward: K, V copied into the first send buffer (4 E_kv), the first step's dQ, dK, dV copied (4 (E_q + E_kv)) and
#     each later step's added (dq.add_, dk.add_, dv.add_: read 2 + 2, write 2) over the step's rows of each, 3 / 4 of
#     them on average: 4.5 (E_q + E_kv) a step.
# The softmax statistics' merges (fp32, one value a query row and head: 1 / dh of E_q) are not counted.
# (per E_kv, per E_q (backward: per E_q + E_kv), the same a later step)
TE_RING_BYTES = {"fwd": (4.0, 4.0, 4.5), "bwd": (4.0, 4.0, 4.5)}
# Kernels a later ring step launches beyond the attention kernel the layer has without the ring, at the layer's
# per-kernel overhead (kernel_overhead_s per KERNELS_PER_SUBLAYER): forward its output correction, its statistics'
# correction and the send / receive; backward the three accumulations and the send / receive. Per layer, once: the
# cat and the first copy (forward), the buffer copy and the first step's copies (backward).
TE_RING_KERNELS = {"fwd": (2.0, 3.0), "bwd": (4.0, 4.0)}  # (once, a later step)
# A dense Megatron-Core layer forward launches, with Transformer Engine's fused modules: attention: LayerNormLinear
# (norm, GEMM), fused RoPE (Q, K), fused attention, projection GEMM, bias-dropout-add: 7; MLP: LayerNormLinear (norm,
# GEMM), bias-SwiGLU, FC2 GEMM, bias-dropout-add: 5; 6 a sub-layer, one kernel_overhead_s a sub-layer.
KERNELS_PER_SUBLAYER = 6


def te_ring_terms(model: Transformer, terms: dict, t, byte_s) -> dict:
    """Transformer Engine's P2P ring attention over cp (TE_RING_BYTES; Framework.te_ring_attention) on one layer's
    shape terms ``terms`` (T, c, attn, overhead, cp_bw, cp_lat, cast_f, cast_b, cp_fwd, cp_bwd; rows with c = 1 kept):
    the exposed exchange step by step, each step's send against the step's attention (attn / c forward, 2 attn / c
    backward; the load-balanced chunks give every step the same FLOPs), the merges' HBM bytes at ``byte_s`` seconds a
    byte and the kernels' overhead, both added to the forward (cast_f) and backward (cast_b) times. K, V of the rank
    as model.kv_hidden wide (an MLA model's K and V are priced so too)."""
    c, T, attn, bw, lat = terms["c"], terms["T"], terms["attn"], terms["cp_bw"], terms["cp_lat"]
    on = c > 1
    e_q, e_kv = T * model.q_hidden / t, 2.0 * T * model.kv_hidden / t
    kv_s = ACT_BYTES * e_kv / bw + lat  # K, V of the rank over the ring's link
    step_f, step_b = attn / c, 2.0 * attn / c
    cp_fwd = (c - 1.0) * np.maximum(kv_s - step_f, 0.0)
    kv2_s = 2.0 * ACT_BYTES * e_kv / bw + lat  # K, V with dK, dV
    cp_bwd = 2.0 * np.maximum(kv_s - step_b, 0.0) + np.maximum(c - 2.0, 0.0) * np.maximum(kv2_s - step_b, 0.0)
    kernel_s = terms["overhead"] / (2.0 * KERNELS_PER_SUBLAYER)  # the layer's overhead is two sub-layers' units
    (fk, fq, fs), (bk, bq, bs) = TE_RING_BYTES["fwd"], TE_RING_BYTES["bwd"]
    merge_f = byte_s * (fk * e_kv + fq * e_q + fs * (c - 1.0) * e_q)
    merge_b = byte_s * (bk * e_kv + bq * (e_q + e_kv) + bs * (c - 1.0) * (e_q + e_kv))
    (f1, fn), (b1, bn) = TE_RING_KERNELS["fwd"], TE_RING_KERNELS["bwd"]
    launch_f, launch_b = kernel_s * (f1 + fn * (c - 1.0)), kernel_s * (b1 + bn * (c - 1.0))
    return {**terms, "cp_fwd": np.where(on, cp_fwd, terms["cp_fwd"]), "cp_bwd": np.where(on, cp_bwd, terms["cp_bwd"]),
            "cast_f": terms["cast_f"] + np.where(on, merge_f + launch_f, 0.0),
            "cast_b": terms["cast_b"] + np.where(on, merge_b + launch_b, 0.0)}


def attention_eff_at(table, seq):
    """A kernel's rate (table (..., 6) at ATTN_SEQ_POINTS) at length ``seq``: log2-linear (hat weights), clamped."""
    x = np.clip(np.log2(np.asarray(seq, dtype=np.float64) / ATTN_SEQ_POINTS[0]), 0.0, len(ATTN_SEQ_POINTS) - 1.0)
    return np.sum(np.asarray(table) * np.maximum(0.0, 1.0 - np.abs(x[..., None] - np.arange(len(ATTN_SEQ_POINTS)))), -1)


def attention_gemm_s(model: Transformer, T, t, peak, gpu, split=1):
    """The QKV and attention output projections of one layer (dense or MoE) on one GPU of the
    tensor-parallel group: T tokens, the query width q and the K/V width hk split by t (MLA: its
    matrices, Transformer.attn_matrices; the whole ones on the T / ``split`` tokens of the rank's
    sequence slice under sequence parallelism, the latents gathered after them)."""
    h, q, hk = model.hidden, model.q_hidden, model.kv_hidden
    if model.mla:
        return sum(gemm_s(T / split if s == "dup" else T, o / t if s == "col" else o, i / t if s == "row" else i,
                          peak, gpu) for i, o, s in model.attn_matrices())
    return gemm_s(T, (q + 2 * hk) / t, h, peak, gpu) + gemm_s(T, h, q / t, peak, gpu)


# torchao's float8 tensor parallelism (Framework.fp8_tp_gather; pytorch/ao eab345c, the torchao of torchtitan 9dec370's
# Dec 2024 benchmarks, torchao/float8/float8_tensor_parallel.py; torchtitan 9dec370 parallelize_llama.py apply_tp uses
# its Float8ColwiseParallel, Float8RowwiseParallel and PrepareFloat8ModuleInput under float8): tensorwise dynamic
# scaling, rows with sequence parallelism and t > 1.
#   forward: PrepareFloat8ModuleInput casts the attention's and the feed-forward's Shard(1) input to fp8 on the rank's
#     shard (hp_tensor_to_float8_dynamic on the DTensor: max(abs) of the shard, its all-reduce over the tp group, the
#     cast), then redistributes Shard(1) -> Replicate: the all-gather moves fp8 (float8_ops.py allgather_fp8); wq, wk,
#     wv and w1, w3 take the gathered fp8 tensor as it is (tensor_already_casted_to_fp8). wo's and w2's outputs are
#     reduce-scattered (Partial -> Shard(1)) in 16 bits, as without fp8.
#   backward: Float8RowwiseParallel._prepare_output_fn's NoopFwToFloat8BwDynamic casts wo's and w2's Shard(1) output
#     gradient to fp8 on the shard before the redistribution's backward all-gathers it: fp8 again, with its amax
#     all-reduce; the inputs' gradients leave the GEMMs in 16 bits (float8_linear.py manual_float8_matmul_with_args_
#     in_float8.backward) and are reduce-scattered in 16 bits.
# So a layer's four sequence-parallel all-gathers a forward and backward (and a recompute's two) move 1 byte an
# element, its reduce-scatters 2, each all-gather after an all-reduce of one fp32 amax (fp8_tp_collectives_s). The
# casts of those four tensors run on the shard (T h / t elements), not on the gathered tensor; the weight-gradient
# GEMM (torch._scaled_mm: its second operand column-major) then copies the gathered fp8 input, and the first
# operand's transpose the gathered fp8 output gradient, once each (read 1, write 1) where the profile's per-linear
# cast writes that copy itself (fp8_cast_bytes' second fp8 write).
FP8_TP_CAST_BYTES = (2.0 + 2.0 + 1.0, 1.0 + 1.0)  # (per element of the shard: amax read, cast read + write; per
# element of the gathered fp8 tensor: its transposed copy)
AMAX_BYTES = 4.0  # one fp32 max(abs), all-reduced over the tp group before each fp8 all-gather


def fp8_tp_collectives_s(E, t, bw, lat, amax=1.0):
    """Seconds of one layer's sequence-parallel collectives a pass where its all-gathers move fp8 data, E = T h
    elements of the gathered activation: two all-gathers of fp8 data (1 byte an element), ``amax`` (per row or one
    value) times an all-reduce of an fp32 amax before each, and two reduce-scatters in 16 bits; tp_fwd's
    2 all_reduce_s(2 E) (two all-gathers and two reduce-scatters of 2 E bytes) with the all-gathers' bytes halved.
    torchao's float8 tensor parallelism (the comment above FP8_TP_CAST_BYTES) all-reduces each amax (1.0);
    Transformer Engine's fp8 all-gathers (the comment below) under current scaling too, under delayed scaling not
    (0.0)."""
    return (2.0 * gather_s(1.0 * E, t, bw, lat) + amax * 2.0 * all_reduce_s(AMAX_BYTES, t, bw, lat)
            + 2.0 * gather_s(ACT_BYTES * E, t, bw, lat))


# Transformer Engine's fp8 sequence-parallel all-gathers (Framework.te_fp8_gather; costmodel._frameworks.TE_FP8_GATHERS
# cites the code): a dense layer forward all-gathers the QKV and FC1 inputs as fp8 data cast on the rank's shard
# (LayerNormLinear's ln_out), 1 byte an element, and reduce-scatters the projection's and FC2's 16-bit outputs; under
# current scaling each of the two casts all-reduces its fp32 amax over the tp group first (AMAX_BYTES). The casts
# themselves are the profile's (fp8_cast_bytes), not repeated here.
TE_FP8_GATHER_BYTES = 1.0  # an fp8 element's bytes on the wire (uint8 data; its scale_inv not sent)


def fp8_cast_columns(fw: Framework, fp8, fp8_tp=None):
    """A profile's fp8 cast bytes as fp8_cast_parts_s takes them, per row: (input, weight forward, output gradient,
    weight backward, an input a norm wrote) where ``fp8`` (bool, per row), zeros elsewhere, and sixth, where ``fp8_tp``
    is given (bool, per row: the rows running float8 tensor parallelism, given only where the profile gathers fp8:
    Framework.fp8_tp_gather), 1.0 on those rows, else 0.0; None where the profile casts nothing outside its GEMMs
    (Framework.fp8_cast_bytes, fp8_norm_cast_bytes). Where the profile casts a saved input again in the backward or a
    norm-written input more than once (Framework.fp8_recast_input_bytes, fp8_norm_input_casts), seventh to ninth those
    (the sixth 0.0 where ``fp8_tp`` is not given)."""
    norm = fw.fp8_cast_bytes[0] if fw.fp8_norm_cast_bytes is None else fw.fp8_norm_cast_bytes
    if not any(fw.fp8_cast_bytes) and not norm:
        return None
    out = tuple(np.where(fp8, x, 0.0) for x in (*fw.fp8_cast_bytes, norm))
    if fw.fp8_recast_input_bytes or fw.fp8_norm_input_casts != (1.0, 1.0):
        tp = np.where(fp8_tp, 1.0, 0.0) if fp8_tp is not None else np.zeros_like(out[0])
        return (*out, tp, np.where(fp8, fw.fp8_recast_input_bytes, 0.0), *fw.fp8_norm_input_casts)
    return out if fp8_tp is None else (*out, np.where(fp8_tp, 1.0, 0.0))


def fp8_cast_s(model: Transformer, T, t, gpu, casts):
    """(forward, backward) seconds per layer and micro-batch of T tokens at tensor parallelism t
    that a framework casting to fp8 outside the GEMMs spends on its casts: the attention's and the
    MLP's parts of fp8_cast_parts_s summed."""
    af, ab, mf, mb = fp8_cast_parts_s(model, T, t, gpu, casts)
    return af + mf, ab + mb


def fp8_cast_parts_s(model: Transformer, T, t, gpu, casts):
    """(attention forward, attention backward, MLP forward, MLP backward) seconds per layer and
    micro-batch of T tokens at tensor parallelism t of a framework's casts to fp8 outside the GEMMs.
    ``casts`` = bytes moved per element of a linear layer's input, per weight element forward, per
    element of its output's gradient, per weight element backward and, optionally fifth, per
    element of an input a norm wrote (Framework.fp8_cast_bytes and fp8_norm_cast_bytes; each (N,)
    or a scalar; zero where the row does not cast; without the fifth, such inputs move the first).
    The inputs a norm writes are the column-parallel products' (QKV, FC1 (and gate); MLA: its
    up-projections after the latent norms), the others the rest (the projection's, FC2's; MLA's
    down-projections). The layer's linear products as the model counts them: QKV (input h, output
    (q + 2 hk) / t), projection (q / t, h), up and gate (h, (mats - 1) f / t), down (f / t, h), the
    weights split by t (MLA: its attention matrices, each as Transformer.attn_matrices splits it).
    An MLP has no casts. The MLP part is the dense MLP's: an MoE layer takes the attention part
    (costmodel._layer_terms.moe_layer_inputs). A sixth entry (1.0 where the row runs torchao's float8 tensor
    parallelism, fp8_cast_columns) prices the norm-written inputs and the row-parallel products' (the projection's,
    FC2's) T h output gradients as cast on the shard and their gathered fp8 copies transposed (FP8_TP_CAST_BYTES: 5 / t
    + 2 bytes an element of the gathered tensor; MLA layers as without it). A seventh (fp8_cast_columns) prices every
    input's elements again in the backward (Framework.fp8_recast_input_bytes), an eighth and ninth the attention's and
    the MLP's norm-written input cast that many times (Framework.fp8_norm_input_casts; MLA's latents once)."""
    zero = np.zeros_like(T)
    if model.kind == "mlp":
        return zero, zero, zero, zero
    cx, cw, cg, cwb = casts[:4]
    cn = casts[4] if len(casts) > 4 else cx
    cxb, na, nm = casts[6:9] if len(casts) > 6 else (0.0, 1.0, 1.0)
    cgh = cg  # bytes an element of a row-parallel product's T h output gradient
    if len(casts) > 5 and not model.mla:  # float8 TP: cast on the shard, the gathered fp8 copy transposed
        tp8 = FP8_TP_CAST_BYTES[0] / t + FP8_TP_CAST_BYTES[1]
        cn, cgh = np.where(casts[5] > 0, tp8, cn), np.where(casts[5] > 0, tp8, cg)
    h, q, hk, f, mats = model.hidden, model.q_hidden, model.kv_hidden, model.ffn_hidden, model.mlp_matrices
    if model.mla:
        mm = model.attn_matrices()
        xn = T * sum(i for i, _, s in mm if s == "col")  # up-projections' inputs, a latent norm's output
        xa = T * sum(i / t if s == "row" else i for i, _, s in mm if s != "col")
        ga = T * sum(o / t if s == "col" else o for _, o, s in mm)
        wa = sum(i * o / (1 if s == "dup" else t) for i, o, s in mm)
    else:
        xn, xa = T * h * na, T * q / t  # QKV's input (the norm's output; cast na times), the projection's
        ga = T * (q + 2.0 * hk) / t  # QKV's output gradient's elements (the projection's, T h, at cgh)
        wa = (h * (q + 2.0 * hk) + q * h) / t  # the weights
    xm_n, xm = T * h * nm, T * f / t  # FC1's input (the norm's output; cast nm times), FC2's
    gm = T * (mats - 1) * f / t  # FC1's (and the gate's) output gradient (FC2's, T h, at cgh)
    wm = mats * h * f / t
    gh = 0.0 if model.mla else cgh * T * h  # the row-parallel product's output gradient (MLA's: in ga)
    return (hbm_s(cn * xn + cx * xa + cw * wa, gpu) + zero,
            hbm_s(cg * ga + gh + cwb * wa + cxb * (xn + xa), gpu) + zero,
            hbm_s(cn * xm_n + cx * xm + cw * wm, gpu) + zero,
            hbm_s(cg * gm + cgh * T * h + cwb * wm + cxb * (xm_n + xm), gpu) + zero)


def edge_terms(model: Transformer, T, t, sp, peak16, gpu, tp_bw, tp_lat,
               xent_bytes=XENT_BYTES_PER_LOGIT, xent_peak_bytes=XENT_PEAK_BYTES_PER_LOGIT) -> dict[str, np.ndarray]:
    """The embedding's (first stage) and the head's (last stage) terms for one micro-batch of T
    tokens at tensor parallelism t: times emb_c, emb_tp, head_gemm, head_elem, head_tp and the
    activation bytes emb_act, head_act; zeros for an MLP, which has neither. The head's GEMM
    runs at the 16-bit FLOP/s ``peak16``, also under fp8 (FP8_IN_16_BIT); its loss moves
    ``xent_bytes`` a logit (Framework.xent_bytes) and holds ``xent_peak_bytes`` a logit at its
    peak (Framework.xent_peak_bytes: head_act)."""
    h, V = model.hidden, model.vocab
    zero = np.zeros_like(np.asarray(T, dtype=np.float64))
    if model.kind == "mlp":
        return dict.fromkeys(("emb_c", "emb_tp", "head_gemm", "head_elem", "head_tp", "emb_act", "head_act"), zero)
    sp_div = np.where(sp, t, 1)
    return {
        # Embedding: gather T rows of h (read + write), backward scatter-add (same again); the
        # vocab-parallel lookup ends in one all-reduce of T*h.
        "emb_c": hbm_s(ACT_BYTES * 4.0 * T * h, gpu) + zero,
        "emb_tp": all_reduce_s(ACT_BYTES * T * h, t, tp_bw, tp_lat) + zero,
        # Head: logits GEMM (forward, then dX and dW), final norm and cross-entropy traffic; the
        # input's all-gather (SP) or all-reduce (backward) of T*h, and the vocab-parallel loss's
        # 3 small all-reduces of T fp32 values.
        "head_gemm": gemm_s(T, V / t, h, peak16, gpu) + zero,
        "head_elem": hbm_s(ACT_BYTES * 3.0 * T * h + xent_bytes * T * V / t, gpu) + zero,
        "head_tp": all_reduce_s(ACT_BYTES * T * h, t, tp_bw, tp_lat) + 3.0 * all_reduce_s(4.0 * T, t, tp_bw, tp_lat)
        + zero,
        "emb_act": (ACT_BYTES + 1) * T * h / sp_div + zero,  # embedding output and its dropout mask
        "head_act": xent_peak_bytes * T * V / t + zero,  # the loss's peak over one micro-batch's logits
    }


def handoff_gather_s(model: Transformer, T, t, gpu, tp_bw, tp_lat, copy_bytes: float, sp=False):
    """(collective, copies): seconds of one all-gather over the tp group of a tp-sharded pipeline hand-off, the
    stage's whole 16-bit T h tensor (T h / t under sequence parallelism ``sp``, where a rank's activation is already
    its sequence shard; gather_s at the tp link, as the layers' tp all-gathers), and of its copies on the computation
    stream, ``copy_bytes`` an element of it at the HBM rate (Framework.handoff_gathers, handoff_gather_copy_bytes:
    DeepSpeed's PartitionedTensor.full); zeros at t = 1, where nothing is sharded."""
    elems = T * model.hidden / np.where(sp, t, 1)
    sharded = np.asarray(t) > 1
    return (gather_s(ACT_BYTES * elems, t, tp_bw, tp_lat) + 0.0 * elems,
            np.where(sharded, hbm_s(copy_bytes * elems, gpu), 0.0))


def recompute_flops_per_token(model: Transformer, full, sel, fw: Framework, moe_layer: bool = False, modules=None):
    """FLOPs per token one layer (an MoE layer: ``moe_layer``) recomputes: its forward on active
    weights (full); under selective, the attention scores (4 s x the query width; MLA: its
    up-projections, 2 FLOPs a weight) or, for a dense
    layer under per-op checkpointing (Framework.selective "op"), the matrix products it does not
    save (an MoE layer: op_checkpoint_moe_products')."""
    if model.kind == "mlp":
        sel_re = 0.0
    elif fw.selective == "op":
        sel_re = (op_checkpoint_moe_products(model) if moe_layer else op_checkpoint_products(model))[1]
    elif model.mla:  # its up-projections (module docstring, recompute)
        sel_re = 2.0 * sum(i * o for i, o in model.attn_up_matrices())
    else:
        sel_re = 4.0 * model.attention_span * model.q_hidden
    fwd = model.moe_layer_fwd_flops_per_token() if moe_layer else model.layer_fwd_flops_per_token()
    if modules is not None and model.kind != "mlp":  # Megatron-Core's named modules (costmodel._codes) where named
        sel_re = np.where(np.asarray(modules) > 0, named_recompute_flops_per_token(model, modules, moe_layer), sel_re)
    return np.where(full, fwd, np.where(sel, sel_re, 0.0))


def named_recompute_flops_per_token(model: Transformer, modules, moe_layer: bool = False):
    """Matrix-product FLOPs per token one layer recomputes under Megatron-Core's named ``modules`` (bit sets): core_attn
    the attention scores (2 s (q + o)), mla_up_proj MLA's up-projections, mlp a dense layer's MLP (2 mats h f), moe
    an MoE layer's router and active experts, shared_experts its shared experts; layernorm and moe_act recompute
    element-wise kernels only (0 FLOPs)."""
    bit = {name: (np.asarray(modules) & b) > 0 for name, b in MODULE_BIT.items()}
    h, m = model.hidden, model.mlp_matrices
    out = np.where(bit["core_attn"], 2.0 * model.attention_span * (model.q_hidden + model.o_hidden), 0.0)  # QK^T, AV
    if model.mla:
        out = out + np.where(bit["mla_up_proj"], 2.0 * sum(i * o for i, o in model.attn_up_matrices()), 0.0)
    if not moe_layer:
        return out + np.where(bit["mlp"], 2.0 * m * h * model.ffn_hidden, 0.0)
    shared = 2.0 * m * h * model.shared_experts * model.shared_expert_ffn
    block = 2.0 * (h * model.experts + m * h * model.experts_per_token * model.expert_ffn) + shared
    return out + np.where(bit["moe"], block, np.where(bit["shared_experts"], shared, 0.0))


def op_checkpoint_products(model: Transformer) -> tuple[list, float, float]:
    """A dense layer's matrix products in the order torchtitan's Llama block runs them (wq, wk,
    wv, wo, then w1, w3, w2 for SwiGLU or fc1, fc2), as (output width per token, split by tensor
    parallelism, saved) with every other one saved (torchtitan's per-op policy saves the 1st,
    3rd, ... product of a block), the FLOPs per token of those recomputed, and of all."""
    h, hk, f, qh = model.hidden, model.kv_hidden, model.ffn_hidden, model.q_hidden
    ffn = [(h, f), (h, f), (f, h)] if model.gated else [(h, f), (f, h)]
    shapes = [(h, qh), (h, hk), (h, hk), (model.o_hidden, h), *ffn]  # (input, output) widths
    row_parallel = {3, len(shapes) - 1}  # wo and the last FFN product: full-width partial sums
    mms = [(out, i not in row_parallel, i % 2 == 0) for i, (_, out) in enumerate(shapes)]
    flops = [2.0 * a * b for a, b in shapes]
    return mms, sum(x for x, (_, _, kept) in zip(flops, mms, strict=True) if not kept), sum(flops)


def op_checkpoint_moe_products(model: Transformer) -> tuple[list, float, float]:
    """An MoE layer's matrix products as torchtitan's per-op policy meets them (torchtitan b5bcd76
    distributed/activation_checkpoint.py, models/common/moe.py MoE.forward; measured on an H200 under torch 2.11,
    tests/data/h200_modern_layers_measured.csv): the attention's wq, wk, wv, wo counted as a dense layer's (1st and
    3rd saved), the router gate always recomputed and not counted (force_recompute_mm_shapes_by_fqns' default
    "moe.router.gate"), the routed experts' grouped products (aten._grouped_mm: not among the partitioner's
    compute-intensive ops the policy saves, nor a product it counts) recomputed, then the shared experts' w1, w3, w2
    (fc1, fc2 without SwiGLU) continuing the count (5th and 7th saved). As op_checkpoint_products: the counted products
    (output width per token, split by tensor parallelism, saved), the FLOPs per token recomputed (the counted products
    not saved, the router gate, every routed expert product) and of all."""
    h, hk, qh, fs = model.hidden, model.kv_hidden, model.q_hidden, model.shared_experts * model.shared_expert_ffn
    shapes = [(h, qh), (h, hk), (h, hk), (model.o_hidden, h)]
    if fs:
        shapes += [(h, fs), (h, fs), (fs, h)] if model.gated else [(h, fs), (fs, h)]
    row_parallel = {3, len(shapes) - 1} if fs else {3}
    mms = [(out, i not in row_parallel, i % 2 == 0) for i, (_, out) in enumerate(shapes)]
    flops = [2.0 * a * b for a, b in shapes]
    uncounted = 2.0 * h * model.experts + 2.0 * model.mlp_matrices * h * model.experts_per_token * model.expert_ffn
    recomputed = sum(x for x, (_, _, kept) in zip(flops, mms, strict=True) if not kept) + uncounted
    return mms, recomputed, sum(flops) + uncounted


# Transformer Engine's userbuffers (tensor-parallel communication overlap: Megatron-LM's --tp-comm-overlap,
# Megatron-Bridge's CommOverlapConfig.tp_comm_overlap; sequence parallelism, t > 1): each of a layer's eight
# sequence-parallel exchanges split and pipelined with the GEMM beside it, by one of three methods
# (TransformerEngine v1.9 transformer_engine/pytorch/csrc/comm_gemm_overlap.h):
#   "ring"      ring exchange, split_overlap_ag / split_overlap_rs: the GEMM in t chunks of T / t tokens, t - 1
#               point-to-point sends of one chunk (bytes / t), each beside one GEMM chunk (the all-gather's first chunk
#               is the rank's own, the reduce-scatter's last): (t - 1) max(0, send - GEMM / t) exposed. Its sends run
#               on the copy engines; with set_sm_margin the GEMM leaves its num_sm SMs to them.
#   "pipeline"  split_overlap_rs: the GEMM in num_splits chunks, each chunk's reduce-scatter on num_sm SMs beside the
#               next chunk: the last chunk's collective exposed, (n - 1) max(0, RS / n - GEMM / n) more.
#   "bulk"      bulk_overlap: the whole collective on num_sm SMs beside one independent GEMM of the backward (the
#               input's all-gather for the weight gradient beside the data-gradient GEMM, qkv_dgrad / fc1_dgrad; the
#               data gradient's reduce-scatter beside the weight-gradient GEMM, qkv_wgrad / fc1_wgrad):
#               max(0, collective - GEMM) exposed.
# SMs: a GEMM with set_sm_margin runs on the SMs less num_sm (G S / (S - m)); without it the collective's kernel holds
# its num_sm SMs while it runs (G + min(collective, G) m / (S - m)); either way the GEMM's added time is exposed with
# the exchange. Per GEMM (method, num_sm, num_splits, set_sm_margin), forward qkv_fprop, fc1_fprop (all-gathers),
# proj_fprop, fc2_fprop (reduce-scatters); backward proj_dgrad, fc2_dgrad (the output gradients' all-gathers),
# qkv_dgrad, fc1_dgrad (bulk all-gathers beside the data-gradient GEMMs), qkv_wgrad, fc1_wgrad (bulk reduce-scatters
# beside the weight-gradient GEMMs). Not priced: the GEMM chunks' lower utilisation at T / t tokens, the
# reduce-scatter's final reduction kernel, fp8 all-gathers of 1-byte data (every exchange at 16 bits, as without the
# overlap).
UB_GEMMS = ("qkv_fprop", "fc1_fprop", "proj_fprop", "fc2_fprop", "proj_dgrad", "fc2_dgrad", "qkv_dgrad", "fc1_dgrad",
            "qkv_wgrad", "fc1_wgrad")
_RING = ("ring", 1, 0, False)
UB_CONFIGS = {
    # TransformerEngine v1.9 module/base.py initialize_ub, its defaults where no configuration is passed (Megatron-LM's
    # --tp-comm-overlap without --tp-comm-overlap-cfg): ring_exchange for qkv_fprop, fc1_fprop, proj_dgrad,
    # fc2_dgrad (num_sm 1); pipeline for proj_fprop, fc2_fprop (num_sm 16, num_splits 4); bulk for the rest (num_sm
    # 16); set_sm_margin False
    "te-default": {"qkv_fprop": _RING, "fc1_fprop": _RING, "proj_fprop": ("pipeline", 16, 4, False),
                   "fc2_fprop": ("pipeline", 16, 4, False), "proj_dgrad": _RING, "fc2_dgrad": _RING,
                   "qkv_dgrad": ("bulk", 16, 0, False), "fc1_dgrad": ("bulk", 16, 0, False),
                   "qkv_wgrad": ("bulk", 16, 0, False), "fc1_wgrad": ("bulk", 16, 0, False)},
    # Megatron-Bridge v0.2.0 src/megatron/bridge/training/comm_overlap.py
    # userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192
    # (its Llama 3 70B H100 recipe's; the 405B's h16384_tp8_cp2 differs in num_sm only: qkv_dgrad 2, fc1_wgrad 2,
    # fc2_fprop 8)
    "bridge-bf16": {"qkv_fprop": _RING, "fc1_fprop": _RING, "proj_fprop": ("pipeline", 24, 4, True),
                    "fc2_fprop": ("pipeline", 16, 4, True), "proj_dgrad": _RING, "fc2_dgrad": _RING,
                    "qkv_dgrad": ("bulk", 4, 0, False), "fc1_dgrad": ("bulk", 2, 0, False),
                    "qkv_wgrad": ("bulk", 24, 0, False), "fc1_wgrad": ("bulk", 4, 0, False)},
    # the same file's userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192: every split exchange a ring, proj_fprop and
    # fc2_fprop with set_sm_margin (num_sm 1); its fp8 B200 and 405B configurations are rings too, bulk num_sm 2-32
    "bridge-fp8": {"qkv_fprop": _RING, "fc1_fprop": _RING, "proj_fprop": ("ring", 1, 0, True),
                   "fc2_fprop": ("ring", 1, 0, True), "proj_dgrad": _RING, "fc2_dgrad": _RING,
                   "qkv_dgrad": ("bulk", 4, 0, False), "fc1_dgrad": ("bulk", 2, 0, False),
                   "qkv_wgrad": ("bulk", 24, 0, False), "fc1_wgrad": ("bulk", 4, 0, False)},
}


def ub_exchange_s(method: tuple, x, G, t, sms):
    """Exposed seconds of one sequence-parallel exchange of ``x`` seconds (gather_s: a ring all-gather or
    reduce-scatter over t ranks) split and pipelined with a GEMM of ``G`` seconds by userbuffers' ``method``
    (method, num_sm, num_splits, set_sm_margin; UB_CONFIGS), on a GPU of ``sms`` SMs: the exchange the pipeline does
    not hide and the GEMM's time its SMs take."""
    kind, m, n, margin = method
    free = sms - m
    if kind == "ring":
        held = G * m / free if margin else 0.0  # (sends on the copy engines)
        g = G + held
        return (t - 1) * np.maximum(x / np.maximum(t - 1, 1) - g / t, 0.0) + held
    held = G * m / free if margin else np.minimum(x, G) * m / free
    g = G + held
    if kind == "pipeline":
        return x / n + (n - 1) * np.maximum(x / n - g / n, 0.0) + held
    return np.maximum(x - g, 0.0) + held  # bulk


def ub_layer_tp_s(model: Transformer, T, t, peak, gpu, tp_bw, tp_lat, sms, config: dict):
    """(forward, backward) exposed tensor-parallel exchange of one dense layer and micro-batch under userbuffers'
    ``config`` (UB_CONFIGS): the four forward exchanges (the QKV and FC1 inputs' all-gathers, the projection's and
    FC2's reduce-scatters), each beside its GEMM, and the backward's four (the projection's and FC2's output
    gradients gathered beside their data-gradient GEMMs, QKV's and FC1's data gradients reduce-scattered beside their
    weight-gradient GEMMs) with the two bulk all-gathers of the QKV and FC1 inputs beside their data-gradient GEMMs.
    A backward GEMM takes its forward's time, as the layer's terms price it."""
    h, f, q, hk = model.hidden, model.ffn_hidden, model.q_hidden, model.kv_hidden
    x = gather_s(ACT_BYTES * T * h, t, tp_bw, tp_lat)  # (N,) one all-gather or reduce-scatter of T h
    g = {"qkv": gemm_s(T, (q + 2 * hk) / t, h, peak, gpu), "proj": gemm_s(T, h, q / t, peak, gpu),
         "fc1": gemm_s(T, (model.mlp_matrices - 1) * f / t, h, peak, gpu), "fc2": gemm_s(T, h, f / t, peak, gpu)}
    one = {name: ub_exchange_s(config[name], x, g[name.split("_")[0]], t, sms) for name in UB_GEMMS}
    fwd = one["qkv_fprop"] + one["fc1_fprop"] + one["proj_fprop"] + one["fc2_fprop"]
    bwd = (one["proj_dgrad"] + one["fc2_dgrad"] + one["qkv_dgrad"] + one["fc1_dgrad"] + one["qkv_wgrad"]
           + one["fc1_wgrad"])
    return fwd, bwd


# The backward's tensor-parallel collectives beside its GEMMs (Framework.tp_backward_async), as Megatron-Core's linear
# layers run them without userbuffers: Transformer Engine's Linear and LayerNormLinear backward (TransformerEngine v1.9
# pytorch/module/linear.py and layernorm_linear.py; v2.8 linear.py the same order) and Megatron-LM's own
# LinearWithGradAccumulationAndAsyncCommunication.backward (d98e8a6 megatron/core/tensor_parallel/layers.py):
#   a column-parallel linear (QKV, FC1) under sequence parallelism all-gathers its saved T / t input again with
#     async_op=True before its data-gradient GEMM, waits for it after that GEMM, then reduce-scatters the data gradient
#     with async_op=True and runs the weight-gradient GEMM before waiting (v2.8 launches the reduce-scatter before the
#     wait: on the same NCCL stream it starts after the all-gather, the same window); without it, the data gradient's
#     all-reduce with async_op=True beside the weight-gradient GEMM;
#   a row-parallel linear (projection, FC2) under sequence parallelism all-gathers its output gradient before its GEMMs
#     (grad_output_preprocess, synchronous): exposed; without it no collective (the forward's all-reduce's backward is
#     the identity).
# Megatron-LM requires CUDA_DEVICE_MAX_CONNECTIONS=1 with tp > 1 before Blackwell (d98e8a6 megatron/training/
# arguments.py asserts it) so that each collective is queued before the GEMM it hides behind. A collective of X seconds
# beside a GEMM of G seconds, its NCCL kernel holding a share f of the SMs (one CTA a ring channel, costmodel._nccl):
# exposed max(X - G, f X) (costmodel._data_parallel.compute_slowdown_s: max(X - G, 0) plus the GEMM's slowdown
# max(f X - (X - G), 0)). A backward GEMM takes its forward's time, as the layer's terms price it.
def async_tp_backward_s(model: Transformer, T, t, sp, peak, gpu, tp_bw, tp_lat, sm_share, fp8_gather=None,
                        amax=0.0):
    """The exposed tensor-parallel exchange of one dense layer's backward and micro-batch where the backward's
    collectives run beside its GEMMs (the comment above): under sequence parallelism (``sp``) the projection's and
    FC2's output-gradient all-gathers exposed, QKV's and FC1's input all-gathers beside their data-gradient GEMMs and
    their data gradients' reduce-scatters beside their weight-gradient GEMMs; without it QKV's and FC1's data-gradient
    all-reduces beside their weight-gradient GEMMs. ``sm_share``: the share of the SMs a tp collective's kernel holds.
    ``fp8_gather`` (bool, per row, or None): the rows whose all-gathers move fp8 data (Framework.te_fp8_gather: 1 byte
    an element, TE_FP8_GATHER_BYTES), each output gradient's after ``amax`` (per row: 1.0 under current scaling) fp32
    amax all-reduces (the saved inputs re-gathered as they are). Zero at t = 1."""
    h, f, q, hk = model.hidden, model.ffn_hidden, model.q_hidden, model.kv_hidden
    x = gather_s(ACT_BYTES * T * h, t, tp_bw, tp_lat)  # one all-gather or reduce-scatter of T h
    ar = all_reduce_s(ACT_BYTES * T * h, t, tp_bw, tp_lat)  # one all-reduce of T h
    xg, go = x, x  # an input's re-gather, an output gradient's gather with its amax
    if fp8_gather is not None:
        xg = np.where(fp8_gather, gather_s(TE_FP8_GATHER_BYTES * T * h, t, tp_bw, tp_lat), x)
        go = np.where(fp8_gather, xg + amax * all_reduce_s(AMAX_BYTES, t, tp_bw, tp_lat), x)

    def beside(X, G):  # a collective of X seconds beside a GEMM of G seconds
        return np.maximum(X - G, sm_share * X)

    col = 0.0
    for G in (gemm_s(T, (q + 2 * hk) / t, h, peak, gpu), gemm_s(T, (model.mlp_matrices - 1) * f / t, h, peak, gpu)):
        col = col + np.where(sp, beside(xg, G) + beside(x, G), beside(ar, G))  # QKV, FC1
    return np.where(sp, 2.0 * go, 0.0) + col  # + the projection's and FC2's output gradients gathered, exposed
