"""Storing one chunk of a decided sink batch exactly once, found again through the key index.

A chunk is ``n`` rows of one topic; chunk ``seq`` of batch ``b`` of sink ``s`` carries the
deterministic UNIQ_KEYs ``request_uniq_keys(ProducerRef(f"sink:{s}:{b}", seq), n)``
(:func:`chunk_uniq_keys`), so whoever stores it can tell, from its own key index alone, how
much of it is stored: appends are all or nothing while the store runs and only a crash tears
one, leaving a prefix (:func:`store.write.idempotence.prefix_end`). Writing "the rest" is then
idempotent.

:class:`ChunkWriter` is used by the lone broker's publish (:mod:`store.publish.sink_staging`)
and, across brokers, by every owner of a batch's queues for the chunks the coordinator sends
it (design: docs/exactly_once.md, "Across brokers"). :meth:`ChunkWriter.store_chunk` is the
owner's entry: serialised per (sink, batch), checked against the index unless the chunk is
*fresh* (sent by the call that decided the batch) and not seen before by this process.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store.config import FlushDiskType
from store.errors import IndexBehind, InvalidArgument
from store.format.ids import ascii_rows, hex_of_ints
from store.message_store import MessageStore
from store.names import SCHEDULE_TOPIC, TIMER_TOPIC
from store.publish.sink_plan import scheduled_rows
from store.write.columns import ProduceColumns
from store.write.idempotence import ProducerRef, prefix_end, request_uniq_keys

#: How long a check waits for the key index to cover everything appended so far.
INDEX_WAIT_S = 60.0
#: Chunks remembered per process as "seen" (a fresh copy arriving after one of these is checked).
SEEN_CHUNKS = 65_536
#: Chunks of one (sink, batch) are stored one at a time: under one of this many striped locks.
LOCK_STRIPES = 64


@dataclass(frozen=True, slots=True)
class ChunkRef:
    """Chunk ``seq`` of batch ``batch_id`` of sink ``sink_id``."""

    sink_id: str
    batch_id: int
    seq: int

    @property
    def producer(self) -> ProducerRef:
        return ProducerRef(f"sink:{self.sink_id}:{self.batch_id}", self.seq)


@dataclass(frozen=True, slots=True)
class ChunkOutcome:
    """``rows`` of the chunk, of which ``stored_before`` were found already stored."""

    rows: int
    stored_before: int


def chunk_uniq_keys(ref: ProducerRef, count: int) -> list[str]:
    """``request_uniq_keys(ref, count)``, vectorised (the per-key Python work was a third of
    publishing): the 24-hex-char request prefix then message index ``i`` as 8 hex chars."""
    prefix = request_uniq_keys(ref, 1)[0][:24].encode("ascii")
    text = np.empty((count, 32), dtype=np.uint8)
    text[:, :24] = np.frombuffer(prefix, dtype=np.uint8)
    text[:, 24:] = hex_of_ints(np.arange(count, dtype=np.uint32), 4)
    return ascii_rows(text)


class ChunkWriter:
    """Appends chunks to one open store, each exactly once. Thread-safe."""

    def __init__(self, store: MessageStore, *, on_event: Callable[[str], None] | None = None) -> None:
        """``on_event(f"stored-{seq}")`` runs after an owner stored a chunk, before it answers
        (a seam for fault-injection tests)."""
        self.store = store
        self._on_event = on_event
        self._guard = threading.Lock()
        self._stripes = tuple(threading.Lock() for _ in range(LOCK_STRIPES))
        self._seen: OrderedDict[tuple[str, int, int], None] = OrderedDict()

    def put(self, topic: str, rows: pa.Table, ref: ProducerRef, *, check: bool, delayed: bool) -> int:
        """Append what is not yet stored of chunk ``ref`` (``rows`` in ``PART_SCHEMA``); returns
        how many of its leading rows were found stored (0 without ``check``: the caller knows
        none can be). ``check`` needs the key index caught up (the caller waits for it)."""
        n = int(rows.num_rows)
        uniq = chunk_uniq_keys(ref, n)
        start = 0
        if check:
            # A scheduled row is parked (level or timer) or, a timer due already, in its topic.
            lookup = (SCHEDULE_TOPIC, TIMER_TOPIC, topic) if delayed else (topic,)
            start = self._stored_prefix(lookup, uniq)
            if start == n:
                return n
        columns = ProduceColumns.from_arrow(rows.slice(start))
        self.store.put_columns(topic, replace(columns, uniq_keys=uniq[start:]))
        return start

    def _stored_prefix(self, lookup_topics: tuple[str, ...], uniq: Sequence[str]) -> int:
        def stored(i: int) -> bool:
            return any(self.store.get_by_uniq_key(t, uniq[i]) is not None for t in lookup_topics)

        return prefix_end(len(uniq), stored)

    def wait_indexed(self) -> None:
        if not self.store.wait_indexed(INDEX_WAIT_S):
            raise IndexBehind(
                f"the key index did not catch up in {INDEX_WAIT_S:.0f} s; cannot check what is published"
            )

    def store_chunk(self, ref: ChunkRef, rows: pa.Table, *, fresh: bool, flush: bool = False) -> ChunkOutcome:
        """Store chunk ``ref`` (rows of one topic, every ``queue_id`` set) exactly once.

        ``fresh`` is a promise by the sender that no earlier copy of this chunk was sent; it
        is believed only if this process has not seen the chunk (a late copy of a timed-out
        request is checked like a resume). ``flush``: the store is on disk before returning
        (the coordinator deletes its staged copy once every owner's last chunk is in)."""
        topic = _single_topic(rows)
        key = (ref.sink_id, ref.batch_id, ref.seq)
        with self._lock_for(ref.sink_id, ref.batch_id):
            with self._guard:
                seen = key in self._seen
                self._remember(key)
            check = not fresh or seen
            if check:
                self.wait_indexed()
            stored_before = self.put(
                topic, rows, ref.producer, check=check, delayed=bool(scheduled_rows(rows).any())
            )
            if flush and self.store.config.flush_disk_type is not FlushDiskType.SYNC_FLUSH:
                self.store.flush()
        if self._on_event is not None:
            self._on_event(f"stored-{ref.seq}")
        return ChunkOutcome(rows.num_rows, stored_before)

    def _lock_for(self, sink_id: str, batch_id: int) -> threading.Lock:
        return self._stripes[hash((sink_id, batch_id)) % LOCK_STRIPES]

    def _remember(self, key: tuple[str, int, int]) -> None:
        """Caller holds ``_guard``. Keeps the newest :data:`SEEN_CHUNKS` chunks."""
        self._seen[key] = None
        self._seen.move_to_end(key)
        while len(self._seen) > SEEN_CHUNKS:
            self._seen.popitem(last=False)


def _single_topic(rows: pa.Table) -> str:
    topics = [t for t in pc.unique(rows.column("topic")).to_pylist() if t is not None]
    if len(topics) != 1:
        raise InvalidArgument(f"a sink chunk holds the rows of one topic, got {sorted(topics)}")
    return str(topics[0])
