"""The command line run in the test's own process: what `python -m cli ARGS` gives a test
(exit code, stdout, stderr) without the ~1.3 s of CPU a fresh interpreter spends importing
numpy, pyarrow, pandas and the package before it reads its first argument. For tests that
check what a command prints and returns; the tests of the process itself (its start-up, its
signals, `python -m cli`'s exit status) keep their subprocesses."""

from __future__ import annotations

import contextlib
import io
import subprocess
import warnings

# What a fresh interpreter shows by default (Python's own filters, no -W): these are hidden.
_HIDDEN = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)


def cli(*argv: str) -> subprocess.CompletedProcess:
    """plansweep ``argv`` in this process, as subprocess.run(..., capture_output=True, text=True)
    would report it: argparse's exits included, and the warnings a fresh interpreter would print
    on stderr written there (a one-line check still sees them). An exception the command does
    not turn into its one-line error propagates: the test fails with its traceback."""
    import cli as plansweep

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()
        warnings.simplefilter("default")
        for category in _HIDDEN:
            warnings.filterwarnings("ignore", category=category)
        try:
            code = plansweep.main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    text = err.getvalue() + "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line)
                                    for w in caught)
    return subprocess.CompletedProcess(["plansweep", *argv], int(code or 0), out.getvalue(), text)


def refuse_renames_onto(monkeypatch, *paths) -> None:
    """os.replace fails with EPERM onto each of ``paths``, as onto a file made immutable (chattr +i), which
    root, who runs some of these tests, could otherwise still replace."""
    import errno
    import os

    refused = {os.fspath(p) for p in paths}
    real = os.replace

    def replace(src, dst, **kw):
        if os.fspath(dst) in refused:
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), os.fspath(src), None, os.fspath(dst))
        return real(src, dst, **kw)

    monkeypatch.setattr(os, "replace", replace)


# Ways an output path cannot be written: under a missing folder, a folder, "", and an existing file the rename
# onto which is refused (refuse_renames_onto).
UNWRITABLE = ("missing folder", "folder", "empty", "refused rename")


def unwritable_path(tmp_path, monkeypatch, where: str, name: str) -> tuple:
    """(the old file ``tmp_path/name``, holding "old\n", that a failing write must leave as it is; the output path
    that cannot be written as ``where`` says, one of UNWRITABLE)."""
    old = tmp_path / name
    old.write_text("old\n")
    (tmp_path / "dir").mkdir()
    out = {"missing folder": str(tmp_path / "none" / name), "folder": str(tmp_path / "dir"), "empty": "",
           "refused rename": str(old)}[where]
    if where == "refused rename":
        refuse_renames_onto(monkeypatch, old)
    return old, out


def one_stderr_line(capsys, needle: str) -> None:
    """What cli.main, called in this process, wrote to stderr (pytest's ``capsys``): one line holding ``needle``,
    no traceback."""
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and needle in err and "Traceback" not in err, err


def one_error_line(result: subprocess.CompletedProcess, needle: str) -> None:
    """``result`` (cli's) failed as bad input does: exit code 2, one line on stderr holding ``needle``, no
    traceback."""
    lines = result.stderr.splitlines()
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in result.stderr, result.stderr
