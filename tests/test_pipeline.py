"""Pipeline simulator: closed forms, peak activations, vectorisation, rendering, bad input.

Expected values come from the schedules' closed forms and from small cases worked by hand,
never from the simulator's own output.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import cli
from costmodel import InputError, chrome_trace, simulate, text_timeline
from tests.in_process import UNWRITABLE, one_stderr_line, refuse_renames_onto, unwritable_path


@pytest.fixture
def plansweep(monkeypatch):
    """cli.main with only this branch's subcommands registered."""
    monkeypatch.setattr(
        cli, "COMMAND_MODULES", ("cli._cmd_schedule", "cli._cmd_schedule_experiments")
    )
    return cli.main


# ----------------------------------------------------------------------------- closed forms

PM = [(1, 1), (2, 1), (2, 5), (4, 2), (4, 4), (4, 8), (5, 7), (8, 32)]


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p,m", PM)
def test_gpipe_and_1f1b_take_m_plus_p_minus_1_slots(name, p, m):
    f, b = 1.5, 2.25
    res = simulate(name, p, m, tf=f, tb=b)
    assert res.total_time[0] == pytest.approx((m + p - 1) * (f + b))
    # Seed 003's bubble ratio: 1 - m (F + B) / T_tot.
    assert res.bubble_ratio[0] == pytest.approx(1 - m * (f + b) / ((m + p - 1) * (f + b)))


@pytest.mark.parametrize(
    "p,m,v", [(2, 2, 2), (2, 6, 3), (4, 4, 2), (4, 8, 2), (4, 12, 4), (8, 16, 2)]
)
def test_interleaved_takes_vm_plus_p_minus_1_chunk_slots(p, m, v):
    f, b = 1.0, 2.0
    res = simulate("interleaved", p, m, v, tf=f, tb=b)
    assert res.total_time[0] == pytest.approx((v * m + p - 1) * (f + b) / v)


@pytest.mark.parametrize("p,m", [(4, 5), (4, 6), (3, 7), (8, 12), (8, 10), (4, 2)])
def test_interleaved_takes_any_microbatch_count(p, m):
    # Megatron-LM's grouping when p does not divide m: no faster than the divisible bound,
    # and no slower than 1F1B with twice the bubble.
    f, b = 1.0, 2.0
    res = simulate("interleaved", p, m, 2, tf=f, tb=b)
    assert res.total_time[0] >= (2 * m + p - 1) * (f + b) / 2 - 1e-9
    assert res.total_time[0] < (m + p - 1) * (f + b) + (p - 1) * (f + b)


def test_zb_h1_hand_worked_two_stages():
    # p = 2, m = 2, F = B = 1, W = 0.5. Orders: stage 0 F0 F1 B0 W0 B1 W1; stage 1 F0 B0 F1
    # B1 W0 W1. Stage 0: F0 [0,1] F1 [1,2]; stage 1: F0 [1,2] B0 [2,3] F1 [3,4] B1 [4,5]
    # W0 [5,5.5] W1 [5.5,6]; stage 0: B0 [3,4] W0 [4,4.5] B1 [5,6] W1 [6,6.5].
    res = simulate("zb-h1", 2, 2, tf=1.0, tb=1.0, tw=0.5, timeline=True)
    assert res.total_time[0] == pytest.approx(6.5)
    tl = res.timeline
    ends = {
        ("FBW"[k], int(j), int(d)): e
        for k, j, d, e in zip(tl.kind, tl.micro, tl.device, tl.end[0], strict=True)
    }
    assert ends[("B", 0, 0)] == 4.0 and ends[("W", 0, 1)] == 5.5 and ends[("B", 1, 0)] == 6.0


@pytest.mark.parametrize("p,m", [(2, 2), (3, 9), (4, 4), (4, 8), (8, 16)])
@pytest.mark.parametrize("f,b,w", [(1, 1, 1), (1, 1, 0.5), (2, 1, 1), (1.5, 2.5, 0.75), (1, 3, 1)])
def test_zb_h1_matches_zero_bubble_paper(p, m, f, b, w):
    # Qi et al. 2023, Sec. 2.1: ZB-H1's bubble is (p - 1)(T_F + T_B - T_W) (a third of 1F1B's
    # 3(p - 1) T when T_F = T_B = T_W = T). It needs m >= p and T_W <= T_B and T_W <= T_F:
    # with a longer W the W passes deferred to the last stage's tail become the critical path.
    assert w <= min(f, b) and m >= p
    res = simulate("zb-h1", p, m, tf=f, tb=b, tw=w)
    assert res.total_time[0] == pytest.approx(m * (f + b + w) + (p - 1) * (f + b - w))


def test_zb_h1_bubble_is_a_third_of_1f1b_when_f_b_w_equal():
    p, m, t = 8, 24, 1.0
    zb = simulate("zb-h1", p, m, tf=t, tb=t, tw=t).total_time[0] - 3 * m * t
    one = simulate("1f1b", p, m, tf=t, tb=t, tw=t).total_time[0] - 3 * m * t
    assert zb == pytest.approx(one / 3)


def _device_idle(res, index=0):
    """Idle time of each device between its own first start and its last end."""
    tl = res.timeline
    idle = []
    for d in range(int(tl.device.max()) + 1):
        mine = tl.device == d
        span = tl.end[index, mine].max() - tl.start[index, mine].min()
        idle.append(span - (tl.end[index, mine] - tl.start[index, mine]).sum())
    return np.array(idle)


@pytest.mark.parametrize("name,v", [("zb-h2", 1), ("zb-v", 2)])
@pytest.mark.parametrize("p,m", [(2, 3), (4, 7), (4, 12), (6, 16)])
def test_zb_h2_and_zb_v_have_zero_bubble_when_f_b_w_equal(name, v, p, m):
    # Qi et al. 2023: with T_F = T_B = T_W and m >= 2p - 1 every stage runs without idling
    # from its first pass to its last; only the fill skew of the first forward remains,
    # (p - 1) T_F for ZB-H2 and (p - 1) T_F / 2 (half-size chunks) for ZB-V.
    res = simulate(name, p, m, v, tf=1.0, tb=1.0, tw=1.0, timeline=True)
    np.testing.assert_allclose(_device_idle(res), 0.0, atol=1e-12)
    assert res.total_time[0] == pytest.approx(3 * m + (p - 1) / v)


def test_hanayo_two_devices_two_microbatches_by_hand():
    # Slots at T_F = 1, T_B = 2 (seed 003's construction, costmodel._pipeline._hanayo).
    # Micro-batch 0: d0 F.c0 @0, d1 F.c0 @1, d1 F.c1 @2, d0 F.c1 @3, d0 B.c1 @4-5,
    # d1 B.c1 @6-7, d1 B.c0 @8-9, d0 B.c0 @10-11. Closed zones: d0 slot 2 (p - d - 1 = 1 slot
    # before F.c1), d1 slot 5 (d = 1 slot before B.c1). Micro-batch 1 from slot -1: d0 F.c0 @1,
    # d1 F.c0 @3, d1 F.c1 @4, d0 F.c1 @6, d0 B.c1 @7-8, d1 B.c1 @10-11, d1 B.c0 @12-13,
    # d0 B.c0 @14-15: the last op ends at 16.
    from costmodel._pipeline import B, F, _hanayo

    assert _hanayo(2, 2, 2) == [
        [(F, 0, 0), (F, 1, 0), (F, 0, 1), (B, 0, 1), (F, 1, 1), (B, 1, 1), (B, 0, 0), (B, 1, 0)],
        [(F, 0, 0), (F, 0, 1), (F, 1, 0), (F, 1, 1), (B, 0, 1), (B, 0, 0), (B, 1, 1), (B, 1, 0)],
    ]
    # Stage times are chunk times x v (a chunk takes its stage's time / v).
    assert simulate("hanayo", 2, 2, 2, tf=2.0, tb=4.0).total_time[0] == pytest.approx(16.0)


# Seed 003's simulator (C-TC/Megatron-LM, branch crossdc, commit 152e7a52,
# megatron/core/pipeline_parallel/cdc_scheduler/pp_generator/pipeline.py, Hanayo1F1BPipeline:
# its schedule() then solve_dependencies(), total = the last op's completion time), run on
# per-chunk T_F = 1, T_B = 2, T_W = 0 and T_C between every two devices; (D, m, chunks, T_C) ->
# total. m = D = 32 with two waves is the Hanayo paper's own regime.
NOTEBOOK_HANAYO = [
    (2, 2, 2, 0.0, 16.0), (2, 4, 2, 0.0, 29.0), (2, 4, 4, 0.1, 54.4), (4, 4, 2, 0.1, 37.6),
    (4, 4, 4, 0.0, 60.0), (4, 8, 2, 0.0, 65.0), (4, 12, 4, 0.1, 173.2), (8, 8, 4, 0.1, 130.8),
    (8, 16, 2, 0.1, 142.8), (8, 24, 4, 0.0, 342.0), (16, 16, 2, 0.1, 164.0), (32, 32, 2, 0.0, 316.0),
    (32, 32, 4, 0.0, 508.0), (32, 32, 4, 0.1, 540.0),
]


@pytest.mark.parametrize("p,m,v,tc,total", NOTEBOOK_HANAYO)
def test_hanayo_equals_seed_003_simulator(p, m, v, tc, total):
    res = simulate("hanayo", p, m, v, tf=1.0 * v, tb=2.0 * v, tc=tc)
    assert res.total_time[0] == pytest.approx(total, rel=1e-12)


def test_hanayo_repeats_its_group_of_d_microbatches():
    # Seed 003 iterates the m = D schedule m / D times: with T_C = 0 every group after the
    # first starts where the previous group's first micro-batch left device 0, so the total
    # grows by the same step per group (29 - 16 = 13 for D = 2, v = 2; 65 - 36 = 29 for D = 4).
    for p, step in ((2, 13.0), (4, 29.0)):
        totals = [simulate("hanayo", p, k * p, 2, tf=2.0, tb=4.0).total_time[0] for k in (1, 2, 3)]
        assert np.diff(totals) == pytest.approx([step, step])


def test_schedules_without_split_fold_w_into_b():
    a = simulate("1f1b", 4, 8, tf=1.0, tb=1.25, tw=0.75, tc=0.3)
    b = simulate("1f1b", 4, 8, tf=1.0, tb=2.0, tc=0.3)
    assert a.total_time[0] == pytest.approx(b.total_time[0])


def test_tc_adds_two_hops_per_stage_for_one_microbatch():
    # m = 1: the micro-batch goes down p stages and back: 2 (p - 1) hand-offs.
    p, f, b, tc = 5, 1.0, 2.0, 0.25
    for name in ("gpipe", "1f1b", "zb-h1"):
        res = simulate(name, p, 1, tf=f, tb=b, tc=tc)
        assert res.total_time[0] == pytest.approx(p * (f + b) + 2 * (p - 1) * tc)


# ----------------------------------------------------------------------------- activations


@pytest.mark.parametrize("p,m", [(4, 8), (4, 2), (8, 32)])
def test_peak_activations(p, m):
    stages = np.arange(p)
    np.testing.assert_array_equal(simulate("gpipe", p, m, tf=1, tb=2).peak_activations, m)
    np.testing.assert_array_equal(
        simulate("1f1b", p, m, tf=1, tb=2).peak_activations, np.minimum(p - stages, m)
    )
    if m >= p:
        np.testing.assert_array_equal(simulate("zb-h1", p, m, tf=1, tb=1, tw=1).peak_activations, p)
    group = p if m % p == 0 else m  # Megatron-LM's group size for these cases (m < p: one)
    for v in (2, 3):
        # Megatron-LM: warm-up (p - i - 1) * 2 + (v - 1) N chunk forwards, plus the first
        # steady-state forward, at most m v; a chunk is 1/v of a stage micro-batch.
        warm = np.minimum((p - stages - 1) * 2 + (v - 1) * group + 1, m * v)
        got = simulate("interleaved", p, m, v, tf=1, tb=2).peak_activations
        np.testing.assert_allclose(got, warm / v)


def test_zb_v_holds_as_much_as_1f1b_first_stage_and_zb_h2_twice_minus_one():
    p, m = 4, 12
    np.testing.assert_array_equal(simulate("zb-v", p, m, 2, tf=1, tb=1, tw=1).peak_activations, p)
    np.testing.assert_array_equal(
        simulate("zb-h2", p, m, tf=1, tb=1, tw=1).peak_activations, 2 * p - 1
    )


# ----------------------------------------------------------------------------- batches


def test_batch_equals_one_by_one():
    rng = np.random.default_rng(3)
    p, m, s = 4, 8, 7
    tf = rng.uniform(0.5, 2, (s, p))
    tb = rng.uniform(1, 3, (s, p))
    tw = rng.uniform(0.2, 1, (s, p))
    tc = rng.uniform(0, 0.5, s)
    for name, v in (("1f1b", 1), ("interleaved", 2), ("zb-v", 2), ("hanayo", 4)):
        batch = simulate(name, p, m, v, tf=tf, tb=tb, tw=tw, tc=tc)
        for i in range(s):
            one = simulate(name, p, m, v, tf=tf[i], tb=tb[i], tw=tw[i], tc=tc[i])
            assert batch.total_time[i] == one.total_time[0]
            np.testing.assert_array_equal(batch.busy_time[i], one.busy_time[0])


def test_busy_time_and_shapes():
    res = simulate("1f1b", 3, 4, tf=[1.0, 2.0, 3.0], tb=2.0, tw=0.5, tc=np.zeros(5))
    assert res.total_time.shape == (5,) and res.busy_time.shape == (5, 3)
    np.testing.assert_allclose(res.busy_time[0], 4 * (np.array([1.0, 2.0, 3.0]) + 2.5))


# ----------------------------------------------------------------------------- rendering


def test_text_timeline_and_chrome_trace():
    res = simulate("1f1b", 3, 4, tf=1.0, tb=2.0, tc=0.5, timeline=True)
    rows = text_timeline(res.timeline).splitlines()
    assert len(rows) == 3 and all(r.startswith("dev") for r in rows)
    trace = json.loads(json.dumps(chrome_trace(res.timeline)))
    ops = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(ops) == 2 * 3 * 4
    assert {"name", "ph", "ts", "dur", "pid", "tid"} <= set(ops[0])
    assert max(e["ts"] + e["dur"] for e in ops) == pytest.approx(res.total_time[0])


# ----------------------------------------------------------------------------- CLI and input


def test_cli_json(plansweep, capsys):
    code = plansweep(
        ["schedule", "--schedule", "1f1b", "--devices", "4", "--microbatches", "8"]
        + ["--tf", "1", "--tb", "2", "--json"]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["total_time"] == pytest.approx(11 * 3)
    assert out["peak_activations"] == [4, 3, 2, 1]
    assert set(out) == {"total_time", "bubble_ratio", "busy_time", "peak_activations"}


def test_cli_trace_file(plansweep, tmp_path, capsys):
    path = tmp_path / "trace.json"
    code = plansweep(
        ["schedule", "--schedule", "zb-v", "--devices", "2", "--microbatches", "4"]
        + ["--tf", "1,1.5", "--tb", "1", "--tw", "1", "--tc", "0.1", "--trace", str(path)]
    )
    assert code == 0
    assert "dev1" in capsys.readouterr().out
    assert len(json.loads(path.read_text())["traceEvents"]) > 0


@pytest.mark.parametrize(
    "args",
    [
        ["--schedule", "1f1b", "--devices", "4", "--microbatches", "0", "--tf", "1", "--tb", "1"],
        ["--schedule", "1f1b", "--devices", "4", "--microbatches", "4", "--chunks", "2"]
        + ["--tf", "1", "--tb", "1"],
        ["--schedule", "hanayo", "--devices", "4", "--microbatches", "4", "--chunks", "3"]
        + ["--tf", "1", "--tb", "1"],
        ["--schedule", "zb-v", "--devices", "4", "--microbatches", "4", "--chunks", "4"]
        + ["--tf", "1", "--tb", "1"],
        ["--schedule", "1f1b", "--devices", "4", "--microbatches", "4", "--tf", "1,2"]
        + ["--tb", "1"],
        ["--schedule", "1f1b", "--devices", "4", "--microbatches", "4", "--tf", "-1"]
        + ["--tb", "1"],
        ["--schedule", "1f1b", "--devices", "4", "--microbatches", "4", "--tf", "1"]
        + ["--tb", "1", "--tc", "-0.5"],
        ["--schedule", "1f1b", "--devices", "4", "--microbatches", "4", "--tf", "x"]
        + ["--tb", "1"],
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(plansweep, capsys, args):
    assert plansweep(["schedule", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "expected" in err


@pytest.mark.parametrize("args, needle", [
    (["--tf", "1e308", "--tb", "1e308"], "--tf, --tb, --tw, --tc: expected times whose schedule takes a finite "
     "time in microseconds, got 'a total of inf ms'"),
    (["--tf", "1e306", "--tb", "1", "--unit", "s"], "got 'a total of 1.1e+307 s'"),  # inf in the trace's us
    (["--tf", "inf", "--tb", "1"], "--tf: expected finite times >= 0, got 'inf'"),
    (["--tf", "1", "--tb", "1,nan,1,1"], "--tb: expected finite times >= 0, got '1,nan,1,1'"),
    (["--tf", "1", "--tb", "1", "--devices", "100000"], "--devices: expected at most 1,024, got 100000"),
    (["--tf", "1", "--tb", "1", "--microbatches", "100000000"], "--microbatches: expected at most 65,536, got 10"),
    (["--tf", "1", "--tb", "1", "--devices", "1024", "--microbatches", "1024", "--schedule", "interleaved"],
     "--devices x --microbatches x --chunks: expected at most 1,048,576 forward passes, got 2097152"),
])
def test_cli_times_and_sizes_out_of_bounds_are_one_line(plansweep, capsys, args, needle):
    base = {"--schedule": "1f1b", "--devices": "4", "--microbatches": "8"}
    words = [w for k, v in base.items() if k not in args for w in (k, v)]
    assert plansweep(["schedule", *words, *args]) == 2  # at once: no simulation of 10^8 micro-batches
    one_stderr_line(capsys, needle)


def test_text_timeline_of_ops_far_apart_in_length_is_capped():
    # the shortest op 10^-600 of the run: 3 columns for it would be inf columns, capped at 160
    res = simulate("1f1b", 2, 2, tf=1e-300, tb=1e300, timeline=True)
    rows = text_timeline(res.timeline).splitlines()
    assert len(rows) == 2 and all(len(r) == len("dev0  |") + 160 + len("|") for r in rows)


def test_simulate_rejects_bad_input():
    with pytest.raises(InputError, match="microbatches"):
        simulate("1f1b", 4, 0, tf=1, tb=1)
    with pytest.raises(InputError, match="schedule"):
        simulate("pipedream", 4, 4, tf=1, tb=1)
    with pytest.raises(InputError, match="tb"):
        simulate("1f1b", 4, 4, tf=1, tb=[1, 2, 3])
    with pytest.raises(InputError, match="tw"):
        simulate("zb-h1", 4, 4, tf=1, tb=1, tw=-0.1)
    with pytest.raises(InputError, match="tf"):
        simulate("1f1b", 4, 4, tf=float("nan"), tb=1)


def test_experiments_command_writes_parquet_and_png(plansweep, tmp_path, capsys):
    import pyarrow.parquet as pq

    assert (
        plansweep(["schedule-experiments", "--out", str(tmp_path), "--only", "weak_scaling"]) == 0
    )
    table = pq.read_table(tmp_path / "weak_scaling.parquet")
    assert table.num_rows == 6 * 5 * 3  # schedules x D x T_C
    assert (tmp_path / "weak_scaling.png").stat().st_size > 0
    # 1F1B rows follow the closed form at T_C = 0: (m + p - 1)(F + B), m = 2D.
    rows = table.to_pylist()
    for r in rows:
        if r["schedule"] == "1F1B" and r["t_c"] == 0:
            d = r["devices"]
            assert r["total_time"] == pytest.approx((3 * d - 1) * 1200 / d)


@pytest.mark.parametrize("where", UNWRITABLE)
def test_trace_that_cannot_be_written_is_one_line_and_the_old_file_stays(plansweep, tmp_path, monkeypatch, capsys,
                                                                         where):
    old, trace = unwritable_path(tmp_path, monkeypatch, where, "t.json")
    assert plansweep(["schedule", "--schedule", "1f1b", "--devices", "4", "--microbatches", "8", "--tf", "1",
                      "--tb", "2", "--trace", trace]) == 2
    one_stderr_line(capsys, f"plansweep schedule: error: --trace: expected a writable file path, got '{trace}")
    assert old.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["dir", "t.json"]


def test_experiments_out_and_only_are_checked_before_any_run(plansweep, tmp_path, capsys):
    (tmp_path / "file").write_text("old")
    assert plansweep(["schedule-experiments", "--out", str(tmp_path / "file"), "--only", "chunks"]) == 2
    one_stderr_line(capsys, "--out: expected a folder, got")
    assert plansweep(["schedule-experiments", "--out", "", "--only", "chunks"]) == 2
    one_stderr_line(capsys, "--out: expected a folder, got ''")
    for only in ("", "chunks,"):
        assert plansweep(["schedule-experiments", "--out", str(tmp_path / "new"), "--only", only]) == 2
        one_stderr_line(capsys, "--only: expected names among weak_scaling, ")
    assert [p.name for p in tmp_path.iterdir()] == ["file"] and (tmp_path / "file").read_text() == "old"


def test_experiments_write_each_parquet_and_figure_both_or_neither(plansweep, tmp_path, monkeypatch, capsys):
    (tmp_path / "chunks.parquet").write_text("old parquet")
    (tmp_path / "chunks.png").write_text("old png")
    refuse_renames_onto(monkeypatch, tmp_path / "chunks.png")  # the second of the pair
    assert plansweep(["schedule-experiments", "--out", str(tmp_path), "--only", "chunks"]) == 2
    one_stderr_line(capsys, f"--out: expected a writable file path, got '{tmp_path / 'chunks.png'} (Operation not permitted)'")
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {"chunks.parquet": "old parquet",
                                                                   "chunks.png": "old png"}


def test_every_valid_shape_compiles_without_deadlock():
    # Every (D, m) up to D = 6, m = 3D, with the chunk counts each schedule takes.
    chunk_choices = {"interleaved": (1, 2, 3, 4), "hanayo": (2, 4, 6), "zb-v": (2,)}
    for name in ("gpipe", "1f1b", "interleaved", "hanayo", "zb-h1", "zb-h2", "zb-v"):
        for p in range(1, 7):
            for m in range(1, 3 * p + 1):
                for v in chunk_choices.get(name, (1,)):
                    res = simulate(name, p, m, v, tf=1.0, tb=2.0, tw=0.5)
                    assert np.isfinite(res.total_time[0]) and res.total_time[0] > 0


# ----------------------------------------------------------------------------- mixed shapes


@pytest.mark.parametrize("flat_nodes", [1 << 21, 200])
def test_mixed_shapes_in_one_walk_equal_one_simulation_each(monkeypatch, flat_nodes):
    # total_times_mixed lays sets of many (schedule, D, m, v) side by side in one flat walk; each
    # set's time must be what simulate() gives it alone. flat_nodes 200 forces a shape's sets to
    # be cut into pieces and the pieces into several batches.
    import costmodel._pipeline as pl

    monkeypatch.setattr(pl, "_FLAT_NODES", flat_nodes)
    keys = [("gpipe", 3, 4, 1), ("1f1b", 4, 6, 1), ("1f1b", 1, 3, 1), ("interleaved", 4, 6, 2),
            ("interleaved", 2, 4, 3), ("hanayo", 3, 5, 2), ("zb-h1", 4, 3, 1), ("zb-h2", 3, 7, 1),
            ("zb-v", 4, 8, 2)]
    rng = np.random.default_rng(3)
    n, d_max = 90, 4
    group = rng.integers(0, len(keys), n)
    tf, tb, tw = rng.uniform(0.5, 2.0, (3, n, d_max))
    tc = rng.uniform(0.0, 0.4, n)
    got = pl.total_times_mixed(keys, group, tf, tb, tw, tc)
    for i in range(n):
        s, p, m, v = keys[group[i]]
        want = simulate(s, p, m, v, tf=tf[i, :p], tb=tb[i, :p], tw=tw[i, :p], tc=tc[i]).total_time[0]
        assert got[i] == pytest.approx(want, rel=1e-12), (i, keys[group[i]])
    # one hand-off time per link (the heterogeneous evaluator's): each set as simulate() gives it
    tc_link = rng.uniform(0.0, 0.4, (n, d_max))
    got = pl.total_times_mixed(keys, group, tf, tb, tw, tc_link)
    for i in range(n):
        s, p, m, v = keys[group[i]]
        want = simulate(s, p, m, v, tf=tf[i, :p], tb=tb[i, :p], tw=tw[i, :p], tc=tc_link[i:i + 1, :p]).total_time[0]
        assert got[i] == pytest.approx(want, rel=1e-12), (i, keys[group[i]])
    # and the closed form where one holds: 1F1B with equal stages, no hand-off, (m + p - 1)(F + B)
    one = pl.total_times_mixed([("1f1b", 4, 6, 1)], np.zeros(2, dtype=int), np.full((2, 4), 1.0),
                               np.full((2, 4), 2.0), np.zeros((2, 4)), np.zeros(2))
    np.testing.assert_allclose(one, (6 + 4 - 1) * 3.0)
