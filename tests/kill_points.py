"""Kill -9 at a chosen point: the CLI run in a child process that SIGKILLs itself at the N-th call of
a named function (a journal append, a part or a state written), before the call or, for a journal
append, half-way through the line it writes. Deterministic where a timed kill is not: the same
point of the run every time.

    python -m tests.kill_points POINT N -- CLI ARGS...
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

# POINT -> (module, attribute path of the function): where the child kills itself.
POINTS = {
    "journal": ("optuna.storages.journal._file", "JournalFileBackend.append_logs"),
    "journal-half-line": ("optuna.storages.journal._file", "JournalFileBackend.append_logs"),
    "journal-lock-held": ("search._tpe", "FlockJournalLock.release"),  # a line written, the lock still held
    "search-part": ("sweep._search_engine", "write_part"),
    "search-state": ("sweep._search_engine", "save_state"),
    "tpe-state": ("sweep._search_engine", "write_json_atomic"),
    "grid-part": ("sweep._grid", "write_part"),
}
KILLED = -signal.SIGKILL  # Popen's return code of a child killed by SIGKILL


def _die(half_line_into: str | None = None) -> None:
    if half_line_into is not None:  # a writer killed in the middle of a journal line
        with open(half_line_into, "ab") as f:
            f.write(b'{"op_code":5,"worker_id":"')
            f.flush()
            os.fsync(f.fileno())
    os.kill(os.getpid(), signal.SIGKILL)


def arm(point: str, n: int) -> None:
    """Make the N-th call of POINT's function (counted from 1) kill this process."""
    import importlib

    module_name, attr = POINTS[point]
    owner = importlib.import_module(module_name)
    *path, name = attr.split(".")
    for part in path:
        owner = getattr(owner, part)
    real = getattr(owner, name)
    calls = [0]

    def wrapper(*args, **kwargs):
        calls[0] += 1
        if calls[0] == n:
            _die(args[0]._file_path if point == "journal-half-line" else None)
        return real(*args, **kwargs)

    setattr(owner, name, wrapper)


def run_killed(point: str, n: int, *args: str) -> int:
    """``plansweep ARGS`` in a child process killed at the N-th call of POINT; its return code
    (KILLED where the kill came, 0 where the run finished first)."""
    from tests.sweep_helpers import env

    proc = subprocess.run([sys.executable, "-m", "tests.kill_points", point, str(n), "--", *args],
                          capture_output=True, text=True, env=env(), timeout=300)
    if proc.returncode not in (0, KILLED):
        raise AssertionError(f"plansweep {' '.join(args)} -> {proc.returncode}\n{proc.stderr[-3000:]}")
    return proc.returncode


def _stat(pid: int) -> tuple[int, str] | None:
    """(start time, state) of a process, None where it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[19]), fields[0]


def kill_group_when(proc: subprocess.Popen, directory: str, at_least: int, *, gone_within_s: float = 1.0,
                    timeout_s: float = 300.0) -> int:
    """SIGKILL the process group of ``proc`` (tests.sweep_helpers.start: the CLI and its embedded
    Ray) once ``directory`` holds ``at_least`` parts; then assert that every process it started
    (its descendants, watched until the kill) is gone within ``gone_within_s`` seconds (a zombie
    counts as gone). Returns how many parts existed at the kill."""
    import time

    from tests.sweep_helpers import cmdline, descendants, parts

    seen: dict[int, tuple[int, str]] = {}  # pid -> (start time, command line)

    def watch() -> None:
        for pid in descendants(proc.pid):
            st = _stat(pid)
            if st and (pid not in seen or seen[pid][0] == st[0]):
                seen[pid] = (st[0], cmdline(pid)[:100])  # the latest: a child just forked shows its parent's

    t0 = time.monotonic()
    while len(parts(directory)) < at_least:
        if proc.poll() is not None:
            raise AssertionError(f"finished before the kill: {proc.stderr.read().decode()[-2000:]}")
        if time.monotonic() - t0 > timeout_s:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError("no parts appeared in time")
        watch()
        time.sleep(0.02)
    watch()
    os.killpg(proc.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    proc.wait(timeout=60)
    n = len(parts(directory))

    def alive() -> list[int]:
        return [pid for pid, (start, _) in seen.items() if (st := _stat(pid)) and st[0] == start and st[1] != "Z"]

    while alive() and time.monotonic() - killed_at < gone_within_s:
        time.sleep(0.02)
    left = alive()
    for pid in left:  # ours: do not leave them behind for the next test
        os.kill(pid, signal.SIGKILL)
    assert any("raylet" in c for _, c in seen.values()), "no embedded Ray was seen"
    assert not left, f"alive {gone_within_s} s after the kill: {[seen[p][1] for p in left]}"
    return n


def death_signal() -> int:
    """The signal this process is sent when its parent dies (Linux PR_GET_PDEATHSIG; 0: none)."""
    import ctypes

    value = ctypes.c_int(0)
    PR_GET_PDEATHSIG = 2  # linux/prctl.h
    assert ctypes.CDLL(None, use_errno=True).prctl(PR_GET_PDEATHSIG, ctypes.byref(value), 0, 0, 0) == 0
    return value.value


def main(argv: list[str]) -> int:
    point, n, sep, *args = argv
    assert sep == "--", "usage: python -m tests.kill_points POINT N -- CLI ARGS..."
    arm(point, int(n))
    import cli

    return cli.main(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
