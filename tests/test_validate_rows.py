"""What read_runs makes of a row: a model preset or shape columns, mixture-of-experts columns, the row's own network,
its stage split and overlap, and one line naming the file, line, row and column for every bad cell."""

import csv
from pathlib import Path

import numpy as np
import pytest

from cli import main
from costmodel import model_preset
from costmodel._validate import _candidates, predict, read_runs, validate

PUBLISHED = Path(__file__).parent / "data" / "validation" / "published_runs.csv"

# A Qwen3-235B-A22B row as Megatron-Bridge's 25.11 table gives it (tokens/s/GPU and the layout), by preset name.
QWEN = {"name": "qwen", "source": "s", "framework": "megatron-core-a2a-overlap", "gpu": "h100", "num_gpus": "256",
        "gpus_per_node": "8", "model": "qwen3-235b-a22b", "seq_len": "4096", "tp": "2", "pp": "8", "dp": "16",
        "cp": "1", "vpp": "4", "ep": "32", "etp": "1", "stage_layers": "11 12 12 12 12 12 12 11",
        "global_batch": "2048", "micro_batch": "1", "recompute": "none", "sequence_parallel": "true",
        "zero_stage": "1", "precision": "fp8", "measured_tokens_per_s_per_gpu": "1575"}
# A dense row by its shapes: Llama 2 7B-like on 16 A100s, data parallel, with the row's own network.
DENSE = {"name": "dense", "source": "s", "framework": "megatron-core", "gpu": "a100", "num_gpus": "16",
         "gpus_per_node": "8", "layers": "32", "hidden": "4096", "ffn_hidden": "11008", "heads": "32",
         "kv_heads": "32", "seq_len": "2048", "vocab": "32000", "activation": "swiglu", "tp": "1", "pp": "1",
         "dp": "16", "cp": "1", "vpp": "", "global_batch": "128", "micro_batch": "2", "recompute": "none",
         "sequence_parallel": "false", "zero_stage": "1", "precision": "bf16", "measured_iteration_time_s": "5.0"}


def _write(tmp_path, rows, name="runs.csv") -> Path:
    cols = list(dict.fromkeys(k for r in rows for k in r))
    path = tmp_path / name
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)
    return path


def _refused(tmp_path, capsys, rows, needle, value=None):
    path = _write(tmp_path, rows)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert needle.format(path=path) in err, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    if value is not None:
        assert err.endswith(f"got {value!r}"), err


def test_a_preset_row_is_the_preset_at_the_rows_length_with_its_experts(tmp_path):
    (run,) = read_runs(_write(tmp_path, [QWEN]))
    preset = model_preset("qwen3-235b-a22b")
    assert run.model.seq_len == 4096 and run.model.name == "qwen"
    for f in ("layers", "hidden", "heads", "kv_heads", "head_dim", "experts", "experts_per_token", "expert_ffn_hidden"):
        assert getattr(run.model, f) == getattr(preset, f)
    assert run.model.experts == 128 and run.model.experts_per_token == 8 and run.model.head_dim == 128
    assert run.fixed["ep"] == 32 and run.fixed["etp"] == 1
    assert run.stage_layers == (11, 12, 12, 12, 12, 12, 12, 11)
    table = _candidates(run)
    assert set(table["ep"].tolist()) == {32}
    assert (table.stage_layers[:, :8] == [11, 12, 12, 12, 12, 12, 12, 11]).all()


def test_a_file_with_only_preset_rows_needs_no_shape_columns(tmp_path):
    (run,) = read_runs(_write(tmp_path, [QWEN]))  # QWEN has no layers, hidden, ... columns at all
    assert run.model.layers == 94


def test_moe_columns_without_a_preset_make_the_moe_model(tmp_path):
    row = {**DENSE, "name": "moe", "experts": "8", "experts_per_token": "2", "shared_experts": "1",
           "expert_ffn_hidden": "1408", "dense_layers": "1", "moe_layer_freq": "1", "ep": "8", "etp": "1"}
    (run,) = read_runs(_write(tmp_path, [row]))
    m = run.model
    assert (m.experts, m.experts_per_token, m.shared_experts, m.expert_ffn_hidden, m.dense_layers) == (8, 2, 1, 1408, 1)
    assert m.moe_layers == 31 and run.fixed["ep"] == 8
    # by hand: each MoE layer runs 2 routed + 1 shared experts of 3 x 4096 x 1408 weights instead of 3 x 4096 x 11008
    dense = read_runs(_write(tmp_path, [DENSE], "dense.csv"))[0].model
    per_expert = 3 * 4096 * 1408
    assert m.num_params() - dense.num_params() == pytest.approx(
        31 * (9 * per_expert - 3 * 4096 * 11008 + 4096 * 8), rel=1e-9)  # + the h x E router


# Mixtral 8x7B as a preset row: tp 1, ep 8 inside a node of 8 H100s, pp 4, every setting filled (one candidate).
MIXTRAL = {"name": "mixtral", "source": "s", "framework": "megatron-core", "gpu": "h100", "num_gpus": "32",
           "gpus_per_node": "8", "model": "mixtral-8x7b", "seq_len": "4096", "tp": "1", "pp": "4", "dp": "8",
           "cp": "1", "vpp": "1", "ep": "8", "etp": "1", "global_batch": "64", "micro_batch": "1", "recompute": "none",
           "sequence_parallel": "false", "zero_stage": "1", "precision": "bf16", "overlap_dp": "true",
           "measured_iteration_time_s": "5.0"}


def test_a_capacity_factor_cell_prices_the_busiest_ranks_copies(tmp_path):
    """capacity_factor 1.5: the busiest expert-parallel rank's all-to-alls carry 1.5 x the mean copies. By hand: each
    rank's T = 4096 tokens send k = 2 copies of h = 4096 bf16 values each, 1.5 x that on the busiest rank, 7/8 of them
    to the node's other GPUs over NVLink; dispatch and combine forward and again backward, 4 a layer and micro-batch,
    over 32 / 4 = 8 layers a stage and 64 / 8 = 8 micro-batches. The reference evaluator reads the same model."""
    from costmodel import evaluate
    from costmodel._reference import evaluate_row

    dropless = {**MIXTRAL, "name": "dropless", "capacity_factor": "1.5"}
    balanced, busiest = read_runs(_write(tmp_path, [MIXTRAL, dropless]))
    assert balanced.model.capacity_factor == 1.0 and busiest.model.capacity_factor == 1.5
    T, k, h = 4096, 2, 4096
    got = []
    for run, cf in ((balanced, 1.0), (busiest, 1.5)):
        cl, table = run.cluster, _candidates(run)
        assert len(table) == 1
        bw = cl.scaleup_Bps * cl.gpu.link_eff
        per_layer = 4 * (7 / 8 * 2 * cf * k * T * h / bw + cl.scaleup_latency_s)
        out = evaluate(run.model, cl, table, framework=run.profile())
        assert out["ep_comm_s"][0] == pytest.approx(8 * 8 * per_layer, rel=1e-12)
        ref = evaluate_row(run.model, cl, table.row(0), framework=run.profile())
        assert ref["ep_comm_s"] == pytest.approx(out["ep_comm_s"][0], rel=1e-9)
        got.append(predict(run)["predicted_iteration_time_s"])
    assert got[1] > got[0]  # the expert GEMMs and the rest priced at 1.5 x too


@pytest.mark.parametrize("row, value, needle", [
    ({**MIXTRAL, "capacity_factor": "0.9"}, "0.9", "{path}, row mixtral, line 2: capacity_factor: expected a number "
                                                   ">= 1.0"),
    ({**MIXTRAL, "capacity_factor": "busy"}, "busy", "{path}, row mixtral, line 2: capacity_factor: expected a number"),
    ({**DENSE, "capacity_factor": "1.5"}, "1.5", "{path}, row dense, line 2: capacity_factor: expected empty on a "
                                                 "dense row"),
])
def test_a_bad_capacity_factor_is_one_line_naming_the_column(tmp_path, capsys, row, value, needle):
    _refused(tmp_path, capsys, [row], needle, value)


def test_a_shape_cell_that_disagrees_with_the_preset_is_refused(tmp_path, capsys):
    _refused(tmp_path, capsys, [{**QWEN, "hidden": "5120"}],
             "{path}, row qwen, line 2: hidden: expected 4096 (the value of model qwen3-235b-a22b), or empty, got 5120")


def test_a_row_without_preset_or_shapes_is_refused(tmp_path, capsys):
    _refused(tmp_path, capsys, [{**DENSE, "model": "", "vocab": ""}],
             "{path}, row dense, line 2: vocab: expected a value (this column may not be empty without a model preset)")


@pytest.mark.parametrize("column, value, needle", [
    ("gpu", "z100", "{path}, row dense, line 3: gpu: expected one of"),
    ("framework", "megatron-9", "{path}, row dense, line 3: framework: expected one of"),
    ("model", "gpt-9", "{path}, row dense, line 3: model: expected one of"),
    ("stage_layers", "16 15", "{path}, row dense, line 3: stage_layers: expected pp=1 numbers >= 1 adding up to "
                              "layers=32"),
    ("scaleout_GBps", "fast", "{path}, row dense, line 3: scaleout_GBps: expected a number, got 'fast'"),
    ("overlap_dp", "maybe", "{path}, row dense, line 3: overlap_dp: expected one of true, 1, false, 0 (or empty)"),
    ("ep", "two", "{path}, row dense, line 3: ep: expected an integer, got 'two'"),
])
def test_a_bad_cell_is_one_line_naming_file_line_row_and_value(tmp_path, capsys, column, value, needle):
    # the bad cell on the second row: the first row reads, the error names the second, and the value it found
    _refused(tmp_path, capsys, [{**DENSE, "name": "first"}, {**DENSE, column: value}], needle, value)


def test_the_rows_network_replaces_the_presets(tmp_path):
    slow = {**DENSE, "name": "slow", "scaleout_GBps": "0.78125", "scaleup_GBps": "200"}
    base, own = read_runs(_write(tmp_path, [DENSE, slow]))
    assert base.cluster.scaleout_Bps == 25e9 and base.cluster.scaleup_Bps == 300e9  # the A100 preset's
    assert own.cluster.scaleout_Bps == 0.78125e9 and own.cluster.scaleup_Bps == 200e9
    # 16 ranks on two nodes exchange 6.7B gradients (ZeRO-1: reduce-scatter and all-gather over the network), 8
    # ranks a node, so NCCL's channels use the node's 8 NICs: 8 x 0.78125 = 6.25 GB/s a direction, and the ring alone
    # takes 2 x 15/16 x 13.4 GB / 6.25 GB/s > 4 s of wire time, more than the step's compute (128 / 16 x 2048 tokens
    # x 6 x 6.7e9 FLOPs / 312 TFLOP/s = 2.1 s) can hide
    t0, t1 = (predict(r)["predicted_iteration_time_s"] for r in (base, own))
    assert t1 > t0 + 4.0 - 2.1


def test_overlap_and_layer_make_up_cells(tmp_path):
    row = {**DENSE, "overlap_dp": "false", "activation": "gelu", "norm": "rmsnorm", "bias": "false",
           "tied_embeddings": "false", "learned_positions": "false"}
    (run,) = read_runs(_write(tmp_path, [row]))
    assert not np.asarray(_candidates(run)["overlap_dp"]).any()
    m = run.model
    assert (m.activation, m.norm, m.bias, m.tied_embeddings, m.learned_positions) == ("gelu", "rmsnorm", False, False,
                                                                                    False)
    (gpt,) = read_runs(_write(tmp_path, [{**DENSE, "activation": "gelu"}], "gpt.csv"))  # empty cells: GPT-like
    assert (gpt.model.norm, gpt.model.bias, gpt.model.tied_embeddings, gpt.model.learned_positions) == (
        "layernorm", True, True, True)


def test_every_shipped_row_is_priced():
    runs = read_runs(PUBLISHED)
    res = validate(runs)
    assert res["unpriced_runs"] == 0
    assert all(np.isfinite(r["error_pct"]) for r in res["rows"])
    # every priced run counted once in the record per GPU type, under its own GPU
    assert sum(g["runs"] for g in res["gpus"]) == len(runs)
    assert {g["gpu"] for g in res["gpus"]} == {r.cluster.gpu.name for r in runs}


def test_causal_counting_halves_attention_over_the_query_width():
    # QK^T and AV take 2 s q + 2 s o FLOPs a token forward (q: query and key width, o: value and output width), three
    # times that with the backward; counting the causal half removes half of it on every layer. By hand:
    # Qwen3-235B-A22B: 64 heads of 128, q = o = 8192 (twice its hidden size 4096); DeepSeek-V3 (MLA): 128 heads,
    # q = 128 x (128 + 64) = 24576, o = 128 x 128 = 16384.
    from costmodel._validate import flops_per_iteration
    for name, layers, q, o in (("qwen3-235b-a22b", 94, 8192, 8192), ("deepseek-v3", 61, 24576, 16384)):
        m = model_preset(name)
        s = m.seq_len
        full, causal = (flops_per_iteration(m, 1, c) for c in ("model_flops", "causal_model_flops"))
        assert full - causal == pytest.approx(3 * layers * (s * q + s * o) * s, rel=1e-12)


def test_the_record_per_gpu_type_groups_the_priced_runs():
    from costmodel._validate import gpu_summary

    # By hand: H100 runs at -10% and +4% (mean |error| 7%, signed -3%), one more H100 run the model could not price
    # (inf: left out), two GB200 runs at +6% and +2% (4%, +4%), and an A100 whose only run is unpriced (no line).
    # Most priced runs first, ties by name: GB200 before H100 at 2 runs each.
    got = gpu_summary(["H100", "GB200", "H100", "A100", "GB200", "H100"],
                      [-10.0, 6.0, 4.0, float("inf"), 2.0, float("inf")])
    assert [g["gpu"] for g in got] == ["GB200", "H100"]
    assert [g["runs"] for g in got] == [2, 2]
    assert [g["mean_abs_error_pct"] for g in got] == pytest.approx([4.0, 7.0])
    assert [g["mean_signed_error_pct"] for g in got] == pytest.approx([4.0, -3.0])
