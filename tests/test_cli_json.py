"""Every --json output is standard JSON (a strict parser reads it: no Infinity or NaN), with one
vocabulary: reasons by name, counts as numbers."""

import json

import pytest

from cli import main
from tests.run_fixtures import seed000_table, write_fixture_run


def _strict(text: str):
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("argv", [
    ["evaluate", "--tp", "8", "--pp", "8", "--json"],
    # out of memory: the infinite step time is null
    ["evaluate", "--tp", "1", "--pp", "1", "--dp", "512", "--global-batch", "512", "--json"],
    ["schedule", "--schedule", "1f1b", "--devices", "4", "--microbatches", "8", "--tf", "1", "--tb", "2", "--json"],
    ["validate", "narayanan2021-table1", "--json"],
    ["search", "random", "--budget", "64", "--json"],
])
def test_json_outputs_parse_strictly(argv, capsys):
    assert main(argv) == 0
    doc = _strict(capsys.readouterr().out)
    assert isinstance(doc, dict)
    if argv[0] == "evaluate" and argv[2] == "1":
        assert doc["metrics"]["feasible"] is False and doc["metrics"]["step_time_s"] is None
        assert doc["metrics"]["reason"] == "out_of_memory"
    if argv[0] == "search":
        assert isinstance(doc["space_size"], int)
        assert all(isinstance(r["reason"], str) for r in doc["best"])


def test_show_json_parses_strictly(tmp_path, capsys):
    import costmodel

    model, cluster = costmodel.model_preset("seed000-mlp"), costmodel.cluster_preset("seed000-16")
    run = write_fixture_run(tmp_path / "r", model, cluster, seed000_table())
    assert main(["show", str(run), "--json"]) == 0
    _strict(capsys.readouterr().out)


def test_the_text_report_of_an_infeasible_plan_has_no_nan(capsys):
    """An out-of-memory plan's step time is infinite (null in --json): the text report says n/a, not nan or inf."""
    from cli import main

    assert main(["evaluate", "--model", "llama4-scout", "--cluster", "h100x64", "--tp", "4", "--ep", "8"]) == 0
    out = capsys.readouterr().out
    assert "INFEASIBLE: out_of_memory" in out and "step time          n/a   0 tokens/s" in out
    assert "nan" not in out and " inf " not in out
