"""A --hardware file's constants reach every price: its link latencies (the cluster carries its own copy of
them), and, on a mixed cluster, every constant a run directory keeps."""

from __future__ import annotations

import dataclasses
import json

import pytest

from cli._specs import load_cluster
from costmodel import InputError, StrategyTable, evaluate, model_preset
from costmodel._hetero_cluster import hetero_from_mapping, hetero_to_mapping
from tests.in_process import cli, one_error_line

# tp 8 inside a node and dp 8 across nodes: both tiers' latencies are on the step
PLAN = ("--model", "llama3-8b", "--cluster", "h100x64", "--dp", "8", "--tp", "8", "--pp", "1",
        "--micro-batch", "1", "--global-batch", "64", "--sequence-parallel", "--json")


def _step(*argv) -> float:
    res = cli("evaluate", *argv)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["metrics"]["step_time_s"]


def test_hardware_latencies_price_the_plan_as_a_cluster_with_those_latencies(tmp_path):
    hw = tmp_path / "hw.json"
    hw.write_text(json.dumps({"h100": {"scaleup_latency_s": 40e-6, "scaleout_latency_s": 90e-6}}))
    with_file = _step(*PLAN, "--hardware", str(hw))
    plain = _step(*PLAN)
    cluster = load_cluster("h100x64")
    slow = dataclasses.replace(cluster, scaleup_latency_s=40e-6, scaleout_latency_s=90e-6,
                               gpu=dataclasses.replace(cluster.gpu, scaleup_latency_s=40e-6,
                                                       scaleout_latency_s=90e-6))
    table = StrategyTable.from_columns(dp=8, tp=8, pp=1, micro_batch=1, global_batch=64, sequence_parallel=True,
                                       zero_stage=0, recompute="none", schedule="1f1b", vpp=1, overlap_dp=True)
    direct = float(evaluate(model_preset("llama3-8b"), slow, table, framework="megatron-core")["step_time_s"][0])
    assert with_file == pytest.approx(direct, rel=1e-12)
    assert with_file > plain * 1.001  # 8x and 9x the latencies: the file's numbers are what is priced


def test_a_latency_the_cluster_set_itself_is_kept(tmp_path):
    # a100x16-flat is one tier at the network's latency: its scale-up latency is its own, not the GPU's, and
    # stays; the scale-out one is the GPU's and takes the file's
    hw = tmp_path / "hw.json"
    hw.write_text(json.dumps({"a100": {"scaleup_latency_s": 1e-6, "scaleout_latency_s": 30e-6}}))
    flat = load_cluster("a100x16-flat")
    fitted = load_cluster("a100x16-flat", str(hw))
    assert fitted.scaleup_latency_s == flat.scaleup_latency_s == 10e-6
    assert fitted.scaleout_latency_s == 30e-6


def test_mixed_cluster_pools_take_the_files_latencies(tmp_path):
    hw = tmp_path / "hw.json"
    hw.write_text(json.dumps({"h100": {"scaleout_latency_s": 30e-6}}))
    mixed = load_cluster("a100x64+h100x64", str(hw))
    lat = {p.name: (p.intra_latency_s, p.inter_latency_s) for p in mixed.pools}
    assert lat == {"a100": (5e-6, 10e-6), "h100": (5e-6, 30e-6)}


def test_a_run_directory_keeps_a_mixed_clusters_fitted_constants(tmp_path):
    # run.json stores a mixed cluster in its file form; the constants --hardware gave must survive it
    hw = tmp_path / "hw.json"
    hw.write_text(json.dumps({"a100": {"gemm_eff_max": 0.3, "link_eff": 0.55}}))
    mixed = load_cluster("a100x64+h100x64", str(hw))
    entry = hetero_to_mapping(mixed)
    assert entry["pools"][0]["efficiency"] == {"gemm_eff_max": 0.3, "link_eff": 0.55}
    assert "efficiency" not in entry["pools"][1]  # the preset's own constants: nothing to keep
    back = hetero_from_mapping(json.loads(json.dumps(entry)))
    assert back == mixed


@pytest.mark.parametrize("bad, needle", [
    ({"link_eff": 1.5}, "cluster.pools[0].efficiency.link_eff: expected a number in [0.001, 1]"),
    ({"gemm_eff": 0.5}, "cluster.pools[0].efficiency: expected constants among"),
    ([0.5], "cluster.pools[0].efficiency: expected an object of constants"),
])
def test_a_bad_efficiency_entry_is_named(bad, needle):
    data = {"pools": [{"gpu": "a100", "nodes": 2, "efficiency": bad}, {"gpu": "h100", "nodes": 2}]}
    with pytest.raises(InputError) as exc:
        hetero_from_mapping(data)
    assert needle in str(exc.value)


def test_a_bad_efficiency_in_a_cluster_file_is_one_line(tmp_path):
    f = tmp_path / "mixed.json"
    f.write_text(json.dumps({"pools": [{"gpu": "a100", "nodes": 2, "efficiency": {"hbm_eff": 0}},
                                       {"gpu": "h100", "nodes": 2}]}))
    res = cli("evaluate", "--model", "llama3-8b", "--cluster", str(f), "--tp", "8", "--pp", "2")
    one_error_line(res, "efficiency.hbm_eff")
