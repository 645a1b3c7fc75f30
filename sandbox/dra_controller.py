"""The resourceclaim controller (kube-controller-manager's ``resource-claim-controller``).

What it does, as the real one does since structured parameters (1.32+; ``resource.k8s.io/v1``):

- **claims from templates**: for each ``spec.resourceClaims[]`` entry of a pod that names a
  ``resourceClaimTemplateName``, it creates a ResourceClaim in the pod's namespace with
  ``generateName: <pod>-<entry>-``, the template's labels, annotations and spec, the annotation
  ``resource.kubernetes.io/pod-claim-name: <entry>`` and an owner reference to the pod
  (``controller: true``, ``blockOwnerDeletion: true``), and records the generated name in the
  pod's ``status.resourceClaimStatuses`` (``{name: <entry>, resourceClaimName: ...}``). A claim
  it made before (found by owner and annotation) is reused, so a lost status write makes no
  second claim. A missing template makes nothing: the pod waits (the kubelet says so).
- **reservedFor**: a pod that is gone (or replaced under its name: another UID) or done
  (Succeeded/Failed) is removed from every claim's ``status.reservedFor``.
- **deallocation**: a claim whose last consumer went loses ``status.allocation`` (the
  controller, not the scheduler, deallocates in 1.34), then the scheduler's
  ``resource.kubernetes.io/delete-protection`` finalizer; one deleted while allocated and
  unused too. A protected claim nobody has reserved
  yet is left alone: the scheduler puts the finalizer on first, then writes the allocation and
  the reservation.
- **deleting claims made for a pod**: once its owning pod is gone, replaced or done, a claim the
  controller made for it is deleted (the garbage collector would too, once the pod object is
  removed; a finished pod may stay for a long time).

Claims named directly (``resourceClaimName``) are never created or deleted here; only their
``reservedFor`` and allocation are kept.
"""

from __future__ import annotations

import copy
from typing import Any

from .dra import POD_CLAIM_NAME_ANNOTATION, allocation, reserved_for
from .kinds import RESOURCE_TYPES, Resource
from .nodefit import is_terminal
from .parts import Host, Part
from .store import ApiError, Change, EventType

JsonObject = dict[str, Any]

CLAIM_RT = RESOURCE_TYPES[Resource.RESOURCECLAIMS]
TEMPLATE_RT = RESOURCE_TYPES[Resource.RESOURCECLAIMTEMPLATES]
POD_RT = RESOURCE_TYPES[Resource.PODS]
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
"""The finalizer kube-scheduler puts on a claim it allocates; the controller removes it on deallocation."""


def pod_claims(pod: JsonObject) -> list[JsonObject]:
    return [c for c in (pod.get("spec") or {}).get("resourceClaims") or [] if isinstance(c, dict)]


def claim_name(pod: JsonObject, entry: JsonObject) -> str | None:
    """The claim a pod's ``spec.resourceClaims`` entry stands for (``resourceclaim.Name``):
    its ``resourceClaimName``, or the generated name in ``status.resourceClaimStatuses``;
    ``None`` while the controller has not made it yet."""
    if entry.get("resourceClaimName"):
        return str(entry["resourceClaimName"])
    for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        if isinstance(status, dict) and status.get("name") == entry.get("name"):
            return status.get("resourceClaimName")
    return None


def _owner_pod(claim: JsonObject) -> tuple[str, str] | None:
    for ref in claim["metadata"].get("ownerReferences") or []:
        if ref.get("kind") == "Pod" and ref.get("apiVersion") == "v1" and ref.get("controller"):
            return ref.get("name", ""), ref.get("uid", "")
    return None


class ResourceClaimController(Part):
    """See the module docstring."""

    resources = (Resource.PODS, Resource.RESOURCECLAIMS, Resource.RESOURCECLAIMTEMPLATES)

    def __init__(self, mgr: Host) -> None:
        super().__init__(mgr)
        self._pods: set[tuple[str, str]] = set()
        self._claims: set[tuple[str, str]] = set()
        self._all = True

    def on_change(self, change: Change) -> None:
        obj = change.new.obj
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        if change.rt.resource == Resource.PODS:
            if not pod_claims(obj):
                return
            if change.type is not EventType.DELETED:
                self._pods.add(key)
            for entry in pod_claims(obj):  # its claims may need their reservedFor cleaned
                name = claim_name(obj, entry)
                if name:
                    self._claims.add((key[0], name))
        elif change.rt.resource == Resource.RESOURCECLAIMS and change.type is not EventType.DELETED:
            self._claims.add(key)
        elif change.rt.resource == Resource.RESOURCECLAIMTEMPLATES:
            self._all = True  # a template made late: pods waiting for it may go on

    def resync(self) -> None:
        self._all = True

    def dirty(self) -> bool:
        return self._all or bool(self._pods) or bool(self._claims)

    def reconcile(self) -> None:
        if self._all:
            pods = {(s.obj["metadata"].get("namespace", ""), s.obj["metadata"]["name"])
                    for s in self.stored(POD_RT) if pod_claims(s.obj)}
            claims = {(s.obj["metadata"].get("namespace", ""), s.obj["metadata"]["name"]) for s in self.stored(CLAIM_RT)}
        else:
            pods, claims = set(self._pods), set(self._claims)
        self._all, self._pods, self._claims = False, set(), set()
        for ns, name in sorted(pods):
            self.mgr.guard(lambda ns=ns, name=name: self._sync_pod(ns, name))
        for ns, name in sorted(claims):
            self.mgr.guard(lambda ns=ns, name=name: self._sync_claim(ns, name))

    def sync(self) -> None:  # pragma: no cover - reconcile is overridden
        pass

    # ------------------------------------------------------------------ pods: claims from templates

    def _sync_pod(self, ns: str, name: str) -> None:
        try:
            stored = self.store.get_stored(POD_RT, name, ns)
        except ApiError:
            return
        pod = stored.obj
        if pod["metadata"].get("deletionTimestamp") or is_terminal(pod):
            return
        statuses = [s for s in (pod.get("status") or {}).get("resourceClaimStatuses") or [] if isinstance(s, dict)]
        recorded = {s.get("name") for s in statuses}
        added = []
        for entry in pod_claims(pod):
            template_name = entry.get("resourceClaimTemplateName")
            if not template_name or entry.get("name") in recorded:
                continue
            made = self._claim_for(pod, entry) or self._create_claim(pod, entry, template_name)
            if made is not None:
                added.append({"name": entry["name"], "resourceClaimName": made})
        if added:
            new = stored.copy()
            new.setdefault("status", {})["resourceClaimStatuses"] = [*statuses, *added]
            self.store.commit_update(POD_RT, stored, new)

    def _claim_for(self, pod: JsonObject, entry: JsonObject) -> str | None:
        """A claim made for this pod's entry already (the status write may have been lost)."""
        uid, ns = pod["metadata"]["uid"], pod["metadata"].get("namespace", "")
        for stored in self.store.list(CLAIM_RT, namespace=ns).items:
            meta = stored.obj["metadata"]
            if (meta.get("annotations") or {}).get(POD_CLAIM_NAME_ANNOTATION) == entry.get("name") \
                    and (_owner_pod(stored.obj) or ("", ""))[1] == uid:
                return str(meta["name"])
        return None

    def _create_claim(self, pod: JsonObject, entry: JsonObject, template_name: str) -> str | None:
        meta = pod["metadata"]
        ns = meta.get("namespace", "")
        try:
            template = self.store.get_stored(TEMPLATE_RT, template_name, ns).obj
        except ApiError:
            return None  # the pod waits for its template
        tmeta = (template.get("spec") or {}).get("metadata") or {}
        claim = {
            "apiVersion": CLAIM_RT.api_version, "kind": "ResourceClaim",
            "metadata": {
                "generateName": f"{meta['name']}-{entry['name']}-",
                "namespace": ns,
                "labels": dict(tmeta.get("labels") or {}),
                "annotations": {**(tmeta.get("annotations") or {}), POD_CLAIM_NAME_ANNOTATION: entry["name"]},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"],
                                     "controller": True, "blockOwnerDeletion": True}],
            },
            "spec": copy.deepcopy((template.get("spec") or {}).get("spec") or {}),
        }
        if not claim["metadata"]["labels"]:
            del claim["metadata"]["labels"]
        try:
            return str(self.store.create_stored(CLAIM_RT, claim, ns).obj["metadata"]["name"])
        except ApiError:
            return None  # refused (admin access in a namespace no longer labelled for it): the pod waits

    # ------------------------------------------------------------------ claims: reservedFor, deallocation

    def _pod_live(self, ns: str, name: str, uid: str) -> bool:
        """The pod of this name and UID exists and is not done."""
        try:
            pod = self.store.get_stored(POD_RT, name, ns).obj
        except ApiError:
            return False
        return pod["metadata"].get("uid") == uid and not is_terminal(pod)

    def _unprotect(self, stored: Any, ns: str) -> None:
        new = stored.copy()
        new["metadata"]["finalizers"] = [f for f in new["metadata"].get("finalizers") or [] if f != DELETE_PROTECTION]
        self.store.update_stored(CLAIM_RT, new, ns)

    def _sync_claim(self, ns: str, name: str) -> None:
        try:
            stored = self.store.get_stored(CLAIM_RT, name, ns)
        except ApiError:
            return
        claim = stored.obj
        reserved = reserved_for(claim)
        valid = [r for r in reserved
                 if r.get("resource") != "pods" or r.get("apiGroup")
                 or self._pod_live(ns, r.get("name", ""), r.get("uid", ""))]
        protected = DELETE_PROTECTION in (claim["metadata"].get("finalizers") or [])
        if len(valid) < len(reserved):
            # the last consumer gone: the claim is deallocated, and then loses the scheduler's
            # finalizer; a claim never reserved is left alone (a scheduler protects a claim,
            # then writes its allocation and reservation together)
            new = stored.copy()
            status = new.setdefault("status", {})
            if valid:
                status["reservedFor"] = valid
            else:
                status.pop("reservedFor", None)
                status.pop("allocation", None)  # deallocated: nobody uses it any more
            stored = self.store.commit_update(CLAIM_RT, stored, new)
            if protected and allocation(stored.obj) is None:
                self._unprotect(stored, ns)
        elif protected and not valid and claim["metadata"].get("deletionTimestamp"):
            # deleted while allocated and unused: deallocated, and the finalizer goes so it can go
            if allocation(claim) is not None:
                new = stored.copy()
                new.setdefault("status", {}).pop("allocation", None)
                stored = self.store.commit_update(CLAIM_RT, stored, new)
            self._unprotect(stored, ns)
        owner = _owner_pod(claim)
        if not valid and owner is not None and not self._pod_live(ns, *owner) \
                and not claim["metadata"].get("deletionTimestamp"):
            try:
                self.store.delete_stored(CLAIM_RT, name, ns)
            except ApiError:
                pass  # gone already
