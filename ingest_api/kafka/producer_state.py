"""Idempotent-producer state: producer-id allocation and per-partition sequence checks.

* :class:`ProducerIdAllocator` hands out monotonically increasing producer ids and puts the
  next id in the state topic (:mod:`ingest_api.kafka.txn_log`) *before* returning an id, so ids
  are never reused after a restart or a replica group's failover. A member that cannot put the
  record (a slave) still answers an idempotent producer, as every Kafka broker does (a client
  bootstrapped at a slave, with librdkafka's sparse connections, asks nobody else): it hands out
  an id of the upper half of its own block from a counter in a local file
  (:meth:`ProducerIdAllocator.allocate_local`), fsynced before the answer. The two halves never
  overlap, so a promotion cannot reissue a local id. The local counter carries a random
  generation, drawn again when the file is new (a rebuilt slave) or its range is used up, so a
  wiped file is very unlikely to hand out an id again.
* :class:`ProducerStateTable` keeps, per ``(producer_id, topic, partition)``, the producer
  epoch and the last :data:`MAX_CACHED_BATCHES` batches ``(first_seq, last_seq, base_offset)``
  (Kafka's ``ProducerStateManager``). A retried batch that matches one of them is a duplicate:
  the original base offset is returned and nothing is written. A sequence gap is
  OUT_OF_ORDER_SEQUENCE_NUMBER (45); an epoch older than the one seen is
  INVALID_PRODUCER_EPOCH (47); a newer epoch must start again at sequence 0.
  The table is in memory. After a restart the first batch of a (producer, partition) is
  accepted at any sequence, and until one batch has been written new, every batch is first
  looked up in the store (its UNIQ_KEYs are derived from the sequence, see
  ``store.write.idempotence``), so retries of batches stored before the restart are not written
  twice. A partition whose append failed is looked up the same way until a batch is written new
  (:meth:`ProducerStateTable.doubt`): the failed batch may be stored. A batch the store says
  it appended before refusing (``StoreNotWritable.appended``) takes its sequences all the same
  (:meth:`ProducerStateTable.stored_unacknowledged`), as in Kafka, so the batches behind it are
  in order; its retry goes to the store's dedupe, which answers once the replicas hold it.
"""

from __future__ import annotations

import secrets
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from ingest_api.kafka.errors import ErrorCode
from ingest_api.kafka.records import MAX_SEQUENCE
from ingest_api.kafka.txn_log import TxnStateLog
from ingest_api.kafka.txn_record import ProducerIdBlock
from store import InvalidArgument, read_json, write_json_atomically

MAX_CACHED_BATCHES = 5


#: In a cluster, broker ``m`` hands out producer ids ``[m << BITS, (m + 1) << BITS)``.
PRODUCER_ID_BLOCK_BITS = 32
#: Ids handed out without a record (a slave) are ``base + LOCAL_HALF + (generation << 16) + n``.
LOCAL_HALF = 1 << (PRODUCER_ID_BLOCK_BITS - 1)
LOCAL_COUNTER_BITS = 16
LOCAL_GENERATIONS = 1 << (PRODUCER_ID_BLOCK_BITS - 1 - LOCAL_COUNTER_BITS)
LOCAL_PRODUCER_IDS_FILE = "kafkaLocalProducerIds.json"


class ProducerIdAllocator:
    """Producer-id counter kept in the state topic (thread-safe; call from an executor: each
    allocation is a store append, acknowledged like a message).

    Ids are ``base + n`` for the counter ``n``. A lone broker uses base 0; in a cluster
    each member uses ``member_id << PRODUCER_ID_BLOCK_BITS``, so ids handed out by different
    members never collide (an idempotent producer's id is used on every partition leader).
    ``blocks`` is what the state topic says of every member's block (a promoted slave knows
    the ids its master handed out: :meth:`issued`)."""

    def __init__(self, log: TxnStateLog, blocks: Mapping[int, int], base: int = 0) -> None:
        self._log = log
        self._lock = log.lock  # shared: see TxnStateLog.keep_before
        self._base = base
        self._blocks = dict(blocks)
        self._next_id = self._blocks.get(base, 0)

    def allocate(self) -> int:
        """A new producer id, once its record is in the log (raises the store's errors, or
        InvalidArgument when this member's block is used up)."""
        with self._lock:
            counter = self._next_id
            if counter >= LOCAL_HALF:
                raise InvalidArgument(f"producer ids of block {self._base:#x} are used up")
            self._log.append([ProducerIdBlock(self._base, counter + 1)])
            self._next_id = self._blocks[self._base] = counter + 1
            return self._base + counter

    def allocate_local(self) -> int:
        """A producer id for an idempotent producer when the record cannot be put (a slave):
        the upper half of this member's block, from the local counter file, written (fsynced)
        before the id is returned. Raises OSError when the file cannot be written."""
        path = self._log.config_dir / LOCAL_PRODUCER_IDS_FILE
        with self._lock:
            generation, counter = _local_counter(read_json(path) or {})
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomically(path, {"generation": generation, "next": counter + 1})
            return self._base + LOCAL_HALF + (generation << LOCAL_COUNTER_BITS) + counter

    def blocks(self) -> dict[int, int]:
        """Block base -> ids handed out from it (every member's, as the state topic says)."""
        with self._lock:
            return dict(self._blocks)

    def issued(self, producer_id: int) -> bool:
        with self._lock:
            return any(base <= producer_id < base + n for base, n in self._blocks.items())


def _local_counter(document: Mapping[str, object]) -> tuple[int, int]:
    """``(generation, next)`` of the local counter file; a new random generation when the file
    is missing, unreadable or its generation's range is used up."""
    generation, counter = document.get("generation"), document.get("next", 0)
    if (
        isinstance(generation, int)
        and 0 <= generation < LOCAL_GENERATIONS
        and isinstance(counter, int)
        and 0 <= counter < 1 << LOCAL_COUNTER_BITS
    ):
        return generation, counter
    return secrets.randbelow(LOCAL_GENERATIONS), 0


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """A batch in the log. ``acknowledged=False``: stored, but its append was refused after
    (:attr:`store.StoreNotWritable.appended`), so ``base_offset`` may be unknown (-1)."""

    first_seq: int
    last_seq: int
    base_offset: int
    acknowledged: bool = True


@dataclass(slots=True)
class _PartitionEntry:
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))
    #: A batch of this epoch was written new by this process: later sequences are new too.
    fresh: bool = False

    def find(self, first_seq: int, last_seq: int) -> int | None:
        """Index in :attr:`batches` of the batch with these sequences, if remembered."""
        for i, batch in enumerate(self.batches):
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return i
        return None


@dataclass(frozen=True, slots=True)
class SequenceVerdict:
    """NONE + ``duplicate_of`` set: answer with that base offset and write nothing. NONE +
    ``in_store``: a retry of a batch stored unacknowledged; look it up in the store first."""

    error: ErrorCode
    duplicate_of: int | None = None
    in_store: bool = False

    @property
    def should_append(self) -> bool:
        return self.error == ErrorCode.NONE and self.duplicate_of is None


APPEND = SequenceVerdict(ErrorCode.NONE)
IN_THE_STORE = SequenceVerdict(ErrorCode.NONE, in_store=True)
PartitionKey = tuple[int, str, int]  # producer_id, topic, partition


def next_sequence(sequence: int) -> int:
    return 0 if sequence == MAX_SEQUENCE else sequence + 1


class ProducerStateTable:
    """Sequence bookkeeping; not thread-safe (the gateway calls it from its event loop)."""

    def __init__(self) -> None:
        self._entries: dict[PartitionKey, _PartitionEntry] = {}
        self._leader_epoch: int | None = None

    def follow_leader_epoch(self, epoch: int) -> None:
        """In a replica group: forget everything when this broker leads under a new epoch.
        Other masters may have taken batches of the same producers meanwhile, so what this table
        remembers from an earlier epoch is stale (a gap it would answer OUT_OF_ORDER_SEQUENCE,
        fatal to an idempotent producer); forgotten, the next batches are checked against the
        replicated CommitLog instead, as after a restart (Kafka rebuilds its producer state
        from the log when a replica becomes leader)."""
        if epoch != self._leader_epoch:
            self._entries.clear()
            self._leader_epoch = epoch

    def check(self, key: PartitionKey, epoch: int, first_seq: int, last_seq: int) -> SequenceVerdict:
        entry = self._entries.get(key)
        if entry is None:
            return APPEND
        if epoch < entry.epoch:
            return SequenceVerdict(ErrorCode.INVALID_PRODUCER_EPOCH)
        if epoch > entry.epoch:
            return APPEND if first_seq == 0 else SequenceVerdict(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        known = entry.find(first_seq, last_seq)
        if known is not None:
            batch = entry.batches[known]
            if not batch.acknowledged:  # the store's dedupe answers it, once replicated
                return IN_THE_STORE
            return SequenceVerdict(ErrorCode.NONE, duplicate_of=batch.base_offset)
        if entry.batches and first_seq != next_sequence(entry.batches[-1].last_seq):
            return SequenceVerdict(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        return APPEND

    def record(self, key: PartitionKey, epoch: int, batch: BatchMetadata, *, fresh: bool = True) -> None:
        """Remember an appended batch; ``fresh=False`` when the store already held it. A batch
        recorded before (stored unacknowledged, now acknowledged) keeps its place."""
        entry = self._entries.get(key)
        if entry is None or epoch != entry.epoch:
            entry = _PartitionEntry(epoch)
            self._entries[key] = entry
        known = entry.find(batch.first_seq, batch.last_seq)
        if known is None:
            entry.batches.append(batch)
        else:
            entry.batches[known] = batch
        entry.fresh = entry.fresh or fresh

    def stored_unacknowledged(self, key: PartitionKey, epoch: int, first_seq: int, last_seq: int) -> None:
        """A batch is in the log but its append was refused after (an fsync or the replicas'
        acknowledgement failed): its sequence is taken, as Kafka's producer state takes it. The
        batches a client has in flight behind it follow in sequence; without this they were
        answered OUT_OF_ORDER_SEQUENCE_NUMBER, and librdkafka then bumps the epoch and numbers
        the refused batch again, which stored it twice. Its retry is looked up in the store."""
        self.record(key, epoch, BatchMetadata(first_seq, last_seq, -1, acknowledged=False), fresh=False)
        self.doubt(key, epoch)

    def needs_store_check(self, key: PartitionKey, epoch: int) -> bool:
        """True until this process wrote a new batch for ``key`` at ``epoch``: before that, a
        batch may be a retry of one stored before a restart, which only the store can tell."""
        entry = self._entries.get(key)
        return entry is None or entry.epoch != epoch or not entry.fresh

    def doubt(self, key: PartitionKey, epoch: int) -> None:
        """A batch for ``key`` may be stored without being recorded (its append raised after
        storing it: an acknowledgement that timed out, the in-sync set shrinking): until a batch
        is written new again, every batch is looked up in the store first, so the retry finds
        the first attempt instead of storing it again."""
        entry = self._entries.get(key)
        if entry is not None and entry.epoch == epoch:
            entry.fresh = False

    def forget_topic(self, topic: str) -> None:
        for key in [k for k in self._entries if k[1] == topic]:
            del self._entries[key]
