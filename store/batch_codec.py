"""Many records at once: one contiguous buffer, NumPy field patching, UNIQ_KEY generation.

An :class:`EncodedBatch` holds consecutive records (layout in :mod:`store.codec`) in one
``uint8`` array plus each record's relative start and size, so the CommitLog appends a batch
with one copy per file touched. Fields only known under the store's lock (QUEUEOFFSET,
PHYSICALOFFSET, STORETIMESTAMP) are patched afterwards as vectorised big-endian scatters.

:func:`encode_columns` takes a columnar batch (one topic, per-message or constant columns).
When every record has the same layout (same stored body length, same property names and
value lengths) it builds a 2-D ``(n, record_size)`` array from one template row and fills
the varying columns; otherwise it encodes record by record. Both paths produce the same
bytes as :func:`store.codec.encode_record` (tested byte for byte).
"""

from __future__ import annotations

import os
import secrets
import threading
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from store.codec import (
    BODY_CRC_POS,
    BODY_POS,
    BORN_TIMESTAMP_POS,
    FLAG_POS,
    PHYSICAL_OFFSET_POS,
    PREPARED_TX_OFFSET_POS,
    QUEUE_ID_POS,
    QUEUE_OFFSET_POS,
    RECONSUME_TIMES_POS,
    STORE_TIMESTAMP_POS,
    SYS_FLAG_POS,
    UNIQ_COUNTER_SPAN,
    UNIQ_KEY_HEX_LEN,
    UNIQ_KEY_PREFIX,
    BodyPolicy,
    RecordFields,
    encode_properties,
    encode_record,
    ip4_bytes,
    month_start_ms,
    prepare_body,
)

U8 = npt.NDArray[np.uint8]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
#: A column: one value for every message, or one value per message.
IntColumn = int | Sequence[int] | npt.NDArray[np.integer]
StrColumn = str | Sequence[str | None] | None


def patch_be(buffer: U8, positions: I64, values: npt.ArrayLike, width: int) -> None:
    """Write ``values`` as big-endian signed ``width``-byte ints at ``buffer[positions]``."""
    n = len(positions)
    if n == 0:
        return
    encoded = np.ascontiguousarray(np.broadcast_to(np.asarray(values, dtype=f">i{width}"), (n,)))
    index = positions.astype(np.int64)[:, None] + np.arange(width, dtype=np.int64)
    buffer[index] = encoded.view(np.uint8).reshape(n, width)


@dataclass(slots=True)
class EncodedBatch:
    """Consecutive records in one buffer: record i is ``buffer[starts[i]:starts[i]+sizes[i]]``.

    ``record_size`` is set when every record has the same size (fast patching by reshaping).
    """

    buffer: U8
    starts: I64
    sizes: I32
    record_size: int | None = None
    #: UNIQ_KEY of each record when the encoder generated or received them.
    uniq_keys: Sequence[str] = field(default_factory=tuple)

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def nbytes(self) -> int:
        return len(self.buffer)

    def record(self, i: int) -> bytes:
        start = int(self.starts[i])
        return self.buffer[start : start + int(self.sizes[i])].tobytes()

    def _patch(self, field_pos: int, values: npt.ArrayLike, width: int) -> None:
        n = len(self)
        if self.record_size is not None and n:
            rows = self.buffer[: n * self.record_size].reshape(n, self.record_size)
            encoded = np.asarray(values, dtype=f">i{width}")
            if encoded.ndim == 0:  # one value for every record: broadcast its bytes
                rows[:, field_pos : field_pos + width] = encoded.reshape(1).view(np.uint8)
            else:
                rows[:, field_pos : field_pos + width] = encoded.view(np.uint8).reshape(n, width)
        else:
            patch_be(self.buffer, self.starts + field_pos, values, width)

    def patch_queue_offsets(self, queue_offsets: npt.ArrayLike) -> None:
        self._patch(QUEUE_OFFSET_POS, queue_offsets, 8)

    def patch_physical_offsets(self, commitlog_offsets: npt.ArrayLike) -> None:
        self._patch(PHYSICAL_OFFSET_POS, commitlog_offsets, 8)

    def patch_store_timestamps(self, store_timestamps_ms: npt.ArrayLike) -> None:
        self._patch(STORE_TIMESTAMP_POS, store_timestamps_ms, 8)

    @staticmethod
    def from_records(records: Sequence[bytes], uniq_keys: Sequence[str] = ()) -> EncodedBatch:
        """Concatenate already-encoded records."""
        sizes = np.fromiter((len(r) for r in records), dtype=np.int32, count=len(records))
        starts = np.zeros(len(records), dtype=np.int64)
        if len(records) > 1:
            np.cumsum(sizes[:-1], out=starts[1:])
        buffer = np.frombuffer(bytearray(b"".join(records)), dtype=np.uint8)
        uniform = int(sizes[0]) if len(records) and bool((sizes == sizes[0]).all()) else None
        return EncodedBatch(buffer, starts, sizes, uniform, uniq_keys)


@dataclass(frozen=True, slots=True)
class BatchColumns:
    """A columnar batch for one topic. Int columns are scalars or length-n sequences;
    property columns map a name to a constant or to per-message values (None/"" = absent)."""

    topic: str
    bodies: Sequence[bytes]
    queue_ids: IntColumn = 0
    properties: Mapping[str, StrColumn] = field(default_factory=dict)
    flags: IntColumn = 0
    sys_flags: IntColumn = 0
    born_timestamps_ms: IntColumn = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    store_host: tuple[str, int] = ("127.0.0.1", 0)
    store_timestamp_ms: int = 0
    reconsume_times: IntColumn = 0
    prepared_transaction_offsets: IntColumn = 0
    queue_offsets: IntColumn = 0


def _at(column: IntColumn, i: int) -> int:
    return int(column) if isinstance(column, int | np.integer) else int(column[i])


def _prop_at(column: StrColumn, i: int) -> str | None:
    return column if column is None or isinstance(column, str) else column[i]


def record_fields(cols: BatchColumns, i: int, body: bytes, extra_sys_flag: int) -> RecordFields:
    """The :class:`RecordFields` of message ``i`` (body already prepared)."""
    props = {name: v for name, col in cols.properties.items() if (v := _prop_at(col, i))}
    return RecordFields(
        topic=cols.topic,
        body=body,
        queue_id=_at(cols.queue_ids, i),
        flag=_at(cols.flags, i),
        properties=props,
        sys_flag=_at(cols.sys_flags, i) | extra_sys_flag,
        born_timestamp_ms=_at(cols.born_timestamps_ms, i),
        born_host=cols.born_host,
        store_timestamp_ms=cols.store_timestamp_ms,
        store_host=cols.store_host,
        reconsume_times=_at(cols.reconsume_times, i),
        prepared_transaction_offset=_at(cols.prepared_transaction_offsets, i),
        queue_offset=_at(cols.queue_offsets, i),
    )


def encode_columns(cols: BatchColumns, policy: BodyPolicy) -> EncodedBatch:
    """Encode a columnar batch; raises MessageTooLarge / InvalidArgument before any output."""
    n = len(cols.bodies)
    if n == 0:
        return EncodedBatch(np.zeros(0, np.uint8), np.zeros(0, np.int64), np.zeros(0, np.int32), None)
    big = policy.compress_over_bytes
    if max(map(len, cols.bodies)) <= min(big, policy.max_body_bytes):
        stored, extra = cols.bodies, None  # nothing to compress or refuse: skip per-body work
    else:
        prepared = [prepare_body(body, policy) for body in cols.bodies]
        stored = [body for body, _ in prepared]
        extra = [bits for _, bits in prepared]
    fast = _encode_uniform(cols, stored) if extra is None else None
    if fast is not None:
        return fast
    return EncodedBatch.from_records(
        [encode_record(record_fields(cols, i, stored[i], extra[i] if extra else 0)) for i in range(n)]
    )


def _uniform_value_bytes(column: Sequence[str | None], n: int) -> bytes | None:
    """Joined UTF-8 values when all n are present, ASCII and of one length; else None."""
    if len(column) != n or any(v is None for v in column):
        return None
    values: Sequence[str] = column  # type: ignore[assignment]
    width = len(values[0])
    joined = "".join(values)
    if width == 0 or len(joined) != n * width or not joined.isascii() or set(map(len, values)) != {width}:
        return None
    if "\x01" in joined or "\x02" in joined:
        return None  # the per-record path raises the proper InvalidArgument
    return joined.encode("ascii")


def _encode_uniform(cols: BatchColumns, bodies: Sequence[bytes]) -> EncodedBatch | None:
    """The 2-D template path, or None when the records do not share one layout."""
    n = len(bodies)
    body_len = len(bodies[0])
    joined_bodies = b"".join(bodies)
    if len(joined_bodies) != n * body_len:
        return None
    value_columns: dict[str, bytes] = {}
    for name, column in cols.properties.items():
        if column is None or isinstance(column, str):
            continue
        joined = _uniform_value_bytes(column, n)
        if joined is None:
            return None
        value_columns[name] = joined
    first = record_fields(cols, 0, bodies[0], 0)
    template = encode_record(first)
    size = len(template)
    rows = np.empty((n, size), dtype=np.uint8)
    rows[:] = np.frombuffer(template, dtype=np.uint8)
    rows[:, BODY_POS : BODY_POS + body_len] = np.frombuffer(joined_bodies, np.uint8).reshape(n, body_len)
    crcs = np.fromiter(map(zlib.crc32, bodies), dtype=np.uint32, count=n) & np.uint32(0x7FFFFFFF)
    rows[:, BODY_CRC_POS : BODY_CRC_POS + 4] = crcs.astype(">u4").view(np.uint8).reshape(n, 4)
    for pos, int_column, width in (
        (QUEUE_ID_POS, cols.queue_ids, 4),
        (FLAG_POS, cols.flags, 4),
        (SYS_FLAG_POS, cols.sys_flags, 4),
        (BORN_TIMESTAMP_POS, cols.born_timestamps_ms, 8),
        (RECONSUME_TIMES_POS, cols.reconsume_times, 4),
        (PREPARED_TX_OFFSET_POS, cols.prepared_transaction_offsets, 8),
        (QUEUE_OFFSET_POS, cols.queue_offsets, 8),
    ):
        if not isinstance(int_column, int | np.integer):
            values = np.asarray(int_column, dtype=f">i{width}")
            rows[:, pos : pos + width] = values.view(np.uint8).reshape(n, width)
    cursor = size - len(encode_properties(first.properties))
    for name, column in cols.properties.items():
        value = _prop_at(column, 0)
        if not value:
            continue
        cursor += len(name.encode("utf-8")) + 1
        width = len(value.encode("utf-8"))
        if name in value_columns:
            rows[:, cursor : cursor + width] = np.frombuffer(value_columns[name], np.uint8).reshape(n, width)
        cursor += width + 1
    uniq = cols.properties.get("UNIQ_KEY")
    starts = np.arange(n, dtype=np.int64) * size
    sizes = np.full(n, size, dtype=np.int32)
    keys: Sequence[str] = uniq if isinstance(uniq, Sequence) and not isinstance(uniq, str) else ()  # type: ignore[assignment]
    return EncodedBatch(rows.reshape(-1), starts, sizes, size, keys)


# --- UNIQ_KEY generation -------------------------------------------------------------------

_HEX_DIGITS = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)


class UniqKeyGenerator:
    """RocketMQ ``MessageClientIDSetter``: 32 hex chars, unique per generator.

    The (ms since month start, counter) suffix is strictly increasing: when more than 65536
    keys are needed within one millisecond the time part runs ahead of the clock instead of
    wrapping the counter. ``clock_ms`` is injectable; the month is the UTC calendar month.
    """

    def __init__(
        self,
        ip: str = "127.0.0.1",
        pid: int | None = None,
        loader_hash: int | None = None,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self._prefix = UNIQ_KEY_PREFIX.pack(
            ip4_bytes(ip),
            (os.getpid() if pid is None else pid) & 0xFFFF,
            (secrets.randbits(32) if loader_hash is None else loader_hash) & 0xFFFFFFFF,
        )
        self._clock = clock_ms if clock_ms is not None else lambda: time.time_ns() // 1_000_000
        self._lock = threading.Lock()
        self._last_ms = -1
        self._counter = UNIQ_COUNTER_SPAN - 1
        self._month = (0, -1)  # (start, next start) of the cached month

    def _reserve(self, n: int) -> tuple[int, int]:
        """(first ms, first counter) of n consecutive keys; advances the state past them."""
        with self._lock:
            now = self._clock()
            if now > self._last_ms:
                start_ms, start_counter = now, 0
            else:
                linear = self._counter + 1
                start_ms = self._last_ms + linear // UNIQ_COUNTER_SPAN
                start_counter = linear % UNIQ_COUNTER_SPAN
            last = start_counter + n - 1
            self._last_ms = start_ms + last // UNIQ_COUNTER_SPAN
            self._counter = last % UNIQ_COUNTER_SPAN
            return start_ms, start_counter

    def _month_start(self, epoch_ms: int) -> int:
        start, next_start = self._month
        if not start <= epoch_ms < next_start:
            start = month_start_ms(epoch_ms)
            self._month = (start, month_start_ms(start + 32 * 86_400_000))
        return start

    def next_batch_ascii(self, n: int) -> U8:
        """n keys as an (n, 32) array of ASCII hex digits."""
        start_ms, start_counter = self._reserve(n)
        linear = start_counter + np.arange(n, dtype=np.int64)
        diff = (start_ms - self._month_start(start_ms) + (linear >> 16)) & 0xFFFFFFFF
        raw = np.empty((n, 16), dtype=np.uint8)
        raw[:, :10] = np.frombuffer(self._prefix, dtype=np.uint8)
        raw[:, 10:14] = diff.astype(">u4").view(np.uint8).reshape(n, 4)
        raw[:, 14:16] = (linear & 0xFFFF).astype(">u2").view(np.uint8).reshape(n, 2)
        out = np.empty((n, UNIQ_KEY_HEX_LEN), dtype=np.uint8)
        out[:, 0::2] = _HEX_DIGITS[raw >> 4]
        out[:, 1::2] = _HEX_DIGITS[raw & 0x0F]
        return out

    def next_batch(self, n: int) -> list[str]:
        """n keys, in generation order."""
        text = self.next_batch_ascii(n).tobytes().decode("ascii")
        return [text[i : i + UNIQ_KEY_HEX_LEN] for i in range(0, len(text), UNIQ_KEY_HEX_LEN)]

    def next(self) -> str:
        return self.next_batch(1)[0]
