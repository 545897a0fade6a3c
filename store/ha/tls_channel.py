"""TLS on a connection that one thread reads while another writes (the master's side of HA).

OpenSSL forbids using one ``SSL`` object from two threads at once, and an ``ssl.SSLSocket`` is
one such object. The master serves each slave with a reader thread (acks) and a writer thread
(the log). On one ``SSLSocket`` the two collide once the send buffer fills: the reader's
``SSL_read`` sees the writer's want-write state, reports an EOF, and ``SSLSocket`` turns it into
a 0-byte read, that is "the slave closed the connection". Measured before this module: every
sync round of ``bench.security_cluster_bench`` at load 5 lost its slave within 4 s, and each put
then failed with ``SlaveNotAvailable``.

Here the TLS state is an ``ssl.SSLObject`` over two memory BIOs. It is touched only under
``_state``, held for the encryption or decryption alone. The socket I/O runs outside that lock,
so a reader waiting for acks never blocks the writer. Encrypted bytes must leave in the order
they were made. Draining the outgoing BIO and sending what it held therefore happen under one
``_send`` lock, whether the writer drains it after ``write`` or the reader after ``read`` (TLS
1.3 post-handshake messages). Lock order: ``_send``, then ``_state``.

Semantics follow the socket's: :meth:`recv_into` returns 0 when the peer closed and raises
``TimeoutError`` when the socket's timeout slice passed with nothing decrypted.
:meth:`sendall` sends everything or raises.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Sequence
from typing import cast

from store.ha.wire import Buffer, send_all

#: Bytes read from the socket at a time (a TLS record is at most 16 KiB plus overhead).
RECV_BYTES = 256 << 10


class TlsChannel:
    """An established TLS session over ``raw`` (a connected socket with a timeout slice)."""

    def __init__(
        self, raw: socket.socket, tls: ssl.SSLObject, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO
    ) -> None:
        self.raw = raw
        self.ssl_object = tls
        self._incoming = incoming
        self._outgoing = outgoing
        self._state = threading.Lock()
        self._send = threading.Lock()
        self.stall_limit_s = 30.0
        self._inbox = bytearray(RECV_BYTES)  # only the reading thread fills it

    @classmethod
    def accept(cls, raw: socket.socket, context: ssl.SSLContext, handshake_timeout_s: float) -> TlsChannel:
        """The server's side: run the handshake within ``handshake_timeout_s``; raises
        ``ssl.SSLError`` (no or a bad certificate), ``TimeoutError`` or :class:`ConnectionClosed`."""
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        channel = cls(raw, context.wrap_bio(incoming, outgoing, server_side=True), incoming, outgoing)
        channel._handshake(time.monotonic() + handshake_timeout_s)
        return channel

    def _handshake(self, deadline: float) -> None:
        while True:
            try:
                self.ssl_object.do_handshake()
                done = True
            except ssl.SSLWantReadError:
                done = False
            self._flush()
            if done:
                return
            try:
                if not self._fill():
                    raise ssl.SSLEOFError("the peer closed the connection during the TLS handshake")
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise

    def recv_into(self, buffer: memoryview) -> int:
        """Decrypted bytes into ``buffer`` (at least one), or 0 once the peer closed."""
        while True:
            with self._state:
                try:
                    # With a buffer, read returns a count (typeshed says bytes).
                    got = cast(int, self.ssl_object.read(len(buffer), buffer))  # type: ignore[arg-type]
                except ssl.SSLWantReadError:
                    got = -1
                except ssl.SSLZeroReturnError:  # close_notify
                    return 0
                answer = self._outgoing.pending > 0
            if answer:
                self._flush()
            if got > 0:
                return got
            if not self._fill():
                return 0

    def _fill(self) -> bool:
        """Feed one socket read to the TLS state; False when the peer closed the socket."""
        got = self.raw.recv_into(self._inbox)
        if not got:
            return False
        with self._state:
            self._incoming.write(memoryview(self._inbox)[:got])
        return True

    def sendall(self, buffers: Sequence[Buffer]) -> None:
        """Encrypt and send every buffer, in order with every other send on this channel."""
        with self._send:
            with self._state:
                for buffer in buffers:
                    if len(buffer):
                        self.ssl_object.write(buffer)
                encrypted = self._outgoing.read()
            send_all(self.raw, [encrypted], self.stall_limit_s)

    def _flush(self) -> None:
        with self._send:
            with self._state:
                encrypted = self._outgoing.read()
            if encrypted:
                send_all(self.raw, [encrypted], self.stall_limit_s)
