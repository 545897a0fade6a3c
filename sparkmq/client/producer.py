"""Producing straight to each queue's owner, with retries that cannot duplicate.

A call is planned once (:func:`sparkmq.client.routes.plan`): every entry gets its broker, and
the entries of one broker travel as one request (a *part*). Each part carries the call's
``Idempotency-Key`` (the caller's, or one generated per call); when a call spans brokers each
part also carries ``X-Sparkmq-Idempotency-Scope: <its broker>``, the scope a broker gives the
parts it forwards itself, so a part is deduplicated exactly as if one broker had split the
request. A part is retried as it was first sent (same entries, queue ids, key and scope):

* on a retriable fault (no answer, ``503``, a route miss) the routes are refetched and the part
  is sent again after a backoff, until the call's deadline;
* a part of round-robin messages whose attempt was certainly not stored (the connection never
  opened, ``421``, ``queue_unavailable``) moves to another live broker's queues; any other part
  stays where it is, so a retry reaches the broker that may hold the first attempt;
* a part whose owner the refreshed routes show dead fails at once with
  :class:`~sparkmq.client.errors.QueueUnavailable` naming the broker.

An answer from a broker other than the one planned (the topic grew and a sharding key now maps
elsewhere, so the owner forwarded it) is a success that marks the route stale.
"""

from __future__ import annotations

import io
import json
import time
import uuid
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
from sparkmq.client.transport import Transport, segment

#: Request header scoping the Idempotency-Key of one broker's part of a request (the brokers'
#: own ``ingest_api.http.routing.SCOPE_HEADER``).
SCOPE_HEADER = "x-sparkmq-idempotency-scope"
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
    picked: bool = False
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

    def _targets(self, call: _Call, route: TopicRoute | None) -> list[Target]:
        entries = call.entries
        if any(e.get("topic") not in (None, call.topic) for e in entries):
            return [Target(None, None)] * len(entries)  # a batch across topics: a broker plans it
        transactional = call.transaction is not None or any(e.get("transaction") for e in entries)
        return plan(
            route,
            [e.get("queue_id") for e in entries],
            [e.get("sharding_key") for e in entries],
            anchor=call.key if call.caller_key else None,
            picker=self._picker,
            avoid=self._directory.avoided(),
            one_broker=transactional,
        )

    def _parts(self, call: _Call) -> list[_Part]:
        route = self._directory.route(call.topic)
        if route is not None and any((e.get("queue_id") or 0) >= route.queue_count for e in call.entries):
            route = self._directory.route(call.topic, refresh=True)  # the topic may have grown
        targets = self._targets(call, route)
        parts: dict[str | None, _Part] = {}
        for index, target in enumerate(targets):
            part = parts.setdefault(target.broker, _Part(target.broker, [], []))
            part.indexes.append(index)
            part.targets.append(target)
            part.picked = part.picked or target.picked
        spans = len(parts) > 1
        for part in parts.values():
            part.scope = part.broker if spans else None
        return list(parts.values())

    # -- sending ----------------------------------------------------------------------------------

    def _run(self, call: _Call) -> list[SendResult]:
        started = self._clock()
        parts = self._parts(call)
        errors: dict[int, ClientError] = {}
        for part in parts:
            failed = self._send_part(call, part, started)
            if failed is not None:
                errors.update({i: failed for i in part.indexes if i not in part.results})
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

    def _send_part(self, call: _Call, part: _Part, started: float) -> ClientError | None:
        """Send one part until it is stored or the deadline passes; the last fault, if any."""
        attempt = 0
        while True:
            try:
                self._attempt(call, part)
                return None
            except ClientError as exc:
                failure = exc
            attempt += 1
            pause = self._retry.backoff_s(attempt)
            if not failure.retriable or self._clock() + pause - started > self._retry.deadline_ms / 1000:
                return failure
            if isinstance(failure, BrokerUnreachable) and not failure.maybe_sent:
                self._directory.suspect(part.broker)
            try:
                dead = self._replan(call, part, failure)
            except ClientError as exc:
                return exc
            if dead is not None:
                return dead
            self._sleep(pause)

    def _replan(self, call: _Call, part: _Part, failure: ClientError) -> ClientError | None:
        """Refetch the route after a failed attempt; move a round-robin part that stored nothing.
        Returns the fault to give up with when the part's owner is known to be dead."""
        self._directory.invalidate(call.topic)
        route = self._directory.route(call.topic, refresh=True)
        if route is None or part.broker is None:
            return None
        if part.picked and _not_stored(failure) and not part.results:
            avoid = self._directory.avoided() | {part.broker}
            if call.single:
                queue = self._picker.next_queue(route, avoid)
                broker, queues = route.owner(queue), [queue]
            else:
                broker = self._picker.next_broker(route, avoid)
                queues = self._picker.spread(route, broker, len(part.indexes))
            part.broker = broker
            part.targets = [Target(broker, q, picked=True) for q in queues]
            return None
        if part.broker in route.brokers() and not route.alive(part.broker):
            owned = sorted({t.queue_id for t in part.targets if t.queue_id is not None})
            which = f"queue {owned[0]}" if len(owned) == 1 else "its queue"
            return QueueUnavailable(
                f"broker {part.broker}, which owns {which} of topic {call.topic!r}, is not alive",
                broker=part.broker,
                code="queue_unavailable",
            )
        return None

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
        response = self._transport.send(
            url, "POST", path, broker=part.broker, content=content, headers=headers
        )
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
