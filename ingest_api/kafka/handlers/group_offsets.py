"""Where committed group offsets live, and how the group coordinator reaches them.

A group's committed offset of queue *q* lives in the offsetTable (``topic@group``) of the
broker that owns *q*, the same place the HTTP door (``PUT/GET /groups/{g}/offsets``), lag and
Spark read it. On a lone broker that is the local store. In a cluster the coordinator of the
group (which may own none of the queues) splits each OffsetCommit / OffsetFetch by owner:
its own queues go to its store, the others to their owners over HTTP, the existing
``/groups/{g}/offsets`` routes marked as forwarded (one call per owner and topic, in parallel).

Owner down or not answering: commits to its queues answer COORDINATOR_LOAD_IN_PROGRESS and a
fetch that needs it answers that for the group, both retried by the clients without looking
the coordinator up again (its partitions cannot be consumed meanwhile anyway).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from urllib.parse import quote

from broker.pop import GroupKindConflict
from cluster import QueueUnavailable
from ingest_api.kafka.cluster_link import ClusterLink, PeerRefused
from ingest_api.kafka.context import GatewayContext
from ingest_api.kafka.errors import ErrorCode
from ingest_api.kafka.handlers.topics import partition_count, routed_partition_count
from ingest_api.kafka.names import from_store, to_store
from ingest_api.kafka.store_port import KafkaStore
from store import InvalidArgument, StoreError

log = logging.getLogger(__name__)

#: ``(topic, partition, offset, metadata)`` of one OffsetCommit partition.
Commit = tuple[str, int, int, str | None]
#: Topics and partitions asked by OffsetFetch; ``None`` = every partition with a commit.
TopicQuery = list[tuple[str, list[int]]] | None
#: ``(topic, [(partition, committed offset or -1)])``.
Committed = list[tuple[str, list[tuple[int, int]]]]
UNAVAILABLE = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


def offsets_path(group: str) -> str:
    """The HTTP route of a Kafka group's offsets (store name, percent-encoded for the URL)."""
    return f"/groups/{quote(to_store(group), safe='')}/offsets"


# --- commit --------------------------------------------------------------------------------------
def commit_local(store: KafkaStore, group: str, commits: Sequence[Commit]) -> list[ErrorCode]:
    """Blocking: commit to the local offsetTable (every partition must be a local queue)."""
    errors: list[ErrorCode] = []
    per_topic: dict[str, dict[int, int]] = {}
    for topic, partition, offset, _ in commits:
        count = partition_count(store, topic)
        if count is None or not 0 <= partition < count:
            errors.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            continue
        per_topic.setdefault(topic, {})[partition] = offset
        errors.append(ErrorCode.NONE)
    failed: dict[str, ErrorCode] = {}
    for topic, offsets in per_topic.items():
        try:
            store.commit_offsets(group, topic, offsets)
        except GroupKindConflict as exc:  # a POP group: offsets are not how it is consumed
            log.info("offset commit for group %r refused: %s", group, exc)
            failed[topic] = ErrorCode.INVALID_GROUP_ID
        except InvalidArgument as exc:
            log.info("offset commit for group %r refused: %s", group, exc)
            failed[topic] = ErrorCode.INVALID_GROUP_ID
        except StoreError:
            log.exception("offset commit for group %r topic %r failed", group, topic)
            failed[topic] = ErrorCode.UNKNOWN_SERVER_ERROR
    return [
        failed.get(topic, error) if error == ErrorCode.NONE else error
        for (topic, _, _, _), error in zip(commits, errors, strict=True)
    ]


async def commit(ctx: GatewayContext, group: str, commits: Sequence[Commit]) -> list[ErrorCode]:
    """Commit each partition's offset where that queue's offsets live; one error per commit."""
    link = ctx.cluster
    if link is None:
        return await ctx.run_blocking(commit_local, ctx.store, group, commits)
    errors = [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * len(commits)
    by_owner: dict[str, list[int]] = {}
    for index, (topic, partition, _, _) in enumerate(commits):
        owner = link.owner(topic, partition)
        if owner is not None:
            by_owner.setdefault(owner, []).append(index)

    async def to_owner(owner: str, indexes: list[int]) -> None:
        part = [commits[i] for i in indexes]
        if owner == link.me:
            local = await ctx.run_blocking(_commit_owned, ctx, group, part)
        else:
            local = await _commit_remote(link, owner, group, part)
        for i, error in zip(indexes, local, strict=True):
            errors[i] = error

    await asyncio.gather(*(to_owner(owner, indexes) for owner, indexes in by_owner.items()))
    return errors


def _commit_owned(ctx: GatewayContext, group: str, commits: Sequence[Commit]) -> list[ErrorCode]:
    assert ctx.cluster is not None
    for topic in {topic for topic, _, _, _ in commits}:
        count = routed_partition_count(ctx, topic)
        if count is not None and (not ctx.store.has_topic(topic) or ctx.store.queue_count(topic) < count):
            ctx.cluster.ensure_local(topic, count)
    return commit_local(ctx.store, group, commits)


async def _commit_remote(
    link: ClusterLink, owner: str, group: str, commits: Sequence[Commit]
) -> list[ErrorCode]:
    per_topic: dict[str, dict[str, int]] = {}
    for topic, partition, offset, _ in commits:
        per_topic.setdefault(topic, {})[str(partition)] = offset
    outcome: dict[str, ErrorCode] = {}
    for topic, offsets in per_topic.items():
        try:
            await link.call(
                owner, "PUT", offsets_path(group), body={"topic": to_store(topic), "offsets": offsets}
            )
            outcome[topic] = ErrorCode.NONE
        except PeerRefused as exc:
            log.warning("offset commit of group %r forwarded to %s refused: %s", group, owner, exc)
            outcome[topic] = _REFUSALS.get(exc.error, ErrorCode.UNKNOWN_SERVER_ERROR)
        except QueueUnavailable as exc:
            log.info("offset commit of group %r: %s", group, exc)
            outcome[topic] = UNAVAILABLE
    return [outcome[topic] for topic, _, _, _ in commits]


#: HTTP error codes of ``PUT /groups/{g}/offsets`` -> Kafka error codes.
_REFUSALS = {
    "offset_out_of_range": ErrorCode.OFFSET_OUT_OF_RANGE,
    "unknown_topic": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    "unknown_queue": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    "invalid_group": ErrorCode.INVALID_GROUP_ID,
}


# --- fetch ---------------------------------------------------------------------------------------
def fetch_local(store: KafkaStore, group: str, topics: TopicQuery) -> tuple[ErrorCode, Committed]:
    """Blocking: committed offsets (-1 when none); ``topics=None`` = every committed partition."""
    try:
        if topics is None:
            names = sorted(store.groups().get(group, []))
            committed = [(name, sorted(store.committed_offsets(group, name).items())) for name in names]
            return ErrorCode.NONE, committed
        result: Committed = []
        for name, partitions in topics:
            offsets = _committed_or_empty(store, group, name)
            result.append((name, [(p, offsets.get(p, -1)) for p in partitions]))
        return ErrorCode.NONE, result
    except InvalidArgument:
        return ErrorCode.INVALID_GROUP_ID, []


def _committed_or_empty(store: KafkaStore, group: str, topic: str) -> dict[int, int]:
    try:
        return store.committed_offsets(group, topic)
    except InvalidArgument:
        raise
    except StoreError:
        return {}


async def fetch(ctx: GatewayContext, group: str, topics: TopicQuery) -> tuple[ErrorCode, Committed]:
    """Committed offsets from where they live (see the module docstring)."""
    link = ctx.cluster
    if link is None:
        return await ctx.run_blocking(fetch_local, ctx.store, group, topics)
    every = topics is None
    if topics is None:
        names = sorted((await offset_groups(ctx)).get(group, []))
        topics = [(name, list(range(routed_partition_count(ctx, name) or 0))) for name in names]
    try:
        found = await asyncio.gather(*(_topic_offsets(ctx, link, group, name) for name, _ in topics))
    except QueueUnavailable as exc:
        log.info("offset fetch of group %r: %s", group, exc)
        return UNAVAILABLE, []
    except InvalidArgument:
        return ErrorCode.INVALID_GROUP_ID, []
    result: Committed = []
    for (name, partitions), offsets in zip(topics, found, strict=True):
        rows = [(p, offsets.get(p, -1)) for p in partitions]
        result.append((name, [row for row in rows if row[1] >= 0] if every else rows))
    return ErrorCode.NONE, [entry for entry in result if entry[1] or not every]


async def _topic_offsets(ctx: GatewayContext, link: ClusterLink, group: str, topic: str) -> dict[int, int]:
    """Partition -> committed offset of one topic, each read from the partition's owner."""
    placement = link.placement(topic)
    if placement is None:
        return {}
    owners = sorted(set(placement.owners))

    async def from_owner(owner: str) -> dict[int, int]:
        if owner == link.me:
            offsets = await ctx.run_blocking(_committed_or_empty, ctx.store, group, topic)
        else:
            try:
                answer = await link.call(
                    owner, "GET", offsets_path(group), params={"topic": to_store(topic)}, ok=(200,)
                )
            except PeerRefused as exc:
                if exc.status == 404:  # the owner has no offsets of this group (or no such topic)
                    return {}
                raise
            offsets = {int(q): int(o) for q, o in answer["offsets"].items()}
        owned = placement.queues_of(owner)
        return {q: o for q, o in offsets.items() if q in owned}

    merged: dict[int, int] = {}
    for part in await asyncio.gather(*(from_owner(owner) for owner in owners)):
        merged.update(part)
    return merged


# --- which groups have offsets -------------------------------------------------------------------
async def offset_groups(ctx: GatewayContext) -> dict[str, list[str]]:
    """Kafka group -> topics with committed offsets, over every live broker in a cluster."""
    local = await ctx.run_blocking(ctx.store.groups)
    link = ctx.cluster
    if link is None:
        return local
    merged = {group: set(topics) for group, topics in local.items()}
    others = [name for name in link.view.live_brokers() if name != link.me]

    async def from_broker(name: str) -> dict[str, list[str]]:
        try:
            answer = await link.call(name, "GET", "/groups", ok=(200,))
        except QueueUnavailable as exc:
            log.info("listing groups: %s", exc)
            return {}
        return {
            from_store(group): [from_store(t) for t in topics] for group, topics in answer["groups"].items()
        }

    for part in await asyncio.gather(*(from_broker(name) for name in others)):
        for group, topics in part.items():
            merged.setdefault(group, set()).update(topics)
    return {group: sorted(topics) for group, topics in merged.items()}
