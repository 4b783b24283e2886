"""Re-planning when nodes are lost (or added): the best plan on what is left, per policy.

Policies, from the least to the most change to the running job:
    shrink-dp    keep every setting of the plan (tp, pp, cp, micro-batch, schedule, vpp,
                 recompute, SP, ZeRO) and drop data-parallel replicas: the largest dp that fits
                 the GPUs left and divides the global batch by dp x micro-batch. The checkpoint
                 loads as it is (only the data-parallel shards of a ZeRO optimizer re-split).
    keep-tp-pp   keep the model-parallel layout (tp, pp, cp): weights stay where they are;
                 search dp, micro-batch, schedule, vpp, recompute, SP and ZeRO.
    re-layout    search the whole default space (search.default_choices) on the GPUs left.
Every policy may leave GPUs idle (dp is a dimension, at most GPUs left / (tp pp cp)): on
1016 GPUs, say, no plan uses them all. Each candidate set is one StrategyTable priced in one
costmodel.evaluate call, closed forms (the bulk screening mode); the best is by ``objective``,
tokens/s or goodput (costmodel.plan_goodput).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

import numpy as np

from costmodel import Cluster, FailureModel, InputError, StrategyTable, Transformer, evaluate, plan_goodput
from costmodel._strategy import COLUMNS
from search._space import Space, default_choices

POLICIES = ("shrink-dp", "keep-tp-pp", "re-layout")
OBJECTIVES = ("tokens_per_s", "goodput")


def smaller_cluster(cluster: Cluster, nodes_lost: int) -> Cluster:
    """``cluster`` with ``nodes_lost`` fewer nodes (negative: more nodes)."""
    nodes = cluster.nodes - int(nodes_lost)
    if nodes < 1:
        raise InputError("nodes lost", f"fewer than the cluster's {cluster.nodes} nodes", nodes_lost)
    return dataclasses.replace(cluster, nodes=nodes, name=f"{cluster.name}-{nodes_lost}n")


def _dp_choices(cluster: Cluster, per: int, global_batch: int, micro: Iterable[int]) -> list[int]:
    """dp values that fit the GPUs (dp x per <= GPUs) and divide the global batch by some
    micro-batch size of ``micro``."""
    top = cluster.num_gpus // per
    return [d for d in range(1, top + 1) if any(global_batch % (d * b) == 0 for b in micro)]


def _candidates(model: Transformer, cluster: Cluster, plan: Mapping, policy: str,
                framework=None) -> StrategyTable | None:
    B = int(plan["global_batch"])
    if policy == "shrink-dp":
        per = int(plan["tp"]) * int(plan["pp"]) * int(plan["cp"])
        dps = _dp_choices(cluster, per, B, [int(plan["micro_batch"])])
        if not dps:
            return None
        return StrategyTable.from_columns(**{**{k: plan[k] for k in COLUMNS if k in plan}, "dp": dps})
    opts = default_choices(model, cluster)
    if policy == "keep-tp-pp":
        opts.update(tp=[int(plan["tp"])], pp=[int(plan["pp"])], cp=[int(plan["cp"])])
    elif policy != "re-layout":
        raise InputError("policy", "one of " + ", ".join(POLICIES), policy)
    tables = []
    for tp in opts["tp"]:  # dp choices depend on tp x pp x cp: one space per model-parallel size
        for pp in opts["pp"]:
            for cp in opts["cp"]:
                dps = _dp_choices(cluster, tp * pp * cp, B, opts["micro_batch"])
                if not dps:
                    continue
                space = Space.from_options(model, cluster, global_batch=B, all_gpus=False, framework=framework,
                                           **{**opts, "tp": [tp], "pp": [pp], "cp": [cp], "dp": dps})
                if space.size:
                    _, table = space.rows(0, space.size)
                    if len(table):
                        tables.append(table)
    return StrategyTable.concat(tables) if tables else None


def replan(model: Transformer, cluster: Cluster, plan: Mapping, nodes_lost: Iterable[int], *,
           policies: Iterable[str] = POLICIES, objective: str = "tokens_per_s",
           failure: FailureModel | None = None, framework=None) -> list[dict]:
    """One record per (nodes lost, policy), by nodes lost then policy: the best plan on what is
    left (its readable row), its tokens/s and goodput, the GPUs it uses and its share of the
    original plan's throughput (by ``objective``); ``plan`` = None where the policy finds no
    feasible plan. Every plan is priced under ``framework`` (costmodel._frameworks)."""
    if objective not in OBJECTIVES:
        raise InputError("objective", "one of " + ", ".join(OBJECTIVES), objective)
    policies = tuple(policies)
    for p in policies:
        if p not in POLICIES:
            raise InputError("policy", "one of " + ", ".join(POLICIES), p)
    plan = dict(plan)
    base_table = StrategyTable.from_columns(**{k: plan[k] for k in COLUMNS if k in plan},
                                            **{k: [plan[k]] for k in ("stage_layers", "stage_recompute")
                                               if plan.get(k) is not None})
    base = _scores(evaluate(model, cluster, base_table, framework=framework), base_table, cluster, objective, failure,
                   model)
    if not np.isfinite(base["score"][0]) or base["score"][0] <= 0:
        raise InputError("plan", f"a feasible plan on {cluster.name}", "infeasible there")
    ks = sorted({int(k) for k in nodes_lost})
    if not ks:
        return []
    # A row's price does not depend on how many nodes the cluster has beyond the ones it uses
    # (links are per node), so each policy's candidates are priced once, on the largest of
    # the clusters left, and each smaller one keeps the rows that fit it.
    largest = smaller_cluster(cluster, ks[0])
    out = []
    for policy in policies:
        table = _candidates(model, largest, plan, policy, framework)
        if table is not None:
            m = evaluate(model, largest, table, framework=framework)
            used = table["dp"] * table["tp"] * table["pp"] * table["cp"]
        for k in ks:
            left = smaller_cluster(cluster, k)
            if table is not None:  # goodput counts the nodes left idle as spares: per cluster
                s = _scores(m, table, left, objective, failure, model)
            rec = {"nodes_lost": k, "gpus_left": left.num_gpus, "policy": policy, "plan": None,
                   "tokens_per_s": 0.0, "goodput_tokens_per_s": 0.0, "gpus_used": 0, "kept": 0.0}
            if table is not None:
                score = np.where(used <= left.num_gpus, s["score"], 0.0)
                i = int(np.argmax(score))
                if score[i] > 0:
                    row = table.row(i)
                    rec.update(plan=row, tokens_per_s=float(s["tokens_per_s"][i]),
                               goodput_tokens_per_s=float(s["goodput_tokens_per_s"][i]), gpus_used=int(used[i]),
                               kept=float(score[i] / base["score"][0]))
            out.append(rec)
    out.sort(key=lambda r: (r["nodes_lost"], POLICIES.index(r["policy"])))
    return out


def _scores(m, table, cluster, objective, failure, model) -> dict[str, np.ndarray]:
    g = plan_goodput(m, table, cluster, failure, model=model)["goodput_tokens_per_s"]
    tok = m["tokens_per_s"]
    return {"tokens_per_s": tok, "goodput_tokens_per_s": g, "score": tok if objective == "tokens_per_s" else g}


__all__ = ["OBJECTIVES", "POLICIES", "replan", "smaller_cluster"]
