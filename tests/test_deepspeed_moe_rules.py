"""DeepSpeed's MoE under the deepspeed profiles: expert-parallel groups are cut from the data-parallel ranks (ep
divides dp: deepspeed/utils/groups.py), and an MoE model has no ZeRO-3 (DeepSpeed's engine asserts it). Both
evaluators refuse the rest as framework_unsupported; Megatron-Core's profile, whose experts fold into tp x cp x dp,
runs them."""

import numpy as np
import pytest

from costmodel import REASONS, StrategyTable, cluster_preset, evaluate, model_preset
from costmodel._reference import evaluate_row

MIXTRAL = model_preset("mixtral-8x7b")
CLUSTER = cluster_preset("h100x64")


def _row(**c):
    cols = {"dp": 8, "tp": 8, "pp": 1, "ep": 8, "micro_batch": 1, "global_batch": 256, "zero_stage": 1,
            "recompute": "selective", "sequence_parallel": True, **c}
    return StrategyTable.from_columns(**cols)


@pytest.mark.parametrize("c", [dict(dp=4, tp=8, pp=2, ep=8), dict(zero_stage=3)], ids=["ep-past-dp", "zero3"])
@pytest.mark.parametrize("framework", ["deepspeed", "deepspeed-flash2"])
def test_refused_by_both_evaluators(c, framework):
    table = _row(**c)
    out = evaluate(MIXTRAL, CLUSTER, table, framework=framework)
    assert REASONS[int(out["reason"][0])] == "framework_unsupported"
    assert not np.isfinite(evaluate_row(MIXTRAL, CLUSTER, table.row(0), framework=framework)["step_time_s"])
    # Megatron-Core folds the 8 experts into tp x dp = 32 ranks and shards the weights at ZeRO-3: it prices both
    assert REASONS[int(evaluate(MIXTRAL, CLUSTER, table, framework="megatron-core")["reason"][0])] in (
        "ok", "out_of_memory")


def test_the_same_plan_within_the_rules_runs_alike_in_both():
    table = _row(dp=8, tp=4, pp=2, ep=8)  # ep 8 = dp 8; ZeRO-1
    vec = evaluate(MIXTRAL, CLUSTER, table, framework="deepspeed")
    ref = evaluate_row(MIXTRAL, CLUSTER, table.row(0), framework="deepspeed")
    assert REASONS[int(vec["reason"][0])] in ("ok", "out_of_memory")
    for k in ("step_time_s", "ep_comm_s", "mem_total_bytes"):
        assert vec[k][0] == pytest.approx(ref[k], rel=1e-9), k


def test_a_dense_model_is_not_held_to_them():
    table = _row(ep=1, zero_stage=3)
    out = evaluate(model_preset("llama3-8b"), CLUSTER, table, framework="deepspeed")
    assert REASONS[int(out["reason"][0])] in ("ok", "out_of_memory")
