"""CONSUMER_SEND_MSG_BACK (36): a message the consumer failed goes back through the core's
retry ladder (:func:`broker.sendbacks.send_back_here`): ``%RETRY%group`` after the ladder's
delay, and ``%DLQ%group`` once its reconsume times reach ``maxReconsumeTimes`` (the header's,
else the group's, 16 by default) or when ``delayLevel`` is negative.

The message is named by its CommitLog ``offset`` (as this broker's offset msg id) and its
``originTopic``; a send-back for a message this broker does not hold is SYSTEM_ERROR (RocketMQ:
"look message by offset failed"). The retry resolver (a Spark operator) applies the request:
the message reappears in the retry topic once the ladder's delay has passed.
"""

from __future__ import annotations

from broker.errors import BrokerError
from broker.retries import SendBackItem
from broker.sendbacks import send_back_here
from ingest_api.remoting.codec import RemotingCommand, response_to
from ingest_api.remoting.codes import ResponseCode
from ingest_api.remoting.connection import Connection
from ingest_api.remoting.handlers.context import DoorContext
from ingest_api.remoting.handlers.store_errors import answer_store_error
from ingest_api.remoting.headers import ConsumerSendMsgBackRequest, encode_msg_id
from store import SparkMQError, retry_topic


async def consumer_send_msg_back(ctx: DoorContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    header = ConsumerSendMsgBackRequest.from_ext_fields(cmd.ext_fields)
    config = ctx.store.config
    msg_id = encode_msg_id((config.store_host, config.store_port), header.offset)
    topic = header.origin_topic or retry_topic(header.group)
    item = SendBackItem(topic, msg_id, max(header.delay_level, -1), header.max_reconsume_times)
    try:
        await send_back_here(ctx.broker, header.group, [item], register_group=True)
    except (SparkMQError, BrokerError) as exc:
        if getattr(exc, "code", "") == "unknown_message":
            return response_to(
                cmd, ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {header.offset}"
            )
        return answer_store_error(cmd, exc)
    return response_to(cmd, ResponseCode.SUCCESS)
