"""Placing a topic's queue ids on broker names: pure functions, tested without ZooKeeper.

A topic has one queue-id space ``0..N-1``; each id lives on exactly one broker name, as its
ConsumeQueue ``consumequeue/{topic}/{queueId}`` there. Placement is written once per queue id:
growing a topic appends ids and never moves an existing one (its data and consumer offsets
live on its broker).

New ids go round robin over the candidate brokers, fewest queues of this topic first (ties by
name), so a new topic of N queues on brokers b1..bk gets ``q -> b(q mod k)`` and a topic grown
after a broker joined fills the newcomer first.
"""

from __future__ import annotations

from collections.abc import Sequence

from cluster.errors import InvalidPlacement, NoLiveBroker
from store import MAX_QUEUES_PER_TOPIC, InvalidArgument, validate_topic


def grow_placement(current: Sequence[str], queues: int, candidates: Sequence[str]) -> tuple[str, ...]:
    """The owners of ``queues`` queue ids, keeping ``current`` and placing the new ids on
    ``candidates``. A request for fewer queues than exist returns ``current`` (topics never
    shrink). Raises :class:`InvalidPlacement` for a bad count or when ids must be placed and
    there is no candidate."""
    if not 1 <= queues <= MAX_QUEUES_PER_TOPIC:
        raise InvalidPlacement(f"queue count must be in [1, {MAX_QUEUES_PER_TOPIC}], got {queues}")
    owners = list(current)
    if queues <= len(owners):
        return tuple(owners)
    names = sorted(set(candidates))
    if not names:
        raise NoLiveBroker("no live broker to place the new queues on")
    load = dict.fromkeys(names, 0)
    for owner in owners:
        if owner in load:
            load[owner] += 1
    while len(owners) < queues:
        chosen = min(names, key=lambda name: (load[name], names.index(name)))
        owners.append(chosen)
        load[chosen] += 1
    return tuple(owners)


def check_pinned(pinned: Sequence[str], known: Sequence[str], live: Sequence[str]) -> list[str]:
    """The brokers a request pins new queues to, checked: each must be known and alive."""
    if not pinned:
        raise InvalidPlacement("'brokers' must name at least one broker")
    unknown = sorted(set(pinned) - set(known))
    if unknown:
        raise InvalidPlacement(f"unknown broker(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    dead = sorted(set(pinned) - set(live))
    if dead:
        raise InvalidPlacement(f"broker(s) {', '.join(dead)} are not alive; new queues need a live broker")
    return sorted(set(pinned))


def validate_routed(topic: str) -> None:
    """A name the cluster places: a user topic, or a group's retry or dead-letter topic."""
    validate_topic(topic, allow_system=topic.startswith(("%RETRY%", "%DLQ%")))


def placeable(topic: str) -> bool:
    """Whether the cluster may place ``topic`` (else it is refused, or a broker's own system topic)."""
    try:
        validate_routed(topic)
    except InvalidArgument:
        return False
    return True
