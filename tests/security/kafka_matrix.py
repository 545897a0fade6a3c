"""The Kafka authorization matrix's requests: one per advertised API, and how to read its
authorization error from the answer (``None`` when the answer carries none)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ingest_api.kafka import codec
from ingest_api.kafka.versions import ApiKey
from tests.kafka.rawclient import RawClient, record_batch

AUTH_ERRORS = {29, 30, 31, 53}
TOPIC, GROUP, TXN, DOOMED = "m-topic", "m-group", "m-txn", "m-doomed"


@dataclass(frozen=True)
class Case:
    api: ApiKey
    version: int
    fields: Callable[[], dict[str, Any]]
    #: The auth error codes in the answer (an empty set: none).
    errors: Callable[[Any], set[int]]
    #: The denial expected without rights (an empty set: the answer is filtered instead).
    denied: set[int]


def _codes(entries: Any, inner: str | None = None, code: str = "error_code") -> set[int]:
    found = set()
    for entry in entries or []:
        if inner is None:
            found.add(getattr(entry, code))
        else:
            found |= {getattr(part, code) for part in getattr(entry, inner) or []}
    return found & AUTH_ERRORS


def _top(answer: Any) -> set[int]:
    return {answer.error_code} & AUTH_ERRORS


def _req(api: ApiKey, nested: str) -> Any:
    return getattr(codec.request_class(api), nested)


def _produce() -> dict[str, Any]:
    data = _req(ApiKey.PRODUCE, "TopicProduceData")
    part = data.PartitionProduceData(index=0, records=record_batch([b"denied?"]))
    return {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [data(name=TOPIC, partition_data=[part])],
    }


def _fetch() -> dict[str, Any]:
    topic = _req(ApiKey.FETCH, "FetchTopic")
    part = topic.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    return {
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "topics": [topic(topic=TOPIC, partitions=[part])],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def _list_offsets() -> dict[str, Any]:
    topic = _req(ApiKey.LIST_OFFSETS, "ListOffsetsTopic")
    return {
        "replica_id": -1,
        "topics": [
            topic(name=TOPIC, partitions=[topic.ListOffsetsPartition(partition_index=0, timestamp=-1)])
        ],
    }


def _metadata() -> dict[str, Any]:
    return {
        "topics": [_req(ApiKey.METADATA, "MetadataRequestTopic")(name=TOPIC)],
        "allow_auto_topic_creation": False,
    }


def _offset_commit() -> dict[str, Any]:
    topic = _req(ApiKey.OFFSET_COMMIT, "OffsetCommitRequestTopic")
    part = topic.OffsetCommitRequestPartition(partition_index=0, committed_offset=1, committed_metadata="")
    return {
        "group_id": GROUP,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "topics": [topic(name=TOPIC, partitions=[part])],
    }


def _offset_fetch() -> dict[str, Any]:
    topic = _req(ApiKey.OFFSET_FETCH, "OffsetFetchRequestTopic")
    return {"group_id": GROUP, "topics": [topic(name=TOPIC, partition_indexes=[0])]}


def _join() -> dict[str, Any]:
    proto = _req(ApiKey.JOIN_GROUP, "JoinGroupRequestProtocol")
    return {
        "group_id": GROUP,
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 10_000,
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": [proto(name="range", metadata=b"")],
    }


def _txn_offset_commit() -> dict[str, Any]:
    topic = _req(ApiKey.TXN_OFFSET_COMMIT, "TxnOffsetCommitRequestTopic")
    part = topic.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=1, committed_metadata="")
    return {
        "transactional_id": TXN,
        "group_id": GROUP,
        "producer_id": 1,
        "producer_epoch": 0,
        "topics": [topic(name=TOPIC, partitions=[part])],
    }


def _add_partitions() -> dict[str, Any]:
    topic = _req(ApiKey.ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxnTopic")
    return {
        "v3_and_below_transactional_id": TXN,
        "v3_and_below_producer_id": 1,
        "v3_and_below_producer_epoch": 0,
        "v3_and_below_topics": [topic(name=TOPIC, partitions=[0])],
    }


def _create() -> dict[str, Any]:
    topic = _req(ApiKey.CREATE_TOPICS, "CreatableTopic")
    return {
        "topics": [
            topic(name="m-created", num_partitions=1, replication_factor=1, assignments=[], configs=[])
        ],
        "timeout_ms": 5000,
        "validate_only": False,
    }


CASES: list[Case] = [
    Case(ApiKey.PRODUCE, 9, _produce, lambda a: _codes(a.responses, "partition_responses"), {29}),
    Case(ApiKey.FETCH, 12, _fetch, lambda a: _codes(a.responses, "partitions"), {29}),
    Case(ApiKey.LIST_OFFSETS, 7, _list_offsets, lambda a: _codes(a.topics, "partitions"), {29}),
    Case(ApiKey.METADATA, 12, _metadata, lambda a: _codes(a.topics), {29}),
    Case(ApiKey.OFFSET_COMMIT, 8, _offset_commit, lambda a: _codes(a.topics, "partitions"), {30}),
    Case(ApiKey.OFFSET_FETCH, 7, _offset_fetch, _top, {30}),
    Case(ApiKey.FIND_COORDINATOR, 3, lambda: {"key": GROUP, "key_type": 0}, _top, {30}),
    Case(ApiKey.JOIN_GROUP, 7, _join, _top, {30}),
    Case(ApiKey.HEARTBEAT, 4, lambda: {"group_id": GROUP, "generation_id": -1, "member_id": "m"}, _top, {30}),
    Case(ApiKey.LEAVE_GROUP, 4, lambda: {"group_id": GROUP, "members": []}, _top, {30}),
    Case(ApiKey.SYNC_GROUP, 5, lambda: {"group_id": GROUP, "generation_id": -1, "member_id": "m", "protocol_type": "consumer", "protocol_name": "range", "assignments": []}, _top, {30}),  # noqa: E501
    Case(ApiKey.DESCRIBE_GROUPS, 5, lambda: {"groups": [GROUP]}, lambda a: _codes(a.groups), {30}),
    Case(ApiKey.LIST_GROUPS, 4, lambda: {"states_filter": []}, lambda a: set(), set()),
    Case(ApiKey.API_VERSIONS, 3, lambda: {"client_software_name": "m", "client_software_version": "1"}, lambda a: set(), set()),  # noqa: E501
    Case(ApiKey.CREATE_TOPICS, 7, _create, lambda a: _codes(a.topics), {29}),
    Case(ApiKey.DELETE_TOPICS, 5, lambda: {"topic_names": [DOOMED], "timeout_ms": 5000}, lambda a: _codes(a.responses), {29}),  # noqa: E501
    Case(ApiKey.INIT_PRODUCER_ID, 4, lambda: {"transactional_id": None, "transaction_timeout_ms": 60_000}, _top, {31}),  # noqa: E501
    Case(ApiKey.ADD_PARTITIONS_TO_TXN, 3, _add_partitions, lambda a: _codes(a.results_by_topic_v3_and_below, "results_by_partition", "partition_error_code"), {53}),  # noqa: E501
    Case(ApiKey.ADD_OFFSETS_TO_TXN, 3, lambda: {"transactional_id": TXN, "producer_id": 1, "producer_epoch": 0, "group_id": GROUP}, _top, {53}),  # noqa: E501
    Case(ApiKey.END_TXN, 3, lambda: {"transactional_id": TXN, "producer_id": 1, "producer_epoch": 0, "committed": False}, _top, {53}),  # noqa: E501
    Case(ApiKey.TXN_OFFSET_COMMIT, 3, _txn_offset_commit, lambda a: _codes(a.topics, "partitions"), {53}),
    Case(ApiKey.DESCRIBE_TRANSACTIONS, 0, lambda: {"transactional_ids": [TXN]}, lambda a: _codes(a.transaction_states), {53}),  # noqa: E501
    Case(ApiKey.LIST_TRANSACTIONS, 1, lambda: {"state_filters": [], "producer_id_filters": []}, lambda a: set(), set()),  # noqa: E501
]  # fmt: skip


def call(client: RawClient, case: Case) -> Any:
    return client.call(
        codec.request_class(case.api), codec.response_class(case.api), case.version, **case.fields()
    )
