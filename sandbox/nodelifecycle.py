"""The node lifecycle controller and the pod garbage collector: what a control plane does to a
node that stops answering, and to the pods left behind on it.

The node lifecycle controller (kube-controller-manager's ``nodelifecycle``), from each node's
``Ready`` condition and ``spec.unschedulable``:

- taints the node as ``TaintNodesByCondition`` and taint-based eviction do: Ready ``False`` gives
  ``node.kubernetes.io/not-ready``, Ready ``Unknown`` (its kubelet stopped posting status)
  ``node.kubernetes.io/unreachable``, each with effect ``NoSchedule`` and ``NoExecute``, both with
  ``timeAdded``; Ready ``True`` takes them off again. ``spec.unschedulable`` gives
  ``node.kubernetes.io/unschedulable:NoSchedule`` while it is set. Other taints are the user's
  and are never touched. A node without a Ready condition (a bare object no kubelet has reported
  on) is left alone.
- holds the ``NoExecute`` taints back where evicting would do more harm than good, as its
  zone states do: when no node of any zone (label ``topology.kubernetes.io/zone``) is Ready, it
  takes them off every node (the control plane, not the nodes, is taken to be cut off); and in a
  zone of at most :data:`LARGE_CLUSTER_THRESHOLD` nodes that is partly disrupted (more than 2
  not Ready making at least :data:`UNHEALTHY_ZONE_THRESHOLD` of it, some still Ready)
  it adds none (the eviction rate of such a zone is 0); a zone wholly down beside healthy ones
  is evicted as usual.
- marks the pods on a node whose Ready condition leaves ``True`` not ready (``MarkPodsNotReady``:
  their ``Ready`` condition turns ``False``, reason and message kept): nobody can vouch for them.

The taint manager (in :mod:`usher.sandbox.kubelet`) then evicts each pod once its toleration of
the ``NoExecute`` taint runs out: every pod gets ``tolerationSeconds: 300`` for both taints
from the DefaultTolerationSeconds admission plugin (``Store`` applies it on create). A node whose
Ready condition is ``Unknown`` has no kubelet to finish a graceful deletion, so an evicted pod
stays ``Terminating`` (phase ``Running``) until the node comes back, is deleted, or is declared
out of service.

The pod garbage collector (``podgc``):

- a pod bound to a node that does not exist is, after :data:`ORPHAN_QUARANTINE` seconds, marked
  ``Failed`` with a ``DisruptionTarget`` condition (reason ``DeletionByPodGC``, "PodGC: node no
  longer exists") and deleted with grace 0;
- a terminating pod on a node that is not Ready and carries a ``node.kubernetes.io/out-of-service``
  taint (what an operator puts on a node known to be shut down) is marked ``Failed`` and deleted
  with grace 0.

Not modelled: heartbeats and the grace period before a silent node turns ``Unknown`` (the
sandbox's node failures write ``Unknown`` themselves), the eviction rate of a healthy zone (its
taints come at once), the ``NodeNotReady`` and ``TaintManagerEviction`` Events, the pressure
taints, and PodGC's threshold of terminated pods.
"""

from __future__ import annotations

from typing import Any

from .kinds import RESOURCE_TYPES, Resource
from .nodefit import is_terminal, node_ready, ready_status, set_condition
from .parts import Host, Part
from .store import ApiError, Change, EventType, Stored

JsonObject = dict[str, Any]

NODES = RESOURCE_TYPES[Resource.NODES]
PODS = RESOURCE_TYPES[Resource.PODS]

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"
CONTROLLED_TAINTS = frozenset({NOT_READY_TAINT, UNREACHABLE_TAINT, UNSCHEDULABLE_TAINT})
"""The taints this controller owns: it adds and removes these, and only these."""

ORPHAN_QUARANTINE = 40.0
"""Seconds PodGC waits before it deletes a pod whose node does not exist (kube's quarantine)."""

ZONE_LABEL = "topology.kubernetes.io/zone"
LARGE_CLUSTER_THRESHOLD = 50
"""A disrupted zone of at most this many nodes gets no taint evictions at all."""
UNHEALTHY_ZONE_THRESHOLD = 0.55
"""The share of a zone's nodes not Ready (more than 2 of them) that makes it partly disrupted."""


def kubelet_unreachable(node: JsonObject | None) -> bool:
    """Whether the node's kubelet has stopped posting status (Ready ``Unknown``): nothing on the
    node moves (no container starts, exits or is stopped) until it is back."""
    return node is not None and ready_status(node) == "Unknown"


class NodeLifecycle(Part):
    """The node lifecycle controller's taints and pod readiness, and the pod garbage collector."""

    resources = (Resource.NODES, Resource.PODS)

    def __init__(self, mgr: Host) -> None:
        super().__init__(mgr)
        self._nodes: set[str] = set()
        self._pods: set[tuple[str, str]] = set()
        self._all = True
        #: the Ready status each node was last seen with (to see it leave True)
        self._ready: dict[str, str | None] = {}
        #: nodes found missing whose pods PodGC collects when their quarantine ends
        self._quarantined: set[str] = set()
        #: the zones where NoExecute taints are added now; None: every zone is down, none kept
        self._evicting: frozenset[str] | None = frozenset()

    def on_change(self, change: Change) -> None:
        meta = change.new.obj["metadata"]
        if change.rt.resource == Resource.NODES:
            self._nodes.add(meta["name"])
            if change.type is EventType.DELETED:
                self._quarantine(meta["name"])
        elif change.rt.resource == Resource.PODS and change.type is not EventType.DELETED:
            if (change.new.obj.get("spec") or {}).get("nodeName"):
                self._pods.add((meta.get("namespace", ""), meta["name"]))

    def resync(self) -> None:
        self._all = True

    def dirty(self) -> bool:
        return self._all or bool(self._nodes) or bool(self._pods)

    def reconcile(self) -> None:
        if self._all:
            names = [s.obj["metadata"]["name"] for s in self.stored(Resource.NODES)]
            self._collect_all()
        else:
            names = sorted(self._nodes)
        pods, self._pods = self._pods, set()
        self._all, self._nodes = False, set()
        evicting = self._evicting_zones() if names else self._evicting
        if evicting != self._evicting:
            self._evicting = evicting
            names = [s.obj["metadata"]["name"] for s in self.stored(Resource.NODES)]
        for name in names:
            self.mgr.guard(lambda name=name: self._sync_node(name))
        for ns, name in sorted(pods):
            self.mgr.guard(lambda ns=ns, name=name: self._sync_pod(ns, name))

    def sync(self) -> None:  # pragma: no cover - reconcile is overridden
        pass

    # ------------------------------------------------------------------ nodes

    def _evicting_zones(self) -> frozenset[str] | None:
        """The zones where NoExecute taints are added (the zone states' eviction rates); None
        when every zone is down, and the NoExecute taints come off everywhere."""
        ready: dict[str, int] = {}
        not_ready: dict[str, int] = {}
        for stored in self.stored(Resource.NODES):
            node = stored.obj
            status = ready_status(node)
            if status is None:
                continue
            zone = (node["metadata"].get("labels") or {}).get(ZONE_LABEL, "")
            ready.setdefault(zone, 0)
            not_ready.setdefault(zone, 0)
            if status == "True":
                ready[zone] += 1
            else:
                not_ready[zone] += 1
        full = {z for z in ready if ready[z] == 0 and not_ready[z] > 0}
        if full and full == set(ready):
            return None  # every zone is down: the control plane is the one cut off
        out = set()
        for zone in ready:
            size = ready[zone] + not_ready[zone]
            # a zone all down beside healthy ones is evicted at the normal rate; one partly down
            # at a reduced rate, none at all when it is small
            partial = zone not in full and not_ready[zone] > 2 and not_ready[zone] / size >= UNHEALTHY_ZONE_THRESHOLD
            if partial and size <= LARGE_CLUSTER_THRESHOLD:
                continue
            out.add(zone)
        return frozenset(out)

    def _node(self, name: str) -> Stored | None:
        try:
            return self.store.get_stored(NODES, name)
        except ApiError:
            return None

    def _sync_node(self, name: str) -> None:
        stored = self._node(name)
        if stored is None:
            self._ready.pop(name, None)
            return
        node = stored.obj
        ready = ready_status(node)
        before = self._ready.get(name, "True")
        self._ready[name] = ready
        self._taint(stored, ready)
        if ready is not None and ready != "True" and before == "True":
            self._mark_pods_not_ready(name)
        if ready != "True":
            for pod in self._pods_on(name):
                self._collect_out_of_service(pod, node)

    def _taint(self, stored: Stored, ready: str | None) -> None:
        node = stored.obj
        spec = node.get("spec") or {}
        taints = list(spec.get("taints") or [])
        wanted: list[JsonObject] = []
        if ready in ("False", "Unknown"):
            key = NOT_READY_TAINT if ready == "False" else UNREACHABLE_TAINT
            wanted.append({"key": key, "effect": "NoSchedule"})
            zone = (node["metadata"].get("labels") or {}).get(ZONE_LABEL, "")
            has = any(t.get("key") == key and t.get("effect") == "NoExecute" for t in taints)
            if self._evicting is not None and (has or zone in self._evicting):
                wanted.append({"key": key, "effect": "NoExecute"})
        if spec.get("unschedulable"):
            wanted.append({"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"})
        if ready is None and not spec.get("unschedulable") and not any(t.get("key") in CONTROLLED_TAINTS for t in taints):
            return
        kept = [t for t in taints
                if t.get("key") not in CONTROLLED_TAINTS
                or any(t.get("key") == w["key"] and t.get("effect") == w["effect"] for w in wanted)]
        now = self.store.now()
        for w in wanted:
            if not any(t.get("key") == w["key"] and t.get("effect") == w["effect"] for t in kept):
                kept.append({**w, "timeAdded": now})
        if kept == taints:
            return
        new = stored.copy()
        if kept:
            new.setdefault("spec", {})["taints"] = kept
        else:
            new.setdefault("spec", {}).pop("taints", None)
        self.store.commit_update(NODES, stored, new)

    def _pods_on(self, node: str) -> list[Stored]:
        return list(self.store.list(PODS, field_selector=f"spec.nodeName={node}").items)

    def _mark_pods_not_ready(self, node: str) -> None:
        now = self.store.now()
        for stored in self._pods_on(node):
            if is_terminal(stored.obj):
                continue
            status = stored.obj.get("status") or {}
            if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []):
                continue
            pod = stored.copy()
            for c in pod.setdefault("status", {}).get("conditions") or []:
                if c.get("type") == "Ready":
                    c["status"], c["lastTransitionTime"] = "False", now
            self.store.commit_update(PODS, stored, pod)

    # ------------------------------------------------------------------ the pod garbage collector

    def _sync_pod(self, ns: str, name: str) -> None:
        try:
            stored = self.store.get_stored(PODS, name, ns)
        except ApiError:
            return
        node_name = (stored.obj.get("spec") or {}).get("nodeName")
        if not node_name:
            return
        node = self._node(node_name)
        if node is None:
            self._quarantine(node_name)
        elif ready_status(node.obj) != "True":
            self._collect_out_of_service(stored, node.obj)

    def _quarantine(self, node: str) -> None:
        """Collect the pods of a node that does not exist once it has been gone
        ``ORPHAN_QUARANTINE`` seconds (from when that was first seen; later pod updates do not
        put it off)."""
        if node in self._quarantined:
            return
        self._quarantined.add(node)

        def due() -> None:
            self._quarantined.discard(node)
            self._collect_all()

        self.mgr.at(self.mgr.now() + ORPHAN_QUARANTINE, ("podgc", node), due)

    def _collect_all(self) -> None:
        """Delete the pods bound to nodes that do not exist (after the quarantine)."""
        nodes = {s.obj["metadata"]["name"] for s in self.stored(Resource.NODES)}
        for stored in self.stored(Resource.PODS):
            node = (stored.obj.get("spec") or {}).get("nodeName")
            if node and node not in nodes:
                self._gc(stored, "DeletionByPodGC", "PodGC: node no longer exists")

    def _collect_out_of_service(self, stored: Stored, node: JsonObject) -> None:
        if not stored.obj["metadata"].get("deletionTimestamp"):
            return
        if node_ready(node) is True:
            return
        if any(t.get("key") == OUT_OF_SERVICE_TAINT for t in (node.get("spec") or {}).get("taints") or []):
            self._gc(stored, None, None)

    def _gc(self, stored: Stored, reason: str | None, message: str | None) -> None:
        """Mark the pod Failed (with a DisruptionTarget condition when given a reason), then
        delete it with grace 0."""
        pod = stored.copy()
        meta = pod["metadata"]
        if not is_terminal(pod):
            status = pod.setdefault("status", {})
            if reason is not None:
                set_condition(status, self.store.now(), "DisruptionTarget", "True", reason, message)
            status["phase"] = "Failed"
            stored = self.store.commit_update(PODS, stored, pod)
        try:
            self.store.delete_stored(PODS, meta["name"], meta.get("namespace"), {"uid": meta["uid"]}, force=True)
        except ApiError:
            pass
