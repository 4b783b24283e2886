"""Sweep on Ray vs one in-process evaluator, on the same 10^7-strategy GPT-3 175B grid.

    PYTHONPATH=. python benchmarks/bench_sweep.py [--unit-rows 2e5] [--keep feasible] [space flags]

Three runs of the same grid, the same units, the same keep policy, each into its own run
directory: (1) in-process: one process evaluates the units one after another, no Ray; (2) an
embedded local Ray with 1 worker; (3) with 2 workers. Throughput is valid strategies evaluated
(and grid points covered) per second of the sweep itself; Ray's start-up is timed apart and
shown with it. Ratios: Ray-2 / in-process (target >= 1.6) and the overhead of Ray-1 over
in-process (target < 10%). A fourth run splits the same units over 2 plain processes (no Ray):
what the machine itself allows, to tell Ray's share from a busy machine's.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cli import run_request  # noqa: E402
from sweep._grid import evaluate_unit, plan_units, run_grid  # noqa: E402
from sweep._keep import Keep  # noqa: E402
from sweep._ray import init_ray, shutdown_ray  # noqa: E402
from sweep._rundir import RunDir  # noqa: E402
from sweep._runview import open_run  # noqa: E402

# 10,368,000 strategies, every one valid: GPT-3 175B on 1024 H100s in 4 pipeline stages with
# uneven layer splits (each of the 3 stage boundaries shifted by -2..2 layers) and per-stage
# recompute (3^4), tp 4/8, cp 1/2, 8 micro-batch sizes, 1F1B/ZB-H1, SP, ZeRO 0/1, bf16/fp8, DP
# overlap on/off.
SPACE = ["--model", "gpt3-175b", "--cluster", "h100x1024", "--space", "partition", "--pp", "4", "--tp", "4,8",
         "--cp", "1,2", "--micro-batch", "1,2,3,4,6,8,12,16", "--schedule", "1f1b,zb-h1", "--vpp", "1",
         "--zero-stage", "0,1", "--precision", "bf16,fp8", "--overlap-dp", "true,false", "--stage-shift=-2,-1,0,1,2"]


def _unit_in_pool(job):
    space, u, keep, run_id, metadata = job
    return evaluate_unit(space, u.lo, u.hi, keep, study=u.study, unit=u.unit, path=u.path, run_id=run_id,
                         metadata=metadata).rows


def _warm(_: int) -> int:
    return os.getpid()


def _processes(rd: RunDir, n: int, evaluated: list) -> float:
    """The machine's own parallel capacity: the same units split over n plain processes (no Ray)."""
    from sweep._ray import register_pickling

    register_pickling()
    studies = rd.studies()
    units, _ = plan_units(rd, studies, int(rd.info["options"]["unit_rows"]))
    keep = Keep.parse(rd.info["options"]["keep"])
    jobs = [(studies[u.study].space, u, keep, rd.run_id, rd.metadata(studies[u.study])) for u in units]
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(n, mp_context=ctx, initializer=register_pickling) as pool:
        list(pool.map(_warm, range(4 * n)))  # processes started (like Ray's workers) before the clock
        t0 = time.perf_counter()
        evaluated.extend(pool.map(_unit_in_pool, jobs))
        return time.perf_counter() - t0


def one(root: str, name: str, extra: list[str], *, workers: int | None, processes: int = 0) -> dict:
    out = os.path.join(root, name)
    rd, _ = RunDir.create_or_resume(out, run_request([*SPACE, *extra, "--out", out]))
    start_s = 0.0
    with rd:
        if processes:
            evaluated: list[int] = []
            sweep_s = _processes(rd, processes, evaluated)
            size = int(rd.studies()[0].space.size)
            kept, n_parts = _count_rows(rd)
            return {"name": name, "grid": size, "rows": sum(evaluated), "kept": kept, "parts": n_parts,
                    "sweep_s": sweep_s, "start_s": 0.0}
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
    kept, n_parts = _count_rows(rd)
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
                   one(root, "ray-2", extra, workers=2), one(root, "2 procs", extra, workers=None, processes=2)]
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
    procs = results[3]
    print(f"machine check, 2 plain processes (no Ray) / in-process: {base['sweep_s'] / procs['sweep_s']:.2f}x; "
          f"Ray-2 / 2 plain processes: {procs['sweep_s'] / ray2['sweep_s']:.2f}x")


if __name__ == "__main__":
    main()


def _count_rows(rd) -> tuple[int, int]:
    view = open_run(rd.path)
    return view.dataset.count_rows(), len(view.dataset.files)
