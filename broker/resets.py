"""Consumer-group offset resets as a plan first: per queue the current and the target offset.

``plan_reset`` only reads; ``apply_reset`` commits a plan. The HTTP route (dry run or not),
the console's dry-run diff and the CLI's ``groups reset`` all go through these two, so a
preview shows exactly what an execute would commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from broker.errors import BrokerError
from broker.offsets import check_offset_group, commit_offsets
from store import Boundary, InvalidArgument, MessageStore, UnknownTopic, validate_group, validate_topic

ResetTarget = Literal["earliest", "latest", "timestamp", "shift"]


@dataclass(frozen=True)
class ResetRow:
    queue_id: int
    #: The committed offset now; -1 where the group never committed.
    current: int
    target: int
    min_offset: int
    max_offset: int

    @property
    def change(self) -> int:
        """Messages the group will re-read (negative) or skip (positive)."""
        start = self.current if self.current >= 0 else self.min_offset
        return self.target - start


def plan_reset(
    store: MessageStore,
    group: str,
    topic: str,
    to: ResetTarget,
    *,
    timestamp_ms: int | None = None,
    shift_by: int | None = None,
    queue_id: int | None = None,
) -> list[ResetRow]:
    """Where each queue of ``topic`` (or just ``queue_id``) would move.

    ``earliest`` / ``latest``: the queue's min / max offset; ``timestamp``: the first message
    stored at or after ``timestamp_ms``; ``shift``: the committed offset (min offset when never
    committed) plus ``shift_by``. Targets are clamped to [min offset, max offset].
    """
    validate_group(group)
    validate_topic(topic)
    check_offset_group(store, group)
    if not store.has_topic(topic):
        raise UnknownTopic(f"topic {topic!r} does not exist")
    if to == "timestamp" and timestamp_ms is None:
        raise InvalidArgument("a reset to a timestamp needs timestamp_ms")
    if to == "shift" and shift_by is None:
        raise InvalidArgument("a shift reset needs shift_by")
    count = store.queue_count(topic)
    if queue_id is not None and not 0 <= queue_id < count:
        raise BrokerError(
            409, "unknown_queue", f"queue {queue_id} does not exist; topic {topic!r} has {count} queues"
        )
    committed = store.committed_offsets(group, topic)
    rows = []
    for qid in range(count) if queue_id is None else [queue_id]:
        low, high = store.min_offset(topic, qid), store.max_offset(topic, qid)
        current = committed.get(qid, -1)
        if to == "earliest":
            target = low
        elif to == "latest":
            target = high
        elif to == "timestamp":
            assert timestamp_ms is not None
            target = store.offset_for_timestamp(topic, qid, timestamp_ms, Boundary.LOWER)
        else:
            assert shift_by is not None
            target = (current if current >= 0 else low) + shift_by
        rows.append(ResetRow(qid, current, min(max(target, low), high), low, high))
    return rows


def apply_reset(store: MessageStore, group: str, topic: str, rows: list[ResetRow]) -> None:
    """Commit every row's target offset."""
    commit_offsets(store, group, topic, {row.queue_id: row.target for row in rows})
