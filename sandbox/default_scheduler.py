"""The default scheduler: binds the pods whose ``schedulerName`` is ``default-scheduler``.

A pending pod (no ``nodeName``, not being deleted) goes through the filters of the default
profile, in its order, each node stopping at the first that fails it:

- NodeUnschedulable: ``spec.unschedulable`` ("node(s) were unschedulable") unless tolerated;
- TaintToleration: ``NoSchedule``/``NoExecute`` taints, including the ``not-ready`` /
  ``unreachable`` taints of a node whose Ready condition is not True ("node(s) had untolerated
  taint {key: value}");
- NodeAffinity: ``nodeSelector`` and required node affinity, matchExpressions
  (In/NotIn/Exists/DoesNotExist/Gt/Lt) and matchFields ``metadata.name`` ("node(s) didn't match
  Pod's node affinity/selector");
- NodeResourcesFit: requests against allocatable beside every non-terminal pod bound there
  ("Insufficient nvidia.com/gpu", "Too many pods"; one reason per resource short);
- PodTopologySpread (:mod:`usher.sandbox.topology_spread`): ``DoNotSchedule`` constraints
  ("node(s) didn't match pod topology spread constraints");
- InterPodAffinity (:mod:`usher.sandbox.pod_affinity`): required affinity and anti-affinity
  of the pod, and the required anti-affinity of the pods already placed ("node(s) didn't match
  pod affinity rules", "... pod anti-affinity rules", "node(s) didn't satisfy existing pods
  anti-affinity rules").

Of the feasible nodes the best scored wins, ties by name: the least allocated (cpu, memory and
GPUs, averaged; weight 1) plus the preferred pod affinity and the ``ScheduleAnyway`` spread
(weight 2 each, as the default profile weighs them), each 0..100.

Gangs of the Workload API (:mod:`usher.sandbox.workload_api`), as the GangScheduling plugin of
1.35: a pod whose ``spec.workloadRef`` names a Workload or pod group that does not exist, or a
``gang`` group with fewer pods than ``minCount``, waits untried (PreEnqueue); then the group's
pending pods are placed together, each counting for the rules of the next, and bound only if at
least ``minCount`` of the group (those already bound included) found a node; else none is bound
(those that fit wait, as at Permit; those that fit nowhere say why). A ``basic`` group is
scheduled pod by pod; each ``podGroupReplicaKey`` is a gang of its own. A 1.36/1.37 pod's
``spec.schedulingGroup`` names a runtime PodGroup instead, whose ``spec.schedulingPolicy`` is
read the same way (one gang per PodGroup; the PodGroup's status is not written here).
A pod with ``spec.resourceClaims`` is not placed: this stand-in has no DynamicResources plugin
and says so in the pod's Unschedulable message (:data:`NO_DRA`) rather than bind a pod whose
claims nobody allocated. A pod that fits nowhere gets ``PodScheduled=False``, ``reason: Unschedulable`` and the real
message ("0/3 nodes are available: 1 node(s) had untolerated taint {k: v}, 2 Insufficient
nvidia.com/gpu. preemption: 0/3 nodes are available: 3 Preemption is not helpful for
scheduling."), and is tried again whenever a pod or a node changes. Pods go highest priority
first, then oldest. The scheduler keeps the keys of the pods it has waiting: while there are
none, the changes of other schedulers' pods (usher's binds, their status) and of nodes cost it
nothing, rather than a scan of every pod per change.

Volumes: kube-scheduler's VolumeBinding (:mod:`usher.sandbox.volume_binding`): PreFilter and
Filter on the pod's claims, and a PreBind that sets ``selected-node`` (or pre-binds a static
volume) and binds the pod only once every claim is bound; a PreBind failure is
``PodScheduled=False`` reason ``SchedulerError`` with a ``FailedScheduling`` event, retried
after a backoff (1 s doubling to 10 s).

Not modelled: preemption (the message's preemption part is always "Preemption is not helpful
for scheduling"), nominated nodes, the Permit timeout of a gang (its fitting pods wait for good),
the cluster's default spread constraints.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .kinds import RESOURCE_TYPES, Resource
from .nodefit import (
    CPU,
    MEMORY,
    PODS,
    add_usage,
    host_ports,
    insufficient,
    is_terminal,
    matches_node_selector,
    node_allocatable,
    node_taints,
    pod_requests,
    port_conflict,
    set_condition,
    untolerated,
)
from .events import EventType as Severity
from .events import record
from .parts import Host, Part
from .pod_affinity import Affinity
from .pod_affinity import has_rules as has_affinity
from .pod_affinity import scores as affinity_scores
from .pod_affinity import terms as affinity_terms
from .pod_affinity import Kind as AffinityKind
from .topology_spread import Spread, When
from .topology_spread import has_rules as has_spread
from .workload_api import GangKey, gang_of, pod_group_gang_of, scheduling_group, workload_ref
from .store import ApiError, Change, EventType, Stored
from .volume_binding import BIND_TIMEOUT, MAX_VOLUMES, Pending, VolumeBinding, pod_claims

JsonObject = dict[str, Any]

DEFAULT_SCHEDULER = "default-scheduler"
POD_RT = RESOURCE_TYPES[Resource.PODS]
RUNTIME_POD_GROUPS = "podgroups.scheduling.k8s.io"


def _gang_key(pod: JsonObject) -> GangKey | None:
    ref = workload_ref(pod)
    if ref is None:
        return None
    return (pod["metadata"].get("namespace", ""), str(ref.get("name") or ""), str(ref.get("podGroup") or ""),
            str(ref.get("podGroupReplicaKey") or ""))


@dataclass
class _Cluster:
    """What one pass of the scheduler sees: nodes, their labels, namespaces' labels, Workloads."""

    nodes: list[JsonObject]
    node_labels: dict[str, dict[str, str]]
    namespace_labels: dict[str, dict[str, str]]
    workloads: dict[tuple[str, str], JsonObject]
    anti_affinity: bool = False
    """Whether any pod placed has required anti-affinity (then every pod checks it)."""
    label_list: list[dict[str, str]] = field(default_factory=list)
    pod_groups: dict[tuple[str, str], JsonObject] = field(default_factory=dict)
    """1.36/1.37 runtime PodGroups (``scheduling.k8s.io``) by namespace and name."""

    def placed(self, bound: dict[str, list[JsonObject]]) -> Iterable[tuple[JsonObject, dict[str, str]]]:
        for name, pods in bound.items():
            labels = self.node_labels.get(name)
            if labels is not None:
                yield from ((p, labels) for p in pods)


@dataclass
class _Choice:
    node: JsonObject | None
    reasons: Counter[str]
    blocked: str | None = None


NO_DRA = ("the pod has resource claims (spec.resourceClaims), which the sandbox's default scheduler does not "
          "allocate: use a scheduler that does (usher), or allocate and reserve the claims and set spec.nodeName")
"""Why a pod with DRA claims waits: this stand-in has no DynamicResources plugin (said, not ignored)."""


def _waiting(pod: JsonObject) -> bool:
    """A pod this scheduler has to place: its own, unbound, not being deleted, not finished, ungated."""
    spec = pod.get("spec") or {}
    return (
        spec.get("schedulerName", DEFAULT_SCHEDULER) == DEFAULT_SCHEDULER
        and not spec.get("nodeName")
        and not pod["metadata"].get("deletionTimestamp")
        and not is_terminal(pod)
        and not spec.get("schedulingGates")
    )


_STORAGE = (Resource.PERSISTENTVOLUMECLAIMS, Resource.PERSISTENTVOLUMES, Resource.STORAGECLASSES, Resource.CSISTORAGECAPACITIES)


class DefaultScheduler(Part):
    resources = (Resource.PODS, Resource.NODES, Resource.NAMESPACES, Resource.WORKLOADS, Resource.PODGROUPS, *_STORAGE)

    def __init__(self, mgr: Host) -> None:
        super().__init__(mgr)
        self._waiting: set[tuple[str, str]] = set()
        """(namespace, name) of the pods waiting for this scheduler, as of the last change seen."""
        self.volumes = VolumeBinding(self.store)
        self._prebind: dict[tuple[str, str], Pending] = {}
        """Pods whose volumes are being bound on their chosen node (VolumeBinding's PreBind)."""
        self._backoff: dict[tuple[str, str], tuple[float, float]] = {}
        """Pods whose PreBind failed: not tried again before (when, last backoff)."""

    def on_change(self, change: Change) -> None:
        """Dirty when a pod of its own waits: then any pod or node change may let it fit."""
        if change.rt.resource == Resource.PODS:
            meta = change.new.obj["metadata"]
            key = (meta.get("namespace", ""), meta["name"])
            if change.type is not EventType.DELETED and _waiting(change.new.obj):
                self._waiting.add(key)
            else:
                self._waiting.discard(key)
        if change.rt.resource in self.resources and self._waiting:
            self._dirty = True

    def sync(self) -> None:
        pods = [s.obj for s in self.stored(Resource.PODS)]
        pending = [p for p in pods if _waiting(p)]
        self._waiting = {(p["metadata"].get("namespace", ""), p["metadata"]["name"]) for p in pending}
        if not pending:
            self._prebind.clear()
            return
        by_key = {(p["metadata"].get("namespace", ""), p["metadata"]["name"]): p for p in pending}
        for key in list(self._prebind):
            if key in by_key:
                self.mgr.guard(lambda key=key: self._finish_prebind(by_key[key], key))
            else:
                del self._prebind[key]
        now = self.mgr.now()
        pending = [p for key, p in by_key.items() if key not in self._prebind and self._backoff.get(key, (0.0, 0.0))[0] <= now]
        nodes = sorted((s.obj for s in self.stored(Resource.NODES)), key=lambda n: n["metadata"]["name"])
        used: dict[str, dict[str, int]] = {}
        bound: dict[str, list[JsonObject]] = {}
        for p in pods:
            node = (p.get("spec") or {}).get("nodeName")
            if node and not is_terminal(p):
                add_usage(used.setdefault(node, {}), pod_requests(p))
                bound.setdefault(node, []).append(p)
        for key, prebind in self._prebind.items():  # assumed on their node while their volumes bind
            add_usage(used.setdefault(prebind.node, {}), pod_requests(by_key[key]))
        pending.sort(key=lambda p: (-int((p.get("spec") or {}).get("priority") or 0),
                                    p["metadata"].get("creationTimestamp", ""), p["metadata"].get("namespace", ""),
                                    p["metadata"]["name"]))
        cluster = self._cluster(nodes, bound)
        gangs: dict[GangKey, tuple[int, list[JsonObject]]] = {}
        for pod in pending:
            if workload_ref(pod) is None and scheduling_group(pod) is None:
                self.mgr.guard(lambda pod=pod: self._schedule(pod, cluster, used, bound))
                continue
            if workload_ref(pod) is not None:
                gang = gang_of(pod, cluster.workloads)
            else:
                gang = pod_group_gang_of(pod, cluster.pod_groups)
            if gang is None:
                continue  # PreEnqueue: its Workload or pod group does not exist (yet)
            key, min_count = gang
            if min_count is None:
                self.mgr.guard(lambda pod=pod: self._schedule(pod, cluster, used, bound))
            else:
                gangs.setdefault(key, (min_count, []))[1].append(pod)
        for key, (min_count, members) in gangs.items():
            self.mgr.guard(lambda key=key, min_count=min_count, members=members:
                           self._schedule_gang(key, min_count, members, cluster, used, bound))

    def _cluster(self, nodes: list[JsonObject], bound: dict[str, list[JsonObject]]) -> _Cluster:
        node_labels = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in nodes}
        namespaces = {s.obj["metadata"]["name"]: s.obj["metadata"].get("labels") or {} for s in self.stored(Resource.NAMESPACES)}
        workloads: dict[tuple[str, str], JsonObject] = {}
        if Resource.WORKLOADS in self.resources:
            for stored in self.stored(Resource.WORKLOADS):
                meta = stored.obj["metadata"]
                workloads[(meta.get("namespace", ""), meta["name"])] = stored.obj
        anti = any(affinity_terms(p, AffinityKind.ANTI_AFFINITY) for pods in bound.values() for p in pods)
        cluster = _Cluster(nodes, node_labels, namespaces, workloads, anti, [node_labels[n["metadata"]["name"]] for n in nodes])
        try:  # the runtime PodGroups of 1.36/1.37, where served
            for stored in self.store.list(RUNTIME_POD_GROUPS).items:
                meta = stored.obj["metadata"]
                cluster.pod_groups[(meta.get("namespace", ""), meta["name"])] = stored.obj
        except ApiError:
            pass
        return cluster

    def _filter(self, pod: JsonObject, node: JsonObject, used: dict[str, dict[str, int]],
                bound: dict[str, list[JsonObject]]) -> list[str]:
        """The reasons ``node`` cannot take ``pod`` by the node, resource, port and volume filters."""
        spec = pod.get("spec") or {}
        taints = node_taints(node)
        if (node.get("spec") or {}).get("unschedulable"):
            unsched = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
            if untolerated(pod, [unsched]) is not None:
                return ["node(s) were unschedulable"]
        taints = [t for t in taints if t.get("key") != "node.kubernetes.io/unschedulable"]
        taint = untolerated(pod, taints)
        if taint is not None:
            return [f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value', '')}}}"]
        if not matches_node_selector(spec, node):
            return ["node(s) didn't match Pod's node affinity/selector"]
        name = node["metadata"]["name"]
        short = insufficient(pod_requests(pod), used.get(name, {}), node_allocatable(node))
        if short:
            return ["Too many pods" if r == PODS else f"Insufficient {r}" for r, *_ in short]
        wanted = host_ports(pod)
        if wanted and port_conflict(wanted, (p for other in bound.get(name, []) for p in host_ports(other))) is not None:
            return ["node(s) didn't have free ports for the requested pod ports"]
        if not pod_claims(pod):
            return []
        if self.volumes.limits_exceeded(pod, node, bound.get(name, [])):
            return [MAX_VOLUMES]
        volume = self.volumes.filter(pod, node)
        return [volume] if volume else []

    def _choose(self, pod: JsonObject, cluster: _Cluster, used: dict[str, dict[str, int]],
                bound: dict[str, list[JsonObject]]) -> _Choice:
        """The node the pod would go to (None: none fits, and why each does not)."""
        reasons: Counter[str] = Counter()
        blocked = self.volumes.prefilter(pod) if pod_claims(pod) else None
        if (pod.get("spec") or {}).get("resourceClaims"):
            blocked = NO_DRA
        if blocked is not None:
            return _Choice(None, reasons, blocked)
        spec = pod.get("spec") or {}
        affinity = (Affinity(pod, cluster.placed(bound), cluster.namespace_labels)
                    if has_affinity(pod) or cluster.anti_affinity else None)
        spread = soft = None
        if has_spread(pod):
            placed = [(p, name) for name, pods in bound.items() for p in pods]
            fits_affinity = lambda n: matches_node_selector(spec, n)  # noqa: E731
            tolerated = lambda n: untolerated(pod, node_taints(n)) is None  # noqa: E731
            spread = Spread(pod, When.DO_NOT_SCHEDULE, cluster.nodes, placed, fits_affinity, tolerated)
            soft = Spread(pod, When.SCHEDULE_ANYWAY, cluster.nodes, placed, fits_affinity, tolerated)
        feasible = []
        for node in cluster.nodes:
            why = self._filter(pod, node, used, bound)
            labels = cluster.node_labels[node["metadata"]["name"]]
            if not why and spread is not None and (reason := spread.filter(labels)) is not None:
                why = [reason]
            if not why and affinity is not None and (reason := affinity.filter(labels)) is not None:
                why = [reason]
            if why:
                reasons.update(why)
            else:
                feasible.append(node)
        if not feasible:
            return _Choice(None, reasons)
        labels = [cluster.node_labels[n["metadata"]["name"]] for n in feasible]
        extra = [0.0] * len(feasible)
        if has_affinity(pod) or cluster.anti_affinity or any(has_affinity(p) for pods in bound.values() for p in pods):
            extra = [e + 2 * a for e, a in zip(extra, affinity_scores(pod, labels, cluster.placed(bound), cluster.namespace_labels))]
        if soft is not None:
            extra = [e + 2 * t for e, t in zip(extra, soft.scores(labels))]
        requests = pod_requests(pod)
        ranked = [(100 * self._score(n, used.get(n["metadata"]["name"], {}), requests) + e,
                   [-ord(ch) for ch in n["metadata"]["name"]], i) for i, (n, e) in enumerate(zip(feasible, extra))]
        return _Choice(feasible[max(ranked)[2]], reasons)

    def _unschedulable(self, pod: JsonObject, choice: _Choice, nodes: int) -> None:
        meta = pod["metadata"]
        try:
            stored = self.store.get_stored(POD_RT, meta["name"], meta.get("namespace"))
        except ApiError:
            return
        new = stored.copy()
        parts = choice.blocked or ", ".join(sorted(f"{count} {reason}" for reason, count in choice.reasons.items()))
        message = f"0/{nodes} nodes are available: {parts}." if parts else f"0/{nodes} nodes are available."
        message += f" preemption: 0/{nodes} nodes are available: {nodes} Preemption is not helpful for scheduling."
        status = new.setdefault("status", {})
        set_condition(status, self.store.now(), "PodScheduled", "False", "Unschedulable", message)
        self.store.commit_update(POD_RT, stored, new)

    def _schedule(self, pod: JsonObject, cluster: _Cluster, used: dict[str, dict[str, int]],
                  bound: dict[str, list[JsonObject]]) -> None:
        choice = self._choose(pod, cluster, used, bound)
        if choice.node is None:
            self._unschedulable(pod, choice, len(cluster.nodes))
            return
        self._commit(pod, choice.node, cluster, used, bound)

    def _schedule_gang(self, key: GangKey, min_count: int, members: list[JsonObject], cluster: _Cluster,
                       used: dict[str, dict[str, int]], bound: dict[str, list[JsonObject]]) -> None:
        """Place the pending pods of one gang together; bind them only if the gang reaches ``minCount``."""
        already = sum(1 for pods in bound.values() for p in pods if _gang_key(p) == key)
        if already + len(members) < min_count:
            return  # PreEnqueue: not enough pods of the group yet
        trial_used = {name: dict(u) for name, u in used.items()}
        trial_bound = {name: list(pods) for name, pods in bound.items()}
        chosen: list[tuple[JsonObject, JsonObject]] = []
        failed: list[tuple[JsonObject, _Choice]] = []
        for pod in members:
            choice = self._choose(pod, cluster, trial_used, trial_bound)
            if choice.node is None:
                failed.append((pod, choice))
                continue
            name = choice.node["metadata"]["name"]
            add_usage(trial_used.setdefault(name, {}), pod_requests(pod))
            trial_bound.setdefault(name, []).append(pod)
            if affinity_terms(pod, AffinityKind.ANTI_AFFINITY):
                cluster.anti_affinity = True
            chosen.append((pod, choice.node))
        for pod, choice in failed:
            self._unschedulable(pod, choice, len(cluster.nodes))
        if already + len(chosen) < min_count:
            return  # all or nothing: the pods that fit wait, as at Permit
        for pod, node in chosen:
            self._commit(pod, node, cluster, used, bound)

    def _commit(self, pod: JsonObject, node: JsonObject, cluster: _Cluster, used: dict[str, dict[str, int]],
                bound: dict[str, list[JsonObject]]) -> None:
        meta = pod["metadata"]
        name = node["metadata"]["name"]
        add_usage(used.setdefault(name, {}), pod_requests(pod))
        if affinity_terms(pod, AffinityKind.ANTI_AFFINITY):
            cluster.anti_affinity = True
        if pod_claims(pod):
            prebind = self.volumes.prebind(pod, node)
            key = (meta.get("namespace", ""), meta["name"])
            self._prebind[key] = prebind
            self.mgr.at(prebind.since + BIND_TIMEOUT, ("prebind", key), self.resync)
            self._finish_prebind(pod, key)
            return
        try:
            stored = self.store.get_stored(POD_RT, meta["name"], meta.get("namespace"))
        except ApiError:
            return
        self._bind(stored, name)
        bound.setdefault(name, []).append(pod)

    def _finish_prebind(self, pod: JsonObject, key: tuple[str, str]) -> None:
        """Bind the pod once its volumes are bound; on a PreBind failure, back to the queue with why."""
        prebind = self._prebind[key]
        outcome = self.volumes.check(pod, prebind)
        if outcome is None:
            return
        del self._prebind[key]
        self.mgr.cancel(("prebind", key))
        try:
            stored = self.store.get_stored(POD_RT, key[1], key[0])
        except ApiError:
            return
        if outcome is True:
            self._backoff.pop(key, None)
            self._bind(stored, prebind.node)
            return
        new = stored.copy()
        set_condition(new.setdefault("status", {}), self.store.now(), "PodScheduled", "False", "SchedulerError", str(outcome))
        self.store.commit_update(POD_RT, stored, new)
        record(self.store, stored.obj, Severity.WARNING, "FailedScheduling", str(outcome), DEFAULT_SCHEDULER)
        _, last = self._backoff.get(key, (0.0, 0.0))
        wait = min(10.0, last * 2 if last else 1.0)  # podInitialBackoffSeconds 1, podMaxBackoffSeconds 10
        self._backoff[key] = (self.mgr.now() + wait, wait)
        self.mgr.at(self.mgr.now() + wait, ("backoff", key), self.resync)

    def _bind(self, stored: Stored, name: str) -> None:
        new = stored.copy()
        new["spec"]["nodeName"] = name
        status = new.setdefault("status", {})
        set_condition(status, self.store.now(), "PodScheduled", "True")
        for c in status["conditions"]:
            if c["type"] == "PodScheduled":
                c.pop("reason", None)
                c.pop("message", None)
        self.store.commit_update(POD_RT, stored, new)

    @staticmethod
    def _score(node: JsonObject, used: dict[str, int], requests: dict[str, int]) -> float:
        alloc = node_allocatable(node)
        scores = []
        for r in (CPU, MEMORY, "nvidia.com/gpu"):
            cap = alloc.get(r, 0)
            if cap <= 0:
                continue
            scores.append((cap - used.get(r, 0) - requests.get(r, 0)) / cap)
        return sum(scores) / len(scores) if scores else 0.0
