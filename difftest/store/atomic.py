"""Atomic files: ``atomic_write_bytes``/``atomic_write_text`` (temporary file in the same directory,
fsync, ``os.replace``, directory fsync) and ``create_dir_exclusive`` for fixtures and reports."""

import os
import tempfile
from pathlib import Path


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path, data):
    """Replace ``path`` by ``data`` so that a reader, or a crash, sees either the old file or the new one."""
    path = Path(path).absolute()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would make committed fixtures private
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def atomic_write_text(path, text):
    atomic_write_bytes(path, text.encode("utf-8"))


def create_dir_exclusive(path):
    """Create directory ``path`` (and its parents); an existing one is an error, never reused."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir()
    except FileExistsError:
        raise FileExistsError(f"{path} already exists; a fixture directory is never overwritten") from None
    _fsync_dir(path.parent)
    return path
