"""Kubernetes label selectors and node selector requirements, evaluated once for all of usher.

One requirement rule serves both kinds of selector, as apimachinery's ``labels.Requirement``
serves both: a label selector (``matchLabels`` and ``matchExpressions`` with ``In``, ``NotIn``,
``Exists``, ``DoesNotExist``) selects a set of labels when every term holds, as
``LabelSelectorAsSelector`` evaluates it; a node selector requirement (node affinity's
``matchExpressions`` and ``matchFields``) adds ``Gt`` and ``Lt``, which read the label as a
base-10 64-bit integer (``strconv.ParseInt``) and fail to match when it is absent or is not one.

The callers read selectors in different shapes: the queue config's ``namespaceSelector``
(validated by its model), a pod's ``nodeSelector`` and node affinity (``backends/kube/constraints.py``
parses them). They parse, report what they cannot read with its field path, and come here to
match, so each rule lives in one place. A raw ``metav1.LabelSelector`` (a PodDisruptionBudget's,
a volume claim's, a CSIStorageCapacity's ``nodeTopology``, a pod affinity term's) is read here
too, by :func:`read_label_selector`, into the hashable :class:`LabelSelector`: every reader of that
shape holds the same rules. Pure: no I/O, no pydantic, so the engine's hot path may call it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


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


#: one ``matchExpressions`` term of a label selector, as :class:`LabelSelector` keeps it
Expression = tuple[str, SelectorOperator, frozenset[str]]


@dataclass(slots=True, frozen=True)
class LabelSelector:
    """A ``metav1.LabelSelector``: every ``matchLabels`` pair and expression must hold (empty: all)."""

    match_labels: tuple[tuple[str, str], ...] = ()
    expressions: tuple[Expression, ...] = ()

    def selects(self, labels: Mapping[str, str]) -> bool:
        return selects(dict(self.match_labels), self.expressions, labels)

    def words(self) -> str:
        """``app=vllm`` / ``app in (a, b), tier`` for a message."""
        parts = [f"{k}={v}" for k, v in self.match_labels]
        for key, op, values in self.expressions:
            shown = ", ".join(sorted(values))
            parts.append({
                SelectorOperator.IN: f"{key} in ({shown})",
                SelectorOperator.NOT_IN: f"{key} notin ({shown})",
                SelectorOperator.EXISTS: key,
                SelectorOperator.DOES_NOT_EXIST: f"!{key}",
            }[op])
        return ",".join(parts) or "any labels"


#: what selects nothing: a label no object can carry (a key may not be empty)
SELECTS_NOTHING = LabelSelector((("", "\0"),))


def kind_of(value: Any) -> str:
    """What a problem says a value of the wrong type was (``an object``, ``a list``, ...)."""
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def read_label_selector(raw: Any, path: str, problems: list[str]) -> LabelSelector | None:
    """A raw ``metav1.LabelSelector`` written at ``path``; None when not given (what that means is
    the caller's: a PodDisruptionBudget's missing selector picks no pod, a claim's no restriction).
    Each part kube's ``LabelSelectorAsSelector`` would refuse (an unknown field or operator, a
    missing key, ``In`` without values, ``Exists`` with some) is a problem naming its path, and
    then the result is None. Never raises."""
    if raw is None:
        return None
    before = len(problems)
    if not isinstance(raw, Mapping):
        problems.append(f"{path}: expected an object, got {kind_of(raw)}")
        return None
    for key in raw:
        if key not in ("matchLabels", "matchExpressions"):
            problems.append(f"{path}.{key}: unknown field")
    pairs = raw.get("matchLabels") or {}
    if not isinstance(pairs, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in pairs.items()):
        problems.append(f"{path}.matchLabels: expected a map of strings to strings")
        return None
    exprs = raw.get("matchExpressions")
    if exprs is not None and not isinstance(exprs, list):
        problems.append(f"{path}.matchExpressions: expected a list, got {kind_of(exprs)}")
        return None
    expressions: list[Expression] = []
    for i, expr in enumerate(exprs or []):
        where = f"{path}.matchExpressions[{i}]"
        if not isinstance(expr, Mapping):
            problems.append(f"{where}: expected an object, got {kind_of(expr)}")
            continue
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values")
        if not isinstance(key, str) or not key:
            problems.append(f"{where}.key: required")
            continue
        if op not in set(SelectorOperator):
            problems.append(f"{where}.operator: {op!r} is not one of {', '.join(SelectorOperator)}")
            continue
        if values is not None and not isinstance(values, list):
            problems.append(f"{where}.values: expected a list, got {kind_of(values)}")
            continue
        bad = [j for j, v in enumerate(values or []) if not isinstance(v, str) or not v]
        if bad:
            problems.append(f"{where}.values[{bad[0]}]: expected a non-empty string, got {values[bad[0]]!r}")
            continue
        operator = SelectorOperator(op)
        if operator in (SelectorOperator.IN, SelectorOperator.NOT_IN) and not values:
            problems.append(f"{where}.values: must be non-empty when operator is {operator}")
            continue
        if operator in (SelectorOperator.EXISTS, SelectorOperator.DOES_NOT_EXIST) and values:
            problems.append(f"{where}.values: must be empty when operator is {operator}")
            continue
        expressions.append((key, operator, frozenset(values or ())))
    if len(problems) > before:
        return None
    return LabelSelector(tuple(sorted(pairs.items())), tuple(expressions))


def label_selector_or_nothing(raw: Any) -> LabelSelector | None:
    """A raw label selector from an object the API server validated (a claim's, a capacity's):
    None when absent, and one usher cannot read selects nothing (the API server would have
    refused it, so only a server that does not validate lets one through)."""
    problems: list[str] = []
    selector = read_label_selector(raw, "", problems)
    return SELECTS_NOTHING if problems else selector
