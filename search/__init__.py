"""Searchers over strategy spaces (SearchSpace: Space, HeteroSpace): grid, MCMC, TPE, gradient and Piper's
planner."""

from typing import TYPE_CHECKING

from costmodel._lazy import lazy_exports

if TYPE_CHECKING:  # what a type checker sees; at run time each name is imported on first use
    from search._base import Searcher, SearchSpace, objective
    from search._gradient import GradientSearcher
    from search._grid import GridSearcher, RandomSearcher
    from search._hetero_space import HeteroSpace
    from search._mcmc import MCMCSearcher
    from search._options import GradientOptions, GridOptions, MCMCOptions, PiperOptions, TPEOptions
    from search._piper import PiperPlan, PiperStage, evaluate_piper_plan, solve_piper
    from search._piper_input import (
        PiperGraph,
        PiperNode,
        Tmpc,
        load_piper_graph,
        parse_piper_graph,
        with_overrides,
    )
    from search._piper_space import PiperSpace, PiperTable, solve_space_dp
    from search._replan import POLICIES, replan
    from search._space import (
        EXACT_CHOICES,
        PARTITION_SHIFTS,
        Dim,
        Space,
        default_choices,
        default_space,
        default_table,
        exact_space,
        partition_space,
    )
    from search._tpe import TPESearcher

# Private module -> the public names it defines. Imported on first use (module __getattr__,
# PEP 562), so that a command importing one part (the command line's InputError) does not
# import every module and numpy with it. tests/test_cli_startup.py holds this table equal
# to the imports above.
# TPESearcher imports optuna: like every name here, imported only when asked for.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "search._base": ("Searcher", "SearchSpace", "objective"),
    "search._gradient": ("GradientSearcher",),
    "search._grid": ("GridSearcher", "RandomSearcher"),
    "search._hetero_space": ("HeteroSpace",),
    "search._mcmc": ("MCMCSearcher",),
    "search._options": ("GradientOptions", "GridOptions", "MCMCOptions", "PiperOptions", "TPEOptions"),
    "search._piper": ("PiperPlan", "PiperStage", "evaluate_piper_plan", "solve_piper"),
    "search._piper_input": ("PiperGraph", "PiperNode", "Tmpc", "load_piper_graph", "parse_piper_graph",
                            "with_overrides"),
    "search._piper_space": ("PiperSpace", "PiperTable", "solve_space_dp"),
    "search._replan": ("POLICIES", "replan"),
    "search._space": ("EXACT_CHOICES", "PARTITION_SHIFTS", "Dim", "Space", "default_choices", "default_space",
                      "default_table", "exact_space", "partition_space"),
    "search._tpe": ("TPESearcher",),
}
__getattr__, __dir__, _MODULE_OF = lazy_exports("search", _EXPORTS, globals())


__all__ = [
    "POLICIES", "replan", "Dim", "EXACT_CHOICES", "GradientOptions", "GradientSearcher", "GridOptions",
    "GridSearcher", "HeteroSpace", "MCMCOptions", "MCMCSearcher", "PARTITION_SHIFTS", "PiperGraph", "PiperNode",
    "PiperOptions", "PiperPlan", "PiperSpace", "PiperStage", "PiperTable", "RandomSearcher", "SearchSpace",
    "Searcher", "Space", "TPEOptions", "TPESearcher", "Tmpc", "default_choices", "default_space", "default_table",
    "evaluate_piper_plan", "exact_space", "load_piper_graph", "objective", "parse_piper_graph", "partition_space",
    "solve_piper", "solve_space_dp", "with_overrides"
]
