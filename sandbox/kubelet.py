"""A kubelet for every node, and the taint manager: what runs a bound pod in the sandbox.

For each pod bound to a node (``spec.nodeName``), except the scenario pods a
:class:`~usher.sandbox.world.World` runs itself:

- admission as the kubelet does it: the pod's requests (containers summed, the largest init
  container, ``spec.overhead``; cpu, memory, extended resources such as ``nvidia.com/gpu``, and
  the ``pods`` count) must fit the node's allocatable beside the non-terminal pods already
  admitted there, else the pod fails: ``phase: Failed``, ``reason: OutOf<resource>``, ``message:
  "Pod was rejected: Node didn't have enough resource: <resource>, requested: R, used: U,
  capacity: C"``; extended resources the node does not list at all are left out, as the
  kubelet leaves them out; then ``spec.nodeSelector`` and required node affinity against the
  node's labels (``reason: NodeAffinity``) and the host ports (``reason: NodePorts``), in the
  kubelet's order (only the first reason is written);
- a pod on a node whose Ready condition is not True is not started (it stays Pending);
- an admitted pod runs: ``phase: Running``, ``startTime``, ``podIP``/``hostIP``, one
  ``containerStatuses`` entry per container (ready, started, ``state.running.startedAt``, image,
  imageID, containerID, restartCount), the conditions PodReadyToStartContainers, Initialized,
  ContainersReady, Ready and PodScheduled all True;
- it runs for its ``usher/duration`` annotation (absent: until deleted), then its containers exit
  with the code in ``sandbox.usher/exit-code`` (default 0): Succeeded (reason Completed) or
  Failed (reason Error), unless ``restartPolicy`` restarts them (Always; OnFailure on a non-zero
  code): ``restartCount`` + 1 and ``lastState.terminated``;
- graceful deletion: once a pod has ``deletionTimestamp`` its containers get SIGTERM and exit at
  once (code 143), or, with the annotation ``sandbox.usher/ignore-sigterm: "true"``, are killed
  when the grace period ends (code 137); the kubelet writes the terminated status, then deletes
  the pod with grace 0. A pod that never started is deleted at once.

A node whose Ready condition is ``Unknown`` has lost its kubelet: nothing there starts, exits or
is stopped, so a pod deleted meanwhile stays ``Terminating`` and a run that ends meanwhile is
reported when the node is back (then the pods the node lifecycle controller marked not ready
are Ready again).

The taint manager (the node lifecycle controller's part) evicts any bound, running or pending
pod that does not tolerate a ``NoExecute`` taint in the node's ``spec.taints``: a
``DisruptionTarget`` condition (reason ``DeletionByTaintManager``) and a graceful delete, at
once or after the smallest ``tolerationSeconds`` of the tolerations that count (for each taint the
first that matches it, :func:`nodefit.eviction_delay`). The
``not-ready``/``unreachable`` taints come from :mod:`usher.sandbox.nodelifecycle`.

Volumes (:mod:`usher.sandbox.volume_manager`): a pod whose claims are missing or not bound,
or whose volume cannot attach on the node (node affinity, Multi-Attach), stays Pending with its
containers ``ContainerCreating`` and the real ``FailedMount``/``FailedAttachVolume`` event, and
starts once the claims and volumes allow it.

Not modelled: probes, image pulls, cgroups and eviction on node pressure, static pods.
"""

from __future__ import annotations

import calendar
import hashlib
import time
from dataclasses import dataclass
from typing import Any

from usher.engine.scenario.quantity import parse_duration

from .kinds import RESOURCE_TYPES, Resource
from .nodelifecycle import kubelet_unreachable
from .nodefit import (
    add_usage,
    eviction_delay,
    host_ports,
    insufficient,
    is_terminal,
    known_to_node,
    matches_node_selector,
    node_allocatable,
    node_ready,
    pod_requests,
    port_conflict,
    set_condition,
    tolerates,
)
from .events import record
from .parts import Host, Part
from .store import ApiError, Change, EventType, Stored, rfc3339
from .dra_kubelet import claim_problem
from .volume_manager import VolumeProblem, volume_problem

JsonObject = dict[str, Any]

DURATION_ANNOTATION = "usher/duration"
EXIT_CODE_ANNOTATION = "sandbox.usher/exit-code"
IGNORE_SIGTERM_ANNOTATION = "sandbox.usher/ignore-sigterm"

PODS = RESOURCE_TYPES[Resource.PODS]


def parse_time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def _hex(*parts: Any) -> str:
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()


@dataclass(slots=True)
class Run:
    """A pod the kubelet admitted: its containers' start and when they exit (None: never)."""

    node: str
    start: float
    end: float | None
    kill_at: float | None = None


class Kubelet(Part):
    resources = (Resource.PODS, Resource.NODES, Resource.PERSISTENTVOLUMECLAIMS, Resource.PERSISTENTVOLUMES,
                 Resource.RESOURCECLAIMS, Resource.RESOURCESLICES)

    def __init__(self, mgr: Host) -> None:
        super().__init__(mgr)
        self.runs: dict[str, Run] = {}
        self._pending: set[tuple[str, str]] = set()
        self._all = True
        self._node_index: dict[str, int] = {}
        self._ips: dict[str, int] = {}
        #: when the taint manager first saw each NoExecute taint a pod is waiting out, by pod uid
        #: and taint (its ``timeAdded`` among the key: a taint added again is a new one)
        self._taint_seen: dict[str, dict[tuple[str, str, str, str, str], float]] = {}
        #: pods seen on a node while its kubelet was silent (made Ready again when it is back)
        self._cut_off: set[str] = set()
        #: pods admitted but waiting for their volumes, by uid: (namespace, name) and what was last said
        self._volume_wait: dict[str, tuple[tuple[str, str], str]] = {}

    # ------------------------------------------------------------------ what changed

    def on_change(self, change: Change) -> None:
        if change.rt.resource == Resource.NODES:
            self._all = True
        elif change.rt.resource in (Resource.PERSISTENTVOLUMECLAIMS, Resource.PERSISTENTVOLUMES,
                                    Resource.RESOURCECLAIMS, Resource.RESOURCESLICES):
            self._pending.update(key for key, _ in self._volume_wait.values())
        elif change.rt.resource == Resource.PODS:
            if self._volume_wait and (change.type is EventType.DELETED or is_terminal(change.new.obj)):
                self._pending.update(key for key, _ in self._volume_wait.values())  # a Multi-Attach may be over
            meta = change.new.obj["metadata"]
            if change.type is EventType.DELETED:
                run = self.runs.pop(meta["uid"], None)
                if run is not None:
                    self.mgr.cancel(("exit", meta["uid"]))
                    self.mgr.cancel(("kill", meta["uid"]))
                self.mgr.cancel(("taint", meta["uid"]))
                self._taint_seen.pop(meta["uid"], None)
                self._cut_off.discard(meta["uid"])
                self._volume_wait.pop(meta["uid"], None)
            elif (change.new.obj.get("spec") or {}).get("nodeName"):
                self._pending.add((meta.get("namespace", ""), meta["name"]))

    def resync(self) -> None:
        self._all = True

    def dirty(self) -> bool:
        return self._all or bool(self._pending)

    def reconcile(self) -> None:
        if self._all:
            stored = [s for s in self.stored(Resource.PODS) if (s.obj.get("spec") or {}).get("nodeName")]
        else:
            stored = []
            for ns, name in self._pending:
                try:
                    stored.append(self.store.get_stored(PODS, name, ns))
                except ApiError:
                    pass
        self._all, self._pending = False, set()
        stored.sort(key=lambda s: (s.obj["metadata"].get("creationTimestamp", ""), s.obj["metadata"]["name"]))
        for s in stored:
            self.mgr.guard(lambda s=s: self.sync_pod(s.obj["metadata"].get("namespace", ""), s.obj["metadata"]["name"]))

    def sync(self) -> None:  # pragma: no cover - reconcile is overridden
        pass

    # ------------------------------------------------------------------ one pod

    def _current(self, ns: str, name: str, uid: str | None = None) -> Stored | None:
        try:
            stored = self.store.get_stored(PODS, name, ns)
        except ApiError:
            return None
        if uid is not None and stored.obj["metadata"]["uid"] != uid:
            return None
        return stored

    def _node(self, name: str) -> JsonObject | None:
        try:
            return self.store.get_stored(Resource.NODES, name).obj
        except ApiError:
            return None

    def sync_pod(self, ns: str, name: str) -> None:
        stored = self._current(ns, name)
        if stored is None:
            return
        pod = stored.obj
        meta, spec = pod["metadata"], pod.get("spec") or {}
        node_name = spec.get("nodeName")
        if not node_name:
            return
        node = self._node(node_name)
        if node is not None and not meta.get("deletionTimestamp") and not is_terminal(pod):
            if self._taint_manager(stored, node):
                return
        if self.mgr.skip(pod):
            return
        if kubelet_unreachable(node):
            self._cut_off.add(meta["uid"])
            return  # its kubelet is silent: nothing on the node starts, exits or is stopped
        if meta.get("deletionTimestamp"):
            self._terminate(stored)
            return
        if is_terminal(pod):
            return
        uid = meta["uid"]
        run = self.runs.get(uid)
        if run is not None:
            if run.end is not None and run.end <= self.mgr.now():
                self._exit(ns, name, uid)  # it ended while the node was cut off
            elif uid in self._cut_off and node is not None and node_ready(node) is True:
                self._cut_off.discard(uid)
                self._ready_again(stored)
            return
        if (pod.get("status") or {}).get("phase") == "Running":
            self._adopt(stored)
            return
        if node is None or node_ready(node) is not True:
            return
        self._admit(stored, node)

    # ------------------------------------------------------------------ the taint manager

    def _taint_manager(self, stored: Stored, node: JsonObject) -> bool:
        """Evict the pod (now or at a timer) if it does not tolerate a NoExecute taint; True if evicted now."""
        pod = stored.obj
        uid = pod["metadata"]["uid"]
        tolerations = (pod.get("spec") or {}).get("tolerations") or []
        evict_at: float | None = None
        now = self.mgr.now()
        for taint in (node.get("spec") or {}).get("taints") or []:
            if taint.get("effect") != "NoExecute":
                continue
            delay = eviction_delay(tolerations, taint)
            if delay is None:
                continue
            if delay == 0 and not tolerates(tolerations, taint):
                evict_at = now
                break
            key = (node["metadata"]["name"], taint.get("key", ""), taint.get("value", ""), taint.get("effect", ""),
                   str(taint.get("timeAdded", "")))
            since = self._taint_seen.setdefault(uid, {}).setdefault(key, parse_time(taint.get("timeAdded")) or now)
            at = since + delay
            evict_at = at if evict_at is None else min(evict_at, at)
        if evict_at is None:
            self.mgr.cancel(("taint", uid))
            self._taint_seen.pop(uid, None)
            return False
        ns, name = pod["metadata"].get("namespace", ""), pod["metadata"]["name"]
        if evict_at > now:
            self.mgr.at(evict_at, ("taint", uid), lambda: self._evict_if_due(ns, name, uid))
            return False
        self._evict(stored)
        return True

    def _evict_if_due(self, ns: str, name: str, uid: str) -> None:
        stored = self._current(ns, name, uid)
        if stored is None or stored.obj["metadata"].get("deletionTimestamp"):
            return
        node = self._node(stored.obj["spec"].get("nodeName", ""))
        if node is not None:
            self._taint_manager(stored, node)

    def _evict(self, stored: Stored) -> None:
        pod = stored.copy()
        meta = pod["metadata"]
        set_condition(pod.setdefault("status", {}), self.store.now(), "DisruptionTarget", "True",
                      "DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint")
        self.store.commit_update(PODS, stored, pod)
        self.store.delete_stored(PODS, meta["name"], meta.get("namespace"), {"uid": meta["uid"]})

    # ------------------------------------------------------------------ admission and start

    def _admit(self, stored: Stored, node: JsonObject) -> None:
        pod = stored.obj
        node_name = node["metadata"]["name"]
        used: dict[str, int] = {}
        ports: set[tuple[str, str, int]] = set()
        for other in self.store.list(PODS, field_selector=f"spec.nodeName={node_name}").items:
            o = other.obj
            if o["metadata"]["uid"] == pod["metadata"]["uid"] or is_terminal(o):
                continue
            if o["metadata"]["uid"] in self.runs or self.mgr.skip(o) or (o.get("status") or {}).get("phase") == "Running":
                add_usage(used, pod_requests(o))
                ports |= host_ports(o)
        allocatable = node_allocatable(node)
        short = insufficient(known_to_node(pod_requests(pod), allocatable), used, allocatable)
        if short:
            resource, want, have, cap = short[0]
            self._reject(stored, f"OutOf{resource}", f"Pod was rejected: Node didn't have enough resource: {resource}, "
                                                     f"requested: {want}, used: {have}, capacity: {cap}")
            return
        if not matches_node_selector(pod.get("spec") or {}, node):
            self._reject(stored, "NodeAffinity", "Pod was rejected: Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector")
            return
        if port_conflict(host_ports(pod), ports) is not None:
            self._reject(stored, "NodePorts", "Pod was rejected: Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports")
            return
        problem = volume_problem(self.store, pod, node) or claim_problem(self.store, pod, node)
        if problem is not None:
            self._wait_for_volumes(stored, node, problem)
            return
        self._volume_wait.pop(pod["metadata"]["uid"], None)
        self._start(stored, node)

    def _wait_for_volumes(self, stored: Stored, node: JsonObject, problem: VolumeProblem) -> None:
        """Admitted, but its volumes cannot be attached or mounted: ContainerCreating, and the event."""
        pod = stored.obj
        meta = pod["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        said = self._volume_wait.get(meta["uid"], (key, ""))[1]
        self._volume_wait[meta["uid"]] = (key, problem.message)
        new = stored.copy()
        status = new.setdefault("status", {})
        status.setdefault("startTime", self.store.now())
        status["containerStatuses"] = [
            {"name": c.get("name"), "state": {"waiting": {"reason": "ContainerCreating"}}, "lastState": {},
             "ready": False, "restartCount": 0, "image": c.get("image"), "imageID": "", "started": False}
            for c in (pod.get("spec") or {}).get("containers") or []
        ]
        set_condition(status, self.store.now(), "PodScheduled", "True")
        _order_conditions(status)
        self.store.commit_update(PODS, stored, new)
        if problem.message != said:
            host = node["metadata"]["name"] if problem.component == "kubelet" else None
            record(self.store, pod, problem.type, problem.reason, problem.message, problem.component, host)

    def _reject(self, stored: Stored, reason: str, message: str) -> None:
        """What the kubelet's admission does with a pod that does not fit: Failed, with why."""
        new = stored.copy()
        status = new.setdefault("status", {})
        status["phase"] = "Failed"
        status["reason"] = reason
        status["message"] = message
        status.setdefault("startTime", self.store.now())
        self.store.commit_update(PODS, stored, new)

    def _addresses(self, node: JsonObject, uid: str) -> tuple[str, str]:
        name = node["metadata"]["name"]
        index = self._node_index.setdefault(name, len(self._node_index) + 1)
        host = next(
            (a["address"] for a in (node.get("status") or {}).get("addresses") or [] if a.get("type") == "InternalIP"),
            f"10.0.{index // 250}.{index % 250 + 1}",
        )
        k = self._ips.get(name, 1) + 1
        self._ips[name] = k if k < 254 else 1
        return host, f"10.244.{index % 256}.{k}"

    def _container_ids(self, uid: str, c: JsonObject, restarts: int) -> tuple[str, str]:
        image = c.get("image") or "unknown"
        ref = image if "/" in image.split(":")[0] or "." in image.split("/")[0] else f"docker.io/library/{image}"
        return f"containerd://{_hex(uid, c.get('name'), restarts)}", f"{ref.split(':')[0]}@sha256:{_hex(image)}"

    def _running_status(self, uid: str, c: JsonObject, started: str, restarts: int, last: JsonObject | None) -> JsonObject:
        cid, image_id = self._container_ids(uid, c, restarts)
        return {
            "name": c.get("name"),
            "state": {"running": {"startedAt": started}},
            "lastState": last or {},
            "ready": True,
            "restartCount": restarts,
            "image": c.get("image"),
            "imageID": image_id,
            "containerID": cid,
            "started": True,
        }

    def _duration(self, pod: JsonObject) -> float | None:
        text = (pod["metadata"].get("annotations") or {}).get(DURATION_ANNOTATION)
        if not text:
            return None
        try:
            return parse_duration(text)
        except ValueError:
            return None

    def _start(self, stored: Stored, node: JsonObject) -> None:
        now = self.mgr.now()
        ts = rfc3339(now)
        pod = stored.copy()
        meta, spec = pod["metadata"], pod.get("spec") or {}
        uid = meta["uid"]
        status = pod.setdefault("status", {})
        host, ip = self._addresses(node, uid)
        status.update(
            phase="Running",
            hostIP=host,
            hostIPs=[{"ip": host}],
            podIP=ip,
            podIPs=[{"ip": ip}],
            startTime=ts,
        )
        for key in ("reason", "message", "nominatedNodeName"):
            status.pop(key, None)
        if spec.get("initContainers"):
            status["initContainerStatuses"] = [
                {
                    "name": c.get("name"),
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": ts, "finishedAt": ts,
                                             "containerID": self._container_ids(uid, c, 0)[0]}},
                    "lastState": {},
                    "ready": True,
                    "restartCount": 0,
                    "image": c.get("image"),
                    "imageID": self._container_ids(uid, c, 0)[1],
                    "containerID": self._container_ids(uid, c, 0)[0],
                    "started": False,
                }
                for c in spec["initContainers"]
            ]
        status["containerStatuses"] = [self._running_status(uid, c, ts, 0, None) for c in spec.get("containers") or []]
        for type_ in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready", "PodScheduled"):
            set_condition(status, ts, type_, "True")
        _order_conditions(status)
        self.store.commit_update(PODS, stored, pod)
        duration = self._duration(pod)
        run = Run(spec["nodeName"], now, now + duration if duration is not None else None)
        self.runs[uid] = run
        self._schedule_exit(pod, run)

    def _schedule_exit(self, pod: JsonObject, run: Run) -> None:
        if run.end is None:
            return
        ns, name, uid = pod["metadata"].get("namespace", ""), pod["metadata"]["name"], pod["metadata"]["uid"]
        self.mgr.at(run.end, ("exit", uid), lambda: self._exit(ns, name, uid))

    def _adopt(self, stored: Stored) -> None:
        """A pod already Running (this kubelet restarted): it runs on from its startTime."""
        pod = stored.obj
        start = parse_time((pod.get("status") or {}).get("startTime")) or self.mgr.now()
        duration = self._duration(pod)
        run = Run(pod["spec"]["nodeName"], start, start + duration if duration is not None else None)
        self.runs[pod["metadata"]["uid"]] = run
        self._schedule_exit(pod, run)

    # ------------------------------------------------------------------ exits

    def _terminated(self, c: JsonObject, uid: str, code: int, reason: str, status: JsonObject, ts: str) -> JsonObject:
        old = next((s for s in status.get("containerStatuses") or [] if s.get("name") == c.get("name")), {})
        restarts = old.get("restartCount", 0)
        cid, image_id = self._container_ids(uid, c, restarts)
        started = ((old.get("state") or {}).get("running") or {}).get("startedAt", ts)
        return {
            "name": c.get("name"),
            "state": {"terminated": {"exitCode": code, "reason": reason, "startedAt": started, "finishedAt": ts, "containerID": cid}},
            "lastState": old.get("lastState") or {},
            "ready": False,
            "restartCount": restarts,
            "image": c.get("image"),
            "imageID": image_id,
            "containerID": cid,
            "started": False,
        }

    def _write_exit(self, stored: Stored, code: int) -> None:
        """The containers exited with ``code``: the pod's terminal status."""
        pod = stored.copy()
        uid, spec = pod["metadata"]["uid"], pod.get("spec") or {}
        ts = self.store.now()
        status = pod.setdefault("status", {})
        reason = "Completed" if code == 0 else "Error"
        status["containerStatuses"] = [self._terminated(c, uid, code, reason, status, ts) for c in spec.get("containers") or []]
        status["phase"] = "Succeeded" if code == 0 else "Failed"
        done = "PodCompleted" if code == 0 else "PodFailed"
        set_condition(status, ts, "PodReadyToStartContainers", "False")
        set_condition(status, ts, "ContainersReady", "False", done)
        set_condition(status, ts, "Ready", "False", done)
        _order_conditions(status)
        self.store.commit_update(PODS, stored, pod)

    def _ready_again(self, stored: Stored) -> None:
        """A running pod marked not ready while its node was cut off: Ready again, as the kubelet
        reports once it is back."""
        conditions = (stored.obj.get("status") or {}).get("conditions") or []
        if all(c.get("status") == "True" for c in conditions if c.get("type") in ("Ready", "ContainersReady")):
            return
        pod = stored.copy()
        now = self.store.now()
        for type_ in ("ContainersReady", "Ready"):
            set_condition(pod.setdefault("status", {}), now, type_, "True")
        self.store.commit_update(PODS, stored, pod)

    def _exit(self, ns: str, name: str, uid: str) -> None:
        stored = self._current(ns, name, uid)
        run = self.runs.get(uid)
        if stored is None or run is None or stored.obj["metadata"].get("deletionTimestamp") or is_terminal(stored.obj):
            return
        if kubelet_unreachable(self._node(run.node)):
            return  # reported when the node is back (``sync_pod``)
        pod = stored.obj
        try:
            code = int((pod["metadata"].get("annotations") or {}).get(EXIT_CODE_ANNOTATION, "0"))
        except ValueError:
            code = 1
        policy = (pod.get("spec") or {}).get("restartPolicy", "Always")
        if policy == "Always" or (policy == "OnFailure" and code != 0):
            self._restart(stored, run, code)
            return
        del self.runs[uid]
        self._write_exit(stored, code)

    def _restart(self, stored: Stored, run: Run, code: int) -> None:
        now = self.mgr.now()
        ts = rfc3339(now)
        pod = stored.copy()
        uid = pod["metadata"]["uid"]
        status = pod.setdefault("status", {})
        statuses = []
        for c in pod["spec"].get("containers") or []:
            old = next((s for s in status.get("containerStatuses") or [] if s.get("name") == c.get("name")), {})
            restarts = old.get("restartCount", 0)
            cid = self._container_ids(uid, c, restarts)[0]
            started = ((old.get("state") or {}).get("running") or {}).get("startedAt", ts)
            last = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                   "startedAt": started, "finishedAt": ts, "containerID": cid}}
            statuses.append(self._running_status(uid, c, ts, restarts + 1, last))
        status["containerStatuses"] = statuses
        self.store.commit_update(PODS, stored, pod)
        duration = self._duration(pod)
        run.start, run.end = now, (now + duration if duration is not None else None)
        self._schedule_exit(pod, run)

    def _terminate(self, stored: Stored) -> None:
        """Graceful deletion: SIGTERM (or, ignored, the kill at the end of the grace period), then delete."""
        pod = stored.obj
        meta = pod["metadata"]
        uid, ns, name = meta["uid"], meta.get("namespace", ""), meta["name"]
        run = self.runs.get(uid)
        if run is not None and not is_terminal(pod):
            ignores = (meta.get("annotations") or {}).get(IGNORE_SIGTERM_ANNOTATION) == "true"
            now = self.mgr.now()
            if run.kill_at is None:
                run.kill_at = now + float(meta.get("deletionGracePeriodSeconds") or 0)
            if ignores and now < run.kill_at:
                self.mgr.at(run.kill_at, ("kill", uid), lambda: self._kill(ns, name, uid))
                return
            self._write_exit(stored, 137 if ignores else 143)
            self.runs.pop(uid, None)
            self.mgr.cancel(("exit", uid))
            stored = self._current(ns, name, uid) or stored
        self.runs.pop(uid, None)
        try:
            self.store.delete_stored(PODS, name, ns, {"uid": uid}, grace_period=0)
        except ApiError:
            pass

    def _kill(self, ns: str, name: str, uid: str) -> None:
        stored = self._current(ns, name, uid)
        if stored is not None and not kubelet_unreachable(self._node(stored.obj["spec"].get("nodeName", ""))):
            self._terminate(stored)


_CONDITION_ORDER = {t: i for i, t in enumerate(
    ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled", "DisruptionTarget"))}


def _order_conditions(status: JsonObject) -> None:
    status["conditions"] = sorted(status.get("conditions") or [], key=lambda c: _CONDITION_ORDER.get(c.get("type"), 99))


__all__ = ["Kubelet", "Run", "parse_time", "tolerates", "node_allocatable"]
