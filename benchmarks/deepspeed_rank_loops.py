"""Host time of DeepSpeed ZeRO-3's per-rank Python loops, which grow with the data-parallel ranks (analysis only).

    python3 benchmarks/deepspeed_rank_loops.py        # needs torch (CPU is enough: the loops are host work)

DeepSpeed 38327e0 runs two loops over every rank of the data-parallel group for each parameter it moves:
- `zero/partition_parameters.py` AllGatherCoalescedHandle.wait (line 677): after a module's coalesced all-gather, for
  each parameter, one `narrow` of every rank's partition of the flat buffer, then a `torch.cat` of those views into
  the parameter (and, on a GPU, one `record_stream` a view, not measured here);
- `runtime/comm/coalesced_collectives.py` reduce_scatter_coalesced (line 158, called from `zero/stage3.py` line 1391
  per gradient bucket): each gradient sliced into one view a rank, the views interleaved rank by rank (a padding
  tensor where a gradient does not divide), one `torch.cat` of all of them before the reduce-scatter.
This script runs loops of its own written in that order on CPU tensors whose per-rank pieces are small (the loops'
cost, not the copy's), and prints the host time a (parameter, rank) of each, then what they add up to a micro-batch
for AMSP's LLaMA rows on 1,024 A800s (Megatron-DeepSpeed layers: 4 gathered weights a layer, forward and again
backward, plus the embedding and the head; every parameter's gradient reduce-scattered, the norms too).

Measured on the 2-core AMD EPYC development machine, torch 2.13.0 (CPU build), idle: 1.9-2.0 us a (parameter, rank)
for the gather's loop and 1.4-2.2 us for the reduce-scatter's at 64-1,024 ranks (up to 3.3 us with the other core
busy), so 0.96 s of host work a micro-batch for LLaMA-7B at 1,024 ranks (1.19 s for 13B). The GPU's forward and backward of that micro-batch take
about 1.1 s (7B) and 1.9 s (13B) as the model prices them, and the host runs these loops beside the GPU's queue,
so at most a part of them can show: AMSP's published ZeRO-3 steps (15.1 s and 28.6 s, against 2.0 s and 3.1 s
predicted) are not explained by them. Not priced.
"""

from __future__ import annotations

import math
import time

import torch

torch.set_grad_enabled(False)


def gather_wait(shard_numels: list[int], world: int, partitions: list[torch.Tensor]) -> list[torch.Tensor]:
    """The gathered parameters: for each, a view of its part in every rank's partition, concatenated."""
    out, offset = [], 0
    for numel in shard_numels:
        parts = []
        for rank in range(world):
            if rank * numel < numel * world:
                parts.append(partitions[rank].narrow(0, offset, numel))
        out.append(torch.cat(parts))
        offset += numel
    return out


def reduce_scatter_prep(grads: list[torch.Tensor], world: int) -> tuple[torch.Tensor, ...]:
    """The reduce-scatter's input: each gradient's per-rank views, interleaved rank by rank (padded), concatenated."""
    views = []
    for g in grads:
        flat, chunk = g.view(-1), math.ceil(g.numel() / world)
        views.append([flat[r * chunk:r * chunk + chunk] for r in range(world)])
    padded = [math.ceil(g.numel() / world) for g in grads]
    pieces = []
    for r in range(world):
        for i in range(len(grads)):
            piece = views[i][r]
            pieces.append(piece)
            if padded[i] > piece.numel():
                pieces.append(torch.empty(padded[i] - piece.numel(), dtype=piece.dtype))
    return torch.chunk(torch.cat(pieces), world)


def best_s(f, repeats: int = 5) -> float:
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


def per_param_rank_us(world: int, params: int = 16, shard: int = 16) -> tuple[float, float]:
    """(gather, reduce-scatter) microseconds a (parameter, rank) at ``world`` ranks."""
    partitions = [torch.zeros(params * shard, dtype=torch.bfloat16) for _ in range(world)]
    grads = [torch.zeros(shard * world, dtype=torch.bfloat16) for _ in range(params)]
    g = best_s(lambda: gather_wait([shard] * params, world, partitions))
    r = best_s(lambda: reduce_scatter_prep(grads, world))
    return 1e6 * g / (params * world), 1e6 * r / (params * world)


def main() -> None:
    print("| ranks | gather: us a (parameter, rank) | reduce-scatter: us a (parameter, rank) |")
    print("| ---: | ---: | ---: |")
    costs = {}
    for world in (64, 256, 1024):
        costs[world] = per_param_rank_us(world)
        print(f"| {world} | {costs[world][0]:.2f} | {costs[world][1]:.2f} |")
    g, r = costs[1024]
    for name, layers in (("LLaMA-7B", 32), ("LLaMA-13B", 40)):
        gathered = 4 * layers + 2  # QKV, dense, h_to_4h, 4h_to_h a layer; the embedding and the head
        reduced = 6 * layers + 3  # those and the two norms a layer, the final norm
        host = 1024 * (2 * gathered * g + reduced * r) / 1e6
        print(f"{name} at 1,024 ranks: {host:.2f} s of the loops' host work a micro-batch")


if __name__ == "__main__":
    main()
