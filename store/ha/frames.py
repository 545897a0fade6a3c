"""The AutoSwitch HA wire frames (RocketMQ 5 controller mode), declared once. Big-endian.

Verified against apache/rocketmq ``develop`` @ 8fc57f14,
``store/src/main/java/org/apache/rocketmq/store/ha/autoswitch/``:

slave -> master, handshake (``AutoSwitchHAClient.HANDSHAKE_HEADER_SIZE = 4 + 4 + 8``, lines
46-68; written by ``sendHandshakeHeader``, lines 290-306; read by
``AutoSwitchHAConnection.HAServerReader``, lines 316-336)::

    0   i32  state = HANDSHAKE (1)
    4   i16  isSyncFromLastFile   1: a new replica starts at the master's last file
    6   i16  isAsyncLearner       1: never enters the in-sync set
    8   i64  slaveBrokerId
    = 16 bytes

slave -> master, ack (``AutoSwitchHAClient.TRANSFER_HEADER_SIZE = 4 + 8``, lines 92-103;
``reportSlaveOffset``, lines 322-329; read at ``AutoSwitchHAConnection`` lines 337-349)::

    0   i32  state = TRANSFER (2)
    4   i64  maxOffset            the slave's CommitLog max offset
    = 12 bytes

master -> slave, handshake (``AutoSwitchHAConnection.HANDSHAKE_HEADER_SIZE = 4 + 4 + 8 + 4``,
lines 43-56; ``buildHandshakeBuffer``, lines 476-504; read by ``AutoSwitchHAClient`` lines
486-535)::

    0   i32  state = HANDSHAKE (1)
    4   i32  bodySize             12 x number of epoch entries (RocketMQ keeps <= 1000)
    8   i64  maxOffset            the master's CommitLog max offset
    16  i32  epoch                the master's last epoch
    = 20 bytes, then bodySize / 12 epoch entries:
    0   i32  epoch
    4   i64  startOffset
    = 12 bytes each (``EPOCH_ENTRY_SIZE``)

master -> slave, transfer (``TRANSFER_HEADER_SIZE = HANDSHAKE_HEADER_SIZE + 8 + 8``, lines
58-71; ``buildTransferHeaderBuffer``, lines 519-553; read at ``AutoSwitchHAClient`` lines
537-574)::

    0   i32  state = TRANSFER (2)
    4   i32  bodySize             raw CommitLog bytes that follow (0: heartbeat)
    8   i64  offset               CommitLog offset of the first byte
    16  i32  epoch                epoch that wrote these bytes (a body never crosses epochs)
    20  i64  epochStartOffset     where that epoch starts
    28  i64  confirmOffset        the master's confirm offset
    = 36 bytes

States are ``HAConnectionState`` ordinals (``store/.../ha/HAConnectionState.java``). A frame
body must fit RocketMQ's 4 MiB receive buffer together with its header
(``AutoSwitchHAClient.READ_MAX_BUFFER_SIZE``, line 106): :data:`MAX_TRANSFER_BODY`.

Pure codecs: bytes in, values out; no sockets here.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from store.ha.epoch_file import EpochEntry
from store.ha.errors import HAProtocolError


class HAState(enum.IntEnum):
    """``HAConnectionState``: the first field of every frame is one of these ordinals."""

    READY = 0
    HANDSHAKE = 1
    TRANSFER = 2
    SUSPEND = 3
    SHUTDOWN = 4


#: slave -> master handshake: state, isSyncFromLastFile, isAsyncLearner, slaveBrokerId.
SLAVE_HANDSHAKE: Final = struct.Struct(">ihhq")
#: slave -> master ack: state, maxOffset.
SLAVE_ACK: Final = struct.Struct(">iq")
#: master -> slave handshake header: state, bodySize, maxOffset, epoch.
MASTER_HANDSHAKE: Final = struct.Struct(">iiqi")
#: one epoch entry of the master handshake body: epoch, startOffset.
EPOCH_ENTRY: Final = struct.Struct(">iq")
#: master -> slave transfer header: state, bodySize, offset, epoch, epochStartOffset, confirmOffset.
TRANSFER_HEADER: Final = struct.Struct(">iiqiqq")
#: The state field leads every frame.
STATE: Final = struct.Struct(">i")

#: RocketMQ's slave receive buffer; a whole frame must fit in it.
ROCKETMQ_READ_BUFFER: Final = 4 << 20
#: Largest transfer body a RocketMQ slave can take (its buffer minus the header).
MAX_TRANSFER_BODY: Final = ROCKETMQ_READ_BUFFER - TRANSFER_HEADER.size
#: The master's handshake buffer holds at most this many epoch entries.
MAX_HANDSHAKE_ENTRIES: Final = 1000


@dataclass(frozen=True, slots=True)
class SlaveHandshake:
    slave_broker_id: int
    sync_from_last_file: bool = False
    async_learner: bool = False


@dataclass(frozen=True, slots=True)
class SlaveAck:
    #: The slave's CommitLog max offset.
    max_offset: int


@dataclass(frozen=True, slots=True)
class MasterHandshake:
    max_offset: int
    #: The master's last epoch (-1: none yet).
    epoch: int
    entries: tuple[EpochEntry, ...]


@dataclass(frozen=True, slots=True)
class TransferHeader:
    body_size: int
    offset: int
    epoch: int
    epoch_start_offset: int
    confirm_offset: int


SlaveFrame = SlaveHandshake | SlaveAck


def encode_slave_handshake(frame: SlaveHandshake) -> bytes:
    return SLAVE_HANDSHAKE.pack(
        HAState.HANDSHAKE, int(frame.sync_from_last_file), int(frame.async_learner), frame.slave_broker_id
    )


def encode_slave_ack(max_offset: int) -> bytes:
    return SLAVE_ACK.pack(HAState.TRANSFER, max_offset)


def decode_slave_frame(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[SlaveFrame, int] | None:
    """The slave frame at ``buf[pos:]`` and its size, None when incomplete. Raises
    :class:`HAProtocolError` for a state that is neither HANDSHAKE nor TRANSFER (RocketMQ's
    master drops the connection then, ``AutoSwitchHAConnection`` lines 350-352)."""
    if len(buf) - pos < STATE.size:
        return None
    (state,) = STATE.unpack_from(buf, pos)
    if state == HAState.HANDSHAKE:
        if len(buf) - pos < SLAVE_HANDSHAKE.size:
            return None
        _, last_file, learner, broker_id = SLAVE_HANDSHAKE.unpack_from(buf, pos)
        return SlaveHandshake(broker_id, last_file == 1, learner == 1), SLAVE_HANDSHAKE.size
    if state == HAState.TRANSFER:
        if len(buf) - pos < SLAVE_ACK.size:
            return None
        _, max_offset = SLAVE_ACK.unpack_from(buf, pos)
        return SlaveAck(max_offset), SLAVE_ACK.size
    raise HAProtocolError(f"slave sent a frame in state {state} (expected HANDSHAKE or TRANSFER)")


def encode_master_handshake(max_offset: int, epoch: int, entries: Sequence[EpochEntry]) -> bytes:
    """Header and body; the newest :data:`MAX_HANDSHAKE_ENTRIES` entries at most."""
    kept = list(entries)[-MAX_HANDSHAKE_ENTRIES:]
    body = b"".join(EPOCH_ENTRY.pack(e.epoch, e.start_offset) for e in kept)
    return MASTER_HANDSHAKE.pack(HAState.HANDSHAKE, len(body), max_offset, epoch) + body


def encode_transfer_header(header: TransferHeader) -> bytes:
    return TRANSFER_HEADER.pack(
        HAState.TRANSFER,
        header.body_size,
        header.offset,
        header.epoch,
        header.epoch_start_offset,
        header.confirm_offset,
    )


def master_frame_state(buf: bytes | bytearray | memoryview) -> HAState:
    """The state of a master frame from its first 4 bytes (HANDSHAKE or TRANSFER)."""
    (state,) = STATE.unpack_from(buf, 0)
    if state not in (HAState.HANDSHAKE, HAState.TRANSFER):
        raise HAProtocolError(f"master sent a frame in state {state} (expected HANDSHAKE or TRANSFER)")
    return HAState(state)


def decode_master_handshake_header(buf: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """``(body_size, max_offset, epoch)`` of a 20-byte master handshake header."""
    state, body_size, max_offset, epoch = MASTER_HANDSHAKE.unpack_from(buf, 0)
    if state != HAState.HANDSHAKE:
        raise HAProtocolError(f"expected a HANDSHAKE frame, got state {state}")
    if body_size < 0 or body_size % EPOCH_ENTRY.size:
        raise HAProtocolError(f"handshake body of {body_size} bytes is not a list of epoch entries")
    return body_size, max_offset, epoch


def decode_epoch_entries(body: bytes | bytearray | memoryview) -> tuple[EpochEntry, ...]:
    return tuple(EpochEntry(epoch, start) for epoch, start in EPOCH_ENTRY.iter_unpack(body))


def decode_master_handshake(buf: bytes | bytearray | memoryview) -> MasterHandshake:
    """A whole master handshake (header and body)."""
    body_size, max_offset, epoch = decode_master_handshake_header(buf)
    body = memoryview(buf)[MASTER_HANDSHAKE.size : MASTER_HANDSHAKE.size + body_size]
    if len(body) != body_size:
        raise HAProtocolError(f"handshake body is {len(body)} bytes, the header says {body_size}")
    return MasterHandshake(max_offset, epoch, decode_epoch_entries(body))


def decode_transfer_header(buf: bytes | bytearray | memoryview) -> TransferHeader:
    """A 36-byte transfer header; raises :class:`HAProtocolError` for a bad state or size."""
    state, body_size, offset, epoch, epoch_start, confirm = TRANSFER_HEADER.unpack_from(buf, 0)
    if state != HAState.TRANSFER:
        raise HAProtocolError(f"expected a TRANSFER frame, got state {state}")
    if body_size < 0 or body_size > MAX_TRANSFER_BODY:
        raise HAProtocolError(f"transfer body of {body_size} bytes (at most {MAX_TRANSFER_BODY})")
    return TransferHeader(body_size, offset, epoch, epoch_start, confirm)
