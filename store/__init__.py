"""sparkmq's storage engine: RocketMQ's on-disk format behind one facade.

Usable on its own as a library::

    from store import MessageStore, StoreConfig, Message
    with MessageStore.open(StoreConfig(store_dir=path)) as ms:
        ms.put_message(Message(topic="orders", body=b"..."))

See docs/store_api.md.
"""

from store.commitlog.gather import GatheredRecords
from store.config import DEFAULT_DELAY_LEVELS, MIB, FlushDiskType, StoreConfig
from store.errors import (
    DataLost,
    IndexBehind,
    InvalidArgument,
    MessageTooLarge,
    SparkMQError,
    StoreClosed,
    StoreError,
    StoreLocked,
    StoreNotWritable,
    UnknownQueue,
    UnknownTopic,
)
from store.format.arrow_schema import MESSAGE_SCHEMA
from store.format.ids import ascii_rows, ascii_rows_array, decode_msg_id, encode_msg_id, msg_id_chars
from store.format.java_hash import java_string_hash, java_string_hashes
from store.format.vocabulary import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY,
    PROPERTY_PGROUP,
    PROPERTY_SEPARATOR,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TRANSACTION_ID,
    SYSTEM_PROPERTIES,
)
from store.io.atomic_file import read_json, write_json_atomically
from store.io.clock import Clock, wall_clock_ms
from store.message_store import MessageStore
from store.metadata.file_sizes import existing_config
from store.names import (
    DLQ_TOPIC_PREFIX,
    GROUP_MAX_LENGTH,
    ID_PATTERN,
    NAME_CHARS,
    NAME_PATTERN,
    RETRY_TOPIC_MAX_LENGTH,
    RETRY_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    SENDBACK_TOPIC,
    TIMER_TOPIC,
    TOPIC_MAX_LENGTH,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OFFSETS_TOPIC,
    TRANS_OP_HALF_TOPIC,
    dlq_topic,
    is_system_topic,
    retry_topic,
    validate_group,
    validate_topic,
)
from store.read.api import QueueReadApi
from store.read.queue_reader import BatchReadResult
from store.read.retry_view import present_retry
from store.read.store_reader import StoreReader
from store.read.tag_filter import parse_tag_expression
from store.services import ServiceHealth
from store.types import (
    Boundary,
    GetResult,
    GetStatus,
    Message,
    MessageView,
    PutResult,
    StoreHealth,
    StoreStats,
    StoreVerification,
)
from store.write.columns import MAX_PROPERTY_COLUMNS, UNPLACED, ProduceColumns, ProduceOutcome
from store.write.delay_levels import parse_delay_levels, parse_duration_ms
from store.write.encoded import EncodedRecords
from store.write.idempotence import MAX_PRODUCER_ID_CHARS, ProducerRef, request_uniq_keys
from store.write.relocate import NotRelocatable, Relocation, RelocationKind
from store.write.relocator import RelocationPointers
from store.write.results import BatchPutResult
from store.write.routing import sharding_queue, sharding_queues
from store.write.sendback import (
    DEFAULT_MAX_RECONSUME_TIMES,
    LADDER_BASE_LEVEL,
    sendback_request,
    sendback_requests,
)
from store.write.timers import TIMER_REQUEST_PROPERTIES, TimerIllegal, is_timer_request
from store.write.transactions import TxOutcome

__all__ = [
    "DEFAULT_DELAY_LEVELS",
    "DEFAULT_MAX_RECONSUME_TIMES",
    "DLQ_TOPIC_PREFIX",
    "GROUP_MAX_LENGTH",
    "ID_PATTERN",
    "LADDER_BASE_LEVEL",
    "MAX_PRODUCER_ID_CHARS",
    "MAX_PROPERTY_COLUMNS",
    "MESSAGE_SCHEMA",
    "MIB",
    "NAME_CHARS",
    "NAME_PATTERN",
    "NAME_VALUE_SEPARATOR",
    "PROPERTY_DELAY",
    "PROPERTY_PGROUP",
    "PROPERTY_SEPARATOR",
    "PROPERTY_TIMER_DELAY_MS",
    "PROPERTY_TIMER_DELAY_SEC",
    "PROPERTY_TIMER_DELIVER_MS",
    "PROPERTY_TRANSACTION_ID",
    "RETRY_TOPIC_MAX_LENGTH",
    "RETRY_TOPIC_PREFIX",
    "SCHEDULE_TOPIC",
    "SENDBACK_TOPIC",
    "SYSTEM_PROPERTIES",
    "TIMER_REQUEST_PROPERTIES",
    "TIMER_TOPIC",
    "TOPIC_MAX_LENGTH",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "TRANS_HALF_TOPIC",
    "TRANS_OFFSETS_TOPIC",
    "TRANS_OP_HALF_TOPIC",
    "UNPLACED",
    "BatchPutResult",
    "BatchReadResult",
    "Boundary",
    "Clock",
    "DataLost",
    "EncodedRecords",
    "FlushDiskType",
    "GatheredRecords",
    "GetResult",
    "GetStatus",
    "IndexBehind",
    "InvalidArgument",
    "Message",
    "MessageStore",
    "MessageTooLarge",
    "MessageView",
    "NotRelocatable",
    "ProduceColumns",
    "ProduceOutcome",
    "ProducerRef",
    "PutResult",
    "QueueReadApi",
    "Relocation",
    "RelocationKind",
    "RelocationPointers",
    "ServiceHealth",
    "SparkMQError",
    "StoreClosed",
    "StoreConfig",
    "StoreError",
    "StoreHealth",
    "StoreLocked",
    "StoreNotWritable",
    "StoreReader",
    "StoreStats",
    "StoreVerification",
    "TimerIllegal",
    "TxOutcome",
    "UnknownQueue",
    "UnknownTopic",
    "ascii_rows",
    "ascii_rows_array",
    "decode_msg_id",
    "dlq_topic",
    "encode_msg_id",
    "existing_config",
    "is_system_topic",
    "is_timer_request",
    "java_string_hash",
    "java_string_hashes",
    "msg_id_chars",
    "parse_delay_levels",
    "parse_duration_ms",
    "parse_tag_expression",
    "present_retry",
    "read_json",
    "request_uniq_keys",
    "retry_topic",
    "sendback_request",
    "sendback_requests",
    "sharding_queue",
    "sharding_queues",
    "validate_group",
    "validate_topic",
    "wall_clock_ms",
    "write_json_atomically",
]
