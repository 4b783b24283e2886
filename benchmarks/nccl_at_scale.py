"""Published NCCL collective times against the model's pricing of the same collective on the same machine.

    PYTHONPATH=. python3 benchmarks/nccl_at_scale.py

Each row of tests/data/nccl_scale_measured.csv (a published nccl-tests figure, its source and machine) is priced as the
evaluator prices a collective: costmodel._collectives.collective_s over the link costmodel._collectives.collective_link
gives the group (the GPU preset's link figures and efficiency; a group of n ranks alone on n GPUs of one node is priced
inside the node). A row that forced NCCL_ALGO=Ring is priced by the ring alone (its fastest protocol for the message);
a row where NCCL chose is priced by the model's own choice (ring, tree or PAT: NVLink SHARP is not priced).

Printed per row: the measured and modelled time (us) and bus bandwidth (GB/s), the model's error (model / measured - 1:
negative = the model fast), and for the in-node ring rows the per-step cost the measurements imply (the slope of time
against the ring's 2 (n - 1) steps, least squares) next to the model's.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from costmodel._collectives import CollectiveTerms, collective_link, collective_terms, pick
from costmodel._hardware import gpu_preset
from costmodel._nccl import ll_one_node_Bps

CSV = Path(__file__).resolve().parent.parent / "tests" / "data" / "nccl_scale_measured.csv"
KIND = {"all_reduce": "all_reduce", "all_gather": "gather", "reduce_scatter": "gather"}
RING_CANDIDATES = 3  # collective_terms lists the ring under LL, LL128 and Simple first


def read_rows(path: Path = CSV) -> list[dict]:
    """The CSV's rows ('#' lines are its header comment)."""
    with path.open() as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def bus_factor(collective: str, n: int) -> float:
    """nccl-tests' busBw / algBw: 2 (n - 1) / n for an all-reduce, (n - 1) / n for an all-gather or reduce-scatter."""
    return (2.0 if collective == "all_reduce" else 1.0) * (n - 1) / n


def model_s(row: dict) -> float:
    """Seconds the model gives the row's collective (module docstring)."""
    gpu = gpu_preset(row["gpu"])
    n, per_node = int(row["gpus"]), int(row["gpus_per_node"])
    g = per_node if n > per_node else n  # one group alone on its GPUs: a node of n when it fits one
    link = collective_link(1, n, g, gpu.scaleup_Bps, gpu.scaleout_Bps, gpu.scaleup_latency_s, gpu.scaleout_latency_s,
                           gpu.link_eff)
    link = link._replace(ll_node_Bps=np.broadcast_to(ll_one_node_Bps(gpu.name), np.shape(link.bw)))
    terms = collective_terms(KIND[row["collective"]], n, link)
    if row["algorithm"] == "ring":
        k = RING_CANDIDATES
        terms = CollectiveTerms(terms.b[:k], terms.l[:k], terms.ok[:k], terms.tree[:k])
    msg = float(row["msg_bytes"])
    b, lat = pick(terms, msg)
    return float(b * msg + lat)


def measured_s(row: dict) -> float:
    """The row's measured seconds: its time, or its message over its bus bandwidth / the bus factor."""
    if row["time_us"]:
        return float(row["time_us"]) * 1e-6
    n = int(row["gpus"])
    return float(row["msg_bytes"]) * bus_factor(row["collective"], n) / (float(row["busbw_GBps"]) * 1e9)


def step_slope_us(rows: list[dict], values: list[float]) -> tuple[float, float]:
    """(us per ring step, us at zero steps): least squares of ``values`` (s) against the rows' 2 (n - 1) steps."""
    steps = np.array([2.0 * (int(r["gpus"]) - 1) for r in rows])
    slope, icept = np.polyfit(steps, np.array(values) * 1e6, 1)
    return float(slope), float(icept)


def main() -> None:
    rows = read_rows()
    print(f"{'source':15s} {'coll':10s} {'algo':7s} {'GPUs':>5s} {'/node':>5s} {'msg B':>11s} "
          f"{'meas us':>9s} {'model us':>9s} {'meas GB/s':>9s} {'model GB/s':>10s} {'err%':>6s}")
    meas, mod = [], []
    for r in rows:
        m, p = measured_s(r), model_s(r)
        meas.append(m)
        mod.append(p)
        n, msg = int(r["gpus"]), float(r["msg_bytes"])
        f = bus_factor(r["collective"], n)
        print(f"{r['source']:15s} {r['collective']:10s} {r['algorithm']:7s} {n:5d} {int(r['gpus_per_node']):5d} "
              f"{int(msg):11d} {m * 1e6:9.1f} {p * 1e6:9.1f} {msg * f / m / 1e9:9.2f} {msg * f / p / 1e9:10.2f} "
              f"{100.0 * (p / m - 1.0):+6.1f}")
    in_node = [i for i, r in enumerate(rows) if r["algorithm"] == "ring" and int(r["gpus"]) <= int(r["gpus_per_node"])]
    if len(in_node) >= 2:
        sel = [rows[i] for i in in_node]
        ms, mi = step_slope_us(sel, [meas[i] for i in in_node])
        ps, pi = step_slope_us(sel, [mod[i] for i in in_node])
        print(f"\nin-node ring rows ({len(sel)}): measured {ms:.2f} us a step + {mi:.1f} us; "
              f"model {ps:.2f} us a step + {pi:.1f} us")


if __name__ == "__main__":
    main()
