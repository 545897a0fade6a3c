"""Consumer offsets as CommitLog records (sparkmq's ``__consumer_offsets``).

A group's commit is a record of ``rmq_sys_CONSUMER_OFFSETS`` queue 0 (body:
:mod:`store.format.offset_record`) appended through the normal put path, so a replicated
store acknowledges it under the same rule as a message (``--replication sync``: once every
in-sync slave has it). The offset table (:class:`~store.metadata.offset_table.ConsumerOffsetTable`)
changes only when such a record is *dispatched*::

    commit_offsets ──put──► CommitLog ──dispatch──► ConsumeQueue (rmq_sys_CONSUMER_OFFSETS, 0)
                                          └──────► OffsetLog.dispatched ──► offset table

on the master (the put path dispatches inline) and on every slave (the replicated bytes are
dispatched the same way, :mod:`store.write.replica_log`), so a promoted slave already serves
every commit its master acknowledged. The last record per (group, topic, queue) wins. The
offsets a committed transaction carries (its final record in ``rmq_sys_trans_offsets``,
:mod:`store.write.transactions`) are applied the same way, in log order with the commits.

``consumerOffset.json`` is a checkpoint of the table with the CommitLog offset it covers
(``commitLogOffset``): when the store opens, :meth:`OffsetLog.replay` applies the records
from there on; after a truncation of the log (a replica rejoining under a new master),
:meth:`OffsetLog.truncated` does the same from the file, or rebuilds the table from the log
alone when the file covers records that are gone. A torn record at the log's end is cut by
recovery before the replay and so never applied.

**Retention** deletes whole CommitLog files, and with them old offset records. Before it
does, the master writes a COMMIT again for every (group, topic) whose offsets only those
files hold (:meth:`OffsetLog.rewrites`, RocketMQ's compaction in its simplest form: the live
table, not the history, is kept), and the table is checkpointed past the files. So the
retained log always holds every live offset, which is what a new slave that copies the log
from its master's first file needs.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable

import numpy as np

from store.commitlog.commitlog import CommitLog
from store.commitlog.dispatch_batch import DispatchBatch
from store.consumequeue.queue_store import ConsumeQueueStore
from store.consumequeue.units import BLANK_UNIT_SIZE
from store.errors import InvalidArgument
from store.format.offset_record import OffsetCommand, decode_offset_command, encode_offset_command
from store.format.record import BODY_LEN_POS, BODY_POS, SYS_FLAG_POS, RecordFields, restore_body
from store.metadata.offset_table import ConsumerOffsetTable
from store.names import CONSUMER_OFFSETS_TOPIC, TRANS_OFFSETS_TOPIC
from store.write.transactions import TxOffsets, parse_offsets_body

log = logging.getLogger("sparkmq.store")

_I32 = struct.Struct(">i")
#: The topics whose records set offsets: plain commits, and committed transactions' offsets.
_OFFSET_TOPICS = (CONSUMER_OFFSETS_TOPIC, TRANS_OFFSETS_TOPIC)
#: ConsumeQueue units read per step while replaying.
_REPLAY_UNITS = 4096


class OffsetLog:
    """Keeps a store's offset table equal to what its offset records say."""

    def __init__(
        self,
        table: ConsumerOffsetTable,
        commitlog: CommitLog,
        queues: ConsumeQueueStore,
        store_host: tuple[str, int],
        has_queue: Callable[[str, int], bool],
    ) -> None:
        self.table = table
        self._has_queue = has_queue
        self._commitlog = commitlog
        self._queues = queues
        self._store_host = store_host

    def record(self, command: OffsetCommand, born_ms: int) -> RecordFields:
        """The record that carries ``command`` (raises InvalidArgument for a bad command)."""
        return RecordFields(
            topic=CONSUMER_OFFSETS_TOPIC,
            body=encode_offset_command(command),
            born_timestamp_ms=born_ms,
            born_host=self._store_host,
            store_host=self._store_host,
        )

    def dispatched(self, batch: DispatchBatch) -> None:
        """Apply the offset records of a dispatched batch (called under the put lock, after
        the ConsumeQueue dispatch, in log order)."""
        if len(batch) == 0:
            return
        codes = [batch.topics.index(t) for t in _OFFSET_TOPICS if t in batch.topics]
        if codes:
            wanted = batch.topic_codes == codes[0]
            for code in codes[1:]:
                wanted |= batch.topic_codes == code
            for row in np.flatnonzero(wanted).tolist():
                topic = batch.topics[int(batch.topic_codes[row])]
                self._apply_at(topic, int(batch.commitlog_offsets[row]), int(batch.queue_offsets[row]))
        self.table.dispatched_to(batch.end_offset)

    def replay(self) -> int:
        """Apply the records the checkpoint does not cover (the store opens, recovery done);
        returns how many were applied. A checkpoint covering more than the log holds (its
        tail lost) is dropped and the table rebuilt from every retained record."""
        start = self.table.covered_offset
        if start > self._commitlog.max_offset:
            log.warning(
                "consumerOffset.json covers the CommitLog up to %d but it ends at %d: "
                "rebuilding the offset table from the log",
                start,
                self._commitlog.max_offset,
            )
            self.table.clear()
            start = 0
        records = sorted(
            (position, topic, queue_offset)
            for topic in _OFFSET_TOPICS
            for position, queue_offset in self._units_from(topic, max(start, self._commitlog.min_offset))
        )
        applied = sum(
            self._apply_at(topic, position, queue_offset) for position, topic, queue_offset in records
        )
        self.table.dispatched_to(self._commitlog.max_offset)
        return applied

    def _units_from(self, topic: str, start: int) -> list[tuple[int, int]]:
        """(CommitLog offset, queue offset) of the records of ``topic`` queue 0 from ``start``."""
        queue = self._queues.get(topic, 0)
        found: list[tuple[int, int]] = []
        position = queue.min_offset if queue is not None else 0
        while queue is not None and position < queue.max_offset:
            units = queue.read_units(position, _REPLAY_UNITS)
            if len(units) == 0:
                break
            wanted = np.flatnonzero((units["offset"] >= start) & (units["size"] != BLANK_UNIT_SIZE))
            found.extend(zip(units["offset"][wanted].tolist(), (wanted + position).tolist(), strict=True))
            position += len(units)
        return found

    def truncated(self) -> int:
        """The log was cut (and its ConsumeQueues with it): the table again from the file and
        the records after it; returns how many records were applied."""
        self.table.reload()
        return self.replay()

    def rewrites(self, before: int, born_ms: int) -> list[RecordFields]:
        """Records writing again every live offset that no record at or after CommitLog offset
        ``before`` holds (to append before retention deletes the files below ``before``)."""
        return [self.record(command, born_ms) for command in self.table.stale(before)]

    def _body_at(self, position: int) -> bytes | None:
        """The body of the record at ``position`` (header and body read; no full decode)."""
        head = self._commitlog.read(position, BODY_POS)
        if head is None:
            return None
        (sys_flag,) = _I32.unpack_from(head, SYS_FLAG_POS)
        (body_len,) = _I32.unpack_from(head, BODY_LEN_POS)
        stored = self._commitlog.read(position + BODY_POS, body_len)
        return None if stored is None else restore_body(stored, sys_flag)

    def _apply_at(self, topic: str, position: int, queue_offset: int) -> int:
        """Apply the record of ``topic`` at CommitLog offset ``position``; returns 1, or 0
        when it is unreadable (logged, skipped) or a transaction's applied before."""
        try:
            body = self._body_at(position)
            if body is None:
                log.error("%s record at CommitLog offset %d is not in the log: skipped", topic, position)
                return 0
            if topic == TRANS_OFFSETS_TOPIC:
                return int(self._apply_transaction(queue_offset, parse_offsets_body(body)))
            self.table.apply(decode_offset_command(body), position)
            return 1
        except InvalidArgument as exc:
            log.error("%s record at CommitLog offset %d is unreadable, skipped: %s", topic, position, exc)
            return 0

    def _apply_transaction(self, queue_offset: int, entry: TxOffsets) -> bool:
        """The offsets a committed transaction carries (its final record, queue offset
        ``queue_offset`` of ``rmq_sys_trans_offsets``); queues that do not exist are left out."""
        kept: dict[str, dict[int, int]] = {}
        for topic, offsets in entry.offsets.items():
            for queue_id, offset in offsets.items():
                if self._has_queue(topic, queue_id) and offset >= 0:
                    kept.setdefault(topic, {})[queue_id] = offset
                else:
                    log.warning(
                        "transaction offsets of group %s: %s queue %d (offset %d) no longer exists",
                        entry.group,
                        topic,
                        queue_id,
                        offset,
                    )
        return self.table.apply_transaction(queue_offset, entry.group, kept)
