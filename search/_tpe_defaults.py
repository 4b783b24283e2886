"""TPESearcher's defaults, importable without optuna (the options and --help read them)."""

DEFAULT_N_STARTUP_TRIALS = 20
# 0: out-of-memory rows are constraint violations (c-TPE); > 0: soft memory walls (search._tpe's
# module docstring).
DEFAULT_MEMORY_PENALTY = 0.1
# Share of a known budget spent last on local moves around the peaks among the feasible points told
# (search._tpe, ``local_share``), chosen on tuning seeds (BENCHMARKS.md, "Search quality on more
# problems"); its restarts at the next peak and its repairs were chosen on draw seed 1 (BENCHMARKS.md,
# "Search quality on drawn problems").
DEFAULT_LOCAL_SHARE = 0.7
# Share of a known budget spent first on uniformly random points that fit (search._local.start_sample),
# queued as the studies' first trials (on a screened walk).
DEFAULT_START_SAMPLE = 0.2
