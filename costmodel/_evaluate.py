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
    recompute  = full: the whole forward again; selective: the attention core again.
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

import numpy as np

from costmodel._frameworks import Framework, framework_preset
from costmodel._hardware import PRECISIONS, Cluster
from costmodel._sorted_memo import Memo
from costmodel._strategy import SCHEDULES, StrategyTable
from costmodel._workloads import Transformer

# ---- named constants --------------------------------------------------------------------
# Activations and their gradients are kept in 16-bit floats (also under fp8 compute, where
# Transformer Engine casts to fp8 only inside the GEMMs).
ACT_BYTES = 2
# Per parameter, Megatron-LM mixed precision with Adam (Megatron's
# theoretical_memory_usage: 18 bytes/param = 2 + 4 + 12; Rajbhandari et al. 2020 Sec. 3.1).
WEIGHT_BYTES = 2  # bf16/fp16 working copy
GRAD_BYTES = 4  # fp32 main gradient
OPTIM_BYTES = 12  # fp32 master weight + Adam first and second moments
# Bytes on the wire per gradient element in the data-parallel reduction (reduced in the
# training dtype, Megatron-LM's DDP default grad_reduce_in_fp32=False).
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

REASONS = (
    "ok",
    "gpus_exceed_cluster",
    "tp_not_divide_heads",
    "pp_not_divide_layers",
    "cp_not_divide_seq",
    "batch_not_divide",
    "schedule_invalid",
    "zero_incompatible_pp",
    "framework_unsupported",
    "out_of_memory",
    "ep_invalid",  # appended: the codes before it keep their numbers (checked after tp, see reason_codes)
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
    "mem_activations_bytes", "mem_buffers_bytes", "mem_total_bytes", "microbatches",
    "feasible", "reason",
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
    util = gpu.gemm_eff_max * sat(M, gpu.gemm_half_dim) * sat(N, gpu.gemm_half_dim) * sat(
        K, gpu.gemm_half_dim
    )
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
                tp_link=None, cp_link=None):
    """Per-micro-batch times of one layer on one GPU: a dict of (N,) arrays.

    The heterogeneous evaluator passes ``gpu`` (an object whose efficiency and peak fields are
    (N, S) arrays, one GPU type per stage) and the (bandwidth, latency) of the tp and cp
    groups' links; every input then broadcasts to (N, S)."""
    gpu = cluster.gpu if gpu is None else gpu
    h, f, hk, a, s = model.hidden, model.ffn_hidden, model.kv_hidden, model.heads, model.seq_len
    sc = s / c
    T = b * sc  # tokens on this rank
    tp_bw, tp_lat = tier(t, cluster, gpu) if tp_link is None else tp_link
    cp_bw, cp_lat = tier(t * c, cluster, gpu) if cp_link is None else cp_link
    split = np.where(sp, t, 1)  # element-wise work is split across tp only under SP
    if model.kind == "mlp":
        gemm = gemm_s(T, h / t, h, peak, gpu)
        attn = np.zeros_like(gemm)
        elem = hbm_s(ACT_BYTES * 2.0 * T * h / t, gpu)
        # Megatron-style pairs (column- then row-parallel): one all-reduce per two layers.
        tp_fwd = 0.5 * all_reduce_s(ACT_BYTES * T * h, t, tp_bw, tp_lat)
        cp_fwd = cp_bwd = np.zeros_like(gemm)
        overhead = gpu.kernel_overhead_s * 0.5
    else:
        dh = model.head_size if model.head_dim is not None else h / a
        q = model.q_hidden  # width of Q and of the attention output: h unless head_dim is set
        mats = model.mlp_matrices
        gemm = (
            attention_gemm_s(model, T, t, peak, gpu)
            + gemm_s(T, (mats - 1) * f / t, h, peak, gpu)  # MLP up (and gate)
            + gemm_s(T, h, f / t, peak, gpu)  # MLP down
        )
        # Attention core, fused (flash) kernel: QK^T and AV, 4 b sc s h / t FLOPs, no s^2
        # HBM traffic; utilisation of a (sc x dh) @ (dh x s) product at the kernel's tile
        # edge (ATTN_HALF_DIM), not the GPU's fitted GEMM constant.
        util = gpu.gemm_eff_max * sat(sc, ATTN_HALF_DIM) * sat(s, ATTN_HALF_DIM) * sat(dh, ATTN_HALF_DIM)
        attn = 4.0 * b * sc * s * q / t / (peak * util)
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
        "elem": elem,
        "overhead": overhead + np.zeros_like(gemm),
        "tp_fwd": tp_fwd,
        "cp_fwd": cp_fwd,
        "cp_bwd": cp_bwd,
        "tp_bw": tp_bw,
        "tp_lat": tp_lat,
        "T": T,
    }


def attention_gemm_s(model: Transformer, T, t, peak, gpu):
    """The QKV and attention output projections of one layer (dense or MoE) on one GPU of the
    tensor-parallel group: T tokens, the query width q and the K/V width hk split by t."""
    h, q, hk = model.hidden, model.q_hidden, model.kv_hidden
    return gemm_s(T, (q + 2 * hk) / t, h, peak, gpu) + gemm_s(T, h, q / t, peak, gpu)


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
    """Per-micro-batch times of one MoE layer on one GPU (the keys of layer_costs, and ep_fwd /
    ep_bwd: the exposed dispatch + combine all-to-alls of forward and of backward), from the dense
    layer's costs ``lc`` at the same shape (its attention core and tp / cp terms are the MoE
    layer's too). Routed experts over ``e`` = ep ranks, each split over ``u`` = etp ranks: the etp
    group all-gathers the copies it received (u x as many rows at 1 / u of the expert's width) and
    reduce-scatters the results, on the link its u consecutive ranks span (in ep_fwd / ep_bwd;
    ``etp_link``: that link's (bandwidth, latency) where the caller has it, as layer_costs's
    tp_link). ``fp8_dispatch`` (bool, per row): the dispatch direction (forward dispatch, and its
    mirror in backward: the combine's gradient sent to the experts) moves FP8_DISPATCH_BYTES an
    element, the combine direction 16 bits (Framework.fp8_dispatch). The heterogeneous evaluator
    passes as ``cluster`` a stage configuration's pool (gpu, gpus_per_node and the scale-up /
    scale-out links as arrays)."""
    gpu = cluster.gpu
    h, E, fe = model.hidden, model.experts, model.expert_ffn
    mats, act = model.mlp_matrices, model.activation
    T = lc["T"]
    copies = routed_copies(model, T, t)
    local = E / e  # experts per GPU (each 1 / u of its width)
    rows = u * copies / local  # tokens per local expert's GEMM, after the etp all-gather
    fs = model.shared_experts * model.shared_expert_ffn  # the shared experts as one MLP
    gemm = (
        attention_gemm_s(model, T, t, peak, gpu)
        + gemm_s(T / t, E, h, peak, gpu)  # router
        + local * (gemm_s(rows, (mats - 1) * fe / u, h, peak, gpu) + gemm_s(rows, h, fe / u, peak, gpu))  # routed
    )
    if fs:
        gemm = gemm + gemm_s(T, (mats - 1) * fs / t, h, peak, gpu) + gemm_s(T, h, fs / t, peak, gpu)
    split = np.where(sp, t, 1)
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
    repl = ACT_REPLICATED_H * T * h / np.where(sp, t, 1)
    split = (4 * T * q + 4 * T * hk + coef * T * fs) / t
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


def moe_layers_in(model: Transformer, lo, n):
    """MoE layers among layers [lo, lo + n) (any broadcasting arrays), as floats."""
    return (model.moe_layers_before(lo + n) - model.moe_layers_before(lo)).astype(np.float64)


def moe_stages_alike(model: Transformer, p):
    """(N,) bool: uniform stages whose interior stages hold the same MoE layers (what the three
    representative stages of _stages assume): pp <= 3, or the dense layers all on stage 0 and
    moe_layer_freq dividing the layers per stage."""
    n = model.layers // p
    return (p <= 3) | ((model.dense_layers <= n) & (n % model.moe_layer_freq == 0))


def expert_groups(table: StrategyTable):
    """(ep, edp, etp) columns: the expert-parallel degree, the expert-data-parallel ranks
    tp cp dp / (ep etp) and the expert-tensor-parallel degree (module docstring, "Expert
    parallelism")."""
    e, u = table["ep"], table["etp"]
    return e, np.maximum(table["dp"] * table["cp"] * table["tp"] // (e * u), 1), u


# -- terms shared by the homogeneous and the heterogeneous evaluator ----------------------------
# Both call these on arrays that broadcast: (N,) or (N, k) rows x stages here, (M,) flat stages
# or (U,) stage configurations in costmodel._hetero_eval.


def edge_terms(model: Transformer, T, t, sp, peak, gpu, tp_bw, tp_lat) -> dict[str, np.ndarray]:
    """The embedding's (first stage) and the head's (last stage) terms for one micro-batch of T
    tokens at tensor parallelism t: times emb_c, emb_tp, head_gemm, head_elem, head_tp and the
    activation bytes emb_act, head_act; zeros for an MLP, which has neither."""
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
        "head_gemm": gemm_s(T, V / t, h, peak, gpu) + zero,
        "head_elem": hbm_s(ACT_BYTES * 3.0 * T * h + XENT_BYTES_PER_LOGIT * T * V / t, gpu) + zero,
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


def stage_params(model: Transformer, n, first, last, t):
    """Parameters per GPU of a stage of n layers (plus the embedding on the first stage and
    the head on the last, with Megatron's tied copy of the embedding on the last when pp > 1)."""
    tied_copy = model.vocab * model.hidden if (model.tied_embeddings and model.kind != "mlp") else 0
    head_p = model.head_params() + np.where(first, 0, tied_copy)
    return (n * model.layer_params() + first * model.embedding_params() + last * head_p) / t


def dp_exchange_s(zero, m, params, g, bw, lat):
    """Seconds of a stage's data-parallel exchange over g ranks for ``params`` parameters per
    GPU. ZeRO-3: per micro-batch, all-gather the weights for forward and for backward and
    reduce-scatter the gradients (Rajbhandari et al. 2020 Sec. 7: 1.5x the all-reduce volume,
    per pass); ZeRO 0: all-reduce; ZeRO 1-2: reduce-scatter + all-gather, the same bytes."""
    grad_bytes = GRAD_COMM_BYTES * params
    reduce = all_reduce_s(grad_bytes, g, bw, lat)
    z3 = zero == 3
    if not np.any(z3):  # the common case in a search (ZeRO-3 needs pp 1): skip the gathers
        return reduce if reduce.shape == z3.shape else reduce + np.zeros_like(z3, dtype=np.float64)
    return np.where(z3, m * (2.0 * gather_s(WEIGHT_BYTES * params, g, bw, lat) + gather_s(grad_bytes, g, bw, lat)),
                    reduce)


def activation_bytes(full, sel, act_L, sel_kept, sel_work, T, h, sp_div):
    """Activation bytes one layer keeps per micro-batch in flight under its recompute choice
    (full: its input only; selective: ``sel_kept``, what the framework's selective policy keeps;
    none: all), and the working set of the one layer being recomputed (full: the whole layer;
    selective: ``sel_work``)."""
    kept = np.where(full, ACT_BYTES * T * h / sp_div, np.where(sel, sel_kept, act_L))
    return kept, np.where(full, act_L, np.where(sel, sel_work, 0.0))


def state_bytes(params, zero, g, stage_of=None):
    """Weight, gradient and optimizer bytes per GPU for ``params`` parameters, each sharded
    over the g data-parallel ranks from its ZeRO stage on (3, 2 and 1). ``stage_of``: zero and
    g are per configuration, params per stage of configuration ``stage_of``."""
    shards = (np.where(zero == 3, g, 1), np.where(zero >= 2, g, 1), np.where(zero >= 1, g, 1))
    if stage_of is not None:
        shards = tuple(x[stage_of] for x in shards)
    return tuple(nbytes * params / x for nbytes, x in zip((WEIGHT_BYTES, GRAD_BYTES, OPTIM_BYTES), shards, strict=True))


def buffer_bytes(T, h, t, g, zero, params_max, layer_p, stage_of=None, rows=None):
    """Communication buffers per GPU: two tensor-parallel activations, two gradient buckets
    (data parallelism), two prefetched layers (ZeRO-3), and the reserved runtime memory.
    ``stage_of``, ``rows``: T, t, g, zero per configuration, params_max per row: the buffers of
    stages of configurations ``stage_of`` in rows ``rows``."""
    tp_buf = np.where(t > 1, 2.0 * ACT_BYTES * T * h, 0.0)
    bucket = 2.0 * GRAD_COMM_BYTES * np.minimum(params_max, DP_BUCKET_ELEMS)
    z3_buf = np.where(zero == 3, 2.0 * WEIGHT_BYTES * layer_p / t, 0.0)
    reduced = g > 1
    if stage_of is not None:  # the configurations' part first, then the rows' buckets
        return (tp_buf + z3_buf + RESERVED_BYTES)[stage_of] + np.where(reduced[stage_of], bucket[rows], 0.0)
    return tp_buf + np.where(reduced, bucket, 0.0) + z3_buf + RESERVED_BYTES


def recompute_flops_per_token(model: Transformer, full, sel, fw: Framework, moe_layer: bool = False):
    """FLOPs per token one layer (an MoE layer: ``moe_layer``) recomputes: its forward on active
    weights (full); under selective, the attention scores (4 s x the query width) or, for a dense
    layer under per-op checkpointing (Framework.selective "op"), the matrix products it does not
    save (expert layers keep the attention-core policy: per-op checkpointing of experts is not
    modelled)."""
    if model.kind == "mlp":
        sel_re = 0.0
    elif fw.selective == "op" and not moe_layer:
        sel_re = op_checkpoint_products(model)[1]
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
    shapes = [(h, qh), (h, hk), (h, hk), (qh, h), *ffn]  # (input, output) widths
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
    repl = ACT_REPLICATED_H * T * h / np.where(sp, t, 1)
    mlp = (6 if model.activation == "swiglu" else 4) * T * f
    split = (4 * T * model.q_hidden + 4 * T * hk + mlp) / t  # Q and the projection input: q wide
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
    """(first, inv): for columns of small non-negative integers (or bools), the index of one
    row per distinct combination, and each row's combination number, so that
    ``f(x[first])[inv] == f(x)`` for any row-wise f. Dense mixed-radix keys (no sort) when
    the key range is small, np.unique otherwise (every row its own combination if the key
    would overflow int64)."""
    n = len(cols[0])
    key = np.zeros(n, dtype=np.int64)
    K = 1
    for x in cols:
        x = np.asarray(x, dtype=np.int64)
        r = int(x.max()) + 1 if n else 1
        K *= r
        if K >= 2**62:
            return np.arange(n), np.arange(n)
        key = key * r + x
    if K > max(4 * n, 1 << 16):
        _, first, inv = np.unique(key, return_index=True, return_inverse=True)
        return first, inv.ravel()
    present = np.zeros(K, dtype=bool)
    present[key] = True
    pos = np.cumsum(present) - 1
    inv = pos[key]
    first = np.empty(int(present.sum()), dtype=np.int64)
    first[inv] = np.arange(n)
    return first, inv


MOE_TERMS = ("gemm", "elem", "overhead", "ep_fwd", "ep_bwd")
# What layer_terms reads of a dense layer's shape terms (after framework_terms).
LAYER_INPUTS = ("gemm", "attn", "elem", "overhead", "tp_fwd", "cp_fwd", "cp_bwd", "sel_re", "sel_tp")


def moe_layer_inputs(sh: dict) -> dict:
    """The inputs of layer_terms for one MoE layer from the shape terms ``sh`` (after
    framework_terms): its moe_ terms where it has them, the dense layer's otherwise."""
    return {k: sh["moe_" + k] if k in MOE_TERMS or k.startswith("sel_") else sh[k]
            for k in (*LAYER_INPUTS, *MOE_TERMS[3:])}


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
    costs (layer_costs, which takes ``links``), the embedding and head times, activation bytes.
    ``moe`` = (ep column, etp column, framework, precision column) for an MoE model: adds the MoE
    layer's terms as moe_<key> (MOE_TERMS, and moe_act_L); ``links`` may hold etp_link for it (moe_layer_costs)."""
    etp_link = links.pop("etp_link", None)
    gpu = links.get("gpu") or cluster.gpu
    lc = layer_costs(model, cluster, b, t, c, sp, peak, **links)
    T = lc["T"]
    zero = np.zeros_like(T)
    edges = edge_terms(model, T, t, sp, peak, gpu, lc["tp_bw"], lc["tp_lat"])
    act_L, score_L = _act_layer_bytes(model, b, t, c, sp)
    out = {k: lc[k] + zero for k in ("gemm", "attn", "elem", "overhead", "tp_fwd", "cp_fwd", "cp_bwd", "T")}
    out.update(edges, act_L=act_L + zero, score_L=score_L + zero)
    if moe is not None:
        e, u, fw, precision = moe
        fp8_dispatch = fw.fp8_dispatch & (np.asarray(precision) == PRECISIONS.index("fp8"))
        ml = moe_layer_costs(model, cluster, lc, t, sp, e, peak, fw.overlap_ep, fw.ep_dispatch_per_node, u,
                             etp_link, fp8_dispatch)
        out.update({"moe_" + k: ml[k] + zero for k in MOE_TERMS})
        out["moe_act_L"] = _act_moe_layer_bytes(model, b, t, c, sp, u)[0] + zero
    return out


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


def feasibility(model: Transformer, cluster: Cluster, table: StrategyTable, framework=None) -> np.ndarray:
    """Reason code per row for everything but memory (0 = ok; first failing check wins) under
    ``framework`` (costmodel._frameworks; None: the default profile)."""
    L, s = model.layers, model.seq_len
    d, t, p, c = table["dp"], table["tp"], table["pp"], table["cp"]
    b, B, v, sched = table["micro_batch"], table["global_batch"], table["vpp"], table["schedule"]
    tp_ok = tp_divides(model, t)
    if table.stage_layers is None:
        pp_ok = L % p == 0
        n_min = L // p
    else:
        sl = table.stage_layers
        active = np.arange(sl.shape[1])[None, :] < p[:, None]  # (N, S)
        pp_ok = (sl.sum(axis=1, where=active) == L) & np.all(~active | (sl >= 1), axis=1) & np.all(
            active | (sl == 0), axis=1
        )
        n_min = np.min(np.where(active, sl, L), axis=1)
    # Chunked schedules need v chunks per device of whole layers. Where the framework splits
    # chunks unevenly (framework.uneven_chunks: Megatron-Core's pipeline layouts, torchtitan's
    # split points; Llama 3 405B's interleaved 7, 8 x 14, 7 layers over 16 stages) every stage
    # needs at least v layers, a stage that v does not divide getting chunks one layer apart;
    # the closed forms and the simulator take each chunk as 1/v of its stage's time (exact when
    # v divides the stage, else within a layer's time per chunk). Otherwise v must divide every
    # stage's layers (uniform stages: v | L/p).
    fw = framework_preset(framework)
    if fw.uneven_chunks:
        chunks_ok = n_min >= v
    elif table.stage_layers is None:
        chunks_ok = n_min % v == 0
    else:
        chunks_ok = np.all(~active | (table.stage_layers % v[:, None] == 0), axis=1)
    sched_ok = schedule_fits(sched, p, v, chunks_ok)
    return reason_codes(gpus_ok=d * t * p * c <= cluster.num_gpus, tp_ok=tp_ok, pp_ok=pp_ok,
                        batch_ok=B % (d * b) == 0, sched_ok=sched_ok, cp=c, pp=p, seq_len=s,
                        zero=table["zero_stage"], framework=framework, schedule=sched,
                        sequence_parallel=table["sequence_parallel"], precision=table["precision"],
                        ep_ok=ep_fits(model, table["ep"], d * c * t, table["etp"]), ep=table["ep"],
                        etp=table["etp"])


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


def _stages(table: StrategyTable, L: int):
    """Stage layout as (N, k) arrays: stage index, layers, recompute code, weight in sums.

    Uniform stages are represented by three stages, 0, 1 and p - 1 (the first, the busiest
    interior one for memory, the last), weighted 1, p - 2, 1 in sums over stages; explicit
    per-stage layer counts use every stage."""
    p, rc = table["pp"], table["recompute"]
    if table.stage_layers is None:
        idx = np.stack([np.zeros_like(p), np.minimum(1, p - 1), p - 1], axis=1)  # (N, 3)
        n = np.broadcast_to((L // p)[:, None], idx.shape)
        w = np.stack([np.ones_like(p), np.maximum(p - 2, 0), (p >= 2).astype(p.dtype)], axis=1)
        w = np.where((idx[:, 1:2] == idx[:, 2:3]) & (np.arange(3)[None, :] == 1), 0, w)
        rcs = np.broadcast_to(rc[:, None], idx.shape)
    else:
        S = table.stage_layers.shape[1]
        idx = np.broadcast_to(np.arange(S)[None, :], table.stage_layers.shape)
        n = table.stage_layers
        w = (idx < p[:, None]).astype(np.int64)
        rcs = rc[:, None] if table.stage_recompute is None else table.stage_recompute
        rcs = np.broadcast_to(rcs, idx.shape)
    return idx, n.astype(np.float64), rcs, w.astype(np.float64)


# Rows per block: 16k rows keep a block's float64 temporaries in L2, 1.6x faster per row
# than whole 1M-row columns on these machines (BENCHMARKS.md, "Cost core").
BLOCK_ROWS = 16384


def evaluate(
    model: Transformer, cluster: Cluster, table: StrategyTable, *, pipeline: str = "closed_form",
    framework: str | Framework | None = None,
) -> Metrics:
    """Evaluate every row of ``table``: time and its parts, throughput, MFU, memory, feasibility.

    Pure and vectorised: numpy over the rows (and stages), in cache-sized blocks of rows; no
    Python loop over strategies. Infeasible rows stay, with feasible=False, a reason code
    (REASONS) and infinite step time.

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
    table = moe_explicit_stages(model, table)
    return run_blocks(table, lambda sub, now: _evaluate_block(model, cluster, sub, pipeline, simulate_now=now,
                                                              framework=fw),
                      lambda sub: sub["global_batch"] // (sub["dp"] * sub["micro_batch"]))


def moe_explicit_stages(model: Transformer, table: StrategyTable) -> StrategyTable:
    """``table`` with explicit stage_layers (L / pp each) where uniform stages of an MoE model do
    not hold alike MoE layers (moe_stages_alike): the three representative stages would not
    stand for the interior ones. Unchanged otherwise (every dense model)."""
    if not model.is_moe or table.stage_layers is not None or np.all(moe_stages_alike(model, table["pp"])):
        return table
    p = table["pp"]
    layers = np.where(np.arange(int(p.max()))[None, :] < p[:, None], (model.layers // p)[:, None], 0)
    return StrategyTable(table.columns, layers, table.stage_recompute)


def run_blocks(table, block, microbatches) -> Metrics:
    """The rows of ``table`` through ``block(sub_table, simulate_now)`` in cache-sized blocks.
    Pass 1: closed forms only, rows the simulator must price flagged in ``_needs_simulation``;
    pass 2: those rows sorted by (schedule, pp, ``microbatches(sub_table)``, vpp), written back."""
    N = len(table)
    if N <= BLOCK_ROWS:
        out = block(table, True)
        out.pop("_needs_simulation")
        return out
    parts = [block(table.take(slice(i, i + BLOCK_ROWS)), False) for i in range(0, N, BLOCK_ROWS)]
    out = Metrics({k: np.concatenate([part[k] for part in parts]) for k in parts[0]})
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
    f = lc["gemm"] + lc["attn"] + lc["elem"] + lc["overhead"]  # forward compute
    bx = lc["gemm"] + 2.0 * lc["attn"] + ELEM_BWD_FACTOR * (lc["elem"] + lc["overhead"])
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
    busy = m[q] * X_max[q]
    pipe[q] = total  # pipe, fill and pp_comm: the caller's fresh arrays, written in place
    pp_comm[q] = np.minimum(pp_comm[q], np.maximum(total - busy, 0.0))
    fill[q] = total - busy - pp_comm[q]
    return pipe, fill, pp_comm, np.zeros_like(needs), (q, row_shape, peaks)


def exposed_dp_s(zero, overlap, m, X_max, B_b, W_b, dp_raw):
    """The data-parallel exchange's exposed time: overlapped (``overlap``) with the bottleneck
    stage's last backward (B + W), or under ZeRO-3 with the whole pipeline (m X_max)."""
    window = np.where(zero == 3, m * X_max, B_b + W_b)
    return np.where(overlap, np.maximum(dp_raw - window, 0.0), dp_raw)


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
        res = simulate(SCHEDULES[code], pg, mg, vg, tf=u_tf[r, :pg], tb=u_tb[r, :pg], tw=u_tw[r, :pg],
                       tc=u_tc[r, :pg])
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
    return T * (h / sp_div + model.q_hidden / t), T * (h / sp_div + model.ffn_hidden / t)


def framework_terms(fw: Framework, model: Transformer, terms: dict, t, sp, precision) -> dict:
    """Shape terms under the framework: the activation bytes its kernels do not keep taken out
    (the attention scores where its attention is fused; half of each linear layer's saved input
    where it keeps those in fp8 and the row runs fp8), and what its selective recompute keeps
    (sel_kept), holds while recomputing a layer (sel_work), recomputes (sel_re, seconds per
    layer) and communicates again (sel_tp); the same with a moe_ prefix for an MoE layer, whose
    experts keep their inputs in 16 bits and take the attention-core policy (fp8 expert inputs
    and per-op checkpointing of experts are not modelled). ``t``, ``sp``, ``precision``: the
    columns of the rows ``terms`` were computed for."""
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
        kept = ACT_BYTES * T * (model.hidden / sp_div + saved + model.q_hidden / t
                                + np.where(sp & (t > 1), 2.0 * model.hidden / t, 0.0))
        sel_kept = np.minimum(kept, act)
        sel = {"sel_kept": sel_kept, "sel_work": act - sel_kept,
               "sel_re": re_flops / all_flops * terms["gemm"] + terms["elem"] + terms["overhead"],
               "sel_tp": 0.5 * terms["tp_fwd"]}  # the all-gathers run again, the reduce-scatters do not
    else:
        sel = {"sel_kept": act - score, "sel_work": zero, "sel_re": terms["attn"] + zero, "sel_tp": zero}
    out = {**terms, "act_L": act, "score_L": score, **sel}
    if moe_act is not None:
        out.update(moe_act_L=moe_act, moe_sel_kept=moe_act - score, moe_sel_work=zero, moe_sel_re=terms["attn"] + zero,
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
    total = np.where(wt > 0, w_b + g_b + o_b + act + col(buffers), -np.inf)
    return {"weights": w_b, "grads": g_b, "optimizer": o_b, "activations": act, "buffers": buffers,
            "total": total, "params_max": params_max}


def _moe_stage_memory(model: Transformer, sh: dict, t, sp, zero, g, n, first, last, full, sel, k, wt, moe) -> dict:
    """stage_memory of an MoE model (moe_memory on (N, k) stage columns): adds dense_max and
    expert_max, the largest stage's parameters per GPU of each kind (N,)."""
    col = lambda x: np.asarray(x, dtype=np.float64)[:, None]  # noqa: E731  (N,) -> (N, 1)
    on = wt > 0
    out = moe_memory(model, {key: col(sh[key]) for key in MOE_MEMORY_TERMS if key in sh}, col(t),
                     col(np.where(sp, t, 1)), col(zero), col(g), n, moe["n_moe"], first, last, full, sel, k,
                     col(moe["e"]), col(moe["edp"]), col(moe["u"]),
                     row_max=lambda a: np.max(np.where(on, a, 0.0), axis=1), to_stage=col)
    buffers = out["buffers"]
    out["buffers"] = buffers[:, 0]
    out["total"] = np.where(on, out["weights"] + out["grads"] + out["optimizer"] + out["activations"] + buffers,
                            -np.inf)
    return out


# The shape terms moe_memory reads (act_L, sel_kept, sel_work only where some layer is dense).
MOE_MEMORY_TERMS = ("T", "act_L", "sel_kept", "sel_work", "emb_act", "head_act", "moe_act_L", "moe_sel_kept",
                    "moe_sel_work")


def moe_memory(model: Transformer, sh: dict, t, sp_div, zero, g, n, n_m, first, last, full, sel, k, e, edp, u, *,
               row_max, to_stage) -> dict:
    """Memory per GPU of stages of an MoE model, every argument an array of stages (both
    evaluators: (N, k) columns here, (M,) flat stages in costmodel._hetero_eval) or one that
    broadcasts to them: a stage of n layers holds n_m MoE layers; their routed experts (E / ep per
    GPU, each 1 / etp = u of its width) are sharded by ZeRO over the edp expert-data-parallel ranks,
    everything else as a dense layer's parameters over the g = dp x cp replicas; activations per
    layer type; the all-to-all buffers (the routed copies sent and received). ``sh``: the shape
    terms of MOE_MEMORY_TERMS; ``sp_div``: t under sequence parallelism, else 1; ``row_max``: a
    stage array to its row's largest (N,); ``to_stage``: a row array (N,) back to the stages.
    Returns weights, grads, optimizer, activations, buffers and the dense and expert parameters
    per GPU (dense_params, expert_params) per stage, and per row params_max, dense_max and
    expert_max: the largest stage's parameters per GPU, of both kinds and each."""
    all_moe = model.moe_layers == model.layers
    n_d = None if all_moe else n - n_m
    head_p = model.head_params() + (np.where(first, 0, model.vocab * model.hidden) if model.tied_embeddings else 0)
    layers_p = n_m * model.moe_layer_dense_params() if all_moe else (
        n_d * model.layer_params() + n_m * model.moe_layer_dense_params())
    dense_p = (layers_p + first * model.embedding_params() + last * head_p) / t  # per GPU
    # E / ep experts a layer, each 1 / etp of its parameters: one factor per row, then per stage
    expert_p = n_m * (model.experts * model.expert_params() / (e * u))  # per GPU
    dense_max, expert_max, params_max = row_max(dense_p), row_max(expert_p), row_max(dense_p + expert_p)
    kept_m, work_m = activation_bytes(full, sel, sh["moe_act_L"], sh["moe_sel_kept"], sh["moe_sel_work"], sh["T"],
                                      model.hidden, sp_div)
    if all_moe:  # every layer an MoE layer
        kept, work = n_m * kept_m, work_m
    else:
        kept_d, work_d = activation_bytes(full, sel, sh["act_L"], sh["sel_kept"], sh["sel_work"], sh["T"],
                                          model.hidden, sp_div)
        kept = n_d * kept_d + n_m * kept_m
        work = np.maximum(np.where(n_d > 0, work_d, 0.0), np.where(n_m > 0, work_m, 0.0))
    act = k * (kept + first * sh["emb_act"]) + work + last * sh["head_act"]
    w_d, g_d, o_d = state_bytes(dense_p, zero, g)
    w_e, g_e, o_e = state_bytes(expert_p, zero, edp)
    # ZeRO-3 prefetches two layers: the larger of a dense and an MoE layer per GPU (times t, as
    # buffer_bytes divides by t).
    moe_layer_p = model.moe_layer_dense_params() + (model.experts / e) * model.expert_params() / u * t
    buffers = buffer_bytes(sh["T"], model.hidden, t, np.maximum(g, edp), zero, to_stage(params_max),
                           np.maximum(model.layer_params(), moe_layer_p))
    buffers = buffers + 2.0 * ACT_BYTES * u * routed_copies(model, sh["T"], t) * model.hidden
    return {"weights": w_d + w_e, "grads": g_d + g_e, "optimizer": o_d + o_e, "activations": act,
            "buffers": buffers, "params_max": params_max, "dense_max": dense_max, "expert_max": expert_max,
            "dense_params": dense_p, "expert_params": expert_p}


# MoE rows: stage times within this relative distance of the slowest count as tied (the first is
# the bottleneck), so that round-off does not pick another stage than the scalar reference does.
# Dense rows keep the plain argmax (their results are unchanged by the MoE work, bit for bit).
TIE_REL = 1e-12


def _evaluate_block(model: Transformer, cluster: Cluster, table: StrategyTable,
                    pipeline: str = "closed_form", simulate_now: bool = True,
                    stages_out: bool = False, framework=None) -> Metrics:
    gpu = cluster.gpu
    L, h, s = model.layers, model.hidden, model.seq_len
    d, t, p, c = table["dp"], table["tp"], table["pp"], table["cp"]
    b, B, v = table["micro_batch"], table["global_batch"], table["vpp"]
    sched, zero = table["schedule"], table["zero_stage"]
    sp, overlap = table["sequence_parallel"], table["overlap_dp"]
    peak = np.asarray(gpu.peak_flops)[table["precision"]]
    peak = np.where(peak > 0, peak, gpu.peak_flops[0])  # a GPU without fp8 runs it as bf16
    n_gpu = d * t * p * c
    fw = framework_preset(framework)
    reason = feasibility(model, cluster, table, fw)
    zero, overlap = framework_columns(fw, p, zero, overlap)
    m = np.maximum(B // (d * b), 1)
    col = lambda x: np.asarray(x, dtype=np.float64)[:, None]  # noqa: E731  (N,) -> (N, 1)

    # -- one layer, one micro-batch, and the embedding / head terms (N,) --
    # They depend on (b, t, c, sp, precision) alone: computed once per distinct combination
    # in the block (a few dozen) and gathered back to the rows.
    moe = model.is_moe
    e, edp, u = expert_groups(table) if moe else (None, None, None)
    first_row, inv = distinct_rows(b, t, c, sp, table["precision"], *((e, u) if moe else ()))
    moe_arg = (e[first_row], u[first_row], fw, table["precision"][first_row]) if moe else None
    f_t, f_sp = t[first_row], sp[first_row]
    sh = {k: v[inv] for k, v in framework_terms(
        fw, model, shape_terms(model, cluster, b[first_row], f_t, c[first_row], f_sp, peak[first_row], moe=moe_arg),
        f_t, f_sp, table["precision"][first_row]).items()}
    T = sh["T"]
    emb_c, emb_tp, head_gemm, head_elem, head_tp = (
        sh["emb_c"], sh["emb_tp"], sh["head_gemm"], sh["head_elem"], sh["head_tp"])

    # -- stages (N, k) --
    idx, n, rcs, wt = _stages(table, L)
    first, last = idx == 0, idx == (p - 1)[:, None]
    full, sel = rcs == 2, rcs == 1
    all_moe = moe and model.moe_layers == L  # no dense layer: the dense terms are not needed
    if not all_moe:
        lt = layer_terms({k: col(sh[k]) for k in LAYER_INPUTS}, full, sel)  # (N, 1) or (N, k) per layer
    if moe:  # stage sums over its dense and its MoE layers
        n_m = moe_stage_layers(model, table, idx, n)
        n_d = n - n_m
        lt_m = layer_terms({k: col(x) for k, x in moe_layer_inputs(sh).items()}, full, sel)
        if all_moe:
            layers = lambda key: n * lt_m[key]  # noqa: E731
        else:
            layers = lambda key: n_d * lt[key] + n_m * lt_m[key]  # noqa: E731
    else:
        layers = lambda key: n * lt[key]  # noqa: E731
    head_FB = col(head_gemm + 0.5 * head_elem + 0.5 * head_tp)
    F = layers("F") + first * col(0.5 * emb_c + emb_tp) + last * head_FB
    Bk = layers("B") + first * col(0.5 * emb_c) + last * head_FB
    W = layers("W") + last * col(head_gemm)
    X = F + Bk + W  # (N, k) stage time per micro-batch

    # -- pipeline: bottleneck stage, fill, hand-offs (closed forms, module docstring) --
    Xa = np.where(wt > 0, X, -np.inf)
    if moe:  # the first stage within TIE_REL of the slowest (equal stages break ties alike in the reference)
        bot = np.argmax(Xa >= np.max(Xa, axis=1, keepdims=True) * (1.0 - TIE_REL), axis=1)[:, None]
    else:
        bot = np.argmax(Xa, axis=1)[:, None]  # (N, 1) bottleneck stage column
    bot_flat = np.arange(len(table)) * X.shape[1] + bot[:, 0]

    def at(a):  # the bottleneck stage's entry of an (N, k) or (N, 1) array
        return a[:, 0] if a.shape[1] == 1 else a.reshape(-1)[bot_flat]

    X_max, F_b, B_b, W_b = at(X), at(F), at(Bk), at(W)
    pp_bw, pp_lat = tier(t * c * d * p, cluster, gpu, one_group=True)
    T_C = np.where(p > 1, ACT_BYTES * T * h / t / pp_bw + pp_lat, 0.0)

    def stage_inputs(q):  # the simulated rows' stage columns: 3 representatives or every stage
        kk = 3 if table.stage_layers is None else int(p[q].max())
        return (np.full(q.size, table.stage_layers is None), F[q, :kk], Bk[q, :kk], W[q, :kk],
                np.broadcast_to(T_C[q, None], (q.size, kk)))

    pipe, fill, pp_comm, needs_simulation, sim = pipeline_step(
        sched=sched, p=p, m=m, v=v, X_sum=np.sum(wt * X, axis=1), X_max=X_max, F_b=F_b, B_b=B_b, W_b=W_b,
        pp_comm=2.0 * (p - 1) * T_C, reason=reason, pipeline=pipeline, simulate_now=simulate_now,
        stage_inputs=stage_inputs)
    k = in_flight(col(sched), col(p), col(m), col(v), idx)
    if sim is not None:
        q, row_shape, peaks = sim
        k[q] = peaks[row_shape[:, None], np.minimum(idx[q], (p[q] - 1)[:, None])]

    # -- memory per GPU, per stage (the worst stage is taken below) --
    g = d * c  # gradients are reduced over dp x cp (Megatron-LM)
    mem = stage_memory(model, sh, t, sp, zero, g, n, first, last, full, sel, k, wt,
                       moe=dict(n_moe=n_m, e=e, edp=edp, u=u) if moe else None)
    params_max = mem["params_max"]

    # -- data-parallel gradient exchange and the optimizer (on the largest stage) --
    dp_bw, dp_lat = tier(t * c * d, cluster, gpu)
    shard = np.where(zero >= 1, g, 1)
    if moe:  # dense parameters over dp x cp, routed experts over the edp ranks (same span of ranks)
        dp_raw = (dp_exchange_s(zero, m, mem["dense_max"], g, dp_bw, dp_lat)
                  + dp_exchange_s(zero, m, mem["expert_max"], edp, dp_bw, dp_lat))
        opt_s = hbm_s(ADAM_BYTES_TOUCHED * (mem["dense_max"] / shard + mem["expert_max"] / np.where(zero >= 1, edp, 1)),
                      gpu)
    else:
        dp_raw = dp_exchange_s(zero, m, params_max, g, dp_bw, dp_lat)
        opt_s = hbm_s(ADAM_BYTES_TOUCHED * params_max / shard, gpu)
    dp_exposed = exposed_dp_s(zero, overlap, m, X_max, B_b, W_b, dp_raw)
    step = pipe + dp_exposed + opt_s

    # -- the worst stage's memory --
    w_b, g_b, o_b, act, buffers, tot = (mem[x] for x in ("weights", "grads", "optimizer", "activations",
                                                          "buffers", "total"))
    worst = np.argmax(tot, axis=1)[:, None]
    worst_flat = np.arange(len(table)) * tot.shape[1] + worst[:, 0]

    def atm(a):  # the worst-memory stage's entry of an (N, k) or (N, 1) array
        return a[:, 0] if a.shape[1] == 1 else np.ascontiguousarray(a).reshape(-1)[worst_flat]

    mem_total = atm(tot)
    reason = np.where((reason == 0) & (mem_total > gpu.hbm_bytes), REASON["out_of_memory"], reason)
    reason = reason.astype(np.int8)
    feasible = reason == 0

    # -- throughput and utilisation --
    flops_model = model.model_flops_per_sample() * B
    re_tok = recompute_flops_per_token(model, full, sel, fw)
    if moe:
        re_moe = recompute_flops_per_token(model, full, sel, fw, moe_layer=True)
        re_stage = n * re_moe if all_moe else n_d * re_tok + n_m * re_moe
        flops_hw = flops_model + np.sum(wt * re_stage, axis=1) * s * B
    else:
        flops_hw = flops_model + np.sum(wt * n * re_tok, axis=1) * s * B
    extra = {}
    if stages_out:
        extra = {"_stage_layers": np.where(wt > 0, n, 0), "_stage_forward_s": F, "_stage_backward_s": Bk,
                 "_stage_weight_grad_s": W, "_stage_in_flight": k,
                 "_stage_mem_bytes": np.where(wt > 0, tot, 0.0), "_stage_active": wt > 0}
    extra["_needs_simulation"] = needs_simulation
    if moe:  # the bottleneck stage's layers summed over both kinds
        n_b, lt_b = moe_stage_terms(at(n), at(n_m), None if all_moe else {k: at(lt[k]) for k in lt},
                                    {k: at(lt_m[k]) for k in lt_m})
    else:
        lt_b = {k: at(lt[k]) for k in ("compute", "recompute", "tp", "cp")}
        n_b = at(n)
    parts = bottleneck_parts(m, n_b, at(first), at(last), lt_b, emb_c, emb_tp, head_gemm, head_elem, head_tp)
    return assemble_metrics(
        feasible=feasible, reason=reason, step=step, pipe=pipe, fill=fill, m=m, batch=B, seq_len=s,
        flops_model=flops_model, flops_hw=flops_hw, peak_total=n_gpu * peak, **parts,
        pp_comm=pp_comm, dp_comm=dp_exposed, optimizer=opt_s,
        mem_weights=atm(w_b), mem_grads=atm(g_b), mem_optimizer=atm(o_b), mem_activations=atm(act),
        mem_buffers=buffers, mem_total=mem_total, extra=extra)


def stage_breakdown(model: Transformer, cluster: Cluster, table: StrategyTable,
                    framework=None) -> dict[str, np.ndarray]:
    """Per pipeline stage, for a few rows (people's view, not the hot path): (N, S) arrays of
    layers, forward / backward / weight-gradient time per micro-batch, micro-batches in flight
    at the peak (from the simulator) and memory per GPU. Uniform rows are expanded to every
    stage."""
    if table.stage_layers is None:
        S = int(table["pp"].max())
        layers = np.where(np.arange(S)[None, :] < table["pp"][:, None], (model.layers // table["pp"])[:, None], 0)
        table = StrategyTable(table.columns, layers, table.stage_recompute)
    out = _evaluate_block(model, cluster, table, "simulate", simulate_now=True, stages_out=True, framework=framework)
    return {k[len("_stage_"):]: v for k, v in out.items() if k.startswith("_stage_")}
