"""The options of each searcher: one frozen dataclass per searcher, checked when built.

    opts = MCMCOptions(chains=16, memory_penalty=0.0)      # InputError naming a bad field
    searcher = opts.searcher(space, seed=0)                # every field reaches the searcher
    run_json["options"] = {**opts.to_json(), ...}          # recorded whole
    MCMCOptions.from_json(run_json["options"])             # a missing field takes its default

Each field's metadata holds what the command line needs to offer it: ``kind`` (int or float),
``low`` and ``high`` (the smallest and largest values allowed, None: no bound), ``help``, and
``flag`` where the flag is not the field's name with dashes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from costmodel import InputError
from search import _gradient as gradient
from search._gradient import GradientSearcher
from search._grid import GridSearcher
from search._mcmc import (
    DEFAULT_BETA,
    DEFAULT_MEMORY_PENALTY,
    DEFAULT_POLISH,
    DEFAULT_RESET_EVERY,
    DEFAULT_START_SAMPLE,
    MCMCSearcher,
)
from search._piper_input import PiperGraph, with_overrides
from search._tpe_defaults import DEFAULT_LOCAL_SHARE as TPE_LOCAL_SHARE
from search._tpe_defaults import DEFAULT_MEMORY_PENALTY as TPE_MEMORY_PENALTY
from search._tpe_defaults import DEFAULT_START_SAMPLE as TPE_START_SAMPLE

if TYPE_CHECKING:
    from search._tpe import TPESearcher

SCREEN_HELP = ("feasibility first: 1 walks only the points that fit in memory (a memory-only screen of the whole "
               "space, where it has at most 2,000,000 valid points) and evaluates all of them when the budget covers "
               "them; 0 walks every valid point")


# Upper bounds of the options that size a step or scale the logits: far above any use (the defaults
# are single digits), low enough that a step's arrays fit in memory and the logits stay finite.
MAX_CHAINS = 10_000
MAX_SAMPLES = 10_000
MAX_WEIGHT = 1e6  # the gradient search's step size and entropy weight, the memory penalties


POLISH_HELP = ("with a budget: the last share of it is spent on the unevaluated neighbours of the best plans "
               "found (their single changes, the model of the plans told ranking them), in [0, 1]")


def _share(name: str, value: float) -> None:
    if value > 1:
        raise InputError(name, "a number in [0, 1]", value)


def _opt(default, kind: type, help: str, low=None, flag: str | None = None, high=None):
    return field(default=default, metadata={"kind": kind, "low": low, "high": high, "help": help, "flag": flag})


def _expected(kind: type, low, high) -> str:
    """What a field takes, in words: its kind and range."""
    if (kind, low, high) == (int, 0, 1):
        return "0 or 1"
    word = "an integer" if kind is int else "a finite number"
    if high is None:
        return word + ("" if low is None else f" >= {low}")
    return word + (f" <= {high:,.0f}" if low is None else f" from {low} to {high:,.0f}")


class _Options:
    """Checks and JSON shared by the options dataclasses (each field: kind, low, high)."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value, kind = getattr(self, f.name), f.metadata["kind"]
            low, high = f.metadata["low"], f.metadata.get("high")
            if value is None and f.default is None:
                continue
            ok = (isinstance(value, int) and not isinstance(value, bool)) if kind is int else (
                isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value))
            if not ok or (low is not None and value < low) or (high is not None and value > high):
                raise InputError(f.name, _expected(kind, low, high), value)
            object.__setattr__(self, f.name, kind(value))

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, mapping: Mapping[str, object]):
        """The options recorded in ``mapping`` (other keys ignored; a missing field: its default)."""
        return cls(**{f.name: mapping[f.name] for f in dataclasses.fields(cls) if f.name in mapping})


@dataclass(frozen=True, kw_only=True)
class MCMCOptions(_Options):
    chains: int | None = _opt(None, int, "chains (default auto: budget / 32 between 2 and 8; 8 without a "
                              "budget)", low=1, high=MAX_CHAINS)
    beta: float = _opt(DEFAULT_BETA, float, "inverse temperature", low=0.0)
    reset_every: int = _opt(DEFAULT_RESET_EVERY, int, "steps between resets to the best (0: never)", low=0)
    memory_penalty: float = _opt(DEFAULT_MEMORY_PENALTY, float, "soft memory walls: cost x (1 + L x overflow) out "
                                 "of memory (0: hard walls; out-of-memory points are walked only with --screen 0 "
                                 "or where the space is too large to screen)", low=0.0, high=MAX_WEIGHT)
    screen: int = _opt(1, int, SCREEN_HELP, low=0, high=1)
    start_sample: float = _opt(DEFAULT_START_SAMPLE, float, "with a budget: the first share of it is spent on "
                               "random points of the walk and the chains start at the best of them, in [0, 1]",
                               low=0.0)
    polish: float = _opt(DEFAULT_POLISH, float, POLISH_HELP, low=0.0)

    def __post_init__(self) -> None:
        super().__post_init__()
        _share("start_sample", self.start_sample)
        _share("polish", self.polish)

    def searcher(self, space, *, seed: int, budget: int | None = None, **extra) -> MCMCSearcher:
        """``extra``: MCMCSearcher's other keywords (starts); ``budget``: evaluations the run may
        spend (chains scale with it; a budget covering every point that fits enumerates them)."""
        return MCMCSearcher(space, seed=seed, budget=budget, **{**self.to_json(), "screen": bool(self.screen)}, **extra)


@dataclass(frozen=True, kw_only=True)
class TPEOptions(_Options):
    startup_trials: int | None = _opt(None, int, "random trials before TPE, per study (default auto: budget / 10 "
                                      "between 4 and 20; 20 without a budget)", low=0)
    memory_penalty: float = _opt(TPE_MEMORY_PENALTY, float, "soft memory walls: an out-of-memory trial is told as "
                                 "its unlimited-memory throughput / (1 + L x overflow) (0: a constraint violation, "
                                 "c-TPE)", low=0.0, high=MAX_WEIGHT)
    local_share: float = _opt(TPE_LOCAL_SHARE, float, "with a budget and a screened space: the last share of the "
                              "budget is spent on the unevaluated neighbours of the best plans found (their single "
                              "changes, the model of the plans told ranking them), in [0, 1]", low=0.0)
    start_sample: float = _opt(TPE_START_SAMPLE, float, "with a budget and a screened space: the first share of it "
                               "is spent on the recipes and random points that fit, TPE's first trials, in [0, 1]",
                               low=0.0)
    screen: int = _opt(1, int, SCREEN_HELP, low=0, high=1)

    def __post_init__(self) -> None:
        super().__post_init__()
        _share("local_share", self.local_share)
        _share("start_sample", self.start_sample)

    def searcher(self, space, *, seed: int, storage=None, budget: int | None = None) -> TPESearcher:
        from search._tpe import TPESearcher  # optuna only when TPE runs

        return TPESearcher(space, seed=seed, storage=storage, n_startup_trials=self.startup_trials,
                           memory_penalty=self.memory_penalty, budget=budget, screen=bool(self.screen),
                           local_share=self.local_share, start_sample=self.start_sample)


@dataclass(frozen=True, kw_only=True)
class GradientOptions(_Options):
    samples: int | None = _opt(None, int, "draws per step (the step's new points to evaluate; default auto: about "
                               "the square root of the gradient's share of the budget, between 4 and 16; 16 without "
                               "a budget)", low=2, high=MAX_SAMPLES)
    lr: float = _opt(gradient.DEFAULT_LR, float, "step size on the logits (> 0)", low=0.0, high=MAX_WEIGHT)
    temperature: float = _opt(gradient.DEFAULT_TEMPERATURE, float, "initial softmax temperature (> 0)", low=0.0)
    cooling: float | None = _opt(None, float, "temperature x this per step, in (0, 1] (1: no annealing; default "
                                 "auto: down to the lowest temperature at the gradient's last step; 0.97 without a "
                                 "budget)", low=0.0)
    min_temperature: float = _opt(gradient.DEFAULT_MIN_TEMPERATURE, float, "lowest temperature of the annealing "
                                  "(> 0)", low=0.0)
    entropy: float = _opt(gradient.DEFAULT_ENTROPY, float, "weight of the entropy bonus (0: none)", low=0.0,
                           high=MAX_WEIGHT)
    memory_penalty: float = _opt(gradient.DEFAULT_MEMORY_PENALTY, float, "soft memory walls: an out-of-memory "
                                 "point costs its time x (1 + L x overflow) (0: the worst)", low=0.0,
                                 high=MAX_WEIGHT)
    restart: int = _opt(gradient.DEFAULT_RESTART, int, "1: back to the uniform distribution when a step finds "
                        "few new points; 0: never", low=0, high=1)
    screen: int = _opt(gradient.DEFAULT_SCREEN, int, SCREEN_HELP, low=0, high=1)
    start_sample: float = _opt(gradient.DEFAULT_START_SAMPLE, float, "with a budget: the first share of it is "
                               "spent on the recipes and random points of the walk, and the logits start biased "
                               "toward the best of them, in [0, 1]", low=0.0)
    polish: float = _opt(gradient.DEFAULT_POLISH, float, POLISH_HELP, low=0.0)

    def __post_init__(self) -> None:
        super().__post_init__()
        # The searcher's own checks (> 0, at most 1, ...), so a bad value fails here, naming its field.
        GradientSearcher.check_options(**self.to_json())

    def searcher(self, space, *, seed: int, budget: int | None = None) -> GradientSearcher:
        """``budget``: evaluations the run may spend (steps, draws and cooling scale with it; a budget
        covering every point that fits enumerates them)."""
        return GradientSearcher(space, seed=seed, budget=budget, **self.to_json())


@dataclass(frozen=True, kw_only=True)
class GridOptions(_Options):
    start: int = _opt(0, int, "first grid index", low=0)
    stop: int | None = _opt(None, int, "one past the last grid index (default: the end)", low=1)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.stop is not None and self.stop <= self.start:
            raise InputError("stop", f"an integer > start={self.start}", self.stop)

    def searcher(self, space) -> GridSearcher:
        return GridSearcher(space, start=self.start, stop=self.stop)


@dataclass(frozen=True, kw_only=True)
class PiperOptions(_Options):
    """Overrides of a Piper graph's cluster values (None: the file's value)."""

    devices: int | None = _opt(None, int, "number of devices, overrides maxDevices", low=1)
    memory_bytes: float | None = _opt(None, float, "memory per device in bytes, overrides maxMemoryPerDevice",
                                      flag="--memory")
    microbatches: int | None = _opt(None, int, "micro-batches per batch, overrides mbsInBatch", low=1)
    bandwidth_Bps: float | None = _opt(None, float, "bandwidth per device in bytes/s, overrides bandwidth",
                                       flag="--bandwidth")

    def apply(self, graph: PiperGraph) -> PiperGraph:
        return with_overrides(graph, **self.to_json())
