"""Files written whole or not at all: a hidden temporary name beside the file, then a rename."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

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
