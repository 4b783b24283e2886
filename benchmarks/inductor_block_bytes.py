"""HBM bytes of the element-wise kernels torch.compile (inductor) generates for a Llama 3 block, forward and backward.

The block is written the way torchtitan's Llama 3 model writes it (torchtitan 9dec370, torchtitan/models/llama/model.py
and models/norms.py: RMSNorm in fp32 then type_as and * weight, RoPE through complex numbers, repeat_kv by expand and
reshape, SDPA causal, SwiGLU as silu(w1 x) * w3 x, residual adds); this is our own code, not torchtitan's. It is
compiled whole (torch.compile of the block, as torchtitan's apply_compile does per TransformerBlock), run once forward
and backward in bf16 on the CPU, and every inductor scheduler node of the forward and backward graphs is listed: its
kind (a generated kernel, or an extern kernel: mm, SDPA) and the bytes it reads and writes
(BaseSchedulerNode.get_read_write_buffers_sizes, what torch._inductor.metrics.num_bytes_accessed sums), expressed per
token in elements of h, q, hk, f by solving over the block's shapes. The partitioner's saved tensors
(min_cut_rematerialization_partition's forward outputs beyond the block's output) are listed too.

Run with a torch that has inductor (CPU is enough): ``python3 benchmarks/inductor_block_bytes.py``. Optional
``--sac``: torchtitan's per-op selective checkpointing policy around the block (its _save_list: mm every other one,
SDPA, reduce_scatter), so the backward graph carries the recompute. ``--verbose`` lists every node.

Measured 2026-11-29 (torch 2.14.1, inductor's C++ backend), bytes a token / h, Llama 3 8B's ratios (70B's):
    forward: inductor kernels 59.0 (57.0), eager ATen ops 11.0 (9.5); backward 97.1 (95.6) and 12.0 (10.0);
    with per-op checkpointing, backward 126.1 (123.6) and 23.0 (19.5): the forward's RoPE and kernels again.
  RoPE, per element of Q and of K: xq.float() (a kernel, read 2 write 4), the complex product (eager: 4 + 4),
  type_as (a kernel, 4 + 2): 20 forward; the same chain on the gradient backward: 20 (8B: 20 x 1.25 h = 25 a
  token / h, plus the frequencies' reads, 1). repeat_kv: 4 an element of q + hk each way (kv_repeat_bytes).
  The rest: forward 39.0 (18.0 norms and residual adds, 21.0 SwiGLU), backward 77.1, against the model's fused
  count of 43 and 86 (ELEM_TH_PER_LAYER 11 x 2 + ELEM_TF_PER_LAYER 3 x 2 x 3.5; no dropout here, the residual
  sum recomputed rather than stored).
  Saved for backward (the partitioner's choice, not the weights): 34.6 (33.8) without checkpointing, 13.5 (13.3)
  with it (the block's input, wq's, wv's and w1's products, the attention output and its logsumexp).
  Per layer forward 10 generated kernels and 2 eager ops beside 7 matmuls and the attention kernel: the launches
  (tens of microseconds a layer) do not move an 8k-token step.
What carries over to CUDA: which ops run as inductor kernels, which fall back to ATen (every op on a complex tensor:
lowering.py unsupported_input_tensor), which buffers are realized (a fallback's or an extern matmul's inputs and
outputs, the tensors saved for backward) are decided at lowering, the same on both devices: the RoPE count holds on
CUDA. Fusion differs in the scheduler: the C++ backend runs a reduction and its pointwise users in one loop nest,
while Triton reads a row twice where it is too long for a persistent (one-pass) reduction (h = 4096, 8192), and the
norm weight's gradient, a reduction over tokens, shares a kernel with the row-wise input gradient only through the
mix-order reduction of recent torch (config.triton.mix_order_reduction); matmul epilogues fuse on neither by
default (mm stays an extern kernel without max-autotune's Triton templates). So the CPU count of norms and residual
adds is a floor for CUDA, and the model's fused count, 13 bytes a token / h above it, stays.
"""

from __future__ import annotations

import argparse
import logging

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.type_as(x) * self.weight


def rope(xq, xk, freqs):  # xq: (b, s, a, dh), freqs: (s, dh / 2) complex64
    cq = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    ck = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    f = freqs.view(1, freqs.shape[0], 1, freqs.shape[1])
    return torch.view_as_real(cq * f).flatten(3).type_as(xq), torch.view_as_real(ck * f).flatten(3).type_as(xk)


def repeat_kv(x, n):
    b, s, k, d = x.shape
    return x if n == 1 else x.unsqueeze(3).expand(b, s, k, n, d).reshape(b, s, k * n, d)


class Block(nn.Module):
    def __init__(self, h, heads, kv_heads, f):
        super().__init__()
        self.heads, self.kv_heads, self.dh = heads, kv_heads, h // heads
        self.wq = nn.Linear(h, heads * self.dh, bias=False)
        self.wk = nn.Linear(h, kv_heads * self.dh, bias=False)
        self.wv = nn.Linear(h, kv_heads * self.dh, bias=False)
        self.wo = nn.Linear(heads * self.dh, h, bias=False)
        self.w1 = nn.Linear(h, f, bias=False)
        self.w2 = nn.Linear(f, h, bias=False)
        self.w3 = nn.Linear(h, f, bias=False)
        self.attention_norm, self.ffn_norm = RMSNorm(h), RMSNorm(h)

    def attention(self, x, freqs):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, -1, self.dh)
        k = self.wk(x).view(b, s, -1, self.dh)
        v = self.wv(x).view(b, s, -1, self.dh)
        q, k = rope(q, k, freqs)
        n = self.heads // self.kv_heads
        k, v = repeat_kv(k, n), repeat_kv(v, n)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.wo(o.transpose(1, 2).contiguous().view(b, s, -1))

    def forward(self, x, freqs):
        hid = x + self.attention(self.attention_norm(x), freqs)
        y = self.ffn_norm(hid)
        return hid + self.w2(F.silu(self.w1(y)) * self.w3(y))


def sac_context():
    """torchtitan 9dec370 parallelize_llama.py _apply_ac_to_transformer_block, selective_ac_option 'op'."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    save = {torch.ops.aten.mm.default, torch.ops.aten._scaled_dot_product_flash_attention.default,
            torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
            torch.ops.aten._scaled_dot_product_efficient_attention.default}
    meta = {"forward": 0, "recompute": 0}

    def policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == torch.ops.aten.mm.default:
            meta[mode] += 1
        keep = func in save and not (func == torch.ops.aten.mm.default and meta[mode] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


SAVED = []


def _record_partition():
    import torch._functorch.partitioners as parts
    import torch._inductor.compile_fx as cfx

    original = parts.min_cut_rematerialization_partition

    def wrapped(joint, joint_inputs, **kw):
        fwd, bwd = original(joint, joint_inputs, **kw)
        out = next(n for n in fwd.graph.nodes if n.op == "output").args[0]
        for node in out[kw.get("num_fwd_outputs", 1):]:
            val = node.meta.get("val") if hasattr(node, "meta") else None
            if isinstance(val, torch.Tensor):
                SAVED.append((node.name, tuple(val.shape), val.dtype, val.numel() * val.element_size()))
        return fwd, bwd

    parts.min_cut_rematerialization_partition = wrapped
    cfx.min_cut_rematerialization_partition = wrapped


def run(shape, sac=False, dtype=torch.bfloat16):
    """Compiles and runs one block forward + backward; returns [(graph, kind, bytes)] per scheduler node and the
    saved tensors."""
    import torch._inductor.metrics as metrics
    from torch._inductor.scheduler import ExternKernelSchedulerNode, NopKernelSchedulerNode

    torch._dynamo.reset()
    metrics.reset()
    SAVED.clear()
    b, s, h, heads, kv, f = shape
    torch.manual_seed(0)
    blk = Block(h, heads, kv, f).to(dtype)
    dh = h // heads
    freqs = torch.polar(torch.ones(s, dh // 2), torch.outer(torch.arange(s).float(),
                                                            1.0 / 10000 ** (torch.arange(0, dh, 2).float() / dh)))
    x = torch.randn(b, s, h, dtype=dtype, requires_grad=True)
    if sac:
        from torch.utils.checkpoint import checkpoint

        def fn(x, freqs):
            return checkpoint(blk, x, freqs, use_reentrant=False, context_fn=sac_context)
    else:
        fn = blk
    comp = torch.compile(fn, backend="inductor", fullgraph=False)
    out = comp(x, freqs)
    n_fwd = len(metrics.nodes_num_elem)
    out.backward(torch.randn_like(out))
    rows = []
    for i, (node, _) in enumerate(metrics.nodes_num_elem):
        if isinstance(node, NopKernelSchedulerNode):
            continue
        kind = "extern:" + str(getattr(node.node, "python_kernel_name", "") or type(node.node).__name__) \
            if isinstance(node, ExternKernelSchedulerNode) else "kernel"
        rows.append(("fwd" if i < n_fwd else "bwd", kind, node.get_read_write_buffers_sizes(), node.get_name()))
    return rows, list(SAVED), metrics.generated_kernel_count


# Extern nodes that move no bytes on any device: views (the complex ones: view_as_complex / view_as_real / _conj set a
# flag or reinterpret strides) and the multi-output unpacking; get_read_write_buffers_sizes still counts their buffers.
VIEWS = ("view_as_complex", "view_as_real", "reshape", "_conj", "MultiOutput")
GEMMS = ("mm", "scaled_dot_product")  # priced as GEMMs and the attention core, not element-wise


def kind_of(kind):
    """'kernel' (an inductor kernel), 'eager' (an aten op inductor falls back to: it runs as its own kernel), 'view',
    'gemm'."""
    if kind == "kernel":
        return kind
    op = kind.split(":", 1)[1]
    if any(v in op for v in VIEWS):
        return "view"
    if any(op.endswith(g) or f".{g}" in op or f"{g}_" in op for g in GEMMS):
        return "gemm"
    return "eager"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sac", action="store_true")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args()
    torch._logging.set_logs(inductor_metrics=True)
    # a graph loaded from inductor's caches is not generated again, so its nodes would not be counted
    torch._inductor.config.fx_graph_cache = False
    torch._functorch.config.enable_autograd_cache = False
    logging.getLogger("torch._inductor").setLevel(logging.WARNING)
    _record_partition()
    # Llama 3 8B's ratios (q = h, hk = h / 4, f = 3.5 h, head dim 128) and 70B's (hk = h / 8), h scaled down: every
    # element-wise kernel's bytes are a multiple of T h, so bytes a token / h carries over to the full-size model.
    shapes = {"8B ratios": (2, 256, 512, 4, 1, 1792), "70B ratios": (2, 256, 1024, 8, 1, 3584)}
    for label, shape in shapes.items():
        rows, saved, kernels = run(shape, args.sac)
        b, s, h, heads, kv, f = shape
        T = b * s
        print(f"{label}: b={b} s={s} h={h} heads={heads} kv={kv} f={f} (bytes a token / h; 2 = a 16-bit element of h)")
        for g in ("fwd", "bwd"):
            tot = {}
            for gg, k, n, _ in rows:
                if gg == g:
                    c = tot.setdefault(kind_of(k), [0, 0])
                    c[0] += 1
                    c[1] += n / T / h
            print("   " + g + ": " + ", ".join(f"{k} {c[0]} nodes {c[1]:.2f}" for k, c in sorted(tot.items())))
        act = [(name, shp, n) for name, shp, dt, n in saved if not name.startswith("primals") or shp[0] == b]
        print(f"   saved (activations, not weights): {sum(n for *_, n in act) / T / h:.2f}: "
              + ", ".join(f"{name} {n / T / h:.3f}" for name, shp, n in act))
        if args.verbose:
            for g, k, n, name in rows:
                print(f"   {g} {name:>14} {kind_of(k):6} {k:60} {n / T / h:7.3f}")


if __name__ == "__main__":
    main()
