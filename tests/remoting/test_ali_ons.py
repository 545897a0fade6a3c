"""The real ali-ons client (npm, pure JavaScript) against the remoting door over a real store.

The door here serves the handlers written so far (routes, sends, heartbeats); the producer's
messages are read back from the CommitLog through the store facade, byte for byte.
"""

from __future__ import annotations

import zlib
from typing import Any

from tests.remoting.conftest import Door
from tests.support.ons import run_producer, start_consumer
from tests.support.waiting import wait_until

TOPIC = "RemotingOnsT"


def test_ali_ons_producer_sends_into_the_store(door: Door) -> None:
    big = "x" * 6000  # ali-ons deflates bodies >= 4 KiB and sets sysFlag bit 0
    messages: list[dict[str, Any]] = [
        {"body": "plain-0", "tags": "tagA", "keys": ["order-1"], "properties": {"color": "red"}},
        {"body": "plain-1", "tags": "tagB", "keys": ["order-2", "order-3"]},
        {"body": "no-tag"},
        {"body": big, "tags": "big"},
        {"body": "later", "tags": "tagA", "delayTimeLevel": 2},
    ]
    sent = run_producer(door.name_srv, TOPIC, messages, producer_group="PG_ONS")
    assert [s["sendStatus"] for s in sent] == ["SEND_OK"] * len(messages)
    views = [door.store.get_by_msg_id(s["msgId"]) for s in sent]
    assert all(v is not None for v in views)
    plain0, plain1, untagged, large, delayed = views
    assert plain0 is not None and plain1 is not None and untagged is not None
    assert large is not None and delayed is not None

    assert (plain0.topic, plain0.body, plain0.properties["TAGS"]) == (TOPIC, b"plain-0", "tagA")
    assert plain0.properties["KEYS"] == "order-1" and plain0.properties["color"] == "red"
    assert plain1.properties["KEYS"] == "order-2 order-3"
    assert "TAGS" not in untagged.properties
    assert large.body == big.encode() and len(zlib.compress(big.encode())) < 4096
    assert plain0.born_host[0] == "127.0.0.1" and plain0.store_host == ("127.0.0.1", 10911)
    for s, view in zip(sent[:4], views[:4], strict=True):
        assert view is not None
        assert (view.queue_id, view.queue_offset) == (s["queueId"], s["queueOffset"])
        assert len(view.properties["UNIQ_KEY"]) == 32  # ali-ons sets none: the store made one
    assert delayed.topic == "SCHEDULE_TOPIC_XXXX"
    assert (delayed.properties["REAL_TOPIC"], delayed.properties["DELAY"]) == (TOPIC, "2")
    assert [v.body for v in door.store.query_by_key(TOPIC, "order-2")] == [b"plain-1"]


def test_ali_ons_consumer_registers_through_heartbeats(door: Door) -> None:
    """Start-up of a push consumer: route lookup, HEART_BEAT with its subscription, and the
    rebalance's GET_CONSUMER_LIST_BY_GROUP (pulling is not served yet)."""
    consumer = start_consumer(door.name_srv, "G_ONS", TOPIC, sub_expression="tagA || tagB", instanceName="c1")
    try:
        client_id = consumer.wait_ready()["clientId"]
        members = wait_until(
            lambda: door.ctx.clients.consumer_ids("G_ONS", door.ctx.clock_ms()),
            20.0,
            "the consumer's heartbeat",
        )
        assert members == [client_id]
        data = door.ctx.clients.subscription("G_ONS", door.ctx.clock_ms())
        assert data is not None and data.message_model == "CLUSTERING"
        (sub,) = [s for s in data.subscriptions if s.topic == TOPIC]
        assert sub.tags_set == ("tagA", "tagB") and sub.sub_string == "tagA || tagB"
    finally:
        consumer.stop()


def test_ali_ons_push_consumer_receives_what_the_producer_sent(door: Door) -> None:
    """Pull with long polling, tag codes, offsets: a consumer started first gets every message
    sent after it, byte for byte, and its offsets reach the group offset table."""
    consumer = start_consumer(
        door.name_srv,
        "G_ALL",
        TOPIC,
        instanceName="c1",
        expect=8,
        clientOptions={"persistConsumerOffsetInterval": 300},
    )
    try:
        consumer.wait_ready()
        messages = [
            {"body": f"m-{i}", "tags": "tagA" if i % 2 else "tagB", "keys": [f"k{i}"]} for i in range(8)
        ]
        sent = run_producer(door.name_srv, TOPIC, messages)
        received = consumer.wait_done(60.0)
    finally:
        consumer.stop()
    by_id = {r["msgId"]: r for r in received}
    assert sorted(by_id) == sorted(s["msgId"] for s in sent)
    for spec, s in zip(messages, sent, strict=True):
        got = by_id[s["msgId"]]
        assert (got["body"], got["tags"], got["keys"], got["queueId"]) == (
            spec["body"],
            spec["tags"],
            f"k{spec['body'][2:]}",
            s["queueId"],
        )
        assert got["reconsumeTimes"] == 0 and got["storeHost"] == "127.0.0.1:10911"
    ends = {(s["queueId"]): s["queueOffset"] + 1 for s in sent}
    wait_until(
        lambda: all(door.store.committed_offset("G_ALL", TOPIC, q) == end for q, end in ends.items()),
        20.0,
        "the consumer's offsets to be committed",
    )


def test_ali_ons_tag_subscription_filters_on_the_broker(door: Door) -> None:
    messages = [{"body": f"t-{i}", "tags": "tagA" if i % 2 else "tagB"} for i in range(6)]
    run_producer(door.name_srv, TOPIC, messages)
    consumer = start_consumer(
        door.name_srv, "G_TAG", TOPIC, sub_expression="tagA", instanceName="c1", expect=3
    )
    try:
        received = consumer.wait_done(60.0)
    finally:
        consumer.stop()
    assert sorted(r["body"] for r in received) == ["t-1", "t-3", "t-5"]


def test_two_consumers_of_a_group_split_the_queues(door: Door) -> None:
    """Rebalance over GET_CONSUMER_LIST_BY_GROUP: two instances take disjoint halves of the
    topic's queues and together receive every message once."""
    door.store.create_topic("SplitT", 4)
    first = start_consumer(door.name_srv, "G_SPLIT", "SplitT", instanceName="c1")
    second = start_consumer(door.name_srv, "G_SPLIT", "SplitT", instanceName="c2")
    try:
        first.wait_ready()
        second.wait_ready()

        def split() -> bool:
            a, b = first.queues or [], second.queues or []
            return bool(a and b) and sorted(a + b) == [0, 1, 2, 3]

        wait_until(split, 30.0, "the two consumers to split the four queues")
        sent = run_producer(door.name_srv, "SplitT", [{"body": f"s-{i}"} for i in range(16)])
        everything = {s["msgId"] for s in sent}
        wait_until(
            lambda: {r["msgId"] for r in first.received + second.received} == everything,
            30.0,
            "every message to reach one of the consumers",
        )
    finally:
        first.stop()
        second.stop()
    ids = [r["msgId"] for r in first.received + second.received]
    assert len(ids) == len(set(ids)) == 16
    assert {r["queueId"] for r in first.received} <= set(first.queues or [])
    assert {r["queueId"] for r in second.received} <= set(second.queues or [])
    assert first.received and second.received


def test_a_restarted_consumer_resumes_from_its_committed_offset(door: Door) -> None:
    run_producer(door.name_srv, TOPIC, [{"body": f"old-{i}"} for i in range(4)])
    before = start_consumer(door.name_srv, "G_RESUME", TOPIC, instanceName="c1", expect=4)
    try:
        assert sorted(r["body"] for r in before.wait_done(60.0)) == [f"old-{i}" for i in range(4)]
    finally:
        before.stop()
    try:  # close() persisted every queue's offset, one-way: handled after it returned
        wait_until(lambda: sum(door.store.committed_offsets("G_RESUME", TOPIC).values()) == 4, 10, "offsets")
    except AssertionError as exc:  # say what was committed and what the consumer logged
        committed = door.store.committed_offsets("G_RESUME", TOPIC)
        raise AssertionError(f"{exc}: committed {committed}; consumer: {before.stderr[-3000:]}") from None
    run_producer(door.name_srv, TOPIC, [{"body": f"new-{i}"} for i in range(4)])
    after = start_consumer(door.name_srv, "G_RESUME", TOPIC, instanceName="c1", expect=4)
    try:
        assert sorted(r["body"] for r in after.wait_done(60.0)) == [f"new-{i}" for i in range(4)]
    finally:
        after.stop()
