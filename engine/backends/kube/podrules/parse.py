"""Reading a pod's inter-pod rules from its spec, with every problem named by its field path.

``parse_pod_rules(spec, labels)`` reads ``spec.affinity.podAffinity``, ``podAntiAffinity`` and
``spec.topologySpreadConstraints`` the way the API server validates them (``topologyKey``
required, ``weight`` 1..100, ``maxSkew`` at least 1, ``minDomains`` only with ``DoNotSchedule``,
a key in both ``matchLabelKeys`` and ``mismatchLabelKeys``, label keys of a selector given values
with ``Exists``...). It never raises: what it cannot read becomes a problem and the rule is left
out, and the caller keeps the pod waiting with the problems, so nothing a user wrote is dropped.
``matchLabelKeys`` / ``mismatchLabelKeys`` are folded into the selector with the pod's own label
values (a key the pod lacks adds nothing), which is idempotent with the API server's own merge.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ....selectors import Expression, LabelSelector, SelectorOperator, kind_of, read_label_selector
from ....podrules.model import (
    NO_RULES,
    AffinityTerm,
    InclusionPolicy,
    PodRules,
    SpreadConstraint,
    Unsatisfiable,
    WeightedTerm,
)

AFFINITY = "spec.affinity"
SPREAD = "spec.topologySpreadConstraints"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
_POD_AFFINITY_KEYS = {REQUIRED, PREFERRED}
_TERM_KEYS = {"labelSelector", "namespaces", "namespaceSelector", "topologyKey", "matchLabelKeys", "mismatchLabelKeys"}
_SPREAD_KEYS = {"maxSkew", "topologyKey", "whenUnsatisfiable", "labelSelector", "minDomains",
                "nodeAffinityPolicy", "nodeTaintsPolicy", "matchLabelKeys"}


def parse_pod_rules(spec: Mapping[str, Any], labels: Mapping[str, str]) -> tuple[PodRules, list[str]]:
    """The pod's rules (``NO_RULES`` when it has none) and the problems found, never raising."""
    problems: list[str] = []
    affinity = spec.get("affinity") if isinstance(spec, Mapping) else None
    found: dict[str, Any] = {}
    if isinstance(affinity, Mapping):
        for key, name in (("podAffinity", "affinity"), ("podAntiAffinity", "anti_affinity")):
            raw = affinity.get(key)
            if raw is None:
                continue
            required, preferred = _pod_affinity(raw, f"{AFFINITY}.{key}", labels, problems)
            found[name], found[f"preferred_{name}"] = required, preferred
    raw_spread = spec.get("topologySpreadConstraints") if isinstance(spec, Mapping) else None
    if raw_spread is not None:
        found["spread"] = _spread(raw_spread, labels, problems)
    rules = PodRules(**found)
    return (rules if rules else NO_RULES), problems


def _pod_affinity(raw: Any, path: str, labels: Mapping[str, str],
                  problems: list[str]) -> tuple[tuple[AffinityTerm, ...], tuple[WeightedTerm, ...]]:
    if not isinstance(raw, Mapping):
        problems.append(f"{path}: expected an object, got {kind_of(raw)}")
        return (), ()
    for key in raw:
        if key not in _POD_AFFINITY_KEYS:
            problems.append(f"{path}.{key}: unknown field")
    required: list[AffinityTerm] = []
    for i, item in enumerate(_list(raw.get(REQUIRED), f"{path}.{REQUIRED}", problems)):
        term = _term(item, f"{path}.{REQUIRED}[{i}]", labels, problems)
        if term is not None:
            required.append(term)
    preferred: list[WeightedTerm] = []
    for i, item in enumerate(_list(raw.get(PREFERRED), f"{path}.{PREFERRED}", problems)):
        where = f"{path}.{PREFERRED}[{i}]"
        if not isinstance(item, Mapping):
            problems.append(f"{where}: expected an object, got {kind_of(item)}")
            continue
        for key in item:
            if key not in ("weight", "podAffinityTerm"):
                problems.append(f"{where}.{key}: unknown field")
        weight = item.get("weight")
        if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= 100:
            problems.append(f"{where}.weight: must be an integer from 1 to 100, got {weight!r}")
            continue
        if item.get("podAffinityTerm") is None:
            problems.append(f"{where}.podAffinityTerm: required")
            continue
        term = _term(item["podAffinityTerm"], f"{where}.podAffinityTerm", labels, problems)
        if term is not None:
            preferred.append(WeightedTerm(weight, term))
    return tuple(required), tuple(preferred)


def _list(raw: Any, path: str, problems: list[str]) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        problems.append(f"{path}: expected a list, got {kind_of(raw)}")
        return []
    return raw


def _strings(raw: Any, path: str, problems: list[str]) -> list[str] | None:
    items = _list(raw, path, problems)
    if raw is not None and not isinstance(raw, list):
        return None
    bad = [i for i, s in enumerate(items) if not isinstance(s, str) or not s]
    if bad:
        problems.append(f"{path}[{bad[0]}]: expected a non-empty string, got {items[bad[0]]!r}")
        return None
    return items


def _term(raw: Any, path: str, labels: Mapping[str, str], problems: list[str]) -> AffinityTerm | None:
    if not isinstance(raw, Mapping):
        problems.append(f"{path}: expected an object, got {kind_of(raw)}")
        return None
    before = len(problems)
    for key in raw:
        if key not in _TERM_KEYS:
            problems.append(f"{path}.{key}: unknown field")
    topology_key = raw.get("topologyKey")
    if not isinstance(topology_key, str) or not topology_key:
        problems.append(f"{path}.topologyKey: required, a node label key (such as kubernetes.io/hostname)")
    selector = read_label_selector(raw.get("labelSelector"), f"{path}.labelSelector", problems)
    namespaces = _strings(raw.get("namespaces"), f"{path}.namespaces", problems)
    ns_selector = read_label_selector(raw.get("namespaceSelector"), f"{path}.namespaceSelector", problems)
    match = _strings(raw.get("matchLabelKeys"), f"{path}.matchLabelKeys", problems)
    mismatch = _strings(raw.get("mismatchLabelKeys"), f"{path}.mismatchLabelKeys", problems)
    both = sorted(set(match or ()) & set(mismatch or ()))
    if both:
        problems.append(f"{path}.matchLabelKeys: {both[0]!r} is also in mismatchLabelKeys")
    if (match or mismatch) and raw.get("labelSelector") is None:
        problems.append(f"{path}.matchLabelKeys: may not be given without labelSelector")
    if len(problems) > before:
        return None
    extra: list[Expression] = [(k, SelectorOperator.IN, frozenset({labels[k]})) for k in match or () if k in labels]
    extra += [(k, SelectorOperator.NOT_IN, frozenset({labels[k]})) for k in mismatch or () if k in labels]
    if selector is not None and extra:
        selector = LabelSelector(selector.match_labels, selector.expressions + tuple(extra))
    assert isinstance(topology_key, str)
    return AffinityTerm(selector, topology_key, frozenset(namespaces or ()), ns_selector)


def _enum(raw: Any, kind: type[InclusionPolicy] | type[Unsatisfiable], path: str, default: Any,
          problems: list[str]) -> Any:
    if raw is None:
        return default
    if raw not in set(kind):
        problems.append(f"{path}: {raw!r} is not one of {', '.join(kind)}")
        return None
    return kind(raw)


def _spread(raw: Any, labels: Mapping[str, str], problems: list[str]) -> tuple[SpreadConstraint, ...]:
    out: list[SpreadConstraint] = []
    seen: set[tuple[str, str]] = set()
    for i, item in enumerate(_list(raw, SPREAD, problems)):
        path = f"{SPREAD}[{i}]"
        if not isinstance(item, Mapping):
            problems.append(f"{path}: expected an object, got {kind_of(item)}")
            continue
        before = len(problems)
        for key in item:
            if key not in _SPREAD_KEYS:
                problems.append(f"{path}.{key}: unknown field")
        skew = item.get("maxSkew")
        if not isinstance(skew, int) or isinstance(skew, bool) or skew < 1:
            problems.append(f"{path}.maxSkew: must be an integer of at least 1, got {skew!r}")
        key = item.get("topologyKey")
        if not isinstance(key, str) or not key:
            problems.append(f"{path}.topologyKey: required, a node label key (such as topology.kubernetes.io/zone)")
        when = item.get("whenUnsatisfiable")
        if when is None:
            problems.append(f"{path}.whenUnsatisfiable: required, DoNotSchedule or ScheduleAnyway")
        else:
            when = _enum(when, Unsatisfiable, f"{path}.whenUnsatisfiable", None, problems)
        min_domains = item.get("minDomains")
        if min_domains is not None:
            if not isinstance(min_domains, int) or isinstance(min_domains, bool) or min_domains < 1:
                problems.append(f"{path}.minDomains: must be an integer of at least 1, got {min_domains!r}")
            elif when == Unsatisfiable.SCHEDULE_ANYWAY:
                problems.append(f"{path}.minDomains: may only be given with whenUnsatisfiable DoNotSchedule")
        affinity_policy = _enum(item.get("nodeAffinityPolicy"), InclusionPolicy, f"{path}.nodeAffinityPolicy",
                                InclusionPolicy.HONOR, problems)
        taints_policy = _enum(item.get("nodeTaintsPolicy"), InclusionPolicy, f"{path}.nodeTaintsPolicy",
                              InclusionPolicy.IGNORE, problems)
        selector = read_label_selector(item.get("labelSelector"), f"{path}.labelSelector", problems)
        match = _strings(item.get("matchLabelKeys"), f"{path}.matchLabelKeys", problems)
        if match and selector is None:
            problems.append(f"{path}.matchLabelKeys: may not be given without labelSelector")
        if isinstance(key, str) and when is not None and (key, str(when)) in seen:
            problems.append(f"{path}: a constraint with topologyKey {key!r} and whenUnsatisfiable {when} is given twice")
        if len(problems) > before:
            continue
        seen.add((key, str(when)))
        if selector is not None and match:
            extra = tuple((k, SelectorOperator.IN, frozenset({labels[k]})) for k in match if k in labels)
            selector = LabelSelector(selector.match_labels, selector.expressions + extra)
        out.append(SpreadConstraint(skew, key, when, selector, min_domains, affinity_policy, taints_policy))
    return tuple(out)

