"""The driver: Ray fan-out, the run directory, Parquet results, resume, reports and plots.

    rd, resumed = RunDir.create_or_resume("runs/gpt3", request)   # run.json, lock, versions
    run_grid(rd, in_process=False, max_in_flight=None)           # units on Ray -> Parquet parts
    best_rows(open_run(rd.path), 10)                             # the 10 best distinct strategies

Only this package imports ray (lazily, in sweep._ray) and writes results; the command line
(package cli) calls it.
"""

from costmodel._lazy import lazy_exports

# Private module -> the public names it defines. Imported on first use (module __getattr__,
# PEP 562), so that importing one light part of sweep (the command line's --help does) does not
# import pyarrow.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "sweep._grid": ("run_grid",), "sweep._keep": ("Keep",), "sweep._results": ("result_schema",),
    "sweep._rundir": ("RUN_FORMAT", "RunDir"), "sweep._runview": ("RunView", "best_rows", "open_run", "summary"),
    "sweep._search_engine": ("run_search",),
}
__getattr__, __dir__, _MODULE_OF = lazy_exports("sweep", _EXPORTS, globals())

__all__ = sorted(_MODULE_OF)
