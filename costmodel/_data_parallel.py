"""The data-parallel exchange (gradient reduction, ZeRO's weight all-gathers), what of it is exposed,
and the optimizer step.

Per step and stage, over the g = dp x cp replicas: ZeRO 0 all-reduces the gradients; ZeRO 1-2
reduce-scatter them and all-gather the updated weights; ZeRO-3 all-gathers the weights for forward
and again for backward and reduce-scatters the gradients, per micro-batch (Rajbhandari et al. 2020
Sec. 7: 1.5x the all-reduce volume a pass; zero3_gather_scatter_bytes). Each collective is priced as
NCCL prices it on the group's link (costmodel._collectives.collective_s: the algorithm and protocol NCCL's
tuning model picks for its message, on the NICs of the group's ranks on a node), and there are as many as
the framework launches (exchange_plan: per bucket, per FSDP unit, per DeepSpeed module).
dp_exchange_coef gives the exchange as a x parameters + b seconds, in the framework's reduce and
gather dtypes (costmodel._frameworks). exposed_dp_s takes off what overlaps the bottleneck stage's
last backward (ZeRO-3: the whole pipeline), or the next step's first forward (overlapped parameter
gather), or FSDP's unit edges; a weight all-gather inside the optimizer step (DeepSpeed; InternEvo's broadcasts, one
per shard) is exposed.
The collectives hidden under computation slow it: their NCCL kernels hold a share of the SMs (compute_slowdown_s).
The optimizer step (Adam) reads and writes Framework.adam_bytes_touched per sharded parameter at the HBM rate
(30 bytes with every state in fp32).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from costmodel._collectives import CollectiveLink, CollectiveTerms, collective_terms, flat_link, pick
from costmodel._dtypes import GRAD_COMM_BYTES, WEIGHT_BYTES
from costmodel._frameworks import Framework
from costmodel._workloads import Transformer


def framework_columns(fw: Framework, p, zero, overlap):
    """The ZeRO stage and overlap the framework prices a row with: ZeRO-2/3 with pp > 1 as
    ZeRO-1 where it shards once per step with a pipeline; overlap fixed where it has one value, and off below the
    lowest ZeRO stage the framework overlaps (Framework.overlap_dp_min_zero: DeepSpeed's ZeRO 0-1 reduce after the
    backward pass)."""
    if fw.shard_with_pp_once:
        zero = np.where((p > 1) & (zero >= 2), 1, zero)
    if len(fw.overlap_dp) == 1:
        overlap = np.full(np.shape(overlap), fw.overlap_dp[0])
    if fw.overlap_dp_min_zero > 0:
        overlap = np.logical_and(overlap, zero >= fw.overlap_dp_min_zero)
    return zero, overlap


def hp_grad_rows(fw: Framework, zero, p):
    """Where the framework's bf16 optimizer adds each micro-batch's gradients into fp32 ones (Framework.hp_grad_bytes,
    bf16 rows): ZeRO 0-1, or under hp_grad_zero1_needs_pp ZeRO 0 and ZeRO-1 with pp > 1. Arrays broadcast."""
    if fw.hp_grad_zero1_needs_pp:
        return (zero == 0) | ((zero == 1) & (p > 1))
    return zero <= 1


def pp_grad_accum_rows(fw: Framework, zero, p):
    """Where the framework adds each micro-batch's 16-bit gradients into unsharded fp32 ones because a pipeline turns
    gradient sync off until the last micro-batch (Framework.pp_grad_accum_bytes): pp > 1 at ZeRO 1-3 (``zero`` as
    framework_columns prices it: FSDP's ZeRO 2-3 with a pipeline is 1 there). Arrays broadcast."""
    return (p > 1) & (zero >= 1) & (fw.pp_grad_accum_bytes > 0)


def has_fsdp_copies(fw: Framework) -> bool:
    """Whether the profile prices FSDP2's copies beside its collectives (Framework.ag_copy_out_bytes,
    rs_copy_in_bytes)."""
    return bool(fw.ag_copy_out_bytes or any(fw.rs_copy_in_bytes))


def fsdp_copy_bytes(fw: Framework, model: Transformer, zero, p, m, t=1.0):
    """HBM bytes a parameter a GPU holds unsharded (its stage's, per GPU) FSDP2's copies beside its collectives move in
    a step of ``m`` micro-batches on pipeline depth ``p`` (``zero`` as framework_columns prices it), as many as the
    exchange counts the collectives (dp_exchange_coef): an all-gather's copy-out ag_copy_out_bytes, a reduce-scatter's
    copy-in rs_copy_in_bytes (of the micro-batch's 16-bit gradients; of the unsharded fp32 accumulation where
    pp_grad_accum_rows). ZeRO-3, every micro-batch: the copy-out forward and again backward but for the share kept
    gathered (zero3_kept_share at tensor-parallel degree ``t``), the copy-in: m ((2 - kept) out + in), the count of
    zero3_gather_scatter_bytes; ZeRO 1-2: the copy-in once a reduce-scatter (scatters_per_step: m at ZeRO-2 where the
    framework reduce-scatters every micro-batch, else 1) and the copy-out once (the weights gathered once a step);
    ZeRO 0 (no sharding): none. Arrays broadcast."""
    out, (in16, in32) = fw.ag_copy_out_bytes, fw.rs_copy_in_bytes
    z3 = zero3_gather_scatter_bytes(m, out, in16, zero3_kept_share(fw, model, t))
    # the fp32 accumulation is read where one reduce-scatter ends the step, not under ZeRO-2's every micro-batch
    every = (zero == 2) & fw.zero2_scatter_every_microbatch
    z12 = scatters_per_step(zero, m, fw) * np.where(pp_grad_accum_rows(fw, zero, p) & ~every, in32, in16) + out
    return np.where(zero == 3, z3, np.where(zero >= 1, z12, 0.0))


def zero3_kept_share(fw: Framework, model: Transformer, t):
    """The share of a GPU's parameters ZeRO-3 keeps gathered from a micro-batch's forward to its backward, not gathered
    again (Framework.zero3_kept: layers, outside units, parameters), at tensor-parallel degree ``t``: the whole
    model's on one stage (ExchangePlan.kept). Arrays broadcast."""
    k_layers, k_outside, k_params = fw.zero3_kept
    L = model.layers
    total = model.num_params() / t
    unit = (model.num_params() - model.embedding_params() - model.head_params()) / L / t
    return np.minimum(k_layers * unit + k_outside * (total - L * unit) + k_params, total) / total


def dp_exchange_s(zero, m, params, g, bw, lat, grad_bytes=None, fw: Framework | None = None, prec=0, plan=None):
    """Seconds of a stage's data-parallel exchange over g ranks for ``params`` parameters per GPU: dp_exchange_coef's
    a x params + b. ``bw``, ``lat``: one link tier (every step at ``lat``), or ``lat`` a CollectiveLink (``bw``
    unread)."""
    c = dp_exchange_coef(zero, m, g, _as_link(bw, lat), grad_bytes, fw, prec, plan)
    return c.a * params + c.b


def dp_in_step_s(zero, m, params, g, link, fw: Framework | None = None, prec=0, plan=None):
    """Seconds of the part of dp_exchange_s that runs inside the optimizer step (dp_exchange_coef's step_a x params +
    step_b; zero where the framework has none)."""
    c = dp_exchange_coef(zero, m, g, link, None, fw, prec, plan)
    return c.step_a * params + c.step_b


def _as_link(bw, lat) -> CollectiveLink:
    return lat if isinstance(lat, CollectiveLink) else flat_link(bw, lat)


@dataclasses.dataclass(frozen=True)
class ExchangePlan:
    """The collectives a stage's data-parallel exchange launches (exchange_plan), arrays broadcasting with the rows or
    configurations priced: ``bucket`` elements per gradient collective (and per ZeRO 1-2 weight all-gather; inf: the
    stage's in one), ZeRO-3's all-gathers per forward and per backward pass (``gathers_fwd``, ``gathers_bwd``) and
    reduce-scatters per micro-batch (``scatters``; nan: by buckets), ``kept`` the share of the weights not gathered
    again for backward, and ``est_params`` the stage's parameters per GPU the message sizes are estimated from (for
    NCCL's choice of algorithm only)."""

    bucket: object
    gathers_fwd: object
    gathers_bwd: object
    scatters: object
    kept: object
    est_params: object


# No plan: one collective per pass, its message the whole stage (an estimate past any model's parameters: NCCL's
# algorithm for large messages).
ONE_PER_PASS = ExchangePlan(bucket=np.inf, gathers_fwd=1.0, gathers_bwd=1.0, scatters=np.nan, kept=0.0,
                            est_params=1e15)


def exchange_plan(fw: Framework, model: Transformer, t, ranks, overlap, pp=1, ep_etp=None) -> ExchangePlan:
    """The ExchangePlan of ``fw`` for ``model`` at tensor-parallel degree ``t``, ``ranks`` in the data-parallel
    group, ``overlap`` (the row's overlap_dp) and pipeline depth ``pp``, from the profile's fields
    (costmodel._frameworks: dp_bucket_elems, zero3_gathers, zero3_kept): buckets of max(floor, per rank x ranks)
    elements (Megatron-Core's only with overlap where dp_buckets_need_overlap), or of one transformer layer's
    parameters (floor 0: an FSDP unit); ZeRO-3 (whole model on one stage) gathers per layer x layers + outside the
    layers per forward, less those kept gathered for backward; reduce-scatters one per unit (scatters per layer > 0)
    or by buckets. The messages are estimated from the exchanged parameters per GPU: an MoE model's dense exchange
    all but the routed experts / t, its expert exchange (``ep_etp`` given: ep x etp) the routed experts / ep_etp,
    each / pp."""
    t = np.asarray(t, dtype=np.float64)
    L = model.layers
    body = model.num_params() - model.embedding_params() - model.head_params()
    unit = body / L / t  # a transformer layer's parameters per GPU (the mean over dense and MoE layers)
    floor, per_rank = fw.dp_bucket_elems
    bucket = unit if floor == 0 else np.maximum(floor, per_rank * np.asarray(ranks, dtype=np.float64))
    if fw.dp_buckets_need_overlap:
        bucket = np.where(overlap, bucket, np.inf)
    per_layer, outside, scatter_per_layer = fw.zero3_gathers
    fwd = L * per_layer + outside if per_layer > 0 else 1.0
    k_layers, k_outside, k_params = fw.zero3_kept
    kept = zero3_kept_share(fw, model, t)
    kept_calls = k_layers * per_layer + k_outside + (k_params / (unit / per_layer) if per_layer > 0 else 0.0)
    bwd = np.maximum(fwd - kept_calls, 0.0) if per_layer > 0 else 1.0 - np.floor(kept)
    scatters = L * scatter_per_layer + outside if scatter_per_layer > 0 else np.nan
    routed = model.moe_layers * model.moe_layer_expert_params()  # 0 for a dense model
    exchanged = (model.num_params() - routed) / t if ep_etp is None else routed / np.asarray(ep_etp, dtype=np.float64)
    return ExchangePlan(bucket=bucket, gathers_fwd=fwd, gathers_bwd=bwd, scatters=scatters, kept=kept,
                        est_params=exchanged / np.asarray(pp, dtype=np.float64))


class ExchangeCoef(NamedTuple):
    """dp_exchange_coef's answer: the exchange takes a x params + b seconds, of which step_a x params + step_b run
    inside the optimizer step (the framework's weight_gather_in_step: exposed whatever the overlap; zero elsewhere),
    and mb_a x params + mb_b each micro-batch adds past the first outside ZeRO-3 (one reduce-scatter: ZeRO-2 under
    zero2_scatter_every_microbatch; zero elsewhere), so that a, b at m are those at 1 plus (m - 1) mb_a, mb_b."""

    a: object
    b: object
    step_a: object
    step_b: object
    mb_a: object = 0.0
    mb_b: object = 0.0


def dp_exchange_coef(zero, m, g, link: CollectiveLink, grad_bytes=None, fw: Framework | None = None, prec=0,
                     plan: ExchangePlan | None = None) -> ExchangeCoef:
    """ExchangeCoef: a stage's data-parallel exchange over g ranks on ``link`` (a CollectiveLink) takes a x params + b
    seconds for ``params`` parameters per GPU, ``grad_bytes`` a gradient element on the wire (None: ``fw``'s
    grad_reduce_bytes at ``prec``, else 2), a weight element ``fw``'s weight_gather_bytes at ``prec`` (else 2).
    ZeRO-3: per micro-batch, all-gather the weights for forward and for backward and reduce-scatter the gradients
    (Rajbhandari et al. 2020 Sec. 7: 1.5x the all-reduce volume, per pass); ZeRO 0: all-reduce the gradients;
    ZeRO 1-2: reduce-scatter them and all-gather the updated weights; ZeRO 0-1 under ``fw``'s all_reduce_then_gather:
    all-reduce, then all-gather. Each collective by NCCL's fastest algorithm for its message
    (costmodel._collectives.collective_s), as many as ``plan`` (ExchangePlan) launches: per bucket (params / bucket
    + 1, the last one partly filled), ZeRO-3's per pass; None: one per pass. Under ``fw``'s weight_gather_in_step the
    weight all-gather is one collective after the optimizer step (the step_ coefficients), or, with
    weight_sync_broadcasts, g broadcasts of a shard each: the weights' bytes at the broadcast's bandwidth and g ring
    latencies (a broadcast is a ring: no tree or PAT; its protocol NCCL's fastest for a shard)."""
    if grad_bytes is None:
        grad_bytes = GRAD_COMM_BYTES if fw is None else np.take(fw.grad_reduce_bytes, prec)
    w, both = (WEIGHT_BYTES, False) if fw is None else (np.take(fw.weight_gather_bytes, prec), np.logical_and(
        np.take(fw.all_reduce_then_gather, prec), (zero == 1) if fw.weight_sync_broadcasts else (zero <= 1)))
    if plan is None:
        plan = ONE_PER_PASS
    z3 = zero == 3
    est = plan.est_params
    msg = np.minimum(plan.bucket, est)  # elements of a bucket's collective
    gather = collective_terms("gather", g, link)  # the link's prices, once; each message picks its algorithm
    ar_b, ar_l = pick(collective_terms("all_reduce", g, link), grad_bytes * msg)
    rs_b, rs_l = pick(gather, grad_bytes * msg)
    per_bucket = 1.0 / plan.bucket  # collectives per parameter beyond the first
    in_step = fw is not None and fw.weight_gather_in_step
    if in_step and fw.weight_sync_broadcasts:  # g ring broadcasts of a shard each, one after another: every byte of
        # the weights once at the broadcast's bus bandwidth, g calls, the protocol NCCL picks for a shard's message
        bc_b, bc_l = pick(collective_terms("broadcast", g, link), w * est / np.asarray(g, dtype=np.float64))
        (ag_b, ag_l), ag_per = (bc_b, bc_l * np.asarray(g, dtype=np.float64)), 0.0
    elif in_step:  # one all-gather of the whole stage's weights
        (ag_b, ag_l), ag_per = pick(gather, w * est), 0.0
    else:
        (ag_b, ag_l), ag_per = pick(gather, w * msg), per_bucket
    reduce_b, reduce_l = np.where(zero == 0, ar_b, rs_b), np.where(zero == 0, ar_l, rs_l)
    gathers = both | (zero >= 1)  # (ZeRO-3's replaced below)
    ga, gb = w * ag_b + ag_l * ag_per, ag_l  # the weight all-gather: ga x params + gb
    reduce_a = grad_bytes * reduce_b + reduce_l * per_bucket  # one gradient reduction: reduce_a x params + reduce_l
    reduces = scatters_per_step(zero, m, fw)  # ZeRO-2's reduce-scatters: m a step where the framework runs one each
    a = np.where(both, grad_bytes * ar_b + ar_l * per_bucket, reduces * reduce_a)
    a, b = a + np.where(gathers, ga, 0.0), np.where(both, ar_l, reduces * reduce_l) + np.where(gathers, gb, 0.0)
    step_a, step_b = (np.where(gathers & (zero <= 2), x, 0.0) if in_step else 0.0 for x in (ga, gb))
    mb_a, mb_b = 0.0, 0.0
    if fw is not None and fw.zero2_scatter_every_microbatch:  # each micro-batch past the first adds a reduce-scatter
        mb_a, mb_b = (np.where(zero == 2, x, 0.0) for x in (reduce_a, reduce_l))
    if np.any(z3):  # per micro-batch: the gathers of both passes, the reduce-scatters (by unit or by bucket)
        a3, b3 = zero3_coef(m, gather, w, grad_bytes, plan, rs_b, rs_l, per_bucket)
        a, b = np.where(z3, a3, a), np.where(z3, b3, b)
    return ExchangeCoef(a, b, step_a, step_b, mb_a, mb_b)


def scatters_per_step(zero, m, fw: Framework | None):
    """Gradient reductions a step of ZeRO 0-2 runs: m at ZeRO-2 under ``fw``'s zero2_scatter_every_microbatch (one
    reduce-scatter after each micro-batch's backward: FSDP's post-backward hook without no_sync, DeepSpeed's stage 2
    hooks), else 1 (after the last micro-batch's backward). Arrays broadcast; 1 where ``fw`` is None or lacks it."""
    if fw is None or not fw.zero2_scatter_every_microbatch:
        return 1.0
    return np.where(zero == 2, m, 1.0)


def one_scatter_s(n, dp_raw, fw: Framework, prec=0):
    """Seconds of one of the reduce-scatters in ``dp_raw`` (a step's exchange as dp_exchange_coef prices it) that
    runs ``n`` of them (scatters_per_step) and one weight all-gather: its bytes' share, gr / (n gr + w) of the exchange
    (gr, w: a gradient's and a weight's bytes on the wire at ``prec``), as the exposure splits the all-gather from the
    reduce-scatter elsewhere (the latencies in the same proportion); 0 where ``n`` is 1 (only the last)."""
    gr, w = (x[0] if x[0] == x[1] == x[2] else np.take(x, prec) for x in (fw.grad_reduce_bytes, fw.weight_gather_bytes))
    return np.where(n > 1, gr / (n * gr + w), 0.0) * dp_raw


def zero3_coef(m, gather: CollectiveTerms, w, grad_bytes, plan: ExchangePlan, rs_b, rs_l, per_bucket):
    """(a, b) of ZeRO-3's exchange over a step of m micro-batches: each all-gathers the weights in plan.gathers_fwd
    collectives for forward and their 1 - plan.kept share in plan.gathers_bwd for backward, and reduce-scatters the
    gradients in plan.scatters collectives (nan: by buckets: ``rs_b``, ``rs_l``, ``per_bucket`` as dp_exchange_coef
    prices them), each on the group's ``gather`` terms (costmodel._collectives.collective_terms).
    zero3_gather_scatter_bytes counts the bytes."""
    est, fwd, bwd = plan.est_params, plan.gathers_fwd, plan.gathers_bwd
    g_b, g_l = pick(gather, w * est / fwd)  # an all-gather of one unit's weights
    by_unit = ~np.isnan(plan.scatters)
    u_b, u_l = pick(gather, grad_bytes * est / np.where(by_unit, plan.scatters, 1.0))
    sc_b, sc_l = np.where(by_unit, u_b, rs_b), np.where(by_unit, u_l * np.where(by_unit, plan.scatters, 0.0), rs_l)
    a = m * (zero3_gather_scatter_bytes(1.0, w, 0.0, plan.kept) * g_b + grad_bytes * sc_b
             + np.where(by_unit, 0.0, rs_l * per_bucket))
    return a, m * ((fwd + bwd) * g_l + sc_l)


def zero3_gather_scatter_bytes(m, weight_bytes, grad_bytes, kept=0.0):
    """Bytes per parameter ZeRO-3 puts through the data-parallel group in a step of m micro-batches: each all-gathers
    the weights for forward and again for backward (2 x ``weight_bytes``; the backward one less the ``kept`` share the
    framework keeps gathered from forward to backward) and reduce-scatters the gradients (``grad_bytes``)
    (Rajbhandari et al. 2020 Sec. 7)."""
    return m * ((2.0 - kept) * weight_bytes + grad_bytes)


def fsdp_exchange_parts(zero, overlap, dp_raw, window, B_b, W_b, F_b, fw: Framework, prec, model: Transformer, pp):
    """last_exchange_parts under ``fw``'s fsdp_unit_edges (a dense model): FSDP's root unit and block 0 (share e of
    the parameters at pp 1, ZeRO 2-3) expose their forward all-gather ``ag`` and reduce-scatter ``rs``; the rest
    under the next step's first forward F_b and the last backward B + W at ZeRO-2 with pp 1, else under ``window``
    (ZeRO-3: m X_max). Every row's arithmetic is the formula's; the ZeRO-2 rows' branch is priced on them alone, a
    profile that always overlaps reads no other branch."""
    n = model.num_params()
    w, gr = (x[0] if x[0] == x[1] == x[2] else np.take(x, prec) for x in (fw.weight_gather_bytes, fw.grad_reduce_bytes))
    e_edge = (n - (model.layers - 1) * model.layer_params()) / n
    if fw.pp_grad_sync_after_backward and bool(np.all(overlap)) and all(
            np.ndim(x) == 1 and x.shape == dp_raw.shape for x in (zero, pp, window, B_b, W_b, F_b)):
        return fsdp_exchange_by_case(zero, dp_raw, window, B_b, W_b, F_b, w, gr, e_edge, pp)
    e = np.where((pp == 1) & (zero >= 2), e_edge, 0.0)
    ag, rs = fsdp_gather_scatter_s(zero, dp_raw, w, gr)
    edge = e * (ag + rs)
    rest = np.maximum(dp_raw - edge - window, 0.0)  # (pp > 1: one exchange behind the last backward; but see below)
    z2 = (zero == 2) & (pp == 1)  # against the next forward and the last backward
    if np.shape(z2) != np.shape(rest):  # (broadcast inputs: the rows' arrays are not all alike)
        rest = np.where(z2, zero2_rest_s(1 - e, ag, rs, F_b, B_b, W_b), rest)
    elif (z2 := np.flatnonzero(z2)).size:
        at = lambda a: a if np.ndim(a) == 0 else np.take(a, z2)  # noqa: E731
        rest[z2] = zero2_rest_s(1 - at(e), at(ag), at(rs), at(F_b), at(B_b), at(W_b))
    always = bool(np.all(overlap))
    sharded = zero >= 2
    fixed = np.where(sharded, edge, 0.0)
    late = np.where(sharded, rest, np.maximum(dp_raw - window, 0.0))
    if not always:
        fixed, late = np.where(overlap, fixed, dp_raw), np.where(overlap, late, 0.0)
    if fw.pp_grad_sync_after_backward:  # pp > 1, sharded: the reduce-scatter after the last backward, waited; the
        # weights' all-gather behind the next step's first forward (Framework.pp_grad_sync_after_backward); ZeRO 0
        # is DDP, whose hooks still run under the last backward
        after = (pp > 1) & (zero >= 1)
        after = after if always else overlap & after
        fixed, late = np.where(after, rs, fixed), np.where(after, np.maximum(ag - F_b, 0.0), late)
    return fixed, late


def fsdp_gather_scatter_s(zero, dp_raw, w, gr):
    """(ag, rs): the seconds of dp_raw that are FSDP's weight all-gather (ZeRO-3: forward's and backward's) and its
    gradient reduce-scatter, split by their bytes per parameter ``w`` and ``gr``."""
    per = np.where(zero == 3, 2 * w + gr, w + gr)  # ZeRO-3: forward's gather and backward's
    return dp_raw * w / per, dp_raw * gr / per


def zero2_rest_s(kept, ag, rs, F_b, B_b, W_b):
    """ZeRO-2 at pp 1: the ``kept`` share (outside FSDP's edge units) of the all-gather ``ag`` beyond the next
    step's first forward F_b, plus that of the reduce-scatter ``rs`` beyond the last backward B + W."""
    return np.maximum(kept * ag - F_b, 0.0) + np.maximum(kept * rs - B_b - W_b, 0.0)


def fsdp_exchange_by_case(zero, dp_raw, window, B_b, W_b, F_b, w, gr, e_edge, pp):
    """fsdp_exchange_parts of rows (N,) that all overlap under pp_grad_sync_after_backward, each case priced on its
    rows alone (the same arithmetic on the same operands, bit for bit): pp > 1 sharded, the reduce-scatter ``rs``
    exposed and the all-gather ``ag`` under the next forward F_b; pp 1 at ZeRO 2-3, the root unit's and block 0's
    share ``e_edge`` exposed and the rest under F_b and B + W (ZeRO-2) or the window (ZeRO-3); the others (ZeRO 0, or
    ZeRO-1 at pp 1) under the window."""
    fixed, late = np.zeros(dp_raw.shape), np.maximum(dp_raw - window, 0.0)
    for i, edges in ((np.flatnonzero((pp > 1) & (zero >= 1)), False), (np.flatnonzero((pp == 1) & (zero >= 2)), True)):
        if not i.size:
            continue
        at = lambda a: a if np.ndim(a) == 0 else np.take(a, i)  # noqa: E731
        z, dp_i = at(zero), at(dp_raw)
        ag, rs = fsdp_gather_scatter_s(z, dp_i, at(w), at(gr))
        if not edges:
            fixed[i], late[i] = rs, np.maximum(ag - at(F_b), 0.0)
            continue
        e = np.full(i.size, e_edge)
        edge = e * (ag + rs)
        fixed[i] = edge
        late[i] = np.where(z == 2,  # ZeRO-2: under the next forward and the last backward; ZeRO-3: the window
                           zero2_rest_s(1 - e, ag, rs, at(F_b), at(B_b), at(W_b)),
                           np.maximum(dp_i - edge - at(window), 0.0))
    return fixed, late


def compute_slowdown_s(sm_share, overlapped_s, exposed_s):
    """Seconds the step gains because the collectives hidden under computation hold ``sm_share`` of the GPU's SMs:
    max(f X - e, 0), X = ``overlapped_s`` the seconds of the collectives run beside the computation, e = ``exposed_s``
    the part of them the computation did not cover, f = ``sm_share``. Arrays broadcast.

    NCCL runs a collective as one kernel of one CTA per channel (costmodel._nccl.ring_channels), each CTA on an SM for
    the whole collective, so the computation beside it (GEMMs, whose kernels fill every SM with one CTA each) runs on
    the 1 - f of the SMs left, at 1 - f of its rate. A collective of X seconds starting with C seconds of computation:
    while it runs the computation advances (1 - f) X; if that is short of C, the computation ends at
    X + C - (1 - f) X = C + f X, else the window ends with the collective at X. The window takes max(X, C + f X)
    where the model priced max(X, C): the step gains f X where X <= C (the collective hidden), and
    max(X, C + f X) - X = max(f X - (X - C), 0) where X > C, the model's exposed part e = X - C: both max(f X - e, 0).
    A fully exposed collective (C = 0, e = X) gains nothing. HBM is not priced: a ring step reads and writes each byte
    it moves about three times (read the peer's chunk, reduce with the local one, write), 3 x 50 GB/s across nodes
    (400 Gb/s per GPU) is 4.5% of an H100's 3.35 TB/s, taken from compute-bound GEMMs (no loss) and from the
    HBM-bound element-wise kernels (at most that 4.5% of their share of the layer, under 1% of a step)."""
    if np.ndim(sm_share) == 0 and sm_share == 0:
        return 0.0
    return np.maximum(sm_share * overlapped_s - exposed_s, 0.0)


def exchange_reads_precision(fw: Framework) -> bool:
    """Whether the framework's exchange moves different bytes at different precisions (then the precision is among
    the columns that key the exchange's distinct combinations)."""
    return any(len(set(x)) > 1 for x in (fw.grad_reduce_bytes, fw.weight_gather_bytes, fw.all_reduce_then_gather))


def per_step_exchange(fw: Framework, coef: ExchangeCoef, shape, inv, zero, m) -> ExchangeCoef:
    """Each stage's exchange a step from the coefficients at m = 1 of its distinct combination (``coef``'s fields (U,)
    or scalars, ``shape`` the combinations' (U,), ``inv`` each stage's combination): ZeRO-3's times the row's m and,
    where the framework reduce-scatters every micro-batch at ZeRO-2 (Framework.zero2_scatter_every_microbatch), the
    ZeRO-2 stages' (m - 1) further reduce-scatters (coef.mb_a, mb_b; 0 in dp_exchange_coef off ZeRO-2, here read
    only at ZeRO-2): the same sums as dp_exchange_coef at m. The step_ fields zero (scalars) where the framework has
    no in-step part."""
    back = lambda x: np.take(np.broadcast_to(x, shape), inv)  # noqa: E731  (U,) -> each stage's
    per_step = np.where(zero == 3, m, 1)
    # (the in-step part only under weight_gather_in_step: zero elsewhere, where nothing reads it)
    out = [back(x) * per_step for x in coef[:4 if fw.weight_gather_in_step else 2]] + [0.0] * (
        0 if fw.weight_gather_in_step else 2)
    if fw.zero2_scatter_every_microbatch:  # ZeRO-2's reduce-scatter once a micro-batch: (m - 1) more of them
        if np.shape(inv)[0] == 1 and np.ndim(zero) == 1 and np.shape(m) == np.shape(zero) == np.shape(inv)[1:]:
            # (on the ZeRO-2 rows alone: the others' more is 0 below, o + 0.0 = o)
            i = np.flatnonzero(zero == 2)
            ix, more_i = np.take(inv[0], i), np.take(m, i) - 1
            for j, x in enumerate((coef.mb_a, coef.mb_b)):
                out[j] = out[j] + 0.0
                out[j][0, i] += np.take(np.broadcast_to(x, shape), ix) * more_i
        else:
            more = np.where(zero == 2, m - 1, 0)
            out[:2] = (o + back(x) * more for o, x in zip(out[:2], (coef.mb_a, coef.mb_b), strict=True))
    return ExchangeCoef(*out)


def exposed_dp_s(zero, overlap, m, X_max, B_b, W_b, dp_raw, F_b=0.0, fw: Framework | None = None, prec=0,
                 model: Transformer | None = None, pp=1, step_s=None, sm_share=0.0):
    """The data-parallel exchange's exposed time: overlapped (``overlap``) with the bottleneck stage's last backward
    (B + W), or under ZeRO-3 with the whole pipeline (m X_max); under ``fw``'s overlap_param_gather, ZeRO 1-2's weight
    all-gather (its share of dp_exchange_coef's bytes at ``prec``) with the next step's first forward F_b instead.
    ``fw``'s fsdp_unit_edges (``model`` dense, ``pp`` 1, ZeRO 2-3): FSDP's root unit and block 0 (share e of the
    parameters) expose their forward all-gather and reduce-scatter; the rest under F_b and B + W (ZeRO-3: m X_max);
    with pp > 1 and ``fw``'s pp_grad_sync_after_backward (sharded rows), the reduce-scatter after the stage's last
    backward, exposed, and the all-gather under the next step's first forward F_b.
    ``fw``'s weight_gather_in_step: ZeRO 1-2's (and the bf16 optimizer's) weight all-gather, ``step_s`` seconds of
    ``dp_raw`` (dp_in_step_s of the same stage), exposed whole. Plus compute_slowdown_s: the computation the
    overlapped collectives run beside, slowed by the ``sm_share`` of the SMs their kernels hold."""
    fixed, late = exposure_parts(zero, overlap, m, X_max, B_b, W_b, dp_raw, F_b, fw, prec, model, pp, step_s)
    return fixed + late + compute_slowdown_s(sm_share, dp_raw - fixed, late)


def exposure_parts(zero, overlap, m, X_max, B_b, W_b, dp_raw, F_b=0.0, fw: Framework | None = None, prec=0,
                   model: Transformer | None = None, pp=1, step_s=None):
    """exposed_dp_s's exposed exchange, before the slowdown, as (``fixed``, ``late``): ``fixed`` the seconds exposed by
    construction (no overlap, FSDP's edge units, the gather inside the optimizer step), run beside no computation;
    ``late`` the part of the other dp_raw - fixed seconds, run beside the computation, that it did not cover.
    ZeRO-2 reduce-scattered every micro-batch (``fw``'s zero2_scatter_every_microbatch): the last micro-batch's
    reduce-scatter and the weight all-gather as a step's one exchange (last_exchange_parts: against the last
    backward, the next forward, FSDP's edge units, the optimizer step); each of the m - 1 before it (one_scatter_s each)
    runs behind its micro-batch's backward and the passes after it, exposed only by what it takes beyond a
    micro-batch's passes on the bottleneck stage (X_max), late; without overlap, exposed whole."""
    if fw is None or not fw.zero2_scatter_every_microbatch:  # one gradient reduction a step
        return last_exchange_parts(zero, overlap, m, X_max, B_b, W_b, dp_raw, F_b, fw, prec, model, pp, step_s)
    if bool(np.all(overlap)) and all(np.ndim(x) == 1 and np.shape(x) == np.shape(dp_raw) for x in (zero, m, X_max)) \
            and np.isfinite(dp_raw).all() and np.isfinite(X_max).all():
        return scattered_exposure_parts(zero, overlap, m, X_max, B_b, W_b, dp_raw, F_b, fw, prec, model, pp, step_s)
    earlier, spill = earlier_scatters_s(scatters_per_step(zero, m, fw), dp_raw, X_max, fw, prec)
    fixed, late = last_exchange_parts(zero, overlap, m, X_max, B_b, W_b, dp_raw - earlier, F_b, fw, prec, model, pp,
                                      step_s)
    if np.all(overlap):  # (a profile that always overlaps: no row reads the other branch)
        return fixed, late + spill
    return np.where(overlap, fixed, fixed + earlier), np.where(overlap, late + spill, late)


def scattered_exposure_parts(zero, overlap, m, X_max, B_b, W_b, dp_raw, F_b, fw: Framework, prec, model, pp,
                             step_s):
    """exposure_parts under zero2_scatter_every_microbatch where every row (N,) overlaps and dp_raw and X_max are
    finite: the m - 1 earlier reduce-scatters priced on the ZeRO-2 rows alone (elsewhere one scatter a step: nothing
    earlier, x - 0 = x, and no spill, x + 0 = x; the same values bit for bit)."""
    i = np.flatnonzero(zero == 2)
    if not i.size:
        return last_exchange_parts(zero, overlap, m, X_max, B_b, W_b, dp_raw, F_b, fw, prec, model, pp, step_s)
    at = lambda a: a if np.ndim(a) == 0 else np.take(a, i)  # noqa: E731
    # (scatters_per_step's m at ZeRO-2)
    earlier, spill = earlier_scatters_s(at(m).astype(np.float64), at(dp_raw), at(X_max), fw, at(prec))
    dp_left = dp_raw.copy()
    dp_left[i] = at(dp_raw) - earlier
    fixed, late = last_exchange_parts(zero, overlap, m, X_max, B_b, W_b, dp_left, F_b, fw, prec, model, pp, step_s)
    late[i] = at(late) + spill
    return fixed, late


def earlier_scatters_s(n, dp_raw, X_max, fw: Framework, prec):
    """(earlier, spill) of a step of ``n`` reduce-scatters (scatters_per_step): the n - 1 before the last, one
    one_scatter_s each, and what each takes beyond its micro-batch's passes on the bottleneck stage (X_max)."""
    one = one_scatter_s(n, dp_raw, fw, prec)  # a reduce-scatter's seconds (0 where there is only the last)
    more = n - 1.0
    return more * one, more * np.maximum(one - X_max, 0.0)


def last_exchange_parts(zero, overlap, m, X_max, B_b, W_b, dp_raw, F_b=0.0, fw: Framework | None = None, prec=0,
                        model: Transformer | None = None, pp=1, step_s=None):
    """exposure_parts for a step's exchange of one gradient reduction and one weight all-gather (``dp_raw``; ZeRO-3:
    its per micro-batch collectives), as (``fixed``, ``late``)."""
    window = np.where(zero == 3, m * X_max, B_b + W_b)
    if fw is not None and fw.fsdp_unit_edges and model is not None and not model.is_moe and model.kind != "mlp":
        return fsdp_exchange_parts(zero, overlap, dp_raw, window, B_b, W_b, F_b, fw, prec, model, pp)
    if fw is not None and fw.weight_gather_in_step:  # the weight all-gather after the optimizer step: exposed
        assert step_s is not None, "weight_gather_in_step: the in-step seconds (dp_in_step_s) are needed"
        return np.where(overlap, step_s, dp_raw), np.where(overlap, np.maximum(dp_raw - step_s - window, 0.0), 0.0)
    if fw is None or not fw.overlap_param_gather:
        return np.where(overlap, 0.0, dp_raw), np.where(overlap, np.maximum(dp_raw - window, 0.0), 0.0)
    # the weight all-gather's share of dp_raw per (precision, ZeRO stage) (3, 4), once, read per row
    z = np.arange(4)
    w, gr, ar = (np.asarray(x)[:, None] for x in (fw.weight_gather_bytes, fw.grad_reduce_bytes,
                                                  fw.all_reduce_then_gather))
    share = w / (gr * (1 + (ar & (z == 1))) + w)
    ag = np.where((zero == 1) | (zero == 2), np.take(share, np.multiply(prec, 4) + zero) * dp_raw, 0.0)
    return (np.where(overlap, 0.0, dp_raw),
            np.where(overlap, np.maximum(dp_raw - ag - window, 0.0) + np.maximum(ag - F_b, 0.0), 0.0))
