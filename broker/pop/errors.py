"""Faults of POP consumption, each with a stable ``code`` the doors map to an answer.

Every error is raised before any state changes: a refused call leaves the table and the state
topic as they were.
"""

from __future__ import annotations

from store import SparkMQError


class PopError(SparkMQError):
    code = "pop_error"


class InvalidReceiptHandle(PopError):
    """Malformed, or not signed by this broker (forged or altered). HTTP 400 / gRPC 40013."""

    code = "invalid_receipt_handle"


class ReceiptHandleExpired(PopError):
    """A well-formed handle that no longer names the message's current delivery: it was acked,
    its invisible time was changed (a new handle replaced it), it was redelivered or dead
    lettered. HTTP 409."""

    code = "receipt_handle_expired"


class ReceiptHandleMismatch(PopError):
    """A valid handle presented for another group or topic than the one it was issued for."""

    code = "receipt_handle_mismatch"


class InvalidMaxMessages(PopError):
    code = "invalid_max_messages"


class InvalidInvisibleTime(PopError):
    code = "invalid_invisible_time"


class InvalidWaitTime(PopError):
    code = "invalid_wait_time"


class InvalidGroupSettings(PopError):
    code = "invalid_group_settings"


class GroupKindConflict(PopError):
    """The group is consumed by offsets (Spark, pull) and a POP call came, or the reverse."""

    code = "group_kind_conflict"
