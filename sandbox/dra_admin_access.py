"""Who may ask admin access to devices: kube-apiserver's namespace check on DRA claims.

A ResourceClaim (or ResourceClaimTemplate) request with ``exactly.adminAccess: true`` is given
devices whether or not other claims hold them: a monitoring or diagnostic tool's access to every
tenant's GPUs. kube-apiserver grants it only in a namespace labelled
``resource.kubernetes.io/admin-access: "true"`` (the label cluster operators set and tenants, who
may not patch namespaces, cannot): the claim's or template's create is refused otherwise, with
``Forbidden`` on the request's ``adminAccess`` field, and so is a status write that gives a claim
there an allocation result with ``adminAccess`` (one already granted stays: the allocation is
immutable). Checked against the namespace as stored when the write arrives, as the registry's
strategy does; a label taken off later takes nothing away from claims made before.

It is an admission step of the store (:attr:`usher.sandbox.store.Store.admission`) rather than a
rule of :mod:`.dra`'s validation, because it reads another object (the namespace): validation
sees only the object written.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .api_errors import ApiError, Reason
from .kinds import Resource
from .object_validation import ErrorType, FieldError, invalid
from .store import Attempt, Operation, Store

#: the namespace label that grants admin access (``resource.DRAAdminNamespaceLabelKey``)
ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"
_DETAIL = f"admin access to devices requires the `{ADMIN_ACCESS_LABEL}: true` label on the containing namespace"


def _requests(spec: Any) -> list[Any]:
    devices = spec.get("devices") if isinstance(spec, dict) else None
    requests = devices.get("requests") if isinstance(devices, dict) else None
    return requests if isinstance(requests, list) else []


def _asked(spec: Any, path: str) -> Iterator[str]:
    """The field path of each request's ``exactly.adminAccess: true`` in a claim spec at ``path``."""
    for i, request in enumerate(_requests(spec)):
        exactly = request.get("exactly") if isinstance(request, dict) else None
        if isinstance(exactly, dict) and exactly.get("adminAccess") is True:
            yield f"{path}.devices.requests[{i}].exactly.adminAccess"


def _granted(claim: Any) -> list[str]:
    """The field path of each allocation result of the claim given with admin access."""
    status = claim.get("status") if isinstance(claim, dict) else None
    allocation = status.get("allocation") if isinstance(status, dict) else None
    devices = allocation.get("devices") if isinstance(allocation, dict) else None
    results = devices.get("results") if isinstance(devices, dict) else None
    return [f"status.allocation.devices.results[{i}].adminAccess" for i, r in enumerate(results or [])
            if isinstance(r, dict) and r.get("adminAccess") is True]


class AdminAccessAdmission:
    """Refuses admin access in a namespace not labelled for it (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        store.admission.append(self.admit)

    def admit(self, attempt: Attempt) -> None:
        if attempt.rt.resource not in (Resource.RESOURCECLAIMS, Resource.RESOURCECLAIMTEMPLATES) or attempt.obj is None:
            return
        if attempt.operation not in (Operation.CREATE, Operation.UPDATE):
            return
        obj = attempt.obj
        paths: list[str] = []
        if attempt.operation == Operation.CREATE:
            if attempt.rt.resource == Resource.RESOURCECLAIMS:
                paths = list(_asked(obj.get("spec"), "spec"))
            else:
                paths = list(_asked((obj.get("spec") or {}).get("spec"), "spec.spec"))
        if attempt.rt.resource == Resource.RESOURCECLAIMS and not _granted(attempt.old):
            paths += _granted(obj)  # a new allocation that grants it (an old one stays)
        if not paths or self._labelled(attempt.namespace):
            return
        errors = [FieldError(ErrorType.FORBIDDEN, paths[0], _DETAIL)]  # the first, as the strategy reports it
        message, details = invalid(attempt.rt, attempt.name, errors)
        raise ApiError(422, Reason.INVALID, message, details)

    def _labelled(self, namespace: str | None) -> bool:
        try:
            ns = self.store.get(Resource.NAMESPACES, namespace or "")
        except ApiError:
            return False
        return ((ns.get("metadata") or {}).get("labels") or {}).get(ADMIN_ACCESS_LABEL) == "true"
