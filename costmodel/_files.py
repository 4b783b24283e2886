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
    fsync'd and renamed over ``path`` (atomic on POSIX file systems), so ``path`` is whole or absent.
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
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
