"""The delay wheel's records, declared once: "due at T" decisions and the wheel's progress. Big-endian.

The delay resolver decides a window ahead; the broker writes each decision as a record of the
system topic :data:`WHEEL_TOPIC` (so it is in the CommitLog and replicates like any message), and
the broker's wheel (``broker/wheel.py``) relocates the messages it names at T, never before.

Queue :data:`DECISION_QUEUE` (0) holds decisions; UNIQ_KEY ``wheel:<operator>:<batch>:<part>``
(:func:`decision_uniq_key`). Body::

    0   u32  magic = 0x53514457 ("SQDW")
    4   u8   version = 1
    5   u8   record type = 0 (DECISION)
    6   i64  due_ms          epoch ms; no request of the record is relocated before it
    14  i64  batch_id        the resolver's micro-batch that decided it
    22  u32  part            index of this record among the batch's decisions
    26  u32  rows            number of requests that follow
    30  u16  operator length, then that many UTF-8 bytes
    then ``rows`` requests of 45 bytes each (:data:`REQUEST`, the columns of
    ``store.publish.relocations.DECISION_SCHEMA``):
    0   i64  commitlog_offset   the parked record (-1 for a range)
    8   i8   kind               RelocationKind (0 = DELIVER)
    9   i64  enqueue_ms
    17  i64  dequeue_ms         TIMER_DEQUEUE_MS of a delivered timer message (= due_ms)
    25  i32  queue_id           SCHEDULE_TOPIC_XXXX queue of a range, else -1
    29  i64  queue_offset       first queue offset of a range, else -1
    37  i64  count              queue offsets in the range, else 1
    = 45 bytes

Queue :data:`PROGRESS_QUEUE` (1) holds the wheel's progress; the newest record alone says what is
published. Body::

    0   u32  magic, 4 u8 version, 5 u8 record type = 1 (PROGRESS)
    6   i64  watermark       every decision below this queue offset of queue 0 is published
    14  u32  count           decisions at or above the watermark also published
    18  i64  x count         their queue offsets, ascending

Pure codecs: bytes in, values out. :class:`DueRecordError` (a :class:`store.StoreError`) for
bytes that are not such a record.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from store.errors import StoreError

#: The wheel's system topic (``rmq_sys_`` prefix: refused to producers, hidden from listings).
WHEEL_TOPIC = "rmq_sys_wheel_due"
DECISION_QUEUE, PROGRESS_QUEUE = 0, 1
MAGIC = 0x53514457
VERSION = 1
TYPE_DECISION, TYPE_PROGRESS = 0, 1

PREFIX = struct.Struct(">IBB")
DECISION_HEAD = struct.Struct(">qqIIH")
PROGRESS_HEAD = struct.Struct(">qI")
REQUEST = struct.Struct(">qbqqiqq")
#: :data:`REQUEST` as a NumPy record (field names are the decision columns).
REQUEST_DTYPE = np.dtype(
    [
        ("commitlog_offset", ">i8"),
        ("kind", "i1"),
        ("enqueue_ms", ">i8"),
        ("dequeue_ms", ">i8"),
        ("queue_id", ">i4"),
        ("queue_offset", ">i8"),
        ("count", ">i8"),
    ]
)
assert REQUEST_DTYPE.itemsize == REQUEST.size == 45
#: Requests per decision record: 16,384 x 45 bytes = 720 KiB, well under the 4 MiB message limit.
MAX_REQUESTS_PER_RECORD = 16_384


class DueRecordError(StoreError):
    """Bytes that are not a wheel record of a known version."""


@dataclass(frozen=True, slots=True)
class Decision:
    """A "due at T" record: relocate ``requests`` (:data:`REQUEST_DTYPE`) at ``due_ms``."""

    operator: str
    batch_id: int
    part: int
    due_ms: int
    requests: npt.NDArray[np.void]


@dataclass(frozen=True, slots=True)
class Progress:
    """What the wheel has published: every decision below ``watermark``, and ``done``."""

    watermark: int
    done: tuple[int, ...] = ()

    def published(self, queue_offset: int) -> bool:
        return queue_offset < self.watermark or queue_offset in self.done


def decision_uniq_key(operator: str, batch_id: int, part: int) -> str:
    return f"wheel:{operator}:{batch_id}:{part}"


def encode_decision(decision: Decision) -> bytes:
    name = decision.operator.encode()
    if not name or len(name) > 0xFFFF:
        raise DueRecordError(f"operator name of {len(name)} bytes")
    requests = np.ascontiguousarray(decision.requests, dtype=REQUEST_DTYPE)
    head = PREFIX.pack(MAGIC, VERSION, TYPE_DECISION) + DECISION_HEAD.pack(
        decision.due_ms, decision.batch_id, decision.part, len(requests), len(name)
    )
    return head + name + requests.tobytes()


def encode_progress(progress: Progress) -> bytes:
    done = np.asarray(sorted(progress.done), dtype=">i8")
    head = PREFIX.pack(MAGIC, VERSION, TYPE_PROGRESS) + PROGRESS_HEAD.pack(progress.watermark, len(done))
    return head + done.tobytes()


def _record_type(body: bytes) -> int:
    if len(body) < PREFIX.size:
        raise DueRecordError(f"a wheel record of {len(body)} bytes is too short")
    magic, version, kind = PREFIX.unpack_from(body)
    if magic != MAGIC or version != VERSION:
        raise DueRecordError(f"not a wheel record (magic {magic:#x}, version {version})")
    return int(kind)


def decode_decision(body: bytes) -> Decision:
    if _record_type(body) != TYPE_DECISION:
        raise DueRecordError("a progress record where a decision was expected")
    at = PREFIX.size
    if len(body) < at + DECISION_HEAD.size:
        raise DueRecordError("a decision record cut in its header")
    due_ms, batch_id, part, rows, name_len = DECISION_HEAD.unpack_from(body, at)
    at += DECISION_HEAD.size
    end = at + name_len + rows * REQUEST.size
    if len(body) != end:
        raise DueRecordError(f"a decision record of {len(body)} bytes, its header says {end}")
    operator = body[at : at + name_len].decode()
    requests = np.frombuffer(body, dtype=REQUEST_DTYPE, count=rows, offset=at + name_len)
    return Decision(operator, batch_id, part, due_ms, requests)


def decode_progress(body: bytes) -> Progress:
    if _record_type(body) != TYPE_PROGRESS:
        raise DueRecordError("a decision record where a progress record was expected")
    at = PREFIX.size
    if len(body) < at + PROGRESS_HEAD.size:
        raise DueRecordError("a progress record cut in its header")
    watermark, count = PROGRESS_HEAD.unpack_from(body, at)
    at += PROGRESS_HEAD.size
    if len(body) != at + 8 * count:
        raise DueRecordError(f"a progress record of {len(body)} bytes for {count} offsets")
    done = np.frombuffer(body, dtype=">i8", count=count, offset=at)
    return Progress(watermark, tuple(int(v) for v in done.tolist()))
