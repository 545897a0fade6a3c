"""Properties strings -> Arrow columns: UNIQ_KEY, TAGS, KEYS and the rest as a map.

Each record's properties are ``name\x01value\x02`` pairs (:func:`store.format.record.encode_properties`)::

    properties blob ─► per chunk of rows: positions of \x01 and \x02 (two NumPy scans)
          ─► name/value ranges ─► TAGS / KEYS / UNIQ_KEY ranges per row, other pairs for the
          map ─► one ``take`` per output column (KEYS then split on spaces)

Properties not in that canonical form (foreign or damaged bytes, invalid UTF-8, a column
property twice) are decoded row by row with :func:`store.format.record.decode_properties`, so
the result always equals the scalar decoder's. A name other than TAGS/KEYS/UNIQ_KEY is assumed
to appear once per record (the encoder writes a mapping).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from store.format.arrow_ranges import CHUNK_ROWS, SliceBytes, as_bytes, gather_ranges, is_utf8
from store.format.arrow_schema import COLUMN_PROPERTIES, MESSAGE_SCHEMA
from store.format.record import decode_properties
from store.format.record_check import overlapping
from store.format.vocabulary import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)

U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]

_SEP_NAME: Final = ord(NAME_VALUE_SEPARATOR)
_SEP_PAIR: Final = ord(PROPERTY_SEPARATOR)
_KEY_SEPARATOR: Final = ord(" ")
_NO_BYTES: Final[U8] = np.zeros(0, dtype=np.uint8)
_KEYS_TYPE: Final = MESSAGE_SCHEMA.field("keys").type
_PROPERTIES_TYPE: Final = MESSAGE_SCHEMA.field("properties").type


def decode_property_columns(
    buf: SliceBytes, begins: npt.ArrayLike, lengths: npt.ArrayLike
) -> tuple[pa.Array, pa.Array, pa.Array]:
    """``(uniq_key, tags, keys)`` of the properties strings at ``buf[begins[i]:][:lengths[i]]``.

    The ranges must be ascending and disjoint (consecutive records are). All three are string
    arrays, null where the property is absent; ``keys`` is the raw KEYS value (tokens joined
    by spaces). Used by CommitLog scans to build dispatch batches without a Python dict per
    record; the other properties are not gathered.
    """
    found = decode_named_properties(buf, begins, lengths, (PROPERTY_UNIQ_KEY, PROPERTY_TAGS, PROPERTY_KEYS))
    return found.values[PROPERTY_UNIQ_KEY], found.values[PROPERTY_TAGS], found.values[PROPERTY_KEYS]


class NamedProperties(NamedTuple):
    """Values of some properties, one string array per name (null where a record lacks it);
    ``canonical``: every string was in the encoder's canonical form (``name\\x01value\\x02``
    pairs with non-empty names and values, valid UTF-8, each of the names at most once)."""

    values: dict[str, pa.Array]
    canonical: bool


def decode_named_properties(
    buf: SliceBytes, begins: npt.ArrayLike, lengths: npt.ArrayLike, names: Sequence[str]
) -> NamedProperties:
    """The values of the properties ``names`` in the properties strings at
    ``buf[begins[i]:][:lengths[i]]``.

    The ranges must be ascending and disjoint. Strings not in the canonical encoding are
    decoded row by row with :func:`store.format.record.decode_properties` (same answers).
    """
    data = as_bytes(buf)
    source = pa.py_buffer(data)
    props = gather_ranges(
        source, np.asarray(begins, dtype=np.int64), np.asarray(lengths, dtype=np.int64), pa.string()
    )
    wanted = frozenset(names)
    ranges = _parse_properties(props, wanted, keep_rest=False)
    if ranges is None:  # non-canonical: decode_properties, row by row
        decoded = [decode_properties(raw) for raw in props.cast(pa.binary()).to_pylist()]
        return NamedProperties(
            {name: pa.array([d.get(name) for d in decoded], pa.string()) for name in names}, False
        )
    blob = _blob_buffer(props)
    return NamedProperties({name: ranges.nullable_strings(blob, name) for name in names}, True)


class PropertyColumns(NamedTuple):
    uniq_key: pa.Array
    tags: pa.Array
    keys: pa.Array
    properties: pa.Array


class _Pairs(NamedTuple):
    """The ``name\\x01value\\x02`` pairs of a run of rows, as positions in their bytes."""

    name_begin: I64
    name_len: I64
    value_begin: I64
    value_len: I64
    row_pairs: I64  # pairs of row r are [row_pairs[r], row_pairs[r + 1])


class _PropertyRanges:
    """Where each output value lies in the properties blob, filled chunk by chunk.

    TAGS/KEYS/UNIQ_KEY: one (begin, length, present) per row; absent rows get an empty range
    at their own start so that the ranges stay ascending. Other pairs: lists per chunk.
    """

    def __init__(
        self, row_bytes: I64, names: frozenset[str] = COLUMN_PROPERTIES, keep_rest: bool = True
    ) -> None:
        count = len(row_bytes) - 1
        self.row_bytes = row_bytes
        self.names = names
        self.keep_rest = keep_rest
        self.begin = {name: row_bytes[:-1].copy() for name in names}
        self.length = {name: np.zeros(count, dtype=np.int64) for name in names}
        self.present = {name: np.zeros(count, dtype=np.bool_) for name in names}
        self.map_entries = np.zeros(count, dtype=np.int64)
        self.kept: list[tuple[I64, I64, I64, I64]] = []

    def parse(self, blob: U8, lo: int, hi: int) -> bool:
        """Parse rows ``[lo, hi)``; False when they are not in the canonical encoding."""
        base = int(self.row_bytes[lo])
        local = self.row_bytes[lo : hi + 1] - base
        segment = blob[base : int(self.row_bytes[hi])]
        pairs = _canonical_pairs(segment, local)
        if pairs is None:
            return False
        found = _find_names(segment, pairs.name_begin, pairs.name_len, self.names)
        pairs_per_row = np.diff(pairs.row_pairs)
        pair_rows = np.repeat(np.arange(lo, hi, dtype=np.int64), pairs_per_row)
        kept = np.ones(len(pairs.name_begin), dtype=np.bool_)
        self.map_entries[lo:hi] = pairs_per_row
        for name, idx in found.items():
            rows = pair_rows[idx]
            if len(rows) > 1 and not bool(np.all(rows[1:] > rows[:-1])):
                return False  # a column property twice in one record
            # every row has it (the usual case): plain slices instead of scatters
            at: slice | I64 = slice(lo, hi) if len(rows) == hi - lo else rows
            self.begin[name][at] = pairs.value_begin[idx] + base
            self.length[name][at] = pairs.value_len[idx]
            self.present[name][at] = True
            self.map_entries[at] -= 1
            kept[idx] = False
        if not self.keep_rest:
            return True
        if len(found) and not bool(kept.all()):
            keep = np.flatnonzero(kept)
            pairs = _Pairs(
                pairs.name_begin[keep],
                pairs.name_len[keep],
                pairs.value_begin[keep],
                pairs.value_len[keep],
                pairs.row_pairs,
            )
        self.kept.append((pairs.name_begin + base, pairs.name_len, pairs.value_begin + base, pairs.value_len))
        return True

    def columns(self, blob: pa.Buffer) -> PropertyColumns:
        count = len(self.row_bytes) - 1
        keys_rows = np.flatnonzero(self.present[PROPERTY_KEYS])
        keys_values = gather_ranges(
            blob, self.begin[PROPERTY_KEYS][keys_rows], self.length[PROPERTY_KEYS][keys_rows], pa.string()
        )
        name_begin, name_len, value_begin, value_len = (
            np.concatenate(part) for part in zip(*self.kept, strict=True)
        )
        map_offsets = np.zeros(count + 1, dtype=np.int32)
        np.cumsum(self.map_entries, out=map_offsets[1:])
        properties = pa.MapArray.from_arrays(
            pa.array(map_offsets),
            gather_ranges(blob, name_begin, name_len, pa.string()),
            gather_ranges(blob, value_begin, value_len, pa.string()),
            type=_PROPERTIES_TYPE,
        )
        return PropertyColumns(
            self.nullable_strings(blob, PROPERTY_UNIQ_KEY),
            self.nullable_strings(blob, PROPERTY_TAGS),
            _split_keys(keys_values, keys_rows, count),
            properties,
        )

    def nullable_strings(self, blob: pa.Buffer, name: str) -> pa.Array:
        strings = gather_ranges(blob, self.begin[name], self.length[name], pa.string())
        present = self.present[name]
        missing = len(present) - int(np.count_nonzero(present))
        if missing == 0:
            return strings
        validity = pa.py_buffer(np.packbits(present, bitorder="little"))
        return pa.Array.from_buffers(
            pa.string(), len(present), [validity, *strings.buffers()[1:]], null_count=missing
        )


def property_columns(props: pa.Array) -> PropertyColumns:
    """uniq_key, tags, keys and properties columns from each record's properties string."""
    ranges = _parse_properties(props)
    if ranges is None:
        return _property_columns_per_row(props)
    return ranges.columns(_blob_buffer(props))


def _blob_buffer(props: pa.Array) -> pa.Buffer:
    return props.buffers()[2] if props.buffers()[2] is not None else pa.py_buffer(b"")


def _parse_properties(
    props: pa.Array, names: frozenset[str] = COLUMN_PROPERTIES, keep_rest: bool = True
) -> _PropertyRanges | None:
    """Where the pairs ``names`` (and, with ``keep_rest``, every other pair) of each record's
    properties string lie; None when they are not all in the canonical encoding (then the
    caller decodes them row by row)."""
    count = len(props)
    row_bytes = np.frombuffer(props.buffers()[1], dtype=np.int32, count=count + 1).astype(np.int64)
    blob_buffer = _blob_buffer(props)
    blob = (
        np.frombuffer(blob_buffer, dtype=np.uint8, count=int(row_bytes[-1])) if row_bytes[-1] else _NO_BYTES
    )
    if not is_utf8(props):
        return None
    ranges = _PropertyRanges(row_bytes, names, keep_rest)
    for lo in range(0, count, CHUNK_ROWS):
        if not ranges.parse(blob, lo, min(lo + CHUNK_ROWS, count)):
            return None
    return ranges


def _canonical_pairs(segment: U8, row_bytes: I64) -> _Pairs | None:
    """The pairs when every row is exactly ``(name\\x01value\\x02)*`` with non-empty names and
    values (what the encoder writes); None otherwise. ``row_bytes`` are row offsets in it."""
    name_end = np.flatnonzero(segment == _SEP_NAME)
    value_end = np.flatnonzero(segment == _SEP_PAIR)
    row_pairs = np.zeros(len(row_bytes), dtype=np.int64)
    if len(name_end) != len(value_end):
        return None
    if len(value_end) == 0:
        return _Pairs(value_end, value_end, value_end, value_end, row_pairs) if len(segment) == 0 else None
    name_begin = np.empty(len(value_end), dtype=np.int64)
    name_begin[0] = 0
    np.add(value_end[:-1], 1, out=name_begin[1:])
    name_len = name_end - name_begin
    value_len = value_end - name_end
    value_len -= 1
    if int(value_end[-1]) != len(segment) - 1 or int(name_len.min()) <= 0 or int(value_len.min()) <= 0:
        return None
    # A pair closes a row when the byte after its \x02 is a row boundary. Every non-empty row
    # must be closed so (boundaries of empty rows coincide with another row's, or with 0).
    ends = row_bytes[1:]
    nonempty = ends > row_bytes[:-1]
    boundary = np.zeros(len(segment) + 1, dtype=np.bool_)
    boundary[ends] = True
    last_pairs = np.flatnonzero(boundary[value_end + 1])
    if len(last_pairs) != int(np.count_nonzero(nonempty)):
        return None  # a row whose bytes do not end with a \x02
    row_pairs[1:][nonempty] = last_pairs + 1
    np.maximum.accumulate(row_pairs, out=row_pairs)
    return _Pairs(name_begin, name_len, name_end + 1, value_len, row_pairs)


def _find_names(blob: U8, name_begin: I64, name_len: I64, names: frozenset[str]) -> dict[str, I64]:
    """Indexes of the pairs named each of ``names``: one gather of every name's first bytes,
    then the rest compared on the few candidates left."""
    targets = {name: name.encode("utf-8") for name in names}
    # Every name is followed by at least 3 bytes (\x01, a value, \x02): 4-byte reads are safe.
    head = min(4, *(len(t) for t in targets.values()))
    heads = overlapping(blob, f"<u{head}")[name_begin]
    found: dict[str, I64] = {}
    for name, target in targets.items():
        word = np.frombuffer(target[:head], dtype=f"<u{head}")[0]
        candidates = np.flatnonzero(heads == word)
        candidates = candidates[name_len[candidates] == len(target)]
        for done in range(head, len(target), head):
            width = min(head, len(target) - done)
            window = overlapping(blob, f"<u{width}") if width in (1, 2, 4) else None
            if window is None:
                for at in range(done, done + width):
                    candidates = candidates[blob[name_begin[candidates] + at] == target[at]]
            else:
                word = np.frombuffer(target[done : done + width], dtype=f"<u{width}")[0]
                candidates = candidates[window[name_begin[candidates] + done] == word]
        found[name] = candidates
    return found


def _split_keys(keys_values: pa.Array, rows: I64, count: int) -> pa.Array:
    """The ``keys`` list column: each KEYS value split on spaces, empty lists elsewhere."""
    if len(keys_values) == 0:
        empty = pa.array(np.zeros(count + 1, dtype=np.int32))
        return pa.ListArray.from_arrays(empty, keys_values, type=_KEYS_TYPE)
    value_bytes = np.frombuffer(keys_values.buffers()[1], dtype=np.int32, count=len(keys_values) + 1)
    total = int(value_bytes[-1])
    data = keys_values.buffers()[2]
    blob = np.frombuffer(data, dtype=np.uint8, count=total) if total else _NO_BYTES
    spaces = np.flatnonzero(blob == _KEY_SEPARATOR)
    if len(spaces) == 0:
        tokens, per_value = keys_values, np.ones(len(rows), dtype=np.int64)
    else:
        begins = np.sort(np.concatenate((value_bytes[:-1].astype(np.int64), spaces + 1)), kind="stable")
        ends = np.sort(np.concatenate((spaces, value_bytes[1:].astype(np.int64))), kind="stable")
        tokens = gather_ranges(data, begins, ends - begins, pa.string())
        per_value = np.diff(np.searchsorted(spaces, value_bytes)) + 1
    per_row = np.zeros(count, dtype=np.int64)
    per_row[rows] = per_value
    list_offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(per_row, out=list_offsets[1:])
    return pa.ListArray.from_arrays(pa.array(list_offsets), tokens, type=_KEYS_TYPE)


def _property_columns_per_row(props: pa.Array) -> PropertyColumns:
    """Slow path for non-canonical properties: :func:`store.format.record.decode_properties` per row."""
    decoded = [decode_properties(raw) for raw in props.cast(pa.binary()).to_pylist()]
    keys = [d[PROPERTY_KEYS].split(" ") if d.get(PROPERTY_KEYS) else [] for d in decoded]
    rest = [[(k, v) for k, v in d.items() if k not in COLUMN_PROPERTIES] for d in decoded]
    return PropertyColumns(
        pa.array([d.get(PROPERTY_UNIQ_KEY) for d in decoded], pa.string()),
        pa.array([d.get(PROPERTY_TAGS) for d in decoded], pa.string()),
        pa.array(keys, _KEYS_TYPE),
        pa.array(rest, _PROPERTIES_TYPE),
    )
