"""Communication primitives: the seconds a collective takes on a link, and which link a group of ranks
uses.

Ring all-reduce, all-gather and reduce-scatter (Patarasuk and Yuan 2009; NCCL's ring algorithm): a
buffer of B bytes over n ranks moves 2 (n - 1) / n B (all-reduce) or (n - 1) / n B (all-gather,
reduce-scatter) through each rank's link, with a latency per step. The expert all-to-all splits its
bytes between the scale-up link (NVLink, ranks in the same node) and the network. A group's link
(`tier`, `pool_link`): inside a node when every group of that layout fits one, else the network
(costmodel._stages.group_link for pools of a mixed cluster). Bandwidths and latencies come from the
cluster and GPU presets (costmodel._hardware), derated by the GPU's link efficiency.

The data-parallel exchange's collectives are priced as NCCL prices them (`collective_link`, `collective_s`;
NVIDIA/nccl 5067397, src/graph/search.cc and tuning.cc; the constants in costmodel._nccl):
    bandwidth  NCCL runs a collective as several channels, each a ring (or tree) that enters and leaves
               every node once, and spreads the channels over the NICs next to the communicator's GPUs
               (search.cc ncclTopoSearchRecNet: channel c takes NIC c mod count, its bandwidth subtracted
               from that NIC's), so the bus bandwidth across nodes is the channels' sum, tuning.cc's
               busBw = nChannels x bwInter: the NICs of the group's ranks on a node. A group with g ranks
               on each node moves its inter-node traffic at g x the per-GPU network bandwidth (the
               groups laid side by side on a node, stride of them, share its NICs: each its g); its
               ranks' NVLink carries the other (g - 1) / g of each rank's bytes, so at most
               g / (g - 1) x the per-GPU NVLink bandwidth. One rank per node: the per-GPU network.
    algorithms ncclTopoTuneModel: ring all-reduce 2 (n - 1) steps, all-gather / reduce-scatter n - 1, of which
               nodes - 1 a pass cross the network (a broadcast: a ring of n - 1 hops, the pipeline's fill, its
               message at the bus bandwidth; NCCL's own model charges a broadcast one hop, which would pick
               Simple for any message past a few MB, yet a waited broadcast of a small shard pays the
               fill: here the protocol fastest with the fill counted); tree all-reduce 2 ((g - 1) chain steps + log2(nodes) network
               steps), the buffer twice at 0.92 of the bandwidth, corrected per message size
               (treeCorrectionFactor); PAT all-gather / reduce-scatter (NCCL >= 2.23, one rank per node, Simple)
               log2(nodes) x the network step / 3.5 + n x a fifth of it, at 0.75 of the bandwidth.
    protocols  each algorithm under LL (half the bandwidth, capped at 20.4 GB/s across more than 2 nodes, at
               the GPU generation's ceiling in one; hops of 0.6 us on NVLink, 2.7 us on the network in NCCL's
               tables), LL128 (0.92 of the bandwidth; 1.9 and 4.0 us) and Simple (all of it; 3.4 and 14 us),
               each with its base latency (6.6, 14 and 8.4 us for the ring). A step across nodes costs the
               cluster's scale-out latency, read as Simple's ring hop and scaled by NCCL's ratio for the protocol
               and algorithm; a step inside a node the ring's LL hop measured on one DGX A100 (1.98 us where NCCL's
               table has 0.6; on a cluster whose scale-up latency is the presets' 5 us) scaled by NCCL's ratio to
               it, so every algorithm pays one latency for the same link (ring LL128 6.27 us, Simple 11.22 us; tree
               LL 1.98, LL128 4.125, Simple 13.2 us; costmodel._nccl.hop_ratio); a ring across nodes pays the
               proxy's post overhead (1 us, Simple 3 us) on every hop at least.
    choice     ncclTopoGetAlgoTime prices each (algorithm, protocol) as latency + bytes / bandwidth and enqueue.cc
               takes the fastest for the message: so does `pick`. Small messages run LL, large ones Simple,
               latency-bound ones across many nodes (a broadcast of a shard over 1,024 ranks) LL or LL128.
    not priced NVLink SHARP (NVLS), CollNet (in-network reduction), the per-channel ceilings of LL128 and the tree
               (they need NCCL's channel count), PCIe-only nodes' tables (NVLink's are used).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from costmodel._hardware import Cluster
from costmodel._nccl import (
    BASE_US,
    LL,
    LL128,
    NET_HOP_US,
    NET_OVERHEAD_US,
    PAT_LOG_LATENCY_DIVISOR,
    PAT_RANK_LATENCY_US,
    PAT_SHARE,
    RING_LL128_SHARE,
    RING_LL_SHARE,
    RING_SIMPLE_PLATEAU,
    SIMPLE,
    SIMPLE_NET_OVERHEAD_FACTOR,
    TREE_LL128_SHARE_NODES,
    TREE_LL128_SHARE_ONE_NODE,
    TREE_LL_DIVISOR,
    TREE_SHARE,
    US,
    LL_MAX_NODES_GBps,
    LL_MAX_ONE_NODE_GBps,
    LL_MAX_TWO_NODES_GBps,
    hop_ratio,
    tree_correction_at,
    tree_size,
)
from costmodel._stages import collective_group_link, group_link

# Share of a node's network a per-node expert dispatcher's all-to-all moves its bytes at (DeepEP's normal kernels,
# HybridEP priced alike), where NCCL's collectives take the GPU's link_eff (0.8). DeepEP's README, normal kernels on
# H800 with one CX7 400 Gb/s NIC a GPU (~50 GB/s), after its multi-QP / IBGDA change (deepseek-ai/DeepEP pull 130,
# 2025-04): dispatch and combine at EP 32 58 and 57 GB/s "RDMA", at EP 64 51 and 50 GB/s, counted over every token a
# rank sends to any node, its own included (pull 130's accounting, as deepseek-ai/DeepEP issue 285 reads it: at EP 16
# "43 x 0.5 = 21.5 GB/s" on the wire). On the wire that is (nodes - 1) / nodes of it: 43.5 and 42.8 GB/s over 4 nodes,
# 44.6 and 43.8 over 8, 0.86-0.89 of the NIC; their mean. Read from those figures; looked for because a validation
# pair with the Megatron-MoE-ModelZoo's DeepEP EP 32 run (priced 8.9% slow at 0.8) was out of order.
PER_NODE_DISPATCH_NET_EFF = 0.87


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
    (inside its node, or forwarded inside the node it reaches), and the network moves them at
    PER_NODE_DISPATCH_NET_EFF of its bandwidth. ``stride``: the group's ranks are
    that many apart (ep ranks across etp), so a node holds gpus_per_node / stride of them."""
    g = cluster.gpus_per_node
    local = np.minimum(size, np.maximum(g // stride, 1))
    if net_bytes is None:
        up = (local - 1) / size * nbytes / (cluster.scaleup_Bps * gpu.link_eff)
        out = (size - local) / size * nbytes / (cluster.scaleout_Bps * gpu.link_eff)
    else:
        up = (size - 1) / size * nbytes / (cluster.scaleup_Bps * gpu.link_eff)
        out = net_bytes / (cluster.scaleout_Bps * PER_NODE_DISPATCH_NET_EFF)
    lat = np.where(size > local, cluster.scaleout_latency_s, cluster.scaleup_latency_s)
    return np.where(size > 1, np.maximum(up, out) + lat, 0.0)


def pool_link(pa: dict, q, stride, size):
    """group_link of groups of ``size`` ranks at ``stride`` on pools q (pool_arrays ``pa``)."""
    return group_link(stride, size, pa["gpus_per_node_int"][q], pa["intra_Bps"][q], pa["inter_Bps"][q],
                      pa["intra_latency_s"][q], pa["inter_latency_s"][q], pa["link_eff"][q])


class CollectiveLink(NamedTuple):
    """An NCCL collective's link over a group (collective_link): ``bw`` its ring's bus bandwidth (B/s), ``lat_up``
    and ``lat_out`` a step's latency inside a node and across nodes (costmodel._nccl.hop_ratio scales each to the
    protocol's hop; across nodes it is Simple's ring hop), ``nodes`` the nodes it spans,
    ``per_node`` its ranks on a node, ``ll_node_Bps`` LL's bus-bandwidth ceiling inside one node (the GPU
    generation's: costmodel._nccl.ll_one_node_Bps). Arrays broadcast together."""

    bw: object
    lat_up: object
    lat_out: object
    nodes: object
    per_node: object
    ll_node_Bps: object = LL_MAX_ONE_NODE_GBps["hopper"] * 1e9


def collective_link(stride, size, G, up_bw, out_bw, up_lat, out_lat, eff) -> CollectiveLink:
    """The CollectiveLink of groups of ``size`` ranks ``stride`` apart on nodes of G GPUs (module docstring;
    costmodel._stages.collective_group_link)."""
    return CollectiveLink(*collective_group_link(stride, size, G, up_bw, out_bw, up_lat, out_lat, eff))


def pool_collective_link(pa: dict, q, stride, size) -> CollectiveLink:
    """collective_link of groups of ``size`` ranks at ``stride`` on pools q (pool_arrays ``pa``)."""
    link = collective_link(stride, size, pa["gpus_per_node_int"][q], pa["intra_Bps"][q], pa["inter_Bps"][q],
                           pa["intra_latency_s"][q], pa["inter_latency_s"][q], pa["link_eff"][q])
    return link._replace(ll_node_Bps=np.broadcast_to(pa["ll_node_Bps"][q], np.shape(link.bw)))


def flat_link(bw, lat) -> CollectiveLink:
    """A link of one tier (every step at ``lat``, the bandwidth ``bw``): a group priced as before NCCL's
    per-node rings (one node of any size: its protocols' hops NVLink's ratios, LL's ceiling Hopper's)."""
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
                          np.maximum(a.per_node, b.per_node), np.minimum(a.ll_node_Bps, b.ll_node_Bps))


class CollectiveTerms(NamedTuple):
    """One collective kind's candidates on a link over its ranks (collective_terms), NCCL's (algorithm, protocol)
    pairs in order: ``b`` each one's seconds per byte of the buffer (before the tree's correction for the message),
    ``l`` its seconds per call, ``ok`` where it runs (None: wherever the ring does), ``tree`` its protocol where it is
    a tree all-reduce (treeCorrectionFactor applies), else -1. Tuples of K arrays (or ints) broadcasting together."""

    b: tuple
    l: tuple  # noqa: E741
    ok: tuple
    tree: tuple


class _Group(NamedTuple):
    """What every candidate of collective_terms reads, computed once: ranks ``n``, ``nodes``, ``per_node`` (float
    arrays), ``many`` (n > 1), ``across`` (nodes > 1), ``log_nodes`` (NCCL's log2i), ``ll_bw`` LL's bus-bandwidth
    ceiling (llMaxBws: the GPU generation's inside one node, 39 GB/s over 2 nodes, 20.4 over more: an Intel host's)."""

    n: object
    nodes: object
    per_node: object
    many: object
    across: object
    log_nodes: object
    ll_bw: object


def _group(size, link: CollectiveLink) -> _Group:
    n = np.asarray(size, dtype=np.float64)
    nodes = np.asarray(link.nodes, dtype=np.float64)
    per_node = n / nodes if link.per_node is None else np.asarray(link.per_node, dtype=np.float64)
    ll_bw = np.where(nodes == 1, link.ll_node_Bps, np.where(nodes == 2, LL_MAX_TWO_NODES_GBps, LL_MAX_NODES_GBps) * 1e9)
    return _Group(n, nodes, per_node, n > 1, nodes > 1, np.floor(np.log2(np.maximum(nodes, 1.0))), ll_bw)


def _ring(kind: str, gr: _Group, link: CollectiveLink, p: int):
    """(seconds per byte of the buffer, seconds per call) of NCCL's ring under protocol ``p`` (tuning.cc): passes x
    ((n - nodes) hops inside a node + (nodes - 1) across), an all-reduce 2 passes (reduce-scatter, all-gather);
    bytes (n - 1) / n of the buffer a pass at the protocol's bus bandwidth (a broadcast: the whole message, algBw =
    busBw); an intra-node hop of a ring across nodes at least the proxy's post overhead; with one rank per node the
    network hop is the tree's; a Simple all-reduce across nodes x 1.4 (ncclTopoGetAlgoTime's plateau)."""
    if p == LL:
        bw = np.minimum(RING_LL_SHARE * link.bw, gr.ll_bw)
    else:
        bw = RING_LL128_SHARE * link.bw if p == LL128 else link.bw
    passes = 2.0 if kind == "all_reduce" else 1.0
    per_byte = passes * (gr.n - 1) / gr.n / bw if kind != "broadcast" else 1.0 / bw
    overhead = NET_OVERHEAD_US * US * (SIMPLE_NET_OVERHEAD_FACTOR if p == SIMPLE else 1.0)
    up = link.lat_up * hop_ratio("nvlink", "ring", p)
    up = np.where(gr.across, np.maximum(up, overhead), up)
    out = link.lat_out * np.where(gr.per_node == 1, hop_ratio("net", "tree", p), hop_ratio("net", "ring", p))
    lat = BASE_US["ring"][p] * US + passes * ((gr.n - gr.nodes) * up + (gr.nodes - 1) * out)
    if kind == "all_reduce" and p == SIMPLE:
        lat = np.where(gr.across, RING_SIMPLE_PLATEAU * lat, lat)
    return per_byte, lat


def _tree(gr: _Group, link: CollectiveLink, p: int):
    """(seconds per byte, seconds per call) of NCCL's tree all-reduce under protocol ``p``: the buffer up and down the
    tree (2 x the bytes at its bus bandwidth: 0.92 of the ring's, LL / 3.8 on top capped at LL's ceiling, LL128 x
    120/128 across nodes, 7/9 in one), 2 x ((per_node - 1) chain hops + log2i(nodes) network hops)."""
    bw = TREE_SHARE * link.bw
    if p == LL:
        bw = np.minimum(bw / TREE_LL_DIVISOR, gr.ll_bw)
    elif p == LL128:
        bw = bw * np.where(gr.across, TREE_LL128_SHARE_NODES, TREE_LL128_SHARE_ONE_NODE)
    hops = ((gr.per_node - 1) * link.lat_up * hop_ratio("nvlink", "tree", p)
            + gr.log_nodes * link.lat_out * hop_ratio("net", "tree", p))
    return 2.0 / bw, BASE_US["tree"][p] * US + 2.0 * hops


def _pat(gr: _Group, link: CollectiveLink):
    """(seconds per byte, seconds per call) of NCCL's PAT all-gather / reduce-scatter (Simple, one rank per node):
    the buffer at 0.75 of the bus bandwidth (no ring factor), log2i(nodes) network hops / 3.5 + n x 2.8 us (a fifth
    of NCCL's 14 us network hop, so a fifth of the cluster's)."""
    lat = (BASE_US["pat"][SIMPLE] * US + gr.log_nodes * link.lat_out / PAT_LOG_LATENCY_DIVISOR
           + gr.n * PAT_RANK_LATENCY_US / NET_HOP_US["tree"][SIMPLE] * link.lat_out)
    return 1.0 / (PAT_SHARE * link.bw), lat


def collective_terms(kind: str, size, link: CollectiveLink) -> CollectiveTerms:
    """The CollectiveTerms of an all-reduce (``kind`` "all_reduce"), all-gather / reduce-scatter ("gather") or
    broadcast ("broadcast") over ``size`` ranks on ``link`` (module docstring): the ring under LL, LL128 and Simple;
    an all-reduce also the tree under each; a gather with one rank per node also PAT (Simple); a broadcast the ring
    alone. Zero for one rank."""
    gr = _group(size, link)
    pairs = [_ring(kind, gr, link, p) for p in (LL, LL128, SIMPLE)]
    oks, tree = [None] * 3, (-1, -1, -1)
    if kind == "all_reduce":
        pairs += [_tree(gr, link, p) for p in (LL, LL128, SIMPLE)]
        oks, tree = oks + [None] * 3, tree + (LL, LL128, SIMPLE)
    elif kind == "gather":
        pairs.append(_pat(gr, link))
        oks, tree = oks + [(gr.per_node == 1) & gr.across], tree + (-1,)
    if not np.all(gr.many):  # one rank: nothing to do (every candidate 0)
        pairs = [(np.where(gr.many, b_i, 0.0), np.where(gr.many, l_i, 0.0)) for b_i, l_i in pairs]
    return CollectiveTerms(tuple(b_i for b_i, _ in pairs), tuple(l_i for _, l_i in pairs), tuple(oks), tree)


def pick(terms: CollectiveTerms, msg_bytes):
    """(seconds per byte of the buffer, seconds per call) of one collective of ``msg_bytes`` by the (algorithm,
    protocol) NCCL's tuning model finds fastest for that message (ncclTopoGetAlgoTime: latency + bytes / bandwidth,
    the tree's bandwidth x treeCorrectionFactor for the message); the first of equals (ring LL for one rank: 0, 0)."""
    msg = np.asarray(msg_bytes, dtype=np.float64)
    size = tree_size(msg) if any(p >= 0 for p in terms.tree) else None
    best_t = best_b = best_l = None
    for b, lat, ok, p in zip(terms.b, terms.l, terms.ok, terms.tree, strict=True):
        if p >= 0:  # the tree's seconds per byte / its correction for the message
            b = b / tree_correction_at(size, p)
        t = b * msg + lat
        if ok is not None:
            t = np.where(ok, t, np.inf)
        if best_t is None:
            best_t, best_b, best_l = t, b, lat
            continue
        better = t < best_t
        best_t, best_b, best_l = np.where(better, t, best_t), np.where(better, b, best_b), np.where(better, lat, best_l)
    shape = np.shape(best_t)
    return np.broadcast_to(best_b, shape), np.broadcast_to(best_l, shape)


def collective_s(kind: str, msg_bytes, size, link: CollectiveLink):
    """(seconds per byte of the buffer, seconds per call) of one all-reduce (``kind`` "all_reduce"), all-gather /
    reduce-scatter ("gather") or broadcast ("broadcast") of ``msg_bytes`` (the whole buffer: gathered or reduced; a
    broadcast's message) over ``size`` ranks, by the algorithm and protocol NCCL's tuning model finds fastest for that
    message (module docstring). (0, 0) for one rank."""
    return pick(collective_terms(kind, size, link), msg_bytes)
