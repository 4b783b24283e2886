"""Fuzzing a run directory's own files: run.json, the checkpoints (mcmc-*.npz, gradient-*.npz), TPE's
marker and journal, the records of search parts, and Parquet parts cut short or replaced.

Hypothesis damages one file of a finished run, or of a run stopped part-way (values of the wrong
type, out of range, entries missing, bytes cut short, flipped or replaced by junk), then runs
`plansweep show` (where it reads that file) and `plansweep resume --in-process` in this process.
The property, for every case: exit 0 or 2, no traceback, one line on stderr with exit 2; nothing
already written lost (every part present before is still there or in quarantine/, byte for byte;
a refused resume changes no file); nothing half-written (no temporary file left, every part
written reads whole, and after a search resumed every part).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.run_damage import QUIET, SMALL, files, main

GRID_SMALL = ["sweep", *SMALL, "--unit-rows", "10000", "--keep", "all"]  # one unit of 360 rows
KINDS = ("grid", "mcmc", "tpe", "gradient")
# The files damaged, per run: (run, path in the run directory, how it is read).
TARGETS = {
    "run.json": [(k, "run.json", "json") for k in KINDS],
    "checkpoint": [("mcmc", "state/mcmc-00.npz", "npz"), ("gradient", "state/gradient-00.npz", "npz")],
    "tpe": [("tpe", "state/tpe-00.json", "json"), ("tpe", "state/tpe-00.journal", "journal")],
    "record": [("mcmc", "state/asked/mcmc/part-00-000001.npz", "npz"),
               ("gradient", "state/asked/gradient/part-00-000002.npz", "npz"),
               ("tpe", "state/asked/tpe/part-00-000001.npz", "npz")],
    "part": [(k, f"results/searcher={k}/part-00-{i:06d}.parquet", "bytes") for k, i in
             (("grid", 0), ("mcmc", 1), ("tpe", 2), ("gradient", 3))],
    # runs stopped part-way, which resume goes on with (their searchers then use what they loaded)
    "stopped": [("stopped-mcmc", "state/mcmc-00.npz", "npz"), ("stopped-gradient", "state/gradient-00.npz", "npz"),
                ("stopped-tpe", "state/tpe-00.json", "json"), ("stopped-tpe", "state/tpe-00.journal", "journal"),
                ("stopped-mcmc", "run.json", "json")],
}
FUZZ_EXAMPLES = 600  # in all: run.json 200, checkpoints 160, TPE's files 90, records 70, parts 50, stopped 30


def fuzz(examples: int):
    """Hypothesis settings of a fuzz test: ``examples`` cases, the same ones on every run (derandomized)."""
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, str]:
    """A finished run of each searcher, small (a second or two each), built once."""
    from tests.run_damage import RUNS

    root = tmp_path_factory.mktemp("fuzz")
    out = {}
    for kind in KINDS:
        argv = GRID_SMALL if kind == "grid" else RUNS[kind]
        out[kind] = str(root / kind)
        r = main(*argv, "--out", out[kind], *QUIET, "--top", "0")
        assert r.code == 0, r.err
    for kind, writer in (("mcmc", "save_state"), ("gradient", "save_state"), ("tpe", "write_json_atomic")):
        out[f"stopped-{kind}"] = stopped(kind, writer, str(root / f"stopped-{kind}"))
    return out


def stopped(kind: str, writer: str, out: str) -> str:
    """The run ``kind`` stopped (KeyboardInterrupt) where it writes its second checkpoint."""
    import sweep._search_engine as engine
    from tests.run_damage import RUNS

    real, calls = getattr(engine, writer), []

    def stop(*args):
        calls.append(args)
        if len(calls) == 2:
            raise KeyboardInterrupt
        real(*args)

    setattr(engine, writer, stop)
    try:
        assert main(*RUNS[kind], "--out", out, *QUIET).code == 130
    finally:
        setattr(engine, writer, real)
    return out


# ---- damage ----------------------------------------------------------------------------------
WRONG = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                  st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                  st.lists(st.integers(-5, 5), max_size=3),
                  st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))
OUT_OF_RANGE = st.sampled_from([-1, 0, -(10**9), 10**12, 2**63, 1.5, -0.5, math.nan, math.inf])


def _paths(obj, prefix=()) -> list[tuple]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, prefix + (i,))
    return out


def damage_value(data, obj):
    """``obj`` (parsed JSON) with one entry deleted, or set to a value of another type or out of range."""
    paths = _paths(obj)
    shallow = [p for p in paths if len(p) <= 2]
    path = data.draw(st.sampled_from(shallow if data.draw(st.booleans()) else paths))
    how = data.draw(st.sampled_from(["delete", "wrong", "range"]))
    value = data.draw(WRONG if how == "wrong" else OUT_OF_RANGE)
    if not path:
        return value
    parent = obj
    for k in path[:-1]:
        parent = parent[k]
    if how == "delete":
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return obj


def damage_bytes(data, raw: bytes) -> bytes:
    how = data.draw(st.sampled_from(["truncate", "flip", "junk", "empty"]))
    if how == "truncate":
        return raw[:data.draw(st.integers(0, max(len(raw) - 1, 0)))]
    if how == "flip":
        out = bytearray(raw)
        for _ in range(data.draw(st.integers(1, 4))):
            i = data.draw(st.integers(0, len(out) - 1))
            out[i] ^= data.draw(st.integers(1, 255))
        return bytes(out)
    if how == "junk":
        return data.draw(st.binary(min_size=1, max_size=300))
    return b""


def damage_npz(data, path: str) -> None:
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    key = data.draw(st.sampled_from(sorted(arrays)))
    how = data.draw(st.sampled_from(["delete", "dtype", "shape", "range", "drop digest"]))
    a = arrays[key]
    if how == "delete" or (how == "drop digest" and "digest" in arrays):
        del arrays["digest" if how == "drop digest" else key]
        if how == "drop digest" and data.draw(st.booleans()):  # and one value out of range too
            key = data.draw(st.sampled_from(sorted(arrays)))
            if arrays[key].dtype.kind == "f":
                arrays[key] = np.full(arrays[key].shape, data.draw(OUT_OF_RANGE), dtype=arrays[key].dtype)
            elif arrays[key].dtype.kind in "iu":
                arrays[key] = np.full(arrays[key].shape, np.iinfo(arrays[key].dtype).max, dtype=arrays[key].dtype)
    elif how == "dtype":
        to = data.draw(st.sampled_from([np.float64, np.int8, np.bool_, "U3"]))
        try:
            arrays[key] = a.astype(to)
        except ValueError:  # text that is not a number: zeros of that type
            arrays[key] = np.zeros(a.shape, dtype=to)
    elif how == "shape":
        arrays[key] = np.zeros(data.draw(st.sampled_from([(), (0,), (3,), (2, 2), (1, 1, 1)])), dtype=a.dtype)
    elif how == "range" and a.dtype.kind in "iuf":
        value = data.draw(OUT_OF_RANGE)
        if a.dtype.kind in "iu":  # the nearest the array's type holds
            info = np.iinfo(a.dtype)
            value = info.min if isinstance(value, float) else min(max(value, info.min), info.max)
        arrays[key] = np.full(a.shape, value, dtype=a.dtype)
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def damage(data, run_dir: str, rel: str, kind: str) -> None:
    path = os.path.join(run_dir, rel)
    with open(path, "rb") as f:
        raw = f.read()
    if kind == "bytes" or data.draw(st.booleans()):  # bytes, or values
        new = damage_bytes(data, raw)
    elif kind == "npz":
        damage_npz(data, path)
        return
    elif kind == "json":
        new = json.dumps(damage_value(data, json.loads(raw))).encode()
    else:  # the journal: one JSON record per line, one of them damaged
        lines = raw.decode().splitlines()
        i = data.draw(st.integers(0, len(lines) - 1))
        lines[i] = json.dumps(damage_value(data, json.loads(lines[i])))
        new = ("\n".join(lines) + "\n").encode()
    with open(path, "wb") as f:
        f.write(new)


# ---- the property ----------------------------------------------------------------------------
def _parts(snapshot: dict[str, bytes]) -> dict[str, bytes]:
    return {p: b for p, b in snapshot.items() if p.startswith("results" + os.sep) and p.endswith(".parquet")}


def check(r, before: dict[str, bytes], run_dir: str, what: str) -> None:
    assert r.code in (0, 2), f"{what}: exit {r.code}\n{r.err[-3000:]}"
    assert "Traceback" not in r.err, f"{what}\n{r.err[-3000:]}"
    if r.code == 2:
        assert len(r.err.strip().splitlines()) == 1, f"{what}: exit 2 with\n{r.err}"
    after = files(run_dir)
    aside = {b for p, b in after.items() if p.startswith("quarantine" + os.sep)}
    for p, b in _parts(before).items():  # nothing already written lost
        assert after.get(p) == b or b in aside, f"{what}: {p} lost"
    if r.code == 2:  # a refusal moves and changes nothing (but the lock's pid and records Optuna appended)
        assert not aside - {b for p, b in before.items() if p.startswith("quarantine" + os.sep)}, \
            f"{what}: a part moved to quarantine/ on exit 2"
        for p, b in before.items():
            kept = after.get(p) == b or (p.endswith(".journal") and after.get(p, b"").startswith(b))
            assert p.endswith("lock") or kept, f"{what}: {p} changed on exit 2"
    temporaries = [p for p in after if os.path.basename(p).startswith(".") and p.endswith(".tmp")]
    assert not temporaries, f"{what}: left {temporaries}"
    # A search resumed reads its parts whole and heals them all; a grid's are checked by footer and
    # schema (pages: where a read meets them), so there the parts it wrote must read whole.
    healed = r.code == 0 and what.endswith("resume") and not what.startswith("grid")
    for p, b in _parts(after).items():  # nothing half-written: every part written reads whole
        if healed or before.get(p) != b:
            pq.read_table(os.path.join(run_dir, p))


def run_case(runs: dict[str, str], data, group: str) -> None:
    kind, rel, how = data.draw(st.sampled_from(TARGETS[group]))
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        run_dir = os.path.join(tmp, kind.removeprefix("stopped-"))
        shutil.copytree(runs[kind], run_dir)
        if group == "record":  # a record is read where its part is gone
            part = rel.replace("state/asked/", "results/searcher=").replace(".npz", ".parquet")
            os.truncate(os.path.join(run_dir, part), 10)
        damage(data, run_dir, rel, how)
        what = f"{kind}: {rel} damaged"
        if group in ("run.json", "part"):  # show reads run.json and the parts, not the state
            before = files(run_dir)
            check(main("show", run_dir, "--top", "1"), before, run_dir, what + ", show")
        before = files(run_dir)
        top = "1" if group == "part" else "0"  # the best rows read every part's pages (a grid's are not checked)
        check(main("resume", run_dir, *QUIET, "--top", top), before, run_dir, what + ", resume")


@fuzz(200)
@given(data=st.data())
def test_fuzz_run_json(runs, data):
    run_case(runs, data, "run.json")


@fuzz(160)
@given(data=st.data())
def test_fuzz_checkpoints(runs, data):
    run_case(runs, data, "checkpoint")


@fuzz(90)
@given(data=st.data())
def test_fuzz_tpe_marker_and_journal(runs, data):
    run_case(runs, data, "tpe")


@fuzz(70)
@given(data=st.data())
def test_fuzz_records_of_parts_gone(runs, data):
    run_case(runs, data, "record")


@fuzz(50)
@given(data=st.data())
def test_fuzz_parts(runs, data):
    run_case(runs, data, "part")


@fuzz(30)
@given(data=st.data())
def test_fuzz_runs_stopped_part_way(runs, data):
    run_case(runs, data, "stopped")
