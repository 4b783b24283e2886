"""A block's rows and its distinct stage configurations: what the block driver (costmodel._block) prices once.

A block of N rows holds its stages as (k, N) arrays (costmodel._stages.StageView; (1, N) where a row's stages share
a value). Everything that depends only on a stage's configuration (pool, rank order, tp, recompute, the shape key of
the view and the row's cp, SP, precision, ep, etp; dp, micro-batches and ZeRO where the view keys them) is priced
once per distinct configuration, U of them (a few dozen to a few thousand per block), and gathered back to the
stages through ``inv``. A stage split across two pools (its replicas on a second pool, HetPipe-style) is one record
of its own, SplitPairs: per distinct (configuration, second pool, replicas there) a pair, and the pair's
configuration on its second pool, so that a phase reads a split stage's two sides through ``pair`` and ``inv_q``.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from costmodel._data_parallel import framework_columns, hp_grad_rows, pp_grad_accum_rows
from costmodel._distinct import distinct_rows
from costmodel._experts import moe_layers_in
from costmodel._feasibility import ep_fits, tp_divides
from costmodel._frameworks import Framework
from costmodel._hardware import PRECISIONS
from costmodel._stages import StageView
from costmodel._workloads import Transformer


@dataclasses.dataclass(frozen=True)
class Rows:
    """A block's row columns (N,), its stage arrays ((k, N), or (1, N) where a row's stages share a value) and the
    masks every phase reads. ``zero`` and ``overlap`` as the framework prices them (framework_columns)."""

    model: Transformer
    fw: Framework
    pa: dict  # the pools' arrays (costmodel._stages.pool_arrays)
    sv: StageView
    p: np.ndarray  # pp
    m: np.ndarray  # micro-batches per iteration
    B: np.ndarray  # global batch
    c: np.ndarray  # cp
    v: np.ndarray  # vpp
    sched: np.ndarray
    sp: np.ndarray  # sequence parallelism
    prec: np.ndarray
    zero: np.ndarray
    overlap: np.ndarray
    e: np.ndarray  # ep
    u: np.ndarray  # etp
    N: int
    P: int  # pools
    moe: bool
    all_moe: bool  # no dense layer: the dense terms are not needed
    j: np.ndarray  # the stage's index in its pipeline
    d: np.ndarray  # dp
    t: np.ndarray  # tp
    rc: np.ndarray  # recompute code
    rcm: np.ndarray | None  # (N,) recompute_modules bit sets, read where rc is selective (None: the framework's policy)
    n: np.ndarray  # layers (float)
    pool: np.ndarray  # pool (clipped to the pools there are: one out of range fails feasibility)
    first: np.ndarray
    last: np.ndarray
    on: np.ndarray  # a stage of its row's pipeline (not padding)
    full: np.ndarray
    sel: np.ndarray
    every: bool  # every column a stage of its row (a block of pipelines alike deep): no masks
    real: bool  # every column a stage (comp: a weight-0 column repeats one): maxima unmasked
    wt: np.ndarray | None  # stage weights in sums (None: all 1)
    on_f: np.ndarray | None  # ``on`` as floats (None where every column is a stage)
    n_m: np.ndarray | None  # MoE layers per stage (an MoE model)
    n_d: np.ndarray | None  # dense layers per stage (an MoE model)
    dense_first: bool  # the dense layers all on the first stage row of (k, N) stages (layer_mix adds them there)
    memo: object = None  # the evaluation's costmodel._distinct.BlockMemo (None: each block prices its own)

    def weigh(self, a):
        """a weighted by the stages each column stands for."""
        return a if self.wt is None else self.wt * a

    def row_max(self, a):
        """(N,) each row's largest stage entry of a >= 0 (k, N)."""
        return np.max(a if self.real else a * self.on_f, axis=0)

    @functools.cached_property
    def dp_group(self):
        """(first, inv): distinct_rows of the stages' (dp, tp, cp, rank order, pool), the data-parallel group's layout
        (a few dozen in a block: the exchange and its SM share read it), worked out once a block."""
        return distinct_rows(self.d, self.t, self.c, self.sv.order, self.pool)

    def per_dp_group(self, fn):
        """fn(dp, tp, cp, order, pool) of each stage, priced once per distinct data-parallel group layout (dp_group)
        and gathered back ((1, N) or (k, N)); fn elementwise."""
        first, inv = self.dp_group
        return np.take(fn(*self.at_first(first, inv, self.d, self.t, self.c, self.sv.order, self.pool)), inv)

    def at_first(self, first, inv, *cols):
        """Columns (N,), (1, N) or (k, N) at the entries ``first`` of a distinct_rows answer (flat indices into
        ``inv``'s shape): a column alike on a row's stages at its row's entry."""
        row_first = None
        out = []
        for x in cols:
            if np.size(x) == inv.size:
                out.append(np.take(x, first))
            else:
                row_first = first % self.N if row_first is None else row_first
                out.append(np.take(x, row_first))
        return out


def block_rows(model: Transformer, pa: dict, sv: StageView, fw: Framework, memo=None) -> Rows:
    """The Rows record of a StageView on pools ``pa`` under framework ``fw`` (``memo``: the evaluation's BlockMemo)."""
    r = sv.rows
    p, rc = r["pp"], sv.recompute
    zero, overlap = framework_columns(fw, p, r["zero_stage"], r["overlap_dp"])
    P = pa["num_gpus"].size
    moe = model.is_moe
    all_moe = moe and model.moe_layers == model.layers
    n = sv.layers.astype(np.float64)
    on = sv.w > 0
    every = bool(on.all())
    n_m = n_d = None
    dense_first = False
    if moe:  # MoE layers of each stage, layers [lo, lo + n)
        n_m = n if all_moe else moe_layers_in(model, sv.lo, sv.layers)
        n_d = n - n_m
        dense_first = not all_moe and n_d.shape[0] > 1 and np.shape(n_m) == n_d.shape and not n_d[1:].any()
    return Rows(model=model, fw=fw, pa=pa, sv=sv, p=p, m=r["m"], B=r["global_batch"], c=r["cp"], v=r["vpp"],
                sched=r["schedule"], sp=r["sequence_parallel"], prec=r["precision"], zero=zero, overlap=overlap,
                e=r["ep"], u=r["etp"], N=len(p), P=P, moe=moe, all_moe=all_moe, j=sv.j, d=sv.dp, t=sv.tp, rc=rc,
                rcm=r.get("recompute_modules"), n=n,
                pool=np.minimum(sv.pool, P - 1), first=sv.j == 0, last=sv.j == p - 1, on=on, full=rc == 2,
                sel=rc == 1, every=every, real=every or bool(np.all(sv.comp)),
                wt=None if every and not np.any(sv.comp) else sv.w.astype(np.float64),
                on_f=None if every else on.astype(np.float64), n_m=n_m, n_d=n_d, dense_first=dense_first, memo=memo)


@dataclasses.dataclass(frozen=True)
class SplitPairs:
    """Stages split across two pools: per distinct (configuration, second pool, replicas there) a pair (a few
    thousand a block at most), each pair's configuration on its first pool (A) and on its second (B)."""

    ks: np.ndarray  # flat indices into (k, N) of the split stages
    pool_ks: np.ndarray  # their second pools (clipped)
    dp2_ks: np.ndarray  # their replicas there
    ia: np.ndarray  # each split stage's configuration (on pool A)
    inv_p: np.ndarray  # each split stage's pair
    ia_p: np.ndarray  # each pair's configuration on pool A
    ib_p: np.ndarray  # each pair's configuration on pool B (among the block's, or past them)
    r2: np.ndarray  # each pair's replicas on pool B
    xa: np.ndarray  # each pair's pools
    xb: np.ndarray
    ga_a: np.ndarray  # each pair's GPUs on pool A, on pool B
    ga_b: np.ndarray
    inv_q: np.ndarray  # each stage's entry of a pair() array: its configuration, or U + its pair

    def shift(self, y):
        """The GPUs each split stage moves onto pool y (negative: off it), for stage_feasibility."""
        return np.take(self.ga_b * ((self.xb == y).astype(np.int64) - (self.xa == y)), self.inv_p)


@dataclasses.dataclass(frozen=True)
class Configs:
    """The block's distinct stage configurations: ``inv`` (1, N) or (k, N) -> configuration, and the (U,) columns
    of each (``of`` gathers any row or stage array at them). ``inv`` is the one array a phase changes: for a dense
    model whose stages split across pools, stage_times points each split stage at its slower pool's configuration,
    in place (what reads ``inv`` after it, memory and the hand-off bytes, is alike on both pools)."""

    keyed: bool  # dp, micro-batches and batch are parts of a configuration
    one_per_row: bool  # one configuration per row: every stage of a row alike
    ep_key: np.ndarray | None  # (ep, etp) as one code (an MoE model)
    hp_key: np.ndarray | None  # fp32 gradient accumulation per micro-batch: 1 bf16 optimizer's, 2 FSDP's with pp
    shape_k: tuple  # the keys of a configuration's shape terms (besides its pool)
    src: np.ndarray  # a flat (k, N) entry of each configuration
    src_row: np.ndarray  # its row
    inv: np.ndarray
    pool_u: np.ndarray
    order_u: np.ndarray
    t_u: np.ndarray
    rc_u: np.ndarray
    rcm_u: np.ndarray | None  # recompute_modules bit sets (None: none named in the block)
    c_u: np.ndarray
    sp_u: np.ndarray
    prec_u: np.ndarray
    d_u: np.ndarray
    b_u: np.ndarray  # sequences per micro-batch on one replica
    ga_u: np.ndarray  # a configuration's GPUs on its pool
    zero_u: np.ndarray | None  # (keyed only)
    e_u: np.ndarray | None  # ep, etp (an MoE model)
    u_u: np.ndarray | None
    peak: np.ndarray  # a configuration's FLOP/s at its precision
    bits: np.ndarray | None  # stage_feasibility's bits 2, 8 and 32 per stage (keyed only)
    split: SplitPairs | None

    def of(self, x):
        """A row (N,) or stage ((1, N), (k, N)) array's value per configuration (U,)."""
        return x.reshape(-1)[self.src] if np.ndim(x) == 2 and len(x) > 1 else np.ravel(x)[self.src_row]

    def pair(self, u, v):
        """Values per configuration ``u`` and, past them, per split stage's pair ``v`` (read through inv_q)."""
        return u if self.split is None else np.concatenate([u, v])


def configurations(rows: Rows) -> Configs:
    """The distinct configurations of a block's stages, and the pairs of its split stages."""
    model, sv, N = rows.model, rows.sv, rows.N
    t, pool, zero, prec = rows.t, rows.pool, rows.zero, rows.prec
    col = lambda x: np.asarray(x)[None, :]  # noqa: E731  (N,) -> (1, N)
    keyed = any(x is sv.dp for x in sv.key)
    # (MoE: ep and etp as one dense code, so that the key's range stays small: ep's values, up to
    # 64, would otherwise multiply it by 65 and send distinct_rows to np.unique's sort)
    ep_key = col(distinct_rows(rows.e, rows.u)[1]) if rows.moe else None
    # 1: the bf16 optimizer's fp32 accumulation (hp_grad_bytes), 2: FSDP's unsharded one with a pipeline, 0: none
    hp_key = (col(grad_accumulation_codes(rows.fw, zero, rows.p, prec))
              if (rows.fw.hp_grad_bytes or rows.fw.pp_grad_accum_bytes) and not rows.moe else None)
    shape_k = (*sv.key, col(rows.c), col(rows.sp), col(prec), *((ep_key,) if rows.moe else ()),
               *(() if hp_key is None else (hp_key,)), *(() if rows.rcm is None else (col(rows.rcm),)), sv.order, t)
    # (the shape terms read shape_k and the pool; memory reads ZeRO)
    keys = [*shape_k, *((col(zero),) if keyed else ()), pool, rows.rc]
    E = np.broadcast_shapes(*(x.shape for x in keys))
    if E[0] > 1:  # the values alike on a row's stages first, as one row code (a smaller key)
        per_row = [x[0] for x in keys if x.shape[0] == 1]
        keys = [distinct_rows(*per_row)[1][None, :], *(x for x in keys if x.shape[0] > 1 or x is pool)]
    src, inv = distinct_rows(*keys)  # (src: an entry of each configuration)
    pairs = None
    if sv.split is not None:
        pairs, src = _split_pairs(rows, keys, next(i for i, x in enumerate(keys) if x is pool), src, inv)
    src_row = src % N  # (once: ``of`` reads row columns at it a dozen times)
    of = lambda x: x.reshape(-1)[src] if np.ndim(x) == 2 and len(x) > 1 else np.ravel(x)[src_row]  # noqa: E731
    pool_u = of(pool)
    if pairs is not None and pairs["new_pools"] is not None:  # (a configuration first met on a second pool)
        pool_u[-len(pairs["new_pools"]):] = pairs["new_pools"]
    order_u, t_u, rc_u, c_u, sp_u, prec_u, d_u = (of(x) for x in (sv.order, t, rows.rc, rows.c, rows.sp, prec, rows.d))
    b_u = of(rows.B) / (d_u * of(rows.m)) if sv.b is None else of(sv.b)
    e_u, u_u = (of(rows.e), of(rows.u)) if rows.moe else (None, None)
    bits = np.take(~tp_divides(model, t_u) * np.uint8(2) | (of(rows.B) % (d_u * of(rows.m)) != 0) * np.uint8(8)
                   | (~ep_fits(model, of(rows.e), d_u * t_u * c_u, of(rows.u)) * np.uint8(32) if rows.moe else 0),
                   inv) if keyed else None  # (np.take: faster than indexing)
    split = None
    if pairs is not None:  # what reads a split stage's replicas on each pool (GPUs, links, peak) per pair
        ia_p, ib_p, r2 = pairs["ia_p"], pairs["ib_p"], pairs["r2"]
        np.put(inv_q := inv.copy(), pairs["ks"], len(src) + pairs["inv_p"])
        tc = t_u[ia_p] * c_u[ia_p]
        split = SplitPairs(ks=pairs["ks"], pool_ks=pairs["pool_ks"], dp2_ks=pairs["dp2_ks"], ia=pairs["ia"],
                           inv_p=pairs["inv_p"], ia_p=ia_p, ib_p=ib_p, r2=r2, xa=pool_u[ia_p], xb=pool_u[ib_p],
                           ga_a=(d_u[ia_p] - r2) * tc, ga_b=r2 * tc, inv_q=inv_q)
    return Configs(keyed=keyed, one_per_row=E[0] == 1, ep_key=ep_key, hp_key=hp_key, shape_k=shape_k, src=src,
                   src_row=src_row, inv=inv, pool_u=pool_u, order_u=order_u, t_u=t_u, rc_u=rc_u,
                   rcm_u=None if rows.rcm is None else of(rows.rcm), c_u=c_u, sp_u=sp_u,
                   prec_u=prec_u, d_u=d_u, b_u=b_u, ga_u=d_u * t_u * c_u, zero_u=of(zero) if keyed else None,
                   e_u=e_u, u_u=u_u, peak=rows.pa["peak"][pool_u, prec_u], bits=bits, split=split)


def grad_accumulation_codes(fw: Framework, zero, p, prec):
    """(N,) uint8 per row: 1 where ``fw``'s bf16 optimizer adds each micro-batch's gradients into fp32 ones
    (hp_grad_rows, bf16 rows, hp_grad_bytes > 0), else 2 where FSDP adds them into unsharded fp32 ones with a pipeline
    (pp_grad_accum_rows), else 0."""
    accum = pp_grad_accum_rows(fw, zero, p)
    if not fw.hp_grad_bytes > 0:  # (no code 1: the codes 2 x accum)
        return accum.astype(np.uint8) * np.uint8(2)
    return np.where(hp_grad_rows(fw, zero, p) & (prec == PRECISIONS.index("bf16")), 1,
                    np.where(accum, 2, 0)).astype(np.uint8)


def _split_pairs(rows: Rows, keys: list, ip: int, src, inv) -> tuple[dict, np.ndarray]:
    """The pairs of a block's split stages (SplitPairs' fields known before the configurations' columns) and the
    configurations' entries ``src``, extended by each pair's configuration on its second pool that no stage of the
    block has (``new_pools``: their pools; None if none). ``keys``: the configurations' key columns, the pool's at
    ``ip``. A pair whose second pool holds no replicas reads its time, memory and dp group from its first."""
    N, P = rows.N, rows.P
    ks, _, pool_ks, dp2_ks = rows.sv.split
    pool_ks, ia = np.minimum(pool_ks, P - 1), np.take(inv, ks)
    pairs, inv_p = distinct_rows(ia, pool_ks, dp2_ks)
    ia_p, x2, r2 = ia[pairs], pool_ks[pairs], dp2_ks[pairs]
    at_u = lambda x: x.reshape(-1)[src] if x.shape[0] > 1 else x[0][src % N]  # noqa: E731
    rest = distinct_rows(*(at_u(x) for i, x in enumerate(keys) if i != ip))[1]  # each's key less the pool
    np.put(lut := np.full((int(rest.max()) + 1) * P, -1), rest * P + at_u(keys[ip]), np.arange(len(src)))
    ib_p = np.take(lut, np.take(rest, ia_p) * P + x2)
    new_pools = None
    if (new := np.flatnonzero(ib_p < 0)).size:
        first_b, inv_b = distinct_rows(np.take(rest, ia_p[new]), x2[new])
        ib_p[new], src = len(src) + inv_b, np.concatenate([src, ks[pairs[new[first_b]]]])
        new_pools = x2[new[first_b]]
    return {"ks": ks, "pool_ks": pool_ks, "dp2_ks": dp2_ks, "ia": ia, "inv_p": inv_p, "ia_p": ia_p, "ib_p": ib_p,
            "r2": r2, "new_pools": new_pools}, src
