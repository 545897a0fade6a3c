"""Requests from this broker to the others: forwarding produce, fan-out queries.

One pooled ``httpx.AsyncClient`` (keep-alive connections per peer) on the broker's event loop.
A peer that cannot be reached is :class:`PeerUnavailable`, answered 503 naming the broker; a
peer's own answer (any status) is passed back as it is.

With auth on, every call carries this broker's credential and, separately, the user's original
one (:func:`broker.peer_identity.peer_headers`; the trust model is in that module and
docs/security.md). With ``tls_ca`` the peers are reached over HTTPS verified against that CA;
a broker serving TLS presents its own certificate to them (mutual TLS).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from broker.errors import BrokerError
from broker.peer_identity import PeerCredential, peer_headers
from broker.routing import FORWARDED_HEADER
from broker.state import Broker
from cluster import ClusterView, MemberInfo, QueueUnavailable

#: Request headers passed on when forwarding (everything else is the forwarder's to set).
PASSED_HEADERS = ("authorization", "idempotency-key", "accept", "content-type")


class PeerUnavailable(QueueUnavailable):
    """The broker that owns a queue is down or does not answer."""


class PeerClient:
    """Pooled HTTP client to the other brokers; ``me`` marks what it forwards, ``credential``
    (``None``: auth off) says who this broker is, ``tls_ca`` verifies HTTPS peers and
    ``client_cert`` (certificate and key files) is presented to peers that ask for one
    (``--tls-require-client-cert``)."""

    def __init__(
        self,
        me: str,
        timeout_s: float,
        credential: PeerCredential | None = None,
        tls_ca: Path | None = None,
        client_cert: tuple[Path, Path] | None = None,
    ) -> None:
        self.me = me
        self.credential = credential
        verify: ssl.SSLContext | bool = True
        if tls_ca is not None or client_cert is not None:
            verify = ssl.create_default_context(cafile=None if tls_ca is None else str(tls_ca))
            if client_cert is not None:
                verify.load_cert_chain(*client_cert)
        self._client = httpx.AsyncClient(
            timeout=timeout_s,
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
            verify=verify,
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def request(
        self,
        member: MemberInfo | None,
        broker: str,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
        content: bytes | None = None,
    ) -> httpx.Response:
        """Send to ``member`` (the live master of ``broker``); :class:`PeerUnavailable` when
        there is none or it cannot be reached."""
        if member is None:
            raise PeerUnavailable(f"broker {broker} is not alive (its queues are unavailable)", broker=broker)
        sent = peer_headers(headers or {}, self.credential)
        sent[FORWARDED_HEADER] = self.me
        try:
            # Path segments come from requests (topics with '%', msg ids): sent percent-encoded.
            return await self._client.request(
                method, member.http + quote(path, safe="/:"), headers=sent, params=params, content=content
            )
        except httpx.TransportError as exc:
            raise PeerUnavailable(
                f"broker {broker} at {member.http} did not answer ({type(exc).__name__})", broker=broker
            ) from None

    async def fan_out(
        self,
        view: ClusterView,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
        skip: Sequence[str] = (),
    ) -> dict[str, httpx.Response | PeerUnavailable]:
        """The same request to every live broker but ``skip``; each broker's answer or failure."""
        names = [name for name in view.live_brokers() if name not in skip]

        async def one(name: str) -> httpx.Response | PeerUnavailable:
            try:
                return await self.request(
                    view.master_of(name), name, method, path, headers=headers, params=params
                )
            except PeerUnavailable as exc:
                return exc

        answers = await asyncio.gather(*(one(name) for name in names))
        return dict(zip(names, answers, strict=True))


def passed_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The request headers a forwarded copy keeps."""
    return {name: value for name in PASSED_HEADERS if (value := headers.get(name)) is not None}


def is_local_request(broker: Broker, headers: Mapping[str, str]) -> bool:
    """True for a lone broker, and for a request another broker forwarded here."""
    return broker.cluster is None or FORWARDED_HEADER in headers


async def ask_others(
    broker: Broker, path: str, headers: Mapping[str, str], params: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """``GET path`` on every other live broker: name -> JSON body of each 200 answer (others
    answering 404 are left out; an unreachable one raises :class:`PeerUnavailable`)."""
    node = broker.cluster
    assert node is not None
    answers = await broker.peers.fan_out(
        node.view, "GET", path, headers=passed_headers(headers), params=params, skip=[node.name]
    )
    found: dict[str, Any] = {}
    for name, answer in answers.items():
        if isinstance(answer, PeerUnavailable):
            raise answer
        if answer.status_code == 200:
            found[name] = answer.json()
        elif answer.status_code != 404:
            raise BrokerError(
                502,
                "peer_error",
                f"broker {name} answered {answer.status_code}: {answer.text[:300]}",
                broker=name,
            )
    return found


def newest_first(messages: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """Merged query answers, newest first as each broker answers, at most ``limit``."""
    return sorted(messages, key=lambda m: m.get("store_timestamp", 0), reverse=True)[:limit]
