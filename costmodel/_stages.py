"""What the one evaluator block (costmodel._block) reads of a strategy table: its stages.

A row is a pipeline of stages; each stage has a pool (of the cluster's GPU pools; a homogeneous
cluster is one pool), data- and tensor-parallel degrees, a rank order, layers and a recompute
choice, and may be split across two pools (dp2 of its replicas on pool2). A StageView holds
them as (k, N) arrays, k stage columns of N strategies (stage-major: sums and maxima over a
row's stages reduce over the first axis, which numpy does at the speed of an element-wise
operation, where an (N, k) layout costs ten to thirty times as much for k of 3 to 16), and the
row columns as (N,) arrays. Stage values that are the same on every stage of a row (a
table's row dp, tp, pool 0) are (1, N) and broadcast, so the block computes them once per row.

Two kinds of StrategyTable rows give views:
    without placements (row dp, tp, micro-batch; strategy_view): uniform rows as three
        representative stages, first, one interior (weight pp - 2) and last (``comp``); explicit
        stage_layers as every stage; one pool, Megatron's rank order.
    with placements (per-stage pool, dp, tp, layers, order, pool2 / dp2; micro-batches per row;
        placement_view): every stage, padded past pp (pool 0, dp 1, tp 1, no layers; weight 0);
        a block whose rows' stages are all alike as three representatives.

Links. A group of ``size`` ranks at ``stride`` inside a stage's GPUs (ORDERS in
costmodel._strategy) is priced on the slowest link it crosses (group_link):
    span = stride * size divides gpus_per_node    -> the pool's intra-node link
    stride a multiple of gpus_per_node            -> one rank per node: the network only
    otherwise                                     -> both: min(intra, network), max latency
On a cluster whose intra-node link is at least as fast as its network this is the homogeneous
rule (costmodel._collectives.tier: inside a node, else the network); where the network is faster
(PCIe nodes on a 400 Gb/s network) a group that crosses node boundaries also crosses the slower
intra-node link, and waits for it. The data-parallel exchange's NCCL collectives read the same
layout through collective_group_link: a group whose layout tiles whole nodes with g of its ranks on
each moves its inter-node bytes over those g ranks' NICs at once (costmodel._collectives).

Pipeline hand-offs. Boundary i -> i + 1 moves the larger of the two per-GPU activation shares
(micro-batch re-sharding when dp_i != dp_{i+1}, see costmodel._strategy) over: the link
between the two pools when they differ; within a pool, the intra-node link if the row's GPUs on
that pool fit in one node, else the network (or the slower of both when the sender's block is
not a whole number of nodes).

Stages split across two pools (dp2 of the dp replicas on pool2). Every replica holds b_i
sequences per micro-batch, so the stage runs at its slower pool's replica (F, B, W of that
pool's configuration, and its embedding / head on an end stage). Its gradient ring spans both
pools and runs at the slowest tier it crosses: each pool's part of the dp group and the
inter-pool link. Its hand-off is the slower of the pairings pool -> next stage's pool and
pool2 -> next stage's pool2 (HetPipe's virtual workers). Memory is checked against the smaller
HBM, the optimizer runs at the slower HBM. An MoE model's split stage is refused (ep_invalid):
its expert groups would cross the inter-pool link, which is not priced.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from costmodel._codes import SCHEDULES
from costmodel._hardware import ATTENTION_KERNELS, attention_kernel_eff, attention_noncausal_gain
from costmodel._hetero_cluster import HeteroCluster, as_hetero
from costmodel._nccl import ll_one_node_Bps, ring_channel_table
from costmodel._sms import streaming_multiprocessors
from costmodel._strategy import StrategyTable
from costmodel._workloads import Transformer

GPU_FIELDS = ("gemm_eff_max", "gemm_half_dim", "hbm_eff", "hbm_Bps", "hbm_bytes", "link_eff", "kernel_overhead_s")
_POOL_FIELDS = ("intra_Bps", "inter_Bps", "intra_latency_s", "inter_latency_s", "num_gpus")


@dataclasses.dataclass(frozen=True)
class StageView:
    """N rows' stages (module docstring), stage-major: an array has a row per stage column and a
    column per strategy, so that numpy's inner loops run over the N strategies. Row columns (N,):
    pp, m (micro-batches), global_batch, cp, vpp, schedule, zero_stage, sequence_parallel,
    overlap_dp, precision, ep, etp. Stage arrays (k, N): j (the stage's index in its pipeline),
    w (stages the column stands for in sums; 0 on padding), lo (the stage's first layer; None: dense placements); (1, N)
    or (k, N): layers, recompute, pool, order, dp, tp, b (sequences per micro-batch on one
    replica; None: global_batch / batch_div, per configuration), batch_div (the global batch must
    be a multiple of it); ``key``: the stage arrays besides pool, order, tp and recompute that set
    a configuration's shape terms; split: (ks, rows, pool2, dp2), the flat indices into (k, N) of
    the stages split across two pools, their rows, second pools and replicas there (None: no split); comp
    (N,): the k = 3 stage rows are representatives of uniform stages."""

    rows: dict
    j: np.ndarray
    layers: np.ndarray
    w: np.ndarray
    lo: np.ndarray | None
    recompute: np.ndarray
    pool: np.ndarray
    order: np.ndarray
    dp: np.ndarray
    tp: np.ndarray
    b: np.ndarray
    batch_div: np.ndarray
    key: tuple
    comp: np.ndarray
    split: tuple | None = None
    stages: np.ndarray | None = None  # (N,) each row's pipeline stages, sum(w) over its columns (None: not known)
    layers_of_pp: bool = False  # layers (1, N) a function of pp (the model's layers // pp); False: not known

    def stages_held(self):
        """(N,) sum(w) over a row's stage columns: its pipeline's stages (pp for three representatives)."""
        return np.sum(self.w, axis=0) if self.stages is None else self.stages


def _rows(c, m) -> dict:
    names = ("pp", "global_batch", "cp", "vpp", "schedule", "zero_stage", "sequence_parallel", "overlap_dp",
             "precision", "ep", "etp")
    modules = c.get("recompute_modules")  # (optional: only where some row names modules)
    return {**{k: c[k] for k in names}, "m": m, **({"recompute_modules": modules} if modules is not None
                                                    and modules.any() else {})}


def moe_stages_alike(model: Transformer, p):
    """(N,) bool: uniform stages whose interior stages hold the same MoE layers (what the three
    representative stages assume): pp <= 3, or the dense layers all on stage 0 and
    moe_layer_freq dividing the layers per stage; and pipelines whose depth does not divide the
    layers (infeasible rows, pp_not_divide_layers, priced on three representative stages)."""
    p = np.asarray(p)
    if model.dense_layers == 0 and model.moe_layer_freq == 1:  # every layer an MoE layer: any stages alike
        return np.ones(p.shape, dtype=bool)
    lookup = p.size > 64 and 0 < p.min() and p.max() <= 4096  # one entry per pipeline depth: integer divisions are slow
    q = np.arange(1, int(p.max()) + 1) if lookup else p
    n = model.layers // q
    alike = (q <= 3) | (n * q != model.layers) | ((model.dense_layers <= n) & (n % model.moe_layer_freq == 0))
    return alike[p - 1] if lookup else alike


def _moe_rows_unlike(model: Transformer, table: StrategyTable):
    """(N,) moe_stages_alike of a table's uniform rows, or None where three representative stages
    stand for every row (a dense model, explicit stage_layers, or every row alike)."""
    if not model.is_moe or table.stage_layers is not None:
        return None
    alike = moe_stages_alike(model, table["pp"])
    return None if np.all(alike) else alike


def moe_explicit_stages(model: Transformer, table: StrategyTable, force: bool = False) -> StrategyTable:
    """``table`` with explicit stage_layers (L / pp each) where uniform stages of an MoE model do
    not hold alike MoE layers (moe_stages_alike): the three representative stages would not
    stand for the interior ones; with ``force``, wherever its stages are uniform (stages that
    differ by more than their layers: unpaired_by_stage). Unchanged otherwise (every dense model)."""
    if not model.is_moe or table.stage_layers is not None or (not force and _moe_rows_unlike(model, table) is None):
        return table
    p = table["pp"]
    layers = np.where(np.arange(int(p.max()))[None, :] < p[:, None], (model.layers // p)[:, None], 0)
    return StrategyTable(table.columns, {**table.stages, "layers": layers})


def moe_run_stages(model: Transformer, p):
    """(k, N) stage index and weight of representatives of uniform stages (L // p layers each) of
    an MoE model whose stages may hold unlike MoE layers: the first stage, the first of each run of
    interior stages holding as many MoE layers (weight: the run's length; the run's busiest for
    memory, as micro-batches in flight fall along the pipeline), and the last in the last column;
    rows with fewer runs padded before it with stage 0 at weight 0. Alike stages give the three
    representative stages (representative_stages). Worked out once per distinct pp, then gathered."""
    present = np.zeros(int(p.max()) + 1, dtype=bool)
    present[p] = True
    ps = np.flatnonzero(present)  # (D,) the distinct pipeline depths
    n = model.layers // ps
    jj = np.arange(int(ps[-1]))[:, None]  # (S, 1)
    n_m = model.moe_layers_before((jj + 1) * n) - model.moe_layers_before(jj * n)  # (S, D)
    last = jj == ps - 1
    start = (jj >= 1) & (jj < ps - 1) & ((jj == 1) | (n_m != np.roll(n_m, 1, axis=0)))
    pick = start | (jj == 0) | last
    k = int(pick.sum(axis=0).max())
    after = np.minimum.accumulate(np.where(pick, jj, jj.size)[::-1], axis=0)[::-1]  # the first pick at or after j
    weight = np.where(last, 1, np.concatenate([after[1:], np.full((1, len(ps)), jj.size)]) - jj)
    col = np.where(last, k - 1, np.cumsum(pick, axis=0) - 1)
    j_d, w_d = np.zeros((k, len(ps)), dtype=np.int64), np.zeros((k, len(ps)), dtype=np.int64)
    at = (col[pick], np.broadcast_to(np.arange(len(ps)), pick.shape)[pick])
    j_d[at] = np.broadcast_to(jj, pick.shape)[pick]
    w_d[at] = weight[pick]
    row = (np.cumsum(present) - 1)[p]  # each row's depth among ps
    # (np.take: C-ordered, where j_d[:, row] is Fortran-ordered and reductions over its stages ~50x slower)
    return np.take(j_d, row, axis=1), np.take(w_d, row, axis=1)


def three_representatives(p):
    """(N, 3) stage index and weight of uniform stages of pipelines of depth ``p`` represented by
    three: stages 0, 1 and p - 1 (the first, the busiest interior one for memory, the last),
    weighted 1, p - 2, 1 in sums over stages (a stage listed twice counts once)."""
    idx, w = stage_major_representatives(p)
    return idx.T, w.T


def stage_major_representatives(p):
    """three_representatives' (stage index, weight) as (3, N) stage-major arrays, written row by row (no stack,
    transpose and copy): stages 0, min(1, p - 1), p - 1 weighted 1, max(p - 2, 0) and p >= 2 (the interior weight is
    0 wherever stage 1 is the last, p <= 2, which max(p - 2, 0) already gives)."""
    idx, w = np.empty((3, len(p)), dtype=p.dtype), np.empty((3, len(p)), dtype=p.dtype)
    idx[0], w[0] = 0, 1
    np.minimum(p - 1, 1, out=idx[1])
    np.subtract(p, 1, out=idx[2])
    np.maximum(p - 2, 0, out=w[1])
    w[2] = p >= 2
    return idx, w


def representative_stages(table: StrategyTable, L: int):
    """Stage layout of a StrategyTable as (N, k) arrays: stage index, layers ((N, 1) for uniform
    stages), recompute code ((N, 1) unless given per stage), weight in sums. Uniform stages are
    three_representatives; explicit per-stage layer counts, or a recompute given per stage, use every stage (L // pp
    layers each where only the recompute is given)."""
    p, rc = table["pp"], table["recompute"]
    if table.stage_layers is None and table.stage_recompute is not None:
        S = table.stage_recompute.shape[1]
        idx = np.broadcast_to(np.arange(S)[None, :], table.stage_recompute.shape)
        w = (idx < p[:, None]).astype(np.int64)
        n = np.where(w > 0, (L // np.maximum(p, 1))[:, None], 0)
        rcs = table.stage_recompute
    elif table.stage_layers is None:
        idx, w = three_representatives(p)  # (N, 3)
        n = (L // p)[:, None]  # (N, 1): every stage alike
        rcs = rc[:, None]
    else:
        S = table.stage_layers.shape[1]
        idx = np.broadcast_to(np.arange(S)[None, :], table.stage_layers.shape)
        n = table.stage_layers
        w = (idx < p[:, None]).astype(np.int64)
        rcs = rc[:, None] if table.stage_recompute is None else table.stage_recompute[:, :S]
    return idx, n, rcs, w


def strategy_view(model: Transformer, table: StrategyTable) -> StageView:
    """The stages of a StrategyTable (after moe_explicit_stages): one pool, Megatron's order."""
    c = table.columns
    d, t, b, B = c["dp"], c["tp"], c["micro_batch"], c["global_batch"]
    row = lambda x: np.asarray(x)[None, :]  # noqa: E731
    explicit = "layers" in table.stages or "recompute" in table.stages  # (a recompute per stage: every stage too)
    if explicit:  # every stage, read stage-major as stored (representative_stages' explicit layout, transposed)
        S = table.num_stages
        j = np.ascontiguousarray(np.broadcast_to(np.arange(S)[:, None], (S, len(d))))
        w = (j < c["pp"][None, :]).astype(np.int64)
        n = (table.stages.major("layers", S) if "layers" in table.stages  # (else uniform: L // pp a stage)
             else np.where(w > 0, (model.layers // np.maximum(c["pp"], 1))[None, :], 0))
        rcs = table.stages.major("recompute", S) if "recompute" in table.stages else row(c["recompute"])
        lo = np.cumsum(n, axis=0) - n
    else:  # three representatives (representative_stages' uniform layout), built stage-major
        p = c["pp"]
        j, w = stage_major_representatives(p)
        n, rcs = row(model.layers // p), row(c["recompute"])
        lo = j * n
    zeros = np.zeros((1, len(d)), dtype=np.int64)
    return StageView(rows=_rows(c, np.maximum(B // (d * b), 1)), j=j, layers=n, w=w, lo=lo,
                     recompute=rcs, pool=zeros, order=zeros, dp=row(d), tp=row(t), b=row(b).astype(np.float64),
                     batch_div=row(d * b), key=(row(b),), comp=np.full(len(d), not explicit),
                     stages=None if explicit else c["pp"],  # (three representatives: 1 + max(p - 2, 0) + (p >= 2))
                     layers_of_pp=not explicit)


def moe_block_view(model: Transformer, table: StrategyTable, explicit: bool, stagewise: bool = False) -> StageView:
    """strategy_view of a block of rows; where an MoE model's uniform stages do not all hold alike
    MoE layers (moe_stages_alike), every stage (``explicit``: moe_explicit_stages, as the simulator
    takes them) or the runs of alike stages (moe_run_stages, for the closed forms only: its rows are
    ``comp`` with k >= 3 columns, and the simulator maps a comp row's devices to three). Every stage
    too where ``stagewise``: stages whose times differ with their index, not only with their layers
    (unpaired_by_stage)."""
    if stagewise:
        return strategy_view(model, moe_explicit_stages(model, table, force=True))
    if _moe_rows_unlike(model, table) is None:
        return strategy_view(model, table)
    if explicit:
        return strategy_view(model, moe_explicit_stages(model, table))
    sv = strategy_view(model, table)  # uniform: layers, recompute, dp, tp (1, N)
    j, w = moe_run_stages(model, table["pp"])
    return dataclasses.replace(sv, j=j, w=w, lo=j * sv.layers, stages=None)


def unpaired_by_stage(fw, model: Transformer, table: StrategyTable) -> bool:
    """Whether some row's interior pipeline stages differ by their index beyond their layers, so that three
    representative stages cannot stand for them: under Megatron-Core's EP A2A overlap in the steady state only
    (Framework.overlap_ep_steady_only) an interleaved stage j runs (p - j - 1) 2 + ... of its passes unpaired
    (costmodel._experts.unpaired_share), a share that falls along the pipeline; rows of an MoE model, interleaved,
    with an interior stage that is not the only one (pp >= 4)."""
    if not (model.is_moe and fw.overlap_ep and fw.overlap_ep_steady_only) or not len(table):
        return False
    return bool(np.any((table["schedule"] == SCHEDULES.index("interleaved")) & (table["pp"] >= 4)))


def placement_view(table: StrategyTable, model: Transformer | None = None, stagewise: bool = False) -> StageView:
    """The stages of a table with placements: every stage to the block's deepest pipeline, padded past pp; or,
    where every row's stages are alike (and, for an MoE ``model``, hold alike MoE layers; not ``stagewise``:
    unpaired_by_stage), three representatives as uniform rows without placements."""
    c, N = table.columns, len(table)
    S = max(int(c["pp"].max()), 1) if N else table.num_stages  # the columns past every row's pp: not needed,
    stages = table.stages
    if np.any(stages.raw("layers")[S:]):  # unless they hold layers (those rows are refused)
        S = table.num_stages
    split = "dp2" in stages and np.any(stages.raw("dp2")[:S])  # (no split: pool2 and dp2 not read)
    m, B = c["microbatches"][None, :], c["global_batch"][None, :]
    idx = np.broadcast_to(np.arange(S)[:, None], (S, N))
    on = idx < c["pp"][None, :]  # (k, N) the stages of the pipeline
    if not split and not stagewise:  # (the stored int8 / int16 arrays compared: only an alike block's first row)
        alike = [stages.raw(k)[:S] for k in ("layers", "pool", "dp", "tp", "order", "recompute") if k in stages]
        if N and (model is None or not model.is_moe or np.all(moe_stages_alike(model, c["pp"]))) and all(
                np.all((a[:q] == a[:1]) | ~on[:q]) for q in (2, S) for a in alike) and (  # all alike, and no
                c["pp"].min() == S or np.all(on | (alike[0] == 0))):  # layers past pp: 3 representatives
            j, w = stage_major_representatives(c["pp"])  # (3, N)
            one = {k: stages.major(k, 1) for k in ("layers", "pool", "dp", "tp", "order")}
            rc1 = stages.major("recompute", 1) if "recompute" in stages else c["recompute"][None, :]
            return StageView(rows=_rows(c, c["microbatches"]), j=j, layers=one["layers"], w=w, lo=j * one["layers"],
                             recompute=rc1, pool=one["pool"], order=one["order"], dp=one["dp"], tp=one["tp"],
                             b=B / (one["dp"] * m), batch_div=one["dp"] * m,
                             key=(B - B.min(), one["dp"] * m), comp=np.ones(N, dtype=bool), stages=c["pp"])
    st = {k: stages.major(k, S) for k in stages if k not in ("recompute", "pool2", "dp2")}
    layers, d = st["layers"], st["dp"]
    rcs = stages.major("recompute", S) if "recompute" in stages else c["recompute"][None, :]
    if split:  # the stages in the pipeline with replicas on another pool (read from the stored arrays)
        d2, p2 = stages.raw("dp2")[:S], stages.raw("pool2")[:S]
        ks = np.flatnonzero((d2 > 0) & (p2 != stages.raw("pool")[:S]) & on)  # (none: replicas on their own pool)
        split = ks.size and (ks, ks % N, p2.reshape(-1)[ks].astype(np.int64), d2.reshape(-1)[ks].astype(np.int64))
    w = np.broadcast_to(1, (S, N)) if N and c["pp"].min() == S else on.astype(np.int64)
    return StageView(rows=_rows(c, c["microbatches"]), j=idx, layers=layers, w=w,  # (pipelines of one depth: w all 1)
                     lo=None if model is not None and not model.is_moe else np.cumsum(layers, axis=0) - layers,
                     recompute=rcs, pool=st["pool"], order=st["order"], dp=d, tp=st["tp"], b=None,
                     batch_div=d * m, key=(m, B - (B.min() if N else 0), d), comp=np.zeros(N, dtype=bool),
                     split=split or None)


def stage_view(model: Transformer, table: StrategyTable, stagewise: bool = False) -> StageView:
    if table.placed:
        return placement_view(table, model, stagewise)
    return strategy_view(model, moe_explicit_stages(model, table, force=True) if stagewise else table)


def microbatches(table: StrategyTable) -> np.ndarray:
    """(N,) micro-batches per iteration of every row."""
    if table.placed:
        return table["microbatches"]
    return table["global_batch"] // (table["dp"] * table["micro_batch"])


@functools.lru_cache(maxsize=64)
def _pool_arrays(cluster: HeteroCluster) -> dict[str, np.ndarray]:
    pools = cluster.pools
    out = {f: np.array([getattr(p.gpu, f) for p in pools], dtype=np.float64) for f in GPU_FIELDS}
    for f in _POOL_FIELDS:
        out[f] = np.array([getattr(p, f) for p in pools], dtype=np.float64)
    peaks = np.array([p.gpu.peak_flops for p in pools], dtype=np.float64)  # (P, 3)
    out["peak"] = np.where(peaks > 0, peaks, peaks[:, :1])  # a GPU without fp8 runs it as bf16
    out["attn_eff"] = np.array([[attention_kernel_eff(p.gpu.name, k) for k in ATTENTION_KERNELS] for p in pools])
    out["attn_nc"] = np.array([[attention_noncausal_gain(p.gpu.name, k) for k in ATTENTION_KERNELS] for p in pools])
    out["gpu_names"] = np.array([p.gpu.name for p in pools])  # (attention_head_dim_factor's, per model)
    out["sms"] = np.array([streaming_multiprocessors(p.gpu.name) for p in pools], dtype=np.float64)
    out["ll_node_Bps"] = np.array([ll_one_node_Bps(p.gpu.name) for p in pools], dtype=np.float64)  # NCCL's LL ceiling
    out["ring_channels"] = np.array([ring_channel_table(p.gpu.name) for p in pools], dtype=np.float64)  # (P, 2)
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
    for a in out.values():
        a.flags.writeable = False
    return out


def pool_arrays(cluster) -> dict[str, np.ndarray]:
    """(P,) arrays of every pool attribute the evaluator needs, (P, 3) peaks and the hand-off
    link table, for a HeteroCluster or a Cluster (one pool); cached per cluster."""
    return _pool_arrays(as_hetero(cluster))


def group_link(stride, size, G, up_bw, out_bw, up_lat, out_lat, eff):
    """(bandwidth, latency) of a group of ``size`` ranks at ``stride``: the slowest link it
    crosses (module docstring). All arguments broadcast; stride, size and G integers."""
    span = stride * size
    inside = (span <= G) & (np.mod(G, span) == 0)  # else some group of the layout crosses a node boundary
    per_node = np.mod(stride, G) == 0
    bw = np.where(inside, up_bw, np.where(per_node, out_bw, np.minimum(up_bw, out_bw))) * eff
    lat = np.where(inside, up_lat, np.where(per_node, out_lat, np.maximum(up_lat, out_lat)))
    return bw, lat


def group_layout(stride, size, G):
    """(inside, per_node, tiled, g) of groups of ``size`` ranks at ``stride`` on nodes of ``G`` GPUs, as
    collective_group_link reads them: inside one node; one rank per node (the stride a multiple of G); tiled, g = G /
    stride ranks on each node spanned (stride divides G, the span a multiple of G); g the group's ranks on a node
    (size inside a node, 1 one rank per node or across node boundaries unevenly). All arguments broadcast."""
    span = stride * size
    inside = (span <= G) & (np.mod(G, span) == 0)
    per_node = np.mod(stride, G) == 0
    tiled = ~inside & ~per_node & (np.mod(G, stride) == 0) & (np.mod(span, G) == 0)
    g = np.where(inside, size, np.where(tiled, G // np.maximum(stride, 1), 1))
    return inside, per_node, tiled, g


def collective_group_link(stride, size, G, up_bw, out_bw, up_lat, out_lat, eff):
    """(bandwidth, latency inside a node, latency across nodes, nodes spanned, ranks per node) of an NCCL collective
    over groups of ``size`` ranks at ``stride`` (costmodel._collectives module docstring), the layout as group_link
    reads it:
        inside a node                         -> the intra-node link, size ranks on 1 node
        stride a multiple of gpus_per_node    -> one rank per node: the network, size nodes
        g = G / stride ranks on each of size / g nodes (stride divides G, the span a multiple of G)
                                              -> min(g x network, g / (g - 1) x intra-node link)
        otherwise (groups across node boundaries unevenly) -> group_link's min(intra, network) and its latency on
                                                 every step, as one rank per node
    All arguments broadcast; stride, size and G integers."""
    inside, per_node, tiled, g = group_layout(stride, size, G)
    gf = g.astype(np.float64)
    node_bw = np.minimum(gf * out_bw, gf / np.maximum(gf - 1.0, 1.0) * up_bw)
    bw = np.where(inside, up_bw, np.where(per_node, out_bw, np.where(tiled, node_bw, np.minimum(up_bw, out_bw)))) * eff
    odd = ~inside & ~per_node & ~tiled
    lat_up = np.where(odd, np.maximum(up_lat, out_lat), up_lat)
    lat_out = np.where(odd, np.maximum(up_lat, out_lat), np.where(inside, up_lat, out_lat))
    return bw, lat_up, lat_out, size // g, g
