"""Blocking socket helpers for the HA threads (frames are :mod:`store.ha.frames`).

Each HA connection is served by plain threads with blocking sockets and timeouts, off the
broker's asyncio loop. A read waits in slices of ``poll_s`` so its thread notices a stop
request; a peer that sends nothing for the housekeeping interval is declared dead.
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
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
    closed. A TLS socket may already hold decrypted bytes ``select`` cannot see."""
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
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
    if isinstance(sock, ssl.SSLSocket):
        return _send_all_tls(sock, pending, total, stall_limit_s)
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


#: Below this, a TLS send joins the buffers (one record instead of a header record and a body).
_TLS_JOIN_BYTES = 64 << 10


def _send_all_tls(sock: ssl.SSLSocket, pending: list[memoryview], total: int, stall_limit_s: float) -> int:
    """``SSLSocket`` has no ``sendmsg``: one ``send`` per buffer (small ones joined). OpenSSL
    writes a buffer whole or not at all, so a timed-out send is retried with the same buffer."""
    if len(pending) > 1 and total <= _TLS_JOIN_BYTES:
        pending = [memoryview(b"".join(pending))]
    last_progress = time.monotonic()
    for buffer in pending:
        view = buffer
        while view:
            try:
                sent = sock.send(view)
            except (TimeoutError, ssl.SSLWantWriteError):
                if time.monotonic() - last_progress > stall_limit_s:
                    raise ConnectionClosed(f"the peer took nothing for {stall_limit_s:.1f} s") from None
                continue
            last_progress = time.monotonic()
            view = view[sent:]
    return total


def close_quietly(sock: socket.socket) -> None:
    """Shut both directions (wakes a thread blocked on it) and close; errors are expected
    here (the peer may be gone) and carry no information."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
