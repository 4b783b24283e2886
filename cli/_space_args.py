"""Space options shared by `plansweep rank`, `plansweep sweep` and `plansweep search ...`.

    add_space_args(parser)                         adds --space, --global-batch and one flag per
                                                   dimension (comma-separated choices)
    space_from_args(args, model, cluster) -> Space the chosen space with the flags' choices;
                                                   dimensions without a flag keep the named
                                                   space's choices; --framework's list (or all)
                                                   a framework dimension

Bad values raise costmodel.InputError naming the flag (exit code 2, one line).
"""

from __future__ import annotations

import argparse

from cli._specs import framework_list, number, overlap_refusal
from costmodel import RECOMPUTE, Cluster, InputError, Transformer
from costmodel._strategy import DEFAULT_GLOBAL_BATCH, DIMENSION_VALUES, GLOBAL_BATCH_MAX, dimension_values
from search import EXACT_CHOICES, PARTITION_SHIFTS, Space, default_choices
from search._space import DEFAULT_SPACE_FLAGS

SPACES = ("default", "exact", "partition", "fixed")

# The dimensions with a flag, in --help order: the flag is the name with dashes, the values and
# their spellings those of costmodel's DIMENSION_VALUES.
SPACE_DIMS = ("dp", "tp", "pp", "light_ends", "cp", "ep", "etp", "micro_batch", "microbatches", "schedule", "vpp", "recompute",
              "sequence_parallel", "zero_stage", "precision", "overlap_dp", "stage_shift", "stage_recompute")
SPACE_FLAGS = tuple((dim, "--" + dim.replace("_", "-")) for dim in SPACE_DIMS)


def _what(dim: str) -> str:
    kind = DIMENSION_VALUES[dim]
    if kind is bool:
        return "true,false"
    if all(isinstance(x, str) for x in kind):
        return "names among " + ",".join(kind)
    lo, hi = kind
    return ("integers, e.g. --stage-shift=-2,-1,0,1,2" if lo is None else f"integers >= {lo}" if hi is None
            else f"integers {lo}-{hi}")


def add_space_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group(
        "strategy space", "comma-separated choices per dimension; a dimension without a flag keeps the "
        "--space's choices (without --dp, dp is derived: GPUs / (tp pp cp), or with idle GPUs allowed the "
        "largest dp that fits and divides the batch)")
    g.add_argument("--space", default="default", metavar="{" + ",".join(SPACES) + "}",
                   help="default: plansweep rank's space, derived from the model and the cluster (tp | heads "
                   "within a node, pp from the layer count with balanced stages and first/last stages 0-2 layers "
                   "lighter, ZeRO 0-3, idle GPUs allowed); exact: GPT-3-scale global degrees (pp powers of two, "
                   "balanced stages), micro-batch, schedule, recompute, ZeRO; partition: exact + uneven stages and "
                   "per-stage recompute; fixed: only the dimensions given by flags vary, the rest keep single "
                   "defaults (1F1B, no recompute, bf16, ...)")
    g.add_argument("--global-batch", metavar="N", default=None,
                   help=f"sequences per iteration (default {DEFAULT_GLOBAL_BATCH}); sweep and search --out: a "
                   "comma-separated list, one study each")
    gpus = g.add_mutually_exclusive_group()
    gpus.add_argument("--partial-gpus", action="store_true", help="degrees may use fewer GPUs than the cluster has "
                      "(dp the largest that fits); the default space's default")
    gpus.add_argument("--all-gpus", action="store_true", help="degrees must use every GPU of the cluster; the default "
                      "of the exact, partition and fixed spaces")
    for dim, flag in SPACE_FLAGS:
        g.add_argument(flag, dest="space_" + dim, metavar="V,..", default=None, help=_what(dim))


def parse_list(text: str, flag: str, dim: str) -> list:
    """A flag's comma-separated values of dimension ``dim``, checked against DIMENSION_VALUES,
    in readable form (ints, lower-case names, bools); InputError naming the flag."""
    items = [x.strip() for x in str(text).split(",")]
    if not items or any(x == "" for x in items):
        raise InputError(flag, "a comma-separated list of values", text)
    kind = DIMENSION_VALUES[dim]
    if kind is not bool and not all(isinstance(x, str) for x in kind):
        try:
            items = [int(x) for x in items]
        except ValueError:
            raise InputError(flag, "comma-separated integers", text) from None
    try:
        numbers = dimension_values(dim, items)
    except InputError as exc:
        raise InputError(flag, exc.expected, exc.got) from None
    out = [bool(x) for x in numbers] if kind is bool else [str(x).lower() for x in items] if isinstance(
        items[0], str) else items
    if len(set(out)) != len(out):
        raise InputError(flag, "distinct values", text)
    return out


def global_batch(args: argparse.Namespace) -> int:
    """--global-batch, DEFAULT_GLOBAL_BATCH when not given."""
    if args.global_batch is None:
        return DEFAULT_GLOBAL_BATCH
    batch = number(args.global_batch, "--global-batch", int, 1)
    if batch > GLOBAL_BATCH_MAX:
        raise InputError("--global-batch", f"an integer in [1, {GLOBAL_BATCH_MAX:,}]", batch)
    return batch


def space_from_args(args: argparse.Namespace, model: Transformer, cluster: Cluster) -> Space:
    """The Space the flags describe (see the module docstring)."""
    if args.space not in SPACES:
        raise InputError("--space", "one of " + ", ".join(SPACES), args.space)
    batch = global_batch(args)
    given = {}
    for dim, flag in SPACE_FLAGS:
        text = getattr(args, "space_" + dim, None)
        if text is not None:
            given[dim] = parse_list(text, flag, dim)
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
    if "stage_shift" in given and "light_ends" not in given:
        base.pop("light_ends", None)
    if "stage_recompute" in given:
        base.pop("recompute", None)
    if "recompute" in given and args.space == "partition" and "stage_recompute" not in given:
        base.pop("stage_recompute", None)
    choices = {**base, **given}
    flags = dict(SPACE_FLAGS)
    all_gpus = DEFAULT_SPACE_FLAGS["all_gpus"] if args.space == "default" else True
    all_gpus = True if getattr(args, "all_gpus", False) else False if args.partial_gpus else all_gpus
    uneven = DEFAULT_SPACE_FLAGS["uneven"] if args.space == "default" else args.space == "exact"
    if "stage_shift" in choices:
        uneven = False
    frameworks = framework_list(getattr(args, "framework", None))  # one, or a framework dimension
    for name in frameworks if "overlap_dp" in given else ():  # a profile that decides the overlap itself runs one
        refusals = [overlap_refusal(name, v, "--overlap-dp", args.space_overlap_dp) for v in given["overlap_dp"]]
        if all(refusals):
            raise refusals[0]
    try:
        space = Space.from_options(model, cluster, global_batch=batch, base="fixed", all_gpus=all_gpus,
                                   uneven=uneven, framework=frameworks, **choices)
    except InputError as exc:
        name = exc.argument
        raise InputError(flags.get(name.split(".")[0], name), exc.expected, exc.got) from None
    if space.valid_count() == 0:  # nothing to sweep, rank or search: say so before writing anything
        raise InputError("space options", "choices with at least one valid strategy (degrees that use "
                         f"{'the' if all_gpus else 'at most the'} {cluster.num_gpus} GPUs, dp x micro-batch dividing the "
                         "global batch, tp dividing the heads)",
                         f"none of {space.size:,} combinations valid with global batch {batch}")
    return space
