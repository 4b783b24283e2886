"""Measure fused (flash) attention speed on a real GPU, for checking the attention term.

Runs where PyTorch and a CUDA GPU are (not in CI). For each shape it times
torch.nn.functional.scaled_dot_product_attention forward, and forward + backward, in bf16
(PyTorch picks its flash / cuDNN kernel), causal and not, and writes one CSV row per shape:
the median time over batches of back-to-back calls, after warm-up.

    python3 benchmarks/gpu_attention_sweep.py --out attn.csv

FLOPs are counted as the cost model counts them (Korthikanti et al. 2022): 4 b s^2 h forward
(QK^T and AV over the full s x s square, causal or not) and twice that backward.
"""

from __future__ import annotations

import argparse
import csv


def shapes():
    # (label, batch, heads, kv_heads, seq, head_dim)
    out = []
    for t in (1, 2, 4, 8):
        for b in (1, 2, 4):
            out.append((f"gpt3-t{t}-b{b}", b, 96 // t, 96 // t, 2048, 128))
    for t in (1, 2, 4, 8):
        out.append((f"llama70-t{t}-s8192", 1, 64 // t, max(8 // t, 1), 8192, 128))
    return out


def main() -> None:
    import torch
    import torch.nn.functional as F
    from gpu_gemm_sweep import events_median

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()
    dev = torch.device("cuda")
    rows = []
    for label, b, a, akv, s, dh in shapes():
        for causal in (False, True):
            q = torch.randn(b, a, s, dh, device=dev, dtype=torch.bfloat16, requires_grad=True)
            k = torch.randn(b, akv, s, dh, device=dev, dtype=torch.bfloat16, requires_grad=True)
            v = torch.randn(b, akv, s, dh, device=dev, dtype=torch.bfloat16, requires_grad=True)
            kw = {"is_causal": causal, "enable_gqa": akv != a}

            def fwd(q=q, k=k, v=v, kw=kw):
                return F.scaled_dot_product_attention(q, k, v, **kw)

            def fwd_bwd(fwd=fwd):
                fwd().sum().backward()

            res = {}
            for name, fn in (("fwd", fwd), ("fwd_bwd", fwd_bwd)):
                for _ in range(3):
                    fn()
                res[name] = events_median(torch, fn, 10, args.iters)
            flops_fwd = 4.0 * b * s * s * a * dh
            rows.append({"label": label, "batch": b, "heads": a, "kv_heads": akv, "seq": s, "head_dim": dh,
                         "causal": causal, "fwd_s": res["fwd"], "fwd_bwd_s": res["fwd_bwd"],
                         "fwd_tflops_full_count": flops_fwd / res["fwd"] / 1e12,
                         "fwd_bwd_tflops_full_count": 3 * flops_fwd / res["fwd_bwd"] / 1e12})
            r = rows[-1]
            print(f"{label:20s} causal={causal!s:5} fwd {r['fwd_s'] * 1e6:9.1f} us "
                  f"{r['fwd_tflops_full_count']:6.1f} "
                  f"TF/s  fwd+bwd {r['fwd_bwd_s'] * 1e6:9.1f} us {r['fwd_bwd_tflops_full_count']:6.1f} TF/s",
                  flush=True)
    with open(args.out, "w", newline="") as fh:
        fh.write(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, sdpa bf16, median over "
                 f"{args.iters} batches of 10 calls after 3 warm-ups; TFLOP/s count the full s x s square\n")
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main()
