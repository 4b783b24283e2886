"""Communication primitives: the seconds a collective takes on a link, and which link a group of ranks
uses.

Ring all-reduce, all-gather and reduce-scatter (Patarasuk and Yuan 2009; NCCL's ring algorithm): a
buffer of B bytes over n ranks moves 2 (n - 1) / n B (all-reduce) or (n - 1) / n B (all-gather,
reduce-scatter) through each rank's link, with a latency per step. The expert all-to-all splits its
bytes between the scale-up link (NVLink, ranks in the same node) and the network. A group's link
(`tier`, `pool_link`): inside a node when every group of that layout fits one, else the network
(costmodel._stages.group_link for pools of a mixed cluster). Bandwidths and latencies come from the
cluster and GPU presets (costmodel._hardware), derated by the GPU's link efficiency.

The data-parallel exchange's collectives across nodes are priced as NCCL prices them
(`collective_link`, `collective_s`; NVIDIA/nccl 5067397, src/graph/search.cc and tuning.cc):
    bandwidth  NCCL runs a collective as several channels, each a ring (or tree) that enters and leaves
               every node once, and spreads the channels over the NICs next to the communicator's GPUs
               (search.cc ncclTopoSearchRecNet: channel c takes NIC c mod count, its bandwidth subtracted
               from that NIC's), so the bus bandwidth across nodes is the channels' sum, tuning.cc's
               busBw = nChannels x bwInter: the NICs of the group's ranks on a node. A group with g ranks
               on each node moves its inter-node traffic at g x the per-GPU network bandwidth (the
               groups laid side by side on a node, stride of them, share its NICs: each its g); its
               ranks' NVLink carries the other (g - 1) / g of each rank's bytes, so at most
               g / (g - 1) x the per-GPU NVLink bandwidth. One rank per node: the per-GPU network.
    latency    ncclTopoTuneModel per algorithm: ring all-gather / reduce-scatter n - 1 steps, of which
               nodes - 1 cross the network (all-reduce twice that); tree all-reduce 2 ((g - 1) intra-node
               steps + log2(nodes) network steps) at 0.92 of the bandwidth; PAT all-gather /
               reduce-scatter (NCCL >= 2.23, one rank per node) log2(nodes) x the network step / 3.5 +
               n x 2.8 us (a fifth of NCCL's 14 us network ring step) at 0.75 of the bandwidth.
               ncclTopoGetAlgoTime prices each as latency + bytes / bandwidth and enqueue.cc takes the
               fastest for the message: so does `collective_s`. A step inside a node costs the cluster's
               scale-up latency, one across nodes its scale-out latency (the protocols, LL / LL128 /
               Simple, are not modelled: the presets' latencies and link efficiency are Simple's).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from costmodel._hardware import Cluster
from costmodel._stages import collective_group_link, group_link

# NCCL's tuning model (NVIDIA/nccl 5067397 src/graph/tuning.cc, ncclTopoTuneModel): tree all-reduce bus bandwidth
# x 0.92, PAT's x 0.75; PAT's latency log2(nodes) x the network latency / 3.5 + nRanks x 2.8 us, against 14 us for a
# network step of its ring (hwLatencies[NET][RING][SIMPLE]).
TREE_BW_FRACTION = 0.92
PAT_BW_FRACTION = 0.75
PAT_LOG_LATENCY_DIVISOR = 3.5
PAT_RANK_LATENCY_FRACTION = 2.8 / 14.0


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


class CollectiveLink(NamedTuple):
    """An NCCL collective's link over a group (collective_link): ``bw`` its ring's bus bandwidth (B/s), ``lat_up``
    and ``lat_out`` a step's latency inside a node and across nodes, ``nodes`` the nodes it spans, ``per_node`` its
    ranks on a node. Arrays broadcast together."""

    bw: object
    lat_up: object
    lat_out: object
    nodes: object
    per_node: object


def collective_link(stride, size, G, up_bw, out_bw, up_lat, out_lat, eff) -> CollectiveLink:
    """The CollectiveLink of groups of ``size`` ranks ``stride`` apart on nodes of G GPUs (module docstring;
    costmodel._stages.collective_group_link)."""
    return CollectiveLink(*collective_group_link(stride, size, G, up_bw, out_bw, up_lat, out_lat, eff))


def pool_collective_link(pa: dict, q, stride, size) -> CollectiveLink:
    """collective_link of groups of ``size`` ranks at ``stride`` on pools q (pool_arrays ``pa``)."""
    return collective_link(stride, size, pa["gpus_per_node_int"][q], pa["intra_Bps"][q], pa["inter_Bps"][q],
                           pa["intra_latency_s"][q], pa["inter_latency_s"][q], pa["link_eff"][q])


def flat_link(bw, lat) -> CollectiveLink:
    """A link of one tier (every step at ``lat``, the bandwidth ``bw``): a group priced as before NCCL's
    per-node rings (one node of any size)."""
    return CollectiveLink(bw, lat, lat, 1, None)


def split_collective_link(a: CollectiveLink, b: CollectiveLink, link_bw, link_lat) -> CollectiveLink:
    """The CollectiveLink of one group split over two pools: ``a`` and ``b`` each pool's part of it (collective_link
    of its replicas there, ``per_node`` given), joined by the inter-pool link (``link_bw`` B/s per GPU per direction,
    its efficiency applied; ``link_lat`` s). NCCL's rings enter and leave every node of the group once per channel,
    a channel per rank of the node (module docstring), so the ring crosses the inter-pool link as it crosses any
    node boundary: with the NICs of each node's ranks in parallel,
        bw       = min(min(g_a, g_b) x link_bw, each part's node-crossing bandwidth)
        nodes    = nodes_a + nodes_b,  per_node = max(g_a, g_b) (the tree's longest chain; PAT where both are 1)
        lat_up   = the slower part's step inside a node, lat_out = the slowest step between nodes (the inter-pool
                   link, or a part's own network where it spans several nodes)
    A part's node-crossing bandwidth is its own collective's where it spans several nodes (already capped at
    g / (g - 1) x NVLink, collective_group_link), and g / (g - 1) x its NVLink where it sits in one node: its ranks'
    NVLink carries (g - 1) / g of each rank's bytes while the ring leaves the node (unbounded for one rank). Two
    identical pools of whole nodes so price as one pool of both. Arrays broadcast together."""

    def own(p: CollectiveLink):
        g = np.asarray(p.per_node, dtype=np.float64)
        in_node = np.where(g > 1, g / np.maximum(g - 1.0, 1.0) * p.bw, np.inf)
        return np.where(np.asarray(p.nodes) == 1, in_node, p.bw)

    def out_lat(p: CollectiveLink):  # a part's network step, where it has one (one node's lat_out is its NVLink's)
        return np.where(np.asarray(p.nodes) > 1, p.lat_out, 0.0)

    g_x = np.minimum(a.per_node, b.per_node)
    bw = np.minimum(np.minimum(own(a), own(b)), g_x * link_bw)
    lat_out = np.maximum(np.maximum(out_lat(a), out_lat(b)), link_lat)
    return CollectiveLink(bw, np.maximum(a.lat_up, b.lat_up), lat_out, np.add(a.nodes, b.nodes),
                          np.maximum(a.per_node, b.per_node))


class CollectiveTerms(NamedTuple):
    """One collective kind's prices on a link over its ranks (collective_terms): the ring's and the alternative's
    (tree or PAT) seconds per byte of the buffer and per call, and where the alternative runs (``alt_ok``)."""

    ring_b: object
    ring_l: object
    alt_b: object
    alt_l: object
    alt_ok: object


def collective_terms(kind: str, size, link: CollectiveLink) -> CollectiveTerms:
    """The CollectiveTerms of an all-reduce (``kind`` "all_reduce") or all-gather / reduce-scatter ("gather") over
    ``size`` ranks on ``link`` (module docstring): ring, and tree (all-reduce across nodes) or PAT (one rank per
    node). Zero for one rank."""
    n = np.asarray(size, dtype=np.float64)
    bw, lat_up, lat_out, nodes = link.bw, link.lat_up, link.lat_out, np.asarray(link.nodes, dtype=np.float64)
    per_node = n / nodes if link.per_node is None else link.per_node
    many = n > 1
    twice = 2.0 if kind == "all_reduce" else 1.0
    ring_b = np.where(many, twice * (n - 1) / n / bw, 0.0)  # (n - 1) / n of the buffer a pass
    ring_l = np.where(many, twice * ((n - nodes) * lat_up + (nodes - 1) * lat_out), 0.0)
    log_nodes = np.floor(np.log2(np.maximum(nodes, 1.0)))  # NCCL's log2i
    if kind == "all_reduce":  # tree: the buffer up and down the tree, 2 x ((g - 1) chain steps + log2 nodes)
        alt_b = 2.0 / (TREE_BW_FRACTION * bw)
        alt_l = 2.0 * ((per_node - 1) * lat_up + log_nodes * lat_out)
        alt_ok = many & (nodes > 1)
    else:  # PAT, one rank per node
        alt_b = ring_b / PAT_BW_FRACTION
        alt_l = log_nodes * lat_out / PAT_LOG_LATENCY_DIVISOR + n * PAT_RANK_LATENCY_FRACTION * lat_out
        alt_ok = many & (per_node == 1) & (nodes > 1)
    return CollectiveTerms(ring_b, ring_l, alt_b, alt_l, alt_ok)


def pick(terms: CollectiveTerms, msg_bytes):
    """(seconds per byte of the buffer, seconds per call) of one collective of ``msg_bytes`` by the algorithm NCCL's
    tuning model finds fastest for that message (ncclTopoGetAlgoTime: latency + bytes / bandwidth)."""
    alt = terms.alt_ok & (terms.alt_b * msg_bytes + terms.alt_l < terms.ring_b * msg_bytes + terms.ring_l)
    return np.where(alt, terms.alt_b, terms.ring_b), np.where(alt, terms.alt_l, terms.ring_l)


def collective_s(kind: str, msg_bytes, size, link: CollectiveLink):
    """(seconds per byte of the buffer, seconds per call) of one all-reduce (``kind`` "all_reduce") or all-gather /
    reduce-scatter ("gather") of ``msg_bytes`` (the whole buffer: gathered or reduced) over ``size`` ranks, by the
    algorithm NCCL's tuning model finds fastest for that message (module docstring): ring or tree (all-reduce),
    ring or PAT (one rank per node). (0, 0) for one rank."""
    return pick(collective_terms(kind, size, link), msg_bytes)
