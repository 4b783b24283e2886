"""Host time an eager MoE layer's expert phase takes to launch its kernels, measured on one GPU.

    python3 benchmarks/gpu_moe_host.py --out DIR [--budget-s 60]   (a CUDA GPU; writes DIR/moe_host_measured.csv)
    python3 benchmarks/gpu_moe_host.py --out /tmp/x --tiny         (tiny shapes on the CPU: every code path once)

The cost model prices dropless routing's host wait per MoE layer and micro-batch at HOST_S_PER_KERNEL a kernel
(costmodel/_experts.py: 30 us, read from one published micro-batch pair, not measured). This measures it. One
expert-parallel rank's MoE part of a layer, forward and backward, written the way Megatron-Core's alltoall dispatcher
and Transformer Engine's GroupedLinear run it in eager PyTorch: a router product, fp32 softmax and top-k; the tokens
per expert counted and copied to the host, and the host waiting for them (the dispatcher's sync before its
all-to-all: no all-to-all is run on one GPU, the rank takes the balanced arrivals, every token's k copies folded onto
its local experts); the copies sorted by expert and gathered; one GEMM per local expert for FC1 and one for FC2
(GroupedLinear launches a cuBLAS GEMM per expert), SwiGLU between; the routing weights applied and the copies added
back. Qwen3-235B-A22B's expert shapes (hidden 4096, expert ffn 1536, 128 experts, top 8) at 4, 16 and 32 local
experts (ep 32, 8, 4) and several token counts a micro-batch.

Per row: the kernels one forward and backward launch (torch.profiler's device kernels; on the CPU its aten ops), the
wall time of one forward and backward (median of timed runs, synchronised at the end), the GPU's busy time (the
kernels' summed durations) and host_us_per_kernel = wall / kernels. Where the GPU is nearly idle (busy well under the
wall time: the tiny token counts) the wall time is the host's, and host_us_per_kernel is the host's time a kernel;
where the GPU is busy the row shows how much of the host's time it hides. Eager PyTorch without Transformer Engine:
TE's GEMM wrappers add their own Python and cuBLASLt set-up a call, so a TE run costs at least this.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time

HIDDEN, EXPERT_FFN, EXPERTS, TOP_K = 4096, 1536, 128, 8  # Qwen3-235B-A22B (its config.json)
LOCAL_EXPERTS = (4, 16, 32)
TOKENS = (64, 1024, 2048, 4096)  # a rank's tokens a micro-batch; 64: the GPU nearly idle, the host's time alone
TINY = dict(hidden=32, ffn=16, experts=8, top_k=2, local=(2, 4), tokens=(16, 32))
COLUMNS = ("local_experts", "tokens", "top_k", "hidden", "expert_ffn", "kernels", "wall_ms", "gpu_busy_ms",
           "host_us_per_kernel", "iters", "device")


def moe_layer(torch, x, router_w, w1, w2, experts: int, top_k: int):
    """One forward of the rank's MoE part (module docstring); returns the layer's output (T, h)."""
    local = w1.shape[0]
    logits = (x @ router_w.t()).float()
    probs, idx = torch.topk(torch.softmax(logits, dim=-1), top_k, dim=-1)  # (T, k)
    probs = probs / probs.sum(dim=-1, keepdim=True)
    flat = (idx % local).reshape(-1)  # every copy onto a local expert (the balanced all-to-all's arrivals)
    counts = torch.bincount(flat, minlength=local).tolist()  # the host waits for the tokens per expert here
    order = torch.argsort(flat, stable=True)
    copies = x.index_select(0, torch.div(order, top_k, rounding_mode="floor"))
    outs = []
    for e, part in enumerate(torch.split(copies, counts)):  # a GEMM per local expert, FC1 and FC2
        a, b = (part @ w1[e].t()).chunk(2, dim=-1)
        outs.append((torch.nn.functional.silu(a) * b) @ w2[e].t())
    out = torch.cat(outs) * probs.reshape(-1)[order].unsqueeze(-1).to(x.dtype)
    y = torch.zeros_like(x)
    y.index_add_(0, torch.div(order, top_k, rounding_mode="floor"), out)
    return y


def measure(torch, device, local: int, tokens: int, shape: dict, iters: int, warmup: int) -> dict:
    """One row: kernels, wall and busy times of a forward and backward at ``local`` experts and ``tokens`` tokens."""
    h, f, dtype = shape["hidden"], shape["ffn"], (torch.bfloat16 if device == "cuda" else torch.float32)
    g = torch.Generator(device="cpu").manual_seed(local * 100003 + tokens)

    def param(*size):
        return (torch.randn(*size, generator=g) * 0.02).to(device=device, dtype=dtype).requires_grad_()

    router_w, w1, w2 = param(shape["experts"], h), param(local, 2 * f, h), param(local, h, f)
    x = torch.randn(tokens, h, generator=g).to(device=device, dtype=dtype).requires_grad_()

    def step():
        y = moe_layer(torch, x, router_w, w1, w2, shape["experts"], shape["top_k"])
        y.float().sum().backward()
        if device == "cuda":
            torch.cuda.synchronize()

    for _ in range(warmup):
        step()
    walls = []
    for _ in range(iters):
        t0 = time.perf_counter()
        step()
        walls.append(time.perf_counter() - t0)
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device == "cuda" else [])
    with torch.profiler.profile(activities=acts) as prof:
        step()
    if device == "cuda":
        kern = [e for e in prof.events() if str(e.device_type).endswith("CUDA")]
        busy_ms = sum(e.time_range.elapsed_us() for e in kern) / 1e3
    else:  # the aten ops the CPU ran, one a kernel on a GPU (a stand-in: the dry run checks the code paths)
        kern = [e for e in prof.events() if e.name.startswith("aten::") and e.cpu_parent is None]
        busy_ms = float("nan")
    wall = statistics.median(walls)
    return {"local_experts": local, "tokens": tokens, "top_k": shape["top_k"], "hidden": h, "expert_ffn": f,
            "kernels": len(kern), "wall_ms": round(wall * 1e3, 4), "gpu_busy_ms": round(busy_ms, 4),
            "host_us_per_kernel": round(wall * 1e6 / max(len(kern), 1), 3), "iters": iters, "device": device}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for moe_host_measured.csv")
    ap.add_argument("--budget-s", type=float, default=60.0, help="stop starting rows past this many seconds")
    ap.add_argument("--iters", type=int, default=20, help="timed runs a row (2 under --tiny)")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes on the CPU: every code path once")
    args = ap.parse_args()
    import torch

    device = "cpu" if args.tiny else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("gpu_moe_host: no CUDA GPU here (--tiny runs on the CPU)", file=sys.stderr)
        return 2
    shape = (dict(hidden=TINY["hidden"], ffn=TINY["ffn"], experts=TINY["experts"], top_k=TINY["top_k"]) if args.tiny
             else dict(hidden=HIDDEN, ffn=EXPERT_FFN, experts=EXPERTS, top_k=TOP_K))
    locals_, tokens = (TINY["local"], TINY["tokens"]) if args.tiny else (LOCAL_EXPERTS, TOKENS)
    iters, warmup = (2, 1) if args.tiny else (args.iters, 3)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "moe_host_measured.csv")
    deadline, rows = time.monotonic() + args.budget_s, []
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        for local in locals_:
            for t in tokens:
                if time.monotonic() > deadline:
                    print(f"gpu_moe_host: stopped at the budget before {local} experts, {t} tokens", flush=True)
                    return 0
                row = measure(torch, device, local, t, shape, iters, warmup)
                w.writerow(row)
                fh.flush()
                rows.append(row)
                print(" ".join(f"{k}={row[k]}" for k in COLUMNS), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
