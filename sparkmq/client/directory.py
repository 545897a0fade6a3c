"""Where the brokers are and which queue each owns, cached: the client's route table.

The bootstrap list is the endpoints the caller gave; any one broker of a cluster answers for
all (``GET /cluster``, ``GET /topics/{t}/route``). Every address those answers name (each
broker, every member of its replica group) is remembered for the life of the client
(:class:`cluster.KnownBrokers`), so a question goes to the broker that answered last, then to
the bootstrap list, then to every address learnt, until one answers: a client given only a
master's address finds the slave that took over when that master dies. Answers are kept for
``route_ttl_ms`` and dropped at once on a miss (:meth:`RouteDirectory.invalidate`).

A broker whose connection was refused is a *suspect* for ``suspect_ms``: round robin leaves it
out (RocketMQ's latency fault tolerance, simplified) until ZooKeeper's view catches up, and its
address is asked last.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from cluster import KnownBrokers, no_broker_answered
from sparkmq.client.config import ClientConfig, parse_endpoints
from sparkmq.client.errors import BrokerUnreachable, QueueUnavailable, UnknownTopic
from sparkmq.client.routes import ClusterInfo, TopicRoute
from sparkmq.client.transport import Transport, segment

Clock = Callable[[], float]


class RouteDirectory:
    """Thread-safe cache of :class:`ClusterInfo` and :class:`TopicRoute` per topic."""

    def __init__(self, transport: Transport, config: ClientConfig, clock: Clock = time.monotonic) -> None:
        self._transport = transport
        self.known = KnownBrokers(
            parse_endpoints(config.endpoints), suspect_s=config.suspect_ms / 1000, clock=clock
        )
        self._ttl_s = config.route_ttl_ms / 1000
        self._suspect_s = config.suspect_ms / 1000
        self._clock = clock
        self._lock = threading.Lock()
        self._cluster: tuple[ClusterInfo, float] | None = None
        self._routes: dict[str, tuple[TopicRoute, float]] = {}
        self._suspects: dict[str, float] = {}

    # -- asking any broker ------------------------------------------------------------------------

    def candidates(self) -> list[str]:
        """Broker URLs to ask, best first: the last that answered, the bootstrap list, then
        every address learnt from answers; addresses that could not be reached just now last."""
        return self.known.candidates()

    def ask_any(self, method: str, path: str, **kwargs: Any) -> tuple[Any, str]:
        """``(JSON answer, URL that answered)`` from the first broker that answers; a broker's
        refusal (4xx/5xx) is raised as it is, :class:`BrokerUnreachable` naming every address
        tried when none answers."""
        failures: list[tuple[str, str]] = []
        maybe_sent = False
        for url in self.candidates():
            try:
                answer = self._transport.call(url, method, path, **kwargs)
            except BrokerUnreachable as exc:
                self.known.unreachable(url)
                failures.append((url, exc.message))
                maybe_sent = maybe_sent or exc.maybe_sent
                continue
            self.known.answered(url)
            return answer, url
        raise BrokerUnreachable(
            no_broker_answered(failures), url=",".join(u for u, _ in failures), maybe_sent=maybe_sent
        )

    def ask_bootstrap(self, method: str, path: str, **kwargs: Any) -> tuple[Any, str]:
        """``(JSON answer, URL)`` of the first *bootstrap* address that answers, in the order
        given (a question about a broker the caller named: ``/healthz``, ``/stats``); never a
        learnt one. :class:`BrokerUnreachable` naming every address tried when none answers."""
        failures: list[tuple[str, str]] = []
        maybe_sent = False
        for url in self.known.bootstrap:
            try:
                return self._transport.call(url, method, path, **kwargs), url
            except BrokerUnreachable as exc:
                failures.append((url, exc.message))
                maybe_sent = maybe_sent or exc.maybe_sent
        raise BrokerUnreachable(
            no_broker_answered(failures), url=",".join(self.known.bootstrap), maybe_sent=maybe_sent
        )

    # -- the cluster and the routes ---------------------------------------------------------------

    def cluster(self, refresh: bool = False) -> ClusterInfo:
        cached = self._cluster
        if cached is not None and not refresh and self._clock() - cached[1] < self._ttl_s:
            return cached[0]
        document, url = self.ask_any("GET", "/cluster")
        self.known.learn_from(document)
        info = ClusterInfo.from_json(document, url)
        self._cluster = (info, self._clock())
        return info

    def route(self, topic: str, refresh: bool = False) -> TopicRoute | None:
        """The topic's route, or ``None`` when no broker knows the topic (yet)."""
        with self._lock:
            cached = self._routes.get(topic)
        if cached is not None and not refresh and self._clock() - cached[1] < self._ttl_s:
            return cached[0]
        info = self.cluster(refresh=refresh)
        try:
            document, url = self.ask_any("GET", f"/topics/{segment(topic)}/route")
        except UnknownTopic:
            with self._lock:
                self._routes.pop(topic, None)
            return None
        if info.mode != "single":
            self.known.learn_from(document)
        route = TopicRoute.from_json(document, single_url=url if info.mode == "single" else None)
        with self._lock:
            self._routes[topic] = (route, self._clock())
        return route

    def invalidate(self, topic: str | None = None) -> None:
        """Forget a topic's route (every route and the cluster when ``topic`` is ``None``)."""
        with self._lock:
            if topic is None:
                self._routes.clear()
                self._cluster = None
            else:
                self._routes.pop(topic, None)

    def address(self, broker: str, route: TopicRoute | None = None) -> str:
        """The base URL of ``broker`` (from the route, else the cluster); raises
        :class:`QueueUnavailable` when no address is known for it."""
        url = route.http_of(broker) if route is not None else None
        if url is None:
            known = self.cluster().broker(broker)
            url = known.http if known is not None else None
        if url is None:
            raise QueueUnavailable(f"no address is known for broker {broker}", broker=broker)
        return url

    def any_url(self) -> str:
        """A broker to send a request that any broker serves (the last that answered, unless
        it could not be reached since)."""
        if self.known.last_good is None:
            self.cluster()
        return self.known.best()

    # -- suspects ---------------------------------------------------------------------------------

    def suspect(self, broker: str | None) -> None:
        if broker is not None:
            with self._lock:
                self._suspects[broker] = self._clock() + self._suspect_s

    def avoided(self) -> frozenset[str]:
        now = self._clock()
        with self._lock:
            return frozenset(name for name, until in self._suspects.items() if until > now)
