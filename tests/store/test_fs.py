"""The file-system seam: the real one and the one that fails on demand."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from store.io.fs import FaultyFileSystem, OsFileSystem


def test_os_file_system_create_write_read_sync(tmp_path: Path) -> None:
    fs = OsFileSystem()
    path = tmp_path / "f"
    handle = fs.create(path, 8192)
    assert path.stat().st_size == 8192
    handle.write(100, b"hello")
    handle.sync(100, 105)
    assert handle.read(98, 9) == b"\x00\x00hello\x00\x00"
    assert handle.read(8190, 100) == b"\x00\x00"  # clipped to the file size
    with pytest.raises(ValueError, match="outside"):
        handle.write(8190, b"xyz")
    handle.close()
    handle.close()  # idempotent
    assert path.read_bytes()[100:105] == b"hello"
    with pytest.raises(FileExistsError):
        fs.create(path, 8192)
    assert fs.list_dir(tmp_path) == ["f"]
    assert fs.list_dir(tmp_path / "missing") == []
    fs.resize(path, 4096)
    assert fs.file_size(path) == 4096
    fs.remove(path)
    assert not fs.exists(path)


@pytest.mark.parametrize("kind", ["write", "fsync", "create"])
def test_faulty_file_system_fails_the_nth_call_once(tmp_path: Path, kind: str) -> None:
    fs = FaultyFileSystem()
    fs.fail_nth(kind, 2, errno.ENOSPC)

    def call(i: int) -> None:
        handle = fs.create(tmp_path / f"f{i}", 4096)
        handle.write(0, b"x")
        handle.sync(0, 1)
        handle.close()

    call(0)
    with pytest.raises(OSError) as info:
        call(1)
    assert info.value.errno == errno.ENOSPC
    assert f"injected {kind}" in str(info.value)
    call(2)
    assert fs.calls(kind) == 3


def test_persistent_failure_until_healed(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    handle = fs.create(tmp_path / "f", 4096)
    fs.fail_nth("write", 2, persistent=True)
    handle.write(0, b"a")
    for _ in range(3):
        with pytest.raises(OSError, match="injected write"):
            handle.write(0, b"b")
    fs.heal()
    handle.write(0, b"c")
    assert handle.read(0, 1) == b"c"
    handle.close()


def test_crash_drops_unsynced_bytes(tmp_path: Path) -> None:
    fs = FaultyFileSystem(track_unsynced=True)
    handle = fs.create(tmp_path / "f", 8192)
    handle.write(0, b"a" * 100)
    handle.sync(0, 100)
    handle.write(100, b"b" * 100)  # never synced
    handle.write(4096, b"c" * 10)  # never synced
    handle.close()
    fs.crash()
    assert (tmp_path / "f").read_bytes() == b"a" * 100 + bytes(8092)


def test_torn_crash_keeps_some_unsynced_sectors(tmp_path: Path) -> None:
    import random

    fs = FaultyFileSystem(track_unsynced=True)
    handle = fs.create(tmp_path / "f", 8192)
    handle.write(0, b"x" * 8192)
    handle.close()
    fs.crash(random.Random(7), sector_bytes=512)
    data = (tmp_path / "f").read_bytes()
    sectors = {data[i : i + 512] for i in range(0, 8192, 512)}
    assert sectors == {b"x" * 512, bytes(512)}  # whole sectors survive or vanish


def test_data_ranges_skip_the_holes_of_a_sparse_file(tmp_path: Path) -> None:
    handle = OsFileSystem().create(tmp_path / "sparse", 4 << 20)
    try:
        assert handle.data_ranges(0, 4 << 20) == []  # nothing written: all hole
        handle.write(1 << 20, b"x" * 10)
        ranges = handle.data_ranges(0, 4 << 20)
        assert len(ranges) == 1
        begin, end = ranges[0]
        assert begin <= 1 << 20 and end >= (1 << 20) + 10 and end - begin < 1 << 20
        assert handle.data_ranges(2 << 20, 4 << 20) == []
    finally:
        handle.close()
