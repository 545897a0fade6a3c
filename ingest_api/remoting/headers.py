"""Typed custom headers of every request code the door serves, and of their responses.

Field names on the wire are RocketMQ's (``remoting/protocol/header/*.java``); attributes are
snake_case. Required fields are Java's ``@CFNotNull`` ones (a client that leaves one out gets
``SYSTEM_ERROR`` naming it, as from RocketMQ). See :mod:`ingest_api.remoting.header_fields`
for the parsing rules.

SEND_MESSAGE (10) carries :class:`SendMessageRequest` under its long V1 names;
SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320) under the letters ``a``..``n``
(:data:`SEND_V2_NAMES`); :func:`decode_send_request` picks by code.

The message ``properties`` string (``name\\x01value\\x02``...) and the offset msg id (store
IPv4 + port + CommitLog offset, 32 hex) are the store's codecs, re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from ingest_api.remoting.codec import RemotingCommand
from ingest_api.remoting.codes import RequestCode
from ingest_api.remoting.errors import HeaderFieldError
from ingest_api.remoting.header_fields import Header, optional, wire
from store import decode_msg_id, decode_properties, encode_msg_id, encode_properties

__all__ = [
    "SEND_V1_NAMES",
    "SEND_V2_NAMES",
    "CheckTransactionStateRequest",
    "ConsumerSendMsgBackRequest",
    "CreateTopicRequest",
    "EndTransactionRequest",
    "GetConsumerListByGroupRequest",
    "GetEarliestMsgStoretimeRequest",
    "GetKVConfigRequest",
    "GetKVConfigResponse",
    "GetMaxOffsetRequest",
    "GetMinOffsetRequest",
    "GetRouteInfoRequest",
    "Header",
    "NotifyConsumerIdsChangedRequest",
    "OffsetResponse",
    "PullMessageRequest",
    "PullMessageResponse",
    "QueryConsumerOffsetRequest",
    "QueryMessageRequest",
    "QueryMessageResponse",
    "SearchOffsetRequest",
    "SendMessageRequest",
    "SendMessageResponse",
    "TimestampResponse",
    "UnregisterClientRequest",
    "UpdateConsumerOffsetRequest",
    "ViewMessageRequest",
    "decode_msg_id",
    "decode_properties",
    "decode_send_request",
    "encode_msg_id",
    "encode_properties",
    "send_request_ext_fields",
]

# --- sending -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SendMessageRequest(Header):
    """``SendMessageRequestHeader`` (V1 names) = ``SendMessageRequestHeaderV2`` (letters)."""

    producer_group: str = wire("producerGroup")
    topic: str = wire("topic")
    default_topic: str = wire("defaultTopic")  # TBW102
    default_topic_queue_nums: int = wire("defaultTopicQueueNums")
    queue_id: int = wire("queueId")
    sys_flag: int = wire("sysFlag")  # MessageSysFlag: compressed, transaction type...
    born_timestamp: int = wire("bornTimestamp")  # ms
    flag: int = wire("flag")  # the user int
    properties: str | None = optional("properties")  # name\x01value\x02...
    reconsume_times: int | None = optional("reconsumeTimes")
    unit_mode: bool | None = optional("unitMode")
    max_reconsume_times: int | None = optional("maxReconsumeTimes")
    batch: bool | None = optional("batch")
    broker_name: str | None = optional("bname")

    def property_map(self) -> dict[str, str]:
        """The decoded ``properties`` string (empty names or values dropped)."""
        return decode_properties(self.properties.encode("utf-8")) if self.properties else {}


#: attribute -> V1 wire name (the declared names).
SEND_V1_NAMES: Final[Mapping[str, str]] = {
    "producer_group": "producerGroup",
    "topic": "topic",
    "default_topic": "defaultTopic",
    "default_topic_queue_nums": "defaultTopicQueueNums",
    "queue_id": "queueId",
    "sys_flag": "sysFlag",
    "born_timestamp": "bornTimestamp",
    "flag": "flag",
    "properties": "properties",
    "reconsume_times": "reconsumeTimes",
    "unit_mode": "unitMode",
    "max_reconsume_times": "maxReconsumeTimes",
    "batch": "batch",
    "broker_name": "bname",
}
#: attribute -> V2 wire letter (``SendMessageRequestHeaderV2``).
SEND_V2_NAMES: Final[Mapping[str, str]] = dict(zip(SEND_V1_NAMES, "abcdefghijklmn", strict=True))
#: The codes whose header uses the V2 letters.
_V2_CODES: Final = frozenset({RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE})


def decode_send_request(cmd: RemotingCommand) -> SendMessageRequest:
    """The send header of a SEND_MESSAGE, SEND_MESSAGE_V2 or SEND_BATCH_MESSAGE request."""
    if cmd.code == RequestCode.SEND_MESSAGE:
        return SendMessageRequest.from_ext_fields(cmd.ext_fields, SEND_V1_NAMES)
    if cmd.code in _V2_CODES:
        return SendMessageRequest.from_ext_fields(cmd.ext_fields, SEND_V2_NAMES)
    raise HeaderFieldError(f"code {cmd.code} is not a send request")


def send_request_ext_fields(header: SendMessageRequest, *, v2: bool) -> dict[str, str]:
    """The extFields of a send request in the V2 letters or the V1 names (clients, tests)."""
    return header.to_ext_fields(SEND_V2_NAMES if v2 else SEND_V1_NAMES)


@dataclass(frozen=True, slots=True)
class SendMessageResponse(Header):
    """``SendMessageResponseHeader``. ``transaction_id`` is the message's UNIQ_KEY."""

    msg_id: str = wire("msgId")  # offset msg id, 32 hex (a batch: the ids joined by ',')
    queue_id: int = wire("queueId")
    queue_offset: int = wire("queueOffset")
    transaction_id: str | None = optional("transactionId")
    batch_uniq_id: str | None = optional("batchUniqId")
    recall_handle: str | None = optional("recallHandle")


# --- transactions ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EndTransactionRequest(Header):
    """``EndTransactionRequestHeader`` (END_TRANSACTION, one-way). ``commit_or_rollback``:
    8 commit, 12 rollback, 0 unknown (``codes.TRANSACTION_*``)."""

    producer_group: str = wire("producerGroup")
    tran_state_table_offset: int = wire("tranStateTableOffset")  # the half's queue offset
    commit_log_offset: int = wire("commitLogOffset")  # the half's CommitLog offset
    commit_or_rollback: int = wire("commitOrRollback")
    msg_id: str = wire("msgId")
    topic: str | None = optional("topic")
    from_transaction_check: bool = optional("fromTransactionCheck", False)
    transaction_id: str | None = optional("transactionId")


@dataclass(frozen=True, slots=True)
class CheckTransactionStateRequest(Header):
    """``CheckTransactionStateRequestHeader`` (server -> client CHECK_TRANSACTION_STATE)."""

    tran_state_table_offset: int = wire("tranStateTableOffset")
    commit_log_offset: int = wire("commitLogOffset")
    topic: str | None = optional("topic")
    msg_id: str | None = optional("msgId")  # the UNIQ_KEY
    transaction_id: str | None = optional("transactionId")
    offset_msg_id: str | None = optional("offsetMsgId")


# --- pulling -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PullMessageRequest(Header):
    """``PullMessageRequestHeader``. ``sys_flag`` holds ``codes.PULL_FLAG_*``;
    ``subscription`` is the tag expression (``*`` or ``a || b``) when the flag says so."""

    consumer_group: str = wire("consumerGroup")
    topic: str = wire("topic")
    queue_id: int = wire("queueId")
    queue_offset: int = wire("queueOffset")
    max_msg_nums: int = wire("maxMsgNums")
    sys_flag: int = wire("sysFlag")
    commit_offset: int = wire("commitOffset")
    suspend_timeout_millis: int = wire("suspendTimeoutMillis")
    sub_version: int = wire("subVersion")
    subscription: str | None = optional("subscription")
    expression_type: str | None = optional("expressionType")  # TAG (default) or SQL92
    max_msg_bytes: int | None = optional("maxMsgBytes")
    request_source: int | None = optional("requestSource")
    proxy_forward_client_id: str | None = optional("proxyFrowardClientId")  # sic


@dataclass(frozen=True, slots=True)
class PullMessageResponse(Header):
    """``PullMessageResponseHeader``; the body is the raw CommitLog records."""

    suggest_which_broker_id: int = wire("suggestWhichBrokerId")
    next_begin_offset: int = wire("nextBeginOffset")
    min_offset: int = wire("minOffset")
    max_offset: int = wire("maxOffset")
    offset_delta: int | None = optional("offsetDelta")
    topic_sys_flag: int | None = optional("topicSysFlag")
    group_sys_flag: int | None = optional("groupSysFlag")
    forbidden_type: int | None = optional("forbiddenType")


# --- offsets -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueryConsumerOffsetRequest(Header):
    consumer_group: str = wire("consumerGroup")
    topic: str = wire("topic")
    queue_id: int = wire("queueId")
    set_zero_if_not_found: bool | None = optional("setZeroIfNotFound")


@dataclass(frozen=True, slots=True)
class UpdateConsumerOffsetRequest(Header):
    consumer_group: str = wire("consumerGroup")
    topic: str = wire("topic")
    queue_id: int = wire("queueId")
    commit_offset: int = wire("commitOffset")


@dataclass(frozen=True, slots=True)
class GetMaxOffsetRequest(Header):
    topic: str = wire("topic")
    queue_id: int = wire("queueId")
    committed: bool = optional("committed", True)


@dataclass(frozen=True, slots=True)
class GetMinOffsetRequest(Header):
    topic: str = wire("topic")
    queue_id: int = wire("queueId")


@dataclass(frozen=True, slots=True)
class SearchOffsetRequest(Header):
    """``boundary_type``: ``lower`` (default) or ``upper`` (RocketMQ 5 ``BoundaryType``)."""

    topic: str = wire("topic")
    queue_id: int = wire("queueId")
    timestamp: int = wire("timestamp")  # ms
    boundary_type: str | None = optional("boundaryType")


@dataclass(frozen=True, slots=True)
class OffsetResponse(Header):
    """The answer of QUERY_CONSUMER_OFFSET, GET_MAX/MIN_OFFSET and SEARCH_OFFSET_BY_TIMESTAMP."""

    offset: int = wire("offset")


@dataclass(frozen=True, slots=True)
class GetEarliestMsgStoretimeRequest(Header):
    topic: str = wire("topic")
    queue_id: int = wire("queueId")


@dataclass(frozen=True, slots=True)
class TimestampResponse(Header):
    timestamp: int = wire("timestamp")  # ms


# --- retries, clients, tools -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConsumerSendMsgBackRequest(Header):
    """``ConsumerSendMsgBackRequestHeader``: ``offset`` is the failed message's CommitLog offset;
    ``delay_level`` 0 = the broker's ladder (3 + reconsume times), < 0 = straight to the DLQ."""

    offset: int = wire("offset")
    group: str = wire("group")
    delay_level: int = wire("delayLevel")
    origin_msg_id: str | None = optional("originMsgId")
    origin_topic: str | None = optional("originTopic")
    unit_mode: bool = optional("unitMode", False)
    max_reconsume_times: int | None = optional("maxReconsumeTimes")


@dataclass(frozen=True, slots=True)
class GetConsumerListByGroupRequest(Header):
    consumer_group: str = wire("consumerGroup")


@dataclass(frozen=True, slots=True)
class NotifyConsumerIdsChangedRequest(Header):
    """Server -> client NOTIFY_CONSUMER_IDS_CHANGED (one-way)."""

    consumer_group: str = wire("consumerGroup")


@dataclass(frozen=True, slots=True)
class UnregisterClientRequest(Header):
    client_id: str = wire("clientID")
    producer_group: str | None = optional("producerGroup")
    consumer_group: str | None = optional("consumerGroup")


@dataclass(frozen=True, slots=True)
class CreateTopicRequest(Header):
    """``CreateTopicRequestHeader`` (UPDATE_AND_CREATE_TOPIC). ``perm``: ``codes.PERM_*``."""

    topic: str = wire("topic")
    default_topic: str = wire("defaultTopic")
    read_queue_nums: int = wire("readQueueNums")
    write_queue_nums: int = wire("writeQueueNums")
    perm: int = wire("perm")
    topic_filter_type: str = wire("topicFilterType")  # SINGLE_TAG / MULTI_TAG
    topic_sys_flag: int | None = optional("topicSysFlag")
    order: bool = optional("order", False)
    attributes: str | None = optional("attributes")
    force: bool = optional("force", False)


@dataclass(frozen=True, slots=True)
class ViewMessageRequest(Header):
    """VIEW_MESSAGE_BY_ID: the CommitLog offset decoded from an offset msg id."""

    offset: int = wire("offset")
    topic: str | None = optional("topic")


@dataclass(frozen=True, slots=True)
class QueryMessageRequest(Header):
    """QUERY_MESSAGE: messages of ``topic`` whose KEYS hold ``key``, stored in the time range."""

    topic: str = wire("topic")
    key: str = wire("key")
    max_num: int = wire("maxNum")
    begin_timestamp: int = wire("beginTimestamp")  # ms
    end_timestamp: int = wire("endTimestamp")  # ms


@dataclass(frozen=True, slots=True)
class QueryMessageResponse(Header):
    index_last_update_timestamp: int = wire("indexLastUpdateTimestamp")  # ms
    index_last_update_phyoffset: int = wire("indexLastUpdatePhyoffset")


# --- name server ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GetRouteInfoRequest(Header):
    """GET_ROUTEINFO_BY_TOPIC (``GetRouteInfoRequestHeader``)."""

    topic: str = wire("topic")
    accept_standard_json_only: bool | None = optional("acceptStandardJsonOnly")


@dataclass(frozen=True, slots=True)
class GetKVConfigRequest(Header):
    namespace: str = wire("namespace")
    key: str = wire("key")


@dataclass(frozen=True, slots=True)
class GetKVConfigResponse(Header):
    value: str | None = optional("value")
