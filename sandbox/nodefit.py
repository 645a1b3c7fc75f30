"""What a pod asks of a node, and whether a node can take it: shared by the sandbox's controllers.

- :func:`pod_requests`: the effective requests as the scheduler and the kubelet compute them
  (the containers and sidecars summed, the largest init container with the sidecars before it
  if larger, plus ``spec.overhead``), in
  integral units (cpu in millicores, memory in bytes, extended resources as counts, ``pods`` 1);
- :func:`node_allocatable`, :func:`usage` (the non-terminal pods bound to each node);
- :func:`insufficient`: the resources that do not fit, as ``(name, requested, used, capacity)``;
  :func:`known_to_node`: what the kubelet's admission checks of them (the scheduler checks all);
- taints and tolerations (:func:`toleration_matches`, :func:`tolerates`, :func:`untolerated`,
  and :func:`eviction_delay`, the taint eviction controller's ``tolerationSeconds``), node
  selectors and required node affinity (:func:`matches_node_selector`, :func:`terms_match`,
  each requirement built and matched by :mod:`usher.sandbox.labels`, the rule list and watch
  selectors use too), a volume's node affinity (:func:`volume_fits_node`) and a storage
  class's ``allowedTopologies`` (:func:`topology_terms_match`), conditions
  (:func:`set_condition`).

These are the sandbox's own readings of Kubernetes' rules, never usher's: the sandbox is the
oracle usher is checked against (``tests/kube/test_rule_agreement.py`` holds both to kube's answers).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any

from . import quantity as _quantity
from .labels import SELECTOR_OPERATORS, InvalidSelector, Operator, Requirement, new_requirement

JsonObject = dict[str, Any]

CPU, MEMORY, PODS = "cpu", "memory", "pods"
TERMINAL = ("Succeeded", "Failed")


def quantity(name: str, value: Any) -> int:
    """One quantity in the units the fit checks compare: millicores for cpu, else whole units."""
    if value is None:
        return 0
    try:
        parsed = _quantity.parse(value)
    except _quantity.QuantityError:
        return 0
    # the scheduler's and the kubelet's units: MilliValue() for cpu, Value() (rounded up) otherwise
    return parsed.milli_value() if name == CPU else math.ceil(parsed.value)


def _requests_of(container: Mapping[str, Any]) -> dict[str, int]:
    resources = container.get("resources") or {}
    requests = dict(resources.get("limits") or {})  # limits default the requests
    requests.update(resources.get("requests") or {})
    return {k: quantity(k, v) for k, v in requests.items()}


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """The pod's effective requests, with ``pods: 1``: the app containers and the sidecars (init
    containers with ``restartPolicy: Always``, which run beside them), or, if larger, an ordinary
    init container with the sidecars started before it; plus the overhead."""
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for c in spec.get("initContainers") or []:
        requests = _requests_of(c)
        if c.get("restartPolicy") == "Always":
            for k, v in requests.items():
                sidecars[k] = sidecars.get(k, 0) + v
        else:
            for k in requests.keys() | sidecars.keys():
                init_peak[k] = max(init_peak.get(k, 0), requests.get(k, 0) + sidecars.get(k, 0))
    for c in spec.get("containers") or []:
        for k, v in _requests_of(c).items():
            total[k] = total.get(k, 0) + v
    for k, v in sidecars.items():
        total[k] = total.get(k, 0) + v
    for k, v in init_peak.items():
        total[k] = max(total.get(k, 0), v)
    for k, v in (spec.get("overhead") or {}).items():
        total[k] = total.get(k, 0) + quantity(k, v)
    total[PODS] = 1
    return {k: v for k, v in total.items() if v}


HostPort = tuple[str, str, int]
"""(protocol, host IP, port); host IP ``0.0.0.0`` for all of them."""
ANY_IP = "0.0.0.0"


def host_ports(pod: Mapping[str, Any]) -> set[HostPort]:
    """The host ports a pod takes: each ``hostPort`` of its containers and sidecars."""
    spec = pod.get("spec") or {}
    containers = [*(spec.get("containers") or []),
                  *(c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always")]
    return {
        (port.get("protocol") or "TCP", port.get("hostIP") or ANY_IP, int(port["hostPort"]))
        for c in containers for port in c.get("ports") or [] if port.get("hostPort")
    }


def port_conflict(wanted: set[HostPort], taken: Iterable[HostPort]) -> HostPort | None:
    """The first of ``wanted`` that a port in ``taken`` rules out (same protocol and port, and
    the same host IP or either on all of them), as the NodePorts check finds it; None if none."""
    for protocol, ip, port in sorted(wanted):
        for other_protocol, other_ip, other_port in taken:
            if (protocol, port) == (other_protocol, other_port) and (ip == other_ip or ANY_IP in (ip, other_ip)):
                return protocol, ip, port
    return None


def is_extended(name: str) -> bool:
    """An extended resource (``nvidia.com/gpu``, ``rdma/ib``): a name with a domain outside
    ``kubernetes.io``; ``cpu``, ``memory``, ``hugepages-2Mi``, ``ephemeral-storage`` are native."""
    domain, slash, _ = name.partition("/")
    return bool(slash) and domain != "kubernetes.io" and not domain.endswith(".kubernetes.io") and not name.startswith("requests.")


def known_to_node(requests: Mapping[str, int], allocatable: Mapping[str, int]) -> dict[str, int]:
    """``requests`` as the kubelet's admission checks them: without the extended resources the
    node does not list at all (cluster-level resources, or a device plugin never registered
    there), which the kubelet leaves out rather than refusing the pod. The scheduler, unlike the
    kubelet, counts them (a node that does not list one has none of it)."""
    return {k: v for k, v in requests.items() if not is_extended(k) or k in allocatable}


def node_allocatable(node: Mapping[str, Any]) -> dict[str, int]:
    status = node.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    return {k: quantity(k, v) for k, v in alloc.items()}


def is_terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL


def add_usage(used: dict[str, int], requests: Mapping[str, int]) -> None:
    for k, v in requests.items():
        used[k] = used.get(k, 0) + v


def usage(pods: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Node name -> the summed requests of the non-terminal pods bound to it."""
    out: dict[str, dict[str, int]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node and not is_terminal(pod):
            add_usage(out.setdefault(node, {}), pod_requests(pod))
    return out


def insufficient(
    requests: Mapping[str, int], used: Mapping[str, int], allocatable: Mapping[str, int]
) -> list[tuple[str, int, int, int]]:
    """``(resource, requested, used, capacity)`` for each requested resource that does not fit.

    A resource the node does not list has capacity 0 (so a GPU pod does not fit a CPU node);
    cpu and memory are checked only when requested, as the fit plugin does.
    """
    out = []
    for name in sorted(requests, key=lambda n: (n != PODS, n != CPU, n != MEMORY, n)):
        want = requests[name]
        if want <= 0:
            continue
        cap, have = allocatable.get(name, 0), used.get(name, 0)
        if have + want > cap:
            out.append((name, want, have, cap))
    return out


# ------------------------------------------------------------------ taints and tolerations


class TolerationOperator(StrEnum):
    EQUAL = "Equal"
    EXISTS = "Exists"


def toleration_matches(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """``Toleration.ToleratesTaint``: an empty effect or key matches every one; ``Exists`` any
    value, ``Equal`` (or no operator) the same value; any other operator nothing."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    match toleration.get("operator") or TolerationOperator.EQUAL:
        case TolerationOperator.EXISTS:
            return True
        case TolerationOperator.EQUAL:
            return (toleration.get("value") or "") == (taint.get("value") or "")
        case _:
            return False


def deciding_toleration(tolerations: Iterable[Mapping[str, Any]] | None, taint: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The toleration that counts for ``taint``: the first that matches it, as the taint eviction
    controller picks it (``GetMatchingTolerations``); None when none does."""
    return next((t for t in tolerations or () if toleration_matches(t, taint)), None)


def tolerates(tolerations: Iterable[Mapping[str, Any]] | None, taint: Mapping[str, Any]) -> bool:
    return deciding_toleration(tolerations, taint) is not None


def eviction_delay(tolerations: Iterable[Mapping[str, Any]] | None, taint: Mapping[str, Any]) -> int | None:
    """Seconds until the taint eviction controller evicts a pod for a ``NoExecute`` ``taint``:
    0 when no toleration matches (or the deciding one's ``tolerationSeconds`` is 0 or less);
    None when the deciding one has no ``tolerationSeconds`` (tolerated for ever)."""
    toleration = deciding_toleration(tolerations, taint)
    if toleration is None:
        return 0
    seconds = toleration.get("tolerationSeconds")
    return None if seconds is None else max(0, int(seconds))


def node_taints(node: Mapping[str, Any]) -> list[JsonObject]:
    """The node's taints, with those the node lifecycle controller adds for a node not Ready
    (``node.kubernetes.io/not-ready`` or ``unreachable``) and for ``spec.unschedulable``."""
    taints = [dict(t) for t in (node.get("spec") or {}).get("taints") or []]
    keys = {(t.get("key"), t.get("effect")) for t in taints}
    ready = node_ready(node)
    if ready is not True:
        key = "node.kubernetes.io/unreachable" if ready is None else "node.kubernetes.io/not-ready"
        for effect in ("NoSchedule", "NoExecute"):
            if (key, effect) not in keys:
                taints.append({"key": key, "effect": effect})
    if (node.get("spec") or {}).get("unschedulable") and ("node.kubernetes.io/unschedulable", "NoSchedule") not in keys:
        taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
    return taints


def untolerated(
    pod: Mapping[str, Any], taints: Iterable[Mapping[str, Any]], effects: tuple[str, ...] = ("NoSchedule", "NoExecute")
) -> JsonObject | None:
    """The first taint of ``effects`` the pod does not tolerate."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in taints:
        if taint.get("effect") in effects and not tolerates(tolerations, taint):
            return dict(taint)
    return None


def ready_status(node: Mapping[str, Any]) -> str | None:
    """The node's Ready condition status (``True``, ``False``, ``Unknown``); None without one."""
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return str(c.get("status"))
    return None


def node_ready(node: Mapping[str, Any]) -> bool | None:
    """True/False from the Ready condition; None when it is Unknown or missing."""
    return {"True": True, "False": False}.get(ready_status(node) or "")


# ------------------------------------------------------------------ node selection


#: a NodeSelectorRequirement's operator as the label requirement kube turns it into
_NODE_OPERATORS = {**SELECTOR_OPERATORS, "Gt": Operator.GREATER_THAN, "Lt": Operator.LESS_THAN}
#: a matchFields requirement's operator as the field selector term kube turns it into
_FIELD_OPERATORS = {"In": Operator.EQUALS, "NotIn": Operator.NOT_EQUALS}


def _requirement(expr: Mapping[str, Any], operators: Mapping[str, Operator]) -> Requirement | None:
    """A node selector requirement as kube builds it; None where it cannot (an unknown operator,
    what ``labels.NewRequirement`` refuses, a ``matchFields`` term without exactly one value):
    the term it is in then matches nothing."""
    name, values = expr.get("operator"), expr.get("values") or []
    operator = operators.get(name) if isinstance(name, str) else None
    if operator is None or not isinstance(values, list):
        return None
    if operators is _FIELD_OPERATORS:  # nodeSelectorRequirementsAsFieldSelector: one value, no NewRequirement
        return Requirement(str(expr.get("key") or ""), operator, frozenset(values)) if len(values) == 1 else None
    try:
        return new_requirement(expr.get("key"), operator, values)
    except InvalidSelector:
        return None


def term_matches(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """A NodeSelectorTerm: all its matchExpressions (labels) and matchFields (metadata.name)."""
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches no objects
    labels = node["metadata"].get("labels") or {}
    node_fields = {"metadata.name": node["metadata"].get("name") or ""}
    for requirements, operators, against in ((exprs, _NODE_OPERATORS, labels), (fields, _FIELD_OPERATORS, node_fields)):
        for expr in requirements:
            requirement = _requirement(expr, operators)
            if requirement is None or not requirement.matches(against):
                return False
    return True


def terms_match(terms: Iterable[Mapping[str, Any]], node: Mapping[str, Any]) -> bool:
    """``MatchNodeSelectorTerms``: the terms ORed (none: no node)."""
    return any(isinstance(t, Mapping) and term_matches(t, node) for t in terms)


def matches_node_selector(pod_spec: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """``nodeSelector`` and required node affinity (terms ORed, expressions ANDed)."""
    labels = node["metadata"].get("labels") or {}
    for k, v in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms")
    if terms is not None and not terms_match(terms, node):
        return False
    return True


def volume_fits_node(pv: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """A PersistentVolume's ``spec.nodeAffinity.required`` against a node, as volume util's
    ``CheckNodeAffinity`` checks it for the scheduler's VolumeBinding and the kubelet: no
    required affinity fits every node; else one of its terms must match the node's *labels*
    (kube builds a node of the labels alone, so a ``matchFields`` term on ``metadata.name``
    matches no node)."""
    required = ((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required")
    if required is None:
        return True
    return terms_match((required or {}).get("nodeSelectorTerms") or [],
                       {"metadata": {"name": "", "labels": node["metadata"].get("labels") or {}}})


def topology_terms_match(terms: Any, labels: Mapping[str, str]) -> bool:
    """``MatchTopologySelectorTerms``: a StorageClass's ``allowedTopologies`` against a node's
    labels. No terms allow every node; else the terms are ORed, and a term holds when each of
    its ``matchLabelExpressions`` does (the key present with one of its values, kube's ``In``
    requirement); an empty term, or one kube cannot build (an expression without values or
    with a bad key), allows no node."""
    if not terms:
        return True
    for term in terms if isinstance(terms, list) else []:
        expressions = term.get("matchLabelExpressions") if isinstance(term, Mapping) else None
        if not expressions or not isinstance(expressions, list):
            continue
        try:
            requirements = [new_requirement(e.get("key"), Operator.IN, e.get("values") or [])
                            for e in expressions if isinstance(e, Mapping)]
        except InvalidSelector:
            continue
        if len(requirements) == len(expressions) and all(r.matches(labels) for r in requirements):
            return True
    return False


# ------------------------------------------------------------------ conditions


def set_condition(status: JsonObject, now: str, type_: str, value: str, reason: str | None = None,
                  message: str | None = None, probe: bool = True) -> None:
    """Set a condition; its ``lastTransitionTime`` moves only when its status does."""
    conditions = status.setdefault("conditions", [])
    for c in conditions:
        if c.get("type") == type_:
            if c.get("status") != value:
                c["lastTransitionTime"] = now
            c["status"] = value
            for k, v in (("reason", reason), ("message", message)):
                if v is None:
                    c.pop(k, None)
                else:
                    c[k] = v
            return
    c: JsonObject = {"type": type_, "status": value}
    if probe:
        c["lastProbeTime"] = None
    c["lastTransitionTime"] = now
    if reason is not None:
        c["reason"] = reason
    if message is not None:
        c["message"] = message
    conditions.append(c)


def condition(obj: Mapping[str, Any], type_: str) -> JsonObject | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return None


def controller_ref(obj: Mapping[str, Any]) -> JsonObject | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None
