"""Bootstrap lists and the addresses a client learns (``cluster/bootstrap.py``), without I/O."""

from __future__ import annotations

import pytest

from cluster import (
    InvalidBootstrapAddress,
    KnownBrokers,
    learned_addresses,
    no_broker_answered,
    parse_bootstrap,
)

CLUSTER = {
    "mode": "cluster",
    "brokers": [
        {
            "name": "b1",
            "alive": True,
            "http": "http://m1:8081",
            "members": [
                {"member_id": 4, "http": "http://m1:8081"},
                {"member_id": 9, "http": "http://s1:8082/"},
            ],
        },
        {"name": "b2", "alive": False, "http": "http://m2:8083", "members": None},
    ],
}
ROUTE = {
    "topic": "t",
    "queues": [
        {
            "queue_id": 0,
            "broker": "b1",
            "http": "http://m1:8081",
            "replicas": ["http://m1:8081", "http://s1:8082"],
        },
        {"queue_id": 1, "broker": "b3", "http": "http://m3:8084", "replicas": None},
    ],
}


def test_a_bootstrap_list_is_a_string_or_a_sequence_in_order_without_duplicates() -> None:
    assert parse_bootstrap(" http://a:1/, http://b:2,,http://a:1") == ("http://a:1", "http://b:2")
    assert parse_bootstrap(["https://a:1", "http://b:2/"]) == ("https://a:1", "http://b:2")
    assert parse_bootstrap("a:8080,b:8081", bare_host_port=True) == ("http://a:8080", "http://b:8081")


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("", "at least one"),
        ([], "at least one"),
        ("http://a:1,kafka:9092", "'kafka:9092'"),
        ("ftp://a", "http(s)"),
    ],
)
def test_a_bad_bootstrap_list_is_refused_naming_the_entry(value: str, reason: str) -> None:
    with pytest.raises(InvalidBootstrapAddress, match=reason.replace("(", r"\(").replace(")", r"\)")):
        parse_bootstrap(value)
    with pytest.raises(InvalidBootstrapAddress, match="host:port"):
        parse_bootstrap("a:b", bare_host_port=True)


def test_every_broker_and_member_address_is_learnt_from_cluster_and_route_answers() -> None:
    assert learned_addresses(CLUSTER) == ["http://m1:8081", "http://s1:8082", "http://m2:8083"]
    assert learned_addresses(ROUTE) == ["http://m1:8081", "http://s1:8082", "http://m3:8084"]
    assert learned_addresses({"mode": "single", "brokers": [{"http": "http://10.0.0.1:8080"}]}) == []


def test_candidates_the_last_that_answered_then_bootstrap_then_learnt_and_the_unreachable_last() -> None:
    now = [0.0]
    known = KnownBrokers(["http://m1:8081", "http://x:1"], suspect_s=3.0, clock=lambda: now[0])
    known.learn_from(CLUSTER)
    known.learn_from(ROUTE)
    assert known.candidates() == [
        "http://m1:8081",
        "http://x:1",
        "http://s1:8082",
        "http://m2:8083",
        "http://m3:8084",
    ]
    assert known.learnt == ("http://s1:8082", "http://m2:8083", "http://m3:8084")
    known.answered("http://m3:8084")
    assert known.best() == "http://m3:8084"
    known.unreachable("http://m3:8084")  # the master died: its slave is asked before it
    known.unreachable("http://m1:8081")
    assert known.candidates() == [
        "http://x:1",
        "http://s1:8082",
        "http://m2:8083",
        "http://m1:8081",
        "http://m3:8084",
    ]
    now[0] = 3.5  # suspicion ends; nothing was forgotten
    assert known.candidates()[:2] == ["http://m1:8081", "http://x:1"]
    assert len(known.candidates()) == 5


def test_the_message_names_every_address_tried() -> None:
    message = no_broker_answered([("http://a:1", "refused"), ("http://b:2", "timed out")])
    assert message == (
        "no broker answered (tried http://a:1, http://b:2): http://a:1: refused; http://b:2: timed out"
    )
