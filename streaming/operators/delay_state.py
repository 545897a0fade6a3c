"""What the delay resolver keeps per key, and its decisions on it (pure NumPy, no Spark).

The profile of issue 23 (docs/profiles/operators-delay-before.md) put the resolver's time in
state calls that grow with messages: a ``ListState`` element per parked message costs ~100 µs
to append and ~110-1100 µs to read back, so 100,000 pending messages took 3.6-6.6 s of worker
time per fire. Here state calls grow with buckets and batches instead:

* **Level messages are FIFO per level queue**: every message of ``SCHEDULE_TOPIC_XXXX`` queue
  ``L`` is due at its store time + L's delay, so due times rise with the queue offset, and the
  messages of one (level queue, 100 ms bucket) are a run of consecutive queue offsets. They are
  kept as **ranges** ``(queue, first offset, count)``: one :class:`Entry` per run, and the broker
  relocates a whole range with one ConsumeQueue read (``store.publish.relocations``).
* **Timer messages** are due at arbitrary times: the pointers one input batch adds to a key with
  the same action time are **packed into one entry** (CommitLog offset, enqueue time, due time as
  delta-encoded, zlib-compressed int64 arrays), instead of one list element each.

An :class:`Entry` is one ``ListState`` element (:data:`ENTRY_SCHEMA`). ``fire`` decides which
entries (or parts of them) a fired timer emits: those whose action time has come, in action-time
order, at most ``burst_cap`` messages per key and batch; the rest are kept. Times come from
``timerValues`` only, so a replayed batch decides the same.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
from pyspark.sql.types import BinaryType, IntegerType, LongType, StructField, StructType

I64 = npt.NDArray[np.int64]

#: Input row kinds (the parked topic) and entry kinds.
KIND_LEVEL, KIND_TIMER = 0, 1
ENTRY_RANGE, ENTRY_POINTERS = 0, 1
#: The queue of the timer topic in summaries (levels: level - 1).
TIMER_QUEUE = -1

ENTRY_SCHEMA = StructType(
    [
        StructField("kind", IntegerType()),
        StructField("action_ms", LongType()),
        StructField("src_queue", IntegerType()),
        #: A range: its first queue offset; pointers: their smallest queue offset.
        StructField("first_offset", LongType()),
        StructField("messages", LongType()),
        #: Pointers only (:func:`pack_pointers`).
        StructField("pointers", BinaryType()),
    ]
)
#: Per key: the pending summary per parked queue (:func:`pack_summary`), for /operators.
SUMMARY_SCHEMA = StructType([StructField("queues", BinaryType())])


class Entry(NamedTuple):
    """One state element: a range of a level queue, or packed pointers sharing an action time."""

    kind: int
    action_ms: int
    src_queue: int
    first_offset: int
    messages: int
    pointers: bytes | None = None


@dataclass(frozen=True, slots=True)
class Pointers:
    """Parked records by CommitLog offset, with their enqueue and due times (ms)."""

    commitlog_offsets: I64
    enqueue_ms: I64
    due_ms: I64

    def __len__(self) -> int:
        return len(self.commitlog_offsets)

    def columns(self) -> tuple[I64, I64, I64]:
        return self.commitlog_offsets, self.enqueue_ms, self.due_ms

    def take(self, rows: I64 | slice) -> Pointers:
        return Pointers(self.commitlog_offsets[rows], self.enqueue_ms[rows], self.due_ms[rows])

    @staticmethod
    def concat(parts: Sequence[Pointers]) -> Pointers:
        return Pointers(
            *(np.concatenate(columns) for columns in zip(*(p.columns() for p in parts), strict=True))
        )

    @staticmethod
    def empty() -> Pointers:
        return Pointers(*(np.zeros(0, dtype=np.int64) for _ in range(3)))


def pack_pointers(pointers: Pointers) -> bytes:
    """The pointers as bytes: three int64 columns, delta-encoded (offsets and times rise), zlib."""
    columns = np.stack([np.asarray(c, dtype=np.int64) for c in pointers.columns()])
    deltas = np.diff(columns, axis=1, prepend=np.zeros((3, 1), dtype=np.int64))
    return zlib.compress(deltas.astype("<i8").tobytes(), 1)


def unpack_pointers(blob: bytes, count: int) -> Pointers:
    """Inverse of :func:`pack_pointers`; ``ValueError`` when ``blob`` does not hold ``count``."""
    raw = zlib.decompress(blob)
    if len(raw) != 24 * count:
        raise ValueError(f"packed pointers hold {len(raw)} bytes, expected {24 * count}")
    columns = np.cumsum(np.frombuffer(raw, dtype="<i8").reshape(3, count), axis=1).astype(np.int64)
    return Pointers(columns[0], columns[1], columns[2])


def action_times(due_ms: I64, kinds: I64, now_ms: int, roll_window_ms: int) -> I64:
    """When each message must be acted on: its due time, or for a timer message due past the
    roll window, the window's end (it is then rolled: re-parked with the same due time)."""
    roll = (kinds == KIND_TIMER) & (due_ms - now_ms > roll_window_ms)
    return np.where(roll, now_ms + roll_window_ms, due_ms)


def entries_of(
    kinds: I64,
    due_ms: I64,
    commitlog_offsets: I64,
    enqueue_ms: I64,
    src_queues: I64,
    queue_offsets: I64,
    *,
    now_ms: int,
    roll_window_ms: int,
) -> list[Entry]:
    """The entries one input batch adds to a key: level messages as runs of consecutive queue
    offsets per level queue; timer messages packed (sorted by due, offset) into one entry, and
    one more for those due past the roll window."""
    out: list[Entry] = []
    level = kinds == KIND_LEVEL
    if bool(level.any()):
        queues, offsets, due = src_queues[level], queue_offsets[level], due_ms[level]
        order = np.lexsort((offsets, queues))
        queues, offsets, due = queues[order], offsets[order], due[order]
        breaks = np.flatnonzero((np.diff(offsets) != 1) | (np.diff(queues) != 0)) + 1
        for run in np.split(np.arange(len(offsets)), breaks):
            first = int(offsets[run[0]])
            out.append(Entry(ENTRY_RANGE, int(due[run].max()), int(queues[run[0]]), first, len(run)))
    timer = ~level
    if bool(timer.any()):
        due = due_ms[timer]
        rolled = action_times(due, kinds[timer], now_ms, roll_window_ms) != due
        pointers = Pointers(commitlog_offsets[timer], enqueue_ms[timer], due)
        offsets = queue_offsets[timer]
        # A key's messages are due within its bucket: one entry acted on at the latest due time,
        # and one for those due past the roll window, rolled when the window has passed.
        for group_rows, action in ((~rolled, None), (rolled, now_ms + roll_window_ms)):
            rows = np.flatnonzero(group_rows)
            if not len(rows):
                continue
            group = pointers.take(rows)
            group = group.take(np.lexsort((group.commitlog_offsets, group.due_ms)))
            when = int(group.due_ms.max()) if action is None else action
            out.append(
                Entry(
                    ENTRY_POINTERS,
                    when,
                    TIMER_QUEUE,
                    int(offsets[rows].min()),
                    len(rows),
                    pack_pointers(group),
                )
            )
    return out


class Fired(NamedTuple):
    """What a fired timer emits (ranges as ``(queue, first offset, count, action ms)`` and
    pointers in emit order) and the entries kept."""

    ranges: list[tuple[int, int, int, int]]
    pointers: Pointers
    keep: list[Entry]


def fire(entries: Iterable[Entry], now_ms: int, burst_cap: int) -> Fired:
    """Emit what is due by ``now_ms``, in action-time order, at most ``burst_cap`` messages; a
    range or a pointer entry cut by the cap keeps its rest (see the module docstring)."""
    ready: list[Entry] = []
    keep: list[Entry] = []
    for entry in entries:
        (ready if entry.action_ms <= now_ms else keep).append(entry)
    ready.sort(key=lambda e: (e.action_ms, e.kind, e.src_queue, e.first_offset))
    budget = burst_cap
    ranges: list[tuple[int, int, int, int]] = []
    emitted: list[Pointers] = []
    for entry in ready:
        take = min(entry.messages, budget)
        if take <= 0:
            keep.append(entry)
            continue
        budget -= take
        if entry.kind == ENTRY_RANGE:
            ranges.append((entry.src_queue, entry.first_offset, take, entry.action_ms))
            if take < entry.messages:
                left = entry.messages - take
                keep.append(entry._replace(first_offset=entry.first_offset + take, messages=left))
            continue
        pointers = unpack_pointers(entry.pointers or b"", entry.messages)
        emitted.append(pointers.take(slice(0, take)))
        if take < entry.messages:
            rest = pointers.take(slice(take, None))
            keep.append(entry._replace(messages=len(rest), pointers=pack_pointers(rest)))
    return Fired(ranges, Pointers.concat(emitted) if emitted else Pointers.empty(), keep)


def next_timer(keep: Sequence[Entry], now_ms: int) -> int | None:
    """The timer to arm for what is kept: ``now + 1`` if some is due already (the burst cap),
    else the earliest action time; None when nothing is kept."""
    if not keep:
        return None
    earliest = min(e.action_ms for e in keep)
    return now_ms + 1 if earliest <= now_ms else earliest


#: Per parked queue: (pending count, next action ms, smallest queue offset).
Summary = dict[int, tuple[int, int, int]]


def summarize(entries: Iterable[Entry]) -> Summary:
    out: Summary = {}
    for e in entries:
        old = out.get(e.src_queue)
        new = (e.messages, e.action_ms, e.first_offset)
        out[e.src_queue] = new if old is None else (old[0] + new[0], min(old[1], new[1]), min(old[2], new[2]))
    return out


def merge_summaries(old: Summary, new: Summary) -> Summary:
    merged = dict(old)
    for queue, (count, action, offset) in new.items():
        was = merged.get(queue)
        merged[queue] = (count, action, offset) if was is None else (
            was[0] + count, min(was[1], action), min(was[2], offset)
        )  # fmt: skip
    return merged


def pack_summary(summary: Summary) -> bytes:
    rows = [(q, *v) for q, v in sorted(summary.items())]
    return np.asarray(rows, dtype="<i8").reshape(-1, 4).tobytes()


def unpack_summary(blob: bytes | None) -> Summary:
    if not blob:
        return {}
    rows = np.frombuffer(blob, dtype="<i8").reshape(-1, 4).tolist()
    return {int(q): (int(c), int(a), int(o)) for q, c, a, o in rows}
