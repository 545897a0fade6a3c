"""The sink's HTTP client for ``endpoint`` mode (routes in ``ingest_api/http/routers/sinks.py``).

Every call is idempotent (a part id is unique per task attempt; a commit of a decided batch
publishes the earlier decision), so transport errors and 5xx answers — a broker restarting
mid-batch — are retried with backoff until ``retry_timeout_s``; 4xx answers are final.

``endpoint`` is a bootstrap list; every broker and replica member named by ``GET /cluster`` is
learnt at the first call and kept (:class:`cluster.KnownBrokers`): an address that refuses
connections before any broker has taken a request is skipped for the next. Once a broker has
taken one, the client stays with its replica group: staged parts and decisions live there.
When that address stops answering connections, or answers that it is not the master (``503
not_master`` / ``replica_fenced``: only a group's master stages and decides), the client moves
to the next member of the same group: a group's master writes parts and decisions into its
CommitLog too (:mod:`store.publish.sink_log`), so the member a failover promotes has them. A lone broker
has no other member: the client waits for it (a broker that restarts resumes its decisions);
moving to another broker would ask it for parts it never saw.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from cluster import KnownBrokers
from store import SparkMQError
from store.publish import StagedPart
from streaming.http_access import auth_headers, ssl_context
from streaming.sink_columns import SinkOptions

if TYPE_CHECKING:  # imported where used: the source's runner imports this module, not httpx
    import httpx

ARROW_FILE = "application/vnd.apache.arrow.file"


class SinkRequestFailed(SparkMQError):
    """The broker refused a sink request, or stayed unreachable for the whole retry window."""

    code = "sink_request_failed"


#: The error codes of a replica group member that is not the master (store.errors.NotMaster).
NOT_THE_MASTER = frozenset({"not_master", "replica_fenced"})


def _not_the_master(response: httpx.Response) -> bool:
    try:
        return response.status_code == 503 and response.json().get("error") in NOT_THE_MASTER
    except ValueError:
        return False


def replica_groups(document: dict[str, Any]) -> list[tuple[str, ...]]:
    """The members' HTTP addresses of each replica group in a ``GET /cluster`` answer."""
    groups = []
    for broker in document.get("brokers") or ():
        members = [m.get("http") for m in broker.get("members") or ()]
        urls = [u.rstrip("/") for u in [broker.get("http"), *members] if isinstance(u, str) and u]
        if len(set(urls)) > 1:
            groups.append(tuple(dict.fromkeys(urls)))
    return groups


class SinkClient:
    """One pooled client per (endpoint, token) and process (Spark reuses its workers)."""

    _cache: dict[tuple[str, str | None, str | None], SinkClient] = {}
    _cache_lock = threading.Lock()

    def __init__(
        self,
        endpoint: str,
        token: str | None,
        timeout_s: float,
        retry_timeout_s: float,
        tls_ca: str | None = None,
    ) -> None:
        import httpx

        verify = ssl_context(tls_ca) or True
        self._http = httpx.Client(headers=auth_headers(token), timeout=timeout_s, verify=verify)
        self.known = KnownBrokers(endpoint.split(","))
        self._learnt = False
        #: The broker that took this client's first request (see :meth:`_call`).
        self._pinned: str | None = None
        #: Every replica group's members' addresses, as ``GET /cluster`` names them.
        self._groups: list[tuple[str, ...]] = []
        self.retry_timeout_s = retry_timeout_s

    def _learn(self, again: bool = False) -> None:
        """Once (``again``: once more): every address ``GET /cluster`` names (brokers and
        replica members) and the replica groups."""
        import httpx

        if self._learnt and not again:
            return
        for base in self.known.candidates():
            try:
                document = self._http.get(base + "/cluster", timeout=5).json()
                self.known.learn_from(document)
            except (httpx.HTTPError, ValueError):
                continue
            self._groups = replica_groups(document)
            self._learnt = True
            return

    def _next_member(self, url: str) -> str:
        """The member after ``url`` in its replica group (``url`` itself outside any group),
        from the groups ``GET /cluster`` names now: the members learnt before may be gone, and
        a member restarted since may be the master (asked at a failure only, with backoff)."""
        self._learn(again=True)
        for group in self._groups:
            if url in group and len(group) > 1:
                return group[(group.index(url) + 1) % len(group)]
        return url

    @classmethod
    def for_options(cls, options: SinkOptions) -> SinkClient:
        assert options.endpoint is not None
        key = (options.endpoint, options.auth_token, options.tls_ca)
        with cls._cache_lock:
            client = cls._cache.get(key)
            if client is None:
                client = cls._cache[key] = cls(
                    options.endpoint,
                    options.auth_token,
                    options.request_timeout_s,
                    options.retry_timeout_s,
                    options.tls_ca,
                )
            client.retry_timeout_s = options.retry_timeout_s
            return client

    def put_part(self, sink_id: str, batch_id: int, part_id: str, payload: bytes) -> int:
        answer = self._call(
            "PUT",
            f"/sinks/{sink_id}/batches/{batch_id}/parts/{part_id}",
            content=payload,
            headers={"content-type": ARROW_FILE},
        )
        return int(answer["rows"])

    def commit(self, sink_id: str, batch_id: int, parts: Sequence[StagedPart]) -> dict[str, Any]:
        body = {"parts": [{"part_id": p.part_id, "rows": p.rows} for p in parts]}
        return self._call("POST", f"/sinks/{sink_id}/batches/{batch_id}:commit", json=body)

    def abort(self, sink_id: str, batch_id: int, part_ids: Sequence[str]) -> dict[str, Any]:
        return self._call(
            "POST", f"/sinks/{sink_id}/batches/{batch_id}:abort", json={"part_ids": list(part_ids)}
        )

    def _call(self, method: str, url: str, **kwargs: Any) -> dict[str, Any]:
        import httpx

        deadline = time.monotonic() + self.retry_timeout_s
        delay = 0.1
        self._learn()
        while True:
            # Staged parts and decisions live on the broker that took them: once a broker has
            # seen a request (it answered, or the connection broke after sending), the batch
            # protocol stays with it (a restarted broker resumes its decisions). Before that,
            # an address that refuses connections is skipped for the next one known.
            base = self._pinned or self.known.best()
            try:
                response = self._http.request(method, base + url, **kwargs)
            except httpx.ConnectError as exc:
                if self._pinned is None:
                    self.known.unreachable(base)
                else:  # the group's next member: a failover may have promoted it
                    self._pinned = self._next_member(base)
                problem = f"{base}: {type(exc).__name__}: {exc}"
            except httpx.TransportError as exc:
                self._pinned = base
                problem = f"{base}: {type(exc).__name__}: {exc}"
            else:
                if response.status_code < 300:
                    self._pinned = base
                    answer: dict[str, Any] = response.json()
                    return answer
                if response.status_code < 500:
                    raise SinkRequestFailed(
                        f"{method} {url}: HTTP {response.status_code}: {response.text[:500]}"
                    )
                problem = f"HTTP {response.status_code}: {response.text[:200]}"
                if _not_the_master(response):  # a slave, or a fenced master: its group's next member
                    if self._pinned is None:
                        self.known.unreachable(base)
                    else:
                        self._pinned = self._next_member(base)
            if time.monotonic() + delay > deadline:
                raise SinkRequestFailed(
                    f"{method} {url}: broker unavailable for {self.retry_timeout_s:.0f}s ({problem})"
                )
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
