"""TPESearcher's defaults, importable without optuna (the options and --help read them)."""

DEFAULT_N_STARTUP_TRIALS = 20
# 0: out-of-memory rows are constraint violations (c-TPE); > 0: soft memory walls (search._tpe's
# module docstring).
DEFAULT_MEMORY_PENALTY = 0.1
