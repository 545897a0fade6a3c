"""StoreCheckpoint: golden page, min-timestamp rules, persistence."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from store.io.fs import FaultyFileSystem
from store.metadata.checkpoint import (
    CHECKPOINT_PAGE_SIZE,
    CheckpointValues,
    StoreCheckpoint,
    decode_checkpoint,
    encode_checkpoint,
)


def test_golden_page() -> None:
    page = encode_checkpoint(CheckpointValues(0x0102030405060708, 0x10, 0x20))
    assert len(page) == 4096
    assert page[:40].hex() == (
        "0102030405060708"  # physicMsgTimestamp @0
        "0000000000000010"  # logicsMsgTimestamp @8
        "0000000000000020"  # indexMsgTimestamp @16
        "0000000000000000"  # masterFlushedOffset @24
        "0000000000000000"  # confirmPhyOffset @32
    )
    assert page[40:] == bytes(4096 - 40), "no partial record: the page RocketMQ writes"
    assert decode_checkpoint(page) == CheckpointValues(0x0102030405060708, 0x10, 0x20)
    partial = encode_checkpoint(CheckpointValues(1, 2, 3, 0, 0x30, partial_record_offset=0))
    assert partial[32:56].hex() == (
        "0000000000000030"  # confirmPhyOffset @32
        "0000000000000001"  # partialRecordMark @40: a record at offset 0, + 1
        "0000000000000000"
    )
    assert decode_checkpoint(partial).partial_record_offset == 0
    assert decode_checkpoint(partial[:40]).partial_record_offset is None, "a RocketMQ page"


def test_the_partial_record_mark_is_written_in_place(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    cp = StoreCheckpoint.open(path)
    cp.write_partial_record(0x1234)
    assert path.read_bytes()[40:48].hex() == "0000000000001235"
    reopened = StoreCheckpoint.open(path)
    assert reopened.values.partial_record_offset == 0x1234
    reopened.close()
    cp.write_partial_record(None)
    assert path.read_bytes() == bytes(CHECKPOINT_PAGE_SIZE)
    cp.close()


def test_min_timestamps() -> None:
    cp = StoreCheckpoint.__new__(StoreCheckpoint)
    cp.values = CheckpointValues(10_000, 8_000, 4_000)
    assert cp.min_timestamp_ms() == 5_000  # min(10000, 8000) - 3000
    assert cp.min_timestamp_index_ms() == 4_000
    cp.values = CheckpointValues(1_000, 2_000, 0)
    assert cp.min_timestamp_ms() == 0  # floored at 0
    assert cp.min_timestamp_index_ms() == 0


def test_flush_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "store" / "checkpoint"
    cp = StoreCheckpoint.open(path)
    assert cp.values == CheckpointValues()
    cp.update(physic_msg_timestamp_ms=111, logics_msg_timestamp_ms=222, index_msg_timestamp_ms=333)
    cp.flush()
    cp.close()
    assert path.stat().st_size == CHECKPOINT_PAGE_SIZE
    assert path.read_bytes() == encode_checkpoint(CheckpointValues(111, 222, 333))
    reopened = StoreCheckpoint.open(path)
    assert reopened.values == CheckpointValues(111, 222, 333)
    reopened.close()


def test_short_file_is_padded(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    path.write_bytes(bytes.fromhex("0000000000000005"))
    cp = StoreCheckpoint.open(path)
    assert cp.values.physic_msg_timestamp_ms == 5
    cp.close()
    assert path.stat().st_size == CHECKPOINT_PAGE_SIZE


def test_failed_fsync_raises(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    cp = StoreCheckpoint.open(tmp_path / "checkpoint", fs)
    fs.fail_nth("fsync", 1, errno.EIO)
    with pytest.raises(OSError, match="injected fsync"):
        cp.flush()
    cp.flush()  # the trigger fires once
    cp.close()
