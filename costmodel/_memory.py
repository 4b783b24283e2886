"""Memory-only screening: does a strategy fit in HBM, without pricing its time.

``memory_screen(model, cluster, table)`` gives, per row, the bytes per GPU of its worst stage
(weights, gradients, optimizer state, activations, buffers) and a reason code (costmodel's
REASONS: the structural checks of ``feasibility`` and ``out_of_memory``), the same numbers as
``costmodel.evaluate``'s ``mem_total_bytes`` and ``reason`` for the closed-form pipeline (the
default), from the same terms (costmodel._memory_terms.stage_memory, the one memory formula), but without the step's
times: no GEMM roofline per row, no communication, no pipeline fill. Searchers use it to find
which points of a space fit before they spend evaluations (search._screen).

Micro-batches in flight: the closed form (``in_flight``) where the schedule's shape is inside
the closed forms' domain, else the schedule's peak (costmodel._pipeline.schedule_peaks), a
function of (schedule, pp, micro-batches, vpp) alone. ZB-H1/H2 with m >= pp are the one case
where evaluate's choice also reads the stage times (T_W > min(T_F, T_B) sends a row to the
simulator); there the closed form equals the graph's peak (tests/test_search_screen.py checks
the equality on whole spaces), so the choice does not change the bytes. Interleaved rows take
the closed form whatever m (with Megatron-LM's group size it equals the op order's peak).
"""

from __future__ import annotations

import numpy as np

from costmodel._data_parallel import framework_columns
from costmodel._distinct import distinct_rows, unique_rows
from costmodel._experts import expert_groups, moe_stage_layers
from costmodel._feasibility import REASON, feasibility
from costmodel._framework_rows import by_framework
from costmodel._hardware import Cluster
from costmodel._layer_terms import framework_terms, refuse_modules, shape_terms
from costmodel._memory_terms import grad_kwargs, stage_memory
from costmodel._pipeline_terms import SCHED, SIMULATED_SCHEDULES, extra_warmup_chunks, in_flight, with_extra_chunk
from costmodel._stages import moe_explicit_stages, representative_stages
from costmodel._strategy import SCHEDULES, StrategyTable
from costmodel._workloads import Transformer

# Rows per block of the screen (cache-sized temporaries): costmodel._evaluate's earlier block size; evaluate's
# went to 32,768 rows for its fixed costs a block, which the screen (no exchange, no pipeline) has fewer of.
SCREEN_BLOCK_ROWS = 16384


def memory_screen(model: Transformer, cluster: Cluster, table: StrategyTable,
                  framework=None) -> tuple[np.ndarray, np.ndarray]:
    """(mem_total_bytes (N,) float64, reason (N,) int8) of every row under ``framework``
    (costmodel._frameworks; a table with a framework column: each row under its own); see the module docstring."""
    return by_framework(table, framework, lambda rows, fw: _screen(model, cluster, rows, fw))


def _screen(model: Transformer, cluster: Cluster, table: StrategyTable, fw) -> tuple[np.ndarray, np.ndarray]:
    """memory_screen of rows priced under one profile ``fw``."""
    refuse_modules(fw, model, table)
    table = moe_explicit_stages(model, table)
    N = len(table)
    mem = np.empty(N, dtype=np.float64)
    reason = np.empty(N, dtype=np.int8)
    for lo in range(0, N, SCREEN_BLOCK_ROWS):
        sub = table.take(slice(lo, lo + SCREEN_BLOCK_ROWS)) if N > SCREEN_BLOCK_ROWS else table
        mem[lo:lo + len(sub)], reason[lo:lo + len(sub)] = _screen_block(model, cluster, sub, fw)
    return mem, reason


def _graph_peaks(sched, p, m, v, idx) -> np.ndarray:
    """(N, k) micro-batches in flight from the op graphs of rows outside the closed forms'
    domain by shape (ZB-V, Hanayo, ZB-H1/H2 with m < pp); NaN for the other rows. Interleaved
    rows are not among them, whatever m: in_flight's count (Megatron-LM's warm-up with its group
    size N) equals the op order's peak for every m, m < pp included (p 2-8, v 2-4, m 1..3p:
    tests/test_pipeline_closed_form_domain.py),
    though the simulator prices the time of those with m < pp."""
    from costmodel._pipeline import schedule_peaks

    zb = (sched == SCHED["zb-h1"]) | (sched == SCHED["zb-h2"])
    graph = np.isin(sched, [SCHED[x] for x in SIMULATED_SCHEDULES]) | (zb & (m < p))
    out = np.full(idx.shape, np.nan)
    q = np.flatnonzero(graph)
    if not q.size:
        return out
    shapes, gid = unique_rows(np.stack([sched[q], p[q], m[q], v[q]], axis=1))  # (shapes, 4), (len(q),)
    width = int(p[q].max())
    peaks = np.zeros((len(shapes), width))
    for g, (code, pg, mg, vg) in enumerate(shapes):
        peaks[g, :pg] = schedule_peaks(SCHEDULES[int(code)], int(pg), int(mg), int(vg))
    out[q] = peaks[gid[:, None], np.minimum(idx[q], (p[q] - 1)[:, None])]
    return out


def _screen_block(model: Transformer, cluster: Cluster, table: StrategyTable, fw):
    gpu = cluster.gpu
    L = model.layers
    d, t, p, c = table["dp"], table["tp"], table["pp"], table["cp"]
    b, B, v = table["micro_batch"], table["global_batch"], table["vpp"]
    sched, zero, sp = table["schedule"], table["zero_stage"], table["sequence_parallel"]
    peak = np.asarray(gpu.peak_flops)[table["precision"]]
    peak = np.where(peak > 0, peak, gpu.peak_flops[0])
    reason = feasibility(model, cluster, table, fw)
    zero, _ = framework_columns(fw, p, zero, table["overlap_dp"])
    m = np.maximum(B // (d * b), 1)
    col = lambda x: np.asarray(x, dtype=np.float64)[:, None]  # noqa: E731  (N,) -> (N, 1)
    # Activation bytes per layer and the embedding / head activations: per distinct micro-batch
    # shape (a few dozen per block), as evaluate computes them.
    moe = model.is_moe
    e, edp, u = expert_groups(table) if moe else (None, None, None)
    rcm = table.columns.get("recompute_modules")  # (optional: Megatron-Core's named recompute modules)
    rcm = rcm if rcm is not None and rcm.any() else None
    first_row, inv = distinct_rows(b, t, c, sp, table["precision"], *((e, u) if moe else ()),
                                   *(() if rcm is None else (rcm,)))
    f_t, f_sp = t[first_row], sp[first_row]
    terms = shape_terms(model, cluster, b[first_row], f_t, c[first_row], f_sp, peak[first_row],
                        moe=(e[first_row], u[first_row], fw, table["precision"][first_row]) if moe else None,
                        xent_peak_bytes=fw.xent_peak_bytes)
    sh = {k: x[inv] for k, x in framework_terms(fw, model, terms, f_t, f_sp, table["precision"][first_row],
                                                None if rcm is None else rcm[first_row]).items()
          if k in ("T", "act_L", "score_L", "sel_kept", "sel_work", "emb_act", "head_act", "moe_act_L",
                   "moe_sel_kept", "moe_sel_work")}
    idx, n, rcs, wt = representative_stages(table, L)
    first, last = idx == 0, idx == (p - 1)[:, None]
    full, sel = rcs == 2, rcs == 1
    extra = extra_warmup_chunks(fw, model)
    k = in_flight(col(sched), col(p), col(m), col(v), idx, extra=extra)
    ok = reason == 0
    graph = _graph_peaks(np.where(ok, sched, SCHED["1f1b"]), p, m, v, idx)
    k = np.where(np.isnan(graph), k, with_extra_chunk(graph, col(sched), col(m), col(v), extra))
    moe_arg = dict(n_moe=moe_stage_layers(model, table, idx, n), e=e, edp=edp, u=u) if moe else None
    tot = stage_memory(model, sh, t, sp, zero, d * c, n, first, last, full, sel, k, wt, moe=moe_arg,
                       grad=grad_kwargs(fw, table["precision"]))["total"]
    mem_total = tot.max(axis=1)
    reason = np.where(ok & (mem_total > gpu.hbm_bytes), REASON["out_of_memory"], reason).astype(np.int8)
    return mem_total, reason
