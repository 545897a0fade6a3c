"""ConsumeQueue: the per-(topic, queueId) index of CommitLog positions, as mapped files.

The unit layout is in :mod:`store.consumequeue.units`. Files live in
``consumequeue/{topic}/{queueId}/`` and hold ``units_per_file`` units each. A queue whose first
unit is not at a file boundary (rebuilt after retention) has its file's leading units filled
with blank units.

Publication protocol for readers in other processes (read-only mode): a span of units is
copied into the shared mmap with the first unit's ``size`` field written *last*. Until then
that field is 0, so a concurrent scanner stops before the span and never sees a torn unit.

:class:`~store.consumequeue.queue_store.ConsumeQueueStore` owns every queue of a store
directory and builds them from dispatch batches.

Length: about 500 lines: one queue's files serve both the writer (with the publication
protocol above) and lock-free followers; both walk the same file list and change together.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from store.consumequeue.units import (
    BLANK_UNIT_SIZE,
    CQ_UNIT_DTYPE,
    CQ_UNIT_SIZE,
    I32,
    I64,
    SIZE_END,
    SIZE_POS,
    Units,
    encode_unit,
    encode_units,
    end_marker,
    first_true,
    leftmost,
)
from store.errors import CorruptStore, InvalidArgument, StoreError
from store.io.file_names import file_name_to_offset, offset_to_file_name
from store.io.fs import FileHandle, FileSystem, OsFileSystem
from store.types import Boundary

log = logging.getLogger(__name__)


class _CQFile:
    """One mapped ConsumeQueue file; ``units``/``raw`` are views over the mapping."""

    def __init__(self, path: Path, first_offset: int, handle: FileHandle) -> None:
        self.path = path
        self.first_offset = first_offset  # queue offset of unit 0
        self.handle = handle
        self.raw: npt.NDArray[np.uint8] = np.frombuffer(handle.view(0, handle.size), dtype=np.uint8)
        self.units: Units = self.raw.view(CQ_UNIT_DTYPE)

    @property
    def end_offset(self) -> int:
        return self.first_offset + len(self.units)

    @staticmethod
    def open(
        fs: FileSystem, path: Path, first_offset: int, file_size: int, *, writable: bool
    ) -> _CQFile | None:
        """Map ``path`` (a writer creates it); ``None`` (read-only) when the file is not yet
        fully allocated."""
        if writable and not fs.exists(path):
            return _CQFile(path, first_offset, fs.create(path, file_size))
        actual = fs.file_size(path)
        if actual > file_size:
            raise CorruptStore(f"{path}: size {actual} is larger than the configured {file_size}")
        if actual < file_size:
            if not writable:
                return None
            fs.resize(path, file_size)  # torn while being created
        return _CQFile(path, first_offset, fs.open(path, read_only=not writable))

    def sync(self) -> None:
        """msync the whole file; raises OSError."""
        self.handle.sync(0, self.handle.size)

    def close(self) -> None:
        del self.units, self.raw
        # A caller may still hold a zero-copy view from read_units(); the mapping is then
        # released when the last view is garbage-collected.
        self.handle.close()


class ConsumeQueue:
    """The ConsumeQueue of one (topic, queueId).

    Offsets are queue offsets (unit indexes). ``min_offset`` is the first readable unit,
    ``max_offset`` the next one to be written. Writes come from one dispatcher thread; reads
    may run concurrently from any thread: file lists are replaced, never mutated in place, and
    a deleted file is only unlinked, its mapping released when the last reader drops it.
    """

    def __init__(
        self, directory: Path, units_per_file: int, *, read_only: bool = False, fs: FileSystem | None = None
    ) -> None:
        if units_per_file < 1:
            raise InvalidArgument(f"units_per_file must be >= 1, got {units_per_file}")
        self.directory = directory
        self.units_per_file = units_per_file
        self.file_size_bytes = units_per_file * CQ_UNIT_SIZE
        self.read_only = read_only
        self._fs: FileSystem = fs if fs is not None else OsFileSystem()
        self._lock = threading.Lock()
        self._files: list[_CQFile] = []
        self._min = 0
        self._max = 0
        self._flushed = 0
        if not read_only:
            directory.mkdir(parents=True, exist_ok=True)
        self._files = self._load_files()
        self._max = self._scan_max(self._files, max(0, len(self._files) - 3))
        self._min = self._first_real_unit(0)
        self._flushed = self._max

    # Loading / scanning ----------------------------------------------------------------------
    def _listed(self) -> list[tuple[int, Path]]:
        if not self.directory.is_dir():
            return []
        found = []
        for path in self.directory.iterdir():
            start = file_name_to_offset(path.name)
            if start is None:
                continue
            if start % self.file_size_bytes:
                raise CorruptStore(f"{path}: start offset is not a multiple of {self.file_size_bytes}")
            found.append((start // CQ_UNIT_SIZE, path))
        found.sort()
        for (a, path), (b, _) in itertools.pairwise(found):
            if b != a + self.units_per_file:
                raise CorruptStore(f"{self.directory}: file after {path.name} is missing")
        return found

    def _load_files(self) -> list[_CQFile]:
        files: list[_CQFile] = []
        for first_offset, path in self._listed():
            f = _CQFile.open(self._fs, path, first_offset, self.file_size_bytes, writable=not self.read_only)
            if f is None:
                break
            files.append(f)
        return files

    @staticmethod
    def _scan_max(files: list[_CQFile], start_index: int, from_offset: int = 0) -> int:
        """Queue offset of the first end-marker unit in ``files[start_index:]`` at/after ``from_offset``."""
        if not files:
            return from_offset
        for f in files[start_index:]:
            local = max(0, from_offset - f.first_offset)
            backed = f.handle.backed_end // CQ_UNIT_SIZE  # past it: never written, and unsafe
            hit = first_true(end_marker(f.units[local:backed]))
            if hit is not None:
                return f.first_offset + local + hit
            if backed < len(f.units):  # the rest is a hole: zero units, the end marker
                return f.first_offset + max(local, backed)
        return files[-1].end_offset

    def _first_real_unit(self, min_commitlog_offset: int) -> int:
        """First unit in ``[first file, max)`` that is not blank and points at/after the bound."""
        files, hi = self._files, self._max
        if not files:
            return hi

        def real(positions: I64) -> npt.NDArray[np.bool_]:
            units = self._units_at(files, positions)
            return (units["size"] != BLANK_UNIT_SIZE) & (units["offset"] >= min_commitlog_offset)  # type: ignore[no-any-return]

        return leftmost(min(files[0].first_offset, hi), hi, real)

    @staticmethod
    def _units_at(files: list[_CQFile], positions: I64) -> Units:
        """Gather units at arbitrary queue offsets (all within the files)."""
        index = (positions - files[0].first_offset) // len(files[0].units)
        out = np.empty(len(positions), dtype=CQ_UNIT_DTYPE)
        for file_index in np.unique(index):
            mask = index == file_index
            f = files[int(file_index)]
            out[mask] = f.units[positions[mask] - f.first_offset]
        return out

    def _snapshot(self) -> tuple[list[_CQFile], int, int]:
        """Files and the ``[min, max)`` range they cover, consistent without taking the lock.

        ``max`` is read first: the writer appends a file before moving ``max`` into it, so the
        files read afterwards cover it; the range is clamped in case retention or a cut ran.
        """
        hi, lo, files = self._max, self._min, self._files
        if not files:
            return files, hi, hi
        lo = max(lo, files[0].first_offset)
        return files, lo, max(lo, min(hi, files[-1].end_offset))

    # Queries ---------------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        return self._min

    @property
    def max_offset(self) -> int:
        """The next queue offset to be written."""
        return self._max

    def read_units(self, start: int, max_units: int) -> Units:
        """Units ``[start, min(start + max_units, max_offset))`` as a read-only structured array.

        Zero-copy view when the range sits in one file, a copy when it spans files. Empty
        when ``start`` is outside ``[min_offset, max_offset)``.
        """
        files, lo, hi = self._snapshot()
        end = min(hi, start + max(0, max_units))
        if start < lo or start >= end:
            return np.empty(0, dtype=CQ_UNIT_DTYPE)
        pieces = []
        base = files[0].first_offset
        pos = start
        while pos < end:
            f = files[(pos - base) // self.units_per_file]
            stop = min(end, f.end_offset)
            pieces.append(f.units[pos - f.first_offset : stop - f.first_offset])
            pos = stop
        view = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
        view.flags.writeable = False
        return view

    def max_offset_within(self, commitlog_end: int) -> int:
        """The max offset a reader bounded by ``commitlog_end`` sees: units whose record ends at
        or below it (a replica's confirm offset). CommitLog offsets grow with queue offsets,
        so that is a prefix; O(1) when the last unit qualifies, a k-ary search otherwise."""
        files, lo, hi = self._snapshot()
        if lo >= hi:
            return hi

        def beyond(positions: I64) -> npt.NDArray[np.bool_]:
            units = self._units_at(files, positions)
            real = units["size"] != BLANK_UNIT_SIZE
            return real & (units["offset"] + units["size"] > commitlog_end)  # type: ignore[no-any-return]

        if not bool(beyond(np.array([hi - 1], dtype=np.int64))[0]):
            return hi
        return leftmost(lo, hi - 1, beyond)

    def get_unit(self, queue_offset: int) -> tuple[int, int, int] | None:
        """``(commitlog_offset, size, tags_code)`` or None outside ``[min, max)``."""
        units = self.read_units(queue_offset, 1)
        if len(units) == 0:
            return None
        return int(units["offset"][0]), int(units["size"][0]), int(units["tags_code"][0])

    def last_commitlog_end(self) -> int:
        """``offset + size`` of the last unit (0 when the queue is empty)."""
        unit = self.get_unit(self._max - 1)
        return 0 if unit is None else unit[0] + unit[1]

    def offset_for_timestamp(
        self,
        timestamp_ms: int,
        boundary: Boundary,
        store_ts_of: Callable[[I64, I32], I64],
        min_commitlog_offset: int = 0,
    ) -> int:
        """Queue offset for a store timestamp, by k-ary search over CommitLog store times.

        ``store_ts_of(commitlog_offsets, sizes)`` returns the store timestamps (ms) of those
        records. Units pointing below ``min_commitlog_offset`` (deleted CommitLog) are skipped.

        * LOWER: leftmost offset whose store ts >= T; ``max_offset`` when every ts < T.
        * UPPER: last offset whose store ts <= T, i.e. ``LOWER(T + 1) - 1``; one less than
          the first searchable offset when T precedes every message.
        """
        files, lo, hi = self._snapshot()
        if lo < hi:
            lo = leftmost(lo, hi, lambda p: self._units_at(files, p)["offset"] >= min_commitlog_offset)
        target = timestamp_ms if boundary is Boundary.LOWER else timestamp_ms + 1

        def at_or_after(positions: I64) -> npt.NDArray[np.bool_]:
            units = self._units_at(files, positions)
            ts = store_ts_of(units["offset"].astype(np.int64), units["size"].astype(np.int32))
            return np.asarray(ts) >= target

        first = leftmost(lo, hi, at_or_after)
        return first if boundary is Boundary.LOWER else first - 1

    # Writes ----------------------------------------------------------------------------------
    def _require_writable(self) -> None:
        if self.read_only:
            raise StoreError(f"{self.directory}: ConsumeQueue opened read-only")

    def put_units(self, queue_offsets: I64, commitlog_offsets: I64, sizes: I32, tags_codes: I64) -> int:
        """Append consecutive units; returns how many were written.

        Idempotent like RocketMQ ``putMessagePositionInfo``: units below ``max_offset`` are
        skipped. A gap after ``max_offset`` raises :class:`InvalidArgument`, except in a queue
        without files, which may start anywhere (a rebuild after retention).
        """
        self._require_writable()
        queue_offsets = np.asarray(queue_offsets, dtype=np.int64)
        n = len(queue_offsets)
        if n == 0:
            return 0
        if n > 1 and not bool(np.all(np.diff(queue_offsets) == 1)):
            raise InvalidArgument(f"{self.directory}: queue offsets of one put must be consecutive")
        first = int(queue_offsets[0])
        with self._lock:
            skip = self._skip_count(first)
            if skip >= n:
                return 0
            units = encode_units(
                np.asarray(commitlog_offsets[skip:]), np.asarray(sizes[skip:]), np.asarray(tags_codes[skip:])
            )
            self._write(units)
            return n - skip

    def put_unit(self, queue_offset: int, commitlog_offset: int, size: int, tags_code: int) -> bool:
        """Scalar :meth:`put_units` (the one-message put path); True when written."""
        self._require_writable()
        unit = encode_unit(commitlog_offset, size, tags_code)
        with self._lock:
            if self._skip_count(queue_offset) >= 1:
                return False
            f = self._file_for(self._max)
            at = (self._max - f.first_offset) * CQ_UNIT_SIZE
            f.handle.reserve(at + CQ_UNIT_SIZE)
            raw = np.frombuffer(unit, dtype=np.uint8)
            f.raw[at : at + SIZE_POS] = raw[:SIZE_POS]
            f.raw[at + SIZE_END : at + CQ_UNIT_SIZE] = raw[SIZE_END:]
            f.raw[at + SIZE_POS : at + SIZE_END] = raw[SIZE_POS:SIZE_END]  # commit point
            self._max += 1
            return True

    def _skip_count(self, first: int) -> int:
        """How many leading units of a put starting at ``first`` are already written (lock held)."""
        if not self._files and first > self._max:
            self._min = self._max = self._flushed = first
        skip = self._max - first
        if skip < 0:
            raise InvalidArgument(
                f"{self.directory}: queue offset {first} leaves a gap after max offset {self._max}"
            )
        return skip

    def _write(self, units: Units) -> None:
        """Write through the mappings, every file's span allocated first: a full disk raises
        OSError(ENOSPC) before any unit is written (and never SIGBUS)."""
        data = units.view(np.uint8)
        spans: list[tuple[_CQFile, int, npt.NDArray[np.uint8]]] = []
        i, position = 0, self._max
        while i < len(units):
            f = self._file_for(position)
            local = position - f.first_offset
            count = min(len(units) - i, self.units_per_file - local)
            at = local * CQ_UNIT_SIZE
            f.handle.reserve(at + count * CQ_UNIT_SIZE)
            spans.append((f, at, data[i * CQ_UNIT_SIZE : (i + count) * CQ_UNIT_SIZE]))
            i, position = i + count, position + count
        for f, at, span in spans:
            end = at + len(span)
            f.raw[at : at + SIZE_POS] = span[:SIZE_POS]
            f.raw[at + SIZE_END : end] = span[SIZE_END:]
            f.raw[at + SIZE_POS : at + SIZE_END] = span[SIZE_POS:SIZE_END]  # commit point
            self._max += len(span) // CQ_UNIT_SIZE

    def _file_for(self, queue_offset: int) -> _CQFile:
        files = self._files
        if files and queue_offset < files[-1].end_offset:
            return files[-1]
        first_offset = queue_offset - queue_offset % self.units_per_file
        path = self.directory / offset_to_file_name(first_offset * CQ_UNIT_SIZE)
        f = _CQFile.open(self._fs, path, first_offset, self.file_size_bytes, writable=True)
        assert f is not None  # writable opens always allocate
        if not files and queue_offset > first_offset:
            blank = encode_units(
                np.zeros(queue_offset - first_offset, dtype=np.int64),
                np.full(queue_offset - first_offset, BLANK_UNIT_SIZE, dtype=np.int32),
                np.zeros(queue_offset - first_offset, dtype=np.int64),
            )
            try:
                f.handle.reserve(len(blank) * CQ_UNIT_SIZE)
            except OSError:
                f.close()
                raise
            f.raw[: len(blank) * CQ_UNIT_SIZE] = blank.view(np.uint8)
        self._files = [*files, f]
        return f

    def _cut(self, new_max: int, reason: str) -> None:
        """Zero units from ``new_max`` on and delete files that start after it.

        The file that holds ``new_max`` is kept (even when ``new_max`` is its first unit), so a
        reopened queue finds the same min/max offsets.
        """
        keep = [f for f in self._files if f.first_offset <= new_max]
        if new_max < self._max or len(keep) < len(self._files):
            log.warning(
                "%s: ConsumeQueue cut from max offset %d to %d, %d file(s) deleted (%s)",
                self.directory,
                self._max,
                new_max,
                len(self._files) - len(keep),
                reason,
            )
        for f in self._files[len(keep) :]:
            self._fs.remove(f.path)  # through the seam: a simulated crash must know it is gone
        self._files = keep
        if keep:
            f = keep[-1]
            start = (new_max - f.first_offset) * CQ_UNIT_SIZE
            tail = f.raw[start : max(start, f.handle.backed_end)]  # past it: a hole, zero
            if tail.any():
                tail[:] = 0
        self._max = new_max
        self._min = min(self._min, new_max)
        self._flushed = min(self._flushed, new_max)

    def truncate_dirty(self, max_commitlog_offset: int, *, durable: bool = False) -> int:
        """Drop units whose record ends beyond ``max_commitlog_offset``; returns the new max.

        ``durable``: the cut file is msync'ed and the directory fsynced (files deleted) before
        returning, so a power loss cannot bring the units back (a replica's truncation)."""
        self._require_writable()
        new_max = self._truncate_dirty(max_commitlog_offset)
        if durable:
            files = self._files
            if files:
                files[-1].sync()
            if self.directory.is_dir():
                self._fs.sync_dir(self.directory)
        return new_max

    def _truncate_dirty(self, max_commitlog_offset: int) -> int:
        with self._lock:
            files = self._files

            def dirty(positions: I64) -> npt.NDArray[np.bool_]:
                units = self._units_at(files, positions)
                real = units["size"] != BLANK_UNIT_SIZE
                return real & (units["offset"] + units["size"] > max_commitlog_offset)  # type: ignore[no-any-return]

            new_max = leftmost(self._min, self._max, dirty)
            if new_max < self._max:
                self._cut(new_max, f"units end beyond the valid CommitLog end {max_commitlog_offset}")
            return self._max

    def recover(self) -> int:
        """Re-scan the last three files for the end marker, clear anything after it."""
        self._require_writable()
        with self._lock:
            self._cut(self._scan_max(self._files, max(0, len(self._files) - 3)), "first unwritten unit")
            return self._max

    def correct_min_offset(self, min_commitlog_offset: int) -> int:
        """Move ``min_offset`` to the first unit pointing at/after ``min_commitlog_offset``."""
        with self._lock:
            self._min = max(self._min, self._first_real_unit(min_commitlog_offset))
            return self._min

    def delete_files_below(self, min_commitlog_offset: int) -> int:
        """Retention: delete whole files (never the last) whose last unit points below the bound."""
        self._require_writable()
        deleted = 0
        with self._lock:
            while len(self._files) > 1 and int(self._files[0].units["offset"][-1]) < min_commitlog_offset:
                log.info("%s: retention deletes %s", self.directory, self._files[0].path.name)
                self._files[0].path.unlink(missing_ok=True)
                self._files = self._files[1:]
                deleted += 1
        self.correct_min_offset(min_commitlog_offset)
        return deleted

    def refresh(self) -> int:
        """Read-only mode: pick up new and deleted files and units; returns ``max_offset``."""
        if not self.read_only:
            return self._max
        with self._lock:
            listed = self._listed()
            known = {f.path.name: f for f in self._files}
            files: list[_CQFile] = []
            for first_offset, path in listed:
                f = known.pop(path.name, None) or _CQFile.open(
                    self._fs, path, first_offset, self.file_size_bytes, writable=False
                )
                if f is None:
                    break
                files.append(f)
            self._files = files
            if files:
                self._max = self._rescan_max(files, self._max)
                self._min = min(max(self._min, self._first_real_unit(0)), self._max)
            return self._max

    @classmethod
    def _rescan_max(cls, files: list[_CQFile], known_max: int) -> int:
        """Scan on from ``known_max``, or from the start when the writer cut below it."""
        first = files[0].first_offset
        stale = known_max < first or known_max > files[-1].end_offset
        if not stale and known_max > first:
            last = cls._units_at(files, np.array([known_max - 1], dtype=np.int64))
            stale = bool(end_marker(last)[0])
        if stale:
            return cls._scan_max(files, 0, first)
        start = next((i for i, f in enumerate(files) if f.end_offset > known_max), len(files))
        return cls._scan_max(files, start, known_max)

    def flush(self) -> bool:
        """msync the files written since the last flush; True when something was flushed."""
        if self.read_only:
            return False
        with self._lock:  # msync runs outside the lock so puts are not held up by it
            flushed, upto, files = self._flushed, self._max, self._files
        if upto <= flushed:
            return False
        for f in files:
            if f.end_offset > flushed and f.first_offset < upto:
                f.sync()
        with self._lock:
            if self._flushed == flushed:
                self._flushed = upto
        return True

    def release_pages(self) -> None:
        """Read-only followers: drop the pages the reads mapped (the page cache keeps them)."""
        for f in self._files:  # replaced, never changed in place
            f.handle.release_pages()

    def close(self) -> None:
        with self._lock:
            for f in self._files:
                f.close()
            self._files = []

    def destroy(self) -> None:
        """Close and delete every file and the queue directory."""
        self._require_writable()
        with self._lock:
            for f in self._files:
                f.close()
            self._files = []
            self._min = self._max = self._flushed = 0
            if self.directory.is_dir():
                for path in self.directory.iterdir():
                    path.unlink()
                self.directory.rmdir()
