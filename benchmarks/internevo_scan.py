"""InternEvo's whole 7B scaling scan (8 to 1,024 A100s) against the model, and the broadcasts its ZeRO-1 code issues.

    PYTHONPATH=. python3 benchmarks/internevo_scan.py

InternLM/InternEvo doc/en/train_performance.md (published at fa7337b, unchanged in its throughput table at c628a8c)
gives the tokens per GPU per second of the 7B model at 8, 16, ..., 1,024 GPUs under four layouts; the validation set
holds four of those cells (tests/data/validation/published_runs.csv, internevo-7b-*). This prices the other cells of
three layouts the same way (`plansweep validate`'s predict), each from the validation row of its layout at 1,024 GPUs
with the GPU count, the data-parallel ranks and the global batch changed (the doc keeps the tokens per GPU and
iteration constant: global batch = dp x micro_num 4 x micro_bsz), nothing added to the validation set. The
(tp=2, zero1=4) layout is left out (a ZeRO-1 group smaller than dp is not a strategy; the zero1=8 rows stand for it).

It then reprices the rows with ZeRO-1 over all ranks (the internevo profile) with the weights' broadcasts as the code
issues them. fa7337b internlm/solver/optimizer/hybrid_zero_optim.py _partition_param_list hands whole parameter
tensors to the ZeRO-1 ranks (largest first, each to the rank holding the fewest elements), and broadcast_params issues
one broadcast per rank that holds any (param_group_no_params_ranks are skipped). InternLM 7B has 291 tensors
(modeling_internlm.py, multi_head_attention.py, linear.py at fa7337b: per layer Wqkv and its bias, out_proj and its
bias, two RMSNorm weights, w1, w2, w3 (FeedForward bias=False); the embedding, the final norm, the head), so past 291
ranks the code broadcasts 291 shards of uneven size (2 of 422.6M elements, 160 of 16.8M-50.3M, 129 of 4,096-12,288)
where the model prices one even shard per rank. Each broadcast is priced as the model prices one
(costmodel._collectives.collective_s "broadcast": NCCL's fastest protocol for its message, the ring's fill counted);
the difference from the model's own in-step broadcasts (the same pricing over one even shard per rank) is added to the
row's step (the broadcasts are exposed whole: costmodel._data_parallel.last_exchange_parts, weight_gather_in_step).

Last, what the published pairs imply for the broadcasts at 256 GPUs and up: the (tp=1, zero1=-1) step less the
(tp=1, zero1=8) step at the same GPU count (both all-reduce the same gradients over all ranks; the second broadcasts
within a node instead, added back at the model's price), less the weights' bytes at the ring's bus bandwidth, over
the code's broadcasts and their ring hops: the fill each broadcast pays a hop.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from costmodel._collectives import collective_link, collective_s
from costmodel._nccl import ll_one_node_Bps
from costmodel._validate import MeasuredRun, predict, read_runs

CSV = Path(__file__).resolve().parents[1] / "tests/data/validation/published_runs.csv"
GPUS = (8, 16, 32, 64, 128, 256, 512, 1024)
# doc/en/train_performance.md, Throughput Measurement table (TGS), by layout; the validation row each is priced from
SCAN = {
    "internevo-7b-1024gpu-tp1-zero1all": ("tp=1, zero1=-1", (4062, 3842, 3752, 3690, 3571, 3209, 2861, 2271)),
    "internevo-7b-1024gpu-tp1-zero1node": ("tp=1, zero1=8", (4078, 3939, 3919, 3944, 3928, 3920, 3835, 3625)),
    "internevo-7b-1024gpu-tp2-zero1all": ("tp=2, zero1=-1", (3822, 3595, 3475, 3438, 3308, 3094, 2992, 2785)),
}
MICRO_NUM = 4  # configs/7B_sft.py data.micro_num (the doc's hyperparameter table)


def scan_run(run: MeasuredRun, gpus: int, tgs: float) -> MeasuredRun:
    """``run`` (a 1,024-GPU row) at ``gpus`` GPUs: the nodes, dp and the global batch scaled, the doc's TGS."""
    f = dict(run.fixed)
    f["dp"] = gpus // f["tp"]
    f["global_batch"] = f["dp"] * MICRO_NUM * f["micro_batch"]
    cluster = dataclasses.replace(run.cluster, nodes=gpus // run.cluster.gpus_per_node,
                                  name=f"{run.cluster.gpu.name}x{gpus}")
    return dataclasses.replace(run, name=f"{run.name.replace('1024gpu', f'{gpus}gpu')}", cluster=cluster, fixed=f,
                               measured=float(tgs))


def internlm_7b_tensors(model, tp: int) -> list[int]:
    """Elements of each parameter tensor InternLM 7B holds on a GPU at tensor-parallel degree ``tp`` (fa7337b: the
    embedding split on the hidden dim, the head on the vocabulary, Wqkv / w1 / w2 column-parallel, out_proj / w3
    row-parallel, out_proj's bias and the norms whole)."""
    V, h, f = model.vocab, model.hidden, model.ffn_hidden
    per_layer = [3 * h * h // tp, 3 * h // tp, h * h // tp, h, h, h, f * h // tp, f * h // tp, f * h // tp]
    return [V * h // tp, V * h // tp, h] + per_layer * model.layers


def zero1_shards(tensors: list[int], ranks: int) -> list[int]:
    """Elements each ZeRO-1 rank holds, for the ranks holding any: _partition_param_list's greedy (largest tensor
    first, to the first rank with the fewest elements)."""
    numel = [0] * ranks
    for p in sorted(tensors, reverse=True):
        numel[numel.index(min(numel))] += p
    return [x for x in numel if x > 0]


def broadcasts_s(run: MeasuredRun, shards: list[float]) -> float:
    """Seconds of one waited broadcast of each shard (2-byte elements) over the run's ZeRO-1 group (dp ranks, tp
    apart), each priced as the model prices a broadcast."""
    c, f = run.cluster, run.fixed
    dp, tp = f["dp"], f["tp"]
    link = collective_link(tp, dp, c.gpus_per_node, c.scaleup_Bps, c.scaleout_Bps, c.scaleup_latency_s,
                           c.scaleout_latency_s, c.gpu.link_eff)
    link = link._replace(ll_node_Bps=np.broadcast_to(ll_one_node_Bps(c.gpu.name), np.shape(link.bw)))
    total = 0.0
    for s in shards:
        b, lat = collective_s("broadcast", 2.0 * s, dp, link)
        total += float(b * 2.0 * s + lat)
    return total


def implied_fill(runs: dict) -> None:
    """Per ring hop of each broadcast the code issues, what the (zero1=-1) - (zero1=8) pairs leave (module docstring)."""
    every, node = (runs[n] for n in list(SCAN)[:2])
    tensors = internlm_7b_tensors(every.model, 1)
    in_node = scan_run(every, every.cluster.gpus_per_node, 1.0)
    in_node_s = broadcasts_s(in_node, zero1_shards(tensors, in_node.fixed["dp"]))
    print(f"\nimplied broadcasts, tp=1 (the zero1=8 row's in-node broadcasts {in_node_s:.3f} s added back)")
    print(f"{'GPUs':>5s} {'implied s':>9s} {'bytes s':>7s} {'bcasts':>6s} {'hops':>5s} {'us a hop':>8s} "
          f"{'model us a hop':>14s}  (the model: its protocol's latency for one even shard)")
    for i, gpus in enumerate(GPUS):
        if gpus < 256:
            continue
        a = predict(scan_run(every, gpus, SCAN[every.name][1][i]))["measured_iteration_time_s"]
        b = predict(scan_run(node, gpus, SCAN[node.name][1][i]))["measured_iteration_time_s"]
        run = scan_run(every, gpus, 1.0)
        n = run.fixed["dp"]
        k = len(zero1_shards(tensors, n))
        c = run.cluster
        link = collective_link(1, n, c.gpus_per_node, c.scaleup_Bps, c.scaleout_Bps, c.scaleup_latency_s,
                               c.scaleout_latency_s, c.gpu.link_eff)
        bytes_s = 2.0 * sum(tensors) / float(link.bw)  # Simple's ring broadcast: every byte once at the bus rate
        implied = a - b + in_node_s
        _, lat = collective_s("broadcast", 2.0 * sum(tensors) / n, n, link._replace(
            ll_node_Bps=np.broadcast_to(ll_one_node_Bps(c.gpu.name), np.shape(link.bw))))
        print(f"{gpus:5d} {implied:9.3f} {bytes_s:7.3f} {k:6d} {n - 1:5d} {1e6 * (implied - bytes_s) / k / (n - 1):8.1f} "
              f"{1e6 * float(lat) / (n - 1):14.1f}")


def main() -> None:
    runs = {r.name: r for r in read_runs(CSV)}
    print(f"{'layout':15s} {'GPUs':>5s} {'TGS':>5s} {'meas s':>7s} {'pred s':>7s} {'err%':>6s} {'bcasts':>6s} "
          f"{'code':>5s} {'as code s':>9s} {'err%':>6s}")
    for name, (layout, tgs) in SCAN.items():
        base = runs[name]
        for gpus, v in zip(GPUS, tgs, strict=True):
            run = scan_run(base, gpus, v)
            res = predict(run)
            meas, pred = res["measured_iteration_time_s"], res["predicted_iteration_time_s"]
            line = f"{layout:15s} {gpus:5d} {v:5d} {meas:7.3f} {pred:7.3f} {res['error_pct']:+6.1f}"
            if run.framework == "internevo":
                dp = run.fixed["dp"]
                tensors = internlm_7b_tensors(run.model, run.fixed["tp"])
                shards = zero1_shards(tensors, dp)
                even = broadcasts_s(run, [sum(tensors) / dp] * dp)
                as_code = pred - even + broadcasts_s(run, shards)
                line += f" {dp:6d} {len(shards):5d} {as_code:9.3f} {100 * (as_code - meas) / meas:+6.1f}"
            print(line)
    implied_fill(runs)


if __name__ == "__main__":
    main()
