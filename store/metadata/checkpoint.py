"""``StoreCheckpoint``: how far the CommitLog and its derived structures were durable.

One 4 KiB page, big-endian longs::

    offset  size  field
    0       8     physicMsgTimestamp   store ts (ms) of the last flushed CommitLog record
    8       8     logicsMsgTimestamp   store ts of the last flushed ConsumeQueue entry
    16      8     indexMsgTimestamp    store ts of the last flushed IndexFile entry
    24      8     masterFlushedOffset  (RocketMQ 5 HA; always 0 here)
    32      8     confirmPhyOffset     (RocketMQ 5 HA) a replicated store's confirm offset; else 0
    40      8     partialRecordMark    (sparkmq) a replica whose CommitLog ends inside a record
                                       received in part: that record's offset + 1; else 0
    48..4095      zero

RocketMQ reads the first five fields only. The partial-record mark is sparkmq's: a master's
frames cut records anywhere, so a replica killed between two frames holds the head of a record
whose tail never came (zeros). That record can pass every check recovery makes (the body CRC
covers the body, the tail holds properties), so the mark, written in place before such a head
reaches the disk and cleared once the record is whole, tells the next open where to cut
(:meth:`MessageStore.open <store.MessageStore.open>`).

The confirm offset is written in place (one 8-byte write, no fsync) every time it moves, so
read-only followers in other processes (:class:`~store.read.store_reader.StoreReader`) bound
their reads by it; :meth:`StoreCheckpoint.flush` makes it durable with the rest.

Abnormal recovery re-checks the CommitLog from the newest file whose first record is not
newer than :meth:`StoreCheckpoint.min_timestamp_ms`. :meth:`flush` rewrites and fsyncs the
single page (a page write is atomic enough on the file systems we target).
"""

from __future__ import annotations

import contextlib
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from store.io.fs import FileHandle, FileSystem, OsFileSystem

CHECKPOINT_PAGE_SIZE: Final = 4096
#: The six longs at the start of the page (see the module docstring).
CHECKPOINT_FIELDS: Final = struct.Struct(">qqqqqq")
#: Byte position of confirmPhyOffset in the page (derived from the field table above).
CONFIRM_OFFSET_POS: Final = struct.calcsize(">qqqq")
#: One field written in place (confirmPhyOffset, partialRecordMark): a big-endian long.
LONG_FIELD: Final = struct.Struct(">q")
#: Byte position of partialRecordMark in the page.
PARTIAL_RECORD_POS: Final = struct.calcsize(">qqqqq")
#: RocketMQ subtracts this margin from min(physic, logics) before trusting it.
MIN_TIMESTAMP_MARGIN_MS: Final = 3000


@dataclass(slots=True)
class CheckpointValues:
    physic_msg_timestamp_ms: int = 0
    logics_msg_timestamp_ms: int = 0
    index_msg_timestamp_ms: int = 0
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0
    #: Where a replica's unfinished last record starts (None: its CommitLog ends whole).
    partial_record_offset: int | None = None


def _mark(offset: int | None) -> int:
    return 0 if offset is None else offset + 1


def encode_checkpoint(values: CheckpointValues) -> bytes:
    """The whole 4 KiB page."""
    head = CHECKPOINT_FIELDS.pack(
        values.physic_msg_timestamp_ms,
        values.logics_msg_timestamp_ms,
        values.index_msg_timestamp_ms,
        values.master_flushed_offset,
        values.confirm_phy_offset,
        _mark(values.partial_record_offset),
    )
    return head + bytes(CHECKPOINT_PAGE_SIZE - len(head))


def decode_checkpoint(page: bytes) -> CheckpointValues:
    """Values of a page (a short or empty page reads as zeros)."""
    padded = page[: CHECKPOINT_FIELDS.size].ljust(CHECKPOINT_FIELDS.size, b"\x00")
    physic, logics, index, master_flushed, confirm, mark = CHECKPOINT_FIELDS.unpack(padded)
    partial = mark - 1 if mark > 0 else None
    return CheckpointValues(physic, logics, index, master_flushed, confirm, partial)


class StoreCheckpoint:
    """The ``checkpoint`` file; thread-safe. Use :meth:`open`, then set fields and flush."""

    def __init__(self, handle: FileHandle) -> None:
        self._handle = handle
        self._lock = threading.Lock()
        self.values = decode_checkpoint(handle.read(0, CHECKPOINT_PAGE_SIZE))

    @staticmethod
    def open(path: Path, fs: FileSystem | None = None) -> StoreCheckpoint:
        """Open ``path``, creating a zeroed page when it does not exist."""
        fs = fs if fs is not None else OsFileSystem()
        # The page is rewritten in place for the store's whole life: allocated once, no flush
        # ever needs a new block. A new one on a full disk raises OSError; an old one that was
        # never written (a hole) is opened anyway, and its next flush reports the full disk.
        if not fs.exists(path):
            fs.make_dirs(path.parent)
            handle = fs.create(path, CHECKPOINT_PAGE_SIZE)
            try:
                handle.reserve(CHECKPOINT_PAGE_SIZE)
            except OSError:
                handle.close()
                fs.remove(path)
                raise
            return StoreCheckpoint(handle)
        if fs.file_size(path) < CHECKPOINT_PAGE_SIZE:
            fs.resize(path, CHECKPOINT_PAGE_SIZE)
        handle = fs.open(path)
        with contextlib.suppress(OSError):
            handle.reserve(CHECKPOINT_PAGE_SIZE)
        return StoreCheckpoint(handle)

    @property
    def path(self) -> Path:
        return self._handle.path

    def update(
        self,
        *,
        physic_msg_timestamp_ms: int | None = None,
        logics_msg_timestamp_ms: int | None = None,
        index_msg_timestamp_ms: int | None = None,
    ) -> None:
        """Set any of the timestamps in memory (call :meth:`flush` to persist)."""
        with self._lock:
            if physic_msg_timestamp_ms is not None:
                self.values.physic_msg_timestamp_ms = physic_msg_timestamp_ms
            if logics_msg_timestamp_ms is not None:
                self.values.logics_msg_timestamp_ms = logics_msg_timestamp_ms
            if index_msg_timestamp_ms is not None:
                self.values.index_msg_timestamp_ms = index_msg_timestamp_ms

    def write_confirm_offset(self, offset: int) -> None:
        """Set confirmPhyOffset and write it in place at once (no fsync: :meth:`flush` does),
        so followers in other processes see it. Raises OSError."""
        with self._lock:
            self.values.confirm_phy_offset = offset
            self._handle.write(CONFIRM_OFFSET_POS, LONG_FIELD.pack(offset))

    def write_partial_record(self, offset: int | None) -> None:
        """Set partialRecordMark (``offset``: where the unfinished last record starts; None:
        the CommitLog ends whole) and write it in place at once: before the head of such a
        record is copied, and after its tail. Raises OSError."""
        with self._lock:
            self.values.partial_record_offset = offset
            self._handle.write(PARTIAL_RECORD_POS, LONG_FIELD.pack(_mark(offset)))

    def lower_timestamps(self, timestamp_ms: int) -> None:
        """After a truncation: no flushed-data timestamp may be later than the newest record
        kept (abnormal recovery trusts them to pick where it starts checking)."""
        with self._lock:
            v = self.values
            v.physic_msg_timestamp_ms = min(v.physic_msg_timestamp_ms, timestamp_ms)
            v.logics_msg_timestamp_ms = min(v.logics_msg_timestamp_ms, timestamp_ms)
            v.index_msg_timestamp_ms = min(v.index_msg_timestamp_ms, timestamp_ms)

    def flush(self) -> None:
        """Write and fsync the page; raises OSError."""
        with self._lock:
            self._handle.write(0, encode_checkpoint(self.values))
            self._handle.sync(0, CHECKPOINT_PAGE_SIZE)

    def min_timestamp_ms(self) -> int:
        """``getMinTimestamp``: min(physic, logics) - 3000 ms, floored at 0."""
        v = self.values
        return max(0, min(v.physic_msg_timestamp_ms, v.logics_msg_timestamp_ms) - MIN_TIMESTAMP_MARGIN_MS)

    def min_timestamp_index_ms(self) -> int:
        """``getMinTimestampIndex``: min(min_timestamp_ms, indexMsgTimestamp)."""
        return min(self.min_timestamp_ms(), self.values.index_msg_timestamp_ms)

    def close(self) -> None:
        self._handle.close()
