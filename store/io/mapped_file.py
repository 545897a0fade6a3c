"""Fixed-size memory-mapped files and the directory of them (RocketMQ ``MappedFile(Queue)``).

A :class:`MappedFileQueue` is a directory of equal-size files, each named by the absolute
offset of its first byte as 20 zero-padded digits (``00000000001073741824``), so offset
``o`` lives in the file starting at ``o - o % file_size``. The CommitLog sits on it; nothing
in it is CommitLog-specific (file size, directory and naming are parameters).

Positions: ``wrote_position`` is where the next append goes, ``flushed_position`` how far
``flush`` has made the file durable. Bytes past ``wrote_position`` are always zero (appends
roll back by zeroing, truncation zeroes the tail), so a crash never resurrects stale records.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Sequence
from pathlib import Path

from store.errors import CorruptStore, InvalidArgument
from store.io.file_names import file_name_to_offset, offset_to_file_name
from store.io.fs import FileHandle, FileSystem, OsFileSystem, Writable

log = logging.getLogger("sparkmq.store")

#: Chunk used to find and zero dirty tails.
_ZERO_CHUNK = bytes(1 << 20)


class MappedFile:
    """One fixed-size file; appends are not thread-safe (the owner serialises them)."""

    def __init__(self, handle: FileHandle, start_offset: int) -> None:
        self._handle = handle
        self.start_offset = start_offset
        self.size = handle.size
        self.wrote_position = 0
        self.flushed_position = 0
        self._flush_lock = threading.Lock()

    @property
    def path(self) -> Path:
        return self._handle.path

    @property
    def end_offset(self) -> int:
        """Absolute offset just after the last written byte."""
        return self.start_offset + self.wrote_position

    @property
    def remaining(self) -> int:
        return self.size - self.wrote_position

    @property
    def is_full(self) -> bool:
        return self.wrote_position >= self.size

    def append(self, data: Writable) -> int:
        """Write ``data`` at the wrote position and advance it; returns the file position.

        The bytes are allocated first (:meth:`FileHandle.reserve`, a step ahead), so readers
        may map them and a full disk is an ``OSError(ENOSPC)`` here. On failure the position
        does not move (whatever the write left behind is past it).
        """
        position = self.wrote_position
        if len(data) > self.size - position:
            raise InvalidArgument(f"{len(data)} bytes do not fit in {self.path} at {position}")
        self._handle.reserve(position + len(data))
        self._handle.write(position, data)
        self.wrote_position = position + len(data)
        return position

    def write_at(self, position: int, data: Writable) -> None:
        """Overwrite bytes below the wrote position (used by the checkpoint and tests)."""
        self._handle.write(position, data)

    def read(self, position: int, length: int) -> bytes:
        """Copy of ``[position, position + length)`` clipped to the file size."""
        return self._handle.read(position, length)

    def view(self, position: int, length: int) -> memoryview:
        """Zero-copy ``[position, position + length)``; valid even after the file is deleted."""
        return self._handle.view(position, length)

    def flush(self) -> int:
        """fsync ``[flushed, wrote)``; returns the new flushed position. Raises OSError."""
        with self._flush_lock:
            target = self.wrote_position
            if target > self.flushed_position:
                self._handle.sync(self.flushed_position, target)
                self.flushed_position = target
            return self.flushed_position

    def truncate_to(self, position: int) -> None:
        """Forget everything from ``position`` on: zero ``[position, wrote)`` (bytes past the
        wrote position are zero already; a freshly loaded file counts as fully written) and
        move both positions back. Never moves them forward."""
        position = max(0, min(position, self.wrote_position))
        self.zero_range(position, self.wrote_position)
        self.wrote_position = position
        self.flushed_position = min(self.flushed_position, position)

    def zero_range(self, position: int, end: int) -> None:
        """Zero ``[position, end)`` chunk by chunk, skipping chunks that are already zero and
        holes of the sparse file (never written, so zero without being read)."""
        for begin, stop in self._handle.data_ranges(position, min(end, self.size)):
            for at in range(begin, stop, len(_ZERO_CHUNK)):
                length = min(len(_ZERO_CHUNK), stop - at)
                if self._handle.read(at, length) != _ZERO_CHUNK[:length]:
                    self._handle.write(at, _ZERO_CHUNK[:length])
                    self._handle.sync(at, at + length)

    def release_pages(self) -> None:
        self._handle.release_pages()

    def close(self) -> None:
        self._handle.close()


class MappedFileQueue:
    """A directory of equal-size :class:`MappedFile` s named by their start offsets.

    Readers use a copy-on-write snapshot of the file list and never block; structural changes
    (create, roll, delete, truncate) take an internal lock.
    """

    def __init__(self, directory: Path, file_size: int, fs: FileSystem | None = None) -> None:
        if file_size <= 0:
            raise InvalidArgument(f"file_size must be > 0, got {file_size}")
        self.directory = directory
        self.file_size = file_size
        self.fs: FileSystem = fs if fs is not None else OsFileSystem()
        self._files: list[MappedFile] = []
        self._starts: list[int] = []
        self._lock = threading.Lock()
        #: Start offset of the next file when the queue is empty (kept across deletions).
        self._next_start = 0
        self.read_only = False

    # --- loading --------------------------------------------------------------------------

    def load(self, read_only: bool = False) -> None:
        """Map every file in the directory. All are marked full; recovery trims the last ones.

        A short *last* file (torn extension, manual truncation) is extended with zeros; a
        file of the wrong size anywhere else raises CorruptStore. ``read_only`` maps files
        for reading only and changes nothing on disk (a follower of another process).
        """
        self.read_only = read_only
        if not read_only:
            self.fs.make_dirs(self.directory)
        named = self._list()
        files: list[MappedFile] = []
        for i, (start, name) in enumerate(named):
            path = self.directory / name
            if start % self.file_size:
                raise CorruptStore(f"{path}: start offset is not a multiple of {self.file_size}")
            if i and start != named[i - 1][0] + self.file_size:
                raise CorruptStore(f"{path}: gap after {named[i - 1][1]}")
            actual = self.fs.file_size(path)
            if actual != self.file_size:
                if i != len(named) - 1 or actual > self.file_size:
                    raise CorruptStore(f"{path} is {actual} bytes, expected {self.file_size}")
                if read_only:
                    break  # the writer is still creating it
                log.warning("extending short last file %s from %d to %d bytes", path, actual, self.file_size)
                self.fs.resize(path, self.file_size)
            files.append(self._open(path, start))
        with self._lock:
            self._set_files(files)
            if files:
                self._next_start = files[-1].start_offset + self.file_size

    def refresh(self) -> None:
        """Read-only followers: map files the writer created, drop files it deleted."""
        present = {start for start, _ in self._list()}
        with self._lock:
            keep = [f for f in self._files if f.start_offset in present]
            for gone in self._files:
                if gone.start_offset not in present:
                    gone.close()
            nxt = keep[-1].start_offset + self.file_size if keep else min(present, default=self._next_start)
            while nxt in present:
                path = self.directory / offset_to_file_name(nxt)
                if self.fs.file_size(path) != self.file_size:
                    break
                keep.append(self._open(path, nxt))
                nxt += self.file_size
            self._set_files(keep)
            self._next_start = max(self._next_start, nxt)

    def _list(self) -> list[tuple[int, str]]:
        return sorted(
            (start, name)
            for name in self.fs.list_dir(self.directory)
            if (start := file_name_to_offset(name)) is not None
        )

    def _open(self, path: Path, start: int) -> MappedFile:
        mapped = MappedFile(self.fs.open(path, read_only=self.read_only), start)
        mapped.wrote_position = mapped.flushed_position = self.file_size
        return mapped

    def _set_files(self, files: list[MappedFile]) -> None:
        self._files = files
        self._starts = [f.start_offset for f in files]

    # --- queries (lock-free) --------------------------------------------------------------

    @property
    def files(self) -> Sequence[MappedFile]:
        """Snapshot of the files, oldest first."""
        return self._files

    def first_file(self) -> MappedFile | None:
        files = self._files
        return files[0] if files else None

    def last_file(self) -> MappedFile | None:
        files = self._files
        return files[-1] if files else None

    def find_file(self, offset: int) -> MappedFile | None:
        """The file holding absolute ``offset`` (None if deleted or not created yet)."""
        files, starts = self._files, self._starts
        i = bisect.bisect_right(starts, offset) - 1
        if i < 0 or offset >= starts[i] + self.file_size:
            return None
        return files[i]

    @property
    def min_offset(self) -> int:
        """Start of the oldest file (the next file's start when there is none)."""
        files = self._files
        return files[0].start_offset if files else self._next_start

    @property
    def max_offset(self) -> int:
        """End of the written data."""
        files = self._files
        return files[-1].end_offset if files else self._next_start

    @property
    def flushed_offset(self) -> int:
        files = self._files
        for mapped in reversed(files):
            if mapped.flushed_position > 0:
                return mapped.start_offset + mapped.flushed_position
        return files[0].start_offset if files else self._next_start

    # --- growth ---------------------------------------------------------------------------

    def create_next(self, start_offset: int | None = None) -> MappedFile:
        """Create the file after the last one (or at ``start_offset`` when empty)."""
        with self._lock:
            last = self._files[-1] if self._files else None
            start = last.start_offset + self.file_size if last else self._next_start
            if start_offset is not None:
                if last is not None and start_offset != start:
                    raise InvalidArgument(f"next file must start at {start}, not {start_offset}")
                start = start_offset - start_offset % self.file_size
            self.fs.make_dirs(self.directory)
            path = self.directory / offset_to_file_name(start)
            mapped = MappedFile(self.fs.create(path, self.file_size), start)
            self.fs.sync_dir(self.directory)
            self._set_files([*self._files, mapped])
            self._next_start = start + self.file_size
            return mapped

    def writable_file(self) -> MappedFile:
        """The last file if it has room, else a newly created next file."""
        last = self._files[-1] if self._files else None
        if last is not None and not last.is_full:
            return last
        return self.create_next()

    def remove_file(self, mapped: MappedFile, reason: str) -> None:
        """Close and delete one file (the last or the first only)."""
        with self._lock:
            if mapped not in self._files:
                return
            if mapped is not self._files[0] and mapped is not self._files[-1]:
                raise InvalidArgument(f"refusing to delete {mapped.path} from the middle of the queue")
            self._set_files([f for f in self._files if f is not mapped])
            if not self._files and mapped.start_offset + self.file_size > self._next_start:
                self._next_start = mapped.start_offset + self.file_size
        log.info("deleting %s (%s)", mapped.path, reason)
        mapped.close()
        self.fs.remove(mapped.path)

    # --- maintenance ----------------------------------------------------------------------

    def flush(self) -> int:
        """fsync every file with unflushed bytes; returns the flushed offset."""
        for mapped in self._files:
            if mapped.flushed_position < mapped.wrote_position:
                try:
                    mapped.flush()
                except ValueError:  # closed: fine if retention deleted it meanwhile
                    if mapped in self._files:
                        raise
        return self.flushed_offset

    def truncate(self, offset: int, reason: str = "truncate") -> None:
        """Drop everything at or beyond ``offset``: trim its file, delete later files."""
        for mapped in reversed(list(self._files)):
            if mapped.start_offset + self.file_size <= offset:
                break
            if offset < mapped.start_offset:
                self.remove_file(mapped, f"{reason}: beyond offset {offset}")
            else:
                position = offset - mapped.start_offset
                if position < mapped.wrote_position:
                    log.info("truncating %s at %d (offset %d): %s", mapped.path, position, offset, reason)
                mapped.truncate_to(position)
        with self._lock:
            if not self._files:
                self._next_start = offset - offset % self.file_size

    def expired_end(self, expired_before_ms: int, max_files: int = 10, force: bool = False) -> int:
        """Start offset of the first file :meth:`delete_expired` would keep (same arguments)."""
        files = list(self._files)
        kept = len(files) - 1 if files else 0
        for number, mapped in enumerate(files[:-1]):
            if number >= max_files or (not force and self.fs.mtime_ms(mapped.path) >= expired_before_ms):
                kept = number
                break
        return files[kept].start_offset if files else 0

    def delete_expired(self, expired_before_ms: int, max_files: int = 10, force: bool = False) -> list[Path]:
        """Delete the oldest files last modified before ``expired_before_ms`` (all old files
        when ``force``), stopping at the first one kept; never the last file."""
        deleted: list[Path] = []
        for mapped in list(self._files)[:-1]:
            if len(deleted) >= max_files:
                break
            if not force and self.fs.mtime_ms(mapped.path) >= expired_before_ms:
                break
            self.remove_file(mapped, "expired" if not force else "forced clean-up")
            deleted.append(mapped.path)
        return deleted

    def delete_before(self, offset: int, max_files: int = 10) -> list[Path]:
        """Delete the oldest files that end at or before ``offset``; never the last file."""
        deleted: list[Path] = []
        for mapped in list(self._files)[:-1]:
            if len(deleted) >= max_files or mapped.start_offset + self.file_size > offset:
                break
            self.remove_file(mapped, f"ends before offset {offset}")
            deleted.append(mapped.path)
        return deleted

    def release_pages(self) -> None:
        """Read-only followers: drop the pages the reads mapped (:meth:`FileHandle.release_pages`)."""
        for mapped in self._files:  # a snapshot (the list is replaced, never changed in place)
            mapped.release_pages()

    def close(self) -> None:
        with self._lock:
            files, self._files, self._starts = self._files, [], []
        for mapped in files:
            mapped.close()
