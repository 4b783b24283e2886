"""The deepspeed profiles' layout rules, from DeepSpeed's code. Its MoE: expert-parallel groups are cut from the
data-parallel ranks (ep divides dp: deepspeed/utils/groups.py), and an MoE model has no ZeRO-3 (DeepSpeed's engine
asserts it). Its pipeline: PipelineModule cuts the stages itself ('type:...' partitions). Both evaluators refuse the
rest as framework_unsupported; Megatron-Core's profile runs them."""

import numpy as np
import pytest

from costmodel import REASONS, StrategyTable, cluster_preset, evaluate, framework_preset, model_preset
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


# ---- pipeline cuts ---------------------------------------------------------------------------
@pytest.mark.parametrize("L, p, first, ends", [
    (70, 12, [6] * 10 + [5, 5], [5] + [6] * 10 + [5]),       # BLOOM's 70 over 12: 72 units of 6, less its embeddings
    (80, 6, [14, 14, 13, 13, 13, 13], [13, 14, 14, 14, 13, 12]),
    (48, 4, [12] * 4, [12, 13, 12, 11]),
])
def test_deepspeed_cuts_by_hand(L, p, first, ends):
    """'type:transformer': the first L mod p stages one layer more; 'type:transformer|embedding': the same over L + 2
    units (80 + 2 over 6: 14, 14, 14, 14, 13, 13), less the embedding on the first stage and the head on the last."""
    from costmodel._feasibility import type_partition

    j = np.arange(p)
    assert type_partition(framework_preset("deepspeed"), L, p, j).tolist() == first
    assert type_partition(framework_preset("deepspeed-bigscience"), L, p, j).tolist() == ends


@pytest.mark.parametrize("layers, profile", [([14, 14, 13, 13, 13, 13], "deepspeed"),
                                             ([13, 14, 14, 14, 13, 12], "deepspeed-bigscience"),
                                             ([13, 13, 13, 13, 14, 14], None), ([12, 14, 14, 14, 14, 12], None)])
def test_only_deepspeeds_cuts_run_under_its_profiles(layers, profile):
    """Llama 3 70B's 80 layers over 6 stages: each cut runs under the profile that makes it, is refused by both
    evaluators under the other, and Megatron-Core runs every one."""
    model = model_preset("llama3-70b")
    table = StrategyTable.from_columns(dp=1, tp=8, pp=6, micro_batch=1, global_batch=64, zero_stage=1,
                                       stage_layers=np.array([layers]))
    for fw in ("deepspeed", "deepspeed-bigscience"):
        vec = evaluate(model, CLUSTER, table, framework=fw)
        reason = REASONS[int(vec["reason"][0])]
        assert (reason in ("ok", "out_of_memory")) == (fw == profile), fw
        assert (reason == "framework_unsupported") == (fw != profile), fw
        ref = evaluate_row(model, CLUSTER, table.row(0), framework=fw)
        assert REASONS[int(ref["reason"])] == reason
        for k in ("step_time_s", "mem_total_bytes"):
            assert vec[k][0] == pytest.approx(ref[k], rel=1e-9) or not np.isfinite(ref[k]), k
    assert REASONS[int(evaluate(model, CLUSTER, table, framework="megatron-core")["reason"][0])] in (
        "ok", "out_of_memory")


# ---- on a mixed cluster, evaluate names the file's field ----------------------------------------
def _placement(tmp_path, stages, **extra):
    import json as _json

    path = tmp_path / "plan.json"
    path.write_text(_json.dumps({"global_batch": 1536, "microbatches": 192, "zero_stage": 1, "sequence_parallel": True,
                                 **extra, "stages": stages}))
    return str(path)


def test_a_mixed_cluster_names_the_cut_and_the_rule(tmp_path, capsys):
    from cli import main
    from tests.in_process import one_stderr_line

    even = ([{"pool": "a100", "dp": 4, "tp": 4, "layers": 12}] * 4
            + [{"pool": "h100", "dp": 2, "tp": 8, "layers": 12}] * 4)
    plan = _placement(tmp_path, even)
    base = ["evaluate", "--model", "gpt3-175b", "--cluster", "a100x64+h100x64", "--strategy", plan]
    # 96 layers over 8 stages: 12 each is Megatron-DeepSpeed's cut, not BigScience's (98 units: 13, 13, 12 x 6, less
    # the embedding and the head: 12, 13, 12, 12, 12, 12, 12, 11)
    assert main([*base, "--framework", "deepspeed"]) == 0
    capsys.readouterr()
    assert main([*base, "--framework", "deepspeed-bigscience"]) == 2
    one_stderr_line(capsys, "stages[].layers: expected [12, 13, 12, 12, 12, 12, 12, 11] under framework "
                            "deepspeed-bigscience")
    # Ulysses with tp 4 and 8 stages
    assert main(["evaluate", "--model", "gpt3-175b", "--cluster", "a100x64+h100x64", "--framework", "deepspeed",
                 "--strategy", _placement(tmp_path, [{**st, "dp": st["dp"] // 2} for st in even], cp=2)]) == 2
    one_stderr_line(capsys, "cp: expected a value framework deepspeed runs with stage tp=4, dp=2 and 8 stages")
