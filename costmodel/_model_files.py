"""Models, clusters and strategies from the files users already have: plansweep's own fields, a
HuggingFace ``config.json``, or Calculon's model, system and execution files. ``model_from_mapping``
tells the model files apart by their keys (``is_calculon_system`` and ``is_calculon_execution`` the
others); nothing here needs ``transformers``.

HuggingFace families read (``model_type``):
    llama, mistral, qwen2, qwen3,  gated SiLU MLP (SwiGLU), RMSNorm, rotary positions, no
    olmo, olmo2, granite,          biases counted (Qwen2's Q/K/V biases are 0.01% of its
    internlm2, phi3                parameters and are left out), GQA from num_key_value_heads;
                                   OLMo 2's QK norms and Granite's multipliers left out; Phi-3's
                                   fused qkv_proj and gate_up_proj are the same matrices
    starcoder2                     GeLU MLP, LayerNorm, biases where use_bias (the default)
    nemotron                       squared-ReLU MLP (relu2: two matrices, priced as relu),
                                   LayerNorm, biases where attention_bias or mlp_bias
    gemma, gemma2, gemma3_text,    a GELU-gated MLP (geglu, whatever hidden_act says: Gemma 1's reads
    gemma3                         gelu; gemma3: its text_config, vocab_size and
                                   max_position_embeddings by Gemma3TextConfig's defaults where it
                                   leaves them out), RMSNorm, no biases, rotary positions, head_dim, embeddings
                                   tied unless tie_word_embeddings is false; Gemma 2's window on every
                                   other layer from the first, Gemma 3's on all but every
                                   sliding_window_pattern-th (6); the second pair of norms a layer
                                   (Gemma 2 and 3), the QK norms, the logit soft-capping and the
                                   embedding's scaling are left out
    gpt_neox                       GeLU MLP, LayerNorm with biases, rotary positions
    gpt2                           GeLU MLP, LayerNorm with biases, learned positions, tied head
    gpt_oss                        as mixtral (num_local_experts of intermediate_size,
                                   num_experts_per_tok a token, every layer MoE), with the biases of
                                   Q, K, V, the output and the experts counted (attention_bias), the
                                   head size from head_dim and the window from layer_types; its
                                   attention sinks (a logit a head) and the router's bias left out
    mixtral, granitemoe, olmoe     as mistral; num_local_experts (OLMoE: num_experts) routed
                                   experts of intermediate_size, num_experts_per_tok per token,
                                   every layer MoE (Mistral AI's Mixtral-8x7B-v0.1 config.json)
    qwen2_moe, qwen3_moe           as qwen2 / qwen3; num_experts of moe_intermediate_size,
                                   num_experts_per_tok, one shared expert of
                                   shared_expert_intermediate_size (qwen2_moe), layer i MoE when
                                   (i + 1) % decoder_sparse_step == 0 and i is not in
                                   mlp_only_layers (read when those are the first layers, or
                                   empty); dense layers of intermediate_size; Qwen2-MoE's
                                   shared-expert gate (an h x 1
                                   matrix) is left out with its Q/K/V biases, as for qwen2
    llama4, llama4_text            Llama 4 (llama4: its text_config; the vision encoder is not priced):
                                   as llama, num_local_experts routed experts and one shared expert
                                   of intermediate_size, num_experts_per_tok a token, layer i MoE
                                   when (i + 1) % interleave_moe_layer_step == 0 (moe_layers, when
                                   given, must say the same), dense layers of intermediate_size_mlp;
                                   chunked attention (attention_chunk_size) on the layers with
                                   rotary positions (no_rope_layers, or all but every
                                   no_rope_layer_interval-th, 4); the QK norms and the attention
                                   temperature tuning left out
    deepseek_v3, deepseek_v2,      n_routed_experts and n_shared_experts of moe_intermediate_size,
    kimi_k2, glm4_moe              num_experts_per_tok, first_k_dense_replace dense layers of
                                   intermediate_size, moe_layer_freq 1, group-limited routing
                                   from n_group / topk_group (none with topk_method "greedy");
                                   multi-head latent attention from kv_lora_rank, q_lora_rank
                                   (null: full-rank Q), qk_nope_head_dim (plansweep's head_dim),
                                   qk_rope_head_dim and v_head_dim; the multi-token-prediction
                                   layers are not counted. kimi_k2 (Moonshot AI's Kimi K2) is
                                   DeepSeek-V3's architecture; glm4_moe (GLM-4.5) has grouped-query
                                   attention with head_dim instead of MLA, its Q/K/V biases and QK
                                   norms left out as for qwen2
head_dim is read in every family but those with MLA (whose head sizes are MLA's): a head size
other than hidden_size / num_attention_heads (Qwen3's dense and MoE models, Mistral-Nemo) sets
Transformer.head_dim, Q and the attention output heads x head_dim wide.
Expert layers are priced by both evaluators; the closed forms (Transformer.num_params,
active_params, model_flops_per_sample) count them too.
Sequence length is max_position_embeddings (n_positions for GPT-2): the length the model was
built for; --seq-len (or a plansweep model file) trains at another. Sliding-window attention is read
as Transformer.sliding_window and window_layers (how many layers take it; None: all): mistral's and
mixtral's sliding_window (null: none) on every layer; the qwen families' where use_sliding_window is
true, on the layers from max_window_layers on; phi3's and starcoder2's on every layer; any
family's where layer_types names "sliding_attention" layers, on those. A config that plansweep cannot
price as it is (MoE keys in a dense family) is refused with the key that says so.

Calculon (calculon-ai/calculon, models/*.json): hidden, feedforward, seq_size, attn_heads,
attn_size, num_blocks. Its files carry no vocabulary; plansweep takes Megatron-LM's padded GPT
vocabulary of 51,200, with a GeLU MLP, LayerNorm, biases, learned positions and a tied head
(the GPT shapes Calculon's files describe).

Calculon execution files (calculon-ai/calculon at caa4b11f8fe1fee3ba57adaacb7590d7deabd053:
``Llm.Execution`` in calculon/llm/llm.py, its fields(), from_json and constructor checks; an example
is examples/3072_t4_p64_d12_mbs4_full.json): all 23 fields, no others, as from_json asserts.
``strategy_from_calculon`` reads one as plansweep's strategy columns (costmodel._strategy):
    tensor_par, pipeline_par, data_par   tp, pp, dp (integers >= 1); num_procs must equal their
                                         product (Calculon asserts it) and fit the cluster
    batch_size, microbatch_size          global_batch, micro_batch; batch_size a multiple of
                                         data_par x microbatch_size (Calculon's two asserts)
    pipeline_interleaving                vpp, with the interleaved schedule when > 1, else 1f1b
                                         (Calculon's schedule is 1F1B, interleaved or not); 1 when
                                         pipeline_par is 1
    activation_recompute                 none -> none, full -> full, attn_only -> selective: Calculon's
                                         attn_only recomputes exactly the attention core (Q K^T, softmax,
                                         its dropout, the product with V), Korthikanti et al. 2022
                                         Sec. 5's selective recomputation, which plansweep's selective
                                         prices (under a framework whose selective policy is that one)
    optimizer_sharding                   zero_stage 1 (Calculon shards the fp32 master weights and Adam
                                         moments over data_par: the distributed optimizer), else 0
    datatype                             bfloat16 -> bf16, float16 -> fp16, float8 -> fp8; float32 refused
    tensor_par_comm_type                 rs_ag -> sequence_parallel (Calculon's _sequence_par is exactly
                                         rs_ag: reduce-scatter and all-gather, activations split over
                                         tp between them), ar and p2p_rs_ag -> false; with tensor_par 1
                                         false whatever it says (nothing to split)
    data_par_overlap                     overlap_dp
Read only for what plansweep already assumes (accepted, and priced plansweep's way):
    fused_activation                     either value: element-wise work and what the MLP keeps come
                                         from the framework profile (--framework), not from the file
    tensor_par_net, data_par_net,        0 (the node's link) or 1 (the network between nodes), checked
    pipeline_par_net                     against where plansweep puts each group of more than one rank:
                                         Megatron's order, tp innermost, then dp, then pp (Cluster), a
                                         group inside a node when the ranks it spans fit one node (tp
                                         and dp: and divide it); a different choice is refused; on a
                                         cluster whose two links are alike either index is read
    seq_par_ag_redo                      true with rs_ag, tensor_par > 1 and recompute other than full:
                                         Megatron's sequence parallelism keeps the layer norm's split
                                         output and gathers it again for the backward pass (Korthikanti
                                         et al. 2022 Sec. 4.2.2, activations sbh/t); false otherwise
                                         (Calculon asserts false without rs_ag or with full recompute)
    optimizer_sharding, data_par_overlap with data_par 1 (Calculon asserts data_par > 1): read, they
                                         change nothing there
Refused, one line naming the file and the field (plansweep cannot price them): weight_offload,
activations_offload or optimizer_offload true; training false; attention_type multiquery (a model
property: write kv_heads 1 in a plansweep model file); tensor_par_overlap ring or pipe (plansweep
exposes tensor-parallel communication); tensor_par_comm_type ar with tensor_par and pipeline_par > 1
(Calculon then hands whole activations from stage to stage, plansweep prices Megatron's
scatter / gather hand-off of 1 / tp of them, which is Calculon's p2p_rs_ag); num_procs other than
tp x pp x dp or above the cluster's GPUs; wrong types and values outside Calculon's.
"""

from __future__ import annotations

import dataclasses
import math
import re

from costmodel._errors import InputError
from costmodel._hardware import CLUSTER_INT_MAX, EFFICIENCY, GPU, MAX_GBPS, MAX_LATENCY_S, Cluster, gpu_preset
from costmodel._strategy import INT_COLUMN_MAX  # the strategy table's own bound
from costmodel._workloads import MODEL_INT_MAX, Transformer

# Routed experts of intermediate_size, every layer MoE, none shared (Mixtral's shape; OLMoE names the count num_experts)
_MIXTRAL_SHAPED = ("mixtral", "gpt_oss", "olmoe", "granitemoe")
_MOE_FAMILIES = ("qwen2_moe", "qwen3_moe", "deepseek_v3", "deepseek_v2", "kimi_k2", "glm4_moe", "llama4_text",
                 *_MIXTRAL_SHAPED)
# Llama's layer under other names (gated SiLU MLP, RMSNorm, no biases, rotary positions): OLMo and OLMo 2, IBM's
# Granite, InternLM2, and Phi-3 / Phi-4 (their fused qkv_proj and gate_up_proj hold the same matrices); the QK norms
# (OLMo 2) and Granite's scalar multipliers change no shape.
_LLAMA_SHAPED = ("olmo", "olmo2", "granite", "internlm2", "phi3")
# Gemma's MLPs gate with GELU (GemmaMLP and its successors: gelu_pytorch_tanh on the gate projection), whatever its
# config's hidden_act says (Gemma 1's reads "gelu"); their embeddings are tied unless the config says otherwise.
_GEGLU_FAMILIES = ("gemma", "gemma2", "gemma3_text")
# Multimodal configs whose language model is their text_config, and that text_config's family; Gemma3TextConfig's
# defaults for what Gemma 3's text_config leaves out (transformers' configuration_gemma3.py).
_NESTED = {"llama4": "llama4_text", "gemma3": "gemma3_text"}
# The defaults of the text model's config class, which a multimodal config saves only where they differ
# (transformers Gemma3TextConfig: vocab_size 262208, max_position_embeddings 131072, num_attention_heads 8,
# num_key_value_heads 4, head_dim 256; google/gemma-3-4b-it's text_config sets none of the heads, the 12B's no head_dim)
_NESTED_DEFAULTS = {"gemma3": {"vocab_size": 262208, "max_position_embeddings": 131072, "num_attention_heads": 8,
                               "num_key_value_heads": 4, "head_dim": 256}}
HF_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", *_LLAMA_SHAPED, "gpt_neox", "gpt2", "starcoder2", "nemotron",
               *_MOE_FAMILIES, *_GEGLU_FAMILIES, *_NESTED)
_GATED = ("llama", "mistral", "qwen2", "qwen3", *_LLAMA_SHAPED, *_MOE_FAMILIES, *_GEGLU_FAMILIES)
_HF_ACTIVATIONS = {"silu": "swiglu", "swish": "swiglu", "gelu": "gelu", "gelu_new": "gelu", "gelu_fast": "gelu",
                   "gelu_pytorch_tanh": "gelu", "relu": "relu", "relu2": "relu"}  # (relu2, Nemotron's squared ReLU:
# the same two matrices and one element-wise pass as relu)
_MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size")
CALCULON_KEYS = ("hidden", "feedforward", "seq_size", "attn_heads", "attn_size", "num_blocks")
CALCULON_VOCAB = 51200  # Megatron-LM's GPT vocabulary padded to a multiple of 128 x 8


# The HuggingFace config key a Transformer field is read from, to name it where the model's own checks refuse a value
# (gpt2 names its sizes n_layer, n_embd, n_head and n_positions; the expert count's key is the family's)
_HF_KEYS = {"layers": "num_hidden_layers", "hidden": "hidden_size", "heads": "num_attention_heads",
            "kv_heads": "num_key_value_heads", "ffn_hidden": "intermediate_size", "vocab": "vocab_size",
            "seq_len": "max_position_embeddings", "head_dim": "head_dim", "experts_per_token": "num_experts_per_tok",
            "router_groups": "n_group", "router_group_topk": "topk_group", "sliding_window": "sliding_window",
            "attention_chunk": "attention_chunk_size", "expert_ffn_hidden": "moe_intermediate_size",
            "experts": "num_local_experts / num_experts / n_routed_experts"}
_GPT2_KEYS = {"layers": "n_layer", "hidden": "n_embd", "heads": "n_head", "kv_heads": "n_head",
              "seq_len": "n_positions", "ffn_hidden": "n_inner"}


# Where a family reads a field from a key of its own (the families' readers below)
_FAMILY_KEYS = {
    "dense_layers": {**dict.fromkeys(("qwen2_moe", "qwen3_moe"), "mlp_only_layers"),
                     **dict.fromkeys(("deepseek_v3", "deepseek_v2", "kimi_k2", "glm4_moe"), "first_k_dense_replace")},
    "moe_layer_freq": {"qwen2_moe": "decoder_sparse_step", "qwen3_moe": "decoder_sparse_step",
                       "llama4_text": "interleave_moe_layer_step"},
    "shared_experts": dict.fromkeys(("deepseek_v3", "deepseek_v2", "kimi_k2", "glm4_moe"), "n_shared_experts"),
    "shared_expert_ffn_hidden": {"qwen2_moe": "shared_expert_intermediate_size",
                                 "qwen3_moe": "shared_expert_intermediate_size"},
    "experts": {"olmoe": "num_experts", "qwen2_moe": "num_experts", "qwen3_moe": "num_experts",
                **dict.fromkeys(("deepseek_v3", "deepseek_v2", "kimi_k2", "glm4_moe"), "n_routed_experts"),
                **dict.fromkeys(("mixtral", "gpt_oss", "granitemoe", "llama4_text"), "num_local_experts")},
    "ffn_hidden": {"llama4_text": "intermediate_size_mlp"},
    "expert_ffn_hidden": {"llama4_text": "intermediate_size"},
}
_CALCULON_FIELDS = {"layers": "num_blocks", "hidden": "hidden", "heads": "attn_heads", "ffn_hidden": "feedforward",
                    "seq_len": "seq_size"}


def _text_config(data: dict) -> tuple[dict, str | None]:
    """(the mapping a HuggingFace config's language model is read from, its family): a multimodal config's
    text_config (_NESTED) where it has one."""
    family = data.get("model_type")
    if isinstance(family, str) and family in _NESTED and isinstance(data.get("text_config"), dict):
        return data["text_config"], _NESTED[family]
    return data, family if isinstance(family, str) else None


def _hf_key(field: str, data: dict) -> str:
    """The config key (module notes above) of a Transformer field, or the field itself where none maps."""
    text, family = _text_config(data)
    if family == "gpt2" and field in _GPT2_KEYS:
        return _GPT2_KEYS[field]
    if field == "head_dim" and text.get("kv_lora_rank") is not None:
        return "qk_nope_head_dim"  # (MLA's head size: _hf_moe_fields)
    return _FAMILY_KEYS.get(field, {}).get(family) or _HF_KEYS.get(field, field)


def _renamed(expected: str, name) -> str:
    """``expected`` with each Transformer field written as ``field=value`` renamed by ``name`` (a file's own key)."""
    fields = sorted((f.name for f in dataclasses.fields(Transformer)), key=len, reverse=True)
    return re.sub(r"\b(" + "|".join(fields) + r")=", lambda m: f"{name(m.group(1))}=", expected)


def model_from_mapping(data: dict, name: str, argument: str = "--model") -> Transformer:
    """A Transformer from a mapping read from a file: HuggingFace config (has model_type or
    architectures), Calculon model (has num_blocks and attn_heads), or Transformer's fields."""
    odd = [k for k in data if not isinstance(k, str)]
    if odd:  # (a YAML file's keys can be numbers, dates, ...)
        raise InputError(argument, "keys that are strings (field names)", odd[0])
    fields = {f.name for f in dataclasses.fields(Transformer)}
    hf = "model_type" in data or "architectures" in data
    # (a file of Calculon's keys with a stray one is Calculon's, refused naming the stray key; more of Transformer's
    # fields than Calculon's: a plansweep model file)
    calculon = not hf and len(set(data) & (set(CALCULON_KEYS) - {"hidden"})) > len(set(data) & (fields - {"hidden"}))
    looks_hf = set(data) & {"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                            "vocab_size", "n_embd", "n_layer"}
    if not hf and not calculon and looks_hf and not set(data) & fields:
        raise InputError(f"{argument} model_type", "a value (a HuggingFace config.json names its family; or "
                         "architectures)", "missing")
    try:
        if hf:
            return from_hf_config(data, name, argument)
        if calculon:
            return from_calculon(data, name, argument)
        unknown = set(data) - fields
        if unknown:
            raise InputError(argument, "fields among " + ", ".join(sorted(fields))
                             + " (or a HuggingFace config.json, or a Calculon model file)", sorted(unknown, key=str)[0])
        kind = data.get("kind", "transformer")
        for key in ("layers", "hidden", *(("heads", "seq_len", "vocab") if kind == "transformer" else ())):
            if key not in data:  # (a transformer's defaults, 1 head and 1 token, are no one's model)
                raise InputError(f"{argument} {key}", f"a value (a model file of kind {kind} must set it)", "missing")
        return Transformer(**{"name": name, **data})
    except InputError as exc:  # Transformer's own checks ("model.layers"): the file's argument and field (a HuggingFace
        # config's own key, a Calculon file's)
        if not exc.argument.startswith("model."):
            raise
        def name_of(f: str) -> str:
            return _hf_key(f, data) if hf else _CALCULON_FIELDS.get(f, f) if calculon else f

        where = argument
        if hf and _text_config(data)[0] is not data:
            where = f"{argument} text_config"
        field = exc.argument.removeprefix("model.")
        raise InputError(f"{where} {name_of(field)}", _renamed(exc.expected, name_of), exc.got) from None


def _get(data: dict, key: str, argument: str, default=None, kind=int):
    v = data.get(key, default)
    if v is None:
        raise InputError(f"{argument} {key}", "a value (the config must set it)", "missing")
    if kind is int and not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
        raise InputError(f"{argument} {key}", "an integer >= 1", v)
    return v


def _flag(data: dict, key: str, argument: str, default: bool) -> bool:
    """A true / false field of a config (JSON's true or false; absent or null: ``default``)."""
    v = data.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise InputError(f"{argument} {key}", "true or false", v)
    return v


def from_hf_config(data: dict, name: str, argument: str = "--model") -> Transformer:
    """A Transformer from a HuggingFace config.json of a family in HF_FAMILIES."""
    family = data.get("model_type")
    if isinstance(family, str) and family in _NESTED:  # (Llama4ForConditionalGeneration,
        # Gemma3ForConditionalGeneration: the language model is the text_config; the vision encoder is not priced)
        text = data.get("text_config")
        if not isinstance(text, dict):
            raise InputError(f"{argument} text_config", f"the language model's config (model_type {family})", text)
        data, family = ({**_NESTED_DEFAULTS.get(family, {}), **text}), _NESTED[family]
        argument = f"{argument} text_config"
    if family not in HF_FAMILIES:
        raise InputError(f"{argument} model_type", "one of " + ", ".join(HF_FAMILIES), family)
    moe = [k for k in _MOE_KEYS if data.get(k)]
    if moe and family not in _MOE_FAMILIES:
        raise InputError(f"{argument} {moe[0]}", f"a dense model (model_type {family}; the MoE families read are "
                         + ", ".join(_MOE_FAMILIES) + ")", data[moe[0]])
    if family == "gpt2":
        hidden = _get(data, "n_embd", argument)
        heads = _get(data, "n_head", argument)
        fields = dict(layers=_get(data, "n_layer", argument), hidden=hidden, heads=heads, kv_heads=heads,
                      ffn_hidden=4 * hidden if data.get("n_inner") is None else _get(data, "n_inner", argument),
                      seq_len=_get(data, "n_positions", argument),
                      vocab=_get(data, "vocab_size", argument), norm="layernorm", bias=True,
                      tied_embeddings=_flag(data, "tie_word_embeddings", argument, True), learned_positions=True)
        act, act_key = data.get("activation_function", "gelu_new"), "activation_function"
    else:
        hidden = _get(data, "hidden_size", argument)
        heads = _get(data, "num_attention_heads", argument)
        gated = family in _GATED
        fields = dict(layers=_get(data, "num_hidden_layers", argument), hidden=hidden, heads=heads,
                      kv_heads=_get(data, "num_key_value_heads", argument, default=heads),
                      ffn_hidden=_get(data, "intermediate_size", argument),
                      seq_len=_get(data, "max_position_embeddings", argument),
                      vocab=_get(data, "vocab_size", argument), norm="rmsnorm" if gated else "layernorm",
                      bias=not gated,
                      tied_embeddings=_flag(data, "tie_word_embeddings", argument, family in _GEGLU_FAMILIES),
                      learned_positions=False)
        act, act_key = data.get("hidden_act", "silu" if gated else "gelu"), "hidden_act"
        if family in _GEGLU_FAMILIES:  # (Gemma 2 and 3 name it hidden_activation too)
            act_key = next((k for k in ("hidden_activation", "hidden_act") if data.get(k) is not None),
                           "hidden_activation")
            act = data.get(act_key, "gelu_pytorch_tanh")
    if family == "llama4_text":  # dense layers of intermediate_size_mlp (the experts' is intermediate_size)
        fields["ffn_hidden"] = _get(data, "intermediate_size_mlp", argument)
    if family == "nemotron":  # NemotronConfig: attention_bias and mlp_bias, false by default
        fields["bias"] = _flag(data, "attention_bias", argument, False) or _flag(data, "mlp_bias", argument, False)
    elif family == "starcoder2":  # Starcoder2Config.use_bias, true by default: every linear and norm with its bias
        fields["bias"] = _flag(data, "use_bias", argument, True)
    head_dim = None if data.get("head_dim") is None else _get(data, "head_dim", argument)
    if family == "gpt_oss":  # Q, K, V, output and experts with biases (the config's attention_bias); the experts'
        # activation clamped at swiglu_limit (GptOssConfig's default 7.0)
        fields["bias"] = True
        limit = data.get("swiglu_limit", 7.0)
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not math.isfinite(limit) or limit <= 0:
            raise InputError(f"{argument} swiglu_limit", "a number > 0", limit)
        fields["glu_clamp"] = float(limit)
    if family in _MOE_FAMILIES:
        fields.update(_hf_moe_fields(data, family, fields["layers"], argument))
    if "kv_lora_rank" in fields and fields["kv_heads"] != heads:
        raise InputError(f"{argument} num_key_value_heads", f"num_attention_heads={heads} (MLA gives every head its "
                         "own K and V) or null", fields["kv_heads"])
    if head_dim is not None and "kv_lora_rank" not in fields and head_dim * heads != hidden:
        fields["head_dim"] = head_dim  # (DeepSeek's head sizes are MLA's: _hf_moe_fields)
    if not isinstance(act, str) or act not in _HF_ACTIVATIONS:
        raise InputError(f"{argument} {act_key}", "one of " + ", ".join(_HF_ACTIVATIONS), act)
    activation = _HF_ACTIVATIONS[act]
    if family in _GEGLU_FAMILIES:
        if activation != "gelu":
            raise InputError(f"{argument} {act_key}", f"a GELU (the gated MLP of {family})", act)
        activation = "geglu"
    elif family in _GATED and activation != "swiglu":
        raise InputError(f"{argument} {act_key}", f"silu (the gated MLP of {family})", act)
    elif family not in _GATED and activation == "swiglu":  # (SiLU is priced gated only: three matrices)
        raise InputError(f"{argument} {act_key}", f"a GELU or ReLU ({family}'s MLP has two matrices; plansweep "
                         "prices SiLU only in a gated MLP)", act)
    if family == "llama4_text":
        chunk, chunked, every = _hf_chunks(data, fields["layers"], argument)
        return Transformer(name=name, activation=activation, attention_chunk=chunk, window_layers=chunked,
                           window_every=every, **fields)
    window, windowed, every = _hf_window(data, family, fields["layers"], argument)
    return Transformer(name=name, activation=activation, sliding_window=window, window_layers=windowed,
                       window_every=every, **fields)


def _every_nth_of(restricted: list[bool]) -> int | None:
    """Transformer.window_every of layers a window or chunks restrict (True) or not: None where every layer is, the N
    >= 2 whose every N-th layer (1-based) alone is not, else 0 (no such pattern)."""
    if all(restricted):
        return None
    n = restricted.index(False) + 1  # (the first layer left full: the only N the pattern can have)
    return n if n >= 2 and all(r == ((i + 1) % n != 0) for i, r in enumerate(restricted)) else 0


def _hf_chunks(data: dict, layers: int, argument: str) -> tuple[int | None, int | None, int | None]:
    """Llama 4's chunked attention: (attention_chunk_size, how many layers take it; None: all), or (None, None)
    without a chunk size. Llama4TextConfig: a layer uses rotary positions where no_rope_layers[i] is 1 (by default
    unless (i + 1) % no_rope_layer_interval == 0, an interval of 4), and Llama4TextDecoderLayer takes the chunked
    mask exactly on those layers; the others attend over the whole sequence. Third: Transformer.window_every."""
    chunk = data.get("attention_chunk_size")
    if chunk is None:
        return None, None, None
    if not (isinstance(chunk, int) and not isinstance(chunk, bool) and chunk >= 1):
        raise InputError(f"{argument} attention_chunk_size", "an integer >= 1 or null", chunk)
    rope = data.get("no_rope_layers")
    if rope:
        if not (isinstance(rope, list) and len(rope) == layers and all(v in (0, 1) for v in rope)):
            raise InputError(f"{argument} no_rope_layers", f"a list of num_hidden_layers={layers} values 0 or 1",
                             rope)
        restricted = [v == 1 for v in rope]
    else:
        interval = data.get("no_rope_layer_interval", 4)
        if not (isinstance(interval, int) and not isinstance(interval, bool) and interval >= 1):
            raise InputError(f"{argument} no_rope_layer_interval", "an integer >= 1", interval)
        chunked = layers - layers // interval
        return chunk, None if chunked == layers else chunked, None if chunked == layers else interval * (interval > 1)
    chunked = sum(restricted)
    return chunk, None if chunked == layers else chunked, _every_nth_of(restricted)


def _hf_window(data: dict, family: str, layers: int, argument: str) -> tuple[int | None, int | None, int | None]:
    """The sliding window of a HuggingFace config, how many layers take it (None: all) and which
    (Transformer.window_every), or (None, None, None) (module docstring)."""
    types = data.get("layer_types")
    if types is not None and not isinstance(types, list):
        raise InputError(f"{argument} layer_types", f"a list of num_hidden_layers={layers} entries (or null)", types)
    if isinstance(types, list):
        if len(types) != layers:
            raise InputError(f"{argument} layer_types", f"num_hidden_layers={layers} entries, one a layer", len(types))
        odd = [t for t in types if t not in ("full_attention", "sliding_attention")]
        if odd:  # (a type plansweep does not price would otherwise be read as full attention)
            raise InputError(f"{argument} layer_types", "entries full_attention or sliding_attention", odd[0])
        restricted = [t == "sliding_attention" for t in types]
    elif family in ("mistral", "mixtral", "phi3", "starcoder2"):  # (every layer: their attention passes the config's
        # sliding_window whatever the layer)
        restricted = None
        windowed, every = layers, None
    elif family in ("gemma2", "gemma3_text"):  # (Gemma2Config / Gemma3TextConfig: layer i slides unless
        # (i + 1) % p == 0, p = 2, or Gemma 3's sliding_window_pattern, 6 by default)
        p = 2 if family == "gemma2" else data.get("sliding_window_pattern", 6)
        if not (isinstance(p, int) and not isinstance(p, bool) and p >= 1):
            raise InputError(f"{argument} sliding_window_pattern", "an integer >= 1", p)
        restricted = None
        windowed = layers - layers // p
        every = None if windowed == layers else p * (p > 1)
    elif family.startswith("qwen"):  # (Qwen2Config: layer i slides when use_sliding_window and i >= max_window_layers,
        # 28 where the config leaves it out: the class's default)
        first = data.get("max_window_layers", 28)
        if first is None:
            first = 28
        if not (isinstance(first, int) and not isinstance(first, bool) and first >= 0):
            raise InputError(f"{argument} max_window_layers", "an integer >= 0", first)
        on = _flag(data, "use_sliding_window", argument, False)
        restricted = None
        windowed = max(layers - first, 0) if on else 0
        every = None if windowed == layers else 0  # (the last layers: no every-N-th pattern)
    else:
        restricted, windowed, every = None, 0, None
    if restricted is not None:
        windowed, every = sum(restricted), _every_nth_of(restricted)
    window = data.get("sliding_window") if windowed else None
    if window is not None and not (isinstance(window, int) and not isinstance(window, bool) and window >= 1):
        raise InputError(f"{argument} sliding_window", "an integer >= 1 or null", window)
    if window is None and windowed and (restricted is not None or family.startswith("qwen")):
        # (layer_types or use_sliding_window name windowed layers: their window must be said; Mistral's and Gemma's
        # configs leave it null for no window)
        why = "layer_types names sliding_attention layers" if restricted is not None else "use_sliding_window is true"
        raise InputError(f"{argument} sliding_window", f"an integer >= 1 where {why}", window)
    if window is None:
        return None, None, None
    return window, None if windowed == layers else windowed, every


def _hf_moe_fields(data: dict, family: str, layers: int, argument: str) -> dict:
    """Transformer's MoE fields from the config of a family in _MOE_FAMILIES (module docstring)."""
    if family in _MIXTRAL_SHAPED:
        key = "num_experts" if family == "olmoe" else "num_local_experts"
        return dict(experts=_get(data, key, argument), experts_per_token=_get(data, "num_experts_per_tok", argument))
    if family == "llama4_text":  # Llama4TextConfig: layer i MoE when i is in moe_layers, by default every
        # interleave_moe_layer_step-th from step - 1 (the decoder_sparse_step rule); each MoE layer one shared expert
        # beside the routed ones, both of intermediate_size (Llama4TextMoe)
        step = _get(data, "interleave_moe_layer_step", argument, default=1)
        listed = data.get("moe_layers")
        if listed is not None and listed != list(range(step - 1, layers, step)):
            raise InputError(f"{argument} moe_layers", f"every interleave_moe_layer_step={step}-th layer from "
                             f"layer {step - 1} (or null)", listed)
        return dict(experts=_get(data, "num_local_experts", argument),
                    experts_per_token=_get(data, "num_experts_per_tok", argument),
                    expert_ffn_hidden=_get(data, "intermediate_size", argument), shared_experts=1,
                    moe_layer_freq=step)
    if family in ("qwen2_moe", "qwen3_moe"):
        step = _get(data, "decoder_sparse_step", argument, default=1)
        mlp_only = data.get("mlp_only_layers")
        mlp_only = [] if mlp_only is None else mlp_only
        first = len(mlp_only) if isinstance(mlp_only, list) else -1
        ints = isinstance(mlp_only, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in mlp_only)
        if not ints or mlp_only != list(range(first)) or (first and step != 1):
            raise InputError(f"{argument} mlp_only_layers", "the first layers [0, 1, ..., d - 1] (with "
                             "decoder_sparse_step 1), or none", mlp_only)
        shared = data.get("shared_expert_intermediate_size") or 0
        if not (isinstance(shared, int) and not isinstance(shared, bool) and shared >= 0):
            raise InputError(f"{argument} shared_expert_intermediate_size", "an integer >= 0", shared)
        return dict(experts=_get(data, "num_experts", argument),
                    experts_per_token=_get(data, "num_experts_per_tok", argument),
                    expert_ffn_hidden=_get(data, "moe_intermediate_size", argument),
                    shared_experts=1 if shared else 0, shared_expert_ffn_hidden=shared or None,
                    dense_layers=first, moe_layer_freq=step)
    # deepseek_v3, deepseek_v2, kimi_k2, glm4_moe: layer i is MoE when i >= first_k_dense_replace and
    # i % moe_layer_freq == 0
    freq = _get(data, "moe_layer_freq", argument, default=1)
    if freq != 1:
        raise InputError(f"{argument} moe_layer_freq", "1 (every layer after the first_k_dense_replace is MoE)", freq)
    first = data.get("first_k_dense_replace") or 0
    if not (isinstance(first, int) and not isinstance(first, bool) and 0 <= first < layers):
        raise InputError(f"{argument} first_k_dense_replace", f"an integer in [0, num_hidden_layers={layers})", first)
    shared = data.get("n_shared_experts") or 0
    if not (isinstance(shared, int) and not isinstance(shared, bool) and shared >= 0):
        raise InputError(f"{argument} n_shared_experts", "an integer >= 0", shared)
    # group-limited routing: n_group groups, topk_group of them per token (DeepSeek-V3: 8 and 4); the
    # "greedy" top-k method (DeepSeek-V2-Lite) routes over all experts whatever the groups
    groups, topk_group = (1 if data.get(k) is None else _get(data, k, argument) for k in ("n_group", "topk_group"))
    if data.get("topk_method") == "greedy":
        groups, topk_group = 1, 1
    mla = {}
    if data.get("kv_lora_rank") is not None:
        mla = dict(kv_lora_rank=_get(data, "kv_lora_rank", argument), q_lora_rank=data.get("q_lora_rank"),
                   head_dim=_get(data, "qk_nope_head_dim", argument),
                   qk_rope_head_dim=data.get("qk_rope_head_dim") or 0,
                   v_head_dim=_get(data, "v_head_dim", argument))
    return dict(experts=_get(data, "n_routed_experts", argument),
                experts_per_token=_get(data, "num_experts_per_tok", argument),
                expert_ffn_hidden=_get(data, "moe_intermediate_size", argument), shared_experts=shared,
                dense_layers=first, router_groups=groups, router_group_topk=topk_group, **mla)


def from_calculon(data: dict, name: str, argument: str = "--model") -> Transformer:
    """A Transformer from a Calculon model file (module docstring for what it adds)."""
    unknown = set(data) - set(CALCULON_KEYS)
    if unknown:
        raise InputError(argument, "Calculon model keys " + ", ".join(CALCULON_KEYS), sorted(unknown, key=str)[0])
    v = {k: _get(data, k, argument) for k in CALCULON_KEYS}
    big = [k for k in CALCULON_KEYS if v[k] > MODEL_INT_MAX]
    if big:
        raise InputError(f"{argument} {big[0]}", f"an integer of at most {MODEL_INT_MAX:,}", v[big[0]])
    if v["attn_heads"] * v["attn_size"] != v["hidden"]:
        raise InputError(f"{argument} attn_size", f"hidden / attn_heads = {v['hidden'] // v['attn_heads']}",
                         v["attn_size"])
    return Transformer(name=name, layers=v["num_blocks"], hidden=v["hidden"], heads=v["attn_heads"],
                       ffn_hidden=v["feedforward"], seq_len=v["seq_size"], vocab=CALCULON_VOCAB)


CALCULON_SYSTEM_KEYS = ("matrix", "mem1", "networks")


def is_calculon_system(data: dict) -> bool:
    return all(k in data for k in CALCULON_SYSTEM_KEYS)


# Ceilings of a Calculon system file's peak and memory, past any GPU's (a damaged file, not a machine).
CALCULON_MAX_TFLOPS = 1e6
CALCULON_MAX_GIB = 1e6


def _calculon_number(data: dict, keys: tuple[str | int, ...], argument: str, *, integer: bool = False,
                     low: float | None = None, high: float) -> float | int:
    """The number at ``data[keys[0]][keys[1]]...`` of a Calculon system file (an int key indexes a
    list): finite, > 0 (>= ``low`` where given) and at most ``high``, a whole number with ``integer``;
    InputError naming the field (``networks[0].bandwidth``) otherwise."""
    field = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in keys).lstrip(".")
    value = data
    for k in keys:
        if not (isinstance(value, list) and k < len(value) if isinstance(k, int) else isinstance(value, dict)
                and k in value):
            raise InputError(f"{argument} {field}", "a number (the file must set it)", "missing")
        value = value[k]
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{argument} {field}", kind, value)
    if integer and value != int(value):
        raise InputError(f"{argument} {field}", kind, value)
    if not (value > 0 if low is None else value >= low) or value > high:
        most = f"{high:,.0f}" if integer else f"{high:g}"
        raise InputError(f"{argument} {field}", f"{kind} in {'(0' if low is None else f'[{low:g}'}, {most}]", value)
    return int(value) if integer else float(value)


def cluster_from_calculon(data: dict, num_gpus: int, name: str, argument: str = "--cluster") -> Cluster:
    """A Cluster from a Calculon system file (calculon-ai/calculon, systems/*.json) and a GPU count
    (its files leave that to the run): dense peaks from ``matrix`` (float16 for bf16/fp16,
    float8 where given), HBM size (GiB) and bandwidth from ``mem1``, the first network as the
    node's scale-up link (its ``size`` GPUs per node, ``bandwidth`` GB/s per direction,
    ``latency``) and the second as the scale-out network. Efficiency constants are
    plansweep's own, never Calculon's tables: those of the preset GPU with the same dense
    peak and HBM size, else the H100's (costmodel._hardware)."""
    missing = [k for k in CALCULON_SYSTEM_KEYS if k not in data]
    if missing:
        raise InputError(argument, "a Calculon system file (matrix, mem1, networks)", f"missing {missing[0]}")
    nets = data["networks"]
    if not isinstance(nets, list) or not nets:
        raise InputError(f"{argument} networks", "a list of one or two networks (the node's link, then the "
                         "scale-out network)", nets)
    up, out = 0, 1 if len(nets) > 1 else 0  # network indices: the node's link, the scale-out network

    def num(*keys, **kw):
        return _calculon_number(data, keys, argument, **kw)

    f16 = num("matrix", "float16", "tflops", high=CALCULON_MAX_TFLOPS) * 1e12
    has_f8 = isinstance(data["matrix"], dict) and "float8" in data["matrix"]
    f8 = num("matrix", "float8", "tflops", high=CALCULON_MAX_TFLOPS) * 1e12 if has_f8 else 0.0
    hbm = num("mem1", "GiB", high=CALCULON_MAX_GIB) * 2**30
    hbm_Bps = num("mem1", "GBps", high=MAX_GBPS) * 1e9
    per_node = num("networks", up, "size", integer=True, high=CLUSTER_INT_MAX)
    up_Bps = num("networks", up, "bandwidth", high=MAX_GBPS) * 1e9
    out_Bps = num("networks", out, "bandwidth", high=MAX_GBPS) * 1e9
    up_lat = num("networks", up, "latency", low=0.0, high=MAX_LATENCY_S)
    out_lat = num("networks", out, "latency", low=0.0, high=MAX_LATENCY_S)
    if not (isinstance(num_gpus, int) and not isinstance(num_gpus, bool) and 1 <= num_gpus <= CLUSTER_INT_MAX):
        raise InputError(f"{argument} GPUs (num_gpus, or FILE@GPUS)", f"an integer in [1, {CLUSTER_INT_MAX:,}]",
                         num_gpus)
    per_node = min(per_node, num_gpus)
    if num_gpus % per_node:
        raise InputError(f"{argument} GPUs", f"a multiple of the file's {per_node} GPUs per node", num_gpus)
    like = [g for g in (gpu_preset(n) for n in EFFICIENCY) if g.peak_flops[0] == f16 and abs(g.hbm_bytes - hbm) < 8e9]
    base = like[0] if like else gpu_preset("h100")
    gpu = GPU(name=name, peak_flops=(f16, f16, f8), hbm_bytes=hbm, hbm_Bps=hbm_Bps, scaleup_Bps=up_Bps,
              scaleout_Bps=out_Bps, **{k: getattr(base, k) for k in ("gemm_eff_max", "gemm_half_dim", "hbm_eff",
                                                                      "link_eff", "kernel_overhead_s")},
              scaleup_latency_s=up_lat, scaleout_latency_s=out_lat)
    return Cluster(gpu=gpu, nodes=num_gpus // per_node, gpus_per_node=per_node, scaleup_Bps=up_Bps,
                   scaleout_Bps=out_Bps, scaleup_latency_s=up_lat, scaleout_latency_s=out_lat,
                   name=f"{name}x{num_gpus}")


# Calculon's execution fields (Llm.Execution.fields(), in its order), by kind.
CALCULON_EXECUTION_FIELDS = (
    "num_procs", "tensor_par", "pipeline_par", "data_par", "tensor_par_net", "pipeline_par_net", "data_par_net",
    "batch_size", "microbatch_size", "datatype", "fused_activation", "attention_type", "activation_recompute",
    "pipeline_interleaving", "optimizer_sharding", "tensor_par_comm_type", "tensor_par_overlap", "seq_par_ag_redo",
    "data_par_overlap", "weight_offload", "activations_offload", "optimizer_offload", "training")
_EXEC_COUNTS = ("num_procs", "tensor_par", "pipeline_par", "data_par", "batch_size", "microbatch_size",
                "pipeline_interleaving")
_EXEC_NETS = ("tensor_par_net", "pipeline_par_net", "data_par_net")
_EXEC_FLAGS = ("fused_activation", "optimizer_sharding", "seq_par_ag_redo", "data_par_overlap", "weight_offload",
               "activations_offload", "optimizer_offload", "training")
# The words plansweep reads (Calculon's others are refused with the reason beside them).
_EXEC_WORDS = {
    "datatype": (("bfloat16", "float16", "float8"), "(float32 training is not priced)"),
    "attention_type": (("multihead",), "(multiquery is the model's: write kv_heads 1 in a plansweep model file)"),
    "activation_recompute": (("none", "attn_only", "full"), ""),
    "tensor_par_comm_type": (("ar", "p2p_rs_ag", "rs_ag"), ""),
    "tensor_par_overlap": (("none",), "(tensor-parallel communication is priced exposed; ring and pipe overlap "
                                      "are not priced)"),
}
_EXEC_PRECISION = {"bfloat16": "bf16", "float16": "fp16", "float8": "fp8"}
_EXEC_RECOMPUTE = {"none": "none", "attn_only": "selective", "full": "full"}


def is_calculon_execution(data: dict) -> bool:
    """A mapping with one of Calculon's execution fields (none of them is a plansweep strategy key)."""
    return any(k in data for k in CALCULON_EXECUTION_FIELDS)


def _execution_values(data: dict, argument: str) -> dict:
    """The 23 fields of a Calculon execution file, each of its kind; InputError naming the field."""
    missing = [k for k in CALCULON_EXECUTION_FIELDS if k not in data]
    if missing:
        raise InputError(f"{argument} {missing[0]}", "a value (a Calculon execution file sets all its 23 fields)",
                         "missing")
    unknown = sorted((str(k) for k in data if k not in CALCULON_EXECUTION_FIELDS))
    if unknown:
        raise InputError(argument, "only Calculon's execution fields (" + ", ".join(CALCULON_EXECUTION_FIELDS)
                         + ")", unknown[0])
    for k in _EXEC_COUNTS:
        v = data[k]
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= INT_COLUMN_MAX:
            raise InputError(f"{argument} {k}", f"an integer in [1, {INT_COLUMN_MAX}]", v)
    for k in _EXEC_NETS:
        if isinstance(data[k], bool) or data[k] not in (0, 1) or not isinstance(data[k], int):
            raise InputError(f"{argument} {k}", "0 (the node's link) or 1 (the network between nodes)", data[k])
    for k in _EXEC_FLAGS:
        if not isinstance(data[k], bool):
            raise InputError(f"{argument} {k}", "true or false", data[k])
    for k, (words, why) in _EXEC_WORDS.items():
        if not isinstance(data[k], str) or data[k] not in words:
            raise InputError(f"{argument} {k}", "one of " + ", ".join(words) + (" " + why if why else ""), data[k])
    return dict(data)


def _execution_checks(v: dict, argument: str) -> None:
    """What plansweep cannot price, and Calculon's own consistency checks (module docstring)."""
    t, p, d = v["tensor_par"], v["pipeline_par"], v["data_par"]

    def refuse(field, expected):
        raise InputError(f"{argument} {field}", expected, v[field])

    for k in ("weight_offload", "activations_offload", "optimizer_offload"):
        if v[k]:
            refuse(k, "false (weights, activations and optimizer state stay in HBM; offloading is not priced)")
    if not v["training"]:
        refuse("training", "true (training steps are priced, not inference)")
    if v["num_procs"] != t * p * d:
        refuse("num_procs", f"tensor_par x pipeline_par x data_par = {t} x {p} x {d} = {t * p * d}")
    if v["batch_size"] % (d * v["microbatch_size"]):
        refuse("batch_size", f"a multiple of data_par x microbatch_size = {d * v['microbatch_size']}")
    if p == 1 and v["pipeline_interleaving"] != 1:
        refuse("pipeline_interleaving", "1 when pipeline_par is 1")
    comm, recompute = v["tensor_par_comm_type"], v["activation_recompute"]
    if comm == "ar" and t > 1 and p > 1:
        refuse("tensor_par_comm_type", "p2p_rs_ag or rs_ag with tensor_par and pipeline_par > 1 (the hand-off "
               "between stages is priced as Megatron's scatter / gather, 1 / tensor_par of the activations per "
               "GPU; ar hands over all of them)")
    if v["seq_par_ag_redo"] and (comm != "rs_ag" or recompute == "full"):
        refuse("seq_par_ag_redo", "false unless tensor_par_comm_type is rs_ag and activation_recompute is not full "
               "(as Calculon asserts)")
    if not v["seq_par_ag_redo"] and comm == "rs_ag" and t > 1 and recompute != "full":
        refuse("seq_par_ag_redo", "true with rs_ag and activation_recompute " + recompute + " (sequence "
               "parallelism is priced as Megatron's: the layer norm's split output kept and gathered again for "
               "the backward pass, not the gathered copy)")


def _placement_checks(v: dict, cluster: Cluster, argument: str) -> None:
    """num_procs within the cluster, and each group's network where plansweep places it (module docstring)."""
    if v["num_procs"] > cluster.num_gpus:
        raise InputError(f"{argument} num_procs", f"at most the cluster's {cluster.num_gpus} GPUs ({cluster.name})",
                         v["num_procs"])
    if cluster.scaleup_Bps == cluster.scaleout_Bps and cluster.scaleup_latency_s == cluster.scaleout_latency_s:
        return  # both links alike: either index prices the same
    t, d, p, G = v["tensor_par"], v["data_par"], v["pipeline_par"], cluster.gpus_per_node
    # (field, group, degree, ranks its groups span, inside a node): Megatron's order, tp, then dp, then pp
    groups = (("tensor_par_net", "tp", t, t, t <= G and G % t == 0),
              ("data_par_net", "dp", d, t * d, t * d <= G and G % (t * d) == 0),
              ("pipeline_par_net", "pp", p, t * d * p, t * d * p <= G))
    for field, name, degree, span, inside in groups:
        if degree > 1 and v[field] != (0 if inside else 1):
            where = f"inside one node of {G}" if inside else f"not inside one node of {G}"
            raise InputError(f"{argument} {field}", f"{0 if inside else 1} (ranks in Megatron's order, tp innermost, "
                             f"then dp, then pp: the {name} groups span {span} GPUs, {where})", v[field])


def strategy_from_calculon(data: dict, argument: str = "--strategy", *, cluster: Cluster | None = None) -> dict:
    """plansweep's strategy keys (costmodel._strategy.COLUMNS) from a Calculon execution file (module
    docstring: what each field becomes, what is checked, what is refused); with ``cluster``, also
    num_procs against its GPUs and the networks against its nodes. InputError naming ``argument``
    and the field."""
    v = _execution_values(data, argument)
    _execution_checks(v, argument)
    if cluster is not None:
        _placement_checks(v, cluster, argument)
    t, vpp = v["tensor_par"], v["pipeline_interleaving"]
    return {"tp": t, "pp": v["pipeline_par"], "dp": v["data_par"], "global_batch": v["batch_size"],
            "micro_batch": v["microbatch_size"], "vpp": vpp, "schedule": "interleaved" if vpp > 1 else "1f1b",
            "recompute": _EXEC_RECOMPUTE[v["activation_recompute"]],
            "zero_stage": 1 if v["optimizer_sharding"] else 0, "precision": _EXEC_PRECISION[v["datatype"]],
            "sequence_parallel": v["tensor_par_comm_type"] == "rs_ag" and t > 1,
            "overlap_dp": v["data_par_overlap"]}
