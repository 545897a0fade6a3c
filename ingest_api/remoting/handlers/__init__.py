"""Handlers of the remoting door, one module per family; :func:`handler_table` binds them to a
:class:`DoorContext` for :class:`~ingest_api.remoting.server.RemotingServer`.

Served: the name-server codes (route, cluster info), sending (10, 310, 320), client
registration (34, 35, 38), pulling (11), offsets (14, 15, 29, 30, 31), send-backs (36),
transaction ends (37; check-backs go out as 39), orderly locks (41, 42) and the tools' codes
(12, 17, 32, 33). Everything else is answered REQUEST_CODE_NOT_SUPPORTED.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

from ingest_api.remoting.codec import RemotingCommand
from ingest_api.remoting.codes import RequestCode
from ingest_api.remoting.connection import Connection
from ingest_api.remoting.handlers import (
    heartbeat,
    locks,
    nameserver,
    offsets,
    pull,
    send,
    sendback,
    tools,
    transactions,
)
from ingest_api.remoting.handlers.context import BrokerIdentity, DoorContext
from ingest_api.remoting.server import Handler

__all__ = ["BrokerIdentity", "DoorContext", "handler_table"]

ContextHandler = Callable[[DoorContext, Connection, RemotingCommand], Awaitable[RemotingCommand | None]]

_HANDLERS: dict[int, ContextHandler] = {
    RequestCode.GET_ROUTEINFO_BY_TOPIC: nameserver.get_route_info,
    RequestCode.GET_BROKER_CLUSTER_INFO: nameserver.get_broker_cluster_info,
    RequestCode.SEND_MESSAGE: send.send_message,
    RequestCode.SEND_MESSAGE_V2: send.send_message,
    RequestCode.SEND_BATCH_MESSAGE: send.send_message,
    RequestCode.HEART_BEAT: heartbeat.heart_beat,
    RequestCode.UNREGISTER_CLIENT: heartbeat.unregister_client,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: heartbeat.get_consumer_list,
    RequestCode.PULL_MESSAGE: pull.pull_message,
    RequestCode.QUERY_CONSUMER_OFFSET: offsets.query_consumer_offset,
    RequestCode.UPDATE_CONSUMER_OFFSET: offsets.update_consumer_offset,
    RequestCode.GET_MAX_OFFSET: offsets.get_max_offset,
    RequestCode.GET_MIN_OFFSET: offsets.get_min_offset,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: offsets.search_offset,
    RequestCode.CONSUMER_SEND_MSG_BACK: sendback.consumer_send_msg_back,
    RequestCode.END_TRANSACTION: transactions.end_transaction_request,
    RequestCode.LOCK_BATCH_MQ: locks.lock_batch,
    RequestCode.UNLOCK_BATCH_MQ: locks.unlock_batch,
    RequestCode.UPDATE_AND_CREATE_TOPIC: tools.create_topic,
    RequestCode.VIEW_MESSAGE_BY_ID: tools.view_message,
    RequestCode.QUERY_MESSAGE: tools.query_message,
    RequestCode.GET_EARLIEST_MSG_STORETIME: tools.earliest_store_time,
}


def handler_table(ctx: DoorContext) -> dict[int, Handler]:
    """Request code -> handler bound to ``ctx``."""
    return {code: functools.partial(handler, ctx) for code, handler in _HANDLERS.items()}
