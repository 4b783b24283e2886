"""The block driver: one block of rows priced in named phases, each a function of the records before it.

    rows  = block_rows(...)              the row columns and stage arrays (costmodel._configurations.Rows)
    cfg   = configurations(rows)         the distinct stage configurations; split stages' pairs (Configs)
    reason, used = stage_feasibility()   the reason codes but memory (costmodel._feasibility)
    terms = configuration_terms(...)     one dense and one MoE layer's terms per configuration (Terms)
    st    = stage_times(...)             forward, backward and weight-gradient time of every stage (StageTimes)
    hand  = handoffs(...)                the activations' hand-off after every stage (Handoffs)
    pipe  = pipeline_time(...)           the bottleneck stage, the bubble, the simulator, micro-batches in flight
    mem   = memory(...)                  bytes per GPU of every stage against its pool's HBM; out of memory
    dp    = data_parallel(...)           the slowest stage's gradient exchange and optimizer step (DataParallel)
    return report(...)                   the bottleneck's time parts, FLOPs, the GPUs' peak: the metric columns

Arrays are whole columns: (N,) per row, (k, N) per stage column (or (1, N) where a row's stages share a value),
(U,) per configuration. The terms come from costmodel._layer_terms, _memory_terms, _pipeline_terms, _data_parallel
and _collectives; this module decides only which configuration, stage and link each row reads.
"""

from __future__ import annotations

import dataclasses
import functools
import types

import numpy as np

from costmodel._collectives import CollectiveLink, all_reduce_s, pool_collective_link, pool_link, split_collective_link
from costmodel._configurations import Configs, Rows, block_rows, configurations
from costmodel._data_parallel import (
    ExchangeCoef,
    ExchangePlan,
    dp_exchange_coef,
    exchange_plan,
    exchange_reads_precision,
    exposed_dp_s,
    fsdp_copy_bytes,
    has_fsdp_copies,
    per_step_exchange,
)
from costmodel._distinct import distinct_rows
from costmodel._dtypes import ACT_BYTES
from costmodel._experts import backward_chunk_excess, backward_chunks, expert_exchange, layer_mix, unpaired_share
from costmodel._feasibility import REASON, interleaving_runs, stage_feasibility
from costmodel._frameworks import framework_preset
from costmodel._hardware import ATTENTION_KERNELS, PRECISIONS, attention_head_dim_factor
from costmodel._layer_compute import (
    AMAX_BYTES,
    UB_CONFIGS,
    async_tp_backward_s,
    cp_by_all_to_all,
    fp8_cast_columns,
    fp8_tp_collectives_s,
    handoff_gather_s,
    hbm_s,
    recompute_flops_per_token,
    ub_layer_tp_s,
)
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
    grad_kwargs,
    layer_activations,
    moe_memory,
    stage_params,
    state_bytes,
    state_bytes_per_param,
)
from costmodel._metrics import Metrics, assemble_metrics
from costmodel._nccl import ring_channels
from costmodel._pipeline_terms import (
    SCHED,
    bottleneck_terms_of,
    extra_warmup_chunks,
    first_max_stage,
    in_flight,
    interleave_groups,
    pipeline_step,
    round_trip_handoffs_s,
    with_extra_chunk,
)
from costmodel._stages import GPU_FIELDS, StageView, group_layout
from costmodel._workloads import Transformer


def evaluate_block(model: Transformer, pa: dict, sv: StageView, pipeline: str = "closed_form",
                   simulate_now: bool = True, stages_out: bool = False, framework=None, memo=None) -> Metrics:
    """Metrics of one block of rows (a StageView on pools ``pa``), and ``_needs_simulation``: the rows the
    simulator must still price (``simulate_now`` False). ``stages_out``: the per-stage columns (_stage_*) too.
    ``memo``: the evaluation's costmodel._distinct.BlockMemo (what earlier blocks priced), or None."""
    rows, cfg, terms, st, hand, pipe, mem, dp = block_phases(model, pa, sv, pipeline, simulate_now, stages_out,
                                                             framework, memo)
    return report(rows, cfg, terms, st, hand, pipe, mem, dp, stages_out)


def block_phases(model: Transformer, pa: dict, sv: StageView, pipeline: str, simulate_now: bool, stages_out: bool,
                 framework=None, memo=None) -> tuple:
    """evaluate_block's phases in order, their records kept: (rows, cfg, terms, st, hand, pipe, mem, dp)."""
    fw = framework_preset(framework)
    rows = block_rows(model, pa, sv, fw, memo)
    cfg = configurations(rows)
    reason, used = stage_feasibility(model, pa, sv, fw, cfg.bits, None if cfg.split is None else cfg.split.shift)
    terms = configuration_terms(rows, cfg)
    st = stage_times(rows, cfg, terms, stages_out)
    hand = handoffs(rows, cfg, terms, st, used)
    pipe = pipeline_time(rows, terms, st, hand, reason, pipeline, simulate_now)
    mem = memory(rows, cfg, terms, st, pipe.k, reason)
    dp = data_parallel(rows, cfg, mem, pipe, stages_out)
    return rows, cfg, terms, st, hand, pipe, mem, dp


def plus_edges(ix, first, last):
    """f(a, e_first, e_last[, e_after_first, e_before_last]) = a + first * e_first[ix] + last * e_last[ix] + (not
    first) * e_after_first[ix] + (not last) * e_before_last[ix] (None: no such term), the embedding's and head's terms
    of stages in configurations ``ix`` (and the receiver's all-gathers of a tp-sharded hand-off: Terms.edge_of): where
    ``ix`` and ``a`` hold every entry of the masks, added on those stages only (the same sums bit for bit: x + 0.0 =
    x), else through the masks."""
    if np.shape(ix) != np.shape(first):
        masks = []  # (the masks as 1.0 / 0.0, once, at the first call: a bool times a float converts it each time)

        def through_masks(a, *es):
            if not masks:
                masks.extend(np.asarray(m, dtype=np.float64) for m in (first, last))
            if len(masks) == 2 and any(e is not None for e in es[2:]):  # (the complements at the first call needing
                masks.extend([1.0 - masks[0], 1.0 - masks[1]])  # them)
            return sum((m * (np.take(e, ix) if np.ndim(e) else e)  # (np.take: faster than e[ix])
                        for m, e in zip(masks, es, strict=False) if e is not None), a)
        return through_masks
    at = [(i, ix.reshape(-1)[i]) for i in (np.flatnonzero(first), np.flatnonzero(last))]

    def add(a, *es):  # a: a fresh array of the masks' shape
        if len(at) == 2 and any(e is not None for e in es[2:]):  # (the complements' entries, once)
            at.extend((i, ix.reshape(-1)[i]) for i in (np.flatnonzero(np.logical_not(first)),
                                                       np.flatnonzero(np.logical_not(last))))
        for (i, ix_i), e in zip(at, es, strict=False):
            if e is not None:
                a.reshape(-1)[i] += e[ix_i] if np.ndim(e) else e
        return a
    return add



# ---- one layer's terms per configuration ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Terms:
    """Per configuration (U,): the shape terms under the framework (``eu``), one dense layer's and one MoE layer's
    layer_terms (``lt``: None where every layer is an MoE layer; ``lt_m``: None for a dense model), the activation
    bytes per layer (``acts``), and the embedding's and head's times of a stage (``edge_of``: per part F, B, W, the
    first stage's and the last stage's term, then, where the receiver all-gathers a tp-sharded hand-off, those of every
    stage but the first and every stage but the last; None where it has none)."""

    eu: dict
    lt: dict | None
    lt_m: dict | None
    acts: dict
    edge_of: dict
    moe: bool
    all_moe: bool
    dense_first: bool
    n_d: np.ndarray | None  # the block's dense layers per stage (Rows.n_d)
    n_x: np.ndarray | None  # MoE layers x the share of passes the EP A2A overlap runs unpaired (unpaired_layers)
    n_b: np.ndarray | None = None  # backward stretches a stage and micro-batch (costmodel._experts.backward_chunks)

    def chunk_excess(self, nm, nb, ix):
        """A backward's launches at its stretches' starts (costmodel._experts.backward_chunk_excess) of stages in
        configurations ix holding nm MoE layers and nb backward stretches."""
        return backward_chunk_excess(nm, nb, *(np.take(self.lt_m[y], ix) for y in ("xb_d", "xb_e", "xb_t")))

    def times(self, ix, nn, nd, nm, edges, parts=("F", "B", "W"), nx=None, nb=None) -> list:
        """Forward, backward, weight-gradient time per micro-batch of stages in configurations ix holding nn layers
        (nd dense and nm MoE ones), one array per part; a part may be a tuple of them, summed (the terms per
        configuration, then the stages'). ``edges``: plus_edges of these stages; ``nx``: their n_x (None: 0); ``nb``:
        their n_b (None: 0)."""
        out = []
        for xs in (x if isinstance(x, tuple) else (x,) for x in parts):
            per_d, per_m = (None if q is None else functools.reduce(np.add, (q[y] for y in xs))
                            for q in (self.lt, self.lt_m))
            if not self.moe or self.all_moe:
                a = nn * np.take(per_d if per_m is None else per_m, ix)
            else:  # the stage's dense and MoE layers (the stages' own: on the first row only where dense_first)
                fo = self.dense_first and nd is self.n_d
                a = layer_mix(nd, np.take(per_d, ix[:1] if fo else ix), nm, np.take(per_m, ix), fo)
            if nx is not None and (k := sum(y in ("F", "B") for y in xs)):  # the unpaired passes' all-to-alls
                a = a + k * nx * np.take(self.lt_m["epx"], ix)
            if nb is not None and "B" in xs:  # dropless routing's launches at each backward stretch's start
                a = a + self.chunk_excess(nm, nb, ix)
            out.append(edges(a, *(self.edge_sum(xs, j) for j in range(len(self.edge_of["F"])))))
        return out

    def edge_sum(self, xs, j):
        """The edge_of terms ``j`` (0 first, 1 last, 2 after the first, 3 before the last) of parts xs summed; None
        where none has one."""
        es = [self.edge_of[y][j] for y in xs if self.edge_of[y][j] is not None]
        return functools.reduce(np.add, es) if es else None


def configuration_terms(rows: Rows, cfg: Configs) -> Terms:
    """The Terms of a block's configurations: shape terms once per configuration less recompute, ZeRO and a split
    stage's replicas, which they do not read (an MoE model's dense terms once per configuration less ep and etp
    too), then the framework's terms and each layer's F, B, W."""
    model = rows.model
    first_s, inv_s = distinct_rows(*(cfg.of(x) for x in cfg.shape_k), cfg.pool_u)
    if rows.moe:
        first_d, inv_d = distinct_rows(*(cfg.of(x)[first_s] for x in cfg.shape_k if x is not cfg.ep_key),
                                       cfg.pool_u[first_s])
        sh = {key: a[inv_d] for key, a in dense_shape_terms(rows, cfg, first_s[first_d]).items()}
        sh.update(moe_layer_shape_terms(rows, cfg, first_s, sh))
    else:
        sh = dense_shape_terms(rows, cfg, first_s)
    eu = {key: a[inv_s] for key, a in framework_terms(rows.fw, model, sh, cfg.t_u[first_s], cfg.sp_u[first_s],
                                                      cfg.prec_u[first_s],
                                                      None if cfg.rcm_u is None else cfg.rcm_u[first_s]).items()}
    full_u, sel_u = cfg.rc_u == 2, cfg.rc_u == 1
    lt = None if rows.all_moe else layer_terms({k: eu[k] for k in LAYER_INPUTS}, full_u, sel_u)  # (U,) per layer
    lt_m = layer_terms(moe_layer_inputs(eu, model), full_u, sel_u) if rows.moe else None  # (U,) per MoE layer
    acts = layer_activations(model, eu, full_u, sel_u, np.where(cfg.sp_u, cfg.t_u, 1))  # (U,) bytes per layer
    return Terms(eu=eu, lt=lt, lt_m=lt_m, acts=acts, edge_of=edge_parts(eu),
                 moe=rows.moe, all_moe=rows.all_moe, dense_first=rows.dense_first, n_d=rows.n_d,
                 n_x=unpaired_layers(rows), n_b=backward_chunks(rows))


def edge_parts(eu: dict) -> dict:
    """The embedding's (first stage) and the head's (last stage) time per micro-batch from the shape terms ``eu``, as
    Terms.edge_of: per part F, B, W, (the first stage's, the last stage's[, every stage's but the first, every
    stage's but the last]), None where it has none. The embedding's compute half forward (with its tp collective), half
    backward; the head's GEMM, half its element-wise work and half its tp collective in each of F and B, its weight
    gradient in W; each one's copy of its unsharded gradient before the reduction (emb_copy, head_copy:
    Framework.pre_reduce_copy_bytes, where priced) in B. A tp-sharded hand-off's all-gathers by its receiver
    (handoff_*: Framework.handoff_gathers, where priced), collective and copies, in the forward of every stage but the
    first (its input) and the backward of every stage but the last (its output and the gradient)."""
    emb_f, emb_b = 0.5 * eu["emb_c"] + eu["emb_tp"], 0.5 * eu["emb_c"]
    head_fb = eu["head_gemm"] + 0.5 * eu["head_elem"] + 0.5 * eu["head_tp"]
    head_b = head_fb
    if "emb_copy" in eu:
        emb_b, head_b = emb_b + eu["emb_copy"], head_fb + eu["head_copy"]
    if "handoff_tp_f" not in eu:  # (two terms a part: the ends' only)
        return {"F": (emb_f, head_fb), "B": (emb_b, head_b), "W": (None, eu["head_gemm"])}
    hand_f, hand_b = eu["handoff_tp_f"] + eu["handoff_copy_f"], eu["handoff_tp_b"] + eu["handoff_copy_b"]
    return {"F": (emb_f, head_fb, hand_f, None), "B": (emb_b, head_b, None, hand_b),
            "W": (None, eu["head_gemm"], None, None)}


def unpaired_layers(rows: Rows):
    """(k, N) each stage's MoE layers times the share of its passes Megatron-Core's EP A2A overlap runs alone
    (costmodel._experts.unpaired_share; Framework.overlap_ep_steady_only); None where no overlap is priced so."""
    fw = rows.fw
    if not (rows.moe and fw.overlap_ep and fw.overlap_ep_steady_only):
        return None
    share = unpaired_share(rows.sched == SCHED["interleaved"], rows.p, rows.m, rows.v, rows.j,
                           interleave_groups(rows.sched, rows.p, rows.m))
    return np.broadcast_to(rows.n_m, np.broadcast_shapes(np.shape(rows.n_m), np.shape(share))) * share


def pool_gpu(pa: dict, q):
    """The GPU fields of pools q, as arrays (one GPU type per configuration)."""
    return types.SimpleNamespace(**{f: pa[f][q] for f in GPU_FIELDS})


def head_dim_rates(pa: dict, fw, model) -> np.ndarray:
    """(P, 6): the share of each pool's attention kernel rate the model's heads keep (attention_head_dim_factor; ones
    for an MLP)."""
    dh = model.core_hidden / model.heads if model.kind != "mlp" else 128.0
    return np.array([attention_head_dim_factor(name, fw.attention_kernel, dh) for name in pa["gpu_names"]])


def dense_shape_terms(rows: Rows, cfg: Configs, ix) -> dict:
    """The dense layer's shape terms (shape_terms, before framework_terms) of configurations ix, on their pools' links:
    tp-inner rank order = Megatron's (tp, cp, dp); tp-across = (dp, tp, cp), innermost first."""
    pa, fw, model = rows.pa, rows.fw, rows.model
    q, tt, cc, dd, tin, pr = cfg.pool_u[ix], cfg.t_u[ix], cfg.c_u[ix], cfg.d_u[ix], cfg.order_u[ix] == 0, cfg.prec_u[ix]
    fp8 = pr == PRECISIONS.index("fp8")
    # torchao's float8 TP (Framework.fp8_tp_gather): fp8 rows with sequence parallelism at tp > 1; None: not run
    fp8_tp = fp8 & np.asarray(cfg.sp_u[ix], bool) & (tt > 1) if fw.fp8_tp_gather else None
    casts = fp8_cast_columns(fw, fp8, fp8_tp)
    gpu = pool_gpu(pa, q)
    tp_link = pool_link(pa, q, np.where(tin, 1, dd), tt)
    out = shape_terms(model, None, cfg.b_u[ix], tt, cc, cfg.sp_u[ix], cfg.peak[ix], gpu=gpu,
                      peak16=pa["peak"][q, np.where(fp8, 0, pr)],  # FP8_IN_16_BIT
                      fp8_tp=fp8_tp,
                      attn_eff=pa["attn_eff"][q, ATTENTION_KERNELS.index(fw.attention_kernel)] * head_dim_rates(
                          pa, fw, model)[q], casts=casts,
                      attn_nc=pa["attn_nc"][q, ATTENTION_KERNELS.index(fw.attention_kernel)],
                      tp_link=tp_link,
                      cp_link=pool_link(pa, q, np.where(tin, tt, dd * tt), cc), xent_bytes=fw.xent_bytes,
                      xent_peak_bytes=fw.xent_peak_bytes, cp_a2a=cp_by_all_to_all(fw, model))
    te8 = amax = None  # Transformer Engine's fp8 all-gathers (Framework.te_fp8_gather): fp8 rows, SP, t > 1; dense
    if fw.te_fp8_gather and not rows.moe and model.kind != "mlp" and not model.mla:
        te8 = fp8 & np.asarray(cfg.sp_u[ix], bool) & (tt > 1)  # (U,)
        amax = 1.0 if fw.te_fp8_gather == "current" else 0.0  # each cast's amax all-reduced first
        # the gathers (fp8_tp_collectives_s without its amax term), then the amax all-reduces, summed in that order
        elems = out["T"] * model.hidden
        fwd8 = fp8_tp_collectives_s(elems, tt, *tp_link, amax=0.0) + amax * 2.0 * all_reduce_s(AMAX_BYTES, tt, *tp_link)
        fwd8 = np.where(te8, fwd8, out["tp_fwd"])
        out["tp_fwd"], out["tp_bwd"] = fwd8, np.where(te8, fwd8, out["tp_bwd"])
    if fw.tp_backward_async and model.kind != "mlp" and not model.mla:  # the backward's collectives beside its GEMMs
        G = pa["gpus_per_node_int"][q]
        inside, _, _, g = group_layout(np.where(tin, 1, dd), tt, G)  # the tp group's ranks on a node
        share = ring_sm_share(pa, lambda x: x[q], ~inside, g)  # (U,) the SMs a tp collective's kernel holds
        out["tp_bwd"] = async_tp_backward_s(model, out["T"], tt, np.asarray(cfg.sp_u[ix], bool), cfg.peak[ix], gpu,
                                            *tp_link, share, fp8_gather=te8, amax=0.0 if amax is None else amax)
    if any(fw.tp_comm_overlap) and not rows.moe and model.kind != "mlp" and not model.mla:
        out.update(ub_tp_terms(fw, model, out, cfg, ix, gpu, pa["sms"][q], tp_link))
    if cfg.hp_key is not None:  # fp32 gradient accumulation in each layer's backward: the bf16 optimizer's (code 1),
        code = cfg.of(cfg.hp_key)[ix]  # FSDP's unsharded one with a pipeline (code 2; Framework.pp_grad_accum_bytes)
        per = np.where(code == 1, fw.hp_grad_bytes, np.where(code == 2, fw.pp_grad_accum_bytes, 0.0))
        out["cast_b"] = out["cast_b"] + hbm_s(per * model.layer_params() / tt, gpu)
    if fw.pre_reduce_copy_bytes and not rows.moe:  # each micro-batch's copy of the unsharded gradients before their
        copy = fw.pre_reduce_copy_bytes / tt  # reduction (FSDP1's flat gradient), bytes a parameter held by the stage
        out["cast_b"] = out["cast_b"] + hbm_s(copy * model.layer_params(), gpu)
        out["emb_copy"] = hbm_s(copy * model.embedding_params(), gpu)  # (the first stage's; the head and final
        out["head_copy"] = hbm_s(copy * model.head_params(), gpu)  # norm the last's; a tied embedding once)
    if any(fw.handoff_gathers):  # the receiver's all-gathers of a tp-sharded hand-off, per micro-batch: forward,
        n_f, n_b = fw.handoff_gathers  # backward (Framework.handoff_gathers; edge_parts places them)
        g, c = handoff_gather_s(model, out["T"], tt, gpu, *tp_link, fw.handoff_gather_copy_bytes,
                                np.asarray(cfg.sp_u[ix], bool))
        out.update(handoff_tp_f=n_f * g, handoff_tp_b=n_b * g, handoff_copy_f=n_f * c, handoff_copy_b=n_b * c)
    return out


def ub_tp_terms(fw, model, sh: dict, cfg: Configs, ix, gpu, sms, tp_link) -> dict:
    """tp_fwd and tp_bwd of configurations ix under Transformer Engine's userbuffers (Framework.tp_comm_overlap, by
    precision): each exchange pipelined with its GEMM (costmodel._layer_compute.ub_layer_tp_s) where the row runs
    sequence parallelism at t > 1 and its precision names a configuration; the shape terms ``sh`` elsewhere."""
    t, pr, T = cfg.t_u[ix], cfg.prec_u[ix], sh["T"]
    fwd, bwd = sh["tp_fwd"], sh["tp_bwd"]
    for name in sorted(set(fw.tp_comm_overlap) - {""}):
        on = np.asarray(cfg.sp_u[ix], bool) & (t > 1) & (np.asarray(fw.tp_comm_overlap)[pr] == name)  # (U,)
        if on.any():
            f, b = ub_layer_tp_s(model, T, t, cfg.peak[ix], gpu, *tp_link, sms, UB_CONFIGS[name])
            fwd, bwd = np.where(on, f, fwd), np.where(on, b, bwd)
    return {"tp_fwd": fwd, "tp_bwd": bwd}


def moe_layer_shape_terms(rows: Rows, cfg: Configs, ix, sh: dict) -> dict:
    """The MoE layer's shape terms (moe_shape_terms) of configurations ix, ``sh`` their dense ones. The MoE layers
    fold the stage's ranks into etp x ep x edp, etp innermost, whatever the attention's order; the all-to-alls split
    their bytes over the configuration's pool's intra-node link and network (all_to_all_s, on the pool as a cluster
    of arrays)."""
    pa, q = rows.pa, cfg.pool_u[ix]
    pool_net = types.SimpleNamespace(gpu=pool_gpu(pa, q), gpus_per_node=pa["gpus_per_node_int"][q],
                                     scaleup_Bps=pa["intra_Bps"][q], scaleout_Bps=pa["inter_Bps"][q],
                                     scaleup_latency_s=pa["intra_latency_s"][q],
                                     scaleout_latency_s=pa["inter_latency_s"][q])
    return moe_shape_terms(rows.model, pool_net, sh, cfg.b_u[ix], cfg.t_u[ix], cfg.c_u[ix], cfg.sp_u[ix],
                           cfg.peak[ix], (cfg.e_u[ix], cfg.u_u[ix], rows.fw, cfg.prec_u[ix]),
                           pool_link(pa, q, 1, cfg.u_u[ix]), sms=pa["sms"][q], ring=pa["ring_channels"][q])


# ---- stage times, hand-offs, the pipeline ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class StageTimes:
    """Every stage's time per micro-batch (k, N): F, B (``Bk``), W and their sum X (an MoE block that needs only X
    sums it at once: F, Bk, W None, ``fbw()`` gives them); ``inv_t``: the configuration that sets each stage's time
    (a split stage's slower pool's), ``edges`` its plus_edges; ``shape``: the stage arrays' (k, N).
    ``by_pp``: where a row's stages are a function of its configuration and pp (by_configuration_pp), the stage times
    priced once per distinct (configuration, pp) and only the rows' bottleneck gathered: X, F, Bk, W None, ``fbw()``
    gathers them; else None."""

    inv_t: np.ndarray
    edges: object
    F: np.ndarray | None
    Bk: np.ndarray | None
    W: np.ndarray | None
    X: np.ndarray | None
    fbw: object
    shape: tuple
    by_pp: ByPipeline | None = None
    x_at: object = None  # by_pp's X of rows q (k, len(q)), gathered from its distinct entries (None: X[:, q])


@dataclasses.dataclass(frozen=True)
class ByPipeline:
    """A block's stages per distinct (configuration, pp) (D of them, a few thousand in a block of 32,768 rows):
    ``first`` (D,) a row of each, ``inv`` (N,) each row's; the stage arrays by_configuration_pp gathered at them
    (k, D) (or (1, D)), read-only: ``ix`` the stages' configurations, ``n`` their layers, ``first_s`` and ``last_s``
    their flags, ``wt`` their weights and an MoE model's ``n_d`` and ``n_m`` (None where the rows have none);
    ``sub(a)`` another stage array's entries at them; ``edges`` plus_edges of their stages; each row's bottleneck
    stage (``bot``: the first within TIE_REL of the slowest, an MoE model's) and its F, B, W and X (``F_b``, ``B_b``,
    ``W_b``, ``X_max``), the weighted sum of its stages' X (``X_sum``), all (N,) gathered from the D entries."""

    first: np.ndarray
    inv: np.ndarray
    ix: np.ndarray
    n: np.ndarray
    first_s: np.ndarray
    last_s: np.ndarray
    wt: np.ndarray | None
    n_d: np.ndarray | None
    n_m: np.ndarray | None
    edges: object
    bot_flat_d: np.ndarray  # (D,) each one's bottleneck stage, a flat index into (k, N)
    bot: np.ndarray
    X_sum: np.ndarray
    X_max: np.ndarray
    F_b: np.ndarray
    B_b: np.ndarray
    W_b: np.ndarray

    def sub(self, a):
        """A stage array (k, N) or (1, N) at the D entries (k, D) or (1, D)."""
        return np.take(a, self.first, axis=1)  # (np.take: several times faster than a[:, first])

    def at(self, a):
        """A stage array's (k, N) or (1, N) bottleneck entry of each of the D (D,)."""
        return np.take(a[0], self.first) if len(a) == 1 else np.take(a, self.bot_flat_d)

    def back(self, a):
        """Values per distinct (configuration, pp) (D,) to the rows (N,)."""
        return np.take(a, self.inv)


def stage_times(rows: Rows, cfg: Configs, terms: Terms, stages_out: bool) -> StageTimes:
    """StageTimes of a block. Synchronous data parallelism: a stage split across two pools runs at its slower
    pool's replica (slower_pool_configurations)."""
    split = cfg.split
    inv_t = cfg.inv
    if split is not None and split.ks.size:
        tgt = slower_pool_configurations(rows, cfg, terms)
        # (in place for a dense model: what reads inv after this, memory and the hand-off bytes, is alike on both
        # pools; an MoE model's ep links read pool A's)
        np.put(inv_t := cfg.inv.copy() if rows.moe else cfg.inv, split.ks, tgt)
    edges = plus_edges(inv_t, rows.first, rows.last)
    shape = np.broadcast_shapes(*(np.shape(x) for x in (inv_t, rows.first, rows.n, rows.n_m)))
    if not stages_out and not (split is not None and split.ks.size) and (
            key := pipeline_key(rows, inv_t, terms)) is not None:
        return by_configuration_pp(rows, terms, inv_t, edges, shape, *key)
    layers = (rows.n_d, rows.n_m) if rows.moe else (None, None)
    fbw = functools.partial(terms.times, inv_t, rows.n, *layers, edges, nx=terms.n_x, nb=terms.n_b)
    if rows.moe and not stages_out and not (split is not None and split.ks.size):
        # an MoE row's F + B + W per stage in one sum (F, B and W apart only where the simulator takes them)
        (X,), F, Bk, W = terms.times(inv_t, rows.n, rows.n_d, rows.n_m, edges, parts=(("F", "B", "W"),),
                                     nx=terms.n_x, nb=terms.n_b), *(None,) * 3
    else:
        F, Bk, W = fbw()
        X = F + Bk + W
    return StageTimes(inv_t=inv_t, edges=edges, F=F, Bk=Bk, W=W, X=X, fbw=fbw, shape=X.shape)


def pipeline_key(rows: Rows, inv_t, terms: Terms):
    """(first, inv) of the distinct (configuration, pp) of a block whose rows' stages are a function of them (one
    configuration a row, three representatives or runs of alike stages: stage indices and weights a function of pp;
    layers per stage a function of pp; no unpaired all-to-alls and no MoE backward stretches, which read the
    schedule), where they are 1 / BY_PP_SHARE of the rows or fewer; else None."""
    sv, p = rows.sv, rows.p
    if (inv_t.shape[0] != 1 or np.shape(sv.layers)[0] != 1 or terms.n_x is not None or terms.n_b is not None
            or not np.all(sv.comp)):
        return None
    if not sv.layers_of_pp:  # (N,) layers per stage: one value per pp?
        n = sv.layers[0]
        (at_p := np.zeros(int(p.max()) + 1, dtype=n.dtype))[p] = n
        if not np.array_equal(np.take(at_p, p), n):
            return None
    first, inv = distinct_rows(inv_t[0], p)
    return (first, inv) if BY_PP_SHARE * len(first) <= rows.N else None


# pipeline_key's threshold: the D entries' stage times and their gathers pay where they are 1 / BY_PP_SHARE of the
# rows or fewer (GPT-3 175B's bench rows: 2,304 of 32,768 a block, 1.1-1.2x the block's speed; Mixtral 8x7B's 8,959,
# its ep and etp in the configurations: as fast either way; DeepSeek-V3's 14,023).
BY_PP_SHARE = 4


def by_configuration_pp(rows: Rows, terms: Terms, inv_t, edges, shape, first, inv) -> StageTimes:
    """StageTimes through ByPipeline: F, B, W and X of each distinct (configuration, pp)'s stages (k, D), each one's
    bottleneck and X_sum, gathered to the rows (N,): the same values as pricing every row's stages (entry-wise
    arithmetic on the same operands, the same sums over the same stages)."""
    D = len(first)

    def sub(a):  # a stage array's (k, D) entries, read-only (ByPipeline's fields, read by the phases after this one)
        if a is None:
            return None
        (out := np.take(a, first, axis=1)).flags.writeable = False
        return out
    ix, n, first_s, last_s, wt = sub(inv_t), sub(rows.n), sub(rows.first), sub(rows.last), sub(rows.wt)
    layers = (sub(rows.n_d), sub(rows.n_m)) if rows.moe else (None, None)
    edges_d = plus_edges(ix, first_s, last_s)
    fbw_d = functools.partial(terms.times, ix, n, *layers, edges_d)
    if rows.moe:  # (as stage_times: X in one sum, the bottleneck's F, B, W priced again on it)
        (X,) = terms.times(ix, n, *layers, edges_d, parts=(("F", "B", "W"),))
    else:
        F, Bk, W = fbw_d()
        X = F + Bk + W
    bot = first_max_stage(X, tol=rows.moe)  # (D,) (every column a stage: three representatives or runs)
    bot_flat = bot * D + np.arange(D)
    at = lambda a: a[0] if len(a) == 1 else np.take(a, bot_flat)  # noqa: E731
    if rows.moe:
        ub, first_b, last_b = at(ix), at(first_s), at(last_s)
        F_b, B_b, W_b = terms.times(ub, at(n), *(at(x) for x in layers), plus_edges(ub, first_b, last_b))
    else:
        F_b, B_b, W_b = at(F), at(Bk), at(W)
    X_sum = np.sum(X if wt is None else wt * X, axis=0)
    back = lambda a: np.take(a, inv)  # noqa: E731
    by_pp = ByPipeline(first=first, inv=inv, ix=ix, n=n, first_s=first_s, last_s=last_s, wt=wt, n_d=layers[0],
                       n_m=layers[1], edges=edges_d, bot_flat_d=bot * rows.N + first, bot=back(bot),
                       X_sum=back(X_sum), X_max=back(at(X)), F_b=back(F_b), B_b=back(B_b), W_b=back(W_b))
    return StageTimes(inv_t=inv_t, edges=edges, F=None, Bk=None, W=None, X=None,
                      fbw=lambda: tuple(np.take(a, inv, axis=1) for a in fbw_d()), shape=shape, by_pp=by_pp,
                      x_at=lambda q: np.take(X, np.take(inv, q), axis=1))


def slower_pool_configurations(rows: Rows, cfg: Configs, terms: Terms) -> np.ndarray:
    """Each split stage's configuration that sets its time: pool B's where each of B's terms is at least A's (and
    one larger), A's where A's are, else the stage's sums compared (per pair; a dense model only decides by terms)."""
    split, lt = cfg.split, terms.lt
    side = np.full(len(split.ia_p), 2)  # per pair: 0 A, 1 B, 2 compared stage by stage
    if not rows.moe:
        (emb_f, head_fb, *hand_f), (emb_b, head_b, *hand_b) = terms.edge_of["F"], terms.edge_of["B"]
        ta, tb = (np.stack([x[i] for x in (lt["F"], lt["B"], lt["W"], emb_f, emb_b, head_fb, head_b,
                                           terms.eu["head_gemm"], *(y for y in hand_f + hand_b if y is not None))])
                  for i in (split.ia_p, split.ib_p))
        side = np.where((ta >= tb).all(axis=0), 0, np.where((tb >= ta).all(axis=0), 1, side))
    tgt = np.take(np.where(side == 1, split.ib_p, split.ia_p), split.inv_p)
    if np.any(side == 2) and (mix := np.flatnonzero(np.take(side, split.inv_p) == 2)).size:
        sub = lambda a: np.broadcast_to(a, cfg.inv.shape).reshape(-1)[split.ks[mix]]  # noqa: E731
        a_b = (split.ia[mix], split.ib_p[split.inv_p[mix]])  # (both pools' configurations of these stages)
        nx, nb = (None if y is None else sub(y) for y in (terms.n_x, terms.n_b))
        xs = (sum(terms.times(x, sub(rows.n), *((sub(rows.n_d), sub(rows.n_m)) if rows.moe else (None, None)),
                              plus_edges(x, sub(rows.first), sub(rows.last)), nx=nx, nb=nb)) for x in a_b)
        tgt[mix] = np.where(next(xs) < next(xs), *a_b[::-1])
    return tgt


@dataclasses.dataclass(frozen=True)
class Handoffs:
    """The hand-off after each stage (k, N) (the last one's to the first), the fill and drain hand-offs per row
    (N,), and ``inner``: the p - 1 forward boundaries."""

    T_C: np.ndarray
    pp_comm: np.ndarray
    inner: np.ndarray
    blocking: np.ndarray | None = None  # (N,) the rows whose hand-offs block (blocking_rows); None: none
    serial: np.ndarray | None = None  # (N,) the steady-state hand-offs a batched exchange's simulation leaves out:
    # (Framework.exchange_calls - 1) x steady_handoffs_s at the blocking rows; None: none
    lockstep: np.ndarray | None = None  # (N,) the rows that run torch's interleaved grid (lockstep_rows); None: none


def hop_s(pa: dict, x, y, ragged, nbytes, spill):
    """Hand-off time from a stage's GPUs on pool x to the next stage's on pool y: the inter-pool link, or inside x
    its intra-node link if the row's GPUs on x fit one node (not ``spill``), else the network (or the slower of
    both when the stage's GPUs are not a whole number of nodes: ``ragged``)."""
    kcase = np.asarray((x * pa["num_gpus"].size + y) * 3 + spill * (np.int8(1) + ragged), dtype=np.intp)
    return nbytes / np.take(pa["hop_bw"], kcase) + np.take(pa["hop_lat"], kcase)


def handoffs(rows: Rows, cfg: Configs, terms: Terms, st: StageTimes, used) -> Handoffs:
    """Handoffs of a block: each GPU of a stage sends or receives T h / t bytes of activations per micro-batch (the
    larger share where the next stage's tp differs); ``used``: the GPUs each row puts on each pool (N, P)."""
    pa, P, N, p, split = rows.pa, rows.P, rows.N, rows.p, cfg.split
    share = ACT_BYTES * terms.eu["T"] * rows.model.hidden / cfg.t_u
    p8 = rows.pool.astype(np.int8) if P <= 6 else rows.pool  # (int8 where P <= 6: the arithmetic on fewer bytes)
    spills = sum((used[:, q] > pa["gpus_per_node_int"][q]).astype(p8.dtype) << q for q in range(P))  # (N,): bit q,
    spill_on = lambda x: (spills >> x) & 1  # noqa: E731  (the row's GPUs on pool q span more than a node; on pool x)
    ragged = lambda x, block: block % pa["gpus_per_node_int"][x] != 0  # noqa: E731
    rag_u = ragged(cfg.pool_u, cfg.ga_u)  # the stage's GPUs on its pool: a configuration's (a split stage's: each pool)
    rag = (np.take(cfg.pair(rag_u, ragged(split.xa, split.ga_a)), split.inv_q) if split is not None
           else np.take(rag_u, cfg.inv) if cfg.keyed else rows.per_dp_group(lambda d, t, c, _, q: ragged(q, d * t * c)))
    spill = spill_on(p8)
    if cfg.one_per_row:  # every link alike
        T_C = hop_s(pa, p8, p8, rag, np.take(share, cfg.inv), spill)
    else:
        X_shape = st.shape
        last_flat = np.where(rows.sv.comp, X_shape[0] - 1, p - 1) * N + np.arange(N)  # each row's last stage

        def after(a):  # the next stage's entry (the last stage's: the first's; padding: any)
            a = np.broadcast_to(a, X_shape)
            out = np.concatenate([a[1:], a[:1]])
            out.reshape(-1)[last_flat] = a[0]
            return out

        hand = np.maximum(sh := np.take(share, cfg.inv), after(sh))  # (the next stage's: shifted, not gathered again)
        T_C = hop_s(pa, p8, after(p8), rag, hand, spill)
        if split is not None and split.ks.size:  # second pools' replicas hand off to each other (HetPipe): each
            # stage's second pool (its pool if not split) to the next stage's, the slower of both pairings
            np.put(pool_b := p8.copy(), split.ks, split.pool_ks)
            rag_b = np.take(cfg.pair(rag_u, ragged(split.xb, split.ga_b)), split.inv_q)
            T_C = np.maximum(T_C, hop_s(pa, pool_b, after(pool_b), rag_b, hand, spill_on(pool_b)))
    if np.any(p <= 1):  # no hand-off without a pipeline
        T_C = np.where(p > 1, T_C, 0.0)
    inner = rows.on & ~rows.last  # the p - 1 forward boundaries
    if T_C.shape[0] == 1:
        pp_comm = 2.0 * (p - 1) * T_C[0]
    else:
        pp_comm = 2.0 * np.sum(np.where(inner, rows.weigh(T_C), 0.0), axis=0)
    blocking, serial = blocking_rows(rows), None
    if blocking is not None:
        q = np.flatnonzero(blocking)
        pp_comm = pp_comm + 0.0  # (a fresh array: the steady state's hand-offs added at the blocking rows)
        c = T_C[:, q] if T_C.shape[0] == 1 else np.where(inner[:, q], T_C[:, q], 0.0)
        steady = steady_handoffs_s(c, p[q], rows.m[q], None if T_C.shape[0] == 1 else rows.sv.comp[q])
        calls = rows.fw.exchange_calls  # (each exchange's transfers one after the other: DeepSpeed's 2)
        pp_comm[q] += calls * steady
        if calls > 1:
            serial = np.zeros(N)
            serial[q] = (calls - 1) * steady
    lockstep = lockstep_rows(rows)
    if lockstep is not None:
        q = np.flatnonzero(lockstep)
        pp_comm = pp_comm + 0.0  # (a fresh array: the grid's hand-offs added at the lockstep rows)
        c = T_C[0, q] if T_C.shape[0] == 1 else np.max(np.where(rows.on[:, q], T_C[:, q], 0.0), axis=0)
        pp_comm[q] += lockstep_handoffs_s(c, rows.v[q], rows.m[q])
    return Handoffs(T_C=T_C, pp_comm=pp_comm, inner=inner, blocking=blocking, serial=serial, lockstep=lockstep)


def blocking_rows(rows: Rows):
    """(N,) the rows whose hand-offs block (Framework.blocking_p2p: its 1F1B without interleaving, pp > 1); None where
    none does."""
    if not rows.fw.blocking_p2p:
        return None
    out = (rows.sched == SCHED["1f1b"]) & (rows.p > 1)
    return out if out.any() else None


def round_trip_rows(rows: Rows):
    """(R,) the rows whose 1F1B hand-offs do not block (pp > 1; Framework.blocking_p2p off): their steady state's
    round trips (costmodel._pipeline_terms.round_trip_handoffs_s); None where none does."""
    if rows.fw.blocking_p2p:
        return None
    q = np.flatnonzero((rows.sched == SCHED["1f1b"]) & (rows.p > 1))
    return q if q.size else None


def lockstep_rows(rows: Rows):
    """(N,) the interleaved rows (pp > 1, m a multiple of pp: interleaving_runs' "pp_multiple") whose framework runs
    torch's interleaved grid (Framework.lockstep_interleaved); None where none does. Where pp does not divide m the grid
    is not always an order its passes' inputs allow (m < pp never: a pass falls on its input's step), so those rows keep
    the asynchronous hand-offs (tests/test_pipeline_lockstep.py)."""
    if not rows.fw.lockstep_interleaved:
        return None
    i = np.flatnonzero((rows.sched == SCHED["interleaved"]) & (rows.p > 1))  # (the division on these rows alone)
    pp_multiple = interleaving_runs("pp_multiple", np.take(rows.sched, i), np.take(rows.p, i), np.take(rows.m, i))
    if not (i := i[pp_multiple]).size:
        return None
    out = np.zeros(rows.N, dtype=bool)
    out[i] = True
    return out


def lockstep_handoffs_s(c, v, m):
    """Hand-off time torch's interleaved grid (Framework.lockstep_interleaved) adds to the closed forms' 2 (p - 1) T_C
    (N,): every step of its steady state, a chunk's forward or backward on every rank at once, ends in an exchange with
    both neighbours that the next step waits on (costmodel._pipeline.simulate_lockstep), so each of a stage's 2 v m
    passes carries one hand-off but the path's first (the first virtual stage's forward, its input local) and last (the
    first virtual stage's backward, nothing to send): (2vm - 2) c, c the slowest link (every link carries the grid's
    exchanges, the last stage's to the first included). On uniform stages and links, m a multiple of p and c at most a
    tenth of a chunk's forward, the closed form with it and the grid's one chunk forward more
    (costmodel._pipeline_terms.pipeline_step) equals the grid simulated (tests/test_pipeline_lockstep.py works p = 4,
    m = 8, v = 2 by hand). ``c`` (N,): the hand-off; ``v``, ``m`` (N,)."""
    return (2.0 * v * m - 2.0) * c


def steady_handoffs_s(c, p, m, comp=None):
    """Hand-off time the steady state of a 1F1B whose hand-offs block adds to the closed forms' 2 (p - 1) T_C (N,).

    Stage i's steady period is F + B and the two exchanges it waits on (costmodel._frameworks.BLOCKING_P2P_SOURCE):
    after its forward with stage i + 1 (its output out, a gradient in), after its backward with stage i - 1; the first
    and last stages wait on one each. The m - 1 periods after the first then carry the exchanges of the stage with the
    slowest pair (``pair``: the largest left + right link time; 2c on uniform links, c at p = 2), less the one link the
    last period does not wait on (pair - the largest link): max((m - 1) pair - (pair - c_max), 0). On uniform stages
    and links that is (2m - 3) c for p >= 3 and (m - 1) c for p = 2, as the schedule's op order simulated with blocking
    hand-offs gives (costmodel._pipeline; tests/test_pipeline_blocking.py works p = 4, m = 8 by hand); on uneven links
    an approximation. ``c`` (k, N): each stage's link to the next (0 past the last inner one); ``comp`` (N,): the
    columns are three representatives (first, interior, last), the interior link repeated (None: one column).
    An exchange whose two transfers run one after the other (Framework.exchange_calls 2, DeepSpeed's TrainSchedule)
    waits this twice: the caller multiplies (DEEPSPEED_BLOCKING_P2P_SOURCE; tests/test_pipeline_blocking.py)."""
    if c.shape[0] == 1:  # every link alike
        c1 = c[0]
        pair, c_max = np.where(p >= 3, 2.0 * c1, c1), c1
    else:
        left = np.concatenate([np.zeros_like(c[:1]), c[:-1]])
        pair, c_max = np.max(c + left, axis=0), np.max(c, axis=0)
        if comp is not None:  # an interior stage between two interior links (p >= 4)
            pair = np.where(comp & (p >= 4), np.maximum(pair, 2.0 * c[1]), pair)
    return np.maximum((m - 1) * pair - (pair - c_max), 0.0)


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """The bottleneck stage of each row (``bot_flat``; its configuration ``ub``, first / last flags, F, B, W and
    X), the pipeline time, its bubble (``fill``) and exposed hand-offs, the rows the simulator must still price,
    and the micro-batches each stage holds at its peak (k, N)."""

    bot_flat: np.ndarray
    ub: np.ndarray
    first_b: np.ndarray
    last_b: np.ndarray
    F_b: np.ndarray
    B_b: np.ndarray
    W_b: np.ndarray
    X_max: np.ndarray
    pipe: np.ndarray
    fill: np.ndarray
    pp_comm: np.ndarray
    needs_simulation: np.ndarray
    k: np.ndarray

    def at(self, a):
        """The bottleneck stage's entry of a stage array (N,)."""
        return a[0] if len(a) == 1 else np.take(a, self.bot_flat)


def pipeline_time(rows: Rows, terms: Terms, st: StageTimes, hand: Handoffs, reason, mode: str,
                  simulate_now: bool) -> Pipeline:
    """The bottleneck stage (MoE rows: the first within TIE_REL of the slowest, as the scalar reference picks it),
    the closed forms' bubble (costmodel._pipeline_terms), then the simulator where needed, and the micro-batches in
    flight (the simulator's peaks on the rows it priced)."""
    N, X, by = rows.N, st.X, st.by_pp
    bot = by.bot if by is not None else first_max_stage(X if rows.real else np.where(rows.on, X, -np.inf),
                                                         tol=rows.moe)
    bot_flat = bot * N + np.arange(N)
    at = lambda a: a[0] if len(a) == 1 else np.take(a, bot_flat)  # noqa: E731  (the bottleneck stage's entry)
    ub, first_b, last_b = at(st.inv_t), at(rows.first), at(rows.last)  # its configuration (a split stage's slower)
    if by is not None:  # (priced per distinct (configuration, pp), gathered)
        F_b, B_b, W_b, X_max = by.F_b, by.B_b, by.W_b, by.X_max
    elif st.F is not None:  # its F, B, W and X gathered (the same sums as pricing them again on (N,), in fewer passes)
        F_b, B_b, W_b, X_max = at(st.F), at(st.Bk), at(st.W), at(X)
    else:  # an MoE row's X summed at once: its bottleneck's F, B, W priced again on (N,), its X gathered, so that
        # the fill (X_sum - X_max) of a one-stage pipeline is 0
        layers = (at(rows.n_d), at(rows.n_m)) if rows.moe else (None, None)
        F_b, B_b, W_b = terms.times(ub, at(rows.n), *layers, plus_edges(ub, first_b, last_b),
                                    nx=None if terms.n_x is None else at(terms.n_x),
                                    nb=None if terms.n_b is None else at(terms.n_b))
        X_max = at(X)

    def stage_inputs(q):  # the simulated rows' stage columns (R, k): 3 representatives or the stages to pp
        p, sv = rows.p, rows.sv
        kk = st.shape[0] if np.all(sv.comp[q]) else int(p[q].max())
        tc = np.where(rows.j[:kk, q] < p[q], np.broadcast_to(hand.T_C, st.shape)[:kk, q], 0.0)
        fbw = st.fbw() if st.F is None else (st.F, st.Bk, st.W)
        return sv.comp[q], *(a[:kk, q].T for a in fbw), tc.T

    pp_comm = hand.pp_comm
    if (q := round_trip_rows(rows)) is not None:  # a non-blocking 1F1B's steady round trips
        pp_comm = pp_comm + 0.0  # (a fresh array: the round trips added at their rows)
        Xq = X[:, q] if X is not None else st.x_at(q)
        c = np.where(hand.inner[:, q], np.broadcast_to(hand.T_C, st.shape)[:, q], 0.0)
        w = np.broadcast_to(rows.wt if rows.wt is not None else 1.0, st.shape)[:, q]
        pp_comm[q] += round_trip_handoffs_s(Xq, c, w, rows.p[q], rows.m[q], X_max[q])
    pipe, fill, pp_comm, needs_simulation, sim = pipeline_step(
        sched=rows.sched, p=rows.p, m=rows.m, v=rows.v,
        X_sum=by.X_sum if by is not None else np.sum(rows.weigh(X), axis=0), X_max=X_max, F_b=F_b,
        B_b=B_b, W_b=W_b, pp_comm=pp_comm, reason=reason, pipeline=mode, simulate_now=simulate_now,
        stage_inputs=stage_inputs, blocking=hand.blocking, serial=hand.serial, lockstep=hand.lockstep)
    extra = extra_warmup_chunks(rows.fw, rows.model)
    k = in_flight(rows.sched, rows.p, rows.m, rows.v, rows.j, extra=extra, stage_of_pp=True)
    if sim is not None:
        q, row_shape, peaks = sim
        k[:, q] = with_extra_chunk(peaks[row_shape[None, :], np.minimum(rows.j[:, q], rows.p[q] - 1)], rows.sched[q],
                                   rows.m[q], rows.v[q], extra)
    return Pipeline(bot_flat=bot_flat, ub=ub, first_b=first_b, last_b=last_b, F_b=F_b, B_b=B_b, W_b=W_b, X_max=X_max,
                    pipe=pipe, fill=fill, pp_comm=pp_comm, needs_simulation=needs_simulation, k=k)


# ---- memory, the data-parallel exchange, the metric columns ---------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Memory:
    """Bytes per GPU: every stage's total (``tot``, k x N), parameters and state; the worst stage's (the closest to
    its pool's HBM) total and state by part; the reason codes with out of memory added. ``hbm_rate`` (P,) and
    ``edp`` (an MoE model's expert-data-parallel ranks) for the data-parallel phase."""

    mem: dict  # activations, buffers (and, an MoE model, moe_memory's other entries)
    params: np.ndarray
    params_max: np.ndarray
    tot: np.ndarray
    hbm: np.ndarray
    hbm_rate: np.ndarray
    edp: np.ndarray | None
    worst_flat: np.ndarray
    mem_total: np.ndarray
    worst_state: tuple
    reason: np.ndarray

    def at(self, a):
        """The worst-memory stage's entry of a stage array (N,)."""
        return a[0] if len(a) == 1 else np.take(a, self.worst_flat)


def per_stage(rows: Rows, cfg: Configs, x):
    """A pool attribute x (P,) per stage: the smaller of both pools' on split stages ((1, 1): alike everywhere)."""
    if np.all(x == x[0]):
        return x[:1, None]
    split = cfg.split
    if split is None:
        return np.take(x, rows.pool)
    return np.take(cfg.pair(x[cfg.pool_u], np.minimum(x[split.xa], x[split.xb])), split.inv_q)


def memory(rows: Rows, cfg: Configs, terms: Terms, st: StageTimes, k, reason) -> Memory:
    """Memory per GPU, per stage, against its pool's HBM (a split stage's: the smaller of both pools')."""
    pa, N = rows.pa, rows.N
    g = rows.d * rows.c  # gradients are reduced over dp x cp (Megatron-LM)
    hbm = per_stage(rows, cfg, pa["hbm_bytes"])
    if rows.moe:
        edp = np.maximum(g * rows.t // (rows.e * rows.u), 1)
        mem = moe_stage_memory(rows, cfg, terms, st, k, g, edp)
        params, params_max, state = mem["dense_params"], mem["params_max"], mem["state"]
    else:
        edp = None
        params, params_max, state, mem = dense_stage_memory(rows, cfg, terms, st, k, g)
    tot = state + mem["activations"] + mem["buffers"]
    tot = tot if rows.real else np.where(rows.on, tot, -np.inf)
    # the stage closest to its HBM (the largest where every stage has the same HBM, also an infinite one)
    worst_flat = first_max_stage(tot if hbm.shape[0] == 1 else tot / hbm) * N + np.arange(N)
    atm = lambda a: a[0] if len(a) == 1 else np.take(a, worst_flat)  # noqa: E731
    mem_total = atm(tot)
    grad = grad_kwargs(rows.fw, rows.prec)
    worst_state = state_bytes(atm(params), rows.zero, atm(g), **grad)  # the worst stage's state by part
    if rows.moe:  # and the routed experts', sharded over edp
        worst_state = tuple(a + x for a, x in zip(worst_state, state_bytes(atm(mem["expert_params"]), rows.zero,
                                                                           atm(edp), **grad), strict=True))
    reason = np.where((reason == 0) & (mem_total > atm(hbm)), REASON["out_of_memory"], reason).astype(np.int8)
    return Memory(mem=mem, params=params, params_max=params_max, tot=tot, hbm=hbm,
                  hbm_rate=pa["hbm_Bps"] * pa["hbm_eff"], edp=edp, worst_flat=worst_flat, mem_total=mem_total,
                  worst_state=worst_state, reason=reason)


def dense_stage_memory(rows: Rows, cfg: Configs, terms: Terms, st: StageTimes, k, g) -> tuple:
    """(parameters per GPU (k, N), the largest stage's (N,), state bytes (k, N), {activations, buffers}) of a dense
    model's stages: activation bytes per configuration gathered to the stages, times the micro-batches in flight k."""
    model, eu, edges, inv = rows.model, terms.eu, st.edges, cfg.inv
    if (by := st.by_pp) is not None:  # per distinct (configuration, pp) (k, D), gathered to the rows
        params_d = stage_params(model, by.n, by.first_s, by.last_s, by.sub(rows.t),
                                None if np.any(rows.p == 1) else by.edges)
        params, params_max = np.take(params_d, by.inv, axis=1), np.take(np.max(params_d, axis=0), by.inv)
    else:
        params = stage_params(model, rows.n, rows.first, rows.last, rows.t,
                              None if np.any(rows.p == 1) else edges)  # (k, N) per GPU
        params_max = rows.row_max(params)
    work = np.take(terms.acts["work"], inv)  # (U,) per configuration, to stages
    if by is not None:  # a stage's kept bytes a micro-batch (and the embedding's) and the head's per D, gathered
        kept = np.take(by.edges(by.n * np.take(terms.acts["kept"], by.ix), eu["emb_act"], None), by.inv, axis=1)
        head = np.take(by.edges(np.zeros(np.shape(by.first_s)), None, eu["head_act"]), by.inv, axis=1)
        mem = {"activations": k * kept + work + head}  # (as edges(k x kept + work, None, head_act): the same sums)
    else:
        kept = np.take(terms.acts["kept"], inv)
        mem = {"activations": edges(k * edges(rows.n * kept, eu["emb_act"], None) + work, None, eu["head_act"])}
    if cfg.keyed:  # per configuration, then each stage's
        ranks = cfg.d_u * cfg.c_u
        state = params * np.take(state_bytes_per_param(cfg.zero_u, ranks, **grad_kwargs(rows.fw, cfg.prec_u)), inv)
        mem["buffers"] = buffer_bytes(eu["T"], model.hidden, cfg.t_u, ranks, cfg.zero_u, params_max,
                                      model.layer_params(), stage_of=inv)
    else:  # per row
        state = params * state_bytes_per_param(rows.zero, g, **grad_kwargs(rows.fw, rows.prec))
        mem["buffers"] = buffer_bytes(eu["T"][inv], model.hidden, rows.t, g, rows.zero, params_max,
                                      model.layer_params())
    return params, params_max, state, mem


def moe_stage_memory(rows: Rows, cfg: Configs, terms: Terms, st: StageTimes, k, g, edp) -> dict:
    """moe_memory of an MoE model's stages (dense and expert parameters, state, activations, buffers)."""
    model, eu, inv = rows.model, terms.eu, cfg.inv
    at_edges = not model.tied_embeddings and np.shape(rows.n_m) == np.shape(rows.first)
    rows_T = rows.sv.b is not None and np.shape(rows.sv.b)[0] == 1  # (T per row where a row's stages share it)
    edge_acts = {x: eu[x] if at_edges else np.take(eu[x], inv) for x in ("emb_act", "head_act")}
    return moe_memory(model, {"T": np.take(eu["T"], inv[:1] if rows_T else inv), **edge_acts},
                      {x: np.take(a, inv) for x, a in terms.acts.items()}, rows.t.astype(np.float64), rows.zero, g,
                      None if rows.all_moe else rows.n_d, rows.n_m, rows.first, rows.last, k, rows.e, edp, rows.u,
                      row_max=rows.row_max, to_stage=lambda a: a, edges=st.edges if at_edges else None,
                      first_only=rows.dense_first, n=rows.n, grad=grad_kwargs(rows.fw, rows.prec))


@dataclasses.dataclass(frozen=True)
class DataParallel:
    """The slowest stage's data-parallel exchange (``dp_raw``; ``dp_st`` per stage where the stage columns are
    asked for or the stages differ), the optimizer step and the exposed exchange, per row (N,)."""

    dp_raw: np.ndarray
    dp_st: np.ndarray | None
    opt_s: np.ndarray
    exposed: np.ndarray


def dp_links(rows: Rows, cfg: Configs):
    """The data-parallel exchange as a x params + b per stage (an ExchangeCoef: per configuration (or row) and then
    each stage's; its step_ part the share inside the optimizer step), and ``stage_link(stride, size)``: the NCCL
    collective link (costmodel._collectives.CollectiveLink)
    of a stage's group of ranks at that stride and size (each a function of dp and tp), per configuration where dp
    keys one, else per stage. The dp x cp group: stride t (tp-inner); dp-innermost with cp > 1 spans the whole block.
    A dp group spanning two pools (a split stage) is one NCCL ring over both pools' nodes (split_collective_link):
    each pool's part of the group on its own nodes, the inter-pool link crossed with the NICs of each node's ranks
    in parallel. Its collectives: exchange_plan."""
    pa, split, fw, model = rows.pa, cfg.split, rows.fw, rows.model
    if cfg.keyed:  # dp is part of a configuration: its links per configuration
        stage_link = lambda stride, size: pool_collective_link(pa, cfg.pool_u, stride(cfg.d_u, cfg.t_u),  # noqa: E731
                                                               size(cfg.d_u, cfg.t_u))
        back = lambda a: np.take(a, cfg.inv)  # noqa: E731
        tp_in, c_, coef = cfg.order_u == 0, cfg.c_u, (cfg.zero_u, cfg.of(rows.m), cfg.d_u * cfg.c_u)
    else:
        stage_link = lambda stride, size: pool_collective_link(pa, rows.pool, stride(rows.d, rows.t),  # noqa: E731
                                                               size(rows.d, rows.t))
        if split is None:  # the exchange once per distinct (dp, tp, cp, order, pool, ZeRO, m, overlap, pp, precision)
            return unkeyed_exchange(rows), stage_link, rows.c
        back = lambda a: a  # noqa: E731
        tp_in, c_, coef = rows.sv.order == 0, rows.c, (rows.zero, rows.m, rows.d * rows.c)
        plan = exchange_plan(fw, model, rows.t, coef[2], rows.overlap, rows.p)
    t_c = cfg.t_u if cfg.keyed else None
    link = stage_link(lambda d_, t_: np.where(tp_in, t_, 1),
                      lambda d_, t_: np.where(tp_in | (c_ == 1), d_ * c_, d_ * c_ * t_))
    coef, prec_c = (*coef, link), cfg.prec_u if cfg.keyed else rows.prec
    if split is not None:  # per pair: each pool's part of the group (its replicas there), the inter-pool link
        ia_p, xa, xb = split.ia_p, split.xa, split.xb
        tp_p, c_p, t_p = tp_in[ia_p], c_[ia_p], cfg.t_u[ia_p]
        part = lambda r, q: pool_collective_link(pa, q, np.where(tp_p, t_p, 1),  # noqa: E731
                                                 np.where(tp_p | (c_p == 1), r * c_p, r * c_p * t_p))
        bw_x = pa["link_Bps"][xa, xb] * np.minimum(pa["link_eff"][xa], pa["link_eff"][xb])
        x_link = split_collective_link(part(cfg.d_u[ia_p] - split.r2, xa), part(split.r2, xb), bw_x,
                                       pa["link_latency_s"][xa, xb])
        pair_link = CollectiveLink(*(cfg.pair(u, np.broadcast_to(x, ia_p.shape))
                                     for u, x in zip(link, x_link, strict=True)))
        coef = (*(cfg.pair(x, x[ia_p]) for x in coef[:3]), pair_link)
        t_c = cfg.pair(cfg.t_u, cfg.t_u[ia_p])
        if not cfg.keyed:
            plan = ExchangePlan(**{f.name: _pair_field(cfg, getattr(plan, f.name), ia_p)
                                   for f in dataclasses.fields(ExchangePlan)})
        back, prec_c = lambda a: np.take(a, split.inv_q), cfg.pair(cfg.prec_u, cfg.prec_u[ia_p])
    if cfg.keyed:  # the plan reads the row's pp and overlap, no part of a configuration: per (entry, pp, overlap)
        return keyed_exchange(rows, back, coef, t_c, prec_c), stage_link, c_
    dp = ExchangeCoef(*(back(x) for x in _full(dp_exchange_coef(*coef, fw=fw, prec=prec_c, plan=plan))))
    return dp, stage_link, c_


def keyed_exchange(rows: Rows, back, coef: tuple, t_c, prec_c) -> ExchangeCoef:
    """dp_links' ExchangeCoef per stage where dp keys the configurations: ``coef`` (ZeRO, m, ranks, CollectiveLink),
    ``t_c`` and ``prec_c`` per configuration (and split pair), ``back`` gathering such an array to the stages. The
    exchange plan reads the row's pp (message sizes) and, where the framework's buckets need it, its overlap, which
    no configuration keys: the exchange is priced once per distinct (configuration, pp, overlap) of the stages."""
    fw = rows.fw
    entry = back(np.arange(len(coef[2])))  # (1, N) or (k, N): each stage's configuration (or pair)
    cols = [np.broadcast_to(x, entry.shape).reshape(-1) for x in
            (entry, rows.p, *((rows.overlap,) if fw.dp_buckets_need_overlap else ()))]
    first, inv = distinct_rows(*cols)
    ci = cols[0][first]
    p_f = cols[1][first]
    ov_f = np.broadcast_to(rows.overlap, entry.shape).reshape(-1)[first]
    at = lambda x: x if np.ndim(x) == 0 else np.asarray(x)[ci]  # noqa: E731
    zero, m, ranks, link = coef
    plan = exchange_plan(fw, rows.model, at(t_c), at(ranks), ov_f, p_f)
    c = dp_exchange_coef(at(zero), at(m), at(ranks), CollectiveLink(*(at(x) for x in link)), fw=fw,
                         prec=at(prec_c), plan=plan)
    return ExchangeCoef(*(np.take(np.broadcast_to(x, first.shape), inv).reshape(entry.shape) for x in c))


def unkeyed_exchange(rows: Rows) -> ExchangeCoef:
    """dp_links' ExchangeCoef per row (or stage and row) where dp keys no configuration: priced once per distinct
    combination of the columns the exchange reads (a few hundred in a block of thousands of rows), gathered back;
    ZeRO-3's exchange per micro-batch, times the row's m. The overlap and the precision join the key only where the
    framework's exchange reads them (buckets only with the overlap; bytes that differ by precision)."""
    fw = rows.fw
    cols = (rows.d, rows.t, rows.c, rows.sv.order, rows.pool, rows.zero, rows.overlap, rows.p, rows.prec)
    by_prec = exchange_reads_precision(fw)
    group = rows.dp_group[1]  # the group's layout first (a small dense key), then the rest with it
    first, inv = distinct_rows(group, rows.zero, rows.p, *((rows.overlap,) if fw.dp_buckets_need_overlap else ()),
                               *((rows.prec,) if by_prec else ()))
    firsts = rows.at_first(first, inv, *cols)

    def price(sel):  # the entries sel of the distinct combinations
        d, t, c, order, pool, zero, overlap, p, prec = (x if sel is None else x[sel] for x in firsts)
        tp_in = order == 0
        link = pool_collective_link(rows.pa, pool, np.where(tp_in, t, 1),
                                    np.where(tp_in | (c == 1), d * c, d * c * t))
        plan = exchange_plan(fw, rows.model, t, d * c, overlap, p)
        return dp_exchange_coef(zero, 1, d * c, link, fw=fw, prec=prec, plan=plan)

    keyed_by = [x for x, on in zip(firsts, (1, 1, 1, 1, 1, 1, fw.dp_buckets_need_overlap, 1, by_prec), strict=True)
                if on]  # (the columns the combinations are distinct in: what the exchange reads)
    coef = price(None) if rows.memo is None else ExchangeCoef(*rows.memo.get("dp_exchange", keyed_by, price))
    return per_step_exchange(fw, coef, first.shape, inv, rows.zero, rows.m)


def _pair_field(cfg: Configs, x, ia_p):
    """An ExchangePlan field per configuration (or a constant) and, past them, per split pair (its pool A
    configuration's)."""
    if np.ndim(x) == 0:
        return x
    return cfg.pair(x, x[ia_p])


def _full(coef: ExchangeCoef) -> ExchangeCoef:
    """``coef`` with its step_ fields (scalar zeros where the framework has no in-step part) as arrays like a's."""
    return ExchangeCoef(coef.a, coef.b, *(np.broadcast_to(x, np.shape(coef.a)) for x in (coef.step_a, coef.step_b)))


def expert_links(rows: Rows, cfg: Configs, stage_link, c_) -> CollectiveLink:
    """The collective link (costmodel._collectives.CollectiveLink) per stage of an MoE model's expert-data-parallel
    group: edp = max(dp cp tp // (ep etp), 1) ranks ep etp apart (the group the exchange runs over: an integer
    number of ranks, also where ep etp does not divide the stage's ranks and the row is refused as ep_invalid)."""
    if cfg.keyed:
        eu_x = cfg.e_u * cfg.u_u
        link = stage_link(lambda d_, t_: eu_x, lambda d_, t_: np.maximum(d_ * c_ * t_ // eu_x, 1))  # edp ranks
        return CollectiveLink(*(x if np.ndim(x) == 0 else x[cfg.inv] for x in link))
    # the link once per distinct (ep etp, ranks, pool), a few dozen in a block, gathered back
    cols = np.broadcast_arrays(rows.e * rows.u, rows.d * rows.c * rows.t, rows.pool)
    first_e, inv_e = distinct_rows(*(a.reshape(-1) for a in cols))
    x, r, q = (a.reshape(-1)[first_e] for a in cols)
    link = pool_collective_link(rows.pa, q, x, np.maximum(r // x, 1))  # edp ranks ep etp apart
    return CollectiveLink(*(np.broadcast_to(a, x.shape)[inv_e].reshape(cols[0].shape) for a in link))


def keyed_expert_exchange(rows: Rows, cfg: Configs, stage_link, c_, edp) -> tuple:
    """costmodel._experts.expert_exchange where dp keys the configurations: (ExchangeCoef per stage, the link's nodes
    and per_node) from each stage's expert link (expert_links) and plan."""
    link = expert_links(rows, cfg, stage_link, c_)
    plan = exchange_plan(rows.fw, rows.model, rows.t, edp, rows.overlap, rows.p, ep_etp=rows.e * rows.u)
    coef = dp_exchange_coef(rows.zero, rows.m, edp, link, fw=rows.fw, prec=rows.prec, plan=plan)
    return coef, link.nodes, link.per_node


def data_parallel(rows: Rows, cfg: Configs, mem: Memory, pipe: Pipeline, stages_out: bool) -> DataParallel:
    """The slowest stage's gradient exchange and optimizer step (an MoE model: the slowest dense exchange over dp x
    cp and the slowest expert one over edp, each with its optimizer), and what of the exchange is exposed (the part
    inside the optimizer step, where the framework has one, priced the same way: ``step``)."""
    fw, zero, m, prec, row_max = rows.fw, rows.zero, rows.m, rows.prec, rows.row_max
    dp, stage_link, c_ = dp_links(rows, cfg)
    dp_a, dp_b = dp.a, dp.b
    params, params_max, edp, hbm_rate, mm = mem.params, mem.params_max, mem.edp, mem.hbm_rate, mem.mem
    alike = dp_a.shape[0] == 1 and mem.hbm.shape[0] == 1  # every stage's exchange on one link: the largest's slowest
    hbm_Bps = per_stage(rows, cfg, hbm_rate) if rows.moe or alike or not cfg.keyed else None  # (else per config)
    # (np.where(zero >= 1, dp cp, 1) as 1 + (dp cp - 1) x mask: the same integers without np.where's random branches)
    shard = None if hbm_Bps is None else 1 + (rows.d * rows.c - 1) * (zero >= 1)
    dp_st, step = None, None
    in_step = fw.weight_gather_in_step
    adam = fw.adam_bytes_touched()  # HBM bytes the Adam step moves a sharded parameter
    if rows.moe:  # the expert exchange as ep.a x params + ep.b per stage (ep_nodes, ep_per_node: its link's)
        ep, ep_nodes, ep_per_node = (expert_exchange(rows, edp) if not cfg.keyed else
                                     keyed_expert_exchange(rows, cfg, stage_link, c_, edp))
    if rows.moe and alike and ep.a.shape[0] == 1 and not stages_out:
        # every stage's exchanges on the same links: the largest stage's (of each kind) is the slowest
        # (the exchange and the optimizer grow with the parameters: as row_max of the per-stage times)
        dense_raw, experts_raw = dp_a[0] * mm["dense_max"] + dp_b[0], ep.a[0] * mm["expert_max"] + ep.b[0]
        dp_raw = dense_raw + experts_raw
        if in_step:
            step = (dp.step_a[0] * mm["dense_max"] + dp.step_b[0]
                    + (ep.step_a[0] * mm["expert_max"] + ep.step_b[0]))
        opt_s = (adam * mm["dense_max"] / shard[0] / hbm_Bps[0]
                 + adam * mm["expert_max"] / np.where(zero >= 1, edp[0], 1) / hbm_Bps[0])
    elif rows.moe:
        dp_st = dp_a * params + dp_b
        ep_st = ep.a * mm["expert_params"] + ep.b
        dense_raw, experts_raw = row_max(dp_st), row_max(ep_st)
        dp_raw = dense_raw + experts_raw
        dp_st = dp_st + ep_st
        if in_step:
            step = (row_max(dp.step_a * params + dp.step_b)
                    + row_max(ep.step_a * mm["expert_params"] + ep.step_b))
        opt_s = (row_max(adam * params / shard / hbm_Bps)
                 + row_max(adam * mm["expert_params"] / np.where(zero >= 1, edp, 1) / hbm_Bps))
    elif alike and not stages_out:
        dp_raw = dp_a[0] * params_max + dp_b[0]
        step = dp.step_a[0] * params_max + dp.step_b[0] if in_step else None
        opt_s = adam * params_max / shard[0] / hbm_Bps[0]
    else:
        dp_st = dp_a * params + dp_b
        dp_raw = row_max(dp_st)
        step = row_max(dp.step_a * params + dp.step_b) if in_step else None
        opt_s = row_max(params * optimizer_s_per_param(rows, cfg, hbm_rate, shard, hbm_Bps))
    share = dp_sm_share(rows)
    if rows.moe:  # the dense and the expert exchanges' shares, weighed by their seconds
        share_e = link_sm_share(rows, ep_nodes > 1, ep_per_node)
        share = np.where(dp_raw > 0, (share * dense_raw + share_e * experts_raw) / np.where(dp_raw > 0, dp_raw, 1), 0)
    exposed = exposed_dp_s(zero, rows.overlap, m, pipe.X_max, pipe.B_b, pipe.W_b, dp_raw, F_b=pipe.F_b, fw=fw,
                           prec=prec, model=rows.model, pp=rows.p, step_s=step, sm_share=share)
    if has_fsdp_copies(fw) and not rows.moe:  # FSDP2's copies beside its collectives, in series
        exposed = exposed + fsdp_copies_s(rows, cfg, mem)
    return DataParallel(dp_raw=dp_raw, dp_st=dp_st, opt_s=opt_s, exposed=exposed)


def fsdp_copies_s(rows: Rows, cfg: Configs, mem: Memory):
    """(N,) FSDP2's copies beside the collectives of a step (costmodel._data_parallel.fsdp_copy_bytes: as many as the
    exchange counts), on the computation stream, in series with the step: the slowest stage's, its parameters per GPU
    at its HBM rate (a split stage's: the slower pool's)."""
    fw, model = rows.fw, rows.model
    if fw.zero3_kept[2] == 0:  # the kept share alike at every tp (no parameters kept by count): per row, (N,)
        # fsdp_copy_bytes is a + m b: a and b of each (ZeRO stage, pp > 1), eight each, taken per row (bit for bit
        # the direct call's at every preset's tp; calling it on the columns costs 4.0 ms where this takes 1.4, 3.5%
        # of an fsdp2 evaluation of the 200,000 bench rows)
        z, p = np.arange(8) % 4, 1 + np.arange(8) // 4
        a = fsdp_copy_bytes(fw, model, z, p, 0.0)
        i = rows.zero + 4 * (rows.p > 1)
        per = np.take(a, i) + rows.m * np.take(fsdp_copy_bytes(fw, model, z, p, 1.0) - a, i)
    else:  # bytes a parameter, per stage (k, N) or (1, N)
        per = fsdp_copy_bytes(fw, model, rows.zero, rows.p, rows.m, rows.t)
    hbm = per_stage(rows, cfg, mem.hbm_rate)  # (1, 1) where every stage has one rate, else per stage
    if hbm.shape == (1, 1) and np.ndim(per) == 1:
        return per * mem.params_max / hbm[0, 0]
    return rows.row_max(mem.params * per / hbm)


def dp_sm_share(rows: Rows):
    """(N,) the share of its GPUs' SMs the dense data-parallel exchange's NCCL kernels hold (link_sm_share's ring
    channels over the pool's SMs, once per distinct group layout: Rows.per_dp_group): the dp x cp group as dp_links
    lays it out (tp-inner: stride t), its ranks on a node as collective_group_link counts them
    (costmodel._stages.group_layout)."""
    pa = rows.pa

    def share(d, t, c, order, pool):  # (once per distinct layout, gathered back)
        tp_in = order == 0
        size = np.where(tp_in | (c == 1), d * c, d * c * t)
        inside, _, _, g = group_layout(np.where(tp_in, t, 1), size, pa["gpus_per_node_int"][pool])
        return ring_sm_share(pa, lambda x: x[pool], ~inside, g)

    st = rows.per_dp_group(share)
    return rows.row_max(st) if st.shape[0] > 1 else st.reshape(-1)


def link_sm_share(rows: Rows, across, per_node):
    """(N,) the share of the SMs of a stage's GPUs a collective's kernel holds over a group spanning several nodes
    (``across``) with ``per_node`` ranks on each: its ring channels (costmodel._nccl.ring_channels: one CTA each) over
    the pool's SMs (costmodel._sms); the largest stage's."""
    pa = rows.pa
    at = (lambda x: x[0]) if pa["sms"].size == 1 else (lambda x: x[rows.pool])  # noqa: E731 (one pool: scalars)
    share = ring_sm_share(pa, at, across, per_node)
    return rows.row_max(share) if np.ndim(share) == 2 and share.shape[0] > 1 else np.reshape(share, -1)


def ring_sm_share(pa: dict, at, across, per_node):
    """The share of a GPU's SMs a ring collective's kernel holds (costmodel._nccl.ring_channels: one CTA a channel,
    over the pool's SMs): ``at`` picks each entry's pool from the pools' arrays (ring_channels (P, 2): one node, per
    rank on a node; sms (P,))."""
    ch = at(pa["ring_channels"])
    return ring_channels(across, per_node, ch[..., 0], ch[..., 1]) / at(pa["sms"])


def _first_row(plan: ExchangePlan) -> ExchangePlan:
    """``plan``'s (k, N) or (1, N) fields at the first stage row (constants as they are)."""
    return ExchangePlan(**{f.name: (x[0] if np.ndim(x) == 2 else x) for f in dataclasses.fields(ExchangePlan)
                           for x in (getattr(plan, f.name),)})


def optimizer_s_per_param(rows: Rows, cfg: Configs, hbm_rate, shard, hbm_Bps):
    """Seconds of the Adam step per parameter of each stage (a dense model): per configuration where dp keys one (a
    split stage's at the slower HBM of both pools), else per stage."""
    if not cfg.keyed:
        return rows.fw.adam_bytes_touched() / shard / hbm_Bps
    split = cfg.split
    shard = np.where(cfg.zero_u >= 1, cfg.d_u * cfg.c_u, 1)
    adam = rows.fw.adam_bytes_touched()
    opt_u = cfg.pair(adam / shard / hbm_rate[cfg.pool_u], split is not None and (
        adam / shard[split.ia_p] / np.minimum(hbm_rate[split.xa], hbm_rate[split.xb])))
    return np.take(opt_u, cfg.inv) if split is None else np.take(opt_u, split.inv_q)


def report(rows: Rows, cfg: Configs, terms: Terms, st: StageTimes, hand: Handoffs, pipe: Pipeline, mem: Memory,
           dp: DataParallel, stages_out: bool) -> Metrics:
    """The metric columns: step = pipeline + exposed exchange + optimizer; the bottleneck stage's time parts;
    model and hardware FLOPs over the peak of the GPUs each row uses; the worst stage's memory."""
    model, by = rows.model, st.by_pp
    if by is None:
        parts = {x: rows.m * a for x, a in bottleneck_terms(rows, terms, pipe.at, pipe.ub, pipe.first_b,
                                                            pipe.last_b).items()}
    else:  # per distinct (configuration, pp), gathered, times the row's micro-batches
        parts = {x: rows.m * by.back(a) for x, a in bottleneck_terms(rows, terms, by.at, by.at(st.inv_t),
                                                                     by.at(rows.first), by.at(rows.last)).items()}
    if terms.n_x is not None:  # the bottleneck stage's unpaired passes' all-to-alls, forward and backward
        parts["ep_comm"] = parts["ep_comm"] + rows.m * (2.0 * pipe.at(terms.n_x) * np.take(terms.lt_m["epx"], pipe.ub))
    if terms.n_b is not None:  # the bottleneck stage's backward stretches' launches (computation on the GPU's clock)
        excess = terms.chunk_excess(pipe.at(rows.n_m), pipe.at(terms.n_b), pipe.ub)
        parts["compute"] = parts["compute"] + rows.m * excess
    flops_model = model.model_flops_per_sample() * rows.B
    re_flops = (recompute_flops(rows) if by is None else
                by.back(recompute_flops(rows, by)) * model.seq_len * rows.B)
    extra = stage_columns(rows, cfg, st, hand, pipe, mem, dp) if stages_out else {}
    extra["_needs_simulation"] = pipe.needs_simulation
    atm = mem.at
    return assemble_metrics(
        feasible=mem.reason == 0, reason=mem.reason, step=pipe.pipe + dp.exposed + dp.opt_s, pipe=pipe.pipe,
        fill=pipe.fill, m=rows.m, batch=rows.B, seq_len=model.seq_len, flops_model=flops_model,
        flops_hw=flops_model + re_flops, peak_total=peak_flops_total(rows, cfg), **parts,
        pp_comm=pipe.pp_comm, dp_comm=dp.exposed, optimizer=dp.opt_s, mem_weights=mem.worst_state[0],
        mem_grads=mem.worst_state[1], mem_optimizer=mem.worst_state[2], mem_activations=atm(mem.mem["activations"]),
        mem_buffers=atm(mem.mem["buffers"]), mem_total=mem.mem_total, mem_device=atm(mem.hbm), extra=extra)


def bottleneck_terms(rows: Rows, terms: Terms, at, ub, first_b, last_b) -> dict:
    """costmodel._pipeline_terms.bottleneck_terms of the bottleneck stages: ``at`` a stage array's entry at them,
    ``ub`` their configurations, ``first_b`` and ``last_b`` their flags (per row, or per distinct (configuration,
    pp))."""
    lt, eu = terms.lt, terms.eu
    if rows.moe:  # the bottleneck stage's layers summed over both kinds
        n_b, lt_b = moe_stage_terms(at(rows.n), at(rows.n_m),
                                    None if rows.all_moe else {x: np.take(lt[x], ub) for x in MOE_PART_KEYS[:4]},
                                    {x: np.take(terms.lt_m[x], ub) for x in MOE_PART_KEYS})
    else:
        n_b, lt_b = at(rows.n), {x: lt[x][ub] for x in ("compute", "recompute", "tp", "cp")}
    emb_c, emb_tp, head_gemm, head_elem, head_tp = (eu[x][ub] for x in (
        "emb_c", "emb_tp", "head_gemm", "head_elem", "head_tp"))
    if "emb_copy" in eu:  # the edges' gradient copies before the reduction (edge_parts), computation
        emb_c, head_elem = emb_c + eu["emb_copy"][ub], head_elem + eu["head_copy"][ub]
    out = bottleneck_terms_of(n_b, first_b, last_b, lt_b, emb_c, emb_tp, head_gemm, head_elem, head_tp)
    if "handoff_tp_f" in eu:  # a tp-sharded hand-off's all-gathers by its receiver (edge_parts): tp, their copies
        after_first, before_last = np.logical_not(first_b), np.logical_not(last_b)  # computation
        out["tp_comm"] = out["tp_comm"] + after_first * eu["handoff_tp_f"][ub] + before_last * eu["handoff_tp_b"][ub]
        out["compute"] = (out["compute"] + after_first * eu["handoff_copy_f"][ub]
                          + before_last * eu["handoff_copy_b"][ub])
    return out


def recompute_flops(rows: Rows, by: ByPipeline | None = None):
    """(N,) FLOPs an iteration recomputes (the hardware FLOPs less the model's): every stage's layers under their
    recompute choice, times the tokens of the global batch. ``by``: the stages of a block's distinct (configuration,
    pp) (ByPipeline), whose FLOPs per token of the sequence come back (D,), before the tokens (the caller's:
    x s x B); None: every row's, times its tokens."""
    model, fw = rows.model, rows.fw
    if by is None:
        full, sel, n, wt, n_d, n_m, rcm = rows.full, rows.sel, rows.n, rows.wt, rows.n_d, rows.n_m, rows.rcm
        tokens = lambda a: a * model.seq_len * rows.B  # noqa: E731
    else:
        full, sel, n, wt, n_d, n_m = by.sub(rows.full), by.sub(rows.sel), by.n, by.wt, by.n_d, by.n_m
        rcm = None if rows.rcm is None else rows.rcm[by.first]
        tokens = lambda a: a  # noqa: E731
    weigh = (lambda a: a) if wt is None else (lambda a: wt * a)  # noqa: E731
    re_tok = recompute_flops_per_token(model, full, sel, fw, modules=rcm)
    if not rows.moe:
        return tokens(np.sum(weigh(n) * re_tok, axis=0))
    re_moe = recompute_flops_per_token(model, full, sel, fw, moe_layer=True, modules=rcm)
    if full.shape[0] == 1:  # one recompute choice a row: hfu reads this on feasible rows, holding every layer
        M = model.moe_layers
        re_layers = (model.layers - M) * re_tok[0] + M * re_moe[0]
    else:
        re_layers = np.sum(weigh(n * re_moe if rows.all_moe else n_d * re_tok + n_m * re_moe), axis=0)
    return tokens(re_layers)


def peak_flops_total(rows: Rows, cfg: Configs):
    """(N,) the peak FLOP/s of every GPU a row uses: its stages' GPUs x their pool's peak at the row's precision (a
    split stage's replicas on each pool)."""
    split = cfg.split
    if (cfg.inv.shape[0] == 1 or not cfg.keyed) and not (split is not None and split.ks.size):
        ga, peak_e = ((cfg.ga_u[cfg.inv], cfg.peak[cfg.inv]) if cfg.keyed
                      else (rows.d * rows.t * rows.c, rows.pa["peak"][rows.pool, rows.prec]))
        if ga.shape[0] == 1 and peak_e.shape[0] == 1:
            return (rows.sv.stages_held() * ga[0]) * peak_e[0]
        return np.sum(rows.weigh(ga * peak_e), axis=0)
    # per configuration, the split stages' second pools too
    gp = cfg.pair(cfg.ga_u * cfg.peak, split is not None and split.ga_a * cfg.peak[split.ia_p]
                  + split.ga_b * cfg.peak[split.ib_p])
    return np.sum(rows.weigh(np.take(gp, cfg.inv if split is None else split.inv_q)), axis=0)


def stage_columns(rows: Rows, cfg: Configs, st: StageTimes, hand: Handoffs, pipe: Pipeline, mem: Memory,
                  dp: DataParallel) -> dict:
    """Per stage, (N, k): a row per strategy, as people read them (stage_breakdown)."""
    X, split, on = st.X, cfg.split, rows.on
    pool2, dp2 = np.broadcast_to(rows.pool, X.shape).copy(), np.zeros(X.shape, dtype=np.int64)
    if split is not None:
        np.put(pool2, split.ks, split.pool_ks), np.put(dp2, split.ks, split.dp2_ks)

    def full_shape(a, fill=0):
        return np.ascontiguousarray(np.where(on, np.broadcast_to(a, X.shape), fill).T)

    sv = rows.sv
    return {"_stage_pool": full_shape(rows.pool, -1), "_stage_dp": full_shape(rows.d, 1),
            "_stage_tp": full_shape(rows.t, 1), "_stage_layers": full_shape(rows.n),
            "_stage_micro_batch": full_shape(rows.B / sv.batch_div if sv.b is None else sv.b, 0.0),
            "_stage_pool2": full_shape(pool2, -1), "_stage_dp2": full_shape(dp2),
            "_stage_forward_s": full_shape(st.F), "_stage_backward_s": full_shape(st.Bk),
            "_stage_weight_grad_s": full_shape(st.W), "_stage_time_s": full_shape(rows.m * X),
            "_stage_handoff_s": full_shape(np.where(hand.inner, hand.T_C, 0.0), 0.0),
            "_stage_dp_comm_s": full_shape(dp.dp_st, 0.0), "_stage_in_flight": full_shape(pipe.k, 0.0),
            "_stage_mem_bytes": full_shape(mem.tot, 0.0), "_stage_hbm_bytes": full_shape(mem.hbm, 0.0),
            "_stage_active": np.ascontiguousarray(on.T)}
