"""The Kafka door of a three-broker cluster at the wire (raw requests built with kafka-python's
protocol classes): Metadata from the routes, NOT_LEADER_OR_FOLLOWER for a partition another
broker owns (with KIP-951's CurrentLeader in Fetch v12), FindCoordinator by a stable hash,
NOT_COORDINATOR elsewhere, and what a dead broker changes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
)
from kafka.protocol.metadata import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from broker.config import ServerConfig
from store import java_string_hash
from tests.cluster.kafka_cluster import KafkaCluster
from tests.cluster.test_kafka_cluster import NAMES, OWNERS, create_topic, pulled
from tests.ingest.conftest import start_broker
from tests.kafka.rawclient import RawClient, record_batch
from tests.support.stores import light_config
from tests.support.waiting import wait_until

pytestmark = pytest.mark.kafka


@pytest.fixture
def trio(zk_url: str, tmp_path: Path) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(zk_url, tmp_path)
    for name in NAMES:
        cluster.start(name)
    cluster.wait_converged(3)
    create_topic(cluster, "wire")
    yield cluster
    cluster.stop_all()


def member_ids(cluster: KafkaCluster) -> dict[str, int]:
    with cluster.http("b1") as http:
        return {b["name"]: b["member_id"] for b in http.get("/cluster").json()["brokers"]}


def raw(cluster: KafkaCluster, name: str) -> RawClient:
    return RawClient(cluster.kafka_port(name))


def metadata(client: RawClient, topics: list[str] | None, version: int = 12) -> Any:
    wanted = (
        None
        if topics is None
        else [MetadataRequest.MetadataRequestTopic(name=t, topic_id=None) for t in topics]
    )
    return client.call(
        MetadataRequest,
        MetadataResponse,
        version,
        topics=wanted,
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )


def produce(client: RawClient, partition: int, value: bytes, version: int = 9) -> tuple[int, int]:
    response = produce_response(client, partition, value, version)
    (part,) = response.responses[0].partition_responses
    return part.error_code, part.base_offset


def produce_response(client: RawClient, partition: int, value: bytes, version: int) -> Any:
    data = ProduceRequest.TopicProduceData
    return client.call(
        ProduceRequest,
        ProduceResponse,
        version,
        transactional_id=None,
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            data(
                name="wire",
                partition_data=[data.PartitionProduceData(index=partition, records=record_batch([value]))],
            )
        ],
    )


def fetch(client: RawClient, partition: int) -> Any:
    topic = FetchRequest.FetchTopic
    response = client.call(
        FetchRequest,
        FetchResponse,
        12,
        replica_id=-1,
        max_wait_ms=10,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            topic(
                topic="wire",
                partitions=[
                    topic.FetchPartition(
                        partition=partition,
                        current_leader_epoch=-1,
                        fetch_offset=0,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    (part,) = response.responses[0].partitions
    return part


def list_offset(client: RawClient, partition: int) -> tuple[int, int]:
    topic = ListOffsetsRequest.ListOffsetsTopic
    response = client.call(
        ListOffsetsRequest,
        ListOffsetsResponse,
        7,
        replica_id=-1,
        isolation_level=0,
        topics=[
            topic(
                name="wire",
                partitions=[
                    topic.ListOffsetsPartition(
                        partition_index=partition, current_leader_epoch=-1, timestamp=-1
                    )
                ],
            )
        ],
    )
    (part,) = response.topics[0].partitions
    return part.error_code, part.offset


def find_coordinator(client: RawClient, key: str, key_type: int, version: int = 3) -> Any:
    return client.call(FindCoordinatorRequest, FindCoordinatorResponse, version, key=key, key_type=key_type)


def test_metadata_lists_every_broker_and_each_partitions_owner_as_leader(trio: KafkaCluster) -> None:
    ids = member_ids(trio)
    for name in NAMES:
        client = raw(trio, name)
        try:
            for version in (1, 9, 12):
                response = metadata(client, ["wire"], version)
                assert sorted((b.node_id, b.host, b.port) for b in response.brokers) == sorted(
                    (ids[n], "127.0.0.1", trio.kafka_port(n)) for n in NAMES
                )
                assert response.controller_id == ids[name]
                (topic,) = response.topics
                assert topic.error_code == 0
                leaders = [(p.partition_index, p.leader_id, p.error_code) for p in topic.partitions]
                assert leaders == [(q, ids[OWNERS[q]], 0) for q in range(6)]
                assert [p.replica_nodes for p in topic.partitions] == [[ids[OWNERS[q]]] for q in range(6)]
            cluster_id = metadata(client, None).cluster_id
            assert cluster_id == trio.zk_url.rpartition("/")[2]  # the chroot
            assert [t.name for t in metadata(client, None).topics] == ["wire"]
        finally:
            client.close()


def test_a_partition_owned_elsewhere_is_not_leader_or_follower(trio: KafkaCluster) -> None:
    ids = member_ids(trio)
    client = raw(trio, "b1")
    try:
        for q in range(6):
            error, offset = produce(client, q, b"to-%d" % q)
            if OWNERS[q] == "b1":
                assert (error, offset) == (0, 0)
                assert list_offset(client, q) == (0, 1)
                part = fetch(client, q)
                assert part.error_code == 0 and part.high_watermark == 1 and part.records
            else:
                assert (error, offset) == (6, -1)  # NOT_LEADER_OR_FOLLOWER, nothing stored here
                assert list_offset(client, q) == (6, -1)
                part = fetch(client, q)
                assert part.error_code == 6 and part.records == b""
                assert part.current_leader.leader_id == ids[OWNERS[q]]  # KIP-951
    finally:
        client.close()
    assert pulled(trio, "wire", 0) == ["to-0"] and pulled(trio, "wire", 3) == ["to-3"]
    assert all(pulled(trio, "wire", q) == [] for q in (1, 2, 4, 5))


def test_produce_v10_names_the_leader_and_its_endpoint_kip_951(trio: KafkaCluster) -> None:
    ids = member_ids(trio)
    client = raw(trio, "b2")
    try:
        response = produce_response(client, 2, b"elsewhere", 10)
        (part,) = response.responses[0].partition_responses
        assert (part.error_code, part.current_leader.leader_id) == (6, ids["b3"])
        assert [(e.node_id, e.host, e.port) for e in response.node_endpoints] == [
            (ids["b3"], "127.0.0.1", trio.kafka_port("b3"))
        ]
        owned = produce_response(client, 1, b"here", 10)
        (part,) = owned.responses[0].partition_responses
        assert (part.error_code, part.base_offset, owned.node_endpoints) == (0, 0, [])
    finally:
        client.close()
    assert pulled(trio, "wire", 1) == ["here"] and pulled(trio, "wire", 2) == []


def test_find_coordinator_by_stable_hash_and_not_coordinator_elsewhere(trio: KafkaCluster) -> None:
    ids = member_ids(trio)
    keys = [f"group-{i}" for i in range(12)]
    expected = {key: NAMES[abs(java_string_hash(key)) % 3] for key in keys}
    assert set(expected.values()) == set(NAMES)  # the keys spread over every broker
    for name in NAMES:
        client = raw(trio, name)
        try:
            for key in keys:
                for key_type in (0, 1):
                    found = find_coordinator(client, key, key_type)
                    assert (found.error_code, found.node_id) == (0, ids[expected[key]])
                    assert found.port == trio.kafka_port(expected[key])
            batched = client.call(
                FindCoordinatorRequest, FindCoordinatorResponse, 4, key_type=0, coordinator_keys=keys
            )
            assert [(c.key, c.node_id) for c in batched.coordinators] == [(k, ids[expected[k]]) for k in keys]
            for key in keys:
                beat = client.call(
                    HeartbeatRequest,
                    HeartbeatResponse,
                    4,
                    group_id=key,
                    generation_id=1,
                    member_id="m",
                    group_instance_id=None,
                )
                assert beat.error_code == (
                    25 if expected[key] == name else 16
                )  # UNKNOWN_MEMBER / NOT_COORDINATOR
        finally:
            client.close()


def test_a_dead_broker_leaves_its_partitions_without_leader_and_its_coordinators(trio: KafkaCluster) -> None:
    ids = member_ids(trio)
    trio.stop("b3")
    client = raw(trio, "b1")
    try:

        def b3_gone() -> bool:
            return len(metadata(client, ["wire"]).brokers) == 2

        wait_until(b3_gone, 15, "b1 to see b3 dead")
        (topic,) = metadata(client, ["wire"]).topics
        for p in topic.partitions:
            if OWNERS[p.partition_index] == "b3":
                assert (p.error_code, p.leader_id, p.offline_replicas) == (
                    5,
                    -1,
                    [ids["b3"]],
                )  # LEADER_NOT_AVAILABLE
            else:
                assert (p.error_code, p.leader_id) == (0, ids[OWNERS[p.partition_index]])
        key = next(k for k in (f"g{i}" for i in range(100)) if abs(java_string_hash(k)) % 3 == 2)  # b3's
        group = find_coordinator(client, key, 0)
        assert group.error_code == 0 and group.node_id == ids[("b1", "b2")[abs(java_string_hash(key)) % 2]]
        txn = find_coordinator(client, key, 1)
        assert (txn.error_code, txn.node_id) == (15, -1)  # COORDINATOR_NOT_AVAILABLE until b3 returns
        at_b1 = next(k for k in (f"g{i}" for i in range(100)) if abs(java_string_hash(k)) % 3 == 0)
        commit = OffsetCommitRequest.OffsetCommitRequestTopic
        partition = commit.OffsetCommitRequestPartition(
            partition_index=2, committed_offset=0, committed_metadata=None
        )
        answer = client.call(
            OffsetCommitRequest,
            OffsetCommitResponse,
            8,
            group_id=at_b1,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=[commit(name="wire", partitions=[partition])],
        )
        assert answer.topics[0].partitions[0].error_code == 14  # queue 2's owner (b3) is down: retry
    finally:
        client.close()


def test_peer_calls_refuse_unknown_calls_and_malformed_bodies(trio: KafkaCluster, tmp_path: Path) -> None:
    with trio.http("b1") as http:
        unknown = http.post("/kafka/peer/txn-rewind", content=b"{}")
        assert unknown.status_code == 400 and "txn-rewind" in unknown.json()["message"]
        malformed = http.post("/kafka/peer/txn-end", content=b'{"transactional_id": "a"}')
        assert malformed.status_code == 400 and "txn-end" in malformed.json()["message"]
        answered = http.post("/kafka/peer/txn-state", content=b'{"transactional_id": "none", "asker": "b2"}')
        assert answered.status_code == 200 and answered.json() == {"mirror": None}
    lone = start_broker(ServerConfig(store=light_config(tmp_path / "lone")))  # no Kafka gateway
    try:
        with lone.client() as http:
            refused = http.post("/kafka/peer/txn-state", content=b"{}")
            assert refused.status_code == 503 and refused.json()["error"] == "kafka_unavailable"
    finally:
        lone.stop()
