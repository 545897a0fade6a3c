"""Which clients run which producer and consumer groups, as their heartbeats say.

A pure registry with the time passed in (no clock, no I/O): HEART_BEAT registers a client's
groups and subscriptions, UNREGISTER_CLIENT removes them, and a client whose last heartbeat is
older than ``expiry_ms`` no longer counts (RocketMQ's broker scans channels idle for 120 s).
GET_CONSUMER_LIST_BY_GROUP answers :meth:`ClientRegistry.consumer_ids` so clients rebalance
the queues among the live members.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ingest_api.remoting.bodies import ConsumerData, HeartbeatData

#: RocketMQ's ``channelExpiredTimeout``: a client silent this long is dropped.
DEFAULT_CLIENT_EXPIRY_MS = 120_000


@dataclass(slots=True)
class ClientState:
    last_heartbeat_ms: int
    producer_groups: set[str] = field(default_factory=set)
    consumers: dict[str, ConsumerData] = field(default_factory=dict)


class ClientRegistry:
    """Client id -> its groups; not thread-safe (the event loop owns it)."""

    def __init__(self, expiry_ms: int = DEFAULT_CLIENT_EXPIRY_MS) -> None:
        self.expiry_ms = expiry_ms
        self._clients: dict[str, ClientState] = {}

    def heartbeat(self, hb: HeartbeatData, now_ms: int) -> None:
        """Record ``hb``: the client's groups are replaced by the ones it lists now."""
        self._clients[hb.client_id] = ClientState(
            last_heartbeat_ms=now_ms,
            producer_groups=set(hb.producer_groups),
            consumers={c.group_name: c for c in hb.consumers},
        )

    def unregister(self, client_id: str, producer_group: str | None, consumer_group: str | None) -> None:
        """Drop the named groups of ``client_id`` (and the client once it runs none)."""
        state = self._clients.get(client_id)
        if state is None:
            return
        if producer_group:
            state.producer_groups.discard(producer_group)
        if consumer_group:
            state.consumers.pop(consumer_group, None)
        if not state.producer_groups and not state.consumers:
            del self._clients[client_id]

    def knows(self, client_id: str) -> bool:
        """Whether ``client_id`` still runs a group (live or not)."""
        return client_id in self._clients

    def _live(self, now_ms: int) -> dict[str, ClientState]:
        return {cid: s for cid, s in self._clients.items() if now_ms - s.last_heartbeat_ms <= self.expiry_ms}

    def consumer_ids(self, group: str, now_ms: int) -> list[str]:
        """Live client ids consuming in ``group``, sorted (every member computes the same split)."""
        return sorted(cid for cid, s in self._live(now_ms).items() if group in s.consumers)

    def producer_ids(self, group: str, now_ms: int) -> list[str]:
        """Live client ids producing in ``group`` (candidates for transaction check-backs)."""
        return sorted(cid for cid, s in self._live(now_ms).items() if group in s.producer_groups)

    def subscription(self, group: str, now_ms: int) -> ConsumerData | None:
        """The group's consumer data from its most recent live heartbeat."""
        latest: tuple[int, ConsumerData] | None = None
        for state in self._live(now_ms).values():
            data = state.consumers.get(group)
            if data is not None and (latest is None or state.last_heartbeat_ms > latest[0]):
                latest = (state.last_heartbeat_ms, data)
        return None if latest is None else latest[1]

    def expire(self, now_ms: int) -> list[str]:
        """Forget clients silent for more than ``expiry_ms``; returns their ids."""
        gone = [cid for cid in self._clients if cid not in self._live(now_ms)]
        for cid in gone:
            del self._clients[cid]
        return gone
