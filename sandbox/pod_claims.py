"""The claims controllers make for pods: generic ephemeral volumes and StatefulSet ``volumeClaimTemplates``.

**The ephemeral volume controller** (kube-controller-manager's ``ephemeral-volume``): for every
pod volume ``ephemeral.volumeClaimTemplate`` it creates the claim ``<pod>-<volume>`` in the pod's
namespace, with the template's labels, annotations and spec, owned by the pod (``controller:
true``, ``blockOwnerDeletion: true``), so the garbage collector deletes it with the pod. A claim
of that name that the pod does not own is left alone: the pod cannot use it, and the kubelet
says so ("PVC ns/x was not created for pod ns/p (pod is not owner)").

**StatefulSet claims** (:func:`statefulset_claims`, called by the StatefulSet stand-in before it
creates a pod): for each ``spec.volumeClaimTemplates[]`` the claim
``<template>-<statefulset>-<ordinal>``, labelled with the template's labels and the set's
``selector.matchLabels``, created if missing and never deleted (the default ``Retain`` retention
policy), and the pod's volume of the template's name pointing at it.
"""

from __future__ import annotations

import copy
from typing import Any

from .kinds import RESOURCE_TYPES, Resource
from .nodefit import is_terminal
from .parts import Host, Part
from .store import ApiError, Change, EventType, Store

JsonObject = dict[str, Any]

PVC_RT = RESOURCE_TYPES[Resource.PERSISTENTVOLUMECLAIMS]
POD_RT = RESOURCE_TYPES[Resource.PODS]


def ephemeral_volumes(pod: JsonObject) -> list[JsonObject]:
    return [v for v in (pod.get("spec") or {}).get("volumes") or []
            if isinstance(v, dict) and isinstance(v.get("ephemeral"), dict)]


def _claim_from_template(template: JsonObject, name: str, namespace: str, labels: dict[str, str] | None = None,
                         owner: JsonObject | None = None) -> JsonObject:
    meta = template.get("metadata") or {}
    metadata: JsonObject = {"name": name, "namespace": namespace}
    merged = {**(meta.get("labels") or {}), **(labels or {})}
    if merged:
        metadata["labels"] = merged
    if meta.get("annotations"):
        metadata["annotations"] = dict(meta["annotations"])
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": metadata,
            "spec": copy.deepcopy(template.get("spec") or {})}


class EphemeralVolumeController(Part):
    """Creates the claim of each generic ephemeral volume of a pod (see the module docstring)."""

    resources = (Resource.PODS,)

    def __init__(self, mgr: Host) -> None:
        super().__init__(mgr)
        self._pending: set[tuple[str, str]] = set()
        self._all = True

    def on_change(self, change: Change) -> None:
        if change.rt.resource == Resource.PODS and change.type is not EventType.DELETED and ephemeral_volumes(change.new.obj):
            meta = change.new.obj["metadata"]
            self._pending.add((meta.get("namespace", ""), meta["name"]))

    def resync(self) -> None:
        self._all = True

    def dirty(self) -> bool:
        return self._all or bool(self._pending)

    def reconcile(self) -> None:
        if self._all:
            keys = {(s.obj["metadata"].get("namespace", ""), s.obj["metadata"]["name"])
                    for s in self.stored(POD_RT) if ephemeral_volumes(s.obj)}
        else:
            keys = set(self._pending)
        self._all, self._pending = False, set()
        for ns, name in sorted(keys):
            self.mgr.guard(lambda ns=ns, name=name: self._sync(ns, name))

    def sync(self) -> None:  # pragma: no cover - reconcile is overridden
        pass

    def _sync(self, ns: str, name: str) -> None:
        try:
            pod = self.store.get_stored(POD_RT, name, ns).obj
        except ApiError:
            return
        if pod["metadata"].get("deletionTimestamp") or is_terminal(pod):
            return
        owner = {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": pod["metadata"]["uid"],
                 "controller": True, "blockOwnerDeletion": True}
        for volume in ephemeral_volumes(pod):
            claim_name = f"{name}-{volume.get('name', '')}"
            if self.store.exists(PVC_RT, claim_name, ns):
                continue  # ours already, or someone else's the pod cannot use
            template = volume["ephemeral"].get("volumeClaimTemplate") or {}
            try:
                self.store.create_stored(PVC_RT, _claim_from_template(template, claim_name, ns, owner=owner), ns)
            except ApiError:
                pass  # an invalid template: the pod's own validation refused it already


def statefulset_claims(store: Store, sts: JsonObject, pod: JsonObject, ordinal: int) -> None:
    """Create the claims of ``sts``'s ``volumeClaimTemplates`` for ``ordinal`` and point ``pod``'s volumes at them."""
    spec = sts.get("spec") or {}
    templates = [t for t in spec.get("volumeClaimTemplates") or [] if isinstance(t, dict)]
    if not templates:
        return
    ns, name = sts["metadata"].get("namespace", "default"), sts["metadata"]["name"]
    selector = dict((spec.get("selector") or {}).get("matchLabels") or {})
    volumes = pod["spec"].setdefault("volumes", [])
    for template in templates:
        template_name = (template.get("metadata") or {}).get("name", "")
        claim_name = f"{template_name}-{name}-{ordinal}"
        if not store.exists(PVC_RT, claim_name, ns):
            try:
                store.create_stored(PVC_RT, _claim_from_template(template, claim_name, ns, labels=selector), ns)
            except ApiError:
                pass  # the pod waits for it, as when the real controller's FailedCreate repeats
        volumes[:] = [v for v in volumes if v.get("name") != template_name]
        volumes.append({"name": template_name, "persistentVolumeClaim": {"claimName": claim_name}})
