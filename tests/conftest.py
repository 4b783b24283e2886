import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Compiled bytecode is kept (in the git-ignored __pycache__ folders) even where the environment
# says PYTHONDONTWRITEBYTECODE: the suite starts hundreds of processes (the command line, Ray's
# workers, pytest's own workers), each of which would otherwise compile the package, and pytest
# its assertion-rewritten test modules, from source again. The processes started after this
# line inherit the environment without it.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# One BLAS thread a process: pytest-xdist already runs a worker per core, and the suite's processes
# (the command line, Ray's workers) multiply small float matrices (Piper's stage sums, the searchers'
# fits), where OpenBLAS's threads on cores that are all busy cost more than they give. Set before
# numpy is first imported in this process; the processes started after inherit it.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


def pytest_collection_modifyitems(session, config, items):
    """The modules that hold slow tests (Ray clusters, kills, long searches) run first, each kept
    whole so that its module fixtures are built once, and the rest after, in their usual order.
    pytest-xdist's workers split the list in halves and an idle one takes queued tests from the
    busy one, but never the one it is running nor its last queued one: a Ray test left for the
    end is half a minute with one core idle."""
    slow = {item.module.__name__ for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.module.__name__ not in slow)  # stable: the order within each group kept
