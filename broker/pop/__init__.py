"""POP consumption (RocketMQ 5): competing consumers with receive, ack, invisible time,
redelivery and dead letters, its state kept in the CommitLog (docs/pop.md).

The doors (HTTP, gRPC) call :class:`PopService`; they map each error's ``code`` to an answer.
"""

from broker.pop.config import MAX_MESSAGES_PER_RECEIVE, PopConfig
from broker.pop.errors import (
    GroupKindConflict,
    InvalidGroupSettings,
    InvalidInvisibleTime,
    InvalidMaxMessages,
    InvalidReceiptHandle,
    InvalidWaitTime,
    PopError,
    ReceiptHandleExpired,
    ReceiptHandleMismatch,
)
from broker.pop.service import PopService
from broker.pop.state_codec import GroupSettings
from broker.pop.values import AckResult, GroupKind, GroupStats, Received

__all__ = [
    "MAX_MESSAGES_PER_RECEIVE",
    "AckResult",
    "GroupKind",
    "GroupKindConflict",
    "GroupSettings",
    "GroupStats",
    "InvalidGroupSettings",
    "InvalidInvisibleTime",
    "InvalidMaxMessages",
    "InvalidReceiptHandle",
    "InvalidWaitTime",
    "PopConfig",
    "PopError",
    "PopService",
    "ReceiptHandleExpired",
    "ReceiptHandleMismatch",
    "Received",
]
