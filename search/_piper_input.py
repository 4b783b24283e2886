"""Piper's JSON layer graphs, parsed and validated once into frozen structures.

The format is the one of msr-fiddle/piper (inputs/*.json) with the corrections recorded in
``shared/data/README.md``: the batch key is ``mbsInBatch``; ``syncTimeFw`` is keyed by the
node's incoming neighbours and ``syncTimeBw`` by its outgoing ones, each listing every such
neighbour, values in bytes. Every bad value raises :class:`costmodel.InputError` naming the
key, what was expected and what arrived.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from costmodel import InputError
from costmodel._files import read_text

# Piper's planner chooses, per node and tensor degree, between the plain TMPC and one with
# activation recomputation; more than two options per (node, t) are not part of the format.
MAX_TMPCS_PER_DEGREE = 2
# Piper's loose upper bound on the number of devices in any reasonable input (algo.cpp,
# DEVICES_LIMIT); it also bounds the DP tables here (tails x (K + 1) integers).
MAX_DEVICES = 10_000
# A TMPC whose id contains this (case-insensitive) is the activation-recomputation one;
# Piper's inputs name them "vanilla" and "activation recomp".
RECOMPUTE_TMPC_MARK = "recomp"


@dataclass(frozen=True)
class Tmpc:
    """One tensor-model-parallel configuration of a node for one tensor degree t."""

    name: str
    time_per_sample_s: float  # p: forward + backward compute per sample
    parameter_bytes: float  # w: weights, resynchronised across data-parallel replicas
    memory_a_bytes: float  # a: memory per micro-batch in flight
    memory_b_bytes: float  # b: fixed memory
    sync_fw_bytes: tuple[float, ...]  # per incoming edge, in PiperGraph.in_edges[v] order
    sync_bw_bytes: tuple[float, ...]  # per outgoing edge, in PiperGraph.out_edges[v] order

    @property
    def recompute(self) -> bool:
        return RECOMPUTE_TMPC_MARK in self.name.lower()


@dataclass(frozen=True)
class PiperNode:
    id: int  # the id in the input file
    name: str
    tmpcs: tuple[tuple[int, tuple[Tmpc, ...]], ...]  # (t, options), t ascending

    def options(self, t: int) -> tuple[Tmpc, ...]:
        for degree, opts in self.tmpcs:
            if degree == t:
                return opts
        return ()


@dataclass(frozen=True)
class PiperGraph:
    """A validated Piper instance. Nodes are in topological order; edges index into them."""

    max_devices: int  # K
    max_memory_bytes: float  # M, per device
    bandwidth_Bps: float  # B, from each device to the outside
    microbatches: int  # N = mbsInBatch, micro-batches of size 1 per batch
    nodes: tuple[PiperNode, ...]
    edge_src: tuple[int, ...]  # node index (topological position)
    edge_dst: tuple[int, ...]
    edge_bytes: tuple[float, ...]  # c: communication cost of the edge
    in_edges: tuple[tuple[int, ...], ...]  # per node, indices of its incoming edges
    out_edges: tuple[tuple[int, ...], ...]  # per node, indices of its outgoing edges

    @property
    def degrees(self) -> tuple[int, ...]:
        """Every tensor degree t that some node offers, ascending."""
        return tuple(sorted({t for node in self.nodes for t, opts in node.tmpcs if opts}))


@dataclass(frozen=True)
class DegreeArrays:
    """Numpy view of all nodes' TMPCs for one tensor degree t; option 1 repeats option 0
    where a node has a single TMPC."""

    t: int
    available: np.ndarray  # (n,) bool: every node in a stage must offer t
    n_options: np.ndarray  # (n,) int: 1 or 2
    time_s: np.ndarray  # (n, 2) p
    param_bytes: np.ndarray  # (n, 2) w
    mem_a_bytes: np.ndarray  # (n, 2) a
    mem_b_bytes: np.ndarray  # (n, 2) b
    sync_in_bytes: np.ndarray  # (E, 2) sync of the edge's head for each of its options
    sync_out_bytes: np.ndarray  # (E, 2) sync of the edge's tail for each of its options


def load_piper_graph(path: str | Path) -> PiperGraph:
    """Read and validate a Piper JSON file; a bad value is named by the file and its key."""
    p = Path(path)
    text = read_text(p, "FILE", "Piper JSON file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError("FILE", "valid JSON", f"{p}: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    try:
        return parse_piper_graph(data)
    except InputError as exc:
        raise InputError(f"{p} {exc.argument}", exc.expected, exc.got) from None


def parse_piper_graph(data: object) -> PiperGraph:
    """Validate a decoded Piper JSON document and freeze it (nodes in topological order)."""
    doc = _mapping(data, "Piper JSON document")
    max_devices = _int(_key(doc, "maxDevices", ""), "maxDevices", minimum=1, maximum=MAX_DEVICES)
    max_memory = _number(_key(doc, "maxMemoryPerDevice", ""), "maxMemoryPerDevice", positive=True)
    bandwidth = _number(_key(doc, "bandwidth", ""), "bandwidth", positive=True)
    microbatches = _int(_key(doc, "mbsInBatch", ""), "mbsInBatch", minimum=1)
    raw_nodes = _list(_key(doc, "nodes", ""), "nodes")
    raw_edges = _list(_key(doc, "edges", ""), "edges")
    if not raw_nodes:
        raise InputError("nodes", "at least one node", raw_nodes)

    ids = [_int(_key(_mapping(n, f"nodes[{i}]"), "id", f"nodes[{i}]."), f"nodes[{i}].id")
           for i, n in enumerate(raw_nodes)]
    position = {}
    for i, node_id in enumerate(ids):
        if node_id in position:
            raise InputError(f"nodes[{i}].id", "a unique node id", node_id)
        position[node_id] = i
    src, dst, cost = _parse_edges(raw_edges, position)
    order = _topological_order(len(ids), src, dst)
    rank = {old: new for new, old in enumerate(order)}

    edge_src = tuple(rank[s] for s in src)
    edge_dst = tuple(rank[d] for d in dst)
    in_edges = tuple(tuple(e for e, d in enumerate(edge_dst) if d == v) for v in range(len(ids)))
    out_edges = tuple(tuple(e for e, s in enumerate(edge_src) if s == v) for v in range(len(ids)))
    nodes = tuple(  # each node with the ids of its incoming and outgoing neighbours, in edge order
        _parse_node(raw_nodes[old], old, [ids[s] for s, d in zip(src, dst, strict=True) if d == old],
                    [ids[d] for s, d in zip(src, dst, strict=True) if s == old])
        for old in order
    )
    return PiperGraph(max_devices=max_devices, max_memory_bytes=max_memory, bandwidth_Bps=bandwidth,
                      microbatches=microbatches, nodes=nodes, edge_src=edge_src, edge_dst=edge_dst,
                      edge_bytes=tuple(cost), in_edges=in_edges, out_edges=out_edges)


def with_overrides(graph: PiperGraph, *, devices: int | None = None, memory_bytes: float | None = None,
                   microbatches: int | None = None, bandwidth_Bps: float | None = None) -> PiperGraph:
    """The same graph with the cluster values replaced where given (validated)."""
    return replace(
        graph,
        max_devices=graph.max_devices if devices is None
        else _int(devices, "--devices", minimum=1, maximum=MAX_DEVICES),
        max_memory_bytes=graph.max_memory_bytes if memory_bytes is None
        else _number(memory_bytes, "--memory", positive=True),
        microbatches=graph.microbatches if microbatches is None
        else _int(microbatches, "--microbatches", minimum=1),
        bandwidth_Bps=graph.bandwidth_Bps if bandwidth_Bps is None
        else _number(bandwidth_Bps, "--bandwidth", positive=True),
    )


def degree_arrays(graph: PiperGraph, t: int) -> DegreeArrays:
    """Stack every node's TMPCs for tensor degree t into (n, 2) arrays."""
    n, n_edges = len(graph.nodes), len(graph.edge_src)
    available = np.zeros(n, dtype=bool)
    n_options = np.ones(n, dtype=np.int64)
    fields = np.zeros((4, n, MAX_TMPCS_PER_DEGREE))  # p, w, a, b
    sync_in = np.zeros((n_edges, MAX_TMPCS_PER_DEGREE))
    sync_out = np.zeros((n_edges, MAX_TMPCS_PER_DEGREE))
    for v, node in enumerate(graph.nodes):
        opts = node.options(t)
        if not opts:
            continue
        available[v] = True
        n_options[v] = len(opts)
        for slot in range(MAX_TMPCS_PER_DEGREE):
            tm = opts[min(slot, len(opts) - 1)]
            fields[:, v, slot] = (tm.time_per_sample_s, tm.parameter_bytes, tm.memory_a_bytes, tm.memory_b_bytes)
            for k, e in enumerate(graph.in_edges[v]):
                sync_in[e, slot] = tm.sync_fw_bytes[k]
            for k, e in enumerate(graph.out_edges[v]):
                sync_out[e, slot] = tm.sync_bw_bytes[k]
    return DegreeArrays(t, available, n_options, fields[0], fields[1], fields[2], fields[3], sync_in, sync_out)


# --- parsing helpers -------------------------------------------------------------------------


def _parse_edges(raw_edges: list, position: Mapping[int, int]):
    src, dst, cost, seen = [], [], [], set()
    for i, raw in enumerate(raw_edges):
        where = f"edges[{i}]"
        e = _mapping(raw, where)
        s = _int(_key(e, "sourceId", where + "."), where + ".sourceId")
        d = _int(_key(e, "destId", where + "."), where + ".destId")
        c = _number(_key(e, "communicationCost", where + "."), where + ".communicationCost")
        for key, node_id in (("sourceId", s), ("destId", d)):
            if node_id not in position:
                raise InputError(f"{where}.{key}", "the id of a node in nodes", node_id)
        if s == d:
            raise InputError(where, "an edge between two different nodes", f"{s}->{d}")
        if (s, d) in seen:
            raise InputError(where, "no duplicated edge", f"{s}->{d}")
        seen.add((s, d))
        src.append(position[s])
        dst.append(position[d])
        cost.append(c)
    return src, dst, cost


def _topological_order(n: int, src: list[int], dst: list[int]) -> list[int]:
    """Kahn's algorithm, smallest input position first so the order is deterministic."""
    indegree = [0] * n
    succ: list[list[int]] = [[] for _ in range(n)]
    for s, d in zip(src, dst, strict=True):
        indegree[d] += 1
        succ[s].append(d)
    ready = sorted(v for v in range(n) if indegree[v] == 0)
    order: list[int] = []
    while ready:
        v = ready.pop(0)
        order.append(v)
        for w in succ[v]:
            indegree[w] -= 1
            if indegree[w] == 0:
                ready.append(w)
        ready.sort()
    if len(order) != n:
        raise InputError("edges", "an acyclic graph", f"a cycle through {n - len(order)} nodes")
    return order


def _parse_node(raw: object, i: int, in_ids: list[int], out_ids: list[int]) -> PiperNode:
    where = f"nodes[{i}]"
    node = _mapping(raw, where)
    name = node.get("name", "")
    if not isinstance(name, str):
        raise InputError(where + ".name", "a string", name)
    tmpcs_raw = _mapping(_key(node, "TMPCs", where + "."), where + ".TMPCs")
    per_degree: list[tuple[int, tuple[Tmpc, ...]]] = []
    for key, options in tmpcs_raw.items():
        t = _degree_key(key, f"{where}.TMPCs")
        if any(t == seen for seen, _ in per_degree):
            raise InputError(f"{where}.TMPCs", "each tensor degree once", key)
        opts_raw = _list(options, f"{where}.TMPCs[{key!r}]")
        if len(opts_raw) > MAX_TMPCS_PER_DEGREE:
            raise InputError(f"{where}.TMPCs[{key!r}]", f"at most {MAX_TMPCS_PER_DEGREE} TMPCs (plain, recompute)",
                             f"{len(opts_raw)} TMPCs")
        opts = tuple(_parse_tmpc(o, f"{where}.TMPCs[{key!r}][{j}]", in_ids, out_ids) for j, o in enumerate(opts_raw))
        names = [o.name for o in opts]
        if len(set(names)) != len(names):
            raise InputError(f"{where}.TMPCs[{key!r}]", "distinct TMPC ids", names)
        per_degree.append((t, opts))
    if not any(opts for _, opts in per_degree):
        raise InputError(where + ".TMPCs", "at least one TMPC for some tensor degree", tmpcs_raw)
    return PiperNode(id=int(node["id"]), name=name, tmpcs=tuple(sorted(per_degree)))


def _parse_tmpc(raw: object, where: str, in_ids: list[int], out_ids: list[int]) -> Tmpc:
    tm = _mapping(raw, where)
    name = _key(tm, "id", where + ".")
    if not isinstance(name, str) or not name:
        raise InputError(where + ".id", "a non-empty string", name)

    def num(key: str) -> float:
        return _number(_key(tm, key, where + "."), f"{where}.{key}")

    return Tmpc(name=name, time_per_sample_s=num("timePerSample"), parameter_bytes=num("parameterSize"),
                memory_a_bytes=num("memoryUsageA"), memory_b_bytes=num("memoryUsageB"),
                sync_fw_bytes=_sync(_key(tm, "syncTimeFw", where + "."), where + ".syncTimeFw", in_ids, "incoming"),
                sync_bw_bytes=_sync(_key(tm, "syncTimeBw", where + "."), where + ".syncTimeBw", out_ids, "outgoing"))


def _sync(raw: object, where: str, neighbour_ids: list[int], side: str) -> tuple[float, ...]:
    table = _mapping(raw, where)
    values = {}
    for key, value in table.items():
        try:
            neighbour = int(key)
        except (TypeError, ValueError):
            raise InputError(where, "node ids as keys", key) from None
        if neighbour not in neighbour_ids:
            raise InputError(where, f"keys that are the node's {side} neighbours {sorted(neighbour_ids)}", key)
        values[neighbour] = _number(value, f"{where}[{key!r}]")
    missing = [u for u in neighbour_ids if u not in values]
    if missing:
        raise InputError(where, f"an entry for every {side} neighbour {sorted(neighbour_ids)}", f"none for {missing}")
    return tuple(values[u] for u in neighbour_ids)


def _degree_key(key: object, where: str) -> int:
    try:
        t = int(str(key))
    except ValueError:
        raise InputError(where, "tensor degrees (positive integers) as keys", key) from None
    if not 1 <= t <= MAX_DEVICES:
        raise InputError(where, f"tensor degrees (integers 1 to {MAX_DEVICES}) as keys", key)
    return t


def _key(obj: Mapping, key: str, prefix: str) -> object:
    if key not in obj:
        raise InputError(prefix + key, "a value (the key is required)", "missing key")
    return obj[key]


def _mapping(obj: object, where: str) -> Mapping:
    if not isinstance(obj, Mapping):
        raise InputError(where, "a JSON object", type(obj).__name__)
    return obj


def _list(obj: object, where: str) -> list:
    if not isinstance(obj, list):
        raise InputError(where, "a JSON array", type(obj).__name__)
    return obj


def _int(value: object, where: str, *, minimum: int = 0, maximum: int | None = None) -> int:
    expected = f"an integer >= {minimum}" + ("" if maximum is None else f" and <= {maximum}")
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or (isinstance(value, float) and not value.is_integer())
            or value < minimum or (maximum is not None and value > maximum)):
        raise InputError(where, expected, value)
    return int(value)


def _number(value: object, where: str, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(where, "a number", value)
    x = float(value)
    if not math.isfinite(x) or x < 0 or (positive and x == 0):
        raise InputError(where, "a finite number > 0" if positive else "a finite number >= 0", value)
    return x
