"""Kafka transactions across the brokers of a cluster with auth on: the gateways' calls to each
other (``POST /kafka/peer/{op}``) carry each broker's own credential, so enlisting a participant,
ending its part and writing its transactional offsets work; a user's credential on that route
gets 403 (real ZooKeeper, in-process brokers with their gateways, confluent-kafka). With every
logger at DEBUG, no secret appears in the logs: not the brokers' tokens, not the ZooKeeper digest."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Producer

from broker.peer_identity import PeerCredential
from broker.security import ScramMechanism, User, UserTable, hash_token, make_credential, write_users
from tests.cluster.kafka_cluster import KafkaCluster
from tests.cluster.test_kafka_cluster import FAST
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.cluster]

ADMIN = "admin-token-0123456789abcdef"
BROKERS = {"b1": "broker-one-secret-0123456789", "b2": "broker-two-secret-0123456789"}
ZK_PASSWORD = "zk-digest-password-42"
ADMIN_PASSWORD = "admin-sasl-password-42"
#: With --auth-file the Kafka listener requires SASL: the producer logs in as the superuser.
SASL = {
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "admin",
    "sasl.password": ADMIN_PASSWORD,
}


@pytest.fixture
def pair(zk_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> Iterator[KafkaCluster]:
    caplog.set_level(logging.DEBUG)
    scram = {ScramMechanism.SHA_512: make_credential(ScramMechanism.SHA_512, ADMIN_PASSWORD)}
    users = [User("admin", token_hashes=(hash_token(ADMIN),), scram=scram, superuser=True)]
    users += [User(f"broker-{n}", token_hashes=(hash_token(t),), broker=True) for n, t in BROKERS.items()]
    auth_file = tmp_path / "users.json"
    write_users(auth_file, UserTable(tuple(users)))
    secured_url = zk_url.replace("zk://", f"zk://sparkmq:{ZK_PASSWORD}@")
    cluster = KafkaCluster(secured_url, tmp_path)
    for name, token in BROKERS.items():
        cluster.start(name, auth_file=auth_file, peer_credential=PeerCredential(f"broker-{name}", token))
    yield cluster
    cluster.stop_all()


def admin(cluster: KafkaCluster, name: str) -> httpx.Client:
    return httpx.Client(
        base_url=cluster.brokers[name].url, headers={"authorization": f"Bearer {ADMIN}"}, timeout=30
    )


def bodies(cluster: KafkaCluster, topic: str) -> list[str]:
    """Every committed body of ``topic``, read over HTTP from each queue's owner."""
    found: list[str] = []
    with admin(cluster, "b1") as http:
        route = http.get(f"/topics/{topic}/route").json()["queues"]
    for queue in route:
        with httpx.Client(base_url=queue["http"], headers={"authorization": f"Bearer {ADMIN}"}) as http:
            answer = http.get(f"/topics/{topic}/queues/{queue['queue_id']}/messages", params={"offset": 0})
            assert answer.status_code == 200, answer.text
            found += [m["body"] for m in answer.json()["messages"]]
    return sorted(found)


def test_a_transaction_across_secured_brokers_commits_and_aborts_everywhere(
    pair: KafkaCluster, caplog: pytest.LogCaptureFixture
) -> None:
    with admin(pair, "b1") as http:
        wait_until(
            lambda: sum(b["alive"] for b in http.get("/cluster").json()["brokers"]) == 2, 20, "two brokers"
        )
        assert http.put("/topics/tx", json={"queues": 4}).status_code == 201
        owners = {q["broker"] for q in http.get("/topics/tx/route").json()["queues"]}
    assert owners == {"b1", "b2"}
    with admin(pair, "b2") as http:
        wait_until(lambda: http.get("/topics/tx/route").status_code == 200, 10, "b2 has the route")
    producer = Producer(
        {
            "bootstrap.servers": pair.bootstrap("b1"),
            "transactional.id": "tx-secured",
            "linger.ms": 5,
            **FAST,
            **SASL,
        }
    )
    producer.init_transactions(20)
    producer.begin_transaction()
    for q in range(4):
        producer.produce("tx", value=f"kept-{q}".encode(), partition=q)
    producer.commit_transaction(20)
    producer.begin_transaction()
    for q in range(4):
        producer.produce("tx", value=b"aborted", partition=q)
    producer.abort_transaction(20)
    assert bodies(pair, "tx") == [f"kept-{q}" for q in range(4)]
    for name in BROKERS:  # the peers' route itself: users (even a superuser) are refused
        with admin(pair, name) as http:
            assert http.post("/kafka/peer/state", content=b"{}").status_code == 403
    records = [*caplog.get_records("setup"), *caplog.records]
    logged = "\n".join(f"{r.name} {r.getMessage()} {r.args!r}" for r in records)
    assert any(r.name.startswith(("kazoo", "sparkmq")) for r in records), "the brokers' logs were seen"
    for secret in (ZK_PASSWORD, ADMIN, ADMIN_PASSWORD, *BROKERS.values()):
        assert secret not in logged
