"""Dynamic programming against the samplers on the same problems: Piper layer graphs as a
search.PiperSpace, solved exactly by search.solve_space_dp and searched by MCMC, TPE, the
gradient search and random search at a fixed budget over 10 seeds.

Problems are drawn from a seed: a chain of transformer-like nodes (attention and MLP halves
of each block, embedding first, head last) with residual skip edges, tensor degrees 1-8
(compute split with an efficiency loss, activation and weight memory split, a sync cost per
cut edge), a plain and an activation-recomputing TMPC per node and degree. A scenario fixes
the graph size, the device count and how tight memory is (M as a multiple of the memory the
data-parallel plan needs at t = 1).

    PYTHONPATH=. python3 benchmarks/bench_dp_vs_samplers.py                # every scenario
    PYTHONPATH=. python3 benchmarks/bench_dp_vs_samplers.py --scenario large-64 --problems 1

Per (scenario, problem): the DP's optimum and CPU seconds; Piper's own planner (any
successor-closed cut, a TMPC per node: a superset of the space) as a lower bound; per sampler
the median gap to the DP's optimum over the seeds, the seeds within 1%, the median CPU seconds
of the whole run and the median CPU seconds until the run's best point was first told.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

import numpy as np

from search import (
    GradientSearcher,
    MCMCSearcher,
    PiperSpace,
    RandomSearcher,
    TPESearcher,
    parse_piper_graph,
    solve_piper,
    solve_space_dp,
)

# (name, blocks (a block is two nodes), devices K, memory multiple, micro-batches N)
SCENARIOS = {
    "small-8": (8, 8, 0.35, 16),  # 18 nodes on 8 devices
    "small-32": (8, 32, 0.35, 32),  # 18 nodes on 32 devices
    "large-16": (32, 16, 0.35, 16),  # 66 nodes on 16 devices
    "large-64": (32, 64, 0.35, 32),  # 66 nodes on 64 devices
    "tight-16": (16, 16, 0.12, 16),  # 34 nodes on 16 devices, memory for few plans
}
MAX_STAGES = 8
TENSOR_DEGREES = (1, 2, 4, 8)
# Tensor-parallel efficiency per doubling of t (compute time p / t / TP_EFFICIENCY**log2 t).
TP_EFFICIENCY = 0.9
# Recompute: a second forward pass (about a third more time: forward is 1 of 3 parts of a step)
# and only the block's input kept (Korthikanti et al. 2022 count ~34 sbh of activations per layer
# without recompute, 2 sbh with full recompute).
RECOMPUTE_TIME = 4 / 3
RECOMPUTE_ACTIVATIONS = 2 / 34


def draw_doc(seed: int, blocks: int, devices: int, memory_multiple: float, microbatches: int) -> dict:
    """A Piper JSON document drawn from ``seed`` (module docstring). Units: seconds and bytes
    scaled to 1 (relative figures)."""
    rng = np.random.default_rng(seed)
    kinds = ["embed"] + [k for _ in range(blocks) for k in ("attn", "mlp")] + ["head"]
    n = len(kinds)
    base = {"embed": (0.2, 3.0, 0.5), "attn": (1.0, 1.0, 1.0), "mlp": (2.0, 2.0, 1.2), "head": (0.6, 3.0, 0.8)}
    edges = [(v, v + 1) for v in range(n - 1)] + [(v, v + 2) for v in range(1, n - 2, 2)]  # residuals
    act_edge = rng.uniform(0.05, 0.15)  # bytes of one activation tensor / B, relative
    nodes = []
    for v, kind in enumerate(kinds):
        p0, w0, a0 = (x * rng.uniform(0.8, 1.25) for x in base[kind])
        ins = [a for a, b in edges if b == v]
        outs = [b for a, b in edges if a == v]
        tm = {}
        for t in TENSOR_DEGREES:
            if t > devices:
                continue
            p = p0 / t / TP_EFFICIENCY ** math.log2(t)
            w, a, b = w0 / t, a0 / t, 2.0 * w0 / t  # b: weights, gradients (optimizer folded in)
            sync = 0.0 if t == 1 else act_edge * (t - 1) / t

            def one(name, p_s, a_bytes, ins=ins, outs=outs, w=w, b=b, sync=sync):
                return {"id": name, "timePerSample": p_s, "parameterSize": w, "memoryUsageA": a_bytes,
                        "memoryUsageB": b, "syncTimeFw": {str(u): sync for u in ins},
                        "syncTimeBw": {str(u): sync for u in outs}}

            tm[str(t)] = [one("vanilla", p, a), one("activation recomp", p * RECOMPUTE_TIME, a * RECOMPUTE_ACTIVATIONS)]
        nodes.append({"id": v, "name": f"{kind}{v}", "TMPCs": tm})
    # Memory: a multiple of what one device needs for the whole graph at t = 1, d = 1 with one
    # micro-batch in flight (a + b summed), so tight scenarios force splitting or recompute.
    whole = sum(base[k][2] + 2 * base[k][1] for k in kinds)
    return {"maxDevices": devices, "maxMemoryPerDevice": memory_multiple * whole, "bandwidth": 1.0,
            "mbsInBatch": microbatches, "nodes": nodes,
            "edges": [{"sourceId": a, "destId": b, "communicationCost": act_edge} for a, b in edges]}


def make_space(doc: dict) -> PiperSpace:
    graph = parse_piper_graph(doc)
    n = len(graph.nodes)
    stages = min(MAX_STAGES, n, graph.max_devices)
    return PiperSpace(graph, max_stages=stages, max_shift=max(1, n // (2 * stages)))


def run_sampler(space: PiperSpace, kind: str, seed: int, budget: int, batch: int) -> tuple[float, float, float, int]:
    """(best time per sample, CPU s of the run, CPU s until its best was first told, evaluations)."""
    t0 = time.process_time()
    searcher = {"mcmc": lambda: MCMCSearcher(space, seed=seed, budget=budget),
                "tpe": lambda: TPESearcher(space, seed=seed, budget=budget),
                "gradient": lambda: GradientSearcher(space, seed=seed),
                "random": lambda: RandomSearcher(space, seed=seed)}[kind]()
    used, best, found_at = 0, math.inf, 0.0
    while used < budget:
        table = searcher.ask(min(batch, budget - used))
        if len(table) == 0:
            break
        metrics = space.evaluate(table)
        searcher.tell(table, metrics)
        used += len(table)
        low = float(np.min(metrics["step_time_s"]))
        if low < best:
            best, found_at = low, time.process_time() - t0
    return best, time.process_time() - t0, found_at, used


def one_problem(scenario: str, index: int, *, seeds: int, budget: int, batch: int, kinds) -> dict:
    blocks, devices, memory, microbatches = SCENARIOS[scenario]
    seed = 1000 * (list(SCENARIOS).index(scenario) + 1) + index
    doc = draw_doc(seed, blocks, devices, memory, microbatches)
    space = make_space(doc)
    t0 = time.process_time()
    opt = solve_space_dp(space)
    dp_s = time.process_time() - t0
    t0 = time.process_time()
    piper = solve_piper(space.graph).time_per_sample_s
    piper_s = time.process_time() - t0
    row = {"scenario": scenario, "problem_seed": seed, "nodes": len(space.graph.nodes), "devices": devices,
           "points": f"{space.size:.2e}", "dp_time_per_sample": opt.time_per_sample_s, "dp_cpu_s": dp_s,
           "piper_time_per_sample": piper, "piper_cpu_s": piper_s, "budget": budget, "samplers": {}}
    for kind in kinds:
        runs = [run_sampler(space, kind, s, budget, batch) for s in range(seeds)]
        gaps = [b / opt.time_per_sample_s - 1 if math.isfinite(b) else math.inf for b, *_ in runs]
        row["samplers"][kind] = {
            "median_gap": statistics.median(gaps), "within_1pct": sum(g <= 0.01 for g in gaps),
            "worst_gap": max(gaps), "median_cpu_s": statistics.median(r[1] for r in runs),
            "median_cpu_to_best_s": statistics.median(r[2] for r in runs),
            "median_evaluations": statistics.median(r[3] for r in runs)}
        print(f"  {scenario} #{index} {kind}: median gap {row['samplers'][kind]['median_gap']:.2%}, "
              f"{row['samplers'][kind]['within_1pct']}/{seeds} within 1%, "
              f"{row['samplers'][kind]['median_cpu_s']:.2f} CPU s", file=sys.stderr, flush=True)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", action="append", choices=list(SCENARIOS), help="default: all")
    ap.add_argument("--problems", type=int, default=2, help="problems drawn per scenario")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--budget", type=int, default=400, help="evaluations per sampler run")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--samplers", default="mcmc,tpe,gradient,random")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    rows = []
    for scenario in args.scenario or list(SCENARIOS):
        for i in range(args.problems):
            row = one_problem(scenario, i, seeds=args.seeds, budget=args.budget, batch=args.batch,
                              kinds=args.samplers.split(","))
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
