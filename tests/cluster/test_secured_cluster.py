"""A secured replicated cluster end to end: real broker processes, real ZooKeeper, real TLS.

Broker ``b1`` is a replica group of two members (``b1-a`` leads, ``b1-b`` follows) with:

* an auth file holding a superuser, a limited user (``alice``: orders* only) and one broker
  identity per member, each member started with its own ``--peer-credential-file``;
* mutual TLS on the replication port (``--ha-tls-*``, certificates of a test CA named after the
  member);
* a ZooKeeper digest identity (``--zk-auth-file``): every node it creates has an ACL.

The slave forwards writes to its master, so every produce below through ``b1-b`` is a forwarded
request carrying the broker's credential and the user's.
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from broker.peer_identity import ON_BEHALF_OF_HEADER
from broker.security import ScramMechanism, User, UserTable, hash_token, make_credential, write_users
from sparkmq.client import Client
from store.ha.frames import SlaveHandshake, encode_slave_ack, encode_slave_handshake
from tests.support.cluster import ProcessBroker, ProcessCluster
from tests.support.tls import TestCA
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

ADMIN, ALICE = "admin-token-0123456789abcdef", "alice-token-0123456789abcdef"
BROKER_TOKENS = {"b1-a": "broker-a-secret-0123456789", "b1-b": "broker-b-secret-0123456789"}
ZK_USER, ZK_PASSWORD = "sparkmq", "zk-password-0123"
ALICE_PASSWORD = "alice-password-1"


def write_security_files(root: Path) -> tuple[Path, Path]:
    """The users file and the ZooKeeper credential file."""
    users = [
        User("admin", token_hashes=(hash_token(ADMIN),), superuser=True),
        User(
            "alice",
            token_hashes=(hash_token(ALICE),),
            scram={ScramMechanism.SHA_256: make_credential(ScramMechanism.SHA_256, ALICE_PASSWORD)},
            produce=("orders*",),
            consume=("orders*",),
        ),
        *(
            User(name, token_hashes=(hash_token(token),), broker=True)
            for name, token in BROKER_TOKENS.items()
        ),
    ]
    auth_file = root / "users.json"
    write_users(auth_file, UserTable(tuple(users)))
    zk_file = root / "zk-auth"
    zk_file.write_text(f"{ZK_USER}:{ZK_PASSWORD}\n")
    zk_file.chmod(0o600)
    for name, token in BROKER_TOKENS.items():
        path = root / f"{name}.peer"
        path.write_text(f"{name}:{token}\n")
        path.chmod(0o600)
    return auth_file, zk_file


def member_args(root: Path, ca: TestCA, member: str, auth_file: Path, zk_file: Path) -> tuple[str, ...]:
    leaf = ca.issue(member)
    return (
        "--operators", "off", "--replication", "sync",
        "--auth-file", str(auth_file), "--peer-credential-file", str(root / f"{member}.peer"),
        "--zk-auth-file", str(zk_file),
        "--ha-tls-cert", str(leaf.cert), "--ha-tls-key", str(leaf.key), "--ha-tls-ca", str(ca.ca_file),
    )  # fmt: skip


def as_(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def group_of(broker: ProcessBroker) -> dict[str, Any]:
    answer = httpx.get(f"{broker.url}/cluster", headers=as_(ADMIN), timeout=10)
    assert answer.status_code == 200, answer.text
    return next(b for b in answer.json()["brokers"] if b["name"] == "b1")


def roles(broker: ProcessBroker) -> dict[int, str]:
    return {m["member_id"]: m["role"] for m in group_of(broker).get("members") or []}


def queue_bodies(broker: ProcessBroker, topic: str, replica: bool = False) -> list[str]:
    params: dict[str, Any] = {"offset": 0, "max_messages": 100}
    if replica:
        params["readFrom"] = "replica"
    answer = httpx.get(f"{broker.url}/topics/{topic}/queues/0/messages", params=params, headers=as_(ADMIN))
    assert answer.status_code == 200, answer.text
    return [m["body"] for m in answer.json()["messages"]]


def ha_bytes(address: str, context: ssl.SSLContext, member_id: int) -> int:
    """Log bytes the master sends a TLS client claiming ``member_id`` (0 when refused)."""
    host, port = address.rsplit(":", 1)
    raw = socket.create_connection((host, int(port)), timeout=2)
    received = 0
    try:
        sock = context.wrap_socket(raw, server_hostname=host)
        sock.sendall(encode_slave_handshake(SlaveHandshake(member_id)) + encode_slave_ack(0))
        while chunk := sock.recv(65536):
            received += len(chunk)
    except (ssl.SSLError, ConnectionError, TimeoutError):
        pass
    finally:
        raw.close()
    return received


@pytest.fixture
def secured(tmp_path: Path) -> Any:
    ca = TestCA(tmp_path / "pki")
    auth_file, zk_file = write_security_files(tmp_path)
    with ProcessCluster.started(tmp_path, []) as cluster:
        master = cluster.add(
            "b1", ha=True, args=member_args(tmp_path, ca, "b1-a", auth_file, zk_file), member="b1-a"
        )
        wait_until(lambda: "master" in roles(master).values(), 30, "b1-a to lead")
        slave = cluster.add(
            "b1", ha=True, args=member_args(tmp_path, ca, "b1-b", auth_file, zk_file), member="b1-b"
        )
        wait_until(
            lambda: (
                sorted(roles(master).values()) == ["master", "slave"]
                and len(group_of(master)["in_sync"]) == 2
            ),
            60,
            "b1-b in sync over mutual TLS",
        )
        yield cluster, master, slave, ca


def test_a_secured_replicated_cluster_works_and_judges_forwarded_requests_on_the_user(secured: Any) -> None:
    _, master, slave, _ = secured
    with httpx.Client(base_url=slave.url, timeout=30) as http:
        for topic in ("orders", "secret"):
            created = http.put(f"/topics/{topic}", json={"queues": 1}, headers=as_(ADMIN))
            assert created.status_code == 201, created.text
        assert (
            http.post("/topics/secret/messages", json={"body": "s0"}, headers=as_(ADMIN)).status_code == 201
        )
        # a forwarded produce of a user with the right: stored at the master
        ok = http.post("/topics/orders/messages", json={"body": "o0"}, headers=as_(ALICE))
        assert ok.status_code == 201, ok.text
        # ... without it: refused by the master, which judges the user the slave forwards for
        denied = http.post("/topics/secret/messages", json={"body": "stolen"}, headers=as_(ALICE))
        assert denied.status_code == 403, denied.text
        batch = http.post(
            "/topics/secret/messages:batch", json={"messages": [{"body": "stolen"}]}, headers=as_(ALICE)
        )
        assert batch.status_code == 403, batch.text
        # a user's on-behalf-of header is ignored: alice cannot borrow the admin's rights
        borrowed = http.post(
            "/topics/secret/messages",
            json={"body": "stolen"},
            headers={**as_(ALICE), ON_BEHALF_OF_HEADER: f"Bearer {ADMIN}"},
        )
        assert borrowed.status_code == 403, borrowed.text
        # HTTP Basic with the user's SASL password is checked the same way
        basic = http.post("/topics/secret/messages", json={"body": "stolen"}, auth=("alice", ALICE_PASSWORD))
        assert basic.status_code == 403, basic.text
        assert (
            http.post(
                "/topics/orders/messages", json={"body": "o1"}, auth=("alice", ALICE_PASSWORD)
            ).status_code
            == 201
        )
    # a broker forwarding for alice gets alice's rights, not its own
    broker_for_alice = {**as_(BROKER_TOKENS["b1-b"]), ON_BEHALF_OF_HEADER: f"Bearer {ALICE}"}
    assert (
        httpx.post(
            f"{master.url}/topics/secret/messages", json={"body": "x"}, headers=broker_for_alice
        ).status_code
        == 403
    )
    assert (
        httpx.post(
            f"{master.url}/topics/orders/messages", json={"body": "o2"}, headers=broker_for_alice
        ).status_code
        == 201
    )
    # nothing of the denied produces is stored, on the master or on its slave
    assert queue_bodies(master, "secret") == ["s0"]
    wait_until(
        lambda: queue_bodies(slave, "orders", replica=True) == ["o0", "o1", "o2"],
        20,
        "the slave to hold orders",
    )
    assert queue_bodies(slave, "secret", replica=True) == ["s0"]
    # the Python client and the CLI against the secured cluster (through the slave)
    with Client(slave.url, token=ALICE) as client:
        client.send("orders", "from-client")
        assert client.pull("orders", 0, 0, max_messages=10).messages[-1].body == b"from-client"
    cli = subprocess.run(
        [sys.executable, "-m", "sparkmq.cli", "topics", "describe", "orders",
         "--endpoint", slave.url, "-o", "json"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "SPARKMQ_TOKEN": ALICE},
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    assert '"orders"' in cli.stdout


def test_internal_routes_refuse_every_user_even_a_superuser(secured: Any) -> None:
    master = secured[1]
    internal = [
        ("GET", "/replica/metadata", None),
        ("POST", "/kafka/peer/enlist", b"{}"),
        ("PUT", "/sinks/s1/batches/1/chunks/0", b""),
    ]
    for method, path, body in internal:
        for token in (ADMIN, ALICE):
            answer = httpx.request(method, master.url + path, headers=as_(token), content=body, timeout=10)
            assert answer.status_code == 403, (path, token[:5], answer.text)
        assert httpx.request(method, master.url + path, content=body, timeout=10).status_code == 401
    peer = httpx.get(f"{master.url}/replica/metadata", headers=as_(BROKER_TOKENS["b1-b"]), timeout=10)
    assert peer.status_code == 200, peer.text


def test_the_replication_port_refuses_bad_certificates_without_an_election(
    secured: Any, tmp_path: Path
) -> None:
    _, master, _, ca = secured
    state = group_of(master)
    epoch, master_id = state["epoch"], next(m for m, r in roles(master).items() if r == "master")
    slave_id = next(m for m, r in roles(master).items() if r == "slave")
    address = f"127.0.0.1:{master.ha_port}"
    foreign = TestCA(tmp_path / "foreign", "foreign")
    cases = {
        "no certificate": ssl.create_default_context(cafile=str(ca.ca_file)),
        "foreign CA": foreign.client_context(foreign.issue("b1-b")),
        "expired": ca.client_context(ca.issue("b1-b", expired=True)),
        "another member's": ca.client_context(ca.issue("b1-b")),  # valid, but not member 999's
    }
    cases["foreign CA"].load_verify_locations(ca.ca_file)
    for case, context in cases.items():
        claimed = 999 if case == "another member's" else slave_id
        for _ in range(3):
            assert ha_bytes(address, context, claimed) == 0, case
    time.sleep(3)  # what a watchdog would need to act on, twice its interval
    after = group_of(master)
    assert after["epoch"] == epoch and roles(master)[master_id] == "master"
    assert len(after["in_sync"]) == 2


def test_zookeeper_nodes_refuse_a_client_without_the_credential(secured: Any) -> None:
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoAuthError

    cluster, master, slave, _ = secured
    root = cluster.chroot
    anonymous = KazooClient(hosts=cluster.zookeeper.address)
    anonymous.start(timeout=30)
    try:
        children = anonymous.get_children(root)  # ACL'd nodes may not even be listed
        assert children == [] or children
    except NoAuthError:
        children = []
    try:
        with pytest.raises(NoAuthError):
            anonymous.set(root, b"owned")
        with pytest.raises(NoAuthError):
            anonymous.create(f"{root}/brokers/evil", b"x")
        with pytest.raises(NoAuthError):
            anonymous.get(f"{root}/brokers")
    finally:
        anonymous.stop()
        anonymous.close()
    authenticated = KazooClient(
        hosts=cluster.zookeeper.address, auth_data=[("digest", f"{ZK_USER}:{ZK_PASSWORD}")]
    )
    authenticated.start(timeout=30)
    try:
        assert "b1" in authenticated.get_children(f"{root}/brokers")
    finally:
        authenticated.stop()
        authenticated.close()
    for broker in (master, slave):
        assert ZK_PASSWORD not in broker.log_tail(200_000)
        assert BROKER_TOKENS["b1-a"] not in broker.log_tail(200_000)


@pytest.mark.spark
def test_the_spark_source_and_sink_work_against_the_secured_cluster(secured: Any, spark: Any) -> None:
    from tests.streaming.eo_helpers import register_sink

    register_sink(spark)
    _, master, slave, _ = secured
    with httpx.Client(base_url=slave.url, headers=as_(ADMIN), timeout=30) as http:
        for topic in ("orders-spark", "secret"):
            assert http.put(f"/topics/{topic}", json={"queues": 1}).status_code == 201
    login = "org.apache.kafka.common.security.plain.PlainLoginModule"
    jaas = f'{login} required username="alice" password="{ALICE_PASSWORD}";'
    rows = spark.createDataFrame([(f"s{i}",) for i in range(20)], "body string")
    (
        rows.write.format("sparkmq")  # a sink's batches are decided by a master
        .mode("append")
        .option("endpoint", master.url)
        .option("topic", "orders-spark")
        .option("kafka.security.protocol", "SASL_PLAINTEXT")
        .option("kafka.sasl.mechanism", "SCRAM-SHA-256")
        .option("kafka.sasl.jaas.config", jaas)
        .save()
    )
    read = spark.read.format("sparkmq").option("endpoint", slave.url).option("topic", "orders-spark")
    bodies = sorted(
        bytes(r.body).decode() for r in read.option("token", ALICE).load().select("body").collect()
    )
    assert bodies == sorted(f"s{i}" for i in range(20))
    assert sorted(queue_bodies(master, "orders-spark")) == bodies
    with pytest.raises(Exception, match=r"403|forbidden"):
        rows.write.format("sparkmq").mode("append").option("endpoint", master.url).option(
            "topic", "secret"
        ).option("token", ALICE).option("retryTimeoutMs", "0").save()
    assert queue_bodies(master, "secret") == []  # the denied sink stored nothing
    assert queue_bodies(slave, "secret", replica=True) == []
