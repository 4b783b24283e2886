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


def space_digits(searcher) -> np.ndarray:
    return searcher._pending if isinstance(searcher, PlacementMCMC) else searcher._digits
