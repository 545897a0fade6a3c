"""The APIs and versions this gateway advertises in ApiVersions.

This is the "recommended" matrix of docs/kafka_gateway.md (from the compatibility research,
tested with kafka-python 3.0 and librdkafka 2.16): flexible versions are on, *topic-id*
versions are off (Fetch <= 12, OffsetCommit <= 8, OffsetFetch <= 8, DeleteTopics <= 5,
Produce <= 10: v10 only adds KIP-951's leader hints to the answer), Produce >= 3 and Fetch >= 4
so every batch is RecordBatch magic v2.
Advertise only what a handler implements: a version listed here must be handled end to end.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66


#: api key -> (min version, max version), inclusive.
SUPPORTED_VERSIONS: Mapping[ApiKey, tuple[int, int]] = MappingProxyType(
    {
        ApiKey.PRODUCE: (3, 10),
        ApiKey.FETCH: (4, 12),
        ApiKey.LIST_OFFSETS: (1, 7),
        ApiKey.METADATA: (0, 12),
        ApiKey.OFFSET_COMMIT: (2, 8),
        ApiKey.OFFSET_FETCH: (1, 8),
        ApiKey.FIND_COORDINATOR: (0, 4),
        ApiKey.JOIN_GROUP: (0, 7),
        ApiKey.HEARTBEAT: (0, 4),
        ApiKey.LEAVE_GROUP: (0, 4),
        ApiKey.SYNC_GROUP: (0, 5),
        ApiKey.DESCRIBE_GROUPS: (0, 5),
        ApiKey.LIST_GROUPS: (0, 4),
        ApiKey.API_VERSIONS: (0, 4),
        ApiKey.CREATE_TOPICS: (2, 7),
        ApiKey.DELETE_TOPICS: (1, 5),
        ApiKey.INIT_PRODUCER_ID: (0, 4),
        # Transactions (KIP-98), client versions only: AddPartitionsToTxn v4+ is broker-to-broker,
        # v4+ of the others is KIP-890's (implicit partitions, TRANSACTION_ABORTABLE).
        ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
        ApiKey.ADD_OFFSETS_TO_TXN: (0, 3),
        ApiKey.END_TXN: (0, 3),
        ApiKey.TXN_OFFSET_COMMIT: (0, 3),
        ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
        ApiKey.LIST_TRANSACTIONS: (0, 1),
    }
)

#: The first version of each API that may answer PRODUCER_FENCED (KIP-588); older versions get
#: INVALID_PRODUCER_EPOCH instead, as Kafka does.
PRODUCER_FENCED_SINCE: Mapping[ApiKey, int] = MappingProxyType(
    {
        ApiKey.INIT_PRODUCER_ID: 4,
        ApiKey.ADD_PARTITIONS_TO_TXN: 2,
        ApiKey.ADD_OFFSETS_TO_TXN: 2,
        ApiKey.END_TXN: 2,
    }
)


def is_supported(api_key: int, api_version: int) -> bool:
    """True when ``api_key`` is advertised and ``api_version`` is inside its range."""
    try:
        low, high = SUPPORTED_VERSIONS[ApiKey(api_key)]
    except ValueError:
        return False
    return low <= api_version <= high
