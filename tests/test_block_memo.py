"""The evaluation's memo of what its blocks price per distinct combination (costmodel._distinct.BlockMemo): each
combination computed once an evaluation, the values back as computed, and rows priced in a block that read the
memo equal to the same rows priced alone."""

from __future__ import annotations

import numpy as np

from costmodel import METRIC_COLUMNS, cluster_preset, evaluate, model_preset
from costmodel._bench_rows import bench_table
from costmodel._distinct import BlockMemo, unique_rows
from costmodel._evaluate import BLOCK_ROWS


def test_a_combination_is_computed_once_and_comes_back_as_computed():
    asked = []

    def compute(a, b):
        def f(sel):
            asked.append(sorted(zip(a[sel].tolist(), b[sel].tolist(), strict=True)))
            return 10.0 * a[sel] + b[sel], 7.0  # (a column and a constant)
        return f

    memo = BlockMemo()
    a, b = np.array([0, 1, 2]), np.array([3, 0, 1])
    x, y = memo.get("k", [a, b], compute(a, b))
    assert x.tolist() == [3.0, 10.0, 21.0] and y.tolist() == [7.0] * 3 and asked == [[(0, 3), (1, 0), (2, 1)]]
    # two combinations seen, two new (in the radix fixed by the first block: 4 x (its largest value + 1))
    a, b = np.array([2, 5, 0, 1]), np.array([1, 4, 3, 2])
    x, y = memo.get("k", [a, b], compute(a, b))
    assert x.tolist() == [21.0, 54.0, 3.0, 12.0] and y.tolist() == [7.0] * 4
    assert asked[1:] == [[(1, 2), (5, 4)]]
    # a value past the radix (a: 4 x (2 + 1) = 12): priced without the memo, every entry
    a, b = np.array([12, 0]), np.array([0, 3])
    x, _ = memo.get("k", [a, b], compute(a, b))
    assert x.tolist() == [120.0, 3.0] and asked[2:] == [[(0, 3), (12, 0)]]
    # another name keeps its own combinations
    memo.get("other", [a, b], compute(a, b))
    assert asked[3:] == [[(0, 3), (12, 0)]]


def test_rows_priced_in_later_blocks_from_the_memo_equal_the_rows_priced_alone():
    # bench rows over three blocks: the data-parallel exchange (and an MoE model's expert exchange) of the second and
    # third blocks' combinations come from the first block's; each sampled row priced alone (one block, no memo)
    cluster = cluster_preset("h100x1024")
    rng = np.random.default_rng(4)
    for name, fw in (("gpt3-175b", "megatron-core"), ("gpt3-175b", "deepspeed"), ("mixtral-8x7b", "fsdp2")):
        model = model_preset(name)
        t = bench_table(2 * BLOCK_ROWS + 1000, experts=model.experts)
        whole = evaluate(model, cluster, t, framework=fw)
        rows = rng.choice(np.arange(BLOCK_ROWS, len(t)), 400, replace=False)
        alone = evaluate(model, cluster, t.take(rows), framework=fw)
        assert (alone["dp_comm_s"] > 0).sum() >= 100  # (every column is priced, also on refused rows)
        for k in METRIC_COLUMNS:
            np.testing.assert_array_equal(whole[k][rows], alone[k], err_msg=f"{name} {fw} {k}")


def test_unique_rows_are_numpys_unique_rows_and_their_shapes():
    # the simulator's inputs: rows of (schedule, pp, m, vpp, comp, stage times), many repeated, some equal in their
    # leading columns only; numpy's np.unique(axis=0) is the independent answer, also for -0.0 and 0.0 (equal)
    rng = np.random.default_rng(5)
    lead = rng.integers(0, 3, (600, 4)).astype(np.float64)
    times = rng.choice([0.5, 1.25, 2.0, 1e-3, 7.0], (600, 5))
    a = np.concatenate([lead, times], axis=1)[rng.integers(0, 600, 2000)]
    a[::7, 5] = -0.0
    a[3::7, 5] = 0.0
    uniq, back, shapes, gid = unique_rows(a, lead=4)
    u_np, b_np = np.unique(a, axis=0, return_inverse=True)
    s_np, g_np = np.unique(u_np[:, :4], axis=0, return_inverse=True)
    assert np.array_equal(uniq, u_np) and np.array_equal(back, b_np.ravel())
    assert np.array_equal(shapes, s_np) and np.array_equal(gid, g_np.ravel())
    assert len(uniq) < len(a) and np.array_equal(uniq[back], a)
    u1, b1 = unique_rows(a[:1])
    assert np.array_equal(u1, a[:1]) and b1.tolist() == [0]
