"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320) into the store.

The request becomes a :class:`store.Message`: ``TAGS``, ``KEYS``, ``UNIQ_KEY`` (the client's
when it set one, else the store makes one), ``DELAY`` and ``TRAN_MSG`` move from the properties
string to their fields, every other property is kept as sent (``WAIT``, the timer properties,
user properties); the born host is the connection's peer. A compressed body (sysFlag bit 0,
zlib: the only codec RocketMQ 4 clients and ali-ons use) is inflated and the store applies its
own body policy. The answer carries the offset msg id, the queue and queue offset, and the
UNIQ_KEY as ``transactionId``.

Not yet (left to the broker-core door): keeping the client's compressed bytes and sysFlag
bits verbatim, LZ4/ZSTD bodies (refused with MESSAGE_ILLEGAL), forwarding a send for a queue
this broker does not own.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping

from ingest_api.remoting.batch import decode_batch
from ingest_api.remoting.codec import RemotingCommand, response_to
from ingest_api.remoting.codes import RequestCode, ResponseCode
from ingest_api.remoting.connection import Connection
from ingest_api.remoting.errors import RemotingRequestError
from ingest_api.remoting.handlers.context import DoorContext
from ingest_api.remoting.handlers.store_errors import answer_store_error
from ingest_api.remoting.headers import SendMessageRequest, SendMessageResponse, decode_send_request
from store import (
    SYSFLAG_COMPRESSED,
    SYSFLAG_COMPRESSION_MASK,
    SYSFLAG_COMPRESSION_ZLIB,
    SYSFLAG_TX_PREPARED,
    Message,
    PutResult,
    SparkMQError,
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


def to_message(
    header: SendMessageRequest,
    properties: Mapping[str, str],
    body: bytes,
    flag: int,
    born_host: tuple[str, int],
) -> Message:
    """One store message from a send header (topic, queue, times) and one message's parts."""
    props = dict(properties)
    tags = props.pop("TAGS", None) or None
    keys = tuple(props.pop("KEYS", "").split())
    uniq_key = props.pop("UNIQ_KEY", None) or None
    delay = props.pop("DELAY", "0")
    prepared = props.pop("TRAN_MSG", "").lower() == "true" or bool(header.sys_flag & SYSFLAG_TX_PREPARED)
    if prepared:
        props["PGROUP"] = header.producer_group
    try:
        delay_level = int(delay or "0")
    except ValueError:
        raise RemotingRequestError(
            f"DELAY property is not a level: {delay!r}", ResponseCode.MESSAGE_ILLEGAL
        ) from None
    return Message(
        topic=header.topic,
        body=body,
        tags=tags,
        keys=keys,
        properties=props,
        queue_id=header.queue_id,
        flag=flag,
        delay_level=delay_level,
        transaction_prepared=prepared,
        born_timestamp_ms=header.born_timestamp,
        born_host=born_host,
        reconsume_times=header.reconsume_times or 0,
        uniq_key=uniq_key,
    )


def _messages(header: SendMessageRequest, cmd: RemotingCommand, born_host: tuple[str, int]) -> list[Message]:
    if cmd.code == RequestCode.SEND_BATCH_MESSAGE:
        return [
            to_message(
                header, entry.properties, inflate_body(entry.body, header.sys_flag), entry.flag, born_host
            )
            for entry in decode_batch(cmd.body)
        ]
    body = inflate_body(cmd.body, header.sys_flag)
    return [to_message(header, header.property_map(), body, header.flag, born_host)]


def _answer(cmd: RemotingCommand, header: SendMessageRequest, results: list[PutResult]) -> RemotingCommand:
    first = results[0]
    response = SendMessageResponse(
        msg_id=",".join(r.msg_id for r in results),
        queue_id=header.queue_id,
        queue_offset=first.queue_offset,
        transaction_id=first.uniq_key,
    )
    return response_to(cmd, ResponseCode.SUCCESS, ext_fields=response.to_ext_fields())


async def send_message(ctx: DoorContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    """Store the message(s) of a send request, all or nothing."""
    header = decode_send_request(cmd)
    messages = _messages(header, cmd, (conn.peer_host, conn.peer_port))
    if not messages:
        raise RemotingRequestError("the batch holds no message", ResponseCode.MESSAGE_ILLEGAL)
    try:
        results = await ctx.run_blocking(ctx.store.put_messages, messages)
    except SparkMQError as exc:
        return answer_store_error(cmd, exc)
    return _answer(cmd, header, results)
