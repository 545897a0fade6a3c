"""The one authorization function: Kafka's semantics, shorthands, brokers and forwarding."""

from __future__ import annotations

import pytest

from broker.security import (
    KAFKA_API_RULES,
    Grant,
    Operation,
    Permission,
    Principal,
    PrincipalKind,
    ResourceType,
    User,
    authorize,
    authorize_any,
    cluster,
)
from ingest_api.kafka.versions import SUPPORTED_VERSIONS

TOPIC, GROUP, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID
Op = Operation


def user(*grants: Grant, superuser: bool = False) -> Principal:
    return Principal("u", PrincipalKind.USER, superuser, grants)


def allow(resource: ResourceType, pattern: str, *ops: Operation) -> Grant:
    return Grant(resource, pattern, frozenset(ops))


def deny(resource: ResourceType, pattern: str, *ops: Operation) -> Grant:
    return Grant(resource, pattern, frozenset(ops), Permission.DENY)


def test_auth_off_allows_everything() -> None:
    assert authorize(None, Op.DELETE, (TOPIC, "t")) and authorize(None, Op.CLUSTER_ACTION, cluster())


def test_no_grant_means_deny() -> None:
    assert not authorize(user(), Op.READ, (TOPIC, "t"))


def test_globs_literal_prefix_and_wildcard() -> None:
    p = user(allow(TOPIC, "orders", Op.READ), allow(TOPIC, "pay-*", Op.WRITE), allow(GROUP, "*", Op.READ))
    assert authorize(p, Op.READ, (TOPIC, "orders")) and not authorize(p, Op.READ, (TOPIC, "orders2"))
    assert authorize(p, Op.WRITE, (TOPIC, "pay-eu")) and not authorize(p, Op.WRITE, (TOPIC, "pay"))
    assert authorize(p, Op.READ, (GROUP, "anything")) and not authorize(p, Op.READ, (TXN, "anything"))


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER])
def test_describe_is_implied(granted: Operation) -> None:
    p = user(allow(TOPIC, "t", granted))
    assert authorize(p, Op.DESCRIBE, (TOPIC, "t"))
    assert not authorize(p, Op.CREATE, (TOPIC, "t"))


def test_implications_stop_where_kafkas_do() -> None:
    assert not authorize(user(allow(TOPIC, "t", Op.DESCRIBE)), Op.READ, (TOPIC, "t"))
    assert not authorize(user(allow(TOPIC, "t", Op.CREATE)), Op.DESCRIBE, (TOPIC, "t"))
    assert authorize(user(allow(TOPIC, "t", Op.ALTER_CONFIGS)), Op.DESCRIBE_CONFIGS, (TOPIC, "t"))
    everything = user(allow(TOPIC, "*", Op.ALL))
    assert all(authorize(everything, op, (TOPIC, "x")) for op in Op if op is not Op.CLUSTER_ACTION)


def test_deny_beats_allow() -> None:
    p = user(allow(TOPIC, "*", Op.ALL), deny(TOPIC, "secret*", Op.READ))
    assert not authorize(p, Op.READ, (TOPIC, "secret-1"))
    assert authorize(p, Op.WRITE, (TOPIC, "secret-1"))  # a DENY matches only its operation
    assert authorize(p, Op.DESCRIBE, (TOPIC, "secret-1"))  # ...and is not widened by implication
    assert not authorize(user(allow(TOPIC, "*", Op.READ), deny(TOPIC, "*", Op.ALL)), Op.READ, (TOPIC, "t"))


def test_superuser_everything_but_internal_routes() -> None:
    root = user(superuser=True)
    assert authorize(root, Op.DELETE, (TOPIC, "t")) and authorize(root, Op.ALTER, cluster())
    assert not authorize(root, Op.CLUSTER_ACTION, cluster())


def test_brokers_and_forwarding() -> None:
    broker = Principal("broker-a", PrincipalKind.BROKER)
    alice = user(allow(TOPIC, "orders", Op.WRITE))
    assert authorize(broker, Op.CLUSTER_ACTION, cluster()) and authorize(broker, Op.WRITE, (TOPIC, "x"))
    forwarded = broker.forwarding(alice)
    assert str(forwarded) == "Broker:broker-a for User:u"
    assert authorize(forwarded, Op.WRITE, (TOPIC, "orders"))
    assert not authorize(forwarded, Op.WRITE, (TOPIC, "payments"))  # the user's rights decide
    assert authorize(forwarded, Op.CLUSTER_ACTION, cluster())
    with pytest.raises(ValueError, match="only a broker"):
        alice.forwarding(user(superuser=True))
    with pytest.raises(ValueError, match="plain user"):
        broker.forwarding(forwarded)


def test_on_behalf_of_on_a_user_is_ignored() -> None:
    smuggled = Principal("u", on_behalf_of=user(superuser=True))
    assert not authorize(smuggled, Op.WRITE, (TOPIC, "t"))
    assert not authorize(smuggled, Op.CLUSTER_ACTION, cluster())


def test_write_on_any_topic_for_idempotent_producers() -> None:
    assert authorize_any(user(allow(TOPIC, "orders-*", Op.WRITE)), Op.WRITE, TOPIC)
    assert not authorize_any(user(allow(TOPIC, "orders-*", Op.READ)), Op.WRITE, TOPIC)
    assert not authorize_any(user(allow(TOPIC, "o", Op.WRITE), deny(TOPIC, "*", Op.WRITE)), Op.WRITE, TOPIC)
    assert authorize_any(user(superuser=True), Op.WRITE, TOPIC) and authorize_any(None, Op.WRITE, TOPIC)


def test_shorthands_keep_todays_http_meaning() -> None:
    writer = User("w", produce=("orders*",)).principal()
    assert authorize(writer, Op.WRITE, (TOPIC, "orders-eu")) and not authorize(
        writer, Op.READ, (TOPIC, "orders")
    )
    assert not authorize(writer, Op.CREATE, (TOPIC, "orders"))
    reader = User("r", consume=("orders",)).principal()
    assert authorize(reader, Op.READ, (TOPIC, "orders")) and authorize(reader, Op.READ, (GROUP, "any"))
    assert not authorize(reader, Op.READ, (TOPIC, "payments"))
    topic_admin = User("a", admin=("orders",)).principal()
    assert authorize(topic_admin, Op.CREATE, (TOPIC, "orders")) and authorize(
        topic_admin, Op.DELETE, (TOPIC, "orders")
    )
    assert not authorize(topic_admin, Op.DESCRIBE, cluster())
    ops = User("ops", admin=("*",)).principal()
    assert authorize(ops, Op.DESCRIBE, cluster()) and authorize(ops, Op.DESCRIBE, (GROUP, "g"))
    assert not authorize(ops, Op.WRITE, (TOPIC, "t")) and not authorize(ops, Op.CLUSTER_ACTION, cluster())


def test_every_advertised_kafka_api_has_a_rule() -> None:
    missing = [key.name for key in SUPPORTED_VERSIONS if int(key) not in KAFKA_API_RULES]
    assert missing == []
    assert (
        KAFKA_API_RULES[0].checks[0].operation is Op.WRITE and KAFKA_API_RULES[0].checks[0].error_code == 29
    )
    assert KAFKA_API_RULES[17].checks == () and KAFKA_API_RULES[36].checks == ()
    assert {r.name for r in KAFKA_API_RULES.values()} >= {"SaslHandshake", "SaslAuthenticate", "ApiVersions"}
