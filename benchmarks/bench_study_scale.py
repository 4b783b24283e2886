"""A capacity-planning study at 10^7, 10^8 and 10^9 strategies: the driver's peak memory, rate, parallel efficiency.

    PYTHONPATH=. python benchmarks/bench_study_scale.py --scale 1e7,1e8,1e9 [--workers N] [--json]
    PYTHONPATH=. python benchmarks/bench_study_scale.py --scale 1e8 --efficiency --workers 2

Each scale is one `plansweep sweep` (embedded Ray, --keep best:3) run in a child process of its own, which is the
driver: its peak resident memory (VmHWM from /proc/self/status) is read when the sweep has finished. The study is
GPT-3 175B's partition space of bench_sweep.py (10,368,000 strategies per problem, every one a valid grid row) over
a list of problems: 1 problem for 10^7, 10 for 10^8 (2 GPU types x 5 frameworks), 100 for 10^9 (10 clusters x 10
frameworks); --scale 5e5 cuts the one problem's space to 559,872 (micro-batch and shifts fewer, units of 10^5) for a
quick run. The sweep's own time (run_grid, Ray's start-up apart) is timed inside the driver.
With --efficiency the same study also runs in-process (no Ray, one core): parallel efficiency = T_in-process /
(workers x T_ray), with the load average before and after (the machine may be shared) and the CPU seconds of the
driver process tree.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PER_PROBLEM = ["--model", "gpt3-175b", "--space", "partition", "--pp", "4", "--tp", "4,8", "--cp", "1,2",
               "--micro-batch", "1,2,3,4,6,8,12,16", "--schedule", "1f1b,zb-h1", "--vpp", "1", "--zero-stage", "0,1",
               "--precision", "bf16,fp8", "--overlap-dp", "true,false", "--stage-shift=-2,-1,0,1,2"]
SMALL = ["--model", "gpt3-175b", "--space", "partition", "--pp", "4", "--tp", "4,8", "--cp", "1,2",
         "--micro-batch", "1,2", "--schedule", "1f1b,zb-h1", "--vpp", "1", "--zero-stage", "0,1",
         "--precision", "bf16,fp8", "--overlap-dp", "true,false", "--stage-shift=-1,0,1"]  # 559,872 grid rows
FRAMEWORKS = ["megatron-core", "fsdp2", "deepspeed", "megatron-2021", "generic", "megatron-bridge", "llm-foundry",
              "hai-llm", "fsdp2-eager", "megatron-core-deepep"]
CLUSTERS_100 = "h100x1024,2048,b200x1024,2048,h200x1024,2048,mi300x1024,2048,a100x1024,2048"
STUDIES = {  # scale -> (space flags, --cluster, --framework)
    "5e5": (SMALL, "h100x1024", "megatron-core"),
    "1e7": (PER_PROBLEM, "h100x1024", "megatron-core"),
    "1e8": (PER_PROBLEM, "h100x1024,b200x1024", ",".join(FRAMEWORKS[:5])),
    "1e9": (PER_PROBLEM, CLUSTERS_100, ",".join(FRAMEWORKS)),
}


def sweep_args(scale: str, out: str, workers: int | None, in_process: bool) -> list[str]:
    space, clusters, frameworks = STUDIES[scale]
    args = ["sweep", *space, "--cluster", clusters, "--framework", frameworks, "--keep", "best:3", "--top", "0",
            "--unit-rows", "1e5" if scale == "5e5" else "1e6", "--out", out]
    if in_process:
        args.append("--in-process")
    elif workers:
        args += ["--workers", str(workers)]
    return args


def child(args: list[str]) -> None:
    """The driver: the sweep, then its peak memory, CPU seconds (with its waited-for children) and row count."""
    sys.path.insert(0, ROOT)
    import sweep._grid
    from cli import main

    timed = {"sweep_s": 0.0}
    real = sweep._grid.run_grid

    def run_grid(*a, **k):  # the sweep itself, Ray's start-up and the summary apart
        t0 = time.perf_counter()
        try:
            return real(*a, **k)
        finally:
            timed["sweep_s"] += time.perf_counter() - t0

    sweep._grid.run_grid = run_grid
    rc = main(args)
    with open("/proc/self/status") as f:
        hwm_kb = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    t = os.times()
    print(json.dumps({"rc": rc, **timed, "driver_peak_rss_MB": hwm_kb / 1024, "driver_cpu_s": t.user + t.system,
                      "children_cpu_s": t.children_user + t.children_system}))


def run_one(scale: str, workers: int | None, in_process: bool) -> dict:
    out = tempfile.mkdtemp(prefix=f"study-{scale}-")
    try:
        load0 = os.getloadavg()[0]
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(sweep_args(scale, out + "/run", workers,
                                                                                            in_process))],
                              capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ROOT,
                                                                  "RAY_USAGE_STATS_ENABLED": "0"})
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"sweep at {scale} failed: {proc.stderr[-2000:]}")
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        progress = proc.stderr.replace("\r", "\n").strip().splitlines()
        last = next((ln for ln in reversed(progress) if "problems done" in ln), "")
        rows = _grid_rows(out + "/run")
        return {"scale": scale, "how": "in-process" if in_process else f"ray x{workers or os.cpu_count()}",
                "grid_rows": rows, "wall_s": wall, **got, "rows_per_s": rows / got["sweep_s"],
                "load_before": load0, "load_after": os.getloadavg()[0], "progress": last.strip()}
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _grid_rows(run: str) -> int:
    sys.path.insert(0, ROOT)
    from sweep._rundir import RunDir

    with RunDir.open(run) as rd:
        return sum(int(s.space.size) for s in rd.studies())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", default="1e7,1e8,1e9", help="comma-separated among " + ", ".join(STUDIES))
    p.add_argument("--workers", type=int, default=None, help="embedded Ray's CPUs (default: the machine's)")
    p.add_argument("--efficiency", action="store_true", help="also run each scale in-process (no Ray, one core)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--child", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(json.loads(a.child))
        return
    results = []
    for scale in a.scale.split(","):
        results.append(run_one(scale, a.workers, False))
        if a.efficiency:
            base = run_one(scale, None, True)
            w = a.workers or os.cpu_count()
            results.append({**base, "parallel_efficiency": base["sweep_s"] / (w * results[-1]["sweep_s"])})
    if a.json:
        print(json.dumps(results, indent=1))
        return
    for r in results:
        eff = f", efficiency {100 * r['parallel_efficiency']:.0f}%" if "parallel_efficiency" in r else ""
        print(f"{r['scale']:>4} {r['how']:<11} {r['grid_rows']:>14,} rows {r['sweep_s']:8.1f} s sweep "
              f"({r['wall_s']:.1f} s in all) "
              f"{r['rows_per_s']:>10,.0f} rows/s  driver peak RSS {r['driver_peak_rss_MB']:7.1f} MB  "
              f"load {r['load_before']:.1f} -> {r['load_after']:.1f}{eff}")
        print(f"     {r['progress']}")


if __name__ == "__main__":
    main()
