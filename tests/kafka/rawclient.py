"""A minimal blocking Kafka client over a raw socket, using kafka-python's protocol classes.

For wire-level tests: exact request bytes, pipelining, garbage, truncation, acks=0.
"""

from __future__ import annotations

import socket
import ssl
import struct
from typing import Any

from kafka.record.memory_records import MemoryRecordsBuilder

SIZE = struct.Struct(">i")


class RawClient:
    def __init__(self, port: int, timeout_s: float = 10.0, context: ssl.SSLContext | None = None) -> None:
        """A connection to 127.0.0.1:``port``; over TLS when ``context`` is given."""
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        if context is not None:
            self.sock = context.wrap_socket(self.sock, server_hostname="127.0.0.1")
        self._correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, request_cls: Any, version: int, **fields: Any) -> int:
        self._correlation += 1
        request = request_cls(version=version, **fields)
        request.with_header(correlation_id=self._correlation, client_id="raw-test")
        self.send_raw(bytes(request.encode(header=True, framed=True)))
        return self._correlation

    def recv_frame(self) -> bytes | None:
        """The next response frame (size removed), or None when the broker closed the socket."""
        head = self._recv_exactly(SIZE.size)
        if head is None:
            return None
        return self._recv_exactly(SIZE.unpack(head)[0])

    def _recv_exactly(self, size: int) -> bytes | None:
        chunks = b""
        while len(chunks) < size:
            chunk = self.sock.recv(size - len(chunks))
            if not chunk:
                return None
            chunks += chunk
        return chunks

    def recv(self, response_cls: Any, version: int) -> Any:
        frame = self.recv_frame()
        assert frame is not None, "broker closed the connection"
        return response_cls.decode(frame, version=version, header=True)

    def call(self, request_cls: Any, response_cls: Any, version: int, **fields: Any) -> Any:
        correlation = self.send(request_cls, version, **fields)
        response = self.recv(response_cls, version)
        assert response.header.correlation_id == correlation
        return response

    def closed_by_peer(self) -> bool:
        """True once the broker has closed this connection (reads EOF)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True


def record_batch(
    values: list[bytes],
    producer_id: int = -1,
    epoch: int = -1,
    base_sequence: int = -1,
    timestamp_ms: int = 1,
    transactional: bool = False,
) -> bytes:
    builder = MemoryRecordsBuilder(
        magic=2,
        compression_type=0,
        batch_size=1 << 20,
        transactional=transactional,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=base_sequence,
    )
    for value in values:
        builder.append(timestamp_ms, None, value, [])
    builder.close()
    return bytes(builder.buffer())
