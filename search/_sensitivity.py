"""Does the best plan stay best if a constant of the cluster is not what the model takes it to be?

A case moves one or more of costmodel._knobs' constants (``network=0.8``, ``compute=0.9+nvlink=0.8``); for each, the
whole space is priced again on the moved cluster and re-ranked as rank ranks it (closed forms, then the best
REFINE_TOP re-priced with the simulator), and the plan ranked first on the given cluster is priced there too: the
case says which plan is best then and how far behind it the first one falls.
"""

from __future__ import annotations

import math

import numpy as np

from costmodel import InputError, evaluate
from costmodel._frameworks import state_optim_bytes
from costmodel._knobs import KNOBS, moved_cluster
from search._refine import objective_score, refine

# The cases `rank --sensitivity` moves by default, one knob each, both ways where both are plausible: compute and
# memory bandwidth 10% (the spread of sustained clocks under thermal and power limits and of the GEMM efficiency
# the model fits: 4% mean, 14% worst on the measured H100 GEMMs), the links 20% (NCCL bus bandwidth against line
# rate differs that much between clusters: adaptive routing, rails, ECMP collisions), latencies and per-kernel
# overheads twice the model's (they are the model's least certain constants).
DEFAULT_CASES = ("compute=0.9", "compute=1.1", "memory-bandwidth=0.9", "memory-bandwidth=1.1", "nvlink=0.8",
                 "nvlink=1.2", "network=0.8", "network=1.2", "latency=2", "kernel-overhead=2")


# The factors a case may move a constant by: a thousandth to a thousand times (a cluster past either end is no
# cluster, and the prices of one overflow).
FACTOR_RANGE = (1e-3, 1e3)


def parse_cases(text: str, argument: str = "--sensitivity") -> tuple[tuple[tuple[str, float], ...], ...]:
    """Cases from ``knob=factor[+knob=factor...],...`` ("default": DEFAULT_CASES): per case its (knob, factor) pairs.
    Bad input: InputError naming ``argument``."""
    words = DEFAULT_CASES if text.strip() == "default" else tuple(w.strip() for w in text.split(","))
    expected = ("cases knob=factor[+knob=factor],... with knobs among " + ", ".join(KNOBS)
                + f" and factors in [{FACTOR_RANGE[0]:g}, {FACTOR_RANGE[1]:g}]")
    cases = []
    for word in words:
        pairs = []
        for part in word.split("+"):
            knob, eq, value = part.strip().partition("=")
            knob = knob.strip().lower()
            try:
                f = float(value)
            except ValueError:
                f = math.nan
            if not eq or knob not in KNOBS or not (FACTOR_RANGE[0] <= f <= FACTOR_RANGE[1]):
                raise InputError(argument, expected, part.strip() or text)
            pairs.append((knob, f))
        cases.append(tuple(pairs))
    if not cases:
        raise InputError(argument, expected, text)
    return tuple(cases)


def case_label(case) -> str:
    return " + ".join(f"{knob} x{f:g}" for knob, f in case)


def sensitivity(model, cluster, table, first: int, cases, *, objective: str = "tokens_per_s", failure=None,
                state_dtypes: dict | None = None) -> list[dict]:
    """Per case (parse_cases' tuples): the moved cluster's best row of ``table`` (an index into it), its score and the
    score there of row ``first`` (the best on ``cluster``), by ``objective`` (tokens/s or goodput): dicts with
    "case", "best", "best_score", "first_score" and "shortfall" (1 - first_score / best_score, 0 where first is still
    best); "best" None where no row is feasible."""
    optim = state_optim_bytes(state_dtypes) if state_dtypes else None

    def score(m, t, c) -> float:
        return float(objective_score(m, t, c, objective, failure, model, optim)[0])

    out = []
    for case in cases:
        moved = moved_cluster(cluster, case)
        metrics = evaluate(model, moved, table, state_dtypes=state_dtypes)
        idx, exact = refine(model, moved, table, metrics, objective=objective, failure=failure,
                            state_dtypes=state_dtypes)
        ok = np.flatnonzero(exact["feasible"])
        row = {"case": case_label(case), "best": None, "best_score": math.nan, "first_score": math.nan,
               "shortfall": math.nan}
        if ok.size:
            best = int(idx[ok[0]])
            best_score = score(exact.take(ok[:1]), table.take(idx[ok[:1]]), moved)
            one, at = table.take(np.array([first])), np.flatnonzero(idx == first)[:1]  # first among the re-priced?
            first_m = exact.take(at) if at.size else evaluate(model, moved, one, pipeline="simulate",
                                                               state_dtypes=state_dtypes)
            first_score = score(first_m, one, moved)
            row.update(best=best, best_score=best_score, first_score=first_score,
                       shortfall=(0.0 if best == first or not best_score > 0
                                  else max(0.0, 1.0 - first_score / best_score)))
        out.append(row)
    return out
