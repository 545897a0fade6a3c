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
    FlushSlaveTimeout,
    IndexBehind,
    InvalidArgument,
    MessageTooLarge,
    NotMaster,
    ReplicaFenced,
    ReplicatedDataCorrupt,
    ReplicationGap,
    SlaveNotAvailable,
    SparkMQError,
    StoreClosed,
    StoreError,
    StoreLocked,
    StoreNotWritable,
    UnknownQueue,
    UnknownTopic,
)
from store.format import vocabulary
from store.format.arrow_schema import EMPTY_MESSAGE_BATCH, MESSAGE_SCHEMA
from store.format.ids import ascii_rows, ascii_rows_array, decode_msg_id, encode_msg_id, msg_id_chars
from store.format.java_hash import java_string_hash, java_string_hashes
from store.format.kafka_arrow import HEADERS_TYPE as KAFKA_HEADERS_TYPE
from store.format.kafka_arrow import KafkaView, kafka_to_message_columns, kafka_view
from store.format.kafka_mapping import HEADERS_PROPERTY as KAFKA_HEADERS_PROPERTY
from store.format.kafka_mapping import KEY_PROPERTY as KAFKA_KEY_PROPERTY
from store.format.kafka_mapping import NULL_VALUE_PROPERTY as KAFKA_NULL_VALUE_PROPERTY
from store.format.kafka_mapping import RESERVED_PROPERTIES as KAFKA_RESERVED_PROPERTIES
from store.format.kafka_mapping import SCHEDULING_HEADERS as KAFKA_SCHEDULING_HEADERS
from store.format.kafka_mapping import TIMESTAMP_TYPE_CREATE_TIME as KAFKA_TIMESTAMP_TYPE_CREATE_TIME
from store.format.kafka_mapping import KafkaHeader
from store.format.kafka_mapping import has_scheduling as kafka_has_scheduling
from store.format.kafka_mapping import headers_to_properties as kafka_headers_to_properties
from store.format.kafka_mapping import key_to_store as kafka_key_to_store
from store.format.kafka_mapping import split_scheduling as kafka_split_scheduling
from store.format.kafka_mapping import stored_headers as stored_kafka_headers
from store.format.kafka_mapping import stored_key as stored_kafka_key
from store.format.kafka_mapping import stored_value as stored_kafka_value
from store.format.record import RecordFields, decode_properties, encode_properties
from store.format.vocabulary import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY,
    PROPERTY_PGROUP,
    PROPERTY_SEPARATOR,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TRANSACTION_ID,
    SYSFLAG_COMPRESSED,
    SYSFLAG_COMPRESSION_MASK,
    SYSFLAG_COMPRESSION_ZLIB,
    SYSFLAG_TX_COMMIT,
    SYSFLAG_TX_NOT,
    SYSFLAG_TX_PREPARED,
    SYSFLAG_TX_ROLLBACK,
    SYSTEM_PROPERTIES,
    TIMER_REQUEST_PROPERTIES,
)
from store.io.atomic_file import read_json, write_atomically, write_json_atomically
from store.io.clock import Clock, wall_clock_ms
from store.message_store import MessageStore
from store.metadata.file_sizes import existing_config
from store.metadata.topic_config import MAX_QUEUES_PER_TOPIC
from store.names import (
    CONSUMER_OFFSETS_TOPIC,
    DELAY_OPERATOR,
    DLQ_TOPIC_PREFIX,
    GROUP_MAX_LENGTH,
    GROUP_NAME_PATTERN,
    ID_PATTERN,
    KAFKA_TXN_STATE_TOPIC,
    NAME_CHARS,
    NAME_CHARSET,
    NAME_PATTERN,
    POP_STATE_TOPIC,
    RETRY_OPERATOR,
    RETRY_TOPIC_MAX_LENGTH,
    RETRY_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    SENDBACK_TOPIC,
    SINK_STAGING_TOPIC,
    SYSTEM_TOPIC_PREFIX,
    SYSTEM_TOPICS,
    TIMER_TOPIC,
    TOPIC_MAX_LENGTH,
    TOPIC_NAME_PATTERN,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OFFSETS_TOPIC,
    TRANS_OP_HALF_TOPIC,
    TRANSACTION_OPERATOR,
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
    dead_letter_record,
    sendback_request,
    sendback_requests,
)
from store.write.timers import TimerIllegal, is_timer_request
from store.write.transactions import TxOutcome

__all__ = [
    "CONSUMER_OFFSETS_TOPIC",
    "DEFAULT_DELAY_LEVELS",
    "DEFAULT_MAX_RECONSUME_TIMES",
    "DELAY_OPERATOR",
    "DLQ_TOPIC_PREFIX",
    "EMPTY_MESSAGE_BATCH",
    "GROUP_MAX_LENGTH",
    "GROUP_NAME_PATTERN",
    "ID_PATTERN",
    "KAFKA_HEADERS_PROPERTY",
    "KAFKA_HEADERS_TYPE",
    "KAFKA_KEY_PROPERTY",
    "KAFKA_NULL_VALUE_PROPERTY",
    "KAFKA_RESERVED_PROPERTIES",
    "KAFKA_SCHEDULING_HEADERS",
    "KAFKA_TIMESTAMP_TYPE_CREATE_TIME",
    "KAFKA_TXN_STATE_TOPIC",
    "LADDER_BASE_LEVEL",
    "MAX_PRODUCER_ID_CHARS",
    "MAX_PROPERTY_COLUMNS",
    "MAX_QUEUES_PER_TOPIC",
    "MESSAGE_SCHEMA",
    "MIB",
    "NAME_CHARS",
    "NAME_CHARSET",
    "NAME_PATTERN",
    "NAME_VALUE_SEPARATOR",
    "POP_STATE_TOPIC",
    "PROPERTY_DELAY",
    "PROPERTY_PGROUP",
    "PROPERTY_SEPARATOR",
    "PROPERTY_TIMER_DELAY_MS",
    "PROPERTY_TIMER_DELAY_SEC",
    "PROPERTY_TIMER_DELIVER_MS",
    "PROPERTY_TRANSACTION_ID",
    "RETRY_OPERATOR",
    "RETRY_TOPIC_MAX_LENGTH",
    "RETRY_TOPIC_PREFIX",
    "SCHEDULE_TOPIC",
    "SENDBACK_TOPIC",
    "SINK_STAGING_TOPIC",
    "SYSFLAG_COMPRESSED",
    "SYSFLAG_COMPRESSION_MASK",
    "SYSFLAG_COMPRESSION_ZLIB",
    "SYSFLAG_TX_COMMIT",
    "SYSFLAG_TX_NOT",
    "SYSFLAG_TX_PREPARED",
    "SYSFLAG_TX_ROLLBACK",
    "SYSTEM_PROPERTIES",
    "SYSTEM_TOPICS",
    "SYSTEM_TOPIC_PREFIX",
    "TIMER_REQUEST_PROPERTIES",
    "TIMER_TOPIC",
    "TOPIC_MAX_LENGTH",
    "TOPIC_NAME_PATTERN",
    "TRANSACTION_OPERATOR",
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
    "FlushSlaveTimeout",
    "GatheredRecords",
    "GetResult",
    "GetStatus",
    "IndexBehind",
    "InvalidArgument",
    "KafkaHeader",
    "KafkaView",
    "Message",
    "MessageStore",
    "MessageTooLarge",
    "MessageView",
    "NotMaster",
    "NotRelocatable",
    "ProduceColumns",
    "ProduceOutcome",
    "ProducerRef",
    "PutResult",
    "QueueReadApi",
    "RecordFields",
    "Relocation",
    "RelocationKind",
    "RelocationPointers",
    "ReplicaFenced",
    "ReplicatedDataCorrupt",
    "ReplicationGap",
    "ServiceHealth",
    "SlaveNotAvailable",
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
    "dead_letter_record",
    "decode_msg_id",
    "decode_properties",
    "dlq_topic",
    "encode_msg_id",
    "encode_properties",
    "existing_config",
    "is_system_topic",
    "is_timer_request",
    "java_string_hash",
    "java_string_hashes",
    "kafka_has_scheduling",
    "kafka_headers_to_properties",
    "kafka_key_to_store",
    "kafka_split_scheduling",
    "kafka_to_message_columns",
    "kafka_view",
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
    "stored_kafka_headers",
    "stored_kafka_key",
    "stored_kafka_value",
    "validate_group",
    "validate_topic",
    # the words of a record (property names, sysFlag bits) as one namespace: store.vocabulary.X
    "vocabulary",
    "wall_clock_ms",
    "write_atomically",
    "write_json_atomically",
]
