"""Many records at once: one contiguous buffer, NumPy field patching, columnar encoding.

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

import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from store.errors import InvalidArgument, MessageTooLarge
from store.format.arrow_ranges import ArrowStrings
from store.format.ids import ip4_bytes
from store.format.record import (
    BODY_CRC_POS,
    BODY_POS,
    BORN_TIMESTAMP_POS,
    CRC_MASK,
    FLAG_POS,
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
    BodyPolicy,
    RecordFields,
    encode_properties,
    encode_record,
    prepare_body,
    record_size,
    topic_length_prefix,
)
from store.format.vocabulary import PROPERTY_UNIQ_KEY

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
                crc32(body) & CRC_MASK,
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
    if len(column) != n:
        return None
    if isinstance(column, ArrowStrings):
        fixed = column.fixed_width_ascii()
        return None if fixed is None or b"\x01" in fixed[0] or b"\x02" in fixed[0] else fixed[0]
    if None in column:
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
    # Every body of one length: a total of n * body_len alone is not enough (7, 8, 8, 5 sums to
    # 4 * 7), and the template would cut the bodies at the wrong places under the right CRCs.
    if any(len(body) != body_len for body in bodies):
        return None
    joined_bodies = b"".join(bodies)
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
    crcs = np.fromiter(map(zlib.crc32, bodies), dtype=np.uint32, count=n) & np.uint32(CRC_MASK)
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
