"""Values that cross the store's public API: messages in, results out.

Expected outcomes are statuses on result values (:class:`GetStatus`), never exceptions.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from store.services import ServiceHealth

#: ``offset_for_timestamp`` boundary (RocketMQ ``BoundaryType``).


class Boundary(enum.Enum):
    #: Leftmost offset whose store timestamp >= T (max offset when T is after the last message).
    LOWER = "lower"
    #: Last offset whose store timestamp <= T.
    UPPER = "upper"


class GetStatus(enum.Enum):
    """Outcome of a read (RocketMQ ``GetMessageStatus``)."""

    FOUND = "FOUND"
    #: offset == max offset: nothing new yet.
    NO_NEW_MESSAGE = "NO_NEW_MESSAGE"
    #: Units were read but all were filtered out by the tag expression; next_offset moved on.
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    #: offset < min offset (retention removed it); next_offset = min offset.
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    #: offset > max offset; next_offset = max offset.
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    #: The queue has no message at all (and offset != 0).
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    #: The topic or queue does not exist.
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"


@dataclass(slots=True)
class Message:
    """A message as a producer hands it to the store.

    ``keys`` become the ``KEYS`` property (space-separated) and are indexed; ``tags`` the
    ``TAGS`` property (its Java hashCode is the ConsumeQueue tagsCode). ``queue_id=None``
    lets the store pick a queue (round robin per topic). ``delay_level`` 1-18 (larger clamps
    to 18) parks the message in ``SCHEDULE_TOPIC_XXXX``; ``transaction_prepared`` stores it
    as a half message in ``RMQ_SYS_TRANS_HALF_TOPIC``. ``uniq_key`` is generated when absent.
    """

    topic: str
    body: bytes
    tags: str | None = None
    keys: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    queue_id: int | None = None
    flag: int = 0
    delay_level: int = 0
    transaction_prepared: bool = False
    born_timestamp_ms: int | None = None
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    uniq_key: str | None = None


@dataclass(frozen=True, slots=True)
class PutResult:
    """Where one message landed."""

    msg_id: str  # offsetMsgId: 32 hex chars = store IPv4 + port + commitlog offset
    uniq_key: str
    topic: str  # the topic actually written (SCHEDULE_TOPIC_XXXX for delayed messages)
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    store_timestamp_ms: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class MessageView:
    """A stored message decoded from the CommitLog (body already decompressed)."""

    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    size_bytes: int
    msg_id: str
    body: bytes
    flag: int
    sys_flag: int
    born_timestamp_ms: int
    born_host: tuple[str, int]
    store_timestamp_ms: int
    store_host: tuple[str, int]
    reconsume_times: int
    prepared_transaction_offset: int
    properties: dict[str, str]
    body_crc: int

    @property
    def tags(self) -> str | None:
        return self.properties.get("TAGS")

    @property
    def keys(self) -> list[str]:
        raw = self.properties.get("KEYS")
        return raw.split(" ") if raw else []

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get("UNIQ_KEY")


@dataclass(frozen=True, slots=True)
class GetResult:
    """Result of :meth:`MessageStore.get_messages`."""

    status: GetStatus
    next_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageView] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class StoreStats:
    messages_put: int
    bytes_put: int
    commitlog_min_offset: int
    commitlog_max_offset: int
    commitlog_flushed_offset: int
    #: CommitLog bytes written but not yet in the key index.
    index_dispatch_lag_bytes: int
    #: (topic, queue id) -> max offset, for every queue with a ConsumeQueue.
    queue_max_offsets: dict[tuple[str, int], int]


@dataclass(frozen=True, slots=True)
class StoreHealth:
    """What :meth:`MessageStore.health` found: ``ok`` unless a background service is failing."""

    ok: bool
    services: tuple[ServiceHealth, ...]

    def failing(self) -> list[ServiceHealth]:
        return [s for s in self.services if not s.ok]


@dataclass(frozen=True)
class StoreVerification:
    """What :meth:`MessageStore.verify` found walking the CommitLog."""

    records: int
    first_offset: int
    #: Where the walk stopped: ``max_offset`` when every record checked out.
    valid_end_offset: int
    max_offset: int

    @property
    def ok(self) -> bool:
        return self.valid_end_offset == self.max_offset
