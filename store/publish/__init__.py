"""Services above the store facade that write exactly once: the public API of the publish layer.

* :class:`SinkStaging` - the Spark sink's stage / decide / publish protocol (``sink_staging``);
* :class:`RelocationLog` - the operators' relocations, published once per micro-batch
  (``relocations``);
* :class:`TransactionService` - transaction ends, atomic and idempotent (``transactions``).

The doors and Spark import from here (and from :mod:`store`), never from the modules below.
"""

from store.publish.relocations import RelocationLog, RelocationOutcome
from store.publish.sink_parts import (
    PART_SCHEMA,
    CommitOutcome,
    SinkStagingError,
    StagedPart,
    check_id,
    new_part_id,
    part_path,
    staging_root,
    write_part,
)
from store.publish.sink_staging import SinkStaging
from store.publish.transactions import (
    EndRequest,
    EndResult,
    ProducerGroupMismatch,
    Transaction,
    TransactionService,
    UnknownTransaction,
)

__all__ = [
    "PART_SCHEMA",
    "CommitOutcome",
    "EndRequest",
    "EndResult",
    "ProducerGroupMismatch",
    "RelocationLog",
    "RelocationOutcome",
    "SinkStaging",
    "SinkStagingError",
    "StagedPart",
    "Transaction",
    "TransactionService",
    "UnknownTransaction",
    "check_id",
    "new_part_id",
    "part_path",
    "staging_root",
    "write_part",
]
