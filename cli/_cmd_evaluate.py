"""`plansweep evaluate`: one strategy, its time and memory broken down."""

from __future__ import annotations

import math

import numpy as np

from cli import COMMAND_HELP, print_json
from cli._tight import TIGHT_PHRASE, memory_entry
from cli._specs import (
    ALL_FRAMEWORKS,
    framework_list,
    load_cluster,
    load_model,
    number_list,
    read_mapping,
    overlap_refusal,
    read_strategy,
    reason_error,
    strategy_from_mapping,
    type_partition_error,
)
from costmodel import (
    DEFAULT_FRAMEWORK,
    FRAMEWORKS,
    REASONS,
    FailureModel,
    HeteroCluster,
    InputError,
    StrategyTable,
    as_hetero,
    evaluate,
    plan_goodput,
)
from costmodel._evaluate import stage_breakdown, stage_rows
from costmodel._feasibility import layout_refused, type_partition_refused
from costmodel._goodput import FAILURE_BOUNDS
from costmodel._frameworks import (
    GRAD_DTYPE_BYTES,
    MAIN_PARAMS_DTYPE_BYTES,
    MOMENTS_DTYPE_BYTES,
    Framework,
    framework_preset,
    with_state_dtypes,
)
from costmodel._strategy import (
    DEFAULT_GLOBAL_BATCH,
    GLOBAL_BATCH_MAX,
    RECOMPUTE_MODULES,
    framework_codes,
    hetero_from_mapping,
)

MLP_GLOBAL_BATCH = 8192  # an MLP's default global batch: seed 000's MLP problem (batch 8192)

STRATEGY_FLAGS = (("dp", int), ("tp", int), ("pp", int), ("cp", int), ("ep", int), ("etp", int), ("micro_batch", int),
                  ("global_batch", int), ("vpp", int), ("zero_stage", int), ("schedule", str), ("recompute", str),
                  ("recompute_modules", str), ("precision", str))
FLAG_HELP = {"recompute_modules": "with --recompute selective (its default then): the modules recomputed, as "
             "Megatron-Core's --recompute-modules names them, comma-separated: " + ", ".join(RECOMPUTE_MODULES)
             + " (default: the framework's own selective policy; megatron-core profiles only)"}


def add_spec_args(p, *, frameworks: bool = True) -> None:
    """--model, --seq-len, --cluster, --hardware and --framework (``frameworks``: a list or all; else one)."""
    p.add_argument("--model", default="gpt3-175b", help="preset name or JSON/YAML file (default gpt3-175b)")
    add_seq_len_arg(p)
    p.add_argument("--cluster", default="h100x1024",
                   help="preset (e.g. h100x1024, dgx-a100-1024, a100x64+h100x64) or JSON/YAML file (with "
                   "'pools' for a heterogeneous cluster)")
    p.add_argument("--hardware", help="efficiency constants fitted by `plansweep calibrate`")
    add_framework_arg(p, many=frameworks)


def add_seq_len_arg(p) -> None:
    p.add_argument("--seq-len", metavar="N", default=None,
                   help="tokens per training sequence, replacing the model's own (a transformer)")


FRAMEWORK_HELP = "the training framework whose schedules, sharding, overlap and attention kernel are priced"


def add_framework_arg(p, what: str = FRAMEWORK_HELP, *, many: bool = True) -> None:
    """--framework: one profile, or with ``many`` a comma-separated list or all (each a choice of the space, priced
    side by side); parsed by cli._specs.framework_list / one_framework, which name the flag on a bad word."""
    several = f"; comma-separated names, or {ALL_FRAMEWORKS}, to compare them" if many else ""
    p.add_argument("--framework", default=None, metavar="NAME",
                   help=f"{what}: " + ", ".join(FRAMEWORKS) + f" (default {DEFAULT_FRAMEWORK}{several}; "
                   "docs/frameworks.md)")


def register(sub) -> None:
    p = sub.add_parser("evaluate", help=COMMAND_HELP["evaluate"])
    add_spec_args(p)
    add_strategy_args(p)
    add_state_dtype_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--sensitivity", nargs="?", const="default", default=None, metavar="CASES",
                   help="the plan priced again with the cluster's constants moved, one case at a time: how much of "
                   "its throughput each constant holds (cases as rank --sensitivity takes them; the flag alone: "
                   "compute and memory bandwidth x0.9 and x1.1, NVLink and network x0.8 and x1.2, latency and "
                   "kernel overhead x2; one --framework)")
    from cli._timeline import add_timeline_args

    add_timeline_args(p)
    add_failure_args(p)
    p.set_defaults(func=run)


STATE_DTYPE_FLAGS = {"grad": "--grad-dtype", "main_params": "--main-params-dtype", "moments": "--moments-dtype"}


def add_state_dtype_args(p, what: str = "one --framework, one pool") -> None:
    """The dtypes the run keeps its gradients and optimizer state in (costmodel._frameworks.with_state_dtypes)."""
    g = p.add_argument_group("gradient and optimizer dtypes", "what the run keeps in memory and reduces, where it "
                             f"differs from the framework's own ({what})")
    g.add_argument("--grad-dtype", dest="grad_dtype", metavar="DTYPE",
                   help="the gradient buffer and its data-parallel reduction: " + ", ".join(GRAD_DTYPE_BYTES)
                   + " (Megatron-LM --grad-reduce-in-bf16; NeMo's grad_sync_dtype)")
    g.add_argument("--main-params-dtype", dest="main_params_dtype", metavar="DTYPE",
                   help="the optimizer's master copy of the weights: " + ", ".join(MAIN_PARAMS_DTYPE_BYTES)
                   + " (remainder: the 16 low bits of an fp32 master beside the bf16 weight; none: the 16-bit "
                   "weights are the master)")
    g.add_argument("--moments-dtype", dest="moments_dtype", metavar="DTYPE",
                   help="each of Adam's two moments: " + ", ".join(MOMENTS_DTYPE_BYTES)
                   + " (Megatron-LM --exp-avg-dtype / --exp-avg-sq-dtype)")


def state_dtypes_of(args) -> dict:
    """with_state_dtypes' keywords from the --*-dtype flags given."""
    return {k: getattr(args, f.removeprefix("--").replace("-", "_"))
            for k, f in STATE_DTYPE_FLAGS.items() if getattr(args, f.removeprefix("--").replace("-", "_"), None)}


def add_strategy_args(p) -> None:
    """One strategy as flags or a file (evaluate, replan)."""
    p.add_argument("--strategy", help="JSON/YAML file with the strategy, or a Calculon execution file (flags "
                   "override it)")
    for name, typ in STRATEGY_FLAGS:
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=typ, help=FLAG_HELP.get(name))
    p.add_argument("--sequence-parallel", dest="sequence_parallel", action="store_true", default=None)
    p.add_argument("--no-overlap-dp", dest="overlap_dp", action="store_false", default=None)
    p.add_argument("--stage-layers", help="layers per pipeline stage, comma-separated")


def add_failure_args(p) -> None:
    """The failure model's flags (costmodel.FailureModel; defaults from published runs, cited there)."""
    d = FailureModel()
    g = p.add_argument_group("failure model", "goodput's failures, checkpoints and spares (costmodel.FailureModel)")
    g.add_argument("--gpu-mtbf-h", type=float, default=d.gpu_mtbf_h,
                   help=f"mean time between failures of one GPU, hours (default {d.gpu_mtbf_h:,.0f}: Llama 3 405B's "
                   "419 interruptions in 54 days on 16,384 GPUs; Kokolis et al. 2024's 7.9 h at 1,024 GPUs: 8090)")
    g.add_argument("--restart-s", type=float, default=d.restart_s,
                   help=f"restart after a failure, checkpoint load excluded, s (default {d.restart_s:.0f})")
    g.add_argument("--ckpt-write-GBps", type=float, default=d.write_Bps_per_gpu / 1e9,
                   help="the filesystem's aggregate checkpoint write bandwidth per GPU of the cluster, GB/s "
                   f"(default {d.write_Bps_per_gpu / 1e9:.3f}: Llama 3's 2 TB/s for 16,384 GPUs)")
    g.add_argument("--ckpt-read-GBps", type=float, default=d.read_Bps_per_gpu / 1e9,
                   help=f"the same for reads, GB/s (default {d.read_Bps_per_gpu / 1e9:.3f}: 7 TB/s peak)")
    g.add_argument("--node-storage-GBps", type=float, default=d.node_storage_Bps / 1e9,
                   help=f"one node's storage NIC, GB/s each way (default {d.node_storage_Bps / 1e9:.0f}: 2 x 200 GbE)")
    g.add_argument("--hardware-fraction", type=float, default=d.hardware_fraction,
                   help=f"share of failures that take a node out (default {d.hardware_fraction}: Llama 3)")
    g.add_argument("--repair-h", type=float, default=d.repair_h,
                   help=f"hours a failed node is out; waited for when the plan leaves no idle node as a spare "
                   f"(default {d.repair_h})")
    g.add_argument("--ckpt-rank0", action="store_true",
                   help="data-parallel rank 0 writes the replicated state (legacy torch.save), instead of "
                   "spreading it over the replicas (torch.distributed.checkpoint, Megatron's fully parallel save)")


FAILURE_FLAGS = {"gpu_mtbf_h": "--gpu-mtbf-h", "restart_s": "--restart-s", "write_Bps_per_gpu": "--ckpt-write-GBps",
                 "read_Bps_per_gpu": "--ckpt-read-GBps", "node_storage_Bps": "--node-storage-GBps",
                 "hardware_fraction": "--hardware-fraction", "repair_h": "--repair-h"}


def failure_from_args(args) -> FailureModel:
    """The FailureModel of the failure flags (bandwidths from GB/s to bytes/s); InputError naming the flag and the
    value as typed."""
    try:
        return FailureModel(gpu_mtbf_h=args.gpu_mtbf_h, restart_s=args.restart_s,
                            write_Bps_per_gpu=args.ckpt_write_GBps * 1e9, read_Bps_per_gpu=args.ckpt_read_GBps * 1e9,
                            node_storage_Bps=args.node_storage_GBps * 1e9, hardware_fraction=args.hardware_fraction,
                            repair_h=args.repair_h, ckpt_spread=not args.ckpt_rank0)
    except InputError as exc:
        field = exc.argument.removeprefix("failure.")
        flag = FAILURE_FLAGS.get(field, exc.argument)
        dest = flag.removeprefix("--").replace("-", "_")
        expected = exc.expected
        if flag.endswith("GBps"):  # the range in the flag's unit
            lo, hi = FAILURE_BOUNDS[field]
            expected = f"a number in [{lo / 1e9:g}, {hi / 1e9:g}] (GB/s)"
        raise InputError(flag, expected, getattr(args, dest, exc.got)) from None


def _with_flags(args, data: dict, model, skip: tuple[str, ...] = ()) -> dict:
    """``data`` (a strategy file's mapping) with the strategy flags given (but ``skip``) on top,
    and the model's default global batch where neither sets one."""
    for name in (*(name for name, _ in STRATEGY_FLAGS), "sequence_parallel", "overlap_dp"):
        if getattr(args, name) is not None and name not in skip:
            data[name] = getattr(args, name)
    data.setdefault("global_batch", DEFAULT_GLOBAL_BATCH if model.kind != "mlp" else MLP_GLOBAL_BATCH)
    return data


def _file_keys(args, data: dict) -> set[str]:
    """Keys of a strategy file's mapping that no strategy flag overrides."""
    flags = {name for name in (*(name for name, _ in STRATEGY_FLAGS), "sequence_parallel", "overlap_dp")
             if getattr(args, name, None) is not None}
    return set(data) - flags


def _naming_the_file(exc: InputError, path: str | None, keys: set[str]) -> InputError:
    """``exc`` naming the strategy file ``path`` where it is about one of its ``keys`` (or the file as a
    whole), else ``exc``."""
    arg = exc.argument
    per_stage = arg.startswith("stage_") and "stages" in keys  # a column of a placement's stages
    if path is None or not (arg in keys or per_stage or arg in ("strategy", "--strategy")):
        return exc
    field = "" if arg in ("strategy", "--strategy") else " " + arg
    return InputError(f"--strategy {path}{field}", exc.expected, exc.got)


def overlap_refusals(args, data, table: StrategyTable, names: list[str]) -> dict:
    """{framework: InputError} for each of ``names`` that cannot run the overlap_dp the user asked for (--no-overlap-dp,
    or a strategy file's overlap_dp: cli._specs.overlap_refusal); empty where neither sets it (the framework's own
    choice is priced)."""
    if getattr(args, "overlap_dp", None) is not None:
        asked = "--no-overlap-dp"
    elif isinstance(data, dict) and "overlap_dp" in data:
        asked = f"--strategy {args.strategy} overlap_dp"
    else:
        return {}
    overlap = bool(table.columns["overlap_dp"][0])
    return {n: e for n in names if (e := overlap_refusal(n, overlap, asked)) is not None}


def build_strategy(args, model, cluster) -> StrategyTable:
    from_file = read_strategy(args.strategy, cluster) if args.strategy else {}
    keys = _file_keys(args, from_file)
    try:
        return _build_strategy(args, model, cluster, from_file)
    except InputError as exc:
        raise _naming_the_file(exc, args.strategy, keys) from None


def strategy_reason_error(args, model, cluster, table: StrategyTable, reason: str, framework) -> InputError:
    """reason_error for the strategy priced, naming the --strategy file where what it refuses is the file's key."""
    exc = reason_error(model, cluster, table.row(0), reason, framework)
    if not getattr(args, "strategy", None):
        return exc
    return _naming_the_file(exc, args.strategy, _file_keys(args, read_strategy(args.strategy, cluster)))


def _build_strategy(args, model, cluster, from_file: dict) -> StrategyTable:
    data = _with_flags(args, from_file, model)
    mods = data.get("recompute_modules")
    mods_arg = "--recompute-modules" if args.recompute_modules is not None else "recompute_modules"  # (flag or file)
    if isinstance(mods, str) and not mods.replace(",", " ").split():  # (empty or only commas: none named)
        raise InputError(mods_arg, "module names, comma-separated", mods)
    if mods:  # Megatron-Core reads the modules under selective granularity only
        if data.setdefault("recompute", "selective") != "selective":
            raise InputError("--recompute" if args.recompute is not None else "recompute",
                             f"selective (or none given) with {mods_arg}", data["recompute"])
    if args.stage_layers is not None:  # (an empty word too: refused by number_list)
        data["stage_layers"] = number_list(args.stage_layers, "--stage-layers", int, "comma-separated integers")
        data.setdefault("pp", len(data["stage_layers"]))
    _check_stage_layers(data)
    for k in ("global_batch", "micro_batch"):
        v = data.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v > GLOBAL_BATCH_MAX:
            raise InputError(k, f"an integer in [1, {GLOBAL_BATCH_MAX:,}]", v)
    degrees = [data.get(k, 1) for k in ("tp", "pp", "cp")]
    if "dp" not in data and all(isinstance(x, int) and x >= 1 for x in degrees):
        per = degrees[0] * degrees[1] * degrees[2]
        if cluster.num_gpus % per:
            raise InputError("tp*pp*cp", f"a divisor of the cluster's {cluster.num_gpus} GPUs (or give --dp)", per)
        data["dp"] = cluster.num_gpus // per
    return strategy_from_mapping(data, "--strategy")


def _check_stage_layers(data: dict) -> None:
    """A strategy's stage_layers (a flag's or a file's, one strategy): one count of at least one layer per stage,
    pp of them (the table itself allows wider rows, padded with empty stages, for tables of several pipelines); its
    stage_recompute, one name per stage."""
    layers, pp = data.get("stage_layers"), data.get("pp", 1)
    if not isinstance(pp, int) or isinstance(pp, bool):
        return  # (the table's own checks name other shapes and types)
    kinds = data.get("stage_recompute")
    if isinstance(kinds, list) and len(kinds) != pp:  # (the table takes wider rows, padded past pp: not here)
        raise InputError("stage_recompute", f"pp={pp} names, one per stage", ",".join(map(str, kinds)))
    if layers is None or not isinstance(layers, list):
        return
    if len(layers) != pp:
        raise InputError("stage_layers", f"pp={pp} counts, one per stage", ",".join(map(str, layers)))
    if any(isinstance(n, int) and not isinstance(n, bool) and n < 1 for n in layers):
        raise InputError("stage_layers", "counts >= 1 (every stage holds a layer)", ",".join(map(str, layers)))


def report(model, cluster, table: StrategyTable, metrics, failure: FailureModel | None = None,
           framework: str = DEFAULT_FRAMEWORK, *, profile=None) -> dict:
    """The JSON report of row 0; ``profile``: the Framework it was priced under where it is not ``framework``'s own
    (other gradient and optimizer dtypes)."""
    row = table.row(0)
    m = {k: (v[0].item() if hasattr(v[0], "item") else v[0]) for k, v in metrics.items()}
    m["reason"] = REASONS[int(m["reason"])]
    st = stage_breakdown(model, cluster, table, framework if profile is None else profile)
    active = st.pop("active")[0]
    stages = [{k: float(v[0, i]) for k, v in st.items()} for i in range(int(active.sum()))]
    for s in stages:
        s["layers"] = int(s["layers"])
    kw = {"optim_bytes": profile.optim_state_bytes} if isinstance(profile, Framework) else {}
    g = {k: float(v[0]) for k, v in plan_goodput(metrics, table, cluster, failure, model=model, **kw).items()}
    from costmodel._bands import error_band_row, gpu_record

    return {"model": model.name, "cluster": cluster.name, "gpu": cluster.gpu.name, "nodes": cluster.nodes,
            "gpus_per_node": cluster.gpus_per_node, "framework": framework, "strategy": row,
            "error_band": error_band_row(m["tokens_per_s"], table, framework, model.seq_len),
            "gpu_record": gpu_record(cluster.gpu.name),
            "metrics": {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in m.items()},
            "memory": memory_entry(m),
            "stages": stages, "goodput": g,
            "sliding_window": ({"window": model.sliding_window, "layers": model.windowed_layers}
                               if model.windowed_layers and model.sliding_window else None),
            "attention_chunk": ({"chunk": model.attention_chunk, "layers": model.windowed_layers}
                                if model.windowed_layers and model.attention_chunk else None)}


def _seconds(step) -> str:
    """A step time for the text report: seconds, or n/a where the plan has none (infeasible: null or infinite)."""
    if step is None or not math.isfinite(step):
        return f"{'n/a':>12}"
    return f"{step:10.4f} s"


def format_report(rep: dict, hbm_bytes: float) -> str:
    s, m = rep["strategy"], rep["metrics"]
    sw, ch = rep.get("sliding_window"), rep.get("attention_chunk")
    lines = [f"{rep['model']} on {rep['cluster']} ({rep['gpu']}, {rep['nodes']} nodes of {rep['gpus_per_node']}), "
             f"framework {rep['framework']}"
             + (f"; a sliding window of {sw['window']:,} keys on {sw['layers']} layers" if sw else "")
             + (f"; attention in chunks of {ch['chunk']:,} tokens on {ch['layers']} layers" if ch else ""),
             "strategy: " + " ".join(f"{k}={v}" for k, v in s.items())]
    if not m["feasible"]:
        lines.append(f"INFEASIBLE: {m['reason']}")
    lines.append(f"step time {_seconds(m['step_time_s'])}   {m['tokens_per_s']:,.0f} tokens/s   "
                 f"{m['samples_per_s']:.2f} samples/s   MFU {100 * m['mfu']:.1f}%   HFU {100 * m['hfu']:.1f}%   "
                 f"{m['microbatches']} micro-batches, bubble ratio {100 * m['bubble_ratio']:.1f}%")
    b = rep["error_band"]
    if m["feasible"]:
        lines.append(f"error band {b['low']:,.0f} - {b['high']:,.0f} tokens/s (regime {b['regime']}"
                     + ("" if "too few" in b["regime"] else f", {b['runs']} published runs") + ")")
        g = rep.get("gpu_record")
        lines.append(f"  on {rep['gpu']}: " + ("no published run in the validation set; the band is the regime's on "
                                                "other GPUs" if g is None else
                                                f"{g['runs']} published run(s), mean |error| "
                                                f"{g['mean_abs_error_pct']:.1f}% ({g['mean_signed_error_pct']:+.1f}% "
                                                "signed, + the model slow)"))
    parts = [("compute", "compute_s"), ("recompute", "recompute_s"), ("tp comm (exposed)", "tp_comm_s"),
             ("cp comm (exposed)", "cp_comm_s"), ("ep comm (exposed)", "ep_comm_s"), ("pp comm (exposed)", "pp_comm_s"),
             ("dp comm (exposed)", "dp_comm_s"), ("pipeline bubble", "bubble_s"), ("optimizer step", "optimizer_s")]
    total = sum(m[k] for _, k in parts) or 1.0
    lines.append("time per iteration (bottleneck stage):")
    for label, k in parts:
        lines.append(f"  {label:<20} {m[k]:10.4f} s  {100 * m[k] / total:5.1f}%")
    lines.append("per stage (one micro-batch): layers, forward / backward / weight-gradient time, "
                 "micro-batches in flight at the peak, memory per GPU")
    for i, st in enumerate(rep["stages"]):
        lines.append(f"  stage {i:<3} {st['layers']:4d} layers  F {1e3 * st['forward_s']:9.2f} ms  "
                     f"B {1e3 * st['backward_s']:9.2f} ms  W {1e3 * st['weight_grad_s']:9.2f} ms  "
                     f"in flight {st['in_flight']:5.1f}  {st['mem_bytes'] / 1e9:6.1f} GB")
    tight = TIGHT_PHRASE if rep["memory"]["tight"] else ""
    lines.append(f"memory per GPU (worst stage): {m['mem_total_bytes'] / 1e9:.1f} GB of {hbm_bytes / 1e9:.1f} GB"
                 + tight)
    for label, k in [("weights", "mem_weights_bytes"), ("gradients", "mem_grads_bytes"),
                     ("optimizer state", "mem_optimizer_bytes"), ("activations", "mem_activations_bytes"),
                     ("buffers + reserve", "mem_buffers_bytes")]:
        lines.append(f"  {label:<20} {m[k] / 1e9:10.2f} GB")
    g = rep.get("goodput")
    if g and m["feasible"]:
        lines.append(f"goodput under failures: {g['goodput_tokens_per_s']:,.0f} tokens/s "
                     f"({100 * g['goodput_ratio']:.1f}% of the time useful; the job holds {g['nodes_used']:.0f} "
                     f"nodes and fails every {g['job_mtbf_s'] / 3600:.2f} h)")
        lines.append(f"  checkpoint every {g['checkpoint_interval_s'] / 60:.1f} min (Daly), "
                     f"{g['checkpoint_bytes'] / 1e12:.2f} TB in {g['checkpoint_write_s']:.1f} s: "
                     f"{100 * g['checkpoint_overhead']:.2f}% overhead; work redone {100 * g['rework_fraction']:.2f}%")
        lines.append(f"  per failure: {g['restart_s']:.0f} s restart + {g['checkpoint_load_s']:.1f} s to load + "
                     f"{g['spare_wait_s']:.0f} s "
                     f"waiting for a node on average ({g['spare_nodes']:.0f} idle nodes as spares): "
                     f"{100 * g['restart_fraction']:.2f}% of the time")
    return "\n".join(lines)


def run(args) -> int:
    from cli import _timeline

    _timeline.check_paths(args)
    cases = None
    if args.sensitivity is not None:  # (the search package only with the flag: evaluate's start-up)
        from search._sensitivity import parse_cases

        cases = parse_cases(args.sensitivity)
    model = load_model(args.model, args.seq_len)
    cluster = load_cluster(args.cluster, args.hardware)
    names = framework_list(args.framework)
    if cases and len(names) > 1:
        raise InputError("--sensitivity", "one --framework (the cases re-price one plan)", ",".join(names))
    dtypes = state_dtypes_of(args)
    if dtypes and len(names) > 1:
        raise InputError(STATE_DTYPE_FLAGS[next(iter(dtypes))], "one --framework (the dtypes change one profile)",
                         ",".join(names))
    if len(names) > 1 and _timeline.wanted(args):
        raise InputError("--timeline/--trace", "one --framework (a timeline draws one priced plan)",
                         ",".join(names))
    data = read_mapping(args.strategy, "--strategy") if args.strategy else None
    if isinstance(cluster, HeteroCluster) or (data is not None and "stages" in data):
        if dtypes:
            raise InputError(STATE_DTYPE_FLAGS[next(iter(dtypes))], "a one-pool cluster and a strategy without "
                             "per-stage placements", "a placed plan")
        return run_hetero(args, model, as_hetero(cluster), data, names, cases)
    table = build_strategy(args, model, cluster)
    asked = overlap_refusals(args, data, table, names)
    if len(names) > 1:
        return print_side_by_side(args, model, cluster, table, names,
                                  lambda reason, fw: strategy_reason_error(args, model, cluster, table, reason, fw),
                                  asked=asked)
    framework = names[0]
    if framework in asked:
        raise asked[framework]
    profile = with_state_dtypes(framework_preset(framework), **dtypes) if dtypes else framework
    metrics = evaluate(model, cluster, table, pipeline="simulate", framework=profile)  # one row: exact
    reason = REASONS[int(metrics["reason"][0])]
    if reason not in ("ok", "out_of_memory"):
        raise strategy_reason_error(args, model, cluster, table, reason, framework)
    rep = report(model, cluster, table, metrics, failure_from_args(args), framework, profile=profile)
    if dtypes:
        rep["state_dtypes"] = dtypes
    if cases:
        rep["sensitivity"] = plan_sensitivity(model, cluster, table, profile, cases, metrics)
    if _timeline.wanted(args):
        _timeline.write_plan_outputs(args, model, cluster, table, framework, profile=profile)
    if args.json:
        print_json(rep)
    else:
        print(format_report(rep, cluster.gpu.hbm_bytes))
        if cases:
            print(format_plan_sensitivity(rep["sensitivity"]))
    return 0


def plan_sensitivity(model, cluster, table, framework, cases, metrics) -> list[dict]:
    """The one-row ``table`` priced (exactly) on the cluster moved by each case (search._sensitivity.parse_cases'
    tuples), beside its ``metrics`` there as given: per case its label, step time, tokens/s and the change in
    tokens/s in percent."""
    from costmodel._knobs import moved_cluster
    from search._sensitivity import case_label

    base = float(metrics["tokens_per_s"][0])
    out = []
    for case in cases:
        m = evaluate(model, moved_cluster(cluster, case), table, pipeline="simulate", framework=framework)
        t = float(m["tokens_per_s"][0])
        out.append({"case": case_label(case), "step_time_s": float(m["step_time_s"][0]), "tokens_per_s": t,
                    "change_pct": 100.0 * (t / base - 1.0) if base > 0 else None})
    return out


def format_plan_sensitivity(rows: list[dict]) -> str:
    out = ["sensitivity: the plan priced again with the cluster's constants moved",
           f"  {'moved':<28} {'step s':>10} {'tokens/s':>14} {'change':>8}"]
    for r in rows:
        change = "-" if r["change_pct"] is None else f"{r['change_pct']:+.1f}%"
        out.append(f"  {r['case']:<28} {r['step_time_s']:10.4f} {r['tokens_per_s']:14,.0f} {change:>8}")
    return "\n".join(out)


# ---- one strategy under several frameworks (--framework A,B or all) ---------------------------
# (label, metric, scale, format) of the side-by-side table's lines: time, then memory per GPU (worst stage).
SIDE_BY_SIDE = (
    ("step time s", "step_time_s", 1.0, ".4f"), ("tokens/s", "tokens_per_s", 1.0, ",.0f"), ("MFU %", "mfu", 100, ".1f"),
    ("  compute s", "compute_s", 1.0, ".4f"), ("  recompute s", "recompute_s", 1.0, ".4f"),
    ("  tp comm s", "tp_comm_s", 1.0, ".4f"), ("  cp comm s", "cp_comm_s", 1.0, ".4f"),
    ("  ep comm s", "ep_comm_s", 1.0, ".4f"), ("  pp comm s", "pp_comm_s", 1.0, ".4f"),
    ("  dp comm s", "dp_comm_s", 1.0, ".4f"), ("  bubble s", "bubble_s", 1.0, ".4f"),
    ("  optimizer s", "optimizer_s", 1.0, ".4f"), ("memory GB", "mem_total_bytes", 1e-9, ".1f"),
    ("  weights GB", "mem_weights_bytes", 1e-9, ".2f"), ("  gradients GB", "mem_grads_bytes", 1e-9, ".2f"),
    ("  optimizer GB", "mem_optimizer_bytes", 1e-9, ".2f"), ("  activations GB", "mem_activations_bytes", 1e-9, ".2f"),
    ("  buffers GB", "mem_buffers_bytes", 1e-9, ".2f"))


def side_by_side(model, cluster, table: StrategyTable, names: list[str], refused, failure=None,
                 asked: dict | None = None) -> list[dict]:
    """One entry per framework of ``names`` for the one-row ``table``: its report (metrics, stages, goodput on a
    homogeneous cluster) where the framework runs the strategy, else {"framework", "refused": why} (``refused(reason,
    framework)``: the InputError that explains it; ``asked``: {framework: InputError} refused before pricing,
    overlap_refusals'). InputError where no framework runs it."""
    copies = table.take(np.zeros(len(names), dtype=np.int64))  # the one row once per framework
    rows = StrategyTable({**copies.columns, "framework": framework_codes(names)}, copies.stages)
    metrics = evaluate(model, cluster, rows, pipeline="simulate")  # one call: each row under its framework
    out, errors = [], []
    for i, name in enumerate(names):
        reason = REASONS[int(metrics["reason"][i])]
        if asked and name in asked:
            reason = "framework_unsupported"
            errors.append(asked[name])
            out.append({"framework": name, "reason": reason, "refused": str(errors[-1])})
            continue
        if reason not in ("ok", "out_of_memory"):
            errors.append(refused(reason, name))
            out.append({"framework": name, "reason": reason, "refused": str(errors[-1])})
            continue
        m = metrics.take(np.array([i]))
        if isinstance(cluster, HeteroCluster):
            from costmodel._bands import error_band_row

            plain = _plain_metrics(m)
            out.append({"framework": name, "metrics": plain, "memory": memory_entry(plain),
                        "stages": stage_rows(model, cluster, table, framework=name),
                        "error_band": error_band_row(float(m["tokens_per_s"][0]), table, name, model.seq_len)})
        else:
            out.append({k: v for k, v in report(model, cluster, table, m, failure, name).items()
                        if k in ("framework", "metrics", "stages", "goodput", "error_band", "memory")})
    if len(errors) == len(names):
        raise errors[0]
    return out


def _plain_metrics(m) -> dict:
    """One row's metrics as plain values (reason by name, non-finite numbers as None)."""
    out = {k: (v[0].item() if hasattr(v[0], "item") else v[0]) for k, v in m.items()}
    out["reason"] = REASONS[int(out["reason"])]
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in out.items()}


def winner(entries: list[dict]) -> tuple[str | None, str]:
    """The framework of the highest tokens/s among the feasible entries and a line naming it (and by how much it
    beats the next feasible one), or (None, why) where none is feasible."""
    ok = sorted((e for e in entries if e.get("metrics", {}).get("feasible")),
                key=lambda e: -e["metrics"]["tokens_per_s"])
    if not ok:
        return None, "no framework runs this strategy in memory"
    best = ok[0]
    line = f"fastest: {best['framework']}, {best['metrics']['tokens_per_s']:,.0f} tokens/s"
    if len(ok) > 1:
        line += (f", {best['metrics']['tokens_per_s'] / ok[1]['metrics']['tokens_per_s']:.3f}x "
                 f"{ok[1]['framework']} (the next)")
    return best["framework"], line


def format_side_by_side(entries: list[dict], hbm_bytes: float | None) -> str:
    """The side-by-side table: a column per framework, a line per time and memory part, then the refusals
    (``hbm_bytes``: the GPU's memory, None on a mixed cluster)."""
    widths = [max(15, len(e["framework"]) + 2) for e in entries]  # a column per framework, as wide as its name

    def line(label: str, cells) -> str:
        return f"{label:<18}" + "".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True))

    lines = [line("", [e["framework"] for e in entries])]
    for label, key, scale, fmt in SIDE_BY_SIDE:
        values = [e.get("metrics", {}).get(key) for e in entries]
        lines.append(line(label, ["-" if v is None else format(v * scale if abs(v) > 1e-12 else 0.0, fmt)
                                  for v in values]))  # (a bubble of -1e-17 s prints as 0)
    fits = ["refused" if "refused" in e else ("yes, tight" if e["memory"]["tight"] else "yes")
            if e["metrics"]["feasible"] else "out of memory" for e in entries]
    lines.append(line("fits in its GPUs" if hbm_bytes is None else f"fits in {hbm_bytes / 1e9:.1f} GB", fits))
    lines += [f"{e['framework']}: {e['refused']}" for e in entries if "refused" in e]
    return "\n".join(lines)


def print_side_by_side(args, model, cluster, table: StrategyTable, names: list[str], refused,
                       pool_names: list[str] | None = None, asked: dict | None = None) -> int:
    """`plansweep evaluate --framework A,B,...`: the strategy's time and memory under each, side by side (--json: one
    entry per framework), and the fastest named; ``asked``: overlap_refusals'."""
    failure = None if isinstance(cluster, HeteroCluster) else failure_from_args(args)
    entries = side_by_side(model, cluster, table, names, refused, failure, asked)
    best, line = winner(entries)
    strategy = table.row(0, pool_names) if pool_names else table.row(0)
    if args.json:
        print_json({"model": model.name, "cluster": cluster.name, "strategy": strategy, "frameworks": entries,
                    "fastest": best})
        return 0
    gpu = f" ({cluster.gpu.name})" if not isinstance(cluster, HeteroCluster) else f": {cluster.describe()}"
    print(f"{model.name} on {cluster.name}{gpu}, frameworks {', '.join(names)}")
    print("strategy: " + " ".join(f"{k}={v}" for k, v in strategy.items() if k != "stages"))
    # (a mixed cluster's stages are each held to their own pool's GPU)
    print(format_side_by_side(entries, None if isinstance(cluster, HeteroCluster) else cluster.gpu.hbm_bytes))
    print(line)
    return 0


HETERO_REASONS = {
    "gpus_exceed_cluster": ("stages", "per pool, at most its GPUs (dp x tp x cp summed over its stages)"),
    "tp_not_divide_heads": ("stages[].tp", "a divisor of the model's heads and kv_heads"),
    "pp_not_divide_layers": ("stages[].layers", "counts >= 1 summing to the model's layers"),
    "cp_not_divide_seq": ("cp", "2*cp dividing seq_len"),
    "batch_not_divide": ("global_batch", "a multiple of dp x microbatches on every stage"),
    "schedule_invalid": ("schedule", "gpipe, 1f1b, zb-h1 or zb-h2 with vpp 1 (or vpp dividing every stage)"),
    "zero_incompatible_pp": ("zero_stage", "a ZeRO stage the framework runs with several stages"),
    "framework_unsupported": ("--framework", "a framework that runs this schedule (with these micro-batches a step), "
                              "ZeRO stage, SP, precision, ep and etp"),
    "ep_invalid": ("ep", "a divisor of the model's experts (1 for a dense model) with ep x etp dividing every "
                   "stage's tp x cp x dp, and no stage of an MoE model split across two pools"),
}


def _hetero_layout_refusal(args, model, row: dict, framework: str | None) -> InputError | None:
    """The framework's layout rule a placement strategy breaks, naming the file's field (or None): DeepSpeed's stage
    cut, and per stage the rules layout_refused checks (Ulysses at tp and pp 1, experts within the data-parallel
    ranks, ...)."""
    if framework is None:
        return None
    fw = framework_preset(framework)
    stages, f = row["stages"], f"--strategy {args.strategy}"
    layers = [st["layers"] for st in stages]
    if type_partition_refused(fw, model, layers):
        return type_partition_error(fw, model, layers, f"{f} stages[].layers", f"layers {layers}", as_list=True)
    for st in stages:
        col = layout_refused(fw, model, row["zero_stage"], st["tp"], row["cp"], row["ep"], row["etp"],
                             row["sequence_parallel"], len(stages), st["dp"])
        if col is not None:
            return InputError(col, f"a value framework {fw.name} runs with stage tp={st['tp']}, dp={st['dp']} and "
                              f"{len(stages)} stages (its layout rules: docs/frameworks.md)", row[col])
    return None


def hetero_reason_error(args, model, table: StrategyTable, names: list[str], reason: str,
                        framework: str | None = None) -> InputError:
    """Why a placement strategy (a --strategy file with stages) was refused, naming the file's field."""
    row = table.row(0, names)
    if reason == "framework_unsupported" and (named := _hetero_layout_refusal(args, model, row, framework)):
        return named
    arg, expected = HETERO_REASONS.get(reason, ("--strategy", "a feasible strategy"))
    where = f"--strategy {args.strategy} {arg}" if arg.startswith("stages") else arg
    got = {"global_batch": f"global_batch={row['global_batch']}, microbatches={row['microbatches']}, "
                           f"dp per stage {[st['dp'] for st in row['stages']]}",
           "tp_not_divide_heads": f"tp per stage {[st['tp'] for st in row['stages']]}",
           "stages[].layers": f"layers {[st['layers'] for st in row['stages']]} (model: {model.layers})",
           "zero_stage": row["zero_stage"], "schedule": f"{row['schedule']} with vpp={row['vpp']}",
           "stages": [(st["pool"], st["dp"] * st["tp"] * row["cp"]) for st in row["stages"]],
           "ep": f"ep={row['ep']}, etp={row['etp']}, tp*cp*dp per stage "
                 f"{[st['dp'] * st['tp'] * row['cp'] for st in row['stages']]}"
                 + (", a stage split across two pools" if any("dp2" in st for st in row["stages"]) else "")}.get(
               arg if arg != "stages[].tp" else "tp_not_divide_heads", reason)
    return InputError(where, expected, got)


def run_hetero(args, model, cluster, data, frameworks: list[str], cases=None) -> int:
    """A strategy with per-stage pools and degrees on a (heterogeneous) cluster."""
    from costmodel._evaluate import format_stage_rows

    if data is None or "stages" not in data:
        raise InputError("--strategy", "a JSON/YAML file with 'stages': [{pool, dp, tp, layers}, ...] for a "
                         "heterogeneous cluster", args.strategy)
    keys = _file_keys(args, data) | {"stages"}
    for name, flag in (("dp", "--dp"), ("tp", "--tp"), ("pp", "--pp"), ("micro_batch", "--micro-batch"),
                       ("stage_layers", "--stage-layers")):  # the file's stages give these, stage by stage
        if getattr(args, name, None) is not None:
            raise InputError(flag, f"no {flag} with a strategy of stages (each stage's pool, dp, tp and layers are in "
                             "the file; the micro-batches a step as its microbatches)", getattr(args, name))
    _with_flags(args, data, model, skip=("dp", "tp", "pp", "micro_batch"))  # per stage in the file
    names = [p.name for p in cluster.pools]
    try:
        table = hetero_from_mapping(data, names, f"--strategy {args.strategy}")
    except InputError as exc:
        raise _naming_the_file(exc, args.strategy, keys) from None
    asked = overlap_refusals(args, data, table, frameworks)
    if len(frameworks) > 1:
        return print_side_by_side(args, model, cluster, table, frameworks,
                                  lambda reason, fw: hetero_reason_error(args, model, table, names, reason, fw),
                                  names, asked=asked)
    framework = frameworks[0]
    if framework in asked:
        raise asked[framework]
    metrics = evaluate(model, cluster, table, pipeline="simulate", framework=framework)
    reason = REASONS[int(metrics["reason"][0])]
    if reason not in ("ok", "out_of_memory"):
        raise hetero_reason_error(args, model, table, names, reason, framework)
    rows = stage_rows(model, cluster, table, framework=framework)
    m = {k: (v[0].item() if hasattr(v[0], "item") else v[0]) for k, v in metrics.items()}
    m["reason"] = reason
    if args.timeline or args.trace:
        from cli._timeline import write_plan_outputs

        write_plan_outputs(args, model, cluster, table, framework)
    sens = None if not cases else plan_sensitivity(model, cluster, table, framework, cases, metrics)
    if args.json:  # print_json writes non-finite numbers as null
        from costmodel._bands import error_band_row

        print_json({"model": model.name, "cluster": cluster.name, "framework": framework,
                    "strategy": table.row(0, names), "metrics": m, "memory": memory_entry(m), "stages": rows,
                    "error_band": error_band_row(m["tokens_per_s"], table, framework, model.seq_len),
                    **({"sensitivity": sens} if sens else {})})
        return 0
    print(f"{model.name} on {cluster.name}: {cluster.describe()}; framework {framework}")
    glob = {k: v for k, v in table.row(0, names).items() if k != "stages"}
    print("strategy: " + " ".join(f"{k}={v}" for k, v in glob.items()))
    if not m["feasible"]:
        print(f"INFEASIBLE: {reason}")
    print(f"step time {_seconds(m['step_time_s'])}   {m['tokens_per_s']:,.0f} tokens/s   MFU {100 * m['mfu']:.1f}% "
          f"(of the stages' summed peak)   {m['microbatches']} micro-batches, bubble ratio "
          f"{100 * m['bubble_ratio']:.1f}%")
    if model.is_moe:
        print(f"ep comm (exposed) {m['ep_comm_s']:.4f} s of the bottleneck stage's iteration")
    mem = memory_entry(m)
    print(f"memory per GPU (worst stage, against its pool's GPU): {m['mem_total_bytes'] / 1e9:.1f} GB of "
          f"{(mem['device_bytes'] or math.nan) / 1e9:.1f} GB" + (TIGHT_PHRASE if mem["tight"] else ""))
    print("per stage: pool, degrees, layers, micro-batch per replica, F/B/W per micro-batch, busy time per "
          "iteration, hand-off to the next stage, data-parallel exchange, memory per GPU of the pool's HBM")
    print(format_stage_rows(rows))
    if sens:
        print(format_plan_sensitivity(sens))
    return 0
