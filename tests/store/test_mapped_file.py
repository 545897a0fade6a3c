"""MappedFile / MappedFileQueue: naming, rolling, lookup, truncation, deletion, loading."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from store.errors import CorruptStore, InvalidArgument
from store.io.mapped_file import MappedFileQueue, file_name_to_offset, offset_to_file_name

SIZE = 4096


def test_file_names() -> None:
    assert offset_to_file_name(1073741824) == "00000000001073741824"
    assert file_name_to_offset("00000000001073741824") == 1073741824
    assert file_name_to_offset("abc") is None
    assert file_name_to_offset("0000000000107374182x") is None


def test_append_roll_find_and_reload(tmp_path: Path) -> None:
    q = MappedFileQueue(tmp_path, SIZE)
    q.load()
    assert (q.min_offset, q.max_offset) == (0, 0)
    first = q.writable_file()
    assert first.append(b"a" * 4000) == 0
    assert first.append(b"b" * 96) == 4000
    assert first.is_full
    second = q.writable_file()
    assert second.start_offset == SIZE
    second.append(b"c" * 10)
    assert sorted(os.listdir(tmp_path)) == ["00000000000000000000", "00000000000000004096"]
    assert q.find_file(0) is first
    assert q.find_file(4095) is first
    assert q.find_file(4096) is second
    assert q.find_file(3 * SIZE) is None
    assert q.max_offset == SIZE + 10
    assert q.flush() == SIZE + 10
    with pytest.raises(InvalidArgument):
        second.append(b"x" * SIZE)
    q.close()

    reloaded = MappedFileQueue(tmp_path, SIZE)
    reloaded.load()
    assert [f.start_offset for f in reloaded.files] == [0, SIZE]
    assert reloaded.max_offset == 2 * SIZE  # full until recovery trims it
    reloaded.truncate(SIZE + 10)
    assert reloaded.max_offset == SIZE + 10
    assert reloaded.files[1].read(0, 12) == b"c" * 10 + b"\x00\x00"
    reloaded.close()


def test_truncate_zeroes_the_tail_and_deletes_later_files(tmp_path: Path) -> None:
    q = MappedFileQueue(tmp_path, SIZE)
    q.load()
    for _ in range(3):
        q.writable_file().append(b"z" * SIZE)
    q.truncate(SIZE + 100)
    assert [f.start_offset for f in q.files] == [0, SIZE]
    assert q.max_offset == SIZE + 100
    assert q.files[1].read(100, SIZE) == bytes(SIZE - 100)
    assert (tmp_path / "00000000000000004096").read_bytes()[100:] == bytes(SIZE - 100)
    q.truncate(0)
    assert [f.start_offset for f in q.files] == [0]
    assert q.max_offset == 0
    q.close()


def test_delete_expired_keeps_the_last_file_and_stops_at_a_fresh_one(tmp_path: Path) -> None:
    q = MappedFileQueue(tmp_path, SIZE)
    q.load()
    for _ in range(4):
        q.writable_file().append(b"z" * SIZE)
    for i, mapped in enumerate(q.files):
        os.utime(mapped.path, ns=(0, [1_000, 2_000, 9_000, 1_000][i] * 1_000_000))
    deleted = q.delete_expired(expired_before_ms=5_000)
    assert [p.name for p in deleted] == ["00000000000000000000", "00000000000000004096"]
    assert q.min_offset == 2 * SIZE
    assert q.delete_expired(expired_before_ms=0, force=True) == [tmp_path / "00000000000000008192"]
    assert [f.start_offset for f in q.files] == [3 * SIZE]  # the last file always stays
    q.close()


def test_delete_before_offset(tmp_path: Path) -> None:
    q = MappedFileQueue(tmp_path, SIZE)
    q.load()
    for _ in range(3):
        q.writable_file().append(b"z" * SIZE)
    assert len(q.delete_before(2 * SIZE + 5)) == 2
    assert q.min_offset == 2 * SIZE
    q.close()


def test_load_extends_a_short_last_file_and_refuses_gaps(tmp_path: Path) -> None:
    (tmp_path / offset_to_file_name(0)).write_bytes(b"x" * SIZE)
    (tmp_path / offset_to_file_name(SIZE)).write_bytes(b"y" * 10)
    (tmp_path / "not-a-segment.tmp").write_bytes(b"ignored")
    q = MappedFileQueue(tmp_path, SIZE)
    q.load()
    assert (tmp_path / offset_to_file_name(SIZE)).stat().st_size == SIZE
    q.close()
    (tmp_path / offset_to_file_name(3 * SIZE)).write_bytes(bytes(SIZE))
    with pytest.raises(CorruptStore, match="gap"):
        MappedFileQueue(tmp_path, SIZE).load()


def test_load_refuses_a_short_file_in_the_middle(tmp_path: Path) -> None:
    (tmp_path / offset_to_file_name(0)).write_bytes(b"x" * 10)
    (tmp_path / offset_to_file_name(SIZE)).write_bytes(b"y" * SIZE)
    with pytest.raises(CorruptStore, match="expected 4096"):
        MappedFileQueue(tmp_path, SIZE).load()


def test_create_next_at_an_explicit_start(tmp_path: Path) -> None:
    q = MappedFileQueue(tmp_path, SIZE)
    q.load()
    mapped = q.create_next(start_offset=5 * SIZE + 7)
    assert mapped.start_offset == 5 * SIZE
    assert q.min_offset == q.max_offset == 5 * SIZE
    with pytest.raises(InvalidArgument):
        q.create_next(start_offset=0)
    q.close()
