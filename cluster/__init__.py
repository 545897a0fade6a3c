"""The cluster layer: membership, routes and the ZooKeeper session, between ``store`` and the doors.

The doors and Spark ask this package where a queue lives (:class:`ClusterView`) and never talk
to ZooKeeper themselves; only :mod:`cluster.zk` imports kazoo. See docs/cluster.md.
"""

from cluster.address import DEFAULT_CHROOT, ZkAddress, parse_cluster_address
from cluster.bootstrap import (
    InvalidBootstrapAddress,
    KnownBrokers,
    learned_addresses,
    no_broker_answered,
    parse_bootstrap,
)
from cluster.config import ClusterConfig
from cluster.coordination import Coordination, SessionState
from cluster.errors import (
    BrokerNameTaken,
    ClusterError,
    CoordinationUnavailable,
    InvalidClusterAddress,
    InvalidPlacement,
    NoLiveBroker,
    QueueUnavailable,
    StoreBelongsElsewhere,
)
from cluster.model import (
    BROKER_NAME_PATTERN,
    BrokerGroup,
    ClusterView,
    InvalidBrokerName,
    MemberInfo,
    QueueRoute,
    TopicPlacement,
    validate_broker_name,
)
from cluster.node import ClusterHealth, ClusterNode
from cluster.placement import grow_placement, placeable, validate_routed


def connect(config: ClusterConfig, config_dir: object) -> ClusterNode:
    """A :class:`ClusterNode` on ZooKeeper for ``config`` (not started)."""
    from pathlib import Path

    from cluster.zk import ZooKeeperCoordination

    coordination = ZooKeeperCoordination(
        config.address,
        session_timeout_s=config.session_timeout_ms / 1000,
        op_timeout_s=config.op_timeout_ms / 1000,
    )
    return ClusterNode(config, coordination, Path(str(config_dir)))


__all__ = [
    "BROKER_NAME_PATTERN",
    "DEFAULT_CHROOT",
    "BrokerGroup",
    "BrokerNameTaken",
    "ClusterConfig",
    "ClusterError",
    "ClusterHealth",
    "ClusterNode",
    "ClusterView",
    "Coordination",
    "CoordinationUnavailable",
    "InvalidBootstrapAddress",
    "InvalidBrokerName",
    "InvalidClusterAddress",
    "InvalidPlacement",
    "KnownBrokers",
    "MemberInfo",
    "NoLiveBroker",
    "QueueRoute",
    "QueueUnavailable",
    "SessionState",
    "StoreBelongsElsewhere",
    "TopicPlacement",
    "ZkAddress",
    "connect",
    "grow_placement",
    "learned_addresses",
    "no_broker_answered",
    "parse_bootstrap",
    "parse_cluster_address",
    "placeable",
    "validate_broker_name",
    "validate_routed",
]
