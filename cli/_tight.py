"""Plans within a tenth of their GPU's memory: marked tight where rows are printed (rank, show, sweep, evaluate).

A plan is held to the memory of the GPU its worst stage runs on (the evaluator's ``mem_device_bytes``: on a mixed
cluster each stage's own pool's GPU); rows written before that column are held to their preset cluster's GPU.
"""

from __future__ import annotations

import math

from costmodel import InputError, cluster_preset

# A plan whose bytes a GPU, times TIGHT_MEMORY, pass its GPU's memory is marked tight ("!"): the cost model prices the
# live tensors and a 2 GB reserve, while the caching allocator's reserved peak ran 9.9% above the model's figure on
# average over the 20 published torchtitan runs that give one (plansweep validate's reserved peaks), so within about
# a tenth of the device's memory a plan may not fit as run.
TIGHT_MEMORY = 1.10
TIGHT_PHRASE = ", tight: within a tenth of it (the allocator may need the rest)"  # after "X GB of Y GB"
TIGHT_NOTE = ("! within a tenth of its GPU's memory: tight (the allocator's reserved peak has run 10% above the "
              "model's bytes); measure it before a long run")


def device_bytes(cluster_name) -> float | None:
    """The memory of one GPU of the preset cluster called ``cluster_name``; None for a cluster that is not a preset
    or mixes GPU types."""
    try:
        gpu = getattr(cluster_preset(str(cluster_name)), "gpu", None)
    except (InputError, ValueError, KeyError):
        return None
    return None if gpu is None else float(gpu.hbm_bytes)


def is_tight(mem, hbm) -> bool:
    """Whether ``mem`` bytes a GPU are within a tenth of ``hbm`` (TIGHT_MEMORY)."""
    return bool(mem and hbm and mem * TIGHT_MEMORY > hbm)


def row_device_bytes(row: dict, cluster_name=None) -> float | None:
    """The memory ``row``'s bytes (``mem_total_bytes``) are held to: its ``mem_device_bytes`` where it has one (any
    cluster), else one GPU of the preset cluster ``cluster_name`` (None where neither says)."""
    dev = row.get("mem_device_bytes")
    if dev is not None and math.isfinite(dev) and dev > 0:
        return float(dev)
    return device_bytes(cluster_name) if cluster_name else None


def memory_entry(m: dict) -> dict:
    """``evaluate --json``'s ``memory`` of one row's plain metrics ``m``: the device memory its worst stage is held
    to and whether it is tight."""
    dev = row_device_bytes(m)
    return {"device_bytes": dev, "tight": bool(m["feasible"]) and is_tight(m["mem_total_bytes"], dev)}
