"""One client connection of the remoting listener as an asyncio protocol: frames are cut from
the bytes as they arrive and each request starts as a task right there.

Compared with a reader coroutine per connection (``await reader.read`` and a wake-up per
frame), this saves a task switch per request on the door's hottest path (single sends). The
rules are the server's (:mod:`ingest_api.remoting.server`):

* every whole frame in what arrived is decoded and dispatched in order; a response (bit 0 of
  ``flag``) goes to :meth:`Connection.on_response`, a request to ``serve`` as a task of its own,
  so requests of one connection run concurrently and answer by ``opaque``;
* at most ``max_in_flight`` requests run at once; more wait in arrival order and the socket is
  not read until one finishes;
* a frame that does not decode (a length over the cap, a bad header) closes this connection
  with a log line, as does a stream that ends mid-frame;
* when the connection is lost, the two-way requests still running are cancelled (their answer
  has nowhere to go), while one-way requests, running or waiting, are carried out: a client
  sends its last offset commits one-way just before it closes (ali-ons and the Java client at
  shutdown), and RocketMQ's broker applies them whatever becomes of the connection.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import typing
from collections.abc import Callable, Coroutine
from typing import Any

from ingest_api.remoting.codec import RemotingCommand, decode_frame, frame_shortfall, take_frames
from ingest_api.remoting.connection import Connection
from ingest_api.remoting.errors import RemotingProtocolError

log = logging.getLogger("ingest_api.remoting.server")

#: Serves one request (decode was done): the server's dispatch, answer included.
ServeRequest = Callable[[Connection, RemotingCommand], Coroutine[Any, Any, None]]


class Session(asyncio.Protocol):
    """The protocol of one accepted connection; ``conn`` exists from ``connection_made`` on,
    ``lost`` is done once the connection is gone. The session is in ``live`` (the server's set)
    from ``connection_made`` to ``connection_lost``."""

    def __init__(
        self,
        connection_id: int,
        serve: ServeRequest,
        max_frame_bytes: int,
        max_in_flight: int,
        live: set[Session],
    ) -> None:
        self._connection_id = connection_id
        self._live = live
        self._serve = serve
        self._max_frame_bytes = max_frame_bytes
        self._max_in_flight = max_in_flight
        self._pending = bytearray()
        self._in_flight: set[asyncio.Task[None]] = set()
        self._two_way: set[asyncio.Task[None]] = set()
        self._waiting: collections.deque[RemotingCommand] = collections.deque()
        self._reading_paused = False
        self._transport: asyncio.Transport | None = None
        self.conn: Connection | None = None
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream server's transport (uvloop's is no asyncio.Transport subclass, same methods)
        transport = typing.cast(asyncio.Transport, transport)
        self._transport = transport
        peer = transport.get_extra_info("peername") or ("?", 0)
        self.conn = Connection(self._connection_id, str(peer[0]), int(peer[1]), transport)
        self._live.add(self)  # from here until connection_lost (a failed TLS handshake never gets here)

    @property
    def _where(self) -> str:
        return f"connection {self._connection_id} from {self.conn.peer if self.conn else '?'}"

    def data_received(self, data: bytes) -> None:
        if self.conn is None or self.conn.closed:
            return  # closing: what still arrives is dropped
        self._pending += data
        try:
            for frame in take_frames(self._pending, self._max_frame_bytes):
                self._dispatch(self.conn, decode_frame(frame))
        except RemotingProtocolError as exc:
            log.warning("remoting door: closing %s: %s", self._where, exc)
            self._pending.clear()
            self.close()

    def _dispatch(self, conn: Connection, cmd: RemotingCommand) -> None:
        if cmd.is_response:
            conn.on_response(cmd)
            return
        conn.serialize_type = cmd.serialize_type
        if len(self._in_flight) >= self._max_in_flight:
            self._waiting.append(cmd)
            if not self._reading_paused and self._transport is not None:
                self._reading_paused = True
                self._transport.pause_reading()
            return
        self._start(conn, cmd)

    def _start(self, conn: Connection, cmd: RemotingCommand) -> None:
        task = asyncio.get_running_loop().create_task(self._serve(conn, cmd))
        self._in_flight.add(task)
        if not cmd.is_oneway:
            self._two_way.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._in_flight.discard(task)
        self._two_way.discard(task)
        conn = self.conn
        if conn is None or conn.closed:
            return
        if self._waiting:
            self._start(conn, self._waiting.popleft())
        elif self._reading_paused and self._transport is not None:
            self._reading_paused = False
            self._transport.resume_reading()

    def eof_received(self) -> bool:
        if self._pending:
            missing = frame_shortfall(self._pending)
            log.warning("remoting door: closing %s: truncated frame (%d bytes short)", self._where, missing)
        else:
            log.debug("remoting: %s closed by the peer", self._where)
        return False  # close the transport

    def pause_writing(self) -> None:
        if self.conn is not None:
            self.conn.pause_writing()

    def resume_writing(self) -> None:
        if self.conn is not None:
            self.conn.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            log.info("remoting door: %s dropped: %s", self._where, exc)
        if self.conn is not None:
            self.conn.mark_closed()
            for cmd in self._waiting:
                if cmd.is_oneway:
                    self._start(self.conn, cmd)
        self._waiting.clear()
        for task in list(self._two_way):
            task.cancel()
        self._live.discard(self)
        if not self.lost.done():
            self.lost.set_result(None)

    def close(self) -> None:
        """Stop serving this connection: it is closed once ``lost`` is done."""
        if self.conn is not None:
            self.conn.mark_closed()
        if self._transport is not None:
            self._transport.close()

    async def wait_closed(self) -> None:
        """Until the connection is gone and its requests have ended."""
        await self.lost
        await asyncio.gather(*self._in_flight, return_exceptions=True)
