"""--model from a HuggingFace config.json or a Calculon model file, --cluster from a Calculon system file,
--strategy from a Calculon execution file; no transformers needed."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from cli._specs import load_model, with_seq_len
from costmodel import (
    InputError,
    StrategyTable,
    cluster_preset,
    evaluate,
    from_hf_config,
    model_from_mapping,
    model_preset,
)

DATA = Path(__file__).parent / "data" / "models"


def _same_metrics(a, b):
    cluster = cluster_preset("h100x64")
    table = StrategyTable.from_columns(dp=[8, 4, 2], tp=[8, 4, 4], pp=[1, 4, 8], micro_batch=1, global_batch=256,
                                       recompute=["none", "selective", "full"], sequence_parallel=True, zero_stage=1)
    ma, mb = evaluate(a, cluster, table), evaluate(b, cluster, table)
    for k in ma:
        np.testing.assert_array_equal(ma[k], mb[k], err_msg=k)


def test_llama3_8b_config_is_the_preset():
    model = load_model(str(DATA / "llama3-8b.config.json"))
    assert dataclasses.replace(model, name="llama3-8b") == model_preset("llama3-8b")
    _same_metrics(model, model_preset("llama3-8b"))


def test_qwen25_7b_config_equals_the_hand_written_file():
    hf = load_model(str(DATA / "qwen2.5-7b.config.json"))
    own = load_model(str(DATA / "qwen2.5-7b.plansweep.json"))
    assert dataclasses.replace(hf, name=own.name) == own
    assert (hf.layers, hf.hidden, hf.heads, hf.kv_heads, hf.ffn_hidden, hf.vocab) == (28, 3584, 28, 4, 18944, 152064)
    assert hf.activation == "swiglu" and not hf.tied_embeddings
    _same_metrics(hf, own)


def test_gpt2_config_counts_124m_parameters():
    # GPT-2 small: 124,439,808 parameters with its tied head (the published count, 124M).
    model = load_model(str(DATA / "gpt2.config.json"))
    assert (model.layers, model.hidden, model.heads, model.ffn_hidden, model.seq_len) == (12, 768, 12, 3072, 1024)
    assert model.num_params() == 124_439_808


def test_calculon_model_file_is_megatron_22b():
    model = load_model(str(DATA / "megatron-22B.calculon.json"))
    assert dataclasses.replace(model, name="megatron-22b") == model_preset("megatron-22b")


@pytest.mark.parametrize("change,needle", [
    ({"model_type": "bert"}, "--model model_type: expected one of llama"),
    ({"num_local_experts": 8}, "--model num_local_experts: expected a dense model"),
    ({"hidden_act": "relu"}, "--model hidden_act: expected silu"),
    ({"num_hidden_layers": 0}, "--model num_hidden_layers: expected an integer >= 1"),
    ({"tie_word_embeddings": "false"}, "--model tie_word_embeddings: expected true or false, got 'false'"),
])
def test_bad_hf_configs_name_the_key(change, needle):
    data = {**json.loads((DATA / "llama3-8b.config.json").read_text()), **change}
    with pytest.raises(InputError) as err:
        from_hf_config(data, "x")
    assert needle in str(err.value)


def test_a_null_tie_word_embeddings_reads_as_absent():
    """Some configs on the Hub write null: the family's default (untied for Llama), as when the key is absent."""
    data = json.loads((DATA / "llama3-8b.config.json").read_text())
    data.pop("tie_word_embeddings", None)
    assert from_hf_config({**data, "tie_word_embeddings": None}, "x") == from_hf_config(data, "x")
    assert not from_hf_config(data, "x").tied_embeddings


def test_unknown_plansweep_field_still_refused():
    with pytest.raises(InputError, match="--model: expected fields among"):
        model_from_mapping({"layers": 2, "hidden": 64, "colour": "blue"}, "x")


def test_calculon_system_file_by_hand():
    from costmodel._model_files import cluster_from_calculon

    data = json.loads((DATA / "a100_80g.calculon-system.json").read_text())
    c = cluster_from_calculon(data, 64, "a100_80g")
    g = c.gpu
    assert g.peak_flops == (312e12, 312e12, 0.0)  # no float8 entry: fp8 runs as bf16
    assert g.hbm_bytes == 80 * 2**30 and g.hbm_Bps == 2048e9
    assert (c.nodes, c.gpus_per_node) == (8, 8)
    assert (c.scaleup_Bps, c.scaleout_Bps) == (300e9, 25e9)
    assert (c.scaleup_latency_s, c.scaleout_latency_s) == (1e-5, 2e-5)
    # plansweep's own efficiency constants of the matching preset, not Calculon's tables
    from costmodel import gpu_preset

    ref = gpu_preset("a100")
    assert (g.gemm_eff_max, g.hbm_eff, g.link_eff) == (ref.gemm_eff_max, ref.hbm_eff, ref.link_eff)
    with pytest.raises(InputError, match="GPUs: expected a multiple of the file's 8 GPUs per node"):
        cluster_from_calculon(data, 12, "x")
    with pytest.raises(InputError, match="--cluster: expected a Calculon system file"):
        cluster_from_calculon({k: v for k, v in data.items() if k != "networks"}, 8, "x")


def test_calculon_system_on_the_command_line(capsys):
    from cli import main

    path = str(DATA / "a100_80g.calculon-system.json")
    assert main(["evaluate", "--model", "gpt3-175b", "--cluster", path + "@1024", "--tp", "8", "--pp", "8",
                 "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["strategy"]["dp"] == 16  # 1024 GPUs from the @1024
    assert main(["evaluate", "--cluster", path]) == 2
    err = capsys.readouterr().err.strip()
    assert "--cluster: expected a Calculon system file with its GPU count, FILE.json@GPUS" in err
    assert len(err.splitlines()) == 1


# ---- Calculon execution files as --strategy ------------------------------------------------
EXAMPLE_EXE = DATA / "3072_t4_p64_d12_mbs4_full.calculon-execution.json"  # Calculon's README example run
SEQSEL_EXE = DATA / "megatron-22B_seqsel.calculon-execution.json"
A100_SYSTEM = str(DATA / "a100_80g.calculon-system.json")


def test_calculon_execution_example_by_hand():
    from costmodel._model_files import is_calculon_execution, strategy_from_calculon

    data = json.loads(EXAMPLE_EXE.read_text())
    assert is_calculon_execution(data) and not is_calculon_execution({"tp": 4, "pp": 2})
    s = strategy_from_calculon(data, "f", cluster=cluster_preset("selene-3072"))
    assert s == {
        "tp": 4, "pp": 64, "dp": 12,  # tensor_par, pipeline_par, data_par (num_procs 3072 = 4 x 64 x 12)
        "global_batch": 3072, "micro_batch": 4,  # batch_size, microbatch_size
        "vpp": 1, "schedule": "1f1b",  # pipeline_interleaving 1: no interleaving
        "recompute": "full",  # activation_recompute full
        "zero_stage": 1,  # optimizer_sharding true: the distributed optimizer
        "precision": "fp16",  # datatype float16
        "sequence_parallel": True,  # tensor_par_comm_type rs_ag with tensor_par 4
        "overlap_dp": False,  # data_par_overlap false
    }


def test_calculon_execution_seqsel_and_other_values_by_hand():
    from costmodel._model_files import strategy_from_calculon

    data = json.loads(SEQSEL_EXE.read_text())
    s = strategy_from_calculon(data)
    # Korthikanti et al. 2022's 22B on 8 GPUs: attn_only is their selective recompute, rs_ag with the
    # all-gather redone their sequence parallelism
    assert (s["tp"], s["pp"], s["dp"], s["micro_batch"], s["global_batch"]) == (8, 1, 1, 4, 4)
    assert (s["recompute"], s["sequence_parallel"], s["zero_stage"], s["precision"]) == ("selective", True, 0, "fp16")
    other = {**data, "num_procs": 32, "pipeline_par": 2, "data_par": 2, "batch_size": 16,
             "pipeline_interleaving": 3, "datatype": "bfloat16", "optimizer_sharding": True, "data_par_overlap": True,
             "activation_recompute": "none", "tensor_par_comm_type": "p2p_rs_ag", "seq_par_ag_redo": False}
    s = strategy_from_calculon(other)
    assert (s["vpp"], s["schedule"], s["precision"], s["zero_stage"], s["overlap_dp"]) == (
        3, "interleaved", "bf16", 1, True)
    assert (s["recompute"], s["sequence_parallel"]) == ("none", False)
    assert strategy_from_calculon({**data, "datatype": "float8"})["precision"] == "fp8"
    # rs_ag with tensor_par 1 splits nothing: no sequence parallelism
    one = {**data, "num_procs": 1, "tensor_par": 1, "seq_par_ag_redo": False}
    assert strategy_from_calculon(one)["sequence_parallel"] is False


def test_calculon_execution_on_the_command_line(capsys):
    from cli import main

    argv = ["evaluate", "--model", "megatron-1t", "--cluster", A100_SYSTEM + "@3072"]
    assert main([*argv, "--strategy", str(EXAMPLE_EXE), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    s = rep["strategy"]
    assert (s["dp"], s["tp"], s["pp"], s["micro_batch"], s["global_batch"]) == (12, 4, 64, 4, 3072)
    assert (s["recompute"], s["zero_stage"], s["precision"], s["sequence_parallel"], s["overlap_dp"]) == (
        "full", 1, "fp16", True, False)
    assert rep["metrics"]["microbatches"] == 3072 // (12 * 4)
    # the same plan as flags prices the same
    flags = ["--tp", "4", "--pp", "64", "--dp", "12", "--micro-batch", "4", "--global-batch", "3072", "--recompute",
             "full", "--sequence-parallel", "--zero-stage", "1", "--precision", "fp16", "--no-overlap-dp", "--json"]
    assert main([*argv, *flags]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"] == rep["metrics"]
    assert main([*argv, "--strategy", str(EXAMPLE_EXE)]) == 0
    assert "strategy: dp=12 tp=4 pp=64 " in capsys.readouterr().out
    # export reads it too (Megatron-LM's flags of the plan)
    assert main(["export", "--framework", "megatron", *argv[1:], "--strategy", str(EXAMPLE_EXE)]) == 0
    out = capsys.readouterr().out
    assert "--tensor-model-parallel-size 4 " in out and "--pipeline-model-parallel-size 64 " in out


@pytest.mark.parametrize("change,field,expected", [
    ({"weight_offload": True}, "weight_offload", "expected false (weights, activations and optimizer state stay"),
    ({"optimizer_offload": True}, "optimizer_offload", "expected false"),
    ({"training": False}, "training", "expected true (training steps are priced"),
    ({"num_procs": 3000}, "num_procs", "expected tensor_par x pipeline_par x data_par = 4 x 64 x 12 = 3072, got 3000"),
    ({"activation_recompute": "some"}, "activation_recompute", "expected one of none, attn_only, full, got 'some'"),
    ({"tensor_par": "4"}, "tensor_par", "expected an integer in [1, 2147483647], got '4'"),
    ({"microbatch_size": 0}, "microbatch_size", "expected an integer in [1, 2147483647], got 0"),
    ({"fused_activation": 1}, "fused_activation", "expected true or false, got 1"),
    ({"batch_size": 3000}, "batch_size", "expected a multiple of data_par x microbatch_size = 48"),
    ({"attention_type": "multiquery"}, "attention_type", "expected one of multihead (multiquery is the model's"),
    ({"tensor_par_overlap": "ring"}, "tensor_par_overlap", "expected one of none"),
    ({"datatype": "float32"}, "datatype", "expected one of bfloat16, float16, float8"),
    ({"tensor_par_comm_type": "ar"}, "tensor_par_comm_type", "expected p2p_rs_ag or rs_ag with tensor_par and"),
    ({"seq_par_ag_redo": True}, "seq_par_ag_redo", "expected false unless tensor_par_comm_type is rs_ag and"),
    ({"activation_recompute": "none"}, "seq_par_ag_redo", "expected true with rs_ag and activation_recompute none"),
    ({"pipeline_par_net": 2}, "pipeline_par_net", "expected 0 (the node's link) or 1 (the network between nodes)"),
    # tp 4 fits a node of 8: plansweep keeps it there, dp's 4 x 12 = 48 ranks cross nodes
    ({"tensor_par_net": 1}, "tensor_par_net", "expected 0 (ranks in Megatron's order, tp innermost, then dp, then pp: "
                                              "the tp groups span 4 GPUs, inside one node of 8), got 1"),
    ({"data_par_net": 0}, "data_par_net", "expected 1 (ranks in Megatron's order"),
    ({"training": None}, "training", "expected true or false, got None"),
])
def test_bad_calculon_execution_fields_one_line(tmp_path, capsys, change, field, expected):
    from cli import main

    path = tmp_path / "exe.json"
    path.write_text(json.dumps({**json.loads(EXAMPLE_EXE.read_text()), **change}))
    code = main(["evaluate", "--model", "megatron-1t", "--cluster", A100_SYSTEM + "@3072", "--strategy", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert f"--strategy {path} {field}: {expected}" in err, err


def test_calculon_execution_whole_file_errors(tmp_path, capsys):
    from cli import main

    data = json.loads(EXAMPLE_EXE.read_text())
    cases = [({k: v for k, v in data.items() if k != "data_par_overlap"},
              " data_par_overlap: expected a value (a Calculon execution file sets all its 23 fields), got 'missing'"),
             ({**data, "cp": 2}, ": expected only Calculon's execution fields (num_procs, "),
             (data, " num_procs: expected at most the cluster's 1024 GPUs (h100x1024), got 3072")]
    for doc, needle in cases:
        path = tmp_path / "exe.json"
        path.write_text(json.dumps(doc))
        assert main(["evaluate", "--model", "megatron-1t", "--strategy", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"--strategy {path}{needle}" in err, err


def test_calculon_execution_networks_on_a_cluster_of_alike_links():
    """One network in the system file: both links alike, so either index prices the same and is read."""
    from costmodel._model_files import cluster_from_calculon, strategy_from_calculon

    system = json.loads(Path(A100_SYSTEM).read_text())
    flat = cluster_from_calculon({**system, "networks": system["networks"][:1]}, 3072, "flat")
    data = {**json.loads(EXAMPLE_EXE.read_text()), "tensor_par_net": 1, "data_par_net": 0}
    assert strategy_from_calculon(data, cluster=flat)["tp"] == 4
    with pytest.raises(InputError, match="tensor_par_net: expected 0"):
        strategy_from_calculon(data, cluster=cluster_from_calculon(system, 3072, "two"))


# ---- sliding-window attention: read and priced ---------------------------------------------------------------------
# Mistral-7B-v0.1's config.json (mistralai/Mistral-7B-v0.1): a 4,096-token window on every layer, built for 32,768.
MISTRAL_7B = {"model_type": "mistral", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
              "num_hidden_layers": 32, "intermediate_size": 14336, "max_position_embeddings": 32768,
              "vocab_size": 32000, "hidden_act": "silu", "sliding_window": 4096, "tie_word_embeddings": False}


def test_a_window_shorter_than_the_sequence_is_priced_from_the_command_line(tmp_path, capsys):
    """Mistral-7B at its 32,768 positions: every layer attends within 4,096 keys; evaluate prices it (exit 0) with
    the attention FLOPs of the window, not of the causal square: model FLOPs a sequence, by hand, 3 s (L (2 x
    weights + 4 x span x q) + 2 h V), span = s x (w s - w (w - 1) / 2) / (s (s + 1) / 2)."""
    from cli import main

    model = from_hf_config(MISTRAL_7B, "mistral-7b")
    assert (model.sliding_window, model.window_layers, model.seq_len) == (4096, None, 32768)
    s, w, h, L, V = 32768, 4096, 4096, 32, 32000
    span = s * (w * s - w * (w - 1) / 2) / (s * (s + 1) / 2)
    weights = h * (4096 + 2 * 1024) + 4096 * h + 3 * h * 14336
    assert model.model_flops_per_sample() == pytest.approx(3 * s * (L * (2 * weights + 4 * span * 4096) + 2 * h * V),
                                                           rel=1e-12)
    path = tmp_path / "mistral.json"
    path.write_text(json.dumps(MISTRAL_7B))
    assert main(["evaluate", "--model", str(path), "--cluster", "h100x8", "--dp", "1", "--tp", "8",
                 "--micro-batch", "1", "--global-batch", "8", "--recompute", "full", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["metrics"]["feasible"] and out["metrics"]["tokens_per_s"] > 0, out


def test_a_window_covering_the_sequence_restricts_nothing():
    """At --seq-len 4,096 every query's keys lie inside the window: priced as the same model without one."""
    hf = with_seq_len(from_hf_config(MISTRAL_7B, "m"), "4096")
    assert hf.sliding_window == 4096 and hf.windowed_layers == 0
    _same_metrics(hf, dataclasses.replace(hf, sliding_window=None))


@pytest.mark.parametrize("change,window,layers", [
    ({"use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 21}, 4096, 7),  # layers 21-27 slide
    ({"use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 0}, 4096, None),  # all 28
    ({"use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 28}, None, None),  # none from 28 on
    ({"use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 21}, None, None),
    ({"use_sliding_window": True, "sliding_window": 4096, "layer_types": ["full_attention"] * 28}, None, None),
    ({"use_sliding_window": True, "sliding_window": 4096,
      "layer_types": ["sliding_attention", "full_attention"] * 14}, 4096, 14),
])
def test_which_qwen_configs_slide(change, window, layers):
    data = {**json.loads((DATA / "qwen2.5-7b.config.json").read_text()), **change}
    model = from_hf_config(data, "x")
    assert (model.sliding_window, model.window_layers) == (window, layers)


def test_layer_types_name_a_window_in_any_family_and_bad_windows_are_named():
    llama = json.loads((DATA / "llama3-8b.config.json").read_text())
    assert from_hf_config(llama, "x").sliding_window is None
    assert from_hf_config({**llama, "sliding_window": 512}, "x").sliding_window is None  # (no layer_types: none)
    types = ["sliding_attention", "full_attention"] * 16
    assert from_hf_config({**llama, "sliding_window": 512, "layer_types": types}, "x").sliding_window == 512
    assert from_hf_config({**MISTRAL_7B, "sliding_window": None}, "x").sliding_window is None
    with pytest.raises(InputError, match="--model sliding_window: expected an integer >= 1 or null, got '4096'"):
        from_hf_config({**MISTRAL_7B, "sliding_window": "4096"}, "x")
    with pytest.raises(InputError, match="model.sliding_window: expected an integer >= 1"):
        model_from_mapping({"layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 128, "sliding_window": 0},
                           "x")


# Qwen3-32B's config.json (Qwen/Qwen3-32B): 64 heads of 128 on a hidden size of 5,120 (Q 8,192 wide).
QWEN3_32B = {"model_type": "qwen3", "hidden_size": 5120, "num_attention_heads": 64, "num_key_value_heads": 8,
             "head_dim": 128, "num_hidden_layers": 64, "intermediate_size": 25600, "max_position_embeddings": 40960,
             "vocab_size": 151936, "hidden_act": "silu", "tie_word_embeddings": False, "use_sliding_window": False,
             "sliding_window": None, "max_window_layers": 64}


def test_a_dense_head_size_other_than_hidden_over_heads_is_read():
    """Qwen3-32B's model card: 32.8B parameters, 31.2B of them not embeddings (its untied embedding and head are
    2 x 151,936 x 5,120 = 1.56B); its layers' Q and output projections 8,192 wide. Priced alike by both evaluators."""
    from costmodel._reference import evaluate_row

    model = from_hf_config(QWEN3_32B, "qwen3-32b")
    assert (model.head_dim, model.q_hidden, model.kv_hidden) == (128, 8192, 1024)
    assert round(model.num_params() / 1e9, 1) == 32.8
    assert round((model.num_params() - 2 * 151936 * 5120) / 1e9, 1) == 31.2
    # per layer: Q and the output 5,120 x 8,192 each, K and V 5,120 x 1,024 each, the MLP 3 x 5,120 x 25,600, two norms
    layer = 2 * 5120 * 8192 + 2 * 5120 * 1024 + 3 * 5120 * 25600 + 2 * 5120
    assert model.num_params() == 64 * layer + 2 * 151936 * 5120 + 5120
    model = with_seq_len(model, "4096")  # (its 40,960 positions: no layout of these fits)
    cluster = cluster_preset("h100x64")
    table = StrategyTable.from_columns(dp=[8, 2, 1], tp=[8, 4, 8], pp=[1, 8, 8], micro_batch=1, global_batch=512,
                                       recompute=["full", "selective", "none"], sequence_parallel=True,
                                       zero_stage=1)
    vec = evaluate(model, cluster, table)
    assert vec["feasible"].all()
    for i in range(len(table)):
        ref = evaluate_row(model, cluster, table.row(i))
        for key in ("step_time_s", "mem_total_bytes", "tokens_per_s", "mfu"):
            assert vec[key][i] == pytest.approx(ref[key], rel=1e-9), (i, key)


def test_a_qwen_config_without_max_window_layers_takes_the_class_default():
    """Qwen2Config's max_window_layers defaults to 28: a 28-layer config that turns the window on without saying from
    which layer has none windowed; a 32-layer one, its last 4."""
    data = {**json.loads((DATA / "qwen2.5-7b.config.json").read_text()), "use_sliding_window": True,
            "sliding_window": 4096}
    data.pop("max_window_layers", None)
    assert from_hf_config(data, "x").sliding_window is None
    assert from_hf_config({**data, "num_hidden_layers": 32}, "x").window_layers == 4


@pytest.mark.parametrize("field", ["kv_heads", "vocab", "ffn_hidden"])
def test_a_boolean_is_no_count(field, tmp_path):
    """JSON's true is a Python int: a model file's "kv_heads": true was read as 1 KV head; a count must be an integer
    that is not a boolean, named in one line."""
    model = {"name": "m", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336,
             "seq_len": 8192, "vocab": 128256, "activation": "swiglu", "norm": "rmsnorm"}
    (path := tmp_path / "m.json").write_text(json.dumps({**model, field: True}))
    with pytest.raises(InputError, match=f"{field}: expected an integer"):
        load_model(str(path))


def test_a_hf_config_refused_by_the_models_checks_names_the_configs_key(tmp_path):
    """The model's own checks know its fields (kv_heads, experts_per_token); a HuggingFace config's refusal names the
    key the value came from (num_key_value_heads, num_experts_per_tok; gpt2's n_head), one line."""
    cfg = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 3, "max_position_embeddings": 8192, "vocab_size": 128256}
    (path := tmp_path / "c.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError,
                       match=f"--model {path} num_key_value_heads: expected a divisor of "
                             "num_attention_heads=32, got 3"):
        load_model(str(path))
    moe = {**cfg, "model_type": "mixtral", "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 9}
    path.write_text(json.dumps(moe))
    with pytest.raises(InputError,
                       match="num_experts_per_tok: expected an integer in \\[1, num_local_experts=8\\], got 9"):
        load_model(str(path))
    # a plansweep model file keeps its own field names
    (own := tmp_path / "m.json").write_text(json.dumps({"name": "m", "layers": 32, "hidden": 4096, "heads": 32,
                                                        "kv_heads": 3, "vocab": 128256, "seq_len": 8192}))
    with pytest.raises(InputError, match=f"--model {own} kv_heads: expected a divisor of heads=32"):
        load_model(str(own))
