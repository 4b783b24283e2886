"""`plansweep export --framework megatron-deepspeed`: a plan priced under the deepspeed profiles as the bash script
that launches it in Megatron-DeepSpeed, the code those profiles price (Megatron's tensor and sequence parallelism and
selective recompute, DeepSpeed's ZeRO and pipeline engine, DeepSpeed-Ulysses for cp > 1).

Megatron-DeepSpeed does not install here (it needs torch and apex), so its option names are held against a list cut by
hand from its megatron/arguments.py at 4efb479, and the round trip (write, read back with plansweep's reader, compare)
runs on random feasible plans."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

import costmodel
from cli._export import MEGATRON_DEEPSPEED_ARGS, WRITERS, canonical_plan, megatron_deepspeed_parts, read_back
from costmodel import StrategyTable, evaluate
from tests.in_process import cli

ROOT = Path(__file__).resolve().parents[1]

# deepspeedai/Megatron-DeepSpeed 4efb479, megatron/arguments.py: each a literal group.add_argument there, with the
# choices it declares (None: no choices), and the two deepspeed.add_config_arguments adds.
MEGATRON_DEEPSPEED_4EFB479_FLAGS = {
    "--tensor-model-parallel-size": None, "--pipeline-model-parallel-size": None, "--no-pipeline-parallel": None,
    "--ds-sequence-parallel-size": None, "--sequence-parallel": None, "--num-layers": None, "--hidden-size": None,
    "--ffn-hidden-size": None, "--num-attention-heads": None, "--num-key-value-heads": None, "--kv-channels": None,
    "--seq-length": None, "--max-position-embeddings": None, "--use-rotary-position-embeddings": None,
    "--no-position-embedding": None, "--normalization": ["layernorm", "rmsnorm"], "--swiglu": None,
    "--disable-bias-linear": None, "--untie-embeddings-and-output-weights": None, "--use-flash-attn-v2": None,
    "--recompute-granularity": ["full", "selective"], "--recompute-method": ["uniform", "block"],
    "--recompute-num-layers": None, "--micro-batch-size": None, "--global-batch-size": None, "--bf16": None,
    "--fp16": None, "--zero-stage": None, "--deepspeed": None, "--deepspeed_config": None,
    "--num-experts": None, "--moe-expert-parallel-size": None, "--topk": None, "--expert-interval": None,
    "--disable-moe-token-dropping": None, "--moe-train-capacity-factor": None,
}
MHA = costmodel.model_preset("megatron-22b")  # 64 heads, as many K, V heads: Ulysses splits it
GQA = costmodel.model_preset("llama3-8b")
CLUSTER = costmodel.cluster_preset("h100x64")


def _cli(*argv):
    with contextlib.chdir(ROOT):
        return cli(*argv)


def test_the_flags_are_megatron_deepspeeds():
    for flag, kw in MEGATRON_DEEPSPEED_ARGS.items():
        assert flag in MEGATRON_DEEPSPEED_4EFB479_FLAGS, flag
        assert kw.get("choices") == MEGATRON_DEEPSPEED_4EFB479_FLAGS[flag], flag


def _feasible(model, profile, n=20, seed=0):
    """n random plans the profile prices as feasible (memory aside) for ``model`` at 8,192 tokens on 64 H100s."""
    model = dataclasses.replace(model, seq_len=8192)
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(600):
        tp, pp = (int(x) for x in rng.choice([1, 2, 4, 8], size=2))
        cp = int(rng.choice([1, 2, 4])) if tp == pp == 1 else 1
        dp = 64 // (tp * pp * cp)
        ep = int(rng.choice([e for e in (1, 2, 4, 8) if dp % e == 0 and model.experts % e == 0])) \
            if model.is_moe else 1
        rows.append(dict(tp=tp, pp=pp, cp=cp, dp=dp, ep=ep, micro_batch=int(rng.choice([1, 2])),
                         global_batch=int(rng.choice([128, 256])), zero_stage=int(rng.choice([0, 1, 2, 3])),
                         recompute=str(rng.choice(["none", "selective", "full"])),
                         precision=str(rng.choice(["bf16", "fp16"])), sequence_parallel=bool(rng.integers(2)),
                         overlap_dp=bool(rng.integers(2)), schedule="1f1b", vpp=1))
    table = StrategyTable.from_columns(**{k: [r[k] for r in rows] for k in rows[0]})
    unbounded = dataclasses.replace(CLUSTER, gpu=dataclasses.replace(CLUSTER.gpu, hbm_bytes=float("inf")))
    ok = np.flatnonzero(evaluate(model, unbounded, table, framework=profile)["feasible"])[:n]
    assert ok.size == n
    return model, [canonical_plan(table.row(int(i)), model) for i in ok]


@pytest.mark.parametrize("model, profile", [(MHA, "deepspeed"), (MHA, "deepspeed-flash2"), (GQA, "deepspeed"),
                                            (costmodel.model_preset("mixtral-8x7b"), "deepspeed"),
                                            (costmodel.model_preset("qwen3-30b-a3b"), "deepspeed-flash2")],
                         ids=["mha", "mha-flash2", "gqa", "mixtral", "qwen3-moe"])
def test_round_trip_of_random_feasible_plans(model, profile):
    model, plans = _feasible(model, profile)
    for plan in plans:
        text = WRITERS["megatron-deepspeed"](plan, model, CLUSTER, profile=profile)
        assert read_back("megatron-deepspeed", text, model) == plan, text
        _, _, a = megatron_deepspeed_parts(text)
        assert (a.num_layers, a.hidden_size, a.num_attention_heads, a.seq_length) == (
            model.layers, model.hidden, model.heads, 8192)
        assert (a.num_key_value_heads or a.num_attention_heads) == model.kv_heads
        assert a.use_flash_attn_v2 == (profile == "deepspeed-flash2")
        if model.is_moe:  # every layer an MoE layer: the experts' width is the MLP's; top-k, dropless
            assert (a.num_experts, a.topk, a.expert_interval, a.ffn_hidden_size, a.moe_token_dropping) == (
                [model.experts], model.experts_per_token, 1, model.expert_ffn, False)
    # the sample holds the dimensions the plain DeepSpeed config cannot
    assert any(p["sequence_parallel"] and p["tp"] > 1 for p in plans)
    assert any(p["recompute"] == "selective" for p in plans) and any(p["pp"] > 1 for p in plans)
    assert len({p["zero_stage"] for p in plans}) >= (2 if model.is_moe else 3)
    assert any(p["cp"] > 1 for p in plans) == (model.kv_heads == model.heads)
    assert (len({p["ep"] for p in plans}) >= 3) == model.is_moe


def test_worked_example():
    """Megatron-22B, tp 4 with sequence parallelism, selective recompute, ZeRO-1 on 64 GPUs: dp 64 / 4 = 16, 256
    sequences / (16 x micro-batch 1) = 16 micro-batches a step; GPTModel without DeepSpeed's pipeline engine (pp 1);
    Megatron-DeepSpeed raises without CUDA_DEVICE_MAX_CONNECTIONS=1 under sequence parallelism."""
    out = _cli("export", "--framework", "megatron-deepspeed", "--model", "megatron-22b", "--cluster", "h100x64",
               "--tp", "4", "--sequence-parallel", "--recompute", "selective", "--zero-stage", "1",
               "--global-batch", "256")
    assert out.returncode == 0, out.stderr
    ds, la, a = megatron_deepspeed_parts(out.stdout)
    assert ds == {"train_batch_size": 256, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 16,
                  "bf16": {"enabled": True}, "zero_optimization": {"stage": 1, "overlap_comm": True}}
    assert (la.num_nodes, la.num_gpus) == (8, 8)
    assert "\nCUDA_DEVICE_MAX_CONNECTIONS=1 deepspeed --num_nodes 8 --num_gpus 8 pretrain_gpt.py \\\n" in out.stdout
    assert a.tensor_model_parallel_size == 4 and a.sequence_parallel and a.no_pipeline_parallel
    assert a.recompute_granularity == "selective" and a.zero_stage == 1 and a.deepspeed_config == "ds_config.json"


def test_a_layer_count_the_stages_do_not_divide_is_cut_as_gptmodelpipe_cuts_it():
    """80 layers over 3 stages: DeepSpeed's partition_balanced over GPTModelPipe's layers gives the first 80 mod 3 = 2
    stages one more, 27, 27, 26; the pipeline size alone says so, and the plan reads back with that cut."""
    model = costmodel.model_preset("llama3-70b")
    out = _cli("export", "--framework", "megatron-deepspeed", "--model", "llama3-70b", "--cluster", "h100x64",
               "--tp", "8", "--pp", "3", "--dp", "2", "--stage-layers", "27,27,26", "--global-batch", "64")
    assert out.returncode == 0, out.stderr
    assert read_back("megatron-deepspeed", out.stdout, model)["stage_layers"] == [27, 27, 26]
    other = _cli("export", "--framework", "megatron-deepspeed", "--model", "llama3-70b", "--cluster", "h100x64",
                 "--tp", "8", "--pp", "3", "--dp", "2", "--stage-layers", "26,27,27", "--global-batch", "64")
    assert other.returncode == 2 and "stage_layers: expected 27,27,26 under framework deepspeed" in other.stderr


def test_ulysses_is_written_for_context_parallelism():
    out = _cli("export", "--framework", "deepspeed-flash2", "--model", "megatron-22b", "--seq-len", "32768",
               "--cluster", "h100x64", "--cp", "4", "--zero-stage", "3", "--recompute", "full", "--global-batch", "64")
    assert out.returncode == 0, out.stderr
    ds, _, a = megatron_deepspeed_parts(out.stdout)
    assert a.ds_sequence_parallel_size == 4 and a.tensor_model_parallel_size == 1 and not a.sequence_parallel
    assert (a.recompute_granularity, a.recompute_method, a.recompute_num_layers) == ("full", "uniform", 1)
    # data parallel 64 / 4 = 16: 64 sequences a step are 4 micro-batches of 1
    assert ds["gradient_accumulation_steps"] == 4 and ds["zero_optimization"]["stage"] == 3
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in out.stdout


@pytest.mark.parametrize("model", ["llama3-8b", "megatron-22b", "mixtral-8x7b"])
def test_every_plan_rank_recommends_under_deepspeed_is_written(model):
    """The plans `rank --framework deepspeed` puts first (sequence parallelism, selective recompute, Ulysses where
    the model allows, experts) all launch; the plain DeepSpeed config refuses most of them."""
    out = _cli("rank", "--model", model, "--cluster", "h100x64", "--framework", "deepspeed", "--top", "15", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["rows"]
    assert len(rows) == 15
    plain = 0
    for r in rows:
        flags = ["--model", model, "--cluster", "h100x64", "--dp", str(r["dp"]), "--tp", str(r["tp"]), "--pp",
                 str(r["pp"]), "--cp", str(r["cp"]), "--micro-batch", str(r["micro_batch"]), "--global-batch",
                 str(r["global_batch"]), "--zero-stage", str(r["zero_stage"]), "--recompute", r["recompute"],
                 "--precision", r["precision"], "--ep", str(r["ep"]),
                 *(["--sequence-parallel"] if r["sequence_parallel"] else []),
                 *([] if r["overlap_dp"] else ["--no-overlap-dp"])]
        got = _cli("export", "--framework", "megatron-deepspeed", *flags)
        assert got.returncode == 0, (r, got.stderr)
        plain += _cli("export", "--framework", "deepspeed", *flags).returncode == 0
    assert plain < 15


@pytest.mark.parametrize("flags, argument", [
    (["--model", "deepseek-v3", "--ep", "8"], "model.shared_experts"),
    (["--model", "mixtral-8x7b", "--ep", "8", "--tp", "2", "--dp", "32", "--zero-stage", "3"], "zero_stage"),
    (["--pp", "4", "--stage-layers", "7,9,9,7"], "stage_layers"),
    (["--pp", "4", "--vpp", "2", "--schedule", "interleaved"], "schedule"),
    (["--cp", "2"], "cp"),
])
def test_what_it_cannot_launch_is_one_line(tmp_path, flags, argument):
    out_file = tmp_path / "run.sh"
    base = {"--model": "llama3-8b"}
    argv = [*(x for k, v in base.items() if k not in flags for x in (k, v)), *flags]
    out = _cli("export", "--framework", "megatron-deepspeed", "--cluster", "h100x64", *argv, "--out", str(out_file))
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"plansweep export: error: {argument}: expected "), out.stderr
    assert list(tmp_path.iterdir()) == []


def test_plain_deepspeed_refusals_name_the_launch_that_takes_them():
    out = _cli("export", "--framework", "deepspeed", "--model", "llama3-8b", "--cluster", "h100x64", "--recompute",
               "selective")
    assert out.returncode == 2 and "export --framework megatron-deepspeed" in out.stderr


def test_an_moe_pipeline_with_tensor_parallelism_turns_off_the_partitioned_hand_offs():
    """GPTModelPipe asserts pipeline.pipe_partitioned and grad_partitioned off for an MoE model with tp and pp > 1
    (DeepSpeed's default is on)."""
    out = _cli("export", "--framework", "megatron-deepspeed", "--model", "mixtral-8x7b", "--cluster", "h100x64",
               "--tp", "2", "--pp", "4", "--dp", "8", "--ep", "8", "--zero-stage", "1")
    assert out.returncode == 0, out.stderr
    ds, _, a = megatron_deepspeed_parts(out.stdout)
    assert ds["pipeline"] == {"pipe_partitioned": False, "grad_partitioned": False}
    assert a.moe_expert_parallel_size == 8 and a.num_experts == [8] and a.topk == 2
    dense = _cli("export", "--framework", "megatron-deepspeed", "--model", "llama3-8b", "--cluster", "h100x64",
                 "--tp", "2", "--pp", "4", "--zero-stage", "1")
    assert "pipeline" not in megatron_deepspeed_parts(dense.stdout)[0]
