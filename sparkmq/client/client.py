"""The entry point: :class:`Client` holds the connections and routes; it sends, builds consumers,
and answers the admin questions (topics, cluster, groups) from the right brokers.

    from sparkmq.client import Client

    with Client("http://127.0.0.1:8081") as client:          # any broker of the cluster
        stored = client.send("orders", "order 42 paid", sharding_key="customer-7")
        with client.consumer("orders", group="billing") as consumer:
            for message in consumer.poll(wait_ms=1000):
                print(message.queue_id, message.queue_offset, message.text)
            consumer.commit()

See docs/client.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa

from sparkmq.client.config import ClientConfig, parse_endpoints
from sparkmq.client.consumer import Consumer, Start
from sparkmq.client.directory import RouteDirectory
from sparkmq.client.messages import Message, PullResult, QueueOffsets, SendResult
from sparkmq.client.owners import Owners
from sparkmq.client.producer import Producer
from sparkmq.client.routes import ClusterInfo, TopicRoute
from sparkmq.client.simple_consumer import SimpleConsumer
from sparkmq.client.transport import Transport, segment


class Client:
    """A route-aware client of a sparkmq broker or cluster. Thread-safe (consumers excepted).

    ``endpoints``: the bootstrap list, one or more broker base URLs (a comma-separated string or
    a sequence; default ``config.endpoints``, else ``http://127.0.0.1:8080``), tried in order;
    any broker of a cluster is enough. Every broker and replica member named by its answers is
    remembered and asked when these die (:class:`cluster.KnownBrokers`).
    ``clock``/``sleep`` are injectable for tests. Raises
    :class:`~sparkmq.client.errors.InvalidArgument` for a malformed endpoint."""

    def __init__(
        self,
        endpoints: str | Sequence[str] | None = None,
        *,
        token: str | None = None,
        tls_ca: str | None = None,
        config: ClientConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        base = config or ClientConfig()
        seeds = parse_endpoints(endpoints) if endpoints is not None else base.endpoints
        self.config = replace(
            base,
            endpoints=seeds,
            token=token if token is not None else base.token,
            tls_ca=tls_ca if tls_ca is not None else base.tls_ca,
        ).validate()
        self._clock = clock
        self._sleep = sleep
        self._transport = Transport(self.config)
        self.directory = RouteDirectory(self._transport, self.config, clock)
        self.owners = Owners(self.directory, self._transport)
        self._producer = Producer(
            self.directory, self._transport, self.config.retry, clock=clock, sleep=sleep
        )

    # -- lifecycle --------------------------------------------------------------------------------

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- any broker -------------------------------------------------------------------------------

    def request(self, method: str, path: str, *, at: str | None = None, **kwargs: Any) -> Any:
        """Any request that every broker answers alike (``params``, ``json``, ``content``,
        ``headers``), sent to the first broker that answers, or to the broker at base URL
        ``at`` only (a question about that broker: ``/healthz``, ``/stats``); the decoded JSON."""
        if at is not None:
            return self._transport.call(at, method, path, **kwargs)
        answer, _ = self.directory.ask_any(method, path, **kwargs)
        return answer

    def ask_bootstrap(self, method: str, path: str, **kwargs: Any) -> tuple[Any, str]:
        """``(decoded JSON, URL that answered)`` from the first of the configured endpoints that
        answers, in order (never a broker learnt since): for questions about a broker the
        caller named, such as ``/healthz`` and ``/stats``."""
        return self.directory.ask_bootstrap(method, path, **kwargs)

    def cluster(self) -> ClusterInfo:
        """The brokers (name, alive, addresses, queue counts), fetched now."""
        return self.directory.cluster(refresh=True)

    def route(self, topic: str) -> TopicRoute:
        """Every queue of ``topic`` with its broker, fetched now; :class:`UnknownTopic` if none."""
        return self.owners.route(topic, refresh=True)

    # -- topics -----------------------------------------------------------------------------------

    def topics(self) -> list[dict[str, Any]]:
        """Topics and their queue counts."""
        return list(self.request("GET", "/topics")["topics"])

    def create_topic(self, topic: str, queues: int, brokers: Sequence[str] | None = None) -> dict[str, Any]:
        """Create ``topic`` with ``queues`` queue ids spread over the live brokers (or over
        ``brokers``), or grow it to ``queues``; existing queues never move."""
        body: dict[str, Any] = {"queues": queues}
        if brokers:
            body["brokers"] = list(brokers)
        created: dict[str, Any] = self.request("PUT", f"/topics/{segment(topic)}", json=body)
        self.directory.invalidate(topic)
        return created

    def delete_topic(self, topic: str) -> None:
        self.request("DELETE", f"/topics/{segment(topic)}")
        self.directory.invalidate(topic)

    def queue_offsets(self, topic: str) -> list[QueueOffsets]:
        """Per queue: its broker and the min/max offsets its owner reports."""
        return self.owners.bounds(self.owners.route(topic))

    def describe_topic(self, topic: str) -> dict[str, Any]:
        """``GET /topics/{t}``'s document with every queue's offsets read at its owner (and its
        ``broker``), so a cluster's topic reads as one."""
        route = self.owners.route(topic)
        rows = self.owners.bounds(route)
        return {
            "topic": topic,
            "queues": route.queue_count,
            "queue_offsets": [
                {
                    "queue_id": r.queue_id,
                    "min_offset": r.min_offset,
                    "max_offset": r.max_offset,
                    "broker": r.broker,
                    "alive": r.alive,
                }
                for r in rows
            ],
        }

    def offset_at(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first offset of the queue stored at or after ``timestamp_ms`` (at its owner)."""
        return self.owners.offset_at(self.owners.route(topic), queue_id, timestamp_ms)

    # -- producing --------------------------------------------------------------------------------

    @property
    def producer(self) -> Producer:
        return self._producer

    def send(
        self,
        topic: str,
        message: Message | Mapping[str, Any] | str | bytes,
        *,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> SendResult:
        """Store one message at its queue's owner (see :meth:`Producer.send`)."""
        return self._producer.send(topic, message, idempotency_key=idempotency_key, **fields)

    def send_batch(
        self,
        topic: str,
        messages: Sequence[Message | Mapping[str, Any]],
        *,
        idempotency_key: str | None = None,
        transaction: Mapping[str, Any] | None = None,
    ) -> list[SendResult]:
        """Store many messages, one request per owning broker (see :meth:`Producer.send_batch`)."""
        return self._producer.send_batch(topic, messages, idempotency_key=idempotency_key,
                                         transaction=transaction)  # fmt: skip

    def send_arrow(
        self, topic: str, data: pa.Table | pa.RecordBatch, *, idempotency_key: str | None = None
    ) -> list[SendResult]:
        """Store an Arrow table's rows, split by owning broker (see :meth:`Producer.send_arrow`)."""
        return self._producer.send_arrow(topic, data, idempotency_key=idempotency_key)

    # -- consuming --------------------------------------------------------------------------------

    def pull(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        max_messages: int = 32,
        wait_ms: int = 0,
        tags: str | None = None,
    ) -> PullResult:
        """One pull of one queue at its owner."""
        return self.owners.pull(self.owners.route(topic), queue_id, offset, max_messages=max_messages,
                                wait_ms=wait_ms, tags=tags)  # fmt: skip

    def committed_offsets(self, group: str, topic: str) -> dict[int, int]:
        """The group's committed offset per queue, read at each owner (-1: never committed)."""
        return self.owners.committed(self.owners.route(topic), group)

    def consumer(
        self,
        topic: str,
        *,
        group: str | None = None,
        queues: Iterable[int] | None = None,
        start: Start = "committed",
        tags: str | None = None,
    ) -> Consumer:
        """A :class:`Consumer` of ``topic`` (every queue, or ``queues``), starting at the group's
        committed offsets (``start="committed"``; earliest where none), ``"earliest"``,
        ``"latest"`` or explicit offsets per queue."""
        return Consumer(
            self.owners, topic, group=group, queues=queues, start=start, tags=tags,
            retry=self.config.retry, max_parallel_pulls=self.config.max_parallel_pulls,
            clock=self._clock, sleep=self._sleep,
        )  # fmt: skip

    def simple_consumer(
        self, topic: str, group: str, *, invisible_ms: int = 30_000, tags: str | None = None
    ) -> SimpleConsumer:
        """A POP consumer of ``topic`` for ``group``, competing with the group's other
        consumers: receive / ack / change the invisible time across every broker (docs/pop.md).
        The group must not commit offsets (409 ``group_kind_conflict``)."""
        return SimpleConsumer(
            self.directory, self._transport, topic, group, invisible_ms=invisible_ms, tags=tags,
            retry=self.config.retry, clock=self._clock, sleep=self._sleep,
        )  # fmt: skip
