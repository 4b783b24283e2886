"""Sliding-window attention: the attention FLOPs counted over the window's pairs, the fused kernel's time over the
key tiles that meet the band, both evaluators alike, and gpt-oss's HuggingFace config read as its model card counts
it."""

import dataclasses
import json

import numpy as np
import pytest

from costmodel import REASONS, InputError, StrategyTable, cluster_preset, evaluate, from_hf_config, model_preset
from costmodel._layer_compute import layer_costs
from costmodel._workloads import Transformer
from cli._specs import with_seq_len
from sweep._rundir import model_from_dict, model_to_dict
from tests.test_reference import assert_rows_equal_reference, random_table

# openai/gpt-oss-120b's config.json: 36 layers, every other one (from the first) attending within 128 keys.
GPT_OSS_120B = {"model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 36,
                "num_local_experts": 128, "num_experts_per_tok": 4, "num_attention_heads": 64,
                "num_key_value_heads": 8, "head_dim": 64, "sliding_window": 128,
                "layer_types": ["sliding_attention", "full_attention"] * 18, "hidden_act": "silu",
                "max_position_embeddings": 131072, "attention_bias": True, "vocab_size": 201088,
                "tie_word_embeddings": False}


def _dense(seq, window=None, windowed=None, layers=32):
    return Transformer(name="w", layers=layers, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, seq_len=seq,
                       vocab=32000, activation="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False,
                       learned_positions=False, sliding_window=window, window_layers=windowed)


def test_span_and_tile_share_by_hand():
    """32,768 tokens, a 4,096 window on every layer: pairs sum_i min(i, w) = 4096 x 32768 - 4096 x 4095 / 2 =
    125,831,168 against 32768 x 32769 / 2 = 536,887,296; 128-wide tiles: 256 query tiles, the band meets 33 key
    tiles a query tile past the 32nd (32 x 33 / 2 = 528 before), 528 + 224 x 33 = 7,920 against 256 x 257 / 2 =
    32,896. Half the layers windowed: halfway between."""
    m = _dense(32768, 4096)
    assert m.attention_span == pytest.approx(32768 * 125_831_168 / 536_887_296, rel=1e-12)
    assert m.attention_time_share == pytest.approx(7920 / 32896, rel=1e-12)
    half = _dense(32768, 4096, windowed=16)
    assert half.attention_span == pytest.approx(32768 * (0.5 + 0.5 * 125_831_168 / 536_887_296), rel=1e-12)
    assert half.attention_time_share == pytest.approx(0.5 + 0.5 * 7920 / 32896, rel=1e-12)
    # gpt-oss at 4,096: w 128 meets 2 key tiles a query tile past the first, (1 + 31 x 2) / (32 x 33 / 2) = 63 / 528
    oss = dataclasses.replace(from_hf_config(GPT_OSS_120B, "oss"), seq_len=4096)
    assert oss.attention_time_share == pytest.approx(0.5 + 0.5 * 63 / 528, rel=1e-12)
    assert oss.attention_span == pytest.approx(4096 * (0.5 + 0.5 * (128 * 4096 - 128 * 127 / 2) / (4096 * 4097 / 2)))
    for covered in (_dense(4096, 4096), _dense(4096, 8192), _dense(4096)):  # nothing restricted
        assert (covered.windowed_layers, covered.attention_span, covered.attention_time_share) == (0, 4096.0, 1.0)


def test_the_kernel_speedup_matches_mistrals_published_one():
    """Mistral 7B (Jiang et al. 2023, arXiv:2310.06825 Sec. 2): at 16K tokens with W = 4,096, sliding-window
    FlashAttention and xFormers kernels gave "a 2x speed improvement over a vanilla attention baseline". The tiles: 128
    query tiles, 33 key tiles each past the 32nd, (528 + 96 x 33) / (128 x 129 / 2) = 3,696 / 8,256, a 2.23x faster
    kernel (the paper's figure is a round one)."""
    share = _dense(16384, 4096).attention_time_share
    assert share == pytest.approx(3696 / 8256, rel=1e-12)
    assert 1.8 < 1 / share < 2.5


@pytest.mark.parametrize("gpu_kernel", ["measured", "formula"])
def test_attention_core_time_is_the_band_share_of_the_causal_one(gpu_kernel):
    """The layer's attention-core time with the window over the same layer's without, at cp 1: the tile share
    (test_span_and_tile_share_by_hand's 7,920 / 32,896), on the measured-kernel path and on the standard formula."""
    cluster = cluster_preset("h100x8")
    b, t, c, sp = np.array([1.0, 2.0]), np.array([1, 8]), np.array([1, 1]), np.array([False, True])
    eff = np.full((2, 6), 0.5) if gpu_kernel == "measured" else None
    full, win = (layer_costs(m, cluster, b, t, c, sp, 989e12, attn_eff=eff)
                 for m in (_dense(32768), _dense(32768, 4096)))
    np.testing.assert_allclose(win["attn"] / full["attn"], 7920 / 32896, rtol=1e-12)
    np.testing.assert_array_equal(win["gemm"], full["gemm"])  # the projections and the MLP do not change


def test_a_window_makes_long_sequences_cheaper_not_the_projections():
    """Mistral-shaped layers at 32k: windowed every layer, the step is shorter and the model FLOPs fewer by exactly
    the attention pairs given up (3 x 4 x q x (s - span) a token and layer)."""
    cluster = cluster_preset("h100x64")
    table = StrategyTable.from_columns(dp=[8, 2], tp=[8, 8], pp=[1, 4], cp=[1, 1], micro_batch=1, global_batch=64,
                                       recompute=["full", "selective"], sequence_parallel=True, zero_stage=1)
    full, win = _dense(32768), _dense(32768, 4096)
    mf, mw = evaluate(full, cluster, table), evaluate(win, cluster, table)
    assert mf["feasible"].all() and mw["feasible"].all()
    assert (mw["step_time_s"] < mf["step_time_s"]).all()
    drop = full.model_flops_per_sample() - win.model_flops_per_sample()
    assert drop == pytest.approx(3 * 32768 * 32 * 4 * 4096 * (32768 - win.attention_span), rel=1e-12)


@pytest.mark.parametrize("framework", ["megatron-core", "fsdp2-compile", "generic", "deepspeed"])
def test_windowed_models_price_alike_in_both_evaluators(framework):
    """Random layouts of two windowed dense models (every layer on H100s with measured kernels; 20 of 32 layers on
    A100s, the standard formula) and gpt-oss at 4,096 tokens with expert parallelism."""
    rng = np.random.default_rng(11)
    oss = dataclasses.replace(from_hf_config(GPT_OSS_120B, "oss"), seq_len=4096)
    n = 120
    oss_table = StrategyTable.from_columns(
        dp=rng.choice([8, 16], n), tp=rng.choice([1, 2], n), pp=rng.choice([2, 4], n), cp=rng.choice([1, 2], n),
        ep=8, micro_batch=rng.choice([1, 2], n), global_batch=512, recompute=rng.integers(0, 3, n),
        sequence_parallel=True, zero_stage=2 if framework.startswith("fsdp2") else 1,  # (FSDP: no ZeRO-1)
        precision=rng.integers(0, 2, n))
    cases = [(_dense(16384, 4096), "h100x64", random_table(_dense(16384), rng, 300, False)),
             (_dense(8192, 1000, windowed=20), "dgx-a100-1024", random_table(_dense(8192), rng, 300, False)),
             (oss, "h100x256", oss_table)]
    for model, cluster, table in cases:
        cl = cluster_preset(cluster)
        vec = evaluate(model, cl, table, framework=framework)
        assert vec["feasible"].any()
        assert_rows_equal_reference(model, cl, table, vec, framework)


def test_gpt_oss_120b_config_counts_its_model_card():
    """gpt-oss-120b's model card (OpenAI 2025, arXiv:2508.10925, Table 1): 116.83B parameters, 5.13B active a
    token (the unembedding counted, the embedding not), attention 0.96B, MLP 114.71B, embedding and unembedding
    1.16B; the biases of Q, K, V, the output and the experts counted, the router's 128 and the sinks' 64 a layer
    not."""
    model = from_hf_config(GPT_OSS_120B, "gpt-oss-120b")
    assert (model.sliding_window, model.window_layers, model.windowed_layers) == (128, 18, 18)
    assert (model.head_dim, model.q_hidden, model.kv_hidden, model.experts, model.experts_per_token) == (
        64, 4096, 512, 128, 4)
    assert round(model.num_params() / 1e9, 2) == 116.83
    assert round((model.active_params() - model.embedding_params()) / 1e9, 2) == 5.13
    attention = 2880 * (4096 + 2 * 512) + 4096 * 2880 + (4096 + 2 * 512 + 2880)
    assert round(36 * attention / 1e9, 2) == 0.96
    expert = 3 * 2880 * 2880 + 2 * 2880 + 2880
    assert round(36 * (128 * expert + 2880 * 128) / 1e9, 2) == 114.71
    assert round(2 * 201088 * 2880 / 1e9, 2) == 1.16
    assert dataclasses.replace(model, seq_len=4096) == model_preset("gpt-oss-120b")  # the preset, at 4,096 tokens


def test_window_layers_are_checked_and_kept_in_run_files():
    with pytest.raises(InputError, match="model.window_layers: expected an integer in \\[0, layers=32\\]"):
        _dense(8192, 1024, windowed=33)
    with pytest.raises(InputError, match="model.window_layers: expected null without a sliding_window"):
        _dense(8192, None, windowed=4)
    m = _dense(8192, 1024, windowed=12)
    assert model_from_dict(model_to_dict(m)) == m
    assert "window_layers" not in model_to_dict(_dense(8192))  # (run files of models without one read as before)


def test_context_parallel_of_a_windowed_model_is_transformer_engines_all_to_all(tmp_path, capsys):
    """Transformer Engine's P2P ring asserts against a sliding window (its context_parallel.py), so under
    megatron-core a windowed model's cp > 1 runs over TE's all-to-all: exposed, Q, K, V and the output each way. By
    hand, tp 2 x cp 2 inside an H100 node, 32,768 tokens, b = 1: the rank's 16,384 tokens x (2 x 4,096 + 2 x 1,024)
    / 2 = 83,886,080 elements, half of them (2 bytes each) over NVLink at 450 GB/s x 0.8, and 4 exchanges at 5 us:
    253.0 us a layer each way, 32 layers x 4 micro-batches a step: 64.8 ms. At cp 8 the tp share of the K, V heads (8
    / 2 = 4) does not split over 8 ranks: framework_unsupported, evaluate names cp."""
    from cli import main

    cluster = cluster_preset("h100x64")
    table = StrategyTable.from_columns(dp=[16, 4], tp=[2, 2], pp=[1, 1], cp=[2, 8], micro_batch=1, global_batch=64,
                                       recompute="none", sequence_parallel=True, zero_stage=1)
    windowed = _dense(32768, 4096)
    met = evaluate(windowed, cluster, table, framework="megatron-core")
    assert [REASONS[r] for r in met["reason"]] == ["ok", "framework_unsupported"]
    one = 0.5 * 2 * (16384 * (2 * 4096 + 2 * 1024) / 2) / (450e9 * 0.8) + 4 * 5e-6
    assert met["cp_comm_s"][0] == pytest.approx(2 * one * 32 * 4, rel=1e-9)
    # the Llama 3 profile's all-gather keeps its exchange, TE's ring hides the full model's behind the attention;
    # torchtitan runs no context parallelism for a window (Framework.cp_sdpa_only)
    fsdp = StrategyTable.from_columns(**{**{k: table[k] for k in table.columns}, "zero_stage": 2})  # (no ZeRO-1)
    ring = evaluate(windowed, cluster, fsdp, framework="llama3-fsdp")
    assert REASONS[ring["reason"][0]] == "ok" and ring["cp_comm_s"][0] != pytest.approx(met["cp_comm_s"][0])
    assert REASONS[evaluate(windowed, cluster, fsdp, framework="fsdp2")["reason"][0]] == "framework_unsupported"
    assert evaluate(_dense(32768), cluster, table, framework="megatron-core")["cp_comm_s"][0] == 0.0
    path = tmp_path / "w.json"
    path.write_text(json.dumps(model_to_dict(windowed)))
    assert main(["evaluate", "--model", str(path), "--cluster", "h100x64", "--cp", "8", "--tp", "2", "--dp", "4",
                 "--global-batch", "64", "--framework", "megatron-core"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cp: expected a divisor of heads/tp=16 and kv_heads/tp=4" in err and "got 8" in err


# ---- Gemma: a GELU-gated MLP and sliding windows on most layers ------------------------------------------------------
# google/gemma-2-9b's config.json (every other layer in a 4,096-token window; Gemma2Config's layer_types) and
# google/gemma-3-1b-pt's (a 512-token window, every sixth layer full: sliding_window_pattern 6).
GEMMA2_9B = {"model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336, "num_hidden_layers": 42,
             "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
             "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 8192, "vocab_size": 256000,
             "sliding_window": 4096, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0}
GEMMA3_1B = {"model_type": "gemma3_text", "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26,
             "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256, "hidden_activation":
             "gelu_pytorch_tanh", "max_position_embeddings": 32768, "vocab_size": 262144, "sliding_window": 512,
             "sliding_window_pattern": 6}


def test_gemma_configs_count_their_reports():
    """Gemma 2 (Gemma Team 2024, arXiv:2408.00118 Table 2): the 9B's 917,504,000 embedding and 8,324,201,984
    non-embedding parameters, less its two post-norms a layer, which plansweep does not count (42 x 2 x 3,584 =
    301,056); Gemma 3 (arXiv:2503.19786 Table 1): the 1B's 302M embedding, 698M non-embedding parameters. GELU-gated
    MLPs, tied embeddings; 21 of 42 layers in the window (every other from the first), 22 of 26 (every sixth full)."""
    g2 = from_hf_config(GEMMA2_9B, "gemma-2-9b")
    assert (g2.activation, g2.mlp_matrices, g2.tied_embeddings, g2.head_dim) == ("geglu", 3, True, 256)
    assert (g2.sliding_window, g2.window_layers) == (4096, 21)
    assert g2.embedding_params() == 917_504_000
    assert 8_324_201_984 - (g2.num_params() - g2.embedding_params()) == 42 * 2 * 3584
    g3 = from_hf_config(GEMMA3_1B, "gemma-3-1b")
    assert (g3.sliding_window, g3.window_layers, g3.tied_embeddings) == (512, 22, True)
    assert round(g3.embedding_params() / 1e6) == 302 and round((g3.num_params() - g3.embedding_params()) / 1e6) == 698
    types = ["sliding_attention"] * 20 + ["full_attention"] * 6  # an explicit layer_types wins over the pattern
    assert from_hf_config({**GEMMA3_1B, "layer_types": types}, "x").window_layers == 20
    assert from_hf_config({**GEMMA2_9B, "model_type": "gemma", "sliding_window": None, "hidden_activation": None,
                           "hidden_act": "gelu"}, "x").activation == "geglu"  # (Gemma 1's config says gelu)
    # Gemma 3's multimodal configs (4B and up) hold the language model in text_config, often without its vocabulary
    nested = {"model_type": "gemma3", "text_config": {k: v for k, v in GEMMA3_1B.items() if k != "vocab_size"},
              "vision_config": {"model_type": "siglip_vision_model"}}
    assert from_hf_config(nested, "g3") == dataclasses.replace(g3, name="g3", vocab=262208)
    with pytest.raises(InputError, match="--model hidden_activation: expected a GELU \\(the gated MLP of gemma2\\)"):
        from_hf_config({**GEMMA2_9B, "hidden_activation": "silu"}, "x")


def test_gemma3_text_config_defaults_fill_a_multimodal_config():
    """google/gemma-3-4b-it's text_config sets no head counts (a multimodal config saves only what differs from
    Gemma3TextConfig's defaults: 8 heads, 4 KV heads, head_dim 256): 34 layers of 2,560 with 8 x 256 = 2,048-wide
    queries; 29 of 34 in the 1,024-token window (every sixth full: 34 // 6 = 5); non-embedding parameters 34 x
    (2,560 x (2,048 + 2 x 1,024) + 2,048 x 2,560 + 3 x 2,560 x 10,240) = 3,208.6M and the norms, Gemma 3's Table 1:
    3,209M (arXiv:2503.19786). The 12B's text_config sets its heads (16, 8) but not head_dim: 256, not 3,840 / 16."""
    g4 = from_hf_config({"model_type": "gemma3", "text_config": {
        "hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text", "num_hidden_layers": 34,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024}}, "gemma-3-4b")
    assert (g4.heads, g4.kv_heads, g4.head_dim, g4.vocab) == (8, 4, 256, 262208)
    assert (g4.sliding_window, g4.window_layers) == (1024, 29)
    assert round((g4.num_params() - g4.embedding_params()) / 1e6) == 3209
    g12 = from_hf_config({"model_type": "gemma3", "text_config": {
        "hidden_size": 3840, "intermediate_size": 15360, "model_type": "gemma3_text", "num_hidden_layers": 48,
        "num_attention_heads": 16, "num_key_value_heads": 8, "sliding_window": 1024}}, "gemma-3-12b")
    assert (g12.heads, g12.kv_heads, g12.head_dim) == (16, 8, 256)


def test_window_keys_of_the_wrong_shape_are_refused():
    """layer_types must name every layer; Qwen's max_window_layers an integer >= 0 and use_sliding_window a JSON
    true / false: each otherwise one line naming the key."""
    types = ["sliding_attention"] * 5
    with pytest.raises(InputError, match="layer_types: expected num_hidden_layers=26 entries, one a layer, got 5"):
        from_hf_config({**GEMMA3_1B, "layer_types": types}, "x")
    qwen = {"model_type": "qwen2", "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 24,
            "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 151936, "sliding_window": 4096,
            "use_sliding_window": True, "max_window_layers": 21, "max_position_embeddings": 32768}
    assert from_hf_config(qwen, "q").window_layers == 3
    with pytest.raises(InputError, match="max_window_layers: expected an integer >= 0, got '21'"):
        from_hf_config({**qwen, "max_window_layers": "21"}, "q")
    with pytest.raises(InputError, match="max_window_layers: expected an integer >= 0, got -5"):
        from_hf_config({**qwen, "max_window_layers": -5}, "q")
    with pytest.raises(InputError, match="use_sliding_window: expected true or false, got 'true'"):
        from_hf_config({**qwen, "use_sliding_window": "true"}, "q")


def test_a_gelu_gated_mlp_prices_as_swiglu():
    """GeGLU and SwiGLU layers are the same products, element-wise bytes and kept tensors: every metric alike, on
    both evaluators, under the Megatron-Core and torchtitan profiles."""
    from costmodel._reference import evaluate_row

    g2 = with_seq_len(from_hf_config(GEMMA2_9B, "gemma-2-9b"), "8192")
    twin = dataclasses.replace(g2, activation="swiglu")
    cluster = cluster_preset("h100x64")
    table = StrategyTable.from_columns(dp=[8, 4, 16], tp=[8, 4, 2], pp=[1, 4, 2], cp=[1, 1, 2], micro_batch=1,
                                       global_batch=256, recompute=["full", "selective", "none"],
                                       sequence_parallel=True, zero_stage=0)  # (what both run: FSDP has no ZeRO-1)
    for fw in ("megatron-core", "fsdp2"):
        a, b = evaluate(g2, cluster, table, framework=fw), evaluate(twin, cluster, table, framework=fw)
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=(fw, k))
        assert a["feasible"].any()
        ref = evaluate_row(g2, cluster, table.row(0), framework=fw)
        assert a["step_time_s"][0] == pytest.approx(ref["step_time_s"], rel=1e-9)


def test_evaluate_says_what_window_it_priced(capsys):
    """gpt-oss-120b: 18 of its 36 layers within 128 keys, in the first line and under --json; a model whose window
    covers its sequence (Mistral at 4,096 tokens would) and one without a window say none."""
    from cli import main

    args = ["evaluate", "--model", "gpt-oss-120b", "--cluster", "h100x64", "--tp", "1", "--pp", "4", "--ep", "8",
            "--global-batch", "1280"]
    assert main(args) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("; a sliding window of 128 keys on 18 layers")
    assert main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sliding_window"] == {"window": 128, "layers": 18}
    assert main(["evaluate", "--model", "llama3-8b", "--cluster", "h100x8", "--tp", "8", "--global-batch", "8",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sliding_window"] is None
