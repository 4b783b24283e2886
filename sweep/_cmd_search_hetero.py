"""``plansweep search placement``: stage placement on a heterogeneous cluster (MCMC or TPE).

    plansweep search placement --cluster a100x64+h100x64 --model gpt3-175b --searcher mcmc

Searches search.HeteroSpace (per stage: pool, dp, tp, rank order, layers; globally: pp,
micro-batches, recompute, ZeRO) with evaluate_hetero's closed forms, re-prices the best
distinct plans found with the exact pipeline simulator and prints the best with its stages.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from costmodel import InputError, as_hetero, evaluate_hetero, format_stage_rows, stage_rows
from search._hetero_search import PlacementMCMC, PlacementTPE, score
from search._hetero_space import HeteroSpace
from sweep._specs import load_any_cluster, load_model


def _ints(text: str, flag: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise InputError(flag, "comma-separated integers", text) from None
    if not vals or min(vals) < 1:
        raise InputError(flag, "integers >= 1", text)
    return vals


def _zero(text: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise InputError("--zero-stage", "comma-separated integers in 0..1", text) from None
    if not vals or any(v not in (0, 1) for v in vals):
        raise InputError("--zero-stage", "0 or 1 (ZeRO-2/3 do not combine with pipelines)", text)
    return vals


def _strs(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def register_placement(searchers: argparse._SubParsersAction) -> None:
    p = searchers.add_parser("placement", help="stage placement on a heterogeneous cluster (MCMC or TPE)",
                             description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gpt3-175b")
    p.add_argument("--cluster", default="a100x64+h100x64", help="heterogeneous preset or JSON/YAML file with pools")
    p.add_argument("--hardware", help="efficiency constants fitted by `plansweep calibrate`")
    p.add_argument("--searcher", choices=("mcmc", "tpe"), default="mcmc")
    p.add_argument("--global-batch", default="1536")
    p.add_argument("--pp", default="4,6,8,12,16", help="pipeline depths (comma-separated)")
    p.add_argument("--dp", default="1,2,4,8,16")
    p.add_argument("--tp", default="1,2,4,8")
    p.add_argument("--microbatches", default="16,24,32,48,64,96,128,192")
    p.add_argument("--recompute", default="selective,full")
    p.add_argument("--zero-stage", default="0,1")
    p.add_argument("--steps", default="200", help="batches asked of the searcher")
    p.add_argument("--batch", default="64", help="strategies per batch (MCMC chains)")
    p.add_argument("--seed", default="0")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args) -> int:
    model = load_model(args.model)
    cluster = as_hetero(load_any_cluster(args.cluster, args.hardware))
    (batch_size,) = _ints(args.global_batch, "--global-batch")
    (steps,) = _ints(args.steps, "--steps")
    (n,) = _ints(args.batch, "--batch")
    try:
        seed = int(args.seed)
    except ValueError:
        raise InputError("--seed", "an integer", args.seed) from None
    space = HeteroSpace.from_options(
        model, cluster, global_batch=batch_size, pp=_ints(args.pp, "--pp"), dp=_ints(args.dp, "--dp"),
        tp=_ints(args.tp, "--tp"), microbatches=_ints(args.microbatches, "--microbatches"),
        recompute=_strs(args.recompute), zero_stage=_zero(args.zero_stage))
    searcher = PlacementMCMC(space, seed, chains=n) if args.searcher == "mcmc" else PlacementTPE(space, seed)
    t0 = time.perf_counter()
    seen: dict[bytes, float] = {}
    keep: list[np.ndarray] = []
    for _ in range(steps):
        table = searcher.ask(n)
        metrics = evaluate_hetero(model, cluster, table)
        searcher.tell(table, metrics)
        sc = score(metrics)
        for i in np.argsort(sc)[:4]:
            d = space_digits(searcher)[i]
            if d.tobytes() not in seen and np.isfinite(sc[i]) and metrics["feasible"][i]:
                seen[d.tobytes()] = float(sc[i])
                keep.append(d)
    if not keep:
        print("no feasible placement found")
        return 1
    order = np.argsort([seen[d.tobytes()] for d in keep])[:32]
    cand = space.table(np.stack([keep[i] for i in order]))
    exact = evaluate_hetero(model, cluster, cand, pipeline="simulate")
    best = int(np.argmin(exact["step_time_s"]))
    table = cand.take(slice(best, best + 1))
    names = [p.name for p in cluster.pools]
    rows = stage_rows(model, cluster, table)
    if args.json:
        print(json.dumps({"strategy": table.row(0, names), "tokens_per_s": float(exact["tokens_per_s"][best]),
                          "step_time_s": float(exact["step_time_s"][best]), "stages": rows}))
        return 0
    print(f"{model.name} on {cluster.name}: {cluster.describe()}")
    print(f"{args.searcher}: {steps} batches of {n} in {time.perf_counter() - t0:.1f} s; best plan "
          f"{float(exact['tokens_per_s'][best]):,.0f} tokens/s, step {float(exact['step_time_s'][best]):.3f} s, "
          f"MFU {100 * float(exact['mfu'][best]):.1f}%")
    glob = {k: v for k, v in table.row(0, names).items() if k != "stages"}
    print("strategy: " + " ".join(f"{k}={v}" for k, v in glob.items()))
    print(format_stage_rows(rows))
    return 0


# Defaults of a placement space where `plansweep search mcmc|tpe --cluster HETERO` gets no flag.
HETERO_DEFAULTS = {"pp": (4, 6, 8, 12, 16), "dp": (1, 2, 4, 8, 16), "tp": (1, 2, 4, 8),
                   "microbatches": (16, 24, 32, 48, 64, 96, 128, 192), "schedule": ("1f1b",),
                   "recompute": ("selective", "full"), "zero_stage": (0, 1), "sequence_parallel": (True,)}
HETERO_FLAGS = {"pp": "--pp", "dp": "--dp", "tp": "--tp", "microbatches": "--microbatches",
                "schedule": "--schedule", "recompute": "--recompute", "zero_stage": "--zero-stage",
                "sequence_parallel": "--sequence-parallel"}


def hetero_space_from_args(args, model, cluster) -> HeteroSpace:
    """The placement space of `plansweep search grid|random|mcmc|tpe` on a heterogeneous cluster:
    the space flags --pp --dp --tp --microbatches --schedule --recompute --zero-stage
    --sequence-parallel (others are refused), HETERO_DEFAULTS elsewhere."""
    from sweep._space_args import SPACE_FLAGS, _parse_list

    choices = dict(HETERO_DEFAULTS)
    for dest, flag, kind in SPACE_FLAGS:
        text = getattr(args, "space_" + dest, None)
        if text is None:
            continue
        if dest not in HETERO_FLAGS:
            raise InputError(flag, "only " + ", ".join(HETERO_FLAGS.values()) + " on a heterogeneous cluster", text)
        choices[dest] = tuple(_parse_list(text, flag, kind))
    batch = 1536 if getattr(args, "global_batch", None) is None else _ints(str(args.global_batch), "--global-batch")[0]
    try:
        return HeteroSpace.from_options(model, cluster, global_batch=batch, **choices)
    except InputError as exc:
        raise InputError(HETERO_FLAGS.get(exc.argument, exc.argument), exc.expected, exc.got) from None


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
    for i in range(n_best):
        r = best_t.row(i, names)
        stages = " | ".join(f"{st['pool']} dp{st['dp']} tp{st['tp']}{'x' if st['order'] == 'tp-across' else ''}"
                            f" L{st['layers']}" for st in r["stages"])
        print(f"{i + 1:>3} {float(best_m['tokens_per_s'][i]):>11,.0f} tokens/s  m={r['microbatches']} "
              f"{r['recompute']} zero{r['zero_stage']}  {stages}")
    print("best, per stage (exact pipeline):")
    print(format_stage_rows(stage_rows(space.model, space.cluster, best_t, 0)))


def space_digits(searcher) -> np.ndarray:
    return searcher._pending if isinstance(searcher, PlacementMCMC) else searcher._digits
