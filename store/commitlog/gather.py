"""Many records read from the CommitLog at once, by offset: one copy, no Python per record.

:func:`gather_records` is :meth:`CommitLog.read_record` for thousands of offsets: the offsets are
grouped by file, each group's TOTALSIZE fields are read from one zero-copy view of the file, and
the records are copied back to back into one buffer with one Arrow ``take``
(:func:`~store.format.arrow_ranges.gather_ranges`). An offset whose file is gone (retention) or
whose size does not fit the written part of its file is reported absent, as ``read_record``
answers None; whether the bytes hold a record is for the caller's checker to say.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from store.commitlog.commitlog import CommitLog
from store.format.arrow_ranges import gather_ranges
from store.format.record import BLANK_RECORD, PHYSICAL_OFFSET_POS, TOTAL_SIZE_POS
from store.format.record_check import check_records, gather_headers, header_field, overlapping

I64 = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]


class GatheredRecords(NamedTuple):
    """The records found, back to back in the order asked (absent ones skipped): record ``j``
    is ``buffer[starts[j] : starts[j] + sizes[j]]`` and was asked at row ``rows[j]``."""

    buffer: npt.NDArray[np.uint8]
    starts: I64
    sizes: I64
    rows: I64

    @property
    def present(self) -> int:
        return len(self.rows)

    def headlines(self) -> tuple[list[str | None], I64]:
        """Each record's topic and PHYSICALOFFSET (None / -1 where the bytes are no record)."""
        topics: list[str | None] = [None] * self.present
        physical = np.full(self.present, -1, dtype=np.int64)
        lo = 0
        while lo < self.present:
            starts = self.starts[lo:]
            spans = check_records(self.buffer, starts)
            good = np.arange(lo, lo + spans.valid)
            if len(good):
                r = spans.ranges
                names = gather_ranges(
                    pa.py_buffer(self.buffer),
                    r.topic_begin[: spans.valid],
                    r.topic_len[: spans.valid],
                    pa.binary(),
                )
                for i, name in zip(good.tolist(), names.to_pylist(), strict=True):
                    topics[i] = name.decode("utf-8", "replace")
                headers = gather_headers(self.buffer, starts[: spans.valid])
                physical[good] = header_field(headers, PHYSICAL_OFFSET_POS)
            lo += spans.valid + 1  # the record after the first bad one
        return topics, physical


def gather_records(
    commitlog: CommitLog, offsets: npt.ArrayLike, sizes: npt.ArrayLike | None = None
) -> GatheredRecords:
    """The records at CommitLog ``offsets`` (any order; ``sizes`` when known, else each record's
    TOTALSIZE is read). Offsets in deleted files, or whose record would run past the written
    end of its file, are absent from the answer."""
    wanted = np.asarray(offsets, dtype=np.int64).reshape(-1)
    known = None if sizes is None else np.asarray(sizes, dtype=np.int64).reshape(-1)
    order = np.argsort(wanted, kind="stable")
    sorted_offsets = wanted[order]
    file_size = commitlog.file_size_bytes
    file_ids = sorted_offsets // file_size
    bounds = np.flatnonzero(np.diff(file_ids)) + 1
    pieces: list[tuple[pa.Array, I64]] = []
    for group in np.split(np.arange(len(wanted)), bounds) if len(wanted) else []:
        found = _from_one_file(
            commitlog, sorted_offsets[group], None if known is None else known[order[group]]
        )
        if found is not None:
            array, kept = found
            pieces.append((array, order[group[kept]]))
    if not pieces:
        empty = np.zeros(0, dtype=np.int64)
        return GatheredRecords(np.zeros(0, dtype=np.uint8), empty, empty, empty)
    rows = np.concatenate([rows for _, rows in pieces])
    arrays = [array for array, _ in pieces]
    joined = arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)
    # back in the order asked: one more take when the offsets were not ascending
    back = np.argsort(rows, kind="stable")
    if bool((back != np.arange(len(back))).any()):
        joined, rows = joined.take(pa.array(back)), rows[back]
    offsets_type = np.int64 if pa.types.is_large_binary(joined.type) else np.int32
    ends = np.frombuffer(joined.buffers()[1], dtype=offsets_type)[
        joined.offset : joined.offset + len(joined) + 1
    ]
    base = int(ends[0])
    ends = ends.astype(np.int64) - base
    data = np.frombuffer(joined.buffers()[2], dtype=np.uint8)[base : base + int(ends[-1])]
    return GatheredRecords(data, ends[:-1], np.diff(ends), rows)


def _from_one_file(commitlog: CommitLog, offsets: I64, sizes: I64 | None) -> tuple[pa.Array, I64] | None:
    """``(records as one binary array, which of offsets they are)`` for offsets of one file."""
    mapped = commitlog.queue.find_file(int(offsets[0]))
    if mapped is None:
        return None
    written = mapped.wrote_position
    positions = offsets - mapped.start_offset
    try:
        view = np.frombuffer(mapped.view(0, written), dtype=np.uint8)
    except ValueError:  # deleted meanwhile
        return None
    if sizes is None:
        readable = positions + BLANK_RECORD.size <= written
        sizes = np.zeros(len(offsets), dtype=np.int64)
        sizes[readable] = overlapping(view, ">i4")[positions[readable] + TOTAL_SIZE_POS]
    kept = np.flatnonzero((sizes > BLANK_RECORD.size) & (positions + sizes <= written) & (positions >= 0))
    if len(kept) == 0:
        return None
    if len(kept) > 1 and not bool((positions[kept][1:] >= positions[kept][:-1] + sizes[kept][:-1]).all()):
        kept = _disjoint(positions, sizes, kept)
    array = gather_ranges(pa.py_buffer(view), positions[kept], sizes[kept], pa.binary())
    return array, kept


def _disjoint(positions: I64, sizes: I64, kept: I64) -> I64:
    """Drop ranges that overlap the one before them (a bogus size, or an offset asked twice is
    kept once): gather_ranges needs ascending, disjoint ranges."""
    out, end = [], -1
    for i in kept.tolist():
        if int(positions[i]) >= end:
            out.append(i)
            end = int(positions[i] + sizes[i])
    return np.asarray(out, dtype=np.int64)
