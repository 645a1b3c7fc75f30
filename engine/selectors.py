"""Kubernetes label selectors, evaluated once for all of usher.

A selector (``matchLabels`` and ``matchExpressions`` with ``In``, ``NotIn``, ``Exists``,
``DoesNotExist``) selects a set of labels when every term holds, as apimachinery's
``LabelSelectorAsSelector`` evaluates it. Two callers read selectors in different shapes: the
queue config's ``namespaceSelector`` (validated by its model) and a PodDisruptionBudget's
selector (a raw API object); both come here, so the rule lives in one place. Pure: no I/O, no
pydantic, so the engine's hot path may call it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum


class SelectorOperator(StrEnum):
    """The operators of a ``matchExpressions`` term."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


def selects(match_labels: Mapping[str, str], expressions: Iterable[tuple[str, SelectorOperator, Iterable[str]]],
            labels: Mapping[str, str]) -> bool:
    """Whether every term of the selector holds for ``labels`` (no terms: it selects all)."""
    for key, value in match_labels.items():
        if labels.get(key) != value:
            return False
    for key, op, values in expressions:
        present = key in labels
        if op == SelectorOperator.IN:
            ok = present and labels[key] in values
        elif op == SelectorOperator.NOT_IN:
            ok = not present or labels[key] not in values
        elif op == SelectorOperator.EXISTS:
            ok = present
        else:
            ok = not present
        if not ok:
            return False
    return True
