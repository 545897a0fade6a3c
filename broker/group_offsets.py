"""A group's committed offsets for doors whose consumers keep them at the broker (RocketMQ's
QUERY/UPDATE_CONSUMER_OFFSET, a pull's commit offset): the store's group offset table, which
HTTP, Kafka and the Spark mirror share, behind the one group-kind rule (a POP group's offsets
are the POP service's: an offset read or commit for it is refused with
:class:`broker.pop.GroupKindConflict`).
"""

from __future__ import annotations

from broker.pop import GroupKind
from broker.state import Broker
from broker.threads import run_blocking


def check_offset_group(broker: Broker, group: str) -> None:
    """Refuse an offset read or commit for a POP group (``GroupKindConflict``)."""
    if broker.pop is not None:
        broker.pop.check_group_kind(group, GroupKind.OFFSET)


def committed_offset(broker: Broker, group: str, topic: str, queue_id: int) -> int:
    """The group's committed offset of the queue, -1 when none (never blocks on I/O)."""
    check_offset_group(broker, group)
    return broker.store.committed_offset(group, topic, queue_id)


async def commit_offset(broker: Broker, group: str, topic: str, queue_id: int, offset: int) -> None:
    """Commit the group's next-to-consume offset of the queue (worker thread)."""
    check_offset_group(broker, group)
    await run_blocking(broker.store.commit_offsets, group, topic, {queue_id: offset})
