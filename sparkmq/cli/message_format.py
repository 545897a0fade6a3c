"""The kcat-like ``--format`` of ``sparkmq consume`` (offset-based and ``--pop`` alike)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

_TOKEN = re.compile(r"%[tqokTBsgiuhb%]|\\[nt]")


def render(message: Mapping[str, Any], topic: str, fmt: str) -> str:
    """One message (the pull answer's JSON object) through a kcat-like ``--format``."""
    body = message["body"] if message.get("body") is not None else message.get("body_base64", "")

    def token(match: re.Match[str]) -> str:
        value = {
            "%t": topic, "%q": message["queue_id"], "%o": message["queue_offset"],
            "%k": " ".join(message.get("keys") or []), "%T": message["store_timestamp"],
            "%B": message["born_timestamp"], "%s": body, "%g": message.get("tags") or "",
            "%i": message["msg_id"], "%u": message.get("uniq_key") or "", "%%": "%",
            "%h": json.dumps(message.get("properties") or {}, ensure_ascii=False),
            "%b": message.get("broker") or "", "\\n": "\n", "\\t": "\t",
        }[match.group(0)]  # fmt: skip
        return str(value)

    return _TOKEN.sub(token, fmt)
