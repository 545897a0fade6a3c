"""The store directory's ``lock`` and ``abort`` files.

``lock``: an exclusive ``flock`` held for the life of a :class:`~store.message_store.MessageStore`
(RocketMQ uses ``FileChannel.tryLock``); a second process opening the same directory gets
:class:`~store.errors.StoreLocked` at once. ``abort``: created (with the pid) when the store
opens and removed on a clean close; finding it at open means the last run did not shut down
cleanly, which selects abnormal recovery.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from store.errors import StoreLocked


class DirectoryLock:
    """Exclusive, non-blocking, process-level lock on ``<store>/lock``."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            holder = _read_small(self._path.parent / "abort")
            os.close(fd)
            who = f" (pid {holder})" if holder else ""
            raise StoreLocked(
                f"store directory {self._path.parent} is in use by another process{who}; "
                "stop it or use another --store-dir"
            ) from exc
        try:
            os.ftruncate(fd, 0)
            os.write(fd, b"lock")
        except OSError as exc:  # a full disk: the flock is what counts, not the content
            if exc.errno != errno.ENOSPC:
                os.close(fd)
                raise
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None


def write_abort_file(path: Path) -> None:
    """Create ``abort`` holding the pid; on a full disk (no block for the pid) an empty file,
    which needs none and marks the run just as well. Raises OSError otherwise."""
    try:
        path.write_text(str(os.getpid()))
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        path.touch()


def remove_abort_file(path: Path) -> None:
    path.unlink(missing_ok=True)


def _read_small(path: Path) -> str:
    try:
        return path.read_text()[:32].strip()
    except OSError:
        return ""
