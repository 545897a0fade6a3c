"""Offset-based consumption of a group: the one commit and read of its offsets, with the
group-kind rule.

A group is consumed either by POP (receive / ack, :mod:`broker.pop`) or by offsets (Spark, HTTP
pull with committed offsets, Kafka clients); mixing them would make each side skip or repeat
what the other did. Every offset commit and read of the broker core goes through here, so a
POP group's commit is refused (``group_kind_conflict``, 409) whichever door it came through;
the reverse (a POP receive on a group with committed offsets) is refused by the POP service.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from broker.pop import GroupKind, PopService
from broker.state import Broker
from broker.threads import run_blocking


class OffsetStore(Protocol):
    """What an offset commit needs of the store (``MessageStore``, or a door's view of it)."""

    def commit_offsets(self, group: str, topic: str, offsets: Mapping[int, int]) -> None: ...
    def committed_offsets(self, group: str, topic: str) -> dict[int, int]: ...


def check_offset_group(store: Any, group: str) -> None:
    """Raise :class:`broker.pop.GroupKindConflict` if ``group`` is a POP group of ``store``."""
    pop = PopService.of(store)
    if pop is not None:
        pop.check_group_kind(group, GroupKind.OFFSET)


def commit_offsets(store: OffsetStore, group: str, topic: str, offsets: Mapping[int, int]) -> None:
    """Commit next-to-consume offsets (blocking; the store's errors, or the group-kind refusal
    before anything is written)."""
    check_offset_group(store, group)
    store.commit_offsets(group, topic, offsets)


def committed_offsets(store: OffsetStore, group: str, topic: str) -> dict[int, int]:
    """Queue id -> committed offset of an offset-based group (refuses a POP group)."""
    check_offset_group(store, group)
    return store.committed_offsets(group, topic)


def committed_offset(broker: Broker, group: str, topic: str, queue_id: int) -> int:
    """The group's committed offset of one queue, -1 when none (never blocks on I/O): RocketMQ's
    QUERY_CONSUMER_OFFSET and a pull's commit offset."""
    check_offset_group(broker.store, group)
    return broker.store.committed_offset(group, topic, queue_id)


async def commit_offset(broker: Broker, group: str, topic: str, queue_id: int, offset: int) -> None:
    """Commit the group's next-to-consume offset of one queue (in a worker thread)."""
    await run_blocking(commit_offsets, broker.store, group, topic, {queue_id: offset})
