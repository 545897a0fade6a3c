"""The Kafka listener: an asyncio TCP server that runs inside the broker's event loop.

Per connection, requests are handled **one at a time, in arrival order** (as Kafka does), so
responses leave in request order and pipelined idempotent batches are sequenced in the
order the producer sent them; different connections proceed independently. A malformed or
truncated frame, an API the gateway does not advertise, or a handler fault closes *that*
connection with a log line; the listener and every other connection keep running.

Embedding (the broker's loop)::

    gateway = await start_kafka_gateway(store, host="127.0.0.1", port=9092)
    ...
    await gateway.close()

Standalone (tests, benchmarks): :class:`GatewayThread` runs a gateway on its own loop in a
background thread; ``python -m ingest_api.kafka --store-dir DIR`` serves a store.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import ssl
import threading
import time
from types import TracebackType
from typing import cast

from broker.auth import DoorAuth
from broker.security import Principal, ReloadResult
from ingest_api.kafka.authz import guarded
from ingest_api.kafka.cluster_link import ClusterLink
from ingest_api.kafka.codec import (
    KafkaRequest,
    decode_request,
    encode_api_versions_fallback,
    needs_api_versions_fallback,
)
from ingest_api.kafka.context import DoorMetrics, GatewayConfig, GatewayContext, monotonic_ms
from ingest_api.kafka.errors import KafkaGatewayError
from ingest_api.kafka.framing import FRAME_SIZE, parse_frame_size, peek_request_prefix
from ingest_api.kafka.handlers import HANDLERS, Connection
from ingest_api.kafka.handlers.transactions import abort_expired
from ingest_api.kafka.sasl import MAX_PRE_AUTH_FRAME_BYTES, SASL_AUTHENTICATE, SASL_HANDSHAKE, SASL_VERSIONS
from ingest_api.kafka.sasl_session import Phase, SaslSession, Step
from ingest_api.kafka.store_port import KafkaStore
from ingest_api.kafka.txn_reload import recover_at_start, stop_keeping
from ingest_api.kafka.versions import SUPPORTED_VERSIONS, ApiKey
from store import MessageStore
from store.publish import TransactionService

log = logging.getLogger(__name__)

#: Read-ahead per connection: lets the next pipelined request (librdkafka keeps several in
#: flight) arrive while the current one is processed, instead of pausing the socket at 64 KiB.
STREAM_BUFFER_BYTES = 8 * 1024 * 1024


class KafkaGateway:
    """A running gateway. ``port`` is the bound port; ``close()`` stops it (idempotent)."""

    def __init__(self, ctx: GatewayContext, ssl_context: ssl.SSLContext | None = None) -> None:
        self._ctx = ctx
        self._ssl = ssl_context
        #: The SASL state of each live connection (a SASL listener only), by its task.
        self._sessions: dict[asyncio.Task[None], SaslSession] = {}
        self._server: asyncio.Server | None = None
        self._tick_task: asyncio.Task[None] | None = None
        self._connections: set[asyncio.Task[None]] = set()
        #: Aborts of timed-out transactions in flight, by (transactional id, sparkmq id).
        self._expiring: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._ids = itertools.count(1)
        self._closed = False

    @property
    def context(self) -> GatewayContext:
        return self._ctx

    @property
    def port(self) -> int:
        return self._ctx.bound_port

    async def _start(self) -> None:
        config = self._ctx.config
        self._server = await asyncio.start_server(
            self._on_connect, config.host, config.port, limit=STREAM_BUFFER_BYTES, ssl=self._ssl
        )
        if self._ctx.auth is not None:
            self._ctx.auth.on_reload(self._on_reload)
        self._ctx.bound_port = self._server.sockets[0].getsockname()[1]
        assert self._ctx.arrivals is not None
        self._ctx.store.add_arrival_listener(self._ctx.arrivals.on_arrival)
        self._tick_task = asyncio.create_task(self._tick_forever(), name="kafka-coordinator-tick")
        log.info(
            "kafka gateway listening on %s:%d (%s, advertised %s:%d)",
            config.host,
            self.port,
            self.security_protocol,
            self._ctx.advertised_host,
            self._ctx.advertised_port,
        )

    @property
    def security_protocol(self) -> str:
        """Kafka's name of this listener: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."""
        if self._ctx.auth is None:
            return "SSL" if self._ssl is not None else "PLAINTEXT"
        return "SASL_SSL" if self._ssl is not None else "SASL_PLAINTEXT"

    def _on_reload(self, result: ReloadResult) -> None:
        """Users file reloaded (on a worker thread): close the revoked users' connections."""
        if result.revoked:
            self._ctx.loop.call_soon_threadsafe(self.close_sessions_of, result.revoked)

    def close_sessions_of(self, users: frozenset[str]) -> int:
        """Close every connection logged in as one of ``users``; returns how many."""
        doomed = [task for task, session in self._sessions.items() if session.user in users]
        for task in doomed:
            task.cancel()
        if doomed:
            log.info("kafka gateway: closed %d connections of revoked users", len(doomed))
        return len(doomed)

    async def _tick_forever(self) -> None:
        interval = self._ctx.config.coordinator_tick_ms / 1000
        while True:
            await asyncio.sleep(interval)
            self._ctx.coordinator.tick()
            self._abort_expired_transactions()

    def _abort_expired_transactions(self) -> None:
        if self._ctx.txn_loading:  # the coordinator's state is being replaced
            return
        for entry in self._ctx.txn.expired():
            key = (entry.transactional_id, entry.transaction_id)
            if key not in self._expiring:
                task = asyncio.create_task(abort_expired(self._ctx, *key), name=f"kafka-txn-timeout-{key[1]}")
                self._expiring[key] = task
                task.add_done_callback(functools.partial(self._expired_done, key))

    def _expired_done(self, key: tuple[str, str], _: asyncio.Task[None]) -> None:
        self._expiring.pop(key, None)

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername") or ("?", 0)
        conn = Connection(next(self._ids), str(peer[0]), int(peer[1]))
        if self._ctx.auth is not None:
            self._sessions[task] = SaslSession(
                self._ctx.auth, self._ctx.config.sasl_session_lifetime_ms, monotonic_ms
            )
        try:
            await self._serve(conn, reader, writer)
        except asyncio.CancelledError:
            # close() cancels live connections; end the task normally so asyncio's stream
            # callback does not report the cancellation as an error.
            pass
        finally:
            self._connections.discard(task)
            self._sessions.pop(task, None)
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _serve(
        self, conn: Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        where = f"connection {conn.connection_id} from {conn.peer_host}:{conn.peer_port}"
        task = asyncio.current_task()
        session = self._sessions.get(task) if task is not None else None
        try:
            while True:
                cap = None if session is None or session.authenticated else MAX_PRE_AUTH_FRAME_BYTES
                frame = await self._read_frame(reader, cap)
                if frame is None:
                    return
                if session is None:
                    response = await self._dispatch(conn, frame, None)
                else:
                    step = await self._sasl_step(conn, session, frame)
                    if step.failed:
                        await asyncio.sleep(self._ctx.config.failed_auth_delay_ms / 1000)
                    response = step.response
                    if step.close:
                        if response is not None:
                            writer.write(response)
                            await writer.drain()
                        log.info(
                            "kafka gateway: closing %s: %s",
                            where,
                            "login failed" if step.failed else "SASL state",
                        )
                        return
                if response is not None:
                    writer.write(response)
                    await writer.drain()
        except KafkaGatewayError as exc:
            log.warning("kafka gateway: closing %s: %s", where, exc)
        except asyncio.IncompleteReadError as exc:
            log.warning("kafka gateway: closing %s: truncated frame (%d bytes short)", where, _missing(exc))
        except ConnectionError as exc:
            log.info("kafka gateway: %s dropped: %s", where, exc)
        except Exception:  # a handler fault must not take the listener down
            log.exception("kafka gateway: closing %s after an internal error", where)

    async def _read_frame(self, reader: asyncio.StreamReader, cap: int | None = None) -> bytes | None:
        """One frame; ``cap`` (before login) bounds its size below ``max_request_bytes``."""
        try:
            size_bytes = await reader.readexactly(FRAME_SIZE.size)
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                raise
            return None  # clean end of stream between frames
        size = parse_frame_size(size_bytes, cap or self._ctx.config.max_request_bytes)
        return await reader.readexactly(size)

    async def _sasl_step(self, conn: Connection, session: SaslSession, frame: bytes) -> Step:
        """Route a frame of a SASL listener (docs in :mod:`ingest_api.kafka.sasl_session`)."""
        if session.phase is Phase.RAW_TOKENS:
            return await self._ctx.run_blocking(session.raw_token, frame)
        prefix = peek_request_prefix(frame)
        if prefix.api_key == SASL_HANDSHAKE:
            if session.authenticated:
                log.debug("kafka gateway: connection %d re-authenticating (KIP-368)", conn.connection_id)
            return session.handshake(frame)
        if prefix.api_key == SASL_AUTHENTICATE:
            return await self._ctx.run_blocking(session.authenticate, frame)
        if session.in_exchange or (not session.authenticated and prefix.api_key != ApiKey.API_VERSIONS):
            return Step(None, close=True)  # Kafka: no answer before login but ApiVersions
        if session.authenticated and session.expired():
            return Step(None, close=True)  # KIP-368: the session ended without re-authentication
        principal = None
        if session.user is not None:
            assert self._ctx.auth is not None
            principal = self._ctx.auth.principal(session.user) or Principal(session.user)
        return Step(await self._dispatch(conn, frame, principal))

    async def _dispatch(self, conn: Connection, frame: bytes, principal: Principal | None) -> bytes | None:
        prefix = peek_request_prefix(frame)
        if needs_api_versions_fallback(prefix.api_key, prefix.api_version):
            log.debug("ApiVersions v%d unsupported: answering error 35 with a v0 body", prefix.api_version)
            return encode_api_versions_fallback(prefix.correlation_id, advertised(self._ctx))
        request = decode_request(frame)
        started = time.perf_counter()
        handler = HANDLERS[request.api_key]

        async def run(reduced: KafkaRequest) -> bytes | None:
            return await handler(self._ctx, conn, reduced)

        try:
            return await guarded(principal, request, run)
        finally:
            if self._ctx.metrics is not None:
                api = getattr(request.api_key, "name", str(request.api_key)).lower()
                self._ctx.metrics.kafka_request(api, time.perf_counter() - started)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._ctx.auth is not None:
            self._ctx.auth.remove_listener(self._on_reload)
        if self._ctx.arrivals is not None:
            self._ctx.arrivals.closed = True
            self._ctx.store.remove_arrival_listener(self._ctx.arrivals.on_arrival)
        if self._server is not None:
            self._server.close()
        if self._tick_task is not None:
            self._tick_task.cancel()
        for task in [*self._expiring.values(), *self._ctx.pending_ends.values()]:
            task.cancel()  # an undelivered end stays decided in the ledger: delivered after a restart
        await asyncio.gather(
            *self._expiring.values(), *self._ctx.pending_ends.values(), return_exceptions=True
        )
        self._ctx.coordinator.close()
        stop_keeping(self._ctx)
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._tick_task is not None:
            await asyncio.gather(self._tick_task, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        self._ctx.executor.shutdown(wait=True, cancel_futures=True)
        log.info("kafka gateway on port %d closed", self.port)


def advertised(ctx: GatewayContext) -> dict[int, tuple[int, int]]:
    """What ApiVersions lists: the handled APIs, and SaslHandshake/SaslAuthenticate on a SASL
    listener."""
    versions: dict[int, tuple[int, int]] = {int(key): span for key, span in SUPPORTED_VERSIONS.items()}
    if ctx.auth is not None:
        versions.update(SASL_VERSIONS)
    return versions


def _missing(exc: asyncio.IncompleteReadError) -> int:
    return (exc.expected or 0) - len(exc.partial)


async def start_kafka_gateway(
    store: KafkaStore,
    host: str = "127.0.0.1",
    port: int = 9092,
    advertised_host: str | None = None,
    *,
    config: GatewayConfig | None = None,
    metrics: DoorMetrics | None = None,
    transactions: TransactionService | None = None,
    cluster: ClusterLink | None = None,
    auth: DoorAuth | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> KafkaGateway:
    """Start listening on the running loop; returns once the socket is bound.

    ``config`` overrides everything else; otherwise host/port/advertised_host fill a default
    :class:`GatewayConfig`. ``store`` is a ``store.MessageStore`` (the caller owns it and
    closes it after ``await gateway.close()``). ``metrics`` receives the door's counts
    (produce, fetch, request durations), labelled ``door="kafka"``. ``transactions`` is the
    store's transaction service when another door shares it (the HTTP broker's); without
    it the gateway opens its own. Kafka transactions are recovered before the socket binds.
    ``cluster``: the cluster this broker serves in (docs/kafka_gateway.md#cluster).
    ``auth``: the broker's users: the listener then requires SASL (PLAIN, SCRAM-SHA-256/512)
    and authorizes every request (:mod:`ingest_api.kafka.authz`). ``ssl_context``: TLS.
    """
    if config is None:
        config = GatewayConfig(host=host, port=port, advertised_host=advertised_host)
    config.validate()
    loop = asyncio.get_running_loop()
    if transactions is None:
        transactions = await loop.run_in_executor(None, TransactionService.open, cast(MessageStore, store))
    ctx = GatewayContext.create(store, config, loop, transactions, cluster)
    await recover_at_start(ctx)  # decided ends: delivered again to every participant
    ctx.metrics = metrics
    ctx.auth = auth
    gateway = KafkaGateway(ctx, ssl_context)
    await gateway._start()
    return gateway


class GatewayThread:
    """A gateway on its own event loop in a daemon thread (tests, benchmarks, ``__main__``)."""

    def __init__(self, store: KafkaStore, config: GatewayConfig, start_timeout_s: float = 10.0) -> None:
        self._store = store
        self._config = config
        self._timeout = start_timeout_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="kafka-gateway", daemon=True)
        self.gateway: KafkaGateway | None = None

    @property
    def port(self) -> int:
        assert self.gateway is not None, "not started"
        return self.gateway.port

    @property
    def bootstrap(self) -> str:
        return f"{self._config.host}:{self.port}"

    def start(self) -> GatewayThread:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(
            start_kafka_gateway(self._store, config=self._config), self._loop
        )
        self.gateway = future.result(self._timeout)
        return self

    def stop(self) -> None:
        if self.gateway is not None:
            asyncio.run_coroutine_threadsafe(self.gateway.close(), self._loop).result(self._timeout)
            self.gateway = None
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(self._timeout)
        if not self._loop.is_running():
            self._loop.close()

    def __enter__(self) -> GatewayThread:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
