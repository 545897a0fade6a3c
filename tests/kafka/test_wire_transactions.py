"""Kafka transactions on the wire (raw sockets, real store): every response the transaction APIs
add, the error codes of calls out of order or fenced, records invisible until EndTxn, offsets
applied only by a commit, the broker's timeout abort, and connections that stay up."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import crc32c
import pytest
from kafka.protocol.admin import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)

from ingest_api.kafka import GatewayThread
from ingest_api.kafka.context import GatewayConfig
from store import MessageStore
from tests.kafka.rawclient import RawClient, record_batch
from tests.kafka.test_wire import api_versions_ok
from tests.support.waiting import wait_until

warnings.filterwarnings("ignore", "(read|open)_text is deprecated", DeprecationWarning)

TID = "wire-tx"


class TxnClient:
    """One raw connection speaking the transaction APIs at chosen versions."""

    def __init__(self, port: int) -> None:
        self.raw = RawClient(port)

    def close(self) -> None:
        self.raw.close()

    def init(self, tid: str | None = TID, version: int = 4, timeout_ms: int = 60_000, **kip360: int) -> Any:
        fields: dict[str, Any] = {"transactional_id": tid, "transaction_timeout_ms": timeout_ms}
        if version >= 3:
            fields.update(
                producer_id=kip360.get("producer_id", -1), producer_epoch=kip360.get("producer_epoch", -1)
            )
        return self.raw.call(InitProducerIdRequest, InitProducerIdResponse, version, **fields)

    def add_partitions(self, pid: int, epoch: int, parts: dict[str, list[int]], version: int = 3) -> dict:
        topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
        response = self.raw.call(
            AddPartitionsToTxnRequest,
            AddPartitionsToTxnResponse,
            version,
            v3_and_below_transactional_id=TID,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[topic(name=n, partitions=p) for n, p in parts.items()],
        )
        return {
            (t.name, r.partition_index): r.partition_error_code
            for t in response.results_by_topic_v3_and_below
            for r in t.results_by_partition
        }

    def add_offsets(self, pid: int, epoch: int, group: str, version: int = 3) -> int:
        return int(
            self.raw.call(
                AddOffsetsToTxnRequest,
                AddOffsetsToTxnResponse,
                version,
                transactional_id=TID,
                producer_id=pid,
                producer_epoch=epoch,
                group_id=group,
            ).error_code
        )

    def txn_commit(
        self, pid: int, epoch: int, group: str, offsets: dict[tuple[str, int], int], version: int = 3
    ) -> set:
        topic = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
        by_topic: dict[str, list[Any]] = {}
        for (name, partition), offset in offsets.items():
            by_topic.setdefault(name, []).append(
                topic.TxnOffsetCommitRequestPartition(
                    partition_index=partition,
                    committed_offset=offset,
                    committed_leader_epoch=-1,
                    committed_metadata="",
                )
            )
        fields: dict[str, Any] = {
            "transactional_id": TID,
            "group_id": group,
            "producer_id": pid,
            "producer_epoch": epoch,
            "topics": [topic(name=n, partitions=p) for n, p in by_topic.items()],
        }
        if version >= 3:
            fields.update(generation_id=-1, member_id="", group_instance_id=None)
        response = self.raw.call(TxnOffsetCommitRequest, TxnOffsetCommitResponse, version, **fields)
        return {p.error_code for t in response.topics for p in t.partitions}

    def end(self, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
        return int(
            self.raw.call(
                EndTxnRequest,
                EndTxnResponse,
                version,
                transactional_id=TID,
                producer_id=pid,
                producer_epoch=epoch,
                committed=commit,
            ).error_code
        )

    def produce(self, topic: str, partition: int, batch: bytes, tid: str | None = TID) -> tuple[int, int]:
        data = ProduceRequest.TopicProduceData
        response = self.raw.call(
            ProduceRequest,
            ProduceResponse,
            9,
            transactional_id=tid,
            acks=-1,
            timeout_ms=5000,
            topic_data=[
                data(name=topic, partition_data=[data.PartitionProduceData(index=partition, records=batch)])
            ],
        )
        (part,) = response.responses[0].partition_responses
        return part.error_code, part.base_offset


def tx_batch(values: list[bytes], pid: int, epoch: int, sequence: int) -> bytes:
    return record_batch(values, pid, epoch, sequence, transactional=True)


def transactional_without_producer(values: list[bytes]) -> bytes:
    """A batch with the transactional attribute but no producer id (clients never build it)."""
    batch = bytearray(record_batch(values))
    batch[22] |= 0x10  # attributes (int16 at 21): bit 4 = transactional
    batch[17:21] = crc32c.crc32c(bytes(batch[21:])).to_bytes(4, "big")  # CRC-32C from attributes on
    return bytes(batch)


@pytest.fixture
def txn(gateway: GatewayThread, store: MessageStore) -> Iterator[TxnClient]:
    store.create_topic("out", 2)
    store.create_topic("in", 2)
    client = TxnClient(gateway.port)
    yield client
    client.close()


def stored(store: MessageStore, topic: str, partition: int) -> list[bytes]:
    return store.read_batch(topic, partition, 0, 1000).batch.column("body").to_pylist()


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_find_coordinator_answers_for_transactional_ids(
    txn: TxnClient, gateway: GatewayThread, version: int
) -> None:
    if version >= 4:
        response = txn.raw.call(
            FindCoordinatorRequest, FindCoordinatorResponse, version, key_type=1, coordinator_keys=[TID]
        )
        (found,) = response.coordinators
        assert (found.key, found.error_code, found.port) == (TID, 0, gateway.port)
    else:
        response = txn.raw.call(FindCoordinatorRequest, FindCoordinatorResponse, version, key=TID, key_type=1)
        assert (response.error_code, response.node_id, response.port) == (0, 0, gateway.port)
    bad = txn.raw.call(FindCoordinatorRequest, FindCoordinatorResponse, 3, key=TID, key_type=2)
    assert bad.error_code == 42  # INVALID_REQUEST: no such key type
    assert api_versions_ok(txn.raw)


def test_commit_makes_records_and_offsets_visible_in_one_step(txn: TxnClient, store: MessageStore) -> None:
    init = txn.init()
    pid, epoch = init.producer_id, init.producer_epoch
    assert (init.error_code, epoch) == (0, 0)
    assert txn.add_partitions(pid, epoch, {"out": [0, 1]}) == {("out", 0): 0, ("out", 1): 0}
    assert txn.produce("out", 0, tx_batch([b"a", b"b"], pid, epoch, 0)) == (0, -1)  # no offset before commit
    assert txn.produce("out", 1, tx_batch([b"c"], pid, epoch, 0)) == (0, -1)
    assert txn.produce("out", 0, tx_batch([b"a", b"b"], pid, epoch, 0)) == (
        0,
        -1,
    )  # a retry: not stored twice
    assert txn.add_offsets(pid, epoch, "ctp") == 0
    assert txn.txn_commit(pid, epoch, "ctp", {("in", 0): 5, ("in", 1): 7}) == {0}
    assert stored(store, "out", 0) == [] and store.committed_offsets("ctp", "in") == {}
    assert txn.end(pid, epoch, commit=True) == 0
    assert stored(store, "out", 0) == [b"a", b"b"] and stored(store, "out", 1) == [b"c"]
    assert store.committed_offsets("ctp", "in") == {0: 5, 1: 7}
    assert txn.end(pid, epoch, commit=True) == 0  # a retried EndTxn: nothing more
    assert stored(store, "out", 0) == [b"a", b"b"]


def test_abort_writes_nothing_and_applies_no_offsets(txn: TxnClient, store: MessageStore) -> None:
    init = txn.init()
    pid, epoch = init.producer_id, init.producer_epoch
    txn.add_partitions(pid, epoch, {"out": [0]})
    assert txn.produce("out", 0, tx_batch([b"x"], pid, epoch, 0)) == (0, -1)
    assert txn.add_offsets(pid, epoch, "ctp") == 0
    assert txn.txn_commit(pid, epoch, "ctp", {("in", 0): 9}) == {0}
    assert txn.end(pid, epoch, commit=False) == 0
    assert txn.end(pid, epoch, commit=False) == 0
    assert txn.end(pid, epoch, commit=True) == 48  # INVALID_TXN_STATE: it was aborted
    assert stored(store, "out", 0) == [] and store.committed_offsets("ctp", "in") == {}
    # The next transaction of the same producer continues its sequence.
    txn.add_partitions(pid, epoch, {"out": [0]})
    assert txn.produce("out", 0, tx_batch([b"y"], pid, epoch, 1)) == (0, -1)
    assert txn.end(pid, epoch, commit=True) == 0
    assert stored(store, "out", 0) == [b"y"]


def test_calls_out_of_order_get_kafkas_error_codes_and_keep_the_connection(
    txn: TxnClient, store: MessageStore
) -> None:
    assert txn.end(4242, 0, commit=True) == 49  # INVALID_PRODUCER_ID_MAPPING: no InitProducerId
    assert txn.add_partitions(4242, 0, {"out": [0]}) == {("out", 0): 49}
    assert txn.add_offsets(4242, 0, "g") == 49
    init = txn.init()
    pid, epoch = init.producer_id, init.producer_epoch
    assert txn.end(pid, epoch, commit=True) == 48  # INVALID_TXN_STATE: nothing begun
    assert txn.produce("out", 0, tx_batch([b"x"], pid, epoch, 0)) == (48, -1)  # not in a transaction
    assert txn.add_partitions(pid, epoch, {"out": [0], "nope": [0], "in": [9]}) == {
        ("out", 0): 55,  # OPERATION_NOT_ATTEMPTED
        ("nope", 0): 3,  # UNKNOWN_TOPIC_OR_PARTITION
        ("in", 9): 3,
    }
    no_tid = record_batch([b"x"], pid, epoch, 0, transactional=True)
    assert txn.produce("out", 0, no_tid, tid=None) == (87, -1)  # no transactional id in the request
    assert txn.produce("out", 0, transactional_without_producer([b"x"])) == (87, -1)
    assert txn.init(timeout_ms=0).error_code == 50  # INVALID_TRANSACTION_TIMEOUT
    assert txn.init(timeout_ms=900_001).error_code == 50
    assert api_versions_ok(txn.raw)
    assert stored(store, "out", 0) == []


@pytest.mark.parametrize(("version", "fenced"), [(0, 47), (1, 47), (2, 90), (3, 90)])
def test_a_second_init_fences_the_first_producer(
    txn: TxnClient, store: MessageStore, version: int, fenced: int
) -> None:
    first = txn.init()
    pid = first.producer_id
    txn.add_partitions(pid, 0, {"out": [0]})
    assert txn.produce("out", 0, tx_batch([b"zombie"], pid, 0, 0)) == (0, -1)
    second = txn.init()
    assert (second.producer_id, second.producer_epoch) == (pid, 1)  # the open transaction is aborted
    assert txn.add_partitions(pid, 0, {"out": [0]}, version=version) == {("out", 0): fenced}
    assert txn.add_offsets(pid, 0, "g", version=version) == fenced
    assert txn.end(pid, 0, commit=True, version=version) == fenced
    assert txn.produce("out", 0, tx_batch([b"late"], pid, 0, 1)) == (
        47,
        -1,
    )  # Produce: INVALID_PRODUCER_EPOCH
    assert txn.txn_commit(pid, 0, "g", {("in", 0): 1}) == {47}
    assert stored(store, "out", 0) == []
    assert txn.add_partitions(pid, 1, {"out": [0]}) == {("out", 0): 0}


def test_init_producer_id_v4_fences_with_producer_fenced_and_kip360_resumes(txn: TxnClient) -> None:
    first = txn.init()
    assert txn.init(producer_id=first.producer_id, producer_epoch=0).producer_epoch == 1  # KIP-360 bump
    stale = txn.init(producer_id=first.producer_id, producer_epoch=7)
    assert stale.error_code == 90  # PRODUCER_FENCED
    assert txn.init(version=3, producer_id=first.producer_id, producer_epoch=7).error_code == 47
    assert txn.init(tid="never-seen", producer_id=5, producer_epoch=0).error_code == 49


def test_an_expired_transaction_is_aborted_and_its_producer_fenced(
    store: MessageStore,
) -> None:
    store.create_topic("out", 1)
    config = GatewayConfig(port=0, coordinator_tick_ms=20).validate()
    with GatewayThread(store, config) as gateway:
        txn = TxnClient(gateway.port)
        try:
            init = txn.init(timeout_ms=300)
            pid = init.producer_id
            txn.add_partitions(pid, 0, {"out": [0]})
            assert txn.produce("out", 0, tx_batch([b"late"], pid, 0, 0)) == (0, -1)
            context = gateway.gateway.context  # type: ignore[union-attr]
            wait_until(lambda: context.txn.get(TID).epoch == 1, 10, "the timeout abort")
            assert txn.end(pid, 0, commit=True) == 90
            assert stored(store, "out", 0) == []
            tx = context.transactions.get(f"kafka-{pid}-0-1")
            assert tx is not None and tx.outcome is not None and tx.outcome.value == "rollback"
            assert txn.init().producer_epoch == 2
        finally:
            txn.close()


def test_describe_and_list_transactions(txn: TxnClient) -> None:
    init = txn.init()
    txn.add_partitions(init.producer_id, 0, {"out": [1, 0]})
    described = txn.raw.call(
        DescribeTransactionsRequest, DescribeTransactionsResponse, 0, transactional_ids=[TID, "nope"]
    ).transaction_states
    ours, unknown = described
    assert (ours.error_code, ours.transaction_state, ours.producer_id) == (0, "Ongoing", init.producer_id)
    assert ours.transaction_timeout_ms == 60_000 and ours.transaction_start_time_ms > 0
    assert [(t.topic, list(t.partitions)) for t in ours.topics] == [("out", [0, 1])]
    assert unknown.error_code == 105  # TRANSACTIONAL_ID_NOT_FOUND
    listed = txn.raw.call(
        ListTransactionsRequest,
        ListTransactionsResponse,
        1,
        state_filters=["Ongoing", "Bogus"],
        producer_id_filters=[],
        duration_filter=-1,
    )
    assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states] == [
        (TID, "Ongoing")
    ]
    assert list(listed.unknown_state_filters) == ["Bogus"]
    empty = txn.raw.call(
        ListTransactionsRequest,
        ListTransactionsResponse,
        0,
        state_filters=["CompleteCommit"],
        producer_id_filters=[],
    )
    assert list(empty.transaction_states) == []
