"""Reading a topic back over the HTTP door in tests."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx


def all_messages(http: httpx.Client, topic: str) -> list[dict[str, Any]]:
    """Every message of ``topic``, all queues, page by page (the HTTP door's JSON pull); none
    when the topic does not exist."""
    path = quote(topic, safe="")  # %RETRY%group, %DLQ%group
    described = http.get(f"/topics/{path}")
    if described.status_code == 404:
        return []
    out: list[dict[str, Any]] = []
    for queue in described.json()["queue_offsets"]:
        offset = queue["min_offset"]
        while offset < queue["max_offset"]:
            page = http.get(
                f"/topics/{path}/queues/{queue['queue_id']}/messages",
                params={"offset": offset, "max_messages": 1000},
            ).json()
            out.extend(page["messages"])
            if page["next_offset"] <= offset:
                break
            offset = page["next_offset"]
    return out
