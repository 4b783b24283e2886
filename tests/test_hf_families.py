"""HuggingFace families read through the shapes plansweep already prices: Llama's layer under other names (Phi-3 /
Phi-4, OLMo 2, Granite, InternLM2, OLMo), Mixtral-shaped experts (OLMoE, Granite MoE), and non-gated MLPs
(StarCoder2, Nemotron's squared ReLU). Each config below is its maker's config.json's shape; each count is checked by
hand and against the parameter count its maker publishes."""

import pytest

from costmodel import InputError, from_hf_config, model_preset

PHI4 = {"model_type": "phi3", "hidden_size": 5120, "intermediate_size": 17920, "num_hidden_layers": 40,
        "num_attention_heads": 40, "num_key_value_heads": 10, "vocab_size": 100352, "max_position_embeddings": 16384,
        "tie_word_embeddings": False, "hidden_act": "silu", "sliding_window": None}
OLMO2_7B = {"model_type": "olmo2", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 100352,
            "max_position_embeddings": 4096, "tie_word_embeddings": False, "hidden_act": "silu"}
OLMOE = {"model_type": "olmoe", "hidden_size": 2048, "intermediate_size": 1024, "num_hidden_layers": 16,
         "num_attention_heads": 16, "num_key_value_heads": 16, "num_experts": 64, "num_experts_per_tok": 8,
         "vocab_size": 50304, "max_position_embeddings": 4096, "tie_word_embeddings": False, "hidden_act": "silu"}
STARCODER2_15B = {"model_type": "starcoder2", "hidden_size": 6144, "intermediate_size": 24576,
                  "num_hidden_layers": 40, "num_attention_heads": 48, "num_key_value_heads": 4, "vocab_size": 49152,
                  "max_position_embeddings": 16384, "sliding_window": 4096, "use_bias": True,
                  "hidden_act": "gelu_pytorch_tanh", "tie_word_embeddings": False}
NEMOTRON4_340B = {"model_type": "nemotron", "hidden_size": 18432, "intermediate_size": 73728,
                  "num_hidden_layers": 96, "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": 192,
                  "vocab_size": 256000, "max_position_embeddings": 4096, "hidden_act": "relu2",
                  "tie_word_embeddings": False}


def test_llama_shaped_families_count_their_reports():
    """Phi-4 (Abdin et al. 2024, arXiv:2412.08905: 14B; the model page 14.7B): 2 x 100,352 x 5,120 embedding and
    head, 40 layers of 5,120 x (5,120 + 2 x 1,280) + 5,120 x 5,120 attention and 3 x 5,120 x 17,920 MLP, 81 RMSNorm
    weights of 5,120. OLMo 2 7B (OLMo et al. 2024, arXiv:2501.00656: 7.30B; its QK norms, 2 x 4,096 a layer, are
    not counted): 2 x 100,352 x 4,096 + 32 x (4 x 4,096^2 + 3 x 4,096 x 11,008) + 65 x 4,096."""
    phi = from_hf_config(PHI4, "phi-4")
    assert (phi.activation, phi.norm, phi.bias, phi.kv_heads, phi.windowed_layers) == ("swiglu", "rmsnorm", False,
                                                                                      10, 0)
    by_hand = 2 * 100352 * 5120 + 40 * (5120 * (5120 + 2 * 1280) + 5120 * 5120 + 3 * 5120 * 17920) + 81 * 5120
    assert phi.num_params() == by_hand and round(by_hand / 1e9, 1) == 14.7
    olmo = from_hf_config(OLMO2_7B, "olmo-2-7b")
    by_hand = 2 * 100352 * 4096 + 32 * (4 * 4096 ** 2 + 3 * 4096 * 11008) + 65 * 4096
    assert olmo.num_params() == by_hand and round((by_hand + 32 * 2 * 4096) / 1e9, 2) == 7.30
    for family in ("granite", "internlm2", "olmo"):
        assert from_hf_config({**OLMO2_7B, "model_type": family}, family).num_params() == by_hand
    # Phi-3-mini's config windows every layer (2,047 keys at 4,096 tokens), as Phi3Attention passes it
    mini = from_hf_config({**PHI4, "sliding_window": 2047, "max_position_embeddings": 4096}, "phi-3-mini")
    assert (mini.sliding_window, mini.windowed_layers) == (2047, 40)


def test_olmoe_counts_its_report():
    """OLMoE-1B-7B (Muennighoff et al. 2024, arXiv:2409.02060: 6.9B total, 1.3B active): 64 experts of 3 x 2,048 x
    1,024 on each of 16 layers, 8 a token, the router 2,048 x 64; 4 x 2,048^2 attention; 2 x 50,304 x 2,048
    embedding and head; 33 RMSNorm weights of 2,048 (its QK norms not counted)."""
    m = from_hf_config(OLMOE, "olmoe")
    expert, rest = 3 * 2048 * 1024, 2 * 50304 * 2048 + 16 * (4 * 2048 ** 2 + 2048 * 64) + 33 * 2048
    assert (m.experts, m.experts_per_token, m.expert_ffn, m.shared_experts, m.moe_layers) == (64, 8, 1024, 0, 16)
    assert m.num_params() == rest + 16 * 64 * expert and round(m.num_params() / 1e9, 1) == 6.9
    assert m.active_params() == rest + 16 * 8 * expert and round(m.active_params() / 1e9, 1) == 1.3
    assert from_hf_config({**OLMOE, "model_type": "granitemoe", "num_local_experts": 64}, "g").num_params() == (
        m.num_params())
    with pytest.raises(InputError, match="--model num_local_experts: expected a value"):
        from_hf_config({**OLMOE, "model_type": "granitemoe"}, "g")


def test_non_gated_families():
    """StarCoder2-15B (Lozhkov et al. 2024, arXiv:2402.19173; the model page 16.0B): a GELU MLP of two matrices,
    LayerNorm, biases on every linear and norm (use_bias), every layer in a 4,096-token window. Nemotron-4 340B
    (NVIDIA 2024, arXiv:2406.11704: 340B; the model page 341B): squared-ReLU MLP of two matrices, no biases."""
    sc = from_hf_config(STARCODER2_15B, "starcoder2-15b")
    assert (sc.activation, sc.norm, sc.bias, sc.sliding_window, sc.windowed_layers) == ("gelu", "layernorm", True,
                                                                                       4096, 40)
    assert round(sc.num_params() / 1e9, 1) == 16.0
    no_bias = from_hf_config({**STARCODER2_15B, "use_bias": False}, "x")
    assert no_bias.bias is False and no_bias.num_params() < sc.num_params()
    nem = from_hf_config(NEMOTRON4_340B, "nemotron-4-340b")
    assert (nem.activation, nem.mlp_matrices, nem.bias, nem.norm) == ("relu", 2, False, "layernorm")
    attention = 18432 * (18432 + 2 * 8 * 192) + 18432 * 18432
    by_hand = 2 * 256000 * 18432 + 96 * (attention + 2 * 18432 * 73728) + (2 * 96 + 1) * 2 * 18432
    assert nem.num_params() == by_hand and round(by_hand / 1e9) == 341


def test_dense_and_gpt_oss_presets_count_their_model_cards():
    """Qwen3-32B's model card: 32.8B, 31.2B without the embedding and head; Qwen2.5-72B's: 72.7B. gpt-oss-20b's
    (arXiv:2508.10925 Table 1): 20.91B, 3.61B active (the unembedding counted, the embedding not)."""
    q3 = model_preset("qwen3-32b")
    assert round(q3.num_params() / 1e9, 1) == 32.8
    assert round((q3.num_params() - 2 * q3.embedding_params()) / 1e9, 1) == 31.2
    assert round(model_preset("qwen2.5-72b").num_params() / 1e9, 1) == 72.7
    oss = model_preset("gpt-oss-20b")
    assert round(oss.num_params() / 1e9, 2) == 20.91
    assert round((oss.active_params() - oss.embedding_params()) / 1e9, 2) == 3.61
    assert (oss.sliding_window, oss.windowed_layers) == (128, 12)
