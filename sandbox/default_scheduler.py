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
- InterPodAffinity, required anti-affinity only ("node(s) didn't match pod anti-affinity rules").

Of the feasible nodes the least allocated (cpu, memory and GPUs, averaged) wins, ties by name.
A pod that fits nowhere gets ``PodScheduled=False``, ``reason: Unschedulable`` and the real
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

Not modelled: preemption, preferred (soft) affinity and spreading, pod affinity (only
anti-affinity), ports, scheduling gates, nominated nodes.
"""

from __future__ import annotations

from collections import Counter
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
from .store import ApiError, Change, EventType, LabelSelector, Stored
from .volume_binding import BIND_TIMEOUT, MAX_VOLUMES, Pending, VolumeBinding, pod_claims

JsonObject = dict[str, Any]

DEFAULT_SCHEDULER = "default-scheduler"
POD_RT = RESOURCE_TYPES[Resource.PODS]


def _anti_affinity_terms(pod: JsonObject) -> list[JsonObject]:
    anti = ((pod.get("spec") or {}).get("affinity") or {}).get("podAntiAffinity") or {}
    return list(anti.get("requiredDuringSchedulingIgnoredDuringExecution") or [])


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
    resources = (Resource.PODS, Resource.NODES, *_STORAGE)

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
        for pod in pending:
            self.mgr.guard(lambda pod=pod: self._schedule(pod, nodes, used, bound))

    def _filter(self, pod: JsonObject, node: JsonObject, used: dict[str, dict[str, int]],
                bound: dict[str, list[JsonObject]]) -> list[str]:
        """The reasons ``node`` cannot take ``pod`` (empty: it can)."""
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
        for term in _anti_affinity_terms(pod):
            if self._anti_affinity_violated(pod, term, node, bound):
                return ["node(s) didn't match pod anti-affinity rules"]
        if not pod_claims(pod):
            return []
        if self.volumes.limits_exceeded(pod, node, bound.get(name, [])):
            return [MAX_VOLUMES]
        volume = self.volumes.filter(pod, node)
        return [volume] if volume else []

    def _anti_affinity_violated(self, pod: JsonObject, term: JsonObject, node: JsonObject,
                                bound: dict[str, list[JsonObject]]) -> bool:
        key = term.get("topologyKey") or ""
        value = (node["metadata"].get("labels") or {}).get(key)
        if value is None:
            return False
        selector = LabelSelector.from_spec(term.get("labelSelector") or {})
        namespaces = set(term.get("namespaces") or [pod["metadata"].get("namespace", "default")])
        for other_node, others in bound.items():
            try:
                labels = self.store.get_stored(Resource.NODES, other_node).obj["metadata"].get("labels") or {}
            except ApiError:
                continue
            if labels.get(key) != value:
                continue
            for other in others:
                if other["metadata"].get("namespace") in namespaces and selector.matches(other["metadata"].get("labels") or {}):
                    return True
        return False

    def _schedule(self, pod: JsonObject, nodes: list[JsonObject], used: dict[str, dict[str, int]],
                  bound: dict[str, list[JsonObject]]) -> None:
        reasons: Counter[str] = Counter()
        feasible = []
        blocked = self.volumes.prefilter(pod) if pod_claims(pod) else None
        for node in nodes if blocked is None else ():
            why = self._filter(pod, node, used, bound)
            if why:
                reasons.update(why)
            else:
                feasible.append(node)
        meta = pod["metadata"]
        try:
            stored = self.store.get_stored(POD_RT, meta["name"], meta.get("namespace"))
        except ApiError:
            return
        new = stored.copy()
        if not feasible:
            n = len(nodes)
            parts = blocked or ", ".join(sorted(f"{count} {reason}" for reason, count in reasons.items()))
            message = f"0/{n} nodes are available: {parts}." if parts else f"0/{n} nodes are available."
            message += f" preemption: 0/{n} nodes are available: {n} Preemption is not helpful for scheduling."
            status = new.setdefault("status", {})
            set_condition(status, self.store.now(), "PodScheduled", "False", "Unschedulable", message)
            self.store.commit_update(POD_RT, stored, new)
            return
        requests = pod_requests(pod)
        best = max(feasible, key=lambda n: (self._score(n, used.get(n["metadata"]["name"], {}), requests),
                                            [-ord(ch) for ch in n["metadata"]["name"]]))
        name = best["metadata"]["name"]
        add_usage(used.setdefault(name, {}), requests)
        if pod_claims(pod):
            prebind = self.volumes.prebind(pod, best)
            key = (meta.get("namespace", ""), meta["name"])
            self._prebind[key] = prebind
            self.mgr.at(prebind.since + BIND_TIMEOUT, ("prebind", key), self.resync)
            self._finish_prebind(pod, key)
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
