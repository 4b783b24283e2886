"""Ctrl-C during a sweep on the embedded Ray: one line, exit 130, what is written stays whole.

A terminal's Ctrl-C sends SIGINT to every process of its foreground process group (the driver,
the raylet, the workers), and a second press often follows. The driver must end with its one
line, never a Python traceback nor an abort of Ray's core worker, and every part on disk must be
whole (resuming from them is tested with kill -9 in tests/test_sweep_grid.py)."""

import os
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

from tests.sweep_helpers import env, parts

# About 40 units of 10^4 rows: the first is on disk after a few seconds, the last well after.
SPACE = ["--model", "llama3-70b", "--cluster", "h100x1024", "--unit-rows", "10000"]


@pytest.mark.slow
def test_ctrl_c_twice_during_a_sweep_is_one_line_and_leaves_whole_parts(tmp_path):
    out = str(tmp_path / "run")
    proc = subprocess.Popen([sys.executable, "-m", "cli", "sweep", *SPACE, "--workers", "2", "--out", out],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env(), start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    directory = os.path.join(out, "results", "searcher=grid")
    t0 = time.monotonic()
    while not parts(directory):
        assert proc.poll() is None and time.monotonic() - t0 < 120, "no part appeared"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(0.2)
    try:
        os.killpg(proc.pid, signal.SIGINT)
    except ProcessLookupError:
        pass
    err = proc.communicate(timeout=120)[1].decode(errors="replace")
    lines = [x for x in err.replace("\r", "\n").splitlines() if x.strip() and not x.startswith("sweep:")]
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "Check failed" not in err, err[-3000:]
    assert lines[-1].startswith("interrupted:") and "plansweep resume" in lines[-1]
    names = os.listdir(directory)
    assert len(parts(directory)) < 40 and len(names) == len(parts(directory))  # stopped early; no temporary
    for name in names:  # every part is whole
        pq.read_table(os.path.join(directory, name))


def test_an_interrupt_removes_the_temporary_a_stopped_worker_left(tmp_path, monkeypatch, capsys):
    # A worker stopped by the Ctrl-C in the middle of writing a part leaves its hidden temporary
    # (it dies before its own clean-up): once the run has stopped, the command removes it, and
    # the parts written before stay.
    import cli
    import cli._cmd_sweep as cmd
    from costmodel._files import TMP_PREFIX, TMP_SUFFIX

    out = tmp_path / "run"
    argv = ["sweep", "--model", "gpt3-175b", "--cluster", "h100x1024", "--tp", "8", "--pp", "8,16",
            "--out", str(out), "--in-process", "--no-progress"]
    assert cli.main(argv) == 0
    directory = out / "results" / "searcher=grid"
    written = sorted(os.listdir(directory))
    stray = directory / f"{TMP_PREFIX}part-00-000009.parquet.0123abcd{TMP_SUFFIX}"

    def stopped_mid_write(rd, args):
        stray.write_bytes(b"PAR1 half a part")
        raise KeyboardInterrupt

    monkeypatch.setattr(cmd, "_run_engine", stopped_mid_write)
    assert cli.main(["resume", str(out), "--in-process", "--no-progress"]) == 130
    assert "interrupted:" in capsys.readouterr().err
    assert sorted(os.listdir(directory)) == written and written
