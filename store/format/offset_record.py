"""The body of a consumer-offset record (``rmq_sys_CONSUMER_OFFSETS`` queue 0), defined once.

A group's offset commit is a CommitLog record like a message (sparkmq's ``__consumer_offsets``),
so replication carries it under the same acks, and the in-memory offset table is what these
records say (:mod:`store.write.offset_log`). The record is an ordinary V1 record of the
system topic; its *body* is this little binary command, big-endian::

    offset  size  field
    0       1     VERSION      1
    1       1     KIND         OffsetKind: 1 COMMIT, 2 DELETE, 3 DELETE_GROUP, 4 DELETE_TOPIC
    2       2     GROUPLEN     u16, then GROUPLEN bytes of UTF-8 group (empty for DELETE_TOPIC)
    .       2     TOPICLEN     u16, then TOPICLEN bytes of UTF-8 topic (empty for DELETE_GROUP)
    .       4     COUNT        u32: queue entries that follow (0 unless COMMIT)
    .       12    x COUNT      [QUEUEID i32][OFFSET i64], queue ids strictly ascending

* COMMIT: ``group`` consumes ``topic`` queue ``QUEUEID`` next at ``OFFSET`` (one record holds
  every queue of one commit call: a commit of 64 queues is one 780-byte append, not 64).
* DELETE: forget ``group``'s offsets for ``topic``; DELETE_GROUP: for every topic;
  DELETE_TOPIC: every group's offsets for ``topic`` (the topic was deleted).

Pure functions on bytes; a body that is not exactly this raises
:class:`~store.errors.InvalidArgument` (the applier logs and skips it).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from store.errors import InvalidArgument

OFFSET_RECORD_VERSION: Final = 1
#: VERSION, KIND, GROUPLEN.
HEAD: Final = struct.Struct(">BBH")
NAME_LEN: Final = struct.Struct(">H")
COUNT: Final = struct.Struct(">I")
#: One queue entry: QUEUEID, OFFSET.
ENTRY: Final = struct.Struct(">iq")
MAX_NAME_BYTES: Final = 0xFFFF


class OffsetKind(enum.IntEnum):
    COMMIT = 1
    DELETE = 2
    DELETE_GROUP = 3
    DELETE_TOPIC = 4


@dataclass(frozen=True, slots=True)
class OffsetCommand:
    """One decoded record body (see the module docstring for what each kind means)."""

    kind: OffsetKind
    group: str = ""
    topic: str = ""
    #: queue id -> next offset to consume (COMMIT only).
    offsets: Mapping[int, int] = field(default_factory=dict)


def encode_offset_command(command: OffsetCommand) -> bytes:
    """The record body of ``command`` (queues sorted). Raises InvalidArgument for a name
    longer than 65535 bytes, a negative queue id or offset, or queues on a non-COMMIT."""
    group = command.group.encode("utf-8")
    topic = command.topic.encode("utf-8")
    if len(group) > MAX_NAME_BYTES or len(topic) > MAX_NAME_BYTES:
        raise InvalidArgument("group or topic longer than 65535 bytes")
    if command.offsets and command.kind is not OffsetKind.COMMIT:
        raise InvalidArgument(f"a {command.kind.name} record carries no offsets")
    entries = sorted((int(q), int(o)) for q, o in command.offsets.items())
    _checked(command, len(entries))
    parts = [
        HEAD.pack(OFFSET_RECORD_VERSION, int(command.kind), len(group)),
        group,
        NAME_LEN.pack(len(topic)),
        topic,
        COUNT.pack(len(entries)),
    ]
    parts.extend(ENTRY.pack(q, o) for q, o in entries)
    return b"".join(parts)


def decode_offset_command(body: bytes | bytearray | memoryview) -> OffsetCommand:
    """Inverse of :func:`encode_offset_command`; raises InvalidArgument on anything else."""
    data = bytes(body)
    try:
        version, kind_code, group_len = HEAD.unpack_from(data, 0)
        pos = HEAD.size
        group = data[pos : pos + group_len].decode("utf-8")
        pos += group_len
        (topic_len,) = NAME_LEN.unpack_from(data, pos)
        pos += NAME_LEN.size
        topic = data[pos : pos + topic_len].decode("utf-8")
        pos += topic_len
        (count,) = COUNT.unpack_from(data, pos)
        pos += COUNT.size
    except (struct.error, UnicodeDecodeError) as exc:
        raise InvalidArgument(f"not an offset record: {exc}") from exc
    if version != OFFSET_RECORD_VERSION:
        raise InvalidArgument(f"offset record version {version} (this build reads {OFFSET_RECORD_VERSION})")
    if kind_code not in OffsetKind._value2member_map_:
        raise InvalidArgument(f"offset record kind {kind_code} is unknown")
    if len(data) != pos + count * ENTRY.size:
        raise InvalidArgument(f"offset record of {len(data)} bytes does not hold {count} queue entries")
    offsets = dict(ENTRY.iter_unpack(data[pos:]))
    return _checked(OffsetCommand(OffsetKind(kind_code), group, topic, offsets), count)


def _checked(command: OffsetCommand, count: int) -> OffsetCommand:
    """The rules :func:`encode_offset_command` follows, checked on a decoded body."""
    needs_group = command.kind is not OffsetKind.DELETE_TOPIC
    needs_topic = command.kind is not OffsetKind.DELETE_GROUP
    if bool(command.group) != needs_group or bool(command.topic) != needs_topic:
        raise InvalidArgument(
            f"a {command.kind.name} record with group {command.group!r}, topic {command.topic!r}"
        )
    if len(command.offsets) != count or (count and command.kind is not OffsetKind.COMMIT):
        raise InvalidArgument(f"a {command.kind.name} record with {count} queue entries")
    if any(q < 0 or o < 0 for q, o in command.offsets.items()):
        raise InvalidArgument("an offset record with a negative queue id or offset")
    return command
