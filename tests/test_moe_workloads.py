"""Mixture-of-experts workloads: the fields, their closed forms against
hand calculations and published parameter counts, the HuggingFace loader, and the evaluators'
refusal until expert layers are priced. Dense models keep their numbers."""

import dataclasses

import pytest

from cli import main
from costmodel import (
    InputError,
    StrategyTable,
    Transformer,
    cluster_preset,
    evaluate,
    from_hf_config,
    memory_screen,
    model_preset,
)

B = 1e9


# ---- dense models: the numbers of before the MoE fields ------------------------------------
@pytest.mark.parametrize("name", ["gpt3-175b", "megatron-1t"])
def test_gpt_presets_keep_their_closed_forms(name):
    m = model_preset(name)
    L, h, s, V = m.layers, m.hidden, m.seq_len, m.vocab
    # Per layer: 4h^2 + 4h attention (QKV, output, biases), 8h^2 + 5h MLP (f = 4h, biases),
    # 4h for two LayerNorms; learned positions s h, tied head, final LayerNorm 2h.
    assert m.num_params() == L * (12 * h * h + 13 * h) + V * h + s * h + 2 * h
    assert m.active_params() == m.num_params() and m.moe_layers == 0 and not m.is_moe
    # Korthikanti et al. 2022 Eq. 7 per sequence: 72 L s h^2 (1 + s/6h + V/12hL)
    assert m.model_flops_per_sample() == pytest.approx(72 * L * s * h * h * (1 + s / (6 * h) + V / (12 * h * L)),
                                                       rel=1e-12)


def test_llama3_8b_keeps_its_published_count_and_flops():
    m = model_preset("llama3-8b")
    assert m.num_params() == 8_030_261_248  # meta-llama/Meta-Llama-3-8B's safetensors count
    h, hk, f, s, V, L = 4096, 1024, 14336, 8192, 128256, 32
    per_token = L * (2 * (h * (h + 2 * hk) + h * h + 3 * h * f) + 4 * s * h) + 2 * h * V
    assert m.model_flops_per_sample() == pytest.approx(3 * per_token * s, rel=1e-12)
    assert m.active_params() == m.num_params()


# ---- a tiny MoE model worked by hand --------------------------------------------------------
def _tiny(**kw):
    fields = dict(name="tiny", layers=4, hidden=8, heads=2, seq_len=3, vocab=10, activation="swiglu",
                  norm="rmsnorm", bias=False, tied_embeddings=False, learned_positions=False, experts=4,
                  experts_per_token=2, shared_experts=1, expert_ffn_hidden=4, shared_expert_ffn_hidden=6,
                  dense_layers=1)
    return Transformer(**{**fields, **kw})


def test_tiny_moe_by_hand():
    m = _tiny()
    # dense layer: attention 4 h^2 = 256, SwiGLU 3 h f = 3*8*32 = 768 (f = 4h), 2 RMSNorms 16
    assert m.layer_params() == 1040
    # routed expert 3*8*4 = 96; MoE layer: 256 + router 8*4 + 4*96 + shared 3*8*6 + 16 = 832
    assert m.expert_params() == 96 and m.router_params() == 32 and m.moe_layer_expert_params() == 384
    assert m.moe_layer_params() == 832 and m.moe_layers == 3
    # 1040 + 3*832 + embedding 80 + head 80 + final norm 8
    assert m.num_params() == 3704
    assert m.active_params() == 3704 - 3 * (4 - 2) * 96
    # forward FLOPs a token: dense 2*(256 + 768) + 4*s*h = 2144; MoE 2*(256 + 32 + 2*96 + 144) + 96
    # = 1344; head 2*8*10 = 160; per sequence 3 x 3 tokens x (2144 + 3*1344 + 160)
    assert m.layer_fwd_flops_per_token() == 2144 and m.moe_layer_fwd_flops_per_token() == 1344
    assert m.model_flops_per_sample() == 3 * 3 * 6336


def test_moe_layer_freq_places_every_other_layer():
    # 5 layers, 1 dense, then every 2nd: layers 2 and 4 (0-based) are MoE
    assert _tiny(layers=5, moe_layer_freq=2).moe_layers == 2
    assert _tiny(layers=5, dense_layers=0, moe_layer_freq=1).moe_layers == 5


@pytest.mark.parametrize("change,needle", [
    (dict(experts=0), "model.experts: expected an integer >= 1, got 0"),
    (dict(experts_per_token=5), "model.experts_per_token: expected an integer in [1, experts=4], got 5"),
    (dict(shared_experts=-1), "model.shared_experts: expected an integer >= 0, got -1"),
    (dict(expert_ffn_hidden=0), "model.expert_ffn_hidden: expected an integer >= 1 (or null for its default), got 0"),
    (dict(dense_layers=4), "model.dense_layers: expected fewer than layers=4"),
    (dict(moe_layer_freq=4), "model.moe_layer_freq: expected at most 3, the layers after the dense ones (layers=4 "
     "less dense_layers=1), got 4"),
    (dict(head_dim=0), "model.head_dim: expected an integer >= 1"),
    (dict(experts=1), "model.experts_per_token: expected 1 for a dense model (experts=1), got 2"),
    (dict(experts=1, experts_per_token=1), "model.shared_experts: expected 0 for a dense model (experts=1), got 1"),
])
def test_bad_moe_fields_name_the_field(change, needle):
    with pytest.raises(InputError) as err:
        _tiny(**change)
    assert needle in str(err.value)


# ---- presets against their published counts ------------------------------------------------
# Tolerances: half the last digit of the published figure, unless a comment says more.
@pytest.mark.parametrize("name,total,active,tol", [
    ("mixtral-8x7b", 46.7 * B, 12.9 * B, 0.05 * B),  # arXiv:2401.04088: 46.7B / 12.9B
    ("mixtral-8x22b", 141 * B, 39 * B, 0.5 * B),  # Mistral AI, "Cheaper, Better, Faster, Stronger"
    ("qwen3-235b-a22b", 235 * B, 22 * B, 0.5 * B),  # Qwen/Qwen3-235B-A22B model card
])
def test_moe_presets_match_published_counts(name, total, active, tol):
    m = model_preset(name)
    assert m.num_params() == pytest.approx(total, abs=tol)
    assert m.active_params() == pytest.approx(active, abs=tol)


def test_qwen3_30b_a3b_counts():
    m = model_preset("qwen3-30b-a3b")
    # Qwen/Qwen3-30B-A3B model card: 30.5B total, 29.9B non-embedding, 3.3B activated. Activated
    # by hand: 48 x (8 experts x 3*2048*768 + attention 2*2048*(4096 + 512) + router 2048*128)
    # + 2 x 151936*2048 = 3.353B: the card's 3.3B is truncated, hence 2%.
    assert m.num_params() == pytest.approx(30.5 * B, abs=0.05 * B)
    assert m.num_params() - 2 * 151936 * 2048 == pytest.approx(29.9 * B, abs=0.05 * B)
    assert m.active_params() == pytest.approx(3.3 * B, rel=0.02)


def test_deepseek_v3_counts_with_its_multi_head_latent_attention():
    m = model_preset("deepseek-v3")
    assert m.moe_layers == 58 and m.experts == 256 and m.experts_per_token == 8
    # MLA per layer (arXiv:2412.19437 Sec. 4.2: q_lora_rank 1536, kv_lora_rank 512, 128 heads of
    # 128 + 64 rope dims for QK and 128 for V, with the two low-rank RMSNorms), by hand
    h, a = 7168, 128
    mla = h * 1536 + 1536 + 1536 * a * 192 + h * (512 + 64) + 512 + 512 * a * (128 + 128) + a * 128 * h
    assert m._attn_params() == mla
    assert mla == pytest.approx(187.1e6, rel=1e-3)
    # the published 671B total (half its last digit) and 37B activated, within 1B since the report
    # does not say whether 37B counts the 0.93B input embedding
    assert m.num_params() == pytest.approx(671 * B, abs=0.5 * B)
    assert m.active_params() == pytest.approx(37 * B, abs=1 * B)
    # forward FLOPs a token: 2 per weight of the attention, plus QK^T over 192 and AV over 128 per head
    s = 4096
    core = 2 * s * a * 192 + 2 * s * a * 128
    per_token = m.moe_layer_fwd_flops_per_token()
    weights = mla - 1536 - 512 + h * 256 + 3 * h * 2048 * (8 + 1)
    assert per_token == pytest.approx(2 * weights + core, rel=1e-12)


def test_multi_head_latent_attention_fields_are_checked():
    base = dict(name="x", layers=2, hidden=64, heads=4, vocab=10)
    with pytest.raises(InputError, match="model.v_head_dim"):
        Transformer(**base, v_head_dim=32)  # MLA's fields only with kv_lora_rank
    with pytest.raises(InputError, match="model.kv_lora_rank"):
        Transformer(**base, kv_heads=2, kv_lora_rank=16)  # MLA gives every head its own K/V
    with pytest.raises(InputError, match="model.qk_rope_head_dim"):
        Transformer(**base, kv_lora_rank=16, qk_rope_head_dim=-1)
    m = Transformer(**base, kv_lora_rank=16, qk_rope_head_dim=8, v_head_dim=32)
    # Q and K 4 x (16 + 8) = 96 wide, V and the output 4 x 32 = 128: the core's mean width 112
    assert (m.q_hidden, m.o_hidden, m.core_hidden) == (96, 128, 112)
    # no q_lora_rank: one 64 x 96 Q matrix; KV down 64 x (16 + 8), up 16 x 4 x (16 + 32), output 128 x 64
    assert m._attn_params() == 64 * 96 + 64 * 24 + 16 * 4 * 48 + 128 * 64 + 16


# ---- HuggingFace config.json ---------------------------------------------------------------
# The keys plansweep reads, with the values of each model's published config.json.
MIXTRAL_8X7B = {  # mistralai/Mixtral-8x7B-v0.1
    "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "num_attention_heads": 32,
    "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8,
    "tie_word_embeddings": False, "vocab_size": 32000,
}
DEEPSEEK_V3 = {  # deepseek-ai/DeepSeek-V3
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_act": "silu",
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
    "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256,
    "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1, "q_lora_rank": 1536,
    "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "max_position_embeddings": 163840, "tie_word_embeddings": False, "vocab_size": 129280,
    "n_group": 8, "topk_group": 4, "topk_method": "noaux_tc",
}
QWEN3_235B = {  # Qwen/Qwen3-235B-A22B
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 12288, "moe_intermediate_size": 1536, "head_dim": 128, "num_attention_heads": 64,
    "num_key_value_heads": 4, "num_hidden_layers": 94, "num_experts": 128, "num_experts_per_tok": 8,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "max_position_embeddings": 40960,
    "tie_word_embeddings": False, "vocab_size": 151936,
}
QWEN15_MOE = {  # Qwen/Qwen1.5-MoE-A2.7B (qwen2_moe, with a shared expert)
    "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "hidden_act": "silu", "hidden_size": 2048,
    "intermediate_size": 5632, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
    "num_attention_heads": 16, "num_key_value_heads": 16, "num_hidden_layers": 24, "num_experts": 60,
    "num_experts_per_tok": 4, "decoder_sparse_step": 1, "mlp_only_layers": [], "max_position_embeddings": 8192,
    "tie_word_embeddings": False, "vocab_size": 151936,
}


def test_mixtral_config_is_the_preset():
    m = from_hf_config(MIXTRAL_8X7B, "x")
    assert dataclasses.replace(m, name="mixtral-8x7b") == model_preset("mixtral-8x7b")


@pytest.mark.parametrize("config,preset", [(DEEPSEEK_V3, "deepseek-v3"), (QWEN3_235B, "qwen3-235b-a22b")])
def test_moe_configs_are_the_presets_at_their_pretraining_length(config, preset):
    m = from_hf_config(config, "x")
    p = model_preset(preset)
    assert dataclasses.replace(m, name=p.name, seq_len=p.seq_len) == p


def test_qwen2_moe_shared_expert():
    m = from_hf_config(QWEN15_MOE, "x")
    assert (m.experts, m.experts_per_token, m.shared_experts) == (60, 4, 1)
    assert (m.expert_ffn, m.shared_expert_ffn, m.dense_layers, m.moe_layers) == (1408, 5632, 0, 24)
    # Qwen's Qwen1.5-MoE announcement: 14.3B parameters, 2.7B activated
    assert m.num_params() == pytest.approx(14.3 * B, abs=0.05 * B)
    assert m.active_params() == pytest.approx(2.7 * B, abs=0.05 * B)


def test_qwen_layer_placement_keys():
    leading = from_hf_config({**QWEN3_235B, "mlp_only_layers": [0, 1]}, "x")
    assert (leading.dense_layers, leading.moe_layers) == (2, 92)
    alternate = from_hf_config({**QWEN3_235B, "decoder_sparse_step": 2}, "x")  # layers 1, 3, ..., 93
    assert (alternate.moe_layer_freq, alternate.moe_layers) == (2, 47)


@pytest.mark.parametrize("config,change,needle", [
    (QWEN3_235B, {"mlp_only_layers": [3]}, "--model mlp_only_layers: expected the first layers"),
    (DEEPSEEK_V3, {"moe_layer_freq": 2}, "--model moe_layer_freq: expected 1"),
    (DEEPSEEK_V3, {"n_routed_experts": None}, "--model n_routed_experts: expected a value"),
    (MIXTRAL_8X7B, {"num_experts_per_tok": 9}, "model.experts_per_token: expected an integer in [1, experts=8]"),
])
def test_bad_moe_configs_name_the_key(config, change, needle):
    with pytest.raises(InputError) as err:
        from_hf_config({**config, **change}, "x")
    assert needle in str(err.value)


# ---- the evaluators price MoE models and other head sizes
# (tests/test_moe_pricing.py compares them with the scalar reference; tests/test_hetero.py the mixed-
# cluster evaluator with the homogeneous one on MoE rows)
def test_evaluators_price_moe_models_and_other_head_sizes():
    cluster = cluster_preset("h100x64")
    table = StrategyTable.from_columns(dp=8, tp=1, pp=8, ep=8, micro_batch=1, global_batch=64, recompute="full")
    model = dataclasses.replace(model_preset("mixtral-8x7b"), seq_len=4096)
    for fn in (evaluate,):
        assert fn(model, cluster, table)["ep_comm_s"][0] > 0
    assert memory_screen(model, cluster, table)[1][0] == 0
    # head_dim 32 on 4 heads of a 64-wide model: Q and the attention output are 128 wide, so the
    # attention GEMMs and the compute take longer than at hidden / heads = 16
    wide = Transformer(name="x", layers=2, hidden=64, heads=4, head_dim=32, vocab=10)
    narrow = dataclasses.replace(wide, head_dim=None)
    dense = StrategyTable.from_columns(dp=8, tp=1, pp=1, micro_batch=1, global_batch=64)
    assert evaluate(wide, cluster, dense)["compute_s"][0] > evaluate(narrow, cluster, dense)["compute_s"][0]


@pytest.mark.parametrize("command", ["evaluate", "rank"])
def test_cli_prices_qwen3_moe(command, capsys):
    args = ["--ep", "8", "--pp", "8"] if command == "evaluate" else ["--pp", "4,8", "--zero-stage", "1"]
    assert main([command, "--model", "qwen3-30b-a3b", "--cluster", "h100x64", "--global-batch", "512", *args]) == 0
    assert "qwen3-30b-a3b on h100x64" in capsys.readouterr().out


def test_run_files_of_a_dense_model_read_as_before():
    from sweep._rundir import model_from_dict, model_to_dict

    # Transformer's fields before the MoE ones: a dense model's run.json, its identity on resume
    # and Parquet metadata keep exactly these keys.
    before = {"name", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "seq_len", "vocab", "activation", "norm",
              "bias", "tied_embeddings", "learned_positions", "kind"}
    assert set(model_to_dict(model_preset("llama3-70b"))) == before
    for name in ("llama3-70b", "deepseek-v3", "qwen3-30b-a3b"):
        assert model_from_dict(model_to_dict(model_preset(name))) == model_preset(name)
    assert model_to_dict(model_preset("mixtral-8x7b"))["experts"] == 8
