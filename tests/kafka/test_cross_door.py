"""One storage, three doors: Kafka <-> store <-> HTTP, with the gateway running as a companion
of the real HTTP broker (the ``sparkmq serve --kafka-port`` path)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from broker.config import ServerConfig
from ingest_api.kafka.companion import KafkaCompanion, serve_companions
from ingest_api.server import BrokerServer, build_server
from store import Message, MessageStore
from tests.kafka.conftest import gateway_config, store_config
from tests.kafka.test_confluent import consumer as ck_consumer
from tests.kafka.test_confluent import poll_values
from tests.kafka.test_kafka_python import CONSUMER, FAST
from tests.support.waiting import wait_until

pytestmark = pytest.mark.kafka


@dataclass
class Broker:
    server: BrokerServer
    thread: threading.Thread
    http: httpx.Client
    kafka: KafkaCompanion

    @property
    def bootstrap(self) -> str:
        assert self.kafka.gateway is not None
        return f"127.0.0.1:{self.kafka.gateway.port}"

    @property
    def store(self) -> MessageStore:
        assert self.kafka.gateway is not None
        store = self.kafka.gateway.context.store.inner  # type: ignore[attr-defined]
        assert isinstance(store, MessageStore)
        return store


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    kafka = KafkaCompanion(port=0, config=gateway_config())
    config = ServerConfig(store=store_config(tmp_path / "store"), port=port, log_level="warning")
    server = build_server(config.validate(), companions=[kafka])
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: server.started or not thread.is_alive(), 30, "the HTTP broker to start")
    assert server.started and kafka.gateway is not None
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
        yield Broker(server, thread, http, kafka)
    server.should_exit = True
    thread.join(30)
    sock.close()
    assert kafka.gateway is None  # the companion closed the gateway before the store


def test_kafka_produce_is_readable_from_store_and_http(broker: Broker) -> None:
    broker.store.create_topic("door-k", 1)
    born = int(time.time() * 1000) - 60_000
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, **FAST)
    producer.send(
        "door-k",
        key=b"order-1",
        value=b"hello",
        timestamp_ms=born,
        headers=[("color", b"red"), ("raw", b"\xff")],
    )
    producer.send("door-k", key=None, value=b"second")
    producer.flush(10)
    producer.close(5)

    result = broker.store.get_messages("door-k", 0, 0, 10)
    first, second = result.messages
    assert (first.body, first.keys, first.born_timestamp_ms) == (b"hello", ["order-1"], born)
    assert first.properties["color"] == "red"
    assert second.keys == []
    batch = broker.store.read_batch("door-k", 0, 0, 10).batch
    assert batch.column("keys").to_pylist()[0] == ["order-1"]
    assert batch.column("body").to_pylist() == [b"hello", b"second"]
    assert broker.store.wait_indexed(10)
    assert [m.body for m in broker.store.query_by_key("door-k", "order-1")] == [b"hello"]

    pulled = broker.http.get("/topics/door-k/queues/0/messages", params={"offset": 0}).json()
    message = pulled["messages"][0]
    assert (message["body"], message["keys"], message["born_timestamp"]) == ("hello", ["order-1"], born)
    assert message["properties"]["color"] == "red"


def test_http_and_store_produce_are_consumed_by_kafka(broker: Broker) -> None:
    broker.store.create_topic("door-h", 1)
    response = broker.http.post(
        "/topics/door-h/messages",
        json={"body": "from-http", "keys": ["a", "b"], "properties": {"p": "v"}, "tags": "T", "queue_id": 0},
    )
    assert response.status_code == 201, response.text
    broker.store.put_messages(
        [Message(topic="door-h", body=b"\x00bin", keys=("s-1",), properties={"x": "y"}, queue_id=0)]
    )

    ck = ck_consumer(broker.bootstrap, **{"group.id": "door-ck"})
    try:
        ck.subscribe(["door-h"])
        got = poll_values(ck, 2)
        assert [(m.key(), m.value(), m.headers()) for m in got] == [
            (b"a b", b"from-http", [("p", b"v")]),
            (b"s-1", b"\x00bin", [("x", b"y")]),
        ]
    finally:
        ck.close()
    kp = KafkaConsumer("door-h", bootstrap_servers=broker.bootstrap, group_id="door-kp", **CONSUMER)
    try:
        seen: list[Any] = []
        wait_until(lambda: seen.extend(r for rs in kp.poll(100).values() for r in rs) or len(seen) >= 2)
        assert [(r.key, r.value, list(r.headers)) for r in seen] == [
            (b"a b", b"from-http", [("p", b"v")]),
            (b"s-1", b"\x00bin", [("x", b"y")]),
        ]
    finally:
        kp.close()


def test_kafka_commits_show_in_http_lag(broker: Broker) -> None:
    broker.store.create_topic("door-lag", 2)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, **FAST)
    for i in range(10):
        producer.send("door-lag", value=b"%d" % i, partition=i % 2)
    producer.flush(10)
    producer.close(5)

    def lag() -> dict[str, Any]:
        return broker.http.get("/groups/door-g/lag", params={"topic": "door-lag"}).json()

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "door-g",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe(["door-lag"])
        assert len(poll_values(consumer, 10)) == 10
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    body = lag()
    assert body["total_lag"] == 0
    assert {q["queue_id"]: q["committed_offset"] for q in body["queues"]} == {0: 5, 1: 5}
    assert broker.store.lag("door-g", "door-lag") == {0: 0, 1: 0}
    reset = broker.http.put("/groups/door-g/offsets", json={"topic": "door-lag", "offsets": {"0": 2}})
    assert reset.status_code == 200, reset.text
    kp = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="door-g", **CONSUMER)
    try:  # an offset set over HTTP is what Kafka's OffsetFetch returns
        assert kp.committed(TopicPartition("door-lag", 0)) == 2
        assert kp.committed(TopicPartition("door-lag", 1)) == 5
    finally:
        kp.close()
    assert lag()["total_lag"] == 3


def test_serve_hook_is_off_unless_a_kafka_port_is_given(tmp_path: Path) -> None:
    from sparkmq.cli import ServeOptions

    config = ServerConfig(store=store_config(tmp_path / "store"), host="127.0.0.2").validate()
    assert serve_companions(ServeOptions(config=config, extra={})) == []
    assert serve_companions(ServeOptions(config=config, extra={"kafka_port": None})) == []
    (companion,) = serve_companions(
        ServeOptions(config=config, extra={"kafka_port": 19092, "kafka_advertised_host": "kafka.example"})
    )
    assert isinstance(companion, KafkaCompanion)
    assert (companion.config.host, companion.config.port, companion.config.advertised_host) == (
        "127.0.0.2",
        19092,
        "kafka.example",
    )


def test_kafka_scheduling_headers_park_like_the_http_fields(broker: Broker) -> None:
    """DELAY and TIMER_* record headers schedule a record as delay_level / delay_ms / deliver_at_ms
    do over HTTP; they are not stored as headers, and a bad value fails the produce."""
    from confluent_kafka import Producer

    from store.names import SCHEDULE_TOPIC, TIMER_TOPIC

    broker.store.create_topic("door-t", 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    due = (int(time.time()) + 120) * 1000 + 500  # not a whole second: TIMER_OUT_MS rounds down
    sends = [
        [("DELAY", b"2"), ("color", b"red")],
        [("TIMER_DELAY_MS", b"60000")],
        [("TIMER_DELIVER_MS", str(due).encode())],
        [("TIMER_DELAY_SEC", b"30")],
        [("DELAY", b"0")],
    ]
    for headers in sends:
        producer.produce("door-t", value=b"v", headers=headers)
        assert producer.flush(10) == 0
    store = broker.store
    assert store.max_offset("door-t", 0) == 1, "only DELAY=0 is visible at once"
    parked = store.get_messages(SCHEDULE_TOPIC, 1, store.min_offset(SCHEDULE_TOPIC, 1), 10).messages
    assert [m.properties.get("color") for m in parked] == ["red"]
    assert "KAFKA_HEADERS" not in parked[0].properties and parked[0].properties["DELAY"] == "2"
    timers = store.get_messages(TIMER_TOPIC, 0, 0, 10).messages
    assert [sorted(k for k in m.properties if k.startswith("TIMER_")) for m in timers] == [
        ["TIMER_DELAY_MS", "TIMER_OUT_MS"],
        ["TIMER_DELIVER_MS", "TIMER_OUT_MS"],
        ["TIMER_DELAY_SEC", "TIMER_OUT_MS"],
    ]
    assert timers[1].properties["TIMER_OUT_MS"] == str((due // 1000) * 1000)
    errors: list[Any] = []
    producer.produce(
        "door-t",
        value=b"bad",
        headers=[("TIMER_DELAY_MS", b"soon")],
        on_delivery=lambda e, _: errors.append(e),
    )
    producer.flush(10)
    assert errors and errors[0] is not None and errors[0].code() != 0
    assert store.max_offset("door-t", 0) == 1


def test_a_transaction_is_invisible_to_kafka_until_committed(broker: Broker) -> None:
    broker.store.create_topic("door-tx", 1)
    rolled = broker.http.post(
        "/topics/door-tx/messages", json={"body": "rolled", "transaction": {"producer_group": "pg"}}
    ).json()["transaction_id"]
    kept = broker.http.post(
        "/topics/door-tx/messages", json={"body": "kept", "transaction": {"producer_group": "pg"}}
    ).json()["transaction_id"]
    ck = ck_consumer(broker.bootstrap, **{"group.id": "door-tx", "isolation.level": "read_committed"})
    try:
        ck.subscribe(["door-tx"])
        early = [m for m in (ck.poll(0.5) for _ in range(6)) if m is not None and m.error() is None]
        assert early == [], "a half message reached a Kafka consumer"
        for txid, action in ((rolled, "rollback"), (kept, "commit")):
            ended = broker.http.post(f"/transactions/{txid}", json={"action": action, "producer_group": "pg"})
            assert ended.status_code == 200, ended.text
        got = poll_values(ck, 1)
        assert [(m.value(), m.headers()) for m in got] == [(b"kept", None)]
        assert [m for m in (ck.poll(0.3) for _ in range(3)) if m is not None and m.error() is None] == []
    finally:
        ck.close()


def test_a_kafka_transaction_shares_the_brokers_transaction_service(broker: Broker) -> None:
    """Embedded, the gateway and the HTTP door have one transaction table: HTTP lists a Kafka
    transaction, refuses to end it, and sees its messages once the Kafka producer commits; its
    halves carry the immunity that keeps the Spark resolver's check-backs away until the
    Kafka timeout has passed."""
    broker.store.create_topic("door-ktx", 1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="door/ktx", **FAST)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("door-ktx", value=b"in-tx", partition=0).get(10)
        (listed,) = broker.http.get(
            "/transactions", params={"producer_group": "kafka:door%2Fktx", "state": "prepared"}
        ).json()["transactions"]
        assert listed["topics"] == ["door-ktx"] and listed["messages"] == 1
        refused = broker.http.post(
            f"/transactions/{listed['transaction_id']}",
            json={"action": "commit", "producer_group": "kafka:door%2Fktx"},
        )
        assert (refused.status_code, refused.json()["error"]) == (409, "kafka_transaction")
        (half,) = broker.store.get_messages("RMQ_SYS_TRANS_HALF_TOPIC", 0, 0, 10).messages
        assert half.properties["CHECK_IMMUNITY_TIME_IN_SECONDS"] == str(60 + 60)  # timeout 60 s + grace
        assert (
            broker.http.get("/topics/door-ktx/queues/0/messages", params={"offset": 0}).json()["messages"]
            == []
        )
        producer.commit_transaction()
    finally:
        producer.close(5)
    pulled = broker.http.get("/topics/door-ktx/queues/0/messages", params={"offset": 0}).json()["messages"]
    assert [m["body"] for m in pulled] == ["in-tx"]
    state = broker.http.get(f"/transactions/{listed['transaction_id']}").json()["state"]
    assert state == "committed"
