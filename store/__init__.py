"""sparkmq's storage engine: RocketMQ's on-disk format behind one facade.

Usable on its own as a library::

    from store import MessageStore, StoreConfig, Message
    with MessageStore.open(StoreConfig(store_dir=path)) as ms:
        ms.put_message(Message(topic="orders", body=b"..."))

See docs/store_api.md.
"""

from store.appender import BatchPutResult
from store.arrow_schema import MESSAGE_SCHEMA
from store.config import FlushDiskType, StoreConfig
from store.errors import (
    DataLost,
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
from store.idempotence import ProducerRef
from store.layout import existing_config
from store.message_store import MessageStore, StoreStats
from store.queue_reader import BatchReadResult
from store.reader import StoreReader
from store.types import Boundary, GetResult, GetStatus, Message, MessageView, PutResult

__all__ = [
    "MESSAGE_SCHEMA",
    "BatchPutResult",
    "BatchReadResult",
    "Boundary",
    "DataLost",
    "FlushDiskType",
    "GetResult",
    "GetStatus",
    "InvalidArgument",
    "Message",
    "MessageStore",
    "MessageTooLarge",
    "MessageView",
    "ProducerRef",
    "PutResult",
    "SparkMQError",
    "StoreClosed",
    "StoreConfig",
    "StoreError",
    "StoreLocked",
    "StoreNotWritable",
    "StoreReader",
    "StoreStats",
    "UnknownQueue",
    "UnknownTopic",
    "existing_config",
]
