"""Requests that go to a queue's owner: pulls, queue bounds, group offsets and commits.

A queue's messages and its groups' committed offsets live at its owner. Any broker would answer
these too, by asking the owners itself (or with a 307 for pulls); the client asks the owners
directly, one request per owning broker, marked as already routed so each answers from its own
store. A broker that cannot be reached is reported as a value, so the others' answers still count.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparkmq.client.directory import RouteDirectory
from sparkmq.client.errors import BrokerUnreachable, ClientError, UnknownTopic
from sparkmq.client.messages import PullResult, QueueOffsets
from sparkmq.client.routes import TopicRoute
from sparkmq.client.transport import ROUTED, Transport, segment


class Owners:
    """The owner-side calls of one client (shares its route directory and transport)."""

    def __init__(self, directory: RouteDirectory, transport: Transport) -> None:
        self.directory = directory
        self.transport = transport

    def route(self, topic: str, refresh: bool = False) -> TopicRoute:
        """The topic's route; :class:`UnknownTopic` when no broker knows it."""
        route = self.directory.route(topic, refresh=refresh)
        if route is None:
            raise UnknownTopic(f"topic {topic!r} does not exist", status=404, code="unknown_topic")
        return route

    def _ask(
        self, route: TopicRoute, broker: str, method: str, path: str, *, local: bool = False, **kwargs: Any
    ) -> Any:
        """``local``: the owner answers from its own store (not for the whole cluster)."""
        url = self.directory.address(broker, route)
        headers = ROUTED if local else None
        try:
            return self.transport.call(url, method, path, broker=broker, headers=headers, **kwargs)
        except BrokerUnreachable:
            self.directory.known.unreachable(url)  # ask the others first for the next route
            raise

    def per_owner(
        self, route: TopicRoute, method: str, path: str, **kwargs: Any
    ) -> dict[str, Any | ClientError]:
        """The same request to every owner of the topic: each answer, or the fault a broker
        gave (a refusal other than unreachable is raised: it would be the same everywhere)."""
        answers: dict[str, Any | ClientError] = {}
        for broker in route.brokers():
            try:
                answers[broker] = self._ask(route, broker, method, path, local=True, **kwargs)
            except ClientError as exc:
                if not exc.retriable:
                    raise
                answers[broker] = exc
        return answers

    def pull(
        self,
        route: TopicRoute,
        queue_id: int,
        offset: int,
        *,
        max_messages: int = 32,
        wait_ms: int = 0,
        tags: str | None = None,
    ) -> PullResult:
        """One pull of ``queue_id`` at its owner (a long-poll when ``wait_ms`` > 0)."""
        broker = route.owner(queue_id)
        params: dict[str, Any] = {"offset": offset, "max_messages": max_messages, "wait_ms": wait_ms}
        if tags:
            params["tags"] = tags
        document = self._ask(
            route, broker, "GET", f"/topics/{segment(route.topic)}/queues/{queue_id}/messages",
            params=params, wait_ms=wait_ms,
        )  # fmt: skip
        return PullResult.from_json(document, broker)

    def bounds(self, route: TopicRoute) -> list[QueueOffsets]:
        """Every queue's min and max offset as its owner reports them (``None`` when the owner
        does not answer)."""
        answers = self.per_owner(route, "GET", f"/topics/{segment(route.topic)}")
        rows = []
        for queue in route.queues:
            answer = answers.get(queue.broker)
            found: Mapping[str, Any] | None = None
            if not isinstance(answer, ClientError) and answer is not None:
                found = next(
                    (q for q in answer.get("queue_offsets") or () if q["queue_id"] == queue.queue_id), None
                )
            rows.append(
                QueueOffsets(
                    queue_id=queue.queue_id,
                    broker=queue.broker,
                    alive=queue.alive and not isinstance(answer, ClientError),
                    min_offset=found["min_offset"] if found else None,
                    max_offset=found["max_offset"] if found else None,
                )
            )
        return rows

    def committed(self, route: TopicRoute, group: str) -> dict[int, int]:
        """The group's committed offset per queue (-1: never committed; queues whose owner
        does not answer are left out)."""
        path = f"/groups/{segment(group)}/offsets"
        answers = self.per_owner(route, "GET", path, params={"topic": route.topic})
        out = {}
        for queue in route.queues:
            answer = answers.get(queue.broker)
            if answer is None or isinstance(answer, ClientError):
                continue
            out[queue.queue_id] = int(answer["offsets"].get(str(queue.queue_id), -1))
        return out

    def commit(self, route: TopicRoute, group: str, offsets: Mapping[int, int]) -> dict[str, ClientError]:
        """Commit next-to-consume ``offsets`` at each queue's owner; the brokers that failed."""
        by_owner: dict[str, dict[str, int]] = {}
        for queue_id, offset in offsets.items():
            by_owner.setdefault(route.owner(queue_id), {})[str(queue_id)] = offset
        failed = {}
        for broker, part in by_owner.items():
            try:
                self._ask(route, broker, "PUT", f"/groups/{segment(group)}/offsets", local=True,
                          json={"topic": route.topic, "offsets": part})  # fmt: skip
            except ClientError as exc:
                if not exc.retriable:
                    raise
                failed[broker] = exc
        return failed

    def offset_at(self, route: TopicRoute, queue_id: int, timestamp_ms: int) -> int:
        """The first offset of ``queue_id`` stored at or after ``timestamp_ms``."""
        document = self._ask(
            route, route.owner(queue_id), "GET", f"/topics/{segment(route.topic)}/queues/{queue_id}/offset",
            params={"timestamp_ms": timestamp_ms},
        )  # fmt: skip
        return int(document["offset"])
