"""--model from a HuggingFace config.json or a Calculon model file, no transformers needed."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from cli._specs import load_model
from costmodel import (
    InputError,
    StrategyTable,
    cluster_preset,
    evaluate,
    from_hf_config,
    model_from_mapping,
    model_preset,
)

DATA = Path(__file__).parent / "data" / "models"


def _same_metrics(a, b):
    cluster = cluster_preset("h100x64")
    table = StrategyTable.from_columns(dp=[8, 4, 2], tp=[8, 4, 4], pp=[1, 4, 8], micro_batch=1, global_batch=256,
                                       recompute=["none", "selective", "full"], sequence_parallel=True, zero_stage=1)
    ma, mb = evaluate(a, cluster, table), evaluate(b, cluster, table)
    for k in ma:
        np.testing.assert_array_equal(ma[k], mb[k], err_msg=k)


def test_llama3_8b_config_is_the_preset():
    model = load_model(str(DATA / "llama3-8b.config.json"))
    assert dataclasses.replace(model, name="llama3-8b") == model_preset("llama3-8b")
    _same_metrics(model, model_preset("llama3-8b"))


def test_qwen25_7b_config_equals_the_hand_written_file():
    hf = load_model(str(DATA / "qwen2.5-7b.config.json"))
    own = load_model(str(DATA / "qwen2.5-7b.plansweep.json"))
    assert dataclasses.replace(hf, name=own.name) == own
    assert (hf.layers, hf.hidden, hf.heads, hf.kv_heads, hf.ffn_hidden, hf.vocab) == (28, 3584, 28, 4, 18944, 152064)
    assert hf.activation == "swiglu" and not hf.tied_embeddings
    _same_metrics(hf, own)


def test_gpt2_config_counts_124m_parameters():
    # GPT-2 small: 124,439,808 parameters with its tied head (the published count, 124M).
    model = load_model(str(DATA / "gpt2.config.json"))
    assert (model.layers, model.hidden, model.heads, model.ffn_hidden, model.seq_len) == (12, 768, 12, 3072, 1024)
    assert model.num_params() == 124_439_808


def test_calculon_model_file_is_megatron_22b():
    model = load_model(str(DATA / "megatron-22B.calculon.json"))
    assert dataclasses.replace(model, name="megatron-22b") == model_preset("megatron-22b")


@pytest.mark.parametrize("change,needle", [
    ({"model_type": "bert"}, "--model model_type: expected one of llama"),
    ({"num_local_experts": 8}, "--model num_local_experts: expected a dense model"),
    ({"head_dim": 256}, "--model head_dim: expected hidden_size / num_attention_heads = 128"),
    ({"hidden_act": "relu"}, "--model hidden_act: expected silu"),
    ({"num_hidden_layers": 0}, "--model num_hidden_layers: expected an integer >= 1"),
])
def test_bad_hf_configs_name_the_key(change, needle):
    data = {**json.loads((DATA / "llama3-8b.config.json").read_text()), **change}
    with pytest.raises(InputError) as err:
        from_hf_config(data, "x")
    assert needle in str(err.value)


def test_unknown_plansweep_field_still_refused():
    with pytest.raises(InputError, match="--model: expected fields among"):
        model_from_mapping({"layers": 2, "hidden": 64, "colour": "blue"}, "x")


def test_calculon_system_file_by_hand():
    from costmodel._model_files import cluster_from_calculon

    data = json.loads((DATA / "a100_80g.calculon-system.json").read_text())
    c = cluster_from_calculon(data, 64, "a100_80g")
    g = c.gpu
    assert g.peak_flops == (312e12, 312e12, 0.0)  # no float8 entry: fp8 runs as bf16
    assert g.hbm_bytes == 80 * 2**30 and g.hbm_Bps == 2048e9
    assert (c.nodes, c.gpus_per_node) == (8, 8)
    assert (c.scaleup_Bps, c.scaleout_Bps) == (300e9, 25e9)
    assert (c.scaleup_latency_s, c.scaleout_latency_s) == (1e-5, 2e-5)
    # plansweep's own efficiency constants of the matching preset, not Calculon's tables
    from costmodel import gpu_preset

    ref = gpu_preset("a100")
    assert (g.gemm_eff_max, g.hbm_eff, g.link_eff) == (ref.gemm_eff_max, ref.hbm_eff, ref.link_eff)
    with pytest.raises(InputError, match="GPUs: expected a multiple of the file's 8 GPUs per node"):
        cluster_from_calculon(data, 12, "x")
    with pytest.raises(InputError, match="--cluster: expected a Calculon system file"):
        cluster_from_calculon({k: v for k, v in data.items() if k != "networks"}, 8, "x")


def test_calculon_system_on_the_command_line(capsys):
    from cli import main

    path = str(DATA / "a100_80g.calculon-system.json")
    assert main(["evaluate", "--model", "gpt3-175b", "--cluster", path + "@1024", "--tp", "8", "--pp", "8",
                 "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["strategy"]["dp"] == 16  # 1024 GPUs from the @1024
    assert main(["evaluate", "--cluster", path]) == 2
    err = capsys.readouterr().err.strip()
    assert "--cluster: expected a Calculon system file with its GPU count, FILE.json@GPUS" in err
    assert len(err.splitlines()) == 1
