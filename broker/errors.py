"""Refusals decided by the broker core, and the one table of how every refusal is answered.

A door decodes a request, calls the core and encodes what comes back; a refusal comes back as an
exception: :class:`BrokerError` for what the core itself decides (a bad batch entry, a missing
right, a queue that lives elsewhere), :class:`store.SparkMQError` (and the cluster's and
replication's subclasses) for faults below. Both carry a stable ``code``.

``status`` is the refusal's class in HTTP's vocabulary (400 bad input, 401/403 credentials and
rights, 404 unknown, 409 conflict, 503 retriable unavailability). The brokers' internal protocol
is HTTP (forwarding, fan-out), so these statuses are also what a peer answers; the other doors
map the same codes to their own error codes (Kafka's, RocketMQ's). :data:`STATUS_BY_CODE` holds
the status of every store and cluster code, once.
"""

from __future__ import annotations

import json
from typing import Any

from store import SparkMQError

#: Store error code -> HTTP status. Codes not listed (unexpected faults) are 500.
STATUS_BY_CODE: dict[str, int] = {
    "invalid_argument": 400,
    "invalid_topic": 400,
    "invalid_group": 400,
    "unknown_topic": 404,
    "unknown_queue": 404,
    "unknown_transaction": 404,
    "unknown_message": 404,
    "unknown_group": 404,
    "producer_group_mismatch": 409,
    "not_a_half_message": 400,
    "message_too_large": 413,
    "store_closed": 503,
    "store_not_writable": 503,
    "flush_timeout": 503,
    "index_behind": 503,
    "store_locked": 503,
    "data_lost": 410,
    "corrupt_store": 500,
    # the cluster layer (cluster.errors)
    "cluster_unavailable": 503,
    "queue_unavailable": 503,
    "no_live_broker": 503,
    "invalid_placement": 409,  # well formed, but not placeable on the cluster as it is
    "invalid_broker_name": 400,
    "broker_name_taken": 409,
    "store_belongs_elsewhere": 409,
    "corrupt_route": 500,
    # replication (store.ha): refusals carry RocketMQ's status in the body
    "not_master": 503,
    "replica_fenced": 503,
    "slave_not_available": 503,
    "flush_slave_timeout": 503,
    "replication_gap": 503,
    "replicated_data_corrupt": 500,
    # POP consumption (broker.pop.errors; docs/pop.md's table)
    # a handle this broker cannot place (malformed, forged, another group's) is unknown: 404
    "invalid_receipt_handle": 404,
    "receipt_handle_expired": 409,
    "receipt_handle_mismatch": 404,
    "invalid_max_messages": 400,
    "invalid_invisible_time": 400,
    "invalid_wait_time": 400,
    "invalid_group_settings": 400,
    "group_kind_conflict": 409,
}


class BrokerError(Exception):
    """A refusal decided by the broker core (bad batch entry, missing right, ...).

    ``extra`` fields travel with the refusal (e.g. ``index`` of a bad batch entry); a door puts
    them into its answer where its protocol has room (HTTP: the JSON body).
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
        #: Extra fields with a value (``None`` values are dropped).
        self.extra = {name: value for name, value in extra.items() if value is not None}


def status_of(exc: BrokerError | SparkMQError) -> int:
    """The refusal's status (500 for a store fault whose code has none)."""
    if isinstance(exc, BrokerError):
        return exc.status
    return STATUS_BY_CODE.get(exc.code, 500)


def error_body(exc: BrokerError | SparkMQError) -> tuple[int, dict[str, Any], dict[str, str] | None]:
    """``(status, {"error", "message", ...}, headers)``: how every refusal is answered over
    the brokers' HTTP protocol (the HTTP door renders it; a forwarding broker passes it on)."""
    if isinstance(exc, BrokerError):
        return exc.status, {"error": exc.code, "message": exc.message, **exc.extra}, exc.headers
    status = STATUS_BY_CODE.get(exc.code, 500)
    headers = {"Retry-After": "1"} if exc.retriable else None
    fields: dict[str, Any] = {"retriable": exc.retriable}
    broker = getattr(exc, "broker", None)  # a cluster fault names the broker it is about
    if broker is not None:
        fields["broker"] = broker
    return status, {"error": exc.code, "message": str(exc) or exc.code, **fields}, headers


def error_answer(exc: BrokerError | SparkMQError) -> tuple[int, bytes]:
    """``(status, JSON body)`` of a refusal, byte for byte what the HTTP door answers (a
    forwarding broker hands it back to its own client as if it had answered itself)."""
    status, body, _ = error_body(exc)
    return status, json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
