"""Chunked attention (Llama 4's): the FLOPs counted over the chunks' causal triangles, the fused kernel over their
tiles, both evaluators alike; Llama 4, Kimi K2 and GLM-4.5 HuggingFace configs read as their makers count them."""

import dataclasses
import json

import numpy as np
import pytest

from costmodel import InputError, StrategyTable, cluster_preset, evaluate, from_hf_config, model_preset
from costmodel._layer_compute import layer_costs
from costmodel._workloads import Transformer
from sweep._rundir import model_from_dict, model_to_dict
from tests.test_reference import assert_rows_equal_reference

# meta-llama/Llama-4-Maverick-17B-128E's config.json (its text_config; the vision_config left out): 48 layers, MoE on
# every other from the second, chunks of 8,192 tokens on the layers with rotary positions (all but every fourth).
MAVERICK_TEXT = {"model_type": "llama4_text", "attention_chunk_size": 8192, "head_dim": 128, "hidden_act": "silu",
                 "hidden_size": 5120, "interleave_moe_layer_step": 2, "intermediate_size": 8192,
                 "intermediate_size_mlp": 16384, "max_position_embeddings": 1048576, "num_attention_heads": 40,
                 "num_experts_per_tok": 1, "num_hidden_layers": 48, "num_key_value_heads": 8,
                 "num_local_experts": 128, "tie_word_embeddings": False, "vocab_size": 202048,
                 "no_rope_layers": [1, 1, 1, 0] * 12}
MAVERICK = {"model_type": "llama4", "architectures": ["Llama4ForConditionalGeneration"], "text_config": MAVERICK_TEXT,
            "vision_config": {"model_type": "llama4_vision_model"}}
SCOUT_TEXT = {**MAVERICK_TEXT, "interleave_moe_layer_step": 1, "num_local_experts": 16,
              "max_position_embeddings": 10485760}


def _dense(seq, chunk=None, chunked=None, layers=48):
    return Transformer(name="c", layers=layers, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, seq_len=seq,
                       vocab=32000, activation="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False,
                       learned_positions=False, attention_chunk=chunk, window_layers=chunked)


def test_span_and_tile_share_by_hand():
    """32,768 tokens in chunks of 8,192: 4 triangles of 8,192 x 8,193 / 2 = 33,558,528 pairs, 134,234,112 against
    the causal 32,768 x 32,769 / 2 = 536,887,296; 128-wide tiles: 4 x (64 x 65 / 2) = 8,320 against 256 x 257 / 2 =
    32,896. 20,000 tokens: chunks of 8,192, 8,192 and 3,616, pairs 2 x 33,558,528 + 3,616 x 3,617 / 2 =
    73,656,592 against 200,010,000; tiles 2 x 2,080 + 29 x 30 / 2 = 4,595 against 157 x 158 / 2 = 12,403. Llama 4's
    36 chunked layers of 48: a quarter full."""
    m = _dense(32768, 8192)
    assert m.attention_span == pytest.approx(32768 * 134_234_112 / 536_887_296, rel=1e-12)
    assert m.attention_time_share == pytest.approx(8320 / 32896, rel=1e-12)
    odd = _dense(20000, 8192)
    assert odd.attention_span == pytest.approx(20000 * 73_656_592 / 200_010_000, rel=1e-12)
    assert odd.attention_time_share == pytest.approx(4595 / 12403, rel=1e-12)
    l4 = _dense(32768, 8192, chunked=36)
    assert l4.attention_time_share == pytest.approx(0.25 + 0.75 * 8320 / 32896, rel=1e-12)
    assert l4.attention_span == pytest.approx(32768 * (0.25 + 0.75 * 134_234_112 / 536_887_296), rel=1e-12)
    for covered in (_dense(8192, 8192), _dense(4096, 8192), _dense(8192)):  # a chunk as long as the sequence
        assert (covered.windowed_layers, covered.attention_span, covered.attention_time_share) == (0, 8192.0 if
                covered.seq_len == 8192 else 4096.0, 1.0)


def test_attention_core_time_is_the_chunks_tile_share():
    """The layer's attention-core time with chunks over the same layer's without, at cp 1: 8,320 / 32,896; the
    projections and the MLP unchanged."""
    cluster = cluster_preset("h100x8")
    b, t, c, sp = np.array([1.0, 2.0]), np.array([1, 8]), np.array([1, 1]), np.array([False, True])
    full, chunked = (layer_costs(m, cluster, b, t, c, sp, 989e12) for m in (_dense(32768), _dense(32768, 8192)))
    np.testing.assert_allclose(chunked["attn"] / full["attn"], 8320 / 32896, rtol=1e-12)
    np.testing.assert_array_equal(chunked["gemm"], full["gemm"])


def test_llama4_configs_count_metas_model_card():
    """Meta's Llama 4 model card: Maverick 400B total, Scout 109B (both with the vision encoder, which is not read),
    17B active each. By hand, the text model: embedding and head 2 x 202,048 x 5,120; attention a layer 5,120 x
    (5,120 + 2 x 1,024) + 5,120 x 5,120; an expert 3 x 5,120 x 8,192; the router 5,120 x E. Maverick: 24 MoE layers
    (128 experts and the shared one) and 24 dense of 3 x 5,120 x 16,384; Scout 48 MoE layers of 16. A token meets the
    shared expert and one routed expert a MoE layer. RMSNorm weights: two a layer and the final one, 97 x 5,120."""
    emb, attn, expert = 2 * 202048 * 5120 + 97 * 5120, 5120 * (5120 + 2 * 1024) + 5120 * 5120, 3 * 5120 * 8192
    mav = from_hf_config(MAVERICK, "maverick")
    assert (mav.experts, mav.experts_per_token, mav.shared_experts, mav.moe_layer_freq, mav.moe_layers) == (
        128, 1, 1, 2, 24)
    assert (mav.ffn_hidden, mav.expert_ffn, mav.shared_expert_ffn, mav.attention_chunk, mav.window_layers) == (
        16384, 8192, 8192, 8192, 36)
    total = emb + 48 * attn + 24 * (129 * expert + 5120 * 128) + 24 * 3 * 5120 * 16384
    assert mav.num_params() == total and abs(total - 400e9) < 1e9
    assert mav.active_params() == emb + 48 * attn + 24 * (2 * expert + 5120 * 128) + 24 * 3 * 5120 * 16384
    assert round(mav.active_params() / 1e9) == 17
    scout = from_hf_config(SCOUT_TEXT, "scout")
    assert scout.num_params() == emb + 48 * attn + 48 * (17 * expert + 5120 * 16)
    assert 107e9 < scout.num_params() < 109e9 and round(scout.active_params() / 1e9) == 17
    # the presets are these configs at 8,192 tokens, where no layer is chunked
    assert dataclasses.replace(mav, name="llama4-maverick", seq_len=8192) == model_preset("llama4-maverick")
    assert dataclasses.replace(scout, name="llama4-scout", seq_len=8192) == model_preset("llama4-scout")
    assert model_preset("llama4-maverick").windowed_layers == 0
    # the default rope layers (no_rope_layer_interval 4), and moe_layers that say another placement
    text = {k: v for k, v in MAVERICK_TEXT.items() if k != "no_rope_layers"}
    assert from_hf_config(text, "x").window_layers == 36
    assert from_hf_config({**text, "no_rope_layer_interval": 2}, "x").window_layers == 24
    assert from_hf_config({**text, "attention_chunk_size": None}, "x").attention_chunk is None
    with pytest.raises(InputError, match="--model text_config moe_layers: expected every "
                                         "interleave_moe_layer_step=2-th layer from layer 1"):
        from_hf_config({**MAVERICK, "text_config": {**MAVERICK_TEXT, "moe_layers": [0, 2]}}, "x")
    with pytest.raises(InputError, match="--model text_config: expected the language model's config"):
        from_hf_config({"model_type": "llama4"}, "x")
    with pytest.raises(InputError, match="--model model_type: expected one of"):  # (not a string: no traceback)
        from_hf_config({**MAVERICK, "model_type": []}, "x")


def test_kimi_k2_and_glm45_configs_count_their_reports():
    """Kimi K2 (moonshotai/Kimi-K2-Instruct's config.json: DeepSeek-V3's architecture with 384 experts, 64 heads,
    vocab 163,840, the first layer dense): its model card's 1T total and 32B activated (the input embedding not
    counted active). GLM-4.5-Air (zai-org/GLM-4.5-Air's config.json: 46 layers, the first dense, 128 experts of 1,408
    and one shared, 8 a token, 96 query heads of 128 over 8 KV heads, no MLA): its report's 106B total and 12B
    active (embedding and head not counted active); by hand, the text model with its multi-token-prediction layer
    left out: 2 x 151,552 x 4,096 + 46 x 4,096 x (12,288 + 2 x 1,024 + 12,288) + 3 x 4,096 x 10,944 + 45 x (129 x 3
    x 4,096 x 1,408 + 4,096 x 128), and 93 RMSNorm weights of 4,096."""
    kimi = {"model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 61,
            "hidden_size": 7168, "intermediate_size": 18432, "num_attention_heads": 64, "num_key_value_heads": 64,
            "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
            "v_head_dim": 128, "n_routed_experts": 384, "num_experts_per_tok": 8, "n_shared_experts": 1,
            "moe_intermediate_size": 2048, "max_position_embeddings": 131072, "vocab_size": 163840,
            "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1, "topk_method": "noaux_tc"}
    k2 = from_hf_config(kimi, "kimi-k2")
    assert (k2.mla, k2.experts, k2.dense_layers, k2.head_dim, k2.router_groups) == (True, 384, 1, 128, 1)
    assert round(k2.num_params() / 1e12, 2) in (1.03, 1.04) and round(
        (k2.active_params() - k2.embedding_params()) / 1e9) == 32
    air = {"model_type": "glm4_moe", "attention_bias": True, "first_k_dense_replace": 1, "head_dim": 128,
           "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 10944, "max_position_embeddings": 131072,
           "moe_intermediate_size": 1408, "n_group": 1, "n_routed_experts": 128, "n_shared_experts": 1,
           "num_attention_heads": 96, "num_experts_per_tok": 8, "num_hidden_layers": 46, "num_key_value_heads": 8,
           "num_nextn_predict_layers": 1, "partial_rotary_factor": 0.5, "tie_word_embeddings": False,
           "topk_group": 1, "use_qk_norm": False, "vocab_size": 151552}
    glm = from_hf_config(air, "glm-4.5-air")
    assert (glm.mla, glm.head_dim, glm.q_hidden, glm.kv_hidden, glm.bias) == (False, 128, 12288, 1024, False)
    by_hand = (2 * 151552 * 4096 + 46 * 4096 * (12288 + 2 * 1024 + 12288) + 3 * 4096 * 10944
               + 45 * (129 * 3 * 4096 * 1408 + 4096 * 128) + 93 * 4096)
    assert glm.num_params() == by_hand and round(by_hand / 1e9) == 107
    assert round((glm.active_params() - 2 * 151552 * 4096) / 1e9) == 12
    # the presets are these configs at 4,096 tokens; GLM-4.5 is the Air's layer, wider (report: 355B with its
    # multi-token-prediction layer, an MoE layer of about 3.9B, which is not counted)
    assert dataclasses.replace(k2, name="kimi-k2", seq_len=4096) == model_preset("kimi-k2")
    assert dataclasses.replace(glm, name="glm-4.5-air", seq_len=4096) == model_preset("glm-4.5-air")
    big = from_hf_config({**air, "first_k_dense_replace": 3, "hidden_size": 5120, "intermediate_size": 12288,
                          "moe_intermediate_size": 1536, "n_routed_experts": 160, "num_hidden_layers": 92}, "glm-4.5")
    assert dataclasses.replace(big, seq_len=4096) == model_preset("glm-4.5")
    mtp = 161 * 3 * 5120 * 1536 + 5120 * (12288 + 2 * 1024) + 12288 * 5120
    assert round((big.num_params() + mtp) / 1e9) == 357 and round((big.active_params() - 2 * 151552 * 5120) / 1e9) == 32


@pytest.mark.parametrize("framework", ["megatron-core", "fsdp2-compile"])
def test_chunked_models_price_alike_in_both_evaluators(framework):
    """Random layouts of Maverick at 32,768 tokens with expert parallelism, and of a dense model chunked on 36 of
    48 layers."""
    rng = np.random.default_rng(5)
    n = 80
    mav = dataclasses.replace(from_hf_config(MAVERICK, "maverick"), seq_len=32768)
    z = 2 if framework.startswith("fsdp2") else 1  # (FSDP: no ZeRO-1; with a pipeline ZeRO-2 priced alike)
    table = StrategyTable.from_columns(
        dp=rng.choice([8, 16], n), tp=rng.choice([4, 8], n), pp=rng.choice([4, 8], n), cp=rng.choice([1, 2], n),
        ep=8, micro_batch=1, global_batch=256, recompute=rng.integers(0, 3, n), sequence_parallel=True,
        zero_stage=z, precision=rng.integers(0, 2, n))
    dense = _dense(32768, 8192, chunked=36)
    dense_table = StrategyTable.from_columns(
        dp=rng.choice([2, 4, 8], n), tp=rng.choice([2, 4, 8], n), pp=rng.choice([1, 2, 4], n),
        cp=rng.choice([1, 2, 4], n), micro_batch=1, global_batch=64, recompute=rng.integers(0, 3, n),
        sequence_parallel=True, zero_stage=z)
    for model, cluster, tab in ((mav, "h100x1024", table), (dense, "h100x64", dense_table)):
        cl = cluster_preset(cluster)
        vec = evaluate(model, cl, tab, framework=framework)
        assert vec["feasible"].any()
        assert_rows_equal_reference(model, cl, tab, vec, framework)


def test_chunks_are_checked_and_kept_in_run_files():
    with pytest.raises(InputError, match="model.attention_chunk: expected null with a sliding_window"):
        Transformer(name="x", layers=4, hidden=256, heads=4, seq_len=4096, vocab=100, sliding_window=1024,
                    attention_chunk=2048)
    with pytest.raises(InputError, match="model.attention_chunk: expected an integer >= 1"):
        _dense(8192, 0)
    m = _dense(32768, 8192, chunked=36)
    assert model_from_dict(model_to_dict(m)) == m
    assert "attention_chunk" not in model_to_dict(_dense(8192))  # (run files of models without chunks as before)


def test_evaluate_says_what_chunks_it_priced_and_export_refuses_them(tmp_path, capsys):
    """Maverick at 32,768 tokens: 36 of its 48 layers in chunks of 8,192, in the first line and under --json; at its
    preset's 8,192 tokens, none. export has no chunked attention to write: one line naming the field."""
    from cli import main

    args = ["evaluate", "--model", "llama4-maverick", "--seq-len", "32768", "--cluster", "h100x1024", "--tp", "8",
            "--pp", "8", "--ep", "8", "--global-batch", "512", "--zero-stage", "1"]
    assert main(args) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("; attention in chunks of 8,192 tokens on 36 layers")
    assert main([*args, "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["attention_chunk"] == {"chunk": 8192, "layers": 36} and rep["sliding_window"] is None
    assert main([*args[:3], *args[5:], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["attention_chunk"] is None
    out = tmp_path / "plan.sh"
    assert main(["export", "--framework", "megatron", "--model", "llama4-maverick", "--seq-len", "32768",
                 "--cluster", "h100x1024", "--tp", "8", "--pp", "8", "--ep", "8", "--global-batch", "512",
                 "--zero-stage", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model.attention_chunk: expected none, or at least the sequence's 32,768" in err
    assert not out.exists()


def test_torchtitan_runs_no_context_parallelism_for_windows_or_chunks():
    """torchtitan v0.2.2 runs context parallelism only under SDPA, and a window or chunks need FlexAttention's masks
    (llama4's iRoPE flavors; gpt_oss raises for any cp > 1): under the fsdp2 profiles a chunked or windowed model's cp >
    1 is framework_unsupported, in both evaluators; cp 1 is priced, and the same model without chunks takes cp 2.
    Megatron-Core prices it over Transformer Engine's all-to-all."""
    from costmodel import REASONS
    from costmodel._reference import evaluate_row

    cluster = cluster_preset("h100x64")
    table = StrategyTable.from_columns(dp=[8, 4], tp=[8, 8], pp=[1, 1], cp=[1, 2], micro_batch=1, global_batch=64,
                                       recompute="full", sequence_parallel=True, zero_stage=3)
    chunked, full = _dense(32768, 8192, chunked=36), _dense(32768)
    for fw in ("fsdp2", "fsdp2-async-tp"):
        met = evaluate(chunked, cluster, table, framework=fw)
        assert [REASONS[r] for r in met["reason"]] == ["ok", "framework_unsupported"], fw
        assert [REASONS[int(evaluate_row(chunked, cluster, table.row(i), framework=fw)["reason"])]
                for i in (0, 1)] == ["ok", "framework_unsupported"]
        assert [REASONS[r] for r in evaluate(full, cluster, table, framework=fw)["reason"]] == ["ok", "ok"]
    mc = StrategyTable.from_columns(dp=[16, 8], tp=[4, 4], pp=[1, 1], cp=[1, 2], micro_batch=1, global_batch=64,
                                    recompute="full", sequence_parallel=True, zero_stage=1)  # (kv_heads / tp = 2)
    assert [REASONS[r] for r in evaluate(chunked, cluster, mc, framework="megatron-core")["reason"]] == ["ok", "ok"]
