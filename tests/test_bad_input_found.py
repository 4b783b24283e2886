"""Inputs a fuzzing pass over the command line found mishandled: each is now one line and exit code 2, or written
safely."""

from __future__ import annotations

import json

import pytest

from tests.in_process import cli, one_error_line


@pytest.mark.parametrize("command", ["evaluate", "export"])
@pytest.mark.parametrize("pp, kinds", [(2, "[full, none, full]"), (1, "[full, none]")])
def test_a_stage_recompute_list_of_another_length_than_pp(tmp_path, command, pp, kinds):
    # longer than pp: a numpy broadcast traceback; at pp 1 the extra names were dropped without a word
    f = tmp_path / "s.yaml"
    f.write_text(f"pp: {pp}\nstage_recompute: {kinds}\n")
    extra = ("--framework", "megatron-core") if command == "export" else ()
    one_error_line(cli(command, *extra, "--model", "llama3-8b", "--cluster", "h100x64", "--strategy", str(f)),
                   f"stage_recompute: expected pp={pp} names, one per stage")


@pytest.mark.parametrize("command", ["rank", "evaluate"])
def test_a_sensitivity_factor_past_the_range_is_refused(command):
    # rank divided by a zero throughput; evaluate printed inf with overflow warnings
    plan = ("--top", "3") if command == "rank" else ("--tp", "2", "--pp", "2")
    one_error_line(cli(command, "--model", "llama3-8b", "--cluster", "h100x64", *plan, "--sensitivity",
                       "compute=1e-308"), "factors in [0.001, 1000], got 'compute=1e-308'")


@pytest.mark.parametrize("framework", ["megatron-core", "megatron-deepspeed"])
def test_a_name_with_a_newline_stays_inside_the_launch_scripts_comment(tmp_path, framework):
    model = tmp_path / "m.json"
    model.write_text(json.dumps({"name": "x\ntouch PWNED #", "layers": 4, "hidden": 1024, "heads": 8,
                                 "seq_len": 2048, "vocab": 32000, "activation": "swiglu", "norm": "rmsnorm",
                                 "bias": False, "tied_embeddings": False, "learned_positions": False}))
    cluster = tmp_path / "c.json"
    cluster.write_text(json.dumps({"gpu": "h100", "num_gpus": 8, "name": "c\recho INJECTED"}))
    res = cli("export", "--framework", framework, "--model", str(model), "--cluster", str(cluster))
    assert res.returncode == 0, res.stderr
    first = res.stdout.splitlines()[0]
    assert first.startswith("# plansweep export: x\\ntouch PWNED # on c\\recho INJECTED")
    assert not any(line.startswith(("touch", "echo")) for line in res.stdout.splitlines())


@pytest.mark.parametrize("config, key", [
    ({"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024, "vocab_size": 50257,
      "activation_function": "silu"}, "activation_function"),
    ({"model_type": "gpt_neox", "hidden_size": 2560, "num_attention_heads": 32, "num_hidden_layers": 32,
      "intermediate_size": 10240, "vocab_size": 50432, "max_position_embeddings": 2048, "hidden_act": "silu"},
     "hidden_act"),
])
def test_silu_in_a_two_matrix_mlp_is_refused_not_priced_gated(tmp_path, config, key):
    # GPT-2 and GPT-NeoX's MLPs have two matrices: a SiLU one was priced (and exported) as SwiGLU's three
    f = tmp_path / "config.json"
    f.write_text(json.dumps(config))
    one_error_line(cli("evaluate", "--model", str(f), "--cluster", "h100x8"), f"{key}: expected a GELU or ReLU")


@pytest.mark.parametrize("where, entry, needle", [
    ("links", {"between": ["a", "b"], "GBps": 25, "latency_us": float("inf")},
     "links[0].latency_us: expected a finite number >= 0, got inf"),
    ("pool", {"inter_latency_us": float("inf")}, "pools[0].inter_latency_us: expected a finite number >= 0"),
])
def test_a_mixed_clusters_infinite_numbers_are_refused(tmp_path, where, entry, needle):
    pools = [{"name": "a", "gpu": "a100", "nodes": 2}, {"name": "b", "gpu": "h100", "nodes": 2}]
    links = []
    if where == "pool":
        pools[0].update(entry)
    else:
        links.append(entry)
    f = tmp_path / "c.yaml"
    f.write_text(json.dumps({"name": "mixed", "pools": pools, "links": links}).replace("Infinity", ".inf"))
    one_error_line(cli("evaluate", "--model", "llama3-8b", "--cluster", str(f), "--tp", "4", "--pp", "2"), needle)


@pytest.mark.parametrize("framework, flags, needle", [
    ("megatron-core", ("--pp", "2", "--precision", "fp16"),
     "precision: expected bf16 or fp8 with ep > 1 under framework megatron-core"),
    ("megatron-core-a2a-overlap", ("--pp", "2"),
     "vpp: expected 2 or more (interleaved) with pp=2 under framework megatron-core-a2a-overlap"),
])
def test_evaluate_refuses_what_megatron_lm_asserts_against_as_export_does(framework, flags, needle):
    # evaluate priced these and export refused them: Megatron-LM core_v0.15.0 asserts against fp16 with expert
    # parallelism (training/arguments.py) and against its EP A2A overlap at pp > 1 without virtual stages
    # (transformer_config.py)
    one_error_line(cli("evaluate", "--framework", framework, "--model", "qwen3-30b-a3b", "--cluster", "h100x64",
                       "--tp", "2", "--ep", "8", "--recompute", "selective", *flags), needle)


FSDP_PLAN = ("--model", "llama3-8b", "--cluster", "h100x64", "--dp", "64", "--zero-stage", "3", "--global-batch", "256")


def test_an_overlap_the_framework_cannot_run_is_refused_not_priced_as_its_own(tmp_path):
    # evaluate priced --no-overlap-dp under fsdp2 as the overlap torchtitan always runs, and export refused the plan
    one_error_line(cli("evaluate", "--framework", "fsdp2", *FSDP_PLAN, "--no-overlap-dp"),
                   "--no-overlap-dp: expected true under framework fsdp2 (it always overlaps")
    f = tmp_path / "s.yaml"
    f.write_text("tp: 1\noverlap_dp: true\n")  # Megatron-LM of 2021 has no overlapped gradient reduction
    one_error_line(cli("evaluate", "--framework", "megatron-2021", "--model", "llama3-8b", "--cluster", "h100x64",
                       "--strategy", str(f)), f"--strategy {f} overlap_dp: expected false under framework megatron-2021")
    one_error_line(cli("rank", "--framework", "fsdp2", "--model", "llama3-8b", "--cluster", "h100x64", "--top", "2",
                       "--overlap-dp", "false"), "--overlap-dp: expected true under framework fsdp2")
    # side by side: the framework that cannot is refused in its entry, the other prices the plan without overlap
    res = cli("evaluate", "--framework", "fsdp2,megatron-core", *FSDP_PLAN, "--no-overlap-dp", "--json")
    entries = {e["framework"]: e for e in json.loads(res.stdout)["frameworks"]}
    assert res.returncode == 0 and "always overlaps" in entries["fsdp2"]["refused"]
    on = cli("evaluate", "--framework", "megatron-core", *FSDP_PLAN, "--json")
    overlapped = json.loads(on.stdout)["metrics"]["step_time_s"]
    assert entries["megatron-core"]["metrics"]["step_time_s"] > overlapped  # the exchange exposed, not hidden


def test_torchtitan_export_takes_sequence_parallelism_at_tp_1_as_evaluate_prices_it():
    # at tp 1 there is no sequence to shard: evaluate priced the plan as without it, export refused it
    plan = ("--framework", "fsdp2", *FSDP_PLAN, "--sequence-parallel")
    with_sp, without = (json.loads(cli("evaluate", *p, "--json").stdout)["metrics"]["step_time_s"]
                        for p in (plan, plan[:-1]))
    assert with_sp == without
    res = cli("export", *plan)
    assert res.returncode == 0 and "tensor_parallel_degree = 1" in res.stdout


LLAMA_CONFIG = {"model_type": "llama", "hidden_size": 2048, "num_attention_heads": 16, "num_hidden_layers": 4,
                "intermediate_size": 8192, "vocab_size": 32000, "max_position_embeddings": 4096, "hidden_act": "silu"}
GPT2_CONFIG = {"model_type": "gpt2", "n_embd": 1024, "n_head": 16, "n_layer": 4, "n_positions": 1024,
               "vocab_size": 50257}
DEEPSEEK_CONFIG = {"model_type": "deepseek_v3", "hidden_size": 2048, "num_attention_heads": 16, "num_hidden_layers": 4,
                   "intermediate_size": 8192, "vocab_size": 32000, "max_position_embeddings": 4096,
                   "hidden_act": "silu", "n_routed_experts": 16, "num_experts_per_tok": 2, "moe_intermediate_size": 512}


@pytest.mark.parametrize("config, needle", [
    # an unknown layer type was read as full attention
    ({**LLAMA_CONFIG, "model_type": "qwen3", "sliding_window": 512,
      "layer_types": ["full_attention", "sliding_attention", "linear_attention", "full_attention"]},
     "layer_types: expected entries full_attention or sliding_attention, got 'linear_attention'"),
    # a string "false" was read as biases on every linear layer
    ({**LLAMA_CONFIG, "model_type": "nemotron", "hidden_act": "relu2", "attention_bias": "false"},
     "attention_bias: expected true or false, got 'false'"),
    # 0 was replaced by the defaults (4 x hidden; one group)
    ({**GPT2_CONFIG, "n_inner": 0}, "n_inner: expected an integer >= 1, got 0"),
    ({**DEEPSEEK_CONFIG, "n_group": 0}, "n_group: expected an integer >= 1, got 0"),
    ({**LLAMA_CONFIG, "model_type": "gemma2", "hidden_act": None, "hidden_activation": ""},
     "hidden_act: expected one of"),
])
def test_a_damaged_huggingface_value_is_refused_not_replaced(tmp_path, config, needle):
    f = tmp_path / "config.json"
    f.write_text(json.dumps(config))
    one_error_line(cli("evaluate", "--model", str(f), "--cluster", "h100x8"), needle)


def test_a_huggingface_configs_null_values_keep_their_defaults():
    # null is HuggingFace's own "use the default": GPT-2's MLP 4 x n_embd, one routing group
    for config, field, want in (({**GPT2_CONFIG, "n_inner": None}, "ffn_hidden", 4 * 1024),
                                ({**DEEPSEEK_CONFIG, "n_group": None, "topk_group": None}, "router_groups", 1)):
        from costmodel._model_files import model_from_mapping

        assert getattr(model_from_mapping(config, "m"), field) == want
