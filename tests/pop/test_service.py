"""PopService with an injected clock: receive, ack, change-invisible, expiry, DLQ, FIFO, group
start, group kind, long polling, bad input, reopen."""

from __future__ import annotations

import threading
import time

import pytest

from broker.pop import (
    GroupKind,
    GroupKindConflict,
    InvalidInvisibleTime,
    InvalidMaxMessages,
    InvalidReceiptHandle,
    InvalidWaitTime,
    PopConfig,
    PopService,
    ReceiptHandleExpired,
    ReceiptHandleMismatch,
    Received,
)
from store import POP_STATE_TOPIC, Message, UnknownTopic
from tests.pop.conftest import Pop


def bodies(received: list[Received]) -> list[bytes]:
    return sorted(r.message.body for r in received)


def test_receive_hands_each_message_out_once_until_its_invisible_time(pop: Pop) -> None:
    pop.put("t", b"a", b"b", b"c")
    first = pop.service.receive("g", "t", 2, 5_000)
    second = pop.service.receive("g", "t", 32, 5_000)
    assert len(first) == 2 and len(second) == 1
    assert bodies(first + second) == [b"a", b"b", b"c"]
    assert all(r.delivery_attempt == 1 for r in first + second)
    assert pop.service.receive("g", "t", 32, 5_000) == []
    assert pop.service.receive("other", "t", 32, 5_000) != []  # every group gets every message


def test_acked_messages_never_come_back_and_unacked_ones_do_with_attempt_plus_one(pop: Pop) -> None:
    pop.put("t", b"a", b"b")
    got = pop.service.receive("g", "t", 32, 5_000)
    acked = next(r for r in got if r.message.body == b"a")
    assert pop.service.ack("g", [acked.receipt_handle])[0].ok
    pop.clock.advance(4_999)
    assert pop.service.receive("g", "t", 32, 5_000) == []
    pop.clock.advance(1)
    again = pop.service.receive("g", "t", 32, 5_000)
    assert [(r.message.body, r.delivery_attempt) for r in again] == [(b"b", 2)]
    stale = next(r for r in got if r.message.body == b"b")
    result = pop.service.ack("g", [stale.receipt_handle, again[0].receipt_handle])
    assert [(r.ok, r.code) for r in result] == [(False, "receipt_handle_expired"), (True, None)]
    pop.clock.advance(60_000)
    assert pop.service.receive("g", "t", 32, 5_000) == []


def test_change_invisible_gives_a_new_handle_and_retires_the_old(pop: Pop) -> None:
    pop.put("t", b"a")
    (got,) = pop.service.receive("g", "t", 1, 5_000)
    pop.clock.advance(4_000)
    changed = pop.service.change_invisible("g", got.receipt_handle, 10_000)
    assert changed.receipt_handle != got.receipt_handle
    assert changed.invisible_until_ms == pop.clock.now_ms + 10_000
    with pytest.raises(ReceiptHandleExpired):
        pop.service.change_invisible("g", got.receipt_handle, 10_000)
    assert pop.service.ack("g", [got.receipt_handle])[0].code == "receipt_handle_expired"
    pop.clock.advance(9_999)
    assert pop.service.receive("g", "t", 32, 5_000) == []
    pop.clock.advance(1)
    (back,) = pop.service.receive("g", "t", 32, 5_000)
    assert back.delivery_attempt == 2
    assert pop.service.ack("g", [changed.receipt_handle])[0].code == "receipt_handle_expired"


def test_dead_letter_after_the_maximum_attempts_with_rocketmq_properties(pop: Pop) -> None:
    pop.service.configure_group("g", max_retries=2)
    pop.put("t", b"poison", queue_id=0, KEYS="k1")
    attempts = []
    for _ in range(3):
        (got,) = pop.service.receive("g", "t", 32, 1_000)
        attempts.append(got.delivery_attempt)
        pop.clock.advance(1_000)
    assert attempts == [1, 2, 3]
    assert pop.service.receive("g", "t", 32, 1_000) == []  # used up: waits for the expiry run
    pop.service.run_due()
    assert pop.service.stats("g").dead_letters == 1 and pop.service.stats("g").inflight == 0
    dlq = pop.store.get_messages("%DLQ%g", 0, 0, 10)
    (dead,) = dlq.messages
    original = pop.store.get_messages("t", 0, 0, 1).messages[0]
    assert dead.body == b"poison" and dead.reconsume_times == 3
    assert dead.properties["RETRY_TOPIC"] == "t"
    assert dead.properties["ORIGIN_MESSAGE_ID"] == original.msg_id
    assert dead.properties["DELAY"] == "0"
    assert dead.uniq_key == original.uniq_key and dead.keys == ["k1"]
    pop.clock.advance(60_000)
    pop.service.run_due()
    assert len(pop.store.get_messages("%DLQ%g", 0, 0, 10).messages) == 1  # written once
    assert pop.service.receive("g", "t", 32, 1_000) == []


def test_fifo_hands_out_one_message_per_message_group_in_order(pop: Pop) -> None:
    pop.store.create_topic("f", 1)
    pop.service.configure_group("g", fifo=True)
    for i in range(3):
        pop.put("f", b"A%d" % i, queue_id=0, __SHARDINGKEY="A")
        pop.put("f", b"B%d" % i, queue_id=0, __SHARDINGKEY="B")
    first = pop.service.receive("g", "f", 32, 5_000)
    assert [r.message.body for r in first] == [b"A0", b"B0"]
    assert pop.service.receive("g", "f", 32, 5_000) == []
    _, b0 = first
    assert pop.service.ack("g", [b0.receipt_handle])[0].ok
    # B1 sits behind A1 in the queue, and A is blocked: the scan stops at A1 (nothing skipped).
    assert pop.service.receive("g", "f", 32, 5_000) == []
    pop.clock.advance(5_000)  # A0 unacked: it comes back before anything after it
    (again,) = pop.service.receive("g", "f", 32, 5_000)
    assert (again.message.body, again.delivery_attempt) == (b"A0", 2)
    assert pop.service.ack("g", [again.receipt_handle])[0].ok
    seen = []
    while got := pop.service.receive("g", "f", 32, 5_000):
        seen += [r.message.body for r in got]
        pop.service.ack("g", [r.receipt_handle for r in got])
    assert seen == [b"A1", b"B1", b"A2", b"B2"]


def test_fifo_blocks_survive_a_reopen(pop: Pop) -> None:
    pop.store.create_topic("f", 1)
    pop.service.configure_group("g", fifo=True)
    pop.put("f", b"A0", b"A1", queue_id=0, __SHARDINGKEY="A")
    (a0,) = pop.service.receive("g", "f", 32, 5_000)
    pop.reopen(crash=True)
    assert pop.service.receive("g", "f", 32, 5_000) == []
    assert pop.service.ack("g", [a0.receipt_handle])[0].ok
    assert [r.message.body for r in pop.service.receive("g", "f", 32, 5_000)] == [b"A1"]


def test_a_new_group_starts_at_the_oldest_or_at_the_newest(pop: Pop) -> None:
    pop.put("t", b"old1", b"old2")
    assert bodies(pop.service.receive("oldest", "t", 32, 5_000)) == [b"old1", b"old2"]
    pop.service.configure_group("newest", start_newest=True)
    assert pop.service.receive("newest", "t", 32, 5_000) == []
    pop.put("t", b"new")
    assert bodies(pop.service.receive("newest", "t", 32, 5_000)) == [b"new"]


def test_groups_are_pop_or_offset_based_never_both(pop: Pop) -> None:
    pop.put("t", b"a")
    pop.store.commit_offset("spark", "t", 0, 0)
    assert pop.service.group_kind("spark") is GroupKind.OFFSET
    with pytest.raises(GroupKindConflict) as info:
        pop.service.receive("spark", "t", 1, 5_000)
    assert info.value.code == "group_kind_conflict"
    pop.service.receive("poppers", "t", 1, 5_000)
    assert pop.service.group_kind("poppers") is GroupKind.POP
    with pytest.raises(GroupKindConflict):
        pop.service.check_group_kind("poppers", GroupKind.OFFSET)
    assert pop.service.group_kind("never") is None
    pop.service.check_group_kind("never", GroupKind.OFFSET)  # a new group may become either


def test_long_poll_is_woken_by_an_arrival(pop: Pop) -> None:
    answer: list[list[Received]] = []
    started = time.monotonic()
    poller = threading.Thread(
        target=lambda: answer.append(pop.service.receive("g", "t", 32, 5_000, wait_ms=10_000))
    )
    poller.start()
    time.sleep(0.2)  # let it park (a shorter park only makes the test weaker, never wrong)
    pop.put("t", b"late")
    poller.join(timeout=10)
    assert [r.message.body for r in answer[0]] == [b"late"]
    assert time.monotonic() - started < 5


def test_long_poll_times_out_empty(pop: Pop) -> None:
    started = time.monotonic()
    assert pop.service.receive("g", "t", 32, 5_000, wait_ms=300) == []
    assert 0.25 < time.monotonic() - started < 3


def test_bad_input_gets_typed_errors_and_changes_nothing(pop: Pop) -> None:
    pop.put("t", b"a")
    (got,) = pop.service.receive("g", "t", 32, 5_000)
    state_end = pop.store.max_offset(POP_STATE_TOPIC, 0)
    before = {k: dict(v.inflight) for k, v in pop.service.table.lanes.items()}
    with pytest.raises(InvalidMaxMessages):
        pop.service.receive("g", "t", 33, 5_000)
    with pytest.raises(InvalidMaxMessages):
        pop.service.receive("g", "t", 0, 5_000)
    for bad in (0, 999, 12 * 3_600_000 + 1):
        with pytest.raises(InvalidInvisibleTime) as info:
            pop.service.receive("g", "t", 1, bad)
        assert info.value.code == "invalid_invisible_time"
        with pytest.raises(InvalidInvisibleTime):
            pop.service.change_invisible("g", got.receipt_handle, bad)
    with pytest.raises(InvalidWaitTime):
        pop.service.receive("g", "t", 1, 5_000, wait_ms=-1)
    with pytest.raises(UnknownTopic):
        pop.service.receive("g", "nope", 1, 5_000)
    forged = got.receipt_handle[:-3] + ("AAA" if not got.receipt_handle.endswith("AAA") else "BBB")
    for handle, error in (("not-a-handle", InvalidReceiptHandle), (forged, InvalidReceiptHandle)):
        with pytest.raises(error):
            pop.service.change_invisible("g", handle, 5_000)
    with pytest.raises(ReceiptHandleMismatch):
        pop.service.change_invisible("h", got.receipt_handle, 5_000)
    results = pop.service.ack("g", ["", forged, "AQ" * 10])
    assert [r.code for r in results] == ["invalid_receipt_handle"] * 3
    assert pop.store.max_offset(POP_STATE_TOPIC, 0) == state_end
    assert {k: dict(v.inflight) for k, v in pop.service.table.lanes.items()} == before
    assert pop.service.ack("g", [got.receipt_handle])[0].ok


def test_state_survives_a_crash_and_replay_is_bounded_by_snapshots(pop: Pop) -> None:
    pop.service.config = PopConfig(background=False, snapshot_every_records=5)
    pop.put("t", *[b"m%d" % i for i in range(20)])
    handles = {}
    for _ in range(10):
        for r in pop.service.receive("g", "t", 2, 5_000):
            handles[r.message.body] = r.receipt_handle
        pop.service.run_due()  # snapshots every 5 records
    acked = [b"m%d" % i for i in range(0, 20, 2)]
    assert all(r.ok for r in pop.service.ack("g", [handles[b] for b in acked]))
    pop.reopen(crash=True)
    assert pop.service._log.since_snapshot < 10
    assert pop.service.receive("g", "t", 32, 5_000) == []
    pop.clock.advance(5_000)
    back = []
    while got := pop.service.receive("g", "t", 32, 5_000):
        back += got
    assert bodies(back) == sorted(set(handles) - set(acked))
    assert all(r.delivery_attempt == 2 for r in back)
    # handles signed before the crash still work (the secret is in the state topic)
    assert pop.service.ack("g", [handles[b"m1"]])[0].code == "receipt_handle_expired"
    assert pop.service.ack("g", [next(r.receipt_handle for r in back if r.message.body == b"m1")])[0].ok


def test_retry_topic_messages_of_this_topic_are_received(pop: Pop) -> None:
    pop.store.create_topic("%RETRY%g", 1)
    pop.put("%RETRY%g", b"mine", queue_id=0, RETRY_TOPIC="t")
    pop.put("%RETRY%g", b"other topic", queue_id=0, RETRY_TOPIC="u")
    pop.put("t", b"fresh")
    assert bodies(pop.service.receive("g", "t", 32, 5_000)) == [b"fresh", b"mine"]


def test_stats_count_inflight_age_and_redeliveries(pop: Pop) -> None:
    pop.put("t", b"a", b"b")
    pop.service.receive("g", "t", 32, 2_000)
    pop.clock.advance(3_000)
    stats = pop.service.stats("g")
    assert (stats.inflight, stats.visible_again, stats.oldest_inflight_age_ms) == (2, 2, 3_000)
    pop.service.receive("g", "t", 32, 2_000)
    assert pop.service.stats("g").redeliveries == 2


def test_a_promoted_replica_reloads_the_table(pop: Pop) -> None:
    pop.put("t", b"a")
    (got,) = pop.service.receive("g", "t", 32, 5_000)
    other = PopService(pop.store, PopConfig(background=False))  # e.g. built before the records came
    other.reload()
    assert other.ack("g", [got.receipt_handle])[0].ok
    other.close()


def test_a_tag_filter_hands_out_matching_messages_only(pop: Pop) -> None:
    pop.store.put_messages(
        [Message(topic="t", body=b"a%d" % i, tags="A", queue_id=0) for i in range(3)]
        + [Message(topic="t", body=b"b%d" % i, tags="B", queue_id=0) for i in range(3)]
    )
    got = pop.service.receive("g", "t", 32, 5_000, tag_expression="A")
    assert bodies(got) == [b"a0", b"a1", b"a2"]
    # RocketMQ acks non-matching messages silently: the group's cursor is past them
    assert pop.service.receive("g", "t", 32, 5_000) == []
    pop.clock.advance(5_000)
    assert bodies(pop.service.receive("g", "t", 32, 5_000, tag_expression="A || C")) == [b"a0", b"a1", b"a2"]


def test_an_ack_retried_after_a_lost_answer_is_ok_again(pop: Pop) -> None:
    """The answer of an ack can be lost after its record was stored (a killed master, a cut
    connection): the retry names the same delivery and is answered ok, across a reopen too;
    an older delivery of the message stays expired."""
    pop.put("t", b"a")
    (first,) = pop.service.receive("g", "t", 1, 1_000)
    pop.clock.advance(1_000)
    (second,) = pop.service.receive("g", "t", 1, 5_000)
    assert pop.service.ack("g", [second.receipt_handle])[0].ok
    assert pop.service.ack("g", [second.receipt_handle])[0].ok
    assert pop.service.ack("g", [first.receipt_handle])[0].code == "receipt_handle_expired"
    pop.reopen(crash=True)
    assert pop.service.ack("g", [second.receipt_handle])[0].ok
    with pytest.raises(ReceiptHandleExpired):
        pop.service.change_invisible("g", second.receipt_handle, 5_000)
    pop.clock.advance(60_000)
    assert pop.service.receive("g", "t", 32, 5_000) == []
