"""The ClusterRoles a cluster has for its storage controllers (and the resourceclaim controller), and who holds them.

kube-controller-manager's bootstrap policy gives each controller a ClusterRole
``system:controller:<name>`` bound to its ServiceAccount in ``kube-system``; the CSI drivers'
installs give their external-provisioner ``external-provisioner-runner``. The sandbox's stand-ins
write to the store directly, so these roles decide nothing for them; they are served so that
``kubectl get clusterroles``, ``kubectl auth can-i --as=system:serviceaccount:kube-system:...`` and
a reader of the RBAC see what a cluster grants. A tenant's claims need only ``create`` on
``persistentvolumeclaims`` in its namespace: volumes, classes, CSINodes and capacities are the
cluster's (read with a ClusterRole, written by these controllers).
"""

from __future__ import annotations

from typing import Any

JsonObject = dict[str, Any]

_READ = ["get", "list", "watch"]
_EVENTS = {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]}


def _rule(group: str, resources: list[str], verbs: list[str]) -> JsonObject:
    return {"apiGroups": [group], "resources": resources, "verbs": verbs}


STORAGE_ROLES: dict[str, tuple[str, list[JsonObject]]] = {
    "system:controller:persistent-volume-binder": ("persistent-volume-binder", [
        _rule("", ["persistentvolumes"], ["create", "delete", *_READ, "update"]),
        _rule("", ["persistentvolumes/status"], ["update"]),
        _rule("", ["persistentvolumeclaims"], [*_READ, "update"]),
        _rule("", ["persistentvolumeclaims/status"], ["update"]),
        _rule("", ["pods"], ["create", "delete", *_READ]),
        _rule("storage.k8s.io", ["storageclasses"], _READ),
        _rule("", ["nodes"], ["get", "list"]),
        _EVENTS,
    ]),
    "system:controller:pvc-protection-controller": ("pvc-protection-controller", [
        _rule("", ["persistentvolumeclaims"], [*_READ, "update"]),
        _rule("", ["pods"], _READ),
        _EVENTS,
    ]),
    "system:controller:pv-protection-controller": ("pv-protection-controller", [
        _rule("", ["persistentvolumes"], [*_READ, "update"]),
        _EVENTS,
    ]),
    "system:controller:ephemeral-volume-controller": ("ephemeral-volume-controller", [
        _rule("", ["pods"], _READ),
        _rule("", ["pods/finalizers"], ["update"]),
        _rule("", ["persistentvolumeclaims"], ["create", *_READ]),
        _EVENTS,
    ]),
    "external-provisioner-runner": ("csi-provisioner", [
        _rule("", ["persistentvolumes"], [*_READ, "create", "patch", "delete"]),
        _rule("", ["persistentvolumeclaims"], [*_READ, "update"]),
        _rule("storage.k8s.io", ["storageclasses", "csinodes"], _READ),
        _rule("storage.k8s.io", ["csistoragecapacities"], [*_READ, "create", "update", "patch", "delete"]),
        _rule("", ["nodes"], _READ),
        _EVENTS,
    ]),
}
"""ClusterRole name -> (the kube-system ServiceAccount bound to it, its rules)."""

_RESOURCE = "resource.k8s.io"
DRA_ROLES: dict[str, tuple[str, list[JsonObject]]] = {
    "system:controller:resource-claim-controller": ("resource-claim-controller", [
        _rule("", ["pods"], ["get", "list", "watch"]),
        _rule("", ["pods/finalizers"], ["update"]),
        _rule("", ["pods/status"], ["update", "patch"]),
        _rule(_RESOURCE, ["resourceclaims"], ["get", "list", "watch", "create", "delete", "update", "patch"]),
        _rule(_RESOURCE, ["resourceclaims/status"], ["update", "patch"]),
        _rule(_RESOURCE, ["resourceclaimtemplates"], _READ),
        _EVENTS,
    ]),
}
"""The resourceclaim controller's role (:mod:`.dra_controller`), bound as the storage ones are."""

