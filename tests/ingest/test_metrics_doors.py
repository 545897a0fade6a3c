"""``/metrics`` counts every door: a real broker with the Kafka gateway, real Kafka clients,
HTTP traffic and an exactly-once sink commit; plus storage gauges, group lag in seconds,
counters typed as counters, and the Grafana dashboard's metrics all present."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer

from broker.config import ServerConfig
from ingest_api.kafka import GatewayConfig
from ingest_api.kafka.companion import KafkaCompanion
from tests.streaming.eo_helpers import part_batch
from tests.support.stores import light_config
from tests.support.waiting import wait_until

from .conftest import RunningBroker, start_broker

DASHBOARD = Path(__file__).parents[2] / "docs" / "grafana" / "sparkmq.json"
FAST = {"socket.connection.setup.timeout.ms": 5000, "reconnect.backoff.ms": 20}


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningBroker, KafkaCompanion]]:
    directory = tmp_path_factory.mktemp("doors")
    gateway = GatewayConfig(
        port=0, initial_rebalance_delay_ms=100, coordinator_tick_ms=20, min_session_timeout_ms=500
    )
    companion = KafkaCompanion(port=0, config=gateway)
    running = start_broker(ServerConfig(store=light_config(directory)), companions=[companion])
    yield running, companion
    running.stop()


def _metrics(broker: RunningBroker) -> dict[str, float]:
    """Sample lines as {'name{labels}': value}."""
    text = broker.client().get("/metrics").text
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def _types(broker: RunningBroker) -> dict[str, str]:
    text = broker.client().get("/metrics").text
    declared = re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.M)
    names = [name for name, _ in declared]
    assert len(names) == len(set(names)), "a metric family is declared twice"
    return dict(declared)


@pytest.mark.kafka
def test_kafka_produce_and_fetch_show_in_metrics_and_console(
    kafka_broker: tuple[RunningBroker, KafkaCompanion],
) -> None:
    broker, companion = kafka_broker
    assert companion.gateway is not None
    bootstrap = f"127.0.0.1:{companion.gateway.port}"
    broker.client().put("/topics/korders", json={"queues": 2}).raise_for_status()
    producer = Producer({"bootstrap.servers": bootstrap, **FAST})
    for i in range(30):
        producer.produce("korders", value=b"v" * 100, key=b"k%d" % i)
    assert producer.flush(10) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap, "group.id": "kgroup", "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 200, "fetch.wait.max.ms": 100, **FAST,
        }
    )  # fmt: skip
    try:
        consumer.subscribe(["korders"])
        got = 0
        deadline = time.monotonic() + 20
        while got < 30 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                got += 1
        assert got == 30
        consumer.commit(asynchronous=False)
        metrics = _metrics(broker)
        assert metrics['sparkmq_messages_in_total{door="kafka",topic="korders"}'] == 30
        assert metrics['sparkmq_bytes_in_total{door="kafka",topic="korders"}'] == 3000
        assert metrics['sparkmq_messages_out_total{door="kafka",topic="korders"}'] >= 30
        assert metrics['sparkmq_message_size_bytes_bucket{door="kafka",le="128.0"}'] == 30
        assert metrics['sparkmq_kafka_request_duration_seconds_count{api="produce"}'] >= 1
        assert metrics['sparkmq_kafka_request_duration_seconds_count{api="fetch"}'] >= 1
        assert metrics['sparkmq_produce_latency_seconds_count{kind="kafka"}'] >= 1
        # The console lists the Kafka group with its live member.
        page = broker.client().get("/console/groups/kgroup").text
        assert "Kafka members" in page and "rdkafka" in page
        listing = broker.client().get("/console/groups", params={"name": "kgroup"}).text
        assert re.search(r'kgroup</a></td><td class="kind">kafka</td><td>1</td>', listing), listing
    finally:
        consumer.close()


def test_http_routes_sink_storage_and_lag_seconds(kafka_broker: tuple[RunningBroker, KafkaCompanion]) -> None:
    broker, _ = kafka_broker
    http = broker.client()
    http.put("/topics/horders", json={"queues": 1}).raise_for_status()
    http.post("/topics/horders/messages", json={"body": "x" * 600}).raise_for_status()
    http.post("/topics/horders/messages:batch", json={"messages": [{"body": "y"}, {"body": "z"}]})
    http.get("/topics/horders/queues/0/messages", params={"offset": 0}).raise_for_status()
    http.put("/groups/hgroup/offsets", json={"topic": "horders", "offsets": {"0": 1}}).raise_for_status()
    sink = pa.BufferOutputStream()
    batch = part_batch([b"s1", b"s2", b"s3"], topic="sinked")
    with pa.ipc.new_file(sink, batch.schema) as writer:
        writer.write_batch(batch)
    http.put("/sinks/m1/batches/0/parts/p0", content=sink.getvalue().to_pybytes(),
             headers={"content-type": "application/vnd.apache.arrow.file"}).raise_for_status()  # fmt: skip
    commit = {"parts": [{"part_id": "p0", "rows": 3}]}
    http.post("/sinks/m1/batches/0:commit", json=commit).raise_for_status()
    http.post("/sinks/m1/batches/0:commit", json=commit).raise_for_status()  # a replay counts once

    metrics = _metrics(broker)
    assert metrics['sparkmq_messages_in_total{door="http",topic="horders"}'] == 3
    assert metrics['sparkmq_messages_in_total{door="sink",topic="*"}'] == 3
    assert metrics['sparkmq_sink_batches_total{outcome="published"}'] == 1
    assert metrics['sparkmq_sink_batches_total{outcome="replayed"}'] == 1
    assert metrics['sparkmq_message_size_bytes_bucket{door="http",le="512.0"}'] == 2
    assert metrics['sparkmq_message_size_bytes_bucket{door="http",le="1024.0"}'] == 3
    route = 'method="POST",route="/topics/{topic}/messages",status="2xx"'
    assert metrics[f"sparkmq_http_request_duration_seconds_count{{{route}}}"] >= 1  # via the fast lane
    pull = 'method="GET",route="/topics/{topic}/queues/{queue_id}/messages",status="2xx"'
    assert metrics[f"sparkmq_http_request_duration_seconds_count{{{pull}}}"] == 1
    assert metrics['sparkmq_group_lag_sum{group="hgroup",topic="horders"}'] == 2
    assert metrics['sparkmq_group_lag_seconds{group="hgroup",topic="horders"}'] >= 0
    assert metrics["sparkmq_storage_bytes"] > 0 and metrics["sparkmq_storage_disk_free_bytes"] > 0
    assert metrics["sparkmq_storage_commitlog_bytes"] > 0
    assert metrics["sparkmq_storage_oldest_message_age_seconds"] >= 0
    assert "sparkmq_storage_flush_behind_bytes" in metrics
    types = _types(broker)
    assert types["sparkmq_store_messages_put_total"] == "counter"
    assert types["sparkmq_store_bytes_put_total"] == "counter"
    assert all(kind == "counter" for name, kind in types.items() if name.endswith("_total"))
    assert all(name.endswith("_total") for name, kind in types.items() if kind == "counter")


def test_lag_seconds_grow_with_the_oldest_unconsumed_message(
    kafka_broker: tuple[RunningBroker, KafkaCompanion],
) -> None:
    broker, _ = kafka_broker
    http = broker.client()
    http.put("/topics/aged", json={"queues": 1}).raise_for_status()
    http.post("/topics/aged/messages", json={"body": "old"}).raise_for_status()
    http.put("/groups/slow/offsets", json={"topic": "aged", "offsets": {"0": 0}}).raise_for_status()
    key = 'sparkmq_group_lag_seconds{group="slow",topic="aged"}'
    wait_until(lambda: _metrics(broker)[key] >= 0.3, 20.0, "lag seconds to grow")
    http.put("/groups/slow/offsets", json={"topic": "aged", "offsets": {"0": 1}}).raise_for_status()
    assert _metrics(broker)[key] == 0


def _dashboard_metrics() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    assert exprs, "the dashboard has queries"
    names = set()
    for expr in exprs:
        for name in re.findall(r"\bsparkmq_[a-z_]+", expr):
            names.add(re.sub(r"_(bucket|sum|count)$", "", name))
    return names


def test_every_metric_of_the_grafana_dashboard_exists(
    kafka_broker: tuple[RunningBroker, KafkaCompanion],
) -> None:
    broker, _ = kafka_broker
    exposed = set(_types(broker))
    missing = _dashboard_metrics() - exposed
    assert not missing, f"the dashboard uses metrics /metrics does not expose: {sorted(missing)}"
