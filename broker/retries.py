"""Consumer send-back (the retry ladder) and dead letters, broker side.

* :class:`GroupConfigs`: ``config/groupConfigs.json``, a consumer group's ``max_reconsume_times``
  (RocketMQ ``retryMaxTimes``, default 16) and ``retry_queues`` (``retryQueueNums``, default 1).
* :func:`send_back`: finds the message (offsetMsgId, or UNIQ_KEY in the group's retry topic then
  in the topic), creates ``%RETRY%group`` / ``%DLQ%group`` as RocketMQ does, and stores a
  send-back request (:mod:`store.write.sendback`). The retry resolver accepts one request per
  attempt and the broker relocates it into the ladder or the DLQ, exactly once.
* :func:`resend_dead_letter`: a dead letter back to its original topic (``RETRY_TOPIC``), as a
  new message with the same UNIQ_KEY, body, tags, keys and user properties.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from store import (
    DEFAULT_MAX_RECONSUME_TIMES,
    LADDER_BASE_LEVEL,
    SENDBACK_TOPIC,
    SYSTEM_PROPERTIES,
    EncodedRecords,
    GatheredRecords,
    InvalidArgument,
    Message,
    MessageStore,
    MessageView,
    ProducerRef,
    PutResult,
    SparkMQError,
    UnknownTopic,
    decode_msg_id,
    dlq_topic,
    read_json,
    request_uniq_keys,
    retry_topic,
    sendback_request,
    sendback_requests,
    validate_group,
    validate_topic,
    write_json_atomically,
)

GROUP_CONFIGS_FILE = "groupConfigs.json"
#: Properties the broker adds on the way through the ladder; a resent dead letter drops them.
_LADDER_PROPERTIES = {
    "RETRY_TOPIC",
    "ORIGIN_MESSAGE_ID",
    "DELAY",
    "REAL_TOPIC",
    "REAL_QID",
    "UNIQ_KEY",
    "KEYS",
    "TAGS",
}


class UnknownMessage(SparkMQError):
    code = "unknown_message"


class UnknownGroup(SparkMQError):
    code = "unknown_group"


class GroupConfigs:
    def __init__(self, config_dir: Path) -> None:
        self.path = config_dir / GROUP_CONFIGS_FILE
        self._groups: dict[str, dict[str, int]] = dict((read_json(self.path) or {}).get("groups", {}))

    def get(self, group: str) -> dict[str, int] | None:
        return self._groups.get(group)

    def put(self, group: str, max_reconsume_times: int | None, retry_queues: int | None) -> dict[str, int]:
        validate_group(group)
        current = dict(self._groups.get(group, {}))
        if max_reconsume_times is not None:
            current["max_reconsume_times"] = max_reconsume_times
        if retry_queues is not None:
            current["retry_queues"] = retry_queues
        current.setdefault("max_reconsume_times", DEFAULT_MAX_RECONSUME_TIMES)
        current.setdefault("retry_queues", 1)
        self._groups[group] = current
        write_json_atomically(self.path, {"groups": self._groups})
        return current


@dataclass(frozen=True)
class SendBack:
    group: str
    topic: str
    msg_id: str
    uniq_key: str | None
    request_id: str
    attempt: int
    outcome: str  # "retry" or "dlq"
    delay_level: int
    target_topic: str


def _find(store: MessageStore, group: str, topic: str, msg_id: str) -> MessageView:
    retry = retry_topic(group)
    if len(msg_id) == 32:
        try:
            view = store.get_by_msg_id(msg_id)
        except (InvalidArgument, ValueError):
            view = None
        if view is not None and view.msg_id.upper() != msg_id.upper():
            view = None  # that offset here holds another broker's message id (a cluster)
        if view is not None:
            if view.topic not in (topic, retry):
                raise UnknownMessage(f"message {msg_id} is in topic {view.topic!r}, not {topic!r}")
            return view
    for where in (retry, topic):
        if store.has_topic(where):
            found = store.get_by_uniq_key(where, msg_id)
            if found is not None:
                return found
    raise UnknownMessage(f"no message {msg_id!r} (offsetMsgId or UNIQ_KEY) in topic {topic!r} or {retry!r}")


def _find_each(store: MessageStore, group: str, items: Sequence[SendBackItem]) -> list[MessageView]:
    """Every item's message (``UnknownMessage`` naming the first item not found)."""
    views = []
    for i, item in enumerate(items):
        try:
            views.append(_find(store, group, item.topic, item.msg_id))
        except UnknownMessage as exc:
            raise UnknownMessage(f"messages[{i}]: {exc}") from None
    return views


def holds(store: MessageStore, group: str, topic: str, msg_id: str) -> bool:
    """Whether this store holds the message a send-back names (by offsetMsgId or UNIQ_KEY)."""
    try:
        _find(store, group, topic, msg_id)
    except UnknownMessage:
        return False
    return True


@dataclass(frozen=True)
class SendBackItem:
    """One message to send back: ``msg_id`` is its offsetMsgId or UNIQ_KEY in ``topic``."""

    topic: str
    msg_id: str
    delay_level: int = 0
    max_reconsume_times: int | None = None


#: Requests of at most this many items are built record by record.
SMALL_BATCH = 8


#: In a cluster: ``own_queues(topic, count)`` gives this broker's queue ids of the group's retry
#: or DLQ topic, placing ``count`` of them here first when it has none (they are consecutive).
OwnQueues = Callable[[str, int], Sequence[int]]


def _placed_here(
    store: MessageStore, group: str, queues: int, own_queues: OwnQueues | None
) -> tuple[int, int, int]:
    """``(retry queues, first retry queue id, DLQ queue id)`` of this broker, the topics created
    (a lone broker: ``queues`` ids from 0, DLQ queue 0)."""
    if own_queues is None:
        for name, count in ((retry_topic(group), queues), (dlq_topic(group), 1)):
            if not store.has_topic(name):
                store.create_topic(name, count)
        return queues, 0, 0
    retry_ids = sorted(own_queues(retry_topic(group), queues))
    dlq_ids = sorted(own_queues(dlq_topic(group), 1))
    return len(retry_ids), retry_ids[0], dlq_ids[0]


def send_back(
    store: MessageStore,
    configs: GroupConfigs,
    group: str,
    topic: str,
    msg_id: str,
    *,
    delay_level: int = 0,
    max_reconsume_times: int | None = None,
    producer: ProducerRef | None = None,
    own_queues: OwnQueues | None = None,
) -> SendBack:
    """Send one message back (:func:`send_back_many` of one)."""
    item = SendBackItem(topic, msg_id, delay_level, max_reconsume_times)
    return send_back_many(store, configs, group, [item], producer=producer, own_queues=own_queues)[0]


def send_back_many(
    store: MessageStore,
    configs: GroupConfigs,
    group: str,
    items: Sequence[SendBackItem],
    *,
    producer: ProducerRef | None = None,
    own_queues: OwnQueues | None = None,
) -> list[SendBack]:
    """Store one send-back request per item, all in one atomic append (all or none: a refused
    item names its index). With ``producer`` (an ``Idempotency-Key``) a retried request stores
    nothing new. Lookups by offsetMsgId decode the CommitLog offset; a UNIQ_KEY is looked up in
    the group's retry topic, then in the topic. The request records are built column by column
    (:func:`store.write.sendback.sendback_requests`)."""
    validate_group(group)
    if not items:
        raise InvalidArgument("no message to send back")
    for i, item in enumerate(items):
        _check_item(store, i, item)
    config = configs.get(group)
    if config is None and own_queues is None and group not in store.groups():
        raise UnknownGroup(f"consumer group {group!r} is unknown (no offsets, no PUT /groups/{group})")
    default_max = (config or {}).get("max_reconsume_times", DEFAULT_MAX_RECONSUME_TIMES)
    maximums = [default_max if it.max_reconsume_times is None else it.max_reconsume_times for it in items]
    # The messages are found (read once) before this broker claims queues of the group's retry
    # and DLQ topics: in a cluster, a broker that holds none of them forwards and places nothing.
    small = len(items) <= SMALL_BATCH
    views = _find_each(store, group, items) if small else None
    found = None if small else _sources(store, group, items)
    queues, retry_base, dlq_queue = _placed_here(
        store, group, (config or {}).get("retry_queues", 1), own_queues
    )
    if views is not None:
        return _send_back_each(
            store, group, items, maximums, (queues, retry_base, dlq_queue), producer, views
        )
    assert found is not None
    request_ids = (
        request_uniq_keys(producer, len(items)) if producer is not None else store.new_uniq_keys(len(items))
    )
    built = sendback_requests(
        found.buffer,
        found.starts,
        group=group,
        delay_levels=[it.delay_level for it in items],
        max_reconsume_times=maximums,
        retry_queues=queues,
        uniq_keys=request_ids,
        born_ms=store.now_ms(),
        store_host=(store.config.store_host, store.config.store_port),
        retry_queue_base=retry_base,
        dlq_queue_id=dlq_queue,
    )
    for i, (item, stored_topic) in enumerate(zip(items, built.topics, strict=True)):
        if stored_topic not in (item.topic, retry_topic(group)):
            raise UnknownMessage(
                f"messages[{i}]: message {item.msg_id} is in topic {stored_topic!r}, not {item.topic!r}"
            )
    # One append per request: if its first record is there, a retry of the request finds all.
    if producer is None or store.get_by_uniq_key(SENDBACK_TOPIC, request_ids[0]) is None:
        store.append_encoded(EncodedRecords.of_batch(built.records, SENDBACK_TOPIC))
    levels, targets = len(store.delay_levels), (retry_topic(group), dlq_topic(group))
    return [
        _answer(group, item, built.msg_ids[i], built.uniq_keys[i], request_ids[i], int(built.attempts[i]),
                maximums[i], levels, targets)
        for i, item in enumerate(items)
    ]  # fmt: skip


def _send_back_each(
    store: MessageStore,
    group: str,
    items: Sequence[SendBackItem],
    maximums: list[int],
    placed: tuple[int, int, int],
    producer: ProducerRef | None,
    views: list[MessageView],
) -> list[SendBack]:
    """:func:`send_back_many` for a few items, record by record (no Arrow kernel's fixed cost):
    the same records, one append."""
    raws = [store.read_record(v.commitlog_offset) for v in views]
    for i, raw in enumerate(raws):
        if raw is None:
            raise UnknownMessage(f"messages[{i}]: message {items[i].msg_id!r} is gone (retention)")
    queues, retry_base, dlq_queue = placed
    request_ids = (
        request_uniq_keys(producer, len(items)) if producer is not None else store.new_uniq_keys(len(items))
    )
    if producer is None or store.get_by_uniq_key(SENDBACK_TOPIC, request_ids[0]) is None:
        host = (store.config.store_host, store.config.store_port)
        store.append_records(
            [
                sendback_request(
                    raw,
                    group=group,
                    delay_level=item.delay_level,
                    max_reconsume_times=maximum,
                    retry_queues=queues,
                    uniq_key=key,
                    born_ms=store.now_ms(),
                    store_host=host,
                    retry_queue_base=retry_base,
                    dlq_queue_id=dlq_queue,
                )
                for raw, item, maximum, key in zip(raws, items, maximums, request_ids, strict=True)
                if raw is not None
            ]
        )
    levels, targets = len(store.delay_levels), (retry_topic(group), dlq_topic(group))
    return [
        _answer(group, item, view.msg_id, view.uniq_key, key, view.reconsume_times, maximum, levels, targets)
        for item, view, maximum, key in zip(items, views, maximums, request_ids, strict=True)
    ]


def _answer(
    group: str,
    item: SendBackItem,
    msg_id: str,
    uniq_key: str | None,
    request_id: str,
    times: int,
    maximum: int,
    levels: int,
    targets: tuple[str, str],
) -> SendBack:
    """One item's answer; ``targets``: the group's retry and DLQ topics."""
    to_dlq = times >= maximum or item.delay_level < 0
    level = 0 if to_dlq else min(item.delay_level or LADDER_BASE_LEVEL + times, levels)
    return SendBack(
        group=group,
        topic=item.topic,
        msg_id=msg_id,
        uniq_key=uniq_key,
        request_id=request_id,
        attempt=times,
        outcome="dlq" if to_dlq else "retry",
        delay_level=level,
        target_topic=targets[1] if to_dlq else targets[0],
    )


def _check_item(store: MessageStore, index: int, item: SendBackItem) -> None:
    try:
        validate_topic(item.topic)
        if item.delay_level < -1:
            raise InvalidArgument(
                f"delay_level must be -1 (the DLQ), 0 (the ladder) or a level >= 1, got {item.delay_level}"
            )
        if item.max_reconsume_times is not None and not 0 <= item.max_reconsume_times <= 10_000:
            raise InvalidArgument(
                f"max_reconsume_times must be in [0, 10000], got {item.max_reconsume_times}"
            )
    except InvalidArgument as exc:
        raise InvalidArgument(f"messages[{index}]: {exc}") from None
    if not store.has_topic(item.topic):
        raise UnknownTopic(f"messages[{index}]: topic {item.topic!r} does not exist")


def _sources(store: MessageStore, group: str, items: Sequence[SendBackItem]) -> GatheredRecords:
    """The records the items name, read in one pass. An offsetMsgId is decoded (no lookup) and
    taken when a record of the item's topic (or the group's retry topic) starts there; anything
    else is looked up as a UNIQ_KEY (a UNIQ_KEY is 32 hex characters too)."""
    offsets = [_decoded_offset(item.msg_id) for item in items]
    found = store.read_records([o if o is not None else 0 for o in offsets])
    topics, physical = found.headlines()
    at = dict(zip(found.rows.tolist(), range(found.present), strict=True))
    retry = retry_topic(group)
    redo = False
    for i, item in enumerate(items):
        j = at.get(i)
        ok = offsets[i] is not None and j is not None and topics[j] in (item.topic, retry)
        if not ok or j is None or int(physical[j]) != offsets[i]:
            try:
                offsets[i] = _find(store, group, item.topic, item.msg_id).commitlog_offset
            except UnknownMessage as exc:
                raise UnknownMessage(f"messages[{i}]: {exc}") from None
            redo = True
    if redo:
        found = store.read_records([o if o is not None else 0 for o in offsets])
    if found.present < len(items):
        missing = sorted(set(range(len(items))) - set(found.rows.tolist()))[0]
        raise UnknownMessage(f"messages[{missing}]: message {items[missing].msg_id!r} is gone (retention)")
    return found


def _decoded_offset(msg_id: str) -> int | None:
    if len(msg_id) != 32:
        return None
    try:
        return decode_msg_id(msg_id)[1]
    except InvalidArgument:
        return None


def resend_dead_letter(store: MessageStore, group: str, msg_id: str) -> PutResult:
    """Produce a dead letter again to its original topic (a new message, same UNIQ_KEY)."""
    validate_group(group)
    dlq = dlq_topic(group)
    view = _find_in(store, dlq, msg_id)
    original = view.properties.get("RETRY_TOPIC")
    if not original or not store.has_topic(original):
        raise UnknownTopic(f"the dead letter's original topic {original!r} does not exist")
    user = {
        k: v for k, v in view.properties.items() if k not in SYSTEM_PROPERTIES and k not in _LADDER_PROPERTIES
    }
    message = Message(
        topic=original,
        body=view.body,
        tags=view.tags,
        keys=tuple(view.keys),
        properties=user,
        uniq_key=view.uniq_key,
        born_timestamp_ms=store.now_ms(),
    )
    return store.put_messages([message])[0]


def _find_in(store: MessageStore, topic: str, msg_id: str) -> MessageView:
    if not store.has_topic(topic):
        raise UnknownMessage(f"no dead letters: {topic!r} does not exist")
    if len(msg_id) == 32:
        try:
            view = store.get_by_msg_id(msg_id)
        except (InvalidArgument, ValueError):
            view = None
        if view is not None and view.topic == topic:
            return view
    found = store.get_by_uniq_key(topic, msg_id)
    if found is None:
        raise UnknownMessage(f"no message {msg_id!r} in {topic!r}")
    return found
