"""`plansweep export`: plans as Megatron-LM arguments, torchtitan TOML and DeepSpeed configs.

None of the three frameworks installs here without a GPU stack (Megatron-LM and DeepSpeed need
torch; torchtitan's TOML release needs torch nightly), so the option names are held against lists
cut by hand from each framework's source at the version cli/_export.py names (file and version
above each list). The round trip (write, read back with plansweep's own reader of the format,
compare) runs on 20 random feasible plans per framework.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shlex
from pathlib import Path

import numpy as np
import pytest
import tomllib

import costmodel
from cli._export import (
    MEGATRON_ARGS,
    WRITERS,
    _layout_stage_layers,
    _megatron_pattern,
    _moe_pattern,
    canonical_plan,
    from_megatron,
    llama3_ffn,
    megatron_layout,
    megatron_model,
    megatron_parser,
    megatron_window,
    moe_layer_pattern,
    read_back,
    torchtitan_model,
)
from costmodel import InputError, StrategyTable, evaluate, model_preset
from tests.in_process import UNWRITABLE, cli, one_error_line, unwritable_path

ROOT = Path(__file__).resolve().parents[1]

# Megatron-LM core_v0.15.0 (commit 0d7e02bd26), megatron/training/arguments.py: the flags
# plansweep uses, each a literal group.add_argument there, with the choices it declares.
MEGATRON_V0_15_FLAGS = {
    "--tensor-model-parallel-size": None, "--pipeline-model-parallel-size": None, "--context-parallel-size": None,
    "--num-layers-per-virtual-pipeline-stage": None, "--num-virtual-stages-per-pipeline-rank": None,
    "--decoder-first-pipeline-num-layers": None, "--decoder-last-pipeline-num-layers": None,
    "--pipeline-model-parallel-layout": None, "--sequence-parallel": None, "--use-distributed-optimizer": None, "--use-megatron-fsdp": None,
    "--data-parallel-sharding-strategy": ["no_shard", "optim", "optim_grads", "optim_grads_params"],
    "--overlap-grad-reduce": None, "--overlap-param-gather": None,
    "--recompute-granularity": ["full", "selective"], "--recompute-method": ["uniform", "block"],
    "--recompute-num-layers": None, "--recompute-modules": None, "--micro-batch-size": None,
    "--global-batch-size": None,
    "--bf16": None, "--fp16": None, "--fp8-format": ["e4m3", "hybrid"],
    "--num-layers": None, "--hidden-size": None, "--ffn-hidden-size": None, "--num-attention-heads": None,
    "--group-query-attention": None, "--num-query-groups": None, "--seq-length": None,
    "--max-position-embeddings": None, "--swiglu": None, "--normalization": ["LayerNorm", "RMSNorm"],
    "--disable-bias-linear": None, "--untie-embeddings-and-output-weights": None,
    "--position-embedding-type": ["learned_absolute", "rope", "mrope", "relative", "none"],
    # _add_network_size_args, and _add_moe_args (the "moe" group)
    "--kv-channels": None, "--num-experts": None, "--moe-router-topk": None, "--moe-ffn-hidden-size": None,
    "--moe-router-num-groups": None, "--moe-router-group-topk": None,
    "--moe-shared-expert-intermediate-size": None, "--moe-layer-freq": None, "--expert-model-parallel-size": None,
    "--expert-tensor-parallel-size": None, "--moe-grouped-gemm": None,
    "--moe-token-dispatcher-type": ["allgather", "alltoall", "flex"], "--moe-enable-deepep": None,
    "--moe-expert-capacity-factor": None, "--moe-pad-expert-input-to-capacity": None,
    "--overlap-moe-expert-parallel-comm": None,
    # _add_network_size_args (line 1664) and _add_mla_args (lines 3167-3175)
    "--multi-latent-attention": None, "--q-lora-rank": None, "--kv-lora-rank": None, "--qk-head-dim": None,
    "--qk-pos-emb-head-dim": None, "--v-head-dim": None,
    # _add_checkpointing_args (line 2457)
    "--ckpt-format": ["torch", "torch_dist", "zarr", "torch_dcp", "fsdp_dtensor"],
    # _add_network_size_args (lines 1575, 1578) and _add_distributed_args (line 2706)
    "--window-size": None, "--window-attn-skip-freq": None, "--cp-comm-type": None,
    "--no-rope-freq": None,  # (_add_network_size_args, line 1610)
    "--quick-geglu": None,  # (_add_network_size_args, line 1648)
}
# torchtitan v0.2.2 (commit 73a0e6979d), torchtitan/config/job_config.py: JobConfig's sections
# and the fields plansweep writes, with their Literal values where declared.
TORCHTITAN_V0_2_2_FIELDS = {
    "job": {"description": None},
    "model": {"name": None, "flavor": None, "converters": None},
    "training": {"local_batch_size": None, "global_batch_size": None, "seq_len": None,
                 "mixed_precision_param": ["bfloat16", "float32"]},
    "parallelism": {"data_parallel_replicate_degree": None, "data_parallel_shard_degree": None,
                    "fsdp_reshard_after_forward": ["default", "always", "never"], "tensor_parallel_degree": None,
                    "context_parallel_degree": None, "pipeline_parallel_degree": None,
                    "pipeline_parallel_schedule": None, "pipeline_parallel_microbatch_size": None,
                    "module_fqns_per_model_part": None, "expert_parallel_degree": None,
                    "expert_tensor_parallel_degree": None, "expert_parallel_comm_backend": ["standard", "deepep"]},
    "activation_checkpoint": {"mode": ["selective", "full", "memory_budget", "none"], "selective_ac_option": None},
}
# torch.distributed.pipelining's get_schedule_class names that torchtitan v0.2.2 passes through
# (its tests/integration_tests/features.py and models.py run GPipe, 1F1B, Interleaved1F1B,
# ZBVZeroBubble); model converters: torchtitan/components/quantization/float8.py registers
# "quantize.linear.float8".
TORCHTITAN_SCHEDULE_NAMES = {"GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble",
                             "ZBVZeroBubble", "DualPipeV"}
# torchtitan/models/__init__.py's _supported_models at v0.2.2, and the fields of the flavors
# plansweep names in its comment line: llama3/model/args.py TransformerModelArgs (the ffn width
# derived from multiple_of and ffn_dim_multiplier), qwen3/model/args.py Qwen3ModelArgs,
# deepseek_v3/model/args.py DeepSeekV3ModelArgs, llama4/model/args.py TransformerModelArgs, and moe/moe.py
# MoEArgs (num_experts, num_shared_experts, top_k).
TORCHTITAN_MODELS = {"deepseek_v3", "flux", "gpt_oss", "llama3", "llama3_ft", "llama4", "qwen3"}
TORCHTITAN_FLAVOR_FIELDS = {
    "llama3": {"dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "multiple_of", "ffn_dim_multiplier"},
    "qwen3": {"dim", "n_layers", "n_heads", "n_kv_heads", "head_dim", "hidden_dim", "vocab_size", "moe_enabled",
              "moe_inter_dim"},
    "deepseek_v3": {"dim", "n_layers", "n_heads", "inter_dim", "n_dense_layers", "vocab_size", "moe_inter_dim",
                    "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"},
    "llama4": {"dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "multiple_of", "ffn_dim_multiplier",
               "norm_eps", "rope_theta", "max_seq_len", "depth_init", "attn_type", "attn_mask_type",
               "every_n_layers_nope", "fixed_attn_block_size", "auto_scale_hidden_dim", "interleave_moe_layer_step"},
}
TORCHTITAN_MOE_ARGS = {"num_experts", "num_shared_experts", "top_k"}
TORCHTITAN_CONVERTERS = {"quantize.linear.float8", "quantize.grouped_mm.float8", "quantize.linear.mx",
                         "quantize.grouped_mm.mx"}
# DeepSpeed v0.19.5 (commit cf44300453): ds_config keys from deepspeed/runtime/constants.py
# (batch sizes, "bf16"/"fp16" with "enabled"), zero/config.py ("zero_optimization": stage,
# overlap_comm), tensor_parallel/config.py ("tensor_parallel": autotp_size) and
# activation_checkpointing/config.py; the launcher's --num_nodes/--num_gpus
# (deepspeed/launcher/runner.py) and PipelineModule's num_stages, partition_method,
# activation_checkpoint_interval (deepspeed/runtime/pipe/module.py).
DEEPSPEED_V0_19_5_KEYS = {
    "train_batch_size": None, "train_micro_batch_size_per_gpu": None, "gradient_accumulation_steps": None,
    "bf16": {"enabled"}, "fp16": {"enabled"}, "zero_optimization": {"stage", "overlap_comm"},
    "tensor_parallel": {"autotp_size"},
    "activation_checkpointing": {"partition_activations", "contiguous_memory_optimization", "cpu_checkpointing",
                                 "number_checkpoints", "synchronize_checkpoint_boundary", "profile"},
}
DEEPSPEED_LAUNCHER_KEYS = {"num_nodes", "num_gpus", "data_parallel_size", "tensor_parallel_size",
                           "pipeline_parallel_size", "partition_method", "activation_checkpoint_interval",
                           "topology", "mpu"}
# DeepSpeed v0.16.4 (e2dc3eeb19, the newest tag in plansweep's mirror), deepspeed/moe/layer.py:
# MoE.__init__'s keyword parameters plansweep writes; expert_ffn_hidden and moe_layers are the
# training script's own (the expert module it passes, the layers it puts an MoE layer in).
DEEPSPEED_MOE_V0_16_4_PARAMS = {"num_experts", "ep_size", "k", "capacity_factor", "drop_tokens"}
DEEPSPEED_MOE_SCRIPT_KEYS = {"expert_ffn_hidden", "moe_layers"}

MODEL = costmodel.model_preset("llama3-8b")      # 32 layers, 32 heads, 8 KV heads
CLUSTER = costmodel.cluster_preset("h100x64")    # 8 nodes of 8


# ---- random feasible plans -------------------------------------------------------------------
def _stage_layers(rng, fw: str, p: int, v: int, L: int) -> list[int]:
    """Layers per stage, each a multiple of v: uneven in the framework's expressible shape (always
    uneven where p x v does not divide L, as DeepSeek-V3's 61 layers)."""
    even = L % (p * v) == 0
    if p == 1 or fw == "deepspeed" or (even and rng.random() < 0.4):
        return [L // p] * p
    if not even:  # any split (Megatron-Core and fsdp2 split a stage into chunks one layer apart)
        v = 1
    units = L // v  # chunks of v layers to hand out
    if fw == "megatron":  # first and last free, the middle ones equal
        for _ in range(50):
            first, last = rng.integers(1, units // p + 3, size=2)
            rest = units - first - last
            if p == 2 and rest == 0:
                return [int(first) * v, int(last) * v]
            if p > 2 and rest > 0 and rest % (p - 2) == 0:
                return [int(first) * v] + [int(rest) // (p - 2) * v] * (p - 2) + [int(last) * v]
        return [L // p] * p
    if units < p:  # too few chunks: a row the evaluator refuses
        return [L // p] * p
    cuts = np.sort(rng.choice(np.arange(1, units), size=p - 1, replace=False))
    return [int(x) * v for x in np.diff(np.concatenate([[0], cuts, [units]]))]


def _expert_degrees(rng, fw: str, model, tp: int, cp: int, dp: int, zero: int) -> tuple[int, int]:
    """(ep, etp) for the framework: ep a divisor of the experts that folds into the ranks the
    framework folds it into (Megatron: tp cp dp; torchtitan: FSDP x cp x tp; DeepSpeed: dp)."""
    if not model.is_moe:
        return 1, 1
    etp = int(rng.choice([1, 1, 2])) if fw == "megatron" and tp > 1 else 1
    fold = {"megatron": tp * cp * dp, "torchtitan": (dp if zero else 1) * cp * tp, "deepspeed": dp}[fw] // etp
    eps = [e for e in (1, 2, 4, 8, 16, 32, 64) if model.experts % e == 0 and fold % e == 0]
    return int(rng.choice(eps)), etp


def _draw(fw: str, n: int, seed: int, model=None, gpus: int = 64) -> StrategyTable:
    model = model or MODEL
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        tp, pp = (int(x) for x in rng.choice([1, 2, 4, 8], size=2))
        if model.layers % 2:  # an odd layer count: deeper pipelines (uneven stages), as DeepSeek-V3 runs
            pp = int(rng.choice([1, 4, 8, 16]))
        cp = 1 if fw == "deepspeed" else int(rng.choice([1, 2]))
        if fw == "megatron":
            schedule = str(rng.choice(["1f1b", "interleaved"]))
        elif fw == "torchtitan":
            schedule = str(rng.choice(["gpipe", "1f1b", "interleaved", "zb-v"]))
        else:
            schedule = "1f1b"
        vpp = {"interleaved": int(rng.choice([2, 4])), "zb-v": 2}.get(schedule, 1)
        zero_choices = {"torchtitan": [0, 2, 3], "deepspeed": [0, 1, 2] if model.is_moe else [0, 1, 2, 3]}
        zero = int(rng.choice(zero_choices.get(fw, [0, 1, 2, 3])))
        recompute = str(rng.choice(["none", "full"] if fw == "deepspeed" else ["none", "selective", "full"]))
        precision = str(rng.choice({"megatron": ["bf16", "fp8"] if model.is_moe else ["bf16", "fp16", "fp8"],
                                    "torchtitan": ["bf16", "fp8"], "deepspeed": ["bf16", "fp16"]}[fw]))
        sp = {"torchtitan": tp > 1, "deepspeed": False}.get(fw, bool(rng.integers(2)))
        overlap = True if fw == "torchtitan" else bool(rng.integers(2))
        sl = _stage_layers(rng, fw, pp, vpp, model.layers)
        dp = max(1, gpus // (tp * pp * cp))
        ep, etp = _expert_degrees(rng, fw, model, tp, cp, dp, zero)
        rows.append(dict(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, micro_batch=int(rng.choice([1, 2])),
                         global_batch=int(rng.choice([128, 256, 512])) * max(1, gpus // 64), vpp=vpp,
                         zero_stage=zero, schedule=schedule, recompute=recompute, precision=precision,
                         sequence_parallel=sp, overlap_dp=overlap, stage_layers=sl + [0] * (16 - len(sl))))
    cols = {k: [r[k] for r in rows] for k in rows[0] if k != "stage_layers"}
    return StrategyTable.from_columns(stage_layers=np.array([r["stage_layers"] for r in rows]), **cols)


# The spaces of the round trip: (model, cluster) per framework. The MoE ones are priced under the
# framework's own profile, so every plan drawn is one the profile runs (expert parallelism and
# its limits are the profile's); the dense one as before the MoE rows (generic), the same sample.
SPACES = {
    "dense": (MODEL, CLUSTER),
    "mixtral": (costmodel.model_preset("mixtral-8x7b"), costmodel.cluster_preset("h100x64")),
    "deepseek": (costmodel.model_preset("deepseek-v3"), costmodel.cluster_preset("h100x2048")),
    "qwen3": (costmodel.model_preset("qwen3-30b-a3b"), costmodel.cluster_preset("h100x64")),
}
PROFILE = {"megatron": "megatron-core", "torchtitan": "fsdp2", "deepspeed": "deepspeed"}


def _feasible_plans(fw: str, k: int = 20, seed: int = 0, space: str = "dense") -> list[dict]:
    model, cluster = SPACES[space]
    table = _draw(fw, 600, seed, model, cluster.num_gpus)
    profile = PROFILE[fw] if model.is_moe else None
    ok = np.flatnonzero(evaluate(model, cluster, table, framework=profile)["feasible"])[:k]
    assert ok.size == k
    return [canonical_plan(table.row(int(i)), model) for i in ok]


def _megatron_shape(model) -> dict:
    """What megatron_model should read back for ``model`` (the published shape's fields)."""
    out = {"layers": model.layers, "hidden": model.hidden, "ffn_hidden": model.ffn_hidden, "heads": model.heads,
           "kv_heads": model.kv_heads, "head_dim": model.head_dim, "experts": model.experts}
    if model.is_moe:
        out.update(experts_per_token=model.experts_per_token, expert_ffn_hidden=model.expert_ffn,
                   shared_ffn_total=model.shared_experts * model.shared_expert_ffn,
                   moe_pattern=moe_layer_pattern(model), capacity_factor=model.capacity_factor,
                   router_groups=model.router_groups, router_group_topk=model.router_group_topk,
                   dispatcher="alltoall", deepep=False, overlap_ep=False)
    if model.mla:
        out.update(q_lora_rank=model.q_lora_rank, kv_lora_rank=model.kv_lora_rank,
                   qk_rope_head_dim=model.qk_rope_head_dim, v_head_dim=model.v_head_dim)
    return out


ROUND_TRIP = [("megatron", "dense"), ("torchtitan", "dense"), ("deepspeed", "dense"), ("megatron", "mixtral"),
              ("megatron", "deepseek"), ("megatron", "qwen3"), ("torchtitan", "mixtral"), ("torchtitan", "deepseek"),
              ("torchtitan", "qwen3"), ("deepspeed", "qwen3")]


@pytest.mark.parametrize("fw, space", ROUND_TRIP)
def test_round_trip_of_random_feasible_plans(fw, space):
    model, cluster = SPACES[space]
    plans = _feasible_plans(fw, space=space)
    for plan in plans:
        text = WRITERS[fw](plan, model, cluster)
        assert read_back(fw, text, model) == plan, text
        if fw == "megatron":
            assert megatron_model(text) == _megatron_shape(model)
        elif fw == "torchtitan" and model.is_moe:
            flavor = torchtitan_model(text)
            assert flavor.get("head_dim", flavor.get("qk_nope_head_dim", model.head_size)) == model.head_size
            if model.mla:  # DeepSeek-V3's MLA, as its config.json gives it
                assert [flavor[k] for k in ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "v_head_dim")] == [
                    1536, 512, 64, 128]
            assert (flavor["moe_args_num_experts"], flavor["moe_args_top_k"], flavor["moe_inter_dim"]) == (
                model.experts, model.experts_per_token, model.expert_ffn)
            assert flavor.get("n_dense_layers", 0) == model.dense_layers
        elif fw == "deepspeed" and model.is_moe:
            moe = json.loads(text)["launcher"]["moe"]
            assert (moe["num_experts"], moe["k"], moe["expert_ffn_hidden"]) == (
                model.experts, model.experts_per_token, model.expert_ffn)
            assert len(moe["moe_layers"]) == model.moe_layers
    # The sample exercises the dimensions, so the round trip is not checked on defaults only.
    assert {p["pp"] > 1 for p in plans} == {True, False}
    assert len({p["zero_stage"] for p in plans}) >= 2 and len({p["recompute"] for p in plans}) >= 2
    assert len({p["precision"] for p in plans}) >= 2 and len({p["tp"] for p in plans}) >= 2
    if fw != "deepspeed":
        assert any(p["vpp"] > 1 for p in plans) and any(len(set(p["stage_layers"])) > 1 for p in plans)
        assert any(p["cp"] > 1 for p in plans)
    if model.is_moe:
        assert len({p["ep"] for p in plans}) >= 2 and max(p["ep"] for p in plans) >= 4
        if fw == "megatron":
            assert any(p["etp"] > 1 for p in plans)
    else:
        assert {(p["ep"], p["etp"]) for p in plans} == {(1, 1)}


# ---- option names against the frameworks' own -----------------------------------------------
MEGATRON_PROFILES = ("megatron-core", "megatron-core-a2a-overlap", "megatron-core-deepep",
                     "megatron-core-deepep-a2a-overlap")


@pytest.mark.parametrize("space", ["dense", "mixtral", "deepseek"])
def test_megatron_flags_are_megatrons(space):
    for flag, kw in MEGATRON_ARGS.items():
        assert flag in MEGATRON_V0_15_FLAGS, flag
        if "choices" in kw:
            assert kw["choices"] == MEGATRON_V0_15_FLAGS[flag], flag
    model, cluster = SPACES[space]
    written = set()
    for i, plan in enumerate(_feasible_plans("megatron", 10, seed=1, space=space)):
        profile = MEGATRON_PROFILES[i % 4]
        if "a2a" in profile and (plan["recompute"] == "full" or (plan["pp"] > 1 and plan["vpp"] == 1)):
            profile = "megatron-core-deepep"  # what the overlap refuses: test_megatron_moe_refusals
        words = WRITERS["megatron"](plan, model, cluster, profile=profile).split()
        written |= {w for w in words if w.startswith("--") and w not in ("--nnodes", "--nproc-per-node")}
    assert written <= set(MEGATRON_V0_15_FLAGS)
    assert ("--num-experts" in written) == model.is_moe


@pytest.mark.parametrize("space", ["dense", "mixtral", "deepseek"])
def test_torchtitan_keys_are_torchtitans(space):
    model, cluster = SPACES[space]
    for plan in _feasible_plans("torchtitan", 10, seed=1, space=space):
        text = WRITERS["torchtitan"](plan, model, cluster)
        doc = tomllib.loads(text)
        for section, body in doc.items():
            for key, value in body.items():
                assert key in TORCHTITAN_V0_2_2_FIELDS[section], (section, key)
                allowed = TORCHTITAN_V0_2_2_FIELDS[section][key]
                assert allowed is None or value in allowed, (section, key, value)
        assert doc["parallelism"]["pipeline_parallel_schedule"] in TORCHTITAN_SCHEDULE_NAMES
        assert set(doc["model"]["converters"]) <= TORCHTITAN_CONVERTERS
        assert doc["model"]["name"] in TORCHTITAN_MODELS
        flavor = torchtitan_model(text)
        fields = {k for k in flavor if k != "model" and not k.startswith("moe_args_")}
        assert fields <= TORCHTITAN_FLAVOR_FIELDS[flavor["model"]], fields
        assert {k.removeprefix("moe_args_") for k in flavor if k.startswith("moe_args_")} <= TORCHTITAN_MOE_ARGS
        assert ("expert_parallel_degree" in doc["parallelism"]) == model.is_moe


@pytest.mark.parametrize("space", ["dense", "qwen3"])
def test_deepspeed_keys_are_deepspeeds(space):
    model, cluster = SPACES[space]
    for plan in _feasible_plans("deepspeed", 10, seed=1, space=space):
        doc = json.loads(WRITERS["deepspeed"](plan, model, cluster))
        for key, value in doc["ds_config"].items():
            assert key in DEEPSPEED_V0_19_5_KEYS, key
            if isinstance(value, dict):
                assert set(value) <= DEEPSPEED_V0_19_5_KEYS[key], key
        launcher = dict(doc["launcher"])
        moe = launcher.pop("moe", None)
        assert set(launcher) == DEEPSPEED_LAUNCHER_KEYS
        assert (moe is not None) == model.is_moe
        if moe is not None:
            assert set(moe) == DEEPSPEED_MOE_V0_16_4_PARAMS | DEEPSPEED_MOE_SCRIPT_KEYS


# ---- worked examples -------------------------------------------------------------------------
def _cli(*argv, cwd=ROOT):
    """`plansweep export ...` in this process (tests.in_process.cli), from the repository root."""
    with contextlib.chdir(cwd):
        return cli(*argv)


def test_megatron_worked_example():
    # Llama 3 70B (80 layers) on 1024 H100s, tp 8 x pp 4 x vpp 2: dp = 1024 / 32 = 32,
    # 80 / (4 x 2) = 10 layers per virtual stage, 1024 / 8 = 128 nodes of 8.
    out = _cli("export", "--framework", "megatron", "--model", "llama3-70b", "--cluster", "h100x1024", "--tp", "8",
               "--pp", "4", "--vpp", "2", "--schedule", "interleaved", "--recompute", "selective",
               "--sequence-parallel", "--zero-stage", "1", "--micro-batch", "1", "--global-batch", "1024")
    assert out.returncode == 0, out.stderr
    a = megatron_parser().parse_args(out.stdout.split(" pretrain_gpt.py ")[1].replace("\\\n", " ").split())
    # tp 8 without Megatron-FSDP: validate_args asks for one CUDA work queue in the launch environment
    assert "\nCUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nnodes 128 --nproc-per-node 8 pretrain_gpt.py" in out.stdout
    assert (a.tensor_model_parallel_size, a.pipeline_model_parallel_size, a.num_layers_per_virtual_pipeline_stage) == (
        8, 4, 10)
    assert a.use_distributed_optimizer and a.sequence_parallel and a.recompute_granularity == "selective"
    assert (a.num_layers, a.hidden_size, a.num_query_groups, a.swiglu) == (80, 8192, 8, True)
    assert from_megatron(out.stdout)["dp"] == 32


LLAMA3_405B_LAYOUT = ["--model", "llama3-405b", "--cluster", "h100x16384", "--tp", "8", "--pp", "16", "--vpp", "8",
                      "--schedule", "interleaved", "--stage-layers", ",".join(["7"] + ["8"] * 14 + ["7"]),
                      "--sequence-parallel", "--global-batch", "2048", "--recompute", "full"]


def test_megatron_layout_gives_the_embedding_and_the_loss_a_chunk_of_their_own():
    # Llama 3 405B as the Llama 3 paper (Sec. 3.3.2) cut it: 126 layers over 16 stages, one layer
    # fewer on the first and last "so that the first model chunk on the first stage has only the
    # embedding, and the last model chunk on the last stage has only output projection and loss";
    # 8 chunks a stage: 128 virtual stages of one layer, E first and L last. Megatron-Core orders the
    # layout by virtual stage, chunk x 16 + stage: rank 0's first chunk is virtual stage 0 ('E'),
    # rank 15's last is virtual stage 127 ('L').
    out = _cli("export", "--framework", "megatron", "--zero-stage", "1", *LLAMA3_405B_LAYOUT)
    assert out.returncode == 0, out.stderr
    # (the layout's '|' quoted for the shell)
    a = megatron_parser().parse_args(shlex.split(out.stdout.split(" pretrain_gpt.py ")[1].replace("\\\n", " ")))
    assert a.pipeline_model_parallel_layout == "E|(t|)*126L"  # Megatron-Core's repeat: E, 126 of 't', L
    # Megatron-LM refuses the layout beside the other two ways of giving virtual stages
    assert a.num_virtual_stages_per_pipeline_rank is None and a.num_layers_per_virtual_pipeline_stage is None
    assert a.decoder_first_pipeline_num_layers is None and a.decoder_last_pipeline_num_layers is None
    back = from_megatron(out.stdout)
    assert (back["stage_layers"], back["vpp"]) == ([7] + [8] * 14 + [7], 8)
    # two layers on the first and last of four stages, three chunks: rank 0 'E', t, t; rank 3 t, t, 'L'
    assert megatron_layout([2, 3, 3, 2], 3, compact=False) == "E|t|t|t|t|t|t|t|t|t|t|L"
    assert megatron_layout([2, 3, 3, 2], 3) == "E|(t|)*10L"
    assert megatron_layout([3, 4], 2) == "Ett|tt|t|ttL"
    # uneven chunks beside the end chunks: stages 2, 5, 5, 2 in 3 chunks: rank 1's and 2's chunks 2, 2, 1
    assert megatron_layout([2, 5, 5, 2], 3, compact=False) == "E|tt|tt|t|t|tt|tt|t|t|t|t|L"
    assert megatron_layout([2, 5, 5, 2], 3) == "E|tt|tt|t|t|tt|tt|(t|)*4L"
    assert _layout_stage_layers("E|tt|tt|t|t|tt|tt|(t|)*4L", 4) == ([2, 5, 5, 2], 3)  # read back, repeats unrolled
    # a layout plansweep cannot price (an MTP layer; virtual stages not a multiple of pp) is refused naming the flag
    for bad, p in (("Et|(tt|)*30mL", 16), ("E|t|t|L", 3)):
        with pytest.raises(costmodel.InputError, match="--pipeline-model-parallel-layout"):
            _layout_stage_layers(bad, p)


def test_megatron_layout_for_unequal_stages_between_the_first_and_the_last():
    """Without interleaving, --decoder-first/last-pipeline-num-layers share the rest evenly; stages of 6, 8, 10 and 8
    layers need a layout, one virtual stage a rank: the embedding with the first stage's 6 layers, the loss after
    the last stage's 8 (validate_args then sets no virtual pipeline size)."""
    out = _cli("export", "--framework", "megatron", "--model", "llama3-8b", "--cluster", "h100x64", "--pp", "4",
               "--stage-layers", "6,8,10,8")
    assert out.returncode == 0, out.stderr
    a = megatron_parser().parse_args(out.stdout.split(" pretrain_gpt.py ")[1].replace("\\\n", " ").split())
    assert a.pipeline_model_parallel_layout.strip("'") == "E" + "t" * 6 + "|" + "t" * 8 + "|" + "t" * 10 + "|" + \
        "t" * 8 + "L"
    assert a.decoder_first_pipeline_num_layers is None and a.num_virtual_stages_per_pipeline_rank is None
    assert from_megatron(out.stdout)["stage_layers"] == [6, 8, 10, 8]
    assert from_megatron(out.stdout)["vpp"] == 1 and from_megatron(out.stdout)["schedule"] == "1f1b"


def test_megatron_layout_for_uniform_stages_that_the_chunks_do_not_divide():
    # 48 layers on 8 stages of 6, 4 chunks a stage: Megatron-Core's profile prices chunks one layer apart (2, 2, 1, 1:
    # Framework.uneven_chunks), which only a layout says; --num-layers-per-virtual-pipeline-stage 6 // 4 = 1 would
    # launch 6 chunks a stage instead
    model, cluster = SPACES["qwen3"]
    plan = dict(dp=4, tp=1, pp=8, cp=2, ep=1, etp=1, micro_batch=1, global_batch=256, vpp=4, zero_stage=1,
                schedule="interleaved", recompute="full", precision="bf16", sequence_parallel=True, overlap_dp=False,
                stage_layers=[6] * 8, stage_recompute=["full"] * 8)
    text = WRITERS["megatron"](plan, model, cluster)
    a = megatron_parser().parse_args(_megatron_words(text))
    # virtual stage j = chunk x 8 + stage: 8 of 'tt' (chunk 0, the embedding first), 8 of 'tt', 8 of 't', 8 of 't'
    assert a.pipeline_model_parallel_layout == "Ett|(tt|)*15(t|)*15tL"
    assert a.num_layers_per_virtual_pipeline_stage is None and a.num_virtual_stages_per_pipeline_rank is None
    assert read_back("megatron", text, model) == plan


def test_torchtitan_gives_the_embedding_and_the_output_a_model_part_of_their_own():
    # the same cut in torchtitan's split points: model part 0 (rank 0's first) holds tok_embeddings
    # alone, part 127 (rank 15's last) norm and output alone; every other part one layer
    out = _cli("export", "--framework", "torchtitan", "--zero-stage", "3", *LLAMA3_405B_LAYOUT)
    assert out.returncode == 0, out.stderr
    parts = tomllib.loads(out.stdout)["parallelism"]["module_fqns_per_model_part"]
    assert parts[0] == ["tok_embeddings"] and parts[127] == ["norm", "output"]
    assert parts[1] == ["layers.0"] and parts[126] == ["layers.125"]
    assert all(len(p) == 1 for p in parts[1:127])


def test_torchtitan_worked_example():
    # Llama 3 8B, stages of 6, 10, 10, 6 layers, interleaved with 2 chunks per rank: rank r holds
    # virtual stages r and r + 4 (chunks of 3, 5, 5, 3 layers, twice), so virtual stage 0 is the
    # embedding and layers 0-2, stage 4 (rank 0's second chunk) layers 16-18, stage 7 layers 29-31
    # with the norm and output. dp = 64 / (2 x 4) = 8 replicas (DDP), 256 / 8 = 32 sequences per
    # replica per step, in micro-batches of 1.
    out = _cli("export", "--framework", "torchtitan", "--model", "llama3-8b", "--cluster", "h100x64", "--tp", "2",
               "--pp", "4", "--vpp", "2", "--schedule", "interleaved", "--stage-layers", "6,10,10,6",
               "--sequence-parallel", "--global-batch", "256", "--recompute", "full")
    assert out.returncode == 0, out.stderr
    doc = tomllib.loads(out.stdout)
    parts = doc["parallelism"]["module_fqns_per_model_part"]
    assert parts[0] == ["tok_embeddings", "layers.0", "layers.1", "layers.2"]
    assert parts[4] == ["layers.16", "layers.17", "layers.18"]
    assert parts[7] == ["layers.29", "layers.30", "layers.31", "norm", "output"]
    assert (doc["training"]["local_batch_size"], doc["parallelism"]["data_parallel_replicate_degree"]) == (32, 8)
    assert doc["parallelism"]["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert doc["activation_checkpoint"]["mode"] == "full"
    # the flavor in torchtitan's TransformerModelArgs names; Llama 3 8B's params.json as Meta
    # published it: ffn_dim_multiplier 1.3, multiple_of 1024 (14336 = 14 x 1024)
    assert torchtitan_model(out.stdout) == {"model": "llama3", "dim": 4096, "n_layers": 32, "n_heads": 32,
                                            "n_kv_heads": 8, "vocab_size": 128256, "multiple_of": 1024,
                                            "ffn_dim_multiplier": 1.3}


def test_deepspeed_worked_example():
    # 64 GPUs / (tp 2 x pp 4) = dp 8; 256 sequences / (8 x micro-batch 2) = 16 micro-batches.
    out = _cli("export", "--framework", "deepspeed", "--model", "llama3-8b", "--cluster", "h100x64", "--tp", "2",
               "--pp", "4", "--micro-batch", "2", "--global-batch", "256", "--zero-stage", "1", "--recompute", "full")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    ds = doc["ds_config"]
    assert (ds["train_batch_size"], ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"]) == (
        256, 2, 16)
    assert ds["zero_optimization"]["stage"] == 1 and ds["tensor_parallel"] == {"autotp_size": 2}
    assert doc["launcher"]["pipeline_parallel_size"] == 4 and doc["launcher"]["data_parallel_size"] == 8
    assert doc["launcher"]["activation_checkpoint_interval"] == 1
    # tp 2 inside a pipeline: PipelineModule needs the three-axis topology, or it counts the
    # tensor-parallel ranks as data parallel
    assert doc["launcher"]["topology"] == {"num_pp": 4, "num_mp": 2, "num_dp": 8}
    assert doc["launcher"]["mpu"].startswith("required: PipelineModule(..., topology=PipeModelDataParallelTopology("
                                             "num_pp=4, num_mp=2, num_dp=8))")


@pytest.mark.parametrize("flags, mpu", [
    (["--tp", "2"], "required: deepspeed.initialize(..., mpu=MPU), an mpu over PipeModelDataParallelTopology("
     "num_pp=1, num_mp=2, num_dp=32) whose get_data_parallel_world_size() is 32"),
    (["--pp", "4"], "PipelineModule(num_stages=4) builds it"),
    ([], "none: every rank is a data-parallel rank"),
])
def test_deepspeed_says_when_the_script_passes_an_mpu(flags, mpu):
    out = _cli("export", "--framework", "deepspeed", "--model", "llama3-8b", "--cluster", "h100x64", *flags)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["launcher"]["mpu"].startswith(mpu)


@pytest.mark.parametrize("flags, env, fsdp", [
    (["--tp", "4", "--zero-stage", "3"], "CUDA_DEVICE_MAX_CONNECTIONS=8 ", True),   # Megatron-FSDP: not 1
    (["--zero-stage", "2"], "CUDA_DEVICE_MAX_CONNECTIONS=8 ", True),
    (["--cp", "2", "--zero-stage", "1"], "CUDA_DEVICE_MAX_CONNECTIONS=1 ", False),  # cp > 1 asks for 1
    (["--pp", "2", "--zero-stage", "1"], "", False),                                # tp = cp = 1: nothing asked
])
def test_megatron_launch_environment_and_checkpoint_format(flags, env, fsdp):
    out = _cli("export", "--framework", "megatron", "--model", "llama3-8b", "--cluster", "h100x64", *flags)
    assert out.returncode == 0, out.stderr
    assert f"\n{env}torchrun --nnodes 8" in out.stdout
    a = megatron_parser().parse_args(out.stdout.split(" pretrain_gpt.py ")[1].replace("\\\n", " ").split())
    assert a.use_megatron_fsdp == fsdp and (a.ckpt_format == "fsdp_dtensor") == fsdp


def test_llama3_ffn_width_by_hand():
    # torchtitan's FeedForward: int(2 x 4 dim / 3), times the multiplier, up to a multiple of multiple_of.
    # Llama 3 405B: dim 16384 -> 43690; x 1.2 = 52428; up to 1024: 52 x 1024 = 53248 (its width)
    assert llama3_ffn(16384, 53248) == {"multiple_of": 1024, "ffn_dim_multiplier": 1.2}
    # Llama 2 7B: dim 4096 -> 10922; x 1.0; up to 256: 43 x 256 = 11008 (its width)
    assert llama3_ffn(4096, 11008) == {"multiple_of": 256, "ffn_dim_multiplier": 1.0}
    # an odd width: multiple_of 1 and a multiplier whose product truncates to the width itself
    got = llama3_ffn(1000, 3001)
    assert got["multiple_of"] == 1 and int(got["ffn_dim_multiplier"] * int(8000 / 3)) == 3001


# ---- what a framework cannot express ---------------------------------------------------------
@pytest.mark.parametrize("fw, flags, argument", [
    ("megatron", ["--schedule", "zb-h1"], "schedule"),
    ("torchtitan", ["--zero-stage", "1"], "zero_stage"),
    ("torchtitan", ["--tp", "2"], "sequence_parallel"),
    ("torchtitan", ["--no-overlap-dp"], "overlap_dp"),
    ("torchtitan", ["--precision", "fp16"], "precision"),
    ("torchtitan", ["--model", "gpt3-175b", "--tp", "8", "--sequence-parallel"], "--model"),
    ("deepspeed", ["--cp", "2"], "cp"),
    ("deepspeed", ["--recompute", "selective"], "recompute"),
    ("deepspeed", ["--pp", "4", "--stage-layers", "7,9,9,7"], "stage_layers"),
    ("deepspeed", ["--pp", "4", "--vpp", "2", "--schedule", "interleaved"], "schedule"),
    ("deepspeed", ["--precision", "fp8"], "precision"),
])
def test_inexpressible_dimension_is_an_error(tmp_path, fw, flags, argument):
    out_file = tmp_path / "out.txt"
    out = _cli("export", "--framework", fw, "--model", "llama3-8b", "--cluster", "h100x64", *flags,
               "--out", str(out_file))
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"plansweep export: error: {argument}: expected "), out.stderr
    assert not out_file.exists() and list(tmp_path.iterdir()) == []


def test_infeasible_plan_is_refused_like_evaluate(tmp_path):
    out = _cli("export", "--framework", "megatron", "--model", "llama3-8b", "--cluster", "h100x64", "--tp", "3",
               "--dp", "1",
               "--out", str(tmp_path / "x"))
    assert out.returncode == 2 and "tp: expected a divisor of heads=32" in out.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("where", UNWRITABLE)
def test_out_that_cannot_be_written_is_one_line_and_the_old_file_stays(tmp_path, monkeypatch, where):
    old, out = unwritable_path(tmp_path, monkeypatch, where, "e.sh")
    got = _cli("export", "--model", "llama3-8b", "--cluster", "h100x8", "--micro-batch", "1", "--global-batch", "8",
               "--framework", "megatron-core", "--tp", "8", "--out", out)
    one_error_line(got, f"plansweep export: error: --out: expected a writable file path, got '{out}")
    assert old.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["dir", "e.sh"]
    assert list((tmp_path / "dir").iterdir()) == []


# ---- mixture of experts: Mixtral 8x7B, worked by hand -----------------------------------------
# Mixtral 8x7B's published shape (mistralai/Mixtral-8x7B-v0.1 config.json; arXiv:2401.04088):
# 32 layers, hidden 4096, 32 heads of 128, 8 KV heads, ffn 14336 per expert, 8 experts, top-2,
# every layer MoE, no shared expert, RMSNorm, SwiGLU, rotary positions, untied head, no biases,
# 32768 positions, vocabulary 32000.
MIXTRAL = ("--model", "mixtral-8x7b", "--cluster", "h100x64")


def _megatron_words(stdout: str) -> list[str]:
    return shlex.split(stdout.split(" pretrain_gpt.py ")[1].replace("\\\n", " "))


def test_megatron_mixtral_worked_example():
    # tp 4 x pp 4 x cp 2 = 32: dp = 64 / 32 = 2; ep 4 x etp 2 = 8 divides tp cp dp = 16.
    out = _cli("export", "--framework", "megatron", *MIXTRAL, "--tp", "4", "--pp", "4", "--cp", "2", "--ep", "4",
               "--etp", "2", "--sequence-parallel", "--zero-stage", "1", "--recompute", "selective",
               "--global-batch", "256")
    assert out.returncode == 0, out.stderr
    assert "torchrun --nnodes 8 --nproc-per-node 8 pretrain_gpt.py" in out.stdout
    assert _megatron_words(out.stdout) == [
        "--num-layers", "32", "--hidden-size", "4096", "--ffn-hidden-size", "14336", "--num-attention-heads", "32",
        "--group-query-attention", "--num-query-groups", "8", "--seq-length", "32768",
        "--max-position-embeddings", "32768", "--swiglu", "--normalization", "RMSNorm", "--disable-bias-linear",
        "--untie-embeddings-and-output-weights", "--position-embedding-type", "rope",
        "--num-experts", "8", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "14336", "--moe-grouped-gemm",
        "--expert-model-parallel-size", "4", "--expert-tensor-parallel-size", "2",
        "--moe-token-dispatcher-type", "alltoall",
        "--tensor-model-parallel-size", "4", "--pipeline-model-parallel-size", "4", "--context-parallel-size", "2",
        "--sequence-parallel", "--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather",
        "--recompute-granularity", "selective", "--micro-batch-size", "1", "--global-batch-size", "256", "--bf16"]
    plan = from_megatron(out.stdout)
    assert (plan["dp"], plan["ep"], plan["etp"]) == (2, 4, 2)


@pytest.mark.parametrize("profile, words", [
    ("megatron-core", ["--moe-token-dispatcher-type", "alltoall"]),
    ("megatron-core-a2a-overlap", ["--moe-token-dispatcher-type", "alltoall", "--overlap-moe-expert-parallel-comm"]),
    ("megatron-core-deepep", ["--moe-token-dispatcher-type", "flex", "--moe-enable-deepep"]),
    ("megatron-core-deepep-a2a-overlap", ["--moe-token-dispatcher-type", "flex", "--moe-enable-deepep",
                                         "--overlap-moe-expert-parallel-comm"]),
])
def test_megatron_dispatcher_follows_the_profile(profile, words):
    out = _cli("export", "--framework", profile, *MIXTRAL, "--tp", "4", "--cp", "2", "--ep", "8",
               "--sequence-parallel", "--zero-stage", "1", "--recompute", "selective", "--global-batch", "256")
    assert out.returncode == 0, out.stderr
    w = _megatron_words(out.stdout)
    i = w.index("--moe-token-dispatcher-type")
    assert w[i:i + len(words)] == words and w[i + len(words)] == "--tensor-model-parallel-size"


def test_megatron_deepseek_v3_layer_pattern_and_shared_expert():
    # DeepSeek-V3: the first 3 of 61 layers dense (ffn 18432), then 58 MoE layers of 256 experts
    # (ffn 2048), top-8, one shared expert of 2048; tp 1 x pp 16 (3, 4 x 14, 2 layers) x dp 128.
    out = _cli("export", "--framework", "megatron-core-deepep-a2a-overlap", "--model", "deepseek-v3", "--cluster",
               "h100x2048", "--pp", "16", "--vpp", "2", "--schedule", "interleaved", "--ep", "64",
               "--stage-layers", ",".join(["3"] + ["4"] * 14 + ["2"]), "--zero-stage", "1", "--global-batch", "15360")
    assert out.returncode == 0, out.stderr
    a = megatron_parser().parse_args(_megatron_words(out.stdout))
    assert (a.num_experts, a.moe_router_topk, a.moe_ffn_hidden_size, a.ffn_hidden_size) == (256, 8, 2048, 18432)
    assert a.moe_shared_expert_intermediate_size == 2048 and a.moe_layer_freq == "[0]*3+[1]*58"
    assert (a.expert_model_parallel_size, a.moe_token_dispatcher_type, a.moe_enable_deepep) == (64, "flex", True)
    # 3 layers on the first stage in 2 chunks: Megatron-Core refuses --decoder-first-pipeline-num-layers 3 with 2
    # virtual stages (core_v0.15.0 transformer_config.py: "must be divisible by virtual pipeline parallel degree"),
    # so the layout says it: chunks 2, 1 on the first stage, 2, 2 on the middle ones, 1, 1 on the last; virtual
    # stage j = chunk x 16 + stage
    assert a.overlap_moe_expert_parallel_comm and a.pipeline_model_parallel_layout == "Ett|(tt|)*14t|t|(tt|)*14tL"
    assert a.num_virtual_stages_per_pipeline_rank is None and a.decoder_first_pipeline_num_layers is None
    assert from_megatron(out.stdout)["stage_layers"] == [3] + [4] * 14 + [2]


def test_moe_layer_pattern_as_megatron_reads_it():
    # Worked by hand: 8 layers, 1 dense, then every 2nd an MoE layer: layers 2, 4, 6
    # (plansweep's rule, Qwen2-MoE's decoder_sparse_step); Megatron's int 2 is layers 0, 2, 4, 6.
    m = costmodel.Transformer(name="x", layers=8, hidden=64, heads=4, vocab=10, experts=4, experts_per_token=2,
                              dense_layers=1, moe_layer_freq=2)
    assert moe_layer_pattern(m) == [0, 0, 1, 0, 1, 0, 1, 0]
    assert _megatron_pattern(m) == "[0]*1+([0]*1+[1])*3+[0]*1"
    assert _moe_pattern(_megatron_pattern(m), 8) == moe_layer_pattern(m)
    assert _moe_pattern("2", 8) == [1, 0, 1, 0, 1, 0, 1, 0]
    assert _moe_pattern("([1]*3+[0]*1)*3", 12) == [1, 1, 1, 0] * 3


def test_torchtitan_mixtral_worked_example():
    # FSDP (ZeRO 3) over dp = 64 / (tp 4 x pp 4 x cp 2) = 2; ep 8 folds into dp_shard x cp x tp = 16.
    out = _cli("export", "--framework", "torchtitan", *MIXTRAL, "--tp", "4", "--pp", "4", "--cp", "2", "--ep", "8",
               "--sequence-parallel", "--zero-stage", "3", "--recompute", "full", "--global-batch", "256")
    assert out.returncode == 0, out.stderr
    doc = tomllib.loads(out.stdout)
    par = doc["parallelism"]
    parts = par.pop("module_fqns_per_model_part")
    assert par == {"data_parallel_replicate_degree": 1, "data_parallel_shard_degree": 2,
                   "fsdp_reshard_after_forward": "always", "tensor_parallel_degree": 4, "context_parallel_degree": 2,
                   "pipeline_parallel_degree": 4, "pipeline_parallel_schedule": "1F1B",
                   "pipeline_parallel_microbatch_size": 1, "expert_parallel_degree": 8,
                   "expert_tensor_parallel_degree": 1, "expert_parallel_comm_backend": "standard"}
    assert parts[0][:2] == ["tok_embeddings", "layers.0"] and parts[3][-3:] == ["layers.31", "norm", "output"]
    assert doc["model"]["name"] == "qwen3" and doc["training"]["local_batch_size"] == 128
    assert torchtitan_model(out.stdout) == {
        "model": "qwen3", "dim": 4096, "n_layers": 32, "n_heads": 32, "n_kv_heads": 8, "head_dim": 128,
        "hidden_dim": 14336, "vocab_size": 32000, "moe_enabled": True, "moe_inter_dim": 14336,
        "moe_args_num_experts": 8, "moe_args_num_shared_experts": 0, "moe_args_top_k": 2}


def test_torchtitan_llama4_maverick_worked_example():
    """Llama 4 Maverick (MoE on every other layer) is torchtitan's llama4 model, whose widths come from multiple_of and
    ffn_dim_multiplier (models/llama4/model/model.py at v0.2.2): dense, int(1.2 x int(2 x 4 x 5,120 / 3)) = int(1.2
    x 13,653) = 16,383 rounded up to 1,024: 16,384; an expert, auto-scaled over top-k 1 + 1 shared expert, int(16,383
    / 2) = 8,191 rounded up: 8,192. The same model at 32,768 tokens is chunked: refused in one line."""
    layout = ["--model", "llama4-maverick", "--cluster", "h100x256", "--tp", "4", "--pp", "4", "--ep", "8",
              "--sequence-parallel", "--zero-stage", "3", "--global-batch", "256"]
    out = _cli("export", "--framework", "torchtitan", *layout)
    assert out.returncode == 0, out.stderr
    doc = tomllib.loads(out.stdout)
    assert doc["model"]["name"] == "llama4" and doc["parallelism"]["expert_parallel_degree"] == 8
    flavor = torchtitan_model(out.stdout)
    assert flavor == {"model": "llama4", "dim": 5120, "n_layers": 48, "n_heads": 40, "n_kv_heads": 8,
                      "vocab_size": 202048, "interleave_moe_layer_step": 2, "multiple_of": 1024,
                      "ffn_dim_multiplier": 1.2, "auto_scale_hidden_dim": True, "moe_args_num_experts": 128,
                      "moe_args_num_shared_experts": 1, "moe_args_top_k": 1}
    assert set(flavor) - {"model"} - {k for k in flavor if k.startswith("moe_args_")} <= TORCHTITAN_FLAVOR_FIELDS[
        "llama4"]
    dense = 1024 * -(-int(1.2 * int(2 * 4 * 5120 / 3)) // 1024)
    expert = int(int(1.2 * int(2 * 4 * 5120 / 3)) / 2)
    assert (dense, expert + -expert % 1024) == (16384, 8192)
    from cli._export import llama4_ffn

    with pytest.raises(InputError, match="model.expert_ffn_hidden: expected the dense width 16384 over top-k"):
        llama4_ffn(dataclasses.replace(model_preset("llama4-maverick"), expert_ffn_hidden=4096,
                                       shared_expert_ffn_hidden=4096))
    chunked = _cli("export", "--framework", "torchtitan", *layout, "--seq-len", "32768")
    assert chunked.returncode == 2 and "model.attention_chunk" in chunked.stderr
    assert chunked.stderr.count("\n") == 1


def test_megatron_llama4_keeps_its_layers_without_rotary_positions():
    """Llama 4 Maverick at its 8,192 tokens: every fourth layer without rotary positions (--no-rope-freq 4, Megatron-
    Core's [0, 0, 0, 1] pattern), MoE on every other layer ([0]*0+([0]*1+[1])*24: --moe-layer-freq's list), one
    shared expert of 8,192 beside the 128 routed ones of 8,192, dense layers of 16,384."""
    out = _cli("export", "--framework", "megatron", "--model", "llama4-maverick", "--cluster", "h100x256", "--tp", "4",
               "--pp", "4", "--ep", "8", "--sequence-parallel", "--zero-stage", "1", "--global-batch", "256")
    assert out.returncode == 0, out.stderr
    shape = megatron_model(out.stdout)
    assert shape["rope_layers"] == 36 and shape["moe_pattern"] == [0, 1] * 24
    assert (shape["ffn_hidden"], shape["expert_ffn_hidden"], shape["shared_ffn_total"]) == (16384, 8192, 8192)
    a = megatron_parser().parse_args(_megatron_words(out.stdout))
    assert a.no_rope_freq == 4 and a.window_size is None
    from cli._export import megatron_nope

    odd = dataclasses.replace(model_preset("llama4-maverick"), window_layers=30, window_every=None)
    with pytest.raises(InputError, match="model.window_layers: expected all 48 layers or L - L // N of them, every "
                                         "N-th layer \\(1-based\\) left full, N dividing 48"):
        megatron_nope(odd)


def test_deepspeed_mixtral_worked_example():
    # tp 8 x pp 4: dp = 2, ep 2 = the data-parallel group; 256 / (2 x 1) = 128 micro-batches.
    out = _cli("export", "--framework", "deepspeed", *MIXTRAL, "--tp", "8", "--pp", "4", "--ep", "2",
               "--zero-stage", "1", "--recompute", "full", "--global-batch", "256")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["launcher"]["moe"] == {"num_experts": 8, "ep_size": 2, "k": 2, "capacity_factor": 1.0,
                                      "drop_tokens": False, "expert_ffn_hidden": 14336, "moe_layers": list(range(32))}
    assert doc["ds_config"]["gradient_accumulation_steps"] == 128 and doc["launcher"]["data_parallel_size"] == 2


@pytest.mark.parametrize("fw, model, flags, argument", [
    # Megatron-LM: fp16 with ep > 1; the all-to-all overlap without virtual stages, or with full recompute
    ("megatron", "mixtral-8x7b", ["--tp", "4", "--cp", "2", "--ep", "8", "--sequence-parallel", "--precision",
                                  "fp16"], "precision"),
    ("megatron-core-a2a-overlap", "mixtral-8x7b", ["--tp", "4", "--pp", "4", "--cp", "2", "--ep", "4",
                                                   "--sequence-parallel"], "vpp"),
    ("megatron-core-a2a-overlap", "mixtral-8x7b", ["--tp", "4", "--cp", "2", "--ep", "8", "--sequence-parallel",
                                                   "--recompute", "full"], "recompute"),
    # torchtitan: experts fold into FSDP ranks, not DDP replicas
    ("torchtitan", "mixtral-8x7b", ["--tp", "2", "--ep", "8", "--sequence-parallel", "--zero-stage", "0"], "ep"),
    # DeepSpeed: ep from dp only, no ZeRO-3 with MoE, no shared experts
    ("deepspeed", "mixtral-8x7b", ["--tp", "8", "--pp", "4", "--ep", "4", "--recompute", "full"], "ep"),
    ("deepspeed", "qwen3-30b-a3b", ["--tp", "4", "--ep", "8", "--zero-stage", "3"], "zero_stage"),
    ("deepspeed", "deepseek-v3", ["--cluster", "h100x2048", "--tp", "8", "--ep", "64"], "model.shared_experts"),
])
def test_inexpressible_moe_dimension_is_an_error(tmp_path, fw, model, flags, argument):
    out_file = tmp_path / "out.txt"
    cluster = [] if "--cluster" in flags else ["--cluster", "h100x64"]
    out = _cli("export", "--framework", fw, "--model", model, *cluster, "--global-batch", "256", *flags,
               "--out", str(out_file))
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"plansweep export: error: {argument}: expected "), out.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fw", ["megatron", "torchtitan", "deepspeed"])
def test_writers_refuse_expert_degrees_their_framework_cannot_take(fw):
    # evaluate refuses these first (ep on a dense model: ep_invalid; etp > 1 under fsdp2 and
    # deepspeed: framework_unsupported); a writer called on such a plan still names the dimension.
    dense = _feasible_plans(fw, 1)[0]
    with pytest.raises(costmodel.InputError) as e:
        WRITERS[fw](dense | {"ep": 2}, MODEL, CLUSTER)
    assert e.value.argument == "ep"
    model, cluster = SPACES["qwen3"]
    moe = _feasible_plans(fw, 1, space="qwen3")[0] | {"tp": 2, "etp": 2, "sequence_parallel": fw == "torchtitan",
                                                      "cp": 1, "pp": 1, "vpp": 1, "stage_layers": [48],
                                                      "stage_recompute": ["none"], "recompute": "none"}
    if fw == "megatron":  # Megatron-LM takes etp > 1
        assert "--expert-tensor-parallel-size 2" in WRITERS[fw](moe, model, cluster)
    else:
        with pytest.raises(costmodel.InputError) as e:
            WRITERS[fw](moe, model, cluster)
        assert e.value.argument == "etp"


def test_moe_model_fields_a_framework_cannot_set(tmp_path):
    # A model file with a capacity factor (torchtitan's experts are dropless; Megatron's flex
    # dispatcher does not pad to capacity) and one with a dense layer, then MoE every 2nd layer
    # (torchtitan's models put experts in every layer after the dense ones, or, llama4, every n-th
    # from the first; MoE every 2nd layer alone is llama4's, test_torchtitan_llama4_maverick_worked_example).
    base = dict(name="moe-test", layers=8, hidden=1024, heads=16, kv_heads=4, ffn_hidden=4096, seq_len=2048,
                vocab=32000, activation="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False,
                learned_positions=False, experts=8, experts_per_token=2)
    cases = [("torchtitan", dict(capacity_factor=1.25), "model.capacity_factor"),
             ("megatron-core-deepep", dict(capacity_factor=1.25), "model.capacity_factor"),
             ("torchtitan", dict(moe_layer_freq=2, dense_layers=1), "model.moe_layer_freq"),
             ("torchtitan", dict(moe_layer_freq=2, capacity_factor=1.25), "model.capacity_factor")]
    for fw, extra, argument in cases:
        path = tmp_path / "model.json"
        path.write_text(json.dumps(base | extra))
        flags = ["--tp", "2", "--sequence-parallel", "--zero-stage", "3"] if fw == "torchtitan" else ["--tp", "2"]
        out = _cli("export", "--framework", fw, "--model", str(path), "--cluster", "h100x64", "--ep", "4", *flags,
                   "--global-batch", "256", "--out", str(tmp_path / "out"))
        assert out.returncode == 2, (fw, out.stderr)
        assert out.stderr.startswith(f"plansweep export: error: {argument}: expected "), out.stderr
        assert not (tmp_path / "out").exists()
    # Megatron writes the capacity factor, padded to capacity (what plansweep prices).
    path = tmp_path / "model.json"
    path.write_text(json.dumps(base | dict(capacity_factor=1.25, moe_layer_freq=2)))
    out = _cli("export", "--framework", "megatron", "--model", str(path), "--cluster", "h100x64", "--tp", "2",
               "--ep", "4", "--global-batch", "256")
    assert out.returncode == 0, out.stderr
    a = megatron_parser().parse_args(_megatron_words(out.stdout))
    assert (a.moe_expert_capacity_factor, a.moe_pad_expert_input_to_capacity) == (1.25, True)
    assert a.moe_layer_freq == "([0]*1+[1])*4"


# ---- a run directory's n-th best plan --------------------------------------------------------
def test_export_from_a_run_takes_its_nth_best_row(tmp_path):
    from tests.run_fixtures import write_fixture_run

    tps, pps = [1, 2, 4, 8, 2, 4], [1, 1, 2, 4, 4, 2]
    table = StrategyTable.from_columns(tp=tps, pp=pps, dp=[64 // (t * p) for t, p in zip(tps, pps, strict=True)],
                                       global_batch=256, recompute="full", zero_stage=1)
    run = write_fixture_run(tmp_path / "run", MODEL, CLUSTER, table)
    m = evaluate(MODEL, CLUSTER, table)
    order = np.argsort(-np.where(m["feasible"], m["tokens_per_s"], -np.inf), kind="stable")
    for rank in (1, 2):
        out = _cli("export", "--framework", "megatron", "--run", str(run), "--rank", str(rank))
        assert out.returncode == 0, out.stderr
        want = canonical_plan(table.row(int(order[rank - 1])), MODEL)
        assert from_megatron(out.stdout) == want
    bad = _cli("export", "--framework", "megatron", "--run", str(run), "--tp", "2")
    assert bad.returncode == 2 and "--run: expected no strategy flags" in bad.stderr


def test_export_from_an_moe_run_tells_plans_apart_by_ep(tmp_path):
    # Three feasible Mixtral plans that differ in ep only are three distinct plans of the run
    # (ep = 1 does not fit in memory here): ranks 1-3 are ep 8, 4, 2, the fastest first.
    from tests.run_fixtures import write_fixture_run

    model, cluster = SPACES["mixtral"]
    table = StrategyTable.from_columns(tp=4, cp=2, pp=4, dp=2, ep=[1, 2, 4, 8], sequence_parallel=True,
                                       global_batch=256, zero_stage=1, recompute="selective")
    m = evaluate(model, cluster, table)
    assert m["feasible"].tolist() == [False, True, True, True]
    order = np.argsort(-np.where(m["feasible"], m["tokens_per_s"], -np.inf), kind="stable")
    run = write_fixture_run(tmp_path / "run", model, cluster, table)
    for rank in (1, 2, 3):
        out = _cli("export", "--framework", "megatron", "--run", str(run), "--rank", str(rank))
        assert out.returncode == 0, out.stderr
        assert from_megatron(out.stdout) == canonical_plan(table.row(int(order[rank - 1])), model)


def test_framework_names_are_the_pricing_profiles(tmp_path):
    # --framework takes the profiles of costmodel._frameworks (and their aliases): the plan is
    # priced under the framework it is exported for; a profile without a launch format is refused.
    plan = ("--model", "llama3-8b", "--cluster", "h100x64", "--tp", "8", "--sequence-parallel", "--dp", "8")
    a = _cli("export", "--framework", "megatron", *plan)
    b = _cli("export", "--framework", "megatron-core", *plan)
    assert a.returncode == 0 and a.stdout == b.stdout
    out = _cli("export", "--framework", "generic", *plan, "--out", str(tmp_path / "x"))
    assert out.returncode == 2 and "--framework: expected a framework with a launch format" in out.stderr
    assert list(tmp_path.iterdir()) == []


def test_megatron_writes_the_sliding_window_and_the_all_to_all_it_is_priced_with(tmp_path):
    """gpt-oss-120b: a 128-key window (the query and 127 before it: --window-size 127,0) on every other layer from
    the first (--window-attn-skip-freq 2: every 2nd layer, 1-based, full), read back as the model's; Mistral-7B at
    32,768 tokens with cp 2: its window on every layer and TE's all-to-all exchange (--cp-comm-type a2a), the one a
    window runs over; torchtitan's llama3 model has no window; a windowed share Megatron's N cannot say is refused."""
    out = _cli("export", "--framework", "megatron", "--model", "gpt-oss-120b", "--cluster", "h100x64", "--tp", "1",
               "--pp", "4", "--ep", "8", "--global-batch", "1280", "--recompute", "selective", "--zero-stage", "1")
    assert out.returncode == 0, out.stderr
    a = megatron_parser().parse_args(out.stdout.split(" pretrain_gpt.py ")[1].replace("\\\n", " ").split())
    assert (a.window_size, a.window_attn_skip_freq, a.cp_comm_type) == ("127,0", 2, ["p2p"])
    shape = megatron_model(out.stdout)
    assert (shape["sliding_window"], shape["window_layers"]) == (128, 18)
    mistral = tmp_path / "mistral.json"
    mistral.write_text(json.dumps({"model_type": "mistral", "hidden_size": 4096, "num_attention_heads": 32,
                                   "num_key_value_heads": 8, "num_hidden_layers": 32, "intermediate_size": 14336,
                                   "max_position_embeddings": 32768, "vocab_size": 32000, "hidden_act": "silu",
                                   "sliding_window": 4096, "tie_word_embeddings": False}))
    flags = ("--model", str(mistral), "--cluster", "h100x64", "--tp", "2", "--cp", "2", "--dp", "16",
             "--global-batch", "64", "--recompute", "full", "--sequence-parallel", "--zero-stage", "1")
    out = _cli("export", "--framework", "megatron", *flags)
    assert out.returncode == 0, out.stderr
    a = megatron_parser().parse_args(out.stdout.split(" pretrain_gpt.py ")[1].replace("\\\n", " ").split())
    assert (a.window_size, a.window_attn_skip_freq, a.cp_comm_type) == ("4095,0", None, ["a2a"])
    flags = (*flags[:-1], "2")  # (torchtitan's FSDP has no ZeRO-1)
    out = _cli("export", "--framework", "torchtitan", *flags)  # (torchtitan's context parallelism runs SDPA only)
    assert out.returncode == 2 and "cp: expected 1 for a model with windowed or chunked attention" in out.stderr
    no_cp = [("1" if f == "2" and flags[i - 1] == "--cp" else "32" if flags[i - 1] == "--dp" else f)
             for i, f in enumerate(flags)]
    out = _cli("export", "--framework", "torchtitan", *no_cp)
    assert out.returncode == 2
    assert "model.sliding_window: expected none, or at least the sequence's 32,768" in out.stderr
    odd = dataclasses.replace(costmodel.model_preset("gpt-oss-120b"), window_layers=7, window_every=None)
    with pytest.raises(costmodel.InputError, match="model.window_layers: expected all 36 layers or L - L // N"):
        megatron_window(odd)


def test_megatron_writes_a_gelu_gated_mlp_as_its_quick_geglu(tmp_path):
    """Gemma 2 9B's config: Megatron-LM's one gated GELU (--quick-geglu: the same three matrices, its quick-GELU
    form), the 4,096-token window on every other layer, head size 256; its tied embeddings untouched."""
    gemma = tmp_path / "gemma2.json"
    gemma.write_text(json.dumps({"model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336,
                                 "num_hidden_layers": 42, "num_attention_heads": 16, "num_key_value_heads": 8,
                                 "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
                                 "max_position_embeddings": 8192, "vocab_size": 256000, "sliding_window": 4096}))
    out = _cli("export", "--framework", "megatron", "--model", str(gemma), "--cluster", "h100x64", "--tp", "8",
               "--pp", "2", "--global-batch", "256", "--recompute", "full", "--sequence-parallel", "--zero-stage", "1")
    assert out.returncode == 0, out.stderr
    a = megatron_parser().parse_args(out.stdout.split(" pretrain_gpt.py ")[1].replace("\\\n", " ").split())
    assert (a.quick_geglu, a.swiglu, a.kv_channels, a.untie_embeddings_and_output_weights) == (True, False, 256, False)
    assert (a.window_size, a.window_attn_skip_freq) == ("4095,0", 2)


def test_torchtitan_ties_the_output_only_where_its_model_can(tmp_path):
    """Qwen3-4B's config ties the output to the embedding (tie_word_embeddings true): torchtitan v0.2.2's qwen3 model
    ties it with enable_weight_tying (models/qwen3/model/args.py), so the flavor says so; its llama3 model has no
    such field, so a tied Llama-shaped model (Granite 3's, head size hidden / heads) is refused in one line, nothing
    written."""
    qwen3_4b = {"model_type": "qwen3", "hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36,
                "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
                "max_position_embeddings": 40960, "tie_word_embeddings": True, "hidden_act": "silu"}
    (cfg := tmp_path / "qwen3-4b.json").write_text(json.dumps(qwen3_4b))
    args = ("--cluster", "h100x8", "--seq-len", "4096", "--global-batch", "64", "--zero-stage", "3")
    out = _cli("export", "--framework", "torchtitan", "--model", str(cfg), *args)
    assert out.returncode == 0, out.stderr
    flavor = torchtitan_model(out.stdout)
    assert (flavor["model"], flavor["head_dim"], flavor["enable_weight_tying"]) == ("qwen3", 128, True)
    granite = {"model_type": "granite", "hidden_size": 4096, "intermediate_size": 12800, "num_hidden_layers": 40,
               "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 49155,
               "max_position_embeddings": 4096, "tie_word_embeddings": True, "hidden_act": "silu"}
    (cfg := tmp_path / "granite.json").write_text(json.dumps(granite))
    dest = tmp_path / "job.toml"
    out = _cli("export", "--framework", "torchtitan", "--model", str(cfg), *args, "--out", str(dest))
    assert out.returncode == 2 and not dest.exists()
    assert out.stderr.strip().splitlines() == [
        "plansweep export: error: model.tied_embeddings: expected false for torchtitan's llama3 model (only its qwen3 "
        "model ties the output to the embedding: enable_weight_tying), got True"]


def test_torchtitan_refuses_a_tied_output_on_every_model_but_qwen3():
    """deepseek_v3 (MLA) and llama4 (MoE every other layer) have no enable_weight_tying in torchtitan v0.2.2 either."""
    from cli._export import _torchtitan_model

    for name in ("deepseek-v3", "llama4-maverick"):
        tied = dataclasses.replace(costmodel.model_preset(name), tied_embeddings=True)
        with pytest.raises(costmodel.InputError, match="model.tied_embeddings: expected false for torchtitan's "):
            _torchtitan_model(tied)


def test_export_from_a_run_under_another_framework_notes_it_only_when_it_writes(tmp_path):
    """A run priced under megatron-core, exported to DeepSpeed: its best row is priced again under deepspeed and the
    note says so where the plan is written; where DeepSpeed cannot run the plan (sequence parallelism) the refusal is
    the one line on stderr, no note before it."""
    from tests.run_fixtures import write_fixture_run

    for tp, ok in ((1, True), (2, False)):
        table = StrategyTable.from_columns(tp=tp, pp=1, dp=64 // tp, global_batch=256, recompute="full", zero_stage=1,
                                           sequence_parallel=tp > 1)
        run = write_fixture_run(tmp_path / f"tp{tp}", MODEL, CLUSTER, table)
        out = _cli("export", "--framework", "deepspeed", "--run", str(run))
        err = out.stderr.strip().splitlines()
        if ok:
            assert out.returncode == 0 and json.loads(out.stdout)["ds_config"]["zero_optimization"]["stage"] == 1
            assert any("note: no row of the run is priced under a framework launched as deepspeed" in e for e in err)
        else:
            assert out.returncode == 2 and len(err) == 1 and "sequence_parallel: expected false" in err[0]



def test_megatron_writes_the_layers_the_config_names_or_refuses(tmp_path):
    """Megatron-LM names the restricted layers by one every-N-th pattern (1-based N, 2N, ... left full). A config's
    own pattern is what is written, not one its count allows: Qwen's window on its last 18 of 36 layers (also 36 - 36
    // 2, but the first 18 are the full ones) and Llama 4 with its rotary-free layers one phase off (1-based 1, 5, 9,
    ...: also 36 of 48, where --no-rope-freq 4 leaves 4, 8, 12, ...) are refused; in phase, 4 is written, and an
    interval of 6 writes 6. A window at least the sequence restricts nothing and is not written."""
    from cli._export import megatron_nope, megatron_window

    qwen = {"model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960,
            "vocab_size": 151936, "use_sliding_window": True, "max_window_layers": 18, "sliding_window": 1024}
    tail = costmodel.from_hf_config(qwen, "q")
    assert (tail.window_layers, tail.window_every) == (18, 0)
    with pytest.raises(costmodel.InputError, match="model.window_every: expected the restricted layers as every "
                                                   "N-th layer"):
        megatron_window(tail)
    assert megatron_window(dataclasses.replace(tail, sliding_window=40960)) == []  # (restricts nothing at 40,960)
    scout = {"model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192,
             "intermediate_size_mlp": 16384, "num_hidden_layers": 48, "num_attention_heads": 40,
             "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 8192, "vocab_size": 202048,
             "num_local_experts": 16, "num_experts_per_tok": 1, "interleave_moe_layer_step": 1,
             "attention_chunk_size": 8192}
    phase = costmodel.from_hf_config({**scout, "no_rope_layers": [0, 1, 1, 1] * 12}, "s")
    assert (phase.window_layers, phase.window_every) == (36, 0)
    with pytest.raises(costmodel.InputError, match="model.window_every"):
        megatron_nope(phase)
    assert megatron_nope(costmodel.from_hf_config({**scout, "no_rope_layers": [1, 1, 1, 0] * 12}, "s")) == [
        "--no-rope-freq", 4]
    sixth = costmodel.from_hf_config({**scout, "no_rope_layer_interval": 6}, "s")  # (6 divides 48)
    assert (sixth.window_layers, sixth.window_every) == (40, 6) and megatron_nope(sixth) == ["--no-rope-freq", 6]
