"""The scalar reference evaluator: one strategy at a time, plain Python, slow and obvious.

Used by tests (row-by-row equality with the vectorised evaluator) and ``plansweep bench`` (the speed ratio). It walks
every stage explicitly, with ifs instead of masks, and imports only named constants and specs from the vectorised
modules.
"""

from __future__ import annotations

import dataclasses
import math

from costmodel import _nccl as nccl
from costmodel._codes import MODULE_BIT, module_code, module_names
from costmodel._collectives import PER_NODE_DISPATCH_NET_EFF
from costmodel._dtypes import ACT_BYTES, GRAD_COMM_BYTES, WEIGHT_BYTES
from costmodel._errors import InputError
from costmodel._experts import (
    CLAMP_ELEMS_BWD,
    CLAMP_ELEMS_FWD,
    CLAMP_KERNELS,
    CLAMP_SAVED_BYTES,
    DEEPEP_SMS,
    EXPERT_BIAS_ELEMS_BWD,
    EXPERT_BIAS_ELEMS_FWD,
    EXPERT_BIAS_KERNELS_PER_LOCAL_EXPERT,
    EXPERT_PHASE_FIXED_KERNELS,
    FP8_DISPATCH_BYTES,
    HOST_S_PER_KERNEL,
    KERNELS_PER_LOCAL_EXPERT,
    KERNELS_PER_SUBLAYER,
    MOE_FIXED_KERNELS,
    P2P_SCHEDULE_GROUP,
    PERMUTE_ELEMS_PER_COPY,
    ROUTER_PROB_BYTES,
    ROUTER_TOPK_BYTES,
    ROUTING_BYTES_PER_SCORE,
    SHARED_EXPERT_KERNELS,
    SORT_ELEMS_PER_COPY,
    P2P_PER_CHANNEL_NET_GBps,
)
from costmodel._feasibility import REASONS, cp_chunks, layout_refused, type_partition_refused
from costmodel._frameworks import framework_preset
from costmodel._hardware import Cluster, attention_head_dim_factor, attention_kernel_eff, attention_noncausal_gain
from costmodel._layer_compute import (
    A2A_COPY_BYTES,
    A2A_EXCHANGES,
    ATTN_HALF_DIM,
    ELEM_BWD_FACTOR,
    ELEM_TF_PER_LAYER,
    ELEM_TH_PER_LAYER,
    FP8_TP_CAST_BYTES,
    TE_FP8_GATHER_BYTES,
    TE_RING_BYTES,
    TE_RING_KERNELS,
    UB_CONFIGS,
    UNFUSED_SCORE_BYTES,
    cp_by_all_to_all,
    cp_refused_for_window,
)
from costmodel._memory_terms import (
    ACT_REPLICATED_H,
    ACT_SCORE_BYTES,
    DP_BUCKET_ELEMS,
    RESERVED_BYTES,
    SOFTMAX_STAT_BYTES,
)
from costmodel._pipeline import interleave_group_size
from costmodel._pipeline_terms import CLOSED_FORM_SCHEDULES, SIMULATED_SCHEDULES, TIE_REL
from costmodel._sms import streaming_multiprocessors
from costmodel._strategy import RECOMPUTE, SCHEDULES
from costmodel._workloads import Transformer


def _link(cluster: Cluster, span: int, whole_job: bool = False) -> tuple[float, float]:
    gpu = cluster.gpu
    # inside a node only if every group of the layout is: span divides the node's GPUs (the pipeline's hand-offs: the
    # whole job fits one node)
    if span <= cluster.gpus_per_node and (whole_job or cluster.gpus_per_node % span == 0):
        return cluster.scaleup_Bps * gpu.link_eff, cluster.scaleup_latency_s
    return cluster.scaleout_Bps * gpu.link_eff, cluster.scaleout_latency_s


def _allreduce(nbytes: float, n: int, link: tuple[float, float]) -> float:
    if n <= 1:
        return 0.0
    bw, lat = link
    return 2 * (n - 1) / n * nbytes / bw + 2 * (n - 1) * lat


def _gather(nbytes: float, n: int, link: tuple[float, float]) -> float:
    if n <= 1:
        return 0.0
    bw, lat = link
    return (n - 1) / n * nbytes / bw + (n - 1) * lat


def _collective_link(cluster: Cluster, stride: int, size) -> tuple:
    """(bandwidth, latency inside a node, latency across nodes, nodes, ranks per node, LL's ceiling in one node) of an
    NCCL collective over a group of ``size`` ranks ``stride`` apart (the data-parallel exchange; costmodel._collectives
    module docstring)."""
    G, eff = cluster.gpus_per_node, cluster.gpu.link_eff
    up, out = cluster.scaleup_Bps, cluster.scaleout_Bps
    up_l, out_l = cluster.scaleup_latency_s, cluster.scaleout_latency_s
    ll = nccl.ll_one_node_Bps(cluster.gpu.name)
    span = stride * size
    if span <= G and G % span == 0:  # inside a node
        return up * eff, up_l, up_l, 1, size, ll
    if stride % G == 0:  # one rank per node
        return out * eff, up_l, out_l, size, 1, ll
    if G % stride == 0 and span % G == 0:  # g ranks on each node the group spans: the node's NICs at once
        g = G // stride
        return min(g * out, g / max(g - 1, 1) * up) * eff, up_l, out_l, size // g, g, ll
    slow = max(up_l, out_l)  # groups across node boundaries unevenly: the slower tier on every step
    return min(up, out) * eff, slow, slow, size, 1, ll


def _collective(kind: str, nbytes: float, msg_bytes: float, n, link: tuple) -> float:
    """Seconds of collectives moving ``nbytes`` (whole buffers) over n ranks in messages of ``msg_bytes``, by NCCL's
    fastest algorithm and protocol for the message, without their latencies (_collective_latency)."""
    return _collective_choice(kind, msg_bytes, n, link)[0] * nbytes


def _collective_latency(kind: str, msg_bytes: float, n, link: tuple) -> float:
    return _collective_choice(kind, msg_bytes, n, link)[1]


def _ll_ceiling(nodes: int, ll_one_node: float) -> float:
    if nodes == 1:
        return ll_one_node
    return (nccl.LL_MAX_TWO_NODES_GBps if nodes == 2 else nccl.LL_MAX_NODES_GBps) * 1e9


def _nvlink_hop(up_l: float, algo: str, p: int) -> float:
    """Seconds of one NVLink hop of NCCL's ``algo`` under protocol p on a node whose scale-up step is ``up_l``: the
    measured ring LL hop (1.98 us where the step is the measured node's 5 us), scaled by the step, times NCCL's table
    hop over its ring LL hop."""
    ring_ll_s = nccl.NVLINK_RING_LL_HOP_US * 1e-6 * up_l / (nccl.MEASURED_NODE_SCALEUP_US * 1e-6)
    return ring_ll_s * nccl.NVLINK_HOP_US[algo][p] / nccl.NVLINK_HOP_US["ring"][nccl.LL]


def _ring_choice(kind: str, n, link: tuple, p: int) -> tuple[float, float]:
    """(seconds per byte, seconds per call) of NCCL's ring under protocol p (costmodel._collectives._ring)."""
    bw, up_l, out_l, nodes, per_node, ll = link
    bw_p = (min(nccl.RING_LL_SHARE * bw, _ll_ceiling(nodes, ll)) if p == nccl.LL
            else nccl.RING_LL128_SHARE * bw if p == nccl.LL128 else bw)
    passes = 2 if kind == "all_reduce" else 1
    per_byte = 1 / bw_p if kind == "broadcast" else passes * (n - 1) / n / bw_p
    hop_up = _nvlink_hop(up_l, "ring", p)
    if nodes > 1:  # the proxy's post overhead on every hop of a ring across nodes
        hop_up = max(hop_up, nccl.NET_OVERHEAD_US * 1e-6 * (3 if p == nccl.SIMPLE else 1))
    net = nccl.NET_HOP_US["tree" if per_node == 1 else "ring"][p] / nccl.NET_HOP_US["ring"][nccl.SIMPLE]
    lat = nccl.BASE_US["ring"][p] * 1e-6 + passes * ((n - nodes) * hop_up + (nodes - 1) * out_l * net)
    if kind == "all_reduce" and p == nccl.SIMPLE and nodes > 1:
        lat *= nccl.RING_SIMPLE_PLATEAU
    return per_byte, lat


def _tree_choice(msg_bytes: float, n, link: tuple, p: int) -> tuple[float, float]:
    """NCCL's tree all-reduce under protocol p (costmodel._collectives._tree), its bandwidth corrected for the
    message (treeCorrectionFactor)."""
    bw, up_l, out_l, nodes, per_node, ll = link
    bw_p = nccl.TREE_SHARE * bw
    if p == nccl.LL:
        bw_p = min(bw_p / nccl.TREE_LL_DIVISOR, _ll_ceiling(nodes, ll))
    elif p == nccl.LL128:
        bw_p *= nccl.TREE_LL128_SHARE_ONE_NODE if nodes == 1 else nccl.TREE_LL128_SHARE_NODES
    size = math.floor(math.log2(msg_bytes / 64)) if 64 <= msg_bytes < math.inf else -1
    if 0 <= size < 23:
        bw_p *= nccl.TREE_CORRECTION[p][size]
    hops = ((per_node - 1) * _nvlink_hop(up_l, "tree", p)
            + math.floor(math.log2(nodes)) * out_l * nccl.NET_HOP_US["tree"][p] / nccl.NET_HOP_US["ring"][nccl.SIMPLE])
    return 2 / bw_p, nccl.BASE_US["tree"][p] * 1e-6 + 2 * hops


def _collective_choice(kind: str, msg_bytes: float, n, link: tuple) -> tuple[float, float]:
    """(seconds per byte, seconds per call) of one collective: the ring under LL, LL128 or Simple, or the tree under
    each (all-reduce), or PAT (all-gather / reduce-scatter, one rank per node), whichever NCCL's tuning model finds
    fastest for the message; "broadcast": the ring alone, its message at the bus bandwidth."""
    if n <= 1:
        return 0.0, 0.0
    bw, up_l, out_l, nodes, per_node, ll = link
    options = [_ring_choice(kind, n, link, p) for p in (nccl.LL, nccl.LL128, nccl.SIMPLE)]
    if kind == "all_reduce":
        options += [_tree_choice(msg_bytes, n, link, p) for p in (nccl.LL, nccl.LL128, nccl.SIMPLE)]
    if kind == "gather" and per_node == 1 and nodes > 1:
        rank_hop = nccl.PAT_RANK_LATENCY_US / nccl.NET_HOP_US["tree"][nccl.SIMPLE] * out_l  # a fifth of the network's
        options.append((1 / (nccl.PAT_SHARE * bw), nccl.BASE_US["pat"][nccl.SIMPLE] * 1e-6
                        + math.floor(math.log2(nodes)) * out_l / nccl.PAT_LOG_LATENCY_DIVISOR + n * rank_hop))
    return min(options, key=lambda o: o[0] * msg_bytes + o[1])


def _util(gpu, *dims: float) -> float:
    u = gpu.gemm_eff_max
    for x in dims:
        u *= x / (x + gpu.gemm_half_dim)
    return u


def _gemm(gpu, peak: float, M: float, N: float, Kd: float) -> float:
    flop_time = 2 * M * N * Kd / (peak * _util(gpu, M, N, Kd))
    mem_time = ACT_BYTES * (M * Kd + Kd * N + M * N) / (gpu.hbm_Bps * gpu.hbm_eff)
    return max(flop_time, mem_time)


def _hbm(gpu, nbytes: float) -> float:
    return nbytes / (gpu.hbm_Bps * gpu.hbm_eff)


def _reason(model: Transformer, cluster: Cluster, r: dict, fw) -> str:
    dp, tp, pp, cp = r["dp"], r["tp"], r["pp"], r["cp"]
    if dp * tp * pp * cp > cluster.num_gpus:
        return "gpus_exceed_cluster"
    if model.kind == "mlp":
        if model.hidden % tp:
            return "tp_not_divide_heads"
    elif model.heads % tp or model.kv_heads % tp:
        return "tp_not_divide_heads"
    ep, etp = r.get("ep", 1), r.get("etp", 1)
    if model.experts % ep or (dp * cp * tp) % (ep * etp) or (etp > 1 and (not model.is_moe or model.expert_ffn % etp)):
        return "ep_invalid"
    layers = r.get("stage_layers")
    if layers is None:
        if model.layers % pp:
            return "pp_not_divide_layers"
        layers = [model.layers // pp] * pp
    elif len(layers) != pp or sum(layers) != model.layers or min(layers) < 1:
        return "pp_not_divide_layers"
    if cp > 1 and model.seq_len % (cp_chunks(fw) * cp):
        return "cp_not_divide_seq"
    if r["global_batch"] % (dp * r["micro_batch"]):
        return "batch_not_divide"
    sched, v = r["schedule"], r["vpp"]
    if sched in ("interleaved", "zb-v", "hanayo"):
        # (uneven chunks: the interleaved model's first chunk may be the embedding alone, its last the loss alone)
        ends = [sched == "interleaved" and j in (0, pp - 1) for j in range(pp)]
        if v < 2 or pp < 2 or (any(n < v - e for n, e in zip(layers, ends, strict=True)) if fw.uneven_chunks
                               else any(n % v for n in layers)):
            return "schedule_invalid"
        if sched == "zb-v" and v != 2:
            return "schedule_invalid"
        if sched == "hanayo" and v % 2:
            return "schedule_invalid"
    elif v != 1:
        return "schedule_invalid"
    if r["zero_stage"] > fw.max_zero_with_pp and pp > 1:
        return "zero_incompatible_pp"
    if (sched not in fw.schedules or r["zero_stage"] > fw.max_zero
            or layout_refused(fw, model, r["zero_stage"], tp, cp, ep, etp, r["sequence_parallel"], pp,
                               dp) is not None
            or (r["sequence_parallel"] and not fw.sequence_parallel)
            or (r["precision"] == "fp8" and not fw.fp8) or (r.get("ep", 1) > 1 and not fw.expert_parallel)
            or (r.get("etp", 1) > 1 and not fw.expert_tensor_parallel)
            or (ep > 1 and r["precision"] == "fp16" and not fw.ep_fp16)
            or (ep > 1 and pp > 1 and fw.overlap_ep and fw.overlap_ep_steady_only and sched != "interleaved")
            or (cp > 1 and cp_by_all_to_all(fw, model) and ((model.heads // tp) % cp or (model.kv_heads // tp) % cp))
            or (cp > 1 and cp_refused_for_window(fw, model))
            or type_partition_refused(fw, model, layers)):
        return "framework_unsupported"  # (Transformer Engine's all-to-all splits the tp share of the heads over cp;
        # Framework.cp_sdpa_only: no cp for a windowed model)
    m, rule = max(r["global_batch"] // (dp * r["micro_batch"]), 1), fw.interleaved_microbatches
    if sched == "interleaved" and ((rule == "pp_multiple" and m % pp) or (rule == "at_least_pp" and m < pp)
                                   or (rule == "pytorch_rounds" and m >= pp and m % (m // pp))):
        return "framework_unsupported"  # costmodel._frameworks.INTERLEAVED_MICROBATCHES: what each framework runs
    return "ok"


def _widths(model: Transformer) -> tuple[float, float, float, float]:
    """Q, K, V and attention-output widths of one layer (MLA, DeepSeek's names: Q and K heads x
    (qk_nope + qk_rope), V and the output heads x v_head_dim)."""
    if not model.mla:
        return model.q_hidden, model.kv_hidden, model.kv_hidden, model.q_hidden
    qk = model.heads * (model.head_size + model.qk_rope_head_dim)
    v = model.heads * (model.v_head_dim or model.head_size)
    return qk, qk, v, v


def _projections(model: Transformer, gpu, peak: float, T: float, tp: int, ew_div: int) -> tuple[float, float]:
    """The attention's projection GEMMs on one rank, and (MLA) the part the up-projections take. MLA: Q down to
    q_lora_rank and up to Q (or one h -> Q), K/V down to kv_lora_rank + rope and up to the heads' nope keys and values,
    output from V's width; the down-projections whole on every rank, over its sequence slice under SP."""
    h = model.hidden
    qw, kw, vw, ow = _widths(model)
    if not model.mla:
        return _gemm(gpu, peak, T, (qw + kw + vw) / tp, h) + _gemm(gpu, peak, T, h, ow / tp), 0.0
    r, kv, dr = model.q_lora_rank, model.kv_lora_rank, model.qk_rope_head_dim
    if r is None:
        down, up = 0.0, _gemm(gpu, peak, T, qw / tp, h)
    else:
        down, up = _gemm(gpu, peak, T / ew_div, r, h), _gemm(gpu, peak, T, qw / tp, r)
    down += _gemm(gpu, peak, T / ew_div, kv + dr, h)
    up += _gemm(gpu, peak, T, model.heads * model.head_size / tp + vw / tp, kv)
    return down + up + _gemm(gpu, peak, T, h, ow / tp), up


def _is_moe_layer(model: Transformer, j: int) -> bool:
    """Layer j (from 0) is an MoE layer: after the dense layers, every moe_layer_freq-th one."""
    return model.is_moe and j >= model.dense_layers and (j - model.dense_layers) % model.moe_layer_freq == (
        model.moe_layer_freq - 1)


def _a2a_ctas(cluster: Cluster, n: int, stride: int) -> int:
    """CTAs of NCCL's all-to-all over n ranks ``stride`` apart: the channels its p2p schedule touches (NCCL's loops as
    written: p2p channels pow2Up of the ring's; per op halved to fit the peers; bases by round or schedule group)."""
    def pow2_up(x):
        return 1 << max(int(math.ceil(x)) - 1, 0).bit_length()

    local = min(n, max(cluster.gpus_per_node // stride, 1))
    across = n > local
    p2p = pow2_up(nccl.ring_channels(across, local, *nccl.ring_channel_table(cluster.gpu.name)))
    if across:
        per_op = pow2_up(math.ceil(cluster.scaleout_Bps / (P2P_PER_CHANNEL_NET_GBps * 1e9)))
        while per_op * math.ceil(n / P2P_SCHEDULE_GROUP) > p2p and per_op > 1:
            per_op //= 2
        bases = math.ceil(n / math.gcd(P2P_SCHEDULE_GROUP, local))
    else:
        per_op = p2p
        while per_op * n > p2p and per_op > 1:
            per_op //= 2
        bases = n
    return min(p2p, bases * per_op)


def _all_to_all(cluster: Cluster, nbytes: float, n: int, net_bytes: float | None = None, stride: int = 1) -> float:
    """Each of n consecutive ranks sends nbytes spread evenly over the n: the share to the other ranks of its node on
    NVLink, the share to other nodes on the network, at the same time. With ``net_bytes`` (a per-node dispatcher): those
    bytes on the network at PER_NODE_DISPATCH_NET_EFF of it, every copy leaving the GPU on NVLink."""
    if n <= 1:
        return 0.0
    peers = min(n, max(cluster.gpus_per_node // stride, 1)) - 1  # the group's other ranks in this node
    share = nbytes / n  # what each destination rank gets
    link_eff = net_eff = cluster.gpu.link_eff
    if net_bytes is None:
        nvlink, network = peers * share, (n - 1 - peers) * share
    else:  # (DeepEP's kernels move the network's bytes at their own measured share of it)
        nvlink, network, net_eff = (n - 1) * share, net_bytes, PER_NODE_DISPATCH_NET_EFF
    seconds = max(nvlink / (cluster.scaleup_Bps * link_eff), network / (cluster.scaleout_Bps * net_eff))
    return seconds + (cluster.scaleout_latency_s if n - 1 > peers else cluster.scaleup_latency_s)


def _remote_nodes(model: Transformer, nodes: int) -> float:
    """Expected other nodes among ``nodes`` (each holding E / nodes consecutive experts) that a token's k experts reach.
    Group-limited routing: the token picks M of the G groups (all choices alike) and takes k / M experts of each picked
    group (all choices alike). A node misses the token when none of the k is among its experts."""
    E, k = model.experts, model.experts_per_token
    G, M = model.router_groups, model.router_group_topk
    if nodes == 1:
        return 0.0

    def none_of(pool, mine, draws):  # P(draws without repeats from pool experts avoid ``mine`` of them)
        p = 1.0
        for i in range(draws):
            p *= max((pool - mine - i) / (pool - i), 0.0)
        return p

    if M == G or (G % nodes and nodes % G):  # no limit, or groups not aligned with nodes: no limit priced
        miss = none_of(E, E / nodes, k)
    elif G % nodes == 0:  # the node holds G / nodes whole groups: it misses when none of them is picked
        miss = math.comb(G - G // nodes, M) / math.comb(G, M)
    else:  # the node is a part of one group: that group not picked, or picked and its share missed
        miss = (1 - M / G) + M / G * none_of(E / G, E / nodes, k // M)
    return (nodes - 1) * (1 - miss)


def _moe_tp(model: Transformer, dense_tp: float) -> float:
    """An MoE layer's tensor-parallel exchange from a dense layer's (attention and MLP): the attention's half, and the
    MLP's half too where shared experts run as a tensor-parallel MLP; the routed experts exchange over the
    expert-tensor-parallel group only (Megatron-Core's token dispatcher: tp_group = expt_tp)."""
    return dense_tp * (1.0 if model.shared_experts else 0.5)


def _moe_layer(model: Transformer, cluster: Cluster, fw, peak: float, T: float, tp: int, ep: int, sp: bool,
               attn: float, overhead: float, etp: int = 1, fp8: bool = False) -> dict:
    """One MoE layer's forward GEMM, element-wise and overhead time, its experts' fp8 quantization forward and backward,
    its exposed all-to-all (each direction, with the etp group's all-gather and reduce-scatter), its activation bytes
    without the score term."""
    gpu = cluster.gpu
    h, E = model.hidden, model.experts
    fe, mats = model.expert_ffn, model.mlp_matrices
    fs = model.shared_experts * model.shared_expert_ffn
    copies = model.capacity_factor * model.experts_per_token * T / tp  # on the busiest rank
    local = E / ep  # experts on this GPU, each etp-th of its width
    rows = etp * copies / local  # every copy the etp group received, after its all-gather
    ew_div = tp if sp else 1
    a_gemm = _projections(model, gpu, peak, T, tp, ew_div)[0] + _gemm(gpu, peak, T / tp, E, h)  # with the router
    m_gemm = local * (_gemm(gpu, peak, rows, (mats - 1) * fe / etp, h) + _gemm(gpu, peak, rows, h, fe / etp))
    if fs:
        m_gemm += _gemm(gpu, peak, T, (mats - 1) * fs / tp, h) + _gemm(gpu, peak, T, h, fs / tp)
    # router (bytes per token and expert), permute and unpermute (elements a copy; unpermute writes each token); the
    # sort by local expert and back (when there is more than one), the activation
    elem_a = _hbm(gpu, ACT_BYTES * (ELEM_TH_PER_LAYER * T * h / ew_div + PERMUTE_ELEMS_PER_COPY * copies * h
                                    + T * h / tp) + ROUTING_BYTES_PER_SCORE * T * E / tp)
    elem_m = _hbm(gpu, ACT_BYTES * (ELEM_TF_PER_LAYER[model.activation] * (T * fs / tp + copies * fe)
                                    + (SORT_ELEMS_PER_COPY * etp * copies * h if local > 1 else 0)))
    cast = fw.expert_fp8_cast_bytes if fp8 else 0.0
    xcast_f = _hbm(gpu, cast * (etp * copies * h + copies * fe))
    xcast_b = _hbm(gpu, cast * (copies * (mats - 1) * fe + etp * copies * h))
    if fp8 and fs:  # the shared experts' linear layers cast as the dense layer's, their inputs 16-bit norm outputs
        cx, cw, cg, cwb = fw.fp8_cast_bytes
        x_in = T * (h * fw.fp8_norm_input_casts[1] + fs / tp)  # (each FC1 / gate layer casting the input itself)
        xcast_f += _hbm(gpu, cx * x_in + cw * mats * h * fs / tp)
        xcast_b += _hbm(gpu, cg * T * ((mats - 1) * fs / tp + h) + cwb * mats * h * fs / tp
                        + fw.fp8_recast_input_bytes * x_in)
    # the experts' element-wise work outside their fused kernels: a clamped activation's clamps and cat (elements of
    # the expert's width a copy), the framework's FC2 bias loop over the local experts (elements of h a row of the FC2
    # output, etp x copies rows), riding with the quantization; their kernels
    clamp, loop = model.glu_clamp is not None, fw.expert_bias_loop and model.bias
    clamp_f = CLAMP_ELEMS_FWD * copies * fe if clamp else 0.0
    xcast_f += _hbm(gpu, ACT_BYTES * (clamp_f + (EXPERT_BIAS_ELEMS_FWD * etp * copies * h if loop else 0.0)))
    xcast_b += _hbm(gpu, ACT_BYTES * ((CLAMP_ELEMS_BWD * copies * fe if clamp else 0.0)
                                      + (EXPERT_BIAS_ELEMS_BWD * etp * copies * h if loop else 0.0)))
    extra = (CLAMP_KERNELS if clamp else 0) + (EXPERT_BIAS_KERNELS_PER_LOCAL_EXPERT * local + 1 if loop else 0)
    # kernels: the attention sub-layer's unit, the fixed ones, the shared experts', per local expert (twice under fp8),
    # the element-wise work's above
    kernels = MOE_FIXED_KERNELS + (SHARED_EXPERT_KERNELS if fs else 0) + KERNELS_PER_LOCAL_EXPERT * local * (
        2 if cast > 0 else 1) + extra
    units = 1 + kernels / KERNELS_PER_SUBLAYER
    host_f = units * KERNELS_PER_SUBLAYER * HOST_S_PER_KERNEL  # the host's launches of the layer's forward
    remote = _remote_nodes(model, max(min(ep, math.ceil(ep * etp / cluster.gpus_per_node)), 1))
    # dispatch (fp8 with 1 x 128 fp32 scales where the framework sends it so and the row runs fp8) and combine
    d_bytes = FP8_DISPATCH_BYTES if (fw.fp8_dispatch and fp8) else ACT_BYTES
    one = []
    for nbytes in (d_bytes, ACT_BYTES):
        # a per-node dispatcher sends each token once to every other node holding one of its k experts
        net = nbytes * (copies / model.experts_per_token) * h * remote if fw.ep_dispatch_per_node else None
        one.append(_all_to_all(cluster, nbytes * copies * h, ep, net, stride=etp)
                   + _gather(ACT_BYTES * etp * copies * h, etp, _link(cluster, etp)))  # etp all-gather / reduce-scatter
    a_d, a_c = one
    # the expert phase after the host's wait: its kernels' launches against the dispatch and their GPU time (the
    # expert GEMMs, their element-wise kernels but the unsort, their quantization, their launches' GPU share)
    x_kernels = (EXPERT_PHASE_FIXED_KERNELS + (SHARED_EXPERT_KERNELS if fs else 0)
                 + KERNELS_PER_LOCAL_EXPERT * local * (2 if cast > 0 else 1) + extra)
    sort_s = _hbm(gpu, ACT_BYTES * SORT_ELEMS_PER_COPY * etp * copies * h) if local > 1 else 0.0
    gpu_x = m_gemm + elem_m - sort_s / 2 + xcast_f + overhead / 2 * x_kernels / KERNELS_PER_SUBLAYER
    host_x = max(x_kernels * HOST_S_PER_KERNEL - a_d - gpu_x, 0.0) if not fw.overlap_ep else 0.0
    # the backward's expert phase: its launches less its GPU time (dgrad and wgrad, the rest twice, the casts backward)
    xb_q = 2 * x_kernels * HOST_S_PER_KERNEL - (2 * m_gemm + 2 * (gpu_x - m_gemm - xcast_f) + xcast_b)
    if fw.overlap_ep:  # the 1F1B pair: comm stream combine-bwd, dispatch-fwd, dispatch-bwd, combine-fwd
        sub = overhead / 2  # one sub-layer's kernel overhead
        Af = a_gemm + attn + elem_a + sub
        Mf = m_gemm + elem_m + sub * (units - 1) + xcast_f
        Ab = 2 * (a_gemm + attn + elem_a + sub)
        Mb = m_gemm + 2 * (elem_m + sub * (units - 1)) + xcast_b
        Mw = m_gemm
        start = max(Af, a_d)
        mb_end, df_end = start + Mb, start + a_d
        db_end = max(mb_end, df_end) + a_c
        mf_end = max(df_end, mb_end + Mw) + Mf
        end = max(max(mf_end, db_end) + a_c, max(mf_end, db_end) + Ab)
        exposed = end - (Af + Mf + Ab + Mb + Mw)
        ctas = DEEPEP_SMS if fw.ep_dispatch_per_node else _a2a_ctas(cluster, ep, etp)
        frac = ctas / streaming_multiprocessors(gpu.name)
        a2a = (exposed + frac * max(2 * (a_d + a_c) - exposed, 0.0)) / 2
    else:
        a2a = a_d + a_c
    ep_x = a_d + a_c - a2a  # an unpaired pass's all-to-alls exposed beyond a paired one's
    coef = 6 if model.gated else 4
    clamp_kept = CLAMP_SAVED_BYTES if model.glu_clamp is not None else 0.0  # the clamp's cat output
    experts = (coef * T * fs / tp + copies * (ACT_BYTES * h * etp + (coef + clamp_kept) * fe)
               + ROUTER_PROB_BYTES * E * T / tp)
    act = (ACT_REPLICATED_H * T * h / ew_div + _latent_bytes(model, T, ew_div)
           + (2 * T * sum(_widths(model)) + coef * T * fs) / tp
           + copies * (ACT_BYTES * h * etp + (coef + clamp_kept) * fe) + ROUTER_PROB_BYTES * E * T / tp)
    # what the recompute modules run again: the MoE block's forward (moe), the experts' activation (moe_act), the shared
    # experts' forward (shared_experts)
    permute = _hbm(gpu, ACT_BYTES * PERMUTE_ELEMS_PER_COPY * copies * h + ACT_BYTES * T * h / tp
                   + ROUTING_BYTES_PER_SCORE * T * E / tp)  # routing, permute and unpermute
    moe_f = _gemm(gpu, peak, T / tp, E, h) + m_gemm + permute + elem_m + overhead / 2 * (units - 1) + xcast_f
    act_f = _hbm(gpu, ACT_BYTES * (ELEM_TF_PER_LAYER[model.activation] * copies * fe + clamp_f))
    shared_f = 0.0
    if fs:
        shared_f = (_gemm(gpu, peak, T, (mats - 1) * fs / tp, h) + _gemm(gpu, peak, T, h, fs / tp)
                    + _hbm(gpu, ACT_BYTES * ELEM_TF_PER_LAYER[model.activation] * T * fs / tp))
        if fp8:
            cx, cw = fw.fp8_cast_bytes[:2]
            shared_f += _hbm(gpu, cx * T * (h * fw.fp8_norm_input_casts[1] + fs / tp) + cw * mats * h * fs / tp)
    return dict(gemm=a_gemm + m_gemm, elem=elem_a + elem_m, overhead=overhead / 2 * units, xcast_f=xcast_f,
                xcast_b=xcast_b, ep=a2a, ep_x=ep_x, act=act, experts=experts, copies=copies, host_f=host_f,
                host_x=host_x, xb_q=xb_q, xb_a=a_c,
                moe_f=moe_f, act_f=act_f, shared_f=shared_f)


def _latent_bytes(model: Transformer, T: float, ew_div: int) -> float:
    """MLA: each latent (Q's, K/V's with the rope key) before and after its norm, 16 bits, whole on
    every rank (over its sequence slice under SP)."""
    widths = (model.q_lora_rank or 0) + model.kv_lora_rank + model.qk_rope_head_dim if model.mla else 0.0
    return 2 * ACT_BYTES * T * widths / ew_div


def _in_flight(sched: str, p: int, m: int, v: int, i: int, extra: int = 0) -> float:
    """Micro-batches stage i holds at its peak; ``extra``: warm-up chunks an interleaved schedule adds (one under
    Megatron-Core's EP A2A overlap of an MoE model)."""
    if sched == "gpipe":
        return float(m)
    if sched == "interleaved":  # Megatron-LM's warm-up with group size N (p where p divides m), then one forward
        return min((p - i - 1) * 2 + (v - 1) * interleave_group_size(p, m) + 1 + extra, m * v) / v
    if sched == "zb-h1":
        return float(min(p, m))
    if sched == "zb-h2":
        return float(min(2 * p - 1, m))
    return float(min(p - i, m))


@dataclasses.dataclass(frozen=True)
class _Row:
    """One strategy's numbers as the reference reads them (ZeRO and overlap as the framework prices them)."""

    dp: int
    tp: int
    pp: int
    cp: int
    b: int
    B: int
    v: int
    sched: str
    sp: bool
    zero: int
    overlap: bool
    prec: int  # 0 bf16, 1 fp16, 2 fp8
    fp8: bool  # the row's precision is fp8
    peak: float  # FLOP/s of the linear layers at the row's precision
    peak16: float  # the attention core and head in 16 bits (FP8_IN_16_BIT)
    m: int
    layers: list
    recomputes: list
    T: float  # tokens of a micro-batch on one rank
    sc: float  # a sequence's tokens on one rank
    ew_div: int  # element-wise work split over tp under SP only
    tp_link: tuple
    ep: int
    etp: int
    extra: int  # warm-up chunks an interleaved schedule adds (Megatron-Core's EP A2A overlap of an MoE model)
    steady_only: bool  # that overlap pairs passes in the steady state only (Framework.overlap_ep_steady_only)
    blocking: bool  # its 1F1B without interleaving waits on each hand-off (Framework.blocking_p2p)
    calls: int  # a blocking steady-state exchange's transfers, one after the other (Framework.exchange_calls)
    lockstep: bool  # its interleaved schedule is torch's grid of waited steps (Framework.lockstep_interleaved)
    modules: int = 0  # Megatron-Core's recompute modules (costmodel._codes.RECOMPUTE_MODULES bits; 0: the policy)


def _row(model: Transformer, cluster: Cluster, r: dict, fw) -> _Row:
    gpu = cluster.gpu
    dp, tp, pp, cp, b, zero = r["dp"], r["tp"], r["pp"], r["cp"], r["micro_batch"], r["zero_stage"]
    prec = ("bf16", "fp16", "fp8").index(r["precision"])
    if fw.shard_with_pp_once and pp > 1 and zero >= 2:
        zero = 1  # weights gathered and gradients reduce-scattered once per step: ZeRO-1's bytes
    return _Row(dp=dp, tp=tp, pp=pp, cp=cp, b=b, B=r["global_batch"], v=r["vpp"], sched=r["schedule"],
                sp=r["sequence_parallel"], zero=zero,
                overlap=(fw.overlap_dp[0] if len(fw.overlap_dp) == 1 else r["overlap_dp"])
                and zero >= fw.overlap_dp_min_zero, prec=prec,
                fp8=r["precision"] == "fp8",
                peak=gpu.peak_flops[prec] if gpu.peak_flops[prec] > 0 else gpu.peak_flops[0],
                peak16=gpu.peak_flops[0 if prec == 2 else prec], m=max(r["global_batch"] // (dp * b), 1),
                layers=r.get("stage_layers") or [model.layers // pp] * pp,
                recomputes=r.get("stage_recompute") or [r["recompute"]] * pp, T=b * model.seq_len / cp,
                sc=model.seq_len / cp, ew_div=tp if r["sequence_parallel"] else 1, tp_link=_link(cluster, tp),
                ep=r.get("ep", 1), etp=r.get("etp", 1), extra=1 if fw.overlap_ep and model.is_moe else 0,
                steady_only=fw.overlap_ep_steady_only, blocking=fw.blocking_p2p, calls=fw.exchange_calls,
                lockstep=fw.lockstep_interleaved, modules=module_code(r.get("recompute_modules") or 0))


def _check_modules(model: Transformer, fw, code: int) -> None:
    """InputError naming recompute_modules where the row names Megatron-Core recompute modules that its profile has
    not (Framework.recompute_modules), or names them for an MLP stack, or names mla_up_proj for a model without
    multi-head latent attention: the inputs the vectorised evaluator refuses too, checked on the one row."""
    if not code:
        return
    if not fw.recompute_modules:
        raise InputError("recompute_modules", f"none under framework {fw.name} (Megatron-Core's --recompute-modules)",
                         module_names(code))
    if model.kind == "mlp":
        raise InputError("recompute_modules", "none for an MLP stack (they name transformer layer modules)",
                         module_names(code))
    if code & MODULE_BIT["mla_up_proj"] and not model.mla:
        raise InputError("recompute_modules", "mla_up_proj only on a model with multi-head latent attention",
                         module_names(code))


def evaluate_row(model: Transformer, cluster: Cluster, r: dict, pipeline: str = "closed_form",
                 framework=None) -> dict:
    """Metrics of one strategy ``r`` (a dict as StrategyTable.row gives) as plain floats.

    With pipeline="simulate" (and always for ZB-V and Hanayo) the pipeline time and the
    micro-batches in flight come from one call of the schedule simulator for this row."""
    fw = framework_preset(framework)
    _check_modules(model, fw, module_code(r.get("recompute_modules") or 0))
    reason = _reason(model, cluster, r, fw)
    row = _row(model, cluster, r, fw)
    lay = _framework_layer(model, cluster, row, fw, _dense_layer(model, cluster, row, fw))
    edge = {**_edges(model, cluster, row, fw), **_handoff_gathers(model, cluster, row, fw)}
    act = _activations(model, row, fw)
    moe = _moe(model, cluster, row, fw, lay, act) if model.is_moe else None
    named = _named_modules(model, cluster, row, fw, lay, act, moe) if row.modules and model.kind != "mlp" else None
    stages = _stages(model, row, lay, edge, act, moe, named)
    pipe = _pipeline(model, cluster, row, stages, reason, pipeline)
    dp = _data_parallel(model, cluster, row, fw, stages, pipe)
    mem = _memory(model, cluster, row, fw, stages, moe, dp["params_max"])
    if reason == "ok" and mem["total"] > cluster.gpu.hbm_bytes:
        reason = "out_of_memory"
    return {**_report(model, row, reason, pipe, dp, mem, _hardware_flops(model, row, fw, act)),
            "mem_device_bytes": cluster.gpu.hbm_bytes}


def _dense_layer(model: Transformer, cluster: Cluster, row: _Row, fw) -> dict:
    """One dense layer, one micro-batch: its GEMMs, attention core, element-wise, overhead, tp and cp comm."""
    gpu, h, s, f = cluster.gpu, model.hidden, model.seq_len, model.ffn_hidden
    tp, cp, T, sc = row.tp, row.cp, row.T, row.sc
    if model.kind == "mlp":
        return dict(gemm=_gemm(gpu, row.peak, T, h / tp, h), attn=0.0, up=0.0,
                    elem=_hbm(gpu, ACT_BYTES * 2 * T * h / tp),
                    tp_fwd=0.5 * _allreduce(ACT_BYTES * T * h, tp, row.tp_link), cp_fwd=0.0, cp_bwd=0.0,
                    overhead=0.5 * gpu.kernel_overhead_s, cp_link=None)
    mats = model.mlp_matrices
    qw, _, _, ow = _widths(model)
    q = (qw + ow) / 2  # QK^T over Q's width, AV over the output's (h unless head_dim is set)
    dh = q / model.heads  # a head's size (MLA: the mean of its query and value sizes)
    proj, up = _projections(model, gpu, row.peak, T, tp, row.ew_div)
    gemm = proj + _gemm(gpu, row.peak, T, (mats - 1) * f / tp, h) + _gemm(gpu, row.peak, T, h, f / tp)
    half, a2a = ATTN_HALF_DIM, cp_by_all_to_all(fw, model)
    rows = s if a2a else sc  # under the all-to-all the kernel runs the whole sequence on 1 / cp of the heads
    edges = (rows / (rows + half)) * (s / (s + half))
    rates = [r * g for r, g in zip(attention_kernel_eff(gpu.name, fw.attention_kernel),
                                   attention_head_dim_factor(gpu.name, fw.attention_kernel, dh), strict=True)]
    x = min(max(math.log2(rows / 512), 0.0), 5.0)
    kernel = rates[min(int(x), 4)] + (x - min(int(x), 4)) * (rates[min(int(x) + 1, 5)] - rates[min(int(x), 4)])
    if kernel > 0:  # a measured fused kernel: the causal half of the square at its rate at that length, a cp ring's
        # off-diagonal (1 - 1 / cp) of it in non-causal kernels at their gain over that rate
        g = attention_noncausal_gain(gpu.name, fw.attention_kernel)
        gain = g[min(int(x), 4)] + (x - min(int(x), 4)) * (g[min(int(x) + 1, 5)] - g[min(int(x), 4)])
        # sliding-window layers (a share w of them): their band's tiles in masked kernels at the causal rate
        w = model.windowed_layers / model.layers
        ring = (1.0 if a2a else 1 / cp + (1 - 1 / cp) / gain) * (1 - w) + (model.attention_time_share - (1 - w))
        attn = 2 * row.b * sc * s * q / tp / (row.peak16 * kernel) * ring
    else:
        attn = (4 * row.b * sc * s * q / tp / (row.peak16 * gpu.gemm_eff_max * edges * (dh / (dh + half)))
                * model.attention_time_share)
    tf_elems = ELEM_TF_PER_LAYER[model.activation]
    elem = _hbm(gpu, ACT_BYTES * (ELEM_TH_PER_LAYER * T * h / row.ew_div + tf_elems * T * f / tp))
    eh, eqk, ef = fw.eager_elem_bytes  # eager element-wise code's extra bytes (0 where fused or compiled)
    elem += _hbm(gpu, eh * T * h / row.ew_div + eqk * T * (model.q_hidden + model.kv_hidden) / tp + ef * T * f / tp)
    cp_link = None
    if cp > 1:
        cp_link = _link(cluster, tp * cp)
        ring = (cp - 1) * (ACT_BYTES * 2 * row.b * sc * model.kv_hidden / tp / cp_link[0] + cp_link[1])
    else:
        ring = 0.0
    tp_fwd = 2 * _allreduce(ACT_BYTES * T * h, tp, row.tp_link)
    if _fp8_tp(fw, row):  # torchao's float8 TP: 2 fp8 all-gathers (each after its fp32 amax's all-reduce), 2 bf16 RS
        tp_fwd = _fp8_tp_collectives(T * h, tp, row.tp_link)
    return dict(gemm=gemm, attn=attn, up=up, elem=elem, tp_fwd=tp_fwd,
                cp_fwd=max(ring - attn, 0.0), cp_bwd=max(2 * ring - 2 * attn, 0.0),
                overhead=2 * gpu.kernel_overhead_s, cp_link=cp_link)


def _fp8_tp_collectives(E: float, tp: int, link: tuple[float, float], amax: float = 1.0) -> float:
    """One layer's sequence-parallel collectives a pass with fp8 all-gathers, E = T h elements gathered: 2 all-gathers
    of 1 byte an element, ``amax`` times an fp32 amax all-reduce before each, 2 reduce-scatters of 2 bytes."""
    return 2 * _gather(E, tp, link) + amax * 2 * _allreduce(4, tp, link) + 2 * _gather(ACT_BYTES * E, tp, link)


def _fp8_tp(fw, row: _Row) -> bool:
    """Whether the row runs torchao's float8 tensor parallelism (Framework.fp8_tp_gather: fp8, SP, tp > 1)."""
    return fw.fp8_tp_gather and row.fp8 and row.sp and row.tp > 1


def _userbuffers(model: Transformer, gpu, row: _Row, config: dict) -> tuple[float, float]:
    """(forward, backward) exposed tp exchange of one dense layer under Transformer Engine's userbuffers: each
    exchange beside its GEMM by its method (ring: t - 1 sends of a chunk, each beside a GEMM chunk; pipeline: the
    last of n chunks' collective bare; bulk: the collective beside the whole GEMM), the GEMM slowed by the SMs the
    method holds."""
    tp, T, h, f = row.tp, row.T, model.hidden, model.ffn_hidden
    sms = streaming_multiprocessors(gpu.name)
    x = _gather(ACT_BYTES * T * h, tp, row.tp_link)
    gemms = {"qkv": _gemm(gpu, row.peak, T, (model.q_hidden + 2 * model.kv_hidden) / tp, h),
             "proj": _gemm(gpu, row.peak, T, h, model.q_hidden / tp),
             "fc1": _gemm(gpu, row.peak, T, (model.mlp_matrices - 1) * f / tp, h),
             "fc2": _gemm(gpu, row.peak, T, h, f / tp)}
    exposed = {}
    for name, (kind, m, n, margin) in config.items():
        G = gemms[name.split("_")[0]]
        if kind == "ring":
            held = G * m / (sms - m) if margin else 0.0
            exposed[name] = (tp - 1) * max(x / (tp - 1) - (G + held) / tp, 0.0) + held
            continue
        held = G * m / (sms - m) if margin else min(x, G) * m / (sms - m)
        if kind == "pipeline":
            exposed[name] = x / n + (n - 1) * max(x / n - (G + held) / n, 0.0) + held
        else:
            exposed[name] = max(x - (G + held), 0.0) + held
    fwd = sum(exposed[k] for k in ("qkv_fprop", "fc1_fprop", "proj_fprop", "fc2_fprop"))
    bwd = sum(exposed[k] for k in ("proj_dgrad", "fc2_dgrad", "qkv_dgrad", "fc1_dgrad", "qkv_wgrad", "fc1_wgrad"))
    return fwd, bwd


def _te_fp8_gather(fw, model: Transformer, row: _Row) -> bool:
    """Whether the row's all-gathers move fp8 data as Transformer Engine's linears gather it (Framework.te_fp8_gather:
    fp8, SP, tp > 1, a dense non-MLA transformer)."""
    dense = model.kind != "mlp" and not model.mla and not model.is_moe
    return bool(fw.te_fp8_gather) and row.prec == 2 and bool(row.sp) and row.tp > 1 and dense


def _async_backward_tp(model: Transformer, cluster: Cluster, row: _Row, fw) -> float:
    """The exposed tp exchange of one dense layer's backward whose column-parallel collectives run beside its GEMMs
    (Framework.tp_backward_async): with SP, the projection's and FC2's output gradients all-gathered bare, QKV's and
    FC1's inputs all-gathered beside their dgrad GEMMs and their dgrads reduce-scattered beside their wgrad GEMMs;
    without, QKV's and FC1's dgrads all-reduced beside their wgrad GEMMs. A collective of X s beside a GEMM of G s whose
    ring channels hold a share f of the SMs: max(X - G, f X)."""
    gpu, tp, T, h = cluster.gpu, row.tp, row.T, model.hidden
    link = _collective_link(cluster, 1, tp)  # the tp group's ranks, consecutive: its nodes and ranks on a node
    f = nccl.ring_channels(link[3] > 1, link[4], *nccl.ring_channel_table(gpu.name)) / streaming_multiprocessors(
        gpu.name)
    qkv = _gemm(gpu, row.peak, T, (model.q_hidden + 2 * model.kv_hidden) / tp, h)
    fc1 = _gemm(gpu, row.peak, T, (model.mlp_matrices - 1) * model.ffn_hidden / tp, h)
    if row.sp:
        x = _gather(ACT_BYTES * T * h, tp, row.tp_link)
        if _te_fp8_gather(fw, model, row):  # fp8 gathers: the output gradients after their amax where current scaling
            x8 = _gather(TE_FP8_GATHER_BYTES * T * h, tp, row.tp_link)
            amax = _allreduce(4, tp, row.tp_link) if fw.te_fp8_gather == "current" else 0.0
            return 2 * (x8 + amax) + sum(max(x8 - G, f * x8) + max(x - G, f * x) for G in (qkv, fc1))
        return 2 * x + sum(2 * max(x - G, f * x) for G in (qkv, fc1))
    ar = _allreduce(ACT_BYTES * T * h, tp, row.tp_link)
    return sum(max(ar - G, f * ar) for G in (qkv, fc1))


def _framework_layer(model: Transformer, cluster: Cluster, row: _Row, fw, lay: dict) -> dict:
    """The dense layer under the framework: casts to fp8 outside the GEMMs (fw.fp8_cast_bytes, per element of the
    linear inputs, output gradients and weights), the bf16 optimizer's fp32 accumulation, PyTorch's ring attention,
    GQA's K and V copies; then its forward, backward and weight-gradient times."""
    gpu, h, f, tp, cp, T = cluster.gpu, model.hidden, model.ffn_hidden, row.tp, row.cp, row.T
    cast_f = cast_b = cast_mlp_f = cast_mlp_b = 0.0
    norm_bytes = fw.fp8_cast_bytes[0] if fw.fp8_norm_cast_bytes is None else fw.fp8_norm_cast_bytes
    if row.prec == 2 and (any(fw.fp8_cast_bytes) or norm_bytes) and model.kind != "mlp":
        cx, cw, cg, cwb = fw.fp8_cast_bytes
        mats = model.mlp_matrices
        qw, kw, vw, ow = _widths(model)
        # per matrix: (input, output, weights) elements on one rank, and whether a norm wrote the input
        if model.mla:
            qr, kv, dr = model.q_lora_rank, model.kv_lora_rank, model.qk_rope_head_dim
            nope = model.heads * model.head_size
            mm = ([(h, qw / tp, h * qw / tp, True)] if qr is None
                  else [(h, qr, h * qr, False), (qr, qw / tp, qr * qw / tp, True)])
            mm += [(h, kv + dr, h * (kv + dr), False), (kv, (nope + vw) / tp, kv * (nope + vw) / tp, True),
                   (ow / tp, h, ow * h / tp, False)]
        else:
            mm = [(h, (qw + kw + vw) / tp, h * (qw + kw + vw) / tp, True), (ow / tp, h, ow * h / tp, False)]
        mlp = [(h, (mats - 1) * f / tp, (mats - 1) * h * f / tp, True), (f / tp, h, f * h / tp, False)]

        # float8 TP (not MLA): the norm-written inputs and the row-parallel products' T h output gradients (the
        # matrices not normed) cast on the shard, the gathered fp8 copy transposed
        tp8 = FP8_TP_CAST_BYTES[0] / tp + FP8_TP_CAST_BYTES[1] if _fp8_tp(fw, row) and not model.mla else None
        x_n, g_r = (norm_bytes, cg) if tp8 is None else (tp8, tp8)
        recast = fw.fp8_recast_input_bytes  # a saved 16-bit input cast again for the weight gradient (backward)
        n_attn, n_mlp = (1.0, fw.fp8_norm_input_casts[1]) if model.mla else fw.fp8_norm_input_casts

        def casts(mats_, n_normed):  # (forward, backward) seconds of these matrices' casts; a normed input n times
            fwd = sum(((x_n * n_normed if normed else cx) * T * i + cw * w for i, _, w, normed in mats_))
            bwd = sum((cg if normed else g_r) * T * o + cwb * w + recast * T * i * (n_normed if normed else 1.0)
                      for i, o, w, normed in mats_)
            return _hbm(gpu, fwd), _hbm(gpu, bwd)

        (a_f, a_b), (cast_mlp_f, cast_mlp_b) = casts(mm, n_attn), casts(mlp, n_mlp)
        cast_f, cast_b = a_f + cast_mlp_f, a_b + cast_mlp_b
    hp_zero = row.zero == 0 or (row.zero == 1 and (row.pp > 1 or not fw.hp_grad_zero1_needs_pp))
    if fw.hp_grad_bytes and not model.is_moe and hp_zero and row.prec == 0:  # bf16 optimizer's fp32 accumulation
        cast_b += _hbm(gpu, fw.hp_grad_bytes * model.layer_params() / tp)
    elif fw.pp_grad_accum_bytes and not model.is_moe and row.pp > 1 and row.zero >= 1:  # FSDP's unsharded fp32 sum
        cast_b += _hbm(gpu, fw.pp_grad_accum_bytes * model.layer_params() / tp)  # with a pipeline, each micro-batch
    if fw.pre_reduce_copy_bytes and not model.is_moe:  # the layer's unsharded gradient copied before its reduction
        cast_b += _hbm(gpu, fw.pre_reduce_copy_bytes * model.layer_params() / tp)  # (FSDP1's flat gradient)
    cp_fwd, cp_bwd, attn = lay["cp_fwd"], lay["cp_bwd"], lay["attn"]
    if any(fw.ring_attention_bytes) and model.kind != "mlp" and not model.mla and cp > 1:  # PyTorch's ring attention
        (ff, fs, bf, bs), E = fw.ring_attention_bytes, T * model.q_hidden / tp  # E: elements of the rank's Q
        cp_bw, cp_lat = lay["cp_link"]
        cast_f, cast_b = cast_f + _hbm(gpu, (ff + fs * (cp - 1)) * E), cast_b + _hbm(gpu, (bf + bs * (cp - 1)) * E)
        gather, dkv = (cp - 1) * (2 * ACT_BYTES * E / cp_bw + cp_lat), 2 * 4 * E / cp_bw + cp_lat  # bf16 K, V; fp32
        cp_fwd = max(gather - attn / cp, 0.0)
        cp_bwd = max(gather - 2 * attn / cp, 0.0) + (cp - 1) * max(dkv - 2 * attn / cp, 0.0) + dkv
    if fw.cp_all_gather and model.kind != "mlp" and not model.mla and cp > 1:  # K, V all-gathered, exposed: forward
        # once, backward again with their gradients' reduce-scatter
        cp_fwd = _gather(cp * ACT_BYTES * 2 * T * model.kv_hidden / tp, cp, lay["cp_link"])
        cp_bwd = 2 * cp_fwd
    if cp_by_all_to_all(fw, model) and cp > 1:  # Transformer Engine's all-to-all: Q, K, V, the output each way, exposed
        e_all = T * (2 * model.q_hidden + 2 * model.kv_hidden) / tp
        cp_bw, cp_lat = lay["cp_link"]
        cp_fwd = cp_bwd = (cp - 1) / cp * ACT_BYTES * e_all / cp_bw + A2A_EXCHANGES * cp_lat
        cast_f += _hbm(gpu, A2A_COPY_BYTES * e_all)
        cast_b += _hbm(gpu, A2A_COPY_BYTES * e_all)
    elif fw.te_ring_attention and model.kind != "mlp" and not model.mla and cp > 1:  # Transformer Engine's P2P ring
        e_q, e_kv = T * model.q_hidden / tp, 2 * T * model.kv_hidden / tp  # the rank's Q; its K and V
        cp_bw, cp_lat = lay["cp_link"]
        one, two = ACT_BYTES * e_kv / cp_bw + cp_lat, 2 * ACT_BYTES * e_kv / cp_bw + cp_lat  # K, V; with dK, dV
        cp_fwd = (cp - 1) * max(one - attn / cp, 0.0)  # each step's send behind that step's attention
        cp_bwd = 2 * max(one - 2 * attn / cp, 0.0) + (cp - 2) * max(two - 2 * attn / cp, 0.0)
        (fk, fq, fs), (bk, bq, bs) = TE_RING_BYTES["fwd"], TE_RING_BYTES["bwd"]
        (f1, fn), (b1, bn) = TE_RING_KERNELS["fwd"], TE_RING_KERNELS["bwd"]
        kernel = gpu.kernel_overhead_s / KERNELS_PER_SUBLAYER
        cast_f += _hbm(gpu, fk * e_kv + fq * e_q + fs * (cp - 1) * e_q) + kernel * (f1 + fn * (cp - 1))
        cast_b += (_hbm(gpu, bk * e_kv + bq * (e_q + e_kv) + bs * (cp - 1) * (e_q + e_kv))
                   + kernel * (b1 + bn * (cp - 1)))
    if fw.kv_repeat_bytes and model.kind != "mlp" and not model.mla and model.kv_hidden < model.q_hidden:
        kv_copies = _hbm(gpu, fw.kv_repeat_bytes * T * (model.q_hidden + model.kv_hidden) / tp)  # GQA's K, V copies
        cast_f, cast_b = cast_f + kv_copies, cast_b + kv_copies
    tp_fwd = tp_bwd = lay["tp_fwd"]
    if _te_fp8_gather(fw, model, row):  # Transformer Engine's fp8 all-gathers: QKV's and FC1's inputs 1 byte an element
        amax = 2 * _allreduce(4, tp, row.tp_link) if fw.te_fp8_gather == "current" else 0.0  # summed after the gathers
        tp_fwd = tp_bwd = _fp8_tp_collectives(T * h, tp, row.tp_link, amax=0.0) + amax
    if fw.tp_backward_async and model.kind != "mlp" and not model.mla and tp > 1:
        tp_bwd = _async_backward_tp(model, cluster, row, fw)
    config = fw.tp_comm_overlap[row.prec]
    if config and row.sp and tp > 1 and model.kind != "mlp" and not model.mla and not model.is_moe:
        tp_fwd, tp_bwd = _userbuffers(model, gpu, row, UB_CONFIGS[config])
    if fw.sp_copy_bytes and model.kind != "mlp" and row.sp and tp > 1:  # DTensor's copies around the 4 sp collectives
        gather = 0.5 if _fp8_tp(fw, row) else 1.0  # torchao's float8 TP gathers fp8 data: its copies half the bytes
        copies = _hbm(gpu, 2 * (gather + 1) * fw.sp_copy_bytes * T * h)
        tp_fwd, tp_bwd = tp_fwd + copies, tp_bwd + copies
    score_f = 0.0
    if not fw.fused_attention and model.kind != "mlp" and not model.mla:  # unfused attention: softmax and dropout
        scores = T * model.seq_len * model.heads / tp  # s x s score elements of the rank's T queries and heads
        score_f = _hbm(gpu, UNFUSED_SCORE_BYTES[0] * scores)
        cast_f, cast_b = cast_f + score_f, cast_b + _hbm(gpu, UNFUSED_SCORE_BYTES[1] * scores)
    gemm, elem, overhead = lay["gemm"], lay["elem"], lay["overhead"]
    return {**lay, "tp_fwd": tp_fwd, "tp_bwd": tp_bwd, "cp_fwd": cp_fwd, "cp_bwd": cp_bwd, "cast_f": cast_f,
            "cast_b": cast_b, "score_f": score_f,
            "cast_mlp_f": cast_mlp_f, "cast_mlp_b": cast_mlp_b,
            "fwd": gemm + attn + elem + overhead + cast_f,
            "bwd": gemm + 2 * attn + ELEM_BWD_FACTOR * (elem + overhead) + cast_b, "wgt": gemm}


def _edges(model: Transformer, cluster: Cluster, row: _Row, fw) -> dict:
    """The embedding's (first stage) and the head's (last stage) times per micro-batch."""
    if model.kind == "mlp":
        return dict.fromkeys(("emb_c", "emb_tp", "emb_copy", "head_gemm", "head_elem", "head_tp", "head_copy"), 0.0)
    gpu, h, T, tp, link = cluster.gpu, model.hidden, row.T, row.tp, row.tp_link
    copy = fw.pre_reduce_copy_bytes / tp if not model.is_moe else 0.0  # bytes a parameter, copied before the reduction
    return dict(emb_c=_hbm(gpu, ACT_BYTES * 4 * T * h), emb_tp=_allreduce(ACT_BYTES * T * h, tp, link),
                emb_copy=_hbm(gpu, copy * model.embedding_params()), head_copy=_hbm(gpu, copy * model.head_params()),
                head_gemm=_gemm(gpu, row.peak16, T, model.vocab / tp, h),
                head_elem=_hbm(gpu, ACT_BYTES * 3 * T * h + fw.xent_bytes * T * model.vocab / tp),
                head_tp=_allreduce(ACT_BYTES * T * h, tp, link) + 3 * _allreduce(4 * T, tp, link))


def _handoff_gathers(model: Transformer, cluster: Cluster, row: _Row, fw) -> dict:
    """The receiver's all-gathers of a tp-sharded pipeline hand-off per micro-batch (Framework.handoff_gathers): in a
    forward (every stage but the first: its input) and a backward (every stage but the last: its output and the
    gradient), each the whole 16-bit T h tensor (T h / tp under sequence parallelism: the rank's sequence shard) over
    the tp group, and their copies (handoff_gather_copy_bytes an element, at the HBM rate); zeros at tp 1."""
    n_f, n_b = fw.handoff_gathers
    elems = row.T * model.hidden / row.ew_div
    gather = _gather(ACT_BYTES * elems, row.tp, row.tp_link)
    copy = _hbm(cluster.gpu, fw.handoff_gather_copy_bytes * elems) if row.tp > 1 else 0.0
    return dict(hand_tp_f=n_f * gather, hand_tp_b=n_b * gather, hand_copy_f=n_f * copy, hand_copy_b=n_b * copy)


def _fsdp_copies(model: Transformer, fw, row: _Row) -> float:
    """FSDP2's copies beside its collectives in a step (fw.ag_copy_out_bytes after each all-gather, fw.rs_copy_in_bytes
    before each reduce-scatter), bytes a parameter the GPU holds. ZeRO-3 all-gathers forward and backward (but the
    share it keeps gathered) and reduce-scatters, every micro-batch; ZeRO-2 all-gathers once a step and reduce-scatters
    every micro-batch where the framework does (zero2_scatter_every_microbatch), else once; ZeRO-1 (a pipeline's ZeRO
    2-3 under shard_with_pp_once) one of each a step, the copy-in reading the unsharded fp32 accumulation where a
    pipeline keeps one (fw.pp_grad_accum_bytes); ZeRO 0 none. Dense models."""
    out, (in16, in32) = fw.ag_copy_out_bytes, fw.rs_copy_in_bytes
    zero, m = row.zero, row.m
    if not (out or in16 or in32) or model.is_moe or zero == 0:
        return 0.0
    if zero == 3:
        return m * ((2.0 - _exchange_plan(model, fw, row)["kept"]) * out + in16)
    copy_in = in32 if row.pp > 1 and fw.pp_grad_accum_bytes > 0 else in16
    if zero == 2 and fw.zero2_scatter_every_microbatch:
        return m * in16 + out
    return copy_in + out


def _activations(model: Transformer, row: _Row, fw) -> dict:
    """Activation bytes of one layer and micro-batch (``layer``; ``score``: the attention scores' part), MLA's Q, K
    and V (``qkv``: not kept under selective recompute), and torchtitan's per-op selective checkpointing
    (fw.selective == "op"): of the block's products wq, wk, wv, wo, w1, w3, w2 (fc1, fc2 without SwiGLU) the 1st,
    3rd, ... are saved (``sac_kept`` bytes kept, ``sac_re_flops`` recomputed a token, ``sac_frac`` of all)."""
    h, f, hk, T, tp, ew_div = model.hidden, model.ffn_hidden, model.kv_hidden, row.T, row.tp, row.ew_div
    if model.kind == "mlp":
        layer, score = T * h * (ACT_BYTES * 0.5 * (1 + 1 / tp) + 1 / tp), 0.0
    else:
        mlp_act = (6 if model.gated else 4) * T * f
        score = 0.0 if fw.fused_attention else ACT_SCORE_BYTES * model.heads * row.b * row.sc * model.seq_len / tp
        layer = (ACT_REPLICATED_H * T * h / ew_div + _latent_bytes(model, T, ew_div)
                 + (2 * T * sum(_widths(model)) + mlp_act) / tp + score)
        if fw.fp8_saved_inputs and row.fp8:
            # 1 byte, not 2: the QKV and FC1 inputs (whole without SP), the projection and FC2 inputs (split by tp)
            layer -= T * (h + h) / ew_div + T * (_widths(model)[3] + f) / tp
    drop, non_experts = score, None  # what recomputing the attention core frees; an MoE layer's non-expert bytes
    if fw.layer_saves != "korthikanti" and model.kind != "mlp" and not model.mla:
        layer, score, drop, non_experts = _layer_saves(model, row, fw)
    out = dict(layer=layer, score=score, drop=drop, non_experts=non_experts,
               qkv=ACT_BYTES * T * sum(_widths(model)[:3]) / tp if model.mla else 0.0,
               op_sac=fw.selective == "op" and model.kind != "mlp", xent_peak=fw.xent_peak_bytes)
    if out["op_sac"]:
        ffn = [(h, f, True), (h, f, True), (f, h, False)] if model.gated else [(h, f, True), (f, h, False)]
        qh, ow = model.q_hidden, _widths(model)[3]
        prods = [(h, qh, True), (h, hk, True), (h, hk, True), (ow, h, False)] + ffn  # (in, out, column-parallel)
        saved_w = sum(o / (tp if col else 1) for j, (_, o, col) in enumerate(prods) if j % 2 == 0)
        out["sac_re_flops"] = sum(2 * i * o for j, (i, o, _) in enumerate(prods) if j % 2 == 1)
        out["sac_frac"] = out["sac_re_flops"] / sum(2 * i * o for i, o, _ in prods)
        # input, saved products, attention output, the two reduce-scatter outputs under SP
        kept = ACT_BYTES * T * (h / ew_div + saved_w + ow / tp + (2 * h / tp if row.sp and tp > 1 else 0.0))
        if fw.layer_saves != "korthikanti" and fw.fused_attention:  # SDPA's logsumexp, saved with its output
            kept += SOFTMAX_STAT_BYTES * T * model.heads / tp
        out["sac_kept"] = min(kept, layer)
        if model.is_moe:  # an MoE layer: attention's four products counted, then the shared experts' (if any); the
            # router gate and the routed experts' grouped products run again uncounted; topk's results, and the
            # all-to-alls' results where ep > 1, kept
            fs = model.shared_experts * model.shared_expert_ffn
            gated = [(h, fs, True), (h, fs, True), (fs, h, False)]
            shared = (gated if model.gated else [(h, fs, True), (fs, h, False)]) if fs else []
            prods_m = prods[:4] + shared
            saved_m = sum(o / (tp if col else 1) for j, (_, o, col) in enumerate(prods_m) if j % 2 == 0)
            routed = 2 * h * model.experts + 2 * model.mlp_matrices * h * model.experts_per_token * model.expert_ffn
            re_m = sum(2 * i * o for j, (i, o, _) in enumerate(prods_m) if j % 2 == 1) + routed
            out["sac_re_flops_m"] = re_m
            out["sac_frac_m"] = re_m / (sum(2 * i * o for i, o, _ in prods_m) + routed)
            copies = model.capacity_factor * model.experts_per_token * T / tp
            kept_m = ACT_BYTES * T * (h / ew_div + saved_m + ow / tp + (2 * h / tp if row.sp and tp > 1 else 0.0))
            if fw.layer_saves != "korthikanti" and fw.fused_attention:
                kept_m += SOFTMAX_STAT_BYTES * T * model.heads / tp
            kept_m += ROUTER_TOPK_BYTES * model.experts_per_token * T / ew_div
            kept_m += 2 * ACT_BYTES * copies * h if row.ep > 1 else 0.0
            out["sac_kept_m"] = kept_m
    return out


def _layer_saves(model: Transformer, row: _Row, fw) -> tuple[float, float, float, float]:
    """A dense layer's activation bytes under the framework's layer code (fw.layer_saves), its scores' part, what
    recomputing its attention core frees, and the bytes an MoE layer keeps besides its experts'. Per token on a rank:
    Megatron-Core with Transformer Engine ("te"): both norms' 16-bit inputs and their LayerNormLinear outputs (1 byte
    under fp8), the norms' fp32 statistics, Q, K, V, the kernel's output (the projection's input; under fp8 its 1-byte
    copy too), the kernel's fp32 statistics per head (or, unfused, the scores: 5 bytes each with dropout, 2 without),
    the fc1 output and the fc2 input (1 byte under fp8), two 1-byte dropout masks where dropout is on. torchtitan's
    block in eager autograd ("torchtitan"): per RMSNorm its fp32 input copy, normalised 16-bit output and fp32 rsqrt
    (nn.LayerNorm: its 16-bit input, fp32 mean and rstd), each norm's output whole (all-gathered) as the products
    take it, Q, and K and V as wide as Q where repeat_kv copies them (several K/V heads a rank, fewer than Q's; else
    hk / tp each), SDPA's output (the projection's input: its contiguous() copies nothing), the fp32 logsumexp,
    SwiGLU's four products of f (GeLU: two)."""
    h, q, o, hk, a, f = model.hidden, model.q_hidden, model.o_hidden, model.kv_hidden, model.heads, model.ffn_hidden
    T, tp, ew = row.T, row.tp, row.ew_div
    stat = {"layernorm": 8, "rmsnorm": 4, "none": 0}[model.norm]
    if fw.layer_saves == "te":
        fp8 = fw.fp8_saved_inputs and row.fp8
        lo = 1 if fp8 else ACT_BYTES  # a linear layer's saved input
        per_score = ACT_SCORE_BYTES if fw.dropout else 2
        scores = 0.0 if fw.fused_attention else per_score * a * T * model.seq_len / tp
        stats = SOFTMAX_STAT_BYTES * T * a / tp if fw.fused_attention else 0.0
        mlp = (ACT_BYTES * (model.mlp_matrices - 1) + lo) * T * f / tp
        total = (2 * ACT_BYTES * T * h / ew + 2 * lo * T * h / ew + 2 * stat * T / ew
                 + ACT_BYTES * T * (q + 2 * hk) / tp + (ACT_BYTES + (1 if fp8 else 0)) * T * o / tp + stats + scores
                 + mlp + (2 * T * h / ew if fw.dropout else 0.0))
        rope_view = 0.0 if model.learned_positions else ACT_BYTES * T * (q + hk) / tp  # V's view keeps Q, K beside
        non_experts = total - mlp - lo * T * h / ew + ACT_BYTES * T * h / ew  # the MLP norm's 16-bit output instead
        return total, scores, stats + scores - rope_view, non_experts
    rms = model.norm == "rmsnorm"
    norms = 2 * T * h / ew * ((4 + ACT_BYTES) if rms else (ACT_BYTES if model.norm == "layernorm" else 0))
    mlp = (4 if model.gated else 2) * ACT_BYTES * T * f / tp
    stats = SOFTMAX_STAT_BYTES * T * a / tp
    kv_copy = model.kv_heads < model.heads and model.kv_heads / tp > 1
    kv = q / tp if kv_copy else hk / tp
    total = (norms + 2 * stat * T / ew + 2 * ACT_BYTES * T * h + ACT_BYTES * T * (q / tp + 2 * kv)
             + ACT_BYTES * T * q / tp + stats + mlp)
    return total, 0.0, stats, total - mlp


def _moe(model: Transformer, cluster: Cluster, row: _Row, fw, lay: dict, act: dict) -> dict:
    """One MoE layer's times (forward, backward, weight gradients, exposed all-to-alls), its activation bytes, and
    the parameters per GPU of its dense part and of its routed experts."""
    T, tp, ew_div = row.T, row.tp, row.ew_div
    mo = _moe_layer(model, cluster, fw, row.peak, T, tp, row.ep, row.sp, lay["attn"], lay["overhead"], row.etp,
                    fp8=row.prec == 2)
    layer = mo["act"] + act["score"]
    if act["non_experts"] is not None:  # the framework's layer code: its non-expert terms, the experts' as before
        layer = act["non_experts"] + mo["experts"]
        if fw.layer_saves == "torchtitan":  # its eager experts: a fourth SwiGLU product, each output's fp32 copy
            per_copy = (ACT_BYTES * model.expert_ffn if model.gated else 0.0) + 4 * model.hidden
            layer += model.capacity_factor * model.experts_per_token * T / tp * per_copy
    elif fw.fp8_saved_inputs and row.fp8:  # attention's QKV and projection inputs only
        layer -= T * model.hidden / ew_div + T * _widths(model)[3] / tp
    cast_f, cast_b = lay["cast_f"] - lay["cast_mlp_f"], lay["cast_b"] - lay["cast_mlp_b"]  # no dense MLP to cast
    fwd = mo["gemm"] + lay["attn"] + mo["elem"] + mo["overhead"] + cast_f + mo["xcast_f"]
    bwd = (mo["gemm"] + 2 * lay["attn"] + ELEM_BWD_FACTOR * (mo["elem"] + mo["overhead"]) + cast_b
           + mo["xcast_b"])  # (the attention's casts, and the experts' fp8 quantization)
    xb = dict(xb_d=0.0, xb_e=0.0, xb_t=0.0)  # a backward stretch's G - H, e and t (backward_chunk_excess)
    if fw.moe_host_sync:  # dropless routing's host wait: each pass no faster than the host launches its kernels,
        # its exposed exchanges (tensor and context parallel, the all-to-alls) on the GPU in the host's gaps
        cf = _moe_tp(model, lay["tp_fwd"]) + lay["cp_fwd"] + mo["ep"]
        cb = _moe_tp(model, lay["tp_fwd"]) + lay["cp_bwd"] + mo["ep"]
        fwd = max(fwd + mo["host_x"], mo["host_f"] - cf)  # and its expert phase's launches before the rest
        if not fw.overlap_ep:
            d = bwd + mo["gemm"] + cb - ELEM_BWD_FACTOR * mo["host_f"]
            xb = dict(xb_d=d, xb_e=max(mo["xb_q"] - mo["xb_a"], 0.0), xb_t=max(d + mo["xb_q"], 0.0))
        bwd = max(bwd + mo["gemm"], ELEM_BWD_FACTOR * mo["host_f"] - cb) - mo["gemm"]
    sac_re = (act["sac_frac_m"] * (mo["gemm"] + cast_f + mo["xcast_f"]) + mo["elem"] + mo["overhead"]
              if act["op_sac"] else 0.0)  # per-op checkpointing's recompute (the attention core's output saved)
    return {**mo, **xb, "fwd": fwd, "bwd": bwd, "sac_re": sac_re,
            "layer": layer, "dense_p": model.moe_layer_dense_params(),
            "experts_p": model.experts / row.ep * model.expert_params() / row.etp}  # routed, per GPU per MoE layer


def _named_modules(model: Transformer, cluster: Cluster, row: _Row, fw, lay: dict, act: dict, moe: dict | None) -> dict:
    """Megatron-Core's named recompute modules (row.modules) on one dense layer and one MoE layer: bytes kept per
    micro-batch (kept, kept_m), the working set while recomputing (work, work_m), seconds run again (re, re_m), the
    dense MLP's tp collectives again (re_tp) and whether the MoE layer's all-to-alls run again (re_ep). Per module:
    core_attn frees what the attention-core policy frees (act["drop"]) and runs the core again; mla_up_proj frees Q, K,
    V and runs the up-projections; layernorm frees each norm that is a module of its own (the input norm under MLA,
    the pre-MLP norm where the model has experts: its 16-bit output, under the "te" count its fp32 statistics too)
    and reads and writes it again; mlp (dense layers) frees FC1's output, FC2's input and, where the norm is fused
    into FC1, its output and statistics, and runs the MLP again with its tp collectives; moe_act frees FC2's input of
    every routed copy and runs the activation again; shared_experts frees the shared experts' intermediates and runs
    them again; moe frees the experts' part and runs the MoE block again with its all-to-alls."""
    on = {name: bool(row.modules & bit) for name, bit in MODULE_BIT.items()}
    gpu, h, f, T, tp, ew = cluster.gpu, model.hidden, model.ffn_hidden, row.T, row.tp, row.ew_div
    korth = fw.layer_saves != "te" or model.mla
    fp8 = fw.fp8_saved_inputs and row.fp8
    stat = {"layernorm": 8, "rmsnorm": 4, "none": 0}[model.norm]
    norm_out = ACT_BYTES * T * h / ew
    ln_b = (norm_out + (0.0 if korth else stat * T / ew)) if on["layernorm"] else 0.0
    ln_s = _hbm(gpu, 2 * norm_out) if on["layernorm"] else 0.0
    sep_d, sep_m = int(model.mla) + int(model.is_moe), int(model.mla) + 1
    attn_drop = act["drop"] if (on["core_attn"] or on["mla_up_proj"]) else 0.0
    attn_re = lay["attn"] + lay["score_f"] if on["core_attn"] else 0.0
    if model.mla and on["mla_up_proj"]:
        attn_drop += act["qkv"]
        attn_re += lay["up"]
    fused = 0 if model.is_moe else 1  # the pre-MLP norm inside FC1's LayerNormLinear (no experts)
    mlp_drop = mlp_re = 0.0
    if on["mlp"]:
        if korth:
            coef = 6 if model.gated else 4
            mlp_drop = coef * T * f / tp + fused * 2 * T * h / ew - (T * (f / tp + fused * h / ew) if fp8 else 0.0)
        else:
            lo = 1 if fp8 else ACT_BYTES
            mlp_drop = ((ACT_BYTES * (model.mlp_matrices - 1) + lo) * T * f / tp
                        + fused * (lo * T * h / ew + stat * T / ew))
        proj = _projections(model, gpu, row.peak, T, tp, ew)[0]
        mlp_re = (lay["gemm"] - proj + lay["cast_mlp_f"] + 0.5 * lay["overhead"]
                  + _hbm(gpu, ACT_BYTES * ELEM_TF_PER_LAYER[model.activation] * T * f / tp))
    work = sep_d * ln_b + mlp_drop
    out = dict(kept=max(act["layer"] - attn_drop - work, 0.0), work=work, re=attn_re + sep_d * ln_s + mlp_re,
               re_tp=0.5 * lay["tp_fwd"] if on["mlp"] else 0.0, re_ep=on["moe"])
    if moe is not None:
        fs = model.shared_experts * model.shared_expert_ffn
        coef = 6 if model.gated else 4
        act_freed = ACT_BYTES + (CLAMP_SAVED_BYTES if model.glu_clamp is not None else 0.0)  # FC2's input, the cat's
        part = ((act_freed * moe["copies"] * model.expert_ffn if on["moe_act"] else 0.0)
                + (coef * T * fs / tp if on["shared_experts"] else 0.0))
        part_re = (moe["act_f"] if on["moe_act"] else 0.0) + (moe["shared_f"] if on["shared_experts"] else 0.0)
        work_m = sep_m * ln_b + (moe["experts"] if on["moe"] else part)
        out.update(kept_m=max(moe["layer"] - attn_drop - work_m, 0.0), work_m=work_m,
                   re_m=attn_re + sep_m * ln_s + (moe["moe_f"] if on["moe"] else part_re))
    return out


def _stages(model: Transformer, row: _Row, lay: dict, edge: dict, act: dict, moe: dict | None,
            named: dict | None = None) -> list[dict]:
    """Every pipeline stage of the row, first to last: its times and its memory terms (``named``: _named_modules
    where the row names recompute modules)."""
    stages, start = [], 0
    fw_steady = row.extra > 0 and row.steady_only  # Megatron-Core's EP A2A overlap of an MoE model
    for i in range(row.pp):
        n, rc = row.layers[i], row.recomputes[i]
        n_m = sum(_is_moe_layer(model, j) for j in range(start, start + n)) if model.is_moe else 0
        start += n
        first, last = i == 0, i == row.pp - 1
        nm = named if rc == "selective" else None
        st = _stage_times(model, row, lay, edge, act, moe, n, n_m, rc, first, last,
                          _unpaired(row, i) if fw_steady else 0.0, nm)
        st.update(_stage_memory(model, row, act, moe, n, n_m, rc, first, last, nm))
        st["k"] = _in_flight(row.sched, row.pp, row.m, row.v, i, row.extra)
        stages.append(st)
    return stages


def _unpaired(row: _Row, i: int) -> float:
    """Share of stage i's passes the EP A2A overlap runs alone: 1 of m without a pipeline, Megatron's warm-up count
    (p - i - 1) 2 + (v - 1) N + 1 of m v interleaved (N: its group size), every pass in a pipeline without
    interleaving."""
    if row.pp > 1 and row.sched != "interleaved":
        return 1.0
    n = interleave_group_size(row.pp, row.m) if row.sched == "interleaved" else row.pp
    return min(((row.pp - i - 1.0) * 2.0 + (row.v - 1.0) * n + 1.0) / (row.m * row.v), 1.0)


def _stage_times(model: Transformer, row: _Row, lay: dict, edge: dict, act: dict, moe: dict | None, n: int,
                 n_m: int, rc: str, first: bool, last: bool, unpaired: float = 0.0, named: dict | None = None) -> dict:
    """A stage of n layers (n_m of them MoE layers) under recompute ``rc``: F, B, W per micro-batch, their sum X, and
    the parts the metrics report (compute, tp, ep, cp, recompute and its tp / cp); ``unpaired``: the share of its
    passes whose all-to-alls no pair hides (_unpaired); ``named``: a selective stage's named modules
    (_named_modules)."""
    fwd, tp_fwd, cp_fwd, cp_bwd = lay["fwd"], lay["tp_fwd"], lay["cp_fwd"], lay["cp_bwd"]
    n_d = n - n_m
    if named is not None:
        re, re_tp, re_cp = named["re"], named["re_tp"], 0.0
    elif rc == "full":
        re, re_tp, re_cp = fwd, tp_fwd, cp_fwd
    elif rc == "selective" and act["op_sac"]:
        re = act["sac_frac"] * (lay["gemm"] + lay["cast_f"]) + lay["elem"] + lay["overhead"]
        re_tp, re_cp = 0.5 * tp_fwd, 0.0
    elif rc == "selective":  # the attention core (MLA: its up-projections instead)
        re, re_tp, re_cp = (lay["up"] if model.mla else lay["attn"] + lay["score_f"]), 0.0, 0.0
    else:
        re, re_tp, re_cp = 0.0, 0.0, 0.0
    re_tp_m = 0.0 if (rc == "selective" and (act["op_sac"] or named is not None)) else _moe_tp(model, re_tp)
    tp_m = _moe_tp(model, tp_fwd)  # an MoE layer's tensor-parallel exchange (_moe_tp)
    F = n_d * (fwd + tp_fwd + cp_fwd)
    Bw = n_d * (lay["bwd"] + lay["tp_bwd"] + cp_bwd + re + re_tp + re_cp)
    W = n_d * lay["wgt"]
    comp = n_d * (fwd + lay["bwd"] + lay["wgt"])
    tps = n_d * (tp_fwd + lay["tp_bwd"]) + n_m * 2 * tp_m  # MoE layers keep the exchange exposed both ways
    ep_s = re_m = 0.0
    if n_m:
        re_m = {"full": moe["fwd"], "selective": lay["up"] if model.mla else lay["attn"] + lay["score_f"]}.get(rc, 0.0)
        if rc == "selective" and act["op_sac"]:
            re_m = moe["sac_re"]
        re_ep = moe["ep"] if rc == "full" else 0.0
        if named is not None:
            re_m, re_ep = named["re_m"], moe["ep"] if named["re_ep"] else 0.0
        F += n_m * (moe["fwd"] + tp_m + cp_fwd + moe["ep"])
        # (summed in the vectorised evaluator's order: equal stage times stay bitwise equal, ties break alike)
        Bw += n_m * (moe["bwd"] + tp_m + cp_bwd + re_m + (re_tp_m + re_cp) + moe["ep"] + re_ep)
        W += n_m * moe["gemm"]
        comp += n_m * (moe["fwd"] + moe["bwd"] + moe["gemm"])
        ep_s = n_m * (2 * moe["ep"] + re_ep)
        # each backward stretch starts on an empty GPU: v chunks interleaved, else 1; each MoE layer its own where the
        # MoE block is recomputed (its wait repeated); max(n G + e, n H + t) - n max(G, H) a stretch of n MoE layers
        again = rc == "full" or (named is not None and named["re_ep"])
        chunks = n_m if again else (row.v if row.sched == "interleaved" else 1)
        nc, d = n_m / chunks, moe["xb_d"]
        xb = chunks * (max(nc * d + moe["xb_e"], moe["xb_t"]) - nc * max(d, 0.0))
        Bw += xb
        comp += xb
        if unpaired:
            x = n_m * unpaired * moe["ep_x"]
            F, Bw, ep_s = F + x, Bw + x, ep_s + 2 * x
    if first:  # (emb_copy, head_copy: their gradients' copies before the reduction, backward)
        F += 0.5 * edge["emb_c"] + edge["emb_tp"]
        Bw += 0.5 * edge["emb_c"] + edge["emb_copy"]
        comp += edge["emb_c"] + edge["emb_copy"]
        tps += edge["emb_tp"]
    if last:
        head = edge["head_gemm"] + 0.5 * edge["head_elem"] + 0.5 * edge["head_tp"]
        F += head
        Bw += head + edge["head_copy"]
        W += edge["head_gemm"]
        comp += 3 * edge["head_gemm"] + edge["head_elem"] + edge["head_copy"]
        tps += edge["head_tp"]
    if not first:  # the receiver's all-gathers of a tp-sharded hand-off (_handoff_gathers): its input
        F += edge["hand_tp_f"] + edge["hand_copy_f"]
        comp += edge["hand_copy_f"]
        tps += edge["hand_tp_f"]
    if not last:  # its output and the gradient, before the backward
        Bw += edge["hand_tp_b"] + edge["hand_copy_b"]
        comp += edge["hand_copy_b"]
        tps += edge["hand_tp_b"]
    return dict(F=F, B=Bw, W=W, X=F + Bw + W, comp=comp, tp=tps, ep=ep_s, cp=n * (cp_fwd + cp_bwd),
                re=n_d * re + n_m * re_m, re_tp=n_d * re_tp + n_m * re_tp_m, re_cp=n * re_cp)


def _stage_memory(model: Transformer, row: _Row, act: dict, moe: dict | None, n: int, n_m: int, rc: str,
                  first: bool, last: bool, named: dict | None = None) -> dict:
    """A stage's parameters per GPU (dense part ``params``, routed experts ``params_e``), the activation bytes it
    keeps per micro-batch in flight (``per_mb``) and those it holds once (``fixed``: a recomputed layer's working
    set, the head's logits)."""
    h, T, tp, ew_div = model.hidden, row.T, row.tp, row.ew_div
    n_d = n - n_m
    params = n_d * model.layer_params() + (n_m * moe["dense_p"] if n_m else 0)
    if first:
        params += model.embedding_params()
    if last:
        params += model.head_params()
        if not first and model.tied_embeddings and model.kind != "mlp":
            params += model.vocab * h
    params /= tp
    params += n * model.tp_replicated_params() * (1 - 1 / tp)  # (MLA's down-projections: whole on every rank)
    layer, qkv = act["layer"], act["qkv"]
    layer_m = moe["layer"] if n_m else 0.0
    if named is not None:  # Megatron-Core's named modules (_named_modules)
        kept, kept_m = named["kept"], named["kept_m"] if n_m else 0.0
    elif rc == "full":
        kept = ACT_BYTES * T * h / ew_div
        kept_m = kept
    elif rc == "selective" and act["op_sac"]:
        kept = act["sac_kept"]
        kept_m = min(act["sac_kept_m"], layer_m) if n_m else 0.0
    elif rc == "selective":
        kept = layer - act["drop"] - qkv
        kept_m = layer_m - act["drop"] - qkv if n_m else 0.0
    else:
        kept = layer
        kept_m = layer_m if n_m else 0.0
    per_mb = n_d * kept + n_m * kept_m  # activation bytes kept per micro-batch in flight
    if first and model.kind != "mlp":
        per_mb += (ACT_BYTES + 1) * T * h / ew_div
    fixed = 0.0
    if named is not None:
        fixed += max(named["work"] if n_d else 0.0, named["work_m"] if n_m else 0.0)
    elif rc == "full":
        fixed += max(layer if n_d else 0.0, layer_m if n_m else 0.0)
    elif rc == "selective" and act["op_sac"]:
        fixed += max(layer - act["sac_kept"] if n_d else 0.0, layer_m - kept_m if n_m else 0.0)
    if last and model.kind != "mlp":
        fixed += act["xent_peak"] * T * model.vocab / tp  # the loss's peak (Framework.xent_peak_bytes)
    return dict(params=params, params_e=n_m * moe["experts_p"] if n_m else 0.0, per_mb=per_mb, fixed=fixed)


def _pipeline(model: Transformer, cluster: Cluster, row: _Row, stages: list[dict], reason: str, mode: str) -> dict:
    """The bottleneck stage (MoE rows: the first within TIE_REL of the slowest), the closed forms' bubble and
    hand-offs, or the simulator's time and peaks (which set each stage's micro-batches in flight, ``k``); each
    stage's activation bytes ``act``."""
    pp, m, v, sched = row.pp, row.m, row.v, row.sched
    bottleneck = stages[0]
    for st in stages[1:]:
        if st["X"] > bottleneck["X"]:
            bottleneck = st
    if model.is_moe:
        bottleneck = next(st for st in stages if st["X"] >= bottleneck["X"] * (1.0 - TIE_REL))
    X_max = bottleneck["X"]
    X_sum = sum(st["X"] for st in stages)
    if sched == "zb-h1":
        fill = (pp - 1) * max(bottleneck["F"] + bottleneck["B"] - bottleneck["W"], 0.0)
    elif sched == "zb-h2":
        fill = (pp - 1) * max(bottleneck["F"] + bottleneck["B"] - 2 * bottleneck["W"], 0.0)
    elif sched == "interleaved":
        fill = (X_sum - X_max) / v
    else:
        fill = X_sum - X_max
    if pp > 1:
        bw, lat = _link(cluster, row.tp * row.cp * row.dp * pp, whole_job=True)
        t_c = ACT_BYTES * row.T * model.hidden / row.tp / bw + lat
    else:
        t_c = 0.0
    pp_comm = 2 * (pp - 1) * t_c
    steady = 0.0
    if row.blocking and sched == "1f1b" and pp > 1:  # the steady state's hand-offs (Framework.blocking_p2p): each
        # period after the first waits on two exchanges (one at pp = 2), the last period on one fewer; each exchange
        # as many transfers one after the other as its calls (Framework.exchange_calls: DeepSpeed's send, then recv)
        steady = max((2 * m - 3) * t_c, 0.0) if pp >= 3 else (m - 1) * t_c
        pp_comm += row.calls * steady
    elif sched == "1f1b" and pp > 1:  # non-blocking: stage i's forward goes down to stage j, whose backward comes
        # back up to stage i before its next forward: a loop of L = j - i + 1 stages' passes and 2 (L - 1) hand-offs
        # every L micro-batches, exposed but for the loop's slack against the bottleneck's pace; the worst loop
        worst = 0.0
        for i in range(pp):
            for j in range(i + 1, pp):
                L, trip = j - i + 1, 2 * (j - i) * t_c
                exposed = min(max(sum(st["X"] for st in stages[i:j + 1]) + trip - L * X_max, 0.0), trip)
                worst = max(worst, ((m - 2) - (m - 2) // L) * exposed / (L - 1))
        pp_comm += worst
    lockstep = row.lockstep and sched == "interleaved" and pp > 1 and m % pp == 0
    if lockstep:  # torch's interleaved grid (Framework.lockstep_interleaved; m a multiple of pp, where the grid is a
        # valid order): every pass but the path's first and last waits on a hand-off, and the last virtual stage's
        # first forward starts a step late
        pp_comm += (2 * v * m - 2) * t_c
        fill += bottleneck["F"] / v
    pipe = m * X_max + fill + pp_comm
    b_st = bottleneck
    outside = (sched in SIMULATED_SCHEDULES
               or (sched == "interleaved" and m < pp)
               or (sched in ("zb-h1", "zb-h2") and (m < pp or b_st["W"] > min(b_st["F"], b_st["B"]))))
    if reason == "ok" and (mode == "simulate" or outside):
        from costmodel._pipeline import simulate, simulate_lockstep

        times = dict(tf=[st["F"] for st in stages], tb=[st["B"] for st in stages], tw=[st["W"] for st in stages],
                     tc=t_c)
        res = simulate(sched, pp, m, v, **times, blocking=row.blocking and sched == "1f1b")
        pipe = (float(simulate_lockstep(pp, m, v, **times)[0]) if lockstep
                else float(res.total_time[0]) + (row.calls - 1) * steady)  # (its exchanges batched: waited on once)
        pp_comm = min(pp_comm, max(pipe - m * X_max, 0.0))
        fill = pipe - m * X_max - pp_comm
        for i, st in enumerate(stages):
            st["k"] = float(res.peak_activations[i])
            if sched == "interleaved" and row.extra:  # the extra warm-up chunk (Megatron-Core's EP A2A overlap)
                st["k"] = min(st["k"] + row.extra / v, m)
    for st in stages:
        st["act"] = st["k"] * st["per_mb"] + st["fixed"]
    return dict(bottleneck=bottleneck, X_max=X_max, fill=fill, pp_comm=pp_comm, pipe=pipe)


def _data_parallel(model: Transformer, cluster: Cluster, row: _Row, fw, stages: list[dict], pipe: dict) -> dict:
    """The largest stage's data-parallel exchange (gradients and weights in the framework's dtypes; an MoE model's
    routed experts over edp), the optimizer step, and what of the exchange is exposed."""
    zero, m, dp, tp, cp, pp, prec = row.zero, row.m, row.dp, row.tp, row.cp, row.pp, row.prec
    g = dp * cp
    shard = g if zero >= 1 else 1
    edp = max(dp * cp * tp // (row.ep * row.etp), 1)  # expert-data-parallel ranks
    dense_max = max(st["params"] for st in stages)
    expert_max = max(st["params_e"] for st in stages)
    params_max = max(st["params"] + st["params_e"] for st in stages)
    gb, wb, both = fw.grad_reduce_bytes[prec], fw.weight_gather_bytes[prec], fw.all_reduce_then_gather[prec]
    both = both and (zero == 1 if fw.weight_sync_broadcasts else zero <= 1)
    plan_all = _exchange_plan(model, fw, row)
    reduces = m if fw.zero2_scatter_every_microbatch and zero == 2 else 1  # gradient reductions a step

    def exchange(n_params: float, ranks: int, link: tuple, bucket: float, plan: dict) -> tuple[float, float]:
        """(seconds of the exchange, of its part inside the optimizer step), in the framework's dtypes."""
        grad_bytes, w_bytes = gb * n_params, wb * n_params
        msg = min(bucket, plan["est"])  # elements of one bucket's collective
        calls = n_params / bucket + 1  # (the last bucket partly filled)
        gather_msg, gather_calls = (plan["est"], 1) if fw.weight_gather_in_step else (msg, calls)
        gather_kind = "gather"
        if fw.weight_gather_in_step and fw.weight_sync_broadcasts:  # one broadcast from each rank of its shard
            gather_kind, gather_msg, gather_calls = "broadcast", plan["est"] / ranks, ranks
        if zero == 3:  # all-gather the weights for forward and for backward, reduce-scatter the gradients
            unit_w = wb * plan["est"] / plan["fwd"]
            gathers = (_collective("gather", (2 - plan["kept"]) * w_bytes, unit_w, ranks, link)
                       + (plan["fwd"] + plan["bwd"]) * _collective_latency("gather", unit_w, ranks, link))
            if plan["scatters"] is None:  # reduce-scatters by bucket
                scatters = (_collective("gather", grad_bytes, gb * msg, ranks, link)
                            + calls * _collective_latency("gather", gb * msg, ranks, link))
            else:  # one per unit
                unit_g = gb * plan["est"] / plan["scatters"]
                scatters = (_collective("gather", grad_bytes, unit_g, ranks, link)
                            + plan["scatters"] * _collective_latency("gather", unit_g, ranks, link))
            return m * (gathers + scatters), 0.0
        gather = (gather_kind, w_bytes, wb * gather_msg, gather_calls)
        if both:  # all-reduce the gradients, then all-gather the updated weights
            kinds = (("all_reduce", grad_bytes, gb * msg, calls), gather)
        elif zero >= 1:  # reduce-scatter the gradients, all-gather the updated weights
            kinds = (("gather", grad_bytes, gb * msg, calls), gather)
        else:
            kinds = (("all_reduce", grad_bytes, gb * msg, calls),)
        secs = [_collective(k, nb, mb, ranks, link) + c * _collective_latency(k, mb, ranks, link)
                for k, nb, mb, c in kinds]
        if reduces > 1 and not both:  # ZeRO-2 reduce-scattered after every micro-batch's backward: m of them a step
            secs[0] *= reduces
        return sum(secs), (secs[1] if fw.weight_gather_in_step and len(secs) == 2 else 0.0)

    gpu = cluster.gpu
    if model.is_moe:
        ep_link = _collective_link(cluster, row.ep * row.etp, edp)  # edp ranks ep etp apart
        plan_e = _exchange_plan(model, fw, row, experts=True)
        dense, experts = (exchange(dense_max, g, _collective_link(cluster, tp, g), plan_all["bucket"](g), plan_all),
                          exchange(expert_max, edp, ep_link, plan_e["bucket"](edp), plan_e))
        dp_raw, step = dense[0] + experts[0], dense[1] + experts[1]
        opt = _hbm(gpu, fw.adam_bytes_touched() * (dense_max / shard + expert_max / (edp if zero >= 1 else 1)))
    else:
        dp_raw, step = exchange(params_max, g, _collective_link(cluster, tp, g), plan_all["bucket"](g), plan_all)
        opt = _hbm(gpu, fw.adam_bytes_touched() * params_max / shard)
    b_st = pipe["bottleneck"]
    # ZeRO-2 reduce-scattered every micro-batch: the m - 1 before the last (their bytes' share of the exchange) each
    # behind its micro-batch's passes, exposed beyond a micro-batch's X_max; the last and the all-gather as below
    earlier = (reduces - 1) * gb / (reduces * gb + wb) * dp_raw
    spill = (reduces - 1) * max(earlier / (reduces - 1) - pipe["X_max"], 0.0) if reduces > 1 else 0.0
    dp_raw -= earlier
    window = m * pipe["X_max"] if zero == 3 else b_st["B"] + b_st["W"]
    ag = wb / (gb * (1 + (both and zero == 1)) + wb) * dp_raw if fw.overlap_param_gather and zero in (1, 2) else 0.0
    # fixed: exposed whatever the computation (no overlap, FSDP's edge units, the gather in the optimizer step); late:
    # the part of the rest the computation it runs beside does not cover
    fixed, late = 0.0, max(dp_raw - ag - window, 0.0) + max(ag - b_st["F"], 0.0)
    if fw.weight_gather_in_step:  # the weights gathered after the optimizer step: exposed
        fixed, late = step, max(dp_raw - step - window, 0.0)
    if fw.fsdp_unit_edges and row.overlap and zero >= 2 and pp == 1 and not model.is_moe and model.kind != "mlp":
        e = 1 - (model.layers - 1) * model.layer_params() / model.num_params()  # FSDP1's root unit and block 0
        ag, rs = (dp_raw * x / (wb * (1 + (zero == 3)) + gb) for x in (wb, gb))
        fixed, late = e * (ag + rs), (max((1 - e) * ag - b_st["F"], 0.0) + max((1 - e) * rs - window, 0.0)
                                      if zero == 2 else max(dp_raw - e * (ag + rs) - window, 0.0))
    if fw.fsdp_unit_edges and fw.pp_grad_sync_after_backward and row.overlap and pp > 1 and zero >= 1 \
            and not model.is_moe and model.kind != "mlp":
        # the reduce-scatter after the last backward, waited; the gather behind the next step's first forward
        ag, rs = (dp_raw * x / (wb * (1 + (zero == 3)) + gb) for x in (wb, gb))
        fixed, late = rs, max(ag - b_st["F"], 0.0)
    fixed, late, dp_raw = fixed, late + spill, dp_raw + earlier
    if not row.overlap:
        fixed, late = dp_raw, 0.0
    # the computation beside the dp_raw - fixed seconds of collectives runs on the SMs their channels leave: the step
    # gains max(f x overlapped - late, 0) (costmodel._data_parallel.compute_slowdown_s), f = the dense group's ring
    # channels (one CTA each) over the GPU's SMs (an MoE model: the dense and expert groups' f by their seconds)
    def share(link):  # the group's ring channels (one CTA each) over the GPU's SMs
        channels = nccl.ring_channels(link[3] > 1, link[4], *nccl.ring_channel_table(gpu.name))
        return float(channels) / streaming_multiprocessors(gpu.name)

    f = share(_collective_link(cluster, tp, g))
    if model.is_moe and dp_raw > 0:  # the dense and the expert exchanges' shares, weighed by their seconds
        f = (f * dense[0] + share(ep_link) * experts[0]) / dp_raw
    exposed = fixed + late + max(f * (dp_raw - fixed) - late, 0.0)
    # FSDP2's copies beside its collectives, on the computation stream in series with the step: the largest stage's
    exposed += _hbm(gpu, _fsdp_copies(model, fw, row) * params_max)
    return dict(exposed=exposed, opt=opt, params_max=params_max, g=g, edp=edp, shard=shard)


def _exchange_plan(model: Transformer, fw, row: _Row, experts: bool = False) -> dict:
    """The data-parallel exchange's collectives under ``fw`` (costmodel._data_parallel.exchange_plan): bucket size by
    dp ranks, ZeRO-3's all-gathers per forward and backward pass, reduce-scatters (None: by bucket), the share of the
    weights kept gathered for backward, and the exchanged parameters per GPU (message sizes: an MoE model's dense
    exchange all but the routed experts / tp, its expert exchange (``experts``) the routed experts / (ep etp))."""
    L, tp = model.layers, row.tp
    unit = (model.num_params() - model.embedding_params() - model.head_params()) / L / tp  # a layer's, per GPU
    total = model.num_params() / tp
    floor, per_rank = fw.dp_bucket_elems

    def bucket(ranks):
        if fw.dp_buckets_need_overlap and not row.overlap:
            return math.inf
        return unit if floor == 0 else max(floor, per_rank * ranks)

    per_layer, outside, scatter_per_layer = fw.zero3_gathers
    k_layers, k_outside, k_params = fw.zero3_kept
    kept = min(k_layers * unit + k_outside * (total - L * unit) + k_params, total) / total
    if per_layer > 0:
        fwd = L * per_layer + outside
        bwd = max(fwd - (k_layers * per_layer + k_outside + k_params / (unit / per_layer)), 0.0)
    else:
        fwd, bwd = 1.0, 1.0 - math.floor(kept)
    routed = model.moe_layers * model.moe_layer_expert_params()
    exchanged = routed / (row.ep * row.etp) if experts else (model.num_params() - routed) / tp
    return dict(bucket=bucket, fwd=fwd, bwd=bwd, kept=kept, est=exchanged / row.pp,
                scatters=L * scatter_per_layer + outside if scatter_per_layer > 0 else None)


def _memory(model: Transformer, cluster: Cluster, row: _Row, fw, stages: list[dict], moe: dict | None,
            params_max: float) -> dict:
    """Buffers and the worst stage's weights, gradients, optimizer state and activations per GPU."""
    zero, tp, h = row.zero, row.tp, model.hidden
    g = row.dp * row.cp
    shard = g if zero >= 1 else 1
    edp = max(row.dp * row.cp * tp // (row.ep * row.etp), 1)
    buffers = RESERVED_BYTES
    if tp > 1:
        buffers += 2 * ACT_BYTES * row.T * h
    if g > 1 or (model.is_moe and edp > 1):
        buffers += 2 * GRAD_COMM_BYTES * min(params_max, DP_BUCKET_ELEMS)
    if zero == 3:
        prefetch_p = model.layer_params() / tp
        if model.is_moe:
            prefetch_p = max(prefetch_p, moe["dense_p"] / tp + moe["experts_p"])
        buffers += 2 * WEIGHT_BYTES * prefetch_p
    if model.is_moe:
        buffers += 2 * ACT_BYTES * row.etp * moe["copies"] * h  # all-to-all send and receive buffers
    # a gradient's bytes: the profile's gradient buffer (its reduce dtype where it keeps one setting for both)
    grad_b = fw.grad_reduce_bytes[row.prec] if fw.grad_buffer_bytes is None else fw.grad_buffer_bytes[row.prec]
    worst, worst_total = None, -math.inf
    for st in stages:
        pd, pe = st["params"], st["params_e"]
        w = WEIGHT_BYTES * (pd / (g if zero == 3 else 1) + pe / (edp if zero == 3 else 1))
        gr = grad_b * (pd / (g if zero >= 2 else 1) + pe / (edp if zero >= 2 else 1))
        op = fw.optim_state_bytes * (pd / shard + pe / (edp if zero >= 1 else 1))
        total = w + gr + op + st["act"] + buffers
        if total > worst_total:
            worst, worst_total = (w, gr, op, st["act"]), total
    return dict(buffers=buffers, worst=worst, total=worst_total)


def _hardware_flops(model: Transformer, row: _Row, fw, act: dict) -> float:
    """FLOPs of an iteration with the recomputed ones (selective: the attention core; MLA: its up-projections;
    per-op checkpointing: the products not saved)."""
    h, s, B = model.hidden, model.seq_len, row.B
    flops_hw = model.model_flops_per_sample() * B
    qw, _, vw, ow = _widths(model)
    sel_flops = 2 * model.attention_span * (qw + ow)
    if model.mla:
        kv_up = model.kv_lora_rank * (model.heads * model.head_size + vw)
        sel_flops = 2 * (kv_up + (h if model.q_lora_rank is None else model.q_lora_rank) * qw)
    start = 0
    for n, rc in zip(row.layers, row.recomputes, strict=True):
        n_m = sum(_is_moe_layer(model, j) for j in range(start, start + n)) if model.is_moe else 0
        start += n
        if rc == "full":
            flops_hw += ((n - n_m) * model.layer_fwd_flops_per_token()
                         + (n_m * model.moe_layer_fwd_flops_per_token() if n_m else 0.0)) * s * B
        elif rc == "selective" and row.modules and model.kind != "mlp":  # Megatron-Core's named modules
            on = {name: bool(row.modules & bit) for name, bit in MODULE_BIT.items()}
            attn = ((2 * model.attention_span * (qw + ow) if on["core_attn"] else 0.0)
                    + (sel_flops if model.mla and on["mla_up_proj"] else 0.0))
            mats = model.mlp_matrices
            dense = attn + (2 * mats * h * model.ffn_hidden if on["mlp"] else 0.0)
            shared = 2 * mats * h * model.shared_experts * model.shared_expert_ffn
            block = 2 * (h * model.experts + mats * h * model.experts_per_token * model.expert_ffn) + shared
            moe_l = attn + (block if on["moe"] else shared if on["shared_experts"] else 0.0)
            flops_hw += ((n - n_m) * dense + n_m * moe_l) * s * B
        elif rc == "selective" and act["op_sac"]:
            flops_hw += ((n - n_m) * act["sac_re_flops"] + (n_m * act["sac_re_flops_m"] if n_m else 0.0)) * s * B
        elif rc == "selective" and model.kind != "mlp":
            flops_hw += n * sel_flops * s * B
    return flops_hw


def _report(model: Transformer, row: _Row, reason: str, pipe: dict, dp: dict, mem: dict, flops_hw: float) -> dict:
    """The metric columns of the row."""
    feasible = reason == "ok"
    m, B, s, fill, b_st = row.m, row.B, model.seq_len, pipe["fill"], pipe["bottleneck"]
    step = pipe["pipe"] + dp["exposed"] + dp["opt"]
    flops_model = model.model_flops_per_sample() * B
    n_gpu = row.dp * row.tp * row.pp * row.cp
    return {
        "step_time_s": step if feasible else math.inf,
        "compute_s": m * b_st["comp"],
        "recompute_s": m * b_st["re"],
        "tp_comm_s": m * (b_st["tp"] + b_st["re_tp"]),
        "cp_comm_s": m * (b_st["cp"] + b_st["re_cp"]),
        "ep_comm_s": m * b_st["ep"],
        "pp_comm_s": pipe["pp_comm"],
        "dp_comm_s": dp["exposed"],
        "bubble_s": fill,
        "optimizer_s": dp["opt"],
        "tokens_per_s": B * s / step if feasible else 0.0,
        "samples_per_s": B / step if feasible else 0.0,
        "mfu": flops_model / (step * n_gpu * row.peak) if feasible else 0.0,
        "hfu": flops_hw / (step * n_gpu * row.peak) if feasible else 0.0,
        "bubble_ratio": fill / pipe["pipe"] if pipe["pipe"] > 0 else 0.0,
        "mem_weights_bytes": mem["worst"][0],
        "mem_grads_bytes": mem["worst"][1],
        "mem_optimizer_bytes": mem["worst"][2],
        "mem_activations_bytes": mem["worst"][3],
        "mem_buffers_bytes": mem["buffers"],
        "mem_total_bytes": mem["total"],
        "microbatches": m,
        "feasible": feasible,
        "reason": REASONS.index(reason),
    }


assert set(SCHEDULES) == set(CLOSED_FORM_SCHEDULES) | set(SIMULATED_SCHEDULES)
assert RECOMPUTE == ("none", "selective", "full")
