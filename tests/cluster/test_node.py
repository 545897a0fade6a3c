"""ClusterNode against a real ZooKeeper: joining, routes on every node, versioned placement."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cluster import (
    BrokerNameTaken,
    ClusterConfig,
    ClusterNode,
    InvalidPlacement,
    StoreBelongsElsewhere,
    connect,
    parse_cluster_address,
)
from cluster.group_state import GroupState
from cluster.identity import IDENTITY_FILE
from ingest_api.kafka.cluster_link import ClusterLink
from ingest_api.kafka.topology import CoordinatorKind
from store import read_json
from tests.support.waiting import wait_until

NodeFactory = Callable[..., ClusterNode]


@pytest.fixture
def start_node(zk_url: str, tmp_path: Path) -> Iterator[NodeFactory]:
    started: list[ClusterNode] = []

    def factory(name: str, port: int, store: str | None = None, **changes: object) -> ClusterNode:
        config = ClusterConfig(
            address=parse_cluster_address(zk_url),
            broker_name=name,
            advertise_host="127.0.0.1",
            http_port=port,
            session_timeout_ms=2000,
            **changes,  # type: ignore[arg-type]
        )
        node = connect(config, tmp_path / (store or name) / "config")
        node.start()
        started.append(node)
        return node

    yield factory
    for node in started:
        node.close()


def test_brokers_see_each_other_and_the_same_routes(start_node: NodeFactory) -> None:
    b1, b2, b3 = (start_node(f"b{i}", 8080 + i) for i in (1, 2, 3))
    for node in (b1, b2, b3):
        wait_until(lambda node=node: node.view.live_brokers() == ("b1", "b2", "b3"), 5, "three live brokers")
    placement = b2.create_or_grow_topic("orders", 4)
    assert placement.owners == ("b1", "b2", "b3", "b1")
    for node in (b1, b3):  # pushed by watches, not polled
        wait_until(lambda node=node: node.view.placement("orders") is not None, 2, "the route everywhere")
    routes = [node.view.route("orders") for node in (b1, b2, b3)]
    assert routes[0] == routes[1] == routes[2]
    assert routes[0] is not None and routes[0][2].http == "http://127.0.0.1:8083"
    assert {m.member_id for m in b1.view.live_members()} == {
        b.member.member_id for b in (b1, b2, b3) if b.member
    }


def test_growth_and_pinning(start_node: NodeFactory) -> None:
    b1, b2 = start_node("b1", 8081), start_node("b2", 8082)
    wait_until(lambda: b1.view.live_brokers() == ("b1", "b2"), 5, "two live brokers")
    b1.create_or_grow_topic("t", 2)
    assert b1.create_or_grow_topic("t", 5, brokers=["b2"]).owners == ("b1", "b2", "b2", "b2", "b2")
    assert b2.create_or_grow_topic("t", 3).owners == ("b1", "b2", "b2", "b2", "b2")  # never shrinks
    with pytest.raises(InvalidPlacement, match="unknown broker"):
        b1.create_or_grow_topic("t", 9, brokers=["b7"])


def test_ensuring_a_topic_another_member_just_created_never_grows_it(start_node: NodeFactory) -> None:
    """A route lookup (auto-create) at a member whose watch has not delivered a topic yet finds
    it in ZooKeeper and answers its queues; before, it grew the topic to the default count (seen
    in CI: a two-queue topic became eight when the slave's NameServer was asked at once)."""
    b1, b2 = start_node("b1", 8081), start_node("b2", 8082)
    wait_until(
        lambda: b1.view.live_brokers() == b2.view.live_brokers() == ("b1", "b2"), 5, "two live brokers"
    )
    before = b2.view  # a snapshot: each change of the routes installs a new view
    b1.create_or_grow_topic("fresh", 2)
    wait_until(lambda: b2.view.placement("fresh") is not None, 2, "the route at b2")
    b2._view = before  # as if b2's watch had not fired yet
    assert b2.ensure_topic("fresh").owners == ("b1", "b2")
    assert b2.create_topic("fresh", 4) is None, "an exclusive create (Kafka's) finds it exists"
    assert b1.create_or_grow_topic("fresh", 1).owners == ("b1", "b2"), "still two queues in ZooKeeper"
    assert b2.ensure_topic("other").queue_count == b2.config.default_queues  # a missing topic is created
    created = b2.create_topic("third", 3)
    assert created is not None and created.owners == ("b1", "b2", "b1")
    assert b1.create_topic("third", 5) is None


def test_a_member_learns_a_topic_its_watch_has_not_brought_yet(start_node: NodeFactory) -> None:
    """A request for a topic another member has just created finds it in ZooKeeper; a missing
    topic is asked again only after the recheck time."""
    b1, b2 = start_node("b1", 8081), start_node("b2", 8082)
    # b1 places the topic over the live brokers *it* sees: both views, not only b2's.
    wait_until(
        lambda: b1.view.live_brokers() == b2.view.live_brokers() == ("b1", "b2"), 5, "two live brokers"
    )
    b1.create_or_grow_topic("fresh", 3)
    wait_until(lambda: b2.view.placement("fresh") is not None, 2, "the route at b2")
    with b2._lock:  # as if b2's watch had not fired yet
        b2._placements.pop("fresh")
        b2._publish()
    assert b2.view.placement("fresh") is None
    learned = b2.learn_topic("fresh")
    assert learned is not None and learned.owners == ("b1", "b2", "b1")
    assert b2.view.placement("fresh") == learned, "the view shows it from now on"
    assert b2.learn_topic("missing") is None
    b1.create_or_grow_topic("missing", 1)
    with b2._lock:
        b2._placements.pop("missing", None)
        b2._publish()
    assert b2.learn_topic("missing") is None, "ZooKeeper's answer is trusted for a second"
    b2._unknown_topics["missing"] = 0.0
    learned = b2.learn_topic("missing")
    assert learned is not None and learned.queue_count == 1


def test_concurrent_growth_never_claims_a_queue_twice(start_node: NodeFactory) -> None:
    nodes = [start_node(f"b{i}", 8090 + i) for i in range(3)]
    wait_until(lambda: all(len(n.view.live_brokers()) == 3 for n in nodes), 5, "three live brokers")
    results: list[tuple[str, ...]] = []

    def grow(node: ClusterNode, queues: int) -> None:
        results.append(node.create_or_grow_topic("race", queues).owners)

    threads = [threading.Thread(target=grow, args=(node, 4 + 2 * i)) for i, node in enumerate(nodes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    final = wait_until(
        lambda: (
            {n.view.placement("race").owners for n in nodes if n.view.placement("race")}  # type: ignore[union-attr]
            if all(n.view.placement("race") and n.view.placement("race").queue_count == 8 for n in nodes)  # type: ignore[union-attr]
            else None
        ),
        5,
        "one final placement",
    )
    assert len(final) == 1
    (owners,) = final
    for seen in results:  # every answer is a prefix of the final placement: nothing moved
        assert owners[: len(seen)] == seen


def test_a_second_live_broker_with_the_same_name_is_refused(start_node: NodeFactory) -> None:
    start_node("b1", 8081)
    with pytest.raises(BrokerNameTaken, match=r"already live .*member .* at http://127\.0\.0\.1:8081"):
        start_node("b1", 8082, store="other")


def test_member_id_is_kept_by_the_store_directory(start_node: NodeFactory, tmp_path: Path) -> None:
    first = start_node("b1", 8081)
    assert first.member is not None
    member_id = first.member.member_id
    first.close()
    again = start_node("b1", 8081)
    assert again.member is not None and again.member.member_id == member_id
    assert read_json(tmp_path / "b1" / "config" / IDENTITY_FILE) == {
        "broker_name": "b1",
        "cluster": again.config.address.chroot,
        "member_id": member_id,
    }
    again.close()
    with pytest.raises(StoreBelongsElsewhere, match="belongs to broker 'b1'"):
        start_node("b2", 8082, store="b1")


def test_a_closed_broker_is_dead_at_once_and_keeps_its_queues(start_node: NodeFactory) -> None:
    b1, b2 = start_node("b1", 8081), start_node("b2", 8082)
    wait_until(lambda: b1.view.live_brokers() == ("b1", "b2"), 5, "two live brokers")
    b1.create_or_grow_topic("t", 2)
    b2.close()
    wait_until(lambda: b1.view.live_brokers() == ("b1",), 5, "b2 gone")
    route = b1.view.route("t")
    assert route is not None
    assert [(r.broker_name, r.alive, r.http) for r in route] == [
        ("b1", True, "http://127.0.0.1:8081"),
        ("b2", False, "http://127.0.0.1:8082"),
    ]
    assert b1.create_or_grow_topic("t", 3).owners == ("b1", "b2", "b1")  # growth goes to the living


def test_a_kafka_coordinator_demoted_in_its_group_is_told_apart_from_a_participant(
    start_node: NodeFactory,
) -> None:
    """A transactional Produce reaching a member whose group has elected another master: the
    member's broker name coordinates the transactional id, but it must answer retriably
    (the all-faults Jepsen run's INVALID_PRODUCER_ID_MAPPING came from treating it as a
    participant broker, which knows no such producer)."""
    node = start_node("b1", 18101, kafka_port=19101)
    wait_until(lambda: node.view.groups.get("b1") is not None, 10, "b1 in its own view")
    link = ClusterLink(node, peers=None, local_topics=None)  # type: ignore[arg-type]  # not called
    assert link.coordinates("app-1", CoordinatorKind.TRANSACTION)
    assert not link.coordinates_elsewhere_in_group("app-1", CoordinatorKind.TRANSACTION)
    assert node.member is not None
    other = node.member.member_id + 1
    assert node.write_group_state(GroupState(other, 2, frozenset({other}), 2), node.read_group_state())
    wait_until(lambda: not node.serving, 10, "the view to name the other master")
    assert not link.coordinates("app-1", CoordinatorKind.TRANSACTION)
    assert link.coordinates_elsewhere_in_group("app-1", CoordinatorKind.TRANSACTION)


def test_a_replica_serves_nothing_before_its_view_has_the_group_state(start_node: NodeFactory) -> None:
    """A replicated member (an HA port) whose view has no group state yet, as after a restart
    before its watch brought the state, is not its group's master: it must not answer as one
    (the Jepsen run's OffsetFetch answered from a restarted member's stale log). A lone broker
    (no HA port) serves at once."""
    lone = start_node("b1", 18111)
    wait_until(lambda: lone.view.groups.get("b1") is not None, 10, "b1 in its own view")
    assert lone.view.group("b1").state is None and lone.serving
    replica = start_node("b2", 18112, ha_port=18113)
    wait_until(lambda: replica.view.groups.get("b2") is not None, 10, "b2 in its own view")
    assert replica.view.group("b2").state is None
    assert not replica.serving
    assert replica.member is not None
    me = replica.member.member_id
    assert replica.write_group_state(GroupState(me, 1, frozenset({me}), 1), replica.read_group_state())
    wait_until(lambda: replica.serving, 10, "the view to name it master")
