"""The vectorised evaluator: (model, cluster, StrategyTable) -> Metrics, no loop over rows.

Symbols per row (all numpy columns of shape (N,)):
    b micro-batch, s sequence, sc = s / cp tokens of a sequence on one rank, T = b * sc,
    h hidden, f ffn hidden, hk K/V width, a heads, t tp, c cp, d dp, p pp, v vpp,
    m = global_batch / (d * b) micro-batches per iteration, n = L / p layers per stage.

Time of one micro-batch through one layer, per GPU of the tensor-parallel group:
    forward F  = GEMMs (roofline, shape-dependent utilisation) + attention core
                 + element-wise (HBM-bound) + kernel overhead + exposed tp and cp comm
    backward B = activation-gradient GEMMs (same FLOPs as forward) + 2x attention core
                 + 2x element-wise + exposed tp / cp comm
    weight   W = weight-gradient GEMMs (same FLOPs as forward)
    recompute  = full: the whole forward again; selective: the attention core again; with
                 multi-head latent attention instead its up-projections, whose outputs Q, K and
                 V are not kept (Megatron-Core's recompute module "mla_up_proj", which
                 Megatron-Bridge's DeepSeek-V3 recipes select without "core_attn", and the
                 DeepSeek-V3 report's Sec. 3.2.3).
The first stage adds the embedding, the last the final norm, the LM head and the loss.

Pipeline (closed forms for stage times X_i = F_i + B_i + W_i + recompute; T_C hand-off):
    GPipe / 1F1B:  m * max_i X_i + (sum_i X_i - max_i X_i)       + 2 (p - 1) T_C
    interleaved:   m * max_i X_i + (sum_i X_i - max_i X_i) / v   + 2 (p - 1) T_C
    ZB-H1:         m * max_i X_i + (p - 1) max(F + B - W, 0)     + 2 (p - 1) T_C
    ZB-H2:         m * max_i X_i + (p - 1) max(F + B - 2W, 0)    + 2 (p - 1) T_C
which for uniform stages give (m + p - 1) X and (m + (p - 1)/v) X (Narayanan et al. 2021
Sec. 2.2) and the Zero Bubble paper's (Qi et al. 2023) bubble sizes.

Step = pipeline + exposed data-parallel gradient exchange + optimizer step.
Memory (per GPU, worst stage): Megatron's 18 bytes per parameter (2 bf16 weight, 4 fp32
gradient, 12 fp32 master + Adam moments) sharded by ZeRO stage over dp * cp; activations
from Korthikanti et al. 2022 Sec. 4 generalised to GQA, SwiGLU and context parallelism,
times the micro-batches in flight on that stage; communication buffers; a fixed reserve.

Expert parallelism (mixture-of-experts models; E experts, top-k, capacity factor cf, ep):
    Rule: Megatron-Core's MoE Parallel Folding (Liu et al. 2025, arXiv:2504.14960;
    megatron/core/transformer/moe/README.md): the MoE layers of a pipeline stage run on the same
    tp x cp x dp ranks as its attention, regrouped as etp x ep x edp (etp innermost): ep must
    divide E, etp the expert's ffn width, and ep x etp must divide tp x cp x dp; the
    expert-data-parallel group has edp = tp cp dp / (ep etp) ranks, an ep group is ep ranks etp
    apart, an etp group etp consecutive ranks (etp = 1, the README's recommendation for
    fine-grained MoE and DeepSeek-V3's layout, is the default). A dense model takes ep = etp = 1.
    Each GPU routes its T / tp tokens (T = b s / cp); the busiest rank's E / ep experts take
    cf k T / tp token copies (grouped GEMMs of cf k T ep etp / (tp E) rows each after the etp
    group's all-gather, at 1 / etp of the expert's width); dispatch and combine are all-to-alls
    of those copies (h values each) over ep ranks, once each forward and again backward, the
    share to other nodes on the network and the rest on NVLink (all_to_all_s), plus the etp
    group's all-gather and reduce-scatter. Where the framework overlaps them (overlap_ep) only what exceeds
    the layer's compute is exposed. Shared experts and the router run like a dense MLP split by
    tp. Expert weights, gradients and optimizer state are split by ep x etp and sharded by ZeRO
    over edp; their gradients are reduced over edp. Model FLOPs (MFU) count active parameters only.
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
import types

import numpy as np

from costmodel._frameworks import Framework, framework_preset
from costmodel._hardware import ATTENTION_KERNELS, ATTN_SEQ_POINTS, PRECISIONS, Cluster
from costmodel._sorted_memo import Memo
from costmodel._stages import (
    GPU_FIELDS,
    StageView,
    group_link,
    microbatches,
    moe_block_view,
    pool_arrays,
    stage_view,
)
from costmodel._strategy import SCHEDULES, StrategyTable
from costmodel._workloads import Transformer

# ---- named constants --------------------------------------------------------------------
# Activations and their gradients are kept in 16-bit floats (also under fp8 compute, where
# Transformer Engine casts to fp8 only inside the GEMMs).
ACT_BYTES = 2
# FP8_IN_16_BIT: under fp8 only the transformer layers' linear products run in fp8; the attention
# core (QK^T and AV inside the fused kernel) and the output head stay in 16 bits, so they are
# priced at the 16-bit peak. Sources: DeepSeek-V3 technical report Sec. 3.3.1 (embedding, output
# head, MoE gating, normalisation and attention kept in BF16/FP32); Transformer Engine's recipes
# leave fp8 attention off (``fp8_dpa=False`` by default, transformer_engine/common/recipe); torchao's
# float8 training converts nn.Linear only and torchtitan leaves the output layer out
# (``filter_fqns`` default ["output"]); PyTorch's scaled_dot_product_attention has no fp8 kernel.
# Per parameter, Megatron-LM mixed precision with Adam (Megatron's
# theoretical_memory_usage: 18 bytes/param = 2 + 4 + 12; Rajbhandari et al. 2020 Sec. 3.1).
WEIGHT_BYTES = 2  # bf16/fp16 working copy
GRAD_BYTES = 4  # fp32 main gradient
OPTIM_BYTES = 12  # fp32 master weight + Adam first and second moments
# Bytes on the wire per gradient element in the data-parallel reduction, where a framework does not say
# (Framework.grad_reduce_bytes: reduced in the 16-bit training dtype).
GRAD_COMM_BYTES = 2
# Adam step, bytes touched per (sharded) parameter: read fp32 param, m, v, grad (16) and
# write fp32 param, m, v (12) plus the 16-bit copy (2).
ADAM_BYTES_TOUCHED = 30
# Memory the framework holds outside the model: CUDA context, cuBLAS/NCCL workspaces and
# allocator fragmentation (PyTorch reports about 1-3 GB on A100/H100 training runs).
RESERVED_BYTES = 2.0e9
# Megatron-LM's default DDP gradient bucket, 40M elements.
DP_BUCKET_ELEMS = 40e6
# Element-wise traffic of one transformer layer forward, in elements of T*h (norms read +
# write 2 x 2; two fused bias-dropout-add: read x and residual, write out, 1-byte mask,
# 2 x 3.5) and of T*f / t (bias-GeLU read + write 2; SwiGLU reads 2, writes 1: 3).
ELEM_TH_PER_LAYER = 4 + 7
ELEM_TF_PER_LAYER = {"gelu": 2, "relu": 2, "swiglu": 3}
# Backward element-wise traffic relative to forward (read the saved input and the incoming
# gradient, write the outgoing gradient).
ELEM_BWD_FACTOR = 2.0
# Cross-entropy over the vocabulary: fp32 logits written, read twice (max, sum), gradient
# written in 16 bits: bytes per logit, forward and backward together.
XENT_BYTES_PER_LOGIT = 4 + 8 + 2
# Activation memory, Korthikanti et al. 2022 Sec. 4.1, bytes per token per layer: the
# tensors replicated across tp without sequence parallelism (2 norm inputs 4h, QKV input 2h,
# 2 dropout masks 2h, MLP input 2h) = 10h; the split ones: Q 2h + K 2hk + V 2hk +
# projection input 2h, and MLP intermediates 4f (GeLU) or 6f (SwiGLU); 5 bytes per
# attention score (softmax output 2, dropout mask 1, dropout output 2).
ACT_REPLICATED_H = 10
# Flash attention's utilisation uses the 128-wide tile edge of its kernels as the half-size
# of each side. Measured on an H100 (benchmarks/gpu_attention_sweep.py, BENCHMARKS.md "GEMM
# calibration"): PyTorch's fused attention at head dim 128 reaches 360-490 TFLOP/s forward +
# backward without a mask and 420-880 with a causal one (FLOPs counted over the full s x s
# square) once b x heads >= 24, less below (107 at 12 heads, b = 1); this term gives about
# 350-380 whatever b x heads: conservative for causal masks, optimistic for tiny ones.
ATTN_HALF_DIM = 128.0
ACT_SCORE_BYTES = 5
# Mixture of experts. Routing traffic per token copy, in elements of h: permute (read the token,
# write its copy in expert order) and unpermute (read the copy, write the weighted sum), 2 + 2.
ELEM_PERMUTE_PER_COPY = 4
# Router probabilities kept for backward in fp32 (Megatron-Core --moe-router-dtype fp32), bytes
# per token and expert.
ROUTER_PROB_BYTES = 4
# Kernel launches an MoE layer adds to a dense one, in units of the GPU's kernel_overhead_s (of
# which a dense layer pays 2): router and top-k, permute, grouped-GEMM setup, unpermute.
MOE_OVERHEAD_UNITS = 2.0
# Bytes per element of an fp8 dispatch (Framework.fp8_dispatch): one e4m3 byte and one fp32 scale
# per 128 channels (DeepSeek-V3 report, arXiv:2412.19437, Sec. 3.3.2: 1 x 128 tile-wise activation
# scaling; DeepEP's dispatch takes x as an fp8 tensor and a [tokens, hidden / 128] fp32 scale tensor).
FP8_DISPATCH_BYTES = 1.0 + 4.0 / 128.0

REASONS = (  # (ep_invalid appended: the codes before it keep their numbers; it is checked after tp, see reason_codes)
    "ok", "gpus_exceed_cluster", "tp_not_divide_heads", "pp_not_divide_layers", "cp_not_divide_seq", "batch_not_divide",
    "schedule_invalid", "zero_incompatible_pp", "framework_unsupported", "out_of_memory", "ep_invalid",
)
REASON = {name: i for i, name in enumerate(REASONS)}
SCHED = {name: i for i, name in enumerate(SCHEDULES)}
# Schedules the closed forms above price; ZB-V and Hanayo have none and are always priced by
# the pipeline simulator (costmodel._pipeline).
CLOSED_FORM_SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2")
SIMULATED_SCHEDULES = ("zb-v", "hanayo")
PIPELINE_MODES = ("closed_form", "simulate")

METRIC_COLUMNS = (
    "step_time_s", "compute_s", "recompute_s", "tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s",
    "dp_comm_s", "bubble_s", "optimizer_s", "tokens_per_s", "samples_per_s", "mfu", "hfu",
    "bubble_ratio", "mem_weights_bytes", "mem_grads_bytes", "mem_optimizer_bytes",
    "mem_activations_bytes", "mem_buffers_bytes", "mem_total_bytes", "microbatches", "feasible", "reason",
)


class Metrics(dict):
    """Metric columns by name (see METRIC_COLUMNS); also readable as attributes."""

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self[name]
        except KeyError as exc:
            raise AttributeError(name) from exc

    def take(self, idx) -> "Metrics":
        return Metrics({k: v[idx] for k, v in self.items()})


def assemble_metrics(*, feasible, reason, step, pipe, fill, m, batch, seq_len, flops_model, flops_hw, peak_total,
                     compute, recompute, tp_comm, cp_comm, pp_comm, dp_comm, optimizer, mem_weights, mem_grads,
                     mem_optimizer, mem_activations, mem_buffers, mem_total, ep_comm=None, extra=None) -> Metrics:
    """The Metrics of a block of rows from its parts, (N,) each: throughput, MFU and HFU over
    ``peak_total`` (the FLOP/s of every GPU the row uses), the bubble's share of the pipeline,
    infinite step time and zero throughput where infeasible. One definition for the homogeneous
    and the heterogeneous evaluator; ``extra`` columns (stage views, flags) come first; ``ep_comm``
    (the exposed expert all-to-alls) is zero where not given (a dense model)."""
    ep_comm = np.zeros_like(compute) if ep_comm is None else ep_comm
    with np.errstate(divide="ignore", invalid="ignore"):
        samples = np.where(feasible, batch / step, 0.0)
        mfu = np.where(feasible, flops_model / (step * peak_total), 0.0)
        hfu = np.where(feasible, flops_hw / (step * peak_total), 0.0)
        bubble_ratio = np.where(pipe > 0, fill / pipe, 0.0)
    times = dict(zip(("compute_s", "recompute_s", "tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s", "dp_comm_s",
                      "bubble_s", "optimizer_s"),
                     (compute, recompute, tp_comm, cp_comm, ep_comm, pp_comm, dp_comm, fill, optimizer), strict=True))
    memory = dict(zip(("mem_weights_bytes", "mem_grads_bytes", "mem_optimizer_bytes", "mem_activations_bytes",
                       "mem_buffers_bytes", "mem_total_bytes"),
                      (mem_weights, mem_grads, mem_optimizer, mem_activations, mem_buffers, mem_total), strict=True))
    return Metrics(**(extra or {}), step_time_s=np.where(feasible, step, np.inf), **times,
                   tokens_per_s=samples * seq_len, samples_per_s=samples, mfu=mfu, hfu=hfu, bubble_ratio=bubble_ratio,
                   **memory, microbatches=m.astype(np.int64), feasible=feasible, reason=reason)


# ---- building blocks (pure, broadcast over columns) -------------------------------------
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


def all_reduce_s(nbytes, size, bw, lat):
    """Ring all-reduce: 2 (n - 1) / n of the buffer over the link, 2 (n - 1) steps."""
    return np.where(size > 1, 2.0 * (size - 1) / size * nbytes / bw + 2.0 * (size - 1) * lat, 0.0)


def gather_s(nbytes, size, bw, lat):
    """Ring all-gather or reduce-scatter of a buffer of nbytes (the full, gathered size)."""
    return np.where(size > 1, (size - 1) / size * nbytes / bw + (size - 1) * lat, 0.0)


def ring_pass(size, bw, lat):
    """(seconds per byte, fixed seconds) of one pass of a ring over ``size`` ranks, as gather_s
    prices it: (n - 1) / n of the buffer over the link and n - 1 latencies; (0, 0) for one rank."""
    many = size > 1
    return np.where(many, (size - 1) / size / bw, 0.0), np.where(many, (size - 1) * lat, 0.0)


def tier(span, cluster: Cluster, gpu, *, one_group: bool = False):
    """Effective bandwidth and latency of the groups whose ranks span ``span`` consecutive
    ranks (stride * size), laid side by side from rank 0: inside a node if span divides
    gpus_per_node (every group then sits in one node), else the network (some group crosses a
    node boundary and its collective waits for the slowest link: tp 3 on 8-GPU nodes puts
    ranks 6-8 on two nodes; a job smaller than a node with such groups is priced so too).
    ``one_group``: the span is the whole job, inside a node if it fits one."""
    G = cluster.gpus_per_node
    inside = (span <= G) if one_group else (span <= G) & (G % span == 0)
    bw = np.where(inside, cluster.scaleup_Bps, cluster.scaleout_Bps) * gpu.link_eff
    lat = np.where(inside, cluster.scaleup_latency_s, cluster.scaleout_latency_s)
    return bw, lat


def layer_costs(model: Transformer, cluster: Cluster | None, b, t, c, sp, peak, *, gpu=None,
                tp_link=None, cp_link=None, peak16=None, attn_eff=None):
    """Per-micro-batch times of one layer on one GPU: a dict of (N,) arrays (attn_gemm: the attention
    projections' part of gemm).

    ``peak``: the FLOP/s of the row's precision, for the linear layers; ``peak16`` (default
    ``peak``): the 16-bit FLOP/s the attention core runs at, also under fp8 (FP8_IN_16_BIT).
    ``attn_eff``: (N, 6) the framework's attention kernel's fractions of ``peak16`` at ATTN_SEQ_POINTS where
    measured, zeros (or None) for the standard formula (attention_eff_at; costmodel._hardware.ATTENTION_KERNELS).
    The evaluator block passes ``gpu`` (an object whose efficiency and peak fields are arrays,
    one GPU type per configuration) and the (bandwidth, latency) of the tp and cp groups' links."""
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
        tiles = sat(sc, ATTN_HALF_DIM) * sat(s, ATTN_HALF_DIM)
        attn = 4.0 * b * sc * s * q / t / (peak16 * gpu.gemm_eff_max * tiles * sat(dh, ATTN_HALF_DIM))
        if attn_eff is not None and np.any(attn_eff > 0):  # a measured kernel: the causal half at its rate at sc
            eff = attention_eff_at(attn_eff, sc)
            attn = np.where(eff > 0, 2.0 * b * sc * s * q / t / (peak16 * np.where(eff > 0, eff, 1.0)), attn)
        elem_elems = ELEM_TH_PER_LAYER * T * h / split + ELEM_TF_PER_LAYER[model.activation] * T * f / t
        elem = hbm_s(ACT_BYTES * elem_elems, gpu)
        # Two all-reduces of T*h per layer forward (or 2 all-gathers + 2 reduce-scatters
        # under SP: the same bytes), Megatron's f and g operators.
        tp_fwd = 2.0 * all_reduce_s(ACT_BYTES * T * h, t, tp_bw, tp_lat)
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


def fp8_cast_s(model: Transformer, T, t, gpu, casts):
    """(forward, backward) seconds per layer and micro-batch of T tokens at tensor parallelism t
    that a framework casting to fp8 outside the GEMMs spends on its casts: ``casts`` = bytes moved
    per element of each linear layer's input, per weight element forward, per element of its
    output's gradient and per weight element backward (Framework.fp8_cast_bytes, each (N,) or a
    scalar; zero where the row does not cast). The layer's linear products as the model counts
    them: QKV (input h, output (q + 2 hk) / t), projection (q / t, h), up and gate (h, (mats - 1)
    f / t), down (f / t, h), the weights split by t (MLA: its attention matrices, each as
    Transformer.attn_matrices splits it). An MLP has no casts."""
    zero = np.zeros_like(T)
    if model.kind == "mlp":
        return zero, zero
    h, q, hk, f, mats = model.hidden, model.q_hidden, model.kv_hidden, model.ffn_hidden, model.mlp_matrices
    if model.mla:
        mm = model.attn_matrices()
        x = T * (h + f / t + sum(i / t if s == "row" else i for i, _, s in mm))
        g = T * (h + (mats - 1) * f / t + sum(o / t if s == "col" else o for _, o, s in mm))
        w = mats * h * f / t + sum(i * o / (1 if s == "dup" else t) for i, o, s in mm)
    else:
        x = T * (2.0 * h + (q + f) / t)  # the inputs' elements
        g = T * (2.0 * h + (q + 2.0 * hk + (mats - 1) * f) / t)  # the output gradients' elements
        w = (h * (q + 2.0 * hk) + q * h + mats * h * f) / t  # the weights
    cx, cw, cg, cwb = casts
    return hbm_s(cx * x + cw * w, gpu) + zero, hbm_s(cg * g + cwb * w, gpu) + zero


def all_to_all_s(nbytes, size, cluster: Cluster, gpu, net_bytes=None, stride=1):
    """All-to-all over ``size`` consecutive ranks, each sending a buffer of ``nbytes`` spread evenly
    over the group: (size - 1) / size of it leaves the GPU, the share to ranks of its own node
    (min(size, gpus_per_node) - 1 of them) on the scale-up link and the rest on the network, both
    at once; one latency of the slower tier. ``net_bytes``: a per-node dispatcher's network bytes
    instead (each token once per other node); NVLink then carries every copy that leaves the GPU
    (inside its node, or forwarded inside the node it reaches). ``stride``: the group's ranks are
    that many apart (ep ranks across etp), so a node holds gpus_per_node / stride of them."""
    g = cluster.gpus_per_node
    local = np.minimum(size, np.maximum(g // stride, 1))
    if net_bytes is None:
        up = (local - 1) / size * nbytes / (cluster.scaleup_Bps * gpu.link_eff)
        out = (size - local) / size * nbytes / (cluster.scaleout_Bps * gpu.link_eff)
    else:
        up = (size - 1) / size * nbytes / (cluster.scaleup_Bps * gpu.link_eff)
        out = net_bytes / (cluster.scaleout_Bps * gpu.link_eff)
    lat = np.where(size > local, cluster.scaleout_latency_s, cluster.scaleup_latency_s)
    return np.where(size > 1, np.maximum(up, out) + lat, 0.0)


def remote_nodes_per_token(model: Transformer, e, cluster: Cluster, u=1):
    """Expected other nodes a token's k experts sit on, the ep ranks (stride u = etp) spread over
    min(ep, ceil(ep u / gpus_per_node)) nodes of E / nodes consecutive experts each, the k chosen
    uniformly without repeats: (nodes - 1) x (1 - P(none of k on a given node)), P = prod_i
    (E - E / nodes - i) / (E - i). 0 inside a node.

    Group-limited routing (model.router_groups G, router_group_topk M < G; DeepSeek-V3 Sec.
    2.1.2, Megatron-Core's group_limited_topk): M groups are picked by the sum of their best
    k / M scores and the k experts are the best of the picked groups, so (scores alike across
    experts) each picked group gives the token k / M experts, drawn uniformly within it. Where
    G / nodes = c is whole (a node holds c groups), a node misses the token when none of its
    groups is picked: P = (G - c)_M / (G)_M (falling factorials); where nodes / G is whole (a
    group spans nodes / G nodes), it misses when its group is not picked, or is and its E / nodes
    experts get none of the group's k / M: P = 1 - M / G + M / G prod_i (E / G - E / nodes - i) /
    (E / G - i), i < k / M; where neither divides, the unlimited P (conservative)."""
    e = np.asarray(e, dtype=np.float64)
    nodes = np.maximum(np.minimum(e, np.ceil(e * u / cluster.gpus_per_node)), 1.0)
    E, k = float(model.experts), model.experts_per_token

    def miss_of(pool, held, draws):  # P(``draws`` experts drawn from ``pool`` avoid ``held`` of them)
        i = np.arange(draws, dtype=np.float64)
        return np.prod(np.maximum(((pool - held)[..., None] - i) / (pool - i), 0.0), axis=-1)

    miss = miss_of(E, E / nodes, k)
    G, M = float(model.router_groups), model.router_group_topk
    if M < G:
        c = G / nodes  # groups per node
        r = np.arange(M, dtype=np.float64)
        held = np.prod(np.maximum(((G - c)[..., None] - r) / (G - r), 0.0), axis=-1)
        spans = (1.0 - M / G) + M / G * miss_of(E / G, E / nodes, k // M)
        miss = np.where(np.mod(G, nodes) == 0, held, np.where(np.mod(nodes, G) == 0, spans, miss))
    return (nodes - 1.0) * (1.0 - miss)


def routed_copies(model: Transformer, T, t):
    """Token copies the busiest rank's experts take per micro-batch: cf k T / t (module docstring)."""
    return model.capacity_factor * model.experts_per_token * T / t


def moe_layer_costs(model: Transformer, cluster: Cluster, lc: dict, t, sp, e, peak, overlap_ep: bool,
                    per_node: bool = False, u=1, etp_link=None, fp8_dispatch=False) -> dict:
    """Per-micro-batch times of one MoE layer on one GPU (the keys of layer_costs, and ep_fwd / ep_bwd: the exposed
    dispatch + combine all-to-alls of forward and of backward), from the dense layer's costs ``lc`` at the same
    shape (its attention core, attention projections (attn_gemm) and tp / cp terms are the MoE layer's too). Routed
    experts over ``e`` = ep ranks, each split over ``u`` = etp ranks: the etp group all-gathers the copies it
    received (u x as many rows at 1 / u of the expert's width) and reduce-scatters the results, on the link its u
    consecutive ranks span (in ep_fwd / ep_bwd; ``etp_link``: that link's (bandwidth, latency) where the caller has
    it, as layer_costs's tp_link). ``fp8_dispatch`` (bool, per row): the dispatch direction (forward dispatch, and
    its mirror in backward: the combine's gradient sent to the experts) moves FP8_DISPATCH_BYTES an element, the
    combine direction 16 bits (Framework.fp8_dispatch). The heterogeneous evaluator passes as ``cluster`` a stage
    configuration's pool (gpu, gpus_per_node and the scale-up / scale-out links as arrays)."""
    gpu = cluster.gpu
    h, E, fe = model.hidden, model.experts, model.expert_ffn
    mats, act = model.mlp_matrices, model.activation
    T = lc["T"]
    copies = routed_copies(model, T, t)
    local = E / e  # experts per GPU (each 1 / u of its width)
    rows = u * copies / local  # tokens per local expert's GEMM, after the etp all-gather
    fs = model.shared_experts * model.shared_expert_ffn  # the shared experts as one MLP
    split = np.where(sp, t, 1)
    gemm = (
        lc["attn_gemm"]
        + gemm_s(T / t, E, h, peak, gpu)  # router
        + local * (gemm_s(rows, (mats - 1) * fe / u, h, peak, gpu) + gemm_s(rows, h, fe / u, peak, gpu))  # routed
    )
    if fs:
        gemm = gemm + gemm_s(T, (mats - 1) * fs / t, h, peak, gpu) + gemm_s(T, h, fs / t, peak, gpu)
    elems = (ELEM_TH_PER_LAYER * T * h / split + ELEM_TF_PER_LAYER[act] * (T * fs / t + copies * fe)
             + ELEM_PERMUTE_PER_COPY * u * copies * h)
    # dispatch + combine; a per-node dispatcher sends each of the cf T / t tokens once per other node
    remote = remote_nodes_per_token(model, e, cluster, u) if per_node else None

    def one_way(nbytes):  # one all-to-all of the copies at nbytes an element
        net = None if remote is None else nbytes * (copies / model.experts_per_token) * h * remote
        return all_to_all_s(nbytes * copies * h, e, cluster, gpu, net, stride=u)

    if np.any(fp8_dispatch):
        a2a = one_way(np.where(fp8_dispatch, FP8_DISPATCH_BYTES, ACT_BYTES)) + one_way(ACT_BYTES)
    else:
        a2a = 2.0 * one_way(ACT_BYTES)
    if np.any(np.asarray(u) > 1):  # the etp group's all-gather (dispatch) and reduce-scatter (combine)
        etp_bw, etp_lat = tier(u, cluster, gpu) if etp_link is None else etp_link
        a2a = a2a + 2.0 * gather_s(ACT_BYTES * u * copies * h, u, etp_bw, etp_lat)
    window = gemm + lc["attn"] if overlap_ep else 0.0
    exposed = np.maximum(a2a - window, 0.0)
    return {**lc, "gemm": gemm, "elem": hbm_s(ACT_BYTES * elems, gpu),
            "overhead": lc["overhead"] * (1.0 + MOE_OVERHEAD_UNITS / 2.0), "ep_fwd": exposed, "ep_bwd": exposed}


def _act_latent(model: Transformer, T, split):
    """MLA's latents a layer keeps (16 bits, whole on every tensor-parallel rank, its sequence slice
    under sequence parallelism: ``split``): each latent's normalised input to its up-projection and
    the norm's input (0 without MLA)."""
    return 2 * ACT_BYTES * T * model.attn_latent() / split if model.mla else 0.0


def _act_moe_layer_bytes(model: Transformer, b, t, c, sp, u=1):
    """Activation bytes one MoE layer keeps for one micro-batch with no recompute (the dense layer's
    terms with its MLP replaced by: the shared experts' intermediates split by tp, the routed
    copies' inputs and intermediates, the router's fp32 probabilities), and its attention-score
    part."""
    h, q, hk, a, s = model.hidden, model.q_hidden, model.kv_hidden, model.heads, model.seq_len
    T = b * s / c
    coef = 6 if model.activation == "swiglu" else 4
    fs = model.shared_experts * model.shared_expert_ffn
    copies = routed_copies(model, T, t)
    repl = ACT_REPLICATED_H * T * h / np.where(sp, t, 1) + _act_latent(model, T, np.where(sp, t, 1))
    split = (2 * T * (q + model.o_hidden) + 4 * T * hk + coef * T * fs) / t
    # u x the copies after the etp all-gather, each with 1 / u of the expert's intermediates
    routed = copies * (ACT_BYTES * h * u + coef * model.expert_ffn) + ROUTER_PROB_BYTES * model.experts * T / t
    scores = ACT_SCORE_BYTES * a * b * (s / c) * s / t
    return repl + split + routed + scores, scores


def moe_stage_layers(model: Transformer, table: StrategyTable, idx, n):
    """(N, k) MoE layers of each stage column (idx, n as _stages gives them): the stage covers
    layers [lo, lo + n), lo = idx * n for uniform stages, else the layers of the stages before."""
    if model.moe_layers == model.layers:  # every layer an MoE layer (Mixtral, Qwen3-MoE)
        return n
    lo = idx * n if table.stage_layers is None else np.cumsum(n, axis=1) - n
    return moe_layers_in(model, lo, n)


def layer_mix(n_d, a, n_m, b, first_only: bool = False):
    """n_d * a + n_m * b of stages holding n_d dense and n_m MoE layers; ``first_only``: (k, N)
    stage arrays whose n_d is zero past the first stage row (the dense layers all on stage 0), where
    n_m * b is one product and n_d * a is added on that row only (the same sums bit for bit:
    0 * a + x = x)."""
    if not first_only:
        return n_d * a + n_m * b
    out = n_m * b
    out[0] += n_d[0] * (a[0] if np.ndim(a) == 2 else a)
    return out


def moe_layers_in(model: Transformer, lo, n):
    """MoE layers among layers [lo, lo + n) (any broadcasting arrays), as floats."""
    if model.is_moe and model.moe_layer_freq == 1:  # every layer past the dense ones: that part of [lo, lo + n)
        return np.clip(lo + n - model.dense_layers, 0, n).astype(np.float64)
    return (model.moe_layers_before(lo + n) - model.moe_layers_before(lo)).astype(np.float64)


def expert_groups(table: StrategyTable):
    """(ep, edp, etp) columns: the expert-parallel degree, the expert-data-parallel ranks
    tp cp dp / (ep etp) and the expert-tensor-parallel degree (module docstring, "Expert
    parallelism")."""
    e, u = table["ep"], table["etp"]
    return e, np.maximum(table["dp"] * table["cp"] * table["tp"] // (e * u), 1), u


# -- terms of the evaluator block, the memory screen and the scalar reference -----------------
# Called on arrays that broadcast: (N,) rows, (N, k) rows x stages, or (U,) stage configurations.


def edge_terms(model: Transformer, T, t, sp, peak16, gpu, tp_bw, tp_lat,
               xent_bytes=XENT_BYTES_PER_LOGIT) -> dict[str, np.ndarray]:
    """The embedding's (first stage) and the head's (last stage) terms for one micro-batch of T
    tokens at tensor parallelism t: times emb_c, emb_tp, head_gemm, head_elem, head_tp and the
    activation bytes emb_act, head_act; zeros for an MLP, which has neither. The head's GEMM
    runs at the 16-bit FLOP/s ``peak16``, also under fp8 (FP8_IN_16_BIT); its loss moves
    ``xent_bytes`` a logit (Framework.xent_bytes)."""
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
        "head_act": 4.0 * T * V / t + zero,  # fp32 logits of one micro-batch
    }


def pipeline_fill(sched, p, v, X_sum, X_max, F_b, B_b, W_b):
    """Pipeline fill and drain time of the closed forms (module docstring): (sum - max of the
    stage times) / v for GPipe, 1F1B and interleaving; ZB-H1 and ZB-H2 fill with the
    bottleneck's F + B - W and F + B - 2W per stage boundary."""
    vv = np.where(sched == SCHED["interleaved"], v, 1)
    fill = (X_sum - X_max) / vv
    fill = np.where(sched == SCHED["zb-h1"], (p - 1) * np.maximum(F_b + B_b - W_b, 0.0), fill)
    return np.where(sched == SCHED["zb-h2"], (p - 1) * np.maximum(F_b + B_b - 2 * W_b, 0.0), fill)


def stage_params(model: Transformer, n, first, last, t, edges=None):
    """Parameters per GPU of a stage of n layers (plus the embedding on the first stage and the head on the last,
    with Megatron's tied copy of the embedding on the last when pp > 1); ``edges``: plus_edges, no row of pp 1."""
    tied_copy = model.vocab * model.hidden if (model.tied_embeddings and model.kind != "mlp") else 0
    if edges is not None:
        out = edges(n * model.layer_params(), model.embedding_params(), model.head_params() + tied_copy) / t
    else:
        head_p = model.head_params() + np.where(first, 0, tied_copy)
        out = (n * model.layer_params() + first * model.embedding_params() + last * head_p) / t
    return out + n * model.tp_replicated_params() * (1 - 1 / t) if model.mla else out  # (MLA's whole on every rank)


def dp_exchange_s(zero, m, params, g, bw, lat, grad_bytes=None, fw: Framework | None = None, prec=0):
    """Seconds of a stage's data-parallel exchange over g ranks for ``params`` parameters per
    GPU: dp_exchange_coef's a x params + b."""
    a, b = dp_exchange_coef(zero, m, g, bw, lat, grad_bytes, fw, prec)
    return a * params + b


def dp_exchange_coef(zero, m, g, bw, lat, grad_bytes=None, fw: Framework | None = None, prec=0):
    """(a, b): a stage's data-parallel exchange over g ranks takes a x params + b seconds for ``params`` parameters per
    GPU, ``grad_bytes`` a gradient element on the wire (None: ``fw``'s grad_reduce_bytes at ``prec``, else 2), a weight
    element ``fw``'s weight_gather_bytes at ``prec`` (else 2). ZeRO-3: per micro-batch, all-gather the weights for
    forward and for backward and reduce-scatter the gradients (Rajbhandari et al. 2020 Sec. 7: 1.5x the all-reduce
    volume, per pass); ZeRO 0: all-reduce the gradients; ZeRO 1-2: reduce-scatter them and all-gather the updated
    weights; ZeRO 0-1 under ``fw``'s all_reduce_then_gather: all-reduce, then all-gather. Each pass a ring."""
    per_byte, steps = ring_pass(g, bw, lat)
    if grad_bytes is None:
        grad_bytes = GRAD_COMM_BYTES if fw is None else np.take(fw.grad_reduce_bytes, prec)
    w, both = (WEIGHT_BYTES, False) if fw is None else (np.take(fw.weight_gather_bytes, prec), np.logical_and(
        np.take(fw.all_reduce_then_gather, prec), zero <= 1))
    z3, a = zero == 3, np.where(both, 2.0 * grad_bytes + w, np.where(zero == 0, 2.0 * grad_bytes, grad_bytes + w))
    return np.where(z3, m * (2.0 * w + grad_bytes), a) * per_byte, np.where(z3, 3.0 * m, 2.0 + both) * steps


def activation_bytes(full, sel, act_L, sel_kept, sel_work, T, h, sp_div):
    """Activation bytes one layer keeps per micro-batch in flight under its recompute choice
    (full: its input only; selective: ``sel_kept``, what the framework's selective policy keeps;
    none: all), and the working set of the one layer being recomputed (full: the whole layer;
    selective: ``sel_work``)."""
    kept = np.where(full, ACT_BYTES * T * h / sp_div, np.where(sel, sel_kept, act_L))
    return kept, np.where(full, act_L, np.where(sel, sel_work, 0.0))


def layer_activations(model: Transformer, sh: dict, full, sel, sp_div) -> dict:
    """activation_bytes (kept, work) of one dense layer where the model has one and (kept_m,
    work_m) of one MoE layer where it is an MoE model, from the shape terms ``sh``."""
    def of(pre):
        return activation_bytes(full, sel, sh[pre + "act_L"], sh[pre + "sel_kept"], sh[pre + "sel_work"], sh["T"],
                                model.hidden, sp_div)

    out = {}
    if model.moe_layers < model.layers:  # some dense layer
        out["kept"], out["work"] = of("")
    if model.is_moe:
        out["kept_m"], out["work_m"] = of("moe_")
    return out


def state_bytes(params, zero, g, stage_of=None):
    """Weight, gradient and optimizer bytes per GPU for ``params`` parameters, each sharded
    over the g data-parallel ranks from its ZeRO stage on (3, 2 and 1). ``stage_of``: zero and
    g are per configuration, params per stage of configuration ``stage_of``."""
    shards = _state_shards(zero, g)
    if stage_of is not None:
        shards = tuple(x[stage_of] for x in shards)
    return tuple(nbytes * params / x for nbytes, x in zip((WEIGHT_BYTES, GRAD_BYTES, OPTIM_BYTES), shards, strict=True))


def state_bytes_per_param(zero, g):
    """state_bytes' three parts together, per parameter (a stage's total is this x its parameters).
    Long integer columns: looked up in a table over every (ZeRO stage, g) up to theirs (the same
    sums, one gather instead of nine passes)."""
    zero, g = np.asarray(zero), np.asarray(g)
    if g.size > 1024 and zero.dtype.kind == g.dtype.kind == "i" and min(zero.min(), g.min()) >= 0:
        G = int(g.max()) + 1
        with np.errstate(divide="ignore"):
            table = _bytes_per_param(np.arange(int(zero.max()) + 1)[:, None], np.arange(G))
        return np.take(table.reshape(-1), zero * G + g)  # (a flat take: a 2-d fancy index is twice as slow)
    return _bytes_per_param(zero, g)


def _bytes_per_param(zero, g):
    return sum(nbytes / x for nbytes, x in zip((WEIGHT_BYTES, GRAD_BYTES, OPTIM_BYTES), _state_shards(zero, g),
                                               strict=True))


def _state_shards(zero, g):
    return np.where(zero == 3, g, 1), np.where(zero >= 2, g, 1), np.where(zero >= 1, g, 1)


def buffer_bytes(T, h, t, g, zero, params_max, layer_p, stage_of=None):
    """Communication buffers per GPU: two tensor-parallel activations, two gradient buckets
    (data parallelism), two prefetched layers (ZeRO-3), and the reserved runtime memory.
    ``stage_of``: T, t, g, zero per configuration, params_max per row: the buffers of stages of
    configurations ``stage_of`` (k, N)."""
    tp_buf = np.where(t > 1, 2.0 * ACT_BYTES * T * h, 0.0)
    bucket = 2.0 * GRAD_COMM_BYTES * np.minimum(params_max, DP_BUCKET_ELEMS)
    z3_buf = np.where(zero == 3, 2.0 * WEIGHT_BYTES * layer_p / t, 0.0)
    reduced = g > 1
    if stage_of is not None:  # the configurations' part first, then the rows' buckets (times 1.0 or 0.0: as a where)
        return np.take(tp_buf + z3_buf + RESERVED_BYTES, stage_of) + np.take(reduced * 1.0, stage_of) * bucket
    return tp_buf + np.where(reduced, bucket, 0.0) + z3_buf + RESERVED_BYTES


def recompute_flops_per_token(model: Transformer, full, sel, fw: Framework, moe_layer: bool = False):
    """FLOPs per token one layer (an MoE layer: ``moe_layer``) recomputes: its forward on active
    weights (full); under selective, the attention scores (4 s x the query width; MLA: its
    up-projections, 2 FLOPs a weight) or, for a dense
    layer under per-op checkpointing (Framework.selective "op"), the matrix products it does not
    save (expert layers keep the attention-core policy: per-op checkpointing of experts is not
    modelled)."""
    if model.kind == "mlp":
        sel_re = 0.0
    elif fw.selective == "op" and not moe_layer:
        sel_re = op_checkpoint_products(model)[1]
    elif model.mla:  # its up-projections (module docstring, recompute)
        sel_re = 2.0 * sum(i * o for i, o in model.attn_up_matrices())
    else:
        sel_re = 4.0 * model.seq_len * model.q_hidden
    fwd = model.moe_layer_fwd_flops_per_token() if moe_layer else model.layer_fwd_flops_per_token()
    return np.where(full, fwd, np.where(sel, sel_re, 0.0))


def op_checkpoint_products(model: Transformer) -> tuple[list, float, float]:
    """A dense layer's matrix products in the order torchtitan's Llama block runs them (wq, wk,
    wv, wo, then w1, w3, w2 for SwiGLU or fc1, fc2), as (output width per token, split by tensor
    parallelism, saved) with every other one saved (torchtitan's per-op policy saves the 1st,
    3rd, ... product of a block), the FLOPs per token of those recomputed, and of all."""
    h, hk, f, qh = model.hidden, model.kv_hidden, model.ffn_hidden, model.q_hidden
    ffn = [(h, f), (h, f), (f, h)] if model.activation == "swiglu" else [(h, f), (f, h)]
    shapes = [(h, qh), (h, hk), (h, hk), (model.o_hidden, h), *ffn]  # (input, output) widths
    row_parallel = {3, len(shapes) - 1}  # wo and the last FFN product: full-width partial sums
    mms = [(out, i not in row_parallel, i % 2 == 0) for i, (_, out) in enumerate(shapes)]
    flops = [2.0 * a * b for a, b in shapes]
    return mms, sum(x for x, (_, _, kept) in zip(flops, mms, strict=True) if not kept), sum(flops)


def _act_layer_bytes(model: Transformer, b, t, c, sp):
    """Activation bytes one layer keeps for one micro-batch with no recompute, and the part
    that is the attention-score term (dropped by selective recompute)."""
    h, f, hk, a, s = model.hidden, model.ffn_hidden, model.kv_hidden, model.heads, model.seq_len
    T = b * s / c
    if model.kind == "mlp":
        # Each linear layer keeps its input (16-bit) and the ReLU mask (1 byte), split by t
        # for the row-parallel half of the pairs, replicated for the column-parallel half.
        total = T * h * (ACT_BYTES * 0.5 * (1 + 1 / t) + 1 / t)
        return total, np.zeros_like(total)
    repl = ACT_REPLICATED_H * T * h / np.where(sp, t, 1) + _act_latent(model, T, np.where(sp, t, 1))
    mlp = (6 if model.activation == "swiglu" else 4) * T * f
    # Q, K and V (2 hk), the projection input (o) and the MLP's intermediates
    split = (2 * T * (model.q_hidden + model.o_hidden) + 4 * T * hk + mlp) / t
    scores = ACT_SCORE_BYTES * a * b * (s / c) * s / t
    return repl + split + scores, scores


def in_flight(sched, p, m, v, stage, rows=None):
    """Micro-batch activations held at the peak on pipeline stage ``stage`` (any array of
    stage indices), counted in whole-stage micro-batches (an interleaved chunk counts 1/v).
    Equal to the simulator's peak where the closed forms apply (tests/test_pipeline_in_core).

    GPipe holds all m; 1F1B holds p - i on stage i (Narayanan et al. 2021); interleaved
    follows Megatron-LM's warm-up, (p - i - 1) * 2 + (v - 1) * p + 1 chunks on stage i;
    ZB-H1 holds p on every stage, ZB-H2 about 2p - 1 (Qi et al. 2023). ``rows``: the schedule
    columns are per row and ``stage`` holds stages of rows ``rows`` (flat stages)."""
    # Each schedule's count is min((a + c * i) / q, m) with integers a, c, q per row, so one
    # expression over (N, k) serves all schedules (ZB-V and Hanayo, always simulated, take
    # the 1F1B form here).
    sched, p, m, v = np.broadcast_arrays(sched, p, m, v)
    is_g, is_i = sched == SCHED["gpipe"], sched == SCHED["interleaved"]
    a = np.select([is_g, is_i, sched == SCHED["zb-h1"], sched == SCHED["zb-h2"]],
                  [m, (p - 1) * 2 + (v - 1) * p + 1, p, 2 * p - 1], p)
    c = np.where(is_i, -2, np.where(is_g | (sched == SCHED["zb-h1"]) | (sched == SCHED["zb-h2"]), 0, -1))
    q = np.where(is_i, v, 1)
    cap = m * q
    if rows is not None:
        a, c, q, cap = a[rows], c[rows], q[rows], cap[rows]
    return np.minimum(a + c * stage, cap) / q


def distinct_rows(*cols):
    """(first, inv): for columns of small non-negative integers (or bools), broadcast against each other, the flat
    index of one entry per distinct combination, and each entry's combination number (the broadcast shape), so that
    ``f(x.ravel()[first])[inv] == f(x)`` for any entry-wise f. Dense mixed-radix keys (no sort) when the key range
    is small, else the combinations of each half of the columns first, then those pairs; np.unique for two columns
    of a large range (every entry its own combination if the key would overflow int64)."""
    cols = [np.asarray(x, dtype=np.int64) for x in cols]
    shape = np.broadcast_shapes(*(x.shape for x in cols))
    n = math.prod(shape)
    radix = [int(x.max()) + 1 if x.size else 1 for x in cols]
    K = math.prod(radix)
    if K >= 2**62:
        return np.arange(n), np.arange(n).reshape(shape)
    if K > max(4 * n, 1 << 16) and len(cols) > 2:
        return distinct_rows(distinct_rows(*cols[:(h := len(cols) // 2)])[1], distinct_rows(*cols[h:])[1])
    # the mixed-radix key (np.ravel_multi_index's, in place after the first product: 3x faster), at the broadcast
    # shape from the first sum on (columns alike on a row's stages are not spread first)
    key = np.add(cols[0] * radix[1], cols[1]) if len(cols) > 1 else cols[0]
    for x, r in zip(cols[2:], radix[2:], strict=True):
        key = np.add(np.multiply(key, r, out=key), x, out=key) if key.shape == shape else key * r + x
    key = np.broadcast_to(key, shape).reshape(-1)
    if K > max(4 * n, 1 << 16):
        _, first, inv = np.unique(key, return_index=True, return_inverse=True)
        return first, inv.reshape(shape)
    first, inv = distinct_keys(key, K)
    return first, inv.reshape(shape)


def distinct_keys(key, K: int):
    """distinct_rows of one column of integer keys in [0, K), K not much more than the keys (no sort): ``first``
    the last entry holding each key."""
    (at := np.full(K, -1))[key] = np.arange(len(key))  # (a scatter: the last write wins)
    keys = np.flatnonzero(at >= 0)  # the combinations in key order (not a cumsum over the K keys)
    np.put(pos := np.empty(K, dtype=np.int64), keys, np.arange(len(keys)))
    return at[keys], np.take(pos, key)


MOE_TERMS = ("gemm", "elem", "overhead", "ep_fwd", "ep_bwd")
# What layer_terms reads of a dense layer's shape terms (after framework_terms).
LAYER_INPUTS = ("gemm", "attn", "elem", "overhead", "tp_fwd", "cp_fwd", "cp_bwd", "sel_re", "sel_tp", "cast_f", "cast_b")


def moe_layer_inputs(sh: dict) -> dict:
    """The inputs of layer_terms for one MoE layer from the shape terms ``sh`` (after
    framework_terms): its moe_ terms where it has them, the dense layer's otherwise."""
    return {k: sh["moe_" + k] if k in MOE_TERMS or k.startswith("sel_") else sh[k]
            for k in (*LAYER_INPUTS, *MOE_TERMS[3:])}


# The layer terms moe_stage_terms reads (the dense layer's: the first four).
MOE_PART_KEYS = ("compute", "recompute", "tp", "cp", "ep")


def moe_stage_terms(n, n_m, lt, lt_m):
    """(layers, per-layer terms) of stages of n layers, n_m of them MoE layers, as bottleneck_parts
    takes them: the MoE layer's terms with n where every layer is one (``lt`` None), else the
    stage's sums over both kinds with 1 layer."""
    if lt is None:
        return n, {k: lt_m[k] for k in ("compute", "recompute", "tp", "cp", "ep")}
    n_d = n - n_m
    out = {k: n_d * lt[k] + n_m * lt_m[k] for k in ("compute", "recompute", "tp", "cp")}
    out["ep"] = n_m * lt_m["ep"]
    return np.ones(np.shape(n)), out


def shape_terms(model: Transformer, cluster: Cluster | None, b, t, c, sp, peak, *, moe=None,
                **links) -> dict[str, np.ndarray]:
    """Every per-row term that depends only on the micro-batch shape and the precision: one layer's
    costs (layer_costs, which takes ``links`` and ``peak16``), the embedding and head times, activation bytes.
    ``moe`` = (ep column, etp column, framework, precision column) for an MoE model: adds the MoE
    layer's terms as moe_<key> (MOE_TERMS, and moe_act_L); ``links`` may hold etp_link for it (moe_layer_costs)
    and the framework's xent_bytes (edge_terms)."""
    etp_link = links.pop("etp_link", None)
    casts = links.pop("casts", None)
    xent = links.pop("xent_bytes", XENT_BYTES_PER_LOGIT)
    gpu = links.get("gpu") or cluster.gpu
    lc = layer_costs(model, cluster, b, t, c, sp, peak, **links)
    T = lc["T"]
    zero = np.zeros_like(T)
    lc["cast_f"], lc["cast_b"] = fp8_cast_s(model, T, t, gpu, casts) if casts is not None else (zero, zero)
    edge = edge_terms(model, T, t, sp, links.get("peak16", peak), gpu, lc["tp_bw"], lc["tp_lat"], xent)
    act_L, score_L = _act_layer_bytes(model, b, t, c, sp)
    out = {k: lc[k] + zero for k in ("gemm", "attn", "elem", "overhead", "tp_fwd", "cp_fwd", "cp_bwd", "T", "cast_f",
                                     "cast_b")}
    out.update(edge, act_L=act_L + zero, score_L=score_L + zero, attn_gemm=lc["attn_gemm"] + zero, c=c + zero,
               cp_bw=lc["cp_bw"] + zero, cp_lat=lc["cp_lat"] + zero)  # (the cp degree and link: framework_terms)
    if model.mla:  # the up-projections' time and outputs (Q, K, V) for selective recompute (framework_terms)
        out["up"] = sum(gemm_s(T, o / t, i, peak, gpu) for i, o in model.attn_up_matrices()) + zero
        out["qkv_L"] = ACT_BYTES * T * (2 * model.q_hidden + model.o_hidden) / t + zero
    if moe is not None:
        out.update(moe_shape_terms(model, cluster, out, b, t, c, sp, peak, moe, etp_link))
    return out


def moe_shape_terms(model: Transformer, cluster, sh: dict, b, t, c, sp, peak, moe, etp_link=None) -> dict:
    """The MoE layer's shape terms (moe_<key> of MOE_TERMS, and moe_act_L) from the dense ones ``sh``
    (shape_terms without ``moe``, at the same shape: T, attn, attn_gemm, overhead); ``moe`` = (ep,
    etp, framework, precision); ``etp_link`` as shape_terms takes it."""
    e, u, fw, precision = moe
    fp8_dispatch = fw.fp8_dispatch & (np.asarray(precision) == PRECISIONS.index("fp8"))
    ml = moe_layer_costs(model, cluster, {k: sh[k] for k in ("T", "attn", "attn_gemm", "overhead")}, t, sp, e, peak,
                         fw.overlap_ep, fw.ep_dispatch_per_node, u, etp_link, fp8_dispatch)
    zero = np.zeros_like(sh["T"])
    return {**{"moe_" + k: ml[k] + zero for k in MOE_TERMS},
            "moe_act_L": _act_moe_layer_bytes(model, b, t, c, sp, u)[0] + zero}


# ---- the evaluator -------------------------------------------------------------------------
def schedule_fits(sched, p, v, chunks_ok):
    """(N,) bool: the schedule takes vpp v on pp p: interleaved v >= 2, ZB-V v = 2, Hanayo an even
    v (2 x waves), each with p >= 2 and whole layers per chunk (``chunks_ok``); the others v = 1."""
    chunked = (v >= 2) & (p >= 2) & chunks_ok
    return np.select(
        [sched == SCHED["interleaved"], sched == SCHED["zb-v"], sched == SCHED["hanayo"]],
        [chunked, chunked & (v == 2), chunked & (v % 2 == 0)],
        v == 1,
    )


def tp_divides(model: Transformer, t):
    """Tensor parallelism t splits the heads and K/V heads (an MLP: the hidden width) evenly."""
    if model.kind == "mlp":
        return model.hidden % t == 0
    return (model.heads % t == 0) & (model.kv_heads % t == 0)


def feasibility(model: Transformer, cluster, table, framework=None) -> np.ndarray:
    """Reason code per row for everything but memory (0 = ok; first failing check wins) under
    ``framework`` (costmodel._frameworks; None: the default profile): a StrategyTable, with
    placements or without, on a Cluster or a HeteroCluster (costmodel._stages)."""
    return stage_feasibility(model, pool_arrays(cluster), stage_view(model, table), framework_preset(framework))[0]


def stage_feasibility(model: Transformer, pa: dict, sv: StageView, fw: Framework, stage_bits=None, shift=None):
    """(reason (N,), GPUs each row puts on each pool (N, P)) of a StageView on pools ``pa``.

    Per stage, as bits reduced over the row's stages at once: its pools exist (1), tp splits the
    heads (2), whole layers, at least one (4), the batch divides into dp x micro-batches (8), v
    chunks of whole layers (16), ep x etp folds into its ranks (32; an MoE model, not across two
    pools); the pipeline's stages hold the model's layers. ``stage_bits``: bits 2, 8 and 32 where
    the caller has them per stage (from its configurations); ``shift(y)``: the GPUs each split stage moves onto pool
    y (negative: off it), where the caller has them per pair. Chunked schedules need v chunks per
    device of whole layers: where the framework splits chunks unevenly (framework.uneven_chunks:
    Megatron-Core's pipeline layouts, torchtitan's split points; Llama 3 405B's interleaved 7,
    8 x 14, 7 layers over 16 stages) every stage needs at least v layers, a stage that v does not
    divide getting chunks one layer apart; the closed forms and the simulator take each chunk as
    1/v of its stage's time (exact when v divides the stage, else within a layer's time per
    chunk). Otherwise v must divide every stage's layers."""
    r = sv.rows
    p, c, v, B = r["pp"], r["cp"], r["vpp"], r["global_batch"]
    L, P = model.layers, pa["num_gpus"].size
    on = sv.j < p  # (k, N) stages of the pipeline (padding past pp is not)
    d, t, n = sv.dp, sv.tp, sv.layers
    e, u = r["ep"], r["etp"]
    gpus = d * t * c
    if stage_bits is None:
        tps = np.arange(int(t.max()) + 1 if t.size else 1)
        stage_bits = (~tp_divides(model, np.maximum(tps, 1))[t] * np.uint8(2)  # a lookup per tp value
                      | (B % sv.batch_div != 0) * np.uint8(8))
        if model.is_moe:
            stage_bits = stage_bits | ~ep_fits(model, e, gpus, u) * np.uint8(32)
    bits = stage_bits | (n < 1) * np.uint8(4)
    ks, rows, pool2, dp2 = sv.split or (np.zeros(0, dtype=np.int64),) * 4  # (stages split across two pools)
    if over := sv.pool.max(initial=0) >= P or pool2.max(initial=0) >= P:
        bits = bits | (sv.pool >= P) * np.uint8(1)
        bits.reshape(-1)[ks] |= (pool2 >= P) * np.uint8(1)
    if model.is_moe and ks.size:  # a stage split across two pools: its expert groups would span both
        bits.reshape(-1)[ks] |= np.uint8(32)
    if np.any(v > 1):  # chunks matter to chunked schedules only (v >= 2)
        bits = bits | ((n < v) if fw.uneven_chunks else (n % v != 0)) * np.uint8(16)
    every = bool(on.all()) and not np.any(sv.comp)  # every column a stage of its row, weights 1
    weigh = (lambda a: a) if every else (lambda a: sv.w * a)  # noqa: E731
    flags = bits[0] if bits.shape[0] == 1 else np.bitwise_or.reduce(bits if every else bits * on.astype(np.uint8), 0)
    wsum = np.full(len(p), sv.w.shape[0]) if every else np.sum(sv.w, axis=0)  # stages in the pipeline
    in_range = (lambda x: np.minimum(x, P - 1)) if over else (lambda x: x)  # noqa: E731  (counted on the last)
    pool = in_range(sv.pool)  # a pool out of range fails bit 1
    if P == 1 and gpus.shape[0] == 1:
        used = (wsum * gpus[0])[:, None]
    else:  # GPUs per pool: the stages' own pools, split stages' replicas on their second pools moved there
        total = np.sum(g := weigh(gpus), axis=0)
        on_pool = [np.sum(g * (pool if P == 2 else pool == y), axis=0) for y in range(1, P)]  # (P == 2: pool == 1)
        if ks.size:
            if shift is None:
                moved = np.take(np.broadcast_to(t, bits.shape), ks) * np.take(c, rows) * dp2  # (dp2 x tp x cp GPUs)
                to, fro = in_range(pool2), np.take(pool, ks)
                shift = lambda y: moved * ((to == y).astype(np.int64) - (fro == y))  # noqa: E731
            for y in range(1, P):
                on_pool[y - 1] += np.bincount(rows, shift(y), len(p)).astype(np.int64)
        per_pool = [total - sum(on_pool), *on_pool]
        used = np.stack(per_pool, axis=1)
    if P == 1:
        gpus_ok = (flags & 1 == 0) & np.all(used <= pa["num_gpus"], axis=1)
    else:  # pool by pool (N,): an all over axis 1 of (N, P) costs several times as much
        gpus_ok = flags & 1 == 0
        for q, x in enumerate(per_pool):
            gpus_ok &= x <= pa["num_gpus"][q]
    held = wsum * n[0] if n.shape[0] == 1 else np.sum(weigh(n), axis=0)
    pp_ok = (held == L) & (flags & 4 == 0)
    if not (every or np.all(sv.comp)):  # stages past pp hold no layers
        pp_ok &= (held == n.sum(axis=0))
    ep_ok = flags & 32 == 0 if model.is_moe else ep_fits(model, e, 1, u)
    reason = reason_codes(gpus_ok=gpus_ok, tp_ok=flags & 2 == 0, pp_ok=pp_ok, batch_ok=flags & 8 == 0,
                          sched_ok=schedule_fits(r["schedule"], p, v, flags & 16 == 0), cp=c, pp=p,
                          seq_len=model.seq_len, zero=r["zero_stage"], framework=fw, schedule=r["schedule"],
                          sequence_parallel=r["sequence_parallel"], precision=r["precision"], ep_ok=ep_ok, ep=e, etp=u)
    return reason, used


def ep_fits(model: Transformer, e, ranks, u):
    """(N,) bool: ep divides the experts, etp the expert's ffn width, and ep x etp the ``ranks`` =
    tp cp dp of a stage (module docstring, "Expert parallelism"); a dense model takes 1 and 1."""
    if not model.is_moe:
        return (e == 1) & (u == 1)
    return (model.experts % e == 0) & (model.expert_ffn % u == 0) & (ranks % (e * u) == 0)


def framework_runs(fw: Framework, schedule, zero, sequence_parallel, precision, ep=None, etp=None) -> np.ndarray:
    """(N,) bool: the framework offers the row's schedule, ZeRO stage, SP, precision, ep and etp."""
    ok = np.isin(schedule, [SCHED[x] for x in fw.schedules]) & (zero <= fw.max_zero)
    if ep is not None and not fw.expert_parallel:
        ok &= ep == 1
    if etp is not None and not fw.expert_tensor_parallel:
        ok &= etp == 1
    if not fw.sequence_parallel:
        ok &= ~sequence_parallel
    if not fw.fp8:
        ok &= precision != PRECISIONS.index("fp8")
    return ok


def reason_codes(*, gpus_ok, tp_ok, pp_ok, batch_ok, sched_ok, cp, pp, seq_len, zero, framework,
                 schedule, sequence_parallel, precision, ep_ok=None, ep=None, etp=None) -> np.ndarray:
    """(N,) int8 reason per row from the checks of both evaluators' feasibility (0 = ok; the
    first failing check in REASONS order wins). The context-parallel (cp divides the sequence
    into 2 cp chunks), ZeRO (a stage above the framework's max_zero_with_pp needs pp 1) and
    framework checks (what ``framework`` runs of schedule, ZeRO, SP and precision) are the same
    for both and made here. ``ep_ok`` (homogeneous only): ep_fits, checked right after tp."""
    fw = framework_preset(framework)
    fw_ok = framework_runs(fw, schedule, zero, sequence_parallel, precision, ep, etp)
    checks = [
        (gpus_ok, "gpus_exceed_cluster"),
        (tp_ok, "tp_not_divide_heads"),
        *(((ep_ok, "ep_invalid"),) if ep_ok is not None else ()),
        (pp_ok, "pp_not_divide_layers"),
        ((cp == 1) | (seq_len % (2 * cp) == 0), "cp_not_divide_seq"),
        (batch_ok, "batch_not_divide"),
        (sched_ok, "schedule_invalid"),
        ((zero <= fw.max_zero_with_pp) | (pp == 1), "zero_incompatible_pp"),
        (fw_ok, "framework_unsupported"),
    ]
    reason = np.zeros(len(np.asarray(pp)), dtype=np.int8)
    for ok, name in reversed(checks):
        reason = np.where(ok, reason, REASON[name]).astype(np.int8)
    return reason


# Rows per block: 16k rows keep a block's float64 temporaries in L2, 1.6x faster per row
# than whole 1M-row columns on these machines (BENCHMARKS.md, "Cost core").
BLOCK_ROWS = 16384


def _keep_freed_memory() -> None:
    """glibc's malloc at a fixed 32 MiB mmap threshold: with its default, dynamic one, the megabytes a placement
    evaluation frees go back to the system at its end and are faulted in again by the next (a fifth of its time
    at 200,000 rows; BENCHMARKS.md "issue 14, session 30"). Not where MALLOC_MMAP_THRESHOLD_ is set, nor with
    PLANSWEEP_MALLOPT=0; nothing where the C library is not glibc."""
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ and os.environ.get("PLANSWEEP_MALLOPT") != "0":
        try:
            ctypes.CDLL("libc.so.6").mallopt(-3, 32 << 20)  # (-3: M_MMAP_THRESHOLD)
        except (OSError, AttributeError):
            pass


_keep_freed_memory()


def evaluate(model: Transformer, cluster, table, *, pipeline: str = "closed_form",
             framework: str | Framework | None = None) -> Metrics:
    """Evaluate every row of ``table``: time and its parts, throughput, MFU, memory, feasibility.

    ``table``: a StrategyTable, with row degrees or with placements (per-stage pools and degrees);
    ``cluster``: a Cluster (one pool) or a HeteroCluster. Pure and vectorised: numpy over the
    rows and their stages (costmodel._stages), in cache-sized blocks of rows; no Python loop
    over strategies. Infeasible rows stay, with feasible=False, a reason code (REASONS) and
    infinite step time.

    ``pipeline``: "closed_form" (default, for bulk screening: the closed forms of the module
    docstring, exact for uniform stages without hand-off time, within a few percent
    otherwise) or "simulate" (pipeline time and micro-batches in flight from the schedule
    simulator, exact for every schedule, uneven stages and hand-off time; grouped by
    (schedule, pp, micro-batches, vpp), costlier for deep pipelines with many micro-batches).
    ZB-V and Hanayo rows are always simulated.

    ``framework``: a profile of costmodel._frameworks (or its name; None: "generic", the model
    before profiles): what it can run, what it overlaps, how it shards with a pipeline, whether
    its attention kernel stores the s x s scores.
    """
    if pipeline not in PIPELINE_MODES:
        raise ValueError(f"pipeline must be one of {PIPELINE_MODES}, got {pipeline!r}")
    fw = framework_preset(framework)
    pa = pool_arrays(cluster)
    order, cuts, depths = None, (), None
    if len(table) == 0:
        return Metrics({k: np.zeros(0, dtype=bool if k == "feasible" else np.int8 if k == "reason"
                                    else np.int64 if k == "microbatches" else np.float64) for k in METRIC_COLUMNS})
    if table.placed and len(table) > BLOCK_ROWS:
        # placements by pipeline depth, so that a block's stage columns are its rows' stages, rows with a stage
        # split across pools after the others (a block without one skips pool2 / dp2: without any, not gathered)
        dp2 = table.stages.raw("dp2")  # (S, N), a stage row at a time; dp2 >= 0
        split = np.logical_or.reduce(dp2 > 0, axis=0)
        pp, layers = table["pp"], table.stages.raw("layers")
        deep = np.zeros(len(table), dtype=bool)  # rows holding layers past their pp (refused): every stage column
        for i in range(int(pp.min()), len(layers)):
            deep |= (layers[i] > 0) & (pp <= i)
        key = 2 * np.where(deep, len(layers), pp) + split
        order = np.argsort(key.astype(np.int16) if key.max() < 2**15 else key, kind="stable")  # int16: a radix sort
        cuts = np.flatnonzero(np.diff(key[order])) + 1  # blocks of one depth, all with or all without a split
        depths = (key[order[np.r_[0, cuts]]] // 2).tolist()  # (a block's stage columns: to its depth)
        if not split.any():
            table = StrategyTable(table.columns, table.stages.without("pool2", "dp2"))
    # (an MoE model's blocks that the simulator may price: every stage; the others the runs of alike stages)
    view = (lambda model, sub, now: stage_view(model, sub)) if table.placed else moe_block_view
    return run_blocks(table, lambda sub, now: _evaluate_block(model, pa, view(model, sub, now), pipeline,
                                                              simulate_now=now, framework=fw),
                      microbatches, order, cuts, depths)


# Placements (a block of one pipeline depth q, q stage columns): blocks of PLACEMENT_ENTRIES / q rows, at least
# BLOCK_ROWS and at most 4 BLOCK_ROWS (each up to 1.25x of it, even ones per group): fewer blocks amortise the
# per-block work (the configurations, a few thousand a block whatever its rows, and the block's fixed costs);
# pp 8 rows of 32,768, pp 4 of 65,536 (2% faster placements than 24,576 and 32,768, in-process CPU time,
# BENCHMARKS.md "issue 14, session 30").
PLACEMENT_ENTRIES = 8 * 32768


def run_blocks(table, block, microbatches, order=None, cuts=(), depths=None) -> Metrics:
    """The rows of ``table`` through ``block(sub_table, simulate_now)`` in cache-sized blocks of consecutive rows of
    ``order`` (None: of the table), even ones per group between ``cuts`` (``depths``: each group's pipeline depth,
    its blocks' rows from PLACEMENT_ENTRIES; None: BLOCK_ROWS), each block's results written to its rows.
    Pass 1: closed forms only, rows the simulator must price flagged in ``_needs_simulation``;
    pass 2: those rows sorted by (schedule, pp, ``microbatches(sub_table)``, vpp), written back."""
    N = len(table)
    if N <= BLOCK_ROWS:
        out = block(table, True)
        out.pop("_needs_simulation")
        return out
    out = None
    ends = [0, *cuts, N]
    per = ([BLOCK_ROWS] * (len(ends) - 1) if depths is None else
           [min(4 * BLOCK_ROWS, max(BLOCK_ROWS, PLACEMENT_ENTRIES // max(q, 1))) for q in depths])
    starts, widths = zip(*((int(x), q) for a, b, rows, q in zip(ends[:-1], ends[1:], per, depths or per, strict=True)
                           for x in np.linspace(a, b, -(-(b - a) * 4 // (5 * rows)) + 1)[:-1]),  # (<= 1.25x its rows)
                         strict=True)
    for i, e, width in zip(starts, [*starts[1:], N], widths, strict=True):
        part = block(table.take(slice(i, e)) if order is None else table.take(order[i:e], width), False)
        out = out or Metrics({k: np.empty(N, dtype=col.dtype) for k, col in part.items()})
        for k, col in part.items():
            out[k][i:e] = col  # (in ``order``, then gathered back: faster than a scatter per block)
    if order is not None:
        back = np.empty_like(order)
        back[order] = np.arange(N)
        for k, col in list(out.items()):
            out[k] = np.take(col, back)
    need = np.flatnonzero(out.pop("_needs_simulation"))
    if need.size:
        sub = table.take(need)
        order = np.lexsort((sub["vpp"], microbatches(sub), sub["pp"], sub["schedule"]))
        rows = need[order]
        sub = sub.take(order)
        for i in range(0, len(rows), BLOCK_ROWS):
            part = block(sub.take(slice(i, i + BLOCK_ROWS)), True)
            part.pop("_needs_simulation")
            for k, col in part.items():
                out[k][rows[i:i + BLOCK_ROWS]] = col
    return out


def outside_closed_form(sched, p, m, F_b, B_b, W_b):
    """Rows the closed forms do not price and the simulator always does: ZB-V and Hanayo;
    interleaving with micro-batches not a multiple of pp (Megatron-LM's grouping then leaves
    more idle time than (m + (p - 1)/v) X); zero-bubble schedules outside the Zero Bubble
    paper's regime (m >= p and T_W <= min(T_F, T_B) on the bottleneck stage)."""
    zb = (sched == SCHED["zb-h1"]) | (sched == SCHED["zb-h2"])
    return (
        np.isin(sched, [SCHED[x] for x in SIMULATED_SCHEDULES])
        | ((sched == SCHED["interleaved"]) & (m % p != 0))
        | (zb & ((m < p) | (W_b > np.minimum(F_b, B_b))))
    )


def layer_terms(lc, full, sel) -> dict[str, np.ndarray]:
    """Per layer and micro-batch, from one layer's costs ``lc`` and the recompute masks: the stage
    times F (forward, exposed tp and cp comm), B (backward, recompute and its comm), W (weight
    gradients) and the parts reported: compute, recompute, tp and cp comm."""
    f = lc["gemm"] + lc["attn"] + lc["elem"] + lc["overhead"] + lc["cast_f"]  # forward compute
    bx = lc["gemm"] + 2.0 * lc["attn"] + ELEM_BWD_FACTOR * (lc["elem"] + lc["overhead"]) + lc["cast_b"]
    tpf, cpf, cpb = lc["tp_fwd"], lc["cp_fwd"], lc["cp_bwd"]
    re = np.where(full, f, np.where(sel, lc["sel_re"], 0.0))
    sel_tp = np.where(sel, lc["sel_tp"], 0.0)
    out = {"F": f + tpf + cpf, "B": bx + tpf + cpb + re + np.where(full, tpf + cpf, sel_tp), "W": lc["gemm"],
           "compute": f + bx + lc["gemm"], "recompute": re, "tp": 2.0 * tpf + np.where(full, tpf, sel_tp),
           "cp": cpf + cpb + np.where(full, cpf, 0.0)}
    if "ep_fwd" in lc:  # an MoE layer: its all-to-alls forward, backward and again in a full recompute
        epf, epb = lc["ep_fwd"], lc["ep_bwd"]
        out["F"] = out["F"] + epf
        out["B"] = out["B"] + epb + np.where(full, epf, 0.0)
        out["ep"] = epf + epb + np.where(full, epf, 0.0)
    return out


def bottleneck_parts(m, n, first, last, lt, emb_c, emb_tp, head_gemm, head_elem, head_tp) -> dict[str, np.ndarray]:
    """Compute, recompute, tp and cp (and, where ``lt`` has it, ep) time per iteration of the
    bottleneck stage (n layers, first / last: it holds the embedding / the head), from its
    layer_terms ``lt``."""
    out = {"compute": m * (n * lt["compute"] + first * emb_c + last * (3.0 * head_gemm + head_elem)),
           "recompute": m * (n * lt["recompute"]), "tp_comm": m * (n * lt["tp"] + first * emb_tp + last * head_tp),
           "cp_comm": m * (n * lt["cp"])}
    if "ep" in lt:
        out["ep_comm"] = m * (n * lt["ep"])
    return out


def pipeline_step(*, sched, p, m, v, X_sum, X_max, F_b, B_b, W_b, pp_comm, reason, pipeline, simulate_now,
                  stage_inputs):
    """Pipeline time (N,): the closed forms with fill and drain hand-offs ``pp_comm``, then, if
    ``simulate_now``, the simulator for feasible rows outside their domain (all with pipeline=
    "simulate"), whose inputs ``stage_inputs(rows)`` gives as simulate_pipelines takes them.
    Returns pipe, fill, pp_comm, rows still to simulate, None or (rows, shape index, peaks)."""
    fill = pipeline_fill(sched, p, v, X_sum, X_max, F_b, B_b, W_b)
    pipe = m * X_max + fill + pp_comm
    simulated = (pipeline == "simulate") | outside_closed_form(sched, p, m, F_b, B_b, W_b)
    needs = simulated & (reason == 0)
    if not (simulate_now and np.any(needs)):
        return pipe, fill, pp_comm, needs & ~np.bool_(simulate_now), None
    q = np.flatnonzero(needs)
    total, row_shape, peaks = simulate_pipelines(np.stack([sched[q], p[q], m[q], v[q]], axis=1), *stage_inputs(q))
    # The simulator's total includes every hand-off; report as pp comm the fill/drain hand-offs
    # where they are exposed, the rest of the idle time as bubble.
    busy = m[q] * (F_b[q] + B_b[q] + W_b[q])  # (the simulator's stages: F, B, W)
    pipe[q] = total  # pipe, fill and pp_comm: the caller's fresh arrays, written in place
    pp_comm[q] = np.minimum(pp_comm[q], np.maximum(total - busy, 0.0))
    fill[q] = total - busy - pp_comm[q]
    return pipe, fill, pp_comm, np.zeros_like(needs), (q, row_shape, peaks)


def exposed_dp_s(zero, overlap, m, X_max, B_b, W_b, dp_raw, F_b=0.0, fw: Framework | None = None, prec=0,
                 model: Transformer | None = None, pp=1):
    """The data-parallel exchange's exposed time: overlapped (``overlap``) with the bottleneck stage's last backward
    (B + W), or under ZeRO-3 with the whole pipeline (m X_max); under ``fw``'s overlap_param_gather, ZeRO 1-2's weight
    all-gather (its share of dp_exchange_coef's bytes at ``prec``) with the next step's first forward F_b instead.
    ``fw``'s fsdp_unit_edges (``model`` dense, ``pp`` 1, ZeRO 2-3): FSDP's root unit and block 0 (share e of the
    parameters) expose their forward all-gather and reduce-scatter; the rest under F_b and B + W (ZeRO-3: m X_max)."""
    window = np.where(zero == 3, m * X_max, B_b + W_b)
    if fw is not None and fw.fsdp_unit_edges and model is not None and not model.is_moe and model.kind != "mlp":
        n, w, gr = model.num_params(), np.take(fw.weight_gather_bytes, prec), np.take(fw.grad_reduce_bytes, prec)
        e = np.where((pp == 1) & (zero >= 2), (n - (model.layers - 1) * model.layer_params()) / n, 0.0)
        ag, rs = (dp_raw * x / np.where(zero == 3, 2 * w + gr, w + gr) for x in (w, gr))  # ZeRO-3: forward's gather
        rest = np.where(zero == 2, np.maximum((1 - e) * ag - F_b, 0.0) + np.maximum((1 - e) * rs - B_b - W_b, 0.0),
                        np.maximum(dp_raw - e * (ag + rs) - window, 0.0))
        return np.where(overlap, np.where(zero >= 2, e * (ag + rs) + rest, np.maximum(dp_raw - window, 0.0)), dp_raw)
    if fw is None or not fw.overlap_param_gather:
        return np.where(overlap, np.maximum(dp_raw - window, 0.0), dp_raw)
    w, gr, ar = (np.take(x, prec) for x in (fw.weight_gather_bytes, fw.grad_reduce_bytes, fw.all_reduce_then_gather))
    ag = np.where((zero == 1) | (zero == 2), w / (gr * (1 + (ar & (zero == 1))) + w) * dp_raw, 0.0)
    return np.where(overlap, np.maximum(dp_raw - ag - window, 0.0) + np.maximum(ag - F_b, 0.0), dp_raw)


def simulate_pipelines(shape, comp, F, Bk, W, tc):
    """Exact pipeline time (R,) of R rows and the peak micro-batches in flight (row_shape (R,),
    peaks (G, D_max)): stage j of row i holds ``peaks[row_shape[i], j]``. ``shape`` (R, 4):
    schedule, pp, micro-batches, vpp; ``F``, ``Bk``, ``W``, ``tc`` (R, k): the stage times and
    the hand-off on the link after each stage column, the stages 0 .. pp - 1 (zero past pp) or,
    where ``comp`` is set, three representatives (first, interior, last) of stages alike.

    Each distinct input is simulated once, or taken from a per-process cache; shapes with many
    distinct inputs get one simulate() call each, the rest one total_times_mixed walk."""
    from costmodel._pipeline import compile_schedule, simulate, total_times_mixed

    k = F.shape[1]
    inputs = np.concatenate([shape.astype(np.float64), comp[:, None].astype(np.float64), F, Bk, W, tc], axis=1)
    uniq, back = np.unique(inputs, axis=0, return_inverse=True)
    back = back.ravel()
    shapes, gid = np.unique(uniq[:, :4].astype(np.int64), axis=0, return_inverse=True)
    gid = gid.ravel()
    u_p = uniq[:, 1].astype(np.int64)[:, None]
    dev = np.arange(int(u_p.max()))[None, :]
    rep = np.where(dev == 0, 0, np.where(dev == u_p - 1, 2, 1))
    col = np.where(uniq[:, 4:5] > 0, rep, np.minimum(dev, k - 1))  # device -> stage column
    u_tf, u_tb, u_tw, u_tc = (np.where(dev < u_p, np.take_along_axis(uniq[:, 5 + i * k:5 + (i + 1) * k], col, axis=1),
                                       0.0) for i in range(4))  # per device; columns past pp unused
    u_keys = np.ascontiguousarray(uniq).view(np.dtype((np.void, uniq.shape[1] * 8))).ravel()
    cache = _simulation_cache(uniq.shape[1])
    known, cached = cache.lookup(u_keys)
    u_total = cached[:, 0].copy()
    counts = np.bincount(gid[~known], minlength=len(shapes))
    big = counts > _MIXED_MAX_SETS
    for g in np.flatnonzero(big):  # a sweep's many rows of one shape: simulate()'s 2-D walk
        code, pg, mg, vg = (int(x) for x in shapes[g])
        r = np.flatnonzero((gid == g) & ~known)
        res = simulate(SCHEDULES[code], pg, mg, vg, tf=u_tf[r, :pg], tb=u_tb[r, :pg], tw=u_tw[r, :pg], tc=u_tc[r, :pg])
        u_total[r] = res.total_time
    small = ~big[gid] & ~known
    if np.any(small):
        keep = np.flatnonzero(~big)  # shapes that go to the mixed walk, renumbered 0..
        renum = np.full(len(shapes), -1)
        renum[keep] = np.arange(len(keep))
        mixed_keys = [(SCHEDULES[int(c)], int(pg), int(mg), int(vg)) for c, pg, mg, vg in shapes[keep]]
        r = np.flatnonzero(small)
        u_total[r] = total_times_mixed(mixed_keys, renum[gid[r]], u_tf[r], u_tb[r], u_tw[r], u_tc[r])
    cache.add(u_keys[~known], u_total[~known, None])
    peaks = np.zeros((len(shapes), dev.shape[1]))
    for g, (code, pg, mg, vg) in enumerate(shapes):
        peaks[g, :pg] = compile_schedule(SCHEDULES[int(code)], int(pg), int(mg), int(vg)).peak_activations
    return u_total[back], gid[back], peaks


# Distinct parameter sets of one pipeline shape above which it is simulated on its own
# (simulate()'s (ops, sets) walk); at or below, with the other small shapes in one flat walk.
_MIXED_MAX_SETS = 64

# Simulated pipeline times kept per process: key = (schedule, pp, m, vpp, stage times, T_C) as
# raw float64 bytes, value = the time. A cache of a pure function: it changes no result, only
# skips work. Bounded by bytes of keys (a full cache is emptied and starts again).
_CACHE_MAX_BYTES = 32 << 20
_CACHES: dict[int, Memo] = {}


def _simulation_cache(columns: int) -> Memo:
    """The cache for keys of ``columns`` float64 values (one per key width)."""
    cache = _CACHES.get(columns)
    if cache is None or len(cache) * columns * 8 > _CACHE_MAX_BYTES:
        cache = _CACHES[columns] = Memo(width=1)
    return cache


def framework_columns(fw: Framework, p, zero, overlap):
    """The ZeRO stage and overlap the framework prices a row with: ZeRO-2/3 with pp > 1 as
    ZeRO-1 where it shards once per step with a pipeline; overlap fixed where it has one value."""
    if fw.shard_with_pp_once:
        zero = np.where((p > 1) & (zero >= 2), 1, zero)
    if len(fw.overlap_dp) == 1:
        overlap = np.full(np.shape(overlap), fw.overlap_dp[0])
    return zero, overlap


def fp8_input_saving(model: Transformer, T, t, sp) -> tuple[np.ndarray, np.ndarray]:
    """Bytes per layer and micro-batch that a framework keeping its linear layers' inputs in fp8
    (Framework.fp8_saved_inputs) saves against 16 bits, one byte an element: in attention, the
    QKV input (h per token, split by t only under sequence parallelism) and the projection input
    (the query width, split by t); in the dense FFN, the FC1 input (h, as QKV's) and the FC2
    input (f, split by t)."""
    if model.kind == "mlp":
        return np.zeros_like(T), np.zeros_like(T)
    h, sp_div = model.hidden, np.where(sp, t, 1)
    return T * (h / sp_div + model.o_hidden / t), T * (h / sp_div + model.ffn_hidden / t)


def framework_terms(fw: Framework, model: Transformer, terms: dict, t, sp, precision) -> dict:
    """Shape terms under the framework: the activation bytes its kernels do not keep taken out
    (the attention scores where its attention is fused; half of each linear layer's saved input
    where it keeps those in fp8 and the row runs fp8), and what its selective recompute keeps
    (sel_kept), holds while recomputing a layer (sel_work), recomputes (sel_re, seconds per
    layer) and communicates again (sel_tp); the same with a moe_ prefix for an MoE layer, whose
    experts keep their inputs in 16 bits and take the attention-core policy (fp8 expert inputs
    and per-op checkpointing of experts are not modelled). ``t``, ``sp``, ``precision``: the
    columns of the rows ``terms`` were computed for. Eager element-wise code (Framework.eager_elem_bytes)
    adds its bytes to the layer's element-wise time, at the HBM rate that time is priced at; a GQA layer's
    K and V copies (Framework.kv_repeat_bytes) add theirs, at that rate, forward (cast_f) and backward (cast_b).
    PyTorch's ring attention (Framework.ring_attention_bytes, cp > 1) adds its copies so, its collectives as cp_*."""
    repeat = fw.kv_repeat_bytes and model.kind != "mlp" and not model.mla and model.kv_hidden < model.q_hidden
    ring = any(fw.ring_attention_bytes) and model.kind != "mlp" and not model.mla
    if (any(fw.eager_elem_bytes) or repeat or ring) and model.kind != "mlp":
        T, sp_div, h, f = terms["T"], np.where(sp, t, 1), model.hidden, model.ffn_hidden
        fused = ACT_BYTES * (ELEM_TH_PER_LAYER * T * h / sp_div + ELEM_TF_PER_LAYER[model.activation] * T * f / t)
    if ring:  # per element E of the rank's Q (K, V as wide after repeat_kv): copies at the element-wise rate; K, V
        # all-gathered in bf16 behind step 0's attention; fp32 dK, dV passed on behind each next step's, the last bare
        c, E, attn, bw, lat = terms["c"], T * model.q_hidden / t, terms["attn"], terms["cp_bw"], terms["cp_lat"]
        (ff, fs, bf, bs), on, step = fw.ring_attention_bytes, terms["c"] > 1, terms["elem"] / fused  # s a byte
        gather, dkv = (c - 1) * (2.0 * ACT_BYTES * E / bw + lat), 2.0 * 4.0 * E / bw + lat  # (bf16 K, V; fp32 dK, dV)
        terms = {**terms, "cast_f": terms["cast_f"] + np.where(on, step * (ff + fs * (c - 1)) * E, 0.0),
                 "cast_b": terms["cast_b"] + np.where(on, step * (bf + bs * (c - 1)) * E, 0.0),
                 "cp_fwd": np.where(on, np.maximum(gather - attn / c, 0.0), terms["cp_fwd"]),
                 "cp_bwd": np.where(on, np.maximum(gather - 2.0 * attn / c, 0.0)
                                    + (c - 1) * np.maximum(dkv - 2.0 * attn / c, 0.0) + dkv, terms["cp_bwd"])}
    if (any(fw.eager_elem_bytes) or repeat) and model.kind != "mlp":
        eh, eqk, ef = fw.eager_elem_bytes
        extra = eh * T * h / sp_div + eqk * T * (model.q_hidden + model.kv_hidden) / t + ef * T * f / t
        kv = terms["elem"] / fused * (fw.kv_repeat_bytes * T * (model.q_hidden + model.kv_hidden) / t) * repeat
        terms = {**terms, "elem": terms["elem"] * (1.0 + extra / fused), "cast_f": terms["cast_f"] + kv,
                 "cast_b": terms["cast_b"] + kv}
    act, score = terms["act_L"], terms["score_L"]
    moe_act = terms.get("moe_act_L")
    if fw.fused_attention:
        act = act - score
        moe_act = None if moe_act is None else moe_act - score
        score = np.zeros_like(score)
    if fw.fp8_saved_inputs:
        fp8 = precision == PRECISIONS.index("fp8")
        attn_b, ffn_b = fp8_input_saving(model, terms["T"], t, sp)
        act = act - np.where(fp8, attn_b + ffn_b, 0.0)
        moe_act = None if moe_act is None else moe_act - np.where(fp8, attn_b, 0.0)
    zero = np.zeros_like(act)
    if fw.selective == "op" and model.kind != "mlp":
        mms, re_flops, all_flops = op_checkpoint_products(model)
        T, sp_div = terms["T"], np.where(sp, t, 1)
        saved = sum(w / np.where(split, t, 1) for w, split, kept in mms if kept)
        # the block's input, the saved products, the attention output (its kernel's result is
        # saved too) and, with sequence parallelism, the two reduce-scatters' outputs
        kept = ACT_BYTES * T * (model.hidden / sp_div + saved + model.o_hidden / t
                                + np.where(sp & (t > 1), 2.0 * model.hidden / t, 0.0))
        sel_kept = np.minimum(kept, act)
        sel = {"sel_kept": sel_kept, "sel_work": act - sel_kept,
               "sel_re": re_flops / all_flops * (terms["gemm"] + terms["cast_f"]) + terms["elem"] + terms["overhead"],
               "sel_tp": 0.5 * terms["tp_fwd"]}  # the all-gathers run again, the reduce-scatters do not
    elif model.mla:  # its up-projections instead of the core (module docstring, recompute)
        sel = {"sel_kept": act - score - terms["qkv_L"], "sel_work": zero, "sel_re": terms["up"], "sel_tp": zero}
    else:
        sel = {"sel_kept": act - score, "sel_work": zero, "sel_re": terms["attn"] + zero, "sel_tp": zero}
    out = {**terms, "act_L": act, "score_L": score, **sel}
    if moe_act is not None:
        qkv, re = (terms["qkv_L"], terms["up"]) if model.mla else (0.0, terms["attn"] + zero)
        out.update(moe_act_L=moe_act, moe_sel_kept=moe_act - score - qkv, moe_sel_work=zero, moe_sel_re=re,
                   moe_sel_tp=zero)
    return out


def stage_memory(model: Transformer, sh: dict, t, sp, zero, g, n, first, last, full, sel, k, wt, moe=None) -> dict:
    """Bytes per GPU of every stage, the one memory formula of evaluate and of the memory-only
    screen (costmodel._memory): weights, grads, optimizer and activations (N, k), buffers (N,),
    their total per stage (N, k; -inf on the padding columns of rows with fewer stages) and the
    largest stage's parameters per GPU (N,). ``sh``: the per-row shape terms (T, act_L, sel_kept,
    sel_work, emb_act, head_act; moe_act_L, moe_sel_kept, moe_sel_work for an MoE model); ``k``: micro-batches in flight per stage; ``zero`` after the framework's
    columns; ``g`` the replicas gradients are reduced over (dp x cp). ``moe`` (an MoE model): a dict
    of n_moe (N, k) MoE layers per stage, e (ep) and edp (N,) (_moe_stage_memory)."""
    if moe is not None:
        return _moe_stage_memory(model, sh, t, sp, zero, g, n, first, last, full, sel, k, wt, moe)
    col = lambda x: np.asarray(x, dtype=np.float64)[:, None]  # noqa: E731  (N,) -> (N, 1)
    params = stage_params(model, n, first, last, col(t))  # (N, k) per GPU
    params_max = np.max(np.where(wt > 0, params, 0.0), axis=1)
    act_kept, work = activation_bytes(full, sel, col(sh["act_L"]), col(sh["sel_kept"]), col(sh["sel_work"]),
                                      col(sh["T"]), model.hidden,
                                      col(np.where(sp, t, 1)))
    act = k * (n * act_kept + first * col(sh["emb_act"])) + work + last * col(sh["head_act"])
    w_b, g_b, o_b = state_bytes(params, col(zero), col(g))
    buffers = buffer_bytes(sh["T"], model.hidden, t, g, zero, params_max, model.layer_params())
    # (the state as parameters x bytes per parameter, as evaluate sums it)
    total = np.where(wt > 0, params * state_bytes_per_param(col(zero), col(g)) + act + col(buffers), -np.inf)
    return {"weights": w_b, "grads": g_b, "optimizer": o_b, "activations": act, "buffers": buffers,
            "total": total, "params_max": params_max}


def _moe_stage_memory(model: Transformer, sh: dict, t, sp, zero, g, n, first, last, full, sel, k, wt, moe) -> dict:
    """stage_memory of an MoE model (moe_memory on (N, k) stage columns): adds dense_max and
    expert_max, the largest stage's parameters per GPU of each kind (N,)."""
    col = lambda x: np.asarray(x, dtype=np.float64)[:, None]  # noqa: E731  (N,) -> (N, 1)
    on = wt > 0
    acts = layer_activations(model, {key: col(x) for key, x in sh.items()}, full, sel, col(np.where(sp, t, 1)))
    n_d = None if model.moe_layers == model.layers else n - moe["n_moe"]
    out = moe_memory(model, {key: col(sh[key]) for key in MOE_MEMORY_TERMS}, acts, col(t), col(zero), col(g), n_d,
                     moe["n_moe"], first, last, k, col(moe["e"]), col(moe["edp"]), col(moe["u"]),
                     row_max=lambda a: np.max(np.where(on, a, 0.0), axis=1), to_stage=col, n=n)
    buffers = out["buffers"]
    out["buffers"] = buffers[:, 0]
    out["total"] = np.where(on, out["state"] + out["activations"] + buffers, -np.inf)
    return out


# The shape terms moe_memory reads.
MOE_MEMORY_TERMS = ("T", "emb_act", "head_act")


def moe_memory(model: Transformer, sh: dict, acts: dict, t, zero, g, n_d, n_m, first, last, k, e, edp, u, *,
               row_max, to_stage, n, edges=None, first_only: bool = False) -> dict:
    """Memory per GPU of stages of an MoE model, every argument an array of stages ((N, k)
    columns) or one that broadcasts to them: a stage holds n_d dense (None: every layer an MoE layer) and n_m MoE
    layers (``n``: their sum); the MoE layers' routed experts (E / ep per
    GPU, each 1 / etp = u of its width) are sharded by ZeRO over the edp expert-data-parallel ranks,
    everything else as a dense layer's parameters over the g = dp x cp replicas; activations per
    layer type (``acts``: layer_activations); the all-to-all buffers (the routed copies sent and
    received). ``sh``: the shape terms of MOE_MEMORY_TERMS; ``row_max``: a
    stage array to its row's largest (N,); ``to_stage``: a row array (N,) back to the stages.
    Returns state (weights, gradients and optimizer together; state_bytes of the two kinds of
    parameters gives the parts), activations, buffers and the dense and expert parameters per GPU
    (dense_params, expert_params) per stage, and per row params_max, dense_max and expert_max: the
    largest stage's parameters per GPU, of both kinds and each. ``edges`` (plus_edges of an untied model's
    block, with ``sh``'s emb_act and head_act per configuration): the embedding's and
    the head's terms added on the first and last stages only (the same sums); ``first_only``:
    n_d is zero past the first stage row (layer_mix)."""
    all_moe = model.moe_layers == model.layers
    layers_p = n_m * model.moe_layer_dense_params() if all_moe else layer_mix(
        n_d, model.layer_params(), n_m, model.moe_layer_dense_params(), first_only)
    if edges is not None:
        dense_p = edges(layers_p, model.embedding_params(), model.head_params()) / t  # per GPU
    else:
        head_p = model.head_params() + (np.where(first, 0, model.vocab * model.hidden) if model.tied_embeddings
                                        else 0)
        dense_p = (layers_p + first * model.embedding_params() + last * head_p) / t
    if model.mla:  # its down-projections whole on every tensor-parallel rank
        dense_p = dense_p + n * model.tp_replicated_params() * (1 - 1 / t)
    # E / ep experts a layer, each 1 / etp of its parameters: one factor per row, then per stage
    expert_p = n_m * (model.experts * model.expert_params() / (e * u))  # per GPU
    dense_max, expert_max, params_max = row_max(dense_p), row_max(expert_p), row_max(dense_p + expert_p)
    kept_m, work_m = acts["kept_m"], acts["work_m"]
    if all_moe:  # every layer an MoE layer
        kept, work = n_m * kept_m, work_m
    else:
        kept_d, work_d = acts["kept"], acts["work"]
        kept = layer_mix(n_d, kept_d, n_m, kept_m, first_only)
        if first_only:  # (past the first stage: max(0, x) = x, bytes >= 0)
            work = work_m * (n_m > 0)
            work[0] = np.maximum(work_d[0] * (n_d[0] > 0), work[0])
        else:
            work = np.maximum(work_d * (n_d > 0), work_m * (n_m > 0))  # (finite bytes: x 0 or 1, cheaper than where)
    if edges is not None:
        act = edges(k * edges(kept, sh["emb_act"], None) + work, None, sh["head_act"])
    else:
        act = k * (kept + first * sh["emb_act"]) + work + last * sh["head_act"]
    state = dense_p * state_bytes_per_param(zero, g) + expert_p * state_bytes_per_param(zero, edp)
    # ZeRO-3 prefetches two layers: the larger of a dense and an MoE layer per GPU (times t, as
    # buffer_bytes divides by t).
    moe_layer_p = model.moe_layer_dense_params() + (model.experts / e) * model.expert_params() / u * t
    buffers = buffer_bytes(sh["T"], model.hidden, t, np.maximum(g, edp), zero, to_stage(params_max),
                           np.maximum(model.layer_params(), moe_layer_p))
    buffers = buffers + 2.0 * ACT_BYTES * u * routed_copies(model, sh["T"], t) * model.hidden
    return {"state": state, "activations": act,
            "buffers": buffers, "params_max": params_max, "dense_max": dense_max, "expert_max": expert_max,
            "dense_params": dense_p, "expert_params": expert_p}


def pool_link(pa: dict, q, stride, size):
    """group_link of groups of ``size`` ranks at ``stride`` on pools q (pool_arrays ``pa``)."""
    return group_link(stride, size, pa["gpus_per_node_int"][q], pa["intra_Bps"][q], pa["inter_Bps"][q],
                      pa["intra_latency_s"][q], pa["inter_latency_s"][q], pa["link_eff"][q])


# MoE rows: stage times within this relative distance of the slowest count as tied (the first is
# the bottleneck), so that round-off does not pick another stage than the scalar reference does.
# Dense rows keep the plain argmax (their results are unchanged by the MoE work, bit for bit).
TIE_REL = 1e-12


def _first_max(a, tol: bool = False):
    """(N,) index of the first stage row holding its column's maximum of ``a`` (k, N) (``tol``:
    within TIE_REL of it; 0 where none does, NaN): np.argmax over the stages, from the largest k - i over the rows i
    that hold it, in int8 (an argmax over axis 0 costs several times as much)."""
    top = a.max(axis=0)
    hit = a >= top * (1.0 - TIE_REL) if tol else a == top
    k = a.shape[0]
    return (k - np.max(hit * np.arange(k, 0, -1, dtype=np.int8 if k < 128 else np.int64)[:, None], axis=0).astype(
        np.int64)) % k


def plus_edges(ix, first, last):
    """f(a, e_first, e_last) = a + first * e_first[ix] + last * e_last[ix] (None: no such term), the embedding's
    and head's terms of stages in configurations ``ix``: where ``ix`` and ``a`` hold every entry of the masks, added
    on the first and last stages only (the same sums bit for bit: x + 0.0 = x), else through the masks."""
    if np.shape(ix) != np.shape(first):
        return lambda a, *es: sum((m * (e[ix] if np.ndim(e) else e) for m, e in zip((first, last), es, strict=True)
                                   if e is not None), a)
    at = [(i, ix.reshape(-1)[i]) for i in (np.flatnonzero(first), np.flatnonzero(last))]

    def add(a, *es):  # a: a fresh array of the masks' shape
        for (i, ix_i), e in zip(at, es, strict=True):
            if e is not None:
                a.reshape(-1)[i] += e[ix_i] if np.ndim(e) else e
        return a
    return add


def _evaluate_block(model: Transformer, pa: dict, sv: StageView, pipeline: str = "closed_form",
                    simulate_now: bool = True, stages_out: bool = False, framework=None) -> Metrics:
    """One block of rows, stages as (k, N) arrays (StageView; (1, N) where a row's stages share
    a value). Everything that depends only on a stage's configuration (pool, rank order, tp,
    recompute, the shape key of the view and the row's cp, SP, precision, ep, etp) is computed
    once per distinct configuration (U of them: a few dozen to a few hundred per block) and
    gathered back to the stages."""
    fw = framework_preset(framework)
    h, s, L = model.hidden, model.seq_len, model.layers
    r = sv.rows
    p, m, B, c, v = r["pp"], r["m"], r["global_batch"], r["cp"], r["vpp"]
    sched, sp, prec = r["schedule"], r["sequence_parallel"], r["precision"]
    zero, overlap = framework_columns(fw, p, r["zero_stage"], r["overlap_dp"])
    N, P = len(p), pa["num_gpus"].size
    moe = model.is_moe
    all_moe = moe and model.moe_layers == L  # no dense layer: the dense terms are not needed
    col = lambda x: np.asarray(x)[None, :]  # noqa: E731  (N,) -> (1, N)
    j, d, t, rc = sv.j, sv.dp, sv.tp, sv.recompute
    n = sv.layers.astype(np.float64)
    on = sv.w > 0
    every = bool(on.all())  # every column a stage of its row (a block of pipelines alike deep): no masks
    real = every or bool(np.all(sv.comp))  # every column a stage (comp: a weight-0 column repeats one): maxima unmasked
    wt = None if every and not np.any(sv.comp) else sv.w.astype(np.float64)  # None: weights all 1
    weigh = (lambda a: a) if wt is None else (lambda a: wt * a)  # noqa: E731
    first, last = j == 0, j == p - 1
    pool = np.minimum(sv.pool, P - 1)
    e_r, u_r = r["ep"], r["etp"]

    # -- distinct stage configurations: inv (1, N) or (k, N) -> configuration --
    # (MoE: ep and etp as one dense code, so that the key's range stays small: ep's values, up to
    # 64, would otherwise multiply it by 65 and send distinct_rows to np.unique's sort)
    keyed = any(x is sv.dp for x in sv.key)  # dp, micro-batches and batch are parts of a configuration
    ep_key = col(distinct_rows(e_r, u_r)[1]) if moe else None
    # (rows whose framework's bf16 optimizer adds each micro-batch's gradients into fp32: Framework.hp_grad_bytes)
    hp_key = col((zero <= 1) & (prec == PRECISIONS.index("bf16"))) if fw.hp_grad_bytes and not moe else None
    shape_k = [*sv.key, col(c), col(sp), col(prec), *((ep_key,) if moe else ()), *(() if hp_key is None else (hp_key,)),
               sv.order, t]
    keys = [*shape_k, *((col(zero),) if keyed else ()), pool, rc]  # (the shape terms': shape_k, pool; ZeRO: memory)
    E = np.broadcast_shapes(*(x.shape for x in keys))
    if E[0] > 1:  # the values alike on a row's stages first, as one row code (a smaller key)
        per_row = [x[0] for x in keys if x.shape[0] == 1]
        keys = [distinct_rows(*per_row)[1][None, :], *(x for x in keys if x.shape[0] > 1 or x is pool)]
    ip = next(i for i, x in enumerate(keys) if x is pool)  # the pool's key column
    ks = None
    src, inv = distinct_rows(*keys)  # (src: an entry of each configuration)
    if sv.split is not None:  # stages split across two pools: per distinct (configuration, second pool, replicas
        ks, _, pool_ks, dp2_ks = sv.split  # there), a pair (a few thousand), and the pair's configuration on its second
        pool_ks, ia = np.minimum(pool_ks, P - 1), np.take(inv, ks)  # pool, among the block's or past them (one holds
        pairs, inv_p = distinct_rows(ia, pool_ks, dp2_ks)  # no replicas: time, memory and the dp group read dp)
        ia_p, x2, r2 = ia[pairs], pool_ks[pairs], dp2_ks[pairs]
        at_u = lambda x: x.reshape(-1)[src] if x.shape[0] > 1 else x[0][src % N]  # noqa: E731
        rest = distinct_rows(*(at_u(x) for i, x in enumerate(keys) if i != ip))[1]  # each's key less the pool
        np.put(lut := np.full((int(rest.max()) + 1) * P, -1), rest * P + at_u(pool), np.arange(len(src)))
        ib_p = np.take(lut, np.take(rest, ia_p) * P + x2)
        if (new := np.flatnonzero(ib_p < 0)).size:
            first_b, inv_b = distinct_rows(np.take(rest, ia_p[new]), x2[new])
            ib_p[new], src = len(src) + inv_b, np.concatenate([src, ks[pairs[new[first_b]]]])
    src_row = src % N  # (once: U reads row columns at it a dozen times)
    U = lambda x: x.reshape(-1)[src] if np.ndim(x) == 2 and len(x) > 1 else np.ravel(x)[src_row]  # noqa: E731
    full, sel = rc == 2, rc == 1
    pool_u = U(pool)
    if ks is not None and new.size:  # (a configuration first met on a split stage's second pool: that pool)
        pool_u[-len(first_b):] = x2[new[first_b]]
    order_u, t_u, rc_u, c_u, sp_u, prec_u, d_u = (U(x) for x in (sv.order, t, rc, c, sp, prec, d))
    b_u = U(B) / (d_u * U(m)) if sv.b is None else U(sv.b)
    ga_u = d_u * t_u * c_u  # a configuration's GPUs on its pool
    pair = lambda u, _: u  # noqa: E731  (the values per configuration and, past them, per split stage's pair)
    if ks is not None:  # what reads a split stage's replicas on each pool (GPUs, links, peak) per pair, past the
        np.put(inv_q := inv.copy(), ks, len(src) + inv_p)  # configurations (inv_q)
        xa, xb, tc = pool_u[ia_p], pool_u[ib_p], t_u[ia_p] * c_u[ia_p]
        ga_a, ga_b = (d_u[ia_p] - r2) * tc, r2 * tc
        pair = lambda u, v: np.concatenate([u, v])  # noqa: E731
    zero_u = U(zero) if keyed else None
    cfg_bits = np.take(~tp_divides(model, t_u) * np.uint8(2) | (U(B) % (d_u * U(m)) != 0) * np.uint8(8)  # the stage
                       | (~ep_fits(model, U(e_r), d_u * t_u * c_u, U(u_r)) * np.uint8(32) if moe else 0),  # bits per
                       inv) if keyed else None  # configuration (stage_feasibility; np.take: faster than indexing)
    shift = None if ks is None else lambda y: np.take(ga_b * ((xb == y).astype(np.int64) - (xa == y)), inv_p)
    reason, used = stage_feasibility(model, pa, sv, fw, cfg_bits, shift)  # (split stages' GPUs moved: per pair)

    # -- per configuration: GPU, links, one layer and one micro-batch (U,) --
    link = lambda stride, size, q=pool_u: pool_link(pa, q, stride, size)  # noqa: E731
    # Strides: tp-inner = Megatron's (tp, cp, dp); tp-across = (dp, tp, cp) innermost first.
    tp_inner = order_u == 0
    e_u, u_u = (U(e_r), U(u_r)) if moe else (None, None)
    kernel = ATTENTION_KERNELS.index(fw.attention_kernel)
    peak = pa["peak"][pool_u, prec_u]  # a configuration's FLOP/s (for the GPUs' total peak)
    pool_gpu = lambda q: types.SimpleNamespace(**{f: pa[f][q] for f in GPU_FIELDS})  # noqa: E731

    def shape_of(ix):
        """The dense layer's shape terms (shape_terms, before framework_terms) of configurations ix."""
        q, tt, cc, dd, tin, pr = pool_u[ix], t_u[ix], c_u[ix], d_u[ix], tp_inner[ix], prec_u[ix]
        fp8 = pr == PRECISIONS.index("fp8")
        casts = tuple(np.where(fp8, x, 0.0) for x in fw.fp8_cast_bytes) if any(fw.fp8_cast_bytes) else None
        out = shape_terms(model, None, b_u[ix], tt, cc, sp_u[ix], peak[ix], gpu=(gpu := pool_gpu(q)),
                          peak16=pa["peak"][q, np.where(fp8, 0, pr)],  # FP8_IN_16_BIT
                          attn_eff=pa["attn_eff"][q, kernel], casts=casts, tp_link=link(np.where(tin, 1, dd), tt, q),
                          cp_link=link(np.where(tin, tt, dd * tt), cc, q), xent_bytes=fw.xent_bytes)
        if hp_key is not None:  # the bf16 optimizer's fp32 gradient accumulation, in each layer's backward
            hp = hbm_s(fw.hp_grad_bytes * model.layer_params() / tt, gpu)
            out["cast_b"] = out["cast_b"] + np.where(U(hp_key)[ix], hp, 0.0)
        return out

    def moe_of(ix, sh):
        """The MoE layer's shape terms (moe_shape_terms) of configurations ix, ``sh`` their dense ones. The MoE
        layers fold the stage's ranks into etp x ep x edp, etp innermost, whatever the attention's order; the
        all-to-alls split their bytes over the configuration's pool's intra-node link and network (all_to_all_s,
        on the pool as a cluster of arrays)."""
        q = pool_u[ix]
        pool_net = types.SimpleNamespace(gpu=pool_gpu(q), gpus_per_node=pa["gpus_per_node_int"][q],
                                         scaleup_Bps=pa["intra_Bps"][q], scaleout_Bps=pa["inter_Bps"][q],
                                         scaleup_latency_s=pa["intra_latency_s"][q],
                                         scaleout_latency_s=pa["inter_latency_s"][q])
        return moe_shape_terms(model, pool_net, sh, b_u[ix], t_u[ix], c_u[ix], sp_u[ix], peak[ix],
                               (e_u[ix], u_u[ix], fw, prec_u[ix]), link(1, u_u[ix], q))

    # (once per configuration less recompute, ZeRO and a split stage's replicas, which they do not read; an MoE
    # model's dense terms once per configuration less ep and etp too)
    first_s, inv_s = distinct_rows(*(U(x) for x in shape_k), pool_u)
    if moe:
        first_d, inv_d = distinct_rows(*(U(x)[first_s] for x in shape_k if x is not ep_key), pool_u[first_s])
        sh = {key: a[inv_d] for key, a in shape_of(first_s[first_d]).items()}
        sh.update(moe_of(first_s, sh))
    else:
        sh = shape_of(first_s)
    eu = {key: a[inv_s] for key, a in framework_terms(fw, model, sh, t_u[first_s], sp_u[first_s],
                                                      prec_u[first_s]).items()}
    full_u, sel_u = rc_u == 2, rc_u == 1
    lt = None if all_moe else layer_terms({k: eu[k] for k in LAYER_INPUTS}, full_u, sel_u)  # (U,) per layer
    lt_m = layer_terms(moe_layer_inputs(eu), full_u, sel_u) if moe else None  # (U,) per MoE layer
    acts = layer_activations(model, eu, full_u, sel_u, np.where(sp_u, t_u, 1))  # (U,) activation bytes per layer
    emb_f, emb_b = 0.5 * eu["emb_c"] + eu["emb_tp"], 0.5 * eu["emb_c"]
    head_fb = eu["head_gemm"] + 0.5 * eu["head_elem"] + 0.5 * eu["head_tp"]
    if moe:  # MoE layers of each stage, layers [lo, lo + n)
        n_m = n if all_moe else moe_layers_in(model, sv.lo, sv.layers)
        n_d = n - n_m
        # (the dense layers all on the first stage row of (k, N) stages: layer_mix adds them there only)
        dense_first = not all_moe and n_d.shape[0] > 1 and np.shape(n_m) == n_d.shape and not n_d[1:].any()

    edge_of = {"F": (emb_f, head_fb), "B": (emb_b, head_fb), "W": (None, eu["head_gemm"])}

    def times(ix, nn, nd, nm, edges, parts=("F", "B", "W")):
        """Forward, backward, weight-gradient time per micro-batch of stages in configurations ix, one array per
        part; a part may be a tuple of them, summed (the terms per configuration, then the stages')."""
        out = []
        for xs in (x if isinstance(x, tuple) else (x,) for x in parts):
            per_d, per_m = (None if q is None else functools.reduce(np.add, (q[y] for y in xs)) for q in (lt, lt_m))
            if not moe or all_moe:
                a = nn * np.take(per_d if per_m is None else per_m, ix)
            else:  # the stage's dense and MoE layers (the stages' own: on the first row only where dense_first)
                fo = dense_first and nd is n_d
                a = layer_mix(nd, np.take(per_d, ix[:1] if fo else ix), nm, np.take(per_m, ix), fo)
            emb = [edge_of[y][0] for y in xs if edge_of[y][0] is not None]
            out.append(edges(a, functools.reduce(np.add, emb) if emb else None,
                             functools.reduce(np.add, (edge_of[y][1] for y in xs))))
        return out

    # -- stages (k, N) --
    inv_t = inv  # the configuration that sets each stage's time
    if ks is not None and ks.size:  # synchronous data parallelism: a split stage runs at its slower pool's replica,
        # B where each of B's terms is at least A's (and one larger), A where A's are, else the stage's sums compared
        side = np.full(len(ia_p), 2)  # per pair: 0 A, 1 B, 2 compared stage by stage
        if not moe:
            ta, tb = (np.stack([x[i] for x in (lt["F"], lt["B"], lt["W"], emb_f, emb_b, head_fb, eu["head_gemm"])])
                      for i in (ia_p, ib_p))
            side = np.where((ta >= tb).all(axis=0), 0, np.where((tb >= ta).all(axis=0), 1, side))
        tgt = np.take(np.where(side == 1, ib_p, ia_p), inv_p)  # each split stage's configuration that sets its time
        if np.any(side == 2) and (mix := np.flatnonzero(np.take(side, inv_p) == 2)).size:
            sub = lambda a: np.broadcast_to(a, inv.shape).reshape(-1)[ks[mix]]  # noqa: E731
            a_b = (ia[mix], ib_p[inv_p[mix]])  # (both pools' configurations of these stages)
            xs = (sum(times(x, sub(n), *((sub(n_d), sub(n_m)) if moe else (None, None)),
                            plus_edges(x, sub(first), sub(last)))) for x in a_b)
            tgt[mix] = np.where(next(xs) < next(xs), *a_b[::-1])
        # (in place: what reads inv after this, memory and the hand-off bytes, is alike on both pools; an MoE model's
        # ep links read pool A's)
        np.put(inv_t := inv.copy() if moe else inv, ks, tgt)
    edges = plus_edges(inv_t, first, last)
    stage_fbw = lambda: times(inv_t, n, *((n_d, n_m) if moe else (None, None)), edges)  # noqa: E731
    if moe and not stages_out and not (ks is not None and ks.size):
        # an MoE row's F + B + W per stage in one sum (F, B and W apart only where the simulator takes them)
        (X,), F = times(inv_t, n, n_d, n_m, edges, parts=(("F", "B", "W"),)), None
    else:
        F, Bk, W = stage_fbw()
    if F is not None:
        X = F + Bk + W

    # -- hand-offs: the link after each stage (the last one's to the first) --
    share = ACT_BYTES * eu["T"] * h / t_u  # bytes each GPU of a stage sends or receives per hand-off

    p8 = pool.astype(np.int8) if P <= 6 else pool  # (int8 where P <= 6: the case arithmetic on a quarter of the bytes)
    spills = sum((used[:, q] > pa["gpus_per_node_int"][q]).astype(p8.dtype) << q for q in range(P))  # (N,): bit q,
    spill_on = lambda x: (spills >> x) & 1  # noqa: E731  (the row's GPUs on pool q span more than a node; on pool x)

    def hop_s(x, y, ragged, nbytes, spill):
        """Hand-off time from a stage's GPUs on pool x to the next stage's on pool y: the
        inter-pool link, or inside x its intra-node link if the row's GPUs on x fit one node (not
        ``spill``), else the network (or the slower of both when the stage's GPUs are not a whole
        number of nodes: ``ragged``)."""
        kcase = np.asarray((x * P + y) * 3 + spill * (np.int8(1) + ragged), dtype=np.intp)
        return nbytes / np.take(pa["hop_bw"], kcase) + np.take(pa["hop_lat"], kcase)

    ragged = lambda x, block: block % pa["gpus_per_node_int"][x] != 0  # noqa: E731
    rag_u = ragged(pool_u, ga_u)  # the stage's GPUs on its pool: a configuration's (a split stage's: on each pool)
    rag = np.take(pair(rag_u, ragged(xa, ga_a)), inv_q) if ks is not None else np.take(rag_u, inv) if keyed else (
        ragged(pool, d * t * c))
    spill = spill_on(p8)
    if E[0] == 1:  # one configuration per row: every link alike
        T_C = hop_s(p8, p8, rag, np.take(share, inv), spill)
    else:
        last_flat = np.where(sv.comp, X.shape[0] - 1, p - 1) * N + np.arange(N)  # each row's last stage

        def after(a):  # the next stage's entry (the last stage's: the first's; padding: any)
            a = np.broadcast_to(a, X.shape)
            out = np.concatenate([a[1:], a[:1]])
            out.reshape(-1)[last_flat] = a[0]
            return out

        hand = np.maximum(sh := np.take(share, inv), after(sh))  # (the next stage's: shifted, not gathered again)
        T_C = hop_s(p8, after(p8), rag, hand, spill)
        if ks is not None and ks.size:  # second pools' replicas hand off to each other (HetPipe): each stage's second
            # pool (its pool if not split) to the next stage's, the slower of both pairings
            np.put(pool_b := p8.copy(), ks, pool_ks)
            T_C = np.maximum(T_C, hop_s(pool_b, after(pool_b), np.take(pair(rag_u, ragged(xb, ga_b)), inv_q), hand,
                                        spill_on(pool_b)))
    if np.any(p <= 1):  # no hand-off without a pipeline
        T_C = np.where(p > 1, T_C, 0.0)
    inner = on & ~last  # the p - 1 forward boundaries
    if T_C.shape[0] == 1:
        pp_comm = 2.0 * (p - 1) * T_C[0]
    else:
        pp_comm = 2.0 * np.sum(np.where(inner, weigh(T_C), 0.0), axis=0)

    # -- pipeline: bottleneck stage, fill (closed forms, module docstring), then the simulator --
    # (MoE rows: the first stage within TIE_REL of the slowest, as the scalar reference picks it)
    bot_flat = _first_max(X if real else np.where(on, X, -np.inf), tol=moe) * N + np.arange(N)

    at = lambda a: a[0] if len(a) == 1 else np.take(a, bot_flat)  # noqa: E731  (the bottleneck stage's entry)
    ub, first_b, last_b = at(inv_t), at(first), at(last)  # its configuration (a split stage's slower pool's)
    F_b, B_b, W_b = times(ub, at(n), *((at(n_d), at(n_m)) if moe else (None, None)), plus_edges(ub, first_b, last_b))
    # (its F, B, W and X priced again on (N,): fewer passes than gathering them; an MoE row's X summed at once, its
    # bottleneck's gathered, so that the fill (X_sum - X_max) of a one-stage pipeline is 0)
    X_max = F_b + B_b + W_b if F is not None else at(X)

    def stage_inputs(q):  # the simulated rows' stage columns (R, k): 3 representatives or the stages to pp
        kk = X.shape[0] if np.all(sv.comp[q]) else int(p[q].max())
        tc = np.where(j[:kk, q] < p[q], np.broadcast_to(T_C, X.shape)[:kk, q], 0.0)
        fbw = stage_fbw() if F is None else (F, Bk, W)
        return sv.comp[q], *(a[:kk, q].T for a in fbw), tc.T

    pipe, fill, pp_comm, needs_simulation, sim = pipeline_step(
        sched=sched, p=p, m=m, v=v, X_sum=np.sum(weigh(X), axis=0), X_max=X_max, F_b=F_b, B_b=B_b, W_b=W_b,
        pp_comm=pp_comm, reason=reason, pipeline=pipeline, simulate_now=simulate_now, stage_inputs=stage_inputs)
    k = in_flight(sched, p, m, v, j)
    if sim is not None:
        q, row_shape, peaks = sim
        k[:, q] = peaks[row_shape[None, :], np.minimum(j[:, q], p[q] - 1)]

    # -- memory per GPU, per stage, against its pool's HBM --
    g = d * c  # gradients are reduced over dp x cp (Megatron-LM)
    on_f = None if every else on.astype(np.float64)  # (once: a product with a bool mask casts it each time)
    row_max = lambda a: np.max(a if real else a * on_f, axis=0)  # noqa: E731  (a >= 0)
    hbm_rate = pa["hbm_Bps"] * pa["hbm_eff"]  # a split stage's memory fits the smaller HBM, its optimizer the slower

    def per_stage(x):  # a pool attribute x (P,) per stage, the smaller of both pools' on split stages ((1, 1): alike)
        if np.all(x == x[0]):
            return x[:1, None]
        if ks is None:
            return np.take(x, pool)
        return np.take(pair(x[pool_u], np.minimum(x[xa], x[xb])), inv_q)
    hbm = per_stage(pa["hbm_bytes"])
    if moe:
        edp = np.maximum(g * t // (e_r * u_r), 1)
        # (np.take: a cheaper gather than fancy indexing)
        at_edges = not model.tied_embeddings and np.shape(n_m) == np.shape(first)
        rows_T = sv.b is not None and np.shape(sv.b)[0] == 1  # (T per row where a row's stages share the micro-batch)
        edge_acts = {x: eu[x] if at_edges else np.take(eu[x], inv) for x in ("emb_act", "head_act")}
        mem = moe_memory(model, {"T": np.take(eu["T"], inv[:1] if rows_T else inv), **edge_acts},
                         {x: np.take(a, inv) for x, a in acts.items()},
                         t.astype(np.float64), zero, g, None if all_moe else n_d, n_m, first, last, k, e_r, edp, u_r,
                         row_max=row_max, to_stage=lambda a: a, edges=edges if at_edges else None,
                         first_only=dense_first, n=n)
        params, params_max = mem["dense_params"], mem["params_max"]
    else:
        params = stage_params(model, n, first, last, t, None if np.any(p == 1) else edges)  # (k, N) per GPU
        params_max = row_max(params)
        kept, work = (np.take(acts[x], inv) for x in ("kept", "work"))  # (U,) per configuration, to stages
        mem = {"activations": edges(k * edges(n * kept, eu["emb_act"], None) + work, None, eu["head_act"])}
        if keyed:  # per configuration, then each stage's
            state = params * np.take(state_bytes_per_param(zero_u, d_u * c_u), inv)
            mem["buffers"] = buffer_bytes(eu["T"], h, t_u, d_u * c_u, zero_u, params_max, model.layer_params(),
                                          stage_of=inv)
        else:  # per row
            state = params * state_bytes_per_param(zero, g)
            mem["buffers"] = buffer_bytes(eu["T"][inv], h, t, g, zero, params_max, model.layer_params())
    if moe:
        state = mem["state"]
    tot = state + mem["activations"] + mem["buffers"]
    tot = tot if real else np.where(on, tot, -np.inf)
    # the stage closest to its HBM (the largest where every stage has the same HBM, also an infinite one)
    worst_flat = _first_max(tot if hbm.shape[0] == 1 else tot / hbm) * N + np.arange(N)

    atm = lambda a: a[0] if len(a) == 1 else np.take(a, worst_flat)  # noqa: E731  (the worst-memory stage's entry)
    mem_total = atm(tot)
    # the worst stage's state by part
    worst_state = state_bytes(atm(params), zero, atm(g))
    if moe:  # and the routed experts', sharded over edp
        worst_state = tuple(a + x for a, x in zip(worst_state, state_bytes(atm(mem["expert_params"]), zero, atm(edp)),
                                                  strict=True))
    reason = np.where((reason == 0) & (mem_total > atm(hbm)), REASON["out_of_memory"], reason).astype(np.int8)
    feasible = reason == 0

    # -- data-parallel gradient exchange and the optimizer: the slowest stage's --
    if keyed:  # dp is part of a configuration: its links per configuration
        stage_link = lambda stride, size: link(stride(d_u, t_u), size(d_u, t_u))  # noqa: E731
        back = lambda a: np.take(a, inv)  # noqa: E731
        tp_in, c_, z_, m_, g_ = order_u == 0, c_u, zero_u, U(m), d_u * c_u
        eu_x = e_u * u_u if moe else None
    else:
        back = lambda a: a  # noqa: E731
        z_, m_, g_ = zero, m, g
        stage_link = lambda stride, size: pool_link(pa, pool, stride(d, t), size(d, t))  # noqa: E731
        tp_in, c_, eu_x = sv.order == 0, c, e_r * u_r
    # the dp x cp group: stride t (tp-inner); dp-innermost with cp > 1 spans the whole block
    dp_stride = lambda d_, t_: np.where(tp_in, t_, 1)  # noqa: E731
    dp_size = lambda d_, t_: np.where(tp_in | (c_ == 1), d_ * c_, d_ * c_ * t_)  # noqa: E731
    dbw, dlat = stage_link(dp_stride, dp_size)
    coef, prec_c = (z_, m_, g_, dbw, dlat), prec_u if keyed else prec
    if ks is not None:  # a dp group spanning two pools: its ring crosses the inter-pool link, so it runs at the
        # slowest tier it crosses: each pool's part of the group (its own stride and size, as above: the replicas on
        # its pool) and the link between the pools; per pair
        tp_p, c_p, t_p = tp_in[ia_p], c_[ia_p], t_u[ia_p]
        part = lambda r, q: pool_link(pa, q, np.where(tp_p, t_p, 1),  # noqa: E731
                                      np.where(tp_p | (c_p == 1), r * c_p, r * c_p * t_p))
        (bw_a, lat_a), (bw_b, lat_b) = part(d_u[ia_p] - r2, xa), part(r2, xb)
        bw_x = pa["link_Bps"][xa, xb] * np.minimum(pa["link_eff"][xa], pa["link_eff"][xb])
        coef = (*(pair(x, x[ia_p]) for x in coef[:3]), pair(dbw, np.minimum(np.minimum(bw_a, bw_b), bw_x)),
                pair(dlat, np.maximum(np.maximum(lat_a, lat_b), pa["link_latency_s"][xa, xb])))
        dbw, dlat, back, prec_c = coef[3], coef[4], lambda a: np.take(a, inv_q), pair(prec_u, prec_u[ia_p])
    # the exchange as a x params + b, a and b per configuration (or row) and then each stage's
    dp_a, dp_b = (back(x) for x in dp_exchange_coef(*coef, fw=fw, prec=prec_c))
    alike = dp_a.shape[0] == 1 and hbm.shape[0] == 1  # every stage's exchange on one link: the largest's is slowest
    hbm_Bps = per_stage(hbm_rate) if moe or alike or not keyed else None  # (else per configuration)
    if moe or alike:  # the links per stage (the other dense rows take dp_a and dp_b)
        dbw, dlat = back(dbw), back(dlat)
    shard = None if hbm_Bps is None else np.where(zero >= 1, g, 1)
    if moe:  # the slowest dense exchange (dp x cp) and the slowest expert one (edp), each with its optimizer
        # ep etp apart, spanning the stage's ranks
        if keyed:
            ep_bw, ep_lat = (x[inv] for x in stage_link(lambda d_, t_: eu_x, lambda d_, t_: d_ * c_ * t_ / eu_x))
        else:  # group_link once per distinct (ep etp, ranks, pool), a few dozen in a block, gathered back
            cols = np.broadcast_arrays(eu_x, d * c * t, pool)
            first_e, inv_e = distinct_rows(*(a.reshape(-1) for a in cols))
            x, r, q = (a.reshape(-1)[first_e] for a in cols)
            ep_bw, ep_lat = (a[inv_e].reshape(cols[0].shape) for a in pool_link(pa, q, x, r / x))
    if moe and alike and ep_bw.shape[0] == 1 and not stages_out:
        # every stage's exchanges on the same links: the largest stage's (of each kind) is the slowest
        # (the exchange and the optimizer grow with the parameters: as row_max of the per-stage times)
        dp_raw = (dp_a[0] * mem["dense_max"] + dp_b[0]
                  + dp_exchange_s(zero, m, mem["expert_max"], edp[0], ep_bw[0], ep_lat[0], fw=fw, prec=prec))
        opt_s = (ADAM_BYTES_TOUCHED * mem["dense_max"] / shard[0] / hbm_Bps[0]
                 + ADAM_BYTES_TOUCHED * mem["expert_max"] / np.where(zero >= 1, edp[0], 1) / hbm_Bps[0])
    elif moe:
        dp_st = dp_a * params + dp_b
        ep_st = dp_exchange_s(zero, m, mem["expert_params"], edp, ep_bw, ep_lat, fw=fw, prec=prec)
        dp_raw = row_max(dp_st) + row_max(ep_st)
        dp_st = dp_st + ep_st
        opt_s = (row_max(ADAM_BYTES_TOUCHED * params / shard / hbm_Bps)
                 + row_max(ADAM_BYTES_TOUCHED * mem["expert_params"] / np.where(zero >= 1, edp, 1) / hbm_Bps))
    elif alike and not stages_out:
        dp_raw = dp_a[0] * params_max + dp_b[0]
        opt_s = ADAM_BYTES_TOUCHED * params_max / shard[0] / hbm_Bps[0]
    else:
        dp_st = dp_a * params + dp_b
        dp_raw = row_max(dp_st)
        if keyed:  # per configuration; a split stage's at the slower HBM of both pools
            shard = np.where(zero_u >= 1, g_, 1)
            opt_u = back(pair(ADAM_BYTES_TOUCHED / shard / hbm_rate[pool_u], ks is not None and (
                ADAM_BYTES_TOUCHED / shard[ia_p] / np.minimum(hbm_rate[xa], hbm_rate[xb]))))
        opt_s = row_max(params * (opt_u if keyed else ADAM_BYTES_TOUCHED / shard / hbm_Bps))
    dp_exposed = exposed_dp_s(zero, overlap, m, X_max, B_b, W_b, dp_raw, F_b=F_b, fw=fw, prec=prec, model=model, pp=p)
    step = pipe + dp_exposed + opt_s

    # -- the bottleneck stage's time parts; throughput and utilisation --
    if moe:  # the bottleneck stage's layers summed over both kinds
        n_b, lt_b = moe_stage_terms(at(n), at(n_m),
                                    None if all_moe else {x: np.take(lt[x], ub) for x in MOE_PART_KEYS[:4]},
                                    {x: np.take(lt_m[x], ub) for x in MOE_PART_KEYS})
    else:
        n_b, lt_b = at(n), {x: lt[x][ub] for x in ("compute", "recompute", "tp", "cp")}
    parts = bottleneck_parts(m, n_b, first_b, last_b, lt_b, *(eu[x][ub] for x in (
        "emb_c", "emb_tp", "head_gemm", "head_elem", "head_tp")))
    flops_model = model.model_flops_per_sample() * B
    re_tok = recompute_flops_per_token(model, full, sel, fw)
    if moe:
        re_moe = recompute_flops_per_token(model, full, sel, fw, moe_layer=True)
        if full.shape[0] == 1:  # one recompute choice a row: hfu reads this on feasible rows, holding every layer
            M = model.moe_layers
            re_layers = (L - M) * re_tok[0] + M * re_moe[0]
        else:
            re_layers = np.sum(weigh(n * re_moe if all_moe else n_d * re_tok + n_m * re_moe), axis=0)
        flops_hw = flops_model + re_layers * s * B
    else:
        flops_hw = flops_model + np.sum(weigh(n) * re_tok, axis=0) * s * B
    if (inv.shape[0] == 1 or not keyed) and not (ks is not None and ks.size):  # the stages' GPUs x their peak
        ga, peak_e = (ga_u[inv], peak[inv]) if keyed else (d * t * c, pa["peak"][pool, prec])
        peak_total = ((np.sum(sv.w, axis=0) * ga[0]) * peak_e[0] if ga.shape[0] == 1 and peak_e.shape[0] == 1
                      else np.sum(weigh(ga * peak_e), axis=0))
    else:  # per configuration, the split stages' second pools too
        gp = pair(ga_u * peak, ks is not None and ga_a * peak[ia_p] + ga_b * peak[ib_p])
        peak_total = np.sum(weigh(np.take(gp, inv if ks is None else inv_q)), axis=0)
    extra = {}
    if stages_out:  # (N, k): a row per strategy, as people read them
        pool2, dp2 = np.broadcast_to(pool, X.shape).copy(), np.zeros(X.shape, dtype=np.int64)
        if ks is not None:
            np.put(pool2, ks, pool_ks), np.put(dp2, ks, dp2_ks)
        full_shape = lambda a, fill=0: np.ascontiguousarray(  # noqa: E731
            np.where(on, np.broadcast_to(a, X.shape), fill).T)
        extra = {"_stage_pool": full_shape(pool, -1), "_stage_dp": full_shape(d, 1), "_stage_tp": full_shape(t, 1),
                 "_stage_layers": full_shape(n),
                 "_stage_micro_batch": full_shape(B / sv.batch_div if sv.b is None else sv.b, 0.0),
                 "_stage_pool2": full_shape(pool2, -1), "_stage_dp2": full_shape(dp2),
                 "_stage_forward_s": full_shape(F), "_stage_backward_s": full_shape(Bk),
                 "_stage_weight_grad_s": full_shape(W), "_stage_time_s": full_shape(m * X),
                 "_stage_handoff_s": full_shape(np.where(inner, T_C, 0.0), 0.0),
                 "_stage_dp_comm_s": full_shape(dp_st, 0.0), "_stage_in_flight": full_shape(k, 0.0),
                 "_stage_mem_bytes": full_shape(tot, 0.0), "_stage_hbm_bytes": full_shape(hbm, 0.0),
                 "_stage_active": np.ascontiguousarray(on.T)}
    extra["_needs_simulation"] = needs_simulation
    return assemble_metrics(
        feasible=feasible, reason=reason, step=step, pipe=pipe, fill=fill, m=m, batch=B, seq_len=s,
        flops_model=flops_model, flops_hw=flops_hw, peak_total=peak_total, **parts, pp_comm=pp_comm,
        dp_comm=dp_exposed, optimizer=opt_s, mem_weights=worst_state[0], mem_grads=worst_state[1],
        mem_optimizer=worst_state[2], mem_activations=atm(mem["activations"]),
        mem_buffers=atm(mem["buffers"]), mem_total=mem_total, extra=extra)


def stage_breakdown(model: Transformer, cluster, table, framework=None) -> dict[str, np.ndarray]:
    """Per pipeline stage, for a few rows (people's view, not the hot path): (N, S) arrays of pool
    index, dp, tp, layers, micro-batch per replica, F / B / W time per micro-batch, busy time per
    iteration (m x (F + B + W)), hand-off to the next stage, data-parallel exchange, micro-batches
    in flight at the peak (from the simulator), memory per GPU and its pool's HBM, and ``active``
    (the stage exists). Uniform rows without placements are expanded to every stage."""
    if not table.placed and table.stage_layers is None:
        S = int(table["pp"].max())
        layers = np.where(np.arange(S)[None, :] < table["pp"][:, None], (model.layers // table["pp"])[:, None], 0)
        table = StrategyTable(table.columns, {**table.stages, "layers": layers})
    out = _evaluate_block(model, pool_arrays(cluster), stage_view(model, table), "simulate", simulate_now=True,
                          stages_out=True, framework=framework)
    return {k[len("_stage_"):]: v for k, v in out.items() if k.startswith("_stage_")}


def stage_rows(model: Transformer, cluster, table, i: int = 0, framework=None) -> list[dict]:
    """Row i's stages as a list of plain dicts (pool name, dp, tp, layers, time_s, mem_bytes,
    ...): what `plansweep evaluate` and `show` print per stage."""
    from costmodel._hetero_cluster import as_hetero

    hc = as_hetero(cluster)
    st = stage_breakdown(model, hc, table.take(slice(i, i + 1)), framework)
    names = [p.name for p in hc.pools]
    rows = []
    for j in range(int(st["active"][0].sum())):
        p1, p2, d2 = int(st["pool"][0, j]), int(st["pool2"][0, j]), int(st["dp2"][0, j])
        split = {"pool2": names[p2], "gpu2": hc.pools[p2].gpu.name, "dp2": d2} if d2 else {}
        rows.append({"stage": j, "pool": names[p1], "gpu": hc.pools[p1].gpu.name, **split,
                     "dp": int(st["dp"][0, j]), "tp": int(st["tp"][0, j]), "layers": int(st["layers"][0, j]),
                     **{k: float(st[k][0, j]) for k in ("micro_batch", "forward_s", "backward_s", "weight_grad_s",
                                                        "time_s", "handoff_s", "dp_comm_s", "in_flight",
                                                        "mem_bytes", "hbm_bytes")}})
    return rows


def format_stage_rows(rows: list[dict]) -> str:
    """The per-stage table as text (used by `plansweep evaluate` and `show`). A stage split
    across two pools shows both pools and dp as "replicas on the first + on the second"."""
    lines = [f"{'stage':>5} {'pool':<12} {'dp':>5} {'tp':>3} {'layers':>6} {'mb':>6} {'F ms':>9} {'B ms':>9} "
             f"{'W ms':>9} {'busy s':>8} {'hand-off ms':>11} {'dp s':>8} {'mem GB':>7} {'of GB':>6}"]
    for r in rows:
        pool, dp = r["pool"], str(r["dp"])
        if r.get("dp2"):
            pool, dp = f"{r['pool']}+{r['pool2']}", f"{r['dp'] - r['dp2']}+{r['dp2']}"
        lines.append(f"{r['stage']:>5} {pool:<12} {dp:>5} {r['tp']:>3} {r['layers']:>6} "
                     f"{r['micro_batch']:>6.3g} {1e3 * r['forward_s']:>9.2f} {1e3 * r['backward_s']:>9.2f} "
                     f"{1e3 * r['weight_grad_s']:>9.2f} {r['time_s']:>8.3f} {1e3 * r['handoff_s']:>11.3f} "
                     f"{r['dp_comm_s']:>8.3f} {r['mem_bytes'] / 1e9:>7.1f} {r['hbm_bytes'] / 1e9:>6.0f}")
    return "\n".join(lines)
