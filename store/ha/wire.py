"""Blocking socket helpers for the HA threads (frames are :mod:`store.ha.frames`).

Each HA connection is served by plain threads with blocking sockets and timeouts, off the
broker's asyncio loop. A read waits in slices of ``poll_s`` so its thread notices a stop
request; a peer that sends nothing for the housekeeping interval is declared dead.
"""

from __future__ import annotations

import contextlib
import select
import socket
import time
from collections.abc import Sequence

from store.ha.errors import HAError

Buffer = bytes | bytearray | memoryview


class ConnectionClosed(HAError):
    """The peer closed the connection, went silent past the housekeeping interval, or this
    side was asked to stop."""

    code = "ha_connection_closed"


#: Socket timeout slice: how quickly an HA thread notices a stop request or a due heartbeat.
POLL_S = 0.2


def more_waiting(sock: socket.socket, within_s: float = 0.0) -> bool:
    """Bytes are ready to read now, or arrive within ``within_s``; False once the socket is
    closed."""
    try:
        readable, _, _ = select.select([sock], [], [], within_s)
    except (OSError, ValueError):  # closed under us (stop): the next read says so
        return False
    return bool(readable)


def tune(sock: socket.socket, timeout_s: float = POLL_S, buffer_bytes: int = 4 << 20) -> None:
    """TCP_NODELAY (acks are tiny and latency-bound), large buffers, a read timeout."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        with contextlib.suppress(OSError):  # capped by the kernel: not an error
            sock.setsockopt(socket.SOL_SOCKET, option, buffer_bytes)
    sock.settimeout(timeout_s)


def send_all(sock: socket.socket, buffers: Sequence[Buffer], stall_limit_s: float = 30.0) -> int:
    """Send every buffer (one ``sendmsg`` when the kernel takes it all); returns bytes sent.
    Raises :class:`ConnectionClosed` when the peer takes nothing for ``stall_limit_s`` (the
    socket timeout is the slice between attempts), OSError on a socket error."""
    pending = [memoryview(b).cast("B") for b in buffers if len(b)]
    total = sum(len(b) for b in pending)
    last_progress = time.monotonic()
    while pending:
        try:
            sent = sock.sendmsg(pending)
        except TimeoutError:
            if time.monotonic() - last_progress > stall_limit_s:
                raise ConnectionClosed(f"the peer took nothing for {stall_limit_s:.1f} s") from None
            continue
        last_progress = time.monotonic()
        while sent and pending:
            head = pending[0]
            if sent >= len(head):
                sent -= len(head)
                pending.pop(0)
            else:
                pending[0] = head[sent:]
                sent = 0
    return total


def close_quietly(sock: socket.socket) -> None:
    """Shut both directions (wakes a thread blocked on it) and close; errors are expected
    here (the peer may be gone) and carry no information."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
