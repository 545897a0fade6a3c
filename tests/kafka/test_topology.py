"""The Kafka view of a cluster (nodes, leaders, coordinators) from hand-built ClusterViews."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cluster import BrokerGroup, ClusterView, MemberInfo, TopicPlacement
from ingest_api.kafka.topology import (
    CoordinatorKind,
    KafkaNode,
    cluster_id,
    coordinator,
    known_kafka_brokers,
    leader,
    live_nodes,
    replicas_of,
)
from store import java_string_hash


def member(name: str, member_id: int, kafka: bool = True) -> MemberInfo:
    return MemberInfo(
        broker_name=name,
        member_id=member_id,
        http=f"http://127.0.0.1:{8000 + member_id}",
        store=f"127.0.0.1:{8000 + member_id}",
        started_ms=1,
        kafka=f"127.0.0.1:{9000 + member_id}" if kafka else None,
    )


def view(
    live: dict[str, int], dead: dict[str, int] | None = None, no_kafka: tuple[str, ...] = ()
) -> ClusterView:
    groups = {}
    for name, member_id in live.items():
        m = member(name, member_id, kafka=name not in no_kafka)
        groups[name] = BrokerGroup(name, (m,), member_id, 0, m)
    for name, member_id in (dead or {}).items():
        groups[name] = BrokerGroup(name, (), None, 0, member(name, member_id))
    topics = {"orders": TopicPlacement("orders", ("b1", "b2", "b3", "b1", "b2", "b3")),
              "a%2Eb": TopicPlacement("a%2Eb", ("b2",))}  # fmt: skip
    return ClusterView(groups=groups, topics=topics)


def node(name: str, member_id: int) -> KafkaNode:
    return KafkaNode(member_id, "127.0.0.1", 9000 + member_id, name)


def test_live_nodes_are_the_live_kafka_masters_by_node_id() -> None:
    snapshot = view({"b2": 7, "b1": 4}, dead={"b3": 5}, no_kafka=())
    assert live_nodes(snapshot) == [node("b1", 4), node("b2", 7)]
    assert live_nodes(view({"b1": 4, "b2": 7}, no_kafka=("b2",))) == [node("b1", 4)]


def test_leaders_are_queue_owners_and_a_dead_owner_has_none() -> None:
    snapshot = view({"b1": 0, "b2": 1}, dead={"b3": 2})
    assert [leader(snapshot, "orders", q) for q in range(6)] == [
        node("b1", 0), node("b2", 1), None, node("b1", 0), node("b2", 1), None,
    ]  # fmt: skip
    assert leader(snapshot, "a.b", 0) == node("b2", 1)  # Kafka names are mapped to store names
    assert leader(snapshot, "orders", 6) is None
    assert leader(snapshot, "unknown", 0) is None


def test_coordinators_hash_over_the_sorted_known_kafka_brokers_like_kafka() -> None:
    snapshot = view({"b1": 0, "b2": 1, "b3": 2})
    assert known_kafka_brokers(snapshot) == ["b1", "b2", "b3"]
    for key in ("orders-app", "g1", "tx-λ", ""):
        expected = ["b1", "b2", "b3"][abs(java_string_hash(key)) % 3]
        for kind in CoordinatorKind:
            choice = coordinator(snapshot, key, kind)
            assert choice.broker_name == expected
            assert choice.node == node(expected, {"b1": 0, "b2": 1, "b3": 2}[expected])


def test_a_dead_group_coordinator_falls_back_to_the_live_brokers_a_transaction_one_does_not() -> None:
    snapshot = view({"b1": 0, "b2": 1}, dead={"b3": 2})
    key = next(k for k in (f"g{i}" for i in range(100)) if abs(java_string_hash(k)) % 3 == 2)
    assert known_kafka_brokers(snapshot) == ["b1", "b2", "b3"]  # the dead one keeps its slot
    group = coordinator(snapshot, key, CoordinatorKind.GROUP)
    assert group.broker_name == ["b1", "b2"][abs(java_string_hash(key)) % 2]
    assert group.node is not None
    txn = coordinator(snapshot, key, CoordinatorKind.TRANSACTION)
    assert txn.broker_name == "b3"
    assert txn.node is None  # COORDINATOR_NOT_AVAILABLE until b3 is back
    assert coordinator(ClusterView(), key, CoordinatorKind.GROUP).broker_name is None


@given(st.text(max_size=30), st.lists(st.integers(0, 50), min_size=1, max_size=6, unique=True))
def test_every_broker_computes_the_same_coordinator(key: str, ids: list[int]) -> None:
    live = {f"b{i}": i for i in ids}
    first = coordinator(view(live), key, CoordinatorKind.GROUP)
    again = coordinator(
        ClusterView(groups=dict(reversed(list(view(live).groups.items())))), key, CoordinatorKind.GROUP
    )
    assert first == again
    assert first.broker_name in live


def test_cluster_id_is_the_chroot() -> None:
    assert cluster_id("/sparkmq") == "sparkmq"
    assert cluster_id("/prod/mq") == "prod-mq"
    assert cluster_id("/") == "sparkmq"


def _replica_group(live_ids: tuple[int, ...], master: int | None, in_sync: set[int]) -> ClusterView:
    from cluster.group_state import GroupState

    members = tuple(member("b1", i) for i in live_ids)
    state = GroupState(master=master, epoch=3, sync_state_set=frozenset(in_sync), set_epoch=2)
    group = BrokerGroup("b1", members, master, 3, members[0] if members else None, state)
    return ClusterView(groups={"b1": group}, topics={"t": TopicPlacement("t", ("b1",))})


def test_a_replica_groups_members_are_the_replicas_and_its_in_sync_set_the_isr() -> None:
    both = replicas_of(_replica_group((9, 4), master=9, in_sync={4, 9}), "b1")
    assert (both.leader, both.replicas, both.isr, both.offline) == (node("b1", 9), (9, 4), (9, 4), ())
    catching_up = replicas_of(_replica_group((4, 9, 12), master=4, in_sync={4}), "b1")
    assert (catching_up.replicas, catching_up.isr, catching_up.offline) == ((4, 9, 12), (4,), ())
    # the master's process is gone and its session has expired; no election yet
    orphan = replicas_of(_replica_group((9,), master=4, in_sync={4, 9}), "b1")
    assert (orphan.leader, orphan.replicas, orphan.isr, orphan.offline) == (None, (4, 9), (9,), (4,))


def test_a_broker_without_replicas_is_its_only_replica() -> None:
    snapshot = view({"b1": 4}, dead={"b3": 5})
    alone = replicas_of(snapshot, "b1")
    assert (alone.leader, alone.replicas, alone.isr, alone.offline) == (node("b1", 4), (4,), (4,), ())
    down = replicas_of(snapshot, "b3")
    assert (down.leader, down.replicas, down.isr, down.offline) == (None, (5,), (), (5,))
