"""TPESearcher's defaults, importable without optuna (the options and --help read them)."""

DEFAULT_N_STARTUP_TRIALS = 20
# 0: out-of-memory rows are constraint violations (c-TPE); > 0: soft memory walls (search._tpe's
# module docstring).
DEFAULT_MEMORY_PENALTY = 0.1
# Share of a known budget spent last on local moves around the best feasible point (search._tpe,
# ``local_share``). Chosen on tuning seeds 100-119 (GPT-3 175B) and 100-109 (the other seven problems)
# of BENCHMARKS.md "Search quality on more problems", budgets of 2%: 175B within 1% on 5/20, 10/20,
# 14/20, 19/20, 12/20 seeds at 0, 0.5, 0.7, 0.8, 0.9 (0 and 0.5 without the coupled pairs: 0/10, 1/10).
DEFAULT_LOCAL_SHARE = 0.8
