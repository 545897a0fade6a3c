"""The AutoSwitch HA frames: golden bytes written out field by field from RocketMQ's layout
(``AutoSwitchHAClient`` / ``AutoSwitchHAConnection``, big-endian ``ByteBuffer``), decoding of
partial and bad input."""

from __future__ import annotations

import pytest

from store.ha import EpochEntry, HAProtocolError
from store.ha.frames import (
    MASTER_HANDSHAKE,
    MAX_TRANSFER_BODY,
    SLAVE_ACK,
    SLAVE_HANDSHAKE,
    TRANSFER_HEADER,
    HAState,
    MasterHandshake,
    SlaveAck,
    SlaveHandshake,
    TransferHeader,
    decode_master_handshake,
    decode_slave_frame,
    decode_transfer_header,
    encode_master_handshake,
    encode_slave_ack,
    encode_slave_handshake,
    encode_transfer_header,
    master_frame_state,
)


def hexbytes(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", "").replace("|", ""))


def test_sizes_are_rocketmqs() -> None:
    assert SLAVE_HANDSHAKE.size == 16  # AutoSwitchHAClient.HANDSHAKE_HEADER_SIZE = 4 + 4 + 8
    assert SLAVE_ACK.size == 12  # AutoSwitchHAClient.TRANSFER_HEADER_SIZE = 4 + 8
    assert MASTER_HANDSHAKE.size == 20  # AutoSwitchHAConnection.HANDSHAKE_HEADER_SIZE = 4 + 4 + 8 + 4
    assert TRANSFER_HEADER.size == 36  # HANDSHAKE_HEADER_SIZE + 8 + 8
    assert MAX_TRANSFER_BODY == 4 * 1024 * 1024 - 36
    assert [s.value for s in HAState] == [0, 1, 2, 3, 4]  # HAConnectionState ordinals


def test_slave_handshake_golden() -> None:
    # state HANDSHAKE=1 | isSyncFromLastFile=1 | isAsyncLearner=0 | slaveBrokerId=2
    golden = hexbytes("00000001 | 0001 | 0000 | 0000000000000002")
    assert encode_slave_handshake(SlaveHandshake(2, sync_from_last_file=True)) == golden
    assert decode_slave_frame(golden) == (SlaveHandshake(2, True, False), 16)
    learner = hexbytes("00000001 | 0000 | 0001 | 00000000000003e9")
    assert encode_slave_handshake(SlaveHandshake(1001, async_learner=True)) == learner


def test_slave_ack_golden() -> None:
    # state TRANSFER=2 | maxOffset
    golden = hexbytes("00000002 | 0000000040000123")
    assert encode_slave_ack(0x40000123) == golden
    assert decode_slave_frame(golden) == (SlaveAck(0x40000123), 12)


def test_master_handshake_golden() -> None:
    # state HANDSHAKE=1 | bodySize=24 | maxOffset=0x1000 | epoch=3 | (1, 0) | (3, 0x800)
    golden = hexbytes(
        "00000001 | 00000018 | 0000000000001000 | 00000003"
        "| 00000001 0000000000000000 | 00000003 0000000000000800"
    )
    entries = (EpochEntry(1, 0), EpochEntry(3, 0x800))
    assert encode_master_handshake(0x1000, 3, entries) == golden
    assert decode_master_handshake(golden) == MasterHandshake(0x1000, 3, entries)
    empty = hexbytes("00000001 | 00000000 | 0000000000000000 | ffffffff")
    assert encode_master_handshake(0, -1, ()) == empty


def test_transfer_header_golden() -> None:
    # state TRANSFER=2 | bodySize=5 | offset=0x10000 | epoch=3 | epochStartOffset=0x800 | confirmOffset=0xfff0
    golden = hexbytes(
        "00000002 | 00000005 | 0000000000010000 | 00000003 | 0000000000000800 | 000000000000fff0"
    )
    header = TransferHeader(5, 0x10000, 3, 0x800, 0xFFF0)
    assert encode_transfer_header(header) == golden
    assert decode_transfer_header(golden) == header
    assert master_frame_state(golden) is HAState.TRANSFER


def test_slave_stream_decodes_frame_by_frame() -> None:
    stream = encode_slave_handshake(SlaveHandshake(7)) + encode_slave_ack(99) + encode_slave_ack(100)[:5]
    first = decode_slave_frame(stream)
    assert first == (SlaveHandshake(7), 16)
    second = decode_slave_frame(stream, 16)
    assert second == (SlaveAck(99), 12)
    assert decode_slave_frame(stream, 28) is None  # an incomplete ack waits for more bytes
    assert decode_slave_frame(b"\x00\x00") is None


def test_bad_frames_are_protocol_errors() -> None:
    with pytest.raises(HAProtocolError, match="state 3"):
        decode_slave_frame(hexbytes("00000003 0000000000000000"))
    with pytest.raises(HAProtocolError, match="not a list of epoch entries"):
        decode_master_handshake(hexbytes("00000001 00000005 0000000000000000 00000001 0000000000"))
    with pytest.raises(HAProtocolError, match="expected a TRANSFER"):
        decode_transfer_header(hexbytes("00000001" + "00" * 32))
    too_big = TransferHeader(MAX_TRANSFER_BODY + 1, 0, 1, 0, 0)
    with pytest.raises(HAProtocolError, match="at most"):
        decode_transfer_header(encode_transfer_header(too_big))
    with pytest.raises(HAProtocolError):
        master_frame_state(hexbytes("00000004"))


def test_master_handshake_keeps_the_newest_thousand_entries() -> None:
    entries = [EpochEntry(e, e * 10) for e in range(1, 1201)]
    decoded = decode_master_handshake(encode_master_handshake(12_000, 1200, entries))
    assert len(decoded.entries) == 1000
    assert decoded.entries[0] == EpochEntry(201, 2010)
    assert decoded.entries[-1] == EpochEntry(1200, 12_000)
