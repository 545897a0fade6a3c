"""Routes as the client sees them, and where each message goes. Pure values and functions.

``GET /cluster`` becomes a :class:`ClusterInfo` and ``GET /topics/{t}/route`` a
:class:`TopicRoute` (one :class:`QueueRoute` per queue id: its broker name, whether that broker
is alive, its HTTP address). A lone broker answers as a one-broker cluster named ``local``; its
address is then the URL the client reached it through (it may advertise a loopback address).

:func:`plan` applies the brokers' own queue rule (``broker/routing.py``), so a message
sent straight to the owner lands where a broker would have put it:

* ``queue_id`` given: that queue, at its owner;
* ``sharding_key`` given: ``store.sharding_queue(key, N)`` over the topic's N queue ids, at its
  owner (the key itself is sent: an owner that knows a larger N by which the key maps elsewhere
  refuses it with 421, and the client plans again on the fresh route);
* neither, with the caller's ``Idempotency-Key``: the owner of the key's own queue
  (``sharding_queue(key, N)``) picks among its queues, as a broker does, so a retry sent through
  any door reaches the broker holding the first attempt;
* neither, without one: round robin over the queues of live brokers (one message: the next
  queue; a batch: the next broker, spread over its queues), skipping brokers to ``avoid``;
  when no broker is alive, the queues of a replica group electing its next master.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparkmq.client.errors import NoLiveBroker
from store import sharding_queue

#: The broker name a lone broker answers with.
LOCAL_BROKER = "local"


@dataclass(frozen=True)
class BrokerInfo:
    name: str
    alive: bool
    http: str | None
    kafka: str | None
    queues: int
    member_id: int | None = None


@dataclass(frozen=True)
class ClusterInfo:
    """``GET /cluster``: ``mode`` is ``cluster`` or ``single``; ``self_name`` the answering broker."""

    mode: str
    self_name: str
    session: str | None
    brokers: tuple[BrokerInfo, ...]
    topics: int
    warnings: tuple[str, ...] = ()
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @staticmethod
    def from_json(document: Mapping[str, Any], answered_url: str) -> ClusterInfo:
        single = document.get("mode") == "single"
        brokers = tuple(
            BrokerInfo(
                name=str(b["name"]),
                alive=bool(b["alive"]),
                http=answered_url if single else b.get("http"),
                kafka=b.get("kafka"),
                queues=int(b.get("queues", 0)),
                member_id=b.get("member_id"),
            )
            for b in document.get("brokers", ())
        )
        return ClusterInfo(
            mode=str(document.get("mode", "single")),
            self_name=str(document.get("self", LOCAL_BROKER)),
            session=document.get("session"),
            brokers=brokers,
            topics=int(document.get("topics", 0)),
            warnings=tuple(document.get("warnings") or ()),
            raw=document,
        )

    def broker(self, name: str) -> BrokerInfo | None:
        return next((b for b in self.brokers if b.name == name), None)

    def live_brokers(self) -> tuple[str, ...]:
        return tuple(b.name for b in self.brokers if b.alive)


@dataclass(frozen=True)
class QueueRoute:
    queue_id: int
    broker: str
    alive: bool
    http: str | None
    #: The live members of the broker's replica group, the master first (``()`` without one).
    replicas: tuple[str, ...] = ()


@dataclass(frozen=True)
class TopicRoute:
    """Every queue id of a topic with its owner (index = queue id)."""

    topic: str
    queues: tuple[QueueRoute, ...]

    @staticmethod
    def from_json(document: Mapping[str, Any], single_url: str | None = None) -> TopicRoute:
        """``single_url``: the lone broker's address as the client reaches it (single mode)."""
        queues = tuple(
            QueueRoute(
                queue_id=int(q["queue_id"]),
                broker=str(q["broker"]),
                alive=bool(q["alive"]),
                http=single_url if single_url is not None else q.get("http"),
                replicas=tuple(q.get("replicas") or ()) if single_url is None else (),
            )
            for q in sorted(document.get("queues", ()), key=lambda q: int(q["queue_id"]))
        )
        return TopicRoute(topic=str(document["topic"]), queues=queues)

    @property
    def queue_count(self) -> int:
        return len(self.queues)

    def owner(self, queue_id: int) -> str:
        return self.queues[queue_id].broker

    def brokers(self) -> tuple[str, ...]:
        """Owner names in order of their first queue."""
        return tuple(dict.fromkeys(q.broker for q in self.queues))

    def alive(self, broker: str) -> bool:
        return any(q.alive for q in self.queues if q.broker == broker)

    def electing(self, broker: str) -> bool:
        """Whether ``broker`` has no master but live replica members: a failover is under way
        (its slave is about to be elected), so its queues are waited for, not given up."""
        return not self.alive(broker) and any(q.replicas for q in self.queues if q.broker == broker)

    def http_of(self, broker: str) -> str | None:
        return next((q.http for q in self.queues if q.broker == broker), None)

    def queues_of(self, broker: str) -> tuple[int, ...]:
        return tuple(q.queue_id for q in self.queues if q.broker == broker)

    def usable(self, avoid: Collection[str]) -> tuple[int, ...]:
        """Queue ids whose owner is alive and not to be avoided."""
        return tuple(q.queue_id for q in self.queues if q.alive and q.broker not in avoid)

    def electing_queues(self) -> tuple[int, ...]:
        """Queue ids whose owner is electing a new master (the last resort of round robin)."""
        return tuple(q.queue_id for q in self.queues if self.electing(q.broker))


@dataclass(frozen=True)
class Target:
    """Where one message goes: ``broker`` (``None``: any broker, the topic has no route yet)
    and ``queue_id`` (``None``: the broker decides, from the sharding key or among its own
    queues). ``picked``: a round-robin choice of the client's, free to move to another queue
    when the first attempt was certainly not stored."""

    broker: str | None
    queue_id: int | None
    picked: bool = False


class QueuePicker:
    """Round-robin positions per topic (thread-safe: producers are shared between threads)."""

    def __init__(self) -> None:
        self._turns: dict[str, int] = {}
        self._lock = threading.Lock()

    def _turn(self, key: str, count: int = 1) -> int:
        with self._lock:
            start = self._turns.get(key, 0)
            self._turns[key] = start + count
        return start

    def next_queue(self, route: TopicRoute, avoid: Collection[str] = ()) -> int:
        """The next queue of a live broker (``avoid``-ed brokers only when nothing else is left)."""
        candidates = route.usable(avoid) or route.usable(()) or route.electing_queues()
        if not candidates:
            raise NoLiveBroker(f"no live broker owns a queue of topic {route.topic!r}")
        return candidates[self._turn(route.topic) % len(candidates)]

    def next_broker(self, route: TopicRoute, avoid: Collection[str] = ()) -> str:
        live = [b for b in route.brokers() if route.alive(b) and b not in avoid]
        live = live or [b for b in route.brokers() if route.alive(b)]
        live = live or [b for b in route.brokers() if route.electing(b)]
        if not live:
            raise NoLiveBroker(f"no live broker owns a queue of topic {route.topic!r}")
        return live[self._turn("\x00" + route.topic) % len(live)]

    def spread(self, route: TopicRoute, broker: str, count: int) -> list[int]:
        """``count`` queue ids of ``broker``'s queues, round robin."""
        mine = route.queues_of(broker)
        start = self._turn(f"\x01{route.topic}\x00{broker}", count)
        return [mine[(start + i) % len(mine)] for i in range(count)]


def plan(
    route: TopicRoute | None,
    queue_ids: Sequence[int | None],
    sharding_keys: Sequence[str | None],
    *,
    anchor: str | None,
    picker: QueuePicker,
    avoid: Collection[str] = (),
    one_broker: bool = False,
) -> list[Target]:
    """The target of each entry (see the module docstring). ``one_broker``: the entries must
    stay on one broker (a transaction), so unkeyed ones join the first keyed entry's broker.

    Raises :class:`NoLiveBroker` when an unkeyed message has no live broker to go to."""
    n = len(queue_ids)
    if route is None:
        return [Target(None, queue_ids[i]) for i in range(n)]
    count = route.queue_count
    targets: list[Target | None] = [None] * n
    unkeyed: list[int] = []
    for i in range(n):
        queue, key = queue_ids[i], sharding_keys[i]
        if queue is not None:
            targets[i] = Target(route.owner(queue) if queue < count else None, queue)
        elif key is not None:
            targets[i] = Target(route.owner(sharding_queue(key, count)), None)
        else:
            unkeyed.append(i)
    if not unkeyed:
        return [t for t in targets if t is not None]
    placed = [t.broker for t in targets if t is not None and t.broker is not None]
    if anchor is not None:
        broker = route.owner(sharding_queue(anchor, count))
        for i in unkeyed:
            targets[i] = Target(broker, None)
    elif one_broker and placed:
        queues = picker.spread(route, placed[0], len(unkeyed))
        for i, queue in zip(unkeyed, queues, strict=True):
            targets[i] = Target(placed[0], queue, picked=True)
    elif len(unkeyed) == 1 and not one_broker:
        queue = picker.next_queue(route, avoid)
        targets[unkeyed[0]] = Target(route.owner(queue), queue, picked=True)
    else:
        broker = picker.next_broker(route, avoid)
        for i, queue in zip(unkeyed, picker.spread(route, broker, len(unkeyed)), strict=True):
            targets[i] = Target(broker, queue, picked=True)
    return [t for t in targets if t is not None]
