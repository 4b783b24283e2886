"""What autograd saves of benchmarks/gpu_modern_layers.py's blocks, counted on the CPU (no GPU needed), against the
cost model's per-layer activation bytes: a check of the blocks and of the model's count before a GPU measures them.

    PYTHONPATH=. python3 benchmarks/cpu_saved_layers.py [--rows llama3-8b-t1:1:2048,mixtral-8x7b-ep1:1:1024]

No recompute, bf16, SDPA's flash kernel for the CPU (which saves what the GPU's does: Q, K, V, the output and the
fp32 log-sum-exp, no scores). Each tensor the forward hands to autograd for the backward is seen by a saved-tensor
hook; the bytes of the distinct storages among them that did not exist before the forward (not the input, the
weights or the RoPE table) are the count: what memory_allocated would show on a GPU, less the allocator's rounding
and anything a kernel keeps outside autograd. The model's figure is compare_modern_layers.model_kept_bytes (profile
fsdp2-eager). Per row it prints both, their ratio, and the saved bytes per token by dtype and last dimension.
Minutes on two cores (a full-size layer's forward); the shapes are gpu_modern_layers.SHAPES.
"""

from __future__ import annotations

import argparse
import sys
import time

DEFAULT_ROWS = ("llama3-8b-t1:1:2048,llama3-70b-t8:1:2048,llama3-405b-t8:1:1024,mixtral-8x7b-ep1:1:1024,"
                "mixtral-8x7b-ep2:1:1024")


def saved_storages(torch, block, x) -> dict:
    """{storage pointer: (bytes, dtype, shape)} of what the forward of ``block`` on ``x`` saves for the backward,
    leaving out storages that existed before (the input, the weights, the RoPE table)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    before = {t.untyped_storage().data_ptr() for t in (*block.parameters(), x, block.table)}
    seen = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in before:
            seen[st.data_ptr()] = (st.nbytes(), t.dtype, tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        y = block(x)
    del y
    return seen


def cpu_block(torch, g, case):
    """(block, x): gpu_modern_layers' block for ``case`` on the CPU with its RoPE table, and a bf16 input that
    needs its gradient; with the row the cost model reads for it (compare_modern_layers.model_kept_bytes)."""
    cpu = torch.device("cpu")
    block = g.build_blocks_for(torch, case, cpu, True)
    block.table = g.block_table(torch, case, cpu)
    x = torch.randn(case.b, case.s, case.h, dtype=torch.bfloat16, requires_grad=True)
    row = {"model": case.model, "seq": case.s, "micro_batch": case.b, "tp": case.t, "ep": case.ep,
           "recompute": "none", "precision": "bf16"}
    return block, x, row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default=DEFAULT_ROWS, help="LABEL:MICRO_BATCH:SEQ,... (LABEL of gpu_modern_layers)")
    args = ap.parse_args(argv)
    import gpu_modern_layers as g
    import torch
    from compare_modern_layers import model_kept_bytes

    shapes = {s[0]: s for s in g.SHAPES}
    for spec in args.rows.split(","):
        label, b, s = spec.split(":")
        if label not in shapes:
            print(f"cpu_saved_layers: --rows: expected a label of {', '.join(shapes)}, got {label!r}",
                  file=sys.stderr)
            return 2
        c = g.Case(*shapes[label], int(b), int(s), "none", "flash", "bf16")
        t0 = time.monotonic()
        block, x, row = cpu_block(torch, g, c)
        seen = saved_storages(torch, block, x)
        saved = sum(n for n, _, _ in seen.values())
        model = model_kept_bytes(row, "cpu_saved_layers", 0)
        T = c.b * c.s
        print(f"{label:18s} b{c.b} s{c.s}: saved {saved / 2**20:9.1f} MiB ({saved / T:8.0f} B/token)  model "
              f"{model / 2**20:9.1f} MiB ({model / T:8.0f} B/token)  model/saved {model / saved:.3f}  "
              f"({time.monotonic() - t0:.0f} s)", flush=True)
        parts: dict = {}
        for n, dtype, shape in seen.values():
            key = (str(dtype).removeprefix("torch."), shape[-1] if shape else 1)
            parts[key] = parts.get(key, 0) + n
        for (dtype, last), n in sorted(parts.items(), key=lambda kv: -kv[1]):
            print(f"    {dtype:9s} last dim {last:6d}: {n / T:8.0f} B/token")
        del block, x
    return 0


if __name__ == "__main__":
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    sys.exit(main())
