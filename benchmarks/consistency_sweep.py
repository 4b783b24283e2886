"""The evaluator's agreements, on random rows of every framework profile, model kind and cluster: wider than the tests.

    PYTHONPATH=. python3 benchmarks/consistency_sweep.py [--seed S] [--rows N] [--pipeline simulate] [--checks ...]

The unit tests hold each agreement on fixed seeds and a few (model, cluster, profile) cases; this draws new rows for
every combination of the models, clusters and profiles below and reports each disagreement with the row that shows
it (exit 1 where any). Checks:

  reference   the vectorised evaluator against the scalar reference (costmodel._reference.evaluate_row), every
              metric within 1e-9 relative (1 ns absolute), infinities in the same places
  placement   every row as a one-pool placement (StrategyTable.as_placements) against the row itself, 1e-9
  screen      the memory screen's bytes and reasons, and the feasibility checks' reasons (out of memory aside),
              against the evaluator's
  export      random feasible plans (tests/test_cli_export.py's draw: Megatron-LM, torchtitan and DeepSpeed, dense
              and MoE) written by `plansweep export`'s writers and read back: the same plan
  monotone    (not run unless named) every knob of costmodel._knobs made better (compute, HBM, NVLink and network
              x1.25, latency and kernel overhead x0.5): no feasible row's step longer (1e-9 relative)
  strategy    (not run unless named) each row against itself with one knob of the plan moved, where both are
              feasible (1e-9 relative): twice the global batch gives no fewer tokens/s; more recompute (none,
              selective, full) makes no step shorter, and full recompute needs no more memory than the others;
              half the micro-batch (the same batch) needs no more memory; sequence parallelism needs no more
              without recompute or under full recompute (memory: the fullest stage's total, as the breakdown's
              parts are that stage's, which the move may change); a higher ZeRO stage (dp >= 2)
              holds no more weights, gradients and optimizer state; the data-parallel exchange overlapped is no
              slower than not where the framework buckets it the same either way. Not held, as the code the
              profiles price does it: Megatron-Core buckets its gradients only when it overlaps them
              (Framework.dp_buckets_need_overlap: one bucket's latency each); recomputing the attention core
              under Transformer Engine with RoPE keeps the pre-rotation Q and K as well; per-op selective
              checkpointing saves sequence parallelism's reduce-scatter outputs

Rows are the reference test's random strategies (tests/test_reference.py random_table: every column, half nudged
towards feasibility, uniform or uneven stages) with the MoE test's expert degrees (tests/test_moe_pricing.py
with_ep) on MoE models.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from costmodel import FRAMEWORKS, REASONS, cluster_preset, evaluate, model_preset  # noqa: E402
from costmodel._feasibility import feasibility  # noqa: E402
from costmodel._memory import memory_screen  # noqa: E402
from costmodel._codes import RECOMPUTE  # noqa: E402
from costmodel._reference import evaluate_row  # noqa: E402
from costmodel._strategy import StrategyTable  # noqa: E402
from tests.test_moe_pricing import with_ep  # noqa: E402
from tests.test_reference import random_table  # noqa: E402

MODELS = ("llama3-8b", "llama3-70b", "gpt3-175b", "megatron-22b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3",
          "qwen3-235b-a22b")
CLUSTERS = ("h100x64", "a100x128", "a100-40gbx64", "h200x64", "h800x256", "b200x256", "gb200x144", "mi300x64",
            "h100x1024")
CHECKS = ("reference", "placement", "screen", "export")
OPTIONAL = ("monotone", "strategy")
# monotone: each knob's better value (costmodel._knobs.KNOBS)
BETTER = {"compute": 1.25, "memory-bandwidth": 1.25, "nvlink": 1.25, "network": 1.25, "latency": 0.5,
          "kernel-overhead": 0.5}
# Seeds of the export check's draws a run takes (from --seed), 300 candidate plans each per framework and space.
EXPORT_SEEDS = 10


def _same(got, want) -> bool:
    if isinstance(want, float) and math.isinf(want):
        return math.isinf(got)
    if isinstance(want, (bool, np.bool_)) or not isinstance(want, (int, float, np.integer, np.floating)):
        return bool(got == want)
    return abs(got - want) <= 1e-9 + 1e-9 * abs(want)


def reference(model, cluster, table, fw, pipeline) -> str | None:
    vec = evaluate(model, cluster, table, framework=fw, pipeline=pipeline)
    for i in range(len(table)):
        for key, want in evaluate_row(model, cluster, table.row(i), framework=fw, pipeline=pipeline).items():
            if not _same(vec[key][i], want):
                return f"{key}: vectorised {vec[key][i]!r}, reference {want!r}, row {table.row(i)}"
    return None


def placement(model, cluster, table, fw, pipeline) -> str | None:
    # micro-batch counts are an integer column with placements: rows where B / (dp b) is whole
    table = table.take(np.flatnonzero(table["global_batch"] % (table["dp"] * table["micro_batch"]) == 0))
    if not len(table):
        return None
    a = evaluate(model, cluster, table, framework=fw, pipeline=pipeline)
    b = evaluate(model, cluster, table.as_placements(model.layers), framework=fw, pipeline=pipeline)
    for key in a:
        x, y = np.asarray(a[key]), np.asarray(b[key])
        same = ((x == y) | np.isclose(x, y, rtol=1e-9, atol=0.0)) if x.dtype.kind == "f" else (x == y)
        if not same.all():
            i = int(np.flatnonzero(~same)[0])
            return f"{key}: row {x[i]!r}, as a placement {y[i]!r}, row {table.row(i)}"
    return None


def screen(model, cluster, table, fw, pipeline) -> str | None:
    vec = evaluate(model, cluster, table, framework=fw, pipeline=pipeline)
    mem, reason = memory_screen(model, cluster, table, framework=fw)
    bad = np.flatnonzero(reason != vec["reason"])
    if bad.size:
        i = int(bad[0])
        return f"screen reason {REASONS[reason[i]]}, evaluator {REASONS[vec['reason'][i]]}, row {table.row(i)}"
    off = np.flatnonzero(~((mem == vec["mem_total_bytes"]) | np.isclose(mem, vec["mem_total_bytes"], rtol=1e-12)))
    if off.size:
        i = int(off[0])
        return f"screen bytes {mem[i]!r}, evaluator {vec['mem_total_bytes'][i]!r}, row {table.row(i)}"
    oom = REASONS.index("out_of_memory")
    want = np.where(vec["reason"] == oom, 0, vec["reason"])
    bad = np.flatnonzero(feasibility(model, cluster, table, framework=fw) != want)
    if bad.size:
        i = int(bad[0])
        return f"feasibility differs from the evaluator's reason {REASONS[vec['reason'][i]]}, row {table.row(i)}"
    return None


def monotone(model, cluster, table, fw, pipeline) -> str | None:
    from costmodel._knobs import moved_cluster

    base = evaluate(model, cluster, table, framework=fw, pipeline=pipeline)
    for knob, f in BETTER.items():
        moved = evaluate(model, moved_cluster(cluster, ((knob, f),)), table, framework=fw, pipeline=pipeline)
        both = base["feasible"] & moved["feasible"]
        ratio = np.where(both, moved["step_time_s"] / np.where(both, base["step_time_s"], 1.0), 1.0)
        if ratio.max() > 1 + 1e-9:
            i = int(np.argmax(ratio))
            return f"{knob} x{f}: step {100 * (ratio[i] - 1):+.3f}%, row {table.row(i)}"
    return None


def _moved(table, **cols):
    """``table`` with the given row columns replaced (per-stage recompute dropped where recompute is given)."""
    stages = table.stages.without("recompute") if "recompute" in cols else table.stages
    return StrategyTable({**table.columns, **{k: np.broadcast_to(np.asarray(v), len(table)).copy()
                                              for k, v in cols.items()}}, stages)


def _worse(name, a, b, key, table, when=None) -> str | None:
    """A message where ``b[key]`` exceeds ``a[key]`` (1e-9 relative) on a row feasible in both (and ``when``)."""
    both = a["feasible"] & b["feasible"] & (True if when is None else when)
    x, y = np.asarray(a[key], dtype=np.float64), np.asarray(b[key], dtype=np.float64)
    over = both & (y > x * (1 + 1e-9) + 1e-12)
    if not over.any():
        return None
    i = int(np.flatnonzero(over)[np.argmax((y / np.where(x > 0, x, np.inf))[over])])
    return f"{name}: {key} {x[i]!r} -> {y[i]!r} ({100 * (y[i] / x[i] - 1):+.3f}%), row {table.row(i)}"


def strategy(model, cluster, table, fw, pipeline) -> str | None:
    ev = lambda t: evaluate(model, cluster, t, framework=fw, pipeline=pipeline)  # noqa: E731
    per_token = lambda m: {"feasible": m["feasible"],  # noqa: E731
                           "s_per_token": 1.0 / np.where(m["feasible"], m["tokens_per_s"], 1.0)}
    states = lambda m: {"feasible": m["feasible"], "states": m["mem_weights_bytes"] + m["mem_grads_bytes"]  # noqa: E731
                        + m["mem_optimizer_bytes"]}
    base, b = ev(table), table["micro_batch"]
    by = [ev(_moved(table, recompute=r)) for r in range(3)]  # none, selective, full
    checks = [("global_batch x2", per_token(base), per_token(ev(_moved(table, global_batch=2 * table["global_batch"]))),
               "s_per_token", None)]
    checks += [(f"recompute {RECOMPUTE[hi]} -> {RECOMPUTE[lo]}", by[hi], by[lo], "step_time_s", None)
               for lo, hi in ((0, 1), (1, 2))]
    checks += [(f"recompute {RECOMPUTE[lo]} -> full", by[lo], by[2], "mem_total_bytes", None) for lo in (0, 1)]
    checks.append(("micro_batch / 2", base, ev(_moved(table, micro_batch=np.maximum(b // 2, 1))),
                   "mem_total_bytes", b % 2 == 0))
    for r in (0, 2):
        on, off = (ev(_moved(table, recompute=r, sequence_parallel=x)) for x in (True, False))
        checks.append((f"sequence_parallel off -> on, recompute {RECOMPUTE[r]}", off, on, "mem_total_bytes",
                       table["tp"] > 1))
    zs = [states(ev(_moved(table, zero_stage=z))) for z in range(4)]
    checks += [(f"zero_stage {z} -> {z + 1}", zs[z], zs[z + 1], "states", table["dp"] > 1) for z in range(3)]
    if not FRAMEWORKS[fw].dp_buckets_need_overlap:
        checks.append(("overlap_dp off -> on", ev(_moved(table, overlap_dp=False)), ev(_moved(table, overlap_dp=True)),
                       "step_time_s", None))
    for name, a, moved, key, when in checks:
        why = _worse(name, a, moved, key, table, when)
        if why:
            return why
    return None


RUN = {"reference": reference, "placement": placement, "screen": screen, "monotone": monotone, "strategy": strategy}


def export_round_trips(seed: int) -> tuple[int, list[str]]:
    """(plans written and read back, what differed) over EXPORT_SEEDS draws from ``seed``."""
    from cli._export import WRITERS, canonical_plan, read_back
    from tests.test_cli_export import PROFILE, ROUND_TRIP, SPACES, _draw

    n, out = 0, []
    for s, (fw, space) in itertools.product(range(seed, seed + EXPORT_SEEDS), ROUND_TRIP):
        model, cluster = SPACES[space]
        table = _draw(fw, 300, s, model, cluster.num_gpus)
        ok = evaluate(model, cluster, table, framework=PROFILE[fw] if model.is_moe else None)["feasible"]
        for i in np.flatnonzero(ok):
            plan = canonical_plan(table.row(int(i)), model)
            n += 1
            back = read_back(fw, WRITERS[fw](plan, model, cluster), model)
            if back != plan:
                diff = {k: (plan.get(k), back.get(k)) for k in sorted(set(plan) | set(back))
                        if plan.get(k) != back.get(k)}
                out.append(f"export: {fw} {space}: written and read back {diff} (plan, read), plan {plan}")
    return n, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rows", type=int, default=40, help="random rows per (model, cluster, profile)")
    ap.add_argument("--pipeline", choices=("closed_form", "simulate"), default="closed_form")
    ap.add_argument("--checks", default=",".join(CHECKS), help="comma-separated, among " + ", ".join(CHECKS + OPTIONAL))
    args = ap.parse_args()
    checks = [c for c in args.checks.split(",") if c]
    if any(c not in CHECKS + OPTIONAL for c in checks):
        ap.error(f"--checks: expected names among {', '.join(CHECKS + OPTIONAL)}, got {args.checks!r}")
    rng = np.random.default_rng(args.seed)
    t0, rows, found = time.perf_counter(), 0, 0
    if "export" in checks:
        plans, diffs = export_round_trips(args.seed)
        for line in diffs:
            print(line)
        print(f"export: {plans:,} plans written and read back, {len(diffs)} different")
        found += len(diffs)
        checks = [c for c in checks if c != "export"]
    for name, cl_name, fw in itertools.product(MODELS, CLUSTERS, FRAMEWORKS) if checks else ():
        model, cluster = model_preset(name), cluster_preset(cl_name)
        sub = np.random.default_rng(rng.integers(1 << 62))
        table = random_table(model, sub, args.rows, bool(sub.random() < 0.5))
        if model.is_moe:
            table = with_ep(table, sub, model.experts)
        rows += len(table)
        for check in checks:  # (export is run above, once)
            why = RUN[check](model, cluster, table, fw, args.pipeline)
            if why:
                found += 1
                print(f"{check}: {name} on {cl_name} under {fw}: {why}")
    if checks:
        print(f"{rows:,} rows x {len(checks)} checks ({len(MODELS)} models, {len(CLUSTERS)} clusters, "
              f"{len(FRAMEWORKS)} profiles, seed {args.seed}, {args.pipeline}): {found} disagreement(s), "
              f"{time.perf_counter() - t0:.0f} s")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
