"""Replay one rank's share of PyTorch's ring attention on one GPU, for the torchtitan CP rows.

Runs where PyTorch and a CUDA GPU are (not in CI). It mirrors torch.distributed.tensor.experimental._attention as the
end-2024 nightly had it (the torchtitan benchmark's torch 1963fc8; the stored copies of that file around it read the
same): _templated_ring_attention and _templated_ring_attention_backward with round-robin load balance (step 0 causal on
the rank's sc x sc chunk, every later step non-causal on sc/2 x sc (q's second half, steps past the rank) or sc x sc/2
(k, v's first half)), the fp32 _SDPAMerger, _partial_update's cats, the discarded K/V cat of each step, fp32 dK, dV
accumulation and casts; the flash SDPA kernels called as the CP handler calls them. No communication: a rank's own
K, V (and its own dK, dV) stand for the ones it would receive, so this times the rank's compute, not the collectives.

    python3 benchmarks/gpu_ring_attention_probe.py --out ring.json

Prints (and writes) one JSON object per measurement: a small all-rank replay against full causal attention (check);
the flash kernel alone at the sub-block shapes (kernel); and a rank's ring forward and backward at cp 1, 2, 4, 8 with
32,768 tokens on the rank (ring; per_unit_ms = (forward + backward) / cp, one unit = one causal sc x sc square's worth).
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    import torch
    import torch.nn.functional as F

    aten, res = torch.ops.aten, []
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    def emit(**kw):
        res.append(kw)
        print(json.dumps(kw), flush=True)

    def fwd_op(q, k, v, causal):  # out, lse, cum_q, cum_k, max_q, max_k, seed, offset, debug mask
        return aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False)

    def bwd_op(do, q, k, v, o, lse, rest, causal):
        return aten._scaled_dot_product_flash_attention_backward(do, q, k, v, o, lse, rest[0], rest[1], q.size(2),
                                                                 k.size(2), 0.0, causal, rest[4], rest[5])

    def partial_update(orig, new, idx, add):
        ch = list(orig.chunk(2, dim=2))
        if add:
            ch[idx] += new
        else:
            ch[idx] = new
        return torch.cat(ch, dim=2)

    def step_inputs(q, k, v, i, rank):
        if i == 0:
            return q, k, v, False, True
        if i <= rank:
            return q, k.chunk(2, dim=2)[0], v.chunk(2, dim=2)[0], False, False
        return q.chunk(2, dim=2)[1], k, v, True, False

    def merge(acc, acc_lse, r, part):
        bo, bl = r[0].float(), r[1].float().unsqueeze(-1)
        if acc_lse is None:
            return bo, bl
        lse, out = (acc_lse.chunk(2, dim=2)[1], acc.chunk(2, dim=2)[1]) if part else (acc_lse, acc)
        out = out - torch.sigmoid(bl - lse) * (out - bo)
        lse = lse - F.logsigmoid(lse - bl)
        if part:
            return partial_update(acc, out, 1, False), partial_update(acc_lse, lse, 1, False)
        return out, lse

    def ring_forward(q, k, v, c, rank):
        k, v, acc, acc_lse = k.contiguous(), v.contiguous(), None, None
        for i in range(c):
            if i < c - 1:
                torch.cat([k.flatten(), v.flatten()])
            qq, kk, vv, part, causal = step_inputs(q, k, v, i, rank)
            acc, acc_lse = merge(acc, acc_lse, fwd_op(qq, kk, vv, causal), part)
        return acc.to(q.dtype), acc_lse.squeeze(-1)

    def ring_backward(do, q, k, v, o, lse, c, rank, rest):
        gq, gk, gv = (torch.zeros_like(x, dtype=torch.float32) for x in (q, k, v))
        k, v, nxt = k.contiguous(), v.contiguous(), None
        for i in range(c):
            if i != c - 1:
                torch.cat([k.flatten(), v.flatten()])
            qq, kk, vv, part, causal = step_inputs(q, k, v, i, rank)
            oo, dd, ll = (o.chunk(2, dim=2)[1], do.chunk(2, dim=2)[1], lse.chunk(2, dim=2)[1].contiguous()) if part \
                else (o, do, lse)
            g_q, g_k, g_v = bwd_op(dd, qq, kk, vv, oo, ll, rest, causal)
            if i == 0:
                gk += g_k
                gv += g_v
            else:  # the previous rank's fp32 dK, dV (here: this rank's own)
                gk, gv = nxt[:gk.numel()].reshape(gk.shape), nxt[gk.numel():].reshape(gv.shape)
                if i <= rank:
                    gk, gv = partial_update(gk, g_k, 0, True), partial_update(gv, g_v, 0, True)
                else:
                    gk += g_k
                    gv += g_v
            nxt = torch.cat([gk.flatten(), gv.flatten()])
            if i <= rank:
                gq += g_q
            else:
                gq = partial_update(gq, g_q, 1, True)
        nk = nxt.to(k.dtype)
        return gq.to(q.dtype), nk[:gk.numel()].reshape(gk.shape), nk[gk.numel():].reshape(gv.shape)

    def make(s, h, d=128):  # (b, h, s, d) views of (b, s, h, d) tensors, as torchtitan's Attention passes them
        return (torch.randn(1, s, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(3))

    def timeit(fn, reps=3):
        fn()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t) / reps

    def check(c=4, sc=256, h=4, d=128):  # every rank's forward, its true K, V blocks, against full causal attention
        q, k, v = (torch.randn(1, h, c * sc, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        ref, err = F.scaled_dot_product_attention(q, k, v, is_causal=True), 0.0
        for r in range(c):
            def loc(x, j):
                return torch.cat([x.chunk(2 * c, dim=2)[j], x.chunk(2 * c, dim=2)[2 * c - 1 - j]], dim=2)
            acc = acc_lse = None
            for i in range(c):
                qq, kk, vv, part, causal = step_inputs(loc(q, r), loc(k, (r - i) % c), loc(v, (r - i) % c), i, r)
                acc, acc_lse = merge(acc, acc_lse, fwd_op(qq, kk, vv, causal), part)
            err = max(err, (acc.to(q.dtype) - loc(ref, r)).abs().max().item())
        emit(what="check_ring_vs_full", max_abs_err=err)

    def kernels(h):
        for sq, sk, causal in ((32768, 32768, True), (16384, 16384, True), (16384, 32768, False),
                               (32768, 16384, False)):
            (q, _, _), (_, k, v) = make(sq, h), make(sk, h)
            r = fwd_op(q, k, v, causal)
            do = torch.randn_like(r[0])
            tf = timeit(lambda: fwd_op(q, k, v, causal), 5)  # noqa: B023
            tb = timeit(lambda: bwd_op(do, q, k, v, r[0], r[1], r[2:8], causal), 5)  # noqa: B023
            fl = 4.0 * sq * sk * h * 128 * (0.5 if causal else 1.0)
            emit(what="kernel", heads=h, sq=sq, sk=sk, causal=causal, fwd_ms=tf * 1e3, bwd_ms=tb * 1e3,
                 fwd_tflops=fl / tf / 1e12, bwd_tflops=2.5 * fl / tb / 1e12)

    def rings(h, cs, sc=32768):
        q, k, v = make(sc, h)
        rest = fwd_op(q, k, v, True)[2:8]
        for c in cs:
            for rank in sorted({0, c - 1}):
                if c == 1:  # no CP: the plain SDPA kernel, forward and backward
                    r = fwd_op(q, k, v, True)
                    do = torch.randn_like(r[0])
                    tf = timeit(lambda: fwd_op(q, k, v, True))
                    tb = timeit(lambda: bwd_op(do, q, k, v, r[0], r[1], rest, True))  # noqa: B023
                else:
                    o, lse = ring_forward(q, k, v, c, rank)
                    do = torch.randn_like(o)
                    tf = timeit(lambda: ring_forward(q, k, v, c, rank))  # noqa: B023
                    tb = timeit(lambda: ring_backward(do, q, k, v, o, lse, c, rank, rest))  # noqa: B023
                emit(what="ring", heads=h, c=c, rank=rank, fwd_ms=tf * 1e3, bwd_ms=tb * 1e3,
                     per_unit_ms=(tf + tb) * 1e3 / c)
                torch.cuda.empty_cache()

    emit(what="env", torch=torch.__version__, gpu=torch.cuda.get_device_name())
    with torch.no_grad():
        for step in (check, lambda: kernels(32), lambda: rings(32, (1, 2, 4, 8)), lambda: rings(16, (1, 2, 8))):
            try:
                step()
            except Exception as e:  # keep what came before
                emit(what="error", err=repr(e)[:400])
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
