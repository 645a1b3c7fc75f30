"""kube-apiserver's validation of a pod's inter-pod placement rules: pod affinity and
anti-affinity terms and ``topologySpreadConstraints``, with the real field paths and words.

- affinity terms (``validatePodAffinityTerm``): ``topologyKey`` required ("can not be empty")
  and a qualified name; each of ``namespaces`` a DNS label (reported at ``.namespace``, as
  upstream does); ``matchLabelKeys`` / ``mismatchLabelKeys`` valid label keys, forbidden without
  a ``labelSelector``, not in both lists, and not already a key of the selector (checked on the
  selector as creation merges the keys into it: the path is the term's, indexed, as upstream's);
  preferred terms have a ``weight`` in 1-100;
- spread constraints (``validateTopologySpreadConstraints``): ``maxSkew`` > 0, ``topologyKey``
  required and qualified, ``whenUnsatisfiable`` one of DoNotSchedule / ScheduleAnyway, no two
  with the same {topologyKey, whenUnsatisfiable}, ``minDomains`` > 0 and only with
  DoNotSchedule, ``nodeAffinityPolicy`` / ``nodeTaintsPolicy`` Honor or Ignore,
  ``matchLabelKeys`` forbidden without a selector and not keys of it.

Also :func:`validate` runs :mod:`.workload_api`'s checks of a Workload and of a pod's
``workloadRef``, and :mod:`.workload_api_beta`'s of 1.37's Workload and PodGroup and of a pod's
``schedulingGroup``. The label selectors themselves are not checked here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from . import workload_api, workload_api_beta
from .kinds import Resource, ResourceType
from .object_validation import TEMPLATE_PATHS, ErrorType, FieldError, go_quote, qualified_name_errors, validate_label_selector
from .pod_affinity import PREFERRED, REQUIRED, Kind, merged_selector
from .workload_api import dns_label_errors

_WHEN = ("DoNotSchedule", "ScheduleAnyway")
_POLICIES = ("Honor", "Ignore")
_POSITIVE = "must be greater than zero"


def _invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(ErrorType.INVALID, path, detail, go_quote(value) if isinstance(value, str) else str(value))


def _not_supported(path: str, value: Any, supported: tuple[str, ...]) -> FieldError:
    return FieldError(ErrorType.NOT_SUPPORTED, path, "supported values: " + ", ".join(go_quote(s) for s in supported),
                      go_quote(str(value)))


def _label_keys(keys: Any, path: str) -> Iterator[FieldError]:
    for i, key in enumerate(keys or []):
        for detail in qualified_name_errors(str(key)):
            yield _invalid(f"{path}[{i}]", str(key), detail)


def _topology_key(key: Any, path: str) -> Iterator[FieldError]:
    key = str(key or "")
    if not key:
        yield FieldError(ErrorType.REQUIRED, path, "can not be empty")
    for detail in qualified_name_errors(key):
        yield _invalid(path, key, detail)


def _affinity_term(term: Mapping[str, Any], labels: Mapping[str, str], path: str) -> Iterator[FieldError]:
    for name in term.get("namespaces") or []:
        for detail in dns_label_errors(str(name)):
            yield _invalid(f"{path}.namespace", str(name), detail)
    match, mismatch = list(term.get("matchLabelKeys") or []), list(term.get("mismatchLabelKeys") or [])
    selector = term.get("labelSelector")
    yield from validate_label_selector(selector, f"{path}.labelSelector")
    yield from validate_label_selector(term.get("namespaceSelector"), f"{path}.namespaceSelector")
    for field, keys in (("matchLabelKeys", match), ("mismatchLabelKeys", mismatch)):
        if keys and not isinstance(selector, dict):
            yield FieldError(ErrorType.FORBIDDEN, f"{path}.{field}", "must not be specified when labelSelector is not set")
        elif keys:
            yield from _label_keys(keys, f"{path}.{field}")
    if isinstance(selector, dict):
        merged = merged_selector(term, labels) or {}
        positions = {key: i for i, key in enumerate(match)}
        seen = set((merged.get("matchLabels") or {}).keys())
        for expr in merged.get("matchExpressions") or []:
            key = expr.get("key") if isinstance(expr, dict) else None
            if key in positions and key in seen:
                yield _invalid(f"{path}[{positions[key]}]", key, "exists in both matchLabelKeys and labelSelector")
            seen.add(key)
    for i, key in enumerate(match):
        if key in mismatch:
            yield _invalid(f"{path}.matchLabelKeys[{i}]", key, "exists in both matchLabelKeys and mismatchLabelKeys")
    yield from _topology_key(term.get("topologyKey"), f"{path}.topologyKey")


def _affinity(spec: Mapping[str, Any], labels: Mapping[str, str], path: str) -> Iterator[FieldError]:
    affinity = spec.get("affinity")
    if not isinstance(affinity, dict):
        return
    for kind in Kind:
        rules = affinity.get(kind)
        if not isinstance(rules, dict):
            continue
        where = f"{path}.affinity.{kind}"
        for i, term in enumerate(rules.get(REQUIRED) or []):
            if isinstance(term, dict):
                yield from _affinity_term(term, labels, f"{where}.{REQUIRED}[{i}]")
        for i, weighted in enumerate(rules.get(PREFERRED) or []):
            if not isinstance(weighted, dict):
                continue
            weight = weighted.get("weight")
            if not isinstance(weight, int) or not 1 <= weight <= 100:
                yield _invalid(f"{where}.{PREFERRED}[{i}].weight", weight if weight is not None else 0, "must be in the range 1-100")
            yield from _affinity_term(weighted.get("podAffinityTerm") or {}, labels, f"{where}.{PREFERRED}[{i}].podAffinityTerm")


def _spread(spec: Mapping[str, Any], path: str) -> Iterator[FieldError]:
    constraints = spec.get("topologySpreadConstraints")
    if not isinstance(constraints, list):
        return
    for i, c in enumerate(constraints):
        if not isinstance(c, dict):
            continue
        where = f"{path}.topologySpreadConstraints[{i}]"
        skew = c.get("maxSkew")
        if not isinstance(skew, int) or skew <= 0:
            yield _invalid(f"{where}.maxSkew", skew if skew is not None else 0, _POSITIVE)
        yield from _topology_key(c.get("topologyKey"), f"{where}.topologyKey")
        yield from validate_label_selector(c.get("labelSelector"), f"{where}.labelSelector")
        when = c.get("whenUnsatisfiable")
        if when not in _WHEN:
            yield _not_supported(f"{where}.whenUnsatisfiable", when or "", _WHEN)
        for other in constraints[i + 1:]:
            if isinstance(other, dict) and (other.get("topologyKey"), other.get("whenUnsatisfiable")) == (c.get("topologyKey"), when):
                pair = f"{{{c.get('topologyKey') or ''}, {when or ''}}}"
                yield FieldError(ErrorType.DUPLICATE, f"{where}.{{topologyKey, whenUnsatisfiable}}", "", go_quote(pair))
        domains = c.get("minDomains")
        if domains is not None:
            if not isinstance(domains, int) or domains <= 0:
                yield _invalid(f"{where}.minDomains", domains, _POSITIVE)
            if when != "DoNotSchedule":
                yield _invalid(f"{where}.minDomains", domains, f"can only use minDomains if whenUnsatisfiable=DoNotSchedule, not {when or ''}")
        for field in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
            if c.get(field) is not None and c.get(field) not in _POLICIES:
                yield _not_supported(f"{where}.{field}", c.get(field), _POLICIES)
        keys = c.get("matchLabelKeys") or []
        if keys:
            selector = c.get("labelSelector")
            if not isinstance(selector, dict):
                yield FieldError(ErrorType.FORBIDDEN, f"{where}.matchLabelKeys", "must not be specified when labelSelector is not set")
                selector = {}
            have = set((selector.get("matchLabels") or {}).keys()) | {
                e.get("key") for e in selector.get("matchExpressions") or [] if isinstance(e, dict)}
            for j, key in enumerate(keys):
                for detail in qualified_name_errors(str(key)):
                    yield _invalid(f"{where}.matchLabelKeys[{j}]", str(key), detail)
                if key in have:
                    yield _invalid(f"{where}.matchLabelKeys[{j}]", key, "exists in both matchLabelKeys and labelSelector")


def validate_placement(spec: Any, labels: Mapping[str, str] | None, path: str) -> Iterator[FieldError]:
    """The placement rules of a pod spec (``labels``: the pod's, for the matchLabelKeys merge)."""
    if not isinstance(spec, dict):
        return
    yield from _affinity(spec, labels or {}, path)
    yield from _spread(spec, path)


def validate(rt: ResourceType, obj: Mapping[str, Any]) -> list[FieldError]:
    """What kube-apiserver finds wrong in the placement rules and ``workloadRef`` of a pod or a
    workload's pod template, and in a Workload."""
    if rt.custom:
        return []
    if (beta := workload_api_beta.validate(rt, obj)) is not None:
        return beta
    if rt.group == workload_api.GROUP and rt.kind == workload_api.KIND:
        return list(workload_api.validate_workload(obj))
    if rt.resource == Resource.PODS:
        spec, labels, where = obj.get("spec"), (obj.get("metadata") or {}).get("labels"), "spec"
    elif rt.resource in TEMPLATE_PATHS:
        template: Any = obj
        for key in TEMPLATE_PATHS[rt.resource]:
            template = template.get(key) if isinstance(template, dict) else None
        if not isinstance(template, dict):
            return []
        spec, labels = template.get("spec"), (template.get("metadata") or {}).get("labels")
        where = ".".join([*TEMPLATE_PATHS[rt.resource], "spec"])
    else:
        return []
    if not isinstance(spec, dict):
        return []
    return [*validate_placement(spec, labels if isinstance(labels, dict) else {}, where),
            *workload_api.validate_workload_ref(spec, where), *workload_api_beta.validate_scheduling_group(spec, where)]
