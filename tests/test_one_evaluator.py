"""The one evaluator block (costmodel._block, views in costmodel._stages): the paths a table can
take through it give the same numbers, and the homogeneous link rule is the placement one."""

import numpy as np
import pytest

from costmodel import (
    METRIC_COLUMNS,
    StrategyTable,
    cluster_preset,
    evaluate,
    hetero_preset,
    make_cluster,
    model_preset,
)
from costmodel._evaluate import BLOCK_ROWS
from costmodel._pipeline_terms import first_max_stage
from costmodel._stages import placement_view


def _same(a, b, rtol=1e-12):
    for k in METRIC_COLUMNS:
        x, y = np.asarray(a[k]), np.asarray(b[k])
        if x.dtype.kind == "f":
            ok = (x == y) | np.isclose(x, y, rtol=rtol, atol=0.0)
        else:
            ok = x == y
        assert ok.all(), (k, x[~ok][:3], y[~ok][:3])


def test_first_max_is_argmax_with_ties_to_the_first():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 4, size=(7, 5000)).astype(np.float64)  # many ties
    a[:, :10] = -np.inf
    a[3, :10] = 1.0
    assert np.array_equal(first_max_stage(a), np.argmax(a, axis=0))
    # within 1e-12 of the largest counts as it (MoE rows): the first such stage
    b = np.array([[1.0], [1.0 + 1e-13], [0.5]])
    assert first_max_stage(b, tol=True)[0] == 0 and first_max_stage(b)[0] == 1
    # three stage rows (the representative stages' own branch): argmax with ties to the first; 0 where no stage
    # holds the maximum (a NaN column)
    c = rng.integers(0, 3, size=(3, 5000)).astype(np.float64)
    c[:, :4] = [[-np.inf, 2.0, 2.0, 5.0], [-np.inf, 2.0, 3.0, 5.0], [-np.inf, 1.0, 3.0, 5.0]]
    assert np.array_equal(first_max_stage(c), np.argmax(c, axis=0))
    assert first_max_stage(np.full((3, 2), np.nan)).tolist() == [0, 0]
    assert first_max_stage(np.array([[0.5], [1.0 + 1e-13], [1.0]]), tol=True)[0] == 1
    assert first_max_stage(np.array([[0.5], [0.9], [1.0]]), tol=True)[0] == 2


def _uniform_placements(n, rng):
    p = rng.choice([4, 8], n)
    on = np.arange(8)[None, :] < p[:, None]
    pool = np.where(on, rng.integers(0, 2, n)[:, None], 0)
    return StrategyTable.from_columns(stage_pool=pool, stage_dp=np.where(on, rng.choice([1, 2], n)[:, None], 1),
                                    stage_tp=np.where(on, rng.choice([2, 4], n)[:, None], 1),
                                    stage_layers=np.where(on, (48 // p)[:, None], 0), pp=p, global_batch=1536,
                                    microbatches=rng.choice([24, 48], n), recompute=rng.integers(0, 3, n),
                                    schedule=rng.choice([1, 3, 4], n), zero_stage=1, sequence_parallel=True)


def test_alike_placements_on_three_representatives_equal_every_stage():
    """A block of placements whose stages are all alike is priced on three representative stages;
    the same rows beside one placement with unlike stages are priced on every stage."""
    model, hc = model_preset("megatron-22b"), hetero_preset("a100x64+h100x64")
    t = _uniform_placements(300, np.random.default_rng(1))
    assert placement_view(t, model).j.shape[0] == 3
    odd = t.take(slice(0, 1))
    st = {k: v.copy() for k, v in odd.stages.items()}
    st["dp"][0, 0] = 1 + (st["dp"][0, 0] % 2)  # stage 0 unlike the others
    mixed = StrategyTable.concat([t, StrategyTable(odd.columns, st)])
    assert placement_view(mixed, model).j.shape[0] == 8
    for mode in ("closed_form", "simulate"):
        # generic: it runs every schedule drawn (1F1B, ZB-H1, ZB-H2; Megatron-Core has no zero-bubble schedule)
        a = evaluate(model, hc, t, pipeline=mode, framework="generic")
        b = evaluate(model, hc, mixed, pipeline=mode, framework="generic")
        assert a["feasible"].sum() > 50
        _same(a, b.take(slice(0, len(t))))


def test_rows_come_back_in_their_order_after_the_sort_by_pp():
    """Large placement tables are priced sorted by pp; every row's metrics are its own."""
    model, hc = model_preset("megatron-22b"), hetero_preset("a100x64+h100x64")
    rng = np.random.default_rng(2)
    n = BLOCK_ROWS // 4 + 500
    t = _uniform_placements(n, rng)
    st = {k: v.copy() for k, v in t.stages.items()}
    # unlike stages, so no three representatives: tp 8 where the others have 2 or 4
    st["tp"][:, 1] = np.where(st["layers"][:, 1] > 0, 8, 1)
    t = StrategyTable(t.columns, st)
    whole = evaluate(model, hc, t)
    for i in rng.choice(n, 40, replace=False):
        _same(evaluate(model, hc, t.take(slice(i, i + 1))), whole.take(slice(i, i + 1)))


def test_fast_network_group_across_nodes_waits_for_the_node_link():
    """tp 4 on 2-GPU nodes whose own link (10 GB/s) is slower than the network (50 GB/s): the
    ring crosses both, so it runs at the node link's 10 GB/s x link efficiency, with the
    network's latency; the same group inside a 4-GPU node runs at the node link too."""
    model = model_preset("gpt3-175b")
    a = make_cluster("a100", 8, gpus_per_node=2, scaleup_Bps=10e9, scaleout_Bps=50e9)
    b = make_cluster("a100", 8, gpus_per_node=4, scaleup_Bps=10e9, scaleout_Bps=50e9)
    t = StrategyTable.from_columns(dp=1, tp=4, pp=2, micro_batch=1, global_batch=16)
    ta, tb = evaluate(model, a, t)["tp_comm_s"][0], evaluate(model, b, t)["tp_comm_s"][0]
    assert ta > tb  # the network's larger latency on top of the same bandwidth
    assert ta == pytest.approx(tb, rel=0.05)  # and not the 5x faster network's bandwidth


def test_one_table_absent_stage_columns_take_the_row_value():
    """A per-stage column left out of the one table is the row's value on every stage: placements
    from row dp and tp are those given per stage (pool 0, tp-inner, no split), price the same, and
    rows without placements keep their row form; concat fills a missing stage_recompute with the
    row's recompute."""
    model, cl = model_preset("megatron-22b"), make_cluster("a100", 64)
    kw = dict(stage_layers=[[24, 24]], microbatches=16, global_batch=64, recompute="full")
    a = StrategyTable.from_columns(dp=4, tp=8, **kw)
    b = StrategyTable.from_columns(stage_pool=[[0, 0]], stage_dp=[[4, 4]], stage_tp=[[8, 8]], stage_order=[[0, 0]],
                                   stage_dp2=[[0, 0]], **kw)
    assert a.placed and a.row(0) == b.row(0) and int(a.num_gpus[0]) == 64
    _same(evaluate(model, cl, a), evaluate(model, cl, b))
    h = StrategyTable.from_columns(dp=4, tp=8, pp=2, micro_batch=1, global_batch=64, recompute="full")
    assert not h.placed and "stages" not in h.row(0) and h.as_placements(model.layers).row(0) == a.row(0)
    _same(evaluate(model, cl, h), evaluate(model, cl, a))
    rc = StrategyTable.from_columns(dp=4, tp=8, pp=2, global_batch=64, stage_recompute=[["none", "full"]])
    both = StrategyTable.concat([h, rc])
    assert [both.row(i)["stage_recompute"] for i in (0, 1)] == [["full", "full"], ["none", "full"]]


def test_blocks_of_one_depth_read_the_stage_columns_they_need():
    """A table larger than a block is priced in blocks of one pipeline depth whose rows carry only
    the stage columns to that depth; a row holding layers past its pp (refused) keeps every column
    and is refused as it is alone."""
    model, hc = model_preset("megatron-22b"), hetero_preset("a100x64+h100x64")
    rng = np.random.default_rng(3)
    n = BLOCK_ROWS + 2000
    t = _uniform_placements(n, rng)
    st = {k: v.copy() for k, v in t.stages.items()}
    deep = rng.choice(np.flatnonzero(t["pp"] == 4), 30, replace=False)
    unlike = (rng.random(n) < 0.5) & ~np.isin(np.arange(n), deep)
    st["tp"][:, 0] = np.where(unlike, 8, st["tp"][:, 0])  # unlike stages on half the other rows
    st["layers"][deep, 6] = 3  # layers on a stage past pp 4 (their stages to pp alike)
    t = StrategyTable(t.columns, st)
    whole = evaluate(model, hc, t)
    assert whole["feasible"].sum() > 1000 and not whole["feasible"][deep].any()
    for i in [*deep[:10], *rng.choice(n, 30, replace=False)]:
        _same(evaluate(model, hc, t.take(slice(i, i + 1))), whole.take(slice(i, i + 1)))


def test_evaluator_fixes_glibcs_mmap_threshold_unless_told_not_to(monkeypatch):
    """The evaluator's import sets glibc's M_MMAP_THRESHOLD (-3) to 32 MiB and its M_TRIM_THRESHOLD (-1) to 256 MiB
    once; neither with PLANSWEEP_MALLOPT=0, not the one whose variable the user set (MALLOC_MMAP_THRESHOLD_,
    MALLOC_TRIM_THRESHOLD_), and without an error where there is no glibc."""
    import ctypes

    import costmodel._evaluate as ev

    calls = []

    class Libc:
        def mallopt(self, param, value):
            calls.append((param, value))
            return 1

    mmap, trim = (-3, 32 * 2**20), (-1, 256 * 2**20)
    names = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "PLANSWEEP_MALLOPT")
    monkeypatch.setattr(ctypes, "CDLL", lambda name: Libc())
    for env, expected in (({}, [mmap, trim]), ({"MALLOC_MMAP_THRESHOLD_": "65536"}, [trim]),
                          ({"MALLOC_TRIM_THRESHOLD_": "131072"}, [mmap]),
                          ({"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "131072"}, []),
                          ({"PLANSWEEP_MALLOPT": "0"}, []), ({"PLANSWEEP_MALLOPT": "1"}, [mmap, trim])):
        calls.clear()
        for k in names:
            monkeypatch.delenv(k, raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        ev._keep_freed_memory()
        assert calls == expected, env

    def no_glibc(name):
        raise OSError(f"{name}: cannot open shared object file")

    for k in names:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(ctypes, "CDLL", no_glibc)
    ev._keep_freed_memory()  # no error


def test_stage_columns_keep_values_past_int8_and_int16():
    """Per-stage columns are stored in the smallest of int8 / int16 / int64 that holds them: a dp of 200 (past
    int8's 127) and a layer count of 40,000 (past int16's 32,767) read back as given, also after a take."""
    from costmodel import StrategyTable

    t = StrategyTable.from_columns(stage_pool=[[0, 1], [1, 0]], stage_dp=[[200, 1], [3, 4]], stage_tp=[[1, 2], [1, 1]],
                                   stage_layers=[[40000, 1], [2, 3]], microbatches=16, global_batch=3200)
    assert [t.stages.raw(k).dtype for k in ("pool", "dp", "layers")] == [np.int8, np.int16, np.int64]
    assert t.stages["dp"].tolist() == [[200, 1], [3, 4]] and t.stages["layers"].tolist() == [[40000, 1], [2, 3]]
    back = t.take(np.array([1, 0]))
    assert back.stages["dp"].tolist() == [[3, 4], [200, 1]] and back.stages["layers"][1].tolist() == [40000, 1]


def test_a_second_evaluation_faults_in_no_fresh_memory():
    """With the trim threshold the evaluator's import sets, the memory one evaluation frees (its blocks' temporaries,
    its columns once dropped) stays with the process: pricing the same 65,536 rows again faults in a few pages at
    most, where glibc's 128 KiB default gave 6,800 (measured with MALLOC_TRIM_THRESHOLD_=131072)."""
    import os
    import resource

    if os.environ.get("PLANSWEEP_MALLOPT") == "0" or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        pytest.skip("the allocator is left to the user's settings")
    from costmodel._bench_rows import bench_table

    model, cluster, table = model_preset("gpt3-175b"), cluster_preset("h100x1024"), bench_table(65536)
    evaluate(model, cluster, table)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    evaluate(model, cluster, table)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before < 500
