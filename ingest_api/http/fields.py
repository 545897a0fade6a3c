"""Field types of the request bodies: the constraints each field's schema states and the
checks behind them, in one place for :mod:`ingest_api.http.schemas` and the routers' models.

Every integer of a request body is :data:`JSON_INTEGER` (JSON Schema's integer: ``1.0`` counts,
``true`` and ``"1"`` do not). A limit read from the broker's configuration is a
:func:`config_limit` marker that :mod:`ingest_api.http.openapi` resolves. Patterns are written
for Python, Rust (pydantic) and ECMA-262 (JSON Schema) engines alike: no look-around, classes
spelled with ``\\uXXXX`` escapes.
"""

from __future__ import annotations

import base64
import binascii
import re
import sys
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, Strict

from broker.produce import RESERVED_PROPERTIES
from broker.produce import SEPARATORS as _SEPARATORS
from ingest_api.params import GROUP, USER_TOPIC

#: Property names the broker owns (RocketMQ's system properties); a producer may not send them.
#: RocketMQ's property encoding separators; they cannot appear inside names or values.

#: The separators as a regular-expression character class body (Python and ECMA-262 alike).
SEPARATOR_CLASS = "".join(f"\\u{ord(sep):04x}" for sep in _SEPARATORS)
#: Exactly the characters ``str.isspace`` is true for (all in the BMP), as a character class body.
WHITESPACE_CLASS = "".join(f"\\u{c:04x}" for c in range(sys.maxunicode + 1) if chr(c).isspace())
#: Text the property encoding can carry (tags, keys, property names and values).
_TEXT: dict[str, Any] = {"pattern": f"^[^{SEPARATOR_CLASS}]*$"}
#: Tags: text without separators that does not start or end with whitespace (the store
#: refuses ``tags.strip() != tags``).
_TAG_EDGE = f"[^{WHITESPACE_CLASS}{SEPARATOR_CLASS}]"
_TAGS_PATTERN = f"^{_TAG_EDGE}(?:[^{SEPARATOR_CLASS}]*{_TAG_EDGE})?$"
#: Base64 as ``base64.b64decode(validate=True)`` accepts it: padded, no whitespace.
BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


def config_limit(**keywords: str) -> dict[str, Any]:
    """``json_schema_extra`` for a limit read from the broker's configuration, e.g.
    ``config_limit(maximum="timer_max_delay_ms")``; :mod:`ingest_api.http.openapi` writes the
    configured value in place (names: :data:`ingest_api.http.openapi.CONFIG_LIMITS`)."""
    return {"x-config-limit": keywords}


def _json_integer(value: object) -> object:
    """JSON Schema's integer: a number without a fraction (``1.0`` is one). pydantic's lax mode
    would also read ``true`` and ``"1"`` as integers, which the document says are not."""
    if isinstance(value, bool | str):
        raise ValueError("Input should be an integer")
    return value


#: Metadata of every integer of a request body, after its constraints (placed before them,
#: pydantic writes the constraints as "ge"/"le" instead of "minimum"/"maximum"): refuses
#: booleans and strings (422).
JSON_INTEGER = BeforeValidator(_json_integer)
Int32 = Annotated[int, Field(ge=-(2**31), lt=2**31), JSON_INTEGER]
Int64 = Annotated[int, Field(ge=-(2**63), lt=2**63), JSON_INTEGER]
Count = Annotated[int, Field(ge=0), JSON_INTEGER]
#: A move of an offset, either way.
Shift = Annotated[int, Field(ge=-(2**62), le=2**62), JSON_INTEGER]
#: Queues of a topic (or of a retry topic).
QueueCount = Annotated[int, Field(ge=1, le=1024), JSON_INTEGER]
#: A boolean of a request body (``true`` / ``false`` only, 422 for anything else).
Flag = Annotated[bool, Strict()]
NonEmpty = Annotated[str, Field(min_length=1, max_length=1024)]
Offset = Annotated[int, Field(ge=0, le=2**62), JSON_INTEGER]
QueueId = Annotated[int, Field(ge=0, le=65535), JSON_INTEGER]
#: A user topic name (store.names rules; reserved system topics refused by the store, 400).
TopicName = Annotated[str, Field(**USER_TOPIC)]
#: A consumer or producer group name (store.names rules).
GroupName = Annotated[str, Field(**GROUP)]
Tags = Annotated[
    str,
    Field(
        min_length=1,
        max_length=1024,
        json_schema_extra={"pattern": _TAGS_PATTERN, "not": {"pattern": r"\|\|"}},
        description="RocketMQ TAGS, used by tag filters on pull: no '||', no \\x01 / \\x02, no "
        "whitespace at either end (a tag expression strips its tags, so it would never match).",
    ),
]
Key = Annotated[
    str,
    Field(
        min_length=1,
        max_length=1024,
        json_schema_extra={"pattern": f"^[^{WHITESPACE_CLASS}{SEPARATOR_CLASS}]*$"},
        description="No whitespace (keys are stored space-separated), no \\x01 / \\x02.",
    ),
]
#: User properties: names non-empty and not reserved, names and values without separators.
PROPERTIES_SCHEMA: dict[str, Any] = {
    "propertyNames": {"minLength": 1, **_TEXT, "not": {"enum": sorted(RESERVED_PROPERTIES)}},
    "additionalProperties": {"type": "string", **_TEXT},
}


def decode_body(body: str | None, body_base64: str | None) -> bytes:
    """The message bytes from exactly one of ``body`` (UTF-8) and ``body_base64``."""
    if (body is None) == (body_base64 is None):
        raise ValueError("exactly one of 'body' and 'body_base64' must be given")
    if body is not None:
        return body.encode("utf-8", "surrogatepass")
    try:
        return base64.b64decode(body_base64 or "", validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"body_base64 is not valid base64: {exc}") from None


def decimal_pattern(limit: int) -> str:
    """An anchored expression matching exactly the decimal numbers 0..``limit`` written without
    sign, spaces or leading zeros (how JSON object keys name queues)."""
    digits = str(limit)
    width = len(digits)
    shorter = [f"[1-9][0-9]{{0,{width - 2}}}"] if width > 1 else []
    same_width = []
    for i, digit in enumerate(digits):
        low = 1 if i == 0 and width > 1 else 0
        if int(digit) > low:
            rest = f"[0-9]{{{width - i - 1}}}" if i < width - 1 else ""
            same_width.append(f"{digits[:i]}[{low}-{int(digit) - 1}]{rest}")
    return "^(?:" + "|".join(["0", *shorter, *same_width, digits]) + ")$"


#: A queue id as a JSON object key: "0" .. "65535".
QUEUE_KEY_PATTERN = decimal_pattern(65535)
_QUEUE_KEY = re.compile(QUEUE_KEY_PATTERN)


def _queue_key(value: object) -> object:
    if isinstance(value, str):
        if _QUEUE_KEY.fullmatch(value) is None:
            raise ValueError(f"queue ids are decimal numbers 0-65535, got {value!r}")
        return int(value)
    return value


#: A queue id as a JSON object key (a decimal string), or an int from Python callers.
QueueKey = Annotated[int, Field(ge=0, le=65535), BeforeValidator(_queue_key)]
