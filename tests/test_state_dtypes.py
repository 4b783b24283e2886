"""Gradient and optimizer-state dtypes (costmodel._frameworks.with_state_dtypes): the bytes they give, the memory
and optimizer time they change, the scalar reference agreeing, the validation CSV's columns and evaluate's flags."""

import json

import numpy as np
import pytest

from costmodel import InputError, StrategyTable, cluster_preset, evaluate, model_preset
from costmodel._frameworks import framework_preset, with_state_dtypes
from costmodel._reference import evaluate_row
from costmodel._validate import read_runs
from tests.in_process import cli
from tests.test_reference import assert_rows_equal_reference, random_table

MCORE = framework_preset("megatron-core")


@pytest.mark.parametrize("main,moments,want", [
    (None, None, 12.0),  # fp32 master + two fp32 moments: Megatron's 12 bytes (Rajbhandari et al. 2020 Sec. 3.1)
    ("fp32", "bf16", 8.0),  # DeepSeek-V3's BF16 moments beside an FP32 master: 4 + 2 x 2
    ("remainder", None, 10.0),  # Apex's store_param_remainders: 2 + 2 x 4
    ("none", "bf16", 4.0),  # NeMo's optimizer dtype = the model's: no master, 2 x 2
    ("bf16", "fp8", 4.0),  # 2 + 2 x 1
])
def test_optimizer_bytes_per_parameter(main, moments, want):
    assert with_state_dtypes(MCORE, main_params=main, moments=moments).optim_state_bytes == want


def test_adam_step_bytes_follow_the_dtypes():
    # fp32 everywhere: read master, m, v, grad (16), write master, m, v (12) and the bf16 copy (2) = 30
    assert MCORE.adam_bytes_touched() == 30.0
    # bf16 moments, no master, bf16 gradients: read m, v (4) and the grad (2), write m, v (4) and the weight (2) = 12
    fw = with_state_dtypes(MCORE, grad="bf16", main_params="none", moments="bf16")
    assert fw.adam_bytes_touched() == 12.0
    assert fw.grad_reduce_bytes == (2.0,) * 3 and fw.grad_memory_bytes() == 2.0 and fw.name == "megatron-core"


def test_unknown_dtype_names_its_argument():
    with pytest.raises(InputError, match="--moments-dtype"):
        with_state_dtypes(MCORE, moments="fp4")
    assert with_state_dtypes(MCORE) is MCORE  # nothing named: the profile itself


def test_memory_and_optimizer_time_scale_by_hand():
    """Llama 3 8B, tp 2, dp 32, ZeRO-1: the optimizer state is bytes x params / 32, the gradients bytes x params,
    the Adam step bytes x params / 32 at the HBM rate: each part moves by its ratio of bytes, nothing else."""
    model, cl = model_preset("llama3-8b"), cluster_preset("h100x64")
    t = StrategyTable.from_columns(dp=32, tp=2, pp=1, global_batch=256, micro_batch=1, zero_stage=1,
                                   recompute="selective", sequence_parallel=True)
    base = evaluate(model, cl, t, framework=MCORE)
    low = evaluate(model, cl, t, framework=with_state_dtypes(MCORE, grad="bf16", main_params="fp32",
                                                             moments="bf16"))
    assert low["mem_optimizer_bytes"][0] / base["mem_optimizer_bytes"][0] == pytest.approx(8 / 12, rel=1e-12)
    assert low["mem_grads_bytes"][0] / base["mem_grads_bytes"][0] == pytest.approx(2 / 4, rel=1e-12)
    assert low["mem_weights_bytes"][0] == base["mem_weights_bytes"][0]
    # Adam: 2 x 8 + 2 + 2 = 20 bytes against 30
    assert low["optimizer_s"][0] / base["optimizer_s"][0] == pytest.approx(20 / 30, rel=1e-12)
    assert low["mem_activations_bytes"][0] == base["mem_activations_bytes"][0]
    # the gradients reduced in bf16: half the reduce-scatter's bytes, so the exchange is no slower
    assert low["dp_comm_s"][0] <= base["dp_comm_s"][0]


@pytest.mark.parametrize("name,cluster", [("llama3-8b", "h100x64"), ("gpt3-175b", "h100x1024")])
def test_vectorised_equals_reference_under_other_dtypes(name, cluster):
    model, cl = model_preset(name), cluster_preset(cluster)
    fw = with_state_dtypes(MCORE, grad="bf16", main_params="remainder", moments="bf16")
    table = random_table(model, np.random.default_rng(5), 300, False)
    vec = evaluate(model, cl, table, framework=fw)
    assert_rows_equal_reference(model, cl, table, vec, fw)
    i = int(np.flatnonzero(vec["feasible"])[0])  # and the dtypes reach the reference (not the profile's own)
    assert evaluate_row(model, cl, table.row(i), framework=fw)["mem_optimizer_bytes"] < evaluate_row(
        model, cl, table.row(i), framework=MCORE)["mem_optimizer_bytes"]


CSV_HEAD = ("name,gpu,num_gpus,gpus_per_node,model,seq_len,tp,pp,dp,cp,vpp,global_batch,micro_batch,recompute,"
            "sequence_parallel,zero_stage,precision,measured_iteration_time_s,framework,grad_dtype,main_params_dtype,"
            "moments_dtype\n")
ROW = "h100,64,8,llama3-8b,8192,2,1,32,1,1,256,1,selective,true,1,bf16,1.0,megatron-core"


def test_validation_rows_carry_their_dtypes(tmp_path):
    f = tmp_path / "runs.csv"
    f.write_text(CSV_HEAD + f"a,{ROW},bf16,none,bf16\nb,{ROW},,,\n")
    a, b = read_runs(f)
    assert a.profile().optim_state_bytes == 4.0 and a.profile().grad_memory_bytes() == 2.0
    assert b.profile() is MCORE


def test_a_bad_dtype_cell_names_row_and_column(tmp_path):
    f = tmp_path / "runs.csv"
    f.write_text(CSV_HEAD + f"a,{ROW},,,fp4\n")
    with pytest.raises(InputError, match="moments_dtype") as e:
        read_runs(f)
    assert "fp4" in str(e.value) and "line 2" in str(e.value)


def _cli(*args):
    return cli("evaluate", "--model", "llama3-8b", "--cluster", "h100x64", "--tp", "2", "--dp", "32",
               "--zero-stage", "1", *args)


def test_evaluate_flags_price_and_report_the_dtypes():
    base, low = (json.loads(_cli("--json", *x).stdout) for x in ((), ("--moments-dtype", "bf16")))
    assert low["state_dtypes"] == {"moments": "bf16"} and "state_dtypes" not in base
    assert low["metrics"]["mem_optimizer_bytes"] / base["metrics"]["mem_optimizer_bytes"] == pytest.approx(8 / 12)


@pytest.mark.parametrize("args,flag", [(("--grad-dtype", "fp16"), "--grad-dtype"),
                                       (("--moments-dtype", "bf16", "--framework", "megatron-core,fsdp2"),
                                        "--moments-dtype")])
def test_evaluate_refuses_a_bad_dtype_in_one_line(args, flag):
    r = _cli(*args)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and flag in r.stderr


def test_evaluate_applies_the_dtypes_to_every_framework_of_a_table():
    """A table carrying two frameworks: each row's optimizer state is 8/12 of its own profile's with bf16 moments
    (4 + 2 x 2 bytes against 4 + 2 x 4), its weights unchanged."""
    model, cl = model_preset("llama3-8b"), cluster_preset("h100x64")
    t = StrategyTable.from_columns(dp=[32, 32, 16, 16], tp=[2, 2, 4, 4], pp=1, global_batch=256, micro_batch=1,
                                   zero_stage=1, recompute="selective", sequence_parallel=True,
                                   framework=["megatron-core", "fsdp2", "megatron-core", "fsdp2"])
    base, low = evaluate(model, cl, t), evaluate(model, cl, t, state_dtypes={"moments": "bf16"})
    assert np.allclose(low["mem_optimizer_bytes"] / base["mem_optimizer_bytes"], 8 / 12, rtol=1e-12)
    assert np.array_equal(low["mem_weights_bytes"], base["mem_weights_bytes"])
    with pytest.raises(InputError, match="--grad-dtype"):
        evaluate(model, cl, t, state_dtypes={"grad": "fp8"})


def test_rank_prices_its_space_with_the_dtypes():
    def rank(*extra):
        return cli("rank", "--model", "llama3-8b", "--cluster", "h100x64", "--top", "1", "--pp", "1", "--tp", "2",
                   *extra)
    base, low = rank(), rank("--moments-dtype", "bf16", "--grad-dtype", "bf16")
    assert base.returncode == low.returncode == 0, low.stderr
    assert "grad bf16, moments bf16" in low.stdout.splitlines()[0] and "moments" not in base.stdout.splitlines()[0]
    bad = rank("--moments-dtype", "fp4")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--moments-dtype" in bad.stderr


def test_goodput_counts_an_moe_plans_expert_optimizer_state_in_the_dtypes_it_was_priced_with():
    """Mixtral 8x7B, ep 8, ZeRO-1: with bf16 moments the experts' optimizer state is 8/12 of fp32's (4 + 2 x 2
    against 4 + 2 x 4 bytes a parameter), and so is the rest of the GPU's (the dense part); goodput's checkpoint
    sees both at the dtypes the plan was priced with."""
    from costmodel import plan_goodput
    from costmodel._goodput import expert_state_per_gpu

    model, cl = model_preset("mixtral-8x7b"), cluster_preset("h100x64")
    t = StrategyTable.from_columns(dp=16, tp=4, pp=1, ep=8, global_batch=256, micro_batch=1, zero_stage=1,
                                   recompute="full", sequence_parallel=True)
    base, low = evaluate(model, cl, t), evaluate(model, cl, t, state_dtypes={"moments": "bf16"})
    e_base, e_low = expert_state_per_gpu(model, t)[1], expert_state_per_gpu(model, t, 8.0)[1]
    assert e_low[0] / e_base[0] == pytest.approx(8 / 12, rel=1e-12)
    dense_base = base["mem_optimizer_bytes"][0] - e_base[0]
    dense_low = low["mem_optimizer_bytes"][0] - e_low[0]
    assert dense_base > 0 and dense_low / dense_base == pytest.approx(8 / 12, rel=1e-9)
    g_base = plan_goodput(base, t, cl, model=model)["checkpoint_bytes"][0]
    g_low = plan_goodput(low, t, cl, model=model, optim_bytes=8.0)["checkpoint_bytes"][0]
    assert g_low < g_base
