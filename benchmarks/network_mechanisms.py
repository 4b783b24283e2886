"""The data-parallel exchange's mechanisms one at a time on the validation set: each row's error under the model with
the mechanisms switched on in turn (cumulative), per source, per regime and for the rows they were built for.

    PYTHONPATH=. python3 benchmarks/network_mechanisms.py

    before     every collective on one GPU's share of its tier (ring, (n - 1) steps), one collective a pass, the
               AMSP rows under the deepspeed profile (unfused attention)
    +nics      NCCL's link (costmodel._collectives.collective_link): the NICs of the group's ranks on a node, ring /
               tree / PAT latency by NCCL's tuning model; still one collective a pass
    +counts    as many collectives as the framework launches (costmodel._data_parallel.exchange_plan: buckets, FSDP
               units, DeepSpeed's modules, the weight all-gather in DeepSpeed's optimizer step)
    +flash2    the AMSP rows under deepspeed-flash2 (FlashAttention-2, as the runs used): the shipped model
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import math

import numpy as np

import costmodel._collectives as coll
from benchmarks.validation_by_source import CSV, GROUPS, REGIMES, group_of, regime_of
from costmodel._frameworks import FRAMEWORKS
from costmodel._validate import predict, read_runs

ROWS = ("internevo-7b-256gpu-tp1-zero1all", "internevo-7b-1024gpu-tp1-zero1all",
        "internevo-7b-1024gpu-tp1-zero1node", "internevo-7b-1024gpu-tp2-zero1all",
        "amsp-deepspeed-llama7b-8gpu-zero1", "amsp-deepspeed-llama7b-1024gpu-zero1",
        "amsp-deepspeed-llama7b-1024gpu-zero3", "amsp-deepspeed-llama13b-8gpu-zero3",
        "amsp-deepspeed-llama13b-1024gpu-zero3", "mpt-7b-h100-128gpu-s2048")
PLAN_OFF = dict(dp_bucket_elems=(math.inf, 0.0), dp_buckets_need_overlap=False, zero3_gathers=(0.0, 1.0, 0.0),
                zero3_kept=(0.0, 0.0, 0.0), weight_gather_in_step=False)


@contextlib.contextmanager
def _variant(nics: bool, counts: bool, flash2: bool):
    """The model with the mechanisms switched as named (module docstring), restored on exit."""
    saved_fw, saved_link = dict(FRAMEWORKS), coll.collective_link
    try:
        if not nics:  # every step on group_link's tier, as before NCCL's per-node rings
            coll.collective_link = lambda *a: _one_tier(*coll.group_link(*a))
        if not counts:
            for k, f in list(FRAMEWORKS.items()):
                FRAMEWORKS[k] = dataclasses.replace(f, **PLAN_OFF)
        if not flash2:
            FRAMEWORKS["deepspeed-flash2"] = dataclasses.replace(FRAMEWORKS["deepspeed"], name="deepspeed-flash2")
        yield
    finally:
        FRAMEWORKS.clear()
        FRAMEWORKS.update(saved_fw)
        coll.collective_link = saved_link


def _one_tier(bw, lat):
    """group_link's (bandwidth, latency) as a CollectiveLink: every step at ``lat``, no tree or PAT (one node)."""
    one = np.ones_like(bw)
    return coll.CollectiveLink(bw, lat, lat, one, one)


def _table(label, errs, ooms, keys, names):
    print(f"\n| {label} | runs | " + " | ".join(names) + " |")
    print("| --- | ---: | " + " | ".join("---:" for _ in names) + " |")
    for key in keys:
        idx = [i for i, k in enumerate(key[1]) if k == key[0]] if isinstance(key, tuple) else key
        cells = [f"{np.mean(np.abs(e[idx])):.1f}% ({int((np.abs(e[idx]) > 10).sum())}, {int(o[idx].sum())} OOM)"
                 for e, o in zip(errs, ooms, strict=True)]
        print(f"| {key[0] if isinstance(key, tuple) else 'all'} | {len(idx)} | " + " | ".join(cells) + " |")


def main() -> None:
    runs = read_runs(CSV)
    groups = [group_of(r["source"]) for r in csv.DictReader(CSV.open())]
    regimes = [regime_of(r) for r in runs]
    variants = {"before": (False, False, False), "+nics": (True, False, False), "+counts": (True, True, False),
                "+flash2": (True, True, True)}
    errs, ooms = [], []
    for flags in variants.values():
        with _variant(*flags):
            res = [predict(r) for r in runs]
        errs.append(np.array([r["error_pct"] for r in res]))
        ooms.append(np.array([r["memory_fits"] is False for r in res]))
    names = list(variants)
    print("mean |error| (rows worse than 10%, rows predicted out of memory)")
    _table("source", errs, ooms, [(label, groups) for _, label in GROUPS] + [list(range(len(runs)))], names)
    _table("regime", errs, ooms, [(label, regimes) for label in REGIMES], names)
    print("\n| row | " + " | ".join(names) + " |")
    print("| --- | " + " | ".join("---:" for _ in names) + " |")
    for name in ROWS:
        i = next(k for k, r in enumerate(runs) if r.name == name)
        print(f"| {name} | " + " | ".join(f"{e[i]:+.1f}%" + (" OOM" if o[i] else "") for e, o in zip(errs, ooms,
                                                                                                  strict=True)) + " |")


if __name__ == "__main__":
    main()
