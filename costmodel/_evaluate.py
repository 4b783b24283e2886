"""The vectorised evaluator: (model, cluster, StrategyTable) -> Metrics, no loop over rows.

Step = pipeline (costmodel._pipeline_terms) + exposed data-parallel exchange + optimizer step
(costmodel._data_parallel); memory per GPU from the worst stage (costmodel._memory_terms). The rows
go through costmodel._block in cache-sized blocks (BLOCK_ROWS; placements by pipeline depth,
PLACEMENT_ENTRIES), closed forms first and the rows the simulator must price after (run_blocks).
Where each term is priced:
    costmodel._layer_compute   one layer's GEMMs, attention, element-wise and tp / cp comm; embedding, head
    costmodel._experts         mixture-of-experts layers and their all-to-alls
    costmodel._collectives     ring collectives, all-to-all, the link a group uses
    costmodel._layer_terms     a layer's terms under the framework profile; F, B, W per layer
    costmodel._memory_terms    activations, model state under ZeRO, buffers
    costmodel._pipeline_terms  the bubble, the bottleneck stage, micro-batches in flight, the simulator
    costmodel._data_parallel   the gradient exchange, ZeRO's all-gathers, the optimizer step
    costmodel._feasibility     reason codes
    costmodel._metrics         the metric columns
stage_breakdown and stage_rows give one row's stages for people to read.
"""

from __future__ import annotations

import ctypes
import os

import numpy as np

from costmodel._block import evaluate_block
from costmodel._distinct import BlockMemo
from costmodel._framework_rows import by_framework, framework_groups
from costmodel._frameworks import Framework, with_state_dtypes
from costmodel._layer_terms import refuse_modules
from costmodel._metrics import METRIC_COLUMNS, Metrics
from costmodel._pipeline_terms import PIPELINE_MODES, outside_closed_form
from costmodel._stages import microbatches, moe_block_view, pool_arrays, stage_view, unpaired_by_stage
from costmodel._strategy import StrategyTable
from costmodel._workloads import Transformer

# Rows per block: a block's float64 temporaries stay in cache (1.6x faster per row than whole 1M-row columns on
# these machines) while its fixed costs (about 9 ms a block: the configurations, the distinct exchanges, a few
# hundred numpy calls) are shared by enough rows: 32k rows took 0.90x the CPU of 16k rows and 65k rows 1.02x of 32k
# (600,000 bench rows, three evaluations a process, six processes each, alternating; BENCHMARKS.md, "Cost core").
BLOCK_ROWS = 32768


def _keep_freed_memory() -> None:
    """glibc's malloc at a fixed 32 MiB mmap threshold: with its default, dynamic one, the megabytes a placement
    evaluation frees go back to the system at its end and are faulted in again by the next (a fifth of its time
    at 200,000 rows; BENCHMARKS.md, "Mixed clusters"). And a trim threshold of 256 MiB (TRIM_THRESHOLD): fixing the
    mmap threshold leaves the trim threshold at its 128 KiB default, so that the free memory at the heap's top (a
    block's temporaries, once freed; an evaluation's columns, once dropped) went back to the system after nearly
    every numpy operation and was faulted in again by the next one or the next block: 14,000 page faults and 40%
    of the CPU time of an evaluation of 200,000 bench rows, none with it (BENCHMARKS.md, "Cost core"). The process
    keeps up to that much freed memory: its peak is unchanged, it is not given back between evaluations. Not where
    MALLOC_MMAP_THRESHOLD_ (the trim threshold: MALLOC_TRIM_THRESHOLD_) is set, nor with PLANSWEEP_MALLOPT=0;
    nothing where the C library is not glibc."""
    if os.environ.get("PLANSWEEP_MALLOPT") == "0":
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
            libc.mallopt(-3, 32 << 20)  # (-3: M_MMAP_THRESHOLD)
        if "MALLOC_TRIM_THRESHOLD_" not in os.environ:
            libc.mallopt(-1, TRIM_THRESHOLD)  # (-1: M_TRIM_THRESHOLD)
    except (OSError, AttributeError):
        pass


# Free bytes at the heap's top that glibc keeps rather than gives back (M_TRIM_THRESHOLD; _keep_freed_memory): more
# than an evaluation of 1,000,000 bench rows frees at its end (its metric columns, about 200 MB), so that the next
# one faults nothing in (64 MiB: 14,000 page faults an evaluation of 1,000,000 rows, none at 200,000).
TRIM_THRESHOLD = 256 << 20


_keep_freed_memory()


def evaluate(model: Transformer, cluster, table, *, pipeline: str = "closed_form",
             framework: str | Framework | None = None, state_dtypes: dict | None = None) -> Metrics:
    """Evaluate every row of ``table``: time and its parts, throughput, MFU, memory, feasibility.

    ``table``: a StrategyTable, with row degrees or with placements (per-stage pools and degrees);
    ``cluster``: a Cluster (one pool) or a HeteroCluster. Pure and vectorised: numpy over the
    rows and their stages (costmodel._stages), in cache-sized blocks of rows; no Python loop
    over strategies. Infeasible rows stay, with feasible=False, a reason code (REASONS) and
    infinite step time.

    ``pipeline``: "closed_form" (default, for bulk screening: the closed forms of the module
    docstring, exact for uniform stages without hand-off time, within a few percent
    otherwise) or "simulate" (pipeline time and micro-batches in flight from the schedule
    simulator, exact for every schedule, uneven stages and hand-off time; grouped by
    (schedule, pp, micro-batches, vpp), costlier for deep pipelines with many micro-batches).
    ZB-V and Hanayo rows are always simulated.

    ``framework``: a profile of costmodel._frameworks (or its name; None: DEFAULT_FRAMEWORK,
    "megatron-core"): what it can run, what it overlaps, how it shards with a pipeline, whether
    its attention kernel stores the s x s scores. A table with a ``framework`` column prices each
    row under its own profile: the rows of each framework present as one call, results in row
    order (costmodel._framework_rows); ``framework``, if given, must then be every row's.

    ``state_dtypes``: the dtypes every row keeps its gradients and optimizer state in, as
    costmodel._frameworks.with_state_dtypes takes them ({"grad": "bf16", "moments": "bf16"}),
    applied to each row's profile; None or {}: the profiles' own.
    """
    if pipeline not in PIPELINE_MODES:
        raise ValueError(f"pipeline must be one of {PIPELINE_MODES}, got {pipeline!r}")
    if len(table) == 0:
        framework_groups(table, framework)  # (a name that is no profile is refused all the same)
        return Metrics({k: np.zeros(0, dtype=bool if k == "feasible" else np.int8 if k == "reason"
                                    else np.int64 if k == "microbatches" else np.float64) for k in METRIC_COLUMNS})
    return by_framework(table, framework, lambda rows, fw: _evaluate_one(
        model, cluster, rows, pipeline, with_state_dtypes(fw, **state_dtypes) if state_dtypes else fw))


def _evaluate_one(model: Transformer, cluster, table: StrategyTable, pipeline: str, fw: Framework) -> Metrics:
    """evaluate() of a non-empty table whose rows are priced under one profile ``fw``."""
    refuse_modules(fw, model, table)
    pa = pool_arrays(cluster)
    order, cuts, depths = None, (), None
    if table.placed and len(table) > BLOCK_ROWS:
        # placements by pipeline depth, so that a block's stage columns are its rows' stages, rows with a stage
        # split across pools after the others (a block without one skips pool2 / dp2: without any, not gathered)
        dp2 = table.stages.raw("dp2")  # (S, N), a stage row at a time; dp2 >= 0
        split = np.logical_or.reduce(dp2 > 0, axis=0)
        pp, layers = table["pp"], table.stages.raw("layers")
        deep = np.zeros(len(table), dtype=bool)  # rows holding layers past their pp (refused): every stage column
        for i in range(int(pp.min()), len(layers)):
            deep |= (layers[i] > 0) & (pp <= i)
        key = 2 * np.where(deep, len(layers), pp) + split
        order = np.argsort(key.astype(np.int16) if key.max() < 2**15 else key, kind="stable")  # int16: a radix sort
        cuts = np.flatnonzero(np.diff(key[order])) + 1  # blocks of one depth, all with or all without a split
        depths = (key[order[np.r_[0, cuts]]] // 2).tolist()  # (a block's stage columns: to its depth)
        if not split.any():
            table = StrategyTable(table.columns, table.stages.without("pool2", "dp2"))
    # (an MoE model's blocks that the simulator may price: every stage; the others the runs of alike stages)
    # (every stage of a block where its interior stages differ by their index: unpaired_by_stage)
    view = ((lambda model, sub, now: stage_view(model, sub, unpaired_by_stage(fw, model, sub))) if table.placed
            else (lambda model, sub, now: moe_block_view(model, sub, now, unpaired_by_stage(fw, model, sub))))
    memo = BlockMemo() if len(table) > BLOCK_ROWS else None  # (what a block prices that the next ones read again)
    # rows of one dense model's uniform stages, closed forms: those the simulator must price can join the last block
    fold = (may_simulate if pipeline == "closed_form" and not table.placed and table.stage_layers is None
            and not model.is_moe else None)
    return run_blocks(table, lambda sub, now: evaluate_block(model, pa, view(model, sub, now), pipeline,
                                                              simulate_now=now, framework=fw, memo=memo),
                      microbatches, order, cuts, depths, fold)


def may_simulate(table: StrategyTable) -> np.ndarray:
    """(N,) bool: rows the simulator may price under the closed forms (a superset of outside_closed_form's: ZB-V,
    Hanayo, interleaving on fewer micro-batches than pp, the zero-bubble schedules whatever their stage times)."""
    # outside_closed_form with every zero-bubble row's weight gradient past its forward (W = inf): all of them
    return outside_closed_form(table["schedule"], table["pp"], microbatches(table), 0.0, 0.0, np.inf)


# Placements (a block of one pipeline depth q, q stage columns): blocks of PLACEMENT_ENTRIES / q rows, at least
# BLOCK_ROWS and at most 4 BLOCK_ROWS (each up to 1.25x of it, even ones per group): fewer blocks amortise the
# per-block work (the configurations, a few thousand a block whatever its rows, and the block's fixed costs);
# pp 8 rows of 32,768, pp 4 of 65,536 (2% faster placements than 24,576 and 32,768, in-process CPU time,
# BENCHMARKS.md, "Mixed clusters").
PLACEMENT_ENTRIES = 8 * 32768


def run_blocks(table, block, microbatches, order=None, cuts=(), depths=None, may_simulate=None) -> Metrics:
    """The rows of ``table`` through ``block(sub_table, simulate_now)`` in cache-sized blocks of consecutive rows of
    ``order`` (None: of the table), even ones per group between ``cuts`` (``depths``: each group's pipeline depth,
    its blocks' rows from PLACEMENT_ENTRIES; None: BLOCK_ROWS), each block's results written to its rows.
    Pass 1: closed forms only, rows the simulator must price flagged in ``_needs_simulation``;
    pass 2: those rows sorted by (schedule, pp, ``microbatches(sub_table)``, vpp), written back. With
    ``may_simulate`` (a superset of those rows, per sub-table): the earlier blocks' such rows priced in the last block
    instead (_last_block), where they and the last block's fit one block."""
    N = len(table)
    if N <= BLOCK_ROWS:
        out = block(table, True)
        out.pop("_needs_simulation")
        return out
    out = None
    ends = [0, *cuts, N]
    per = ([BLOCK_ROWS] * (len(ends) - 1) if depths is None else
           [min(4 * BLOCK_ROWS, max(BLOCK_ROWS, PLACEMENT_ENTRIES // max(q, 1))) for q in depths])
    starts, widths = zip(*((int(x), q) for a, b, rows, q in zip(ends[:-1], ends[1:], per, depths or per, strict=True)
                           for x in np.linspace(a, b, -(-(b - a) * 4 // (5 * rows)) + 1)[:-1]),  # (<= 1.25x its rows)
                         strict=True)
    spans = list(zip(starts, [*starts[1:], N], widths, strict=True))
    fold = may_simulate is not None and order is None and len(spans) > 1
    for i, e, width in spans[:-1] if fold else spans:
        part = block(table.take(slice(i, e)) if order is None else table.take(order[i:e], width), False)
        out = out or Metrics({k: np.empty(N, dtype=col.dtype) for k, col in part.items()})
        for k, col in part.items():
            out[k][i:e] = col  # (in ``order``, then gathered back: faster than a scatter per block)
    if fold:
        _last_block(table, block, out, spans[-1][:2], may_simulate)
    if order is not None:
        back = np.empty_like(order)
        back[order] = np.arange(N)
        for k, col in list(out.items()):
            out[k] = np.take(col, back)
    need = np.flatnonzero(out.pop("_needs_simulation"))
    if need.size:
        sub = table.take(need)
        order = np.lexsort((sub["vpp"], microbatches(sub), sub["pp"], sub["schedule"]))
        rows = need[order]
        sub = sub.take(order)
        for i in range(0, len(rows), BLOCK_ROWS):
            part = block(sub.take(slice(i, i + BLOCK_ROWS)), True)
            part.pop("_needs_simulation")
            for k, col in part.items():
                out[k][rows[i:i + BLOCK_ROWS]] = col
    return out


def _last_block(table, block, out: Metrics, span, may_simulate) -> None:
    """The last block of rows ``span`` (i, e) into ``out``, with the earlier blocks' rows that the simulator must
    price (out["_needs_simulation"]) where every row it may price (may_simulate) fits one block: those rows priced with
    the simulator in this block (one simulate_pipelines call on the rows the second pass would give it whole, in
    another order, which it does not read), rather than in a block of their own."""
    i, e = span
    last = table.take(slice(i, e))
    need = np.flatnonzero(out["_needs_simulation"][:i])
    if not need.size or need.size + np.count_nonzero(may_simulate(last)) > BLOCK_ROWS:
        part = block(last, False)
        for k, col in part.items():
            out[k][i:e] = col
        return
    part = block(StrategyTable.concat([table.take(need), last]), True)  # (a copy of the slice: 2x faster than a take)
    for k, col in part.items():
        out[k][need], out[k][i:e] = col[:need.size], col[need.size:]


def stage_breakdown(model: Transformer, cluster, table, framework=None) -> dict[str, np.ndarray]:
    """Per pipeline stage, for a few rows (people's view, not the hot path): (N, S) arrays of pool
    index, dp, tp, layers, micro-batch per replica, F / B / W time per micro-batch, busy time per
    iteration (m x (F + B + W)), hand-off to the next stage, data-parallel exchange, micro-batches
    in flight at the peak (from the simulator), memory per GPU and its pool's HBM, and ``active``
    (the stage exists). Uniform rows without placements are expanded to every stage."""
    if not table.placed and table.stage_layers is None:
        S = int(table["pp"].max())
        layers = np.where(np.arange(S)[None, :] < table["pp"][:, None], (model.layers // table["pp"])[:, None], 0)
        table = StrategyTable(table.columns, {**table.stages, "layers": layers})
    pa = pool_arrays(cluster)

    def priced(rows, fw):
        sv = stage_view(model, rows, unpaired_by_stage(fw, model, rows))
        out = evaluate_block(model, pa, sv, "simulate", simulate_now=True, stages_out=True, framework=fw)
        st = {k[len("_stage_"):]: v for k, v in out.items() if k.startswith("_stage_")}
        return every_stage(st, np.asarray(sv.comp, dtype=bool), rows["pp"])

    return by_framework(table, framework, priced)


# What a stage column past a row's pp holds (the stage does not exist).
_ABSENT = {"pool": -1, "pool2": -1, "dp": 1, "tp": 1, "active": False}


def every_stage(st: dict[str, np.ndarray], comp: np.ndarray, pp: np.ndarray) -> dict[str, np.ndarray]:
    """(N, S) per-stage arrays -> (N, max(S, pp)): a row priced through three representatives of its alike stages
    (``comp``: first, interior, last, as costmodel._pipeline_terms.simulate_pipelines maps devices) gets every
    stage, stage 0 from the first, pp - 1 from the last, the others from the interior one."""
    if not comp.any():
        return st
    n, s = st["active"].shape
    width = max(s, int(pp.max()))
    d = np.arange(width)[None, :]
    col = np.where(d == 0, 0, np.where(d == pp[:, None] - 1, 2, 1))  # (N, width) for comp rows
    col = np.where(comp[:, None], col, np.minimum(d, s - 1))
    live = np.where(comp[:, None], d < pp[:, None], d < s)
    out = {}
    for k, a in st.items():
        got = np.take_along_axis(a, col, axis=1)
        out[k] = np.where(live, got, _ABSENT.get(k, 0)).astype(a.dtype)
    out["active"] = np.where(comp[:, None], d < pp[:, None], np.where(d < s, out["active"], False))
    return out


def stage_rows(model: Transformer, cluster, table, i: int = 0, framework=None) -> list[dict]:
    """Row i's stages as a list of plain dicts (pool name, dp, tp, layers, time_s, mem_bytes,
    ...): what `plansweep evaluate` and `show` print per stage."""
    from costmodel._hetero_cluster import as_hetero

    hc = as_hetero(cluster)
    st = stage_breakdown(model, hc, table.take(slice(i, i + 1)), framework)
    names = [p.name for p in hc.pools]
    rows = []
    for j in range(int(st["active"][0].sum())):
        p1, p2, d2 = int(st["pool"][0, j]), int(st["pool2"][0, j]), int(st["dp2"][0, j])
        split = {"pool2": names[p2], "gpu2": hc.pools[p2].gpu.name, "dp2": d2} if d2 else {}
        rows.append({"stage": j, "pool": names[p1], "gpu": hc.pools[p1].gpu.name, **split,
                     "dp": int(st["dp"][0, j]), "tp": int(st["tp"][0, j]), "layers": int(st["layers"][0, j]),
                     **{k: float(st[k][0, j]) for k in ("micro_batch", "forward_s", "backward_s", "weight_grad_s",
                                                        "time_s", "handoff_s", "dp_comm_s", "in_flight",
                                                        "mem_bytes", "hbm_bytes")}})
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
