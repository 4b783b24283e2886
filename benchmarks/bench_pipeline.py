"""Throughput of the pipeline simulator: 1F1B, D = 8, m = 32, T_C > 0, uneven stages.

    python benchmarks/bench_pipeline.py [--sets 65536] [--repeats 3] [--plain 200]

Times the vectorised simulator (one call over --sets parameter sets, best of --repeats) and,
in the same run, the plain event-by-event simulation of tests/test_pipeline_reference.py on
--plain parameter sets; prints schedules per second for both and their ratio.
Run it pinned to one core (taskset -c 0) for the single-core figure.
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from costmodel import simulate  # noqa: E402

D, M = 8, 32


def _reference():
    path = ROOT / "tests" / "test_pipeline_reference.py"
    spec = importlib.util.spec_from_file_location("pipeline_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.event_simulation


def _inputs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    tf = rng.uniform(0.5, 2.0, (n, D))  # (S, D)
    tb = rng.uniform(1.0, 4.0, (n, D))  # (S, D)
    tc = rng.uniform(0.01, 0.5, n)  # (S,)
    return tf, tb, tc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", type=int, default=65536)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--plain", type=int, default=200)
    args = ap.parse_args()

    tf, tb, tc = _inputs(args.sets, 0)
    simulate("1f1b", D, M, tf=tf[:8], tb=tb[:8], tc=tc[:8])  # compile the graph once
    best = float("inf")
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        res = simulate("1f1b", D, M, tf=tf, tb=tb, tc=tc)
        best = min(best, time.perf_counter() - t0)
    vec_rate = args.sets / best

    event_simulation = _reference()
    ptf, ptb, ptc = _inputs(args.plain, 1)
    zeros = [0.0] * D
    t0 = time.perf_counter()
    for i in range(args.plain):
        event_simulation("1f1b", D, M, 1, ptf[i].tolist(), ptb[i].tolist(), zeros, float(ptc[i]))
    plain_rate = args.plain / (time.perf_counter() - t0)

    # The two agree on the first parameter set (a sanity check, not a test).
    ref_total = event_simulation("1f1b", D, M, 1, tf[0].tolist(), tb[0].tolist(), zeros, tc[0])[0]
    assert abs(res.total_time[0] - ref_total) < 1e-9 * ref_total

    print(f"1F1B D={D} m={M} T_C>0, uneven stages")
    print(f"vectorised: {vec_rate:,.0f} schedules/s ({args.sets} sets, best of {args.repeats})")
    print(f"plain event-by-event: {plain_rate:,.0f} schedules/s ({args.plain} sets)")
    print(f"speed-up: {vec_rate / plain_rate:,.0f}x")


if __name__ == "__main__":
    main()
