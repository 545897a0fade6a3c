"""Path and query parameters shared by the routers, and the name rules as JSON Schema.

Topic and group names follow :mod:`store.names` (the one home of the charset and the
lengths): ``pattern`` is :data:`store.TOPIC_NAME_PATTERN` / :data:`store.GROUP_NAME_PATTERN`,
which FastAPI enforces (422). The reserved system topics are refused for user topics by the
store itself (400 ``invalid_topic``); the schema states them with ``not``
(:data:`RESERVED_TOPICS`), which only the document carries.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import Header, Path, Query

from store import (
    GROUP_MAX_LENGTH,
    GROUP_NAME_PATTERN,
    ID_PATTERN,
    RETRY_TOPIC_MAX_LENGTH,
    SYSTEM_TOPIC_PREFIX,
    SYSTEM_TOPICS,
    TOPIC_NAME_PATTERN,
)

#: Charset and length of any topic name, the system topics' included (store.names).
TOPIC_PATTERN = TOPIC_NAME_PATTERN
#: Charset and length of a consumer or producer group name (store.names).
GROUP_PATTERN = GROUP_NAME_PATTERN
#: Sink ids, staged part ids, operator names.
ID_PATH_PATTERN = f"^{ID_PATTERN}$"

#: What a user topic may not be: a reserved system topic (refused with 400 ``invalid_topic``).
RESERVED_TOPICS: dict[str, Any] = {
    "not": {
        "anyOf": [
            {"enum": sorted(SYSTEM_TOPICS)},
            {"pattern": f"^{re.escape(SYSTEM_TOPIC_PREFIX)}"},
        ]
    }
}

#: Keyword arguments of ``Path`` / ``Query`` / ``Field`` for a topic name (any topic).
ANY_TOPIC: dict[str, Any] = {"min_length": 1, "max_length": RETRY_TOPIC_MAX_LENGTH, "pattern": TOPIC_PATTERN}
#: The same for a user topic (what produce, admin and group routes take).
USER_TOPIC: dict[str, Any] = {**ANY_TOPIC, "json_schema_extra": RESERVED_TOPICS}
#: The same for a consumer or producer group name.
GROUP: dict[str, Any] = {"min_length": 1, "max_length": GROUP_MAX_LENGTH, "pattern": GROUP_PATTERN}

TopicPath = Annotated[str, Path(**USER_TOPIC, description="Topic name (not a reserved system topic).")]
#: Routes that read any topic, the system topics included (describe, pull, offset by time).
AnyTopicPath = Annotated[str, Path(**ANY_TOPIC, description="Topic name (system topics included).")]
TopicQuery = Annotated[str, Query(**USER_TOPIC, description="Topic name.")]
GroupPath = Annotated[str, Path(**GROUP, description="Consumer group name.")]
QueuePath = Annotated[int, Path(ge=0, le=65535, description="Queue id within the topic.")]


def _ipv6_pattern() -> str:
    """RFC 3986's ``IPv6address`` (what ``urlparse`` accepts between brackets)."""
    h16 = "[0-9A-Fa-f]{1,4}"
    octet = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
    ls32 = rf"(?:{h16}:{h16}|{octet}(?:\.{octet}){{3}})"
    forms = [rf"(?:{h16}:){{6}}{ls32}", rf"::(?:{h16}:){{5}}{ls32}"]
    for before, after in ((0, 4), (1, 3), (2, 2), (3, 1), (4, 0)):
        head = f"(?:(?:{h16}:){{0,{before}}}{h16})?" if before else f"(?:{h16})?"
        forms.append(f"{head}::" + (f"(?:{h16}:){{{after}}}" if after else "") + ls32)
    forms += [rf"(?:(?:{h16}:){{0,5}}{h16})?::{h16}", rf"(?:(?:{h16}:){{0,6}}{h16})?::"]
    return "(?:" + "|".join(forms) + ")"


#: A producer group's check-back URL: absolute http(s), a host (or a bracketed IPv6 address),
#: printable ASCII (``TransactionBoard`` checks it, then ``urlparse``: 400 ``invalid_argument``).
CHECK_URL_PATTERN = (
    r"^[Hh][Tt][Tt][Pp][Ss]?://(?:[A-Za-z0-9._~%!$&'()*+,;=:-]*@)?"
    rf"(?:\[{_ipv6_pattern()}\]|[A-Za-z0-9._~%!$&'()*+,;=-]+)(?::[0-9]*)?(?:[/?#][\x21-\x7e]*)?$"
)

#: Longest accepted ``Idempotency-Key`` header value.
MAX_IDEMPOTENCY_KEY_CHARS = 200
#: 1-200 visible ASCII characters (checked by ``producing.idempotency_ref``: 400
#: ``invalid_idempotency_key``, so only the document carries it as a schema).
IDEMPOTENCY_KEY_PATTERN = f"^[\\x21-\\x7e]{{1,{MAX_IDEMPOTENCY_KEY_CHARS}}}$"
IdempotencyKeyHeader = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description="Makes the request idempotent: a retry with the same key (1-200 visible ASCII "
        "characters) returns the original result instead of storing again, across restarts too.",
        json_schema_extra={"pattern": IDEMPOTENCY_KEY_PATTERN},
    ),
]
