"""What the remoting handlers share: the store, this broker's identity in routes, the clients.

The broker core (``broker/``) will replace the direct store calls; until then the handlers call
the :class:`store.MessageStore` facade in a worker thread (:meth:`DoorContext.run_blocking`)
so the event loop keeps serving other connections.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from ingest_api.remoting.handlers.clients import ClientRegistry
from store import Clock, MessageStore, wall_clock_ms

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    """How this broker appears in route bodies. ``address`` is ``host:port`` of the remoting
    port as clients must dial it (the advertised host)."""

    address: str
    broker_name: str = "broker-a"
    cluster_name: str = "DefaultCluster"


@dataclass(slots=True)
class DoorContext:
    """Shared by every handler of one remoting door."""

    store: MessageStore
    identity: BrokerIdentity
    clock_ms: Clock = wall_clock_ms
    clients: ClientRegistry = field(default_factory=ClientRegistry)

    async def run_blocking(self, call: Callable[..., T], *args: object) -> T:
        """Run a blocking store call in the default executor."""
        return await asyncio.get_running_loop().run_in_executor(None, functools.partial(call, *args))
