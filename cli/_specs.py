"""Turn command-line words into frozen specs: presets or JSON/YAML files, validated once."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import numpy as np

from costmodel import (
    COLUMNS,
    Cluster,
    InputError,
    StrategyTable,
    Transformer,
    cluster_preset,
    make_cluster,
    model_from_mapping,
    model_preset,
)
from costmodel._feasibility import (
    cp_chunks,
    interleaving_runs,
    layout_refused,
    type_partition,
    type_partition_refused,
    ulysses_refused,
)
from costmodel._files import DuplicateKey, read_text, unique_pairs
from costmodel._frameworks import DEFAULT_FRAMEWORK, FRAMEWORK_ALIASES, FRAMEWORKS, framework_preset
from costmodel._hardware import MAX_GBPS
from costmodel._hetero_cluster import HeteroCluster, hetero_from_mapping, hetero_names, hetero_preset
from costmodel._layer_compute import cp_by_all_to_all, cp_refused_for_window
from costmodel._pipeline_terms import SCHED
from costmodel._strategy import CODE_COLUMNS, FRAMEWORK_NAMES, RECOMPUTE, RECOMPUTE_MODULES


def _yaml_unique_loader():
    """yaml.SafeLoader refusing a mapping that names a key twice."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:  # (scalar keys as written, with their resolved tag; merges' << skipped)
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                    if (key_node.tag, key_node.value) in seen:
                        raise DuplicateKey(key_node.value)
                    seen.add((key_node.tag, key_node.value))
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


# A YAML file's aliases share one object between the places that name it, so a few lines can stand for billions of
# values (an alias chain) that a check or a message would walk: refused past this many values, expanded.
YAML_MAX_VALUES = 1_000_000


def _expanded_size(data, cap: int) -> int:
    """Values in ``data`` counting each alias's object again where it recurs, up to just past ``cap``."""
    n, stack = 0, [data]
    while stack and n <= cap:
        v = stack.pop()
        n += 1
        if isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return n


def read_mapping(path: str, argument: str) -> dict:
    """A JSON or YAML file holding one object, each of whose objects names a key once."""
    p = Path(path)
    if p.is_dir():
        raise InputError(argument, "a JSON or YAML file", f"{path}: a directory")
    if not p.is_file():
        raise InputError(argument, "an existing JSON or YAML file", path)
    text = read_text(p, argument, "JSON or YAML file")
    try:
        if p.suffix.lower() in (".yaml", ".yml"):
            import yaml

            data = yaml.load(text, Loader=_yaml_unique_loader())  # noqa: S506 (a SafeLoader)
        else:
            data = json.loads(text, object_pairs_hook=unique_pairs)
    except DuplicateKey as exc:
        raise InputError(argument, "a file whose objects name each key once", f"{path}: {exc.args[0]!r} twice") \
            from None
    except Exception as exc:  # json.JSONDecodeError, yaml.YAMLError
        raise InputError(argument, "a well-formed JSON or YAML file", f"{path}: {str(exc).splitlines()[0]}") from None
    if p.suffix.lower() in (".yaml", ".yml") and _expanded_size(data, YAML_MAX_VALUES) > YAML_MAX_VALUES:
        raise InputError(argument, f"a file of at most {YAML_MAX_VALUES:,} values once its YAML aliases are expanded",
                         f"{path}: more than that")
    if not isinstance(data, dict):
        kind = {type(None): "null", list: "a list", str: "a string", bool: "true or false", int: "a number",
                float: "a number"}.get(type(data), type(data).__name__)
        raise InputError(argument, "a file holding one object (mapping)", f"{path}: {kind}")
    return data


def _looks_like_file(word: str) -> bool:
    return word.lower().endswith((".json", ".yaml", ".yml")) or "/" in word


def load_model(word: str, seq_len=None) -> Transformer:
    """A preset name (gpt3-175b, llama3-70b, ...) or a JSON/YAML file: Transformer fields, a
    HuggingFace config.json or a Calculon model file (costmodel.model_from_mapping); ``seq_len``
    (--seq-len's word; None: the model's own) replaces its sequence length (with_seq_len)."""
    if not _looks_like_file(word):
        try:
            model = model_preset(word)
        except InputError as exc:  # (the flag the word came from)
            raise InputError("--model", exc.expected, exc.got) from None
    else:
        model = model_from_mapping(read_mapping(word, "--model"), Path(word).stem, f"--model {word}")
    return model if seq_len is None else with_seq_len(model, seq_len)


def with_seq_len(model: Transformer, text) -> Transformer:
    """``model`` training sequences of ``text`` tokens (--seq-len: an integer >= 1); a transformer only (an MLP's
    sample is one token). What the length must allow (2 cp dividing it, ...) is the strategy's feasibility, checked
    where strategies are priced."""
    n = number(text, "--seq-len", int, 1)
    if model.kind != "transformer":
        raise InputError("--seq-len", "a transformer model (an MLP's sample is one token)",
                         f"{model.name} ({model.kind})")
    try:
        return dataclasses.replace(model, seq_len=n)
    except InputError as exc:  # (the model's own checks: the int64 bound)
        raise InputError("--seq-len", exc.expected, exc.got) from None


# --framework's word for every profile (a framework dimension over all of them).
ALL_FRAMEWORKS = "all"


def framework_list(text: str | None, flag: str = "--framework") -> list[str]:
    """A --framework flag's profiles: comma-separated names (aliases resolved, each profile once, in the order
    given) or ``all`` (every profile of costmodel._frameworks, in its table's order); None: [DEFAULT_FRAMEWORK].
    InputError naming ``flag`` for an unknown or empty name."""
    if text is None:
        return [DEFAULT_FRAMEWORK]
    words = [w.strip() for w in str(text).split(",")]
    if [w.lower() for w in words] == [ALL_FRAMEWORKS]:
        return list(FRAMEWORKS)
    expected = "comma-separated names among " + ", ".join([*FRAMEWORKS, *FRAMEWORK_ALIASES]) + f", or {ALL_FRAMEWORKS}"
    if any(not w for w in words):
        raise InputError(flag, expected, text)
    names = []
    for w in words:
        try:
            names.append(framework_preset(w, flag).name)
        except InputError:
            raise InputError(flag, expected, w) from None
    return list(dict.fromkeys(names))


def one_framework(text: str | None, flag: str = "--framework", why: str = "") -> str:
    """A --framework flag that names one profile (framework_list of one name; None: DEFAULT_FRAMEWORK); InputError
    naming ``flag`` for a list or ``all`` (``why``: what the one framework is for)."""
    if text is None:
        return DEFAULT_FRAMEWORK
    words = [w.strip() for w in str(text).split(",")]
    if len({w.lower() for w in words}) > 1 or str(text).strip().lower() == ALL_FRAMEWORKS:
        raise InputError(flag, "one framework" + (f" ({why})" if why else ""), text)
    try:
        return framework_preset(words[0], flag).name
    except InputError:
        raise InputError(flag, "one of " + ", ".join([*FRAMEWORKS, *FRAMEWORK_ALIASES]), text) from None


CLUSTER_FIELDS = ("gpu", "num_gpus", "gpus_per_node", "scaleup_GBps", "scaleout_GBps", "name")


def load_cluster(word: str, hardware: str | None = None) -> Cluster | HeteroCluster:
    """A homogeneous cluster: a preset (h100x1024, dgx-a100-1024, seed000-16, ...), a JSON/YAML
    file with gpu, num_gpus, gpus_per_node and optional scaleup_GBps / scaleout_GBps per GPU per
    direction, or a Calculon system file with a GPU count (FILE.json@1024,
    costmodel.cluster_from_calculon); or a heterogeneous one: a preset among costmodel.hetero_names()
    or a file with a ``pools`` list (costmodel's _hetero_cluster docstring). ``hardware`` is a file
    of fitted efficiency constants from ``plansweep calibrate``, replacing those of every GPU it fits."""
    at = re.match(r"^(.+\.(?:json|ya?ml))@(\d+)$", word, flags=re.IGNORECASE)  # FILE@GPUS (Calculon's files)
    if at or _looks_like_file(word):
        path = at.group(1) if at else word
        data = read_mapping(path, "--cluster")
        from costmodel._model_files import cluster_from_calculon, is_calculon_system  # files only

        if is_calculon_system(data):
            gpus = int(at.group(2)) if at else data.get("num_gpus")
            if gpus is None:
                raise InputError("--cluster", "a Calculon system file with its GPU count, FILE.json@GPUS", word)
            cluster = cluster_from_calculon(data, gpus, Path(path).stem, f"--cluster {path}")
        else:
            if at:
                raise InputError("--cluster", "FILE@GPUS only for a Calculon system file (a plansweep cluster file "
                                 "sets its own num_gpus or pools)", word)
            data.setdefault("name", Path(path).stem)
            cluster = _hetero_file(data, path) if "pools" in data else _cluster_file(data, path)
    elif word.lower() in hetero_names() or "+" in word:
        try:
            cluster = hetero_preset(word)
        except InputError as exc:
            raise InputError("--cluster", exc.expected, exc.got) from None
    else:
        try:
            cluster = cluster_preset(word)
        except InputError as exc:
            if exc.argument != "cluster":
                raise
            raise InputError("--cluster", exc.expected + ", or a heterogeneous preset: " + ", ".join(hetero_names())
                             + ", or a JSON/YAML file", word) from None
    if not hardware:
        return cluster
    from costmodel._validate import read_hardware  # with --hardware only

    fitted = read_hardware(hardware)

    def fit(gpu):
        eff = fitted.get(gpu.name)
        return gpu if eff is None else dataclasses.replace(gpu, **dataclasses.asdict(eff))

    def latency(own: float, old_gpu, new_gpu, field: str) -> float:
        """A link's latency: the file's for the GPU type where the cluster took its GPU's (the preset's, a cluster
        file's and a pool's default), the cluster's own where it set another (a Calculon system file, a pool's
        intra_latency_us / inter_latency_us, a100x16-flat's one tier)."""
        return getattr(new_gpu, field) if own == getattr(old_gpu, field) else own

    if isinstance(cluster, HeteroCluster):
        pools = []
        for p in cluster.pools:
            g = fit(p.gpu)
            pools.append(dataclasses.replace(
                p, gpu=g, intra_latency_s=latency(p.intra_latency_s, p.gpu, g, "scaleup_latency_s"),
                inter_latency_s=latency(p.inter_latency_s, p.gpu, g, "scaleout_latency_s")))
        return dataclasses.replace(cluster, pools=tuple(pools))
    g = fit(cluster.gpu)
    return dataclasses.replace(
        cluster, gpu=g, scaleup_latency_s=latency(cluster.scaleup_latency_s, cluster.gpu, g, "scaleup_latency_s"),
        scaleout_latency_s=latency(cluster.scaleout_latency_s, cluster.gpu, g, "scaleout_latency_s"))


def _hetero_file(data: dict, path: str) -> HeteroCluster:
    """A heterogeneous cluster file (costmodel's _hetero_cluster docstring); errors name the file."""
    try:
        return hetero_from_mapping(data)
    except InputError as exc:
        raise InputError(f"--cluster {path} {exc.argument.removeprefix('cluster.')}", exc.expected, exc.got) from None


def _cluster_file(data: dict, word: str) -> Cluster:
    unknown = set(data) - set(CLUSTER_FIELDS)
    if unknown:
        raise InputError("--cluster", "fields among " + ", ".join(CLUSTER_FIELDS), sorted(unknown, key=str)[0])
    for k in ("gpu", "num_gpus"):
        if k not in data:
            raise InputError("--cluster", f"a '{k}' field", f"{word} without it")
    links = {}
    for k in ("scaleup_GBps", "scaleout_GBps"):
        v = data.get(k)
        if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= MAX_GBPS):
            raise InputError(f"--cluster {word} {k}", f"a number in (0, {MAX_GBPS:g}] (GB/s per GPU per direction)", v)
        links[k] = None if v is None else float(v) * 1e9
    if not isinstance(data["gpu"], str) or not isinstance(data["name"], str):
        bad = "gpu" if not isinstance(data["gpu"], str) else "name"
        raise InputError(f"--cluster {word} {bad}", "a name", data[bad])
    try:
        return make_cluster(data["gpu"], data["num_gpus"], gpus_per_node=data.get("gpus_per_node"),
                            scaleup_Bps=links["scaleup_GBps"], scaleout_Bps=links["scaleout_GBps"], name=data["name"])
    except InputError as exc:  # the field of the file it is about
        raise InputError(f"--cluster {word} {exc.argument}", exc.expected, exc.got) from None


def read_strategy(path: str, cluster: Cluster | None = None) -> dict:
    """A --strategy file's mapping of strategy keys: plansweep's own (JSON or YAML), or a Calculon
    execution file read as them (costmodel._model_files.strategy_from_calculon; with ``cluster``,
    its num_procs and networks checked against it). Errors name the file and the field."""
    data = read_mapping(path, "--strategy")
    from costmodel._model_files import is_calculon_execution, strategy_from_calculon  # files only

    if is_calculon_execution(data):
        return strategy_from_calculon(data, f"--strategy {path}", cluster=cluster)
    return data


def strategy_from_mapping(data: dict, argument: str) -> StrategyTable:
    allowed = set(COLUMNS) | {"stage_layers", "stage_recompute", "recompute_modules"}
    unknown = set(data) - allowed
    if unknown:
        raise InputError(argument, "strategy keys among " + ", ".join(sorted(allowed)), sorted(unknown, key=str)[0])
    data = dict(data)
    if data.get("recompute") is False:  # YAML's false / off / no: no recompute
        data["recompute"] = "none"
    if isinstance(data.get("recompute_modules"), list) and all(isinstance(w, str) for w in data["recompute_modules"]):
        data["recompute_modules"] = ",".join(data["recompute_modules"])
    for k in NAMED_KEYS & set(data):  # names, as the table's codes are not a file's words: 1 is no schedule
        v = data[k]
        words = v if k == "stage_recompute" and isinstance(v, list) else [v]
        if not all(isinstance(w, str) for w in words):
            many = k in ("recompute_modules", "stage_recompute")
            raise InputError(k, f"{'names' if many else 'a name'} among {', '.join(NAMED_VALUES[k])}" + (
                ", one per stage" if k == "stage_recompute" else " (comma-separated)" if k == "recompute_modules"
                else ""), v)
    cols = {k: [v] for k, v in data.items() if k not in ("stage_layers", "stage_recompute")}
    extra = {k: [data[k]] for k in ("stage_layers", "stage_recompute") if k in data}
    return StrategyTable.from_columns(**cols, **extra)


# Strategy keys whose values are names (the table's coded columns, the modules recomputed, the framework), and the
# names each takes.
NAMED_VALUES = {**CODE_COLUMNS, "recompute_modules": RECOMPUTE_MODULES, "stage_recompute": RECOMPUTE,
                "framework": FRAMEWORK_NAMES}
NAMED_KEYS = set(NAMED_VALUES)


# What each interleaved micro-batch rule of a profile (costmodel._frameworks.INTERLEAVED_MICROBATCHES) asks, in words
# (the test itself: costmodel._feasibility.interleaving_runs).
INTERLEAVE_NEEDS = {
    "pp_multiple": "a multiple of pp",
    "at_least_pp": "at least pp",
    "pytorch_rounds": "fewer than pp, or a multiple of m // pp (rounds of micro-batches)",
}


def type_partition_error(fw, model: Transformer, layers: list[int], argument: str, got, *,
                         as_list: bool = False) -> InputError:
    """``argument``'s stage layers are not the cut DeepSpeed's PipelineModule makes under ``fw``
    (costmodel._feasibility.type_partition): the one line naming that cut, comma-separated as --stage-layers takes it
    (``as_list``: as a strategy file's list)."""
    cut = type_partition(fw, model.layers, len(layers), np.arange(len(layers))).tolist()
    shown = str(cut) if as_list else ",".join(map(str, cut))
    return InputError(argument, f"{shown} under framework {fw.name} (DeepSpeed's PipelineModule cuts "
                      f"{model.layers} layers over {len(layers)} stages so, partition_method 'type:"
                      f"{fw.type_partition}')", got)


def overlap_refusal(framework, overlap: bool, argument: str, got=None) -> InputError | None:
    """The InputError for an overlap_dp a user asked for (a flag's or a strategy file's) that ``framework`` cannot run,
    or None: a profile with one overlap_dp value (Framework.overlap_dp) decides it, and pricing the other would quietly
    price what the framework does instead (torchtitan's FSDP2 and DDP always overlap the gradient exchange; Megatron-LM
    of 2021 never did)."""
    fw = framework_preset(framework)
    if len(fw.overlap_dp) != 1 or bool(overlap) == fw.overlap_dp[0]:
        return None
    how = "always overlaps" if fw.overlap_dp[0] else "never overlaps"
    return InputError(argument, f"{str(fw.overlap_dp[0]).lower()} under framework {fw.name} (it {how} the "
                      "data-parallel gradient exchange with the backward pass)", overlap if got is None else got)


def reason_error(model: Transformer, cluster: Cluster, row: dict, reason: str, framework=None) -> InputError:
    """The InputError that explains why a strategy was refused (all but out-of-memory)."""
    dp, tp, pp, cp = row["dp"], row["tp"], row["pp"], row["cp"]
    if reason == "gpus_exceed_cluster":
        return InputError("dp*tp*pp*cp", f"at most the cluster's {cluster.num_gpus} GPUs", dp * tp * pp * cp)
    if reason == "tp_not_divide_heads":
        what = f"hidden={model.hidden}" if model.kind == "mlp" else f"heads={model.heads} and kv_heads={model.kv_heads}"
        return InputError("tp", f"a divisor of {what}", tp)
    if reason == "ep_invalid":
        if not model.is_moe:
            bad = "ep" if row.get("ep", 1) != 1 else "etp"
            return InputError(bad, "1 for a dense model (experts=1)", row.get(bad))
        ranks, etp = tp * cp * dp, row.get("etp", 1)
        if etp > 1 and (model.expert_ffn % etp or ranks % (row.get("ep", 1) * etp)):
            return InputError("etp", f"a divisor of expert_ffn_hidden={model.expert_ffn} with ep*etp dividing "
                              f"tp*cp*dp={ranks}", etp)
        return InputError("ep", f"a divisor of experts={model.experts} and of tp*cp*dp={ranks}", row.get("ep"))
    if reason == "pp_not_divide_layers":
        if row.get("stage_layers"):
            expected = f"pp={pp} counts >= 1 summing to layers={model.layers}"
            return InputError("stage_layers", expected, row["stage_layers"])
        return InputError("pp", f"a divisor of layers={model.layers} (or --stage-layers)", pp)
    if reason == "cp_not_divide_seq":
        two = cp_chunks(framework_preset(framework)) == 2
        return InputError("cp", f"2*cp dividing seq_len={model.seq_len}" if two
                          else f"a divisor of seq_len={model.seq_len}", cp)
    if reason == "batch_not_divide":
        expected = f"a multiple of dp*micro_batch={dp * row['micro_batch']}"
        return InputError("global_batch", expected, row["global_batch"])
    fw = framework_preset(framework)
    if reason == "schedule_invalid":
        if row["schedule"] == "interleaved":
            expected = ("vpp >= 2 and at most every stage's layers (one layer or more per chunk; the first and last "
                        "stage one fewer, their embedding or loss chunk)"
                        if fw.uneven_chunks else "vpp >= 2 dividing every stage's layers")
            return InputError("vpp", f"{expected}, with pp >= 2, for interleaved under framework {fw.name}", row["vpp"])
        if row["schedule"] in ("gpipe", "1f1b", "zb-h1", "zb-h2"):
            return InputError("vpp", f"1 for schedule {row['schedule']}", row["vpp"])
        return InputError("schedule", "gpipe, 1f1b, interleaved, zb-h1 or zb-h2 in the cost core", row["schedule"])
    if reason == "zero_incompatible_pp":
        expected = f"at most {fw.max_zero_with_pp} when pp > 1 under framework {fw.name}"
        return InputError("zero_stage", expected, row["zero_stage"])
    if reason == "framework_unsupported":
        if row["schedule"] not in fw.schedules:
            return InputError("schedule", f"one of {', '.join(fw.schedules)} under framework {fw.name}",
                              row["schedule"])
        if row["zero_stage"] > fw.max_zero:
            return InputError("zero_stage", f"at most {fw.max_zero} under framework {fw.name}", row["zero_stage"])
        ep, etp = row.get("ep", 1), row.get("etp", 1)
        refused = layout_refused(fw, model, row["zero_stage"], tp, cp, ep, etp, row["sequence_parallel"], pp, dp)
        if refused == "ep" and fw.ep_in_dp:
            return InputError("ep", f"a divisor of dp={dp} under framework {fw.name} (DeepSpeed cuts its expert-"
                              "parallel groups from the data-parallel ranks)", ep)
        if refused == "zero_stage" and fw.ep_in_dp:
            return InputError("zero_stage", f"0, 1 or 2 for an MoE model under framework {fw.name} (DeepSpeed's "
                              "MoE is not supported with ZeRO stage 3)", row["zero_stage"])
        if refused == "ep":
            return InputError("ep", f"ep x etp dividing tp x cp = {tp * cp} under framework {fw.name} at ZeRO "
                              f"{row['zero_stage']} (its experts fold into FSDP-sharded, CP and TP ranks, not DDP "
                              "replicas; ZeRO 2 or 3 shards dp)", ep)
        if refused == "sequence_parallel":
            return InputError("sequence_parallel", f"true with tp={tp} under framework {fw.name} (its tensor "
                              "parallelism always shards the sequence between blocks)", row["sequence_parallel"])
        layers = row.get("stage_layers") or [model.layers // pp] * pp
        if type_partition_refused(fw, model, layers):
            return type_partition_error(fw, model, layers, "stage_layers", ",".join(map(str, layers)))
        if refused == "cp":
            why = "no attention" if model.kind == "mlp" else "grouped K, V heads" if model.kv_heads != model.heads \
                else "MLA"
            expected = (f"1 for a model with {why} under framework {fw.name} (Megatron-DeepSpeed runs DeepSpeed-"
                        "Ulysses only on attention with as many K, V heads as query heads)"
                        if ulysses_refused(fw, model) else
                        f"1 with tp={tp}, pp={pp} under framework {fw.name} (DeepSpeed-Ulysses runs only at tp 1 and "
                        "pp 1)")
            return InputError("cp", expected, cp)
        if refused == "zero_stage":
            return InputError("zero_stage", f"0, 2 or 3 under framework {fw.name} (its FSDP shards the optimizer state "
                              "only with the gradients or the weights: no ZeRO-1)", row["zero_stage"])
        m = max(row["global_batch"] // (dp * row["micro_batch"]), 1)
        need = INTERLEAVE_NEEDS.get(fw.interleaved_microbatches)
        if row["schedule"] == "interleaved" and need and not interleaving_runs(
                fw.interleaved_microbatches, np.array([SCHED["interleaved"]]), np.array([pp]), np.array([m]))[0]:
            return InputError("global_batch", f"{need} micro-batches a step (global_batch / (dp*micro_batch)) "
                              f"with interleaved on pp={pp} under framework {fw.name}",
                              f"{row['global_batch']} ({m} micro-batches)")
        if row["precision"] == "fp8" and not fw.fp8:
            return InputError("precision", f"bf16 or fp16 under framework {fw.name}", row["precision"])
        if row.get("ep", 1) > 1 and row["precision"] == "fp16" and not fw.ep_fp16:
            return InputError("precision", f"bf16 or fp8 with ep > 1 under framework {fw.name} (Megatron-LM refuses "
                              "fp16 with expert parallelism)", row["precision"])
        if row.get("ep", 1) > 1 and pp > 1 and fw.overlap_ep and fw.overlap_ep_steady_only \
                and row["schedule"] != "interleaved":
            return InputError("vpp", f"2 or more (interleaved) with pp={pp} under framework {fw.name} (Megatron-Core's "
                              "EP A2A overlap takes virtual pipeline stages wherever there is a pipeline)", row["vpp"])
        if row.get("ep", 1) > 1 and not fw.expert_parallel:
            return InputError("ep", f"1 under framework {fw.name} (no expert parallelism)", row["ep"])
        if row.get("etp", 1) > 1 and not fw.expert_tensor_parallel:
            return InputError("etp", f"1 under framework {fw.name} (no expert tensor parallelism)", row["etp"])
        if cp > 1 and cp_by_all_to_all(fw, model):
            by = ("(DeepSpeed-Ulysses splits the heads over cp)" if fw.cp_ulysses else "for a model with windowed or "
                  "chunked layers (Transformer Engine's all-to-all exchange, the one it runs a window or chunks over, "
                  "splits the heads over cp)")
            return InputError("cp", f"a divisor of heads/tp={model.heads // tp} and kv_heads/tp={model.kv_heads // tp} "
                              f"under framework {fw.name} {by}", cp)
        if cp > 1 and cp_refused_for_window(fw, model):
            return InputError("cp", f"1 for a model with windowed or chunked attention under framework {fw.name} "
                              "(its context parallelism runs only SDPA; the windows and chunks are FlexAttention's)",
                              cp)
        return InputError("sequence_parallel", f"false under framework {fw.name}", row["sequence_parallel"])
    return InputError("strategy", "a feasible strategy", reason)


def number(text, flag: str, kind: type, low=None, high=None):
    """``text`` (a flag's word) as an int or float; InputError naming ``flag`` unless it is one
    (and >= ``low``, <= ``high`` where given)."""
    word = "an integer" if kind is int else "a number"
    try:
        value = kind(text)
    except (TypeError, ValueError):
        raise InputError(flag, word, text) from None
    span = f" >= {low}" if high is None else f" <= {high:,}" if low is None else f" from {low} to {high:,}"
    if (low is not None and not value >= low) or (high is not None and not value <= high):
        raise InputError(flag, word + span, value)
    return value


def number_list(text, flag: str, kind: type, expected: str) -> list:
    """``text``'s comma-separated words as ``kind`` (int or float); InputError naming ``flag``
    (expected: ``expected``) unless every word is one."""
    try:
        return [kind(x) for x in str(text).split(",")]
    except ValueError:
        raise InputError(flag, expected, text) from None


def _flag(f: dataclasses.Field) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def add_options(p, options_class) -> None:
    """One flag per field of a searcher's options dataclass (search._options), its default in the help."""
    for f in dataclasses.fields(options_class):
        default = "" if f.default is None else f" (default {f.default})"
        low, high = f.metadata["low"], f.metadata.get("high")
        bound = "" if high is None or (low, high) == (0, 1) else f"; at most {high:,.0f}"
        p.add_argument(_flag(f), dest=f.name, metavar="N" if f.metadata["kind"] is int else "X", default=None,
                       help=f.metadata["help"] + bound + default)


def options_from_args(options_class, args):
    """The options dataclass of the flags add_options added (a flag not given: the field's default);
    InputError naming the flag."""
    fields = {f.name: f for f in dataclasses.fields(options_class)}
    given = {k: number(getattr(args, k), _flag(f), f.metadata["kind"]) for k, f in fields.items()
             if getattr(args, k, None) is not None}
    try:
        return options_class(**given)
    except InputError as exc:
        raise InputError(_flag(fields[exc.argument]) if exc.argument in fields else exc.argument,
                         exc.expected, exc.got) from None


# ---- problem ranges: --cluster h100x64..4096, h100x64..4096:x2, h100x64,128,512 ---------------------------------
_GPU_COUNT = re.compile(r"^([a-z0-9-]+?)x(\d+)$", flags=re.IGNORECASE)  # h100x64 (a <gpu>x<N> preset)
_RANGE = re.compile(r"^(?:([a-z0-9-]+?)x)?(\d+)\.\.(\d+)(?::x(\d+))?$", flags=re.IGNORECASE)  # [h100x]64..4096[:x2]
RANGE_EXPECTED = ("a GPU-count range GPUxLO..HI or GPUxLO..HI:xF (e.g. h100x64..4096: powers of two; "
                  "h100x64..4096:x4), HI = LO times a power of F")
MAX_RANGE_SIZES = 64  # cluster sizes one range may give


def count_range(lo: int, hi: int, factor: int, word: str) -> list[int]:
    """lo, lo*factor, ..., hi (hi must be lo times a power of factor); InputError naming --cluster otherwise."""
    if lo < 1 or factor < 2 or hi < lo:
        raise InputError("--cluster", RANGE_EXPECTED, word)
    sizes = [lo]
    while sizes[-1] < hi and len(sizes) <= MAX_RANGE_SIZES:
        sizes.append(sizes[-1] * factor)
    if sizes[-1] != hi:
        raise InputError("--cluster", RANGE_EXPECTED, f"{word} ({hi} is not {lo} x {factor}^k)")
    return sizes


def cluster_words(text: str) -> list[str]:
    """--cluster's comma-separated words with ranges expanded, each cluster once in the order given:
    ``h100x64..4096`` (64, 128, ..., 4096 GPUs), ``h100x64..4096:x4`` (a factor of 4 per step), ``h100x64,128,512``
    (a bare count takes the GPU of the word before it), ``h100x64..1024,b200x64..1024`` (several GPU types); any other
    word (a named preset, a heterogeneous preset, a file) as it is. InputError naming --cluster for a bad form."""
    words = [w.strip() for w in str(text).split(",")]
    if not words or any(not w for w in words):
        raise InputError("--cluster", "one or more comma-separated clusters (presets, files or GPU-count ranges)", text)
    out: list[str] = []
    gpu: str | None = None  # the GPU of the last <gpu>x<N> word: what a bare count or LO..HI refers to
    for w in words:
        if _looks_like_file(w):
            out.append(w)
            gpu = None
            continue
        r = _RANGE.match(w)
        if r:
            g = r.group(1) or gpu
            if g is None:
                raise InputError("--cluster", "a GPU before a bare range (e.g. h100x64..4096)", w)
            sizes = count_range(int(r.group(2)), int(r.group(3)), int(r.group(4) or 2), w)
            out += [f"{g.lower()}x{n}" for n in sizes]
            gpu = g.lower()
        elif w.isdigit():
            if gpu is None:
                raise InputError("--cluster", "a GPU before a bare GPU count (e.g. h100x64,128,512)", w)
            out.append(f"{gpu}x{int(w)}")
        elif ".." in w:
            raise InputError("--cluster", RANGE_EXPECTED, w)
        else:
            m = _GPU_COUNT.match(w)
            gpu = m.group(1).lower() if m else None
            out.append(w)
    return list(dict.fromkeys(out))


def int_list(text, flag: str, low: int = 1) -> list[int]:
    """A flag's comma-separated integers >= ``low``, each once in the order given (--global-batch 512,1024);
    InputError naming ``flag``."""
    words = [w.strip() for w in str(text).split(",")]
    if any(not w for w in words):
        raise InputError(flag, f"comma-separated integers >= {low}", text)
    return list(dict.fromkeys(number(w, flag, int, low) for w in words))
