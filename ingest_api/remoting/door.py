"""The remoting door assembled: the running broker, its identity, the handler table, the server.

Embedding (what :class:`~ingest_api.remoting.companion.RemotingCompanion` does on the broker's
loop, between :func:`broker.lifecycle.running_broker`'s start and stop)::

    door = await start_remoting_door(broker, host="0.0.0.0", port=10911, advertised_host="broker.lan")
    ...
    await door.close()      # before the broker stops

The advertised ``host:port`` is what route bodies give clients as the broker's address;
``port=0`` binds a free port and advertises it. When the broker has users (``broker.auth``),
every request must be signed with a user's access key and is authorized per request code
(:mod:`ingest_api.remoting.authz`).
"""

from __future__ import annotations

import ssl

from broker.state import Broker
from broker.transactions import CheckDispatcher
from ingest_api.remoting.authz import AclGuard
from ingest_api.remoting.codec import DEFAULT_MAX_FRAME_BYTES
from ingest_api.remoting.handlers import BrokerIdentity, DoorContext, handler_table
from ingest_api.remoting.handlers.transactions import CheckBacks
from ingest_api.remoting.server import RemotingServer, RemotingServerConfig, start_remoting_server


class RemotingDoor:
    """A running door; ``close()`` stops the listener. While it runs, the broker's transaction
    check-backs for a group with a live remoting producer go over that producer's connection."""

    def __init__(self, context: DoorContext, server: RemotingServer) -> None:
        self.context = context
        self.server = server
        self.check_backs = CheckBacks(context)
        self._dispatcher = _dispatcher(context.broker)
        if self._dispatcher is not None:
            self._dispatcher.pushers.append(self.check_backs)

    @property
    def port(self) -> int:
        return self.server.port

    async def close(self) -> None:
        if self._dispatcher is not None and self.check_backs in self._dispatcher.pushers:
            self._dispatcher.pushers.remove(self.check_backs)
        self.check_backs.close()
        await self.server.close()
        self.context.close()


def _dispatcher(broker: Broker) -> CheckDispatcher | None:
    board = broker.operators.transactions if broker.operators is not None else None
    return board.dispatcher if board is not None else None


async def start_remoting_door(
    broker: Broker,
    *,
    host: str = "127.0.0.1",
    port: int = 10911,
    advertised_host: str | None = None,
    broker_name: str = "broker-a",
    cluster_name: str = "DefaultCluster",
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ssl_context: ssl.SSLContext | None = None,
) -> RemotingDoor:
    """Bind and serve; returns once the socket listens. ``advertised_host`` defaults to ``host``."""
    shown_host = advertised_host or host
    context = DoorContext(broker, BrokerIdentity(f"{shown_host}:{port}", broker_name, cluster_name))
    config = RemotingServerConfig(
        host=host, port=port, max_frame_bytes=max_frame_bytes, ssl_context=ssl_context
    ).validate()
    guard = AclGuard(context, broker.auth) if broker.auth is not None else None
    server = await start_remoting_server(handler_table(context), config, guard)
    if port == 0:  # advertise the port actually bound
        context.identity = BrokerIdentity(f"{shown_host}:{server.port}", broker_name, cluster_name)
    return RemotingDoor(context, server)
