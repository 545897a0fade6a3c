"""CommitLog records -> one ``pyarrow.RecordBatch``, with no Python object per message.

The hot path of every read (Spark, HTTP Arrow pull, Kafka fetch). The record layout is the
one in :mod:`store.codec`; every position used here is imported from there. Input is ONE
contiguous CommitLog slice (``uint8``; an mmap view is fine) plus each record's start in it::

    starts ─► one BODY_POS-byte header gather per record ─► int/timestamp columns, msg_id hex
      │
      └─► body / topic / properties ranges ─► Arrow ``take`` over an "interleaved" binary
          array laid on the slice (elements: field, gap, field, gap, ...): a C++ gather into
          one contiguous buffer per column

    properties blob ─► positions of \\x01 and \\x02 (two NumPy scans) ─► name/value ranges
          ─► TAGS / KEYS / UNIQ_KEY scattered to their rows, every other pair into the map

Records flagged COMPRESSED are the only per-row Python work (their bodies are inflated one by
one). Properties not in the canonical ``name\\x01value\\x02`` form that
:func:`store.codec.encode_properties` writes (foreign or damaged bytes) send the batch through
:func:`store.codec.decode_properties` row by row, so the result always equals what
:func:`store.codec.decode_record` gives. A name other than TAGS/KEYS/UNIQ_KEY is assumed to
appear once per record (the encoder writes a mapping); those three are checked.
"""

from __future__ import annotations

import zlib
from mmap import mmap
from typing import Final, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from store.arrow_schema import COLUMN_PROPERTIES, MESSAGE_SCHEMA, TIMESTAMP
from store.codec import (
    BODY_LEN_POS,
    BODY_POS,
    BORN_TIMESTAMP_POS,
    FIXED_OVERHEAD_V1,
    MAGIC_POS,
    MAGIC_V1,
    MAGIC_V2,
    MSG_ID,
    NAME_VALUE_SEPARATOR,
    PHYSICAL_OFFSET_POS,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    PROPS_LEN,
    QUEUE_ID_POS,
    QUEUE_OFFSET_POS,
    RECONSUME_TIMES_POS,
    STORE_HOST_POS,
    STORE_TIMESTAMP_POS,
    SYS_FLAG_POS,
    SYSFLAG_COMPRESSED,
    TOPIC_LEN_V1,
    TOPIC_LEN_V2,
    TOTAL_SIZE_POS,
    decode_properties,
    ip4_bytes,
    restore_body,
)
from store.errors import CorruptStore, InvalidArgument

U8 = npt.NDArray[np.uint8]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]
#: One contiguous CommitLog slice.
SliceBytes = npt.NDArray[np.uint8] | memoryview | bytes | bytearray | mmap

#: Widths derived from the codec's positions (a field ends where the next one starts).
_STORE_HOST_WIDTH: Final = RECONSUME_TIMES_POS - STORE_HOST_POS  # IPv4 4 + port 4
_PHYSICAL_OFFSET_WIDTH: Final = SYS_FLAG_POS - PHYSICAL_OFFSET_POS
assert MSG_ID.size == _STORE_HOST_WIDTH + _PHYSICAL_OFFSET_WIDTH, "offsetMsgId = store host + offset"
_SEP_NAME: Final = ord(NAME_VALUE_SEPARATOR)
_SEP_PAIR: Final = ord(PROPERTY_SEPARATOR)
_KEY_SEPARATOR: Final = ord(" ")
_NO_BYTES: Final[U8] = np.zeros(0, dtype=np.uint8)
#: Two upper-case hex digits per byte value, as one little-endian uint16 (first digit first).
_HEX_PAIRS: Final = np.array(
    [ord(f"{b:02X}"[0]) | (ord(f"{b:02X}"[1]) << 8) for b in range(256)], dtype=np.uint16
)
_KEYS_TYPE: Final = MESSAGE_SCHEMA.field("keys").type
_PROPERTIES_TYPE: Final = MESSAGE_SCHEMA.field("properties").type


def decode_records_to_arrow(
    buf: SliceBytes,
    starts: npt.ArrayLike,
    *,
    store_host: tuple[str, int] | None = None,
) -> pa.RecordBatch:
    """Decode the records starting at ``buf[starts[i]]`` into one batch in ``MESSAGE_SCHEMA``.

    ``buf`` is one contiguous CommitLog slice (NumPy ``uint8``, memoryview, bytes, mmap);
    ``starts`` are record positions *within it* (int64; any order, repeats allowed; rows come
    out in ``starts`` order). ``msg_id`` is the offsetMsgId built from each record's STOREHOST
    and PHYSICALOFFSET, like :func:`store.codec.decode_record`; pass ``store_host`` to build
    it from that (ip, port) instead. Bodies are decompressed.

    Raises :class:`CorruptStore` naming the first bad position when a start does not point at
    a complete V1/V2 record (bad magic, impossible or overlapping sizes, lengths that do not
    add up, non-UTF-8 topic) and :class:`InvalidArgument` for an unusable ``buf``/``starts``.
    Column buffers are limited by Arrow's int32 offsets: keep one batch's bodies < 2 GiB.
    """
    data = _as_bytes(buf)
    positions = np.asarray(starts, dtype=np.int64).reshape(-1)
    if positions.ndim != 1 or (len(positions) and positions.dtype.kind != "i"):
        raise InvalidArgument("starts must be a 1-D array of integer positions")
    if len(positions) == 0:
        return pa.RecordBatch.from_pylist([], schema=MESSAGE_SCHEMA)
    if len(positions) > 1 and not bool(np.all(positions[1:] > positions[:-1])):
        unique, inverse = np.unique(positions, return_inverse=True)
        return _decode_ascending(data, unique, store_host).take(pa.array(inverse.reshape(-1)))
    return _decode_ascending(data, positions, store_host)


def decode_store_timestamps(buf: SliceBytes, starts: npt.ArrayLike) -> I64:
    """STORETIMESTAMP (ms) of the records at ``starts``: one gather, no other parsing."""
    return decode_int_field(buf, starts, STORE_TIMESTAMP_POS, ">i8").astype(np.int64)


def decode_int_field(
    buf: SliceBytes, starts: npt.ArrayLike, position: int, dtype: str
) -> npt.NDArray[np.integer]:
    """The big-endian integer of type ``dtype`` (e.g. ``">i4"``) at ``starts + position``.

    ``position`` is one of the ``*_POS`` constants of :mod:`store.codec`; the result is in
    native byte order. Raises InvalidArgument if a field lies outside ``buf``.
    """
    data = _as_bytes(buf)
    at = np.asarray(starts, dtype=np.int64).reshape(-1) + position
    width = np.dtype(dtype).itemsize
    if len(at) and (int(at.min()) < 0 or int(at.max()) + width > len(data)):
        raise InvalidArgument(
            f"a field at +{position} ({width} bytes) lies outside the {len(data)}-byte slice"
        )
    return _overlapping(data, dtype)[at].astype(np.dtype(dtype).newbyteorder("="))


# --- the pipeline ----------------------------------------------------------------------------


def _decode_ascending(data: U8, starts: I64, store_host: tuple[str, int] | None) -> pa.RecordBatch:
    """The decoder proper, for strictly ascending ``starts``."""
    headers = _gather_headers(data, starts)
    total = _header_field(headers, TOTAL_SIZE_POS, ">i4").astype(np.int64)
    layout = _RecordLayout(data, starts, headers, total)
    slice_buffer = pa.py_buffer(data)
    sys_flags = _header_field(headers, SYS_FLAG_POS, ">i4")
    topics = _gather_ranges(slice_buffer, layout.topic_begin, layout.topic_len, pa.string())
    _require_utf8(topics, starts, "topic")
    props = _gather_ranges(slice_buffer, layout.props_begin, layout.props_len, pa.string())
    prop_columns = _property_columns(props)
    columns: list[pa.Array] = [
        topics,
        pa.array(_header_field(headers, QUEUE_ID_POS, ">i4")),
        pa.array(_header_field(headers, QUEUE_OFFSET_POS, ">i8")),
        pa.array(_header_field(headers, PHYSICAL_OFFSET_POS, ">i8")),
        _msg_ids(headers, store_host),
        prop_columns.uniq_key,
        prop_columns.tags,
        prop_columns.keys,
        _bodies(data, slice_buffer, layout, sys_flags),
        prop_columns.properties,
        _timestamps(_header_field(headers, BORN_TIMESTAMP_POS, ">i8")),
        _timestamps(_header_field(headers, STORE_TIMESTAMP_POS, ">i8")),
        pa.array(_header_field(headers, RECONSUME_TIMES_POS, ">i4")),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=MESSAGE_SCHEMA)


class _RecordLayout:
    """Where each record's body, topic and properties lie in the slice; validates as it goes."""

    __slots__ = ("body_begin", "body_len", "props_begin", "props_len", "topic_begin", "topic_len")

    def __init__(self, data: U8, starts: I64, headers: U8, total: I64) -> None:
        magic = _header_field(headers, MAGIC_POS, ">u4")
        is_v2 = magic == MAGIC_V2
        _require(starts, (magic == MAGIC_V1) | is_v2, "bad magic code")
        extra_prefix = TOPIC_LEN_V2.size - TOPIC_LEN_V1.size
        overhead = FIXED_OVERHEAD_V1 + extra_prefix * is_v2.astype(np.int64)
        _require(starts, total >= overhead, "impossible total size")
        ends = starts + total
        _require(starts, ends <= len(data), "record runs past the end of the slice")
        _require(starts[:-1], ends[:-1] <= starts[1:], "record overlaps the next start")
        self.body_begin = starts + BODY_POS
        self.body_len = _header_field(headers, BODY_LEN_POS, ">i4").astype(np.int64)
        _require(starts, (self.body_len >= 0) & (self.body_len <= total - overhead), "bad body length")
        topic_len_at = self.body_begin + self.body_len
        self.topic_len = _overlapping(data, TOPIC_LEN_V1.format)[topic_len_at].astype(np.int64)
        if is_v2.any():
            wide = _overlapping(data, TOPIC_LEN_V2.format)[topic_len_at[is_v2]]
            self.topic_len[is_v2] = wide
        self.topic_begin = topic_len_at + TOPIC_LEN_V1.size + extra_prefix * is_v2.astype(np.int64)
        props_len_at = self.topic_begin + self.topic_len
        _require(starts, props_len_at + PROPS_LEN.size <= ends, "topic length exceeds the record")
        self.props_begin = props_len_at + PROPS_LEN.size
        self.props_len = _overlapping(data, PROPS_LEN.format)[props_len_at].astype(np.int64)
        _require(starts, self.props_begin + self.props_len == ends, "lengths do not add up to total size")


def _require(starts: I64, ok: Bools, reason: str) -> None:
    if not bool(np.all(ok)):
        position = int(starts[int(np.argmin(ok))])
        raise CorruptStore(f"no valid record at slice position {position}: {reason}")


def _as_bytes(buf: SliceBytes) -> U8:
    data = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, dtype=np.uint8)
    if data.dtype != np.uint8 or data.ndim != 1 or not data.flags.c_contiguous:
        raise InvalidArgument("buf must be one contiguous 1-D uint8 buffer")
    return data


def _overlapping(data: U8, dtype: str | np.dtype[np.generic]) -> npt.NDArray[np.generic]:
    """A view with one ``dtype`` item starting at *every* byte of ``data`` (stride 1)."""
    item = np.dtype(dtype)
    count = max(len(data) - item.itemsize + 1, 0)
    return np.ndarray((count,), dtype=item, buffer=data, strides=(1,))


def _gather_headers(data: U8, starts: I64) -> U8:
    """The fixed part (``BODY_POS`` bytes) of every record, as an ``(n, BODY_POS)`` array."""
    _require(
        starts, (starts >= 0) & (starts + BODY_POS <= len(data)), "record runs past the end of the slice"
    )
    rows = _overlapping(data, np.dtype((np.void, BODY_POS)))[starts]
    return rows.view(np.uint8).reshape(len(starts), BODY_POS)


def _header_field(headers: U8, position: int, dtype: str) -> npt.NDArray[np.integer]:
    """One big-endian header field of every row, converted to native byte order."""
    item = np.dtype(dtype)
    column = np.ndarray((len(headers),), dtype=item, buffer=headers, offset=position, strides=(BODY_POS,))
    return column.astype(item.newbyteorder("="))


def _gather_ranges(source: pa.Buffer, begins: I64, lengths: I64, value_type: pa.DataType) -> pa.Array:
    """``source[begins[i] : begins[i] + lengths[i]]`` for every i, as one contiguous Arrow array.

    The ranges must be ascending and disjoint. They become the even elements of an array
    laid directly on ``source`` (odd elements are the gaps); Arrow's ``take`` copies them out.
    """
    count = len(begins)
    large = source.size > np.iinfo(np.int32).max
    offsets = np.empty(2 * count + 1, dtype=np.int64 if large else np.int32)
    offsets[0:-1:2] = begins
    offsets[1::2] = begins + lengths
    offsets[-1] = offsets[-2] if count else 0
    base_type = (
        {pa.binary(): pa.large_binary(), pa.string(): pa.large_string()}[value_type] if large else value_type
    )
    interleaved = pa.Array.from_buffers(base_type, 2 * count, [None, pa.py_buffer(offsets), source])
    picked = interleaved.take(pa.array(np.arange(0, 2 * count, 2, dtype=np.int64)))
    return picked.cast(value_type) if large else picked


def _require_utf8(strings: pa.Array, starts: I64, what: str) -> None:
    try:
        strings.validate(full=True)
    except pa.ArrowInvalid:
        for row, value in enumerate(strings.cast(pa.binary()).to_pylist()):
            try:
                value.decode("utf-8")
            except UnicodeDecodeError:
                raise CorruptStore(
                    f"no valid record at slice position {starts[row]}: {what} is not UTF-8"
                ) from None
        raise


def _timestamps(epoch_ms: npt.NDArray[np.integer]) -> pa.Array:
    micros = epoch_ms.astype(np.int64) * 1000
    return pa.Array.from_buffers(TIMESTAMP, len(micros), [None, pa.py_buffer(micros)])


def _msg_ids(headers: U8, store_host: tuple[str, int] | None) -> pa.Array:
    """offsetMsgId strings: upper-case hex of STOREHOST + PHYSICALOFFSET (as the codec's)."""
    count = len(headers)
    width = 2 * MSG_ID.size
    digits = np.empty((count, width), dtype=np.uint8)
    host_digits = 2 * _STORE_HOST_WIDTH
    if store_host is not None:
        host = MSG_ID.pack(ip4_bytes(store_host[0]), store_host[1], 0)[:_STORE_HOST_WIDTH]
        digits[:, :host_digits] = _hex(np.frombuffer(host, dtype=np.uint8)[None, :])
    else:
        hosts = headers[:, STORE_HOST_POS : STORE_HOST_POS + _STORE_HOST_WIDTH]
        if bool(np.all(hosts == hosts[0])):
            digits[:, :host_digits] = _hex(hosts[:1])
        else:
            digits[:, :host_digits] = _hex(hosts)
    offsets = headers[:, PHYSICAL_OFFSET_POS : PHYSICAL_OFFSET_POS + _PHYSICAL_OFFSET_WIDTH]
    digits[:, host_digits:] = _hex(offsets)
    string_offsets = np.arange(0, width * (count + 1), width, dtype=np.int32)
    return pa.Array.from_buffers(
        pa.string(), count, [None, pa.py_buffer(string_offsets), pa.py_buffer(digits)]
    )


def _hex(raw: U8) -> U8:
    """``(rows, k)`` bytes -> ``(rows, 2k)`` upper-case hex digits (ASCII)."""
    return _HEX_PAIRS[raw].view(np.uint8)


def _bodies(
    data: U8, source: pa.Buffer, layout: _RecordLayout, sys_flags: npt.NDArray[np.integer]
) -> pa.Array:
    """Stored bodies, with the COMPRESSED ones inflated (the only per-row loop)."""
    bodies = _gather_ranges(source, layout.body_begin, layout.body_len, pa.binary())
    compressed = np.flatnonzero(sys_flags & SYSFLAG_COMPRESSED)
    if len(compressed) == 0:
        return bodies
    inflated: list[bytes] = []
    for row in compressed.tolist():
        begin = int(layout.body_begin[row])
        stored = data[begin : begin + int(layout.body_len[row])].tobytes()
        try:
            inflated.append(restore_body(stored, int(sys_flags[row])))
        except zlib.error as exc:
            raise CorruptStore(f"body at slice position {begin} does not inflate: {exc}") from exc
    index = np.arange(len(bodies), dtype=np.int64)
    index[compressed] = len(bodies) + np.arange(len(compressed))
    return pa.concat_arrays([bodies, pa.array(inflated, pa.binary())]).take(pa.array(index))


# --- properties ------------------------------------------------------------------------------


class _PropertyColumns(NamedTuple):
    uniq_key: pa.Array
    tags: pa.Array
    keys: pa.Array
    properties: pa.Array


class _Pairs(NamedTuple):
    """The ``name\\x01value\\x02`` pairs of a properties blob, as positions in the blob."""

    name_begin: I64
    name_end: I64  # position of the pair's \x01
    value_end: I64  # position of the pair's \x02
    row_pairs: I64  # pairs of row r are [row_pairs[r], row_pairs[r + 1])


def _property_columns(props: pa.Array) -> _PropertyColumns:
    """uniq_key, tags, keys and properties columns from each record's properties string."""
    blob_buffer = _data_buffer(props)
    row_bytes = np.frombuffer(props.buffers()[1], dtype=np.int32, count=len(props) + 1).astype(np.int64)
    blob = (
        np.frombuffer(blob_buffer, dtype=np.uint8, count=int(row_bytes[-1])) if row_bytes[-1] else _NO_BYTES
    )
    pairs = _canonical_pairs(props, blob, row_bytes)
    if pairs is None:
        return _property_columns_per_row(props)
    name_len = pairs.name_end - pairs.name_begin
    found = _find_names(blob, pairs.name_begin, name_len, COLUMN_PROPERTIES)
    pair_rows = np.repeat(np.arange(len(props), dtype=np.int64), np.diff(pairs.row_pairs))
    rows = {name: pair_rows[idx] for name, idx in found.items()}
    if any(bool(np.any(r[1:] == r[:-1])) for r in rows.values()):
        return _property_columns_per_row(props)  # a column property twice in a record

    def values(idx: I64) -> tuple[I64, I64]:
        return pairs.name_end[idx] + 1, pairs.value_end[idx] - pairs.name_end[idx] - 1

    def scattered(name: str) -> pa.Array:
        return _scatter_strings(blob_buffer, row_bytes, rows[name], *values(found[name]))

    keys_values = _gather_ranges(blob_buffer, *values(found[PROPERTY_KEYS]), pa.string())
    kept = np.ones(len(name_len), dtype=np.bool_)
    for idx in found.values():
        kept[idx] = False
    kept_before = np.concatenate(([0], np.cumsum(kept, dtype=np.int64)))
    kept_idx = np.flatnonzero(kept)
    properties = pa.MapArray.from_arrays(
        pa.array(kept_before[pairs.row_pairs].astype(np.int32)),
        _gather_ranges(blob_buffer, pairs.name_begin[kept_idx], name_len[kept_idx], pa.string()),
        _gather_ranges(blob_buffer, *values(kept_idx), pa.string()),
        type=_PROPERTIES_TYPE,
    )
    keys = _split_keys(keys_values, rows[PROPERTY_KEYS], len(props))
    return _PropertyColumns(scattered(PROPERTY_UNIQ_KEY), scattered(PROPERTY_TAGS), keys, properties)


def _canonical_pairs(props: pa.Array, blob: U8, row_bytes: I64) -> _Pairs | None:
    """The pairs when every row is exactly ``(name\\x01value\\x02)*`` with non-empty names and
    values in valid UTF-8 (what the encoder writes); None otherwise."""
    name_end = np.flatnonzero(blob == _SEP_NAME)
    value_end = np.flatnonzero(blob == _SEP_PAIR)
    if len(name_end) != len(value_end) or not _is_utf8(props):
        return None
    name_begin = np.empty(len(value_end), dtype=np.int64)
    name_begin[:1] = 0
    name_begin[1:] = value_end[:-1] + 1
    if len(value_end) and (
        int(value_end[-1]) != len(blob) - 1
        or not bool(np.all(name_begin < name_end))
        or not bool(np.all(name_end + 1 < value_end))
    ):
        return None
    if len(value_end) == 0 and len(blob):
        return None
    row_pairs = np.zeros(len(row_bytes), dtype=np.int64)
    row_pairs[1:] = np.searchsorted(value_end, row_bytes[1:])
    nonempty = np.flatnonzero(row_bytes[1:] > row_bytes[:-1])
    if not bool(np.all(value_end[row_pairs[nonempty + 1] - 1] == row_bytes[nonempty + 1] - 1)):
        return None  # a row whose bytes do not end with a \x02
    return _Pairs(name_begin, name_end, value_end, row_pairs)


def _data_buffer(strings: pa.Array) -> pa.Buffer:
    """The character buffer of a fresh (offset 0) string/binary array, empty if it has none."""
    data = strings.buffers()[2]
    return pa.py_buffer(b"") if data is None else data


def _is_utf8(strings: pa.Array) -> bool:
    try:
        strings.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _find_names(blob: U8, name_begin: I64, name_len: I64, names: frozenset[str]) -> dict[str, I64]:
    """Indexes of the pairs named each of ``names``: one gather of every name's first bytes,
    then the rest compared on the few candidates left."""
    targets = {name: name.encode("utf-8") for name in names}
    # Every name is followed by at least 3 bytes (\x01, a value, \x02): 4-byte reads are safe.
    head = min(4, *(len(t) for t in targets.values()))
    heads = _overlapping(blob, f"<u{head}")[name_begin]
    found: dict[str, I64] = {}
    for name, target in targets.items():
        word = np.frombuffer(target[:head], dtype=f"<u{head}")[0]
        candidates = np.flatnonzero((heads == word) & (name_len == len(target)))
        for done in range(head, len(target)):
            candidates = candidates[blob[name_begin[candidates] + done] == target[done]]
        found[name] = candidates
    return found


def _scatter_strings(source: pa.Buffer, row_bytes: I64, rows: I64, begins: I64, lengths: I64) -> pa.Array:
    """A string per row: ``source[begins[i]:+lengths[i]]`` at ``rows[i]``, null elsewhere."""
    count = len(row_bytes) - 1
    all_begins = row_bytes[:-1].copy()  # an empty range inside the row keeps ranges ascending
    all_lengths = np.zeros(count, dtype=np.int64)
    all_begins[rows] = begins
    all_lengths[rows] = lengths
    strings = _gather_ranges(source, all_begins, all_lengths, pa.string())
    if len(rows) == count:
        return strings
    present = np.zeros(count, dtype=np.bool_)
    present[rows] = True
    validity = pa.py_buffer(np.packbits(present, bitorder="little"))
    return pa.Array.from_buffers(
        pa.string(), count, [validity, *strings.buffers()[1:]], null_count=count - len(rows)
    )


def _split_keys(keys_values: pa.Array, rows: I64, count: int) -> pa.Array:
    """The ``keys`` list column: each KEYS value split on spaces, empty lists elsewhere."""
    if len(keys_values) == 0:
        return pa.ListArray.from_arrays(
            pa.array(np.zeros(count + 1, dtype=np.int32)), keys_values, type=_KEYS_TYPE
        )
    value_bytes = np.frombuffer(keys_values.buffers()[1], dtype=np.int32, count=len(keys_values) + 1)
    total = int(value_bytes[-1])
    blob = np.frombuffer(keys_values.buffers()[2], dtype=np.uint8, count=total) if total else _NO_BYTES
    spaces = np.flatnonzero(blob == _KEY_SEPARATOR)
    if len(spaces) == 0:
        tokens, per_value = keys_values, np.ones(len(rows), dtype=np.int64)
    else:
        begins = np.sort(np.concatenate((value_bytes[:-1].astype(np.int64), spaces + 1)), kind="stable")
        ends = np.sort(np.concatenate((spaces, value_bytes[1:].astype(np.int64))), kind="stable")
        tokens = _gather_ranges(_data_buffer(keys_values), begins, ends - begins, pa.string())
        per_value = np.diff(np.searchsorted(spaces, value_bytes)) + 1
    per_row = np.zeros(count, dtype=np.int64)
    per_row[rows] = per_value
    list_offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(per_row, out=list_offsets[1:])
    return pa.ListArray.from_arrays(pa.array(list_offsets), tokens, type=_KEYS_TYPE)


def _property_columns_per_row(props: pa.Array) -> _PropertyColumns:
    """Slow path for non-canonical properties: :func:`store.codec.decode_properties` per row."""
    decoded = [decode_properties(raw) for raw in props.cast(pa.binary()).to_pylist()]
    keys = [d[PROPERTY_KEYS].split(" ") if d.get(PROPERTY_KEYS) else [] for d in decoded]
    rest = [[(k, v) for k, v in d.items() if k not in COLUMN_PROPERTIES] for d in decoded]
    return _PropertyColumns(
        pa.array([d.get(PROPERTY_UNIQ_KEY) for d in decoded], pa.string()),
        pa.array([d.get(PROPERTY_TAGS) for d in decoded], pa.string()),
        pa.array(keys, _KEYS_TYPE),
        pa.array(rest, _PROPERTIES_TYPE),
    )
