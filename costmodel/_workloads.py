"""Workloads: a GPT-style transformer (which also covers seed 000's MLP) and presets.

Symbols as in Korthikanti et al. 2022 (arXiv:2205.05198): L layers, h hidden, a heads,
s sequence length, V vocabulary, b micro-batch (sequences). We add f (ffn hidden) and
hk = h * kv_heads / heads (the width of K and V under grouped-query attention).
"""

from __future__ import annotations

import dataclasses

from costmodel._errors import InputError

ACTIVATIONS = ("gelu", "swiglu", "relu")
NORMS = ("layernorm", "rmsnorm", "none")
KINDS = ("transformer", "mlp")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Transformer:
    """A decoder-only transformer, or (kind="mlp") a stack of square linear layers.

    For kind="mlp" (seed 000): ``layers`` linear layers of ``hidden`` x ``hidden`` each
    followed by ``activation`` (relu), one sample is one token (seq_len=1), no attention,
    no embedding and no LM head.
    """

    name: str
    layers: int
    hidden: int
    heads: int = 1
    kv_heads: int | None = None
    ffn_hidden: int | None = None
    seq_len: int = 1
    vocab: int = 0
    activation: str = "gelu"
    norm: str = "layernorm"
    bias: bool = True
    tied_embeddings: bool = True
    learned_positions: bool = True
    kind: str = "transformer"

    def __post_init__(self) -> None:
        for f in ("layers", "hidden", "heads", "seq_len"):
            v = getattr(self, f)
            if not (isinstance(v, int) and v >= 1):
                raise InputError(f"model.{f}", "an integer >= 1", v)
        if self.kind not in KINDS:
            raise InputError("model.kind", f"one of {KINDS}", self.kind)
        if self.activation not in ACTIVATIONS:
            raise InputError("model.activation", f"one of {ACTIVATIONS}", self.activation)
        if self.norm not in NORMS:
            raise InputError("model.norm", f"one of {NORMS}", self.norm)
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.ffn_hidden is None:
            object.__setattr__(self, "ffn_hidden", 4 * self.hidden)
        if not (isinstance(self.kv_heads, int) and 1 <= self.kv_heads <= self.heads):
            raise InputError("model.kv_heads", f"an integer in [1, heads={self.heads}]", self.kv_heads)
        if self.heads % self.kv_heads:
            raise InputError("model.kv_heads", f"a divisor of heads={self.heads}", self.kv_heads)
        if self.kind == "transformer":
            if self.hidden % self.heads:
                raise InputError("model.hidden", f"a multiple of heads={self.heads}", self.hidden)
            if not (isinstance(self.vocab, int) and self.vocab >= 1):
                raise InputError("model.vocab", "an integer >= 1", self.vocab)
            if not (isinstance(self.ffn_hidden, int) and self.ffn_hidden >= 1):
                raise InputError("model.ffn_hidden", "an integer >= 1", self.ffn_hidden)

    # -- closed forms -------------------------------------------------------------------
    @property
    def kv_hidden(self) -> int:
        """hk: the width of K (and of V) = h * kv_heads / heads."""
        return self.hidden * self.kv_heads // self.heads

    @property
    def mlp_matrices(self) -> int:
        """Number of h x f weight matrices in the MLP: 2 (GeLU/ReLU) or 3 (SwiGLU)."""
        return 3 if self.activation == "swiglu" else 2

    def layer_params(self) -> int:
        """Parameters of one layer (weights, biases, norms)."""
        h, f, hk = self.hidden, self.ffn_hidden, self.kv_hidden
        if self.kind == "mlp":
            return h * h + (h if self.bias else 0)
        attn = h * (h + 2 * hk) + h * h  # QKV and output projection
        mlp = self.mlp_matrices * h * f
        biases = (h + 2 * hk) + h + f * (self.mlp_matrices - 1) + h if self.bias else 0
        norms = 2 * self._norm_params()
        return attn + mlp + biases + norms

    def _norm_params(self) -> int:
        return {"layernorm": 2, "rmsnorm": 1, "none": 0}[self.norm] * self.hidden

    def embedding_params(self) -> int:
        """Token (and learned position) embeddings."""
        if self.kind == "mlp":
            return 0
        return self.vocab * self.hidden + (self.seq_len * self.hidden if self.learned_positions else 0)

    def head_params(self) -> int:
        """The LM head (0 when tied to the token embedding) and the final norm."""
        if self.kind == "mlp":
            return 0
        head = 0 if self.tied_embeddings else self.vocab * self.hidden
        return head + self._norm_params()

    def num_params(self) -> int:
        return self.layers * self.layer_params() + self.embedding_params() + self.head_params()

    def layer_fwd_flops_per_token(self) -> float:
        """Forward FLOPs per token of one layer, counting matrix products only.

        2 FLOPs per multiply-add on each weight matrix, plus attention: QK^T and AV cost
        2*s*h each per token (the full s x s square, as Korthikanti Eq. 7 counts it).
        """
        h, f, hk, s = self.hidden, self.ffn_hidden, self.kv_hidden, self.seq_len
        if self.kind == "mlp":
            return 2.0 * h * h
        weights = h * (h + 2 * hk) + h * h + self.mlp_matrices * h * f
        return 2.0 * weights + 4.0 * s * h

    def head_fwd_flops_per_token(self) -> float:
        return 0.0 if self.kind == "mlp" else 2.0 * self.hidden * self.vocab

    def model_flops_per_sample(self) -> float:
        """Model FLOPs (forward + backward = 3x forward) per sequence, no recompute.

        For GPT (f = 4h, MHA) this is Korthikanti Eq. 7 divided by the batch B:
        72 L s h^2 (1 + s/6h + V/12hL).
        """
        per_token = self.layers * self.layer_fwd_flops_per_token() + self.head_fwd_flops_per_token()
        return 3.0 * per_token * self.seq_len


def _gpt(name: str, layers: int, hidden: int, heads: int, seq: int = 2048, vocab: int = 51200):
    return Transformer(name=name, layers=layers, hidden=hidden, heads=heads, seq_len=seq, vocab=vocab)


def _llama(name: str, layers: int, hidden: int, ffn: int, heads: int, kv: int):
    return Transformer(
        name=name, layers=layers, hidden=hidden, ffn_hidden=ffn, heads=heads, kv_heads=kv,
        seq_len=8192, vocab=128256, activation="swiglu", norm="rmsnorm", bias=False,
        tied_embeddings=False, learned_positions=False,
    )


# Presets. GPT-3: Brown et al. 2020 Table 2.1 (vocab padded to 51200 as Megatron does).
# Megatron 22B/175B/530B/1T: Korthikanti et al. 2022 Table 3. Llama-3: Meta's Llama 3 paper
# (Dubey et al. 2024) Table 3, seq 8192. mlp-64x8192: an MLP of 64 ReLU layers of 8192 x 8192
# (seed 000's workload; its old name "seed000-mlp" stays as an alias, MODEL_ALIASES).
MODEL_PRESETS: dict[str, Transformer] = {
    "gpt3-175b": _gpt("gpt3-175b", 96, 12288, 96),
    "megatron-22b": _gpt("megatron-22b", 48, 6144, 64),
    "megatron-175b": _gpt("megatron-175b", 96, 12288, 96),
    "megatron-530b": _gpt("megatron-530b", 105, 20480, 128),
    "megatron-1t": _gpt("megatron-1t", 128, 25600, 160),
    "llama3-8b": _llama("llama3-8b", 32, 4096, 14336, 32, 8),
    "llama3-70b": _llama("llama3-70b", 80, 8192, 28672, 64, 8),
    "llama3-405b": _llama("llama3-405b", 126, 16384, 53248, 128, 8),
    "mlp-64x8192": Transformer(
        name="mlp-64x8192", layers=64, hidden=8192, kind="mlp", activation="relu",
        norm="none", bias=False,
    ),
}


# Old preset names that still work: alias -> the name it stands for (the same object).
MODEL_ALIASES: dict[str, str] = {"seed000-mlp": "mlp-64x8192"}


def model_preset(name: str) -> Transformer:
    key = name.lower()
    key = MODEL_ALIASES.get(key, key)
    if key not in MODEL_PRESETS:
        raise InputError("model", "one of " + ", ".join(MODEL_PRESETS), name)
    return MODEL_PRESETS[key]
