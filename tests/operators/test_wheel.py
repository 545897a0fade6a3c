"""The delay wheel on a real store (broker.wheel, store.publish.wheel_log): a batch's requests due
later become "due at T" records, the wheel relocates them at T (never early) exactly once, across
replays, a store closed and reopened at each step (what ``kill -9`` leaves), and a second decision
of the same message (the new master's resolver after a failover)."""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa

from broker.wheel import DelayWheel, wheel_may_run
from store import Message, MessageStore, StoreConfig
from store.ha import HAConfig, InMemorySyncStateAuthority, ReplicaController
from store.publish.due_records import DECISION_QUEUE, WHEEL_TOPIC
from store.publish.relocations import RELOCATION_SCHEMA, RelocationLog, expand_requests
from store.publish.wheel_log import Scheduled, WheelLog, decision_table
from tests.support.stores import tiny_config
from tests.support.waiting import wait_until


class Clock:
    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def open_store(tmp_path: Path, clock: Clock) -> MessageStore:
    config = StoreConfig(
        store_dir=tmp_path / "store", commitlog_file_size_bytes=1 << 22, auto_create_topics=True
    )
    return MessageStore.open(config, clock_ms=clock)


def _table(offsets: list[int], dequeue_ms: list[int]) -> pa.Table:
    n = len(offsets)
    return pa.table(
        {"commitlog_offset": offsets, "kind": [0] * n, "enqueue_ms": [0] * n, "dequeue_ms": dequeue_ms},
        schema=RELOCATION_SCHEMA,
    )


def _bodies(ms: MessageStore) -> Counter[bytes]:
    return Counter(m.body for m in ms.get_messages("t", 0, 0, 100).messages)


def _park(ms: MessageStore, n: int) -> list[int]:
    return [ms.put_message(Message(topic="t", body=b"m%d" % i, delay_level=1, queue_id=0)).commitlog_offset
            for i in range(n)]  # fmt: skip


def _wired(ms: MessageStore) -> tuple[RelocationLog, WheelLog, list[Scheduled]]:
    log, wheel_log = RelocationLog(ms, chunk_rows=2), WheelLog(ms, chunk_rows=2)
    handed: list[Scheduled] = []
    log.wheel, log.on_scheduled = wheel_log, handed.extend
    return log, wheel_log, handed


def test_requests_due_later_wait_for_the_wheel_and_go_at_their_time(tmp_path: Path) -> None:
    clock = Clock(1_000_000)
    with open_store(tmp_path, clock) as ms:
        offsets = _park(ms, 5)
        log, wheel_log, handed = _wired(ms)
        # m0 due now (dequeue 1_000_000), m1-m2 at +2 s, m3-m4 at +3 s.
        due = [1_000_000, 1_002_000, 1_002_000, 1_003_000, 1_003_000]
        outcome = log.commit("delay", 0, _table(offsets, due))
        assert outcome.appended == 1 and _bodies(ms) == Counter([b"m0"])
        waiting = [(s.decision.due_ms, len(s.decision.requests)) for s in handed]
        assert waiting == [(1_002_000, 2), (1_003_000, 2)]
        assert log.commit("delay", 0, _table(offsets, due)).already_published  # a replayed batch
        assert ms.get_messages(WHEEL_TOPIC, DECISION_QUEUE, 0, 10).max_offset == 2

        observed: list[int] = []
        wheel = DelayWheel(wheel_log, clock, observe=lambda op, n, d: observed.append(n))
        wheel.schedule(handed)
        wheel.start()
        try:
            clock.now_ms = 1_001_999  # one ms before: nothing
            threading.Event().wait(0.3)
            assert _bodies(ms) == Counter([b"m0"]) and wheel.pending() == 2
            clock.now_ms = 1_002_000
            wait_until(lambda: _bodies(ms) == Counter([b"m0", b"m1", b"m2"]), 10, "the +2 s decision")
            stored = {m.body: m.store_timestamp_ms for m in ms.get_messages("t", 0, 0, 100).messages}
            assert stored[b"m1"] >= 1_002_000, "delivered early"
            clock.now_ms = 1_003_500
            wait_until(lambda: wheel.pending() == 0, 10, "the +3 s decision")
        finally:
            wheel.stop()
        assert _bodies(ms) == Counter([b"m0", b"m1", b"m2", b"m3", b"m4"]) and observed == [2, 2]
        assert (wheel.loaded_total, wheel.replayed_total) == (0, 0)  # handed over, not replayed
        assert wheel_log.load() == (wheel_log.progress(), []) and wheel_log.progress().watermark == 2


def test_a_crash_before_the_wheel_appends_publishes_after_restart(tmp_path: Path) -> None:
    clock = Clock(1_000_000)
    with open_store(tmp_path, clock) as ms:
        offsets = _park(ms, 3)
        log, _, handed = _wired(ms)
        log.commit("delay", 0, _table(offsets, [1_002_000] * 3))
        assert len(handed) == 1 and not _bodies(ms)  # the broker dies here: nothing appended
    clock.now_ms = 1_010_000  # restarted later: overdue
    with open_store(tmp_path, clock) as ms:
        wheel_log = WheelLog(ms, chunk_rows=2)
        progress, outstanding = wheel_log.load()
        assert progress.watermark == 0 and [s.recovered for s in outstanding] == [True]
        wheel = DelayWheel(wheel_log, clock)
        wheel.start()
        try:
            wait_until(lambda: wheel.pending() == 0 and wheel.published_total == 1, 10, "the replay")
        finally:
            wheel.stop()
        assert _bodies(ms) == Counter([b"m0", b"m1", b"m2"])
        assert (wheel.loaded_total, wheel.replayed_total) == (1, 3)  # what /operators shows


def test_a_crash_after_the_wheel_appends_does_not_append_again(tmp_path: Path) -> None:
    clock = Clock(1_000_000)
    with open_store(tmp_path, clock) as ms:
        offsets = _park(ms, 5)
        log, wheel_log, handed = _wired(ms)
        log.commit("delay", 0, _table(offsets, [1_002_000] * 5))
        clock.now_ms = 1_002_000
        # The first chunk of two is appended, then the broker dies (no progress record).
        ms.relocate_pointers(expand_requests(ms, decision_table(handed[0].decision)).rows(0, 2))
        assert _bodies(ms) == Counter([b"m0", b"m1"])
    with open_store(tmp_path, clock) as ms:
        wheel_log = WheelLog(ms, chunk_rows=2)
        (item,) = wheel_log.load()[1]
        appended, _ = wheel_log.publish(item)
        assert appended == 3 and _bodies(ms) == Counter([b"m%d" % i for i in range(5)])
        # Published whole but not marked (killed before the progress record): nothing again.
        assert wheel_log.publish(item)[0] == 0


def test_a_resumed_batch_does_not_write_its_decisions_twice(tmp_path: Path) -> None:
    clock = Clock(1_000_000)
    with open_store(tmp_path, clock) as ms:
        offsets = _park(ms, 2)
        faults: list[str] = []

        def die_after_scheduling(event: str) -> None:
            if event == "scheduled" and not faults:
                faults.append(event)
                raise RuntimeError("killed")

        log = RelocationLog(ms, chunk_rows=2, on_event=die_after_scheduling)
        handed: list[Scheduled] = []
        log.wheel = WheelLog(ms, chunk_rows=2)
        log.on_scheduled = handed.extend
        with contextlib.suppress(RuntimeError):
            log.commit("delay", 0, _table(offsets, [1_000_000, 1_004_000]))
        (outcome,) = log.recover()  # the broker's start: the decided batch is resumed
        # Written before the crash: not again; the wheel's start loads it from the log.
        assert outcome.appended == 1 and handed == []
        assert ms.get_messages(WHEEL_TOPIC, DECISION_QUEUE, 0, 10).max_offset == 1
        assert [s.decision.due_ms for s in WheelLog(ms, 2).load()[1]] == [1_004_000]


def test_the_same_message_decided_twice_is_relocated_once(tmp_path: Path) -> None:
    """After a failover the new master's resolver decides again what the old master's wheel
    still held: the replicated decision and the new one name the same parked records."""
    clock = Clock(1_000_000)
    with open_store(tmp_path, clock) as ms:
        offsets = _park(ms, 3)
        old, _, _ = _wired(ms)
        old.commit("delay", 0, _table(offsets, [1_002_000] * 3))
        leadership = ms.commitlog_max_offset
        new_log, new_wheel_log, handed = _wired(ms)
        new_log.root = tmp_path / "new-master-operators"  # its own decisions (not replicated)
        new_wheel_log.inherited_before = lambda: leadership
        new_log.commit("delay", 0, _table(offsets, [1_002_100] * 3))
        clock.now_ms = 1_003_000
        wheel = DelayWheel(new_wheel_log, clock)
        wheel.schedule(handed)
        wheel.start()
        try:
            wait_until(lambda: wheel.published_total == 2, 10, "both decisions")
        finally:
            wheel.stop()
        assert _bodies(ms) == Counter([b"m0", b"m1", b"m2"])


def test_a_replayed_decision_and_a_batch_of_the_new_master_do_not_interleave(tmp_path: Path) -> None:
    """After a failover the wheel publishes a replicated decision while the new master's resolver
    may relocate the same message at once (its own decision came after T). The wheel's check and
    append hold the operator's batch lock: while a batch holds it (here: the test, which relocates
    the message as that batch would), the wheel waits, then finds the message relocated."""
    clock = Clock(1_000_000)
    with open_store(tmp_path, clock) as ms:
        offsets = _park(ms, 2)
        old, _, _ = _wired(ms)
        old.commit("delay", 0, _table(offsets, [1_002_000] * 2))
        new_log, wheel_log, _ = _wired(ms)
        new_log.root = tmp_path / "new-master-operators"
        wheel_log.exclusive = new_log.exclusive
        (item,) = wheel_log.load()[1]
        clock.now_ms = 1_002_000
        published: list[int] = []
        with new_log.exclusive("delay"):
            wheel = threading.Thread(target=lambda: published.append(wheel_log.publish(item)[0]))
            wheel.start()
            wheel.join(0.5)
            assert wheel.is_alive() and not _bodies(ms), "the wheel published under a batch's lock"
            pointers = expand_requests(ms, decision_table(item.decision))
            assert ms.relocate_pointers(pointers).appended == 2  # the batch's own relocation
        wheel.join(10)
        assert published == [0] and _bodies(ms) == Counter([b"m0", b"m1"])


def test_the_wheel_waits_for_the_store_to_be_master_not_only_the_view(tmp_path: Path) -> None:
    """After an election the ZooKeeper view names the new master before its store has become
    master (the replicated tail dispatched, the confirm offset at the end): a wheel loading then
    would miss the decisions above the slave's last confirm offset."""
    store = MessageStore.open(tiny_config(tmp_path, replicated=True))
    controller = ReplicaController(store, HAConfig(broker_id=1), InMemorySyncStateAuthority())
    try:
        elected = SimpleNamespace(serving=True)  # the group's state in ZooKeeper names this member
        assert wheel_may_run(None, None) and wheel_may_run(elected, None)  # a lone broker, no group
        assert not wheel_may_run(elected, controller), "ran before become_master ended"
        controller.become_master(1)
        assert wheel_may_run(elected, controller)
        assert not wheel_may_run(SimpleNamespace(serving=False), controller)  # deposed
    finally:
        controller.close()
        store.close()
