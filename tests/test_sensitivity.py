"""rank --sensitivity: the cluster's constants moved by hand, and the re-ranking checked against a brute force."""

import dataclasses

import numpy as np
import pytest

from costmodel import InputError, cluster_preset, evaluate, hetero_preset, model_preset
from costmodel._knobs import KNOBS, moved_cluster
from search import Space
from search._refine import objective_score
from search._sensitivity import DEFAULT_CASES, parse_cases, sensitivity
from tests.in_process import cli


def test_moved_cluster_scales_only_its_figures():
    c = cluster_preset("h100x64")
    g = c.gpu
    m = moved_cluster(c, [("compute", 0.5)])
    assert m.gpu.peak_flops == tuple(0.5 * p for p in g.peak_flops) and m.gpu.hbm_Bps == g.hbm_Bps
    assert m.scaleout_Bps == c.scaleout_Bps and m.gpu.name == g.name and m.gpu.hbm_bytes == g.hbm_bytes
    m = moved_cluster(c, [("network", 0.8), ("nvlink", 1.25)])
    assert m.scaleout_Bps == pytest.approx(0.8 * c.scaleout_Bps)
    assert m.scaleup_Bps == pytest.approx(1.25 * c.scaleup_Bps)
    assert m.gpu.peak_flops == g.peak_flops and m.scaleup_latency_s == c.scaleup_latency_s
    m = moved_cluster(c, [("latency", 2), ("kernel-overhead", 3), ("memory-bandwidth", 0.9)])
    assert m.scaleup_latency_s == 2 * c.scaleup_latency_s and m.scaleout_latency_s == 2 * c.scaleout_latency_s
    assert m.gpu.kernel_overhead_s == pytest.approx(3 * g.kernel_overhead_s)
    assert m.gpu.hbm_Bps == pytest.approx(0.9 * g.hbm_Bps)
    unchanged = {f.name for f in dataclasses.fields(g)} - {"kernel_overhead_s", "hbm_Bps", "scaleup_latency_s",
                                                          "scaleout_latency_s"}
    assert all(getattr(m.gpu, k) == getattr(g, k) for k in unchanged)


def test_moved_cluster_on_pools_and_their_links():
    hc = hetero_preset("a100x64+h100x64")
    m = moved_cluster(hc, [("network", 0.5)])
    for p, q in zip(hc.pools, m.pools, strict=True):
        assert q.inter_Bps == 0.5 * p.inter_Bps and q.intra_Bps == p.intra_Bps
    assert m.link_Bps[0][1] == 0.5 * hc.link_Bps[0][1]
    m = moved_cluster(hc, [("compute", 2.0)])
    assert [q.gpu.peak_flops[0] for q in m.pools] == [2 * p.gpu.peak_flops[0] for p in hc.pools]


@pytest.mark.parametrize("changes", [[("disk", 0.5)], [("network", 0)], [("network", -1.0)], [("compute", True)]])
def test_moved_cluster_refuses(changes):
    with pytest.raises(InputError):
        moved_cluster(cluster_preset("h100x64"), changes)


def test_parse_cases():
    assert parse_cases("network=0.8,compute=0.9+nvlink=0.5") == ((("network", 0.8),),
                                                                 (("compute", 0.9), ("nvlink", 0.5)))
    assert parse_cases(" Network = 0.5 ") == ((("network", 0.5),),)  # knobs in any case, spaces around
    assert len(parse_cases("default")) == len(DEFAULT_CASES) == 10
    assert {k for case in parse_cases("default") for k, _ in case} == set(KNOBS)
    for bad in ("network", "disk=2", "network=0", "network=-1", "network=abc", "", "network=0.8,", "network=inf"):
        with pytest.raises(InputError) as e:
            parse_cases(bad)
        assert e.value.argument == "--sensitivity"


def _small():
    model, cluster = model_preset("llama3-8b"), cluster_preset("h100x16")
    space = Space.from_options(model, cluster, global_batch=256)
    _, table = space.rows(0, space.size)
    return model, cluster, table


def test_unmoved_cases_keep_rank_first_plan():
    # factors of 1 re-rank the same cluster: the best then is the first itself, nothing behind
    model, cluster, table = _small()
    m = evaluate(model, cluster, table)
    from search._refine import refine

    idx, exact = refine(model, cluster, table, m)
    first = int(idx[exact["feasible"]][0])
    found = sensitivity(model, cluster, table, first, parse_cases("compute=1,network=1+latency=1"))
    assert [f["best"] for f in found] == [first, first] and all(f["shortfall"] == 0 for f in found)


def test_moved_best_against_brute_force():
    # every row priced with the simulator on the moved cluster: the best among them is the case's best
    model, cluster, table = _small()
    m = evaluate(model, cluster, table)
    from search._refine import refine

    idx, exact = refine(model, cluster, table, m)
    first = int(idx[exact["feasible"]][0])
    cases = parse_cases("network=0.01,nvlink=0.01,latency=20")
    found = sensitivity(model, cluster, table, first, cases)
    # at a hundredth of the links' bandwidth the exchanges of rank's first plan (data parallel over both nodes)
    # dominate its step: another plan is best then
    assert found[0]["best"] != first and found[0]["shortfall"] > 0.1
    for case, f in zip(cases, found, strict=True):
        moved = moved_cluster(cluster, case)
        every = evaluate(model, moved, table, pipeline="simulate")
        score = objective_score(every, table, moved, "tokens_per_s")
        assert f["best_score"] == pytest.approx(score.max(), rel=1e-9)
        assert f["first_score"] == pytest.approx(score[first], rel=1e-9)
        assert f["shortfall"] == pytest.approx(1 - score[first] / score.max(), abs=1e-12)


def test_rank_sensitivity_command():
    r = cli("rank", "--model", "llama3-8b", "--cluster", "h100x16", "--global-batch", "256", "--top", "3",
            "--sensitivity", "network=0.1,compute=1")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("sensitivity:"))
    assert lines[at + 2].split()[:2] == ["network", "x0.1"] and lines[at + 3].split()[:3] == ["compute", "x1", "#1"]
    assert any(line.startswith("#1 stays best in") for line in lines[at:])
    bad = cli("rank", "--model", "llama3-8b", "--cluster", "h100x16", "--sensitivity", "network=0")
    assert bad.returncode == 2 and "--sensitivity" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    assert bad.stdout == ""


def test_rank_json_sensitivity_where_the_best_moves():
    # at a hundredth of the network's bandwidth rank's #1 (data parallel over both nodes) falls well behind: the JSON
    # names the case's best by its place in the ranking and how far #1 is behind, as the text prints them
    import json

    args = ("rank", "--model", "llama3-8b", "--cluster", "h100x16", "--global-batch", "256", "--top", "3",
            "--sensitivity", "network=0.01,compute=1")
    text, doc = cli(*args), cli(*args, "--json")
    assert text.returncode == 0 and doc.returncode == 0, text.stderr + doc.stderr
    moved, same = json.loads(doc.stdout)["sensitivity"]
    assert moved["case"] == "network x0.01" and moved["best_fits"]
    assert moved["best_rank"] > 1 and moved["first_behind"] > 0.1
    assert same == {"case": "compute x1", "best_rank": 1, "best_fits": True, "first_behind": 0.0}
    line = next(ln.split() for ln in text.stdout.splitlines() if ln.strip().startswith("network x0.01"))
    assert line[2:] == [f"#{moved['best_rank']}", f"{100 * moved['first_behind']:.1f}%"]


def test_evaluate_sensitivity_one_gpu_has_no_links():
    # one GPU: no collective, no hand-off; the links' figures cannot move its step, compute must, by less than 2x
    import json

    r = cli("evaluate", "--model", "llama3-8b", "--seq-len", "2048", "--cluster", "b200x1", "--global-batch", "8",
            "--micro-batch", "1", "--recompute", "full", "--json",
            "--sensitivity", "network=0.5,nvlink=0.5,latency=10,compute=2")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["sensitivity"]
    assert [x["case"] for x in rows] == ["network x0.5", "nvlink x0.5", "latency x10", "compute x2"]
    assert [x["change_pct"] for x in rows[:3]] == [0.0, 0.0, 0.0]
    assert 0.0 < rows[3]["change_pct"] < 100.0
    bad = cli("evaluate", "--model", "llama3-8b", "--cluster", "h100x8", "--framework", "megatron-core,fsdp2",
              "--sensitivity")
    assert bad.returncode == 2 and "--sensitivity" in bad.stderr and bad.stdout == ""


def test_format_sensitivity_names_plans_outside_the_ranking():
    from cli._cmd_rank import format_sensitivity

    model, cluster, table = _small()
    space = Space.from_options(model, cluster, global_batch=256)
    found = [{"case": "network x0.5", "best": 3, "best_score": 2.0, "first_score": 1.5, "shortfall": 0.25},
             {"case": "compute x0.9", "best": 0, "best_score": 1.0, "first_score": 1.0, "shortfall": 0.0},
             {"case": "latency x2", "best": None, "best_score": np.nan, "first_score": np.nan,
              "shortfall": np.nan}]
    text = format_sensitivity(space, table, np.array([0, 1, 2]), found,
                              {"tokens_per_s": 100.0, "tokens_per_s_low": 90.0, "tokens_per_s_high": 110.0})
    lines = text.splitlines()
    assert lines[2].split() == ["network", "x0.5", "A", "25.0%"]
    assert lines[3].split() == ["compute", "x0.9", "#1", "-"]
    assert lines[4].split()[:4] == ["latency", "x2", "none", "fits"]
    assert lines[5].startswith("  A: ") and "not among the 3 best" in lines[5]
    assert lines[6] == ("#1 stays best in 1 of 3 cases; elsewhere it is at most 25.0% behind the best then "
                        "(throughput); the model's error band on #1: ±10.0%")
