"""Relocation: the record RocketMQ writes when a parked message comes due (pure, no I/O).

A message parked in ``SCHEDULE_TOPIC_XXXX`` (a delay level) or ``rmq_sys_wheel_timer`` (a
timer message) is delivered by appending a *new* record to its real topic, rebuilt from the
parked record's stored bytes exactly as RocketMQ's ``ScheduleMessageService.messageTimeUp``
and ``TimerMessageStore.convertMessage`` do (docs/operators.md has the field table):

* topic / queue id = ``REAL_TOPIC`` / ``REAL_QID``;
* body (still compressed if it was), flag, sysflag, born timestamp and host, **store host**,
  reconsume times: copied;
* the properties string: copied whole. RocketMQ builds it *before* it clears ``DELAY`` and
  ``REAL_*``, so the delivered bytes keep them, and **UNIQ_KEY** (the client msgId) is kept;
  a timer delivery adds ``TIMER_ENQUEUE_MS`` / ``TIMER_DEQUEUE_MS``;
* tagsCode (recomputed from ``TAGS`` at dispatch), store timestamp, queue offset and CommitLog
  offset are new; ``preparedTransactionOffset`` is 0.

A timer message due beyond the roll window is *rolled*: re-appended to ``rmq_sys_wheel_timer``
with ``TIMER_ROLL_TIMES`` + 1 and the same ``TIMER_OUT_MS`` (RocketMQ's ``MAGIC_ROLL``), so no
pending message depends on a CommitLog file older than the window.
"""

from __future__ import annotations

import enum
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from store.errors import InvalidArgument
from store.format.record import (
    BODY_POS,
    MAGIC_V1,
    PREPARED_TX_OFFSET_POS,
    QUEUE_ID_POS,
    TOPIC_LEN_V1,
    TOPIC_LEN_V2,
    RecordFields,
    encode_record,
    topic_length_prefix,
)
from store.format.record_check import RecordStatus, check_record
from store.format.vocabulary import (
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DEQUEUE_MS,
    PROPERTY_TIMER_ENQUEUE_MS,
    PROPERTY_TIMER_ROLL_TIMES,
)
from store.names import SCHEDULE_TOPIC, TIMER_TOPIC, TRANS_HALF_TOPIC
from store.write.sendback import sendback_record

#: RocketMQ's ``TIMER_ENQUEUE_MS`` for a message that never entered the wheel (Long.MAX_VALUE).
NEVER_ENQUEUED_MS = 2**63 - 1


class RelocationKind(enum.IntEnum):
    #: Append to REAL_TOPIC / REAL_QID.
    DELIVER = 0
    #: Re-append to the timer topic with TIMER_ROLL_TIMES + 1 (timer messages only).
    ROLL = 1
    #: A consumer send-back request becomes its retry or dead-letter record (store.write.sendback).
    SENDBACK = 2


@dataclass(frozen=True, slots=True)
class Relocation:
    """One relocation request: the parked record at ``commitlog_offset`` is delivered or rolled."""

    commitlog_offset: int
    kind: RelocationKind = RelocationKind.DELIVER
    enqueue_ms: int = NEVER_ENQUEUED_MS
    dequeue_ms: int = 0


class NotRelocatable(InvalidArgument):
    """The CommitLog position does not hold a parked message that can be relocated."""

    code = "not_relocatable"


def relocated_record(
    raw: bytes | memoryview, kind: RelocationKind, *, enqueue_ms: int, dequeue_ms: int, max_level: int = 18
) -> RecordFields | None:
    """The record to append for the parked record ``raw`` (its full stored bytes).

    ``None`` when RocketMQ would drop it: a delayed half message (the "[BUG]" case of
    ``ScheduleMessageService``, PR #1626). Raises :class:`NotRelocatable` when ``raw`` is not a
    parked record. ``enqueue_ms`` / ``dequeue_ms`` become ``TIMER_ENQUEUE_MS`` /
    ``TIMER_DEQUEUE_MS`` of a delivered timer message.
    """
    if kind is RelocationKind.SENDBACK:
        try:
            return sendback_record(raw, max_level)
        except (InvalidArgument, KeyError, ValueError) as exc:
            raise NotRelocatable(f"not a send-back request: {exc}") from None
    check = check_record(raw, 0, check_crc=False)
    if check.status is not RecordStatus.OK or check.header is None or check.properties is None:
        raise NotRelocatable(f"no valid record: {check.status.value} {check.reason}")
    header, source_topic = check.header, check.topic
    properties = dict(check.properties)
    if source_topic not in (SCHEDULE_TOPIC, TIMER_TOPIC):
        raise NotRelocatable(f"record of topic {source_topic!r} is not parked")
    real_topic = properties.get(PROPERTY_REAL_TOPIC)
    real_qid = properties.get(PROPERTY_REAL_QID, "0")
    if not real_topic or not real_qid.isdigit():
        raise NotRelocatable(f"parked record without REAL_TOPIC/REAL_QID: {properties}")
    if real_topic == TRANS_HALF_TOPIC:
        return None
    if kind is RelocationKind.ROLL:
        if source_topic != TIMER_TOPIC:
            raise NotRelocatable("only timer messages roll")
        rolls = int(properties.get(PROPERTY_TIMER_ROLL_TIMES, "0") or 0)
        properties[PROPERTY_TIMER_ROLL_TIMES] = str(rolls + 1)
        topic, queue_id = TIMER_TOPIC, 0
    else:
        topic, queue_id = real_topic, int(real_qid)
        if source_topic == TIMER_TOPIC:
            properties[PROPERTY_TIMER_ENQUEUE_MS] = str(enqueue_ms)
            properties[PROPERTY_TIMER_DEQUEUE_MS] = str(dequeue_ms)
    body = bytes(raw[BODY_POS : BODY_POS + header.body_len])
    return RecordFields(
        topic=topic,
        body=body,
        queue_id=queue_id,
        flag=header.flag,
        properties=properties,
        sys_flag=header.sys_flag,
        born_timestamp_ms=header.born_timestamp,
        born_host=(_ip(header.born_ip), header.born_port),
        store_host=(_ip(header.store_ip), header.store_port),
        reconsume_times=header.reconsume_times,
        prepared_transaction_offset=0,
    )


def _ip(raw: bytes) -> str:
    return socket.inet_ntoa(raw)


class Relocated(NamedTuple):
    """An encoded relocated record and what the put path needs to dispatch it."""

    data: bytes
    topic: str
    queue_id: int
    properties: Mapping[str, str]


def relocated_bytes(
    raw: bytes, kind: RelocationKind, *, enqueue_ms: int, dequeue_ms: int, max_level: int = 18
) -> Relocated | None:
    """:func:`relocated_record`, encoded. A delivered level message (the bulk) is spliced from
    the parked bytes — its properties string is copied unchanged — instead of being decoded and
    re-encoded; queue offset, CommitLog offset and store timestamp are patched at append."""
    check = check_record(raw, 0, check_crc=False)
    if check.status is not RecordStatus.OK or check.header is None or check.properties is None:
        raise NotRelocatable(f"no valid record: {check.status.value} {check.reason}")
    props = check.properties
    splice = kind is RelocationKind.DELIVER and check.topic == SCHEDULE_TOPIC
    real_topic, real_qid = props.get(PROPERTY_REAL_TOPIC), props.get(PROPERTY_REAL_QID, "0")
    if not splice or not real_topic or not real_qid.isdigit() or real_topic == TRANS_HALF_TOPIC:
        rec = relocated_record(raw, kind, enqueue_ms=enqueue_ms, dequeue_ms=dequeue_ms, max_level=max_level)
        if rec is None:
            return None
        return Relocated(encode_record(rec), rec.topic, rec.queue_id, rec.properties or {})
    header = check.header
    old_prefix = TOPIC_LEN_V1 if int.from_bytes(raw[4:8], "big") == MAGIC_V1 else TOPIC_LEN_V2
    old_topic_len_pos = BODY_POS + header.body_len
    props_len_pos = old_topic_len_pos + old_prefix.size + len(check.topic.encode("utf-8"))
    topic_bytes = real_topic.encode("utf-8")
    try:
        magic, topic_prefix = topic_length_prefix(topic_bytes)  # as encode_record chooses
    except InvalidArgument as exc:
        raise NotRelocatable(f"REAL_TOPIC {real_topic!r}: {exc}") from None
    queue_id = int(real_qid)
    tail = raw[props_len_pos:]
    size = old_topic_len_pos + topic_prefix.size + len(topic_bytes) + len(tail)
    data = b"".join(
        (
            size.to_bytes(4, "big"),
            magic.to_bytes(4, "big"),
            raw[8:QUEUE_ID_POS],
            queue_id.to_bytes(4, "big", signed=True),
            raw[QUEUE_ID_POS + 4 : PREPARED_TX_OFFSET_POS],
            bytes(8),  # preparedTransactionOffset
            raw[PREPARED_TX_OFFSET_POS + 8 : old_topic_len_pos],
            topic_prefix.pack(len(topic_bytes)),
            topic_bytes,
            tail,
        )
    )
    return Relocated(data, real_topic, queue_id, props)
