"""The block driver: one block of rows (a StageView, costmodel._stages) priced in named phases.

TODO
"""

from __future__ import annotations

import functools
import types

import numpy as np

from costmodel._collectives import pool_link
from costmodel._data_parallel import (
    ADAM_BYTES_TOUCHED,
    dp_exchange_coef,
    dp_exchange_s,
    exposed_dp_s,
    framework_columns,
)
from costmodel._distinct import distinct_rows
from costmodel._dtypes import ACT_BYTES
from costmodel._experts import layer_mix, moe_layers_in
from costmodel._feasibility import REASON, ep_fits, stage_feasibility, tp_divides
from costmodel._frameworks import framework_preset
from costmodel._hardware import ATTENTION_KERNELS, PRECISIONS
from costmodel._layer_compute import hbm_s, recompute_flops_per_token
from costmodel._layer_terms import (
    LAYER_INPUTS,
    MOE_PART_KEYS,
    framework_terms,
    layer_terms,
    moe_layer_inputs,
    moe_shape_terms,
    moe_stage_terms,
    shape_terms,
)
from costmodel._memory_terms import (
    buffer_bytes,
    layer_activations,
    moe_memory,
    stage_params,
    state_bytes,
    state_bytes_per_param,
)
from costmodel._metrics import Metrics, assemble_metrics
from costmodel._pipeline_terms import _first_max, bottleneck_parts, in_flight, pipeline_step
from costmodel._stages import GPU_FIELDS, StageView
from costmodel._workloads import Transformer


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

    # -- pipeline: bottleneck stage, fill (closed forms, costmodel._pipeline_terms), then the simulator --
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
