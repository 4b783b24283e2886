"""A plan as a launch configuration for Megatron-LM, torchtitan or DeepSpeed, and back.

A *plan* here is one strategy row in canonical form (``canonical_plan``): the StrategyTable's
columns as plain values, with ``stage_layers`` and ``stage_recompute`` always written out per
pipeline stage (uniform stages too), so two plans are the same plan exactly when their dicts
are equal. Each framework has a writer (plan -> text) and a reader (text -> plan); the reader
is plansweep's own (argparse for Megatron's arguments, tomllib for torchtitan's TOML, json for
DeepSpeed) and the round trip read(write(plan)) == plan is tested on random feasible plans.

A dimension the framework cannot express raises InputError naming the dimension, what the
framework takes and what the plan holds; nothing is silently dropped.

Mixture-of-experts models: the plan carries ep and etp (1 and 1 for a dense model)
and each writer adds the MoE layer's shape (experts, top-k, expert and shared-expert ffn widths,
which layers are MoE layers, capacity factor) in the framework's own terms: Megatron-LM
arguments; torchtitan's expert degrees, with the shape in the comment naming the flavor to
register (qwen3 or deepseek_v3 fields); DeepSpeed's launcher.moe, the arguments the training
script passes to deepspeed.moe.layer.MoE. plansweep's capacity_factor 1 is a dropless expert.

Framework versions the option names are taken from (tests/test_cli_export.py holds the names
against lists cut from these files):

- Megatron-LM core_v0.15.0 (commit 0d7e02bd26, 2025-12-05), megatron/training/arguments.py,
  the last release where every argument used here is a literal add_argument (later releases
  generate many of them from the config dataclasses; the names are unchanged).
- torchtitan v0.2.2 (commit 73a0e6979d, 2026-02-20), torchtitan/config/job_config.py: the last
  release whose jobs are TOML files (commit 9810191bb, "Config System Refactor: TOML to Python
  Dataclass Registry", replaced them with Python configs). Schedule names are those of
  torch.distributed.pipelining's get_schedule_class, as torchtitan's integration tests use them.
- DeepSpeed v0.19.5 (commit cf44300453, 2026-08-09): deepspeed/runtime/constants.py,
  deepspeed/runtime/zero/config.py, deepspeed/runtime/activation_checkpointing/config.py,
  deepspeed/runtime/tensor_parallel/config.py (AutoTP's ``autotp_size``). The MoE names were
  checked at v0.16.4 (commit e2dc3eeb19, 2025-02-20), the newest release in plansweep's mirror of
  DeepSpeed: deepspeed/moe/layer.py (MoE's parameters), deepspeed/utils/groups.py (expert groups
  cut from the data-parallel ranks), deepspeed/runtime/engine.py ("MoE not supported with Stage
  3"); MoE with pipeline models since v0.14.1 (commit 08e0733e4).
- The MoE names of Megatron-LM come from the same file's _add_moe_args (--kv-channels from
  _add_network_size_args), torchtitan's from job_config.py's Parallelism (expert_parallel_degree,
  expert_tensor_parallel_degree, expert_parallel_comm_backend), distributed/parallel_dims.py
  (the expert mesh) and the models' args.py files at the same tags.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex

import numpy as np

from costmodel import Cluster, InputError, Transformer
from costmodel._codes import RECOMPUTE_MODULES, module_code, module_names
from costmodel._feasibility import type_partition
from costmodel._frameworks import framework_preset
from costmodel._layer_compute import cp_by_all_to_all

MEGATRON_VERSION = "Megatron-LM core_v0.15.0 (0d7e02bd26), megatron/training/arguments.py"
TORCHTITAN_VERSION = "torchtitan v0.2.2 (73a0e6979d), torchtitan/config/job_config.py (TOML job configs)"
DEEPSPEED_VERSION = "DeepSpeed v0.19.5 (cf44300453), deepspeed/runtime/config.py and its section configs"

PLAN_KEYS = ("dp", "tp", "pp", "cp", "ep", "etp", "micro_batch", "global_batch", "vpp", "zero_stage", "schedule",
             "recompute", "precision", "sequence_parallel", "overlap_dp", "stage_layers", "stage_recompute")


# ---- the canonical plan ----------------------------------------------------------------------
def canonical_plan(row: dict, model: Transformer) -> dict:
    """``row`` (StrategyTable.row: plain values, optional stage lists) with every stage written
    out: stage_layers (layers per pipeline stage, uniform ones too) and stage_recompute."""
    pp = int(row["pp"])
    plan = {k: row.get(k, 1) if k in ("ep", "etp") else row[k] for k in PLAN_KEYS[:15]}
    layers = row.get("stage_layers")
    if layers is None:
        assert model.layers % pp == 0, "a feasible row with uniform stages has pp | layers"
        layers = [model.layers // pp] * pp
    plan["stage_layers"] = [int(x) for x in layers]
    rec = row.get("stage_recompute")
    plan["stage_recompute"] = list(rec) if rec is not None else [row["recompute"]] * pp
    if len(set(plan["stage_recompute"])) == 1:
        plan["recompute"] = plan["stage_recompute"][0]
    if row.get("recompute_modules") and "selective" in plan["stage_recompute"]:  # (names, read under selective only)
        plan["recompute_modules"] = row["recompute_modules"]
    return plan


def _one_recompute(plan: dict, framework: str) -> str:
    """The plan's recompute granularity, which must be the same on every stage: none of the three
    frameworks sets a granularity per pipeline stage."""
    kinds = sorted(set(plan["stage_recompute"]))
    if len(kinds) != 1:
        raise InputError("stage_recompute", f"one recompute granularity for every stage ({framework} sets one for "
                         "the whole model)", plan["stage_recompute"])
    if plan.get("recompute_modules") and framework != "Megatron-LM":
        raise InputError("recompute_modules", f"none ({framework} has no Megatron-Core recompute modules)",
                         plan["recompute_modules"])
    return kinds[0]


def one_line(text: str) -> str:
    """``text`` for a comment line of a launch script: its characters that are not printable (a newline, which
    would end the comment and run what follows as a command) written as Python escapes."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def _launcher(plan: dict, cluster: Cluster) -> tuple[int, int]:
    """(nodes, GPUs per node) of a launcher running dp*tp*pp*cp processes on ``cluster``."""
    world = plan["dp"] * plan["tp"] * plan["pp"] * plan["cp"]
    per = cluster.gpus_per_node
    if world <= per:
        return 1, world
    if world % per:
        raise InputError("dp*tp*pp*cp", f"at most {per} or a multiple of the cluster's {per} GPUs per node "
                         "(a launcher starts the same number of processes on every node)", world)
    return world // per, per


def _model_kind(model: Transformer, plan: dict, framework: str) -> None:
    if model.kind != "transformer":
        raise InputError("--model", f"a transformer ({framework} trains GPT-style models)",
                         f"{model.name} ({model.kind})")
    # evaluate refuses these first (reason ep_invalid); a plan read from elsewhere meets them here
    if not model.is_moe and (plan["ep"], plan["etp"]) != (1, 1):
        raise InputError("ep", f"ep = etp = 1 for the dense model {model.name}", f"ep={plan['ep']}, etp={plan['etp']}")
    if model.windowed_layers and model.attention_chunk is not None:  # (Megatron-Bridge's Llama 4 provider has them)
        raise InputError("model.attention_chunk", f"none, or at least the sequence's {model.seq_len:,} tokens "
                         f"({framework}'s model has no chunked attention)", model.attention_chunk)
    if model.windowed_layers and framework != "Megatron-LM":  # (a window covering the sequence restricts nothing)
        raise InputError("model.sliding_window", f"none, or at least the sequence's {model.seq_len:,} tokens "
                         f"({framework}'s model has no sliding-window attention; Megatron-LM's has)",
                         model.sliding_window)


def _every_nth(L: int, kept: int, *, dividing: bool = False) -> int | None:
    """The smallest N in [2, L] whose every-N-th-layer pattern (1-based) leaves ``kept`` of L layers out of it: L - L //
    N == kept (with ``dividing``, N a divisor of L too); None where no N does."""
    return next((f for f in range(2, L + 1) if L - L // f == kept and not (dividing and L % f)), None)


def _layer_pattern(model: Transformer, flag: str, dividing: bool = False) -> int:
    """The N of Megatron-LM's every-N-th-layer ``flag`` for the layers a window or chunks restrict: the model's
    window_every where it names the layers (0: they follow no such pattern, refused), else the N their count gives
    (a model file that does not say which: the smallest, L - L // N of them)."""
    n, L, e = model.window_layers, model.layers, model.window_every
    rule = f"every N-th layer (1-based) left full, N{' dividing ' + str(L) if dividing else ''} >= 2 ({flag})"
    if e is None:  # (not said: the N the count gives)
        e = _every_nth(L, n, dividing=dividing)
        if e is None:
            raise InputError("model.window_layers", f"all {L} layers or L - L // N of them, {rule}", n)
    elif e == 0 or (dividing and L % e):
        raise InputError("model.window_every", f"the restricted layers as {rule}; this model's follow no such "
                         "pattern" if e == 0 else f"the restricted layers as {rule}", e)
    return e


def megatron_window(model: Transformer) -> list:
    """Megatron-LM's arguments for the model's sliding window (none without one, nor where it restricts no layer: at
    least the sequence, or on none): --window-size W - 1,0 (the query and the W - 1 keys before it: Transformer
    Engine's window_size (left, right)), and where some layers keep full attention --window-attn-skip-freq N, under
    which every N-th layer (1-based) is full and the others windowed (Megatron-Core's is_layer_window_attention), the
    model's window_every (gpt-oss's layer_types: 2). Windowed layers in no such pattern are refused (_layer_pattern)."""
    w, n, L = model.sliding_window, model.window_layers, model.layers
    if w is None or not model.windowed_layers:
        return []
    out = ["--window-size", f"{w - 1},0"]
    if n is not None and n < L:
        out += ["--window-attn-skip-freq", _layer_pattern(model, "Megatron-LM's --window-attn-skip-freq")]
    return out


def moe_layer_pattern(model: Transformer) -> list[int]:
    """1 for each MoE layer, 0 for each dense one (Transformer.moe_layers_before's rule: layer j is
    an MoE layer when j >= dense_layers and (j - dense_layers) % moe_layer_freq == freq - 1)."""
    d, f = model.dense_layers, model.moe_layer_freq
    return [int(j >= d and (j - d) % f == f - 1) for j in range(model.layers)]


def _microbatches(plan: dict) -> int:
    return plan["global_batch"] // (plan["dp"] * plan["micro_batch"])


# ---- Megatron-LM -----------------------------------------------------------------------------
# Megatron-LM's arguments plansweep writes and reads: flag -> (argparse keyword arguments).
# Names and choices from megatron/training/arguments.py at core_v0.15.0.
MEGATRON_ARGS: dict[str, dict] = {
    "--tensor-model-parallel-size": {"type": int, "default": 1},
    "--pipeline-model-parallel-size": {"type": int, "default": 1},
    "--context-parallel-size": {"type": int, "default": 1},
    "--num-layers-per-virtual-pipeline-stage": {"type": int},
    "--num-virtual-stages-per-pipeline-rank": {"type": int},
    "--pipeline-model-parallel-layout": {"type": str},
    "--decoder-first-pipeline-num-layers": {"type": int},
    "--decoder-last-pipeline-num-layers": {"type": int},
    "--sequence-parallel": {"action": "store_true"},
    "--use-distributed-optimizer": {"action": "store_true"},
    "--use-megatron-fsdp": {"action": "store_true"},
    "--data-parallel-sharding-strategy": {"choices": ["no_shard", "optim", "optim_grads", "optim_grads_params"],
                                          "default": "no_shard"},
    "--overlap-grad-reduce": {"action": "store_true"},
    "--overlap-param-gather": {"action": "store_true"},
    "--recompute-granularity": {"choices": ["full", "selective"]},
    "--recompute-method": {"choices": ["uniform", "block"]},
    "--recompute-num-layers": {"type": int},
    "--recompute-modules": {"nargs": "*"},  # (core_v0.15.0: nargs='*', the names checked by from_megatron)
    "--micro-batch-size": {"type": int},
    "--global-batch-size": {"type": int},
    "--bf16": {"action": "store_true"},
    "--fp16": {"action": "store_true"},
    "--fp8-format": {"choices": ["e4m3", "hybrid"]},
    "--num-layers": {"type": int},
    "--hidden-size": {"type": int},
    "--ffn-hidden-size": {"type": int},
    "--num-attention-heads": {"type": int},
    "--group-query-attention": {"action": "store_true"},
    "--num-query-groups": {"type": int, "default": 1},
    "--seq-length": {"type": int},
    "--max-position-embeddings": {"type": int},
    "--swiglu": {"action": "store_true"},
    "--quick-geglu": {"action": "store_true"},
    "--normalization": {"choices": ["LayerNorm", "RMSNorm"], "default": "LayerNorm"},
    "--disable-bias-linear": {"action": "store_true"},
    "--untie-embeddings-and-output-weights": {"action": "store_true"},
    "--position-embedding-type": {"choices": ["learned_absolute", "rope", "mrope", "relative", "none"],
                                  "default": "learned_absolute"},
    "--kv-channels": {"type": int},
    "--window-size": {"type": str},  # (Megatron-LM: tuple_type, "left,right")
    "--window-attn-skip-freq": {"type": int},  # (Megatron-LM: moe_freq_type; plansweep writes an integer)
    "--no-rope-freq": {"type": int},  # (Megatron-LM: no_rope_freq_type; plansweep writes an integer)
    "--cp-comm-type": {"nargs": "+", "default": ["p2p"]},
    # multi-head latent attention (_add_mla_args)
    "--multi-latent-attention": {"action": "store_true"},
    "--q-lora-rank": {"type": int},
    "--kv-lora-rank": {"type": int, "default": 32},
    "--qk-head-dim": {"type": int, "default": 128},
    "--qk-pos-emb-head-dim": {"type": int, "default": 64},
    "--v-head-dim": {"type": int, "default": 128},
    # _add_moe_args (the "moe" group)
    "--num-experts": {"type": int},
    "--moe-router-topk": {"type": int, "default": 2},
    "--moe-router-num-groups": {"type": int},
    "--moe-router-group-topk": {"type": int},
    "--moe-ffn-hidden-size": {"type": int},
    "--moe-shared-expert-intermediate-size": {"type": int},
    "--moe-layer-freq": {"default": "1"},  # an int or a list expression; read by _moe_pattern
    "--expert-model-parallel-size": {"type": int, "default": 1},
    "--expert-tensor-parallel-size": {"type": int},  # None: Megatron takes the tensor-parallel size
    "--moe-grouped-gemm": {"action": "store_true"},
    "--moe-token-dispatcher-type": {"choices": ["allgather", "alltoall", "flex"], "default": "allgather"},
    "--moe-enable-deepep": {"action": "store_true"},
    "--moe-expert-capacity-factor": {"type": float},
    "--moe-pad-expert-input-to-capacity": {"action": "store_true"},
    "--overlap-moe-expert-parallel-comm": {"action": "store_true"},
    # _add_checkpointing_args: Megatron-FSDP saves only in its own format
    "--ckpt-format": {"choices": ["torch", "torch_dist", "zarr", "torch_dcp", "fsdp_dtensor"],
                      "default": "torch_dist"},
}
# ZeRO stage -> Megatron-LM's flags: 1 = its distributed optimizer (optimizer state sharded over
# data-parallel ranks); 2 and 3 = Megatron-FSDP with gradients (2) and parameters too (3) sharded,
# which validate_args lets save only in its fsdp_dtensor checkpoint format.
MEGATRON_ZERO = {0: [], 1: ["--use-distributed-optimizer"],
                 2: ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads",
                     "--ckpt-format", "fsdp_dtensor"],
                 3: ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads_params",
                     "--ckpt-format", "fsdp_dtensor"]}
MEGATRON_SCHEDULES = ("1f1b", "interleaved")  # Megatron-LM's 1F1B and interleaved 1F1B (vpp >= 2)
MEGATRON_PRECISION = {"bf16": ["--bf16"], "fp16": ["--fp16"], "fp8": ["--bf16", "--fp8-format", "hybrid"]}
MEGATRON_SCRIPT = "pretrain_gpt.py"
# Profile (costmodel._frameworks) -> Megatron-LM's token dispatcher for expert parallelism: the
# alltoall dispatcher (the MoE README's choice with ep > 1), or the flex dispatcher with DeepEP
# (core_v0.15.0: --moe-enable-deepep, "only works with flex token dispatcher") for the profiles
# priced with per-node dispatch; the *-a2a-overlap profiles add --overlap-moe-expert-parallel-comm.
MEGATRON_PROFILES = ("megatron-core", "megatron-2021", "megatron-core-a2a-overlap", "megatron-core-deepep",
                     "megatron-core-deepep-a2a-overlap")


def _megatron_pattern(model: Transformer) -> str:
    """--moe-layer-freq's list expression for the model's layers: d = dense_layers dense layers,
    n = moe_layers groups of (f - 1 dense, 1 MoE) with f = moe_layer_freq, then the r left over
    dense (moe_layer_pattern's rule; Megatron evaluates it: digits, [], (), + and * only)."""
    d, f, n = model.dense_layers, model.moe_layer_freq, model.moe_layers
    r = model.layers - d - n * f
    group = "[1]" if f == 1 else f"([0]*{f - 1}+[1])"
    parts = ([f"[0]*{d}"] if d else []) + [f"{group}*{n}"] + ([f"[0]*{r}"] if r else [])
    return "+".join(parts)


def _moe_pattern(text: str, layers: int) -> list[int]:
    """The layer pattern of --moe-layer-freq: an int N (layer i is MoE when i % N == 0) or a list
    expression of 0/1 lists joined by + and repeated by * (read here without eval)."""
    text = text.replace(" ", "")
    if text.isdigit():
        return [int(i % int(text) == 0) for i in range(layers)]
    if re.search(r"[^,\d\[\]()+*]", text):
        raise InputError("--moe-layer-freq", "an integer or a list expression of [0/1,...], +, * and ()", text)
    pos = 0

    def term() -> list[int]:  # term := atom ('*' int)*
        nonlocal pos
        if text[pos] == "(":
            pos += 1
            out = expr()
            pos += 1  # ')'
        else:
            end = text.index("]", pos)
            out = [int(x) for x in text[pos + 1:end].split(",") if x]
            pos = end + 1
        while pos < len(text) and text[pos] == "*":
            m = re.match(r"\d+", text[pos + 1:])
            out, pos = out * int(m.group()), pos + 1 + len(m.group())
        return out

    def expr() -> list[int]:  # expr := term ('+' term)*
        nonlocal pos
        out = term()
        while pos < len(text) and text[pos] == "+":
            pos += 1
            out = out + term()
        return out

    return expr()


def _megatron_moe(plan: dict, model: Transformer, profile: str, recompute: str) -> list:
    """The MoE model's arguments and the expert-parallel degrees (none for a dense model)."""
    if not model.is_moe:
        return []
    E, k, ep, etp = model.experts, model.experts_per_token, plan["ep"], plan["etp"]
    flex = "deepep" in profile
    overlap = "a2a-overlap" in profile and ep > 1  # Megatron asserts ep > 1 for the overlap
    if ep > 1 and plan["precision"] == "fp16":
        raise InputError("precision", "bf16 or fp8 with ep > 1 (Megatron-LM refuses fp16 with expert parallelism)",
                         plan["precision"])
    if overlap and plan["pp"] > 1 and plan["vpp"] == 1:
        raise InputError("vpp", "2 or more with pp > 1 (Megatron-LM's --overlap-moe-expert-parallel-comm needs "
                         "virtual pipeline stages)", plan["vpp"])
    if overlap and recompute == "full":
        raise InputError("recompute", "none or selective (Megatron-LM's --overlap-moe-expert-parallel-comm "
                         "refuses full recomputation)", recompute)
    if flex and model.capacity_factor != 1.0:
        raise InputError("model.capacity_factor", "1.0 with the flex dispatcher (it does not pad expert inputs "
                         "to capacity, which plansweep prices)", model.capacity_factor)
    a: list = ["--num-experts", E, "--moe-router-topk", k, "--moe-ffn-hidden-size", model.expert_ffn]
    if model.router_group_topk < model.router_groups:  # group-limited routing, as plansweep prices it
        a += ["--moe-router-num-groups", model.router_groups, "--moe-router-group-topk", model.router_group_topk]
    if model.shared_experts:  # Megatron takes the shared experts' total ffn width
        a += ["--moe-shared-expert-intermediate-size", model.shared_experts * model.shared_expert_ffn]
    if moe_layer_pattern(model) != [1] * model.layers:  # Megatron's default, an int 1: every layer
        a += ["--moe-layer-freq", _megatron_pattern(model)]
    a += ["--moe-grouped-gemm", "--expert-model-parallel-size", ep, "--expert-tensor-parallel-size", etp]
    a += ["--moe-token-dispatcher-type", "flex", "--moe-enable-deepep"] if flex else [
        "--moe-token-dispatcher-type", "alltoall"]
    if overlap:
        a += ["--overlap-moe-expert-parallel-comm"]
    if model.capacity_factor != 1.0:  # plansweep prices capacity_factor x the routed copies: padded
        a += ["--moe-expert-capacity-factor", model.capacity_factor, "--moe-pad-expert-input-to-capacity"]
    return a


def megatron_environment(plan: dict, profile: str) -> tuple[dict[str, str], str]:
    """The launch environment Megatron-LM's validate_args asks of the plan, and why (a comment).
    CUDA_DEVICE_MAX_CONNECTIONS (core_v0.15.0 to core_v0.19.0, arguments.py): Megatron-FSDP asserts
    it is not 1; otherwise tp or cp > 1 asserts it is 1 (on GPUs before Blackwell; 1 is harmless
    after), so that the tensor-parallel communication kernels run in issue order; with the
    expert-parallel overlap it only warns, and plansweep priced that overlap: more queues."""
    if plan["zero_stage"] >= 2:
        return {"CUDA_DEVICE_MAX_CONNECTIONS": "8"}, ("Megatron-FSDP needs more than one CUDA work queue (8, CUDA's "
                                                      "default)")
    if plan["tp"] == 1 and plan["cp"] == 1:
        return {}, ""
    if "a2a-overlap" in profile and plan["ep"] > 1:
        return {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}, ("the expert-parallel overlap plansweep priced runs on several "
                                                       "CUDA work queues (Megatron only warns with tp or cp > 1)")
    return {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, "tp or cp > 1: one CUDA work queue keeps communication in issue order"


def chunk_layers(sl: list[int], v: int) -> list[list[int]]:
    """Layers in each of the v chunks of every stage (``sl``: layers per stage), as the uneven_chunks frameworks
    split them: n // v a chunk, one more for the first n % v; a first (last) stage of fewer than v layers leaves its
    first (last) chunk to the embedding (the output layer and loss) alone and spreads its layers over the rest."""
    out = []
    for r, n in enumerate(sl):
        if n >= v:
            out.append([n // v + (i < n % v) for i in range(v)])
            continue
        rest = [n // (v - 1) + (i < n % (v - 1)) for i in range(v - 1)]
        out.append([0, *rest] if r == 0 else [*rest, 0])
    return out


def megatron_layout(sl: list[int], v: int, compact: bool = True) -> str:
    """--pipeline-model-parallel-layout for stages of ``sl`` layers in v chunks each (chunk_layers); ``compact``: runs
    of three or more alike virtual stages as Megatron-Core's '(chunk|)*n' (E|(t|)*126L for Llama 3 405B's cut)."""
    p, chunks = len(sl), chunk_layers(sl, v)
    parts = []
    for j in range(p * v):
        r, i = j % p, j // p
        parts.append(("E" if j == 0 else "") + "t" * chunks[r][i] + ("L" if j == p * v - 1 else ""))
    if not compact:
        return "|".join(parts)
    out, k = "", 0
    while k < len(parts):
        n = next((x for x in range(k, len(parts)) if parts[x] != parts[k]), len(parts)) - k
        out += f"({parts[k]}|)*{n}" if n >= 3 else (parts[k] + "|") * n
        k += n
    return out[:-1] if out.endswith("|") else out


def _layout_stage_layers(text: str, p: int) -> tuple[list[int], int]:
    """(decoder layers per stage, chunks per stage) of a --pipeline-model-parallel-layout (megatron_layout's form,
    with Megatron-Core's '(...)*n' and 'x*n' repeats)."""
    flat = text.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        flat = re.sub(pattern, lambda m: m.group(1) * int(m.group(2)), flat)
    chunks = flat.split("|")
    if len(chunks) % p or set(flat) - set("EtL|"):
        raise InputError("--pipeline-model-parallel-layout", f"virtual stages of E, t and L, a multiple of pp={p}",
                         text)
    layers = [0] * p
    for j, chunk in enumerate(chunks):
        layers[j % p] += chunk.count("t")
    return layers, len(chunks) // p


def flag_lines(a: list) -> list[str]:
    """A command's arguments one flag (and its values) a line, indented and shell-quoted."""
    words = [str(x) for x in a]
    args, i = [], 0
    while i < len(words):
        j = i + 1
        while j < len(words) and not words[j].startswith("--"):
            j += 1
        args.append("    " + " ".join(shlex.quote(w) for w in words[i:j]))
        i = j
    return args


def to_megatron(plan: dict, model: Transformer, cluster: Cluster, *, profile: str = "megatron-core") -> str:
    """A torchrun command line running Megatron-LM's pretrain_gpt.py with the plan's arguments.
    ``profile``, the framework profile the plan was priced under, picks the MoE token dispatcher
    and the all-to-all overlap (MEGATRON_PROFILES)."""
    if profile not in MEGATRON_PROFILES:
        raise InputError("--framework", "a Megatron profile: " + ", ".join(MEGATRON_PROFILES), profile)
    _model_kind(model, plan, "Megatron-LM")
    if plan["schedule"] not in MEGATRON_SCHEDULES:
        raise InputError("schedule", "1f1b or interleaved (Megatron-LM's pipeline schedules)", plan["schedule"])
    recompute = _one_recompute(plan, "Megatron-LM")
    nodes, per_node = _launcher(plan, cluster)
    p, v, sl = plan["pp"], plan["vpp"], plan["stage_layers"]
    a: list[str] = []
    a += ["--num-layers", model.layers, "--hidden-size", model.hidden, "--ffn-hidden-size", model.ffn_hidden,
          "--num-attention-heads", model.heads]
    if model.mla:
        a += ["--multi-latent-attention", "--kv-lora-rank", model.kv_lora_rank, "--qk-head-dim", model.head_size,
              "--qk-pos-emb-head-dim", model.qk_rope_head_dim, "--v-head-dim", model.v_head_dim or model.head_size]
        a += [] if model.q_lora_rank is None else ["--q-lora-rank", model.q_lora_rank]
    elif model.head_dim is not None:
        a += ["--kv-channels", model.head_dim]
    if model.kv_heads != model.heads:
        a += ["--group-query-attention", "--num-query-groups", model.kv_heads]
    a += ["--seq-length", model.seq_len, "--max-position-embeddings", model.seq_len]
    a += megatron_window(model) + megatron_nope(model)
    if model.activation == "swiglu":
        a += ["--swiglu"]
    elif model.activation == "geglu":  # Megatron-LM's one gated GELU, its quick-GELU form (the shape a GeGLU prices)
        a += ["--quick-geglu"]
    if model.norm == "rmsnorm":
        a += ["--normalization", "RMSNorm"]
    if not model.bias:
        a += ["--disable-bias-linear"]
    if not model.tied_embeddings:
        a += ["--untie-embeddings-and-output-weights"]
    if not model.learned_positions:
        a += ["--position-embedding-type", "rope"]
    a += _megatron_moe(plan, model, profile, recompute)
    a += ["--tensor-model-parallel-size", plan["tp"], "--pipeline-model-parallel-size", p,
          "--context-parallel-size", plan["cp"]]
    if plan["cp"] > 1 and cp_by_all_to_all(framework_preset(profile), model):  # the exchange the plan was priced with
        a += ["--cp-comm-type", "a2a"]
    if plan["sequence_parallel"]:
        a += ["--sequence-parallel"]
    uniform, layout = len(set(sl)) == 1, v > 1 and (min(sl) < v or any(n % v for n in sl))
    layout = layout or len(set(sl[1:-1])) > 1  # stages between the first and last unequal: only a layout says so
    if layout:
        # The first stage's first chunk the embedding alone, the last stage's last the output and loss alone, a
        # stage whose layers v does not divide in chunks one layer apart (chunk_layers, as the profile prices them),
        # or unequal stages between the first and the last: only a layout says so (Megatron-Core's
        # PipelineParallelLayerLayout, core_v0.15.0: virtual stage j = chunk x pp + stage, 'E' embedding, 't' a
        # decoder layer, 'L' the loss, '|' between virtual stages; one a stage without interleaving, where
        # validate_args sets no virtual pipeline size).
        a += ["--pipeline-model-parallel-layout", megatron_layout(sl, v)]
    elif not uniform:
        # Megatron-LM takes the first and last stage's layers; the stages between share the rest evenly.
        a += ["--decoder-first-pipeline-num-layers", sl[0], "--decoder-last-pipeline-num-layers", sl[-1]]
    if v > 1 and not layout:
        if uniform:
            a += ["--num-layers-per-virtual-pipeline-stage", sl[0] // v]
        else:
            a += ["--num-virtual-stages-per-pipeline-rank", v]
    a += MEGATRON_ZERO[plan["zero_stage"]]
    if plan["overlap_dp"]:
        a += ["--overlap-grad-reduce"] + (["--overlap-param-gather"] if plan["zero_stage"] == 1 else [])
    if recompute == "selective":
        a += ["--recompute-granularity", "selective"]
        if plan.get("recompute_modules"):  # Megatron-Core's modules, space-separated (default: core_attn)
            a += ["--recompute-modules", *plan["recompute_modules"].split(",")]
    elif recompute == "full":
        a += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", 1]
    a += ["--micro-batch-size", plan["micro_batch"], "--global-batch-size", plan["global_batch"]]
    a += MEGATRON_PRECISION[plan["precision"]]
    env, why = megatron_environment(plan, profile)
    lines = [f"# plansweep export: {one_line(model.name)} on {one_line(cluster.name)}, for {MEGATRON_VERSION}",
             f"# data parallel {plan['dp']} = {nodes * per_node} GPUs / (tp {plan['tp']} x pp {p} x cp {plan['cp']}); "
             f"add your data, tokenizer (plansweep priced a vocabulary of {model.vocab}), optimizer and checkpoint "
             "arguments",
             *([f"# environment: {why}"] if env else []),
             *([f"# the experts' activation clamp ({model.glu_clamp:g}) has no Megatron-LM argument: "
                "TransformerConfig.activation_func_clamp_value (Megatron-Bridge's GPT-OSS provider sets it); plansweep "
                "priced it"] if model.glu_clamp is not None else []),
             "".join(f"{k}={v} " for k, v in env.items())
             + f"torchrun --nnodes {nodes} --nproc-per-node {per_node} {MEGATRON_SCRIPT} \\"]
    args = flag_lines(a)
    return "\n".join(lines) + "\n" + " \\\n".join(args) + "\n"


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        raise InputError("megatron arguments", "Megatron-LM arguments plansweep writes", message)


def megatron_parser() -> argparse.ArgumentParser:
    """plansweep's reader of the Megatron-LM arguments it writes (MEGATRON_ARGS)."""
    p = _RaisingParser(prog=MEGATRON_SCRIPT, add_help=False, allow_abbrev=False)
    for flag, kw in MEGATRON_ARGS.items():
        p.add_argument(flag, **kw)
    return p


def _launch_words(text: str, launcher: str, launch_flags: tuple[str, ...], script_args: dict, what: str):
    """(the launcher's integer flags, pretrain_gpt.py's arguments by ``script_args``) of a command line written as
    ``launcher`` FLAGS pretrain_gpt.py ARGS, comments and line continuations aside."""
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    words = shlex.split(body.replace("\\\n", " "))
    if launcher not in words or MEGATRON_SCRIPT not in words:
        raise InputError(what, f"{launcher} ... {MEGATRON_SCRIPT} ARGS", text[:60])
    launch = argparse.ArgumentParser(add_help=False)
    for flag in launch_flags:
        launch.add_argument(flag, type=int)
    parser = _RaisingParser(prog=MEGATRON_SCRIPT, add_help=False, allow_abbrev=False)
    for flag, kw in script_args.items():
        parser.add_argument(flag, **kw)
    i = words.index(MEGATRON_SCRIPT)
    return launch.parse_args(words[words.index(launcher) + 1:i]), parser.parse_args(words[i + 1:])


def _megatron_words(text: str) -> tuple[argparse.Namespace, argparse.Namespace]:
    """(torchrun's arguments, Megatron-LM's arguments) of a command line written by to_megatron."""
    return _launch_words(text, "torchrun", ("--nnodes", "--nproc-per-node"), MEGATRON_ARGS, "megatron command")


def megatron_launch(text: str) -> dict:
    """What a command line written by to_megatron starts: {"env": the variables set before
    torchrun, "world": nodes x processes per node, "argv": pretrain_gpt.py's arguments}."""
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    words = shlex.split(body.replace("\\\n", " "))
    lw, _ = _megatron_words(text)
    t = words.index("torchrun")
    env = dict(w.split("=", 1) for w in words[:t])
    return {"env": env, "world": lw.nnodes * lw.nproc_per_node, "argv": words[words.index(MEGATRON_SCRIPT) + 1:]}


def megatron_nope(model: Transformer) -> list:
    """--no-rope-freq N for a model with chunked attention on some layers (Llama 4): the chunked layers are those with
    rotary positions, the others attend globally without them (HuggingFace's Llama4TextConfig no_rope_layers), and
    Megatron-Core's no_rope_freq N leaves every N-th layer (1-based) without them (TransformerConfig: the pattern
    [0] * (N - 1) + [1], asserting that N divides the layers). Written whatever the sequence (the positions are the
    model's, its chunks restrict nothing at or below the chunk); a chunked share no N gives is refused."""
    n, L = model.window_layers, model.layers
    if model.attention_chunk is None or n is None or n == L:
        return []
    return ["--no-rope-freq", _layer_pattern(model, "Megatron-LM's --no-rope-freq: every N-th layer without "
                                                    "rotary positions", dividing=True)]


def megatron_model(text: str) -> dict:
    """The model shape a command line written by to_megatron gives Megatron-LM, in plansweep's
    Transformer field names (the shared experts as one total width, as Megatron takes them)."""
    _, a = _megatron_words(text)
    L = a.num_layers
    out = {"layers": L, "hidden": a.hidden_size, "ffn_hidden": a.ffn_hidden_size, "heads": a.num_attention_heads,
           "kv_heads": a.num_query_groups if a.group_query_attention else a.num_attention_heads,
           "head_dim": a.kv_channels, "experts": a.num_experts or 1}
    if a.window_size:  # "left,right": the query and its left keys
        f = a.window_attn_skip_freq
        out.update(sliding_window=int(a.window_size.split(",")[0]) + 1, window_layers=None if not f else L - L // f)
    if a.no_rope_freq:  # the layers with rotary positions: the chunked ones of a chunked model
        out.update(rope_layers=L - L // a.no_rope_freq)
    if a.multi_latent_attention:
        out.update(head_dim=a.qk_head_dim, q_lora_rank=a.q_lora_rank, kv_lora_rank=a.kv_lora_rank,
                   qk_rope_head_dim=a.qk_pos_emb_head_dim, v_head_dim=a.v_head_dim)
    if a.num_experts:
        out.update(experts_per_token=a.moe_router_topk, expert_ffn_hidden=a.moe_ffn_hidden_size,
                   shared_ffn_total=a.moe_shared_expert_intermediate_size or 0,
                   moe_pattern=_moe_pattern(a.moe_layer_freq, L), capacity_factor=a.moe_expert_capacity_factor or 1.0,
                   router_groups=a.moe_router_num_groups or 1, router_group_topk=a.moe_router_group_topk or 1,
                   dispatcher=a.moe_token_dispatcher_type, deepep=a.moe_enable_deepep,
                   overlap_ep=a.overlap_moe_expert_parallel_comm)
    return out


def from_megatron(text: str) -> dict:
    """The plan of a command line written by to_megatron."""
    lw, a = _megatron_words(text)
    t, p, c, L = a.tensor_model_parallel_size, a.pipeline_model_parallel_size, a.context_parallel_size, a.num_layers
    dp = lw.nnodes * lw.nproc_per_node // (t * p * c)
    if a.pipeline_model_parallel_layout:
        stage_layers, chunks = _layout_stage_layers(a.pipeline_model_parallel_layout, p)
    elif a.decoder_first_pipeline_num_layers is None and a.decoder_last_pipeline_num_layers is None:
        stage_layers = [L // p] * p
    else:
        first = a.decoder_first_pipeline_num_layers
        last = a.decoder_last_pipeline_num_layers
        stage_layers = [first] + [(L - first - last) // (p - 2)] * (p - 2) + [last] if p > 2 else [first, last]
    if a.pipeline_model_parallel_layout:
        vpp = chunks
    elif a.num_layers_per_virtual_pipeline_stage:
        vpp = stage_layers[0] // a.num_layers_per_virtual_pipeline_stage
    else:
        vpp = a.num_virtual_stages_per_pipeline_rank or 1
    zero = 1 if a.use_distributed_optimizer else 0
    if a.use_megatron_fsdp:
        zero = {"optim_grads": 2, "optim_grads_params": 3}[a.data_parallel_sharding_strategy]
    recompute = a.recompute_granularity or "none"
    precision = "fp8" if a.fp8_format else "fp16" if a.fp16 else "bf16"
    # Megatron's expert tensor parallel size defaults to the tensor-parallel size
    etp = (a.expert_tensor_parallel_size or t) if a.num_experts else 1
    plan = {"dp": dp, "tp": t, "pp": p, "cp": c, "ep": a.expert_model_parallel_size, "etp": etp,
            "micro_batch": a.micro_batch_size, "global_batch": a.global_batch_size, "vpp": vpp, "zero_stage": zero,
            "schedule": "interleaved" if vpp > 1 else "1f1b", "recompute": recompute, "precision": precision,
            "sequence_parallel": a.sequence_parallel, "overlap_dp": a.overlap_grad_reduce,
            "stage_layers": stage_layers, "stage_recompute": [recompute] * p}
    if a.recompute_modules and recompute == "selective":
        code = module_code(" ".join(a.recompute_modules))
        if code is None:
            raise InputError("--recompute-modules", "Megatron-Core recompute modules among "
                             + ", ".join(RECOMPUTE_MODULES), " ".join(a.recompute_modules))
        plan["recompute_modules"] = module_names(code)
    return plan


# ---- torchtitan (TOML job config) ------------------------------------------------------------
# plansweep schedule -> torch.distributed.pipelining schedule name (torchtitan's
# parallelism.pipeline_parallel_schedule); "v" places virtual stage j on rank j for j < pp and on
# rank 2 pp - 1 - j after (ZBV's V shape), "loop" on rank j mod pp.
TORCHTITAN_SCHEDULES = {"gpipe": ("GPipe", "loop"), "1f1b": ("1F1B", "loop"),
                        "interleaved": ("Interleaved1F1B", "loop"), "zb-v": ("ZBVZeroBubble", "v")}
# ZeRO stage -> (data_parallel sharded?, fsdp_reshard_after_forward). FSDP2 shards parameters,
# gradients and optimizer state; "never" keeps the gathered parameters from forward to backward
# (the memory of ZeRO-2, as FSDP1's SHARD_GRAD_OP), "always" frees them after forward (ZeRO-3).
# ZeRO 0 is plain replication (DDP). torchtitan has no optimizer-only sharding (ZeRO-1).
TORCHTITAN_ZERO = {0: (False, "default"), 2: (True, "never"), 3: (True, "always")}
TORCHTITAN_PRECISION = {"bf16": [], "fp8": ["quantize.linear.float8"]}  # model.converters


def _stage_of(j: int, pp: int, style: str) -> int:
    """The rank (pipeline stage) holding virtual stage j."""
    if style == "v":
        return j if j < pp else 2 * pp - 1 - j
    return j % pp


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    return "[" + ", ".join(_toml_value(x) for x in v) + "]"


def to_torchtitan(plan: dict, model: Transformer, cluster: Cluster, *, profile: str = "fsdp2") -> str:
    """A torchtitan TOML job config (the sections the plan sets); one profile, fsdp2."""
    _model_kind(model, plan, "torchtitan")
    shape = (model.activation, model.norm, model.bias, model.learned_positions)
    if shape != ("swiglu", "rmsnorm", False, False):
        raise InputError("--model", "a Llama-shaped transformer for torchtitan's llama3 model (swiglu, rmsnorm, no "
                         "bias, rotary positions)", f"{model.name} ({model.activation}, {model.norm}, "
                         f"bias={model.bias}, learned positions={model.learned_positions})")
    recompute = _one_recompute(plan, "torchtitan")
    tt_model = _torchtitan_model(model)
    if plan["schedule"] not in TORCHTITAN_SCHEDULES:
        raise InputError("schedule", "gpipe, 1f1b, interleaved or zb-v (torchtitan's pipeline schedules)",
                         plan["schedule"])
    if plan["zero_stage"] not in TORCHTITAN_ZERO:
        raise InputError("zero_stage", "0 (DDP), 2 or 3 (FSDP2; torchtitan has no optimizer-only sharding)",
                         plan["zero_stage"])
    if plan["precision"] not in TORCHTITAN_PRECISION:
        raise InputError("precision", "bf16 or fp8 (torchtitan's mixed precision)", plan["precision"])
    if plan["tp"] > 1 and not plan["sequence_parallel"]:  # (at tp 1 there is no sequence to shard: nothing written)
        raise InputError("sequence_parallel", f"true with tp={plan['tp']} (torchtitan's tensor parallelism "
                         "always shards the sequence between blocks)", plan["sequence_parallel"])
    if not plan["overlap_dp"]:
        raise InputError("overlap_dp", "true (torchtitan's FSDP2 and DDP always overlap the gradient exchange)",
                         plan["overlap_dp"])
    nodes, per_node = _launcher(plan, cluster)
    p, v, sl = plan["pp"], plan["vpp"], plan["stage_layers"]
    sharded, reshard = TORCHTITAN_ZERO[plan["zero_stage"]]
    ep, etp = plan["ep"], plan["etp"]
    if etp != 1:
        raise InputError("etp", "1 (torchtitan v0.2.2 takes etp 1 or etp = tp, and plansweep prices the fsdp2 "
                         "profile with etp 1)", etp)
    # torchtitan's expert mesh is (pp, dp_replicate, efsdp, ep, etp): the experts fold into the
    # FSDP, CP and TP ranks of a replica (parallel_dims.py: efsdp = dp_shard cp tp / (etp ep)).
    fold = (plan["dp"] if sharded else 1) * plan["cp"] * plan["tp"]
    if fold % (ep * etp):
        raise InputError("ep", f"a divisor of data_parallel_shard_degree x cp x tp = {fold} (torchtitan folds the "
                         "experts into FSDP, CP and TP ranks, not DDP replicas; ZeRO 2 or 3 shards dp)", ep)
    dp, B, b = plan["dp"], plan["global_batch"], plan["micro_batch"]
    par = {"data_parallel_replicate_degree": 1 if sharded else dp, "data_parallel_shard_degree": dp if sharded else 1,
           "fsdp_reshard_after_forward": reshard, "tensor_parallel_degree": plan["tp"],
           "context_parallel_degree": plan["cp"], "pipeline_parallel_degree": p,
           "pipeline_parallel_schedule": TORCHTITAN_SCHEDULES[plan["schedule"]][0],
           "pipeline_parallel_microbatch_size": b}
    if model.is_moe:
        par |= {"expert_parallel_degree": ep, "expert_tensor_parallel_degree": etp,
                "expert_parallel_comm_backend": "standard"}
    if p > 1:
        style = TORCHTITAN_SCHEDULES[plan["schedule"]][1]
        ends = plan["schedule"] == "interleaved"  # (its loop puts model part 0 on stage 0, the last on stage p - 1)
        if any(n < v - (ends and r in (0, p - 1)) for r, n in enumerate(sl)):
            raise InputError("stage_layers", f"at least vpp={v} layers on every stage"
                             + (" (the first and last stage one fewer)" if ends else ""), sl)
        # A stage's v chunks differ by at most a layer, the larger first (the fsdp2 profile's
        # uneven_chunks; chunk_layers): the first model part may hold tok_embeddings alone, the last norm and output.
        per_stage, seen = chunk_layers(sl, v), [0] * p
        chunk = []
        for j in range(p * v):
            r = _stage_of(j, p, style)
            chunk.append(per_stage[r][seen[r]])
            seen[r] += 1
        parts, start = [], 0
        for j, n in enumerate(chunk):
            part = (["tok_embeddings"] if j == 0 else []) + [f"layers.{k}" for k in range(start, start + n)]
            parts.append(part + (["norm", "output"] if j == p * v - 1 else []))
            start += n
        par["module_fqns_per_model_part"] = parts
    # Pipelined: one step runs all B/dp sequences of a replica as micro-batches of b; otherwise
    # torchtitan accumulates gradients over global / (local x dp) steps of local = b sequences.
    local = B // dp if p > 1 else b
    sections = {
        "job": {"description": f"plansweep export: {model.name} on {cluster.name}"},
        "model": {"name": tt_model, "flavor": model.name, "converters": TORCHTITAN_PRECISION[plan["precision"]]},
        "training": {"local_batch_size": local, "global_batch_size": B, "seq_len": model.seq_len,
                     "mixed_precision_param": "bfloat16"},
        "parallelism": par,
        "activation_checkpoint": {"mode": recompute, **({"selective_ac_option": "op"} if recompute == "selective"
                                                        else {})},
    }
    out = [f"# plansweep export for {TORCHTITAN_VERSION}",
           f"# launch: NGPU={per_node} on each of {nodes} node(s) (torchrun --nnodes {nodes} --nproc-per-node "
           f"{per_node} -m torchtitan.train --job.config_file THIS.toml)",
           f"# model.flavor names plansweep's model: register a {tt_model} flavor of that name with "
           + _torchtitan_flavor(model)]
    if tt_model == "deepseek_v3" and not model.mla:
        out.append("# deepseek_v3's attention is MLA; plansweep priced multi-head attention of the same heads")
    for name, body in sections.items():
        out.append(f"\n[{name}]")
        out += [f"{k} = {_toml_value(val)}" for k, val in body.items()]
    return "\n".join(out) + "\n"


# plansweep model -> torchtitan v0.2.2's model (torchtitan/models/*/model/args.py): llama3 for
# dense models with hidden / heads heads (its ffn width from multiple_of and ffn_dim_multiplier);
# qwen3 (head_dim; moe_enabled puts MoE in every layer) for a set head size or an MoE model
# without dense layers; deepseek_v3 (n_dense_layers dense layers, then MoE) for one with, and for
# multi-head latent attention (its MLA fields). Both MoE models take MoEArgs
# (torchtitan/models/moe/moe.py): num_experts, num_shared_experts, top_k; their experts are
# dropless (no capacity factor).
def _torchtitan_model(model: Transformer) -> str:
    tt = _torchtitan_model_of(model)
    if model.tied_embeddings and tt != "qwen3":  # (v0.2.2: only qwen3's args have enable_weight_tying)
        raise InputError("model.tied_embeddings", f"false for torchtitan's {tt} model (only its qwen3 model ties the "
                         "output to the embedding: enable_weight_tying)", True)
    return tt


def _torchtitan_model_of(model: Transformer) -> str:
    if model.capacity_factor != 1.0:
        raise InputError("model.capacity_factor", "1.0 (torchtitan's MoE is dropless: no capacity factor)",
                         model.capacity_factor)
    if model.is_moe and model.moe_layer_freq != 1:
        if model.dense_layers or model.head_dim is not None or model.mla:
            raise InputError("model.moe_layer_freq", "1, or MoE every moe_layer_freq-th layer of a model without "
                             "leading dense layers, set head size or MLA (torchtitan v0.2.2's llama4 "
                             "interleave_moe_layer_step)", model.moe_layer_freq)
        llama4_ffn(model)  # (refused where no llama4 flavor builds its widths)
        return "llama4"
    if model.is_moe and model.shared_experts and model.shared_expert_ffn != model.expert_ffn:
        raise InputError("model.shared_expert_ffn_hidden", f"the routed experts' {model.expert_ffn} (torchtitan's "
                         "shared experts are num_shared_experts x moe_inter_dim wide)", model.shared_expert_ffn)
    if model.mla:
        return "deepseek_v3"
    if model.is_moe and model.dense_layers:
        if model.head_dim is not None or model.kv_heads != model.heads:
            raise InputError("model.head_dim", "null with kv_heads = heads for a model with dense layers "
                             "(torchtitan's deepseek_v3 sets its heads through MLA: no head_dim, no n_kv_heads)",
                             f"head_dim={model.head_dim}, kv_heads={model.kv_heads}")
        return "deepseek_v3"
    return "qwen3" if model.is_moe or model.head_dim is not None else "llama3"


def llama3_ffn_width(dim: int, multiple_of: int, ffn_dim_multiplier: float) -> int:
    """The SwiGLU width torchtitan's llama3 FeedForward builds (hidden_dim = 4 dim passed in):
    two thirds of 4 dim, times the multiplier, rounded up to a multiple of multiple_of."""
    hidden = int(ffn_dim_multiplier * int(2 * (4 * dim) / 3))
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def llama3_ffn(dim: int, ffn: int) -> dict:
    """torchtitan llama3's multiple_of and ffn_dim_multiplier that build an ffn width of ``ffn``
    (its args have no width field): multiple_of the largest power of two up to 1024 dividing the
    width, the multiplier the shortest decimal that lands on it (Llama 3 8B: 1024 and 1.3)."""
    multiple_of = math.gcd(ffn, 1024)
    base = int(2 * (4 * dim) / 3)
    for digits in range(1, 10):
        m = round(ffn / base, digits)
        if llama3_ffn_width(dim, multiple_of, m) == ffn:
            return {"multiple_of": multiple_of, "ffn_dim_multiplier": m}
    m = (ffn + 0.5) / base  # int(m * base) = ffn: a multiple of multiple_of, so rounding keeps it
    assert llama3_ffn_width(dim, multiple_of, m) == ffn
    return {"multiple_of": multiple_of, "ffn_dim_multiplier": m}


def llama4_ffn(model: Transformer) -> dict:
    """torchtitan llama4's multiple_of, ffn_dim_multiplier and auto_scale_hidden_dim that build the model's dense and
    expert widths (its args have no width field; torchtitan v0.2.2 models/llama4/model/model.py TransformerBlock):
    the dense FeedForward llama3's (llama3_ffn_width), an expert int(ffn_dim_multiplier int(8 dim / 3)) divided by
    top_k + num_shared_experts under auto_scale_hidden_dim (not divided without it), rounded up to multiple_of
    (Llama 4 Maverick: 1024 and 1.2 give 16,384 and 8,192). InputError where none does."""
    widths = llama3_ffn(model.hidden, model.ffn_hidden)
    base = int(widths["ffn_dim_multiplier"] * int(2 * (4 * model.hidden) / 3))
    for auto in (True, False):
        hidden = int(base / (model.experts_per_token + model.shared_experts)) if auto else base
        hidden += -hidden % widths["multiple_of"]
        if hidden == model.expert_ffn and (not model.shared_experts or model.shared_expert_ffn == hidden):
            return widths | {"auto_scale_hidden_dim": auto}
    raise InputError("model.expert_ffn_hidden", f"the dense width {model.ffn_hidden} over top-k + shared experts = "
                     f"{model.experts_per_token + model.shared_experts}, or the dense width itself (torchtitan "
                     "llama4's expert widths)", model.expert_ffn)


def _torchtitan_flavor(model: Transformer) -> str:
    """The flavor's fields in the torchtitan model's own names (a comment line of the TOML)."""
    m = _torchtitan_model(model)
    f = {"llama3": dict(dim=model.hidden, n_layers=model.layers, n_heads=model.heads, n_kv_heads=model.kv_heads,
                        vocab_size=model.vocab, **llama3_ffn(model.hidden, model.ffn_hidden)),
         "qwen3": dict(dim=model.hidden, n_layers=model.layers, n_heads=model.heads, n_kv_heads=model.kv_heads,
                       head_dim=model.head_size, hidden_dim=model.ffn_hidden, vocab_size=model.vocab,
                       moe_enabled=model.is_moe, **({"enable_weight_tying": True} if model.tied_embeddings else {})),
         "deepseek_v3": dict(dim=model.hidden, n_layers=model.layers, n_heads=model.heads, inter_dim=model.ffn_hidden,
                             n_dense_layers=model.dense_layers if model.is_moe else model.layers,
                             vocab_size=model.vocab),
         "llama4": dict(dim=model.hidden, n_layers=model.layers, n_heads=model.heads, n_kv_heads=model.kv_heads,
                        vocab_size=model.vocab, interleave_moe_layer_step=model.moe_layer_freq)}[m]
    if m == "llama4":  # (its widths through multiple_of, the multiplier and the auto-scaling; no moe_inter_dim)
        f |= llama4_ffn(model)
    if model.mla:  # DeepSeekV3ModelArgs' MLA fields (q_lora_rank 0: full-rank Q)
        f |= {"q_lora_rank": model.q_lora_rank or 0, "kv_lora_rank": model.kv_lora_rank,
              "qk_nope_head_dim": model.head_size, "qk_rope_head_dim": model.qk_rope_head_dim,
              "v_head_dim": model.v_head_dim or model.head_size}
    if model.is_moe:
        f |= ({} if m == "llama4" else {"moe_inter_dim": model.expert_ffn}) | {
            "moe_args.num_experts": model.experts, "moe_args.num_shared_experts": model.shared_experts,
            "moe_args.top_k": model.experts_per_token}
    return ", ".join(f"{k}={_toml_value(v)}" for k, v in f.items())


def torchtitan_model(text: str) -> dict:
    """The torchtitan model and the flavor fields of a TOML written by to_torchtitan (its comment line)."""
    import tomllib

    line = next(x for x in text.splitlines() if x.startswith("# model.flavor names"))
    name = re.search(r"register a (\w+) flavor", line).group(1)
    fields = line.split(" flavor of that name with ", 1)[1]
    body = "\n".join(f"{k.replace('.', '_')} = {v}" for k, v in (kv.split("=", 1) for kv in fields.split(", ")))
    return {"model": name, **tomllib.loads(body)}


def from_torchtitan(text: str) -> dict:
    """The plan of a TOML job config written by to_torchtitan (read with tomllib)."""
    import tomllib

    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError("torchtitan config", "a TOML job config", str(exc)) from None
    par, tr, ac = doc["parallelism"], doc["training"], doc["activation_checkpoint"]
    p = par["pipeline_parallel_degree"]
    dp = par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"]
    zero = {"default": 0, "never": 2, "always": 3}[par["fsdp_reshard_after_forward"]]
    schedule, style = next((k, s) for k, (name, s) in TORCHTITAN_SCHEDULES.items()
                           if name == par["pipeline_parallel_schedule"])
    if p > 1:
        parts = par["module_fqns_per_model_part"]
        v = len(parts) // p
        layers = [0] * p
        for j, part in enumerate(parts):
            layers[_stage_of(j, p, style)] += sum(1 for m in part if re.fullmatch(r"layers\.\d+", m))
        b = par["pipeline_parallel_microbatch_size"]
    else:
        v, b = 1, tr["local_batch_size"]
        layers = None
    recompute = ac["mode"]
    precision = "fp8" if "quantize.linear.float8" in doc["model"].get("converters", []) else "bf16"
    return {"dp": dp, "tp": par["tensor_parallel_degree"], "pp": p, "cp": par["context_parallel_degree"],
            "ep": par.get("expert_parallel_degree", 1), "etp": par.get("expert_tensor_parallel_degree", 1),
            "micro_batch": b, "global_batch": tr["global_batch_size"], "vpp": v, "zero_stage": zero,
            "schedule": schedule, "recompute": recompute, "precision": precision,
            "sequence_parallel": par["tensor_parallel_degree"] > 1, "overlap_dp": True,
            "stage_layers": layers, "stage_recompute": [recompute] * p}


# ---- DeepSpeed (ds_config JSON + the launcher's parallel sizes) --------------------------------
DEEPSPEED_PRECISION = {"bf16": "bf16", "fp16": "fp16"}  # ds_config section enabling it
# The MoE layer's sizes the training script passes to deepspeed.moe.layer.MoE (num_experts,
# ep_size, k, capacity_factor, drop_tokens: its keyword parameters, deepspeed/moe/layer.py at
# v0.16.4, e2dc3eeb19, the newest tag in plansweep's mirror of DeepSpeed) and the two the script
# uses itself: the expert module's ffn width and which layers hold an MoE layer.
DEEPSPEED_MOE_VERSION = "DeepSpeed v0.16.4 (e2dc3eeb19), deepspeed/moe/layer.py and deepspeed/utils/groups.py"


def _deepspeed_moe_checks(plan: dict, model: Transformer) -> None:
    """Refuses what DeepSpeed's MoE layer cannot run (both DeepSpeed formats): etp > 1, ep not dividing dp, ZeRO-3,
    shared experts."""
    if plan["etp"] != 1:
        raise InputError("etp", "1 (DeepSpeed's enable_expert_tensor_parallelism can only reuse the whole tensor-"
                         "parallel group, and plansweep prices the deepspeed profiles with etp 1)", plan["etp"])
    if plan["dp"] % plan["ep"]:
        raise InputError("ep", f"a divisor of dp={plan['dp']} (DeepSpeed carves expert-parallel groups out of the "
                         "data-parallel ranks: deepspeed/utils/groups.py)", plan["ep"])
    if plan["zero_stage"] == 3:
        raise InputError("zero_stage", "0, 1 or 2 with an MoE model (DeepSpeed's engine asserts 'MoE not supported "
                         "with Stage 3')", plan["zero_stage"])
    if model.shared_experts:
        raise InputError("model.shared_experts", "0 (DeepSpeed's MoE layer has no shared experts; use_residual is "
                         "Residual MoE's one dense MLP mixed by a learned coefficient)", model.shared_experts)


def _deepspeed_moe(plan: dict, model: Transformer) -> dict:
    """launcher.moe: the MoE layer's arguments (refusing what DeepSpeed's MoE cannot express)."""
    _deepspeed_moe_checks(plan, model)
    ep = plan["ep"]
    # capacity_factor 1 is plansweep's dropless expert (the busiest rank runs the routed copies);
    # DeepSpeed then takes drop_tokens false (capacity = the most tokens any expert receives).
    cf = model.capacity_factor
    return {"num_experts": model.experts, "ep_size": ep, "k": model.experts_per_token, "capacity_factor": cf,
            "drop_tokens": cf != 1.0, "expert_ffn_hidden": model.expert_ffn,
            "moe_layers": [j for j, m in enumerate(moe_layer_pattern(model)) if m]}


def deepspeed_topology(plan: dict) -> dict:
    """launcher.topology, the process grid the training script builds (PipeModelDataParallelTopology's
    num_pp, num_mp, num_dp; deepspeed/runtime/pipe/topology.py), and launcher.mpu, where the script
    must hand it to DeepSpeed. DeepSpeedConfig checks train_batch_size against the mpu's data-
    parallel size, or against the whole world without one: a plan with tp > 1 runs only when the
    script passes an mpu. A PipelineModule is its own mpu (deepspeed.initialize takes model.mpu()),
    from the topology it is built with; without pipeline stages deepspeed.initialize(mpu=...) takes one."""
    topo = {"num_pp": plan["pp"], "num_mp": plan["tp"], "num_dp": plan["dp"]}
    grid = f"PipeModelDataParallelTopology(num_pp={plan['pp']}, num_mp={plan['tp']}, num_dp={plan['dp']})"
    if plan["pp"] > 1:
        mpu = (f"required: PipelineModule(..., topology={grid}); deepspeed.initialize takes the module's grid as "
               "its mpu" if plan["tp"] > 1 else f"PipelineModule(num_stages={plan['pp']}) builds it; "
               "deepspeed.initialize takes the module's grid as its mpu")
    elif plan["tp"] > 1:
        mpu = (f"required: deepspeed.initialize(..., mpu=MPU), an mpu over {grid} whose "
               f"get_data_parallel_world_size() is {plan['dp']} (and get_model_parallel_world_size() {plan['tp']}), "
               "e.g. deepspeed.runtime.pipe.topology.PipelineParallelGrid(topology=...)")
    else:
        mpu = "none: every rank is a data-parallel rank"
    return {"topology": topo, "mpu": mpu}


def to_deepspeed(plan: dict, model: Transformer, cluster: Cluster, *, profile: str = "deepspeed") -> str:
    """One JSON object: ``ds_config`` (the file deepspeed.initialize reads) and ``launcher`` (the
    deepspeed launcher's node and GPU counts and the sizes the training script passes on:
    PipelineModule(num_stages=pipeline_parallel_size, partition_method, activation_checkpoint_interval))."""
    _model_kind(model, plan, "DeepSpeed")
    recompute = _one_recompute(plan, "DeepSpeed")
    if plan["cp"] > 1:
        raise InputError("cp", "1 (a script of your own gets no sequence-parallel group here; export --framework "
                         "megatron-deepspeed launches DeepSpeed-Ulysses)", plan["cp"])
    if plan["sequence_parallel"]:
        raise InputError("sequence_parallel", "false (DeepSpeed's tensor parallelism (AutoTP) does not shard the "
                         "sequence; export --framework megatron-deepspeed launches Megatron's)",
                         plan["sequence_parallel"])
    if plan["schedule"] != "1f1b" or plan["vpp"] != 1:
        raise InputError("schedule", "1f1b with vpp 1 (DeepSpeed's pipeline engine runs one 1F1B schedule)",
                         f"{plan['schedule']} with vpp={plan['vpp']}")
    if len(set(plan["stage_layers"])) > 1:
        raise InputError("stage_layers", "equal layers per stage (PipelineModule's partition_method='uniform')",
                         plan["stage_layers"])
    if recompute == "selective":
        raise InputError("recompute", "none or full (DeepSpeed checkpoints whole layers; export --framework "
                         "megatron-deepspeed launches Megatron's selective recompute)", recompute)
    if plan["precision"] not in DEEPSPEED_PRECISION:
        raise InputError("precision", "bf16 or fp16 (ds_config's precision sections)", plan["precision"])
    nodes, per_node = _launcher(plan, cluster)
    ds: dict[str, object] = {
        "train_batch_size": plan["global_batch"], "train_micro_batch_size_per_gpu": plan["micro_batch"],
        "gradient_accumulation_steps": _microbatches(plan), DEEPSPEED_PRECISION[plan["precision"]]: {"enabled": True},
        "zero_optimization": {"stage": plan["zero_stage"], "overlap_comm": plan["overlap_dp"]}}
    if plan["tp"] > 1:
        ds["tensor_parallel"] = {"autotp_size": plan["tp"]}
    if recompute == "full":
        ds["activation_checkpointing"] = {"partition_activations": False, "contiguous_memory_optimization": False,
                                          "cpu_checkpointing": False}
    launcher = {"num_nodes": nodes, "num_gpus": per_node, "data_parallel_size": plan["dp"],
                "tensor_parallel_size": plan["tp"], "pipeline_parallel_size": plan["pp"],
                "partition_method": "uniform", "activation_checkpoint_interval": 1 if recompute == "full" else 0}
    launcher |= deepspeed_topology(plan)
    if model.is_moe:
        launcher["moe"] = _deepspeed_moe(plan, model)
    doc = {"plansweep": f"{model.name} on {cluster.name}, for {DEEPSPEED_VERSION}"
           + (f"; launcher.moe for {DEEPSPEED_MOE_VERSION}" if model.is_moe else ""), "ds_config": ds,
           "launcher": launcher}
    return json.dumps(doc, indent=2) + "\n"


def from_deepspeed(text: str) -> dict:
    """The plan of a document written by to_deepspeed (read with json)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError("deepspeed config", "a JSON document", str(exc)) from None
    ds, la = doc["ds_config"], doc["launcher"]
    p = la["pipeline_parallel_size"]
    precision = next(k for k, sec in DEEPSPEED_PRECISION.items() if ds.get(sec, {}).get("enabled"))
    recompute = "full" if la["activation_checkpoint_interval"] else "none"
    dp = la["num_nodes"] * la["num_gpus"] // (la["tensor_parallel_size"] * p)
    if dp != la["data_parallel_size"]:
        raise InputError("launcher.data_parallel_size", "num_nodes x num_gpus / (tensor x pipeline sizes)",
                         la["data_parallel_size"])
    b = ds["train_micro_batch_size_per_gpu"]
    if ds["train_batch_size"] != b * ds["gradient_accumulation_steps"] * dp:
        raise InputError("train_batch_size", "micro batch x gradient accumulation x data parallel",
                         ds["train_batch_size"])
    return {"dp": dp, "tp": ds.get("tensor_parallel", {}).get("autotp_size", 1), "pp": p, "cp": 1,
            "ep": la.get("moe", {}).get("ep_size", 1), "etp": 1, "micro_batch": b,
            "global_batch": ds["train_batch_size"], "vpp": 1,
            "zero_stage": ds["zero_optimization"]["stage"], "schedule": "1f1b", "recompute": recompute,
            "precision": precision, "sequence_parallel": False, "overlap_dp": ds["zero_optimization"]["overlap_comm"],
            "stage_layers": None, "stage_recompute": [recompute] * p}


# ---- Megatron-DeepSpeed (a shell script: the ds_config file and the deepspeed launch) -----------
# The profiles deepspeed and deepspeed-flash2 price Megatron-DeepSpeed: Megatron's tensor parallelism with its
# sequence parallelism and selective recompute, DeepSpeed's ZeRO and pipeline engine, DeepSpeed-Ulysses for cp > 1.
# Its arguments plansweep writes and reads: flag -> argparse keyword arguments, names and choices from
# deepspeedai/Megatron-DeepSpeed megatron/arguments.py at 4efb479 (2025-05), --deepspeed and --deepspeed_config from
# DeepSpeed's add_config_arguments.
MEGATRON_DEEPSPEED_VERSION = "Megatron-DeepSpeed 4efb479 (megatron/arguments.py) with DeepSpeed v0.19.5"
MEGATRON_DEEPSPEED_ARGS: dict[str, dict] = {
    "--tensor-model-parallel-size": {"type": int, "default": 1},
    "--pipeline-model-parallel-size": {"type": int, "default": 1},
    "--no-pipeline-parallel": {"action": "store_true"},
    "--ds-sequence-parallel-size": {"type": int, "default": 1},
    "--sequence-parallel": {"action": "store_true"},
    "--num-layers": {"type": int},
    "--hidden-size": {"type": int},
    "--ffn-hidden-size": {"type": int},
    "--num-attention-heads": {"type": int},
    "--num-key-value-heads": {"type": int},
    "--kv-channels": {"type": int},
    "--seq-length": {"type": int},
    "--max-position-embeddings": {"type": int},
    "--use-rotary-position-embeddings": {"action": "store_true"},
    "--no-position-embedding": {"action": "store_false", "dest": "add_position_embedding"},
    "--normalization": {"choices": ["layernorm", "rmsnorm"], "default": "layernorm"},
    "--swiglu": {"action": "store_true"},
    "--disable-bias-linear": {"action": "store_false", "dest": "add_bias_linear"},
    "--untie-embeddings-and-output-weights": {"action": "store_true"},
    "--use-flash-attn-v2": {"action": "store_true"},
    "--recompute-granularity": {"choices": ["full", "selective"]},
    "--recompute-method": {"choices": ["uniform", "block"]},
    "--recompute-num-layers": {"type": int, "default": 1},
    "--micro-batch-size": {"type": int},
    "--global-batch-size": {"type": int},
    "--bf16": {"action": "store_true"},
    "--fp16": {"action": "store_true"},
    "--zero-stage": {"type": int},
    "--num-experts": {"type": int, "nargs": "+", "default": [1]},
    "--moe-expert-parallel-size": {"type": int, "default": 1},
    "--topk": {"type": int, "default": 1},
    "--expert-interval": {"type": int, "default": 2},
    "--disable-moe-token-dropping": {"action": "store_false", "dest": "moe_token_dropping"},
    "--moe-train-capacity-factor": {"type": float, "default": 1.0},
    "--deepspeed": {"action": "store_true"},
    "--deepspeed_config": {"type": str},
}
MEGATRON_DEEPSPEED_PROFILES = ("deepspeed", "deepspeed-flash2")
MEGATRON_DEEPSPEED_CONFIG = "ds_config.json"


def gptmodelpipe_cut(L: int, p: int) -> list[int]:
    """Layers per stage of Megatron-DeepSpeed's GPTModelPipe over p stages: the deepspeed profile's type partition
    ('type:transformer', costmodel._feasibility.type_partition)."""
    return type_partition(framework_preset("deepspeed"), L, p, np.arange(p)).tolist()


def to_megatron_deepspeed(plan: dict, model: Transformer, cluster: Cluster, *, profile: str = "deepspeed") -> str:
    """A bash script that writes ds_config.json and launches Megatron-DeepSpeed's pretrain_gpt.py with the plan's
    arguments under the deepspeed launcher. ``profile`` (MEGATRON_DEEPSPEED_PROFILES) picks the attention kernel:
    deepspeed-flash2 writes --use-flash-attn-v2."""
    if profile not in MEGATRON_DEEPSPEED_PROFILES:
        raise InputError("--framework", "a DeepSpeed profile: " + ", ".join(MEGATRON_DEEPSPEED_PROFILES), profile)
    _model_kind(model, plan, "Megatron-DeepSpeed")
    recompute = _one_recompute(plan, "Megatron-DeepSpeed")
    t, p, c = plan["tp"], plan["pp"], plan["cp"]
    moe = _megatron_deepspeed_moe(plan, model) if model.is_moe else []
    if model.mla or model.activation not in ("swiglu", "gelu"):
        what = "MLA" if model.mla else f"{model.activation} MLP"
        raise InputError("--model", f"a GPT or Llama-style model (Megatron-DeepSpeed's has no {what})", model.name)
    if c > 1 and (t > 1 or p > 1):  # (the deepspeed profiles refuse these first: costmodel._feasibility)
        raise InputError("cp", f"1 with tp={t}, pp={p} (DeepSpeed-Ulysses runs only at tp 1 and pp 1)", c)
    if plan["schedule"] != "1f1b" or plan["vpp"] != 1:
        raise InputError("schedule", "1f1b with vpp 1 (DeepSpeed's pipeline engine runs one 1F1B schedule)",
                         f"{plan['schedule']} with vpp={plan['vpp']}")
    cut = gptmodelpipe_cut(model.layers, p)
    if plan["stage_layers"] != cut:
        raise InputError("stage_layers", f"{','.join(map(str, cut))} (Megatron-DeepSpeed's GPTModelPipe cuts the "
                         "layers with partition_method 'type:transformer'; BLOOM's fork, with the embeddings as "
                         "layers, is another code)", ",".join(map(str, plan["stage_layers"])))
    if plan["precision"] not in DEEPSPEED_PRECISION:
        raise InputError("precision", "bf16 or fp16", plan["precision"])
    if p > 1 and plan["zero_stage"] > 1:  # (the profiles refuse it: zero_incompatible_pp)
        raise InputError("zero_stage", "0 or 1 with pp > 1 (DeepSpeed's pipeline engine)", plan["zero_stage"])
    nodes, per_node = _launcher(plan, cluster)
    every = model.is_moe and model.moe_layers == model.layers  # (the dense width unused: the experts' written)
    a: list = ["--num-layers", model.layers, "--hidden-size", model.hidden, "--ffn-hidden-size",
               model.expert_ffn if every else model.ffn_hidden, "--num-attention-heads", model.heads]
    if model.kv_heads != model.heads:
        a += ["--num-key-value-heads", model.kv_heads]
    if model.head_dim is not None:
        a += ["--kv-channels", model.head_dim]
    a += ["--seq-length", model.seq_len, "--max-position-embeddings", model.seq_len]
    if not model.learned_positions:
        a += ["--use-rotary-position-embeddings", "--no-position-embedding"]
    if model.norm == "rmsnorm":
        a += ["--normalization", "rmsnorm"]
    if model.activation == "swiglu":
        a += ["--swiglu"]
    if not model.bias:
        a += ["--disable-bias-linear"]
    if not model.tied_embeddings:
        a += ["--untie-embeddings-and-output-weights"]
    if profile == "deepspeed-flash2":
        a += ["--use-flash-attn-v2"]
    a += moe
    a += ["--tensor-model-parallel-size", t, "--pipeline-model-parallel-size", p]
    if p == 1:  # GPTModel, not DeepSpeed's PipelineModule (whose engine refuses ZeRO 2 and 3)
        a += ["--no-pipeline-parallel"]
    if c > 1:
        a += ["--ds-sequence-parallel-size", c]
    if plan["sequence_parallel"]:
        a += ["--sequence-parallel"]
    if recompute == "selective":
        a += ["--recompute-granularity", "selective"]
    elif recompute == "full":  # GPTModelPipe: activation_checkpoint_interval = --recompute-num-layers
        a += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", 1]
    a += ["--micro-batch-size", plan["micro_batch"], "--global-batch-size", plan["global_batch"],
          f"--{plan['precision']}", "--zero-stage", plan["zero_stage"], "--deepspeed", "--deepspeed_config",
          MEGATRON_DEEPSPEED_CONFIG]
    ds = {"train_batch_size": plan["global_batch"], "train_micro_batch_size_per_gpu": plan["micro_batch"],
          "gradient_accumulation_steps": _microbatches(plan), plan["precision"]: {"enabled": True},
          "zero_optimization": {"stage": plan["zero_stage"], "overlap_comm": plan["overlap_dp"]}}
    if model.is_moe and p > 1 and t > 1:  # GPTModelPipe asserts both off for an MoE model with tp and pp > 1
        ds["pipeline"] = {"pipe_partitioned": False, "grad_partitioned": False}
    env = "CUDA_DEVICE_MAX_CONNECTIONS=1 " if plan["sequence_parallel"] and t > 1 else ""
    args = flag_lines(a)
    dp_of = f"tp {t} x pp {p}" + (f" x Ulysses {c}" if c > 1 else "")
    lines = [f"# plansweep export: {one_line(model.name)} on {one_line(cluster.name)}, "
             f"for {MEGATRON_DEEPSPEED_VERSION}",
             f"# data parallel {plan['dp']} = {nodes * per_node} GPUs / ({dp_of}); add your data, tokenizer "
             f"(plansweep priced a vocabulary of {model.vocab}), optimizer and checkpoint arguments",
             *(["# environment: Megatron-DeepSpeed's validate_args raises without CUDA_DEVICE_MAX_CONNECTIONS=1 "
                "under sequence parallelism"] if env else []),
             f"cat > {MEGATRON_DEEPSPEED_CONFIG} <<'EOF'", json.dumps(ds, indent=2), "EOF",
             f"{env}deepspeed --num_nodes {nodes} --num_gpus {per_node} {MEGATRON_SCRIPT} \\"]
    return "\n".join(lines) + "\n" + " \\\n".join(args) + "\n"


def _megatron_deepspeed_moe(plan: dict, model: Transformer) -> list:
    """Megatron-DeepSpeed's MoE arguments for ``model`` (DeepSpeed's MoE layer around its ParallelMLP), refusing what
    they cannot express: every expert as wide as the dense MLP unless every layer is MoE (ParallelMLP(moe=True) takes
    --ffn-hidden-size), MoE on every N-th layer from the N-th (get_num_experts_per_layer: layer n, 1-based, when n % N
    == 0), no shared experts; and, as DeepSpeed's MoE needs them, etp 1, ep dividing dp, ZeRO 0-2."""
    _deepspeed_moe_checks(plan, model)
    ep = plan["ep"]
    if model.dense_layers:
        raise InputError("model.dense_layers", "0 (Megatron-DeepSpeed's --expert-interval N puts experts on every "
                         "N-th layer from the N-th)", model.dense_layers)
    if model.moe_layers != model.layers and model.expert_ffn != model.ffn_hidden:
        raise InputError("model.expert_ffn_hidden", f"the dense MLP's {model.ffn_hidden} (Megatron-DeepSpeed's experts "
                         "are its ParallelMLP, --ffn-hidden-size wide)", model.expert_ffn)
    cf = model.capacity_factor  # 1: plansweep's dropless expert
    return ["--num-experts", model.experts, "--moe-expert-parallel-size", ep, "--topk", model.experts_per_token,
            "--expert-interval", model.moe_layer_freq,
            *(["--disable-moe-token-dropping"] if cf == 1.0 else ["--moe-train-capacity-factor", cf])]


def megatron_deepspeed_parts(text: str) -> tuple[dict, argparse.Namespace, argparse.Namespace]:
    """(ds_config, the deepspeed launcher's arguments, pretrain_gpt.py's arguments) of a script written by
    to_megatron_deepspeed."""
    head, sep, rest = text.partition(f"cat > {MEGATRON_DEEPSPEED_CONFIG} <<'EOF'\n")
    body, sep2, launch = rest.partition("\nEOF\n")
    if not sep or not sep2:
        raise InputError("megatron-deepspeed script", f"a {MEGATRON_DEEPSPEED_CONFIG} here-document, then the launch",
                         text[:60])
    try:
        ds = json.loads(body)
    except json.JSONDecodeError as exc:
        raise InputError(MEGATRON_DEEPSPEED_CONFIG, "a JSON document", str(exc)) from None
    la, a = _launch_words(launch, "deepspeed", ("--num_nodes", "--num_gpus"), MEGATRON_DEEPSPEED_ARGS,
                          "megatron-deepspeed command")
    return ds, la, a


def from_megatron_deepspeed(text: str) -> dict:
    """The plan of a script written by to_megatron_deepspeed."""
    ds, la, a = megatron_deepspeed_parts(text)
    t, p, c = a.tensor_model_parallel_size, a.pipeline_model_parallel_size, a.ds_sequence_parallel_size
    dp = la.num_nodes * la.num_gpus // (t * p * c)
    if ds["train_batch_size"] != a.global_batch_size or ds["zero_optimization"]["stage"] != a.zero_stage:
        raise InputError(MEGATRON_DEEPSPEED_CONFIG, "the batch and ZeRO stage of the command line",
                         f"train_batch_size {ds['train_batch_size']}, stage {ds['zero_optimization']['stage']}")
    recompute = a.recompute_granularity or "none"
    ep = a.moe_expert_parallel_size if max(a.num_experts) > 1 else 1
    return {"dp": dp, "tp": t, "pp": p, "cp": c, "ep": ep, "etp": 1, "micro_batch": a.micro_batch_size,
            "global_batch": a.global_batch_size, "vpp": 1, "zero_stage": a.zero_stage, "schedule": "1f1b",
            "recompute": recompute, "precision": "fp16" if a.fp16 else "bf16",
            "sequence_parallel": a.sequence_parallel, "overlap_dp": ds["zero_optimization"]["overlap_comm"],
            "stage_layers": gptmodelpipe_cut(a.num_layers, p), "stage_recompute": [recompute] * p}


WRITERS = {"megatron": to_megatron, "torchtitan": to_torchtitan, "deepspeed": to_deepspeed,
           "megatron-deepspeed": to_megatron_deepspeed}
READERS = {"megatron": from_megatron, "torchtitan": from_torchtitan, "deepspeed": from_deepspeed,
           "megatron-deepspeed": from_megatron_deepspeed}


def read_back(framework: str, text: str, model: Transformer) -> dict:
    """The canonical plan of an exported text (uniform stages written out from the model's layers)."""
    plan = READERS[framework](text)
    if plan["stage_layers"] is None:
        plan["stage_layers"] = [model.layers // plan["pp"]] * plan["pp"]
    assert math.prod([plan["dp"], plan["tp"], plan["pp"], plan["cp"]]) >= 1
    return plan
