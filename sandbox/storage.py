"""The storage kinds as kube-apiserver keeps them: their defaults, validation and admission plugins.

The sandbox serves PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSINodes, CSIDrivers
and CSIStorageCapacities (:mod:`usher.sandbox.kinds`). Their schemas (unknown fields, types) come
from :mod:`usher.sandbox.schemas`; this module holds what the registry adds, with the real field
paths and messages, so that a client that is wrong about storage fails here as on a cluster:

- **defaults** (``SetDefaults_*``): a claim's and a volume's ``volumeMode: Filesystem`` and
  ``status.phase: Pending``; a volume's ``persistentVolumeReclaimPolicy: Retain``; a class's
  ``reclaimPolicy: Delete`` and ``volumeBindingMode: Immediate``; a CSIDriver's flags;
- **validation**: a claim (and a StatefulSet's claim templates, and a pod's ephemeral volume
  templates) needs access modes (known ones; ``ReadWriteOncePod`` alone) and a
  positive ``spec.resources[storage]``; a volume needs a ``storage`` capacity, access modes,
  exactly one volume source, node affinity when ``local``; a class needs a provisioner and known
  reclaim and binding modes; names of classes are DNS subdomains;
- **updates**: a claim's spec is immutable except ``resources.requests`` of a bound claim (never
  below ``status.capacity``), ``volumeName`` while unset and ``storageClassName`` while nil; a
  volume's source, mode and node affinity are immutable; a class's provisioner, parameters,
  reclaim policy and binding mode are;
- **admission** (:func:`admit_create`, :func:`admit_update`): DefaultStorageClass (a claim with
  no ``storageClassName`` gets the newest class annotated as the default), StorageObjectInUseProtection
  (the ``kubernetes.io/pvc-protection`` and ``kubernetes.io/pv-protection`` finalizers) and
  PersistentVolumeClaimResize (growing a claim needs a class with ``allowVolumeExpansion``).

The words the cluster's storage controllers share (phases, annotations, finalizers) are here too,
so the PV controller, the provisioner, the ephemeral volume controller and the kubelet stand-in
say them one way. This module imports nothing of the store (the store imports it); refusals that
are not field errors are :class:`Refusal`, which the store answers as ``403 Forbidden``.
"""

from __future__ import annotations

import functools

import json
from collections.abc import Callable, Iterator, Mapping
from enum import StrEnum
from typing import Any

from . import quantity
from .kinds import Resource, ResourceType
from .object_validation import (
    TEMPLATE_PATHS,
    DecodeError,
    ErrorType,
    FieldError,
    dns_subdomain_errors,
    go_quote,
    qualified_name_errors,
)

JsonObject = dict[str, Any]


class AccessMode(StrEnum):
    READ_WRITE_ONCE = "ReadWriteOnce"
    READ_ONLY_MANY = "ReadOnlyMany"
    READ_WRITE_MANY = "ReadWriteMany"
    READ_WRITE_ONCE_POD = "ReadWriteOncePod"


SHORT_ACCESS_MODES = {
    AccessMode.READ_WRITE_ONCE: "RWO", AccessMode.READ_ONLY_MANY: "ROX",
    AccessMode.READ_WRITE_MANY: "RWX", AccessMode.READ_WRITE_ONCE_POD: "RWOP",
}
"""How kubectl prints access modes (in this order, whatever the object's)."""


class BindingMode(StrEnum):
    IMMEDIATE = "Immediate"
    WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"


class ReclaimPolicy(StrEnum):
    DELETE = "Delete"
    RETAIN = "Retain"
    RECYCLE = "Recycle"


class VolumeMode(StrEnum):
    FILESYSTEM = "Filesystem"
    BLOCK = "Block"


class ClaimPhase(StrEnum):
    PENDING = "Pending"
    BOUND = "Bound"
    LOST = "Lost"


class VolumePhase(StrEnum):
    PENDING = "Pending"
    AVAILABLE = "Available"
    BOUND = "Bound"
    RELEASED = "Released"
    FAILED = "Failed"


class Finalizer(StrEnum):
    PVC_PROTECTION = "kubernetes.io/pvc-protection"
    PV_PROTECTION = "kubernetes.io/pv-protection"


class Annotation(StrEnum):
    """The annotations kube-scheduler, the PV controller and the provisioners exchange."""

    DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
    SELECTED_NODE = "volume.kubernetes.io/selected-node"
    STORAGE_PROVISIONER = "volume.kubernetes.io/storage-provisioner"
    BETA_STORAGE_PROVISIONER = "volume.beta.kubernetes.io/storage-provisioner"
    BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
    BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
    PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"


VOLUME_SOURCES = (
    "awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "csi", "fc", "flexVolume", "flocker",
    "gcePersistentDisk", "glusterfs", "hostPath", "iscsi", "local", "nfs", "photonPersistentDisk",
    "portworxVolume", "quobyte", "rbd", "scaleIO", "storageos", "vsphereVolume",
)
"""The fields of ``PersistentVolumeSource``: a volume names exactly one."""

_CLAIM_MODES = [m.value for m in sorted(AccessMode, key=str)]
_RECLAIM = [ReclaimPolicy.DELETE.value, ReclaimPolicy.RECYCLE.value, ReclaimPolicy.RETAIN.value]
_CLASS_RECLAIM = [ReclaimPolicy.DELETE.value, ReclaimPolicy.RETAIN.value]
_BINDING = [m.value for m in BindingMode]
_VOLUME_MODES = [VolumeMode.BLOCK.value, VolumeMode.FILESYSTEM.value]


class Refusal(Exception):
    """An admission plugin's ``403 Forbidden``; the message follows ``<resource> "<name>" is forbidden:``."""


def is_default_class(sc: Mapping[str, Any]) -> bool:
    return ((sc.get("metadata") or {}).get("annotations") or {}).get(Annotation.DEFAULT_CLASS) == "true"


def storage_request(claim: Mapping[str, Any]) -> int:
    """A claim's ``spec.resources.requests.storage`` in bytes (0 if absent or unreadable)."""
    raw = (((claim.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage")
    return to_bytes(raw)


def to_bytes(raw: Any) -> int:
    if raw is None:
        return 0
    return _text_bytes(raw) if isinstance(raw, str) else _bytes(raw)


@functools.lru_cache(maxsize=4096)
def _text_bytes(raw: str) -> int:
    """A quantity's bytes, kept by its text: the PV controller compares every claim with every
    volume on each sync, and the same few sizes are written everywhere."""
    return _bytes(raw)


def _bytes(raw: Any) -> int:
    try:
        return int(quantity.parse(raw).value)
    except quantity.QuantityError:
        return 0


def binary_quantity(n: int) -> str:
    """Bytes as ``resource.NewQuantity(n, BinarySI)`` prints them (``100Gi``, ``1536Mi``, ``1000``)."""
    for suffix, power in (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)):
        if n and n % (1 << power) == 0:
            return f"{n >> power}{suffix}"
    return str(n)


# --------------------------------------------------------------------------- defaults


def claim_defaults(claim: JsonObject, creating: bool) -> None:
    spec = claim.setdefault("spec", {})
    if isinstance(spec, dict):
        spec.setdefault("volumeMode", VolumeMode.FILESYSTEM.value)
    if creating:
        claim["status"] = {"phase": ClaimPhase.PENDING.value}


def volume_defaults(volume: JsonObject, creating: bool) -> None:
    spec = volume.setdefault("spec", {})
    if isinstance(spec, dict):
        spec.setdefault("persistentVolumeReclaimPolicy", ReclaimPolicy.RETAIN.value)
        spec.setdefault("volumeMode", VolumeMode.FILESYSTEM.value)
    if creating:
        volume["status"] = {"phase": VolumePhase.PENDING.value}


def class_defaults(sc: JsonObject, creating: bool) -> None:
    sc.setdefault("reclaimPolicy", ReclaimPolicy.DELETE.value)
    sc.setdefault("volumeBindingMode", BindingMode.IMMEDIATE.value)


def driver_defaults(driver: JsonObject, creating: bool) -> None:
    spec = driver.setdefault("spec", {})
    if isinstance(spec, dict):
        for key, value in (("attachRequired", True), ("podInfoOnMount", False), ("requiresRepublish", False),
                           ("storageCapacity", False), ("seLinuxMount", False),
                           ("fsGroupPolicy", "ReadWriteOnceWithFSType"), ("volumeLifecycleModes", ["Persistent"])):
            spec.setdefault(key, value)


DEFAULTERS: dict[str, Callable[[JsonObject, bool], None]] = {
    Resource.PERSISTENTVOLUMECLAIMS.value: claim_defaults,
    Resource.PERSISTENTVOLUMES.value: volume_defaults,
    f"{Resource.STORAGECLASSES.value}.storage.k8s.io": class_defaults,
    f"{Resource.CSIDRIVERS.value}.storage.k8s.io": driver_defaults,
}
"""Keyed by :attr:`ResourceType.key`, as the store keys its defaulters."""


# --------------------------------------------------------------------------- validation


def _not_supported(path: str, value: Any, supported: list[str]) -> FieldError:
    shown = ", ".join(go_quote(s) for s in supported)
    return FieldError(ErrorType.NOT_SUPPORTED, path, f"supported values: {shown}", go_quote(str(value)))


def _positive(raw: Any, path: str) -> Iterator[FieldError]:
    try:
        value = quantity.parse(raw)
    except quantity.QuantityError as error:
        raise DecodeError(str(error)) from None
    if value.value <= 0:
        yield FieldError(ErrorType.INVALID, path, "must be greater than zero", go_quote(str(value)))


def _access_modes(modes: Any, path: str, supported: list[str]) -> Iterator[FieldError]:
    if not modes:
        yield FieldError(ErrorType.REQUIRED, path, "at least 1 access mode is required")
        return
    for mode in modes:
        if mode not in supported:
            yield _not_supported(path, mode, supported)
    if AccessMode.READ_WRITE_ONCE_POD in modes and len(modes) > 1:
        yield FieldError(ErrorType.FORBIDDEN, path, "may not use ReadWriteOncePod with other access modes")


def _class_name(name: Any, path: str) -> Iterator[FieldError]:
    if isinstance(name, str) and name:
        for message in dns_subdomain_errors(name):
            yield FieldError(ErrorType.INVALID, path, message, go_quote(name))


def _mode(value: Any, path: str, supported: list[str]) -> Iterator[FieldError]:
    if value is not None and value not in supported:
        yield _not_supported(path, value, supported)


def validate_claim_spec(spec: Any, path: str) -> Iterator[FieldError]:
    """``ValidatePersistentVolumeClaimSpec`` (claims, and the templates of StatefulSets and ephemeral volumes)."""
    if not isinstance(spec, dict):
        return
    yield from _access_modes(spec.get("accessModes"), f"{path}.accessModes", _CLAIM_MODES)
    requests = ((spec.get("resources") or {}).get("requests") or {})
    where = f"{path}.resources[storage]"
    if "storage" not in requests:
        yield FieldError(ErrorType.REQUIRED, where, "")
    else:
        yield from _positive(requests["storage"], where)
    yield from _class_name(spec.get("storageClassName"), f"{path}.storageClassName")
    yield from _mode(spec.get("volumeMode"), f"{path}.volumeMode", _VOLUME_MODES)


def _node_affinity(affinity: Any, path: str) -> Iterator[FieldError]:
    if not isinstance(affinity, dict):
        return
    required = affinity.get("required")
    if isinstance(required, dict) and not required.get("nodeSelectorTerms"):
        yield FieldError(ErrorType.REQUIRED, f"{path}.required.nodeSelectorTerms", "must have at least one node selector term")


def validate_volume(pv: JsonObject) -> Iterator[FieldError]:
    spec = pv.get("spec")
    if not isinstance(spec, dict):
        return
    capacity = spec.get("capacity") or {}
    if not capacity:
        yield FieldError(ErrorType.REQUIRED, "spec.capacity", "")
    elif set(capacity) != {"storage"}:
        yield _not_supported("spec.capacity", ",".join(sorted(capacity)), ["storage"])
    else:
        yield from _positive(capacity["storage"], "spec.capacity[storage]")
    yield from _access_modes(spec.get("accessModes"), "spec.accessModes", _CLAIM_MODES)
    yield from _mode(spec.get("persistentVolumeReclaimPolicy"), "spec.persistentVolumeReclaimPolicy", _RECLAIM)
    yield from _class_name(spec.get("storageClassName"), "spec.storageClassName")
    yield from _mode(spec.get("volumeMode"), "spec.volumeMode", _VOLUME_MODES)
    sources = [s for s in VOLUME_SOURCES if spec.get(s) is not None]
    if not sources:
        yield FieldError(ErrorType.REQUIRED, "spec", "must specify a volume type")
    for extra in sources[1:]:
        yield FieldError(ErrorType.FORBIDDEN, f"spec.{extra}", "may not specify more than 1 volume type")
    if "local" in sources:
        if not (spec["local"] or {}).get("path"):
            yield FieldError(ErrorType.REQUIRED, "spec.local.path", "")
        if not spec.get("nodeAffinity"):
            yield FieldError(ErrorType.REQUIRED, "spec.nodeAffinity", "Local volume requires node affinity")
    if "csi" in sources:
        csi = spec["csi"] or {}
        for key in ("driver", "volumeHandle"):
            if not csi.get(key):
                yield FieldError(ErrorType.REQUIRED, f"spec.csi.{key}", "")
    yield from _node_affinity(spec.get("nodeAffinity"), "spec.nodeAffinity")


def validate_class(sc: JsonObject) -> Iterator[FieldError]:
    provisioner = sc.get("provisioner")
    if not provisioner:
        yield FieldError(ErrorType.REQUIRED, "provisioner", "")
    else:
        for message in qualified_name_errors(str(provisioner)):
            yield FieldError(ErrorType.INVALID, "provisioner", message, go_quote(str(provisioner)))
    yield from _mode(sc.get("reclaimPolicy"), "reclaimPolicy", _CLASS_RECLAIM)
    yield from _mode(sc.get("volumeBindingMode"), "volumeBindingMode", _BINDING)
    for i, term in enumerate(sc.get("allowedTopologies") or []):
        where = f"allowedTopologies[{i}].matchLabelExpressions"
        expressions = (term or {}).get("matchLabelExpressions") or []
        if not expressions:
            yield FieldError(ErrorType.REQUIRED, where, "must have at least one label selector requirement")
        for j, expr in enumerate(expressions):
            if not (expr or {}).get("values"):
                yield FieldError(ErrorType.REQUIRED, f"{where}[{j}].values", "must specify as least one value")


def validate_capacity(cap: JsonObject) -> Iterator[FieldError]:
    name = cap.get("storageClassName")
    if not name:
        yield FieldError(ErrorType.REQUIRED, "storageClassName", "")
    yield from _class_name(name, "storageClassName")
    for key in ("capacity", "maximumVolumeSize"):
        if cap.get(key) is not None:
            try:
                value = quantity.parse(cap[key])
            except quantity.QuantityError as error:
                raise DecodeError(str(error)) from None
            if value.value < 0:
                yield FieldError(ErrorType.INVALID, key, "must be greater than or equal to 0", go_quote(str(value)))


def validate(rt: ResourceType, obj: JsonObject) -> list[FieldError]:
    """What kube-apiserver's validation of a storage kind finds (nothing for other kinds)."""
    if rt.custom:
        return []
    if rt.resource == Resource.PERSISTENTVOLUMECLAIMS:
        return list(validate_claim_spec(obj.get("spec"), "spec"))
    if rt.resource == Resource.PERSISTENTVOLUMES:
        return list(validate_volume(obj))
    if rt.resource == Resource.STORAGECLASSES:
        return list(validate_class(obj))
    if rt.resource == Resource.CSISTORAGECAPACITIES:
        return list(validate_capacity(obj))
    errors: list[FieldError] = []
    if rt.resource == Resource.PODS:
        errors.extend(validate_pod_volumes(obj.get("spec"), "spec"))
    elif rt.resource in TEMPLATE_PATHS:
        template: Any = obj
        for key in TEMPLATE_PATHS[rt.resource]:
            template = template.get(key) if isinstance(template, dict) else None
        if isinstance(template, dict):
            errors.extend(validate_pod_volumes(template.get("spec"), ".".join(TEMPLATE_PATHS[rt.resource]) + ".spec"))
    if rt.resource == Resource.STATEFULSETS:
        templates = (obj.get("spec") or {}).get("volumeClaimTemplates") or []
        errors.extend(e for i, t in enumerate(templates) if isinstance(t, dict)
                      for e in validate_claim_spec(t.get("spec"), f"spec.volumeClaimTemplates[{i}].spec"))
    return errors


def validate_pod_volumes(spec: Any, path: str) -> Iterator[FieldError]:
    """A pod spec's claim volumes: a ``claimName``, and an ephemeral volume's claim template."""
    if not isinstance(spec, dict):
        return
    for i, volume in enumerate(spec.get("volumes") or []):
        if not isinstance(volume, dict):
            continue
        where = f"{path}.volumes[{i}]"
        claim = volume.get("persistentVolumeClaim")
        if isinstance(claim, dict) and not claim.get("claimName"):
            yield FieldError(ErrorType.REQUIRED, f"{where}.persistentVolumeClaim.claimName", "")
        ephemeral = volume.get("ephemeral")
        if isinstance(ephemeral, dict):
            template = ephemeral.get("volumeClaimTemplate")
            if not isinstance(template, dict):
                yield FieldError(ErrorType.REQUIRED, f"{where}.ephemeral.volumeClaimTemplate", "")
            else:
                yield from validate_claim_spec(template.get("spec"), f"{where}.ephemeral.volumeClaimTemplate.spec")


# --------------------------------------------------------------------------- updates


def _diff(type_name: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """A short ``cmp.Diff`` of two specs, as the immutability errors append it."""
    lines = [f"  {type_name}{{"]
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            name = key[:1].upper() + key[1:]
            if key in old:
                lines.append(f"- \t{name}: {json.dumps(old[key], sort_keys=True)},")
            if key in new:
                lines.append(f"+ \t{name}: {json.dumps(new[key], sort_keys=True)},")
    lines.append("  }")
    return "\n" + "\n".join(lines) + "\n"


def validate_claim_update(old: JsonObject, new: JsonObject) -> Iterator[FieldError]:
    """``ValidatePersistentVolumeClaimUpdate``."""
    old_spec, new_spec = dict(old.get("spec") or {}), dict(new.get("spec") or {})
    compared_old, compared_new = dict(old_spec), dict(new_spec)
    if not old_spec.get("volumeName"):  # the PV controller binds by writing it
        compared_old.pop("volumeName", None)
        compared_new.pop("volumeName", None)
    if old_spec.get("storageClassName") is None:  # the retroactive default class
        compared_old.pop("storageClassName", None)
        compared_new.pop("storageClassName", None)
    compared_old.pop("volumeAttributesClassName", None)
    compared_new.pop("volumeAttributesClassName", None)
    bound = (new.get("status") or {}).get("phase") == ClaimPhase.BOUND
    if bound:
        old_res, new_res = dict(old_spec.get("resources") or {}), dict(new_spec.get("resources") or {})
        new_res["requests"] = old_res.get("requests")
        compared_old["resources"], compared_new["resources"] = old_res, new_res
        capacity = ((old.get("status") or {}).get("capacity") or {}).get("storage")
        wanted = storage_request(new)
        # shrinking is only the recovery from a failed expansion: still above what is allocated
        if wanted < storage_request(old) and (not capacity or wanted <= to_bytes(capacity)):
            what = "status.capacity" if capacity else "previous value"
            yield FieldError(ErrorType.FORBIDDEN, "spec.resources.requests.storage", f"field can not be less than {what}")
    if compared_old != compared_new:
        detail = "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims"
        yield FieldError(ErrorType.FORBIDDEN, "spec", detail + _diff("core.PersistentVolumeClaimSpec", compared_old, compared_new))


def _immutable(old: Any, new: Any, path: str) -> Iterator[FieldError]:
    if old != new:
        yield FieldError(ErrorType.INVALID, path, "field is immutable", json.dumps(new, sort_keys=True))


def validate_volume_update(old: JsonObject, new: JsonObject) -> Iterator[FieldError]:
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    if any(old_spec.get(s) != new_spec.get(s) for s in VOLUME_SOURCES):
        yield FieldError(ErrorType.FORBIDDEN, "spec.persistentvolumesource", "spec.persistentvolumesource is forbidden.")
    yield from _immutable(old_spec.get("volumeMode"), new_spec.get("volumeMode"), "spec.volumeMode")
    if old_spec.get("nodeAffinity") is not None:
        yield from _immutable(old_spec.get("nodeAffinity"), new_spec.get("nodeAffinity"), "spec.nodeAffinity")


def validate_class_update(old: JsonObject, new: JsonObject) -> Iterator[FieldError]:
    for key in ("parameters", "provisioner", "reclaimPolicy"):
        if old.get(key) != new.get(key):
            yield FieldError(ErrorType.FORBIDDEN, key, f"updates to {key} are forbidden.")
    yield from _immutable(old.get("volumeBindingMode"), new.get("volumeBindingMode"), "volumeBindingMode")


def validate_capacity_update(old: JsonObject, new: JsonObject) -> Iterator[FieldError]:
    yield from _immutable(old.get("storageClassName"), new.get("storageClassName"), "storageClassName")
    yield from _immutable(old.get("nodeTopology"), new.get("nodeTopology"), "nodeTopology")


def validate_update(rt: ResourceType, old: JsonObject, new: JsonObject) -> list[FieldError]:
    """What kube-apiserver's update validation of a storage kind finds (nothing for other kinds)."""
    checks = {
        Resource.PERSISTENTVOLUMECLAIMS: validate_claim_update,
        Resource.PERSISTENTVOLUMES: validate_volume_update,
        Resource.STORAGECLASSES: validate_class_update,
        Resource.CSISTORAGECAPACITIES: validate_capacity_update,
    }
    check = None if rt.custom else checks.get(rt.resource)  # type: ignore[call-overload]
    return list(check(old, new)) if check is not None else []


# --------------------------------------------------------------------------- admission


def default_class(classes: list[JsonObject]) -> JsonObject | None:
    """The class DefaultStorageClass gives a claim: of those marked default, the newest (then by name)."""
    marked = [c for c in classes if is_default_class(c)]
    if not marked:
        return None
    return max(marked, key=lambda c: (c["metadata"].get("creationTimestamp", ""), c["metadata"]["name"]))


def _add_finalizer(obj: JsonObject, finalizer: str) -> None:
    finalizers = obj["metadata"].setdefault("finalizers", [])
    if isinstance(finalizers, list) and finalizer not in finalizers:
        finalizers.append(finalizer)


def admit_create(rt: ResourceType, obj: JsonObject, classes: Callable[[], list[JsonObject]]) -> None:
    """The mutating admission plugins on a new claim or volume (before defaults and validation)."""
    if rt.custom:
        return
    if rt.resource == Resource.PERSISTENTVOLUMECLAIMS:
        spec = obj.setdefault("spec", {})
        if isinstance(spec, dict) and spec.get("storageClassName") is None:
            chosen = default_class(classes())
            if chosen is not None:
                spec["storageClassName"] = chosen["metadata"]["name"]
        _add_finalizer(obj, Finalizer.PVC_PROTECTION)
    elif rt.resource == Resource.PERSISTENTVOLUMES:
        _add_finalizer(obj, Finalizer.PV_PROTECTION)


def admit_update(rt: ResourceType, old: JsonObject, new: JsonObject, classes: Callable[[], list[JsonObject]]) -> None:
    """PersistentVolumeClaimResize: a claim may grow only if its class allows volume expansion."""
    if rt.custom or rt.resource != Resource.PERSISTENTVOLUMECLAIMS or storage_request(new) <= storage_request(old):
        return
    name = (new.get("spec") or {}).get("storageClassName")
    sc = next((c for c in classes() if c["metadata"]["name"] == name), None) if name else None
    if sc is None or not sc.get("allowVolumeExpansion"):
        raise Refusal("only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize")
