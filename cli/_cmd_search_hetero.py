"""``plansweep search grid|random|mcmc|tpe --cluster HETERO``: stage placement search.

    plansweep search mcmc --cluster a100x64+h100x64 --model gpt3-175b --budget 20000

On a heterogeneous cluster (a preset of costmodel.hetero_names() or a file with ``pools``) the
searchers run over search.HeteroSpace (per stage: pool, dp, tp, rank order, layers; globally:
pp, micro-batches, schedule, recompute, ZeRO, SP) and the driver evaluates with
costmodel.evaluate_any (evaluate_hetero for a HeteroTable). This module builds that space from
the space flags and prints the best placements with their stages.
"""

from __future__ import annotations

import json

from costmodel import InputError, format_stage_rows, stage_rows
from search._hetero_space import HeteroSpace

# Defaults of a placement space where `plansweep search mcmc|tpe --cluster HETERO` gets no flag.
HETERO_DEFAULTS = {"pp": (4, 6, 8, 12, 16), "dp": (1, 2, 4, 8, 16), "tp": (1, 2, 4, 8),
                   "microbatches": (16, 24, 32, 48, 64, 96, 128, 192), "schedule": ("1f1b",),
                   "recompute": ("selective", "full"), "zero_stage": (0, 1), "sequence_parallel": (True,)}
# Defaults of a placement space where `plansweep sweep --cluster HETERO` gets no flag: a grid is
# the product of every stage's choices, so each stage gets few (tp 8 inside a node, dp 2-8, its
# pool) and boundaries stay uniform (max_shift 0): 2.7e7 grid rows, 2.0e6 valid on
# a100x64+h100x64 for GPT-3 175B, about a minute and a quarter on one core.
SWEEP_HETERO_DEFAULTS = {"pp": (4, 8), "dp": (2, 4, 8), "tp": (8,), "order": ("tp-inner",), "max_shift": 0,
                         "microbatches": (32, 64), "schedule": ("1f1b",), "recompute": ("selective", "full"),
                         "zero_stage": (0, 1), "sequence_parallel": (True,)}
HETERO_FLAGS = {"pp": "--pp", "dp": "--dp", "tp": "--tp", "microbatches": "--microbatches",
                "schedule": "--schedule", "recompute": "--recompute", "zero_stage": "--zero-stage",
                "sequence_parallel": "--sequence-parallel", "vpp": "--vpp"}


def hetero_space_from_args(args, model, cluster, defaults=HETERO_DEFAULTS) -> HeteroSpace:
    """The placement space of `plansweep sweep|search` on a heterogeneous cluster: the space flags
    --pp --dp --tp --microbatches --schedule --recompute --zero-stage --sequence-parallel --vpp
    (others are refused), ``defaults`` elsewhere."""
    from cli._space_args import SPACE_FLAGS, global_batch, parse_list

    choices = dict(defaults)
    for dim, flag in SPACE_FLAGS:
        text = getattr(args, "space_" + dim, None)
        if text is None:
            continue
        if dim not in HETERO_FLAGS:
            raise InputError(flag, "only " + ", ".join(HETERO_FLAGS.values()) + " on a heterogeneous cluster", text)
        choices[dim] = tuple(parse_list(text, flag, dim))
    batch = global_batch(args)
    dp2 = getattr(args, "dp2", None)
    if dp2 is not None:
        try:
            choices["dp2"] = tuple(int(x) for x in str(dp2).split(","))
        except ValueError:
            raise InputError("--dp2", "comma-separated integers >= 0 holding 0, e.g. 0,1,2,4", dp2) from None
    try:
        return HeteroSpace.from_options(model, cluster, global_batch=batch, **choices)
    except InputError as exc:
        flag = "--dp2" if exc.argument == "dp2" else HETERO_FLAGS.get(exc.argument, exc.argument)
        raise InputError(flag, exc.expected, exc.got) from None


def hetero_report(args, name: str, space, evaluations: int, feasible: int, best_t, best_m) -> None:
    """The best placements found (the first with its stages), text or --json."""
    names = [p.name for p in space.cluster.pools]
    n_best = 0 if best_t is None else len(best_t)
    if args.json:
        rows = []
        for i in range(n_best):
            r = best_t.row(i, names)
            r.update({k: (v[i].item() if hasattr(v[i], "item") else v[i]) for k, v in best_m.items()})
            rows.append(r)
        print(json.dumps({"searcher": name, "space_size": str(space.size), "evaluations": evaluations,
                          "feasible": feasible, "best": rows}))
        return
    print(f"{name} placement search on {space.model.name} / {space.cluster.name}: {space.cluster.describe()}")
    print(f"space of {space.size:.3e} points, {evaluations:,} evaluations, {feasible:,} feasible")
    if not n_best:
        print("no feasible placement found")
        return
    print("  # tokens/s, then per stage: pool, dp, tp (tp* = tp across nodes), L = layers")
    for i in range(n_best):
        r = best_t.row(i, names)
        stages = " | ".join(
            (f"{st['pool']}+{st['pool2']} dp{st['dp'] - st['dp2']}+{st['dp2']}" if "dp2" in st
             else f"{st['pool']} dp{st['dp']}")
            + f" tp{st['tp']}{'*' if st['order'] == 'tp-across' else ''} L{st['layers']}" for st in r["stages"])
        sched = r["schedule"] + (f" vpp{r['vpp']}" if r["vpp"] > 1 else "")
        print(f"{i + 1:>3} {float(best_m['tokens_per_s'][i]):>11,.0f} tokens/s  m={r['microbatches']} {sched} "
              f"{r['recompute']} zero{r['zero_stage']}  {stages}")
    print("best, per stage (exact pipeline):")
    print(format_stage_rows(stage_rows(space.model, space.cluster, best_t, 0)))
