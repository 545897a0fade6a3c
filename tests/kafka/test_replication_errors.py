"""The Kafka answer to each refused write of a replica (docs/replication.md)."""

from __future__ import annotations

from ingest_api.kafka.errors import ErrorCode
from ingest_api.kafka.handlers.produce import replication_error
from store import FlushSlaveTimeout, NotMaster, SlaveNotAvailable, StoreNotWritable
from store.errors import ReplicaFenced


def test_replication_refusals_map_to_kafka_errors() -> None:
    assert (
        replication_error(SlaveNotAvailable("1 of 2 in sync", appended=False))
        is ErrorCode.NOT_ENOUGH_REPLICAS
    )
    assert (
        replication_error(SlaveNotAvailable("1 of 2 in sync", appended=True))
        is ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    )
    assert replication_error(FlushSlaveTimeout("3 s", end_offset=10)) is ErrorCode.REQUEST_TIMED_OUT
    assert replication_error(NotMaster("a slave")) is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert replication_error(ReplicaFenced("suspended")) is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert replication_error(StoreNotWritable("disk full")) is ErrorCode.KAFKA_STORAGE_ERROR
