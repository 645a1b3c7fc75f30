"""Label and field selectors of lists and watches, parsed as the API server parses them, and the
:class:`Filter` a list or watch applies.

A selector's rule is :mod:`usher.sandbox.labels` (its requirements, shared with the node
selectors of :mod:`usher.sandbox.nodefit`, and the reading of a ``metav1.LabelSelector``); this
module only parses the selector strings of a request (with the API server's messages for the
ones it refuses), answers a ``metav1.LabelSelector`` that cannot be built as the API server
answers a bad selector (``400 Bad Request``), and says which fields of which kind may be
selected on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .kinds import ResourceType
from .api_errors import ApiError
from . import labels as label_rules
from .labels import InvalidSelector, Operator, Requirement, parse_int64

JsonObject = dict[str, Any]


# --------------------------------------------------------------------------- selectors
# (parsed here; the rule is labels.LabelSelector, shared with the scheduler's plugins)


_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_VALUE = r"[-A-Za-z0-9_.]*"
_EQUALITY = re.compile(rf"\s*({_KEY})\s*(==|=|!=)\s*({_VALUE})\s*")
_SET = re.compile(rf"\s*({_KEY})\s+(in|notin)\s*\(([^()]*)\)\s*")
_EXISTS = re.compile(rf"\s*(!?)\s*({_KEY})\s*")
_ORDER = re.compile(rf"\s*({_KEY})\s*([<>])\s*({_VALUE})\s*")
_SET_VALUE = re.compile(_VALUE)


class LabelSelector(label_rules.LabelSelector):
    """:class:`usher.sandbox.labels.LabelSelector` as the API server reads it from a request:
    the query syntax parsed here, a selector that cannot be built refused with ``400``."""

    __slots__ = ()

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        """Parse the ``labelSelector`` query syntax (``a=b,c!=d,e in (f,g),!h,i>1``)."""
        if not text or not text.strip():
            return cls()
        return cls(tuple(_parse_requirement(part) for part in _split_top_level(text)))

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> label_rules.LabelSelector:
        """:meth:`usher.sandbox.labels.LabelSelector.from_spec`; what it cannot build is a
        ``400 Bad Request`` with ``LabelSelectorAsSelector``'s words."""
        try:
            return super(LabelSelector, cls).from_spec(spec)
        except InvalidSelector as e:
            raise ApiError.bad_request(str(e)) from None


def _split_top_level(text: str) -> list[str]:
    """Split on the commas that are not inside parentheses."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _parse_requirement(part: str) -> Requirement:
    if m := _EQUALITY.fullmatch(part):
        operator = Operator.NOT_EQUALS if m[2] == "!=" else Operator.EQUALS
        return Requirement(m[1], operator, frozenset([m[3]]))
    if m := _SET.fullmatch(part):
        values = [v.strip() for v in m[3].split(",")]
        if not all(_SET_VALUE.fullmatch(v) for v in values):
            raise ApiError.bad_request(f"unable to parse requirement: invalid value in {part.strip()!r}")
        return Requirement(m[1], Operator.IN if m[2] == "in" else Operator.NOT_IN, frozenset(values))
    if m := _ORDER.fullmatch(part):
        if parse_int64(m[3]) is None:
            raise ApiError.bad_request(f"unable to parse requirement: values[0]: Invalid value: {m[3]!r}: for 'Gt', 'Lt' "
                                       "operators, the value must be an integer")
        return Requirement(m[1], Operator.GREATER_THAN if m[2] == ">" else Operator.LESS_THAN, frozenset([m[3]]))
    if m := _EXISTS.fullmatch(part):
        return Requirement(m[2], Operator.DOES_NOT_EXIST if m[1] else Operator.EXISTS)
    raise ApiError.bad_request(f"unable to parse requirement: {part.strip()!r}")


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    path: str
    value: str
    negated: bool

    def matches(self, obj: JsonObject) -> bool:
        return (field_value(obj, self.path) == self.value) != self.negated


@dataclass(frozen=True, slots=True)
class FieldSelector:
    """A conjunction of ``field=value`` / ``field!=value`` terms on a resource's selectable fields."""

    requirements: tuple[FieldRequirement, ...] = ()

    @classmethod
    def parse(cls, text: str | None, rt: ResourceType) -> FieldSelector:
        if not text or not text.strip():
            return cls()
        return cls(tuple(_parse_field_term(term, rt) for term in text.split(",")))

    def matches(self, obj: JsonObject) -> bool:
        return all(r.matches(obj) for r in self.requirements)

    def equality(self, path: str) -> str | None:
        """The value this selector requires ``path`` to equal, if it has such a term."""
        for r in self.requirements:
            if r.path == path and not r.negated:
                return r.value
        return None


def _parse_field_term(term: str, rt: ResourceType) -> FieldRequirement:
    m = re.fullmatch(r"\s*([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*?)\s*", term)
    if m is None:
        raise ApiError.bad_request(f"invalid selector: {term!r}; can't understand {term.strip()!r}")
    path = rt.field_path(m[1])
    if path is None:
        raise ApiError.bad_request(f"field label not supported: {m[1]}")
    return FieldRequirement(path, m[3], m[2] == "!=")


def field_value(obj: JsonObject, path: str) -> str:
    """The string form of a field, as field selectors compare it (absent is ``""``)."""
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True, slots=True)
class Filter:
    """Which objects of one resource a list or a watch is about."""

    namespace: str | None = None
    labels: LabelSelector = LabelSelector()
    fields: FieldSelector = FieldSelector()

    def matches(self, obj: JsonObject) -> bool:
        meta = obj["metadata"]
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        return self.labels.matches(meta.get("labels")) and self.fields.matches(obj)
