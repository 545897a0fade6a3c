"""One client connection of the remoting door: its peer, its client id, its writes, and the
requests the server sends *to* the client (CHECK_TRANSACTION_STATE, NOTIFY_CONSUMER_IDS_CHANGED).

Each answer is written as one whole frame by one synchronous ``transport.write`` (so the
answers of concurrent handlers never interleave, and no lock is taken); a writer waits only
while the transport holds unsent bytes over its high-water mark (the protocol's
``pause_writing``/``resume_writing``, :mod:`ingest_api.remoting.session`).
Server -> client requests take an opaque from the connection's own counter and wait for the
response with that opaque (:meth:`Connection.invoke`); one-way ones (what RocketMQ sends for
39 and 40) are fire-and-forget (:meth:`Connection.invoke_oneway`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Mapping

from broker.security import Principal
from ingest_api.remoting.codec import RemotingCommand, encode_command, request
from ingest_api.remoting.codes import SerializeType, code_name
from ingest_api.remoting.errors import ConnectionClosed, InvokeTimeout

log = logging.getLogger(__name__)

#: Opaques of server -> client requests start here, far from the small numbers clients use
#: for their own requests (the two directions are told apart by the response bit anyway).
FIRST_SERVER_OPAQUE = 1 << 24
#: Default wait for the answer of a server -> client request (RocketMQ's broker uses 3 s).
DEFAULT_INVOKE_TIMEOUT_S = 3.0


class Connection:
    """A live client connection. ``client_id`` is set by the handlers (from HEART_BEAT);
    ``serialize_type`` is the encoding of the client's last request (used for requests the
    server sends it); ``principal`` is the signer of its last admitted request when auth is on
    (transaction check-backs go only to a producer that may write the half's topic)."""

    def __init__(
        self, connection_id: int, peer_host: str, peer_port: int, transport: asyncio.WriteTransport
    ) -> None:
        self.connection_id = connection_id
        self.peer_host = peer_host
        self.peer_port = peer_port
        self.client_id: str | None = None
        self.principal: Principal | None = None
        self.serialize_type = SerializeType.JSON
        self._transport = transport
        self._write_paused = False  # the transport's buffer is over its high-water mark
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._opaques = itertools.count(FIRST_SERVER_OPAQUE)
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._closed = False

    @property
    def peer(self) -> str:
        """``host:port`` of the client."""
        return f"{self.peer_host}:{self.peer_port}"

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return f"Connection({self.connection_id}, {self.peer}, client_id={self.client_id!r})"

    async def send(self, cmd: RemotingCommand) -> None:
        """Write one command as a whole frame; raises :class:`ConnectionClosed` once closed."""
        await self.send_frame(encode_command(cmd))

    async def send_frame(self, frame: bytes) -> None:
        """Write one encoded frame (length prefix included) whole, then wait while the socket's
        send buffer is over its high-water mark; raises :class:`ConnectionClosed` once closed."""
        if self._closed or self._transport.is_closing():
            raise ConnectionClosed(f"connection {self.connection_id} to {self.peer} is closed")
        self._transport.write(frame)
        while self._write_paused and not self._closed:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(waiter)
            await waiter
        if self._closed and self._write_paused:
            raise ConnectionClosed(f"connection {self.connection_id} to {self.peer} closed while writing")

    def pause_writing(self) -> None:
        """The transport's buffer went over its high-water mark (the protocol's callback)."""
        self._write_paused = True

    def resume_writing(self) -> None:
        """The transport's buffer drained below its low-water mark (the protocol's callback)."""
        self._write_paused = False
        self._wake_writers()

    def _wake_writers(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def invoke(
        self,
        code: int,
        ext_fields: Mapping[str, str] | None = None,
        body: bytes = b"",
        timeout_s: float = DEFAULT_INVOKE_TIMEOUT_S,
    ) -> RemotingCommand:
        """Send a request to the client and return its response.

        Raises :class:`InvokeTimeout` after ``timeout_s`` seconds and :class:`ConnectionClosed`
        when the connection ends first.
        """
        opaque = next(self._opaques)
        future: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._pending[opaque] = future
        try:
            await self.send(request(code, opaque, ext_fields, body, serialize_type=self.serialize_type))
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError as exc:
            raise InvokeTimeout(
                f"{code_name(code)} to {self.peer} (opaque {opaque}): no answer in {timeout_s:.1f}s"
            ) from exc
        finally:
            self._pending.pop(opaque, None)

    async def invoke_oneway(
        self, code: int, ext_fields: Mapping[str, str] | None = None, body: bytes = b""
    ) -> None:
        """Send a one-way request (no answer expected); raises :class:`ConnectionClosed`."""
        cmd = request(
            code, next(self._opaques), ext_fields, body, oneway=True, serialize_type=self.serialize_type
        )
        await self.send(cmd)

    def on_response(self, cmd: RemotingCommand) -> None:
        """Hand a response from the client to the :meth:`invoke` waiting for its opaque."""
        future = self._pending.pop(cmd.opaque, None)
        if future is None:
            log.debug("remoting: %r answered unknown opaque %d (late or never asked)", self, cmd.opaque)
        elif not future.done():
            future.set_result(cmd)

    def mark_closed(self) -> None:
        """Fail every waiting :meth:`invoke`; later sends raise :class:`ConnectionClosed`."""
        self._closed = True
        self._wake_writers()
        for opaque, future in list(self._pending.items()):
            if not future.done():
                future.set_exception(ConnectionClosed(f"connection to {self.peer} closed (opaque {opaque})"))
        self._pending.clear()

    def close(self) -> None:
        """Close the socket (idempotent); unsent answers are still flushed."""
        self.mark_closed()
        self._transport.close()
