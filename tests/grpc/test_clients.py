"""The client registry: registration from settings, heartbeats, streams, expiry and look-ups."""

from __future__ import annotations

from ingest_api.grpc.clients import ClientRegistry
from ingest_api.grpc.v2 import definition_pb2 as pb
from ingest_api.grpc.v2 import service_pb2 as spb


class ListStream:
    """A Telemetry stream that keeps what is pushed (the registry only hands it out)."""

    def __init__(self) -> None:
        self.pushed: list[spb.TelemetryCommand] = []
        self.open = True

    def push(self, command: spb.TelemetryCommand) -> bool:
        if self.open:
            self.pushed.append(command)
        return self.open


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000

    def __call__(self) -> int:
        return self.now_ms


def producer(*topics: str) -> pb.Settings:
    publishing = pb.Publishing(topics=[pb.Resource(name=t) for t in topics])
    return pb.Settings(client_type=pb.PRODUCER, publishing=publishing)


def consumer(group: str, kind: int = pb.SIMPLE_CONSUMER) -> pb.Settings:
    return pb.Settings(client_type=kind, subscription=pb.Subscription(group=pb.Resource(name=group)))  # type: ignore[arg-type]


def test_registration_heartbeat_and_expiry() -> None:
    clock = Clock()
    registry = ClientRegistry(clock, expiry_ms=30_000)
    assert registry.heartbeat("p1") is None  # never sent settings: UNRECOGNIZED_CLIENT_TYPE
    session = registry.register("p1", producer("orders", "audit"), ListStream())
    assert (session.kind, session.group, session.topics) == (pb.PRODUCER, None, ("orders", "audit"))
    registry.register("c1", consumer("G"), None)
    clock.now_ms += 20_000
    beat = registry.heartbeat("c1")
    assert beat is not None and beat.last_seen_ms == 21_000
    clock.now_ms += 15_000  # p1 unseen for 35 s, c1 for 15 s
    assert [s.client_id for s in registry.expire()] == ["p1"]
    assert registry.get("p1") is None and registry.get("c1") is not None and len(registry) == 1
    assert registry.remove("c1") is not None and registry.remove("c1") is None


def test_check_back_candidates_are_live_producers_of_the_topic() -> None:
    clock = Clock()
    registry = ClientRegistry(clock)
    first, second = ListStream(), ListStream()
    registry.register("p1", producer("orders"), first)
    clock.now_ms += 1
    registry.register("p2", producer("orders"), second)
    registry.register("p3", producer("audit"), ListStream())
    assert [s.client_id for s in registry.producers_of("orders")] == ["p2", "p1"]
    registry.detach("p2", second)
    assert [s.client_id for s in registry.producers_of("orders")] == ["p1"]
    # a stale stream's end does not detach a newer one
    newer = ListStream()
    registry.register("p1", producer("orders"), newer)
    registry.detach("p1", first)
    session = registry.get("p1")
    assert session is not None and session.stream is newer


def test_consumers_of_a_group() -> None:
    registry = ClientRegistry(Clock())
    registry.register("b", consumer("G", pb.PUSH_CONSUMER), None)
    registry.register("a", consumer("G"), None)
    registry.register("x", consumer("H"), None)
    registry.register("p", producer("G"), None)
    assert [s.client_id for s in registry.consumers_of("G")] == ["a", "b"]
