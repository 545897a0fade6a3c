"""Decoding JSON and NDJSON produce batches with msgspec, for the columnar path.

The models in :mod:`ingest_api.http.schemas` (``ProduceBatchIn``, ``ProduceEntryIn``) are the
contract: the OpenAPI spec and every refusal (``{"error", "message", "index"}``) come from them.
Validating a thousand entries with them costs several times what storing them does, so
``messages:batch`` first tries this decoder: :class:`FastEntry` is a msgspec ``Struct`` with the
same fields and the same type and length constraints, and :func:`accepted_bodies` applies the
model's cross-field rules column by column. The decoder only ever *accepts*: a batch it
accepts is one the models accept with the same values; anything else (a field that fails,
an entry that names a transaction or a topic, an empty or oversized batch, a line that is
not one JSON object) returns None and the caller takes the model path, so every refusal is
still the model's own. ``tests/ingest/test_json_batch.py`` compares both on generated batches.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from typing import Annotated, Protocol

import msgspec
from msgspec import Meta

from broker.produce import RESERVED_PROPERTIES
from ingest_api.http.fields import WHITESPACE_CLASS

#: ``NonEmpty``, ``QueueId`` and the scheduling fields' bounds of :class:`schemas.ProduceEntryIn`.
_Text = Annotated[str, Meta(min_length=1, max_length=1024)]
_QueueId = Annotated[int, Meta(ge=0, le=65535)]
_Int32 = Annotated[int, Meta(ge=-(2**31), lt=2**31)]
_Int64 = Annotated[int, Meta(ge=-(2**63), le=2**63 - 1)]
#: What the model's ``_check_text`` refuses inside tags, keys and property names and values.
_SEPARATORS = re.compile("[\x01\x02]")
#: Exactly the characters ``str.isspace`` is true for (keys are stored space-separated).
_WHITESPACE = re.compile(f"[{WHITESPACE_CLASS}]")


class EntryFields(Protocol):
    """The fields of one produce entry that the columnar path reads (``ProduceIn`` has them)."""

    @property
    def body(self) -> str | None: ...
    @property
    def body_base64(self) -> str | None: ...
    @property
    def tags(self) -> str | None: ...
    @property
    def keys(self) -> Sequence[str]: ...
    @property
    def properties(self) -> dict[str, str]: ...
    @property
    def queue_id(self) -> int | None: ...
    @property
    def sharding_key(self) -> str | None: ...
    @property
    def delay_level(self) -> int | None: ...
    @property
    def deliver_at_ms(self) -> int | None: ...
    @property
    def delay_ms(self) -> int | None: ...
    @property
    def scheduled(self) -> bool: ...


class FastEntry(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """``ProduceEntryIn`` as msgspec decodes it. ``transaction`` and ``topic`` may only be null here:
    an entry that gives either takes the model path (transactions, batches across topics).

    Not tracked by the garbage collector and with ``keys`` as a tuple (no list per entry): a
    batch then allocates no container objects per entry, so it does not set off collections
    that walk the broker's whole heap."""

    body: str | None = None
    body_base64: str | None = None
    tags: _Text | None = None
    keys: Annotated[tuple[_Text, ...], Meta(max_length=64)] = ()
    properties: dict[str, str] = msgspec.field(default_factory=dict)
    queue_id: _QueueId | None = None
    sharding_key: _Text | None = None
    delay_level: _Int32 | None = None
    deliver_at_ms: _Int64 | None = None
    delay_ms: _Int64 | None = None
    transaction: None = None
    topic: None = None

    @property
    def scheduled(self) -> bool:
        return self.delay_level is not None or self.deliver_at_ms is not None or self.delay_ms is not None


class _FastBatch(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    messages: list[FastEntry]
    transaction: None = None


_BATCH = msgspec.json.Decoder(_FastBatch)
_ENTRY = msgspec.json.Decoder(FastEntry)


def decode_json_batch(raw: bytes, limit: int) -> tuple[list[FastEntry], list[bytes]] | None:
    """``{"messages": [...]}`` -> (entries, their bodies), or None: take the model path."""
    try:
        batch = _BATCH.decode(raw)
    except msgspec.DecodeError:
        return None
    if not 0 < len(batch.messages) <= limit:
        return None
    bodies = accepted_bodies(batch.messages)
    return None if bodies is None else (batch.messages, bodies)


def decode_ndjson_batch(raw: bytes, limit: int) -> tuple[list[FastEntry], list[bytes]] | None:
    """One JSON object per line, blank lines skipped (as ``batches.parse_ndjson_batch``), or None."""
    decode = _ENTRY.decode
    try:
        entries = [decode(line) for line in raw.split(b"\n") if line.strip()]
    except msgspec.DecodeError:
        return None
    if not 0 < len(entries) <= limit:
        return None
    bodies = accepted_bodies(entries)
    return None if bodies is None else (entries, bodies)


def accepted_bodies(entries: Sequence[FastEntry]) -> list[bytes] | None:
    """The bodies when ``ProduceEntryIn``'s validator would accept every entry, else None."""
    n = len(entries)
    sharding = [e.sharding_key for e in entries]
    if sharding.count(None) != n and any(
        k is not None and e.queue_id is not None for e, k in zip(entries, sharding, strict=True)
    ):
        return None
    tags = [t for e in entries if (t := e.tags) is not None]
    if tags and not _tags_ok(tags):
        return None
    keys = [k for e in entries for k in e.keys]
    if keys and not _keys_ok(keys):
        return None
    if any(e.properties for e in entries) and not _properties_ok(entries):
        return None
    return _bodies(entries)


def _texts_ok(texts: str) -> bool:
    """No separator and valid Unicode (``schemas._check_text``), on texts joined with NULs."""
    if _SEPARATORS.search(texts) is not None:
        return False
    try:
        texts.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _tags_ok(tags: list[str]) -> bool:
    joined = "\x00".join(tags)  # NUL separates: '||' cannot span two tags
    return "||" not in joined and _texts_ok(joined) and all(tag == tag.strip() for tag in tags)


def _keys_ok(keys: list[str]) -> bool:
    joined = "\x00".join(keys)
    return _WHITESPACE.search(joined) is None and _texts_ok(joined)


def _properties_ok(entries: Sequence[FastEntry]) -> bool:
    names = {name for e in entries for name in e.properties}
    if "" in names or not names.isdisjoint(RESERVED_PROPERTIES):
        return False
    values = [value for e in entries for value in e.properties.values()]
    return _texts_ok("\x00".join(names)) and _texts_ok("\x00".join(values))


def _bodies(entries: Sequence[FastEntry]) -> list[bytes] | None:
    """Each entry's body bytes, or None when an entry has neither or both of ``body`` and
    ``body_base64``, a body that is not valid Unicode, or base64 that does not decode."""
    texts = [e.body for e in entries]
    encoded_texts = [e.body_base64 for e in entries]
    if texts.count(None) == 0 and encoded_texts.count(None) == len(entries):
        try:
            return [text.encode("utf-8") for text in texts]  # type: ignore[union-attr]
        except UnicodeEncodeError:
            return None
    bodies: list[bytes] = []
    for text, encoded in zip(texts, encoded_texts, strict=True):
        if (text is None) == (encoded is None):
            return None
        try:
            bodies.append(
                text.encode("utf-8") if text is not None else base64.b64decode(encoded or "", validate=True)
            )
        except (UnicodeEncodeError, binascii.Error, ValueError):
            return None
    return bodies
