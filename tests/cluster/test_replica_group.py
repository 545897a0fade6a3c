"""Replica groups against a real ZooKeeper: founding, following, elections, fencing by epoch.

The store side is a small recording replica here (the real HA service is exercised end to end
in tests/cluster/test_replication*.py); what is tested is the ZooKeeper half: who is master,
under which epoch, and that every change is a versioned write."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cluster import ClusterConfig, ClusterNode, SessionState, connect, parse_cluster_address
from cluster.group_state import Candidate, elect
from cluster.replica_group import ReplicaGroup
from tests.support.waiting import wait_until


@dataclass
class RecordingReplica:
    """Keeps the role it was given, as a store's HA service would report it."""

    last_epoch: int = 0
    max_offset: int = 0
    role: str = "standby"
    master_address: str | None = None
    master_connected: bool = True
    calls: list[tuple[str, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def become_master(
        self, epoch: int, sync_state_epoch: int = 0, in_sync: Iterable[int] | None = None
    ) -> None:
        with self.lock:
            if epoch < self.last_epoch:
                raise RuntimeError(f"stale epoch {epoch} < {self.last_epoch}")
            self.last_epoch, self.role = epoch, "master"
            self.calls.append(("master", epoch))

    def become_slave(self, master_ha_address: str, master_epoch: int) -> None:
        with self.lock:
            self.role, self.master_address = "slave", master_ha_address
            self.last_epoch = max(self.last_epoch, master_epoch)
            self.calls.append(("slave", master_epoch))

    def fence(self, reason: str) -> None:
        with self.lock:
            self.role = "fenced"
            self.calls.append(("fence", self.last_epoch))


Start = Callable[..., tuple[ClusterNode, ReplicaGroup, RecordingReplica]]


@pytest.fixture
def start_member(zk_url: str, tmp_path: Path) -> Iterator[Start]:
    started: list[tuple[ClusterNode, ReplicaGroup]] = []

    def start(
        member: str,
        *,
        unclean: bool = False,
        offset: int = 0,
        before_start: Callable[[ReplicaGroup, RecordingReplica], None] | None = None,
    ) -> tuple[ClusterNode, ReplicaGroup, RecordingReplica]:
        port = 9000 + len(started)
        config = ClusterConfig(
            address=parse_cluster_address(zk_url), broker_name="g", advertise_host="127.0.0.1",
            http_port=port, ha_port=port + 100, session_timeout_ms=2000,
        )  # fmt: skip
        node = connect(config, tmp_path / member / "config")
        node.start()
        replica = RecordingReplica(max_offset=offset)
        group = ReplicaGroup(node, replica, unclean=unclean, settle_s=0.1, takeover_after_s=1.0)
        if before_start is not None:
            before_start(group, replica)
        group.start()
        started.append((node, group))
        return node, group, replica

    yield start
    for node, group in started:
        group.close()
        node.close()


def _state(node: ClusterNode) -> tuple[int | None, int, list[int]]:
    state = node.read_group_state()
    assert state is not None
    return state.master, state.epoch, sorted(state.sync_state_set)


def test_the_first_member_founds_the_group_and_the_others_follow(start_member: Start) -> None:
    first, _, leader = start_member("a")
    wait_until(lambda: leader.role == "master", 10, "the founder to lead")
    _, _, follower = start_member("b")
    wait_until(lambda: follower.role == "slave", 10, "the second to follow")
    assert follower.master_address == "127.0.0.1:9100"
    assert _state(first) == (
        first.member.member_id if first.member else None,
        1,
        [first.member.member_id if first.member else 0],
    )
    wait_until(
        lambda: first.view.group("g").master_id == (first.member.member_id if first.member else None),
        5,
        "the route",
    )


def test_an_in_sync_slave_takes_over_with_a_new_epoch(start_member: Start) -> None:
    a, group_a, leader = start_member("a")
    wait_until(lambda: leader.role == "master", 10, "a to lead")
    b, _, replica_b = start_member("b", offset=500)
    c, _, replica_c = start_member("c", offset=900)
    wait_until(lambda: replica_b.role == replica_c.role == "slave", 10, "b and c to follow")
    ids = {name: node.member.member_id for name, node in (("a", a), ("b", b), ("c", c)) if node.member}
    # the HA master proposes b and c into the in-sync set (both caught up)
    assert group_a.propose(frozenset(ids.values()), 1, 1)
    assert not group_a.propose(frozenset({ids["a"]}), 1, 1)  # a stale set version is refused
    a.close()  # the master's session ends
    wait_until(lambda: "master" in (replica_b.role, replica_c.role), 15, "a new master")
    assert replica_c.role == "master"  # the most advanced in-sync member (same epoch, higher offset)
    wait_until(lambda: replica_b.role == "slave" and replica_b.calls[-1] == ("slave", 2), 10, "b to follow c")
    assert _state(b) == (ids["c"], 2, [ids["c"]])
    assert not group_a.propose(
        frozenset(ids.values()), 1, 2
    )  # the deposed master can no longer change the set


def test_without_an_in_sync_member_the_group_stays_without_master(start_member: Start) -> None:
    a, _, leader = start_member("a")
    wait_until(lambda: leader.role == "master", 10, "a to lead")
    b, _, follower = start_member("b")
    wait_until(lambda: follower.role == "slave", 10, "b to follow")
    a.close()  # b never joined the in-sync set
    wait_until(lambda: b.view.group("g").master_id is None, 10, "a gone")
    assert follower.role == "slave"
    state = b.read_group_state()
    assert state is not None and state.master == (a.member.member_id if a.member else None)


def test_unclean_failover_elects_an_out_of_sync_member(start_member: Start) -> None:
    a, _, leader = start_member("a")
    wait_until(lambda: leader.role == "master", 10, "a to lead")
    b, _, follower = start_member("b", unclean=True)
    wait_until(lambda: follower.role == "slave", 10, "b to follow")
    a.close()
    wait_until(lambda: follower.role == "master", 15, "b to lead, uncleanly")
    assert _state(b)[1] == 2


def test_a_fenced_master_resumes_only_its_own_epoch(start_member: Start) -> None:
    _, group_a, leader = start_member("a")
    wait_until(lambda: leader.role == "master", 10, "a to lead")
    group_a._on_session(SessionState.SUSPENDED)  # what kazoo reports on a cut connection
    assert leader.role == "fenced"
    group_a._on_session(SessionState.CONNECTED)
    wait_until(lambda: leader.role == "master", 10, "a to resume")
    assert leader.calls == [("master", 1), ("fence", 1), ("master", 1)]


def test_state_kept_in_memory_stops_before_the_store_takes_writes_and_is_rebuilt_after(
    start_member: Start,
) -> None:
    """``on_lead_begin`` runs before ``become_master`` (a slave's transaction coordinator must
    refuse before the store takes writes: the Jepsen run's transaction ids handed out again),
    ``on_lead`` after it; a master resuming its own epoch rebuilds nothing."""

    def hooks(group: ReplicaGroup, replica: RecordingReplica) -> None:
        group.on_lead_begin.append(lambda epoch: replica.calls.append(("begin", epoch)))
        group.on_lead.append(lambda epoch: replica.calls.append(("rebuilt", epoch)))

    _, group_a, leader = start_member("a", before_start=hooks)
    wait_until(lambda: ("rebuilt", 1) in leader.calls, 10, "a to lead")
    assert leader.calls == [("begin", 1), ("master", 1), ("rebuilt", 1)]
    group_a._on_session(SessionState.SUSPENDED)
    group_a._on_session(SessionState.CONNECTED)
    wait_until(lambda: leader.calls[-1] == ("master", 1), 10, "a to resume")
    assert leader.calls[3:] == [("fence", 1), ("master", 1)], "a resumed epoch: nothing rebuilt"


def test_a_master_back_from_a_lost_session_leads_only_through_a_new_epoch(start_member: Start) -> None:
    """Its member node vanished with the session, so a slave may be electing meanwhile: the
    master must not resume its old epoch unannounced (both would lead) but write a new one,
    which the election's versioned write then loses to (or wins against)."""
    a, group_a, leader = start_member("a")
    wait_until(lambda: leader.role == "master", 10, "a to lead")
    b, _, follower = start_member("b", offset=0)
    wait_until(lambda: follower.role == "slave", 10, "b to follow")
    ids = [node.member.member_id for node in (a, b) if node.member]
    assert group_a.propose(frozenset(ids), 1, 1)
    seen_by_b = b.read_group_state()  # b saw a's member node vanish and read the state to elect
    assert seen_by_b is not None and seen_by_b.master == ids[0]
    group_a._on_session(SessionState.LOST)  # the session expired during a partition ...
    assert leader.role == "fenced"
    group_a._on_session(SessionState.CONNECTED)  # ... and a new one is up (re-registered)
    wait_until(lambda: leader.calls[-1] == ("master", 2), 10, "a to lead a new epoch")
    assert _state(a) == (ids[0], 2, [ids[0]])
    # b's election, decided on what it read before a came back, cannot also succeed
    candidates = {ids[1]: Candidate(ids[1], 1, 0)}
    elected = elect(seen_by_b, candidates)
    assert elected is not None and elected.master == ids[1]
    assert not b.write_group_state(elected, seen_by_b)
    wait_until(lambda: follower.calls[-1] == ("slave", 2), 10, "b to follow a's new epoch")


def test_a_master_back_from_a_suspension_resumes_its_epoch(start_member: Start) -> None:
    """The same session: its member node never vanished, no one could elect; nothing written."""
    a, group_a, leader = start_member("a")
    wait_until(lambda: leader.role == "master", 10, "a to lead")
    version = a.read_group_state()
    group_a._on_session(SessionState.SUSPENDED)
    group_a._on_session(SessionState.CONNECTED)
    wait_until(lambda: leader.calls[-1] == ("master", 1), 10, "a to resume")
    assert a.read_group_state() == version
