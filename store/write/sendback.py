"""The consumer retry ladder, as RocketMQ's ``consumerSendMsgBack`` writes it (pure, no I/O).

A send-back is first stored as a **request** record in ``rmq_sys_sendback`` queue 0 (a sparkmq
extension): its body is the whole stored record being sent back, and its properties say which
group, which attempt and what to do (``SENDBACK_*``). The retry resolver
(``streaming/operators/retry.py``) drops duplicate requests of one attempt, and the broker then
*relocates* each accepted request into the record RocketMQ writes (:func:`sendback_record`):

* **retry**: the source's body, flag, sysflag, born timestamp and host, store host and
  properties, with ``RETRY_TOPIC`` (the original topic) and ``ORIGIN_MESSAGE_ID`` (the
  original offsetMsgId) set only if absent, UNIQ_KEY kept, reconsume times + 1; parked in
  ``SCHEDULE_TOPIC_XXXX`` at level ``3 + reconsume times`` (clamped to the table; or the level
  the request names) with ``REAL_TOPIC = %RETRY%group`` and ``DELAY``; the delay resolver
  delivers it to ``%RETRY%group``;
* **dead letter**: when the reconsume times reach the maximum (16 by default) or the request
  says ``-1``: the same record in ``%DLQ%group`` queue 0 with ``DELAY=0``, at once.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from store.errors import InvalidArgument
from store.format.arrow_ranges import gather_ranges
from store.format.batch_encode import BatchColumns, EncodedBatch, encode_columns
from store.format.ids import ascii_rows, encode_msg_id, hex_of_bytes, hex_of_ints
from store.format.java_hash import java_string_hash
from store.format.property_columns import decode_named_properties
from store.format.record import (
    BODY_POS,
    PHYSICAL_OFFSET_POS,
    RECONSUME_TIMES_POS,
    STORE_HOST_POS,
    BodyPolicy,
    RecordFields,
)
from store.format.record_check import RecordStatus, check_record, check_records, gather_headers, header_field
from store.format.vocabulary import (
    PROPERTY_DELAY,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_SENDBACK_ATTEMPT,
    PROPERTY_SENDBACK_DELAY_LEVEL,
    PROPERTY_SENDBACK_DLQ_QUEUE,
    PROPERTY_SENDBACK_GROUP,
    PROPERTY_SENDBACK_MAX_RECONSUME,
    PROPERTY_SENDBACK_ORIGIN,
    PROPERTY_SENDBACK_RETRY_BASE,
    PROPERTY_SENDBACK_RETRY_QUEUES,
    PROPERTY_UNIQ_KEY,
)
from store.names import SCHEDULE_TOPIC, SENDBACK_TOPIC, dlq_topic, retry_topic

#: RocketMQ ``subscriptionGroupConfig.retryMaxTimes``.
DEFAULT_MAX_RECONSUME_TIMES = 16
#: The retry ladder starts at level 3 (10 s).
LADDER_BASE_LEVEL = 3


def _fields(raw: bytes | memoryview) -> tuple[RecordFields, int, str]:
    """(fields, its CommitLog offset, its offsetMsgId) of a stored record."""
    check = check_record(raw, 0, check_crc=False)
    if check.status is not RecordStatus.OK or check.header is None or check.properties is None:
        raise InvalidArgument(f"not a valid record: {check.status.value} {check.reason}")
    h = check.header
    store_host = (socket.inet_ntoa(h.store_ip), h.store_port)
    fields = RecordFields(
        topic=check.topic,
        body=bytes(raw[BODY_POS : BODY_POS + h.body_len]),
        queue_id=h.queue_id,
        flag=h.flag,
        properties=dict(check.properties),
        sys_flag=h.sys_flag,
        born_timestamp_ms=h.born_timestamp,
        born_host=(socket.inet_ntoa(h.born_ip), h.born_port),
        store_host=store_host,
        reconsume_times=h.reconsume_times,
    )
    return fields, h.physical_offset, encode_msg_id(store_host, h.physical_offset)


def origin_id(source_raw: bytes | memoryview) -> str:
    """What identifies the original message across attempts: its ``ORIGIN_MESSAGE_ID``, or the
    offsetMsgId of the source itself on the first send-back."""
    fields, _, msg_id = _fields(source_raw)
    return (fields.properties or {}).get(PROPERTY_ORIGIN_MESSAGE_ID) or msg_id


def sendback_request(
    source_raw: bytes,
    *,
    group: str,
    delay_level: int,
    max_reconsume_times: int,
    retry_queues: int,
    uniq_key: str,
    born_ms: int,
    store_host: tuple[str, int],
    retry_queue_base: int = 0,
    dlq_queue_id: int = 0,
) -> RecordFields:
    """The request record for sending ``source_raw`` back (``delay_level`` 0 = the ladder,
    -1 = straight to the DLQ, N = that level). In a cluster ``retry_queue_base`` and
    ``dlq_queue_id`` are this broker's own queue ids of the group's retry and DLQ topics."""
    if delay_level < -1:
        raise InvalidArgument(f"delay_level must be -1 (DLQ), 0 (the ladder) or a level, got {delay_level}")
    fields, _, _ = _fields(source_raw)
    properties = {
        PROPERTY_SENDBACK_GROUP: group,
        PROPERTY_SENDBACK_ORIGIN: origin_id(source_raw),
        PROPERTY_SENDBACK_ATTEMPT: str(fields.reconsume_times),
        PROPERTY_SENDBACK_DELAY_LEVEL: str(delay_level),
        PROPERTY_SENDBACK_MAX_RECONSUME: str(max_reconsume_times),
        PROPERTY_SENDBACK_RETRY_QUEUES: str(retry_queues),
    }
    if retry_queue_base:
        properties[PROPERTY_SENDBACK_RETRY_BASE] = str(retry_queue_base)
    if dlq_queue_id:
        properties[PROPERTY_SENDBACK_DLQ_QUEUE] = str(dlq_queue_id)
    properties[PROPERTY_UNIQ_KEY] = uniq_key
    return RecordFields(
        topic=SENDBACK_TOPIC,
        body=bytes(source_raw),
        properties=properties,
        born_timestamp_ms=born_ms,
        born_host=store_host,
        store_host=store_host,
    )


def sendback_record(request_raw: bytes | memoryview, max_level: int = 18) -> RecordFields:
    """The retry (parked) or dead-letter record for a stored send-back request."""
    request, _, _ = _fields(request_raw)
    if request.topic != SENDBACK_TOPIC:
        raise InvalidArgument(f"record of topic {request.topic!r} is not a send-back request")
    ask = request.properties or {}
    group = ask[PROPERTY_SENDBACK_GROUP]
    level = int(ask[PROPERTY_SENDBACK_DELAY_LEVEL])
    maximum = int(ask[PROPERTY_SENDBACK_MAX_RECONSUME])
    queues = max(1, int(ask.get(PROPERTY_SENDBACK_RETRY_QUEUES, "1")))
    source, _, source_msg_id = _fields(request.body)
    props = dict(source.properties or {})
    props.setdefault(PROPERTY_RETRY_TOPIC, source.topic)
    props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, source_msg_id)
    times = source.reconsume_times
    if times >= maximum or level < 0:
        dlq_queue = int(ask.get(PROPERTY_SENDBACK_DLQ_QUEUE, "0"))
        return _dead_letter(source, source_msg_id, group, dlq_queue, times + 1)
    if level == 0:
        level = LADDER_BASE_LEVEL + times
    level = min(level, max_level)
    base = int(ask.get(PROPERTY_SENDBACK_RETRY_BASE, "0"))
    real_qid = base + abs(java_string_hash(ask[PROPERTY_SENDBACK_ORIGIN])) % queues
    props[PROPERTY_DELAY] = str(level)
    props[PROPERTY_REAL_TOPIC] = retry_topic(group)
    props[PROPERTY_REAL_QID] = str(real_qid)
    return source._replace(
        topic=SCHEDULE_TOPIC, queue_id=level - 1, properties=props, reconsume_times=times + 1
    )


def dead_letter_record(
    source_raw: bytes | memoryview, *, group: str, reconsume_times: int, dlq_queue_id: int = 0
) -> RecordFields:
    """The record RocketMQ stores in ``%DLQ%group`` for the stored record ``source_raw`` once
    its attempts are used up (what a send-back past the maximum writes; POP consumption's dead
    letters too): the source's body, flag, sysflag, hosts, born timestamp and properties,
    ``RETRY_TOPIC`` and ``ORIGIN_MESSAGE_ID`` set only if absent, ``DELAY=0``, UNIQ_KEY kept,
    ``reconsume_times`` as given. Raises :class:`InvalidArgument` for bytes that are not a record."""
    source, _, source_msg_id = _fields(source_raw)
    return _dead_letter(source, source_msg_id, group, dlq_queue_id, reconsume_times)


def _dead_letter(
    source: RecordFields, source_msg_id: str, group: str, queue_id: int, reconsume_times: int
) -> RecordFields:
    props = dict(source.properties or {})
    props.setdefault(PROPERTY_RETRY_TOPIC, source.topic)
    props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, source_msg_id)
    props[PROPERTY_DELAY] = "0"
    return source._replace(
        topic=dlq_topic(group), queue_id=queue_id, properties=props, reconsume_times=reconsume_times
    )


# --- many send-backs at once -----------------------------------------------------------------------


class SendBackBatch(NamedTuple):
    """The request records of a batch of send-backs and what the answer says of each source."""

    #: The request records (all bound for ``rmq_sys_sendback`` queue 0).
    records: EncodedBatch
    #: Per source: its reconsume times (the attempt sent back), offsetMsgId, UNIQ_KEY, topic.
    attempts: npt.NDArray[np.int64]
    msg_ids: list[str]
    uniq_keys: list[str | None]
    topics: list[str]


def sendback_requests(
    sources: npt.NDArray[np.uint8],
    starts: npt.NDArray[np.int64],
    *,
    group: str,
    delay_levels: Sequence[int],
    max_reconsume_times: Sequence[int],
    retry_queues: int,
    uniq_keys: Sequence[str],
    born_ms: int,
    store_host: tuple[str, int],
    retry_queue_base: int = 0,
    dlq_queue_id: int = 0,
) -> SendBackBatch:
    """:func:`sendback_request` for many stored records (back to back in ``sources``) in one
    pass: header fields and properties read vectorised, the requests encoded column by column.
    The same bytes as the record-by-record function (tests/store/test_sendback.py), cluster
    queue ids included."""
    count = len(starts)
    spans = check_records(sources, starts)
    if spans.valid < count:
        raise InvalidArgument(f"messages[{spans.valid}] is not a valid record: {spans.verdict.reason}")
    if any(level < -1 for level in delay_levels):
        raise InvalidArgument("delay_level must be -1 (DLQ), 0 (the ladder) or a level")
    r = spans.ranges
    headers = gather_headers(sources, starts)
    attempts = header_field(headers, RECONSUME_TIMES_POS).astype(np.int64)
    physical = header_field(headers, PHYSICAL_OFFSET_POS).astype(np.int64)
    hosts = np.ascontiguousarray(headers[:, STORE_HOST_POS : STORE_HOST_POS + 8])
    msg_ids = ascii_rows(np.concatenate((hex_of_bytes(hosts), hex_of_ints(physical, 8)), axis=1))
    props = decode_named_properties(
        sources, r.props_begin, r.props_len, (PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_UNIQ_KEY)
    )
    origins = [
        o or m for o, m in zip(props.values[PROPERTY_ORIGIN_MESSAGE_ID].to_pylist(), msg_ids, strict=True)
    ]
    topics = gather_ranges(pa.py_buffer(sources), r.topic_begin, r.topic_len, pa.string()).to_pylist()
    ends = starts + spans.total_size
    bodies = [sources[lo:hi].tobytes() for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True)]
    properties: dict[str, str | list[str]] = {
        PROPERTY_SENDBACK_GROUP: group,
        PROPERTY_SENDBACK_ORIGIN: origins,
        PROPERTY_SENDBACK_ATTEMPT: [str(a) for a in attempts.tolist()],
        PROPERTY_SENDBACK_DELAY_LEVEL: [str(level) for level in delay_levels],
        PROPERTY_SENDBACK_MAX_RECONSUME: [str(m) for m in max_reconsume_times],
        PROPERTY_SENDBACK_RETRY_QUEUES: str(retry_queues),
    }
    if retry_queue_base:  # the same order as sendback_request's
        properties[PROPERTY_SENDBACK_RETRY_BASE] = str(retry_queue_base)
    if dlq_queue_id:
        properties[PROPERTY_SENDBACK_DLQ_QUEUE] = str(dlq_queue_id)
    properties[PROPERTY_UNIQ_KEY] = list(uniq_keys)
    columns = BatchColumns(
        topic=SENDBACK_TOPIC,
        bodies=bodies,
        properties=properties,
        born_timestamps_ms=born_ms,
        born_host=store_host,
        store_host=store_host,
    )
    biggest = max(map(len, bodies), default=0)
    batch = encode_columns(columns, BodyPolicy(max(biggest, 1), max(biggest, 1)))  # bodies kept whole
    batch.uniq_keys = list(uniq_keys)
    return SendBackBatch(batch, attempts, msg_ids, props.values[PROPERTY_UNIQ_KEY].to_pylist(), topics)
