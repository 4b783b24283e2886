"""Measure one transformer layer on a real GPU: forward / backward time and the activation bytes
autograd keeps, for checking the cost model's per-layer compute and its activation formulas.

Runs where PyTorch and a CUDA GPU are (not in CI):

    python3 benchmarks/gpu_layer_sweep.py --out tests/data/h100_layer_measured.csv

One GPU stands for one rank of a tensor-parallel group of size t without sequence
parallelism: the layer holds heads / t query heads, kv_heads / t (at least 1) K/V heads and
ffn / t MLP columns, while norms, residuals and dropouts work on the whole hidden size h, as
on every rank of Megatron's tensor parallelism (no communication is timed). bf16 weights and
activations; attention by torch's fused scaled_dot_product_attention (causal), and for a
few GPT shapes also written out (scores, mask, softmax, dropout, V); GPT layers:
LayerNorm, GeLU MLP, biases, dropout 0.1 after attention and MLP (a 1-byte mask each); Llama
layers: RMSNorm, SwiGLU MLP, no biases, no dropout.

Per shape it records
- act_bytes: memory_allocated() after the forward minus before it, less the output (the next
  layer's input): what autograd keeps for the backward of one micro-batch, not counting the
  layer's input (allocated before; the cost model counts it, 2 s b h bytes);
- act_full_bytes: the same under torch.utils.checkpoint (full recompute: the input only);
- peak_bwd_full_bytes: the peak above the forward's start while that checkpointed layer runs
  its backward (the recompute working set plus gradients in flight);
- fwd_s, fwd_bwd_s: medians over --iters timed runs (CUDA events) after --warmup runs.
"""

from __future__ import annotations

import argparse
import csv
import statistics
from functools import partial

from gpu_modern_layers import kept_and_peak  # (benchmarks/ is the script's folder: on sys.path)

# (label, hidden, heads, kv_heads, ffn_hidden, llama-style, tp, seq, micro-batches)
UNFUSED = [  # the same layers with attention written out (older frameworks), GPT shapes only
    ("megatron-22b", 6144, 64, 64, 24576, False, 8, 2048, (1, 2)),
    ("gpt3-175b", 12288, 96, 96, 49152, False, 8, 2048, (1,)),
]
SHAPES = [
    ("megatron-22b", 6144, 64, 64, 24576, False, 8, 2048, (1, 2, 4, 8)),
    ("gpt3-175b", 12288, 96, 96, 49152, False, 8, 2048, (1, 2, 4)),
    ("megatron-530b", 20480, 128, 128, 81920, False, 8, 2048, (1, 2)),
    ("megatron-1t", 25600, 160, 160, 102400, False, 8, 2048, (1, 2)),
    ("llama3-8b", 4096, 32, 8, 14336, True, 1, 8192, (1, 2)),
    ("llama3-70b", 8192, 64, 8, 28672, True, 8, 8192, (1, 2)),
    ("llama3-70b", 8192, 64, 8, 28672, True, 4, 8192, (1,)),
    ("llama3-405b", 16384, 128, 8, 53248, True, 8, 8192, (1,)),
]


def build(torch, h, heads, kv_heads, ffn, llama, dh, fused=True):
    nn, F = torch.nn, torch.nn.functional

    class RMSNorm(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.w = nn.Parameter(torch.ones(n))

        def forward(self, x):
            return F.rms_norm(x, (x.shape[-1],), self.w)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            norm = RMSNorm if llama else nn.LayerNorm
            self.n1, self.n2 = norm(h), norm(h)
            self.qkv = nn.Linear(h, (heads + 2 * kv_heads) * dh, bias=not llama)
            self.proj = nn.Linear(heads * dh, h, bias=not llama)
            self.up = nn.Linear(h, ffn * (2 if llama else 1), bias=not llama)
            self.down = nn.Linear(ffn, h, bias=not llama)
            self.p = 0.0 if llama else 0.1

        def forward(self, x):  # x: (s, b, h)
            s, b, _ = x.shape
            q, k, v = self.qkv(self.n1(x)).split([heads * dh, kv_heads * dh, kv_heads * dh], dim=-1)
            q = q.view(s, b, heads, dh).permute(1, 2, 0, 3)
            k = k.view(s, b, kv_heads, dh).permute(1, 2, 0, 3)
            v = v.view(s, b, kv_heads, dh).permute(1, 2, 0, 3)
            if fused:
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv_heads != heads)
            else:  # scores, causal mask, softmax, dropout, then V: Korthikanti et al.'s eager attention
                scores = (q @ k.transpose(-1, -2)) * dh**-0.5
                mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
                probs = F.dropout(scores.masked_fill(mask, float("-inf")).softmax(-1), self.p, training=True)
                o = probs @ v
            o = o.permute(2, 0, 1, 3).reshape(s, b, heads * dh)
            x = x + F.dropout(self.proj(o), self.p, training=True)
            u = self.up(self.n2(x))
            if llama:
                g, u = u.chunk(2, dim=-1)
                a = F.silu(g) * u
            else:
                a = F.gelu(u)
            return x + F.dropout(self.down(a), self.p, training=True)

    return Layer()


def kept(torch, layer, fn, x, dy) -> tuple[int, int]:
    """(bytes kept after fn's forward less its output, peak above the start through the backward): the modern-layer
    sweep's measurement (its output is the layer's input's size here)."""
    return kept_and_peak(torch, fn, x, dy, layer)


def timed(torch, layer, x, dy, backward: bool, warmup: int, iters: int) -> float:
    """Median seconds of the forward (and backward) over ``iters`` runs, CUDA events."""
    for _ in range(warmup):
        y = layer(x)
        if backward:
            y.backward(dy)
    times = []
    for _ in range(iters):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        y = layer(x)
        if backward:
            y.backward(dy)
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) / 1e3)
    x.grad = None
    layer.zero_grad(set_to_none=True)
    return statistics.median(times)


def main() -> None:
    import torch
    from torch.utils.checkpoint import checkpoint

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    rows = []
    cases = [(*shape, True) for shape in SHAPES] + [(*shape, False) for shape in UNFUSED]
    for label, h, a, kv, f, llama, t, s, bs, fused in cases:
        dh = h // a
        heads, kv_heads, ffn = a // t, max(kv // t, 1), f // t
        layer = build(torch, h, heads, kv_heads, ffn, llama, dh, fused).to(dev, torch.bfloat16)
        for b in bs:
            x = torch.randn(s, b, h, device=dev, dtype=torch.bfloat16, requires_grad=True)
            dy = torch.randn_like(x)

            kept(torch, layer, layer, x, dy)  # warm-up: the first call allocates library workspaces
            act, _ = kept(torch, layer, layer, x, dy)
            act_full, peak_full = kept(torch, layer, partial(checkpoint, layer, use_reentrant=False), x, dy)
            fwd_s = timed(torch, layer, x, dy, False, args.warmup, args.iters)
            fwd_bwd_s = timed(torch, layer, x, dy, True, args.warmup, args.iters)
            rows.append({"label": f"{label}-t{t}-b{b}" + ("" if fused else "-unfused"),
                         "attention": "fused" if fused else "unfused", "hidden": h, "heads_local": heads,
                         "kv_heads_local": kv_heads,
                         "ffn_local": ffn, "llama": llama, "tp": t, "seq": s, "micro_batch": b,
                         "act_bytes": act, "act_full_bytes": act_full, "peak_bwd_full_bytes": peak_full,
                         "fwd_s": fwd_s, "fwd_bwd_s": fwd_bwd_s})
            r = rows[-1]
            print(f"{r['label']:24s} act {act / 2**20:9.1f} MiB full {act_full / 2**20:8.1f} MiB "
                  f"peak-bwd(full) {peak_full / 2**20:9.1f} MiB fwd {fwd_s * 1e3:8.2f} ms "
                  f"fwd+bwd {fwd_bwd_s * 1e3:8.2f} ms", flush=True)
            del x, dy
        del layer
        torch.cuda.empty_cache()
    with open(args.out, "w", newline="") as fh:
        fh.write(f"# {props.name}, torch {torch.__version__}, one tensor-parallel rank of one layer (no comm), bf16, "
                 f"fused causal SDPA (unfused rows: eager attention), median over {args.iters} runs after "
                 f"{args.warmup} warm-ups, CUDA events\n")
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main()
