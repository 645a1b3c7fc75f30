"""What the sandbox's operator stand-ins share: reading pods and their owners, building children
from templates with controller ``ownerReferences``, and :class:`CustomPart`, the base of a
controller of one custom resource kind (its watch, its children, its status writes).

Each operator is one module beside this one (:mod:`.operator_jobset`, :mod:`.operator_kubeflow`,
:mod:`.operator_kuberay`, :mod:`.operator_lws`, and the built-in :mod:`.statefulset_controller`),
one integration per kind behind this small base, as Kueue's jobframework has one per kind;
:mod:`.operators` wires them together.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from .kinds import RESOURCE_TYPES, Resource, ResourceType
from .nodefit import condition, controller_ref, is_terminal
from .store import ApiError, Change, Stored
from .workloads import OwnerPart, owner_reference

JsonObject = dict[str, Any]

POD_RT = RESOURCE_TYPES[Resource.PODS]


# ====================================================================== helpers


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()  # the operators' key, not a secret


def labels_of(obj: JsonObject) -> dict[str, str]:
    return obj["metadata"].get("labels") or {}


def annotations_of(obj: JsonObject) -> dict[str, str]:
    return obj["metadata"].get("annotations") or {}


def deleting(obj: JsonObject) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def phase(pod: JsonObject) -> str:
    return (pod.get("status") or {}).get("phase", "")


def live(pod: JsonObject) -> bool:
    """Not terminal and not being deleted: a pod that still counts."""
    return not deleting(pod) and not is_terminal(pod)


def restarted(pod: JsonObject) -> bool:
    status = pod.get("status") or {}
    return any(int(s.get("restartCount") or 0) > 0
               for s in [*(status.get("containerStatuses") or []), *(status.get("initContainerStatuses") or [])])


def exit_code(pod: JsonObject, container: str | None = None) -> int | None:
    """The exit code of ``container`` (else the first container that terminated)."""
    for s in (pod.get("status") or {}).get("containerStatuses") or []:
        if container is not None and s.get("name") != container:
            continue
        term = (s.get("state") or {}).get("terminated")
        if term is not None:
            return int(term.get("exitCode", 0))
    return None


def cond_true(obj: JsonObject, type_: str) -> bool:
    return (condition(obj, type_) or {}).get("status") == "True"


def add_env(container: JsonObject, name: str, value: str | None = None, field: str | None = None) -> None:
    """Append an env variable unless the container sets it already (the user's value wins)."""
    env = container.setdefault("env", [])
    if any(e.get("name") == name for e in env):
        return
    if field is not None:
        env.append({"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": field}}})
    else:
        env.append({"name": name, "value": value})


def pod_from_template(template: JsonObject, namespace: str, owner_ref: JsonObject, *, name: str | None = None,
                      generate_name: str | None = None, labels: dict[str, str] | None = None,
                      annotations: dict[str, str] | None = None) -> JsonObject:
    meta = copy.deepcopy(template.get("metadata") or {})
    metadata: JsonObject = {"namespace": namespace,
                            "labels": {**(meta.get("labels") or {}), **(labels or {})},
                            "ownerReferences": [owner_ref]}
    if name is not None:
        metadata["name"] = name
    else:
        metadata["generateName"] = generate_name
    merged = {**(meta.get("annotations") or {}), **(annotations or {})}
    if merged:
        metadata["annotations"] = merged
    if meta.get("finalizers"):
        metadata["finalizers"] = list(meta["finalizers"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": copy.deepcopy(template.get("spec") or {})}


def headless_service(name: str, namespace: str, owner_ref: JsonObject, selector: dict[str, str], *,
                     labels: dict[str, str] | None = None, ports: list[JsonObject] | None = None,
                     publish_not_ready: bool = False) -> JsonObject:
    spec: JsonObject = {"clusterIP": "None", "selector": dict(selector)}
    if ports:
        spec["ports"] = ports
    if publish_not_ready:
        spec["publishNotReadyAddresses"] = True
    meta: JsonObject = {"name": name, "namespace": namespace, "ownerReferences": [owner_ref]}
    if labels:
        meta["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}


def format_cpu(millis: int) -> str:
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


class CustomPart(OwnerPart):
    """The controller of one custom kind, idle while its CRD is not served.

    ``child_kinds``: changes to objects of these kinds (pods, Jobs, ...) whose controller is of
    :attr:`kind` make it reconcile.
    """

    key: str = ""
    kind: str = ""
    child_keys: tuple[str, ...] = (POD_RT.key,)

    @property
    def rt(self) -> ResourceType | None:
        try:
            return self.store.resource_type(self.key)
        except ApiError:
            return None

    def on_change(self, change: Change) -> None:
        ref = controller_ref(change.new.obj) or {}
        if change.rt.key == self.key or (change.rt.key in self.child_keys and ref.get("kind") == self.kind):
            self._dirty = True

    def sync(self) -> None:
        rt = self.rt
        if rt is None:
            return
        for stored in list(self.store.list(rt).items):
            if deleting(stored.obj):
                continue
            self.mgr.guard(lambda s=stored, t=rt: self.reconcile_one(t, s))

    def reconcile_one(self, rt: ResourceType, stored: Stored) -> None:
        raise NotImplementedError

    def ref(self, owner: JsonObject, rt: ResourceType) -> JsonObject:
        return owner_reference(owner, rt)

    def create(self, rt: ResourceType, obj: JsonObject, namespace: str | None) -> Stored | None:
        """Create a child; ``None`` when the name is still taken (an older one on its way out)."""
        try:
            return self.store.create_stored(rt, obj, namespace)
        except ApiError:
            return None

    def ensure(self, rt: ResourceType, owner: JsonObject, obj: JsonObject) -> None:
        """Create ``obj`` unless the owner has a child of that name already."""
        name = obj["metadata"]["name"]
        if not any(s.obj["metadata"]["name"] == name for s in self.owned(owner, rt)):
            self.create(rt, obj, owner["metadata"].get("namespace"))

    def save_status(self, rt: ResourceType, stored: Stored, status: JsonObject) -> None:
        if status != (stored.obj.get("status") or {}):
            self.write_status(rt, stored, status)
