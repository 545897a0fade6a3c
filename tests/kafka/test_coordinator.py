"""The classic group coordinator as a pure state machine, driven by an injected clock."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from ingest_api.kafka.coordinator import (
    CoordinatorConfig,
    GroupCoordinator,
    GroupState,
    JoinRequest,
    JoinResult,
    SyncResult,
)
from ingest_api.kafka.errors import ErrorCode

DELAY_MS = 300
SESSION_MS = 10_000
REBALANCE_MS = 30_000


@dataclass
class Clock:
    now_ms: int = 1_000_000

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


@dataclass
class Inbox:
    """Collects the answers of one parked request."""

    results: list[object] = field(default_factory=list)

    def __call__(self, result: object) -> None:
        self.results.append(result)

    @property
    def join(self) -> JoinResult:
        (result,) = self.results
        assert isinstance(result, JoinResult)
        return result

    @property
    def sync(self) -> SyncResult:
        (result,) = self.results
        assert isinstance(result, SyncResult)
        return result


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def coordinator(clock: Clock) -> GroupCoordinator:
    return GroupCoordinator(clock, CoordinatorConfig(initial_rebalance_delay_ms=DELAY_MS))


def join(
    coordinator: GroupCoordinator,
    member_id: str = "",
    protocols: tuple[tuple[str, bytes], ...] = (("range", b"meta-r"), ("roundrobin", b"meta-rr")),
    group: str = "g",
) -> Inbox:
    inbox = Inbox()
    request = JoinRequest(
        group, member_id, "client", "/127.0.0.1", SESSION_MS, REBALANCE_MS, "consumer", protocols
    )
    coordinator.join_group(request, inbox)
    return inbox


def sync(
    coordinator: GroupCoordinator, result: JoinResult, assignments: dict[str, bytes] | None = None
) -> Inbox:
    inbox = Inbox()
    coordinator.sync_group("g", result.generation_id, result.member_id, assignments or {}, inbox)
    return inbox


def state(coordinator: GroupCoordinator) -> GroupState:
    return coordinator.describe("g").state


def form_group_of_one(coordinator: GroupCoordinator, clock: Clock) -> JoinResult:
    inbox = join(coordinator)
    clock.advance(DELAY_MS)
    coordinator.tick()
    result = inbox.join
    assert sync(coordinator, result, {result.member_id: b"A"}).sync.assignment == b"A"
    return result


def test_first_join_waits_for_the_initial_delay(coordinator: GroupCoordinator, clock: Clock) -> None:
    inbox = join(coordinator)
    assert inbox.results == []
    assert state(coordinator) == GroupState.PREPARING_REBALANCE
    clock.advance(DELAY_MS - 1)
    coordinator.tick()
    assert inbox.results == []
    clock.advance(1)
    coordinator.tick()
    result = inbox.join
    assert result.error == ErrorCode.NONE
    assert result.generation_id == 1
    assert result.leader_id == result.member_id
    assert result.protocol_name == "range"
    assert result.members == ((result.member_id, b"meta-r"),)  # the leader gets member metadata
    assert state(coordinator) == GroupState.COMPLETING_REBALANCE


def test_members_joining_during_the_delay_share_one_generation(
    coordinator: GroupCoordinator, clock: Clock
) -> None:
    first = join(coordinator)
    clock.advance(DELAY_MS // 2)
    second = join(coordinator)
    clock.advance(DELAY_MS // 2 + 1)
    coordinator.tick()
    assert first.results == []  # the delay was extended by the second join
    clock.advance(DELAY_MS)
    coordinator.tick()
    a, b = first.join, second.join
    assert a.generation_id == b.generation_id == 1
    assert a.leader_id == b.leader_id == a.member_id
    assert len(a.members) == 2
    assert b.members == ()
    follower = sync(coordinator, b)
    assert follower.results == []  # followers wait for the leader's assignment
    leader = sync(coordinator, a, {a.member_id: b"A", b.member_id: b"B"})
    assert leader.sync.assignment == b"A"
    assert follower.sync.assignment == b"B"
    assert state(coordinator) == GroupState.STABLE


def test_new_member_triggers_rebalance_seen_through_heartbeat(
    coordinator: GroupCoordinator, clock: Clock
) -> None:
    a = form_group_of_one(coordinator, clock)
    assert coordinator.heartbeat("g", a.generation_id, a.member_id) == ErrorCode.NONE
    newcomer = join(coordinator)
    assert state(coordinator) == GroupState.PREPARING_REBALANCE
    assert coordinator.heartbeat("g", a.generation_id, a.member_id) == ErrorCode.REBALANCE_IN_PROGRESS
    rejoin = join(coordinator, a.member_id)  # all members are back: completes at once
    assert rejoin.join.generation_id == newcomer.join.generation_id == 2
    assert coordinator.heartbeat("g", 1, a.member_id) == ErrorCode.ILLEGAL_GENERATION


def test_session_expiry_in_preparing_rebalance(coordinator: GroupCoordinator, clock: Clock) -> None:
    a = form_group_of_one(coordinator, clock)
    b_inbox = join(coordinator)  # a never rejoins (crashed)
    clock.advance(SESSION_MS + 1)
    coordinator.tick()
    b = b_inbox.join  # a expired by session timeout, long before the 30 s rebalance timeout
    assert b.error == ErrorCode.NONE
    assert b.generation_id == 2
    assert b.leader_id == b.member_id
    assert [m.member_id for m in coordinator.describe("g").members] == [b.member_id]
    assert coordinator.heartbeat("g", 2, a.member_id) == ErrorCode.UNKNOWN_MEMBER_ID


def test_session_expiry_in_stable_and_completing(coordinator: GroupCoordinator, clock: Clock) -> None:
    form_group_of_one(coordinator, clock)
    clock.advance(SESSION_MS + 1)
    coordinator.tick()
    assert state(coordinator) == GroupState.EMPTY
    assert coordinator.describe("g").members == ()
    inbox = join(coordinator)
    clock.advance(DELAY_MS)
    coordinator.tick()
    assert inbox.join.generation_id == 3  # (1: formed, 2: emptied, 3: this join)
    clock.advance(SESSION_MS + 1)  # never syncs
    coordinator.tick()
    assert state(coordinator) == GroupState.EMPTY


def test_rebalance_timeout_evicts_members_that_do_not_rejoin(clock: Clock) -> None:
    coordinator = GroupCoordinator(clock, CoordinatorConfig(initial_rebalance_delay_ms=0))
    first, second = join(coordinator), None
    a = first.join
    second = join(coordinator)
    b = second.join if second.results else None
    assert b is None  # a must rejoin first
    for _ in range(REBALANCE_MS // 5_000):  # a keeps heartbeating but never rejoins
        clock.advance(5_000)
        assert coordinator.heartbeat("g", a.generation_id, a.member_id) == ErrorCode.REBALANCE_IN_PROGRESS
        coordinator.tick()
    b = second.join
    assert b.error == ErrorCode.NONE
    assert [m for m, _ in b.members] == [b.member_id]


def test_leave_group_rebalances_the_rest(coordinator: GroupCoordinator, clock: Clock) -> None:
    first, second = join(coordinator), join(coordinator)
    clock.advance(DELAY_MS)
    coordinator.tick()
    a, b = first.join, second.join
    sync(coordinator, b)
    sync(coordinator, a, {a.member_id: b"A", b.member_id: b"B"})
    assert coordinator.leave_group("g", [a.member_id]) == [ErrorCode.NONE]
    assert state(coordinator) == GroupState.PREPARING_REBALANCE
    rejoin = join(coordinator, b.member_id)
    assert rejoin.join.leader_id == b.member_id
    assert rejoin.join.generation_id == 2
    assert coordinator.leave_group("g", ["nobody"]) == [ErrorCode.UNKNOWN_MEMBER_ID]


def test_sync_errors(coordinator: GroupCoordinator, clock: Clock) -> None:
    a = form_group_of_one(coordinator, clock)
    wrong_gen = Inbox()
    coordinator.sync_group("g", 99, a.member_id, {}, wrong_gen)
    assert wrong_gen.sync.error == ErrorCode.ILLEGAL_GENERATION
    unknown = Inbox()
    coordinator.sync_group("g", a.generation_id, "ghost", {}, unknown)
    assert unknown.sync.error == ErrorCode.UNKNOWN_MEMBER_ID
    join(coordinator)
    during = Inbox()
    coordinator.sync_group("g", a.generation_id, a.member_id, {}, during)
    assert during.sync.error == ErrorCode.REBALANCE_IN_PROGRESS


def test_join_validation(coordinator: GroupCoordinator) -> None:
    assert join(coordinator, group="").join.error == ErrorCode.INVALID_GROUP_ID
    assert join(coordinator, member_id="ghost").join.error == ErrorCode.UNKNOWN_MEMBER_ID
    join(coordinator)
    other = join(coordinator, protocols=(("sticky", b""),))
    assert other.join.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    bad_session = Inbox()
    coordinator.join_group(JoinRequest("g2", "", "c", "h", 1, 1, "consumer", (("range", b""),)), bad_session)
    assert bad_session.join.error == ErrorCode.INVALID_SESSION_TIMEOUT


def test_protocol_is_chosen_by_vote(coordinator: GroupCoordinator, clock: Clock) -> None:
    first = join(coordinator, protocols=(("roundrobin", b""), ("range", b"")))
    second = join(coordinator, protocols=(("roundrobin", b""), ("range", b"")))
    third = join(coordinator, protocols=(("range", b""), ("roundrobin", b"")))
    clock.advance(DELAY_MS * 3)
    coordinator.tick()
    assert {i.join.protocol_name for i in (first, second, third)} == {"roundrobin"}


def test_commit_validation(coordinator: GroupCoordinator, clock: Clock) -> None:
    assert coordinator.validate_commit("simple", -1, "") == ErrorCode.NONE  # assign() + commit
    a = form_group_of_one(coordinator, clock)
    assert coordinator.validate_commit("g", a.generation_id, a.member_id) == ErrorCode.NONE
    assert coordinator.validate_commit("g", -1, "") == ErrorCode.UNKNOWN_MEMBER_ID  # group is active
    assert coordinator.validate_commit("g", a.generation_id + 1, a.member_id) == ErrorCode.ILLEGAL_GENERATION
    coordinator.leave_group("g", [a.member_id])
    assert coordinator.validate_commit("g", -1, "") == ErrorCode.NONE


def test_follower_rejoin_in_stable_keeps_generation(coordinator: GroupCoordinator, clock: Clock) -> None:
    first, second = join(coordinator), join(coordinator)
    clock.advance(DELAY_MS)
    coordinator.tick()
    a, b = first.join, second.join
    sync(coordinator, b)
    sync(coordinator, a, {})
    again = join(coordinator, b.member_id).join
    assert again.generation_id == 1
    assert state(coordinator) == GroupState.STABLE


def test_close_answers_parked_requests(coordinator: GroupCoordinator) -> None:
    inbox = join(coordinator)
    coordinator.close()
    assert inbox.join.error == ErrorCode.COORDINATOR_NOT_AVAILABLE


def test_describe_and_list(coordinator: GroupCoordinator, clock: Clock) -> None:
    a = form_group_of_one(coordinator, clock)
    described = coordinator.describe("g")
    assert (described.state, described.protocol_type, described.protocol_name) == (
        GroupState.STABLE,
        "consumer",
        "range",
    )
    assert described.members[0].assignment == b"A"
    assert described.members[0].member_id == a.member_id
    assert coordinator.describe("nope").state == GroupState.DEAD
    assert [g.group_id for g in coordinator.groups()] == ["g"]
