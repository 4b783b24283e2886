"""NCCL's tuning model: the constants it prices a collective with, per algorithm (ring, tree, PAT) and protocol (LL,
LL128, Simple), as costmodel._collectives uses them.

Source: NVIDIA/nccl commit 5067397c2676d5aed50042fc39e5c8ee96eb0027, src/graph/tuning.cc (ncclTunerConstantsDefaults,
ncclTopoTuneModel, treeCorrectionFactor, ncclTopoGetAlgoTime). NCCL prices algorithm a under protocol p for a buffer
of nBytes as

    time = latency[a][p] + nBytes / bandwidth[a][p]
    latency   = baseLatencies[a][p] + hops x hwLatencies[tier][a][p]      (us; the hops: tuning.cc per algorithm)
    bandwidth = nChannels x the graph's per-channel bandwidth x the protocol's share, then the algorithm's bus-to-
                algorithm factor (ring n / steps, tree 1/2)

and runs the (a, p) of least time (enqueue.cc topoGetAlgoInfo). The protocols trade latency for bandwidth: LL
(8-byte stores carrying 4 bytes and a flag) reaches half the bus bandwidth at the smallest per-hop latency, LL128
(128-byte lines carrying 120) 92%, Simple all of it behind a fence per step, the largest latency.

Each hop latency below is NCCL's for its tier (NVLink inside a node, the network across nodes); costmodel reads the
cluster's own step latencies (scaleup_latency_s, scaleout_latency_s, costmodel._hardware) and scales them by a ratio
per (algorithm, protocol) and tier (hop_ratio), so a cluster described with a slower link slows every protocol alike.
Across nodes the cluster's step is Simple's ring hop and the ratio NCCL's to it. Inside a node the ring's LL hop is
measured (NVLINK_RING_LL_HOP_US, on a node whose preset's step is MEASURED_NODE_SCALEUP_US) and every other
(algorithm, protocol) on NVLink is NCCL's ratio to its ring LL hop: one latency for the link, whichever algorithm
uses it. Base latencies (the launch and the kernel's own set-up, no link's) and the proxy's post overhead are
absolute.
"""

from __future__ import annotations

import numpy as np

US = 1e-6
LL, LL128, SIMPLE = 0, 1, 2  # NCCL_PROTO_LL, NCCL_PROTO_LL128, NCCL_PROTO_SIMPLE
PROTOCOLS = ("LL", "LL128", "Simple")

# baseLatencies (us) per protocol (LL, LL128, Simple)
BASE_US = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4), "pat": (8.0, 8.0, 8.0)}
# hwLatencies (us) per hop, per protocol: NVLINK (inside a node) and NET (across nodes); PAT's network hop with one
# rank per node is the tree's (tuning.cc: "With ppn=1 latencies are fully exposed, use the Tree network latency").
NVLINK_HOP_US = {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4)}
NET_HOP_US = {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0)}
# NVLink's ring LL hop, measured: nccl-tests' all_reduce_perf of 8-128 B on one DGX A100 (A100-SXM4-80GB, NVSwitch),
# NCCL_ALGO=Ring and NCCL_MAX_NCHANNELS=1, at 2 to 8 GPUs (tests/data/nccl_scale_measured.csv, its 7 one-node rows:
# 10.0, 13.76, 16.88, 20.8, 25.2, 29.5, 33.7 us at 128 B). Least squares of the time against the ring's 2 (n - 1)
# steps: 1.98 us a step + 5.6 us (NCCL's table: 0.6 us a hop and 6.6 us of base). Only these 7 points were in view
# when it was chosen. The other (algorithm, protocol) hops on NVLink are NCCL's ratios to its ring LL hop: ring LL128
# 1.98 x 1.9 / 0.6 = 6.27 us, Simple 1.98 x 3.4 / 0.6 = 11.22 us; tree LL 1.98, LL128 4.125, Simple 13.2 us.
NVLINK_RING_LL_HOP_US = 1.98
# The measured node's scale-up step latency in costmodel._hardware (every preset's: 5 us): the NVLink hops above scale
# with a cluster's scale-up latency over it (a 5 us cluster gets them as measured).
MEASURED_NODE_SCALEUP_US = 5.0
# getNetOverhead: the proxy's post overhead per network step, 1 us on an Intel x86 host (2 us on AMD), x 3 for
# Simple; a ring that spans several nodes pays at least that on each of its intra-node steps too.
NET_OVERHEAD_US = 1.0
SIMPLE_NET_OVERHEAD_FACTOR = 3.0

# Bandwidth shares (busBw refinements in ncclTopoTuneModel)
RING_LL_SHARE = 0.5  # busBw x .5, capped at llMaxBw
RING_LL128_SHARE = 0.92  # busBw x 0.92 (120/128 rounded down)
TREE_SHARE = 0.92  # tree all-reduce, every protocol
TREE_LL_DIVISOR = 3.8  # tree LL: busBw x 1/3.8 on top, capped at llMaxBw
TREE_LL128_SHARE_NODES = 120.0 / 128.0  # tree LL128 across nodes (7/9 inside one)
TREE_LL128_SHARE_ONE_NODE = 7.0 / 9.0
PAT_SHARE = 0.75
PAT_LOG_LATENCY_DIVISOR = 3.5  # PAT: log2(nodes) x the network hop / 3.5 + nRanks x 2.8 us
PAT_RANK_LATENCY_US = 2.8
# ncclTopoGetAlgoTime: a ring Simple all-reduce across nodes pays its latency x 1.4 (compute capability >= 8.0;
# 1.9 on Volta), "plateau effect of ring", once a message holds 64 bytes per channel and rank: here on every message
# (below that size LL's ring is faster by the hops' latencies alone, so the choice does not change).
RING_SIMPLE_PLATEAU = 1.4

# llMaxBws (GB/s, LL's bus bandwidth ceiling): inside one node by GPU generation; across 2 nodes and across more, by
# host CPU (Intel's row; AMD hosts: 22.5 and 19.0).
LL_MAX_ONE_NODE_GBps = {"volta": 39.0, "ampere": 87.7, "hopper": 141.0, "blackwell": 282.0}
LL_MAX_TWO_NODES_GBps = 39.0
LL_MAX_NODES_GBps = 20.4

# treeCorrectionFactor[protocol][log2(nBytes / 64)], 64 B to 256 MB: the tree's bandwidth x this factor for the
# message (NCCL: "Trees are not perfectly sticking to the model for medium sizes").
TREE_CORRECTION = np.array([
    [1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0],
    [1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0],
    [.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9],
])
TREE_CORRECTION_SIZES = 23  # applied where 0 <= log2i(nBytes >> 6) < 23


def gpu_generation(name: str) -> str:
    """NCCL's compute-capability row for a GPU preset's name (tuning.cc's compCapIndex): Volta, Ampere (8.x: A100,
    A800, A30, A40, L40), Hopper (H100, H800, H200), Blackwell (B100, B200); any other GPU Hopper's (AMD's run
    RCCL, whose tables differ)."""
    n = name.upper()
    if "V100" in n:
        return "volta"
    if any(k in n for k in ("A100", "A800", "A30", "A40", "L40")):  # compute capability 8.x
        return "ampere"
    if "B100" in n or "B200" in n or "B300" in n:
        return "blackwell"
    return "hopper"


def ll_one_node_Bps(name: str) -> float:
    """LL's bus bandwidth ceiling inside one node (B/s) for the GPU named ``name`` (llMaxBws, by generation)."""
    return LL_MAX_ONE_NODE_GBps[gpu_generation(name)] * 1e9


def hop_ratio(tier: str, algo: str, proto: int) -> float:
    """The hop latency of ``algo`` under protocol ``proto`` on ``tier`` over the cluster's step latency on that tier
    (module docstring): on "net" NCCL's hop over its ring Simple hop; on "nvlink" the measured ring LL hop over the
    measured node's step, times NCCL's hop over its ring LL hop."""
    if tier == "nvlink":
        return NVLINK_RING_LL_HOP_US / MEASURED_NODE_SCALEUP_US * NVLINK_HOP_US[algo][proto] / NVLINK_HOP_US["ring"][LL]
    return NET_HOP_US[algo][proto] / NET_HOP_US["ring"][SIMPLE]


def tree_size(msg_bytes):
    """treeCorrectionFactor's column for a message of ``msg_bytes``: log2i(nBytes >> 6), NCCL's integer log, as
    floor(log2(nBytes / 64)); -1 below 64 B and for an unbounded message (an estimate past any model)."""
    msg = np.asarray(msg_bytes, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        size = np.floor(np.log2(np.maximum(msg / 64.0, 0.5)))
    return np.where(np.isfinite(size), size, -1.0).astype(np.int64)


def tree_correction_at(size, proto: int):
    """treeCorrectionFactor[proto][size] where 0 <= size < 23 (tree_size), else 1."""
    inside = (size >= 0) & (size < TREE_CORRECTION_SIZES)
    return np.where(inside, TREE_CORRECTION[proto][np.clip(size, 0, TREE_CORRECTION_SIZES - 1)], 1.0)



# ---- channels: the SMs a collective's kernel holds -----------------------------------------------------------------
# NCCL launches a collective as one kernel whose grid is one CTA per channel (enqueue.cc ncclLaunchKernel:
# `dim3 grid = {(unsigned)nChannels, 1, 1}`), each CTA resident on an SM for the whole collective. A ring or tree
# collective runs on the communicator's nChannels once its message reaches nChannels x nThreads x the protocol's thread
# threshold (enqueue.cc: `while (nBytes < nc * nt * threadThreshold) nc--`; Simple: 16 x 512 x 64 B = 512 KiB), which
# every data-parallel bucket, FSDP unit and ZeRO-3 gather of a model past a few hundred million parameters exceeds.
# The communicator's nChannels is set at init (search.cc ncclTopoCompute, ncclTopoDupChannels; connect.cc
# ncclTopoPostset), derived here for the reference nodes (8 GPUs on NVSwitch, one NIC per GPU: 200 Gb/s HDR on A100
# nodes, 400 Gb/s NDR on H100, H200 and B200 nodes):
#   one node   ring search at the generation's top intra-node speed that the GPU's NVLink carries: A100 12 links x
#              20 GB/s (SM80_NVLINK_BW) = 240 GB/s at 40 GB/s (speedArrayIntra) -> 6 channels; H100 18 x 20.6 = 371 GB/s
#              at 60 (sm90SpeedArrayIntra) -> 6; B200 18 x 40.1 = 722 GB/s at 90 (sm100SpeedArrayIntra) -> 8.
#              ncclTopoDupChannels doubles them (bwIntra >= 50, or compute capability 8.0), ncclTopoPostset doubles them
#              again ("Duplicate channels"): 24, 24, 32.
#   across nodes  one search channel per NIC of the group's ranks on a node (a NIC carries one ring at the top
#              inter-node speed under its bandwidth: 24 GB/s on 200 Gb/s, 48 on 400 Gb/s; speedArrayInter,
#              sm90/sm100SpeedArrayInter). ncclTopoDupChannels skips a 24 GB/s graph (bwIntra < 25) and, from compute
#              capability 9.0, one of more than 4 channels under 50 GB/s; ncclTopoPostset doubles: g ranks on a node
#              -> A100 2 g, H100 / H200 / B200 4 g for g <= 4, 16 at g = 8 (8 search channels, not duplicated).
#              Capped at 16 (no rule above adds more for these nodes).
# Volta's row is Ampere's (not derived: no NVSwitch node priced). NVLS and CollNet channels are not priced (costmodel.
# _collectives prices neither algorithm).
RING_CHANNELS_ONE_NODE = {"volta": 24, "ampere": 24, "hopper": 24, "blackwell": 32}
RING_CHANNELS_PER_NODE_RANK = {"volta": 2, "ampere": 2, "hopper": 4, "blackwell": 4}
RING_CHANNELS_ACROSS_NODES_MAX = 16


def ring_channel_table(name: str) -> tuple[float, float]:
    """(channels inside one node, channels per rank on a node across nodes) of the GPU named ``name``
    (RING_CHANNELS_ONE_NODE, RING_CHANNELS_PER_NODE_RANK, by generation)."""
    gen = gpu_generation(name)
    return float(RING_CHANNELS_ONE_NODE[gen]), float(RING_CHANNELS_PER_NODE_RANK[gen])


def ring_channels(across, per_node, one_node, per_rank):
    """CTAs (channels) NCCL's ring or tree collective launches over a group with ``per_node`` of its ranks on each node
    it spans: ``one_node`` inside one node, else (``across``) min(``per_rank`` x per_node, 16) (the derivation above).
    Arrays broadcast."""
    return np.where(across, np.minimum(np.multiply(per_rank, per_node), RING_CHANNELS_ACROSS_NODES_MAX), one_node)
