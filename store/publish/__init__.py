"""Services above the store facade that write exactly once: the public API of the publish layer.

* :class:`SinkStaging` - the Spark sink's stage / decide / publish protocol (``sink_staging``);
  across brokers with a :class:`SinkRouter` (``sink_routed``), each owner storing its chunks
  with a :class:`ChunkWriter` (``sink_chunks``);
* :class:`RelocationLog` - the operators' relocations, published once per micro-batch
  (``relocations``); :class:`WheelLog` - decisions due later, "due at T" records the broker's
  wheel relocates at T (``wheel_log``, records in ``due_records``);
* :class:`TransactionService` - transactions: halves registered, ends atomic and idempotent,
  offsets carried by a commit (``transactions``; :class:`HalfOf`, :class:`TxOffsets`).

The doors and Spark import from here (and from :mod:`store`), never from the modules below.
"""

from store.publish.due_records import WHEEL_TOPIC, Decision, DueRecordError, Progress
from store.publish.relocations import RelocationLog, RelocationOutcome
from store.publish.sink_chunks import ChunkOutcome, ChunkRef, ChunkWriter
from store.publish.sink_parts import (
    PART_SCHEMA,
    CommitOutcome,
    OwnerUnavailable,
    SinkStagingError,
    StagedPart,
    TopicRoute,
    check_id,
    new_part_id,
    part_path,
    staging_root,
    write_part,
)
from store.publish.sink_routed import SinkRouter
from store.publish.sink_staging import SinkStaging
from store.publish.transactions import (
    EndRequest,
    EndResult,
    HalfRef,
    ProducerGroupMismatch,
    Transaction,
    TransactionService,
    UnknownTransaction,
)
from store.publish.wheel_log import Scheduled, WheelLog
from store.write.transactions import KAFKA_PRODUCER_GROUP_PREFIX, HalfOf, TxOffsets, TxOutcome

__all__ = [
    "KAFKA_PRODUCER_GROUP_PREFIX",
    "PART_SCHEMA",
    "WHEEL_TOPIC",
    "ChunkOutcome",
    "ChunkRef",
    "ChunkWriter",
    "CommitOutcome",
    "Decision",
    "DueRecordError",
    "EndRequest",
    "EndResult",
    "HalfOf",
    "HalfRef",
    "OwnerUnavailable",
    "ProducerGroupMismatch",
    "Progress",
    "RelocationLog",
    "RelocationOutcome",
    "Scheduled",
    "SinkRouter",
    "SinkStaging",
    "SinkStagingError",
    "StagedPart",
    "TopicRoute",
    "Transaction",
    "TransactionService",
    "TxOffsets",
    "TxOutcome",
    "UnknownTransaction",
    "WheelLog",
    "check_id",
    "new_part_id",
    "part_path",
    "staging_root",
    "write_part",
]
