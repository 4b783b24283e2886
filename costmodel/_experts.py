"""Mixture-of-experts layers: routing, expert GEMMs, the dispatch and combine all-to-alls.

E experts, top-k, capacity factor cf, expert parallelism ep and expert tensor parallelism etp.
    Rule: Megatron-Core's MoE Parallel Folding (Liu et al. 2025, arXiv:2504.14960;
    megatron/core/transformer/moe/README.md): the MoE layers of a pipeline stage run on the same
    tp x cp x dp ranks as its attention, regrouped as etp x ep x edp (etp innermost): ep must
    divide E, etp the expert's ffn width, and ep x etp must divide tp x cp x dp; the
    expert-data-parallel group has edp = tp cp dp / (ep etp) ranks, an ep group is ep ranks etp
    apart, an etp group etp consecutive ranks (etp = 1, the README's recommendation for
    fine-grained MoE and DeepSeek-V3's layout, is the default). A dense model takes ep = etp = 1.
    Each GPU routes its T / tp tokens (T = b s / cp); the busiest rank's E / ep experts take
    cf k T / tp token copies (routed_copies; grouped GEMMs of cf k T ep etp / (tp E) rows each after
    the etp group's all-gather, at 1 / etp of the expert's width); dispatch and combine are
    all-to-alls of those copies (h values each) over ep ranks, once each forward and again
    backward, the share to other nodes on the network and the rest on NVLink
    (costmodel._collectives.all_to_all_s; remote_nodes_per_token for a per-node dispatcher), plus
    the etp group's all-gather and reduce-scatter. Where the framework overlaps them (overlap_ep)
    only what exceeds the layer's compute is exposed. Shared experts and the router run like a
    dense MLP split by tp. Expert weights, gradients and optimizer state are split by ep x etp and
    sharded by ZeRO over edp (costmodel._memory_terms.moe_memory); their gradients are reduced over
    edp. Model FLOPs (MFU) count active parameters only.
Also here: which layers of a stage are MoE layers (moe_layers_in, moe_stage_layers) and the sum
over a stage's dense and MoE layers (layer_mix).
"""

from __future__ import annotations

import numpy as np

from costmodel._collectives import all_to_all_s, gather_s, tier
from costmodel._dtypes import ACT_BYTES
from costmodel._hardware import Cluster
from costmodel._layer_compute import ELEM_TF_PER_LAYER, ELEM_TH_PER_LAYER, gemm_s, hbm_s
from costmodel._strategy import StrategyTable
from costmodel._workloads import Transformer

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
    tp cp dp / (ep etp) and the expert-tensor-parallel degree (module docstring)."""
    e, u = table["ep"], table["etp"]
    return e, np.maximum(table["dp"] * table["cp"] * table["tp"] // (e * u), 1), u
