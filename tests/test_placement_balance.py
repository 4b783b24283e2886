"""The speed-weighted placement recipe: the pools' order over the stages and the cuts that balance them, by hand."""

import numpy as np
import pytest

from costmodel import evaluate, hetero_preset, model_preset
from search import HeteroSpace, MCMCSearcher
from search._hetero_space import _arrangements, balanced_cuts, balanced_placement, head_layers
from search._mcmc import DEFAULT_STARTS


def test_arrangements_are_the_distinct_orders_in_lexicographic_order():
    assert list(_arrangements([2, 1])) == [(0, 0, 1), (0, 1, 0), (1, 0, 0)]
    assert len(list(_arrangements([2, 2]))) == 6  # 4! / (2! 2!)


def test_balanced_cuts_by_hand():
    # speeds 3, 1, 1, 3 over 32 layers, cuts round(8 (j + 1)) + shift, shifts -2..2: the middle stages hold the cuts
    # 10 -> 22 between them (12 layers at speed 1: 6 each at best), so 10 / 16 / 22, the slowest stage 6 / 1
    shifts = [tuple(range(-2, 3))] * 3
    path, worst = balanced_cuts(np.array([3.0, 1.0, 1.0, 3.0]), 32, 0.0, shifts, 1)
    assert tuple(path) == (2, 0, -2) and worst == pytest.approx(6.0)
    # the last stage carries the head: 10 layers + 3 over two equal stages, cut at 6 or 7, both 7 at worst
    path, worst = balanced_cuts(np.array([1.0, 1.0]), 10, 3.0, [tuple(range(-3, 4))], 1)
    assert worst == pytest.approx(7.0) and path[0] in (1, 2)
    # shifts that cannot give every stage a layer
    assert balanced_cuts(np.array([1.0, 1.0]), 2, 0.0, [(-1,)], 1) == (None, np.inf)


def test_balanced_placement_picks_the_order_the_shifts_can_balance():
    # two slow (1) and two fast (3) stages, cuts within 2 of the uniform 8 / 16 / 24: in pool order 0, 0, 1, 1 the
    # slow pair needs at least 14 layers (7 at worst); alternating 0, 1, 0, 1 leaves the first slow stage 6 (the least
    # the first cut allows) and the second 4: 6 at worst, the first such order
    found = balanced_placement(np.array([0, 0, 1, 1]), np.array([1.0, 3.0]), 32, 0.0, [tuple(range(-2, 3))] * 3, 1,
                               best=6)
    order, shifts = found[0]
    assert tuple(order) == (0, 1, 0, 1)
    # the six orders, fastest first: every order with a fast stage between the slow ones, or at an end, balances
    # to 6; both slow stages first or last leaves one 7
    assert [tuple(o) for o, _ in found[-2:]] == [(0, 0, 1, 1), (1, 1, 0, 0)]
    assert balanced_cuts(np.array([1.0, 3.0, 1.0, 3.0]), 32, 0.0, [tuple(range(-2, 3))] * 3, 1)[1] == 6.0
    assert balanced_cuts(np.array([1.0, 1.0, 3.0, 3.0]), 32, 0.0, [tuple(range(-2, 3))] * 3, 1)[1] == 7.0
    assert shifts[0] == -2


def test_head_layers_gpt_closed_form():
    # GPT (f = 4h, no biases counted): a layer 24 h^2 + 4 s h FLOPs a token forward, the head 2 h V: V / (12 h + 2 s)
    m = model_preset("gpt3-175b")
    assert head_layers(m) == pytest.approx(51200 / (12 * 12288 + 2 * 2048), rel=1e-3)


def test_speed_weighted_start_balances_a100_and_h100_stages():
    # Llama 3 8B on 64 A100 + 64 H100, 4 stages of dp 4 x tp 8, boundaries within 2 layers of 8 / 16 / 24: in pool
    # order (A100, A100, H100, H100) no cut balances them; the recipe alternates pools and cuts 6 / 10 / 6 / 10 (or
    # the H100s at the ends, 10 / 6 / 6 / 10): the A100 stages 6 layers each
    model, hc = model_preset("llama3-8b"), hetero_preset("a100x64+h100x64")
    space = HeteroSpace.from_options(model, hc, global_batch=256, pp=(4,), dp=(4,), tp=(8,), max_shift=2,
                                     microbatches=(64,), recompute=("selective",), zero_stage=(1,))
    starts = space.start_points()
    t = space.table(np.stack([starts["megatron"], starts["speed_weighted"]]))
    pools, layers = t["pool"][1, :4], t["layers"][1, :4]
    assert sorted(layers[pools == 0].tolist()) == [6, 6] and layers[pools == 1].sum() == 20
    m = evaluate(model, hc, t)
    assert m["tokens_per_s"][1] > 1.2 * m["tokens_per_s"][0]


def test_mcmc_default_starts_take_a_placement_space_recipes():
    model, hc = model_preset("llama3-8b"), hetero_preset("a100x64+h100x64")
    space = HeteroSpace.from_options(model, hc, global_batch=256, pp=(4,), dp=(4,), tp=(8,), max_shift=2,
                                     microbatches=(64,), recompute=("selective",), zero_stage=(1,))
    assert MCMCSearcher(space, seed=0, budget=60).starts == ("megatron", "speed_weighted", "random")
    from costmodel import cluster_preset
    from search import Space

    homo = Space.from_options(model, cluster_preset("h100x64"), global_batch=256)
    assert MCMCSearcher(homo, seed=0, budget=60).starts == DEFAULT_STARTS
