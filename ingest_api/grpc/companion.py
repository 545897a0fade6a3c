"""Run the gRPC door next to the HTTP API, on the broker's event loop (``sparkmq serve --grpc-port``).

``GrpcCompanion(port=8081)`` is a companion of :func:`broker.lifecycle.running_broker`: entered
once the store is open and the broker has joined its cluster, it starts the door over
:class:`~ingest_api.grpc.broker_port.BrokerPort`, publishes the door's advertised address to
the cluster (:mod:`~ingest_api.grpc.endpoints`) and registers the door with the transaction
board, so that check-backs of gRPC producers go out on their Telemetry streams. Leaving it
undoes both and stops the door (running calls get ``grace_s``). With the broker's users
(``--auth-file``) the door checks every call (:mod:`~ingest_api.grpc.authz`) and binds a
loopback address only, unless ``--allow-plaintext``: it has no TLS.

Advertised host: ``advertised_host``, else the cluster member's ``--advertise-host``, else the
bound host (``127.0.0.1`` for a wildcard).

TLS: with ``sparkmq serve --tls-cert/--tls-key`` (``broker.config.tls``) the port serves TLS
only (:func:`server_credentials`; the clients' ``tls_enable`` / ``enableSsl``); with
``--tls-require-client-cert`` a client certificate chaining to ``--tls-ca`` is required. With
auth on, a plaintext door off loopback is refused unless ``--allow-plaintext``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import replace
from typing import Any, Protocol

import grpc

from broker.state import Broker
from broker.threads import run_blocking
from broker.tls import TlsConfig
from ingest_api.grpc.broker_port import BrokerPort
from ingest_api.grpc.clients import ClientRegistry
from ingest_api.grpc.endpoints import DoorAddress, DoorDirectory
from ingest_api.grpc.server import DoorConfig, GrpcDoor, MessagingService
from store import Clock, InvalidArgument, wall_clock_ms

log = logging.getLogger(__name__)

WILDCARDS = ("0.0.0.0", "::", "")


class GrpcCompanion:
    """A companion factory: ``companion(broker)`` runs the door while the broker runs.

    ``door`` is the running door (its ``port`` is the bound one when ``port=0``)."""

    def __init__(
        self,
        port: int = 8081,
        host: str = "127.0.0.1",
        advertised_host: str | None = None,
        config: DoorConfig | None = None,
        grace_s: float = 1.0,
        clock_ms: Clock = wall_clock_ms,
        expiry_check_s: float = 5.0,
    ) -> None:
        """``clock_ms`` is the client registry's clock (epoch ms: heartbeats and expiry), checked
        every ``expiry_check_s``."""
        self.clock_ms = clock_ms
        self.expiry_check_s = expiry_check_s
        self.port = port
        self.host = host
        self.advertised_host = advertised_host
        self.config = config
        self.grace_s = grace_s
        self.door: GrpcDoor | None = None
        self.broker: Broker | None = None

    def __call__(self, broker: Broker) -> AbstractAsyncContextManager[GrpcDoor]:
        return self._run(broker)

    @asynccontextmanager
    async def _run(self, broker: Broker) -> AsyncIterator[GrpcDoor]:
        doors = DoorDirectory(DoorAddress(self._advertised(broker), self.port), broker.cluster)
        registry = ClientRegistry(self.clock_ms)
        broker.config.check_plaintext(self.host, "gRPC")
        tls = broker.config.tls
        credentials = None if tls is None else server_credentials(tls)
        service = MessagingService(
            BrokerPort(broker, doors), registry, self._config(broker), auth=broker.auth
        )
        door = await GrpcDoor.start(
            service,
            host=self.host,
            port=self.port,
            expiry_check_s=self.expiry_check_s,
            credentials=credentials,
        )
        doors.own = DoorAddress(doors.own.host, door.port)
        board = broker.operators.transactions if broker.operators is not None else None
        push = CheckBackPusher(broker, service)
        try:
            await run_blocking(doors.publish)
            if board is not None:
                board.dispatcher.pushers.append(push)
            self.door, self.broker = door, broker
            log.info("gRPC door on %s:%d (advertised %s)", self.host, door.port, doors.own.host)
            yield door
        finally:
            # the board may have been rebuilt since (an election): its pushers list moved with it
            board = broker.operators.transactions if broker.operators is not None else None
            if board is not None and push in board.dispatcher.pushers:
                board.dispatcher.pushers.remove(push)
            self.door = self.broker = None
            await door.stop(self.grace_s)

    def _advertised(self, broker: Broker) -> str:
        if self.advertised_host:
            return self.advertised_host
        if broker.cluster is not None:
            return broker.cluster.config.advertise_host
        return "127.0.0.1" if self.host in WILDCARDS else self.host

    def _config(self, broker: Broker) -> DoorConfig:
        """The door's limits follow the store's largest message."""
        base = self.config or DoorConfig()
        max_body = broker.store.config.max_message_size_bytes
        return replace(
            base,
            limits=replace(base.limits, max_body_bytes=max_body),
            settings=replace(base.settings, max_body_bytes=min(base.settings.max_body_bytes, max_body)),
        )


def server_credentials(tls: TlsConfig) -> grpc.ServerCredentials:
    """gRPC's TLS credentials from the listeners' files: the certificate chain and key; with
    ``require_client_cert`` a client certificate chaining to ``ca_file`` is required.

    gRPC cannot ask for an *optional* client certificate: without ``require_client_cert`` none
    is asked for (the HTTP and Kafka listeners verify one when presented). Raises
    :class:`InvalidArgument` naming the files when they do not load (checked with Python's
    ``ssl`` first: gRPC itself only fails when the port is added, without saying why).
    """
    tls.server_context()  # the files load and the key matches the certificate
    try:
        key, chain = tls.key_file.read_bytes(), tls.cert_file.read_bytes()
        roots = None if tls.ca_file is None else tls.ca_file.read_bytes()
    except OSError as exc:
        files = f"{tls.cert_file}, {tls.key_file}"
        raise InvalidArgument(f"cannot read TLS files {files}: {exc.strerror}") from None
    return grpc.ssl_server_credentials(
        [(key, chain)],
        root_certificates=roots if tls.require_client_cert else None,
        require_client_auth=tls.require_client_cert,
    )


class CheckBackPusher:
    """A check-back pusher of :class:`broker.transactions.CheckDispatcher`: a gRPC producer's
    group is its topic, so a check of group G goes to a producer of topic G with a live
    Telemetry stream (the half message read from the store, shown under its real topic)."""

    def __init__(self, broker: Broker, service: MessagingService) -> None:
        self._broker = broker
        self._service = service
        self._tasks: set[asyncio.Task[None]] = set()

    def __call__(self, check: dict[str, Any]) -> bool:
        group = str(check["producer_group"])
        if not self._service.registry.producers_of(group):
            return False
        task = asyncio.get_running_loop().create_task(self._push(group, str(check["transaction_id"])))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _push(self, group: str, transaction_id: str) -> None:
        board = self._broker.operators.transactions if self._broker.operators is not None else None
        tx = None if board is None else board.service.get(transaction_id)
        if tx is None or tx.outcome is not None or not tx.runs:
            return
        half = tx.halves[0]
        view = await run_blocking(self._broker.store.get_by_commitlog_offset, half.commitlog_offset)
        if view is None:
            log.warning("check-back of %s: its half is no longer stored", transaction_id)
            return
        if not self._service.push_check_back(group, view, transaction_id):
            log.info("check-back of %s: no producer of %s is connected any more", transaction_id, group)


class _ServeOptions(Protocol):
    @property
    def config(self) -> Any: ...
    @property
    def extra(self) -> Mapping[str, Any]: ...


def serve_companions(options: _ServeOptions) -> list[GrpcCompanion]:
    """``sparkmq serve`` hook: the door when ``extra["grpc_port"]`` is set, bound on the HTTP
    host and advertising ``extra["advertise_host"]`` when given."""
    port = options.extra.get("grpc_port")
    if port is None:
        return []
    host = str(getattr(options.config, "host", "127.0.0.1"))
    return [GrpcCompanion(port=int(port), host=host, advertised_host=options.extra.get("advertise_host"))]
