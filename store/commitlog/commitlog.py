"""The CommitLog: every message of every topic, appended to one sequence of mapped files.

It is the store's only source of truth: the ConsumeQueue and the IndexFile are rebuilt from
:meth:`CommitLog.scan`. A record never straddles two files: when ``size + 8 > bytes left``
the file is closed with an 8-byte BLANK record and the record goes to the next file
(RocketMQ's END_OF_FILE_MIN_BLANK_LENGTH rule); see :mod:`store.format.record` for the layout.

Appends are serialised by one lock and all-or-nothing: every file a batch needs is created
before the first byte is written, and a failed write is rolled back by zeroing what it wrote.

Recovery is an explicit, linear procedure (:meth:`recover_normally`,
:meth:`recover_abnormally`): walk records from a starting file, stop at the first one that
does not check out, truncate everything after it and log file, offset and reason.

Appends, the record walk and followers' reads share the file list and its invariants (no
straddling record, BLANK at file ends), so they stay in this class; its pure parts live
beside it: the append's plan (:mod:`store.commitlog.append_plan`), DispatchBatches built from
scanned bytes (:mod:`store.commitlog.run_batches`) and the recovery procedure, a mixin
(:mod:`store.commitlog.recovery_walk`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

from store.commitlog.append_plan import AppendResult, PlannedWrite, plan_append
from store.commitlog.dispatch_batch import DispatchBatch
from store.commitlog.recovery_walk import RecoveryResult, RecoveryWalk, ScanStop
from store.commitlog.run_batches import TagsCodesFn, default_tags_codes, run_dispatch_batch
from store.errors import CorruptStore, DataLost, ReplicationGap, StoreNotWritable
from store.format.batch_encode import EncodedBatch
from store.format.record import (
    BLANK_RECORD,
    RECORD_HEADER,
    STORE_TIMESTAMP_POS,
)
from store.format.record_check import RecordStatus, check_record, decode_record
from store.format.record_scan import RecordRun, validate_run
from store.io.fs import FileSystem
from store.io.mapped_file import MappedFile, MappedFileQueue
from store.types import MessageView

log = logging.getLogger("sparkmq.store")

#: Defined in the modules the CommitLog is made of; importable from here as before.
__all__ = [
    "SCAN_CHUNK_BYTES",
    "AppendResult",
    "CommitLog",
    "RecoveryResult",
    "ScanStop",
    "TagsCodesFn",
    "default_tags_codes",
]

#: Bytes read from a file at a time while scanning.
SCAN_CHUNK_BYTES = 4 << 20


class CommitLog(RecoveryWalk):
    """Mapped files under ``directory`` of ``file_size`` bytes each (thread-safe)."""

    def __init__(self, directory: Path, file_size: int, fs: FileSystem | None = None) -> None:
        self.queue = MappedFileQueue(directory, file_size, fs)
        self.file_size = file_size
        self._lock = threading.Lock()
        self._broken: str | None = None
        self.last_recovery: RecoveryResult | None = None

    # --- lifecycle ------------------------------------------------------------------------

    def load(self, read_only: bool = False) -> None:
        """Map the existing files (all marked full until a recovery trims them).

        ``read_only``: follow a directory another process writes (no recovery, no appends;
        call :meth:`refresh` to see new files)."""
        self.queue.load(read_only)

    def refresh(self) -> None:
        """Read-only followers: pick up files created or deleted by the writer."""
        self.queue.refresh()

    @property
    def file_size_bytes(self) -> int:
        return self.file_size

    def release_pages(self) -> None:
        """Read-only followers: drop the pages the reads mapped (the page cache keeps them)."""
        self.queue.release_pages()

    def close(self) -> None:
        self.queue.close()

    # --- offsets --------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        return self.queue.min_offset

    @property
    def max_offset(self) -> int:
        """Offset just after the last written byte."""
        return self.queue.max_offset

    @property
    def flushed_offset(self) -> int:
        return self.queue.flushed_offset

    def flush(self) -> int:
        """fsync everything written; returns the flushed offset. Raises OSError."""
        return self.queue.flush()

    # --- append ---------------------------------------------------------------------------

    def append(self, batch: EncodedBatch, store_timestamp_ms: int | None = None) -> AppendResult:
        """Append every record of ``batch`` (patching PHYSICALOFFSET, and STORETIMESTAMP when
        given, in the batch buffer). All or nothing: raises StoreNotWritable on I/O failure
        with nothing visible, MessageTooLarge when a record can never fit in a file."""
        with self._lock:
            if self.queue.read_only:
                raise StoreNotWritable("commitlog was opened read-only")
            if self._broken is not None:
                raise StoreNotWritable(f"commitlog is not writable: {self._broken}")
            if store_timestamp_ms is not None:
                batch.patch_store_timestamps(store_timestamp_ms)
            offsets, writes, new_files = plan_append(batch, self.queue)
            batch.patch_physical_offsets(offsets)
            self._execute(writes, new_files)
            return AppendResult(offsets, batch.sizes, self.queue.max_offset, sum(len(w.data) for w in writes))

    def append_record(self, record: bytes, store_timestamp_ms: int | None = None) -> int:
        """Append one encoded record; returns its CommitLog offset."""
        result = self.append(EncodedBatch.from_records([record]), store_timestamp_ms)
        return int(result.commitlog_offsets[0])

    def append_raw(self, offset: int, data: bytes | bytearray | memoryview) -> int:
        """Append bytes copied from another CommitLog (a replica's master) exactly at
        ``offset``; returns the new max offset.

        ``offset`` must be the max offset, or any file-aligned offset when the log is empty (a
        new replica starts at its master's first file). The bytes must lie within one file of
        this log's size (a master never sends across a file end), and a full file is followed
        by the next one. Raises :class:`ReplicationGap` otherwise, with nothing written, and
        :class:`StoreNotWritable` on an I/O error (the bytes written are zeroed again).
        Whether the bytes hold valid records is the caller's to check (they may end inside a
        record that the next call completes).
        """
        with self._lock:
            if self.queue.read_only:
                raise StoreNotWritable("commitlog was opened read-only")
            if self._broken is not None:
                raise StoreNotWritable(f"commitlog is not writable: {self._broken}")
            last = self.queue.last_file()
            empty = last is None or (len(self.queue.files) == 1 and last.wrote_position == 0)
            if offset != self.queue.max_offset and not (empty and offset % self.file_size == 0):
                raise ReplicationGap(
                    f"replicated bytes start at {offset}, the CommitLog ends at {self.queue.max_offset}"
                )
            position = offset % self.file_size
            if position + len(data) > self.file_size:
                raise ReplicationGap(
                    f"{len(data)} replicated bytes at {offset} cross the end of a {self.file_size}-byte "
                    "CommitLog file (do the replicas use the same commitlog_file_size_bytes?)"
                )
            if not data:
                return self.queue.max_offset
            if empty and last is not None and last.start_offset != offset - position:
                self.queue.remove_file(last, f"a replica starts at {offset}")
                last = None
            created = None
            try:
                if last is None or last.is_full:
                    created = self.queue.create_next(offset - position if last is None else None)
                    last = created
                last.append(data)
            except (OSError, ValueError) as exc:
                if created is not None:
                    self.queue.remove_file(created, f"rolling back a failed replicated append ({exc})")
                raise StoreNotWritable(
                    f"replicated append at {offset} failed, nothing written: {exc}"
                ) from exc
            return self.queue.max_offset

    def _execute(self, writes: list[PlannedWrite], new_files: int) -> None:
        """Create the files, then write; on failure undo everything and raise."""
        last = self.queue.last_file()
        files: list[MappedFile] = [last] if last is not None and not last.is_full else []
        created: list[MappedFile] = []
        #: (file, wrote position before this append, end of the furthest attempted write)
        marks: list[tuple[MappedFile, int, int]] = []
        try:
            for _ in range(new_files):
                created.append(self.queue.create_next())
            files.extend(created)
            for write in writes:
                target = files[write.file_index]
                if not marks or marks[-1][0] is not target:
                    marks.append((target, target.wrote_position, target.wrote_position))
                marks[-1] = (target, marks[-1][1], target.wrote_position + len(write.data))
                target.append(write.data)
        except (OSError, ValueError) as exc:
            self._roll_back(marks, created, exc)
            raise StoreNotWritable(f"commitlog append failed, nothing written: {exc}") from exc

    def _roll_back(
        self, marks: list[tuple[MappedFile, int, int]], created: list[MappedFile], exc: Exception
    ) -> None:
        """Zero what the failed append wrote (or may have half-written) and delete the files
        it created; if even that fails, refuse every later append."""
        try:
            for mapped, position, attempted_end in reversed(marks):
                mapped.zero_range(position, attempted_end)
                mapped.truncate_to(position)
            for mapped in reversed(created):
                self.queue.remove_file(mapped, f"rolling back a failed append ({exc})")
        except (OSError, ValueError) as undo_exc:
            self._broken = f"rollback after {exc!r} failed: {undo_exc!r}"
            log.error("commitlog marked not writable: %s", self._broken)
            raise StoreNotWritable(f"commitlog append failed and could not be undone: {undo_exc}") from exc

    # --- reads ----------------------------------------------------------------------------

    def read(self, offset: int, size: int) -> bytes | None:
        """``size`` bytes at ``offset`` (within one file), or None if not (or no longer) there."""
        mapped = self.queue.find_file(offset)
        if mapped is None or size < 0:
            return None
        position = offset - mapped.start_offset
        if position + size > mapped.wrote_position:
            return None
        try:
            return mapped.read(position, size)
        except ValueError:  # the file was deleted meanwhile
            return None

    def view(self, offset: int, length: int) -> memoryview:
        """Zero-copy bytes ``[offset, offset + length)`` within one file.

        Raises DataLost when the range is not in the CommitLog (deleted by retention, or not
        written yet) or crosses a file end. The view stays valid if the file is deleted later.
        """
        mapped = self.queue.find_file(offset)
        if mapped is None and self.queue.read_only:
            self.queue.refresh()
            mapped = self.queue.find_file(offset)
        position = offset - mapped.start_offset if mapped is not None else 0
        if mapped is None or length < 0 or position + length > mapped.wrote_position:
            raise DataLost(
                f"commitlog range [{offset}, {offset + length}) is not available "
                f"(min offset {self.min_offset}, max offset {self.max_offset})"
            )
        try:
            return mapped.view(position, length)
        except ValueError as exc:  # closed by a concurrent deletion
            raise DataLost(f"commitlog file {mapped.path} was deleted") from exc

    def transfer_view(self, offset: int, max_bytes: int) -> memoryview:
        """Zero-copy bytes a master sends a replica from ``offset``: up to ``max_bytes``, never
        across a file end. A file that a later file follows is read to its very end (the zeros
        after its BLANK record included), so the replica's file fills up exactly as RocketMQ's
        does; the last file up to its written end. Empty when nothing is there (yet)."""
        mapped = self.queue.find_file(offset)
        if mapped is None or max_bytes <= 0:
            return memoryview(b"")
        last = self.queue.last_file()
        limit = mapped.size if last is not None and last is not mapped else mapped.wrote_position
        position = offset - mapped.start_offset
        try:
            return mapped.view(position, max(0, min(max_bytes, limit - position)))
        except ValueError:  # deleted meanwhile
            return memoryview(b"")

    def read_range(self, offset: int, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` of written data from ``offset``, never crossing a file end."""
        mapped = self.queue.find_file(offset)
        if mapped is None:
            return b""
        position = offset - mapped.start_offset
        try:
            return mapped.read(position, max(0, min(max_bytes, mapped.wrote_position - position)))
        except ValueError:
            return b""

    def read_record(self, offset: int) -> bytes | None:
        """The stored bytes of the record at ``offset`` (None when absent or not a record)."""
        head = self.read(offset, RECORD_HEADER.size)
        if head is None or len(head) < BLANK_RECORD.size:
            return None
        size = int.from_bytes(head[:4], "big", signed=True)
        return self.read(offset, size) if size > RECORD_HEADER.size else None

    def get_message(self, offset: int) -> MessageView | None:
        """Decode the record at ``offset`` (None when absent or not a record)."""
        head = self.read(offset, RECORD_HEADER.size)
        if head is None or len(head) < BLANK_RECORD.size:
            return None
        size = int.from_bytes(head[:4], "big", signed=True)
        raw = self.read(offset, size) if size > 0 else None
        if raw is None:
            return None
        try:
            return decode_record(raw)
        except CorruptStore:
            return None

    def read_store_timestamp(self, offset: int) -> int | None:
        """STORETIMESTAMP of the record at ``offset`` (RocketMQ ``pickupStoreTimestamp``)."""
        raw = self.read(offset + STORE_TIMESTAMP_POS, 8)
        return int.from_bytes(raw, "big", signed=True) if raw is not None and len(raw) == 8 else None

    # --- scanning -------------------------------------------------------------------------

    def _runs(
        self, from_offset: int, check_crc: bool, stop: ScanStop, until_file: int | None = None
    ) -> Iterator[tuple[int, bytes, RecordRun]]:
        """Yield (absolute offset of ``chunk[0]``, chunk, run of valid records) from
        ``from_offset`` up to the written end, or up to the file starting at ``until_file``;
        fills ``stop`` with where and why it ended."""
        stop.offset = from_offset
        if until_file is not None and from_offset >= until_file:
            return
        mapped = self.queue.find_file(from_offset)
        while mapped is not None:
            position, limit = from_offset - mapped.start_offset, mapped.wrote_position
            want = SCAN_CHUNK_BYTES
            while True:
                if position >= limit:
                    stop.reason = "end of data"
                    return
                chunk = mapped.read(position, min(limit - position, want))
                run = validate_run(chunk, check_crc)
                if len(run):
                    yield mapped.start_offset + position, chunk, run
                    position += run.end
                    stop.offset = mapped.start_offset + position
                rest = len(chunk) - run.end
                if position + rest < limit:  # the chunk stops short of the written end
                    size = int.from_bytes(chunk[run.end : run.end + 4], "big") if rest >= 4 else 0
                    if rest < BLANK_RECORD.size or size > rest:  # next record cut by the chunk
                        want = max(SCAN_CHUNK_BYTES, size)
                        continue
                check = check_record(chunk, run.end, check_crc)
                if check.status is RecordStatus.BLANK:
                    break
                if check.status is RecordStatus.OK:
                    raise CorruptStore(f"record checks disagree at offset {stop.offset} in {mapped.path}")
                stop.reason, stop.corrupt = check.reason, check.status is RecordStatus.CORRUPT
                return
            nxt = self.queue.find_file(mapped.start_offset + self.file_size)
            if nxt is not None and until_file is not None and nxt.start_offset >= until_file:
                stop.offset, stop.reason = nxt.start_offset, "end of the files asked for"
                return
            if nxt is None:
                stop.reason = "blank record at the end of the last file"
                return
            mapped, from_offset = nxt, nxt.start_offset
            stop.offset = from_offset

    def scan(
        self,
        from_offset: int,
        check_crc: bool = False,
        *,
        max_records: int = 4096,
        tags_codes_for: TagsCodesFn = default_tags_codes,
        until_file: int | None = None,
        stop: ScanStop | None = None,
    ) -> Iterator[DispatchBatch]:
        """Parse records from ``from_offset`` into DispatchBatch chunks of at most
        ``max_records``, stopping at the written end, at the first bad record or before the
        file that starts at ``until_file``; ``stop`` (when given) says where and why."""
        stop = stop if stop is not None else ScanStop(from_offset)
        for base, chunk, run in self._runs(from_offset, check_crc, stop, until_file):
            for lo in range(0, len(run), max_records):
                yield run_dispatch_batch(
                    base, chunk, run, lo, min(lo + max_records, len(run)), tags_codes_for
                )

    # --- maintenance ----------------------------------------------------------------------

    def truncate(self, offset: int) -> None:
        """Drop everything from ``offset`` on (a failed put's undo / tests)."""
        with self._lock:
            self.queue.truncate(offset)

    def truncate_durably(self, offset: int, reason: str) -> None:
        """Drop everything from ``offset`` on so that no crash can bring it back: the file
        holding ``offset`` is zeroed from there (each chunk written and msync'ed, which is
        fsync of that range: the fixed-size file stays mapped by readers, so it is not shrunk),
        later files are unlinked, then the directory is fsynced. Returns once all is durable;
        raises OSError otherwise."""
        with self._lock:
            self.queue.truncate(offset, reason=reason)
            self.queue.fs.sync_dir(self.queue.directory)

    def expired_end(self, expired_before_ms: int, max_files: int = 10, force: bool = False) -> int:
        """Where the log would start after :meth:`delete_expired_files` with these arguments
        (the min offset when it would delete nothing); deletes nothing."""
        return self.queue.expired_end(expired_before_ms, max_files, force)

    def delete_expired_files(self, expired_before_ms: int, max_files: int = 10, force: bool = False) -> int:
        """Delete the oldest files last modified before ``expired_before_ms`` (every file but
        the last when ``force``); returns how many were deleted."""
        return len(self.queue.delete_expired(expired_before_ms, max_files, force))
