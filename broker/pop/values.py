"""Values the POP service answers with (expected outcomes are values; faults are errors)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from store import MessageView


class GroupKind(enum.Enum):
    #: Consumed by receive / ack (this service).
    POP = "pop"
    #: Consumed by offsets (Spark, HTTP pull, Kafka): committed offsets in the store's table.
    OFFSET = "offset"


@dataclass(frozen=True, slots=True)
class Received:
    """One message handed out: ack it with ``receipt_handle`` before ``invisible_until_ms``."""

    message: MessageView
    receipt_handle: str
    #: 1 on the first delivery, + 1 on each redelivery.
    delivery_attempt: int
    invisible_until_ms: int


@dataclass(frozen=True, slots=True)
class AckResult:
    """The outcome of one handle of an ack: ``ok``, or the error ``code`` it would raise."""

    receipt_handle: str
    ok: bool
    code: str | None = None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class GroupStats:
    """What the console shows of a POP group (counters since this service opened)."""

    group: str
    inflight: int
    #: In flight and past their invisible time: waiting for a receive (or the DLQ).
    visible_again: int
    #: Age of the oldest current delivery, ms (0 with nothing in flight).
    oldest_inflight_age_ms: int
    redeliveries: int
    dead_letters: int
    #: The topics the group has received from (sorted).
    topics: tuple[str, ...] = ()
