"""Planning a CommitLog append: where each record of a batch lands, touching nothing.

A record never straddles two files: when ``size + 8 > bytes left`` the file is closed with
an 8-byte BLANK record and the record goes to the next file (RocketMQ's
END_OF_FILE_MIN_BLANK_LENGTH rule). The plan lists the writes per file (slices of the batch
buffer, or a BLANK) and how many files must be created first, so that
:meth:`CommitLog.append <store.commitlog.commitlog.CommitLog.append>` can create them all
before writing the first byte.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from store.errors import MessageTooLarge
from store.format.batch_encode import I32, I64, EncodedBatch
from store.format.record import END_OF_FILE_MIN_BLANK, encode_blank
from store.io.mapped_file import MappedFileQueue


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where a batch landed: absolute offset and size of every record."""

    commitlog_offsets: I64
    sizes: I32
    #: CommitLog max offset after the append.
    end_offset: int
    #: Bytes written, blank records included.
    wrote_bytes: int


@dataclass(slots=True)
class PlannedWrite:
    """One write of a planned append: ``data`` goes to the end of file ``file_index``."""

    file_index: int  # index into the plan's files (0 = current last file)
    data: memoryview


def plan_append(batch: EncodedBatch, queue: MappedFileQueue) -> tuple[I64, list[PlannedWrite], int]:
    """(offsets, writes, number of new files) for appending ``batch`` to ``queue``, touching
    nothing. Raises MessageTooLarge when a record can never fit in a file."""
    file_size = queue.file_size
    n = len(batch)
    starts, sizes = batch.starts, batch.sizes.astype(np.int64)
    ends = starts + sizes
    if n and int(sizes.max()) + END_OF_FILE_MIN_BLANK > file_size:
        raise MessageTooLarge(
            f"record of {int(sizes.max())} bytes cannot fit in a {file_size}-byte commitlog file"
        )
    last = queue.last_file()
    if last is not None and not last.is_full:  # continue the current file
        file_start, wrote, new_files = last.start_offset, last.wrote_position, 0
    elif last is not None:  # it is full: start the next one
        file_start, wrote, new_files = last.start_offset + file_size, 0, 1
    else:  # no file yet (or all deleted): start where the queue says
        file_start, wrote, new_files = queue.max_offset, 0, 1
    file_index = 0  # index into [current file if writable] + new files
    offsets = np.empty(n, dtype=np.int64)
    writes: list[PlannedWrite] = []
    view = memoryview(batch.buffer)  # type: ignore[arg-type]
    i = 0
    while i < n:
        remaining = file_size - wrote
        fits = int(np.searchsorted(ends[i:] - starts[i], remaining - END_OF_FILE_MIN_BLANK, "right"))
        if fits == 0:
            writes.append(PlannedWrite(file_index, memoryview(encode_blank(remaining))))
            file_index, new_files = file_index + 1, new_files + 1
            file_start, wrote = file_start + file_size, 0
            continue
        j = i + fits
        offsets[i:j] = file_start + wrote + (starts[i:j] - starts[i])
        writes.append(PlannedWrite(file_index, view[int(starts[i]) : int(ends[j - 1])]))
        wrote += int(ends[j - 1] - starts[i])
        i = j
    return offsets, writes, new_files
