"""Golden JSON of the znode values, and the route questions a view answers."""

from __future__ import annotations

import pytest

from cluster import (
    BrokerGroup,
    ClusterView,
    InvalidBrokerName,
    MemberInfo,
    TopicPlacement,
    validate_broker_name,
)
from cluster.model import CorruptRoute

MEMBER = MemberInfo(
    broker_name="b1",
    member_id=3,
    http="http://127.0.0.1:8080",
    store="127.0.0.1:8080",
    started_ms=1_763_700_000_000,
    kafka="127.0.0.1:9092",
)
MEMBER_JSON = (
    b'{"broker_name":"b1","member_id":3,"http":"http://127.0.0.1:8080","store":"127.0.0.1:8080",'
    b'"started_ms":1763700000000,"kafka":"127.0.0.1:9092"}'
)


def test_member_golden_json() -> None:
    assert MEMBER.to_json() == MEMBER_JSON
    assert MemberInfo.from_json(MEMBER_JSON) == MEMBER
    assert MEMBER.kafka_host_port == ("127.0.0.1", 9092)


def test_member_json_tolerates_fields_of_newer_versions() -> None:
    newer = MEMBER_JSON[:-1] + b',"zone":"a","ha":null}'
    assert MemberInfo.from_json(newer) == MEMBER


def test_replica_member_golden_json() -> None:
    replica = MemberInfo("b1", 4, "http://h:1", "h:1", 5, ha="h:2", last_epoch=3, max_offset=4096)
    raw = replica.to_json()
    assert raw == (
        b'{"broker_name":"b1","member_id":4,"http":"http://h:1","store":"h:1","started_ms":5,'
        b'"ha":"h:2","last_epoch":3,"max_offset":4096}'
    )
    assert MemberInfo.from_json(raw) == replica


def test_placement_golden_json() -> None:
    placement = TopicPlacement("orders", ("b1", "b2", "b3", "b1"))
    assert placement.to_json() == b'{"queues":["b1","b2","b3","b1"]}'
    assert TopicPlacement.from_json("orders", placement.to_json(), 7) == TopicPlacement(
        "orders", ("b1", "b2", "b3", "b1"), 7
    )
    assert placement.queues_of("b1") == (0, 3)


@pytest.mark.parametrize("raw", [b"", b"{}", b'{"queues": []}', b'{"queues": "b1"}', b"not json"])
def test_corrupt_placement_is_named(raw: bytes) -> None:
    with pytest.raises(CorruptRoute, match="orders"):
        TopicPlacement.from_json("orders", raw)


def _view() -> ClusterView:
    b2 = MemberInfo("b2", 4, "http://127.0.0.1:8081", "127.0.0.1:8081", 0)
    b3_last = MemberInfo("b3", 5, "http://127.0.0.1:8082", "127.0.0.1:8082", 0)
    return ClusterView(
        groups={
            "b1": BrokerGroup("b1", (MEMBER,), 3, 0, MEMBER),
            "b2": BrokerGroup("b2", (b2,), 4, 0, b2),
            "b3": BrokerGroup("b3", (), None, 0, b3_last),
        },
        topics={"orders": TopicPlacement("orders", ("b1", "b2", "b3", "b1"))},
    )


def test_view_answers_route_questions() -> None:
    view = _view()
    assert view.owner("orders", 2) == "b3"
    assert view.owner("orders", 4) is None
    assert view.owner("missing", 0) is None
    assert view.live_brokers() == ("b1", "b2")
    assert view.master_of("b3") is None
    route = view.route("orders")
    assert route is not None
    assert [(r.queue_id, r.broker_name, r.alive, r.http) for r in route] == [
        (0, "b1", True, "http://127.0.0.1:8080"),
        (1, "b2", True, "http://127.0.0.1:8081"),
        (2, "b3", False, "http://127.0.0.1:8082"),  # dead: its last known address
        (3, "b1", True, "http://127.0.0.1:8080"),
    ]
    assert view.queue_counts() == {"b1": 2, "b2": 1, "b3": 1}
    assert view.describe()["brokers"][2] == {
        "name": "b3",
        "alive": False,
        "http": "http://127.0.0.1:8082",
        "kafka": None,
        "member_id": 5,
        "queues": 1,
    }


@pytest.mark.parametrize("name", ["", "a/b", "a b", ".", "..", "x" * 65, "é"])
def test_bad_broker_names(name: str) -> None:
    with pytest.raises(InvalidBrokerName):
        validate_broker_name(name)
