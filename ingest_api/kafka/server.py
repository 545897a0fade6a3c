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
import threading
import time
from types import TracebackType
from typing import cast

from ingest_api.kafka.cluster_link import ClusterLink
from ingest_api.kafka.codec import decode_request, encode_api_versions_fallback, needs_api_versions_fallback
from ingest_api.kafka.context import DoorMetrics, GatewayConfig, GatewayContext
from ingest_api.kafka.errors import KafkaGatewayError
from ingest_api.kafka.framing import FRAME_SIZE, parse_frame_size, peek_request_prefix
from ingest_api.kafka.handlers import HANDLERS, Connection
from ingest_api.kafka.handlers.transactions import abort_expired, recover_transactions
from ingest_api.kafka.store_port import KafkaStore
from ingest_api.kafka.txn_cluster import start_retries
from store import MessageStore
from store.publish import TransactionService

log = logging.getLogger(__name__)

#: Read-ahead per connection: lets the next pipelined request (librdkafka keeps several in
#: flight) arrive while the current one is processed, instead of pausing the socket at 64 KiB.
STREAM_BUFFER_BYTES = 8 * 1024 * 1024


class KafkaGateway:
    """A running gateway. ``port`` is the bound port; ``close()`` stops it (idempotent)."""

    def __init__(self, ctx: GatewayContext) -> None:
        self._ctx = ctx
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
            self._on_connect, config.host, config.port, limit=STREAM_BUFFER_BYTES
        )
        self._ctx.bound_port = self._server.sockets[0].getsockname()[1]
        assert self._ctx.arrivals is not None
        self._ctx.store.add_arrival_listener(self._ctx.arrivals.on_arrival)
        self._tick_task = asyncio.create_task(self._tick_forever(), name="kafka-coordinator-tick")
        log.info(
            "kafka gateway listening on %s:%d (advertised %s:%d)",
            config.host,
            self.port,
            self._ctx.advertised_host,
            self._ctx.advertised_port,
        )

    async def _tick_forever(self) -> None:
        interval = self._ctx.config.coordinator_tick_ms / 1000
        while True:
            await asyncio.sleep(interval)
            self._ctx.coordinator.tick()
            self._abort_expired_transactions()

    def _abort_expired_transactions(self) -> None:
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
        try:
            await self._serve(conn, reader, writer)
        except asyncio.CancelledError:
            # close() cancels live connections; end the task normally so asyncio's stream
            # callback does not report the cancellation as an error.
            pass
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _serve(
        self, conn: Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        where = f"connection {conn.connection_id} from {conn.peer_host}:{conn.peer_port}"
        try:
            while True:
                frame = await self._read_frame(reader)
                if frame is None:
                    return
                response = await self._dispatch(conn, frame)
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

    async def _read_frame(self, reader: asyncio.StreamReader) -> bytes | None:
        try:
            size_bytes = await reader.readexactly(FRAME_SIZE.size)
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                raise
            return None  # clean end of stream between frames
        size = parse_frame_size(size_bytes, self._ctx.config.max_request_bytes)
        return await reader.readexactly(size)

    async def _dispatch(self, conn: Connection, frame: bytes) -> bytes | None:
        prefix = peek_request_prefix(frame)
        if needs_api_versions_fallback(prefix.api_key, prefix.api_version):
            log.debug("ApiVersions v%d unsupported: answering error 35 with a v0 body", prefix.api_version)
            return encode_api_versions_fallback(prefix.correlation_id)
        request = decode_request(frame)
        started = time.perf_counter()
        try:
            return await HANDLERS[request.api_key](self._ctx, conn, request)
        finally:
            if self._ctx.metrics is not None:
                api = getattr(request.api_key, "name", str(request.api_key)).lower()
                self._ctx.metrics.kafka_request(api, time.perf_counter() - started)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
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
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._tick_task is not None:
            await asyncio.gather(self._tick_task, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        self._ctx.executor.shutdown(wait=True, cancel_futures=True)
        log.info("kafka gateway on port %d closed", self.port)


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
) -> KafkaGateway:
    """Start listening on the running loop; returns once the socket is bound.

    ``config`` overrides everything else; otherwise host/port/advertised_host fill a default
    :class:`GatewayConfig`. ``store`` is a ``store.MessageStore`` (the caller owns it and
    closes it after ``await gateway.close()``). ``metrics`` receives the door's counts
    (produce, fetch, request durations), labelled ``door="kafka"``. ``transactions`` is the
    store's transaction service when another door shares it (the HTTP broker's); without
    it the gateway opens its own. Kafka transactions are recovered before the socket binds.
    ``cluster``: the cluster this broker serves in (docs/kafka_gateway.md#cluster).
    """
    if config is None:
        config = GatewayConfig(host=host, port=port, advertised_host=advertised_host)
    config.validate()
    loop = asyncio.get_running_loop()
    if transactions is None:
        transactions = await loop.run_in_executor(None, TransactionService.open, cast(MessageStore, store))
    ctx = GatewayContext.create(store, config, loop, transactions, cluster)
    pending = await ctx.run_blocking(recover_transactions, ctx)
    ctx.metrics = metrics
    gateway = KafkaGateway(ctx)
    await gateway._start()
    for end in pending:  # decided before the restart: delivered again to every participant
        start_retries(ctx, end.transactional_id, end.transaction_id, end.commit, set(end.brokers), [])
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
