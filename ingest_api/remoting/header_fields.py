"""The machinery of typed custom headers: one frozen dataclass per header, each field mapped to
its ``extFields`` name, parsed and written as RocketMQ's ``decodeCommandCustomHeader`` and
``makeCustomHeaderToNet`` do.

A header class declares its fields with :func:`wire` (required, Java's ``@CFNotNull``) or
:func:`optional` (a default when absent)::

    @dataclass(frozen=True, slots=True)
    class GetMinOffsetRequest(Header):
        topic: str = wire("topic")
        queue_id: int = wire("queueId")

Field types: ``str``, ``int`` (Java ``Integer.parseInt``/``Long.parseLong``: decimal, optional
sign), ``bool`` (``Boolean.parseBoolean``: ``"true"`` in any case is true, anything else false),
each optionally ``| None``. A missing required field or a number that does not parse raises
:class:`HeaderFieldError` naming the header class and the wire field. Pure functions.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Mapping
from typing import Any, Final, TypeVar

from ingest_api.remoting.errors import HeaderFieldError

#: dataclass field metadata key holding the wire (extFields) name.
WIRE_NAME: Final = "wire"
_INTEGER: Final = re.compile(r"[+-]?[0-9]+")
_INT64: Final = (-(2**63), 2**63)
#: Fewer digits than this always fit a long (19 digits may not).
_SAFE_DIGITS: Final = 19

H = TypeVar("H", bound="Header")


def wire(name: str) -> Any:
    """A required field named ``name`` on the wire."""
    return dataclasses.field(metadata={WIRE_NAME: name})


def optional(name: str, default: object = None) -> Any:
    """A field named ``name`` on the wire, ``default`` when absent."""
    return dataclasses.field(default=default, metadata={WIRE_NAME: name})


class Header:
    """Base of every typed header; subclasses are frozen dataclasses."""

    __slots__ = ()

    @classmethod
    def from_ext_fields(
        cls: type[H], ext_fields: Mapping[str, str], names: Mapping[str, str] | None = None
    ) -> H:
        """Parse ``ext_fields``; raises :class:`HeaderFieldError` naming a bad field.

        ``names`` replaces the declared wire names (attribute -> name), for headers with two
        spellings (SEND_MESSAGE's V1 long names and V2 letters)."""
        return cls(**_parse(cls, ext_fields, names))

    def to_ext_fields(self, names: Mapping[str, str] | None = None) -> dict[str, str]:
        """The extFields of this header: None fields left out, bools as ``true``/``false``."""
        return _render(self, names)


Layout = tuple[tuple[str, str, type, bool, bool], ...]
_LAYOUTS: dict[type, Layout] = {}


def _layout(cls: type[Header]) -> Layout:
    """(attribute, wire name, scalar type, nullable, required) per field, in declaration order."""
    cached = _LAYOUTS.get(cls)
    if cached is None:
        cached = _LAYOUTS[cls] = _compute_layout(cls)
    return cached


def _compute_layout(cls: type[Header]) -> Layout:
    hints = typing.get_type_hints(cls)
    rows = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        scalar, nullable = _scalar_of(hints[f.name], cls, f.name)
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        rows.append((f.name, f.metadata.get(WIRE_NAME, f.name), scalar, nullable, required))
    return tuple(rows)


def _scalar_of(hint: object, cls: type, attr: str) -> tuple[type, bool]:
    if hint in (str, int, bool):
        return typing.cast(type, hint), False
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) and len(args) == 2 and type(None) in args:
        (scalar,) = [a for a in args if a is not type(None)]
        if scalar in (str, int, bool):
            return scalar, True
    raise TypeError(f"{cls.__name__}.{attr}: unsupported header field type {hint!r}")


def _parse(cls: type[Header], ext: Mapping[str, str], names: Mapping[str, str] | None) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for attr, default_name, scalar, _nullable, required in _layout(cls):
        name = names[attr] if names is not None else default_name
        raw = ext.get(name)
        if raw is None:
            if required:
                raise HeaderFieldError(f"{cls.__name__}: the field <{name}> is missing")
        elif scalar is str:
            values[attr] = raw
        elif scalar is int and len(raw) < _SAFE_DIGITS and raw.isdigit() and raw.isascii():
            values[attr] = int(raw)  # the common case inline: a send header has 7 numbers
        else:
            values[attr] = _convert(raw, scalar, cls, name)
    return values


def _convert(raw: str, scalar: type, cls: type, name: str) -> object:
    if scalar is str:
        return raw
    if scalar is bool:
        return raw.strip().lower() == "true"
    if len(raw) < _SAFE_DIGITS and raw.isascii() and raw.isdigit():
        return int(raw)  # the common case: plain decimal digits that fit a long
    text = raw.strip()
    if not _INTEGER.fullmatch(text):
        raise HeaderFieldError(f"{cls.__name__}: the field <{name}> is not an integer: {raw[:60]!r}")
    number = int(text)
    if not _INT64[0] <= number < _INT64[1]:
        raise HeaderFieldError(f"{cls.__name__}: the field <{name}> = {number} does not fit a long")
    return number


def _render(header: Header, names: Mapping[str, str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for attr, default_name, _scalar, _nullable, _required in _layout(type(header)):
        value = getattr(header, attr)
        if value is None:
            continue
        name = names[attr] if names is not None else default_name
        out[name] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out
