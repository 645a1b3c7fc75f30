"""The Workload API of Kubernetes 1.35 (KEP-4671, ``scheduling.k8s.io/v1alpha1``), served by the sandbox.

A ``Workload`` lists pod groups (``spec.podGroups[]``: a DNS-label ``name`` and a ``policy`` of
exactly one of ``basic: {}`` or ``gang: {minCount}``), and an optional ``controllerRef``
(``apiGroup``, ``kind``, ``name``: for tools, not for scheduling). A pod joins a group with
``spec.workloadRef`` (``name`` of the Workload in its namespace, ``podGroup``, and an optional
``podGroupReplicaKey``: each key is a gang of its own).

The official client the sandbox's other schemas come from no longer has these 1.35 types (1.37
moved to v1beta1 and ``spec.schedulingGroup``), so their schemas are written here
(:data:`COMPONENTS`, :data:`POD_SPEC_FIELDS`) and the validation is kube-apiserver's
(:func:`validate_workload`, :func:`validate_workload_ref`) with its field paths.

:func:`gang_of` is what the default scheduler's GangScheduling needs: a pod's gang key and its
``minCount`` (None for a basic group), or why it waits (no such Workload or group yet);
:func:`pod_group_gang_of` the same for a 1.36/1.37 pod naming a runtime PodGroup.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from .object_validation import ErrorType, FieldError, dns_subdomain_errors, go_quote

JsonObject = dict[str, Any]

GROUP, VERSION, KIND = "scheduling.k8s.io", "v1alpha1", "Workload"
MAX_POD_GROUPS = 8
"""``WorkloadMaxPodGroups``."""

_PKG = "io.k8s.api.scheduling.v1alpha1"
_CORE = "io.k8s.api.core.v1"
_META = "io.k8s.apimachinery.pkg.apis.meta.v1"
WORKLOAD = f"{_PKG}.Workload"
WORKLOAD_REFERENCE = f"{_CORE}.WorkloadReference"


def _ref(name: str, description: str = "") -> JsonObject:
    out: JsonObject = {"allOf": [{"$ref": f"#/components/schemas/{name}"}]}
    if description:
        out["description"] = description
    return out


def _string(description: str) -> JsonObject:
    return {"description": description, "type": "string"}


def _gvk(kind: str) -> list[JsonObject]:
    return [{"group": GROUP, "kind": kind, "version": VERSION}]


COMPONENTS: dict[str, JsonObject] = {
    WORKLOAD: {
        "description": "Workload allows for expressing scheduling constraints that should be used when managing "
                       "lifecycle of workloads from scheduling perspective, including scheduling, preemption, "
                       "eviction and other phases.",
        "properties": {
            "apiVersion": _string("APIVersion defines the versioned schema of this representation of an object."),
            "kind": _string("Kind is a string value representing the REST resource this object represents."),
            "metadata": {**_ref(f"{_META}.ObjectMeta", "Standard object's metadata."), "default": {}},
            "spec": {**_ref(f"{_PKG}.WorkloadSpec", "Spec defines the desired behavior of a Workload."), "default": {}},
        },
        "required": ["spec"],
        "type": "object",
        "x-kubernetes-group-version-kind": _gvk("Workload"),
    },
    f"{_PKG}.WorkloadList": {
        "description": "WorkloadList contains a list of Workload resources.",
        "properties": {
            "apiVersion": _string("APIVersion defines the versioned schema of this representation of an object."),
            "items": {"description": "Items is the list of Workloads.", "items": {**_ref(WORKLOAD), "default": {}},
                      "type": "array"},
            "kind": _string("Kind is a string value representing the REST resource this object represents."),
            "metadata": {**_ref(f"{_META}.ListMeta", "Standard list metadata."), "default": {}},
        },
        "required": ["items"],
        "type": "object",
        "x-kubernetes-group-version-kind": _gvk("WorkloadList"),
    },
    f"{_PKG}.WorkloadSpec": {
        "description": "WorkloadSpec defines the desired state of a Workload.",
        "properties": {
            "controllerRef": _ref(f"{_PKG}.TypedLocalObjectReference",
                                  "ControllerRef is an optional reference to the controlling object, such as a "
                                  "Deployment or Job. This field is immutable."),
            "podGroups": {
                "description": "PodGroups is the list of pod groups that make up the Workload. The maximum number "
                               "of pod groups is 8. This field is immutable.",
                "items": {**_ref(f"{_PKG}.PodGroup"), "default": {}},
                "type": "array",
                "x-kubernetes-list-map-keys": ["name"],
                "x-kubernetes-list-type": "map",
            },
        },
        "required": ["podGroups"],
        "type": "object",
    },
    f"{_PKG}.TypedLocalObjectReference": {
        "description": "TypedLocalObjectReference allows to reference typed object inside the same namespace.",
        "properties": {
            "apiGroup": _string("APIGroup is the group for the resource being referenced."),
            "kind": {**_string("Kind is the type of resource being referenced."), "default": ""},
            "name": {**_string("Name is the name of resource being referenced."), "default": ""},
        },
        "required": ["kind", "name"],
        "type": "object",
    },
    f"{_PKG}.PodGroup": {
        "description": "PodGroup represents a set of pods with a common scheduling policy.",
        "properties": {
            "name": {**_string("Name is a unique identifier for the PodGroup within the Workload. It must be a "
                               "DNS label."), "default": ""},
            "policy": {**_ref(f"{_PKG}.PodGroupPolicy", "Policy defines the scheduling policy for this PodGroup."),
                       "default": {}},
        },
        "required": ["name", "policy"],
        "type": "object",
    },
    f"{_PKG}.PodGroupPolicy": {
        "description": "PodGroupPolicy defines the scheduling configuration for a PodGroup.",
        "properties": {
            "basic": _ref(f"{_PKG}.BasicSchedulingPolicy",
                          "Basic specifies that the pods in this group should be scheduled using standard "
                          "Kubernetes scheduling behavior."),
            "gang": _ref(f"{_PKG}.GangSchedulingPolicy",
                         "Gang specifies that the pods in this group should be scheduled using all-or-nothing "
                         "semantics."),
        },
        "type": "object",
    },
    f"{_PKG}.BasicSchedulingPolicy": {
        "description": "BasicSchedulingPolicy indicates that standard Kubernetes scheduling behavior should be used.",
        "type": "object",
    },
    f"{_PKG}.GangSchedulingPolicy": {
        "description": "GangSchedulingPolicy defines the parameters for gang scheduling.",
        "properties": {
            "minCount": {"default": 0, "description": "MinCount is the minimum number of pods that must be "
                         "schedulable or scheduled at the same time for the scheduler to admit the entire group. "
                         "It must be a positive integer.", "format": "int32", "type": "integer"},
        },
        "required": ["minCount"],
        "type": "object",
    },
    WORKLOAD_REFERENCE: {
        "description": "WorkloadReference identifies the Workload object and PodGroup membership that a Pod "
                       "belongs to.",
        "properties": {
            "name": {**_string("Name defines the name of the Workload object this Pod belongs to. It must be a "
                               "DNS subdomain."), "default": ""},
            "podGroup": {**_string("PodGroup is the name of the PodGroup within the Workload that this Pod "
                                   "belongs to. It must be a DNS label."), "default": ""},
            "podGroupReplicaKey": _string("PodGroupReplicaKey specifies the replica key of the PodGroup to which "
                                          "this Pod belongs. When set, it must be a DNS label."),
        },
        "required": ["name", "podGroup"],
        "type": "object",
    },
}
"""The component schemas of the 1.35 Workload kinds and of the pod's ``WorkloadReference``."""

POD_SPEC_FIELDS: dict[str, JsonObject] = {
    "workloadRef": _ref(WORKLOAD_REFERENCE, "WorkloadRef provides a reference to the Workload object that this "
                        "Pod belongs to. This field is immutable."),
}
"""Fields the 1.35 ``PodSpec`` has beyond the client's model."""


# ------------------------------------------------------------------ validation

_DNS_LABEL_MAX = 63
_DNS_LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
                  "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
                  "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")


def dns_label_errors(value: str) -> list[str]:
    """``IsDNS1123Label``."""
    errors = []
    if len(value) > _DNS_LABEL_MAX:
        errors.append(f"must be no more than {_DNS_LABEL_MAX} characters")
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", value):
        errors.append(_DNS_LABEL_MSG)
    return errors


def _invalid(path: str, value: Any, detail: str) -> FieldError:
    shown = go_quote(value) if isinstance(value, str) else str(value)
    return FieldError(ErrorType.INVALID, path, detail, shown)


def validate_workload(obj: Mapping[str, Any]) -> Iterator[FieldError]:
    """``ValidateWorkload``: the spec's pod groups and controller reference."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    ref = spec.get("controllerRef")
    if isinstance(ref, dict):
        for field in ("kind", "name"):
            if not ref.get(field):
                yield FieldError(ErrorType.REQUIRED, f"spec.controllerRef.{field}", "")
    groups = spec.get("podGroups") or []
    if not groups:
        yield FieldError(ErrorType.REQUIRED, "spec.podGroups", "must have at least one item")
    elif len(groups) > MAX_POD_GROUPS:
        yield FieldError(ErrorType.TOO_MANY, "spec.podGroups", f"must have at most {MAX_POD_GROUPS} items", str(len(groups)))
    seen: set[str] = set()
    for i, group in enumerate(groups):
        path = f"spec.podGroups[{i}]"
        group = group if isinstance(group, dict) else {}
        name = str(group.get("name") or "")
        if not name:
            yield FieldError(ErrorType.REQUIRED, f"{path}.name", "")
        for detail in dns_label_errors(name) if name else ():
            yield _invalid(f"{path}.name", name, detail)
        if name in seen:
            yield FieldError(ErrorType.DUPLICATE, f"{path}.name", "", go_quote(name))
        seen.add(name)
        policy = group.get("policy") if isinstance(group.get("policy"), dict) else {}
        chosen = [f for f in ("basic", "gang") if policy.get(f) is not None]
        if not chosen:
            yield FieldError(ErrorType.REQUIRED, f"{path}.policy", "must specify one of: `basic`, `gang`")
        elif len(chosen) > 1:
            yield _invalid(f"{path}.policy", "{`basic`, `gang`}", "must specify exactly one of: `basic`, `gang`")
        gang = policy.get("gang")
        if isinstance(gang, dict):
            count = gang.get("minCount")
            if not isinstance(count, int) or count <= 0:
                yield _invalid(f"{path}.policy.gang.minCount", count or 0, "must be greater than zero")


def validate_workload_ref(spec: Mapping[str, Any], path: str) -> Iterator[FieldError]:
    """A pod's ``spec.workloadRef``: a DNS-subdomain ``name``, DNS-label ``podGroup`` and key."""
    ref = spec.get("workloadRef")
    if not isinstance(ref, dict):
        return
    where = f"{path}.workloadRef"
    name = str(ref.get("name") or "")
    if not name:
        yield FieldError(ErrorType.REQUIRED, f"{where}.name", "")
    for detail in dns_subdomain_errors(name) if name else ():
        yield _invalid(f"{where}.name", name, detail)
    group = str(ref.get("podGroup") or "")
    if not group:
        yield FieldError(ErrorType.REQUIRED, f"{where}.podGroup", "")
    for detail in dns_label_errors(group) if group else ():
        yield _invalid(f"{where}.podGroup", group, detail)
    key = ref.get("podGroupReplicaKey")
    for detail in dns_label_errors(str(key)) if key else ():
        yield _invalid(f"{where}.podGroupReplicaKey", key, detail)


# ------------------------------------------------------------------ gangs for the scheduler

GangKey = tuple[str, str, str, str]
"""(namespace, workload, pod group, replica key)."""


def workload_ref(pod: Mapping[str, Any]) -> JsonObject | None:
    ref = (pod.get("spec") or {}).get("workloadRef")
    return ref if isinstance(ref, dict) else None


def gang_of(pod: Mapping[str, Any], workloads: Mapping[tuple[str, str], Mapping[str, Any]]) -> tuple[GangKey, int | None] | None:
    """The pod's gang and its ``minCount`` (None: a basic group, scheduled pod by pod); None when
    the pod names a Workload or pod group that does not exist (it waits for it)."""
    ref = workload_ref(pod)
    if ref is None:
        raise ValueError("the pod has no workloadRef")
    namespace = pod["metadata"].get("namespace") or "default"
    workload = workloads.get((namespace, str(ref.get("name") or "")))
    if workload is None:
        return None
    for group in (workload.get("spec") or {}).get("podGroups") or []:
        if group.get("name") == ref.get("podGroup"):
            key = (namespace, str(ref.get("name")), str(ref.get("podGroup")), str(ref.get("podGroupReplicaKey") or ""))
            gang = (group.get("policy") or {}).get("gang")
            return key, int(gang["minCount"]) if isinstance(gang, dict) and gang.get("minCount") else None
    return None


def scheduling_group(pod: Mapping[str, Any]) -> str | None:
    """The PodGroup a 1.36/1.37 pod names (``spec.schedulingGroup.podGroupName``), or None."""
    group = (pod.get("spec") or {}).get("schedulingGroup")
    return str(group.get("podGroupName") or "") if isinstance(group, dict) else None


def pod_group_gang_of(
    pod: Mapping[str, Any], pod_groups: Mapping[tuple[str, str], Mapping[str, Any]]
) -> tuple[GangKey, int | None] | None:
    """The gang of a pod naming a runtime PodGroup (1.36 ``v1alpha2``, 1.37 ``v1beta1``) and its
    ``minCount`` (None: a basic group); None when the PodGroup does not exist (the pod waits)."""
    name = scheduling_group(pod)
    if name is None:
        raise ValueError("the pod has no schedulingGroup")
    namespace = pod["metadata"].get("namespace") or "default"
    group = pod_groups.get((namespace, name))
    if group is None:
        return None
    gang = ((group.get("spec") or {}).get("schedulingPolicy") or {}).get("gang")
    return (namespace, "PodGroup", name, ""), int(gang["minCount"]) if isinstance(gang, dict) and gang.get("minCount") else None
