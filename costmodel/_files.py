"""Files written whole or not at all (a hidden temporary name beside the file, then a rename), and
input files read as text with one InputError for every way reading them can fail."""

from __future__ import annotations

import contextlib
import os
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
    directory, name = os.path.split(os.fspath(path))
    tmp = os.path.join(directory, f"{TMP_PREFIX}{name}.{uuid.uuid4().hex}{TMP_SUFFIX}")
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_directory(directory or ".")
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


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


def read_text(path: str | os.PathLike, argument: str, what: str) -> str:
    """The text of the input file ``path`` (UTF-8, a byte-order mark allowed); InputError naming
    ``argument``, expecting ``what`` (e.g. "a JSON or YAML file"), where it is missing, not a
    file, unreadable or not UTF-8 text."""
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
