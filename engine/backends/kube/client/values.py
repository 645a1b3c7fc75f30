"""The plain values the Kubernetes API client speaks in: objects as decoded JSON, resource paths,
watch events, the references and timestamps an Event carries, and the string enums of the API.

They sit below everything else in the client (errors, transport, calls) and import none of it, so
any module of the kube backend may name them without pulling in aiohttp.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

Obj = dict[str, Any]
"""A Kubernetes object (or list, or Status) as decoded JSON."""
Objs = list[Obj]

COMPONENT = "usher"
"""Who usher is in what it writes: Events' ``source.component``, the client's User-Agent."""


class PatchType(StrEnum):
    """How a PATCH body is interpreted (its Content-Type)."""

    MERGE = "application/merge-patch+json"
    STRATEGIC = "application/strategic-merge-patch+json"
    JSON = "application/json-patch+json"


class WatchEventType(StrEnum):
    """The ``type`` of one watch event."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    BOOKMARK = "BOOKMARK"
    ERROR = "ERROR"


class EventType(StrEnum):
    """The ``type`` of a core v1 Event."""

    NORMAL = "Normal"
    WARNING = "Warning"


class ConditionStatus(StrEnum):
    """The ``status`` of a pod condition."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One change from a watch stream (ADDED, MODIFIED, DELETED or BOOKMARK)."""

    type: WatchEventType
    object: Obj

    @property
    def resource_version(self) -> str:
        return str(self.object.get("metadata", {}).get("resourceVersion", ""))


@dataclass(frozen=True, slots=True)
class ObjectList:
    """The items of a (possibly paginated) list and the resourceVersion to watch from."""

    items: Objs
    resource_version: str


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """What an Event is about (its ``involvedObject``). Give the ``uid``: ``kubectl describe``
    lists an object's Events by ``involvedObject.uid``, so an Event without it is in no
    ``describe``; the ``resourceVersion`` says which version of the object it is about, as
    client-go's ``reference.GetReference`` sets it."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"
    resource_version: str = ""

    @classmethod
    def to(cls, obj: Obj, kind: str, api_version: str = "v1") -> ObjectRef:
        """The reference to ``obj`` as it is now (its kind and apiVersion given: a watched or
        listed item may not carry them)."""
        meta = obj.get("metadata") or {}
        return cls(str(obj.get("kind") or kind), str(meta.get("name", "")), str(meta.get("namespace", "")), str(meta.get("uid", "")),
                   str(obj.get("apiVersion") or api_version), str(meta.get("resourceVersion", "")))

    def as_dict(self) -> Obj:
        ref: Obj = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.namespace:
            ref["namespace"] = self.namespace
        if self.uid:
            ref["uid"] = self.uid
        if self.resource_version:
            ref["resourceVersion"] = self.resource_version
        return ref


@dataclass(frozen=True, slots=True)
class Resource:
    """A resource type and the URL paths of its collections, objects and subresources."""

    api_version: str
    plural: str

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """``/api/v1/namespaces/ns/pods/name/binding`` and the like (unset parts left out)."""
        root = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        parts = [root]
        if namespace:
            parts += ["namespaces", namespace]
        parts.append(self.plural)
        if name:
            parts.append(name)
        if subresource:
            parts.append(subresource)
        return "/".join(parts)


PODS = Resource("v1", "pods")
NODES = Resource("v1", "nodes")
EVENTS = Resource("v1", "events")
LEASES = Resource("coordination.k8s.io/v1", "leases")
SELF_SUBJECT_ACCESS_REVIEWS = Resource("authorization.k8s.io/v1", "selfsubjectaccessreviews")


def format_time(moment: datetime) -> str:
    """A ``metav1.Time``: RFC 3339 in UTC with whole seconds."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(moment: datetime) -> str:
    """A ``metav1.MicroTime``: RFC 3339 in UTC with microseconds (``2006-01-02T15:04:05.000000Z``)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def utcnow() -> datetime:
    """Now, in UTC (what :func:`format_time` and :func:`format_micro_time` are given)."""
    return datetime.now(UTC)


def selector_params(label_selector: str | None, field_selector: str | None) -> dict[str, str]:
    """The query parameters of a list or watch restricted by label and field selectors."""
    params: dict[str, str] = {}
    if label_selector:
        params["labelSelector"] = label_selector
    if field_selector:
        params["fieldSelector"] = field_selector
    return params
