"""HTTP broker configuration: one frozen, validated dataclass wrapping the store's.

CLI flags and environment variables are read only in :mod:`sparkmq.cli`; everything below
the edge receives a :class:`ServerConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from broker.peer_identity import PeerCredential
from broker.tls import TlsConfig, is_loopback
from cluster import ClusterConfig
from store import MIB, InvalidArgument, StoreConfig

#: How far ahead the delay resolver decides (ms): its decisions wait in the broker's wheel
#: (``broker/wheel.py``) for their due time. It must cover a trigger plus a micro-batch or two
#: (0.5-2 s each on a quiet machine, several seconds under load): a decision that arrives after
#: its due time is published at once. 10 s (it was 3 s): the same lateness on a quiet machine,
#: room for slow batches, and what is due within 10 s of a broker crash is in the replicated
#: wheel, delivered 1.6 s after the restart instead of after the operator job's 17.5 s start
#: (``bench.operators_bench --only recovery``, docs/operators.md).
WHEEL_LOOKAHEAD_MS = 10_000

#: Hard ceiling on ``max_messages`` for one pull (JSON or Arrow).
MAX_PULL_MESSAGES = 100_000
#: Hard ceiling on a long-poll's ``wait_ms``.
MAX_WAIT_MS = 60_000


@dataclass(frozen=True)
class ServerConfig:
    """Everything ``sparkmq serve`` needs besides the store itself.

    ``max_request_bytes`` bounds any request body (413 above it); a single message body is
    bounded separately by ``store.max_message_size_bytes`` (4 MiB by default, also 413).
    """

    store: StoreConfig
    host: str = "127.0.0.1"
    port: int = 8080
    #: The users file (broker.security: tokens, SCRAM keys, rights); ``None`` turns auth off.
    auth_file: Path | None = None
    #: TLS on the HTTP and Kafka listeners (``--tls-cert``/``--tls-key``); ``None``: plaintext.
    tls: TlsConfig | None = None
    #: With auth on, a plaintext listener on a non-loopback address is refused unless this is set.
    allow_plaintext: bool = False
    #: Most messages accepted by one ``messages:batch`` request.
    max_batch_messages: int = 10_000
    #: Largest request body accepted, in bytes.
    max_request_bytes: int = 64 * MIB
    #: Seconds uvicorn waits for in-flight requests on shutdown before cancelling them.
    graceful_shutdown_s: float = 10.0
    log_level: str = "info"
    access_log: bool = False
    #: Serve the hot single produce through :mod:`ingest_api.http.fastlane` (same answers; off only
    #: to compare against the plain FastAPI route).
    fast_lane: bool = True
    #: Timer messages due further out than this are rolled by the delay resolver (must stay well
    #: under CommitLog retention so no pending message depends on a deleted file).
    timer_roll_window_ms: int = 86_400_000
    #: Most pointers one resolver key relocates per micro-batch (catch-up is spread over batches).
    operator_burst_cap: int = 100_000
    #: Relocations per atomic append when publishing an operator batch.
    relocation_chunk_rows: int = 65_536
    #: How far ahead the delay resolver decides; the broker's wheel delivers each decision at its
    #: due time (``broker/wheel.py``). 0: no wheel (decisions are published when they arrive).
    wheel_lookahead_ms: int = WHEEL_LOOKAHEAD_MS
    #: Test only: ``<event>:<marker file>`` SIGKILLs the broker once after that relocation step
    #: (``decided``, ``scheduled``, ``chunk-<k>``, ``published``, and the wheel's
    #: ``wheel-published``, ``wheel-marked``); read from ``SPARKMQ_TEST_RELOCATION_FAULT``.
    relocation_fault: str | None = None
    #: Test only: ``<event>:<kill|pause>:<marker>`` at a step of the exactly-once sink's publish
    #: (``ingest_api.http.routers.sinks.fault_hook``); read from ``SPARKMQ_TEST_SINK_FAULT``.
    sink_fault: str | None = None
    #: Seconds between two samples of the console's live charts.
    console_sample_interval_s: float = 5.0
    #: Transactions (RocketMQ ``transactionTimeOut``, ``transactionCheckInterval``,
    #: ``transactionCheckMax``): no check-back before this age, then one per interval, and after
    #: the last check the half goes to TRANS_CHECK_MAX_TIME_TOPIC.
    tx_immunity_ms: int = 6000
    tx_check_interval_ms: int = 30_000
    tx_check_max: int = 15
    #: Cluster membership (``sparkmq serve --cluster``); ``None``: a lone broker, no ZooKeeper.
    cluster: ClusterConfig | None = None
    #: Seconds a forwarded request (produce to another broker's queue, a fan-out query) may take.
    forward_timeout_s: float = 30.0
    #: This broker's identity in peer calls (a ``broker`` user of ``auth_file`` and its token);
    #: needed in a cluster with auth on (``--peer-credential``, docs/security.md).
    peer_credential: PeerCredential | None = None
    #: CA that verifies other brokers' HTTPS listeners in peer calls (``None``: :attr:`peer_ca`).
    peer_tls_ca: Path | None = None

    def validate(self) -> ServerConfig:
        """Return ``self`` or raise :class:`InvalidArgument` naming the bad field."""
        self.store.validate()
        checks: list[tuple[bool, str]] = [
            (0 <= self.port < 65536, "port must be in [0, 65536)"),
            (1 <= self.max_batch_messages <= 1_000_000, "max_batch_messages must be in [1, 1000000]"),
            (self.max_request_bytes >= 1024, "max_request_bytes must be >= 1024"),
            (self.graceful_shutdown_s >= 0, "graceful_shutdown_s must be >= 0"),
            (self.timer_roll_window_ms >= 1000, "timer_roll_window_ms must be >= 1000"),
            (self.operator_burst_cap >= 1, "operator_burst_cap must be >= 1"),
            (self.relocation_chunk_rows >= 1, "relocation_chunk_rows must be >= 1"),
            (self.wheel_lookahead_ms >= 0, "wheel_lookahead_ms must be >= 0"),
            (self.console_sample_interval_s > 0, "console_sample_interval_s must be > 0"),
            (self.tx_immunity_ms >= 0, "tx_immunity_ms must be >= 0"),
            (self.tx_check_interval_ms >= 100, "tx_check_interval_ms must be >= 100"),
            (self.tx_check_max >= 1, "tx_check_max must be >= 1"),
            (self.auth_file is None or self.auth_file.is_file(), f"auth_file {self.auth_file} not found"),
            (self.forward_timeout_s > 0, "forward_timeout_s must be > 0"),
            (self.peer_credential is None or self.auth_file is not None, "peer_credential needs auth_file"),
            (self.peer_tls_ca is None or self.peer_tls_ca.is_file(), f"no peer_tls_ca {self.peer_tls_ca}"),
        ]
        if self.cluster is not None:
            self.cluster.validate()
        if self.tls is not None:
            self.tls.validate()
        self.check_plaintext(self.host, "HTTP")
        for ok, message in checks:
            if not ok:
                raise InvalidArgument(f"invalid ServerConfig: {message}")
        return self

    @property
    def peer_ca(self) -> Path | None:
        """The CA peer calls verify the other brokers' HTTPS listeners with: ``peer_tls_ca``,
        else the listeners' own ``tls.ca_file`` (a secured cluster has one CA), else ``None``
        (the system CAs)."""
        if self.peer_tls_ca is not None:
            return self.peer_tls_ca
        return None if self.tls is None else self.tls.ca_file

    def check_plaintext(self, host: str, door: str) -> None:
        """Refuse credentials in clear text off this machine: auth on, no TLS, ``host`` not a
        loopback address, and no ``allow_plaintext``."""
        if (
            self.auth_file is not None
            and self.tls is None
            and not self.allow_plaintext
            and not is_loopback(host)
        ):
            raise InvalidArgument(
                f"invalid ServerConfig: the {door} listener on {host!r} would carry credentials in clear "
                "text: give --tls-cert/--tls-key, bind 127.0.0.1, or pass --allow-plaintext"
            )

    def with_changes(self, **changes: object) -> ServerConfig:
        return replace(self, **changes).validate()  # type: ignore[arg-type]
