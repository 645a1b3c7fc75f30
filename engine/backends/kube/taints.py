"""Taints and tolerations: the one place usher reads them and decides which taint a pod tolerates.

A toleration matches a taint (kube's ``Toleration.ToleratesTaint``) when its effect is empty or
equal, its key is empty or equal, and with ``Exists`` any value, with ``Equal`` (the default) an
equal value (an empty value matches a taint without one).

Which toleration counts, when several match one taint, follows the taint eviction controller
(``GetMatchingTolerations``): the first in the pod's order. Its ``tolerationSeconds`` (none: for
ever; zero or less: not at all) is how long the pod may stay on a node with that ``NoExecute``
taint. Tolerations are therefore kept in the order written (duplicates dropped), never sorted.

A DRA request's device tolerations are read here too (``parse_device_tolerations``, with a
device taint's effects) and match a device's taints by the same rule (``dra.model`` reads the
taints into ``Taint``).

``node_taints`` reads a node's taints as the engine's plain ``(key, value, effect)`` tuples,
leaving out those the control plane mirrors from a node's state (``unschedulable``,
``not-ready``, ``unreachable``): usher reads that state itself. ``constraints.py`` builds a pod's
filters on top of this module; the sandbox's ``nodefit`` is the independent oracle for the same
rules, and ``tests/kube/test_rule_agreement.py`` holds the two to the same answers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple, TypeVar

E = TypeVar("E", bound=StrEnum)

#: where a pod's tolerations are, as problems name them
TOLERATIONS = "spec.tolerations"
#: taints the control plane mirrors from a node's state, which usher reads directly
STATE_TAINTS = frozenset({
    "node.kubernetes.io/unschedulable",
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
})


class TolerationOperator(StrEnum):
    EXISTS = "Exists"
    EQUAL = "Equal"


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


#: the effects that keep a pod off a node (``PreferNoSchedule`` is a score only)
FILTERING = (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE)


class Taint(NamedTuple):
    """One node taint; a plain ``(key, value, effect)`` tuple, as the engine's ``Node.taints`` holds."""

    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(slots=True, frozen=True)
class Toleration:
    key: str = ""
    operator: TolerationOperator = TolerationOperator.EQUAL
    value: str = ""
    #: None: every effect
    effect: TaintEffect | None = None
    #: how long a ``NoExecute`` taint is tolerated; None: for ever
    seconds: int | None = None

    def matches(self, taint: tuple[str, str, str]) -> bool:
        """Whether this toleration covers ``taint`` (kube's ``ToleratesTaint``)."""
        key, value, effect = taint
        if self.effect is not None and self.effect != effect:
            return False
        if self.key and self.key != key:
            return False
        return self.operator == TolerationOperator.EXISTS or self.value == value


def deciding(tolerations: Iterable[Toleration], taint: tuple[str, str, str]) -> Toleration | None:
    """The toleration that counts for ``taint``: the first that matches it; None: untolerated."""
    return next((t for t in tolerations if t.matches(taint)), None)


def tolerated_for(tolerations: Iterable[Toleration], taint: tuple[str, str, str]) -> int | None:
    """How many seconds the pod may stay with a ``NoExecute`` ``taint`` it tolerates only for a
    time; None when it does not tolerate it, tolerates it for ever, or the taint is not NoExecute."""
    toleration = deciding(tolerations, taint)
    if toleration is None or taint[2] != TaintEffect.NO_EXECUTE:
        return None
    return toleration.seconds


def untolerated(tolerations: Iterable[Toleration], taints: Iterable[tuple[str, str, str]]) -> Taint | None:
    """The first ``NoSchedule`` / ``NoExecute`` taint the pod does not tolerate for ever.

    A ``NoExecute`` taint tolerated only for a time counts as not tolerated: the pod would be
    evicted mid-run, and a batch gang should not start there (kube-scheduler would place it)."""
    tolerations = tuple(tolerations)
    for taint in taints:
        if taint[2] not in FILTERING:
            continue
        toleration = deciding(tolerations, taint)
        if toleration is None or (taint[2] == TaintEffect.NO_EXECUTE and toleration.seconds is not None):
            return Taint(*taint)
    return None


def avoided(tolerations: Iterable[Toleration], taints: Iterable[tuple[str, str, str]]) -> int:
    """How many ``PreferNoSchedule`` taints of a node the pod does not tolerate."""
    tolerations = tuple(tolerations)
    return sum(1 for t in taints if t[2] == TaintEffect.PREFER_NO_SCHEDULE and deciding(tolerations, t) is None)


# -- reading ---------------------------------------------------------------------------------


def enum_member(enum: type[E], value: Any) -> E | None:
    """The member of ``enum`` spelt ``value``; None for anything else (never raises)."""
    return enum(value) if isinstance(value, str) and value in enum.__members__.values() else None


def type_name(value: Any) -> str:
    """What a problem says a wrong value was: ``nothing`` or its type's name."""
    return "nothing" if value is None else type(value).__name__


def enum_choices(enum: type[StrEnum]) -> str:
    return ", ".join(str(m) for m in enum)


#: tolerations read before, by their fields as written (every pod of a cluster carries some, the two
#: the API server adds at least, and the pods of one template the same: reading them at each pod
#: event was a tenth of the controller's time a bind)
_READ: dict[tuple[Any, ...], tuple[tuple[Toleration, ...], tuple[str, ...]]] = {}
_READ_LIMIT = 4096


def parse_tolerations(raw: Any, problems: list[str]) -> tuple[Toleration, ...]:
    """A pod's ``spec.tolerations`` in the order written (later duplicates dropped); each one
    usher cannot read is left out with a problem naming its path. Never raises."""
    if raw is None:
        return ()
    if isinstance(raw, list) and all(isinstance(t, dict) for t in raw):
        try:
            # each value with its type: 1, 1.0 and True are equal keys, but not equally valid
            key = tuple(tuple((type(t.get(f)), t.get(f)) for f in ("key", "operator", "value", "effect", "tolerationSeconds")) + (len(t),)
                        for t in raw)
            known = _READ.get(key)
        except TypeError:  # a field that is not hashable: read it the long way (it is a problem)
            key, known = None, None
        if known is not None:
            problems.extend(known[1])
            return known[0]
        if key is not None:
            found: list[str] = []
            read = _read(raw, found)
            if len(_READ) >= _READ_LIMIT:
                _READ.clear()
            _READ[key] = (read, tuple(found))
            problems.extend(found)
            return read
    return _read(raw, problems)


def parse_device_tolerations(raw: Any, where: str, problems: list[str]) -> tuple[Toleration, ...]:
    """A DRA request's ``tolerations`` (written at ``where``), by the same rules as a pod's, with a
    device taint's effects: ``NoSchedule``, ``NoExecute``, or ``None``, which matches only taints
    that keep nobody off and so is left out. Never raises."""
    return _read(raw, problems, where=where, device=True)


#: the effects a device toleration may name; ``None`` matches only taints that keep nobody off
DEVICE_EFFECT_NONE = "None"
_DEVICE_EFFECTS = (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE)


def _read(raw: Any, problems: list[str], *, where: str = TOLERATIONS, device: bool = False) -> tuple[Toleration, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        problems.append(f"{where}: expected a list, got {type_name(raw)}")
        return ()
    effects = _DEVICE_EFFECTS if device else tuple(TaintEffect)
    out: dict[Toleration, None] = {}
    for i, item in enumerate(raw):
        path = f"{where}[{i}]"
        if not isinstance(item, Mapping):
            problems.append(f"{path}: expected an object, got {type_name(item)}")
            continue
        key = item.get("key") or ""
        value = item.get("value") or ""
        if not isinstance(key, str) or not isinstance(value, str):
            problems.append(f"{path}: key and value must be strings")
            continue
        op_text = item.get("operator") or TolerationOperator.EQUAL
        operator = enum_member(TolerationOperator, op_text)
        if operator is None:
            problems.append(f"{path}.operator: {op_text!r} is not one of {enum_choices(TolerationOperator)}")
            continue
        if operator == TolerationOperator.EXISTS and value:
            problems.append(f"{path}.value: must be empty when the operator is Exists (got {value!r})")
            continue
        if operator == TolerationOperator.EQUAL and not key:
            problems.append(f"{path}.key: an empty key (every taint) needs the operator Exists")
            continue
        effect_text = item.get("effect") or None
        effect = enum_member(TaintEffect, effect_text)
        keeps_nobody_off = device and effect_text == DEVICE_EFFECT_NONE
        if effect_text is not None and (effect not in effects) and not keeps_nobody_off:
            choices = ", ".join([*effects, DEVICE_EFFECT_NONE] if device else effects)
            problems.append(f"{path}.effect: {effect_text!r} is not one of {choices} (or empty for all)")
            continue
        seconds = item.get("tolerationSeconds")
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int)):
            problems.append(f"{path}.tolerationSeconds: {seconds!r} is not a whole number of seconds")
            continue
        if keeps_nobody_off:
            continue
        # kube ignores tolerationSeconds unless the toleration can match a NoExecute taint
        if effect not in (None, TaintEffect.NO_EXECUTE):
            seconds = None
        out.setdefault(Toleration(key, operator, value, effect, max(seconds, 0) if seconds is not None else None))
    return tuple(out)


def node_taints(spec: Mapping[str, Any]) -> tuple[Taint, ...]:
    """A node's ``spec.taints`` that usher filters on (see the module docstring); never raises.

    Malformed entries and unknown effects (the API server rejects both) are left out.
    """
    raw = spec.get("taints") if isinstance(spec, Mapping) else None
    if not isinstance(raw, list):
        return ()
    out = []
    for item in raw:
        if not isinstance(item, Mapping):
            continue
        key, value, effect = item.get("key"), item.get("value") or "", item.get("effect")
        if not isinstance(key, str) or not key or not isinstance(value, str) or key in STATE_TAINTS:
            continue
        known = enum_member(TaintEffect, effect)
        if known is not None:
            out.append(Taint(key, value, str(known)))
    return tuple(out)
