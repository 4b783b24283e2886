"""Framework profiles: each profile's distinguishing terms against a hand calculation or the
rule its sources state (costmodel._frameworks)."""

import dataclasses
import json
import math

import numpy as np
import pytest

from costmodel import (
    FRAMEWORKS,
    REASONS,
    InputError,
    StrategyTable,
    cluster_preset,
    evaluate,
    framework_preset,
    model_preset,
)
from costmodel._hardware import SUSTAINED_CLOCK
from costmodel._validate import read_runs

GPT3 = model_preset("gpt3-175b")  # 96 layers, hidden 12288, 96 heads, seq 2048
H100 = cluster_preset("h100x1024")


def _one(framework, **cols):
    cols = {"dp": 16, "tp": 8, "pp": 8, "micro_batch": 1, "global_batch": 1536, **cols}
    return evaluate(GPT3, H100, StrategyTable.from_columns(**cols), framework=framework)


def test_fused_attention_drops_exactly_the_scores_of_the_layers_in_flight():
    # pp 1, 1F1B: one micro-batch in flight, 96 layers each storing 5 a b s^2 / t bytes of
    # attention scores when the kernel is unfused (Korthikanti et al. 2022 Sec. 4.1).
    fused = dataclasses.replace(FRAMEWORKS["generic"], name="generic-fused", fused_attention=True)
    cols = dict(dp=128, tp=8, pp=1, recompute="none")
    a, b = _one("generic", **cols), _one(fused, **cols)
    scores = 96 * 5 * 96 * 1 * 2048**2 / 8  # layers x 5 bytes x heads x b x s^2 / t
    assert a["mem_activations_bytes"][0] - b["mem_activations_bytes"][0] == pytest.approx(scores, rel=1e-12)
    assert a["step_time_s"][0] == b["step_time_s"][0]  # time already priced the kernel as fused


def test_megatron_core_keeps_the_linear_inputs_of_fp8_layers_in_one_byte():
    # Transformer Engine saves the fp8 copy of each linear layer's input for the weight gradient;
    # torchao's float8 linear (fsdp2) saves the 16-bit input. GPT-3 175B, pp 1, 1F1B, b 1: one
    # micro-batch of 2048 tokens in flight over 96 layers. Per token and layer, one byte less
    # for the QKV and FC1 inputs (the LayerNormLinear outputs, h each; split by t under SP) and for
    # the FC2 input (4h, split by t); the projection's fp8 input is a copy kept beside the attention
    # kernel's 16-bit output, which the kernel saves anyway: one byte more (h / t).
    cols = dict(dp=128, tp=8, pp=1, recompute="none")
    h, t, T, L = 12288, 8, 2048, 96
    for sp, repl_div in ((False, 1), (True, t)):
        bf16 = _one("megatron-core", sequence_parallel=sp, precision="bf16", **cols)
        fp8 = _one("megatron-core", sequence_parallel=sp, precision="fp8", **cols)
        saved = L * T * (2 * h / repl_div + (4 * h - h) / t)
        assert bf16["mem_activations_bytes"][0] - fp8["mem_activations_bytes"][0] == pytest.approx(saved, rel=1e-12)
    a = _one("fsdp2", precision="bf16", **cols)["mem_activations_bytes"][0]
    b = _one("fsdp2", precision="fp8", **cols)["mem_activations_bytes"][0]
    assert a == b


def test_fsdp2_selective_is_torchtitans_per_op_policy():
    # torchtitan's op-level selective checkpointing keeps, per layer and token (bf16 bytes): the
    # block's input h, the outputs of the 1st, 3rd, 5th and 7th products (wq h, wv 1024 for 8
    # K/V heads of 128, w1 f, w2 h), the attention kernel's output h. Llama 3 8B, tp 1, pp 1, one
    # micro-batch of 8,192 tokens, 32 layers. Against full recompute (its input 2h kept per
    # layer, the whole layer while recomputing it), selective keeps 31 layers' worth and holds
    # the recomputed rest of one layer: (L - 1) x kept - L x 2 T h.
    llama = model_preset("llama3-8b")
    h, hk, f, T, L = 4096, 1024, 14336, 8192, 32
    kept = 2 * T * (h + h + hk + f + h + h)
    cols = dict(dp=64, tp=1, pp=1, micro_batch=1, global_batch=512, zero_stage=3)
    act = {rc: evaluate(llama, H100, StrategyTable.from_columns(recompute=rc, **cols),
                        framework="fsdp2")["mem_activations_bytes"][0] for rc in ("selective", "full")}
    assert act["selective"] - act["full"] == pytest.approx((L - 1) * kept - L * 2 * T * h, rel=1e-12)


def test_megatron_2021_never_overlaps_and_never_shards():
    base = dict(dp=16, tp=8, pp=8, zero_stage=0, precision="fp16")  # (fp16: gradients reduced in 2 bytes, as generic)
    m21 = _one("megatron-2021", overlap_dp=True, **base)
    no = _one("generic", overlap_dp=False, **base)
    yes = _one("generic", overlap_dp=True, **base)
    assert m21["dp_comm_s"][0] == no["dp_comm_s"][0] > yes["dp_comm_s"][0]
    z1 = _one("megatron-2021", zero_stage=1, dp=16, tp=8, pp=8)
    assert REASONS[z1["reason"][0]] == "zero_incompatible_pp"
    z1_pp1 = _one("megatron-2021", zero_stage=1, dp=128, tp=8, pp=1)
    assert REASONS[z1_pp1["reason"][0]] == "framework_unsupported"


def test_gradient_reduce_dtype_by_framework_and_precision():
    # Gradients on the wire in fp32 (4 bytes) add 2 bytes an element to every gradient pass, none to the 16-bit
    # weight gathers: an all-reduce (ZeRO 0) passes the gradients twice, ZeRO 1-2 reduce-scatter them once,
    # ZeRO-3 once per micro-batch (1536 / 128 = 12): the extra time is 2 : 1 : 12, the ring and the link alike.
    g4 = dataclasses.replace(FRAMEWORKS["generic"], name="generic-fp32-reduce", grad_reduce_bytes=(4.0,) * 3)
    cols = dict(dp=128, tp=8, pp=1, overlap_dp=False)
    extra = {z: _one(g4, zero_stage=z, **cols)["dp_comm_s"][0] - _one("generic", zero_stage=z, **cols)["dp_comm_s"][0]
             for z in (0, 1, 2, 3)}
    assert extra[1] > 0 and extra[1] == pytest.approx(extra[2], rel=1e-12)
    assert extra[0] == pytest.approx(2 * extra[1], rel=1e-12) and extra[3] == pytest.approx(12 * extra[1], rel=1e-12)
    # Megatron: bf16 (and fp8, run with --bf16) reduce in fp32, fp16 in fp16; torchtitan and Composer's DEFAULT
    # always in fp32; DeepSpeed, Megatron-Bridge's benchmarks and Composer's PURE in the 16-bit dtype
    want = {"megatron-2021": (4, 2, 4), "megatron-core": (4, 2, 4), "megatron-core-deepep": (4, 2, 4),
            "megatron-bridge": (2, 2, 2), "deepspeed": (2, 2, 2), "fsdp2": (4, 4, 4), "fsdp2-eager": (4, 4, 4),
            "llm-foundry": (4, 4, 4), "llm-foundry-triton": (4, 4, 4), "llm-foundry-triton-pure": (2, 2, 2),
            "generic": (2, 2, 2)}
    assert {k: FRAMEWORKS[k].grad_reduce_bytes for k in want} == want
    for prec, like in (("bf16", g4), ("fp16", "generic")):
        mc = _one("megatron-core", zero_stage=0, precision=prec, **cols)["dp_comm_s"][0]
        assert mc == pytest.approx(_one(like, zero_stage=0, precision=prec, **cols)["dp_comm_s"][0], rel=1e-12)


def test_weight_gathers_by_framework_deepspeed_bf16_optimizer_and_megatron_param_gather():
    # Sourced values: Megatron-Core (the README's --overlap-param-gather) and Megatron-Bridge wait for the weights'
    # all-gather in the next forward; Bridge's fp8 recipes gather fp8 weights; DeepSpeed's BF16_Optimizer (bf16)
    # all-reduces and then all-gathers.
    assert {k for k, f in FRAMEWORKS.items() if f.overlap_param_gather} == {
        "megatron-core", "megatron-bridge", "megatron-core-a2a-overlap", "megatron-core-deepep",
        "megatron-core-deepep-a2a-overlap"}
    assert {k: f.weight_gather_bytes for k, f in FRAMEWORKS.items() if f.weight_gather_bytes != (2.0,) * 3} == {
        "megatron-bridge": (2.0, 2.0, 1.0)}
    assert {k: f.all_reduce_then_gather for k, f in FRAMEWORKS.items() if any(f.all_reduce_then_gather)} == {
        "deepspeed": (True, False, False), "deepspeed-flash2": (True, False, False),
        "deepspeed-bigscience": (True, False, False), "internevo": (True, True, True)}
    # DeepSpeed, no overlap: bf16 at ZeRO 0 and 1 moves 2 x 2 + 2 bytes an element in an all-reduce (the generic
    # profile's ZeRO 0) and an all-gather (half the generic ZeRO 1's reduce-scatter and all-gather, the same bytes
    # and message each): 1.5x the bytes; ZeRO 2 and fp16 rows as generic's. (DeepSpeed's collectives counted as
    # generic's, one a pass: their count is tests/test_collectives_nccl.py's; ZeRO-2's reduce-scatter once a step,
    # as generic's: its one a micro-batch is tests/test_zero2_every_microbatch.py's.)
    ds = dataclasses.replace(FRAMEWORKS["deepspeed"], name="deepspeed-one-per-pass", dp_bucket_elems=(math.inf, 0.0),
                             weight_gather_in_step=False, zero2_scatter_every_microbatch=False)
    cols = dict(dp=128, tp=8, pp=1, overlap_dp=False)
    dp = lambda fw, **c: _one(fw, **cols, **c)["dp_comm_s"][0]  # noqa: E731
    for z in (0, 1):
        assert dp(ds, zero_stage=z) == pytest.approx(dp("generic", zero_stage=0) + dp("generic", zero_stage=1) / 2,
                                                     rel=1e-12)
        assert dp(ds, zero_stage=z) == pytest.approx(1.5 * dp("generic", zero_stage=z), rel=0.01)
    assert dp(ds, zero_stage=2) == pytest.approx(dp("generic", zero_stage=2), rel=1e-12)
    assert dp(ds, zero_stage=1, precision="fp16") == pytest.approx(dp("generic", zero_stage=1), rel=1e-12)
    # Megatron-Core, overlap on: the same exchange less exposed than with the gather behind the backward; ZeRO 0
    # (no distributed optimizer) and overlap off unchanged.
    behind = dataclasses.replace(FRAMEWORKS["megatron-core"], name="mc-gather-in-backward", overlap_param_gather=False)
    exposed = lambda fw, z, o: _one(fw, zero_stage=z, **{**cols, "overlap_dp": o})["dp_comm_s"][0]  # noqa: E731
    assert exposed("megatron-core", 1, True) < exposed(behind, 1, True)
    assert exposed("megatron-core", 0, True) == exposed(behind, 0, True)
    assert exposed("megatron-core", 1, False) == exposed(behind, 1, False)


def test_fsdp2_prices_zero3_with_a_pipeline_as_zero1():
    # torchtitan keeps the weights gathered from the first forward to the last backward and
    # reduce-scatters gradients once per step when pp > 1: ZeRO-1's bytes, in time and memory (against the same
    # profile let run ZeRO-1, which FSDP itself has not: zero_stage 1 is framework_unsupported under fsdp2)
    import dataclasses

    import costmodel._frameworks as fws

    fws.FRAMEWORKS["fsdp2-zero1"] = dataclasses.replace(fws.FRAMEWORKS["fsdp2"], name="fsdp2-zero1", zero1=True)
    try:
        sp = dict(sequence_parallel=True)  # (torchtitan's tensor parallelism always is)
        z3 = _one("fsdp2", zero_stage=3, **sp)
        z1 = _one("fsdp2-zero1", zero_stage=1, **sp)
        # ... while without a pipeline ZeRO-3 shards the weights over the 128 data-parallel ranks
        flat3 = _one("fsdp2", zero_stage=3, dp=128, pp=1, **sp)
        flat1 = _one("fsdp2-zero1", zero_stage=1, dp=128, pp=1, **sp)
    finally:
        del fws.FRAMEWORKS["fsdp2-zero1"]
    assert REASONS[z3["reason"][0]] in ("ok", "out_of_memory")
    for k in ("step_time_s", "dp_comm_s", "mem_weights_bytes", "mem_grads_bytes", "mem_optimizer_bytes",
              "mem_total_bytes"):
        assert z3[k][0] == z1[k][0], k
    assert flat3["mem_weights_bytes"][0] == pytest.approx(flat1["mem_weights_bytes"][0] / 128, rel=1e-12)
    assert REASONS[_one("generic", zero_stage=3)["reason"][0]] == "zero_incompatible_pp"
    assert REASONS[_one("fsdp2", zero_stage=1)["reason"][0]] == "framework_unsupported"


def test_fsdp2_always_overlaps():
    a = _one("fsdp2", overlap_dp=False, zero_stage=2)
    b = _one("fsdp2", overlap_dp=True, zero_stage=2)
    assert a["dp_comm_s"][0] == b["dp_comm_s"][0]


@pytest.mark.parametrize("cols", [dict(schedule="interleaved", vpp=2), dict(precision="fp8"),
                                  dict(schedule="zb-h1")])
def test_deepspeed_refuses_what_its_pipeline_engine_lacks(cols):
    assert REASONS[_one("deepspeed", **cols)["reason"][0]] == "framework_unsupported"
    assert REASONS[_one("generic", **cols)["reason"][0]] in ("ok", "out_of_memory")


def test_deepspeed_and_megatron_core_refuse_zero2_with_a_pipeline():
    for fw in ("deepspeed", "megatron-core"):
        assert REASONS[_one(fw, zero_stage=2)["reason"][0]] == "zero_incompatible_pp"
        assert REASONS[_one(fw, zero_stage=3, dp=128, pp=1)["reason"][0]] in ("ok", "out_of_memory")


def test_validate_assumes_deepspeeds_overlap_only_under_zero3(tmp_path):
    # DeepSpeed's overlap_comm defaults to stage == 3 (deepspeed/runtime/zero/config.py)
    head = ("name,gpu,num_gpus,gpus_per_node,layers,hidden,ffn_hidden,heads,kv_heads,seq_len,vocab,activation,"
            "tp,pp,dp,cp,vpp,global_batch,micro_batch,recompute,sequence_parallel,zero_stage,framework,"
            "measured_iteration_time_s\n")
    row = "r{z},a100,64,8,32,4096,16384,32,32,2048,50000,gelu,1,1,64,1,1,512,8,full,false,{z},deepspeed,1.0\n"
    f = tmp_path / "runs.csv"
    f.write_text(head + "".join(row.format(z=z) for z in (1, 3)))
    from costmodel._validate import _candidates

    z1, z3 = (_candidates(r) for r in read_runs(f))
    assert not z1["overlap_dp"].any() and z3["overlap_dp"].all()


def test_aliases_and_unknown_names():
    assert framework_preset("torchtitan") is FRAMEWORKS["fsdp2"]
    assert framework_preset("LLM-Foundry") is FRAMEWORKS["llm-foundry"]  # fsdp2 but for its loss, GQA read, FSDP1
    # (FSDP1's flat gradient too: pre_reduce_copy_bytes; no FSDP2 copy-in / copy-out beside its collectives; no
    # pipeline code, so no torch.distributed.pipelining waits: blocking_p2p, lockstep_interleaved; no torchtitan
    # model code, so not its SDPA-only context parallelism: cp_sdpa_only, nor its always sequence-parallel
    # tensor parallelism: tp_needs_sp)
    assert dataclasses.replace(FRAMEWORKS["llm-foundry"], name="fsdp2", what="", sources=(), xent_bytes=48.0,
                               kv_repeat_bytes=4.0, eager_elem_bytes=(0.0, 15.0, 0.0), sp_copy_bytes=4.0,
                               ring_attention_bytes=(20.0, 46.0, 84.0, 60.0), zero3_kept=(1.0, 1.0, 0.0),
                               fp8_tp_gather=True, pp_grad_sync_after_backward=True, pp_grad_accum_bytes=10.0,
                               pre_reduce_copy_bytes=0.0, xent_peak_bytes=12.0, ag_copy_out_bytes=4.0,
                               rs_copy_in_bytes=(6.0, 8.0), blocking_p2p=True, lockstep_interleaved=True,
                               cp_sdpa_only=True, tp_needs_sp=True) == \
        dataclasses.replace(FRAMEWORKS["fsdp2"], what="", sources=())
    assert framework_preset(None) is FRAMEWORKS["megatron-core"]  # the default profile (DEFAULT_FRAMEWORK)
    with pytest.raises(InputError, match="--framework"):
        framework_preset("jax")


@pytest.mark.parametrize("typed, profile", [
    ("Megatron-LM", "megatron-core"), ("megatron lm", "megatron-core"), ("NeMo", "megatron-core"),
    ("Megatron_Core", "megatron-core"), (" Megatron-DeepSpeed ", "deepspeed"), ("DeepSpeed ZeRO", "deepspeed"),
    ("PyTorch FSDP", "fsdp2"), ("llm_foundry", "llm-foundry"), ("Megatron-LM 2021", "megatron-2021"),
])
def test_names_as_users_write_them(typed, profile):
    # case, spaces and underscores do not matter; the product names mean the profiles of their current code
    assert framework_preset(typed).name == profile


@pytest.mark.parametrize("typed", ["megatron lm 2019", "fsdp-3", "deepspeed zero3 offload"])
def test_a_name_that_reads_as_no_profile_is_refused(typed):
    with pytest.raises(InputError, match="--framework"):
        framework_preset(typed)


def test_every_profile_cites_sources_and_offers_1f1b():
    for fw in FRAMEWORKS.values():
        assert fw.sources and all(fw.sources)
        assert "1f1b" in fw.schedules
        assert fw.max_zero_with_pp <= fw.max_zero


def test_validate_reads_the_framework_cell(tmp_path):
    head = ("name,gpu,num_gpus,gpus_per_node,layers,hidden,ffn_hidden,heads,kv_heads,seq_len,vocab,activation,"
            "tp,pp,dp,cp,vpp,global_batch,micro_batch,recompute,sequence_parallel,zero_stage,framework,"
            "measured_iteration_time_s\n")
    row = "r,h100,64,8,32,4096,16384,32,32,4096,50000,gelu,8,1,8,1,1,64,1,none,true,1,{},1.0\n"
    f = tmp_path / "runs.csv"
    f.write_text(head + row.format("torchtitan") + row.format(""))
    runs = read_runs(f, framework="megatron-core")
    assert [r.framework for r in runs] == ["fsdp2", "megatron-core"]
    f.write_text(head + row.format("jax"))
    with pytest.raises(InputError, match="line 2: framework"):
        read_runs(f)


def test_cli_framework_flag(tmp_path):
    from tests.in_process import cli

    run = ["evaluate", "--tp", "8", "--pp", "8", "--dp", "16", "--json"]
    out = cli(*run, "--framework", "mcore")
    assert out.returncode == 0 and json.loads(out.stdout)["framework"] == "megatron-core"
    bad = cli(*run, "--framework", "jax")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and "--framework" in bad.stderr and "'jax'" in bad.stderr
    z = cli(*run[:-1], "--zero-stage", "1", "--framework", "megatron-2021")
    assert z.returncode == 2 and "zero_stage" in z.stderr and "megatron-2021" in z.stderr


def test_no_framework_given_prices_as_megatron_core():
    # The contract users rely on: leaving out --framework (or evaluate's framework) is the megatron-core profile,
    # row for row, and generic stays a profile one names (its rows differ: scores stored, its own loss bytes).
    rng = np.random.default_rng(0)
    t = StrategyTable.from_columns(dp=rng.choice([8, 16], 50), tp=8, pp=rng.choice([4, 8], 50), global_batch=1536,
                                   micro_batch=rng.choice([1, 2], 50), zero_stage=rng.choice([0, 1], 50),
                                   overlap_dp=rng.random(50) < 0.5)
    a, b = evaluate(GPT3, H100, t), evaluate(GPT3, H100, t, framework="megatron-core")
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    g = evaluate(GPT3, H100, t, framework="generic")
    assert not np.array_equal(a["mem_activations_bytes"], g["mem_activations_bytes"])


def test_balanced_stage_layers_put_the_light_stages_at_both_ends():
    from costmodel._validate import balanced_stage_layers

    assert balanced_stage_layers(126, 16) == [7] + [8] * 14 + [7]  # Llama 3 405B (Llama 3 paper, Sec. 3.3.2)
    assert balanced_stage_layers(126, 8) == [15] + [16] * 6 + [15]
    assert balanced_stage_layers(70, 12) == [5] + [6] * 10 + [5]
    assert balanced_stage_layers(10, 4) == [2, 3, 3, 2]
    assert balanced_stage_layers(96, 8) == [12] * 8


def test_uneven_chunks_where_the_framework_splits_stages_at_any_layer():
    # 96 layers over 8 stages as 11, 12 x 6, 13 with two chunks a stage: Megatron-Core and
    # torchtitan split the odd stages into chunks one layer apart; Megatron-LM 2021 (and the
    # generic profile) need v to divide every stage.
    layers = [11] + [12] * 6 + [13]
    cols = dict(dp=16, tp=8, pp=8, stage_layers=[layers], micro_batch=1, global_batch=1536, recompute="full",
                sequence_parallel=True, zero_stage=0)  # (ZeRO-0: what both frameworks run; FSDP has no ZeRO-1)
    inter = StrategyTable.from_columns(schedule="interleaved", vpp=2, **cols)
    plain = StrategyTable.from_columns(schedule="1f1b", vpp=1, **cols)
    for fw in ("generic", "megatron-2021"):
        assert REASONS[evaluate(GPT3, H100, inter, framework=fw)["reason"][0]] == "schedule_invalid"
    # (fsdp2 without torch's interleaved grid, whose fill is a chunk's forward longer: tests/test_pipeline_lockstep.py)
    for fw in ("megatron-core", dataclasses.replace(FRAMEWORKS["fsdp2"], lockstep_interleaved=False)):
        a, b = evaluate(GPT3, H100, inter, framework=fw), evaluate(GPT3, H100, plain, framework=fw)
        assert a["feasible"][0] and b["feasible"][0]
        # Narayanan et al. 2021 Sec. 2.2.2: v chunks divide the fill by v (96 micro-batches, a
        # multiple of pp: the closed form prices both)
        assert a["bubble_s"][0] == pytest.approx(b["bubble_s"][0] / 2, rel=1e-12)
    # uniform stages: 12 layers a stage, v = 5 -> chunks 3, 3, 2, 2, 2
    five = StrategyTable.from_columns(dp=16, tp=8, pp=8, schedule="interleaved", vpp=5, global_batch=1536)
    assert REASONS[evaluate(GPT3, H100, five, framework="generic")["reason"][0]] == "schedule_invalid"
    assert REASONS[evaluate(GPT3, H100, five, framework="megatron-core")["reason"][0]] != "schedule_invalid"
    thirteen = StrategyTable.from_columns(dp=16, tp=8, pp=8, schedule="interleaved", vpp=13, global_batch=1536)
    assert REASONS[evaluate(GPT3, H100, thirteen, framework="megatron-core")["reason"][0]] == "schedule_invalid"


def test_a_sweep_and_a_search_run_under_the_framework_and_record_it(tmp_path):
    # The space holds only what the framework runs (DeepSpeed: 1F1B, ZeRO <= 1 with pp > 1), every
    # Parquet row names the framework, run.json records it, and a resume keeps it.
    from tests.sweep_helpers import cli, rows

    space = ["--model", "gpt3-175b", "--cluster", "h100x1024", "--space", "exact", "--cp", "1", "--pp", "1,2,8",
             "--micro-batch", "1,2", "--framework", "deepspeed", "--in-process", "--no-progress"]
    out = str(tmp_path / "sweep")
    cli("sweep", *space, "--out", out)
    got = rows(out)
    assert len(got) and set(got["framework"]) == {"deepspeed"}
    assert set(got["schedule"]) == {"1f1b"}
    assert not ((got["pp"] > 1) & (got["zero_stage"] > 1)).any()
    assert ((got["pp"] == 1) & (got["zero_stage"] == 3)).any()
    info = json.loads((tmp_path / "sweep" / "run.json").read_text())
    assert "deepspeed" in json.dumps(info)
    cli("resume", out, "--in-process", "--no-progress")
    assert set(rows(out)["framework"]) == {"deepspeed"}
    found = tmp_path / "search"
    cli("search", "mcmc", *space, "--budget", "200", "--out", str(found))
    assert set(rows(str(found))["framework"]) == {"deepspeed"} and set(rows(str(found))["schedule"]) == {"1f1b"}


def test_evaluate_says_what_vpp_the_framework_takes_with_uneven_stages(capsys):
    # Llama 3 405B's layout, pp 16 with 7 layers on the first and last stage (Llama 3 paper Sec.
    # 3.3.2: one layer fewer on each "so that the first model chunk on the first stage has only the
    # embedding, and the last model chunk on the last stage has only output projection and loss"):
    # fsdp2 splits a stage at any layer, so vpp 7 runs, vpp 8 runs with those two chunks (8 chunks
    # of one layer elsewhere), and vpp 9 would leave a middle stage's chunk empty; the generic
    # profile (named) needs vpp to divide every stage (7 and 8: only 1).
    from cli import main

    args = ["evaluate", "--model", "llama3-405b", "--cluster", "h100x16384", "--tp", "8", "--pp", "16",
            "--schedule", "interleaved", "--global-batch", "2048", "--zero-stage", "2", "--sequence-parallel",
            "--recompute", "full", "--stage-layers", ",".join(["7"] + ["8"] * 14 + ["7"]), "--json"]
    assert main([*args, "--framework", "fsdp2", "--vpp", "7"]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"]["step_time_s"] > 0
    assert main([*args, "--framework", "fsdp2", "--vpp", "8"]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"]["step_time_s"] > 0
    assert main([*args, "--framework", "fsdp2", "--vpp", "9"]) == 2
    assert ("vpp: expected vpp >= 2 and at most every stage's layers (one layer or more per chunk; the first and last "
            "stage one fewer, their embedding or loss chunk), with pp >= 2, for interleaved under framework fsdp2, "
            "got 9") in capsys.readouterr().err
    assert main([*args, "--framework", "generic", "--vpp", "7"]) == 2
    assert "vpp >= 2 dividing every stage's layers" in capsys.readouterr().err


def test_eager_torchtitan_moves_its_norms_rope_and_swiglu_bytes():
    # fsdp2-eager: torchtitan's model code without torch.compile (its norms.py RMSNorm, model.py
    # apply_rotary_emb and FeedForward at 9dec370): per layer forward, 32 more bytes than a fused
    # norm for each of two norms (64 per element of T h, split by t under SP), 20 per element of Q
    # and K for RoPE (compiled fsdp2 prices 15 for its complex RoPE, which inductor leaves to eager ATen: 5 more),
    # 4 more per element of the MLP intermediate for SiLU * w3. GPT-3 175B, tp 8
    # with SP, pp 1, no recompute: T = 2048 tokens a micro-batch, q = hk = h = 12288, f = 4h; 12
    # micro-batches of 96 layers; forward once and backward twice (ELEM_BWD_FACTOR) at the
    # H100's HBM rate (3.35 TB/s x 0.9 x SUSTAINED_CLOCK).
    assert framework_preset("fsdp2-eager").eager_elem_bytes == (64.0, 20.0, 4.0)
    assert framework_preset("torchtitan-eager") is FRAMEWORKS["fsdp2-eager"]
    cols = dict(dp=128, tp=8, pp=1, recompute="none", sequence_parallel="true")
    a, b = _one("fsdp2", **cols), _one("fsdp2-eager", **cols)
    h, T = 12288, 2048
    extra = T * (64 * h / 8 + (20 - 15) * 2 * h / 8 + 4 * 4 * h / 8)
    want = 12 * 96 * 3 * extra / (3.35e12 * 0.9 * SUSTAINED_CLOCK)
    assert b["compute_s"][0] - a["compute_s"][0] == pytest.approx(want, rel=1e-9)
    # every other profile moves none of these bytes (llm-foundry: its unpadding copies, the test below; the
    # compiled torchtitan profiles: RoPE, tests/test_torchtitan_compiled.py)
    assert all(not any(fw.eager_elem_bytes) for name, fw in FRAMEWORKS.items()
               if name not in ("fsdp2-eager", "llm-foundry", "fsdp2", "fsdp2-async-tp", "fsdp2-compiled-loss"))


def test_llm_foundry_flash_path_moves_its_unpadding_copies():
    # llm-foundry's flash_attn_fn (b2a43a147, 5e85bd62d) gathers Q, K and V out of the padded batch (2 + 2 bytes an
    # element) and scatters the output back into zeros (2 + 2 + 2); backward it gathers the output's gradient
    # (2 + 2) and scatters Q's, K's and V's into zeros (2 + 2 + 2 each): 10 + 10 bytes an element of q, 4 + 6 of K
    # and of V. GPT-3 175B is MHA (q = hk = h = 12288): 20 bytes an element of q + hk, forward and backward.
    # tp 8 with SP, pp 1, dp 128, no recompute: 12 micro-batches of 2048 tokens through 96 layers at the
    # H100's HBM rate (3.35 TB/s x 0.9 x SUSTAINED_CLOCK).
    cols = dict(dp=128, tp=8, pp=1, recompute="none", sequence_parallel="true")
    fused = dataclasses.replace(FRAMEWORKS["llm-foundry"], name="llm-foundry-no-unpad", eager_elem_bytes=(0.0,) * 3)
    a, b = _one("llm-foundry", **cols), _one(fused, **cols)
    h, T = 12288, 2048
    want = 12 * 96 * 20 * T * (h + h) / 8 / (3.35e12 * 0.9 * SUSTAINED_CLOCK)
    assert a["compute_s"][0] - b["compute_s"][0] == pytest.approx(want, rel=1e-9)
    # the Triton path (triton_flash_attn_fn) has no unpadding: only the attention kernel's pricing differs
    assert dataclasses.replace(FRAMEWORKS["llm-foundry-triton"], name="llm-foundry", what="", sources=(),
                               attention_kernel="flash2") == \
        dataclasses.replace(fused, name="llm-foundry", what="", sources=())


def test_llm_foundry_triton_prices_its_attention_by_the_standard_formula():
    # No published rate for Triton FlashAttention: the whole s x s square (4 b s s q / t FLOPs a layer forward) at
    # the H100's GEMM constant (MAMF 792.1 of 989.4 TFLOP/s x SUSTAINED_CLOCK) x the tile terms s / (s + 128) twice and
    # head dim 128 / (128 + 128); where llm-foundry (FlashAttention-2) prices the causal half at 3 / (1 / 276 +
    # 2.5 / 187) TFLOP/s x SUSTAINED_CLOCK (measured on an H100 at 2k). Attention runs once forward and twice backward:
    # GPT-3 175B, tp 8, pp 1, dp 128, no recompute, 12 micro-batches of 2048 tokens, 96 layers.
    cols = dict(dp=128, tp=8, pp=1, recompute="none")
    fused = dataclasses.replace(FRAMEWORKS["llm-foundry"], name="llm-foundry-no-unpad", eager_elem_bytes=(0.0,) * 3)
    triton, flash = _one("llm-foundry-triton", **cols), _one(fused, **cols)
    s, q, t, peak = 2048, 12288, 8, 989.4e12
    tiles = (s / (s + 128.0)) ** 2
    standard = 4 * s * s * q / t / (peak * 792.1 / 989.4 * SUSTAINED_CLOCK * tiles * 0.5)
    fa2 = 2 * s * s * q / t / (3 / (1 / 276e12 + 2.5 / 187e12) * SUSTAINED_CLOCK)
    assert triton["compute_s"][0] - flash["compute_s"][0] == pytest.approx(12 * 96 * 3 * (standard - fa2), rel=1e-9)


def test_llm_foundry_triton_on_the_a100_prices_the_causal_half_at_its_calibrated_rate():
    # flash_attn_triton.py skips the key blocks above the diagonal: the causal half (2 b s s q / t FLOPs a layer
    # forward) at 0.30 of the A100's 312 TFLOP/s (costmodel._hardware._ATTN_EFF, calibrated on LLM Foundry's A100 rows
    # outside the validation set), where the standard formula prices the whole square at the A100's GEMM constant
    # (MAMF 267.9 of 312 x SUSTAINED_CLOCK) x s / (s + 128) twice and 128 / (128 + 128). Once forward, twice backward;
    # GPT-3 175B, tp 8, pp 1, dp 128, 12 micro-batches of 2048 tokens, 96 layers.
    a100 = cluster_preset("dgx-a100-1024")
    cols = StrategyTable.from_columns(dp=128, tp=8, pp=1, micro_batch=1, global_batch=1536, recompute="none")
    std = dataclasses.replace(FRAMEWORKS["llm-foundry-triton"], name="triton-standard", attention_kernel="standard")
    triton, standard = (evaluate(GPT3, a100, cols, framework=fw) for fw in ("llm-foundry-triton", std))
    s, q, t, peak = 2048, 12288, 8, 312e12
    whole = 4 * s * s * q / t / (peak * 267.9 / 312 * SUSTAINED_CLOCK * (s / (s + 128.0)) ** 2 * 0.5)
    half = 2 * s * s * q / t / (peak * 0.30)
    assert standard["compute_s"][0] - triton["compute_s"][0] == pytest.approx(12 * 96 * 3 * (whole - half), rel=1e-9)


def test_deepspeed_bf16_optimizer_adds_each_micro_batchs_gradients_into_fp32():
    # DeepSpeed's BF16_Optimizer (bf16 with ZeRO 0, or ZeRO-1 with a pipeline) runs hp_grad.add_(lp.grad.to(
    # float32)) on every local parameter after every micro-batch's backward (bf16_optimizer.py _update_hp_grad,
    # pipe/engine.py _exec_backward_pass): 2 + 4 bytes for the cast, 8 + 4 for the add. GPT-3 175B,
    # tp 8, pp 1, dp 128: 12 micro-batches of 96 layers of 12 h^2 + 13 h parameters, 1/8 of them per
    # GPU, at the H100's HBM rate (3.35 TB/s x 0.9 x SUSTAINED_CLOCK). ZeRO-1 without a pipeline and ZeRO-2 (DeepSpeed's
    # ZeRO optimizer, bf16 accumulation by default: engine.py get_data_types) and fp16 rows do not pay it (ZeRO-1 with
    # pp > 1: tests/test_deepspeed_zero01.py).
    assert framework_preset("deepspeed").hp_grad_bytes == 18.0
    cols = dict(dp=128, tp=8, pp=1, recompute="none", sequence_parallel="true")
    z0, z1, z2 = (_one("deepspeed", zero_stage=z, **cols) for z in (0, 1, 2))
    fp16 = _one("deepspeed", zero_stage=0, precision="fp16", **cols)
    h = 12288
    want = 12 * 96 * 18 * (12 * h * h + 13 * h) / 8 / (3.35e12 * 0.9 * SUSTAINED_CLOCK)
    assert z0["compute_s"][0] - z2["compute_s"][0] == pytest.approx(want, rel=1e-9)
    assert z1["compute_s"][0] == z2["compute_s"][0] and fp16["compute_s"][0] == z2["compute_s"][0]
    assert all(fw.hp_grad_bytes == 0 for name, fw in FRAMEWORKS.items() if not name.startswith("deepspeed"))


@pytest.mark.parametrize("name, xent", [("megatron-core", 52), ("megatron-2021", 52), ("deepspeed", 60),
                                        ("fsdp2", 48), ("fsdp2-eager", 48), ("megatron-bridge", 10)])
def test_each_profiles_loss_moves_its_counted_bytes_a_logit(name, xent):
    # The last stage's head_elem moves xent bytes per logit (T V / t of a micro-batch), forward and
    # backward, at the HBM rate, where a fused kernel moves 14 (Framework.xent_bytes' sources).
    # GPT-3 175B, tp 8, pp 1, dp 128, b 1: 12 micro-batches of 2048 tokens over a vocabulary of
    # 51200 at the H100's 3.35 TB/s x 0.9 x SUSTAINED_CLOCK.
    assert framework_preset(name).xent_bytes == xent
    fused = dataclasses.replace(framework_preset(name), name=name + "-fused-loss", xent_bytes=14)
    cols = dict(dp=128, tp=8, pp=1, recompute="none")
    want = 12 * (xent - 14) * 2048 * 51200 / 8 / (3.35e12 * 0.9 * SUSTAINED_CLOCK)
    assert _one(name, **cols)["compute_s"][0] - _one(fused, **cols)["compute_s"][0] == pytest.approx(want, rel=1e-9)
    fsdp2, deepspeed = _one("fsdp2", **cols), _one(dataclasses.replace(FRAMEWORKS["fsdp2"], xent_bytes=60), **cols)
    assert deepspeed["compute_s"][0] - fsdp2["compute_s"][0] == pytest.approx(
        12 * (60 - 48) * 2048 * 51200 / 8 / (3.35e12 * 0.9 * SUSTAINED_CLOCK), rel=1e-9)
    assert all(FRAMEWORKS[n].xent_bytes == 14 for n in ("generic", "hai-llm", "llm-foundry"))


def test_torchtitans_gqa_copies_of_k_and_v_are_priced_forward_and_backward():
    # torchtitan's repeat_kv copies K and V (hk = 1024 columns each) to q = 4096 columns: 4 bytes an element of
    # q + hk forward, as many backward. Llama-3 8B, tp 1, pp 1, dp 64, b 1, no recompute: 24 micro-batches of
    # 8192 tokens through 32 layers, at the H100's 3.35 TB/s x 0.9 x SUSTAINED_CLOCK; GPT-3 (MHA: no copy) unchanged.
    model = model_preset("llama3-8b")
    table = StrategyTable.from_columns(dp=64, tp=1, pp=1, micro_batch=1, global_batch=1536, recompute="none")
    shared = dataclasses.replace(FRAMEWORKS["fsdp2"], name="fsdp2-shared-kv", kv_repeat_bytes=0.0)
    a, b = (evaluate(model, H100, table, framework=fw) for fw in ("fsdp2", shared))
    want = 24 * 32 * 2 * 4 * 8192 * (4096 + 1024) / (3.35e12 * 0.9 * SUSTAINED_CLOCK)
    assert FRAMEWORKS["fsdp2-eager"].kv_repeat_bytes == 4
    assert a["compute_s"][0] - b["compute_s"][0] == pytest.approx(want, rel=1e-9)
    cols = dict(dp=128, tp=8, pp=1, recompute="none")
    assert _one("fsdp2", **cols)["step_time_s"][0] == _one(shared, **cols)["step_time_s"][0]


@pytest.mark.parametrize(("layers", "schedule", "fw", "ok"), [
    ([2, 3, 3, 2], "interleaved", "megatron-core", True),   # E alone on rank 0's first chunk, L on rank 3's last
    ([3, 2, 3, 2], "interleaved", "megatron-core", False),  # a middle stage of 2 in 3 chunks: one chunk with nothing
    ([1, 4, 4, 1], "interleaved", "megatron-core", False),  # the first stage would leave two chunks empty
    ([2, 3, 3, 2], "interleaved", "fsdp2", True),
    ([2, 3, 3, 2], "interleaved", "generic", False),        # chunks of whole, equal layers: 3 does not divide 2
    ([1, 2, 2, 1], "zb-v", "fsdp2", False),                 # the V puts both ends on rank 0: not relaxed
], ids=["mcore-ends", "mcore-middle", "mcore-two-empty", "fsdp2-ends", "generic", "zb-v"])
def test_the_embedding_and_the_loss_may_have_a_chunk_of_their_own(layers, schedule, fw, ok):
    # Llama 3 paper Sec. 3.3.2: one layer fewer on the first and last stage so that the first
    # model chunk on the first stage has only the embedding and the last chunk on the last stage
    # only the output projection and loss. Both evaluators say the same.
    from costmodel._reference import evaluate_row

    model = dataclasses.replace(model_preset("llama3-8b"), layers=sum(layers))
    vpp = 2 if schedule == "zb-v" else 3
    table = StrategyTable.from_columns(dp=1, tp=8, pp=4, stage_layers=[layers], schedule=schedule, vpp=vpp,
                                       micro_batch=1, global_batch=16, recompute="full", sequence_parallel=True,
                                       zero_stage=0)
    cl = cluster_preset("h100x32")
    vec = evaluate(model, cl, table, framework=fw)
    ref = evaluate_row(model, cl, table.row(0), framework=fw)
    assert REASONS[vec["reason"][0]] == REASONS[ref["reason"]] == ("ok" if ok else "schedule_invalid")
    if ok:
        assert vec["step_time_s"][0] == pytest.approx(ref["step_time_s"], rel=1e-9)


def test_fsdp_profiles_refuse_zero1_in_one_line(capsys):
    """FSDP shards the optimizer state only with the gradients (ZeRO-2) or the weights (ZeRO-3): torchtitan's and
    Composer's profiles refuse ZeRO-1 (so rank never recommends a plan their export cannot write), DeepSpeed and
    Megatron-Core run it."""
    from cli import main

    for fw, ok in (("fsdp2", False), ("llm-foundry", False), ("llama3-fsdp", False), ("deepspeed", True),
                   ("megatron-core", True)):
        assert (REASONS[_one(fw, zero_stage=1, dp=128, pp=1)["reason"][0]] != "framework_unsupported") == ok, fw
    assert main(["evaluate", "--model", "llama3-8b", "--cluster", "h100x8", "--framework", "fsdp2", "--dp", "8",
                 "--zero-stage", "1", "--global-batch", "64"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "plansweep evaluate: error: zero_stage: expected 0, 2 or 3 under framework fsdp2 (its FSDP shards the "
        "optimizer state only with the gradients or the weights: no ZeRO-1), got 1"]


def test_torchtitan_tensor_parallelism_is_always_sequence_parallel(capsys):
    """torchtitan v0.2.2's apply_tp shards the sequence between blocks whenever tp > 1: under fsdp2 (and its
    variants) tp > 1 without sequence parallelism is framework_unsupported in both evaluators, tp 1 without it runs;
    LLM Foundry's and Meta's profiles, whose tensor parallelism is not torchtitan's, keep both."""
    from cli import main
    from costmodel._reference import evaluate_row

    table = StrategyTable.from_columns(dp=[16, 16, 128], tp=[8, 8, 1], pp=[8, 8, 1], micro_batch=1, global_batch=1536,
                                       zero_stage=0, sequence_parallel=[False, True, False], recompute="full")
    for fw, ok in (("fsdp2", [False, True, True]), ("fsdp2-async-tp", [False, True, True]),
                   ("llm-foundry", [True, True, True]), ("llama3-fsdp", [True, True, True])):
        vec = evaluate(GPT3, H100, table, framework=fw)
        got = [REASONS[r] != "framework_unsupported" for r in vec["reason"]]
        assert got == ok, fw
        assert [REASONS[evaluate_row(GPT3, H100, table.row(i), framework=fw)["reason"]] != "framework_unsupported"
                for i in range(3)] == ok, fw
    assert main(["evaluate", "--model", "llama3-8b", "--cluster", "h100x8", "--framework", "fsdp2", "--tp", "2",
                 "--dp", "4", "--zero-stage", "2", "--global-batch", "64"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "plansweep evaluate: error: sequence_parallel: expected true with tp=2 under framework fsdp2 (its tensor "
        "parallelism always shards the sequence between blocks), got False"]


def test_torchtitan_folds_the_experts_into_sharded_ranks_only(capsys):
    """torchtitan v0.2.2 (parallel_dims.py) folds ep x etp into dp_shard x cp x tp, and dp_shard is 1 under DDP
    (ZeRO 0): Mixtral's ep 8 on 8 GPUs runs under FSDP (ZeRO 3) or on tp 8, not on 8 DDP replicas of tp 1; both
    evaluators, and evaluate's one line names ep."""
    from cli import main
    from costmodel._reference import evaluate_row

    moe, cl = model_preset("mixtral-8x7b"), cluster_preset("h100x8")
    table = StrategyTable.from_columns(dp=[8, 8, 1], tp=[1, 1, 8], pp=1, ep=8, micro_batch=1, global_batch=64,
                                       zero_stage=[0, 3, 0], sequence_parallel=[False, False, True], recompute="full")
    ok = [False, True, True]
    vec = evaluate(moe, cl, table, framework="fsdp2")
    assert [REASONS[r] != "framework_unsupported" for r in vec["reason"]] == ok
    assert [REASONS[evaluate_row(moe, cl, table.row(i), framework="fsdp2")["reason"]] != "framework_unsupported"
            for i in range(3)] == ok
    assert REASONS[evaluate(moe, cl, table, framework="megatron-core")["reason"][0]] != "framework_unsupported"
    assert main(["evaluate", "--model", "mixtral-8x7b", "--cluster", "h100x8", "--framework", "fsdp2", "--dp", "8",
                 "--ep", "8", "--zero-stage", "0", "--global-batch", "64"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "plansweep evaluate: error: ep: expected ep x etp dividing tp x cp = 1 under framework fsdp2 at ZeRO 0 (its "
        "experts fold into FSDP-sharded, CP and TP ranks, not DDP replicas; ZeRO 2 or 3 shards dp), got 8"]
