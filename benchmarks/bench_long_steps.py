"""Pipelines of many micro-batches a step: priced from a shorter run of the schedule against simulating every op.

    python benchmarks/bench_long_steps.py [--sets 64] [--micro-batches 512,4096,32768]

For each schedule (1F1B, Megatron-Core's blocking 1F1B, interleaved with v = 2, ZB-H1) on D = 8 stages and each
micro-batch count m, prices --sets parameter sets (random uneven stages, the first and last lighter as the embedding
and loss make them, hand-offs of 0.2-1% of a pass) through costmodel._pipeline_terms.simulate_pipelines twice in one
run: as shipped (a long step extended from its periodic proxy, costmodel._pipeline.periodic_proxy) and with the
extension turned off (every op of the whole graph simulated). Prints both wall times, the share of sets extended, and
the largest relative difference of the two prices. Each shape's graphs are compiled inside the timed call (a fresh
process per m would be fairer still; the caches are emptied between the two).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from costmodel import _pipeline as pipeline  # noqa: E402
from costmodel import _pipeline_terms as terms  # noqa: E402
from costmodel._strategy import SCHEDULES  # noqa: E402

D = 8
CASES = (("1f1b", 1, 0), ("1f1b", 1, 1), ("interleaved", 2, 0), ("zb-h1", 1, 0))


def _inputs(sets, seed, split):
    rng = np.random.default_rng(seed)
    tf = rng.uniform(0.9, 1.1, (sets, D))
    tf[:, 0] *= 0.8
    tf[:, -1] *= 0.85
    tb = 2.0 * tf
    tw = np.zeros_like(tf)
    if split:
        tb, tw = 1.1 * tf, 0.9 * tf
    tc = rng.uniform(0.002, 0.01, (sets, 1)) * np.ones((1, D))
    return tf, tb, tw, tc


def _clear():
    terms._CACHES.clear()
    pipeline.compile_schedule.cache_clear()
    pipeline.schedule_peaks.cache_clear()
    pipeline.steady_window.cache_clear()


def _price(schedule, v, rule, m, tf, tb, tw, tc, extend):
    counted = {"extended": 0}
    shipped = terms._extend_periodic

    def spy(uniq, *args):
        left = shipped(uniq, *args) if extend else np.arange(len(uniq))
        counted["extended"] += len(uniq) - len(left)
        return left

    sets = tf.shape[0]
    shape = np.tile([SCHEDULES.index(schedule), D, m, v], (sets, 1))
    blocking = np.full(sets, rule) if rule else None
    _clear()
    terms._extend_periodic = spy
    try:
        t0 = time.perf_counter()
        total, _, _ = terms.simulate_pipelines(shape, np.zeros(sets, dtype=bool), tf, tb, tw, tc, blocking=blocking)
        return total, time.perf_counter() - t0, counted["extended"]
    finally:
        terms._extend_periodic = shipped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", type=int, default=64)
    ap.add_argument("--micro-batches", default="512,4096,32768")
    args = ap.parse_args()
    print(f"{'schedule':<22} {'m':>6} {'extended':>9} {'whole graph s':>14} {'extended s':>11} {'ratio':>7} "
          f"{'max rel diff':>13}")
    for schedule, v, rule in CASES:
        label = schedule + (" blocking" if rule else "") + (f" v={v}" if v > 1 else "")
        for m in (int(x) for x in args.micro_batches.split(",")):
            tf, tb, tw, tc = _inputs(args.sets, m, schedule.startswith("zb"))
            whole, t_whole, _ = _price(schedule, v, rule, m, tf, tb, tw, tc, extend=False)
            fast, t_fast, extended = _price(schedule, v, rule, m, tf, tb, tw, tc, extend=True)
            diff = float(np.max(np.abs(fast - whole) / whole))
            print(f"{label:<22} {m:>6} {extended:>4}/{args.sets:<4} {t_whole:>14.3f} {t_fast:>11.3f} "
                  f"{t_whole / t_fast:>6.0f}x {diff:>13.1e}")


if __name__ == "__main__":
    main()
