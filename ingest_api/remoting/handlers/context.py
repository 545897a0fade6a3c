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

from ingest_api.remoting.handlers.arrivals import ArrivalWaiters
from ingest_api.remoting.handlers.clients import ClientRegistry
from ingest_api.remoting.handlers.queue_locks import QueueLocks
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
    locks: QueueLocks = field(default_factory=QueueLocks)
    _waiters: ArrivalWaiters | None = None

    def arrivals(self) -> ArrivalWaiters:
        """The long-polling waiters, created on first use on the running loop and fed by the
        store's arrival listener until :meth:`close`."""
        if self._waiters is None:
            self._waiters = ArrivalWaiters(asyncio.get_running_loop())
            self.store.add_arrival_listener(self._waiters.on_arrival)
        return self._waiters

    def close(self) -> None:
        """Stop listening to the store (call after the server closed)."""
        if self._waiters is not None:
            self.store.remove_arrival_listener(self._waiters.on_arrival)
            self._waiters = None

    async def run_blocking(self, call: Callable[..., T], *args: object) -> T:
        """Run a blocking store call in the default executor."""
        return await asyncio.get_running_loop().run_in_executor(None, functools.partial(call, *args))
