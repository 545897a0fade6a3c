"""The file layout of a store directory, recorded in ``config/store.json``.

File sizes (CommitLog file size, ConsumeQueue units per file, index slots and entries) are a
property of the data, not of whoever opens it: a directory written with 64 KiB CommitLog files
must be read with 64 KiB files. The first :meth:`MessageStore.open` records the layout; every
later open adopts it (logging when the caller's config asked for something else), and
read-only followers (:class:`~store.read.store_reader.StoreReader`, Spark executors) read it from here.
Directories written before the file existed get their sizes inferred from the files.

It also records whether the directory's owner runs it as a member of a replica group
(``"replicated"``, rewritten whenever that changes): followers then bound their reads by the
confirm offset the owner writes into the checkpoint (:mod:`store.write.visibility`).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from store.config import GIB, StoreConfig
from store.io.atomic_file import read_json, write_json_atomically

log = logging.getLogger("sparkmq.store")

LAYOUT_FILE = "store.json"
#: Key of the replica-group flag in the layout file.
REPLICATED_KEY = "replicated"
LAYOUT_FIELDS = (
    "commitlog_file_size_bytes",
    "consume_queue_units_per_file",
    "index_hash_slots",
    "index_max_entries",
)
_CQ_UNIT_SIZE = 20  # store.consumequeue.consume_queue.CQ_UNIT_SIZE (not imported: layout must stay light)
_DEFAULT_CQ_UNITS = 300_000


def layout_path(store_dir: Path) -> Path:
    return store_dir / "config" / LAYOUT_FILE


def read_layout(store_dir: Path) -> dict[str, int] | None:
    document = read_json(layout_path(store_dir))
    if document is None:
        return None
    return {field: int(document[field]) for field in LAYOUT_FIELDS if field in document}


def write_layout(config: StoreConfig) -> None:
    document: dict[str, object] = {field: getattr(config, field) for field in LAYOUT_FIELDS}
    document[REPLICATED_KEY] = config.replicated
    write_json_atomically(layout_path(config.store_dir), document)


def read_replicated(store_dir: Path) -> bool:
    """Whether the directory's owner last opened it as a replica (False when never said)."""
    document = read_json(layout_path(store_dir))
    return bool(document.get(REPLICATED_KEY, False)) if document is not None else False


def record_replication(config: StoreConfig) -> None:
    """Record ``config.replicated`` in the layout file when it differs from what is there."""
    document = read_json(layout_path(config.store_dir))
    if document is None:
        write_layout(config)
    elif bool(document.get(REPLICATED_KEY, False)) != config.replicated:
        write_json_atomically(layout_path(config.store_dir), {**document, REPLICATED_KEY: config.replicated})


def adopt_layout(config: StoreConfig) -> StoreConfig:
    """``config`` with the directory's recorded layout (unchanged for a new directory)."""
    stored = read_layout(config.store_dir)
    if not stored:
        return config
    differing = {f: v for f, v in stored.items() if getattr(config, f) != v}
    if not differing:
        return config
    log.info(
        "store %s keeps the layout it was created with: %s",
        config.store_dir,
        ", ".join(f"{f}={v} (asked {getattr(config, f)})" for f, v in differing.items()),
    )
    return dataclasses.replace(config, **differing).validate()  # type: ignore[arg-type]


def existing_config(store_dir: Path | str, **changes: object) -> StoreConfig:
    """A config that opens an existing directory as it was written (recorded layout, or file
    sizes inferred from the files of an older directory), plus ``changes``."""
    root = Path(store_dir)
    layout: dict[str, object] = {
        "commitlog_file_size_bytes": _commitlog_file_size(root),
        "consume_queue_units_per_file": _cq_units_per_file(root),
    }
    layout.update(read_layout(root) or {})
    layout.update(changes)
    return StoreConfig(store_dir=root, **layout).validate()  # type: ignore[arg-type]


def _commitlog_file_size(store_dir: Path) -> int:
    files = sorted((store_dir / "commitlog").glob("[0-9]" * 20))
    return files[0].stat().st_size if files else GIB


def _cq_units_per_file(store_dir: Path) -> int:
    for first in (store_dir / "consumequeue").glob("*/*/" + "[0-9]" * 20):
        size = first.stat().st_size
        if size and size % _CQ_UNIT_SIZE == 0:
            return size // _CQ_UNIT_SIZE
    return _DEFAULT_CQ_UNITS
