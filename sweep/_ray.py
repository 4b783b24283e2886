"""Starting or joining Ray, quickly and quietly, and telling lost work from failed work."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
import warnings

from costmodel import InputError

# Environment read by Ray when it starts: no usage-stats prompt or upload, no uv hook, no
# per-process log deduplication notices, no "accelerator env var override" warnings.
QUIET_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "RAY_DEDUP_LOGS": "0",
             "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0"}

# The embedded Ray's workers end with the driver. Ray starts its GCS server and raylet with
# PR_SET_PDEATHSIG (the kernel kills them when the driver dies), but the raylet puts each worker
# in a process group of its own (so that a terminal's Ctrl-C reaches the driver alone), and a
# worker ends only once it notices its raylet gone: after a kill -9 of the driver's process group
# the workers lived on for up to ~2.5 s (measured). Each worker's setup hook asks the kernel for
# the raylet's fate (end_with_raylet). The hook is named in the variable through which Ray itself
# hands a worker_process_setup_hook to its workers, set in the raylet's environment (which its
# workers inherit): given as ray.init's runtime_env instead, it made every worker start through
# Ray's runtime-env agent, 13-15 s later on 2 busy cores (measured).
SETUP_HOOK = "sweep._ray.end_with_raylet"
PR_SET_PDEATHSIG = 1  # linux/prctl.h

# Joining a cluster (join_cluster): the TCP probe's timeout, and Ray's attempts to reach the
# cluster's GCS, one a second (Ray's default is 20, also when the cluster refuses this process's
# token, where no later attempt can succeed). Left as they are where the environment sets them.
CONNECT_PROBE_S = 3.0
GCS_CONNECT_ATTEMPTS = 2
CONNECT_ENV = {"RAY_gcs_server_port_wait_time_s": str(GCS_CONNECT_ATTEMPTS)}

# A unit sent this many times without an answer (its workers or nodes died each time) fails
# the run; Ray itself retries a task whose worker died up to TASK_MAX_RETRIES times first.
TASK_MAX_RETRIES = 3
DRIVER_RESUBMITS = 3


# Spaces rebuilt in this (worker) process, by description: a Space builds a lookup table of its
# valid rows on first use (about a second for 10^7 grid points), so each worker builds it once,
# not once per task.
_SPACES: dict[tuple, object] = {}


def _rebuild_space(text: str, model, cluster):
    key = (text, model, cluster)
    space = _SPACES.get(key)
    if space is None:
        from search import Space

        space = _SPACES[key] = Space.from_json(json.loads(text), model, cluster)
    return space


def _reduce_space(space):
    return _rebuild_space, (json.dumps(space.to_json(), sort_keys=True), space.model, space.cluster)


def register_pickling() -> None:
    """Ship a Space to Ray workers as its JSON description (rebuilt there in microseconds): a
    Space has __slots__ and refuses attribute assignment, which pickle's default path needs."""
    import copyreg

    from search import Space

    copyreg.pickle(Space, _reduce_space)


def init_ray(*, workers: int | None, address: str | None) -> str:
    """Join the cluster at ``address`` (or $RAY_ADDRESS), else start an embedded local Ray with
    ``workers`` CPUs (default: the machine's cores). Returns a one-line description."""
    for k, v in QUIET_ENV.items():
        os.environ.setdefault(k, v)
    flag, address = cluster_address(address)
    if address:
        probe_address(address, flag)  # before importing Ray: an unreachable address is told in 3 s
    warnings.filterwarnings("ignore", module="ray")
    import ray

    register_pickling()
    if ray.is_initialized():
        return "Ray (already initialised)"
    common = dict(log_to_driver=False, logging_level=logging.ERROR, configure_logging=True)
    if address:
        join_cluster(address, flag, common)
        cpus = int(ray.cluster_resources().get("CPU", 0))
        return f"Ray cluster at {address} ({cpus} CPUs)"
    workers = workers or os.cpu_count() or 1
    os.environ.pop("RAY_ADDRESS", None)
    # address="local": always a new cluster of our own, never one that `ray start` left running.
    with _environment({**_setup_hook_env(), **_packages_path_env()}):  # the raylet's, not the driver's after
        ray.init(address="local", num_cpus=workers, num_gpus=0, include_dashboard=False, **common)
    _EMBEDDED.add("local")
    return f"embedded local Ray ({workers} worker{'s' if workers != 1 else ''})"


# Holds "local" while this process runs the embedded Ray it started (cleared by shutdown_ray).
_EMBEDDED: set[str] = set()


def stops_with_driver() -> bool:
    """True where Ray is the embedded one this process started: shutting it down ends every task,
    so a driver leaving early need not cancel its tasks one by one (a forced cancel racing a
    task's completion can abort Ray's core worker: "Tried to complete task that was not pending")."""
    return bool(_EMBEDDED)


def cluster_address(address: str | None) -> tuple[str, str | None]:
    """(the flag to name in messages, the cluster address or None): ``address`` (--address),
    else $RAY_ADDRESS, else None (an embedded local Ray)."""
    if address:
        return "--address", address
    return "RAY_ADDRESS", os.environ.get("RAY_ADDRESS") or None


def join_cluster(address: str, flag: str, init_args: dict) -> None:
    """ray.init(address) with its failures in one line each (costmodel.InputError naming ``flag``),
    within CONNECT_PROBE_S + GCS_CONNECT_ATTEMPTS seconds or so: an address that does not answer
    (a TCP probe first: Ray's own connection retries for 20 s), a cluster that requires a token
    this process does not have (Ray's token authentication), a cluster of another Ray or Python
    version. A failure Ray reports otherwise is raised as Ray raised it."""
    import ray

    own = {k: v for k, v in CONNECT_ENV.items() if k not in os.environ}  # an operator's own settings stand
    with _environment(own), _stderr_held() as held:
        try:
            ray.init(address=address, **init_args)
        except Exception as exc:
            line = connection_failure(exc, address, flag)
            if line is None:
                raise
            held.drop()  # Ray's lines about the failed attempts: the one line says it
            raise line from None


@contextlib.contextmanager
def _environment(values: dict[str, str]):
    """os.environ with ``values`` set, as it was again afterwards."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _setup_hook_env() -> dict[str, str]:
    """{Ray's setup-hook variable: SETUP_HOOK}; empty where this Ray has no such variable (its
    workers then end when they see their raylet gone) or where one is set already."""
    from ray._private import ray_constants

    name = getattr(ray_constants, "WORKER_PROCESS_SETUP_HOOK_ENV_VAR", None)
    return {name: SETUP_HOOK} if name and name not in os.environ else {}


# The folder holding this package and its siblings (costmodel, search, cli): on an embedded Ray's workers' path, so
# that a run from a checkout that was not installed (`python3 -m cli sweep ...`) reaches them there too.
PACKAGES_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _packages_path_env() -> dict[str, str]:
    """{"PYTHONPATH": PACKAGES_ROOT first, then what was there} where PACKAGES_ROOT is a checkout (its pyproject.toml
    beside the packages: an installed copy's folder is site-packages, already on every worker's path, and put first
    it would come before the standard library); empty there, or where it is on that path already."""
    old = os.environ.get("PYTHONPATH", "")
    if not os.path.isfile(os.path.join(PACKAGES_ROOT, "pyproject.toml")) or PACKAGES_ROOT in old.split(os.pathsep):
        return {}
    return {"PYTHONPATH": PACKAGES_ROOT + (os.pathsep + old if old else "")}


class _Held:
    keep = True

    def drop(self) -> None:
        self.keep = False


@contextlib.contextmanager
def _stderr_held():
    """What this process writes to its stderr (file descriptor 2: Ray's C++ core logs there, a
    line per failed attempt to reach the GCS, before Ray's logging is set up), held in a
    temporary file and written out at the end unless dropped."""
    import tempfile

    sys.stderr.flush()
    saved_fd = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        held = _Held()
        os.dup2(tmp.fileno(), 2)
        try:
            yield held
        finally:
            sys.stderr.flush()
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
            if held.keep:
                tmp.seek(0)
                sys.stderr.write(tmp.read().decode(errors="replace"))
                sys.stderr.flush()


def probe_address(address: str, flag: str) -> None:
    """A TCP connection to a HOST:PORT address (also ray://HOST:PORT) within CONNECT_PROBE_S;
    "auto" and "local" are left to Ray."""
    import socket

    if address in ("auto", "local"):
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise InputError(flag, "HOST:PORT of a Ray cluster's head node (its GCS port, 6379 unless `ray start "
                         "--head --port` chose another), or auto on a node of the cluster", address)
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_PROBE_S).close()
    except OSError as exc:
        why = f"no answer within {CONNECT_PROBE_S:g} s" if isinstance(exc, TimeoutError) else (
            exc.strerror or type(exc).__name__)
        raise InputError(flag, "the address of a running Ray cluster's head node, reachable from here (start it with "
                         "`ray start --head` or `ray up cluster.yaml`; check the host, the port and firewalls)",
                         f"{address}: {why}") from None


def connection_failure(exc: BaseException, address: str, flag: str) -> InputError | None:
    """The one line for a failure of ray.init(address) (``exc`` and its causes), or None where
    it is none of those join_cluster names."""
    chain, e = [], exc
    while e is not None and len(chain) < 8:
        chain.append(e)
        e = e.__cause__ or e.__context__
    text = "\n".join(f"{type(e).__name__}: {e}" for e in chain)
    if "InvalidAuthToken" in text or "AuthenticationError" in text or "authentication token" in text:
        return InputError(flag, "a token for this Ray cluster, which requires one: set RAY_AUTH_MODE=token and "
                          "RAY_AUTH_TOKEN=<the cluster's token> (or RAY_AUTH_TOKEN_PATH=<a file holding it>; "
                          "`ray get-auth-token` on the head node prints it)", f"{address}: token missing or wrong")
    mismatch = re.search(r"Version mismatch: The cluster was started with:\s*Ray: (\S+)\s*Python: (\S+)\s*"
                         r"This process .*? was started with:\s*Ray: (\S+)\s*Python: (\S+)", text, re.S)
    if mismatch:
        cluster_ray, cluster_py, ray_here, py_here = mismatch.groups()
        return InputError(flag, f"a Ray cluster of this machine's versions, Ray {ray_here} and Python {py_here} (run "
                          f"plansweep where Ray {cluster_ray} and Python {cluster_py} are installed, or start the "
                          "cluster with this machine's)", f"{address}: a cluster of Ray {cluster_ray}, Python "
                          f"{cluster_py}")
    if isinstance(exc, ConnectionError):
        return InputError(flag, "the address of a running Ray cluster", f"{address}: {str(exc).splitlines()[0]}")
    return None


def end_with_raylet() -> None:
    """In an embedded Ray's worker (its worker_process_setup_hook): SIGKILL this worker when its
    parent, the raylet, dies (Linux PR_SET_PDEATHSIG; nothing elsewhere). A worker whose raylet
    died before the request is made ends at once."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    parent = os.getppid()
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        return  # not granted: the worker still ends once it sees its raylet gone (Ray's own check)
    if parent == 1 or os.getppid() != parent:
        os._exit(1)  # the raylet is already gone


def cluster_cpus() -> int:
    import ray

    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def is_lost_work(exc: BaseException) -> bool:
    """True where the work was lost with its worker, actor or node (send it again); False for
    an exception raised by our own code in the task (a real failure: re-raise it)."""
    import ray.exceptions as rex

    if isinstance(exc, rex.RayTaskError):
        return isinstance(exc.cause, (rex.WorkerCrashedError, rex.NodeDiedError, rex.ActorDiedError))
    return isinstance(exc, (rex.WorkerCrashedError, rex.NodeDiedError, rex.ObjectLostError,
                            rex.ActorDiedError, rex.ActorUnavailableError, rex.OwnerDiedError))


def get_unless_lost(ref, *, may_resend: bool):
    """ray.get(ref); None where the work was lost with its worker, actor or node and
    ``may_resend`` (the caller sends it again). An exception our own code raised in the task is
    raised as itself."""
    import ray

    try:
        return ray.get(ref)
    except Exception as exc:
        if may_resend and is_lost_work(exc):
            return None
        if isinstance(exc, ray.exceptions.RayTaskError):
            raise exc.as_instanceof_cause() from None
        raise


def shutdown_ray(*, quiet: bool = False) -> None:
    """ray.shutdown(), with SIGINT ignored while it runs: a Ctrl-C reaches every process of the
    terminal's process group, and a second one arriving while Ray stops its workers would end
    the shutdown (and the command) in a traceback. With ``quiet`` (after an interrupt) what Ray's
    C++ core writes to stderr meanwhile is dropped: its lines about the tasks the interrupt
    stopped ('Failed to push error to driver ...') would follow the command's own one line."""
    import signal

    import ray

    register_pickling()
    if not ray.is_initialized():
        return
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: signals are not ours to set
        previous = None
    try:
        with _stderr_held() as held:
            if quiet:
                held.drop()
            ray.shutdown()
        _EMBEDDED.clear()
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
