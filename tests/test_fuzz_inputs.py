"""Every input file format, fuzzed through the command line (in-process, cli.main).

Each format starts from a valid seed document and is damaged by a hypothesis strategy: a value
replaced by one of the wrong type or out of range, a key removed or added, a list emptied, or the
file's bytes truncated, flipped, cut into or repeated. The property, for every case:

- the command ends with exit code 0 or 2 (Piper's planner also 1: "no plan fits", its documented
  code), and no exception other than SystemExit escapes cli.main (no traceback);
- on exit 2, stderr is one line (the InputError naming the file or flag);
- nothing half-written: an --out file is either absent or whole, no temporary file is left;
- nothing already written lost: the input file is unchanged, and an --out file that existed
  before a failed command is unchanged.

The cases are derandomized (a fixed hypothesis seed per format, no example database), so CI
runs the same ones every time; FORMATS gives how many per format.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import dataclasses
import io
import json
import os
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli import main

DATA = Path(__file__).resolve().parent / "data"
MODELS = DATA / "models"
MEASURED = Path(__file__).resolve().parents[1] / "costmodel" / "data" / "measured"

# ---- seed documents (each one valid: test_every_seed_is_accepted) --------------------------
PLANSWEEP_MODEL = {"layers": 4, "hidden": 1024, "heads": 16, "kv_heads": 4, "ffn_hidden": 2816, "seq_len": 1024,
                   "vocab": 32000, "activation": "swiglu", "norm": "rmsnorm", "bias": False,
                   "tied_embeddings": False, "learned_positions": False}
PLANSWEEP_MOE = {**PLANSWEEP_MODEL, "experts": 8, "experts_per_token": 2, "expert_ffn_hidden": 512,
                 "shared_experts": 1, "dense_layers": 1, "capacity_factor": 1.25}
# HuggingFace configs of the MoE families, with small shapes (the keys the reader takes).
MIXTRAL = {"model_type": "mixtral", "hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 4,
           "num_hidden_layers": 4, "intermediate_size": 2048, "max_position_embeddings": 1024, "vocab_size": 32000,
           "hidden_act": "silu", "num_local_experts": 8, "num_experts_per_tok": 2, "head_dim": 64}
QWEN3_MOE = {"model_type": "qwen3_moe", "hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 4,
             "num_hidden_layers": 4, "intermediate_size": 2048, "max_position_embeddings": 1024,
             "vocab_size": 32000, "hidden_act": "silu", "num_experts": 8, "num_experts_per_tok": 2,
             "moe_intermediate_size": 512, "decoder_sparse_step": 1, "mlp_only_layers": [0], "head_dim": 128}
DEEPSEEK_V3 = {"model_type": "deepseek_v3", "hidden_size": 1024, "num_attention_heads": 16,
               "num_key_value_heads": 16, "num_hidden_layers": 4, "intermediate_size": 2048,
               "max_position_embeddings": 1024, "vocab_size": 32000, "hidden_act": "silu",
               "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2, "moe_intermediate_size": 512,
               "first_k_dense_replace": 1, "moe_layer_freq": 1, "n_group": 2, "topk_group": 1,
               "topk_method": "noaux_tc", "kv_lora_rank": 128, "q_lora_rank": 256, "qk_nope_head_dim": 64,
               "qk_rope_head_dim": 32, "v_head_dim": 64}
# sliding windows: a plansweep model file windowing 3 of its 4 layers, and gpt-oss's config shape (every other layer)
PLANSWEEP_WINDOW = {**PLANSWEEP_MODEL, "sliding_window": 256, "window_layers": 3}
GPT_OSS = {"model_type": "gpt_oss", "hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 4,
           "head_dim": 64, "num_hidden_layers": 4, "intermediate_size": 1024, "max_position_embeddings": 1024,
           "vocab_size": 32000, "hidden_act": "silu", "num_local_experts": 8, "num_experts_per_tok": 2,
           "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 2}
GEMMA2 = {"model_type": "gemma2", "hidden_size": 1024, "num_attention_heads": 8, "num_key_value_heads": 4,
          "head_dim": 256, "num_hidden_layers": 4, "intermediate_size": 2816, "max_position_embeddings": 1024,
          "vocab_size": 32000, "hidden_activation": "gelu_pytorch_tanh", "sliding_window": 256}
# chunked attention: Llama 4's nested config shape (MoE on every other layer, chunks on 3 of 4 layers), GLM-4.5's
LLAMA4 = {"model_type": "llama4", "text_config": {
    "model_type": "llama4_text", "hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 4,
    "head_dim": 64, "num_hidden_layers": 4, "intermediate_size": 1024, "intermediate_size_mlp": 2048,
    "max_position_embeddings": 1024, "vocab_size": 32000, "hidden_act": "silu", "num_local_experts": 8,
    "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "attention_chunk_size": 256,
    "no_rope_layers": [1, 1, 1, 0]}}
GLM4_MOE = {"model_type": "glm4_moe", "hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 4,
            "head_dim": 128, "num_hidden_layers": 4, "intermediate_size": 2048, "max_position_embeddings": 1024,
            "vocab_size": 32000, "hidden_act": "silu", "n_routed_experts": 8, "n_shared_experts": 1,
            "num_experts_per_tok": 2, "moe_intermediate_size": 512, "first_k_dense_replace": 1, "n_group": 1,
            "topk_group": 1}
CLUSTER = {"gpu": "h100", "num_gpus": 16, "gpus_per_node": 8, "scaleup_GBps": 450, "scaleout_GBps": 50,
           "name": "fuzzed"}
HETERO_CLUSTER = {"name": "mixed", "pools": [
    {"name": "a100", "gpu": "a100", "nodes": 1, "gpus_per_node": 8},
    {"name": "h100", "gpu": "h100", "nodes": 1, "gpus_per_node": 8, "inter_GBps": 50, "inter_latency_us": 10}],
    "links": [{"between": ["a100", "h100"], "GBps": 25, "latency_us": 12}]}
STRATEGY = {"dp": 2, "tp": 2, "pp": 2, "micro_batch": 1, "global_batch": 16, "schedule": "1f1b",
            "recompute": "selective", "sequence_parallel": True, "zero_stage": 1, "precision": "bf16"}
HETERO_STRATEGY = {"global_batch": 16, "microbatches": 8, "schedule": "1f1b", "recompute": "full",
                   "stages": [{"pool": "a100", "dp": 1, "tp": 8, "layers": 14},
                              {"pool": "h100", "dp": 1, "tp": 8, "layers": 18}]}
HARDWARE = {"a100": {"gemm_eff_max": 0.8, "hbm_eff": 0.85, "link_eff": 0.75}}
PIPER = {"maxDevices": 4, "maxMemoryPerDevice": 8e10, "bandwidth": 25e9, "mbsInBatch": 8,
         "nodes": [{"id": i, "name": f"layer{i}", "TMPCs": {t: [
             {"id": kind, "timePerSample": 0.01 * (1.3 if kind != "vanilla" else 1.0) / int(t),
              "parameterSize": 1e8 / int(t), "memoryUsageA": 1e6 if kind == "vanilla" else 1e4,
              "memoryUsageB": 2e8 / int(t), "syncTimeFw": {str(i - 1): 1e5} if i else {},
              "syncTimeBw": {str(i + 1): 1e5} if i < 2 else {}} for kind in ("vanilla", "activation recomp")]
             for t in ("1", "2")}} for i in range(3)],
         "edges": [{"sourceId": i, "destId": i + 1, "communicationCost": 1e6} for i in range(2)]}


def _measured_rows() -> tuple[list[str], list[list[str]]]:
    """The header and the first row (GPT 1.7B on 32 GPUs, Narayanan et al. 2021 Table 1) of the shipped set."""
    with (MEASURED / "narayanan2021_table1.csv").open(newline="") as fh:
        rows = list(csv.reader(fh))
    return rows[0], [rows[1]]


# ---- formats: seed, file suffix, command line, what the command may write --------------------
@dataclasses.dataclass(frozen=True)
class Format:
    seed: object  # a mapping (JSON / YAML) or (header, rows) for a CSV
    suffix: str  # ".json", ".yaml" or ".csv"
    argv: Callable[[str, str], list[str]]  # (input path, --out path) -> the command line
    examples: int  # generated cases
    writes_out: bool = False  # the command writes the --out path
    out_check: Callable[[str], None] | None = None  # checks a whole --out file
    exit_codes: tuple[int, ...] = (0, 2)
    beside: tuple[tuple[str, bytes], ...] = ()  # (name, bytes) of valid files read with it, in its directory


def _beside(path: str, name: str) -> str:
    return os.path.join(os.path.dirname(path), name)


def _json_object(text: str) -> None:
    assert isinstance(json.loads(text), dict)


def _launch_line(text: str) -> None:
    assert text.endswith("\n") and "torchrun" in text and "--tensor-model-parallel-size" in text


EVAL_SMALL = ["--cluster", "h100x8", "--tp", "2", "--pp", "2", "--global-batch", "16", "--json"]
EVAL_ON_CLUSTER = ["--model", "llama3-8b", "--tp", "2", "--pp", "2", "--global-batch", "64", "--json"]
# Calculon's README example run: its execution file, megatron-1T on its A100 system file's 3,072 GPUs.
CALCULON_EXE = MODELS / "3072_t4_p64_d12_mbs4_full.calculon-execution.json"
EVAL_CALCULON_EXE = ["--model", "megatron-1t", "--cluster", str(MODELS / "a100_80g.calculon-system.json") + "@3072"]
EVAL_MODEL_TP8 = ["--cluster", "h100x8", "--tp", "8", "--global-batch", "8", "--recompute", "full", "--json"]


def _model(seed, suffix, examples, flags=EVAL_SMALL) -> Format:
    return Format(seed, suffix, lambda p, o: ["evaluate", "--model", p, *flags], examples)


def _read(path: Path) -> dict:
    return json.loads(path.read_text())


FORMATS: dict[str, Format] = {
    "model.json": _model(PLANSWEEP_MODEL, ".json", 120),
    "model.yaml": _model(PLANSWEEP_MOE, ".yaml", 110),
    "hf-llama": _model(_read(MODELS / "llama3-8b.config.json"), ".json", 80, EVAL_MODEL_TP8),
    "hf-gpt2": _model(_read(MODELS / "gpt2.config.json"), ".json", 70),
    "hf-mixtral": _model(MIXTRAL, ".json", 70),
    "hf-qwen3-moe": _model(QWEN3_MOE, ".json", 70),
    "hf-deepseek-v3": _model(DEEPSEEK_V3, ".json", 80),
    "model-window.json": _model(PLANSWEEP_WINDOW, ".json", 40),
    "hf-gpt-oss": _model(GPT_OSS, ".json", 40),
    "hf-gemma2": _model(GEMMA2, ".json", 40),
    "hf-llama4": _model(LLAMA4, ".json", 40),
    "hf-glm4-moe": _model(GLM4_MOE, ".json", 40),
    "calculon-model": _model(_read(MODELS / "megatron-22B.calculon.json"), ".json", 70, EVAL_MODEL_TP8),
    "cluster.json": Format(CLUSTER, ".json", lambda p, o: ["evaluate", "--cluster", p, *EVAL_ON_CLUSTER], 80),
    "cluster.yaml": Format(CLUSTER, ".yaml", lambda p, o: ["evaluate", "--cluster", p, *EVAL_ON_CLUSTER], 70),
    "hetero-cluster.yaml": Format(HETERO_CLUSTER, ".yaml", lambda p, o: [
        "evaluate", "--model", "llama3-8b", "--cluster", p, "--strategy", _beside(p, "placement.json"), "--json"],
        80, beside=(("placement.json", json.dumps(HETERO_STRATEGY).encode()),)),
    "calculon-system": Format(_read(MODELS / "a100_80g.calculon-system.json"), ".json",
                              lambda p, o: ["evaluate", "--cluster", p + "@16", *EVAL_ON_CLUSTER], 90),
    "calculon-execution": Format(_read(CALCULON_EXE), ".json", lambda p, o: [
        "evaluate", *EVAL_CALCULON_EXE, "--strategy", p, "--json"], 60),
    "calculon-execution -> export": Format(_read(CALCULON_EXE), ".json", lambda p, o: [
        "export", "--framework", "megatron", *EVAL_CALCULON_EXE, "--strategy", p, "--out", o], 20, writes_out=True,
        out_check=_launch_line),
    "strategy.json": Format(STRATEGY, ".json", lambda p, o: [
        "evaluate", "--model", "llama3-8b", "--cluster", "h100x8", "--strategy", p, "--json"], 90),
    "strategy.yaml -> export": Format(STRATEGY, ".yaml", lambda p, o: [
        "export", "--framework", "megatron", "--model", "llama3-8b", "--cluster", "h100x8", "--strategy", p,
        "--out", o], 80, writes_out=True, out_check=_launch_line),
    "hetero-strategy.yaml": Format(HETERO_STRATEGY, ".yaml", lambda p, o: [
        "evaluate", "--model", "llama3-8b", "--cluster", "a100x8+h100x8", "--strategy", p, "--json"], 80),
    "measured.csv": Format(_measured_rows(), ".csv", lambda p, o: ["validate", p, "--json"], 120),
    "measured.csv -> calibrate": Format(_measured_rows(), ".csv", lambda p, o: ["calibrate", p, "--out", o], 15,
                                        writes_out=True, out_check=_json_object),
    "hardware.json": Format(HARDWARE, ".json", lambda p, o: [
        "validate", str(MEASURED / "narayanan2021_table1.csv"), "--hardware", p, "--json"], 70),
    "piper.json": Format(PIPER, ".json", lambda p, o: ["search", "piper", p, "--json"], 80, exit_codes=(0, 1, 2)),
}


# ---- damage ----------------------------------------------------------------------------------
BAD_VALUES = st.sampled_from([
    None, True, False, 0, -1, 1, 3, 7, 2**31, 2**63, 10**30, -(10**30), 0.5, -0.0, 1e308, float("nan"), float("inf"),
    -float("inf"), "", "abc", "8", "1f1b", "none", "h100", "a100x8", [], [1], [None], ["a", "b"], {}, {"x": 1},
]).map(copy.deepcopy)  # a fresh list or mapping each time (a later change may go inside it)
EXTRA_KEYS = st.sampled_from(["unknown_key", "layers", "tp", "gpu", "nodes", "stages", "TMPCs", "model_type"])
BAD_CELLS = st.sampled_from(["", " ", "0", "-1", "1.5", "abc", "1e400", "nan", "inf", "-inf", "99999999999999999999",
                             "true", "h100", "megatron-core", "narayanan_eq3", "\x00", "é", '"', "1,2"])


def _paths(doc, prefix=()) -> list[tuple]:
    """Every key path of a JSON-like document (dict keys and list indices), parents first."""
    out = []
    if isinstance(doc, dict):
        items = doc.items()
    elif isinstance(doc, list):
        items = enumerate(doc)
    else:
        return out
    for k, v in items:
        out.append((*prefix, k))
        out.extend(_paths(v, (*prefix, k)))
    return out


def _get(doc, path):
    for k in path:
        doc = doc[k]
    return doc


def _at(doc, path):
    """The container holding the value at ``path``."""
    return _get(doc, path[:-1])


@st.composite
def _mapping_damage(draw, seed: dict):
    """A damaged copy of ``seed``: 1 to 3 changes, each a value replaced, a key removed or added."""
    doc = copy.deepcopy(seed)
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        kind = draw(st.sampled_from(["value", "value", "value", "remove", "add"]) if paths else st.just("add"))
        if kind == "add":  # a key added to the document or to one of its mappings
            where = draw(st.sampled_from([()] + [p for p in paths if isinstance(_get(doc, p), dict)]))
            _get(doc, where)[draw(EXTRA_KEYS)] = draw(BAD_VALUES)
            continue
        path = draw(st.sampled_from(paths))
        parent = _at(doc, path)
        if kind == "remove":
            if isinstance(parent, dict):
                del parent[path[-1]]
            else:
                parent.pop(path[-1])
        else:
            parent[path[-1]] = draw(BAD_VALUES)
    return doc


@st.composite
def _bytes_damage(draw, data: bytes):
    """``data`` truncated, with a byte flipped, a run of bytes cut out, or a slice repeated."""
    kind = draw(st.sampled_from(["truncate", "flip", "cut", "repeat"]))
    n = len(data)
    i = draw(st.integers(0, max(n - 1, 0)))
    if kind == "truncate":
        return data[:i]
    if kind == "flip":
        return data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1:]
    j = draw(st.integers(i, min(n, i + 64)))
    return data[:i] + data[j:] if kind == "cut" else data[:j] + data[i:j] + data[j:]


@st.composite
def _csv_damage(draw, seed):
    """A damaged copy of a CSV (header, rows): cells replaced, a column dropped, rows duplicated or removed."""
    header, rows = list(seed[0]), [list(r) for r in seed[1]]
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["cell", "cell", "cell", "drop_column", "no_rows", "more_rows", "short_row"]))
        if kind == "cell" and rows:
            r = draw(st.integers(0, len(rows) - 1))
            if rows[r]:
                rows[r][draw(st.integers(0, len(rows[r]) - 1))] = draw(BAD_CELLS)
        elif kind == "drop_column" and header:
            c = draw(st.integers(0, len(header) - 1))
            header.pop(c)
            for row in rows:
                del row[c:c + 1]  # (a row cut short may not reach it)
        elif kind == "no_rows":
            rows = []
        elif kind == "more_rows" and rows:
            rows.append(list(rows[0]))
        elif kind == "short_row" and rows:
            rows[-1] = rows[-1][: draw(st.integers(0, len(rows[-1])))]
    return _csv_bytes((header, rows))


def _encode(doc, suffix: str) -> bytes:
    if suffix == ".yaml":
        return yaml.safe_dump(doc, sort_keys=False).encode()
    return json.dumps(doc).encode()  # NaN and Infinity as Python writes them: the reader must cope


def _csv_bytes(seed) -> bytes:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([seed[0], *seed[1]])
    return buf.getvalue().encode()


def seed_bytes(fmt: Format) -> bytes:
    return _csv_bytes(fmt.seed) if fmt.suffix == ".csv" else _encode(fmt.seed, fmt.suffix)


def damaged_files(fmt: Format):
    """Bytes of a damaged input file of format ``fmt``: its structure damaged, or its bytes."""
    structure = _csv_damage(fmt.seed) if fmt.suffix == ".csv" else _mapping_damage(fmt.seed).map(
        lambda d: _encode(d, fmt.suffix))
    return st.one_of(structure, _bytes_damage(seed_bytes(fmt)))


# ---- the property ----------------------------------------------------------------------------
SENTINEL = b"written before: must survive a failed command\n"


def run_case(fmt: Format, data: bytes, out_exists: bool) -> tuple[int, str, str]:
    """Run the format's command on ``data`` in a fresh directory; assert the property; return
    (exit code, stdout, stderr)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "input" + fmt.suffix)
        out = os.path.join(tmp, "out.file")
        with open(path, "wb") as fh:
            fh.write(data)
        for name, content in fmt.beside:
            with open(os.path.join(tmp, name), "wb") as fh:
                fh.write(content)
        if out_exists:
            with open(out, "wb") as fh:
                fh.write(SENTINEL)
        stdout, stderr = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                code = main(fmt.argv(path, out))
        except SystemExit as exc:  # argparse's own exits
            code = exc.code if isinstance(exc.code, int) else 2
        except Exception:  # noqa: BLE001 (any escape is the failure the test looks for)
            pytest.fail(f"traceback on {fmt.argv(path, out)} with input {data[:400]!r}:\n{traceback.format_exc()}")
        err = stderr.getvalue()
        where = f"{fmt.argv(path, out)} on {data[:300]!r}: exit {code}, stderr {err!r}"
        assert code in fmt.exit_codes, where
        assert "Traceback" not in err, where
        if code == 2:
            assert err.endswith("\n") and err.count("\n") == 1, where
        with open(path, "rb") as fh:
            assert fh.read() == data, "the input file changed: " + where
        left = sorted(set(os.listdir(tmp)) - {"input" + fmt.suffix, "out.file", *(n for n, _ in fmt.beside)})
        assert not left, f"files left behind {left}: {where}"
        if os.path.exists(out):
            with open(out, "rb") as fh:
                written = fh.read()
            if code != 0 or not fmt.writes_out:
                assert out_exists and written == SENTINEL, "--out written or changed by a failed command: " + where
            else:
                fmt.out_check(written.decode())
        else:
            assert not out_exists, "an existing --out file removed: " + where
            assert code != 0 or not fmt.writes_out, "exit 0 and no --out file: " + where
        return code, stdout.getvalue(), err


# Per format: cases run and their exit codes (read by test_fuzz_case_count).
OUTCOMES: dict[str, list[int]] = {}


@pytest.mark.parametrize("name", list(FORMATS))
def test_every_seed_is_accepted(name):
    code, _, err = run_case(FORMATS[name], seed_bytes(FORMATS[name]), out_exists=True)
    assert code == 0, err


@pytest.mark.parametrize("name", list(FORMATS))
def test_fuzzed_inputs(name):
    fmt = FORMATS[name]
    outcomes = OUTCOMES.setdefault(name, [])

    @settings(max_examples=fmt.examples, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=damaged_files(fmt), out_exists=st.booleans() if fmt.writes_out else st.just(False))
    def check(data, out_exists):
        outcomes.append(run_case(fmt, data, out_exists)[0])

    check()
    # the cases ran (hypothesis stops early only when it runs out of distinct inputs)
    assert len(outcomes) >= 0.9 * fmt.examples, (name, len(outcomes))


def test_the_fuzzing_covers_every_input_format_with_enough_cases():
    """At least 1,400 generated cases over the input formats (with the run directories' fuzzing,
    over 2,000 in all), every format of a file plansweep reads among them."""
    assert sum(f.examples for f in FORMATS.values()) >= 1400
    commands = {(f.argv("IN", "OUT")[0], f.suffix) for f in FORMATS.values()}
    assert {("evaluate", ".json"), ("evaluate", ".yaml"), ("export", ".yaml"), ("validate", ".csv"),
            ("calibrate", ".csv"), ("validate", ".json"), ("search", ".json")} <= commands
