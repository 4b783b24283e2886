"""What torch.compile's partitioner saves of benchmarks/gpu_modern_layers.py's dense Llama block, counted on the CPU,
against the cost model's per-layer activation bytes under the fsdp2 profile (torchtitan with torch.compile).

    PYTHONPATH=. python3 benchmarks/cpu_compiled_layers.py [--rows llama3-8b-t1:256,llama3-70b-t8:256] (needs torch)

The fsdp2 profile prices a compiled torchtitan block with Korthikanti et al.'s count (10 h + 2 (q + o) + 4 hk + 6 f
bytes a token, the scores taken out under a fused kernel: costmodel._memory_terms.layer_activation_bytes), because
what the compiled block keeps is the partitioner's choice, not the model code's. This counts that choice: the block
is compiled whole (fullgraph, as torchtitan compiles each block) through AOTAutograd with the min-cut
rematerialisation partitioner Inductor uses, and the forward graph's outputs past the block's own output are what the
forward hands the backward; their bytes less the graph's inputs passed through (the block's input, the weights, the
RoPE table) are the count, per token. The kernels are the CPU's (SDPA's flash kernel for the CPU saves what the GPU's
does: Q, K, V, the output and the fp32 log-sum-exp), and the partitioner is the installed torch's: a check of the
model's stand-in, not a GPU's allocator. One GPU stands for one tensor-parallel rank without sequence parallelism
(gpu_modern_layers' shapes: norms and residuals on the whole hidden size), so at t > 1 the replicated terms are not
what a sequence-parallel run keeps. Per row: the partition's bytes a token, the model's (fsdp2; and fsdp2-eager, the
eager block's count), their ratio, and the saved tensors by producing op.
"""

from __future__ import annotations

import argparse
import sys
import time

DEFAULT_ROWS = "llama3-8b-t1:256,llama3-70b-t8:256,llama3-70b-t4:256,llama3-405b-t8:128"


def compiled_saved(torch, block, x) -> list[tuple[str, str, tuple, int]]:
    """(name, dtype, shape, bytes) of every tensor the compiled forward of ``block`` on ``x`` saves for the backward
    that is not one of the graph's inputs."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    from torch.nn.attention import SDPBackend, sdpa_kernel

    got: list = []

    def fw_compiler(gm, _inputs):
        outs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        for o in outs[1:]:  # the block's output first, then what the backward needs
            if o is None or o.op == "placeholder" or "val" not in o.meta:
                continue
            v = o.meta["val"]
            got.append((o.name, str(v.dtype).removeprefix("torch."), tuple(v.shape), v.numel() * v.element_size()))
        return gm.forward

    backend = aot_autograd(fw_compiler=fw_compiler, bw_compiler=lambda gm, _inputs: gm.forward,
                           partition_fn=min_cut_rematerialization_partition)
    torch._dynamo.reset()
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        torch.compile(block, backend=backend, fullgraph=True)(x)
    return got


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default=DEFAULT_ROWS, help="LABEL:SEQ,... (dense LABELs of gpu_modern_layers)")
    args = ap.parse_args(argv)
    import gpu_modern_layers as g
    import torch
    from compare_modern_layers import model_kept_bytes
    from cpu_saved_layers import cpu_block

    shapes = {s[0]: s for s in g.SHAPES if s[8] == 1}  # dense blocks (experts column 1)
    for spec in args.rows.split(","):
        label, s = spec.split(":")
        if label not in shapes:
            print(f"cpu_compiled_layers: --rows: expected a dense label of {', '.join(shapes)}, got {label!r}",
                  file=sys.stderr)
            return 2
        c = g.Case(*shapes[label], 1, int(s), "none", "flash", "bf16")
        t0 = time.monotonic()
        block, x, row = cpu_block(torch, g, c)
        saved = compiled_saved(torch, block, x)
        T = c.b * c.s
        total = sum(n for *_, n in saved)
        model, eager = (model_kept_bytes(row, "cpu_compiled_layers", 0, profile=p) for p in ("fsdp2", "fsdp2-eager"))
        print(f"{label:16s} s{c.s}: compiled {total / T:8.0f} B/token  fsdp2 {model / T:8.0f} (x{model / total:.3f})"
              f"  fsdp2-eager {eager / T:8.0f}  ({time.monotonic() - t0:.0f} s)", flush=True)
        for name, dtype, shape, n in saved:
            print(f"    {name:14s} {dtype:9s} {str(shape):24s} {n / T:8.0f} B/token")
        del block, x
    return 0


if __name__ == "__main__":
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    sys.exit(main())
