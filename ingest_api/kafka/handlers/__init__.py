"""One module per API family; :data:`HANDLERS` maps every advertised API key to its handler."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ingest_api.kafka.handlers import (
    admin,
    fetch,
    groups,
    metadata,
    offsets,
    produce,
    transactions,
    txn_offsets,
)
from ingest_api.kafka.handlers.base import Connection, Handler
from ingest_api.kafka.versions import SUPPORTED_VERSIONS, ApiKey

HANDLERS: Mapping[ApiKey, Handler] = MappingProxyType(
    {
        ApiKey.API_VERSIONS: metadata.handle_api_versions,
        ApiKey.METADATA: metadata.handle_metadata,
        ApiKey.FIND_COORDINATOR: metadata.handle_find_coordinator,
        ApiKey.PRODUCE: produce.handle_produce,
        ApiKey.INIT_PRODUCER_ID: produce.handle_init_producer_id,
        ApiKey.FETCH: fetch.handle_fetch,
        ApiKey.LIST_OFFSETS: offsets.handle_list_offsets,
        ApiKey.OFFSET_COMMIT: offsets.handle_offset_commit,
        ApiKey.OFFSET_FETCH: offsets.handle_offset_fetch,
        ApiKey.JOIN_GROUP: groups.handle_join_group,
        ApiKey.SYNC_GROUP: groups.handle_sync_group,
        ApiKey.HEARTBEAT: groups.handle_heartbeat,
        ApiKey.LEAVE_GROUP: groups.handle_leave_group,
        ApiKey.DESCRIBE_GROUPS: groups.handle_describe_groups,
        ApiKey.LIST_GROUPS: groups.handle_list_groups,
        ApiKey.CREATE_TOPICS: admin.handle_create_topics,
        ApiKey.DELETE_TOPICS: admin.handle_delete_topics,
        ApiKey.ADD_PARTITIONS_TO_TXN: transactions.handle_add_partitions_to_txn,
        ApiKey.ADD_OFFSETS_TO_TXN: transactions.handle_add_offsets_to_txn,
        ApiKey.END_TXN: transactions.handle_end_txn,
        ApiKey.TXN_OFFSET_COMMIT: txn_offsets.handle_txn_offset_commit,
        ApiKey.DESCRIBE_TRANSACTIONS: transactions.handle_describe_transactions,
        ApiKey.LIST_TRANSACTIONS: transactions.handle_list_transactions,
    }
)
# Advertise only what is implemented: the two tables must name the same APIs.
assert set(HANDLERS) == set(SUPPORTED_VERSIONS), set(HANDLERS) ^ set(SUPPORTED_VERSIONS)

__all__ = ["HANDLERS", "Connection", "Handler"]
