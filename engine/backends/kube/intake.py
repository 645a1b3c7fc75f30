"""Intake: what the informers report, into the mirror, and the ConfigMaps usher reads.

Informers list and watch nodes, the pods with ``schedulerName: usher``, every assigned
unfinished pod (what other schedulers' pods hold), the queues and decisions ConfigMaps,
namespaces, PodDisruptionBudgets and the owners of pods (Jobs, JobSets, Kubeflow jobs,
RayClusters, LeaderWorkerSets, PodGroups: gang sizes); a console also watches usher's Events (the
scheduler's decisions). Each change is queued as a delta and applied between ticks (``drain``),
one object that cannot be applied logged and skipped. The queue config is parsed off the event
loop, within bounded-YAML limits; a config that cannot be read keeps the last good one and is
told in the log, the metrics, the audit trail and a Warning Event.
"""

from __future__ import annotations

import bisect
import logging
from dataclasses import replace
from typing import Any

from ...config_errors import ConfigRefusal
from ...scenario import ScenarioError, parse_queue_config_async
from ...state import AuditEntry
from .client import COMPONENT, ObjectRef
from .context import ASSIGNED_PODS, Context, EventReason, Source
from .decisions import DecisionsError, parse_decisions
from .dra import PATHS as DRA_PATHS
from .dra import DraKind
from .dra_pods import check_admin_access, holding_with_claims, node_with_devices, share_claims, with_claims
from .evictor import Evictor
from .informer import DeltaType, Informer
from .kubelet import KubeletRefusals
from .metrics import ErrorKind
from .objects import SCHEDULER_NAME, Phase, as_the_kubelet_counts, holding_of, key_of, parse_time, pod_view
from .owners import OWNER_RESOURCES, GroupSpec, OwnerKey, OwnerResource, infer_group
from .rbac import DECISIONS_CONFIG_KEY, DECISIONS_CONFIGMAP, QUEUES_CONFIG_KEY, QUEUES_CONFIGMAP
from .status import StatusWriter, shown_to_operators
from .teardown import Teardown
from .volumes import PATHS, StorageKind

log = logging.getLogger("usher.controller")

NO_GOOD_CONFIG_YET = "no good queue config has been loaded yet, so every pod waits (UnknownQueue) until it is fixed"
"""What a queue config error adds when there is no last good config to keep (at start)."""
#: the Events a console remembers having shown (by uid), to count a repeat on its line
DECISIONS_REMEMBERED = 10_000


class Intake:
    """The informers, and the deltas they queue, applied to the mirror."""

    def __init__(self, ctx: Context, status: StatusWriter, evictor: Evictor, teardown: Teardown) -> None:
        self.ctx = ctx
        self.status = status
        self.evictor = evictor
        self.teardown = teardown
        self.refusals = KubeletRefusals(ctx, status, self.apply)
        self.informers: list[Informer] = []
        #: owner informers by resource key (``batch/Job``); both MPIJob versions share one key
        self._owner_informers: dict[str, list[Informer]] = {}
        self._pods: Informer | None = None
        self._nodes: Informer | None = None
        #: the owners each usher pod's gang was read from, and the pods read from each owner
        self._depends: dict[str, tuple[OwnerKey, ...]] = {}
        self._dependents: dict[OwnerKey, set[str]] = {}
        #: each usher pod's gang as last inferred (an owner's status change that alters none is skipped)
        self._groups: dict[str, GroupSpec] = {}
        #: the lines of usher's Events in this (console's) audit trail, by the Event's uid (``_decision``)
        self._decisions_seen: dict[str, AuditEntry] = {}
        #: the newest queue ConfigMap seen, not yet parsed: (it, or None when deleted; the object last seen)
        self.pending_config: tuple[dict[str, Any] | None, dict[str, Any] | None] | None = None
        #: the ConfigMaps refused now (by name), with every error: what the console shows
        self.config_refusals: dict[str, ConfigRefusal] = {}
        #: while ``drain`` applies a batch: the pods whose claims' meaning changed, read again
        #: once at its end (a controller starting on 1,000 nodes sees 1,000 slices in one batch)
        self._dra_readers: set[str] | None = None

    def pod_object(self, key: str) -> dict[str, Any] | None:
        """An usher pod as its informer last saw it."""
        return self._pods.cache.get(key) if self._pods is not None else None

    def node_object(self, name: str) -> dict[str, Any] | None:
        """A Node as its informer last saw it."""
        return self._nodes.cache.get(name) if self._nodes is not None else None

    def start(self) -> list[Informer]:
        """Make the informers (``KubeController.run`` runs them)."""
        ctx = self.ctx

        def feed(source: Source):
            def put(kind: DeltaType, obj: dict[str, Any]) -> None:
                ctx.deltas.put_nowait((source, kind, obj))
                ctx.wake.set()

            return put

        def feed_storage(kind: StorageKind):
            def put(delta: DeltaType, obj: dict[str, Any]) -> None:
                ctx.deltas.put_nowait((Source.STORAGE, delta, {"kind": kind, "object": obj}))
                ctx.wake.set()

            return put

        def feed_dra(kind: DraKind):
            def put(delta: DeltaType, obj: dict[str, Any]) -> None:
                ctx.deltas.put_nowait((Source.DRA, delta, {"kind": kind, "object": obj}))
                ctx.wake.set()

            return put

        def feed_owner(resource: OwnerResource):
            def put(kind: DeltaType, obj: dict[str, Any]) -> None:
                ctx.deltas.put_nowait((Source.OWNERS, kind, {"resource": resource.key, "object": obj}))
                ctx.wake.set()

            return put

        client, namespace = ctx.client, ctx.namespace
        decisions = (
            # a console shows what the scheduler decided: usher's Events on pods (binds, preemptions, teardowns)
            [Informer(client, "/api/v1/events", field_selector=f"source={COMPONENT}", on_event=feed(Source.DECISIONS), optional=True)]
            if not ctx.schedules
            else []
        )
        self._owner_informers = {}
        for resource in OWNER_RESOURCES:
            informer = Informer(client, resource.path, on_event=feed_owner(resource), optional=True)
            self._owner_informers.setdefault(resource.key, []).append(informer)
        self._pods = Informer(client, "/api/v1/pods", field_selector=f"spec.schedulerName={SCHEDULER_NAME}", on_event=feed(Source.PODS))
        self._nodes = Informer(client, "/api/v1/nodes", on_event=feed(Source.NODES))
        budgets = (
            [Informer(client, "/apis/policy/v1/poddisruptionbudgets", on_event=feed(Source.BUDGETS), optional=True)]
            if ctx.schedules
            else []
        )
        self.informers = [
            *budgets,
            self._nodes,
            self._pods,
            Informer(client, "/api/v1/pods", field_selector=ASSIGNED_PODS, on_event=feed(Source.ASSIGNED_PODS)),
            Informer(
                client,
                f"/api/v1/namespaces/{namespace}/configmaps",
                field_selector=f"metadata.name={QUEUES_CONFIGMAP}",
                on_event=feed(Source.CONFIG),
            ),
            Informer(
                client,
                f"/api/v1/namespaces/{namespace}/configmaps",
                field_selector=f"metadata.name={DECISIONS_CONFIGMAP}",
                on_event=feed(Source.OPERATOR_DECISIONS),
            ),
            Informer(client, "/api/v1/namespaces", on_event=feed(Source.NAMESPACES)),
            *(inf for informers in self._owner_informers.values() for inf in informers),
            # a cluster without CSIStorageCapacity or CSINode (an old one) still schedules
            *(Informer(client, path, on_event=feed_storage(kind), optional=True) for kind, path in PATHS.items()),
            # a cluster that does not serve resource.k8s.io/v1 (before 1.34) still schedules
            *(Informer(client, path, on_event=feed_dra(kind), optional=True) for kind, path in DRA_PATHS.items()),
            *decisions,
        ]
        return self.informers

    def drain(self) -> None:
        """Apply every queued delta to the mirror; one object that cannot be applied is logged,
        counted and skipped, never the end of the loop."""
        deltas = self.ctx.deltas
        self._dra_readers = set()
        try:
            while not deltas.empty():
                source, kind, obj = deltas.get_nowait()
                try:
                    self.apply(source, kind, obj)
                except Exception:  # one bad object must not stop scheduling
                    self.ctx.metrics.controller_error(ErrorKind.WATCH)
                    log.exception("could not apply %s %s of %s", kind, source, key_of(obj) if "metadata" in obj else "?")
        finally:
            readers, self._dra_readers = self._dra_readers, None
            if readers:
                try:
                    self._review(readers, self.ctx.clock())
                except Exception:  # as for one bad object: logged, and the next change reads them again
                    self.ctx.metrics.controller_error(ErrorKind.WATCH)
                    log.exception("could not read again the claims of %d pods", len(readers))

    def apply(self, source: Source, kind: DeltaType, obj: dict[str, Any]) -> None:
        """One delta into the mirror (and the parts that remember pods: departures, the status
        writer, the teardown's retries, the budgets, the kubelet refusals)."""
        ctx = self.ctx
        mirror = ctx.mirror
        now = ctx.clock()
        deleted = kind == DeltaType.DELETED
        if source == Source.ASSIGNED_PODS:
            if (obj.get("spec") or {}).get("schedulerName") != SCHEDULER_NAME:
                held = None if deleted else holding_with_claims(holding_of(obj), mirror.dra.ask(obj))
                mirror.holding_changed(key_of(obj), held)
                self._uses_claims(key_of(obj), obj, deleted)
                mirror.pod_seen(key_of(obj), None if deleted else obj)
        elif source == Source.STORAGE:
            owned = obj["object"]
            kind = StorageKind(obj["kind"])
            mirror.volumes.object_changed(kind, key_of(owned), None if deleted else owned)
            ctx.storage_changed.set()
            mirror.storage_changed(now)
        elif source == Source.DRA:
            self._dra_changed(DraKind(obj["kind"]), obj["object"], deleted, now)
        elif source == Source.PODS:
            key = key_of(obj)
            self._uses_claims(key, obj, deleted)
            mirror.pod_seen(key, None if deleted else obj)
            phase = (obj.get("status") or {}).get("phase")
            before = mirror.dra.pods.get(key)
            mirror.dra.pod_changed(key, None if deleted else obj, live=phase not in (Phase.SUCCEEDED, Phase.FAILED))
            sharers = mirror.dra.sharers(key, before, obj)
            view = None if deleted else self._view(obj, self._group_of(key, obj))
            if deleted:
                self._forget_depends(key)
            refused = self.refusals.refused(key, obj, view)
            mirror.pod_changed(view, key, now)
            if refused is not None and view is not None:
                self.refusals.kubelet_refused(view, *refused)
            elif view is not None and view.phase == Phase.RUNNING:
                self.refusals.ran(view.gang)
            uid = obj.get("metadata", {}).get("uid", "")
            if deleted or (view is not None and not view.live):
                ctx.departures.gone(uid)
            ctx.departures.seen(key, uid)  # a new pod under the name: the one we evicted is gone
            if deleted:
                self.status.forget(key)
                self.teardown.forget(uid)
            if sharers:  # a claim it names is named by others (or no more): they are read again
                self._review(sharers, now)
        elif source == Source.NODES:
            name = obj["metadata"]["name"]
            mirror.node_changed(None if deleted else node_with_devices(obj, mirror.dra), name, now)
        elif source == Source.DECISIONS:
            if not deleted and shown_to_operators(obj):
                self._decision(obj)
        elif source == Source.NAMESPACES:
            name = obj["metadata"]["name"]
            mirror.namespace_changed(name, None if deleted else (obj["metadata"].get("labels") or {}))
            # its pods' claims may ask admin access, which its labels grant
            self._review([k for k in mirror.dra.pods if k.startswith(f"{name}/")], now)
        elif source == Source.OPERATOR_DECISIONS:
            self._load_decisions(None if deleted else obj)
        elif source == Source.BUDGETS:
            self.evictor.budget_changed(obj, deleted)
        elif source == Source.OWNERS:
            owned = obj["object"]
            meta = owned.get("metadata") or {}
            for pod_key in sorted(self._dependents.get((obj["resource"], meta.get("namespace", ""), meta.get("name", "")), ())):
                pod = self.pod_object(pod_key)
                before = self._groups.get(pod_key)
                if pod is None:
                    continue
                group = self._group_of(pod_key, pod)
                if group != before:  # its gang is another now, or its size, or its owner's annotations
                    mirror.pod_changed(self._view(pod, group), pod_key, now)
                    # the pods it shares a claim with judge that sharing by its gang
                    self._review(mirror.dra.sharers(pod_key, pod), now)
        else:
            self.pending_config = (None if deleted else obj, obj)

    def _view(self, pod: dict[str, Any], group: GroupSpec) -> Any:
        """An usher pod's view: its labels, owners and device claims (``dra_pods``)."""
        mirror = self.ctx.mirror
        ask = mirror.dra.ask(pod)
        view = share_claims(with_claims(pod_view(pod, group), ask), ask, self._gang_of)
        view = check_admin_access(view, ask, mirror.namespace_labels.get(view.namespace))
        return as_the_kubelet_counts(view, pod.get("spec") or {})

    def _gang_of(self, key: str) -> str | None:
        """The gang key of an usher pod seen (None: not yet)."""
        group = self._groups.get(key)
        return None if group is None else group.key

    def _dra_changed(self, kind: DraKind, obj: dict[str, Any], deleted: bool, now: float) -> None:
        """A claim, template, class or slice changed: the pods with claims are read again (their
        GPUs, nodes and problems may have changed), and on a slice change the nodes it names."""
        mirror = self.ctx.mirror
        mirror.dra.object_changed(kind, key_of(obj), None if deleted else obj)
        if kind == DraKind.SLICE:
            node = (obj.get("spec") or {}).get("nodeName")
            node_obj = self.node_object(node) if isinstance(node, str) else None
            if node_obj is not None:
                mirror.node_changed(node_with_devices(node_obj, mirror.dra), node, now)
        readers = mirror.dra.readers(kind, key_of(obj), obj)
        if self._dra_readers is not None:
            self._dra_readers.update(readers)  # read once the batch is applied (``drain``)
        else:
            self._review(readers, now)

    def _review(self, keys: Any, now: float) -> None:
        """Read again the usher pods ``keys`` whose claims' meaning may have changed."""
        mirror = self.ctx.mirror
        for key in sorted(keys):
            pod = self.pod_object(key)
            if pod is None:
                continue
            gang = mirror.gangs.get(mirror.pod_gang.get(key, ""))
            old = gang.pods.get(key.split("/", 1)[1]) if gang is not None else None
            view = self._view(pod, self._groups.get(key) or self._group_of(key, pod))
            if old is None or (old.gpu_milli, old.claim_nodes, old.problem, old.claims_waiting, old.rules) != \
                    (view.gpu_milli, view.claim_nodes, view.problem, view.claims_waiting, view.rules):
                mirror.pod_changed(view, key, now)
                if old is not None and old.node and view.node and (old.gpu_milli, old.gpus) != (view.gpu_milli, view.gpus):
                    # a running pod now counts a shared claim's devices (the one that did ended): the
                    # engine is built again, so its job is charged for them and they stay taken
                    mirror.dirty = True

    def _uses_claims(self, key: str, obj: dict[str, Any], deleted: bool) -> None:
        """Which claims a pod uses, and where (``volumes``): ReadWriteOncePod, Multi-Attach and
        attach limits count every pod, usher's or not; a pod that ended uses none."""
        ctx = self.ctx
        phase = (obj.get("status") or {}).get("phase")
        if ctx.mirror.volumes.pod_changed(key, None if deleted else obj, live=phase not in (Phase.SUCCEEDED, Phase.FAILED)):
            ctx.storage_changed.set()
            ctx.mirror.storage_changed(ctx.clock())

    def _decision(self, event: dict[str, Any]) -> None:
        """One of the scheduler's Events, into this (console's) audit trail, in time order: one
        line per Event, as ``kubectl get events`` lists them; a repeat (the recorder counts it on
        the Event already there) updates that line's count instead of adding one."""
        meta = event.get("metadata") or {}
        uid = str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
        message = str(event.get("message", ""))
        count = event.get("count") if isinstance(event.get("count"), int) else 1
        seen = self._decisions_seen.get(uid)
        if seen is not None:
            seen.result = message if count <= 1 else f"{message} (x{count})"
            return
        about = event.get("involvedObject") or {}
        target = f"{about.get('namespace')}/{about.get('name')}" if about.get("namespace") else str(about.get("name"))
        when = parse_time(event.get("firstTimestamp") or event.get("eventTime") or meta.get("creationTimestamp"))
        entry = AuditEntry(when, "scheduler", str(event.get("reason")), target, message if count <= 1 else f"{message} (x{count})")
        self._decisions_seen[uid] = entry
        while len(self._decisions_seen) > DECISIONS_REMEMBERED:
            del self._decisions_seen[next(iter(self._decisions_seen))]  # the oldest first
        audit = self.ctx.mirror.state.audit
        if audit and audit[-1].time > when:
            bisect.insort(audit, entry, key=lambda e: e.time)
        else:
            audit.append(entry)

    def _group_of(self, key: str, pod: dict[str, Any]) -> GroupSpec:
        """The pod's gang from its labels and its owners, remembering which owners it read."""
        served = {k for k, informers in self._owner_informers.items() if any(i.served for i in informers)}
        group = infer_group(pod, self._owner, served=served)
        if group.owner is not None and not group.waiting:
            found = self._owner(*group.owner)
            if found is not None:
                group = replace(group, uid=str((found.get("metadata") or {}).get("uid") or "") or None)
        self._forget_depends(key)
        self._groups[key] = group
        self._depends[key] = group.depends
        for owner in group.depends:
            self._dependents.setdefault(owner, set()).add(key)
        return group

    def _forget_depends(self, key: str) -> None:
        self._groups.pop(key, None)
        for owner in self._depends.pop(key, ()):
            pods = self._dependents.get(owner)
            if pods is not None:
                pods.discard(key)
                if not pods:
                    del self._dependents[owner]

    def _owner(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        """An owner as its informer last saw it (the lookup of ``owners.infer_group``)."""
        for informer in self._owner_informers.get(resource, ()):
            obj = informer.cache.get(f"{namespace}/{name}")
            if obj is not None:
                return obj
        return None

    def owner_object(self, resource: str, namespace: str, name: str) -> tuple[str, dict[str, Any]] | None:
        """An owner as its informer last saw it, with the ``apiVersion`` it was served in (list
        items of built-in kinds carry none)."""
        served = [r for r in OWNER_RESOURCES if r.key == resource]
        for owner, informer in zip(served, self._owner_informers.get(resource, ())):
            obj = informer.cache.get(f"{namespace}/{name}")
            if obj is not None:
                return owner.api_version, obj
        return None

    async def load_config(self) -> None:
        """Parse the queue ConfigMap's newest version, if one arrived (off the event loop: a
        large or hostile document must not stall the watches and the lease renewals)."""
        if self.pending_config is None:
            return
        (obj, seen), self.pending_config = self.pending_config, None
        mirror = self.ctx.mirror
        where = f"{self.ctx.namespace}/{QUEUES_CONFIGMAP}"
        # a good config has a queue (parse_queue_config refuses one without): none, none loaded yet
        loaded = bool(mirror.config.queues)
        keeping = "keeping the last good queue config" if loaded else NO_GOOD_CONFIG_YET
        if obj is None:
            self._config_error(ConfigRefusal(where, f"{where} {'was deleted' if loaded else 'does not exist'}; {keeping}"), seen)
            return
        text = (obj.get("data") or {}).get(QUEUES_CONFIG_KEY)
        if text is None:
            self._config_error(ConfigRefusal(where, f"{where} has no {QUEUES_CONFIG_KEY!r} key; {keeping}"), obj)
            return
        source = f"{where}[{QUEUES_CONFIG_KEY}]"
        try:
            config = await parse_queue_config_async(text, source, mirror.name)
        except ScenarioError as exc:
            self._config_error(ConfigRefusal.of_problems(where, f"invalid queue config in {source}; {keeping}", exc.problems), obj)
            return
        self.config_refusals.pop(QUEUES_CONFIGMAP, None)
        mirror.set_config(config, None)
        self.ctx.metrics.config_loaded(True)
        log.info("queue config loaded: %d queues", len(config.queues))

    def _load_decisions(self, obj: dict[str, Any] | None) -> None:
        """The operators' decisions as ConfigMap usher-decisions holds them now (deleted: none).
        One that cannot be read keeps the last good decisions (a typo must not release a hold)."""
        ctx = self.ctx
        where = f"{ctx.namespace}/{DECISIONS_CONFIGMAP}"
        source = f"{where}[{DECISIONS_CONFIG_KEY}]"
        try:
            decisions = parse_decisions(None if obj is None else (obj.get("data") or {}).get(DECISIONS_CONFIG_KEY), source)
        except DecisionsError as exc:
            refusal = ConfigRefusal.of_problems(where, f"invalid operator decisions in {source}; keeping the last good ones", exc.problems)
            if self.config_refusals.get(DECISIONS_CONFIGMAP) == refusal:
                return
            self.config_refusals[DECISIONS_CONFIGMAP] = refusal
            log.error("%s", refusal.text())
            message = refusal.event_message()
            ctx.mirror.state.audit.append(AuditEntry(ctx.clock(), "controller", "config", DECISIONS_CONFIGMAP, message))
            if ctx.is_leader and obj is not None:
                ctx.spawn(self.status.event(ObjectRef.to(obj, "ConfigMap"), EventReason.INVALID_OPERATOR_DECISIONS, message, warning=True))
            return
        self.config_refusals.pop(DECISIONS_CONFIGMAP, None)
        ctx.mirror.set_decisions(decisions)

    def _config_error(self, refusal: ConfigRefusal, obj: dict[str, Any] | None) -> None:
        """Refuse the queue config (the last good one stays): the log, the metric, the audit
        trail and, from the leader, a Warning Event on the ConfigMap say every error."""
        ctx = self.ctx
        text = refusal.text()
        if ctx.mirror.config_error == text:
            return
        self.config_refusals[QUEUES_CONFIGMAP] = refusal
        ctx.mirror.set_config(None, text)
        ctx.metrics.config_loaded(False)
        log.error("%s", text)
        message = refusal.event_message()
        ctx.mirror.state.audit.append(AuditEntry(ctx.clock(), "controller", "config", QUEUES_CONFIGMAP, message))
        if ctx.is_leader:
            ref = ObjectRef.to(obj, "ConfigMap") if obj is not None else ObjectRef("ConfigMap", QUEUES_CONFIGMAP, ctx.namespace)
            ctx.spawn(self.status.event(ref, EventReason.INVALID_QUEUE_CONFIG, message, warning=True))
