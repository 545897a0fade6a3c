"""The partition proxy against a real echo server on 127.0.0.1: forwards, black-holes, drops."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest

from tests.support.proxy import TcpProxy


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    """A TCP server that sends back what it reads, one thread per connection."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket) -> None:
        with conn, contextlib.suppress(ConnectionError):  # the proxy resets on a drop
            while data := conn.recv(4096):
                conn.sendall(data)

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()
    server.close()


def _echoed(conn: socket.socket, payload: bytes, timeout_s: float) -> bytes:
    conn.settimeout(timeout_s)
    conn.sendall(payload)
    got = b""
    while len(got) < len(payload):
        chunk = conn.recv(4096)
        if not chunk:
            raise ConnectionError("closed by the proxy")
        got += chunk
    return got


def test_black_hole_holds_bytes_and_connections_until_healed(echo: tuple[str, int]) -> None:
    with TcpProxy(echo) as proxy, socket.create_connection(("127.0.0.1", proxy.port)) as conn:
        assert _echoed(conn, b"before", 5) == b"before"
        proxy.cut()
        with pytest.raises(TimeoutError):  # neither answered nor closed: a partition
            _echoed(conn, b"during", 0.5)
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as late:
            late.settimeout(0.3)  # accepted, but nothing crosses
            late.sendall(b"late")
            with pytest.raises(TimeoutError):
                late.recv(4)
            proxy.heal()
            late.settimeout(5)
            assert late.recv(4) == b"late"  # held, then connected upstream and delivered
        conn.settimeout(5)
        assert conn.recv(6) == b"during"  # what was sent meanwhile arrives after the heal
        assert _echoed(conn, b"after", 5) == b"after"


def test_drop_resets_connections_until_healed(echo: tuple[str, int]) -> None:
    with TcpProxy(echo) as proxy:
        conn = socket.create_connection(("127.0.0.1", proxy.port))
        assert _echoed(conn, b"x", 5) == b"x"
        proxy.cut(drop=True)
        with pytest.raises(OSError):
            _echoed(conn, b"y", 5)
        conn.close()
        with (  # reset on accept (the connect itself may see it)
            pytest.raises(OSError),
            socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as refused,
        ):
            _echoed(refused, b"z", 5)
        proxy.heal()
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as healed:
            assert _echoed(healed, b"again", 5) == b"again"
        assert proxy.accepted == 3
