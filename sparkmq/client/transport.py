"""HTTP to the brokers: one pooled ``httpx.Client`` for all of them, faults mapped in one place.

Requests go to absolute URLs (``broker base URL + path``), so one connection pool serves every
broker. A transport failure is :class:`BrokerUnreachable` (``maybe_sent=False`` when the
connection never opened); a non-2xx answer is the error :func:`error_from_answer` names.
Redirects are not followed: a ``307`` means the route moved, and the caller refreshes it.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx

from sparkmq.client.config import ClientConfig
from sparkmq.client.errors import BrokerUnreachable, error_from_answer

#: Request header scoping the Idempotency-Key of one broker's part of a request (the brokers'
#: own ``broker.routing.SCOPE_HEADER``).
SCOPE_HEADER = "x-sparkmq-idempotency-scope"
#: Marks a request the client has already routed to the queue's owner, as a broker marks what
#: it forwards (``broker.routing.FORWARDED_HEADER``): the receiver serves it from its
#: own store and never forwards it again (a produce whose queue is not its own: ``421``).
ROUTED = {"x-sparkmq-forwarded": "sparkmq-client"}

#: Connection failures that prove the request never reached the broker.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)


def segment(name: str) -> str:
    """A topic or group name as one URL path segment (``%RETRY%g`` -> ``%25RETRY%25g``)."""
    return quote(name, safe="")


class Transport:
    """Thread-safe (``httpx.Client`` is): producers and a consumer's pulls share it."""

    def __init__(self, config: ClientConfig) -> None:
        headers = {"Authorization": f"Bearer {config.token}"} if config.token else {}
        self._request_timeout_s = config.request_timeout_ms / 1000
        self._connect_timeout_s = config.connect_timeout_ms / 1000
        self._http = httpx.Client(
            headers=headers,
            verify=ssl.create_default_context(cafile=config.tls_ca) if config.tls_ca else True,
            timeout=self._timeout(0),
            follow_redirects=False,
            limits=httpx.Limits(
                max_connections=max(64, 2 * config.max_parallel_pulls),
                max_keepalive_connections=max(16, config.max_parallel_pulls),
            ),
        )

    def _timeout(self, wait_ms: int) -> httpx.Timeout:
        return httpx.Timeout(self._request_timeout_s + wait_ms / 1000, connect=self._connect_timeout_s)

    def close(self) -> None:
        self._http.close()

    def send(
        self,
        base_url: str,
        method: str,
        path: str,
        *,
        broker: str | None = None,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        wait_ms: int = 0,
    ) -> httpx.Response:
        """The broker's answer, whatever its status; :class:`BrokerUnreachable` when none came.
        ``wait_ms``: a long-poll's wait, added to the read timeout."""
        url = base_url + path
        try:
            return self._http.request(
                method,
                url,
                params=params,
                json=json,
                content=content,
                headers=headers,
                timeout=self._timeout(wait_ms),
            )
        except _NOT_SENT as exc:
            raise BrokerUnreachable(
                f"cannot reach the broker at {base_url}: {type(exc).__name__}: {exc}",
                url=base_url,
                broker=broker,
                maybe_sent=False,
            ) from None
        except httpx.TransportError as exc:
            raise BrokerUnreachable(
                f"no answer from the broker at {base_url}: {type(exc).__name__}: {exc}",
                url=base_url,
                broker=broker,
                maybe_sent=True,
            ) from None

    def call(self, base_url: str, method: str, path: str, **kwargs: Any) -> Any:
        """The decoded JSON answer (``None`` for an empty one); the named error for a non-2xx."""
        response = self.send(base_url, method, path, **kwargs)
        if not 200 <= response.status_code < 300:
            raise error_from_answer(response, kwargs.get("broker"))
        return response.json() if response.content else None
