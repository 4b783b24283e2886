"""Goodput: throughput times the share of wall-clock time a job trains usefully, when GPUs fail.

A synchronous job stops when any of its GPUs fails, then restarts from its last checkpoint.
With n GPUs whose failures are independent, each with mean time between failures M_gpu, the
job fails on average every M = M_gpu / n seconds. Per row (all (N,) columns):

    delta  checkpoint write time: the bytes the busiest writer holds / its write bandwidth
    R      time lost per failure besides rework: restart + loading the checkpoint
    tau    checkpoint interval, Daly's optimum (Daly 2006, Eq. 37, first two correction terms):
               tau = sqrt(2 delta M) [1 + sqrt(delta / 2M) / 3 + (delta / 2M) / 9] - delta
           for delta < 2M, else M; Young's sqrt(2 delta M) (Young 1974) is its leading term.
    share of time training usefully (first order in 1/M):
        goodput_ratio = tau / (tau + delta) * max(0, 1 - (R + (tau + delta) / 2) / M)
    i.e. checkpoint overhead delta / (tau + delta), and per failure R plus half an interval
    of work redone (the failure falls uniformly in it).
    goodput_tokens_per_s = tokens_per_s * goodput_ratio

Checkpoint bytes come from the plan itself: 16-bit weights plus fp32 master weights and Adam
moments (what the memory breakdown calls weights and optimizer state). Where the optimizer
is sharded (ZeRO >= 1: Megatron's distributed optimizer, DeepSpeed, FSDP) every GPU writes its
own shard and its 1/(dp cp) of the weights, all at once; without sharding one data-parallel
replica writes everything it holds while the others wait. So a ZeRO/FSDP plan checkpoints
dp x cp times faster per GPU. Loading after a restart reads the same shards.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from costmodel._errors import InputError

# Llama 3 405B pre-training (Dubey et al. 2024, "The Llama 3 Herd of Models", Sec. 3.3.4):
# 419 unexpected interruptions in a 54-day snapshot on 16,384 H100 GPUs, i.e. one per
# 16,384 x 54 x 24 / 419 = 50,700 GPU-hours (every cause counted against the GPUs).
LLAMA3_GPU_MTBF_H = 16384 * 54 * 24 / 419
# The same cluster's checkpoint storage (Sec. 3.3.1: Tectonic, 2 TB/s sustained, 7 TB/s peak
# throughput for 16,384 GPUs), per GPU: sustained for writes, peak for the burst of a reload.
LLAMA3_WRITE_BPS_PER_GPU = 2e12 / 16384
LLAMA3_READ_BPS_PER_GPU = 7e12 / 16384
# Restart after a failure (detect, drain, reschedule, re-initialise communicators), without
# reading the checkpoint. Production systems report "tens of minutes" (MegaScale, Jiang et al.
# NSDI 2024); 10 minutes is chosen with one published figure in view: with the Llama 3 failure
# rate and storage above, a 405B plan on 16,384 GPUs then trains usefully 92% of the time,
# where Dubey et al. (Sec. 3.3.4) report "higher than 90% effective training time" (20
# minutes would give 87%).
RESTART_S = 600.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class FailureModel:
    """How often GPUs fail and what a failure costs; defaults from the Llama 3 405B run."""

    gpu_mtbf_h: float = LLAMA3_GPU_MTBF_H  # mean time between failures of one GPU, hours
    restart_s: float = RESTART_S  # a failure's restart, checkpoint load excluded
    write_Bps_per_gpu: float = LLAMA3_WRITE_BPS_PER_GPU  # checkpoint write bandwidth per GPU
    read_Bps_per_gpu: float = LLAMA3_READ_BPS_PER_GPU  # checkpoint read bandwidth per GPU

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0) and not (
                    f.name == "restart_s" and v == 0):
                raise InputError(f"failure.{f.name}", "a positive number", v)


def daly_interval_s(delta, M):
    """Daly's optimal checkpoint interval (module docstring) for write time delta and job
    MTBF M, elementwise."""
    delta, M = np.broadcast_arrays(np.asarray(delta, dtype=np.float64), np.asarray(M, dtype=np.float64))
    x = delta / (2.0 * M)
    with np.errstate(invalid="ignore"):
        tau = np.sqrt(2.0 * delta * M) * (1.0 + np.sqrt(x) / 3.0 + x / 9.0) - delta
    return np.where(delta < 2.0 * M, tau, M)


def checkpoint_bytes_per_writer(weights_bytes, optimizer_bytes, zero_stage, data_replicas):
    """Bytes the busiest GPU writes for one checkpoint, from the plan's per-GPU memory parts:
    the whole of its weights and optimizer state without ZeRO (one replica writes), its own
    optimizer shard and 1/(dp cp) of the weights with ZeRO 1-2, its shards of both with
    ZeRO-3 (weights are sharded too)."""
    zero = np.asarray(zero_stage)
    spread = np.where((zero >= 1) & (zero < 3), data_replicas, 1)
    return weights_bytes / spread + optimizer_bytes


def goodput(tokens_per_s, num_gpus, ckpt_bytes, failure: FailureModel | None = None) -> dict[str, np.ndarray]:
    """Goodput and its parts (module docstring) for rows with throughput ``tokens_per_s``,
    ``num_gpus`` GPUs each and ``ckpt_bytes`` written by the busiest GPU per checkpoint.
    Rows with zero throughput (infeasible) get zero goodput."""
    f = failure or FailureModel()
    tokens_per_s = np.asarray(tokens_per_s, dtype=np.float64)
    M = f.gpu_mtbf_h * 3600.0 / np.asarray(num_gpus, dtype=np.float64)
    delta = np.asarray(ckpt_bytes, dtype=np.float64) / f.write_Bps_per_gpu
    restart = f.restart_s + np.asarray(ckpt_bytes, dtype=np.float64) / f.read_Bps_per_gpu
    tau = daly_interval_s(delta, M)
    overhead = delta / (tau + delta)
    rework = (tau + delta) / 2.0 / M
    lost = restart / M
    ratio = (1.0 - overhead) * np.maximum(0.0, 1.0 - rework - lost)
    ratio = np.where(tokens_per_s > 0, ratio, 0.0)
    return {
        "goodput_tokens_per_s": tokens_per_s * ratio,
        "goodput_ratio": ratio,
        "checkpoint_interval_s": tau,
        "checkpoint_write_s": delta,
        "checkpoint_overhead": overhead,
        "rework_fraction": rework,
        "restart_fraction": lost,
        "job_mtbf_s": M + np.zeros_like(tokens_per_s),
    }


def plan_goodput(metrics, table, failure: FailureModel | None = None) -> dict[str, np.ndarray]:
    """goodput() for evaluated rows: Metrics (tokens/s, per-GPU weight and optimizer bytes)
    and their StrategyTable (degrees and ZeRO stage)."""
    d, t, p, c = (np.asarray(table[k]) for k in ("dp", "tp", "pp", "cp"))
    ckpt = checkpoint_bytes_per_writer(metrics["mem_weights_bytes"], metrics["mem_optimizer_bytes"],
                                       table["zero_stage"], d * c)
    return goodput(metrics["tokens_per_s"], d * t * p * c, ckpt, failure)
