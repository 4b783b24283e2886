"""Communication primitives: the seconds a collective takes on a link, and which link a group of ranks
uses.

Ring all-reduce, all-gather and reduce-scatter (Patarasuk and Yuan 2009; NCCL's ring algorithm): a
buffer of B bytes over n ranks moves 2 (n - 1) / n B (all-reduce) or (n - 1) / n B (all-gather,
reduce-scatter) through each rank's link, with a latency per step. The expert all-to-all splits its
bytes between the scale-up link (NVLink, ranks in the same node) and the network. A group's link
(`tier`, `pool_link`): inside a node when every group of that layout fits one, else the network
(costmodel._stages.group_link for pools of a mixed cluster). Bandwidths and latencies come from the
cluster and GPU presets (costmodel._hardware), derated by the GPU's link efficiency.
"""

from __future__ import annotations

import numpy as np

from costmodel._hardware import Cluster
from costmodel._stages import group_link


def all_reduce_s(nbytes, size, bw, lat):
    """Ring all-reduce: 2 (n - 1) / n of the buffer over the link, 2 (n - 1) steps."""
    return np.where(size > 1, 2.0 * (size - 1) / size * nbytes / bw + 2.0 * (size - 1) * lat, 0.0)


def gather_s(nbytes, size, bw, lat):
    """Ring all-gather or reduce-scatter of a buffer of nbytes (the full, gathered size)."""
    return np.where(size > 1, (size - 1) / size * nbytes / bw + (size - 1) * lat, 0.0)


def ring_pass(size, bw, lat):
    """(seconds per byte, fixed seconds) of one pass of a ring over ``size`` ranks, as gather_s
    prices it: (n - 1) / n of the buffer over the link and n - 1 latencies; (0, 0) for one rank."""
    many = size > 1
    return np.where(many, (size - 1) / size / bw, 0.0), np.where(many, (size - 1) * lat, 0.0)


def tier(span, cluster: Cluster, gpu, *, one_group: bool = False):
    """Effective bandwidth and latency of the groups whose ranks span ``span`` consecutive
    ranks (stride * size), laid side by side from rank 0: inside a node if span divides
    gpus_per_node (every group then sits in one node), else the network (some group crosses a
    node boundary and its collective waits for the slowest link: tp 3 on 8-GPU nodes puts
    ranks 6-8 on two nodes; a job smaller than a node with such groups is priced so too).
    ``one_group``: the span is the whole job, inside a node if it fits one."""
    G = cluster.gpus_per_node
    inside = (span <= G) if one_group else (span <= G) & (G % span == 0)
    bw = np.where(inside, cluster.scaleup_Bps, cluster.scaleout_Bps) * gpu.link_eff
    lat = np.where(inside, cluster.scaleup_latency_s, cluster.scaleout_latency_s)
    return bw, lat


def all_to_all_s(nbytes, size, cluster: Cluster, gpu, net_bytes=None, stride=1):
    """All-to-all over ``size`` consecutive ranks, each sending a buffer of ``nbytes`` spread evenly
    over the group: (size - 1) / size of it leaves the GPU, the share to ranks of its own node
    (min(size, gpus_per_node) - 1 of them) on the scale-up link and the rest on the network, both
    at once; one latency of the slower tier. ``net_bytes``: a per-node dispatcher's network bytes
    instead (each token once per other node); NVLink then carries every copy that leaves the GPU
    (inside its node, or forwarded inside the node it reaches). ``stride``: the group's ranks are
    that many apart (ep ranks across etp), so a node holds gpus_per_node / stride of them."""
    g = cluster.gpus_per_node
    local = np.minimum(size, np.maximum(g // stride, 1))
    if net_bytes is None:
        up = (local - 1) / size * nbytes / (cluster.scaleup_Bps * gpu.link_eff)
        out = (size - local) / size * nbytes / (cluster.scaleout_Bps * gpu.link_eff)
    else:
        up = (size - 1) / size * nbytes / (cluster.scaleup_Bps * gpu.link_eff)
        out = net_bytes / (cluster.scaleout_Bps * gpu.link_eff)
    lat = np.where(size > local, cluster.scaleout_latency_s, cluster.scaleup_latency_s)
    return np.where(size > 1, np.maximum(up, out) + lat, 0.0)


def pool_link(pa: dict, q, stride, size):
    """group_link of groups of ``size`` ranks at ``stride`` on pools q (pool_arrays ``pa``)."""
    return group_link(stride, size, pa["gpus_per_node_int"][q], pa["intra_Bps"][q], pa["inter_Bps"][q],
                      pa["intra_latency_s"][q], pa["inter_latency_s"][q], pa["link_eff"][q])
