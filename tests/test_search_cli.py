"""`plansweep search grid|random` and the shared space options (sweep/_space_args.py)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from cli import build_parser, main
from cli._space_args import space_from_args
from costmodel import InputError, StrategyTable, cluster_preset, evaluate, model_preset
from search import exact_space

GPT3 = model_preset("gpt3-175b")
H100 = cluster_preset("h100x1024")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _space(*argv):
    args = build_parser().parse_args(["search", "grid", *argv])
    return space_from_args(args, GPT3, H100)


def test_flags_set_choices_and_the_rest_keep_the_named_space():
    s = _space("--space", "exact", "--tp", "4,8", "--schedule", "1f1b,interleaved", "--global-batch", "768")
    assert s.choices_of("tp") == (4, 8)
    assert s.choices_of("schedule") == ("1f1b", "interleaved")
    assert s.choices_of("pp") == exact_space(GPT3, H100).choices_of("pp")
    assert s.fixed["global_batch"] == 768
    d = _space("--sequence-parallel", "true")
    assert d.fixed["sequence_parallel"] is True and "sequence_parallel" not in [x.name for x in d.dims]
    p = _space("--space", "partition", "--stage-shift=-1,0,1", "--pp", "1,2,4")
    assert [x.name for x in p.dims if x.base == "stage_shift"] == ["stage_shift.0", "stage_shift.1", "stage_shift.2"]


def test_fixed_space_varies_only_the_flags():
    mlp, c = model_preset("seed000-mlp"), cluster_preset("seed000-16")
    args = build_parser().parse_args(["search", "grid", "--space", "fixed", "--global-batch", "8192", "--dp",
                                      "1,2,4,8,16", "--tp", "1,2,4,8,16", "--pp", "1,2,4,8,16", "--microbatches",
                                      "1,2,4,8"])
    s = space_from_args(args, mlp, c)
    assert [d.name for d in s.dims] == ["dp", "tp", "pp", "microbatches"]
    t = s.rows(0, s.size)[1]
    assert len(t) == 15 * 4  # (dp, tp, pp) with product 16, each with 4 counts
    assert set(t["micro_batch"].tolist()) == {8192 // (d * m) for d in (1, 2, 4, 8, 16) for m in (1, 2, 4, 8)}


@pytest.mark.parametrize("argv,flag", [
    (["--tp", "2,x"], "--tp"),
    (["--tp", "0"], "--tp"),
    (["--zero-stage", "4"], "--zero-stage"),
    (["--schedule", "1f1b,2f2b"], "--schedule"),
    (["--sequence-parallel", "maybe"], "--sequence-parallel"),
    (["--global-batch", "-3"], "--global-batch"),
    (["--space", "huge"], "--space"),
    (["--micro-batch", "1", "--microbatches", "4"], "--microbatches"),
    (["--tp", "2,2"], "--tp"),
])
def test_bad_values_name_the_flag(argv, flag):
    with pytest.raises(InputError) as exc:
        _space(*argv)
    assert exc.value.argument == flag


def test_grid_finds_the_best_of_the_plain_product(capsys):
    argv = ["search", "grid", "--space", "exact", "--tp", "4,8", "--pp", "4,8,16", "--cp", "1",
            "--micro-batch", "1,2", "--schedule", "1f1b,interleaved", "--vpp", "1,2", "--zero-stage", "0,1",
            "--budget", "100000", "--batch", "7", "--top", "3", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    # The same space written plainly: dp = 1024 / (tp pp); interleaved needs vpp = 2 (which
    # divides 96 / pp), the others vpp = 1; SP only with tp > 1 (always here).
    rows = [dict(dp=1024 // (t * p), tp=t, pp=p, micro_batch=b, schedule=s, vpp=v, recompute=r,
                 sequence_parallel=sp, zero_stage=z)
            for t, p, b, s, v, r, sp, z in itertools.product(
                [4, 8], [4, 8, 16], [1, 2], ["1f1b", "interleaved"], [1, 2], ["none", "selective", "full"],
                [False, True], [0, 1])
            if (v == 2) == (s == "interleaved") and 1536 % (1024 // (t * p) * b) == 0]
    table = StrategyTable.from_columns(global_batch=1536, **{k: [r[k] for r in rows] for k in rows[0]})
    m = evaluate(GPT3, H100, table)
    assert out["evaluations"] == len(rows)
    assert out["feasible"] == int(m["feasible"].sum())
    best = int(np.argmax(np.where(m["feasible"], m["tokens_per_s"], -1)))
    assert out["best"][0]["tokens_per_s"] == pytest.approx(m["tokens_per_s"][best], rel=1e-12)
    ties = np.flatnonzero(m["feasible"] & (m["tokens_per_s"] == m["tokens_per_s"][best]))
    assert {k: out["best"][0][k] for k in rows[0]} in [rows[i] for i in ties]
    assert len(out["best"]) == 3
    assert out["best"][0]["tokens_per_s"] >= out["best"][1]["tokens_per_s"] >= out["best"][2]["tokens_per_s"]


def test_budget_limits_evaluations(capsys):
    assert main(["search", "random", "--space", "partition", "--budget", "300", "--batch", "128", "--seed", "3",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["evaluations"] == 300
    assert int(out["space_size"]) > 2 ** 63
    for r in out["best"]:
        assert sum(r["stage_layers"]) == 96 and len(r["stage_layers"]) == r["pp"]


def test_bad_input_exits_2_with_one_line():
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-m", "cli", "search", "grid", "--vpp", "1,two"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "--vpp" in proc.stderr and "Traceback" not in proc.stderr
