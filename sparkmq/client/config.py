"""The client's settings: one frozen, validated dataclass each (units in the field names)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from cluster import InvalidBootstrapAddress, parse_bootstrap
from sparkmq.client.errors import InvalidArgument

#: Where the client looks first when no endpoint is given (``sparkmq serve``'s default).
DEFAULT_ENDPOINT = "http://127.0.0.1:8080"


def parse_endpoints(endpoints: str | Sequence[str]) -> tuple[str, ...]:
    """Broker base URLs from ``"http://a:8080,http://b:8080"`` or a sequence of them: the
    bootstrap list (Kafka's ``bootstrap.servers``), tried in order until one answers.

    Any one broker of a cluster is enough: the others, and every member of each replica group,
    are learnt from its answers (:class:`cluster.KnownBrokers`). Raises
    :class:`InvalidArgument` for anything that is not an ``http(s)://host:port`` URL."""
    try:
        return parse_bootstrap(endpoints)
    except InvalidBootstrapAddress as exc:
        raise InvalidArgument(str(exc)) from None


@dataclass(frozen=True)
class RetryPolicy:
    """How long and how often a call retries a retriable fault.

    Backoff doubles from ``backoff_ms`` up to ``max_backoff_ms``; a call gives up when the next
    attempt would start after ``deadline_ms`` from its first, raising the last fault."""

    deadline_ms: int = 15_000
    backoff_ms: int = 100
    max_backoff_ms: int = 2_000

    def validate(self) -> RetryPolicy:
        if self.deadline_ms < 0 or self.backoff_ms <= 0 or self.max_backoff_ms < self.backoff_ms:
            raise InvalidArgument(
                f"retry policy needs deadline_ms >= 0 and 0 < backoff_ms <= max_backoff_ms, got {self}"
            )
        return self

    def backoff_s(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt`` (1 = the first retry)."""
        doubled: int = self.backoff_ms * 2 ** max(0, attempt - 1)
        return min(self.max_backoff_ms, doubled) / 1000


@dataclass(frozen=True)
class ClientConfig:
    """Settings of one :class:`sparkmq.client.Client` (defaults suit a local cluster)."""

    #: Bootstrap brokers, tried in order (any one of a cluster is enough).
    endpoints: tuple[str, ...] = (DEFAULT_ENDPOINT,)
    #: Bearer token for brokers with auth on.
    token: str | None = None
    #: PEM file of the CA that signs the brokers' HTTPS certificates (``None``: the system's).
    tls_ca: str | None = None
    #: Opening a connection; a broker that does not accept within this is taken as down.
    connect_timeout_ms: int = 3_000
    #: Waiting for an answer (a long-poll adds its own wait on top).
    request_timeout_ms: int = 30_000
    #: Routes are refetched after this long even without a miss (RocketMQ polls every 30 s).
    route_ttl_ms: int = 30_000
    #: A broker that refused a connection is left out of round robin, and its address is
    #: asked last, for this long.
    suspect_ms: int = 3_000
    #: Most pulls a consumer keeps in flight at once (one per queue at most).
    max_parallel_pulls: int = 16
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    def validate(self) -> ClientConfig:
        parse_endpoints(self.endpoints)
        if self.tls_ca is not None and not os.path.isfile(self.tls_ca):
            raise InvalidArgument(f"tls_ca {self.tls_ca!r} is not a file")
        self.retry.validate()
        positive = {
            "connect_timeout_ms": self.connect_timeout_ms,
            "request_timeout_ms": self.request_timeout_ms,
            "max_parallel_pulls": self.max_parallel_pulls,
        }
        for name, value in positive.items():
            if value <= 0:
                raise InvalidArgument(f"{name} must be positive, got {value}")
        if self.route_ttl_ms < 0 or self.suspect_ms < 0:
            raise InvalidArgument("route_ttl_ms and suspect_ms must not be negative")
        return self
