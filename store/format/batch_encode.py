"""Many records at once: one contiguous buffer, NumPy field patching, UNIQ_KEY generation.

An :class:`EncodedBatch` holds consecutive records (layout in :mod:`store.format.record`) in one
``uint8`` array plus each record's relative start and size, so the CommitLog appends a batch
with one copy per file touched. Fields only known under the store's lock (QUEUEOFFSET,
PHYSICALOFFSET, STORETIMESTAMP) are patched afterwards as vectorised big-endian scatters.

:func:`encode_columns` takes a columnar batch (one topic, per-message or constant columns).
When every record has the same layout (same stored body length, same property names and
value lengths) it builds a 2-D ``(n, record_size)`` array from one template row and fills
the varying columns; otherwise it encodes record by record. Both paths produce the same
bytes as :func:`store.format.record.encode_record` (tested byte for byte).
"""

from __future__ import annotations

import os
import secrets
import struct
import threading
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from store.errors import InvalidArgument, MessageTooLarge
from store.format.record import (
    BLANK_RECORD,
    BODY_CRC_POS,
    BODY_LEN_POS,
    BODY_POS,
    BORN_TIMESTAMP_POS,
    FIXED_OVERHEAD_V1,
    FIXED_OVERHEAD_V2,
    FLAG_POS,
    MAGIC_POS,
    MAGIC_V1,
    MAGIC_V2,
    MAX_PROPERTIES_BYTES,
    PHYSICAL_OFFSET_POS,
    PREPARED_TX_OFFSET_POS,
    PROPS_LEN,
    QUEUE_ID_POS,
    QUEUE_OFFSET_POS,
    RECONSUME_TIMES_POS,
    RECORD_HEADER,
    STORE_TIMESTAMP_POS,
    SYS_FLAG_POS,
    UNIQ_COUNTER_SPAN,
    UNIQ_KEY_HEX_LEN,
    UNIQ_KEY_PREFIX,
    BodyPolicy,
    RecordFields,
    encode_properties,
    encode_record,
    encode_uniq_key,
    ip4_bytes,
    month_start_ms,
    prepare_body,
    record_size,
    topic_length_prefix,
)
from store.format.vocabulary import PROPERTY_UNIQ_KEY
from store.io.clock import wall_clock_ms

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
    def from_parts(parts: Sequence[bytes], n: int) -> EncodedBatch:
        """From 5 parts per record (header, body, topic, properties length, properties)."""
        sizes = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts)).reshape(n, 5).sum(axis=1)
        return EncodedBatch._from_joined(b"".join(parts), sizes.astype(np.int32))

    @staticmethod
    def _from_joined(joined: bytes, sizes: I32) -> EncodedBatch:
        n = len(sizes)
        starts = np.zeros(n, dtype=np.int64)
        if n > 1:
            np.cumsum(sizes[:-1], out=starts[1:])
        uniform = int(sizes[0]) if n and bool((sizes == sizes[0]).all()) else None
        return EncodedBatch(np.frombuffer(bytearray(joined), dtype=np.uint8), starts, sizes, uniform)

    @staticmethod
    def from_records(records: Sequence[bytes], uniq_keys: Sequence[str] = ()) -> EncodedBatch:
        """Concatenate already-encoded records."""
        sizes = np.fromiter(map(len, records), dtype=np.int32, count=len(records))
        batch = EncodedBatch._from_joined(b"".join(records), sizes)
        batch.uniq_keys = uniq_keys
        return batch

    @staticmethod
    def concat(parts: Sequence[EncodedBatch]) -> EncodedBatch:
        """The records of ``parts``, in order, in one buffer (UNIQ_KEYs kept)."""
        if len(parts) == 1:
            return parts[0]
        used = [part.buffer[: int(part.starts[-1]) + int(part.sizes[-1])] for part in parts if len(part)]
        bases = np.cumsum([0, *(len(u) for u in used)])[:-1]
        kept = [part for part in parts if len(part)]
        starts = np.concatenate([part.starts + base for part, base in zip(kept, bases.tolist(), strict=True)])
        sizes = np.concatenate([part.sizes for part in kept]).astype(np.int32)
        buffer = np.concatenate(used) if used else np.zeros(0, np.uint8)
        uniform = int(sizes[0]) if len(sizes) and bool((sizes == sizes[0]).all()) else None
        if uniform is not None and not bool((starts == np.arange(len(starts)) * uniform).all()):
            uniform = None
        keys = [key for part in kept for key in part.uniq_keys]
        return EncodedBatch(buffer, starts, sizes, uniform, keys)


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
    try:
        fast = _encode_uniform(cols, stored) if extra is None else None
        batch = fast if fast is not None else _encode_general(cols, stored, extra)
    except (OverflowError, struct.error) as exc:
        raise InvalidArgument(f"a record field is out of range for its Java type: {exc}") from exc
    uniq = cols.properties.get(PROPERTY_UNIQ_KEY)
    if uniq is not None and not isinstance(uniq, str) and None not in uniq:
        batch.uniq_keys = uniq  # type: ignore[assignment]
    return batch


def _int_list(column: IntColumn, n: int) -> Sequence[int]:
    if isinstance(column, int | np.integer):
        return [int(column)] * n
    return np.asarray(column, dtype=np.int64).tolist() if isinstance(column, np.ndarray) else column


def _property_strings(cols: BatchColumns, n: int) -> list[str]:
    """Each message's properties string, built column by column (validated like
    :func:`store.format.record.encode_properties`)."""
    segments: list[Sequence[str]] = []
    for name, column in cols.properties.items():
        if column is None or isinstance(column, str):
            if column:
                encode_properties({name: column})  # validates name and value
                segments.append([f"{name}\x01{column}\x02"] * n)
            continue
        encode_properties({name: "-"})  # validates the name
        values = "".join(v for v in column if v)
        if "\x01" in values or "\x02" in values:
            raise InvalidArgument(f"a value of property {name!r} contains \\x01 or \\x02")
        head = f"{name}\x01"
        segments.append([f"{head}{v}\x02" if v else "" for v in column])
    if not segments:
        return [""] * n
    return ["".join(parts) for parts in zip(*segments, strict=True)]


def _encode_general(cols: BatchColumns, bodies: Sequence[bytes], extra: Sequence[int] | None) -> EncodedBatch:
    """Record by record, with everything constant hoisted out of the loop."""
    n = len(bodies)
    topic_bytes = cols.topic.encode("utf-8")
    magic, topic_prefix = topic_length_prefix(topic_bytes)
    topic_part = topic_prefix.pack(len(topic_bytes)) + topic_bytes
    overhead = record_size(0, len(topic_bytes), 0)
    born_ip, born_port = ip4_bytes(cols.born_host[0]), cols.born_host[1]
    store_ip, store_port = ip4_bytes(cols.store_host[0]), cols.store_host[1]
    sys_flags = _int_list(cols.sys_flags, n)
    if extra is not None:
        sys_flags = [flags | bits for flags, bits in zip(sys_flags, extra, strict=True)]
    columns = zip(
        bodies,
        _property_strings(cols, n),
        _int_list(cols.queue_ids, n),
        _int_list(cols.flags, n),
        _int_list(cols.queue_offsets, n),
        sys_flags,
        _int_list(cols.born_timestamps_ms, n),
        _int_list(cols.reconsume_times, n),
        _int_list(cols.prepared_transaction_offsets, n),
        strict=True,
    )
    pack, crc32, pack_props_len = RECORD_HEADER.pack, zlib.crc32, PROPS_LEN.pack
    store_ts = cols.store_timestamp_ms
    parts: list[bytes] = []
    append = parts.append
    for body, prop_text, queue_id, flag, queue_offset, sys_flag, born_ts, reconsume, prepared in columns:
        props = prop_text.encode("utf-8")
        if len(props) > MAX_PROPERTIES_BYTES:
            raise MessageTooLarge(f"properties are {len(props)} bytes, at most {MAX_PROPERTIES_BYTES}")
        body_len = len(body)
        append(
            pack(
                overhead + body_len + len(props),
                magic,
                crc32(body) & 0x7FFFFFFF,
                queue_id,
                flag,
                queue_offset,
                0,
                sys_flag,
                born_ts,
                born_ip,
                born_port,
                store_ts,
                store_ip,
                store_port,
                reconsume,
                prepared,
                body_len,
            )
        )
        append(body)
        append(topic_part)
        append(pack_props_len(len(props)))
        append(props)
    return EncodedBatch.from_parts(parts, n)


def _uniform_value_bytes(column: Sequence[str | None], n: int) -> bytes | None:
    """Joined UTF-8 values when all n are present, ASCII and of one length; else None."""
    if len(column) != n or None in column:
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
    starts = np.arange(n, dtype=np.int64) * size
    sizes = np.full(n, size, dtype=np.int32)
    return EncodedBatch(rows.reshape(-1), starts, sizes, size)


# --- UNIQ_KEY generation -------------------------------------------------------------------

_HEX_DIGITS = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)


#: Up to this many keys are generated without NumPy.
_SCALAR_KEYS = 8


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
        self._clock = clock_ms if clock_ms is not None else wall_clock_ms
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
        if n <= _SCALAR_KEYS:  # NumPy's per-call overhead dominates tiny batches
            start_ms, start_counter = self._reserve(n)
            prefix = self._prefix.hex().upper()
            base = start_ms - self._month_start(start_ms)
            return [
                encode_uniq_key(prefix, base + (linear >> 16), linear)
                for linear in range(start_counter, start_counter + n)
            ]
        text = self.next_batch_ascii(n).tobytes().decode("ascii")
        return [text[i : i + UNIQ_KEY_HEX_LEN] for i in range(0, len(text), UNIQ_KEY_HEX_LEN)]

    def next(self) -> str:
        return self.next_batch(1)[0]


# --- Validating runs of records (recovery and dispatch scans) ------------------------------


@dataclass(frozen=True, slots=True)
class RecordRun:
    """The consecutive records at the start of a buffer that pass every check of
    :func:`store.format.record.check_record`; ``end`` is where the first record not in the run
    starts (classify it with ``check_record``). Topics are dictionary-encoded."""

    starts: I64
    sizes: I64
    end: int
    queue_ids: I32
    queue_offsets: I64
    store_timestamps_ms: I64
    sys_flags: I32
    topic_codes: I32
    topic_names: list[str]
    properties_starts: I64
    properties_lengths: I64

    def __len__(self) -> int:
        return len(self.starts)


def _gather(arr: U8, positions: I64, dtype: str) -> npt.NDArray[np.int64]:
    """Big-endian values of ``dtype`` (e.g. ``>i8``) at ``positions``; clipped to the buffer."""
    width = np.dtype(dtype).itemsize
    index = np.minimum(positions[:, None] + np.arange(width, dtype=np.int64), len(arr) - 1)
    return np.ascontiguousarray(arr[np.maximum(index, 0)]).view(dtype).ravel().astype(np.int64)


def _chain(buf: bytes, arr: U8) -> tuple[I64, I64, int]:
    """Follow TOTALSIZE from position 0 while the magic is a record's and the record fits.

    After two records of the same size it checks the whole stride ahead at once (batches
    of one layout are common), falling back to one record at a time where it breaks.
    """
    starts: list[int] = []
    sizes: list[int] = []
    strides: list[tuple[I64, I64]] = []
    unpack, limit, pos, previous = BLANK_RECORD.unpack_from, len(buf), 0, -1
    while pos + BLANK_RECORD.size <= limit:
        size, magic = unpack(buf, pos)
        if magic not in (MAGIC_V1, MAGIC_V2) or size < FIXED_OVERHEAD_V1 or size > limit - pos:
            break
        if size == previous:
            candidates = pos + size * np.arange((limit - pos) // size, dtype=np.int64)
            same = _gather(arr, candidates, ">i4") == size
            same &= np.isin(_gather(arr, candidates + MAGIC_POS, ">u4"), (MAGIC_V1, MAGIC_V2))
            count = len(same) if same.all() else int(np.argmin(same))
            strides.append((np.asarray(starts, dtype=np.int64), np.asarray(sizes, dtype=np.int64)))
            strides.append((candidates[:count], np.full(count, size, dtype=np.int64)))
            starts, sizes, previous = [], [], -1
            pos += count * size
            continue
        starts.append(pos)
        sizes.append(size)
        previous = size
        pos += size
    strides.append((np.asarray(starts, dtype=np.int64), np.asarray(sizes, dtype=np.int64)))
    return np.concatenate([a for a, _ in strides]), np.concatenate([b for _, b in strides]), pos


def _topics(arr: U8, topic_starts: I64, topic_lens: I64) -> tuple[I32, list[str], int]:
    """(code per record, names, number of leading records whose topic is valid UTF-8)."""
    codes = np.zeros(len(topic_starts), dtype=np.int32)
    names: list[str] = []
    valid = len(topic_starts)
    for length in np.unique(topic_lens).tolist():
        rows = np.flatnonzero(topic_lens == length)
        if length == 0:
            codes[rows] = len(names)
            names.append("")
            continue
        matrix = np.ascontiguousarray(arr[topic_starts[rows, None] + np.arange(length, dtype=np.int64)])
        distinct, inverse = np.unique(matrix.view(f"V{length}").ravel(), return_inverse=True)
        codes[rows] = inverse.ravel() + len(names)
        for i, raw in enumerate(distinct.tolist()):
            try:
                names.append(bytes(raw).decode("utf-8"))
            except UnicodeDecodeError:
                names.append("")
                valid = min(valid, int(rows[np.argmax(inverse.ravel() == i)]))
    return codes, names, valid


def validate_run(buf: bytes, check_crc: bool) -> RecordRun:
    """Vectorised :func:`store.format.record.check_record` over the records at the start of ``buf``."""
    arr = np.frombuffer(buf, dtype=np.uint8)
    starts, sizes, end = _chain(buf, arr)
    ends = starts + sizes
    body_lens = _gather(arr, starts + BODY_LEN_POS, ">i4")
    v2 = _gather(arr, starts + MAGIC_POS, ">u4") == MAGIC_V2
    topic_len_pos = starts + BODY_POS + body_lens
    overheads = np.where(v2, FIXED_OVERHEAD_V2, FIXED_OVERHEAD_V1)
    ok = (body_lens >= 0) & (topic_len_pos + overheads - BODY_POS <= ends)
    topic_lens = np.where(v2, _gather(arr, topic_len_pos, ">u2"), _gather(arr, topic_len_pos, ">u1"))
    topic_starts = topic_len_pos + np.where(v2, 2, 1)
    props_len_pos = topic_starts + topic_lens
    ok &= props_len_pos + PROPS_LEN.size <= ends
    props_lens = _gather(arr, props_len_pos, ">u2")
    ok &= props_len_pos + PROPS_LEN.size + props_lens == ends
    if check_crc and len(starts):
        view = memoryview(buf)
        spans = zip((starts + BODY_POS).tolist(), np.maximum(body_lens, 0).tolist(), strict=True)
        bodies = (view[s : s + n] for s, n in spans)
        crcs = np.fromiter(map(zlib.crc32, bodies), dtype=np.int64, count=len(starts)) & 0x7FFFFFFF
        ok &= crcs == _gather(arr, starts + BODY_CRC_POS, ">u4")
    count = int(np.argmin(ok)) if len(ok) and not ok.all() else len(ok)
    topic_codes, topic_names, count = _topics(arr, topic_starts[:count], topic_lens[:count])
    if count < len(starts):
        end = int(starts[count])
    cut = slice(0, count)
    return RecordRun(
        starts[cut],
        sizes[cut],
        end,
        _gather(arr, starts[cut] + QUEUE_ID_POS, ">i4").astype(np.int32),
        _gather(arr, starts[cut] + QUEUE_OFFSET_POS, ">i8"),
        _gather(arr, starts[cut] + STORE_TIMESTAMP_POS, ">i8"),
        _gather(arr, starts[cut] + SYS_FLAG_POS, ">i4").astype(np.int32),
        topic_codes[cut],
        topic_names,
        props_len_pos[cut] + PROPS_LEN.size,
        props_lens[cut],
    )
