"""Heterogeneous clusters: several pools of GPUs, each with its own type and links.

A pool is ``nodes`` x ``gpus_per_node`` GPUs of one type with an intra-node link (NVLink,
xGMI or PCIe) and the pool's inter-node network, each as B/s per GPU per direction and a
latency. Pools are joined by inter-pool links (B/s per GPU per direction and a latency; by
default the slower of the two pools' networks). A homogeneous :class:`Cluster` is the
single-pool case (:func:`as_hetero`).

Nothing here assumes that the link inside a node beats the network between nodes: a group
of ranks is priced on the slowest link it actually crosses (see ``group_link`` in
costmodel._stages), so PCIe-only nodes on a fast network are priced as they are.

File format (JSON or YAML), bandwidths in GB/s per GPU per direction, latencies in us::

    name: a100x64+h100x64
    pools:
      - {name: a100, gpu: a100, nodes: 8, gpus_per_node: 8}          # links from the GPU preset
      - {name: h100, gpu: h100, nodes: 8, gpus_per_node: 8, inter_GBps: 50, inter_latency_us: 10}
    links:
      - {between: [a100, h100], GBps: 25, latency_us: 12}

A pool may carry ``efficiency: {constant: value}``, the GPU efficiency constants `plansweep calibrate` fits
(gemm_eff_max, hbm_eff, link_eff, ...) in place of its preset's: what a run directory keeps of a ``--hardware`` file.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from costmodel._errors import InputError
from costmodel._hardware import (CLUSTER_INT_MAX, GPU, MAX_GBPS, MAX_LATENCY_S, Cluster, cluster_preset,
                                 efficiency_of, efficiency_values, gpu_preset)

_GB = 1e9
_US = 1e-6
MAX_LATENCY_US = MAX_LATENCY_S / _US

# PCIe Gen4 x16 is 32 GB/s per direction raw; an 8-GPU PCIe server routes GPU-to-GPU traffic
# through shared switches and the CPU root complexes (and UPI between sockets), where NCCL's
# all-reduce bus bandwidth measures about 12 GB/s (nccl-tests on 8x A100-PCIe / L40S servers
# without NVLink, as reported in NVIDIA's and vendors' tuning guides); about 15 us per step.
PCIE_GEN4_NODE_BUSBW_GBps = 12.0
PCIE_LATENCY_US = 15.0
# 400 Gb/s per GPU (one ConnectX-7 NDR NIC per GPU, DGX H100) = 50 GB/s; 100 Gb/s = 12.5 GB/s
# (one EDR/100 GbE NIC per GPU on older nodes).
NIC_400G_GBps = 50.0
NIC_100G_GBps = 12.5


@dataclasses.dataclass(frozen=True, kw_only=True)
class Pool:
    """``nodes`` x ``gpus_per_node`` GPUs of one type, their intra- and inter-node links."""

    name: str
    gpu: GPU
    nodes: int
    gpus_per_node: int
    intra_Bps: float
    inter_Bps: float
    intra_latency_s: float
    inter_latency_s: float

    def __post_init__(self) -> None:
        for fields, ok, what in ((("nodes", "gpus_per_node"),
                                  lambda v: isinstance(v, int) and 1 <= v <= CLUSTER_INT_MAX,
                                  f"an integer in [1, {CLUSTER_INT_MAX:,}]"),
                                 (("intra_Bps", "inter_Bps"), lambda v: isinstance(v, float | int) and 0 < v < math.inf,
                                  "a finite positive bandwidth in B/s"),
                                 (("intra_latency_s", "inter_latency_s"),
                                  lambda v: isinstance(v, float | int) and 0 <= v <= MAX_LATENCY_S,
                                  f"a latency in [0, {MAX_LATENCY_S:g}] s")):
            for f in fields:
                if isinstance(v := getattr(self, f), bool) or not ok(v):
                    raise InputError(f"pools[{self.name}].{f}", what, v)

    @property
    def num_gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclasses.dataclass(frozen=True, kw_only=True)
class HeteroCluster:
    """Pools and the links between them.

    ``link_Bps[i][j]`` / ``link_latency_s[i][j]``: the link between pools i and j (i != j),
    per GPU per direction; the diagonal is unused (within a pool the pool's own links apply).
    """

    pools: tuple[Pool, ...]
    link_Bps: tuple[tuple[float, ...], ...]
    link_latency_s: tuple[tuple[float, ...], ...]
    name: str = "hetero"

    def __post_init__(self) -> None:
        P = len(self.pools)
        if P < 1:
            raise InputError("cluster.pools", "at least one pool", P)
        names = [p.name for p in self.pools]
        if len(set(names)) != P:
            raise InputError("cluster.pools", "distinct pool names", names)
        for what, mat in (("links.GBps", self.link_Bps), ("links.latency_us", self.link_latency_s)):
            if len(mat) != P or any(len(r) != P for r in mat):
                raise InputError(f"cluster.{what}", f"a {P} x {P} matrix", [len(r) for r in mat])
        for i in range(P):
            for j in range(P):
                if i != j and not self.link_Bps[i][j] > 0:
                    raise InputError("cluster.links.GBps", "a positive bandwidth", (names[i], names[j]))
                if i != j and not self.link_latency_s[i][j] >= 0:
                    raise InputError("cluster.links.latency_us", "a latency >= 0", (names[i], names[j]))

    @property
    def num_gpus(self) -> int:
        return sum(p.num_gpus for p in self.pools)

    def describe(self) -> str:
        parts = []
        for p in self.pools:
            parts.append(f"{p.name}: {p.nodes}x{p.gpus_per_node} {p.gpu.name} "
                         f"(intra {p.intra_Bps / _GB:g} GB/s, inter {p.inter_Bps / _GB:g} GB/s)")
        return "; ".join(parts)


def as_hetero(cluster: Cluster | HeteroCluster) -> HeteroCluster:
    """A homogeneous cluster as a single pool (the identity on a HeteroCluster)."""
    if isinstance(cluster, HeteroCluster):
        return cluster
    pool = Pool(name=cluster.gpu.name, gpu=cluster.gpu, nodes=cluster.nodes,
                gpus_per_node=cluster.gpus_per_node, intra_Bps=cluster.scaleup_Bps,
                inter_Bps=cluster.scaleout_Bps, intra_latency_s=cluster.scaleup_latency_s,
                inter_latency_s=cluster.scaleout_latency_s)
    return HeteroCluster(pools=(pool,), link_Bps=((0.0,),), link_latency_s=((0.0,),), name=cluster.name)


def make_pool(name: str, gpu: GPU | str, *, nodes: int, gpus_per_node: int = 8,
              intra_GBps: float | None = None, inter_GBps: float | None = None,
              intra_latency_us: float | None = None, inter_latency_us: float | None = None) -> Pool:
    """A pool with the GPU preset's link figures where not given."""
    g = gpu_preset(gpu) if isinstance(gpu, str) else gpu
    return Pool(
        name=name, gpu=g, nodes=nodes, gpus_per_node=gpus_per_node,
        intra_Bps=g.scaleup_Bps if intra_GBps is None else float(intra_GBps) * _GB,
        inter_Bps=g.scaleout_Bps if inter_GBps is None else float(inter_GBps) * _GB,
        intra_latency_s=g.scaleup_latency_s if intra_latency_us is None else float(intra_latency_us) * _US,
        inter_latency_s=g.scaleout_latency_s if inter_latency_us is None else float(inter_latency_us) * _US,
    )


def make_hetero(pools: list[Pool], links: Mapping[tuple[str, str], tuple[float, float]] | None = None,
                *, name: str = "hetero") -> HeteroCluster:
    """Pools joined by ``links[(a, b)] = (B/s, latency s)``; unlisted pairs default to the
    slower of the two pools' inter-node networks and the larger of their latencies."""
    P = len(pools)
    names = [p.name for p in pools]
    bw = [[0.0] * P for _ in range(P)]
    lat = [[0.0] * P for _ in range(P)]
    for i in range(P):
        for j in range(P):
            if i != j:
                bw[i][j] = min(pools[i].inter_Bps, pools[j].inter_Bps)
                lat[i][j] = max(pools[i].inter_latency_s, pools[j].inter_latency_s)
    for (a, b), (Bps, lat_s) in (links or {}).items():
        if a not in names or b not in names:
            raise InputError("cluster.links.between", "two pool names among " + ", ".join(names), [a, b])
        if a == b:
            raise InputError("cluster.links.between", "two different pools", [a, b])
        i, j = names.index(a), names.index(b)
        bw[i][j] = bw[j][i] = Bps
        lat[i][j] = lat[j][i] = lat_s
    return HeteroCluster(pools=tuple(pools), link_Bps=tuple(map(tuple, bw)),
                         link_latency_s=tuple(map(tuple, lat)), name=name)


POOL_FIELDS = ("name", "gpu", "nodes", "gpus_per_node", "intra_GBps", "inter_GBps",
               "intra_latency_us", "inter_latency_us", "efficiency")
LINK_FIELDS = ("between", "GBps", "latency_us")


def _number(value: object, argument: str, *, positive: bool, most: float) -> float:
    """A file's number: > 0 (``positive``) or >= 0, at most ``most`` (MAX_GBPS, MAX_LATENCY_US: past any machine)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(argument, "a number", value)
    if not math.isfinite(value) or (positive and not value > 0) or (not positive and not value >= 0) or value > most:
        raise InputError(argument, f"a number in {'(' if positive else '['}0, {most:g}]", value)
    return float(value)


def _check_entry(entry, where: str, fields) -> None:
    """A pool or link entry of a cluster file: a mapping with keys among ``fields``."""
    if not isinstance(entry, Mapping):
        raise InputError(where, "a mapping", entry)
    bad = set(entry) - set(fields)
    if bad:
        raise InputError(where, "keys among " + ", ".join(fields), sorted(bad, key=str)[0])


def hetero_from_mapping(data: Mapping, *, default_name: str = "hetero") -> HeteroCluster:
    """Build and validate a HeteroCluster from a parsed file (see the module docstring)."""
    unknown = set(data) - {"name", "pools", "links"}
    if unknown:
        raise InputError("cluster", "keys among name, pools, links", sorted(unknown, key=str)[0])
    pools_in = data.get("pools")
    if not isinstance(pools_in, list) or not pools_in:
        raise InputError("cluster.pools", "a non-empty list of pools", pools_in)
    pools = []
    for k, p in enumerate(pools_in):
        where = f"cluster.pools[{k}]"
        _check_entry(p, where, POOL_FIELDS)
        for req in ("gpu", "nodes"):
            if req not in p:
                raise InputError(f"{where}.{req}", "a value", None)
        for f in ("nodes", "gpus_per_node"):
            if f in p and (isinstance(p[f], bool) or not isinstance(p[f], int) or p[f] < 1):
                raise InputError(f"{where}.{f}", "an integer >= 1", p[f])
        opts = {}
        for f in ("intra_GBps", "inter_GBps"):
            if f in p:
                opts[f] = _number(p[f], f"{where}.{f}", positive=True, most=MAX_GBPS)
        for f in ("intra_latency_us", "inter_latency_us"):
            if f in p:
                opts[f] = _number(p[f], f"{where}.{f}", positive=False, most=MAX_LATENCY_US)
        name = p.get("name", p["gpu"])
        if not isinstance(name, str) or not name.strip() or name.strip().isdigit():
            # (a strategy's stages name their pool, or give its index: a name of digits would read as one)
            raise InputError(f"{where}.name", "a name (a string, not a number: stages may give a pool's index)", name)
        gpu = gpu_preset(str(p["gpu"]))
        if "efficiency" in p:  # constants `plansweep calibrate` fits, replacing the preset's (a run directory keeps
            # the ones --hardware gave so)
            gpu = dataclasses.replace(gpu, **efficiency_values(p["efficiency"], f"{where}.efficiency"))
        pools.append(make_pool(str(name), gpu, nodes=p["nodes"], gpus_per_node=p.get("gpus_per_node", 8), **opts))
    names = [p.name for p in pools]
    if len(set(names)) != len(names):
        raise InputError("cluster.pools[].name", "distinct pool names", names)
    links_in = data.get("links", [])
    if not isinstance(links_in, list):
        raise InputError("cluster.links", "a list of links", links_in)
    links = {}
    for k, ln in enumerate(links_in):
        where = f"cluster.links[{k}]"
        _check_entry(ln, where, LINK_FIELDS)
        pair = ln.get("between")
        if not (isinstance(pair, list) and len(pair) == 2):
            raise InputError(f"{where}.between", "a list of two pool names", pair)
        if "GBps" not in ln:
            raise InputError(f"{where}.GBps", "a bandwidth in GB/s", None)
        bw = _number(ln["GBps"], f"{where}.GBps", positive=True, most=MAX_GBPS) * _GB
        lat = _number(ln.get("latency_us", 10.0), f"{where}.latency_us", positive=False, most=MAX_LATENCY_US) * _US
        key = (str(pair[0]), str(pair[1]))
        if key in links or key[::-1] in links:
            raise InputError(f"{where}.between", "one link per pair of pools (a link runs both ways)", pair)
        links[key] = (bw, lat)
    name = data.get("name", default_name)
    if not isinstance(name, str) or not name.strip():
        raise InputError("cluster.name", "a name (a string)", name)
    return make_hetero(pools, links, name=name)


def _efficiency_entry(gpu: GPU) -> dict:
    """A pool entry's "efficiency": the GPU's efficiency constants that differ from its preset's ({} where none do,
    or the GPU is no preset)."""
    try:
        preset = gpu_preset(gpu.name)
    except InputError:
        return {}
    own, base = dataclasses.asdict(efficiency_of(gpu)), dataclasses.asdict(efficiency_of(preset))
    moved = {k: v for k, v in own.items() if v != base[k]}
    return {"efficiency": moved} if moved else {}


def hetero_to_mapping(cluster: HeteroCluster) -> dict:
    """The file form of a cluster (readable again by hetero_from_mapping)."""
    pools = [{"name": p.name, "gpu": p.gpu.name, "nodes": p.nodes, "gpus_per_node": p.gpus_per_node,
              "intra_GBps": p.intra_Bps / _GB, "inter_GBps": p.inter_Bps / _GB,
              "intra_latency_us": p.intra_latency_s / _US, "inter_latency_us": p.inter_latency_s / _US,
              **_efficiency_entry(p.gpu)}
             for p in cluster.pools]
    links = []
    P = len(cluster.pools)
    for i in range(P):
        for j in range(i + 1, P):
            links.append({"between": [cluster.pools[i].name, cluster.pools[j].name],
                          "GBps": cluster.link_Bps[i][j] / _GB, "latency_us": cluster.link_latency_s[i][j] / _US})
    return {"name": cluster.name, "pools": pools, "links": links}


# Presets. Inter-pool links: the slower side's NICs bound the traffic between two pools.
def _preset_mixed() -> HeteroCluster:
    # 8 DGX A100 (8x HDR 200 Gb/s = 25 GB/s per GPU) beside 8 DGX H100 (8x NDR 400 Gb/s).
    return make_hetero([make_pool("a100", "a100", nodes=8), make_pool("h100", "h100", nodes=8)],
                       name="a100x64+h100x64")


def _preset_nic_generations() -> HeteroCluster:
    # H100 nodes on 400 Gb/s per GPU next to older A100 nodes on 100 Gb/s per GPU.
    return make_hetero([
        make_pool("h100-400g", "h100", nodes=8, inter_GBps=NIC_400G_GBps),
        make_pool("a100-100g", "a100", nodes=8, inter_GBps=NIC_100G_GBps),
    ], name="h100x64-400g+a100x64-100g")


def _preset_pcie_fast_network() -> HeteroCluster:
    # 8 nodes of 8 A100 PCIe-attached (no NVLink) with one 400 Gb/s NIC per GPU: the network
    # between nodes (50 GB/s per GPU) beats the PCIe link inside a node (about 12 GB/s).
    return make_hetero([make_pool("a100-pcie", "a100", nodes=8, intra_GBps=PCIE_GEN4_NODE_BUSBW_GBps,
                                  intra_latency_us=PCIE_LATENCY_US, inter_GBps=NIC_400G_GBps)],
                       name="pcie-a100x64-fastnet")


HETERO_PRESETS = {
    "a100x64+h100x64": _preset_mixed,
    "h100x64-400g+a100x64-100g": _preset_nic_generations,
    "pcie-a100x64-fastnet": _preset_pcie_fast_network,
}


def hetero_names() -> list[str]:
    return [*HETERO_PRESETS, "<gpu>x<N>+<gpu>x<N>[+...]"]


def hetero_preset(name: str) -> HeteroCluster:
    """A named mixed cluster (HETERO_PRESETS), or pools written as homogeneous clusters joined by
    "+" (a100x32+h100x64: each part a cluster preset, as costmodel.cluster_preset reads it, its
    pool named after its GPU; the links between pools the slower side's NICs, as make_hetero)."""
    key = name.lower()
    if key in HETERO_PRESETS:
        return HETERO_PRESETS[key]()
    if "+" not in key:
        raise InputError("cluster", "one of " + ", ".join(hetero_names()), name)
    pools, names = [], []
    for part in key.split("+"):
        try:
            c = cluster_preset(part)
        except InputError as exc:
            raise InputError("cluster", f"pools joined by + ({exc.expected})", part) from None
        pool_name = part.rsplit("x", 1)[0] if "x" in part else part
        names.append(pool_name)
        pool_name = pool_name if names.count(pool_name) == 1 else f"{pool_name}-{names.count(pool_name)}"
        pools.append(Pool(name=pool_name, gpu=c.gpu, nodes=c.nodes, gpus_per_node=c.gpus_per_node,
                          intra_Bps=c.scaleup_Bps, inter_Bps=c.scaleout_Bps, intra_latency_s=c.scaleup_latency_s,
                          inter_latency_s=c.scaleout_latency_s))
    return make_hetero(pools, name=key)
