"""Names for users: presets and help texts say what things are, old names stay as aliases."""

from __future__ import annotations

import argparse
import re

import pytest

import costmodel
from cli import build_parser
from costmodel._hardware import CLUSTER_ALIASES
from costmodel._workloads import MODEL_ALIASES

# Wording that names a seed document ("seed 003", "seed000", "Seed 000's") rather than a thing;
# the search commands' --seed (a random seed) is not such wording.
SEED_DOC = re.compile(r"seed\s*0\d\d", re.IGNORECASE)


def test_model_aliases_are_their_new_names():
    assert MODEL_ALIASES == {"seed000-mlp": "mlp-64x8192"}
    for old, new in MODEL_ALIASES.items():
        assert costmodel.model_preset(old) is costmodel.model_preset(new)
        assert old not in costmodel.MODEL_PRESETS  # one object, listed once, under its new name


def test_the_mlp_preset_is_what_its_name_says():
    mlp = costmodel.model_preset("mlp-64x8192")
    assert (mlp.kind, mlp.layers, mlp.hidden, mlp.activation) == ("mlp", 64, 8192, "relu")


def test_cluster_aliases_are_their_new_names():
    assert CLUSTER_ALIASES == {"seed000-16": "a100x16-flat"}
    for old, new in CLUSTER_ALIASES.items():
        assert costmodel.cluster_preset(old) == costmodel.cluster_preset(new)
        assert costmodel.cluster_preset(old).name == new
    flat = costmodel.cluster_preset("a100x16-flat")
    # 16 A100s, one per node, 200 Gb/s = 25 GB/s all-to-all.
    assert (flat.num_gpus, flat.gpus_per_node, flat.scaleout_Bps) == (16, 1, 25e9)
    assert "a100x16-flat" in costmodel.cluster_names() and "seed000-16" not in costmodel.cluster_names()


def _parsers(parser: argparse.ArgumentParser, path=("plansweep",)):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def test_help_texts_name_no_seed_documents():
    parsers = list(_parsers(build_parser()))
    assert len(parsers) > 15  # every command and searcher, not just the top level
    for path, p in parsers:
        text = p.format_help()
        assert not SEED_DOC.search(text), f"{' '.join(path)} --help: {SEED_DOC.search(text).group(0)!r}"
    top = build_parser().format_help()
    assert "schedule-experiments" in top and "ZB-H1" in top


@pytest.mark.parametrize("flag", ["--mlp-figures", "--seed000"])
def test_plot_figure_flag_and_its_old_name(flag):
    args = build_parser().parse_args(["plot", "RUN", flag, "no"])
    assert args.mlp_figures == "no"
