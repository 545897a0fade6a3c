"""The file-system seam under every mapped file (after tikv/raft-engine's ``FileSystem``).

Mapped files never touch ``os``/``mmap`` directly: they go through a :class:`FileSystem`, so
tests can swap in :class:`FaultyFileSystem` and make the Nth create, write or fsync fail
(``OSError(ENOSPC)`` by default) to check that nothing is left half-written, or cut the
power and lose (or tear) everything that was not fsynced.

A :class:`FileHandle` is one fixed-size file, memory-mapped for reading and writing.

**Full disks.** A new file is sparse (``preallocate=True``: reserved whole). Touching a hole
*through the mapping* needs the disk to back it there and then, and a full disk answers with
``SIGBUS``, which kills the process: on every file system a store into a hole does, and on
tmpfs (where a mapped page is memory) even a *load* does. So a handle keeps ``backed_end``:
``[0, backed_end)`` is allocated and safe to touch through the mapping. Whoever writes
through the mapping (ConsumeQueue units, index slots) first calls :meth:`FileHandle.reserve`,
which allocates with ``posix_fallocate`` and fails with a clean ``OSError(ENOSPC)`` instead;
:meth:`FileHandle.read` beyond ``backed_end`` uses ``pread`` (a hole reads as zeros without
being allocated), and ``pwrite`` reports ``ENOSPC`` itself. A store restarted on a full disk
therefore recovers and serves reads, and writes fail cleanly until space returns.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import random
import threading
from pathlib import Path
from typing import Protocol

#: Buffers a handle accepts for writing.
Writable = bytes | bytearray | memoryview

#: msync offsets must be multiples of this.
PAGE_SIZE = mmap.ALLOCATIONGRANULARITY

#: :meth:`FileHandle.reserve` allocates ahead of the writes in steps of this many bytes (one
#: ``fallocate`` per MiB written through a mapping), falling back to the exact pages asked
#: for when the disk has less left.
RESERVE_STEP_BYTES = 1 << 20

#: ``posix_fallocate`` errors meaning "not supported here": such a file system allocates
#: as it is written (a mapping over it keeps the old risk; nothing better can be done).
_UNSUPPORTED = (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS)


class FileHandle(Protocol):
    """One open, fixed-size, memory-mapped file."""

    @property
    def path(self) -> Path: ...

    @property
    def size(self) -> int: ...

    def write(self, position: int, data: Writable) -> None:
        """Copy ``data`` to ``[position, position + len(data))``; raises OSError/ValueError."""
        ...

    def read(self, position: int, length: int) -> bytes:
        """Copy of ``[position, position + length)`` clipped to the file size."""
        ...

    def view(self, position: int, length: int) -> memoryview:
        """Zero-copy ``[position, position + length)`` clipped to the file size. The view
        stays valid after :meth:`close` (the mapping lives until the last view is released)."""
        ...

    def sync(self, start: int, end: int) -> None:
        """Make ``[start, end)`` durable (msync); raises OSError."""
        ...

    def data_ranges(self, start: int, end: int) -> list[tuple[int, int]]:
        """Sub-ranges of ``[start, end)`` that may hold data; holes of a sparse file (never
        written, so zero) are left out. Always safe to return ``[(start, end)]``."""
        ...

    @property
    def backed_end(self) -> int:
        """Bytes ``[0, backed_end)`` are allocated on disk: loads and stores through the
        mapping there cannot fault. Past it the file may be sparse (see the module doc)."""
        ...

    def reserve(self, end: int) -> None:
        """Allocate ``[0, end)`` (capped at the size) before it is written through the
        mapping; raises ``OSError(ENOSPC)`` when the disk cannot, with nothing changed."""
        ...

    def release_pages(self) -> None:
        """A read-only mapping: drop the pages this process has mapped (they stay in the page
        cache; the next read maps them again, views stay valid). A no-op on a writer's file."""
        ...

    def close(self) -> None:
        """Unmap and close; idempotent."""
        ...


class FileSystem(Protocol):
    """Directory and file operations used by mapped files and the checkpoint."""

    def create(self, path: Path, size: int) -> FileHandle:
        """Create a new zero-filled file of ``size`` bytes (fails if it exists) and map it."""
        ...

    def open(self, path: Path, read_only: bool = False) -> FileHandle:
        """Map an existing file at its current size (read-only: writes raise)."""
        ...

    def resize(self, path: Path, size: int) -> None:
        """Grow (with zeros) or shrink a closed file."""
        ...

    def file_size(self, path: Path) -> int: ...

    def exists(self, path: Path) -> bool: ...

    def remove(self, path: Path) -> None: ...

    def list_dir(self, directory: Path) -> list[str]:
        """Names in ``directory`` (empty if it does not exist)."""
        ...

    def make_dirs(self, directory: Path) -> None: ...

    def mtime_ms(self, path: Path) -> int: ...

    def sync_dir(self, directory: Path) -> None:
        """fsync a directory so created/removed names are durable."""
        ...


class OsMappedHandle:
    """:class:`FileHandle` over ``os`` file descriptors and ``mmap``.

    Reads go through the mapping (zero-copy views); writes use ``pwrite``, which fills fresh
    page-cache pages 4-5x faster than storing through the mapping (one fault per 4 KiB page).
    Linux keeps the two coherent (one page cache), and ``msync`` flushes the range however
    its pages were dirtied. Reads past :attr:`backed_end` use ``pread`` (module doc).
    """

    def __init__(self, path: Path, fd: int, size: int, read_only: bool = False) -> None:
        self._path = path
        self._fd = fd
        self._size = size
        self._read_only = read_only
        #: Only ever grows (by :meth:`reserve`); another process may back more (re-read then).
        self._backed_end = first_hole(fd, size)
        access = mmap.ACCESS_READ if read_only else mmap.ACCESS_WRITE
        self._mmap: mmap.mmap | None = mmap.mmap(fd, size, access=access) if size > 0 else None

    @property
    def path(self) -> Path:
        return self._path

    @property
    def size(self) -> int:
        return self._size

    def _mapped(self) -> mmap.mmap:
        if self._mmap is None:
            raise ValueError(f"{self._path} is closed or empty")
        return self._mmap

    def write(self, position: int, data: Writable) -> None:
        end = position + len(data)
        if position < 0 or end > self._size:
            raise ValueError(f"write [{position}, {end}) outside {self._path} of {self._size} bytes")
        self._mapped()  # raises once closed
        view = memoryview(data).cast("B")
        while view:
            written = os.pwrite(self._fd, view, position)
            view, position = view[written:], position + written

    def read(self, position: int, length: int) -> bytes:
        end = min(position + length, self._size)
        mapped = self._mapped()
        if self._is_backed(end):
            return mapped[position:end]
        return os.pread(self._fd, max(0, end - position), position)  # a hole reads as zeros

    def view(self, position: int, length: int) -> memoryview:
        return memoryview(self._mapped())[position : min(position + length, self._size)]

    @property
    def backed_end(self) -> int:
        if self._read_only and self._backed_end < self._size and self._fd >= 0:
            self._backed_end = max(self._backed_end, first_hole(self._fd, self._size))
        return self._backed_end

    def _is_backed(self, end: int) -> bool:
        return end <= self._backed_end or end <= self.backed_end

    def reserve(self, end: int) -> None:
        end = min(end, self._size)
        if end <= self._backed_end:
            return
        self._mapped()  # raises once closed
        exact = min(self._size, -(-end // PAGE_SIZE) * PAGE_SIZE)
        ahead = min(self._size, -(-end // RESERVE_STEP_BYTES) * RESERVE_STEP_BYTES)
        for target in (ahead, exact) if ahead > exact else (exact,):
            try:
                os.posix_fallocate(self._fd, self._backed_end, target - self._backed_end)
            except OSError as exc:
                if exc.errno in _UNSUPPORTED:
                    self._backed_end = self._size  # allocates as written (class doc)
                    return
                if exc.errno != errno.ENOSPC or target == exact:
                    wanted = target - self._backed_end
                    message = f"cannot allocate {wanted} bytes: {exc.strerror}"
                    raise OSError(exc.errno, message, str(self._path)) from exc
                continue
            self._backed_end = target
            return

    def sync(self, start: int, end: int) -> None:
        if end <= start:
            return
        aligned = start - start % PAGE_SIZE
        self._mapped().flush(aligned, end - aligned)

    def data_ranges(self, start: int, end: int) -> list[tuple[int, int]]:
        ranges: list[tuple[int, int]] = []
        position = start
        try:
            while position < end:
                data = os.lseek(self._fd, position, os.SEEK_DATA)
                if data >= end:
                    break
                hole = os.lseek(self._fd, data, os.SEEK_HOLE)
                ranges.append((data, min(hole, end)))
                position = hole
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # no data at or after position
                return ranges
            return [(start, end)]  # SEEK_DATA unsupported: treat everything as data
        return ranges

    def release_pages(self) -> None:
        # MADV_DONTNEED on a shared read-only file mapping changes no content: it unmaps the
        # resident pages (counted in this process's RSS) and the page cache keeps them.
        if self._read_only and self._mmap is not None:
            self._mmap.madvise(mmap.MADV_DONTNEED)

    def close(self) -> None:
        if self._mmap is not None:
            with contextlib.suppress(BufferError):  # views still exported: unmapped when released
                self._mmap.close()
            self._mmap = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def first_hole(fd: int, size: int) -> int:
    """Offset of the first hole of an open file (``size`` when it has none, or when the file
    system cannot say: then it allocates as it is written)."""
    try:
        return min(size, os.lseek(fd, 0, os.SEEK_HOLE))
    except OSError:
        return size


class OsFileSystem:
    """The real file system.

    New files are sparse (like RocketMQ's unwarmed mapped files): disk is used as data is
    written, and what is written through a mapping is reserved first (module doc), so a full
    disk is a clean ``ENOSPC``, never a ``SIGBUS``. ``preallocate=True`` reserves the whole
    file up front (``posix_fallocate``), trading disk for an early ``ENOSPC`` on roll.
    """

    def __init__(self, preallocate: bool = False) -> None:
        self.preallocate = preallocate

    def create(self, path: Path, size: int) -> FileHandle:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.ftruncate(fd, size)
            handle = OsMappedHandle(path, fd, size)
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        try:
            if self.preallocate:
                handle.reserve(size)
            os.fsync(fd)
            return handle
        except BaseException:
            handle.close()
            path.unlink(missing_ok=True)
            raise

    def open(self, path: Path, read_only: bool = False) -> FileHandle:
        fd = os.open(path, os.O_RDONLY if read_only else os.O_RDWR)
        try:
            return OsMappedHandle(path, fd, os.fstat(fd).st_size, read_only)
        except BaseException:
            os.close(fd)
            raise

    def resize(self, path: Path, size: int) -> None:
        os.truncate(path, size)

    def file_size(self, path: Path) -> int:
        return path.stat().st_size

    def exists(self, path: Path) -> bool:
        return path.exists()

    def remove(self, path: Path) -> None:
        path.unlink(missing_ok=True)

    def list_dir(self, directory: Path) -> list[str]:
        try:
            return os.listdir(directory)
        except FileNotFoundError:
            return []

    def make_dirs(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)

    def mtime_ms(self, path: Path) -> int:
        return path.stat().st_mtime_ns // 1_000_000

    def sync_dir(self, directory: Path) -> None:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class _Countdown:
    """Fires once, on the Nth call after being armed."""

    def __init__(self) -> None:
        self.remaining = 0
        self.error = errno.ENOSPC
        self.calls = 0
        self.persistent = False
        self.failing = False
        #: Only paths containing this count (None: every path).
        self.only: str | None = None

    def arm(self, nth: int, error: int, persistent: bool, only: str | None = None) -> None:
        if nth < 1:
            raise ValueError("nth is 1-based")
        self.remaining, self.error, self.persistent, self.failing = nth, error, persistent, False
        self.only = only

    def tick(self, what: str, path: Path) -> None:
        self.calls += 1
        if self.only is not None and self.only not in str(path):
            return
        if self.remaining > 0:
            self.remaining -= 1
            self.failing = self.remaining == 0
        if self.failing:
            self.failing = self.persistent
            raise OSError(self.error, f"injected {what} failure: {os.strerror(self.error)}", str(path))


class _FaultyHandle:
    """Wraps a handle; writes and syncs consult the owning :class:`FaultyFileSystem`."""

    def __init__(self, inner: FileHandle, owner: FaultyFileSystem) -> None:
        self._inner = inner
        self._owner = owner

    @property
    def path(self) -> Path:
        return self._inner.path

    @property
    def size(self) -> int:
        return self._inner.size

    def write(self, position: int, data: Writable) -> None:
        self._owner.before("write", self._inner.path)
        self._inner.write(position, data)

    def read(self, position: int, length: int) -> bytes:
        return self._inner.read(position, length)

    def view(self, position: int, length: int) -> memoryview:
        return self._inner.view(position, length)

    def data_ranges(self, start: int, end: int) -> list[tuple[int, int]]:
        return self._inner.data_ranges(start, end)

    @property
    def backed_end(self) -> int:
        return self._inner.backed_end

    def reserve(self, end: int) -> None:
        if min(end, self._inner.size) > self._inner.backed_end:  # only a real allocation counts
            self._owner.before("allocate", self._inner.path)
        self._inner.reserve(end)

    def sync(self, start: int, end: int) -> None:
        self._owner.before("fsync", self._inner.path)
        self._inner.sync(start, end)
        if end > start:
            aligned = start - start % PAGE_SIZE
            self._owner.synced(self._inner.path, aligned, self._inner.read(aligned, end - aligned))

    def release_pages(self) -> None:
        self._inner.release_pages()

    def close(self) -> None:
        self._inner.close()


class FaultyFileSystem:
    """A :class:`FileSystem` that fails on demand (tests only).

    ``fail_nth("write", 3)`` makes the third ``FileHandle.write`` from now raise
    ``OSError(ENOSPC)``; likewise ``"fsync"`` (``FileHandle.sync``), ``"create"`` and
    ``"allocate"`` (a :meth:`FileHandle.reserve` that has to allocate: a disk too full for a
    ConsumeQueue or index page, which must refuse cleanly and never be mapped unbacked). A
    trigger fires once, or on every call from the Nth on with ``persistent=True`` (a disk
    that stays full) until :meth:`heal`; ``only=`` narrows it to paths containing a string.
    ``calls(kind)`` counts calls seen so far. Every mapped structure goes through it: the
    CommitLog, the ConsumeQueues, the index files and the checkpoint.

    With ``track_unsynced=True`` it also remembers what each file held at its last fsync;
    :meth:`crash` then simulates a power loss (unsynced bytes vanish, or with a random
    generator, survive sector by sector: torn writes).
    """

    KINDS = ("write", "fsync", "create", "allocate")

    def __init__(self, inner: FileSystem | None = None, track_unsynced: bool = False) -> None:
        self._inner: FileSystem = inner if inner is not None else OsFileSystem()
        self._lock = threading.Lock()
        self._triggers = {kind: _Countdown() for kind in self.KINDS}
        #: With ``track_unsynced``: the durable content of every file, for :meth:`crash`.
        self._durable: dict[Path, bytearray] | None = {} if track_unsynced else None

    def synced(self, path: Path, position: int, data: bytes) -> None:
        """Record that ``data`` at ``position`` of ``path`` is durable."""
        with self._lock:
            if self._durable is not None and path in self._durable:
                self._durable[path][position : position + len(data)] = data

    def crash(self, rng: random.Random | None = None, sector_bytes: int = 512) -> None:
        """Power loss (tests only; close every handle first): each tracked file goes back to
        its last synced content. With ``rng``, each unsynced sector survives with
        probability 1/2 instead (torn writes)."""
        if self._durable is None:
            raise ValueError("crash() needs FaultyFileSystem(track_unsynced=True)")
        with self._lock:
            for path, durable in self._durable.items():
                current = path.read_bytes()
                image = bytearray(durable)
                for start in range(0, len(image), sector_bytes) if rng is not None else ():
                    end = start + sector_bytes
                    if current[start:end] != image[start:end] and rng is not None and rng.random() < 0.5:
                        image[start:end] = current[start:end]
                path.write_bytes(bytes(image))
                self._durable[path] = image

    def _track(self, handle: FileHandle, content: bytes | None) -> FileHandle:
        with self._lock:
            if self._durable is not None:
                self._durable[handle.path] = bytearray(
                    content if content is not None else handle.read(0, handle.size)
                )
        return _FaultyHandle(handle, self)

    def fail_nth(
        self,
        kind: str,
        nth: int = 1,
        error: int = errno.ENOSPC,
        persistent: bool = False,
        only: str | None = None,
    ) -> None:
        """Arm ``kind``; with ``only``, just the calls on paths containing it count and fail
        (``only="/consumequeue/"``: ConsumeQueue files; ``"/index/"``: index files)."""
        with self._lock:
            self._triggers[kind].arm(nth, error, persistent, only)

    def heal(self) -> None:
        """Disarm every trigger."""
        with self._lock:
            self._triggers = {kind: _Countdown() for kind in self.KINDS}

    def calls(self, kind: str) -> int:
        return self._triggers[kind].calls

    def before(self, kind: str, path: Path) -> None:
        with self._lock:
            self._triggers[kind].tick(kind, path)

    def create(self, path: Path, size: int) -> FileHandle:
        self.before("create", path)
        return self._track(self._inner.create(path, size), bytes(size))  # created and fsynced

    def open(self, path: Path, read_only: bool = False) -> FileHandle:
        return self._track(self._inner.open(path, read_only), None)

    def resize(self, path: Path, size: int) -> None:
        self._inner.resize(path, size)
        with self._lock:
            if self._durable is not None and path in self._durable:
                self._durable[path] = bytearray(self._durable[path][:size].ljust(size, b"\x00"))

    def file_size(self, path: Path) -> int:
        return self._inner.file_size(path)

    def exists(self, path: Path) -> bool:
        return self._inner.exists(path)

    def remove(self, path: Path) -> None:
        self._inner.remove(path)
        with self._lock:
            if self._durable is not None:
                self._durable.pop(path, None)

    def list_dir(self, directory: Path) -> list[str]:
        return self._inner.list_dir(directory)

    def make_dirs(self, directory: Path) -> None:
        self._inner.make_dirs(directory)

    def mtime_ms(self, path: Path) -> int:
        return self._inner.mtime_ms(path)

    def sync_dir(self, directory: Path) -> None:
        self._inner.sync_dir(directory)
