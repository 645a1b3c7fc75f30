"""The registry's per-kind rules on a write, before it is committed: the decoder's reading of
quantities, defaulting, the DefaultTolerationSeconds admission plugin, validation, and the
update checks of pods and of the storage kinds.

These are the steps a real API server runs through each kind's registry strategy
(``PrepareForCreate``, ``Validate``, ``ValidateUpdate``); the store calls them in that order.
Each rule's reading lives in its own module (:mod:`.object_validation`, :mod:`.storage`,
:mod:`.defaults`, :mod:`.quantity_fields`); this one says which kind gets which.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .kinds import RESOURCE_TYPES, Resource, ResourceType
from . import defaults, dra, object_validation, placement_validation, quantity, quantity_fields, storage
from .api_errors import ApiError, Reason

JsonObject = dict[str, Any]


DEFAULT_TOLERATION_SECONDS = 300
"""kube-apiserver's ``--default-not-ready-toleration-seconds`` and ``--default-unreachable-toleration-seconds``."""


def _admit_default_tolerations(pod: JsonObject) -> None:
    """The DefaultTolerationSeconds admission plugin on a new pod: unless a toleration already
    covers it (its key that taint's or empty, its effect ``NoExecute`` or empty), tolerate
    ``node.kubernetes.io/not-ready`` and ``unreachable`` with ``NoExecute`` for 300 s, so a pod
    outlives a node's short absence and is evicted from a node gone for longer."""
    spec = pod.setdefault("spec", {})
    tolerations = spec.get("tolerations")
    if tolerations is not None and not isinstance(tolerations, list):
        return  # validation refuses it
    have = [t for t in tolerations or [] if isinstance(t, dict)]
    added = []
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if any(t.get("key") in (key, "", None) and t.get("effect") in ("NoExecute", "", None) for t in have):
            continue
        added.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                      "tolerationSeconds": DEFAULT_TOLERATION_SECONDS})
    if added:
        spec["tolerations"] = [*(tolerations or []), *added]


# ------------------------------------------------------------ per-resource defaulting and validation


def _decode_quantities(rt: ResourceType, obj: JsonObject, *, canonical: bool = False) -> None:
    """The decoder's reading of the object's quantities (:mod:`.quantity_fields`): ``400`` for one
    that does not parse; ``canonical``: each put in canonical text, as the object is stored."""
    try:
        (quantity_fields.canonicalize if canonical else quantity_fields.check)(rt, obj)
    except quantity.QuantityError as error:
        raise ApiError.bad_request(f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: {error}') from None


def _validate(rt: ResourceType, obj: JsonObject) -> None:
    """kube-apiserver's validation of the object (:mod:`.object_validation`): ``422`` with every
    problem found, ``400`` for a value that would not decode."""
    try:
        errors = (object_validation.validate(rt, obj) + storage.validate(rt, obj) + placement_validation.validate(rt, obj)
                  + dra.validate(rt, obj))
    except object_validation.DecodeError as error:
        raise ApiError.bad_request(f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: {error}') from None
    if errors:
        name = str((obj.get("metadata") or {}).get("name") or "")
        message, details = object_validation.invalid(rt, name, errors)
        raise ApiError(422, Reason.INVALID, message, details)


def _no_defaults(obj: JsonObject, creating: bool) -> None:
    """Most resources have no server-side defaults here."""


def _no_checks(rt: ResourceType, old: JsonObject, new: JsonObject) -> None:
    """Most resources accept any update."""


def _pod_defaults(pod: JsonObject, creating: bool) -> None:
    spec = pod.setdefault("spec", {})
    defaults.port_defaults(spec)
    object_validation.default_pod_requests(spec)
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    if creating:
        pod["status"] = {"phase": "Pending", "qosClass": _qos_class(spec)}


def _qos_class(spec: JsonObject) -> str:
    """Guaranteed, Burstable or BestEffort, from the containers' CPU and memory requests and limits."""
    containers = [*spec.get("containers", []), *spec.get("initContainers", [])]
    resources = [c.get("resources") or {} for c in containers]
    compute = ("cpu", "memory")
    if not any(r.get(kind, {}).get(name) for r in resources for kind in ("requests", "limits") for name in compute):
        return "BestEffort"
    guaranteed = all(
        (r.get("limits") or {}).get(name)
        and (r.get("requests") or {}).get(name, r["limits"][name]) == r["limits"][name]
        for r in resources
        for name in compute
    )
    return "Guaranteed" if guaranteed else "Burstable"


_MUTABLE_POD_SPEC = ("activeDeadlineSeconds", "tolerations", "schedulingGates", "terminationGracePeriodSeconds")


def _pod_spec_for_comparison(spec: JsonObject) -> JsonObject:
    """A pod spec without the fields an update may change."""
    stripped = {k: v for k, v in spec.items() if k not in _MUTABLE_POD_SPEC}
    for group in ("containers", "initContainers"):
        if group in stripped:
            stripped[group] = [{k: v for k, v in c.items() if k != "image"} for c in stripped[group]]
    return stripped


def _check_pod_update(rt: ResourceType, old: JsonObject, new: JsonObject) -> None:
    if _pod_spec_for_comparison(old.get("spec", {})) != _pod_spec_for_comparison(new.get("spec", {})):
        raise ApiError.invalid(
            rt,
            new["metadata"]["name"],
            "spec",
            "FieldValueForbidden",
            "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, "
            "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` "
            "(only additions to existing tolerations), `spec.terminationGracePeriodSeconds` "
            "(allow it to be set to 1 if it was previously negative)",
        )


def _namespace_defaults(namespace: JsonObject, creating: bool) -> None:
    namespace.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    if creating:
        namespace["status"] = {"phase": "Active"}


_DEFAULTERS: dict[str, Callable[[JsonObject, bool], None]] = {
    rt.key: defaulter
    for rt, defaulter in (
        (RESOURCE_TYPES[Resource.PODS], _pod_defaults),
        (RESOURCE_TYPES[Resource.NAMESPACES], _namespace_defaults),
        (RESOURCE_TYPES[Resource.JOBS], defaults.job_defaults),
        (RESOURCE_TYPES[Resource.DEPLOYMENTS], defaults.deployment_defaults),
        (RESOURCE_TYPES[Resource.REPLICASETS], defaults.replicaset_defaults),
        (RESOURCE_TYPES[Resource.DAEMONSETS], defaults.daemonset_defaults),
        (RESOURCE_TYPES[Resource.STATEFULSETS], defaults.statefulset_defaults),
        (RESOURCE_TYPES[Resource.SERVICES], defaults.service_defaults),
    )
}
def _check_storage_update(rt: ResourceType, old: JsonObject, new: JsonObject) -> None:
    """The update validation of the storage kinds (:mod:`.storage`): ``422`` with every problem."""
    errors = storage.validate_update(rt, old, new)
    if errors:
        message, details = object_validation.invalid(rt, new["metadata"]["name"], errors)
        raise ApiError(422, Reason.INVALID, message, details)


def _check_dra_update(rt: ResourceType, old: JsonObject, new: JsonObject) -> None:
    """The update validation of the DRA kinds (:mod:`.dra`), a claim's status included: ``422``."""
    errors = dra.validate_update(rt, old, new)
    if errors:
        message, details = object_validation.invalid(rt, new["metadata"]["name"], errors)
        raise ApiError(422, Reason.INVALID, message, details)


_DEFAULTERS.update(storage.DEFAULTERS)
_DEFAULTERS.update(dra.DEFAULTERS)
_CHECKS: dict[Resource, Callable[[ResourceType, JsonObject, JsonObject], None]] = {
    Resource.PODS: _check_pod_update,
}
_CHECKS.update({  # type: ignore[dict-item]  # keyed as looked up: by ResourceType.key
    RESOURCE_TYPES[r].key: _check_storage_update
    for r in (Resource.PERSISTENTVOLUMECLAIMS, Resource.PERSISTENTVOLUMES, Resource.STORAGECLASSES, Resource.CSISTORAGECAPACITIES)
})
_CHECKS.update({  # type: ignore[dict-item]
    RESOURCE_TYPES[r].key: _check_dra_update
    for r in (Resource.DEVICECLASSES, Resource.RESOURCESLICES, Resource.RESOURCECLAIMS, Resource.RESOURCECLAIMTEMPLATES)
})
_STATUS_CHECKS: dict[str, Callable[[ResourceType, JsonObject, JsonObject], None]] = {
    RESOURCE_TYPES[Resource.RESOURCECLAIMS].key: _check_dra_update,
}
"""Checks of a write to the status subresource (``ValidateStatusUpdate``), by :attr:`ResourceType.key`."""
