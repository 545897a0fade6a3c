"""Classic Kafka group coordinator (JoinGroup / SyncGroup / Heartbeat / LeaveGroup), in memory.

States and transitions (Kafka's ``GroupMetadata``)::

    Empty --join--> PreparingRebalance --all members rejoined | rebalance timeout-->
        CompletingRebalance --leader's SyncGroup--> Stable
    Stable / CompletingRebalance --join, leave, expiry--> PreparingRebalance
    any state --last member gone--> Empty (generation + 1)

* A group leaving Empty waits ``initial_rebalance_delay_ms`` (extended by each new member,
  bounded by the rebalance timeout) so the first members land in one generation.
* Session expiry runs in **every** state; a member is kept alive while it has a JoinGroup or
  SyncGroup parked here.
* A join completes when every member has rejoined or the rebalance timeout (the largest
  member's) passes; members that did not rejoin are evicted. Only the leader receives the
  member list with metadata. CompletingRebalance also has a deadline: members that never
  sent SyncGroup are evicted and the group rebalances.
* "Simple" consumers (``assign()`` + commit) commit with generation -1 while the group has no
  members.

Pure and single-threaded: time comes from an injected ``clock`` (milliseconds), nothing
blocks; parked joins and syncs are answered through callbacks, and timers advance when the
owner calls :meth:`GroupCoordinator.tick`. Membership is not persisted (offsets are).
"""

from __future__ import annotations

import enum
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ingest_api.kafka.errors import ErrorCode

Clock = Callable[[], int]  # milliseconds, monotonic


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    #: Kafka ``group.initial.rebalance.delay.ms``.
    initial_rebalance_delay_ms: int = 3000
    #: Kafka ``group.min.session.timeout.ms`` / ``group.max.session.timeout.ms``.
    min_session_timeout_ms: int = 1000
    max_session_timeout_ms: int = 1_800_000


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: GroupState
    protocol_type: str
    protocol_name: str
    members: tuple[MemberDescription, ...]


JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[SyncResult], None]


@dataclass(slots=True)
class _Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    last_heartbeat_ms: int
    assignment: bytes = b""
    join_callback: JoinCallback | None = None
    sync_callback: SyncCallback | None = None

    def metadata_for(self, protocol_name: str | None) -> bytes:
        return next((meta for name, meta in self.protocols if name == protocol_name), b"")

    @property
    def awaiting(self) -> bool:
        return self.join_callback is not None or self.sync_callback is not None


@dataclass(slots=True)
class _Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, _Member] = field(default_factory=dict)
    join_deadline_ms: int = 0
    initial_delay_until_ms: int | None = None
    sync_deadline_ms: int = 0


class GroupCoordinator:
    """All classic groups of one broker. Not thread-safe: drive it from one event loop."""

    def __init__(self, clock: Clock, config: CoordinatorConfig | None = None) -> None:
        self._clock = clock
        self._config = config or CoordinatorConfig()
        self._groups: dict[str, _Group] = {}

    # --- JoinGroup ---------------------------------------------------------------------------
    def join_group(self, request: JoinRequest, respond: JoinCallback) -> None:
        """Add or refresh a member; ``respond`` is called now or when the rebalance completes."""
        error = self._validate_join(request)
        if error != ErrorCode.NONE:
            respond(JoinResult(error, request.member_id))
            return
        group = self._groups.setdefault(request.group_id, _Group(request.group_id))
        if request.member_id and request.member_id not in group.members:
            respond(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, request.member_id))
            return
        now = self._clock()
        if not request.member_id:
            member = _Member(
                member_id=f"{request.client_id or 'member'}-{uuid.uuid4()}",
                client_id=request.client_id,
                client_host=request.client_host,
                session_timeout_ms=request.session_timeout_ms,
                rebalance_timeout_ms=request.rebalance_timeout_ms,
                protocols=request.protocols,
                last_heartbeat_ms=now,
            )
            group.members[member.member_id] = member
            group.protocol_type = request.protocol_type
            self._park_join(member, respond)
            if group.state == GroupState.PREPARING_REBALANCE and group.initial_delay_until_ms is not None:
                group.initial_delay_until_ms = min(
                    now + self._config.initial_rebalance_delay_ms, group.join_deadline_ms
                )
            elif group.state != GroupState.PREPARING_REBALANCE:
                self._prepare_rebalance(group, initial=group.state == GroupState.EMPTY)
        else:
            member = group.members[request.member_id]
            changed = member.protocols != request.protocols
            member.protocols = request.protocols
            member.session_timeout_ms = request.session_timeout_ms
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
            member.last_heartbeat_ms = now
            in_sync_phase = group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE)
            if in_sync_phase and not changed and group.leader_id != request.member_id:
                respond(self._current_generation(group, member))
                return
            self._park_join(member, respond)
            if group.state != GroupState.PREPARING_REBALANCE:
                self._prepare_rebalance(group, initial=False)
        self._maybe_complete_join(group)

    def _validate_join(self, request: JoinRequest) -> ErrorCode:
        if not request.group_id:
            return ErrorCode.INVALID_GROUP_ID
        if not (
            self._config.min_session_timeout_ms
            <= request.session_timeout_ms
            <= self._config.max_session_timeout_ms
        ):
            return ErrorCode.INVALID_SESSION_TIMEOUT
        if not request.protocols or not request.protocol_type:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        group = self._groups.get(request.group_id)
        if group is None or not group.members:
            return ErrorCode.NONE
        others = [m for mid, m in group.members.items() if mid != request.member_id]
        if not others:
            return ErrorCode.NONE
        if request.protocol_type != group.protocol_type:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        common = set.intersection(*({name for name, _ in m.protocols} for m in others))
        if not common & {name for name, _ in request.protocols}:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        return ErrorCode.NONE

    def _park_join(self, member: _Member, respond: JoinCallback) -> None:
        previous = member.join_callback
        member.join_callback = respond
        if previous is not None:
            previous(JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))

    def _current_generation(self, group: _Group, member: _Member) -> JoinResult:
        members: tuple[tuple[str, bytes], ...] = ()
        if group.leader_id == member.member_id:
            members = tuple(
                (m.member_id, m.metadata_for(group.protocol_name)) for m in group.members.values()
            )
        return JoinResult(
            ErrorCode.NONE,
            member.member_id,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            members,
        )

    def _prepare_rebalance(self, group: _Group, *, initial: bool) -> None:
        now = self._clock()
        if group.state == GroupState.COMPLETING_REBALANCE:
            self._fail_pending_syncs(group, ErrorCode.REBALANCE_IN_PROGRESS)
        group.state = GroupState.PREPARING_REBALANCE
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        group.join_deadline_ms = now + timeout
        group.initial_delay_until_ms = (
            now + min(self._config.initial_rebalance_delay_ms, timeout) if initial else None
        )

    def _fail_pending_syncs(self, group: _Group, error: ErrorCode) -> None:
        for member in group.members.values():
            callback, member.sync_callback = member.sync_callback, None
            if callback is not None:
                callback(SyncResult(error))

    def _maybe_complete_join(self, group: _Group) -> None:
        if group.state != GroupState.PREPARING_REBALANCE:
            return
        now = self._clock()
        if now >= group.join_deadline_ms:
            self._complete_join(group)
            return
        if group.initial_delay_until_ms is not None and now < group.initial_delay_until_ms:
            return
        if all(m.join_callback is not None for m in group.members.values()):
            self._complete_join(group)

    def _complete_join(self, group: _Group) -> None:
        for member_id in [mid for mid, m in group.members.items() if m.join_callback is None]:
            del group.members[member_id]
        group.generation_id += 1
        group.initial_delay_until_ms = None
        if not group.members:
            self._become_empty(group)
            return
        group.protocol_name = self._select_protocol(group)
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        now = self._clock()
        group.state = GroupState.COMPLETING_REBALANCE
        group.sync_deadline_ms = now + max(m.rebalance_timeout_ms for m in group.members.values())
        for member in group.members.values():
            member.last_heartbeat_ms = now
            member.assignment = b""
            callback, member.join_callback = member.join_callback, None
            if callback is not None:
                callback(self._current_generation(group, member))

    @staticmethod
    def _select_protocol(group: _Group) -> str:
        """Kafka's vote: among protocols every member supports, each member's first choice."""
        members = list(group.members.values())
        candidates = set.intersection(*({name for name, _ in m.protocols} for m in members))
        votes: Counter[str] = Counter()
        for member in members:
            votes[next(name for name, _ in member.protocols if name in candidates)] += 1
        return votes.most_common(1)[0][0]

    def _become_empty(self, group: _Group) -> None:
        group.state = GroupState.EMPTY
        group.protocol_name = None
        group.leader_id = None

    # --- SyncGroup / Heartbeat / LeaveGroup ----------------------------------------------------
    def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        assignments: Mapping[str, bytes],
        respond: SyncCallback,
    ) -> None:
        group = self._groups.get(group_id)
        error = self._check_member(group, generation_id, member_id)
        if error != ErrorCode.NONE or group is None:
            respond(SyncResult(error))
            return
        if group.state == GroupState.PREPARING_REBALANCE:
            respond(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
            return
        member = group.members[member_id]
        member.last_heartbeat_ms = self._clock()
        if group.state == GroupState.STABLE:
            respond(SyncResult(ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment))
            return
        member.sync_callback = respond
        if member_id == group.leader_id:
            for mid, m in group.members.items():
                m.assignment = assignments.get(mid, b"")
            group.state = GroupState.STABLE
            for m in group.members.values():
                callback, m.sync_callback = m.sync_callback, None
                if callback is not None:
                    callback(
                        SyncResult(ErrorCode.NONE, group.protocol_type, group.protocol_name, m.assignment)
                    )

    def _check_member(self, group: _Group | None, generation_id: int, member_id: str) -> ErrorCode:
        if group is None or member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    def heartbeat(self, group_id: str, generation_id: int, member_id: str) -> ErrorCode:
        group = self._groups.get(group_id)
        error = self._check_member(group, generation_id, member_id)
        if error != ErrorCode.NONE or group is None:
            return error
        group.members[member_id].last_heartbeat_ms = self._clock()
        if group.state == GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave_group(self, group_id: str, member_ids: Sequence[str]) -> list[ErrorCode]:
        """Remove members; one error per requested member id."""
        group = self._groups.get(group_id)
        results: list[ErrorCode] = []
        for member_id in member_ids:
            if group is None or member_id not in group.members:
                results.append(ErrorCode.UNKNOWN_MEMBER_ID)
                continue
            self._remove_member(group, member_id)
            results.append(ErrorCode.NONE)
        return results

    def _remove_member(self, group: _Group, member_id: str) -> None:
        member = group.members.pop(member_id)
        if member.join_callback is not None:
            member.join_callback(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
        if member.sync_callback is not None:
            member.sync_callback(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        if group.leader_id == member_id:
            group.leader_id = None
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, initial=False)
        if group.state == GroupState.PREPARING_REBALANCE:
            if group.members:
                self._maybe_complete_join(group)
            else:
                group.generation_id += 1
                self._become_empty(group)

    # --- OffsetCommit validation ---------------------------------------------------------------
    def validate_commit(self, group_id: str, generation_id: int, member_id: str) -> ErrorCode:
        group = self._groups.get(group_id)
        if generation_id < 0 and (group is None or not group.members):
            return ErrorCode.NONE
        if group is None or member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state == GroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        group.members[member_id].last_heartbeat_ms = self._clock()
        return ErrorCode.NONE

    # --- timers --------------------------------------------------------------------------------
    def tick(self) -> None:
        """Expire sessions, finish delayed joins, enforce rebalance deadlines (call often)."""
        now = self._clock()
        for group in list(self._groups.values()):
            expired = [
                mid
                for mid, m in group.members.items()
                if not m.awaiting and now - m.last_heartbeat_ms > m.session_timeout_ms
            ]
            for member_id in expired:
                if member_id in group.members:
                    self._remove_member(group, member_id)
            if group.state == GroupState.PREPARING_REBALANCE:
                self._maybe_complete_join(group)
            elif group.state == GroupState.COMPLETING_REBALANCE and now >= group.sync_deadline_ms:
                for member_id in [mid for mid, m in group.members.items() if m.sync_callback is None]:
                    self._remove_member(group, member_id)

    # --- introspection -------------------------------------------------------------------------
    def describe(self, group_id: str) -> GroupDescription:
        group = self._groups.get(group_id)
        if group is None:
            return GroupDescription(group_id, GroupState.DEAD, "", "", ())
        members = tuple(
            MemberDescription(
                m.member_id, m.client_id, m.client_host, m.metadata_for(group.protocol_name), m.assignment
            )
            for m in group.members.values()
        )
        return GroupDescription(
            group_id, group.state, group.protocol_type or "", group.protocol_name or "", members
        )

    def groups(self) -> list[GroupDescription]:
        return [self.describe(group_id) for group_id in self._groups]

    def close(self) -> None:
        """Answer every parked request with COORDINATOR_NOT_AVAILABLE (broker shutdown)."""
        for group in self._groups.values():
            for member in group.members.values():
                join, member.join_callback = member.join_callback, None
                if join is not None:
                    join(JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member.member_id))
            self._fail_pending_syncs(group, ErrorCode.COORDINATOR_NOT_AVAILABLE)
