"""The authorization matrix: every advertised Kafka API and every guarded HTTP route, without
the right and then with it. Every denied produce is followed by a superuser's check that
nothing was stored. Lists are filtered, never refused."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest

from broker.security import KAFKA_API_RULES, Grant, Operation, ResourceType, User
from ingest_api.kafka.authz import GUARDS
from ingest_api.kafka.versions import SUPPORTED_VERSIONS, ApiKey
from tests.kafka.rawclient import RawClient
from tests.security.kafka_matrix import CASES, DOOMED, TOPIC, Case, call
from tests.security.test_kafka_sasl_wire import scram_login
from tests.support.secure_broker import (
    PASSWORDS,
    TOKENS,
    SecureBroker,
    default_users,
    scram_of,
    secure_broker,
)

GRANTED_PASSWORD = "gr4nted-secret-fred-9001"
ALL = frozenset({Operation.ALL})


def granted_user() -> User:
    """Every right the matrix needs on ``m-*`` names, and the cluster's create/idempotent write."""
    rights = (
        Grant(ResourceType.TOPIC, "m-*", ALL),
        Grant(ResourceType.GROUP, "m-*", ALL),
        Grant(ResourceType.TRANSACTIONAL_ID, "m-*", ALL),
        Grant(ResourceType.CLUSTER, "*", frozenset({Operation.CREATE, Operation.IDEMPOTENT_WRITE})),
    )
    return User("granted", scram=scram_of(GRANTED_PASSWORD), rights=rights)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    users = [*default_users(), granted_user()]
    with secure_broker(tmp_path_factory.mktemp("matrix"), tls=False, users=users) as running:
        admin = running.https(TOKENS["admin"])
        for topic in (TOPIC, DOOMED, "orders", "payments", "ledger"):
            assert admin.put(f"/topics/{topic}", json={"queues": 2}).status_code == 201
        assert (
            admin.post(f"/topics/{TOPIC}/messages", json={"body": "seed", "queue_id": 0}).status_code == 201
        )
        yield running


def login(secured: SecureBroker, user: str, password: str) -> RawClient:
    client = RawClient(secured.kafka_port)
    assert scram_login(client, "SCRAM-SHA-256", user, password).error_code == 0
    return client


def max_offsets(secured: SecureBroker, topic: str) -> list[int]:
    """The superuser's view of the topic's end offsets."""
    answer = secured.https(TOKENS["admin"]).get(f"/topics/{topic}")
    assert answer.status_code == 200, answer.text
    return [queue["max_offset"] for queue in answer.json()["queue_offsets"]]


def test_every_advertised_api_has_a_rule_a_guard_and_a_case() -> None:
    assert set(SUPPORTED_VERSIONS) <= set(KAFKA_API_RULES)
    assert set(GUARDS) == set(SUPPORTED_VERSIONS)
    assert {case.api for case in CASES} == set(SUPPORTED_VERSIONS)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.api.name)
def test_kafka_api_without_then_with_the_right(matrix: SecureBroker, case: Case) -> None:
    before = max_offsets(matrix, TOPIC)
    with login(matrix, "bob", PASSWORDS["bob"]) as bob:
        answer = call(bob, case)
    assert case.errors(answer) == case.denied, answer
    assert max_offsets(matrix, TOPIC) == before  # nothing stored by a denied request
    with login(matrix, "granted", GRANTED_PASSWORD) as granted:
        answer = call(granted, case)
    assert case.errors(answer) == set(), answer
    if case.api is ApiKey.PRODUCE:
        assert max_offsets(matrix, TOPIC)[0] == before[0] + 1


def test_listings_are_filtered(matrix: SecureBroker) -> None:
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    def topics_seen(user: str, password: str) -> set[str]:
        with login(matrix, user, password) as client:
            answer = client.call(
                MetadataRequest, MetadataResponse, 12, topics=None, allow_auto_topic_creation=False
            )
        return {topic.name for topic in answer.topics}

    assert topics_seen("bob", PASSWORDS["bob"]) == set()
    assert topics_seen("alice", PASSWORDS["alice"]) == {"orders"}
    assert {TOPIC, "orders", "ledger"} <= topics_seen("admin", PASSWORDS["admin"])


HTTP_ROUTES: list[tuple[str, str, dict[str, Any]]] = [
    ("get", "/topics/orders", {}),
    ("put", "/topics/orders", {"json": {"queues": 2}}),
    ("post", "/topics/orders/messages", {"json": {"body": "x"}}),
    ("post", "/topics/orders/messages:batch", {"json": {"messages": [{"body": "x"}]}}),
    ("get", "/topics/orders/queues/0/messages", {}),
    ("get", "/topics/orders/queues/0/offset", {"params": {"timestamp_ms": 0}}),
    ("get", "/topics/orders/messages", {"params": {"key": "k"}}),
    ("get", "/groups", {}),
    ("get", "/groups/g/offsets", {"params": {"topic": "orders"}}),
    ("put", "/groups/g/offsets", {"json": {"topic": "orders", "offsets": {"0": 0}}}),
    ("post", "/groups/g/reset", {"json": {"topic": "orders", "to": "earliest"}}),
    ("get", "/groups/g/lag", {"params": {"topic": "orders"}}),
    ("get", "/metrics", {}),
    ("delete", "/topics/payments", {}),
]


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_http_routes_without_then_with_the_right(matrix: SecureBroker) -> None:
    """bob (a valid password, no rights): 403 everywhere, nothing stored; admin: allowed."""
    bob = matrix.https(headers=basic("bob", PASSWORDS["bob"]))
    admin = matrix.https(TOKENS["admin"])
    for method, path, kwargs in HTTP_ROUTES:
        before = max_offsets(matrix, "orders")
        denied = bob.request(method, path, **kwargs)
        assert denied.status_code == 403, (method, path, denied.text)
        assert max_offsets(matrix, "orders") == before, (method, path)
    for method, path, kwargs in HTTP_ROUTES:
        allowed = admin.request(method, path, **kwargs)
        assert allowed.status_code < 300, (method, path, allowed.text)
    assert bob.get("/topics").json()["topics"] == []  # the list is filtered, not refused


def test_a_mixed_produce_writes_only_the_allowed_partition(matrix: SecureBroker) -> None:
    """alice may write orders* but not ledger: one request to both stores only orders."""
    from ingest_api.kafka import codec
    from tests.kafka.rawclient import record_batch

    produce = codec.request_class(ApiKey.PRODUCE)
    data = produce.TopicProduceData
    part = data.PartitionProduceData(index=0, records=record_batch([b"m"]))
    before = {topic: max_offsets(matrix, topic) for topic in ("orders", "ledger")}
    with login(matrix, "alice", PASSWORDS["alice"]) as alice:
        answer = alice.call(
            produce,
            codec.response_class(ApiKey.PRODUCE),
            9,
            transactional_id=None,
            acks=-1,
            timeout_ms=5000,
            topic_data=[data(name=name, partition_data=[part]) for name in ("orders", "ledger")],
        )
    codes = {t.name: t.partition_responses[0].error_code for t in answer.responses}
    assert codes == {"orders": 0, "ledger": 29}
    assert max_offsets(matrix, "orders")[0] == before["orders"][0] + 1
    assert max_offsets(matrix, "ledger") == before["ledger"]


@pytest.mark.parametrize("version", [1, 4, 12])
def test_metadata_without_create_creates_nothing(matrix: SecureBroker, version: int) -> None:
    """A missing topic named by a user who may describe it but not create it: not created,
    whatever the Metadata version (before v4 a request always asked for auto-creation)."""
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    name = f"orders-not-created-v{version}"
    with login(matrix, "alice", PASSWORDS["alice"]) as alice:
        topic = MetadataRequest.MetadataRequestTopic(name=name)
        answer = alice.call(
            MetadataRequest, MetadataResponse, version, topics=[topic], allow_auto_topic_creation=True
        )
    assert answer.topics[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION: describable, not created
    assert matrix.https(TOKENS["admin"]).get(f"/topics/{name}").status_code == 404
