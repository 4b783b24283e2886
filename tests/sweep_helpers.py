"""Helpers for the sweep tests: run the CLI, read a run's rows, find our own Ray processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pyarrow.dataset as ds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def env() -> dict[str, str]:
    """This process's environment now (Ray's auth settings included) with our code first."""
    out = dict(os.environ, PYTHONPATH=ROOT, RAY_USAGE_STATS_ENABLED="0")
    out.pop("RAY_ADDRESS", None)
    return out


# A small GPT-3 175B space: 4 tp x 6 pp x 2 cp x 8 micro-batch x 5 schedules x 5 vpp x 2 SP x 4 ZeRO x 3
# recompute = 230,400 grid rows, 24 units of 10^4 rows.
SMALL_SPACE = ["--model", "gpt3-175b", "--cluster", "h100x1024", "--space", "exact", "--cp", "1,2"]


def workers_import_this_checkout(monkeypatch) -> None:
    """Ray workers started from this test process import this checkout's code (not an installed one)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))


def local_ray_cluster(cpus: tuple[int, ...]):
    """A Ray cluster on this machine, one raylet per entry of ``cpus`` (its CPUs), whose workers import this
    checkout's code; yields the ray.cluster_utils.Cluster and shuts it down after, PYTHONPATH restored."""
    from ray.cluster_utils import Cluster

    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, saved) if p)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": cpus[0], "include_dashboard": False})
    try:
        for n in cpus[1:]:
            cluster.add_node(num_cpus=n)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        cluster.shutdown()
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def starts_ray(args: tuple[str, ...]) -> bool:
    """Whether ``plansweep ARGS`` starts or joins Ray: a command with a run directory (sweep,
    resume, search --out) not told --in-process (cli/_cmd_sweep.py's execute)."""
    return "--in-process" not in args and (args[:1] in (("sweep",), ("resume",)) or "--out" in args)


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """``plansweep ARGS``: in this process (tests.in_process.cli: no interpreter start-up, about
    1.3 s of CPU each) where it starts no Ray, else in a fresh interpreter (Ray's driver, its
    environment and its shutdown stay out of the test's process)."""
    if starts_ray(args):
        proc = subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True, env=env(),
                              timeout=300)
    else:
        from tests.in_process import cli as here

        proc = here(*args)
    if check and proc.returncode != 0:
        raise AssertionError(f"plansweep {' '.join(args)} -> {proc.returncode}\n{proc.stderr[-3000:]}")
    return proc


def start(*args: str) -> subprocess.Popen:
    """The CLI in its own process group (so that a kill takes its embedded Ray with it)."""
    return subprocess.Popen([sys.executable, "-m", "cli", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=env(), start_new_session=True)


def parts(directory: str) -> list[str]:
    if not os.path.isdir(directory):
        return []
    return sorted(n for n in os.listdir(directory) if n.endswith(".parquet") and not n.startswith("."))


def kill_when(proc: subprocess.Popen, directory: str, at_least: int, timeout_s: float = 120.0) -> int:
    """SIGKILL the process group once ``directory`` holds ``at_least`` parts; returns how many
    parts existed at the kill."""
    t0 = time.monotonic()
    while len(parts(directory)) < at_least:
        if proc.poll() is not None:
            raise AssertionError(f"finished before the kill: {proc.stderr.read().decode()[-2000:]}")
        if time.monotonic() - t0 > timeout_s:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError("no parts appeared in time")
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    return len(parts(directory))


def rows(run_dir: str):
    """The run's rows as a pandas DataFrame, from nothing but the results path."""
    import pandas as pd

    return pd.read_parquet(os.path.join(run_dir, "results"))


def table(run_dir: str):
    return ds.dataset(os.path.join(run_dir, "results"), format="parquet", partitioning="hive").to_table()


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc), so a test only ever touches its own processes."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def own_ray_processes(title: str) -> list[int]:
    """Our own Ray workers whose process title starts with ``title`` (e.g. "ray::evaluate_unit")."""
    return [p for p in descendants(os.getpid()) if cmdline(p).startswith(title)]

