"""How a broker joins a cluster: one frozen, validated dataclass (read from flags in the CLI only)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from cluster.address import ZkAddress
from cluster.model import validate_broker_name
from store import InvalidArgument
from store.ha import HATls


@dataclass(frozen=True)
class ClusterConfig:
    """A broker's place in a cluster.

    Addresses given to others are built from ``advertise_host`` and the ports; the broker binds
    wherever ``sparkmq serve --host`` says."""

    address: ZkAddress
    broker_name: str
    advertise_host: str
    http_port: int
    kafka_port: int | None = None
    #: RocketMQ's remoting port (``--remoting-port``), published for the NameServer routes.
    remoting_port: int | None = None
    #: The replication listener (issue 22); ``None``: this broker takes no replicas, and a
    #: second live broker with the same name is refused.
    ha_port: int | None = None
    #: ``HOST:PORT`` slaves connect to for replication instead of ``advertise_host:ha_port``
    #: (``--ha-advertise``): a port forwarded by NAT, a TCP proxy in front of the HA port.
    ha_advertise: str | None = None
    #: ZooKeeper session timeout asked for: a broker killed with ``kill -9`` is seen as dead
    #: (its queues unavailable) this long after its last heartbeat.
    session_timeout_ms: int = 6000
    #: Bound on each ZooKeeper call; past it a route change answers 503.
    op_timeout_ms: int = 3000
    #: How long ``sparkmq serve --cluster`` waits for ZooKeeper at start before giving up.
    connect_timeout_ms: int = 30_000
    #: Queues of a topic auto-created by a produce (spread over the live brokers).
    default_queues: int = 8
    #: Create an unknown topic (``default_queues`` over the live brokers) on first produce.
    auto_create_topics: bool = True
    #: Replication (with ``ha_port``): ``async`` answers a produce once the master has it,
    #: ``sync`` once every member of the in-sync set holds it (docs/replication.md).
    replication: str = "async"
    #: Writes are refused (nothing appended) while fewer members are in sync, master included.
    min_insync: int = 1
    #: How long a sync produce waits for the in-sync set before FLUSH_SLAVE_TIMEOUT.
    replication_timeout_ms: int = 3000
    #: A slave that has not caught up for this long leaves the in-sync set (``sync``: the master
    #: then acknowledges without it); RocketMQ ``haMaxTimeSlaveNotCatchup``.
    max_time_slave_not_catchup_ms: int = 15_000
    #: Elect a member outside the in-sync set when none inside is alive (loses what only the
    #: old master had: acknowledged messages included).
    unclean_failover: bool = False
    #: Mutual TLS on the replication port (``--ha-tls-cert/--ha-tls-key/--ha-tls-ca``): this
    #: member's certificate (its common name is registered as its identity) and the cluster CA.
    ha_tls: HATls | None = None
    #: Whether this broker's HTTP listener is HTTPS (its advertised URL says ``https``).
    http_tls: bool = False

    def validate(self) -> ClusterConfig:
        validate_broker_name(self.broker_name)
        checks = [
            (bool(self.advertise_host), "advertise_host must not be empty"),
            (0 < self.http_port < 65536, "http_port must be in 1..65535"),
            (self.kafka_port is None or 0 < self.kafka_port < 65536, "kafka_port must be in 1..65535"),
            (self.ha_port is None or 0 < self.ha_port < 65536, "ha_port must be in 1..65535"),
            (
                self.remoting_port is None or 0 < self.remoting_port < 65536,
                "remoting_port must be in 1..65535",
            ),
            (1000 <= self.session_timeout_ms <= 60_000, "session_timeout_ms must be in [1000, 60000]"),
            (100 <= self.op_timeout_ms <= 60_000, "op_timeout_ms must be in [100, 60000]"),
            (self.connect_timeout_ms >= 100, "connect_timeout_ms must be >= 100"),
            (self.default_queues >= 1, "default_queues must be >= 1"),
            (self.replication in ("async", "sync"), "replication must be async or sync"),
            (self.min_insync >= 1, "min_insync must be >= 1 (the master counts)"),
            (self.replication_timeout_ms >= 1, "replication_timeout_ms must be >= 1"),
            (self.max_time_slave_not_catchup_ms >= 1, "max_time_slave_not_catchup_ms must be >= 1"),
            (
                self.ha_port is not None or (self.replication == "async" and self.min_insync == 1),
                "replication settings need --ha-port",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise InvalidArgument(f"invalid ClusterConfig: {message}")
        if self.ha_advertise is not None:
            _check_host_port(self.ha_advertise, "ha_advertise")
            if self.ha_port is None:
                raise InvalidArgument("invalid ClusterConfig: --ha-advertise needs --ha-port")
        if self.ha_tls is not None:
            if self.ha_port is None:
                raise InvalidArgument("invalid ClusterConfig: TLS on the replication port needs --ha-port")
            self.ha_tls.validate()
        return self

    def with_changes(self, **changes: object) -> ClusterConfig:
        return replace(self, **changes).validate()  # type: ignore[arg-type]

    @property
    def replicated(self) -> bool:
        """Whether this broker is a member of a replica group (it has an HA port)."""
        return self.ha_port is not None

    @property
    def http_url(self) -> str:
        scheme = "https" if self.http_tls else "http"
        return f"{scheme}://{self.advertise_host}:{self.http_port}"

    @property
    def kafka_address(self) -> str | None:
        return None if self.kafka_port is None else f"{self.advertise_host}:{self.kafka_port}"

    @property
    def remoting_address(self) -> str | None:
        return None if self.remoting_port is None else f"{self.advertise_host}:{self.remoting_port}"

    @property
    def ha_address(self) -> str | None:
        """Where slaves reach this member's replication listener (published in ZooKeeper)."""
        if self.ha_port is None:
            return None
        return self.ha_advertise or f"{self.advertise_host}:{self.ha_port}"


def _check_host_port(value: str, name: str) -> None:
    """Refuse anything but ``HOST:PORT`` with a port in 1..65535."""
    host, colon, port = value.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidArgument(f"invalid ClusterConfig: {name} {value!r} is not HOST:PORT (port in 1..65535)")
