"""What usher reads of Dynamic Resource Allocation (``resource.k8s.io/v1``), parsed once.

A pod's ``spec.resourceClaims`` name a ResourceClaim, or a ResourceClaimTemplate from which the
resourceclaim controller makes one claim per pod (its name in ``status.resourceClaimStatuses``).
A claim's ``spec.devices.requests[]`` ask devices of a DeviceClass; usher allocates GPUs of
NVIDIA's class (``gpu.nvidia.com``, driver ``gpu.nvidia.com``, devices ``gpu-<minor>`` published
in ResourceSlices) and nothing else. Each field of the API is read here or refused here with its
field path (``Request.problems``), never ignored: a pod whose claim asks what usher does not
implement stays pending with that reason instead of being placed where it never starts.

Plain records and parsers only (no I/O, no caches: ``index`` keeps the objects).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ..taints import Taint, TaintEffect, Toleration, parse_device_tolerations, untolerated

#: the API group and version usher reads and writes
GROUP = "resource.k8s.io"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
#: NVIDIA's DeviceClass and driver (kubernetes-sigs/dra-driver-nvidia-gpu name both so)
GPU_CLASS = "gpu.nvidia.com"
GPU_DRIVER = "gpu.nvidia.com"
#: a device of NVIDIA's driver is ``gpu-<minor>``; usher's GPU index is the minor
DEVICE_PREFIX = "gpu-"
#: the most pods a claim may be reserved for (the API's limit on ``status.reservedFor``)
RESERVED_FOR_MAX = 256


class DraKind(StrEnum):
    """The kinds usher watches."""

    CLAIM = "ResourceClaim"
    TEMPLATE = "ResourceClaimTemplate"
    CLASS = "DeviceClass"
    SLICE = "ResourceSlice"


#: where each kind is listed and watched
PATHS: dict[DraKind, str] = {
    DraKind.CLAIM: f"/apis/{API_VERSION}/resourceclaims",
    DraKind.TEMPLATE: f"/apis/{API_VERSION}/resourceclaimtemplates",
    DraKind.CLASS: f"/apis/{API_VERSION}/deviceclasses",
    DraKind.SLICE: f"/apis/{API_VERSION}/resourceslices",
}


class AllocationMode(StrEnum):
    EXACT_COUNT = "ExactCount"
    ALL = "All"


#: the fields of ``exactly`` usher reads; any other set field is refused
_EXACT_READ = {"deviceClassName", "selectors", "allocationMode", "count", "tolerations"}
#: the namespace label without which the API server refuses a claim that asks admin access (and
#: usher gives it none: ``dra_pods.check_admin_access``)
ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"


@dataclass(frozen=True, slots=True)
class Selector:
    """One CEL selector and where it was written (``...selectors[0].cel.expression``)."""

    expression: str
    path: str


#: the device taint effects that keep a claim that does not tolerate them off a device (a taint with
#: effect ``None`` only says something: nobody is kept off)
KEEPING_OFF = (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE)


@dataclass(frozen=True, slots=True)
class Request:
    """One request of a claim: ``count`` devices of ``device_class`` (or all that match)."""

    name: str
    device_class: str
    mode: AllocationMode
    count: int
    selectors: tuple[Selector, ...]
    path: str
    #: ``firstAvailable``: the subrequests tried in this order on a node, each named
    #: ``<request>/<subrequest>`` (the name its allocation result carries); empty for ``exactly``
    alternatives: tuple[Request, ...] = ()
    #: ``exactly.adminAccess``: access to devices whether or not others hold them (monitoring,
    #: diagnostics), in a namespace its operators labelled for it; not the pod's GPUs
    admin: bool = False
    #: the device taints it tolerates (a burn-in test on a GPU its health monitor tainted); a
    #: device toleration matches a device taint as a pod's matches a node's (``taints``)
    tolerations: tuple[Toleration, ...] = ()

    def may_use(self, device: Device) -> bool:
        """Whether every taint that keeps claims off ``device`` is one this request tolerates for
        ever (one tolerated for ``tolerationSeconds`` only evicts the pod then: as for nodes)."""
        return untolerated(self.tolerations, device.taints) is None


def attribute_value(device: "Device", domain: str, name: str) -> Any:
    """A device's value of the attribute ``domain/name`` (None: it has none)."""
    return (device.attributes.get(domain) or {}).get(name)


@dataclass(frozen=True, slots=True)
class MatchAttribute:
    """``constraints[].matchAttribute``: the devices of ``requests`` (empty: all the claim's)
    share one value of ``attribute`` (``domain/name``), e.g. one PCIe root or NVLink island."""

    requests: tuple[str, ...]
    domain: str
    name: str

    def value(self, device: "Device") -> Any:
        return attribute_value(device, self.domain, self.name)


@dataclass(frozen=True, slots=True)
class DistinctAttribute:
    """``constraints[].distinctAttribute``: each device of ``requests`` (empty: all the claim's)
    has a value of ``domain/name`` no other of them has (two GPUs behind two PCIe roots); a
    device without the attribute serves none of them."""

    requests: tuple[str, ...]
    domain: str
    name: str

    def value(self, device: "Device") -> Any:
        return attribute_value(device, self.domain, self.name)

    def covers(self, request: str) -> bool:
        """Whether the devices given for ``request`` (``req`` or ``req/sub``) are bound by it."""
        return not self.requests or request.split("/", 1)[0] in self.requests


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    """A claim's (or a template's) device requests, and what usher cannot honour in it."""

    requests: tuple[Request, ...] = ()
    #: ``devices.config`` entries, copied into the allocation as the scheduler does (FromClaim)
    config: tuple[dict[str, Any], ...] = ()
    problems: tuple[str, ...] = ()
    constraints: tuple[MatchAttribute | DistinctAttribute, ...] = ()


@dataclass(frozen=True, slots=True)
class Device:
    """One device a ResourceSlice publishes on a node."""

    name: str
    driver: str
    pool: str
    node: str
    #: ``domain -> name -> value`` (unqualified names are the driver's domain)
    attributes: dict[str, dict[str, Any]] = field(default_factory=dict, hash=False, compare=False)
    #: ``domain -> name -> quantity text``
    capacity: dict[str, dict[str, str]] = field(default_factory=dict, hash=False, compare=False)
    #: its ``NoSchedule`` and ``NoExecute`` taints (an unhealthy GPU's): given only to a request
    #: that tolerates each (``Request.may_use``); ``None`` effects keep nobody off
    taints: tuple[Taint, ...] = ()

    @property
    def index(self) -> int | None:
        """usher's GPU index for the device (its minor), None for a name not ``gpu-<n>``."""
        rest = self.name.removeprefix(DEVICE_PREFIX)
        return int(rest) if rest != self.name and rest.isdigit() else None


def device_name(index: int) -> str:
    return f"{DEVICE_PREFIX}{index}"


def parse_claim_spec(spec: Any, path: str) -> ClaimSpec:
    """A ResourceClaimSpec (``path`` names it: ``ResourceClaim default/x spec``), never raising."""
    problems: list[str] = []
    if not isinstance(spec, dict):
        return ClaimSpec(problems=(f"{path}: not an object",))
    devices = spec.get("devices") or {}
    if not isinstance(devices, dict):
        return ClaimSpec(problems=(f"{path}.devices: not an object",))
    requests: list[Request] = []
    for i, raw in enumerate(devices.get("requests") or []):
        request = _request(raw, f"{path}.devices.requests[{i}]", problems)
        if request is not None:
            requests.append(request)
    constraints = []
    names = {r.name for r in requests}
    subrequests = {a.name for r in requests for a in r.alternatives}
    for i, raw in enumerate(devices.get("constraints") or []):
        where = f"{path}.devices.constraints[{i}]"
        if not isinstance(raw, dict):
            problems.append(f"{where}: a constraint is an object")
            continue
        field_name = "distinctAttribute" if raw.get("distinctAttribute") is not None else "matchAttribute"
        if raw.get("distinctAttribute") is not None and raw.get("matchAttribute") is not None:
            problems.append(f"{where}: exactly one of matchAttribute and distinctAttribute, not both")
            continue
        attribute = raw.get(field_name)
        domain, _, name = str(attribute or "").rpartition("/")
        if not isinstance(attribute, str) or not domain or not name:
            problems.append(f"{where}.{field_name}: a fully qualified attribute name (domain/name) is required, "
                            f"not {attribute!r}")
            continue
        wanted = tuple(raw.get("requests") or ())
        for j, r in enumerate(wanted):
            if r in subrequests:
                problems.append(f"{where}.requests[{j}]: usher does not implement a constraint on one subrequest "
                                f"({r!r}) yet; name the request ({r.split('/')[0]!r}), whichever alternative serves it")
            elif r not in names:
                problems.append(f"{where}.requests[{j}]: {r!r} is not a request of the claim")
        kind = DistinctAttribute if field_name == "distinctAttribute" else MatchAttribute
        constraints.append(kind(wanted, domain, name))
    config = []
    for i, raw in enumerate(devices.get("config") or []):
        if not isinstance(raw, dict) or not isinstance(raw.get("opaque"), dict):
            problems.append(f"{path}.devices.config[{i}]: usher copies only opaque driver config")
            continue
        config.append(raw)
    return ClaimSpec(tuple(requests), tuple(config), tuple(problems), tuple(constraints))


def _request(raw: Any, path: str, problems: list[str]) -> Request | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        problems.append(f"{path}.name: a request needs a name")
        return None
    if raw.get("firstAvailable"):
        return _alternatives(raw["name"], raw["firstAvailable"], f"{path}.firstAvailable", path, problems)
    exact = raw.get("exactly")
    if not isinstance(exact, dict):
        problems.append(f"{path}.exactly: required (usher reads requests of one device class)")
        return None
    return _exact(raw["name"], exact, f"{path}.exactly", path, problems, read=_EXACT_READ | {"adminAccess"})


def _alternatives(name: str, subs: Any, where: str, path: str, problems: list[str]) -> Request | None:
    """``firstAvailable``: each subrequest read as an exact request; usher counts a pod's GPUs
    once, whatever node it lands on, so every alternative must ask the same count."""
    if not isinstance(subs, list):
        problems.append(f"{where}: a list of subrequests is required")
        return None
    alternatives = []
    for j, sub in enumerate(subs):
        if not isinstance(sub, dict) or not isinstance(sub.get("name"), str):
            problems.append(f"{where}[{j}].name: a subrequest needs a name")
            return None
        found = _exact(f"{name}/{sub['name']}", sub, f"{where}[{j}]", path, problems, read=_EXACT_READ | {"name"})
        if found is None:
            return None
        alternatives.append(found)
    if any(a.mode != AllocationMode.EXACT_COUNT for a in alternatives) or len({a.count for a in alternatives}) > 1:
        counts = ", ".join("All" if a.mode == AllocationMode.ALL else str(a.count) for a in alternatives)
        problems.append(f"{where}: usher implements alternatives only when each asks the same count of devices "
                        f"(here {counts}): it counts a pod's GPUs in quota and placement once, whatever node it lands on")
        return None
    first = alternatives[0]
    return Request(name, first.device_class, AllocationMode.EXACT_COUNT, first.count, (), path, tuple(alternatives))


def _exact(request_name: str, exact: dict[str, Any], where: str, path: str, problems: list[str],
           read: set[str] = _EXACT_READ) -> Request | None:
    for name in sorted(set(exact) - read):
        if exact[name] in (None, False, [], {}):
            continue
        problems.append(f"{where}.{name}: usher does not implement {name} yet")
    klass = exact.get("deviceClassName")
    if klass != GPU_CLASS:
        problems.append(f"{where}.deviceClassName: usher allocates only devices of DeviceClass {GPU_CLASS}, not {klass!r}")
        return None
    mode_text = exact.get("allocationMode") or AllocationMode.EXACT_COUNT
    if mode_text not in set(AllocationMode):
        problems.append(f"{where}.allocationMode: {mode_text!r} is not ExactCount or All")
        return None
    mode = AllocationMode(mode_text)
    count = exact.get("count", 1) if mode == AllocationMode.EXACT_COUNT else 0
    if mode == AllocationMode.EXACT_COUNT and (not isinstance(count, int) or isinstance(count, bool) or count < 1):
        problems.append(f"{where}.count: {count!r} is not a positive whole number")
        return None
    selectors = []
    for j, sel in enumerate(exact.get("selectors") or []):
        expression = ((sel or {}).get("cel") or {}).get("expression") if isinstance(sel, dict) else None
        if not isinstance(expression, str):
            problems.append(f"{where}.selectors[{j}].cel.expression: required")
            continue
        selectors.append(Selector(expression, f"{where}.selectors[{j}].cel.expression"))
    tolerations = parse_device_tolerations(exact.get("tolerations"), f"{where}.tolerations", problems)
    if exact.get("adminAccess") is not None and not isinstance(exact.get("adminAccess"), bool):
        problems.append(f"{where}.adminAccess: {exact['adminAccess']!r} is not true or false")
    return Request(request_name, klass, mode, count, tuple(selectors), path, admin=exact.get("adminAccess") is True,
                   tolerations=tolerations)


def class_selectors(obj: dict[str, Any] | None) -> tuple[Selector, ...]:
    """A DeviceClass's CEL selectors (every device given for it must match them all)."""
    spec = (obj or {}).get("spec") or {}
    name = ((obj or {}).get("metadata") or {}).get("name", "")
    out = []
    for j, sel in enumerate(spec.get("selectors") or []):
        expression = ((sel or {}).get("cel") or {}).get("expression") if isinstance(sel, dict) else None
        if isinstance(expression, str):
            out.append(Selector(expression, f"DeviceClass {name} spec.selectors[{j}].cel.expression"))
    return tuple(out)


def slice_devices(obj: dict[str, Any]) -> list[Device]:
    """The devices a ResourceSlice publishes for one node (none for a slice of no one node)."""
    spec = obj.get("spec") or {}
    node, driver = spec.get("nodeName"), spec.get("driver")
    if not isinstance(node, str) or not isinstance(driver, str):
        return []
    pool = str(((spec.get("pool") or {}).get("name")) or node)
    out = []
    for raw in spec.get("devices") or []:
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            continue
        attributes: dict[str, dict[str, Any]] = {}
        for key, value in (raw.get("attributes") or {}).items():
            domain, _, name = key.rpartition("/")
            attributes.setdefault(domain or driver, {})[name] = _attribute_value(value)
        capacity: dict[str, dict[str, str]] = {}
        for key, value in (raw.get("capacity") or {}).items():
            domain, _, name = key.rpartition("/")
            capacity.setdefault(domain or driver, {})[name] = str((value or {}).get("value", "0"))
        taints = tuple(Taint(str(t.get("key", "")), str(t.get("value", "")), str(t.get("effect")))
                       for t in raw.get("taints") or [] if isinstance(t, dict) and t.get("effect") in KEEPING_OFF)
        out.append(Device(raw["name"], driver, pool, node, attributes, capacity, taints))
    return out


def _attribute_value(value: Any) -> Any:
    """A DeviceAttribute's one value (``{"int": 3}``, ``{"string": "H100"}``, ...)."""
    if isinstance(value, dict):
        for kind in ("int", "bool", "string", "version"):
            if kind in value:
                return value[kind]
    return None


def allocated_node(claim: dict[str, Any]) -> str | None:
    """The node an allocation's nodeSelector names (``matchFields metadata.name In [node]``)."""
    selector = (((claim.get("status") or {}).get("allocation") or {}).get("nodeSelector") or {})
    for term in selector.get("nodeSelectorTerms") or []:
        for req in (term or {}).get("matchFields") or []:
            if req.get("key") == "metadata.name" and req.get("operator") == "In" and len(req.get("values") or []) == 1:
                return str(req["values"][0])
    return None


def node_selector(node: str) -> dict[str, Any]:
    """The nodeSelector of an allocation on ``node``, as kube-scheduler writes it."""
    return {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}
