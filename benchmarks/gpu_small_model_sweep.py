"""Small models' layers on a real GPU: their four GEMMs (bf16, and fp8 for the float8 rows) and
one layer forward + backward with its kernels summed by name, for checking whether the cost
model prices small models' layers on the H100 too fast (mcore-gpt-1.7B / 7.1B, MPT 1B /
3B, Llama 3 8B predicted 5-17% fast while the large models are right).

Runs where PyTorch and a CUDA GPU are (not in CI), about 3 minutes on an H100:

    python3 benchmarks/gpu_small_model_sweep.py --out-dir tests/data           # writes the first three CSVs below
    python3 benchmarks/gpu_small_model_sweep.py --second --out-dir tests/data  # the last two (second()'s docstring)
    python3 benchmarks/gpu_small_model_sweep.py --dry-run                      # lists the shapes (no torch)

- h100_small_gemm_measured.csv: (M, N, K) = (tokens per micro-batch, out, in) of QKV, attention
  projection, MLP up (and gate), MLP down at each row's tp, timed as benchmarks/gpu_gemm_sweep.py
  does (medians of about 2 ms batches of back-to-back products); a few big shapes of
  tests/data/h100_gemm_measured.csv again, so the two runs can be compared.
- h100_small_layer_measured.csv: one tensor-parallel rank of one layer, built and timed as
  benchmarks/gpu_layer_sweep.py does (fused causal SDPA, eager PyTorch, no communication).
- h100_small_layer_kernels.csv: per layer, each kernel's name, calls and device time over one
  profiled forward + backward (torch.profiler), for splitting the layer into GEMM, attention and
  element-wise time and the gap between kernels (rows written since the first run end with a "wall (events)" row).
- h100_small_attention_measured.csv, h100_small_layer_graphed.csv: see second().
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

# (label, hidden, heads, kv_heads, ffn, llama-style, tp, seq, micro-batches); published_runs.csv's shapes
LAYERS = [
    ("mcore-gpt-1.7b", 2048, 16, 16, 8192, False, 1, 4096, (1, 2, 4)),
    ("mcore-gpt-7.1b", 4096, 32, 32, 16384, False, 2, 4096, (1, 2, 4)),
    ("mpt-1b", 2048, 16, 16, 8192, False, 1, 2048, (4, 12)),
    ("mpt-3b", 2560, 20, 20, 10240, False, 1, 2048, (8,)),
    ("llama3-8b", 4096, 32, 8, 14336, True, 1, 8192, (1, 2)),
    ("llama3-8b", 4096, 32, 8, 14336, True, 8, 8192, (12,)),
    # big references, measured before in tests/data/h100_layer_measured.csv (run-to-run check)
    ("gpt3-175b", 12288, 96, 96, 49152, False, 8, 2048, (1,)),
    ("llama3-70b", 8192, 64, 8, 28672, True, 8, 8192, (1,)),
]
# (label, hidden, ffn, K/V width, MLP matrices, tp, tokens per micro-batch)
GEMM_MODELS = [
    ("gpt1.7b", 2048, 8192, 2048, 1, 1, (4096, 8192, 16384)),
    ("gpt7.1b", 4096, 16384, 4096, 1, 2, (4096, 8192, 16384)),
    ("mpt1b", 2048, 8192, 2048, 1, 1, (8192, 24576)),
    ("mpt3b", 2560, 10240, 2560, 1, 1, (16384,)),
    ("llama8", 4096, 14336, 1024, 2, 1, (8192, 16384)),
    ("llama8", 4096, 14336, 1024, 2, 8, (98304,)),
    ("gpt3", 12288, 49152, 12288, 1, 8, (2048,)),  # references in h100_gemm_measured.csv
    ("llama70", 8192, 28672, 1024, 2, 8, (8192,)),
]
FP8_MODELS = ("llama8", "llama70")


def gemm_shapes() -> list[tuple[str, int, int, int]]:
    out = []
    for name, h, f, hk, mats, t, tokens in GEMM_MODELS:
        for T in tokens:
            out += [(f"{name}-qkv-t{t}-T{T}", T, (h + 2 * hk) // t, h), (f"{name}-proj-t{t}-T{T}", T, h, h // t),
                    (f"{name}-up-t{t}-T{T}", T, mats * f // t, h), (f"{name}-down-t{t}-T{T}", T, h, f // t)]
    return out


def layer_cases():
    for label, h, a, kv, f, llama, t, s, bs in LAYERS:
        for b in bs:
            yield label, h, a, kv, f, llama, t, s, b


def built_layers(torch, build):
    """Each layer case built on the GPU: its name, (hidden, local heads, local K/V heads, local ffn, llama, tp, seq,
    micro-batch), the layer, an input that needs its gradient and an output gradient."""
    for label, h, a, kv, f, llama, t, s, b in layer_cases():
        heads, kv_heads, ffn = a // t, max(kv // t, 1), f // t
        layer = build(torch, h, heads, kv_heads, ffn, llama, h // a, True).to("cuda", torch.bfloat16)
        x = torch.randn(s, b, h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        yield f"{label}-t{t}-b{b}", (h, heads, kv_heads, ffn, llama, t, s, b), layer, x, torch.randn_like(x)


def kernel_table(torch, layer, x, dy, activities=None) -> list[tuple[str, int, float]]:
    """(kernel name, calls, device seconds) over one profiled forward + backward, and a last row
    ("wall (events)", 1, seconds between CUDA events around that same forward + backward)."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with profile(activities=activities or [ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        e0.record()
        y = layer(x)
        y.backward(dy)
        e1.record()
        torch.cuda.synchronize()
    x.grad = None
    layer.zero_grad(set_to_none=True)
    rows = []
    for ev in prof.key_averages():
        us = getattr(ev, "self_device_time_total", None)
        if us is None:
            us = getattr(ev, "self_cuda_time_total", 0.0)
        if us > 0 and not ev.key.startswith(("aten::", "autograd::", "torch::", "Memcpy", "Memset")):
            rows.append((ev.key, ev.count, us / 1e6))
    return rows + [("wall (events)", 1, e0.elapsed_time(e1) / 1e3)]


class Sink:
    """A CSV written row by row (flushed), so a run stopped at its limit still leaves what it measured."""

    def __init__(self, path: Path, header: str):
        self.fh, self.header, self.w = open(path, "w", newline=""), header, None

    def row(self, r: dict) -> None:
        if self.w is None:
            self.fh.write(self.header + "\n")
            self.w = csv.DictWriter(self.fh, fieldnames=list(r))
            self.w.writeheader()
        self.w.writerow(r)
        self.fh.flush()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir", default="tests/data")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--second", action="store_true", help="the second run: attention per SDPA backend, and each "
                    "layer eager against CUDA-graphed (launch and idle time), instead of the first run's CSVs")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()
    if args.dry_run:
        for g in gemm_shapes():
            print("gemm", *g, "fp8 too" if g[0].split("-")[0] in FP8_MODELS else "")
        for c in layer_cases():
            print("layer", *c)
        return
    import torch
    from gpu_gemm_sweep import time_gemm
    from gpu_layer_sweep import build, timed

    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    props = torch.cuda.get_device_properties(dev)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    head = f"# {props.name}, torch {torch.__version__}"
    if args.second:
        return second(torch, build, timed, out, head, args)
    gemms = Sink(out / "h100_small_gemm_measured.csv", head + ", median over 20 batches of back-to-back products "
                 "(about 2 ms each) after 5 warm-ups, CUDA events; fp8: e4m3 through torch._scaled_mm, bf16 out")
    for label, M, N, K in gemm_shapes():
        for dtype in ("bf16", "fp8") if label.split("-")[0] in FP8_MODELS else ("bf16",):
            t = time_gemm(torch, M, N, K, dtype, 5, 20)
            gemms.row({"label": label, "dtype": dtype, "M": M, "N": N, "K": K, "time_s": t,
                       "tflops": 2 * M * N * K / t / 1e12})
            print(f"{label:26s} {dtype} {M:6d} {N:6d} {K:6d} {t * 1e6:9.1f} us {2 * M * N * K / t / 1e12:7.1f} TF/s",
                  flush=True)
    torch.cuda.empty_cache()
    layers = Sink(out / "h100_small_layer_measured.csv", head + f", one tensor-parallel rank of one layer (no comm), "
                  f"bf16, fused causal SDPA, eager, median over {args.iters} runs after {args.warmup} warm-ups, "
                  "CUDA events")
    kernels = Sink(out / "h100_small_layer_kernels.csv", head + ", one profiled forward + backward per layer "
                   "(torch.profiler, after the timed runs): each kernel's calls and device seconds")
    for name, (h, heads, kv_heads, ffn, llama, t, s, b), layer, x, dy in built_layers(torch, build):
        fwd_s = timed(torch, layer, x, dy, False, args.warmup, args.iters)
        fwd_bwd_s = timed(torch, layer, x, dy, True, args.warmup, args.iters)
        layers.row({"label": name, "hidden": h, "heads_local": heads, "kv_heads_local": kv_heads, "ffn_local": ffn,
                    "llama": llama, "tp": t, "seq": s, "micro_batch": b, "fwd_s": fwd_s, "fwd_bwd_s": fwd_bwd_s})
        try:
            table = kernel_table(torch, layer, x, dy)
        except Exception as exc:  # the timings matter more than the profile
            print(f"{name}: profiler failed: {exc!r}", flush=True)
            table = []
        for kname, calls, sec in table:
            kernels.row({"label": name, "kernel": kname[:200], "calls": calls, "device_s": sec})
        print(f"{name:24s} fwd {fwd_s * 1e3:8.3f} ms fwd+bwd {fwd_bwd_s * 1e3:8.3f} ms kernels "
              f"{sum(r[2] for r in table[:-1]) * 1e3:8.3f} ms in {sum(r[1] for r in table[:-1])} calls", flush=True)
        del x, dy, layer
        torch.cuda.empty_cache()


def time_sdpa(torch, q, k, v, backend, warmup, iters) -> tuple[float, float]:
    """Median (forward, forward + backward) seconds of causal SDPA on one backend, CUDA events."""
    from torch.nn.attention import sdpa_kernel

    F = torch.nn.functional
    dy = torch.randn_like(q)
    out = []
    for backward in (False, True):
        times = []
        for i in range(warmup + iters):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            with sdpa_kernel(backend):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            if backward:
                o.backward(dy)
            e1.record()
            e1.synchronize()
            if i >= warmup:
                times.append(e0.elapsed_time(e1) / 1e3)
        out.append(statistics.median(times))
    return out[0], out[1]


def second(torch, build, timed, out, head, args) -> None:
    """h100_small_attention_measured.csv: each layer's causal attention alone (K/V heads repeated to the query
    heads, as torchtitan's Llama does before SDPA) on the flash (FlashAttention-2) and cuDNN backends;
    h100_small_layer_graphed.csv: the layer's forward + backward eager, CUDA-graphed
    (torch.cuda.make_graphed_callables: no launch gaps), and one profiled eager run (CUDA activity only): its
    kernels' sum and the events' wall time around it."""
    from torch.nn.attention import SDPBackend
    from torch.profiler import ProfilerActivity

    dev = torch.device("cuda")
    att = Sink(out / "h100_small_attention_measured.csv", head + f", causal SDPA alone, bf16, median over "
               f"{args.iters} runs after {args.warmup} warm-ups, CUDA events; tflops count the causal half "
               "(2 b s^2 a dh forward, 2.5x that backward)")
    seen = set()
    for label, h, a, _kv, _f, _llama, t, s, b in layer_cases():
        heads, dh = a // t, h // a
        if (heads, s, b, dh) in seen:
            continue
        seen.add((heads, s, b, dh))
        q, k, v = (torch.randn(b, heads, s, dh, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in "qkv")
        flops = 2.0 * b * s * s * heads * dh  # causal half of QK^T and AV
        for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                fwd, fb = time_sdpa(torch, q, k, v, backend, args.warmup, args.iters)
            except Exception as exc:
                print(f"{label} {name}: {exc!r}"[:300], flush=True)
                continue
            att.row({"label": f"{label}-t{t}-b{b}", "backend": name, "batch": b, "heads": heads, "seq": s,
                     "head_dim": dh, "fwd_s": fwd, "fwd_bwd_s": fb, "fwd_tflops": flops / fwd / 1e12,
                     "fwd_bwd_tflops": 3.5 * flops / fb / 1e12})
            print(f"{label}-t{t}-b{b:<3d} {name:5s} fwd {fwd * 1e3:7.3f} ms {flops / fwd / 1e12:6.1f} TF/s  fwd+bwd "
                  f"{fb * 1e3:7.3f} ms {3.5 * flops / fb / 1e12:6.1f} TF/s", flush=True)
        del q, k, v
    torch.cuda.empty_cache()
    gr = Sink(out / "h100_small_layer_graphed.csv", head + f", one layer as in h100_small_layer_measured.csv: "
              f"fwd+bwd eager and CUDA-graphed, medians over {args.iters} runs after {args.warmup} warm-ups; one "
              "profiled eager fwd+bwd (CUDA activity only): kernels' sum and wall between events")
    for name, _, layer, x, dy in built_layers(torch, build):
        eager = timed(torch, layer, x, dy, True, args.warmup, args.iters)
        try:
            table = kernel_table(torch, layer, x, dy, [ProfilerActivity.CUDA])
            kern, wall = sum(r[2] for r in table[:-1]), table[-1][2]
        except Exception as exc:
            print(f"{name}: profiler failed: {exc!r}"[:300], flush=True)
            kern = wall = float("nan")
        try:
            graphed = torch.cuda.make_graphed_callables(layer, (x,))
            g = timed(torch, graphed, x, dy, True, args.warmup, args.iters)
            del graphed
        except Exception as exc:
            print(f"{name}: graph failed: {exc!r}"[:300], flush=True)
            g = float("nan")
        gr.row({"label": name, "eager_fwd_bwd_s": eager, "graphed_fwd_bwd_s": g, "profiled_kernels_s": kern,
                "profiled_wall_s": wall})
        print(f"{name:24s} eager {eager * 1e3:8.3f} ms graphed {g * 1e3:8.3f} ms profiled: kernels {kern * 1e3:8.3f} "
              f"wall {wall * 1e3:8.3f} ms", flush=True)
        del x, dy, layer
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
