"""Events the sandbox's controller stand-ins record, as ``client-go``'s event recorder writes them.

A controller that tells a user something on a real cluster does it with a core/v1 Event about
the object (``kubectl describe`` and ``kubectl get events`` show them): the PV controller's
``WaitForFirstConsumer`` and ``ExternalProvisioning``, the provisioner's ``Provisioning``,
``ProvisioningSucceeded`` and ``ProvisioningFailed``, the kubelet's ``FailedMount``, the
attach/detach controller's ``FailedAttachVolume``. :func:`record` writes one the way the recorder
does: named ``<object>.<hex>``, ``source.component`` (and ``host`` for a kubelet), and the same
event again (same object, reason, message and source) counted on the one Event rather than
written anew, with ``lastTimestamp`` moved.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from .kinds import RESOURCE_TYPES, Resource
from .store import ApiError, Store

JsonObject = dict[str, Any]

EVENTS = RESOURCE_TYPES[Resource.EVENTS]


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


def record(store: Store, obj: JsonObject, type_: EventType, reason: str, message: str, component: str,
           host: str | None = None) -> None:
    """Record (or count again) an event about ``obj`` from ``component``."""
    meta = obj["metadata"]
    namespace = meta.get("namespace") or "default"
    now = store.now()
    involved = {"kind": obj.get("kind", ""), "namespace": meta.get("namespace", ""), "name": meta["name"],
                "uid": meta.get("uid", ""), "apiVersion": obj.get("apiVersion", ""),
                "resourceVersion": meta.get("resourceVersion", "")}
    if not involved["namespace"]:
        involved.pop("namespace")
    source = {"component": component, **({"host": host} if host else {})}
    for stored in store.list(EVENTS, namespace=namespace, field_selector=f"involvedObject.uid={involved['uid']}").items:
        event = stored.obj
        if (event.get("reason"), event.get("message"), event.get("source")) == (reason, message, source):
            again = stored.copy()
            again["count"] = int(event.get("count") or 1) + 1
            again["lastTimestamp"] = now
            store.commit_update(EVENTS, stored, again)
            return
    key = f"{meta['name']}.{store.resource_version + 1:016x}"  # unique: the next commit's resourceVersion
    try:
        store.create(Resource.EVENTS, {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": key, "namespace": namespace},
            "involvedObject": involved, "reason": reason, "message": message, "type": str(type_),
            "source": source, "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "reportingComponent": component, "reportingInstance": host or "",
        }, namespace)
    except ApiError:
        pass  # the namespace went away with the object: nobody is left to tell
