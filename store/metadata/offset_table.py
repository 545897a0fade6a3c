"""Consumer and delay-level offsets, persisted as RocketMQ's ``config/*.json`` files.

``config/consumerOffset.json``::

    {"offsetTable": {"orders@billing": {"0": 12, "1": 7}}, "dataVersion": {"counter": 3, "timestamp": ...}}

Keys are ``topic@group`` (neither name may contain ``@``, see :mod:`store.names`); values map
queue id -> next offset to consume. The table is what the ``rmq_sys_CONSUMER_OFFSETS`` records
of the CommitLog say (:mod:`store.write.offset_log`): the file is only a checkpoint of it,
and ``commitLogOffset`` (sparkmq; RocketMQ ignores it) is where the CommitLog was dispatched up
to when it was taken: recovery applies the offset records from there on.
``transactionOffsetsApplied`` (sparkmq; RocketMQ ignores it) is the first
``rmq_sys_trans_offsets`` queue offset whose offsets are *not* in the snapshot: offsets
committed by transactions are applied once, in log order with the plain commits
(docs/transactions.md).

``config/delayOffset.json`` is ``{"offsetTable": {"1": 0, ...}}``: delay level -> consumed
offset of ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1``.

Tables live in memory, guarded by a lock; :meth:`JsonTable.persist` writes a snapshot
atomically (temp file, fsync, ``os.replace``, fsync of the directory) and only when something
changed since the last write, so a periodic persister is cheap.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from store.config import StoreConfig
from store.errors import CorruptStore, InvalidArgument
from store.format.offset_record import OffsetCommand, OffsetKind
from store.io.atomic_file import read_json, write_json_atomically
from store.io.clock import Clock, wall_clock_ms
from store.names import validate_group, validate_topic

CONSUMER_OFFSET_FILE = "consumerOffset.json"
DELAY_OFFSET_FILE = "delayOffset.json"
KEY_SEPARATOR = "@"
#: consumerOffset.json field: first rmq_sys_trans_offsets queue offset not in the snapshot.
TX_APPLIED_FIELD = "transactionOffsetsApplied"
#: consumerOffset.json field: every offset record below this CommitLog offset is in the snapshot.
COVERED_FIELD = "commitLogOffset"
#: ``written_at`` of an entry no retained record is known to hold (loaded from the file).
UNKNOWN_POSITION = -1


class JsonTable:
    """A lock, a dirty flag and atomic persistence for one ``config/*.json`` file."""

    def __init__(self, path: Path, clock_ms: Clock = wall_clock_ms) -> None:
        self.path = path
        self._clock_ms = clock_ms
        self._lock = threading.RLock()
        self._persist_lock = threading.Lock()
        self._dirty = False
        self._version = 0
        document = read_json(path)
        if document is not None:
            version = document.get("dataVersion", {})
            self._version = int(version.get("counter", 0)) if isinstance(version, dict) else 0
            self._load(document)

    @property
    def dirty(self) -> bool:
        """True when the table changed since it was loaded or last persisted."""
        return self._dirty

    def _load(self, document: dict[str, Any]) -> None:
        raise NotImplementedError

    def _snapshot(self) -> dict[str, Any]:
        raise NotImplementedError

    def _changed(self) -> None:
        self._dirty = True

    def persist(self, force: bool = False) -> bool:
        """Write the table if it changed (or ``force``); returns whether a file was written."""
        with self._persist_lock:
            with self._lock:
                if not (self._dirty or force):
                    return False
                self._version += 1
                document = self._snapshot()
                document["dataVersion"] = {"counter": self._version, "timestamp": self._clock_ms()}
                self._dirty = False
            try:
                write_json_atomically(self.path, document)
            except OSError:
                self._dirty = True
                raise
            return True


def _non_negative(document: dict[str, Any], name: str, path: Path) -> int:
    value = document.get(name, 0)
    if not isinstance(value, int) or value < 0:
        raise CorruptStore(f"{path}: {name} is not a non-negative integer")
    return value


def _int_key(table: str, raw: object) -> int:
    try:
        return int(str(raw))
    except ValueError as exc:
        raise CorruptStore(f"{table}: key {raw!r} is not an integer") from exc


class ConsumerOffsetTable(JsonTable):
    """``topic@group`` -> queue id -> next offset to consume (RocketMQ ``ConsumerOffsetManager``)."""

    def __init__(self, path: Path, clock_ms: Clock = wall_clock_ms) -> None:
        self._table: dict[tuple[str, str], dict[int, int]] = {}
        #: (topic, group) -> queue id -> CommitLog offset of the record that set its offset.
        self._written_at: dict[tuple[str, str], dict[int, int]] = {}
        self._tx_applied = 0
        self._covered = 0
        self._applied_to = 0
        self._legacy = False
        super().__init__(path, clock_ms)

    @staticmethod
    def from_config(config: StoreConfig) -> ConsumerOffsetTable:
        return ConsumerOffsetTable(config.config_dir / CONSUMER_OFFSET_FILE)

    def _load(self, document: dict[str, Any]) -> None:
        table = document.get("offsetTable", {})
        if not isinstance(table, dict):
            raise CorruptStore(f"{self.path}: offsetTable is not an object")
        for key, queues in table.items():
            topic, sep, group = str(key).partition(KEY_SEPARATOR)
            if not sep or not isinstance(queues, dict):
                raise CorruptStore(f"{self.path}: bad entry {key!r}")
            self._table[(topic, group)] = {_int_key(str(self.path), q): int(o) for q, o in queues.items()}
            self._written_at[(topic, group)] = dict.fromkeys(self._table[(topic, group)], UNKNOWN_POSITION)
        self._tx_applied = _non_negative(document, TX_APPLIED_FIELD, self.path)
        self._covered = self._applied_to = _non_negative(document, COVERED_FIELD, self.path)
        self._legacy = COVERED_FIELD not in document and bool(self._table)

    def _snapshot(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "offsetTable": {
                f"{topic}{KEY_SEPARATOR}{group}": {str(q): o for q, o in sorted(queues.items())}
                for (topic, group), queues in sorted(self._table.items())
            }
        }
        if self._tx_applied:  # absent until a transaction committed offsets: RocketMQ's file
            document[TX_APPLIED_FIELD] = self._tx_applied
        if self._applied_to and not self._legacy:  # absent: no CommitLog stands behind the
            document[COVERED_FIELD] = self._applied_to  # table, or its entries are not in it yet
        return document

    # --- the table as the log's offset records make it (store.write.offset_log) ---------
    @property
    def covered_offset(self) -> int:
        """``commitLogOffset`` of the file as loaded: offset records from here on are applied
        again when the store opens."""
        return self._covered

    @property
    def legacy(self) -> bool:
        """Loaded from a file written before offsets were log records: no record holds its
        entries yet (a master writes them: :meth:`written`)."""
        return self._legacy

    def written(self) -> None:
        """The entries of a legacy file are in the log now."""
        self._legacy = False

    @property
    def applied_to(self) -> int:
        """Every offset record below this CommitLog offset is in the table."""
        return self._applied_to

    def dispatched_to(self, end_offset: int) -> None:
        """The CommitLog is dispatched up to ``end_offset`` (its offset records applied). Does
        not make the table dirty: a snapshot that did not change needs no new file."""
        self._applied_to = max(self._applied_to, end_offset)

    def apply(self, command: OffsetCommand, position: int) -> None:
        """Apply the offset record at CommitLog offset ``position`` (records in log order)."""
        with self._lock:
            if command.kind is OffsetKind.COMMIT:
                key = (command.topic, command.group)
                self._table.setdefault(key, {}).update(command.offsets)
                self._written_at.setdefault(key, {}).update(dict.fromkeys(command.offsets, position))
                self._changed()
            elif command.kind is OffsetKind.DELETE:
                self._remove([k for k in self._table if k == (command.topic, command.group)])
            elif command.kind is OffsetKind.DELETE_GROUP:
                self.delete(command.group)
            else:
                self.delete_topic(command.topic)

    def stale(self, before: int) -> list[OffsetCommand]:
        """A COMMIT per (group, topic) holding its queues whose offset no record at or after
        CommitLog offset ``before`` carries (what must be written again before retention
        deletes the files below ``before``)."""
        with self._lock:
            commands = []
            for (topic, group), queues in sorted(self._table.items()):
                positions = self._written_at.get((topic, group), {})
                old = {q: o for q, o in queues.items() if positions.get(q, UNKNOWN_POSITION) < before}
                if old:
                    commands.append(OffsetCommand(OffsetKind.COMMIT, group, topic, old))
            return commands

    def reload(self) -> None:
        """Forget the table and read the file again (after a truncation of the log)."""
        with self._lock:
            self._table, self._written_at = {}, {}
            self._tx_applied = self._covered = self._applied_to = 0
            self._dirty = False
            document = read_json(self.path)
            if document is not None:
                self._load(document)

    def clear(self) -> None:
        """Forget everything (the log alone rebuilds the table from its first record)."""
        with self._lock:
            self._table, self._written_at = {}, {}
            self._tx_applied = self._covered = self._applied_to = 0
            self._changed()

    @property
    def transaction_offsets_applied(self) -> int:
        """The first ``rmq_sys_trans_offsets`` queue offset not applied yet."""
        with self._lock:
            return self._tx_applied

    def apply_transaction(self, position: int, group: str, offsets: Mapping[str, Mapping[int, int]]) -> bool:
        """Apply the offsets record at ``rmq_sys_trans_offsets`` queue offset ``position`` unless
        it was applied already (``position`` below the watermark); returns whether it applied.
        Records must come in queue order; the watermark moves with the offsets, under one lock,
        so a snapshot never has one without the other."""
        validate_group(group)
        for topic in offsets:
            validate_topic(topic, allow_system=True)
        with self._lock:
            if position < self._tx_applied:
                return False
            for topic, queues in offsets.items():
                self._table.setdefault((topic, group), {}).update(
                    {int(q): int(o) for q, o in queues.items() if int(q) >= 0 and int(o) >= 0}
                )
            self._tx_applied = position + 1
            self._changed()
            return True

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record the next offset ``group`` will consume from (topic, queue_id)."""
        self.commit_many(group, topic, {queue_id: offset})

    def commit_many(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        validate_group(group)
        validate_topic(topic, allow_system=True)
        for queue_id, offset in offsets.items():
            if queue_id < 0 or offset < 0:
                raise InvalidArgument(f"queue id and offset must be >= 0, got {queue_id}: {offset}")
        with self._lock:
            self._table.setdefault((topic, group), {}).update(offsets)
            self._changed()

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """Committed offset, -1 when the group never committed for this queue."""
        with self._lock:
            return self._table.get((topic, group), {}).get(queue_id, -1)

    def offsets(self, group: str, topic: str) -> dict[int, int]:
        with self._lock:
            return dict(self._table.get((topic, group), {}))

    def groups(self) -> dict[str, list[str]]:
        """group -> sorted topics it has offsets for."""
        with self._lock:
            result: dict[str, list[str]] = {}
            for topic, group in sorted(self._table):
                result.setdefault(group, []).append(topic)
            return result

    def delete(self, group: str, topic: str | None = None) -> int:
        """Forget a group's offsets (for one topic or all); returns the number of topics removed."""
        with self._lock:
            doomed = [k for k in self._table if k[1] == group and (topic is None or k[0] == topic)]
            return self._remove(doomed)

    def delete_topic(self, topic: str) -> int:
        """Forget every group's offsets for ``topic``; returns the number of groups removed."""
        with self._lock:
            return self._remove([k for k in self._table if k[0] == topic])

    def _remove(self, keys: list[tuple[str, str]]) -> int:
        for key in keys:
            del self._table[key]
            self._written_at.pop(key, None)
        if keys:
            self._changed()
        return len(keys)


class DelayOffsetTable(JsonTable):
    """Delay level (1-based) -> consumed offset of ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1``."""

    def __init__(self, path: Path, clock_ms: Clock = wall_clock_ms) -> None:
        self._table: dict[int, int] = {}
        super().__init__(path, clock_ms)

    @staticmethod
    def from_config(config: StoreConfig) -> DelayOffsetTable:
        return DelayOffsetTable(config.config_dir / DELAY_OFFSET_FILE)

    def _load(self, document: dict[str, Any]) -> None:
        table = document.get("offsetTable", {})
        if not isinstance(table, dict):
            raise CorruptStore(f"{self.path}: offsetTable is not an object")
        self._table = {_int_key(str(self.path), level): int(o) for level, o in table.items()}

    def _snapshot(self) -> dict[str, Any]:
        return {"offsetTable": {str(level): o for level, o in sorted(self._table.items())}}

    def get(self, level: int) -> int:
        """Consumed offset for ``level`` (0 when never stored, like RocketMQ)."""
        with self._lock:
            return self._table.get(level, 0)

    def set(self, level: int, offset: int) -> None:
        if level < 1 or offset < 0:
            raise InvalidArgument(f"delay level must be >= 1 and offset >= 0, got {level}: {offset}")
        with self._lock:
            if self._table.get(level) != offset:
                self._table[level] = offset
                self._changed()

    def levels(self) -> dict[int, int]:
        with self._lock:
            return dict(self._table)
