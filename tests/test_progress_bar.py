"""The progress bar where the terminal reports a size of 0 x 0 (under `script`, in CI, in some
IDEs), and the units an MLP's throughput is shown in (samples/s, in the bar and the summary)."""

from __future__ import annotations

import os
import sys

import pytest
import tqdm.std

import cli
import costmodel
from sweep._grid import Progress, terminal_shape

MLP = ["--model", "mlp-64x8192", "--cluster", "a100x16-flat", "--dp", "1,2,4", "--tp", "1,2,4", "--pp", "1,2",
       "--microbatches", "1,4", "--global-batch", "8192", "--schedule", "gpipe", "--recompute", "none",
       "--sequence-parallel", "false", "--zero-stage", "0", "--partial-gpus", "--framework", "generic"]  # GPipe: generic runs it


@pytest.fixture
def zero_terminal(monkeypatch, tmp_path):
    """A file to stand for stderr on a terminal that reports 0 columns and 0 rows: os.get_terminal_size
    says so, and tqdm's own reader gives what it makes of it (-1 and -1, as measured under
    `script` with `stty cols 0 rows 0`). The test puts it in sys.stderr itself (pytest's capture
    sets sys.stderr again between a fixture and its test)."""
    f = open(tmp_path / "stderr.txt", "w+")  # noqa: SIM115 (closed below)
    monkeypatch.setattr(os, "get_terminal_size", lambda *a: os.terminal_size((0, 0)))
    monkeypatch.setattr(tqdm.std, "_screen_shape_wrapper", lambda: (lambda fp: (-1, -1)))
    yield f
    f.close()


def _written(f) -> str:
    f.flush()
    f.seek(0)
    return f.read()


def test_tqdm_alone_draws_nothing_on_a_zero_terminal(zero_terminal, monkeypatch):
    # the condition the bar must survive: tqdm with its own terminal size hides every line
    monkeypatch.setattr(sys, "stderr", zero_terminal)
    bar = tqdm.std.tqdm(total=5, file=sys.stderr, dynamic_ncols=True, mininterval=0, desc="sweep")
    for _ in range(5):
        bar.update(1)
    bar.close()
    assert _written(zero_terminal).strip() == ""


def test_progress_draws_on_a_zero_terminal(zero_terminal, monkeypatch):
    monkeypatch.setattr(sys, "stderr", zero_terminal)
    assert terminal_shape(sys.stderr) == (None, None)
    bar = Progress(5, 0, desc="sweep", unit="unit", models=[costmodel.model_preset("gpt3-175b")])
    for _ in range(5):
        bar.update(1, 1000, 123.0)
    bar.bar.refresh()
    bar.close()
    text = _written(zero_terminal)
    assert "sweep" in text and "5/5" in text and "rows/s" in text and "best 123 tokens/s" in text


def test_terminal_shape_of_a_real_size(monkeypatch):
    monkeypatch.setattr(os, "get_terminal_size", lambda *a: os.terminal_size((100, 30)))
    assert terminal_shape(sys.__stdout__) == (99, 30)  # tqdm's convention: one column spare


def test_an_mlp_is_shown_in_samples_per_second(capsys, tmp_path):
    bar = Progress(1, 0, desc="sweep", unit="unit", enabled=False, models=[costmodel.model_preset("mlp-64x8192")])
    assert bar.rate_unit == "samples/s"
    assert cli.main(["sweep", *MLP, "--out", str(tmp_path / "run"), "--in-process", "--no-progress",
                     "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "best strategies for mlp-64x8192 on a100x16-flat (samples/s, closed-form pipeline prices):" in out
    assert "tokens/s" not in out
