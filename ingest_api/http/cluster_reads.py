"""Reads in a cluster: a queue is read at its owner; lookups ask every broker.

* Pull, long-poll and offset-by-time of a queue another broker owns answer ``307`` to the same
  path on the owner (``Location``), with ``{"error": "queue_elsewhere", "broker"}`` as body:
  clients that follow redirects (``curl -L``, httpx ``follow_redirects``) read from the owner,
  and the route-aware clients (Spark, ``sparkmq.client``) go there directly. Redirecting rather
  than proxying keeps the bulk Arrow pulls off the receiving broker.
* Query by key, by msg id or by UNIQ_KEY is asked of every live broker (forwarded requests are
  answered from the local store only), answers merged (:func:`broker.peers.ask_others`).
"""

from __future__ import annotations

from fastapi import Request

from broker.errors import BrokerError
from broker.reads import read_placement
from ingest_api.http.deps import BrokerDep
from ingest_api.params import AnyTopicPath, QueuePath

#: The header replica reads carry (the Spark source's ``readFrom=replica``).
READ_FROM_HEADER = "x-sparkmq-read-from"


async def redirect_to_owner(
    topic: AnyTopicPath, queue_id: QueuePath, request: Request, broker: BrokerDep
) -> None:
    """Router dependency of the per-queue routes: 307 to the owner when it is another broker
    (:func:`broker.reads.read_placement` decides)."""
    if broker.cluster is None:
        return
    asked = (
        request.query_params.get("readFrom") == "replica"
        or request.headers.get(READ_FROM_HEADER) == "replica"
    )
    master = await read_placement(broker, topic, queue_id, asked)
    if master is None:
        return
    owner = master.broker_name
    location = master.http + request.url.path + (f"?{request.url.query}" if request.url.query else "")
    raise BrokerError(
        307,
        "queue_elsewhere",
        f"queue {queue_id} of {topic!r} lives on broker {owner}: {location}",
        headers={"Location": location},
        broker=owner,
    )
