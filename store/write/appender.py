"""The put path: validation, encoding, queue offsets, CommitLog append, ConsumeQueue dispatch.

:class:`Appender` owns the put lock. Every message of a call is validated and encoded before
the lock is taken (all or nothing); under the lock it assigns the store timestamp (monotonic)
and the queue offsets (vectorised), appends to the CommitLog, dispatches the ConsumeQueue
units inline and hands the batch to the index thread. After the lock: arrival notification
and, with SYNC_FLUSH, the wait for the group commit, then (a replica) the wait for the
acknowledgement of replication (:mod:`store.write.replication`). Idempotent requests
(:class:`~store.write.idempotence.ProducerRef`) are resolved here too.

Length: about 500 lines: the put lock and everything done under it (four entry points:
messages, columns — also as transactional halves —, relocations, records encoded elsewhere
such as a commit's final messages) share it; queue placement and results live beside it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from store.commitlog.commitlog import CommitLog
from store.commitlog.dispatch_batch import DispatchBatch
from store.commitlog.group_commit import GroupCommitService
from store.config import StoreConfig
from store.consumequeue.queue_store import ConsumeQueueStore
from store.errors import InvalidArgument, StoreClosed, StoreNotWritable, UnknownTopic
from store.format.arrow_ranges import ArrowStrings
from store.format.batch_encode import BatchColumns, EncodedBatch, encode_columns, patch_be
from store.format.ids import UniqKeyGenerator
from store.format.record import QUEUE_ID_POS, BodyPolicy, encode_record
from store.format.vocabulary import (
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_REAL_QID,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    TIMER_REQUEST_PROPERTIES,
)
from store.index.index_service import IndexDispatcher
from store.metadata.topic_config import TopicConfigTable
from store.names import SCHEDULE_TOPIC, TRANS_HALF_TOPIC, is_system_topic, validate_topic
from store.types import Message, MessageView, PutResult
from store.write.encoded import EncodedRecords
from store.write.idempotence import ProducerRef, ProducerTable, request_uniq_keys, stored_prefix
from store.write.message_builder import (
    build_record,
    parked_topic,
    place,
    tags_codes_for,
    tags_hashes_of,
    validate_message,
)
from store.write.queue_offsets import QueuePlacement, last_per_queue
from store.write.relocate import Relocated
from store.write.replication import ReplicationHooks
from store.write.results import BatchPutResult, batch_result_of, put_result_of
from store.write.timers import TimerRules
from store.write.transactions import HalfOf, half_properties
from store.write.visibility import Visibility

UniqKeyLookup = Callable[[str, str], MessageView | None]


class Appender:
    """Writes messages; thread-safe (one put lock)."""

    def __init__(
        self,
        config: StoreConfig,
        *,
        clock_ms: Callable[[], int],
        delay_levels: tuple[int, ...],
        commitlog: CommitLog,
        queues: ConsumeQueueStore,
        topics: TopicConfigTable,
        index: IndexDispatcher | None,
        visibility: Visibility,
        lookup_uniq_key: UniqKeyLookup,
        last_store_timestamp_ms: int,
    ) -> None:
        self.config = config
        self.delay_levels = delay_levels
        self.timers = TimerRules(config.timer_max_delay_ms, config.timer_precision_ms)
        self.lock = threading.Lock()
        self._clock = clock_ms
        self._policy = BodyPolicy.from_config(config)
        self._store_host = (config.store_host, config.store_port)
        self._commitlog = commitlog
        self._queues = queues
        self._topics = topics
        self._index = index
        self._visibility = visibility
        self._lookup = lookup_uniq_key
        self._uniq = UniqKeyGenerator(config.store_host, clock_ms=clock_ms)
        self._producers = ProducerTable()
        self._placement = QueuePlacement(queues, self.lock)
        self._producible: set[str] = set()
        self._last_store_ts = last_store_timestamp_ms
        self._closed = False
        self.group_commit: GroupCommitService | None = None
        #: Installed by a replicated store (:mod:`store.write.replication`); None: a lone store.
        self.replication: ReplicationHooks | None = None
        #: Called under the put lock with every dispatched batch, after the ConsumeQueues
        #: (the offset table follows its records: :mod:`store.write.offset_log`).
        self.on_dispatched: Callable[[DispatchBatch], None] | None = None
        self.messages_put = 0
        self.bytes_put = 0

    @property
    def last_store_timestamp_ms(self) -> int:
        return self._last_store_ts

    def close(self) -> bool:
        """Refuse further puts; returns False when it was already closed."""
        with self.lock:
            was_open, self._closed = not self._closed, True
            return was_open

    def _ensure_open(self) -> None:
        if self._closed:
            raise StoreClosed(f"store {self.config.store_dir} is closed")

    def ensure_open(self) -> None:
        """Raise :class:`~store.errors.StoreClosed` once the store is closed (call with
        :attr:`lock` held to keep it open meanwhile)."""
        self._ensure_open()

    def check_writable(self) -> None:
        """Raise what a write would raise now for this store's role (closed, not the master,
        fenced, too few in sync); nothing is written."""
        self._ensure_writable()

    def _ensure_writable(self) -> None:
        """Open, and (a replica) allowed to write now; raises otherwise, nothing written."""
        self._ensure_open()
        hooks = self.replication
        if hooks is not None:
            hooks.check_writable()

    def _acknowledge(self, end_offset: int) -> None:
        """A replica: block until a write ending at ``end_offset`` may be reported, or raise."""
        hooks = self.replication
        if hooks is not None:
            try:
                hooks.acknowledge(end_offset)
            except StoreNotWritable as exc:  # what it refuses to acknowledge is in the log
                exc.appended = True
                raise

    def forget_recent_results(self) -> None:
        """Drop the remembered results of recent idempotent requests (after a truncation they
        may name records that are gone; a retry then looks in the log again)."""
        self._producers = ProducerTable()

    def note_store_timestamp(self, store_timestamp_ms: int) -> None:
        """Records stored elsewhere (replicated) carry this store timestamp: later puts stay
        monotonic after it. Call with :attr:`lock` held."""
        self._last_store_ts = max(self._last_store_ts, store_timestamp_ms)

    def forget_topic(self, topic: str) -> None:
        """Drop the bookkeeping of a deleted topic (call with :attr:`lock` held)."""
        self._placement.forget_topic(topic)

    def reset_queue_offsets(self) -> None:
        """Re-read next queue offsets from the ConsumeQueues (after a rebuild)."""
        self._placement.reset()

    def new_uniq_keys(self, count: int) -> list[str]:
        return self._uniq.next_batch(count)

    def put_message(self, msg: Message) -> PutResult:
        return self.put_messages([msg])[0]

    def put_messages(
        self, messages: Sequence[Message], *, producer: ProducerRef | None = None
    ) -> list[PutResult]:
        """See :meth:`store.message_store.MessageStore.put_messages`."""
        self._ensure_writable()
        if producer is None or not messages:
            return self._put_messages(messages)
        ref = producer.validate()
        with self._producers.request_lock(ref.producer_id):
            cached = self._producers.recent(ref)
            if isinstance(cached, list) and len(cached) == len(messages):
                self._acknowledge(_end_of(cached))
                return cached
            keys = request_uniq_keys(ref, len(messages))
            topics = [self._candidate_topics(m) for m in messages]
            stored = self._stored_prefix(topics, keys)
            missing = [i for i in range(len(messages)) if i not in stored]
            if missing:
                fresh = self._put_messages([_with_uniq_key(messages[i], keys[i]) for i in missing])
                stored.update(zip(missing, fresh, strict=True))
            results = [stored[i] for i in range(len(messages))]
            self._acknowledge(_end_of(results))
            self._producers.remember(ref, results)
            return results

    def _candidate_topics(self, msg: Message) -> tuple[str, ...]:
        """Where an earlier attempt may have stored ``msg``: a timer message is parked, or
        stored in its own topic when it was due already."""
        parked = parked_topic(msg, self.delay_levels)
        return (parked,) if parked in (msg.topic, SCHEDULE_TOPIC, TRANS_HALF_TOPIC) else (parked, msg.topic)

    def _stored_prefix(self, topics: Sequence[tuple[str, ...]], keys: Sequence[str]) -> dict[int, PutResult]:
        """Results of the messages of an earlier attempt of this request that are stored."""

        def lookup(i: int) -> PutResult | None:
            for topic in topics[i]:
                view = self._lookup(topic, keys[i])
                if view is not None:
                    return put_result_of(view)
            return None

        return stored_prefix(len(keys), lookup)

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
            count = self.producible_queue_count(msg.topic)
            queue_id = self._placement.choose_one(msg.topic, msg.queue_id, count)
            placement = place(msg, queue_id, self.delay_levels, now_ms=now, timers=self.timers)
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
        return batch.results(topics)

    def put_relocated(self, records: Sequence[Relocated]) -> list[PutResult]:
        """Append encoded relocations (:mod:`store.write.relocate`): see :meth:`put_encoded`."""
        if not records:
            self._ensure_open()
            return []
        encoded = EncodedRecords.of_relocated(records)
        return self.put_encoded(encoded).results(encoded.topics)

    def put_encoded(self, records: EncodedRecords) -> BatchPutResult:
        """Append records encoded elsewhere in one atomic append: every field is kept but the
        queue offset, CommitLog offset and store timestamp, UNIQ_KEY included. A user target
        topic must exist or be auto-creatable; a queue id past its queue count wraps (mod count)."""
        self._ensure_writable()
        n = len(records)
        topics = records.topics
        topic_names = tuple(dict.fromkeys(topics))
        code_of = {t: i for i, t in enumerate(topic_names)}
        codes = np.fromiter((code_of[t] for t in topics), dtype=np.int32, count=n)
        queue_ids = records.queue_ids.astype(np.int32, copy=True)
        for code, topic in enumerate(topic_names):
            if is_system_topic(topic):
                continue
            count = self.producible_queue_count(topic)
            rows = codes == code
            wrapped = rows & (queue_ids >= count)
            if bool(wrapped.any()):
                queue_ids[wrapped] %= count
                patch_be(
                    records.batch.buffer, records.batch.starts[wrapped] + QUEUE_ID_POS, queue_ids[wrapped], 4
                )
        return self._append(
            records.batch, topic_names, codes, queue_ids, tags_hashes_of(records.tags), records.keys
        )

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
        half: HalfOf | None = None,
    ) -> BatchPutResult:
        """See :meth:`store.message_store.MessageStore.put_batch`; with ``half`` the messages are
        stored as halves of that transaction (``MessageStore.put_halves``)."""
        self._ensure_writable()
        if producer is not None and len(bodies):
            return self._put_batch_idempotent(
                producer.validate(),
                topic,
                bodies,
                queue_ids,
                tags,
                keys,
                properties,
                born_timestamps_ms,
                half,
            )
        n = len(bodies)
        count = self.producible_queue_count(topic)
        stored_topic = topic if half is None else TRANS_HALF_TOPIC
        if n == 0:
            empty32, empty64 = np.zeros(0, np.int32), np.zeros(0, np.int64)
            return BatchPutResult(stored_topic, empty32, empty64, empty64, empty32, (), 0, self._store_host)
        qids = self._placement.choose(topic, queue_ids, count, n)
        keys_out: Sequence[str]
        if uniq_keys is None:
            keys_out = self._uniq.next_column(n)
        elif not all(uniq_keys):
            generated = self._uniq.next_batch(n)
            keys_out = [k or g for k, g in zip(uniq_keys, generated, strict=True)]
        else:
            keys_out = list(uniq_keys)  # type: ignore[arg-type]
        columns: dict[str, str | Sequence[str | None] | None] = dict(properties or {})
        for reserved in (PROPERTY_UNIQ_KEY, PROPERTY_KEYS, PROPERTY_TAGS):
            if reserved in columns:
                raise InvalidArgument(f"property {reserved} is set through its own argument")
        for scheduling in (PROPERTY_DELAY, *TIMER_REQUEST_PROPERTIES):
            if scheduling in columns:
                raise InvalidArgument(
                    f"property {scheduling} schedules a message: put delayed and timer messages "
                    "with put_messages, which parks them"
                )
        columns[PROPERTY_UNIQ_KEY] = keys_out
        if keys is not None:
            _check_column_length("keys", keys, n)
            columns[PROPERTY_KEYS] = keys
        if tags is not None:
            if not isinstance(tags, str):
                _check_column_length("tags", tags, n)
            columns[PROPERTY_TAGS] = tags
        if half is not None:
            real_qids: str | list[str] = (
                str(int(qids[0])) if bool((qids == qids[0]).all()) else [str(q) for q in qids.tolist()]
            )
            for name, value in half_properties(topic, "", half.transaction_id, half.producer_group).items():
                columns[name] = real_qids if name == PROPERTY_REAL_QID else value
            if half.immunity_s is not None:
                columns[PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS] = str(half.immunity_s)
        born = self._clock() if born_timestamps_ms is None else born_timestamps_ms
        stored_qids = qids if half is None else np.zeros(n, dtype=np.int32)
        encoded = encode_columns(
            BatchColumns(
                topic=stored_topic,
                bodies=bodies,
                queue_ids=stored_qids,
                properties=columns,
                born_timestamps_ms=born,
                store_host=self._store_host,
            ),
            self._policy,
        )
        encoded.uniq_keys = keys_out
        tags_list = [tags] * n if isinstance(tags, str) or tags is None else list(tags)
        keys_list: Sequence[str | None] = [None] * n if keys is None else keys
        return self._append_columns(encoded, stored_topic, stored_qids, tags_list, keys_list)

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
        half: HalfOf | None,
    ) -> BatchPutResult:
        n = len(bodies)
        stored_topic = topic if half is None else TRANS_HALF_TOPIC
        with self._producers.request_lock(ref.producer_id):
            cached = self._producers.recent(ref)
            if isinstance(cached, BatchPutResult) and len(cached) == n and cached.topic == stored_topic:
                self._acknowledge(_batch_end_of(cached))
                return cached
            uniq = request_uniq_keys(ref, n)
            stored = self._stored_prefix([(stored_topic,)] * n, uniq)
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
                        half=half,
                    )
                    stored.update(self._stored_prefix([(stored_topic,)] * n, uniq))
                result = batch_result_of(stored_topic, [stored[i] for i in range(n)], self._store_host)
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
                    half=half,
                )
            self._acknowledge(_batch_end_of(result))
            self._producers.remember(ref, result)
            return result

    def round_robin_queues(self, topic: str, count: int, n: int) -> npt.NDArray[np.int32]:
        """The next ``n`` round-robin queues of ``topic`` (a per-topic counter)."""
        return self._placement.round_robin(topic, count, n)

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
        # a column of generated keys stays one (no Python string per key)
        uniq_keys: Sequence[str] = (
            cast("Sequence[str]", encoded.uniq_keys)
            if isinstance(encoded.uniq_keys, ArrowStrings)
            else tuple(encoded.uniq_keys)
        )
        with self.lock:
            self._ensure_writable()
            store_ts = max(self._clock(), self._last_store_ts)
            queue_offsets = self._placement.assign(topic_names, topic_codes, queue_ids)
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
                # queues written before the failing one must not point past the log's end
                self._queues.truncate_dirty(start)
                raise StoreNotWritable(f"ConsumeQueue dispatch failed, nothing written: {exc}") from exc
            lasts = last_per_queue(topic_codes, queue_ids, queue_offsets)
            self._placement.commit(topic_names, lasts)
            self._last_store_ts = store_ts
            self.messages_put += n
            self.bytes_put += int(appended.wrote_bytes)
            if self._index is not None:
                self._index.dispatch(dispatch)
            if self.on_dispatched is not None:
                self.on_dispatched(dispatch)
            if self.replication is not None:
                self.replication.appended(appended.end_offset)
        self._visibility.published(
            appended.end_offset, [(topic_names[code], qid, last + 1) for code, qid, last in lasts]
        )
        if self.group_commit is not None:
            try:
                self.group_commit.wait_flushed(appended.end_offset, self.config.sync_flush_timeout_ms / 1000)
            except StoreNotWritable as exc:
                exc.appended = True
                raise
        self._acknowledge(appended.end_offset)
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

    def producible_queue_count(self, topic: str) -> int:
        """Queue count of a user topic a producer writes to, creating it when auto-creation is
        on; raises :class:`~store.errors.UnknownTopic` when it is off (the one rule every door
        follows), :class:`~store.errors.InvalidTopicName` for a bad or system topic name."""
        if topic not in self._producible:
            validate_topic(topic)  # refuses bad names and system topics
            self._producible.add(topic)
        tc = self._topics.get(topic)
        if tc is not None:
            return tc.queues
        if not self.config.auto_create_topics:
            raise UnknownTopic(f"unknown topic {topic!r} (auto-create is off)")
        self._ensure_writable()  # a replica that may not write does not create topics either
        created = self._topics.create_or_grow(topic, self.config.default_queues_per_topic).queues
        self._topics.persist()
        return created


def _end_of(results: Sequence[PutResult]) -> int:
    """CommitLog offset just past the furthest of ``results``."""
    return max((r.commitlog_offset + r.size_bytes for r in results), default=0)


def _batch_end_of(result: BatchPutResult) -> int:
    if len(result) == 0:
        return 0
    return int((result.commitlog_offsets + result.sizes.astype(np.int64)).max())


def _with_uniq_key(msg: Message, uniq_key: str) -> Message:
    copy = Message(**{f: getattr(msg, f) for f in Message.__slots__})  # type: ignore[attr-defined]
    copy.uniq_key = uniq_key
    return copy


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
