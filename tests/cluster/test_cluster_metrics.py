"""``/metrics`` names the broker: ``sparkmq_broker_info`` everywhere, the ``broker`` label on the
per-topic, per-queue and per-group series of a cluster's brokers, the cluster gauges (live
brokers, the ZooKeeper session), and per-queue series only for the queues a broker owns."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from broker.config import ServerConfig
from broker.metrics import BrokerMetrics, ClusterGauges, StoreGauges, render
from tests.cluster.inprocess import InProcessCluster
from tests.ingest.conftest import RunningBroker, start_broker
from tests.support.stores import light_config
from tests.support.waiting import wait_until


def _samples(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_render_labels_per_topic_series_with_the_broker_in_a_cluster() -> None:
    metrics = BrokerMetrics()
    metrics.produced("orders", 2, 20, "single", 0.001)
    gauges = StoreGauges(queue_max_offsets={("orders", 1): 2}, group_lag={("g", "orders", 1): 1})
    cluster = ClusterGauges(
        broker="b2", mode="cluster", cluster="zk://127.0.0.1:2181/sparkmq", brokers=3, live_brokers=2,
        owned_queues=4, session="connected", session_states=("connected", "suspended", "lost"), warnings=0,
    )  # fmt: skip
    lines = set(render(metrics, gauges, cluster).splitlines())
    assert 'sparkmq_broker_info{broker="b2",mode="cluster",cluster="zk://127.0.0.1:2181/sparkmq"} 1' in lines
    assert 'sparkmq_messages_in_total{broker="b2",door="http",topic="orders"} 2' in lines
    assert 'sparkmq_queue_max_offset{broker="b2",topic="orders",queue_id="1"} 2' in lines
    assert 'sparkmq_group_lag{broker="b2",group="g",topic="orders",queue_id="1"} 1' in lines
    assert 'sparkmq_group_lag_sum{broker="b2",group="g",topic="orders"} 1' in lines
    assert 'sparkmq_produce_latency_seconds_count{kind="single"} 1' in lines, "process-wide series: no label"
    assert {
        "sparkmq_cluster_live_brokers 2",
        "sparkmq_cluster_brokers 3",
        "sparkmq_cluster_owned_queues 4",
    } <= lines
    assert 'sparkmq_cluster_session{state="connected"} 1' in lines
    assert 'sparkmq_cluster_session{state="lost"} 0' in lines


@pytest.fixture
def lone(tmp_path: Path) -> Iterator[RunningBroker]:
    running = start_broker(ServerConfig(store=light_config(tmp_path / "lone")))
    yield running
    running.stop()


def test_a_lone_broker_is_named_local_and_keeps_its_labels(lone: RunningBroker) -> None:
    with lone.client() as http:
        http.post("/topics/solo/messages", json={"body": "x", "queue_id": 1}).raise_for_status()
    samples = _samples(lone.url)
    assert samples['sparkmq_broker_info{broker="local",mode="single",cluster=""}'] == 1
    assert samples["sparkmq_cluster_live_brokers"] == 1
    assert samples["sparkmq_cluster_owned_queues"] == 4
    assert samples['sparkmq_messages_in_total{door="http",topic="solo"}'] == 1
    assert not any(name.startswith("sparkmq_cluster_session") for name in samples)


@pytest.fixture
def trio(zk_url: str, tmp_path: Path) -> Iterator[InProcessCluster]:
    cluster = InProcessCluster(zk_url, tmp_path)
    for name in ("b1", "b2", "b3"):
        cluster.start(name)
    cluster.wait_converged(3)
    yield cluster
    cluster.stop_all()


def test_cluster_brokers_label_their_series_and_report_the_cluster(
    trio: InProcessCluster, zk_url: str
) -> None:
    with trio.http("b1") as http:
        http.put("/topics/t", json={"queues": 6}).raise_for_status()
        for queue in range(6):
            http.post("/topics/t/messages", json={"body": f"m{queue}", "queue_id": queue}).raise_for_status()
        http.put("/groups/g/offsets", json={"topic": "t", "offsets": {"0": 0}})
    b2 = _samples(trio.brokers["b2"].url)
    info = [name for name in b2 if name.startswith("sparkmq_broker_info")]
    assert info == [f'sparkmq_broker_info{{broker="b2",mode="cluster",cluster="{zk_url}"}}']
    assert b2["sparkmq_cluster_live_brokers"] == 3 and b2["sparkmq_cluster_owned_queues"] == 2
    assert b2['sparkmq_cluster_session{state="connected"}'] == 1
    assert b2['sparkmq_cluster_session{state="suspended"}'] == 0
    assert b2['sparkmq_messages_in_total{broker="b2",door="http",topic="t"}'] == 2, "queues 1 and 4"
    owned = sorted(name for name in b2 if name.startswith('sparkmq_queue_max_offset{broker="b2",topic="t"'))
    assert owned == [
        'sparkmq_queue_max_offset{broker="b2",topic="t",queue_id="1"}',
        'sparkmq_queue_max_offset{broker="b2",topic="t",queue_id="4"}',
    ], "only the queues b2 owns"
    b1 = _samples(trio.brokers["b1"].url)
    assert b1['sparkmq_group_lag{broker="b1",group="g",topic="t",queue_id="0"}'] == 1

    trio.stop("b3")
    wait_until(
        lambda: _samples(trio.brokers["b1"].url)["sparkmq_cluster_live_brokers"] == 2, 15, "b3 seen gone"
    )
    assert _samples(trio.brokers["b1"].url)["sparkmq_cluster_brokers"] == 3, "a dead broker stays known"
