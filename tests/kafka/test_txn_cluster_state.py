"""The pure pieces of transactions that span brokers: a participant's table of announced
transactions, and the golden JSON of the broker-to-broker calls (the coordinator's ledger:
tests/kafka/test_txn_record.py)."""

from __future__ import annotations

import msgspec
import pytest

from ingest_api.kafka.errors import ErrorCode
from ingest_api.kafka.peer_messages import (
    ANSWERS,
    PEER_OPS,
    EndAnswer,
    EndMsg,
    ErrorAnswer,
    MirrorMsg,
    OffsetsHalfMsg,
    StateAnswer,
    StateAsk,
    TxnOffsetsMsg,
)
from ingest_api.kafka.txn_participants import Mirror, TxnParticipants

PID = 4_294_967_296  # member 1's first producer id (1 << 32)


def mirror(sequence: int = 1, epoch: int = 0, producer_id: int = PID) -> Mirror:
    return Mirror("app-1", producer_id, epoch, sequence, 60_000, "b2")


# --- participants ----------------------------------------------------------------------------------
def test_a_participant_accepts_only_the_announced_producer_and_epoch() -> None:
    table = TxnParticipants()
    assert table.check("app-1", PID, 0) == ErrorCode.INVALID_PRODUCER_ID_MAPPING  # nothing announced
    assert table.register(mirror())
    assert table.check("app-1", PID, 0) == ErrorCode.NONE
    assert table.get("app-1") is not None
    assert table.get("app-1").transaction_id == f"kafka-{PID}-0-1"  # type: ignore[union-attr]
    assert table.check("app-1", PID + 1, 0) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert table.register(mirror(epoch=1, sequence=0))
    assert table.check("app-1", PID, 0) == ErrorCode.PRODUCER_FENCED
    assert table.check("app-1", PID, 2) == ErrorCode.INVALID_TXN_STATE  # newer than announced: ask


def test_an_ended_transaction_is_closed_and_never_reopened_by_a_late_announcement() -> None:
    table = TxnParticipants()
    table.register(mirror(sequence=3))
    table.ended("app-1", f"kafka-{PID}-0-2")  # an older one: no effect
    assert table.check("app-1", PID, 0) == ErrorCode.NONE
    table.ended("app-1", f"kafka-{PID}-0-3")
    assert table.check("app-1", PID, 0) == ErrorCode.INVALID_TXN_STATE
    assert not table.register(mirror(sequence=3))  # a retried announcement of the ended one
    assert not table.register(mirror(sequence=2))  # an older one
    assert table.check("app-1", PID, 0) == ErrorCode.INVALID_TXN_STATE
    assert table.register(mirror(sequence=4))
    assert table.check("app-1", PID, 0) == ErrorCode.NONE
    assert table.register(mirror(sequence=0, producer_id=PID + 7))  # re-initialised id: replaces
    assert table.check("app-1", PID + 7, 0) == ErrorCode.NONE


# --- the calls ---------------------------------------------------------------------------------------
GOLDEN = [
    (
        MirrorMsg.of(mirror()),
        b'{"transactional_id":"app-1","producer_id":4294967296,"epoch":0,"sequence":1,'
        b'"timeout_ms":60000,"coordinator":"b2"}',
    ),
    (StateAsk("app-1", "b3"), b'{"transactional_id":"app-1","asker":"b3"}'),
    (StateAnswer(), b'{"mirror":null}'),
    (
        TxnOffsetsMsg("app-1", PID, 0, "readers", [("orders", 2, 17)]),
        b'{"transactional_id":"app-1","producer_id":4294967296,"epoch":0,"group":"readers",'
        b'"offsets":[["orders",2,17]]}',
    ),
    (ErrorAnswer(0), b'{"error":0}'),
    (
        EndMsg("app-1", f"kafka-{PID}-0-1", True),
        b'{"transactional_id":"app-1","transaction_id":"kafka-4294967296-0-1","commit":true}',
    ),
    (EndAnswer(None), b'{"outcome":null}'),
    (EndAnswer("commit"), b'{"outcome":"commit"}'),
]


@pytest.mark.parametrize(("message", "raw"), GOLDEN)
def test_peer_messages_golden_json(message: msgspec.Struct, raw: bytes) -> None:
    assert msgspec.json.encode(message) == raw
    assert msgspec.json.decode(raw, type=type(message)) == message


def test_peer_messages_refuse_unknown_fields_and_cover_every_op() -> None:
    half = OffsetsHalfMsg(MirrorMsg.of(mirror()), "readers", [("orders", 0, 1)])
    assert msgspec.json.decode(msgspec.json.encode(half), type=OffsetsHalfMsg) == half
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"transactional_id":"a","asker":"b","x":1}', type=StateAsk)
    assert set(PEER_OPS) == set(ANSWERS)
