"""The sandbox's in-memory object store: what etcd and the registry are to a real API server.

Objects are JSON dicts keyed by ``(resource, namespace, name)``. Every write goes through one
commit path that stamps ``metadata.resourceVersion`` from a single global counter, records a
change in a bounded per-resource history (so a watch from a resourceVersion older than the
history answers ``410 Expired``, as after an etcd compaction) and hands the change to live
subscriptions. The HTTP front (:mod:`usher.sandbox.apiserver`) and in-process callers (the kubelet
stand-in, test harnesses) use the same methods, so both see identical resourceVersions and watch
events.

Semantics follow the Kubernetes registry for the resources the sandbox serves:

- create fills ``uid``, ``resourceVersion``, ``creationTimestamp`` (RFC 3339 from the injectable
  ``clock``), ``generation`` (for kinds that track it), honours ``generateName``, rejects a
  duplicate with ``409 AlreadyExists`` and a namespace that does not exist with ``404``; a pod's
  status is reset to ``Pending`` and its spec defaulted (``schedulerName: default-scheduler``);
- update checks ``metadata.resourceVersion`` when the caller sends one (``409 Conflict`` when
  stale; none means unconditional), keeps the server-owned metadata, bumps ``generation`` when
  ``spec`` changes, keeps ``status`` for kinds with a status subresource (only the ``status``
  subresource changes it, and it changes nothing else), refuses changes to a pod's spec other
  than the mutable fields, and is a no-op (no new resourceVersion, no event) when nothing changed;
- patch applies a JSON merge patch (strategic merge patch is treated as one) or an RFC 6902 JSON
  patch to the current object and then updates it, so a resourceVersion in the patch is a
  precondition;
- delete is immediate and returns the deleted object stamped with the deletion's
  resourceVersion; deleting a namespace deletes what it holds.

Lists come sorted by namespace and name (etcd's key order). A list with ``limit`` returns a
``continue`` token; the following pages come from the same snapshot (objects are never mutated
after commit, so a snapshot is a list of references) until that snapshot expires.

The store is not thread-safe: use it from the event loop that serves it (``ServerThread.call``
runs a function there from another thread). Objects handed out are copies; the ``Stored``
records and ``Change.old``/``Change.new`` are the store's own and must not be mutated.

The records around the store live beside it, each importable from here too: refusals
(:mod:`.api_errors`), selectors (:mod:`.selection`), merge and JSON patches (:mod:`.patches`),
stored versions, changes and watch subscriptions (:mod:`.changes`) and each kind's rules on a
write (:mod:`.registry_rules`). What stays is one class over one set of tables, and it is longer
than the house's 600 lines on purpose: create, update, patch and delete share the tables, the
resourceVersion counter, the snapshots of paginated lists and the garbage collector's owner
index, and each write reads best as one sequence of steps in one place.
"""

from __future__ import annotations

import base64
import binascii
import builtins
import contextlib
import json
import random
import re
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from . import smp, storage
from .api_errors import ApiError, Reason, _patch_failed, failure_status
from .kinds import RESOURCE_TYPES, Catalogue, Resource, ResourceType, UnknownResource, crd_types
from .changes import (
    Change,
    EventType,
    ListResult,
    Stored,
    Subscription,
    WatchEvent,
    _copy,
    _dumps,
    watch_event_for,
)
from .patches import PatchType, json_patch, merge_patch
from .registry_rules import (
    _CHECKS,
    _STATUS_CHECKS,
    _DEFAULTERS,
    DEFAULT_TOLERATION_SECONDS,
    _admit_default_tolerations,
    _decode_quantities,
    _no_checks,
    _no_defaults,
    _validate,
)
from .schemas import schema_for
from .selection import FieldRequirement, FieldSelector, Filter, LabelSelector, field_value

JsonObject = dict[str, Any]

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
#: the highest priority a PriorityClass of a user may have (kube-apiserver's HighestUserDefinablePriority)
HIGHEST_USER_PRIORITY = 1_000_000_000
#: the PriorityClasses an API server makes at start: (name, value, description)
SYSTEM_PRIORITY_CLASSES = (
    ("system-node-critical", 2000001000, "Used for system critical pods that must not be moved from their current node."),
    ("system-cluster-critical", 2000000000, "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary."),
)


# --------------------------------------------------------------------------- the store


Key = tuple[str, str]
"""(namespace, name); the namespace is ``""`` for cluster-scoped objects."""


class _Table:
    """The objects of one resource, with their indexes and change history."""

    def __init__(self, rt: ResourceType, history: int) -> None:
        self.rt = rt
        self.objects: dict[Key, Stored] = {}
        self.by_namespace: dict[str, dict[str, Stored]] = {}
        self.by_field: dict[str, set[Key]] = {}
        self.history: deque[Change] = deque(maxlen=history)
        self.compacted_rv = 0
        """The resourceVersion of the newest change dropped from history: watches must start at or after it."""
        self.subscriptions: list[Subscription] = []
        self._sorted: list[Key] | None = None

    def put(self, key: Key, stored: Stored, old: Stored | None) -> None:
        if old is None:
            self._sorted = None
        self.objects[key] = stored
        self.by_namespace.setdefault(key[0], {})[key[1]] = stored
        self._reindex(key, old, stored)

    def remove(self, key: Key) -> Stored:
        old = self.objects.pop(key)
        self._sorted = None
        names = self.by_namespace[key[0]]
        del names[key[1]]
        if not names:
            del self.by_namespace[key[0]]
        self._reindex(key, old, None)
        return old

    def _reindex(self, key: Key, old: Stored | None, new: Stored | None) -> None:
        path = self.rt.field_path(self.rt.indexed_field) if self.rt.indexed_field else None
        if path is None:
            return
        before = field_value(old.obj, path) if old else None
        after = field_value(new.obj, path) if new else None
        if before == after:
            return
        if before is not None:
            keys = self.by_field[before]
            keys.discard(key)
            if not keys:
                del self.by_field[before]
        if after is not None:
            self.by_field.setdefault(after, set()).add(key)

    def record(self, change: Change) -> None:
        if len(self.history) == self.history.maxlen:
            self.compacted_rv = self.history[0].rv
        self.history.append(change)

    def compact(self, rv: int) -> None:
        self.history.clear()
        self.compacted_rv = rv

    def candidates(self, flt: Filter) -> Iterator[Stored]:
        """The objects that may match ``flt``, in key order, using the cheapest index."""
        indexed = self.rt.field_path(self.rt.indexed_field) if self.rt.indexed_field else None
        wanted = flt.fields.equality(indexed) if indexed else None
        if wanted is not None:
            keys = sorted(k for k in self.by_field.get(wanted, ()) if flt.namespace in (None, k[0]))
            return (self.objects[k] for k in keys)
        if flt.namespace is not None:
            names = self.by_namespace.get(flt.namespace, {})
            return (names[n] for n in sorted(names))
        if self._sorted is None:
            self._sorted = sorted(self.objects)
        return (self.objects[k] for k in self._sorted)


@dataclass(frozen=True, slots=True)
class _Snapshot:
    rv: int
    items: list[Stored]


_SERVER_OWNED_METADATA = (
    "uid",
    "creationTimestamp",
    "namespace",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)


class Propagation(StrEnum):
    """``DeleteOptions.propagationPolicy``: what happens to an object's dependents."""

    ORPHAN = "Orphan"
    BACKGROUND = "Background"
    FOREGROUND = "Foreground"


class Subresource(StrEnum):
    """Subresources that write through the store."""

    STATUS = "status"


class Operation(StrEnum):
    """The admission operation of a write (``admission.Operation``)."""

    CREATE = "CREATE"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    CONNECT = "CONNECT"


@dataclass(frozen=True, slots=True)
class Attempt:
    """A write as validating admission sees it, just before it is committed (``admission.Attributes``).

    ``obj`` is the object as it would be stored (``None`` for a delete), ``old`` the one stored
    now (``None`` for a create). For a subresource ``obj`` is what was sent to it (a Binding, an
    Eviction) unless the subresource writes the object itself (``status``); ``kind`` is then the
    sent object's (group, version, kind) when it differs from the resource's."""

    operation: Operation
    rt: ResourceType
    name: str
    namespace: str | None
    obj: JsonObject | None
    old: JsonObject | None
    subresource: str = ""
    kind: tuple[str, str, str] | None = None
    dry_run: bool = False


AdmissionHook = Callable[[Attempt], None]
"""A validating admission step: raises :class:`ApiError` to refuse the write."""


class Store:
    """The in-memory API storage. See the module docstring for the semantics.

    ``clock`` stamps creation times; ``history`` bounds each resource's change history (older
    watches get ``410``); ``seed`` makes uids and generated names reproducible; ``namespaces``
    exist from the start; ``max_snapshots`` bounds the paginated lists in progress;
    ``watch_buffer`` is how far a subscriber may fall behind before it is closed.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        *,
        history: int = 2000,
        seed: int | None = None,
        namespaces: Iterable[str] = DEFAULT_NAMESPACES,
        max_snapshots: int = 64,
        watch_buffer: int = 10_000,
    ) -> None:
        self.clock = clock
        self._rng = random.Random(seed)
        self._rv = 0
        self.catalogue = Catalogue()
        self.feature_gates: set[str] = set()
        """Alpha features turned on (``workload_api_beta.Gate``); none by default."""
        self._history = history
        self._tables = {rt.key: _Table(rt, history) for rt in self.catalogue.storage_types()}
        self._listeners: list[Callable[[Change], None]] = []
        self._snapshots: OrderedDict[int, _Snapshot] = OrderedDict()
        self._max_snapshots = max_snapshots
        self._watch_buffer = watch_buffer
        self._next_snapshot = 0
        self._owned: dict[str, set[tuple[str, Key]]] = {}
        """Owner uid -> the (table, key) of every object that names it in ``ownerReferences``."""
        self._listeners.append(self._index_owners)
        self._listeners.append(self._on_crd_change)
        self.admission: list[AdmissionHook] = []
        """Validating admission, run on every create and update through the store (and on the
        API server's deletes, bindings and evictions) after validation, before the commit."""
        for name in namespaces:
            self.create(Resource.NAMESPACES, {"metadata": {"name": name}})
        for name, value, description in SYSTEM_PRIORITY_CLASSES:
            self.create(Resource.PRIORITYCLASSES, {
                "metadata": {"name": name}, "value": value, "preemptionPolicy": "PreemptLowerPriority", "description": description,
            })

    def admit(self, attempt: Attempt) -> None:
        """Run the validating admission hooks on a write about to be committed."""
        for hook in self.admission:
            hook(attempt)

    # ------------------------------------------------------------------ custom resources

    def _on_crd_change(self, change: Change) -> None:
        """Serve a CRD's versions once it is created, and stop (deleting its objects) when it goes."""
        if change.rt.resource is not Resource.CUSTOMRESOURCEDEFINITIONS:
            return
        crd = change.new.obj
        if change.type is EventType.DELETED:
            self._drop_custom(crd_types(crd))
            return
        if change.old is not None and change.old.obj.get("spec") == crd.get("spec"):
            return
        types = crd_types(crd)
        storage = self.catalogue.register(types)
        if storage is not None and storage.key not in self._tables:
            self._tables[storage.key] = _Table(storage, self._history)
        elif storage is not None:
            self._tables[storage.key].rt = storage
        self._establish(change.new)

    def _drop_custom(self, types: builtins.list[ResourceType]) -> None:
        if not types:
            return
        key = types[0].key
        table = self._tables.get(key)
        if table is not None:
            for stored in builtins.list(table.objects.values()):
                meta = stored.obj["metadata"]
                self.delete_stored(table.rt, meta["name"], meta.get("namespace"), force=True)
            for subscription in builtins.list(table.subscriptions):
                subscription.close()
            del self._tables[key]
        self.catalogue.unregister(key)

    def _establish(self, stored: Stored) -> None:
        """What the apiextensions controllers write: names accepted, the CRD established."""
        crd = stored.copy()
        now = self.now()
        names = (crd.get("spec") or {}).get("names") or {}
        crd["status"] = {
            "acceptedNames": names,
            "storedVersions": [t.version for t in crd_types(crd)[:1]],
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                 "message": "no conflicts found", "lastTransitionTime": now},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                 "message": "the initial names have been accepted", "lastTransitionTime": now},
            ],
        }
        self.commit_update(self.resource_type(Resource.CUSTOMRESOURCEDEFINITIONS), stored, crd)

    def serve_builtin(self, types: builtins.list[ResourceType]) -> None:
        """Serve ``types`` (one built-in group resource's versions) in place of what is served of
        it now: another Kubernetes release's shape (:mod:`.workload_api_beta`)."""
        storage = self.catalogue.register(types)
        if storage is not None and storage.key not in self._tables:
            self._tables[storage.key] = _Table(storage, self._history)
        elif storage is not None:
            self._tables[storage.key].rt = storage

    # ------------------------------------------------------------------ reading

    @property
    def resource_version(self) -> int:
        """The newest committed resourceVersion."""
        return self._rv

    def now(self) -> str:
        """The clock's time as an RFC 3339 timestamp with second precision."""
        return rfc3339(self.clock())

    def get(self, resource: Resource | str, name: str, namespace: str | None = None) -> JsonObject:
        """A copy of the object; ``404`` when there is none."""
        return self.get_stored(resource, name, namespace).copy()

    def resource_type(self, resource: Resource | str | ResourceType) -> ResourceType:
        """The storage type of ``resource`` (a type, a plural, or ``plural.group``); ``404`` if not served."""
        try:
            return self.catalogue.storage(resource)
        except UnknownResource:
            raise ApiError(404, Reason.NOT_FOUND, f"the server doesn't have a resource type {str(resource)!r}") from None

    def get_stored(self, resource: Resource | str | ResourceType, name: str, namespace: str | None = None) -> Stored:
        rt = self.resource_type(resource)
        stored = self._tables[rt.key].objects.get(self._key(rt, namespace, name))
        if stored is None:
            raise ApiError.not_found(rt, name)
        return stored

    def exists(self, resource: Resource | str | ResourceType, name: str, namespace: str | None = None) -> bool:
        rt = self.resource_type(resource)
        return self._key(rt, namespace, name) in self._tables[rt.key].objects

    def list(
        self,
        resource: Resource | str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> ListResult:
        """The matching objects (``namespace`` ``None``: all namespaces), a page at a time with ``limit``."""
        rt = self.resource_type(resource)
        flt = self.filter(rt, namespace, label_selector, field_selector)
        return self.select(rt, flt, limit=limit, continue_token=continue_token)

    def filter(self, rt: ResourceType, namespace: str | None, labels: str | None, fields: str | None) -> Filter:
        """Parse selectors into a :class:`Filter` (``400`` on bad syntax or an unsupported field)."""
        return Filter(
            namespace if rt.namespaced else None, LabelSelector.parse(labels), FieldSelector.parse(fields, rt)
        )

    def select(
        self, rt: ResourceType, flt: Filter, *, limit: int | None = None, continue_token: str | None = None
    ) -> ListResult:
        if continue_token:
            snapshot, offset = self._resume(rt, continue_token)
        else:
            items = [s for s in self._tables[rt.key].candidates(flt) if flt.matches(s.obj)]
            snapshot, offset = _Snapshot(self._rv, items), 0
        if not limit or limit <= 0 or offset + limit >= len(snapshot.items):
            return ListResult(rt, snapshot.items[offset:], snapshot.rv)
        end = offset + limit
        token = self._remember(rt, snapshot, end, continue_token)
        return ListResult(rt, snapshot.items[offset:end], snapshot.rv, token, len(snapshot.items) - end)

    def _remember(self, rt: ResourceType, snapshot: _Snapshot, offset: int, previous: str | None) -> str:
        ident = _decode_token(previous)["id"] if previous else None
        if ident is None:
            ident = self._next_snapshot
            self._next_snapshot += 1
            self._snapshots[ident] = snapshot
            while len(self._snapshots) > self._max_snapshots:
                self._snapshots.popitem(last=False)
        token = {"v": "meta.k8s.io/v1", "rv": snapshot.rv, "id": ident, "offset": offset, "resource": rt.key}
        return base64.urlsafe_b64encode(_dumps(token)).decode()

    def _resume(self, rt: ResourceType, continue_token: str) -> tuple[_Snapshot, int]:
        token = _decode_token(continue_token)
        snapshot = self._snapshots.get(token["id"])
        if token.get("resource") != rt.key:
            raise ApiError.bad_request("continue key is not valid: it belongs to another resource")
        if snapshot is None or snapshot.rv < self._tables[rt.key].compacted_rv:
            raise ApiError.expired(
                "The provided continue parameter is too old to display a consistent list result. "
                "You can start a new list without the continue parameter, or use the continue token "
                "in this response to retrieve the remainder of the results."
            )
        return snapshot, token["offset"]

    def namespaced_objects(self, resource: Resource | str, namespace: str) -> builtins.list[Stored]:
        """The stored objects of one namespace, unsorted (for controllers that scan a namespace)."""
        return builtins.list(self._tables[self.resource_type(resource).key].by_namespace.get(namespace, {}).values())

    # ------------------------------------------------------------------ watching

    def watch(
        self,
        resource: Resource | str,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Subscription:
        """Subscribe to changes; see :meth:`subscribe` for ``resource_version``."""
        rt = self.resource_type(resource)
        return self.subscribe(rt, self.filter(rt, namespace, label_selector, field_selector), resource_version)

    def subscribe(self, rt: ResourceType, flt: Filter, resource_version: str | None) -> Subscription:
        """A subscription starting after ``resource_version``.

        ``None``, ``""`` or ``"0"``: synthetic ``ADDED`` events for every matching object, then
        changes after the current resourceVersion. A resourceVersion older than the history
        raises ``410 Expired``.
        """
        table = self._tables[rt.key]
        since = parse_resource_version(resource_version)
        if since == 0:
            backlog = [WatchEvent(EventType.ADDED, s) for s in table.candidates(flt) if flt.matches(s.obj)]
        else:
            if since < table.compacted_rv:
                raise ApiError.expired(f"too old resource version: {since} ({table.compacted_rv + 1})")
            backlog = [e for c in table.history if c.rv > since and (e := watch_event_for(c, flt))]
        subscription = Subscription(self._unsubscribe, rt, flt, backlog, self._watch_buffer)
        table.subscriptions.append(subscription)
        return subscription

    def _unsubscribe(self, subscription: Subscription) -> None:
        subscriptions = self._tables[subscription.rt.key].subscriptions
        if subscription in subscriptions:
            subscriptions.remove(subscription)

    def add_listener(self, listener: Callable[[Change], None]) -> None:
        """Call ``listener`` synchronously after every commit (after the watchers got the event)."""
        self._listeners.append(listener)

    def compact(self) -> None:
        """Forget all history, as an etcd compaction: older watches and continue tokens get ``410``."""
        for table in self._tables.values():
            table.compact(self._rv)
        self._snapshots.clear()

    # ------------------------------------------------------------------ writing

    def create(self, resource: Resource | str, obj: JsonObject, namespace: str | None = None) -> JsonObject:
        """Create ``obj`` (in ``namespace``, else its own, else ``default``) and return it as stored."""
        return self.create_stored(self.resource_type(resource), _copy(obj), namespace).copy()

    def create_stored(self, rt: ResourceType, obj: JsonObject, namespace: str | None) -> Stored:
        """Create from an object the caller hands over (it is modified)."""
        _decode_quantities(rt, obj)
        meta = self._prepare_identity(rt, obj, namespace)
        table = self._tables[rt.key]
        key = (meta.get("namespace", ""), meta["name"])
        if key in table.objects:
            raise ApiError.already_exists(rt, meta["name"])
        if rt.namespaced and ("", key[0]) not in self._tables[Resource.NAMESPACES.value].objects:
            raise ApiError.not_found(RESOURCE_TYPES[Resource.NAMESPACES], key[0])
        meta["uid"] = str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
        meta["creationTimestamp"] = self.now()
        meta.pop("resourceVersion", None)
        if rt.tracks_generation:
            meta["generation"] = 1
        if rt.resource is Resource.PODS:
            self._admit_priority(obj)
            _admit_default_tolerations(obj)
        elif rt.resource is Resource.PRIORITYCLASSES:
            self._admit_priority_class(rt, obj)
        storage.admit_create(rt, obj, self._storage_classes)
        _DEFAULTERS.get(rt.key, _no_defaults)(obj, True)
        _validate(rt, obj)
        _decode_quantities(rt, obj, canonical=True)
        self.admit(Attempt(Operation.CREATE, rt, meta["name"], meta.get("namespace"), obj, None))
        return self._commit(EventType.ADDED, rt, key, obj, None)

    def _admit_priority_class(self, rt: ResourceType, pc: JsonObject) -> None:
        """kube-apiserver's rules for a new PriorityClass: ``system-`` names and values above
        one billion belong to the system's own classes; only one class may be ``globalDefault``."""
        name = pc["metadata"]["name"]
        system = {n: v for n, v, _ in SYSTEM_PRIORITY_CLASSES}
        if name.startswith("system-"):
            if system.get(name) != pc.get("value"):
                raise ApiError.forbidden(
                    "priorityclasses", name, "priority class names with 'system-' prefix are reserved for system use only", "scheduling.k8s.io"
                )
        elif isinstance(pc.get("value"), int) and pc["value"] > HIGHEST_USER_PRIORITY:
            raise ApiError.invalid(rt, name, "value", "FieldValueForbidden",
                                   f"Forbidden: maximum allowed value of a user defined priority is {HIGHEST_USER_PRIORITY}")
        if pc.get("globalDefault"):
            table = self._tables[rt.key].objects
            other = next((s.obj["metadata"]["name"] for s in table.values() if s.obj.get("globalDefault")), None)
            if other is not None:
                raise ApiError.forbidden(
                    "priorityclasses", name, f"PriorityClass {other} is already marked as default. Only one default can exist", "scheduling.k8s.io"
                )

    def _admit_priority(self, pod: JsonObject) -> None:
        """The Priority admission plugin on a new pod: ``spec.priority`` and
        ``spec.preemptionPolicy`` come from its ``priorityClassName`` (else the class marked
        ``globalDefault``, else priority 0). A class that does not exist, or a priority or policy
        written in the spec that differs from the class's, is refused with 403 Forbidden."""
        spec = pod.setdefault("spec", {})
        name = pod["metadata"]["name"]
        classes = self._tables[RESOURCE_TYPES[Resource.PRIORITYCLASSES].key].objects
        wanted = spec.get("priorityClassName")
        chosen: JsonObject | None = None
        if wanted:
            stored = classes.get(("", wanted))
            if stored is None:
                raise ApiError.forbidden("pods", name, f"no PriorityClass with name {wanted} was found")
            chosen = stored.obj
        else:
            defaults = [s.obj for s in classes.values() if s.obj.get("globalDefault")]
            if defaults:  # one at most (``_admit_priority_class``); the lowest, as kube-apiserver
                chosen = min(defaults, key=lambda c: int(c.get("value", 0)))
                spec["priorityClassName"] = chosen["metadata"]["name"]
        value = int(chosen.get("value", 0)) if chosen is not None else 0
        if spec.get("priority") is not None and spec["priority"] != value:
            raise ApiError.forbidden("pods", name, (
                f"the integer value of priority ({spec['priority']}) must not be provided in pod spec; "
                f"priority admission controller computed {value} from the given PriorityClass name"
            ))
        policy = (chosen or {}).get("preemptionPolicy") or "PreemptLowerPriority"
        if spec.get("preemptionPolicy") is not None and spec["preemptionPolicy"] != policy:
            raise ApiError.forbidden("pods", name, (
                f"the string value of PreemptionPolicy ({spec['preemptionPolicy']}) must not be provided in pod spec; "
                f"priority admission controller computed {policy} from the given PriorityClass name"
            ))
        spec["priority"] = value
        spec["preemptionPolicy"] = policy

    def _storage_classes(self) -> builtins.list[JsonObject]:
        """The StorageClasses, for the storage admission plugins (:mod:`.storage`)."""
        return [s.obj for s in self._tables[RESOURCE_TYPES[Resource.STORAGECLASSES].key].objects.values()]

    def _prepare_identity(self, rt: ResourceType, obj: JsonObject, namespace: str | None) -> JsonObject:
        _check_type(rt, obj)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError.bad_request("metadata must be an object")
        if rt.namespaced:
            given = meta.get("namespace")
            if namespace and given and given != namespace:
                raise ApiError.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace or given or "default"
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(self._rng.choice(_NAME_CHARS) for _ in range(5))
        _validate_name(rt, meta.get("name"))
        return meta

    def update(
        self,
        resource: Resource | str,
        obj: JsonObject,
        namespace: str | None = None,
        *,
        subresource: Subresource | str | None = None,
    ) -> JsonObject:
        """Replace the object named by ``obj`` (PUT); see the module docstring."""
        rt = self.resource_type(resource)
        return self.update_stored(rt, _copy(obj), namespace, subresource=subresource).copy()

    def update_stored(
        self,
        rt: ResourceType,
        obj: JsonObject,
        namespace: str | None,
        *,
        name: str | None = None,
        subresource: Subresource | str | None = None,
    ) -> Stored:
        """Update from an object the caller hands over (it is modified); ``name``: the URL's name."""
        subresource = Subresource(subresource) if subresource else None
        _check_type(rt, obj)
        _decode_quantities(rt, obj)
        meta = obj.get("metadata")
        if not isinstance(meta, dict) or not meta.get("name"):
            raise ApiError.invalid(
                rt, name or "", "metadata.name", "FieldValueRequired", "Required value: name is required"
            )
        if name is not None and meta["name"] != name:
            raise ApiError.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
            )
        namespace = namespace or meta.get("namespace") or ("default" if rt.namespaced else None)
        if rt.namespaced and meta.get("namespace") not in (None, namespace):
            raise ApiError.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        if subresource is Subresource.STATUS and not rt.status_subresource:
            raise ApiError(404, Reason.NOT_FOUND, f"{rt.group_resource} has no status subresource")
        old = self.get_stored(rt, meta["name"], namespace)
        precondition = meta.get("resourceVersion")
        if precondition and parse_resource_version(precondition) != old.rv:
            raise ApiError.stale(rt, meta["name"])
        new = self._merge_update(rt, old, obj, subresource)
        if subresource is None:
            try:
                storage.admit_update(rt, old.obj, new, self._storage_classes)
            except storage.Refusal as refusal:
                raise ApiError.forbidden(rt.resource, meta["name"], str(refusal), rt.group) from None
        _decode_quantities(rt, new, canonical=True)
        self.admit(Attempt(Operation.UPDATE, rt, meta["name"], namespace if rt.namespaced else None, new, old.obj,
                           str(subresource or "")))
        stored = self.commit_update(rt, old, new)
        self._release_if_done(rt, stored)
        return stored

    def _merge_update(
        self, rt: ResourceType, stored: Stored, new: JsonObject, subresource: Subresource | None
    ) -> JsonObject:
        old = stored.obj
        if subresource is Subresource.STATUS:
            result = stored.copy()
            if "status" in new:
                result["status"] = new["status"]
            else:
                result.pop("status", None)
            _STATUS_CHECKS.get(rt.key, _no_checks)(rt, old, result)
            return result
        meta = new["metadata"]
        for owned in _SERVER_OWNED_METADATA:
            if owned in old["metadata"]:
                meta[owned] = old["metadata"][owned]
            else:
                meta.pop(owned, None)
        if old["metadata"].get("deletionTimestamp") is not None:
            added = set(meta.get("finalizers") or []) - set(old["metadata"].get("finalizers") or [])
            if added:
                raise ApiError.invalid(
                    rt,
                    meta["name"],
                    "metadata.finalizers",
                    "FieldValueForbidden",
                    f"Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {sorted(added)}",
                )
        if rt.status_subresource:
            if "status" in old:
                new["status"] = json.loads(_dumps(old["status"]))
            else:
                new.pop("status", None)
        if rt.resource is Resource.PODS:
            # the Priority admission plugin on an update keeps what it set at creation where the
            # update leaves it out (a change is then refused as any pod spec change)
            spec, old_spec = new.setdefault("spec", {}), old.get("spec") or {}
            for field in ("priority", "preemptionPolicy"):
                if field in old_spec and spec.get(field) is None:
                    spec[field] = old_spec[field]
        _DEFAULTERS.get(rt.key, _no_defaults)(new, False)
        _validate(rt, new)
        _CHECKS.get(rt.key, _no_checks)(rt, old, new)
        if rt.tracks_generation and new.get("spec") != old.get("spec"):
            meta["generation"] = old["metadata"].get("generation", 0) + 1
        return new

    def commit_update(self, rt: ResourceType, old: Stored, new: JsonObject) -> Stored:
        """Write ``new`` as the next version of ``old``, with no update strategy applied.

        For subresources implemented outside the store (pod binding, controllers writing status);
        a no-op, returning ``old``, when nothing changed.
        """
        _decode_quantities(rt, new, canonical=True)
        new["metadata"]["resourceVersion"] = str(old.rv)
        new.setdefault("apiVersion", rt.api_version)
        new.setdefault("kind", rt.kind)
        if new == old.obj:
            return old
        key = (new["metadata"].get("namespace", ""), new["metadata"]["name"])
        return self._commit(EventType.MODIFIED, rt, key, new, old)

    def patch(
        self,
        resource: Resource | str,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: PatchType | str = PatchType.MERGE,
        subresource: Subresource | str | None = None,
    ) -> JsonObject:
        """Patch the object; a ``resourceVersion`` the patch sets is a precondition."""
        rt = self.resource_type(resource)
        return self.patch_stored(rt, name, _copy(patch), namespace, patch_type, subresource).copy()

    def patch_stored(
        self,
        rt: ResourceType,
        name: str,
        patch: Any,
        namespace: str | None,
        patch_type: PatchType | str,
        subresource: Subresource | str | None,
        check: Callable[[JsonObject], None] | None = None,
    ) -> Stored:
        """Patch, then update; ``check`` sees the patched object first (field validation)."""
        current = self.get_stored(rt, name, namespace)
        if PatchType(patch_type) is PatchType.JSON:
            patched = json_patch(current.copy(), patch)
        elif PatchType(patch_type) is PatchType.STRATEGIC_MERGE:
            try:
                smp.check_supported(rt)
                patched = smp.apply_strategic_merge_patch(current.copy(), patch, schema_for(rt), original_is_ours=True)
            except smp.StrategicMergePatchError as error:
                raise ApiError(error.code, error.reason, error.message) from None
        elif isinstance(patch, dict):
            patched = merge_patch(current.copy(), patch)
        else:
            raise ApiError.bad_request("a merge patch must be a JSON object")
        if not isinstance(patched, dict):
            raise _patch_failed("the patched document is not an object")
        meta = patched.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise _patch_failed("metadata must be an object")
        meta.setdefault("resourceVersion", str(current.rv))
        if check is not None:
            check(patched)
        if meta.get("name") != name:
            raise _patch_failed("metadata.name cannot be changed by a patch")
        return self.update_stored(rt, patched, namespace, name=name, subresource=subresource)

    def delete(
        self,
        resource: Resource | str,
        name: str,
        namespace: str | None = None,
        *,
        preconditions: Mapping[str, str] | None = None,
        grace_period: int | None = None,
        propagation: Propagation | str | None = None,
    ) -> JsonObject:
        """Delete and return the object as deleted, or as marked for deletion (see :meth:`delete_stored`)."""
        rt = self.resource_type(resource)
        return self.delete_stored(
            rt, name, namespace, preconditions, grace_period=grace_period, propagation=propagation
        ).copy()

    def delete_stored(
        self,
        rt: ResourceType,
        name: str,
        namespace: str | None,
        preconditions: Mapping[str, str] | None = None,
        *,
        grace_period: int | None = None,
        propagation: Propagation | str | None = None,
        force: bool = False,
    ) -> Stored:
        """Delete as the registry does: gracefully for a pod on a node, held by finalizers.

        A pod bound to a node and not finished gets ``deletionTimestamp`` (now plus its grace
        period: ``grace_period``, else ``spec.terminationGracePeriodSeconds``) and stays until its
        kubelet deletes it again with grace 0; an object with ``metadata.finalizers`` gets
        ``deletionTimestamp`` and stays until the last finalizer is removed. Either way the
        answer is the object as marked (a ``MODIFIED`` event), not yet gone. ``force`` removes it
        at once whatever holds it (what the garbage collector of a deleted namespace does).
        ``propagation``: ``Orphan`` leaves the dependents (their owner reference removed); the
        default deletes them once the owner is gone (``Background``; ``Foreground`` is treated so).
        """
        old = self.get_stored(rt, name, namespace)
        _check_preconditions(rt, old, preconditions or {})
        if propagation is not None:
            try:
                propagation = Propagation(propagation)
            except ValueError:
                raise ApiError.bad_request(
                    f"propagationPolicy: Unsupported value: {propagation!r}: supported values: "
                    + ", ".join(f'"{p}"' for p in Propagation)
                ) from None
        if grace_period is not None and grace_period < 0:
            grace_period = 1
        meta = old.obj["metadata"]
        if not force:
            grace = self._grace_period(rt, old.obj, grace_period)
            if grace > 0 or meta.get("finalizers"):
                return self._mark_deleted(rt, old, grace, propagation)
        if rt.resource is Resource.NAMESPACES:
            self._empty_namespace(name)
        if propagation is Propagation.ORPHAN:
            self._orphan(meta["uid"])
        deleted = old.copy()
        return self._commit(EventType.DELETED, rt, self._key(rt, namespace, name), deleted, old)

    def _grace_period(self, rt: ResourceType, obj: JsonObject, asked: int | None) -> int:
        if rt.resource is not Resource.PODS:
            return 0
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
            return 0
        grace = asked if asked is not None else spec.get("terminationGracePeriodSeconds", 30)
        current = obj["metadata"].get("deletionGracePeriodSeconds")
        return min(grace, current) if current is not None else grace

    def _mark_deleted(
        self, rt: ResourceType, old: Stored, grace: int, propagation: Propagation | None
    ) -> Stored:
        new = old.copy()
        meta = new["metadata"]
        if meta.get("deletionTimestamp") is None or meta.get("deletionGracePeriodSeconds", 0) > grace:
            meta["deletionTimestamp"] = rfc3339(self.clock() + grace)
            meta["deletionGracePeriodSeconds"] = grace
        if propagation is Propagation.ORPHAN and "orphan" not in (meta.get("finalizers") or []):
            self._orphan(meta["uid"])
        return self.commit_update(rt, old, new)

    def _release_if_done(self, rt: ResourceType, stored: Stored) -> Stored | None:
        """Delete an object marked for deletion once nothing holds it any more (finalizers, grace)."""
        meta = stored.obj["metadata"]
        if meta.get("deletionTimestamp") is None or meta.get("finalizers"):
            return None
        if meta.get("deletionGracePeriodSeconds", 0) > 0:
            return None
        return self._commit(EventType.DELETED, rt, self._key(rt, meta.get("namespace"), meta["name"]), stored.copy(), stored)

    def _empty_namespace(self, namespace: str) -> None:
        for table in builtins.list(self._tables.values()):
            for stored in builtins.list(table.by_namespace.get(namespace, {}).values()):
                self.delete_stored(table.rt, stored.obj["metadata"]["name"], namespace, force=True)

    # ------------------------------------------------------------------ the garbage collector

    def dependents(self, uid: str) -> builtins.list[tuple[ResourceType, Stored]]:
        """The objects whose ``ownerReferences`` name ``uid``."""
        found = []
        for table_key, key in builtins.list(self._owned.get(uid, ())):
            table = self._tables.get(table_key)
            stored = table.objects.get(key) if table is not None else None
            if stored is not None:
                found.append((table.rt, stored))
        return sorted(found, key=lambda pair: (pair[0].key, pair[1].obj["metadata"].get("namespace", ""), pair[1].obj["metadata"]["name"]))

    def _orphan(self, uid: str) -> None:
        for rt, stored in self.dependents(uid):
            new = stored.copy()
            refs = [r for r in new["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
            if refs:
                new["metadata"]["ownerReferences"] = refs
            else:
                new["metadata"].pop("ownerReferences", None)
            self.commit_update(rt, stored, new)

    def _index_owners(self, change: Change) -> None:
        """Keep the owner index current, and collect the dependents of a deleted owner."""
        key = (change.new.obj["metadata"].get("namespace", ""), change.new.obj["metadata"]["name"])
        entry = (change.rt.key, key)
        before = {r.get("uid") for r in (change.old.obj["metadata"].get("ownerReferences") or [])} if change.old else set()
        after = (
            set()
            if change.type is EventType.DELETED
            else {r.get("uid") for r in change.new.obj["metadata"].get("ownerReferences") or []}
        )
        for uid in before - after:
            owned = self._owned.get(uid)
            if owned is not None:
                owned.discard(entry)
                if not owned:
                    del self._owned[uid]
        for uid in after - before:
            self._owned.setdefault(uid, set()).add(entry)
        if change.type is EventType.DELETED:
            for rt, stored in self.dependents(change.new.obj["metadata"]["uid"]):
                meta = stored.obj["metadata"]
                if meta.get("deletionTimestamp") is None:
                    with contextlib.suppress(ApiError):
                        self.delete_stored(rt, meta["name"], meta.get("namespace"))

    def _commit(self, kind: EventType, rt: ResourceType, key: Key, obj: JsonObject, old: Stored | None) -> Stored:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        stored = Stored.encode(rt, obj, self._rv)
        table = self._tables[rt.key]
        if kind is EventType.DELETED:
            table.remove(key)
        else:
            table.put(key, stored, old)
        change = Change(kind, rt, stored, old)
        table.record(change)
        for subscription in tuple(table.subscriptions):
            subscription.offer(change)
        for listener in self._listeners:
            listener(change)
        return stored

    @staticmethod
    def _key(rt: ResourceType, namespace: str | None, name: str) -> Key:
        return (namespace or "default", name) if rt.namespaced else ("", name)


# --------------------------------------------------------------------------- helpers


_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def rfc3339(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def parse_resource_version(text: str | None) -> int:
    """A resourceVersion as a number (``0`` for none); ``400`` when it is not one."""
    if text is None or text == "":
        return 0
    if not text.isdigit():
        raise ApiError.bad_request(f'resourceVersion: Invalid value: "{text}": must be a non-negative integer')
    return int(text)


def _decode_token(token: str) -> JsonObject:
    try:
        decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
        int(decoded["id"]), int(decoded["offset"])
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise ApiError.bad_request(f"continue key is not valid: {token!r}") from None
    return decoded


def _check_type(rt: ResourceType, obj: Any) -> None:
    if not isinstance(obj, dict):
        raise ApiError.bad_request(f"the body must be a {rt.kind} object")
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if api_version not in (None, "", rt.api_version):
        raise ApiError.bad_request(
            f"the API version in the data ({api_version}) does not match the expected API version ({rt.api_version})"
        )
    if kind not in (None, "", rt.kind):
        raise ApiError.bad_request(f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})")
    obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind


_PATH_SEGMENT_NAMED = frozenset(
    {Resource.ROLES, Resource.CLUSTERROLES, Resource.ROLEBINDINGS, Resource.CLUSTERROLEBINDINGS}
)


def _validate_name(rt: ResourceType, name: Any) -> None:
    if not name:
        raise ApiError.invalid(
            rt, "", "metadata.name", "FieldValueRequired", "Required value: name or generateName is required"
        )
    if rt.resource in _PATH_SEGMENT_NAMED:
        # RBAC objects are validated as path segments only (``system:discovery`` is a valid name)
        if isinstance(name, str) and name not in (".", "..") and not any(c in name for c in "/%"):
            return
        raise ApiError.invalid(
            rt, str(name), "metadata.name", "FieldValueInvalid",
            f'Invalid value: "{name}": may not contain \'/\' or \'%\' and may not be \'.\' or \'..\'',
        )
    pattern, limit = (_LABEL, 63) if rt.resource is Resource.NAMESPACES else (_SUBDOMAIN, 253)
    if not isinstance(name, str) or len(name) > limit or not pattern.fullmatch(name):
        raise ApiError.invalid(
            rt,
            str(name),
            "metadata.name",
            "FieldValueInvalid",
            f'Invalid value: "{name}": a lowercase RFC 1123 name must consist of lower case '
            "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
            "character",
        )


def _check_preconditions(rt: ResourceType, stored: Stored, preconditions: Mapping[str, str]) -> None:
    meta = stored.obj["metadata"]
    name = meta["name"]
    uid, rv = preconditions.get("uid"), preconditions.get("resourceVersion")
    if uid and uid != meta["uid"]:
        raise ApiError.conflict(
            rt, name, f"Precondition failed: UID in precondition: {uid}, UID in object meta: {meta['uid']}"
        )
    if rv and rv != meta["resourceVersion"]:
        raise ApiError.conflict(
            rt,
            name,
            f"Precondition failed: ResourceVersion in precondition: {rv}, "
            f"ResourceVersion in object meta: {meta['resourceVersion']}",
        )


__all__ = [  # the store's public face, with the records of the modules it was split into
    "DEFAULT_NAMESPACES", "DEFAULT_TOLERATION_SECONDS", "HIGHEST_USER_PRIORITY", "RESOURCE_TYPES", "SYSTEM_PRIORITY_CLASSES",
    "AdmissionHook", "ApiError", "Attempt", "Catalogue", "Change", "EventType", "FieldRequirement", "FieldSelector",
    "Filter", "JsonObject", "LabelSelector", "ListResult", "Operation", "PatchType", "Propagation", "Reason",
    "Resource", "ResourceType", "Store", "Stored", "Subresource", "Subscription", "WatchEvent", "failure_status",
    "json_patch", "merge_patch", "parse_resource_version", "rfc3339",
]
