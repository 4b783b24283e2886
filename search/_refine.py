"""Ranking priced rows by an objective, and re-pricing the best few exactly.

The closed forms screen a space within a few percent of the pipeline simulator; `refine` takes the best
``top`` rows by the closed forms, prices them again with the simulator and sorts them, so that the
exact best is among them (`plansweep rank`, benchmarks/goodput_optimum.py). `objective_score` is the
score both `rank` and `search` order rows by: tokens per second, or goodput under failures.
"""

from __future__ import annotations

import numpy as np

from costmodel import StrategyTable, evaluate, plan_goodput
from costmodel._frameworks import state_optim_bytes


def objective_score(metrics, table, cluster, objective: str, failure=None, model=None, optim_bytes=None) -> np.ndarray:
    """(N,) larger-is-better score by ``objective``, -inf where infeasible (``model``: goodput
    prices an MoE model's expert state by ep and etp; ``optim_bytes``: plan_goodput's, None its default)."""
    if objective == "tokens_per_s":
        val = metrics["tokens_per_s"]
    else:
        kw = {} if optim_bytes is None else {"optim_bytes": optim_bytes}
        val = plan_goodput(metrics, table, cluster, failure, model=model, **kw)["goodput_tokens_per_s"]
    return np.where(metrics["feasible"], np.asarray(val, dtype=np.float64), -np.inf)


# Candidates re-priced with the exact pipeline simulator before the final ranking: the
# closed forms screen within a few percent (BENCHMARKS.md), so the top few hundred hold the
# exact best.
REFINE_TOP = 256


def refine(model, cluster, table: StrategyTable, metrics, top: int = REFINE_TOP, framework=None,
           objective: str = "tokens_per_s", failure=None, state_dtypes: dict | None = None):
    """Indices and exact metrics of the best ``top`` rows by the closed forms, re-priced with
    the simulator and sorted by exact step time (objective tokens_per_s), or by exact goodput.
    ``state_dtypes``: as costmodel.evaluate takes them (the rows were priced with them)."""
    def best_first(m, t) -> np.ndarray:
        if objective == "tokens_per_s":
            key = m["step_time_s"]
        else:
            key = -objective_score(m, t, cluster, objective, failure, model,
                                   state_optim_bytes(state_dtypes) if state_dtypes else None)
        return np.argsort(key, kind="stable")

    cand = best_first(metrics, table)[:top]
    cand = cand[metrics["feasible"][cand]]
    exact = evaluate(model, cluster, table.take(cand), pipeline="simulate", framework=framework,
                     state_dtypes=state_dtypes)
    order = best_first(exact, table.take(cand))
    return cand[order], exact.take(order)
