"""The driver: Ray fan-out, the run directory, Parquet results, resume, reports and plots.

    rd, resumed = RunDir.create_or_resume("runs/gpt3", request)   # run.json, lock, versions
    run_grid(rd, in_process=False, max_in_flight=None)           # units on Ray -> Parquet parts
    best_rows(open_run(rd.path), 10)                             # the 10 best distinct strategies

Only this package imports ray (lazily, in sweep._ray) and writes results; the command line
(package cli) calls it.
"""

from sweep._grid import run_grid
from sweep._keep import Keep
from sweep._results import result_schema
from sweep._rundir import RUN_FORMAT, RunDir
from sweep._runview import RunView, best_rows, open_run, summary
from sweep._search_engine import run_search

__all__ = ["Keep", "RUN_FORMAT", "RunDir", "RunView", "best_rows", "open_run", "result_schema", "run_grid",
           "run_search", "summary"]
