"""Server-side printing: ``meta.k8s.io/v1`` Tables, the columns ``kubectl get`` shows.

kubectl asks the server for a Table (``Accept: application/json;as=Table;g=meta.k8s.io;v=v1``)
and prints its columns as they come, so the sandbox prints each kind as the real API server's
printers do: pods with READY and STATUS (``Terminating`` once deletion started), nodes with
their roles, deployments, jobs, daemonsets, services... Custom resources get their CRD's
``additionalPrinterColumns`` (JSONPath subset: dotted fields and ``[n]`` indexes), else
``NAME`` and ``AGE``.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from . import quantity
from .kinds import Resource, ResourceType
from .dra import claim_state
from .storage import SHORT_ACCESS_MODES, is_default_class
from .store import JsonObject, Stored

def human_duration(seconds: float) -> str:
    """An age as kubectl prints it (``45s``, ``3m20s``, ``5h``, ``2d3h``, ``400d``)."""
    s = int(seconds)
    if s < 0:
        return "<invalid>" if s < -1 else "0s"
    minutes, hours, days = s // 60, s // 3600, s // 86400
    if s < 120:
        return f"{s}s"
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    return f"{days // 365}y{days % 365}d" if days < 365 * 8 and days % 365 else f"{days // 365}y"


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    cell: Callable[[JsonObject, float], Any]
    priority: int = 0
    type: str = "string"

    def definition(self) -> JsonObject:
        fmt = "name" if self.name == "Name" else ""
        return {
            "name": self.name,
            "type": self.type,
            "format": fmt,
            "description": self.name,
            "priority": self.priority,
        }


def _age(obj: JsonObject, now: float) -> str:
    return _age_of(obj["metadata"].get("creationTimestamp"), now)


def _age_of(timestamp: str | None, now: float) -> str:
    if not timestamp:
        return "<unknown>"
    parsed = _parse_time(timestamp)
    return human_duration(now - parsed) if parsed is not None else "<unknown>"


def _parse_time(timestamp: str) -> float | None:
    try:
        return calendar.timegm(time.strptime(timestamp[:19], "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def _name(obj: JsonObject, now: float) -> str:
    return obj["metadata"]["name"]


def _pod_ready(pod: JsonObject, now: float) -> str:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return f"{sum(1 for c in statuses if c.get('ready'))}/{len(pod.get('spec', {}).get('containers') or [])}"


def _pod_status(pod: JsonObject, now: float) -> str:
    status = pod.get("status", {})
    if pod["metadata"].get("deletionTimestamp") and status.get("phase") not in ("Succeeded", "Failed"):
        return "Terminating"
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        for phase in ("waiting", "terminated"):
            if (state.get(phase) or {}).get("reason"):
                return state[phase]["reason"]
    return status.get("reason") or status.get("phase") or "Unknown"


def _pod_restarts(pod: JsonObject, now: float) -> str:
    """A string, as the printer sends it (``3``; it adds ``(5m ago)`` when a container last restarted)."""
    statuses = pod.get("status", {}).get("containerStatuses") or []
    restarts = sum(c.get("restartCount", 0) for c in statuses)
    last = max(
        (t for c in statuses if (t := ((c.get("lastState") or {}).get("terminated") or {}).get("finishedAt"))), default=None
    )
    return f"{restarts} ({_age_of(last, now)} ago)" if restarts and last else str(restarts)


def _pod_ip(pod: JsonObject, now: float) -> str:
    status = pod.get("status", {})
    ips = status.get("podIPs") or []
    return (ips[0].get("ip") if ips else status.get("podIP")) or "<none>"


def _pod_readiness_gates(pod: JsonObject, now: float) -> str:
    gates = pod.get("spec", {}).get("readinessGates") or []
    if not gates:
        return "<none>"
    conditions = {c.get("type"): c.get("status") for c in pod.get("status", {}).get("conditions") or []}
    return f"{sum(1 for g in gates if conditions.get(g.get('conditionType')) == 'True')}/{len(gates)}"


def _node_status(node: JsonObject, now: float) -> str:
    ready = next((c for c in node.get("status", {}).get("conditions") or [] if c.get("type") == "Ready"), None)
    # as kube's printer: "Ready" when True, "NotReady" otherwise (Unknown included: a node whose
    # kubelet stopped posting status); "Unknown" only when no Ready condition was ever posted
    text = "Unknown" if ready is None else ("Ready" if ready.get("status") == "True" else "NotReady")
    return text + (",SchedulingDisabled" if node.get("spec", {}).get("unschedulable") else "")


def _node_roles(node: JsonObject, now: float) -> str:
    prefix = "node-role.kubernetes.io/"
    roles = sorted(k[len(prefix) :] for k in node["metadata"].get("labels") or {} if k.startswith(prefix))
    return ",".join(roles) or "<none>"


def _node_ip(node: JsonObject, now: float) -> str:
    addresses = node.get("status", {}).get("addresses") or []
    return next((a.get("address") for a in addresses if a.get("type") == "InternalIP"), "<none>")


def _event_last_seen(event: JsonObject, now: float) -> str:
    return _age_of(
        event.get("lastTimestamp") or event.get("eventTime") or event["metadata"].get("creationTimestamp"), now
    )


def _event_object(event: JsonObject, now: float) -> str:
    involved = event.get("involvedObject") or {}
    return f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}"


def _pdb_value(key: str) -> Callable[[JsonObject, float], Any]:
    return lambda pdb, now: pdb.get("spec", {}).get(key, "N/A")


def _path(*keys: str, default: Any = "<none>") -> Callable[[JsonObject, float], Any]:
    def cell(obj: JsonObject, now: float) -> Any:
        value: Any = obj
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        return default if value in (None, "") else value

    return cell


def _ready_of(spec_key: str, status_key: str) -> Callable[[JsonObject, float], str]:
    def cell(obj: JsonObject, now: float) -> str:
        status = obj.get("status") or {}
        return f"{status.get(status_key, 0)}/{(obj.get('spec') or {}).get(spec_key, 1)}"

    return cell


def _count(*keys: str) -> Callable[[JsonObject, float], int]:
    return _path(*keys, default=0)


def _job_completions(job: JsonObject, now: float) -> str:
    spec, status = job.get("spec") or {}, job.get("status") or {}
    completions = spec.get("completions")
    succeeded = status.get("succeeded", 0)
    if completions is None:
        return f"{succeeded}/1 of {spec.get('parallelism', 1)}" if spec.get("parallelism", 1) > 1 else f"{succeeded}/1"
    return f"{succeeded}/{completions}"


def _job_status(job: JsonObject, now: float) -> str:
    conditions = {c.get("type"): c.get("status") for c in (job.get("status") or {}).get("conditions") or []}
    for kind, text in (("Failed", "Failed"), ("Complete", "Complete"), ("Suspended", "Suspended")):
        if conditions.get(kind) == "True":
            return text
    return "Running"


def _job_duration(job: JsonObject, now: float) -> str:
    status = job.get("status") or {}
    start = _parse_time(status["startTime"]) if status.get("startTime") else None
    if start is None:
        return ""
    end = _parse_time(status["completionTime"]) if status.get("completionTime") else now
    return human_duration((end or now) - start)


def _selector_text(selector: Any) -> str:
    if not isinstance(selector, dict) or not selector:
        return "<none>"
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items()))


def _service_ports(service: JsonObject, now: float) -> str:
    ports = (service.get("spec") or {}).get("ports") or []
    text = [
        f"{p.get('port')}" + (f":{p['nodePort']}" if p.get("nodePort") else "") + f"/{p.get('protocol', 'TCP')}"
        for p in ports
    ]
    return ",".join(text) or "<none>"


def _role_ref(binding: JsonObject, now: float) -> str:
    ref = binding.get("roleRef") or {}
    return f"{ref.get('kind', '')}/{ref.get('name', '')}"


def _crd_created(crd: JsonObject, now: float) -> str:
    return crd["metadata"].get("creationTimestamp", "")


def _access_modes(modes: Any) -> str:
    """``GetAccessModesAsString``: the short names in a fixed order, whatever the object's."""
    given = set(modes or [])
    return ",".join(short for mode, short in SHORT_ACCESS_MODES.items() if mode in given)


def _storage_text(raw: Any) -> str:
    try:
        return str(quantity.parse(raw)) if raw is not None else ""
    except quantity.QuantityError:
        return str(raw)


def _storage_phase(obj: JsonObject, now: float) -> str:
    return "Terminating" if obj["metadata"].get("deletionTimestamp") else (obj.get("status") or {}).get("phase", "")


def _claim_bound(claim: JsonObject) -> bool:
    return bool((claim.get("spec") or {}).get("volumeName"))


def _claim_capacity(claim: JsonObject, now: float) -> str:
    return _storage_text(((claim.get("status") or {}).get("capacity") or {}).get("storage")) if _claim_bound(claim) else ""


def _claim_modes(claim: JsonObject, now: float) -> str:
    return _access_modes((claim.get("status") or {}).get("accessModes")) if _claim_bound(claim) else ""


def _volume_claim(volume: JsonObject, now: float) -> str:
    ref = (volume.get("spec") or {}).get("claimRef")
    return f"{ref.get('namespace', '')}/{ref.get('name', '')}" if isinstance(ref, dict) else ""


def _class_name(sc: JsonObject, now: float) -> str:
    return sc["metadata"]["name"] + (" (default)" if is_default_class(sc) else "")


_NAME, _AGE = Column("Name", _name), Column("Age", _age)
_UNSET = "<unset>"
_WORKLOAD_CONTAINERS = (
    Column("Containers", lambda o, now: ",".join(c.get("name", "") for c in _template_containers(o)), priority=1),
    Column("Images", lambda o, now: ",".join(c.get("image", "") for c in _template_containers(o)), priority=1),
    Column("Selector", lambda o, now: _selector_text(((o.get("spec") or {}).get("selector") or {}).get("matchLabels")), priority=1),
)


def _template_containers(obj: JsonObject) -> list[JsonObject]:
    return ((((obj.get("spec") or {}).get("template") or {}).get("spec")) or {}).get("containers") or []
_COLUMNS: dict[Resource, tuple[Column, ...]] = {
    Resource.PODS: (
        _NAME,
        Column("Ready", _pod_ready),
        Column("Status", _pod_status),
        Column("Restarts", _pod_restarts),
        _AGE,
        # kube-apiserver's order (pkg/printers/internalversion/printers.go): the server always
        # sends the wide cells and kubectl shows the priority-1 ones under -o wide only
        Column("IP", _pod_ip, priority=1),
        Column("Node", _path("spec", "nodeName"), priority=1),
        Column("Nominated Node", _path("status", "nominatedNodeName"), priority=1),
        Column("Readiness Gates", _pod_readiness_gates, priority=1),
    ),
    Resource.NODES: (
        _NAME,
        Column("Status", _node_status),
        Column("Roles", _node_roles),
        _AGE,
        Column("Version", _path("status", "nodeInfo", "kubeletVersion", default="")),
        Column("Internal-IP", _node_ip, priority=1),
    ),
    Resource.EVENTS: (
        Column("Last Seen", _event_last_seen),
        Column("Type", _path("type", default="")),
        Column("Reason", _path("reason", default="")),
        Column("Object", _event_object),
        Column("Message", _path("message", default="")),
    ),
    Resource.NAMESPACES: (_NAME, Column("Status", _path("status", "phase", default="")), _AGE),
    Resource.LEASES: (_NAME, Column("Holder", _path("spec", "holderIdentity", default="")), _AGE),
    Resource.WORKLOADS: (_NAME, _AGE),
    Resource.DEPLOYMENTS: (
        _NAME,
        Column("Ready", _ready_of("replicas", "readyReplicas")),
        Column("Up-to-date", _count("status", "updatedReplicas"), type="integer"),
        Column("Available", _count("status", "availableReplicas"), type="integer"),
        _AGE,
        *_WORKLOAD_CONTAINERS,
    ),
    Resource.REPLICASETS: (
        _NAME,
        Column("Desired", _path("spec", "replicas", default=1), type="integer"),
        Column("Current", _count("status", "replicas"), type="integer"),
        Column("Ready", _count("status", "readyReplicas"), type="integer"),
        _AGE,
        *_WORKLOAD_CONTAINERS,
    ),
    Resource.STATEFULSETS: (_NAME, Column("Ready", _ready_of("replicas", "readyReplicas")), _AGE, *_WORKLOAD_CONTAINERS[:2]),
    Resource.DAEMONSETS: (
        _NAME,
        Column("Desired", _count("status", "desiredNumberScheduled"), type="integer"),
        Column("Current", _count("status", "currentNumberScheduled"), type="integer"),
        Column("Ready", _count("status", "numberReady"), type="integer"),
        Column("Up-to-date", _count("status", "updatedNumberScheduled"), type="integer"),
        Column("Available", _count("status", "numberAvailable"), type="integer"),
        Column(
            "Node Selector",
            lambda o, now: _selector_text((((o.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeSelector")),
        ),
        _AGE,
        *_WORKLOAD_CONTAINERS,
    ),
    Resource.JOBS: (
        _NAME,
        Column("Status", _job_status),
        Column("Completions", _job_completions),
        Column("Duration", _job_duration),
        _AGE,
        *_WORKLOAD_CONTAINERS,
    ),
    Resource.SERVICES: (
        _NAME,
        Column("Type", _path("spec", "type", default="ClusterIP")),
        Column("Cluster-IP", _path("spec", "clusterIP")),
        Column("External-IP", lambda o, now: ",".join((o.get("spec") or {}).get("externalIPs") or []) or "<none>"),
        Column("Port(s)", _service_ports),
        _AGE,
        Column("Selector", lambda o, now: _selector_text((o.get("spec") or {}).get("selector")), priority=1),
    ),
    Resource.SERVICEACCOUNTS: (_NAME, Column("Secrets", lambda o, now: len(o.get("secrets") or []), type="integer"), _AGE),
    Resource.CONFIGMAPS: (_NAME, Column("Data", lambda o, now: len(o.get("data") or {}) + len(o.get("binaryData") or {}), type="integer"), _AGE),
    Resource.SECRETS: (
        _NAME,
        Column("Type", _path("type", default="Opaque")),
        Column("Data", lambda o, now: len(o.get("data") or {}), type="integer"),
        _AGE,
    ),
    Resource.ROLES: (_NAME, Column("Created At", _crd_created)),
    Resource.CLUSTERROLES: (_NAME, Column("Created At", _crd_created)),
    Resource.ROLEBINDINGS: (_NAME, Column("Role", _role_ref), _AGE),
    Resource.CLUSTERROLEBINDINGS: (_NAME, Column("Role", _role_ref), _AGE),
    Resource.PRIORITYCLASSES: (
        _NAME,
        Column("Value", _path("value", default=0), type="integer"),
        Column("Global-Default", _path("globalDefault", default=False)),
        _AGE,
    ),
    Resource.CUSTOMRESOURCEDEFINITIONS: (_NAME, Column("Created At", _crd_created)),
    Resource.PERSISTENTVOLUMECLAIMS: (
        _NAME,
        Column("Status", _storage_phase),
        Column("Volume", _path("spec", "volumeName", default="")),
        Column("Capacity", _claim_capacity),
        Column("Access Modes", _claim_modes),
        Column("StorageClass", _path("spec", "storageClassName", default="")),
        Column("VolumeAttributesClass", _path("spec", "volumeAttributesClassName", default=_UNSET)),
        _AGE,
        Column("VolumeMode", _path("spec", "volumeMode", default=_UNSET), priority=1),
    ),
    Resource.PERSISTENTVOLUMES: (
        _NAME,
        Column("Capacity", lambda o, now: _storage_text(((o.get("spec") or {}).get("capacity") or {}).get("storage"))),
        Column("Access Modes", lambda o, now: _access_modes((o.get("spec") or {}).get("accessModes"))),
        Column("Reclaim Policy", _path("spec", "persistentVolumeReclaimPolicy", default="")),
        Column("Status", _storage_phase),
        Column("Claim", _volume_claim),
        Column("StorageClass", _path("spec", "storageClassName", default="")),
        Column("VolumeAttributesClass", _path("spec", "volumeAttributesClassName", default=_UNSET)),
        Column("Reason", _path("status", "reason", default="")),
        _AGE,
        Column("VolumeMode", _path("spec", "volumeMode", default=_UNSET), priority=1),
    ),
    Resource.STORAGECLASSES: (
        Column("Name", _class_name),
        Column("Provisioner", _path("provisioner", default="")),
        Column("ReclaimPolicy", _path("reclaimPolicy", default="Delete")),
        Column("VolumeBindingMode", _path("volumeBindingMode", default="Immediate")),
        Column("AllowVolumeExpansion", lambda o, now: bool(o.get("allowVolumeExpansion")), type="boolean"),
        _AGE,
    ),
    Resource.CSIDRIVERS: (
        _NAME,
        Column("AttachRequired", lambda o, now: bool((o.get("spec") or {}).get("attachRequired", True)), type="boolean"),
        Column("PodInfoOnMount", lambda o, now: bool((o.get("spec") or {}).get("podInfoOnMount")), type="boolean"),
        Column("StorageCapacity", lambda o, now: bool((o.get("spec") or {}).get("storageCapacity")), type="boolean"),
        Column("TokenRequests", lambda o, now: ",".join(t.get("audience", "") for t in (o.get("spec") or {}).get("tokenRequests") or []) or "<unset>"),
        Column("RequiresRepublish", lambda o, now: bool((o.get("spec") or {}).get("requiresRepublish")), type="boolean"),
        Column("Modes", lambda o, now: ",".join((o.get("spec") or {}).get("volumeLifecycleModes") or [])),
        _AGE,
    ),
    Resource.CSINODES: (_NAME, Column("Drivers", lambda o, now: len((o.get("spec") or {}).get("drivers") or []), type="integer"), _AGE),
    Resource.CSISTORAGECAPACITIES: (
        _NAME,
        Column("StorageClassName", _path("storageClassName", default="")),
        Column("Capacity", lambda o, now: _storage_text(o.get("capacity"))),
        _AGE,
    ),
    Resource.DEVICECLASSES: (_NAME, _AGE),
    Resource.RESOURCECLAIMTEMPLATES: (_NAME, _AGE),
    Resource.RESOURCECLAIMS: (_NAME, Column("State", lambda o, now: claim_state(o)), _AGE),
    Resource.RESOURCESLICES: (
        _NAME,
        Column("Node", _path("spec", "nodeName", default="")),
        Column("Driver", _path("spec", "driver", default="")),
        Column("Pool", _path("spec", "pool", "name", default="")),
        _AGE,
    ),
    Resource.PODDISRUPTIONBUDGETS: (
        _NAME,
        Column("Min Available", _pdb_value("minAvailable")),
        Column("Max Unavailable", _pdb_value("maxUnavailable")),
        Column("Allowed Disruptions", _path("status", "disruptionsAllowed", default=0), type="integer"),
        _AGE,
    ),
}


class IncludeObject(StrEnum):
    NONE = "None"
    METADATA = "Metadata"
    OBJECT = "Object"


def table(
    rt: ResourceType, items: Iterable[Stored], now: float, include: IncludeObject, meta: JsonObject | None = None
) -> JsonObject:
    """A ``meta.k8s.io/v1`` Table of ``items``, as the API server prints them for kubectl."""
    columns = _COLUMNS.get(rt.resource, (_NAME, _AGE)) if not rt.custom else _custom_columns(rt)
    rows = []
    for item in items:
        row: JsonObject = {"cells": [c.cell(item.obj, now) for c in columns]}
        if include is IncludeObject.OBJECT:
            row["object"] = item.obj
        elif include is IncludeObject.METADATA:
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": item.obj["metadata"],
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta or {},
        "columnDefinitions": [c.definition() for c in columns],
        "rows": rows,
    }




def _custom_columns(rt: ResourceType) -> tuple[Column, ...]:
    """A custom resource's ``additionalPrinterColumns`` (``NAME`` first, ``AGE`` when none given)."""
    printer = rt.printer_columns
    if not printer:
        return (_NAME, _AGE)
    columns = [_NAME]
    for spec in printer:
        path = str(spec.get("jsonPath", ""))
        kind = str(spec.get("type", "string"))
        cell = _age_at(path) if kind == "date" else _json_path(path)
        columns.append(Column(str(spec.get("name", path)), cell, int(spec.get("priority", 0)), "string" if kind == "date" else kind))
    return tuple(columns)


def _json_path(path: str) -> Callable[[JsonObject, float], Any]:
    """A cell from a simple JSONPath (``.status.phase``, ``.spec.containers[0].name``)."""
    steps: list[str | int] = []
    for part in path.strip().lstrip("$").strip(".").split("."):
        name, _, rest = part.partition("[")
        if name:
            steps.append(name)
        while rest:
            index, _, rest = rest.partition("]")
            steps.append(int(index) if index.lstrip("-").isdigit() else index.strip("'\""))
            rest = rest.lstrip("[")

    def cell(obj: JsonObject, now: float) -> Any:
        value: Any = obj
        for step in steps:
            if isinstance(step, int) and isinstance(value, list) and -len(value) <= step < len(value):
                value = value[step]
            elif isinstance(step, str) and isinstance(value, dict):
                value = value.get(step)
            else:
                return "<none>"
        return "<none>" if value is None else value

    return cell


def _age_at(path: str) -> Callable[[JsonObject, float], Any]:
    read = _json_path(path)
    return lambda obj, now: _age_of(value, now) if isinstance(value := read(obj, now), str) and value != "<none>" else "<unknown>"
