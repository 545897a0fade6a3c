"""Wire-level behaviour over raw sockets against the real store: fallback, garbage, truncation,
acks=0, idempotent de-duplication, long-poll Fetch."""

from __future__ import annotations

import struct
import threading
import time
from pathlib import Path

import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)
from kafka.record.memory_records import MemoryRecords

from ingest_api.kafka import GatewayThread
from store import KAFKA_TXN_STATE_TOPIC, Message, MessageStore
from tests.kafka.conftest import gateway_config, store_config
from tests.kafka.rawclient import RawClient, record_batch
from tests.support.waiting import wait_until

TOPIC = "wire"


def api_versions_ok(client: RawClient) -> bool:
    response = client.call(ApiVersionsRequest, ApiVersionsResponse, 2)
    return response.error_code == 0 and len(response.api_keys) == 23


def produce(
    client: RawClient, batch: bytes, acks: int = -1, partition: int = 0, version: int = 9
) -> tuple[int, int]:
    data = ProduceRequest.TopicProduceData
    correlation = client.send(
        ProduceRequest,
        version,
        transactional_id=None,
        acks=acks,
        timeout_ms=5000,
        topic_data=[
            data(name=TOPIC, partition_data=[data.PartitionProduceData(index=partition, records=batch)])
        ],
    )
    if acks == 0:
        return -1, -1
    response = client.recv(ProduceResponse, version)
    assert response.header.correlation_id == correlation
    (part,) = response.responses[0].partition_responses
    return part.error_code, part.base_offset


@pytest.fixture
def client(gateway: GatewayThread, store: MessageStore) -> RawClient:
    store.create_topic(TOPIC, 2)
    raw = RawClient(gateway.port)
    yield raw
    raw.close()


def test_unknown_api_versions_version_gets_error_35_then_works(client: RawClient) -> None:
    # ApiVersions v7 with a body we could not parse: answered with a v0 body, socket kept open.
    header = struct.pack(">hhih", 18, 7, 42, 3) + b"abc" + b"\x00"
    client.send_raw(struct.pack(">i", len(header) + 5) + header + b"\x99" * 5)
    frame = client.recv_frame()
    assert frame is not None
    correlation, error, count = struct.unpack_from(">ihi", frame)
    assert (correlation, error, count) == (42, 35, 23)
    assert api_versions_ok(client)


@pytest.mark.parametrize(
    "garbage",
    [
        b"\xff\xff\xff\xf0" + b"\x00" * 16,  # negative size
        b"\x7f\xff\xff\xff",  # 2 GiB frame
        struct.pack(">i", 12) + struct.pack(">hhih", 99, 0, 1, -1) + b"\x00\x00",  # unknown api key
        struct.pack(">i", 10) + struct.pack(">hhih", 3, 9, 1, -1),  # Metadata v9 with no body
        struct.pack(">i", 10) + struct.pack(">hhih", 1, 13, 1, -1),  # Fetch v13: never advertised
    ],
    ids=["negative-size", "huge-size", "unknown-api", "truncated-body", "topic-id-version"],
)
def test_garbage_closes_only_that_connection(
    gateway: GatewayThread, client: RawClient, garbage: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    bystander = RawClient(gateway.port)
    try:
        client.send_raw(garbage)
        wait_until(client.closed_by_peer, 5, "the broker to close the garbage connection")
        assert "closing connection" in caplog.text
        assert api_versions_ok(bystander)
        fresh = RawClient(gateway.port)
        assert api_versions_ok(fresh)
        fresh.close()
    finally:
        bystander.close()


def test_frame_cut_mid_way_is_logged_and_survived(
    gateway: GatewayThread, caplog: pytest.LogCaptureFixture
) -> None:
    cut = RawClient(gateway.port)
    cut.send_raw(struct.pack(">i", 100) + b"\x00\x03\x00\x09" + b"\x00" * 10)
    cut.sock.shutdown(1)  # half-close: the broker sees EOF inside the frame
    wait_until(cut.closed_by_peer, 5, "the broker to drop the truncated connection")
    cut.close()
    wait_until(lambda: "truncated frame" in caplog.text, 5, "a log line")
    other = RawClient(gateway.port)
    assert api_versions_ok(other)
    other.close()


def test_acks_zero_gets_no_response(client: RawClient, store: MessageStore) -> None:
    produce(client, record_batch([b"a", b"b"]), acks=0)
    correlation = client.send(MetadataRequest, 12, topics=None, allow_auto_topic_creation=False)
    response = client.recv(MetadataResponse, 12)
    assert response.header.correlation_id == correlation  # the Produce got nothing back
    assert store.max_offset(TOPIC, 0) == 2


def test_idempotent_retries_are_deduplicated(client: RawClient, store: MessageStore) -> None:
    init = client.call(
        InitProducerIdRequest,
        InitProducerIdResponse,
        4,
        transactional_id=None,
        transaction_timeout_ms=1000,
        producer_id=-1,
        producer_epoch=-1,
    )
    pid = init.producer_id
    assert init.error_code == 0
    assert pid >= 0
    assert init.producer_epoch == 0
    first = record_batch([b"0", b"1", b"2"], pid, 0, 0)
    assert produce(client, first) == (0, 0)
    assert produce(client, first) == (0, 0)  # a retry: same base offset, nothing written
    assert produce(client, record_batch([b"3"], pid, 0, 3)) == (0, 3)
    assert produce(client, record_batch([b"3"], pid, 0, 3)) == (0, 3)
    assert store.max_offset(TOPIC, 0) == 4
    assert produce(client, record_batch([b"x"], pid, 0, 9))[0] == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
    bumped = client.call(
        InitProducerIdRequest,
        InitProducerIdResponse,
        4,
        transactional_id=None,
        transaction_timeout_ms=1000,
        producer_id=pid,
        producer_epoch=0,
    )
    assert (bumped.producer_id, bumped.producer_epoch) == (pid, 1)
    assert produce(client, record_batch([b"4"], pid, 1, 0)) == (0, 4)
    assert produce(client, record_batch([b"y"], pid, 0, 4))[0] == 47  # INVALID_PRODUCER_EPOCH
    assert store.max_offset(TOPIC, 0) == 5
    other = client.call(
        InitProducerIdRequest,
        InitProducerIdResponse,
        4,
        transactional_id=None,
        transaction_timeout_ms=1000,
        producer_id=-1,
        producer_epoch=-1,
    )
    assert other.producer_id > pid
    assert store.max_offset(KAFKA_TXN_STATE_TOPIC, 0) == 2  # one record per producer id handed out


def test_corrupt_batch_is_a_partition_error(client: RawClient, store: MessageStore) -> None:
    batch = bytearray(record_batch([b"a"]))
    batch[-1] ^= 0x55
    assert produce(client, bytes(batch))[0] == 2  # CORRUPT_MESSAGE
    assert produce(client, record_batch([b"a"]), partition=7)[0] == 3  # no such partition
    assert store.max_offset(TOPIC, 0) == 0
    assert api_versions_ok(client)  # the connection is still usable


def fetch(client: RawClient, offset: int, max_wait_ms: int, partition: int = 0) -> tuple[int, int, bytes]:
    topic = FetchRequest.FetchTopic
    response = client.call(
        FetchRequest,
        FetchResponse,
        12,
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            topic(
                topic=TOPIC,
                partitions=[
                    topic.FetchPartition(
                        partition=partition,
                        current_leader_epoch=-1,
                        fetch_offset=offset,
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
    assert response.session_id == 0
    (part,) = response.responses[0].partitions
    assert part.records is not None  # never null (librdkafka rejects it)
    return part.error_code, part.high_watermark, part.records


def test_fetch_long_poll_wakes_on_arrival(
    gateway: GatewayThread, client: RawClient, store: MessageStore
) -> None:
    started = time.monotonic()
    assert fetch(client, 0, 300) == (0, 0, b"")  # empty partition: waits max_wait_ms, empty records
    assert time.monotonic() - started >= 0.25

    result: list[tuple[int, int, bytes]] = []
    poller = threading.Thread(target=lambda: result.append(fetch(client, 0, 8000)))
    started = time.monotonic()
    poller.start()
    other = RawClient(gateway.port)
    assert api_versions_ok(other)  # the parked fetch does not block the loop
    other.close()
    store.put_message(Message(topic=TOPIC, body=b"late", queue_id=0, keys=("k",)))
    poller.join(10)
    assert time.monotonic() - started < 5
    error, high_watermark, records = result[0]
    assert (error, high_watermark) == (0, 1)
    (batch,) = list(MemoryRecords(records))
    assert [(r.offset, r.key, r.value) for r in batch] == [(0, b"k", b"late")]
    assert fetch(client, 5, 0)[0] == 1  # OFFSET_OUT_OF_RANGE


def test_system_topics_are_never_exposed(client: RawClient, store: MessageStore) -> None:
    store.put_message(Message(topic=TOPIC, body=b"later", delay_level=3))  # lands in SCHEDULE_TOPIC_XXXX
    assert "SCHEDULE_TOPIC_XXXX" in store.topics(include_system=True)
    listed = client.call(MetadataRequest, MetadataResponse, 12, topics=None, allow_auto_topic_creation=False)
    assert [t.name for t in listed.topics] == [TOPIC]
    asked = client.call(
        MetadataRequest,
        MetadataResponse,
        12,
        topics=[MetadataRequest.MetadataRequestTopic(name="SCHEDULE_TOPIC_XXXX")],
        allow_auto_topic_creation=True,
    )
    assert [(t.name, t.error_code) for t in asked.topics] == [("SCHEDULE_TOPIC_XXXX", 3)]
    topic = FetchRequest.FetchTopic
    fetched = client.call(
        FetchRequest,
        FetchResponse,
        12,
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        forgotten_topics_data=[],
        rack_id="",
        topics=[
            topic(
                topic="SCHEDULE_TOPIC_XXXX",
                partitions=[
                    topic.FetchPartition(
                        partition=2,
                        current_leader_epoch=-1,
                        fetch_offset=0,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
    )
    assert fetched.responses[0].partitions[0].error_code == 3


def test_idempotent_retry_is_deduplicated_across_a_broker_restart(tmp_path: Path) -> None:
    config = store_config(tmp_path / "restart")
    batch_values = [b"a", b"b", b"c"]
    with MessageStore.open(config) as first_store:
        first_store.create_topic(TOPIC, 1)
        with GatewayThread(first_store, gateway_config()) as gateway:
            raw = RawClient(gateway.port)
            init = raw.call(
                InitProducerIdRequest,
                InitProducerIdResponse,
                4,
                transactional_id=None,
                transaction_timeout_ms=1000,
                producer_id=-1,
                producer_epoch=-1,
            )
            pid = init.producer_id
            assert produce(raw, record_batch(batch_values, pid, 0, 0)) == (0, 0)
            assert produce(raw, record_batch([b"d"], pid, 0, 3)) == (0, 3)
            raw.close()
    with MessageStore.open(config) as second_store:  # a restart: the sequence table is gone
        with GatewayThread(second_store, gateway_config()) as gateway:
            raw = RawClient(gateway.port)
            assert produce(raw, record_batch(batch_values, pid, 0, 0)) == (0, 0)  # found in the store
            assert produce(raw, record_batch([b"d"], pid, 0, 3)) == (0, 3)
            assert produce(raw, record_batch([b"e"], pid, 0, 4)) == (0, 4)
            raw.close()
        assert second_store.max_offset(TOPIC, 0) == 5
        bodies = second_store.read_batch(TOPIC, 0, 0, 10).batch.column("body").to_pylist()
        assert bodies == [b"a", b"b", b"c", b"d", b"e"]
