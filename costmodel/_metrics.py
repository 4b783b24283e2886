"""The evaluator's output: one numpy column per metric (METRIC_COLUMNS), and how a block's priced parts
become them.

From the step time and its parts (compute, recompute, tp / cp / ep / pp / dp communication, the
pipeline bubble, the optimizer step) and the worst stage's memory by part: throughput (tokens and
samples per second), MFU and HFU over the peak FLOP/s of every GPU a row uses (model FLOPs as in
Narayanan et al. 2021 Appendix; HFU adds the recomputed FLOPs), and the bubble's share of the
pipeline. An infeasible row keeps its parts, with infinite step time and zero throughput.
mem_device_bytes is the memory of one GPU of the pool holding the worst stage (the one closest to its
GPU's memory, whose total is mem_total_bytes): what mem_total_bytes is held to, on any cluster.
"""

from __future__ import annotations

import numpy as np

METRIC_COLUMNS = (
    "step_time_s", "compute_s", "recompute_s", "tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s",
    "dp_comm_s", "bubble_s", "optimizer_s", "tokens_per_s", "samples_per_s", "mfu", "hfu",
    "bubble_ratio", "mem_weights_bytes", "mem_grads_bytes", "mem_optimizer_bytes",
    "mem_activations_bytes", "mem_buffers_bytes", "mem_total_bytes", "mem_device_bytes", "microbatches", "feasible",
    "reason",
)


class Metrics(dict):
    """Metric columns by name (see METRIC_COLUMNS); also readable as attributes."""

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self[name]
        except KeyError as exc:
            raise AttributeError(name) from exc

    def take(self, idx) -> "Metrics":
        return Metrics({k: v[idx] for k, v in self.items()})


def assemble_metrics(*, feasible, reason, step, pipe, fill, m, batch, seq_len, flops_model, flops_hw, peak_total,
                     compute, recompute, tp_comm, cp_comm, pp_comm, dp_comm, optimizer, mem_weights, mem_grads,
                     mem_optimizer, mem_activations, mem_buffers, mem_total, mem_device, ep_comm=None,
                     extra=None) -> Metrics:
    """The Metrics of a block of rows from its parts, (N,) each: throughput, MFU and HFU over
    ``peak_total`` (the FLOP/s of every GPU the row uses), the bubble's share of the pipeline,
    infinite step time and zero throughput where infeasible. One definition for the homogeneous
    and the heterogeneous evaluator; ``extra`` columns (stage views, flags) come first; ``ep_comm``
    (the exposed expert all-to-alls) is zero where not given (a dense model)."""
    ep_comm = np.zeros_like(compute) if ep_comm is None else ep_comm
    with np.errstate(divide="ignore", invalid="ignore"):
        samples = np.where(feasible, batch / step, 0.0)
        flops_s = step * peak_total  # (once for both)
        mfu = np.where(feasible, flops_model / flops_s, 0.0)
        hfu = np.where(feasible, flops_hw / flops_s, 0.0)
        bubble_ratio = np.where(pipe > 0, fill / pipe, 0.0)
    times = dict(zip(("compute_s", "recompute_s", "tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s", "dp_comm_s",
                      "bubble_s", "optimizer_s"),
                     (compute, recompute, tp_comm, cp_comm, ep_comm, pp_comm, dp_comm, fill, optimizer), strict=True))
    memory = dict(zip(("mem_weights_bytes", "mem_grads_bytes", "mem_optimizer_bytes", "mem_activations_bytes",
                       "mem_buffers_bytes", "mem_total_bytes", "mem_device_bytes"),
                      (mem_weights, mem_grads, mem_optimizer, mem_activations, mem_buffers, mem_total,
                       np.broadcast_to(mem_device, np.shape(mem_total)).astype(np.float64)), strict=True))
    return Metrics(**(extra or {}), step_time_s=np.where(feasible, step, np.inf), **times,
                   tokens_per_s=samples * seq_len, samples_per_s=samples, mfu=mfu, hfu=hfu, bubble_ratio=bubble_ratio,
                   **memory, microbatches=m.astype(np.int64), feasible=feasible, reason=reason)
