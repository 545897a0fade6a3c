"""The numbers of RocketMQ's remoting protocol, once: request codes, response codes, languages,
serialize types and the command flag bits.

Values are RocketMQ's (``remoting/protocol/RequestCode.java``, ``ResponseCode.java``,
``RemotingSysResponseCode.java``, ``LanguageCode.java``, ``SerializeType.java`` at apache/rocketmq
8fc57f14); the sysFlag bits are the store's (``store.SYSFLAG_*``). :class:`RequestCode` lists
every code a RocketMQ 4.x/5.x client, the admin tools or ali-ons send, plus the server-to-client
ones; codes only brokers, controllers or the name server exchange among themselves are left
out. Pure constants: no I/O.
"""

from __future__ import annotations

import enum
from typing import Final

from store import SYSFLAG_TX_COMMIT, SYSFLAG_TX_NOT, SYSFLAG_TX_ROLLBACK


class RequestCode(enum.IntEnum):
    """``RequestCode``: what a command asks for. Name-server and broker codes never overlap,
    so one port can serve both."""

    # --- broker: produce, consume, offsets -------------------------------------------------------
    SEND_MESSAGE = 10  # the long-name V1 header (C++ client <= 1.2.4, Java without smart msg)
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12  # by key, over the index
    QUERY_BROKER_OFFSET = 13
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15  # ali-ons sends it one-way
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    GET_BROKER_CONFIG = 26
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33  # by CommitLog offset (decoded from the offset msg id)
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36  # retry / DLQ
    END_TRANSACTION = 37  # one-way
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39  # server -> client, one-way, body = the half message
    NOTIFY_CONSUMER_IDS_CHANGED = 40  # server -> client, one-way
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ALL_CONSUMER_OFFSET = 43
    GET_ALL_DELAY_OFFSET = 45
    CHECK_CLIENT_CONFIG = 46
    # --- name server ----------------------------------------------------------------------------
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    # --- admin tools ------------------------------------------------------------------------------
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_PRODUCER_CONNECTION_LIST = 204
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    #: RocketMQ 4+/5: REGISTER_TOPIC_IN_NAMESRV. ali-ons 3.12 sends 217 as its old
    #: GET_KV_CONFIG_BY_VALUE (namespace, key) only from ``getProjectGroupByIp``, which it never calls.
    REGISTER_TOPIC_IN_NAMESRV = 217
    GET_KVLIST_BY_NAMESPACE = 219
    GET_TOPICS_BY_CLUSTER = 224
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    GET_CONSUMER_RUNNING_INFO = 307  # server -> client
    CONSUME_MESSAGE_DIRECTLY = 309  # server -> client
    SEND_MESSAGE_V2 = 310  # the short-name V2 header (a..n): Java, ali-ons, C++ >= 1.2.5
    GET_UNIT_TOPIC_LIST = 311
    SEND_BATCH_MESSAGE = 320  # V2 header, body = MessageBatch encoding
    QUERY_CONSUME_QUEUE = 321
    SEND_REPLY_MESSAGE = 324
    SEND_REPLY_MESSAGE_V2 = 325
    PUSH_REPLY_MESSAGE_TO_CLIENT = 326  # server -> client
    GET_TOPIC_CONFIG = 351
    LITE_PULL_MESSAGE = 361
    RECALL_MESSAGE = 370
    QUERY_ASSIGNMENT = 400
    SET_MESSAGE_REQUEST_MODE = 401
    # --- POP over remoting (RocketMQ 5 Java pop consumers; not ali-ons, not the C++ client) ---
    POP_MESSAGE = 200050
    ACK_MESSAGE = 200051
    PEEK_MESSAGE = 200052
    CHANGE_MESSAGE_INVISIBLETIME = 200053
    NOTIFICATION = 200054
    POLLING_INFO = 200055
    BATCH_ACK_MESSAGE = 200151


class ResponseCode(enum.IntEnum):
    """``RemotingSysResponseCode`` (0-4) and ``ResponseCode``: the ``code`` of a response."""

    # --- RemotingSysResponseCode ----------------------------------------------------------------
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    # --- ResponseCode ----------------------------------------------------------------------------
    FLUSH_DISK_TIMEOUT = 10  # send status FLUSH_DISK_TIMEOUT (the message is stored)
    SLAVE_NOT_AVAILABLE = 11  # send status SLAVE_NOT_AVAILABLE (stored)
    FLUSH_SLAVE_TIMEOUT = 12  # send status FLUSH_SLAVE_TIMEOUT (stored)
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14  # e.g. a write at a slave
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    FILTER_DATA_NOT_LATEST = 28
    INVALID_PARAMETER = 29
    TRANSACTION_SHOULD_COMMIT = 200
    TRANSACTION_SHOULD_ROLLBACK = 201
    TRANSACTION_STATE_UNKNOW = 202  # sic
    TRANSACTION_STATE_GROUP_WRONG = 203
    NO_BUYER_ID = 204
    NOT_IN_CURRENT_UNIT = 205
    CONSUMER_NOT_ONLINE = 206
    CONSUME_MSG_TIMEOUT = 207
    NO_MESSAGE = 208
    POLLING_FULL = 209
    POLLING_TIMEOUT = 210
    BROKER_NOT_EXIST = 211
    BROKER_DISPATCH_NOT_COMPLETE = 212
    BROADCAST_CONSUMPTION = 213
    FLOW_CONTROL = 215
    NOT_LEADER_FOR_QUEUE = 501
    ILLEGAL_OPERATION = 604


class LanguageCode(enum.IntEnum):
    """``LanguageCode``: the binary header carries the number, the JSON header the name."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12
    NODE_JS = 13


class SerializeType(enum.IntEnum):
    """``SerializeType``: the top byte of the frame's header-length word."""

    JSON = 0
    ROCKETMQ = 1


#: ``flag`` bit 0 (``RPC_TYPE``): set on responses.
FLAG_RESPONSE: Final = 1 << 0
#: ``flag`` bit 1 (``RPC_ONEWAY``): the sender expects no answer; never answer it.
FLAG_ONEWAY: Final = 1 << 1

#: ``PermName``: queue permissions in route bodies and UPDATE_AND_CREATE_TOPIC.
PERM_PRIORITY: Final = 1 << 3
PERM_READ: Final = 1 << 2
PERM_WRITE: Final = 1 << 1
PERM_INHERIT: Final = 1 << 0

#: ``PullSysFlag`` bits of PULL_MESSAGE's ``sysFlag``.
PULL_FLAG_COMMIT_OFFSET: Final = 1 << 0
PULL_FLAG_SUSPEND: Final = 1 << 1
PULL_FLAG_SUBSCRIPTION: Final = 1 << 2
PULL_FLAG_CLASS_FILTER: Final = 1 << 3
PULL_FLAG_LITE_PULL: Final = 1 << 4

#: END_TRANSACTION's ``commitOrRollback``: the sysFlag transaction bits (``MessageSysFlag``).
TRANSACTION_NOT_TYPE: Final = SYSFLAG_TX_NOT
TRANSACTION_COMMIT_TYPE: Final = SYSFLAG_TX_COMMIT
TRANSACTION_ROLLBACK_TYPE: Final = SYSFLAG_TX_ROLLBACK

#: ``MixAll.MASTER_ID``: the brokerId of a master in route bodies.
MASTER_ID: Final = 0
#: ``TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC``: the default topic clients fall back to.
AUTO_CREATE_TOPIC_KEY: Final = "TBW102"


def code_name(code: int) -> str:
    """``SEND_MESSAGE_V2(310)`` for a known request code, ``code 999`` otherwise (log lines)."""
    try:
        return f"{RequestCode(code).name}({code})"
    except ValueError:
        return f"code {code}"
