"""Reads in a cluster: a queue is read at its owner; lookups ask every broker.

* Pull, long-poll and offset-by-time of a queue another broker owns answer ``307`` to the same
  path on the owner (``Location``), with ``{"error": "queue_elsewhere", "broker"}`` as body:
  clients that follow redirects (``curl -L``, httpx ``follow_redirects``) read from the owner,
  and the route-aware clients (Spark, ``sparkmq.client``) go there directly. Redirecting rather
  than proxying keeps the bulk Arrow pulls off the receiving broker.
* Query by key, by msg id or by UNIQ_KEY is asked of every live broker (forwarded requests are
  answered from the local store only), answers merged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from cluster import QueueUnavailable
from ingest_api.http.broker import Broker
from ingest_api.http.deps import BrokerDep
from ingest_api.http.errors import ApiError
from ingest_api.http.params import AnyTopicPath, QueuePath
from ingest_api.http.peers import PeerUnavailable, passed_headers
from ingest_api.http.routing import FORWARDED_HEADER

#: The header replica reads carry (the Spark source's ``readFrom=replica``).
READ_FROM_HEADER = "x-sparkmq-read-from"


def is_local_request(broker: Broker, headers: Mapping[str, str]) -> bool:
    """True for a lone broker, and for a request another broker forwarded here."""
    return broker.cluster is None or FORWARDED_HEADER in headers


async def redirect_to_owner(
    topic: AnyTopicPath, queue_id: QueuePath, request: Request, broker: BrokerDep
) -> None:
    """Router dependency of the per-queue routes: 307 to the owner when it is another broker."""
    node = broker.cluster
    if node is None:
        return
    placement = node.view.placement(topic)
    if placement is None or queue_id >= placement.queue_count:
        return  # a system topic (local to each broker), or unknown: answered here
    owner = placement.owners[queue_id]
    if owner == node.name and (node.serving or _reads_here(node, request)):
        store = broker.store
        if not store.has_topic(topic) or store.queue_count(topic) < placement.queue_count:
            await run_in_threadpool(broker.local_topics.ensure_local, topic, placement.queue_count)
        return
    master = node.view.master_of(owner)
    if master is None:
        raise QueueUnavailable(
            f"queue {queue_id} of {topic!r} lives on broker {owner}, which is not alive", broker=owner
        )
    location = master.http + request.url.path + (f"?{request.url.query}" if request.url.query else "")
    raise ApiError(
        307,
        "queue_elsewhere",
        f"queue {queue_id} of {topic!r} lives on broker {owner}: {location}",
        headers={"Location": location},
        broker=owner,
    )


def _reads_here(node: Any, request: Request) -> bool:
    """A replica serves reads of its own queues when asked to (``readFrom=replica``) or when its
    group has no master (reads go on, bounded by the confirm offset, while writes wait)."""
    asked = (
        request.query_params.get("readFrom") == "replica"
        or request.headers.get(READ_FROM_HEADER) == "replica"
    )
    return asked or node.view.master_of(node.name) is None


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
            raise ApiError(
                502,
                "peer_error",
                f"broker {name} answered {answer.status_code}: {answer.text[:300]}",
                broker=name,
            )
    return found


def newest_first(messages: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """Merged query answers, newest first as each broker answers, at most ``limit``."""
    return sorted(messages, key=lambda m: m.get("store_timestamp", 0), reverse=True)[:limit]
