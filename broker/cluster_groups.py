"""Consumer groups in a cluster: a queue's committed offset lives with the queue, at its owner.

The HTTP routes, the Spark lag mirror and the Kafka coordinator all commit a queue's offset at
the broker that owns it, so the offset moves with the data (and, with replication, replicates
with it). Any broker answers for the whole cluster: it asks the others (a forwarded request is
answered from the local offset table only) and keeps, for each queue, its owner's answer. A
queue whose owner is down shows ``-1`` committed and is listed in ``unavailable``. Group lists
(offset and POP groups, :mod:`broker.group_listing`) are every broker's own, merged.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from broker.errors import BrokerError
from broker.group_listing import GroupListing, listing_from_answer, merge_listings
from broker.lag import GroupQueueRow, group_topic_rows
from broker.peers import PeerUnavailable, ask_others, passed_headers
from broker.state import Broker
from broker.threads import run_blocking
from cluster import ClusterView
from store import UnknownTopic

T = TypeVar("T")


def owned(broker: Broker, topic: str, queue_id: int) -> bool:
    """Whether this broker owns the queue (always, for a lone broker)."""
    node = broker.cluster
    return node is None or node.view.owner(topic, queue_id) in (None, node.name)


def local_name(broker: Broker) -> str | None:
    """The broker name whose offsets this member answers for itself: its own while it serves
    (a slave's side tables may be a second behind: it asks its master)."""
    node = broker.cluster
    return node.name if node is not None and node.serving else None


def placement_owners(view: ClusterView, topic: str) -> tuple[str, ...]:
    placement = view.placement(topic)
    if placement is None:
        raise UnknownTopic(f"topic {topic!r} does not exist")
    return placement.owners


def pick(owners: tuple[str, ...], answers: Mapping[str, Mapping[int, T]], missing: T) -> dict[int, T]:
    """Per queue id, the value its owner answered (``missing`` when the owner did not answer)."""
    return {q: answers.get(owner, {}).get(q, missing) for q, owner in enumerate(owners)}


async def gather_topic(
    broker: Broker,
    topic: str,
    path: str,
    headers: Mapping[str, str],
    params: Mapping[str, Any],
    local: Mapping[int, T] | None,
    rows_of: Callable[[Any], Mapping[int, T]],
) -> tuple[dict[str, Mapping[int, T]], list[str]]:
    """Every owner's per-queue answer for ``topic`` (this broker's is ``local``), and the names
    of owners that could not be asked."""
    node = broker.cluster
    assert node is not None
    me = local_name(broker)
    owners = set(placement_owners(node.view, topic)) - {me}
    answers: dict[str, Mapping[int, T]] = {}
    if local is not None and me is not None:
        answers[me] = local
    unavailable = sorted(name for name in owners if node.view.master_of(name) is None)
    for name in sorted(owners - set(unavailable)):
        try:
            answer = await broker.peers.request(
                node.view.master_of(name), name, "GET", path, headers=passed_headers(headers), params=params
            )
        except PeerUnavailable:
            unavailable.append(name)
            continue
        if answer.status_code == 200:
            answers[name] = rows_of(answer.json())
    return answers, sorted(unavailable)


async def split_commit(
    broker: Broker, group: str, topic: str, offsets: Mapping[int, int], headers: Mapping[str, str]
) -> dict[int, int]:
    """Send each owner its queues' part of a commit; the part of this broker is returned for
    the caller to commit locally. A refusal by an owner is raised as its error."""
    node = broker.cluster
    assert node is not None
    owners = placement_owners(node.view, topic)
    parts: dict[str, dict[int, int]] = {}
    for queue_id, offset in offsets.items():
        owner = owners[queue_id] if queue_id < len(owners) else node.name  # out of range: refused locally
        parts.setdefault(owner, {})[queue_id] = offset
    me = local_name(broker)
    for name, part in parts.items():
        if name == me:
            continue
        answer = await broker.peers.request(
            node.view.master_of(name),
            name,
            "PUT",
            f"/groups/{group}/offsets",
            headers={**passed_headers(headers), "content-type": "application/json"},
            content=json.dumps({"topic": topic, "offsets": {str(q): o for q, o in part.items()}}).encode(),
        )
        if answer.status_code != 200:
            body = answer.json()
            raise BrokerError(
                answer.status_code, body.get("error", "peer_error"), body.get("message", ""), broker=name
            )
    return parts.get(me, {}) if me is not None else {}


async def group_lists(
    broker: Broker, headers: Mapping[str, str], local: dict[str, list[str]]
) -> dict[str, list[str]]:
    """The union of every broker's group -> topics table (offset groups)."""
    return (await cluster_listing(broker, headers, GroupListing(local, []))).offsets


async def cluster_listing(broker: Broker, headers: Mapping[str, str], local: GroupListing) -> GroupListing:
    """Every broker's groups, offset-based and POP, merged (:func:`merge_listings`); this
    broker's are ``local``. Raises ``PeerUnavailable`` when a live broker cannot be asked."""
    answers = await ask_others(broker, "/groups", headers)
    return merge_listings([local, *(listing_from_answer(answers[name]) for name in sorted(answers))])


async def gather_describe(
    broker: Broker, group: str, topic: str | None, headers: Mapping[str, str], local: list[GroupQueueRow]
) -> tuple[list[GroupQueueRow], list[str], dict[str, Any] | None]:
    """Every owner's rows of the group (each (topic, queue) from its owner), the brokers that
    could not be asked, and ``{"kafka_state", "members"}`` if another broker coordinates the
    group for Kafka clients. Without ``topic``: every topic any broker has offsets of."""
    node = broker.cluster
    assert node is not None
    view = node.view
    if topic is not None:
        topics = [topic]
    else:
        topics = (await group_lists(broker, headers, broker.store.groups())).get(group, [])
    rows = [row for row in local if view.owner(row.topic, row.queue_id) in (None, node.name)]
    unavailable: set[str] = set()
    kafka: dict[str, Any] | None = None
    asked: list[str | None] = list(topics) or [None]
    for name_of_topic in asked:
        params = {"topic": name_of_topic} if name_of_topic else None
        answers = await broker.peers.fan_out(
            view, "GET", f"/groups/{group}", headers=passed_headers(headers), params=params, skip=[node.name]
        )
        for name, answer in sorted(answers.items()):
            if isinstance(answer, PeerUnavailable):
                unavailable.add(name)
                continue
            if answer.status_code != 200:
                continue
            body = answer.json()
            if body.get("kind") == "kafka" and kafka is None:
                kafka = {"kafka_state": body.get("kafka_state"), "members": body.get("members", [])}
            for row in body.get("queues", ()):
                if view.owner(row["topic"], row["queue_id"]) == name:
                    rows.append(
                        GroupQueueRow(
                            topic=row["topic"], queue_id=row["queue_id"], committed=row["committed_offset"],
                            max_offset=row["max_offset"], lag=row["lag"], lag_seconds=row["lag_seconds"],
                        )
                    )  # fmt: skip
    local_topics = {row.topic for row in local}
    for name_of_topic in topics:  # this broker's own queues of topics it has no offsets for
        if name_of_topic not in local_topics and broker.store.has_topic(name_of_topic):
            rows.extend(
                row
                for row in await run_blocking(
                    group_topic_rows, broker.store, group, name_of_topic, broker.store.now_ms()
                )
                if view.owner(row.topic, row.queue_id) == node.name
            )
    unique = {(row.topic, row.queue_id): row for row in rows}
    return [unique[key] for key in sorted(unique)], sorted(unavailable), kafka
