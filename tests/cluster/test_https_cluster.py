"""A cluster whose brokers serve HTTPS with mutual TLS (one CA, ``--tls-cert/--tls-key
--tls-ca --tls-require-client-cert``) and no peer flag: every member advertises ``https://``,
peer calls verify the cluster CA (``peer_tls_ca`` defaults to ``--tls-ca``) and present the
broker's own certificate. Real ZooKeeper, real uvicorn servers, in one process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from broker.tls import TlsConfig
from store import sharding_queue
from tests.cluster.inprocess import InProcessCluster
from tests.support.tls import TestCA
from tests.support.waiting import wait_until


@pytest.fixture
def ca(tmp_path: Path) -> TestCA:
    return TestCA(tmp_path / "tls")


@pytest.fixture
def pair(zk_url: str, tmp_path: Path, ca: TestCA) -> Iterator[InProcessCluster]:
    cluster = InProcessCluster(zk_url, tmp_path)
    try:
        for name in ("b1", "b2"):
            leaf = ca.issue(name)
            cluster.start(name, tls=TlsConfig(leaf.cert, leaf.key, ca.ca_file, require_client_cert=True))
        yield cluster
    finally:
        cluster.stop_all()


def https(cluster: InProcessCluster, name: str, ca: TestCA) -> httpx.Client:
    url = f"https://127.0.0.1:{cluster.brokers[name].port}"
    return httpx.Client(base_url=url, verify=ca.client_context(ca.issue("app")), timeout=30)


def test_members_advertise_https_and_forward_to_each_other(pair: InProcessCluster, ca: TestCA) -> None:
    with https(pair, "b1", ca) as b1:

        def alive() -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = b1.get("/cluster").json()["brokers"]
            return found if sum(b["alive"] for b in found) == 2 else []

        def routed() -> dict[str, Any]:
            answer = b1.get("/topics/keyed/route")
            return dict(answer.json()) if answer.status_code == 200 else {}

        brokers = wait_until(alive, 10, "both members alive")
        assert [b["http"] for b in brokers] == [
            f"https://127.0.0.1:{pair.brokers[n].port}" for n in ("b1", "b2")
        ]
        assert b1.put("/topics/keyed", json={"queues": 2}).status_code == 201
        route = wait_until(routed, 5, "the route")
        (queue,) = [q["queue_id"] for q in route["queues"] if q["broker"] == "b2"]
        assert route["queues"][queue]["http"].startswith("https://")
        key = next(f"k{i}" for i in range(100) if sharding_queue(f"k{i}", 2) == queue)
        # a peer call: b1 forwards to b2 over HTTPS (b2 verified against --tls-ca, b1 shows its cert)
        answer = b1.post("/topics/keyed/messages", json={"body": "via b1", "sharding_key": key})
        assert answer.status_code == 201, answer.text
        assert (answer.json()["broker"], answer.json()["queue_id"]) == ("b2", queue)
    with https(pair, "b2", ca) as b2:
        pulled = b2.get(f"/topics/keyed/queues/{queue}/messages", params={"offset": 0}).json()
        assert [m["body"] for m in pulled["messages"]] == ["via b1"]
