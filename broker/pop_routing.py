"""POP in a cluster: a receipt handle names the broker that issued it; acks go back there.

Each broker's POP state (cursors, in-flight messages, the signing secret) is its own, kept in
its own CommitLog and replicated to its replica group. A receive pops this broker's queues of
the topic (a client asks every broker); an ack or a change of invisible time must reach the
broker that handed the message out. So, in a cluster, the handle a door gives out is::

    <broker name> "~" <the service's handle>

``~`` is in neither a broker name (``[A-Za-z0-9_.-]``) nor base64url, so the split is exact. A
lone broker gives the service's handle unchanged. :func:`ack` and :func:`change_invisible`
serve what is this broker's and forward the rest to its owner's master with the peer client
(the brokers' HTTP API: ``POST /groups/{group}/messages:ack`` / ``:changeInvisible``); an
owner that cannot be reached is a per-handle ``broker_unavailable`` (ack) or
:class:`~broker.peers.PeerUnavailable` (change).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from broker.errors import BrokerError
from broker.peers import PeerUnavailable, is_local_request, passed_headers
from broker.pop import AckResult, InvalidReceiptHandle
from broker.pop.handle import claimed_topic
from broker.state import Broker
from broker.threads import run_blocking

SEPARATOR = "~"
#: The code of a per-handle ack result whose broker could not be reached (retriable).
BROKER_UNAVAILABLE = "broker_unavailable"


def outward(broker_name: str | None, handle: str) -> str:
    """The handle a door hands out: prefixed with the issuing broker's name in a cluster."""
    return handle if broker_name is None else f"{broker_name}{SEPARATOR}{handle}"


def split(text: object) -> tuple[str | None, str]:
    """``(broker name or None, the service's handle)``; InvalidReceiptHandle if not a string."""
    if not isinstance(text, str):
        raise InvalidReceiptHandle("a receipt handle is a string")
    name, sep, handle = text.rpartition(SEPARATOR)
    return (name, handle) if sep else (None, text)


def claimed_topics(texts: Sequence[object]) -> set[str]:
    """The topics the handles claim (unverified; malformed ones are left to the service): a
    door authorizes the consume right on each before acking."""
    topics = set()
    for text in texts:
        try:
            topics.add(claimed_topic(split(text)[1]))
        except InvalidReceiptHandle:
            continue
    return topics


def _owner(broker: Broker, text: str) -> tuple[str | None, str]:
    """``(None, service handle)`` when this broker serves it, else ``(owner, full text)``."""
    name, handle = split(text)
    if name is None or name == broker.name:
        return None, handle
    if broker.cluster is None:
        raise InvalidReceiptHandle(f"the receipt handle was issued by broker {name!r}, not this one")
    return name, text


@dataclass(frozen=True, slots=True)
class Changed:
    """The answer to a change of invisible time (here or at the handle's broker)."""

    receipt_handle: str
    delivery_attempt: int
    invisible_until_ms: int
    msg_id: str


async def ack(
    broker: Broker, group: str, handles: Sequence[str], headers: Mapping[str, str]
) -> list[AckResult]:
    """One result per handle, in order: this broker's acked in one service call, the others
    forwarded to their brokers (one request per broker)."""
    local: list[tuple[int, str]] = []
    remote: dict[str, list[tuple[int, str]]] = {}
    results: list[AckResult | None] = [None] * len(handles)
    for i, text in enumerate(handles):
        try:
            owner, handle = _owner(broker, text)
        except InvalidReceiptHandle as exc:
            results[i] = AckResult(str(text), False, exc.code, str(exc))
            continue
        if owner is None or is_local_request(broker, headers):
            local.append((i, handle))
        else:
            remote.setdefault(owner, []).append((i, handle))
    if local:
        done = await run_blocking(broker.pop.ack, group, [h for _, h in local])
        for (i, _), result in zip(local, done, strict=True):
            results[i] = AckResult(handles[i], result.ok, result.code, result.detail)
    for owner, items in remote.items():
        for (i, _), result in zip(
            items, await _forward_ack(broker, owner, group, items, headers), strict=True
        ):
            results[i] = result
    return [r for r in results if r is not None]


async def _forward_ack(
    broker: Broker, owner: str, group: str, items: list[tuple[int, str]], headers: Mapping[str, str]
) -> list[AckResult]:
    texts = [text for _, text in items]
    try:
        body = await _ask(broker, owner, f"/groups/{group}/messages:ack", {"receipt_handles": texts}, headers)
    except PeerUnavailable as exc:
        return [AckResult(text, False, BROKER_UNAVAILABLE, str(exc)) for text in texts]
    answers = body.get("results", [])
    return [
        AckResult(text, bool(a.get("ok")), a.get("error"), str(a.get("message") or ""))
        for text, a in zip(texts, answers, strict=True)
    ]


async def change_invisible(
    broker: Broker, group: str, text: str, invisible_ms: int, headers: Mapping[str, str]
) -> Changed:
    """Change here or at the handle's broker; raises the service's errors (or the owner's
    refusal as a :class:`BrokerError`, or :class:`PeerUnavailable`)."""
    owner, handle = _owner(broker, text)
    if owner is None or is_local_request(broker, headers):
        got = await run_blocking(broker.pop.change_invisible, group, handle, invisible_ms)
        return Changed(
            outward(broker.name, got.receipt_handle),
            got.delivery_attempt,
            got.invisible_until_ms,
            got.message.msg_id,
        )
    path = f"/groups/{group}/messages:changeInvisible"
    body = await _ask(broker, owner, path, {"receipt_handle": text, "invisible_ms": invisible_ms}, headers)
    return Changed(
        str(body["receipt_handle"]),
        int(body["delivery_attempt"]),
        int(body["invisible_until_ms"]),
        str(body["msg_id"]),
    )


async def _ask(
    broker: Broker, owner: str, path: str, payload: dict[str, Any], headers: Mapping[str, str]
) -> dict[str, Any]:
    """POST ``payload`` to ``owner``'s master; its 200 JSON body, or its refusal raised."""
    assert broker.cluster is not None
    sent = {**passed_headers(headers), "content-type": "application/json"}
    answer = await broker.peers.request(
        broker.cluster.view.master_of(owner),
        owner,
        "POST",
        path,
        headers=sent,
        content=json.dumps(payload).encode(),
    )
    body: dict[str, Any] = answer.json() if answer.content else {}
    if answer.status_code != 200:
        raise BrokerError(
            answer.status_code,
            str(body.get("error", "peer_error")),
            str(body.get("message", answer.text[:300])),
            broker=owner,
        )
    return body
