"""Measure one Llama-3-style and one Mixtral-style transformer block on one GPU: the activation bytes autograd keeps,
the peak through the backward and the forward / backward times, under each recompute choice, attention backend,
micro-batch, sequence length and precision. The rows are compared with the cost model's per-layer activation bytes
by benchmarks/compare_modern_layers.py.

    python3 benchmarks/gpu_modern_layers.py --out DIR [--budget-s 400]   (a CUDA GPU; writes DIR/layers_measured.csv
                                                                          and DIR/env.txt)
    python3 benchmarks/gpu_modern_layers.py --out /tmp/x --tiny          (tiny shapes on the CPU: every code path once,
                                                                          memory columns empty)

The blocks are modules written here the way torchtitan writes its Llama block (torchtitan 9dec370
torchtitan/models/llama/model.py, torchtitan/models/norms.py; the same structure at b5bcd76
torchtitan/models/llama3 and models/common): RMSNorm on x.float() then type_as and times the weight; separate wq,
wk, wv; RoPE as a complex product by a precomputed complex64 table; repeat_kv (expand + reshape: a copy) for grouped
query attention; F.scaled_dot_product_attention (causal); wo on the transposed, contiguous output; SwiGLU as
w2(silu(w1(x)) * w3(x)); two residual adds. One GPU stands for one tensor-parallel rank of degree t without sequence
parallelism: heads / t query heads, kv_heads / t K/V heads, ffn / t columns; norms and residuals on the whole hidden
size; no communication is run or timed.

The MoE block (Mixtral 8x7B's shapes: 8 experts, top-2) replaces the feed-forward by torchtitan's MoE path
(models/common/moe.py, token_dispatcher.py at b5bcd76): a router linear, softmax in fp32, top-k, the k weights
renormalised (Mixtral), a stable argsort of the expert ids, the token copies gathered in expert order, the experts as
grouped products (torch._grouped_mm where it runs, else a loop over experts: the row's ``experts`` column says which),
SwiGLU experts, the routing weights applied to the expert outputs and a scatter_add back to the tokens. ``ep 2`` is
one expert-parallel rank's share: 4 local experts that take all k T copies (the balanced all-to-all's arrivals,
simulated by routing over 8 experts and folding expert e onto e mod 4), attention on the rank's own T tokens.

Recompute: none; full (torch.utils.checkpoint of the block, non-reentrant); selective as torchtitan's per-op policy
(torchtitan b5bcd76, torchtitan/distributed/activation_checkpoint.py, SelectiveAC and _get_default_save_ops): the
outputs of the partitioner's compute-intensive ops, the SDPA variants, max, linear, topk and the reduce-scatter /
all-to-all collectives are saved, except every second matrix product (mm / linear) of the forward, and products whose
weight has the router gate's shape are always recomputed (force_recompute_mm_shapes_by_fqns "moe.router.gate").
9dec370's list (parallelize_llama.py _save_list: mm, flash and efficient SDPA, reduce_scatter, abs, max) saves the
same tensors of this block under the flash backend; it does not save cuDNN's SDPA output.

fp8 (dense blocks only): every linear layer as torchao's Float8Linear with tensor-wise scaling does it, written here
with torch._scaled_mm alone: e4m3 inputs and weights, e5m2 output gradients, one scale per tensor from its amax, the
16-bit input and weight saved for the backward (torchao float8/float8_linear.py, matmul_with_hp_or_float8_args);
or, with --fp8 torchao, torchao's own Float8Linear (tests/data/h200_modern_layers_measured.csv's fp8 rows). The two
keep the same tensors without recompute and under full recompute, not under the per-op policy: torchao's product is
an aten.mm on float8 tensor subclasses, which the policy's dispatch mode sees before the subclass and counts as a
product (every second recomputed), where Float8Mm's torch._scaled_mm is a saved op the policy does not count (all
seven saved). The MoE block has no fp8 rows (grouped fp8 products need more than torch alone offers in a stable API).

Per row (CSV columns): the shape (block, model, t, ep, local_experts, hidden, heads_local, kv_heads_local,
ffn_local, micro_batch, seq, tokens), the choice (recompute, attention, precision, experts), and
- act_bytes: memory_allocated() after the forward minus before it, less the output: what autograd keeps for one
  micro-batch beyond the block's input (allocated before; input_bytes gives its size: a checkpoint keeps it);
- peak_bytes: max_memory_allocated() through forward and backward minus the allocation before the forward
  (weight gradients included: param_bytes gives the weights' size);
- fwd_s, fwd_bwd_s: medians of --iters timed runs (CUDA events) after --warmup runs; empty where the deadline came
  first. Memory rows come first (one pass each), then timing, each in the order of ROW_PRIORITY.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import platform
import statistics
import sys
import time
from functools import partial

# (label, model, hidden, heads, kv_heads, ffn, tp, ep, experts, top_k): a tensor-parallel rank's share of the layer.
# Llama 3 (Dubey et al. 2024, Table 3): 8B h 4096, 32 heads, 8 KV heads, ffn 14336; 70B 8192, 64, 8, 28672;
# 405B 16384, 128, 8, 53248. Mixtral 8x7B (Jiang et al. 2024): 4096, 32, 8, expert ffn 14336, 8 experts, top 2.
SHAPES = (
    ("llama3-8b-t1", "llama3-8b", 4096, 32, 8, 14336, 1, 1, 1, 1),
    ("llama3-70b-t8", "llama3-70b", 8192, 64, 8, 28672, 8, 1, 1, 1),
    ("llama3-70b-t4", "llama3-70b", 8192, 64, 8, 28672, 4, 1, 1, 1),
    ("llama3-405b-t8", "llama3-405b", 16384, 128, 8, 53248, 8, 1, 1, 1),
    ("mixtral-8x7b-ep1", "mixtral-8x7b", 4096, 32, 8, 14336, 1, 1, 8, 2),
    ("mixtral-8x7b-ep2", "mixtral-8x7b", 4096, 32, 8, 14336, 1, 2, 8, 2),
)
TINY_SHAPES = (
    ("tiny-dense-t1", "tiny", 64, 4, 2, 96, 1, 1, 1, 1),
    ("tiny-dense-t2", "tiny", 64, 4, 2, 96, 2, 1, 1, 1),
    ("tiny-moe-ep1", "tiny-moe", 64, 4, 2, 96, 1, 1, 4, 2),
    ("tiny-moe-ep2", "tiny-moe", 64, 4, 2, 96, 1, 2, 4, 2),
)
MICRO_BATCHES = (1, 2, 4)
SEQS = (2048, 4096, 8192)
TINY_SEQS = (32, 64)
# A row's rank in the run (lower first): what the per-layer activation comparison needs most comes first.
ROW_PRIORITY = (("bf16", "flash", "none"), ("bf16", "flash", "selective"), ("bf16", "flash", "full"),
                ("bf16", "cudnn", "none"), ("bf16", "cudnn", "selective"), ("bf16", "cudnn", "full"),
                ("fp8", "flash", "none"), ("fp8", "flash", "selective"), ("fp8", "flash", "full"))
ASSUMED_FLOPS = 400e12  # the rate the run-time estimate assumes (an H100-class GPU on these products)
LAUNCH_FLOOR_S = 1.5e-3  # an eager block's forward + backward, at least (a few hundred kernel launches)
ROPE_THETA = 500000.0  # Llama 3's RoPE base
FP8_E4M3_MAX, FP8_E5M2_MAX = 448.0, 57344.0  # the largest finite values of the two fp8 formats
FP8_IMPL = ["scaled_mm"]  # how fp8 rows run their products: "scaled_mm" (Float8Mm, below) or "torchao" (--fp8)
COLUMNS = ("label", "block", "model", "tp", "ep", "local_experts", "top_k", "hidden", "heads_local",
           "kv_heads_local", "head_dim", "ffn_local", "micro_batch", "seq", "tokens", "recompute", "attention",
           "precision", "experts", "input_bytes", "param_bytes", "act_bytes", "peak_bytes", "fwd_s", "fwd_bwd_s",
           "iters", "error")


@dataclasses.dataclass(frozen=True)
class Case:
    """One row to measure: a shape and the choices."""
    label: str
    model: str
    h: int
    heads: int
    kv: int
    ffn: int
    t: int
    ep: int
    experts: int
    top_k: int
    b: int
    s: int
    recompute: str
    attention: str
    precision: str

    @property
    def moe(self) -> bool:
        return self.experts > 1

    @property
    def local(self) -> dict:
        """The rank's share: query and K/V heads, head size, MLP columns (the expert's whole under ep), experts."""
        return {"heads": self.heads // self.t, "kv": max(self.kv // self.t, 1), "dh": self.h // self.heads,
                "ffn": self.ffn // self.t, "experts": self.experts // self.ep}


# ---------------------------------------------------------------------------------------------- the blocks
def build_float8_mm(torch):
    """Float8Mm.apply(x, w): x w^T through torch._scaled_mm with tensor-wise scales (on ``torch``)."""

    class Float8Mm(torch.autograd.Function):
        """y = x w^T with tensor-wise fp8 scaling, saving the 16-bit x and w (torchao's Float8Linear, tensorwise)."""

        @staticmethod
        def forward(ctx, x, w):  # x (T, d_in), w (d_out, d_in)
            ctx.save_for_backward(x, w)
            xq, xs = to_fp8(x, torch.float8_e4m3fn, FP8_E4M3_MAX)
            wq, ws = to_fp8(w, torch.float8_e4m3fn, FP8_E4M3_MAX)
            return scaled_mm(xq, wq.t(), xs, ws, x.dtype)  # (T, d_out): row-major x column-major

        @staticmethod
        def backward(ctx, gy):  # gy (T, d_out)
            x, w = ctx.saved_tensors
            gq, gs = to_fp8(gy.contiguous(), torch.float8_e5m2, FP8_E5M2_MAX)
            wq, ws = to_fp8(w, torch.float8_e4m3fn, FP8_E4M3_MAX)
            xq, xs = to_fp8(x, torch.float8_e4m3fn, FP8_E4M3_MAX)
            gx = scaled_mm(gq, wq.t().contiguous().t(), gs, ws, gy.dtype)  # (T, d_in) = gy w
            gw = scaled_mm(gq.t().contiguous(), xq.t().contiguous().t(), gs, xs, gy.dtype)  # (d_out, d_in) = gy^T x
            return gx, gw

    def to_fp8(x, dtype, fmax):
        """(x in fp8 scaled so that its amax maps to the format's largest value, the inverse scale, fp32 scalar)."""
        amax = x.abs().max().float().clamp(min=1e-12)
        scale = fmax / amax
        return (x.float() * scale).clamp(-fmax, fmax).to(dtype), scale.reciprocal()

    def scaled_mm(a, b, sa, sb, out_dtype):
        """torch._scaled_mm, or on a device without it (the CPU dry run) the same product dequantised."""
        if a.is_cuda:
            return torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=out_dtype)
        return ((a.float() * sa) @ (b.float() * sb)).to(out_dtype)

    return Float8Mm


def build_blocks(torch):
    """The module classes, built on ``torch`` (imported in main so that --help needs no torch)."""
    nn, F = torch.nn, torch.nn.functional
    Float8Mm = build_float8_mm(torch)

    class RMSNorm(nn.Module):
        """x * rsqrt(mean(x^2) + eps) on x.float(), back to x's dtype, times the weight (torchtitan norms.py)."""

        def __init__(self, dim, eps=1e-5):
            super().__init__()
            self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

        def forward(self, x):
            xf = x.float()
            normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
            return normed.type_as(x) * self.weight

    class Linear(nn.Module):
        """A bias-free linear layer; under fp8 the product runs through Float8Mm, or where FP8_IMPL says torchao,
        through torchao's own Float8Linear (tensor-wise dynamic scaling, its default configuration)."""

        def __init__(self, d_in, d_out, fp8):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(d_out, d_in) * d_in**-0.5)
            self.fp8 = fp8
            self.ao = None
            if fp8 and FP8_IMPL[0] == "torchao":
                from torchao.float8 import convert_to_float8_training

                lin = nn.Linear(d_in, d_out, bias=False)
                lin.weight = self.weight
                self.ao = convert_to_float8_training(lin)  # a Float8Linear holding the same weight
                del self.weight

        def forward(self, x):
            if self.ao is not None:
                return self.ao(x)
            if not self.fp8:
                return F.linear(x, self.weight)
            y = Float8Mm.apply(x.reshape(-1, x.shape[-1]), self.weight)  # (T, d_out)
            return y.view(*x.shape[:-1], -1)

    def rotate(x, table):
        """RoPE by complex product: x (b, s, n, dh) as dh / 2 complex pairs times the table, back to x's dtype."""
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * table.view(1, x.shape[1], 1, -1)).flatten(3).type_as(x)

    def repeat_kv(x, rep):
        """(b, s, kv, dh) -> (b, s, kv rep, dh): each K/V head repeated for its query group (a copy)."""
        if rep == 1:
            return x
        b, s, kv, dh = x.shape
        return x.unsqueeze(3).expand(b, s, kv, rep, dh).reshape(b, s, kv * rep, dh)

    class Attention(nn.Module):
        def __init__(self, h, heads, kv, dh, fp8):
            super().__init__()
            self.heads, self.kv, self.dh = heads, kv, dh
            self.wq, self.wk, self.wv = Linear(h, heads * dh, fp8), Linear(h, kv * dh, fp8), Linear(h, kv * dh, fp8)
            self.wo = Linear(heads * dh, h, fp8)

        def forward(self, x, table):  # x (b, s, h)
            b, s, _ = x.shape
            q = self.wq(x).view(b, s, self.heads, self.dh)
            k = self.wk(x).view(b, s, self.kv, self.dh)
            v = self.wv(x).view(b, s, self.kv, self.dh)
            q, k = rotate(q, table), rotate(k, table)
            k, v = repeat_kv(k, self.heads // self.kv), repeat_kv(v, self.heads // self.kv)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
            return self.wo(o.transpose(1, 2).contiguous().view(b, s, -1))  # (b, s, h)

    class FeedForward(nn.Module):
        def __init__(self, h, f, fp8):
            super().__init__()
            self.w1, self.w2, self.w3 = Linear(h, f, fp8), Linear(f, h, fp8), Linear(h, f, fp8)

        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    class Experts(nn.Module):
        """n SwiGLU experts, weights stored (n, out, in) and passed transposed, as torchtitan's GroupedExperts keeps
        them (w1_EFD, w3_EFD, w2_EDF); grouped products or a loop over experts."""

        def __init__(self, n, h, f, grouped):
            super().__init__()
            self.w1 = nn.Parameter(torch.randn(n, f, h) * h**-0.5)
            self.w3 = nn.Parameter(torch.randn(n, f, h) * h**-0.5)
            self.w2 = nn.Parameter(torch.randn(n, h, f) * f**-0.5)
            self.grouped = grouped

        def forward(self, x, counts):  # x (R, h) in expert order, counts (n,) copies per expert
            w1, w3, w2 = (w.transpose(-2, -1) for w in (self.w1, self.w3, self.w2))  # (n, in, out), column-major
            if self.grouped:
                offs = torch.cumsum(counts, 0, dtype=torch.int32)
                mm = partial(torch._grouped_mm, offs=offs)
                return mm(F.silu(mm(x, w1)) * mm(x, w3), w2)  # (R, h)
            outs, start = [], 0
            for i, n in enumerate(counts.tolist()):  # (a host sync: the loop needs the counts)
                xi = x[start:start + n]
                outs.append((F.silu(xi @ w1[i]) * (xi @ w3[i])) @ w2[i])
                start += n
            return torch.cat(outs)

    class MoE(nn.Module):
        """Router (linear, fp32 softmax, top-k, renormalised), sort by expert, experts, weights, scatter_add."""

        def __init__(self, h, f, experts, local, top_k, grouped):
            super().__init__()
            self.gate = nn.Linear(h, experts, bias=False)
            self.experts = Experts(local, h, f, grouped)
            self.local, self.top_k = local, top_k

        def forward(self, x):  # x (b, s, h)
            xt = x.reshape(-1, x.shape[-1])  # (T, h)
            probs = F.softmax(self.gate(xt).float(), dim=-1)  # (T, E) fp32
            weights, ids = torch.topk(probs, self.top_k, dim=-1)  # (T, k)
            weights = weights / weights.sum(-1, keepdim=True)
            ids = ids % self.local  # the rank's local experts (all of them at ep 1)
            order = torch.argsort(ids.view(-1), stable=True)  # (T k,) copies in expert order
            token = order // self.top_k
            counts = torch.bincount(ids.view(-1), minlength=self.local)
            y = self.experts(xt[token], counts)  # (T k, h)
            y = (y.float() * weights.view(-1)[order].unsqueeze(-1)).type_as(xt)
            out = torch.zeros_like(xt).scatter_add(0, token.unsqueeze(-1).expand_as(y), y)
            return out.view_as(x)

    class Block(nn.Module):
        def __init__(self, c: Case, grouped: bool):
            super().__init__()
            lc, fp8 = c.local, c.precision == "fp8"
            self.attention_norm, self.ffn_norm = RMSNorm(c.h), RMSNorm(c.h)
            self.attention = Attention(c.h, lc["heads"], lc["kv"], lc["dh"], fp8)
            self.feed_forward = (MoE(c.h, lc["ffn"], c.experts, lc["experts"], c.top_k, grouped) if c.moe
                                 else FeedForward(c.h, lc["ffn"], fp8))
            self.table = None

        def forward(self, x):
            h = x + self.attention(self.attention_norm(x), self.table)
            return h + self.feed_forward(self.ffn_norm(h))

    return Block


# ---------------------------------------------------------------------------------------------- recompute
def titan_save_ops(torch) -> set:
    """The ops whose outputs torchtitan's per-op policy saves (b5bcd76 activation_checkpoint.py
    _get_default_save_ops): the partitioner's compute-intensive ops, the SDPA variants, max, linear, topk,
    reduce_scatter and all_to_all; each looked up by name and left out where this torch lacks it."""
    from torch._functorch.partitioners import get_default_op_list

    ops = {op.default for op in get_default_op_list().compute_intensive_ops}
    names = ("aten._scaled_dot_product_cudnn_attention", "aten._scaled_dot_product_attention_math",
             "aten._scaled_dot_product_fused_attention_overrideable", "aten.max", "aten.linear", "aten.topk",
             "_c10d_functional.reduce_scatter_tensor", "_c10d_functional.all_to_all_single")
    for name in names:
        ns, op = name.split(".")
        packet = getattr(getattr(torch.ops, ns), op, None)
        if packet is not None:
            ops.add(packet.default)
    return ops


def titan_sac_context(torch, save_ops: set, recompute_shapes: set):
    """A context_fn for torch.utils.checkpoint with torchtitan's per-op policy: save the outputs of ``save_ops``
    except every second matrix product of the pass, recompute products whose weight is (in, out) in
    ``recompute_shapes`` (the router gate), recompute the rest. A fresh counter for each checkpointed call."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    mm_ops = (torch.ops.aten.mm.default, torch.ops.aten.linear.default)
    to_copy = torch.ops.aten._to_copy.default

    def context_fn():
        count = {"forward": 0, "recompute": 0}

        def policy(ctx, func, *args, **kwargs):
            if func == to_copy and args[0].is_cuda and str(kwargs.get("device", "")) == "cpu":
                return CheckpointPolicy.MUST_SAVE  # a copy to the host is saved, not made again
            mode = "recompute" if ctx.is_recompute else "forward"
            if func in mm_ops:
                w = tuple(args[1].shape)
                if func == torch.ops.aten.linear.default:
                    w = w[::-1]  # linear's weight is (out, in)
                if w in recompute_shapes:
                    return CheckpointPolicy.PREFER_RECOMPUTE
                count[mode] += 1
            if func in save_ops and not (func in mm_ops and count[mode] % 2 == 0):
                return CheckpointPolicy.MUST_SAVE
            return CheckpointPolicy.PREFER_RECOMPUTE

        return create_selective_checkpoint_contexts(policy)

    return context_fn


def runner(torch, block, recompute: str, save_ops: set):
    """The forward of one block under the recompute choice: x -> y."""
    from torch.utils.checkpoint import checkpoint

    if recompute == "none":
        return block
    if recompute == "full":
        return partial(checkpoint, block, use_reentrant=False)
    gate = getattr(block.feed_forward, "gate", None)
    shapes = {tuple(gate.weight.shape[::-1])} if gate is not None else set()  # (in, out), as mm sees it
    return partial(checkpoint, block, use_reentrant=False, context_fn=titan_sac_context(torch, save_ops, shapes))


# ---------------------------------------------------------------------------------------------- measuring
def kept_and_peak(torch, fn, x, dy, block) -> tuple[int, int]:
    """(bytes allocated by fn's forward and still held after it, less its output; the peak above the start
    through forward and backward). Weight gradients are cleared first, so the peak counts their allocation."""
    block.zero_grad(set_to_none=True)
    x.grad = None
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    y = fn(x)
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated() - before - y.numel() * y.element_size()
    y.backward(dy)
    del y
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    block.zero_grad(set_to_none=True)
    x.grad = None
    return held, peak


def one_pass(fn, x, dy, backward: bool) -> None:
    y = fn(x)
    if backward:
        y.backward(dy)


def timed(torch, fn, x, dy, backward: bool, warmup: int, iters: int) -> float:
    """Median seconds of the forward (and backward) over ``iters`` runs after ``warmup``: CUDA events on a GPU,
    the host clock on the CPU dry run."""
    for _ in range(warmup):
        one_pass(fn, x, dy, backward)
    times = []
    for _ in range(iters):
        if x.is_cuda:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            one_pass(fn, x, dy, backward)
            e1.record()
            e1.synchronize()
            times.append(e0.elapsed_time(e1) / 1e3)
        else:
            t0 = time.perf_counter()
            one_pass(fn, x, dy, backward)
            times.append(time.perf_counter() - t0)
    x.grad = None
    return statistics.median(times)


def block_flops(c: Case) -> float:
    """Forward FLOPs of one block (the products and causal attention), for the run-time estimate."""
    lc, T = c.local, c.b * c.s
    attn_w = c.h * (lc["heads"] + 2 * lc["kv"]) * lc["dh"] + lc["heads"] * lc["dh"] * c.h
    mlp_w = 3 * c.h * lc["ffn"] * (c.top_k if c.moe else 1)
    causal = 2.0 * c.b * c.s * c.s * lc["heads"] * lc["dh"]  # QK^T and PV over the lower half
    return 2.0 * T * (attn_w + mlp_w) + causal


def pass_estimate_s(c: Case) -> float:
    """Estimated seconds of one forward + backward (three forwards; a full recompute four, selective about 3.5)."""
    passes = {"none": 3.0, "selective": 3.5, "full": 4.0}[c.recompute]
    return max(passes * block_flops(c) / ASSUMED_FLOPS, LAUNCH_FLOOR_S)


def cases(shapes, seqs) -> list[Case]:
    """Every row, in the order of ROW_PRIORITY then shape, sequence, micro-batch; no fp8 MoE rows."""
    out = []
    for prec, attn, rc in ROW_PRIORITY:
        for shape in shapes:
            label, model, h, a, kv, f, t, ep, e, k = shape
            if prec == "fp8" and e > 1:
                continue
            for s in seqs:
                for b in MICRO_BATCHES:
                    out.append(Case(label, model, h, a, kv, f, t, ep, e, k, b, s, rc, attn, prec))
    return out


# ---------------------------------------------------------------------------------------------- the run
def probe_grouped(torch, dev) -> tuple[bool, str]:
    """Whether torch._grouped_mm runs here (bf16, uneven groups, forward and backward) and agrees with a loop."""
    if not hasattr(torch, "_grouped_mm"):
        return False, "torch._grouped_mm absent"
    try:
        g = torch.Generator(device="cpu").manual_seed(0)
        x = torch.randn(40, 32, generator=g).to(dev, torch.bfloat16).requires_grad_()
        w = torch.randn(3, 48, 32, generator=g).to(dev, torch.bfloat16).requires_grad_()  # (n, out, in)
        counts = torch.tensor([7, 0, 33], device=dev)
        wt = w.transpose(-2, -1)  # (n, in, out), column-major: as the experts pass it
        y = torch._grouped_mm(x, wt, offs=torch.cumsum(counts, 0, dtype=torch.int32))
        y.backward(torch.randn(y.shape, generator=g).to(dev, y.dtype))  # (a dense gradient: y.sum()'s expanded
        # one has zero strides, which the grouped product's backward refuses)
        ref = torch.cat([x[:7] @ wt[0], x[7:7] @ wt[1], x[7:] @ wt[2]])
        err = (y.float() - ref.float()).abs().max().item()
        return err < 0.1, f"torch._grouped_mm max |error| against a loop {err:.3g}"
    except Exception as exc:  # noqa: BLE001 -- the fallback is the loop: say why
        return False, f"torch._grouped_mm failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"


def backend_ctx(torch, attention: str, dev):
    """The SDPA backend context: flash or cuDNN on a GPU; the math kernel on the CPU dry run."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if dev.type != "cuda":
        return sdpa_kernel([SDPBackend.MATH])
    return sdpa_kernel([SDPBackend.FLASH_ATTENTION if attention == "flash" else SDPBackend.CUDNN_ATTENTION])


class Table:
    """The rows so far, rewritten whole (temporary name, then rename) after each change: a stop keeps them."""

    def __init__(self, path: str, header: str):
        self.path, self.rows = path, []
        self.header_of = lambda: header  # the comment line above the header (it names the timed runs a row)

    def write(self) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "w", newline="") as fh:
            fh.write(self.header_of())
            w = csv.DictWriter(fh, fieldnames=COLUMNS)
            w.writeheader()
            w.writerows(self.rows)
        os.replace(tmp, self.path)


def row_of(c: Case, experts: str, input_bytes: int, param_bytes: int) -> dict:
    lc = c.local
    return {"label": f"{c.label}-b{c.b}-s{c.s}-{c.recompute}-{c.attention}-{c.precision}",
            "block": "moe" if c.moe else "dense", "model": c.model, "tp": c.t, "ep": c.ep,
            "local_experts": lc["experts"] if c.moe else 0, "top_k": c.top_k if c.moe else 0, "hidden": c.h,
            "heads_local": lc["heads"], "kv_heads_local": lc["kv"], "head_dim": lc["dh"], "ffn_local": lc["ffn"],
            "micro_batch": c.b, "seq": c.s, "tokens": c.b * c.s, "recompute": c.recompute,
            "attention": c.attention, "precision": c.precision, "experts": experts if c.moe else "",
            "input_bytes": input_bytes, "param_bytes": param_bytes, "act_bytes": "", "peak_bytes": "",
            "fwd_s": "", "fwd_bwd_s": "", "iters": "", "error": ""}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for layers_measured.csv and env.txt")
    ap.add_argument("--budget-s", type=float, default=400.0, help="stop cleanly after this many seconds")
    ap.add_argument("--warmup", type=int, default=2, help="untimed runs before the timed ones (1 under --tiny)")
    ap.add_argument("--iters", type=int, default=0,
                    help="timed runs a row (0: what the time left after the memory passes allows, 3 to 20; "
                         "1 under --tiny)")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes on the CPU: every code path once")
    ap.add_argument("--fp8", choices=("scaled_mm", "torchao"), default="scaled_mm",
                    help="the fp8 rows' products: torch._scaled_mm in a Function written here (default), or "
                         "torchao's Float8Linear where torchao imports (else the rows say why)")
    ap.add_argument("--only", choices=("bf16", "fp8"), default=None, help="measure only the rows of this precision")
    args = ap.parse_args()
    FP8_IMPL[0] = args.fp8
    start = time.monotonic()
    if args.tiny:
        args.warmup, args.iters = min(args.warmup, 1), args.iters or 1
    import torch

    os.makedirs(args.out, exist_ok=True)
    dev = torch.device("cpu" if args.tiny else "cuda")
    if dev.type == "cuda" and not torch.cuda.is_available():
        print("gpu_modern_layers: no CUDA GPU here (--tiny runs on the CPU)", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    grouped, grouped_why = probe_grouped(torch, dev)
    save_ops = titan_save_ops(torch)
    all_cases = cases(TINY_SHAPES if args.tiny else SHAPES, TINY_SEQS if args.tiny else SEQS)
    if args.tiny:  # one micro-batch a shape and choice: each path once
        all_cases = [c for c in all_cases if c.b == MICRO_BATCHES[0]]
    if args.only:
        all_cases = [c for c in all_cases if c.precision == args.only]
    fp8_why = "fp8 products: torch._scaled_mm (Float8Mm)"
    if args.fp8 == "torchao":
        try:
            import torchao

            fp8_why = f"fp8 products: torchao {torchao.__version__} Float8Linear (tensorwise)"
        except Exception as exc:  # noqa: BLE001 -- every fp8 row then records the import error
            fp8_why = f"fp8 products: torchao failed to import: {type(exc).__name__}: {exc}"
    plan = Plan(all_cases, args.warmup, args.iters, start + args.budget_s)
    print(f"{len(all_cases)} rows; estimate at {ASSUMED_FLOPS / 1e12:.0f} TFLOP/s: {plan.estimate_line()}; "
          f"budget {args.budget_s:.0f} s", flush=True)
    env = [f"python {platform.python_version()}", f"torch {torch.__version__}", f"device {dev}",
           f"gpu {torch.cuda.get_device_name(dev) if dev.type == 'cuda' else '-'}",
           f"experts {'grouped' if grouped else 'loop'} ({grouped_why})",
           fp8_why, f"selective save ops {len(save_ops)}: " + ", ".join(sorted(str(o) for o in save_ops)),
           f"estimate {plan.estimate_line()}", f"warmup {args.warmup}"]
    with open(os.path.join(args.out, "env.txt"), "w") as fh:
        fh.write("\n".join(env) + "\n")
    table = Table(os.path.join(args.out, "layers_measured.csv"), "")
    table.header_of = lambda: (f"# {env[3]}, {env[1]}, {fp8_why}, one rank's share of one block (no comm), "
                               f"causal SDPA, "
                               f"median over {plan.iters} runs after {args.warmup} warm-ups (CUDA events), act_bytes "
                               f"= memory_allocated after the forward less before and less the output\n")
    stopped = measure_all(torch, dev, table, grouped, save_ops, plan)
    table.write()
    done = sum(1 for r in table.rows if r["act_bytes"] != "" or r["fwd_s"] != "")
    print(f"{done}/{len(all_cases)} rows measured in {time.monotonic() - start:.0f} s, {plan.iters} timed runs a row"
          + (f"; stopped at the deadline ({stopped})" if stopped else ""), flush=True)
    with open(os.path.join(args.out, "env.txt"), "a") as fh:
        fh.write(f"iters {plan.iters}\nslowdown {plan.slowdown:.2f} (measured memory phase / its estimate)\n"
                 f"wall_s {time.monotonic() - start:.0f}\nstopped {stopped or '-'}\n")
    return 0


class Plan:
    """The rows, the run-time estimate and the number of timed runs: estimated from FLOPs at ASSUMED_FLOPS at the
    start, and once the memory passes are done, sized from their measured time to what is left of the budget."""

    def __init__(self, rows: list[Case], warmup: int, iters: int, deadline: float):
        self.rows, self.warmup, self.deadline, self.fixed = rows, warmup, deadline, bool(iters)
        self.mem_s = sum(2.0 * pass_estimate_s(c) for c in rows)  # a warm-up pass and a measured one a row
        self.iter_s = sum(pass_estimate_s(c) * 4.0 / 3.0 for c in rows)  # a forward and a forward + backward
        self.slowdown = 1.0
        left = deadline - time.monotonic() - self.mem_s
        self.iters = iters or self.fit(left)

    def fit(self, left_s: float) -> int:
        """Timed runs a row that 90% of ``left_s`` allows at the current slowdown, 3 to 20."""
        return max(3, min(20, int(0.9 * left_s / (self.iter_s * self.slowdown)) - self.warmup))

    def estimate_line(self) -> str:
        t = self.iter_s * (self.iters + self.warmup)
        return (f"memory passes {self.mem_s:.0f} s, timing {t:.0f} s ({self.warmup} warm-ups + {self.iters} timed "
                f"runs a row), {self.mem_s + t:.0f} s in all")

    def row_s(self, c: Case, phase: str) -> float:
        """A row's expected seconds in the phase, at the current slowdown."""
        runs = 2.0 if phase == "memory" else (self.warmup + self.iters) * 4.0 / 3.0
        return runs * pass_estimate_s(c) * self.slowdown

    def after_memory(self, spent_s: float, estimated_s: float) -> None:
        """The memory phase took ``spent_s`` where ``estimated_s`` was expected: re-size the timed runs."""
        if estimated_s > 0:
            self.slowdown = max(spent_s / estimated_s, 0.1)
        if not self.fixed:
            self.iters = self.fit(self.deadline - time.monotonic())


def measure_all(torch, dev, table, grouped, save_ops, plan: Plan) -> str:
    """Memory pass of every row, then the timed runs, rows in order; returns '' or where the deadline stopped it."""
    for c in plan.rows:
        table.rows.append(row_of(c, "grouped" if grouped and not (dev.type == "cpu" and c.ep > 1) else "loop", 0, 0))
    for phase in ("memory", "timing"):
        blocks = {}  # (label, precision) -> block: one module a shape and precision, built when first needed
        t0, est = time.monotonic(), 0.0
        for i, c in enumerate(plan.rows):
            row = table.rows[i]
            if row["error"]:
                continue
            if time.monotonic() + plan.row_s(c, phase) > plan.deadline:
                return f"{phase}, row {i}"
            est += plan.row_s(c, phase)
            try:
                run_row(torch, dev, c, row, blocks, grouped, save_ops, phase, plan.warmup, plan.iters)
            except Exception as exc:  # noqa: BLE001 -- an unsupported choice is a row's error, not the run's end
                row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}" if str(exc) else \
                    type(exc).__name__
                blocks.clear()
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
            table.write()
            print(f"{phase:6s} {row['label']:48s} act {fmt_mib(row['act_bytes'])} peak {fmt_mib(row['peak_bytes'])}"
                  f" fwd {fmt_ms(row['fwd_s'])} fwd+bwd {fmt_ms(row['fwd_bwd_s'])} {row['error']}", flush=True)
        blocks.clear()
        if phase == "memory":
            plan.after_memory(time.monotonic() - t0, est)
            print(f"memory passes took {time.monotonic() - t0:.0f} s ({plan.slowdown:.2f} x the estimate): "
                  f"{plan.iters} timed runs a row", flush=True)
    return ""


def run_row(torch, dev, c: Case, row: dict, blocks: dict, grouped: bool, save_ops, phase: str, warmup: int,
            iters: int) -> None:
    key = (c.label, c.precision)
    if key not in blocks:
        blocks.clear()
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        # the CPU dry run takes the loop for the ep 2 rows, so that both expert paths run
    blocks[key] = build_blocks_for(torch, c, dev, grouped and not (dev.type == "cpu" and c.ep > 1))
    block = blocks[key]
    block.table = block_table(torch, c, dev)
    x = torch.randn(c.b, c.s, c.h, device=dev, dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn_like(x)
    row["input_bytes"] = x.numel() * x.element_size()
    row["param_bytes"] = sum(p.numel() * p.element_size() for p in block.parameters())
    fn = runner(torch, block, c.recompute, save_ops)
    with backend_ctx(torch, c.attention, dev):
        if phase == "memory":
            one_pass(fn, x, dy, True)  # warm-up: library workspaces and handles allocated once
            if dev.type == "cuda":
                row["act_bytes"], row["peak_bytes"] = kept_and_peak(torch, fn, x, dy, block)
            else:  # the CPU dry run: the path runs, nothing to read
                one_pass(fn, x, dy, True)
        else:
            row["fwd_s"] = timed(torch, fn, x, dy, False, warmup, iters)
            row["fwd_bwd_s"] = timed(torch, fn, x, dy, True, warmup, iters)
            row["iters"] = iters
    block.zero_grad(set_to_none=True)


_BLOCK_CLASS: list = []


def build_blocks_for(torch, c: Case, dev, grouped: bool):
    """The row's block, its weights drawn on the device in bf16 (a 405B rank's block or Mixtral's experts in
    seconds, not the minutes of a CPU draw)."""
    if not _BLOCK_CLASS:
        _BLOCK_CLASS.append(build_blocks(torch))
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(dev):
            return _BLOCK_CLASS[0](c, grouped)
    finally:
        torch.set_default_dtype(default)


_TABLES: dict = {}


def block_table(torch, c: Case, dev):
    """RoPE's (s, dh / 2) complex64 table of e^(i pos theta^(-2j / dh)) (torchtitan precompute_freqs_cis) for the
    row's head size and sequence, one alive at a time."""
    dh, s = c.h // c.heads, c.s
    key = (dh, s, str(dev))
    if key not in _TABLES:
        _TABLES.clear()
        inv = 1.0 / (ROPE_THETA ** (torch.arange(0, dh, 2, device=dev)[: dh // 2].float() / dh))
        ang = torch.outer(torch.arange(s, device=dev).float(), inv)
        _TABLES[key] = torch.polar(torch.ones_like(ang), ang)
    return _TABLES[key]


def fmt_mib(v) -> str:
    return f"{v / 2**20:9.1f} MiB" if v != "" else " " * 13


def fmt_ms(v) -> str:
    return f"{v * 1e3:8.2f} ms" if v != "" else " " * 11


if __name__ == "__main__":
    sys.exit(main())
