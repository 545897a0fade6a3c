"""What the remoting handlers share: the running broker, this broker's identity in routes, the
remoting clients (heartbeats, orderly locks, producer connections for check-backs).

The door is a companion of the running broker (:mod:`broker.lifecycle`): every rule is the
core's (:mod:`broker.produce`, :mod:`broker.longpoll`, :mod:`broker.retries`,
:mod:`broker.transactions`, :mod:`broker.reads`), reached through :attr:`DoorContext.broker`;
the handlers decode, call the core and encode. Blocking store calls run in a worker thread
(:meth:`DoorContext.run_blocking`) so the event loop keeps serving other connections.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from broker.broker_routes import global_queue_id
from broker.state import Broker
from broker.threads import run_blocking
from ingest_api.remoting.connection import Connection
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

    broker: Broker
    identity: BrokerIdentity
    clock_ms: Clock = wall_clock_ms
    clients: ClientRegistry = field(default_factory=ClientRegistry)
    locks: QueueLocks = field(default_factory=QueueLocks)
    #: Client id -> the connection its last heartbeat came on (check-backs go there).
    connections: dict[str, Connection] = field(default_factory=dict)

    @property
    def store(self) -> MessageStore:
        """The broker's store (reads the core has no rule about: raw records, bounds)."""
        return self.broker.store

    def queue_id(self, topic: str, queue_number: int) -> int:
        """The topic's queue id of a client's queue number on this broker (cluster routes number
        each broker's queues from 0: :func:`broker.broker_routes.global_queue_id`)."""
        return global_queue_id(self.broker, topic, queue_number)

    def close(self) -> None:
        """Nothing to release: the arrival hub and the store belong to the broker."""

    async def run_blocking(self, call: Callable[..., T], *args: object) -> T:
        """Run a blocking store call in a worker thread (the core's :func:`broker.threads.run_blocking`)."""
        return await run_blocking(call, *args)
