"""Timelines of a priced plan: `evaluate --trace/--timeline`, `show RUN --rank K --trace/--timeline`, `schedule
--trace` in the unit its input declares. The trace draws the plan evaluate priced: its span is evaluate's step time,
a stage's passes sum to its priced per-pass times, the collectives to the bottleneck's exposed parts."""

from __future__ import annotations

import json
from decimal import Decimal

import numpy as np
import pytest

from cli import main
from costmodel import StrategyTable, cluster_preset, evaluate, model_preset

SMALL = ["--model", "llama3-8b", "--cluster", "h100x16"]
NS = 1e-9  # a trace's times are whole nanoseconds: each end of a slice within half of one of the model's


def _json(capsys, argv: list[str]) -> dict:
    assert main(argv) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def _trace(path) -> tuple[list[dict], dict]:
    """(complete events, otherData) of a Chrome trace file."""
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    assert all(e["ph"] in ("X", "M") for e in events)
    return [e for e in events if e["ph"] == "X"], doc["otherData"]


def _span_s(events: list[dict]) -> float:
    return (max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)) / 1e6


def _stage_events(events: list[dict], stage: int, cat: str) -> list[dict]:
    return [e for e in events if e["pid"] == stage + 1 and e["cat"] == cat]


# (flags) of plans across schedules, frameworks, an MoE model, context parallelism and an exposed exchange
PLANS = [
    [*SMALL, "--tp", "4", "--pp", "2", "--micro-batch", "1", "--global-batch", "16", "--schedule", "1f1b"],
    ["--model", "llama3-8b", "--cluster", "h100x64", "--tp", "8", "--pp", "4", "--micro-batch", "1",
     "--global-batch", "16", "--schedule", "interleaved", "--vpp", "2"],
    ["--model", "llama3-8b", "--cluster", "h100x64", "--tp", "8", "--pp", "4", "--micro-batch", "1",
     "--global-batch", "16", "--schedule", "zb-h1", "--framework", "generic", "--zero-stage", "1",
     "--no-overlap-dp"],
    ["--model", "mixtral-8x7b", "--cluster", "h100x128", "--tp", "2", "--pp", "8", "--ep", "8", "--micro-batch",
     "1", "--global-batch", "64", "--schedule", "1f1b", "--recompute", "full"],
    [*SMALL, "--tp", "2", "--pp", "2", "--cp", "4", "--micro-batch", "1", "--global-batch", "8", "--schedule",
     "1f1b", "--framework", "fsdp2", "--sequence-parallel"],  # (torch's ring attention: its cp exchanges exposed)
    ["--model", "llama3-8b", "--cluster", "h100x64", "--tp", "8", "--pp", "4", "--micro-batch", "1",
     "--global-batch", "16", "--schedule", "1f1b", "--framework", "deepspeed"],  # (each exchange's two calls)
    ["--model", "llama3-8b", "--cluster", "h100x64", "--tp", "8", "--pp", "4", "--micro-batch", "1",
     "--global-batch", "16", "--schedule", "interleaved", "--vpp", "2", "--framework", "fsdp2",
     "--sequence-parallel"],  # (torch's grid; its tensor parallelism always sequence-parallel)
]


@pytest.mark.parametrize("flags", PLANS, ids=["1f1b", "interleaved", "zb-h1-exposed-dp", "moe", "cp", "deepspeed-1f1b",
                                             "torch-interleaved-grid"])
def test_the_trace_spans_evaluates_step_and_its_passes_sum_to_the_priced_stage_times(flags, tmp_path, capsys):
    trace = tmp_path / "t.json"
    rep = _json(capsys, ["evaluate", *flags, "--json", "--trace", str(trace)])
    m, stages = rep["metrics"], rep["stages"]
    assert m["feasible"]
    events, meta = _trace(trace)
    assert _span_s(events) == pytest.approx(m["step_time_s"], rel=0.01)  # the contract: within 1%
    assert _span_s(events) == pytest.approx(m["step_time_s"], rel=1e-9, abs=2 * NS)  # (in fact the same simulation)
    assert meta["step_time_s"] == pytest.approx(m["step_time_s"], rel=1e-12)
    assert (meta["model"], meta["cluster"], meta["framework"]) == (rep["model"], rep["cluster"], rep["framework"])
    assert meta["plan"] == rep["strategy"]
    mb = m["microbatches"]
    split = rep["strategy"]["schedule"].startswith("zb")
    for j, st in enumerate(stages):  # each stage's passes: m x its priced forward, backward (+ W) per micro-batch
        fwd = sum(e["dur"] for e in _stage_events(events, j, "forward")) / 1e6
        bwd = sum(e["dur"] for e in _stage_events(events, j, "backward")) / 1e6
        wgt = sum(e["dur"] for e in _stage_events(events, j, "weight gradient")) / 1e6
        n = len(_stage_events(events, j, "forward"))
        assert fwd == pytest.approx(mb * st["forward_s"], rel=1e-9, abs=n * NS)
        if split:
            assert (bwd, wgt) == pytest.approx((mb * st["backward_s"], mb * st["weight_grad_s"]), rel=1e-9, abs=n * NS)
        else:
            assert bwd == pytest.approx(mb * (st["backward_s"] + st["weight_grad_s"]), abs=n * NS) and wgt == 0
        if j < len(stages) - 1:  # what stage j hands to the next: its priced hand-off time each
            hand = [e["dur"] / 1e6 for e in events if e["pid"] == j + 2 and e["cat"] == "pp hand-off"
                    and e["args"]["from stage"] == j]
            assert len(hand) >= mb and hand == pytest.approx([st["handoff_s"]] * len(hand), abs=NS)
    # the exposed collectives: on the bottleneck stage (the slowest busy time), m x their slices per micro-batch are
    # evaluate's tp / cp / ep comm of that stage
    bot = int(np.argmax([st["time_s"] for st in stages]))
    for kind in ("tp", "cp", "ep"):
        got = sum(e["dur"] for e in _stage_events(events, bot, f"{kind} collective")) / 1e6
        count = len(_stage_events(events, bot, f"{kind} collective"))
        assert got == pytest.approx(m[f"{kind}_comm_s"], rel=1e-9, abs=count * NS)
    # after the pipeline: the exposed exchange and the optimizer step, evaluate's, on every stage
    for j in range(len(stages)):
        dp = _stage_events(events, j, "data-parallel exchange")
        assert sum(e["dur"] for e in dp) / 1e6 == pytest.approx(m["dp_comm_s"], abs=NS)
        (opt,) = _stage_events(events, j, "optimizer")
        assert opt["dur"] / 1e6 == pytest.approx(m["optimizer_s"], abs=NS)
        assert (opt["ts"] + opt["dur"]) / 1e6 == pytest.approx(m["step_time_s"], rel=1e-9, abs=NS)


def test_collectives_and_exposed_exchange_are_drawn_where_the_plans_have_them(tmp_path, capsys):
    """The plans above are no empty drawings: tp everywhere, cp with cp 2, ep in the MoE plan, an exposed exchange
    without overlap."""
    got = {}
    for i, flags in enumerate(PLANS):
        trace = tmp_path / f"{i}.json"
        assert main(["evaluate", *flags, "--trace", str(trace)]) == 0
        events, _ = _trace(trace)
        got[i] = {e["cat"] for e in events}
    capsys.readouterr()
    assert all("tp collective" in c and "pp hand-off" in c for c in got.values())
    assert "ep collective" in got[3] and "cp collective" in got[4] and "data-parallel exchange" in got[2]
    assert "weight gradient" in got[2] and "weight gradient" not in got[0]


def test_a_small_1f1b_timeline_worked_by_hand(tmp_path, capsys):
    """pp 2, two micro-batches, 1F1B: stage 0 runs F0 F1 B0 B1, stage 1 F0 B0 F1 B1 (B with its weight gradient);
    a pass waits for its input from the other stage, handed off in T; under megatron-core (the default profile, whose
    1F1B waits on each hand-off: Framework.blocking_p2p) a pass whose input comes from the other stage starts T after
    both that input and its own stage's previous pass end. From evaluate's per-stage F, B, W and T, the last pass
    ends at (by hand):
        a = F0 + T + F1 + B1                       stage 1's B0 ends
        e1 = max(a, 2 F0) + T + F1 + B1             stage 1's F1 then B1
        b0 = max(2 F0, a) + T + B0                  stage 0's B0 (needs stage 1's B0)
        end = max(b0, e1) + T + B0                  stage 0's B1
    and the step adds evaluate's exposed exchange and optimizer step."""
    trace = tmp_path / "t.json"
    flags = [*SMALL, "--tp", "8", "--pp", "2", "--micro-batch", "1", "--global-batch", "2", "--schedule", "1f1b"]
    rep = _json(capsys, ["evaluate", *flags, "--json", "--trace", str(trace)])
    s0, s1 = rep["stages"]
    assert rep["metrics"]["microbatches"] == 2
    F0, F1, T = s0["forward_s"], s1["forward_s"], s0["handoff_s"]
    B0, B1 = s0["backward_s"] + s0["weight_grad_s"], s1["backward_s"] + s1["weight_grad_s"]
    a = F0 + T + F1 + B1
    e1 = max(a, 2 * F0) + T + F1 + B1
    b0 = max(2 * F0, a) + T + B0
    end = max(b0, e1) + T + B0
    m = rep["metrics"]
    events, _ = _trace(trace)
    assert _span_s(events) == pytest.approx(end + m["dp_comm_s"] + m["optimizer_s"], rel=1e-9, abs=NS)
    passes = sorted((e["ts"], e["name"]) for e in events if e["pid"] == 1 and e["tid"] == 0 and e["cat"] != "optimizer")
    assert [n for _, n in passes] == ["F0", "F1", "B0", "B1"]
    assert [t / 1e6 for t, _ in passes] == pytest.approx([0.0, F0, b0 - B0, max(b0, e1) + T], abs=NS)
    fwd = _stage_events(events, 0, "forward")  # the sum of stage 0's forward blocks: m x its priced forward
    assert sum(e["dur"] for e in fwd) / 1e6 == pytest.approx(2 * F0, abs=2 * NS)


def test_the_trace_names_its_processes_threads_and_units(tmp_path, capsys):
    trace = tmp_path / "t.json"
    assert main(["evaluate", *PLANS[0], "--trace", str(trace)]) == 0
    capsys.readouterr()
    doc = json.loads(trace.read_text())
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert procs[0].startswith("iteration (1f1b, pp 2") and procs[1].startswith("stage 0 (") and len(procs) == 3
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert threads[1, 0].startswith("compute") and "collectives" in threads[1, 1] and "hand-offs" in threads[2, 3]
    x = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert all(isinstance(e["ts"], float) and e["dur"] >= 0 and isinstance(e["pid"], int) for e in x)
    assert doc["otherData"]["time_unit"] == "ts and dur in microseconds"
    (step,) = [e for e in x if e["pid"] == 0 and e["name"] == "step"]
    assert step["ts"] == 0 and step["dur"] == pytest.approx(1e6 * doc["otherData"]["step_time_s"])


@pytest.mark.parametrize("flags", PLANS[:3], ids=["1f1b", "interleaved", "zb-h1"])
def test_no_two_slices_of_a_thread_overlap(flags, tmp_path, capsys):
    """A viewer nests the slices of a thread: on each (process, thread) every slice starts no earlier than the one
    before it ends, in the whole nanoseconds a viewer reads ts and dur as (passes back to back share an instant)."""
    trace = tmp_path / "t.json"
    assert main(["evaluate", *flags, "--trace", str(trace)]) == 0
    capsys.readouterr()
    events, _ = _trace(trace)
    lanes: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for e in events:
        ts_ns, dur_ns = (int(Decimal(repr(e[k])) * 1000) for k in ("ts", "dur"))
        assert ts_ns == Decimal(repr(e["ts"])) * 1000 and dur_ns == Decimal(repr(e["dur"])) * 1000  # whole ns
        lanes.setdefault((e["pid"], e["tid"]), []).append((ts_ns, ts_ns + dur_ns))
    for key, spans in lanes.items():
        spans.sort()
        assert all(b0 >= a1 for (_, a1), (b0, _) in zip(spans, spans[1:], strict=False)), key


def test_a_placement_on_a_mixed_cluster_has_a_process_per_stage_named_by_its_pool(tmp_path, capsys):
    trace, png = tmp_path / "h.json", tmp_path / "h.png"
    strategy = tmp_path / "plan.json"
    strategy.write_text(json.dumps({
        "global_batch": 64, "microbatches": 8, "recompute": "selective", "zero_stage": 1, "sequence_parallel": True,
        "stages": [{"pool": "a100", "dp": 2, "tp": 8, "layers": 12},
                   {"pool": "h100", "dp": 2, "tp": 8, "layers": 20}]}))
    flags = ["--model", "llama3-8b", "--cluster", "a100x16+h100x16", "--strategy", str(strategy)]
    rep = _json(capsys, ["evaluate", *flags, "--json", "--trace", str(trace), "--timeline", str(png)])
    events, meta = _trace(trace)
    assert rep["metrics"]["feasible"]
    assert _span_s(events) == pytest.approx(rep["metrics"]["step_time_s"], rel=0.01)
    procs = {e["pid"]: e["args"]["name"] for e in json.loads(trace.read_text())["traceEvents"]
             if e["name"] == "process_name"}
    assert procs[1] == "stage 0 (a100, 12 layers)" and procs[2] == "stage 1 (h100, 20 layers)"
    for j, st in enumerate(rep["stages"]):
        fwd = sum(e["dur"] for e in _stage_events(events, j, "forward")) / 1e6
        assert fwd == pytest.approx(8 * st["forward_s"], abs=8 * NS)
    assert meta["plan"]["stages"][1]["pool"] == "h100"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_placement_of_stages_alike_draws_every_stage(tmp_path, capsys):
    """Four alike stages on one pool: the evaluator prices three representatives (first, interior, last); the
    trace still has a process per stage, the two interior ones alike, and spans evaluate's step."""
    trace, strategy = tmp_path / "a.json", tmp_path / "plan.json"
    strategy.write_text(json.dumps({"global_batch": 32, "microbatches": 8, "recompute": "full", "zero_stage": 1,
                                    "stages": [{"pool": "h100", "dp": 1, "tp": 4, "layers": 8}] * 4}))
    rep = _json(capsys, ["evaluate", "--model", "llama3-8b", "--cluster", "a100x16+h100x16", "--strategy",
                         str(strategy), "--json", "--trace", str(trace)])
    assert rep["metrics"]["feasible"]
    events, _ = _trace(trace)
    assert _span_s(events) == pytest.approx(rep["metrics"]["step_time_s"], abs=NS)
    fwd = [sum(e["dur"] for e in _stage_events(events, j, "forward")) for j in range(4)]
    assert fwd[1] == pytest.approx(fwd[2], abs=8e-3) and min(fwd[0], fwd[3]) > 1.001 * fwd[1]  # (embedding, head)
    assert {e["pid"] for e in events} == {0, 1, 2, 3, 4}


def test_the_timeline_figure_has_units_a_named_title_and_its_legend_outside(tmp_path):
    from costmodel._pipeline_render import plan_process_names, plan_slices
    from costmodel._plan_timeline import plan_timeline
    from sweep._timeline_plot import timeline_figure

    model, cluster = model_preset("llama3-8b"), cluster_preset("h100x16")
    table = StrategyTable.from_columns(dp=2, tp=4, pp=2, micro_batch=1, global_batch=16, schedule="1f1b")
    pt = plan_timeline(model, cluster, table)
    fig = timeline_figure(plan_slices(pt), plan_process_names(pt), "llama3-8b on h100x16", pipeline_s=pt.pipeline_s)
    ax = fig.axes[0]
    assert "(ms)" in ax.get_xlabel() and "llama3-8b on h100x16" in ax.get_title()
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    assert legend.x0 >= ax.get_window_extent().x1  # right of the data, not over it
    assert {t.get_text() for t in ax.get_legend().get_texts()} >= {"forward", "backward", "idle (bubble)"}


# ---- schedule --trace: the unit declared ----------------------------------------------------------------------------
@pytest.mark.parametrize(("unit", "us"), [("ms", 1e3), ("s", 1e6), ("us", 1.0)])
def test_schedule_trace_reads_the_declared_unit_and_writes_microseconds(unit, us, tmp_path, capsys):
    """1F1B on 2 stages, 2 micro-batches, T_F 1, T_B 2, T_C 0.5 (in ``unit``): 10 units by hand (stage 1's F0 at
    1.5, B0 2.5-4.5, F1 4.5-5.5, B1 5.5-7.5; stage 0's B0 from 5, B1 from 8 to 10)."""
    trace = tmp_path / "s.json"
    args = ["schedule", "--schedule", "1f1b", "--devices", "2", "--microbatches", "2", "--tf", "1", "--tb", "2",
            "--tc", "0.5", "--unit", unit, "--trace", str(trace)]
    assert main(args) == 0
    assert f"total_time=10 {unit}" in capsys.readouterr().out
    events, meta = _trace(trace)
    assert _span_s(events) * 1e6 == pytest.approx(10 * us)
    f0 = next(e for e in events if e["pid"] == 1 and e["name"] == "F0")
    assert f0["dur"] == pytest.approx(1 * us)
    hand = [e for e in events if e["cat"] == "pp hand-off"]
    assert len(hand) == 4 and all(e["dur"] == pytest.approx(0.5 * us) for e in hand)
    assert meta["input_unit"] == unit and meta["total_time_s"] == pytest.approx(10 * us / 1e6)


# ---- show RUN --rank K --trace / --timeline --------------------------------------------------------------------------
GRID = [*SMALL, "--tp", "4,8", "--pp", "2", "--micro-batch", "1", "--global-batch", "32", "--schedule",
        "1f1b,interleaved", "--recompute", "none", "--zero-stage", "1"]


def _run(tmp_path_factory, name: str, argv: list[str]) -> str:
    out = str(tmp_path_factory.mktemp(name) / "run")
    assert main([*argv, "--out", out, "--in-process", "--no-progress"]) == 0
    return out


@pytest.fixture(scope="module")
def grid_run(tmp_path_factory):
    return _run(tmp_path_factory, "grid", ["sweep", *GRID])


@pytest.fixture(scope="module")
def mcmc_run(tmp_path_factory):
    return _run(tmp_path_factory, "mcmc", ["search", "mcmc", *SMALL, "--global-batch", "32", "--seed", "1",
                                           "--budget", "96", "--chains", "8"])


@pytest.fixture(scope="module")
def placement_run(tmp_path_factory):
    return _run(tmp_path_factory, "mixed", ["search", "mcmc", "--model", "llama3-8b", "--cluster",
                                            "a100x16+h100x16", "--pp", "2,4", "--global-batch", "64", "--seed", "1",
                                            "--budget", "96", "--chains", "8"])


def _shown_rows(capsys, run: str, k: int) -> list[dict]:
    return _json(capsys, ["show", run, "--top", str(k), "--json"])["studies"][0]["rows"]


def _evaluate_row(capsys, tmp_path, row: dict, run_json: dict) -> dict:
    """evaluate --json of a shown row, from its columns as flags (a placement: as a strategy file)."""
    study = run_json["studies"][0]
    flags = ["--model", study["model"]["name"], "--cluster", study["cluster"]["name"],
             "--framework", row["framework"]]
    if row.get("stage_pool"):
        from sweep._results import hetero_row_strategy

        path = tmp_path / "plan.json"
        path.write_text(json.dumps(hetero_row_strategy(row, study["model"]["layers"])))
        return _json(capsys, ["evaluate", *flags, "--strategy", str(path), "--json"])
    for k in ("dp", "tp", "pp", "cp", "micro_batch", "global_batch", "vpp", "zero_stage", "schedule", "recompute"):
        flags += ["--" + k.replace("_", "-"), str(row[k])]
    flags += ["--sequence-parallel"] * bool(row["sequence_parallel"]) + ["--no-overlap-dp"] * (not row["overlap_dp"])
    return _json(capsys, ["evaluate", *flags, "--json"])


@pytest.mark.parametrize("which", ["grid_run", "mcmc_run", "placement_run"])
def test_show_rank_k_draws_that_row_as_evaluate_prices_it(which, request, tmp_path, capsys):
    run = request.getfixturevalue(which)
    capsys.readouterr()  # (the run's own output)
    rows = _shown_rows(capsys, run, 2)
    trace, png = tmp_path / "k.json", tmp_path / "k.png"
    assert main(["show", run, "--rank", "2", "--trace", str(trace), "--timeline", str(png)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("llama3-8b on ") and ": #2 " in out
    events, meta = _trace(trace)
    run_json = json.loads(open(f"{run}/run.json").read())
    rep = _evaluate_row(capsys, tmp_path, rows[1], run_json)
    assert _span_s(events) == pytest.approx(rep["metrics"]["step_time_s"], rel=0.01)
    assert meta["framework"] == rows[1]["framework"] and "#2 plan of the run" in meta["source"]
    if rows[1].get("stage_pool"):
        assert [s["pool"] for s in meta["plan"]["stages"]] == rows[1]["stage_pool"]
    else:
        assert all(meta["plan"][k] == rows[1][k] for k in ("dp", "tp", "pp", "micro_batch", "schedule", "vpp"))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_show_rank_refuses_bad_ranks_and_paths_writing_nothing(grid_run, tmp_path, capsys):
    capsys.readouterr()
    trace = tmp_path / "t.json"
    assert main(["show", grid_run, "--rank", "0", "--trace", str(trace)]) == 2
    assert "--rank" in capsys.readouterr().err
    assert main(["show", grid_run, "--rank", "100000", "--trace", str(trace)]) == 2
    assert "--rank: expected at most the" in capsys.readouterr().err
    assert main(["show", grid_run, "--rank", "2"]) == 2
    assert "--rank: expected only with --timeline or --trace" in capsys.readouterr().err
    assert main(["show", grid_run, "--trace", str(tmp_path / "missing" / "t.json")]) == 2
    assert "--trace: expected a file in an existing folder" in capsys.readouterr().err
    assert main(["evaluate", *PLANS[0], "--framework", "megatron-core,generic", "--trace", str(trace)]) == 2
    assert "--timeline/--trace: expected one --framework" in capsys.readouterr().err
    assert not trace.exists() and list(tmp_path.iterdir()) == []


def test_show_rank_on_a_run_of_two_studies_writes_a_file_each(tmp_path, capsys):
    from tests.run_fixtures import write_fixture_run

    model, a, b = model_preset("llama3-8b"), cluster_preset("h100x16"), cluster_preset("h200x16")
    table = StrategyTable.from_columns(dp=[2, 4], tp=4, pp=[2, 1], micro_batch=1, global_batch=16, recompute="full",
                                       zero_stage=1)
    heavy = StrategyTable.from_columns(dp=[2, 4], tp=4, pp=[2, 1], micro_batch=1, global_batch=16)  # out of memory
    run = write_fixture_run(tmp_path / "run", model, a, table, more_studies=((model, b, table),
                                                                            (model, cluster_preset("a100x16"), heavy)))
    assert main(["show", str(run), "--trace", str(tmp_path / "t.json")]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 2  # a line per study drawn; the study without a feasible plan named
    assert "llama3-8b on a100x16 has 0 distinct feasible plans: no #1 drawn" in err
    for cluster in (a, b):
        events, meta = _trace(tmp_path / f"t-llama3-8b-{cluster.name}.json")
        best = evaluate(model, cluster, table, pipeline="simulate", framework="generic")
        assert _span_s(events) == pytest.approx(float(np.nanmin(best["step_time_s"])), rel=0.01)
        assert meta["cluster"] == cluster.name



def test_a_plan_of_too_many_passes_to_draw_is_refused_before_anything_is_written(tmp_path, capsys):
    # 65,536 micro-batches on 8 stages, a forward and a backward each: 1,048,576 passes, over the 262,144 drawn at
    # most; 1,024 of them: 16,384 passes, drawn
    from cli._timeline import DRAWN_PASSES_MAX

    plan = ["--tp", "1", "--pp", "8", "--dp", "1", "--micro-batch", "1"]
    big, small = tmp_path / "big.json", tmp_path / "small.json"
    assert main(["evaluate", "--model", "llama3-8b", "--cluster", "h100x8", *plan, "--global-batch", "65536",
                 "--trace", str(big)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and not big.exists()
    assert "--trace" in err and "1,048,576 passes" in err and f"{DRAWN_PASSES_MAX:,}" in err
    assert DRAWN_PASSES_MAX == 262_144
    assert main(["evaluate", "--model", "llama3-8b", "--cluster", "h100x8", *plan, "--global-batch", "1024",
                 "--trace", str(small)]) == 0
    events, _ = _trace(small)
    assert sum(e["cat"] in ("forward", "backward") for e in events) == 2 * 1024 * 8
