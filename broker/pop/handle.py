"""Receipt handles: the opaque string a POP receive hands out with each message (pure codec).

A handle names one delivery of one message and is signed, so a forged or altered handle is
told apart from a stale one. The bytes, big-endian, then base64url without padding::

    0    1      2          6              14             22              30
    +----+------+----------+--------------+--------------+---------------+
    | ver|source| queue i32| queue_off i64| generation u64| visible_at i64|
    +----+------+----------+--------------+--------------+---------------+
    | group_len u8 | group | topic_len u8 | topic | mac (16 bytes) |

``mac`` is HMAC-SHA256 under the store's POP secret over every byte before it, cut to 16
bytes. The secret lives in the state topic's snapshots (:mod:`broker.pop.state_codec`), so a
slave that becomes master accepts the handles its old master signed.

* Not base64, too short or long, a bad version or name: :class:`InvalidReceiptHandle`.
* A wrong mac (forged or altered): :class:`InvalidReceiptHandle`.
* Well signed but not the message's current delivery: the service answers
  :class:`~broker.pop.errors.ReceiptHandleExpired` (it knows the generation; this codec does not).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import struct
from dataclasses import dataclass

from broker.pop.errors import InvalidReceiptHandle
from broker.pop.state_codec import Source

VERSION = 1
#: version u8 | source u8 | queue_id i32 | queue_offset i64 | generation u64 | visible_at_ms i64
FIXED = struct.Struct(">BBiqQq")
NAME_LEN = struct.Struct(">B")
MAC_SIZE = 16
#: Longest handle accepted, in characters (two 255-byte names and the fixed part, encoded).
MAX_HANDLE_CHARS = 4 * (FIXED.size + 2 + 2 * 255 + MAC_SIZE) // 3 + 4


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    group: str
    topic: str
    source: Source
    queue_id: int
    queue_offset: int
    generation: int
    visible_at_ms: int

    @property
    def key(self) -> tuple[Source, int, int]:
        return (self.source, self.queue_id, self.queue_offset)


def _mac(secret: bytes, payload: bytes) -> bytes:
    return hmac.digest(secret, payload, hashlib.sha256)[:MAC_SIZE]


def encode_handle(handle: ReceiptHandle, secret: bytes) -> str:
    """The handle string (ASCII, URL-safe)."""
    group, topic = handle.group.encode(), handle.topic.encode()
    payload = b"".join(
        (
            FIXED.pack(
                VERSION,
                handle.source,
                handle.queue_id,
                handle.queue_offset,
                handle.generation,
                handle.visible_at_ms,
            ),
            NAME_LEN.pack(len(group)),
            group,
            NAME_LEN.pack(len(topic)),
            topic,
        )
    )
    return base64.urlsafe_b64encode(payload + _mac(secret, payload)).rstrip(b"=").decode("ascii")


def _payload(text: str) -> tuple[bytes, bytes]:
    """``(payload, mac)`` of a handle string; InvalidReceiptHandle if it is not one."""
    if not isinstance(text, str) or not 0 < len(text) <= MAX_HANDLE_CHARS:
        raise InvalidReceiptHandle(
            f"a receipt handle is a non-empty string of at most {MAX_HANDLE_CHARS} characters"
        )
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise InvalidReceiptHandle("receipt handle is not base64url") from None
    if len(raw) < FIXED.size + 2 + MAC_SIZE:
        raise InvalidReceiptHandle("receipt handle is too short")
    return raw[:-MAC_SIZE], raw[-MAC_SIZE:]


def _parse(payload: bytes) -> ReceiptHandle:
    version, source, queue_id, offset, generation, visible_at = FIXED.unpack_from(payload)
    if version != VERSION or source not in (Source.TOPIC, Source.RETRY):
        raise InvalidReceiptHandle(f"receipt handle version {version} / source {source} unknown")
    pos = FIXED.size
    names = []
    for _ in range(2):
        (length,) = NAME_LEN.unpack_from(payload, pos) if pos < len(payload) else (-1,)
        if length < 0 or pos + 1 + length > len(payload):
            raise InvalidReceiptHandle("receipt handle names are truncated")
        names.append(payload[pos + 1 : pos + 1 + length].decode("utf-8", "replace"))
        pos += 1 + length
    if pos != len(payload):
        raise InvalidReceiptHandle("receipt handle has trailing bytes")
    return ReceiptHandle(names[0], names[1], Source(source), queue_id, offset, generation, visible_at)


def decode_handle(text: str, secret: bytes) -> ReceiptHandle:
    """The handle ``text`` names; raises :class:`InvalidReceiptHandle` if it is malformed or
    was not signed with ``secret``."""
    payload, mac = _payload(text)
    if not hmac.compare_digest(mac, _mac(secret, payload)):
        raise InvalidReceiptHandle("receipt handle was not issued by this broker (bad signature)")
    return _parse(payload)


def claimed_topic(text: str) -> str:
    """The topic a handle *claims*, signature unchecked: what a door authorizes before the
    service verifies the handle. Raises :class:`InvalidReceiptHandle` if it is malformed."""
    return _parse(_payload(text)[0]).topic
