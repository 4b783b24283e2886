"""Goodput: throughput times the share of wall-clock time a job trains usefully, when GPUs fail.

A synchronous job stops when any of its nodes fails, then restarts from its last checkpoint.
Schedulers give a job whole nodes, so a plan on n GPUs holds ceil(n / G) nodes of G GPUs; with
independent failures, each GPU failing on average every M_gpu seconds (every cause counted
against the GPUs, as the published rates are), the job fails on average every
M = M_gpu / (G ceil(n / G)) seconds. Per row (all (N,) columns):

    delta  checkpoint write time (checkpoint_io_s): the slower of the busiest node's storage NIC
           and the filesystem's aggregate bandwidth
    R      time lost per failure besides rework: restart + loading the checkpoint + waiting for a
           node when the failure needs one replaced and no spare is free (spare_wait_s)
    tau    checkpoint interval, Daly's optimum (Daly 2006, Eq. 37, first two correction terms):
               tau = sqrt(2 delta M) [1 + sqrt(delta / 2M) / 3 + (delta / 2M) / 9] - delta
           for delta < 2M, else M; Young's sqrt(2 delta M) (Young 1974) is its leading term.
    share of time training usefully (first order in 1/M):
        goodput_ratio = tau / (tau + delta) * max(0, 1 - (R + (tau + delta) / 2) / M)
    i.e. checkpoint overhead delta / (tau + delta), and per failure R plus half an interval
    of work redone (the failure falls uniformly in it).
    goodput_tokens_per_s = tokens_per_s * goodput_ratio

Who writes (checkpoint_io_s). The checkpoint is the plan's own state: 16-bit weights plus fp32
master weights and Adam moments (the memory breakdown's weights and optimizer state, per GPU).
Sharded state (the optimizer with ZeRO >= 1, the weights too with ZeRO-3) is written by every GPU,
its own shard. Replicated state (weights with ZeRO 0-2, the optimizer with ZeRO-0) is written once
per model-parallel position: spread over the dp x cp replicas that hold it by
torch.distributed.checkpoint (its save planner keeps one copy of each replicated item and gives it
to one of the ranks holding it) and by Megatron-Core's fully parallel save
(--ckpt-fully-parallel-save, the default of its torch_dist format), or by data-parallel rank 0
alone in the legacy per-rank torch.save format (FailureModel.ckpt_spread = False). A node writes
its G GPUs' bytes through its storage NIC; all writers share the filesystem. Loading after a
restart, every GPU reads all of its state (replicas read the replicated parts alike).

Mixture-of-experts models (expert_state_per_gpu). The routed experts' state is split by expert
parallelism, not tensor parallelism: the ep x etp x pp ranks of one expert-model-parallel
group hold one copy, replicated (or ZeRO-sharded) over the edp = dp cp tp / (ep etp) expert-data-
parallel ranks, as Megatron-Core's expert groups cut them. A GPU's weights and optimizer bytes are
split into that expert part (the model's routed-expert parameters spread evenly over the stages)
and the rest, each written and counted over the ranks that hold it, so the checkpoint holds every
expert once at any ep and etp.

Hot spares (spare_wait_s). A share h of failures are hardware faults that take the node out: the
job restarts on a spare node when one is free, else waits a repair time T for a node to come
back. Nodes the plan leaves idle are the spares (S = cluster nodes - nodes used). Failed nodes
under repair form an M/G/inf queue (arrivals h / M, service T): their number is Poisson with mean
lam = h T / M, so a failure finds no free spare with probability P(Poisson(lam) >= S) (1 when
S = 0), and costs on average h P(Poisson(lam) >= S) T of waiting (T is an upper bound on the wait
when S >= 1: the first of the S repairs under way ends sooner).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from costmodel._dtypes import OPTIM_BYTES, WEIGHT_BYTES
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
# minutes would give 87%; that calibration is goodput() alone: a job whose cluster has spare
# nodes outside it, as Meta's had). The restart includes swapping in a spare node when a free one
# exists: automated detect-and-replace is reported at under 5 minutes (Crusoe, "AutoClusters", 2025).
RESTART_S = 600.0
# A node's storage bandwidth: NVIDIA's HGX H100/H200 AI Factory enterprise reference architecture
# ("Network Logical Architecture") connects each node's converged north/south network, storage
# included, with two 200 GbE ports: 2 x 200 Gb/s = 50 GB/s.
NODE_STORAGE_BPS = 2 * 200e9 / 8
# Share of failures that take a node out (the job can restart only on another node): Dubey et
# al. 2024, Sec. 3.3.4, attribute approximately 78% of the unexpected interruptions to confirmed
# hardware issues (GPU or host components) or suspected hardware-related ones.
HARDWARE_FRACTION = 0.78
# Repair time of a failed node (drain, diagnose, fix or swap, back in service), hours: 2.2 h is
# the GPU-failure recovery time behind the node-availability projection of NCSA Delta's study (Cui
# et al. 2025, "Characterizing GPU Resilience and Impact on AI/HPC Systems", arXiv 2503.11901), as
# a secondary summary quotes it (the figure was not checked against the paper's own text); the
# shortest figure found: a vendor's replacement without on-site spares takes days (an RMA). A short
# repair time is the conservative choice here: it makes idle spare nodes worth the least
# (BENCHMARKS.md, "Goodput and re-planning", gives the repair times at which plans change).
REPAIR_H = 2.2


# The failure model's ranges: wide past any cluster, narrow enough that goodput's arithmetic stays finite (an MTBF of
# 1e308 h made the job's failure rate underflow and the checkpoint interval inf / inf). restart_s and repair_h may be
# 0 (an instant restart, a node back at once); the bandwidths in B/s (1 kB/s to 1 PB/s).
FAILURE_BOUNDS = {"gpu_mtbf_h": (1e-3, 1e9), "restart_s": (0.0, 1e7), "write_Bps_per_gpu": (1e3, 1e15),
                  "read_Bps_per_gpu": (1e3, 1e15), "node_storage_Bps": (1e3, 1e15), "hardware_fraction": (0.0, 1.0),
                  "repair_h": (0.0, 1e6)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class FailureModel:
    """How often GPUs fail and what a failure costs; defaults from the Llama 3 405B run (module
    docstring and constants above)."""

    gpu_mtbf_h: float = LLAMA3_GPU_MTBF_H  # mean time between failures of one GPU, hours
    restart_s: float = RESTART_S  # a failure's restart, checkpoint load excluded
    # the filesystem's aggregate checkpoint bandwidth per GPU of the cluster (the storage is
    # bought with the cluster: a plan's share is this x the cluster's GPUs, used or not)
    write_Bps_per_gpu: float = LLAMA3_WRITE_BPS_PER_GPU
    read_Bps_per_gpu: float = LLAMA3_READ_BPS_PER_GPU
    node_storage_Bps: float = NODE_STORAGE_BPS  # one node's storage NIC, each way
    hardware_fraction: float = HARDWARE_FRACTION  # failures that need the node replaced
    repair_h: float = REPAIR_H  # a failed node's repair time, hours (waited for without a spare)
    ckpt_spread: bool = True  # replicated state written spread over replicas (DCP), else by dp rank 0

    def __post_init__(self) -> None:
        if not isinstance(self.ckpt_spread, bool):
            raise InputError("failure.ckpt_spread", "true or false", self.ckpt_spread)
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "ckpt_spread":
                continue
            lo, hi = FAILURE_BOUNDS[f.name]
            number = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            if f.name == "hardware_fraction":
                if not (number and 0 <= v <= 1):
                    raise InputError("failure.hardware_fraction", "a share between 0 and 1", v)
            elif not (number and lo <= v <= hi):
                raise InputError(f"failure.{f.name}", f"a number in [{lo:g}, {hi:g}]" if lo else
                                 f"a number >= 0 and at most {hi:g}", v)


def daly_interval_s(delta, M):
    """Daly's optimal checkpoint interval (module docstring) for write time delta and job
    MTBF M, elementwise."""
    delta, M = np.broadcast_arrays(np.asarray(delta, dtype=np.float64), np.asarray(M, dtype=np.float64))
    x = delta / (2.0 * M)
    with np.errstate(invalid="ignore"):
        tau = np.sqrt(2.0 * delta * M) * (1.0 + np.sqrt(x) / 3.0 + x / 9.0) - delta
    return np.where(delta < 2.0 * M, tau, M)


def poisson_at_least(lam, k):
    """P(Poisson(lam) >= k), elementwise for k >= 0 integers: 1 - e^-lam sum_{j<k} lam^j / j!."""
    lam, k = np.broadcast_arrays(np.asarray(lam, dtype=np.float64), np.asarray(k, dtype=np.int64))
    term = np.exp(-lam)  # P(N = 0)
    below = np.zeros_like(lam)  # P(N < j) as j grows
    for j in range(int(k.max(initial=0))):
        below = below + np.where(j < k, term, 0.0)
        term = term * lam / (j + 1)
    return np.clip(1.0 - below, 0.0, 1.0)


def spare_wait_s(job_mtbf_s, spare_nodes, failure: FailureModel | None = None):
    """(N,) mean wait per failure for a replacement node: h P(Poisson(h T / M) >= S) T (module
    docstring), for job MTBF M and S idle nodes."""
    f = failure or FailureModel()
    T = f.repair_h * 3600.0
    lam = f.hardware_fraction * T / np.asarray(job_mtbf_s, dtype=np.float64)
    return f.hardware_fraction * poisson_at_least(lam, np.maximum(np.asarray(spare_nodes), 0)) * T


def checkpoint_bytes_per_writer(weights_bytes, optimizer_bytes, zero_stage, data_replicas, spread=True):
    """Bytes the busiest GPU writes for one checkpoint, from the plan's per-GPU memory parts
    (module docstring): its shards (optimizer with ZeRO >= 1, weights with ZeRO-3) plus the
    replicated parts, 1/(dp cp) of them when spread over the replicas, all of them (dp rank 0)
    otherwise."""
    zero = np.asarray(zero_stage)
    sharded = np.where(zero >= 1, optimizer_bytes, 0.0) + np.where(zero >= 3, weights_bytes, 0.0)
    replicated = np.where(zero < 3, weights_bytes, 0.0) + np.where(zero == 0, optimizer_bytes, 0.0)
    return sharded + replicated / (np.asarray(data_replicas) if spread else 1)


def expert_state_per_gpu(model, table, optim_bytes: float = OPTIM_BYTES
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """The routed experts' part of a GPU's state (module docstring), None for a dense model:
    (weights bytes, optimizer bytes, ep x etp (the ranks of one stage sharing one copy), edp (its
    replicas)), (N,) each. ``table``: a StrategyTable or a mapping of its columns (ep and etp 1
    where absent); ``optim_bytes``: the optimizer's bytes a parameter (Framework.optim_state_bytes)."""
    if model is None or not getattr(model, "is_moe", False):
        return None
    d, t, p, c = (np.asarray(table[k], dtype=np.int64) for k in ("dp", "tp", "pp", "cp"))
    ones = np.ones_like(d)
    ep, etp = (np.asarray(table[k], dtype=np.int64) if k in _columns(table) else ones for k in ("ep", "etp"))
    zero = np.asarray(table["zero_stage"])
    holders = ep * etp
    edp = np.maximum(d * c * t // holders, 1)
    params = model.moe_layers * model.moe_layer_expert_params() / (p * holders)  # per GPU, stages alike
    w = WEIGHT_BYTES * params / np.where(zero >= 3, edp, 1)
    o = optim_bytes * params / np.where(zero >= 1, edp, 1)
    return w, o, holders, edp


def _columns(table) -> set:
    return set(getattr(table, "columns", None) or table.keys())


def checkpoint_io_s(weights_bytes, optimizer_bytes, zero_stage, degrees, gpus_per_node: int, cluster_gpus: int,
                    failure: FailureModel | None = None, experts=None) -> dict[str, np.ndarray]:
    """(N,) checkpoint write and load seconds (module docstring) from per-GPU weight and optimizer
    bytes, ZeRO stage and degrees = (dp, tp, pp, cp): each the slower of the busiest node's storage
    NIC and the filesystem's aggregate bandwidth (its per-GPU figure x ``cluster_gpus``).
    ``experts``: expert_state_per_gpu of an MoE model's rows (that part written and counted over
    the expert groups), None for a dense model."""
    f = failure or FailureModel()
    d, t, p, c = (np.asarray(x) for x in degrees)
    zero = np.asarray(zero_stage)
    w, o = np.asarray(weights_bytes, dtype=np.float64), np.asarray(optimizer_bytes, dtype=np.float64)
    used = d * t * p * c
    per_node = np.minimum(gpus_per_node, used)  # writers on the busiest node
    we, oe, holders, edp = experts if experts is not None else (0.0, 0.0, t, 1)
    wd, od = np.maximum(w - we, 0.0), np.maximum(o - oe, 0.0)  # the dense part: sharded by tp
    writer = (checkpoint_bytes_per_writer(wd, od, zero, d * c, f.ckpt_spread)
              + checkpoint_bytes_per_writer(we, oe, zero, edp, f.ckpt_spread))

    def once(wx, ox, sharers, replicas):  # every byte of one part once: its shards of every replica
        sharded = np.where(zero >= 1, ox, 0.0) + np.where(zero >= 3, wx, 0.0)
        replicated = np.where(zero < 3, wx, 0.0) + np.where(zero == 0, ox, 0.0)
        return sharers * p * (sharded * replicas + replicated)

    unique = once(wd, od, t, d * c) + once(we, oe, holders, edp)
    write_s = np.maximum(per_node * writer / f.node_storage_Bps, unique / (f.write_Bps_per_gpu * cluster_gpus))
    read_s = np.maximum(per_node * (w + o) / f.node_storage_Bps, used * (w + o) / (f.read_Bps_per_gpu * cluster_gpus))
    return {"checkpoint_write_s": write_s, "checkpoint_load_s": read_s, "checkpoint_bytes": unique,
            "checkpoint_writer_bytes": writer}


def goodput_terms(tokens_per_s, job_mtbf_s, write_s, lost_per_failure_s) -> dict[str, np.ndarray]:
    """The goodput formula (module docstring) for rows with throughput, job MTBF M, checkpoint
    write time delta and time lost per failure besides rework R, (N,) each. Rows with zero
    throughput (infeasible) get zero goodput."""
    tokens_per_s = np.asarray(tokens_per_s, dtype=np.float64)
    M = np.asarray(job_mtbf_s, dtype=np.float64) + np.zeros_like(tokens_per_s)
    delta = np.asarray(write_s, dtype=np.float64) + np.zeros_like(tokens_per_s)
    R = np.asarray(lost_per_failure_s, dtype=np.float64)
    tau = daly_interval_s(delta, M)
    overhead = delta / (tau + delta)
    rework = (tau + delta) / 2.0 / M
    lost = R / M
    ratio = (1.0 - overhead) * np.maximum(0.0, 1.0 - rework - lost)
    ratio = np.where(tokens_per_s > 0, ratio, 0.0)
    return {"goodput_tokens_per_s": tokens_per_s * ratio, "goodput_ratio": ratio, "checkpoint_interval_s": tau,
            "checkpoint_write_s": delta, "checkpoint_overhead": overhead, "rework_fraction": rework,
            "restart_fraction": lost, "job_mtbf_s": M}


def goodput(tokens_per_s, num_gpus, ckpt_bytes, failure: FailureModel | None = None) -> dict[str, np.ndarray]:
    """Goodput and its parts for rows of ``num_gpus`` GPUs that each write ``ckpt_bytes`` at their
    per-GPU share of the filesystem (every GPU a writer, no node limit, spares not modelled): the
    formula alone, for hand-worked cases. Plans go through plan_goodput."""
    f = failure or FailureModel()
    M = f.gpu_mtbf_h * 3600.0 / np.asarray(num_gpus, dtype=np.float64)
    b = np.asarray(ckpt_bytes, dtype=np.float64)
    return goodput_terms(tokens_per_s, M, b / f.write_Bps_per_gpu, f.restart_s + b / f.read_Bps_per_gpu)


def plan_goodput(metrics, table, cluster, failure: FailureModel | None = None, model=None,
                 optim_bytes: float = OPTIM_BYTES) -> dict[str, np.ndarray]:
    """Goodput of evaluated rows (module docstring): Metrics (tokens/s, per-GPU weight and
    optimizer bytes), their StrategyTable (degrees, ZeRO stage; ep and etp) and the Cluster they
    run on (its nodes: the job MTBF counts the nodes a plan holds, the idle ones are its spares).
    ``model``: needed for a mixture-of-experts model's rows (their expert state is split by ep and
    etp); an MoE plan without it is an InputError. ``optim_bytes``: the optimizer's bytes a parameter the
    rows were priced with (Framework.optim_state_bytes: the expert part of their optimizer state)."""
    f = failure or FailureModel()
    d, t, p, c = (np.asarray(table[k]) for k in ("dp", "tp", "pp", "cp"))
    G = cluster.gpus_per_node
    nodes_used = -(-(d * t * p * c) // G)  # ceil: whole nodes
    M = f.gpu_mtbf_h * 3600.0 / (nodes_used * G)
    experts = expert_state_per_gpu(model, table, optim_bytes)
    if experts is None and any(k in _columns(table) and np.any(np.asarray(table[k]) > 1) for k in ("ep", "etp")):
        raise InputError("model", "the MoE model of plans with ep or etp > 1 (goodput prices its expert state)",
                         "none" if model is None else model.name)
    io = checkpoint_io_s(metrics["mem_weights_bytes"], metrics["mem_optimizer_bytes"], table["zero_stage"],
                         (d, t, p, c), G, cluster.num_gpus, f, experts)
    spares = cluster.nodes - nodes_used
    wait = spare_wait_s(M, spares, f)
    out = goodput_terms(metrics["tokens_per_s"], M, io["checkpoint_write_s"],
                        f.restart_s + io["checkpoint_load_s"] + wait)
    out.update(checkpoint_load_s=io["checkpoint_load_s"], checkpoint_bytes=io["checkpoint_bytes"],
               spare_nodes=spares.astype(np.float64), spare_wait_s=wait,
               nodes_used=nodes_used.astype(np.float64), restart_s=np.full(len(M), f.restart_s))
    return out
