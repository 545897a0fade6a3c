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

from typing import Any

from fastapi import Request

from broker.errors import BrokerError
from broker.threads import run_blocking
from cluster import QueueUnavailable
from ingest_api.http.deps import BrokerDep
from ingest_api.params import AnyTopicPath, QueuePath

#: The header replica reads carry (the Spark source's ``readFrom=replica``).
READ_FROM_HEADER = "x-sparkmq-read-from"


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
            await run_blocking(broker.local_topics.ensure_local, topic, placement.queue_count)
        return
    master = node.view.master_of(owner)
    if master is None:
        raise QueueUnavailable(
            f"queue {queue_id} of {topic!r} lives on broker {owner}, which is not alive", broker=owner
        )
    location = master.http + request.url.path + (f"?{request.url.query}" if request.url.query else "")
    raise BrokerError(
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
