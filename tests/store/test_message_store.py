"""The MessageStore facade: produce, consume, query, offsets, delay/half rewrites."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest

from store import (
    Boundary,
    GetStatus,
    InvalidArgument,
    Message,
    MessageStore,
    MessageTooLarge,
    StoreClosed,
    UnknownQueue,
    UnknownTopic,
)
from store.consumequeue.consume_queue import ConsumeQueue
from store.format.ids import decode_msg_id
from store.names import SCHEDULE_TOPIC, TRANS_HALF_TOPIC
from store.read.store_reader import StoreReader
from tests.support.stores import ManualClock

OpenStore = Callable[..., MessageStore]


def test_put_and_get_round_trip(open_store: OpenStore, clock: ManualClock) -> None:
    ms = open_store()
    r = ms.put_message(Message(topic="orders", body=b"hello", tags="paid", keys=("o-1", "c-9"), queue_id=2))
    assert (r.topic, r.queue_id, r.queue_offset, r.commitlog_offset) == ("orders", 2, 0, 0)
    assert r.store_timestamp_ms == clock.now_ms
    assert len(r.msg_id) == 32 and decode_msg_id(r.msg_id) == (("127.0.0.1", 10911), 0)
    assert len(r.uniq_key) == 32

    got = ms.get_messages("orders", 2, 0)
    assert got.status is GetStatus.FOUND and got.next_offset == 1
    (view,) = got.messages
    assert view.body == b"hello" and view.tags == "paid" and view.keys == ["o-1", "c-9"]
    assert view.uniq_key == r.uniq_key and view.msg_id == r.msg_id
    assert view.born_timestamp_ms == clock.now_ms


def test_topic_lifecycle(open_store: OpenStore) -> None:
    ms = open_store(auto_create_topics=False)
    with pytest.raises(UnknownTopic):
        ms.put_message(Message(topic="nope", body=b"x"))
    assert ms.create_topic("orders", 2) == 2
    assert ms.create_topic("orders", 5) == 5
    assert ms.create_topic("orders", 3) == 5  # never shrinks
    assert ms.topics() == {"orders": 5}
    assert SCHEDULE_TOPIC in ms.topics(include_system=True)
    with pytest.raises(UnknownQueue):
        ms.put_message(Message(topic="orders", body=b"x", queue_id=5))
    ms.put_message(Message(topic="orders", body=b"x", queue_id=4))
    ms.commit_offset("g", "orders", 4, 1)
    assert ms.delete_topic("orders")
    assert ms.topics() == {} and ms.committed_offsets("g", "orders") == {}
    with pytest.raises(UnknownTopic):
        ms.max_offset("orders", 0)


def test_invalid_names_are_refused(open_store: OpenStore) -> None:
    ms = open_store()
    for bad in ("", "a/b", "..", "x" * 128, SCHEDULE_TOPIC, "rmq_sys_x", "sp ace"):
        with pytest.raises(InvalidArgument):
            ms.put_message(Message(topic=bad, body=b"x"))
    with pytest.raises(InvalidArgument):
        ms.commit_offset("bad/group", "t", 0, 0)


def test_round_robin_spreads_messages(open_store: OpenStore) -> None:
    ms = open_store()
    results = ms.put_messages([Message(topic="t", body=b"%d" % i) for i in range(8)])
    assert [r.queue_id for r in results] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert [r.queue_offset for r in results] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_batch_is_all_or_nothing(open_store: OpenStore) -> None:
    ms = open_store(max_message_size_bytes=1024)
    ms.create_topic("t", 1)
    good = [Message(topic="t", body=b"ok") for _ in range(3)]
    with pytest.raises(MessageTooLarge, match="2000 bytes"):
        ms.put_messages([*good, Message(topic="t", body=b"x" * 2000)])
    with pytest.raises(InvalidArgument):
        ms.put_messages([*good, Message(topic="t", body=b"x", keys=("has space",))])
    assert ms.max_offset("t", 0) == 0
    assert ms.stats().commitlog_max_offset == 0


def test_put_messages_assigns_contiguous_offsets_per_queue(open_store: OpenStore) -> None:
    ms = open_store()
    ms.create_topic("a", 2)
    ms.create_topic("b", 2)
    msgs = [Message(topic="ab"[i % 2], body=b"%d" % i, queue_id=(i // 2) % 2) for i in range(40)]
    results = ms.put_messages(msgs)
    for topic in "ab":
        for q in range(2):
            offsets = [r.queue_offset for r in results if r.topic == topic and r.queue_id == q]
            assert offsets == list(range(10))
    assert [r.commitlog_offset for r in results] == sorted(r.commitlog_offset for r in results)


def test_large_bodies_are_compressed_and_restored(open_store: OpenStore) -> None:
    ms = open_store()
    body = b"compressible " * 1000
    r = ms.put_message(Message(topic="t", body=body, queue_id=0))
    assert r.size_bytes < len(body)
    (view,) = ms.get_messages("t", 0, 0).messages
    assert view.body == body and view.sys_flag & 0x1
    assert ms.read_batch("t", 0, 0, 10).batch.column("body")[0].as_py() == body


def test_get_status_rules(open_store: OpenStore) -> None:
    ms = open_store()
    ms.create_topic("t", 2)
    assert ms.get_messages("t", 0, 0).status is GetStatus.NO_NEW_MESSAGE
    assert ms.get_messages("t", 0, 5).status is GetStatus.NO_MESSAGE_IN_QUEUE
    assert ms.get_messages("nope", 0, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    ms.put_messages([Message(topic="t", body=b"x", queue_id=0) for _ in range(3)])
    assert ms.get_messages("t", 0, 3).status is GetStatus.NO_NEW_MESSAGE
    over = ms.get_messages("t", 0, 9)
    assert (over.status, over.next_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 3)
    with pytest.raises(InvalidArgument):
        ms.get_messages("t", 0, -1)
    with pytest.raises(InvalidArgument):
        ms.read_batch("t", 0, 0, 0)


def test_tag_filter_in_both_read_paths(open_store: OpenStore) -> None:
    ms = open_store()
    tags = ["paid", "refunded", "created", None]
    ms.put_messages([Message(topic="t", body=b"%d" % i, tags=tags[i % 4], queue_id=0) for i in range(20)])
    got = ms.get_messages("t", 0, 0, 100, "paid || refunded")
    assert [m.body for m in got.messages] == [b"%d" % i for i in range(20) if i % 4 in (0, 1)]
    assert got.next_offset == 20
    batch = ms.read_batch("t", 0, 0, 100, "paid || refunded").batch
    assert batch.column("body").to_pylist() == [m.body for m in got.messages]
    none = ms.get_messages("t", 0, 0, 100, "shipped")
    assert (none.status, none.next_offset) == (GetStatus.NO_MATCHED_MESSAGE, 20)
    with pytest.raises(InvalidArgument):
        ms.get_messages("t", 0, 0, 10, "a || ")


def test_read_batch_matches_get_messages(open_store: OpenStore) -> None:
    ms = open_store()
    msgs = [
        Message(
            topic="t",
            body=bytes([i]) * (i * 37 % 300),
            tags=f"t{i % 3}" if i % 5 else None,
            keys=(f"k{i}",) if i % 2 else (),
            properties={"p": str(i)} if i % 3 else {},
            queue_id=1,
        )
        for i in range(200)
    ]
    ms.put_messages(msgs)
    res = ms.read_batch("t", 1, 10, 150)
    assert (res.status, res.next_offset, res.batch.num_rows) == (GetStatus.FOUND, 160, 150)
    rows = res.batch.to_pylist()
    views = ms.get_messages("t", 1, 10, 150).messages
    for row, view in zip(rows, views, strict=True):
        assert row["body"] == view.body and row["queue_offset"] == view.queue_offset
        assert row["msg_id"] == view.msg_id and row["uniq_key"] == view.uniq_key
        assert row["tags"] == view.tags and row["keys"] == view.keys
        assert dict(row["properties"]) == {k: v for k, v in view.properties.items() if k == "p"}
    assert ms.read_batch("t", 1, 190, 100, end_offset=195).batch.num_rows == 5


def test_files_roll_and_everything_reads_back(open_store: OpenStore) -> None:
    ms = open_store()
    bodies = [bytes([i % 251]) * (500 + i % 700) for i in range(400)]
    ms.put_messages([Message(topic="t", body=b, queue_id=0) for b in bodies[:200]])
    for b in bodies[200:]:
        ms.put_message(Message(topic="t", body=b, queue_id=0))
    assert len(list((ms.config.commitlog_dir).iterdir())) > 3
    assert len(list((ms.config.consume_queue_dir / "t" / "0").iterdir())) > 3
    got = ms.read_batch("t", 0, 0, 1000).batch.column("body").to_pylist()
    assert got == bodies


def test_delayed_messages_go_to_schedule_topic(open_store: OpenStore, clock: ManualClock) -> None:
    ms = open_store()
    r = ms.put_message(Message(topic="orders", body=b"later", delay_level=3, queue_id=1))
    assert (r.topic, r.queue_id) == (SCHEDULE_TOPIC, 2)
    assert ms.max_offset("orders", 1) == 0  # never visible on the real topic early
    (view,) = ms.get_messages(SCHEDULE_TOPIC, 2, 0).messages
    assert view.properties["REAL_TOPIC"] == "orders" and view.properties["REAL_QID"] == "1"
    assert view.properties["DELAY"] == "3"
    cq = ms._queues.get(SCHEDULE_TOPIC, 2)
    assert isinstance(cq, ConsumeQueue)
    assert cq.get_unit(0) == (r.commitlog_offset, r.size_bytes, clock.now_ms + 10_000)
    clamped = ms.put_message(Message(topic="orders", body=b"x", delay_level=99))
    assert (clamped.topic, clamped.queue_id) == (SCHEDULE_TOPIC, 17)


def test_prepared_messages_go_to_half_topic(open_store: OpenStore) -> None:
    ms = open_store()
    r = ms.put_message(Message(topic="orders", body=b"tx", transaction_prepared=True, queue_id=3))
    assert (r.topic, r.queue_id) == (TRANS_HALF_TOPIC, 0)
    assert ms.max_offset("orders", 3) == 0
    (view,) = ms.get_messages(TRANS_HALF_TOPIC, 0, 0).messages
    assert view.properties["REAL_TOPIC"] == "orders" and view.properties["REAL_QID"] == "3"
    assert view.properties["TRAN_MSG"] == "true" and view.properties["__transactionId__"] == r.uniq_key
    assert view.sys_flag & 0xC == 0


def test_queries_by_id_key_and_uniq_key(open_store: OpenStore, clock: ManualClock) -> None:
    ms = open_store()
    first = ms.put_message(Message(topic="t", body=b"a", keys=("order-1",)))
    clock.advance(5_000)
    second = ms.put_message(Message(topic="t", body=b"b", keys=("order-1", "x")))
    ms.put_messages([Message(topic="t", body=b"%d" % i, keys=(f"k{i}",)) for i in range(300)])
    ms.put_message(Message(topic="other", body=b"c", keys=("order-1",)))
    hits = ms.query_by_key("t", "order-1")
    assert [m.body for m in hits] == [b"b", b"a"]
    window = ms.query_by_key("t", "order-1", begin_ms=first.store_timestamp_ms + 1000)
    assert [m.body for m in window] == [b"b"]
    assert len(ms.query_by_key("t", "order-1", max_results=1)) == 1
    assert ms.get_by_msg_id(second.msg_id).body == b"b"  # type: ignore[union-attr]
    assert ms.get_by_uniq_key("t", first.uniq_key).body == b"a"  # type: ignore[union-attr]
    assert ms.get_by_uniq_key("t", "0" * 32) is None
    assert [m.body for m in ms.query_by_key("t", "k123")] == [b"123"]
    with pytest.raises(InvalidArgument):
        ms.get_by_msg_id("not-hex")


def test_offset_for_timestamp_edges(open_store: OpenStore, clock: ManualClock) -> None:
    ms = open_store()
    ms.create_topic("t", 1)
    assert ms.offset_for_timestamp("t", 0, clock.now_ms) == 0  # empty queue
    t0 = clock.now_ms
    for _ in range(5):  # 10 messages sharing each millisecond
        ms.put_messages([Message(topic="t", body=b"x", queue_id=0) for _ in range(10)])
        clock.advance(100)
    assert ms.offset_for_timestamp("t", 0, t0 - 1) == 0
    assert ms.offset_for_timestamp("t", 0, t0) == 0
    assert ms.offset_for_timestamp("t", 0, t0 + 100) == 10
    assert ms.offset_for_timestamp("t", 0, t0 + 50) == 10
    assert ms.offset_for_timestamp("t", 0, t0 + 400) == 40
    assert ms.offset_for_timestamp("t", 0, t0 + 401) == 50  # after the last: max offset
    assert ms.offset_for_timestamp("t", 0, t0 + 100, Boundary.UPPER) == 19
    assert ms.offset_for_timestamp("t", 0, t0 + 150, Boundary.UPPER) == 19
    assert ms.offset_for_timestamp("t", 0, t0 + 10_000, Boundary.UPPER) == 49
    assert ms.offset_for_timestamp("t", 0, t0 - 1, Boundary.UPPER) == -1


def test_consumer_offsets_and_lag(open_store: OpenStore) -> None:
    ms = open_store()
    ms.create_topic("t", 2)
    ms.put_messages([Message(topic="t", body=b"x", queue_id=i % 2) for i in range(10)])
    assert ms.committed_offset("g", "t", 0) == -1
    assert ms.lag("g", "t") == {0: 5, 1: 5}
    ms.commit_offsets("g", "t", {0: 3, 1: 5})
    assert ms.committed_offsets("g", "t") == {0: 3, 1: 5}
    assert ms.lag("g", "t") == {0: 2, 1: 0}
    assert ms.groups() == {"g": ["t"]}
    with pytest.raises(UnknownQueue):
        ms.commit_offset("g", "t", 7, 1)
    with pytest.raises(InvalidArgument):
        ms.commit_offset("g", "t", 0, -5)


def test_put_batch_columnar(open_store: OpenStore) -> None:
    ms = open_store()
    ms.create_topic("t", 4)
    bodies = [b"body-%d" % i for i in range(100)]
    res = ms.put_batch(
        "t", bodies, tags=["a" if i % 2 else "b" for i in range(100)], keys=["k%d" % i for i in range(100)]
    )
    assert len(res) == 100 and sorted(set(res.queue_ids.tolist())) == [0, 1, 2, 3]
    assert res.queue_offsets.tolist() == [i // 4 for i in range(100)]
    got = ms.get_messages("t", 1, 0, 100, "a").messages
    assert [m.body for m in got] == [b"body-%d" % i for i in range(100) if i % 4 == 1]
    assert got[0].keys == ["k1"]
    one_queue = ms.put_batch("t", [b"x", b"y"], queue_ids=2, properties={"src": "bulk"})
    assert one_queue.queue_offsets.tolist() == [25, 26]
    assert ms.get_messages("t", 2, 25).messages[0].properties["src"] == "bulk"
    assert ms.query_by_key("t", "k7")[0].body == b"body-7"
    with pytest.raises(UnknownQueue, match="message 1"):
        ms.put_batch("t", [b"x", b"y"], queue_ids=[0, 9])
    with pytest.raises(InvalidArgument):
        ms.put_batch("t", [b"x"], keys=["a", "b"])


def test_concurrent_producers_lose_and_duplicate_nothing(open_store: OpenStore) -> None:
    ms = open_store()
    ms.create_topic("t", 2)
    results: list[list[int]] = []
    lock = threading.Lock()

    def produce(worker: int) -> None:
        mine = []
        for i in range(100):
            if i % 10 == 0:
                batch = ms.put_messages([Message(topic="t", body=b"%d-%d" % (worker, i), queue_id=i % 2)] * 3)
                mine += [r.queue_offset * 2 + r.queue_id for r in batch]
            else:
                r = ms.put_message(Message(topic="t", body=b"%d-%d" % (worker, i), queue_id=i % 2))
                mine.append(r.queue_offset * 2 + r.queue_id)
        with lock:
            results.append(mine)

    threads = [threading.Thread(target=produce, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flat = sorted(x for r in results for x in r)
    assert len(flat) == len(set(flat)) == 8 * 120
    assert ms.max_offset("t", 0) + ms.max_offset("t", 1) == 960
    for q in range(2):
        offsets = ms.read_batch("t", q, 0, 10_000).batch.column("queue_offset").to_numpy()
        assert np.array_equal(offsets, np.arange(len(offsets)))


def test_long_poll_wakes_on_arrival(open_store: OpenStore) -> None:
    ms = open_store()
    ms.create_topic("t", 1)
    seen: list[tuple[str, int, int]] = []
    ms.add_arrival_listener(lambda t, q, o: seen.append((t, q, o)))
    assert not ms.wait_for_message("t", 0, 0, timeout_s=0.01)
    timer = threading.Timer(0.05, lambda: ms.put_message(Message(topic="t", body=b"x", queue_id=0)))
    timer.start()
    assert ms.wait_for_message("t", 0, 0, timeout_s=10)
    timer.join()
    assert seen == [("t", 0, 1)]


def test_reader_sees_what_the_writer_wrote(open_store: OpenStore) -> None:
    ms = open_store()
    ms.create_topic("t", 2)
    ms.put_messages([Message(topic="t", body=b"m%d" % i, queue_id=i % 2, tags="x") for i in range(300)])
    with StoreReader(ms.config.store_dir) as reader:
        assert reader.topics() == {"t": 2}
        assert reader.queue_offsets("t") == {0: (0, 150), 1: (0, 150)}
        assert reader.read_batch("t", 0, 0, 1000).batch.equals(ms.read_batch("t", 0, 0, 1000).batch)
        ms.put_messages([Message(topic="t", body=b"n%d" % i, queue_id=0) for i in range(50)])
        later = reader.read_batch("t", 0, 150, 1000)
        assert later.batch.column("body").to_pylist() == [b"n%d" % i for i in range(50)]
        t = ms.read_batch("t", 0, 0, 1).batch.column("store_timestamp")[0].value // 1000
        assert reader.offset_for_timestamp("t", 0, t) == ms.offset_for_timestamp("t", 0, t)


def test_closed_store_refuses_work(open_store: OpenStore) -> None:
    ms = open_store()
    ms.close()
    ms.close()  # idempotent
    with pytest.raises(StoreClosed):
        ms.put_message(Message(topic="t", body=b"x"))
    with pytest.raises(StoreClosed):
        ms.get_messages("t", 0, 0)


def test_dispatch_batches_concatenate_in_order(open_store: OpenStore) -> None:
    from store.commitlog.dispatch_batch import DispatchBatch

    ms = open_store()
    captured: list[DispatchBatch] = []
    original = ms._queues.dispatch
    ms._queues.dispatch = lambda batch: (captured.append(batch), original(batch))[1]  # type: ignore[method-assign]
    ms.put_messages([Message(topic="a", body=b"1", keys=("x",)), Message(topic="b", body=b"2")])
    ms.put_message(Message(topic="b", body=b"3", keys=("y z",)[0].split()[:1]))
    ms.put_batch("c", [b"4", b"5"], keys=["k4", None])
    joined = DispatchBatch.concat(captured)
    assert len(joined) == 5 and joined.topics == ("a", "b", "c")
    assert [joined.topics[c] for c in joined.topic_codes.tolist()] == ["a", "b", "b", "c", "c"]
    assert joined.keys == ("x", None, "y", "k4", None)
    assert joined.commitlog_offsets.tolist() == sorted(joined.commitlog_offsets.tolist())
    assert DispatchBatch.concat([captured[0]]) is captured[0]
    assert len(DispatchBatch.concat([])) == 0
