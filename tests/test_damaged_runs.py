"""Damaged run directories: each kind of damage healed with no row lost, or named in one line
with exit 2 (in-process runs, compared with the uninterrupted run of the same arguments)."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from tests.run_damage import QUIET, RUNS, build, files, main, parts, rows, same_rows_as, truncate

KINDS = tuple(RUNS)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, str]:
    """Each searcher's uninterrupted run (built once)."""
    root = tmp_path_factory.mktemp("reference")
    return {kind: build(kind, str(root / kind)) for kind in KINDS}


def copy(reference: dict[str, str], kind: str, tmp_path) -> str:
    out = str(tmp_path / kind)
    shutil.copytree(reference[kind], out)
    return out


def one_line(r, *words: str) -> None:
    assert r.code == 2, (r.code, r.err[-2000:])
    assert len(r.lines) == 1 and "Traceback" not in r.err, r.err[-2000:]
    for w in words:
        assert w in r.err, (w, r.err)


@pytest.mark.parametrize("kind", KINDS)
def test_truncated_part_is_named_by_show_and_recomputed_by_resume(reference, tmp_path, kind):
    run = copy(reference, kind, tmp_path)
    victim = parts(run, kind)[1]
    left = truncate(victim)
    rel = os.path.relpath(victim, run)
    before = {p: b for p, b in files(run, "results").items() if p != rel}

    shown = main("show", run, "--top", "1")  # read-only: reads the rest, names what it skipped
    assert shown.code == 0, shown.err
    assert len(shown.lines) == 1 and rel in shown.err and "skipped 1 damaged Parquet part" in shown.err, shown.err
    assert os.path.getsize(victim) == len(left) and not os.path.exists(os.path.join(run, "quarantine"))

    resumed = main("resume", run, *QUIET, "--top", "1")
    assert resumed.code == 0, resumed.err
    assert f"moved damaged part {rel}" in resumed.err
    with open(os.path.join(run, "quarantine", rel), "rb") as f:  # moved aside as it was, never deleted
        assert f.read() == left
    assert rows(run).equals(rows(reference[kind]))  # the part's rows recomputed as the run wrote them
    after = files(run, "results")
    assert all(after[p] == b for p, b in before.items())  # the other parts untouched
    again = main("show", run, "--top", "1")
    assert again.code == 0 and again.err == ""


def test_mcmc_stopped_then_resumed_over_a_truncated_part_equals_uninterrupted(reference, tmp_path, monkeypatch):
    # The run stops at its third checkpoint (KeyboardInterrupt where the state is saved); a part it
    # wrote before is cut short; resume recomputes that part from its record and goes on.
    import sweep._search_engine as engine

    run = str(tmp_path / "run")
    real, calls = engine.save_state, []

    def stop_at_third(path, state, eng):
        calls.append(path)
        if len(calls) == 3:
            raise KeyboardInterrupt
        real(path, state, eng)

    monkeypatch.setattr(engine, "save_state", stop_at_third)
    assert main(*RUNS["mcmc"], "--out", run, *QUIET).code == 130
    monkeypatch.setattr(engine, "save_state", real)
    assert len(parts(run, "mcmc")) == 3
    truncate(parts(run, "mcmc")[1])
    r = main("resume", run, *QUIET, "--top", "0")
    assert r.code == 0, r.err
    assert same_rows_as(run, reference["mcmc"])


def test_tpe_part_written_but_not_told_and_truncated_is_rebuilt_then_told(reference, tmp_path, monkeypatch):
    # Stopped after writing part 1 and before recording it as told; part 1 is then cut short. Resume
    # rebuilds it from its record, finds its trials untold, tells them and goes on.
    import sweep._search_engine as engine

    run = str(tmp_path / "run")
    real, calls = engine.write_json_atomic, []

    def stop_at_second(obj, path):
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt
        real(obj, path)

    monkeypatch.setattr(engine, "write_json_atomic", stop_at_second)
    assert main(*RUNS["tpe"], "--out", run, *QUIET).code == 130
    monkeypatch.setattr(engine, "write_json_atomic", real)
    assert len(parts(run, "tpe")) == 2 and json.load(open(os.path.join(run, "state", "tpe-00.json")))["batches"] == 1
    truncate(parts(run, "tpe")[1])
    r = main("resume", run, *QUIET, "--top", "0")
    assert r.code == 0, r.err
    assert same_rows_as(run, reference["tpe"])


@pytest.mark.parametrize("kind", KINDS[1:])
@pytest.mark.parametrize("record_damage", ["removed", "all records removed", "truncated"])
def test_damaged_part_without_its_record_is_named_and_nothing_moves(reference, tmp_path, kind, record_damage):
    # The resume is refused before any part is moved to quarantine/: the directory stays as it was.
    run = copy(reference, kind, tmp_path)
    victim = parts(run, kind)[1]
    record = os.path.join(run, "state", "asked", kind, os.path.basename(victim).replace(".parquet", ".npz"))
    if record_damage == "removed":
        os.unlink(record)
    elif record_damage == "all records removed":
        shutil.rmtree(os.path.join(run, "state", "asked"))
    else:
        truncate(record)
    truncate(victim)
    before = files(run)
    r = main("resume", run, *QUIET)
    one_line(r, victim if record_damage != "truncated" else "a damaged file", record)
    assert files(run) == before and not os.path.exists(os.path.join(run, "quarantine"))


def test_part_whose_pages_do_not_read_without_its_record_moves_nothing(reference, tmp_path):
    run = copy(reference, "mcmc", tmp_path)
    victim = parts(run, "mcmc")[2]
    flip_a_page(victim, "tokens_per_s")
    os.unlink(os.path.join(run, "state", "asked", "mcmc", os.path.basename(victim).replace(".parquet", ".npz")))
    before = files(run)
    one_line(main("resume", run, *QUIET), victim, "pages that do not read")
    assert files(run) == before and not os.path.exists(os.path.join(run, "quarantine"))


def test_quarantine_never_overwrites(reference, tmp_path):
    run = copy(reference, "grid", tmp_path)
    victim = parts(run, "grid")[0]
    cuts = []
    for _ in range(2):
        cuts.append(truncate(victim))
        assert main("resume", run, *QUIET, "--top", "0").code == 0
    aside = os.path.join(run, "quarantine", os.path.relpath(victim, run))
    assert [open(p, "rb").read() for p in (aside, aside + ".1")] == cuts
    assert rows(run).equals(rows(reference["grid"]))


@pytest.mark.parametrize("damage", ["empty", "junk", "wrong schema"])
def test_other_damaged_parts_are_moved_aside_and_recomputed(reference, tmp_path, damage):
    import pyarrow as pa
    import pyarrow.parquet as pq

    run = copy(reference, "gradient", tmp_path)
    victim = parts(run, "gradient")[3]
    if damage == "empty":
        open(victim, "wb").close()
    elif damage == "junk":
        with open(victim, "wb") as f:
            f.write(np.random.default_rng(0).bytes(5000))
    else:  # a readable Parquet file of another shape
        pq.write_table(pa.table({"tp": [1, 2], "tokens_per_s": [1.0, 2.0]}), victim)
    assert main("show", run).code == 0
    r = main("resume", run, *QUIET, "--top", "0")
    assert r.code == 0 and "moved damaged part" in r.err, r.err
    assert rows(run).equals(rows(reference["gradient"]))


def flip_a_page(path: str, column: str) -> None:
    """Flip the first byte of ``column``'s first page in ``path``: the footer still reads, that
    column's pages do not."""
    import pyarrow.parquet as pq

    meta = pq.read_metadata(path)
    chunk = next(meta.row_group(0).column(i) for i in range(meta.num_columns)
                 if meta.row_group(0).column(i).path_in_schema == column)
    offset = chunk.dictionary_page_offset or chunk.data_page_offset
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0xFF]))
    pq.read_metadata(path)
    with pytest.raises((OSError, ValueError)):
        pq.read_table(path, columns=[column])


@pytest.mark.parametrize("kind", ["grid", "mcmc"])
def test_part_whose_pages_do_not_read_is_skipped_by_show_and_recomputed_by_resume(reference, tmp_path, kind):
    # Footers are checked on opening, pages where they are read. A grid's resume meets the damage
    # when its summary reads the throughput column, moves the part aside and runs again; a search
    # reads its parts whole on resume. show skips the part it could not read and names it.
    run = copy(reference, kind, tmp_path)
    victim = parts(run, kind)[1]
    flip_a_page(victim, "tokens_per_s")
    rel = os.path.relpath(victim, run)
    shown = main("show", run, "--top", "3")
    assert shown.code == 0 and len(shown.lines) == 1 and rel in shown.err and "pages" in shown.err, shown.err
    resumed = main("resume", run, *QUIET, "--top", "3")
    assert resumed.code == 0 and f"moved damaged part {rel}" in resumed.err, resumed.err
    assert rows(run).equals(rows(reference[kind]))


EXPORT = ["export", "--framework", "megatron-core"]


@pytest.mark.parametrize("damage", ["pages", "truncated", "wrong schema"])
def test_export_skips_a_damaged_part_as_show_does(reference, tmp_path, damage):
    # Before, a part whose pages do not read killed export with a traceback (OSError: ZSTD decompression failed).
    import pyarrow as pa
    import pyarrow.parquet as pq

    run = copy(reference, "grid", tmp_path)
    victim = parts(run, "grid")[0]
    if damage == "pages":
        flip_a_page(victim, "tokens_per_s")
    elif damage == "truncated":
        truncate(victim)
    else:
        pq.write_table(pa.table({"tp": [1, 2], "tokens_per_s": [1.0, 2.0]}), victim)
    rel = os.path.relpath(victim, run)
    before = files(run)
    r = main(*EXPORT, "--run", run)
    assert r.code == 0 and len(r.lines) == 1 and rel in r.err and "skipped 1 damaged Parquet part" in r.err, r.err
    assert "--tensor-model-parallel-size" in r.out
    shown = main("show", run, "--top", "1")
    assert shown.lines == [line.replace("plansweep export", "plansweep show") for line in r.lines]
    one_line(main(*EXPORT, "--run", run, "--rank", "100000"), "--rank", rel)  # the damaged part named
    assert files(run) == before


@pytest.mark.parametrize(("flags", "flag"), [(["--model", "llama3-8b"], "--model"),
                                             (["--cluster", "h100x64"], "--cluster"),
                                             (["--hardware", "fitted.json"], "--hardware")])
def test_export_refuses_flags_its_run_makes_meaningless(reference, tmp_path, flags, flag):
    # Before, --model or --cluster naming another study than the run's exported the run's plan, with exit 0.
    one_line(main(*EXPORT, "--run", reference["grid"], *flags), flag)


def test_show_by_uri_skips_a_damaged_part_and_moves_nothing(reference, tmp_path):
    run = copy(reference, "tpe", tmp_path)
    truncate(parts(run, "tpe")[0])
    before = files(run)
    r = main("show", "file://" + run, "--top", "1", "--json")
    assert r.code == 0 and len(r.lines) == 1 and "part-00-000000.parquet" in r.err
    doc = json.loads(r.out)
    assert doc["num_rows"] == len(rows(reference["tpe"])) - len(rows(reference["tpe"]).query("iteration == 0"))
    assert files(run) == before


def test_every_part_damaged_is_one_line(reference, tmp_path):
    run = copy(reference, "grid", tmp_path)
    for p in parts(run, "grid"):
        truncate(p)
    for cmd in (["show", run], ["plot", run, "--out", str(tmp_path / "png")]):
        r = main(*cmd)
        one_line(r, "no Parquet footer")


# ---- outputs over the run being read -----------------------------------------------------------
OVER_THE_RUN = [  # (the command, {run}: the run directory, {part}: its first part, {link}: a link to run.json)
    (["show", "{run}", "--trace", "{run}/run.json"], "--trace"),
    (["show", "{run}", "--trace", "{link}"], "--trace"),
    (["show", "{run}", "--timeline", "{run}/results/searcher=grid/figure.png"], "--timeline"),
    (["export", "--framework", "megatron-core", "--run", "{run}", "--out", "{run}/run.json"], "--out"),
    (["export", "--framework", "megatron-core", "--run", "{run}", "--out", "{part}"], "--out"),
    (["export", "--framework", "megatron-core", "--run", "{run}", "--out", "{run}/state/lock"], "--out"),
    (["plot", "{run}", "--out", "{run}/results"], "--out"),
]


@pytest.mark.parametrize(("argv", "flag"), OVER_THE_RUN)
def test_outputs_over_the_run_being_read_are_refused(reference, tmp_path, argv, flag):
    # Before, show --trace RUN/run.json and export --out over a part wrote over the run they read, and exited 0.
    run = copy(reference, "grid", tmp_path)
    link = tmp_path / "link.json"
    link.symlink_to(os.path.join(run, "run.json"))
    words = [w.format(run=run, part=parts(run, "grid")[0], link=link) for w in argv]
    before = files(run)
    one_line(main(*words), flag, "a path outside the run's run.json, results/, state/")
    assert files(run) == before


# ---- run.json --------------------------------------------------------------------------------
def test_binary_run_json_is_one_line(reference, tmp_path):
    run = copy(reference, "mcmc", tmp_path)
    with open(os.path.join(run, "run.json"), "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n\x00\xff\xfe" * 40)
    before = files(run)
    for cmd in (["resume", run, *QUIET], ["show", run]):
        one_line(main(*cmd), "run.json", "binary bytes")
    assert files(run) == before


WRONG_TYPES = [  # (run, the key changed, its new value, words of the line)
    ("mcmc", ("versions",), [], "versions as an object"),
    ("mcmc", ("options", "budget"), "48", "options.budget as an integer"),
    ("mcmc", ("studies",), {"model": "gpt3-175b"}, "studies as a list"),
    ("tpe", ("seed",), 5.5, "seed as an integer"),
    ("gradient", ("searcher",), ["gradient"], "searcher as a string"),
    ("grid", ("options", "unit_rows"), -3, "options.unit_rows as an integer in"),
    ("grid", ("studies", 0, "model"), [], "studies[0].model as an object"),
    ("mcmc", ("run_id",), None, "run_id as a string"),
    ("grid", ("studies",), [], "studies as a list of at least one study"),
    ("mcmc", ("studies",), [], "studies as a list of at least one study"),
    ("grid", ("command",), "bogus", "command as 'sweep'"),
    ("tpe", ("command",), "sweep", "command as 'search tpe'"),
    ("grid", ("costing",), "x", "costing as an object"),
    ("grid", ("costing", "train_tokens"), -5, "costing.train_tokens as a number of tokens > 0"),
    ("grid", ("costing", "gpu_hour_usd"), {"H100-SXM5-80GB": -3}, "costing.gpu_hour_usd as a string or null"),
    ("grid", ("costing", "gpu_hour_usd"), "h100=-3", "costing.gpu_hour_usd as comma-separated GPU=USD pairs"),
]


@pytest.mark.parametrize(("kind", "key", "value", "words"), WRONG_TYPES)
def test_wrong_typed_run_json_is_one_line(reference, tmp_path, kind, key, value, words):
    run = copy(reference, kind, tmp_path)
    path = os.path.join(run, "run.json")
    info = json.load(open(path))
    where = info
    for k in key[:-1]:
        where = where[k]
    where[key[-1]] = value
    json.dump(info, open(path, "w"))
    before = files(run)
    one_line(main("resume", run, *QUIET), path, words)
    assert files(run) == before


@pytest.mark.parametrize("damage", ["a trace written over it", "versions deleted", "costing.train_tokens -5"])
def test_show_and_plot_refuse_a_run_json_that_is_not_the_runs(reference, tmp_path, damage):
    # Before, show and plot read a run.json without versions (another JSON file written over it) as a run's.
    run = copy(reference, "grid", tmp_path)
    path = os.path.join(run, "run.json")
    info = json.load(open(path))
    if damage == "a trace written over it":
        info = {"traceEvents": [{"name": "process_name", "ph": "M", "pid": 0}], "displayTimeUnit": "ms"}
    elif damage == "versions deleted":
        del info["versions"]
    else:
        info["costing"]["train_tokens"] = -5
    json.dump(info, open(path, "w"))
    before = files(run)
    words = "costing.train_tokens" if damage.startswith("costing") else "an entry 'versions'"
    for cmd in (["show", run], ["show", run, "--by", "problem"], ["plot", run, "--out", str(tmp_path / "png")]):
        one_line(main(*cmd), path, words)
    assert files(run) == before and not os.path.exists(tmp_path / "png")


def test_run_json_studies_a_spec_cannot_be_built_from_are_one_line(reference, tmp_path):
    run = copy(reference, "mcmc", tmp_path)
    path = os.path.join(run, "run.json")
    info = json.load(open(path))
    info["studies"][0]["model"]["layers"] = "ninety-six"
    json.dump(info, open(path, "w"))
    one_line(main("resume", run, *QUIET), path, "studies[0]")


# ---- state files -----------------------------------------------------------------------------
@pytest.mark.parametrize(("kind", "name", "words"), [
    ("mcmc", "mcmc-00.npz", ["a damaged file"]),
    ("gradient", "gradient-00.npz", ["a damaged file"]),
    ("tpe", "tpe-00.json", ["binary bytes"]),
    ("tpe", "tpe-00.journal", ["an Optuna journal"]),
])
def test_junk_state_file_is_one_line(reference, tmp_path, kind, name, words):
    run = copy(reference, kind, tmp_path)
    path = os.path.join(run, "state", name)
    with open(path, "wb") as f:
        f.write(np.random.default_rng(1).bytes(3000))
    before = files(run)
    one_line(main("resume", run, *QUIET), path, *words)
    assert files(run) == before


def test_checkpoint_changed_after_it_was_written_is_one_line(reference, tmp_path):
    run = copy(reference, "mcmc", tmp_path)
    path = os.path.join(run, "state", "mcmc-00.npz")
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["s.x"] = arrays["s.x"] + 1000  # digits out of range, the digest left as it was
    np.savez(path, **arrays)
    one_line(main("resume", run, *QUIET), path, "digest mismatch")
    arrays["s.x"] = arrays["s.x"].astype(np.float64)  # wrong type: named before the digest
    np.savez(path, **arrays)
    one_line(main("resume", run, *QUIET), path, "entry 'x'")


def test_state_that_disagrees_with_the_parts_is_one_line(reference, tmp_path):
    run = copy(reference, "tpe", tmp_path)
    path = os.path.join(run, "state", "tpe-00.json")
    marker = json.load(open(path))
    n = len(parts(run, "tpe"))
    json.dump({**marker, "batches": 0}, open(path, "w"))  # told nothing, yet parts 1 .. n-1 are written
    one_line(main("resume", run, *QUIET), path, f"part {n - 1}")
    json.dump({**marker, "evaluations": marker["evaluations"] - 1}, open(path, "w"))
    one_line(main("resume", run, *QUIET), path, "evaluations")


# ---- a file where the run has a folder -------------------------------------------------------
@pytest.mark.parametrize(("kind", "folder"), [("grid", "results"), ("mcmc", "results"), ("tpe", "state"),
                                              ("grid", "results/searcher=grid"), ("gradient", "state/asked"),
                                              ("mcmc", "state/asked/mcmc"), ("tpe", "quarantine")])
def test_a_file_in_place_of_a_folder_is_one_line(reference, tmp_path, kind, folder):
    # Before, results/ as a file ended the resume in a NotADirectoryError traceback.
    run = copy(reference, kind, tmp_path)
    where = os.path.join(run, folder)
    if os.path.isdir(where):
        shutil.rmtree(where)
    with open(where, "w") as f:
        f.write("not a folder")
    before = files(run)
    one_line(main("resume", run, *QUIET), where, f"{folder}/ is a folder")
    assert files(run) == before


# ---- a directory the user cannot write -------------------------------------------------------
def test_lock_that_cannot_be_opened_is_one_line(reference, tmp_path):
    run = copy(reference, "grid", tmp_path)
    lock = os.path.join(run, "state", "lock")
    os.unlink(lock)
    os.mkdir(lock)  # stands for a lock this user cannot open (root writes through file modes)
    before = files(run)
    one_line(main("resume", run, *QUIET), "a run directory this user can write", lock)
    assert files(run) == before
    assert main("show", run).code == 0  # reading needs no lock


def _resume_read_only(run: str) -> tuple[int, str]:
    """`plansweep resume RUN` with RUN read-only: file modes for a user; for root (who writes through
    them) a read-only bind mount in a mount namespace of its own, which ends with the process."""
    if os.geteuid() != 0:
        modes = {}
        for root, _dirs, names in os.walk(run):
            for p in [root] + [os.path.join(root, n) for n in names]:
                modes[p] = os.stat(p).st_mode
        try:
            for p in sorted(modes, reverse=True):
                os.chmod(p, modes[p] & ~0o222)
            r = main("resume", run, *QUIET)
            return r.code, r.err
        finally:
            for p in sorted(modes):
                os.chmod(p, modes[p])
    import shlex
    import subprocess
    import sys

    from tests.sweep_helpers import env

    q = shlex.quote(run)
    script = (f"mount --bind {q} {q} && mount -o remount,bind,ro {q} || exit 99; "
              f"exec {shlex.quote(sys.executable)} -m cli resume {q} --in-process --no-progress")
    try:
        proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                              capture_output=True, text=True, env=env(), timeout=120)
    except FileNotFoundError:
        pytest.skip("root, and no unshare(1) to mount the run read-only")
    if proc.returncode == 99 or "unshare: " in proc.stderr:
        pytest.skip(f"root, and no read-only mount allowed here ({proc.stderr.strip()[:200]})")
    return proc.returncode, proc.stderr


def test_read_only_run_directory_is_one_line(reference, tmp_path):
    run = copy(reference, "mcmc", tmp_path)
    before = files(run)
    code, err = _resume_read_only(run)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "a run directory this user can write" in err
    assert files(run) == before
    assert main("show", run, "--top", "1").code == 0
