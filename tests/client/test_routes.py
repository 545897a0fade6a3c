"""The client's route parsing and queue planning, without a network.

The client must place every message where a broker would (``broker/routing.py``):
a differential test runs both planners on the same routes, keys and queue ids."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.routing import QueuePlanner
from cluster import BrokerGroup, ClusterView, MemberInfo, TopicPlacement
from sparkmq.client.errors import NoLiveBroker
from sparkmq.client.routes import ClusterInfo, QueuePicker, Target, TopicRoute, plan
from store import sharding_queue

BROKERS = ("b1", "b2", "b3")


def _member(name: str, member_id: int) -> MemberInfo:
    return MemberInfo(
        name, member_id, f"http://127.0.0.1:{8080 + member_id}", f"127.0.0.1:{8080 + member_id}", 0
    )


def _view(owners: tuple[str, ...], dead: frozenset[str] = frozenset()) -> ClusterView:
    groups = {}
    for i, name in enumerate(BROKERS):
        member = _member(name, i + 1)
        alive = name not in dead
        groups[name] = BrokerGroup(
            name, (member,) if alive else (), member.member_id if alive else None, 0, member
        )
    return ClusterView(groups=groups, topics={"t": TopicPlacement("t", owners)})


def _route_json(view: ClusterView) -> dict[str, Any]:
    """What ``GET /topics/t/route`` answers for ``view`` (as ``routers/cluster.py`` renders it)."""
    route = view.route("t")
    assert route is not None
    return {
        "topic": "t",
        "queues": [
            {
                "queue_id": r.queue_id,
                "broker": r.broker_name,
                "alive": r.alive,
                "http": r.http,
                "kafka": r.kafka,
            }
            for r in route
        ],
    }


owners_strategy = st.lists(st.sampled_from(BROKERS), min_size=1, max_size=24).map(tuple)
entry_strategy = st.tuples(
    st.one_of(st.none(), st.integers(min_value=0, max_value=23)),
    st.one_of(st.none(), st.text(max_size=12)),
)


@settings(max_examples=300, deadline=None)
@given(
    owners=owners_strategy,
    entries=st.lists(entry_strategy, min_size=1, max_size=20),
    anchor=st.one_of(st.none(), st.text(min_size=1, max_size=20)),
    receiver=st.sampled_from(BROKERS),
)
def test_the_client_places_messages_where_a_broker_would(
    owners: tuple[str, ...], entries: list[tuple[int | None, str | None]], anchor: str | None, receiver: str
) -> None:
    n = len(owners)
    queue_ids = [q if q is None or q < n else q % n for q, _ in entries]
    keys = [k for _, k in entries]
    view = _view(owners)
    route = TopicRoute.from_json(_route_json(view))
    broker_plan = QueuePlanner(receiver).plan(view, ["t"] * len(entries), queue_ids, keys, anchor=anchor)
    client_plan = plan(route, queue_ids, keys, anchor=anchor, picker=QueuePicker())
    for i, target in enumerate(client_plan):
        if queue_ids[i] is None and keys[i] is None and anchor is None:
            # unkeyed without a caller's key: the client picks a live queue itself (round robin)
            assert target.picked and target.queue_id is not None
            assert target.broker == owners[target.queue_id]
            continue
        assert target.broker == broker_plan.owners[i], (i, target)
        if keys[i] is not None and queue_ids[i] is None:
            assert broker_plan.queue_ids[i] == sharding_queue(keys[i], n)  # type: ignore[arg-type]


def test_route_json_round_trip_and_single_mode_address() -> None:
    view = _view(("b1", "b2", "b3", "b1"), dead=frozenset({"b3"}))
    route = TopicRoute.from_json(_route_json(view))
    assert route.queue_count == 4
    assert route.brokers() == ("b1", "b2", "b3")
    assert route.queues_of("b1") == (0, 3)
    assert not route.alive("b3") and route.alive("b2")
    assert route.http_of("b3") == "http://127.0.0.1:8083"  # a dead broker keeps its last address
    assert route.usable(avoid={"b2"}) == (0, 3)
    single = {
        "topic": "t",
        "queues": [{"queue_id": 0, "broker": "local", "alive": True, "http": "http://127.0.0.1:8080"}],
    }
    assert (
        TopicRoute.from_json(single, single_url="http://10.0.0.5:9000").http_of("local")
        == "http://10.0.0.5:9000"
    )
    info = ClusterInfo.from_json(
        {"mode": "single", "self": "local", "session": None, "topics": 1,
         "brokers": [{"name": "local", "alive": True, "http": "http://127.0.0.1:8080", "queues": 4}]},
        "http://10.0.0.5:9000",
    )  # fmt: skip
    assert info.broker("local") is not None and info.broker("local").http == "http://10.0.0.5:9000"  # type: ignore[union-attr]


def test_round_robin_skips_dead_and_suspect_brokers() -> None:
    view = _view(("b1", "b2", "b3", "b1", "b2", "b3"), dead=frozenset({"b3"}))
    route = TopicRoute.from_json(_route_json(view))
    picker = QueuePicker()
    picked = [picker.next_queue(route) for _ in range(8)]
    assert picked == [0, 1, 3, 4, 0, 1, 3, 4]
    assert {route.owner(picker.next_queue(route, avoid={"b1"})) for _ in range(4)} == {"b2"}
    batch = plan(route, [None] * 5, [None] * 5, anchor=None, picker=picker)
    assert len({t.broker for t in batch}) == 1, "an unkeyed batch goes to one broker, spread over its queues"
    assert {t.queue_id for t in batch} == set(route.queues_of(batch[0].broker))  # type: ignore[arg-type]
    everyone_dead = TopicRoute.from_json(_route_json(_view(("b1", "b2"), dead=frozenset(BROKERS))))
    with pytest.raises(NoLiveBroker):
        picker.next_queue(everyone_dead)


def test_a_transaction_stays_on_the_broker_of_its_keyed_messages() -> None:
    route = TopicRoute.from_json(_route_json(_view(("b1", "b2", "b3"))))
    targets = plan(
        route, [2, None, None], [None, None, None], anchor=None, picker=QueuePicker(), one_broker=True
    )
    assert [t.broker for t in targets] == ["b3", "b3", "b3"]
    assert targets[1] == Target("b3", 2, picked=True)


def test_unknown_topic_and_queue_outside_go_to_any_broker() -> None:
    assert plan(None, [None, 1], ["k", None], anchor=None, picker=QueuePicker()) == [
        Target(None, None),
        Target(None, 1),
    ]
    route = TopicRoute.from_json(_route_json(_view(("b1", "b2"))))
    assert plan(route, [7], [None], anchor=None, picker=QueuePicker()) == [Target(None, 7)]
