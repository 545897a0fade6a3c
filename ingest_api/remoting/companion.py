"""Run the remoting door next to the HTTP API, on the broker's event loop (``sparkmq serve``).

``create_app(config, companions=[RemotingCompanion(port=10911)])`` starts the door after the
store opens and closes it before the store closes. ``sparkmq serve`` registers
:func:`serve_companions`, which turns ``--remoting-port`` (off when absent), ``--remoting-host``
and ``--advertise-host`` into a companion.

The door holds the running :class:`broker.state.Broker`: its handlers call the core. In a
cluster (``broker.cluster`` set) the door shows this member's broker name and the remoting
address it registered in ZooKeeper (``sparkmq serve --cluster ... --remoting-port``), and its
routes come from the cluster's.

TLS: with ``sparkmq serve --tls-cert/--tls-key`` (``broker.config.tls``) the port speaks TLS
only (RocketMQ's ``tls.server.mode=enforcing``; clients set ``useTLS`` / ``-Dtls.enable=true``);
a plaintext client is disconnected. Routes keep advertising the same ``host:port``. With auth
on, a plaintext door off loopback is refused unless ``--allow-plaintext``
(:meth:`broker.config.ServerConfig.check_plaintext`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol

from broker.state import Broker
from ingest_api.remoting.door import RemotingDoor, start_remoting_door
from store import InvalidArgument

WILDCARD_HOSTS = ("0.0.0.0", "::", "")


class RemotingCompanion:
    """A companion factory: ``companion(broker)`` is an async context manager running the door.

    ``door`` is the running door while the broker is up (its ``port`` when ``port=0``).
    """

    def __init__(
        self,
        port: int = 10911,
        host: str = "127.0.0.1",
        advertised_host: str | None = None,
        broker_name: str = "broker-a",
    ) -> None:
        self.port = port
        self.host = host
        self.advertised_host = advertised_host or (host if host not in WILDCARD_HOSTS else "127.0.0.1")
        self.broker_name = broker_name
        self.door: RemotingDoor | None = None

    def __call__(self, broker: Broker) -> AbstractAsyncContextManager[RemotingDoor]:
        return self._run(broker)

    @asynccontextmanager
    async def _run(self, broker: Broker) -> AsyncIterator[RemotingDoor]:
        advertised, name = self.advertised_host, self.broker_name
        node = broker.cluster
        if node is not None:
            member = node.member
            if member is None or member.remoting is None:
                raise InvalidArgument(
                    "the remoting door of a cluster broker needs its remoting address registered: "
                    "start it with --remoting-port"
                )
            advertised, name = member.remoting.rpartition(":")[0], node.name
        broker.config.check_plaintext(self.host, "remoting")
        tls = broker.config.tls
        door = await start_remoting_door(
            broker,
            host=self.host,
            port=self.port,
            advertised_host=advertised,
            broker_name=name,
            ssl_context=None if tls is None else tls.server_context(),
        )
        self.door = door
        try:
            yield door
        finally:
            self.door = None
            await door.close()


class _ServeOptions(Protocol):
    @property
    def config(self) -> Any: ...
    @property
    def extra(self) -> Mapping[str, Any]: ...


def serve_companions(options: _ServeOptions) -> list[Callable[[Any], AbstractAsyncContextManager[Any]]]:
    """``sparkmq serve`` hook: one door when ``extra["remoting_port"]`` is set, else none.

    Binds ``extra["remoting_host"]`` or the HTTP host; advertises ``extra["advertise_host"]``.
    """
    port = options.extra.get("remoting_port")
    if port is None:
        return []
    host = str(options.extra.get("remoting_host") or getattr(options.config, "host", "127.0.0.1"))
    return [RemotingCompanion(port=int(port), host=host, advertised_host=options.extra.get("advertise_host"))]
