"""Sweep on Ray vs one in-process evaluator, on the same ~10^7-point GPT-3 175B grid.

    PYTHONPATH=. python benchmarks/bench_sweep.py [--unit-rows 2e5] [--keep feasible] [space flags]

Three runs of the same grid, the same units, the same keep policy, each into its own run
directory: (1) in-process: one process evaluates the units one after another, no Ray; (2) an
embedded local Ray with 1 worker; (3) with 2 workers. Throughput is valid strategies evaluated
(and grid points covered) per second of the sweep itself; Ray's start-up is timed apart and
shown with it. Ratios: Ray-2 / in-process (target >= 1.6) and the overhead of Ray-1 over
in-process (target < 10%).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sweep._cmd_sweep import grid_request  # noqa: E402
from sweep._grid import run_grid  # noqa: E402
from sweep._ray import init_ray, shutdown_ray  # noqa: E402
from sweep._report import count_rows  # noqa: E402
from sweep._rundir import RunDir  # noqa: E402
from sweep.cli import build_parser  # noqa: E402

# ~9.5 * 10^6 grid points: the exact space widened (tp 6 x pp 11 x cp 5 x micro-batch 10 x
# schedule 5 x vpp 6 x SP 2 x ZeRO 4 x recompute 3 x precision 2 x DP overlap 2).
SPACE = ["--model", "gpt3-175b", "--cluster", "h100x1024", "--space", "exact", "--tp", "1,2,3,4,6,8",
         "--pp", "1,2,3,4,6,8,12,16,24,32,48", "--cp", "1,2,4,8,16", "--micro-batch", "1,2,3,4,6,8,12,16,24,32",
         "--vpp", "1,2,3,4,6,8", "--precision", "bf16,fp8", "--overlap-dp", "true,false"]


def one(root: str, name: str, extra: list[str], *, workers: int | None) -> dict:
    out = os.path.join(root, name)
    args = build_parser().parse_args(["sweep", *SPACE, *extra, "--out", out])
    rd, _ = RunDir.create_or_resume(out, grid_request(args))
    start_s = 0.0
    with rd:
        if workers:
            t0 = time.perf_counter()
            init_ray(workers=workers, address=None)
            start_s = time.perf_counter() - t0
        evaluated = []
        t0 = time.perf_counter()
        try:
            run_grid(rd, in_process=not workers, max_in_flight=2 * workers if workers else None, progress=False,
                     on_unit=lambda s: evaluated.append(s.rows))
        finally:
            sweep_s = time.perf_counter() - t0
            if workers:
                shutdown_ray()
        size = int(rd.studies()[0].space.size)
    kept, n_parts = count_rows(rd.results)
    return {"name": name, "grid": size, "rows": sum(evaluated), "kept": kept, "parts": n_parts, "sweep_s": sweep_s,
            "start_s": start_s}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--unit-rows", default="2e5")
    p.add_argument("--keep", default="feasible")
    p.add_argument("--root", default=None, help="where the three run directories go (default: a temporary one)")
    a, rest = p.parse_known_args()
    extra = ["--unit-rows", a.unit_rows, "--keep", a.keep, *rest]
    root = a.root or tempfile.mkdtemp(prefix="bench_sweep_")
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores", flush=True)
    try:
        results = [one(root, "in-process", extra, workers=None), one(root, "ray-1", extra, workers=1),
                   one(root, "ray-2", extra, workers=2)]
    finally:
        if a.root is None:
            shutil.rmtree(root, ignore_errors=True)
    base = results[0]
    print(f"grid: {base['grid']:,} points, {base['rows']:,} valid strategies evaluated, {base['kept']:,} kept "
          f"({a.keep}) in {base['parts']} parts of {a.unit_rows} grid points")
    print(f"{'run':<11} {'sweep s':>8} {'strategies/s':>13} {'grid pts/s':>12} {'vs in-proc':>10} "
          f"{'Ray start s':>11} {'incl. start':>11}")
    for r in results:
        rate = r["rows"] / r["sweep_s"]
        print(f"{r['name']:<11} {r['sweep_s']:8.1f} {rate:13,.0f} {r['grid'] / r['sweep_s']:12,.0f} "
              f"{base['sweep_s'] / r['sweep_s']:9.2f}x {r['start_s']:11.1f} "
              f"{base['sweep_s'] / (r['sweep_s'] + r['start_s']):10.2f}x")
    assert all(r["rows"] == base["rows"] and r["kept"] == base["kept"] for r in results), "runs differ"
    ray1, ray2 = results[1], results[2]
    print(f"Ray-2 / in-process: {base['sweep_s'] / ray2['sweep_s']:.2f}x (target >= 1.6); "
          f"Ray-1 overhead: {100 * (ray1['sweep_s'] / base['sweep_s'] - 1):+.1f}% (target < 10%); "
          f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
