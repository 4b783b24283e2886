"""Memory per GPU: activations, model state under ZeRO, communication buffers, per pipeline stage.

    state      Megatron's 18 bytes per parameter (2 bf16 weight, 4 fp32 gradient, 12 fp32 master +
               Adam moments; costmodel._dtypes), sharded by ZeRO stage over the dp x cp replicas
               (Rajbhandari et al. 2020): weights from ZeRO-3, gradients from ZeRO-2, optimizer
               state from ZeRO-1 (state_bytes, state_bytes_per_param); a stage's parameters per GPU
               (stage_params) hold its layers, the embedding on the first and the head on the last.
    activations  Korthikanti et al. 2022 Sec. 4 generalised to GQA, SwiGLU, multi-head latent
               attention and context parallelism: bytes one layer keeps per micro-batch
               (layer_activation_bytes, moe_layer_activation_bytes), what a recompute choice keeps
               and holds while recomputing (activation_bytes), times the micro-batches in flight on
               that stage (costmodel._pipeline_terms.in_flight or the simulator's peak).
    buffers    two tensor-parallel activations, two gradient buckets (data parallelism), two
               prefetched layers (ZeRO-3), the expert all-to-all buffers, and a fixed reserve for
               the CUDA context, workspaces and fragmentation (buffer_bytes).
stage_memory and moe_memory sum them per stage: the one memory formula of the evaluator and of the
memory-only screen (costmodel._memory).
"""

from __future__ import annotations

import numpy as np

from costmodel._dtypes import ACT_BYTES, GRAD_BYTES, GRAD_COMM_BYTES, OPTIM_BYTES, WEIGHT_BYTES
from costmodel._experts import ROUTER_PROB_BYTES, clamp_saved_bytes, layer_mix, routed_copies
from costmodel._workloads import Transformer

# Memory the framework holds outside the model: CUDA context, cuBLAS/NCCL workspaces and
# allocator fragmentation (PyTorch reports about 1-3 GB on A100/H100 training runs).
RESERVED_BYTES = 2.0e9
# Megatron-LM's default DDP gradient bucket, 40M elements.
DP_BUCKET_ELEMS = 40e6
# Activation memory, Korthikanti et al. 2022 Sec. 4.1, bytes per token per layer: the
# tensors replicated across tp without sequence parallelism (2 norm inputs 4h, QKV input 2h,
# 2 dropout masks 2h, MLP input 2h) = 10h; the split ones: Q 2h + K 2hk + V 2hk +
# projection input 2h, and MLP intermediates 4f (GeLU) or 6f (SwiGLU); 5 bytes per
# attention score (softmax output 2, dropout mask 1, dropout output 2).
ACT_REPLICATED_H = 10
ACT_SCORE_BYTES = 5


# Framework.layer_saves: whose code's saved tensors price a dense transformer layer's activations.
#   korthikanti  Korthikanti et al. 2022 Sec. 4.1 generalised (layer_activation_bytes): GPT layers under Megatron-LM,
#                the dropout masks counted; the profiles before layer counts and those whose layer code is not derived
#   te           Megatron-Core's TransformerLayer with Transformer Engine modules (te_saved_bytes)
#   torchtitan   torchtitan's Llama block in eager PyTorch autograd (torchtitan_saved_bytes)
LAYER_SAVES = ("korthikanti", "te", "torchtitan")
# fp32 statistics a norm keeps per token for its backward: LayerNorm's mean and 1 / std, RMSNorm's 1 / rms
# (Transformer Engine layernorm_linear.py saves mu and rsigma; torchtitan's RMSNorm saves its rsqrt; nn.LayerNorm
# (native_layer_norm) its mean and rstd).
NORM_STAT_BYTES = {"layernorm": 8, "rmsnorm": 4, "none": 0}
# A fused attention kernel's fp32 softmax statistics per head and token (Transformer Engine cpp_extensions/fused_attn.py
# lines 310-312: softmaxStats [b, h, s, 1] float32; FlashAttention's softmax_lse the same).
SOFTMAX_STAT_BYTES = 4
# A dropout mask element (bool), Korthikanti et al. 2022 Sec. 4.1.
MASK_BYTES = 1
# Bytes an attention score keeps in an unfused kernel without dropout: its softmax output (with dropout its mask and
# output too: ACT_SCORE_BYTES).
SCORE_BYTES_NO_DROPOUT = 2


def te_saved_bytes(model: Transformer, T, t, sp, *, fp8=False, dropout=False, fused=True) -> dict:
    """Bytes one Megatron-Core layer with Transformer Engine modules keeps for its backward, per micro-batch of T
    tokens on a rank (T = b s / cp), term by term: ``fp8`` the rows whose linear layers run fp8 (current or delayed
    scaling: one byte an element), ``dropout`` hidden dropout on (masks), ``fused`` a fused (cuDNN / flash) attention
    kernel. The code (Megatron-LM d98e8a6, TransformerEngine d0067d0):

    norm_in   each norm's input, the residual stream (TE layernorm_linear.py:526-536 saves inputmat), 16-bit, split by
              t under sequence parallelism (the norm runs on the sequence shard)
    ln_out    each LayerNormLinear's normalised output, saved before its all-gather (layernorm_linear.py:430-435 frees
              the gathered copy, 469 saves ln_out; backward gathers again): 16-bit, under fp8 the quantised copy (1)
    stats     the norms' fp32 statistics (NORM_STAT_BYTES; layernorm_linear.py saves mu, rsigma)
    qkv       Q and K after RoPE (new tensors) and V: TE makes V contiguous (dot_product_attention/utils.py
              get_qkv_layout: a V viewing the QKV GEMM's output next to rotated Q and K is no supported layout, so
              q, k, v are copied contiguous), then FusedAttnFunc saves q, k, v, out (backends.py:1655-1664)
    out       the kernel's output, which is also linear_proj's saved input (module/linear.py:619-621 saves inputmat,
              the same tensor); under fp8 the projection saves its quantised copy beside it (one byte more)
    softmax   the kernel's fp32 statistics (SOFTMAX_STAT_BYTES per head a rank holds); unfused: ``scores`` instead
    scores    unfused attention: per score its softmax output (2), with dropout its mask and output (5 in all)
    mlp       linear_fc1's output, saved by Megatron's fused bias-SwiGLU / bias-GeLU (fusions/fused_bias_swiglu.py:235,
              16-bit unless activation_func_fp8_input_store), and linear_fc2's input (linear.py: 16-bit, fp8: 1 byte)
    masks     with hidden dropout, the two bias-dropout-adds' masks (fusions/fused_bias_dropout.py; p = 0 saves none:
              PyTorch's dropout returns its input)
    The residual adds save nothing. Returns each term (bytes per micro-batch) and ``total``."""
    h, q, o, hk, a, f = model.hidden, model.q_hidden, model.o_hidden, model.kv_hidden, model.heads, model.ffn_hidden
    s, sp_div = model.seq_len, np.where(sp, t, 1)
    lo = np.where(fp8, 1.0, float(ACT_BYTES))  # a linear layer's saved input: 1 byte under fp8
    out = {
        "norm_in": 2 * ACT_BYTES * T * h / sp_div,
        "ln_out": 2 * lo * T * h / sp_div,
        "stats": 2 * NORM_STAT_BYTES[model.norm] * T / sp_div,
        "qkv": ACT_BYTES * T * (q + 2 * hk) / t,
        "out": (ACT_BYTES + np.where(fp8, 1.0, 0.0)) * T * o / t,
        "softmax": (SOFTMAX_STAT_BYTES * T * a / t) * fused,
        "scores": 0.0 if fused else (ACT_SCORE_BYTES if dropout else SCORE_BYTES_NO_DROPOUT) * a * T * s / t,
        "mlp": (ACT_BYTES * (model.mlp_matrices - 1) + lo) * T * f / t,
        "masks": (2 * MASK_BYTES * T * h / sp_div) * dropout,
    }
    out["total"] = sum(out.values())
    return out


def torchtitan_saved_bytes(model: Transformer, T, t, sp) -> dict:
    """Bytes torchtitan's Llama block (torchtitan 9dec370 models/llama/model.py, models/norms.py) keeps for its
    backward in eager PyTorch autograd, per micro-batch of T tokens on a rank, term by term. What autograd saves:
    its derivative formulas' inputs, those a differentiable input needs (tools/autograd/gen_variable_type.py
    guard_for: a product by a constant saves only the constant); bf16 compute (FSDP2 param_dtype), fp8 linear layers
    saving their 16-bit inputs (torchao):

    norm_in   RMSNorm (norms.py:96-101): x.float() saved by pow and the product (4 bytes an element); nn.LayerNorm: its
              16-bit input; on the sequence shard under sequence parallelism
    ln_out    RMSNorm's normalised 16-bit output, saved by ``output * self.weight`` for the weight's gradient
    stats     rsqrt's fp32 result (RMSNorm), mean and rstd (LayerNorm): NORM_STAT_BYTES
    gathered  each norm's (weighted) output as the column-parallel products take it: all-gathered to the whole
              sequence under tensor parallelism (PrepareModuleInput to Replicate), saved by wq, wk, wv and by w1, w3
    qkv       SDPA's inputs (derivatives.yaml _scaled_dot_product_flash_attention): Q, and K and V after repeat_kv
              (model.py:116-125: unsqueeze, expand, reshape): a copy as wide as Q where a rank holds several K/V heads
              and kv_heads < heads; with one K/V head a rank the reshape merges a size-1 dimension with the stride-0
              one, a view of the hk / t wide K and V (no copy); with kv_heads = heads K and V as they are
    out       SDPA's output, which is also wo's input: the flash and cuDNN kernels write it (b, s, heads, d) and
              return it transposed, so output.transpose(1, 2).contiguous() (model.py:210-214) is that tensor, no copy
    softmax   SDPA's fp32 logsumexp per head and token
    mlp       SwiGLU ``w2(F.silu(w1(x)) * w3(x))`` (model.py:253): w1's output (silu's input), silu's output and w3's
              output (the product's), the product (w2's input): 4 elements of f; GeLU: its input and output
    No dropout modules; RoPE (the complex product by freqs_cis, a constant) and the residual adds save nothing."""
    h, q, a, f = model.hidden, model.q_hidden, model.heads, model.ffn_hidden
    sp_div = np.where(sp, t, 1)
    rms = model.norm == "rmsnorm"
    kv_copy = (model.kv_heads < model.heads) & (model.kv_heads / t > 1)  # repeat_kv copies (qkv above)
    zero = np.zeros_like(np.asarray(T, dtype=np.float64))
    out = {
        "norm_in": 2 * (4 if rms else ACT_BYTES) * T * h / sp_div * (model.norm != "none"),
        "ln_out": 2 * ACT_BYTES * T * h / sp_div * rms,
        "stats": 2 * NORM_STAT_BYTES[model.norm] * T / sp_div,
        "gathered": 2 * ACT_BYTES * T * h + zero,
        "qkv": ACT_BYTES * T * (q / t + 2 * np.where(kv_copy, q / t, model.kv_hidden / t)),
        "out": ACT_BYTES * T * q / t,
        "softmax": SOFTMAX_STAT_BYTES * T * a / t,
        "mlp": (4 if model.gated else 2) * ACT_BYTES * T * f / t,
    }
    out["total"] = sum(out.values())
    return out


def torchtitan_expert_extra_bytes(model: Transformer, T, t):
    """Bytes torchtitan's routed experts keep per micro-batch beyond moe_layer_activation_bytes' routed copies (each
    its 16-bit input and Megatron-Core's fused SwiGLU's 6 bytes an element of the expert width): in eager autograd,
    GroupedExperts' SwiGLU (torchtitan b5bcd76 models/common/moe.py lines 94-107: silu(w1 x) * (w3 x), then w2) keeps
    a fourth 16-bit product of the expert width (w1's output, silu's, w3's and their product), and the combine
    (models/common/token_dispatcher.py lines 158-161: routed_output.to(float32) * scores) keeps each copy's output in
    fp32 for the scores' gradient, 4 bytes an element of h. Per routed copy (routed_copies)."""
    per_copy = (ACT_BYTES * model.expert_ffn if model.gated else 0.0) + 4 * model.hidden
    return routed_copies(model, T, t) * per_copy


def mla_latent_activation_bytes(model: Transformer, T, split):
    """MLA's latents a layer keeps (16 bits, whole on every tensor-parallel rank, its sequence slice
    under sequence parallelism: ``split``): each latent's normalised input to its up-projection and
    the norm's input (0 without MLA)."""
    return 2 * ACT_BYTES * T * model.attn_latent() / split if model.mla else 0.0


def moe_layer_activation_bytes(model: Transformer, b, t, c, sp, u=1):
    """Activation bytes one MoE layer keeps for one micro-batch with no recompute (the dense layer's
    terms with its MLP replaced by: the shared experts' intermediates split by tp, the routed
    copies' inputs and intermediates, the router's fp32 probabilities), its attention-score
    part, and its experts' part (those three MLP terms: what a framework's layer count keeps of it)."""
    h, q, hk, a, s = model.hidden, model.q_hidden, model.kv_hidden, model.heads, model.seq_len
    T = b * s / c
    coef = 6 if model.gated else 4
    fs = model.shared_experts * model.shared_expert_ffn
    copies = routed_copies(model, T, t)
    repl = ACT_REPLICATED_H * T * h / np.where(sp, t, 1) + mla_latent_activation_bytes(model, T, np.where(sp, t, 1))
    split = (2 * T * (q + model.o_hidden) + 4 * T * hk + coef * T * fs) / t
    # u x the copies after the etp all-gather, each with 1 / u of the expert's intermediates (and a clamp's copy)
    routed = (copies * (ACT_BYTES * h * u + (coef + clamp_saved_bytes(model)) * model.expert_ffn)
              + ROUTER_PROB_BYTES * model.experts * T / t)
    scores = ACT_SCORE_BYTES * a * b * (s / c) * s / t
    return repl + split + routed + scores, scores, coef * T * fs / t + routed


def layer_activation_bytes(model: Transformer, b, t, c, sp):
    """Activation bytes one layer keeps for one micro-batch with no recompute, and the part
    that is the attention-score term (dropped by selective recompute)."""
    h, f, hk, a, s = model.hidden, model.ffn_hidden, model.kv_hidden, model.heads, model.seq_len
    T = b * s / c
    if model.kind == "mlp":
        # Each linear layer keeps its input (16-bit) and the ReLU mask (1 byte), split by t
        # for the row-parallel half of the pairs, replicated for the column-parallel half.
        total = T * h * (ACT_BYTES * 0.5 * (1 + 1 / t) + 1 / t)
        return total, np.zeros_like(total)
    repl = ACT_REPLICATED_H * T * h / np.where(sp, t, 1) + mla_latent_activation_bytes(model, T, np.where(sp, t, 1))
    mlp = (6 if model.gated else 4) * T * f
    # Q, K and V (2 hk), the projection input (o) and the MLP's intermediates
    split = (2 * T * (model.q_hidden + model.o_hidden) + 4 * T * hk + mlp) / t
    scores = ACT_SCORE_BYTES * a * b * (s / c) * s / t
    return repl + split + scores, scores


def activation_bytes(full, sel, act_L, sel_kept, sel_work, T, h, sp_div):
    """Activation bytes one layer keeps per micro-batch in flight under its recompute choice
    (full: its input only; selective: ``sel_kept``, what the framework's selective policy keeps;
    none: all), and the working set of the one layer being recomputed (full: the whole layer;
    selective: ``sel_work``)."""
    kept = np.where(full, ACT_BYTES * T * h / sp_div, np.where(sel, sel_kept, act_L))
    return kept, np.where(full, act_L, np.where(sel, sel_work, 0.0))


def layer_activations(model: Transformer, sh: dict, full, sel, sp_div) -> dict:
    """activation_bytes (kept, work) of one dense layer where the model has one and (kept_m,
    work_m) of one MoE layer where it is an MoE model, from the shape terms ``sh``."""
    def of(pre):
        return activation_bytes(full, sel, sh[pre + "act_L"], sh[pre + "sel_kept"], sh[pre + "sel_work"], sh["T"],
                                model.hidden, sp_div)

    out = {}
    if model.moe_layers < model.layers:  # some dense layer
        out["kept"], out["work"] = of("")
    if model.is_moe:
        out["kept_m"], out["work_m"] = of("moe_")
    return out


def fp8_input_saving(model: Transformer, T, t, sp) -> tuple[np.ndarray, np.ndarray]:
    """Bytes per layer and micro-batch that a framework keeping its linear layers' inputs in fp8
    (Framework.fp8_saved_inputs) saves against 16 bits, one byte an element: in attention, the
    QKV input (h per token, split by t only under sequence parallelism) and the projection input
    (the query width, split by t); in the dense FFN, the FC1 input (h, as QKV's) and the FC2
    input (f, split by t)."""
    if model.kind == "mlp":
        return np.zeros_like(T), np.zeros_like(T)
    h, sp_div = model.hidden, np.where(sp, t, 1)
    return T * (h / sp_div + model.o_hidden / t), T * (h / sp_div + model.ffn_hidden / t)


def stage_params(model: Transformer, n, first, last, t, edges=None):
    """Parameters per GPU of a stage of n layers (plus the embedding on the first stage and the head on the last,
    with Megatron's tied copy of the embedding on the last when pp > 1); ``edges``: plus_edges, no row of pp 1."""
    tied_copy = model.vocab * model.hidden if (model.tied_embeddings and model.kind != "mlp") else 0
    if edges is not None:
        out = edges(n * model.layer_params(), model.embedding_params(), model.head_params() + tied_copy) / t
    else:
        # (the masks as 1.0 / 0.0: every term and sum an integer below 2**53, so exact in float64 whatever the types,
        # at a third of the time of integer masks times integers added to floats; np.where: several times more)
        first, last = (np.asarray(x, dtype=np.float64) for x in (first, last))
        head_p = model.head_params() + tied_copy * (1.0 - first) if tied_copy else model.head_params()
        out = (n * model.layer_params() + first * model.embedding_params() + last * head_p) / t
    return out + n * model.tp_replicated_params() * (1 - 1 / t) if model.mla else out  # (MLA's whole on every rank)


def grad_kwargs(fw, prec) -> dict:
    """state_bytes' gradient arguments under framework profile ``fw`` for rows of precision codes ``prec``: one number
    where its gradient buffer has the same bytes at every precision (GRAD_BYTES for the profiles before the field), else
    the bytes by precision and the codes (Framework.grad_memory_bytes)."""
    gb = fw.grad_memory_bytes()
    kw = {"grad_bytes": gb} if np.ndim(gb) == 0 else {"grad_bytes": gb, "prec": prec}
    return {**kw, "optim_bytes": fw.optim_state_bytes}


def state_bytes(params, zero, g, stage_of=None, grad_bytes=GRAD_BYTES, prec=None, optim_bytes=OPTIM_BYTES):
    """Weight, gradient and optimizer bytes per GPU for ``params`` parameters, each sharded
    over the g data-parallel ranks from its ZeRO stage on (3, 2 and 1). ``stage_of``: zero and
    g are per configuration, params per stage of configuration ``stage_of``. ``grad_bytes``: a
    gradient's bytes (Framework.grad_memory_bytes: one number, or one per precision of the codes
    ``prec``, aligned with zero); ``optim_bytes``: the optimizer's bytes a parameter (Framework.optim_state_bytes)."""
    shards = _state_shards(zero, g)
    gb = grad_bytes if prec is None else np.take(np.asarray(grad_bytes, dtype=np.float64), np.asarray(prec, np.intp))
    if stage_of is not None:
        shards = tuple(x[stage_of] for x in shards)
        gb = gb if prec is None else gb[stage_of]
    return tuple(nbytes * params / x for nbytes, x in zip((WEIGHT_BYTES, gb, optim_bytes), shards, strict=True))


def state_bytes_per_param(zero, g, grad_bytes=GRAD_BYTES, prec=None, optim_bytes=OPTIM_BYTES):
    """state_bytes' three parts together, per parameter (a stage's total is this x its parameters).
    Long integer columns: looked up in a table over every (precision, ZeRO stage, g) up to theirs (the same
    sums, one gather instead of nine passes). ``grad_bytes``, ``prec``, ``optim_bytes``: as state_bytes takes them."""
    zero, g = np.asarray(zero), np.asarray(g)
    if prec is not None:
        prec = np.broadcast_to(np.asarray(prec), np.broadcast_shapes(zero.shape, g.shape, np.shape(prec)))
    if g.size > 1024 and zero.dtype.kind == g.dtype.kind == "i" and min(zero.min(), g.min()) >= 0:
        G, Z = int(g.max()) + 1, int(zero.max()) + 1
        with np.errstate(divide="ignore"):
            if prec is None:
                table = _bytes_per_param(np.arange(Z)[:, None], np.arange(G), grad_bytes, optim_bytes)
            else:  # (precision, ZeRO stage, g)
                gb = np.asarray(grad_bytes, dtype=np.float64)[:, None, None]
                table = _bytes_per_param(np.arange(Z)[None, :, None], np.arange(G)[None, None, :], gb, optim_bytes)
        flat = zero * G + g if prec is None else (prec * Z + zero) * G + g
        return np.take(table.reshape(-1), flat)  # (a flat take: a 2-d fancy index is twice as slow)
    gb = grad_bytes if prec is None else np.take(np.asarray(grad_bytes, dtype=np.float64), prec)
    return _bytes_per_param(zero, g, gb, optim_bytes)


def _bytes_per_param(zero, g, grad_bytes=GRAD_BYTES, optim_bytes=OPTIM_BYTES):
    return sum(nbytes / x for nbytes, x in zip((WEIGHT_BYTES, grad_bytes, optim_bytes), _state_shards(zero, g),
                                               strict=True))


def _state_shards(zero, g):
    """The ranks weights, gradients and optimizer state are sharded over: g from ZeRO 3, 2 and 1 on, else 1."""
    if np.asarray(g).dtype.kind in "iu":  # np.where(zero >= z, g, 1) as 1 + (g - 1) x mask: the same integers,
        g1 = np.asarray(g) - 1  # a fifth of the time over a block's rows (np.where's random branches)
        return 1 + g1 * (zero == 3), 1 + g1 * (zero >= 2), 1 + g1 * (zero >= 1)
    return np.where(zero == 3, g, 1), np.where(zero >= 2, g, 1), np.where(zero >= 1, g, 1)


def buffer_bytes(T, h, t, g, zero, params_max, layer_p, stage_of=None):
    """Communication buffers per GPU: two tensor-parallel activations, two gradient buckets
    (data parallelism), two prefetched layers (ZeRO-3), and the reserved runtime memory.
    ``stage_of``: T, t, g, zero per configuration, params_max per row: the buffers of stages of
    configurations ``stage_of`` (k, N)."""
    # (the buffers are finite and >= 0: a buffer times its mask, 1.0 or 0.0, is np.where(mask, buffer, 0.0) bit for
    # bit, at a fifth of its time over a block's rows)
    tp_buf = (t > 1) * (2.0 * ACT_BYTES * T * h)
    bucket = 2.0 * GRAD_COMM_BYTES * np.minimum(params_max, DP_BUCKET_ELEMS)
    z3_buf = (zero == 3) * (2.0 * WEIGHT_BYTES * layer_p / t)
    reduced = g > 1
    if stage_of is not None:  # the configurations' part first, then the rows' buckets (times 1.0 or 0.0: as a where)
        return np.take(tp_buf + z3_buf + RESERVED_BYTES, stage_of) + np.take(reduced * 1.0, stage_of) * bucket
    return tp_buf + reduced * bucket + z3_buf + RESERVED_BYTES


def stage_memory(model: Transformer, sh: dict, t, sp, zero, g, n, first, last, full, sel, k, wt, moe=None,
                 grad=None) -> dict:
    """Bytes per GPU of every stage, the one memory formula of evaluate and of the memory-only
    screen (costmodel._memory): weights, grads, optimizer and activations (N, k), buffers (N,),
    their total per stage (N, k; -inf on the padding columns of rows with fewer stages) and the
    largest stage's parameters per GPU (N,). ``sh``: the per-row shape terms (T, act_L, sel_kept,
    sel_work, emb_act, head_act; moe_act_L, moe_sel_kept, moe_sel_work for an MoE model); ``k``: micro-batches
    in flight per stage; ``zero`` after the framework's columns; ``g`` the replicas gradients are reduced over
    (dp x cp). ``moe`` (an MoE model): a dict of n_moe (N, k) MoE layers per stage, e (ep) and edp (N,)
    (_moe_stage_memory). ``grad``: grad_kwargs of the rows (None: GRAD_BYTES)."""
    grad = {} if grad is None else grad
    if moe is not None:
        return _moe_stage_memory(model, sh, t, sp, zero, g, n, first, last, full, sel, k, wt, moe, grad)
    col = lambda x: np.asarray(x, dtype=np.float64)[:, None]  # noqa: E731  (N,) -> (N, 1)
    grad_c = {**grad, "prec": np.asarray(grad["prec"])[:, None]} if "prec" in grad else grad
    params = stage_params(model, n, first, last, col(t))  # (N, k) per GPU
    params_max = np.max(np.where(wt > 0, params, 0.0), axis=1)
    act_kept, work = activation_bytes(full, sel, col(sh["act_L"]), col(sh["sel_kept"]), col(sh["sel_work"]),
                                      col(sh["T"]), model.hidden,
                                      col(np.where(sp, t, 1)))
    act = k * (n * act_kept + first * col(sh["emb_act"])) + work + last * col(sh["head_act"])
    w_b, g_b, o_b = state_bytes(params, col(zero), col(g), **grad_c)
    buffers = buffer_bytes(sh["T"], model.hidden, t, g, zero, params_max, model.layer_params())
    # (the state as parameters x bytes per parameter, as evaluate sums it)
    total = np.where(wt > 0, params * state_bytes_per_param(col(zero), col(g), **grad_c) + act + col(buffers), -np.inf)
    return {"weights": w_b, "grads": g_b, "optimizer": o_b, "activations": act, "buffers": buffers,
            "total": total, "params_max": params_max}


def _moe_stage_memory(model: Transformer, sh: dict, t, sp, zero, g, n, first, last, full, sel, k, wt, moe,
                      grad) -> dict:
    """stage_memory of an MoE model (moe_memory on (N, k) stage columns): adds dense_max and
    expert_max, the largest stage's parameters per GPU of each kind (N,)."""
    col = lambda x: np.asarray(x, dtype=np.float64)[:, None]  # noqa: E731  (N,) -> (N, 1)
    on = wt > 0
    acts = layer_activations(model, {key: col(x) for key, x in sh.items()}, full, sel, col(np.where(sp, t, 1)))
    n_d = None if model.moe_layers == model.layers else n - moe["n_moe"]
    out = moe_memory(model, {key: col(sh[key]) for key in MOE_MEMORY_TERMS}, acts, col(t), col(zero), col(g), n_d,
                     moe["n_moe"], first, last, k, col(moe["e"]), col(moe["edp"]), col(moe["u"]),
                     row_max=lambda a: np.max(np.where(on, a, 0.0), axis=1), to_stage=col, n=n,
                     grad={**grad, "prec": np.asarray(grad["prec"])[:, None]} if "prec" in grad else grad)
    buffers = out["buffers"]
    out["buffers"] = buffers[:, 0]
    out["total"] = np.where(on, out["state"] + out["activations"] + buffers, -np.inf)
    return out


# The shape terms moe_memory reads.
MOE_MEMORY_TERMS = ("T", "emb_act", "head_act")


def moe_memory(model: Transformer, sh: dict, acts: dict, t, zero, g, n_d, n_m, first, last, k, e, edp, u, *,
               row_max, to_stage, n, edges=None, first_only: bool = False, grad=None) -> dict:
    """Memory per GPU of stages of an MoE model, every argument an array of stages ((N, k)
    columns) or one that broadcasts to them: a stage holds n_d dense (None: every layer an MoE layer) and n_m MoE
    layers (``n``: their sum); the MoE layers' routed experts (E / ep per
    GPU, each 1 / etp = u of its width) are sharded by ZeRO over the edp expert-data-parallel ranks,
    everything else as a dense layer's parameters over the g = dp x cp replicas; activations per
    layer type (``acts``: layer_activations); the all-to-all buffers (the routed copies sent and
    received). ``sh``: the shape terms of MOE_MEMORY_TERMS; ``row_max``: a
    stage array to its row's largest (N,); ``to_stage``: a row array (N,) back to the stages.
    Returns state (weights, gradients and optimizer together; state_bytes of the two kinds of
    parameters gives the parts), activations, buffers and the dense and expert parameters per GPU
    (dense_params, expert_params) per stage, and per row params_max, dense_max and expert_max: the
    largest stage's parameters per GPU, of both kinds and each. ``edges`` (plus_edges of an untied model's
    block, with ``sh``'s emb_act and head_act per configuration): the embedding's and
    the head's terms added on the first and last stages only (the same sums); ``first_only``:
    n_d is zero past the first stage row (layer_mix); ``grad``: grad_kwargs aligned with zero (None: GRAD_BYTES)."""
    grad = {} if grad is None else grad
    all_moe = model.moe_layers == model.layers
    layers_p = n_m * model.moe_layer_dense_params() if all_moe else layer_mix(
        n_d, model.layer_params(), n_m, model.moe_layer_dense_params(), first_only)
    if edges is not None:
        dense_p = edges(layers_p, model.embedding_params(), model.head_params()) / t  # per GPU
    else:
        head_p = model.head_params() + (np.where(first, 0, model.vocab * model.hidden) if model.tied_embeddings
                                        else 0)
        dense_p = (layers_p + first * model.embedding_params() + last * head_p) / t
    if model.mla:  # its down-projections whole on every tensor-parallel rank
        dense_p = dense_p + n * model.tp_replicated_params() * (1 - 1 / t)
    # E / ep experts a layer, each 1 / etp of its parameters: one factor per row, then per stage
    expert_p = n_m * (model.experts * model.expert_params() / (e * u))  # per GPU
    dense_max, expert_max, params_max = row_max(dense_p), row_max(expert_p), row_max(dense_p + expert_p)
    kept_m, work_m = acts["kept_m"], acts["work_m"]
    if all_moe:  # every layer an MoE layer
        kept, work = n_m * kept_m, work_m
    else:
        kept_d, work_d = acts["kept"], acts["work"]
        kept = layer_mix(n_d, kept_d, n_m, kept_m, first_only)
        if first_only:  # (past the first stage: max(0, x) = x, bytes >= 0)
            work = work_m * (n_m > 0)
            work[0] = np.maximum(work_d[0] * (n_d[0] > 0), work[0])
        else:
            work = np.maximum(work_d * (n_d > 0), work_m * (n_m > 0))  # (finite bytes: x 0 or 1, cheaper than where)
    if edges is not None:
        act = edges(k * edges(kept, sh["emb_act"], None) + work, None, sh["head_act"])
    else:
        act = k * (kept + first * sh["emb_act"]) + work + last * sh["head_act"]
    state = dense_p * state_bytes_per_param(zero, g, **grad) + expert_p * state_bytes_per_param(zero, edp, **grad)
    # ZeRO-3 prefetches two layers: the larger of a dense and an MoE layer per GPU (times t, as
    # buffer_bytes divides by t).
    moe_layer_p = model.moe_layer_dense_params() + (model.experts / e) * model.expert_params() / u * t
    buffers = buffer_bytes(sh["T"], model.hidden, t, np.maximum(g, edp), zero, to_stage(params_max),
                           np.maximum(model.layer_params(), moe_layer_p))
    buffers = buffers + 2.0 * ACT_BYTES * u * routed_copies(model, sh["T"], t) * model.hidden
    return {"state": state, "activations": act,
            "buffers": buffers, "params_max": params_max, "dense_max": dense_max, "expert_max": expert_max,
            "dense_params": dense_p, "expert_params": expert_p}
