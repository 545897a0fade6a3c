"""``MessageStore``: the one facade over the storage engine (see docs/store_api.md).

It composes one object per on-disk structure and owns the threads that keep them in step::

    put ──encode──► CommitLog ──dispatch──► ConsumeQueues (inline, under the put lock)
                       │                └─► IndexService (index thread; may lag, catches up)
                       └── flush service / group commit ──► checkpoint

Reads go through :class:`~store.queue_reader.QueueReader`, shared with the lock-free
:class:`~store.reader.StoreReader`. Recovery is :func:`store.recovery.recover`.
"""

from __future__ import annotations

import logging
import os
import queue
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import numpy as np
import numpy.typing as npt

from store.batch_codec import BatchColumns, EncodedBatch, UniqKeyGenerator, encode_columns
from store.checkpoint import StoreCheckpoint
from store.codec import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    BodyPolicy,
    decode_msg_id,
    encode_msg_id,
    encode_record,
)
from store.commitlog import CommitLog
from store.config import FlushDiskType, StoreConfig
from store.consume_queue import ConsumeQueueStore
from store.delay import parse_delay_levels
from store.dispatch_batch import DispatchBatch
from store.errors import InvalidArgument, StoreClosed, StoreNotWritable, UnknownQueue, UnknownTopic
from store.flush import GroupCommitService
from store.fs import FileSystem, OsFileSystem
from store.idempotence import ProducerRef, ProducerTable, request_uniq_keys
from store.index_file import IndexService
from store.lock import DirectoryLock, remove_abort_file, write_abort_file
from store.names import SCHEDULE_TOPIC, TRANS_HALF_TOPIC, is_system_topic, validate_group, validate_topic
from store.offset_table import ConsumerOffsetTable, DelayOffsetTable
from store.producing import build_record, place, tags_codes_for, tags_hashes_of, validate_message
from store.queue_reader import BatchReadResult, QueueReader
from store.recovery import RecoveryReport, rebuild_derived, recover
from store.services import PeriodicService
from store.topic_config import TopicConfigTable
from store.types import Boundary, GetResult, Message, MessageView, PutResult

log = logging.getLogger("sparkmq.store")

ArrivalListener = Callable[[str, int, int], None]
_SYSTEM_TOPIC_QUEUES = {SCHEDULE_TOPIC: 18, TRANS_HALF_TOPIC: 1}


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class BatchPutResult:
    """Where a columnar batch landed: one entry per message, in input order."""

    topic: str
    queue_ids: npt.NDArray[np.int32]
    queue_offsets: npt.NDArray[np.int64]
    commitlog_offsets: npt.NDArray[np.int64]
    sizes: npt.NDArray[np.int32]
    uniq_keys: Sequence[str]
    store_timestamp_ms: int
    store_host: tuple[str, int]

    def __len__(self) -> int:
        return len(self.queue_ids)

    def msg_id(self, i: int) -> str:
        return encode_msg_id(self.store_host, int(self.commitlog_offsets[i]))

    def results(self) -> list[PutResult]:
        """The same information as :class:`PutResult` objects (one Python object each)."""
        return [
            PutResult(
                msg_id=self.msg_id(i),
                uniq_key=self.uniq_keys[i],
                topic=self.topic,
                queue_id=int(self.queue_ids[i]),
                queue_offset=int(self.queue_offsets[i]),
                commitlog_offset=int(self.commitlog_offsets[i]),
                store_timestamp_ms=self.store_timestamp_ms,
                size_bytes=int(self.sizes[i]),
            )
            for i in range(len(self))
        ]


@dataclass(frozen=True, slots=True)
class StoreStats:
    messages_put: int
    bytes_put: int
    commitlog_min_offset: int
    commitlog_max_offset: int
    commitlog_flushed_offset: int
    #: CommitLog bytes written but not yet in the key index.
    index_dispatch_lag_bytes: int
    #: (topic, queue id) -> max offset, for every queue with a ConsumeQueue.
    queue_max_offsets: dict[tuple[str, int], int]


class MessageStore:
    """A RocketMQ-compatible store in one directory. Thread-safe; use :meth:`open`."""

    def __init__(self, config: StoreConfig, clock_ms: Callable[[], int], fs: FileSystem) -> None:
        self.config = config
        self._clock = clock_ms
        self._fs = fs
        self.delay_levels = parse_delay_levels(config.delay_levels)
        self._policy = BodyPolicy.from_config(config)
        self._store_host = (config.store_host, config.store_port)
        self._lock = DirectoryLock(config.lock_path)
        self._put_lock = threading.Lock()
        self._arrival = threading.Condition()
        self._listeners: list[ArrivalListener] = []
        self._queue_next: dict[tuple[str, int], int] = {}
        self._round_robin: dict[str, int] = {}
        self._producible: set[str] = set()
        self._last_store_ts = 0
        self._messages_put = 0
        self._bytes_put = 0
        self._closed = True
        self._services: list[PeriodicService] = []
        self._group_commit: GroupCommitService | None = None
        self._index_queue: queue.Queue[DispatchBatch | None] = queue.Queue()
        self._index_thread: threading.Thread | None = None
        self._index_cond = threading.Condition()
        self._indexed_to = 0
        self.recovery: RecoveryReport | None = None
        self._uniq = UniqKeyGenerator(config.store_host, clock_ms=clock_ms)
        self._producers = ProducerTable()

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    def open(
        cls,
        config: StoreConfig,
        *,
        clock_ms: Callable[[], int] = wall_clock_ms,
        fs: FileSystem | None = None,
    ) -> MessageStore:
        """Lock the directory, recover, and start the background services.

        Raises :class:`~store.errors.StoreLocked` when another process has it open.
        """
        store = cls(config.validate(), clock_ms, fs if fs is not None else OsFileSystem())
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
            self._queues = ConsumeQueueStore.from_config(cfg)
            self._index = IndexService.from_config(cfg, clock_ms=self._clock) if cfg.index_enabled else None
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
            self._after_recovery()
            write_abort_file(cfg.abort_path)
        except BaseException:
            self._lock.release()
            raise
        self._closed = False
        self._start_services()

    def _after_recovery(self) -> None:
        self._indexed_to = self._commitlog.max_offset
        self._queues.correct_min_offsets(self._commitlog.min_offset)
        for (topic, _), cq in self._queues.queues().items():
            if topic not in self._topics and not is_system_topic(topic):
                queues = 1 + max(q for (t, q) in self._queues.queues(topic))
                log.warning("topic %s has ConsumeQueues but no topics.json entry: restoring it", topic)
                self._topics.create_or_grow(topic, max(queues, self.config.default_queues_per_topic))
            unit = cq.get_unit(cq.max_offset - 1) if cq.max_offset > cq.min_offset else None
            stored_at = self._commitlog.read_store_timestamp(unit[0]) if unit is not None else None
            self._last_store_ts = max(self._last_store_ts, stored_at or 0)
        for topic, queues in _SYSTEM_TOPIC_QUEUES.items():
            self._topics.create_or_grow(topic, queues, allow_system=True)
        self._topics.persist()

    def _start_services(self) -> None:
        cfg = self.config
        if cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            self._group_commit = GroupCommitService(self._commitlog.flush, self._commitlog.flushed_offset)
            self._group_commit.start()
        if not cfg.background_services:
            return
        self._services = [
            PeriodicService("flush-commitlog", cfg.flush_interval_ms / 1000, self._flush_commitlog),
            PeriodicService("flush-logics", cfg.flush_consume_queue_interval_ms / 1000, self._flush_logics),
            PeriodicService("persist-offsets", cfg.offset_persist_interval_ms / 1000, self._persist_tables),
            PeriodicService("retention", cfg.clean_interval_ms / 1000, self.run_retention),
        ]
        for service in self._services:
            service.start()
        if self._index is not None:
            self._index_thread = threading.Thread(target=self._index_loop, name="sparkmq-index", daemon=True)
            self._index_thread.start()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Flush everything, write the checkpoint, remove ``abort`` and release the lock."""
        with self._put_lock:
            if self._closed:
                return
            self._closed = True
        with self._arrival:
            self._arrival.notify_all()
        for service in self._services:
            service.stop()
        self._stop_index_thread()
        if self._group_commit is not None:
            self._group_commit.stop()
        self._flush_commitlog()
        self._flush_logics()
        self._persist_tables()
        self._close_files()
        remove_abort_file(self.config.abort_path)
        self._lock.release()

    def abandon(self) -> None:
        """Drop every resource without a clean shutdown, as if the process had died.

        Nothing is flushed or persisted and ``abort`` stays, so the next :meth:`open` runs
        abnormal recovery. For fault-injection tests and tools; the data written so far is
        in the page cache exactly as after a ``kill -9``.
        """
        with self._put_lock:
            if self._closed:
                return
            self._closed = True
        for service in self._services:
            service.stop()
        self._stop_index_thread(drain=False)
        if self._group_commit is not None:
            self._group_commit.stop()
        self._close_files()
        self._lock.release()

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

    def delete_topic(self, topic: str) -> bool:
        """Forget ``topic``: its config, ConsumeQueues and group offsets (bytes age out)."""
        self._ensure_open()
        validate_topic(topic)
        with self._put_lock:
            existed = self._topics.delete(topic)
            self._queues.delete_topic(topic)
            self._offsets.delete_topic(topic)
            for key in [k for k in self._queue_next if k[0] == topic]:
                del self._queue_next[key]
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

    def _queue_count_for_put(self, topic: str) -> int:
        """Queue count of a user topic a producer writes to (auto-created when allowed)."""
        if topic not in self._producible:
            validate_topic(topic)  # refuses bad names and system topics
            self._producible.add(topic)
        tc = self._topics.get(topic)
        if tc is not None:
            return tc.queues
        if not self.config.auto_create_topics:
            raise UnknownTopic(f"unknown topic {topic!r} (auto-create is off)")
        created = self._topics.create_or_grow(topic, self.config.default_queues_per_topic).queues
        self._topics.persist()
        return created

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
        :mod:`store.idempotence`); the messages' UNIQ_KEYs are then derived from the ref.
        """
        self._ensure_open()
        if producer is None or not messages:
            return self._put_messages(messages)
        ref = producer.validate()
        with self._producers.request_lock(ref.producer_id):
            cached = self._producers.recent(ref)
            if isinstance(cached, list) and len(cached) == len(messages):
                return cached
            keys = request_uniq_keys(ref, len(messages))
            topics = [place(m, 0, self.delay_levels).topic for m in messages]
            stored = {} if self._producers.is_new(ref) else self._stored_prefix(topics, keys)
            missing = [i for i in range(len(messages)) if i not in stored]
            if missing:
                fresh = self._put_messages([_with_uniq_key(messages[i], keys[i]) for i in missing])
                stored.update(zip(missing, fresh, strict=True))
            results = [stored[i] for i in range(len(messages))]
            self._producers.remember(ref, results)
            return results

    def _stored_prefix(self, topics: Sequence[str], keys: Sequence[str]) -> dict[int, PutResult]:
        """Results of the messages of an earlier attempt of this request that are stored.

        An attempt is all-or-nothing while the store runs; only a crash can tear it, and then
        a prefix survives (records are appended in order). So: look up the first message,
        then binary-search the end of the stored prefix.
        """

        def lookup(i: int) -> PutResult | None:
            view = self.get_by_uniq_key(topics[i], keys[i])
            return None if view is None else _put_result(view)

        first = lookup(0)
        if first is None:
            return {}
        found = {0: first}
        lo, hi = 0, len(keys)  # lookup(lo) exists; everything from hi on does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            hit = lookup(mid)
            if hit is None:
                hi = mid
            else:
                found[mid] = hit
                lo = mid
        for i in range(1, hi):
            if i not in found:
                hit = lookup(i)
                if hit is None:  # not a prefix after all: treat the rest as missing
                    break
                found[i] = hit
        return found

    def _put_messages(self, messages: Sequence[Message]) -> list[PutResult]:
        if not messages:
            return []
        now = self._clock()
        uniq_keys = [m.uniq_key or "" for m in messages]
        missing = [i for i, k in enumerate(uniq_keys) if not k]
        for i, key in zip(missing, self._uniq.next_batch(len(missing)), strict=True):
            uniq_keys[i] = key
        records = []
        for i, msg in enumerate(messages):
            validate_message(msg)
            count = self._queue_count_for_put(msg.topic)
            queue_id = self._choose_queue(msg.topic, msg.queue_id, count)
            placement = place(msg, queue_id, self.delay_levels)
            records.append(
                build_record(
                    msg,
                    placement,
                    uniq_keys[i],
                    policy=self._policy,
                    delay_levels=self.delay_levels,
                    born_timestamp_ms=now,
                    store_host=self._store_host,
                )
            )
        encoded = EncodedBatch.from_records([encode_record(r) for r in records], uniq_keys)
        topics = [r.topic for r in records]
        props = [r.properties or {} for r in records]
        topic_names = tuple(dict.fromkeys(topics))
        code_of = {t: i for i, t in enumerate(topic_names)}
        batch = self._append(
            encoded,
            topic_names,
            np.fromiter((code_of[t] for t in topics), dtype=np.int32, count=len(records)),
            np.fromiter((r.queue_id for r in records), dtype=np.int32, count=len(records)),
            tags_hashes_of([p.get(PROPERTY_TAGS) for p in props]),
            tuple(p.get(PROPERTY_KEYS) for p in props),
        )
        return [
            PutResult(
                msg_id=encode_msg_id(self._store_host, int(batch.commitlog_offsets[i])),
                uniq_key=uniq_keys[i],
                topic=topics[i],
                queue_id=int(batch.queue_ids[i]),
                queue_offset=int(batch.queue_offsets[i]),
                commitlog_offset=int(batch.commitlog_offsets[i]),
                store_timestamp_ms=batch.store_timestamp_ms,
                size_bytes=int(batch.sizes[i]),
            )
            for i in range(len(records))
        ]

    def _append_columns(
        self,
        encoded: EncodedBatch,
        topic: str,
        queue_ids: npt.NDArray[np.int32],
        tags: Sequence[str | None],
        keys: Sequence[str | None],
    ) -> BatchPutResult:
        n = len(queue_ids)
        return self._append(
            encoded, (topic,), np.zeros(n, dtype=np.int32), queue_ids, tags_hashes_of(tags), tuple(keys)
        )

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
        if producer is not None and len(bodies):
            return self._put_batch_idempotent(
                producer.validate(), topic, bodies, queue_ids, tags, keys, properties, born_timestamps_ms
            )
        n = len(bodies)
        count = self._queue_count_for_put(topic)
        if n == 0:
            empty32, empty64 = np.zeros(0, np.int32), np.zeros(0, np.int64)
            return BatchPutResult(topic, empty32, empty64, empty64, empty32, (), 0, self._store_host)
        qids = self._choose_queues(topic, queue_ids, count, n)
        if uniq_keys is None or not all(uniq_keys):
            generated = self._uniq.next_batch(n)
            keys_out = (
                generated
                if uniq_keys is None
                else [k or g for k, g in zip(uniq_keys, generated, strict=True)]
            )
        else:
            keys_out = list(uniq_keys)  # type: ignore[arg-type]
        columns: dict[str, str | Sequence[str | None] | None] = dict(properties or {})
        for reserved in (PROPERTY_UNIQ_KEY, PROPERTY_KEYS, PROPERTY_TAGS):
            if reserved in columns:
                raise InvalidArgument(f"property {reserved} is set through its own argument")
        columns[PROPERTY_UNIQ_KEY] = keys_out
        if keys is not None:
            _check_column_length("keys", keys, n)
            columns[PROPERTY_KEYS] = keys
        if tags is not None:
            if not isinstance(tags, str):
                _check_column_length("tags", tags, n)
            columns[PROPERTY_TAGS] = tags
        born = self._clock() if born_timestamps_ms is None else born_timestamps_ms
        encoded = encode_columns(
            BatchColumns(
                topic=topic,
                bodies=bodies,
                queue_ids=qids,
                properties=columns,
                born_timestamps_ms=born,
                store_host=self._store_host,
            ),
            self._policy,
        )
        encoded.uniq_keys = keys_out
        tags_list = [tags] * n if isinstance(tags, str) or tags is None else list(tags)
        keys_list: Sequence[str | None] = [None] * n if keys is None else keys
        return self._append_columns(encoded, topic, qids, tags_list, keys_list)

    def _put_batch_idempotent(
        self,
        ref: ProducerRef,
        topic: str,
        bodies: Sequence[bytes],
        queue_ids: int | Sequence[int] | npt.NDArray[np.integer] | None,
        tags: str | Sequence[str | None] | None,
        keys: Sequence[str | None] | None,
        properties: Mapping[str, str | Sequence[str | None]] | None,
        born_timestamps_ms: int | Sequence[int] | npt.NDArray[np.integer] | None,
    ) -> BatchPutResult:
        n = len(bodies)
        with self._producers.request_lock(ref.producer_id):
            cached = self._producers.recent(ref)
            if isinstance(cached, BatchPutResult) and len(cached) == n and cached.topic == topic:
                return cached
            uniq = request_uniq_keys(ref, n)
            stored = {} if self._producers.is_new(ref) else self._stored_prefix([topic] * n, uniq)
            if stored:
                missing = np.array([i for i in range(n) if i not in stored], dtype=np.int64)
                if len(missing):
                    self.put_batch(
                        topic,
                        [bodies[i] for i in missing.tolist()],
                        queue_ids=_take(queue_ids, missing),
                        tags=_take(tags, missing),
                        keys=_take(keys, missing),
                        properties={k: _take(v, missing) for k, v in (properties or {}).items()},
                        uniq_keys=[uniq[i] for i in missing.tolist()],
                        born_timestamps_ms=_take(born_timestamps_ms, missing),
                    )
                    stored.update(self._stored_prefix([topic] * n, uniq))
                result = _batch_result(topic, [stored[i] for i in range(n)], self._store_host)
            else:
                result = self.put_batch(
                    topic,
                    bodies,
                    queue_ids=queue_ids,
                    tags=tags,
                    keys=keys,
                    properties=properties,
                    uniq_keys=uniq,
                    born_timestamps_ms=born_timestamps_ms,
                )
            self._producers.remember(ref, result)
            return result

    def _choose_queues(
        self, topic: str, queue_ids: int | Sequence[int] | npt.NDArray[np.integer] | None, count: int, n: int
    ) -> npt.NDArray[np.int32]:
        if queue_ids is None:
            with self._put_lock:
                first = self._round_robin.get(topic, 0)
                self._round_robin[topic] = first + n
            return ((first + np.arange(n, dtype=np.int64)) % count).astype(np.int32)
        qids = np.broadcast_to(np.asarray(queue_ids, dtype=np.int64), (n,))
        bad = (qids < 0) | (qids >= count)
        if bool(bad.any()):
            first_bad = int(np.flatnonzero(bad)[0])
            raise UnknownQueue(
                f"message {first_bad}: queue {int(qids[first_bad])} does not exist: "
                f"topic {topic!r} has {count} queues"
            )
        return qids.astype(np.int32)

    def _choose_queue(self, topic: str, queue_id: int | None, count: int) -> int:
        if queue_id is None:
            with self._put_lock:
                nxt = self._round_robin.get(topic, 0)
                self._round_robin[topic] = nxt + 1
            return nxt % count
        if not 0 <= queue_id < count:
            raise UnknownQueue(f"queue {queue_id} does not exist: topic {topic!r} has {count} queues")
        return queue_id

    def _append(
        self,
        encoded: EncodedBatch,
        topic_names: tuple[str, ...],
        topic_codes: npt.NDArray[np.int32],
        queue_ids: npt.NDArray[np.int32],
        tags_hashes: npt.NDArray[np.int64],
        keys: tuple[str | None, ...],
    ) -> BatchPutResult:
        """Append under the put lock: queue offsets, CommitLog, ConsumeQueue dispatch."""
        n = len(encoded)
        uniq_keys = tuple(encoded.uniq_keys)
        with self._put_lock:
            self._ensure_open()
            store_ts = max(self._clock(), self._last_store_ts)
            queue_offsets = self._assign_queue_offsets(topic_names, topic_codes, queue_ids)
            encoded.patch_queue_offsets(queue_offsets)
            start = self._commitlog.max_offset
            appended = self._commitlog.append(encoded, store_ts)
            dispatch = DispatchBatch(
                appended.commitlog_offsets,
                appended.sizes,
                tags_codes_for(
                    topic_names, topic_codes, queue_ids, np.full(n, store_ts), tags_hashes, self.delay_levels
                ),
                queue_ids,
                queue_offsets,
                np.full(n, store_ts, dtype=np.int64),
                np.zeros(n, dtype=np.int32),
                topic_codes,
                topic_names,
                uniq_keys,
                keys,
            )
            try:
                self._queues.dispatch(dispatch)
            except (OSError, ValueError, InvalidArgument) as exc:
                self._commitlog.truncate(start)
                raise StoreNotWritable(f"ConsumeQueue dispatch failed, nothing written: {exc}") from exc
            self._commit_queue_offsets(topic_names, topic_codes, queue_ids, queue_offsets)
            self._last_store_ts = store_ts
            self._messages_put += n
            self._bytes_put += int(appended.wrote_bytes)
            self._dispatch_index(dispatch)
        self._notify_arrivals(topic_names, topic_codes, queue_ids)
        if self._group_commit is not None:
            self._group_commit.wait_flushed(appended.end_offset, self.config.sync_flush_timeout_ms / 1000)
        return BatchPutResult(
            topic_names[0],
            queue_ids,
            queue_offsets,
            appended.commitlog_offsets,
            appended.sizes,
            uniq_keys,
            store_ts,
            self._store_host,
        )

    def _next_offset(self, topic: str, queue_id: int) -> int:
        key = (topic, queue_id)
        nxt = self._queue_next.get(key)
        if nxt is None:
            cq = self._queues.get(topic, queue_id)
            nxt = 0 if cq is None else cq.max_offset
            self._queue_next[key] = nxt
        return nxt

    def _assign_queue_offsets(
        self, topics: tuple[str, ...], topic_codes: npt.NDArray[np.int32], queue_ids: npt.NDArray[np.int32]
    ) -> npt.NDArray[np.int64]:
        """Per message: next offset of its queue + its rank among this batch's messages to it."""
        n = len(queue_ids)
        keys = (topic_codes.astype(np.int64) << 32) | queue_ids.astype(np.int64)
        if n == 0 or bool(np.all(keys == keys[0])):
            base = self._next_offset(topics[int(topic_codes[0])], int(queue_ids[0])) if n else 0
            return base + np.arange(n, dtype=np.int64)
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
        group_starts = np.concatenate(([0], np.flatnonzero(np.diff(sorted_keys)) + 1))
        counts = np.diff(np.concatenate((group_starts, [n])))
        bases = np.array(
            [
                self._next_offset(topics[int(k >> 32)], int(k & 0xFFFFFFFF))
                for k in sorted_keys[group_starts].tolist()
            ],
            dtype=np.int64,
        )
        ranks = np.arange(n, dtype=np.int64) - np.repeat(group_starts, counts)
        out = np.empty(n, dtype=np.int64)
        out[order] = np.repeat(bases, counts) + ranks
        return out

    def _commit_queue_offsets(
        self,
        topics: tuple[str, ...],
        topic_codes: npt.NDArray[np.int32],
        queue_ids: npt.NDArray[np.int32],
        queue_offsets: npt.NDArray[np.int64],
    ) -> None:
        for code, qid, last in _last_per_queue(topic_codes, queue_ids, queue_offsets):
            self._queue_next[(topics[code], qid)] = last + 1

    # ------------------------------------------------------------------ index dispatch
    def _dispatch_index(self, batch: DispatchBatch) -> None:
        if self._index is None:
            return
        if self._index_thread is None:
            self._index.dispatch(batch)
            self._set_indexed(batch.end_offset)
        else:
            self._index_queue.put(batch)

    def _index_loop(self) -> None:
        assert self._index is not None
        while True:
            batch = self._index_queue.get()
            if batch is None:
                return
            try:
                self._index.dispatch(batch)
            except Exception:
                log.exception(
                    "index dispatch failed for %d record(s) at %d", len(batch), batch.commitlog_offsets[0]
                )
            self._set_indexed(batch.end_offset)

    def _set_indexed(self, offset: int) -> None:
        with self._index_cond:
            self._indexed_to = max(self._indexed_to, offset)
            self._index_cond.notify_all()

    def _stop_index_thread(self, drain: bool = True) -> None:
        if self._index_thread is None:
            return
        if not drain:
            while not self._index_queue.empty():
                self._index_queue.get_nowait()
        self._index_queue.put(None)
        self._index_thread.join(30)
        self._index_thread = None

    def wait_indexed(self, timeout_s: float = 10.0) -> bool:
        """Block until every message acknowledged so far is in the key index."""
        target = self._commitlog.max_offset
        deadline = time.monotonic() + timeout_s
        with self._index_cond:
            while self._indexed_to < target:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._index_cond.wait(remaining)
        return True

    # ------------------------------------------------------------------ arrivals / long-poll
    def add_arrival_listener(self, listener: ArrivalListener) -> None:
        """``listener(topic, queue_id, max_offset)`` after every put (keep it cheap)."""
        self._listeners.append(listener)

    def remove_arrival_listener(self, listener: ArrivalListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def _notify_arrivals(
        self, topics: tuple[str, ...], topic_codes: npt.NDArray[np.int32], queue_ids: npt.NDArray[np.int32]
    ) -> None:
        with self._arrival:
            self._arrival.notify_all()
        if not self._listeners:
            return
        zeros = np.zeros(len(queue_ids), dtype=np.int64)
        for code, qid, _ in _last_per_queue(topic_codes, queue_ids, zeros):
            topic = topics[code]
            offset = self._queue_next.get((topic, qid), 0)
            for listener in list(self._listeners):
                try:
                    listener(topic, qid, offset)
                except Exception:
                    log.exception("arrival listener %r failed", listener)

    def wait_for_message(self, topic: str, queue_id: int, offset: int, timeout_s: float) -> bool:
        """Block until the queue's max offset passes ``offset`` (True) or the timeout (False)."""
        deadline = time.monotonic() + timeout_s
        with self._arrival:
            while self.max_offset(topic, queue_id) <= offset:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closed:
                    return False
                self._arrival.wait(remaining)
        return True

    # ------------------------------------------------------------------ consume
    @property
    def _reader(self) -> QueueReader:
        return QueueReader(self._queues, self._commitlog, self._store_host, self._has_queue)

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
        cq = self._queues.get(topic, queue_id)
        if cq is None:
            self._require_queue(topic, queue_id)
            return 0
        return cq.max_offset

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
        self.wait_indexed()
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

    # ------------------------------------------------------------------ operations
    def flush(self) -> None:
        """Flush the CommitLog, ConsumeQueues, index and checkpoint now."""
        self._ensure_open()
        self.wait_indexed()
        self._flush_commitlog()
        self._flush_logics()
        self._persist_tables()

    def _flush_commitlog(self) -> None:
        with self._put_lock:
            ts = self._last_store_ts
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
        hour = time.gmtime(now / 1000).tm_hour
        disk_full = _disk_used_ratio(self.config.store_dir) > self.config.disk_max_used_ratio
        if not (force or disk_full or hour in self.config.delete_when_hours):
            return 0
        expired_before = now - int(self.config.file_reserved_time_hours * 3_600_000)
        deleted = self._commitlog.delete_expired_files(expired_before, force=disk_full)
        if deleted:
            low = self._commitlog.min_offset
            self._queues.delete_files_below(low)
            self._queues.correct_min_offsets(low)
            if self._index is not None:
                self._index.delete_files_below(low)
            log.info("retention deleted %d commitlog file(s); min offset is now %d", deleted, low)
        return deleted

    def rebuild_indexes(self) -> int:
        """Rebuild every ConsumeQueue and the key index from the CommitLog; returns records."""
        self._ensure_open()
        with self._put_lock:
            self.wait_indexed()
            replayed = rebuild_derived(self._commitlog, self._queues, self._index, self.delay_levels)
            self._queue_next.clear()
        return replayed

    def stats(self) -> StoreStats:
        return StoreStats(
            messages_put=self._messages_put,
            bytes_put=self._bytes_put,
            commitlog_min_offset=self._commitlog.min_offset,
            commitlog_max_offset=self._commitlog.max_offset,
            commitlog_flushed_offset=self._commitlog.flushed_offset,
            index_dispatch_lag_bytes=max(0, self._commitlog.max_offset - self._indexed_to),
            queue_max_offsets={key: cq.max_offset for key, cq in self._queues.queues().items()},
        )

    def destroy(self) -> None:
        """Close and delete the whole store directory."""
        self.close()
        shutil.rmtree(self.config.store_dir, ignore_errors=True)


def _with_uniq_key(msg: Message, uniq_key: str) -> Message:
    copy = Message(**{f: getattr(msg, f) for f in Message.__slots__})  # type: ignore[attr-defined]
    copy.uniq_key = uniq_key
    return copy


def _put_result(view: MessageView) -> PutResult:
    return PutResult(
        msg_id=view.msg_id,
        uniq_key=view.uniq_key or "",
        topic=view.topic,
        queue_id=view.queue_id,
        queue_offset=view.queue_offset,
        commitlog_offset=view.commitlog_offset,
        store_timestamp_ms=view.store_timestamp_ms,
        size_bytes=view.size_bytes,
    )


def _batch_result(topic: str, results: Sequence[PutResult], store_host: tuple[str, int]) -> BatchPutResult:
    return BatchPutResult(
        topic,
        np.array([r.queue_id for r in results], dtype=np.int32),
        np.array([r.queue_offset for r in results], dtype=np.int64),
        np.array([r.commitlog_offset for r in results], dtype=np.int64),
        np.array([r.size_bytes for r in results], dtype=np.int32),
        [r.uniq_key for r in results],
        max(r.store_timestamp_ms for r in results),
        store_host,
    )


def _take(column: object, rows: npt.NDArray[np.int64]) -> Any:
    """Select ``rows`` of a per-message column; scalars and None pass through."""
    if column is None or isinstance(column, str | int | np.integer):
        return column
    if isinstance(column, np.ndarray):
        return column[rows]
    values = list(column)  # type: ignore[call-overload]
    return [values[i] for i in rows.tolist()]


def _check_column_length(name: str, column: Sequence[object], n: int) -> None:
    if len(column) != n:
        raise InvalidArgument(f"{name} has {len(column)} values for {n} bodies")


def _check_read_args(offset: int, max_messages: int) -> None:
    if offset < 0:
        raise InvalidArgument(f"offset must be >= 0, got {offset}")
    if max_messages < 1:
        raise InvalidArgument(f"max_messages must be >= 1, got {max_messages}")


def _last_per_queue(
    topic_codes: npt.NDArray[np.int32], queue_ids: npt.NDArray[np.int32], values: npt.NDArray[np.int64]
) -> Iterable[tuple[int, int, int]]:
    """(topic code, queue id, value of its last message) for each distinct queue of a batch."""
    keys = (topic_codes.astype(np.int64) << 32) | queue_ids.astype(np.int64)
    if len(keys) == 0:
        return []
    if bool(np.all(keys == keys[0])):
        return [(int(topic_codes[0]), int(queue_ids[0]), int(values[-1]))]
    distinct, first_from_end = np.unique(keys[::-1], return_index=True)
    last = len(keys) - 1 - first_from_end
    return [
        (int(key >> 32), int(key & 0xFFFFFFFF), int(value))
        for key, value in zip(distinct.tolist(), values[last].tolist(), strict=True)
    ]


def _disk_used_ratio(path: os.PathLike[str] | str) -> float:
    usage = shutil.disk_usage(path)
    return usage.used / usage.total if usage.total else 0.0
