"""Drawn search problems: problems nobody tuned the searchers on, drawn at random from the presets.

A problem is a JSON-able spec (``spec_space`` builds its space; ``--problem`` of
bench_search_problems.py takes one back):

    {"kind": "exact" | "default" | "partition" | "moe" | "placement",
     "model": preset, "cluster": preset (a mixed-cluster preset for "placement"),
     "global_batch": int, "framework": profile (costmodel._frameworks),
     "base": "fixed" | "default" (Space.from_options; not for "placement"),
     "choices": {dimension: [readable values]}}

``draw_specs(rng)`` yields candidate specs forever; ``draw_problems`` keeps those whose grid can
be listed (at most ``max_valid`` valid points), prices every valid point once (costmodel.evaluate,
closed forms: what the searchers see) and sorts them into the main list (at least ``min_feasible``
feasible points) and the mostly-infeasible list (under 1% feasible, at least one feasible point).
Kinds:
    exact      the exact space's dimensions (search.EXACT_CHOICES), every GPU used, each dimension
               narrowed to a random subset of its choices
    default    rank's default space (search.default_choices: idle GPUs allowed, lighter-ends
               stages, ZeRO 0-3) narrowed the same way
    moe        an MoE preset on the exact or the default space, with expert parallelism (ep)
    partition  one tp / pp / schedule, per-stage boundary shifts and per-stage recompute
    placement  stages placed on the pools of a mixed cluster (search.HeteroSpace)
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from costmodel import InputError, cluster_preset, evaluate, hetero_preset, memory_screen, model_preset
from costmodel._frameworks import FRAMEWORKS
from search import EXACT_CHOICES, HeteroSpace, Space, default_choices

DENSE = ("gpt3-175b", "megatron-22b", "llama3-8b", "llama3-70b", "megatron-175b", "llama3-405b")
MOE = ("mixtral-8x7b", "mixtral-8x22b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3")
GPUS = ("a100", "h100", "h200")
CLUSTER_SIZES = (64, 128, 256, 512, 1024)
GLOBAL_BATCHES = (256, 512, 768, 1024, 1536, 2048)
MIXED = ("a100x64+h100x64", "h100x64-400g+a100x64-100g", "a100x32+h100x64", "h100x32+h200x32")
# kind -> weight of the draw
KINDS = {"exact": 3, "default": 3, "moe": 2, "partition": 1, "placement": 1}
# A dimension keeps each of its choices with a probability drawn per problem from this range (at
# least one choice; two for tp, pp and ep).
KEEP = (0.6, 0.95)
MOSTLY_INFEASIBLE = 0.01


def _subset(rng: np.random.Generator, values, keep: float = 0.6, at_least: int = 1) -> list:
    """A random non-empty subset of ``values`` in their order (at least ``at_least`` of them)."""
    values = list(values)
    mask = rng.random(len(values)) < keep
    while mask.sum() < min(at_least, len(values)):
        mask[rng.integers(len(values))] = True
    return [v for v, m in zip(values, mask, strict=True) if m]


def _plain(v):
    return v.item() if isinstance(v, np.generic) else v


def _frameworks_for(moe: bool) -> list[str]:
    """Profiles that can run the problem (an MoE problem: those with expert parallelism)."""
    return [n for n, f in FRAMEWORKS.items() if not moe or f.expert_parallel]


def draw_spec(rng: np.random.Generator) -> dict:
    """One candidate problem (module docstring), a pure function of ``rng``'s state."""
    kinds = list(KINDS)
    kind = kinds[rng.choice(len(kinds), p=np.array(list(KINDS.values())) / sum(KINDS.values()))]
    moe = kind == "moe"
    model_name = str(rng.choice(MOE if moe else DENSE))
    model = model_preset(model_name)
    batch = int(rng.choice(GLOBAL_BATCHES))
    framework = str(rng.choice(_frameworks_for(moe)))
    if kind == "placement":
        return _placement_spec(rng, model_name, model, batch, framework)
    cluster = f"{rng.choice(GPUS)}x{int(rng.choice(CLUSTER_SIZES))}"
    spec = {"kind": kind, "model": model_name, "cluster": cluster, "global_batch": batch, "framework": framework}
    if kind == "partition":
        return {**spec, "base": "fixed", "choices": _partition_choices(rng, model, cluster)}
    base = "fixed" if kind == "exact" or (moe and rng.random() < 0.5) else "default"
    if base == "fixed":
        opts = {**EXACT_CHOICES, "pp": [p for p in EXACT_CHOICES["pp"] if p <= model.layers]}
        if moe:
            opts["ep"] = [e for e in (1, 2, 4, 8, 16, 32, 64) if model.experts % e == 0]
    else:
        opts = default_choices(model, cluster_preset(cluster))
    keep = float(rng.uniform(*KEEP))
    choices = {k: [_plain(x) for x in _subset(rng, v, keep, at_least=2 if k in ("tp", "pp", "ep") else 1)]
               for k, v in opts.items()}
    return {**spec, "base": base, "choices": choices}


def _partition_choices(rng, model, cluster: str) -> dict:
    c = cluster_preset(cluster)
    tp = int(rng.choice([t for t in (2, 4, 8) if t <= c.gpus_per_node and model.heads % t == 0]))
    pp = int(rng.choice([p for p in (2, 4) if p <= model.layers]))
    width = int(rng.choice([2, 3])) if pp == 4 else int(rng.choice([3, 4, 6]))
    return {"tp": [tp], "pp": [pp], "micro_batch": _subset(rng, [1, 2, 4], keep=0.5),
            "schedule": [str(rng.choice(["1f1b", "zb-h1"]))], "zero_stage": _subset(rng, [0, 1], keep=0.7),
            "sequence_parallel": [True], "stage_shift": list(range(-width, width + 1)),
            "stage_recompute": ["none", "selective", "full"]}


def _placement_spec(rng, model_name: str, model, batch: int, framework: str) -> dict:
    pp = [int(rng.choice([2, 4]))]
    spec = {"kind": "placement", "model": model_name, "cluster": str(rng.choice(MIXED)), "global_batch": batch,
            "framework": framework}
    choices = {"pp": pp, "dp": _subset(rng, (1, 2, 4, 8, 16), at_least=2) if pp[0] == 2 else [int(rng.choice([4, 8]))],
               "tp": _subset(rng, (2, 4, 8), at_least=2) if pp[0] == 2 else [int(rng.choice([4, 8]))],
               "order": ["tp-inner"], "max_shift": int(rng.choice([0, 2, 4])),
               "shift_layers": 1, "microbatches": _subset(rng, (8, 16, 32, 64, 128), at_least=2),
               "schedule": _subset(rng, ("1f1b", "interleaved", "zb-h1") if framework == "generic" else ("1f1b",)),
               "recompute": _subset(rng, ("none", "selective", "full"), at_least=2), "zero_stage": [0, 1],
               "sequence_parallel": [True]}
    return {**spec, "choices": choices}


def spec_space(spec: dict):
    """The search space of a problem spec (InputError where the spec is not one)."""
    model = model_preset(spec["model"])
    choices = dict(spec["choices"])
    if spec["kind"] == "placement":
        return HeteroSpace.from_options(model, hetero_preset(spec["cluster"]), global_batch=int(spec["global_batch"]),
                                        framework=spec["framework"], **{k: tuple(v) if isinstance(v, list) else v
                                                                         for k, v in choices.items()})
    uneven = True if spec.get("base") == "fixed" else None
    return Space.from_options(model, cluster_preset(spec["cluster"]), global_batch=int(spec["global_batch"]),
                              base=spec.get("base", "default"), uneven=uneven, framework=spec["framework"], **choices)


def spec_key(spec: dict) -> str:
    """A short stable name of a spec (the cache's key)."""
    return hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]


def spec_line(spec: dict) -> str:
    """One readable line naming a problem."""
    c = spec["choices"]
    extra = ""
    if spec["kind"] == "partition":
        extra = f" tp {c['tp'][0]} pp {c['pp'][0]} {c['schedule'][0]}, shifts +-{max(c['stage_shift'])}"
    elif spec["kind"] == "placement":
        extra = f" pp {c['pp'][0]}, shift {c['max_shift']}"
    return (f"{spec['kind']}: {spec['model']}, {spec['cluster']}, batch {spec['global_batch']}, "
            f"{spec['framework']}{extra}")


def grid_of(space, max_valid: int):
    """(valid digits' table, None) or (None, why) where the grid has more than ``max_valid`` valid points."""
    count = space.valid_count() if hasattr(space, "valid_count") else None
    if count is not None and count > max_valid:
        return None, f"{count:,} valid points"
    if count is None and space.size > 50 * max_valid:
        return None, f"{space.size:,} grid points"
    idx, table = space.rows(0, space.size)
    if len(idx) > max_valid:
        return None, f"{len(idx):,} valid points"
    return table, None


def price_grid(space, table) -> dict:
    """The grid's figures: valid and feasible points, optimum tokens/s and where it is."""
    m = evaluate(space.model, space.cluster, table, framework=space.framework)
    tps = np.where(m["feasible"], m["tokens_per_s"], 0.0)
    best = int(np.argmax(tps))
    return {"valid": len(table), "feasible": int(m["feasible"].sum()), "optimum": float(tps[best]),
            "within_1pct": int((tps >= 0.99 * tps[best]).sum()) if tps[best] > 0 else 0}


def cheap_feasible(space, table) -> int | None:
    """Points that fit in memory (search._screen's memory screen, no step times), None where the
    space has per-stage or placement dimensions (then only pricing tells)."""
    if not isinstance(space, Space) or space.partitioned:
        return None
    _, reason = memory_screen(space.model, space.cluster, table, space.framework)
    return int((reason == 0).sum())


def load_cache(path: str | None) -> dict:
    if not path or not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def save_cache(path: str | None, cache: dict) -> None:
    if not path:
        return
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    cache = {**load_cache(path), **cache}  # another run may have added problems since
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(cache, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def draw_problems(n: int, seed: int, *, max_valid: int, min_feasible: int, infeasible_max: int,
                  cache_path: str | None = None, log=print, max_tries: int = 2000, kinds=None):
    """(main, mostly_infeasible): lists of (spec, grid figures), in draw order: ``n`` problems with
    at least ``min_feasible`` feasible points, and up to ``infeasible_max`` with under 1% feasible
    (at least one), met along the way. Candidates are drawn from np.random.default_rng([seed]);
    ``kinds`` (names of KINDS): only the candidates of those kinds are kept (the same stream, so they
    are the problems of those kinds the whole draw would meet, and more of them)."""
    rng = np.random.default_rng([seed])
    cache = load_cache(cache_path)
    main, rare = [], []
    for _ in range(max_tries):
        if len(main) >= n:
            break
        spec = draw_spec(rng)
        if kinds is not None and spec["kind"] not in kinds:
            continue
        key = spec_key(spec)
        if key in cache:
            fig = cache[key]
        else:
            fig = _figures(spec, max_valid, min_feasible)
            cache[key] = fig
            save_cache(cache_path, cache)
        if "skip" in fig or fig["valid"] > max_valid:
            continue
        share = fig["feasible"] / fig["valid"]
        if fig["feasible"] >= min_feasible and share >= MOSTLY_INFEASIBLE:
            main.append((spec, fig))
            log(f"# drew {len(main)}/{n}: {spec_line(spec)}: {fig['valid']:,} valid, {fig['feasible']:,} feasible")
        elif 0 < share < MOSTLY_INFEASIBLE and len(rare) < infeasible_max:
            rare.append((spec, fig))
            log(f"# drew mostly-infeasible {len(rare)}: {spec_line(spec)}: {fig['valid']:,} valid, "
                f"{fig['feasible']:,} feasible")
    return main, rare


def _figures(spec: dict, max_valid: int, min_feasible: int) -> dict:
    try:
        space = spec_space(spec)
    except InputError as exc:
        return {"skip": f"not a space: {exc}"}
    if space.size == 0 or (not isinstance(space, HeteroSpace) and len(space.dims) == 0):
        return {"skip": "one point"}
    table, why = grid_of(space, max_valid)
    if table is None:
        return {"skip": why}
    if len(table) < min_feasible:
        return {"skip": f"{len(table)} valid points"}
    fits = cheap_feasible(space, table)
    if fits is not None and fits < min_feasible and (fits == 0 or fits / len(table) >= MOSTLY_INFEASIBLE):
        return {"skip": f"{fits} feasible points"}
    return price_grid(space, table)
