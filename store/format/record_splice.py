"""Copies of stored records into another topic, by byte edits (pure, vectorised).

The records the operators write — a delivered delay-level or timer message, a transaction's
final message — are copies of a stored record that differ from it only in the topic, some
header fields and, for timer messages, a few appended properties::

    stored record                                copy
    [TOTALSIZE MAGIC ... header ... BODYLEN]     [TOTALSIZE' MAGIC' ... header ... BODYLEN]
    [body]                                       [body]                      (BODYCRC still holds)
    [TOPICLEN][topic]                            [TOPICLEN'][new topic]
    [PROPLEN][properties]                        [PROPLEN'][properties][appended pairs]

:func:`splice_records` builds the copies of many records in one pass: the heads and the
properties strings are gathered from the stored bytes (:func:`~store.format.arrow_ranges.gather_ranges`),
then joined element-wise with the new topic parts and lengths by one Arrow kernel, so there is
no Python object per record and no decode/encode of the properties. TOTALSIZE, MAGICCODE (V1, or
V2 for a topic longer than 127 bytes, as :func:`~store.format.record.encode_record` chooses),
TOPICLEN and PROPLEN follow the new layout; every other header field is the stored one, for the
caller to patch (:func:`~store.format.batch_encode.patch_be`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from store.errors import InvalidArgument, MessageTooLarge
from store.format.arrow_ranges import SliceBytes, as_bytes, gather_ranges
from store.format.batch_encode import patch_be
from store.format.record import MAGIC_POS, MAX_PROPERTIES_BYTES, TOTAL_SIZE_POS, topic_length_prefix
from store.format.record_check import RangeColumns

U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]


class SplicedRecords(NamedTuple):
    """Record ``i`` is ``buffer[starts[i] : starts[i] + sizes[i]]`` (a writable buffer)."""

    buffer: U8
    starts: I64
    sizes: I64


def splice_records(
    data: SliceBytes,
    starts: I64,
    ranges: RangeColumns,
    topic_codes: npt.ArrayLike,
    topic_names: Sequence[str],
    appended: pa.Array | None = None,
) -> SplicedRecords:
    """Copies of the records at ``starts`` in ``data`` (ascending, disjoint, checked: ``ranges``
    are :func:`~store.format.record_check.check_records`' for them), record ``i`` moved to topic
    ``topic_names[topic_codes[i]]`` with ``appended[i]`` (binary: whole ``name\\x01value\\x02``
    pairs, or empty) after its properties.

    Raises :class:`MessageTooLarge` when a properties string would exceed 32767 bytes and
    :class:`InvalidArgument` for a topic no record layout can carry."""
    count = len(starts)
    source = pa.py_buffer(as_bytes(data))
    parts, magics = [], []
    for name in topic_names:
        encoded = name.encode("utf-8")
        magic, prefix = topic_length_prefix(encoded)
        parts.append(prefix.pack(len(encoded)) + encoded)
        magics.append(magic - (1 << 32) if magic >= 1 << 31 else magic)  # a Java int
    codes = np.asarray(topic_codes, dtype=np.int32).reshape(-1)
    if len(codes) != count:
        raise InvalidArgument(f"{len(codes)} topic codes for {count} records")
    topics = pa.array(parts, pa.binary()).take(pa.array(codes))
    heads = gather_ranges(source, starts, ranges.body_begin + ranges.body_len - starts, pa.binary())
    props = gather_ranges(source, ranges.props_begin, ranges.props_len, pa.binary())
    props_len = ranges.props_len
    columns = [heads, topics, None, props]
    if appended is not None:
        if len(appended) != count:
            raise InvalidArgument(f"{len(appended)} appended properties for {count} records")
        extra = np.diff(np.frombuffer(appended.buffers()[1], dtype=np.int32, count=count + 1)).astype(
            np.int64
        )
        props_len = props_len + extra
        columns.append(appended.cast(pa.binary()))
    if count and int(props_len.max()) > MAX_PROPERTIES_BYTES:
        raise MessageTooLarge(
            f"properties would be {int(props_len.max())} bytes, at most {MAX_PROPERTIES_BYTES}"
        )
    columns[2] = _u16_strings(props_len)
    joined = pc.binary_join_element_wise(*columns, b"")
    if isinstance(joined, pa.ChunkedArray):
        joined = joined.combine_chunks()
    offsets = np.frombuffer(
        joined.buffers()[1],
        dtype=np.int64 if pa.types.is_large_binary(joined.type) else np.int32,
        count=count + 1,
    ).astype(np.int64)
    out_starts = offsets[:-1] - offsets[0]
    sizes = np.diff(offsets)
    buffer = np.frombuffer(joined.buffers()[2], dtype=np.uint8, count=int(offsets[-1]))[
        int(offsets[0]) :
    ].copy()
    patch_be(buffer, out_starts + TOTAL_SIZE_POS, sizes, 4)
    patch_be(buffer, out_starts + MAGIC_POS, np.asarray(magics, dtype=np.int64)[codes], 4)
    return SplicedRecords(buffer, out_starts, sizes)


def _u16_strings(values: I64) -> pa.Array:
    """Each value as 2 big-endian bytes, one binary element per value."""
    count = len(values)
    data = np.asarray(values, dtype=">u2").tobytes()
    offsets = np.arange(0, 2 * count + 1, 2, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
