"""Searchers over strategy spaces: grid, MCMC, TPE and Piper's planner."""

from search._piper import PiperPlan, PiperStage, evaluate_piper_plan, solve_piper
from search._piper_input import (
    PiperGraph,
    PiperNode,
    Tmpc,
    load_piper_graph,
    parse_piper_graph,
    with_overrides,
)

__all__ = [
    "PiperGraph",
    "PiperNode",
    "PiperPlan",
    "PiperStage",
    "Tmpc",
    "evaluate_piper_plan",
    "load_piper_graph",
    "parse_piper_graph",
    "solve_piper",
    "with_overrides",
]
