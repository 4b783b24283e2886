"""Contracts of the Piper planner (search.solve_piper) and `plansweep search piper`.

The reference evaluator and the brute force below are written from shared/data/README.md
alone and read the raw JSON documents: they import nothing of the planner's cost code.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import time
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

import cli
import search._piper as piper_module
from costmodel import InputError
from search import (
    evaluate_piper_plan,
    load_piper_graph,
    parse_piper_graph,
    solve_piper,
    with_overrides,
)

INPUTS = Path(__file__).resolve().parent / "data" / "piper-inputs"
BERT = INPUTS / "bert32a100.json"
RESNET = INPUTS / "resnet.json"
GNMT = INPUTS / "gnmt.json"
GIB = 2**30
REL = 1e-9


# --- the reference: time per sample and feasibility of a plan, from the data README --------


def _tmpc_for(node: dict, t: int, recompute: bool) -> dict:
    options = node["TMPCs"][str(t)]
    if len(options) == 1:
        return options[0]
    marked = [o for o in options if ("recomp" in o["id"].lower()) == recompute]
    assert len(marked) == 1, options
    return marked[0]


def reference_time(doc: dict, plan: dict) -> float:
    """Time per sample of plan (the CLI's JSON) on doc; asserts every constraint."""
    nodes = {n["id"]: n for n in doc["nodes"]}
    stages = plan["stages"]
    stage_of = {}
    for i, s in enumerate(stages):
        assert len(s["nodes"]) == len(s["recompute"]) > 0
        for v in s["nodes"]:
            assert v not in stage_of, f"node {v} in two stages"
            stage_of[v] = i
    assert sorted(stage_of) == sorted(nodes), "every node in exactly one stage"
    for e in doc["edges"]:
        assert stage_of[e["sourceId"]] <= stage_of[e["destId"]], "edges go forward"
    k, n_mb = doc["maxDevices"], doc["mbsInBatch"]
    assert sum(s["t"] * s["d"] for s in stages) <= k, "device count"
    worst = 0.0
    for i, s in enumerate(stages):
        t, d = s["t"], s["d"]
        assert n_mb % d == 0, "d divides N"
        y = math.ceil(sum(x["d"] for x in stages[i:]) / d)
        members = set(s["nodes"])
        compute = cut = resync = memory = 0.0
        for v, rc in zip(s["nodes"], s["recompute"], strict=True):
            tm = _tmpc_for(nodes[v], t, rc)
            compute += tm["timePerSample"]
            resync += 4 * (d - 1) * tm["parameterSize"] / (d * n_mb)
            memory += tm["memoryUsageA"] * y + tm["memoryUsageB"]
            for e in doc["edges"]:
                if e["destId"] == v and e["sourceId"] not in members:
                    cut += 2 * (e["communicationCost"] + tm["syncTimeFw"][str(e["sourceId"])])
                if e["sourceId"] == v and e["destId"] not in members:
                    cut += 2 * (e["communicationCost"] + tm["syncTimeBw"][str(e["destId"])])
        assert memory <= doc["maxMemoryPerDevice"], f"stage {i} memory {memory}"
        worst = max(worst, compute / d + (cut / d + resync) / doc["bandwidth"])
    return worst


# --- brute force over all plans -----------------------------------------------------------


def brute_force(doc: dict, max_sum_d: int | None = None) -> float:
    """Lowest time per sample over every ordered split into stages whose edges go forward,
    every t and d per stage and every TMPC per node; inf if nothing fits."""
    max_sum_d = doc["maxDevices"] if max_sum_d is None else max_sum_d
    ids = [n["id"] for n in doc["nodes"]]
    nodes = {n["id"]: n for n in doc["nodes"]}
    edges = [(e["sourceId"], e["destId"], e["communicationCost"]) for e in doc["edges"]]
    k, n_mb, mem, bw = (doc["maxDevices"], doc["mbsInBatch"], doc["maxMemoryPerDevice"],
                        doc["bandwidth"])
    divisors = [d for d in range(1, n_mb + 1) if n_mb % d == 0]

    @lru_cache(maxsize=None)
    def stage_best(members: frozenset, t: int, d: int, y: int) -> float:
        # the best TMPC per node, found by trying all of them jointly
        if any(str(t) not in nodes[v]["TMPCs"] for v in members):
            return math.inf
        order = sorted(members)
        best = math.inf
        for pick in itertools.product(*[nodes[v]["TMPCs"][str(t)] for v in order]):
            tm = dict(zip(order, pick, strict=True))
            if sum(tm[v]["memoryUsageA"] * y + tm[v]["memoryUsageB"] for v in order) > mem:
                continue
            cut = sum(2 * (c + tm[b]["syncTimeFw"][str(a)]) for a, b, c in edges
                      if b in members and a not in members)
            cut += sum(2 * (c + tm[a]["syncTimeBw"][str(b)]) for a, b, c in edges
                       if a in members and b not in members)
            compute = sum(tm[v]["timePerSample"] for v in order)
            resync = sum(4 * (d - 1) * tm[v]["parameterSize"] / (d * n_mb) for v in order)
            best = min(best, compute / d + (cut / d + resync) / bw)
        return best

    degrees = sorted({int(t) for n in doc["nodes"] for t in n["TMPCs"]})
    best = math.inf
    for m in range(1, min(len(ids), k) + 1):
        for labels in itertools.product(range(m), repeat=len(ids)):
            if set(labels) != set(range(m)):
                continue
            label = dict(zip(ids, labels, strict=True))
            if any(label[a] > label[b] for a, b, _ in edges):
                continue
            stages = [frozenset(v for v in ids if label[v] == i) for i in range(m)]
            for ts in itertools.product(degrees, repeat=m):
                for ds in itertools.product(divisors, repeat=m):
                    if sum(t * d for t, d in zip(ts, ds, strict=True)) > k or sum(ds) > max_sum_d:
                        continue
                    worst = 0.0
                    for i in range(m):
                        y = math.ceil(sum(ds[i:]) / ds[i])
                        worst = max(worst, stage_best(stages[i], ts[i], ds[i], y))
                        if worst >= best:
                            break
                    best = min(best, worst)
    return best


def random_doc(seed: int) -> dict:
    """A small random instance: 3-6 nodes, t in {1, 2}, plain and recompute TMPCs, some
    nodes sharing memory figures (so they group), ids not in topological order."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 7))
    ids = [int(x) for x in rng.permutation(np.arange(n) * 7 + 3)]
    edges = [(ids[i], ids[j]) for i in range(n) for j in range(i + 1, n) if rng.random() < 0.45]
    template = {t: (rng.uniform(1, 3), rng.uniform(0, 2)) for t in (1, 2)}
    nodes = []
    for v in ids:
        ins = [a for a, b in edges if b == v]
        outs = [b for a, b in edges if a == v]
        tmpcs = {}
        for t in (1, 2):
            if t == 2 and rng.random() < 0.2:
                continue
            a, b = template[t] if rng.random() < 0.5 else (rng.uniform(1, 3), rng.uniform(0, 2))
            p, w = rng.uniform(1, 3) / t, rng.uniform(0, 2) / t
            plain = _tmpc("vanilla", p, w, a, b, ins, outs, rng)
            slower = p * rng.uniform(1.05, 1.6)
            recomp = _tmpc("activation recomp", slower, w * rng.choice([1.0, 1.2]),
                           a * rng.uniform(0.1, 0.6), b + rng.uniform(0, 0.5), ins, outs, rng)
            pair = [plain, recomp] if rng.random() < 0.7 else [recomp, plain]
            tmpcs[str(t)] = pair[: 1 if rng.random() < 0.1 else 2]
        nodes.append({"id": v, "name": f"n{v}", "TMPCs": tmpcs})
    order = rng.permutation(n)
    return {
        "maxDevices": int(rng.integers(1, 6)),
        "maxMemoryPerDevice": float(rng.uniform(4, 20)),
        "bandwidth": float(rng.uniform(0.5, 4)),
        "mbsInBatch": int(rng.choice([1, 2, 4, 6, 12])),
        "nodes": [nodes[i] for i in order],
        "edges": [{"sourceId": a, "destId": b, "communicationCost": float(rng.uniform(0, 2))}
                  for a, b in edges],
    }


def _tmpc(name, p, w, a, b, ins, outs, rng) -> dict:
    return {
        "id": name, "timePerSample": float(p), "parameterSize": float(w),
        "memoryUsageA": float(a), "memoryUsageB": float(b),
        "syncTimeFw": {str(u): float(rng.uniform(0, 1)) for u in ins},
        "syncTimeBw": {str(u): float(rng.uniform(0, 1)) for u in outs},
    }


def _solve_doc(doc: dict) -> dict:
    return solve_piper(parse_piper_graph(doc)).to_json()


# --- (b) small graphs: the planner equals brute force --------------------------------------


@pytest.mark.parametrize("seed", range(40))
def test_small_graph_matches_brute_force(seed):
    doc = random_doc(seed)
    expected = brute_force(doc)
    plan = _solve_doc(doc)
    if math.isinf(expected):
        assert plan == {"time_per_sample": None, "stages": []}
        return
    assert plan["time_per_sample"] == pytest.approx(expected, rel=REL)
    assert reference_time(doc, plan) == pytest.approx(plan["time_per_sample"], rel=REL)


@pytest.mark.parametrize("seed", range(8))
def test_evaluate_piper_plan_agrees_with_the_reference(seed):
    doc = random_doc(seed)
    graph = parse_piper_graph(doc)
    plan = solve_piper(graph)
    if not plan.feasible:
        return
    assert evaluate_piper_plan(graph, plan.stages) == pytest.approx(
        reference_time(doc, plan.to_json()), rel=REL)
    too_many = replace(plan.stages[0], d=plan.stages[0].d + doc["maxDevices"])
    assert math.isinf(evaluate_piper_plan(graph, (too_many, *plan.stages[1:])))
    twice = (*plan.stages, plan.stages[0])
    assert math.isinf(evaluate_piper_plan(graph, twice))
    unknown_tmpc = replace(plan.stages[0], tmpcs=("no such TMPC",) * len(plan.stages[0].nodes))
    assert math.isinf(evaluate_piper_plan(graph, (unknown_tmpc, *plan.stages[1:])))


def test_brute_force_sees_binding_memory_and_several_stages():
    """The random cases are not all trivial: some need recompute, several stages or t=2."""
    plans = [_solve_doc(random_doc(seed)) for seed in range(40)]
    stages = [s for p in plans for s in p["stages"]]
    assert any(p["time_per_sample"] is None for p in plans)
    assert any(len(p["stages"]) >= 2 for p in plans)
    assert any(any(s["recompute"]) for s in stages)
    assert any(s["t"] == 2 for s in stages)
    assert any(s["d"] >= 2 for s in stages)


def test_hand_made_chain_worked_by_hand():
    """Two nodes a->b, 2 devices, no communication: splitting runs each on one device, so
    the time is max(p_a, p_b); data parallelism alone gives (p_a + p_b)/2."""
    def node(i, p, outs, ins):
        tm = {"id": "vanilla", "timePerSample": p, "parameterSize": 0.0, "memoryUsageA": 1.0,
              "memoryUsageB": 0.0, "syncTimeFw": {str(u): 0.0 for u in ins},
              "syncTimeBw": {str(u): 0.0 for u in outs}}
        return {"id": i, "TMPCs": {"1": [tm]}}
    doc = {"maxDevices": 2, "maxMemoryPerDevice": 100.0, "bandwidth": 1.0, "mbsInBatch": 2,
           "nodes": [node(0, 3.0, [1], []), node(1, 1.0, [], [0])],
           "edges": [{"sourceId": 0, "destId": 1, "communicationCost": 0.0}]}
    assert _solve_doc(doc)["time_per_sample"] == pytest.approx(2.0)  # (3 + 1) / 2 with d=2
    doc["mbsInBatch"] = 1  # d must divide 1: only the split is left
    assert _solve_doc(doc)["time_per_sample"] == pytest.approx(3.0)


@pytest.mark.parametrize("seed", range(40, 52))
def test_sum_of_d_capped_at_n_like_piper_matches_brute_force(seed):
    """max_sum_d=N reproduces algo.cpp's extra bound (sum of d <= N)."""
    doc = random_doc(seed)
    doc["mbsInBatch"] = 2
    doc["maxDevices"] = 5
    expected = brute_force(doc, max_sum_d=2)
    plan = solve_piper(parse_piper_graph(doc), max_sum_d=2).to_json()
    if math.isinf(expected):
        assert plan["time_per_sample"] is None
        return
    assert sum(s["d"] for s in plan["stages"]) <= 2
    assert plan["time_per_sample"] == pytest.approx(expected, rel=REL)


@pytest.mark.parametrize("seed", range(12))
def test_greedy_knapsack_fallback_stays_feasible(seed, monkeypatch):
    """Past MAX_EXACT_CANDIDATES the knapsack is a heuristic: never better than the optimum,
    and its plan still fits and has the time it reports."""
    monkeypatch.setattr(piper_module, "MAX_EXACT_CANDIDATES", 1)
    doc = random_doc(seed)
    plan = _solve_doc(doc)
    expected = brute_force(doc)
    if plan["time_per_sample"] is None:
        return
    assert plan["time_per_sample"] >= expected * (1 - REL)
    assert reference_time(doc, plan) == pytest.approx(plan["time_per_sample"], rel=REL)


# --- the batched staircase builder equals the per-stage knapsack, stage by stage ----------


def _envelope(times, ys) -> list[tuple[float, int]]:
    """A staircase as the points where its largest fitting y rises (y > 0), time ascending."""
    out, best = [], 0
    for time_s, y in sorted(zip(times, ys, strict=True), key=lambda p: (p[0], -p[1])):
        if y > best and np.isfinite(time_s):
            out.append((float(time_s), int(y)))
            best = y
    return out


def _per_stage_staircases(problem) -> list[list[tuple[float, int]]]:
    """Every (pair, t, d) staircase from stage_candidates, one stage at a time (the reference)."""
    g = problem.graph
    ds = np.asarray(problem.ds)
    out = []
    for i, j in problem.pairs:
        in_stage = piper_module._stage_mask(problem.tails, (i, j), len(g.nodes))
        others = int(i != len(problem.tails) - 1) + int(j != 0)  # stages before / after it
        for t in problem.degrees:
            arr = problem.arrays[t]
            runs = arr.available[in_stage].all()
            cand = piper_module.stage_candidates(arr, g, in_stage) if runs else None
            for d in ds:
                if cand is None or t * d > g.max_devices - others:
                    out.append([])
                    continue
                y_cap = -(-problem.s_max // d)
                time_s = piper_module.stage_time_s(cand.x_s, cand.w_bytes, d, g)
                y = piper_module.largest_y(cand.a_bytes, cand.b_bytes, g.max_memory_bytes, y_cap)
                out.append(_envelope(time_s, y))
    return out


def _batched_staircases(problem) -> list[list[tuple[float, int]]]:
    ends = np.append(problem.seg_start[1:], problem.seg_time.size)
    return [_envelope(problem.seg_time[a:b], problem.seg_y[a:b])
            for a, b in zip(problem.seg_start, ends, strict=True)]


# Random instances where some stage fits (in 5, 10 and 22 none does: nothing to compare).
@pytest.mark.parametrize("case", [f"random-{seed}" for seed in (0, 1, 2, 3, 4, 6, 7, 8, 9, 11, 12, 13)]
                         + ["bert-8", "bert-12-4GiB", "bert-48-2GiB"])
def test_batched_staircases_equal_the_per_stage_knapsack(case, monkeypatch):
    """_all_staircases builds every stage's staircase at once (whole arrays); the reference
    builds each from stage_candidates alone. Same points: y exactly, times to 1e-12 (sums are
    added in another order). Random graphs have w differing between TMPCs (every d sorted on
    its own); bert's do not (one sort for all d); random-0..3 also take the greedy fallback."""
    if case.startswith("random"):
        seed = int(case.split("-")[1])
        if seed < 4:
            monkeypatch.setattr(piper_module, "MAX_EXACT_CANDIDATES", 1)
        graph = parse_piper_graph(random_doc(seed))
    else:
        k, *mem = case.split("-")[1:]
        graph = with_overrides(load_piper_graph(BERT), devices=int(k), bandwidth_Bps=25 * GIB,
                               memory_bytes=int(mem[0][:-3]) * GIB if mem else 8 * GIB)
    problem = piper_module._Problem.build(graph, graph.max_devices)
    batched, reference = _batched_staircases(problem), _per_stage_staircases(problem)
    assert len(batched) == len(reference)
    assert any(reference), "no stage fits: the comparison would prove nothing"
    for got, want in zip(batched, reference, strict=True):
        assert [y for _, y in got] == [y for _, y in want]
        assert [t for t, _ in got] == pytest.approx([t for t, _ in want], rel=1e-12)


# --- (a) real inputs: the plan fits and has the time it reports ---------------------------


def _real_doc(path: Path, **overrides) -> dict:
    doc = json.loads(path.read_text())
    doc.update(overrides)
    return doc


def _uniform_plans(doc: dict):
    """Equal-ish splits of the topological order with one t, d and recompute setting: simple
    plans that the optimum can never lose to."""
    graph = parse_piper_graph(doc)
    order = [node.id for node in graph.nodes]
    degrees = graph.degrees
    for m in range(1, min(len(order), doc["maxDevices"]) + 1):
        cuts = np.array_split(np.array(order), m)
        for t, d, rc in itertools.product(degrees, (1, 2, 4, 8, 16), (False, True)):
            if m * t * d > doc["maxDevices"] or doc["mbsInBatch"] % d:
                continue
            yield {"stages": [{"nodes": [int(v) for v in c], "t": t, "d": d,
                               "recompute": [rc] * len(c)} for c in cuts]}


@pytest.mark.parametrize(
    "overrides",
    [{}, {"maxDevices": 64, "maxMemoryPerDevice": 8 * GIB, "bandwidth": 25 * GIB},
     {"maxDevices": 32, "maxMemoryPerDevice": 2 * GIB, "bandwidth": 25 * GIB}],
)
def test_bert_plan_is_feasible_has_its_time_and_beats_uniform_plans(overrides):
    doc = _real_doc(BERT, **overrides)
    plan = _solve_doc(doc)
    assert plan["time_per_sample"] is not None
    assert reference_time(doc, plan) == pytest.approx(plan["time_per_sample"], rel=REL)
    for simple in _uniform_plans(doc):
        try:
            simple_time = reference_time(doc, simple)
        except AssertionError:
            continue  # does not fit
        assert plan["time_per_sample"] <= simple_time * (1 + REL)


def test_bert_more_devices_or_memory_is_never_slower():
    base = with_overrides(load_piper_graph(BERT), memory_bytes=4 * GIB, bandwidth_Bps=25 * GIB)
    by_devices = [solve_piper(with_overrides(base, devices=k)).time_per_sample_s
                  for k in (8, 24, 48)]
    assert all(a >= b for a, b in itertools.pairwise(by_devices))
    by_memory = [solve_piper(with_overrides(base, devices=24, memory_bytes=m * GIB))
                 .time_per_sample_s for m in (3, 8, 16)]
    assert all(a >= b for a, b in itertools.pairwise(by_memory))
    assert by_devices[0] > by_devices[-1] and by_memory[0] > by_memory[-1]


@pytest.mark.slow
def test_resnet_plan_is_feasible_and_has_its_time():
    doc = _real_doc(RESNET, maxDevices=8, maxMemoryPerDevice=4 * GIB)
    plan = _solve_doc(doc)
    assert plan["time_per_sample"] is not None
    assert reference_time(doc, plan) == pytest.approx(plan["time_per_sample"], rel=REL)


def test_gnmt_is_refused_with_a_clear_error():
    """gnmt has 17,914 successor-closed sets (15M stage candidates): out of reach here."""
    with pytest.raises(InputError, match="successor-closed"):
        solve_piper(load_piper_graph(GNMT))


@pytest.mark.slow
def test_bert_2048_devices_under_a_minute():
    """The issue's benchmark: 2048 devices, 8 GiB, 1920 micro-batches, 25 GiB/s."""
    graph = with_overrides(load_piper_graph(BERT), devices=2048, memory_bytes=8 * GIB,
                           microbatches=1920, bandwidth_Bps=25 * GIB)
    start = time.process_time()
    plan = solve_piper(graph)
    elapsed = time.process_time() - start
    assert elapsed < 60
    doc = _real_doc(BERT, maxDevices=2048, maxMemoryPerDevice=8 * GIB, mbsInBatch=1920,
                    bandwidth=25 * GIB)
    assert reference_time(doc, plan.to_json()) == pytest.approx(plan.time_per_sample_s, rel=REL)


# --- (c) the command line -----------------------------------------------------------------


@pytest.fixture
def run_cli(monkeypatch, capsys):
    # only this subcommand: the others live in modules other people are writing
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("cli._cmd_search",))

    def run(*argv):
        code = cli.main(list(map(str, argv)))
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_cli_json_keys_and_overrides(run_cli):
    code, out, err = run_cli("search", "piper", BERT, "--devices", 16, "--memory", 8 * GIB,
                             "--microbatches", 480, "--bandwidth", 25 * GIB, "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert set(plan) == {"time_per_sample", "stages"}
    assert all(set(s) == {"nodes", "t", "d", "recompute"} for s in plan["stages"])
    doc = _real_doc(BERT, maxDevices=16, maxMemoryPerDevice=8 * GIB, mbsInBatch=480,
                    bandwidth=25 * GIB)
    assert reference_time(doc, plan) == pytest.approx(plan["time_per_sample"], rel=REL)


def test_cli_text_output_and_no_plan_exit_code(run_cli):
    code, out, _ = run_cli("search", "piper", BERT, "--devices", 4)
    assert code == 0 and "time per sample" in out
    code, out, _ = run_cli("search", "piper", BERT, "--memory", 1000, "--json")
    assert code == 1 and json.loads(out) == {"time_per_sample": None, "stages": []}


def _bad_docs():
    good = random_doc(3)
    node_key = copy.deepcopy(good)
    del node_key["nodes"][0]["TMPCs"]
    negative = copy.deepcopy(good)
    negative["nodes"][1]["TMPCs"]["1"][0]["memoryUsageA"] = -1.0
    no_batch = copy.deepcopy(good)
    del no_batch["mbsInBatch"]
    cyclic = copy.deepcopy(good)
    cyclic["edges"].append({"sourceId": cyclic["edges"][0]["destId"],
                            "destId": cyclic["edges"][0]["sourceId"], "communicationCost": 1.0})
    sync = copy.deepcopy(good)
    target = next(n for n in sync["nodes"] if any(n["TMPCs"]["1"][0]["syncTimeFw"]))
    target["TMPCs"]["1"][0]["syncTimeFw"].clear()
    return [
        ("mbsInBatch", no_batch), ("TMPCs", node_key), ("memoryUsageA", negative),
        ("acyclic", cyclic), ("syncTimeFw", sync),
    ]


@pytest.mark.parametrize("needle,doc", _bad_docs())
def test_cli_bad_document_is_one_line_exit_2(needle, doc, run_cli, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    code, out, err = run_cli("search", "piper", path, "--json")
    assert code == 2 and out == ""
    assert needle in err and "expected" in err and "Traceback" not in err
    assert str(path) in err  # the file named with its key
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "args,needle",
    [(["--devices", "-1"], "--devices"), (["--memory", "lots"], "--memory"),
     (["--microbatches", "0"], "--microbatches"), (["--bandwidth", "-5"], "--bandwidth")],
)
def test_cli_bad_flags_exit_2(args, needle, run_cli, tmp_path):
    path = tmp_path / "ok.json"
    path.write_text(json.dumps(random_doc(1)))
    code, _, err = run_cli("search", "piper", path, *args)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_cli_malformed_and_missing_file_exit_2(run_cli, tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"maxDevices": 4,')
    code, _, err = run_cli("search", "piper", broken)
    assert code == 2 and "valid JSON" in err
    code, _, err = run_cli("search", "piper", tmp_path / "absent.json")
    assert code == 2 and "FILE" in err


# --- Piper's recurrence, literally, on the real BERT input --------------------------------


def literal_piper_dp(doc: dict) -> float:
    """algo.cpp's recurrence written out plainly: dp[tail][k][s] = least max stage time
    running the tail on <= k devices with sum of d <= s, over (sub-tail, t, d), with
    Piper's greedy knapsack per y (cheapest time per byte saved first) for the TMPCs."""
    ids = [n["id"] for n in doc["nodes"]]
    pos = {v: i for i, v in enumerate(ids)}
    nodes = doc["nodes"]
    edges = [(pos[e["sourceId"]], pos[e["destId"]], e["communicationCost"])
             for e in doc["edges"]]
    k_max, n_mb = doc["maxDevices"], doc["mbsInBatch"]
    mem, bw = doc["maxMemoryPerDevice"], doc["bandwidth"]
    s_max = min(n_mb, k_max)  # algo.cpp's boundOnS
    succ = [0] * len(ids)
    for a, b, _ in edges:
        succ[a] |= 1 << b
    tails, stack = {0}, [0]
    while stack:
        m = stack.pop()
        for v in range(len(ids)):
            if not m >> v & 1 and succ[v] & ~m == 0 and m | 1 << v not in tails:
                tails.add(m | 1 << v)
                stack.append(m | 1 << v)
    order = sorted(tails, key=lambda m: (bin(m).count("1"), m))
    dp = {0: np.zeros((k_max + 1, s_max + 1))}
    knaps: dict[tuple[int, int, int], list[float]] = {}  # (stage's node set, t, d) -> knapsack per y
    for m in order[1:]:
        table = np.full((k_max + 1, s_max + 1), np.inf)
        for sub in order:
            if sub == m or sub & ~m:
                continue
            stage = [v for v in range(len(ids)) if (m & ~sub) >> v & 1]
            for t in sorted({int(t) for n in nodes for t in n["TMPCs"]}):
                if any(not nodes[v]["TMPCs"].get(str(t)) for v in stage):
                    continue
                for d in range(1, k_max // t + 1):
                    if n_mb % d:
                        continue
                    key = (m & ~sub, t, d)  # the same stage recurs under many tails: priced once
                    if key not in knaps:
                        options = _stage_options(nodes, ids, edges, stage, t, d, n_mb, bw)
                        knaps[key] = [_greedy_knapsack(options, y, mem) for y in range(s_max // d + 2)]
                    knap = knaps[key]
                    tps = np.array([knap[-(-s // d)] for s in range(s_max + 1)])
                    prev = dp[sub][: k_max + 1 - t * d, : s_max + 1 - d]
                    np.minimum(table[t * d:, d:], np.maximum(prev, tps[None, d:]),
                               out=table[t * d:, d:])
        table = np.minimum.accumulate(np.minimum.accumulate(table, axis=0), axis=1)
        dp[m] = table
    return float(dp[order[-1]][k_max, s_max])


def _stage_options(nodes, ids, edges, stage, t, d, n_mb, bw):
    """Per node of the stage, per TMPC option: its time (compute over d, the cut edges' traffic
    and the weight resync) and its memory as (per micro-batch in flight, fixed)."""
    members = set(stage)
    cost, mem_a, mem_b = [], [], []
    for v in stage:
        options = nodes[v]["TMPCs"][str(t)]
        node_cost = []
        for tm in options:
            cut = sum(2 * (c + tm["syncTimeFw"][str(ids[a])]) for a, b, c in edges
                      if b == v and a not in members)
            cut += sum(2 * (c + tm["syncTimeBw"][str(ids[b])]) for a, b, c in edges
                       if a == v and b not in members)
            resync = 4 * (d - 1) * tm["parameterSize"] / (d * n_mb)
            node_cost.append(tm["timePerSample"] / d + (cut / d + resync) / bw)
        cost.append(node_cost)
        mem_a.append([tm["memoryUsageA"] for tm in options])
        mem_b.append([tm["memoryUsageB"] for tm in options])
    return cost, mem_a, mem_b


def _greedy_knapsack(options, y, mem) -> float:
    """Piper's greedy knapsack at y micro-batches in flight: the fastest option of each node, then
    the swaps of least time per byte saved until the stage fits ``mem``."""
    if y == 0:
        return math.inf
    cost, mem_a, mem_b = options
    memory = [[a * y + b for a, b in zip(ra, rb, strict=True)] for ra, rb in zip(mem_a, mem_b, strict=True)]
    pick = [min(range(len(c)), key=c.__getitem__) for c in cost]
    excess = sum(m[p] for m, p in zip(memory, pick, strict=True)) - mem
    if excess <= 0:
        return sum(c[p] for c, p in zip(cost, pick, strict=True))
    if sum(min(m) for m in memory) > mem:
        return math.inf
    swaps = sorted(((cost[i][j] - cost[i][pick[i]]) / (memory[i][pick[i]] - memory[i][j]), i, j)
                   for i in range(len(cost)) for j in range(len(cost[i]))
                   if memory[i][pick[i]] - memory[i][j] > 1e-9)
    for _, i, j in swaps:
        excess -= memory[i][pick[i]] - memory[i][j]
        pick[i] = j
        if excess < 1e-9:
            break
    return sum(c[p] for c, p in zip(cost, pick, strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("devices,memory_gib", [(8, 6), (12, 4)])
def test_bert_agrees_with_piper_recurrence_written_out(devices, memory_gib):
    """Memory binds in both (recompute on), and (12, 4) uses t=2 stages. Piper's greedy
    knapsack could in principle be worse than the exact one here; on these it is not."""
    doc = _real_doc(BERT, maxDevices=devices, maxMemoryPerDevice=memory_gib * GIB,
                    bandwidth=25 * GIB)
    plan = solve_piper(parse_piper_graph(doc), max_sum_d=doc["mbsInBatch"])
    assert any(any(s.recompute) for s in plan.stages)
    assert plan.time_per_sample_s == pytest.approx(literal_piper_dp(doc), rel=REL)
