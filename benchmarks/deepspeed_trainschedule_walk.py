"""How far DeepSpeed's priced simulated step (the batched-exchange simulation plus the closed form's (calls - 1) x
steady hand-offs, costmodel._pipeline_terms.pipeline_step's ``serial``) is from DeepSpeed's exact op order
(costmodel._pipeline.simulate_trainschedule), on gpt3-175b's random bench rows (h100x1024) and bloom-176b's validation
candidates, under pipeline="simulate". Prints, per pp, the rows moved and the relative change if the exact walk priced
them. The walk is swapped in here for this measurement only: it changes nothing in the evaluator.

    PYTHONPATH=. python3 benchmarks/deepspeed_trainschedule_walk.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import costmodel._block as blk
import costmodel._pipeline_terms as pt
from costmodel import cluster_preset, evaluate, model_preset
from costmodel._bench_rows import bench_table
from costmodel._pipeline import simulate_trainschedule
from costmodel._validate import _candidates, read_runs


def _exact_sets(orig):
    def sets(uniq, gid, shapes, dev, k, flagged=False):  # simulate_pipelines' rows, the blocking ones walked exactly
        total = orig(uniq, gid, shapes, dev, k, flagged)
        if not flagged:
            return total
        u_p = uniq[:, 1].astype(np.int64)[:, None]
        rep = np.where(dev == 0, 0, np.where(dev == u_p - 1, 2, 1))
        col = np.where(uniq[:, 4:5] > 0, rep, np.minimum(dev, k - 1))
        tf, tb, tw, tc = (np.where(dev < u_p, np.take_along_axis(uniq[:, 5 + i * k:5 + (i + 1) * k], col, axis=1), 0.0)
                          for i in range(4))
        for r in np.flatnonzero(uniq[:, 5 + 4 * k] == 1):
            p, m = int(uniq[r, 1]), int(uniq[r, 2])
            total[r] = simulate_trainschedule(p, m, tf=tf[r, :p], tb=tb[r, :p], tw=tw[r, :p], tc=tc[r:r + 1, :p])[0]
        return total
    return sets


def priced(model, cluster, table, exact: bool) -> np.ndarray:
    orig_sets, orig_step = pt._simulate_sets, blk.pipeline_step
    if exact:
        pt._simulate_sets = _exact_sets(orig_sets)
        blk.pipeline_step = lambda **kw: orig_step(**{**kw, "serial": None})
    pt._CACHES.clear()
    try:
        return np.asarray(evaluate(model, cluster, table, framework="deepspeed", pipeline="simulate")["step_time_s"])
    finally:
        pt._simulate_sets, blk.pipeline_step = orig_sets, orig_step
        pt._CACHES.clear()


def main() -> None:
    (run,) = [r for r in read_runs(Path("tests/data/validation/published_runs.csv")) if r.name == "bloom-176b"]
    cases = [("bloom-176b candidates", run.model, run.cluster, _candidates(run)),
             ("gpt3-175b bench rows", model_preset("gpt3-175b"), cluster_preset("h100x1024"), bench_table(300000, 3))]
    for name, model, cluster, table in cases:
        before, after = priced(model, cluster, table, False), priced(model, cluster, table, True)
        ok = np.isfinite(before)
        rel = np.zeros(len(before))
        rel[ok] = (after[ok] - before[ok]) / before[ok]
        pp = np.asarray(table["pp"])
        for p in np.unique(pp[ok]):
            g = ok & (pp == p)
            print(f"{name}: pp {p:2d}, {g.sum():4d} rows, {np.sum(np.abs(rel[g]) > 1e-12):4d} moved, "
                  f"median {np.median(rel[g]):+.2e}, most {rel[g][np.argmax(np.abs(rel[g]))]:+.2e}")


if __name__ == "__main__":
    main()
