"""The kinds the sandbox serves: built-in resources, and custom ones registered from CRDs.

A :class:`ResourceType` says what the API knows of one resource in one group version: its
plural, kind, scope, short names, subresources and field selectors. :data:`BUILTIN_TYPES` lists
what a small real cluster serves to a batch scheduler and its users: the core kinds, apps,
batch, RBAC, policy, coordination, scheduling, admission, networking, storage (claims, volumes,
classes, CSI nodes, drivers and capacities), Dynamic Resource Allocation (device classes, resource
slices, claims and claim templates) and the CRD kind itself.
:class:`Catalogue` is the live registry a store serves from: the built-ins plus one type per
served version of every ``CustomResourceDefinition`` created, removed again with the CRD.

Storage is per *group resource* (:attr:`ResourceType.key`, ``pods``,
``jobs.batch``, ``pytorchjobs.kubeflow.org``): every served version of a CRD shares one table,
as the real server stores custom resources once whatever version wrote them (conversion
strategy ``None`` changes nothing but ``apiVersion``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

JsonObject = dict[str, Any]


class Resource(StrEnum):
    """The built-in resources, by their plural (URL) name."""

    PODS = "pods"
    NODES = "nodes"
    NAMESPACES = "namespaces"
    CONFIGMAPS = "configmaps"
    SECRETS = "secrets"
    SERVICES = "services"
    SERVICEACCOUNTS = "serviceaccounts"
    ENDPOINTS = "endpoints"
    EVENTS = "events"
    LEASES = "leases"
    PODDISRUPTIONBUDGETS = "poddisruptionbudgets"
    PODGROUPS = "podgroups"
    WORKLOADS = "workloads"
    DEPLOYMENTS = "deployments"
    REPLICASETS = "replicasets"
    DAEMONSETS = "daemonsets"
    STATEFULSETS = "statefulsets"
    JOBS = "jobs"
    ROLES = "roles"
    CLUSTERROLES = "clusterroles"
    ROLEBINDINGS = "rolebindings"
    CLUSTERROLEBINDINGS = "clusterrolebindings"
    PRIORITYCLASSES = "priorityclasses"
    CUSTOMRESOURCEDEFINITIONS = "customresourcedefinitions"
    NETWORKPOLICIES = "networkpolicies"
    VALIDATINGADMISSIONPOLICIES = "validatingadmissionpolicies"
    VALIDATINGADMISSIONPOLICYBINDINGS = "validatingadmissionpolicybindings"
    PERSISTENTVOLUMECLAIMS = "persistentvolumeclaims"
    PERSISTENTVOLUMES = "persistentvolumes"
    STORAGECLASSES = "storageclasses"
    CSINODES = "csinodes"
    CSIDRIVERS = "csidrivers"
    CSISTORAGECAPACITIES = "csistoragecapacities"
    DEVICECLASSES = "deviceclasses"
    RESOURCESLICES = "resourceslices"
    RESOURCECLAIMS = "resourceclaims"
    RESOURCECLAIMTEMPLATES = "resourceclaimtemplates"


class Category(StrEnum):
    ALL = "all"


@dataclass(frozen=True, slots=True)
class ResourceType:
    """What the API knows about one resource in one group version: its kind and behaviour."""

    resource: str
    """The plural; a :class:`Resource` member for the built-ins."""
    group: str
    version: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    status_subresource: bool = False
    tracks_generation: bool = False
    custom: bool = False
    """A custom resource: list items keep ``kind`` and ``apiVersion`` (typed lists drop them)."""
    fields: Mapping[str, str] = field(default_factory=dict)
    """Field selector labels beyond ``metadata.name``/``metadata.namespace``, each to its dotted path."""
    indexed_field: str | None = None
    """One field label whose values are indexed, for cheap equality field selectors."""
    categories: tuple[str, ...] = ()
    singular: str = ""
    list_kind: str = ""
    verbs: tuple[str, ...] = ("create", "delete", "get", "list", "patch", "update", "watch")
    printer_columns: tuple[JsonObject, ...] = field(default=(), compare=False)
    """A custom resource's ``additionalPrinterColumns``."""
    schema: JsonObject | None = field(default=None, compare=False)
    """A custom resource's ``openAPIV3Schema`` (for validation and OpenAPI); ``None`` for built-ins."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        """``pods`` or ``leases.coordination.k8s.io``: how error messages name the resource."""
        return f"{self.resource}.{self.group}" if self.group else str(self.resource)

    @property
    def key(self) -> str:
        """Where its objects are stored: one table per group resource, whatever the version."""
        return self.group_resource

    @property
    def singular_name(self) -> str:
        return self.singular or self.kind.lower()

    def field_path(self, label: str) -> str | None:
        if label in ("metadata.name", "metadata.namespace"):
            return label
        return self.fields.get(label)


_POD_FIELDS = {
    "spec.nodeName": "spec.nodeName",
    "spec.schedulerName": "spec.schedulerName",
    "spec.restartPolicy": "spec.restartPolicy",
    "spec.serviceAccountName": "spec.serviceAccountName",
    "spec.hostNetwork": "spec.hostNetwork",
    "status.phase": "status.phase",
    "status.podIP": "status.podIP",
    "status.nominatedNodeName": "status.nominatedNodeName",
}
_EVENT_FIELDS = {
    f"involvedObject.{name}": f"involvedObject.{name}"
    for name in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
} | {"reason": "reason", "type": "type", "source": "source.component", "reportingComponent": "reportingComponent"}

_ALL = (Category.ALL.value,)
_RBAC = "rbac.authorization.k8s.io"
_STORAGE = "storage.k8s.io"
_RESOURCE = "resource.k8s.io"

BUILTIN_TYPES: tuple[ResourceType, ...] = (
    ResourceType(
        Resource.PODS,
        "",
        "v1",
        "Pod",
        True,
        ("po",),
        status_subresource=True,
        tracks_generation=True,
        fields=_POD_FIELDS,
        indexed_field="spec.nodeName",
        categories=_ALL,
    ),
    ResourceType(
        Resource.NODES,
        "",
        "v1",
        "Node",
        False,
        ("no",),
        status_subresource=True,
        fields={"spec.unschedulable": "spec.unschedulable"},
    ),
    ResourceType(
        Resource.NAMESPACES,
        "",
        "v1",
        "Namespace",
        False,
        ("ns",),
        status_subresource=True,
        fields={"status.phase": "status.phase"},
    ),
    ResourceType(Resource.CONFIGMAPS, "", "v1", "ConfigMap", True, ("cm",)),
    ResourceType(Resource.SECRETS, "", "v1", "Secret", True, fields={"type": "type"}),
    ResourceType(Resource.SERVICES, "", "v1", "Service", True, ("svc",), status_subresource=True, categories=_ALL),
    ResourceType(Resource.SERVICEACCOUNTS, "", "v1", "ServiceAccount", True, ("sa",)),
    ResourceType(Resource.ENDPOINTS, "", "v1", "Endpoints", True, ("ep",), singular="endpoints"),
    ResourceType(Resource.EVENTS, "", "v1", "Event", True, ("ev",), fields=_EVENT_FIELDS),
    ResourceType(Resource.LEASES, "coordination.k8s.io", "v1", "Lease", True),
    ResourceType(
        Resource.PODDISRUPTIONBUDGETS,
        "policy",
        "v1",
        "PodDisruptionBudget",
        True,
        ("pdb",),
        status_subresource=True,
        tracks_generation=True,
    ),
    ResourceType(
        Resource.PODGROUPS,
        "scheduling.x-k8s.io",
        "v1alpha1",
        "PodGroup",
        True,
        ("pg", "pgs"),
        status_subresource=True,
        tracks_generation=True,
        custom=True,
    ),
    *(
        ResourceType(
            resource,
            "apps",
            "v1",
            kind,
            True,
            short,
            status_subresource=True,
            tracks_generation=True,
            categories=_ALL,
        )
        for resource, kind, short in (
            (Resource.DEPLOYMENTS, "Deployment", ("deploy",)),
            (Resource.REPLICASETS, "ReplicaSet", ("rs",)),
            (Resource.DAEMONSETS, "DaemonSet", ("ds",)),
            (Resource.STATEFULSETS, "StatefulSet", ("sts",)),
        )
    ),
    ResourceType(
        Resource.JOBS, "batch", "v1", "Job", True, status_subresource=True, tracks_generation=True, categories=_ALL
    ),
    ResourceType(Resource.ROLES, _RBAC, "v1", "Role", True),
    ResourceType(Resource.CLUSTERROLES, _RBAC, "v1", "ClusterRole", False),
    ResourceType(Resource.ROLEBINDINGS, _RBAC, "v1", "RoleBinding", True),
    ResourceType(Resource.CLUSTERROLEBINDINGS, _RBAC, "v1", "ClusterRoleBinding", False),
    ResourceType(Resource.PRIORITYCLASSES, "scheduling.k8s.io", "v1", "PriorityClass", False, ("pc",)),
    ResourceType(Resource.WORKLOADS, "scheduling.k8s.io", "v1alpha1", "Workload", True, tracks_generation=True),
    ResourceType(
        Resource.CUSTOMRESOURCEDEFINITIONS,
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        False,
        ("crd", "crds"),
        status_subresource=True,
        tracks_generation=True,
    ),
    ResourceType(Resource.NETWORKPOLICIES, "networking.k8s.io", "v1", "NetworkPolicy", True, ("netpol",), tracks_generation=True),
    ResourceType(
        Resource.VALIDATINGADMISSIONPOLICIES,
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicy",
        False,
        status_subresource=True,
        tracks_generation=True,
    ),
    ResourceType(
        Resource.VALIDATINGADMISSIONPOLICYBINDINGS,
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicyBinding",
        False,
        tracks_generation=True,
    ),
    ResourceType(
        Resource.PERSISTENTVOLUMECLAIMS, "", "v1", "PersistentVolumeClaim", True, ("pvc",), status_subresource=True,
    ),
    ResourceType(
        Resource.PERSISTENTVOLUMES, "", "v1", "PersistentVolume", False, ("pv",), status_subresource=True,
    ),
    ResourceType(Resource.STORAGECLASSES, _STORAGE, "v1", "StorageClass", False, ("sc",)),
    ResourceType(Resource.CSINODES, _STORAGE, "v1", "CSINode", False),
    ResourceType(Resource.CSIDRIVERS, _STORAGE, "v1", "CSIDriver", False),
    ResourceType(Resource.CSISTORAGECAPACITIES, _STORAGE, "v1", "CSIStorageCapacity", True),
    # Dynamic Resource Allocation (sandbox/dra.py): v1 since 1.34
    ResourceType(Resource.DEVICECLASSES, _RESOURCE, "v1", "DeviceClass", False, tracks_generation=True),
    ResourceType(
        Resource.RESOURCESLICES, _RESOURCE, "v1", "ResourceSlice", False,
        fields={"spec.nodeName": "spec.nodeName", "spec.driver": "spec.driver"}, tracks_generation=True,
    ),
    ResourceType(Resource.RESOURCECLAIMS, _RESOURCE, "v1", "ResourceClaim", True, status_subresource=True),
    ResourceType(Resource.RESOURCECLAIMTEMPLATES, _RESOURCE, "v1", "ResourceClaimTemplate", True),
)

RESOURCE_TYPES: dict[Resource, ResourceType] = {Resource(rt.resource): rt for rt in BUILTIN_TYPES}
"""The built-in types by plural (each plural is unique among them)."""


class UnknownResource(LookupError):
    """A resource name the catalogue does not serve."""


def crd_types(crd: JsonObject) -> list[ResourceType]:
    """One type per served version of a CustomResourceDefinition (the storage version first)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    versions = sorted(
        (v for v in spec.get("versions") or [] if v.get("served", True)), key=lambda v: not v.get("storage", False)
    )
    types = []
    for version in versions:
        subresources = version.get("subresources") or {}
        types.append(
            ResourceType(
                names.get("plural", ""),
                spec.get("group", ""),
                version.get("name", ""),
                names.get("kind", ""),
                spec.get("scope", "Namespaced") == "Namespaced",
                tuple(names.get("shortNames") or ()),
                status_subresource="status" in subresources,
                tracks_generation=True,
                custom=True,
                categories=tuple(names.get("categories") or ()),
                singular=names.get("singular", ""),
                list_kind=names.get("listKind", ""),
                schema=(version.get("schema") or {}).get("openAPIV3Schema"),
                printer_columns=tuple(version.get("additionalPrinterColumns") or ()),
            )
        )
    return types


class Catalogue:
    """The types a store serves right now: the built-ins and the registered CRDs' versions."""

    def __init__(self, builtins: Iterable[ResourceType] = BUILTIN_TYPES) -> None:
        self._by_version: dict[str, list[ResourceType]] = {}
        self._storage: dict[str, ResourceType] = {}
        self._by_plural: dict[str, list[ResourceType]] = {}
        for rt in builtins:
            self._add(rt)

    def _add(self, rt: ResourceType) -> None:
        self._by_version.setdefault(rt.api_version, []).append(rt)
        if rt.key not in self._storage:
            self._storage[rt.key] = rt
            self._by_plural.setdefault(rt.resource, []).append(rt)

    def register(self, types: list[ResourceType]) -> ResourceType | None:
        """Serve ``types`` (one group resource's versions); return the storage type, or ``None``."""
        if not types:
            return None
        self.unregister(types[0].key)
        for rt in types:
            self._add(rt)
        return self._storage[types[0].key]

    def unregister(self, key: str) -> None:
        rt = self._storage.pop(key, None)
        if rt is None:
            return
        self._by_plural[rt.resource].remove(rt)
        if not self._by_plural[rt.resource]:
            del self._by_plural[rt.resource]
        for version, types in list(self._by_version.items()):
            types[:] = [t for t in types if t.key != key]
            if not types:
                del self._by_version[version]

    def storage(self, resource: str | ResourceType) -> ResourceType:
        """The storage type of ``resource``: a type, a unique plural, or ``plural.group``."""
        if isinstance(resource, ResourceType):
            return self._storage.get(resource.key, resource)
        found = self._storage.get(str(resource))
        if found is not None:
            return found
        candidates = self._by_plural.get(str(resource), [])
        if len(candidates) > 1:
            # a CRD's plural a built-in has too (Volcano's podgroups beside scheduler-plugins'): the built-in
            candidates = [c for c in candidates if any(c is b for b in BUILTIN_TYPES)] or candidates
        if len(candidates) != 1:
            raise UnknownResource(str(resource))
        return candidates[0]

    def storage_types(self) -> Iterator[ResourceType]:
        return iter(list(self._storage.values()))

    def versions(self) -> dict[str, list[ResourceType]]:
        """Every served group version and its types."""
        return {v: list(types) for v, types in self._by_version.items()}

    def in_version(self, api_version: str) -> list[ResourceType]:
        return list(self._by_version.get(api_version, ()))
