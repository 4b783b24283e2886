"""Starting or joining Ray, quickly and quietly, and telling lost work from failed work."""

from __future__ import annotations

import json
import logging
import os
import warnings

# Environment read by Ray when it starts: no usage-stats prompt or upload, no uv hook, no
# per-process log deduplication notices, no "accelerator env var override" warnings.
QUIET_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "RAY_DEDUP_LOGS": "0",
             "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0"}

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
    warnings.filterwarnings("ignore", module="ray")
    import ray

    register_pickling()
    if ray.is_initialized():
        return "Ray (already initialised)"
    address = address or os.environ.get("RAY_ADDRESS") or None
    common = dict(log_to_driver=False, logging_level=logging.ERROR, configure_logging=True)
    if address:
        ray.init(address=address, **common)
        cpus = int(ray.cluster_resources().get("CPU", 0))
        return f"Ray cluster at {address} ({cpus} CPUs)"
    workers = workers or os.cpu_count() or 1
    os.environ.pop("RAY_ADDRESS", None)
    # address="local": always a new cluster of our own, never one that `ray start` left running.
    ray.init(address="local", num_cpus=workers, num_gpus=0, include_dashboard=False, **common)
    return f"embedded local Ray ({workers} worker{'s' if workers != 1 else ''})"


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


def shutdown_ray() -> None:
    import ray

    register_pickling()
    if ray.is_initialized():
        ray.shutdown()
