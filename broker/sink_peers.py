"""The exactly-once sink's view of the cluster: :class:`store.publish.SinkRouter` over this
broker's :class:`cluster.ClusterNode` and :class:`broker.peers.PeerClient`.

The coordinator's publish runs on a worker thread (it blocks on files and the store); chunk
requests to the other brokers are coroutines of the peer client, so they are run on the
broker's event loop and waited for from that thread. Protocol: docs/exactly_once.md,
"Across brokers"; the owner's side is ``PUT /sinks/{sink}/batches/{b}/chunks/{k}``
(:mod:`ingest_api.http.routers.sinks`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

import pyarrow as pa

from broker.peers import PeerUnavailable
from broker.state import Broker
from store import UnknownTopic, validate_topic
from store.publish import ChunkOutcome, ChunkRef, OwnerUnavailable, SinkStagingError, TopicRoute

ARROW_STREAM = "application/vnd.apache.arrow.stream"


def chunk_path(ref: ChunkRef) -> str:
    return f"/sinks/{ref.sink_id}/batches/{ref.batch_id}/chunks/{ref.seq}"


def chunk_payload(rows: pa.Table) -> bytes:
    """A chunk's rows as an Arrow IPC stream (what the owner's route reads)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as writer:
        writer.write_table(rows)
    payload: bytes = sink.getvalue().to_pybytes()
    return payload


class PeerSinkRouter:
    """One commit's (or one recovery's) router. ``headers`` (the commit's ``Authorization``)
    go with every chunk request; ``loop`` is the broker's event loop."""

    def __init__(self, broker: Broker, loop: asyncio.AbstractEventLoop, headers: Mapping[str, str]) -> None:
        assert broker.cluster is not None
        self.broker = broker
        self.node = broker.cluster
        self.loop = loop
        self.headers = dict(headers)

    @property
    def me(self) -> str:
        return self.node.name

    @property
    def serving(self) -> bool:
        return self.node.serving

    def routes(self, topics: Sequence[str]) -> dict[str, TopicRoute]:
        out: dict[str, TopicRoute] = {}
        for topic in topics:
            placement = self.node.learn_topic(topic)
            if placement is None:
                validate_topic(topic)
                if not self.node.config.auto_create_topics:
                    raise UnknownTopic(f"topic {topic!r} does not exist in the cluster")
                placement = self.node.ensure_topic(topic)
            if self.me in placement.owners:
                self.broker.local_topics.ensure_local(topic, placement.queue_count)
            out[topic] = TopicRoute.of(placement.owners, self.node.view.live_brokers())
        return out

    def send(self, owner: str, ref: ChunkRef, rows: pa.Table, *, fresh: bool, flush: bool) -> ChunkOutcome:
        request = self.broker.peers.request(
            self.node.view.master_of(owner),
            owner,
            "PUT",
            chunk_path(ref),
            headers={**self.headers, "content-type": ARROW_STREAM},
            params={"fresh": str(fresh).lower(), "flush": str(flush).lower()},
            content=chunk_payload(rows),
        )
        try:
            response = asyncio.run_coroutine_threadsafe(request, self.loop).result()
        except PeerUnavailable as exc:
            raise OwnerUnavailable(
                f"chunk {ref.seq} of sink {ref.sink_id} batch {ref.batch_id}: {exc}", broker=owner
            ) from None
        if response.status_code >= 500 or response.status_code == 421:
            raise OwnerUnavailable(
                f"chunk {ref.seq} of sink {ref.sink_id} batch {ref.batch_id}: broker {owner} answered "
                f"{response.status_code}: {response.text[:300]}",
                broker=owner,
            )
        if response.status_code >= 300:
            raise SinkStagingError(
                f"broker {owner} refused chunk {ref.seq} of sink {ref.sink_id} batch {ref.batch_id}: "
                f"{response.status_code} {response.text[:300]}"
            )
        answer = response.json()
        return ChunkOutcome(int(answer["rows"]), int(answer["stored_before"]))
