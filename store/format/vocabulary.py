"""The words of a record: RocketMQ's sysFlag bits and property names, and sparkmq's own, once.

Every module that reads or writes a property or a sysFlag bit takes its name from here
(RocketMQ's ``MessageSysFlag`` and ``MessageConst``), including the few properties that are
sparkmq's own (send-back requests, transaction ends). The dispatch rules that hang on the
transaction bits are here too: a PREPARED or ROLLBACK record enters no ConsumeQueue, a ROLLBACK
record no key index (RocketMQ ``DefaultMessageStore.doDispatch`` / ``IndexService``).

Pure constants and functions: no I/O.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

# --- sysFlag bits (MessageSysFlag) -----------------------------------------------------------
SYSFLAG_COMPRESSED: Final = 0x1
SYSFLAG_MULTI_TAGS: Final = 0x2
SYSFLAG_TX_NOT: Final = 0x0
SYSFLAG_TX_PREPARED: Final = 0x4
SYSFLAG_TX_COMMIT: Final = 0x8
SYSFLAG_TX_ROLLBACK: Final = 0xC
SYSFLAG_TX_MASK: Final = 0xC
SYSFLAG_BORNHOST_V6: Final = 0x10
SYSFLAG_STOREHOST_V6: Final = 0x20
SYSFLAG_NEED_UNWRAP: Final = 0x40
SYSFLAG_INNER_BATCH: Final = 0x80
SYSFLAG_COMPRESSION_LZ4: Final = 0x100
SYSFLAG_COMPRESSION_ZSTD: Final = 0x200
SYSFLAG_COMPRESSION_ZLIB: Final = 0x300
SYSFLAG_COMPRESSION_MASK: Final = 0x700

# --- Properties (MessageConst) ---------------------------------------------------------------
NAME_VALUE_SEPARATOR: Final = "\x01"
PROPERTY_SEPARATOR: Final = "\x02"

PROPERTY_KEYS: Final = "KEYS"
PROPERTY_TAGS: Final = "TAGS"
PROPERTY_WAIT_STORE_MSG_OK: Final = "WAIT"
PROPERTY_DELAY_TIME_LEVEL: Final = "DELAY"
PROPERTY_RETRY_TOPIC: Final = "RETRY_TOPIC"
PROPERTY_REAL_TOPIC: Final = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID: Final = "REAL_QID"
PROPERTY_TRANSACTION_PREPARED: Final = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP: Final = "PGROUP"
PROPERTY_MIN_OFFSET: Final = "MIN_OFFSET"
PROPERTY_MAX_OFFSET: Final = "MAX_OFFSET"
PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: Final = "UNIQ_KEY"
PROPERTY_MAX_RECONSUME_TIMES: Final = "MAX_RECONSUME_TIMES"
PROPERTY_RECONSUME_TIME: Final = "RECONSUME_TIME"
PROPERTY_ORIGIN_MESSAGE_ID: Final = "ORIGIN_MESSAGE_ID"
PROPERTY_TRANSACTION_ID: Final = "__transactionId__"
PROPERTY_TRANSACTION_CHECK_TIMES: Final = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS: Final = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET: Final = "TRAN_PREPARED_QUEUE_OFFSET"
PROPERTY_SHARDING_KEY: Final = "__SHARDINGKEY"
PROPERTY_TIMER_DELIVER_MS: Final = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC: Final = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS: Final = "TIMER_DELAY_MS"
PROPERTY_TIMER_OUT_MS: Final = "TIMER_OUT_MS"
PROPERTY_TIMER_ENQUEUE_MS: Final = "TIMER_ENQUEUE_MS"
PROPERTY_TIMER_DEQUEUE_MS: Final = "TIMER_DEQUEUE_MS"
PROPERTY_TIMER_ROLL_TIMES: Final = "TIMER_ROLL_TIMES"
PROPERTY_TIMER_DEL_UNIQKEY: Final = "TIMER_DEL_UNIQKEY"
#: The timer request properties (RocketMQ 5), in order of precedence (store.write.timers).
TIMER_REQUEST_PROPERTIES: Final = (
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELIVER_MS,
)
PROPERTY_STARTDE_LIVER_TIME: Final = "__STARTDELIVERTIME"
PROPERTY_DLQ_ORIGIN_TOPIC: Final = "DLQ_ORIGIN_TOPIC"
PROPERTY_DLQ_ORIGIN_MESSAGE_ID: Final = "DLQ_ORIGIN_MESSAGE_ID"
PROPERTY_BORN_TIMESTAMP: Final = "BORN_TIMESTAMP"
PROPERTY_INNER_NUM: Final = "INNER_NUM"
PROPERTY_INNER_BASE: Final = "INNER_BASE"
#: RocketMQ ``MessageConst.STRING_HASH_SET``: the system property names. Producers may not set
#: them (RocketMQ's client refuses them as user properties; so do sparkmq's front doors).
SYSTEM_PROPERTIES: Final = frozenset(
    {
        "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "TRAN_MSG",
        "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG",
        "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME", "MSG_REGION", "TRACE_ON", "UNIQ_KEY",
        "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "TRAN_PREPARED_QUEUE_OFFSET",
        "TRANSACTION_CHECK_TIMES", "CHECK_IMMUNITY_TIME_IN_SECONDS", "INSTANCE_ID", "CORRELATION_ID",
        "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE",
        "__STARTDELIVERTIME", "SHARDING_KEY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS",
        "TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TIMER_DEL_UNIQKEY",
    }
)  # fmt: skip
#: RocketMQ 5 (gRPC proxy): the born host a producer reported, and its trace context.
PROPERTY_BORN_HOST: Final = "__BORNHOST"
PROPERTY_TRACE_CONTEXT: Final = "TRACE_CONTEXT"
#: ``MessageConst.STRING_HASH_SET`` of RocketMQ 5 (apache/rocketmq 8fc57f14): the 4.x set plus
#: the POP, timer-level, born-host/timestamp, DLQ-origin and CRC32 names. The gRPC door hides
#: them from a received message's user properties and refuses them as a sent one's, as the
#: proxy does (``TRACE_CONTEXT`` is not in it there either).
SYSTEM_PROPERTIES_V5: Final = SYSTEM_PROPERTIES | {
    "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME", "DUP_INFO", "EXTEND_UNIQ_INFO", "INNER_MULTI_QUEUE_OFFSET",
    "TIMER_DELAY_LEVEL", PROPERTY_BORN_HOST, PROPERTY_BORN_TIMESTAMP, PROPERTY_DLQ_ORIGIN_TOPIC,
    PROPERTY_DLQ_ORIGIN_MESSAGE_ID, "__CRC32#",
}  # fmt: skip
#: Properties with this prefix are transient in RocketMQ and never stored.
TRANSIENT_PROPERTY_PREFIX: Final = "__RMQ.TRANSIENT."
#: Aliases the rest of the codebase reads more easily.
PROPERTY_UNIQ_KEY: Final = PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
PROPERTY_DELAY: Final = PROPERTY_DELAY_TIME_LEVEL
PROPERTY_REAL_QID: Final = PROPERTY_REAL_QUEUE_ID
PROPERTY_TRAN_MSG: Final = PROPERTY_TRANSACTION_PREPARED
PROPERTY_PGROUP: Final = PROPERTY_PRODUCER_GROUP

# --- sparkmq's own properties (never set by producers: the doors refuse them) ------------------
#: A send-back request (``rmq_sys_sendback``): the consumer group, the origin message and the
#: attempt, and the ladder's settings at the time of the request.
PROPERTY_SENDBACK_GROUP: Final = "SENDBACK_GROUP"
PROPERTY_SENDBACK_ORIGIN: Final = "SENDBACK_ORIGIN"
PROPERTY_SENDBACK_ATTEMPT: Final = "SENDBACK_ATTEMPT"
PROPERTY_SENDBACK_DELAY_LEVEL: Final = "SENDBACK_DELAY_LEVEL"
PROPERTY_SENDBACK_MAX_RECONSUME: Final = "SENDBACK_MAX_RECONSUME"
PROPERTY_SENDBACK_RETRY_QUEUES: Final = "SENDBACK_RETRY_QUEUES"
#: In a cluster, the first of the receiving broker's own queue ids of %RETRY%group (absent: 0)
#: and its own queue id of %DLQ%group (absent: 0): the retry lands on this broker's queues.
PROPERTY_SENDBACK_RETRY_BASE: Final = "SENDBACK_RETRY_BASE"
PROPERTY_SENDBACK_DLQ_QUEUE: Final = "SENDBACK_DLQ_QUEUE"
#: On a transaction's op record: how it ended (commit, rollback, discard).
PROPERTY_TX_END: Final = "SPARKMQ_TX_END"


# --- dispatch rules on the transaction bits -----------------------------------------------------
def enters_consume_queue(sys_flag: int) -> bool:
    """A record is dispatched to its ConsumeQueue unless it is a PREPARED or ROLLBACK one."""
    return sys_flag & SYSFLAG_TX_MASK not in (SYSFLAG_TX_PREPARED, SYSFLAG_TX_ROLLBACK)


def enter_consume_queue(sys_flags: npt.NDArray[np.int32]) -> npt.NDArray[np.bool_]:
    """:func:`enters_consume_queue` for a column of sysFlags."""
    tx_type = sys_flags & SYSFLAG_TX_MASK
    wanted: npt.NDArray[np.bool_] = (tx_type != SYSFLAG_TX_PREPARED) & (tx_type != SYSFLAG_TX_ROLLBACK)
    return wanted


def enter_index(sys_flags: npt.NDArray[np.int32]) -> npt.NDArray[np.bool_]:
    """Which records of a column of sysFlags enter the key index: all but ROLLBACK ones."""
    wanted: npt.NDArray[np.bool_] = (sys_flags & SYSFLAG_TX_MASK) != SYSFLAG_TX_ROLLBACK
    return wanted
