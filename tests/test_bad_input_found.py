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
     "links[0].latency_us: expected a number in [0, 1e+06], got inf"),
    ("pool", {"inter_latency_us": float("inf")}, "pools[0].inter_latency_us: expected a number in [0, 1e+06]"),
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


# ---- cluster, strategy, plan and --hardware files ----------------------------------------------------------------
CLUSTER = "gpu: h100\nnum_gpus: 16\ngpus_per_node: 8\n"
MIXED = ("pools:\n  - {name: a100, gpu: a100, nodes: 2}\n  - {name: h100, gpu: h100, nodes: 2}\n"
         "links:\n  - {between: [a100, h100], GBps: 25}\n")


def _write(tmp_path, name: str, text: str) -> str:
    f = tmp_path / name
    f.write_text(text)
    return str(f)


@pytest.mark.parametrize("text, needle", [
    (CLUSTER + "1: 2\nzzz: 3\n", "--cluster: expected fields among"),  # keys of two types: sorting them raised
    (MIXED + "1: 2\nzzz: 3\n", "cluster: expected keys among name, pools, links"),
])
def test_unknown_keys_of_mixed_types_are_named_not_a_traceback(tmp_path, text, needle):
    one_error_line(cli("evaluate", "--model", "llama3-8b", "--cluster", _write(tmp_path, "c.yaml", text)), needle)


def test_a_strategy_with_unknown_keys_of_mixed_types(tmp_path):
    f = _write(tmp_path, "s.yaml", "tp: 2\n1: 2\nzzz: 3\n")
    one_error_line(cli("evaluate", "--model", "llama3-8b", "--cluster", "h100x16", "--strategy", f),
                   "expected strategy keys among")


def _alias_chain(levels: int, width: int) -> str:
    """A YAML document whose last key stands for width ** levels values through aliases, in levels + 1 lines."""
    lines = [f"l0: &l0 [{', '.join(['x'] * width)}]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + f"\ngpu: [{', '.join([f'*l{levels - 1}'] * width)}]\n"


@pytest.mark.parametrize("argument", ["--cluster", "--strategy"])
def test_a_yaml_alias_chain_is_refused_before_anything_walks_it(tmp_path, argument):
    # 9 ** 9 (387 million) values in 10 lines: a check or a message walking it hung, then ran out of memory
    f = _write(tmp_path, "bomb.yaml", "num_gpus: 16\n" + _alias_chain(9, 9))
    spec = ["--cluster", f] if argument == "--cluster" else ["--cluster", "h100x16", "--strategy", f]
    one_error_line(cli("evaluate", "--model", "llama3-8b", *spec),
                   f"{argument}: expected a file of at most 1,000,000 values once its YAML aliases are expanded")


def test_a_yaml_merge_key_is_still_read(tmp_path):
    # aliases a file uses as written (a merge of shared fields) stay well under the bound
    f = _write(tmp_path, "c.yaml", "base: &b {gpu: h100, gpus_per_node: 8}\n")
    one_error_line(cli("evaluate", "--model", "llama3-8b", "--cluster", f), "--cluster: expected fields among")
    g = _write(tmp_path, "m.yaml", "pools:\n  - &p {name: a, gpu: a100, nodes: 2}\n  - {<<: *p, name: b, gpu: h100}\n"
               "links:\n  - {between: [a, b], GBps: 25}\n")
    assert cli("evaluate", "--model", "llama3-8b", "--cluster", g, "--strategy",
               _write(tmp_path, "p.yaml", "global_batch: 64\nstages:\n  - {pool: a, dp: 2, tp: 8, layers: 16}\n"
                      "  - {pool: b, dp: 2, tp: 8, layers: 16}\n")).returncode == 0


def test_a_long_value_in_a_message_is_cut_short():
    from costmodel import InputError
    from costmodel._errors import GOT_CHARS, bounded_repr

    assert bounded_repr([1, (2,), {"a": {3}}, frozenset()]) == repr([1, (2,), {"a": {3}}, frozenset()])
    chain = ["x"] * 9
    for _ in range(8):
        chain = [chain] * 9  # 9 ** 9 strings, shared
    text = str(InputError("f", "a number", chain))
    assert len(text) <= len("f: expected a number, got ") + GOT_CHARS + 3 and text.endswith("...")


@pytest.mark.parametrize("text, needle", [
    ("[" * 100_000 + "]" * 100_000, "--hardware: expected JSON written by plansweep calibrate, got"),
    ('{"h100": {"link_eff": 0.5}, "H100-SXM5-80GB": {"link_eff": 0.6}}', "expected each GPU type once, got"),
    ('{"h100": {"link_eff": 0.5, "link_eff": 0.6}}', "'link_eff' twice"),
    ('{"h100": {"gemm_half_dim": 1e308}}', "h100.gemm_half_dim: expected a number in (0, 65536], got 1e+308"),
    ('{"h100": {"scaleout_latency_s": 1e308}}', "h100.scaleout_latency_s: expected a number of seconds in [0, 1]"),
    ('{"h100": {"kernel_overhead_s": 2}}', "h100.kernel_overhead_s: expected a number of seconds in [0, 1], got 2"),
])
def test_a_damaged_hardware_file_is_one_line(tmp_path, text, needle):
    # a deep nest raised RecursionError; a GPU named twice (or a key) kept the last; a step time overflowed to inf
    one_error_line(cli("evaluate", "--model", "llama3-8b", "--cluster", "h100x16", "--hardware",
                       _write(tmp_path, "h.json", text)), needle)


def test_a_hardware_path_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path):
    import os

    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # opening it to read would wait for a writer
    one_error_line(cli("evaluate", "--model", "llama3-8b", "--cluster", "h100x16", "--hardware", str(fifo)),
                   "not a regular file")


@pytest.mark.parametrize("text, needle", [
    (CLUSTER + "scaleup_GBps: 1.0e+308\n", "scaleup_GBps: expected a number in (0, 1e+06]"),
    (MIXED.replace("GBps: 25", "GBps: 1.0e+308"), "links[0].GBps: expected a number in (0, 1e+06], got 1e+308"),
    (MIXED.replace("GBps: 25", "GBps: 25, latency_us: 1.0e+308"),
     "links[0].latency_us: expected a number in [0, 1e+06]"),
    (MIXED.replace("nodes: 2}\n  - {name: h100", "nodes: 2, intra_GBps: 1.0e+308}\n  - {name: h100"),
     "pools[0].intra_GBps: expected a number in (0, 1e+06]"),
    ("gpu: h100\nnum_gpus: 16\ngpus_per_node: 1000000000000000000000000000000\n",
     "gpus_per_node: expected an integer in [1, 2,147,483,647]"),
    ("name: [1]\n" + MIXED, "name: expected a name (a string), got [1]"),
])
def test_a_cluster_files_number_past_any_machine_is_refused(tmp_path, text, needle):
    # each was accepted: 1e308 GB/s times 1e9 is inf, priced as an infinite link or an inf-second step
    one_error_line(cli("evaluate", "--model", "llama3-8b", "--cluster", _write(tmp_path, "c.yaml", text)), needle)


def test_a_sweep_refused_at_its_cluster_writes_no_run_directory(tmp_path):
    out = tmp_path / "run"
    c = _write(tmp_path, "c.yaml", MIXED.replace("GBps: 25", "GBps: 1.0e+308"))
    one_error_line(cli("sweep", "--model", "llama3-8b", "--cluster", c, "--out", str(out), "--in-process"),
                   "--cluster")
    assert not out.exists()


def test_a_gpu_count_after_at_is_for_calculon_files_only(tmp_path):
    c = _write(tmp_path, "c.json", json.dumps({"gpu": "h100", "num_gpus": 16}))
    one_error_line(cli("evaluate", "--model", "llama3-8b", "--cluster", c + "@999"),
                   "--cluster: expected FILE@GPUS only for a Calculon system file")


def test_a_calculon_systems_gpu_count_of_true_is_named(tmp_path):
    system = {"matrix": {"float16": {"tflops": 989}}, "mem1": {"GiB": 80, "GBps": 3350},
              "networks": [{"size": 8, "bandwidth": 450, "latency": 5e-6}, {"size": 1024, "bandwidth": 50,
                                                                             "latency": 1e-5}], "num_gpus": True}
    c = _write(tmp_path, "sys.json", json.dumps(system))
    one_error_line(cli("evaluate", "--model", "llama3-8b", "--cluster", c), "GPUs (num_gpus, or FILE@GPUS): expected "
                   "an integer in [1, 2,147,483,647], got True")


@pytest.mark.parametrize("text, needle", [
    ("tp: 3\npp: 2\ndp: 2\nglobal_batch: 64\n", "--strategy {f} tp: expected a divisor of heads=32 and kv_heads=8"),
    ("tp: 4\npp: 2\ndp: 2\nglobal_batch: 64\nstage_layers: [10, 10]\n",
     "--strategy {f} stage_layers: expected pp=2 counts >= 1 summing to layers=32, got [10, 10]"),
    ("tp: 4\npp: 2\ndp: 2\nglobal_batch: 64\nstage_layers: [true, 31]\n",
     "--strategy {f} stage_layers: expected integers per stage"),
    ("tp: 4\npp: 2\ndp: 2\nglobal_batch: 64\nstage_recompute: [zzz, none]\n",
     "--strategy {f} stage_recompute: expected one of none, selective, full, got 'zzz'"),
    ("tp: 4\npp: 2\ndp: 2\nglobal_batch: 64\nrecompute_modules: ''\n",
     "--strategy {f} recompute_modules: expected module names"),
])
@pytest.mark.parametrize("command", ["evaluate", "export", "replan"])
def test_a_strategy_files_refusal_names_the_file_and_its_key(tmp_path, command, text, needle):
    # named only the key (or the flag, or another key) before; replan priced stage_layers that did not sum
    f = _write(tmp_path, "s.yaml", text)
    extra = {"export": ("--framework", "megatron-core"), "replan": ("--lost", "1")}.get(command, ())
    one_error_line(cli(command, "--model", "llama3-8b", "--cluster", "h100x16", "--strategy", f, *extra),
                   needle.format(f=f))


def test_replan_prices_the_plans_own_stage_cut(tmp_path):
    # the re-plans are measured against the plan as given: an uneven cut is a slower plan than the even one
    def kept(layers: str) -> float:
        f = _write(tmp_path, f"s{layers}.yaml", f"tp: 4\npp: 2\ndp: 2\nglobal_batch: 64\nstage_layers: [{layers}]\n")
        r = cli("replan", "--model", "llama3-8b", "--cluster", "h100x16", "--strategy", f, "--lost", "1",
                "--policies", "re-layout")
        assert r.returncode == 0, r.stderr
        return float(r.stdout.splitlines()[-1].split("%")[0].split()[-1])

    assert kept("4, 28") > kept("16, 16")


@pytest.mark.parametrize("text, needle", [
    ("schedule: 1\n", "--strategy {f} schedule: expected one of"),
    ("schedule: true\n", "--strategy {f} schedule: expected one of"),
    ("pp: 4\n", "--strategy {f} pp: expected the number of stages listed, 2 (or no pp), got 4"),
    ("", "stages[0].recompute: expected one of none, selective, full, got 1"),
])
def test_a_placed_plans_names_and_pp_are_checked(tmp_path, text, needle):
    # an int schedule was read as the table's code (1: 1f1b); pp beside the stages was overridden without a word
    stages = ("stages:\n  - {pool: a100, dp: 2, tp: 8, layers: 16" + (", recompute: 1" if not text else "") + "}\n"
              "  - {pool: h100, dp: 2, tp: 8, layers: 16}\n")
    f = _write(tmp_path, "p.yaml", "global_batch: 64\n" + text + stages)
    one_error_line(cli("evaluate", "--model", "llama3-8b", "--cluster", _write(tmp_path, "c.yaml", MIXED),
                       "--strategy", f), needle.format(f=f))


def test_an_efficiency_of_almost_nothing_is_refused(tmp_path):
    # 1e-300 of a peak was in (0, 1]: every time overflowed to inf, printed as an out-of-memory plan with exit code 0
    one_error_line(cli("evaluate", "--model", "llama3-8b", "--cluster", "h100x16", "--hardware",
                       _write(tmp_path, "h.json", '{"h100": {"gemm_eff_max": 1e-300}}')),
                   "h100.gemm_eff_max: expected a number in [0.001, 1], got 1e-300")
