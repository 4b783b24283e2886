"""`plansweep search mcmc|tpe --help` states the defaults the code uses: each option's
help names its default, which is the options dataclass's default and the searcher's own keyword
default; the automatic ones (None) say "default auto"."""

from __future__ import annotations

import dataclasses
import inspect
import re

import pytest

from cli import build_parser
from cli._cmd_search import DEFAULT_BUDGET
from search import MCMCSearcher, TPESearcher
from search._options import MCMCOptions, TPEOptions

# Options field -> the searcher's keyword it is passed as (MCMCOptions passes every field by name).
SEARCHER_KEYWORD = {"tpe": {"startup_trials": "n_startup_trials"}}


def _subparser(name: str):
    parser = build_parser()
    search = next(a for a in parser._subparsers._group_actions if "search" in a.choices).choices["search"]
    return next(a for a in search._subparsers._group_actions).choices[name]


@pytest.mark.parametrize("name, options, searcher", [("mcmc", MCMCOptions, MCMCSearcher),
                                                      ("tpe", TPEOptions, TPESearcher)])
def test_help_defaults_match_the_options_and_the_searcher(name, options, searcher):
    p = _subparser(name)
    by_dest = {a.dest: a for a in p._actions}
    params = inspect.signature(searcher.__init__).parameters
    for f in dataclasses.fields(options):
        action = by_dest[f.name]
        assert action.default is None  # not given -> the dataclass default (options_from_args)
        keyword = SEARCHER_KEYWORD.get(name, {}).get(f.name, f.name)
        assert params[keyword].default == f.default, f.name
        if f.default is None:
            assert "default auto" in action.help, f.name
        else:
            stated = re.search(r"\(default ([^)]+)\)", action.help)
            assert stated and float(stated.group(1)) == float(f.default), (f.name, action.help)
    budget = by_dest["budget"]
    assert int(budget.default) == DEFAULT_BUDGET and f"{DEFAULT_BUDGET:,}" in budget.help
