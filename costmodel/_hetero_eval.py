"""The heterogeneous evaluator: (model, HeteroCluster, HeteroTable) -> Metrics, vectorised.

Every quantity of costmodel._evaluate becomes an (N, S) array, one column per pipeline stage,
with the stage's own GPU type (peak FLOP/s, efficiency, HBM), its own degrees (dp_i, tp_i),
its micro-batch share b_i = B / (dp_i m) and its links. The formulas are the homogeneous
ones (layer_costs, in_flight, the closed forms, the simulator); on a single pool with equal
degrees on every stage the result equals costmodel.evaluate row by row. The code is the
same too: costmodel._evaluate's cost terms, layer_terms, pipeline_step (closed forms, then the
one simulation with its cache and mixed-shape walk), exposed_dp_s, bottleneck_parts,
assemble_metrics, run_blocks and feasibility checks, called here on flat stages or stage
configurations; this module adds only what is heterogeneous (per-stage pools, links and
hand-offs, split stages, the flat-stage layout).

Links. A group of ``size`` ranks at ``stride`` inside a stage's GPUs (see ORDERS in
costmodel._hetero_strategy) is priced on the slowest link it crosses:
    span = stride * size <= gpus_per_node   -> the pool's intra-node link
    stride a multiple of gpus_per_node      -> one rank per node: the inter-node network only
    otherwise                               -> both: min(intra, inter) bandwidth, max latency
so a cluster whose network beats its intra-node link (PCIe nodes on a 400 Gb/s network)
prices tensor parallelism strided across nodes (order "tp-across") on the network.

Pipeline hand-offs. Boundary i -> i + 1 moves the larger of the two per-GPU activation
shares (micro-batch re-sharding when dp_i != dp_{i+1}, see costmodel._hetero_strategy)
over: the link between the two pools when they differ; within a pool, the intra-node link
if the stages the strategy puts on that pool fit in one node, else the network (or the
slower of both when the sender's block is not a whole number of nodes). Closed forms charge
2 sum_i T_C,i for fill and drain (2 (p - 1) T_C when equal); the simulator takes one T_C per
link.

Data parallelism. Each stage's gradients are reduced over its own dp_i x cp replicas, on the
link its dp group crosses. All stages reduce at the end of the step at once; the step waits
for the slowest (max over stages), overlapped with the bottleneck stage's last backward as in
the homogeneous model. The optimizer step is the slowest stage's. MFU divides by the sum over
stages of GPUs x that GPU's peak.

Stages split across two pools (HeteroTable pool2 / dp2: dp2 of the dp replicas on pool2).
Every replica holds b_i sequences per micro-batch, so the stage runs at its slower pool's
replica (F, B, W of that pool's configuration, and its embedding / head on an end stage).
Its gradient ring spans both pools and runs at the slowest tier it crosses: each pool's part
of the dp group (its stride and size on that pool's links) and the inter-pool link, i.e.
2 (n - 1) / n bytes / min(bw) + 2 (n - 1) max(lat). Its hand-off is the slower of the
pairings pool -> next stage's pool and pool2 -> next stage's pool2 (replicas on the second
pool feed the next stage's second-pool replicas, HetPipe's virtual workers). Memory is
checked against the smaller HBM, the optimizer runs at the slower HBM. Split stages are
priced on their own subset (K of the M stages), so rows without one cost what they did.

Memory is per stage against that pool's HBM; the reported breakdown is the stage closest to
its HBM (the largest fraction).

Mixture of experts (costmodel._evaluate, "Expert parallelism"). ep and etp are row columns;
each stage folds its own tp x cp x dp ranks into etp x ep x edp (ep_fits per stage, else
ep_invalid). Per configuration the MoE layer's terms come from shape_terms(..., moe=...) with
the configuration's pool as the cluster (its GPU; all_to_all_s splits the dispatch and combine
over its intra-node link and network; the etp group on group_link's tier); a stage holds
moe_layers_in its layer range; memory is moe_memory with the expert state sharded over the
stage's edp ranks, whose gradient ring runs on the link that group crosses. As costmodel.evaluate
does, the step adds the slowest stage's dense exchange and the slowest stage's expert exchange
(and the same for the optimizer). Stages of an MoE row split across two pools are refused
(ep_invalid): their expert groups would cross the inter-pool link, which is not priced.
"""

from __future__ import annotations

import types

import numpy as np

from costmodel import _evaluate as K
from costmodel._evaluate import (
    REASON,
    Metrics,
    MOE_MEMORY_TERMS,
    TIE_REL,
    activation_bytes,
    assemble_metrics,
    bottleneck_parts,
    buffer_bytes,
    distinct_rows,
    dp_exchange_s,
    ep_fits,
    exposed_dp_s,
    framework_terms,
    framework_columns,
    in_flight,
    layer_terms,
    moe_layer_inputs,
    moe_layers_in,
    moe_memory,
    moe_stage_terms,
    moe_stages_alike,
    pipeline_step,
    reason_codes,
    recompute_flops_per_token,
    schedule_fits,
    shape_terms,
    stage_params,
    state_bytes,
    tp_divides,
)
from costmodel._frameworks import framework_preset
from costmodel._hardware import Cluster
from costmodel._hetero_cluster import HeteroCluster, as_hetero
from costmodel._hetero_strategy import HeteroTable
from costmodel._workloads import Transformer

_GPU_FIELDS = ("gemm_eff_max", "gemm_half_dim", "hbm_eff", "hbm_Bps", "hbm_bytes", "link_eff",
               "kernel_overhead_s")
_POOL_FIELDS = ("intra_Bps", "inter_Bps", "intra_latency_s", "inter_latency_s", "num_gpus")


def _pool_arrays(cluster: HeteroCluster) -> dict[str, np.ndarray]:
    """(P,) arrays of every pool attribute the evaluator needs, and (P, 3) peaks."""
    pools = cluster.pools
    out = {f: np.array([getattr(p.gpu, f) for p in pools], dtype=np.float64) for f in _GPU_FIELDS}
    for f in _POOL_FIELDS:
        out[f] = np.array([getattr(p, f) for p in pools], dtype=np.float64)
    peaks = np.array([p.gpu.peak_flops for p in pools], dtype=np.float64)  # (P, 3)
    out["peak"] = np.where(peaks > 0, peaks, peaks[:, :1])  # a GPU without fp8 runs it as bf16
    out["gpus_per_node_int"] = np.array([p.gpus_per_node for p in pools], dtype=np.int64)
    out["link_Bps"] = np.array(cluster.link_Bps, dtype=np.float64)
    out["link_latency_s"] = np.array(cluster.link_latency_s, dtype=np.float64)
    # Pipeline hand-off links as one lookup, flat index (x * P + y) * 3 + case, for a sender on
    # pool x and a receiver on pool y: x != y the inter-pool link (the lower efficiency of the
    # two GPUs); inside pool x, case 0 the intra-node link, 1 the network, 2 the slower of both.
    P = len(pools)
    up, net = out["intra_Bps"], out["inter_Bps"]
    up_l, net_l = out["intra_latency_s"], out["inter_latency_s"]
    eff = out["link_eff"]
    same_bw = np.stack([up * eff, net * eff, np.minimum(up, net) * eff], axis=1)  # (P, 3)
    same_lat = np.stack([up_l, net_l, np.maximum(up_l, net_l)], axis=1)
    cross_bw = out["link_Bps"] * np.minimum(eff[:, None], eff[None, :])  # (P, P)
    diag = np.eye(P, dtype=bool)[:, :, None]
    out["hop_bw"] = np.where(diag, same_bw[:, None, :], cross_bw[:, :, None]).ravel()  # (P * P * 3,)
    out["hop_lat"] = np.where(diag, same_lat[:, None, :], out["link_latency_s"][:, :, None]).ravel()
    return out


def group_link(stride, size, G, up_bw, out_bw, up_lat, out_lat, eff):
    """(bandwidth, latency) of a group of ``size`` ranks at ``stride``: the slowest link it
    crosses (module docstring). All arguments broadcast; stride, size and G integers."""
    span = stride * size
    inside = (span <= G) & (np.mod(G, span) == 0)  # else some group of the layout crosses a node boundary
    per_node = np.mod(stride, G) == 0
    bw = np.where(inside, up_bw, np.where(per_node, out_bw, np.minimum(up_bw, out_bw))) * eff
    lat = np.where(inside, up_lat, np.where(per_node, out_lat, np.maximum(up_lat, out_lat)))
    return bw, lat


def _uniform_rows(table: HeteroTable) -> np.ndarray:
    """(N,) rows with pp >= 4 whose stages all share pool, dp, tp, order, layers and recompute."""
    p = table["pp"]
    S = table.num_stages
    active = np.arange(S)[None, :] < p[:, None]
    same = p >= 4
    split_free = not np.any(table.stages["dp2"])  # then pool2 means nothing: not compared
    names = ("layers", "pool", "dp", "tp", "order", "pool2", "dp2")  # STAGE_COLUMNS, most varied first
    cols = [table.stages[k] for k in names if not (split_free and k in ("pool2", "dp2"))]
    if table.stage_recompute is not None:
        cols.append(table.stage_recompute)
    for a in cols if S >= 4 else ():  # stages 0-2 alike first: three column compares settle most placements
        same &= (a[:, 0] == a[:, 1]) & (a[:, 1] == a[:, 2])
    idx = np.flatnonzero(same) if np.count_nonzero(same) < len(same) // 4 else None  # rows still uniform, once few
    for a in cols:
        if idx is None:
            same &= np.all(~active | (a == a[:, :1]), axis=1)
            if np.count_nonzero(same) < len(same) // 4:
                idx = np.flatnonzero(same)
        elif idx.size:
            sub = a[idx]
            idx = idx[np.all(~active[idx] | (sub == sub[:, :1]), axis=1)]
    if idx is not None:
        same = np.zeros(len(p), dtype=bool)
        same[idx] = True
    return same


def _gpus_per_pool(N, P, r, w, pool, gpus, pool_b, gpus_b) -> np.ndarray:
    """(N, P) GPUs each row puts on each pool: its flat stages (rows ``r``, standing for ``w``
    stages each) hold ``gpus`` on ``pool`` and, where pool_b is given, ``gpus_b`` on pool_b."""
    used = np.bincount(r * P + pool, weights=np.broadcast_to(w * gpus, r.shape), minlength=N * P)
    if pool_b is not None:
        used += np.bincount(r * P + pool_b, weights=np.broadcast_to(w * gpus_b, r.shape), minlength=N * P)
    return used.reshape(N, P)


def split_columns(pool, pool2, dp2):
    """(pool_b, dp2) of stages: a stage's second pool and its replicas there, pool_b = pool and
    dp2 = 0 where the stage is not split (dp2 = 0, or pool2 the stage's own pool)."""
    split = (dp2 > 0) & (pool2 != pool)
    return np.where(split, pool2, pool), np.where(split, dp2, 0)


def hetero_feasibility(model: Transformer, cluster: HeteroCluster, table: HeteroTable, pa=None,
                       flat=None, used=None, stage_bits=None, framework=None) -> np.ndarray:
    """Reason code per row for everything but memory (0 = ok; first failing check wins).
    Stages flat as in _evaluate_hetero_block (M = sum(pp) pairs); ``flat`` = (starts, r,
    pool, dp, tp, layers, weight, pool_b, dp2) when the caller has them (weight: stages a flat
    stage stands for; pool_b, dp2: the second pool of a stage split across two pools and its
    replicas, pool_b = pool and dp2 = 0 where the stage is not split); ``used`` (N, P) GPUs per
    pool and ``stage_bits`` (M,) (2: tp does not divide the heads, 8: the batch does not divide
    into dp x micro-batches, 32: an MoE model's ep x etp does not fold into the stage's tp cp dp
    ranks, ep_fits) when the caller has them. An MoE model's stage split across two pools is
    refused as ep_invalid (its expert groups would span two pools: not priced)."""
    pa = pa or _pool_arrays(cluster)
    L, s = model.layers, model.seq_len
    p, m, B, c, v = (table[k] for k in ("pp", "microbatches", "global_batch", "cp", "vpp"))
    sched = table["schedule"]
    N, S, P = len(table), table.num_stages, len(cluster.pools)
    if flat is None:
        starts = np.cumsum(p) - p
        r = np.repeat(np.arange(N), p)
        fl = r * S + (np.arange(r.size) - starts[r])
        pool, d, t, n, pool2, d2 = (table.stages[k].ravel()[fl] for k in ("pool", "dp", "tp", "layers", "pool2",
                                                                           "dp2"))
        w = 1
        pool_b, d2 = split_columns(pool, pool2, d2)
    else:
        starts, r, pool, d, t, n, w, pool_b, d2 = flat
    layers_sum = np.add.reduceat(w * n, starts)
    # stages past pp must be empty
    pad_ok = table.stages["layers"] @ np.ones(S, dtype=np.int64) == layers_sum  # (a matmul: a fast row sum)
    in_range = (pool < P) & (pool_b < P)
    if stage_bits is None:
        tps = np.arange(int(t.max()) + 1 if t.size else 1)
        tps[0] = 1
        tp_bad = ~tp_divides(model, tps)[t]  # a lookup per tp value
        stage_bits = tp_bad * np.uint8(2) | (B[r] % (d * m[r]) != 0) * np.uint8(8)
        if model.is_moe:
            stage_bits = stage_bits | ~ep_fits(model, table["ep"][r], d * t * c[r], table["etp"][r]) * np.uint8(32)
    # per-stage failures as bits, one reduction over each row's stages
    bits = ~in_range * np.uint8(1) | stage_bits | (n < 1) * np.uint8(4)
    if model.is_moe and np.any(d2):
        bits |= (d2 > 0) * np.uint8(32)
    if np.any(v > 1):
        # v chunks of whole layers (costmodel._evaluate.feasibility)
        bits |= ((n < v[r]) if framework_preset(framework).uneven_chunks else (n % v[r] != 0)) * np.uint8(16)
    flags = np.bitwise_or.reduceat(bits.astype(np.uint8), starts)
    if used is None:  # pools out of range are counted on the last (their rows fail in_range anyway)
        used = _gpus_per_pool(N, P, r, w, np.minimum(pool, P - 1), (d - d2) * t * c[r],
                              np.minimum(pool_b, P - 1) if np.any(d2) else None, d2 * t * c[r])
    gpus_ok = flags & 1 == 0
    for x in range(P):
        gpus_ok &= used[:, x] <= pa["num_gpus"][x]
    tp_ok = flags & 2 == 0
    pp_ok = (layers_sum == L) & (flags & 4 == 0) & pad_ok
    batch_ok = flags & 8 == 0
    chunks_ok = flags & 16 == 0
    sched_ok = schedule_fits(sched, p, v, chunks_ok)
    ep, etp = table["ep"], table["etp"]
    ep_ok = flags & 32 == 0 if model.is_moe else ep_fits(model, ep, 1, etp)  # a dense model: 1 and 1
    return reason_codes(gpus_ok=gpus_ok, tp_ok=tp_ok, pp_ok=pp_ok, batch_ok=batch_ok, sched_ok=sched_ok, cp=c,
                        pp=p, seq_len=s, zero=table["zero_stage"], framework=framework, schedule=sched,
                        sequence_parallel=table["sequence_parallel"], precision=table["precision"], ep_ok=ep_ok,
                        ep=ep, etp=etp)


def _evaluate_hetero_block(model: Transformer, cluster: HeteroCluster, table: HeteroTable, pa: dict,
                           pipeline: str, stages_out: bool = False, simulate_now: bool = True,
                           compress: bool = True, framework=None) -> Metrics:
    """One block of rows. Stages are kept flat: the M = sum(pp) (row, stage) pairs in row
    order, (M,) arrays; sums and maxima over a row's stages are ufunc.reduceat at the rows'
    first stages, so padding past pp costs nothing. Everything that depends only on a
    stage's configuration (pool, rank order, dp, tp, recompute and the row's micro-batches,
    batch, cp, SP, precision) is computed once per distinct configuration (U of them, a
    few hundred in a search) and gathered back."""
    h, s = model.hidden, model.seq_len
    N = len(table)
    p, m, B = table["pp"], table["microbatches"], table["global_batch"]
    c, v, sched, zero = table["cp"], table["vpp"], table["schedule"], table["zero_stage"]
    sp, overlap = table["sequence_parallel"], table["overlap_dp"]
    fw = framework_preset(framework)
    zero, overlap = framework_columns(fw, p, zero, overlap)
    S = table.num_stages
    P = len(cluster.pools)
    # Uniform rows (every stage the same pool, degrees, layers and recompute, pp >= 4) keep 3
    # representative stages, first, one interior (weight pp - 2) and last, as costmodel.evaluate.
    comp = _uniform_rows(table) if compress else np.zeros(N, dtype=bool)
    moe = model.is_moe
    all_moe = moe and model.moe_layers == model.layers  # no dense layer: the dense terms are not needed
    if moe and np.any(comp):  # as costmodel.evaluate: three representatives where the MoE layers repeat alike
        comp &= moe_stages_alike(model, p)
    nrep = np.where(comp, 3, p)  # (N,) flat stages per row
    starts = np.cumsum(nrep) - nrep  # (N,) flat index of each row's first stage
    M = int(nrep.sum())
    r = np.repeat(np.arange(N), nrep)  # (M,) row of each flat stage
    kk = np.arange(M) - starts[r]  # (M,) position within the row's flat stages
    j, w = kk, 1  # (M,) the stage's index in its pipeline, stages each flat stage stands for
    if np.any(comp):
        compr = comp[r]
        j = np.where(compr & (kk == 2), p[r] - 1, kk)
        w = np.where(compr & (kk == 1), p[r] - 2, 1)
    R = lambda x: np.asarray(x)[r]  # noqa: E731  (N,) -> (M,)
    heads = starts + nrep - 1  # (N,) flat index of each row's last stage
    first, last = np.zeros(M, dtype=bool), np.zeros(M, dtype=bool)
    first[starts] = True
    last[heads] = True
    fl = r * S + j  # flat index into (N, S) stage columns
    pool_in = table.stages["pool"].ravel()[fl]
    d = table.stages["dp"].ravel()[fl]
    t = table.stages["tp"].ravel()[fl]
    order = table.stages["order"].ravel()[fl]
    n_int = table.stages["layers"].ravel()[fl]
    rcs = R(table["recompute"]) if table.stage_recompute is None else table.stage_recompute.ravel()[fl]
    if np.any(table.stages["dp2"]):
        pool_b_in, d2 = split_columns(pool_in, table.stages["pool2"].ravel()[fl], table.stages["dp2"].ravel()[fl])
    else:  # no stage split across two pools (a search's default)
        pool_b_in, d2 = pool_in, np.zeros_like(d)
    pool = np.minimum(pool_in, P - 1)
    pool_b = np.minimum(pool_b_in, P - 1) if pool_b_in is not pool_in else pool
    split = pool_b != pool  # (M,) stages whose dp replicas span two pools
    ks = np.flatnonzero(split)  # (K,) those stages
    any_split = ks.size > 0
    gpus_a = (d - d2) * t * R(c)  # (M,) the stage's GPUs on its pool
    gpus_b = d2 * t * R(c)  # on its second pool (0 unless split)
    used = _gpus_per_pool(N, P, r, w, pool, gpus_a, pool_b if any_split else None, gpus_b)
    n = n_int.astype(np.float64)
    if moe:  # MoE layers of each stage, layers [lo, lo + n) (costmodel._evaluate.moe_stage_layers)
        lay = table.stages["layers"]
        n_m = n if all_moe else moe_layers_in(model, (np.cumsum(lay, axis=1) - lay).ravel()[fl], n_int)
        n_d = n - n_m
    if np.any(comp):
        add = lambda a: np.add.reduceat(w * a, starts)  # noqa: E731  sum over a row's stages
    else:  # every flat stage stands for itself (w = 1)
        add = lambda a: np.add.reduceat(a, starts)  # noqa: E731
    top = lambda a: np.maximum.reduceat(a, starts)  # noqa: E731  max over a row's stages

    def first_max(a, tol=False):
        """(N,) flat index of the first stage holding its row's maximum of ``a`` (``tol``: within
        TIE_REL of it, as costmodel.evaluate picks an MoE row's bottleneck)."""
        hit = np.flatnonzero(a >= top(a)[r] * (1.0 - TIE_REL) if tol else a == top(a)[r])  # every row has one
        rh = r[hit]
        first_hit = np.ones(hit.size, dtype=bool)
        first_hit[1:] = rh[1:] != rh[:-1]
        return hit[first_hit]

    # -- distinct stage configurations: u = inv[stage], rep[u] = one stage of it --
    row_cols = [m, B - (B.min() if N else 0), c, sp.astype(np.int64), table["precision"].astype(np.int64), zero]
    if moe:  # the expert degrees shape an MoE layer
        row_cols += [table["ep"], table["etp"]]
    row_code = distinct_rows(*row_cols)[1]
    key_cols = [R(row_code), pool, order, d, t, rcs.astype(np.int64)]
    if any_split:  # the replicas of split stages on their second pool are configurations too
        key_cols = [np.concatenate([a, (pool_b if a is pool else a)[ks]]) for a in key_cols]
    rep2, inv2 = distinct_rows(*key_cols)
    inv, inv_b = inv2[:M], inv2[:M]  # (M,) configuration of each stage on its pool, on its second pool
    if any_split:
        inv_b = inv.copy()
        inv_b[ks] = inv2[M:]
    pool_u = key_cols[1][rep2]
    rep = np.concatenate([np.arange(M), ks])[rep2] if any_split else rep2  # a flat stage of each configuration
    ru = r[rep]  # (U,) a row of each configuration
    U = lambda x: np.asarray(x)[ru]  # noqa: E731  (N,) -> (U,)
    order_u, d_u, t_u, rc_u = order[rep], d[rep], t[rep], rcs[rep]
    c_u, sp_u, m_u, zero_u = U(c), U(sp), U(m), U(zero)
    cfg_bits = (~tp_divides(model, t_u) * np.uint8(2) | (U(B) % (d_u * m_u) != 0) * np.uint8(8)).astype(np.uint8)
    if moe:
        e_u, u_u = U(table["ep"]), U(table["etp"])
        cfg_bits |= ~ep_fits(model, e_u, d_u * t_u * c_u, u_u) * np.uint8(32)
    reason = hetero_feasibility(model, cluster, table, pa, flat=(starts, r, pool_in, d, t, n_int, w, pool_b_in, d2),
                                used=used, stage_bits=cfg_bits[inv], framework=fw)

    # -- per configuration: GPU, links, one layer and one micro-batch (U,) --
    gpu = types.SimpleNamespace(**{f: pa[f][pool_u] for f in _GPU_FIELDS})
    peak = pa["peak"][pool_u, U(table["precision"])]
    G, up_bw, out_bw = pa["gpus_per_node_int"][pool_u], pa["intra_Bps"][pool_u], pa["inter_Bps"][pool_u]
    up_lat, out_lat = pa["intra_latency_s"][pool_u], pa["inter_latency_s"][pool_u]
    tp_inner = order_u == 0
    # Strides: tp-inner = Megatron's (tp, cp, dp); tp-across = (dp, tp, cp) innermost first.
    tp_stride = np.where(tp_inner, 1, d_u)
    cp_stride = np.where(tp_inner, t_u, d_u * t_u)
    # the dp x cp group: stride t (tp-inner); dp-innermost with cp > 1 spans the whole block
    dp_stride = np.where(tp_inner, t_u, 1)
    dp_size = np.where(tp_inner | (c_u == 1), d_u * c_u, d_u * t_u * c_u)
    link = lambda stride, size: group_link(stride, size, G, up_bw, out_bw, up_lat, out_lat,  # noqa: E731
                                           gpu.link_eff)
    tp_link = link(tp_stride, t_u)
    cp_link = link(cp_stride, c_u)
    dp_bw, dp_lat = link(dp_stride, dp_size)  # gradients are reduced over dp x cp (Megatron-LM)
    b_u = U(B) / (d_u * m_u)  # sequences per micro-batch on one replica of the stage
    moe_kw, pool_net = {}, None
    if moe:
        # The MoE layers fold the stage's ranks into etp x ep x edp, etp innermost, whatever the
        # attention's order: etp consecutive ranks, ep ranks etp apart, edp ranks ep etp apart. The
        # all-to-alls split their bytes over the configuration's pool's intra-node link and network
        # (costmodel._evaluate.all_to_all_s, on the pool as a cluster of (U,) arrays).
        pool_net = types.SimpleNamespace(gpu=gpu, gpus_per_node=G, scaleup_Bps=up_bw, scaleout_Bps=out_bw,
                                         scaleup_latency_s=up_lat, scaleout_latency_s=out_lat)
        moe_kw = {"moe": (e_u, u_u, fw, U(table["precision"])), "etp_link": link(1, u_u)}
        edp_u = np.maximum(d_u * c_u * t_u // (e_u * u_u), 1)
        # expert gradients are reduced over the edp group: ep etp apart, spanning the stage's ranks
        # (size tp cp dp / (ep etp), whole where ep_fits; as a fraction elsewhere, so that the span
        # is the stage's ranks, as costmodel.evaluate prices both exchanges on one tier)
        ep_bw, ep_lat = link(e_u * u_u, d_u * c_u * t_u / (e_u * u_u))
    # one layer, the embedding and head as a first or last stage, activation bytes (U,)
    eu = framework_terms(fw, model, shape_terms(model, pool_net, b_u, t_u, c_u, sp_u, peak, gpu=gpu, tp_link=tp_link,
                                                cp_link=cp_link, **moe_kw), t_u, sp_u, U(table["precision"]))
    T = eu["T"]
    full_u, sel_u = rc_u == 2, rc_u == 1
    lt = layer_terms(eu, full_u, sel_u)  # (U,) per layer
    lt_m = layer_terms(moe_layer_inputs(eu), full_u, sel_u) if moe else None  # (U,) per MoE layer
    share = K.ACT_BYTES * T * h / t_u  # bytes each GPU of a stage sends or receives per hand-off
    g_u = d_u * c_u
    act_kept, work = activation_bytes(full_u, sel_u, eu["act_L"], eu["sel_kept"], eu["sel_work"], T, h,
                                      np.where(sp_u, t_u, 1))
    emb_act_u, head_act_u = eu["emb_act"], eu["head_act"]
    layer_p = model.layer_params()
    re_tok_u = recompute_flops_per_token(model, full_u, sel_u, fw)
    re_moe_u = recompute_flops_per_token(model, full_u, sel_u, fw, moe_layer=True) if moe else None
    hbm_Bps_eff = gpu.hbm_Bps * gpu.hbm_eff

    # -- embedding (stage 0) and head (stage p - 1), (N,) on those stages' GPUs --
    def edges(inv_x, rows=slice(None)):
        """Embedding and head times of rows ``rows`` (all: (N,)) with their first and last stages
        in configurations ``inv_x``."""
        u0, ul = inv_x[starts[rows]], inv_x[heads[rows]]
        return eu["emb_c"][u0], eu["emb_tp"][u0], eu["head_gemm"][ul], eu["head_elem"][ul], eu["head_tp"][ul]

    def times(inv_x, e, idx=slice(None)):
        """Forward, backward, weight-gradient time per micro-batch of stages ``idx`` (all: (M,))
        in configurations inv_x."""
        emb_c, emb_tp, head_gemm, head_elem, head_tp = e
        ri, ni, ui = r[idx], n[idx], inv_x[idx]
        if not moe:
            F, Bk, W = ni * lt["F"][ui], ni * lt["B"][ui], ni * lt["W"][ui]
        elif all_moe:
            F, Bk, W = (ni * lt_m[x][ui] for x in ("F", "B", "W"))
        else:  # the stage's dense and MoE layers (costmodel._evaluate's stage sums)
            F, Bk, W = (n_d[idx] * lt[x][ui] + n_m[idx] * lt_m[x][ui] for x in ("F", "B", "W"))
        f0, l0 = np.flatnonzero(first[idx]), np.flatnonzero(last[idx])  # the embedding's, the head's stages
        rf, rl = ri[f0], ri[l0]
        F[f0] += (0.5 * emb_c + emb_tp)[rf]
        Bk[f0] += (0.5 * emb_c)[rf]
        head_FB = (head_gemm + 0.5 * head_elem + 0.5 * head_tp)[rl]
        F[l0] += head_FB
        Bk[l0] += head_FB
        W[l0] += head_gemm[rl]
        return F, Bk, W

    # -- stages (M,) --
    e = edges(inv)
    F, Bk, W = times(inv, e)
    inv_t = inv  # (M,) the configuration that sets each stage's time
    if any_split:  # synchronous data parallelism: a split stage runs at its slower pool's replica
        ends = np.flatnonzero(split[starts] | split[heads])  # rows whose first or last stage is split
        e_b = [x.copy() for x in e]
        for x, y in zip(e_b, edges(inv_b, ends), strict=True):
            x[ends] = y
        F_b, B_b_, W_b_ = times(inv_b, e_b, ks)  # (K,)
        slower = F_b + B_b_ + W_b_ > F[ks] + Bk[ks] + W[ks]
        F[ks], Bk[ks], W[ks] = (np.where(slower, xb, xa[ks]) for xa, xb in ((F, F_b), (Bk, B_b_), (W, W_b_)))
        use_b = np.zeros(M, dtype=bool)
        use_b[ks] = slower
        inv_t = np.where(use_b, inv_b, inv)
        e = tuple(np.where(use_b[starts if i < 2 else heads], xb, xa)
                  for i, (xa, xb) in enumerate(zip(e, e_b, strict=True)))
    emb_c, emb_tp, head_gemm, head_elem, head_tp = e
    X = F + Bk + W

    # -- hand-offs: link j joins stage j and j + 1; link p - 1 the last and the first --
    nxt = np.arange(1, M + 1)
    nxt[heads] = starts
    un = inv[nxt]
    hand_bytes = np.maximum(share[inv], share[un])
    spans_nodes = (used > pa["gpus_per_node_int"][None, :]).ravel()  # (N * P,) the strategy's GPUs on a pool span nodes

    def hop_s(x, y, block, rows, nbytes, ragged=None):
        """Hand-off time from a stage's GPUs on pool x (a block of ``block`` GPUs) to the next
        stage's on pool y: the inter-pool link, or inside x its intra-node link if the
        strategy's GPUs on x fit one node, else the network (or the slower of both). ``ragged``:
        the block is not a whole number of nodes, where the caller has it."""
        if ragged is None:
            ragged = block % pa["gpus_per_node_int"][x] != 0
        spill = spans_nodes[rows * P + x]
        k = (x * P + y) * 3 + spill * (1 + ragged)  # case 0, 1 or 2
        return nbytes / pa["hop_bw"][k] + pa["hop_lat"][k]

    gpus_u = d_u * t_u * c_u  # GPUs of a stage configuration (on one pool)
    T_C = hop_s(pool, pool[nxt], gpus_a, r, hand_bytes,
                ragged=None if any_split else (gpus_u % G != 0)[inv])
    if any_split:  # replicas on the second pools hand off to each other (HetPipe's virtual workers)
        sel = np.flatnonzero(split | split[nxt])
        T_C[sel] = np.maximum(T_C[sel], hop_s(pool_b[sel], pool_b[nxt[sel]],
                                              np.where(split[sel], gpus_b[sel], gpus_a[sel]), r[sel], hand_bytes[sel]))
    T_C[starts[p == 1]] = 0.0  # (M,) no hand-off without a pipeline
    inner = ~last  # the p - 1 forward boundaries

    # -- pipeline: closed forms (costmodel._evaluate), hand-offs summed over boundaries --
    bot = first_max(X, tol=moe)  # (N,) flat index of the bottleneck stage
    X_max, F_b, B_b, W_b = X[bot], F[bot], Bk[bot], W[bot]

    def stage_inputs(q):  # the simulated rows' flat stages as (R, k) columns, zeros past each row's
        kmax = int(nrep[q].max())
        col = np.arange(kmax)[None, :]
        fi = starts[q][:, None] + np.minimum(col, nrep[q][:, None] - 1)  # (R, kmax) flat stages
        pad = col < nrep[q][:, None]
        return (comp[q], *(np.where(pad, x[fi], 0.0) for x in (F, Bk, W, T_C)))

    pipe, fill, pp_comm, needs_simulation, sim = pipeline_step(
        sched=sched, p=p, m=m, v=v, X_sum=add(X), X_max=X_max, F_b=F_b, B_b=B_b, W_b=W_b,
        pp_comm=2.0 * add(np.where(inner, T_C, 0.0)), reason=reason, pipeline=pipeline, simulate_now=simulate_now,
        stage_inputs=stage_inputs)
    k = in_flight(sched, p, m, v, j, rows=r)
    if sim is not None:
        q, row_shape, peaks = sim
        shape_of = np.full(N, -1)
        shape_of[q] = row_shape
        fs = np.flatnonzero(shape_of[r] >= 0)  # flat stages of those rows
        k[fs] = peaks[shape_of[r[fs]], j[fs]]

    # -- data-parallel gradient exchange and the optimizer, per stage, the slowest --
    g = g_u[inv]
    zr = zero_u[inv]
    if moe:  # memory first: its dense and expert parameters per stage price the exchanges
        mm = moe_memory(model, {key: eu[key][inv] for key in MOE_MEMORY_TERMS if key in eu}, t,
                        np.where(sp_u, t_u, 1)[inv], zr, g, n, n_m, first, last, full_u[inv], sel_u[inv], k,
                        e_u[inv], edp_u[inv], u_u[inv], row_max=top, to_stage=R)
        params = mm["dense_params"]  # (M,) per GPU, outside the routed experts
    else:
        params = stage_params(model, n, first, last, t)  # (M,) per GPU
        params_max = top(params)
    dbw, dlat = dp_bw[inv], dp_lat[inv]
    if any_split:
        # A dp group spanning two pools: the ring crosses the inter-pool link, so it runs at the
        # slowest tier it crosses: each pool's part of the group (its own stride and size, as
        # above) and the link between the pools.
        sel = np.flatnonzero(split)
        xa, xb, ts, cs = pool[sel], pool_b[sel], t[sel], c[r[sel]]
        tp_in = order[sel] == 0

        def part_link(x, d_part):
            size = np.where(tp_in | (cs == 1), d_part * cs, d_part * ts * cs)
            return group_link(np.where(tp_in, ts, 1), size, pa["gpus_per_node_int"][x], pa["intra_Bps"][x],
                              pa["inter_Bps"][x], pa["intra_latency_s"][x], pa["inter_latency_s"][x],
                              pa["link_eff"][x])

        (bw_a, lat_a), (bw_b, lat_b) = part_link(xa, d[sel] - d2[sel]), part_link(xb, d2[sel])
        bw_x = pa["link_Bps"][xa, xb] * np.minimum(pa["link_eff"][xa], pa["link_eff"][xb])
        dbw[sel] = np.minimum(np.minimum(bw_a, bw_b), bw_x)
        dlat[sel] = np.maximum(np.maximum(lat_a, lat_b), pa["link_latency_s"][xa, xb])
    dp_st = dp_exchange_s(zr, R(m), params, g, dbw, dlat)  # (M,)
    if moe:  # as costmodel.evaluate: the slowest dense exchange (dp x cp) and the slowest expert one (edp)
        ep_st = dp_exchange_s(zr, R(m), mm["expert_params"], edp_u[inv], ep_bw[inv], ep_lat[inv])
        dp_raw = top(dp_st) + top(ep_st)
        dp_st = dp_st + ep_st
    else:
        dp_raw = top(dp_st)
    dp_exposed = exposed_dp_s(zero, overlap, m, X_max, B_b, W_b, dp_raw)
    shard = np.where(zero_u >= 1, g_u, 1)[inv]
    hbm_stage_Bps = hbm_Bps_eff[inv]
    hbm = gpu.hbm_bytes[inv]
    if any_split:  # a split stage's optimizer step waits for the slower HBM; its memory fits the smaller
        hbm_stage_Bps[ks] = np.minimum(hbm_stage_Bps[ks], hbm_Bps_eff[inv_b[ks]])
        hbm[ks] = np.minimum(hbm[ks], gpu.hbm_bytes[inv_b[ks]])
    opt_s = top(K.ADAM_BYTES_TOUCHED * params / shard / hbm_stage_Bps)
    if moe:  # the routed experts' states, sharded over edp
        opt_s = opt_s + top(K.ADAM_BYTES_TOUCHED * mm["expert_params"] / np.where(zero_u >= 1, edp_u, 1)[inv]
                            / hbm_stage_Bps)
    step = pipe + dp_exposed + opt_s

    # -- memory per GPU, per stage, against its pool's HBM --
    if moe:
        w_b, g_b, o_b, act, buffers = (mm[x] for x in ("weights", "grads", "optimizer", "activations", "buffers"))
    else:
        act = n * act_kept[inv]
        act[starts] += emb_act_u[inv[starts]]  # the first stage keeps the embedding's output
        act = k * act + work[inv]
        act[heads] += head_act_u[inv[heads]]  # the last the logits
        w_b, g_b, o_b = state_bytes(params, zero_u, g_u, stage_of=inv)
        buffers = buffer_bytes(T, h, t_u, g_u, zero_u, params_max, layer_p, stage_of=inv, rows=r)
    tot = w_b + g_b + o_b + act + buffers
    frac = tot / hbm
    worst = first_max(frac)
    mem_total = tot[worst]
    reason = np.where((reason == 0) & (frac[worst] > 1.0), REASON["out_of_memory"], reason).astype(np.int8)
    feasible = reason == 0

    # -- the bottleneck stage's time parts (per micro-batch, then x m) --
    ub_ = inv_t[bot]
    if moe:  # the bottleneck stage's layers summed over both kinds
        n_bot, lt_bot = moe_stage_terms(n[bot], n_m[bot], None if all_moe else {k: lt[k][ub_] for k in lt},
                                        {k: lt_m[k][ub_] for k in lt_m})
    else:
        n_bot, lt_bot = n[bot], {k: lt[k][ub_] for k in ("compute", "recompute", "tp", "cp")}
    parts = bottleneck_parts(m, n_bot, first[bot], last[bot], lt_bot, emb_c, emb_tp, head_gemm, head_elem, head_tp)

    # -- throughput and utilisation --
    flops_model = model.model_flops_per_sample() * B
    if not moe:
        flops_hw = flops_model + add(n * re_tok_u[inv]) * s * B
    elif all_moe:
        flops_hw = flops_model + add(n * re_moe_u[inv]) * s * B
    else:
        flops_hw = flops_model + add(n_d * re_tok_u[inv] + n_m * re_moe_u[inv]) * s * B
    # sum over the GPUs of their peak
    peak_sum = add(gpus_a * peak[inv] + gpus_b * peak[inv_b]) if any_split else add((gpus_u * peak)[inv])
    extra = {}
    if stages_out:
        def grid(a, fill_value=0.0):
            out = np.full((N, S), fill_value, dtype=np.float64)
            out[r, j] = a
            return out

        extra = {"_stage_pool": grid(pool, -1).astype(np.int64), "_stage_dp": grid(d, 1).astype(np.int64),
                 "_stage_tp": grid(t, 1).astype(np.int64), "_stage_layers": grid(n),
                 "_stage_pool2": grid(pool_b, -1).astype(np.int64), "_stage_dp2": grid(d2, 0).astype(np.int64),
                 "_stage_micro_batch": grid(b_u[inv]), "_stage_forward_s": grid(F), "_stage_backward_s": grid(Bk),
                 "_stage_weight_grad_s": grid(W), "_stage_time_s": grid(R(m) * X),
                 "_stage_handoff_s": grid(np.where(inner, T_C, 0.0)), "_stage_dp_comm_s": grid(dp_st),
                 "_stage_in_flight": grid(k), "_stage_mem_bytes": grid(tot), "_stage_hbm_bytes": grid(hbm),
                 "_stage_active": grid(np.ones(M)) > 0}
    extra["_needs_simulation"] = needs_simulation
    return assemble_metrics(
        feasible=feasible, reason=reason, step=step, pipe=pipe, fill=fill, m=m, batch=B, seq_len=s,
        flops_model=flops_model, flops_hw=flops_hw, peak_total=peak_sum,
        **parts, pp_comm=pp_comm,
        dp_comm=dp_exposed, optimizer=opt_s, mem_weights=w_b[worst], mem_grads=g_b[worst],
        mem_optimizer=o_b[worst], mem_activations=act[worst], mem_buffers=buffers[worst], mem_total=mem_total,
        extra=extra)


def evaluate_hetero(model: Transformer, cluster: HeteroCluster | Cluster, table: HeteroTable, *,
                    pipeline: str = "closed_form", framework=None) -> Metrics:
    """Evaluate every row of a HeteroTable (columns of costmodel.METRIC_COLUMNS), in blocks of rows
    (run_blocks); the simulator prices rows as in costmodel.evaluate, with per-link hand-offs."""
    if pipeline not in K.PIPELINE_MODES:
        raise ValueError(f"pipeline must be one of {K.PIPELINE_MODES}, got {pipeline!r}")
    hc = as_hetero(cluster)
    pa = _pool_arrays(hc)
    N = len(table)
    if N == 0:
        return Metrics({k: np.zeros(0, dtype=bool if k == "feasible" else np.int8 if k == "reason"
                                    else np.int64 if k == "microbatches" else np.float64) for k in K.METRIC_COLUMNS})
    fw = framework_preset(framework)
    return K.run_blocks(table, lambda sub, now: _evaluate_hetero_block(model, hc, sub, pa, pipeline, simulate_now=now,
                                                                       framework=fw),
                        lambda sub: sub["microbatches"])


def hetero_stage_breakdown(model: Transformer, cluster: HeteroCluster | Cluster,
                           table: HeteroTable, framework=None) -> dict[str, np.ndarray]:
    """Per pipeline stage, for a few rows (people's view): (N, S) arrays of pool index, dp,
    tp, layers, micro-batch per replica, F / B / W time per micro-batch, busy time per
    iteration (m x (F + B + W)), hand-off to the next stage, data-parallel exchange, in-flight
    micro-batches (simulator) and memory per GPU with its pool's HBM."""
    hc = as_hetero(cluster)
    out = _evaluate_hetero_block(model, hc, table, _pool_arrays(hc), "simulate", stages_out=True, compress=False,
                                 framework=framework)
    return {k[len("_stage_"):]: v for k, v in out.items() if k.startswith("_stage_")}


def stage_rows(model: Transformer, cluster: HeteroCluster | Cluster, table: HeteroTable, i: int = 0,
               framework=None) -> list[dict]:
    """Row i's stages as a list of plain dicts (pool name, dp, tp, layers, time_s, mem_bytes,
    ...): what `plansweep evaluate` and `show` print per stage."""
    hc = as_hetero(cluster)
    st = hetero_stage_breakdown(model, hc, table.take(slice(i, i + 1)), framework)
    names = [p.name for p in hc.pools]
    rows = []
    for j in range(int(st["active"][0].sum())):
        p1, p2, d2 = int(st["pool"][0, j]), int(st["pool2"][0, j]), int(st["dp2"][0, j])
        split = {"pool2": names[p2], "gpu2": hc.pools[p2].gpu.name, "dp2": d2} if d2 else {}
        rows.append({
            "stage": j, "pool": names[p1], "gpu": hc.pools[p1].gpu.name, **split,
            "dp": int(st["dp"][0, j]), "tp": int(st["tp"][0, j]), "layers": int(st["layers"][0, j]),
            "micro_batch": float(st["micro_batch"][0, j]),
            "forward_s": float(st["forward_s"][0, j]), "backward_s": float(st["backward_s"][0, j]),
            "weight_grad_s": float(st["weight_grad_s"][0, j]), "time_s": float(st["time_s"][0, j]),
            "handoff_s": float(st["handoff_s"][0, j]), "dp_comm_s": float(st["dp_comm_s"][0, j]),
            "in_flight": float(st["in_flight"][0, j]), "mem_bytes": float(st["mem_bytes"][0, j]),
            "hbm_bytes": float(st["hbm_bytes"][0, j]),
        })
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
