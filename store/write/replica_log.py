"""``ReplicaLog``: the store as the replication layer (:mod:`store.ha`) works it.

A master reads raw CommitLog bytes to send (:meth:`ReplicaLog.transfer_view`); a slave appends
the bytes it receives exactly where its log ends (:meth:`ReplicaLog.append_raw`, cheap: it can
acknowledge right after, as RocketMQ's slave does) and then dispatches the records in them
through the normal dispatch (:meth:`ReplicaLog.dispatch_appended`: checks them, CRCs included,
and fills the ConsumeQueues, whose queue offsets are the master's, stored in the records, and
the index), so every replica builds the same files. Bytes may end inside a record: it is
dispatched when the rest arrives. :meth:`ReplicaLog.append_replicated` does both. Both sides
move the confirm offset that bounds readers (:mod:`store.write.visibility`).

The steps of a truncation are here too, each one durable before it returns; the procedure
that runs them in order is :func:`store.ha.truncation.truncate_replica`, the only caller.

All writes take the put lock, so they never interleave with a put (which a replica refuses
anyway unless it is the master).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from store.commitlog.commitlog import CommitLog, ScanStop
from store.commitlog.dispatch_batch import DispatchBatch
from store.config import StoreConfig
from store.consumequeue.queue_store import ConsumeQueueStore
from store.errors import IndexBehind, ReplicatedDataCorrupt
from store.format.batch_encode import I32, I64
from store.format.record import BLANK_MAGIC, BLANK_RECORD, MAGIC_V1, MAGIC_V2
from store.format.record_check import RecordStatus, check_record
from store.index.index_service import IndexDispatcher, IndexService
from store.metadata.checkpoint import StoreCheckpoint
from store.metadata.topic_config import TopicConfigTable
from store.write.appender import Appender
from store.write.message_builder import tags_codes_for
from store.write.queue_offsets import last_per_queue
from store.write.replication import ReplicationHooks
from store.write.visibility import Grown, Visibility

log = logging.getLogger("sparkmq.store")

#: A record's first field: its total size (big-endian int).
RECORD_SIZE = struct.Struct(">i")
#: Records per dispatch batch while dispatching replicated bytes.
DISPATCH_BATCH_RECORDS = 1 << 16


class ReplicaLog:
    """Replication's access to one open store (made by :meth:`MessageStore.replica_log`)."""

    def __init__(
        self,
        *,
        config: StoreConfig,
        commitlog: CommitLog,
        queues: ConsumeQueueStore,
        index: IndexService | None,
        index_dispatcher: IndexDispatcher | None,
        checkpoint: StoreCheckpoint,
        topics: TopicConfigTable,
        appender: Appender,
        visibility: Visibility,
        delay_levels: tuple[int, ...],
        after_truncation: Callable[[], object] | None = None,
    ) -> None:
        self.config = config
        self._commitlog = commitlog
        self._queues = queues
        self._index = index
        self._dispatcher = index_dispatcher
        self._checkpoint = checkpoint
        self._topics = topics
        self._appender = appender
        self._visibility = visibility
        self._delay_levels = delay_levels
        #: Rebuilds state derived from records beyond a truncation point (the offset table).
        self._after_truncation = after_truncation
        #: Where bytes appended from the master and not dispatched yet start (None: every
        #: record is dispatched and the log ends with a complete one, as recovery and the put
        #: path always leave it).
        self._pending_from: int | None = None
        #: Where the last whole record received ends (None: at the log's end); the head of a
        #: record received in part lies beyond it, and the checkpoint's partial-record mark
        #: says so on disk while it does (see :meth:`append_raw`).
        self._whole_end: int | None = None

    # --- offsets ------------------------------------------------------------------------
    @property
    def max_offset(self) -> int:
        """Where the CommitLog ends (a slave's may end inside a record still arriving)."""
        return self._commitlog.max_offset

    @property
    def min_offset(self) -> int:
        return self._commitlog.min_offset

    @property
    def file_size_bytes(self) -> int:
        return self._commitlog.file_size_bytes

    @property
    def dispatched_to(self) -> int:
        """End of the last record dispatched: the valid end of the log once
        :meth:`dispatch_appended` has run."""
        pending = self._pending_from
        return self._commitlog.max_offset if pending is None else pending

    @property
    def confirm_offset(self) -> int:
        """The bound readers see (the max offset for a store without one)."""
        bound = self._visibility.bound
        return self._commitlog.max_offset if bound is None else bound

    def advance_confirm(self, offset: int) -> None:
        """Move the confirm offset forward to ``offset`` (never past the valid end)."""
        self._visibility.advance(min(offset, self.dispatched_to))

    def set_hooks(self, hooks: ReplicationHooks | None) -> None:
        """Install the put path's replication hooks (:mod:`store.write.replication`)."""
        with self._appender.lock:
            self._appender.replication = hooks

    # --- a master's reads ---------------------------------------------------------------
    def transfer_view(self, offset: int, max_bytes: int) -> memoryview:
        """See :meth:`CommitLog.transfer_view` (zero-copy, within one file)."""
        return self._commitlog.transfer_view(offset, max_bytes)

    # --- a slave's writes ---------------------------------------------------------------
    def append_replicated(self, offset: int, data: bytes | bytearray | memoryview) -> int:
        """:meth:`append_raw`, then :meth:`dispatch_appended`; returns the new max offset."""
        new_max = self.append_raw(offset, data)
        self.dispatch_appended()
        return new_max

    def append_raw(self, offset: int, data: bytes | bytearray | memoryview) -> int:
        """Append ``data`` (bytes of the master's CommitLog starting at its ``offset``) exactly
        at the local max offset, without dispatching; returns the new max offset. Raises
        :class:`~store.errors.ReplicationGap` (nothing written) when ``offset`` is not the
        local end or the bytes cross a file end."""
        with self._appender.lock:
            self._appender.ensure_open()
            before = self._commitlog.max_offset
            start = offset if offset != before else self._whole_end
            if start is None or start > offset:
                start = offset  # the log ends whole (as opened, or cut at a record boundary)
            whole_end = self._whole_end_after(start, offset, data)
            marked = self._checkpoint.values.partial_record_offset
            cut_after = whole_end < offset + len(data)
            if cut_after and (marked is None or marked > whole_end):
                self._checkpoint.write_partial_record(whole_end)  # before its head is on disk
            try:
                new_max = self._commitlog.append_raw(offset, data)
            except BaseException:
                if self._checkpoint.values.partial_record_offset != marked:
                    self._checkpoint.write_partial_record(marked)
                raise
            if (whole_end if cut_after else None) != self._checkpoint.values.partial_record_offset:
                self._checkpoint.write_partial_record(whole_end if cut_after else None)  # after its tail
            self._whole_end = whole_end
            if self._pending_from is None and new_max > before:
                self._pending_from = offset
            return new_max

    def _whole_end_after(self, start: int, offset: int, data: bytes | bytearray | memoryview) -> int:
        """Where the last whole record ends once ``data`` (bytes at ``offset``) follows the
        records that end at ``start`` (a record boundary at or before ``offset``): the size
        fields chain the records. A size that cannot be (0, negative) stops the walk there:
        the bytes are checked when dispatched."""
        end = offset + len(data)
        at = start
        while at + 4 <= end:
            if at >= offset:
                size = RECORD_SIZE.unpack_from(data, at - offset)[0]
            else:  # the record started in an earlier frame
                head = self._commitlog.read_range(at, min(4, offset - at)) + bytes(
                    data[: max(0, at + 4 - offset)]
                )
                if len(head) != RECORD_SIZE.size:
                    break
                size = RECORD_SIZE.unpack(head)[0]
            if size <= 0 or at + size > end:
                break
            at += size
        return at

    def dispatch_appended(self) -> int:
        """Check and dispatch every record the appended bytes complete; returns the valid end.
        Raises :class:`~store.errors.ReplicatedDataCorrupt` when they do not hold valid records
        (the bad bytes are removed again; valid records before them stay dispatched)."""
        grown: list[Grown] = []
        with self._appender.lock:
            self._appender.ensure_open()
            if self._pending_from is None:
                return self._commitlog.max_offset
            end = self._dispatch_new(self._pending_from, grown)
        self._visibility.published(end, grown)
        return end

    def flush(self) -> int:
        """fsync the CommitLog; returns the flushed offset. Raises OSError."""
        return self._commitlog.flush()

    def _dispatch_new(self, start: int, grown: list[Grown]) -> int:
        """Dispatch the records from ``start`` on (lock held)."""
        stop = ScanStop(start)
        for batch in self._commitlog.scan(
            start,
            check_crc=True,
            max_records=DISPATCH_BATCH_RECORDS,
            tags_codes_for=self._tags_codes,
            stop=stop,
        ):
            self._dispatch(batch, grown)
        valid_end, corrupt = self._settle(stop.offset)
        self._pending_from = valid_end if valid_end < self._commitlog.max_offset else None
        if corrupt:
            bad_end = self._commitlog.max_offset
            self._commitlog.truncate(valid_end)
            self._whole_end = None
            if self._checkpoint.values.partial_record_offset is not None:
                self._checkpoint.write_partial_record(None)
            raise ReplicatedDataCorrupt(
                f"replicated bytes [{valid_end}, {bad_end}) do not hold a valid record: {stop.reason}"
            )
        return valid_end

    def _dispatch(self, batch: DispatchBatch, grown: list[Grown]) -> None:
        self._register_topics(batch)
        self._queues.dispatch(batch)
        if self._dispatcher is not None:
            self._dispatcher.dispatch(batch)
        if self._appender.on_dispatched is not None:
            self._appender.on_dispatched(batch)
        self._appender.note_store_timestamp(int(batch.store_timestamps_ms.max()))
        for code, queue_id, last in last_per_queue(batch.topic_codes, batch.queue_ids, batch.queue_offsets):
            grown.append((batch.topics[code], queue_id, last + 1))

    def _settle(self, offset: int) -> tuple[int, bool]:
        """Where a scan stopped: ``(valid end, corrupt)``. A record cut by the end of what has
        arrived is not damage (the rest comes in the next frame); a file whose BLANK record and
        zeros arrived whole ends at the file's end."""
        written_end = self._commitlog.max_offset
        if offset >= written_end:
            return offset, False
        head = self._commitlog.read_range(offset, BLANK_RECORD.size)
        if len(head) < BLANK_RECORD.size:
            return offset, False  # fewer than 8 bytes of the next record so far
        size, magic = BLANK_RECORD.unpack(head)
        if magic == BLANK_MAGIC:
            file_end = offset - offset % self.file_size_bytes + self.file_size_bytes
            return (file_end, False) if written_end >= file_end else (offset, False)
        if magic in (MAGIC_V1, MAGIC_V2) and size > written_end - offset:
            return offset, False
        return offset, True

    def _register_topics(self, batch: DispatchBatch) -> None:
        """Topics first seen in replicated records get a config on this replica (queue count:
        the highest queue id seen + 1, grown later; the master's full config reaches slaves
        through the cluster layer's metadata sync)."""
        highest = int(batch.queue_ids.max())
        known = [self._topics.get(topic) for topic in batch.topics]
        if all(config is not None and config.queues > highest for config in known):
            return  # the common case: one comparison per batch
        for code, topic in enumerate(batch.topics):
            queues = int(batch.queue_ids[batch.topic_codes == code].max()) + 1
            current = known[code]
            if current is None or current.queues < queues:
                self._topics.create_or_grow(topic, queues, allow_system=True)
        self._topics.persist()

    def _tags_codes(
        self, topics: tuple[str, ...], codes: I32, queue_ids: I32, store_ts: I64, hashes: I64
    ) -> I64:
        return tags_codes_for(topics, codes, queue_ids, store_ts, hashes, self._delay_levels)

    # --- the steps of a truncation (store.ha.truncation runs them, in this order) -------
    @contextmanager
    def exclusive(self, index_wait_s: float = 30.0) -> Iterator[None]:
        """Hold the put lock with the index thread idle (everything queued indexed); raises
        :class:`~store.errors.IndexBehind` when it does not get there in ``index_wait_s``."""
        with self._appender.lock:
            self._appender.ensure_open()
            if self._dispatcher is not None and not self._dispatcher.wait_indexed(
                self.dispatched_to, index_wait_s
            ):
                raise IndexBehind(f"the index thread did not catch up within {index_wait_s:.0f} s")
            yield

    def is_record_boundary(self, offset: int) -> bool:
        """True when ``offset`` is the valid end, a file start, or where a valid record or the
        BLANK record starts (RocketMQ ``isOffsetAligned``): a truncation point must be one."""
        valid_end = self.dispatched_to
        if offset >= valid_end:
            return offset == valid_end
        if offset % self.file_size_bytes == 0:
            return True
        raw = self._commitlog.read_record(offset)
        if raw is not None:
            return check_record(raw, 0, check_crc=False).status is RecordStatus.OK
        head = self._commitlog.read_range(offset, BLANK_RECORD.size)
        return len(head) == BLANK_RECORD.size and BLANK_RECORD.unpack(head)[1] == BLANK_MAGIC

    def cut_commitlog(self, point: int, reason: str) -> None:
        """Step 1: the CommitLog ends at ``point``, durably (zeroed + msync, later files
        unlinked, directory fsynced); no partial record is left."""
        self._commitlog.truncate_durably(point, reason)
        if self._checkpoint.values.partial_record_offset is not None:
            self._checkpoint.write_partial_record(None)

    def cut_consume_queues(self, point: int) -> None:
        """Step 2: no ConsumeQueue unit points at a record ending beyond ``point``, durably."""
        self._queues.truncate_dirty(point, durable=True)

    def cut_index(self, point: int) -> int:
        """Step 3: index files with entries at or beyond ``point`` are deleted (directory
        fsynced) and the records before ``point`` they held are indexed again; returns how many
        records were re-indexed."""
        if self._index is None:
            return 0
        indexed = self._index.drop_from(point)
        start = self._commitlog.min_offset
        if indexed >= 0:
            head = self._commitlog.read(indexed, 4)
            start = max(start, indexed + int.from_bytes(head, "big")) if head else start
        records = 0
        for batch in self._commitlog.scan(
            start, max_records=DISPATCH_BATCH_RECORDS, tags_codes_for=self._tags_codes
        ):
            self._index.dispatch(batch)
            records += len(batch)
        self._index.flush()
        if self._dispatcher is not None:
            self._dispatcher.reset_to(point)
        return records

    def fix_checkpoint(self, point: int) -> None:
        """Step 4: the checkpoint's confirm offset is at most ``point`` and none of its
        timestamps is later than the newest record kept; fsynced."""
        newest = 0
        for queue in self._queues.queues().values():
            unit = queue.get_unit(queue.max_offset - 1)
            if unit is not None:
                newest = max(newest, self._commitlog.read_store_timestamp(unit[0]) or 0)
        self._visibility.lower(point)
        self._checkpoint.lower_timestamps(newest)
        self._checkpoint.flush()

    def forget_beyond(self, point: int) -> None:
        """Step 6 (in memory): next queue offsets re-read from the ConsumeQueues, remembered
        results of idempotent requests dropped, the valid end moved to ``point``, the offset
        table rebuilt from its checkpoint and the records kept."""
        self._appender.reset_queue_offsets()
        self._appender.forget_recent_results()
        self._pending_from = None
        self._whole_end = None
        if self._after_truncation is not None:
            self._after_truncation()

    def wait_dispatched(self, timeout_s: float) -> bool:
        """Every record dispatched to the ConsumeQueues (always) and the index (waits)."""
        if self._dispatcher is None:
            return True
        return self._dispatcher.wait_indexed(self.dispatched_to, timeout_s)

    def queue_max_offsets(self) -> dict[tuple[str, int], int]:
        """Raw ConsumeQueue max offsets (tests and diagnostics)."""
        return {key: cq.max_offset for key, cq in self._queues.queues().items()}
