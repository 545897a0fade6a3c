"""Producing straight to each queue's owner, with retries that cannot duplicate.

A call is planned (:func:`sparkmq.client.routes.plan`): every entry gets its broker, and the
entries of one broker travel as one request (a *part*) marked as already routed
(``X-Sparkmq-Forwarded``, as the brokers mark what they forward): the owner stores it, or
refuses it with ``421 misdirected`` when the route changed, never forwarding it. Each part
carries the call's ``Idempotency-Key`` (the caller's, or one generated per call); when a call
spans brokers each part also carries ``X-Sparkmq-Idempotency-Scope``, as a broker scopes the
parts it forwards itself, so parts are deduplicated one by one.

After a retriable fault the routes are refetched, then, after a backoff and until the call's
deadline:

* a part whose attempt certainly stored nothing (the connection never opened, ``421``,
  ``queue_unavailable``, ``route_unknown``) is planned again on the fresh route: sharding keys
  map over the topic's current queue count, round-robin messages move to another live broker;
  parts that appear then get scopes of their own;
* any other part (no answer after sending, a 503 of the store) is sent again as it was (same
  broker, queue ids, key and scope), since that broker may hold the first attempt;
* a part whose broker the fresh route shows dead fails with
  :class:`~sparkmq.client.errors.QueueUnavailable` naming it, unless the broker is a replica
  group with live members (a failover under way: retried until the deadline).

A topic without a route yet is sent unrouted to any broker, which creates and plans it.
"""

from __future__ import annotations

import io
import json
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from sparkmq.client.config import RetryPolicy
from sparkmq.client.directory import RouteDirectory
from sparkmq.client.errors import (
    BatchIncomplete,
    BrokerUnreachable,
    ClientError,
    NoLiveBroker,
    QueueUnavailable,
    RouteMiss,
    error_from_answer,
    error_from_entry,
)
from sparkmq.client.messages import Message, SendResult
from sparkmq.client.routes import LOCAL_BROKER, QueuePicker, Target, TopicRoute, plan
from sparkmq.client.transport import ROUTED, SCOPE_HEADER, Transport, segment

ARROW_STREAM = "application/vnd.apache.arrow.stream"
JSON = "application/json"


def new_idempotency_key() -> str:
    """A key for a call the caller gave none: unique, 1-200 visible ASCII characters."""
    return "c-" + uuid.uuid4().hex


@dataclass
class _Part:
    """One broker's share of a call: entry indexes and their targets."""

    broker: str | None
    indexes: list[int]
    targets: list[Target]
    scope: str | None = None
    results: dict[int, SendResult] = field(default_factory=dict)


@dataclass(frozen=True)
class _Call:
    """What one send call sends: entries (JSON objects) or an Arrow table, and its key."""

    topic: str
    entries: Sequence[Mapping[str, Any]]
    key: str
    caller_key: bool
    single: bool
    transaction: Mapping[str, Any] | None = None
    table: pa.Table | None = None


def _not_stored(exc: ClientError) -> bool:
    """Whether the failed attempt certainly stored nothing (so it may go elsewhere)."""
    if isinstance(exc, BrokerUnreachable):
        return not exc.maybe_sent
    return isinstance(exc, RouteMiss | QueueUnavailable | NoLiveBroker)


class Producer:
    """Sends messages to their queues' owners. Thread-safe; get one from
    :meth:`sparkmq.client.Client.producer` (or use ``Client.send``)."""

    def __init__(
        self,
        directory: RouteDirectory,
        transport: Transport,
        retry: RetryPolicy,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._directory = directory
        self._transport = transport
        self._retry = retry
        self._clock = clock
        self._sleep = sleep
        self._picker = QueuePicker()

    # -- the public calls -------------------------------------------------------------------------

    def send(
        self,
        topic: str,
        message: Message | Mapping[str, Any] | str | bytes,
        *,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> SendResult:
        """Store one message: a :class:`Message`, a produce entry of the HTTP API (a dict), or
        a body with :class:`Message` fields as keyword arguments.

        Raises a :class:`~sparkmq.client.errors.ClientError` after retries (``retriable`` says
        whether calling again, with the same ``idempotency_key``, may succeed)."""
        if isinstance(message, Message):
            entry = message.to_entry()
        elif isinstance(message, Mapping):
            entry = dict(message)
        else:
            entry = Message(message, **fields).to_entry()
        call = _Call(topic, [entry], idempotency_key or new_idempotency_key(),
                     idempotency_key is not None, single=True)  # fmt: skip
        return self._run(call)[0]

    def send_batch(
        self,
        topic: str,
        messages: Sequence[Message | Mapping[str, Any]],
        *,
        idempotency_key: str | None = None,
        transaction: Mapping[str, Any] | None = None,
    ) -> list[SendResult]:
        """Store many messages, one request per owning broker; results in input order.

        ``messages`` may be :class:`Message` values or produce entries of the HTTP API (dicts).
        Each broker stores its part all or nothing; when some parts are stored and others are
        not after retries, :class:`~sparkmq.client.errors.BatchIncomplete` carries both.
        A ``transaction`` (or transactional entries) keeps the batch on one broker."""
        entries = [m.to_entry() if isinstance(m, Message) else dict(m) for m in messages]
        if not entries:
            return []
        call = _Call(topic, entries, idempotency_key or new_idempotency_key(), idempotency_key is not None,
                     single=False, transaction=transaction)  # fmt: skip
        return self._run(call)

    def send_arrow(
        self, topic: str, data: pa.Table | pa.RecordBatch, *, idempotency_key: str | None = None
    ) -> list[SendResult]:
        """Store the rows of an Arrow table (the HTTP API's Arrow batch columns: ``body`` and
        optional ``tags``, ``keys``, ``properties``, ``queue_id``, ``sharding_key``, ...), split
        by owning broker; results in row order."""
        table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
        if table.num_rows == 0:
            return []
        n = table.num_rows
        columns = table.column_names
        queue_ids = table.column("queue_id").to_pylist() if "queue_id" in columns else [None] * n
        keys = table.column("sharding_key").to_pylist() if "sharding_key" in columns else [None] * n
        entries = [{"queue_id": q, "sharding_key": k} for q, k in zip(queue_ids, keys, strict=True)]
        call = _Call(topic, entries, idempotency_key or new_idempotency_key(), idempotency_key is not None,
                     single=False, table=table)  # fmt: skip
        return self._run(call)

    # -- planning ---------------------------------------------------------------------------------

    def _route(self, call: _Call) -> TopicRoute | None:
        route = self._directory.route(call.topic)
        if route is not None and any((e.get("queue_id") or 0) >= route.queue_count for e in call.entries):
            route = self._directory.route(call.topic, refresh=True)  # the topic may have grown
        return route

    def _parts(self, call: _Call, route: TopicRoute | None, indexes: Sequence[int]) -> list[_Part]:
        """The entries ``indexes`` planned on ``route``, grouped by broker (no scopes yet)."""
        entries = [call.entries[i] for i in indexes]
        if any(e.get("topic") not in (None, call.topic) for e in entries):
            targets = [Target(None, None)] * len(entries)  # a batch across topics: a broker plans it
        else:
            transactional = call.transaction is not None or any(e.get("transaction") for e in entries)
            targets = plan(
                route,
                [e.get("queue_id") for e in entries],
                [e.get("sharding_key") for e in entries],
                anchor=call.key if call.caller_key else None,
                picker=self._picker,
                avoid=self._directory.avoided(),
                one_broker=transactional,
            )
        parts: dict[str | None, _Part] = {}
        for index, target in zip(indexes, targets, strict=True):
            part = parts.setdefault(target.broker, _Part(target.broker, [], []))
            part.indexes.append(index)
            part.targets.append(target)
        return list(parts.values())

    # -- sending ----------------------------------------------------------------------------------

    def _run(self, call: _Call) -> list[SendResult]:
        """Send every part until stored, retrying and re-planning within the deadline."""
        started = self._clock()
        todo = deque(self._parts(call, self._route(call), range(len(call.entries))))
        if len(todo) > 1:
            for part in todo:
                part.scope = part.broker
        done: list[_Part] = []
        errors: dict[int, ClientError] = {}
        attempt = 0
        while todo:
            part = todo.popleft()
            try:
                self._attempt(call, part)
                done.append(part)
                continue
            except ClientError as exc:
                failure = exc
            attempt += 1
            pause = self._retry.backoff_s(attempt)
            if not failure.retriable or self._clock() + pause - started > self._retry.deadline_ms / 1000:
                done.append(part)
                errors.update({i: failure for i in part.indexes if i not in part.results})
                continue
            todo.extendleft(reversed(self._recover(call, part, failure, attempt, done, errors)))
            self._sleep(pause)
        return self._results(call, done, errors)

    def _recover(
        self,
        call: _Call,
        part: _Part,
        failure: ClientError,
        generation: int,
        done: list[_Part],
        errors: dict[int, ClientError],
    ) -> list[_Part]:
        """After a retriable fault: refetch the route, then the parts to send next. A part whose
        attempt certainly stored nothing is planned again; any other goes back to the same
        broker with the same key and scope (it may hold the first attempt), unless the fresh
        route shows that broker dead."""
        if isinstance(failure, BrokerUnreachable) and not failure.maybe_sent:
            self._directory.suspect(part.broker)
        self._directory.invalidate(call.topic)
        try:
            route = self._directory.route(call.topic, refresh=True)
        except ClientError:
            return [part]  # no broker answers: the same again after the pause
        if not _not_stored(failure):
            if self._dead(call, part, route, errors):
                done.append(part)
                return []
            return [part]
        done.append(part)
        try:
            return self._replanned(call, part, route, generation, errors)
        except ClientError as exc:  # e.g. no live broker left for round robin
            errors.update({i: exc for i in part.indexes if i not in part.results})
            return []

    def _replanned(
        self,
        call: _Call,
        part: _Part,
        route: TopicRoute | None,
        generation: int,
        errors: dict[int, ClientError],
    ) -> list[_Part]:
        """What ``part`` has not stored, planned again on the fresh ``route`` (an attempt that
        certainly stored nothing: a route miss, a refused connection, a dead owner). New parts
        get scopes of their own, unless one unscoped part simply moves."""
        remaining = [i for i in part.indexes if i not in part.results]
        parts = self._parts(call, route, remaining)
        if not (part.scope is None and not part.results and len(parts) == 1):
            for new in parts:
                new.scope = f"{new.broker}~{generation}"
        return [new for new in parts if not self._dead(call, new, route, errors)]

    def _dead(
        self, call: _Call, part: _Part, route: TopicRoute | None, errors: dict[int, ClientError]
    ) -> bool:
        """Whether the fresh route shows the part's owner dead; records the fault if so."""
        if route is None or part.broker is None or part.broker not in route.brokers():
            return False
        if route.alive(part.broker) or route.electing(part.broker):
            return False  # alive, or its slave is about to lead: retried until the deadline
        owned = sorted({t.queue_id for t in part.targets if t.queue_id is not None})
        which = f"queue {owned[0]}" if len(owned) == 1 else "its queues"
        fault = QueueUnavailable(
            f"broker {part.broker}, which owns {which} of topic {call.topic!r}, is not alive",
            broker=part.broker,
            code="queue_unavailable",
        )
        errors.update({i: fault for i in part.indexes if i not in part.results})
        return True

    def _results(
        self, call: _Call, parts: Sequence[_Part], errors: Mapping[int, ClientError]
    ) -> list[SendResult]:
        results: list[SendResult | None] = [None] * len(call.entries)
        for part in parts:
            for index, result in part.results.items():
                results[index] = result
        if errors:
            if len(errors) == len(results):
                raise next(iter(errors.values()))
            stored, first = len(results) - len(errors), next(iter(errors.values()))
            raise BatchIncomplete(
                f"{stored} of {len(results)} messages stored; {len(errors)} not: {first}",
                results=results,
                errors=errors,
            )
        return [r for r in results if r is not None]

    def _attempt(self, call: _Call, part: _Part) -> None:
        """One request for the part; fills ``part.results`` or raises its fault."""
        url = (
            self._directory.address(part.broker, self._directory.route(call.topic))
            if part.broker is not None
            else self._directory.any_url()
        )
        headers = {"Idempotency-Key": call.key}
        if part.scope is not None:
            headers[SCOPE_HEADER] = part.scope
        if part.broker is not None:
            headers.update(ROUTED)  # the owner stores it, or answers 421 if it moved
        if call.single:
            path, body = f"/topics/{segment(call.topic)}/messages", self._json_entries(call, part)[0]
            headers["content-type"] = JSON
            content = _encode(body)
        elif call.table is not None:
            path, content = f"/topics/{segment(call.topic)}/messages:batch", self._arrow_part(call, part)
            headers["content-type"] = ARROW_STREAM
        else:
            document: dict[str, Any] = {"messages": self._json_entries(call, part)}
            if call.transaction is not None:
                document["transaction"] = dict(call.transaction)
            path, content = f"/topics/{segment(call.topic)}/messages:batch", _encode(document)
            headers["content-type"] = JSON
        try:
            response = self._transport.send(
                url, "POST", path, broker=part.broker, content=content, headers=headers
            )
        except BrokerUnreachable:
            self._directory.known.unreachable(url)  # the next route comes from another broker
            raise
        if not 200 <= response.status_code < 300:
            raise error_from_answer(response, part.broker)
        answer = response.json()
        documents = [answer] if call.single else list(answer.get("results", ()))
        # a lone broker's answers name no broker; a cluster's always do
        named = part.broker or (LOCAL_BROKER if self._directory.cluster().mode == "single" else None)
        failures = {}
        for index, document in zip(part.indexes, documents, strict=True):
            if "error" in document:
                failures[index] = error_from_entry(document)
            elif index not in part.results:
                part.results[index] = SendResult.from_json(document, named)
        if part.broker is None or any(r.broker != part.broker for r in part.results.values()):
            self._directory.invalidate(call.topic)  # created by a broker, or forwarded: stale route
        if failures:
            raise next(iter(failures.values()))

    def _json_entries(self, call: _Call, part: _Part) -> list[dict[str, Any]]:
        out = []
        for index, target in zip(part.indexes, part.targets, strict=True):
            entry = dict(call.entries[index])
            if target.picked:
                entry["queue_id"] = target.queue_id
            out.append(entry)
        return out

    def _arrow_part(self, call: _Call, part: _Part) -> bytes:
        assert call.table is not None
        table = call.table.take(pa.array(part.indexes, pa.int64()))
        queue_ids = [
            t.queue_id if t.picked else call.entries[i].get("queue_id")
            for i, t in zip(part.indexes, part.targets, strict=True)
        ]
        if "queue_id" in table.column_names:
            table = table.drop_columns(["queue_id"])
        table = table.append_column("queue_id", pa.array(queue_ids, pa.int32()))
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        return sink.getvalue()


def _encode(document: Any) -> bytes:
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
