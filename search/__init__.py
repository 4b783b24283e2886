"""Searchers over strategy spaces (SearchSpace: Space, HeteroSpace): grid, MCMC, TPE, gradient and Piper's
planner."""

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
from search._replan import POLICIES, replan
from search._space import (
    EXACT_CHOICES,
    PARTITION_SHIFTS,
    Dim,
    Space,
    default_choices,
    default_space,
    exact_space,
    partition_space,
)


def __getattr__(name: str):
    # TPESearcher imports optuna: only when asked for (the command line starts without it).
    if name == "TPESearcher":
        from search._tpe import TPESearcher

        return TPESearcher
    raise AttributeError(f"module 'search' has no attribute {name!r}")

__all__ = [
    "POLICIES",
    "replan",
    "Dim",
    "EXACT_CHOICES",
    "GradientOptions",
    "GradientSearcher",
    "GridOptions",
    "GridSearcher",
    "HeteroSpace",
    "MCMCOptions",
    "MCMCSearcher",
    "PARTITION_SHIFTS",
    "PiperGraph",
    "PiperNode",
    "PiperOptions",
    "PiperPlan",
    "PiperStage",
    "RandomSearcher",
    "SearchSpace",
    "Searcher",
    "Space",
    "TPEOptions",
    "TPESearcher",
    "Tmpc",
    "default_choices",
    "default_space",
    "evaluate_piper_plan",
    "exact_space",
    "load_piper_graph",
    "objective",
    "parse_piper_graph",
    "partition_space",
    "solve_piper",
    "with_overrides",
]
