"""Dynamic Resource Allocation (``resource.k8s.io/v1``) as kube-apiserver keeps it, and the shapes
the sandbox's GPU driver publishes.

What the sandbox publishes (the contract usher's allocator may rely on; it is NVIDIA's
``dra-driver-nvidia-gpu`` layout, so users' manifests work unchanged):

- **DeviceClass** ``gpu.nvidia.com``, as NVIDIA's chart installs it: one selector,
  CEL ``device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'``.
- **One ResourceSlice per GPU node** (a node whose ``status.allocatable`` has ``nvidia.com/gpu``
  > 0), named ``<node>-gpu.nvidia.com-<suffix>`` (generateName ``<node>-gpu.nvidia.com-``), with
  ``spec.driver: gpu.nvidia.com``, ``spec.nodeName: <node>``, ``spec.pool: {name: <node>,
  generation: <n>, resourceSliceCount: 1}`` (the generation grows when the devices change), and an
  owner reference to the Node.
- **Devices** ``gpu-<minor>`` (minor = the GPU's index on the node, ``0..n-1``), each with the
  attributes NVIDIA's driver sets for a full GPU (names unqualified = in the driver's domain
  ``gpu.nvidia.com``): ``type`` ``"gpu"``, ``uuid`` (``GPU-<uuid5 of node and index>``),
  ``productName`` (the node's ``nvidia.com/gpu.product`` label), ``brand`` ``"Nvidia"``,
  ``architecture`` (from the product: ``Hopper``, ``Ampere``, ``Blackwell``, ...),
  ``cudaComputeCapability``, ``driverVersion``, ``cudaDriverVersion`` (version values),
  ``resource.kubernetes.io/pciBusID`` and ``resource.kubernetes.io/pcieRoot`` (two GPUs a root),
  and ``capacity: {memory: {value: <bytes, binary SI>}}`` from ``nvidia.com/gpu.memory`` (MiB).
- **NVLink islands** (the sandbox's own, NOT NVIDIA's: NVIDIA's driver publishes no island
  attribute for single-node NVLink): ``sandbox.usher/nvlinkIsland`` (int) = the index of the
  device's island in the node's ``usher/nvlink`` annotation (``0,1,2,3;4,5,6,7`` -> islands 0 and
  1); a node without the annotation has one island, 0. A ``matchAttribute`` of
  ``sandbox.usher/nvlinkIsland`` keeps a claim's GPUs in one island.
- **Health**: a GPU the node's ``usher/gpu-health`` annotation names unhealthy stays in the slice
  with a device taint, as NVIDIA's NVML health monitor taints it (KEP-5055):
  ``taints: [{key: gpu.nvidia.com/xid, value: "<xid>", effect: NoSchedule}]`` when the reason
  names an XID (``XID 79 ...``), else ``{key: gpu.nvidia.com/gpu-lost, effect: NoSchedule}``
  (no ``timeAdded``); the pool's generation grows. An allocator must not pick a device with a
  ``NoSchedule`` taint it does not tolerate.

This module holds the registry's side of the four kinds (DeviceClass, ResourceSlice,
ResourceClaim with its status subresource, ResourceClaimTemplate): their names and words, the
validation of the fields that matter with the real field paths and messages, and the update
rules (a claim's spec is immutable; ``status.allocation`` is set once and only cleared;
``status.reservedFor`` at most 256 entries), and a pod's side of them: its ``spec.resourceClaims``
(each naming one claim or one template) and its containers' ``resources.claims`` (each one of
those entries), in pods and in the workloads' pod templates. The resourceclaim controller is
:mod:`usher.sandbox.dra_controller`, the driver stand-in :mod:`usher.sandbox.gpu_driver`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from enum import StrEnum
from typing import Any

from .kinds import Resource, ResourceType
from .object_validation import TEMPLATE_PATHS, ErrorType, FieldError, dns_subdomain_errors, go_quote

JsonObject = dict[str, Any]

GROUP = "resource.k8s.io"
API_VERSION = f"{GROUP}/v1"

NVIDIA_DRIVER = "gpu.nvidia.com"
"""NVIDIA's DRA driver's name, also its DeviceClass's and its attributes' domain."""
NVIDIA_CLASS = "gpu.nvidia.com"
NVIDIA_CLASS_SELECTOR = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
ISLAND_ATTRIBUTE = "sandbox.usher/nvlinkIsland"
"""The sandbox's own attribute: the device's NVLink island on its node (not NVIDIA's)."""
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
"""The resourceclaim controller's annotation on a claim made from a template: the pod's entry name."""

MAX_REQUESTS = 32
MAX_SELECTORS = 32
MAX_CONSTRAINTS = 32
MAX_SUBREQUESTS = 8
MAX_RESERVED_FOR = 256
MAX_SLICE_DEVICES = 128
MAX_DEVICE_ATTRIBUTES_AND_CAPACITIES = 32
MAX_CEL_LENGTH = 10 * 1024
TAINT_EFFECTS = ("NoExecute", "NoSchedule", "None")


class AllocationMode(StrEnum):
    EXACT_COUNT = "ExactCount"
    ALL = "All"


class AttributeType(StrEnum):
    """The value fields of a DeviceAttribute: exactly one is set."""

    INT = "int"
    BOOL = "bool"
    STRING = "string"
    VERSION = "version"


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# --------------------------------------------------------------------------- reading claims


def allocation(claim: JsonObject) -> JsonObject | None:
    return (claim.get("status") or {}).get("allocation") or None


def reserved_for(claim: JsonObject) -> list[JsonObject]:
    return [r for r in (claim.get("status") or {}).get("reservedFor") or [] if isinstance(r, dict)]


def claim_state(claim: JsonObject) -> str:
    """The STATE column of ``kubectl get resourceclaims``: ``pending``, ``allocated,reserved``,
    ``deleted`` (deletion started), as the real printer joins them."""
    deleting = bool((claim.get("metadata") or {}).get("deletionTimestamp"))
    states = ["deleted"] if deleting else []
    if allocation(claim) is None:
        if not deleting:
            states.append("pending")
    else:
        states.append("allocated")
        if reserved_for(claim):
            states.append("reserved")
    return ",".join(states)


def allocated_devices(claim: JsonObject) -> list[tuple[str, str, str]]:
    """(driver, pool, device) of each device the claim's allocation holds."""
    alloc = allocation(claim) or {}
    return [(r.get("driver", ""), r.get("pool", ""), r.get("device", ""))
            for r in (alloc.get("devices") or {}).get("results") or [] if isinstance(r, dict)]


# --------------------------------------------------------------------------- defaults


def _exact_defaults(exact: Any) -> None:
    """``SetDefaults_ExactDeviceRequest``: ``allocationMode: ExactCount`` and, for it, ``count: 1``."""
    if not isinstance(exact, dict):
        return
    exact.setdefault("allocationMode", AllocationMode.EXACT_COUNT.value)
    if exact["allocationMode"] == AllocationMode.EXACT_COUNT and not exact.get("count"):
        exact["count"] = 1  # 0 is Go's unset
    for toleration in exact.get("tolerations") or []:
        if isinstance(toleration, dict) and not toleration.get("operator"):
            toleration["operator"] = "Equal"  # SetDefaults_DeviceToleration


def _claim_spec_defaults(spec: Any) -> None:
    if not isinstance(spec, dict) or not isinstance(spec.get("devices"), dict):
        return
    for request in spec["devices"].get("requests") or []:
        if not isinstance(request, dict):
            continue
        _exact_defaults(request.get("exactly"))
        for sub in request.get("firstAvailable") or []:
            _exact_defaults(sub)


def claim_defaults(claim: JsonObject, creating: bool) -> None:
    _claim_spec_defaults(claim.get("spec"))
    if creating:
        claim.pop("status", None)  # PrepareForCreate: a new claim has no status


def template_defaults(template: JsonObject, creating: bool) -> None:
    _claim_spec_defaults((template.get("spec") or {}).get("spec"))


def _keyed(resource: Resource) -> str:
    return f"{resource.value}.{GROUP}"


DEFAULTERS: dict[str, Callable[[JsonObject, bool], None]] = {
    _keyed(Resource.RESOURCECLAIMS): claim_defaults,
    _keyed(Resource.RESOURCECLAIMTEMPLATES): template_defaults,
}
"""Keyed by :attr:`ResourceType.key`, as the store keys its defaulters."""


# --------------------------------------------------------------------------- validation helpers


def _invalid(path: str, value: Any, detail: str) -> FieldError:
    shown = go_quote(value) if isinstance(value, str) else json.dumps(value)
    return FieldError(ErrorType.INVALID, path, detail, shown)


def _required(path: str, detail: str = "") -> FieldError:
    return FieldError(ErrorType.REQUIRED, path, detail)


def _too_many(path: str, have: int, limit: int) -> FieldError:
    return FieldError(ErrorType.TOO_MANY, path, f"must have at most {limit} items", str(have))


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dns_label(value: Any, path: str) -> Iterator[FieldError]:
    if not value:
        yield _required(path)
    elif not isinstance(value, str) or len(value) > 63 or not _DNS_LABEL.match(value):
        yield _invalid(path, value, "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
                       "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
                       "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")


def _dns_subdomain(value: Any, path: str) -> Iterator[FieldError]:
    if not value:
        yield _required(path)
        return
    for problem in dns_subdomain_errors(str(value)):
        yield _invalid(path, value, problem)


def _unique_names(items: list[Any], path: str) -> Iterator[FieldError]:
    seen: set[str] = set()
    for i, item in enumerate(items):
        name = item.get("name") if isinstance(item, dict) else None
        if isinstance(name, str) and name:
            if name in seen:
                yield FieldError(ErrorType.DUPLICATE, f"{path}[{i}].name", "", go_quote(name))
            seen.add(name)


def _selectors(selectors: Any, path: str) -> Iterator[FieldError]:
    items = _list(selectors)
    if len(items) > MAX_SELECTORS:
        yield _too_many(path, len(items), MAX_SELECTORS)
    for i, selector in enumerate(items):
        cel = selector.get("cel") if isinstance(selector, dict) else None
        if not isinstance(cel, dict):
            yield _required(f"{path}[{i}].cel")
            continue
        expression = cel.get("expression")
        if not expression:
            yield _required(f"{path}[{i}].cel.expression")
        elif len(expression) > MAX_CEL_LENGTH:
            yield FieldError(ErrorType.TOO_LONG, f"{path}[{i}].cel.expression",
                             f"may not be more than {MAX_CEL_LENGTH} bytes")


def _fully_qualified(value: Any, path: str) -> Iterator[FieldError]:
    """``validateFullyQualifiedName``: ``<domain>/<C identifier>``."""
    if not value:
        yield _required(path)
        return
    domain, _, name = str(value).partition("/")
    if not name:
        yield _required(path, "a fully qualified name must be used")  # the real words
        return
    for problem in dns_subdomain_errors(domain):
        yield _invalid(path, value, problem)
    if not _C_IDENTIFIER.match(name) or len(name) > 32:
        yield _invalid(path, value, "a valid C identifier must start with alphabetic character or '_', followed by "
                       "a string of alphanumeric characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', "
                       "regex used for validation is '[A-Za-z_][A-Za-z0-9_]*')")


# --------------------------------------------------------------------------- claims and templates


def _exact(exact: JsonObject, path: str) -> Iterator[FieldError]:
    """``validateExactDeviceRequest`` (and a subrequest's, which has the same fields)."""
    yield from _dns_subdomain(exact.get("deviceClassName"), f"{path}.deviceClassName")
    yield from _selectors(exact.get("selectors"), f"{path}.selectors")
    for i, toleration in enumerate(_list(exact.get("tolerations"))):
        yield from _toleration(toleration if isinstance(toleration, dict) else {}, f"{path}.tolerations[{i}]")
    mode = exact.get("allocationMode", AllocationMode.EXACT_COUNT.value)
    count = exact.get("count")
    if mode == AllocationMode.ALL:
        if count:
            yield _invalid(f"{path}.count", count, "must not be specified when allocationMode is 'All'")
    elif mode == AllocationMode.EXACT_COUNT:
        if not isinstance(count, int) or count <= 0:
            yield _invalid(f"{path}.count", count, "must be greater than zero")
    else:
        shown = ", ".join(go_quote(m.value) for m in sorted(AllocationMode, key=str))
        yield FieldError(ErrorType.NOT_SUPPORTED, f"{path}.allocationMode", f"supported values: {shown}", go_quote(str(mode)))


TOLERATION_OPERATORS = ("Equal", "Exists")


def _toleration(toleration: JsonObject, path: str) -> Iterator[FieldError]:
    """``validateDeviceToleration``: a known operator (``Exists`` with no value), a known effect
    or none (a toleration of every effect)."""
    operator, value, effect = toleration.get("operator"), toleration.get("value") or "", toleration.get("effect") or ""
    if operator == "Exists":
        if value:
            yield _invalid(f"{path}.value", value, "must be empty for operator `Exists`")
    elif not operator:
        yield _required(f"{path}.operator")
    elif operator != "Equal":
        shown = ", ".join(go_quote(o) for o in TOLERATION_OPERATORS)
        yield FieldError(ErrorType.NOT_SUPPORTED, f"{path}.operator", f"supported values: {shown}", go_quote(str(operator)))
    if effect and effect not in TAINT_EFFECTS:
        shown = ", ".join(go_quote(e) for e in TAINT_EFFECTS)
        yield FieldError(ErrorType.NOT_SUPPORTED, f"{path}.effect", f"supported values: {shown}", go_quote(str(effect)))


def _request(request: JsonObject, path: str) -> Iterator[FieldError]:
    yield from _dns_label(request.get("name"), f"{path}.name")
    exact, first = request.get("exactly"), _list(request.get("firstAvailable"))
    if exact is not None and first:
        yield FieldError(ErrorType.INVALID, path, "exactly one of `exactly` or `firstAvailable` is required, "
                         "but multiple fields are set", "null")
    elif exact is None and not first:
        yield _required(path, "exactly one of `exactly` or `firstAvailable` is required")
    if isinstance(exact, dict):
        yield from _exact(exact, f"{path}.exactly")
    if len(first) > MAX_SUBREQUESTS:
        yield _too_many(f"{path}.firstAvailable", len(first), MAX_SUBREQUESTS)
    for j, sub in enumerate(first):
        if isinstance(sub, dict):
            yield from _dns_label(sub.get("name"), f"{path}.firstAvailable[{j}].name")
            yield from _exact(sub, f"{path}.firstAvailable[{j}]")
    yield from _unique_names(first, f"{path}.firstAvailable")


def _request_names(requests: list[Any]) -> set[str]:
    """What a constraint or config may name: ``<request>`` or ``<request>/<subrequest>``."""
    names: set[str] = set()
    for request in requests:
        if not isinstance(request, dict) or not request.get("name"):
            continue
        names.add(request["name"])
        for sub in _list(request.get("firstAvailable")):
            if isinstance(sub, dict) and sub.get("name"):
                names.add(f"{request['name']}/{sub['name']}")
    return names


def validate_claim_spec(spec: Any, path: str) -> Iterator[FieldError]:
    """``validateResourceClaimSpec``: requests, constraints; ``path`` is where the spec is."""
    devices = (spec or {}).get("devices") if isinstance(spec, dict) else None
    if not isinstance(devices, dict):
        return
    requests = _list(devices.get("requests"))
    rpath = f"{path}.devices.requests"
    if len(requests) > MAX_REQUESTS:
        yield _too_many(rpath, len(requests), MAX_REQUESTS)
    for i, request in enumerate(requests):
        if isinstance(request, dict):
            yield from _request(request, f"{rpath}[{i}]")
    yield from _unique_names(requests, rpath)
    known = _request_names(requests)
    constraints = _list(devices.get("constraints"))
    cpath = f"{path}.devices.constraints"
    if len(constraints) > MAX_CONSTRAINTS:
        yield _too_many(cpath, len(constraints), MAX_CONSTRAINTS)
    for i, constraint in enumerate(constraints):
        if not isinstance(constraint, dict):
            continue
        for j, name in enumerate(_list(constraint.get("requests"))):
            if name not in known:
                yield _invalid(f"{cpath}[{i}].requests[{j}]", name, "must be the name of a request in the claim "
                               "or the name of a request and a subrequest separated by '/'")
        if constraint.get("matchAttribute") is None and constraint.get("distinctAttribute") is None:
            yield _required(f"{cpath}[{i}].matchAttribute")
        if constraint.get("matchAttribute") is not None:
            yield from _fully_qualified(constraint["matchAttribute"], f"{cpath}[{i}].matchAttribute")


def _consumer(entry: Any, path: str) -> Iterator[FieldError]:
    entry = entry if isinstance(entry, dict) else {}
    for key in ("resource", "name", "uid"):
        if not entry.get(key):
            yield _required(f"{path}.{key}")


def validate_claim_status(status: Any, spec: Any) -> Iterator[FieldError]:
    """``validateResourceClaimStatusUpdate``'s rules on the new status alone."""
    status = status if isinstance(status, dict) else {}
    reserved = _list(status.get("reservedFor"))
    if len(reserved) > MAX_RESERVED_FOR:
        yield _too_many("status.reservedFor", len(reserved), MAX_RESERVED_FOR)
    seen: set[str] = set()
    for i, entry in enumerate(reserved):
        yield from _consumer(entry, f"status.reservedFor[{i}]")
        uid = entry.get("uid") if isinstance(entry, dict) else None
        if uid and uid in seen:
            yield FieldError(ErrorType.DUPLICATE, f"status.reservedFor[{i}].uid", "", go_quote(uid))
        seen.add(uid)
    if reserved and not status.get("allocation"):
        yield FieldError(ErrorType.FORBIDDEN, "status.reservedFor", "may not be specified when `allocated` is not set")
    alloc = status.get("allocation")
    if isinstance(alloc, dict):
        known = _request_names(_list(((spec or {}).get("devices") or {}).get("requests")))
        results = _list((alloc.get("devices") or {}).get("results"))
        for i, result in enumerate(results):
            rp = f"status.allocation.devices.results[{i}]"
            result = result if isinstance(result, dict) else {}
            if result.get("request") not in known:
                yield _invalid(f"{rp}.request", result.get("request", ""), "must be the name of a request in the claim "
                               "or the name of a request and a subrequest separated by '/'")
            yield from _dns_subdomain(result.get("driver"), f"{rp}.driver")
            if not result.get("pool"):
                yield _required(f"{rp}.pool")
            yield from _dns_label(result.get("device"), f"{rp}.device")


def _immutable(old: Any, new: Any, path: str) -> Iterator[FieldError]:
    if old != new:
        yield FieldError(ErrorType.INVALID, path, "field is immutable", json.dumps(new, sort_keys=True))


def validate_claim_update(old: JsonObject, new: JsonObject) -> Iterator[FieldError]:
    """A claim's spec never changes; its allocation is written once and only cleared; a claim
    being deleted takes no new allocation or consumer."""
    yield from _immutable(old.get("spec"), new.get("spec"), "spec")
    yield from validate_claim_status(new.get("status"), new.get("spec"))
    was, now = allocation(old), allocation(new)
    if was is not None and now is not None:
        yield from _immutable(was, now, "status.allocation")
    if (new.get("metadata") or {}).get("deletionTimestamp"):
        if was is None and now is not None:
            yield FieldError(ErrorType.FORBIDDEN, "status.allocation", "new allocation not allowed while being deleted")
        old_uids = {r.get("uid") for r in reserved_for(old)}
        if any(r.get("uid") not in old_uids for r in reserved_for(new)):
            yield FieldError(ErrorType.FORBIDDEN, "status.reservedFor", "new reservation not allowed while being deleted")


# --------------------------------------------------------------------------- classes and slices


def validate_class(obj: JsonObject) -> Iterator[FieldError]:
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    yield from _selectors(spec.get("selectors"), "spec.selectors")


def _attribute(value: Any, path: str) -> Iterator[FieldError]:
    set_fields = [t for t in AttributeType if isinstance(value, dict) and t.value in value]
    if len(set_fields) != 1:
        yield _invalid(path, value, "exactly one value must be specified")


def validate_slice(obj: JsonObject) -> Iterator[FieldError]:
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    yield from _dns_subdomain(spec.get("driver"), "spec.driver")
    pool = spec.get("pool") if isinstance(spec.get("pool"), dict) else {}
    if not pool.get("name"):
        yield _required("spec.pool.name")
    if not isinstance(pool.get("resourceSliceCount"), int) or pool["resourceSliceCount"] <= 0:
        yield _invalid("spec.pool.resourceSliceCount", pool.get("resourceSliceCount", 0), "must be greater than zero")
    if isinstance(pool.get("generation"), int) and pool["generation"] < 0:
        yield _invalid("spec.pool.generation", pool["generation"], "must be greater than or equal to 0")
    chosen = [k for k in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection") if spec.get(k)]
    if len(chosen) != 1:
        yield FieldError(ErrorType.REQUIRED if not chosen else ErrorType.INVALID, "spec",
                         "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"
                         + ("" if not chosen else ", but multiple fields are set"), None if not chosen else "null")
    devices = _list(spec.get("devices"))
    if len(devices) > MAX_SLICE_DEVICES:
        yield _too_many("spec.devices", len(devices), MAX_SLICE_DEVICES)
    for i, device in enumerate(devices):
        device = device if isinstance(device, dict) else {}
        dpath = f"spec.devices[{i}]"
        yield from _dns_label(device.get("name"), f"{dpath}.name")
        attributes = device.get("attributes") if isinstance(device.get("attributes"), dict) else {}
        capacity = device.get("capacity") if isinstance(device.get("capacity"), dict) else {}
        for name, value in attributes.items():
            yield from _attribute(value, f"{dpath}.attributes[{go_quote(name)}]")
        for t, taint in enumerate(_list(device.get("taints"))):
            taint = taint if isinstance(taint, dict) else {}
            if not taint.get("key"):
                yield _required(f"{dpath}.taints[{t}].key")
            if taint.get("effect") not in TAINT_EFFECTS:
                shown = ", ".join(go_quote(e) for e in TAINT_EFFECTS)
                yield FieldError(ErrorType.NOT_SUPPORTED if taint.get("effect") else ErrorType.REQUIRED,
                                 f"{dpath}.taints[{t}].effect", f"supported values: {shown}" if taint.get("effect") else "",
                                 go_quote(str(taint.get("effect"))) if taint.get("effect") else None)
        if len(attributes) + len(capacity) > MAX_DEVICE_ATTRIBUTES_AND_CAPACITIES:
            yield FieldError(ErrorType.TOO_MANY, dpath, "the total number of attributes and capacities must not exceed "
                             f"{MAX_DEVICE_ATTRIBUTES_AND_CAPACITIES}", str(len(attributes) + len(capacity)))
    yield from _unique_names(devices, "spec.devices")


def validate_slice_update(old: JsonObject, new: JsonObject) -> Iterator[FieldError]:
    yield from validate_slice(new)
    for key in ("nodeName", "driver"):
        yield from _immutable((old.get("spec") or {}).get(key), (new.get("spec") or {}).get(key), f"spec.{key}")


# --------------------------------------------------------------------------- pods


def validate_pod_claims(spec: Any, path: str) -> Iterator[FieldError]:
    """A pod spec's ``resourceClaims`` (``validatePodResourceClaim``) and its containers'
    ``resources.claims`` (``validateResourceClaimNames``): each entry named once, naming exactly
    one of a claim or a template; each container claim one of the pod's entries."""
    if not isinstance(spec, dict):
        return
    entries = _list(spec.get("resourceClaims"))
    names: set[str] = set()
    for i, entry in enumerate(entries):
        entry = entry if isinstance(entry, dict) else {}
        epath = f"{path}.resourceClaims[{i}]"
        name = entry.get("name")
        if not name:
            yield _required(f"{epath}.name")
        elif name in names:
            yield FieldError(ErrorType.DUPLICATE, f"{epath}.name", "", go_quote(name))
        else:
            yield from _dns_label(name, f"{epath}.name")
            names.add(name)
        shown = json.dumps(entry, sort_keys=True)
        has_claim, has_template = entry.get("resourceClaimName") is not None, entry.get("resourceClaimTemplateName") is not None
        if has_claim and has_template:
            yield FieldError(ErrorType.INVALID, epath, "at most one of `resourceClaimName` or "
                             "`resourceClaimTemplateName` may be specified", shown)
        elif not has_claim and not has_template:
            yield FieldError(ErrorType.INVALID, epath, "must specify one of: `resourceClaimName`, "
                             "`resourceClaimTemplateName`", shown)
        for key in ("resourceClaimName", "resourceClaimTemplateName"):
            if entry.get(key) is not None:
                for problem in dns_subdomain_errors(str(entry[key])):
                    yield _invalid(f"{epath}.{key}", entry[key], problem)
    listed = ", ".join(sorted(names))
    for group in ("initContainers", "containers"):
        for c, container in enumerate(_list(spec.get(group))):
            resources = container.get("resources") if isinstance(container, dict) else None
            claims = _list(resources.get("claims")) if isinstance(resources, dict) else []
            for k, claim in enumerate(claims):
                cname = claim.get("name") if isinstance(claim, dict) else None
                cpath = f"{path}.{group}[{c}].resources.claims[{k}]"
                if not cname:
                    yield _required(cpath)
                elif cname not in names:
                    detail = "must be one of the names in pod.spec.resourceClaims" + (
                        f": {listed}" if names else " which is empty")
                    yield FieldError(ErrorType.NOT_FOUND, cpath, detail, go_quote(cname))


# --------------------------------------------------------------------------- entry points


def validate(rt: ResourceType, obj: JsonObject) -> list[FieldError]:
    """What kube-apiserver's validation of a DRA kind finds on create (nothing for other kinds)."""
    if rt.custom:
        return []
    if rt.resource == Resource.PODS:
        return list(validate_pod_claims(obj.get("spec"), "spec"))
    if rt.resource in TEMPLATE_PATHS:
        template: Any = obj
        for key in TEMPLATE_PATHS[rt.resource]:
            template = template.get(key) if isinstance(template, dict) else None
        where = ".".join(TEMPLATE_PATHS[rt.resource])
        return list(validate_pod_claims((template or {}).get("spec") if isinstance(template, dict) else None,
                                        f"{where}.spec"))
    if rt.group != GROUP:
        return []
    if rt.resource == Resource.RESOURCECLAIMS:
        return [*validate_claim_spec(obj.get("spec"), "spec"), *validate_claim_status(obj.get("status"), obj.get("spec"))]
    if rt.resource == Resource.RESOURCECLAIMTEMPLATES:
        return list(validate_claim_spec((obj.get("spec") or {}).get("spec"), "spec.spec"))
    if rt.resource == Resource.DEVICECLASSES:
        return list(validate_class(obj))
    if rt.resource == Resource.RESOURCESLICES:
        return list(validate_slice(obj))
    return []


def validate_update(rt: ResourceType, old: JsonObject, new: JsonObject) -> list[FieldError]:
    """What kube-apiserver's update validation of a DRA kind finds (nothing for other kinds)."""
    if rt.custom or rt.group != GROUP:
        return []
    if rt.resource == Resource.RESOURCECLAIMS:
        return list(validate_claim_update(old, new))
    if rt.resource == Resource.RESOURCECLAIMTEMPLATES:
        return [*_immutable(old.get("spec"), new.get("spec"), "spec"),
                *validate_claim_spec((new.get("spec") or {}).get("spec"), "spec.spec")]
    if rt.resource == Resource.DEVICECLASSES:
        return list(validate_class(new))
    if rt.resource == Resource.RESOURCESLICES:
        return list(validate_slice_update(old, new))
    return []
