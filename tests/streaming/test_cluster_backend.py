"""ClusterBackend: the Spark source's read contract over every broker of a cluster (no Spark).

Real ZooKeeper, three real brokers served from threads of this process. Heads come from any
broker, each queue is read and committed at its owner, and a broker that is down either fails
the call naming it (failOnDataLoss=true) or is waited for (false).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from streaming.backends import EndpointBackend
from streaming.cluster_backend import BrokerUnavailable, ClusterBackend, parse_heads, parse_route
from tests.cluster.conftest import zk_url, zookeeper  # noqa: F401 (fixtures)
from tests.cluster.inprocess import InProcessCluster
from tests.support.waiting import wait_until

QUEUES = 6
OWNERS = ["b1", "b2", "b3", "b1", "b2", "b3"]
PER_QUEUE = 5


@pytest.fixture
def trio(zk_url: str, tmp_path: Path) -> Iterator[InProcessCluster]:  # noqa: F811 (fixture)
    cluster = InProcessCluster(zk_url, tmp_path)
    for name in ("b1", "b2", "b3"):
        cluster.start(name)
    cluster.wait_converged(3)
    with cluster.http("b1") as http:
        assert http.put("/topics/spread", json={"queues": QUEUES}).status_code == 201
        for name in ("b1", "b2", "b3"):  # every broker sees the route before anything is produced
            with cluster.http(name) as other:
                wait_until(lambda o=other: o.get("/topics/spread/route").status_code == 200, 10, "route")
        batch = {
            "messages": [
                {"body": f"q{q}-m{i}", "queue_id": q, "tags": "even" if i % 2 == 0 else "odd"}
                for i in range(PER_QUEUE)
                for q in range(QUEUES)
            ]
        }
        answer = http.post("/topics/spread/messages:batch", json=batch)
        assert answer.status_code == 201, answer.text
    yield cluster
    cluster.stop_all()


def _bodies(batch: pa.RecordBatch) -> list[bytes]:
    return [bytes(b) for b in batch.column("body").to_pylist()]


def test_parse_route_and_heads_are_pure() -> None:
    route = {"topic": "t", "queues": [
        {"queue_id": 1, "broker": "b2", "alive": False, "http": "http://h2", "kafka": None},
        {"queue_id": 0, "broker": "b1", "alive": True, "http": "http://h1", "kafka": None},
    ]}  # fmt: skip
    owners = parse_route(route, None)
    assert [(o.broker, o.http, o.alive) for o in owners] == [
        ("b1", "http://h1", True),
        ("b2", "http://h2", False),
    ]
    assert {o.http for o in parse_route(route, "http://entry")} == {"http://entry"}
    heads = parse_heads({"queue_offsets": [
        {"queue_id": 0, "min_offset": 1, "max_offset": 5, "broker": "b1", "available": True},
        {"queue_id": 1, "min_offset": 0, "max_offset": 0, "broker": "b2", "available": False},
        {"queue_id": 2, "min_offset": 0, "max_offset": 3},
    ]})  # fmt: skip
    assert heads.heads == {0: (1, 5), 2: (0, 3)}
    assert heads.unavailable == {1: "b2"}


def test_heads_from_any_broker_and_reads_at_each_owner(trio: InProcessCluster) -> None:
    backend = ClusterBackend(trio.brokers["b2"].url, timeout_s=10)
    assert backend.queue_heads("spread") == dict.fromkeys(range(QUEUES), (0, PER_QUEUE))
    assert backend.queue_heads("missing") == {}
    for queue_id, owner in enumerate(OWNERS):
        chunk = backend.read_range("spread", queue_id, offset=1, end_offset=4, max_messages=100, tags="*")
        assert _bodies(chunk.batch) == [f"q{queue_id}-m{i}".encode() for i in (1, 2, 3)]
        assert chunk.next_offset == 4
        direct = EndpointBackend(trio.brokers[owner].url, timeout_s=10).read_range(
            "spread", queue_id, offset=1, end_offset=4, max_messages=100, tags="*"
        )
        assert pa.Table.from_batches([chunk.batch]).equals(pa.Table.from_batches([direct.batch]))
    odd = backend.read_range("spread", 4, offset=0, end_offset=PER_QUEUE, max_messages=100, tags="odd")
    assert _bodies(odd.batch) == [b"q4-m1", b"q4-m3"]
    assert backend.offset_for_timestamp("spread", 5, 0) == 0


def test_a_plain_endpoint_backend_cannot_read_another_brokers_queue(trio: InProcessCluster) -> None:
    """Why endpoint mode needs the cluster backend: a broker answers 307 for a queue it does not own."""
    from streaming.backends import QueueElsewhere

    with pytest.raises(QueueElsewhere):
        EndpointBackend(trio.brokers["b1"].url, timeout_s=10).read_range(
            "spread", 1, offset=0, end_offset=PER_QUEUE, max_messages=10, tags="*"
        )


def test_a_route_that_names_a_member_sending_us_elsewhere_is_asked_again_until_they_agree(
    trio: InProcessCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a failover the route can name a member that answers 307 (seen in the Jepsen run under
    partitions, where the read task then failed the query): the read waits, as for a master
    that does not answer, failOnDataLoss=true for ``timeout_s``, false for as long as it takes."""
    from streaming.backends import QueueElsewhere

    for wait, flaps in ((False, 3), (True, 12)):
        # failOnDataLoss=true: the three flaps (a 307 each, then a pause) within timeout_s, which
        # a loaded machine needs more than 0.3 s for; the last case below checks it is not for ever.
        backend = ClusterBackend(
            trio.brokers["b1"].url, timeout_s=10, retry_interval_s=0.05, wait_for_brokers=wait
        )
        right = backend._route("spread")
        wrong = tuple(
            replace(owner, http=trio.brokers[OWNERS[(q + 1) % 3]].url) for q, owner in enumerate(right)
        )
        asked: list[int] = []

        def route(topic: str, *, fresh: bool = False, right=right, wrong=wrong, asked=asked, flaps=flaps):  # type: ignore[no-untyped-def]
            asked.append(1)
            return wrong if len(asked) <= flaps else right

        monkeypatch.setattr(backend, "_route", route)
        chunk = backend.read_range("spread", 1, offset=0, end_offset=2, max_messages=10, tags="*")
        assert _bodies(chunk.batch) == [b"q1-m0", b"q1-m1"] and len(asked) == flaps + 1
    backend = ClusterBackend(trio.brokers["b1"].url, timeout_s=0.3, retry_interval_s=0.05)
    monkeypatch.setattr(backend, "_route", lambda topic, *, fresh=False: wrong)
    with pytest.raises(QueueElsewhere):  # failOnDataLoss=true: not for ever
        backend.read_range("spread", 1, offset=0, end_offset=2, max_messages=10, tags="*")


def test_group_offsets_are_committed_at_each_owner(trio: InProcessCluster) -> None:
    backend = ClusterBackend(trio.brokers["b3"].url, timeout_s=10)
    backend.commit_group_offsets("billing", "spread", {q: q % PER_QUEUE for q in range(QUEUES)})
    for name in ("b1", "b2", "b3"):
        with trio.http(name) as http:  # a forwarded request reads the broker's own table only
            local = http.get(
                "/groups/billing/offsets", params={"topic": "spread"}, headers={"x-sparkmq-forwarded": "test"}
            ).json()["offsets"]
            mine = {str(q): q % PER_QUEUE for q, owner in enumerate(OWNERS) if owner == name}
            assert {q: o for q, o in local.items() if q in mine} == mine
    with trio.http("b1") as http:
        merged = http.get("/groups/billing/offsets", params={"topic": "spread"}).json()["offsets"]
        assert merged == {str(q): q % PER_QUEUE for q in range(QUEUES)}


def test_a_broker_down_fails_reads_and_heads_naming_it(trio: InProcessCluster) -> None:
    backend = ClusterBackend(trio.brokers["b1"].url, timeout_s=5, retry_interval_s=0.05)
    assert backend.queue_heads("spread")  # routes and heads known
    backend.read_range("spread", 2, offset=0, end_offset=1, max_messages=1, tags="*")
    trio.stop("b3")
    with pytest.raises(BrokerUnavailable, match=r"broker b3 at http://127\.0\.0\.1:[0-9]+ is down") as caught:
        backend.read_range("spread", 2, offset=1, end_offset=3, max_messages=10, tags="*")
    assert caught.value.broker == "b3"
    assert "failOnDataLoss=false" in str(caught.value)
    with trio.http("b1") as http:
        wait_until(lambda: not _alive(http)["b3"], 10, "b3 seen dead")
    with pytest.raises(BrokerUnavailable, match=r"broker b3 is down .*queues \[2, 5\]"):
        backend.queue_heads("spread")
    # the other brokers' queues still read
    chunk = backend.read_range("spread", 0, offset=0, end_offset=2, max_messages=10, tags="*")
    assert _bodies(chunk.batch) == [b"q0-m0", b"q0-m1"]


def _alive(http: Any) -> dict[str, bool]:
    return {b["name"]: b["alive"] for b in http.get("/cluster").json()["brokers"]}


def test_waiting_for_a_broker_that_is_down(trio: InProcessCluster) -> None:
    """failOnDataLoss=false: heads leave the dead broker's queues out (once every queue was seen),
    a planned read waits for the broker to be back (here: restarted on another port, so the
    route itself changes), a fresh backend's first heads wait for every queue."""
    backend = ClusterBackend(trio.brokers["b1"].url, 5, wait_for_brokers=True, retry_interval_s=0.05)
    assert set(backend.queue_heads("spread")) == set(range(QUEUES))
    trio.stop("b3")
    with trio.http("b1") as http:
        wait_until(lambda: not _alive(http)["b3"], 10, "b3 seen dead")
    assert backend.queue_heads("spread") == dict.fromkeys((0, 1, 3, 4), (0, PER_QUEUE))

    read: list[Any] = []
    first_look: list[Any] = []
    reader = threading.Thread(
        target=lambda: read.append(
            backend.read_range("spread", 5, offset=0, end_offset=2, max_messages=10, tags="*")
        )
    )
    newcomer = ClusterBackend(trio.brokers["b2"].url, 5, wait_for_brokers=True, retry_interval_s=0.05)
    looker = threading.Thread(target=lambda: first_look.append(newcomer.queue_heads("spread")))
    reader.start()
    looker.start()
    reader.join(1.0)
    looker.join(0.1)
    assert reader.is_alive() and looker.is_alive(), "both wait while b3 is down"
    trio.start("b3")  # same store, new port
    reader.join(30)
    looker.join(30)
    assert not reader.is_alive() and not looker.is_alive()
    assert _bodies(read[0].batch) == [b"q5-m0", b"q5-m1"]
    assert first_look[0] == dict.fromkeys(range(QUEUES), (0, PER_QUEUE))


def test_a_lone_broker_is_a_cluster_of_one(tmp_path: Path) -> None:
    from tests.streaming.conftest import Broker, open_store, produce

    store_dir = tmp_path / "store"
    with open_store(store_dir) as store:
        produce(store, "orders", 6, queues=2)
    broker = Broker(store_dir)
    try:
        backend = ClusterBackend(broker.url, timeout_s=10)
        assert backend.queue_heads("orders") == {0: (0, 3), 1: (0, 3)}
        chunk = backend.read_range("orders", 1, offset=0, end_offset=3, max_messages=10, tags="*")
        assert _bodies(chunk.batch) == [b"msg-1", b"msg-3", b"msg-5"]
        backend.commit_group_offsets("g", "orders", {0: 2, 1: 3})
        direct = EndpointBackend(broker.url, timeout_s=10)
        answer = direct.get("/groups/g/offsets", params={"topic": "orders"})
        assert answer.json()["offsets"] == {"0": 2, "1": 3}
    finally:
        broker.stop()


def test_replica_reads_pick_a_slave_and_a_masterless_group_any_member() -> None:
    from streaming.cluster_backend import QueueOwner

    group = QueueOwner("b1", "http://m", True, ("http://m", "http://s"))
    assert group.read_at("master") == "http://m"
    assert group.read_at("replica") == "http://s"
    masterless = QueueOwner("b1", "http://dead", False, ("http://s",))
    assert masterless.read_at("master") == "http://s"
    lone = QueueOwner("local", "http://lone", True)
    assert lone.read_at("replica") == "http://lone"  # nothing to pick: the broker itself


def test_read_from_option_is_checked(tmp_path: Path) -> None:
    import pytest

    from store import MessageStore, StoreConfig
    from streaming.options import InvalidSourceOption, parse_options

    MessageStore.open(StoreConfig(store_dir=tmp_path / "s", commitlog_file_size_bytes=1 << 20)).close()

    assert parse_options({"endpoint": "http://b", "topic": "t", "readFrom": "replica"}).read_from == "replica"
    with pytest.raises(InvalidSourceOption, match="readFrom"):
        parse_options({"endpoint": "http://b", "topic": "t", "readFrom": "slave"})
    with pytest.raises(InvalidSourceOption, match="readFrom"):
        parse_options({"path": str(tmp_path / "s"), "topic": "t", "readFrom": "replica"})
