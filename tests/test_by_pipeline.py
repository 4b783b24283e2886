"""A block's stage times, bottleneck, stage parameters and report terms priced once per distinct (configuration, pp)
and gathered to the rows (costmodel._block.ByPipeline) equal the same block priced stage by stage, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import costmodel._block as block
from costmodel import METRIC_COLUMNS, REASONS, StrategyTable, cluster_preset, model_preset
from costmodel._bench_rows import bench_table
from costmodel._stages import moe_block_view, pool_arrays


def _priced(model, table, fw, keyed: bool, monkeypatch):
    """The metric columns of one block of ``table`` and whether it took the per (configuration, pp) path."""
    pa = pool_arrays(cluster_preset("h100x1024"))
    sv = moe_block_view(model, table, False)
    with monkeypatch.context() as mp:
        mp.setattr(block, "BY_PP_SHARE", 1)  # (any share of the rows: the path taken wherever it applies)
        if not keyed:
            mp.setattr(block, "pipeline_key", lambda *a: None)
        phases = block.block_phases(model, pa, sv, "closed_form", False, False, fw)
        out = block.report(*phases, False)
    return out, phases[3].by_pp is not None


@pytest.mark.parametrize(("name", "fw"), [("gpt3-175b", "megatron-core"), ("gpt3-175b", "fsdp2"),
                                          ("gpt3-175b", "llm-foundry"), ("mixtral-8x7b", "fsdp2"),
                                          ("deepseek-v3", "deepspeed")])
def test_per_configuration_and_pp_equals_every_stage_priced(name, fw, monkeypatch):
    model = model_preset(name)
    table = bench_table(6000, experts=model.experts)
    if fw == "deepspeed":  # DeepSpeed's MoE: expert groups inside the data-parallel ranks, no ZeRO-3 (else no
        # DeepSeek-V3 row passes every check)
        table = StrategyTable({**table.columns, "ep": np.minimum(table["ep"], table["dp"]),
                               "zero_stage": np.minimum(table["zero_stage"], 2)})
    keyed, took = _priced(model, table, fw, True, monkeypatch)
    plain, took_plain = _priced(model, table, fw, False, monkeypatch)
    assert took and not took_plain
    assert (keyed["compute_s"] > 0).sum() >= 1000  # (every column priced, refused too)
    passed = keyed["feasible"] | (keyed["reason"] == REASONS.index("out_of_memory"))  # every check but memory
    assert passed.sum() >= 20
    for k in METRIC_COLUMNS:
        np.testing.assert_array_equal(keyed[k], plain[k], err_msg=f"{name} {fw} {k}")


def test_the_path_is_not_taken_where_stages_differ_within_a_row(monkeypatch):
    # explicit per-stage layers (a row's stages are no function of its pp alone): every stage priced
    model = model_preset("gpt3-175b")
    table = bench_table(2000)
    p = table["pp"]
    layers = np.where(np.arange(int(p.max()))[None, :] < p[:, None], (model.layers // p)[:, None], 0)
    explicit = StrategyTable(table.columns, {**table.stages, "layers": layers})
    _, took = _priced(model, explicit, "megatron-core", True, monkeypatch)
    assert not took


def test_the_path_is_not_taken_where_moe_backward_stretches_are_priced(monkeypatch):
    # megatron-core's dropless routing without the all-to-all overlap: each backward starts behind a host wait, priced
    # per stage from the schedule (costmodel._experts.backward_chunks), so the stages are priced row by row
    model = model_preset("mixtral-8x7b")
    _, took = _priced(model, bench_table(2000, experts=model.experts), "megatron-core", True, monkeypatch)
    assert not took
