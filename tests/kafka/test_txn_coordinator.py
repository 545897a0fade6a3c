"""The transaction coordinator's state machine, driven without sockets (a settable clock)."""

from __future__ import annotations

from ingest_api.kafka.errors import ErrorCode
from ingest_api.kafka.txn_coordinator import (
    MAX_PRODUCER_EPOCH,
    TxnConfig,
    TxnCoordinator,
    TxnEntry,
    TxnState,
    parse_transaction_id,
    transaction_id,
)

TID = "app-1"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def initialised(clock: Clock | None = None, producer_id: int = 7, timeout_ms: int = 60_000) -> TxnCoordinator:
    coordinator = TxnCoordinator(clock or Clock())
    plan = coordinator.plan_init(TID, timeout_ms, -1, -1)
    assert plan.error == ErrorCode.NONE and plan.new_producer_id and plan.abort is None
    coordinator.init_done(TID, producer_id, 0, timeout_ms)
    return coordinator


def test_a_transaction_goes_ongoing_prepare_complete_and_ids_follow_it() -> None:
    coordinator = initialised()
    assert coordinator.get(TID).state is TxnState.EMPTY  # type: ignore[union-attr]
    assert coordinator.add_partitions(TID, 7, 0, [("a", 0), ("b", 2)]) == ErrorCode.NONE
    assert coordinator.add_offsets(TID, 7, 0, "ctp") == ErrorCode.NONE
    entry = coordinator.get(TID)
    assert entry is not None and entry.state is TxnState.ONGOING
    assert entry.partitions == {("a", 0), ("b", 2)} and entry.groups == {"ctp"}
    assert coordinator.join(TID, 7, 0, partition=("a", 1)) == (ErrorCode.NONE, "kafka-7-0-1")
    assert coordinator.plan_end(TID, 7, 0, commit=True) == (ErrorCode.NONE, "kafka-7-0-1")
    assert entry.state is TxnState.PREPARE_COMMIT
    assert coordinator.join(TID, 7, 0, partition=("a", 0))[0] == ErrorCode.INVALID_TXN_STATE
    assert coordinator.plan_end(TID, 7, 0, commit=True) == (ErrorCode.CONCURRENT_TRANSACTIONS, None)
    coordinator.end_done(TID, committed=True)
    assert entry.state is TxnState.COMPLETE_COMMIT
    assert coordinator.plan_end(TID, 7, 0, commit=True) == (ErrorCode.NONE, None)  # a retry
    assert coordinator.plan_end(TID, 7, 0, commit=False) == (ErrorCode.INVALID_TXN_STATE, None)
    assert coordinator.add_partitions(TID, 7, 0, [("a", 0)]) == ErrorCode.NONE
    assert entry.transaction_id == "kafka-7-0-2" and entry.partitions == {("a", 0)}
    assert parse_transaction_id(entry.transaction_id) == (7, 0, 2)
    assert parse_transaction_id("7F000001") is None and transaction_id(1, 2, 3) == "kafka-1-2-3"


def test_out_of_order_and_fenced_calls_get_kafkas_codes() -> None:
    coordinator = TxnCoordinator(Clock())
    assert coordinator.plan_end(TID, 1, 0, commit=True)[0] == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert coordinator.add_partitions(TID, 1, 0, [("a", 0)]) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    coordinator = initialised()
    assert coordinator.plan_end(TID, 7, 0, commit=True)[0] == ErrorCode.INVALID_TXN_STATE  # nothing begun
    assert coordinator.plan_end(TID, 7, 0, commit=False)[0] == ErrorCode.INVALID_TXN_STATE
    assert coordinator.join(TID, 7, 0, partition=("a", 0))[0] == ErrorCode.INVALID_TXN_STATE
    assert coordinator.add_partitions(TID, 8, 0, [("a", 0)]) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert coordinator.add_partitions(TID, 7, 1, [("a", 0)]) == ErrorCode.PRODUCER_FENCED
    assert coordinator.plan_init(TID, 0, -1, -1).error == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert coordinator.plan_init(TID, 900_001, -1, -1).error == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert TxnCoordinator(Clock(), TxnConfig(max_timeout_ms=10)).plan_init("x", 11, -1, -1).error == (
        ErrorCode.INVALID_TRANSACTION_TIMEOUT
    )


def test_a_second_init_aborts_the_ongoing_transaction_and_fences_the_old_epoch() -> None:
    coordinator = initialised()
    coordinator.add_partitions(TID, 7, 0, [("a", 0)])
    plan = coordinator.plan_init(TID, 60_000, -1, -1)
    assert (plan.error, plan.abort, plan.producer_id, plan.epoch) == (ErrorCode.NONE, "kafka-7-0-1", 7, 1)
    assert coordinator.get(TID).state is TxnState.PREPARE_ABORT  # type: ignore[union-attr]
    assert coordinator.plan_init(TID, 60_000, -1, -1).error == ErrorCode.CONCURRENT_TRANSACTIONS
    coordinator.init_done(TID, 7, 1, 60_000)
    assert coordinator.add_partitions(TID, 7, 0, [("a", 0)]) == ErrorCode.PRODUCER_FENCED
    assert coordinator.plan_end(TID, 7, 0, commit=True)[0] == ErrorCode.PRODUCER_FENCED
    assert coordinator.add_partitions(TID, 7, 1, [("a", 0)]) == ErrorCode.NONE
    # KIP-360: the current producer may re-init naming its epoch (or the one before a bump).
    assert coordinator.plan_init(TID, 60_000, 7, 0).error == ErrorCode.NONE
    coordinator.end_done(TID, committed=None)  # (the plan's abort failed: Ongoing again)
    assert coordinator.plan_init(TID, 60_000, 7, 5).error == ErrorCode.PRODUCER_FENCED
    assert coordinator.plan_init(TID, 60_000, 8, 1).error == ErrorCode.PRODUCER_FENCED
    assert coordinator.plan_init("unknown", 60_000, 8, 1).error == ErrorCode.INVALID_PRODUCER_ID_MAPPING


def test_epoch_exhaustion_starts_a_new_producer_id() -> None:
    coordinator = initialised()
    coordinator.init_done(TID, 7, MAX_PRODUCER_EPOCH, 60_000)
    assert coordinator.plan_init(TID, 60_000, -1, -1).new_producer_id


def test_expiry_lists_ongoing_transactions_past_their_timeout_then_fences() -> None:
    clock = Clock()
    coordinator = initialised(clock, timeout_ms=1000)
    assert coordinator.expired() == []
    coordinator.add_partitions(TID, 7, 0, [("a", 0)])
    clock.now += 1000
    assert coordinator.expired() == []
    clock.now += 1
    (expired,) = coordinator.expired()
    assert expired.transaction_id == "kafka-7-0-1"
    coordinator.plan_end(TID, 7, 0, commit=False)
    coordinator.fence_done(TID, 7, 1)
    entry = coordinator.get(TID)
    assert entry is not None and (entry.epoch, entry.last_epoch, entry.state) == (
        1,
        0,
        TxnState.COMPLETE_ABORT,
    )
    assert coordinator.expired() == []
    assert coordinator.plan_end(TID, 7, 0, commit=True)[0] == ErrorCode.PRODUCER_FENCED


def test_a_recovered_entry_forgives_what_the_restart_forgot() -> None:
    clock = Clock()
    coordinator = TxnCoordinator(clock)
    coordinator.recover(TxnEntry(TID, 7, 3, 60_000, state=TxnState.COMPLETE_COMMIT, sequence=4))
    # AddPartitionsToTxn of the next transaction was lost with the restart: Produce begins it.
    assert coordinator.join(TID, 7, 3, partition=("a", 0)) == (ErrorCode.NONE, "kafka-7-3-5")
    assert coordinator.plan_end(TID, 7, 3, commit=True) == (ErrorCode.NONE, "kafka-7-3-5")
    coordinator.end_done(TID, committed=True)
    coordinator.recover(TxnEntry(TID, 7, 3, 60_000, state=TxnState.COMPLETE_ABORT, sequence=5))
    assert coordinator.plan_end(TID, 7, 3, commit=False) == (ErrorCode.NONE, None)  # nothing to end
    assert coordinator.add_offsets(TID, 7, 3, "g") == ErrorCode.NONE  # a control call ends the grace
    coordinator.plan_end(TID, 7, 3, commit=False)
    coordinator.end_done(TID, committed=False)
    assert coordinator.join(TID, 7, 3, group="g")[0] == ErrorCode.INVALID_TXN_STATE
    ongoing = TxnEntry(TID, 7, 3, 1000, state=TxnState.ONGOING, sequence=9, started_ms=0)
    coordinator.recover(ongoing)
    assert ongoing.started_ms == clock.now  # a full timeout again from the restart
    assert coordinator.expired() == []
