"""A broker's membership in the cluster: it registers itself, keeps the routes, places topics.

The ZooKeeper tree, relative to the ``--cluster`` chroot (values: :mod:`cluster.model`)::

    /member_ids/m-NNNNNNNNNN              PERSISTENT_SEQUENTIAL  one per store directory ever joined
    /brokers/<name>                       PERSISTENT  the last registration of that name
    /brokers/<name>/members/<member_id>   EPHEMERAL   a live broker process
    /topics/<topic>                       PERSISTENT  {"queues": [owner of queue 0, ...]}, CAS-written

:class:`ClusterNode` joins (refusing a second live broker of the same name), watches brokers and
topics, and swaps in a new immutable :class:`~cluster.model.ClusterView` at every change, so the
doors read routes without a lock or a round trip. Watch callbacks run on the engine's thread
and only update memory; listeners (the local store's topic sync) run on the node's own worker
thread. Route changes (topic create/grow) are versioned writes: two brokers can never both
claim a queue.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import msgspec

from cluster.config import ClusterConfig
from cluster.coordination import (
    Coordination,
    NodeData,
    NodeExists,
    SessionState,
    VersionConflict,
)
from cluster.errors import BrokerNameTaken, CoordinationUnavailable, InvalidPlacement
from cluster.group_state import CorruptGroupState, GroupState
from cluster.identity import load_or_allocate
from cluster.model import BrokerGroup, ClusterView, CorruptRoute, MemberInfo, TopicPlacement
from cluster.placement import check_pinned, grow_placement, placeable, validate_routed
from store import wall_clock_ms

log = logging.getLogger("sparkmq.cluster")

BROKERS = "/brokers"
TOPICS = "/topics"
#: Cluster-wide settings kept outside any store (producer groups' check URLs, consumer groups'
#: retry settings): ``/settings/<kind>/<name>`` = a JSON document, mirrored by every broker.
SETTINGS = "/settings"
#: Attempts of a topic change that lost a version race before giving up.
MAX_CAS_ATTEMPTS = 20
#: How long a write of ours may take to show in our own view before we stop waiting.
OWN_WRITE_VISIBLE_S = 5.0
#: How long :meth:`ClusterNode.learn_topic` trusts that ZooKeeper has no such topic.
UNKNOWN_TOPIC_RECHECK_S = 1.0

ViewListener = Callable[[ClusterView], None]
#: ``(name, document or None when deleted)``, on the node's worker thread.
SettingListener = Callable[[str, "dict[str, Any] | None"], None]


def member_path(name: str, member_id: int) -> str:
    return f"{BROKERS}/{name}/members/{member_id}"


@dataclass(frozen=True, slots=True)
class ClusterHealth:
    """What ``/healthz`` and ``/metrics`` report of the cluster layer."""

    session: SessionState
    registered: bool
    #: Problems found that need an operator (never only logged): e.g. a queue with data here
    #: that the routes give to another broker.
    warnings: tuple[str, ...] = ()


class ClusterNode:
    """This broker's session with the cluster. ``start()`` joins; ``close()`` leaves."""

    def __init__(self, config: ClusterConfig, coordination: Coordination, config_dir: Path) -> None:
        self.config = config.validate()
        self.name = config.broker_name
        self._coordination = coordination
        self._config_dir = config_dir
        self._lock = threading.Lock()
        self._members: dict[str, dict[int, MemberInfo]] = {}
        self._last_known: dict[str, MemberInfo] = {}
        self._placements: dict[str, TopicPlacement] = {}
        self._unknown_topics: dict[str, float] = {}  # topic -> when to ask ZooKeeper again
        self._states: dict[str, GroupState] = {}
        self._watched_names: set[str] = set()
        self._watched_members: set[tuple[str, int]] = set()
        self._watched_topics: set[str] = set()
        self._view = ClusterView()
        self._listeners: list[ViewListener] = []
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cluster-node")
        self._registered = False
        self._closed = False
        self._session_lost = False
        self._warnings: list[str] = []
        self.member: MemberInfo | None = None
        self._session_listeners: list[Callable[[SessionState], None]] = []
        #: The last transient failure (a role change that will be retried), for GET /cluster.
        self.last_error = ""

    # -- joining --------------------------------------------------------------------------

    def replication_peer_allowed(self, member_id: int, identity: str) -> bool:
        """Whether a replication peer whose certificate names ``identity`` may replicate as
        ``member_id``: a registered (live) member of this broker's group that registered that
        identity, and no other member claims (:data:`store.ha.tls.IdentityCheck`)."""
        member = self.view.member(member_id)
        if member is None or member.broker_name != self.name or member.tls_identity != identity:
            return False
        claims = [m for g in self.view.groups.values() for m in g.members if m.tls_identity == identity]
        return len(claims) == 1  # an identity two members claim proves neither

    def start(self) -> None:
        """Connect, take this store's member id, register, and load the routes. Raises
        :class:`CoordinationUnavailable`, :class:`BrokerNameTaken` or
        :class:`~cluster.errors.StoreBelongsElsewhere`; nothing stays registered on failure."""
        coordination = self._coordination
        coordination.start(self.config.connect_timeout_ms / 1000)
        try:
            identity = load_or_allocate(self._config_dir, self.name, self.config.address.chroot, coordination)
            self.member = MemberInfo(
                broker_name=self.name,
                member_id=identity.member_id,
                http=self.config.http_url,
                store=f"{self.config.advertise_host}:{self.config.http_port}",
                started_ms=wall_clock_ms(),
                kafka=self.config.kafka_address,
                remoting=self.config.remoting_address,
                ha=self.config.ha_address,
                tls_identity=self.config.ha_tls.identity() if self.config.ha_tls is not None else None,
            )
            self._register()
            coordination.add_state_listener(self._on_session)
            coordination.watch_children(BROKERS, self._on_broker_names)
            coordination.watch_children(TOPICS, self._on_topic_names)
        except BaseException:
            coordination.stop()
            raise
        log.info("broker %s joined %s as member %d", self.name, self.config.address, identity.member_id)

    def _register(self) -> None:
        """Create this member's ephemeral node; refuse a second live broker of this name."""
        member = self.member
        assert member is not None
        coordination = self._coordination
        path = member_path(self.name, member.member_id)
        deadline = time.monotonic() + self.config.session_timeout_ms / 1000 * 2 + 2
        while True:
            try:
                coordination.create(path, member.to_json(), ephemeral=True)
                break
            except NodeExists:
                previous = coordination.get(path)
                if previous is not None and previous.ephemeral_owner == coordination.session_id:
                    break  # ours already (a re-registration racing a reconnect)
                if time.monotonic() > deadline:
                    raise BrokerNameTaken(
                        f"member {member.member_id} of broker {self.name!r} is registered by another live "
                        f"process ({_describe(previous)}): is this store directory served twice?"
                    ) from None
                log.info("waiting for the previous session of member %d to expire", member.member_id)
                time.sleep(0.25)
        others = [
            other
            for other in coordination.children(f"{BROKERS}/{self.name}/members")
            if other != str(member.member_id)
        ]
        if others and self.config.ha_port is None:
            live = coordination.get(f"{BROKERS}/{self.name}/members/{others[0]}")
            coordination.delete(path)
            raise BrokerNameTaken(
                f"broker name {self.name!r} is already live ({_describe(live)}); a second broker with "
                "the same name is refused: give this one another --broker-name"
            )
        coordination.set(f"{BROKERS}/{self.name}", member.to_json(), -1)
        self._registered = True

    def close(self) -> None:
        """Leave the cluster: the member node goes at once (not after the session timeout)."""
        if self._closed:
            return
        self._closed = True
        self._worker.shutdown(wait=True, cancel_futures=True)
        self._coordination.stop()

    # -- session --------------------------------------------------------------------------

    @property
    def session(self) -> SessionState:
        return self._coordination.state

    def add_session_listener(self, listener: Callable[[SessionState], None]) -> None:
        """``listener(state)`` on ZooKeeper's thread at every session change (must not block)."""
        self._session_listeners.append(listener)

    def _on_session(self, state: SessionState) -> None:
        if state is SessionState.LOST:
            self._session_lost = True
            self._registered = False
        elif state is SessionState.CONNECTED and self._session_lost and not self._closed:
            self._session_lost = False
            self._submit(self._reregister)  # queued before what the listeners queue
        for listener in list(self._session_listeners):
            listener(state)

    def _reregister(self) -> None:
        try:
            self._register()
            log.warning("broker %s re-registered after its ZooKeeper session expired", self.name)
        except Exception as exc:
            self._warn(f"re-registration after a lost session failed: {exc}")

    def health(self) -> ClusterHealth:
        with self._lock:
            warnings = tuple(self._warnings)
        return ClusterHealth(session=self.session, registered=self._registered, warnings=warnings)

    def _warn(self, message: str) -> None:
        log.error("cluster: %s", message)
        with self._lock:
            if message not in self._warnings:
                self._warnings.append(message)

    def warn_transient(self, message: str) -> None:
        """A failure that the next event retries: logged and kept as :attr:`last_error`."""
        log.warning("cluster: %s", message)
        self.last_error = message

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` on the node's worker thread (after what is queued)."""
        self._submit(job)

    def warn(self, message: str) -> None:
        """Record a problem that needs an operator; shown by ``/healthz`` and ``GET /cluster``."""
        self._warn(message)

    # -- the view -------------------------------------------------------------------------

    @property
    def serving(self) -> bool:
        """Whether this member serves its broker name's queues now: always without replication;
        in a replica group, only while it is the group's live master. A slave forwards writes
        (and redirects reads) to its master; nor does a replica whose view has no group state
        yet (just restarted: it answered OffsetFetch from its stale log, docs/replication.md)."""
        member = self.member
        if member is None:
            return False
        group = self._view.group(self.name)
        if group.state is None:
            return self.config.ha_port is None
        return group.master_id == member.member_id

    @property
    def view(self) -> ClusterView:
        """The latest snapshot (immutable; read without a lock)."""
        return self._view

    def add_view_listener(self, listener: ViewListener) -> None:
        """``listener(view)`` runs on the node's worker thread now and after every change."""
        self._listeners.append(listener)
        view = self._view
        self._submit(lambda: listener(view))

    def _submit(self, job: Callable[[], None]) -> None:
        if not self._closed:
            with contextlib.suppress(RuntimeError):  # shut down meanwhile
                self._worker.submit(job)

    def _publish(self) -> None:
        """Build a new view from the watched state (caller holds the lock) and notify."""
        groups = {}
        for name in set(self._members) | set(self._last_known):
            members = tuple(sorted(self._members.get(name, {}).values(), key=lambda m: m.member_id))
            state = self._states.get(name)
            if state is None:  # a broker without replicas: its one member serves its queues
                master, epoch = (members[0].member_id if len(members) == 1 else None), 0
            else:  # a replica group: the elected master, while its session lives
                live = {m.member_id for m in members}
                master, epoch = (state.master if state.master in live else None), state.epoch
            groups[name] = BrokerGroup(name, members, master, epoch, self._last_known.get(name), state)
        view = ClusterView(groups=groups, topics=dict(self._placements))
        self._view = view
        for listener in list(self._listeners):
            self._submit(lambda listener=listener: listener(view))  # type: ignore[misc]

    def _on_broker_names(self, names: list[str]) -> None:
        for name in names:
            with self._lock:
                if name in self._watched_names:
                    continue
                self._watched_names.add(name)
            self._coordination.watch_data(f"{BROKERS}/{name}", partial(self._on_last_known, name))
            self._coordination.watch_data(f"{BROKERS}/{name}/state", partial(self._on_state, name))
            self._coordination.watch_children(f"{BROKERS}/{name}/members", partial(self._on_member_ids, name))

    def _on_last_known(self, name: str, node: NodeData | None) -> None:
        member = _decode_member(node)
        with self._lock:
            if member is not None:
                self._last_known[name] = member
            self._publish()

    def _on_state(self, name: str, node: NodeData | None) -> None:
        state = None
        if node is not None and node.data:
            try:
                state = GroupState.from_json(node.data, node.version)
            except CorruptGroupState as exc:
                self._warn(str(exc))
        with self._lock:
            if state is None:
                self._states.pop(name, None)
            else:
                self._states[name] = state
            self._publish()

    def _on_member_ids(self, name: str, ids: list[str]) -> None:
        for text in ids:
            if not text.isdigit():
                continue
            key = (name, int(text))
            with self._lock:
                if key in self._watched_members:
                    continue
                self._watched_members.add(key)
            self._coordination.watch_data(member_path(name, int(text)), partial(self._on_member, key))

    def _on_member(self, key: tuple[str, int], node: NodeData | None) -> None:
        name, member_id = key
        member = _decode_member(node)
        with self._lock:
            members = self._members.setdefault(name, {})
            if member is None:
                members.pop(member_id, None)
            else:
                members[member_id] = member
            self._publish()

    def _on_topic_names(self, names: list[str]) -> None:
        for topic in names:
            with self._lock:
                if topic in self._watched_topics:
                    continue
                self._watched_topics.add(topic)
            self._coordination.watch_data(f"{TOPICS}/{topic}", partial(self._on_topic, topic))

    def _on_topic(self, topic: str, node: NodeData | None) -> None:
        placement: TopicPlacement | None = None
        if node is not None:
            try:
                placement = TopicPlacement.from_json(topic, node.data, node.version)
            except CorruptRoute as exc:
                self._warn(str(exc))
        with self._lock:
            if placement is None:
                self._placements.pop(topic, None)
            else:
                self._placements[topic] = placement
            self._publish()

    # -- placing topics -------------------------------------------------------------------

    def _require_connected(self, what: str) -> None:
        if self.session is not SessionState.CONNECTED:
            raise CoordinationUnavailable(
                f"{what} needs ZooKeeper, and the session is {self.session}: produce and pull of "
                "existing queues keep working; retry the change when ZooKeeper is back"
            )

    def create_or_grow_topic(
        self, topic: str, queues: int, brokers: Sequence[str] | None = None, *, grow: bool = True
    ) -> TopicPlacement:
        """Create ``topic`` with ``queues`` queue ids spread over the live brokers (or over
        ``brokers``), or grow it to that many; existing ids never move. ``grow=False``: an
        existing topic is left as it is. Blocking. Raises :class:`InvalidPlacement`,
        :class:`CoordinationUnavailable`."""
        validate_routed(topic)
        self._require_connected(f"creating or growing topic {topic!r}")
        path = f"{TOPICS}/{topic}"
        for _ in range(MAX_CAS_ATTEMPTS):
            node = self._coordination.get(path)
            current = None if node is None else TopicPlacement.from_json(topic, node.data, node.version)
            if current is not None and not grow:
                return self._learned(current)  # even where this member's watch has not fired yet
            owners = grow_placement(current.owners if current else (), queues, self._candidates(brokers))
            if current is not None and owners == current.owners:
                return current
            wanted = TopicPlacement(topic, owners)
            try:
                if current is None:
                    self._coordination.create(path, wanted.to_json())
                else:
                    self._coordination.set(path, wanted.to_json(), current.version)
            except (NodeExists, VersionConflict):
                continue  # someone else changed it first: re-read and decide again
            return self._wait_visible(topic, len(owners))
        raise CoordinationUnavailable(f"topic {topic!r}: too many concurrent changes, retry")

    def create_topic(
        self, topic: str, queues: int, brokers: Sequence[str] | None = None
    ) -> TopicPlacement | None:
        """Create ``topic`` as :meth:`create_or_grow_topic` does; ``None`` when it exists
        already, in ZooKeeper, whatever this member's view shows (Kafka's CreateTopics)."""
        validate_routed(topic)
        self._require_connected(f"creating topic {topic!r}")
        owners = grow_placement((), queues, self._candidates(brokers))
        try:
            self._coordination.create(f"{TOPICS}/{topic}", TopicPlacement(topic, owners).to_json())
        except NodeExists:
            return None
        return self._wait_visible(topic, len(owners))

    def _candidates(self, brokers: Sequence[str] | None) -> list[str]:
        """The brokers new queue ids go to: ``brokers`` (checked), else the live ones."""
        view = self.view
        if brokers is not None:
            return check_pinned(list(brokers), list(view.groups), view.live_brokers())
        return list(view.live_brokers())

    def learn_topic(self, topic: str) -> TopicPlacement | None:
        """The placement of ``topic``, read from ZooKeeper when the view lacks it (another member
        just created it), or None; a miss is asked again after :data:`UNKNOWN_TOPIC_RECHECK_S`."""
        placement = self.view.placement(topic)
        if placement is not None or self.session is not SessionState.CONNECTED:
            return placement
        if not placeable(topic):
            return None  # a name the cluster never places (a broker's own system topic)
        now = time.monotonic()
        if now < self._unknown_topics.get(topic, 0.0):
            return None
        node = self._coordination.get(f"{TOPICS}/{topic}")
        if node is None:
            self._unknown_topics[topic] = now + UNKNOWN_TOPIC_RECHECK_S
            return None
        self._unknown_topics.pop(topic, None)
        return self._learned(TopicPlacement.from_json(topic, node.data, node.version))

    def _learned(self, placement: TopicPlacement) -> TopicPlacement:
        """Show ``placement``, just read from ZooKeeper, in the view unless the watch has
        brought it (or a newer one) meanwhile; the view's placement of the topic."""
        with self._lock:
            known = self._placements.get(placement.topic)
            if known is None or known.version < placement.version:
                self._placements[placement.topic] = placement
                self._publish()
        return self.view.placement(placement.topic) or placement

    def _wait_visible(self, topic: str, queues: int) -> TopicPlacement:
        deadline = time.monotonic() + OWN_WRITE_VISIBLE_S
        while True:
            placement = self.view.placement(topic)
            if placement is not None and placement.queue_count >= queues:
                return placement
            if time.monotonic() > deadline:
                raise CoordinationUnavailable(f"topic {topic!r} was written but its watch has not fired")
            time.sleep(0.005)

    def ensure_topic(self, topic: str, queues: int | None = None) -> TopicPlacement:
        """The placement of ``topic``, creating it (``queues`` or the default count over the
        live brokers) when it does not exist yet. A topic this member's view does not show yet
        (its watch has not fired: another member has just created it) is never grown."""
        placement = self.view.placement(topic)
        if placement is not None:
            return placement
        return self.create_or_grow_topic(topic, queues or self.config.default_queues, grow=False)

    def adopt_topic(self, topic: str, queues: int) -> bool:
        """Register a topic found in this broker's store but unknown to the cluster, with every
        queue here (its data is here). False when the cluster knows it already."""
        self._require_connected(f"adopting topic {topic!r}")
        try:
            self._coordination.create(
                f"{TOPICS}/{topic}", TopicPlacement(topic, (self.name,) * queues).to_json()
            )
        except NodeExists:
            return False
        self._wait_visible(topic, queues)
        return True

    def delete_topic(self, topic: str) -> bool:
        """Remove the topic's route (each owner then drops its queues). False when unknown."""
        self._require_connected(f"deleting topic {topic!r}")
        node = self._coordination.get(f"{TOPICS}/{topic}")
        if node is None:
            return False
        self._coordination.delete(f"{TOPICS}/{topic}", node.version)
        deadline = time.monotonic() + OWN_WRITE_VISIBLE_S
        while self.view.placement(topic) is not None and time.monotonic() < deadline:
            time.sleep(0.005)  # answered once our own routes no longer have it
        return True

    def own_queues(self, topic: str, count: int) -> tuple[int, ...]:
        """This broker's queue ids of ``topic``, first placing ``count`` new ones here when it
        has none (a broker's own retry and dead-letter queues, as RocketMQ keeps one per broker).
        Blocking."""
        placement = self.view.placement(topic)
        mine = placement.queues_of(self.name) if placement else ()
        if mine:
            return mine
        current = placement.queue_count if placement else 0
        grown = self.create_or_grow_topic(topic, current + count, [self.name])
        return grown.queues_of(self.name)

    # -- replica groups -------------------------------------------------------------------

    def read_group_state(self) -> GroupState | None:
        """This broker's group state as ZooKeeper has it now (not the cached view). Blocking."""
        node = self._coordination.get(f"{BROKERS}/{self.name}/state")
        return None if node is None else GroupState.from_json(node.data, node.version)

    def write_group_state(self, state: GroupState, expected: GroupState | None) -> bool:
        """Replace ``expected`` (``None``: no state yet) by ``state`` in one versioned write;
        False when another writer got there first (nothing changed). Blocking."""
        self._require_connected(f"changing the state of group {self.name!r}")
        path = f"{BROKERS}/{self.name}/state"
        try:
            if expected is None:
                self._coordination.create(path, state.to_json())
            else:
                self._coordination.set(path, state.to_json(), expected.version)
        except (NodeExists, VersionConflict):
            return False
        return True

    def publish_progress(self, last_epoch: int, max_offset: int) -> None:
        """Put this replica's last epoch and max offset on its member node (what an election
        ranks candidates by). Blocking."""
        member = self.member
        assert member is not None
        self.member = replace(member, last_epoch=last_epoch, max_offset=max_offset)
        self._coordination.set(member_path(self.name, member.member_id), self.member.to_json(), -1)

    # -- cluster-wide settings ------------------------------------------------------------

    def put_setting(self, kind: str, name: str, document: dict[str, Any]) -> None:
        """Write a cluster-wide setting; every broker's :meth:`watch_settings` sees it."""
        self._require_connected(f"changing {kind} {name!r}")
        path = f"{SETTINGS}/{kind}/{name}"
        data = msgspec.json.encode(document)
        try:
            self._coordination.create(path, data)
        except NodeExists:
            self._coordination.set(path, data, -1)

    def delete_setting(self, kind: str, name: str) -> None:
        self._require_connected(f"deleting {kind} {name!r}")
        self._coordination.delete(f"{SETTINGS}/{kind}/{name}")

    def watch_settings(self, kind: str, listener: SettingListener) -> None:
        """``listener(name, document)`` now for every setting of ``kind`` and at every change
        (``None`` once deleted), on the node's worker thread."""
        watched: set[str] = set()

        def on_value(name: str, node: NodeData | None) -> bool | None:
            document = None
            if node is not None and node.data:
                try:
                    document = msgspec.json.decode(node.data)
                except msgspec.DecodeError:
                    self._warn(f"setting {kind}/{name} is not JSON: ignored")
                    return None
            self._submit(lambda: listener(name, document))
            return None

        def on_names(names: list[str]) -> bool | None:
            for name in names:
                if name not in watched:
                    watched.add(name)
                    self._coordination.watch_data(f"{SETTINGS}/{kind}/{name}", partial(on_value, name))
            return None

        self._coordination.watch_children(f"{SETTINGS}/{kind}", on_names)


def _decode_member(node: NodeData | None) -> MemberInfo | None:
    if node is None or not node.data:
        return None
    try:
        return MemberInfo.from_json(node.data)
    except CorruptRoute:
        log.exception("ignoring an undecodable member record")
        return None


def _describe(node: NodeData | None) -> str:
    member = _decode_member(node)
    return f"member {member.member_id} at {member.http}" if member else "unknown address"


__all__ = ["ClusterHealth", "ClusterNode", "InvalidPlacement"]
