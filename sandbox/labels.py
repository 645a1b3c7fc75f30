"""The sandbox's one label requirement rule, as apimachinery's ``labels.Requirement.Matches``.

Every selector the sandbox evaluates comes down to requirements on labels: the ``labelSelector``
of a list or watch (``store.LabelSelector.parse``), a ``metav1.LabelSelector`` (``from_spec``:
a PodDisruptionBudget's, a ReplicaSet's, a pod affinity term's) and a node selector term
(``nodefit``), whose ``Gt`` / ``Lt`` kube turns into ``selection.GreaterThan`` / ``LessThan``
requirements on the same type. So the rule is written here once; the parsers stay beside what
they parse (the store raises its ``ApiError`` for a bad query, which this module must not know).

Kept apart from usher's ``engine/selectors.py`` on purpose: the sandbox is the oracle that
checks usher, so it never imports usher's rules.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


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
