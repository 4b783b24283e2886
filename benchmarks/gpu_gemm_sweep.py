"""Measure bf16 matrix-product speed on a real GPU, for calibrating the efficiency model.

Runs where PyTorch and a CUDA GPU are (not in CI): for every (M, N, K) in the shape list it
times ``a @ b`` with a: (M, K), b: (K, N) in bf16 on random normal data, by CUDA events over
``--iters`` batches of back-to-back products (about 2 ms each) after ``--warmup`` products,
and writes one CSV row per shape with the
median time and achieved TFLOP/s. Also times a large device-to-device copy (HBM B/s).

    python3 benchmarks/gpu_gemm_sweep.py --out gemm.csv
    python3 benchmarks/gpu_gemm_sweep.py --dtype fp8 --fast-accum both --only gpt3,llama70,square --out fp8.csv

fp8 products run through torch._scaled_mm, whose default accumulates in the GEMM's full-precision path
(use_fast_accum False); Transformer Engine's forward GEMMs and torchao's float8 output GEMM accumulate fast (TE's
recipes: split accumulator off for fprop, on for dgrad and wgrad; torchao Float8LinearConfig: use_fast_accum True for
the output GEMM only). ``--fast-accum both`` times every shape both ways in one run, side by side (column
``fast_accum``).

The shapes: square sides 256 .. 16384; and the four GEMMs of a transformer layer (QKV,
attention projection, MLP up, MLP down) for GPT-3 175B (h 12288, f 4h) and Llama-3 70B (h 8192,
f 28672, 8 KV heads of 128) at tp 1, 2, 4, 8 and tokens per micro-batch 2048, 4096, 8192.
"""

from __future__ import annotations

import argparse
import csv
import statistics


def shapes() -> list[tuple[str, int, int, int]]:
    out = [(f"square-{n}", n, n, n) for n in (256, 512, 1024, 2048, 4096, 8192, 16384)]
    out += [(f"thin-K{k}", 8192, 8192, k) for k in (64, 128, 256, 512, 1024, 2048)]
    out += [(f"thin-M{m}", m, 8192, 8192) for m in (64, 128, 256, 512, 1024, 2048)]
    models = {"gpt3": (12288, 4 * 12288, 12288, 1), "llama70": (8192, 28672, 1024, 2)}
    for name, (h, f, hkv2, mats_extra) in models.items():
        for t in (1, 2, 4, 8):
            for T in (2048, 4096, 8192):
                qkv_n = (h + 2 * (hkv2 if name == "llama70" else h)) // t
                out += [
                    (f"{name}-qkv-t{t}-T{T}", T, qkv_n, h),
                    (f"{name}-proj-t{t}-T{T}", T, h, h // t),
                    (f"{name}-up-t{t}-T{T}", T, mats_extra * f // t, h),
                    (f"{name}-down-t{t}-T{T}", T, h, f // t),
                ]
    return out


def time_gemm(torch, M, N, K, dtype, warmup, iters, fast_accum=False) -> float:
    """Median seconds of one (M x K) @ (K x N) product (fp8: e4m3 operands through torch._scaled_mm, per-tensor
    scales, bf16 out, ``fast_accum`` its use_fast_accum), timed by CUDA events over ``iters`` batches of
    back-to-back products after ``warmup`` ones."""
    dev = torch.device("cuda")
    a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    b = torch.randn(K, N, device=dev, dtype=torch.bfloat16)
    if dtype == "fp8":  # _scaled_mm wants the second operand column-major
        a8, b8 = a.to(torch.float8_e4m3fn), b.t().contiguous().to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=dev)

        def product():
            return torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                    use_fast_accum=fast_accum)
    else:
        def product():
            return a @ b
    for _ in range(warmup):
        product()
    # Back-to-back products between two events, enough of them to fill about 2 ms, so that launch latency hides
    # behind the queue (a single small product would time the launch, not the kernel).
    return events_median(torch, product, max(1, min(1000, int(2e-3 / (2 * M * N * K / 700e12)))), iters)


def events_median(torch, fn, reps, iters) -> float:
    """Median seconds of one ``fn()`` over ``iters`` batches of ``reps`` back-to-back calls between two CUDA events."""
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / reps)
    return statistics.median(times)


def main() -> None:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--dtype", choices=("bf16", "fp8"), default="bf16",
                    help="fp8: e4m3 operands through torch._scaled_mm (per-tensor scales, bf16 output), "
                         "as Transformer Engine's and torchao's float8 linear layers run")
    ap.add_argument("--fast-accum", choices=("off", "on", "both"), default="off",
                    help="fp8 only: torch._scaled_mm's use_fast_accum (both: each shape both ways, side by side)")
    ap.add_argument("--only", default="",
                    help="comma-separated label prefixes to time (e.g. gpt3,llama70,square); default every shape")
    args = ap.parse_args()
    if args.fast_accum != "off" and args.dtype != "fp8":
        ap.error(f"--fast-accum: expected off for --dtype bf16, got {args.fast_accum}")
    prefixes = tuple(p for p in args.only.split(",") if p)
    accums = {"off": (False,), "on": (True,), "both": (False, True)}[args.fast_accum]
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    rows = []
    for label, M, N, K in shapes():
        if prefixes and not label.startswith(prefixes):
            continue
        for fast in accums:
            t = time_gemm(torch, M, N, K, args.dtype, args.warmup, args.iters, fast)
            rows.append({"label": label, "M": M, "N": N, "K": K, "time_s": t, "tflops": 2 * M * N * K / t / 1e12,
                         **({"fast_accum": int(fast)} if args.fast_accum != "off" else {})})
            print(f"{label:24s} {M:6d} {N:6d} {K:6d} {'fast' if fast else '    '} {t * 1e6:10.1f} us "
                  f"{rows[-1]['tflops']:7.1f} TFLOP/s", flush=True)
    n = 1 << 30  # 2 GiB copy: bytes read + written
    x = torch.empty(n, dtype=torch.uint8, device=dev)
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(10):
        y.copy_(x)
    e.record()
    e.synchronize()
    copy_Bps = 2 * n * 10 / (s.elapsed_time(e) / 1e3)
    print(f"device copy: {copy_Bps / 1e12:.2f} TB/s (read + write)")
    with open(args.out, "w", newline="") as fh:
        fh.write(f"# {props.name}, torch {torch.__version__}, {args.dtype}, median over {args.iters} batches of "
                 f"back-to-back products (about 2 ms each) after {args.warmup} warm-up products, CUDA events; "
                 f"device copy {copy_Bps:.4g} B/s read+write\n")
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main()
