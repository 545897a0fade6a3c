"""Path and query parameters shared by the routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path

from store import GROUP_MAX_LENGTH, ID_PATTERN, NAME_PATTERN, RETRY_TOPIC_MAX_LENGTH

#: RocketMQ's topic and group charset (store.names); the store re-validates the exact length
#: limit (127, or 255 for retry and dead-letter topics) and reserved names.
TOPIC_PATTERN = f"^{NAME_PATTERN}$"
#: Sink ids, staged part ids, operator names.
ID_PATH_PATTERN = f"^{ID_PATTERN}$"

TopicPath = Annotated[
    str,
    Path(min_length=1, max_length=RETRY_TOPIC_MAX_LENGTH, pattern=TOPIC_PATTERN, description="Topic name."),
]
GroupPath = Annotated[
    str,
    Path(
        min_length=1, max_length=GROUP_MAX_LENGTH, pattern=TOPIC_PATTERN, description="Consumer group name."
    ),
]
QueuePath = Annotated[int, Path(ge=0, le=65535, description="Queue id within the topic.")]
