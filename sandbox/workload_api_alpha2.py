"""The Workload API as Kubernetes 1.36 serves it (KEP-4671, KEP-5832: ``scheduling.k8s.io/v1alpha2``).

1.36 split the runtime group out of the Workload: a ``Workload`` holds ``spec.podGroupTemplates[]``
(``name``, ``schedulingPolicy`` of exactly one of ``basic: {}`` / ``gang: {minCount}``, and the
gated ``schedulingConstraints`` and ``resourceClaims``), and each runtime group is a ``PodGroup``:
``spec.podGroupTemplateRef.workload`` (``workloadName``, ``podGroupTemplateName``), its own
``spec.schedulingPolicy``, and a ``status`` whose condition ``PodGroupScheduled`` the scheduler
writes. A pod names its PodGroup with ``spec.schedulingGroup.podGroupName``, as in 1.37.

The official client the sandbox's other schemas come from has no ``v1alpha2`` models (1.37 moved
on to ``v1beta1``: :mod:`.workload_api_beta`), so the schemas are written here
(:data:`COMPONENTS`, from the 1.36 API types) and so is kube-apiserver's validation with its
field paths (:func:`validate`); :mod:`.workload_api_beta` serves them for ``Release.V1_36``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from .kinds import Resource, ResourceType
from .object_validation import ErrorType, FieldError
from .workload_api import MAX_POD_GROUPS
from .workload_rules import gated, label_field, scheduling_policy, subdomain_field

GROUP, VERSION = "scheduling.k8s.io", "v1alpha2"
_PKG = f"io.k8s.api.{GROUP.split('.')[0]}.{VERSION}"
_META = "io.k8s.apimachinery.pkg.apis.meta.v1"
JsonObject = dict[str, Any]

WORKLOAD = ResourceType(Resource.WORKLOADS, GROUP, VERSION, "Workload", True, tracks_generation=True)
POD_GROUP = ResourceType("podgroups", GROUP, VERSION, "PodGroup", True, status_subresource=True, tracks_generation=True)
DEFINITIONS: dict[tuple[str, str, str], str] = {
    (GROUP, VERSION, "Workload"): f"{_PKG}.Workload",
    (GROUP, VERSION, "PodGroup"): f"{_PKG}.PodGroup",
}
"""(group, version, kind) -> the component schema of the kind."""


def _ref(name: str, description: str = "") -> JsonObject:
    out: JsonObject = {"allOf": [{"$ref": f"#/components/schemas/{name}"}]}
    if description:
        out["description"] = description
    return out


def _string(description: str) -> JsonObject:
    return {"description": description, "type": "string"}


def _gvk(kind: str) -> list[JsonObject]:
    return [{"group": GROUP, "kind": kind, "version": VERSION}]


def _object(description: str, properties: JsonObject, required: list[str] | None = None, **extra: Any) -> JsonObject:
    out: JsonObject = {"description": description, "properties": properties, "type": "object", **extra}
    if required:
        out["required"] = required
    return out


def _list_of(name: str, description: str, key: str = "name") -> JsonObject:
    return {"description": description, "items": {**_ref(name), "default": {}}, "type": "array",
            "x-kubernetes-list-map-keys": [key], "x-kubernetes-list-type": "map",
            "x-kubernetes-patch-merge-key": key, "x-kubernetes-patch-strategy": "merge"}


def _top(kind: str, description: str, spec: str, status: str | None) -> JsonObject:
    props: JsonObject = {
        "apiVersion": _string("APIVersion defines the versioned schema of this representation of an object."),
        "kind": _string("Kind is a string value representing the REST resource this object represents."),
        "metadata": {**_ref(f"{_META}.ObjectMeta", "Standard object's metadata."), "default": {}},
        "spec": {**_ref(spec, f"Spec defines the desired state of the {kind}."), "default": {}},
    }
    if status:
        props["status"] = {**_ref(status, f"Status represents the current observed state of the {kind}."), "default": {}}
    return _object(description, props, ["spec"], **{"x-kubernetes-group-version-kind": _gvk(kind)})


def _list(kind: str) -> JsonObject:
    return _object(f"{kind}List contains a list of {kind} resources.", {
        "apiVersion": _string("APIVersion defines the versioned schema of this representation of an object."),
        "items": {"description": f"Items is the list of {kind}s.", "items": {**_ref(f"{_PKG}.{kind}"), "default": {}},
                  "type": "array"},
        "kind": _string("Kind is a string value representing the REST resource this object represents."),
        "metadata": {**_ref(f"{_META}.ListMeta", "Standard list metadata."), "default": {}},
    }, ["items"], **{"x-kubernetes-group-version-kind": _gvk(f"{kind}List")})


_CLAIM = _object("PodGroupResourceClaim references exactly one ResourceClaim, either directly or by naming a "
                 "ResourceClaimTemplate.", {
                     "name": {**_string("Name uniquely identifies this resource claim inside the PodGroup."), "default": ""},
                     "resourceClaimName": _string("ResourceClaimName is the name of a ResourceClaim object in the same "
                                                  "namespace as this PodGroup."),
                     "resourceClaimTemplateName": _string("ResourceClaimTemplateName is the name of a "
                                                          "ResourceClaimTemplate object in the same namespace."),
                 }, ["name"])

COMPONENTS: dict[str, JsonObject] = {
    f"{_PKG}.Workload": _top("Workload", "Workload allows for expressing scheduling constraints that should be used when "
                             "managing the lifecycle of workloads from the scheduling perspective.",
                             f"{_PKG}.WorkloadSpec", None),
    f"{_PKG}.WorkloadList": _list("Workload"),
    f"{_PKG}.WorkloadSpec": _object("WorkloadSpec defines the desired state of a Workload.", {
        "controllerRef": _ref(f"{_PKG}.TypedLocalObjectReference", "ControllerRef is an optional reference to the "
                              "controlling object, such as a Deployment or Job. This field is immutable."),
        "podGroupTemplates": _list_of(f"{_PKG}.PodGroupTemplate", "PodGroupTemplates is the list of templates that make "
                                      "up the Workload. The maximum number of templates is 8. This field is immutable."),
    }, ["podGroupTemplates"]),
    f"{_PKG}.TypedLocalObjectReference": _object("TypedLocalObjectReference allows to reference typed object inside the "
                                                 "same namespace.", {
        "apiGroup": _string("APIGroup is the group for the resource being referenced."),
        "kind": {**_string("Kind is the type of resource being referenced."), "default": ""},
        "name": {**_string("Name is the name of resource being referenced."), "default": ""},
    }, ["kind", "name"]),
    f"{_PKG}.PodGroupTemplate": _object("PodGroupTemplate represents a template for a set of pods with a scheduling "
                                        "policy.", {
        "name": {**_string("Name is a unique identifier for the PodGroupTemplate within the Workload. It must be a DNS "
                           "label. This field is immutable."), "default": ""},
        "resourceClaims": _list_of(f"{_PKG}.PodGroupResourceClaim", "ResourceClaims defines which ResourceClaims may be "
                                   "shared among Pods in the group."),
        "schedulingConstraints": _ref(f"{_PKG}.PodGroupSchedulingConstraints", "SchedulingConstraints defines optional "
                                      "scheduling constraints (e.g. topology) for this PodGroupTemplate."),
        "schedulingPolicy": {**_ref(f"{_PKG}.PodGroupSchedulingPolicy", "SchedulingPolicy defines the scheduling policy "
                                    "for this PodGroupTemplate."), "default": {}},
    }, ["name", "schedulingPolicy"]),
    f"{_PKG}.PodGroupSchedulingPolicy": _object("PodGroupSchedulingPolicy defines the scheduling configuration for a "
                                                "PodGroup. Exactly one policy must be set.", {
        "basic": _ref(f"{_PKG}.BasicSchedulingPolicy", "Basic specifies that the pods in this group should be scheduled "
                      "using standard Kubernetes scheduling behavior."),
        "gang": _ref(f"{_PKG}.GangSchedulingPolicy", "Gang specifies that the pods in this group should be scheduled "
                     "using all-or-nothing semantics."),
    }),
    f"{_PKG}.BasicSchedulingPolicy": {"description": "BasicSchedulingPolicy indicates that standard Kubernetes scheduling "
                                                     "behavior should be used.", "type": "object"},
    f"{_PKG}.GangSchedulingPolicy": _object("GangSchedulingPolicy defines the parameters for gang scheduling.", {
        "minCount": {"default": 0, "description": "MinCount is the minimum number of pods that must be schedulable or "
                     "scheduled at the same time for the scheduler to admit the entire group.", "format": "int32",
                     "type": "integer"},
    }, ["minCount"]),
    f"{_PKG}.PodGroupSchedulingConstraints": _object("PodGroupSchedulingConstraints defines scheduling constraints (e.g. "
                                                     "topology) for a PodGroup.", {
        "topology": {"description": "Topology defines the topology constraints for the pod group.",
                     "items": {**_ref(f"{_PKG}.TopologyConstraint"), "default": {}}, "type": "array",
                     "x-kubernetes-list-type": "atomic"},
    }),
    f"{_PKG}.TopologyConstraint": _object("TopologyConstraint defines a topology constraint for a PodGroup.", {
        "key": {**_string("Key specifies the key of the node label representing the topology domain."), "default": ""},
    }, ["key"]),
    f"{_PKG}.PodGroupResourceClaim": _CLAIM,
    f"{_PKG}.PodGroup": _top("PodGroup", "PodGroup represents a runtime instance of pods grouped together.",
                             f"{_PKG}.PodGroupSpec", f"{_PKG}.PodGroupStatus"),
    f"{_PKG}.PodGroupList": _list("PodGroup"),
    f"{_PKG}.PodGroupSpec": _object("PodGroupSpec defines the desired state of a PodGroup.", {
        "podGroupTemplateRef": _ref(f"{_PKG}.PodGroupTemplateReference", "PodGroupTemplateRef references an optional "
                                    "PodGroup template within other object (e.g. Workload). This field is immutable."),
        "resourceClaims": _list_of(f"{_PKG}.PodGroupResourceClaim", "ResourceClaims defines which ResourceClaims may be "
                                   "shared among Pods in the group."),
        "schedulingConstraints": _ref(f"{_PKG}.PodGroupSchedulingConstraints", "SchedulingConstraints defines optional "
                                      "scheduling constraints (e.g. topology) for this PodGroup."),
        "schedulingPolicy": {**_ref(f"{_PKG}.PodGroupSchedulingPolicy", "SchedulingPolicy defines the scheduling policy "
                                    "for this instance of the PodGroup. This field is immutable."), "default": {}},
    }, ["schedulingPolicy"]),
    f"{_PKG}.PodGroupTemplateReference": _object("PodGroupTemplateReference references a PodGroup template defined in "
                                                 "some object (e.g. Workload).", {
        "workload": _ref(f"{_PKG}.WorkloadPodGroupTemplateReference", "Workload references the PodGroupTemplate within "
                         "the Workload object that was used to create the PodGroup."),
    }),
    f"{_PKG}.WorkloadPodGroupTemplateReference": _object("WorkloadPodGroupTemplateReference references the "
                                                         "PodGroupTemplate within the Workload object.", {
        "podGroupTemplateName": {**_string("PodGroupTemplateName defines the PodGroupTemplate name within the Workload "
                                           "object."), "default": ""},
        "workloadName": {**_string("WorkloadName defines the name of the Workload object."), "default": ""},
    }, ["workloadName", "podGroupTemplateName"]),
    f"{_PKG}.PodGroupStatus": _object("PodGroupStatus represents information about the status of a pod group.", {
        "conditions": {**_list_of(f"{_META}.Condition", "Conditions represent the latest observations of the "
                                  "PodGroup's state (PodGroupScheduled, DisruptionTarget).", key="type")},
        "resourceClaimStatuses": _list_of(f"{_PKG}.PodGroupResourceClaimStatus", "Status of resource claims."),
    }),
    f"{_PKG}.PodGroupResourceClaimStatus": _object("PodGroupResourceClaimStatus stores the generated name of a "
                                                   "PodGroup's ResourceClaim.", {
        "name": {**_string("Name uniquely identifies this resource claim inside the PodGroup."), "default": ""},
        "resourceClaimName": _string("ResourceClaimName is the name of the ResourceClaim that was generated."),
    }, ["name"]),
}
"""The component schemas of the 1.36 Workload and PodGroup."""


def validate_workload(obj: Mapping[str, Any]) -> Iterator[FieldError]:
    """A 1.36 Workload: its pod group templates and controller reference."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    ref = spec.get("controllerRef")
    if isinstance(ref, dict):
        for field in ("kind", "name"):
            if not ref.get(field):
                yield FieldError(ErrorType.REQUIRED, f"spec.controllerRef.{field}", "")
    templates = spec.get("podGroupTemplates") or []
    if not templates:
        yield FieldError(ErrorType.REQUIRED, "spec.podGroupTemplates", "")
    elif len(templates) > MAX_POD_GROUPS:
        yield FieldError(ErrorType.TOO_MANY, "spec.podGroupTemplates", f"must have at most {MAX_POD_GROUPS} items",
                         str(len(templates)))
    seen: set[str] = set()
    for i, template in enumerate(templates):
        path = f"spec.podGroupTemplates[{i}]"
        template = template if isinstance(template, dict) else {}
        yield from label_field(template.get("name"), f"{path}.name")
        name = str(template.get("name") or "")
        if name and name in seen:
            yield FieldError(ErrorType.DUPLICATE, f"{path}.name", "", f'"{name}"')
        seen.add(name)
        yield from scheduling_policy(template.get("schedulingPolicy"), f"{path}.schedulingPolicy")
        yield from gated(template, "schedulingConstraints", "TopologyAwareWorkloadScheduling", path)
        yield from gated(template, "resourceClaims", "DRAWorkloadResourceClaims", path)


def validate_pod_group(obj: Mapping[str, Any]) -> Iterator[FieldError]:
    """A 1.36 PodGroup: the template it names and its scheduling policy."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    yield from gated(spec, "schedulingConstraints", "TopologyAwareWorkloadScheduling", "spec")
    yield from gated(spec, "resourceClaims", "DRAWorkloadResourceClaims", "spec")
    ref = spec.get("podGroupTemplateRef")
    if isinstance(ref, dict):
        workload = ref.get("workload")
        if not isinstance(workload, dict):
            yield FieldError(ErrorType.REQUIRED, "spec.podGroupTemplateRef", "must specify one of: `workload`")
        else:
            where = "spec.podGroupTemplateRef.workload"
            yield from subdomain_field(workload.get("workloadName"), f"{where}.workloadName")
            yield from label_field(workload.get("podGroupTemplateName"), f"{where}.podGroupTemplateName")
    if "schedulingPolicy" not in spec:
        yield FieldError(ErrorType.REQUIRED, "spec.schedulingPolicy", "")
    else:
        yield from scheduling_policy(spec.get("schedulingPolicy"), "spec.schedulingPolicy")


def validate(rt: ResourceType, obj: Mapping[str, Any]) -> list[FieldError] | None:
    """The errors of a 1.36 Workload or PodGroup; None for any other kind."""
    if rt.group != GROUP or rt.version != VERSION:
        return None
    if rt.kind == WORKLOAD.kind:
        return list(validate_workload(obj))
    if rt.kind == POD_GROUP.kind:
        return list(validate_pod_group(obj))
    return None
