"""FSDP2 under torch.distributed.pipelining (Framework.pp_grad_sync_after_backward): the step's gradient
reduce-scatter issued after the stage's last backward and waited, the weights' all-gather behind the next step's
first forward; against a hand calculation."""

import dataclasses

import pytest

from costmodel import FRAMEWORKS, StrategyTable, cluster_preset, evaluate, framework_preset, model_preset
from costmodel._data_parallel import last_exchange_parts
from costmodel._reference import evaluate_row

LLAMA70 = model_preset("llama3-70b")
FSDP2 = FRAMEWORKS["fsdp2"]
BEHIND = dataclasses.replace(FSDP2, name="fsdp2-behind-backward", pp_grad_sync_after_backward=False)


def test_the_reduce_scatter_waits_for_the_last_backward():
    # pp 8 is priced as ZeRO-1 (shard_with_pp_once): one exchange a step of dp_raw = 0.9 s, the weights all-gathered
    # in bf16 (2 bytes a parameter) and the gradients reduce-scattered in fp32 (4): the reduce-scatter's share is
    # 4 / 6, 0.6 s, exposed whole; the all-gather's 0.3 s behind the next step's first forward F_b: F_b = 0.5 s
    # covers it, F_b = 0.1 s leaves 0.2 s. Without the mechanism the exchange hides behind the last backward
    # B + W = 0.4 + 0.3 s: 0.2 s late, nothing fixed.
    kw = dict(zero=1, overlap=True, m=8, X_max=1.0, B_b=0.4, W_b=0.3, dp_raw=0.9, fw=FSDP2, prec=0, model=LLAMA70)
    for F_b, late in ((0.5, 0.0), (0.1, 0.2)):
        fixed, got = last_exchange_parts(**{**kw, "F_b": F_b}, pp=8)
        assert fixed == pytest.approx(0.6) and got == pytest.approx(late)
    fixed, got = last_exchange_parts(**{**kw, "fw": BEHIND, "F_b": 0.5}, pp=8)
    assert fixed == pytest.approx(0.0) and got == pytest.approx(0.2)
    fixed, got = last_exchange_parts(**{**kw, "overlap": False, "F_b": 0.5}, pp=8)  # no overlap: all of it
    assert fixed == pytest.approx(0.9) and got == pytest.approx(0.0)
    # ZeRO 0 is DDP: the last backward runs with its hooks on, so the exchange stays behind B + W (0.2 s late)
    fixed, got = last_exchange_parts(**{**kw, "zero": 0, "F_b": 0.5}, pp=8)
    assert fixed == pytest.approx(0.0) and got == pytest.approx(0.2)


def test_only_pipelined_fsdp2_rows_move():
    cl = cluster_preset("h100x1024")

    def one(fw, **c):
        cols = {"dp": 16, "tp": 8, "pp": 8, "micro_batch": 1, "global_batch": 256, "sequence_parallel": "true",
                "zero_stage": 3, "recompute": "full", "schedule": "1f1b", **c}
        return evaluate(LLAMA70, cl, StrategyTable.from_columns(**cols), framework=fw)

    no_overlap = dataclasses.replace(FSDP2, name="fsdp2-no-overlap", overlap_dp=(False,))
    a, b, c = one(FSDP2), one(no_overlap), one(BEHIND)
    # the reduce-scatter's 2 / 3 of the exchange exposed, at most all of it, more than behind the last backward
    assert 2 / 3 * b["dp_comm_s"][0] <= a["dp_comm_s"][0] < b["dp_comm_s"][0]
    assert a["dp_comm_s"][0] > c["dp_comm_s"][0]
    a1, c1 = one(FSDP2, pp=1, dp=128), one(BEHIND, pp=1, dp=128)  # no pipeline: FSDP's own hooks, unchanged
    assert a1["step_time_s"][0] == c1["step_time_s"][0]
    assert framework_preset("fsdp2-async-tp").pp_grad_sync_after_backward
    for name in ("llama3-fsdp", "llm-foundry", "megatron-core", "deepspeed"):
        assert not framework_preset(name).pp_grad_sync_after_backward, name
    d0, d0_behind = one(FSDP2, zero_stage=0), one(BEHIND, zero_stage=0)  # DDP under a pipeline: unchanged
    assert d0["dp_comm_s"][0] == d0_behind["dp_comm_s"][0]
    for fw in (FSDP2, BEHIND):  # the scalar reference prices it alike
        ref = evaluate_row(LLAMA70, cl, StrategyTable.from_columns(
            dp=16, tp=8, pp=8, micro_batch=1, global_batch=256, sequence_parallel="true", zero_stage=3,
            recompute="full", schedule="1f1b").row(0), framework=fw)
        vec = one(fw)
        for k in ("step_time_s", "dp_comm_s"):
            assert vec[k][0] == pytest.approx(ref[k], rel=1e-9), (fw.name, k)
