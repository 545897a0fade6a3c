"""Atomic files: the one way sparkmq writes a small file that must survive a crash whole.

Every writer goes through :func:`write_atomically`: the content goes to a temporary name in the
same directory, is fsynced, then takes the target name by ``rename`` (replace) or ``link``
(exclusive: the first writer wins, later ones see ``False``), and the directory is fsynced so
the name is durable. A reader, or a restart after ``kill -9``, sees the old file or the new
one, never a mix. JSON metadata (``config/*.json``, the operators' and sink's small state
files) uses :func:`write_json_atomically` on top of it; Arrow IPC parts and decisions pass
their own ``fill`` callback.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from store.errors import CorruptStore


def fsync_path(path: Path) -> None:
    """fsync a file or directory by name."""
    flags = os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0)
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, fill: Callable[[Path], None], *, exclusive: bool = False) -> bool:
    """Create ``path`` from what ``fill(temp_path)`` writes, atomically and durably.

    With ``exclusive`` the file is created only if it does not exist yet (``link``): returns
    False, writing nothing, when another writer got there first. Otherwise it replaces any
    existing file and returns True. ``fill`` may raise; the temporary file is then removed.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        fill(temp)
        fsync_path(temp)
        if exclusive:
            try:
                os.link(temp, path)
            except FileExistsError:
                return False
        else:
            os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
    fsync_path(path.parent)
    return True


def write_json_atomically(path: Path, document: Any, *, exclusive: bool = False) -> bool:
    """Write ``document`` as JSON (sorted keys, indented) with :func:`write_atomically`."""
    data = json.dumps(document, indent=2, sort_keys=True).encode("utf-8")

    def fill(temp: Path) -> None:
        temp.write_bytes(data)

    return write_atomically(path, fill, exclusive=exclusive)


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when the file does not exist.

    Raises :class:`~store.errors.CorruptStore` for a file that is not a JSON object."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptStore(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(document, dict):
        raise CorruptStore(f"{path}: expected a JSON object")
    return document
