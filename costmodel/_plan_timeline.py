"""One priced plan as a timeline: the stage times evaluate() priced it with, run through its schedule.

plan_timeline(model, cluster, table) prices row 0 of ``table`` through the block evaluator's phases
(costmodel._block: the functions evaluate_block calls, in its order, with the stage columns and the exact pipeline
simulator, as costmodel._evaluate.stage_breakdown asks for them), keeps the records a drawing needs, and runs the
row's schedule with its stages' forward, backward and weight-gradient times and hand-offs through the simulator
(costmodel._pipeline.simulate, timeline=True): every pass's start and end, in seconds. Nothing is priced twice or
otherwise:

    step = pipeline (the simulator's span) + exposed data-parallel exchange + optimizer step

is the row's step_time_s. Inside each pass, the tp, cp and ep collectives the layer terms add to it as exposed
(costmodel._layer_terms.layer_terms); each collective's share of a pass is the pass with its inputs less the pass
without them (COLLECTIVE_INPUTS), so the shares follow the layer terms whatever they become.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from costmodel._block import block_phases, edge_parts, report
from costmodel._feasibility import REASONS
from costmodel._framework_rows import framework_groups
from costmodel._hetero_cluster import as_hetero
from costmodel._layer_terms import LAYER_INPUTS, layer_terms, moe_layer_inputs
from costmodel._metrics import Metrics
from costmodel._pipeline import _SPLIT_BACKWARD, Timeline, compile_schedule, simulate, simulate_lockstep
from costmodel._stages import pool_arrays, stage_view, unpaired_by_stage
from costmodel._strategy import SCHEDULES, StrategyTable
from costmodel._workloads import Transformer

# The layer-cost inputs (costmodel._layer_compute, before layer_terms) of each collective a pass pays exposed:
# tensor parallelism's all-reduces / reduce-scatters forward and backward and their repeat in a selective
# recompute, context parallelism's ring exchanges forward and backward, the MoE all-to-alls (and their extra where a
# pass runs unpaired under Megatron-Core's A2A overlap).
COLLECTIVE_INPUTS = {"tp": ("tp_fwd", "tp_bwd", "sel_tp"), "cp": ("cp_fwd", "cp_bwd"),
                     "ep": ("ep_fwd", "ep_bwd", "ep_x")}
# The embedding's and the head's tp collectives, shape terms of a stage's ends (configuration_terms' edge_of), and a
# tp-sharded hand-off's all-gathers by its receiver (Framework.handoff_gathers; their copies left as computation).
EDGE_COLLECTIVE_INPUTS = {"tp": ("emb_tp", "head_tp", "handoff_tp_f", "handoff_tp_b"), "cp": (), "ep": ()}


@dataclasses.dataclass(frozen=True)
class PlanTimeline:
    """Row 0 of a table as evaluate() priced it, laid out in time. Per pipeline stage (D,), seconds per micro-batch
    (a chunk of an interleaved or wave schedule runs 1/v of them): ``forward_s``, ``backward_s`` (the activation
    gradient; with the weight gradient where the schedule runs both as one pass), ``weight_grad_s``; ``handoff_s``
    per link (link d: stage d to d + 1; link D - 1: the last stage to the first); ``collectives``: kind -> (2, D)
    the exposed collective seconds inside a forward (row 0) and a backward (row 1, with W's where B and W are one
    pass). ``ops``: every pass of the schedule, start and end in seconds (one parameter set); ``dep`` / ``cross``:
    each pass's producer and whether it ran on another stage (its activations handed off)."""

    schedule: str
    pp: int
    microbatches: int
    vpp: int
    split_backward: bool
    forward_s: np.ndarray
    backward_s: np.ndarray
    weight_grad_s: np.ndarray
    handoff_s: np.ndarray
    collectives: dict[str, np.ndarray]
    ops: Timeline
    dep: np.ndarray
    cross: np.ndarray
    link: np.ndarray
    pipeline_s: float
    dp_exposed_s: float
    dp_stage_s: np.ndarray
    optimizer_s: float
    step_s: float
    fits: bool
    stage_pools: tuple[str, ...]
    stage_layers: tuple[int, ...]
    metrics: Metrics
    strategy: dict

    @property
    def busy_s(self) -> np.ndarray:
        """(D,) each stage's passes per iteration, m (F + B + W)."""
        return self.microbatches * (self.forward_s + self.backward_s + self.weight_grad_s)

    @property
    def idle_s(self) -> np.ndarray:
        """(D,) each stage's idle time within the pipeline: its share of the bubble and of the hand-offs waited for."""
        return np.maximum(self.pipeline_s - self.busy_s, 0.0)


def with_stage_layers(model: Transformer, table: StrategyTable) -> StrategyTable:
    """``table`` with every stage's layers written out where it gives none (uniform stages, L / pp each), as
    costmodel._evaluate.stage_breakdown prices a row's stages for people to read."""
    if table.placed or table.stage_layers is not None:
        return table
    S = int(table["pp"].max())
    layers = np.where(np.arange(S)[None, :] < table["pp"][:, None], (model.layers // table["pp"])[:, None], 0)
    return StrategyTable(table.columns, {**table.stages, "layers": layers})


def plan_timeline(model: Transformer, cluster, table: StrategyTable, framework=None) -> PlanTimeline:
    """The timeline of row 0 of ``table`` (a StrategyTable, with row degrees or a placement) on ``cluster`` under
    ``framework`` (None: the row's framework column, else costmodel._frameworks.DEFAULT_FRAMEWORK). InputError from
    the pricing's own checks; a row the evaluator refuses (a reason other than out of memory): ValueError naming the
    reason (callers explain the refusal first, as `plansweep evaluate` does)."""
    table = with_stage_layers(model, table.take(slice(0, 1)))
    ((_, fw),) = framework_groups(table, framework)
    rows, cfg, terms, st, hand, pipe, dp, metrics = _priced(model, cluster, table, fw)
    reason = REASONS[int(metrics["reason"][0])]
    if reason not in ("ok", "out_of_memory"):
        raise ValueError(f"the plan is refused ({reason}): it has no timeline")
    p, m, v = int(rows.p[0]), int(rows.m[0]), int(rows.v[0])
    schedule = SCHEDULES[int(rows.sched[0])]
    col = stage_columns(rows, p)
    F, Bk, W = (_per_stage(a, col) for a in (st.F, st.Bk, st.W))
    tc = _per_stage(hand.T_C, col) if p > 1 else np.zeros(p)
    blocking = hand.blocking is not None and bool(hand.blocking[0])  # (Framework.blocking_p2p's hand-offs)
    res = simulate(schedule, p, m, v, tf=F, tb=Bk, tw=W, tc=tc[None, :], timeline=True, blocking=blocking)
    pipe_s = float(pipe.pipe[0])
    # The priced pipeline is one simulation of the same inputs: equal to the drawn one but for the order of float
    # additions (a drift would mean a phase priced here otherwise than in evaluate_block), except two waits the drawn
    # dependency order leaves out: the second transfer of each steady-state exchange where an exchange's calls run
    # one after the other (Framework.exchange_calls: DeepSpeed's; hand.serial), and torch's interleaved grid's
    # step-by-step waits (Framework.lockstep_interleaved), which the grid's own walk prices. Those rows' ops are drawn
    # in the dependency order and pipeline_s is the priced span, the waits in the stages' idle time.
    lockstep = hand.lockstep is not None and bool(hand.lockstep[0])
    if lockstep:
        drawn = float(simulate_lockstep(p, m, v, tf=F, tb=Bk, tw=W, tc=tc[None, :])[0])
    else:
        drawn = float(res.total_time[0]) + (float(hand.serial[0]) if hand.serial is not None else 0.0)
    assert abs(drawn - pipe_s) <= 1e-9 * max(pipe_s, 1e-30), (drawn, pipe_s)
    g = compile_schedule(schedule, p, m, v)
    coll = collective_shares(rows, cfg, terms, st, col)
    if schedule not in _SPLIT_BACKWARD:  # B and W run as one pass
        Bk, W = Bk + W, np.zeros_like(W)
    names = [q.name for q in as_hetero(cluster).pools]
    sc = {k: metrics[k][0] for k in ("_stage_pool", "_stage_pool2", "_stage_dp2", "_stage_layers",
                                      "_stage_dp_comm_s")}  # (k,) each: row 0's stage columns
    pools = tuple(_pool_label(names, int(sc["_stage_pool"][c]), int(sc["_stage_pool2"][c]), int(sc["_stage_dp2"][c]))
                  for c in col)
    return PlanTimeline(
        schedule=schedule, pp=p, microbatches=m, vpp=v, split_backward=schedule in _SPLIT_BACKWARD, forward_s=F,
        backward_s=Bk, weight_grad_s=W, handoff_s=tc, collectives=coll, ops=res.timeline, dep=g.dep, cross=g.cross,
        link=g.link, pipeline_s=pipe_s, dp_exposed_s=float(dp.exposed[0]),
        dp_stage_s=np.nan_to_num(_per_stage(sc["_stage_dp_comm_s"], col)), optimizer_s=float(dp.opt_s[0]),
        step_s=pipe_s + float(dp.exposed[0]) + float(dp.opt_s[0]), fits=reason == "ok", stage_pools=pools,
        stage_layers=tuple(int(sc["_stage_layers"][c]) for c in col),
        metrics=Metrics({k: a for k, a in metrics.items() if not k.startswith("_")}), strategy=table.row(0))


def stage_columns(rows, p: int) -> np.ndarray:
    """(p,) the stage column of row 0 that prices each pipeline stage: the stage's own, or where the view keeps three
    representatives of stages alike (StageView.comp: first, interior, last) the first for stage 0, the last for
    stage p - 1 and the interior one between, as costmodel._pipeline_terms.simulate_pipelines maps them."""
    d = np.arange(p)
    if bool(np.asarray(rows.sv.comp)[0]):
        return np.where(d == 0, 0, np.where(d == p - 1, 2, 1))
    return d


def _per_stage(a, col: np.ndarray) -> np.ndarray:
    """Row 0's entry of stage columns ``col`` of a (k, 1) stage array ((1, 1): one value for every stage) or a (k,)
    one."""
    a = np.asarray(a, dtype=np.float64)
    a = a[:, 0] if a.ndim == 2 else a
    return np.broadcast_to(a, col.shape).copy() if a.size == 1 else a[col].copy()


def _pool_label(names: list[str], pool: int, pool2: int, dp2: int) -> str:
    """A stage's pool by name; a stage split across two pools as "a+b"."""
    return f"{names[pool]}+{names[pool2]}" if dp2 else names[pool]


def _priced(model, cluster, table: StrategyTable, fw):
    """costmodel._block.evaluate_block's phases on a one-row ``table`` with the stage columns and the exact pipeline,
    the records kept: (rows, cfg, terms, st, hand, pipe, dp, metrics)."""
    sv = stage_view(model, table, unpaired_by_stage(fw, model, table))
    rows, cfg, terms, st, hand, pipe, mem, dp = block_phases(model, pool_arrays(cluster), sv, "simulate", True, True,
                                                             fw)
    return rows, cfg, terms, st, hand, pipe, dp, report(rows, cfg, terms, st, hand, pipe, mem, dp, True)


def _without(d: dict, keys) -> dict:
    """``d`` with the entries ``keys`` (those it has) set to zero."""
    return {k: (np.zeros_like(x) if k in keys else x) for k, x in d.items()}


def collective_shares(rows, cfg, terms, st, col: np.ndarray) -> dict[str, np.ndarray]:
    """kind -> (2, p): the exposed seconds of that collective inside one forward (row 0) and one backward pass (row
    1, the weight-gradient pass with it) of each of the p stages (priced by stage columns ``col``): the stage's F
    and B + W as priced (Terms.times on the stages' configurations, as costmodel._block.stage_times calls it) less
    the same with the collective's inputs at zero."""
    masks = (cfg.rc_u == 2, cfg.rc_u == 1)  # full, selective recompute per configuration (configuration_terms')
    layers = (rows.n_d, rows.n_m) if rows.moe else (None, None)

    def passes(t):  # (F, B + W) per stage, (k, 1)
        return t.times(st.inv_t, rows.n, *layers, st.edges, parts=("F", ("B", "W")), nx=terms.n_x, nb=terms.n_b)

    priced = passes(terms)
    out = {}
    for kind, inputs in COLLECTIVE_INPUTS.items():
        lt0 = None if terms.lt is None else layer_terms(_without({k: terms.eu[k] for k in LAYER_INPUTS}, inputs),
                                                        *masks)
        lt_m0 = None if terms.lt_m is None else layer_terms(
            _without(moe_layer_inputs(terms.eu, rows.model), inputs), *masks)
        bare = dataclasses.replace(terms, lt=lt0, lt_m=lt_m0,
                                   edge_of=edge_parts(_without(terms.eu, EDGE_COLLECTIVE_INPUTS[kind])))
        out[kind] = np.stack([np.maximum(_per_stage(a - a0, col), 0.0) for a, a0 in zip(priced, passes(bare),
                                                                                         strict=True)])
    return out
