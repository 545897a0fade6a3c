"""``MessageStore``: the one facade over the storage engine (see docs/store_api.md).

It composes one object per on-disk structure and owns the threads that keep them in step::

    put ──encode──► CommitLog ──dispatch──► ConsumeQueues (inline, under the put lock)
                       │                └─► IndexService (index thread; may lag, catches up)
                       └── flush service / group commit ──► checkpoint

Reads go through :class:`~store.read.queue_reader.QueueReader`, shared with the lock-free
:class:`~store.read.store_reader.StoreReader`. Recovery is :func:`store.recovery.recovery.recover`.

A replicated store (``StoreConfig.replicated``) is driven by :mod:`store.ha` through
:meth:`MessageStore.replica_log`; readers see only what its confirm offset covers
(:mod:`store.write.visibility`) and producers only reach it while it is the master
(:mod:`store.write.replication`).

This class *is* the store's public API (some sixty methods), each a few lines that check
arguments and delegate to the component owning the structure. This module holds the
lifecycle (open, recover, start the services, close); the methods are grouped by role in
:mod:`store.facade`, one mixin each, all inherited here (no call goes through an extra layer):

* :class:`~store.facade.writes.Writes`: produce, relocations, appends of whole records;
* :class:`~store.facade.reads.Reads`: queue reads, lookups, raw record reads, arrivals;
* :class:`~store.facade.groups.Groups`: consumer offsets, lag, delay progress;
* :class:`~store.facade.admin.Admin`: topics, flushes, retention, verification, health;
* :class:`~store.facade.replication.Replication`: what :mod:`store.ha` drives.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from types import TracebackType
from typing import Self

from store.commitlog.commitlog import CommitLog
from store.commitlog.group_commit import GroupCommitService
from store.config import FlushDiskType, StoreConfig
from store.consumequeue.queue_store import ConsumeQueueStore
from store.errors import StoreNotWritable
from store.facade.admin import Admin
from store.facade.groups import Groups
from store.facade.reads import Reads
from store.facade.replication import Replication
from store.facade.writes import Writes
from store.index.index_service import IndexDispatcher, IndexService
from store.io.clock import Clock, wall_clock_ms
from store.io.fs import FileSystem, OsFileSystem
from store.io.lock import DirectoryLock, remove_abort_file, write_abort_file
from store.metadata.checkpoint import StoreCheckpoint
from store.metadata.file_sizes import adopt_layout, record_replication
from store.metadata.offset_table import ConsumerOffsetTable, DelayOffsetTable
from store.metadata.topic_config import TopicConfigTable
from store.names import (
    CONSUMER_OFFSETS_TOPIC,
    KAFKA_TXN_STATE_TOPIC,
    POP_STATE_TOPIC,
    SCHEDULE_TOPIC,
    SENDBACK_TOPIC,
    SINK_STAGING_TOPIC,
    TIMER_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OFFSETS_TOPIC,
    TRANS_OP_HALF_TOPIC,
    is_system_topic,
)
from store.read.queue_reader import QueueReader
from store.recovery.recovery import RecoveryReport, index_catch_up, recover
from store.services import PeriodicService
from store.write.appender import Appender
from store.write.arrivals import Arrivals
from store.write.delay_levels import parse_delay_levels
from store.write.offset_log import OffsetLog
from store.write.relocator import Relocator
from store.write.replica_log import ReplicaLog
from store.write.replication import Standby
from store.write.results import BatchPutResult
from store.write.visibility import Visibility

#: ``BatchPutResult`` stays importable from here, where it was defined before.
__all__ = ["BatchPutResult", "MessageStore"]

log = logging.getLogger("sparkmq.store")

_SYSTEM_TOPIC_QUEUES = {
    SCHEDULE_TOPIC: 18,
    TRANS_HALF_TOPIC: 1,
    TRANS_OP_HALF_TOPIC: 1,
    TRANS_CHECK_MAX_TIME_TOPIC: 1,
    TIMER_TOPIC: 1,
    SENDBACK_TOPIC: 1,
    TRANS_OFFSETS_TOPIC: 1,
    POP_STATE_TOPIC: 1,
    CONSUMER_OFFSETS_TOPIC: 1,
    KAFKA_TXN_STATE_TOPIC: 1,
    SINK_STAGING_TOPIC: 1,
}


class MessageStore(Writes, Reads, Groups, Admin, Replication):
    """A RocketMQ-compatible store in one directory. Thread-safe; use :meth:`open`."""

    def __init__(self, config: StoreConfig, clock_ms: Clock, fs: FileSystem) -> None:
        self.config = config
        self._clock = clock_ms
        self._fs = fs
        self.delay_levels = parse_delay_levels(config.delay_levels)
        self._store_host = (config.store_host, config.store_port)
        self._lock = DirectoryLock(config.lock_path)
        self._closed = True
        self._services: list[PeriodicService] = []
        self._retention_listeners: list[Callable[[int], None]] = []
        self._group_commit: GroupCommitService | None = None
        self._index_dispatcher: IndexDispatcher | None = None
        self._arrivals = Arrivals(self.max_offset)
        self.recovery: RecoveryReport | None = None

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    def open(
        cls,
        config: StoreConfig,
        *,
        clock_ms: Clock = wall_clock_ms,
        fs: FileSystem | None = None,
    ) -> MessageStore:
        """Lock the directory, recover, and start the background services.

        Raises :class:`~store.errors.StoreLocked` when another process has it open.
        """
        config = adopt_layout(config.validate())
        store = cls(config, clock_ms, fs if fs is not None else OsFileSystem(config.preallocate_files))
        store._open()
        return store

    def _open(self) -> None:
        cfg = self.config
        cfg.store_dir.mkdir(parents=True, exist_ok=True)
        self._lock.acquire()
        try:
            abnormal = cfg.abort_path.exists()
            cfg.config_dir.mkdir(parents=True, exist_ok=True)
            self._checkpoint = StoreCheckpoint.open(cfg.checkpoint_path, self._fs)
            self._commitlog = CommitLog(cfg.commitlog_dir, cfg.commitlog_file_size_bytes, self._fs)
            self._commitlog.load()
            self._cut_partial_record()
            self._queues = ConsumeQueueStore.from_config(cfg, fs=self._fs)
            self._index = (
                IndexService.from_config(cfg, clock_ms=self._clock, fs=self._fs)
                if cfg.index_enabled
                else None
            )
            self._topics = TopicConfigTable.from_config(cfg)
            self._offsets = ConsumerOffsetTable.from_config(cfg)
            self._delay_offsets = DelayOffsetTable.from_config(cfg)
            self.recovery = recover(
                self._commitlog,
                self._queues,
                self._index,
                self._checkpoint,
                abnormal=abnormal,
                check_crc=cfg.check_crc_on_recover,
                delay_levels=self.delay_levels,
            )
            last_store_ts = self._after_recovery()
            self._offset_log = OffsetLog(
                self._offsets, self._commitlog, self._queues, self._store_host, self._has_queue
            )
            replayed = self._offset_log.replay()
            if replayed:
                log.info("offset table: applied %d offset record(s) after its checkpoint", replayed)
            self._visibility = self._open_visibility()
            record_replication(cfg)
            write_abort_file(cfg.abort_path)
        except BaseException:
            self._lock.release()
            raise
        self._reader = QueueReader(self._queues, self._commitlog, self._has_queue, self._visibility_bound)
        if self._index is not None:
            behind = self.recovery.index_behind_from if self.recovery is not None else None
            self._index_dispatcher = IndexDispatcher(
                self._index, self._commitlog.max_offset if behind is None else behind
            )
        self._appender = Appender(
            cfg,
            clock_ms=self._clock,
            delay_levels=self.delay_levels,
            commitlog=self._commitlog,
            queues=self._queues,
            topics=self._topics,
            index=self._index_dispatcher,
            visibility=self._visibility,
            lookup_uniq_key=self.get_by_uniq_key,
            last_store_timestamp_ms=last_store_ts,
        )
        if cfg.replicated:
            self._appender.replication = Standby()
        self._appender.on_dispatched = self._offset_log.dispatched
        self._replica_log = ReplicaLog(
            config=cfg,
            commitlog=self._commitlog,
            queues=self._queues,
            index=self._index,
            index_dispatcher=self._index_dispatcher,
            checkpoint=self._checkpoint,
            topics=self._topics,
            appender=self._appender,
            visibility=self._visibility,
            delay_levels=self.delay_levels,
            after_truncation=self._offset_log.truncated,
        )
        self._relocator = Relocator(
            self._commitlog, self._appender, self.delay_levels, cfg.timer_precision_ms
        )
        self._closed = False
        self._start_services()

    def _cut_partial_record(self) -> None:
        """A replica stopped between two frames of its master may end with the head of a
        record whose tail never came: recovery could take it for whole (the tail is zeros
        where properties were), so it is cut here, where the checkpoint marks it; the master
        sends it again."""
        partial = self._checkpoint.values.partial_record_offset
        if partial is None:
            return
        log.warning("the CommitLog ends inside a record received in part at offset %d: cut there", partial)
        self._commitlog.truncate_durably(partial, "a record the replica had received in part")
        self._checkpoint.write_partial_record(None)

    def _open_visibility(self) -> Visibility:
        """A replicated store starts bounded by the confirm offset it recorded (never past
        its recovered end); a lone store is unbounded."""
        confirm: int | None = None
        if self.config.replicated:
            confirm = min(self._checkpoint.values.confirm_phy_offset, self._commitlog.max_offset)
            self._checkpoint.write_confirm_offset(confirm)
            self._checkpoint.flush()
        return Visibility(self._arrivals, self._checkpoint.write_confirm_offset, confirm)

    def _visibility_bound(self) -> int | None:
        return self._visibility.bound

    def _after_recovery(self) -> int:
        """Reconcile metadata with the recovered data; returns the last store timestamp."""
        self._queues.correct_min_offsets(self._commitlog.min_offset)
        last_store_ts = 0
        for (topic, _), cq in self._queues.queues().items():
            if topic not in self._topics and not is_system_topic(topic):
                queues = 1 + max(q for (t, q) in self._queues.queues(topic))
                log.warning("topic %s has ConsumeQueues but no topics.json entry: restoring it", topic)
                self._topics.create_or_grow(topic, max(queues, self.config.default_queues_per_topic))
            unit = cq.get_unit(cq.max_offset - 1) if cq.max_offset > cq.min_offset else None
            stored_at = self._commitlog.read_store_timestamp(unit[0]) if unit is not None else None
            last_store_ts = max(last_store_ts, stored_at or 0)
        for topic, queues in _SYSTEM_TOPIC_QUEUES.items():
            self._topics.create_or_grow(topic, queues, allow_system=True)
        self._topics.persist()
        return last_store_ts

    def _start_services(self) -> None:
        cfg = self.config
        if cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            self._group_commit = GroupCommitService(self._commitlog.flush, self._commitlog.flushed_offset)
            self._group_commit.start()
            self._appender.group_commit = self._group_commit
        if not cfg.background_services:
            self._index_catch_up()
            return
        self._services = [
            PeriodicService("flush-commitlog", cfg.flush_interval_ms / 1000, self._flush_commitlog),
            PeriodicService("flush-logics", cfg.flush_consume_queue_interval_ms / 1000, self._flush_logics),
            PeriodicService("persist-offsets", cfg.offset_persist_interval_ms / 1000, self._persist_tables),
            PeriodicService("retention", cfg.clean_interval_ms / 1000, self.run_retention),
        ]
        for service in self._services:
            service.start()
        if self._index_dispatcher is not None:
            self._index_dispatcher.start()
            self._index_catch_up()

    def _index_catch_up(self) -> None:
        """Hand the index thread what recovery could not index (a full disk), ahead of any put."""
        behind = self.recovery.index_behind_from if self.recovery is not None else None
        if self._index_dispatcher is not None and behind is not None:
            log.warning("the index resumes from offset %d in the background (lookups wait)", behind)
            self._index_dispatcher.catch_up(index_catch_up(self._commitlog, behind, self.delay_levels))

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Flush everything, write the checkpoint, remove ``abort`` and release the lock.

        If flushing or persisting fails (a full disk: the tables are rewritten through new
        files), every file and the lock are still released but ``abort`` stays, so the next
        open recovers as after a crash; then raises :class:`StoreNotWritable`, saying what
        could not be saved (consumer offsets committed since their last persist are lost)."""
        if self._closed or not self._appender.close():
            return
        self._closed = True
        self._stop_threads(drain=True)
        try:
            self._flush_commitlog()
            self._flush_logics()
            self._persist_tables()
        except OSError as exc:
            self._close_files()
            self._lock.release()
            log.error(
                "the store could not shut down cleanly (%s): the next open recovers as after a crash", exc
            )
            raise StoreNotWritable(
                f"clean shutdown incomplete ({exc}); 'abort' kept, the next open recovers as after a crash"
            ) from exc
        self._close_files()
        remove_abort_file(self.config.abort_path)
        self._lock.release()

    def abandon(self) -> None:
        """Drop every resource without a clean shutdown, as if the process had died.

        Nothing is flushed or persisted and ``abort`` stays, so the next :meth:`open` runs
        abnormal recovery. For fault-injection tests and tools; the data written so far is
        in the page cache exactly as after a ``kill -9``.
        """
        if self._closed or not self._appender.close():
            return
        self._closed = True
        self._stop_threads(drain=False)
        self._close_files()
        self._lock.release()

    def _stop_threads(self, drain: bool) -> None:
        self._arrivals.close()
        for service in self._services:
            service.stop()
        if self._index_dispatcher is not None:
            self._index_dispatcher.stop(drain=drain)
        if self._group_commit is not None:
            self._group_commit.stop()

    def _close_files(self) -> None:
        self._commitlog.close()
        self._queues.close()
        if self._index is not None:
            self._index.close()
        self._checkpoint.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object | TracebackType) -> None:
        self.close()

    def destroy(self) -> None:
        """Close and delete the whole store directory."""
        self.close()
        shutil.rmtree(self.config.store_dir, ignore_errors=True)
