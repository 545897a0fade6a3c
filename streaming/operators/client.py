"""The operator job's HTTP calls to its broker: settings, one POST per micro-batch, status.

Calls are retried (with back-off, up to 5 minutes) while the broker restarts: a batch's POST is
idempotent on the broker's side (decided once per batch id), so retrying it is safe.

``endpoint`` is a bootstrap list (``--endpoint http://a:8081,http://b:8082``). The job's broker
is a broker *name*: a replica group whose master may move. So the client learns the members of
that group (``GET /cluster``: the group of the broker that answers, ``self``) and, when the
address it uses does not answer, goes to the next one (:class:`cluster.KnownBrokers`); the job
acts only while the member it talks to leads (:meth:`BrokerClient.leads`). Other brokers of the
cluster are never learnt: their operators are their own jobs'. A job a broker supervises
(``--path``: it reads that broker's own store) learns nothing and talks to that broker only: its
batch ids are its own, and another member's job posts its own.
"""

from __future__ import annotations

import io
import logging
import ssl
import threading
import time
from typing import Any

import httpx
import pyarrow as pa

from cluster import KnownBrokers
from streaming.http_access import ssl_context

log = logging.getLogger("sparkmq.operators")


class BrokerClient:
    """The job's HTTP calls to the broker (retried while the broker restarts)."""

    def __init__(
        self,
        endpoint: str,
        auth_token: str | None = None,
        timeout_s: float = 60.0,
        *,
        learn_group: bool = True,
        tls_ca: str | None = None,
        client_cert: tuple[str, str] | None = None,
        stop: threading.Event | None = None,
        retry_s: float = 300.0,
    ) -> None:
        """``tls_ca``: a PEM file the brokers' HTTPS certificates are verified with (``None``:
        the system's CAs); ``client_cert``: (certificate, key) PEM files presented to a broker
        that requires one (``--tls-require-client-cert``). A file that cannot be read raises
        ``OSError``/``ssl.SSLError`` here. ``stop``: once set, a call waiting for the broker gives
        up at its next retry (the job is stopping); ``retry_s``: how long a call waits for the broker."""
        headers = {"authorization": f"Bearer {auth_token}"} if auth_token else {}
        verify: ssl.SSLContext | bool = ssl_context(tls_ca) or True
        if client_cert is not None:
            verify = verify if isinstance(verify, ssl.SSLContext) else ssl.create_default_context()
            verify.load_cert_chain(*client_cert)
        self.http = httpx.Client(headers=headers, timeout=timeout_s, verify=verify)
        self.known = KnownBrokers(endpoint.split(","))
        self._group_learnt = not learn_group
        self._stop = stop or threading.Event()
        self._retry_s = retry_s

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """``method path`` at the first known member that answers; the last transport error
        (naming every address tried) when none does."""
        self._learn_group()
        problems = []
        for base in self.known.candidates():
            try:
                resp = self.http.request(method, base + path, **kwargs)
            except httpx.TransportError as exc:
                self.known.unreachable(base)
                problems.append(f"{base}: {exc}")
                continue
            self.known.answered(base)
            return resp
        raise httpx.TransportError("no broker answered (tried " + "; ".join(problems) + ")")

    def _learn_group(self) -> None:
        """Once: the members of the answering broker's replica group (see the module docstring)."""
        if self._group_learnt:
            return
        for base in self.known.candidates():
            try:
                doc = self.http.get(base + "/cluster", timeout=5).json()
            except (httpx.HTTPError, ValueError):
                continue
            mine = [b for b in doc.get("brokers") or () if b.get("name") == doc.get("self")]
            self.known.learn(m["http"] for b in mine for m in b.get("members") or () if m.get("http"))
            self._group_learnt = True
            return

    def _call(self, method: str, url: str, **kwargs: Any) -> Any:
        delay = 0.2
        deadline = time.monotonic() + self._retry_s
        attempt = 0
        while True:
            attempt += 1
            try:
                resp = self._request(method, url, **kwargs)
                if resp.status_code < 500:
                    if resp.status_code >= 400:
                        raise RuntimeError(f"{method} {url}: {resp.status_code} {resp.text}")
                    return resp.json() if resp.content else None
                problem = f"{resp.status_code} {resp.text[:200]}"
            except httpx.TransportError as exc:
                problem = str(exc)
            if time.monotonic() > deadline or self._stop.is_set():
                raise RuntimeError(f"{method} {url}: broker unavailable: {problem}")
            # every second at most (a restarted broker gets the waiting batch at once), logged at
            # the first failures and then every 30th
            log.log(logging.WARNING if attempt <= 3 or attempt % 30 == 0 else logging.DEBUG,
                    "%s %s failed (%s); retrying", method, url, problem)  # fmt: skip
            self._stop.wait(delay)
            delay = min(delay * 2, 1.0)

    def reach(self) -> bool | None:
        """``True`` when the broker may take this job's decisions (a lone broker always; a member
        of a replica group only while it is the master: a slave's parked records are its
        master's), ``False`` when it answers that it may not, ``None`` when no broker answers."""
        try:
            resp = self._request("GET", "/replica/status")
        except httpx.TransportError:
            return None
        if resp.status_code != 200:
            return resp.status_code == 404  # a broker without the route: no replication
        role = (resp.json() or {}).get("role")
        return role is None or role == "master"

    def leads(self) -> bool:
        """Whether the broker answers that it may take this job's decisions (:meth:`reach`)."""
        return self.reach() is True

    def settings(self) -> dict[str, Any]:
        return dict(self._call("GET", "/operators/settings"))

    def post_batch(self, operator: str, batch_id: int, table: pa.Table) -> Any:
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        return self._call(
            "POST",
            f"/operators/{operator}/batches/{batch_id}",
            content=sink.getvalue(),
            headers={"content-type": "application/vnd.apache.arrow.stream"},
        )

    def put_status(self, operator: str, status: dict[str, Any]) -> None:
        try:
            self._request("PUT", f"/operators/{operator}/status", json=status, timeout=5)
        except httpx.HTTPError as exc:
            log.debug("status report failed: %s", exc)
