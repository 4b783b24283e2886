"""Collective times measured with NVIDIA's nccl-tests on the user's cluster: read from the tests' logs, priced as
the model prices the same collective (costmodel._collectives), and the cluster's link constants fitted to them.

A log is what all_reduce_perf, all_gather_perf or reduce_scatter_perf prints (NVIDIA/nccl-tests a0b82b2, version
2.19.6, src/util.cu; earlier versions print the same table): the "# Collective test starting: NAME" line (or, before
it existed, a file name holding the collective's name) says which collective; the "#  Rank R Group G Pid P on HOST
device D [BUS] NAME" lines say how many ranks ran on how many hosts and on which GPU; each table row gives the size
in bytes and the out-of-place time in microseconds. The size is the whole buffer: gathered for an all-gather
(recvcount x ranks), reduced for a reduce-scatter, the buffer of an all-reduce (src/all_gather.cu,
reduce_scatter.cu: AllGatherGetCollByteCount, ReduceScatterGetCollByteCount; common.cu prints max(send, receive)
bytes), the message costmodel._collectives.collective_s takes.

The fit (``fit_links``) moves the three constants of a GPU type that price its collectives (costmodel._hardware
Efficiency): link_eff (the share of the links' bandwidth NCCL's Simple protocol reaches), scaleup_latency_s and
scaleout_latency_s (a ring step inside a node and across nodes, scaled per algorithm and protocol as NCCL's tables
scale them), each by multiplicative steps from the current value while the mean |ln(model / measured)| over every
row falls: large messages settle the efficiency, small ones the latencies. A latency no log exercises (no log
spans two nodes, or none has two ranks on a node) is left as it was. What the model does not price, NVLink SHARP
(NVLS) and CollNet, a log that used them measures beyond what the ring, tree and PAT reach: record with
NCCL_NVLS_ENABLE=0 NCCL_COLLNET_ENABLE=0 to calibrate what is priced.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import numpy as np

from costmodel._collectives import collective_link, collective_terms, pick
from costmodel._errors import InputError
from costmodel._files import read_text
from costmodel._hardware import GPU, gpu_preset, resolve_gpu_name
from costmodel._nccl import ll_one_node_Bps

# The collectives a log may hold: nccl-tests' program name -> (plansweep's name, collective_terms' kind).
COLLECTIVES = {"all_reduce": "all_reduce", "all_gather": "gather", "reduce_scatter": "gather"}
FITTED = ("link_eff", "scaleup_latency_s", "scaleout_latency_s")
# Multiplicative steps of the coordinate descent, and its sweeps over the three constants.
STEPS = (0.5, 0.7, 0.85, 0.93, 0.97, 0.99, 1.01, 1.03, 1.08, 1.18, 1.4, 2.0)
SWEEPS = 40
# The latencies' first placement: these multiples of the current value (1/16 to 16).
LATENCY_GRID = tuple(2.0 ** (k / 4.0) for k in range(-16, 17))

_STARTING = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
# (nccl-tests before 2.11 print no "Group", and no "root" column in the table: the header says where the time is)
_RANK = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+"
                   r"\[[^\]]*\]\s*(.*?)\s*$")
# mpirun --tag-output's prefix on every line ("[1,0]<stdout>:")
_TAG = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:")


@dataclasses.dataclass(frozen=True)
class NcclLog:
    """One nccl-tests log: its collective (a COLLECTIVES key), ranks on ``nodes`` hosts of ``per_node`` each, the
    GPU its devices name (None where the log names none), and per table row the size (bytes) and the out-of-place
    time (s)."""

    path: str
    collective: str
    ranks: int
    nodes: int
    per_node: int
    gpu_name: str | None
    size_bytes: np.ndarray
    time_s: np.ndarray


def _collective(text: str, path: str) -> str:
    """The log's collective: its "Collective test starting" line, else its file name (all_gather_perf.log, ag-
    allgather-256.txt: the collective's words with or without their separators)."""
    for line in text.splitlines():
        m = _STARTING.match(line)
        if m:
            name = m.group(1).removesuffix("_perf").removesuffix("_mpi")
            if name not in COLLECTIVES:
                raise InputError(f"--nccl-tests {path}", "a log of all_reduce_perf, all_gather_perf or "
                                 "reduce_scatter_perf (the collectives the model prices from these constants)",
                                 m.group(1))
            return name
    flat = re.sub(r"[^a-z]", "", Path(path).name.lower())
    found = [c for c in COLLECTIVES if c.replace("_", "") in flat]
    if len(found) != 1:
        raise InputError(f"--nccl-tests {path}", "a log with its '# Collective test starting: NAME' line, or a file "
                         "name holding all_reduce, all_gather or reduce_scatter", "neither")
    return found[0]


def parse_nccl_log(text: str, path: str) -> NcclLog:
    """The NcclLog of a log's ``text`` (module docstring); InputError naming the file (and line) where it is not
    one: no rank lines, ranks spread unevenly over the hosts, a table row that does not read, no rows."""
    where = f"--nccl-tests {path}"
    collective = _collective(text, path)
    hosts: dict[str, set[int]] = {}
    names: list[str] = []
    sizes, times = [], []
    at_size, at_time = 0, 5  # the columns of the size and the out-of-place time (the header's "size" and "time")
    for i, raw in enumerate(text.splitlines(), start=1):
        line = _TAG.sub("", raw)
        m = _RANK.match(line)
        if m:
            hosts.setdefault(m.group(2), set()).add(int(m.group(1)))
            names.append(m.group(3))
            continue
        fields = line.split()
        if fields[:1] == ["#"] and "size" in fields and "time" in fields:
            at_size, at_time = fields.index("size") - 1, fields.index("time") - 1
        if not fields or line.lstrip().startswith("#"):
            continue
        try:
            size, time_us = int(fields[at_size]), float(fields[at_time])
        except (IndexError, ValueError):
            raise InputError(f"{where} line {i}", "a table row (size, count, type, redop, root, time, algbw, busbw, "
                             "...)", line.strip()[:80]) from None
        if not (math.isfinite(time_us) and time_us > 0 and size > 0):
            raise InputError(f"{where} line {i}", "a size > 0 B and a time > 0 us", line.strip()[:80])
        sizes.append(size)
        times.append(time_us * 1e-6)
    if not hosts:
        raise InputError(where, "the '#  Rank R Group G Pid P on HOST device D' lines nccl-tests prints",
                         "no rank lines")
    counts = {len(r) for r in hosts.values()}
    if len(counts) != 1:
        raise InputError(where, "the same number of ranks on every host",
                         ", ".join(f"{h}: {len(r)}" for h, r in sorted(hosts.items())))
    if not sizes:
        raise InputError(where, "at least one table row", "none")
    ranks = sum(len(r) for r in hosts.values())
    return NcclLog(path=path, collective=collective, ranks=ranks, nodes=len(hosts), per_node=counts.pop(),
                   gpu_name=names[0] if names and names[0] else None,
                   size_bytes=np.asarray(sizes, dtype=np.float64), time_s=np.asarray(times, dtype=np.float64))


def read_nccl_log(path: str | Path) -> NcclLog:
    """parse_nccl_log of the file ``path``."""
    return parse_nccl_log(read_text(path, f"--nccl-tests {path}", "nccl-tests log"), str(path))


def log_gpu(logs: list[NcclLog], gpu: GPU | None) -> GPU:
    """The GPU the logs ran on: ``gpu`` (from --cluster) where given, else the preset the logs' devices name. Every
    log naming a device must name that GPU type; InputError naming the first log that does not, or that names none
    and no ``gpu`` is given."""
    for log in logs:
        name = resolve_gpu_name(log.gpu_name) if log.gpu_name else None
        if gpu is None:
            if name is None:
                raise InputError(f"--nccl-tests {log.path}", "devices a GPU preset matches (or --cluster naming the "
                                 "GPU)", log.gpu_name or "no device name")
            gpu = gpu_preset(name)
        elif name is not None and name != gpu.name:
            raise InputError(f"--nccl-tests {log.path}", f"a log of {gpu.name} GPUs, as the others (or --cluster)",
                             log.gpu_name)
    assert gpu is not None
    return gpu


def model_s(log: NcclLog, gpu: GPU, scaleup_Bps: float, scaleout_Bps: float, consts: dict | None = None) -> np.ndarray:
    """Seconds the model gives each row of ``log``: the collective over the log's ranks on its hosts, by the
    algorithm and protocol NCCL's tuning model picks for the size (costmodel._collectives.collective_s), on links of
    ``scaleup_Bps`` / ``scaleout_Bps`` per GPU per direction with ``gpu``'s constants, or ``consts``'s (FITTED keys)
    in their place. A log within one host is priced as a node of its ranks."""
    c = {k: getattr(gpu, k) for k in FITTED} | (consts or {})
    g = log.per_node if log.nodes > 1 else log.ranks
    link = collective_link(1, log.ranks, g, scaleup_Bps, scaleout_Bps, c["scaleup_latency_s"],
                           c["scaleout_latency_s"], c["link_eff"])
    link = link._replace(ll_node_Bps=np.broadcast_to(ll_one_node_Bps(gpu.name), np.shape(link.bw)))
    b, lat = pick(collective_terms(COLLECTIVES[log.collective], log.ranks, link), log.size_bytes)
    return b * log.size_bytes + lat


def log_errors(logs: list[NcclLog], gpu: GPU, scaleup_Bps: float, scaleout_Bps: float,
               consts: dict | None = None) -> list[np.ndarray]:
    """Per log, ln(model / measured) of each row."""
    return [np.log(model_s(lg, gpu, scaleup_Bps, scaleout_Bps, consts) / lg.time_s) for lg in logs]


def _loss(logs, gpu, up, out, consts) -> float:
    return float(np.mean(np.abs(np.concatenate(log_errors(logs, gpu, up, out, consts)))))


def fitted_constants(logs: list[NcclLog]) -> tuple[str, ...]:
    """The FITTED constants the logs exercise: link_eff always, the scale-up latency where some log has two ranks on
    a host, the scale-out latency where some log spans two hosts."""
    out = ["link_eff"]
    if any(lg.per_node > 1 for lg in logs):
        out.append("scaleup_latency_s")
    if any(lg.nodes > 1 for lg in logs):
        out.append("scaleout_latency_s")
    return tuple(out)


def _moves(free: tuple[str, ...]) -> list[dict[str, int]]:
    """The descent's directions: each constant alone, and each pair together and against each other ({constant:
    the power its step factor is raised to})."""
    out = [{k: 1} for k in free]
    for i, a in enumerate(free):
        out += [{a: 1, b: s} for b in free[i + 1:] for s in (1, -1)]
    return out


def fit_links(logs: list[NcclLog], gpu: GPU, scaleup_Bps: float, scaleout_Bps: float) -> dict[str, float]:
    """The fitted constants (module docstring): {constant: value} for fitted_constants(logs), link_eff in (0, 1].
    The loss has kinks where NCCL's choice of protocol changes, so the latencies are first placed on a grid of
    LATENCY_GRID x their current values (each in turn, the others held), then the constants move by coordinate
    descent from the best point, alone and in pairs (a kink can stop every single move), with steps that shrink
    when a sweep moves none; never raising the mean |ln(model / measured)| of the start."""
    consts = {k: float(getattr(gpu, k)) for k in FITTED}
    free = fitted_constants(logs)

    def loss(c):
        return _loss(logs, gpu, scaleup_Bps, scaleout_Bps, c)

    def step(c, move, f):
        out = dict(c)
        for k, power in move.items():
            out[k] = c[k] * f ** power
        out["link_eff"] = min(out["link_eff"], 1.0)
        return out

    best = loss(consts)
    for k in free[1:]:  # the latencies: a grid first
        start = consts
        for f in LATENCY_GRID:
            cand = start | {k: start[k] * f}
            if (val := loss(cand)) < best - 1e-12:
                best, consts = val, cand
    steps, moves = STEPS, _moves(free)
    for _ in range(SWEEPS):
        moved = False
        for move in moves:
            for f in steps:
                cand = step(consts, move, f)
                if (val := loss(cand)) < best - 1e-12:
                    best, consts, moved = val, cand, True
        if not moved:
            steps = tuple(1.0 + (f - 1.0) / 4.0 for f in steps)
            if max(steps) - 1.0 < 1e-4:
                break
    return {k: consts[k] for k in free}
