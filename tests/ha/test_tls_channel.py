"""The master's TLS channel: one thread reads acks while another sends the log, as on a real
replication connection, with real certificates over TCP.

The same exchange on one ``ssl.SSLSocket`` lost acks here: its reader saw a false EOF while the
writer waited on a full send buffer (44,856 of 196,608 ack bytes read, then "closed"), which is
what dropped sync slaves under load. Through :class:`TlsChannel` every ack arrives and the log
arrives byte for byte.
"""

from __future__ import annotations

import hashlib
import socket
import ssl
import threading
from pathlib import Path

from store.ha.tls_channel import TlsChannel
from tests.support.tls import TestCA

TOTAL = 128 << 20
CHUNK = 1 << 20
ACK = b"a" * 12


def _contexts(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    ca = TestCA(tmp_path / "pki")
    server_leaf, client_leaf = ca.issue("member-1"), ca.issue("member-2")
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(server_leaf.cert, server_leaf.key)
    server.load_verify_locations(ca.ca_file)
    server.verify_mode = ssl.CERT_REQUIRED
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.load_cert_chain(client_leaf.cert, client_leaf.key)
    client.load_verify_locations(ca.ca_file)
    return server, client


class Slave(threading.Thread):
    """Reads the whole log in small reads (to fill the master's send buffer) and acks each read."""

    def __init__(self, port: int, context: ssl.SSLContext) -> None:
        super().__init__(daemon=True)
        self.port, self.context = port, context
        self.digest = hashlib.sha256()
        self.acks = 0

    def run(self) -> None:
        raw = socket.create_connection(("127.0.0.1", self.port))
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        with self.context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            received = 0
            while received < TOTAL and (data := tls.recv(1 << 16)):
                self.digest.update(data)
                received += len(data)
                tls.sendall(ACK)
                self.acks += 1


def test_acks_are_read_while_the_log_is_written(tmp_path: Path) -> None:
    server_context, client_context = _contexts(tmp_path)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        slave = Slave(listener.getsockname()[1], client_context)
        slave.start()
        raw, _ = listener.accept()
    raw.settimeout(0.2)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
    channel = TlsChannel.accept(raw, server_context, handshake_timeout_s=5)
    acked = 0

    def read_acks() -> None:
        nonlocal acked
        view = memoryview(bytearray(1 << 16))
        while True:
            try:
                got = channel.recv_into(view)
            except TimeoutError:
                continue
            if got == 0:
                return
            acked += got

    reader = threading.Thread(target=read_acks, daemon=True)
    reader.start()
    sent = hashlib.sha256()
    for index in range(TOTAL // CHUNK):
        block = bytes([index % 251]) * CHUNK
        channel.sendall([block[:100], block[100:]])
        sent.update(block)
    slave.join(60)
    reader.join(30)
    raw.close()
    assert not slave.is_alive() and not reader.is_alive()
    assert slave.digest.digest() == sent.digest()
    assert acked == slave.acks * len(ACK)  # no false EOF before the slave closed
