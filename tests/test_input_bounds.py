"""Inputs at and past their bounds: each refused in one line naming the flag or the file's field (exit 2, nothing
written), or, where a value can never make a valid plan, priced as if it were not there, without the memory or the
time its size would otherwise take. Expected values are the bounds themselves and hand counts."""

from __future__ import annotations

import json

import pytest

from cli import main
from search._space import divisors
from tests.in_process import one_stderr_line

SMALL = ["--model", "llama3-8b", "--cluster", "h100x8"]


def _refused(argv, capsys, needle: str) -> None:
    """``argv`` exits 2 with one line on stderr that holds ``needle`` and no traceback."""
    assert main(argv) == 2
    one_stderr_line(capsys, needle)


@pytest.mark.parametrize("cf", ["1e999", "1e300", "9"])
def test_a_capacity_factor_past_the_experts_is_refused(tmp_path, capsys, cf):
    """Capacity cf x tokens x k / E per expert: past cf = E (8 here) an expert holds more than every routed token."""
    path = tmp_path / "moe.json"
    path.write_text('{"name": "x", "layers": 4, "hidden": 512, "heads": 8, "seq_len": 1024, "vocab": 1000, '
                    f'"experts": 8, "experts_per_token": 2, "capacity_factor": {cf}}}')
    _refused(["evaluate", "--model", str(path), "--cluster", "h100x8", "--tp", "8", "--global-batch", "8"], capsys,
             "capacity_factor: expected a number in [1.0, experts=8]")


def test_a_capacity_factor_of_the_experts_is_priced(tmp_path, capsys):
    path = tmp_path / "moe.json"
    path.write_text(json.dumps({"name": "x", "layers": 4, "hidden": 512, "heads": 8, "seq_len": 1024, "vocab": 1000,
                                "experts": 8, "experts_per_token": 2, "capacity_factor": 8}))
    assert main(["evaluate", "--model", str(path), "--cluster", "h100x8", "--tp", "8", "--global-batch", "8"]) == 0


@pytest.mark.parametrize("word", ["nan", "inf", "-inf"])
def test_unit_rows_must_be_a_finite_integer(tmp_path, capsys, word):
    out = tmp_path / "run"
    _refused(["sweep", *SMALL, f"--unit-rows={word}", "--out", str(out), "--in-process"], capsys,
             "--unit-rows: expected an integer")
    assert not out.exists()


@pytest.mark.parametrize("flags,needle", [
    (["--tp=99999999999"], "--tp: expected integers >= 1, at most 2,147,483,647, got 99999999999"),
    (["--stage-shift=-99999999999"], "--stage-shift: expected integers of at most 2,147,483,647 in size"),
    (["--global-batch=2000000"], "--global-batch: expected an integer in [1, 1,048,576], got 2000000"),
    (["--top=0"], "--top: expected an integer >= 1, got 0"),
    (["--top=-1"], "--top: expected an integer >= 1, got -1"),
])
def test_rank_refuses_values_past_their_bounds(capsys, flags, needle):
    _refused(["rank", *SMALL, "--space", "fixed", *flags], capsys, needle)


def test_rank_refuses_a_space_it_cannot_enumerate(capsys):
    """Llama 3 405B's default space with a shift of -1, 0 or 1 on every stage boundary: each boundary multiplies the
    space by 3, past 1e34 points; rank prices every point, so it names the shifts in one line where it raised numpy's
    int64 bound. A fixed space of 100 x 4 x 4 x 200 x 4 x 3 x 4 x 4 = 61,440,000 points names the space."""
    _refused(["rank", "--model", "llama3-405b", "--cluster", "h100x8", "--stage-shift=-1,0,1"], capsys,
             "--stage-shift: expected a space of at most 20,000,000 grid points")
    _refused(["rank", *SMALL, "--space", "fixed", "--micro-batch", ",".join(map(str, range(1, 101))),
              "--tp", "1,2,4,8", "--pp", "1,2,4,8", "--dp", ",".join(map(str, range(1, 201))), "--vpp", "1,2,3,4",
              "--recompute", "none,selective,full", "--cp", "1,2,4,8", "--zero-stage", "0,1,2,3"], capsys,
             "--space: expected a space of at most 20,000,000 grid points")


@pytest.mark.parametrize("flag", ["--global-batch", "--micro-batch"])
def test_evaluate_refuses_a_batch_past_its_bound(capsys, flag):
    _refused(["evaluate", *SMALL, "--tp", "8", flag, "2000000"], capsys,
             f"{flag[2:].replace('-', '_')}: expected an integer in [1, 1,048,576], got 2000000")


def test_sweep_refuses_a_global_batch_past_its_bound_before_writing(tmp_path, capsys):
    out = tmp_path / "run"
    _refused(["sweep", *SMALL, "--global-batch", "1536,2000000", "--out", str(out), "--in-process"], capsys,
             "--global-batch: expected an integer in [1, 1,048,576]")
    assert not out.exists()


def _first_row(capsys) -> str:
    return capsys.readouterr().out.splitlines()[2]


@pytest.mark.parametrize("flag,huge", [("--pp", "1,2,2147483647"), ("--light-ends", "0,1,2147483647"),
                                       ("--tp", "1,2,4,8,2147483647")])
def test_a_degree_no_plan_can_take_changes_nothing(capsys, flag, huge):
    """A pp above the model's 32 layers, a light end of more layers than it has and a tp above the 8 GPUs make no
    valid plan: the exact space's ranking is the same without them (and is found without tables of their size)."""
    small = huge.rsplit(",", 1)[0]
    assert main(["rank", *SMALL, "--space", "exact", flag, small, "--top", "1"]) == 0
    without = _first_row(capsys)
    assert main(["rank", *SMALL, "--space", "exact", flag, huge, "--top", "1"]) == 0
    assert _first_row(capsys) == without


def test_divisors_by_pairs():
    """2,147,483,646 = 2 x 3^2 x 7 x 11 x 31 x 151 x 331: 2 x 3 x 2^5 = 192 divisors, found by trial division up
    to its square root; small numbers against the definition."""
    d = divisors(2_147_483_646)
    assert len(d) == 192 and d[:6] == [1, 2, 3, 6, 7, 9] and d[-1] == 2_147_483_646
    assert all(2_147_483_646 % k == 0 for k in d) and d == sorted(set(d))
    for n in range(1, 200):
        assert divisors(n) == [k for k in range(1, n + 1) if n % k == 0]
        assert divisors(n, 10) == [k for k in range(1, 11) if n % k == 0]


def test_bench_rows_are_bounded(capsys):
    _refused(["bench", "--rows", "99999999999999"], capsys, "--rows: expected an integer in [1, 10,000,000]")


@pytest.mark.parametrize("layers,needle", [
    ("16,16,0", "stage_layers: expected pp=2 counts, one per stage, got '16,16,0'"),
    ("0,32", "stage_layers: expected counts >= 1 (every stage holds a layer), got '0,32'"),
])
def test_stage_layers_are_one_count_of_a_layer_or_more_per_stage(capsys, tmp_path, layers, needle):
    flags = ["--tp", "4", "--pp", "2", "--global-batch", "8"]
    _refused(["evaluate", *SMALL, *flags, "--stage-layers", layers], capsys, needle)
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"tp": 4, "pp": 2, "global_batch": 8, "stage_layers": [int(x) for x in
                                                                                      layers.split(",")]}))
    _refused(["evaluate", *SMALL, "--strategy", str(path)], capsys, f"--strategy {path} " + needle)


@pytest.mark.parametrize("field,value", [("schedule", 1), ("recompute", 2), ("precision", 2),
                                         ("recompute_modules", 5), ("stage_recompute", ["full", 1])])
def test_a_strategy_file_gives_names_not_codes(capsys, tmp_path, field, value):
    """A file's 1 is no schedule (the table's code for 1f1b): names only."""
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"tp": 4, "pp": 2, field: value}))
    many = "names" if field in ("recompute_modules", "stage_recompute") else "a name"
    _refused(["evaluate", *SMALL, "--strategy", str(path)], capsys, f"--strategy {path} {field}: expected {many} among")


def test_a_strategy_files_yaml_false_and_module_list_read_as_their_names(capsys, tmp_path):
    """YAML's `recompute: false` is no recompute, and a list of modules their comma-separated names: the same
    strategy as the names written out."""
    import yaml

    def line(doc) -> str:
        path = tmp_path / "s.yaml"
        path.write_text(yaml.safe_dump({"tp": 8, **doc}))
        assert main(["evaluate", *SMALL, "--strategy", str(path)]) == 0
        return capsys.readouterr().out.splitlines()[1]  # "strategy: dp=... tp=..."

    assert line({"recompute": False}) == line({"recompute": "none"})
    assert line({"recompute_modules": ["core_attn", "mlp"]}) == line({"recompute_modules": "core_attn,mlp"})


MIXED = "global_batch: 16\nmicrobatches: 8\nstages:\n  - {pool: a100, dp: 1, tp: 8, layers: 16}\n" \
        "  - {pool: h100, dp: 1, tp: 8, layers: 16}\n"


@pytest.mark.parametrize("flag,value", [("--pp", "3"), ("--tp", "4"), ("--dp", "2"), ("--micro-batch", "3"),
                                        ("--stage-layers", "10,22")])
def test_flags_that_a_strategy_of_stages_gives_per_stage_are_refused(capsys, tmp_path, flag, value):
    path = tmp_path / "mixed.yaml"
    path.write_text(MIXED)
    base = ["evaluate", "--model", "llama3-8b", "--cluster", "a100x8+h100x8", "--strategy", str(path)]
    assert main(base) == 0
    capsys.readouterr()
    _refused([*base, flag, value], capsys, f"{flag}: expected no {flag} with a strategy of stages")


def test_recompute_modules_of_no_name_are_refused(capsys):
    _refused(["evaluate", *SMALL, "--tp", "8", "--recompute-modules", ","], capsys,
             "--recompute-modules: expected module names, comma-separated, got ','")


@pytest.mark.parametrize("name", ["1", None, ""])
def test_a_pool_is_named_by_a_string_that_is_not_a_number(capsys, tmp_path, name):
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"pools": [{"name": name, "gpu": "a100", "nodes": 1},
                                          {"name": "h", "gpu": "h100", "nodes": 1}]}))
    _refused(["evaluate", "--model", "llama3-8b", "--cluster", str(path)], capsys, "pools[0].name: expected a name")


def test_one_link_per_pair_of_pools(capsys, tmp_path):
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"pools": [{"name": "a", "gpu": "a100", "nodes": 1}, {"name": "h", "gpu": "h100",
                                                                                   "nodes": 1}],
                                "links": [{"between": ["a", "h"], "GBps": 25}, {"between": ["h", "a"], "GBps": 50}]}))
    _refused(["evaluate", "--model", "llama3-8b", "--cluster", str(path)], capsys,
             "links[1].between: expected one link per pair of pools")
