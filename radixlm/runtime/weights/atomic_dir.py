"""Build a cache entry once, atomically, even with several processes racing for it."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def file_lock(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock_path`` (created if absent) for the ``with`` block."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def build_once(final_path: Path, build: Callable[[Path], None]) -> Path:
    """Return ``final_path``, first creating it with ``build(tmp_path)`` if it does not exist.

    ``build`` writes a file or a directory at ``tmp_path`` (a fresh name beside ``final_path``);
    it is renamed into place only when ``build`` returns, under a lock, so readers never see a
    half-written entry and concurrent callers build it once.
    """
    if final_path.exists():
        return final_path
    with file_lock(final_path.with_name(final_path.name + ".lock")):
        if final_path.exists():
            return final_path
        tmp_root = Path(tempfile.mkdtemp(prefix=f".{final_path.name}.", dir=final_path.parent))
        try:
            tmp_path = tmp_root / final_path.name
            build(tmp_path)
            os.rename(tmp_path, final_path)
        finally:
            shutil.rmtree(tmp_root, ignore_errors=True)
    return final_path
