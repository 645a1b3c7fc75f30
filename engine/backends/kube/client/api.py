"""The Kubernetes API calls usher makes: :class:`KubeClient`, the typed face of the transport.

Generic verbs (get, list with pagination, watch, create, replace with its resourceVersion
precondition, patch, delete) and the calls the scheduler needs by name: bind a pod (a repeat to
the same node is success), evict one through the Eviction API (with its uid precondition and dry
run), cordon a node, set a pod condition, record an Event, ask a SelfSubjectAccessReview (cached).
Each says which of its requests are safe to repeat; how they are sent and repeated is the
:class:`~.transport.Transport`'s, and a watch's stream is :mod:`.watching`'s.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from .credentials import Credentials
from .errors import DEMO_HINT, AlreadyExists, Conflict, KubeConfigError, NotFound, one_line
from .retry import RetryPolicy
from .transport import MaySend, Transport
from .values import (
    COMPONENT,
    EVENTS,
    NODES,
    PODS,
    SELF_SUBJECT_ACCESS_REVIEWS,
    ConditionStatus,
    EventType,
    Obj,
    ObjectList,
    ObjectRef,
    Objs,
    PatchType,
    WatchEvent,
    format_time,
    selector_params,
    utcnow,
)
from .watching import watch_events


class KubeClient(Transport):
    """Requests and watches against one API server, with retries and credential refresh.

    Build it with :meth:`connect` (loads credentials and checks the server answers), use it as
    an async context manager or call :meth:`aclose`. ``sleep`` is how retries wait (injectable,
    so tests can see the delays).
    """

    def __init__(
        self,
        credentials: Credentials,
        *,
        retry: RetryPolicy | None = None,
        pool_size: int = 16,
        timeout: float = 30.0,
        review_ttl: float = 60.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        super().__init__(credentials, retry=retry, pool_size=pool_size, timeout=timeout, sleep=sleep)
        self._review_ttl = review_ttl
        #: SelfSubjectAccessReview answers: (verb, group, resource, subresource, namespace, name)
        #: -> (until when it holds, monotonic; allowed)
        self._reviews: dict[tuple[str, ...], tuple[float, bool]] = {}

    @classmethod
    async def connect(
        cls, kubeconfig: str | None = None, context: str | None = None, **options: Any
    ) -> KubeClient:
        """Load credentials, build the client and make sure the API server answers."""
        credentials = Credentials(kubeconfig, context)
        await asyncio.to_thread(credentials.load)
        try:
            client = cls(credentials, **options)
        except OSError as exc:  # unreadable CA or client certificate files (ssl.SSLError too)
            raise KubeConfigError(
                f"bad TLS material in {credentials.describe()}: {one_line(exc)}; {DEMO_HINT}"
            ) from exc
        try:
            await client._probe()
        except BaseException:
            await client.aclose()
            raise
        return client

    # --- generic operations ---

    async def get(self, path: str, *, params: Mapping[str, str] | None = None) -> Obj:
        return await self._call("GET", path, params=params)

    async def get_text(self, path: str, *, params: Mapping[str, str] | None = None) -> str:
        """A GET whose answer is plain text (a pod's ``log``), with the same retries and errors."""
        return await self._call("GET", path, params=params, as_text=True)

    async def list(
        self,
        path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 500,
    ) -> ObjectList:
        """All objects under a collection path, fetched ``limit`` at a time."""
        params = selector_params(label_selector, field_selector) | {"limit": str(limit)}
        items: Objs = []
        while True:
            page = await self._call("GET", path, params=params)
            items.extend(page.get("items") or [])
            metadata = page.get("metadata") or {}
            token = metadata.get("continue")
            if not token:
                return ObjectList(items, str(metadata.get("resourceVersion", "")))
            params = params | {"continue": token}

    def watch(
        self,
        path: str,
        *,
        resource_version: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
        on_open: Callable[[], None] | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """Changes under a collection path after ``resource_version``, bookmarks included.

        The iterator ends when the server closes the stream (resume from the last
        resourceVersion seen); a broken or silent connection raises :class:`ClusterUnreachable`;
        a resourceVersion too old to resume from raises :class:`Gone`, whether the server says
        so with HTTP 410 or with an ERROR event. Close the iterator (``contextlib.aclosing``)
        to stop watching early. ``on_open`` is called once the server has accepted the watch
        (its response began), which on a quiet collection may be long before the first event.
        """
        return watch_events(
            self,
            path,
            resource_version=resource_version,
            label_selector=label_selector,
            field_selector=field_selector,
            timeout_seconds=timeout_seconds,
            on_open=on_open,
        )

    async def create(self, path: str, obj: Obj, *, retry_ambiguous: bool = False) -> Obj:
        """POST ``obj`` to a collection. Set ``retry_ambiguous`` only if a repeat is harmless."""
        return await self._call("POST", path, body=obj, retry_ambiguous=retry_ambiguous)

    async def replace(self, path: str, obj: Obj) -> Obj:
        """PUT ``obj``; its ``metadata.resourceVersion`` is the precondition (stale: Conflict)."""
        if not obj.get("metadata", {}).get("resourceVersion"):
            raise ValueError(f"replace {path}: the object carries no metadata.resourceVersion")
        return await self._call("PUT", path, body=obj)

    async def patch(
        self, path: str, patch: Obj | Objs, *, patch_type: PatchType = PatchType.MERGE, may_send: MaySend | None = None
    ) -> Obj:
        return await self._call(
            "PATCH",
            path,
            body=patch,
            content_type=patch_type,
            retry_ambiguous=patch_type is not PatchType.JSON,
            may_send=may_send,
        )

    async def delete(self, path: str, *, resource_version: str | None = None) -> Obj:
        """DELETE, optionally only if the object is still at ``resource_version``."""
        options: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if resource_version:
            options["preconditions"] = {"resourceVersion": resource_version}
        return await self._call("DELETE", path, body=options)

    # --- helpers for the scheduler ---

    async def bind(
        self, namespace: str, pod: str, node: str, annotations: Mapping[str, str] | None = None, uid: str | None = None,
        may_send: MaySend | None = None,
    ) -> None:
        """Bind a pod to a node. Already bound to that node (a repeat) is success; already
        bound elsewhere raises :class:`Conflict`. With ``uid`` (as kube-scheduler sends it), only
        that incarnation of the pod is bound: one created again under the name is a Conflict.
        ``may_send`` is asked before each attempt (:class:`NotSent` when it says no)."""
        metadata: Obj = {"name": pod, "namespace": namespace, "annotations": dict(annotations or {})}
        if uid:
            metadata["uid"] = uid
        binding: Obj = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            await self._call("POST", PODS.path(namespace, pod, "binding"), body=binding, retry_ambiguous=True, may_send=may_send)
        except Conflict:
            current = await self.get(PODS.path(namespace, pod))
            same = not uid or current.get("metadata", {}).get("uid") == uid
            if current.get("spec", {}).get("nodeName") != node or not same:
                raise

    async def evict(self, namespace: str, pod: str, uid: str | None = None, dry_run: bool = False,
                    may_send: MaySend | None = None) -> bool:
        """Evict a pod through the Eviction API: True if accepted, False if the pod is gone.

        With ``uid``, only that incarnation of the pod is evicted (a precondition): a pod created
        again under the same name is left alone, and counts as gone. A PodDisruptionBudget that
        forbids it raises :class:`DisruptionBudgetBlocked` at once. With ``dry_run`` the server
        only checks (``dryRun=All``): the pod stays. ``may_send`` is asked before each attempt
        (:class:`NotSent` when it says no).
        """
        eviction: Obj = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": namespace},
        }
        if uid:
            eviction["deleteOptions"] = {"preconditions": {"uid": uid}}
        try:
            params = {"dryRun": "All"} if dry_run else None
            await self._call("POST", PODS.path(namespace, pod, "eviction"), params=params, body=eviction, retry_ambiguous=True,
                             may_send=may_send)
        except NotFound:
            return False
        except Conflict:
            if uid:
                return False  # the precondition failed: the pod we meant is gone
            raise
        return True

    async def set_unschedulable(self, node: str, unschedulable: bool) -> Obj:
        """Cordon (True) or uncordon (False) a node."""
        return await self.patch(NODES.path(name=node), {"spec": {"unschedulable": unschedulable}})

    async def patch_pod_condition(
        self,
        namespace: str,
        pod: str,
        type: str,
        status: ConditionStatus,
        reason: str,
        message: str,
        may_send: MaySend | None = None,
    ) -> Obj:
        """Set one condition on a pod's status (others are kept: strategic merge by ``type``).

        ``status`` is ``True``, ``False`` or ``Unknown`` (a plain string is checked)."""
        condition = {
            "type": type,
            "status": str(ConditionStatus(status)),
            "reason": reason,
            "message": message,
            "lastTransitionTime": format_time(utcnow()),
        }
        return await self.patch(
            PODS.path(namespace, pod, "status"),
            {"status": {"conditions": [condition]}},
            patch_type=PatchType.STRATEGIC,
            may_send=may_send,
        )

    async def create_event(
        self, about: ObjectRef, reason: str, message: str, type: EventType = EventType.NORMAL
    ) -> Obj:
        """Record a core v1 Event from usher about an object (cluster-scoped ones: ``default``)."""
        namespace = about.namespace or "default"
        now = format_time(utcnow())
        event: Obj = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{about.name}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
            "involvedObject": about.as_dict(),
            "reason": reason,
            "message": message,
            "type": str(EventType(type)),
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
        }
        try:
            return await self.create(EVENTS.path(namespace), event, retry_ambiguous=True)
        except AlreadyExists:
            return event

    async def access_review(
        self, verb: str, resource: str, namespace: str = "", subresource: str = "", group: str = "", name: str = ""
    ) -> bool:
        """May usher's identity do this (to the object ``name``, if given)? Asked with a
        SelfSubjectAccessReview, answers cached. RBAC grants restricted by ``resourceNames`` allow
        a review only when it names the object."""
        key = (verb, group, resource, subresource, namespace, name)
        cached = self._reviews.get(key)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        attributes = {"verb": verb, "group": group, "resource": resource}
        if namespace:
            attributes["namespace"] = namespace
        if subresource:
            attributes["subresource"] = subresource
        if name:
            attributes["name"] = name
        review: Obj = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        answer = await self.create(SELF_SUBJECT_ACCESS_REVIEWS.path(), review, retry_ambiguous=True)
        allowed = bool(answer.get("status", {}).get("allowed"))
        self._reviews[key] = (time.monotonic() + self._review_ttl, allowed)
        return allowed
