"""Which rows can run at all, as a reason code per row (REASONS; 0 = ok, the first failing check wins).

Everything but memory (checked by the block once memory is priced): the GPUs fit the cluster's
pools; tp splits the heads (an MLP: the hidden width); ep x etp folds into a stage's ranks
(costmodel._experts); the stages hold the model's layers, at least one each; cp splits the
sequence into 2 cp chunks; the batch divides into dp x micro-batches; the schedule takes the vpp
(whole layers per chunk); ZeRO stages the framework shards with a pipeline; and what the framework
runs (schedules, ZeRO, SP, precision, ep, etp, the micro-batches its interleaving takes:
costmodel._frameworks). search/ reuses
`feasibility` to keep its spaces to valid rows.
"""

from __future__ import annotations

import functools

import numpy as np

from costmodel._framework_rows import by_framework
from costmodel._frameworks import Framework, framework_preset
from costmodel._hardware import PRECISIONS
from costmodel._layer_compute import a2a_heads_fit, cp_by_all_to_all, cp_refused_for_window
from costmodel._pipeline_terms import SCHED
from costmodel._stages import StageView, pool_arrays, stage_view
from costmodel._workloads import Transformer

REASONS = (  # (ep_invalid appended: the codes before it keep their numbers; it is checked after tp, see reason_codes)
    "ok", "gpus_exceed_cluster", "tp_not_divide_heads", "pp_not_divide_layers", "cp_not_divide_seq", "batch_not_divide",
    "schedule_invalid", "zero_incompatible_pp", "framework_unsupported", "out_of_memory", "ep_invalid",
)
REASON = {name: i for i, name in enumerate(REASONS)}


def schedule_fits(sched, p, v, chunks_ok):
    """(N,) bool: the schedule takes vpp v on pp p: interleaved v >= 2, ZB-V v = 2, Hanayo an even
    v (2 x waves), each with p >= 2 and whole layers per chunk (``chunks_ok``); the others v = 1."""
    chunked = (v >= 2) & (p >= 2) & chunks_ok
    # (the schedules' cases are exclusive: their rules OR-ed, each under its schedule; np.select costs ten times as
    # much over a block's rows)
    is_i, is_v, is_h = (sched == SCHED[x] for x in ("interleaved", "zb-v", "hanayo"))
    fits = (is_i & chunked) | (~(is_i | is_v | is_h) & (v == 1))
    if np.any(is_v | is_h):
        fits = fits | (is_v & chunked & (v == 2)) | (is_h & chunked & (v % 2 == 0))
    return fits


def tp_divides(model: Transformer, t):
    """Tensor parallelism t splits the heads and K/V heads (an MLP: the hidden width) evenly."""
    if model.kind == "mlp":
        return model.hidden % t == 0
    return (model.heads % t == 0) & (model.kv_heads % t == 0)


def ep_fits(model: Transformer, e, ranks, u):
    """(N,) bool: ep divides the experts, etp the expert's ffn width, and ep x etp the ``ranks`` =
    tp cp dp of a stage (costmodel._experts); a dense model takes 1 and 1."""
    if not model.is_moe:
        return (e == 1) & (u == 1)
    return (model.experts % e == 0) & (model.expert_ffn % u == 0) & (ranks % (e * u) == 0)


def interleaving_runs(rule: str, schedule, p, m) -> np.ndarray:
    """(N,) bool: an interleaved row's micro-batches per step m on pp p are ones the framework's rule
    (costmodel._frameworks.INTERLEAVED_MICROBATCHES, with its sources) runs; True on other rows."""
    if rule == "any":
        return np.ones(np.shape(schedule), dtype=bool)
    if rule == "pytorch_rounds":  # (two integer divisions: on the interleaved rows alone)
        out = np.ones(np.shape(schedule), dtype=bool)
        i = np.flatnonzero(schedule == SCHED["interleaved"])
        p, m = np.maximum(np.take(p, i), 1), np.maximum(np.take(m, i), 1)
        out[i] = (m < p) | divides(np.maximum(whole_quotient(m, p), 1), m)
        return out
    # (the other rules on every row: at_least_pp's comparison there takes half the time of gathering the interleaved
    # rows and scattering back, 39 us against 80 over 40,000 bench rows)
    p, m = np.maximum(p, 1), np.maximum(m, 1)
    if rule == "pp_multiple":
        ok = m % p == 0
    elif rule == "at_least_pp":
        ok = m >= p
    else:
        raise AssertionError(rule)  # a profile's field, checked by tests/test_frameworks.py
    return ok | (schedule != SCHED["interleaved"])


def whole_quotient(m, p):
    """m // p of positive integers below 2**50 through float division (a tenth of int64's time): m / p rounds to
    float64 within half a unit in its last place, while a quotient's distance to the next integer is at least 1 / p,
    so the floor is the integer quotient's."""
    return np.floor(m / p)


def divides(p, m):
    """m % p == 0 of positive integers below 2**50 through float division (as whole_quotient): where p divides m,
    m / p is an integer, exact in float64; elsewhere at least 1 / p from one, which rounding does not close."""
    q = m / p
    return q == np.floor(q)


def one_of(x, codes) -> np.ndarray:
    """np.isin(x, codes) of integer codes, as equalities OR-ed (a few codes: a tenth of isin's time)."""
    if not len(codes):
        return np.zeros(np.shape(x), dtype=bool)
    return functools.reduce(np.logical_or, [np.equal(x, c) for c in codes])


def framework_runs(fw: Framework, schedule, zero, sequence_parallel, precision, ep=None, etp=None, pp=None,
                   m=None) -> np.ndarray:
    """(N,) bool: the framework offers the row's schedule, ZeRO stage, SP, precision, ep and etp, and (``pp``, ``m``
    given) runs its interleaving on m micro-batches a step."""
    ok = one_of(schedule, [SCHED[x] for x in fw.schedules]) & (zero <= fw.max_zero)
    if not fw.zero1:  # (FSDP: no optimizer-only sharding)
        ok &= zero != 1
    if m is not None:  # (interleaving_runs: all True under "any")
        ok &= interleaving_runs(fw.interleaved_microbatches, schedule, pp, m)
    if ep is not None and not fw.expert_parallel:
        ok &= ep == 1
    if etp is not None and not fw.expert_tensor_parallel:
        ok &= etp == 1
    if not fw.sequence_parallel:
        ok &= ~sequence_parallel
    if not fw.fp8:
        ok &= precision != PRECISIONS.index("fp8")
    if ep is not None and not fw.ep_fp16:  # (Framework.ep_fp16)
        ok &= ~((ep > 1) & (precision == PRECISIONS.index("fp16")))
    if ep is not None and pp is not None and fw.overlap_ep and fw.overlap_ep_steady_only:
        # Megatron-Core's EP A2A overlap takes virtual pipeline stages wherever there is a pipeline (core_v0.15.0
        # transformer_config.py __post_init__: "virtual_pipeline_model_parallel_size must be specified when
        # pipeline_model_parallel_size > 1")
        ok &= ~((ep > 1) & (pp > 1) & (schedule != SCHED["interleaved"]))
    return ok


# Transformer Engine's context parallelism runs sliding-window attention only over its all-to-all (and, in some
# versions, all-gather) exchange: its P2P ring asserts against a window (TransformerEngine
# pytorch/attention/dot_product_attention/context_parallel.py attn_forward_func_with_cp: "The context parallel running
# configs cannot support sliding window attetnion!"; Megatron-Bridge's gpt-oss recipe sets cp_comm_type "a2a" for cp >
# 1). A windowed model under a profile whose exchange is that ring is priced over the all-to-all
# (costmodel._layer_compute.cp_by_all_to_all), which splits the heads over cp: where heads / tp or kv_heads / tp is no
# multiple of cp the row is framework_unsupported (a2a_heads_fit). A framework whose context parallelism runs only SDPA
# (Framework.cp_sdpa_only: torchtitan) has no cp > 1 for a windowed or chunked model.


def type_partition(fw: Framework, L: int, p, j):
    """The layers DeepSpeed's type partition (Framework.type_partition) gives stage ``j`` of ``p`` from L layers,
    broadcasting with p and j: the first L mod p stages one layer more ("transformer"), or the same over L + 2 units
    less the embedding on the first stage and the head on the last ("transformer|embedding")."""
    p = np.maximum(np.asarray(p, dtype=np.int64), 1)
    if fw.type_partition == "transformer":
        base, extra = np.divmod(L, p)
        return base + (j < extra)
    base, extra = np.divmod(L + 2, p)
    return base + (j < extra) - (j == 0) - (j == p - 1)


def type_partition_refused(fw: Framework, model: Transformer, layers) -> bool:
    """Whether ``layers`` (one row's layers per stage) is not the cut the framework's DeepSpeed type partition gives
    (Framework.type_partition); False where it has none."""
    if not fw.type_partition:
        return False
    return list(layers) != type_partition(fw, model.layers, len(layers), np.arange(len(layers))).tolist()


def cp_chunks(fw: Framework) -> int:
    """Sequence chunks a cp rank holds: 2 under a load-balanced causal split (Megatron-Core's and torchtitan's: chunks r
    and 2 cp - 1 - r), so 2 cp must divide the sequence; 1 under DeepSpeed-Ulysses (Framework.cp_ulysses: each rank a
    contiguous 1 / cp, Megatron-DeepSpeed's seq_length // ds_sequence_parallel_size)."""
    return 1 if fw.cp_ulysses else 2


def ulysses_refused(fw: Framework, model: Transformer) -> bool:
    """Whether the framework's context parallelism is DeepSpeed-Ulysses (Framework.cp_ulysses) and the model is one it
    cannot split: grouped K, V heads (kv_heads < heads; Megatron-DeepSpeed's ParallelAttention asserts
    projection_size == kv_projection_size), MLA, or no attention (an MLP). Where it can, cp > 1 still needs tp 1 and
    pp 1, and the heads divisible by cp (a2a_heads_fit)."""
    return bool(fw.cp_ulysses and (model.kind == "mlp" or model.mla or model.kv_heads != model.heads))


def layout_refused(fw: Framework, model: Transformer, zero, tp, cp, ep, etp, sp, pp=1, dp=1) -> str | None:
    """The column of one row (scalars; every stage at tp) whose value the framework's layout rules refuse, or None:
    ep where its experts fold only into FSDP-sharded, CP and TP ranks (Framework.ep_in_sharded_dp), sequence_parallel
    where its tensor parallelism always shards the sequence (Framework.tp_needs_sp), zero_stage where it has no ZeRO-1
    (Framework.zero1), cp where its context parallelism is DeepSpeed-Ulysses and the row has tp or pp > 1 or the model
    is one Ulysses cannot split (ulysses_refused), ep where its experts live in data-parallel ranks only and ep does
    not divide ``dp`` and zero_stage 3 there with an MoE model (Framework.ep_in_dp); in that order. The scalar
    reference's and the CLI's form of the checks stage_feasibility makes per stage and framework_runs per row."""
    if fw.ep_in_sharded_dp and model.is_moe and zero < 2 and (tp * cp) % (ep * etp):
        return "ep"
    if fw.tp_needs_sp and tp > 1 and not sp:
        return "sequence_parallel"
    if zero == 1 and not fw.zero1:
        return "zero_stage"
    if fw.cp_ulysses and cp > 1 and (tp > 1 or pp > 1 or ulysses_refused(fw, model)):
        return "cp"
    if fw.ep_in_dp and model.is_moe and dp % ep:
        return "ep"
    if fw.ep_in_dp and model.is_moe and zero == 3:
        return "zero_stage"
    return None


def reason_codes(*, gpus_ok, tp_ok, pp_ok, batch_ok, sched_ok, cp, pp, seq_len, zero, framework,
                 schedule, sequence_parallel, precision, ep_ok=None, ep=None, etp=None, m=None,
                 cp_ok=None) -> np.ndarray:
    """(N,) int8 reason per row from the checks of both evaluators' feasibility (0 = ok; the
    first failing check in REASONS order wins). The context-parallel (cp divides the sequence
    into 2 cp chunks), ZeRO (a stage above the framework's max_zero_with_pp needs pp 1) and
    framework checks (what ``framework`` runs of schedule, ZeRO, SP and precision, and of
    interleaving on ``m`` micro-batches a step) are the same for both and made here. ``ep_ok``
    (homogeneous only): ep_fits, checked right after tp. ``cp_ok`` (None: every row): the rows whose context
    parallelism the framework runs for the model (the note above), framework_unsupported elsewhere."""
    fw = framework_preset(framework)
    fw_ok = framework_runs(fw, schedule, zero, sequence_parallel, precision, ep, etp, pp, m)
    if cp_ok is not None:
        fw_ok = fw_ok & cp_ok
    checks = [
        (gpus_ok, "gpus_exceed_cluster"),
        (tp_ok, "tp_not_divide_heads"),
        *(((ep_ok, "ep_invalid"),) if ep_ok is not None else ()),
        (pp_ok, "pp_not_divide_layers"),
        ((cp == 1) | (seq_len % (cp_chunks(fw) * cp) == 0), "cp_not_divide_seq"),
        (batch_ok, "batch_not_divide"),
        (sched_ok, "schedule_invalid"),
        ((zero <= fw.max_zero_with_pp) | (pp == 1), "zero_incompatible_pp"),
        (fw_ok, "framework_unsupported"),
    ]
    reason = np.zeros(len(np.asarray(pp)), dtype=np.int8)
    for ok, name in reversed(checks):  # where a check fails, its code: reason + (code - reason) x failed, in int8
        reason += (np.int8(REASON[name]) - reason) * np.logical_not(ok)  # (np.where: several times the time)
    return reason


def feasibility(model: Transformer, cluster, table, framework=None) -> np.ndarray:
    """Reason code per row for everything but memory (0 = ok; first failing check wins) under
    ``framework`` (costmodel._frameworks; None: the default profile): a StrategyTable, with
    placements or without, on a Cluster or a HeteroCluster (costmodel._stages)."""
    pa = pool_arrays(cluster)  # (a table with a framework column: each row under its own, costmodel._framework_rows)
    return by_framework(table, framework, lambda rows, fw: stage_feasibility(model, pa, stage_view(model, rows), fw)[0])


def stage_feasibility(model: Transformer, pa: dict, sv: StageView, fw: Framework, stage_bits=None, shift=None):
    """(reason (N,), GPUs each row puts on each pool (N, P)) of a StageView on pools ``pa``.

    Per stage, as bits reduced over the row's stages at once: its pools exist (1), tp splits the
    heads (2), whole layers, at least one (4), the batch divides into dp x micro-batches (8), v
    chunks of whole layers (16), ep x etp folds into its ranks (32; an MoE model, not across two
    pools); the pipeline's stages hold the model's layers. ``stage_bits``: bits 2, 8 and 32 where
    the caller has them per stage (from its configurations); ``shift(y)``: the GPUs each split stage moves onto pool
    y (negative: off it), where the caller has them per pair. Chunked schedules need v chunks per
    device of whole layers: where the framework splits chunks unevenly (framework.uneven_chunks:
    Megatron-Core's pipeline layouts, torchtitan's split points; Llama 3 405B's interleaved 7,
    8 x 14, 7 layers over 16 stages) every stage needs at least v layers, a stage that v does not
    divide getting chunks one layer apart, and under the interleaved schedule the first stage and the last
    v - 1: the model's first chunk may hold the embedding alone and its last the output layer and loss alone
    (Megatron-Core's --pipeline-model-parallel-layout 'E' and 'L' chunks, --account-for-embedding/loss-in-pipeline-
    split; torchtitan's module_fqns_per_model_part); the closed forms and the simulator take each chunk as
    1/v of its stage's time (exact when v divides the stage, else within a layer's time per
    chunk). Otherwise v must divide every stage's layers."""
    r = sv.rows
    p, c, v, B = r["pp"], r["cp"], r["vpp"], r["global_batch"]
    L, P = model.layers, pa["num_gpus"].size
    on = sv.j < p  # (k, N) stages of the pipeline (padding past pp is not)
    d, t, n = sv.dp, sv.tp, sv.layers
    e, u = r["ep"], r["etp"]
    gpus = d * t * c
    if stage_bits is None:
        tps, at = np.unique(t, return_inverse=True)  # a lookup per distinct tp value
        stage_bits = (~tp_divides(model, np.maximum(tps, 1))[at.reshape(t.shape)] * np.uint8(2)
                      | (B % sv.batch_div != 0) * np.uint8(8))
        if model.is_moe:
            stage_bits = stage_bits | ~ep_fits(model, e, gpus, u) * np.uint8(32)
    bits = stage_bits | (n < 1) * np.uint8(4)
    ks, rows, pool2, dp2 = sv.split or (np.zeros(0, dtype=np.int64),) * 4  # (stages split across two pools)
    if over := sv.pool.max(initial=0) >= P or pool2.max(initial=0) >= P:
        bits = bits | (sv.pool >= P) * np.uint8(1)
        bits.reshape(-1)[ks] |= (pool2 >= P) * np.uint8(1)
    if model.is_moe and ks.size:  # a stage split across two pools: its expert groups would span both
        bits.reshape(-1)[ks] |= np.uint8(32)
    if np.any(v > 1):  # chunks matter to chunked schedules only (v >= 2)
        if fw.uneven_chunks:  # interleaved: the first chunk may hold the embedding alone, the last the output and loss
            ends = ((sv.j == 0) | (sv.j == p - 1)) & (r["schedule"] == SCHED["interleaved"])
            bits = bits | (n < v - ends) * np.uint8(16)
        else:
            bits = bits | (n % v != 0) * np.uint8(16)
    every = bool(on.all()) and not np.any(sv.comp)  # every column a stage of its row, weights 1
    weigh = (lambda a: a) if every else (lambda a: sv.w * a)  # noqa: E731
    flags = bits[0] if bits.shape[0] == 1 else np.bitwise_or.reduce(bits if every else bits * on.astype(np.uint8), 0)
    wsum = np.full(len(p), sv.w.shape[0]) if every else sv.stages_held()  # stages in the pipeline
    in_range = (lambda x: np.minimum(x, P - 1)) if over else (lambda x: x)  # noqa: E731  (counted on the last)
    pool = in_range(sv.pool)  # a pool out of range fails bit 1
    if P == 1 and gpus.shape[0] == 1:
        used = (wsum * gpus[0])[:, None]
    else:  # GPUs per pool: the stages' own pools, split stages' replicas on their second pools moved there
        total = np.sum(g := weigh(gpus), axis=0)
        on_pool = [np.sum(g * (pool if P == 2 else pool == y), axis=0) for y in range(1, P)]  # (P == 2: pool == 1)
        if ks.size:
            if shift is None:
                moved = np.take(np.broadcast_to(t, bits.shape), ks) * np.take(c, rows) * dp2  # (dp2 x tp x cp GPUs)
                to, fro = in_range(pool2), np.take(pool, ks)
                shift = lambda y: moved * ((to == y).astype(np.int64) - (fro == y))  # noqa: E731
            for y in range(1, P):
                on_pool[y - 1] += np.bincount(rows, shift(y), len(p)).astype(np.int64)
        per_pool = [total - sum(on_pool), *on_pool]
        used = np.stack(per_pool, axis=1)
    if P == 1:
        gpus_ok = (flags & 1 == 0) & np.all(used <= pa["num_gpus"], axis=1)
    else:  # pool by pool (N,): an all over axis 1 of (N, P) costs several times as much
        gpus_ok = flags & 1 == 0
        for q, x in enumerate(per_pool):
            gpus_ok &= x <= pa["num_gpus"][q]
    held = wsum * n[0] if n.shape[0] == 1 else np.sum(weigh(n), axis=0)
    pp_ok = (held == L) & (flags & 4 == 0)
    if not (every or np.all(sv.comp)):  # stages past pp hold no layers
        pp_ok &= (held == n.sum(axis=0))
    ep_ok = flags & 32 == 0 if model.is_moe else ep_fits(model, e, 1, u)
    cp_ok = None  # Transformer Engine's all-to-all: every stage's heads over cp (the note above reason_codes)
    if cp_by_all_to_all(fw, model):
        cp_ok = ~np.any(~a2a_heads_fit(model, t, c) & on, axis=0)
    if cp_refused_for_window(fw, model):  # (Framework.cp_sdpa_only: no cp > 1 for a windowed model)
        no_cp = ~np.any((c > 1) & on, axis=0)
        cp_ok = no_cp if cp_ok is None else cp_ok & no_cp
    if fw.tp_needs_sp:  # (Framework.tp_needs_sp: no stage at tp > 1 without sequence parallelism)
        sp_ok = r["sequence_parallel"] | ~np.any((t > 1) & on, axis=0)
        cp_ok = sp_ok if cp_ok is None else cp_ok & sp_ok
    if fw.cp_ulysses:  # (Framework.cp_ulysses: cp > 1 only at tp 1 and pp 1, on a model Ulysses splits)
        u_ok = (c == 1) | ((p == 1) & ~np.any((t > 1) & on, axis=0) & (not ulysses_refused(fw, model)))
        cp_ok = u_ok if cp_ok is None else cp_ok & u_ok
    if fw.type_partition:  # (Framework.type_partition: the stage cuts DeepSpeed's PipelineModule makes)
        cut = type_partition(fw, L, p, sv.j)  # (a representative stage: its index in the pipeline)
        cut_ok = np.all((n == cut) | ~on, axis=0)
        cp_ok = cut_ok if cp_ok is None else cp_ok & cut_ok
    if fw.ep_in_dp and model.is_moe:  # (Framework.ep_in_dp: experts in data-parallel ranks only, no ZeRO-3)
        dp_ok = (r["zero_stage"] != 3) & ~np.any((d % e != 0) & on, axis=0)
        cp_ok = dp_ok if cp_ok is None else cp_ok & dp_ok
    if fw.ep_in_sharded_dp and model.is_moe:  # (Framework.ep_in_sharded_dp: DDP replicas hold no experts)
        fold_ok = (r["zero_stage"] >= 2) | ~np.any(((t * c) % (e * u) != 0) & on, axis=0)
        cp_ok = fold_ok if cp_ok is None else cp_ok & fold_ok
    reason = reason_codes(gpus_ok=gpus_ok, tp_ok=flags & 2 == 0, pp_ok=pp_ok, batch_ok=flags & 8 == 0,
                          sched_ok=schedule_fits(r["schedule"], p, v, flags & 16 == 0), cp=c, pp=p,
                          seq_len=model.seq_len, zero=r["zero_stage"], framework=fw, schedule=r["schedule"],
                          sequence_parallel=r["sequence_parallel"], precision=r["precision"], ep_ok=ep_ok, ep=e, etp=u,
                          m=r["m"], cp_ok=cp_ok)
    return reason, used
