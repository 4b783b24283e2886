"""A recompute given per stage on uniform stages (stage_recompute without stage_layers: a strategy file, rank's
--stage-recompute) is priced per stage, as the same plan with its L / pp layers written out per stage and as the
scalar reference prices it; the row's own recompute column then says nothing."""

import numpy as np
import pytest

from costmodel import StrategyTable, cluster_preset, evaluate, model_preset
from costmodel._reference import evaluate_row

MODEL, CLUSTER = model_preset("llama3-8b"), cluster_preset("h100x64")
KEYS = ("step_time_s", "compute_s", "recompute_s", "tp_comm_s", "bubble_s", "hfu", "mem_total_bytes",
        "mem_activations_bytes")


def _table(row_recompute, stage_recompute, layers=None, **c):
    cols = dict(dp=2, tp=8, pp=4, micro_batch=1, global_batch=1536, recompute=row_recompute, **c)
    return StrategyTable.from_columns(stage_recompute=[stage_recompute],
                                      stage_layers=None if layers is None else [layers], **cols)


@pytest.mark.parametrize("stages", [["full", "none", "none", "none"], ["selective", "full", "none", "full"]])
@pytest.mark.parametrize("pipeline", ["closed_form", "simulate"])
def test_uniform_stages_with_a_recompute_each_price_as_written_out(stages, pipeline):
    written = evaluate(MODEL, CLUSTER, _table("none", stages, [8, 8, 8, 8]), pipeline=pipeline)
    for row_recompute in ("none", "full"):
        got = evaluate(MODEL, CLUSTER, _table(row_recompute, stages), pipeline=pipeline)
        for k in KEYS:
            assert got[k][0] == pytest.approx(written[k][0], rel=1e-12), (row_recompute, k)
    if pipeline == "closed_form":
        ref = evaluate_row(MODEL, CLUSTER, _table("full", stages).row(0))
        for k in KEYS:
            assert got[k][0] == pytest.approx(ref[k], rel=1e-9), k


def test_the_first_stage_alone_recomputing_costs_its_recompute_only():
    """Stage 0 of 4 recomputing everything, the rest nothing: the iteration's recompute is stage 0's (it is the
    bottleneck), between all-none and all-full."""
    one = evaluate(MODEL, CLUSTER, _table("none", ["full", "none", "none", "none"]))
    none = evaluate(MODEL, CLUSTER, _table("none", ["none"] * 4))
    full = evaluate(MODEL, CLUSTER, _table("full", ["full"] * 4))
    assert none["step_time_s"][0] < one["step_time_s"][0] < full["step_time_s"][0]
    assert one["recompute_s"][0] > 0 and none["recompute_s"][0] == 0
    assert np.isclose(one["recompute_s"][0], full["recompute_s"][0])  # (stage 0 recomputes as in all-full)
