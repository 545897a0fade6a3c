"""The cluster merge of group lists (pure), and a peer's answer read back, old peers included."""

from __future__ import annotations

from broker.group_listing import GroupListing, GroupSummary, PopCounts, listing_from_answer, merge_listings
from broker.pop import GroupKind


def test_brokers_listings_merge_topics_and_pop_counts() -> None:
    b1 = GroupListing(
        {"spark": ["orders"]},
        [
            GroupSummary("billing", GroupKind.POP, ("orders",), PopCounts(3, 1, 5_000, 2, 0)),
            GroupSummary("spark", GroupKind.OFFSET, ("orders",)),
        ],
    )
    b2 = GroupListing(
        {"spark": ["audit"]},
        [
            GroupSummary("billing", GroupKind.POP, ("audit", "orders"), PopCounts(4, 0, 9_000, 0, 1)),
            GroupSummary("spark", GroupKind.OFFSET, ("audit",)),
        ],
    )
    merged = merge_listings([b1, b2])
    assert merged.offsets == {"spark": ["audit", "orders"]}
    assert merged.summaries == [
        GroupSummary("billing", GroupKind.POP, ("audit", "orders"), PopCounts(7, 1, 9_000, 2, 1)),
        GroupSummary("spark", GroupKind.OFFSET, ("audit", "orders")),
    ]


def test_a_group_pop_on_one_broker_lists_as_pop() -> None:
    offset = GroupListing({"g": ["t"]}, [GroupSummary("g", GroupKind.OFFSET, ("t",))])
    pop = GroupListing({}, [GroupSummary("g", GroupKind.POP, ("u",), PopCounts(1, 0, 10, 0, 0))])
    for order in ([offset, pop], [pop, offset]):
        merged = merge_listings(order)
        assert merged.summaries == [GroupSummary("g", GroupKind.POP, ("t", "u"), PopCounts(1, 0, 10, 0, 0))]
        assert merged.offsets == {"g": ["t"]}


def test_a_peers_answer_is_read_back_and_an_old_peers_groups_are_offset_groups() -> None:
    answer = {
        "groups": {"spark": ["orders"]},
        "summaries": [
            {
                "group": "billing",
                "kind": "pop",
                "topics": ["orders"],
                "pop": {
                    "inflight": 2,
                    "visible_again": 1,
                    "oldest_inflight_age_ms": 40,
                    "redeliveries": 3,
                    "dead_letters": 4,
                },
            },
            {"group": "spark", "kind": "offset", "topics": ["orders"], "pop": None},
        ],
    }
    assert listing_from_answer(answer) == GroupListing(
        {"spark": ["orders"]},
        [
            GroupSummary("billing", GroupKind.POP, ("orders",), PopCounts(2, 1, 40, 3, 4)),
            GroupSummary("spark", GroupKind.OFFSET, ("orders",)),
        ],
    )
    old = listing_from_answer({"groups": {"spark": ["orders"]}})
    assert old.summaries == [GroupSummary("spark", GroupKind.OFFSET, ("orders",))]
