"""Produce and InitProducerId.

Produce runs in four steps so the event loop never blocks and idempotence is exact (without
idempotent batches, steps 1 and 3 share one thread-pool hop):

1. (thread pool) decode and validate every partition's batches (CRC, codec, magic);
2. (loop, under the producer id's lock) check sequences: duplicates are answered with their
   original base offset and not written, gaps get OUT_OF_ORDER_SEQUENCE_NUMBER;
3. (thread pool) map records to store columns (:mod:`ingest_api.kafka.mapping`) and append
   them with the columnar ``put_batch`` (``put_messages`` when records order their headers
   differently): all records of a partition land atomically and contiguously, so
   ``base_offset`` is the first record's queue offset (idempotent batches are written one by
   one with a store ``ProducerRef``, see :func:`_put`);
4. (loop) record the batches' sequences and answer (nothing at all for acks=0).

Transactional batches (``transactional.id`` producers, always idempotent) join their
producer's ongoing transaction in step 2 (:meth:`TxnCoordinator.join`: fencing, state) and are
stored in step 3 as halves of it (``MessageStore.put_halves``), invisible to every door until
EndTxn commits them; their base offset is -1 (the offsets exist only at commit).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from ingest_api.kafka import codec, txn_cluster
from ingest_api.kafka.codec import KafkaRequest
from ingest_api.kafka.context import GatewayContext
from ingest_api.kafka.errors import CorruptBatch, ErrorCode
from ingest_api.kafka.handlers.base import Connection
from ingest_api.kafka.handlers.topics import served_partition_error
from ingest_api.kafka.handlers.transactions import half_of, init_transactional
from ingest_api.kafka.mapping import batch_to_columns, record_to_message
from ingest_api.kafka.names import to_store
from ingest_api.kafka.producer_state import BatchMetadata, SequenceVerdict, next_sequence
from ingest_api.kafka.records import ProducedBatch, decode_batches
from ingest_api.kafka.store_port import KafkaStore
from ingest_api.kafka.topology import CoordinatorKind
from ingest_api.kafka.txn_coordinator import MAX_PRODUCER_EPOCH
from ingest_api.kafka.txn_peers import participant_join
from ingest_api.kafka.versions import ApiKey
from store import (
    MAX_PRODUCER_ID_CHARS,
    TRANS_HALF_TOPIC,
    FlushSlaveTimeout,
    IndexBehind,
    InvalidArgument,
    MessageTooLarge,
    NotMaster,
    ProducerRef,
    PutResult,
    SlaveNotAvailable,
    SparkMQError,
    StoreClosed,
    StoreError,
    StoreNotWritable,
    UnknownQueue,
    UnknownTopic,
    is_timer_request,
    request_uniq_keys,
)
from store.publish import HalfOf

log = logging.getLogger(__name__)

#: Produce answers name a partition's current leader and its endpoint from this version on (KIP-951).
CURRENT_LEADER_VERSION = 10


@dataclass(slots=True)
class _PartitionWork:
    topic: str
    partition: int
    error: ErrorCode = ErrorCode.NONE
    batches: list[ProducedBatch] = field(default_factory=list)
    keep: list[bool] = field(default_factory=list)  # per batch: append it?
    verify: list[bool] = field(default_factory=list)  # per batch: look it up in the store first?
    fresh: list[bool] = field(default_factory=list)  # per kept batch: written new (not found)?
    #: Kept batches in the log though the append was refused (``StoreNotWritable.appended``).
    stored_unacknowledged: int = 0
    duplicate_of: int | None = None
    base_offset: int = -1
    batch_offsets: list[int] = field(default_factory=list)  # base offset of each kept batch
    log_start_offset: int = -1
    #: Transactional batches: the transaction they are halves of (set in step 2).
    transactional: bool = False
    half: HalfOf | None = None


def _decode(ctx: GatewayContext, body: Any) -> list[_PartitionWork]:
    work: list[_PartitionWork] = []
    for topic_data in body.topic_data:
        for partition_data in topic_data.partition_data:
            item = _PartitionWork(topic_data.name, partition_data.index)
            work.append(item)
            item.error = served_partition_error(ctx, item.topic, item.partition)
            if item.error != ErrorCode.NONE:
                continue
            try:
                item.batches = decode_batches(partition_data.records)
            except CorruptBatch as exc:
                log.info("produce %s-%d rejected: %s", item.topic, item.partition, exc)
                item.error = exc.error_code
                continue
            transactional = [batch.is_transactional for batch in item.batches]
            if any(transactional):
                if not all(transactional) or not all(b.is_idempotent for b in item.batches):
                    item.error = ErrorCode.INVALID_RECORD  # mixed, or without a producer id
                    continue
                if body.transactional_id is None:
                    item.error = ErrorCode.INVALID_RECORD  # Kafka: a transactional id is required
                    continue
                item.transactional = True
            item.keep = [True] * len(item.batches)
            item.verify = [False] * len(item.batches)
    return work


def _check_sequences(ctx: GatewayContext, item: _PartitionWork) -> None:
    if ctx.cluster is not None:
        ctx.producers.follow_leader_epoch(ctx.cluster.view.group(ctx.cluster.me).epoch)
    previous: ProducedBatch | None = None
    for index, batch in enumerate(item.batches):
        if not batch.is_idempotent:
            previous = None
            continue
        if previous is not None and previous.producer_id == batch.producer_id:
            ok = batch.base_sequence == next_sequence(previous.last_sequence)
            verdict = SequenceVerdict(ErrorCode.NONE if ok else ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        else:
            key = (batch.producer_id, item.topic, item.partition)
            verdict = ctx.producers.check(key, batch.producer_epoch, batch.base_sequence, batch.last_sequence)
            item.verify[index] = verdict.in_store or ctx.producers.needs_store_check(
                key, batch.producer_epoch
            )
        if verdict.error != ErrorCode.NONE:
            item.error = verdict.error
            return
        if verdict.duplicate_of is not None:
            item.keep[index] = False
            if item.duplicate_of is None:
                item.duplicate_of = verdict.duplicate_of
        previous = batch


async def _join_transaction(ctx: GatewayContext, transactional_id: str, item: _PartitionWork) -> None:
    """Step 2 for transactional batches: the producer's transaction takes them as halves (in a
    cluster, on a broker that is not the transaction's coordinator: the transaction the
    coordinator announced here, :func:`ingest_api.kafka.txn_peers.participant_join`)."""
    batch = item.batches[0]
    if ctx.txn_loading:  # a promotion replays the coordinator's state: retry when it is done
        item.error = ErrorCode.NOT_LEADER_OR_FOLLOWER
        return
    if ctx.cluster is not None and ctx.cluster.coordinates_elsewhere_in_group(
        transactional_id, CoordinatorKind.TRANSACTION
    ):
        # Demoted between the partition check and now: a participant's table would not know the
        # producer (INVALID_PRODUCER_ID_MAPPING, an abort the client never chose). Retriable.
        item.error = ErrorCode.NOT_LEADER_OR_FOLLOWER
        return
    if ctx.cluster is not None and not ctx.cluster.coordinates(transactional_id, CoordinatorKind.TRANSACTION):
        error, mirror = await participant_join(ctx, transactional_id, batch.producer_id, batch.producer_epoch)
        if mirror is not None:
            item.half = txn_cluster.half_of(
                transactional_id, mirror.transaction_id, mirror.timeout_ms, participant=True
            )
    else:
        error, sparkmq_id = ctx.txn.join(
            transactional_id, batch.producer_id, batch.producer_epoch, partition=(item.topic, item.partition)
        )
        entry = ctx.txn.get(transactional_id)
        if error == ErrorCode.NONE and entry is not None:
            item.half = half_of(entry, sparkmq_id)
    if error != ErrorCode.NONE:
        item.error = ErrorCode.INVALID_PRODUCER_EPOCH if error == ErrorCode.PRODUCER_FENCED else error


def _append(ctx: GatewayContext, work: list[_PartitionWork]) -> None:
    for item in work:
        if item.error != ErrorCode.NONE:
            continue
        kept = [batch for batch, keep in zip(item.batches, item.keep, strict=True) if keep]
        placed: list[tuple[int, bool]] = []
        try:
            if kept:
                verify = [v for v, keep in zip(item.verify, item.keep, strict=True) if keep]
                _put(ctx, item.topic, item.partition, kept, verify, item.half, placed)
                item.batch_offsets = [offset for offset, _ in placed]
                item.fresh = [fresh for _, fresh in placed]
                item.base_offset = item.batch_offsets[0]
            else:
                item.base_offset = item.duplicate_of if item.duplicate_of is not None else -1
            item.log_start_offset = ctx.store.min_offset(item.topic, item.partition)
        except (UnknownTopic, UnknownQueue):
            item.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        except MessageTooLarge:
            item.error = ErrorCode.MESSAGE_TOO_LARGE
        except InvalidArgument as exc:
            log.info("produce %s-%d refused by the store: %s", item.topic, item.partition, exc)
            item.error = ErrorCode.INVALID_RECORD
        except (StoreNotWritable, StoreClosed) as exc:
            log.warning("produce %s-%d: store not writable: %s", item.topic, item.partition, exc)
            item.error = replication_error(exc)
            if isinstance(exc, StoreNotWritable) and exc.appended:  # the refused batch is in the log
                item.stored_unacknowledged = len(placed) + 1
            elif placed:  # batches before the refused one: in the log, the answer is an error
                item.stored_unacknowledged = len(placed)
        except IndexBehind as exc:  # a retry cannot be looked up yet: nothing was written
            log.warning("produce %s-%d: %s", item.topic, item.partition, exc)
            item.error = ErrorCode.KAFKA_STORAGE_ERROR
        except StoreError:
            log.exception("produce %s-%d failed", item.topic, item.partition)
            item.error = ErrorCode.UNKNOWN_SERVER_ERROR


def replication_error(exc: Exception) -> ErrorCode:
    """The Kafka error of a refused write (docs/replication.md): fewer in sync than
    ``--min-insync`` before appending is NOT_ENOUGH_REPLICAS, after appending
    NOT_ENOUGH_REPLICAS_AFTER_APPEND; an in-sync set that did not ack in time REQUEST_TIMED_OUT;
    a replica that is not (or no longer) the master NOT_LEADER_OR_FOLLOWER (clients refresh
    their metadata and go to the new master). Every one is retriable."""
    if isinstance(exc, SlaveNotAvailable):
        return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND if exc.appended else ErrorCode.NOT_ENOUGH_REPLICAS
    if isinstance(exc, FlushSlaveTimeout):
        return ErrorCode.REQUEST_TIMED_OUT
    if isinstance(exc, NotMaster):  # ReplicaFenced included
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return ErrorCode.KAFKA_STORAGE_ERROR


def _put(
    ctx: GatewayContext,
    topic: str,
    partition: int,
    batches: list[ProducedBatch],
    verify: list[bool],
    half: HalfOf | None,
    placed: list[tuple[int, bool]],
) -> None:
    """Append the batches to one queue; ``(base offset, written new)`` of each batch goes to
    ``placed`` as it is stored (when one is refused, the ones before it are known).

    Idempotent batches are written one by one under a store :class:`ProducerRef` derived from
    ``(producer id, epoch, topic, partition, base sequence)``: the store then makes their
    UNIQ_KEYs deterministic and finds a retried batch again through its key index, even
    after a restart that emptied the gateway's in-memory sequence table. Other batches of a
    partition are appended together, atomically and contiguously. ``verify[i]``: look batch
    ``i`` up in the store before writing (see :mod:`ingest_api.kafka.producer_state`).
    With ``half`` the batches are halves of that transaction (base offset -1).
    """
    store = ctx.store
    if half is not None:
        for batch, check in zip(batches, verify, strict=True):
            placed.append(_put_half(ctx, topic, partition, batch, check, half))
        return
    if any(batch.is_idempotent for batch in batches):
        for batch, check in zip(batches, verify, strict=True):
            placed.append(_put_idempotent(store, topic, partition, batch, check))
        return
    first = _put_records(store, topic, partition, batches, None)
    offsets = [first]
    for batch in batches[:-1]:
        offsets.append(offsets[-1] + len(batch))
    placed.extend((offset, True) for offset in offsets)


def _put_idempotent(
    store: KafkaStore, topic: str, partition: int, batch: ProducedBatch, check: bool
) -> tuple[int, bool]:
    ref = _producer_ref(topic, partition, batch)
    fresh = True
    if ref is not None and check:
        # Messages of a batch are appended in order, so its last one being there means all of
        # it is. Found, it is still answered by the store's dedupe, which returns it only once
        # the in-sync replicas hold it: the first attempt may have been stored and its
        # acknowledgement timed out (FLUSH_SLAVE_TIMEOUT), and a retry must not ack it sooner.
        last = store.get_by_uniq_key(topic, request_uniq_keys(ref, len(batch))[-1])
        fresh = last is None or last.queue_id != partition
    return _put_records(store, topic, partition, [batch], ref), fresh


def _put_half(
    ctx: GatewayContext, topic: str, partition: int, batch: ProducedBatch, check: bool, half: HalfOf
) -> tuple[int, bool]:
    """One transactional batch as halves of ``half``, registered with the transaction service
    (idempotent). A retry found in the store goes through the store's dedupe too, and is
    registered again: its first attempt may have been stored with its acknowledgement timed out
    (FLUSH_SLAVE_TIMEOUT, before it was registered), and without its halves the commit would
    find nothing to end and write nothing (the Jepsen run's lost commit, docs/replication.md).

    Its UNIQ_KEYs come from its ProducerRef either way; the store's own dedupe (``producer=``,
    an index lookup) runs only when ``check`` says the batch may have been stored before."""
    ref = _producer_ref(topic, partition, batch)
    assert ref is not None  # transactional batches are idempotent
    uniq_keys = request_uniq_keys(ref, len(batch))
    fresh = not (check and ctx.store.get_by_uniq_key(TRANS_HALF_TOPIC, uniq_keys[-1]) is not None)
    columns = batch_to_columns(
        partition, batch.timestamps_ms, batch.keys, batch.values, batch.headers, ctx.store.now_ms()
    )
    if columns is None:  # scheduling headers, or header names in another order per record
        messages = [record_to_message(topic, partition, r) for r in batch.records]
        if any(m.delay_level > 0 or is_timer_request(m.properties) for m in messages):
            raise InvalidArgument("a transactional record cannot be delayed (DELAY / TIMER_* headers)")
        marks = half.message_properties()
        prepared = [
            dataclasses.replace(m, properties={**m.properties, **marks}, transaction_prepared=True)
            for m in messages
        ]
        results = ctx.store.put_messages(prepared, producer=ref)
        _register(ctx, half, results, topic, partition)
        return -1, fresh
    if not check:
        columns = dataclasses.replace(columns, uniq_keys=uniq_keys)
    stored = ctx.store.put_halves(topic, columns, transaction=half, producer=ref if check else None)
    if isinstance(stored, list):  # many property names: stored message by message
        _register(ctx, half, stored, topic, partition)
    else:
        ctx.transactions.register_batch(half, stored, to_store(topic), partition, columns.keys)
    return -1, fresh


def _register(
    ctx: GatewayContext, half: HalfOf, results: list[PutResult], topic: str, partition: int
) -> None:
    n = len(results)
    born = results[0].store_timestamp_ms
    ctx.transactions.register(
        half.transaction_id, half.producer_group, results, born, [to_store(topic)] * n, [partition] * n
    )


def _producer_ref(topic: str, partition: int, batch: ProducedBatch) -> ProducerRef | None:
    if not batch.is_idempotent:
        return None
    producer = f"kafka:{batch.producer_id}:{batch.producer_epoch}:{partition}:{topic}"
    if len(producer) > MAX_PRODUCER_ID_CHARS:  # long topic names: a digest keeps refs distinct
        producer = "kafka:" + hashlib.blake2b(producer.encode("utf-8"), digest_size=20).hexdigest()
    return ProducerRef(producer, batch.base_sequence)


def _put_records(
    store: KafkaStore, topic: str, partition: int, batches: list[ProducedBatch], producer: ProducerRef | None
) -> int:
    """Append the batches' records contiguously to one queue; returns the first queue offset."""
    if len(batches) == 1:
        (only,) = batches
        timestamps, keys, values, headers = only.timestamps_ms, only.keys, only.values, only.headers
    else:
        timestamps = [t for b in batches for t in b.timestamps_ms]
        keys = [k for b in batches for k in b.keys]
        values = [v for b in batches for v in b.values]
        headers = [h for b in batches for h in b.headers]
    columns = batch_to_columns(partition, timestamps, keys, values, headers, store.now_ms())
    if columns is None:
        messages = [record_to_message(topic, partition, r) for b in batches for r in b.records]
        return store.put_messages(messages, producer=producer)[0].queue_offset
    result = store.put_columns(topic, columns, producer=producer)
    return result[0].queue_offset if isinstance(result, list) else int(result.queue_offsets[0])


def _record_sequences(ctx: GatewayContext, item: _PartitionWork) -> None:
    if item.error != ErrorCode.NONE:
        if item.stored_unacknowledged:  # in the log though refused: their sequences are taken
            kept = [batch for batch, keep in zip(item.batches, item.keep, strict=True) if keep]
            for batch in kept[: item.stored_unacknowledged]:
                if batch.is_idempotent:
                    key = (batch.producer_id, item.topic, item.partition)
                    ctx.producers.stored_unacknowledged(
                        key, batch.producer_epoch, batch.base_sequence, batch.last_sequence
                    )
        for batch in item.batches:  # refused, perhaps after storing: the retry must look
            if batch.is_idempotent:
                ctx.producers.doubt((batch.producer_id, item.topic, item.partition), batch.producer_epoch)
        return
    kept = [batch for batch, keep in zip(item.batches, item.keep, strict=True) if keep]
    for batch, offset, fresh in zip(kept, item.batch_offsets, item.fresh, strict=True):
        if batch.is_idempotent:
            key = (batch.producer_id, item.topic, item.partition)
            metadata = BatchMetadata(batch.base_sequence, batch.last_sequence, offset)
            ctx.producers.record(key, batch.producer_epoch, metadata, fresh=fresh)


def _idempotent_producers(work: list[_PartitionWork]) -> list[int]:
    return sorted({b.producer_id for item in work for b in item.batches if b.is_idempotent})


def _decode_and_append_plain(ctx: GatewayContext, body: Any) -> tuple[list[_PartitionWork], bool]:
    """Steps 1 and 3 in one thread-pool hop when no batch needs a sequence check."""
    work = _decode(ctx, body)
    if _idempotent_producers(work):
        return work, False
    _append(ctx, work)
    return work, True


def _count_produced(ctx: GatewayContext, work: list[_PartitionWork], seconds: float) -> None:
    """Count the records written new (not a retry found in the store) per topic."""
    if ctx.metrics is None:
        return
    for item in work:
        if item.error != ErrorCode.NONE or not item.fresh:
            continue
        kept = [batch for batch, keep in zip(item.batches, item.keep, strict=True) if keep]
        written = [batch for batch, fresh in zip(kept, item.fresh, strict=True) if fresh]
        messages = sum(len(batch) for batch in written)
        if messages:
            body_bytes = sum(len(value or b"") for batch in written for value in batch.values)
            ctx.metrics.produced(item.topic, messages, body_bytes, "kafka", seconds, "kafka")


async def handle_produce(ctx: GatewayContext, conn: Connection, request: KafkaRequest) -> bytes | None:
    started = time.perf_counter()
    work, appended = await ctx.run_blocking(_decode_and_append_plain, ctx, request.body)
    if not appended:
        await _append_idempotent(ctx, work, request.body.transactional_id)
    _count_produced(ctx, work, time.perf_counter() - started)
    if not codec.expects_response(request):
        return None
    if request.api_version >= CURRENT_LEADER_VERSION:
        responses, endpoints = _responses_with_leaders(ctx, work)
        return codec.encode_response(
            request, throttle_time_ms=0, responses=responses, node_endpoints=endpoints
        )
    return codec.encode_response(request, throttle_time_ms=0, responses=_responses(work))


async def _append_idempotent(
    ctx: GatewayContext, work: list[_PartitionWork], transactional_id: str | None
) -> None:
    producer_ids = _idempotent_producers(work)
    async with AsyncExitStack() as locks:
        for producer_id in producer_ids:
            await locks.enter_async_context(ctx.producer_lock(producer_id))
        for item in work:
            if item.error == ErrorCode.NONE and item.transactional and transactional_id is not None:
                await _join_transaction(ctx, transactional_id, item)
            if item.error == ErrorCode.NONE:
                _check_sequences(ctx, item)
        await ctx.run_blocking(_append, ctx, work)
        for item in work:
            _record_sequences(ctx, item)


def _responses_with_leaders(ctx: GatewayContext, work: list[_PartitionWork]) -> tuple[list[Any], list[Any]]:
    """v10+ (KIP-951): a NOT_LEADER_OR_FOLLOWER partition names its leader, and the leaders'
    endpoints come along, so librdkafka retries there without a Metadata round trip."""
    cls = codec.response_class(ApiKey.PRODUCE)
    partition_cls = cls.TopicProduceResponse.PartitionProduceResponse
    leaders: dict[tuple[str, int], Any] = {}
    endpoints: dict[int, Any] = {}
    for item in work:
        if item.error != ErrorCode.NOT_LEADER_OR_FOLLOWER or ctx.cluster is None:
            continue
        node = ctx.cluster.leader(item.topic, item.partition)
        leaders[(item.topic, item.partition)] = partition_cls.LeaderIdAndEpoch(
            leader_id=node.node_id if node else -1, leader_epoch=0
        )
        if node is not None:
            endpoints[node.node_id] = cls.NodeEndpoint(
                node_id=node.node_id, host=node.host, port=node.port, rack=None
            )
    return _responses(work, leaders), list(endpoints.values())


def _responses(work: list[_PartitionWork], leaders: dict[tuple[str, int], Any] | None = None) -> list[Any]:
    cls = codec.response_class(ApiKey.PRODUCE)
    by_topic: dict[str, list[Any]] = {}
    for item in work:
        extra: dict[str, Any] = {}
        if leaders and (leader := leaders.get((item.topic, item.partition))) is not None:
            extra["current_leader"] = leader
        by_topic.setdefault(item.topic, []).append(
            cls.TopicProduceResponse.PartitionProduceResponse(
                index=item.partition,
                error_code=item.error,
                base_offset=item.base_offset if item.error == ErrorCode.NONE else -1,
                log_append_time_ms=-1,
                log_start_offset=item.log_start_offset,
                record_errors=[],
                error_message=None,
                **extra,
            )
        )
    return [
        cls.TopicProduceResponse(name=name, partition_responses=parts) for name, parts in by_topic.items()
    ]


async def handle_init_producer_id(ctx: GatewayContext, conn: Connection, request: KafkaRequest) -> bytes:
    body = request.body
    if body.transactional_id is not None:
        return await init_transactional(ctx, request)
    previous_id = getattr(body, "producer_id", -1)
    previous_epoch = getattr(body, "producer_epoch", -1)
    if ctx.producer_ids.issued(previous_id) and 0 <= previous_epoch < MAX_PRODUCER_EPOCH:
        producer_id, epoch = previous_id, previous_epoch + 1  # KIP-360 epoch bump
    else:
        try:
            producer_id, epoch = await ctx.run_blocking(ctx.producer_ids.allocate), 0
        except SparkMQError as exc:  # its record not acknowledged (a slave, a fenced master)
            log.info("InitProducerId: no producer id recorded (%s): one of this member's own", exc)
            try:
                producer_id, epoch = await ctx.run_blocking(ctx.producer_ids.allocate_local), 0
            except (OSError, SparkMQError) as local:
                log.warning("InitProducerId: no producer id stored: %s", local)
            else:
                return codec.encode_response(
                    request, throttle_time_ms=0, error_code=ErrorCode.NONE, producer_id=producer_id,
                    producer_epoch=epoch,
                )  # fmt: skip
            return codec.encode_response(
                request,
                throttle_time_ms=0,
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                producer_id=-1,
                producer_epoch=-1,
            )
    return codec.encode_response(
        request, throttle_time_ms=0, error_code=ErrorCode.NONE, producer_id=producer_id, producer_epoch=epoch
    )
