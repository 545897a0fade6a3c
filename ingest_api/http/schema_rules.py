"""Cross-field rules of request bodies, each stated once: as a check and as JSON Schema.

A field is *given* when it is present and not null (the models read an explicit ``null`` as
"not given"). Each rule object answers :meth:`problem` (``None`` when the values obey it,
else the refusal's message) for the model that owns the check, and :meth:`schema` for the
OpenAPI document; :func:`schema_of` merges several into a model's ``json_schema_extra``::

    _RULES = (ExactlyOne("body", "body_base64"), AtMostOne("queue_id", "sharding_key"))
    model_config = ConfigDict(extra="forbid", json_schema_extra=schema_of(_RULES))

Some rules are checked outside the model with their own error code (the scheduling fields
in :func:`broker.produce.scheduling`, 400 ``invalid_schedule``); the document
states them all the same, so a request it calls valid is one the broker accepts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Protocol


def given(field: str) -> dict[str, Any]:
    """JSON Schema: ``field`` is present and not null."""
    return {"required": [field], "properties": {field: {"not": {"type": "null"}}}}


def equals(field: str, value: Any) -> dict[str, Any]:
    """JSON Schema: ``field`` is present and equal to ``value``."""
    return {"required": [field], "properties": {field: {"const": value}}}


def _names(fields: Sequence[str]) -> str:
    return ", ".join(repr(f) for f in fields[:-1]) + f" and {fields[-1]!r}"


class Rule(Protocol):
    def problem(self, values: Mapping[str, Any]) -> str | None: ...
    def schema(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class ExactlyOne:
    """Exactly one of ``fields`` is given."""

    fields: tuple[str, ...]

    def __init__(self, *fields: str) -> None:
        object.__setattr__(self, "fields", fields)

    def problem(self, values: Mapping[str, Any]) -> str | None:
        count = sum(values.get(f) is not None for f in self.fields)
        return None if count == 1 else f"exactly one of {_names(self.fields)} must be given"

    def schema(self) -> dict[str, Any]:
        return {"oneOf": [given(f) for f in self.fields]}


@dataclass(frozen=True)
class AtMostOne:
    """At most one of ``fields`` is given."""

    fields: tuple[str, ...]

    def __init__(self, *fields: str) -> None:
        object.__setattr__(self, "fields", fields)

    def problem(self, values: Mapping[str, Any]) -> str | None:
        count = sum(values.get(f) is not None for f in self.fields)
        return None if count <= 1 else f"give at most one of {_names(self.fields)}"

    def schema(self) -> dict[str, Any]:
        pairs = [{"allOf": [given(a), given(b)]} for a, b in combinations(self.fields, 2)]
        return {"not": {"anyOf": pairs}}


@dataclass(frozen=True)
class Excludes:
    """When ``field`` is given, none of ``others`` is."""

    field: str
    others: tuple[str, ...]

    def problem(self, values: Mapping[str, Any]) -> str | None:
        if values.get(self.field) is None or all(values.get(o) is None for o in self.others):
            return None
        return (
            f"{self.field!r} excludes {_names(self.others) if len(self.others) > 1 else repr(self.others[0])}"
        )

    def schema(self) -> dict[str, Any]:
        return {"not": {"allOf": [given(self.field), {"anyOf": [given(o) for o in self.others]}]}}


@dataclass(frozen=True)
class GivenWhen:
    """``field`` is given exactly when ``when`` equals ``value``."""

    field: str
    when: str
    value: Any

    def problem(self, values: Mapping[str, Any]) -> str | None:
        if (values.get(self.when) == self.value) == (values.get(self.field) is not None):
            return None
        return f"{self.field!r} goes with {self.when}={self.value}, and {self.when}={self.value} needs it"

    def schema(self) -> dict[str, Any]:
        both = {"allOf": [equals(self.when, self.value), given(self.field)]}
        neither = {"not": {"anyOf": [equals(self.when, self.value), given(self.field)]}}
        return {"anyOf": [both, neither]}


def schema_of(rules: Sequence[Rule]) -> dict[str, Any]:
    """A model's ``json_schema_extra``: every rule's schema under ``allOf``."""
    return {"allOf": [rule.schema() for rule in rules]}


def check(rules: Sequence[Rule], values: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` (a pydantic refusal, 422) with the first broken rule's message."""
    for rule in rules:
        problem = rule.problem(values)
        if problem is not None:
            raise ValueError(problem)
