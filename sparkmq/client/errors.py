"""Faults the client could not get past, each named after what happened.

Every error carries ``retriable``: ``True`` when the same call may succeed later unchanged (a
broker down or restarting, a queue whose owner is not alive, ZooKeeper away, a full disk),
``False`` when the request itself is wrong (a bad field, an unknown topic, a missing right).
The client has already retried retriable faults within its deadline before raising them.

HTTP answers map to these in one place (:func:`error_from_answer`); the broker's own error code
and message are kept (``code``, ``status``, ``broker``) and ``str(error)`` reads like
``error 404 unknown_topic: topic 'x' does not exist``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx


class ClientError(Exception):
    """A fault of a sparkmq client call (the root of this module's errors)."""

    retriable: bool = False

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        broker: str | None = None,
        retriable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.broker = broker
        if retriable is not None:
            self.retriable = retriable

    def __str__(self) -> str:
        if self.status is None:
            return self.message
        code = f" {self.code}" if self.code else ""
        return f"error {self.status}{code}: {self.message}"


class InvalidArgument(ClientError, ValueError):
    """A value the client refuses before sending anything (e.g. a message without a body)."""


class BrokerUnreachable(ClientError):
    """No answer from a broker: connection refused, timed out, or cut mid-answer.

    ``maybe_sent`` is ``False`` when the request certainly never reached the broker (the
    connection could not be opened), so it may go to another broker without risk of a duplicate."""

    retriable = True

    def __init__(self, message: str, *, url: str, broker: str | None = None, maybe_sent: bool = True) -> None:
        super().__init__(message, broker=broker)
        self.url = url
        self.maybe_sent = maybe_sent


class RequestRefused(ClientError):
    """The broker refused the request as it is (4xx): retrying it unchanged will not help."""


class NotFound(RequestRefused):
    """404: no such topic, queue, group or message."""


class UnknownTopic(NotFound):
    """404 ``unknown_topic``: the topic does not exist (and the broker does not create it)."""


class AccessDenied(RequestRefused):
    """401/403: the token is missing, unknown, or lacks the right."""


class RouteMiss(ClientError):
    """The route the client used is stale: ``421 misdirected``, a ``307`` to another broker,
    ``503 route_unknown`` or an answer from a broker other than the queue's owner. The client
    refreshes its routes and retries; this is raised only when the deadline ran out first."""

    retriable = True


class QueueUnavailable(ClientError):
    """503 ``queue_unavailable``: the broker that owns the queue (``broker``) is not alive."""

    retriable = True


class NoLiveBroker(ClientError):
    """No live broker owns a queue of the topic (or none answers)."""

    retriable = True


class BrokerError(ClientError):
    """The broker failed the request (5xx): ``retriable`` as the broker says (503 with
    ``Retry-After``: the store cannot write now, ZooKeeper is away)."""


class BatchIncomplete(ClientError):
    """Part of a batch was stored and part was not, after retries.

    ``results[i]`` is entry i's result (``None`` when it was not stored) and ``errors`` maps the
    index of each entry that was not stored to its fault. Sending the same batch again with the
    same ``Idempotency-Key`` stores only what is missing."""

    def __init__(self, message: str, *, results: Sequence[Any], errors: Mapping[int, ClientError]) -> None:
        super().__init__(message, retriable=all(e.retriable for e in errors.values()))
        self.results = list(results)
        self.errors = dict(errors)


def _document(response: httpx.Response) -> dict[str, Any]:
    try:
        document = response.json()
    except ValueError:
        return {}
    return document if isinstance(document, dict) else {}


def error_from_answer(response: httpx.Response, broker: str | None = None) -> ClientError:
    """The error for a broker's non-2xx answer (its JSON ``{"error", "message", ...}`` kept)."""
    status = response.status_code
    document = _document(response)
    code = document.get("error")
    message = str(document.get("message") or response.text or response.reason_phrase)
    named = document.get("broker") if isinstance(document.get("broker"), str) else None
    fields: dict[str, Any] = {"status": status, "code": code, "broker": named or broker}
    if status == 307:
        where = response.headers.get("location", "?")
        return RouteMiss(f"the queue is served elsewhere ({where})", **fields)
    if status == 404:
        return (UnknownTopic if code == "unknown_topic" else NotFound)(message, **fields)
    if status in (401, 403):
        return AccessDenied(message, **fields)
    if status == 421 or code == "route_unknown":
        return RouteMiss(message, **fields)
    if code == "queue_unavailable":
        return QueueUnavailable(message, **fields)
    if code == "no_live_broker":
        return NoLiveBroker(message, **fields)
    if status < 500:
        return RequestRefused(message, **fields)
    retriable = bool(document.get("retriable", status in (502, 503, 504)))
    return BrokerError(message, retriable=retriable, **fields)


def error_from_entry(document: Mapping[str, Any]) -> ClientError:
    """The error of one entry of a batch answered per entry (``207``): ``{"index", "error",
    "message", "broker"}``."""
    code = str(document.get("error", "entry_failed"))
    message = str(document.get("message", code))
    broker = document.get("broker")
    if code == "queue_unavailable":
        return QueueUnavailable(message, code=code, broker=broker)
    if code in ("route_unknown", "misdirected"):
        return RouteMiss(message, code=code, broker=broker)
    if code == "no_live_broker":
        return NoLiveBroker(message, code=code, broker=broker)
    retriable = code in ("store_not_writable", "flush_timeout", "store_closed", "cluster_unavailable")
    return ClientError(message, code=code, broker=broker, retriable=retriable)
