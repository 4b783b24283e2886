"""Megatron-Core's selective recompute modules (the strategy column recompute_modules): what each frees and runs again,
pinned to hand counts; the scalar reference agrees row by row; profiles without them refuse them."""

import dataclasses

import numpy as np
import pytest

from costmodel import InputError, StrategyTable, cluster_preset, evaluate, model_preset
from costmodel._codes import MODULE_BIT, RECOMPUTE_MODULES, module_code, module_names
from costmodel._frameworks import framework_preset
from costmodel._layer_terms import framework_terms, shape_terms
from costmodel._memory import memory_screen
from costmodel._reference import evaluate_row
from costmodel._validate import balanced_stage_layers
from costmodel._workloads import Transformer
from tests.test_reference import assert_rows_equal_reference

# A small MoE model whose byte counts are worked by hand below: T = 2048 tokens a micro-batch (b 1, cp 1), h = q = hk
# = o = 1024 (8 heads of 128, MHA), RMSNorm, SwiGLU, 8 experts top-2 of ffn 512, no shared expert, every layer MoE.
TINY = Transformer(name="tiny-moe", layers=4, hidden=1024, ffn_hidden=4096, heads=8, kv_heads=8, seq_len=2048,
                   vocab=32000, activation="swiglu", norm="rmsnorm", experts=8, experts_per_token=2,
                   expert_ffn_hidden=512)
H100 = cluster_preset("h100x8")


def tiny_terms(modules, t=1, sp=False):
    """framework_terms of one configuration of TINY under megatron-core (bf16, b 1, cp 1, ep 8), modules named."""
    fw = framework_preset("megatron-core")
    prec = np.array([0])
    sh = shape_terms(TINY, H100, np.array([1.0]), np.array([t]), np.array([1]), np.array([sp]),
                     np.array([H100.gpu.peak_flops[0]]), moe=(np.array([8]), np.array([1]), fw, prec))
    return framework_terms(fw, TINY, sh, np.array([t]), np.array([sp]), prec,
                           None if modules is None else np.array([module_code(modules)]))


def test_names_and_bits_follow_megatron_core():
    # transformer_config.py's allowed set less the GatedDeltaNet / hyper-connection modules, each its own bit
    assert set(RECOMPUTE_MODULES) == {"core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe",
                                      "shared_experts"}
    assert module_code("layernorm moe_act") == module_code("moe_act,layernorm") == 2 + 4
    assert module_names(2 + 4 + 32) == "moe_act,layernorm,moe"
    assert module_code("layernorm,attention") is None and module_code(0) == 0


def test_moe_layer_kept_bytes_with_layernorm_and_moe_act_by_hand():
    # Megatron-Core's MoE layer under Transformer Engine (te_saved_bytes), per micro-batch, T = 2048, h = 1024:
    #   norm inputs 2 x 2 T h = 8,388,608; the attention LayerNormLinear's output 2 T h = 4,194,304; the pre-MLP
    #   TENorm's 16-bit output 2 T h = 4,194,304; RMSNorm statistics 2 x 4 T = 16,384; Q, K, V 2 T 3072 = 12,582,912;
    #   the kernel output 2 T 1024 = 4,194,304; softmax statistics 4 T 8 = 65,536; experts: copies = k T = 4096, each
    #   its dispatched input 2 h = 2048 bytes, FC1's output 2 x 2 x 512 = 2048 and FC2's input 2 x 512 = 1024
    #   (4096 x 5120 = 20,971,520) and the router's fp32 probabilities 4 x 8 x T = 65,536: 21,037,056.
    #   Total 54,673,408.
    none = tiny_terms(None)
    assert none["moe_act_L"][0] == 54_673_408
    # layernorm: the pre-MLP norm (a module of its own where the model has experts; the input norm is fused into
    # linear_qkv) frees its output 4,194,304 and its statistics 4 T = 8,192; moe_act frees FC2's input 2 x 4096 x 512
    # = 4,194,304: kept 54,673,408 - 4,202,496 - 4,194,304 = 46,276,608, and one layer's 8,396,800 rebuilt at a time
    named = tiny_terms("layernorm,moe_act")
    assert named["moe_sel_kept"][0] == 46_276_608
    assert named["moe_sel_work"][0] == 8_396_800
    # moe: the whole experts' part (21,037,056) freed, the block's input (the norm's output) kept
    assert tiny_terms("moe")["moe_sel_kept"][0] == 54_673_408 - 21_037_056
    assert tiny_terms("layernorm,moe")["moe_sel_kept"][0] == 54_673_408 - 21_037_056 - 4_202_496
    # 0: the profile's own policy (the attention core), as before the column; core_attn named is the same policy
    assert np.array_equal(tiny_terms(0)["moe_sel_kept"], none["moe_sel_kept"])
    assert tiny_terms("core_attn")["moe_sel_kept"][0] == none["moe_sel_kept"][0]
    assert tiny_terms("core_attn")["moe_sel_re"][0] == none["moe_sel_re"][0]


def test_moe_layer_recompute_seconds_of_layernorm_and_moe_act_by_hand():
    # Both are element-wise kernels at the HBM rate (3.35 TB/s x 0.765 on the H100 preset): the norm reads its input
    # and writes its output, 2 x 2 T h = 8,388,608 bytes; the SwiGLU activation reads FC1's output (2 x 512) and
    # writes FC2's input (512) per copy, 3 x 2 x 4096 x 512 = 12,582,912 bytes. 20,971,520 bytes in all.
    rate = 3.35e12 * 0.765
    assert tiny_terms("layernorm,moe_act")["moe_sel_re"][0] == pytest.approx(20_971_520 / rate, rel=1e-12)
    assert tiny_terms("layernorm")["moe_sel_re"][0] == pytest.approx(8_388_608 / rate, rel=1e-12)


def test_dense_layer_mlp_and_fused_norms_by_hand():
    # TINY's shapes as a dense layer (f = 4096) under Transformer Engine, T = 2048: norm inputs 8,388,608, the two
    # LayerNormLinear outputs 8,388,608, statistics 16,384, Q K V 12,582,912, kernel output 4,194,304, softmax
    # statistics 65,536, FC1's output and FC2's input 2 x 2 x 4096 T + 2 x 4096 T = 50,331,648: 83,968,000.
    dense = dataclasses.replace(TINY, experts=1, experts_per_token=1, expert_ffn_hidden=None)
    fw, prec = framework_preset("megatron-core"), np.array([0])
    sh = shape_terms(dense, H100, np.array([1.0]), np.array([1]), np.array([1]), np.array([False]),
                     np.array([H100.gpu.peak_flops[0]]))

    def terms(names):
        return framework_terms(fw, dense, sh, np.array([1]), np.array([False]), prec, np.array([module_code(names)]))

    assert terms("mlp")["act_L"][0] == 83_968_000
    # layernorm: both norms are fused into linear_qkv and linear_fc1 (gpt_layer_specs.py, no experts): nothing freed,
    # nothing run again
    assert terms("layernorm")["sel_kept"][0] == 83_968_000 and terms("layernorm")["sel_re"][0] == 0.0
    # mlp: FC1's output and FC2's input 50,331,648, the fused norm's output 4,194,304 and statistics 8,192 freed
    assert terms("mlp")["sel_kept"][0] == 83_968_000 - 54_534_144
    assert terms("mlp")["sel_work"][0] == 54_534_144


def tiny_rows(modules, recompute="selective"):
    return StrategyTable.from_columns(dp=8, tp=1, pp=1, ep=8, micro_batch=1, global_batch=16, recompute=recompute,
                                      recompute_modules=modules)


def test_moe_module_runs_the_block_and_its_all_to_alls_again():
    fw = "megatron-core"
    none = evaluate(TINY, H100, tiny_rows(0, "none"), framework=fw)
    moe = evaluate(TINY, H100, tiny_rows("moe"), framework=fw)
    core = evaluate(TINY, H100, tiny_rows("core_attn"), framework=fw)
    # the all-to-alls: forward, backward, and again in the recomputed forward (3 of 2); core_attn runs none again
    assert moe["ep_comm_s"][0] == pytest.approx(1.5 * none["ep_comm_s"][0], rel=1e-12)
    assert core["ep_comm_s"][0] == pytest.approx(none["ep_comm_s"][0], rel=1e-12)
    # the expert GEMMs again, at most the H100's dense bf16 peak: 4 layers x 2 micro-batches x copies 4096 x
    # 2 h fe x 3 matrices (FC1 gate and up, FC2) = 8 x 4096 x 2 x 1024 x 512 x 3 = 1.03e11 FLOPs / 989.4 TFLOP/s
    assert moe["recompute_s"][0] > 8 * 4096 * 2 * 1024 * 512 * 3 / 989.4e12
    # and more than the attention core's recompute at 2k tokens (fewer FLOPs: 4 s q T = 1.7e10 a layer)
    assert moe["recompute_s"][0] > core["recompute_s"][0] > 0
    # while the memory goes down by 4 layers x 21,037,056 bytes less the one layer rebuilt (1 micro-batch in flight)
    assert none["mem_activations_bytes"][0] - moe["mem_activations_bytes"][0] == pytest.approx(3 * 21_037_056)


def test_profiles_without_modules_refuse_them():
    for fw in ("fsdp2", "deepspeed", "generic", "internevo"):
        with pytest.raises(InputError) as err:
            evaluate(TINY, H100, tiny_rows("layernorm"), framework=fw)
        assert err.value.argument == "recompute_modules" and fw in err.value.expected
        with pytest.raises(InputError):
            memory_screen(TINY, H100, tiny_rows("layernorm"), framework=fw)
    with pytest.raises(InputError, match="mla_up_proj"):  # transformer_config.py: only with MLA
        evaluate(TINY, H100, tiny_rows("mla_up_proj"), framework="megatron-core")
    with pytest.raises(InputError, match="recompute_modules"):
        tiny_rows("layernorm,moe_activation")
    # 0 (or no column) under any profile: nothing named, nothing refused
    # (the tiny row fits; under FSDP, which shards dp for the experts to fold into: torchtitan's ep needs it)
    rows = StrategyTable.from_columns(**{**{k: tiny_rows(0)[k] for k in tiny_rows(0).columns}, "zero_stage": 3})
    assert evaluate(TINY, H100, rows, framework="fsdp2")["reason"][0] == 0


def test_scalar_reference_refuses_what_the_evaluator_refuses():
    row = tiny_rows("layernorm").row(0)
    for fw in ("fsdp2", "deepspeed", "generic", "internevo"):  # profiles without Megatron-Core's modules
        with pytest.raises(InputError) as err:
            evaluate_row(TINY, H100, row, framework=fw)
        assert err.value.argument == "recompute_modules" and fw in err.value.expected
    with pytest.raises(InputError, match="mla_up_proj"):  # TINY has no multi-head latent attention
        evaluate_row(TINY, H100, tiny_rows("mla_up_proj").row(0), framework="megatron-core")
    assert evaluate_row(TINY, H100, row, framework="megatron-core")["reason"] == 0  # (priced: it fits)


def test_modules_read_only_where_recompute_is_selective():
    fw = "megatron-core"
    for rc in ("none", "full"):
        a = evaluate(TINY, H100, tiny_rows(0, rc), framework=fw)
        b = evaluate(TINY, H100, tiny_rows("moe,layernorm", rc), framework=fw)
        for key in ("step_time_s", "mem_total_bytes", "recompute_s"):
            assert a[key][0] == b[key][0]


def test_memory_screen_equals_evaluate_with_modules():
    rows = StrategyTable.from_columns(dp=8, tp=1, pp=1, ep=8, micro_batch=1, global_batch=16, recompute="selective",
                                      recompute_modules=np.arange(128) & ~MODULE_BIT["mla_up_proj"])
    m = evaluate(TINY, H100, rows, framework="megatron-core")
    mem, reason = memory_screen(TINY, H100, rows, framework="megatron-core")
    np.testing.assert_array_equal(reason, m["reason"])
    np.testing.assert_array_equal(mem, m["mem_total_bytes"])


# (model, cluster, framework, layouts (tp, pp, cp, ep, sp, micro_batch, vpp)): feasible-shaped rows, so that the
# comparison reaches the stage times and memory, every module combination the model allows
AGREE = [
    ("qwen3-30b-a3b", "h100x64", "megatron-core-deepep",
     [(1, 1, 1, 8, False, 1, 1), (2, 2, 1, 8, True, 1, 2), (4, 4, 1, 4, True, 2, 1), (1, 2, 2, 8, False, 1, 1)]),
    ("mixtral-8x7b", "h100x64", "megatron-core-a2a-overlap", [(2, 1, 1, 8, True, 1, 1), (1, 1, 1, 4, False, 2, 1)]),
    ("mixtral-8x7b", "h100x64", "megatron-core-deepep", [(1, 4, 1, 8, False, 1, 2)]),
    ("deepseek-v3", "h100x1024", "megatron-core", [(2, 8, 1, 32, True, 1, 1), (1, 16, 1, 64, False, 1, 1)]),
    ("llama3-8b", "h100x64", "megatron-bridge", [(2, 2, 1, 1, True, 1, 2), (1, 1, 2, 1, False, 2, 1)]),
]


@pytest.mark.parametrize("name,cluster,fw,layouts", AGREE)
def test_vectorised_equals_reference_with_modules(name, cluster, fw, layouts):
    model, cl = model_preset(name), cluster_preset(cluster)
    if model.seq_len > 4096 and not model.mla:  # (Mixtral's 32k tokens: rows that fit, as tests/test_moe_pricing.py)
        model = dataclasses.replace(model, seq_len=4096)
    codes = np.arange(128)
    if not model.mla:
        codes = np.unique(codes & ~MODULE_BIT["mla_up_proj"])
    rng = np.random.default_rng(7)
    rows = []
    for tp, pp, cp, ep, sp, mb, vpp in layouts:
        dp = cl.num_gpus // (tp * pp * cp)
        pick = rng.choice(codes, 24, replace=False)
        rows.append(dict(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, sequence_parallel=sp, micro_batch=mb, vpp=vpp,
                         schedule="interleaved" if vpp > 1 else "1f1b", global_batch=dp * mb * 8, zero_stage=1,
                         precision=rng.choice(["bf16", "fp8"], 24),
                         recompute=rng.choice(["selective"] * 3 + ["full"], 24),
                         recompute_modules=pick))
    layers = None
    if model.layers % max(r["pp"] for r in rows):
        layers = True
    tables = []
    for r in rows:
        n = len(r["recompute_modules"])
        cols = {k: (v if np.ndim(v) else np.full(n, v)) for k, v in r.items()}
        if layers and model.layers % r["pp"]:  # (deepseek-v3's 61 layers: stages as Megatron-Core's uneven split)
            cols["stage_layers"] = np.tile(balanced_stage_layers(model.layers, r["pp"]), (n, 1))
        tables.append(StrategyTable.from_columns(**cols))
    priced = 0
    for table in tables:
        vec = evaluate(model, cl, table, framework=fw)
        priced += int(np.sum(vec["reason"] == 0))  # (rows that fit: their stage times compared too)
        assert_rows_equal_reference(model, cl, table, vec, fw)
    assert priced >= 5


# ---- the command line ------------------------------------------------------------------------------------------------
ZOO_CP8 = ["--model", "qwen3-235b-a22b", "--cluster", "h100x256", "--framework", "megatron-core-deepep", "--tp", "4",
           "--pp", "8", "--dp", "1", "--cp", "8", "--ep", "8", "--vpp", "4", "--schedule", "interleaved",
           "--global-batch", "256", "--sequence-parallel", "--zero-stage", "1", "--seq-len", "131072",
           "--stage-layers", "11,12,12,12,12,12,12,11"]


def test_evaluate_flag_names_the_modules_and_moves_memory(capsys):
    import json

    from cli import main

    docs = {}
    for mods in ("layernorm,moe", None):
        argv = ["evaluate", *ZOO_CP8, "--recompute", "selective", "--json"]
        assert main(argv + (["--recompute-modules", mods] if mods else [])) == 0
        docs[mods] = json.loads(capsys.readouterr().out)
    named = docs["layernorm,moe"]
    assert named["strategy"]["recompute_modules"] == "layernorm,moe" and named["strategy"]["recompute"] == "selective"
    assert "recompute_modules" not in docs[None]["strategy"]
    # Qwen3-235B's published 128k recipe (layernorm moe) fits the 80 GB GPU; the attention-core policy does not
    # (at 16k tokens a rank the experts' part of a layer, copies 8 x 16,384 / 4 = 32,768 x (2 h + 6 x 1536) bytes
    # = 570 MB, freed in 94 / 8 layers x ~9 micro-batches in flight)
    assert named["metrics"]["mem_total_bytes"] < 80e9 < docs[None]["metrics"]["mem_total_bytes"]
    # --recompute-modules takes selective granularity: with no --recompute it is implied, with another refused
    assert main(["evaluate", *ZOO_CP8, "--recompute-modules", "layernorm,moe", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["strategy"]["recompute"] == "selective"
    assert main(["evaluate", *ZOO_CP8, "--recompute", "full", "--recompute-modules", "moe"]) == 2
    assert "--recompute" in capsys.readouterr().err
    assert main(["evaluate", "--framework", "fsdp2", "--model", "llama3-8b", "--cluster", "h100x64",
                 "--recompute-modules", "mlp"]) == 2
    assert "recompute_modules" in capsys.readouterr().err


def test_export_writes_and_reads_megatrons_recompute_modules(capsys):
    from cli import main
    from cli._export import from_megatron

    argv = ["export", "--framework", "megatron-core-deepep", "--model", "qwen3-30b-a3b", "--cluster", "h100x64",
            "--tp", "2", "--pp", "2", "--ep", "8", "--sequence-parallel", "--zero-stage", "1", "--global-batch", "256",
            "--recompute-modules", "layernorm,moe_act"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    # Megatron-LM core_v0.15.0 arguments.py: --recompute-modules nargs='*' under --recompute-granularity selective
    words = text.replace("\\\n", " ").split()
    i = words.index("--recompute-modules")
    assert words[i + 1:i + 3] == ["moe_act", "layernorm"] and words[i + 3].startswith("--")
    assert words[words.index("--recompute-granularity") + 1] == "selective"
    plan = from_megatron(text)
    assert plan["recompute_modules"] == "moe_act,layernorm" and plan["recompute"] == "selective"
    # torchtitan and DeepSpeed have no such modules: refused, never dropped
    assert main(["export", "--framework", "fsdp2", "--model", "llama3-8b", "--cluster", "h100x64",
                 "--recompute-modules", "mlp"]) == 2


def test_placements_and_concat_carry_the_column():
    model = dataclasses.replace(model_preset("qwen3-30b-a3b"), seq_len=4096)
    cl = cluster_preset("h100x64")
    t = StrategyTable.from_columns(dp=16, tp=2, pp=2, ep=8, sequence_parallel=True, global_batch=256, zero_stage=1,
                                   recompute="selective", recompute_modules=["layernorm,moe_act", "moe", "", "core_attn"])
    a = evaluate(model, cl, t, framework="megatron-core-deepep")
    b = evaluate(model, cl, t.as_placements(model.layers), framework="megatron-core-deepep")
    for key in ("step_time_s", "mem_total_bytes", "recompute_s", "hfu"):
        np.testing.assert_array_equal(a[key], b[key])
    # "" and core_attn: the profile's own policy (the attention core), priced alike; moe frees the most memory
    assert a["step_time_s"][2] == a["step_time_s"][3] and a["mem_total_bytes"][1] < a["mem_total_bytes"][0]
    plain = StrategyTable.from_columns(dp=16, tp=2, pp=2, ep=8, global_batch=256)
    names = StrategyTable.concat([t, plain]).readable()["recompute_modules"]
    assert list(names) == ["moe_act,layernorm", "moe", "", "core_attn", ""]


@pytest.mark.parametrize(("flag", "word"), [("--recompute-modules", ""), ("--recompute-modules", ","),
                                            ("--stage-layers", "")])
def test_an_empty_list_flag_is_refused_in_one_line(flag, word, capsys):
    """An empty --recompute-modules named no module (it read as no recompute at all) and an empty --stage-layers was
    ignored: both one line naming the flag, exit 2."""
    from cli import main

    assert main(["evaluate", "--model", "llama3-8b", "--cluster", "h100x8", "--global-batch", "64", flag, word]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"plansweep evaluate: error: {flag}: expected ")
