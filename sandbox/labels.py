"""The sandbox's one label selector rule: apimachinery's ``labels.Requirement`` (``NewRequirement``
and ``Matches``) and ``metav1.LabelSelectorAsSelector``.

Every selector the sandbox evaluates comes down to requirements on labels: the ``labelSelector``
of a list or watch (``selection.LabelSelector.parse``), a ``metav1.LabelSelector``
(:meth:`LabelSelector.from_spec`: a PodDisruptionBudget's, a ReplicaSet's, a claim's, a pod
affinity term's, a topology spread constraint's) and a node selector term (``nodefit``), whose
``Gt`` / ``Lt`` kube turns into requirements on the same type. So the rule is written here once:
which requirements kube can build (:func:`new_requirement`), how one matches, and how a
``metav1.LabelSelector`` reads. The query-string parser stays in ``selection`` beside what it
parses (the store raises its ``ApiError`` for a bad query, which this module must not know).

A selector kube-apiserver's validation refuses can still be met at evaluation time (an object
that was never validated); ``LabelSelectorAsSelector`` then returns an error, here
:class:`InvalidSelector`, and each caller answers it: the scheduler's plugins (pod affinity,
topology spread, volume binding's CSIStorageCapacity check) read it as matching nothing, as
kube-scheduler does (:meth:`LabelSelector.or_nothing`); ``selection.LabelSelector.from_spec``,
which the store's users call, refuses it with ``400 Bad Request``.

Kept apart from usher's ``engine/selectors.py`` on purpose: the sandbox is the oracle that
checks usher, so it never imports usher's rules.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .object_validation import label_value_errors, qualified_name_errors


class Operator(StrEnum):
    """A requirement's operator, spelt as apimachinery's ``selection.Operator``."""

    EQUALS = "="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"
    GREATER_THAN = "gt"
    LESS_THAN = "lt"


#: what ``strconv.ParseInt(s, 10, 64)`` accepts: a sign, ASCII digits (range checked apart)
_INTEGER = re.compile(r"[+-]?[0-9]+")
_INT64 = range(-(2**63), 2**63)


def parse_int64(text: str | None) -> int | None:
    """``text`` as Go's ``strconv.ParseInt(text, 10, 64)`` reads it; None where that fails."""
    if text is None or not _INTEGER.fullmatch(text):
        return None
    number = int(text)
    return number if number in _INT64 else None


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: Operator
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        match self.operator:
            case Operator.EXISTS:
                return present
            case Operator.DOES_NOT_EXIST:
                return not present
            case Operator.EQUALS | Operator.IN:
                return present and labels[self.key] in self.values
            case Operator.NOT_EQUALS | Operator.NOT_IN:
                return not present or labels[self.key] not in self.values
            case _:
                if not present or len(self.values) != 1:
                    return False
                have, bound = parse_int64(labels[self.key]), parse_int64(next(iter(self.values)))
                if have is None or bound is None:
                    return False
                return have > bound if self.operator == Operator.GREATER_THAN else have < bound


class InvalidSelector(ValueError):
    """The error of ``NewRequirement`` / ``LabelSelectorAsSelector``: a selector kube cannot
    build (validation refuses it on create), met where it was not validated."""


def new_requirement(key: Any, operator: Operator, values: Iterable[Any] = ()) -> Requirement:
    """``labels.NewRequirement``: the key a qualified name, each value a label value, as many
    values as the operator takes (one for ``=`` / ``!=``, ``Gt`` and ``Lt``, the latter an
    integer; some for ``in`` / ``notin``; none for ``exists`` / ``!``); else :class:`InvalidSelector`."""
    values = list(values)
    if not isinstance(key, str) or not all(isinstance(v, str) for v in values):
        raise InvalidSelector(f"key and values must be strings: {key!r}, {values!r}")
    problems = [f"key: Invalid value: {key!r}: {m}" for m in qualified_name_errors(key)]
    match operator:
        case Operator.IN | Operator.NOT_IN if not values:
            problems.append("values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty")
        case Operator.EQUALS | Operator.NOT_EQUALS if len(values) != 1:
            problems.append(f"values: Invalid value: {values!r}: exact-match compatibility requires one single value")
        case Operator.EXISTS | Operator.DOES_NOT_EXIST if values:
            problems.append(f"values: Invalid value: {values!r}: values set must be empty for exists and does not exist")
        case Operator.GREATER_THAN | Operator.LESS_THAN:
            if len(values) != 1:
                problems.append(f"values: Invalid value: {values!r}: for 'Gt', 'Lt' operators, exactly one value is required")
            problems.extend(f"values[{i}]: Invalid value: {v!r}: for 'Gt', 'Lt' operators, the value must be an integer"
                            for i, v in enumerate(values) if parse_int64(v) is None)
    problems.extend(f"values[{i}]: Invalid value: {v!r}: {m}" for i, v in enumerate(values) for m in label_value_errors(v))
    if problems:
        raise InvalidSelector("; ".join(problems))
    return Requirement(key, operator, frozenset(values))


#: a ``LabelSelectorRequirement``'s operator as the label requirement kube turns it into
SELECTOR_OPERATORS = {
    "In": Operator.IN, "NotIn": Operator.NOT_IN, "Exists": Operator.EXISTS, "DoesNotExist": Operator.DOES_NOT_EXIST,
}


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A conjunction of label requirements: the empty selector matches everything, and
    :data:`NOTHING` (``labels.Nothing()``) nothing."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> LabelSelector:
        """A ``metav1.LabelSelector`` (``matchLabels``, ``matchExpressions``) as
        ``LabelSelectorAsSelector`` reads it: None selects nothing, ``{}`` everything; what it
        cannot build (an unknown operator, a missing key, values the operator does not take)
        raises :class:`InvalidSelector`."""
        return _build(cls, spec)

    @classmethod
    def or_nothing(cls, spec: Mapping[str, Any] | None) -> LabelSelector:
        """:meth:`from_spec`, a selector it cannot build read as matching nothing, as
        kube-scheduler's plugins read ``LabelSelectorAsSelector``'s error."""
        try:
            return _build(cls, spec)
        except InvalidSelector:
            return NOTHING

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return not self.nothing and all(r.matches(labels) for r in self.requirements)


def _build(cls: type[LabelSelector], spec: Mapping[str, Any] | None) -> LabelSelector:
    if spec is None:
        return NOTHING
    if not isinstance(spec, Mapping):
        raise InvalidSelector(f"a label selector is an object, not {spec!r}")
    match_labels, expressions = spec.get("matchLabels") or {}, spec.get("matchExpressions") or []
    if not isinstance(match_labels, Mapping) or not isinstance(expressions, list):
        raise InvalidSelector("matchLabels is an object and matchExpressions a list")
    requirements = [new_requirement(k, Operator.EQUALS, [v]) for k, v in match_labels.items()]
    for expr in expressions:
        if not isinstance(expr, Mapping):
            raise InvalidSelector(f"a label selector requirement is an object, not {expr!r}")
        name = expr.get("operator")
        operator = SELECTOR_OPERATORS.get(name) if isinstance(name, str) else None
        if operator is None:
            raise InvalidSelector(f"{name!r} is not a valid label selector operator")
        values = expr.get("values") or []
        if not isinstance(values, list):
            raise InvalidSelector(f"values is a list, not {values!r}")
        requirements.append(new_requirement(expr.get("key"), operator, values))
    return cls(tuple(requirements))


NOTHING = LabelSelector(nothing=True)
"""``labels.Nothing()``: what a nil selector, or one that cannot be built, selects."""
