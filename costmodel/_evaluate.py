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
"""

from __future__ import annotations

import numpy as np

from costmodel._hardware import Cluster
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
ACT_SCORE_BYTES = 5

REASONS = (
    "ok",
    "gpus_exceed_cluster",
    "tp_not_divide_heads",
    "pp_not_divide_layers",
    "cp_not_divide_seq",
    "batch_not_divide",
    "schedule_invalid",
    "zero_incompatible_pp",
    "out_of_memory",
)
REASON = {name: i for i, name in enumerate(REASONS)}
SCHED = {name: i for i, name in enumerate(SCHEDULES)}
# Schedules the closed forms above price; the others are reported as schedule_invalid
# until the simulator prices them.
CLOSED_FORM_SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2")

METRIC_COLUMNS = (
    "step_time_s", "compute_s", "recompute_s", "tp_comm_s", "cp_comm_s", "pp_comm_s",
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


def tier(span, cluster: Cluster, gpu):
    """Effective bandwidth and latency of a group whose ranks span ``span`` consecutive
    ranks (stride * size): inside a node if span <= gpus_per_node, else the network."""
    inside = span <= cluster.gpus_per_node
    bw = np.where(inside, cluster.scaleup_Bps, cluster.scaleout_Bps) * gpu.link_eff
    lat = np.where(inside, cluster.scaleup_latency_s, cluster.scaleout_latency_s)
    return bw, lat


def layer_costs(model: Transformer, cluster: Cluster, b, t, c, sp, peak):
    """Per-micro-batch times of one layer on one GPU: a dict of (N,) arrays."""
    gpu = cluster.gpu
    h, f, hk, a, s = model.hidden, model.ffn_hidden, model.kv_hidden, model.heads, model.seq_len
    sc = s / c
    T = b * sc  # tokens on this rank
    tp_bw, tp_lat = tier(t, cluster, gpu)
    cp_bw, cp_lat = tier(t * c, cluster, gpu)
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
        dh = h / a
        mats = model.mlp_matrices
        gemm = (
            gemm_s(T, (h + 2 * hk) / t, h, peak, gpu)  # QKV
            + gemm_s(T, h, h / t, peak, gpu)  # attention output projection
            + gemm_s(T, (mats - 1) * f / t, h, peak, gpu)  # MLP up (and gate)
            + gemm_s(T, h, f / t, peak, gpu)  # MLP down
        )
        # Attention core, fused (flash) kernel: QK^T and AV, 4 b sc s h / t FLOPs, no s^2
        # HBM traffic; utilisation of a (sc x dh) @ (dh x s) product.
        util = gpu.gemm_eff_max * sat(sc, gpu.gemm_half_dim) * sat(s, gpu.gemm_half_dim) * sat(
            dh, gpu.gemm_half_dim
        )
        attn = 4.0 * b * sc * s * h / t / (peak * util)
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
    split = (4 * T * h + 4 * T * hk + mlp) / t
    scores = ACT_SCORE_BYTES * a * b * (s / c) * s / t
    return repl + split + scores, scores


def in_flight(sched, p, m, v, stage):
    """Micro-batch activations held at the peak on pipeline stage ``stage`` (0 or p-1),
    counted in whole-stage micro-batches (an interleaved chunk counts 1/v).

    GPipe holds all m; 1F1B holds p - i on stage i (Narayanan et al. 2021); interleaved
    follows Megatron-LM's warm-up, (p - i - 1) * 2 + (v - 1) * p + 1 chunks on stage i;
    ZB-H1 holds p on every stage, ZB-H2 about 2p - 1 (Qi et al. 2023)."""
    i = stage
    one_f1b = np.minimum(p - i, m)
    inter = np.minimum((p - i - 1) * 2 + (v - 1) * p + 1, m * v) / v
    zb1 = np.minimum(p, m)
    zb2 = np.minimum(2 * p - 1, m)
    out = np.select(
        [sched == SCHED["gpipe"], sched == SCHED["interleaved"], sched == SCHED["zb-h1"],
         sched == SCHED["zb-h2"]],
        [m, inter, zb1, zb2],
        one_f1b,
    )
    return out.astype(np.float64)


# ---- the evaluator -------------------------------------------------------------------------
def evaluate(model: Transformer, cluster: Cluster, table: StrategyTable) -> Metrics:
    """Evaluate every row of ``table``: time and its parts, throughput, MFU, memory, feasibility.

    Pure and vectorised: numpy over the rows, no Python loop over strategies. Infeasible rows
    stay, with feasible=False, a reason code (REASONS) and infinite step time.
    """
    gpu = cluster.gpu
    L, h, s, V = model.layers, model.hidden, model.seq_len, model.vocab
    d, t, p, c = table["dp"], table["tp"], table["pp"], table["cp"]
    b, B, v = table["micro_batch"], table["global_batch"], table["vpp"]
    sched, rc, zero = table["schedule"], table["recompute"], table["zero_stage"]
    sp, overlap = table["sequence_parallel"], table["overlap_dp"]
    peak = np.asarray(gpu.peak_flops)[table["precision"]]
    peak = np.where(peak > 0, peak, gpu.peak_flops[0])  # a GPU without fp8 runs it as bf16
    n_gpu = d * t * p * c

    # -- feasibility (first failing reason wins; the arithmetic below stays finite) --
    if model.kind == "mlp":
        tp_ok = model.hidden % t == 0
    else:
        tp_ok = (model.heads % t == 0) & (model.kv_heads % t == 0)
    pp_ok = L % p == 0
    cp_ok = (c == 1) | (s % (2 * c) == 0)
    batch_ok = B % (d * b) == 0
    m = np.maximum(B // (d * b), 1)
    n = L // p  # layers per stage (uniform)
    is_inter = sched == SCHED["interleaved"]
    closed = np.isin(sched, [SCHED[x] for x in CLOSED_FORM_SCHEDULES])
    sched_ok = closed & np.where(is_inter, (v >= 2) & (p >= 2) & (n % v == 0), v == 1)
    zero_ok = (zero <= 1) | (p == 1)
    reason = np.zeros(len(table), dtype=np.int8)
    checks = [
        (n_gpu <= cluster.num_gpus, "gpus_exceed_cluster"),
        (tp_ok, "tp_not_divide_heads"),
        (pp_ok, "pp_not_divide_layers"),
        (cp_ok, "cp_not_divide_seq"),
        (batch_ok, "batch_not_divide"),
        (sched_ok, "schedule_invalid"),
        (zero_ok, "zero_incompatible_pp"),
    ]
    for ok, name in reversed(checks):
        reason = np.where(ok, reason, REASON[name]).astype(np.int8)

    # -- one layer, one micro-batch --
    lc = layer_costs(model, cluster, b, t, c, sp, peak)
    T = lc["T"]
    f_L = lc["gemm"] + lc["attn"] + lc["elem"] + lc["overhead"]  # forward compute
    b_L = lc["gemm"] + 2.0 * lc["attn"] + ELEM_BWD_FACTOR * (lc["elem"] + lc["overhead"])
    w_L = lc["gemm"]  # weight-gradient GEMMs
    tp_L = 2.0 * lc["tp_fwd"]  # forward + backward
    cp_L = lc["cp_fwd"] + lc["cp_bwd"]
    full = rc == 2
    sel = rc == 1
    re_L = np.where(full, f_L, np.where(sel, lc["attn"], 0.0))
    re_tp_L = np.where(full, lc["tp_fwd"], 0.0)
    re_cp_L = np.where(full, lc["cp_fwd"], 0.0)

    # -- embedding (first stage) and head (last stage), per micro-batch --
    tp_bw, tp_lat = lc["tp_bw"], lc["tp_lat"]
    if model.kind == "mlp":
        zero_col = np.zeros(len(table))
        emb_c = emb_tp = head_c = head_tp = zero_col
    else:
        # Embedding: gather T rows of h (read + write), backward scatter-add (same again);
        # vocab-parallel lookup ends in one all-reduce of T*h.
        emb_c = hbm_s(ACT_BYTES * 4.0 * T * h, gpu)
        emb_tp = all_reduce_s(ACT_BYTES * T * h, t, tp_bw, tp_lat)
        # Head: final norm, logits GEMM (forward, then dX and dW), cross-entropy traffic;
        # an all-gather of the input (SP) or its all-reduce in backward: one all-reduce of
        # T*h, plus the vocab-parallel loss's 3 small all-reduces of T fp32 values.
        head_c = (
            3.0 * gemm_s(T, V / t, h, peak, gpu)
            + hbm_s(ACT_BYTES * 3.0 * T * h + XENT_BYTES_PER_LOGIT * T * V / t, gpu)
        )
        head_tp = all_reduce_s(ACT_BYTES * T * h, t, tp_bw, tp_lat) + 3.0 * all_reduce_s(
            4.0 * T, t, tp_bw, tp_lat
        )

    # -- stage times per micro-batch: first, last (uniform interior stages lie below both) --
    x_comp_L = f_L + b_L + w_L
    single = p == 1
    comp_first = n * x_comp_L + emb_c + np.where(single, head_c, 0.0)
    comp_last = n * x_comp_L + head_c + np.where(single, emb_c, 0.0)
    tp_first = n * tp_L + emb_tp + np.where(single, head_tp, 0.0)
    tp_last = n * tp_L + head_tp + np.where(single, emb_tp, 0.0)
    re_stage = n * re_L
    re_comm_stage = n * (re_tp_L + re_cp_L)
    X_first = comp_first + tp_first + n * cp_L + re_stage + re_comm_stage
    X_last = comp_last + tp_last + n * cp_L + re_stage + re_comm_stage
    last_is_max = X_last >= X_first
    X_max = np.maximum(X_first, X_last)
    X_sum = np.where(single, X_first, p * n * (x_comp_L + tp_L + cp_L + re_L + re_tp_L + re_cp_L)
                     + emb_c + emb_tp + head_c + head_tp)

    # -- pipeline hand-off and pipeline time --
    pp_bw, pp_lat = tier(t * c * d * p, cluster, gpu)
    T_C = np.where(p > 1, ACT_BYTES * T * h / t / pp_bw + pp_lat, 0.0)
    vv = np.where(is_inter, v, 1)
    fill = (X_sum - X_max) / vv
    # Zero-bubble fills, with the bottleneck stage's F, B, W (per micro-batch).
    F_max = n * (f_L + lc["tp_fwd"] + lc["cp_fwd"])
    B_max = n * (b_L + lc["tp_fwd"] + lc["cp_bwd"] + re_L + re_tp_L + re_cp_L)
    W_max = n * w_L
    fill = np.where(sched == SCHED["zb-h1"], (p - 1) * np.maximum(F_max + B_max - W_max, 0.0), fill)
    fill = np.where(sched == SCHED["zb-h2"], (p - 1) * np.maximum(F_max + B_max - 2 * W_max, 0.0), fill)
    pp_comm = 2.0 * (p - 1) * T_C
    pipe = m * X_max + fill + pp_comm

    # -- data-parallel gradient exchange and the optimizer --
    layer_p = model.layer_params()
    emb_p = model.embedding_params()
    head_p = model.head_params() + (model.vocab * h if (model.tied_embeddings and model.kind != "mlp") else 0)
    params_first = (n * layer_p + emb_p + np.where(single, model.head_params(), 0)) / t
    params_last = (n * layer_p + np.where(single, emb_p + model.head_params(), head_p)) / t
    params_stage = np.maximum(params_first, params_last)
    g = d * c  # gradients are reduced over dp x cp (Megatron-LM)
    dp_bw, dp_lat = tier(t * c * d, cluster, gpu)
    grad_bytes = GRAD_COMM_BYTES * params_stage
    dp_raw = np.where(
        zero == 3,
        # ZeRO-3: per micro-batch, all-gather weights for forward and backward, reduce-scatter
        # gradients (Rajbhandari et al. 2020 Sec. 7: 1.5x the all-reduce volume, per pass).
        m * (2.0 * gather_s(WEIGHT_BYTES * params_stage, g, dp_bw, dp_lat)
             + gather_s(grad_bytes, g, dp_bw, dp_lat)),
        # ZeRO 0: all-reduce; ZeRO 1-2: reduce-scatter + all-gather, the same bytes.
        all_reduce_s(grad_bytes, g, dp_bw, dp_lat),
    )
    window = np.where(zero == 3, m * X_max, B_max + W_max)
    dp_exposed = np.where(overlap, np.maximum(dp_raw - window, 0.0), dp_raw)
    shard = np.where(zero >= 1, g, 1)
    opt_s = hbm_s(ADAM_BYTES_TOUCHED * params_stage / shard, gpu)
    step = pipe + dp_exposed + opt_s

    # -- memory per GPU (worst of first and last stage) --
    act_L, score_L = _act_layer_bytes(model, b, t, c, sp)
    act_stored_L = np.where(full, ACT_BYTES * T * h / np.where(sp, t, 1), np.where(sel, act_L - score_L, act_L))
    work_full = np.where(full, act_L, 0.0)  # one layer's full activations while recomputing it
    if model.kind == "mlp":
        emb_act = head_act = np.zeros(len(table))
    else:
        emb_act = ACT_BYTES * T * h / np.where(sp, t, 1) + T * h / np.where(sp, t, 1)  # output + dropout mask
        head_act = 4.0 * T * V / t  # fp32 logits of one micro-batch
    k_first = in_flight(sched, p, m, v, 0)
    k_last = in_flight(sched, p, m, v, p - 1)
    act_first = k_first * (n * act_stored_L + emb_act) + work_full + np.where(single, head_act, 0.0)
    act_last = k_last * (n * act_stored_L + np.where(single, emb_act, 0.0)) + work_full + head_act

    def states(params):
        w = WEIGHT_BYTES * params / np.where(zero == 3, g, 1)
        gr = GRAD_BYTES * params / np.where(zero >= 2, g, 1)
        op = OPTIM_BYTES * params / shard
        return w, gr, op

    buffers_common = (
        np.where(t > 1, 2.0 * ACT_BYTES * T * h, 0.0)
        + np.where(g > 1, 2.0 * GRAD_COMM_BYTES * np.minimum(params_stage, DP_BUCKET_ELEMS), 0.0)
        + np.where(zero == 3, 2.0 * WEIGHT_BYTES * layer_p / t, 0.0)  # two prefetched layers
        + RESERVED_BYTES
    )
    wf, gf, of = states(params_first)
    wl, gl, ol = states(params_last)
    tot_first = wf + gf + of + act_first + buffers_common
    tot_last = wl + gl + ol + act_last + buffers_common
    first_worst = tot_first >= tot_last
    pick = lambda x, y: np.where(first_worst, x, y)  # noqa: E731
    mem_total = np.maximum(tot_first, tot_last)
    reason = np.where((reason == 0) & (mem_total > gpu.hbm_bytes), REASON["out_of_memory"], reason).astype(np.int8)
    feasible = reason == 0

    # -- breakdown on the bottleneck stage (parts add up to the step time) --
    comp_max = np.where(last_is_max, comp_last, comp_first)
    tp_max = np.where(last_is_max, tp_last, tp_first)
    compute = m * comp_max
    recompute = m * re_stage
    tp_comm = m * (tp_max + n * re_tp_L)
    cp_comm = m * n * (cp_L + re_cp_L)
    bubble = fill

    # -- throughput and utilisation --
    flops_model = model.model_flops_per_sample() * B
    re_flops_tok = np.where(
        full, model.layer_fwd_flops_per_token(), np.where(sel, 4.0 * s * h if model.kind != "mlp" else 0.0, 0.0)
    )
    flops_hw = flops_model + L * re_flops_tok * s * B
    inf = np.inf
    step_out = np.where(feasible, step, inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        samples = np.where(feasible, B / step, 0.0)
        mfu = np.where(feasible, flops_model / (step * n_gpu * peak), 0.0)
        hfu = np.where(feasible, flops_hw / (step * n_gpu * peak), 0.0)
        bubble_ratio = np.where(pipe > 0, fill / pipe, 0.0)
    return Metrics(
        step_time_s=step_out,
        compute_s=compute,
        recompute_s=recompute,
        tp_comm_s=tp_comm,
        cp_comm_s=cp_comm,
        pp_comm_s=pp_comm,
        dp_comm_s=dp_exposed,
        bubble_s=bubble,
        optimizer_s=opt_s,
        tokens_per_s=samples * s,
        samples_per_s=samples,
        mfu=mfu,
        hfu=hfu,
        bubble_ratio=bubble_ratio,
        mem_weights_bytes=pick(wf, wl),
        mem_grads_bytes=pick(gf, gl),
        mem_optimizer_bytes=pick(of, ol),
        mem_activations_bytes=pick(act_first, act_last),
        mem_buffers_bytes=buffers_common,
        mem_total_bytes=mem_total,
        microbatches=m.astype(np.int64),
        feasible=feasible,
        reason=reason,
    )
