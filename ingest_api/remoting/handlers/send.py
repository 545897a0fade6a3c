"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320) through the core.

The request is decoded into placed messages (:mod:`ingest_api.remoting.handlers.messages`,
which applies :mod:`broker.produce`'s rules); then one message goes through the core's
coalesced single put (:func:`broker.produce.produce_message`), a half (``TRAN_MSG``) through
:func:`broker.halves.produce_half`, and a batch through the store's all-or-nothing put of
several messages (as the HTTP door's JSON batches). The topic is created on first send when the
store auto-creates topics (:func:`broker.produce.topic_queue_count`). In a cluster the queue
must be one this broker owns (:func:`broker.writes.write_queue_count`), else the send is refused
(see :mod:`ingest_api.remoting.handlers.store_errors` for the code) and the client retries on
another broker of its route. The client's queue number is this broker's ``i``-th queue of the
topic (:func:`broker.broker_routes.global_queue_id`); the answer gives it back as sent. The
answer carries the offset msg id, the queue and queue offset, and the UNIQ_KEY as
``transactionId``.
"""

from __future__ import annotations

import dataclasses
import time

from broker.errors import BrokerError
from broker.halves import produce_half
from broker.produce import produce_message
from broker.threads import run_blocking
from broker.writes import write_queue_count
from ingest_api.remoting.codec import RemotingCommand, response_to
from ingest_api.remoting.codes import RequestCode, ResponseCode
from ingest_api.remoting.connection import Connection
from ingest_api.remoting.errors import RemotingRequestError
from ingest_api.remoting.handlers.context import DoorContext
from ingest_api.remoting.handlers.messages import Placing, request_messages
from ingest_api.remoting.handlers.store_errors import answer_store_error
from ingest_api.remoting.headers import SendMessageRequest, decode_send_request
from store import Message, PutResult, SparkMQError


def _answer(cmd: RemotingCommand, header: SendMessageRequest, results: list[PutResult]) -> RemotingCommand:
    first = results[0]
    msg_id = first.msg_id if len(results) == 1 else ",".join(r.msg_id for r in results)
    # SendMessageResponse(msg_id, queue_id, queue_offset, transaction_id).to_ext_fields(),
    # written out: the one answer every send gets (tests/remoting/test_handlers.py holds them equal)
    fields = {
        "msgId": msg_id,
        "queueId": str(header.queue_id),
        "queueOffset": str(first.queue_offset),
        "transactionId": first.uniq_key,
    }
    return response_to(cmd, ResponseCode.SUCCESS, ext_fields=fields)


async def _store(
    ctx: DoorContext, cmd: RemotingCommand, header: SendMessageRequest, messages: list[Message]
) -> list[PutResult]:
    broker = ctx.broker
    if cmd.code != RequestCode.SEND_BATCH_MESSAGE and len(messages) == 1:
        (message,) = messages
        if message.transaction_prepared:
            return [await produce_half(broker, message, header.producer_group)]
        return [await produce_message(broker, message)]
    if any(m.transaction_prepared for m in messages):
        raise BrokerError(400, "invalid_transaction", "a batch cannot hold transactional messages")
    started = time.perf_counter()
    results = await run_blocking(broker.store.put_messages, messages)
    size = sum(len(m.body) for m in messages)
    broker.metrics.produced(header.topic, len(messages), size, "batch", time.perf_counter() - started)
    return results


async def send_message(ctx: DoorContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    """Store the message(s) of a send request, all or nothing."""
    header = decode_send_request(cmd)
    store = ctx.store
    queue_id = ctx.queue_id(header.topic, header.queue_id)
    try:
        queue_count = await write_queue_count(ctx.broker, header.topic, queue_id)
        placing = Placing(queue_count, store.config, store.now_ms())
        placed = header if queue_id == header.queue_id else dataclasses.replace(header, queue_id=queue_id)
        messages = request_messages(placed, cmd, (conn.peer_host, conn.peer_port), placing)
        if not messages:
            raise RemotingRequestError("the batch holds no message", ResponseCode.MESSAGE_ILLEGAL)
        results = await _store(ctx, cmd, header, messages)
    except RemotingRequestError:
        raise  # answered by the server with its own code
    except (SparkMQError, BrokerError) as exc:
        return answer_store_error(cmd, exc)
    return _answer(cmd, header, results)
