"""The cluster's constants a planner's answer rests on, moved one at a time: what if the GPUs, the links or the host
are not what the presets say.

A knob scales the figures of one kind on every GPU type and link of a cluster (every pool of a heterogeneous one):

    compute           the GPU's dense peak FLOP/s at every precision (GEMMs and attention, whose efficiencies are
                      fractions of it)
    memory-bandwidth  the GPU's HBM bytes per second (element-wise and other memory-bound kernels, the optimizer)
    nvlink            the scale-up link's bytes per second (within a node; within a pool)
    network           the scale-out network's bytes per second (between nodes; and the links between pools)
    latency           every link's per-step latency
    kernel-overhead   the launch and synchronisation time charged per sub-layer

Capacity (HBM bytes) is not a knob: it decides what fits, not how fast, and the plans compared are the same.
"""

from __future__ import annotations

import dataclasses
import math

from costmodel._errors import InputError
from costmodel._hardware import Cluster
from costmodel._hetero_cluster import HeteroCluster

KNOBS = ("compute", "memory-bandwidth", "nvlink", "network", "latency", "kernel-overhead")


def _gpu(gpu, knob: str, f: float):
    if knob == "compute":
        return dataclasses.replace(gpu, peak_flops=tuple(p * f for p in gpu.peak_flops))
    if knob == "memory-bandwidth":
        return dataclasses.replace(gpu, hbm_Bps=gpu.hbm_Bps * f)
    if knob == "nvlink":
        return dataclasses.replace(gpu, scaleup_Bps=gpu.scaleup_Bps * f)
    if knob == "network":
        return dataclasses.replace(gpu, scaleout_Bps=gpu.scaleout_Bps * f)
    if knob == "latency":
        return dataclasses.replace(gpu, scaleup_latency_s=gpu.scaleup_latency_s * f,
                                   scaleout_latency_s=gpu.scaleout_latency_s * f)
    return dataclasses.replace(gpu, kernel_overhead_s=gpu.kernel_overhead_s * f)


def _one(cluster, knob: str, f: float):
    if isinstance(cluster, HeteroCluster):
        pools = []
        for p in cluster.pools:
            links = {"nvlink": {"intra_Bps": p.intra_Bps * f}, "network": {"inter_Bps": p.inter_Bps * f},
                     "latency": {"intra_latency_s": p.intra_latency_s * f,
                                 "inter_latency_s": p.inter_latency_s * f}}.get(knob, {})
            pools.append(dataclasses.replace(p, gpu=_gpu(p.gpu, knob, f), **links))
        links = {}
        if knob == "network":
            links["link_Bps"] = tuple(tuple(x * f for x in row) for row in cluster.link_Bps)
        if knob == "latency":
            links["link_latency_s"] = tuple(tuple(x * f for x in row) for row in cluster.link_latency_s)
        return dataclasses.replace(cluster, pools=tuple(pools), **links)
    links = {"nvlink": {"scaleup_Bps": cluster.scaleup_Bps * f}, "network": {"scaleout_Bps": cluster.scaleout_Bps * f},
             "latency": {"scaleup_latency_s": cluster.scaleup_latency_s * f,
                         "scaleout_latency_s": cluster.scaleout_latency_s * f}}.get(knob, {})
    return dataclasses.replace(cluster, gpu=_gpu(cluster.gpu, knob, f), **links)


def moved_cluster(cluster: Cluster | HeteroCluster, changes) -> Cluster | HeteroCluster:
    """``cluster`` with each (knob, factor) of ``changes`` applied (KNOBS, module docstring): the same cluster, GPU
    names and capacities, its figures of that kind times the factor."""
    for knob, f in changes:
        if knob not in KNOBS:
            raise InputError("knob", "one of " + ", ".join(KNOBS), knob)
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not (0 < f < math.inf):
            raise InputError(knob, "a factor > 0", f)
        cluster = _one(cluster, knob, float(f))
    return cluster
