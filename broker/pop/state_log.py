"""The state topic ``rmq_sys_pop_state`` queue 0: appends, snapshots and the replay on open.

* :meth:`StateLog.append` writes state records in **one** atomic store append and returns only
  once the store has them: as durable as a produce (SYNC_FLUSH: fsynced; a replica group: in
  the confirmed log, or refused with the store's error). The caller applies the records to the
  table only after that, so a refused append leaves the table untouched.
* A snapshot is SNAPSHOT_BEGIN (tag ``snap``; its tail holds the handle secret), one
  SNAPSHOT_PART per (group, topic) (more for a large in-flight set), SNAPSHOT_END, all in one
  append, so its records are contiguous in the queue.
* :meth:`StateLog.load` finds the newest *complete* snapshot with a tag-filtered scan (the
  ConsumeQueue's tagsCode prefilter: 20 bytes read per record, no CommitLog read), then
  folds the snapshot and every record after it. The replay is bounded by the snapshot
  interval (:attr:`PopConfig.snapshot_every_records`), not by the topic's history, and the
  history before the snapshot may age out with the CommitLog files.
* An empty state topic (a new store): a fresh 32-byte secret, written as an empty snapshot in
  front of the first records appended (a store that never serves POP writes nothing).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator, Sequence

from broker.pop.state_codec import (
    SECRET_SIZE,
    SNAPSHOT_PART_ENTRIES,
    Kind,
    StateRecord,
    StateRecordCorrupt,
    decode,
    encode,
    read_snapshot_mark,
    snapshot_mark,
)
from broker.pop.table import PopTable
from store import POP_STATE_TOPIC, MessageStore, RecordFields

log = logging.getLogger("sparkmq.broker.pop")

SNAPSHOT_TAG = "snap"
RECORD_TAG = "pop"
QUEUE_ID = 0
_READ_CHUNK = 256


class StateLog:
    """Reads and writes the state topic of one store."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        #: Records appended since the last snapshot (the replay a reopen would do).
        self.since_snapshot = 0
        #: The secret of a fresh table, until its first snapshot goes out with the first append.
        self._unwritten_secret: bytes | None = None

    def append(self, records: Sequence[StateRecord], copies: Sequence[RecordFields] = ()) -> None:
        """Store ``copies`` (messages: dead letters) then ``records`` in one atomic append
        (raises the store's errors, nothing written)."""
        if not records:
            return
        first = self._unwritten_secret
        if first is not None:  # a fresh table's secret goes out first, as an empty snapshot
            records = [*_snapshot_records(first, []), *records]
        host = (self.store.config.store_host, self.store.config.store_port)
        now = self.store.now_ms()
        fields = [
            RecordFields(
                topic=POP_STATE_TOPIC,
                body=encode(record),
                queue_id=QUEUE_ID,
                properties={"TAGS": SNAPSHOT_TAG if record.kind is Kind.SNAPSHOT_BEGIN else RECORD_TAG},
                born_timestamp_ms=now,
                born_host=host,
                store_host=host,
            )
            for record in records
        ]
        self.store.append_records([*copies, *fields])
        self.since_snapshot += len(records)
        self._unwritten_secret = None

    def write_snapshot(self, table: PopTable, time_ms: int) -> None:
        """Append the whole table as one snapshot."""
        parts = list(table.snapshot_parts(time_ms, SNAPSHOT_PART_ENTRIES))
        self._unwritten_secret = None
        self.append(_snapshot_records(table.secret, parts, time_ms))
        self.since_snapshot = 0

    def load(self) -> PopTable:
        """The table as the state topic says; a fresh one (a new secret, written with the first
        append) if the topic holds no complete snapshot."""
        self._unwritten_secret = None  # a table loaded from the topic has its secret written
        for begin in reversed(self._snapshot_offsets()):
            table = self._replay_from(begin)
            if table is not None:
                return table
            log.warning(
                "POP state: the snapshot at queue offset %d is incomplete, trying an older one", begin
            )
        table = PopTable(secret=secrets.token_bytes(SECRET_SIZE))
        self._unwritten_secret = table.secret
        return table

    def _snapshot_offsets(self) -> list[int]:
        found: list[int] = []
        offset = self.store.min_offset(POP_STATE_TOPIC, QUEUE_ID)
        while True:
            result = self.store.read_batch(POP_STATE_TOPIC, QUEUE_ID, offset, 4096, SNAPSHOT_TAG)
            found.extend(result.batch.column("queue_offset").to_pylist())
            if result.next_offset <= offset or result.next_offset >= result.max_offset:
                return found
            offset = result.next_offset

    def _records(self, start: int) -> Iterator[tuple[int, StateRecord]]:
        offset = start
        while True:
            got = self.store.get_messages(POP_STATE_TOPIC, QUEUE_ID, offset, _READ_CHUNK)
            if not got.messages:
                return
            for view in got.messages:
                yield view.queue_offset, decode(view.body)
            offset = got.next_offset

    def _replay_from(self, begin: int) -> PopTable | None:
        """Fold the snapshot at ``begin`` and everything after; None if it is incomplete."""
        table = PopTable()
        expected: tuple[int, int] | None = None
        replayed = 0
        for offset, record in self._records(begin):
            if expected is None:
                if record.kind is not Kind.SNAPSHOT_BEGIN:
                    raise StateRecordCorrupt(
                        f"queue offset {offset} is tagged as a snapshot but is {record.kind}"
                    )
                snapshot_id, total, _ = read_snapshot_mark(record.tail)
                expected = (snapshot_id, begin + total - 1)
            elif offset <= expected[1]:
                if offset == expected[1] and (
                    record.kind is not Kind.SNAPSHOT_END or read_snapshot_mark(record.tail)[0] != expected[0]
                ):
                    return None
            elif record.kind in (Kind.SNAPSHOT_BEGIN, Kind.SNAPSHOT_END, Kind.SNAPSHOT_PART):
                continue  # a later snapshot that was torn: its records change nothing
            else:
                replayed += 1
            table.apply(record)
        if expected is None or self.store.max_offset(POP_STATE_TOPIC, QUEUE_ID) <= expected[1]:
            return None
        self.since_snapshot = replayed
        log.info("POP state: snapshot at queue offset %d and %d records replayed", begin, replayed)
        return table


def _snapshot_records(secret: bytes, parts: Sequence[StateRecord], time_ms: int = 0) -> list[StateRecord]:
    """A snapshot: BEGIN (carrying the handle secret), the table's parts, END."""
    snapshot_id = secrets.randbits(63)
    total = len(parts) + 2
    return [
        StateRecord(Kind.SNAPSHOT_BEGIN, time_ms, tail=snapshot_mark(snapshot_id, total, secret)),
        *parts,
        StateRecord(Kind.SNAPSHOT_END, time_ms, tail=snapshot_mark(snapshot_id, total)),
    ]
