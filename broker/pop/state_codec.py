"""The POP state record: the body of every record in ``rmq_sys_pop_state`` queue 0 (pure codec).

POP consumption keeps its state in the CommitLog, as one system topic, so replication carries
it to the slaves under the same acks as messages and a ``kill -9`` loses nothing that was
answered (docs/pop.md). A record says what happened to some in-flight messages of one
(group, topic); the in-memory table (:mod:`broker.pop.table`) is the fold of these records
from the last snapshot on. All integers are big-endian::

    0     2    3     4            12          14               16
    +-----+----+-----+------------+-----------+-------+---------+-------+
    | 'PS'| ver| kind| time_ms i64| group_len | group | topic_len| topic |
    +-----+----+-----+------------+----u16----+-------+---u16---+-------+
    | n_cursors u16 | CURSOR * n_cursors | n_entries u32 | ENTRY * n_entries |
    | tail_len u16 | tail (kind-specific bytes) |

    CURSOR (13 bytes): source u8 | queue_id i32 | next_offset i64
    ENTRY  (39 bytes): source u8 | queue_id i32 | queue_offset i64 | attempt u16
                       | generation u64 | visible_at_ms i64 | popped_at_ms i64

``source`` is 0 for the topic itself and 1 for the group's retry topic ``%RETRY%group``. An
ENTRY names one message by (source, queue id, queue offset); ``generation`` is the random
64-bit id of its current delivery (a receipt handle must carry it); ``attempt`` is 1 on the
first delivery; ``visible_at_ms`` is when it becomes deliverable again unless acked;
``popped_at_ms`` is when this delivery was handed out (ACK and DEAD entries carry the entry
they remove).

Kinds and their meaning when replayed:

* RECEIVE: cursors move to ``next_offset``; each entry is handed out (in flight).
* ACK: each entry is done (removed). DEAD: each entry went to ``%DLQ%group`` (removed).
* CHANGE: each entry's generation and visible-at are replaced.
* CONFIG: the group's settings (tail = :data:`GROUP_SETTINGS`); topic is empty.
* SNAPSHOT_BEGIN (tail = :data:`SNAPSHOT_MARK` + the 32-byte handle secret), SNAPSHOT_PART
  (one (group, topic): its cursors and in-flight entries; tail = GROUP_SETTINGS) and
  SNAPSHOT_END (tail = :data:`SNAPSHOT_MARK`): a whole table, appended in one atomic put.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

MAGIC = b"PS"
VERSION = 1

#: magic 2s | version u8 | kind u8 | time_ms i64
HEADER = struct.Struct(">2sBBq")
#: length prefix of the group and topic names (UTF-8)
NAME_LEN = struct.Struct(">H")
COUNT_CURSORS = struct.Struct(">H")
COUNT_ENTRIES = struct.Struct(">I")
TAIL_LEN = struct.Struct(">H")
#: source u8 | queue_id i32 | next_offset i64
CURSOR = struct.Struct(">Biq")
#: source u8 | queue_id i32 | queue_offset i64 | attempt u16 | generation u64 | visible_at_ms i64
#: | popped_at_ms i64
ENTRY = struct.Struct(">BiqHQqq")
#: snapshot id u64 | number of records in the snapshot u32
SNAPSHOT_MARK = struct.Struct(">QI")
#: max_retries u16 | start u8 (0 oldest, 1 newest) | fifo u8
GROUP_SETTINGS = struct.Struct(">HBB")
SECRET_SIZE = 32

#: Entries per SNAPSHOT_PART record (39 bytes each: about 600 KiB, under any message limit).
SNAPSHOT_PART_ENTRIES = 16_000


class Kind(enum.IntEnum):
    RECEIVE = 1
    ACK = 2
    CHANGE = 3
    DEAD = 4
    CONFIG = 5
    SNAPSHOT_BEGIN = 6
    SNAPSHOT_PART = 7
    SNAPSHOT_END = 8


class Source(enum.IntEnum):
    TOPIC = 0
    RETRY = 1


@dataclass(frozen=True, slots=True)
class Cursor:
    source: Source
    queue_id: int
    next_offset: int


@dataclass(frozen=True, slots=True)
class Entry:
    source: Source
    queue_id: int
    queue_offset: int
    attempt: int
    generation: int
    visible_at_ms: int
    popped_at_ms: int

    @property
    def key(self) -> tuple[Source, int, int]:
        """What names the message within its (group, topic)."""
        return (self.source, self.queue_id, self.queue_offset)


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """A POP group's settings: ``max_retries`` (RocketMQ ``retryMaxTimes``: deliveries are
    ``max_retries + 1``), where a new group starts (oldest stored or newest), FIFO or not."""

    max_retries: int = 16
    start_newest: bool = False
    fifo: bool = False

    def encode(self) -> bytes:
        return GROUP_SETTINGS.pack(self.max_retries, int(self.start_newest), int(self.fifo))

    @staticmethod
    def decode(tail: bytes) -> GroupSettings:
        if len(tail) != GROUP_SETTINGS.size:
            raise StateRecordCorrupt(f"group settings of {len(tail)} bytes, expected {GROUP_SETTINGS.size}")
        retries, start, fifo = GROUP_SETTINGS.unpack(tail)
        return GroupSettings(retries, bool(start), bool(fifo))


@dataclass(frozen=True, slots=True)
class StateRecord:
    kind: Kind
    time_ms: int
    group: str = ""
    topic: str = ""
    cursors: tuple[Cursor, ...] = ()
    entries: tuple[Entry, ...] = ()
    tail: bytes = field(default=b"")


class StateRecordCorrupt(ValueError):
    """Bytes in the state topic that are not a state record (never written by this codec)."""


def encode(record: StateRecord) -> bytes:
    """The body bytes of ``record``."""
    group, topic = record.group.encode(), record.topic.encode()
    parts = [
        HEADER.pack(MAGIC, VERSION, record.kind, record.time_ms),
        NAME_LEN.pack(len(group)),
        group,
        NAME_LEN.pack(len(topic)),
        topic,
        COUNT_CURSORS.pack(len(record.cursors)),
    ]
    parts.extend(CURSOR.pack(c.source, c.queue_id, c.next_offset) for c in record.cursors)
    parts.append(COUNT_ENTRIES.pack(len(record.entries)))
    parts.extend(
        ENTRY.pack(
            e.source, e.queue_id, e.queue_offset, e.attempt, e.generation, e.visible_at_ms, e.popped_at_ms
        )
        for e in record.entries
    )
    parts += [TAIL_LEN.pack(len(record.tail)), record.tail]
    return b"".join(parts)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, size: int) -> bytes:
        if self.pos + size > len(self.data):
            raise StateRecordCorrupt(f"record ends at {len(self.data)}, needed {self.pos + size}")
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return chunk

    def unpack(self, layout: struct.Struct) -> tuple[int, ...]:
        return layout.unpack(self.take(layout.size))

    def name(self) -> str:
        (length,) = self.unpack(NAME_LEN)
        return self.take(length).decode()


def decode(data: bytes) -> StateRecord:
    """The record in ``data``; raises :class:`StateRecordCorrupt` for anything else."""
    r = _Reader(bytes(data))
    magic, version, kind, time_ms = HEADER.unpack(r.take(HEADER.size))
    if magic != MAGIC or version != VERSION:
        raise StateRecordCorrupt(f"magic {magic!r} version {version}: not a POP state record")
    try:
        record_kind = Kind(kind)
        group, topic = r.name(), r.name()
        (n_cursors,) = r.unpack(COUNT_CURSORS)
        cursors = tuple(Cursor(Source(s), q, o) for s, q, o in (r.unpack(CURSOR) for _ in range(n_cursors)))
        (n_entries,) = r.unpack(COUNT_ENTRIES)
        entries = tuple(Entry(Source(v[0]), *v[1:]) for v in (r.unpack(ENTRY) for _ in range(n_entries)))
    except (ValueError, UnicodeDecodeError) as exc:
        if isinstance(exc, StateRecordCorrupt):
            raise
        raise StateRecordCorrupt(str(exc)) from None
    (tail_len,) = r.unpack(TAIL_LEN)
    tail = r.take(tail_len)
    if r.pos != len(r.data):
        raise StateRecordCorrupt(f"{len(r.data) - r.pos} bytes after the record")
    return StateRecord(record_kind, time_ms, group, topic, cursors, entries, tail)


def snapshot_mark(snapshot_id: int, records: int, secret: bytes = b"") -> bytes:
    """The tail of SNAPSHOT_BEGIN (with the secret) and SNAPSHOT_END (without)."""
    return SNAPSHOT_MARK.pack(snapshot_id, records) + secret


def read_snapshot_mark(tail: bytes) -> tuple[int, int, bytes]:
    """(snapshot id, records in the snapshot, secret or b"") of a snapshot mark."""
    if len(tail) not in (SNAPSHOT_MARK.size, SNAPSHOT_MARK.size + SECRET_SIZE):
        raise StateRecordCorrupt(f"snapshot mark of {len(tail)} bytes")
    snapshot_id, records = SNAPSHOT_MARK.unpack(tail[: SNAPSHOT_MARK.size])
    return snapshot_id, records, tail[SNAPSHOT_MARK.size :]
