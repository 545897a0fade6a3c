"""Path and query parameters shared by the routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path

#: RocketMQ's topic charset (store.names); the store re-validates length and reserved names.
TOPIC_PATTERN = r"^[%|a-zA-Z0-9_-]+$"

TopicPath = Annotated[
    str, Path(min_length=1, max_length=255, pattern=TOPIC_PATTERN, description="Topic name.")
]
GroupPath = Annotated[
    str, Path(min_length=1, max_length=120, pattern=TOPIC_PATTERN, description="Consumer group name.")
]
QueuePath = Annotated[int, Path(ge=0, le=65535, description="Queue id within the topic.")]
