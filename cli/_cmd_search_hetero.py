"""The placement space of `plansweep sweep|rank|search ... --cluster HETERO`.

    plansweep search mcmc --cluster a100x64+h100x64 --model gpt3-175b --budget 20000
    plansweep sweep --cluster a100x64+h100x64 --model gpt3-175b --out RUN_DIR

On a heterogeneous cluster (a preset of costmodel.hetero_names() or a file with ``pools``) the
grid and the searchers run over search.HeteroSpace (per stage: pool, dp, tp, rank order, layers; globally:
pp, micro-batches, schedule, recompute, ZeRO, SP, and ep for an MoE model) and the driver evaluates with
costmodel.evaluate (a StrategyTable with placements). This module builds that space from
the space flags.
"""

from __future__ import annotations

from costmodel import InputError
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
# Placement grids up to this many points are listed whole to check that one is valid.
EXACT_CHECK_POINTS = 1 << 16
HETERO_FLAGS = {"pp": "--pp", "dp": "--dp", "tp": "--tp", "microbatches": "--microbatches",
                "schedule": "--schedule", "recompute": "--recompute", "zero_stage": "--zero-stage",
                "sequence_parallel": "--sequence-parallel", "vpp": "--vpp", "ep": "--ep"}


def hetero_space_from_args(args, model, cluster, defaults=HETERO_DEFAULTS) -> HeteroSpace:
    """The placement space of `plansweep sweep|search` on a heterogeneous cluster: the space flags
    --pp --dp --tp --microbatches --schedule --recompute --zero-stage --sequence-parallel --vpp
    --ep (an MoE model; default: the divisors of its experts; others are refused), ``defaults`` elsewhere."""
    from cli._space_args import SPACE_FLAGS, global_batch, parse_list
    from cli._specs import framework_list, number_list

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
        choices["dp2"] = tuple(number_list(dp2, "--dp2", int, "comma-separated integers >= 0 holding 0, e.g. 0,1,2,4"))
    frameworks = framework_list(getattr(args, "framework", None))  # one, or a framework dimension
    try:
        space = HeteroSpace.from_options(model, cluster, global_batch=batch, framework=frameworks,
                                         **choices)
    except InputError as exc:
        flag = "--dp2" if exc.argument == "dp2" else HETERO_FLAGS.get(exc.argument, exc.argument)
        raise InputError(flag, exc.expected, exc.got) from None
    _check_some_placement(space, batch)
    return space


def _check_some_placement(space: HeteroSpace, batch: int) -> None:
    """InputError naming the space options where no placement of ``space`` is valid (nothing to
    sweep, rank or search: said before anything is written). A grid of at most EXACT_CHECK_POINTS
    is listed; a larger one is drawn from (HeteroSpace.random_digits, which falls back on walks from
    the start points), so a space whose valid placements are too rare to draw is refused too."""
    import numpy as np

    if space.size <= EXACT_CHECK_POINTS:
        found = space.valid_indices(0, space.size).size > 0
    else:
        try:
            found = len(space.random_digits(np.random.default_rng(0), 1)) > 0
        except InputError:
            found = False
    if not found:
        raise InputError("space options", "choices with at least one valid placement (stages of at least one "
                         "layer, pools not over-subscribed, dp x micro-batches dividing the global batch, tp "
                         "dividing the heads)", f"none of {space.size:,} combinations valid with global batch {batch}")
