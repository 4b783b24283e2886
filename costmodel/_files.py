"""Files written whole or not at all (a hidden temporary name beside the file, then a rename), and
input files read as text with one InputError for every way reading them can fail."""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator

from costmodel._errors import InputError

# Temporary names start with "." (pyarrow.dataset and pandas never read them) and end with TMP_SUFFIX.
TMP_PREFIX = "."
TMP_SUFFIX = ".tmp"


@contextlib.contextmanager
def replaced_atomically(path: str | os.PathLike) -> Iterator[str]:
    """A hidden temporary name in ``path``'s directory to write; when the block ends the file is
    fsync'd and renamed over ``path`` (atomic on POSIX file systems), so ``path`` is whole or absent,
    and the directory is fsync'd so that the rename itself survives a crash of the machine.
    The temporary file is removed if the block fails."""
    directory = os.path.dirname(os.fspath(path))
    tmp = _tmp_name(os.fspath(path))
    try:
        yield tmp
        _fsync_file(tmp)
        os.replace(tmp, path)
        fsync_directory(directory or ".")
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def check_file_path(argument: str, path: str | os.PathLike) -> None:
    """InputError naming the command-line ``argument`` unless ``path`` can name a file to write: not empty, not a
    directory, in a directory that exists (checked before the command's work, which may be long)."""
    text = os.fspath(path)
    if not text:
        raise InputError(argument, "a writable file path", text)
    if os.path.isdir(text):
        raise InputError(argument, "a writable file path", f"{text} (Is a directory)")
    if not os.path.isdir(os.path.dirname(text) or "."):
        raise InputError(argument, "a writable file path", f"{text} (no such directory: {os.path.dirname(text)})")


def unwritable(argument: str, path: str | os.PathLike, exc: OSError) -> InputError:
    """The InputError naming ``argument`` for an OSError ``exc`` met writing ``path``: the path and the OS's reason."""
    return InputError(argument, "a writable file path", f"{os.fspath(path)} ({exc.strerror or exc})")


@contextlib.contextmanager
def replaced_for(argument: str, path: str | os.PathLike) -> Iterator[str]:
    """replaced_atomically(path) for the file that the command-line ``argument`` names: a path that cannot name a
    file (check_file_path) or an OSError while writing or renaming it is one InputError naming ``argument``; the old
    file is then as it was and no temporary file is left."""
    check_file_path(argument, path)
    try:
        with replaced_atomically(path) as tmp:
            open(tmp, "xb").close()  # an unwritable folder fails here, with the OS's reason (writers word it anew)
            yield tmp
    except OSError as exc:
        raise unwritable(argument, path, exc) from None


@contextlib.contextmanager
def replaced_together(argument: str, paths: list[str | os.PathLike]) -> Iterator[list[str]]:
    """Temporary names to write for each of ``paths`` (files that the command-line ``argument`` names); when the
    block ends all are renamed into place, or, where one cannot be, none is: those already renamed are put back from
    hard links (copies where the file system has none) taken beforehand. An OSError is one InputError naming
    ``argument`` and the file it met; no temporary file is left."""
    paths = [os.fspath(p) for p in paths]
    tmps, olds = [_tmp_name(p) for p in paths], [_tmp_name(p) for p in paths]
    done: list[int] = []
    at = paths[0]
    try:
        for at, tmp in zip(paths, tmps, strict=True):  # an unwritable folder fails here, with the OS's reason
            open(tmp, "xb").close()
        yield tmps
        for tmp in tmps:
            _fsync_file(tmp)
        for at, old in zip(paths, olds, strict=True):
            _keep(at, old)
        for i, (tmp, at) in enumerate(zip(tmps, paths, strict=True)):
            os.replace(tmp, at)
            done.append(i)
        for directory in dict.fromkeys(os.path.dirname(p) or "." for p in paths):
            fsync_directory(directory)
    except OSError as exc:
        _put_back([(paths[i], olds[i]) for i in done])
        raise unwritable(argument, at, exc) from None
    finally:
        for name in tmps + olds:
            if os.path.lexists(name):
                os.unlink(name)


def _tmp_name(path: str) -> str:
    """A hidden temporary name beside ``path`` (TMP_PREFIX ... TMP_SUFFIX)."""
    directory, name = os.path.split(path)
    return os.path.join(directory, f"{TMP_PREFIX}{name}.{uuid.uuid4().hex}{TMP_SUFFIX}")


def _fsync_file(path: str) -> None:
    """fsync the file ``path`` (its bytes reach the disk before it is renamed into place)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _keep(path: str, old: str) -> None:
    """The file at ``path``, if any, also at ``old``: a hard link, or a copy where the file system has none."""
    if not os.path.lexists(path):
        return
    try:
        os.link(path, old)
    except OSError:
        shutil.copy2(path, old)


def _put_back(renamed: list[tuple[str, str]]) -> None:
    """Undo renames into place: each path back to the file kept at its ``old`` name, or removed where it was new
    (best effort: the error that called for it is the one reported)."""
    for path, old in renamed:
        with contextlib.suppress(OSError):
            if os.path.lexists(old):
                os.replace(old, path)
            else:
                os.unlink(path)


def fsync_directory(directory: str) -> None:
    """fsync a directory (its entries reach the disk); where the platform refuses it, nothing."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class DuplicateKey(ValueError):
    """A key an object of an input file names twice (JSON and YAML keep the last silently)."""


def unique_pairs(pairs: list) -> dict:
    """json.loads' object_pairs_hook: the object, refusing a key it names twice (DuplicateKey)."""
    out = {}
    for k, v in pairs:
        if k in out:
            raise DuplicateKey(k)
        out[k] = v
    return out


def read_text(path: str | os.PathLike, argument: str, what: str) -> str:
    """The text of the input file ``path`` (UTF-8, a byte-order mark allowed); InputError naming
    ``argument``, expecting ``what`` (e.g. "a JSON or YAML file"), where it is missing, not a
    file, unreadable or not UTF-8 text."""
    if os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path):  # a FIFO, a device: may block
        raise InputError(argument, f"{what}, a regular file", f"{os.fspath(path)}: not a regular file")
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        raise InputError(argument, f"an existing {what}", os.fspath(path)) from None
    except IsADirectoryError:
        raise InputError(argument, what, f"{os.fspath(path)} is a directory") from None
    except OSError as exc:
        raise InputError(argument, f"a readable {what}", f"{os.fspath(path)} ({exc.strerror})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(argument, f"{what} in UTF-8 text",
                         f"{os.fspath(path)}: byte 0x{data[exc.start]:02x} at offset {exc.start}") from None
