"""The driver: Ray fan-out, the run directory, Parquet results, resume, reports and plots.

    rd, resumed = RunDir.create_or_resume("runs/gpt3", request)   # run.json, lock, versions
    run_grid(rd, in_process=False, max_in_flight=None)           # units on Ray -> Parquet parts
    best_rows(open_run(rd.path), 10)                             # the 10 best distinct strategies

Only this package imports ray (lazily, in sweep._ray) and writes results; the command line
(package cli) calls it.
"""

import importlib

# Public name -> the private module that defines it. Imported on first use (module __getattr__,
# PEP 562), so that importing one light part of sweep (the command line's --help does) does not
# import pyarrow.
_EXPORTS = {
    "run_grid": "sweep._grid", "Keep": "sweep._keep", "result_schema": "sweep._results",
    "RUN_FORMAT": "sweep._rundir", "RunDir": "sweep._rundir", "RunView": "sweep._runview",
    "best_rows": "sweep._runview", "open_run": "sweep._runview", "summary": "sweep._runview",
    "run_search": "sweep._search_engine",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'sweep' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])

__all__ = ["Keep", "RUN_FORMAT", "RunDir", "RunView", "best_rows", "open_run", "result_schema", "run_grid",
           "run_search", "summary"]
