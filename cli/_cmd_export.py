"""`plansweep export`: one plan as a launch configuration for Megatron-LM, torchtitan or DeepSpeed.

The plan is the strategy of `plansweep evaluate` (flags or --strategy FILE) or the N-th best
row of a run directory (--run DIR --rank N). It is evaluated first: a plan the cost model
refuses (tp not dividing the heads, ...) is refused here with evaluate's message, and one that
does not fit in memory is exported with a warning on stderr. The formats are cli._export's.

--framework names the launch target (its format: Megatron-LM, torchtitan, DeepSpeed, or, named
megatron-deepspeed or deepspeed-flash2, Megatron-DeepSpeed) and, for a plan given by flags, the
profile it is priced under. A run's rows carry the profile they were
priced under, which may be a variant of the target's (megatron-core-deepep launches as Megatron-LM
with the flex dispatcher): with --run the plan is the N-th best among the rows whose framework
launches in the target's format, priced and written under the row's own profile, so that what is
exported is what the run ranked. A run without such rows (priced under generic, or a framework of
another format) gives its N-th best row priced again under --framework's profile, said on stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cli import COMMAND_HELP
from cli._cmd_evaluate import add_seq_len_arg, add_strategy_args, build_strategy, strategy_reason_error
from cli._export import MEGATRON_DEEPSPEED_PROFILES, MEGATRON_PROFILES, PLAN_KEYS, WRITERS, canonical_plan
from cli._specs import load_cluster, load_model, one_framework, reason_error, strategy_from_mapping
from costmodel import REASONS, HeteroCluster, InputError, evaluate
from costmodel._codes import name_words
from costmodel._files import check_file_path, replaced_for

# Framework profile (costmodel._frameworks) -> launch format (cli._export.WRITERS).
EXPORT_FORMAT = {**dict.fromkeys(MEGATRON_PROFILES, "megatron"), "fsdp2": "torchtitan", "deepspeed": "deepspeed",
                 "deepspeed-flash2": "megatron-deepspeed"}
# The profiles whose rows launch in each format (a run's rows priced under any of them).
FORMAT_PROFILES = {"megatron": MEGATRON_PROFILES, "torchtitan": ("fsdp2",), "deepspeed": ("deepspeed",),
                   "megatron-deepspeed": MEGATRON_DEEPSPEED_PROFILES}


def export_format(word: str, profile: str) -> str:
    """The launch format --framework names: megatron-deepspeed (the name, an alias of the deepspeed profile) writes
    Megatron-DeepSpeed's launch; any other name its profile's format (EXPORT_FORMAT)."""
    return "megatron-deepspeed" if "-".join(name_words(word)) == "megatron-deepspeed" else EXPORT_FORMAT[profile]


def register(sub) -> None:
    p = sub.add_parser("export", help=COMMAND_HELP["export"],
                       description="Write one plan (evaluate's strategy flags, --strategy FILE, or the N-th best "
                       "row of a run directory) as a launch configuration. A dimension the framework cannot "
                       "express is an error (exit code 2), never dropped.")
    p.add_argument("--framework", required=True, metavar="NAME",
                   help="the framework the plan is launched with (and, for a plan given by flags, priced under; a "
                   "run's row is priced under its own profile, a variant of this one's format): megatron-core (alias "
                   "megatron), megatron-2021, megatron-core-a2a-overlap, megatron-core-deepep or "
                   "megatron-core-deepep-a2a-overlap: a torchrun command line of Megatron-LM arguments (core_v0.15.0; "
                   "the MoE profiles pick the token dispatcher and the all-to-all overlap); "
                   "fsdp2 (alias torchtitan): a torchtitan TOML job config (v0.2.2, the last with TOML configs); "
                   "deepspeed: ds_config JSON and the launcher's parallel sizes for your own script (v0.19.5); "
                   "megatron-deepspeed, or deepspeed-flash2 (its FlashAttention-2): a bash script writing "
                   "ds_config.json and launching Megatron-DeepSpeed's pretrain_gpt.py (4efb479), the code the "
                   "deepspeed profiles price: Megatron's tensor and sequence parallelism and selective recompute, "
                   "DeepSpeed-Ulysses for cp")
    p.add_argument("--model", default=None, help="preset name or JSON/YAML file (default gpt3-175b; with --run: "
                   "the run's)")
    p.add_argument("--cluster", default=None,
                   help="preset or JSON/YAML file (default h100x1024; with --run: the run's)")
    p.add_argument("--hardware", help="efficiency constants fitted by `plansweep calibrate`")
    add_seq_len_arg(p)
    add_strategy_args(p)
    p.add_argument("--run", metavar="DIR", help="take the plan from this run directory's best rows")
    p.add_argument("--rank", type=int, default=None, metavar="N", help="with --run: the N-th best plan (default 1)")
    p.add_argument("--out", metavar="FILE", help="write here instead of stdout")
    p.set_defaults(func=run)


def _from_run(args, target: str, fmt: str):
    """(model, cluster, StrategyTable, the row's framework) of the args.rank-th best row of the run args.run among the
    rows whose framework launches in the format ``fmt`` (FORMAT_PROFILES); of every row where none does (framework
    None: priced under ``target``). Parts whose footer or pages do not read are left out and named, as show does."""
    from sweep._results import STRATEGY_COLUMNS
    from sweep._rundir import cluster_from_dict, model_from_dict
    from sweep._runview import best_rows, read_view

    rank = 1 if args.rank is None else args.rank
    if rank < 1:
        raise InputError("--rank", "an integer >= 1", rank)
    for flag, value, why in (("--seq-len", args.seq_len, "the plan is priced on the run's model"),
                             ("--hardware", args.hardware, "the plan is priced on the run's cluster")):
        if value is not None:
            raise InputError(flag, f"no {flag} beside --run ({why})", value)

    def best(view):
        study = _run_study(view, args)
        launched = [f for f in study.frameworks() if f in FORMAT_PROFILES[fmt]]
        return study, launched, best_rows(study.of_frameworks(launched) if launched else study, rank).to_pylist(), view

    study, launched, rows, view = read_view(args.run, best)
    skipped = view.skipped_line()
    if len(rows) < rank:
        raise InputError("--rank", f"at most the run's {len(rows)} distinct feasible plans"
                         + (f" ({skipped})" if skipped else ""), rank)
    if skipped:
        print(f"plansweep export: {skipped}", file=sys.stderr)
    row = rows[rank - 1]
    data = {k: row[k] for k in STRATEGY_COLUMNS if row.get(k) is not None}
    return model_from_dict(dict(study.model)), cluster_from_dict(dict(study.cluster)), strategy_from_mapping(
        data, "--run"), row.get("framework") if launched else None


def _run_study(view, args):
    """The study of the run whose plan is exported: the one the run holds, or among several the one --model and
    --cluster name; a --model or --cluster that names no study of the run is refused (the plan is the run's)."""
    studies = view.studies()
    wanted = [s for s in studies if (args.model is None or s.model.get("name") == args.model)
              and (args.cluster is None or s.cluster.get("name") == args.cluster)]
    if len(wanted) != 1:
        names = "; ".join(s.name for s in studies)
        if len(studies) > 1:
            raise InputError("--model/--cluster", "the names of one study of the run: " + names,
                             f"{args.model} on {args.cluster}")
        flag, value = ("--model", args.model) if args.model is not None and args.model != studies[0].model.get(
            "name") else ("--cluster", args.cluster)
        raise InputError(flag, f"the run's own {flag[2:]} or none (the plan is the run's row, of {names})", value)
    study = wanted[0]
    if "pools" in study.cluster:
        raise InputError("--run", "a run on a homogeneous cluster (placement plans have per-stage pools)", args.run)
    return study


def run(args: argparse.Namespace) -> int:
    target = one_framework(args.framework, why="the launch target")
    if target not in EXPORT_FORMAT:
        raise InputError("--framework", "a framework with a launch format: " + ", ".join(EXPORT_FORMAT), args.framework)
    fmt = export_format(args.framework, target)
    profile = target  # what the plan is priced under and the writer reads (the MoE dispatcher, ...)
    if args.out is not None:
        check_file_path("--out", args.out)
    note = None  # (said once the plan is written: a refusal is its one line alone)
    if args.run:
        from sweep._rundir import check_outside_run

        check_outside_run(args.out, "--out", args.run)
        given = [f for f in ("strategy", "stage_layers", *PLAN_KEYS, "recompute_modules")
                 if getattr(args, f, None) is not None]
        if given:
            raise InputError("--run", "no strategy flags beside it (the plan is the run's row)",
                             "--" + given[0].replace("_", "-"))
        model, cluster, table, row_framework = _from_run(args, target, fmt)
        if row_framework is None:
            named = fmt if fmt == "megatron-deepspeed" else target
            note = (f"plansweep export: note: no row of the run is priced under a framework launched as {named}; "
                    f"its best row is priced again under {target}")
        profile = row_framework or target
    else:
        if args.rank is not None:
            raise InputError("--rank", "only with --run DIR", args.rank)
        model = load_model(args.model or "gpt3-175b", args.seq_len)
        cluster = load_cluster(args.cluster or "h100x1024", args.hardware)
        if isinstance(cluster, HeteroCluster):
            raise InputError("--cluster", "a homogeneous cluster (one GPU type)", cluster.name)
        table = build_strategy(args, model, cluster)
    metrics = evaluate(model, cluster, table, framework=profile)
    reason = REASONS[int(metrics["reason"][0])]
    if reason not in ("ok", "out_of_memory"):
        raise (reason_error(model, cluster, table.row(0), reason, profile) if args.run else
               strategy_reason_error(args, model, cluster, table, reason, profile))
    text = WRITERS[fmt](canonical_plan(table.row(0), model), model, cluster, profile=profile)
    if note:
        print(note, file=sys.stderr)
    if reason == "out_of_memory":
        print(f"plansweep export: warning: the plan needs {metrics['mem_total_bytes'][0] / 1e9:.1f} GB per GPU, "
              f"more than the {cluster.gpu.hbm_bytes / 1e9:.1f} GB of {cluster.gpu.name}", file=sys.stderr)
    if args.out is None:
        sys.stdout.write(text)
        return 0
    with replaced_for("--out", args.out) as tmp:
        Path(tmp).write_text(text)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0
