"""Answer part of a Kafka request with an authorization error and let the handler do the rest.

Most Kafka APIs name many topics (or groups, or transactional ids) and answer each on its own.
Kafka judges each one before doing anything (``KafkaApis``): a denied partition gets
TOPIC_AUTHORIZATION_FAILED and is never appended, fetched or committed. :func:`answer_split`
does that for any such API from a :class:`SplitSpec` (where the items sit in the request and
where their answers go in the response):

1. the request's list is split into allowed and denied items;
2. nothing denied: the handler runs unchanged (no cost);
3. something allowed: the handler runs on the allowed items only (the request body's list is
   replaced), its response is decoded and the denied items' errors appended;
4. nothing allowed: the response is built from the denied items alone (the handler never runs,
   unless ``call_when_empty``: Metadata still names the brokers).

Filtering what a response *lists* (Metadata for all topics, ListGroups) is
:func:`filter_response`. Both use kafka-python's response classes through
:mod:`ingest_api.kafka.codec`, as every handler does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ingest_api.kafka import codec
from ingest_api.kafka.codec import KafkaRequest
from ingest_api.kafka.framing import FRAME_SIZE

#: Runs the API's own handler on a (possibly reduced) request.
RunHandler = Callable[[KafkaRequest], Awaitable[bytes | None]]


@dataclass(frozen=True, slots=True)
class SplitSpec:
    """Where an API's items live. ``req_name``/``resp_name`` ``None``: items are plain strings;
    ``req_parts`` ``None``: items have no partitions (a topic, a group); ``req_index`` ``None``:
    partitions are plain ints."""

    req_list: str
    req_name: str | None
    resp_list: str
    resp_item_cls: str
    resp_name: str
    req_parts: str | None = None
    req_index: str | None = None
    resp_parts: str = "partitions"
    resp_part_cls: str = ""
    resp_index: str = "partition_index"
    error_field: str = "error_code"
    #: Fields of a denied entry besides its name/index and error.
    denied_fields: Mapping[str, Any] = field(default_factory=dict)
    #: Top-level response fields when the handler does not run.
    top_fields: Mapping[str, Any] = field(default_factory=dict)
    call_when_empty: bool = False


def item_name(spec: SplitSpec, item: Any) -> str:
    return str(item if spec.req_name is None else getattr(item, spec.req_name))


def denied_entries(request: KafkaRequest, spec: SplitSpec, items: list[Any], code: int) -> list[Any]:
    """The response entries answering ``items`` with ``code``."""
    item_cls = getattr(codec.response_class(request.api_key), spec.resp_item_cls)
    entries = []
    for item in items:
        fields: dict[str, Any] = {spec.resp_name: item_name(spec, item)}
        if spec.req_parts is None:
            fields.update({spec.error_field: code, **spec.denied_fields})
        else:
            part_cls = getattr(item_cls, spec.resp_part_cls)
            parts = getattr(item, spec.req_parts) or []
            indexes = [p if spec.req_index is None else getattr(p, spec.req_index) for p in parts]
            fields[spec.resp_parts] = [
                part_cls(**{spec.resp_index: i, spec.error_field: code, **spec.denied_fields})
                for i in indexes
            ]
        entries.append(item_cls(**fields))
    return entries


def encode_entries(request: KafkaRequest, spec: SplitSpec, entries: list[Any]) -> bytes | None:
    """A response made of ``entries`` only (``None`` when the client expects no answer)."""
    if not codec.expects_response(request):
        return None
    return codec.encode_response(request, **{spec.resp_list: entries, **spec.top_fields})


def decode_response(request: KafkaRequest, raw: bytes) -> Any:
    cls = codec.response_class(request.api_key)
    return cls.decode(raw[FRAME_SIZE.size :], version=request.api_version, header=True)


def encode_message(request: KafkaRequest, message: Any) -> bytes:
    message.with_header(correlation_id=request.correlation_id)
    return bytes(message.encode(header=True, framed=True))


async def answer_split(
    request: KafkaRequest,
    run: RunHandler,
    spec: SplitSpec,
    allowed: Callable[[str], bool],
    code: int,
    before_run: Callable[[Any], None] | None = None,
) -> bytes | None:
    """Answer denied items with ``code`` and the others through ``run`` (module docstring)."""
    body = request.body
    items = list(getattr(body, spec.req_list) or [])
    verdicts = [allowed(item_name(spec, item)) for item in items]
    if all(verdicts):
        return await run(request)
    kept = [item for item, ok in zip(items, verdicts, strict=True) if ok]
    refused = [item for item, ok in zip(items, verdicts, strict=True) if not ok]
    denied = denied_entries(request, spec, refused, code)
    if not kept and not spec.call_when_empty:
        return encode_entries(request, spec, denied)
    setattr(body, spec.req_list, kept)
    if before_run is not None:
        before_run(body)
    raw = await run(request)
    if raw is None:
        return None
    message = decode_response(request, raw)
    getattr(message, spec.resp_list).extend(denied)
    return encode_message(request, message)


async def filter_response(
    request: KafkaRequest, run: RunHandler, list_field: str, keep: Callable[[Any], bool]
) -> bytes | None:
    """Run the handler, then drop the entries of ``list_field`` that ``keep`` refuses."""
    raw = await run(request)
    if raw is None:
        return None
    message = decode_response(request, raw)
    entries = getattr(message, list_field) or []
    kept = [entry for entry in entries if keep(entry)]
    if len(kept) == len(entries):
        return raw
    setattr(message, list_field, kept)
    return encode_message(request, message)
