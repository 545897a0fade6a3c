"""The backend of one broker: ``sparkmq serve``'s HTTP API (``ingest_api``).

Message ranges arrive as Arrow IPC streams (no Python object per message). The bulk pulls go
through :class:`ArrowPuller` (the stdlib's ``http.client``, one keep-alive connection per
thread), which reads a known-length body in one C-level loop: 1.6x the rows/s of httpx for
50k-row pages on this machine (bench/http_bench.py); the small JSON calls use httpx.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

import pyarrow as pa
import pyarrow.compute as pc

from store import EMPTY_MESSAGE_BATCH, GetStatus
from streaming.backend_contract import (
    BACKENDS,
    BACKENDS_LOCK,
    BackendError,
    BrokerUnreachable,
    QueueElsewhere,
    QueueHeads,
    ReadChunk,
)
from streaming.http_access import auth_headers, ssl_context

if TYPE_CHECKING:  # imported where used: a process that reads a store directory needs no httpx
    import httpx

ARROW_STREAM = "application/vnd.apache.arrow.stream"
#: The broker's cap on ``max_messages`` per pull (``broker.config.MAX_PULL_MESSAGES``).
MAX_PULL_MESSAGES = 100_000


class ArrowPuller:
    """GETs of Arrow IPC bodies over one keep-alive ``http.client`` connection per thread.

    A connection the broker closed (idle timeout, restart) is reopened once per request; GET
    is idempotent, so a retry after a broken connection is safe."""

    def __init__(
        self, base_url: str, timeout_s: float, headers: Mapping[str, str], tls_ca: str | None = None
    ) -> None:
        parts = urlsplit(base_url)
        self._context = ssl_context(tls_ca)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise BackendError(f"endpoint {base_url!r} is not an http(s) URL")
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname, parts.port
        self._prefix = parts.path.rstrip("/")
        self._timeout_s = timeout_s
        self._headers = {"Accept": ARROW_STREAM, **headers}
        self._local = threading.local()

    def _connection(self, fresh: bool) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None or fresh:
            if conn is not None:
                conn.close()
            if self._https:
                conn = http.client.HTTPSConnection(
                    self._host, self._port, timeout=self._timeout_s, context=self._context
                )
            else:
                conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout_s)
            self._local.conn = conn
        return conn

    def get(self, path: str, params: Mapping[str, Any]) -> tuple[int, http.client.HTTPMessage, bytes]:
        """``(status, headers, body)`` of ``GET path?params``."""
        target = f"{self._prefix}{path}?{urlencode(params)}"
        for attempt in (0, 1):
            conn = self._connection(fresh=attempt > 0)
            try:
                conn.request("GET", target, headers=self._headers)
                response = conn.getresponse()
                return response.status, response.headers, response.read()
            except (http.client.HTTPException, ConnectionError) as exc:
                if attempt:
                    raise BrokerUnreachable(f"GET {target} failed: {exc!r}") from exc
            except OSError as exc:  # a timeout, an unreachable host: not worth a retry
                conn.close()
                raise BrokerUnreachable(f"GET {target} failed: {exc!r}") from exc
        raise AssertionError("unreachable")


#: The request header a replica-group slave serves reads on (as the ``readFrom=replica`` query).
READ_FROM_HEADER = "x-sparkmq-read-from"


class EndpointBackend:
    """A broker's HTTP API (``ingest_api``): one pooled httpx client per process for the small
    JSON calls, an :class:`ArrowPuller` for the message pulls."""

    def __init__(
        self,
        base_url: str,
        timeout_s: float,
        auth_token: str | None = None,
        *,
        read_from: str = "master",
        tls_ca: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.auth_token = auth_token
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()
        #: Sent on every request: a slave of a replica group serves reads asked of it this way.
        self._headers = auth_headers(auth_token)
        self._verify = ssl_context(tls_ca) or True
        if read_from == "replica":
            self._headers[READ_FROM_HEADER] = "replica"
        self._puller = ArrowPuller(self.base_url, timeout_s, dict(self._headers), tls_ca)

    def _http(self) -> httpx.Client:
        import httpx

        with self._lock:
            if self._client is None:
                self._client = httpx.Client(
                    base_url=self.base_url, timeout=self.timeout_s, headers=self._headers, verify=self._verify
                )
            return self._client

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        """``GET url`` (a path) with the pooled client; :class:`BrokerUnreachable` when the broker
        does not answer or answers 503."""
        import httpx

        try:
            resp = self._http().get(url, **kwargs)
        except httpx.HTTPError as exc:
            raise BrokerUnreachable(f"GET {self.base_url}{url} failed: {exc!r}") from exc
        if resp.status_code == 503:
            raise BrokerUnreachable(f"GET {self.base_url}{url} -> HTTP 503: {resp.text[:300]}")
        return resp

    def refresh(self) -> None:
        """Nothing cached: every call asks the broker."""

    def topics(self) -> list[str]:
        resp = self.get("/topics")
        _raise_for_status(resp)
        return sorted(str(entry["topic"]) for entry in resp.json().get("topics") or [])

    def queue_heads(self, topic: str) -> QueueHeads:
        resp = self.get(f"/topics/{topic}")
        if resp.status_code == 404:
            return {}
        _raise_for_status(resp)
        return _parse_queue_heads(resp.json())

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        resp = self.get(
            f"/topics/{topic}/queues/{queue_id}/offset",
            params={"timestamp_ms": timestamp_ms, "boundary": "lower"},
        )
        _raise_for_status(resp)
        return int(resp.json()["offset"])

    def read_range(
        self, topic: str, queue_id: int, *, offset: int, end_offset: int, max_messages: int, tags: str
    ) -> ReadChunk:
        want = max(1, min(max_messages, end_offset - offset, MAX_PULL_MESSAGES))
        params: dict[str, Any] = {"offset": offset, "max_messages": want}
        if tags != "*":
            params["tags"] = tags
        path = f"/topics/{topic}/queues/{queue_id}/messages"
        status_code, headers, body = self._puller.get(path, params)
        if status_code == 404:
            return ReadChunk(GetStatus.NO_MATCHED_LOGIC_QUEUE, offset, 0, 0, EMPTY_MESSAGE_BATCH)
        if status_code == 307:
            raise QueueElsewhere(f"{self.base_url}{path}: {topic}/{queue_id} lives on another broker")
        if status_code == 503:
            raise BrokerUnreachable(f"GET {self.base_url}{path} -> HTTP 503: {body[:300]!r}")
        if status_code >= 400:
            raise BackendError(f"GET {self.base_url}{path} -> HTTP {status_code}: {body[:300]!r}")
        status = GetStatus(headers.get("X-Status", GetStatus.FOUND.value))
        next_offset = int(headers["X-Next-Offset"])
        min_offset = int(headers["X-Min-Offset"])
        max_offset = int(headers["X-Max-Offset"])
        batch = _ipc_to_batch(body)
        if batch.num_rows and next_offset > end_offset:
            # The broker may count matched messages rather than units: never cross the planned end.
            keep = pc.less(batch.column("queue_offset"), pa.scalar(end_offset, pa.int64()))
            batch = batch.filter(keep)
            next_offset = end_offset
        return ReadChunk(status, next_offset, min_offset, max_offset, batch)

    def commit_group_offsets(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        import httpx

        body = {"topic": topic, "offsets": {str(q): int(o) for q, o in sorted(offsets.items())}}
        try:
            resp = self._http().put(f"/groups/{group}/offsets", json=body)
        except httpx.HTTPError as exc:
            raise BrokerUnreachable(f"PUT {self.base_url}/groups/{group}/offsets failed: {exc!r}") from exc
        _raise_for_status(resp)

    def owner_of(self, topic: str, queue_id: int) -> str:
        return ""

    def release_pages(self) -> None:
        """Nothing is mapped: reads arrive over HTTP."""


def _raise_for_status(resp: Any) -> None:
    if resp.status_code >= 400:
        request = resp.request
        raise BackendError(f"{request.method} {request.url} -> HTTP {resp.status_code}: {resp.text[:300]}")


def _parse_queue_heads(doc: Any) -> QueueHeads:
    """``GET /topics/{topic}`` -> ``{"queue_offsets": [{"queue_id", "min_offset", "max_offset"}]}``."""
    entries = doc.get("queue_offsets") or []
    return {int(e["queue_id"]): (int(e["min_offset"]), int(e["max_offset"])) for e in entries}


def _ipc_to_batch(payload: bytes) -> pa.RecordBatch:
    if not payload:
        return EMPTY_MESSAGE_BATCH
    reader = pa.ipc.open_stream(pa.py_buffer(payload))
    batches = list(reader)
    if not batches:
        return EMPTY_MESSAGE_BATCH
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def broker_backend(
    url: str, timeout_s: float, auth_token: str | None, read_from: str, tls_ca: str | None = None
) -> EndpointBackend:
    """The process-wide backend of one broker: ``backend_for("broker", url, ...)`` (the same
    cache entry), for the cluster backend, which reads each queue at its owner."""
    key = ("broker", url, timeout_s, auth_token, False, read_from, tls_ca)
    with BACKENDS_LOCK:
        backend = BACKENDS.get(key)
        if backend is None:
            backend = EndpointBackend(url, timeout_s, auth_token, read_from=read_from, tls_ca=tls_ca)
            BACKENDS[key] = backend
    assert isinstance(backend, EndpointBackend)
    return backend
