"""Who is connected: the gRPC door's registry of clients, keyed by ``x-mq-client-id``.

A client becomes known when it writes its settings on the Telemetry stream
(:meth:`ClientRegistry.register`): its kind (producer, simple or push consumer), its consumer
group or producer topics, the settings the server answered, and the stream's handle for
pushing commands to it (transaction check-backs). Heartbeat refreshes ``last_seen_ms``; a
client unseen for ``expiry_ms`` (three heartbeat periods by default) is dropped by
:meth:`ClientRegistry.expire`, as is one that sends NotifyClientTermination.

The proxy picks the producers for a check-back by topic: a gRPC producer's group *is* the
topic name (``settings.publishing.topics``), see :meth:`ClientRegistry.producers_of`.

Thread-safe (one lock): the door's event loop registers and refreshes, services on other
threads look up streams to push to. The clock is injected (epoch ms).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Protocol

from ingest_api.grpc.v2 import definition_pb2 as pb
from ingest_api.grpc.v2 import service_pb2 as spb
from store import Clock, wall_clock_ms

#: The Python client heartbeats every 10 s; three missed beats drop it.
DEFAULT_EXPIRY_MS = 30_000
PRODUCER = pb.PRODUCER
CONSUMER_KINDS = frozenset({pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER})


class TelemetryStream(Protocol):
    """The server side of one client's Telemetry stream, as a sink for commands."""

    def push(self, command: spb.TelemetryCommand) -> bool:
        """Queue ``command`` for the client; ``False`` when the stream has ended."""
        ...


@dataclass(frozen=True, slots=True)
class ClientSession:
    """One registered client (replaced whole on every change: share it freely)."""

    client_id: str
    kind: pb.ClientType
    #: The consumer group (consumers), else ``None``.
    group: str | None
    #: The topics a producer publishes to (empty for consumers).
    topics: tuple[str, ...]
    #: The settings the server answered with (what the client now runs with).
    settings: pb.Settings
    stream: TelemetryStream | None
    last_seen_ms: int

    @property
    def is_consumer(self) -> bool:
        return self.kind in CONSUMER_KINDS


class ClientRegistry:
    """client id -> :class:`ClientSession`; see the module doc."""

    def __init__(self, clock_ms: Clock = wall_clock_ms, expiry_ms: int = DEFAULT_EXPIRY_MS) -> None:
        if expiry_ms <= 0:
            raise ValueError(f"expiry_ms must be > 0, got {expiry_ms}")
        self._clock_ms = clock_ms
        self._expiry_ms = expiry_ms
        self._sessions: dict[str, ClientSession] = {}
        self._lock = threading.Lock()

    def register(
        self, client_id: str, settings: pb.Settings, stream: TelemetryStream | None
    ) -> ClientSession:
        """Record (or replace) ``client_id`` with the settings answered to it and its stream."""
        publishing = settings.WhichOneof("pub_sub") == "publishing"
        session = ClientSession(
            client_id=client_id,
            kind=settings.client_type,
            group=None if publishing else settings.subscription.group.name,
            topics=tuple(t.name for t in settings.publishing.topics) if publishing else (),
            settings=settings,
            stream=stream,
            last_seen_ms=self._clock_ms(),
        )
        with self._lock:
            self._sessions[client_id] = session
        return session

    def heartbeat(self, client_id: str) -> ClientSession | None:
        """Refresh ``client_id``; ``None`` when it never sent settings (the proxy answers that
        with ``UNRECOGNIZED_CLIENT_TYPE``)."""
        with self._lock:
            session = self._sessions.get(client_id)
            if session is None:
                return None
            session = replace(session, last_seen_ms=self._clock_ms())
            self._sessions[client_id] = session
            return session

    def get(self, client_id: str) -> ClientSession | None:
        with self._lock:
            return self._sessions.get(client_id)

    def remove(self, client_id: str) -> ClientSession | None:
        """Forget ``client_id`` (NotifyClientTermination); the session it had, if any."""
        with self._lock:
            return self._sessions.pop(client_id, None)

    def detach(self, client_id: str, stream: TelemetryStream) -> None:
        """The Telemetry stream ``stream`` ended: keep the client (heartbeats may go on) but
        stop pushing to it. A newer stream of the same client is left alone."""
        with self._lock:
            session = self._sessions.get(client_id)
            if session is not None and session.stream is stream:
                self._sessions[client_id] = replace(session, stream=None)

    def expire(self) -> list[ClientSession]:
        """Drop and return the clients unseen for ``expiry_ms``."""
        cutoff = self._clock_ms() - self._expiry_ms
        with self._lock:
            gone = [s for s in self._sessions.values() if s.last_seen_ms < cutoff]
            for session in gone:
                del self._sessions[session.client_id]
        return gone

    def producers_of(self, topic: str) -> list[ClientSession]:
        """Producers publishing to ``topic`` with a live stream (check-back candidates),
        most recently seen first."""
        with self._lock:
            found = [
                s for s in self._sessions.values() if s.kind == PRODUCER and topic in s.topics and s.stream
            ]
        return sorted(found, key=lambda s: -s.last_seen_ms)

    def consumers_of(self, group: str) -> list[ClientSession]:
        """Consumers of ``group``, by client id (push-consumer assignment)."""
        with self._lock:
            found = [s for s in self._sessions.values() if s.is_consumer and s.group == group]
        return sorted(found, key=lambda s: s.client_id)

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)
