"""TPE's journal: rewound to a recorded size it is the studies as they were then, and a resumed
searcher draws the batch a kill cut short again; its lock is never held by a dead process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from costmodel import InputError, cluster_preset, evaluate, model_preset
from search import Space, TPESearcher
from search._tpe import FlockJournalLock, journal_size, rewind_journal
from tests.searcher_contract import columns_equal
from tests.sweep_helpers import ROOT, env


@pytest.fixture(scope="module")
def small():
    # 1,152 combinations (TPE rarely draws a point twice here: a batch is a few trials)
    return Space.from_options(model_preset("gpt3-175b"), cluster_preset("h100x1024"), global_batch=1536, base="fixed",
                              tp=[2, 4, 8], pp=[1, 4, 8, 16], micro_batch=[1, 2], schedule=["1f1b", "interleaved"],
                              vpp=[1, 2, 3], recompute=["selective", "full"], sequence_parallel=[False, True],
                              zero_stage=[1, 3])


def _batch(searcher, space, n=8):
    table = searcher.ask(n)
    return table, evaluate(space.model, space.cluster, table)


def _trials(searcher) -> list[tuple]:
    return [(t.number, t.state.name, t.params, t.values, t.user_attrs, t.system_attrs)
            for study in searcher._studies for t in study.get_trials(deepcopy=False)]


def test_a_rewound_journal_draws_the_interrupted_batch_again(tmp_path, small):
    # Two batches told, the size recorded; then a third batch asked and half told, as a kill leaves
    # it (trials told, trials running). Rewound to the size, the journal holds the first two
    # batches' trials exactly, and a searcher on it asks the third batch the uninterrupted one asked.
    path = str(tmp_path / "tpe.journal")
    ref = TPESearcher(small, seed=4, n_startup_trials=4)
    for _ in range(2):
        ref.tell(*_batch(ref, small))
    third = ref.ask(8)

    run = TPESearcher(small, seed=4, storage=path, n_startup_trials=4)
    for _ in range(2):
        run.tell(*_batch(run, small))
    size, told = journal_size(path), _trials(run)
    run.ask(8)
    for trial in run._pending[:3]:  # part of the batch told
        run.study.tell(trial, 1.0)
    assert journal_size(path) > size
    with open(path, "ab") as f:
        f.write(b'{"op_code":4,"worker_id":"')  # and a line cut short by the kill

    rewind_journal(path, size, why="test")
    assert journal_size(path) == size
    again = TPESearcher(small, seed=4, storage=path, n_startup_trials=4)
    assert _trials(again) == told
    assert columns_equal(again.ask(8), third)


def test_a_journal_that_is_not_the_recorded_one_is_refused(tmp_path):
    path = str(tmp_path / "tpe.journal")
    with open(path, "wb") as f:
        f.write(b'{"a":1}\n{"b":2}\n')
    for size, got in [(40, "16 bytes"), (10, "no line ending there")]:
        with pytest.raises(InputError, match=got) as err:
            rewind_journal(path, size, why="the size tpe-00.json records")
        assert err.value.argument == path and "tpe-00.json" in str(err.value)
    rewind_journal(path, 8, why="test")
    assert open(path, "rb").read() == b'{"a":1}\n'


def test_a_journal_lock_whose_holder_is_killed_is_taken_at_once(tmp_path):
    # A process takes the lock and is SIGKILLed holding it: while it lives the lock waits for it;
    # once it is dead the lock is taken at once.
    path = str(tmp_path / "tpe.journal")
    open(path, "wb").close()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom search._tpe import FlockJournalLock\n"
        f"FlockJournalLock({path!r}).acquire()\nprint('held', flush=True)\ntime.sleep(60)")],
        stdout=subprocess.PIPE, text=True, env=env(), cwd=ROOT)
    try:
        assert holder.stdout.readline().strip() == "held"
        lock, taken = FlockJournalLock(path), threading.Event()
        thread = threading.Thread(target=lambda: (lock.acquire(), taken.set()), daemon=True)
        thread.start()
        assert not taken.wait(0.5), "taken while its holder lives"
        os.kill(holder.pid, signal.SIGKILL)
        t0 = time.monotonic()
        assert taken.wait(5)
        assert time.monotonic() - t0 < 0.5
        lock.release()
    finally:
        holder.kill()
        holder.wait()
    assert os.listdir(tmp_path) == ["tpe.journal"]  # no lock file left beside the journal
