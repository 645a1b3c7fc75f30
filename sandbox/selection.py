"""Label and field selectors of lists and watches, parsed as the API server parses them, and the
:class:`Filter` a list or watch applies.

A requirement's rule is :class:`usher.sandbox.labels.Requirement`, shared with the node
selectors of :mod:`usher.sandbox.nodefit`; this module only parses the selector strings of a
request (with the API server's messages for the ones it refuses) and says which fields of which
kind may be selected on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .kinds import ResourceType
from .api_errors import ApiError
from .labels import Operator, Requirement, parse_int64

JsonObject = dict[str, Any]


# --------------------------------------------------------------------------- selectors
# (parsed here; a requirement's rule is labels.Requirement, shared with nodefit's node selectors)


_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_VALUE = r"[-A-Za-z0-9_.]*"
_EQUALITY = re.compile(rf"\s*({_KEY})\s*(==|=|!=)\s*({_VALUE})\s*")
_SET = re.compile(rf"\s*({_KEY})\s+(in|notin)\s*\(([^()]*)\)\s*")
_EXISTS = re.compile(rf"\s*(!?)\s*({_KEY})\s*")
_ORDER = re.compile(rf"\s*({_KEY})\s*([<>])\s*({_VALUE})\s*")
_SET_VALUE = re.compile(_VALUE)


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A conjunction of label requirements; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        """Parse the ``labelSelector`` query syntax (``a=b,c!=d,e in (f,g),!h,i>1``)."""
        if not text or not text.strip():
            return cls()
        return cls(tuple(_parse_requirement(part) for part in _split_top_level(text)))

    @classmethod
    def from_spec(cls, selector: Mapping[str, Any]) -> LabelSelector:
        """The selector of a ``metav1.LabelSelector`` (``matchLabels``, ``matchExpressions``)."""
        requirements = [
            Requirement(k, Operator.EQUALS, frozenset([str(v)])) for k, v in (selector.get("matchLabels") or {}).items()
        ]
        operators = {
            "In": Operator.IN,
            "NotIn": Operator.NOT_IN,
            "Exists": Operator.EXISTS,
            "DoesNotExist": Operator.DOES_NOT_EXIST,
        }
        for expr in selector.get("matchExpressions") or []:
            operator = operators.get(expr.get("operator", ""))
            if operator is None:
                raise ApiError.bad_request(f"{expr.get('operator')!r} is not a valid label selector operator")
            requirements.append(Requirement(expr["key"], operator, frozenset(expr.get("values") or ())))
        return cls(tuple(requirements))

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)


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
