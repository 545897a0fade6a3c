"""Joining the cluster for the broker's lifetime (``sparkmq serve --cluster``).

Entered by the app's lifespan right after the store opens and left right before it closes:
the member node appears once the store is ready to serve and disappears (at once, not after
the session timeout) on a clean stop. A refusal to join (a second broker of the same name, a
store directory of another broker, ZooKeeper unreachable) fails the start with its message.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from broker.forwarding import ForwardCoalescer
from broker.peers import PeerClient
from broker.replication import SlaveMetadataFollower
from broker.routing import QueuePlanner
from broker.state import Broker
from broker.threads import run_blocking
from broker.transactions import TransactionBoard
from cluster import ClusterNode, connect
from cluster.local_sync import LocalTopicSync
from cluster.replica_group import ReplicaGroup
from store.ha import HAConfig, ReplicaController, ReplicationMode

#: Setting kinds in ZooKeeper (``ClusterNode.put_setting``) and what they mirror here.
PRODUCER_GROUPS = "producer-groups"
CONSUMER_GROUPS = "consumer-groups"


log = logging.getLogger("sparkmq.cluster")


def _mirror_settings(broker: Broker, node: ClusterNode) -> None:
    """Keep this broker's copies of the cluster-wide group settings in step with ZooKeeper: the
    check-back URL of a producer group is needed by whichever broker holds a transaction's
    halves, a consumer group's retry settings by whichever broker receives its send-backs."""
    board = broker.operators
    if board is None:
        return
    if board.transactions is not None:
        groups = board.transactions.groups

        def producer_group(name: str, document: dict[str, Any] | None) -> None:
            if document is None:
                groups.delete(name)
            elif (groups.get(name) or {}).get("check_url") != document["check_url"]:
                groups.put(name, str(document["check_url"]))

        node.watch_settings(PRODUCER_GROUPS, producer_group)
    configs = board.group_configs
    if configs is not None:

        def consumer_group(name: str, document: dict[str, Any] | None) -> None:
            if document is not None:
                configs.put(name, document.get("max_reconsume_times"), document.get("retry_queues"))

        node.watch_settings(CONSUMER_GROUPS, consumer_group)


@asynccontextmanager
async def cluster_membership(broker: Broker) -> AsyncIterator[None]:
    config = broker.config.cluster
    if config is None:
        yield
        return
    tls = broker.config.tls
    if tls is not None:  # the peers and the clients' routes reach it over HTTPS
        config = config.with_changes(http_tls=True)
    node = connect(config, broker.store.config.config_dir)
    await run_blocking(node.start)
    if broker.config.auth_file is not None and broker.config.peer_credential is None:
        log.warning(
            "auth is on but this broker has no --peer-credential(-file): the other brokers will refuse "
            "its forwarded requests and peer calls (docs/security.md#broker-identities)"
        )
    peers = PeerClient(
        node.name,
        broker.config.forward_timeout_s,
        credential=broker.config.peer_credential,
        tls_ca=broker.config.peer_ca,
        client_cert=None if tls is None else (tls.cert_file, tls.key_file),
    )
    try:
        sync = LocalTopicSync(broker.store, node)
        await run_blocking(sync.start)
        broker.cluster = node
        broker.planner = QueuePlanner(node.name)
        broker.peers = peers
        broker.forwarder = ForwardCoalescer(peers)
        broker.local_topics = sync
        await run_blocking(_mirror_settings, broker, node)
        async with replica_role(broker, node):
            yield
    finally:
        await peers.aclose()
        await run_blocking(node.close)


@asynccontextmanager
async def replica_role(broker: Broker, node: ClusterNode) -> AsyncIterator[None]:
    """A member of a replica group (``--ha-port``): the store's HA service, driven by the
    group's state in ZooKeeper (:class:`cluster.replica_group.ReplicaGroup`)."""
    config = node.config
    if not config.replicated or node.member is None:
        yield
        return
    group = ReplicaGroup(node, _NO_REPLICA, unclean=config.unclean_failover)
    ha = ReplicaController(
        broker.store,
        HAConfig(
            broker_id=node.member.member_id,
            listen_host=broker.config.host,
            listen_port=config.ha_port or 0,
            replication=ReplicationMode.SYNC if config.replication == "sync" else ReplicationMode.ASYNC,
            min_insync=config.min_insync,
            ack_timeout_ms=config.replication_timeout_ms,
            max_time_slave_not_catchup_ms=config.max_time_slave_not_catchup_ms,
            tls=config.ha_tls,
        ),
        group,
        identity_check=node.replication_peer_allowed,
    )
    group.replica = ha
    if broker.operators is not None:  # what an earlier master may have relocated is not again
        broker.operators.relocations.inherited_before = lambda: _leadership_start(ha)
        if broker.operators.relocations.wheel is not None:
            broker.operators.relocations.wheel.inherited_before = lambda: _leadership_start(ha)
    loop = asyncio.get_running_loop()
    group.on_lead_begin.append(lambda epoch: _retire_before_election(broker))
    group.on_lead.append(lambda epoch: _rebuild_after_election(broker, loop))
    await run_blocking(ha.start)
    broker.replica = ha
    broker.replica_group = group
    follower = SlaveMetadataFollower(broker, node, ha)
    try:
        group.start()
        follower.start()
        yield
    finally:
        group.close()
        await follower.stop()
        await run_blocking(ha.close)


def _leadership_start(ha: ReplicaController) -> int | None:
    """Where this master's current epoch began in the CommitLog (``None`` when not master)."""
    status = ha.status()
    return status.epoch_start_offset if status.role.name == "MASTER" else None


def _retire_before_election(broker: Broker) -> None:
    """Before this member takes writes: its transaction table (the slave's, from its start)
    refuses every write until :func:`_rebuild_after_election` replaces it (node worker thread)."""
    board = broker.operators
    if board is not None and board.transactions is not None:
        board.transactions.service.retire("this member is becoming its group's master")


def _rebuild_after_election(broker: Broker, loop: asyncio.AbstractEventLoop) -> None:
    """A member that starts to lead rebuilds what it keeps in memory from the CommitLog it
    replicated as a slave: the transaction table (halves, ends, their producer groups), so a
    transaction begun on the old master ends on the new one; and the POP table (receipts, acks,
    redeliveries), whose state records it replicated too. Node worker thread."""
    if broker.pop is not None:
        broker.pop.reload()
    board = broker.operators
    if board is None or board.transactions is None:
        return
    rebuilt = TransactionBoard.open(broker.store)
    rebuilt.dispatcher.pushers = board.transactions.dispatcher.pushers  # the doors' (gRPC) stay
    previous, board.transactions = board.transactions, rebuilt
    asyncio.run_coroutine_threadsafe(previous.dispatcher.close(), loop)


class _Unassigned:
    """The replica a ReplicaGroup holds until the HA service exists (it is never called)."""

    last_epoch = 0
    max_offset = 0
    master_connected = False

    def become_master(self, epoch: int, sync_state_epoch: int = 0, in_sync: object = None) -> None:
        raise AssertionError("no replica yet")

    def become_slave(self, master_ha_address: str, master_epoch: int) -> None:
        raise AssertionError("no replica yet")

    def fence(self, reason: str) -> None:
        pass


_NO_REPLICA = _Unassigned()
