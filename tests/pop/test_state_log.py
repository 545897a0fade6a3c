"""The state topic's replay: from the newest complete snapshot, a torn one skipped."""

from __future__ import annotations

from broker.pop import PopService
from broker.pop.state_codec import Kind, StateRecord, snapshot_mark
from broker.pop.state_log import StateLog
from store import POP_STATE_TOPIC
from tests.pop.conftest import Pop


def test_replay_starts_at_the_newest_snapshot(pop: Pop) -> None:
    pop.put("t", b"a", b"b")
    (first,) = pop.service.receive("g", "t", 1, 5_000)
    pop.service.snapshot()
    snapshot_end = pop.store.max_offset(POP_STATE_TOPIC, 0)
    pop.service.ack("g", [first.receipt_handle])
    (second,) = pop.service.receive("g", "t", 1, 5_000)
    log = StateLog(pop.store)
    table = log.load()
    assert log.since_snapshot == 2  # the ack and the receive after the snapshot
    assert pop.store.max_offset(POP_STATE_TOPIC, 0) == snapshot_end + 2  # nothing written
    lane = table.lanes[("g", "t")]
    assert [e.queue_offset for e in lane.inflight.values()] == [second.message.queue_offset]
    assert table.secret == pop.service.table.secret


def test_a_torn_snapshot_is_skipped_for_the_one_before(pop: Pop) -> None:
    pop.put("t", b"a")
    (got,) = pop.service.receive("g", "t", 1, 5_000)
    # what a crash in the middle of a snapshot's append leaves: a BEGIN, a part, no END
    torn = [
        StateRecord(Kind.SNAPSHOT_BEGIN, 1, tail=snapshot_mark(99, 3, bytes(32))),
        StateRecord(Kind.SNAPSHOT_PART, 1, "g", "t"),
    ]
    StateLog(pop.store).append(torn)
    pop.reopen(crash=True)
    assert pop.service.table.secret != bytes(32)  # the torn snapshot's secret was not taken
    assert pop.service.ack("g", [got.receipt_handle])[0].ok  # the receive before it replayed
    pop.clock.advance(60_000)
    assert pop.service.receive("g", "t", 32, 5_000) == []


def test_an_empty_state_topic_gets_a_secret_and_a_first_snapshot(pop: Pop) -> None:
    # a store that never served POP writes nothing: opening the service stored no record
    assert pop.store.max_offset(POP_STATE_TOPIC, 0) == 0
    assert len(pop.service.table.secret) == 32
    secret = pop.service.table.secret
    # the first change goes out behind an empty snapshot (BEGIN, END) carrying the secret
    pop.service.configure_group("g", max_retries=3)
    assert pop.store.max_offset(POP_STATE_TOPIC, 0) == 3
    pop.reopen(crash=True)
    assert pop.service.table.secret == secret


def test_a_table_reloaded_from_the_topic_keeps_the_secret_it_found(pop: Pop) -> None:
    """A replica opens on an empty state topic (a fresh secret, not yet written); the master's
    state arrives by replication and the replica is promoted (``reload``). Its next change must
    not write its own fresh secret as a newer, empty snapshot: that would drop the master's
    state and every handle it signed."""
    master = PopService(pop.store)  # stands in for the old master writing the shared topic
    try:
        master.configure_group("g", max_retries=3)
        written = master.table.secret
    finally:
        master.close()
    pop.service.reload()  # promoted
    assert pop.service.table.secret == written
    pop.service.configure_group("h", max_retries=5)
    pop.reopen(crash=True)
    assert pop.service.table.secret == written
    assert pop.service.table.group_settings("g").max_retries == 3
    assert pop.service.table.group_settings("h").max_retries == 5
