"""Path and query parameters of the two web doors (the HTTP API and the console), and the name
rules as JSON Schema.

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
