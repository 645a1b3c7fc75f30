"""Kubernetes label selectors and node selector requirements, evaluated once for all of usher.

One requirement rule serves both kinds of selector, as apimachinery's ``labels.Requirement``
serves both: a label selector (``matchLabels`` and ``matchExpressions`` with ``In``, ``NotIn``,
``Exists``, ``DoesNotExist``) selects a set of labels when every term holds, as
``LabelSelectorAsSelector`` evaluates it; a node selector requirement (node affinity's
``matchExpressions`` and ``matchFields``) adds ``Gt`` and ``Lt``, which read the label as a
base-10 64-bit integer (``strconv.ParseInt``) and fail to match when it is absent or is not one.

The callers read selectors in different shapes: the queue config's ``namespaceSelector``
(validated by its model), a PodDisruptionBudget's selector (a raw API object), a pod's
``nodeSelector`` and node affinity (``backends/kube/constraints.py`` parses them). They parse,
report what they cannot read with its field path, and come here to match, so each rule lives in
one place. Pure: no I/O, no pydantic, so the engine's hot path may call it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from enum import StrEnum


class SelectorOperator(StrEnum):
    """The operators of a label selector's ``matchExpressions`` term."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class NodeSelectorOperator(StrEnum):
    """The operators of a node selector requirement: a label selector's and ``Gt`` / ``Lt``."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"


#: the range of a Go ``int64``, which ``strconv.ParseInt(s, 10, 64)`` accepts
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def label_integer(text: str) -> int | None:
    """``text`` read as ``Gt`` / ``Lt`` read a label or a bound: an optional sign and ASCII
    digits, within int64; None for anything else (no spaces, no ``_``, no other digits)."""
    body = text[1:] if text[:1] in ("+", "-") else text
    if not body or not body.isascii() or not body.isdigit():
        return None
    number = int(text)
    return number if _INT64_MIN <= number <= _INT64_MAX else None


def requirement_matches(operator: SelectorOperator | NodeSelectorOperator, values: Collection[str],
                        value: str | None) -> bool:
    """Whether a label (or field) whose value is ``value`` (None: absent) satisfies one
    requirement. ``NotIn`` and ``DoesNotExist`` hold for an absent label; ``Gt`` / ``Lt`` need
    exactly one integer bound (else nothing matches, as a requirement kube cannot build)."""
    if operator == NodeSelectorOperator.IN:
        return value is not None and value in values
    if operator == NodeSelectorOperator.NOT_IN:
        return value is None or value not in values
    if operator == NodeSelectorOperator.EXISTS:
        return value is not None
    if operator == NodeSelectorOperator.DOES_NOT_EXIST:
        return value is None
    if value is None or len(values) != 1:
        return False
    have, (bound_text,) = label_integer(value), values
    bound = label_integer(bound_text)
    if have is None or bound is None:
        return False
    return have > bound if operator == NodeSelectorOperator.GT else have < bound


def selects(match_labels: Mapping[str, str],
            expressions: Iterable[tuple[str, SelectorOperator | NodeSelectorOperator, Collection[str]]],
            labels: Mapping[str, str]) -> bool:
    """Whether every term of the selector holds for ``labels`` (no terms: it selects all).
    ``match_labels`` is a ``matchLabels`` map or a pod's ``nodeSelector``: each key with that value."""
    for key, value in match_labels.items():
        if labels.get(key) != value:
            return False
    for key, op, values in expressions:
        if not requirement_matches(op, values, labels.get(key)):
            return False
    return True
