"""Message ids and their hex layouts, defined once: offsetMsgId, UNIQ_KEY, IPv4 hosts.

offsetMsgId (what RocketMQ's ``MessageDecoder.createMessageId`` returns)::

    bytes  0-3   store IPv4 address
           4-7   store port (big-endian int)
           8-15  CommitLog offset of the record (big-endian long)
    text   32 upper-case hex digits of those 16 bytes

UNIQ_KEY (``MessageClientIDSetter``)::

    bytes  0-3   producer IPv4 address
           4-5   pid (low 16 bits)
           6-9   class-loader hash
           10-13 ms since the start of the month (wraps like Java's int cast)
           14-15 counter
    text   32 upper-case hex digits of those 16 bytes

Every layout has a scalar function (one id) and a vectorised one (NumPy ``(n, 32)`` ASCII
arrays, no Python string per id until the caller asks for them). The UNIQ_KEY generator lives
here too. Pure functions, except :class:`UniqKeyGenerator` (a clock and a lock, both injectable).
"""

from __future__ import annotations

import datetime as dt
import functools
import ipaddress
import os
import secrets
import socket
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from store.errors import InvalidArgument
from store.format.arrow_ranges import ArrowStrings
from store.io.clock import wall_clock_ms

U8 = npt.NDArray[np.uint8]

# --- hex, vectorised ------------------------------------------------------------------------------

_HEX_DIGITS: Final = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)
#: Upper-case hex of a byte / of a little-endian byte pair, as ASCII in memory order.
_HEX_OF_BYTE: Final = np.array([int.from_bytes(f"{b:02X}".encode(), "little") for b in range(256)], "<u2")
_HEX_OF_PAIR: Final = _HEX_OF_BYTE[np.arange(1 << 16) & 0xFF].astype("<u4") | (
    _HEX_OF_BYTE[np.arange(1 << 16) >> 8].astype("<u4") << 16
)


def hex_of_bytes(raw: U8) -> U8:
    """``(rows, k)`` bytes -> ``(rows, 2k)`` upper-case hex digits (ASCII): ``bytes.hex().upper()``."""
    if raw.shape[1] % 2:
        digits: U8 = _HEX_OF_BYTE[raw].view(np.uint8)
    else:
        digits = _HEX_OF_PAIR[np.ascontiguousarray(raw).view("<u2")].view(np.uint8)
    return digits


def hex_of_ints(values: npt.ArrayLike, width: int) -> U8:
    """``(n, 2 * width)`` upper-case hex digits of each value as a big-endian unsigned
    ``width``-byte int (``f"{v:0{2 * width}X}"``)."""
    raw = np.asarray(values).astype(f">u{width}").view(np.uint8).reshape(-1, width)
    return hex_of_bytes(raw)


def ascii_rows(chars: U8) -> list[str]:
    """Row i of an ``(n, width)`` ASCII array as the i-th string."""
    count, width = chars.shape
    text = np.ascontiguousarray(chars).tobytes().decode("ascii")
    return [text[i : i + width] for i in range(0, count * width, width)]


def ascii_rows_array(chars: U8) -> pa.StringArray:
    """:func:`ascii_rows` as an Arrow string column (no Python string per row)."""
    count, width = chars.shape
    if count * width > np.iinfo(np.int32).max:
        raise InvalidArgument(f"{count} values of {width} bytes exceed one Arrow string array")
    offsets = np.arange(count + 1, dtype=np.int32) * np.int32(width)
    array = pa.StringArray.from_buffers(
        count, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(chars))
    )
    assert isinstance(array, pa.StringArray)
    return array


# --- IPv4 hosts -----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1024)
def ip4_bytes(host: str) -> bytes:
    """IPv4 address -> 4 bytes. IPv4-mapped IPv6 (``::ffff:a.b.c.d``) is accepted; any other
    host raises InvalidArgument (records carry IPv4 hosts only: no BORNHOST_V6 layout)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError as exc:
        raise InvalidArgument(f"not an IP address: {host!r}") from exc
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is None:
            raise InvalidArgument(f"IPv6 host {host!r} cannot be stored (IPv4 records only)")
        address = address.ipv4_mapped
    return address.packed


# --- offsetMsgId ----------------------------------------------------------------------------------

#: offsetMsgId: store IPv4 (4) + store port (4) + CommitLog offset (8), as 32 upper-case hex.
MSG_ID: Final = struct.Struct(">4siq")
MSG_ID_HEX_LEN: Final = 2 * MSG_ID.size  # 32
#: The store host part (IPv4 + port) of an offsetMsgId, and its hex digits.
MSG_ID_HOST_BYTES: Final = MSG_ID.size - 8
MSG_ID_HOST_DIGITS: Final = 2 * MSG_ID_HOST_BYTES


def encode_msg_id(store_host: tuple[str, int], commitlog_offset: int) -> str:
    """offsetMsgId: upper-case hex of store IPv4 + port + CommitLog offset (32 chars)."""
    return MSG_ID.pack(ip4_bytes(store_host[0]), store_host[1], commitlog_offset).hex().upper()


def decode_msg_id(msg_id: str) -> tuple[tuple[str, int], int]:
    """((store ip, port), CommitLog offset) of an offsetMsgId; InvalidArgument if malformed."""
    if len(msg_id) != MSG_ID_HEX_LEN:
        raise InvalidArgument(f"msg id must be {MSG_ID_HEX_LEN} hex chars, got {len(msg_id)}")
    try:
        ip, port, offset = MSG_ID.unpack(bytes.fromhex(msg_id))
    except ValueError as exc:
        raise InvalidArgument(f"msg id is not hex: {msg_id!r}") from exc
    return (socket.inet_ntoa(ip), port), offset


def msg_id_host_bytes(store_host: tuple[str, int]) -> bytes:
    """The first :data:`MSG_ID_HOST_BYTES` bytes of every offsetMsgId of ``store_host``."""
    return MSG_ID.pack(ip4_bytes(store_host[0]), store_host[1], 0)[:MSG_ID_HOST_BYTES]


def msg_id_chars(store_host: tuple[str, int], commitlog_offsets: npt.ArrayLike) -> U8:
    """Vectorised :func:`encode_msg_id`: ``(n, 32)`` ASCII, one offsetMsgId per offset."""
    offsets = np.asarray(commitlog_offsets, dtype=np.int64).reshape(-1)
    chars = np.empty((len(offsets), MSG_ID_HEX_LEN), dtype=np.uint8)
    host = np.frombuffer(msg_id_host_bytes(store_host), dtype=np.uint8)
    chars[:, :MSG_ID_HOST_DIGITS] = hex_of_bytes(host[None, :])
    chars[:, MSG_ID_HOST_DIGITS:] = hex_of_ints(offsets, 8)
    return chars


# --- UNIQ_KEY (MessageClientIDSetter) -------------------------------------------------------------

UNIQ_KEY_PREFIX: Final = struct.Struct(">4sHI")
UNIQ_KEY_SUFFIX: Final = struct.Struct(">IH")
UNIQ_KEY_HEX_LEN: Final = 2 * (UNIQ_KEY_PREFIX.size + UNIQ_KEY_SUFFIX.size)  # 32
UNIQ_COUNTER_SPAN: Final = 1 << 16


def uniq_key_prefix(ip: str, pid: int, loader_hash: int) -> str:
    """The 20 fixed hex chars of every UNIQ_KEY a generator produces."""
    return UNIQ_KEY_PREFIX.pack(ip4_bytes(ip), pid & 0xFFFF, loader_hash & 0xFFFFFFFF).hex().upper()


def month_start_ms(epoch_ms: int) -> int:
    """Start (UTC) of the month containing ``epoch_ms``; RocketMQ uses the local calendar."""
    now = dt.datetime.fromtimestamp(epoch_ms / 1000, tz=dt.UTC)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return int(start.timestamp() * 1000)


def encode_uniq_key(prefix: str, ms_since_month: int, counter: int) -> str:
    """One UNIQ_KEY from its prefix (see :func:`uniq_key_prefix`), time diff and counter."""
    return prefix + UNIQ_KEY_SUFFIX.pack(ms_since_month & 0xFFFFFFFF, counter & 0xFFFF).hex().upper()


def decode_uniq_key(uniq_key: str) -> tuple[str, int, int, int, int]:
    """(ip, pid, loader hash, ms since month start, counter) of a UNIQ_KEY."""
    if len(uniq_key) != UNIQ_KEY_HEX_LEN:
        raise InvalidArgument(f"UNIQ_KEY must be {UNIQ_KEY_HEX_LEN} hex chars, got {len(uniq_key)}")
    raw = bytes.fromhex(uniq_key)
    ip, pid, loader = UNIQ_KEY_PREFIX.unpack_from(raw, 0)
    diff, counter = UNIQ_KEY_SUFFIX.unpack_from(raw, UNIQ_KEY_PREFIX.size)
    return socket.inet_ntoa(ip), pid, loader, diff, counter


def uniq_key_chars(prefix: bytes, ms_since_month: npt.ArrayLike, counters: npt.ArrayLike) -> U8:
    """Vectorised :func:`encode_uniq_key` from the prefix *bytes*: ``(n, 32)`` ASCII."""
    diff = np.asarray(ms_since_month, dtype=np.int64) & 0xFFFFFFFF
    counter = np.asarray(counters, dtype=np.int64) & 0xFFFF
    n = len(counter)
    raw = np.empty((n, UNIQ_KEY_PREFIX.size + UNIQ_KEY_SUFFIX.size), dtype=np.uint8)
    raw[:, : UNIQ_KEY_PREFIX.size] = np.frombuffer(prefix, dtype=np.uint8)
    raw[:, UNIQ_KEY_PREFIX.size : UNIQ_KEY_PREFIX.size + 4] = (
        np.broadcast_to(diff, (n,)).astype(">u4").view(np.uint8).reshape(n, 4)
    )
    raw[:, UNIQ_KEY_PREFIX.size + 4 :] = counter.astype(">u2").view(np.uint8).reshape(n, 2)
    return hex_of_bytes(raw)


#: Up to this many keys are generated without NumPy.
_SCALAR_KEYS = 8


class UniqKeyGenerator:
    """RocketMQ ``MessageClientIDSetter``: 32 hex chars, unique per generator.

    The (ms since month start, counter) suffix is strictly increasing: when more than 65536
    keys are needed within one millisecond the time part runs ahead of the clock instead of
    wrapping the counter. ``clock_ms`` is injectable; the month is the UTC calendar month.
    """

    def __init__(
        self,
        ip: str = "127.0.0.1",
        pid: int | None = None,
        loader_hash: int | None = None,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self._prefix = UNIQ_KEY_PREFIX.pack(
            ip4_bytes(ip),
            (os.getpid() if pid is None else pid) & 0xFFFF,
            (secrets.randbits(32) if loader_hash is None else loader_hash) & 0xFFFFFFFF,
        )
        self._clock = clock_ms if clock_ms is not None else wall_clock_ms
        self._lock = threading.Lock()
        self._last_ms = -1
        self._counter = UNIQ_COUNTER_SPAN - 1
        self._month = (0, -1)  # (start, next start) of the cached month

    def _reserve(self, n: int) -> tuple[int, int]:
        """(first ms, first counter) of n consecutive keys; advances the state past them."""
        with self._lock:
            now = self._clock()
            if now > self._last_ms:
                start_ms, start_counter = now, 0
            else:
                linear = self._counter + 1
                start_ms = self._last_ms + linear // UNIQ_COUNTER_SPAN
                start_counter = linear % UNIQ_COUNTER_SPAN
            last = start_counter + n - 1
            self._last_ms = start_ms + last // UNIQ_COUNTER_SPAN
            self._counter = last % UNIQ_COUNTER_SPAN
            return start_ms, start_counter

    def _month_start(self, epoch_ms: int) -> int:
        start, next_start = self._month
        if not start <= epoch_ms < next_start:
            start = month_start_ms(epoch_ms)
            self._month = (start, month_start_ms(start + 32 * 86_400_000))
        return start

    def next_batch_ascii(self, n: int) -> U8:
        """n keys as an (n, 32) array of ASCII hex digits."""
        start_ms, start_counter = self._reserve(n)
        linear = start_counter + np.arange(n, dtype=np.int64)
        diff = start_ms - self._month_start(start_ms) + (linear >> 16)
        return uniq_key_chars(self._prefix, diff, linear)

    def next_batch(self, n: int) -> list[str]:
        """n keys, in generation order."""
        if n <= _SCALAR_KEYS:  # NumPy's per-call overhead dominates tiny batches
            start_ms, start_counter = self._reserve(n)
            prefix = self._prefix.hex().upper()
            base = start_ms - self._month_start(start_ms)
            return [
                encode_uniq_key(prefix, base + (linear >> 16), linear)
                for linear in range(start_counter, start_counter + n)
            ]
        return ascii_rows(self.next_batch_ascii(n))

    def next_column(self, n: int) -> Sequence[str]:
        """:meth:`next_batch` as a column: an :class:`ArrowStrings` for large batches, so the
        store encodes, returns and indexes the keys without a Python string per key."""
        if n <= _SCALAR_KEYS:
            return self.next_batch(n)
        return ArrowStrings(ascii_rows_array(self.next_batch_ascii(n)))  # type: ignore[return-value]

    def next(self) -> str:
        return self.next_batch(1)[0]
