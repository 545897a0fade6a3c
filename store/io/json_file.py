"""Atomic JSON files for the store's small metadata (``config/*.json``).

``write_json_atomically`` writes a temp file, fsyncs it, renames it over the target and fsyncs
the directory, so a reader (or a restart after a crash) sees the old or the new document,
never a mix.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from store.errors import CorruptStore


def write_json_atomically(path: Path, document: Mapping[str, Any]) -> None:
    """Write ``document`` so that ``path`` holds either the old or the new content, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(path.name + ".tmp")
    data = json.dumps(document, indent=2, sort_keys=True).encode("utf-8")
    with open(temp, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when the file does not exist."""
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
