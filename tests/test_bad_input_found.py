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
    fields = {"layers": 4, "hidden": 1024, "heads": 8, "seq_len": 2048, "vocab": 32000, "activation": "swiglu",
              "norm": "rmsnorm", "bias": False, "tied_embeddings": False, "learned_positions": False}
    model.write_text(json.dumps({"name": "x", **fields}))
    cluster = tmp_path / "c.json"
    cluster.write_text(json.dumps({"gpu": "h100", "num_gpus": 8, "name": "c\recho INJECTED"}))
    res = cli("export", "--framework", framework, "--model", str(model), "--cluster", str(cluster))
    assert res.returncode == 0, res.stderr
    first = res.stdout.splitlines()[0]
    assert first.startswith("# plansweep export: x on c\\recho INJECTED")
    assert not any(line.startswith(("touch", "echo")) for line in res.stdout.splitlines())
    # a model's name is refused where it holds a control character (a damaged file), before anything is written
    model.write_text(json.dumps({"name": "x\ntouch PWNED #", **fields}))
    one_error_line(cli("export", "--framework", framework, "--model", str(model), "--cluster", str(cluster)),
                   "name: expected a string of printable characters, got 'x\\ntouch PWNED #'")


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
     "hidden_activation: expected one of"),
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


# A second pass, over model files (HuggingFace configs, plansweep's own, Calculon's)

NATIVE = {"layers": 4, "hidden": 1024, "heads": 8, "seq_len": 2048, "vocab": 32000}
QWEN3_MOE = {"model_type": "qwen3_moe", "hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 4,
             "num_hidden_layers": 8, "intermediate_size": 6144, "vocab_size": 32000, "max_position_embeddings": 4096,
             "hidden_act": "silu", "num_experts": 16, "num_experts_per_tok": 2, "moe_intermediate_size": 512}


def _model_file(tmp_path, text: str, suffix: str = ".json"):
    f = tmp_path / f"m{suffix}"
    f.write_text(text)
    return ("--model", str(f), "--cluster", "h100x8", "--global-batch", "64")


@pytest.mark.parametrize("text, suffix, needle", [
    # a traceback: the MLP's ffn_hidden was checked only for a transformer, then added to an int
    (json.dumps({"layers": 4, "hidden": 1024, "kind": "mlp", "ffn_hidden": "abc"}), ".json",
     "ffn_hidden: expected an integer >= 1, got 'abc'"),
    # priced: an MLP's tokens a sample multiplied tokens/s by 5 (samples/s unchanged)
    (json.dumps({"layers": 4, "hidden": 1024, "kind": "mlp", "seq_len": 5}), ".json",
     "seq_len: expected 1 for kind=mlp (an MLP's sample is one token), got 5"),
    # tracebacks: a YAML key that is a number sorted against strings; a name that is not a string reached Arrow
    ("layers: 4\nhidden: 1024\n1: 2\n", ".yaml", "expected keys that are strings (field names), got 1"),
    (json.dumps({**NATIVE, "name": 5}), ".json", "name: expected a string of printable characters, got 5"),
    ("name: 2024-01-01\nlayers: 4\nhidden: 1024\nheads: 8\nseq_len: 2048\nvocab: 32000\n", ".yaml",
     "name: expected a string of printable characters, got datetime.date(2024, 1, 1)"),
    # priced: a key named twice kept its last value (JSON and YAML alike)
    ('{"layers": 4, "hidden": 1024, "heads": 8, "seq_len": 2048, "vocab": 32000, "layers": 1}', ".json",
     "expected a file whose objects name each key once, got"),
    ("layers: 4\nhidden: 1024\nheads: 8\nseq_len: 2048\nvocab: 32000\nhidden: 64\n", ".yaml", "'hidden' twice"),
    # priced: a plansweep model file without its sequence or heads trained 1-token sequences on 1 head
    (json.dumps({"layers": 4, "hidden": 1024, "heads": 8, "vocab": 32000}), ".json",
     "seq_len: expected a value (a model file of kind transformer must set it), got 'missing'"),
    ("{}", ".json", "layers: expected a value (a model file of kind transformer must set it), got 'missing'"),
    ("null", ".json", "expected a file holding one object (mapping), got"),
])
def test_a_damaged_model_file_is_one_line(tmp_path, text, suffix, needle):
    one_error_line(cli("evaluate", *_model_file(tmp_path, text, suffix)), needle)


def test_a_yaml_merge_key_is_not_a_key_named_twice(tmp_path):
    # YAML's << merges a mapping whose keys the node may override: not a duplicate
    f = tmp_path / "m.yaml"
    f.write_text("base: &b\n  layers: 4\nmodel:\n  <<: *b\n  layers: 8\n")
    from cli._specs import read_mapping

    assert read_mapping(str(f), "--model") == {"base": {"layers": 4}, "model": {"layers": 8}}


@pytest.mark.parametrize("config, needle", [
    # priced as full attention: sliding layers without a window, a layer_types that is no list
    ({**LLAMA_CONFIG, "layer_types": ["sliding_attention"] * 4},
     "sliding_window: expected an integer >= 1 where layer_types names sliding_attention layers, got None"),
    ({**LLAMA_CONFIG, "layer_types": "sliding_attention"}, "layer_types: expected a list of num_hidden_layers=4"),
    ({**QWEN3_MOE, "use_sliding_window": True, "max_window_layers": 4, "sliding_window": None},
     "sliding_window: expected an integer >= 1 where use_sliding_window is true, got None"),
    # named by the model's own fields (moe_layer_freq, dense_layers, experts=...) instead of the config's keys
    ({**QWEN3_MOE, "decoder_sparse_step": 9}, "decoder_sparse_step: expected at most 8, the layers after the dense "
     "ones (num_hidden_layers=8 less mlp_only_layers=0), got 9"),
    ({**QWEN3_MOE, "mlp_only_layers": list(range(8))}, "mlp_only_layers: expected fewer than num_hidden_layers=8"),
    ({**QWEN3_MOE, "mlp_only_layers": [False]}, "mlp_only_layers: expected the first layers"),
    ({**DEEPSEEK_CONFIG, "first_k_dense_replace": True}, "first_k_dense_replace: expected an integer in [0, "),
    ({**DEEPSEEK_CONFIG, "n_shared_experts": True}, "n_shared_experts: expected an integer >= 0, got True"),
    ({**DEEPSEEK_CONFIG, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
      "num_key_value_heads": 8}, "num_key_value_heads: expected num_attention_heads=16 (MLA gives every head"),
    ({**GPT2_CONFIG, "activation_function": "bogus"}, "activation_function: expected one of"),
    ({"model_type": "gemma3", "text_config": {**LLAMA_CONFIG, "model_type": "gemma3_text", "num_key_value_heads": 3,
                                              "hidden_activation": "gelu_pytorch_tanh"}},
     "text_config num_key_value_heads: expected a divisor of num_attention_heads=16, got 3"),
    ({k: v for k, v in LLAMA_CONFIG.items() if k != "model_type"},
     "model_type: expected a value (a HuggingFace config.json names its family; or architectures), got 'missing'"),
])
def test_a_damaged_huggingface_config_names_its_own_key(tmp_path, config, needle):
    one_error_line(cli("evaluate", *_model_file(tmp_path, json.dumps(config))), needle)


CALCULON_MODEL = {"hidden": 6144, "feedforward": 24576, "seq_size": 2048, "attn_heads": 64, "attn_size": 96,
                  "num_blocks": 48}


@pytest.mark.parametrize("change, needle", [
    ({"attn_heads": 2**31}, "attn_heads: expected an integer of at most 2,147,483,647, got 2147483648"),
    ({"attn_heads": None}, "attn_heads: expected a value (the config must set it), got 'missing'"),
    ({"vocab": 50000}, "expected Calculon model keys hidden, feedforward, seq_size, attn_heads, attn_size, "
     "num_blocks, got 'vocab'"),
    ({"num_blocks": 0}, "num_blocks: expected an integer >= 1, got 0"),
])
def test_a_damaged_calculon_model_names_its_own_key(tmp_path, change, needle):
    model = {k: v for k, v in {**CALCULON_MODEL, **change}.items() if v is not None}
    one_error_line(cli("evaluate", *_model_file(tmp_path, json.dumps(model))), needle)


def test_a_directory_or_an_empty_model_word_is_named(tmp_path):
    (d := tmp_path / "d.json").mkdir()
    one_error_line(cli("evaluate", "--model", str(d)), "--model: expected a JSON or YAML file, got")
    one_error_line(cli("evaluate", "--model", ""), "--model: expected one of gpt3-175b")
