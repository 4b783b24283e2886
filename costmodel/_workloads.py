"""Workloads: a GPT-style transformer (which also covers seed 000's MLP), its mixture-of-experts form, and presets.

Symbols as in Korthikanti et al. 2022 (arXiv:2205.05198): L layers, h hidden, a heads, s sequence length, V vocabulary,
b micro-batch (sequences). We add f (ffn hidden), d (head size, hidden / heads unless given), q = a * d (the width of Q
and of the attention output) and hk = kv_heads * d (the width of K and V under grouped-query attention).

Mixture of experts (Shazeer et al. 2017, arXiv:1701.06538; Mixtral, arXiv:2401.04088; DeepSeek-V3, arXiv:2412.19437): in
an MoE layer the MLP is a router (an h x E matrix) and E routed experts of ffn hidden fe, of which each token goes
through k, plus Es shared experts (ffn hidden fs) every token goes through. The first ``dense_layers`` layers keep the
dense MLP (ffn hidden f); after them every ``moe_layer_freq``-th layer is an MoE layer. E = 1 is a dense model and
prices exactly as before the MoE fields existed.
"""

from __future__ import annotations

import dataclasses
import math

from costmodel._errors import InputError

ACTIVATIONS = ("gelu", "swiglu", "relu", "geglu")
# Gated MLPs (an up, a gate and a down matrix; the activation of one times the other): SwiGLU (SiLU gate; Llama) and
# GeGLU (GELU gate; Gemma), priced alike: the same products, the same element-wise traffic, the same kept tensors.
GATED = ("swiglu", "geglu")
# Model sizes (layers, widths, experts, sequence length, vocabulary) above this are refused: the
# largest published models are far below it, and products of a few of them stay inside int64.
MODEL_INT_MAX = 2**31 - 1
NORMS = ("layernorm", "rmsnorm", "none")
KINDS = ("transformer", "mlp")
# The MoE fields and their dense values (experts = 1 means a dense model; each of these must then keep its dense value,
# so that no MoE setting is silently priced as dense).
MOE_DENSE_VALUES = {"experts_per_token": 1, "shared_experts": 0, "expert_ffn_hidden": None,
                    "shared_expert_ffn_hidden": None, "dense_layers": 0, "moe_layer_freq": 1, "capacity_factor": 1.0,
                    "router_groups": 1, "router_group_topk": 1}
# The fields added with MoE models and their values in every model before them: files written for a dense model leave
# these out and so read as they did (sweep._rundir.model_to_dict); MLA's fields and their values without it, the same;
# and the sliding window's, without one.
MLA_NONE_VALUES = {"q_lora_rank": None, "kv_lora_rank": None, "qk_rope_head_dim": 0, "v_head_dim": None}
FIELDS_SINCE_MOE = {"head_dim": None, "experts": 1, **MOE_DENSE_VALUES, **MLA_NONE_VALUES, "sliding_window": None,
                    "window_layers": None, "attention_chunk": None, "window_every": None, "glu_clamp": None}
# The key tile edge of the fused attention kernels (FlashAttention-2's and cuDNN's 128-row blocks): a kernel skips the
# key tiles wholly outside its mask, a causal one those above the diagonal, a sliding window's those left of the band
# too (flash-attention v2.6 csrc/flash_attn/src/flash_fwd_kernel.h: n_block_min from window_size_left).
ATTENTION_TILE = 128


@dataclasses.dataclass(frozen=True, kw_only=True)
class Transformer:
    """A decoder-only transformer, or (kind="mlp") a stack of square linear layers.

    For kind="mlp" (seed 000): ``layers`` linear layers of ``hidden`` x ``hidden`` each followed by ``activation``
    (relu), one sample is one token (seq_len=1), no attention, no embedding and no LM head.

    Mixture of experts (module docstring): ``experts`` routed experts E (1: dense), ``experts_per_token`` (top-k) of
    them per token; ``shared_experts`` take every token; ``expert_ffn_hidden`` (default ffn_hidden) and
    ``shared_expert_ffn_hidden`` (default expert_ffn_hidden) their ffn sizes; ``dense_layers`` leading dense layers,
    then every ``moe_layer_freq``-th layer MoE; the router h x E, no bias. Group-limited routing (DeepSeek-V2/V3;
    Megatron-Core --moe-router-num-groups / --moe-router-group-topk; HuggingFace n_group / topk_group): E experts in
    ``router_groups`` groups of consecutive experts, a token's k from ``router_group_topk`` of them, k / topk each (1
    and 1: no limit). ``head_dim`` (default hidden / heads): one head's size (Q and the output heads x head_dim wide).

    Multi-head latent attention (MLA; DeepSeek-V2, arXiv:2405.04434 Sec. 2.1; DeepSeek-V3): set ``kv_lora_rank`` (the
    HuggingFace config's names). K and V come from a latent of kv_lora_rank (h x (kv_lora_rank + qk_rope_head_dim)
    down, kv_lora_rank x heads (head_dim + v_head_dim) up); Q the same through ``q_lora_rank`` (None: one h x heads
    (head_dim + qk_rope_head_dim) matrix). A head's query and key are head_dim (the config's qk_nope_head_dim) +
    qk_rope_head_dim wide, its value and output ``v_head_dim`` (default head_dim). The down-projections run whole on
    every tensor-parallel rank (Megatron-Core's MLA builds them 'duplicated'), the rest split as usual.

    ``sliding_window`` (None: none): on ``window_layers`` of the layers (None: all of them) a query attends to at
    most that many keys, its own and those before it (HuggingFace's sliding_window; Mistral-7B-v0.1 every layer,
    gpt-oss every other). A window at least as long as the sequence restricts nothing. The layers are priced alike,
    so the windowed layers' share is spread over every stage (attention_span, attention_time_share).
    ``attention_chunk`` (None: none; not with a sliding window): chunked attention (Llama 4's, HuggingFace's
    attention_chunk_size): on ``window_layers`` of the layers (None: all) the sequence is cut into chunks of that
    many tokens and a query attends to the keys of its own chunk up to itself (Llama 4: every layer but each fourth,
    whose attention is global and without rotary positions). Priced as the window is, over the chunks' pairs and
    tiles. ``window_every`` (where ``window_layers`` is fewer than the layers): which ones: every window_every-th
    layer (1-based) attends over the whole sequence and the others take the window or the chunks (gpt-oss 2, Gemma 3 6,
    Llama 4 4), L - L // window_every of them; 0: they follow no such pattern (a Qwen config's last layers); None: not
    said. The pricing reads only the count; a launch line that names the layers (Megatron-LM's) reads the pattern.

    ``glu_clamp`` (None: none): the routed experts' gated activation clamps its two inputs to this limit first
    (gpt-oss's swiglu_limit 7.0: the gate at most it, the linear half within plus or minus it); priced as the
    elementwise passes it takes (costmodel._experts CLAMP_ELEMS_FWD). An MoE model's only.
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
    head_dim: int | None = None
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int = 0
    v_head_dim: int | None = None
    experts: int = 1
    experts_per_token: int = 1
    shared_experts: int = 0
    expert_ffn_hidden: int | None = None
    shared_expert_ffn_hidden: int | None = None
    dense_layers: int = 0
    moe_layer_freq: int = 1
    capacity_factor: float = 1.0
    router_groups: int = 1
    router_group_topk: int = 1
    sliding_window: int | None = None
    window_layers: int | None = None
    attention_chunk: int | None = None
    window_every: int | None = None
    glu_clamp: float | None = None

    def __post_init__(self) -> None:
        nm = self.name  # (it heads tables, names Parquet rows and is written into exported launch scripts)
        if not (isinstance(nm, str) and nm.isprintable()):
            raise InputError("model.name", "a string of printable characters", nm)
        for f in ("layers", "hidden", "heads", "seq_len"):
            v = getattr(self, f)
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
                raise InputError(f"model.{f}", "an integer >= 1", v)
        for f in ("bias", "tied_embeddings", "learned_positions"):
            v = getattr(self, f)
            if not isinstance(v, bool) and not (isinstance(v, int) and v in (0, 1)):
                raise InputError(f"model.{f}", "true or false", v)
        for f in dataclasses.fields(self):  # sizes the cost model's int64 arithmetic holds
            v = getattr(self, f.name)
            if isinstance(v, int) and not isinstance(v, bool) and v > MODEL_INT_MAX:
                raise InputError(f"model.{f.name}", f"an integer of at most {MODEL_INT_MAX:,}", v)
        if self.kind not in KINDS:
            raise InputError("model.kind", f"one of {KINDS}", self.kind)
        if self.kind == "mlp" and self.seq_len != 1:
            raise InputError("model.seq_len", "1 for kind=mlp (an MLP's sample is one token)", self.seq_len)
        w = self.sliding_window
        if w is not None and not (isinstance(w, int) and not isinstance(w, bool) and w >= 1):
            raise InputError("model.sliding_window", "an integer >= 1 (or null: no window)", w)
        c = self.attention_chunk
        if c is not None and not (isinstance(c, int) and not isinstance(c, bool) and c >= 1):
            raise InputError("model.attention_chunk", "an integer >= 1 (or null: no chunked attention)", c)
        if c is not None and w is not None:
            raise InputError("model.attention_chunk", "null with a sliding_window (a layer's attention is windowed "
                             "or chunked, not both)", c)
        n = self.window_layers
        if n is not None and not (isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= self.layers):
            raise InputError("model.window_layers", f"an integer in [0, layers={self.layers}] (or null: all)", n)
        if n is not None and w is None and c is None:
            raise InputError("model.window_layers", "null without a sliding_window or an attention_chunk", n)
        e = self.window_every
        if e is not None and not (isinstance(e, int) and not isinstance(e, bool) and e >= 0 and e != 1):
            raise InputError("model.window_every", "an integer >= 2, 0 (no every-N-th pattern) or null", e)
        if e is not None and (n is None or n == self.layers):
            raise InputError("model.window_every", "null where the window or the chunks are on every layer", e)
        if e and n != self.layers - self.layers // e:
            raise InputError("model.window_every", f"an N with layers - layers // N = window_layers={n} (every N-th "
                             "layer full) or 0", e)
        if self.activation not in ACTIVATIONS:
            raise InputError("model.activation", f"one of {ACTIVATIONS}", self.activation)
        g = self.glu_clamp
        if g is not None and (isinstance(g, bool) or not isinstance(g, (int, float)) or not math.isfinite(g) or g <= 0):
            raise InputError("model.glu_clamp", "a number > 0 (or null: no clamp)", g)
        if g is not None and (self.activation not in GATED or not (isinstance(self.experts, int) and self.experts > 1)):
            raise InputError("model.glu_clamp", "null but on an MoE model with a gated activation (the routed "
                             "experts' clamp)", g)
        if self.norm not in NORMS:
            raise InputError("model.norm", f"one of {NORMS}", self.norm)
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.ffn_hidden is None:
            object.__setattr__(self, "ffn_hidden", 4 * self.hidden)
        kv = self.kv_heads
        if not (isinstance(kv, int) and not isinstance(kv, bool) and 1 <= kv <= self.heads):
            raise InputError("model.kv_heads", f"an integer in [1, heads={self.heads}]", self.kv_heads)
        if self.heads % self.kv_heads:
            raise InputError("model.kv_heads", f"a divisor of heads={self.heads}", self.kv_heads)
        f = self.ffn_hidden  # (read by every kind: an MLP's experts and parameter counts take it too)
        if not (isinstance(f, int) and not isinstance(f, bool) and f >= 1):
            raise InputError("model.ffn_hidden", "an integer >= 1", self.ffn_hidden)
        v = self.vocab
        if not (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
            raise InputError("model.vocab", "an integer >= 0 (0: no embedding, kind=mlp)", v)
        if self.kind == "transformer":
            if self.hidden % self.heads and self.head_dim is None:
                raise InputError("model.hidden", f"a multiple of heads={self.heads}", self.hidden)
            if v < 1:
                raise InputError("model.vocab", "an integer >= 1", self.vocab)
        self._check_moe()

    @property
    def windowed_layers(self) -> int:
        """Layers whose attention a sliding window or chunks restrict: none without either, or where the window or
        the chunk covers the sequence."""
        w = self.sliding_window if self.attention_chunk is None else self.attention_chunk
        if w is None or w >= self.seq_len:
            return 0
        return self.layers if self.window_layers is None else self.window_layers

    @property
    def attention_span(self) -> float:
        """Keys a query's attention scores are counted over, per layer on average, in the full-square convention the
        FLOP counts use (Korthikanti Eq. 7: s keys a query): s on a full layer, s x (pairs in the window / pairs in
        the causal triangle) on a windowed one, the window's pairs sum_i min(i, w) = w s - w (w - 1) / 2 against s (s
        + 1) / 2; on a chunked one, s = q c + r, the chunks' triangles q c (c + 1) / 2 + r (r + 1) / 2; s exactly
        without either."""
        s, n = self.seq_len, self.windowed_layers
        if not n:
            return float(s)
        if self.attention_chunk is not None:
            c = self.attention_chunk
            q, r = divmod(s, c)
            pairs = q * c * (c + 1) / 2.0 + r * (r + 1) / 2.0
        else:
            w = self.sliding_window
            pairs = w * s - w * (w - 1) / 2.0
        share = pairs / (s * (s + 1) / 2.0)
        return s * (1.0 - n / self.layers + n / self.layers * share)

    @property
    def attention_time_share(self) -> float:
        """A layer's fused attention kernel time over a causal layer's, on average over the layers: a windowed
        layer's kernel runs the key tiles of ATTENTION_TILE x ATTENTION_TILE that meet its band (the rest skipped,
        ATTENTION_TILE's note) against the causal kernel's tiles meeting the triangle, each at the causal kernel's
        per-tile rate. With m = ceil(s / T) query tiles and n = ceil((w - 1) / T), query tile k meets key tiles
        max(0, k - n) .. k: min(k, n) + 1 of them, against k + 1. A chunked layer's kernel runs each chunk as a
        sequence of its own (Megatron-Bridge's Llama 4 reshapes the chunks into the batch, llama4_utils.chunkify):
        q chunks of c tokens and one of r, each a causal triangle of ceil(c / T) or ceil(r / T) tiles a side. 1
        exactly without either."""
        n_w = self.windowed_layers
        if not n_w:
            return 1.0
        t = ATTENTION_TILE
        m = -(-self.seq_len // t)
        if self.attention_chunk is not None:
            q, r = divmod(self.seq_len, self.attention_chunk)
            mc, mr = -(-self.attention_chunk // t), -(-r // t)
            band = q * (mc * (mc + 1) // 2) + mr * (mr + 1) // 2
        else:
            n = -(-(self.sliding_window - 1) // t)
            k0 = min(n, m)  # tiles k < n meet all k + 1 key tiles before them
            band = k0 * (k0 + 1) // 2 + (m - k0) * (n + 1)
        share = band / (m * (m + 1) // 2)
        return 1.0 - n_w / self.layers + n_w / self.layers * share

    def _check_moe(self) -> None:
        """The head size and the MoE fields: one InputError naming the first bad field."""
        for f in ("head_dim", "expert_ffn_hidden", "shared_expert_ffn_hidden", "q_lora_rank", "kv_lora_rank",
                  "v_head_dim"):
            v = getattr(self, f)
            if v is not None and not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
                raise InputError(f"model.{f}", "an integer >= 1 (or null for its default)", v)
        for f, lo in (("experts", 1), ("experts_per_token", 1), ("moe_layer_freq", 1), ("shared_experts", 0),
                      ("dense_layers", 0), ("router_groups", 1), ("router_group_topk", 1)):
            v = getattr(self, f)
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= lo):
                raise InputError(f"model.{f}", f"an integer >= {lo}", v)
        cf = self.capacity_factor
        if isinstance(cf, bool) or not isinstance(cf, (int, float)) or not 1.0 <= cf <= max(self.experts, 1):
            # (at most experts: an expert's capacity, cf x tokens x k / experts, then at most every routed token)
            raise InputError("model.capacity_factor", f"a number in [1.0, experts={self.experts}]", cf)
        object.__setattr__(self, "capacity_factor", float(cf))
        self._check_mla()
        if self.kind == "mlp" and self.experts != 1:
            raise InputError("model.experts", "1 (kind=mlp has no expert layers)", self.experts)
        if self.experts == 1:
            for f, dense in MOE_DENSE_VALUES.items():
                if getattr(self, f) != dense:
                    raise InputError(f"model.{f}", f"{dense} for a dense model (experts=1)", getattr(self, f))
            return
        if self.experts_per_token > self.experts:
            raise InputError("model.experts_per_token", f"an integer in [1, experts={self.experts}]",
                             self.experts_per_token)
        G, M = self.router_groups, self.router_group_topk
        if self.experts % G:
            raise InputError("model.router_groups", f"a divisor of experts={self.experts}", G)
        if M > G or M * (self.experts // G) < self.experts_per_token or (M < G and self.experts_per_token % M):
            raise InputError("model.router_group_topk", f"an integer in [1, router_groups={G}] dividing "
                             f"experts_per_token={self.experts_per_token}, whose groups hold at least that many "
                             "experts", M)
        if self.dense_layers >= self.layers:
            raise InputError("model.dense_layers", f"fewer than layers={self.layers} (an MoE model has MoE layers)",
                             self.dense_layers)
        if self.moe_layer_freq > self.layers - self.dense_layers:
            raise InputError("model.moe_layer_freq",
                             f"at most {self.layers - self.dense_layers}, the layers after the dense ones "
                             f"(layers={self.layers} less dense_layers={self.dense_layers})", self.moe_layer_freq)

    def _check_mla(self) -> None:
        """MLA's fields: set only with kv_lora_rank, on a transformer whose heads all have their own K/V."""
        r = self.qk_rope_head_dim
        if isinstance(r, bool) or not isinstance(r, int) or r < 0:
            raise InputError("model.qk_rope_head_dim", "an integer >= 0", r)
        if self.kv_lora_rank is None:
            for f, none in MLA_NONE_VALUES.items():
                if getattr(self, f) != none:
                    raise InputError(f"model.{f}", f"{none} without multi-head latent attention (kv_lora_rank "
                                     "null)", getattr(self, f))
        elif self.kind != "transformer" or self.kv_heads != self.heads:
            raise InputError("model.kv_lora_rank", "null unless a transformer with kv_heads = heads (MLA gives "
                             "every head its own K and V)", self.kv_lora_rank)

    # -- closed forms -------------------------------------------------------------------
    @property
    def mla(self) -> bool:
        """Multi-head latent attention (kv_lora_rank set)."""
        return self.kv_lora_rank is not None

    @property
    def head_size(self) -> int:
        """d: the size of one attention head (head_dim, else hidden / heads)."""
        return self.head_dim if self.head_dim is not None else self.hidden // self.heads

    @property
    def q_hidden(self) -> int:
        """q = a * d: the width of Q (h unless head_dim is set; MLA: a (d + qk_rope_head_dim), K's too)."""
        if self.mla:
            return self.heads * (self.head_size + self.qk_rope_head_dim)
        return self.hidden if self.head_dim is None else self.heads * self.head_dim

    @property
    def o_hidden(self) -> int:
        """o: the width of the attention output, the projection's input (q; MLA: a v_head_dim)."""
        return self.heads * (self.v_head_dim or self.head_size) if self.mla else self.q_hidden

    @property
    def core_hidden(self) -> float:
        """(q + o) / 2: QK^T and AV take 2 s q + 2 s o = 4 s core_hidden FLOPs a token (q unless MLA)."""
        return (self.q_hidden + self.o_hidden) / 2 if self.mla else self.q_hidden

    @property
    def kv_hidden(self) -> float:
        """hk: the width of K (and of V) = kv_heads * d (h * kv_heads / heads unless head_dim is set;
        MLA: the mean of K's q and V's o, so that K and V together are 2 hk wide)."""
        if self.mla:
            return self.core_hidden
        return self.hidden * self.kv_heads // self.heads if self.head_dim is None else self.kv_heads * self.head_dim

    def attn_matrices(self) -> list[tuple[int, int, str]]:
        """The attention's weight matrices as (input width, output width, tensor-parallel split): "col" splits the
        output, "row" the input, "dup" runs whole on every rank. Standard: QKV (h -> q + 2 hk) and the projection (q ->
        h); MLA (class docstring): Q's down and up (or one h -> q), KV's down (h -> kv_lora_rank + qk_rope_head_dim) and
        up (kv_lora_rank -> a (d + v_head_dim)), the projection (o -> h)."""
        h, q, o = self.hidden, self.q_hidden, self.o_hidden
        if not self.mla:
            return [(h, q + 2 * self.kv_hidden, "col"), (q, h, "row")]
        r, kv = self.q_lora_rank, self.kv_lora_rank
        qm = [(h, q, "col")] if r is None else [(h, r, "dup"), (r, q, "col")]
        kvm = [(h, kv + self.qk_rope_head_dim, "dup"), (kv, self.heads * self.head_size + o, "col")]
        return qm + kvm + [(o, h, "row")]

    def attn_up_matrices(self) -> list[tuple[int, int]]:
        """The attention's tensor-split matrices that make Q, K and V, (input, output) widths: MLA's
        up-projections, which its selective recompute runs again (empty without MLA)."""
        return [(i, o) for i, o, s in self.attn_matrices() if s == "col"] if self.mla else []

    def tp_replicated_params(self) -> int:
        """Parameters of one layer that every tensor-parallel rank holds whole: MLA's down-projections
        and latent norms (0 without MLA; norms elsewhere are counted as split, as before)."""
        if not self.mla:
            return 0
        dup = sum(i * o for i, o, s in self.attn_matrices() if s == "dup")
        return dup + (self.q_lora_rank or 0) + self.kv_lora_rank

    def attn_latent(self) -> int:
        """MLA's latent widths a token keeps per layer, on every tensor-parallel rank (0 unless MLA)."""
        return (self.q_lora_rank or 0) + self.kv_lora_rank + self.qk_rope_head_dim if self.mla else 0

    @property
    def gated(self) -> bool:
        """A gated MLP (GATED: SwiGLU or GeGLU): three matrices, the gate's activation times the up projection."""
        return self.activation in GATED

    @property
    def mlp_matrices(self) -> int:
        """Number of h x f weight matrices in the MLP: 2 (GeLU/ReLU) or 3 (gated: SwiGLU, GeGLU)."""
        return 3 if self.gated else 2

    @property
    def is_moe(self) -> bool:
        return self.experts > 1

    @property
    def moe_layers(self) -> int:
        """Number of MoE layers: every moe_layer_freq-th layer after the dense_layers (0 if dense)."""
        return (self.layers - self.dense_layers) // self.moe_layer_freq if self.is_moe else 0

    @property
    def expert_ffn(self) -> int:
        """fe: the ffn hidden size of one routed expert."""
        return self.expert_ffn_hidden if self.expert_ffn_hidden is not None else self.ffn_hidden

    @property
    def shared_expert_ffn(self) -> int:
        """fs: the ffn hidden size of one shared expert."""
        return self.shared_expert_ffn_hidden if self.shared_expert_ffn_hidden is not None else self.expert_ffn

    def moe_layers_before(self, x):
        """MoE layers among the first ``x`` layers (numpy-broadcast over x): layer j is an MoE layer when j >=
        dense_layers and (j - dense_layers) % moe_layer_freq == moe_layer_freq - 1 (every freq-th layer, Qwen2-MoE's
        decoder_sparse_step rule), so that moe_layers_before(layers) == moe_layers."""
        import numpy as np

        if not self.is_moe:
            return np.zeros_like(x)
        before = np.maximum(np.asarray(x) - self.dense_layers, 0)
        return before if self.moe_layer_freq == 1 else before // self.moe_layer_freq

    def moe_layer_dense_params(self) -> int:
        """Parameters of one MoE layer outside its routed experts (attention, router, shared
        experts, norms): what tensor parallelism splits and every expert-parallel rank holds."""
        return self.moe_layer_params() - self.moe_layer_expert_params()

    def _attn_weights(self) -> int:
        """The attention's weight-matrix elements (attn_matrices)."""
        return sum(i * o for i, o, _ in self.attn_matrices())

    def _attn_params(self) -> int:
        """Q, K, V and output projections (with their biases) of one layer; MLA's latent norms."""
        h, q, hk = self.hidden, self.q_hidden, self.kv_hidden
        if self.mla:
            return self._attn_weights() + (self.q_lora_rank or 0) + self.kv_lora_rank
        return h * (q + 2 * hk) + q * h + ((q + 2 * hk) + h if self.bias else 0)

    def _mlp_params(self, f: int) -> int:
        """One MLP (or expert) of ffn hidden f: mlp_matrices h x f matrices and their biases."""
        h = self.hidden
        return self.mlp_matrices * h * f + (f * (self.mlp_matrices - 1) + h if self.bias else 0)

    def layer_params(self) -> int:
        """Parameters of one dense layer (weights, biases, norms): every layer of a dense model."""
        h = self.hidden
        if self.kind == "mlp":
            return h * h + (h if self.bias else 0)
        return self._attn_params() + self._mlp_params(self.ffn_hidden) + 2 * self._norm_params()

    def expert_params(self) -> int:
        """Parameters of one routed expert (its MLP of ffn hidden fe)."""
        return self._mlp_params(self.expert_ffn)

    def router_params(self) -> int:
        """The router of one MoE layer: an h x E matrix."""
        return self.hidden * self.experts

    def moe_layer_expert_params(self) -> int:
        """Parameters of the E routed experts of one MoE layer (what expert parallelism shards)."""
        return self.experts * self.expert_params()

    def moe_layer_params(self) -> int:
        """Parameters of one MoE layer: attention, router, E routed and Es shared experts, norms."""
        return (self._attn_params() + self.router_params() + self.moe_layer_expert_params()
                + self.shared_experts * self._mlp_params(self.shared_expert_ffn) + 2 * self._norm_params())

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
        """Total parameters (every expert counted)."""
        n_moe = self.moe_layers
        return ((self.layers - n_moe) * self.layer_params() + (n_moe * self.moe_layer_params() if n_moe else 0)
                + self.embedding_params() + self.head_params())

    def active_params(self) -> int:
        """Parameters one token goes through: num_params less the E - k routed experts per MoE
        layer it skips (embeddings and head counted whole, as num_params counts them)."""
        return self.num_params() - self.moe_layers * (self.experts - self.experts_per_token) * self.expert_params()

    def _attn_fwd_flops_per_token(self) -> float:
        """QK^T and AV: 2*s*q each per token (the full s x s square, as Korthikanti Eq. 7 counts it;
        MLA: 2 s q + 2 s o; a sliding window: over attention_span keys, not s)."""
        return 4.0 * self.attention_span * self.core_hidden

    def layer_fwd_flops_per_token(self) -> float:
        """Forward FLOPs per token of one dense layer, counting matrix products only.

        2 FLOPs per multiply-add on each weight matrix, plus attention: QK^T and AV cost
        2*s*h each per token (the full s x s square, as Korthikanti Eq. 7 counts it).
        """
        h, f = self.hidden, self.ffn_hidden
        if self.kind == "mlp":
            return 2.0 * h * h
        weights = self._attn_weights() + self.mlp_matrices * h * f
        return 2.0 * weights + self._attn_fwd_flops_per_token()

    def moe_layer_fwd_flops_per_token(self) -> float:
        """Forward FLOPs per token of one MoE layer on its active weights: attention, the router
        (h x E), the k routed experts the token goes to and the Es shared experts."""
        h, m = self.hidden, self.mlp_matrices
        weights = (self._attn_weights() + h * self.experts
                   + m * h * (self.experts_per_token * self.expert_ffn + self.shared_experts * self.shared_expert_ffn))
        return 2.0 * weights + self._attn_fwd_flops_per_token()

    def head_fwd_flops_per_token(self) -> float:
        return 0.0 if self.kind == "mlp" else 2.0 * self.hidden * self.vocab

    def model_flops_per_sample(self) -> float:
        """Model FLOPs (forward + backward = 3x forward) per sequence, no recompute; for an MoE
        model on the active weights only (MFU counted on active parameters).

        For GPT (f = 4h, MHA) this is Korthikanti Eq. 7 divided by the batch B: 72 L s h^2 (1 + s/6h + V/12hL).
        """
        n_moe = self.moe_layers
        per_token = (self.layers - n_moe) * self.layer_fwd_flops_per_token() + self.head_fwd_flops_per_token()
        if n_moe:
            per_token += n_moe * self.moe_layer_fwd_flops_per_token()
        return 3.0 * per_token * self.seq_len


def _gpt(name: str, layers: int, hidden: int, heads: int, seq: int = 2048, vocab: int = 51200):
    return Transformer(name=name, layers=layers, hidden=hidden, heads=heads, seq_len=seq, vocab=vocab)


def _llama(name: str, layers: int, hidden: int, ffn: int, heads: int, kv: int):
    return Transformer(
        name=name, layers=layers, hidden=hidden, ffn_hidden=ffn, heads=heads, kv_heads=kv,
        seq_len=8192, vocab=128256, activation="swiglu", norm="rmsnorm", bias=False,
        tied_embeddings=False, learned_positions=False,
    )


def _moe(name: str, layers: int, hidden: int, ffn: int, heads: int, kv: int, seq: int, vocab: int, **moe):
    """A SwiGLU / RMSNorm / rotary / untied-head transformer (the MoE presets but gpt-oss's, and the Qwen ones)."""
    return Transformer(
        name=name, layers=layers, hidden=hidden, ffn_hidden=ffn, heads=heads, kv_heads=kv, seq_len=seq,
        vocab=vocab, activation="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False,
        learned_positions=False, **moe,
    )


# Presets. GPT-3: Brown et al. 2020 Table 2.1 (vocab padded to 51200 as Megatron does). Megatron 22B/175B/530B/1T:
# Korthikanti et al. 2022 Table 3. Llama-3: Meta's Llama 3 paper (Dubey et al. 2024) Table 3, seq 8192. mlp-64x8192: an
# MLP of 64 ReLU layers of 8192 x 8192 (seed 000's workload).
MODEL_PRESETS: dict[str, Transformer] = {
    "gpt3-175b": _gpt("gpt3-175b", 96, 12288, 96),
    "megatron-22b": _gpt("megatron-22b", 48, 6144, 64),
    "megatron-175b": _gpt("megatron-175b", 96, 12288, 96),
    "megatron-530b": _gpt("megatron-530b", 105, 20480, 128),
    "megatron-1t": _gpt("megatron-1t", 128, 25600, 160),
    "llama3-8b": _llama("llama3-8b", 32, 4096, 14336, 32, 8),
    "llama3-70b": _llama("llama3-70b", 80, 8192, 28672, 64, 8),
    "llama3-405b": _llama("llama3-405b", 126, 16384, 53248, 128, 8),
    # Qwen3-32B and Qwen2.5-72B: Qwen/Qwen3-32B and Qwen/Qwen2.5-72B config.json (64 layers, hidden 5120, 64 query
    # heads of 128, 8 KV heads, ffn 25600, vocab 151936; 80 layers, hidden 8192, 64 heads, 8 KV heads, ffn 29568, vocab
    # 152064; untied), their model cards' 32.8B and 72.7B (Qwen2.5's Q/K/V biases, 0.001%, left out); 4,096 tokens.
    "qwen3-32b": _moe("qwen3-32b", 64, 5120, 25600, 64, 8, 4096, 151936, head_dim=128),
    "qwen2.5-72b": _moe("qwen2.5-72b", 80, 8192, 29568, 64, 8, 4096, 152064),
    # Mixtral 8x7B: mistralai/Mixtral-8x7B-v0.1 config.json (hidden 4096, 32 layers, 32 heads, 8 KV heads, ffn 14336,
    # vocab 32000, 8 experts, 2 a token), Jiang et al. 2024, arXiv:2401.04088 (all layers MoE; seq 32768). 46.7B/12.9B.
    "mixtral-8x7b": _moe("mixtral-8x7b", 32, 4096, 14336, 32, 8, 32768, 32000, experts=8, experts_per_token=2),
    # Mixtral 8x22B: mistralai/Mixtral-8x22B-v0.1 config.json (hidden 6144, 56 layers, 48 heads, 8 KV heads, ffn
    # 16384, vocab 32000, 8 experts, 2 per token, 65536 positions); 141B total, 39B active (Mistral AI).
    "mixtral-8x22b": _moe("mixtral-8x22b", 56, 6144, 16384, 48, 8, 65536, 32000, experts=8, experts_per_token=2),
    # DeepSeek-V3: DeepSeek-AI 2024, arXiv:2412.19437 Sec. 4.2 and deepseek-ai/DeepSeek-V3 config.json: 61 layers,
    # hidden 7168, 128 heads, 256 routed experts + 1 shared of ffn 2048, top-8, the first 3 layers dense with ffn 18432,
    # vocab 129280, pre-training at 4K tokens; 671B / 37B active (no multi-token-prediction module). MLA (q_lora_rank
    # 1536, kv_lora_rank 512, qk_nope_head_dim 128 = head_dim, qk_rope_head_dim 64, v_head_dim 128): 187.1M attention
    # parameters a layer. Node-limited routing (Sec. 2.1.2: at most M = 4 nodes a token; n_group 8, topk_group 4; Bridge
    # moe_router_num_groups 8, moe_router_group_topk 4): 8 groups of 32 consecutive experts, 4 of them per token.
    "deepseek-v3": _moe("deepseek-v3", 61, 7168, 18432, 128, 128, 4096, 129280, experts=256,
                        experts_per_token=8, shared_experts=1, expert_ffn_hidden=2048, dense_layers=3,
                        router_groups=8, router_group_topk=4, head_dim=128, q_lora_rank=1536, kv_lora_rank=512,
                        qk_rope_head_dim=64, v_head_dim=128),
    # Qwen3-MoE: Qwen/Qwen3-30B-A3B, Qwen3-235B-A22B config.json (head_dim 128, 128 experts, 8 a token, none shared, all
    # MoE, vocab 151936), Qwen3 report (arXiv:2505.09388 Table 2; 4,096 tokens), Q/K norms out. 30.5B/3.3B, 235B/22B.
    "qwen3-30b-a3b": _moe("qwen3-30b-a3b", 48, 2048, 6144, 32, 4, 4096, 151936, head_dim=128, experts=128,
                          experts_per_token=8, expert_ffn_hidden=768),
    "qwen3-235b-a22b": _moe("qwen3-235b-a22b", 94, 4096, 12288, 64, 4, 4096, 151936, head_dim=128, experts=128,
                            experts_per_token=8, expert_ffn_hidden=1536),
    # gpt-oss-120b: openai/gpt-oss-120b config.json (hidden 2880, 36 layers, 64 query heads of 64, 8 KV heads, 128
    # experts of ffn 2880, 4 a token, vocab 201088, untied; Q, K, V, output and experts with biases) and its model card
    # (OpenAI 2025, arXiv:2508.10925 Table 1: 116.83B, 5.13B active); every other layer, from the first, attends within
    # 128 keys (layer_types; Megatron-Bridge's GPT-OSS provider: window_size (128, 0), window_attn_skip_freq 2);
    # pre-trained and benchmarked at 4,096 tokens (initial_context_length); the experts' activation clamped at
    # swiglu_limit 7.0 (glu_clamp). The attention sinks (64 a layer) and the router's bias are left out.
    "gpt-oss-120b": Transformer(
        name="gpt-oss-120b", layers=36, hidden=2880, ffn_hidden=2880, heads=64, kv_heads=8, head_dim=64, seq_len=4096,
        vocab=201088, activation="swiglu", norm="rmsnorm", bias=True, tied_embeddings=False, learned_positions=False,
        experts=128, experts_per_token=4, sliding_window=128, window_layers=18, window_every=2, glu_clamp=7.0,
    ),
    # gpt-oss-20b: openai/gpt-oss-20b config.json, gpt-oss-120b's layer with 24 layers and 32 experts (the model card,
    # arXiv:2508.10925 Table 1: 20.91B, 3.61B active).
    "gpt-oss-20b": Transformer(
        name="gpt-oss-20b", layers=24, hidden=2880, ffn_hidden=2880, heads=64, kv_heads=8, head_dim=64, seq_len=4096,
        vocab=201088, activation="swiglu", norm="rmsnorm", bias=True, tied_embeddings=False, learned_positions=False,
        experts=32, experts_per_token=4, sliding_window=128, window_layers=12, window_every=2, glu_clamp=7.0,
    ),
    # Kimi K2: moonshotai/Kimi-K2-Instruct config.json, DeepSeek-V3's architecture (MLA as DeepSeek-V3's) with 64 heads,
    # 384 routed experts of 2048 and one shared, 8 a token, no expert groups, the first layer dense (18432), vocab
    # 163840; its model card: 1T total, 32B activated. GLM-4.5 and GLM-4.5-Air: zai-org's config.json (92 / 46 layers,
    # hidden 5120 / 4096, 96 query heads of 128 over 8 KV heads, 160 / 128 routed experts of 1536 / 1408 and one shared,
    # 8 a token, the first 3 / 1 layers dense of 12288 / 10944, vocab 151552); the GLM-4.5 report (arXiv:2508.06471):
    # 355B / 32B active and 106B / 12B, with the multi-token-prediction layer, which is not counted here. 4,096 tokens.
    "kimi-k2": _moe("kimi-k2", 61, 7168, 18432, 64, 64, 4096, 163840, experts=384, experts_per_token=8,
                    shared_experts=1, expert_ffn_hidden=2048, dense_layers=1, head_dim=128, q_lora_rank=1536,
                    kv_lora_rank=512, qk_rope_head_dim=64, v_head_dim=128),
    "glm-4.5": _moe("glm-4.5", 92, 5120, 12288, 96, 8, 4096, 151552, head_dim=128, experts=160, experts_per_token=8,
                    shared_experts=1, expert_ffn_hidden=1536, dense_layers=3),
    "glm-4.5-air": _moe("glm-4.5-air", 46, 4096, 10944, 96, 8, 4096, 151552, head_dim=128, experts=128,
                        experts_per_token=8, shared_experts=1, expert_ffn_hidden=1408, dense_layers=1),
    # Llama 4: meta-llama/Llama-4-Scout-17B-16E and Llama-4-Maverick-17B-128E config.json text_config (48 layers,
    # hidden 5120, 40 query heads of 128, 8 KV heads, vocab 202048, untied; 16 / 128 routed experts of ffn 8192, one a
    # token, beside one shared expert of 8192; Scout MoE on every layer, Maverick on every other from the second with
    # dense layers of ffn 16384; chunks of 8,192 tokens on the 36 layers with rotary positions). Meta's model card:
    # 109B / 400B total (with the vision encoder, not counted here), 17B active. Meta publishes no pre-training length:
    # 8,192 tokens, the chunk, at which every layer's attention is causal (--seq-len trains longer).
    "llama4-scout": _moe("llama4-scout", 48, 5120, 16384, 40, 8, 8192, 202048, experts=16,
                         shared_experts=1, expert_ffn_hidden=8192, attention_chunk=8192, window_layers=36,
                         window_every=4),
    "llama4-maverick": _moe("llama4-maverick", 48, 5120, 16384, 40, 8, 8192, 202048, experts=128,
                            shared_experts=1, expert_ffn_hidden=8192, moe_layer_freq=2, attention_chunk=8192,
                            window_layers=36, window_every=4),
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
