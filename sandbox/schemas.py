"""The schema of every kind the sandbox serves, as the real API server publishes it in OpenAPI v3.

Built-in kinds are derived at run time from the official client's generated models
(:mod:`kubernetes.client.models`): each model class lists its fields (``openapi_types``), their
JSON names (``attribute_map``) and, through pydantic, which are required and what they mean.
From those, :func:`builtin_components` writes ``components.schemas`` entries named as the real
server names them (``io.k8s.api.core.v1.Pod``, ``io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta``),
in the real documents' style (``allOf: [{$ref}]`` for nested types), with the strategic merge
patch metadata of :data:`PATCH_METADATA` (the ``patchStrategy``/``patchMergeKey`` struct tags of
``k8s.io/api``) and ``x-kubernetes-group-version-kind`` on top-level kinds.

Custom resources take their schema from the CRD's ``spec.versions[].schema.openAPIV3Schema``
(:func:`custom_component`), with ``metadata`` pointing at ``ObjectMeta`` as the real server does.

:class:`Schema` is a resolved, navigable view of one schema (``$ref`` and ``allOf`` followed) for
the validators and the strategic merge patch; :class:`SchemaRegistry` finds the schema of a
served kind. Everything built from the client's models is computed once and cached.

Longer than the house's 600 lines: the derivation from the client's models, the CRDs' schemas
and the navigable view share one cache and one resolution of ``$ref``, and are read together.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cache, cached_property
from typing import Any

from usher.sandbox import workload_api, workload_api_alpha2, workload_api_beta
from usher.sandbox.kinds import ResourceType

JsonObject = dict[str, Any]

REF_PREFIX = "#/components/schemas/"
META = "io.k8s.apimachinery.pkg.apis.meta.v1"
APIEXTENSIONS = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1"
TIME = f"{META}.Time"
MICRO_TIME = f"{META}.MicroTime"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
RAW_EXTENSION = "io.k8s.apimachinery.pkg.runtime.RawExtension"


class Ext(StrEnum):
    """The Kubernetes vendor extensions of OpenAPI schemas the sandbox writes and reads."""

    GVK = "x-kubernetes-group-version-kind"
    PATCH_STRATEGY = "x-kubernetes-patch-strategy"
    PATCH_MERGE_KEY = "x-kubernetes-patch-merge-key"
    LIST_TYPE = "x-kubernetes-list-type"
    LIST_MAP_KEYS = "x-kubernetes-list-map-keys"
    MAP_TYPE = "x-kubernetes-map-type"
    PRESERVE_UNKNOWN = "x-kubernetes-preserve-unknown-fields"
    EMBEDDED_RESOURCE = "x-kubernetes-embedded-resource"
    INT_OR_STRING = "x-kubernetes-int-or-string"


class PatchStrategy(StrEnum):
    """One strategic-merge-patch strategy (a field may have ``merge,retainKeys``: both)."""

    MERGE = "merge"
    REPLACE = "replace"
    RETAIN_KEYS = "retainKeys"


class ListType(StrEnum):
    ATOMIC = "atomic"
    SET = "set"
    MAP = "map"


class JsonType(StrEnum):
    """OpenAPI ``type`` values."""

    OBJECT = "object"
    ARRAY = "array"
    STRING = "string"
    INTEGER = "integer"
    NUMBER = "number"
    BOOLEAN = "boolean"


@dataclass(frozen=True, slots=True)
class Gvk:
    """A group, version and kind; ``group`` is ``""`` for the core group."""

    group: str
    version: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def extension(self) -> JsonObject:
        """The ``x-kubernetes-group-version-kind`` entry for this kind."""
        return {"group": self.group, "kind": self.kind, "version": self.version}

    @classmethod
    def of(cls, rt: ResourceType) -> Gvk:
        return cls(rt.group, rt.version, rt.kind)


# --------------------------------------------------------------------------- the built-in kinds

_RBAC = "rbac.authorization.k8s.io"
_ADMISSION = "admissionregistration.k8s.io"

BUILTIN_MODELS: dict[Gvk, str] = {
    **{
        Gvk("", "v1", kind): f"V1{kind}"
        for kind in (
            "Pod", "PodTemplate", "Node", "Namespace", "ConfigMap", "Secret", "Service", "ServiceAccount",
            "Endpoints", "PersistentVolumeClaim", "PersistentVolume", "ReplicationController", "ResourceQuota",
            "LimitRange", "Binding",
        )
    },
    Gvk("", "v1", "Event"): "CoreV1Event",
    **{Gvk("apps", "v1", kind): f"V1{kind}" for kind in ("Deployment", "ReplicaSet", "DaemonSet", "StatefulSet", "ControllerRevision")},
    Gvk("batch", "v1", "Job"): "V1Job",
    Gvk("batch", "v1", "CronJob"): "V1CronJob",
    **{Gvk(_RBAC, "v1", kind): f"V1{kind}" for kind in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")},
    Gvk("policy", "v1", "PodDisruptionBudget"): "V1PodDisruptionBudget",
    Gvk("policy", "v1", "Eviction"): "V1Eviction",
    Gvk("coordination.k8s.io", "v1", "Lease"): "V1Lease",
    Gvk("scheduling.k8s.io", "v1", "PriorityClass"): "V1PriorityClass",
    Gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"): "V1CustomResourceDefinition",
    Gvk("networking.k8s.io", "v1", "NetworkPolicy"): "V1NetworkPolicy",
    Gvk("networking.k8s.io", "v1", "Ingress"): "V1Ingress",
    Gvk("discovery.k8s.io", "v1", "EndpointSlice"): "V1EndpointSlice",
    Gvk("events.k8s.io", "v1", "Event"): "EventsV1Event",
    **{Gvk("storage.k8s.io", "v1", kind): f"V1{kind}" for kind in ("StorageClass", "CSINode", "CSIDriver", "CSIStorageCapacity")},
    Gvk("autoscaling", "v2", "HorizontalPodAutoscaler"): "V2HorizontalPodAutoscaler",
    **{Gvk("resource.k8s.io", "v1", kind): f"V1{kind}" for kind in ("DeviceClass", "ResourceSlice", "ResourceClaimTemplate")},
    Gvk("resource.k8s.io", "v1", "ResourceClaim"): "ResourceV1ResourceClaim",
    **{
        Gvk(_ADMISSION, "v1", kind): f"V1{kind}"
        for kind in (
            "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
            "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration",
        )
    },
    **{
        Gvk("authorization.k8s.io", "v1", kind): f"V1{kind}"
        for kind in ("SelfSubjectAccessReview", "SubjectAccessReview", "LocalSubjectAccessReview", "SelfSubjectRulesReview")
    },
    Gvk("authentication.k8s.io", "v1", "TokenRequest"): "AuthenticationV1TokenRequest",
    Gvk("authentication.k8s.io", "v1", "TokenReview"): "V1TokenReview",
    **{Gvk(*gvk): model for gvk, model in workload_api_beta.MODELS.items()},  # served with release 1.37
}
"""(group, version, kind) -> the client's model class, for every built-in kind the sandbox may serve."""

_CORE_ROOTS = tuple(model for gvk, model in BUILTIN_MODELS.items() if gvk.group == "")
"""Core kinds are walked first: every type they reach lives in ``io.k8s.api.core.v1``."""

_META_TYPES = frozenset({
    "ObjectMeta", "ListMeta", "LabelSelector", "LabelSelectorRequirement", "ManagedFieldsEntry", "OwnerReference",
    "Condition", "Status", "StatusDetails", "StatusCause", "DeleteOptions", "Preconditions", "APIResource",
    "APIResourceList", "APIGroup", "APIGroupList", "APIVersions", "GroupVersionForDiscovery",
    "ServerAddressByClientCIDR", "WatchEvent", "FieldSelectorRequirement",
})
_APIEXTENSIONS_PREFIXES = ("CustomResource", "JSONSchemaProps", "ExternalDocumentation", "ValidationRule",
                           "SelectableField", "WebhookConversion")

# Fields that hold resource quantities (the client types them as plain strings), and
# fields whose timestamps are MicroTime rather than Time: (model class, JSON field).
_QUANTITY_FIELDS = frozenset({
    ("V1ResourceRequirements", "limits"), ("V1ResourceRequirements", "requests"),
    ("V1VolumeResourceRequirements", "limits"), ("V1VolumeResourceRequirements", "requests"),
    ("V1NodeStatus", "capacity"), ("V1NodeStatus", "allocatable"), ("V1PodSpec", "overhead"),
    ("V1EmptyDirVolumeSource", "sizeLimit"), ("V1ContainerStatus", "allocatedResources"),
    ("V1ResourceQuotaSpec", "hard"), ("V1ResourceQuotaStatus", "hard"), ("V1ResourceQuotaStatus", "used"),
    ("V1PersistentVolumeSpec", "capacity"), ("V1PersistentVolumeClaimStatus", "capacity"),
    ("V1PersistentVolumeClaimStatus", "allocatedResources"), ("V1PodStatus", "allocatedResources"),
    ("V1CSIStorageCapacity", "capacity"), ("V1CSIStorageCapacity", "maximumVolumeSize"),
    ("V1DeviceCapacity", "value"), ("V1CapacityRequestPolicyRange", "min"), ("V1CapacityRequestPolicyRange", "max"),
    ("V1CapacityRequestPolicyRange", "step"), ("V1CapacityRequestPolicy", "default"), ("V1CapacityRequestPolicy", "validValues"),
    ("V1CapacityRequirements", "requests"), ("V1DeviceRequestAllocationResult", "consumedCapacity"),
    *(("V1LimitRangeItem", f) for f in ("default", "defaultRequest", "max", "min", "maxLimitRequestRatio")),
})
_MICRO_TIME_FIELDS = frozenset({
    ("V1LeaseSpec", "acquireTime"), ("V1LeaseSpec", "renewTime"), ("CoreV1Event", "eventTime"),
    ("EventsV1Event", "eventTime"), ("CoreV1EventSeries", "lastObservedTime"), ("EventsV1EventSeries", "lastObservedTime"),
})


# --------------------------------------------------------------------------- strategic merge patch metadata


@dataclass(frozen=True, slots=True)
class PatchMeta:
    """What the real API declares about one list (or map) field for patches and apply."""

    strategy: str | None = None
    """``merge``, ``merge,retainKeys``, ``retainKeys`` or ``replace``; ``None``: no strategy (atomic)."""
    merge_key: str | None = None
    list_type: ListType | None = None
    map_keys: tuple[str, ...] = ()

    def extensions(self) -> JsonObject:
        ext: JsonObject = {}
        if self.map_keys:
            ext[Ext.LIST_MAP_KEYS.value] = list(self.map_keys)
        if self.list_type is not None:
            ext[Ext.LIST_TYPE.value] = str(self.list_type)
        if self.merge_key:
            ext[Ext.PATCH_MERGE_KEY.value] = self.merge_key
        if self.strategy:
            ext[Ext.PATCH_STRATEGY.value] = str(self.strategy)
        return ext


def _merge(key: str, *map_keys: str, strategy: str = PatchStrategy.MERGE, list_type: ListType = ListType.MAP) -> PatchMeta:
    return PatchMeta(strategy, key, list_type, map_keys or (key,))


_ATOMIC = PatchMeta(list_type=ListType.ATOMIC)
_CONDITIONS = _merge("type")
_BY_NAME = _merge("name")
_MERGE_RETAIN = f"{PatchStrategy.MERGE},{PatchStrategy.RETAIN_KEYS}"
_CONTAINER_LISTS = {
    "env": _BY_NAME,
    "ports": _merge("containerPort", "containerPort", "protocol"),
    "volumeMounts": _merge("mountPath"),
    "volumeDevices": _merge("devicePath"),
}

PATCH_METADATA: dict[tuple[str, str], PatchMeta] = {
    # ObjectMeta
    ("V1ObjectMeta", "finalizers"): PatchMeta(PatchStrategy.MERGE, None, ListType.SET),
    ("V1ObjectMeta", "ownerReferences"): _merge("uid"),
    # PodSpec and containers
    ("V1PodSpec", "containers"): _BY_NAME,
    ("V1PodSpec", "initContainers"): _BY_NAME,
    ("V1PodSpec", "ephemeralContainers"): _BY_NAME,
    ("V1PodSpec", "volumes"): _merge("name", strategy=_MERGE_RETAIN),
    ("V1PodSpec", "imagePullSecrets"): _BY_NAME,
    ("V1PodSpec", "hostAliases"): _merge("ip"),
    ("V1PodSpec", "topologySpreadConstraints"): _merge("topologyKey", "topologyKey", "whenUnsatisfiable"),
    ("V1PodSpec", "resourceClaims"): _merge("name", strategy=_MERGE_RETAIN),
    ("V1PodSpec", "schedulingGates"): _BY_NAME,
    ("V1PodSpec", "tolerations"): _ATOMIC,
    **{(model, field): meta for model in ("V1Container", "V1EphemeralContainer") for field, meta in _CONTAINER_LISTS.items()},
    # statuses
    ("V1PodStatus", "conditions"): _CONDITIONS,
    ("V1PodStatus", "podIPs"): _merge("ip"),
    ("V1PodStatus", "hostIPs"): _merge("ip"),
    ("V1PodStatus", "resourceClaimStatuses"): _merge("name", strategy=_MERGE_RETAIN),
    ("V1NodeStatus", "conditions"): _CONDITIONS,
    ("V1NodeStatus", "addresses"): _merge("type"),
    ("V1NodeSpec", "taints"): _ATOMIC,
    ("V1JobStatus", "conditions"): PatchMeta(PatchStrategy.MERGE, "type", ListType.ATOMIC),
    **{
        (status, "conditions"): _CONDITIONS
        for status in (
            "V1NamespaceStatus", "V1ServiceStatus", "V1PersistentVolumeClaimStatus", "V1ReplicationControllerStatus",
            "V1DeploymentStatus", "V1ReplicaSetStatus", "V1DaemonSetStatus", "V1StatefulSetStatus",
            "V1PodDisruptionBudgetStatus",
        )
    },
    # services, accounts, workloads, admission
    ("V1ServiceSpec", "ports"): _merge("port", "port", "protocol"),
    ("V1ServiceAccount", "secrets"): _BY_NAME,
    ("V1DeploymentSpec", "strategy"): PatchMeta(PatchStrategy.RETAIN_KEYS),
    ("V1ValidatingWebhookConfiguration", "webhooks"): _BY_NAME,
    ("V1MutatingWebhookConfiguration", "webhooks"): _BY_NAME,
    ("V1ValidatingWebhook", "matchConditions"): _BY_NAME,
    ("V1MutatingWebhook", "matchConditions"): _BY_NAME,
    ("V1ValidatingAdmissionPolicySpec", "matchConditions"): _BY_NAME,
    ("V1ValidatingAdmissionPolicySpec", "variables"): PatchMeta(PatchStrategy.MERGE, "name", ListType.ATOMIC),
}
"""Strategic-merge-patch metadata, by (client model class, JSON field): the ``patchStrategy`` and
``patchMergeKey`` struct tags of ``k8s.io/api`` and the list types the real OpenAPI documents
declare. Lists not named here are atomic (replaced whole by a patch)."""


# --------------------------------------------------------------------------- naming


_CLASS_NAME = re.compile(r"^(?P<prefix>[A-Z][a-z]+)?(?P<version>V\d+(?:(?:alpha|beta)\d+)?)(?P<name>[A-Z]\w*)$")


def _split_class(model: str) -> tuple[str, str, str]:
    """``CoreV1Event`` -> (``core``, ``v1``, ``Event``); ``V1Pod`` -> (``""``, ``v1``, ``Pod``)."""
    match = _CLASS_NAME.match(model)
    if match is None:
        raise ValueError(f"not a Kubernetes model class name: {model}")
    return (match["prefix"] or "").lower(), match["version"].lower(), match["name"]


def _package(group: str) -> str:
    """The ``k8s.io/api`` package of an API group: ``apps``, ``rbac``, ``core``."""
    return group.split(".")[0] if group else "core"


@cache
def _definition_names() -> dict[str, str]:
    """Every model class reachable from a built-in kind -> its real definition name."""
    names: dict[str, str] = {}
    roots = [(model, "") for model in _CORE_ROOTS] + [
        (model, gvk.group) for gvk, model in BUILTIN_MODELS.items() if gvk.group
    ]
    roots += [(model + "List", group) for model, group in roots if _is_model(model + "List")]
    roots += [(f"V1{name}", "") for name in ("Status", "DeleteOptions")]
    for root, group in roots:
        for model in _reachable(root):
            if model in names:
                continue
            prefix, version, name = _split_class(model)
            if name in _META_TYPES:
                package = META
            elif name.startswith(_APIEXTENSIONS_PREFIXES) or prefix == "apiextensions":
                package = APIEXTENSIONS
            else:
                package = f"io.k8s.api.{prefix or _package(group)}.{version}"
            names[model] = f"{package}.{name}"
    return names


def definition_name(model: str) -> str:
    """The real definition name of a client model class: ``V1Pod`` -> ``io.k8s.api.core.v1.Pod``."""
    return _definition_names()[model]


def custom_definition_name(group: str, version: str, kind: str) -> str:
    """A custom resource's definition name, as the real server writes it: the group reversed
    (``kubeflow.org`` -> ``org.kubeflow.v1.PyTorchJob``)."""
    return ".".join([*reversed(group.split(".")), version, kind])


# --------------------------------------------------------------------------- models to schemas


@cache
def _models() -> Any:
    """The client's models module, imported on first use (it takes a while to import)."""
    from kubernetes.client import models

    return models


def _model(name: str) -> type[Any]:
    return getattr(_models(), name)


def _is_model(name: str) -> bool:
    return hasattr(_models(), name)


def _model_refs(type_string: str) -> list[str]:
    return [t for t in re.findall(r"[A-Za-z]\w*", type_string) if _CLASS_NAME.match(t) and _is_model(t)]


def _reachable(root: str) -> Iterator[str]:
    seen: set[str] = set()
    stack = [root]
    while stack:
        model = stack.pop()
        if model in seen:
            continue
        seen.add(model)
        yield model
        for type_string in _model(model).openapi_types.values():
            stack.extend(_model_refs(type_string))


def _description(cls: type[Any]) -> str:
    text = (cls.__doc__ or "").split("Attributes:")[0]
    return " ".join(text.split())


def _is_int_or_string(annotation: Any) -> bool:
    args = {a for a in _flatten_union(annotation)}
    return int in args and str in args


def _flatten_union(annotation: Any) -> Iterator[Any]:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        yield from _flatten_union(typing.get_args(annotation)[0])
    elif origin is typing.Union:
        for arg in typing.get_args(annotation):
            yield from _flatten_union(arg)
    else:
        yield annotation


def ref(name: str) -> JsonObject:
    return {"$ref": REF_PREFIX + name}


def _field_schema(model: str, json_name: str, type_string: str, annotation: Any) -> JsonObject:
    """The schema of one field of a model, from the client's type string."""
    if type_string.startswith("List["):
        inner = _field_schema(model, json_name, type_string[5:-1], None)
        meta = PATCH_METADATA.get((model, json_name), _ATOMIC)
        return {"items": inner, "type": JsonType.ARRAY.value, **meta.extensions()}
    if type_string.startswith("Dict[str, "):
        inner = _field_schema(model, json_name, type_string[10:-1], None)
        schema: JsonObject = {"additionalProperties": inner, "type": JsonType.OBJECT.value}
        if (model, json_name) in _QUANTITY_FIELDS:
            schema["additionalProperties"] = {"allOf": [ref(QUANTITY)]}
        return schema
    match type_string:
        case "str":
            if (model, json_name) in _QUANTITY_FIELDS:
                return {"allOf": [ref(QUANTITY)]}
            return {"type": JsonType.STRING.value}
        case "int":
            return {"type": JsonType.INTEGER.value}
        case "float":
            return {"format": "double", "type": JsonType.NUMBER.value}
        case "bool":
            return {"type": JsonType.BOOLEAN.value}
        case "bytes":
            return {"format": "byte", "type": JsonType.STRING.value}
        case "datetime":
            return {"allOf": [ref(MICRO_TIME if (model, json_name) in _MICRO_TIME_FIELDS else TIME)]}
        case "object":
            if annotation is not None and _is_int_or_string(annotation):
                return {"allOf": [ref(INT_OR_STRING)]}
            return {Ext.PRESERVE_UNKNOWN.value: True}
    if _is_model(type_string):
        meta = PATCH_METADATA.get((model, json_name))
        return {"allOf": [ref(definition_name(type_string))], "default": {}, **(meta.extensions() if meta else {})}
    return {}


_CONVENTIONS = "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md"
_OBJECT_METADATA = f"Standard object's metadata. More info: {_CONVENTIONS}#metadata"
_LIST_METADATA = f"Standard list metadata. More info: {_CONVENTIONS}#types-kinds"


def model_schema(model: str) -> JsonObject:
    """The component schema of one client model class."""
    cls = _model(model)
    properties: JsonObject = {}
    required: list[str] = []
    fields = getattr(cls, "model_fields", {})
    for attr, type_string in cls.openapi_types.items():
        json_name = cls.attribute_map[attr]
        info = fields.get(attr)
        schema = _field_schema(model, json_name, type_string, info.annotation if info is not None else None)
        description = getattr(info, "description", None) or ""
        if not description and json_name == "metadata" and type_string == "V1ObjectMeta":
            description = _OBJECT_METADATA
        elif not description and json_name == "metadata" and type_string == "V1ListMeta":
            description = _LIST_METADATA
        elif not description and "allOf" in schema:  # the client keeps no description for nested types
            description = _description(_model(type_string)) if _is_model(type_string) else ""
        if "allOf" in schema and "default" in schema and not (info is not None and info.is_required()):
            del schema["default"]
        if description:
            schema["description"] = description
        properties[json_name] = dict(sorted(schema.items()))
        if info is not None and info.is_required():
            required.append(json_name)
    result: JsonObject = {"description": _description(cls), "properties": properties, "type": JsonType.OBJECT.value}
    if required:
        result["required"] = required
    return result


_SCALARS: dict[str, JsonObject] = {
    TIME: {"description": "Time is a wrapper around time.Time which supports correct marshaling to YAML and JSON.",
           "format": "date-time", "type": "string"},
    MICRO_TIME: {"description": "MicroTime is version of Time with microsecond level precision.",
                 "format": "date-time", "type": "string"},
    QUANTITY: {"description": "Quantity is a fixed-point representation of a number (such as 100m, 2Gi or 4).",
               "oneOf": [{"type": "string"}, {"type": "number"}]},
    INT_OR_STRING: {"description": "IntOrString is a type that can hold an int32 or a string.",
                    "format": "int-or-string", "oneOf": [{"type": "integer"}, {"type": "string"}]},
    RAW_EXTENSION: {"description": "RawExtension is used to hold extensions in external versions.", "type": "object",
                    Ext.PRESERVE_UNKNOWN.value: True},
    f"{META}.Patch": {"description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH "
                      "request body.", "type": "object"},
}


@cache
def _all_builtin_components() -> dict[str, JsonObject]:
    components: dict[str, JsonObject] = dict(_SCALARS)
    names = _definition_names()
    for model, name in names.items():
        components[name] = model_schema(model)
    components.update(workload_api.COMPONENTS)  # 1.35 kinds the client's models no longer have
    components.update(workload_api_alpha2.COMPONENTS)  # and 1.36's
    pod_spec = components[names["V1PodSpec"]]
    pod_spec["properties"] = dict(sorted({**pod_spec["properties"], **workload_api.POD_SPEC_FIELDS}.items()))
    for gvk, model in BUILTIN_MODELS.items():
        components[names[model]][Ext.GVK.value] = [gvk.extension()]
        list_model = model + "List"
        if _is_model(list_model):
            list_name = names[list_model]
            schema = model_schema(list_model)
            schema[Ext.GVK.value] = [Gvk(gvk.group, gvk.version, gvk.kind + "List").extension()]
            components[list_name] = schema
    return components


def builtin_components() -> Mapping[str, JsonObject]:
    """Every built-in component schema, by definition name (shared: do not modify)."""
    return _all_builtin_components()


def builtin_definition(gvk: Gvk) -> str | None:
    """The definition name of a built-in kind, or ``None``."""
    if gvk == Gvk(workload_api.GROUP, workload_api.VERSION, workload_api.KIND):
        return workload_api.WORKLOAD
    if (gvk.group, gvk.version, gvk.kind) in workload_api_alpha2.DEFINITIONS:
        return workload_api_alpha2.DEFINITIONS[(gvk.group, gvk.version, gvk.kind)]
    model = BUILTIN_MODELS.get(gvk)
    return definition_name(model) if model is not None else None


# --------------------------------------------------------------------------- custom resources

_TYPE_META = {
    "apiVersion": {
        "description": "APIVersion defines the versioned schema of this representation of an object.",
        "type": "string",
    },
    "kind": {"description": "Kind is a string value representing the REST resource this object represents.",
             "type": "string"},
}


def custom_component(rt: ResourceType) -> tuple[str, JsonObject]:
    """A custom resource's definition name and component schema, from its CRD's ``openAPIV3Schema``.

    ``apiVersion``, ``kind`` and ``metadata`` (``ObjectMeta``) are filled in as the real server
    publishes them; a CRD without a schema preserves unknown fields.
    """
    schema = dict(rt.schema or {"type": "object", Ext.PRESERVE_UNKNOWN.value: True})
    properties = dict(schema.get("properties") or {})
    for name, field_schema in _TYPE_META.items():
        properties.setdefault(name, field_schema)
    properties["metadata"] = {"allOf": [ref(f"{META}.ObjectMeta")],
                              "description": "Standard object's metadata."}
    schema["properties"] = properties
    schema.setdefault("type", "object")
    schema[Ext.GVK.value] = [Gvk.of(rt).extension()]
    return custom_definition_name(rt.group, rt.version, rt.kind), schema


def custom_list_component(rt: ResourceType) -> tuple[str, JsonObject]:
    """The ``<Kind>List`` schema of a custom resource."""
    name = custom_definition_name(rt.group, rt.version, rt.kind)
    list_kind = rt.list_kind or rt.kind + "List"
    schema = {
        "description": f"{list_kind} is a list of {rt.kind}",
        "properties": {
            **_TYPE_META,
            "items": {"description": f"List of {rt.resource}.", "items": ref(name), "type": "array"},
            "metadata": {"allOf": [ref(f"{META}.ListMeta")], "description": "Standard list metadata."},
        },
        "required": ["items"],
        "type": "object",
        Ext.GVK.value: [Gvk(rt.group, rt.version, list_kind).extension()],
    }
    return custom_definition_name(rt.group, rt.version, list_kind), schema


# --------------------------------------------------------------------------- resolved views


def ref_target(schema: Mapping[str, Any]) -> str | None:
    target = schema.get("$ref")
    if isinstance(target, str) and target.startswith(REF_PREFIX):
        return target[len(REF_PREFIX):]
    return None


def references(schema: Any) -> Iterator[str]:
    """Every definition name a schema refers to (not following the references)."""
    if isinstance(schema, dict):
        target = ref_target(schema)
        if target is not None:
            yield target
        for value in schema.values():
            yield from references(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from references(value)


def closure(names: Iterable[str], components: Mapping[str, JsonObject]) -> dict[str, JsonObject]:
    """``names`` and every component they refer to, directly or not."""
    result: dict[str, JsonObject] = {}
    stack = list(names)
    while stack:
        name = stack.pop()
        if name in result or name not in components:
            continue
        result[name] = components[name]
        stack.extend(references(components[name]))
    return result


class Schema:
    """One schema with ``$ref`` and ``allOf`` resolved against its components; navigable by field.

    A field that the schema does not describe is ``None``; :attr:`open` says whether such
    fields are kept (``x-kubernetes-preserve-unknown-fields``, or a schema with no structure).
    A schema keeps the schemas of its fields, items and values once asked, so a tree that is
    walked on every write (a kind's schema, validating each request) is resolved once.
    """

    def __init__(self, raw: Mapping[str, Any], components: Mapping[str, JsonObject], name: str | None = None) -> None:
        self.raw = raw
        self.components = components
        self._name = name
        self._children: dict[tuple[str, str], Schema | None] = {}
        self.memo: dict[str, Any] = {}
        """What other modules derive from this schema, kept with it (validation's plan of it)."""

    @property
    def name(self) -> str | None:
        """The definition this schema is (or refers to), when it is one."""
        if self._name is None:
            _ = self.resolved
        return self._name

    @cached_property
    def resolved(self) -> JsonObject:
        merged: JsonObject = {}
        self._merge_into(merged, self.raw, set())
        return merged

    def _merge_into(self, merged: JsonObject, schema: Mapping[str, Any], seen: set[str]) -> None:
        target = ref_target(schema)
        if target is not None and target not in seen and target in self.components:
            if self._name is None:
                self._name = target
            self._merge_into(merged, self.components[target], seen | {target})
        for part in schema.get("allOf") or ():
            self._merge_into(merged, part, seen)
        for key, value in schema.items():  # a schema's own keys win over what it refers to
            if key == "properties":
                merged["properties"] = {**merged.get("properties", {}), **value}
            elif key not in ("$ref", "allOf"):
                merged[key] = value

    def _child(self, key: tuple[str, str], raw: Any) -> Schema | None:
        """The schema ``raw`` under ``key`` (kept: asked again, the same object)."""
        try:
            return self._children[key]
        except KeyError:
            pass
        child = Schema(raw, self.components) if isinstance(raw, Mapping) else None
        self._children[key] = child
        return child

    @property
    def type(self) -> str | None:
        value = self.resolved.get("type")
        return value if isinstance(value, str) else None

    @property
    def properties(self) -> Mapping[str, Any]:
        return self.resolved.get("properties") or {}

    def field(self, name: str) -> Schema | None:
        """The schema of property ``name``, or of any value when the object is a map."""
        raw = self.properties.get(name)
        if raw is not None:
            return self._child(("properties", name), raw)
        return self.values()

    def values(self) -> Schema | None:
        """A map's value schema (``additionalProperties``), or ``None``."""
        additional = self.resolved.get("additionalProperties")
        if additional is True:
            return self._child(("values", ""), {Ext.PRESERVE_UNKNOWN.value: True})
        return self._child(("values", ""), additional)

    def items(self) -> Schema | None:
        return self._child(("items", ""), self.resolved.get("items"))

    @property
    def preserves_unknown(self) -> bool:
        return bool(self.resolved.get(Ext.PRESERVE_UNKNOWN.value))

    @property
    def open(self) -> bool:
        """Whether fields the schema does not list are kept: preserve-unknown-fields, a map, or
        a schema with no structure at all. An ``object`` with no properties keeps none (a
        custom resource's fields are pruned so)."""
        r = self.resolved
        if self.preserves_unknown or r.get("additionalProperties") not in (None, False):
            return True
        if r.get("oneOf") or r.get("anyOf") or r.get(Ext.INT_OR_STRING.value):
            return True
        return not any(key in r for key in ("type", "properties", "items"))

    @property
    def patch_strategies(self) -> tuple[str, ...]:
        value = self.resolved.get(Ext.PATCH_STRATEGY.value) or ""
        return tuple(s for s in value.split(",") if s)

    @property
    def merge_key(self) -> str | None:
        return self.resolved.get(Ext.PATCH_MERGE_KEY.value)

    @property
    def list_type(self) -> str | None:
        return self.resolved.get(Ext.LIST_TYPE.value)

    @property
    def list_map_keys(self) -> tuple[str, ...]:
        return tuple(self.resolved.get(Ext.LIST_MAP_KEYS.value) or ())

    @property
    def description(self) -> str:
        return self.resolved.get("description") or ""

    def __repr__(self) -> str:
        return f"Schema({self.name or self.resolved.get('type')!r})"


class SchemaRegistry:
    """The schemas of the served kinds: built-ins from the client's models, custom resources
    from their CRDs. Custom schemas are rebuilt when the CRD's schema changes."""

    def __init__(self) -> None:
        self._custom: dict[Gvk, tuple[JsonObject | None, Schema]] = {}
        self._builtin: dict[str, Schema] = {}

    def schema_for(self, rt: ResourceType) -> Schema | None:
        """The schema of ``rt``'s kind; ``None`` for a kind the sandbox knows no schema of."""
        gvk = Gvk.of(rt)
        if not rt.custom:
            name = builtin_definition(gvk)
            if name is None:
                return None
            schema = self._builtin.get(name)
            if schema is None:
                schema = self._builtin[name] = Schema(ref(name), builtin_components(), name)
            return schema
        cached = self._custom.get(gvk)
        if cached is not None and (cached[0] is rt.schema or cached[0] == rt.schema):
            return cached[1]
        name, component = custom_component(rt)
        components = {**closure([f"{META}.ObjectMeta"], builtin_components()), name: component}
        schema = Schema(ref(name), components, name)
        self._custom[gvk] = (rt.schema, schema)
        return schema


def schema_for(rt: ResourceType) -> Schema | None:
    """The schema of ``rt``'s kind (see :class:`SchemaRegistry`), from a shared registry."""
    return _REGISTRY.schema_for(rt)


_REGISTRY = SchemaRegistry()
