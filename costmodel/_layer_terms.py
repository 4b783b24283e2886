"""One layer's terms per stage configuration, under the framework's profile, and its F, B, W.

shape_terms gathers every term that depends only on the micro-batch shape and the precision: the
dense layer's times (costmodel._layer_compute.layer_costs), fp8 casts, the embedding and head, the
activation bytes (costmodel._memory_terms) and, for an MoE model, the MoE layer's (moe_shape_terms,
costmodel._experts). framework_terms applies a framework profile (costmodel._frameworks): what its
kernels keep (fused attention drops the s x s scores; fp8 saved inputs), its selective recompute
policy (attention core, MLA up-projections or torchtitan's per-op checkpointing), eager
element-wise bytes, GQA's K/V copies and PyTorch's ring attention. layer_terms turns them into the
per-layer forward F, backward B (with recompute) and weight-gradient W times, and the parts the
metrics report.
"""

from __future__ import annotations

import numpy as np

from costmodel._codes import MODULE_BIT, module_names
from costmodel._dtypes import ACT_BYTES
from costmodel._errors import InputError
from costmodel._experts import (
    ROUTER_TOPK_BYTES, a2a_channels, clamp_saved_bytes, comm_sm_fraction, moe_layer_costs, routed_copies,
)
from costmodel._frameworks import FRAMEWORKS, Framework
from costmodel._hardware import PRECISIONS, Cluster
from costmodel._layer_compute import (
    ELEM_BWD_FACTOR,
    ELEM_TF_PER_LAYER,
    ELEM_TH_PER_LAYER,
    UNFUSED_SCORE_BYTES,
    XENT_BYTES_PER_LOGIT,
    XENT_PEAK_BYTES_PER_LOGIT,
    all_gather_cp_terms,
    cp_by_all_to_all,
    edge_terms,
    fp8_cast_columns,
    fp8_cast_parts_s,
    gemm_s,
    layer_costs,
    op_checkpoint_moe_products,
    op_checkpoint_products,
    te_a2a_terms,
    te_ring_terms,
)
from costmodel._memory_terms import (
    NORM_STAT_BYTES,
    SOFTMAX_STAT_BYTES,
    fp8_input_saving,
    layer_activation_bytes,
    moe_layer_activation_bytes,
    te_saved_bytes,
    torchtitan_expert_extra_bytes,
    torchtitan_saved_bytes,
)
from costmodel._nccl import ring_channel_table
from costmodel._sms import streaming_multiprocessors
from costmodel._workloads import Transformer

MOE_TERMS = ("gemm", "elem", "overhead", "ep_fwd", "ep_bwd", "xcast_f", "xcast_b", "ep_x", "host_f", "host_x",
             "xb_q", "xb_a", "xb_on", "moe_f", "act_f", "shared_f")
# What layer_terms reads of a dense layer's shape terms (after framework_terms).
LAYER_INPUTS = ("gemm", "attn", "elem", "overhead", "tp_fwd", "tp_bwd", "cp_fwd", "cp_bwd", "sel_re", "sel_tp",
                "cast_f", "cast_b")


def moe_layer_inputs(sh: dict, model: Transformer) -> dict:
    """The inputs of layer_terms for one MoE layer of ``model`` from the shape terms ``sh`` (after
    framework_terms): its moe_ terms where it has them, the dense layer's otherwise."""
    out = {k: sh["moe_" + k] if k in MOE_TERMS or k.startswith("sel_") else sh[k]
           for k in (*LAYER_INPUTS, "ep_fwd", "ep_bwd", "ep_x", "host_f", "host_x", "xb_q", "xb_a", "xb_on",
                     *(("sel_ep",) if "moe_sel_ep" in sh else ()))}
    # the expert GEMMs' fp8 quantization (and the shared experts' casts) on top of the attention's casts of the dense
    # layer: its casts less its dense MLP's, which an MoE layer does not run; its tp exchange the attention's, and the
    # shared experts' where it has them (moe_tp_share), its backward's the forward's (Framework.tp_backward_async and
    # userbuffers price dense layers only)
    tp = out["tp_fwd"] * moe_tp_share(model)
    return {**out, "tp_fwd": tp, "tp_bwd": tp, "cast_f": out["cast_f"] - sh["cast_mlp_f"] + sh["moe_xcast_f"],
            "cast_b": out["cast_b"] - sh["cast_mlp_b"] + sh["moe_xcast_b"]}


# The layer terms moe_stage_terms reads (the dense layer's: the first four).
MOE_PART_KEYS = ("compute", "recompute", "tp", "cp", "ep")


def moe_stage_terms(n, n_m, lt, lt_m):
    """(layers, per-layer terms) of stages of n layers, n_m of them MoE layers, as bottleneck_terms_of
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
    and the framework's xent_bytes and xent_peak_bytes (edge_terms)."""
    etp_link = links.pop("etp_link", None)
    casts = links.pop("casts", None)
    xent = links.pop("xent_bytes", XENT_BYTES_PER_LOGIT)
    xent_peak = links.pop("xent_peak_bytes", XENT_PEAK_BYTES_PER_LOGIT)
    gpu = links.get("gpu") or cluster.gpu
    lc = layer_costs(model, cluster, b, t, c, sp, peak, **links)
    T = lc["T"]
    zero = np.zeros_like(T)
    af, ab, mf, mb = fp8_cast_parts_s(model, T, t, gpu, casts) if casts is not None else (zero,) * 4
    lc["cast_f"], lc["cast_b"], lc["cast_mlp_f"], lc["cast_mlp_b"] = af + mf, ab + mb, mf, mb
    edge = edge_terms(model, T, t, sp, links.get("peak16", peak), gpu, lc["tp_bw"], lc["tp_lat"], xent, xent_peak)
    act_L, score_L = layer_activation_bytes(model, b, t, c, sp)
    out = {k: lc[k] + zero for k in ("gemm", "attn", "elem", "overhead", "tp_fwd", "cp_fwd", "cp_bwd", "T", "cast_f",
                                     "cast_b", "cast_mlp_f", "cast_mlp_b")}
    out["tp_bwd"] = out["tp_fwd"]  # the backward's exposed exchange: the forward's, but where the framework runs its
    # collectives beside the GEMMs (Framework.tp_backward_async) and under userbuffers (costmodel._block)
    out.update(edge, act_L=act_L + zero, score_L=score_L + zero, attn_gemm=lc["attn_gemm"] + zero, c=c + zero,
               cp_bw=lc["cp_bw"] + zero, cp_lat=lc["cp_lat"] + zero)  # (the cp degree and link: framework_terms)
    if model.mla:  # the up-projections' time and outputs (Q, K, V) for selective recompute (framework_terms)
        out["up"] = sum(gemm_s(T, o / t, i, peak, gpu) for i, o in model.attn_up_matrices()) + zero
        out["qkv_L"] = ACT_BYTES * T * (2 * model.q_hidden + model.o_hidden) / t + zero
    if moe is not None:
        out.update(moe_shape_terms(model, cluster, out, b, t, c, sp, peak, moe, etp_link))
    return out


def moe_shape_terms(model: Transformer, cluster, sh: dict, b, t, c, sp, peak, moe, etp_link=None, sms=None,
                    ring=None) -> dict:
    """The MoE layer's shape terms (moe_<key> of MOE_TERMS, and moe_act_L) from the dense ones ``sh``
    (shape_terms without ``moe``, at the same shape: T, attn, attn_gemm, overhead); ``moe`` = (ep,
    etp, framework, precision); ``etp_link`` as shape_terms takes it; ``sms``: the GPU's SMs (costmodel._sms; the
    cluster's GPU's where None); ``ring``: its ring channel table ((..., 2): costmodel._nccl.ring_channel_table; the
    cluster's GPU's where None), for NCCL's all-to-all's CTAs (a2a_channels: the ep ranks etp apart, as all_to_all_s
    lays them on nodes). The shared experts' linear layers cast to fp8 as the dense layer's do (fp8_cast_columns)."""
    e, u, fw, precision = moe
    fp8 = np.asarray(precision) == PRECISIONS.index("fp8")
    fp8_dispatch = fw.fp8_dispatch & fp8
    sms = streaming_multiprocessors(cluster.gpu.name) if sms is None else sms
    ring = np.asarray(ring_channel_table(cluster.gpu.name) if ring is None else ring, dtype=np.float64)
    local = np.minimum(e, np.maximum(np.asarray(cluster.gpus_per_node) // u, 1))  # (all_to_all_s's ranks on a node)
    ctas = a2a_channels(e, local, ring[..., 0], ring[..., 1], cluster.scaleout_Bps)
    ml = moe_layer_costs(model, cluster, {k: sh[k] for k in ("T", "attn", "attn_gemm", "overhead")}, t, sp, e, peak,
                         fw.overlap_ep, fw.ep_dispatch_per_node, u, etp_link, fp8_dispatch,
                         fp8_cast=np.where(fp8, fw.expert_fp8_cast_bytes, 0.0),
                         sm_frac=comm_sm_fraction(fw.ep_dispatch_per_node, sms, ctas),
                         shared_cast=fp8_cast_columns(fw, fp8), host_sync=fw.moe_host_sync,
                         bias_loop=fw.expert_bias_loop)
    zero = np.zeros_like(sh["T"])
    act, _, experts = moe_layer_activation_bytes(model, b, t, c, sp, u)
    # the all-to-alls' results, the dispatched copies and the combined ones (16 bits an element of h): what a per-op
    # checkpoint keeps of them (framework_terms)
    a2a = np.where(np.asarray(e) > 1, 2.0 * ACT_BYTES * routed_copies(model, sh["T"], t) * model.hidden, 0.0)
    return {**{"moe_" + k: ml[k] + zero for k in MOE_TERMS}, "moe_act_L": act + zero, "moe_experts_L": experts + zero,
            "moe_a2a_L": a2a + zero}


# The share of a dense layer's tensor-parallel exchange (layer_costs' tp_fwd: the attention's all-gather and
# reduce-scatter under SP, or its all-reduce, and the MLP's the same) an MoE layer runs: the attention's, and the
# MLP's where shared experts run as a tensor-parallel MLP (Megatron-Core's SharedExpertMLP, column- then row-parallel
# linears under SP). The routed experts run none: their token dispatcher exchanges over the expert-tensor-parallel
# group (core_v0.15.0 megatron/core/transformer/moe/token_dispatcher.py: tp_group = pg_collection.expt_tp; the
# all-gather of the received tokens only where its size > 1, which the etp terms price), not the attention's tp group.
def moe_tp_share(model: Transformer) -> float:
    """Of a dense layer's tensor-parallel exchange, the share an MoE layer of ``model`` runs (the comment above)."""
    return 1.0 if model.shared_experts else 0.5


def framework_terms(fw: Framework, model: Transformer, terms: dict, t, sp, precision, modules=None) -> dict:
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
    PyTorch's ring attention (Framework.ring_attention_bytes, cp > 1) adds its copies so, its collectives as cp_*;
    Transformer Engine's P2P ring (Framework.te_ring_attention) its merges and launches, its exchange step by step
    (costmodel._layer_compute.te_ring_terms); all-gathered K and V (Framework.cp_all_gather) their exposed
    collectives (costmodel._layer_compute.all_gather_cp_terms).
    Unfused attention (not Framework.fused_attention) moves its s x s scores through HBM in the softmax and the
    attention dropout (unfused_score_s): at that rate, forward (cast_f) and backward (cast_b), and again where the
    attention core is recomputed (sel_re). ``modules``: the rows' recompute_modules bit sets (None: none named); where
    one is not 0 the sel_ terms are those of module_terms (Megatron-Core's named modules), else the profile's policy."""
    repeat = fw.kv_repeat_bytes and model.kind != "mlp" and not model.mla and model.kv_hidden < model.q_hidden
    ring = any(fw.ring_attention_bytes) and model.kind != "mlp" and not model.mla
    te_ring = fw.te_ring_attention and model.kind != "mlp" and not model.mla
    unfused = not fw.fused_attention and model.kind != "mlp" and not model.mla
    named = modules is not None and np.any(modules) and model.kind != "mlp"
    a2a = cp_by_all_to_all(fw, model)
    if (any(fw.eager_elem_bytes) or repeat or ring or te_ring or a2a or unfused or fw.sp_copy_bytes or named) \
            and model.kind != "mlp":
        T, sp_div, h, f = terms["T"], np.where(sp, t, 1), model.hidden, model.ffn_hidden
        fused = elem_bytes(model, T, t, sp)
        byte_s = terms["elem"] / fused  # seconds a byte at the element-wise rate (before eager code's bytes join it)
    if ring:  # per element E of the rank's Q (K, V as wide after repeat_kv): copies at the element-wise rate; K, V
        # all-gathered in bf16 behind step 0's attention; fp32 dK, dV passed on behind each next step's, the last bare
        c, E, attn, bw, lat = terms["c"], T * model.q_hidden / t, terms["attn"], terms["cp_bw"], terms["cp_lat"]
        (ff, fs, bf, bs), on, step = fw.ring_attention_bytes, terms["c"] > 1, byte_s
        gather, dkv = (c - 1) * (2.0 * ACT_BYTES * E / bw + lat), 2.0 * 4.0 * E / bw + lat  # (bf16 K, V; fp32 dK, dV)
        terms = {**terms, "cast_f": terms["cast_f"] + np.where(on, step * (ff + fs * (c - 1)) * E, 0.0),
                 "cast_b": terms["cast_b"] + np.where(on, step * (bf + bs * (c - 1)) * E, 0.0),
                 "cp_fwd": np.where(on, np.maximum(gather - attn / c, 0.0), terms["cp_fwd"]),
                 "cp_bwd": np.where(on, np.maximum(gather - 2.0 * attn / c, 0.0)
                                    + (c - 1) * np.maximum(dkv - 2.0 * attn / c, 0.0) + dkv, terms["cp_bwd"])}
    if a2a:  # an all-to-all of the heads: DeepSpeed-Ulysses, or TE's exchange a window is run over
        terms = te_a2a_terms(model, terms, t, byte_s)
    elif te_ring:  # Transformer Engine's P2P ring: its steps' exchange, merges and launches
        terms = te_ring_terms(model, terms, t, byte_s)
    if fw.cp_all_gather and model.kind != "mlp" and not model.mla:  # K, V all-gathered, exposed
        terms = all_gather_cp_terms(model, terms, t)
    if (any(fw.eager_elem_bytes) or repeat) and model.kind != "mlp":
        eh, eqk, ef = fw.eager_elem_bytes
        extra = eh * T * h / sp_div + eqk * T * (model.q_hidden + model.kv_hidden) / t + ef * T * f / t
        kv = byte_s * (fw.kv_repeat_bytes * T * (model.q_hidden + model.kv_hidden) / t) * repeat
        terms = {**terms, "elem": terms["elem"] * (1.0 + extra / fused), "cast_f": terms["cast_f"] + kv,
                 "cast_b": terms["cast_b"] + kv}
    if fw.sp_copy_bytes and model.kind != "mlp":  # DTensor's chunk / cat around each sequence-parallel collective:
        # 2 all-gathers (of fp8 data, half the bytes, where the profile gathers fp8: Framework.fp8_tp_gather) and 2
        # reduce-scatters a layer forward, each copying the rank's T h activation, with tp_fwd (so backward's mirrors
        # and recompute's all-gathers follow it)
        gather = np.where((np.asarray(precision) == PRECISIONS.index("fp8")) & fw.fp8_tp_gather, 0.5, 1.0)
        copies = 2.0 * (gather + 1.0) * fw.sp_copy_bytes * terms["T"] * model.hidden * byte_s
        added = np.where(np.asarray(sp, bool) & (t > 1), copies, 0.0)
        terms = {**terms, "tp_fwd": terms["tp_fwd"] + added, "tp_bwd": terms["tp_bwd"] + added}
    score_f = 0.0
    if unfused:  # the s x s scores through HBM: the softmax and the attention dropout, forward and backward
        score_f, score_b = unfused_score_s(model, terms["T"], t, byte_s)
        terms = {**terms, "cast_f": terms["cast_f"] + score_f, "cast_b": terms["cast_b"] + score_b}
    act, score, moe_act, drop = layer_activations_under(fw, model, terms, t, sp, precision)
    zero = np.zeros_like(act)
    if fw.selective == "op" and model.kind != "mlp":
        mms, re_flops, all_flops = op_checkpoint_products(model)
        sel_kept = np.minimum(op_checkpoint_kept_bytes(fw, model, terms["T"], t, sp, mms), act)
        sel = {"sel_kept": sel_kept, "sel_work": act - sel_kept,
               "sel_re": re_flops / all_flops * (terms["gemm"] + terms["cast_f"]) + terms["elem"] + terms["overhead"],
               "sel_tp": 0.5 * terms["tp_fwd"]}  # the all-gathers run again, the reduce-scatters do not
    elif model.mla:  # its up-projections instead of the core (costmodel._layer_compute, recompute)
        sel = {"sel_kept": act - score - terms["qkv_L"], "sel_work": zero, "sel_re": terms["up"], "sel_tp": zero}
    else:
        sel = {"sel_kept": act - drop, "sel_work": zero, "sel_re": terms["attn"] + score_f + zero, "sel_tp": zero}
    out = {**terms, "act_L": act, "score_L": score, **sel}
    if moe_act is not None and fw.selective == "op" and model.kind != "mlp":
        out.update(op_checkpoint_moe_terms(fw, model, terms, moe_act, t, sp))
    elif moe_act is not None:
        qkv, re = (terms["qkv_L"], terms["up"]) if model.mla else (0.0, terms["attn"] + score_f + zero)
        out.update(moe_act_L=moe_act, moe_sel_kept=moe_act - drop - qkv, moe_sel_work=zero, moe_sel_re=re,
                   moe_sel_tp=zero)
    if named:  # Megatron-Core's modules where named
        by_module = module_terms(fw, model, {**out, "score_f": score_f + zero, "drop": drop + zero}, byte_s, t, sp,
                                 precision, modules)
        on = np.asarray(modules) > 0
        out.update({k: np.where(on, v, out[k]) if k in out else np.where(on, v, 0.0) for k, v in by_module.items()})
    return out


def op_checkpoint_kept_bytes(fw: Framework, model: Transformer, T, t, sp, mms) -> np.ndarray:
    """Bytes a dense or an MoE layer keeps per micro-batch under per-op checkpointing (Framework.selective "op"), an
    MoE layer's topk and all-to-all results apart: the block's input, the saved products' outputs (``mms`` as
    op_checkpoint_products gives them), the attention output and its fp32 logsumexp (the kernel's results are saved
    too) and, with sequence parallelism, the two reduce-scatters' outputs."""
    sp_div = np.where(sp, t, 1)
    saved = sum(w / np.where(split, t, 1) for w, split, kept in mms if kept)
    kept = ACT_BYTES * T * (model.hidden / sp_div + saved + model.o_hidden / t
                            + np.where(sp & (t > 1), 2.0 * model.hidden / t, 0.0))
    if fw.layer_saves != "korthikanti":
        kept = kept + SOFTMAX_STAT_BYTES * T * model.heads / t * fw.fused_attention
    return kept


def op_checkpoint_moe_terms(fw: Framework, model: Transformer, terms: dict, moe_act, t, sp) -> dict:
    """An MoE layer's selective terms under per-op checkpointing (Framework.selective "op"; op_checkpoint_moe_products:
    the routed experts and the router run again): it keeps its input, the saved products' outputs (Q and V, and the
    shared experts' 1st and 3rd), the attention output and its fp32 logsumexp, topk's results (ROUTER_TOPK_BYTES a
    token and choice), under sequence parallelism the two reduce-scatters' outputs, and with ep > 1 both all-to-alls'
    results (moe_a2a_L: saved, not sent again); it runs again the share of its products' time its recomputed FLOPs
    are (with their fp8 casts), its element-wise work and launches, not the attention core."""
    mms, re_flops, all_flops = op_checkpoint_moe_products(model)
    T = terms["T"]
    kept = (op_checkpoint_kept_bytes(fw, model, T, t, sp, mms)
            + ROUTER_TOPK_BYTES * model.experts_per_token * T / np.where(sp, t, 1) + terms["moe_a2a_L"])
    sel_kept = np.minimum(kept, moe_act)
    casts = terms["cast_f"] - terms["cast_mlp_f"] + terms["moe_xcast_f"]  # (moe_layer_inputs' forward casts)
    re = re_flops / all_flops * (terms["moe_gemm"] + casts) + terms["moe_elem"] + terms["moe_overhead"]
    return {"moe_act_L": moe_act, "moe_sel_kept": sel_kept, "moe_sel_work": moe_act - sel_kept, "moe_sel_re": re,
            "moe_sel_tp": np.zeros_like(sel_kept)}


def refuse_modules(fw: Framework, model, table) -> None:
    """InputError naming recompute_modules where a row of ``table`` names Megatron-Core recompute modules that its
    profile ``fw`` or the model cannot take: a profile without them (Framework.recompute_modules), an MLP stack, or
    mla_up_proj on a model without multi-head latent attention (transformer_config.py refuses it too)."""
    codes = table.columns.get("recompute_modules") if hasattr(table, "columns") else None
    if codes is None or not codes.any():
        return
    first = module_names(codes[np.flatnonzero(codes)[0]])
    if not fw.recompute_modules:
        raise InputError("recompute_modules", f"none under framework {fw.name} (Megatron-Core's --recompute-modules; "
                         "profiles: " + ", ".join(k for k, f in FRAMEWORKS.items() if f.recompute_modules) + ")", first)
    if getattr(model, "kind", "mlp") == "mlp":
        raise InputError("recompute_modules", "none for an MLP stack (they name transformer layer modules)", first)
    if not model.mla and np.any(codes & MODULE_BIT["mla_up_proj"]):
        raise InputError("recompute_modules", "mla_up_proj only on a model with multi-head latent attention",
                         module_names(codes[np.flatnonzero(codes & MODULE_BIT["mla_up_proj"])[0]]))


def elem_bytes(model: Transformer, T, t, sp):
    """HBM bytes of a dense layer's fused element-wise kernels forward (ELEM_TH_PER_LAYER elements of the hidden
    width, split by t under sequence parallelism, ELEM_TF_PER_LAYER of the MLP's, split by t): its ``elem`` time over
    these is the element-wise rate, seconds a byte."""
    return ACT_BYTES * (ELEM_TH_PER_LAYER * T * model.hidden / np.where(sp, t, 1)
                        + ELEM_TF_PER_LAYER[model.activation] * T * model.ffn_hidden / t)


def module_terms(fw: Framework, model: Transformer, terms: dict, byte_s, t, sp, precision, modules) -> dict:
    """What Megatron-Core's selective recompute of the named ``modules`` (bit sets, costmodel._codes.RECOMPUTE_MODULES)
    keeps of one layer per micro-batch (sel_kept), holds while recomputing it (sel_work), runs again (sel_re, seconds;
    sel_tp its tensor-parallel collectives; an MoE layer's moe_sel_ep: its all-to-alls again, 1 or 0), for the dense
    layer and, with moe_ keys, the MoE layer. ``terms``: framework_terms' (act_L, score_L, drop, score_f, and for an
    MoE model moe_act_L, moe_experts_L, moe_moe_f, moe_act_f, moe_shared_f); ``byte_s``: seconds a byte at the
    element-wise rate. From Megatron-LM d98e8a6 (megatron/core; transformer_config.py documents which modules use
    output-discarding checkpointing, CheckpointWithoutOutput in tensor_parallel/random.py, and which normal
    checkpointing):
        core_attn       the attention core (attention.py checkpointed core attention): as the profile's policy
                        (layer_activations_under's ``drop`` freed, the kernel again), no working set beyond it
        mla_up_proj     MLA's up-projections and RoPE (multi_latent_attention.py): Q, K, V freed (qkv_L), the
                        up-projections again (up)
        layernorm       the norms that are modules of their own (transformer_layer.py: input_layernorm and
                        pre_mlp_layernorm where not an IdentityOp; gpt_layer_specs.py with Transformer Engine fuses
                        the input norm into linear_qkv except under MLA, and the pre-MLP norm into linear_fc1 except
                        where the model has experts): their 16-bit outputs freed (the fp32 statistics too under the
                        "te" count), read and written again at the element-wise rate
        moe_act         the routed experts' activation (moe/experts.py TEGroupedMLP: bias_act_func under
                        CheckpointWithoutOutput, its output discarded once linear_fc2 ran): FC2's 16-bit input freed,
                        a copy's expert width; the activation kernel again (moe_act_f)
        shared_experts  the shared experts' forward (moe/moe_layer.py, tensor_parallel.checkpoint): their
                        intermediates freed; their GEMMs and activation again (moe_shared_f)
        moe             the whole MoE block (moe_layer.py custom_forward under tensor_parallel.checkpoint, its input
                        the pre-MLP norm's output kept): its experts' terms freed (moe_experts_L: dispatched copies,
                        expert and shared intermediates, router probabilities); its forward again (moe_moe_f) and its
                        dispatch and combine all-to-alls (moe_sel_ep); subsumes moe_act and shared_experts
        mlp             a dense layer's MLP (transformer_layer.py _run_mlp, tensor_parallel.checkpoint; not on MoE
                        layers): FC1's output and FC2's input freed, and the fused norm's output where the norm is
                        fused into linear_fc1; its GEMMs, activation, fp8 casts, launches and its tp collectives again
    The working set is the freed bytes of one layer besides the attention core's (rebuilt for its backward). Not
    modelled: under fp8, Megatron-LM refuses layernorm and moe_act with delayed scaling, and otherwise has the linear
    layer after a recomputed norm save the norm's 16-bit output, not its fp8 copy (attention.py
    set_for_recompute_input_layernorm -> set_save_original_input), so that the discarded output is what is rebuilt:
    fp8 rows are priced with the bf16 rows' bytes here; the moe module's all-to-alls again are priced at the forward's
    exposed share."""
    bit = {name: (np.asarray(modules) & b) > 0 for name, b in MODULE_BIT.items()}
    T, h, f, sp_div = terms["T"], model.hidden, model.ffn_hidden, np.where(sp, t, 1)
    zero = np.zeros_like(T)
    korth = fw.layer_saves != "te" or model.mla  # (MLA models keep Korthikanti's count: layer_activations_under)
    fp8 = fw.fp8_saved_inputs & (np.asarray(precision) == PRECISIONS.index("fp8"))
    norm_out = ACT_BYTES * T * h / sp_div
    norm_stat = 0.0 if korth else NORM_STAT_BYTES[model.norm] * T / sp_div
    # norms that are modules of their own, per layer kind: the input norm under MLA, the pre-MLP norm with experts
    sep_d, sep_m = float(model.mla) + float(model.is_moe), float(model.mla) + 1.0
    ln_bytes = (norm_out + norm_stat) * bit["layernorm"]  # (U,) freed per separate norm
    ln_s = byte_s * 2.0 * norm_out * bit["layernorm"]  # its forward again: read the input, write the output
    attn_drop = np.where(bit["core_attn"] | bit["mla_up_proj"], terms["drop"], 0.0)
    attn_re = np.where(bit["core_attn"], terms["attn"] + terms["score_f"], 0.0)
    if model.mla:
        attn_drop = attn_drop + np.where(bit["mla_up_proj"], terms["qkv_L"], 0.0)
        attn_re = attn_re + np.where(bit["mla_up_proj"], terms["up"], 0.0)
    # the dense MLP (mlp): FC1's output and FC2's input, and the fused norm's output (LayerNormLinear) where fused
    fused_norm = 0.0 if model.is_moe else 1.0
    if korth:  # Korthikanti's count: the MLP's intermediates and its input (the norm's output), fp8 inputs 1 byte
        mlp_bytes = ((6 if model.gated else 4) * T * f / t + fused_norm * 2.0 * T * h / sp_div
                     - np.where(fp8, T * (f / t + fused_norm * h / sp_div), 0.0))
    else:  # te_saved_bytes' mlp term and one LayerNormLinear's ln_out and statistics
        lo = np.where(fp8, 1.0, float(ACT_BYTES))
        mlp_bytes = ((ACT_BYTES * (model.mlp_matrices - 1) + lo) * T * f / t
                     + fused_norm * (lo * T * h / sp_div + NORM_STAT_BYTES[model.norm] * T / sp_div))
    mlp_drop = np.where(bit["mlp"], mlp_bytes, 0.0)
    mlp_re = np.where(bit["mlp"], terms["gemm"] - terms["attn_gemm"] + terms["cast_mlp_f"] + 0.5 * terms["overhead"]
                      + byte_s * ACT_BYTES * ELEM_TF_PER_LAYER[model.activation] * T * f / t, 0.0)
    work_d = sep_d * ln_bytes + mlp_drop
    out = {"sel_kept": np.maximum(terms["act_L"] - attn_drop - work_d, 0.0), "sel_work": work_d,
           "sel_re": attn_re + sep_d * ln_s + mlp_re, "sel_tp": np.where(bit["mlp"], 0.5 * terms["tp_fwd"], 0.0)}
    if "moe_act_L" in terms:
        copies = routed_copies(model, T, t)
        fs = model.shared_experts * model.shared_expert_ffn
        part = (np.where(bit["moe_act"], (ACT_BYTES + clamp_saved_bytes(model)) * copies * model.expert_ffn, 0.0)
                + np.where(bit["shared_experts"], (6 if model.gated else 4) * T * fs / t, 0.0))
        part_re = (np.where(bit["moe_act"], terms["moe_act_f"], 0.0)
                   + np.where(bit["shared_experts"], terms["moe_shared_f"], 0.0))
        experts = np.where(bit["moe"], terms["moe_experts_L"], part)
        work_m = sep_m * ln_bytes + experts
        out.update(moe_sel_kept=np.maximum(terms["moe_act_L"] - attn_drop - work_m, 0.0), moe_sel_work=work_m,
                   moe_sel_re=attn_re + sep_m * ln_s + np.where(bit["moe"], terms["moe_moe_f"], part_re),
                   moe_sel_tp=zero, moe_sel_ep=bit["moe"] + zero)
    return out


def unfused_score_s(model: Transformer, T, t, byte_s):
    """(forward, backward) seconds one layer's unfused attention moves its s x s scores through HBM outside the two
    batched products (UNFUSED_SCORE_BYTES a score element: the causal softmax kernel and the attention dropout), for a
    micro-batch of T tokens (its rank's queries) against the s keys, heads / t heads a rank, ``byte_s`` seconds a
    byte."""
    E = T * model.seq_len * model.heads / t  # (N,) score elements on one rank
    return byte_s * UNFUSED_SCORE_BYTES[0] * E, byte_s * UNFUSED_SCORE_BYTES[1] * E


def layer_activations_under(fw: Framework, model: Transformer, terms: dict, t, sp, precision):
    """(act, score, moe_act, drop) under the framework: one dense layer's activation bytes per micro-batch, its
    attention-score part, the MoE layer's (None for a dense model), and what selective recompute of the attention core
    frees. Korthikanti et al.'s count (Framework.layer_saves "korthikanti"; also every MLA model and MLP stack): the
    scores taken out where the attention is fused, half of each linear layer's input where fp8 inputs are kept in fp8.
    A framework's layer count ("te": te_saved_bytes, "torchtitan": torchtitan_saved_bytes): its terms; an MoE layer
    keeps the dense layer's norm and attention terms (under "te" the MLP norm's 16-bit output, which the router and
    the token dispatcher read, not a LayerNormLinear's) and its experts' part (moe_layer_activation_bytes). Recomputing
    the attention core under "te" (Megatron-LM's checkpointed core attention, tensor_parallel/random.py:628 saving the
    checkpoint's inputs) frees the kernel's statistics (or scores) but keeps V as the view of the QKV GEMM's output it
    is: with RoPE, the pre-rotation Q and K beside it (2 (q + hk) / t bytes a token more)."""
    act, score, moe_act = terms["act_L"], terms["score_L"], terms.get("moe_act_L")
    T = terms["T"]
    if fw.layer_saves == "korthikanti" or model.kind == "mlp" or model.mla:
        if fw.fused_attention:
            act = act - score
            moe_act = None if moe_act is None else moe_act - score
            score = np.zeros_like(score)
        if fw.fp8_saved_inputs:
            fp8 = precision == PRECISIONS.index("fp8")
            attn_b, ffn_b = fp8_input_saving(model, T, t, sp)
            act = act - np.where(fp8, attn_b + ffn_b, 0.0)
            moe_act = None if moe_act is None else moe_act - np.where(fp8, attn_b, 0.0)
        return act, score, moe_act, score
    zero = np.zeros_like(act)
    if fw.layer_saves == "te":
        fp8 = fw.fp8_saved_inputs & (precision == PRECISIONS.index("fp8"))
        saved = te_saved_bytes(model, T, t, sp, fp8=fp8, dropout=fw.dropout, fused=fw.fused_attention)
        rope_view = 0.0 if model.learned_positions else ACT_BYTES * T * (model.q_hidden + model.kv_hidden) / t
        drop = saved["softmax"] + saved["scores"] - rope_view
        mlp_norm = ACT_BYTES * T * model.hidden / np.where(sp, t, 1) - saved["ln_out"] / 2
    else:
        saved = torchtitan_saved_bytes(model, T, t, sp)
        drop, mlp_norm = saved["softmax"], 0.0
    score = saved.get("scores", 0.0) + zero
    if moe_act is not None:
        eager = torchtitan_expert_extra_bytes(model, T, t) if fw.layer_saves == "torchtitan" else 0.0
        moe_act = saved["total"] - saved["mlp"] + mlp_norm + terms["moe_experts_L"] + eager
    return saved["total"] + zero, score, moe_act, drop + zero


def layer_terms(lc, full, sel) -> dict[str, np.ndarray]:
    """Per layer and micro-batch, from one layer's costs ``lc`` and the recompute masks: the stage
    times F (forward, exposed tp and cp comm), B (backward, recompute and its comm), W (weight
    gradients) and the parts reported: compute, recompute, tp and cp comm. An MoE layer's ``host_f``
    (costmodel._experts.HOST_S_PER_KERNEL) bounds its forward and, twice, its backward with W from below; its
    ``host_x`` (expert_launch_excess) adds to its forward; xb_d, xb_e, xb_t: what backward_chunk_excess reads of
    it (G - H, e and t of a backward chunk's stretch; 0 where not priced, xb_on 0)."""
    f = lc["gemm"] + lc["attn"] + lc["elem"] + lc["overhead"] + lc["cast_f"]  # forward compute
    bx = lc["gemm"] + 2.0 * lc["attn"] + ELEM_BWD_FACTOR * (lc["elem"] + lc["overhead"]) + lc["cast_b"]
    tpf, tpb, cpf, cpb = lc["tp_fwd"], lc["tp_bwd"], lc["cp_fwd"], lc["cp_bwd"]
    xb = {}
    if "host_f" in lc:  # an MoE layer whose routing waits on the host: each pass the larger of the GPU's work, its
        # exposed exchanges with it, and the host's launches (the exchanges run in the host's gaps as the kernels do)
        cf, cb = tpf + cpf + lc["ep_fwd"], tpb + cpb + lc["ep_bwd"]
        f = np.maximum(f + lc["host_x"], lc["host_f"] - cf)  # and its expert phase's launches before the rest
        d = lc["xb_on"] * (bx + lc["gemm"] + cb - ELEM_BWD_FACTOR * lc["host_f"])  # G - H: backward GPU over host
        xb = {"xb_d": d, "xb_e": np.maximum(lc["xb_q"] - lc["xb_a"], 0.0) * lc["xb_on"],
              "xb_t": np.maximum(d + lc["xb_q"], 0.0) * lc["xb_on"]}
        bx = np.maximum(bx + lc["gemm"], ELEM_BWD_FACTOR * lc["host_f"] - cb) - lc["gemm"]
    re = np.where(full, f, np.where(sel, lc["sel_re"], 0.0))
    sel_tp = np.where(sel, lc["sel_tp"], 0.0)
    out = {"F": f + tpf + cpf, "B": bx + tpb + cpb + re + np.where(full, tpf + cpf, sel_tp), "W": lc["gemm"],
           "compute": f + bx + lc["gemm"], "recompute": re, "tp": tpf + tpb + np.where(full, tpf, sel_tp),
           "cp": cpf + cpb + np.where(full, cpf, 0.0)}
    if "ep_fwd" in lc:  # an MoE layer: its all-to-alls forward, backward and again in a full recompute (or in a
        epf, epb = lc["ep_fwd"], lc["ep_bwd"]  # selective one of the "moe" module: sel_ep, module_terms)
        again = np.where(full, epf, 0.0) if "sel_ep" not in lc else np.where(full, 1.0, sel * lc["sel_ep"]) * epf
        out["F"] = out["F"] + epf
        out["B"] = out["B"] + epb + again
        out["ep"] = epf + epb + again
        out["epx"] = lc["ep_x"]  # more, each way, where a pass runs unpaired under the EP A2A overlap
    return {**out, **xb}
