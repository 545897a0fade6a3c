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

Length: about 770 lines, on purpose: this class *is* the store's public API (some sixty
methods), each a few lines that check arguments and delegate to the component owning the
structure. Splitting it would scatter the API; the logic lives in the components.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType
from typing import Self

import numpy as np
import numpy.typing as npt

from store.commitlog.commitlog import CommitLog
from store.commitlog.gather import GatheredRecords, gather_records
from store.commitlog.group_commit import GroupCommitService
from store.config import FlushDiskType, StoreConfig
from store.consumequeue.queue_store import ConsumeQueueStore
from store.errors import (
    IndexBehind,
    InvalidArgument,
    StoreClosed,
    StoreNotWritable,
    UnknownQueue,
    UnknownTopic,
)
from store.format.ids import decode_msg_id
from store.format.record import PREPARED_TX_OFFSET_POS, RecordFields
from store.format.vocabulary import SYSFLAG_TX_COMMIT, SYSFLAG_TX_MASK
from store.index.index_service import IndexDispatcher, IndexService
from store.io.clock import Clock, wall_clock_ms
from store.io.fs import FileSystem, OsFileSystem
from store.io.lock import DirectoryLock, remove_abort_file, write_abort_file
from store.metadata.checkpoint import StoreCheckpoint
from store.metadata.file_sizes import adopt_layout, record_replication
from store.metadata.offset_table import ConsumerOffsetTable, DelayOffsetTable
from store.metadata.topic_config import TopicConfigTable
from store.names import (
    SCHEDULE_TOPIC,
    SENDBACK_TOPIC,
    TIMER_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OFFSETS_TOPIC,
    TRANS_OP_HALF_TOPIC,
    is_system_topic,
    validate_group,
    validate_topic,
)
from store.read.queue_reader import BatchReadResult, QueueReader
from store.recovery.recovery import RecoveryReport, index_catch_up, rebuild_derived, recover
from store.recovery.retention import delete_expired
from store.services import PeriodicService, ServiceHealth
from store.types import (
    Boundary,
    GetResult,
    Message,
    MessageView,
    PutResult,
    StoreHealth,
    StoreStats,
    StoreVerification,
)
from store.write.appender import Appender
from store.write.arrivals import ArrivalListener, Arrivals
from store.write.columns import ProduceColumns, ProduceOutcome, put_columns, put_halves
from store.write.delay_levels import parse_delay_levels
from store.write.encoded import EncodedRecords
from store.write.idempotence import ProducerRef
from store.write.relocate import Relocation
from store.write.relocate_batch import RelocatedRecords
from store.write.relocator import RelocateOutcome, RelocationPointers, Relocator
from store.write.replica_log import ReplicaLog
from store.write.replication import Standby
from store.write.results import BatchPutResult
from store.write.transactions import HalfOf, TxOffsets
from store.write.visibility import Visibility

log = logging.getLogger("sparkmq.store")

_SYSTEM_TOPIC_QUEUES = {
    SCHEDULE_TOPIC: 18,
    TRANS_HALF_TOPIC: 1,
    TRANS_OP_HALF_TOPIC: 1,
    TRANS_CHECK_MAX_TIME_TOPIC: 1,
    TIMER_TOPIC: 1,
    SENDBACK_TOPIC: 1,
    TRANS_OFFSETS_TOPIC: 1,
}


class MessageStore:
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
        )
        self._relocator = Relocator(
            self._commitlog, self._appender, self.delay_levels, cfg.timer_precision_ms
        )
        self._closed = False
        self._start_services()

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

    def _ensure_open(self) -> None:
        if self._closed:
            raise StoreClosed(f"store {self.config.store_dir} is closed")

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
        with self._appender.lock:
            existed = self._topics.delete(topic)
            self._queues.delete_topic(topic)
            self._offsets.delete_topic(topic)
            self._appender.forget_topic(topic)
        self._topics.persist()
        return existed

    def topics(self, include_system: bool = False) -> dict[str, int]:
        return self._topics.topics(include_system=include_system)

    def has_topic(self, topic: str) -> bool:
        return topic in self._topics

    def queue_count(self, topic: str) -> int:
        tc = self._topics.get(topic)
        if tc is None:
            raise UnknownTopic(f"unknown topic {topic!r}")
        return tc.queues

    def _has_queue(self, topic: str, queue_id: int) -> bool:
        tc = self._topics.get(topic)
        return tc is not None and 0 <= queue_id < tc.queues

    # ------------------------------------------------------------------ produce
    def put_message(self, msg: Message) -> PutResult:
        return self.put_messages([msg])[0]

    def put_messages(
        self, messages: Sequence[Message], *, producer: ProducerRef | None = None
    ) -> list[PutResult]:
        """Store all messages or none; results in input order.

        Every message is validated and encoded before anything is written; queue offsets are
        assigned atomically (contiguous per queue within the call). With ``producer`` the call
        is idempotent: a retry with the same ref returns the original results (see
        :mod:`store.write.idempotence`); the messages' UNIQ_KEYs are then derived from the ref.
        """
        self._ensure_open()
        return self._appender.put_messages(messages, producer=producer)

    def put_batch(
        self,
        topic: str,
        bodies: Sequence[bytes],
        *,
        queue_ids: int | Sequence[int] | npt.NDArray[np.integer] | None = None,
        tags: str | Sequence[str | None] | None = None,
        keys: Sequence[str | None] | None = None,
        properties: Mapping[str, str | Sequence[str | None]] | None = None,
        uniq_keys: Sequence[str | None] | None = None,
        born_timestamps_ms: int | Sequence[int] | npt.NDArray[np.integer] | None = None,
        producer: ProducerRef | None = None,
    ) -> BatchPutResult:
        """Columnar :meth:`put_messages` for one topic: no Python object per message.

        ``keys`` holds each message's KEYS value (space-separated tokens, None for none);
        ``properties`` maps a name to one value for all or a value per message. Delay levels
        and transactions are not taken here (use :meth:`put_messages`). All or nothing.
        """
        self._ensure_open()
        return self._appender.put_batch(
            topic,
            bodies,
            queue_ids=queue_ids,
            tags=tags,
            keys=keys,
            properties=properties,
            uniq_keys=uniq_keys,
            born_timestamps_ms=born_timestamps_ms,
            producer=producer,
        )

    def put_columns(
        self, topic: str, columns: ProduceColumns, *, producer: ProducerRef | None = None
    ) -> ProduceOutcome:
        """The columnar produce entry every door uses (:mod:`store.write.columns`): queues
        resolved (explicit, sharding key, round robin), then :meth:`put_batch` when nothing is
        scheduled, else :meth:`put_messages`. All or nothing; the topic is auto-created when
        allowed. With ``producer`` the call is idempotent."""
        self._ensure_open()
        return put_columns(self._appender, topic, columns, producer)

    def put_halves(
        self,
        topic: str,
        columns: ProduceColumns,
        *,
        transaction: HalfOf,
        producer: ProducerRef | None = None,
    ) -> ProduceOutcome:
        """:meth:`put_columns` for the halves of ``transaction``, bound for ``topic``.

        They are stored in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 with ``REAL_TOPIC`` /
        ``REAL_QID`` / ``TRAN_MSG`` / ``__transactionId__`` / ``PGROUP`` (and
        ``CHECK_IMMUNITY_TIME_IN_SECONDS`` when ``transaction.immunity_s`` is set), exactly as
        :meth:`put_messages` stores ``transaction_prepared`` messages; ``topic`` must exist or be
        auto-creatable. Delayed and timer messages are refused. The result is in the half topic;
        register the halves with the transaction service (``store.publish``) to end them.
        """
        self._ensure_open()
        return put_halves(self._appender, topic, columns, transaction, producer)

    # ------------------------------------------------------------------ relocations and records
    def relocate(self, requests: Sequence[Relocation]) -> list[PutResult | None]:
        """Deliver (or roll) parked messages: one new record per request, appended atomically.

        Each request names a parked record by CommitLog offset; the new record is rebuilt from
        its bytes (:mod:`store.write.relocate`). The result is ``None`` where RocketMQ drops the
        message (a delayed half message) or the parked record is gone (deleted by retention:
        logged). Raises :class:`NotRelocatable` for a position that does not hold a parked
        record, with nothing written. :meth:`relocate_pointers` is the columnar form.
        """
        pointers = RelocationPointers.of(
            [r.commitlog_offset for r in requests],
            [int(r.kind) for r in requests],
            [r.enqueue_ms for r in requests],
            [r.dequeue_ms for r in requests],
        )
        outcome = self.relocate_pointers(pointers)
        out: list[PutResult | None] = [None] * len(requests)
        if outcome.result is not None:
            for row, result in zip(
                outcome.rows.tolist(), outcome.result.results(outcome.topics), strict=True
            ):
                out[row] = result
        return out

    def relocate_pointers(self, pointers: RelocationPointers) -> RelocateOutcome:
        """:meth:`relocate` for requests as columns, without a result object per record: the
        parked records read in one pass, rebuilt by byte edits (:mod:`store.write.relocator`),
        appended in one atomic append."""
        self._ensure_open()
        return self._relocator.relocate(pointers)

    def relocated_records(self, pointers: RelocationPointers) -> RelocatedRecords:
        """What :meth:`relocate_pointers` would append now, without appending it (how a resumed
        relocation tells which requests it had written)."""
        self._ensure_open()
        return self._relocator.build(pointers)

    def queue_units(
        self, topic: str, queue_id: int, offset: int, count: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """``(CommitLog offsets, sizes)`` of queue offsets ``[offset, offset + count)`` of a queue,
        those still stored (units below the queue's min offset are gone: skipped)."""
        self._ensure_open()
        queue = self._reader.queue(topic, queue_id)
        if queue is None or count <= 0:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        start = max(offset, queue.min_offset)
        units = queue.read_units(start, offset + count - start)
        return units["offset"].astype(np.int64), units["size"].astype(np.int64)

    def append_records(self, records: Sequence[RecordFields]) -> list[PutResult]:
        """Append records built whole elsewhere (a transaction's final messages and its op) in
        one atomic append: every field is kept but the queue offset, CommitLog offset and store
        timestamp. A user topic must exist or be auto-creatable."""
        self._ensure_open()
        if not records:
            return []
        encoded = EncodedRecords.of_fields(records)
        return self._appender.put_encoded(encoded).results(encoded.topics)

    def append_encoded(self, records: EncodedRecords) -> BatchPutResult:
        """:meth:`append_records` for records already encoded (``store.write.encoded``): one
        atomic append, results by position (``records.topics[i]`` is record i's topic)."""
        self._ensure_open()
        return self._appender.put_encoded(records)

    def read_bytes(self, offset: int, size: int) -> bytes | None:
        """``size`` stored bytes from CommitLog ``offset`` (None unless all within one file)."""
        self._ensure_open()
        return self._commitlog.read(offset, size)

    def now_ms(self) -> int:
        """The store's clock (injected in tests)."""
        return self._clock()

    def new_uniq_key(self) -> str:
        """A fresh UNIQ_KEY (RocketMQ ``MessageClientIDSetter``), for records the broker writes."""
        return self._appender.new_uniq_keys(1)[0]

    def new_uniq_keys(self, count: int) -> list[str]:
        """``count`` fresh UNIQ_KEYs."""
        return self._appender.new_uniq_keys(count)

    def read_records(self, offsets: npt.ArrayLike) -> GatheredRecords:
        """The stored bytes of the records at CommitLog ``offsets``, back to back in one buffer
        (one pass, no Python object per record); absent ones are skipped (``rows`` says which
        offset each record is)."""
        self._ensure_open()
        return gather_records(self._commitlog, offsets)

    def committed_half_offsets(self, from_offset: int) -> Iterator[tuple[int, int]]:
        """``(CommitLog offset, preparedTransactionOffset)`` of every COMMIT-type record from
        ``from_offset`` to the end of the CommitLog, in log order."""
        self._ensure_open()
        for batch in self._commitlog.scan(max(from_offset, self._commitlog.min_offset)):
            commits = (batch.sys_flags & SYSFLAG_TX_MASK) == SYSFLAG_TX_COMMIT
            for offset in batch.commitlog_offsets[commits].tolist():
                raw = self._commitlog.read_record(offset)
                if raw is not None:
                    yield (
                        offset,
                        int.from_bytes(raw[PREPARED_TX_OFFSET_POS : PREPARED_TX_OFFSET_POS + 8], "big"),
                    )

    def delay_offsets(self) -> dict[int, int]:
        """``config/delayOffset.json``: level -> next ``SCHEDULE_TOPIC_XXXX`` queue ``level-1``
        offset to examine (every offset below it has been delivered)."""
        return self._delay_offsets.levels()

    def set_delay_offsets(self, offsets: Mapping[int, int]) -> None:
        """Mirror the delay resolver's progress (persisted with the other offset tables)."""
        for level, offset in offsets.items():
            self._delay_offsets.set(level, offset)

    def read_record(self, offset: int) -> bytes | None:
        """The stored bytes of the record at CommitLog ``offset`` (None when absent)."""
        self._ensure_open()
        return self._commitlog.read_record(offset)

    @property
    def commitlog_max_offset(self) -> int:
        """Where the next record will be appended."""
        return self._commitlog.max_offset

    def stored_identities(self, from_offset: int) -> Iterator[tuple[str, str | None]]:
        """(topic, UNIQ_KEY) of every record from CommitLog offset ``from_offset`` to the end,
        in log order (how a resumed relocation finds what it already wrote)."""
        self._ensure_open()
        for batch in self._commitlog.scan(max(from_offset, self._commitlog.min_offset)):
            for code, uniq in zip(batch.topic_codes.tolist(), batch.uniq_keys, strict=True):
                yield batch.topics[code], uniq

    def add_arrival_listener(self, listener: ArrivalListener) -> None:
        """``listener(topic, queue_id, max_offset)`` after every put (keep it cheap)."""
        self._arrivals.add_listener(listener)

    def remove_arrival_listener(self, listener: ArrivalListener) -> None:
        self._arrivals.remove_listener(listener)

    def wait_for_message(self, topic: str, queue_id: int, offset: int, timeout_s: float) -> bool:
        """Block until the queue's max offset passes ``offset`` (True) or the timeout (False)."""
        return self._arrivals.wait_for(topic, queue_id, offset, timeout_s)

    def wait_indexed(self, timeout_s: float = 10.0) -> bool:
        """Block until every message acknowledged so far is in the key index."""
        if self._index_dispatcher is None:
            return True
        return self._index_dispatcher.wait_indexed(self._commitlog.max_offset, timeout_s)

    # ------------------------------------------------------------------ consume
    def get_messages(
        self, topic: str, queue_id: int, offset: int, max_messages: int = 32, tag_expression: str | None = "*"
    ) -> GetResult:
        self._ensure_open()
        _check_read_args(offset, max_messages)
        return self._reader.get_messages(topic, queue_id, offset, max_messages, tag_expression)

    def read_batch(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_messages: int,
        tag_expression: str | None = "*",
        end_offset: int | None = None,
    ) -> BatchReadResult:
        self._ensure_open()
        _check_read_args(offset, max_messages)
        return self._reader.read_batch(topic, queue_id, offset, max_messages, tag_expression, end_offset)

    def min_offset(self, topic: str, queue_id: int) -> int:
        self._require_queue(topic, queue_id)
        cq = self._queues.get(topic, queue_id)
        return 0 if cq is None else cq.min_offset

    def max_offset(self, topic: str, queue_id: int) -> int:
        """The queue's max offset as readers see it (a replica: bounded by the confirm offset)."""
        cq = self._queues.get(topic, queue_id)
        if cq is None:
            self._require_queue(topic, queue_id)
            return 0
        return self._reader.visible_max(cq)

    def queue_offsets(self, topic: str) -> dict[int, tuple[int, int]]:
        """queue id -> (min offset, max offset) for every queue of ``topic``."""
        count = self.queue_count(topic)
        return {q: (self.min_offset(topic, q), self.max_offset(topic, q)) for q in range(count)}

    def _require_queue(self, topic: str, queue_id: int) -> None:
        count = self.queue_count(topic)
        if not 0 <= queue_id < count:
            raise UnknownQueue(f"queue {queue_id} does not exist: topic {topic!r} has {count} queues")

    def offset_for_timestamp(
        self, topic: str, queue_id: int, timestamp_ms: int, boundary: Boundary = Boundary.LOWER
    ) -> int:
        """LOWER: leftmost offset stored at or after T (max offset when T is after the last
        message). UPPER: last offset stored at or before T (min offset - 1 when T precedes
        every message)."""
        self._ensure_open()
        self._require_queue(topic, queue_id)
        return self._reader.offset_for_timestamp(topic, queue_id, timestamp_ms, boundary)

    # ------------------------------------------------------------------ query
    def get_by_commitlog_offset(self, offset: int) -> MessageView | None:
        self._ensure_open()
        return self._commitlog.get_message(offset)

    def get_by_msg_id(self, msg_id: str) -> MessageView | None:
        """Look up an offsetMsgId (32 hex chars); None when absent (or another broker's)."""
        self._ensure_open()
        _, offset = decode_msg_id(msg_id)
        if offset < self._commitlog.min_offset:
            return None
        return self._commitlog.get_message(offset)

    def query_by_key(
        self, topic: str, key: str, begin_ms: int = 0, end_ms: int = 2**63 - 1, max_results: int = 64
    ) -> list[MessageView]:
        """Messages of ``topic`` with ``key`` among their KEYS (or as UNIQ_KEY), newest first."""
        self._ensure_open()
        if self._index is None:
            raise InvalidArgument("the key index is disabled (index_enabled=False)")
        wait_ms = self.config.index_lookup_wait_ms
        if not self.wait_indexed(wait_ms / 1000):
            behind = self.stats().index_dispatch_lag_bytes
            raise IndexBehind(
                f"the key index is {behind} bytes behind the CommitLog and did not catch up in "
                f"{wait_ms} ms; a lookup now could miss stored messages"
            )
        found: list[MessageView] = []
        seen: set[int] = set()
        for offset in self._index.query(topic, key, begin_ms, end_ms, max_results):
            if offset in seen or offset < self._commitlog.min_offset:
                continue
            seen.add(offset)
            view = self._commitlog.get_message(offset)
            if view is None or view.topic != topic:
                continue
            matches = key in view.keys or view.uniq_key == key
            if matches and begin_ms <= view.store_timestamp_ms <= end_ms:
                found.append(view)
        return found[:max_results]

    def get_by_uniq_key(self, topic: str, uniq_key: str) -> MessageView | None:
        hits = [m for m in self.query_by_key(topic, uniq_key) if m.uniq_key == uniq_key]
        return hits[0] if hits else None

    # ------------------------------------------------------------------ consumer offsets
    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.commit_offsets(group, topic, {queue_id: offset})

    def commit_offsets(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        self._ensure_open()
        validate_group(group)
        count = self.queue_count(topic)
        for queue_id, offset in offsets.items():
            if not 0 <= int(queue_id) < count:
                raise UnknownQueue(f"queue {queue_id} does not exist: topic {topic!r} has {count} queues")
            if int(offset) < 0:
                raise InvalidArgument(f"offset must be >= 0, got {offset} for queue {queue_id}")
        self._offsets.commit_many(group, topic, {int(q): int(o) for q, o in offsets.items()})

    @property
    def transaction_offsets_applied(self) -> int:
        """First ``rmq_sys_trans_offsets`` queue offset whose offsets are not applied yet."""
        return self._offsets.transaction_offsets_applied

    def apply_transaction_offsets(self, position: int, entry: TxOffsets) -> bool:
        """Apply the offsets record of a committed transaction found at ``rmq_sys_trans_offsets``
        queue offset ``position`` (records in queue order; one below the watermark was applied
        before and is skipped: returns False). Queues that no longer exist are left out, logged."""
        self._ensure_open()
        kept: dict[str, dict[int, int]] = {}
        for topic, offsets in entry.offsets.items():
            config = self._topics.get(topic)
            count = config.queues if config is not None else 0
            for queue_id, offset in offsets.items():
                if 0 <= queue_id < count and offset >= 0:
                    kept.setdefault(topic, {})[queue_id] = offset
                else:
                    log.warning(
                        "transaction offsets of group %s: %s queue %d (offset %d) no longer exists",
                        entry.group,
                        topic,
                        queue_id,
                        offset,
                    )
        return self._offsets.apply_transaction(position, entry.group, kept)

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int:
        return self._offsets.query(group, topic, queue_id)

    def committed_offsets(self, group: str, topic: str) -> dict[int, int]:
        return self._offsets.offsets(group, topic)

    def groups(self) -> dict[str, list[str]]:
        return self._offsets.groups()

    def delete_group_offsets(self, group: str, topic: str | None = None) -> int:
        return self._offsets.delete(group, topic)

    def lag(self, group: str, topic: str) -> dict[int, int]:
        """Per queue: max offset - committed offset (an uncommitted queue counts from its min)."""
        committed = self._offsets.offsets(group, topic)
        result = {}
        for queue_id, (lo, hi) in self.queue_offsets(topic).items():
            result[queue_id] = max(0, hi - max(committed.get(queue_id, lo), lo))
        return result

    # ------------------------------------------------------------------ replication
    @property
    def replicated(self) -> bool:
        """Member of a replica group (``StoreConfig.replicated``)."""
        return self.config.replicated

    @property
    def confirm_offset(self) -> int:
        """The CommitLog offset readers are bounded by: every in-sync replica holds the records
        ending at or below it. A lone store: its max offset (no bound)."""
        bound = self._visibility.bound
        return self._commitlog.max_offset if bound is None else bound

    def replica_log(self) -> ReplicaLog:
        """The store as the replication layer works it (:class:`store.ha.ReplicaController`
        takes it): raw CommitLog reads and appends, the confirm offset, the put path's hooks,
        the steps of a truncation."""
        self._ensure_open()
        return self._replica_log

    def append_replicated(self, offset: int, data: bytes | bytearray | memoryview) -> int:
        """Append raw CommitLog bytes received from the master exactly at the local max offset
        and dispatch the records they complete through the normal dispatch (the queue offsets
        are the master's); returns the new max offset. Raises ``ReplicationGap`` (nothing
        written) or ``ReplicatedDataCorrupt`` (see :meth:`ReplicaLog.append_replicated`)."""
        self._ensure_open()
        return self._replica_log.append_replicated(offset, data)

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
        self._offsets.persist()
        self._delay_offsets.persist()
        self._topics.persist()

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
        return delete_expired(self.config, self._commitlog, self._queues, self._index, now, force=force)

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

    def destroy(self) -> None:
        """Close and delete the whole store directory."""
        self.close()
        shutil.rmtree(self.config.store_dir, ignore_errors=True)


def _check_read_args(offset: int, max_messages: int) -> None:
    if offset < 0:
        raise InvalidArgument(f"offset must be >= 0, got {offset}")
    if max_messages < 1:
        raise InvalidArgument(f"max_messages must be >= 1, got {max_messages}")
