"""The remoting listener: an asyncio TCP server that reads RocketMQ remoting frames, dispatches
each request by its code to a handler table, and writes the answer in the request's encoding.

Per connection, requests are handled **concurrently** (as RocketMQ's Netty server does: one
client connection carries long-polling pulls next to its sends), up to
``max_in_flight_per_connection``; responses are matched by ``opaque``, not by order. The rules:

* a frame whose length exceeds ``max_frame_bytes``, a truncated frame or a header that does not
  decode closes *that* connection with a log line; the listener and the others keep running;
* an unknown code is answered ``REQUEST_CODE_NOT_SUPPORTED`` with the code in the remark;
* a :class:`RemotingRequestError` from a handler is answered with its ``response_code``, any
  other exception with ``SYSTEM_ERROR`` (remark = the message); the connection stays open;
* a one-way request is never answered, whatever its handler returns;
* a response from the client (bit 0 of ``flag``) completes a server -> client
  :meth:`Connection.invoke`;
* a ``guard`` (RocketMQ's server RPC hook; the door's ACL, :mod:`ingest_api.remoting.authz`)
  sees every request first, unknown codes included: when it returns a command, that is the
  answer and no handler runs.

Each connection is a :class:`~ingest_api.remoting.session.Session` (an asyncio protocol): the
whole frames in what arrives are dispatched at once, each request a task of its own, and its
answer is written as one frame as soon as it is ready.

A handler is ``async def handler(conn, cmd) -> RemotingCommand | None``; the server stamps the
answer with the request's ``opaque``, the response bit and the request's serialize type.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import ssl
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType

from ingest_api.remoting.codec import DEFAULT_MAX_FRAME_BYTES, RemotingCommand, response_to
from ingest_api.remoting.codes import FLAG_RESPONSE, ResponseCode, code_name
from ingest_api.remoting.connection import Connection
from ingest_api.remoting.errors import ConnectionClosed, RemotingProtocolError, RemotingRequestError
from ingest_api.remoting.session import Session

log = logging.getLogger(__name__)

Handler = Callable[[Connection, RemotingCommand], Awaitable[RemotingCommand | None]]
#: request code -> handler.
HandlerTable = Mapping[int, Handler]
#: ``guard(conn, request)``: None lets the request through, a command is the refusal to answer.
Guard = Callable[[Connection, RemotingCommand], Awaitable[RemotingCommand | None]]


@dataclass(frozen=True, slots=True)
class RemotingServerConfig:
    """``port`` 0 picks a free port. ``max_frame_bytes``: the largest ``length`` accepted
    (16 MiB, RocketMQ's default). ``ssl_context``: serve TLS instead of plain TCP (every
    connection, RocketMQ's ``tls.server.mode=enforcing``: a client that does not complete a
    handshake within ``ssl_handshake_timeout_s`` seconds is disconnected, nothing served)."""

    host: str = "127.0.0.1"
    port: int = 10911
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_in_flight_per_connection: int = 256
    ssl_context: ssl.SSLContext | None = None
    ssl_handshake_timeout_s: float = 10.0

    def validate(self) -> RemotingServerConfig:
        if not 0 <= self.port < 65536:
            raise ValueError(f"port must be 0..65535, got {self.port}")
        if self.max_frame_bytes < 64:
            raise ValueError(f"max_frame_bytes must be at least 64, got {self.max_frame_bytes}")
        if self.max_in_flight_per_connection < 1:
            raise ValueError("max_in_flight_per_connection must be at least 1")
        if self.ssl_handshake_timeout_s <= 0:
            raise ValueError(f"ssl_handshake_timeout_s must be positive, got {self.ssl_handshake_timeout_s}")
        return self


class RemotingServer:
    """A running listener; ``port`` is the bound port, ``close()`` stops it (idempotent)."""

    def __init__(
        self, handlers: HandlerTable, config: RemotingServerConfig, guard: Guard | None = None
    ) -> None:
        self._handlers = handlers
        self._guard = guard
        self._config = config.validate()
        self._server: asyncio.Server | None = None
        self._port = config.port
        self._ids = itertools.count(1)
        self._sessions: set[Session] = set()
        self._closed = False

    @property
    def port(self) -> int:
        return self._port

    @property
    def connections(self) -> list[Connection]:
        """The live connections (handlers look up a producer group's channel here)."""
        return [s.conn for s in self._sessions if s.conn is not None and not s.conn.closed]

    async def start(self) -> RemotingServer:
        loop = asyncio.get_running_loop()
        context = self._config.ssl_context
        self._server = await loop.create_server(
            self._new_session,
            self._config.host,
            self._config.port,
            ssl=context,
            # asyncio refuses a handshake timeout without ssl
            ssl_handshake_timeout=None if context is None else self._config.ssl_handshake_timeout_s,
        )
        self._port = self._server.sockets[0].getsockname()[1]
        tls = " (TLS)" if self._config.ssl_context is not None else ""
        log.info("remoting door listening on %s:%d%s", self._config.host, self._port, tls)
        return self

    def _new_session(self) -> Session:
        return Session(
            next(self._ids),
            self._handle,
            self._config.max_frame_bytes,
            self._config.max_in_flight_per_connection,
            self._sessions,
        )

    async def _handle(self, conn: Connection, cmd: RemotingCommand) -> None:
        answer = await self._answer(conn, cmd)
        if cmd.is_oneway or answer is None:
            return
        if not (
            answer.opaque == cmd.opaque
            and answer.flag & FLAG_RESPONSE
            and answer.serialize_type is cmd.serialize_type
        ):  # handlers answer with response_to, which stamps all three already
            answer = dataclasses.replace(
                answer,
                opaque=cmd.opaque,
                flag=answer.flag | FLAG_RESPONSE,
                serialize_type=cmd.serialize_type,
            )
        try:
            await conn.send(answer)
        except ConnectionClosed:
            log.debug("remoting: %r closed before the answer to %s", conn, code_name(cmd.code))
        except RemotingProtocolError as exc:  # the answer itself does not encode
            log.error("remoting: cannot encode the answer to %s: %s", code_name(cmd.code), exc)
            with contextlib.suppress(ConnectionClosed):
                await conn.send(response_to(cmd, ResponseCode.SYSTEM_ERROR, f"cannot encode answer: {exc}"))

    async def _answer(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        try:
            refusal = None if self._guard is None else await self._guard(conn, cmd)
            if refusal is not None:
                return refusal
            handler = self._handlers.get(cmd.code)
            if handler is None:
                log.info("remoting: %r sent unsupported %s", conn, code_name(cmd.code))
                return response_to(
                    cmd, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported"
                )
            return await handler(conn, cmd)
        except RemotingRequestError as exc:
            log.info("remoting: %s from %r refused: %s", code_name(cmd.code), conn, exc)
            return response_to(cmd, exc.response_code, str(exc))
        except Exception as exc:  # a handler fault answers SYSTEM_ERROR and the door keeps serving
            log.exception("remoting: %s from %r failed", code_name(cmd.code), conn)
            return response_to(cmd, ResponseCode.SYSTEM_ERROR, str(exc) or type(exc).__name__)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._server is not None:
            self._server.close()
        sessions = list(self._sessions)
        for session in sessions:
            session.close()
        await asyncio.gather(*(session.wait_closed() for session in sessions), return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        log.info("remoting door on port %d closed", self._port)


async def start_remoting_server(
    handlers: HandlerTable, config: RemotingServerConfig | None = None, guard: Guard | None = None
) -> RemotingServer:
    """Start listening on the running loop; returns once the socket is bound."""
    return await RemotingServer(handlers, config or RemotingServerConfig(), guard).start()


class RemotingServerThread:
    """A server on its own event loop in a daemon thread (tests, benchmarks)."""

    def __init__(
        self,
        handlers: HandlerTable,
        config: RemotingServerConfig,
        start_timeout_s: float = 10.0,
        guard: Guard | None = None,
    ) -> None:
        self._handlers = handlers
        self._config = config
        self._guard = guard
        self._timeout = start_timeout_s
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="remoting-door", daemon=True)
        self.server: RemotingServer | None = None

    @property
    def port(self) -> int:
        assert self.server is not None, "not started"
        return self.server.port

    @property
    def address(self) -> str:
        return f"{self._config.host}:{self.port}"

    def start(self) -> RemotingServerThread:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(
            start_remoting_server(self._handlers, self._config, self._guard), self.loop
        )
        self.server = future.result(self._timeout)
        return self

    def stop(self) -> None:
        if self.server is not None:
            asyncio.run_coroutine_threadsafe(self.server.close(), self.loop).result(self._timeout)
            self.server = None
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(self._timeout)
        if not self.loop.is_running():
            self.loop.close()

    def __enter__(self) -> RemotingServerThread:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
