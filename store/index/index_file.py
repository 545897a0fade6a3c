"""IndexFile: a hash index from message keys to CommitLog offsets (RocketMQ ``index/``).

One file, ``40 + slots*4 + entries*20`` bytes, big-endian::

    header (40 B)                      slots (4 B each)        entries (20 B each, #0 unused)
    +----------------------------+     +-----------------+     +---------+-----------+----------+-----------+
    | beginTimestamp    int64 @0 |     | latest entry    |     | keyHash | phyOffset | timeDiff | prevIndex |
    | endTimestamp      int64 @8 |     | index in slot   |     |  int32  |   int64   |  int32   |   int32   |
    | beginPhyOffset    int64 @16|     | (0 = empty)     |     +---------+-----------+----------+-----------+
    | endPhyOffset      int64 @24|     +-----------------+
    | hashSlotCount     int32 @32|  (slots in use)
    | indexCount        int32 @36|  (next entry index; starts at 1)
    +----------------------------+

``keyHash = abs(String.hashCode(key))`` (0 when that overflows), slot ``keyHash % slots``;
``timeDiff`` is whole *seconds* since ``beginTimestamp`` clamped to ``[0, Int.MAX]``;
``prevIndex`` chains entries of one slot newest -> oldest. Keys are ``topic#UNIQ_KEY`` and
``topic#token`` for every space-separated ``KEYS`` token. Files are named by their creation
time ``yyyyMMddHHmmssSSS`` (UTC here) and a new one starts when ``indexCount`` reaches
``max_entries``. Hashes collide: callers re-check the real key on the decoded message.

Writers publish entries, then slots, then the header, so a reader (another process, read-only
mapping) never follows a slot to an unwritten entry: it ignores slot values above the
``indexCount`` it read.
"""

from __future__ import annotations

import logging
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from store.errors import CorruptStore
from store.io.fs import FileSystem, OsFileSystem

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]

INDEX_HEADER = struct.Struct(
    ">"
    "q"  # beginTimestamp: store timestamp (ms) of the first entry
    "q"  # endTimestamp: store timestamp (ms) of the last entry
    "q"  # beginPhyOffset: CommitLog offset of the first entry
    "q"  # endPhyOffset: CommitLog offset of the last entry
    "i"  # hashSlotCount: slots in use
    "i"  # indexCount: next entry index (starts at 1; entry 0 is never used)
)
INDEX_HEADER_SIZE = INDEX_HEADER.size  # 40
INDEX_SLOT = struct.Struct(">i")  # index of the newest entry of this slot, 0 = empty
INDEX_SLOT_SIZE = INDEX_SLOT.size  # 4
INDEX_ENTRY = struct.Struct(
    ">"
    "i"  # keyHash: abs(String.hashCode(key)), 0 when negative
    "q"  # phyOffset: CommitLog offset of the message
    "i"  # timeDiff: seconds since header.beginTimestamp, clamped to [0, Int.MAX]
    "i"  # prevIndex: previous entry of the same slot (0 = end of chain)
)
INDEX_ENTRY_SIZE = INDEX_ENTRY.size  # 20
INDEX_ENTRY_DTYPE = np.dtype(
    [("key_hash", ">i4"), ("phy_offset", ">i8"), ("time_diff", ">i4"), ("prev_index", ">i4")]
)
INVALID_INDEX = 0
INT_MAX = 0x7FFFFFFF
KEY_SEPARATOR = "#"
FILE_NAME_FORMAT = "%Y%m%d%H%M%S"  # + 3 digits of milliseconds

log = logging.getLogger(__name__)

if INDEX_ENTRY_DTYPE.itemsize != INDEX_ENTRY_SIZE:  # pragma: no cover - layout defined twice
    raise ImportError("INDEX_ENTRY and INDEX_ENTRY_DTYPE disagree")


@dataclass(frozen=True, slots=True)
class IndexHeader:
    begin_timestamp_ms: int = 0
    end_timestamp_ms: int = 0
    begin_phy_offset: int = 0
    end_phy_offset: int = 0
    hash_slot_count: int = 0
    index_count: int = 1

    def encode(self) -> bytes:
        return INDEX_HEADER.pack(
            self.begin_timestamp_ms,
            self.end_timestamp_ms,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

    @staticmethod
    def decode(data: bytes | memoryview | mmap.mmap) -> IndexHeader:
        return IndexHeader(*INDEX_HEADER.unpack_from(data, 0))

    @property
    def entry_count(self) -> int:
        return max(0, self.index_count - 1)


def encode_entry(key_hash: int, phy_offset: int, time_diff_s: int, prev_index: int) -> bytes:
    return INDEX_ENTRY.pack(key_hash, phy_offset, time_diff_s, prev_index)


def decode_entry(data: bytes | memoryview | mmap.mmap, pos: int = 0) -> tuple[int, int, int, int]:
    """``(key_hash, phy_offset, time_diff_s, prev_index)`` of the entry at byte ``pos``."""
    key_hash, phy_offset, time_diff, prev_index = INDEX_ENTRY.unpack_from(data, pos)
    return key_hash, phy_offset, time_diff, prev_index


def index_file_size(slot_count: int, max_entries: int) -> int:
    return INDEX_HEADER_SIZE + slot_count * INDEX_SLOT_SIZE + max_entries * INDEX_ENTRY_SIZE


def build_key(topic: str, key: str) -> str:
    return topic + KEY_SEPARATOR + key


def time_diffs_s(store_timestamps_ms: I64, begin_timestamp_ms: int) -> I32:
    """Seconds since ``begin`` clamped to ``[0, Int.MAX]`` (0 while ``begin <= 0``)."""
    if begin_timestamp_ms <= 0:
        return np.zeros(len(store_timestamps_ms), dtype=np.int32)
    return np.clip((store_timestamps_ms - begin_timestamp_ms) // 1000, 0, INT_MAX).astype(np.int32)


def chain_links(slots: I64, entry_indexes: I64, current_heads: I64) -> tuple[I64, I64, I64]:
    """Chain a batch of entries into their slots (pure, vectorised).

    ``slots[i]`` is entry ``entry_indexes[i]``'s slot, ``current_heads[i]`` that slot's head
    before the batch (already validated). Returns ``(prev_index per entry, distinct slots,
    new head per distinct slot)``: each entry links to the previous entry of the batch in the
    same slot (stable argsort keeps batch order) or to the old head.
    """
    order = np.argsort(slots, kind="stable")
    sorted_slots = slots[order]
    sorted_entries = entry_indexes[order]
    prev_sorted = current_heads[order].copy()
    same = np.zeros(len(slots), dtype=bool)
    same[1:] = sorted_slots[1:] == sorted_slots[:-1]
    prev_sorted[1:][same[1:]] = sorted_entries[:-1][same[1:]]
    prev = np.empty_like(prev_sorted)
    prev[order] = prev_sorted
    run_ends = np.flatnonzero(np.append(sorted_slots[1:] != sorted_slots[:-1], len(slots) > 0))
    return prev, sorted_slots[run_ends], sorted_entries[run_ends]


class IndexFile:
    """One mapped index file. Writes come from one thread; queries may run concurrently."""

    def __init__(
        self,
        path: Path,
        slot_count: int,
        max_entries: int,
        *,
        read_only: bool = False,
        fs: FileSystem | None = None,
    ) -> None:
        self.path = path
        self.slot_count = slot_count
        self.max_entries = max_entries
        self.read_only = read_only
        fs = fs if fs is not None else OsFileSystem()
        size = index_file_size(slot_count, max_entries)
        fresh = not read_only and not fs.exists(path)
        if fresh:
            self._handle = fs.create(path, size)
        else:
            actual = fs.file_size(path)
            if actual not in (0, size) or (read_only and actual != size):
                raise CorruptStore(f"{path}: size {actual}, expected {size} for {slot_count} slots")
            if actual == 0:  # torn while being created
                fs.resize(path, size)
                fresh = True
            self._handle = fs.open(path, read_only=read_only)
        self._mm = self._handle.view(0, size)
        self._slots = np.frombuffer(self._mm, dtype=">i4", count=slot_count, offset=INDEX_HEADER_SIZE)
        self._entries = np.frombuffer(
            self._mm,
            dtype=INDEX_ENTRY_DTYPE,
            count=max_entries,
            offset=INDEX_HEADER_SIZE + slot_count * INDEX_SLOT_SIZE,
        )
        self._entries_base = INDEX_HEADER_SIZE + slot_count * INDEX_SLOT_SIZE
        self.header = IndexHeader.decode(self._handle.read(0, INDEX_HEADER_SIZE))  # maybe a hole
        if not read_only and not fresh and self.header.index_count < 1:
            # Created (sized) but killed before its header was written: a valid header counts
            # entry #0 (unused), and a file adopted with a count of 0 would put its first
            # entry at #0, where a slot pointing to it reads as empty (a key never found).
            log.warning("%s: index file torn while being created (no header): starting it empty", path)
            fresh = True
        if fresh:
            try:
                self._write_header(IndexHeader())
            except OSError:  # no room for its slots: nothing was written; the caller retries
                self.close()
                fs.remove(path)
                raise
        self.dirty = False

    @staticmethod
    def create(
        path: Path,
        slot_count: int,
        max_entries: int,
        *,
        end_phy_offset: int = 0,
        end_timestamp_ms: int = 0,
        fs: FileSystem | None = None,
    ) -> IndexFile:
        """New file continuing a previous one (RocketMQ seeds begin/end with its end values)."""
        f = IndexFile(path, slot_count, max_entries, fs=fs)
        f._write_header(IndexHeader(end_timestamp_ms, end_timestamp_ms, end_phy_offset, end_phy_offset, 0, 1))
        return f

    def _write_header(self, header: IndexHeader) -> None:
        self._handle.reserve(self._entries_base + header.index_count * INDEX_ENTRY_SIZE)
        self._mm[:INDEX_HEADER_SIZE] = header.encode()
        self.header = header
        self.dirty = True

    def reload_header(self) -> IndexHeader:
        """Re-read the header (read-only followers)."""
        self.header = IndexHeader.decode(self._handle.read(0, INDEX_HEADER_SIZE))
        return self.header

    @property
    def is_full(self) -> bool:
        return self.header.index_count >= self.max_entries

    def put_batch(self, key_hashes: I32, phy_offsets: I64, store_timestamps_ms: I64) -> int:
        """Insert as many entries as fit, in order; returns how many were inserted."""
        header = self.header
        count = min(len(key_hashes), self.max_entries - header.index_count)
        if count <= 0:
            return 0
        # Slots are all over the table: the header, every slot and the entries written so far
        # are allocated before any is touched through the mapping (OSError(ENOSPC) else).
        self._handle.reserve(self._entries_base + (header.index_count + count) * INDEX_ENTRY_SIZE)
        hashes = np.asarray(key_hashes[:count], dtype=np.int64)
        phys = np.asarray(phy_offsets[:count], dtype=np.int64)
        stamps = np.asarray(store_timestamps_ms[:count], dtype=np.int64)
        first_entry = header.index_count == 1
        begin_ts = int(stamps[0]) if first_entry else header.begin_timestamp_ms
        begin_phy = int(phys[0]) if first_entry else header.begin_phy_offset
        entry_indexes = np.arange(header.index_count, header.index_count + count, dtype=np.int64)
        slots = hashes % self.slot_count
        heads = self._slots[slots].astype(np.int64)
        heads[(heads <= INVALID_INDEX) | (heads > header.index_count)] = INVALID_INDEX
        prev, distinct_slots, new_heads = chain_links(slots, entry_indexes, heads)
        old_heads = self._slots[distinct_slots]
        newly_used = int(np.count_nonzero((old_heads <= INVALID_INDEX) | (old_heads > header.index_count)))
        block = self._entries[header.index_count : header.index_count + count]
        block["key_hash"] = hashes
        block["phy_offset"] = phys
        block["time_diff"] = time_diffs_s(stamps, begin_ts)
        block["prev_index"] = prev
        self._slots[distinct_slots] = new_heads
        self._write_header(
            IndexHeader(
                begin_timestamp_ms=begin_ts,
                end_timestamp_ms=int(stamps[-1]),
                begin_phy_offset=begin_phy,
                end_phy_offset=int(phys[-1]),
                hash_slot_count=header.hash_slot_count + newly_used,
                index_count=header.index_count + count,
            )
        )
        return count

    def is_time_matched(self, begin_ms: int, end_ms: int) -> bool:
        """RocketMQ ``IndexFile.isTimeMatched``: the file's time span meets ``[begin, end]``."""
        b, e = self.header.begin_timestamp_ms, self.header.end_timestamp_ms
        return (begin_ms < b and end_ms > e) or b <= begin_ms <= e or b <= end_ms <= e

    def select(self, key_hash: int, begin_ms: int, end_ms: int, max_results: int, out: list[int]) -> None:
        """Append matching offsets newest -> oldest (RocketMQ ``selectPhyOffset`` stop rules)."""
        header = self.header
        count = header.index_count
        if count <= 1 or len(out) >= max_results:
            return
        slot = INDEX_HEADER_SIZE + (key_hash % self.slot_count) * INDEX_SLOT_SIZE
        (entry,) = self._unpack(INDEX_SLOT, slot)
        if entry <= INVALID_INDEX or entry > count:
            return
        while len(out) < max_results:
            position = self._entries_base + entry * INDEX_ENTRY_SIZE
            hash_read, phy, diff_s, prev = self._unpack(INDEX_ENTRY, position)
            if diff_s < 0:
                break
            time_read = header.begin_timestamp_ms + diff_s * 1000
            if hash_read == key_hash and begin_ms <= time_read <= end_ms:
                out.append(phy)
            if prev <= INVALID_INDEX or prev > count or prev == entry or time_read < begin_ms:
                break
            entry = prev

    def _unpack(self, layout: struct.Struct, position: int) -> tuple[int, ...]:
        """One struct at ``position``: through the mapping where the file is allocated, else
        copied with ``pread`` (a sparse file restarted on a full disk: see ``store.io.fs``)."""
        if position + layout.size <= self._handle.backed_end:
            return layout.unpack_from(self._mm, position)
        return layout.unpack(self._handle.read(position, layout.size))

    def flush(self) -> None:
        if self.dirty and not self.read_only:
            self.dirty = False
            self._handle.sync(0, self._handle.size)

    def close(self) -> None:
        del self._slots, self._entries, self._mm
        self._handle.close()  # a query still holding a view keeps the mapping until it drops it

    def destroy(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
