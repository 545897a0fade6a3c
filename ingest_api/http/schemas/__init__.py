"""Request (``*In``) and response (``*Out``) bodies of the HTTP API.

Timestamps are integers in milliseconds since the Unix epoch. Message bodies travel as UTF-8
text (``body``) or base64 (``body_base64``); exactly one of the two is set on every message.

Declarative models: the OpenAPI contract of every route in one place; their field types and
checks are in :mod:`ingest_api.http.fields`, their cross-field rules in
:mod:`ingest_api.http.schema_rules`.
"""

from __future__ import annotations

from ingest_api.http.schemas.groups import (
    GroupDescribeOut,
    GroupLagOut,
    GroupListOut,
    GroupOffsetsIn,
    GroupOffsetsOut,
    GroupQueueOut,
    GroupResetIn,
    GroupResetOut,
    KafkaMemberOut,
    QueueLagOut,
    ResetQueueOut,
    StatsOut,
)
from ingest_api.http.schemas.messages import (
    EndTransactionIn,
    EndTransactionOut,
    MessageOut,
    OffsetOut,
    ProduceBatchIn,
    ProduceBatchOut,
    ProduceEntryIn,
    ProduceIn,
    ProduceOut,
    ProducerGroupIn,
    ProducerGroupOut,
    PullOut,
    QueryOut,
    QueueOffsetsOut,
    TopicIn,
    TopicListOut,
    TopicOut,
    TransactionalBatchOut,
    TransactionalProduceOut,
    TransactionIn,
    TransactionListOut,
    TransactionOut,
    body_fields,
    entry_topic,
)
from ingest_api.http.schemas.status import (
    BrokerOut,
    ClusterHealthOut,
    ClusterOut,
    ErrorOut,
    HealthOut,
    QueueRouteOut,
    ReplicaMemberOut,
    TopicRouteOut,
)

__all__ = [
    "BrokerOut",
    "ClusterHealthOut",
    "ClusterOut",
    "EndTransactionIn",
    "EndTransactionOut",
    "ErrorOut",
    "GroupDescribeOut",
    "GroupLagOut",
    "GroupListOut",
    "GroupOffsetsIn",
    "GroupOffsetsOut",
    "GroupQueueOut",
    "GroupResetIn",
    "GroupResetOut",
    "HealthOut",
    "KafkaMemberOut",
    "MessageOut",
    "OffsetOut",
    "ProduceBatchIn",
    "ProduceBatchOut",
    "ProduceEntryIn",
    "ProduceIn",
    "ProduceOut",
    "ProducerGroupIn",
    "ProducerGroupOut",
    "PullOut",
    "QueryOut",
    "QueueLagOut",
    "QueueOffsetsOut",
    "QueueRouteOut",
    "ReplicaMemberOut",
    "ResetQueueOut",
    "StatsOut",
    "TopicIn",
    "TopicListOut",
    "TopicOut",
    "TopicRouteOut",
    "TransactionIn",
    "TransactionListOut",
    "TransactionOut",
    "TransactionalBatchOut",
    "TransactionalProduceOut",
    "body_fields",
    "entry_topic",
]
