"""Faults of the cluster layer: membership, routes and the coordination session.

Expected outcomes (a queue whose broker is down, a topic not yet routed) are values of
:mod:`cluster.model`; these exceptions are the real faults, each named after what happened
and carrying enough context for the HTTP door to answer with a stable code.
"""

from __future__ import annotations

from store import SparkMQError


class ClusterError(SparkMQError):
    """A fault of the cluster layer."""

    code = "cluster_error"


class InvalidClusterAddress(ClusterError):
    """A ``--cluster`` value that is not ``zk://HOST:PORT[,HOST:PORT][/chroot]``."""

    code = "invalid_cluster_address"


class BrokerNameTaken(ClusterError):
    """Another live broker already registered this broker name (and replication is off)."""

    code = "broker_name_taken"


class StoreBelongsElsewhere(ClusterError):
    """The store directory was registered under another broker name or cluster."""

    code = "store_belongs_elsewhere"


class CoordinationUnavailable(ClusterError):
    """ZooKeeper cannot be reached (or the session is suspended): route changes are refused.

    Produce and pull of queues this broker owns keep working from the cached routes."""

    code = "cluster_unavailable"
    retriable = True


class QueueUnavailable(ClusterError):
    """The broker that owns a queue is not alive (its ZooKeeper session ended)."""

    code = "queue_unavailable"
    retriable = True

    def __init__(self, message: str, *, broker: str) -> None:
        super().__init__(message)
        self.broker = broker


class NoLiveBroker(ClusterError):
    """A topic would be placed, or a message routed, but no broker is alive to take it."""

    code = "no_live_broker"
    retriable = True


class InvalidPlacement(ClusterError):
    """A placement request names unknown brokers, or would move an existing queue."""

    code = "invalid_placement"
