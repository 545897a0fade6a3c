"""From a producer's :class:`~store.types.Message` to the record the CommitLog stores.

Pure functions (no I/O; the clock is an argument): validation, the ``KEYS``/``TAGS``/``UNIQ_KEY`` properties,
and RocketMQ's two topic rewrites:

* a message with a delay level 1-18 (larger clamps to 18) goes to ``SCHEDULE_TOPIC_XXXX``
  queue ``level-1`` with ``REAL_TOPIC``/``REAL_QID``/``DELAY``; its ConsumeQueue tagsCode is
  the deliver timestamp (see :func:`tags_codes_for`);
* a timer message (``TIMER_DELAY_SEC`` / ``TIMER_DELAY_MS`` / ``TIMER_DELIVER_MS``, see
  :mod:`store.write.timers`) due in the future goes to ``rmq_sys_wheel_timer`` queue 0 with
  ``TIMER_OUT_MS``/``REAL_TOPIC``/``REAL_QID``; one due already is stored as it is;
* a prepared transactional message goes to ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 with
  ``REAL_TOPIC``/``REAL_QID``/``TRAN_MSG``/``__transactionId__`` and its transaction type reset
  to NOT_TYPE so that it is dispatched to the half topic's own ConsumeQueue.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from store.errors import InvalidArgument
from store.format.java_hash import java_string_hash
from store.format.record import BodyPolicy, RecordFields, prepare_body
from store.format.vocabulary import (
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_UNIQ_KEY,
)
from store.names import SCHEDULE_TOPIC, TIMER_TOPIC, TRANS_HALF_TOPIC
from store.types import Message
from store.write.delay_levels import clamp_delay_level
from store.write.timers import (
    DEFAULT_TIMER_RULES,
    TimerRules,
    admit_timer,
    is_timer_request,
    without_timer_requests,
)
from store.write.transactions import half_properties

MAX_KEY_CHARS = 4096


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a message is written: the stored topic/queue and its real destination."""

    topic: str
    queue_id: int
    real_topic: str
    real_queue_id: int
    #: ``TIMER_OUT_MS`` of a parked timer message.
    timer_out_ms: int | None = None


def validate_message(msg: Message) -> None:
    """Field checks that do not need the store (sizes are checked by the body policy)."""
    if not isinstance(msg.body, bytes | bytearray | memoryview):
        raise InvalidArgument(f"body must be bytes, got {type(msg.body).__name__}")
    if msg.tags is not None and (msg.tags == "" or "||" in msg.tags or msg.tags.strip() != msg.tags):
        raise InvalidArgument(f"bad tag {msg.tags!r}: tags are non-empty, without '||' or edge spaces")
    for key in msg.keys:
        if not key or " " in key or len(key) > MAX_KEY_CHARS:
            raise InvalidArgument(
                f"bad key {key!r}: keys are non-empty, without spaces, <= {MAX_KEY_CHARS} chars"
            )
    if msg.delay_level < 0:
        raise InvalidArgument(f"delay_level must be >= 0, got {msg.delay_level}")
    if not 0 <= msg.reconsume_times < 2**31:
        raise InvalidArgument(f"reconsume_times out of range: {msg.reconsume_times}")
    if not -(2**31) <= msg.flag < 2**31:
        raise InvalidArgument(f"flag must fit in an int32, got {msg.flag}")


def place(
    msg: Message,
    queue_id: int,
    delay_levels: tuple[int, ...],
    *,
    now_ms: int,
    timers: TimerRules = DEFAULT_TIMER_RULES,
) -> Placement:
    """Apply the delay / timer / half-message topic rewrites (RocketMQ ``HookUtils``)."""
    if msg.transaction_prepared:
        return Placement(TRANS_HALF_TOPIC, 0, msg.topic, queue_id)
    level = clamp_delay_level(msg.delay_level, delay_levels)
    if level > 0:
        return Placement(SCHEDULE_TOPIC, level - 1, msg.topic, queue_id)
    if msg.topic != TIMER_TOPIC and is_timer_request(msg.properties):
        out_ms = admit_timer(msg.properties, now_ms, timers)
        if out_ms is not None:
            return Placement(TIMER_TOPIC, 0, msg.topic, queue_id, out_ms)
    return Placement(msg.topic, queue_id, msg.topic, queue_id)


def parked_topic(msg: Message, delay_levels: tuple[int, ...]) -> str:
    """Where ``msg`` would be parked if it had to wait (a timer due already is not: the caller
    also looks in the real topic)."""
    if msg.transaction_prepared:
        return TRANS_HALF_TOPIC
    if clamp_delay_level(msg.delay_level, delay_levels) > 0:
        return SCHEDULE_TOPIC
    if msg.topic != TIMER_TOPIC and is_timer_request(msg.properties):
        return TIMER_TOPIC
    return msg.topic


def build_properties(
    msg: Message, placement: Placement, uniq_key: str, delay_levels: tuple[int, ...]
) -> dict[str, str]:
    """User properties plus the system ones, in a stable order (user first)."""
    props: dict[str, str] = dict(msg.properties)
    if placement.topic == SCHEDULE_TOPIC:
        props = without_timer_requests(props)  # a delay level wins (RocketMQ clears them)
    props[PROPERTY_UNIQ_KEY] = uniq_key
    if msg.keys:
        props[PROPERTY_KEYS] = " ".join(msg.keys)
    if msg.tags:
        props[PROPERTY_TAGS] = msg.tags
    if placement.timer_out_ms is not None:
        props[PROPERTY_TIMER_OUT_MS] = str(placement.timer_out_ms)
    if placement.topic != msg.topic:
        props[PROPERTY_REAL_TOPIC] = placement.real_topic
        props[PROPERTY_REAL_QID] = str(placement.real_queue_id)
    if placement.topic == SCHEDULE_TOPIC:
        props[PROPERTY_DELAY] = str(placement.queue_id + 1)
    if placement.topic == TRANS_HALF_TOPIC:
        # RocketMQ: the transaction id is the half's UNIQ_KEY; the halves of one multi-message
        # transaction carry its first message's (set by the caller, like PGROUP).
        half = half_properties(placement.real_topic, str(placement.real_queue_id), uniq_key)
        for name, value in half.items():
            props.setdefault(name, value)
    return props


def build_record(
    msg: Message,
    placement: Placement,
    uniq_key: str,
    *,
    policy: BodyPolicy,
    delay_levels: tuple[int, ...],
    born_timestamp_ms: int,
    store_host: tuple[str, int],
) -> RecordFields:
    """The :class:`RecordFields` to encode (queue offset, physical offset and store timestamp
    are patched in under the put lock)."""
    stored, compression_bits = prepare_body(bytes(msg.body), policy)
    return RecordFields(
        topic=placement.topic,
        body=stored,
        queue_id=placement.queue_id,
        flag=msg.flag,
        properties=build_properties(msg, placement, uniq_key, delay_levels),
        sys_flag=compression_bits,
        born_timestamp_ms=born_timestamp_ms if msg.born_timestamp_ms is None else msg.born_timestamp_ms,
        born_host=msg.born_host,
        store_host=store_host,
        reconsume_times=msg.reconsume_times,
    )


def tags_codes_for(
    topics: tuple[str, ...],
    topic_codes: npt.NDArray[np.int32],
    queue_ids: npt.NDArray[np.int32],
    store_timestamps_ms: npt.NDArray[np.int64],
    tags_hashes: npt.NDArray[np.int64],
    delay_levels: tuple[int, ...],
) -> npt.NDArray[np.int64]:
    """ConsumeQueue tagsCodes of a batch: the TAGS hashCode, except in SCHEDULE_TOPIC_XXXX
    where it is the deliver timestamp (store time + the delay of the queue's level)."""
    if SCHEDULE_TOPIC not in topics:
        return tags_hashes
    rows = topic_codes == topics.index(SCHEDULE_TOPIC)
    delays = np.asarray(delay_levels, dtype=np.int64)
    level_index = np.clip(queue_ids[rows], 0, len(delays) - 1)
    codes = tags_hashes.copy()
    codes[rows] = store_timestamps_ms[rows] + delays[level_index]
    return codes


def tags_hashes_of(tags: Sequence[str | None]) -> npt.NDArray[np.int64]:
    """Java hashCode of each TAGS value (0 without tags)."""
    distinct = {t for t in tags if t}
    if not distinct:
        return np.zeros(len(tags), dtype=np.int64)
    if len(distinct) == 1 and all(tags):
        return np.full(len(tags), java_string_hash(next(iter(distinct))), dtype=np.int64)
    table = {t: java_string_hash(t) for t in distinct}
    return np.fromiter((table[t] if t else 0 for t in tags), dtype=np.int64, count=len(tags))
