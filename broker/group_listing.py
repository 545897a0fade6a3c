"""Every consumer group a broker knows, of either kind: what the doors' group lists show.

A group is consumed either by offsets (Spark, HTTP pull, Kafka clients: committed offsets in the
store's offset table) or by POP (receive / ack: its state in ``rmq_sys_pop_state``,
:mod:`broker.pop`). :func:`local_listing` lists both from one store, each group once with its
kind and topics; a POP group also carries the counts the POP service keeps
(:meth:`broker.pop.PopService.stats`: nothing is computed here that the service does not
already hold). An offset group's lag is not computed here: it costs store reads per queue, so
the lists compute it only for the rows they show.

In a cluster each broker lists its own groups (a POP group's state lives with the queues it
received from, on their broker; an offset group's offsets at each queue's owner), and
:func:`merge_listings` folds the brokers' answers: topics united, in-flight counts, redeliveries
and dead letters summed, the oldest in-flight age the largest. A group POP on one broker and
offset-based on another (only a misuse makes one) lists as POP, as
:meth:`~broker.pop.PopService.group_kind` answers on one broker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from broker.pop import GroupKind, GroupStats, PopService
from store import MessageStore


@dataclass(frozen=True, slots=True)
class PopCounts:
    """What a POP group has in flight (from :class:`broker.pop.GroupStats`)."""

    #: Handed out and neither acked nor dead-lettered yet.
    inflight: int
    #: Of those, past their invisible time: the backlog waiting for a receive (or the DLQ).
    visible_again: int
    #: Age of the oldest current delivery, ms (0 with nothing in flight).
    oldest_inflight_age_ms: int
    #: Redeliveries and dead letters since the broker's POP service opened.
    redeliveries: int
    dead_letters: int

    @classmethod
    def of(cls, stats: GroupStats) -> PopCounts:
        return cls(
            stats.inflight,
            stats.visible_again,
            stats.oldest_inflight_age_ms,
            stats.redeliveries,
            stats.dead_letters,
        )

    def plus(self, other: PopCounts) -> PopCounts:
        """Two brokers' counts of one group: sums, and the older of the oldest ages."""
        return PopCounts(
            self.inflight + other.inflight,
            self.visible_again + other.visible_again,
            max(self.oldest_inflight_age_ms, other.oldest_inflight_age_ms),
            self.redeliveries + other.redeliveries,
            self.dead_letters + other.dead_letters,
        )


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """One group as a list shows it."""

    group: str
    kind: GroupKind
    #: Sorted: the topics it has offsets for (offset kind) or has received from (POP).
    topics: tuple[str, ...]
    #: A POP group's counts; None for an offset group.
    pop: PopCounts | None = None

    def merged(self, other: GroupSummary) -> GroupSummary:
        """This group as two brokers list it (POP wins the kind; topics united; counts summed)."""
        pops = [p for p in (self.pop, other.pop) if p is not None]
        pop = pops[0].plus(pops[1]) if len(pops) == 2 else (pops[0] if pops else None)
        kind = GroupKind.POP if GroupKind.POP in (self.kind, other.kind) else GroupKind.OFFSET
        return replace(self, kind=kind, topics=tuple(sorted({*self.topics, *other.topics})), pop=pop)


@dataclass(frozen=True, slots=True)
class GroupListing:
    """What a broker (or, merged, a cluster) lists of its groups."""

    #: The offset table's group -> sorted topics it has offsets for (POP groups are not in it:
    #: the Kafka gateway's ListGroups lists these).
    offsets: dict[str, list[str]]
    #: Every group, offset-based and POP, sorted by name.
    summaries: list[GroupSummary]


def local_listing(store: MessageStore, pop: PopService | None) -> GroupListing:
    """This store's groups (blocking: it reads the offset table and takes the POP service's
    lock; callers use a worker thread). ``pop`` is the broker's POP service, None without one.
    A replica's POP service has no table loaded: it lists no POP group."""
    offsets = store.groups()
    found = {group: GroupSummary(group, GroupKind.OFFSET, tuple(topics)) for group, topics in offsets.items()}
    for stats in pop.all_stats() if pop is not None else ():
        summary = GroupSummary(stats.group, GroupKind.POP, stats.topics, PopCounts.of(stats))
        seen = found.get(stats.group)
        found[stats.group] = summary if seen is None else seen.merged(summary)
    return GroupListing(offsets, [found[group] for group in sorted(found)])


def merge_listings(listings: Iterable[GroupListing]) -> GroupListing:
    """Several brokers' listings as one (pure)."""
    offsets: dict[str, set[str]] = {}
    found: dict[str, GroupSummary] = {}
    for listing in listings:
        for group, topics in listing.offsets.items():
            offsets.setdefault(group, set()).update(topics)
        for summary in listing.summaries:
            seen = found.get(summary.group)
            found[summary.group] = summary if seen is None else seen.merged(summary)
    return GroupListing(
        {group: sorted(topics) for group, topics in sorted(offsets.items())},
        [found[group] for group in sorted(found)],
    )


def listing_from_answer(body: Mapping[str, Any]) -> GroupListing:
    """A peer's ``GET /groups`` answer (``{"groups": {...}, "summaries": [...]}``, the HTTP
    door's ``GroupListOut``) as a listing. A peer of an older version answers no
    ``summaries``: its groups are then its offset groups. Raises ``KeyError`` / ``ValueError``
    on an answer of another shape."""
    offsets = {str(group): [str(t) for t in topics] for group, topics in body.get("groups", {}).items()}
    if "summaries" not in body:
        return GroupListing(
            offsets, [GroupSummary(g, GroupKind.OFFSET, tuple(ts)) for g, ts in sorted(offsets.items())]
        )
    summaries = []
    for row in body["summaries"]:
        counts = row.get("pop")
        pop = None if counts is None else PopCounts(*(int(counts[f.name]) for f in fields(PopCounts)))
        summaries.append(GroupSummary(row["group"], GroupKind(row["kind"]), tuple(row["topics"]), pop))
    return GroupListing(offsets, summaries)
