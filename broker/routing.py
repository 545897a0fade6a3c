"""Where each produced message goes in a cluster: a queue id, and the broker that owns it.

Pure planning over a :class:`cluster.ClusterView`, shared by every produce path (single, JSON,
NDJSON and Arrow batches) so they route the same way:

* an explicit ``queue_id`` goes to that queue's owner (400 when it is outside the topic);
* a ``sharding_key`` goes to ``abs(javaHash(key)) % N`` over the whole topic's N queue ids,
  whichever broker received it (RocketMQ's ``SelectMessageQueueByHash``, :func:`store.sharding_queue`);
* a message with neither stays on the receiving broker, round robin over its own queues of the
  topic (no forwarding); a broker that owns none sends it to a live owner, which picks;
* with an ``Idempotency-Key`` those messages go instead to the owner of the key's own queue
  (``sharding_queue(key, N)``), so a retry sent to any broker reaches the broker that holds the
  first attempt and is deduplicated there.

A forwarded request (``X-Sparkmq-Forwarded``) is planned with ``forwarded=True``: everything in
it must be local, or the route moved under it and it is refused (421) rather than forwarded again.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from broker.errors import BrokerError
from cluster import ClusterView, NoLiveBroker
from store import UNPLACED, sharding_queue, sharding_queues

#: Request header of a request one broker forwards to another (value: the sender's name).
FORWARDED_HEADER = "x-sparkmq-forwarded"
#: Header naming the idempotency scope of a forwarded part of a request that spans brokers.
SCOPE_HEADER = "x-sparkmq-idempotency-scope"


@dataclass(frozen=True)
class Plan:
    """Per entry: the broker name it goes to and its queue id (``UNPLACED``: the owner picks
    among its own queues)."""

    owners: list[str]
    queue_ids: npt.NDArray[np.int32]

    def groups(self) -> dict[str, list[int]]:
        """Entry indexes per broker, brokers in order of first appearance."""
        out: dict[str, list[int]] = {}
        for index, owner in enumerate(self.owners):
            out.setdefault(owner, []).append(index)
        return out


class QueuePlanner:
    """This broker's planner; keeps the round-robin position per topic."""

    def __init__(self, me: str) -> None:
        self.me = me
        self._turns: dict[str, int] = {}
        self._lock = threading.Lock()
        self._mine_cache: dict[str, tuple[int, int, tuple[int, ...]]] = {}

    def _next(self, topic: str, count: int) -> npt.NDArray[np.int64]:
        """The next ``count`` round-robin turns of ``topic`` (reserved under a lock: batches are
        planned on worker threads)."""
        with self._lock:
            start = self._turns.get(topic, 0)
            self._turns[topic] = start + count
        return start + np.arange(count, dtype=np.int64)

    def plan_one(
        self,
        view: ClusterView,
        topic: str,
        queue_id: int | None,
        sharding_key: str | None,
        *,
        anchor: str | None = None,
        forwarded: bool = False,
        serving: bool = True,
    ) -> tuple[str, int]:
        """:meth:`plan` of one message without arrays (the hot single produce): ``(owner,
        queue id or UNPLACED)``."""
        placement = view.placement(topic)
        if placement is None:
            raise BrokerError(503, "route_unknown", f"topic {topic!r} has no route yet; retry")
        if queue_id is None and sharding_key is None and anchor is None and serving:
            mine = self._mine(topic, placement.owners, placement.version)
            if mine:  # the usual case: an unkeyed message stays here
                turn = self._next(topic, 1)[0]
                return self.me, mine[int(turn) % len(mine)]
        plan = self.plan(
            view, [topic], [queue_id], [sharding_key], anchor=anchor, forwarded=forwarded, serving=serving
        )
        return plan.owners[0], int(plan.queue_ids[0])

    def _mine(self, topic: str, owners: tuple[str, ...], version: int) -> tuple[int, ...]:
        """This broker's queue ids of ``topic`` (cached per placement version)."""
        cached = self._mine_cache.get(topic)
        if cached is None or cached[0] != version or cached[1] != len(owners):
            cached = (version, len(owners), tuple(q for q, o in enumerate(owners) if o == self.me))
            self._mine_cache[topic] = cached
        return cached[2]

    def plan(
        self,
        view: ClusterView,
        topics: Sequence[str],
        explicit: Sequence[int | None],
        sharding: Sequence[str | None],
        *,
        anchor: str | None = None,
        forwarded: bool = False,
        serving: bool = True,
    ) -> Plan:
        """The plan of one request's entries (``topics[i]`` is entry i's topic, each routed).
        ``serving`` is False on a replica that is not its group's master: nothing is local then
        (its own queues go to its master).

        Raises :class:`BrokerError` 400 for a queue id outside its topic, 421 for a forwarded
        request that is not all local, :class:`NoLiveBroker` when no broker can take a message."""
        n = len(topics)
        owners: list[str] = [""] * n
        queue_ids = np.full(n, UNPLACED, dtype=np.int32)
        by_topic: dict[str, list[int]] = {}
        for index, topic in enumerate(topics):
            by_topic.setdefault(topic, []).append(index)
        for topic, rows in by_topic.items():
            placement = view.placement(topic)
            if placement is None:
                raise BrokerError(503, "route_unknown", f"topic {topic!r} has no route yet; retry")
            self._plan_topic(
                view, placement.owners, topic, rows, explicit, sharding, anchor, owners, queue_ids, serving
            )
        if forwarded:
            foreign = [i for i, owner in enumerate(owners) if owner != self.me or not serving]
            if foreign:
                i = foreign[0]
                raise BrokerError(
                    421,
                    "misdirected",
                    f"messages[{i}]: queue {int(queue_ids[i])} of {topics[i]!r} is served by the master of "
                    f"{owners[i]}, not by this member of {self.me}: the route changed while the request "
                    "was forwarded; retry",
                    index=i,
                )
        return Plan(owners, queue_ids)

    def _plan_topic(
        self,
        view: ClusterView,
        placement: tuple[str, ...],
        topic: str,
        rows: list[int],
        explicit: Sequence[int | None],
        sharding: Sequence[str | None],
        anchor: str | None,
        owners: list[str],
        queue_ids: npt.NDArray[np.int32],
        serving: bool,
    ) -> None:
        count = len(placement)
        unkeyed: list[int] = []
        keyed_rows = [i for i in rows if sharding[i] is not None]
        if keyed_rows:
            hashed = sharding_queues([sharding[i] for i in keyed_rows], count)  # type: ignore[misc]
            queue_ids[keyed_rows] = hashed
        for i in rows:
            queue = explicit[i]
            if queue is not None:
                if queue >= count:
                    raise BrokerError(
                        409,
                        "unknown_queue",
                        f"messages[{i}]: queue_id {queue} is outside topic {topic!r}'s {count} queues",
                        index=i,
                    )
                queue_ids[i] = queue
            elif sharding[i] is None:
                unkeyed.append(i)
                continue
            owners[i] = placement[int(queue_ids[i])]
        if not unkeyed:
            return
        mine = [q for q, owner in enumerate(placement) if owner == self.me] if serving else []
        if anchor is not None:
            target = placement[sharding_queue(anchor, count)]
        elif mine:
            target = self.me
        else:
            live = set(view.live_brokers())
            candidates = sorted({owner for owner in placement if owner in live})
            if not candidates:
                raise NoLiveBroker(f"no live broker owns a queue of topic {topic!r}")
            target = candidates[int(self._next(f"\x00{topic}", 1)[0]) % len(candidates)]
        for i in unkeyed:
            owners[i] = target
        if target == self.me and mine:
            turns = self._next(topic, len(unkeyed))
            queue_ids[unkeyed] = np.asarray(mine, dtype=np.int32)[turns % len(mine)]
