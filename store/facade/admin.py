"""The facade's admin role: topics (create, grow, delete, list) and operations (flush,
retention, index rebuilds, verification, health and stats)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from store.errors import StoreClosed, StoreNotWritable
from store.facade.base import FacadeState
from store.format.offset_record import OffsetCommand, OffsetKind
from store.names import validate_topic
from store.recovery.recovery import rebuild_derived
from store.recovery.retention import delete_expired
from store.services import ServiceHealth
from store.types import StoreHealth, StoreStats, StoreVerification
from store.write.encoded import EncodedRecords

log = logging.getLogger("sparkmq.store")


class Admin(FacadeState):
    """Topics and operations (a role of :class:`~store.message_store.MessageStore`)."""

    # ------------------------------------------------------------------ topics
    def create_topic(self, topic: str, queues: int | None = None) -> int:
        """Create ``topic`` or grow it to ``queues`` queues (never shrinks); returns the count."""
        self._ensure_open()
        count = self.config.default_queues_per_topic if queues is None else queues
        created = self._topics.create_or_grow(topic, count).queues
        self._topics.persist()
        return created

    def ensure_topic(self, topic: str) -> int:
        """Queue count of ``topic``, creating it when auto-creation is on (what a producer's
        first write does). Raises :class:`~store.errors.UnknownTopic` when it is off,
        :class:`~store.errors.InvalidTopicName` for a bad or system topic name."""
        self._ensure_open()
        return self._appender.producible_queue_count(topic)

    def delete_topic(self, topic: str) -> bool:
        """Forget ``topic``: its config, ConsumeQueues and group offsets (bytes age out)."""
        self._ensure_open()
        validate_topic(topic)
        if any(topic in topics for topics in self._offsets.groups().values()):
            self._log_topic_deleted(topic)
        with self._appender.lock:
            existed = self._topics.delete(topic)
            self._queues.delete_topic(topic)
            self._offsets.delete_topic(topic)
            self._appender.forget_topic(topic)
        self._topics.persist()
        return existed

    def _log_topic_deleted(self, topic: str) -> None:
        """A DELETE_TOPIC offset record, so that the log drops the topic's offsets too. A
        replica that may not write deletes locally only: the master's record follows."""
        record = self._offset_log.record(OffsetCommand(OffsetKind.DELETE_TOPIC, topic=topic), self._clock())
        try:
            self._appender.put_encoded(EncodedRecords.of_fields([record]))
        except StoreNotWritable as exc:
            log.info("topic %s deleted: its offsets are forgotten here only (%s)", topic, exc)

    def topics(self, include_system: bool = False) -> dict[str, int]:
        return self._topics.topics(include_system=include_system)

    def has_topic(self, topic: str) -> bool:
        return topic in self._topics

    # ------------------------------------------------------------------ operations
    def flush(self) -> None:
        """Flush the CommitLog, ConsumeQueues, index and checkpoint now."""
        self._ensure_open()
        self.wait_indexed()
        self._flush_commitlog()
        self._flush_logics()
        self._persist_tables()

    def _flush_commitlog(self) -> None:
        with self._appender.lock:
            ts = self._appender.last_store_timestamp_ms
        self._commitlog.flush()
        if ts:
            self._checkpoint.update(physic_msg_timestamp_ms=ts)

    def _flush_logics(self) -> None:
        logics_ts = self._queues.flush()
        index_ts = self._index.flush() if self._index is not None else 0
        self._checkpoint.update(
            logics_msg_timestamp_ms=logics_ts or None, index_msg_timestamp_ms=index_ts or None
        )
        self._checkpoint.flush()

    def _persist_tables(self) -> None:
        if self._offsets.legacy:
            self._write_legacy_offsets()
        self._offsets.persist()
        self._delay_offsets.persist()
        self._topics.persist()

    def _write_legacy_offsets(self) -> None:
        """A ``consumerOffset.json`` from before offsets were log records: its entries are
        written into the log by the first master that can (so slaves and later recoveries
        have them); a replica that may not write leaves them for its master."""
        records = self._offset_log.rewrites(0, self._clock())
        try:
            if records:
                self._appender.put_encoded(EncodedRecords.of_fields(records))
        except (StoreNotWritable, StoreClosed) as exc:
            log.debug("offsets of an older consumerOffset.json not written yet: %s", exc)
            return
        self._offsets.written()
        log.info("wrote %d (group, topic) offset record(s) of an older consumerOffset.json", len(records))

    def run_retention(self, now_ms: int | None = None, force: bool = False) -> int:
        """Delete expired CommitLog files (then derived files below the new minimum).

        Files last written more than ``file_reserved_time_hours`` ago are deleted at the
        ``delete_when_hours`` hours, at any hour when ``force`` or when the disk is fuller than
        ``disk_max_used_ratio`` (then even unexpired files go, oldest first). The file being
        written is never deleted. Returns the number of CommitLog files deleted.
        """
        if self._closed:
            return 0
        now = self._clock() if now_ms is None else now_ms
        return delete_expired(
            self.config,
            self._commitlog,
            self._queues,
            self._index,
            now,
            force=force,
            before_delete=self._before_delete,
        )

    def add_retention_listener(self, listener: Callable[[int], None]) -> None:
        """``listener(end)`` runs before retention deletes the CommitLog below offset ``end``
        (on the thread that runs retention, after the live offsets are written again): a keeper
        of state records (the Kafka transaction coordinator's) writes again what only those
        files hold. A listener's fault is logged and retention goes on."""
        self._retention_listeners.append(listener)

    def remove_retention_listener(self, listener: Callable[[int], None]) -> None:
        if listener in self._retention_listeners:
            self._retention_listeners.remove(listener)

    def _before_delete(self, end: int) -> None:
        self._keep_offsets_before(end)
        for listener in list(self._retention_listeners):
            try:
                listener(end)
            except Exception:  # freeing the disk comes first; the listener's fault is logged
                log.exception("retention: a listener failed before deleting below %d", end)

    def _keep_offsets_before(self, end: int) -> None:
        """Retention deletes the CommitLog below ``end``: a master writes again the live
        offsets that only those files hold (:meth:`OffsetLog.rewrites`), then the table is
        checkpointed past ``end`` (a slave keeps them by the checkpoint alone; its master
        writes them again before deleting its own files)."""
        records = self._offset_log.rewrites(end, self._clock())
        if records:
            try:
                self._appender.put_encoded(EncodedRecords.of_fields(records))
                log.info(
                    "retention: wrote %d live offset record(s) again before offset %d", len(records), end
                )
            except StoreNotWritable as exc:
                log.info("retention: live offsets before %d kept by the checkpoint only (%s)", end, exc)
        try:
            self._offsets.persist(force=True)
        except OSError as exc:  # a full disk: freeing space comes first; the table is in memory
            log.warning(
                "retention: the offset checkpoint could not be written before deleting below %d "
                "(%s): offsets committed only there are lost if the broker crashes before the "
                "next checkpoint",
                end,
                exc,
            )

    def rebuild_indexes(self) -> int:
        """Rebuild every ConsumeQueue and the key index from the CommitLog; returns records."""
        self._ensure_open()
        self.wait_indexed()
        with self._appender.lock:
            replayed = rebuild_derived(self._commitlog, self._queues, self._index, self.delay_levels)
            self._appender.reset_queue_offsets()
        return replayed

    def verify(self, check_crc: bool = True) -> StoreVerification:
        """Walk every retained CommitLog record (layout checks, body CRCs with ``check_crc``)
        and report where the walk stopped; a stop before the max offset means damage there.
        Reads only; meant for a store no broker is writing to (``sparkmq store verify``)."""
        self._ensure_open()
        start = self._commitlog.min_offset
        records, end = 0, start
        for batch in self._commitlog.scan(start, check_crc):
            records += len(batch)
            end = max(end, batch.end_offset)
        max_offset = self._commitlog.max_offset
        return StoreVerification(records, start, end if records else max(start, end), max_offset)

    def health(self) -> StoreHealth:
        """Every background service's health: the index thread, the periodic flushes, offset
        persistence and retention, and SYNC_FLUSH's group commit. Not ok while any is failing."""
        services: list[ServiceHealth] = [s.health() for s in self._services]
        if self._index_dispatcher is not None:
            services.append(self._index_dispatcher.health())
        if self._group_commit is not None:
            services.append(self._group_commit.health())
        return StoreHealth(all(s.ok for s in services), tuple(services))

    def stats(self) -> StoreStats:
        indexed_to = (
            self._index_dispatcher.indexed_to if self._index_dispatcher else self._commitlog.max_offset
        )
        return StoreStats(
            messages_put=self._appender.messages_put,
            bytes_put=self._appender.bytes_put,
            commitlog_min_offset=self._commitlog.min_offset,
            commitlog_max_offset=self._commitlog.max_offset,
            commitlog_flushed_offset=self._commitlog.flushed_offset,
            index_dispatch_lag_bytes=max(0, self._commitlog.max_offset - indexed_to),
            queue_max_offsets={
                key: self._reader.visible_max(cq) for key, cq in self._queues.queues().items()
            },
        )
