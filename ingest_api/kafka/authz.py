"""Kafka's per-API authorization, through the one :func:`broker.security.acl.authorize`.

:func:`guarded` runs before every handler when the gateway has users (``--auth-file``). It is
Kafka's table (``KafkaApis``; :data:`broker.security.KAFKA_API_RULES` holds it as data and a
test checks that every advertised key has both an entry there and a guard here):

=====================  =====================================  ====================================
API                    needs                                  denied
=====================  =====================================  ====================================
Produce                WRITE topic (+ WRITE txn id)           29 per partition / 53 for all
Fetch                  READ topic                             29 per partition
ListOffsets            DESCRIBE topic                         29 per partition
Metadata               DESCRIBE topic (CREATE to auto-create) all: omitted; named: 29
OffsetCommit           READ group, READ topic                 30 for all / 29 per partition
OffsetFetch            DESCRIBE group, DESCRIBE topic         30 / topics omitted
FindCoordinator        DESCRIBE group or txn id               30 / 53
Join/Heartbeat/        READ group                             30
Leave/SyncGroup
DescribeGroups         DESCRIBE group                         30 per group
ListGroups             DESCRIBE cluster, else per group       filtered
CreateTopics           CREATE cluster or topic                29 per topic
DeleteTopics           DELETE topic                           29 per topic
InitProducerId         WRITE txn id / IDEMPOTENT_WRITE        53 / 31
                       cluster or WRITE on any topic
AddPartitionsToTxn     WRITE txn id, WRITE topic              53 / 29 and 55 on the rest
AddOffsetsToTxn        WRITE txn id, READ group               53 / 30
EndTxn                 WRITE txn id                           53
TxnOffsetCommit        WRITE txn id, READ group, READ topic   53 / 30 / 29 per partition
DescribeTransactions   DESCRIBE txn id                        53 per id
ListTransactions       DESCRIBE txn id                        filtered
=====================  =====================================  ====================================

Decisions are taken per request against the user's *current* rights (a reload applies to
the next request of an open connection). A user removed from the file has no rights.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any

from broker.security import Operation, Principal, ResourceType, authorize, authorize_any, cluster
from ingest_api.kafka import codec
from ingest_api.kafka.authz_split import (
    RunHandler,
    SplitSpec,
    answer_split,
    decode_response,
    denied_entries,
    encode_entries,
    encode_message,
    filter_response,
)
from ingest_api.kafka.codec import KafkaRequest
from ingest_api.kafka.errors import ErrorCode
from ingest_api.kafka.versions import ApiKey

_T, _G, _X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID
_R, _W, _D = Operation.READ, Operation.WRITE, Operation.DESCRIBE
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
NOT_ATTEMPTED = ErrorCode.OPERATION_NOT_ATTEMPTED

#: A guard: (principal, request, run the handler) -> the framed answer.
Guard = Callable[[Principal, KafkaRequest, RunHandler], Awaitable[bytes | None]]


def _may(principal: Principal, operation: Operation, resource_type: ResourceType) -> Callable[[str], bool]:
    return lambda name: authorize(principal, operation, (resource_type, name))


def _whole(request: KafkaRequest, code: int, **fields: Any) -> bytes:
    """The whole request refused with ``code`` (an API with one top-level error code)."""
    return codec.encode_response(request, throttle_time_ms=0, error_code=code, **fields)


# --- specs: where each API keeps its items ---------------------------------------------------

PRODUCE = SplitSpec(
    "topic_data",
    "name",
    "responses",
    "TopicProduceResponse",
    "name",
    req_parts="partition_data",
    req_index="index",
    resp_parts="partition_responses",
    resp_part_cls="PartitionProduceResponse",
    resp_index="index",
    denied_fields={"base_offset": -1},
    top_fields={"throttle_time_ms": 0},
)
FETCH = SplitSpec(
    "topics",
    "topic",
    "responses",
    "FetchableTopicResponse",
    "topic",
    req_parts="partitions",
    req_index="partition",
    resp_part_cls="PartitionData",
    denied_fields={"high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1},
    top_fields={"throttle_time_ms": 0},
)
LIST_OFFSETS = SplitSpec(
    "topics",
    "name",
    "topics",
    "ListOffsetsTopicResponse",
    "name",
    req_parts="partitions",
    req_index="partition_index",
    resp_part_cls="ListOffsetsPartitionResponse",
    denied_fields={"offset": -1, "timestamp": -1},
    top_fields={"throttle_time_ms": 0},
)
METADATA = SplitSpec("topics", "name", "topics", "MetadataResponseTopic", "name", call_when_empty=True)
OFFSET_COMMIT = SplitSpec(
    "topics",
    "name",
    "topics",
    "OffsetCommitResponseTopic",
    "name",
    req_parts="partitions",
    req_index="partition_index",
    resp_part_cls="OffsetCommitResponsePartition",
    top_fields={"throttle_time_ms": 0},
)
TXN_OFFSET_COMMIT = SplitSpec(
    "topics",
    "name",
    "topics",
    "TxnOffsetCommitResponseTopic",
    "name",
    req_parts="partitions",
    req_index="partition_index",
    resp_part_cls="TxnOffsetCommitResponsePartition",
    top_fields={"throttle_time_ms": 0},
)
OFFSET_FETCH = SplitSpec(
    "topics",
    "name",
    "topics",
    "OffsetFetchResponseTopic",
    "name",
    req_parts="partition_indexes",
    resp_part_cls="OffsetFetchResponsePartition",
    denied_fields={"committed_offset": -1, "metadata": ""},
    top_fields={"throttle_time_ms": 0},
)
ADD_PARTITIONS = SplitSpec(
    "v3_and_below_topics",
    "name",
    "results_by_topic_v3_and_below",
    "AddPartitionsToTxnTopicResult",
    "name",
    req_parts="partitions",
    resp_parts="results_by_partition",
    resp_part_cls="AddPartitionsToTxnPartitionResult",
    error_field="partition_error_code",
    top_fields={"throttle_time_ms": 0},
)
CREATE_TOPICS = SplitSpec(
    "topics",
    "name",
    "topics",
    "CreatableTopicResult",
    "name",
    denied_fields={"num_partitions": -1, "replication_factor": -1},
    top_fields={"throttle_time_ms": 0},
)
DELETE_TOPICS = SplitSpec(
    "topic_names", None, "responses", "DeletableTopicResult", "name", top_fields={"throttle_time_ms": 0}
)
DESCRIBE_GROUPS = SplitSpec(
    "groups",
    None,
    "groups",
    "DescribedGroup",
    "group_id",
    denied_fields={"group_state": "", "protocol_type": "", "protocol_data": ""},
    top_fields={"throttle_time_ms": 0},
)
DESCRIBE_TXNS = SplitSpec("transactional_ids", None, "transaction_states", "TransactionState",
                          "transactional_id", denied_fields={"transaction_state": "", "producer_id": -1},
                          top_fields={"throttle_time_ms": 0})  # fmt: skip


# --- guards ----------------------------------------------------------------------------------


async def _produce(p: Principal, request: KafkaRequest, run: RunHandler) -> bytes | None:
    txn_id = request.body.transactional_id
    if txn_id is not None and not authorize(p, _W, (_X, txn_id)):
        return await answer_split(request, run, PRODUCE, lambda _: False, TXN_DENIED)
    return await answer_split(request, run, PRODUCE, _may(p, _W, _T), TOPIC_DENIED)


async def _fetch(p: Principal, request: KafkaRequest, run: RunHandler) -> bytes | None:
    def no_wait(body: Any) -> None:
        body.max_wait_ms = 0  # an answer carries errors: it is due now, as Kafka's

    return await answer_split(request, run, FETCH, _may(p, _R, _T), TOPIC_DENIED, no_wait)


async def _list_offsets(p: Principal, request: KafkaRequest, run: RunHandler) -> bytes | None:
    return await answer_split(request, run, LIST_OFFSETS, _may(p, _D, _T), TOPIC_DENIED)


async def _metadata(p: Principal, request: KafkaRequest, run: RunHandler) -> bytes | None:
    body = request.body
    if body.topics is None or (request.api_version == 0 and not body.topics):
        return await filter_response(request, run, "topics", lambda t: authorize(p, _D, (_T, t.name)))
    names = [t.name for t in body.topics]
    may_create = authorize(p, Operation.CREATE, cluster()) or all(
        authorize(p, Operation.CREATE, (_T, name)) for name in names
    )
    if not may_create:  # every version: before v4 the flag decodes as true (always create)
        body.allow_auto_topic_creation = False
    return await answer_split(request, run, METADATA, _may(p, _D, _T), TOPIC_DENIED)


async def _offset_commit(p: Principal, request: KafkaRequest, run: RunHandler) -> bytes | None:
    if not authorize(p, _R, (_G, request.body.group_id)):
        return await answer_split(request, run, OFFSET_COMMIT, lambda _: False, GROUP_DENIED)
    return await answer_split(request, run, OFFSET_COMMIT, _may(p, _R, _T), TOPIC_DENIED)


async def _offset_fetch(p: Principal, request: KafkaRequest, run: RunHandler) -> bytes | None:
    if request.api_version >= 8:
        return await _offset_fetch_groups(p, request, run)
    if not authorize(p, _D, (_G, request.body.group_id)):
        fields = {"error_code": GROUP_DENIED} if request.api_version >= 2 else {}
        return codec.encode_response(request, throttle_time_ms=0, topics=[], **fields)
    if request.body.topics is None:
        return await filter_response(request, run, "topics", lambda t: authorize(p, _D, (_T, t.name)))
    return await answer_split(request, run, OFFSET_FETCH, _may(p, _D, _T), TOPIC_DENIED)


async def _offset_fetch_groups(p: Principal, request: KafkaRequest, run: RunHandler) -> bytes | None:
    def keep(group: Any) -> bool:
        if not authorize(p, _D, (_G, group.group_id)):
            group.error_code, group.topics = GROUP_DENIED, []
        else:
            group.topics = [t for t in group.topics or [] if authorize(p, _D, (_T, t.name))]
        return True

    return await _rewrite(request, run, "groups", keep)


async def _rewrite(
    request: KafkaRequest, run: RunHandler, list_field: str, edit: Callable[[Any], bool]
) -> bytes | None:
    """Run the handler, then let ``edit`` change (and keep or drop) each entry."""
    raw = await run(request)
    if raw is None:
        return None
    message = decode_response(request, raw)
    setattr(message, list_field, [entry for entry in getattr(message, list_field) or [] if edit(entry)])
    return encode_message(request, message)


async def _find_coordinator(p: Principal, request: KafkaRequest, run: RunHandler) -> bytes | None:
    body = request.body
    is_txn = (body.key_type or 0) == 1
    resource, code = (_X, TXN_DENIED) if is_txn else (_G, GROUP_DENIED)
    if request.api_version < 4:
        if authorize(p, _D, (resource, body.key)):
            return await run(request)
        return _whole(request, code, error_message=None, node_id=-1, host="", port=-1)
    spec = SplitSpec("coordinator_keys", None, "coordinators", "Coordinator", "key",
                     denied_fields={"node_id": -1, "host": "", "port": -1},
                     top_fields={"throttle_time_ms": 0})  # fmt: skip
    return await answer_split(request, run, spec, _may(p, _D, resource), code)


def _group_member(p: Principal, request: KafkaRequest) -> bool:
    return authorize(p, _R, (_G, request.body.group_id))


async def _group_call(p: Principal, request: KafkaRequest, run: RunHandler) -> bytes | None:
    if _group_member(p, request):
        return await run(request)
    extra: dict[str, Any] = {}
    if request.api_key is ApiKey.JOIN_GROUP:
        extra = {"generation_id": -1, "leader": "", "member_id": "", "members": [], "protocol_name": ""}
    elif request.api_key is ApiKey.SYNC_GROUP:
        extra = {"assignment": b""}
    return _whole(request, GROUP_DENIED, **extra)


async def _describe_groups(p: Principal, request: KafkaRequest, run: RunHandler) -> bytes | None:
    return await answer_split(request, run, DESCRIBE_GROUPS, _may(p, _D, _G), GROUP_DENIED)


async def _list_groups(p: Principal, request: KafkaRequest, run: RunHandler) -> bytes | None:
    if authorize(p, _D, cluster()):
        return await run(request)
    return await filter_response(request, run, "groups", lambda g: authorize(p, _D, (_G, g.group_id)))


async def _create_topics(p: Principal, request: KafkaRequest, run: RunHandler) -> bytes | None:
    on_cluster = authorize(p, Operation.CREATE, cluster())
    allowed = lambda name: on_cluster or authorize(p, Operation.CREATE, (_T, name))  # noqa: E731
    return await answer_split(request, run, CREATE_TOPICS, allowed, TOPIC_DENIED)


async def _delete_topics(p: Principal, request: KafkaRequest, run: RunHandler) -> bytes | None:
    return await answer_split(request, run, DELETE_TOPICS, _may(p, Operation.DELETE, _T), TOPIC_DENIED)


async def _init_producer_id(p: Principal, request: KafkaRequest, run: RunHandler) -> bytes | None:
    txn_id = request.body.transactional_id
    if txn_id is not None:
        ok, code = authorize(p, _W, (_X, txn_id)), TXN_DENIED
    else:  # idempotent only (KIP-679): IDEMPOTENT_WRITE on the cluster or WRITE on any topic
        ok = authorize(p, Operation.IDEMPOTENT_WRITE, cluster()) or authorize_any(p, _W, _T)
        code = CLUSTER_DENIED
    if ok:
        return await run(request)
    return _whole(request, code, producer_id=-1, producer_epoch=-1)


async def _add_partitions(p: Principal, request: KafkaRequest, run: RunHandler) -> bytes | None:
    if not authorize(p, _W, (_X, request.body.v3_and_below_transactional_id)):
        return await answer_split(request, run, ADD_PARTITIONS, lambda _: False, TXN_DENIED)
    topics = list(request.body.v3_and_below_topics or [])
    if all(authorize(p, _W, (_T, t.name)) for t in topics):
        return await run(request)
    allowed = [t for t in topics if authorize(p, _W, (_T, t.name))]
    refused = [t for t in topics if not authorize(p, _W, (_T, t.name))]
    entries = [
        *denied_entries(request, ADD_PARTITIONS, allowed, NOT_ATTEMPTED),
        *denied_entries(request, ADD_PARTITIONS, refused, TOPIC_DENIED),
    ]
    return encode_entries(request, ADD_PARTITIONS, entries)


async def _add_offsets(p: Principal, request: KafkaRequest, run: RunHandler) -> bytes | None:
    if not authorize(p, _W, (_X, request.body.transactional_id)):
        return _whole(request, TXN_DENIED)
    if not authorize(p, _R, (_G, request.body.group_id)):
        return _whole(request, GROUP_DENIED)
    return await run(request)


async def _end_txn(p: Principal, request: KafkaRequest, run: RunHandler) -> bytes | None:
    if not authorize(p, _W, (_X, request.body.transactional_id)):
        return _whole(request, TXN_DENIED)
    return await run(request)


async def _txn_offset_commit(p: Principal, request: KafkaRequest, run: RunHandler) -> bytes | None:
    if not authorize(p, _W, (_X, request.body.transactional_id)):
        return await answer_split(request, run, TXN_OFFSET_COMMIT, lambda _: False, TXN_DENIED)
    if not authorize(p, _R, (_G, request.body.group_id)):
        return await answer_split(request, run, TXN_OFFSET_COMMIT, lambda _: False, GROUP_DENIED)
    return await answer_split(request, run, TXN_OFFSET_COMMIT, _may(p, _R, _T), TOPIC_DENIED)


async def _describe_txns(p: Principal, request: KafkaRequest, run: RunHandler) -> bytes | None:
    return await answer_split(request, run, DESCRIBE_TXNS, _may(p, _D, _X), TXN_DENIED)


async def _list_txns(p: Principal, request: KafkaRequest, run: RunHandler) -> bytes | None:
    keep = lambda t: authorize(p, _D, (_X, t.transactional_id))  # noqa: E731
    return await filter_response(request, run, "transaction_states", keep)


async def _open(p: Principal, request: KafkaRequest, run: RunHandler) -> bytes | None:
    return await run(request)


#: Every advertised API's guard (ApiVersions needs none).
GUARDS: Mapping[ApiKey, Guard] = MappingProxyType(
    {
        ApiKey.PRODUCE: _produce,
        ApiKey.FETCH: _fetch,
        ApiKey.LIST_OFFSETS: _list_offsets,
        ApiKey.METADATA: _metadata,
        ApiKey.OFFSET_COMMIT: _offset_commit,
        ApiKey.OFFSET_FETCH: _offset_fetch,
        ApiKey.FIND_COORDINATOR: _find_coordinator,
        ApiKey.JOIN_GROUP: _group_call,
        ApiKey.HEARTBEAT: _group_call,
        ApiKey.LEAVE_GROUP: _group_call,
        ApiKey.SYNC_GROUP: _group_call,
        ApiKey.DESCRIBE_GROUPS: _describe_groups,
        ApiKey.LIST_GROUPS: _list_groups,
        ApiKey.API_VERSIONS: _open,
        ApiKey.CREATE_TOPICS: _create_topics,
        ApiKey.DELETE_TOPICS: _delete_topics,
        ApiKey.INIT_PRODUCER_ID: _init_producer_id,
        ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions,
        ApiKey.ADD_OFFSETS_TO_TXN: _add_offsets,
        ApiKey.END_TXN: _end_txn,
        ApiKey.TXN_OFFSET_COMMIT: _txn_offset_commit,
        ApiKey.DESCRIBE_TRANSACTIONS: _describe_txns,
        ApiKey.LIST_TRANSACTIONS: _list_txns,
    }
)


async def guarded(principal: Principal | None, request: KafkaRequest, run: RunHandler) -> bytes | None:
    """Answer ``request`` as ``principal`` may (``None``: auth off, the handler runs as is)."""
    if principal is None:
        return await run(request)
    return await GUARDS[request.api_key](principal, request, run)
