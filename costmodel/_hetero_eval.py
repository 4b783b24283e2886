"""The heterogeneous evaluator: (model, HeteroCluster, HeteroTable) -> Metrics, vectorised.

Every quantity of costmodel._evaluate becomes an (N, S) array, one column per pipeline stage,
with the stage's own GPU type (peak FLOP/s, efficiency, HBM), its own degrees (dp_i, tp_i),
its micro-batch share b_i = B / (dp_i m) and its links. The formulas are the homogeneous
ones (layer_costs, in_flight, the closed forms, the simulator); on a single pool with equal
degrees on every stage the result equals costmodel.evaluate row by row.

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

Data parallelism. Each stage's gradients are reduced over its own dp_i x cp replicas, inside
its pool, on the link its dp group crosses. All stages reduce at the end of the step at
once; the step waits for the slowest (max over stages), overlapped with the bottleneck
stage's last backward as in the homogeneous model. The optimizer step is the slowest
stage's. MFU divides by the sum over stages of GPUs x that GPU's peak.

Memory is per stage against that pool's HBM; the reported breakdown is the stage closest to
its HBM (the largest fraction).
"""

from __future__ import annotations

import types

import numpy as np

from costmodel import _evaluate as K
from costmodel._evaluate import (
    REASON,
    SCHED,
    Metrics,
    _act_layer_bytes,
    all_reduce_s,
    gather_s,
    gemm_s,
    hbm_s,
    in_flight,
    layer_costs,
    outside_closed_form,
)
from costmodel._hardware import Cluster
from costmodel._hetero_cluster import HeteroCluster, as_hetero
from costmodel._hetero_strategy import HeteroTable
from costmodel._strategy import SCHEDULES
from costmodel._workloads import Transformer

_GPU_FIELDS = ("gemm_eff_max", "gemm_half_dim", "hbm_eff", "hbm_Bps", "hbm_bytes", "link_eff",
               "kernel_overhead_s")
_POOL_FIELDS = ("gpus_per_node", "intra_Bps", "inter_Bps", "intra_latency_s", "inter_latency_s", "num_gpus")


def _pool_arrays(cluster: HeteroCluster) -> dict[str, np.ndarray]:
    """(P,) arrays of every pool attribute the evaluator needs, and (P, 3) peaks."""
    pools = cluster.pools
    out = {f: np.array([getattr(p.gpu, f) for p in pools], dtype=np.float64) for f in _GPU_FIELDS}
    for f in _POOL_FIELDS:
        out[f] = np.array([getattr(p, f) for p in pools], dtype=np.float64)
    peaks = np.array([p.gpu.peak_flops for p in pools], dtype=np.float64)  # (P, 3)
    out["peak"] = np.where(peaks > 0, peaks, peaks[:, :1])  # a GPU without fp8 runs it as bf16
    out["link_Bps"] = np.array(cluster.link_Bps, dtype=np.float64)
    out["link_latency_s"] = np.array(cluster.link_latency_s, dtype=np.float64)
    return out


def group_link(stride, size, G, up_bw, out_bw, up_lat, out_lat, eff):
    """(bandwidth, latency) of a group of ``size`` ranks at ``stride``: the slowest link it
    crosses (module docstring). All arguments broadcast."""
    inside = stride * size <= G
    per_node = np.mod(stride, G) == 0
    bw = np.where(inside, up_bw, np.where(per_node, out_bw, np.minimum(up_bw, out_bw))) * eff
    lat = np.where(inside, up_lat, np.where(per_node, out_lat, np.maximum(up_lat, out_lat)))
    return bw, lat


def hetero_feasibility(model: Transformer, cluster: HeteroCluster, table: HeteroTable, pa=None) -> np.ndarray:
    """Reason code per row for everything but memory (0 = ok; first failing check wins)."""
    pa = pa or _pool_arrays(cluster)
    L, s = model.layers, model.seq_len
    p, m, B, c, v = (table[k] for k in ("pp", "microbatches", "global_batch", "cp", "vpp"))
    sched = table["schedule"]
    pool, d, t, n = (table.stages[k] for k in ("pool", "dp", "tp", "layers"))
    S = pool.shape[1]
    active = np.arange(S)[None, :] < p[:, None]
    P = len(cluster.pools)
    pool_ok = np.all(~active | (pool < P), axis=1)
    used = (d * t * c[:, None])[:, :, None] * ((pool[:, :, None] == np.arange(P)) & active[:, :, None])
    gpus_ok = pool_ok & np.all(used.sum(axis=1) <= pa["num_gpus"][None, :], axis=1)
    if model.kind == "mlp":
        tp_ok = np.all(~active | (model.hidden % t == 0), axis=1)
    else:
        tp_ok = np.all(~active | ((model.heads % t == 0) & (model.kv_heads % t == 0)), axis=1)
    pp_ok = ((np.sum(np.where(active, n, 0), axis=1) == L) & np.all(~active | (n >= 1), axis=1)
             & np.all(active | (n == 0), axis=1))
    batch_ok = np.all(~active | (B[:, None] % (d * m[:, None]) == 0), axis=1)
    chunks_ok = np.all(~active | (n % v[:, None] == 0), axis=1)
    chunked = (v >= 2) & (p >= 2) & chunks_ok
    sched_ok = np.select(
        [sched == SCHED["interleaved"], sched == SCHED["zb-v"], sched == SCHED["hanayo"]],
        [chunked, chunked & (v == 2), chunked & (v % 2 == 0)],
        v == 1,
    )
    checks = [
        (gpus_ok, "gpus_exceed_cluster"),
        (tp_ok, "tp_not_divide_heads"),
        (pp_ok, "pp_not_divide_layers"),
        ((c == 1) | (s % (2 * c) == 0), "cp_not_divide_seq"),
        (batch_ok, "batch_not_divide"),
        (sched_ok, "schedule_invalid"),
        ((table["zero_stage"] <= 1) | (p == 1), "zero_incompatible_pp"),
    ]
    reason = np.zeros(len(table), dtype=np.int8)
    for ok, name in reversed(checks):
        reason = np.where(ok, reason, REASON[name]).astype(np.int8)
    return reason


def _simulate_hetero(table, reason, F, Bk, W, T_C, m, rows, starts):
    """Exact pipeline time (N,) and in-flight micro-batches (M,) (flat stages) for ``rows``;
    NaN elsewhere. One simulate() call per distinct (schedule, pp, m, vpp)."""
    from costmodel._pipeline import simulate

    total = np.full(len(table), np.nan)
    k_act = np.full(F.shape, np.nan)
    sel = np.flatnonzero(rows & (reason == 0))
    if sel.size == 0:
        return total, k_act
    keys = np.stack([table["schedule"][sel], table["pp"][sel], m[sel], table["vpp"][sel]], axis=1)
    groups, inv = np.unique(keys, axis=0, return_inverse=True)
    for gi, (code, pg, mg, vg) in enumerate(groups):
        r = sel[inv.ravel() == gi]
        fi = starts[r][:, None] + np.arange(pg)[None, :]  # (R, pg) flat stage indices
        inputs = np.concatenate([F[fi], Bk[fi], W[fi], T_C[fi]], axis=1)
        uniq, back = np.unique(inputs, axis=0, return_inverse=True)
        back = back.ravel()
        res = simulate(SCHEDULES[code], int(pg), int(mg), int(vg), tf=uniq[:, :pg], tb=uniq[:, pg:2 * pg],
                       tw=uniq[:, 2 * pg:3 * pg], tc=uniq[:, 3 * pg:])
        total[r] = res.total_time[back]
        k_act[fi] = res.peak_activations[None, :]
    return total, k_act


def _evaluate_hetero_block(model: Transformer, cluster: HeteroCluster, table: HeteroTable, pa: dict,
                           pipeline: str, stages_out: bool = False) -> Metrics:
    """One block of rows. Stages are kept flat: the M = sum(pp) active (row, stage) pairs in
    row order, (M,) arrays; sums and maxima over a row's stages are ufunc.reduceat at the
    rows' first stages, so padding past pp costs nothing."""
    L, h, s, V = model.layers, model.hidden, model.seq_len, model.vocab
    N = len(table)
    p, m, B = table["pp"], table["microbatches"], table["global_batch"]
    c, v, sched, zero = table["cp"], table["vpp"], table["schedule"], table["zero_stage"]
    sp, overlap = table["sequence_parallel"], table["overlap_dp"]
    S = table.num_stages
    P = len(cluster.pools)
    starts = np.cumsum(p) - p  # (N,) flat index of each row's first stage
    M = int(p.sum())
    r = np.repeat(np.arange(N), p)  # (M,) row of each stage
    j = np.arange(M) - starts[r]  # (M,) stage index within its row
    R = lambda x: np.asarray(x)[r]  # noqa: E731  (N,) -> (M,)
    first = j == 0
    pr = R(p)
    last = j == pr - 1
    heads = starts + p - 1  # (N,) flat index of each row's last stage
    pool = np.minimum(table.stages["pool"][r, j], P - 1)
    d = table.stages["dp"][r, j]
    t = table.stages["tp"][r, j]
    order = table.stages["order"][r, j]
    n = table.stages["layers"][r, j].astype(np.float64)
    cc = R(c)
    reason = hetero_feasibility(model, cluster, table, pa)
    add = lambda a: np.add.reduceat(a, starts)  # noqa: E731  sum over a row's stages
    top = lambda a: np.maximum.reduceat(a, starts)  # noqa: E731  max over a row's stages

    def first_max(a):
        """(N,) flat index of the first stage holding its row's maximum of ``a``."""
        hit = a == top(a)[r]
        return np.minimum.reduceat(np.where(hit, np.arange(M), M), starts)

    # -- per-stage GPU and links (M,) --
    gpu = types.SimpleNamespace(**{f: pa[f][pool] for f in _GPU_FIELDS})
    peak = pa["peak"][pool, R(table["precision"])]
    G, up_bw, out_bw = pa["gpus_per_node"][pool], pa["intra_Bps"][pool], pa["inter_Bps"][pool]
    up_lat, out_lat = pa["intra_latency_s"][pool], pa["inter_latency_s"][pool]
    tp_inner = order == 0
    # Strides: tp-inner = Megatron's (tp, cp, dp); tp-across = (dp, tp, cp) innermost first.
    tp_stride = np.where(tp_inner, 1, d)
    cp_stride = np.where(tp_inner, t, d * t)
    # the dp x cp group: stride t (tp-inner); dp-innermost with cp > 1 spans the whole block
    dp_stride = np.where(tp_inner, t, 1)
    dp_size = np.where(tp_inner | (cc == 1), d * cc, d * t * cc)
    link = lambda stride, size: group_link(stride, size, G, up_bw, out_bw, up_lat, out_lat,  # noqa: E731
                                           gpu.link_eff)
    tp_link = link(tp_stride, t)
    cp_link = link(cp_stride, cc)
    dp_link = link(dp_stride, dp_size)  # gradients are reduced over dp x cp (Megatron-LM)
    b = R(B) / (d * R(m))  # sequences per micro-batch on one replica of the stage

    # -- one layer, one micro-batch, per stage (M,) --
    spr = R(sp)
    lc = layer_costs(model, None, b, t, cc, spr, peak, gpu=gpu, tp_link=tp_link, cp_link=cp_link)
    T = lc["T"]
    f_L = lc["gemm"] + lc["attn"] + lc["elem"] + lc["overhead"]
    bx_L = lc["gemm"] + 2.0 * lc["attn"] + K.ELEM_BWD_FACTOR * (lc["elem"] + lc["overhead"])
    w_L = lc["gemm"]
    tpf_L, cpf_L, cpb_L = lc["tp_fwd"], lc["cp_fwd"], lc["cp_bwd"]
    tp_bw, tp_lat = tp_link

    # -- embedding (stage 0) and head (stage p - 1), (N,) on those stages' GPUs --
    zero_col = np.zeros(N)
    if model.kind == "mlp":
        emb_c = emb_tp = head_gemm = head_elem = head_tp = zero_col
    else:
        g0 = types.SimpleNamespace(**{f: getattr(gpu, f)[starts] for f in _GPU_FIELDS})
        T0, t0 = T[starts], t[starts]
        emb_c = hbm_s(K.ACT_BYTES * 4.0 * T0 * h, g0)
        emb_tp = all_reduce_s(K.ACT_BYTES * T0 * h, t0, tp_bw[starts], tp_lat[starts])
        gl = types.SimpleNamespace(**{f: getattr(gpu, f)[heads] for f in _GPU_FIELDS})
        Tl, tl, pkl, bwl, latl = T[heads], t[heads], peak[heads], tp_bw[heads], tp_lat[heads]
        head_gemm = gemm_s(Tl, V / tl, h, pkl, gl)
        head_elem = hbm_s(K.ACT_BYTES * 3.0 * Tl * h + K.XENT_BYTES_PER_LOGIT * Tl * V / tl, gl)
        head_tp = all_reduce_s(K.ACT_BYTES * Tl * h, tl, bwl, latl) + 3.0 * all_reduce_s(4.0 * Tl, tl, bwl, latl)

    # -- stages (M,) --
    rcs = R(table["recompute"]) if table.stage_recompute is None else table.stage_recompute[r, j]
    full, sel = rcs == 2, rcs == 1
    re_L = np.where(full, f_L, np.where(sel, lc["attn"], 0.0))
    re_comm_L = np.where(full, tpf_L + cpf_L, 0.0)
    emb_F, head_FB = R(0.5 * emb_c + emb_tp), R(head_gemm + 0.5 * head_elem + 0.5 * head_tp)
    F = n * (f_L + tpf_L + cpf_L) + first * emb_F + last * head_FB
    Bk = n * (bx_L + tpf_L + cpb_L + re_L + re_comm_L) + first * R(0.5 * emb_c) + last * head_FB
    W = n * w_L + last * R(head_gemm)
    X = F + Bk + W

    # -- hand-offs: link j joins stage j and j + 1; link p - 1 the last and the first --
    flat = np.arange(M)
    nxt = np.where(j + 1 < pr, flat + 1, starts[r])
    pool_n = pool[nxt]
    share = K.ACT_BYTES * T * h / t  # bytes each GPU of a stage sends or receives
    hand_bytes = np.maximum(share, share[nxt])
    g_stage = d * t * cc
    # GPUs the strategy puts on each pool, (N, P), read back per stage
    used = np.stack([add(np.where(pool == q, g_stage, 0)) for q in range(P)], axis=1)
    fits = used[r, pool] <= G
    whole = np.mod(g_stage, G) == 0
    same_bw = np.where(fits, up_bw, np.where(whole, out_bw, np.minimum(up_bw, out_bw)))
    same_lat = np.where(fits, up_lat, np.where(whole, out_lat, np.maximum(up_lat, out_lat)))
    cross = pool != pool_n
    hop_bw = np.where(cross, pa["link_Bps"][pool, pool_n] * np.minimum(gpu.link_eff, gpu.link_eff[nxt]),
                      same_bw * gpu.link_eff)
    hop_lat = np.where(cross, pa["link_latency_s"][pool, pool_n], same_lat)
    T_C = np.where(pr > 1, hand_bytes / hop_bw + hop_lat, 0.0)  # (M,)
    inner = j < pr - 1  # the p - 1 forward boundaries

    # -- pipeline: closed forms (costmodel._evaluate), hand-offs summed over boundaries --
    bot = first_max(X)  # (N,) flat index of the bottleneck stage
    X_max, F_b, B_b, W_b = X[bot], F[bot], Bk[bot], W[bot]
    X_sum = add(X)
    is_inter = sched == SCHED["interleaved"]
    vv = np.where(is_inter, v, 1)
    fill = (X_sum - X_max) / vv
    fill = np.where(sched == SCHED["zb-h1"], (p - 1) * np.maximum(F_b + B_b - W_b, 0.0), fill)
    fill = np.where(sched == SCHED["zb-h2"], (p - 1) * np.maximum(F_b + B_b - 2 * W_b, 0.0), fill)
    pp_comm = 2.0 * add(np.where(inner, T_C, 0.0))
    pipe = m * X_max + fill + pp_comm
    simulated = (pipeline == "simulate") | outside_closed_form(sched, p, m, F_b, B_b, W_b)
    k = in_flight(R(sched), pr, R(m), R(v), j)
    if np.any(simulated & (reason == 0)):
        sim_total, sim_k = _simulate_hetero(table, reason, F, Bk, W, T_C, m, simulated, starts)
        done = ~np.isnan(sim_total)
        pipe = np.where(done, sim_total, pipe)
        pp_comm = np.where(done, np.minimum(pp_comm, np.maximum(sim_total - m * X_max, 0.0)), pp_comm)
        fill = np.where(done, pipe - m * X_max - pp_comm, fill)
        k = np.where(done[r], sim_k, k)

    # -- data-parallel gradient exchange and the optimizer, per stage, the slowest --
    layer_p = model.layer_params()
    emb_p = model.embedding_params()
    tied_copy = model.vocab * h if (model.tied_embeddings and model.kind != "mlp") else 0
    head_p = model.head_params() + np.where(first, 0, tied_copy)
    params = (n * layer_p + first * emb_p + last * head_p) / t  # (M,) per GPU
    params_max = top(params)
    g = d * cc
    z3, zr = R(zero) == 3, R(zero)
    dp_bw, dp_lat = dp_link
    grad_bytes = K.GRAD_COMM_BYTES * params
    dp_st = np.where(
        z3,
        R(m) * (2.0 * gather_s(K.WEIGHT_BYTES * params, g, dp_bw, dp_lat) + gather_s(grad_bytes, g, dp_bw, dp_lat)),
        all_reduce_s(grad_bytes, g, dp_bw, dp_lat),
    )
    dp_raw = top(dp_st)
    window = np.where(zero == 3, m * X_max, B_b + W_b)
    dp_exposed = np.where(overlap, np.maximum(dp_raw - window, 0.0), dp_raw)
    shard = np.where(zr >= 1, g, 1)
    opt_s = top(hbm_s(K.ADAM_BYTES_TOUCHED * params / shard, gpu))
    step = pipe + dp_exposed + opt_s

    # -- memory per GPU, per stage, against its pool's HBM --
    act_L, score_L = _act_layer_bytes(model, b, t, cc, spr)
    sp_div = np.where(spr, t, 1)
    act_kept = np.where(full, K.ACT_BYTES * T * h / sp_div, np.where(sel, act_L - score_L, act_L))
    work = np.where(full, act_L, 0.0)
    if model.kind == "mlp":
        emb_act = head_act = 0.0
    else:
        emb_act = (K.ACT_BYTES + 1) * T * h / sp_div
        head_act = 4.0 * T * V / t
    act = k * (n * act_kept + first * emb_act) + work + last * head_act
    w_b = K.WEIGHT_BYTES * params / np.where(z3, g, 1)
    g_b = K.GRAD_BYTES * params / np.where(zr >= 2, g, 1)
    o_b = K.OPTIM_BYTES * params / shard
    buffers = (
        np.where(t > 1, 2.0 * K.ACT_BYTES * T * h, 0.0)
        + np.where(g > 1, 2.0 * K.GRAD_COMM_BYTES * np.minimum(R(params_max), K.DP_BUCKET_ELEMS), 0.0)
        + np.where(z3, 2.0 * K.WEIGHT_BYTES * layer_p / t, 0.0)
        + K.RESERVED_BYTES
    )
    tot = w_b + g_b + o_b + act + buffers
    frac = tot / gpu.hbm_bytes
    worst = first_max(frac)
    mem_total = tot[worst]
    reason = np.where((reason == 0) & (frac[worst] > 1.0), REASON["out_of_memory"], reason).astype(np.int8)
    feasible = reason == 0

    # -- the bottleneck stage's time parts (per micro-batch, then x m) --
    fb, nb = first[bot], n[bot]
    lb = last[bot]
    fullb, selb = full[bot], sel[bot]
    comp_b = nb * (f_L[bot] + bx_L[bot] + w_L[bot]) + fb * emb_c + lb * (3.0 * head_gemm + head_elem)
    tp_b = nb * (2.0 * tpf_L[bot]) + fb * emb_tp + lb * head_tp + nb * np.where(fullb, tpf_L[bot], 0.0)
    cp_b = nb * (cpf_L[bot] + cpb_L[bot]) + nb * np.where(fullb, cpf_L[bot], 0.0)
    re_b = nb * re_L[bot]

    # -- throughput and utilisation --
    flops_model = model.model_flops_per_sample() * B
    attn_re = 4.0 * s * h if model.kind != "mlp" else 0.0
    re_tok = np.where(full, model.layer_fwd_flops_per_token(), np.where(sel, attn_re, 0.0))
    flops_hw = flops_model + add(n * re_tok) * s * B
    peak_sum = add(g_stage * peak)  # sum over stages of GPUs x their peak
    with np.errstate(divide="ignore", invalid="ignore"):
        samples = np.where(feasible, B / step, 0.0)
        mfu = np.where(feasible, flops_model / (step * peak_sum), 0.0)
        hfu = np.where(feasible, flops_hw / (step * peak_sum), 0.0)
        bubble_ratio = np.where(pipe > 0, fill / pipe, 0.0)
    del fullb, selb
    extra = {}
    if stages_out:
        def grid(a, fill_value=0.0):
            out = np.full((N, S), fill_value, dtype=np.float64)
            out[r, j] = a
            return out

        extra = {"_stage_pool": grid(pool, -1).astype(np.int64), "_stage_dp": grid(d, 1).astype(np.int64),
                 "_stage_tp": grid(t, 1).astype(np.int64), "_stage_layers": grid(n),
                 "_stage_micro_batch": grid(b), "_stage_forward_s": grid(F), "_stage_backward_s": grid(Bk),
                 "_stage_weight_grad_s": grid(W), "_stage_time_s": grid(R(m) * X),
                 "_stage_handoff_s": grid(np.where(inner, T_C, 0.0)), "_stage_dp_comm_s": grid(dp_st),
                 "_stage_in_flight": grid(k), "_stage_mem_bytes": grid(tot), "_stage_hbm_bytes": grid(gpu.hbm_bytes),
                 "_stage_active": grid(np.ones(M)) > 0}
    return Metrics(
        **extra,
        step_time_s=np.where(feasible, step, np.inf),
        compute_s=m * comp_b,
        recompute_s=m * re_b,
        tp_comm_s=m * tp_b,
        cp_comm_s=m * cp_b,
        pp_comm_s=pp_comm,
        dp_comm_s=dp_exposed,
        bubble_s=fill,
        optimizer_s=opt_s,
        tokens_per_s=samples * s,
        samples_per_s=samples,
        mfu=mfu,
        hfu=hfu,
        bubble_ratio=bubble_ratio,
        mem_weights_bytes=w_b[worst],
        mem_grads_bytes=g_b[worst],
        mem_optimizer_bytes=o_b[worst],
        mem_activations_bytes=act[worst],
        mem_buffers_bytes=buffers[worst],
        mem_total_bytes=mem_total,
        microbatches=m.astype(np.int64),
        feasible=feasible,
        reason=reason,
    )


def evaluate_hetero(model: Transformer, cluster: HeteroCluster | Cluster, table: HeteroTable, *,
                    pipeline: str = "closed_form") -> Metrics:
    """Evaluate every row of a HeteroTable (columns of costmodel.METRIC_COLUMNS).

    Vectorised over rows and stages in blocks of rows; rows outside the closed forms'
    domain (and every row with pipeline="simulate") are priced by the schedule simulator
    with per-stage times and per-link hand-offs."""
    if pipeline not in K.PIPELINE_MODES:
        raise ValueError(f"pipeline must be one of {K.PIPELINE_MODES}, got {pipeline!r}")
    hc = as_hetero(cluster)
    pa = _pool_arrays(hc)
    N = len(table)
    if N <= K.BLOCK_ROWS:
        return _evaluate_hetero_block(model, hc, table, pa, pipeline)
    parts = [_evaluate_hetero_block(model, hc, table.take(slice(i, i + K.BLOCK_ROWS)), pa, pipeline)
             for i in range(0, N, K.BLOCK_ROWS)]
    return Metrics({k: np.concatenate([part[k] for part in parts]) for k in parts[0]})


def hetero_stage_breakdown(model: Transformer, cluster: HeteroCluster | Cluster,
                           table: HeteroTable) -> dict[str, np.ndarray]:
    """Per pipeline stage, for a few rows (people's view): (N, S) arrays of pool index, dp,
    tp, layers, micro-batch per replica, F / B / W time per micro-batch, busy time per
    iteration (m x (F + B + W)), hand-off to the next stage, data-parallel exchange, in-flight
    micro-batches (simulator) and memory per GPU with its pool's HBM."""
    hc = as_hetero(cluster)
    out = _evaluate_hetero_block(model, hc, table, _pool_arrays(hc), "simulate", stages_out=True)
    return {k[len("_stage_"):]: v for k, v in out.items() if k.startswith("_stage_")}


def stage_rows(model: Transformer, cluster: HeteroCluster | Cluster, table: HeteroTable, i: int = 0) -> list[dict]:
    """Row i's stages as a list of plain dicts (pool name, dp, tp, layers, time_s, mem_bytes,
    ...): what `plansweep evaluate` and `show` print per stage."""
    hc = as_hetero(cluster)
    st = hetero_stage_breakdown(model, hc, table.take(slice(i, i + 1)))
    names = [p.name for p in hc.pools]
    rows = []
    for j in range(int(st["active"][0].sum())):
        rows.append({
            "stage": j, "pool": names[int(st["pool"][0, j])], "gpu": hc.pools[int(st["pool"][0, j])].gpu.name,
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
    """The per-stage table as text (used by `plansweep evaluate`; `show` can call it too)."""
    lines = [f"{'stage':>5} {'pool':<12} {'dp':>4} {'tp':>3} {'layers':>6} {'mb':>6} {'F ms':>9} {'B ms':>9} "
             f"{'W ms':>9} {'busy s':>8} {'hand-off ms':>11} {'dp s':>8} {'mem GB':>7} {'of GB':>6}"]
    for r in rows:
        lines.append(f"{r['stage']:>5} {r['pool']:<12} {r['dp']:>4} {r['tp']:>3} {r['layers']:>6} "
                     f"{r['micro_batch']:>6.3g} {1e3 * r['forward_s']:>9.2f} {1e3 * r['backward_s']:>9.2f} "
                     f"{1e3 * r['weight_grad_s']:>9.2f} {r['time_s']:>8.3f} {1e3 * r['handoff_s']:>11.3f} "
                     f"{r['dp_comm_s']:>8.3f} {r['mem_bytes'] / 1e9:>7.1f} {r['hbm_bytes'] / 1e9:>6.0f}")
    return "\n".join(lines)
