"""A blocking raw-socket remoting client for the door tests: whole frames in and out."""

from __future__ import annotations

import socket
import ssl
from types import TracebackType

from ingest_api.remoting.codec import FRAME_LENGTH, RemotingCommand, decode_frame, encode_command


class RawClient:
    """One TCP connection; every read has a deadline (``timeout_s``)."""

    def __init__(
        self, host: str, port: int, timeout_s: float = 10.0, tls: ssl.SSLContext | None = None
    ) -> None:
        sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock = sock if tls is None else tls.wrap_socket(sock, server_hostname=host)

    def send(self, cmd: RemotingCommand) -> None:
        self.sock.sendall(encode_command(cmd))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv(self) -> RemotingCommand:
        """The next frame; raises ``ConnectionError`` if the server closed instead."""
        (length,) = FRAME_LENGTH.unpack(self._exactly(FRAME_LENGTH.size))
        return decode_frame(self._exactly(length))

    def closed_by_server(self) -> bool:
        """True once the server has closed the connection (EOF or reset)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def _exactly(self, size: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            chunk = self.sock.recv(size - len(chunks))
            if not chunk:
                raise ConnectionError(f"server closed after {len(chunks)} of {size} bytes")
            chunks += chunk
        return bytes(chunks)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
