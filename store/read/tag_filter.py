"""Tag expressions (RocketMQ ``SubscriptionData``): ``*`` or ``"A || B"``.

Filtering is two-step, as in RocketMQ: the ConsumeQueue's tagsCode (Java hashCode of TAGS)
prefilters without touching the CommitLog, then the real tag string is re-checked because
hashes collide.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from store.errors import InvalidArgument
from store.format.java_hash import java_string_hash


@dataclass(frozen=True, slots=True)
class TagFilter:
    """A parsed tag expression; ``tags is None`` matches everything."""

    tags: frozenset[str] | None
    codes: npt.NDArray[np.int64]

    @property
    def matches_all(self) -> bool:
        return self.tags is None

    def code_mask(self, tags_codes: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Prefilter ConsumeQueue units by tagsCode."""
        if self.tags is None:
            return np.ones(len(tags_codes), dtype=np.bool_)
        return np.isin(tags_codes, self.codes)

    def matches(self, tag: str | None) -> bool:
        return self.tags is None or (tag is not None and tag in self.tags)


MATCH_ALL = TagFilter(None, np.zeros(0, dtype=np.int64))


def parse_tag_expression(expression: str | None) -> TagFilter:
    """Parse ``None``/``""``/``"*"`` (everything) or ``"A || B || C"``."""
    if expression is None or expression.strip() in ("", "*"):
        return MATCH_ALL
    tags = [part.strip() for part in expression.split("||")]
    if any(not tag for tag in tags):
        raise InvalidArgument(f"bad tag expression {expression!r}: expected '*' or 'A || B'")
    if "*" in tags:
        return MATCH_ALL
    unique = frozenset(tags)
    codes = np.array(sorted({java_string_hash(tag) for tag in unique}), dtype=np.int64)
    return TagFilter(unique, codes)
