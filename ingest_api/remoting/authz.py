"""Who sent a remoting request, and may they: RocketMQ's ACL on the remoting door.

When the broker has users (``--auth-file``, ``broker.auth``), :class:`AclGuard` runs before
every request, name-server codes and unknown codes included (RocketMQ's server RPC hook):

1. **Authentication**, per request as RocketMQ's stateless strategy: the ``AccessKey`` field
   names a user's access key (:meth:`broker.auth.DoorAuth.by_access_key`), and ``Signature``
   must be the HMAC of the request under that key's secret
   (:mod:`broker.security.remoting_signature`, constant-time comparison).
2. **Authorization** with the one function of the core (:func:`broker.security.authorize`):
   :data:`NEEDS` is the table, request code -> the operations it needs on the resources it
   names (RocketMQ's ``DefaultAuthorizationContextBuilder``, with Kafka's operations: Pub =
   WRITE, Sub = READ, Get = DESCRIBE, Create = CREATE):

   ================================  ==============================================================
   request                           needs
   ================================  ==============================================================
   SEND_MESSAGE(_V2), SEND_BATCH     WRITE topic (``%RETRY%group``: READ group)
   PULL_MESSAGE                      READ topic, READ group
   QUERY/UPDATE_CONSUMER_OFFSET      READ topic, READ group
   HEART_BEAT                        READ on each consumer group and each subscribed topic
   UNREGISTER_CLIENT                 READ consumer group (when it names one)
   GET_CONSUMER_LIST_BY_GROUP        READ group
   CONSUMER_SEND_MSG_BACK            READ group
   LOCK_BATCH_MQ / UNLOCK_BATCH_MQ   READ group, READ each queue's topic
   END_TRANSACTION                   WRITE on each topic of the transaction (else the header's
                                     topic; neither known: WRITE on some topic)
   GET_MAX/MIN_OFFSET, SEARCH_OFFSET DESCRIBE topic
   GET_EARLIEST_MSG_STORETIME        DESCRIBE topic
   QUERY_MESSAGE                     READ topic
   VIEW_MESSAGE_BY_ID                READ topic (the header's, else the stored message's)
   UPDATE_AND_CREATE_TOPIC           CREATE topic
   GET_ROUTEINFO_BY_TOPIC            DESCRIBE topic; a lookup that would create the topic also
                                     needs WRITE or CREATE on it, or CREATE on the cluster
                                     (:func:`broker.auth.may_create_topic`, as the gRPC and
                                     Kafka doors), else TOPIC_NOT_EXIST
   GET_BROKER_CLUSTER_INFO           DESCRIBE cluster
   ================================  ==============================================================

   A topic named ``%RETRY%group`` is the group's: the check is on the group (READ for a
   send, the row's operation otherwise). A code without a row needs authentication only (the
   server answers it REQUEST_CODE_NOT_SUPPORTED).

**Answers** are RocketMQ 5's (``AuthenticationPipeline`` / ``AuthorizationPipeline``: an
``AbortProcessException`` of ``NO_PERMISSION``, remark = the exception's message):
``username cannot be null.``, ``User:AK is not found.``, ``check signature failed.``,
``User:alice has no permission to access Topic:t from 127.0.0.1, ...``. RocketMQ 4's ACL
answered SYSTEM_ERROR with the Java exception text; NO_PERMISSION (16) makes clients say what
happened (``CODE: 16 DESC: ...``). A refused one-way request gets no answer, as any one-way
request. The refusal happens before the handler runs: nothing is stored. No secret key and no
signature is ever logged or answered; an access key is an identifier, not a secret.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Final, TypeVar

from broker.auth import DoorAuth, may_create_topic
from broker.security import Operation, Principal, Resource, ResourceType, authorize, authorize_any, cluster
from broker.security.remoting_signature import ACCESS_KEY, signature_matches
from ingest_api.remoting.bodies import decode_heartbeat, decode_lock_request
from ingest_api.remoting.codec import RemotingCommand, response_to
from ingest_api.remoting.codes import RequestCode, ResponseCode, code_name
from ingest_api.remoting.connection import Connection
from ingest_api.remoting.errors import RemotingRequestError
from ingest_api.remoting.handlers.context import DoorContext
from ingest_api.remoting.handlers.nameserver import NO_ROUTE_REMARK, creates_topic
from ingest_api.remoting.header_fields import Header
from ingest_api.remoting.headers import (
    ConsumerSendMsgBackRequest,
    CreateTopicRequest,
    EndTransactionRequest,
    GetConsumerListByGroupRequest,
    GetEarliestMsgStoretimeRequest,
    GetMaxOffsetRequest,
    GetMinOffsetRequest,
    GetRouteInfoRequest,
    PullMessageRequest,
    QueryConsumerOffsetRequest,
    QueryMessageRequest,
    SearchOffsetRequest,
    UnregisterClientRequest,
    UpdateConsumerOffsetRequest,
    ViewMessageRequest,
    decode_send_request,
)
from store import RETRY_TOPIC_PREFIX, SparkMQError

log = logging.getLogger("sparkmq.remoting.authz")

_T, _G = ResourceType.TOPIC, ResourceType.GROUP
_R, _W, _D = Operation.READ, Operation.WRITE, Operation.DESCRIBE
H = TypeVar("H", bound=Header)

#: The names a request carries: (resource type, name) pairs; a topic may still be a retry topic.
Names = list[Resource]
Finder = Callable[[DoorContext, RemotingCommand], Names | Awaitable[Names]]

NO_ACCESS_KEY: Final = "username cannot be null."
BAD_SIGNATURE: Final = "check signature failed."
UNPARSED: Final = "parse authorization context error."


@dataclass(frozen=True, slots=True)
class Need:
    """``operation`` on every resource ``find`` names; on a group's retry topic the check is
    ``on_retry_group`` on the group (RocketMQ: Sub on the group). ``anywhere_if_none``: when
    ``find`` names nothing, ``operation`` on *some* topic (:func:`broker.security.authorize_any`)."""

    operation: Operation
    find: Finder
    on_retry_group: Operation | None = None
    anywhere_if_none: bool = False


# --- finders: where each request names its topics and groups ---------------------------------


def _header(cls: type[H], *attributes: str, kind: ResourceType = _T) -> Finder:
    """The named attributes of the request's typed header (absent or empty ones skipped)."""

    def find(ctx: DoorContext, cmd: RemotingCommand) -> Names:
        header = cls.from_ext_fields(cmd.ext_fields)
        values = (getattr(header, name) for name in attributes)
        return [(kind, value) for value in values if value]

    return find


def _send_topic(ctx: DoorContext, cmd: RemotingCommand) -> Names:
    return [(_T, decode_send_request(cmd).topic)]


def _heartbeat_groups(ctx: DoorContext, cmd: RemotingCommand) -> Names:
    return [(_G, c.group_name) for c in decode_heartbeat(cmd.body).consumers]


def _heartbeat_topics(ctx: DoorContext, cmd: RemotingCommand) -> Names:
    consumers = decode_heartbeat(cmd.body).consumers
    return [(_T, s.topic) for c in consumers for s in c.subscriptions]


def _lock_group(ctx: DoorContext, cmd: RemotingCommand) -> Names:
    return [(_G, decode_lock_request(cmd.body).consumer_group)]


def _lock_topics(ctx: DoorContext, cmd: RemotingCommand) -> Names:
    return [(_T, mq.topic) for mq in decode_lock_request(cmd.body).mq_set]


def _transaction_topics(ctx: DoorContext, cmd: RemotingCommand) -> Names:
    """The topics of the transaction's halves (the HTTP door's rule: WRITE on each), else the
    header's topic; empty when neither is known (the row then asks for WRITE on some topic)."""
    header = EndTransactionRequest.from_ext_fields(cmd.ext_fields)
    txid = header.transaction_id or header.msg_id
    operators = ctx.broker.operators
    board = operators.transactions if operators is not None else None
    tx = board.service.get(txid) if board is not None else None
    if tx is not None:
        return [(_T, topic) for topic in tx.topics]
    return [(_T, header.topic)] if header.topic else []


async def _viewed_topic(ctx: DoorContext, cmd: RemotingCommand) -> Names:
    """The header's topic, else the stored message's topic and its REAL_TOPIC (a delayed or
    half message is stored under a system topic)."""
    header = ViewMessageRequest.from_ext_fields(cmd.ext_fields)
    if header.topic:
        return [(_T, header.topic)]
    view = await ctx.run_blocking(ctx.store.get_by_commitlog_offset, header.offset)
    if view is None:
        return []  # nothing to show: the handler answers "can not find message"
    real = view.properties.get("REAL_TOPIC")
    return [(_T, view.topic), *([(_T, real)] if real else [])]


def _cluster(ctx: DoorContext, cmd: RemotingCommand) -> Names:
    return [cluster()]


def _topic(cls: type[Header]) -> Finder:
    return _header(cls, "topic")


def _group(cls: type[Header], attribute: str = "consumer_group") -> Finder:
    return _header(cls, attribute, kind=_G)


def _read_topic_and_group(cls: type[Header]) -> tuple[Need, ...]:
    return Need(_R, _topic(cls)), Need(_R, _group(cls))


_SEND = (Need(_W, _send_topic, on_retry_group=_R),)
_LOCKS = (Need(_R, _lock_group), Need(_R, _lock_topics))

#: THE table: request code -> what it needs (see the module docstring).
NEEDS: dict[int, tuple[Need, ...]] = {
    RequestCode.SEND_MESSAGE: _SEND,
    RequestCode.SEND_MESSAGE_V2: _SEND,
    RequestCode.SEND_BATCH_MESSAGE: _SEND,
    RequestCode.PULL_MESSAGE: _read_topic_and_group(PullMessageRequest),
    RequestCode.QUERY_CONSUMER_OFFSET: _read_topic_and_group(QueryConsumerOffsetRequest),
    RequestCode.UPDATE_CONSUMER_OFFSET: _read_topic_and_group(UpdateConsumerOffsetRequest),
    RequestCode.HEART_BEAT: (Need(_R, _heartbeat_groups), Need(_R, _heartbeat_topics)),
    RequestCode.UNREGISTER_CLIENT: (Need(_R, _group(UnregisterClientRequest)),),
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: (Need(_R, _group(GetConsumerListByGroupRequest)),),
    RequestCode.CONSUMER_SEND_MSG_BACK: (Need(_R, _group(ConsumerSendMsgBackRequest, "group")),),
    RequestCode.LOCK_BATCH_MQ: _LOCKS,
    RequestCode.UNLOCK_BATCH_MQ: _LOCKS,
    RequestCode.END_TRANSACTION: (Need(_W, _transaction_topics, on_retry_group=_R, anywhere_if_none=True),),
    RequestCode.GET_MAX_OFFSET: (Need(_D, _topic(GetMaxOffsetRequest)),),
    RequestCode.GET_MIN_OFFSET: (Need(_D, _topic(GetMinOffsetRequest)),),
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: (Need(_D, _topic(SearchOffsetRequest)),),
    RequestCode.GET_EARLIEST_MSG_STORETIME: (Need(_D, _topic(GetEarliestMsgStoretimeRequest)),),
    RequestCode.QUERY_MESSAGE: (Need(_R, _topic(QueryMessageRequest)),),
    RequestCode.VIEW_MESSAGE_BY_ID: (Need(_R, _viewed_topic),),
    RequestCode.UPDATE_AND_CREATE_TOPIC: (Need(Operation.CREATE, _topic(CreateTopicRequest)),),
    RequestCode.GET_ROUTEINFO_BY_TOPIC: (Need(_D, _topic(GetRouteInfoRequest)),),
    RequestCode.GET_BROKER_CLUSTER_INFO: (Need(_D, _cluster),),
}


# --- the check ---------------------------------------------------------------------------------


def _resource_key(resource: Resource) -> str:
    """RocketMQ's ``Resource.getResourceKey``: ``Topic:t``, ``Group:g``, ``Cluster:c``."""
    kind, name = resource
    return f"{kind.value.capitalize()}:{name}"


def _checks(need: Need, names: Iterable[Resource]) -> Iterable[tuple[Operation, Resource]]:
    for kind, name in names:
        if kind is _T and name.startswith(RETRY_TOPIC_PREFIX):
            yield need.on_retry_group or need.operation, (_G, name[len(RETRY_TOPIC_PREFIX) :])
        else:
            yield need.operation, (kind, name)


async def denial(ctx: DoorContext, principal: Principal, cmd: RemotingCommand, peer_host: str) -> str | None:
    """Why ``principal`` may not make this request (RocketMQ's remark), or None when it may.

    A request whose names do not decode is refused (:data:`UNPARSED`), as RocketMQ does."""
    subject = f"User:{principal.name}"
    for need in NEEDS.get(cmd.code, ()):
        try:
            found = need.find(ctx, cmd)
            names = await found if inspect.isawaitable(found) else found
        except (RemotingRequestError, SparkMQError, ValueError, KeyError, TypeError):
            return UNPARSED
        if not names and need.anywhere_if_none and not authorize_any(principal, need.operation, _T):
            return f"{subject} has no permission to {need.operation.value} any topic from {peer_host}."
        for operation, resource in _checks(need, names):
            if not authorize(principal, operation, resource):
                return (
                    f"{subject} has no permission to access {_resource_key(resource)} from {peer_host}, "
                    f"{operation.value} is not allowed."
                )
    return None


class AclGuard:
    """The remoting server's guard (:data:`ingest_api.remoting.server.Guard`) when auth is on."""

    def __init__(self, ctx: DoorContext, auth: DoorAuth) -> None:
        self.ctx = ctx
        self.auth = auth

    def authenticate(self, cmd: RemotingCommand) -> Principal | str:
        """The signer's principal, or RocketMQ's remark for why the request is not signed right."""
        access_key = cmd.ext_fields.get(ACCESS_KEY)
        if not access_key:
            return NO_ACCESS_KEY
        found = self.auth.by_access_key(access_key)
        if found is None:
            return f"User:{access_key} is not found."
        principal, secret_key = found
        if not signature_matches(cmd.ext_fields, cmd.body, secret_key, cmd.version):
            return BAD_SIGNATURE
        return principal

    async def __call__(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        """None to let the request through; else the refusal to answer."""
        principal = self.authenticate(cmd)
        if isinstance(principal, str):
            log.info("remoting: %s from %s refused: %s", code_name(cmd.code), conn.peer, principal)
            return response_to(cmd, ResponseCode.NO_PERMISSION, principal)
        why = await denial(self.ctx, principal, cmd, conn.peer_host)
        if why is not None:
            log.info("remoting: %s from %s refused: %s", code_name(cmd.code), conn.peer, why)
            return response_to(cmd, ResponseCode.NO_PERMISSION, why)
        if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            topic = GetRouteInfoRequest.from_ext_fields(cmd.ext_fields).topic
            if creates_topic(self.ctx, topic) and not may_create_topic(principal, topic):
                return response_to(cmd, ResponseCode.TOPIC_NOT_EXIST, NO_ROUTE_REMARK + topic)
        conn.principal = principal
        return None


__all__ = ["NEEDS", "AclGuard", "Need", "denial"]
