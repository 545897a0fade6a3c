"""The offset record body (``store.format.offset_record``): golden bytes written out field by
field from the layout in its docstring, and every malformed body refused."""

from __future__ import annotations

import pytest

from store.errors import InvalidArgument
from store.format.offset_record import (
    ENTRY,
    HEAD,
    OffsetCommand,
    OffsetKind,
    decode_offset_command,
    encode_offset_command,
)


def hexbytes(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", "").replace("|", ""))


COMMIT = OffsetCommand(OffsetKind.COMMIT, "g1", "orders", {1: 300, 0: 5})
COMMIT_BYTES = hexbytes(
    "01 | 01 | 0002 6731 | 0006 6f7264657273 | 00000002"
    "| 00000000 0000000000000005 | 00000001 000000000000012c"
)


def test_sizes() -> None:
    assert HEAD.size == 4  # VERSION, KIND, GROUPLEN
    assert ENTRY.size == 12  # QUEUEID i32, OFFSET i64


def test_commit_golden_bytes_queues_sorted() -> None:
    assert encode_offset_command(COMMIT) == COMMIT_BYTES
    assert decode_offset_command(COMMIT_BYTES) == COMMIT


@pytest.mark.parametrize(
    ("command", "golden"),
    [
        (OffsetCommand(OffsetKind.DELETE, "g1", "t"), "01 02 0002 6731 0001 74 00000000"),
        (OffsetCommand(OffsetKind.DELETE_GROUP, "g1"), "01 03 0002 6731 0000 00000000"),
        (OffsetCommand(OffsetKind.DELETE_TOPIC, topic="t"), "01 04 0000 0001 74 00000000"),
        (OffsetCommand(OffsetKind.COMMIT, "g", "t"), "01 01 0001 67 0001 74 00000000"),
    ],
)
def test_other_kinds_golden_bytes(command: OffsetCommand, golden: str) -> None:
    assert encode_offset_command(command) == hexbytes(golden)
    assert decode_offset_command(hexbytes(golden)) == command


def test_a_commit_of_many_queues_is_one_body_of_12_bytes_per_queue() -> None:
    body = encode_offset_command(OffsetCommand(OffsetKind.COMMIT, "g", "t", {q: q * 10 for q in range(64)}))
    assert len(body) == 4 + 1 + 2 + 1 + 4 + 64 * 12
    assert decode_offset_command(body).offsets == {q: q * 10 for q in range(64)}


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("", "not an offset record"),
        ("02 01 0001 67 0001 74 00000000", "version 2"),
        ("01 09 0001 67 0001 74 00000000", "kind 9"),
        ("01 01 0001 67 0001 74 00000001", "does not hold 1"),  # an entry announced, none there
        ("01 01 0001 67 0001 74 00000000 00", "does not hold 0"),  # a trailing byte
        ("01 01 0005 67", "not an offset record"),  # the group runs past the end
        ("01 01 0001 ff 0001 74 00000000", "not an offset record"),  # not UTF-8
        ("01 02 0001 67 0001 74 00000001 00000000 0000000000000001", "DELETE record with 1"),
        ("01 04 0001 67 0001 74 00000000", "DELETE_TOPIC record with group"),
        ("01 01 0000 0001 74 00000000", "COMMIT record with group ''"),
        ("01 01 0001 67 0001 74 00000001 ffffffff 0000000000000001", "negative"),
    ],
)
def test_malformed_bodies_are_refused(body: str, why: str) -> None:
    with pytest.raises(InvalidArgument, match=why):
        decode_offset_command(hexbytes(body))


def test_bad_commands_are_not_encoded() -> None:
    with pytest.raises(InvalidArgument, match="negative"):
        encode_offset_command(OffsetCommand(OffsetKind.COMMIT, "g", "t", {0: -1}))
    with pytest.raises(InvalidArgument, match="carries no offsets"):
        encode_offset_command(OffsetCommand(OffsetKind.DELETE, "g", "t", {0: 1}))
    with pytest.raises(InvalidArgument, match="65535"):
        encode_offset_command(OffsetCommand(OffsetKind.COMMIT, "g" * 70_000, "t"))
