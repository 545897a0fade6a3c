"""The body of SEND_BATCH_MESSAGE (320): the messages of one batch, back to back.

Message batch (``MessageDecoder.encodeMessages``), one entry per message, big-endian::

    offset  size  field
    0       4     TOTALSIZE   this entry, this field included
    4       4     MAGICCODE   0 (unused)
    8       4     BODYCRC     0 (unused)
    12      4     FLAG
    16      4     BODYLEN     then BODYLEN bytes of body
    .       2     PROPLEN     then the properties string (name\\x01value\\x02...)

Pure functions; a batch that does not decode raises :class:`BodyError` naming the entry.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from ingest_api.remoting.errors import BodyError
from store import decode_properties, encode_properties

#: TOTALSIZE, MAGICCODE, BODYCRC, FLAG, BODYLEN of one batch entry.
BATCH_ENTRY_HEAD: Final = struct.Struct(">iiiii")
#: PROPLEN (a Java short).
BATCH_PROPS_LEN: Final = struct.Struct(">h")


@dataclass(frozen=True, slots=True)
class BatchEntry:
    """One message of a batch: the user flag, the body as sent, its properties."""

    flag: int
    body: bytes
    properties: Mapping[str, str] = field(default_factory=dict)


def encode_batch(entries: Sequence[BatchEntry]) -> bytes:
    parts = []
    for entry in entries:
        props = encode_properties(entry.properties)
        size = BATCH_ENTRY_HEAD.size + len(entry.body) + BATCH_PROPS_LEN.size + len(props)
        parts += [BATCH_ENTRY_HEAD.pack(size, 0, 0, entry.flag, len(entry.body)), entry.body]
        parts += [BATCH_PROPS_LEN.pack(len(props)), props]
    return b"".join(parts)


def decode_batch(raw: bytes) -> list[BatchEntry]:
    """Split a SEND_BATCH_MESSAGE body; raises BodyError for a truncated or inconsistent entry."""
    entries: list[BatchEntry] = []
    pos = 0
    while pos < len(raw):
        if pos + BATCH_ENTRY_HEAD.size > len(raw):
            raise BodyError(f"message batch: entry {len(entries)} at byte {pos} is truncated")
        size, _magic, _crc, flag, body_len = BATCH_ENTRY_HEAD.unpack_from(raw, pos)
        body_at = pos + BATCH_ENTRY_HEAD.size
        props_len_at = body_at + body_len
        if body_len < 0 or props_len_at + BATCH_PROPS_LEN.size > len(raw):
            raise BodyError(f"message batch: entry {len(entries)} body length {body_len} overruns")
        (props_len,) = BATCH_PROPS_LEN.unpack_from(raw, props_len_at)
        end = props_len_at + BATCH_PROPS_LEN.size + props_len
        if props_len < 0 or end > len(raw) or end - pos != size:
            raise BodyError(
                f"message batch: entry {len(entries)} at byte {pos} declares {size} bytes, "
                f"its fields span {end - pos}"
            )
        props = decode_properties(raw[props_len_at + BATCH_PROPS_LEN.size : end])
        entries.append(BatchEntry(flag, raw[body_at:props_len_at], props))
        pos = end
    return entries
