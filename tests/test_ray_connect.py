"""Joining a Ray cluster fails in one line that says what to do, within 10 s: an address that does
not answer, a cluster that requires a token this process lacks, a cluster of another Ray version.
The token cases run against a local head started with Ray's token authentication. And the embedded Ray's workers
find the packages of a checkout that was not installed."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.sweep_helpers import ROOT, cmdline, descendants, env

TINY = ["sweep", "--model", "gpt3-175b", "--cluster", "h100x1024", "--space", "fixed", "--tp", "1,2", "--pp", "1,2",
        "--micro-batch", "1", "--no-progress"]
AUTH_VARIABLES = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
LIMIT_S = 10.0


def _env(**values: str) -> dict[str, str]:
    """The CLI's environment without Ray's token settings or a cluster address, plus ``values``."""
    out = {k: v for k, v in env().items() if k not in AUTH_VARIABLES and k != "RAY_ADDRESS"}
    out.update(values)
    return out


def _plansweep(args: list[str], environment: dict[str, str], *, prelude: str = "") -> tuple[subprocess.CompletedProcess,
                                                                                           float]:
    """``plansweep ARGS`` (after the Python statements ``prelude``, in the same process) and its wall time."""
    code = f"{prelude}\nimport sys, cli\nsys.exit(cli.main(sys.argv[1:]))"
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=environment,
                          timeout=120, cwd=ROOT)
    return proc, time.monotonic() - t0


def _one_line(proc: subprocess.CompletedProcess, elapsed_s: float, *words: str) -> None:
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert elapsed_s < LIMIT_S, f"{elapsed_s:.1f} s: {proc.stderr}"
    for word in words:
        assert word in proc.stderr, proc.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_address_that_does_not_answer_is_one_line(tmp_path):
    # A closed port (refused at once) and a port that never answers (a listening socket whose
    # accept queue is full drops new connections: the probe's 3 s pass), by --address and by
    # RAY_ADDRESS; no run directory is made.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(0)
    queued = socket.create_connection(silent.getsockname(), timeout=1)  # fills the queue
    try:
        cases = [(["--address", f"127.0.0.1:{_free_port()}"], {}, "--address", "Connection refused"),
                 (["--address", f"127.0.0.1:{silent.getsockname()[1]}"], {}, "--address", "no answer within 3 s"),
                 ([], {"RAY_ADDRESS": f"127.0.0.1:{_free_port()}"}, "RAY_ADDRESS", "Connection refused"),
                 (["--address", "head-node"], {}, "--address", "HOST:PORT")]
        for k, (flags, variables, named, why) in enumerate(cases):
            out = str(tmp_path / f"run{k}")
            proc, elapsed = _plansweep([*TINY, *flags, "--out", out], _env(**variables))
            _one_line(proc, elapsed, named, why)
            assert not os.path.exists(out)
    finally:
        queued.close()
        silent.close()


@pytest.fixture(scope="module")
def token_head(tmp_path_factory):
    """A one-node Ray cluster started with `ray start --head` and token authentication: (its
    address, its token). Its processes (in a process group of their own) are killed at the end."""
    token = secrets.token_hex(16)
    port = _free_port()
    log = tmp_path_factory.mktemp("head") / "head.log"
    head_env = _env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", f"--port={port}",
           "--num-cpus=1", "--include-dashboard=false", "--disable-usage-stats",
           f"--ray-client-server-port={_free_port()}", f"--dashboard-agent-listen-port={_free_port()}"]
    with open(log, "w") as f:
        head = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=head_env, start_new_session=True)
    seen: set[int] = set()
    try:
        t0 = time.monotonic()
        while "Ray runtime started" not in log.read_text():
            assert head.poll() is None and time.monotonic() - t0 < 120, log.read_text()[-3000:]
            time.sleep(0.2)
        yield f"127.0.0.1:{port}", token
    finally:
        seen.update(descendants(head.pid))
        os.killpg(head.pid, signal.SIGKILL)
        head.wait(timeout=60)
        for pid in seen:  # its workers are in process groups of their own
            if cmdline(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


@pytest.mark.slow
def test_a_cluster_that_requires_a_token_is_one_line(token_head, tmp_path):
    address, token = token_head
    # Without a token, and with a wrong one: one line naming what to set.
    for k, variables in enumerate([{}, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)}]):
        proc, elapsed = _plansweep([*TINY, "--address", address, "--out", str(tmp_path / f"run{k}")],
                                   _env(**variables))
        _one_line(proc, elapsed, "--address", "RAY_AUTH_MODE=token", "RAY_AUTH_TOKEN", "token missing or wrong")
    # With the cluster's token (as README says): the sweep runs on the cluster.
    out = str(tmp_path / "run")
    proc, _ = _plansweep([*TINY, "--address", address, "--out", out], _env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"Ray cluster at {address} (1 CPUs)" in proc.stderr
    assert os.listdir(os.path.join(out, "results", "searcher=grid"))


@pytest.mark.slow
def test_a_cluster_of_another_ray_version_is_one_line(token_head, tmp_path):
    # This driver says it is Ray 2.0.0 (the version Ray compares with the cluster's when it joins):
    # Ray refuses it, and the refusal is one line naming both versions.
    import ray

    address, token = token_head
    prelude = ("import ray._private.utils as u\nreal = u.compute_version_info\n"
               "u.compute_version_info = lambda: ('2.0.0', real()[1])")
    proc, elapsed = _plansweep([*TINY, "--address", address, "--out", str(tmp_path / "run")],
                               _env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token), prelude=prelude)
    _one_line(proc, elapsed, "--address", "Ray 2.0.0", f"a cluster of Ray {ray.__version__}")


def test_an_embedded_rays_workers_find_the_packages_of_an_uninstalled_checkout(monkeypatch):
    """The embedded Ray's raylet (and so its workers) gets the folder holding sweep, search, costmodel and cli first on
    PYTHONPATH: a run started from a checkout with `python3 -m cli sweep` (nothing installed) found none of them in its
    workers ("No module named 'sweep'" in the setup hook). Where the folder is on the path already, nothing is set."""
    import os
    from pathlib import Path

    from sweep import _ray

    root = Path(_ray.PACKAGES_ROOT)
    assert all((root / pkg / "__init__.py").is_file() for pkg in ("sweep", "search", "costmodel", "cli"))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert _ray._packages_path_env() == {"PYTHONPATH": str(root)}
    monkeypatch.setenv("PYTHONPATH", "/opt/elsewhere")
    assert _ray._packages_path_env() == {"PYTHONPATH": str(root) + os.pathsep + "/opt/elsewhere"}
    monkeypatch.setenv("PYTHONPATH", "/opt/elsewhere" + os.pathsep + str(root))
    assert _ray._packages_path_env() == {}
    monkeypatch.delenv("PYTHONPATH")  # an installed copy (no pyproject.toml beside the packages): nothing set
    monkeypatch.setattr(_ray, "PACKAGES_ROOT", str(root / "costmodel"))
    assert _ray._packages_path_env() == {}
