"""Runs of valid records at the start of a buffer: what CommitLog scans parse.

Recovery and dispatch catch-up read the CommitLog in chunks; :func:`validate_run` finds the
records at the start of a chunk by following TOTALSIZE (a whole stride at once when records
have one size), judges them with :func:`store.format.record_check.check_records` (the one
record checker) and returns their fixed fields as columns. Pure functions on bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from store.format.record import (
    BLANK_RECORD,
    FIXED_OVERHEAD_V1,
    MAGIC_POS,
    MAGIC_V1,
    MAGIC_V2,
    QUEUE_ID_POS,
    QUEUE_OFFSET_POS,
    STORE_TIMESTAMP_POS,
    SYS_FLAG_POS,
)
from store.format.record_check import (
    Verdict,
    check_records,
    gather_headers,
    header_field,
    overlapping,
    with_topic_verdict,
)

U8 = npt.NDArray[np.uint8]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class RecordRun:
    """The consecutive records at the start of a buffer that pass every check of the record
    checker; ``end`` is where the first record not in the run starts. ``verdict`` is that
    record's when the checks stopped the run, OK when following TOTALSIZE did (classify it
    with :func:`store.format.record_check.check_record`). Topics are dictionary-encoded."""

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
    verdict: Verdict = Verdict.OK

    def __len__(self) -> int:
        return len(self.starts)


def _chain(buf: bytes, arr: U8) -> tuple[I64, I64, int]:
    """Follow TOTALSIZE from position 0 while the magic is a record's and the record fits.

    After two records of the same size it checks the whole stride ahead at once (batches
    of one layout are common), falling back to one record at a time where it breaks.
    """
    starts: list[int] = []
    sizes: list[int] = []
    strides: list[tuple[I64, I64]] = []
    unpack, limit, pos, previous = BLANK_RECORD.unpack_from, len(buf), 0, -1
    sizes_at = overlapping(arr, ">i4")
    magics_at = overlapping(arr, ">u4")
    while pos + BLANK_RECORD.size <= limit:
        size, magic = unpack(buf, pos)
        if magic not in (MAGIC_V1, MAGIC_V2) or size < FIXED_OVERHEAD_V1 or size > limit - pos:
            break
        if size == previous:
            candidates = pos + size * np.arange((limit - pos) // size, dtype=np.int64)
            same = sizes_at[candidates] == size
            magic_at = magics_at[candidates + MAGIC_POS]
            same &= (magic_at == MAGIC_V1) | (magic_at == MAGIC_V2)
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
    if valid == 0:
        return codes, names, valid
    for length in np.unique(topic_lens).tolist():
        rows = np.flatnonzero(topic_lens == length)
        if length == 0:
            codes[rows] = len(names)
            names.append("")
            continue
        matrix = overlapping(arr, np.dtype((np.void, length)))[topic_starts[rows]]
        if bool((matrix == matrix[0]).all()):  # one topic (the usual case): no sort
            distinct, inverse = matrix[:1], np.zeros(len(rows), dtype=np.int64)
        else:
            distinct, inverse = np.unique(matrix, return_inverse=True)
        codes[rows] = inverse.ravel() + len(names)
        for i, raw in enumerate(distinct.tolist()):
            try:
                names.append(bytes(raw).decode("utf-8"))
            except UnicodeDecodeError:
                names.append("")
                valid = min(valid, int(rows[np.argmax(inverse.ravel() == i)]))
    return codes, names, valid


def validate_run(buf: bytes, check_crc: bool) -> RecordRun:
    """The valid records at the start of ``buf`` (the record checker, vectorised)."""
    arr = np.frombuffer(buf, dtype=np.uint8)
    starts, sizes, end = _chain(buf, arr)
    headers = gather_headers(arr, starts)
    spans = check_records(arr, starts, check_crc=check_crc, raw=buf, headers=headers)
    count = spans.valid
    topic_codes, topic_names, valid = _topics(
        arr, spans.ranges.topic_begin[:count], spans.ranges.topic_len[:count]
    )
    spans = with_topic_verdict(spans, valid)
    count = spans.valid
    if count < len(starts):
        end = int(starts[count])
    cut = slice(0, count)
    fixed = headers[cut]
    return RecordRun(
        starts[cut],
        sizes[cut],
        end,
        header_field(fixed, QUEUE_ID_POS).astype(np.int32),
        header_field(fixed, QUEUE_OFFSET_POS).astype(np.int64),
        header_field(fixed, STORE_TIMESTAMP_POS).astype(np.int64),
        header_field(fixed, SYS_FLAG_POS).astype(np.int32),
        topic_codes[cut],
        topic_names,
        spans.ranges.props_begin[cut],
        spans.ranges.props_len[cut],
        spans.verdict,
    )
