"""Space options shared by `plansweep rank`, `plansweep sweep` and `plansweep search ...`.

    add_space_args(parser)                         adds --space, --global-batch and one flag per
                                                   dimension (comma-separated choices)
    space_from_args(args, model, cluster) -> Space the chosen space with the flags' choices;
                                                   dimensions without a flag keep the named
                                                   space's choices

Bad values raise costmodel.InputError naming the flag (exit code 2, one line).
"""

from __future__ import annotations

import argparse

from costmodel import PRECISIONS, RECOMPUTE, SCHEDULES, Cluster, InputError, Transformer
from search import EXACT_CHOICES, PARTITION_SHIFTS, Space, default_choices

SPACES = ("default", "exact", "partition", "fixed")
DEFAULT_GLOBAL_BATCH = 1536  # GPT-3 175B's batch in sequences (Brown et al. 2020, Table 2.1)

# (dimension, flag, kind): kind "int" >= 1, "zero" 0-3, "shift" any integer, a tuple of names,
# or "bool".
SPACE_FLAGS = (
    ("dp", "--dp", "int"),
    ("tp", "--tp", "int"),
    ("pp", "--pp", "int"),
    ("cp", "--cp", "int"),
    ("micro_batch", "--micro-batch", "int"),
    ("microbatches", "--microbatches", "int"),
    ("schedule", "--schedule", SCHEDULES),
    ("vpp", "--vpp", "int"),
    ("recompute", "--recompute", RECOMPUTE),
    ("sequence_parallel", "--sequence-parallel", "bool"),
    ("zero_stage", "--zero-stage", "zero"),
    ("precision", "--precision", PRECISIONS),
    ("overlap_dp", "--overlap-dp", "bool"),
    ("stage_shift", "--stage-shift", "shift"),
    ("stage_recompute", "--stage-recompute", RECOMPUTE),
)


def add_space_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group(
        "strategy space", "comma-separated choices per dimension; a dimension without a flag keeps the "
        "--space's choices (without --dp, dp = GPUs / (tp pp cp))")
    g.add_argument("--space", default="default", metavar="{" + ",".join(SPACES) + "}",
                   help="default: plansweep rank's space; exact: GPT-3-scale global degrees, micro-batch, "
                   "schedule, recompute, ZeRO; partition: exact + uneven stages and per-stage recompute; fixed: only "
                   "the dimensions given by flags vary, the rest keep single defaults (1F1B, no recompute, "
                   "bf16, ...)")
    g.add_argument("--global-batch", metavar="N", default=None,
                   help=f"sequences per iteration (default {DEFAULT_GLOBAL_BATCH})")
    g.add_argument("--partial-gpus", action="store_true",
                   help="degrees may use fewer GPUs than the cluster has (default: all of them)")
    for dest, flag, kind in SPACE_FLAGS:
        what = ("names among " + ",".join(kind)) if isinstance(kind, tuple) else {
            "int": "integers >= 1", "zero": "ZeRO stages 0-3", "bool": "true,false",
            "shift": "layer offsets, e.g. --stage-shift=-2,-1,0,1,2"}[kind]
        g.add_argument(flag, dest="space_" + dest, metavar="V,..", default=None, help=what)


def _parse_list(text: str, flag: str, kind) -> list:
    items = [x.strip() for x in str(text).split(",")]
    if not items or any(x == "" for x in items):
        raise InputError(flag, "a comma-separated list of values", text)
    if isinstance(kind, tuple):
        bad = [x for x in items if x.lower() not in kind]
        if bad:
            raise InputError(flag, "names among " + ", ".join(kind), bad[0])
        out = [x.lower() for x in items]
    elif kind == "bool":
        bad = [x for x in items if x.lower() not in ("true", "false", "1", "0")]
        if bad:
            raise InputError(flag, "true or false", bad[0])
        out = [x.lower() in ("true", "1") for x in items]
    else:
        try:
            out = [int(x) for x in items]
        except ValueError:
            raise InputError(flag, "comma-separated integers", text) from None
        lo, hi = {"int": (1, None), "zero": (0, 3), "shift": (None, None)}[kind]
        bad = [x for x in out if (lo is not None and x < lo) or (hi is not None and x > hi)]
        if bad:
            rng = f"integers >= {lo}" if hi is None else f"integers in [{lo}, {hi}]"
            raise InputError(flag, rng, bad[0])
    if len(set(out)) != len(out):
        raise InputError(flag, "distinct values", text)
    return out


def space_from_args(args: argparse.Namespace, model: Transformer, cluster: Cluster) -> Space:
    """The Space the flags describe (see the module docstring)."""
    if args.space not in SPACES:
        raise InputError("--space", "one of " + ", ".join(SPACES), args.space)
    if args.global_batch is None:
        batch = DEFAULT_GLOBAL_BATCH
    else:
        try:
            batch = int(args.global_batch)
        except ValueError:
            raise InputError("--global-batch", "an integer >= 1", args.global_batch) from None
        if batch < 1:
            raise InputError("--global-batch", "an integer >= 1", batch)
    given = {}
    for dest, flag, kind in SPACE_FLAGS:
        text = getattr(args, "space_" + dest, None)
        if text is not None:
            given[dest] = _parse_list(text, flag, kind)
    if "micro_batch" in given and "microbatches" in given:
        raise InputError("--microbatches", "either --micro-batch or --microbatches, not both", given["microbatches"])
    if args.space == "default":
        base = default_choices(model, cluster)
    elif args.space == "fixed":
        base = {}
    else:
        base = dict(EXACT_CHOICES)
        if args.space == "partition":
            base.pop("recompute")
            base.update(stage_shift=list(PARTITION_SHIFTS), stage_recompute=list(RECOMPUTE))
    if "microbatches" in given:
        base.pop("micro_batch", None)
    if "stage_recompute" in given:
        base.pop("recompute", None)
    if "recompute" in given and args.space == "partition" and "stage_recompute" not in given:
        base.pop("stage_recompute", None)
    choices = {**base, **given}
    flags = {dest: flag for dest, flag, _ in SPACE_FLAGS}
    try:
        space = Space.from_options(model, cluster, global_batch=batch, base="fixed",
                                   all_gpus=not args.partial_gpus, **choices)
    except InputError as exc:
        name = exc.argument
        raise InputError(flags.get(name.split(".")[0], name), exc.expected, exc.got) from None
    if space.valid_count() == 0:  # nothing to sweep, rank or search: say so before writing anything
        raise InputError("space options", "choices with at least one valid strategy (degrees that use the "
                         f"{cluster.num_gpus} GPUs, dp x micro-batch dividing the global batch, tp dividing the heads)",
                         f"none of {space.size:,} combinations valid with global batch {batch}")
    return space
