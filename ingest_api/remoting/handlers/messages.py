"""A send request's message(s) as the core's placed :class:`store.Message`.

The properties string is split into the fields the core's produce rules take
(:func:`broker.produce.place_message`: the queue checked against the topic, the scheduling
fields, the body size; :func:`broker.produce.check_message_fields` for tags, keys and user
properties): ``TAGS``, ``KEYS``, ``DELAY`` (a delay level), ``TIMER_DELIVER_MS`` (a due time),
``TIMER_DELAY_MS`` / ``TIMER_DELAY_SEC`` (a delay; the seconds are stored as
``TIMER_DELAY_MS``). What only RocketMQ's wire carries is then set on the placed message: the
user ``flag``, the born time and host, the reconsume times, the client's ``UNIQ_KEY`` (else the
store makes one), a half message's ``TRAN_MSG`` (with ``PGROUP``). Every other property, the
client's system ones included (``WAIT``, ``PGROUP``...), is kept as sent.

A compressed body (sysFlag bit 0, zlib: the only codec RocketMQ 4 clients and ali-ons use) is
inflated here; LZ4/ZSTD are refused with MESSAGE_ILLEGAL.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Mapping

from broker.errors import BrokerError
from broker.produce import check_message_fields, place_message
from ingest_api.remoting.batch import decode_batch
from ingest_api.remoting.codec import RemotingCommand
from ingest_api.remoting.codes import RequestCode, ResponseCode
from ingest_api.remoting.errors import RemotingRequestError
from ingest_api.remoting.headers import SendMessageRequest
from store import (
    SYSFLAG_COMPRESSED,
    SYSFLAG_COMPRESSION_MASK,
    SYSFLAG_COMPRESSION_ZLIB,
    SYSFLAG_TX_PREPARED,
    SYSTEM_PROPERTIES,
    Message,
    StoreConfig,
)

#: The properties that become fields of the placed message (not kept as sent).
_FIELDS = (
    "TAGS",
    "KEYS",
    "UNIQ_KEY",
    "DELAY",
    "TRAN_MSG",
    "TIMER_DELIVER_MS",
    "TIMER_DELAY_MS",
    "TIMER_DELAY_SEC",
)


def inflate_body(body: bytes, sys_flag: int) -> bytes:
    """The body as the producer wrote it; raises RemotingRequestError (MESSAGE_ILLEGAL)."""
    if not sys_flag & SYSFLAG_COMPRESSED:
        return body
    codec = sys_flag & SYSFLAG_COMPRESSION_MASK
    if codec not in (0, SYSFLAG_COMPRESSION_ZLIB):
        raise RemotingRequestError(
            f"compression type 0x{codec:x} is not supported (zlib only)", ResponseCode.MESSAGE_ILLEGAL
        )
    try:
        return zlib.decompress(body)
    except zlib.error as exc:
        raise RemotingRequestError(
            f"compressed body does not inflate: {exc}", ResponseCode.MESSAGE_ILLEGAL
        ) from exc


def _int_property(props: Mapping[str, str], name: str) -> int | None:
    text = props.get(name)
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise BrokerError(400, "invalid_schedule", f"property {name} is not an integer: {text!r}") from None


@dataclasses.dataclass(frozen=True, slots=True)
class Placing:
    """What the core's rules need besides the message: the topic's queue count, the store's limits."""

    queue_count: int
    config: StoreConfig
    now_ms: int


def to_message(
    header: SendMessageRequest,
    properties: Mapping[str, str],
    body: bytes,
    flag: int,
    born_host: tuple[str, int],
    placing: Placing,
    index: int | None = None,
) -> Message:
    """One placed store message from a send header and one message's parts; raises
    :class:`BrokerError` (the core's refusal) naming the field."""
    tags = properties.get("TAGS") or None
    keys = properties.get("KEYS", "").split()
    kept = {name: value for name, value in properties.items() if name not in _FIELDS}
    try:
        check_message_fields(tags, keys, {n: v for n, v in kept.items() if n not in SYSTEM_PROPERTIES})
    except ValueError as exc:
        raise BrokerError(400, "invalid_message", str(exc), index=index) from None
    prepared = properties.get("TRAN_MSG", "").lower() == "true" or bool(header.sys_flag & SYSFLAG_TX_PREPARED)
    delay_sec = _int_property(properties, "TIMER_DELAY_SEC")
    delay_ms = _int_property(properties, "TIMER_DELAY_MS")
    placed = place_message(
        header.topic,
        body,
        tags=tags,
        keys=keys,
        properties=kept,
        queue_id=header.queue_id,
        delay_level=_int_property(properties, "DELAY") or None,
        deliver_at_ms=_int_property(properties, "TIMER_DELIVER_MS"),
        delay_ms=delay_sec * 1000 if delay_sec is not None else delay_ms,
        queue_count=placing.queue_count,
        max_body=placing.config.max_message_size_bytes,
        max_delay_ms=placing.config.timer_max_delay_ms,
        now_ms=placing.now_ms,
        index=index,
    )
    # place_message made this message for us alone: set what only RocketMQ's wire carries in
    # place (a dataclasses.replace per send costs more than the rest of this function)
    if prepared:
        placed.properties = {**placed.properties, "PGROUP": header.producer_group}
    placed.flag = flag
    placed.transaction_prepared = prepared
    placed.born_timestamp_ms = header.born_timestamp
    placed.born_host = born_host
    placed.reconsume_times = header.reconsume_times or 0
    placed.uniq_key = properties.get("UNIQ_KEY") or None
    return placed


def request_messages(
    header: SendMessageRequest, cmd: RemotingCommand, born_host: tuple[str, int], placing: Placing
) -> list[Message]:
    """The placed message(s) of a send request (a batch: one per entry, refusals name the entry)."""
    if cmd.code == RequestCode.SEND_BATCH_MESSAGE:
        return [
            to_message(
                header, e.properties, inflate_body(e.body, header.sys_flag), e.flag, born_host, placing, i
            )
            for i, e in enumerate(decode_batch(cmd.body))
        ]
    body = inflate_body(cmd.body, header.sys_flag)
    return [to_message(header, header.property_map(), body, header.flag, born_host, placing)]
