"""The Spark source over a cluster: any broker as the entry point, each queue read at its owner.

``readStream.format("sparkmq").option("endpoint", <any broker>)`` reads a topic whose queues are
spread over several brokers (docs/spark_source.md, "Clusters"):

* **Discovery.** ``endpoint`` is a bootstrap list (``"http://a:8081,http://b:8082"``, Kafka's
  ``bootstrap.servers``). ``GET /cluster`` (the brokers, whether the entry is a lone broker)
  and ``GET /topics/{t}/route`` (each queue's owner, its HTTP address and its replica group's
  live members) are asked of the broker that answered last, the bootstrap list, then every
  address learnt from those answers (:class:`cluster.KnownBrokers`: every broker and replica
  member ever named, kept for the life of the process), so a query given only a master's
  address finds the slave that took over when the master dies. The driver hands what it has
  learnt to the executors in each partition (:meth:`ClusterBackend.learn`). A lone broker
  answers as a cluster of one (``mode: single``): every queue is then read at the URL that
  answered (not at the address the broker believes it has: a proxy or container port mapping
  would make that unreachable).
* **Heads** (driver): ``GET /topics/{t}`` of any broker; in a cluster it asks every owner and
  marks the queues of a broker that is down ``available: false``.
* **Reads, offset lookups** (executors): at the queue's owner, through that broker's
  :class:`streaming.endpoint_backend.EndpointBackend` (its Arrow puller; one per broker and process).
  Spark runs the partitions of a micro-batch in parallel, so the brokers serve in parallel.
* **Group offsets** (the ``group`` mirror): each queue's offset is committed at its owner, one
  ``PUT /groups/{g}/offsets`` per owner; one owner being down does not hold up the others.

**A broker that is down.** With ``wait_for_brokers=False`` (``failOnDataLoss=true``, the
default) every call that needs it raises :class:`BrokerUnavailable` naming the broker, its
address and the queues, so the query fails with that message. With ``wait_for_brokers=True``
(``failOnDataLoss=false``) the source waits instead: planning leaves that broker's queues where
they are (they are simply absent from the heads, so they get no new range) while the other
brokers' queues keep being read, except on the first look at a topic, which waits until every
queue has been seen once (a query never starts without knowing where every queue starts); a
read of a range already planned on that broker retries until the broker answers again (the
range is in Spark's offset log and must be read exactly as planned). A replica group whose
master does not answer while other members are alive is failing over: its reads are retried
for up to ``timeout_s`` (an election takes about a second) before that counts as down. So is a
member that answers "queue elsewhere" although the route, asked again, names it (the routes and
the members disagree for a moment in a failover).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from cluster import KnownBrokers, no_broker_answered, parse_bootstrap
from store import MESSAGE_SCHEMA, GetStatus
from streaming.backend_contract import (
    BackendError,
    BrokerUnreachable,
    QueueElsewhere,
    QueueHeads,
    ReadChunk,
)
from streaming.endpoint_backend import EndpointBackend, broker_backend

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Between two attempts to reach a broker that is down, when waiting for it.
RETRY_INTERVAL_S = 0.5
#: Between two log lines about the same broker being waited for.
WAIT_LOG_INTERVAL_S = 30.0


class BrokerUnavailable(BackendError):
    """A broker that owns queues the query reads is down or does not answer."""

    code = "broker_unavailable"

    def __init__(self, message: str, *, broker: str) -> None:
        super().__init__(message)
        self.broker = broker


@dataclass(frozen=True, slots=True)
class QueueOwner:
    """Where one queue is read: its broker's name and HTTP base URL (``None``: never known)."""

    broker: str
    http: str | None
    alive: bool
    #: The live members of its replica group (the master first): where ``readFrom=replica``
    #: reads, and where reads go while the group has no master.
    replicas: tuple[str, ...] = ()

    def read_at(self, read_from: str) -> str | None:
        """The URL to read this queue at: the master; a slave when asked (``replica``) and one is
        alive; any live member when the group has no master."""
        slaves = [url for url in self.replicas if url != self.http]
        if read_from == "replica" and slaves:
            return slaves[0]
        if not self.alive and self.replicas:
            return self.replicas[0]
        return self.http


@dataclass(frozen=True, slots=True)
class HeadsAnswer:
    """``GET /topics/{t}`` parsed: the heads of the queues that could be asked, and the broker
    of each queue that could not (its owner is down)."""

    heads: QueueHeads
    unavailable: dict[int, str]


def parse_route(doc: Mapping[str, Any], single_entry: str | None) -> tuple[QueueOwner, ...]:
    """A ``GET /topics/{t}/route`` body as owners (index = queue id). ``single_entry``: the entry
    URL of a lone broker, which every queue is read from."""
    owners = []
    for entry in sorted(doc.get("queues") or (), key=lambda q: int(q["queue_id"])):
        http = single_entry if single_entry is not None else entry.get("http")
        replicas = tuple(entry.get("replicas") or ()) if single_entry is None else ()
        owners.append(QueueOwner(str(entry["broker"]), http, bool(entry.get("alive", True)), replicas))
    return tuple(owners)


def parse_heads(doc: Mapping[str, Any]) -> HeadsAnswer:
    """A ``GET /topics/{t}`` body: ``available: false`` marks a queue whose owner is down (a lone
    broker sends neither ``broker`` nor ``available``)."""
    heads: QueueHeads = {}
    unavailable: dict[int, str] = {}
    for entry in doc.get("queue_offsets") or ():
        queue_id = int(entry["queue_id"])
        if entry.get("available") is False:
            unavailable[queue_id] = str(entry.get("broker"))
        else:
            heads[queue_id] = (int(entry["min_offset"]), int(entry["max_offset"]))
    return HeadsAnswer(heads, unavailable)


def down_message(topic: str, broker: str, where: str | None, queues: list[int], problem: str) -> str:
    at = f" at {where}" if where else ""
    return (
        f"sparkmq: broker {broker}{at} is down ({problem}): queues {queues} of topic {topic!r} cannot "
        "be read. Restart it, or set failOnDataLoss=false to wait for it (the other brokers' "
        "queues keep being read)"
    )


class ClusterBackend:
    """The :class:`streaming.backends.Backend` of ``endpoint`` mode: every broker of a cluster."""

    def __init__(
        self,
        endpoint: str,
        timeout_s: float,
        auth_token: str | None = None,
        *,
        wait_for_brokers: bool = False,
        retry_interval_s: float = RETRY_INTERVAL_S,
        read_from: str = "master",
        tls_ca: str | None = None,
    ) -> None:
        self.bootstrap = parse_bootstrap(endpoint)
        #: The bootstrap address that answered ``/cluster`` last (a lone broker is read there).
        self.entry = self.bootstrap[0]
        self.read_from = read_from
        self.timeout_s = timeout_s
        self.auth_token = auth_token
        self.tls_ca = tls_ca
        self.wait_for_brokers = wait_for_brokers
        self.retry_interval_s = retry_interval_s
        self._lock = threading.Lock()
        self._single: bool | None = None
        self._known = KnownBrokers(self.bootstrap)
        self._routes: dict[str, tuple[QueueOwner, ...]] = {}
        #: Topics whose every queue has been seen in one heads answer (see the module docstring).
        self._complete: set[str] = set()
        self._logged: dict[str, float] = {}

    # -- plumbing ---------------------------------------------------------------------------
    def broker(self, url: str) -> EndpointBackend:
        """The process-wide backend of one broker (its pooled clients and Arrow puller)."""
        return broker_backend(url, self.timeout_s, self.auth_token, self.read_from, self.tls_ca)

    def learn(self, urls: Sequence[str]) -> None:
        """Remember broker addresses learnt elsewhere (the driver's, sent with a partition)."""
        self._known.learn(urls)

    @property
    def known_brokers(self) -> tuple[str, ...]:
        """Every address this backend may ask, best first."""
        return tuple(self._known.candidates())

    def _ask(self, path: str, **params: Any) -> httpx.Response:
        """``GET path`` of the first known broker that answers (see the module docstring)."""
        problems: list[tuple[str, str]] = []
        for url in self._known.candidates():
            try:
                resp = self.broker(url).get(path, params=params or None)
            except BrokerUnreachable as exc:
                self._known.unreachable(url)
                problems.append((url, str(exc)))
                continue
            self._known.answered(url)
            return resp
        raise BrokerUnreachable(f"GET {path}: {no_broker_answered(problems)}")

    def _waiting(self, what: str, run: Callable[[], T]) -> T:
        """``run()``, retried while brokers do not answer when waiting for them."""
        while True:
            try:
                return run()
            except BrokerUnreachable as exc:
                if not self.wait_for_brokers:
                    raise
                self._log_wait(what, str(exc))
            time.sleep(self.retry_interval_s)

    def _log_wait(self, key: str, problem: str) -> None:
        now = time.monotonic()
        if now - self._logged.get(key, -1e9) >= WAIT_LOG_INTERVAL_S:
            self._logged[key] = now
            log.warning("sparkmq: waiting for %s (failOnDataLoss=false): %s", key, problem)

    def _discover(self) -> bool:
        """Whether the entry is a lone broker (asks ``/cluster`` once per refresh)."""
        with self._lock:
            if self._single is not None:
                return self._single
        resp = self._waiting("a broker of the cluster", lambda: self._ask("/cluster"))
        single = resp.status_code == 404 or bool(resp.json().get("mode") == "single")
        if not single and resp.status_code == 200:
            self._known.learn_from(resp.json())
        with self._lock:
            self._single = single
            self.entry = self._known.last_good or self.entry
        return single

    def _route(self, topic: str, *, fresh: bool = False) -> tuple[QueueOwner, ...]:
        """The owners of ``topic``'s queues (``()`` for an unknown topic), cached until refresh."""
        with self._lock:
            cached = self._routes.get(topic)
        if cached is not None and not fresh:
            return cached
        single = self._discover()
        resp = self._waiting(f"the route of {topic!r}", lambda: self._ask(f"/topics/{topic}/route"))
        if resp.status_code == 404:
            return ()
        if resp.status_code >= 400:
            raise BackendError(f"GET /topics/{topic}/route -> HTTP {resp.status_code}: {resp.text[:300]}")
        if not single:
            self._known.learn_from(resp.json())
        owners = parse_route(resp.json(), self.entry if single else None)
        with self._lock:
            self._routes[topic] = owners
        return owners

    def _owner(self, topic: str, queue_id: int, *, fresh: bool = False) -> QueueOwner | None:
        owners = self._route(topic, fresh=fresh)
        if queue_id >= len(owners) and not fresh:
            owners = self._route(topic, fresh=True)  # the topic grew since the route was cached
        return owners[queue_id] if queue_id < len(owners) else None

    def _at_owner(self, topic: str, queue_id: int, call: Callable[[EndpointBackend], T]) -> T | None:
        """``call`` on the owner's backend; ``None`` when the queue does not exist. A stale
        route (307, or a broker gone) is refreshed once; a broker that stays down raises
        :class:`BrokerUnavailable` or, when waiting for brokers, is retried until it answers."""
        fresh = False
        url: str | None = None
        failing_over_until = time.monotonic() + self.timeout_s
        while True:
            owner = self._owner(topic, queue_id, fresh=fresh)
            if owner is None:
                return None
            try:
                url = owner.read_at(self.read_from)
                if url is None:
                    raise BrokerUnreachable("its address was never registered")
                return call(self.broker(url))
            except QueueElsewhere as exc:
                # The route, asked again, still names a member that sends us elsewhere: the
                # routes and the members disagree while a group fails over (a master cut from
                # ZooKeeper, an election under way). Wait as for a master that does not answer.
                if fresh:
                    if time.monotonic() < failing_over_until:
                        time.sleep(self.retry_interval_s)
                    elif self.wait_for_brokers:
                        self._log_wait(f"the owner of {topic}/{queue_id}", str(exc))
                        time.sleep(self.retry_interval_s)
                    else:
                        raise
            except BrokerUnreachable as exc:
                if not fresh:
                    fresh = True  # maybe it moved (a new master): ask the route again first
                    continue
                if set(owner.replicas) - {url} and time.monotonic() < failing_over_until:
                    time.sleep(self.retry_interval_s)  # its group is electing a new master
                    continue
                if not self.wait_for_brokers:
                    message = down_message(topic, owner.broker, owner.http, [queue_id], str(exc))
                    raise BrokerUnavailable(message, broker=owner.broker) from exc
                self._log_wait(f"broker {owner.broker}", str(exc))
                time.sleep(self.retry_interval_s)
            fresh = True

    # -- the Backend contract ---------------------------------------------------------------
    def refresh(self) -> None:
        """Forget routes and the cluster's shape (a Spark task calls it once before reading)."""
        with self._lock:
            self._single = None
            self._routes.clear()

    def topics(self) -> list[str]:
        """The cluster's user topics, sorted (any broker lists them all)."""
        resp = self._waiting("the topic list", lambda: self._ask("/topics"))
        if resp.status_code >= 400:
            raise BackendError(f"GET /topics -> HTTP {resp.status_code}: {resp.text[:300]}")
        return sorted(str(entry["topic"]) for entry in resp.json().get("topics") or [])

    def queue_heads(self, topic: str) -> QueueHeads:
        """Heads of every queue whose broker answers; see the module docstring for the others."""
        failing_over_until = time.monotonic() + self.timeout_s
        while True:
            answer = self._heads_once(topic)
            if answer is None:
                return {}
            if not answer.unavailable:
                self._complete.add(topic)
                return answer.heads
            by_broker: dict[str, list[int]] = {}
            for queue_id, broker in sorted(answer.unavailable.items()):
                by_broker.setdefault(broker, []).append(queue_id)
            broker, queues = sorted(by_broker.items())[0]
            if time.monotonic() < failing_over_until and self._failing_over(topic, broker):
                time.sleep(self.retry_interval_s)  # its slave is about to lead
                continue
            if not self.wait_for_brokers:
                raise BrokerUnavailable(down_message(topic, broker, None, queues, "not alive"), broker=broker)
            self._log_wait(f"broker {broker}", f"queues {queues} of {topic!r} are unavailable")
            if topic in self._complete:
                return answer.heads
            time.sleep(self.retry_interval_s)

    def _failing_over(self, topic: str, broker: str) -> bool:
        """Whether ``broker`` is a replica group with a live member other than the address
        that did not answer (fresh route): its slave leads within about a second."""
        owners = [o for o in self._route(topic, fresh=True) if o.broker == broker]
        return any(set(o.replicas) - {o.http} for o in owners)

    def _heads_once(self, topic: str) -> HeadsAnswer | None:
        resp = self._waiting(f"the heads of {topic!r}", lambda: self._ask(f"/topics/{topic}"))
        if resp.status_code == 404:
            with self._lock:
                self._routes.pop(topic, None)
            return None
        if resp.status_code >= 400:
            raise BackendError(f"GET /topics/{topic} -> HTTP {resp.status_code}: {resp.text[:300]}")
        return parse_heads(resp.json())

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        def lookup(broker: EndpointBackend) -> int:
            return broker.offset_for_timestamp(topic, queue_id, timestamp_ms)

        found = self._at_owner(topic, queue_id, lookup)
        if found is None:
            raise BackendError(f"{topic}/{queue_id} does not exist")
        return found

    def read_range(
        self, topic: str, queue_id: int, *, offset: int, end_offset: int, max_messages: int, tags: str
    ) -> ReadChunk:
        chunk = self._at_owner(
            topic,
            queue_id,
            lambda b: b.read_range(
                topic, queue_id, offset=offset, end_offset=end_offset, max_messages=max_messages, tags=tags
            ),
        )
        if chunk is None:
            empty = pa.RecordBatch.from_pylist([], schema=MESSAGE_SCHEMA)
            return ReadChunk(GetStatus.NO_MATCHED_LOGIC_QUEUE, offset, 0, 0, empty)
        return chunk

    def owner_of(self, topic: str, queue_id: int) -> str:
        owner = self._owner(topic, queue_id)
        return owner.broker if owner is not None else ""

    def release_pages(self) -> None:
        """Nothing is mapped: reads arrive over HTTP."""

    def commit_group_offsets(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        """Each queue's offset at its owner; raises after trying every owner if any failed."""
        owners = self._route(topic)
        parts: dict[str, dict[int, int]] = {}
        for queue_id, offset in offsets.items():
            if queue_id < len(owners) and owners[queue_id].http is not None:
                parts.setdefault(str(owners[queue_id].http), {})[queue_id] = offset
            else:
                parts.setdefault(self.entry, {})[queue_id] = offset  # refused there, with the reason
        problems = []
        for url, part in sorted(parts.items()):
            try:
                self.broker(url).commit_group_offsets(group, topic, part)
            except BackendError as exc:
                problems.append(f"{url}: {exc}")
        if problems:
            raise BackendError(f"group {group}: offsets of {topic!r} not committed at {'; '.join(problems)}")
